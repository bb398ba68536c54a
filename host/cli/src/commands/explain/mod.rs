//! `joinery explain …`: why an object is where it is.

mod buffers;
mod capacity;
mod node;
mod pod;

super::subcommands! {
    /// `joinery explain …`
    pub enum ExplainCommand {
        /// Why a pod is pending (the blocking constraint and the NodePools tried), or where it runs.
        Pod(pod::PodArgs),
        /// Why a node of a cluster snapshot is or is not disrupted: its NodePool's budgets, each
        /// method's verdict, and what consolidating it would save.
        Node(node::NodeArgs),
        /// The instance-type capacity learned from the nodes that joined, which the controller
        /// uses in place of the cloud plugins' estimates.
        Capacity(capacity::CapacityArgs),
        /// Each CapacityBuffer of a cluster snapshot: its chunks, the capacity it holds and on
        /// which nodes, and what it costs per hour.
        Buffers(buffers::BuffersArgs),
    }
}
