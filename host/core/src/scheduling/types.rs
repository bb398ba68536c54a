//! Inputs and outputs of a provisioning pass, as plain data.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::instance_type::InstanceType;
use crate::labels::LabelPolicy;
use crate::nodeclaim::{NodeClaimSpec, NodeClaimTemplate};
use crate::requirements::Requirements;
use crate::resources::{PodResourceSpec, QuantityError, Resources, Unit};
use crate::taints::{Taint, Toleration};

use super::constraints::{
    AttachedVolume, HostPort, MinValuesPolicy, PodAffinityTerm, PreferencePolicy,
    PreferredSchedulingTerm, TopologySpreadConstraint, WeightedPodAffinityTerm,
};

/// Identifies a pod by namespace and name.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PodKey {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl PodKey {
    /// A key from namespace and name.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        PodKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for PodKey {
    /// `namespace/name`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A pod waiting for capacity.
///
/// Besides resources it carries every scheduling constraint the pass understands: node
/// selector, required and preferred node affinity, tolerations, topology spread constraints,
/// required and preferred pod affinity and anti-affinity, host ports and volume topology.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PendingPod {
    /// Namespace and name.
    pub key: PodKey,
    /// UID; breaks ordering ties between pods created in the same second, as upstream does.
    pub uid: String,
    /// Creation timestamp (any monotonic unit, e.g. Unix seconds); older pods are tried first
    /// among pods with equal CPU and memory requests.
    pub created: i64,
    /// Pod priority. Carried for callers; provisioning order does not use it (neither does
    /// upstream's provisioning queue).
    pub priority: i32,
    /// Everything the pod asks of a node, as [`PodResourceSpec::requests`] computes it: init
    /// containers and sidecars, overhead, pod-level requests and the `pods: 1` slot.
    pub requests: Resources,
    /// `spec.nodeSelector` (each entry is an `In` requirement; deprecated keys are normalized).
    pub node_selector: BTreeMap<String, String>,
    /// `requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms`: alternatives (OR),
    /// each term an AND of requirements. Empty means no required node affinity. As upstream,
    /// the first term is tried first and later terms only when the pod cannot be placed with
    /// the earlier ones. Terms using `matchFields` must be rejected by the caller beforehand.
    pub required_affinity: Vec<Requirements>,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// `metadata.labels`: what other pods' selectors (spread, affinity, anti-affinity) match.
    pub labels: BTreeMap<String, String>,
    /// `preferredDuringSchedulingIgnoredDuringExecution` node affinity terms. The heaviest
    /// remaining one is treated as required until relaxed.
    pub preferred_affinity: Vec<PreferredSchedulingTerm>,
    /// `topologySpreadConstraints`.
    pub topology_spread: Vec<TopologySpreadConstraint>,
    /// Required pod affinity terms.
    pub pod_affinity: Vec<PodAffinityTerm>,
    /// Preferred pod affinity terms.
    pub preferred_pod_affinity: Vec<WeightedPodAffinityTerm>,
    /// Required pod anti-affinity terms.
    pub pod_anti_affinity: Vec<PodAffinityTerm>,
    /// Preferred pod anti-affinity terms.
    pub preferred_pod_anti_affinity: Vec<WeightedPodAffinityTerm>,
    /// Host ports the pod's containers bind.
    pub host_ports: Vec<HostPort>,
    /// Where the pod's volumes can be attached, as alternatives (OR): each entry is one
    /// combination of the volumes' topology requirements (a bound PersistentVolume's node
    /// affinity term, a StorageClass `allowedTopologies` term). Empty means unconstrained.
    /// Alternatives are tried in order; they narrow the node only, not the domains the pod
    /// counts in for topology spread.
    pub volume_requirements: Vec<Requirements>,
    /// The CSI volumes the pod needs attached, counted against existing nodes' attach limits
    /// ([`ExistingNode::volume_limits`]).
    pub volumes: Vec<AttachedVolume>,
    /// A pod of a node that a consolidation simulation removes: it is not placed on a node
    /// [`under_consolidate_after`](ExistingNode::under_consolidate_after) (upstream's
    /// destination protection). Pending pods, and pods of nodes already being deleted, are
    /// not.
    pub moved_by_consolidation: bool,
    /// The CapacityBuffer (`namespace/name`) this pod is a virtual chunk of, when it is one
    /// ([`crate::buffers`]). Virtual pods are placed only after every real pod of the pass
    /// has been placed or given up on, so they never take room a real pod could use.
    pub capacity_buffer: Option<String>,
}

impl PendingPod {
    /// A pod with the given requests and no constraints; the UID is `namespace/name`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>, requests: Resources) -> Self {
        let key = PodKey::new(namespace, name);
        PendingPod {
            uid: key.to_string(),
            key,
            requests,
            ..Default::default()
        }
    }

    /// A pod whose requests are computed from its containers ([`PodResourceSpec::requests`]).
    pub fn from_spec(
        namespace: impl Into<String>,
        name: impl Into<String>,
        spec: &PodResourceSpec,
    ) -> Self {
        PendingPod::new(namespace, name, spec.requests())
    }

    /// Whether `other` asks exactly what this pod asks of a placement: equal in every field
    /// but the pod's identity (name, UID and creation time; the namespace counts, selectors
    /// match by it). Two pod lists of the same shapes in the same queue order are placed
    /// alike, pod for pod.
    pub(crate) fn same_shape(&self, other: &PendingPod) -> bool {
        // Every field named, so that a new one cannot be forgotten here.
        let PendingPod {
            key,
            uid: _,
            created: _,
            priority,
            requests,
            node_selector,
            required_affinity,
            tolerations,
            labels,
            preferred_affinity,
            topology_spread,
            pod_affinity,
            preferred_pod_affinity,
            pod_anti_affinity,
            preferred_pod_anti_affinity,
            host_ports,
            volume_requirements,
            volumes,
            moved_by_consolidation,
            capacity_buffer,
        } = self;
        *requests == other.requests
            && key.namespace == other.key.namespace
            && *priority == other.priority
            && *moved_by_consolidation == other.moved_by_consolidation
            && *capacity_buffer == other.capacity_buffer
            && *labels == other.labels
            && *node_selector == other.node_selector
            && *required_affinity == other.required_affinity
            && *tolerations == other.tolerations
            && *preferred_affinity == other.preferred_affinity
            && *topology_spread == other.topology_spread
            && *pod_affinity == other.pod_affinity
            && *preferred_pod_affinity == other.preferred_pod_affinity
            && *pod_anti_affinity == other.pod_anti_affinity
            && *preferred_pod_anti_affinity == other.preferred_pod_anti_affinity
            && *host_ports == other.host_ports
            && *volume_requirements == other.volume_requirements
            && *volumes == other.volumes
    }
}

/// One DaemonSet, represented by the pod it would run on every eligible node.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DaemonPod {
    /// Identifies the DaemonSet (e.g. `namespace/name`); informational.
    pub name: String,
    /// Requests of the daemon pod (see [`PendingPod::requests`]).
    pub requests: Resources,
    /// The pod template's node selector.
    pub node_selector: BTreeMap<String, String>,
    /// The pod template's required node affinity terms (OR-ed).
    pub required_affinity: Vec<Requirements>,
    /// The pod template's tolerations.
    pub tolerations: Vec<Toleration>,
    /// Host ports the daemon pod binds: pending pods binding a conflicting port cannot use an
    /// instance type the daemon runs on.
    pub host_ports: Vec<HostPort>,
}

/// A pod already bound to a node (running or about to), as topology and host-port accounting
/// see it. Terminal pods are left out by the caller; terminating ones are marked
/// [`terminating`](Self::terminating).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BoundPod {
    /// Namespace and name. A bound pod with the key of a pending pod is not counted (the
    /// pending pod is being rescheduled).
    pub key: PodKey,
    /// Name of the [`ExistingNode`] it is bound to (pods of nodes not in the input are
    /// ignored).
    pub node: String,
    /// Labels, matched by spread and affinity selectors. Shared: the pods of one
    /// ReplicaSet carry the same labels, and a cluster's worth of bound pods is converted
    /// for every disruption pass.
    pub labels: Arc<BTreeMap<String, String>>,
    /// Its required pod anti-affinity terms: pending pods it selects are kept out of its
    /// domain (upstream's inverse anti-affinity).
    pub anti_affinity: Vec<PodAffinityTerm>,
    /// Host ports it binds on its node.
    pub host_ports: Vec<HostPort>,
    /// CSI volumes attached to its node for it.
    pub volumes: Vec<AttachedVolume>,
    /// Being deleted: it still holds its node's resources, host ports and volumes, but
    /// topology (spread, affinity, anti-affinity) no longer counts it, as upstream.
    pub terminating: bool,
}

/// What a pass knows besides [`SchedulingInput`]: the pods already bound to nodes and the
/// preference policy. Kept apart from [`SchedulingInput`] so that code building the input
/// with a struct literal keeps compiling; `Default` is an empty cluster with upstream's
/// default policy.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SchedulingContext {
    /// Pods bound to the input's nodes.
    pub bound_pods: Vec<BoundPod>,
    /// Whether preferences are respected (then relaxed) or ignored.
    pub preference_policy: PreferencePolicy,
    /// Whether `minValues` is enforced strictly or relaxed to what the types can offer.
    pub min_values_policy: MinValuesPolicy,
    /// Labels of the cluster's Namespaces, by name, for affinity terms' `namespaceSelector`.
    /// A namespace of a pod that is not listed counts with its `kubernetes.io/metadata.name`
    /// label only (the label the API server gives every namespace).
    pub namespace_labels: BTreeMap<String, BTreeMap<String, String>>,
}

/// A node already in the cluster, or a NodeClaim in flight (launched or launching, not yet
/// initialized) that pods may be placed on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExistingNode {
    /// Node name (or NodeClaim name for a claim without node yet). Names should be unique:
    /// they order the nodes, and [`BoundPod::node`] refers to them. A node without a
    /// `kubernetes.io/hostname` label is the hostname topology domain of this name.
    pub name: String,
    /// Owning NodePool, if managed.
    pub nodepool: Option<String>,
    /// What the node is known to offer: its labels as single-value `In` requirements
    /// ([`Requirements::from_labels`]); for a NodeClaim without labels yet, its requirements.
    /// Pods must be strictly compatible with them (no undefined keys allowed).
    pub requirements: Requirements,
    /// Taints pods must tolerate. For nodes still initializing, pass what upstream's cluster
    /// state reports: the claim's taints, without startup taints and known ephemeral taints.
    pub taints: Vec<Taint>,
    /// Allocatable resources.
    pub allocatable: Resources,
    /// Requests of every pod bound to the node (DaemonSet pods included).
    pub requested: Resources,
    /// Requests of the DaemonSet pods among [`requested`](Self::requested); compatible
    /// daemons beyond these are reserved before pending pods are placed.
    pub daemon_requested: Resources,
    /// True while the node is not initialized (a NodeClaim in flight). Initialized nodes are
    /// tried first.
    pub in_flight: bool,
    /// False for nodes that must not receive pods (cordoned, marked for deletion, being
    /// disrupted); such nodes receive no pods, but their labels and bound pods still count
    /// for topology spread and pod (anti-)affinity.
    pub schedulable: bool,
    /// How many volumes each CSI driver can attach to the node (its CSINode's
    /// `allocatable.count`); a driver not listed has no limit. Only existing nodes are
    /// checked, as upstream: a new node's limits are not known before it registers.
    pub volume_limits: BTreeMap<String, u32>,
    /// The node's pods changed within its NodePool's `consolidateAfter` (initialized, the
    /// window not over): consolidation does not move other nodes' pods onto it (pods
    /// [`moved_by_consolidation`](PendingPod::moved_by_consolidation)), as upstream since
    /// v1.14; pending pods may still land here.
    pub under_consolidate_after: bool,
}

impl ExistingNode {
    /// A schedulable, initialized node with the given labels and allocatable capacity and no
    /// pods.
    pub fn new(
        name: impl Into<String>,
        labels: &BTreeMap<String, String>,
        allocatable: Resources,
    ) -> Self {
        ExistingNode {
            name: name.into(),
            requirements: Requirements::from_labels(
                labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            ),
            allocatable,
            schedulable: true,
            ..Default::default()
        }
    }
}

/// A NodePool's resource limits and what already counts against them.
///
/// Only the resources named in [`limits`](Self::limits) are limited (a resource vector could
/// not tell "no limit" from "limit 0"). The pseudo-resource `nodes` limits the node count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodePoolLimits {
    /// `spec.limits`: resource name → amount in the resource's [`Unit`].
    pub limits: BTreeMap<String, u64>,
    /// Usage counted against the limits: the summed *capacity* of the pool's nodes and
    /// in-flight NodeClaims, plus their number as `nodes` (what upstream derives from its
    /// cluster state).
    pub usage: Resources,
}

impl NodePoolLimits {
    /// Limits from amounts already in each resource's unit.
    pub fn new(limits: BTreeMap<String, u64>, usage: Resources) -> Self {
        NodePoolLimits { limits, usage }
    }

    /// Limits from `(resource, quantity string)` pairs, as written in `spec.limits`.
    pub fn from_quantities<I, K, V>(limits: I, usage: Resources) -> Result<Self, QuantityError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut parsed = BTreeMap::new();
        for (name, quantity) in limits {
            let name = name.as_ref();
            parsed.insert(name.to_owned(), Unit::of(name).parse(quantity.as_ref())?);
        }
        Ok(NodePoolLimits::new(parsed, usage))
    }

    /// What is left per limited resource (negative when the limit is already exceeded).
    pub fn remaining(&self) -> BTreeMap<String, i128> {
        self.limits
            .iter()
            .map(|(name, limit)| {
                let used = i128::from(self.usage.get(name));
                (name.clone(), i128::from(*limit) - used)
            })
            .collect()
    }
}

/// A NodePool as the scheduler sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodePool {
    /// Name, weight, combined requirements (pool requirements ∩ template labels ∩ nodepool
    /// and NodeClass labels, see [`NodeClaimTemplate::new`]), labels, annotations, taints
    /// and startup taints. Pods must tolerate `taints`; `startup_taints` are not checked.
    pub template: NodeClaimTemplate,
    /// Instance types the pool may launch (already filtered by its NodeClass), with their
    /// offerings and prices.
    pub instance_types: Vec<InstanceType>,
    /// Resource limits; `None` for an unlimited pool.
    pub limits: Option<NodePoolLimits>,
}

/// Everything one provisioning pass looks at (the pods bound to the nodes and the preference
/// policy come separately, in a [`SchedulingContext`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SchedulingInput {
    /// Pending pods to place (any order; the scheduler sorts them).
    pub pods: Vec<PendingPod>,
    /// Existing nodes and in-flight NodeClaims.
    pub nodes: Vec<ExistingNode>,
    /// Ready, dynamic NodePools (any order; the scheduler sorts them by weight).
    pub nodepools: Vec<NodePool>,
    /// One representative pod per DaemonSet.
    pub daemons: Vec<DaemonPod>,
    /// Well-known label keys (pods may constrain them without a NodePool declaring them) and
    /// restricted keys; upstream's sets by default, extended by the cloud plugin.
    pub label_policy: LabelPolicy,
}

/// Where a pod goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Placement {
    /// Onto an existing node or in-flight NodeClaim of that name.
    Existing {
        /// Node (or NodeClaim) name.
        node: String,
    },
    /// Onto the new NodeClaim at this index of [`SchedulingResult::new_claims`].
    NewClaim {
        /// Index into [`SchedulingResult::new_claims`].
        index: usize,
    },
    /// Nowhere.
    Unschedulable {
        /// Why, in upstream's wording: one clause per NodePool tried, joined by `"; "`.
        reason: String,
    },
}

/// The decision for one pod.
#[derive(Debug, Clone, PartialEq)]
pub struct PodPlacement {
    /// The pod.
    pub key: PodKey,
    /// The pod's UID.
    pub uid: String,
    /// Where it goes.
    pub placement: Placement,
}

/// A NodeClaim to create.
#[derive(Debug, Clone, PartialEq)]
pub struct NewNodeClaim {
    /// The claim to launch. Its requirements carry `karpenter.sh/nodepool In [pool]`,
    /// `node.kubernetes.io/instance-type In [options]` and `karpenter.sh/capacity-type In
    /// [capacity types with an available compatible offering]`; `instance_types` lists at
    /// most [`MAX_INSTANCE_TYPES`](crate::MAX_INSTANCE_TYPES) names, cheapest first;
    /// `requests` are the pods' requests plus the daemon overhead.
    pub spec: NodeClaimSpec,
    /// Pods assigned to the claim, in the order they were placed.
    pub pods: Vec<PodKey>,
    /// The DaemonSet requests included in `spec.requests` (the smallest overhead among the
    /// remaining instance types, resource by resource).
    pub daemon_overhead: Resources,
    /// Price of the first (cheapest) instance type's cheapest compatible available offering,
    /// if known.
    pub launch_price: Option<f64>,
}

/// The outcome of a provisioning pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SchedulingResult {
    /// One entry per input pod, in input order.
    pub placements: Vec<PodPlacement>,
    /// NodeClaims to create, in the order they were opened.
    pub new_claims: Vec<NewNodeClaim>,
    /// NodePools skipped because their own requirements leave no instance type with an
    /// available offering (upstream publishes a `NoCompatibleInstanceTypes` event for them).
    pub nodepools_without_instance_types: Vec<String>,
}

impl SchedulingResult {
    /// The placement of the pod `namespace/name`, if it was in the input.
    pub fn placement(&self, namespace: &str, name: &str) -> Option<&Placement> {
        self.placements
            .iter()
            .find(|p| p.key.namespace == namespace && p.key.name == name)
            .map(|p| &p.placement)
    }

    /// Pods placed onto the existing node `node`, in input order.
    pub fn pods_on_node(&self, node: &str) -> Vec<&PodKey> {
        self.placements
            .iter()
            .filter(|p| matches!(&p.placement, Placement::Existing { node: n } if n == node))
            .map(|p| &p.key)
            .collect()
    }

    /// Pods that could not be placed, with their reasons, in input order.
    pub fn unschedulable(&self) -> Vec<(&PodKey, &str)> {
        self.placements
            .iter()
            .filter_map(|p| match &p.placement {
                Placement::Unschedulable { reason } => Some((&p.key, reason.as_str())),
                _ => None,
            })
            .collect()
    }
}
