//! `joinery bench sim`: list latency and memory of the emulated API server holding a large
//! cluster with a pod watch open.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;

use crate::commands::Execute;

/// `joinery bench sim …`
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    /// Nodes to load.
    #[arg(long, default_value_t = 5000)]
    pub nodes: usize,
    /// Pods to load.
    #[arg(long, default_value_t = 50000)]
    pub pods: usize,
    /// Measured runs of each list.
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

impl Execute for SimArgs {
    async fn execute(self) -> Result<ExitCode> {
        sim(self.nodes, self.pods, self.runs, self.json).await
    }
}

/// `joinery bench sim`: loads `nodes` nodes and `pods` pods into an in-process emulated API
/// server with a pod watch open, times lists over HTTP and prints medians and memory.
async fn sim(nodes: usize, pods: usize, runs: usize, json: bool) -> Result<ExitCode> {
    let options = joinery_emulator::bench::BenchOptions {
        nodes,
        pods,
        runs: runs.max(1),
        ..Default::default()
    };
    let report = joinery_emulator::bench::run(&options)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let millis = |d: Duration| d.as_secs_f64() * 1e3;
    let mib = |kib: Option<u64>| kib.map(|k| k as f64 / 1024.0);
    let loaded_objects = report.nodes + report.pods + report.other_objects;
    let growth_kib = report
        .rss_loaded_kib
        .zip(report.rss_before_kib)
        .map(|(after, before)| after.saturating_sub(before));
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
            "targets": report.targets().iter().map(|t| serde_json::json!({
                "name": t.name,
                "target": t.target,
                "measured": t.measured,
                "met": t.met,
            })).collect::<Vec<_>>(),
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
        growth_kib.map_or(String::new(), |kib| format!(
            " (~{:.1} KiB per object)",
            kib as f64 / loaded_objects.max(1) as f64
        ))
    );
    println!();
    println!(
        "{:<58} {:>7} {:>9} {:>5} {:>11} {:>10} {:>10}",
        "LIST (over HTTP)", "ITEMS", "MiB", "REQS", "MEDIAN ms", "MIN ms", "MAX ms"
    );
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
    println!();
    let default_size = joinery_emulator::bench::BenchOptions::default();
    let size_note = if (report.nodes, report.pods) == (default_size.nodes, default_size.pods) {
        String::new()
    } else {
        format!(
            " (set for {} nodes / {} pods; this run loaded {} / {})",
            default_size.nodes, default_size.pods, report.nodes, report.pods
        )
    };
    println!("targets{size_note}:");
    for target in report.targets() {
        let verdict = match target.met {
            Some(true) => "met",
            Some(false) => "NOT met",
            None => "not measured",
        };
        println!(
            "  {:<40} {:>10} {:>10}  {verdict}",
            target.name, target.target, target.measured
        );
    }
    Ok(ExitCode::SUCCESS)
}
