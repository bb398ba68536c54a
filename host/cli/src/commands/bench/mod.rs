//! `joinery bench …`: benchmarks of the plugin runtime, the scheduler, disruption, the
//! controller against a large cluster, the emulated API server and whole simulated scenarios.

mod consolidation;
mod controller;
mod plugins;
mod scheduling;
mod sim;
mod simulate;

use anyhow::{Context, Result, bail};

/// Runs `joinery ARGS…` (this executable) as a child process and reads the one JSON row it
/// prints: the benchmarks measure each row in a fresh process, so that its peak memory is its
/// own. `what` names the row in errors.
fn child_row<R: serde::de::DeserializeOwned>(args: &[&str], what: &str) -> Result<R> {
    let exe = std::env::current_exe()
        .context("cannot find the joinery executable to run each benchmark row in")?;
    let output = std::process::Command::new(exe)
        .args(args)
        .output()
        .with_context(|| format!("cannot run the {what} row"))?;
    if !output.status.success() {
        bail!(
            "the {what} row failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    serde_json::from_slice(&output.stdout)
        .with_context(|| format!("{what} row: unreadable child output"))
}

super::subcommands! {
    /// `joinery bench …`
    pub enum BenchCommand {
        /// One full disruption pass (every method once) over clusters of 100 to 2,000 nodes with
        /// 10 pods each and a third of the capacity removable: wall time, simulations, the
        /// decision and its saving, peak memory.
        Consolidation(consolidation::ConsolidationArgs),
        /// `joinery run` as its own process against `joinery sim serve` preloaded with 5,000
        /// static nodes and 50,000 pods: first sync, the controller's memory and idle CPU,
        /// and the time from a burst of 1,000 pending pods to their NodeClaims.
        Controller(controller::ControllerArgs),
        /// Median cost of instantiate + call for the template renderer and a 400-offering pricing batch.
        Plugins(plugins::PluginsArgs),
        /// The provisioning scheduler on upstream Karpenter's benchmark workloads (the exact pod
        /// sets upstream solves): per row pods/s, nodes, cost and its lower bound, peak memory,
        /// and upstream's result beside them.
        #[command(alias = "scheduler")]
        Scheduling(scheduling::SchedulingArgs),
        /// The emulated API server holding a large cluster with a pod watch open: list latency
        /// over HTTP (medians of several runs) and memory.
        Sim(sim::SimArgs),
        /// Whole scenarios in virtual time (default: the quickstart and the 1,000- and
        /// 2,000-pod scale-outs): simulated and wall seconds, the speed-up, peak memory and
        /// the emulated API server's writes, one process per scenario.
        Simulate(simulate::SimulateBenchArgs),
    }
}
