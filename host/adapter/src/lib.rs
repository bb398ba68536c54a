//! Joinery's adapter layer between Kubernetes objects and the pure core.
//!
//! Everything that turns a Kubernetes object into the core's plain data lives here, once:
//!
//! - [`convert`]: pods (requests, affinity, spread, tolerations, host ports), Nodes and
//!   NodeClaims as existing capacity, NodePool limits, DaemonSets, taints, label selectors,
//!   NodeOverlays;
//! - [`lean`]: [`LeanPod`](lean::LeanPod) and [`LeanNode`](lean::LeanNode), a pod and a Node
//!   with only the fields Joinery reads — what every function here takes, and what the
//!   controller caches;
//! - [`pods`]: the one classification of pods (terminal, bound, pending, left out and why;
//!   DaemonSet and mirror pods; PDB protection);
//! - [`disruption`]: NodePool budgets and `consolidateAfter` in the core's form;
//! - [`repair`]: node repair's inputs: NodePool repair annotations, Nodes and NodeClaims;
//! - [`drain`]: the drain's view of pods, `karpenter.sh/do-not-disrupt`, the pods a node's
//!   removal displaces, a deleting claim's termination deadline;
//! - [`volumes`]: where a pod's volumes can be attached, and CSI attach limits;
//! - [`spread`]: kube-scheduler's default topology spread (`SCHEDULER_CONFIG`);
//! - [`template`]: a NodePool as the core's NodeClaim template, and its hash;
//! - [`conditions`]: NodeClaim condition names;
//! - [`buffers`]: CapacityBuffers: chunk shape and count, virtual pods;
//! - [`assemble`]: the one function that builds the scheduler's input from cluster objects,
//!   used by the provisioner, `joinery schedule` and disruption;
//! - [`snapshot`]: cluster snapshots (multi-document YAML) and instance-type catalogs, as
//!   `joinery schedule` reads them.
//!
//! No I/O, no Kubernetes client, no async: the controllers read objects from their caches and
//! hand them here, so this layer is tested with plain objects.

pub mod assemble;
pub mod buffers;
pub mod conditions;
pub mod convert;
pub mod disruption;
pub mod drain;
pub mod lean;
pub mod pods;
pub mod repair;
pub mod snapshot;
pub mod spread;
pub mod template;
pub mod volumes;
