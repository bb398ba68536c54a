//! `karpenter.sh/v1` NodePool.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Taint;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::{Condition, HasConditions};
use crate::duration::{Duration, NillableDuration};
use crate::requirements::{NodeClassReference, NodeSelectorRequirementWithMinValues, ResourceList};

/// Default `template.spec.expireAfter` (applied by the API server when omitted).
pub const DEFAULT_EXPIRE_AFTER: &str = "720h";
/// Default `disruption.consolidateAfter`.
pub const DEFAULT_CONSOLIDATE_AFTER: &str = "0s";
/// Default `disruption.budgets[].nodes` (and of the single default budget).
pub const DEFAULT_BUDGET_NODES: &str = "10%";

/// Desired state of a NodePool: the template for the nodes it may launch and the policies that
/// govern how they are disrupted.
// kube's `printcolumn(...)` entries repeat `type_ = "..."`, which clippy mistakes for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodePool",
    plural = "nodepools",
    singular = "nodepool",
    status = "NodePoolStatus",
    category = "karpenter",
    derive = "PartialEq",
    doc = "A NodePool: constraints and policies for a set of nodes that Karpenter launches and disrupts.",
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.nodes"
    ),
    printcolumn(
        name = "NodeClass",
        type_ = "string",
        json_path = ".spec.template.spec.nodeClassRef.name"
    ),
    printcolumn(name = "Nodes", type_ = "string", json_path = ".status.nodes"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].status"#
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Weight",
        type_ = "integer",
        json_path = ".spec.weight",
        priority = 1
    ),
    printcolumn(
        name = "CPU",
        type_ = "string",
        json_path = ".status.resources.cpu",
        priority = 1
    ),
    printcolumn(
        name = "Memory",
        type_ = "string",
        json_path = ".status.resources.memory",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = crate::schema::node_pool_spec_rules()))]
pub struct NodePoolSpec {
    /// Template for the NodeClaims this pool launches; launched claims are usually narrowed
    /// further by the pods they are created for.
    pub template: NodeClaimTemplate,
    /// How and when nodes of this pool may be disrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = { "consolidateAfter": DEFAULT_CONSOLIDATE_AFTER }))]
    pub disruption: Option<Disruption>,
    /// Upper bounds on the total capacity (and, with the `nodes` key, node count) of the pool.
    /// Static pools only support `nodes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceList>,
    /// Scheduling priority among pools, 1..=100 (higher first; absent means 0). Not allowed on
    /// static pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub weight: Option<i32>,
    /// Alpha: fixed node count. When set the pool is static: it keeps exactly this many nodes
    /// regardless of pods, and the consolidation settings are ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i64>,
}

impl NodePoolSpec {
    /// Whether the pool is static (`replicas` is set).
    pub fn is_static(&self) -> bool {
        self.replicas.is_some()
    }

    /// The disruption settings with upstream's defaults filled in.
    pub fn effective_disruption(&self) -> Disruption {
        let d = self.disruption.clone().unwrap_or_default();
        Disruption {
            consolidate_after: Some(d.effective_consolidate_after()),
            consolidation_policy: Some(d.effective_consolidation_policy()),
            budgets: Some(d.effective_budgets()),
        }
    }
}

/// Template for the NodeClaims a NodePool launches.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplate {
    /// Labels and annotations copied onto launched NodeClaims and their Nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<NodeClaimTemplateMetadata>,
    /// Specification copied onto launched NodeClaims.
    pub spec: NodeClaimTemplateSpec,
}

/// The metadata part of a [`NodeClaimTemplate`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateMetadata {
    /// Annotations put on launched NodeClaims and Nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-map-type" = "granular"))]
    pub annotations: Option<BTreeMap<String, String>>,
    /// Labels put on launched NodeClaims and Nodes (at most 100; keys in the `karpenter.sh`
    /// domain and `kubernetes.io/hostname` are reserved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "additionalProperties" = {
            "type": "string",
            "maxLength": 63,
            "pattern": crate::patterns::LABEL_VALUE,
        },
        "maxProperties" = 100,
        "x-kubernetes-map-type" = "atomic",
        "x-kubernetes-validations" = crate::schema::template_label_rules()
    ))]
    pub labels: Option<BTreeMap<String, String>>,
}

/// Specification of the NodeClaims a NodePool launches (a [`crate::NodeClaimSpec`] without
/// resource requests, which only the scheduler fills in).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpec {
    /// Taints put on the launched nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::taint_list")]
    pub taints: Option<Vec<Taint>>,
    /// Taints put on nodes at registration that something else (typically a DaemonSet) is
    /// expected to remove; pods need not tolerate them to get a node provisioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::taint_list")]
    pub startup_taints: Option<Vec<Taint>>,
    /// Constraints on the launched nodes' labels (instance type, zone, capacity type, ...),
    /// at most 100.
    #[schemars(
        extend(
            "maxItems" = 100,
            "x-kubernetes-list-type" = "atomic",
            "x-kubernetes-validations" = crate::schema::requirements_rules()
        ),
        transform = crate::schema::forbid_nodepool_requirement_key
    )]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// The provider NodeClass holding cloud-specific settings. Its group and kind are
    /// immutable; changing the name drifts existing nodes.
    #[schemars(extend(
        "x-kubernetes-validations" = crate::schema::node_class_ref_immutability_rules()
    ))]
    pub node_class_ref: NodeClassReference,
    /// How long a node may live before it is replaced (`Never` disables expiry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = DEFAULT_EXPIRE_AFTER))]
    pub expire_after: Option<NillableDuration>,
    /// Maximum time a deleting node waits for its pods to drain before they are force-deleted.
    /// Takes precedence over pod grace periods, PDBs and `karpenter.sh/do-not-disrupt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<Duration>,
}

impl NodeClaimTemplateSpec {
    /// `expireAfter`, or its default (`720h`) when absent.
    pub fn effective_expire_after(&self) -> NillableDuration {
        effective_expire_after(self.expire_after.as_ref())
    }
}

/// `expireAfter` with the API default applied.
pub(crate) fn effective_expire_after(value: Option<&NillableDuration>) -> NillableDuration {
    value.cloned().unwrap_or_else(|| {
        NillableDuration::parse(DEFAULT_EXPIRE_AFTER).expect("default expireAfter parses")
    })
}

/// Which nodes consolidation may remove or replace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConsolidationPolicy {
    /// Only nodes without (non-daemon) pods.
    WhenEmpty,
    /// Empty nodes and nodes whose pods fit elsewhere (the default).
    WhenEmptyOrUnderutilized,
    /// Like `WhenEmptyOrUnderutilized`, weighing savings against the disruption caused.
    Balanced,
}

/// The disruption methods a budget can be limited to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum DisruptionReason {
    /// Consolidation of nodes whose pods fit elsewhere.
    Underutilized,
    /// Removal of nodes without workload pods.
    Empty,
    /// Replacement of nodes that no longer match their NodePool/NodeClass.
    Drifted,
}

impl DisruptionReason {
    /// The wire form of the reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Underutilized => "Underutilized",
            Self::Empty => "Empty",
            Self::Drifted => "Drifted",
        }
    }
}

/// Disruption settings of a NodePool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    /// How long a node must go without pod churn before consolidation may act on it (`Never`
    /// disables consolidation). Ignored on static pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = DEFAULT_CONSOLIDATE_AFTER))]
    pub consolidate_after: Option<NillableDuration>,
    /// Which nodes consolidation considers. Ignored on static pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "WhenEmptyOrUnderutilized"))]
    pub consolidation_policy: Option<ConsolidationPolicy>,
    /// Limits on how many nodes may be disrupted at once; the most restrictive active budget
    /// wins. Defaults to a single `10%` budget. At most 50.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "default" = [{ "nodes": DEFAULT_BUDGET_NODES }],
        "maxItems" = 50,
        "x-kubernetes-list-type" = "atomic",
        "x-kubernetes-validations" = crate::schema::budgets_rules()
    ))]
    pub budgets: Option<Vec<Budget>>,
}

impl Disruption {
    /// `consolidateAfter`, or `0s` when absent.
    pub fn effective_consolidate_after(&self) -> NillableDuration {
        self.consolidate_after.clone().unwrap_or_else(|| {
            NillableDuration::parse(DEFAULT_CONSOLIDATE_AFTER).expect("default parses")
        })
    }

    /// `consolidationPolicy`, or `WhenEmptyOrUnderutilized` when absent.
    pub fn effective_consolidation_policy(&self) -> ConsolidationPolicy {
        self.consolidation_policy
            .unwrap_or(ConsolidationPolicy::WhenEmptyOrUnderutilized)
    }

    /// `budgets`, or the single default `10%` budget when absent.
    pub fn effective_budgets(&self) -> Vec<Budget> {
        self.budgets
            .clone()
            .unwrap_or_else(|| vec![Budget::default()])
    }
}

/// A limit on how many of a pool's nodes may be disrupting at the same time, optionally only
/// during a recurring window and only for some disruption reasons.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Budget {
    /// Maximum disrupting nodes: a count (`"5"`) or a percentage of the pool (`"10%"`).
    #[schemars(extend(
        "default" = DEFAULT_BUDGET_NODES,
        "pattern" = crate::patterns::BUDGET_NODES
    ))]
    pub nodes: String,
    /// Cron schedule (UTC, no time zones) at which the budget becomes active; requires
    /// `duration`. Absent means always active.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::BUDGET_SCHEDULE))]
    pub schedule: Option<String>,
    /// How long the budget stays active after each schedule hit (hours and minutes only);
    /// requires `schedule`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::BUDGET_DURATION))]
    pub duration: Option<Duration>,
    /// Disruption reasons the budget applies to; absent means all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxItems" = 50, "x-kubernetes-list-type" = "set"))]
    pub reasons: Option<Vec<DisruptionReason>>,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            nodes: DEFAULT_BUDGET_NODES.to_owned(),
            schedule: None,
            duration: None,
            reasons: None,
        }
    }
}

/// The parsed form of [`Budget::nodes`]: the core's (a count, or a percentage rounded up).
pub use joinery_core::disruption::BudgetNodes;

impl Budget {
    /// Parses `nodes`; `None` when it is not a count or a 0-100 percentage.
    pub fn nodes_value(&self) -> Option<BudgetNodes> {
        BudgetNodes::parse(&self.nodes)
    }

    /// Whether the budget limits the given disruption reason.
    pub fn applies_to(&self, reason: DisruptionReason) -> bool {
        self.reasons
            .as_ref()
            .is_none_or(|reasons| reasons.contains(&reason))
    }
}

/// Observed state of a NodePool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    /// Total capacity of the pool's non-deleting nodes, plus the `nodes` count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceList>,
    /// Number of nodes in the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = 0))]
    pub nodes: Option<i64>,
    /// Generation of the referenced NodeClass last seen; when it changes,
    /// `NodeRegistrationHealthy` is reset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_observed_generation: Option<i64>,
    /// Readiness signals (`ValidationSucceeded`, `NodeClassReady`, `NodeRegistrationHealthy`,
    /// `Ready`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["type"]
    ))]
    pub conditions: Option<Vec<Condition>>,
}

impl HasConditions for NodePoolStatus {
    fn conditions(&self) -> &[Condition] {
        self.conditions.as_deref().unwrap_or_default()
    }

    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        self.conditions.get_or_insert_with(Vec::new)
    }
}
