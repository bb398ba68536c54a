//! Every `joinery` command. Each top-level command is one module here (a folder when it has
//! subcommands) that owns both its clap arguments and the code that runs it; this module holds
//! the [`Command`] enum listing them and the [`Execute`] trait through which they are run.
//!
//! Adding a command: write `commands/NAME.rs` with a `#[derive(clap::Args)]` struct that
//! implements [`Execute`], declare `mod NAME;` below and add one documented variant to
//! [`Command`]. The [`subcommands!`] macro derives the dispatch, so nothing else changes.

use std::process::ExitCode;

use anyhow::Result;

/// The arguments of a command (or of a group of subcommands), able to run it.
pub trait Execute {
    /// Runs the command; the exit code it returns is the process's.
    async fn execute(self) -> Result<ExitCode>;

    /// The log filter used when `RUST_LOG` is unset: `info`, unless the command's output is a
    /// report that log lines on stderr would only clutter (`joinery run` reads upstream's
    /// `LOG_LEVEL`).
    fn default_log_level(&self) -> String {
        "info".to_string()
    }
}

/// Declares a clap `Subcommand` enum whose variants each wrap one command's arguments, and
/// implements [`Execute`] for it by passing each call on to the wrapped arguments. The
/// top-level [`Command`] and the subcommand groups (`bench`, `plugins`, …) are all declared
/// with it, so a new (sub)command is one variant line and never a hand-written `match` arm.
macro_rules! subcommands {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$attr:meta])* $variant:ident($args:ty), )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, clap::Subcommand)]
        pub enum $name {
            $( $(#[$attr])* $variant($args), )*
        }

        impl $crate::commands::Execute for $name {
            async fn execute(self) -> anyhow::Result<std::process::ExitCode> {
                match self {
                    $( Self::$variant(args) => $crate::commands::Execute::execute(args).await, )*
                }
            }

            fn default_log_level(&self) -> String {
                match self {
                    $( Self::$variant(args) => $crate::commands::Execute::default_log_level(args), )*
                }
            }
        }
    };
}
pub(crate) use subcommands;

mod bench;
mod crds;
mod disrupt;
mod explain;
mod plugins;
mod render;
mod run;
mod schedule;
mod sim;
mod simulate;
mod trace;

subcommands! {
    /// Subcommands.
    pub enum Command {
        /// Inspect, list and package plugins.
        #[command(subcommand)]
        Plugins(plugins::PluginsCommand),
        /// Render userData for a NodeClaim with a renderer plugin, as a launch would.
        Render(render::RenderArgs),
        /// Print the karpenter.sh CRDs (NodePool, NodeClaim, NodeOverlay), the CapacityBuffer CRD
        /// and the NodeClass CRDs of the built-in cloud plugins as YAML (or write one file per
        /// CRD with --out-dir).
        Crds(crds::CrdsArgs),
        /// Run benchmarks.
        #[command(subcommand)]
        Bench(bench::BenchCommand),
        /// Run a scenario (default: the built-in quickstart) against the emulated cluster and
        /// simulated cloud with the real host and plugins; exit 0 when its expectations hold.
        Simulate(simulate::SimulateArgs),
        /// Workload traces for `joinery simulate --trace`.
        #[command(subcommand)]
        Trace(trace::TraceCommand),
        /// The emulated cluster on its own.
        #[command(subcommand)]
        Sim(sim::SimCommand),
        /// Explain why an object is where it is.
        #[command(subcommand)]
        Explain(explain::ExplainCommand),
        /// Run the controllers against a real cluster (in-cluster config or --kubeconfig).
        /// Settings come from upstream's env vars (BATCH_IDLE_DURATION, METRICS_PORT, …).
        Run(run::RunArgs),
        /// Dry-run one provisioning pass over a cluster snapshot (multi-document YAML) and print
        /// where each pending pod would go and which NodeClaims would be created. Launches nothing.
        Schedule(schedule::ScheduleArgs),
        /// Dry-run one disruption pass over a cluster snapshot and print what Joinery would
        /// consolidate, replace or leave (and why), with each NodePool's budgets. Changes nothing.
        Disrupt(disrupt::DisruptArgs),
    }
}
