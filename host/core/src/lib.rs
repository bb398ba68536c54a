//! Joinery's pure core.
//!
//! Everything here is deterministic data and arithmetic: no I/O, no Kubernetes client, no wasm
//! runtime, no async. The host's controllers translate API objects into these types, ask the
//! core for decisions, and carry the decisions back out; the simulator and benchmarks drive the
//! same code without a cluster.
//!
//! Layers, bottom up:
//! - [`resources`]: quantity parsing and the [`Resources`] vector; pod request computation.
//! - [`labels`]: upstream Karpenter's label, taint, annotation and finalizer names; which keys
//!   are well-known or restricted; alias normalization.
//! - [`requirements`]: the requirement algebra ([`Requirement`], [`Requirements`]) behind every
//!   "can this pod run on that shape" question.
//! - [`taints`]: taints, tolerations and Kubernetes' matching rules.
//! - [`instance_type`]: instance types, offerings, allocatable capacity and price ordering.
//! - [`catalog`]: the instance-type catalog file (`joinery schedule --catalog`, the simulated
//!   cloud's `cloud.catalog`): its defaults, checks and instance types.
//! - [`contract`]: the plugin contract as plain types (what cloud, renderer and pricing plugins
//!   receive and return), independent of any WIT version.
//! - [`backoff`]: exponential backoff with `Retry-After`, per key, for calls that failed.
//! - [`cron`]: the cron schedules of disruption budgets, and when a scheduled budget is active.
//! - [`disruption`]: disruption budgets per reason, `Consolidatable`, and emptiness's choice.
//! - [`buffers`]: CapacityBuffers: how many chunks a buffer keeps, what a pass did with its
//!   virtual pods, and the buffer's conditions.
//! - [`drain`]: which pods a terminating node evicts, force-deletes or waits for.
//! - [`lease`]: leader election on a Lease: take, renew, wait or release.
//! - [`lifecycle`]: the NodeClaim lifecycle as a state machine: from a view of a claim, its
//!   Nodes and the clock to the next action (launch, register, initialize, time out, expire,
//!   finalize).
//! - [`nodeclaim`]: the NodeClaim the scheduler asks a cloud plugin to launch, and the instance
//!   a plugin reports back.
//! - [`overlay`]: NodeOverlays, the operator's price and capacity adjustments to instance types.
//! - [`repair`]: node repair: which managed nodes are unhealthy, the unhealthy ceiling, and
//!   whether to wait, reboot or replace.
//! - [`scheduling`]: the provisioning pass: which pods go on existing nodes and which new
//!   NodeClaims to create.

pub mod backoff;
pub mod buffers;
pub mod catalog;
pub mod clock;
pub mod contract;
pub mod cron;
pub mod disruption;
pub mod drain;
mod hash;
pub mod instance_type;
pub mod labels;
pub mod learned;
pub mod lease;
pub mod lifecycle;
pub mod nodeclaim;
pub mod overlay;
pub mod repair;
pub mod requirements;
pub mod resources;
pub mod scheduling;
pub mod taints;
pub mod text_table;
pub mod time;

pub use instance_type::{InstanceType, Offering, Offerings, Overhead};
pub use nodeclaim::{
    Instance, InstanceState, MAX_INSTANCE_TYPES, NodeClaimSpec, NodeClaimTemplate, NodeClassRef,
};
pub use requirements::{
    Incompatibility, IncompatibleRequirements, KeySet, NodeSelectorRequirement, Operator,
    Requirement, RequirementError, Requirements,
};
pub use resources::{PodResourceSpec, Quantity, QuantityError, Resources};
pub use taints::{Taint, TaintEffect, Toleration, TolerationOperator};
