//! The simulated cloud: an HTTP API on loopback that the `simcloud` plugin drives through the
//! host's outgoing HTTP, and whose instances the cluster physics boots into Nodes.

pub mod model;

pub use model::{CloudEvent, InstanceState, PROVIDER_ID_PREFIX, SimInstance};
