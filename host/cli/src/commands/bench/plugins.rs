//! `joinery bench plugins`: the cost of a fresh-instance plugin call (instantiate + call),
//! measured as medians, for the template renderer and a pricing batch.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Result;
use joinery_runtime::contract::{KeyValue, PriceRequest, RenderContext, Taint};
use joinery_runtime::manifest::PluginKind;

use crate::commands::Execute;
use crate::plugin_options::PluginOptions;

/// `joinery bench plugins …`
#[derive(Debug, clap::Args)]
pub struct PluginsArgs {
    /// Measured calls per benchmark.
    #[arg(long, default_value_t = 2000)]
    pub iterations: usize,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

impl Execute for PluginsArgs {
    async fn execute(self) -> Result<ExitCode> {
        plugins(self.iterations, self.json).await
    }
}

/// Offerings in the pricing benchmark batch (Karpenter's benchmark catalog size).
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
    Summary {
        name,
        median: at(0.5),
        p90: at(0.9),
        p99: at(0.99),
        calls: samples.len(),
    }
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
                capacity_type: if i % 5 < 2 {
                    "spot".into()
                } else {
                    "on-demand".into()
                },
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
async fn plugins(iterations: usize, json: bool) -> Result<ExitCode> {
    let iterations = iterations.max(10);
    let options = PluginOptions {
        plugin_dirs: vec![],
        grants: None,
        plugin_cache_dir: None,
    };
    let registry = crate::plugin_options::open_registry(&options, Default::default())?;
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
        anyhow::ensure!(
            prices.len() == PRICING_BATCH,
            "pricing returned {} prices",
            prices.len()
        );
    }
    results.push(summarize(
        "synthetic pricing, 400-offering batch (instantiate + call)",
        samples,
    ));

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
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "benchmarks": rows }))?
        );
    } else {
        println!(
            "{:<60} {:>8} {:>12} {:>10} {:>10}",
            "BENCHMARK", "CALLS", "MEDIAN µs", "P90 µs", "P99 µs"
        );
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
