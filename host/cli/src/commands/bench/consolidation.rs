//! `joinery bench consolidation`: one full disruption pass (every method once, as `joinery
//! disrupt --all` evaluates them) over generated fleets of 100 to 2,000 nodes: `easy` (10 pods
//! per node, a third of the capacity removable), `full` (nothing can be consolidated: every
//! candidate is simulated and rejected, the worst case) or `mixed` (a tenth of the nodes can
//! go). Each size runs in a fresh child process so that the peak resident memory reported is
//! that row's alone.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Result, bail};
use joinery_core::disruption::fixture::{self, Fleet};
use joinery_core::disruption::{Method, evaluate};
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
    /// The fleet: `easy` (most nodes underused), `full` (nothing to consolidate: every
    /// candidate simulated and rejected) or `mixed` (a tenth of the nodes can go).
    #[arg(long, value_enum, default_value_t = FleetArg::Easy)]
    pub fleet: FleetArg,
    /// Measured passes per size (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Print JSON: `{"rows": [{"nodes", "pods", "seconds", "candidatesSimulated", "nodesRemoved", "savingPerHour", "peakRssMiB", "fleet", "simulationsPerSecond"}]}`.
    #[arg(long)]
    pub json: bool,
    /// Internal: measure one size in this process and print its row as JSON.
    #[arg(long, hide = true)]
    pub child: bool,
}

/// `--fleet`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FleetArg {
    /// Mixed sizes, two thirds full: the first candidates tried usually succeed.
    Easy,
    /// Nothing can be consolidated (the worst case).
    Full,
    /// A tenth of the nodes can go.
    Mixed,
}

impl FleetArg {
    fn fleet(self) -> Fleet {
        match self {
            FleetArg::Easy => Fleet::Easy,
            FleetArg::Full => Fleet::Full,
            FleetArg::Mixed => Fleet::Mixed,
        }
    }

    fn name(self) -> &'static str {
        match self {
            FleetArg::Easy => "easy",
            FleetArg::Full => "full",
            FleetArg::Mixed => "mixed",
        }
    }
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
                serde_json::to_string(&measure(self.fleet, *nodes, self.runs.max(1)))?
            );
            return Ok(ExitCode::SUCCESS);
        }
        if !self.json {
            println!(
                "consolidation benchmark, {} fleet: one full pass (emptiness, static drift, drift, multi-node, single-node), median of {} run(s), one process per row",
                self.fleet.name(),
                self.runs.max(1)
            );
            println!(
                "{:>6} {:>7} {:>10} {:>12} {:>10} {:>14} {:>9} {:>13} {:>9}",
                "nodes",
                "pods",
                "pass",
                "simulations",
                "sims/s",
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
                    "--fleet",
                    self.fleet.name(),
                ],
                &format!("{nodes}-node"),
            )?;
            if !self.json {
                println!(
                    "{:>6} {:>7} {:>8.1}ms {:>12} {:>10.0} {:>7}/{:<6} {:>9} {:>13.3} {:>9}",
                    row.nodes,
                    row.pods,
                    row.seconds * 1000.0,
                    row.candidates_simulated,
                    row.simulations_per_second,
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
    /// The fleet measured (`easy`, `full`, `mixed`).
    fleet: String,
    /// Scheduling simulations per second of the pass.
    simulations_per_second: f64,
}

fn measure(fleet: FleetArg, nodes: usize, runs: usize) -> Row {
    let snapshot = fixture::consolidation_fleet(fleet.fleet(), nodes);
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
    let seconds = times[times.len() / 2];
    let simulations: usize = outcomes.iter().map(|o| o.simulations).sum();
    Row {
        nodes,
        pods,
        seconds,
        candidates_simulated: simulations,
        fleet: fleet.name().to_string(),
        simulations_per_second: simulations as f64 / seconds.max(1e-9),
        nodes_removed: removed,
        nodes_replaced: replaced,
        decision: command.map_or("none".to_string(), |c| c.decision().as_str().to_string()),
        saving_per_hour: command.map_or(0.0, |c| c.saving_per_hour),
        peak_rss_mib: joinery_emulator::bench::proc_status_kib("VmHWM")
            .map(|kib| kib as f64 / 1024.0),
    }
}
