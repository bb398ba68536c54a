//! `joinery bench consolidation`: one full disruption pass (every method once, as `joinery
//! disrupt --all` evaluates them) over generated clusters of 100 to 2,000 nodes with 10 pods
//! per node and a third of the capacity removable. Each size runs in a fresh child process so
//! that the peak resident memory reported is that row's alone.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Result, bail};
use joinery_core::disruption::{Method, evaluate, fixture};
use serde::{Deserialize, Serialize};

use crate::commands::Execute;

/// The cluster sizes measured (nodes).
const SIZES: [usize; 4] = [100, 500, 1_000, 2_000];

/// `joinery bench consolidation …`
#[derive(Debug, clap::Args)]
pub struct ConsolidationArgs {
    /// Measure only these sizes (node counts; repeatable; default: 100, 500, 1000, 2000).
    #[arg(long = "nodes", value_name = "N")]
    pub nodes: Vec<usize>,
    /// Measured passes per size (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Print JSON: `{"rows": [{"nodes", "pods", "seconds", "candidatesSimulated", "nodesRemoved", "savingPerHour", "peakRssMiB"}]}`.
    #[arg(long)]
    pub json: bool,
    /// Internal: measure one size in this process and print its row as JSON.
    #[arg(long, hide = true)]
    pub child: bool,
}

impl Execute for ConsolidationArgs {
    async fn execute(self) -> Result<ExitCode> {
        let sizes = if self.nodes.is_empty() {
            SIZES.to_vec()
        } else {
            self.nodes.clone()
        };
        if let Some(zero) = sizes.iter().find(|n| **n == 0) {
            bail!("--nodes {zero}: a cluster needs at least one node");
        }
        if self.child {
            let [nodes] = sizes.as_slice() else {
                bail!("--child measures exactly one --nodes")
            };
            println!(
                "{}",
                serde_json::to_string(&measure(*nodes, self.runs.max(1)))?
            );
            return Ok(ExitCode::SUCCESS);
        }
        if !self.json {
            println!(
                "consolidation benchmark: one full pass (emptiness, static drift, drift, multi-node, single-node), median of {} run(s), one process per row",
                self.runs.max(1)
            );
            println!(
                "{:>6} {:>7} {:>10} {:>12} {:>14} {:>9} {:>13} {:>9}",
                "nodes",
                "pods",
                "pass",
                "simulations",
                "removed/repl.",
                "decision",
                "saving/h",
                "peak MiB"
            );
        }
        let mut rows = Vec::new();
        for nodes in sizes {
            let (runs, size) = (self.runs.max(1).to_string(), nodes.to_string());
            let row: Row = super::child_row(
                &[
                    "bench",
                    "consolidation",
                    "--child",
                    "--runs",
                    &runs,
                    "--nodes",
                    &size,
                ],
                &format!("{nodes}-node"),
            )?;
            if !self.json {
                println!(
                    "{:>6} {:>7} {:>8.1}ms {:>12} {:>7}/{:<6} {:>9} {:>13.3} {:>9}",
                    row.nodes,
                    row.pods,
                    row.seconds * 1000.0,
                    row.candidates_simulated,
                    row.nodes_removed,
                    row.nodes_replaced,
                    row.decision,
                    row.saving_per_hour,
                    row.peak_rss_mib
                        .map_or("-".to_string(), |m| format!("{m:.0}")),
                );
            }
            rows.push(row);
        }
        if self.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({ "rows": rows }))?
            );
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// One row (the `--json` output's `rows[]`; keep the names stable).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Row {
    nodes: usize,
    pods: usize,
    /// Median wall time of one full pass.
    seconds: f64,
    /// Scheduling simulations run in one pass (all methods).
    candidates_simulated: usize,
    /// Nodes the pass's command removes (the first method that decides, in upstream's order).
    nodes_removed: usize,
    /// Nodes it replaces (removed, with a replacement launched).
    nodes_replaced: usize,
    /// `delete`, `replace` or `none`.
    decision: String,
    /// What that command saves per hour.
    saving_per_hour: f64,
    #[serde(rename = "peakRssMiB")]
    peak_rss_mib: Option<f64>,
}

fn measure(nodes: usize, runs: usize) -> Row {
    let snapshot = fixture::consolidation_cluster(nodes);
    let pods = snapshot.candidates.iter().map(|c| c.pods.len()).sum();
    let mut times = Vec::new();
    let mut outcomes = Vec::new();
    for _ in 0..runs {
        let started = Instant::now();
        outcomes = Method::ALL
            .iter()
            .map(|m| evaluate(&snapshot, *m))
            .collect();
        times.push(started.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let command = outcomes.iter().find_map(|o| o.command.as_ref());
    let (removed, replaced) = match command {
        Some(c) if c.replacements.is_empty() => (c.candidates.len(), 0),
        Some(c) => (0, c.candidates.len()),
        None => (0, 0),
    };
    Row {
        nodes,
        pods,
        seconds: times[times.len() / 2],
        candidates_simulated: outcomes.iter().map(|o| o.simulations).sum(),
        nodes_removed: removed,
        nodes_replaced: replaced,
        decision: command.map_or("none".to_string(), |c| c.decision().as_str().to_string()),
        saving_per_hour: command.map_or(0.0, |c| c.saving_per_hour),
        peak_rss_mib: joinery_sim::bench::proc_status_kib("VmHWM").map(|kib| kib as f64 / 1024.0),
    }
}
