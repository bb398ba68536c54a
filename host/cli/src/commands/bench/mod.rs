//! `joinery bench …`: benchmarks of the plugin runtime, the scheduler and the emulated API
//! server.

mod plugins;
mod scheduling;
mod sim;

super::subcommands! {
    /// `joinery bench …`
    pub enum BenchCommand {
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
    }
}
