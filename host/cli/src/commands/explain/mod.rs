//! `joinery explain …`: why an object is where it is.

mod pod;

super::subcommands! {
    /// `joinery explain …`
    pub enum ExplainCommand {
        /// Why a pod is pending (the blocking constraint and the NodePools tried), or where it runs.
        Pod(pod::PodArgs),
    }
}
