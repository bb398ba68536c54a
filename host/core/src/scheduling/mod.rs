//! Provisioning v0: decides where a batch of pending pods goes.
//!
//! Given pending pods, the cluster's nodes (and in-flight NodeClaims), the NodePools with
//! their instance types, and the DaemonSets, [`schedule`] places each pod on an existing node,
//! on a NodeClaim opened earlier in the same pass, or on a new NodeClaim, and returns the
//! NodeClaims to create. It follows upstream Karpenter's provisioning simulation
//! (`pkg/controllers/provisioning/scheduling`): the same pod order, the same order of
//! candidates (existing nodes, open claims with the fewest pods, NodePools by weight), the
//! same instance-type filtering (requirements, resources with DaemonSet overhead per instance
//! type, available offerings, minValues), pessimistic limit accounting, cheapest-first
//! instance types truncated to [`MAX_INSTANCE_TYPES`](crate::MAX_INSTANCE_TYPES), and
//! upstream's failure wording.
//!
//! A claim packs as many pods as its largest remaining instance type holds; its option list
//! shrinks as requests grow, and the launch picks the cheapest remaining type, so the claim's
//! cost follows the actual requests.
//!
//! Everything is plain data and deterministic: the same input, in any order, gives the same
//! output (pods, nodes, NodePools and instance types are sorted with total orders; no
//! decision depends on the iteration order of a hash map).
//!
//! Inter-pod constraints follow upstream's topology groups (see the `topology` module):
//! topology spread (maxSkew, minDomains, node inclusion policies, matchLabelKeys, hostname
//! with a global minimum of 0), pod affinity with self-affinity bootstrap, pod anti-affinity
//! including the inverse anti-affinity of pods already bound ([`SchedulingContext`]), with
//! new claims narrowed to the chosen domain. Preferences (preferred node affinity, preferred
//! pod affinity and anti-affinity, `ScheduleAnyway` spreads, PreferNoSchedule taints) are
//! honored then relaxed in upstream's order, or ignored with [`PreferencePolicy::Ignore`].
//! Host ports conflict on existing nodes, within a claim and with DaemonSets; volume topology
//! arrives as alternative requirement sets on the pod; CSI volumes count against existing
//! nodes' attach limits ([`ExistingNode::volume_limits`]: a new node's are not known before it
//! registers, as upstream). Default (cluster-wide) spread constraints are given to the pods
//! before the pass, by its callers (`SCHEDULER_CONFIG`'s `defaultConstraints`, with the
//! selector kube-scheduler would deduce): here they are the pods' own.
//!
//! Not modelled yet (later versions): reserved capacity, DRA, offering capacity/overhead
//! overrides, and the consolidation-only options of upstream's scheduler.

mod benchmark;
mod bound;
mod catalog;
mod constraints;
mod daemons;
mod launchable;
mod open_claims;
mod pricing;
mod render;
mod scheduler;
mod topology;
mod types;

#[cfg(test)]
mod tests;

pub use benchmark::{
    WorkloadError, WorkloadPod, benchmark_cluster, benchmark_input, workload_input,
};
pub use bound::cost_lower_bound;
pub use constraints::{
    AttachedVolume, HostPort, LabelSelector, LabelSelectorRequirement, MinValuesPolicy,
    NodeInclusionPolicy, PodAffinityTerm, PreferencePolicy, PreferredSchedulingTerm,
    SelectorOperator, TopologySpreadConstraint, WeightedPodAffinityTerm, WhenUnsatisfiable,
};
pub use launchable::{NothingLaunchable, launchable_types};
pub use pricing::FallbackPrice;
pub(crate) use scheduler::queue_order;
pub use scheduler::{
    Prepared, schedule, schedule_prepared, schedule_with_context, schedule_with_fallback_price,
};
pub use types::{
    BoundPod, DaemonPod, ExistingNode, NewNodeClaim, NodePool, NodePoolLimits, PendingPod,
    Placement, PodKey, PodPlacement, SchedulingContext, SchedulingInput, SchedulingResult,
};
