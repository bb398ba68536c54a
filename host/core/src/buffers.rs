//! CapacityBuffers (`autoscaling.x-k8s.io/v1beta1`): spare capacity kept as virtual pods.
//!
//! A buffer asks for a number of *chunks*, each shaped like one pod (its PodTemplate's, or its
//! workload's). Each chunk becomes a virtual pending pod of the lowest priority that takes part
//! in every provisioning simulation ([`PendingPod::capacity_buffer`]): the scheduler places it
//! after every real pod, so it only ever takes room no real pod of the pass wanted; when it
//! fits nowhere, a new NodeClaim is opened for it (NodePool limits holding as for any pod).
//! Virtual pods are never created in the API: when a real pod arrives, kube-scheduler binds it
//! into the room the buffer kept, and the next pass provisions the buffer again.
//!
//! This module decides, without I/O, how many chunks a buffer keeps ([`desired_chunks`]),
//! what one pass did with each buffer's chunks ([`assess`]) and the status conditions that
//! follow ([`provisioning_condition`], [`limited_by_quotas_condition`]).

use std::collections::BTreeMap;

use crate::resources::Resources;
use crate::scheduling::{
    PendingPod, Placement, SchedulingContext, SchedulingInput, SchedulingResult,
    schedule_with_context,
};

/// Priority of every virtual pod: the lowest there is (upstream's `MinInt32`).
pub const VIRTUAL_POD_PRIORITY: i32 = i32::MIN;

/// `ReadyForProvisioning` reason: the chunk's shape was resolved.
pub const REASON_RESOLVED: &str = "Resolved";
/// `ReadyForProvisioning` reason: the `podTemplateRef` PodTemplate does not exist.
pub const REASON_POD_TEMPLATE_NOT_FOUND: &str = "PodTemplateNotFound";
/// `ReadyForProvisioning` reason: the `scalableRef` workload does not exist.
pub const REASON_SCALABLE_REF_NOT_FOUND: &str = "ScalableRefNotFound";
/// `ReadyForProvisioning` reason: the buffer cannot be resolved (no reference, both, an
/// unsupported kind or strategy, a pod shape that does not convert).
pub const REASON_RESOLUTION_FAILED: &str = "ResolutionFailed";
/// `Provisioning` reason (True): every chunk fits on capacity that exists.
pub const REASON_FITS_EXISTING_CAPACITY: &str = "FitsExistingCapacity";
/// `Provisioning` reason (False): some chunks need new NodeClaims, or fit nowhere.
pub const REASON_REQUIRES_NEW_CAPACITY: &str = "RequiresNewCapacity";
/// `Provisioning` reason (False): the buffer is not `ReadyForProvisioning`.
pub const REASON_NOT_READY_FOR_PROVISIONING: &str = "NotReadyForProvisioning";
/// `Provisioning` reason (False): the buffer keeps zero chunks.
pub const REASON_BUFFER_EMPTY: &str = "BufferEmpty";
/// `LimitedByQuotas` reason (True): NodePool `limits` keep some chunks from being provisioned.
pub const REASON_NODEPOOL_LIMITS_REACHED: &str = "NodePoolLimitsReached";
/// `LimitedByQuotas` reason (False): no limit stands in the buffer's way.
pub const REASON_WITHIN_LIMITS: &str = "WithinLimits";

/// The name of a buffer's `index`-th virtual pod (1-based), in the buffer's namespace.
pub fn virtual_pod_name(buffer: &str, index: usize) -> String {
    format!("capacity-buffer-{buffer}-{index}")
}

/// What a buffer's spec asks for, in the core's terms.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BufferSize {
    /// `spec.replicas`.
    pub replicas: Option<i32>,
    /// `spec.percentage` (of the `scalableRef` workload's replicas).
    pub percentage: Option<i32>,
    /// `spec.limits`: totals the chunks' requests may not exceed, by resource name, in each
    /// resource's unit (CPU in millicores, memory in bytes).
    pub limits: Option<BTreeMap<String, u64>>,
}

/// Chunks from a percentage of a workload's replicas: rounded up, and at least one when both
/// are positive.
pub fn percentage_chunks(workload_replicas: i32, percentage: i32) -> i32 {
    if workload_replicas <= 0 || percentage <= 0 {
        return 0;
    }
    let chunks = (i64::from(workload_replicas) * i64::from(percentage) + 99) / 100;
    i32::try_from(chunks).unwrap_or(i32::MAX).max(1)
}

/// How many chunks of `chunk` fit within `limits` (amounts in each resource's unit: CPU in
/// millicores, memory in bytes): the smallest `limit / request` (rounded down) over the
/// resources both name, the `pods` slot aside. `None` when they share no resource, so the
/// limits bound nothing.
pub fn limit_chunks(limits: &BTreeMap<String, u64>, chunk: &Resources) -> Option<i32> {
    chunk
        .iter()
        .filter(|&(name, _)| name != "pods")
        .filter_map(|(name, request)| limits.get(name).map(|limit| limit / request))
        .min()
        .map(|n| i32::try_from(n).unwrap_or(i32::MAX))
}

/// The number of chunks a buffer keeps (its `status.replicas`).
///
/// `replicas` and the percentage of the workload's replicas (`workload_replicas`, known for a
/// `scalableRef` buffer) combine by taking the larger; `limits` caps the result. Without
/// either count, the buffer keeps as many chunks as `limits` allows, and none without limits.
///
/// Upstream's API comment on `replicas` says "the minimum of the two"; the design proposal and
/// both implementations (cluster-autoscaler's buffer controller, Karpenter's) take the
/// maximum, which is what this does (see docs/buffers.md).
pub fn desired_chunks(size: &BufferSize, workload_replicas: Option<i32>, chunk: &Resources) -> i32 {
    let from_percentage = match (size.percentage, workload_replicas) {
        (Some(p), Some(w)) if w > 0 => Some(percentage_chunks(w, p)),
        _ => None,
    };
    let wanted = [size.replicas.map(|r| r.max(0)), from_percentage]
        .into_iter()
        .flatten()
        .max();
    let by_limits = size
        .limits
        .as_ref()
        .and_then(|limits| limit_chunks(limits, chunk));
    match (wanted, by_limits) {
        (Some(w), Some(l)) => w.min(l),
        (Some(w), None) => w,
        (None, Some(l)) => l,
        (None, None) => 0,
    }
}

/// What one provisioning pass did with one buffer's chunks.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BufferOutcome {
    /// Chunks in the pass.
    pub chunks: usize,
    /// Chunks placed on existing nodes or in-flight NodeClaims, by node name.
    pub on_nodes: BTreeMap<String, usize>,
    /// Chunks placed on new NodeClaims (by index into [`SchedulingResult::new_claims`]).
    pub on_new_claims: BTreeMap<usize, usize>,
    /// Chunks that fit nowhere only because of NodePool `limits`.
    pub limited: usize,
    /// Chunks that fit nowhere for another reason, with the first reason.
    pub unschedulable: usize,
    /// The first reason a chunk fits nowhere.
    pub reason: Option<String>,
}

impl BufferOutcome {
    /// Chunks on existing capacity.
    pub fn on_existing(&self) -> usize {
        self.on_nodes.values().sum()
    }

    /// Chunks on new NodeClaims.
    pub fn on_new(&self) -> usize {
        self.on_new_claims.values().sum()
    }
}

/// What `result` (a pass over `input`) did with each buffer's virtual pods, by buffer
/// (`namespace/name`). Whether a chunk that fits nowhere is held back by NodePool `limits` is
/// decided by scheduling once more without any limit (only when some chunk fits nowhere): a
/// chunk that then fits is limited by quotas.
pub fn assess(
    input: &SchedulingInput,
    context: &SchedulingContext,
    result: &SchedulingResult,
) -> BTreeMap<String, BufferOutcome> {
    let mut out: BTreeMap<String, BufferOutcome> = BTreeMap::new();
    let mut failed = Vec::new();
    for (i, (pod, placement)) in input.pods.iter().zip(&result.placements).enumerate() {
        let Some(buffer) = &pod.capacity_buffer else {
            continue;
        };
        let outcome = out.entry(buffer.clone()).or_default();
        outcome.chunks += 1;
        match &placement.placement {
            Placement::Existing { node } => *outcome.on_nodes.entry(node.clone()).or_default() += 1,
            Placement::NewClaim { index } => *outcome.on_new_claims.entry(*index).or_default() += 1,
            Placement::Unschedulable { reason } => failed.push((i, buffer.clone(), reason)),
        }
    }
    if failed.is_empty() {
        return out;
    }
    let any_limits = input.nodepools.iter().any(|p| p.limits.is_some());
    let unlimited = any_limits.then(|| {
        let mut unlimited = input.clone();
        unlimited.nodepools.iter_mut().for_each(|p| p.limits = None);
        schedule_with_context(&unlimited, context, None)
    });
    for (i, buffer, reason) in failed {
        let outcome = out.entry(buffer).or_default();
        let fits_without_limits = unlimited
            .as_ref()
            .is_some_and(|r| !matches!(r.placements[i].placement, Placement::Unschedulable { .. }));
        if fits_without_limits {
            outcome.limited += 1;
        } else {
            outcome.unschedulable += 1;
        }
        outcome.reason.get_or_insert_with(|| reason.clone());
    }
    out
}

/// A status condition to write: its status, upstream's reason and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionDecision {
    /// `True` or `False`.
    pub status: bool,
    /// The reason (CamelCase).
    pub reason: &'static str,
    /// A sentence for people.
    pub message: String,
}

/// The buffer's `Provisioning` condition after a pass, as upstream decides it: False while the
/// buffer is not ready or keeps no chunk; True when every chunk fits on existing capacity;
/// False when some need new capacity or fit nowhere. `None` leaves the condition as it is (a
/// ready buffer whose chunks were not in the pass).
pub fn provisioning_condition(
    ready: bool,
    desired: i32,
    outcome: Option<&BufferOutcome>,
) -> Option<ConditionDecision> {
    if !ready {
        return Some(ConditionDecision {
            status: false,
            reason: REASON_NOT_READY_FOR_PROVISIONING,
            message: "the buffer is not ReadyForProvisioning".into(),
        });
    }
    if desired <= 0 {
        return Some(ConditionDecision {
            status: false,
            reason: REASON_BUFFER_EMPTY,
            message: "the buffer keeps zero chunks".into(),
        });
    }
    let outcome = outcome?;
    let missing = outcome.chunks - outcome.on_existing();
    if missing > 0 {
        return Some(ConditionDecision {
            status: false,
            reason: REASON_REQUIRES_NEW_CAPACITY,
            message: format!(
                "{} of {} chunks need new capacity, {} fit nowhere",
                outcome.on_new(),
                outcome.chunks,
                outcome.limited + outcome.unschedulable
            ),
        });
    }
    Some(ConditionDecision {
        status: true,
        reason: REASON_FITS_EXISTING_CAPACITY,
        message: format!("all {} chunks fit on existing capacity", outcome.chunks),
    })
}

/// The buffer's `LimitedByQuotas` condition after a pass: True, naming how many chunks and
/// why, when NodePool `limits` keep chunks from being provisioned; False otherwise. `None`
/// when the buffer's chunks were not in the pass.
pub fn limited_by_quotas_condition(outcome: Option<&BufferOutcome>) -> Option<ConditionDecision> {
    let outcome = outcome?;
    Some(if outcome.limited > 0 {
        ConditionDecision {
            status: true,
            reason: REASON_NODEPOOL_LIMITS_REACHED,
            message: format!(
                "{} of {} chunks cannot be provisioned within the NodePools' limits: {}",
                outcome.limited,
                outcome.chunks,
                outcome.reason.as_deref().unwrap_or("")
            ),
        }
    } else {
        ConditionDecision {
            status: false,
            reason: REASON_WITHIN_LIMITS,
            message: "no NodePool limit holds the buffer back".into(),
        }
    })
}

/// The room a buffer holds on one node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HeldOnNode {
    /// Chunks on the node.
    pub chunks: usize,
    /// What they request together.
    pub requests: Resources,
    /// The share of the node they take: the larger of their CPU and memory over the node's
    /// allocatable, at most 1.
    pub share: f64,
    /// The node's price per hour, when known.
    pub price_per_hour: Option<f64>,
    /// What the buffer is charged for the node per hour (0 when its price is unknown): its
    /// share of the price on a node that also runs workload pods; on a node that runs none,
    /// which exists only for buffers, the whole price, split between the buffers on it by
    /// their shares.
    pub cost_per_hour: f64,
    /// No workload pod runs on the node (or would land there): only buffers keep it, and
    /// emptiness leaves it for them.
    pub buffers_only: bool,
}

/// The capacity one buffer holds on the nodes that exist (and NodeClaims in flight).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Holding {
    /// Chunks the buffer keeps.
    pub chunks: usize,
    /// Of those, the chunks existing capacity holds (the others would need new nodes).
    pub held: usize,
    /// The nodes holding them, by name.
    pub nodes: BTreeMap<String, HeldOnNode>,
}

impl Holding {
    /// What the buffer costs per hour: the sum of its share of each node's price.
    pub fn cost_per_hour(&self) -> f64 {
        self.nodes.values().map(|n| n.cost_per_hour).sum()
    }
}

/// Where each buffer's chunks sit on the capacity there is, and what that costs: `input`'s
/// real pending pods first, then the buffers' virtual pods, on `input`'s nodes only (no
/// NodePool is offered, so nothing new is opened), as the provisioner would place them. A
/// buffer is charged its share of each node holding its chunks, or the whole node when no
/// workload pod runs or would land there ([`HeldOnNode::cost_per_hour`]; `price` by node
/// name).
pub fn holdings(
    input: &SchedulingInput,
    context: &SchedulingContext,
    price: &dyn Fn(&str) -> Option<f64>,
) -> BTreeMap<String, Holding> {
    let mut existing_only = input.clone();
    existing_only.nodepools.clear();
    let result = schedule_with_context(&existing_only, context, None);
    let mut out: BTreeMap<String, Holding> = BTreeMap::new();
    // Nodes running workload pods (bound ones beyond DaemonSets, or pending ones placed now).
    let mut busy: std::collections::BTreeSet<&str> = input
        .nodes
        .iter()
        .filter(|n| !n.requested.saturating_sub(&n.daemon_requested).is_zero())
        .map(|n| n.name.as_str())
        .collect();
    for (pod, placement) in input.pods.iter().zip(&result.placements) {
        if let (None, Placement::Existing { node }) = (&pod.capacity_buffer, &placement.placement) {
            busy.insert(node.as_str());
        }
    }
    for (pod, placement) in input.pods.iter().zip(&result.placements) {
        let Some(buffer) = &pod.capacity_buffer else {
            continue;
        };
        let holding = out.entry(buffer.clone()).or_default();
        holding.chunks += 1;
        let Placement::Existing { node } = &placement.placement else {
            continue;
        };
        holding.held += 1;
        let held = holding.nodes.entry(node.clone()).or_default();
        held.chunks += 1;
        held.requests += &pod.requests;
    }
    for holding in out.values_mut() {
        for (name, held) in holding.nodes.iter_mut() {
            let allocatable = input
                .nodes
                .iter()
                .find(|n| &n.name == name)
                .map(|n| n.allocatable.clone())
                .unwrap_or_default();
            let ratio = |used: u64, total: u64| {
                if total == 0 {
                    0.0
                } else {
                    used as f64 / total as f64
                }
            };
            held.share = ratio(held.requests.cpu_millis, allocatable.cpu_millis)
                .max(ratio(held.requests.memory_bytes, allocatable.memory_bytes))
                .min(1.0);
            held.price_per_hour = price(name);
        }
    }
    // What each node's buffers take of it together, for the nodes only buffers hold.
    let mut shares: BTreeMap<String, f64> = BTreeMap::new();
    for holding in out.values() {
        for (name, held) in &holding.nodes {
            *shares.entry(name.clone()).or_default() += held.share;
        }
    }
    for holding in out.values_mut() {
        for (name, held) in holding.nodes.iter_mut() {
            let price = held.price_per_hour.unwrap_or(0.0);
            let together = shares.get(name).copied().unwrap_or(0.0);
            held.buffers_only = !busy.contains(name.as_str());
            held.cost_per_hour = if busy.contains(name.as_str()) || together <= 0.0 {
                price * held.share
            } else {
                price * held.share / together
            };
        }
    }
    out
}

/// The virtual pods of one buffer: `chunks` copies of `shape` named
/// [`virtual_pod_name`]`(buffer, i)`, of the lowest priority, tagged with the buffer.
pub fn virtual_pods(
    namespace: &str,
    buffer: &str,
    chunks: usize,
    shape: &PendingPod,
) -> Vec<PendingPod> {
    let key = format!("{namespace}/{buffer}");
    (1..=chunks)
        .map(|i| {
            let mut pod = shape.clone();
            pod.key = crate::scheduling::PodKey::new(namespace, virtual_pod_name(buffer, i));
            pod.uid = format!("capacity-buffer/{key}/{i}");
            pod.priority = VIRTUAL_POD_PRIORITY;
            pod.capacity_buffer = Some(key.clone());
            pod.moved_by_consolidation = false;
            pod
        })
        .collect()
}

#[cfg(test)]
mod tests;
