//! `joinery bench plugins`: the cost of a fresh-instance plugin call, measured as medians;
//! `joinery bench sim`: list latency and memory of the emulated API server under a large cluster.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Result;
use joinery_runtime::manifest::PluginKind;
use joinery_runtime::contract::{KeyValue, PriceRequest, RenderContext, Taint};

use crate::cli::PluginOptions;

/// Offerings in the pricing benchmark batch (Karpenter's benchmark catalogue size).
const PRICING_BATCH: usize = 400;
/// Unmeasured warm-up calls.
const WARMUP: usize = 200;

struct Summary {
    name: &'static str,
    median: Duration,
    p90: Duration,
    p99: Duration,
    calls: usize,
}

fn summarize(name: &'static str, mut samples: Vec<Duration>) -> Summary {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    Summary { name, median: at(0.5), p90: at(0.9), p99: at(0.99), calls: samples.len() }
}

fn render_context() -> RenderContext {
    RenderContext {
        node_claim: "default-x7k2p".into(),
        node_pool: "default".into(),
        labels: vec![
            KeyValue { key: "karpenter.sh/nodepool".into(), value: "default".into() },
            KeyValue { key: "node.kubernetes.io/instance-type".into(), value: "c3-8".into() },
            KeyValue { key: "topology.kubernetes.io/zone".into(), value: "zone-a".into() },
        ],
        taints: vec![Taint { key: "karpenter.sh/unregistered".into(), value: None, effect: "NoExecute".into() }],
        startup_taints: vec![],
        kubelet: "{}".into(),
        instance_type: Some("c3-8".into()),
        zone: Some("zone-a".into()),
        capacity_type: Some("on-demand".into()),
        cluster_name: "bench".into(),
        cluster_endpoint: "https://10.0.0.1:6443".into(),
        provider_id_prefix: "sim://".into(),
        user_data: Some("#!/bin/sh\necho joining {{joinery.nodeClaim}} with labels {{joinery.nodeLabels}} and taints {{joinery.nodeTaints}}\n".into()),
        parameters: vec![],
        secrets: vec![],
        resource_requests: vec![],
    }
}

fn price_batch() -> Vec<PriceRequest> {
    (0..PRICING_BATCH)
        .map(|i| {
            let cpus = (i / 5 + 1) as u64;
            PriceRequest {
                instance_type: format!("fake-it-{}", i / 5),
                zone: format!("test-zone-{}", i % 3 + 1),
                capacity_type: if i % 5 < 2 { "spot".into() } else { "on-demand".into() },
                cpu_millis: cpus * 1000,
                memory_bytes: cpus * 2 * 1024 * 1024 * 1024,
                gpu_count: 0,
                known_price: None,
                labels: vec![],
            }
        })
        .collect()
}

/// Runs the plugin benchmarks and prints medians.
pub async fn plugins(iterations: usize, json: bool) -> Result<ExitCode> {
    let iterations = iterations.max(10);
    let options = PluginOptions { plugin_dirs: vec![], grants: None, plugin_cache_dir: None };
    let registry = crate::plugins_cmd::open_registry(&options, Default::default())?;
    let set = registry.current();
    let template = set.require("template", PluginKind::UserdataRenderer)?;
    let pricing = set.require("synthetic-pricing", PluginKind::Pricing)?;
    let context = render_context();
    let batch = price_batch();

    let mut results = Vec::new();
    for _ in 0..WARMUP {
        template.render(&context).await?;
    }
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = Instant::now();
        template.render(&context).await?;
        samples.push(start.elapsed());
    }
    results.push(summarize("template render (instantiate + call)", samples));

    let pricing_iterations = (iterations / 4).max(10);
    for _ in 0..WARMUP / 4 {
        pricing.price(&batch).await?;
    }
    let mut samples = Vec::with_capacity(pricing_iterations);
    for _ in 0..pricing_iterations {
        let start = Instant::now();
        let prices = pricing.price(&batch).await?;
        samples.push(start.elapsed());
        anyhow::ensure!(prices.len() == PRICING_BATCH, "pricing returned {} prices", prices.len());
    }
    results.push(summarize("synthetic pricing, 400-offering batch (instantiate + call)", samples));

    if json {
        let rows: Vec<_> = results
            .iter()
            .map(|s| {
                serde_json::json!({
                    "name": s.name,
                    "calls": s.calls,
                    "medianMicros": s.median.as_secs_f64() * 1e6,
                    "p90Micros": s.p90.as_secs_f64() * 1e6,
                    "p99Micros": s.p99.as_secs_f64() * 1e6,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "benchmarks": rows }))?);
    } else {
        println!("{:<60} {:>8} {:>12} {:>10} {:>10}", "BENCHMARK", "CALLS", "MEDIAN µs", "P90 µs", "P99 µs");
        for s in &results {
            println!(
                "{:<60} {:>8} {:>12.1} {:>10.1} {:>10.1}",
                s.name,
                s.calls,
                s.median.as_secs_f64() * 1e6,
                s.p90.as_secs_f64() * 1e6,
                s.p99.as_secs_f64() * 1e6
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `joinery bench sim`: loads `nodes` nodes and `pods` pods into an in-process emulated API
/// server with a pod watch open, times lists over HTTP and prints medians and memory.
pub async fn sim(nodes: usize, pods: usize, runs: usize, json: bool) -> Result<ExitCode> {
    let options = joinery_sim::bench::BenchOptions { nodes, pods, runs: runs.max(1), ..Default::default() };
    let report = joinery_sim::bench::run(&options).await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let millis = |d: Duration| d.as_secs_f64() * 1e3;
    let mib = |kib: Option<u64>| kib.map(|k| k as f64 / 1024.0);
    let loaded_objects = report.nodes + report.pods + report.other_objects;
    let growth_kib = report.rss_loaded_kib.zip(report.rss_before_kib).map(|(after, before)| after.saturating_sub(before));
    if json {
        let lists: Vec<_> = report
            .lists
            .iter()
            .map(|l| {
                serde_json::json!({
                    "name": l.name,
                    "items": l.items,
                    "bytes": l.bytes,
                    "requests": l.requests,
                    "runs": l.samples.len(),
                    "medianMillis": millis(l.median()),
                    "minMillis": millis(l.min()),
                    "maxMillis": millis(l.max()),
                })
            })
            .collect();
        let document = serde_json::json!({
            "nodes": report.nodes,
            "pods": report.pods,
            "otherObjects": report.other_objects,
            "loadSeconds": report.load_time.as_secs_f64(),
            "watchEvents": report.watch_events,
            "watchRestarts": report.watch_restarts,
            "rssBeforeMiB": mib(report.rss_before_kib),
            "rssLoadedMiB": mib(report.rss_loaded_kib),
            "rssPeakMiB": mib(report.rss_peak_kib),
            "bytesPerObject": growth_kib.map(|kib| kib as f64 * 1024.0 / loaded_objects.max(1) as f64),
            "lists": lists,
        });
        println!("{}", serde_json::to_string_pretty(&document)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "emulated API server: {} nodes, {} pods, {} namespaces and ReplicaSets; loaded in {:.1} s with a pod watch open ({} ADDED events, {} restarts)",
        report.nodes,
        report.pods,
        report.other_objects,
        report.load_time.as_secs_f64(),
        report.watch_events,
        report.watch_restarts
    );
    let show = |kib: Option<u64>| mib(kib).map_or("n/a".to_string(), |m| format!("{m:.0} MiB"));
    println!(
        "memory (RSS): {} before, {} loaded, {} peak after the lists{}",
        show(report.rss_before_kib),
        show(report.rss_loaded_kib),
        show(report.rss_peak_kib),
        growth_kib.map_or(String::new(), |kib| format!(" (~{:.1} KiB per object)", kib as f64 / loaded_objects.max(1) as f64))
    );
    println!();
    println!("{:<58} {:>7} {:>9} {:>5} {:>11} {:>10} {:>10}", "LIST (over HTTP)", "ITEMS", "MiB", "REQS", "MEDIAN ms", "MIN ms", "MAX ms");
    for l in &report.lists {
        println!(
            "{:<58} {:>7} {:>9.1} {:>5} {:>11.1} {:>10.1} {:>10.1}",
            l.name,
            l.items,
            l.bytes as f64 / (1024.0 * 1024.0),
            l.requests,
            millis(l.median()),
            millis(l.min()),
            millis(l.max())
        );
    }
    println!("(medians of {} runs each)", options.runs);
    Ok(ExitCode::SUCCESS)
}
