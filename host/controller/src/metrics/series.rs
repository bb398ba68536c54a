//! The label sets, one struct per shape: a family is declared with one of them, so all its
//! series carry the same labels (in the order of the fields).

use prometheus_client::encoding::{EncodeLabelSet, LabelSetEncoder};

/// `{reason, nodepool}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ReasonNodePool {
    /// `provisioned`, `static`, or the lowercase disruption reason.
    pub reason: String,
    /// The NodePool.
    pub nodepool: String,
}

/// `{nodepool, capacity_type, zone}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct NodePoolCapacityZone {
    /// The NodePool.
    pub nodepool: String,
    /// `on-demand`, `spot`, …
    pub capacity_type: String,
    /// The zone.
    pub zone: String,
}

/// `{reason, nodepool, capacity_type, consolidation_policy, termination_mode}`: upstream's
/// labels of a NodeClaim's disruption, shared by `karpenter_nodeclaims_disrupted_total`
/// and `karpenter_pods_disruption_initiated_total` wherever either is written.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct Disruption {
    /// The lowercase disruption reason.
    pub reason: String,
    /// The NodePool.
    pub nodepool: String,
    /// `on-demand`, `spot`, …
    pub capacity_type: String,
    /// The NodePool's consolidation policy in snake case (`when_empty`,
    /// `when_empty_or_underutilized`, `balanced`), only for consolidation; empty otherwise.
    pub consolidation_policy: String,
    /// `graceful` (no terminationGracePeriod), `eventual` (a positive one) or `forceful`
    /// (zero).
    pub termination_mode: String,
}

impl Disruption {
    /// The labels of a disruption of `claim` for `reason`: its NodePool and capacity type
    /// from its labels (empty when it has none), its termination mode from its
    /// terminationGracePeriod, and `consolidation_policy` as given.
    pub fn of_claim(
        reason: &str,
        consolidation_policy: &str,
        claim: &joinery_api::NodeClaim,
    ) -> Self {
        let label = |key: &str| {
            claim
                .metadata
                .labels
                .as_ref()
                .and_then(|labels| labels.get(key))
                .cloned()
                .unwrap_or_default()
        };
        Disruption {
            reason: reason.to_string(),
            nodepool: label(joinery_core::labels::NODEPOOL_LABEL),
            capacity_type: label(joinery_core::labels::CAPACITY_TYPE_LABEL),
            consolidation_policy: consolidation_policy.to_string(),
            termination_mode: termination_mode(claim).to_string(),
        }
    }
}

/// Upstream's `termination_mode` of a claim: `graceful` without a terminationGracePeriod,
/// `forceful` with a zero one, `eventual` otherwise.
pub fn termination_mode(claim: &joinery_api::NodeClaim) -> &'static str {
    match &claim.spec.termination_grace_period {
        None => "graceful",
        Some(period) if period.duration().is_zero() => "forceful",
        Some(_) => "eventual",
    }
}

/// Upstream's `consolidation_policy` label value: the policy in snake case.
pub fn consolidation_policy(policy: joinery_api::ConsolidationPolicy) -> &'static str {
    match policy {
        joinery_api::ConsolidationPolicy::WhenEmpty => "when_empty",
        joinery_api::ConsolidationPolicy::WhenEmptyOrUnderutilized => "when_empty_or_underutilized",
        joinery_api::ConsolidationPolicy::Balanced => "balanced",
    }
}

/// `{condition, nodepool, capacity_type, image_id}`: upstream's labels of
/// `karpenter_nodeclaims_unhealthy_disrupted_total`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct UnhealthyDisruption {
    /// The node condition's type in snake case (`ready`, `memory_pressure`).
    pub condition: String,
    /// The NodePool.
    pub nodepool: String,
    /// `on-demand`, `spot`, …
    pub capacity_type: String,
    /// The NodeClaim's `status.imageID`.
    pub image_id: String,
}

/// `{nodepool, zone}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct NodePoolZone {
    /// The NodePool.
    pub nodepool: String,
    /// The zone.
    pub zone: String,
}

/// `{nodepool}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct NodePool {
    /// The NodePool.
    pub nodepool: String,
}

/// `{code}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct Code {
    /// The HTTP status code.
    pub code: String,
}

/// `{controller, method, provider}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct CloudCall {
    /// The loop that made the call.
    pub controller: String,
    /// The cloud method.
    pub method: String,
    /// The cloud plugin.
    pub provider: String,
}

/// `{controller, method, provider, error}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct CloudError {
    /// The loop that made the call.
    pub controller: String,
    /// The cloud method.
    pub method: String,
    /// The cloud plugin.
    pub provider: String,
    /// The error's class.
    pub error: String,
}

/// `{provider}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct Provider {
    /// The cloud plugin.
    pub provider: String,
}

/// `{decision, reason, consolidation_type}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct Decision {
    /// `delete` or `replace`.
    pub decision: String,
    /// The lowercase disruption reason.
    pub reason: String,
    /// `empty`, `multi`, `single` or empty.
    pub consolidation_type: String,
}

/// `{consolidation_type}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ConsolidationType {
    /// `empty`, `multi`, `single` or empty.
    pub consolidation_type: String,
}

/// `{decision, reason}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct DecisionReason {
    /// `delete` or `replace`.
    pub decision: String,
    /// The lowercase disruption reason.
    pub reason: String,
}

/// `{reason}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct Reason {
    /// The lowercase disruption reason.
    pub reason: String,
}

/// `{nodepool, reason}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct NodePoolReason {
    /// The NodePool.
    pub nodepool: String,
    /// The budget reason (`Empty`, `Drifted`, `Underutilized`).
    pub reason: String,
}

/// `{version, goversion, goarch, commit}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct BuildInfo {
    /// The crate's version.
    pub version: String,
    /// The Rust toolchain.
    pub goversion: String,
    /// The architecture.
    pub goarch: String,
    /// The commit built.
    pub commit: String,
}

/// `{nodepool, resource_type}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct NodePoolResource {
    /// The NodePool.
    pub nodepool: String,
    /// The resource (`cpu`, `memory`, `nodes`, …).
    pub resource_type: String,
}

/// `{controller}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct Controller {
    /// The loop.
    pub controller: String,
}

/// `{controller, scheduling_id}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct SchedulingQueue {
    /// The loop.
    pub controller: String,
    /// The scheduling pass.
    pub scheduling_id: String,
}

/// `{reason, consolidation_type}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct Evaluation {
    /// The lowercase disruption reason.
    pub reason: String,
    /// `empty`, `multi`, `single` or empty.
    pub consolidation_type: String,
}

/// `{plugin, method}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct PluginMethod {
    /// The plugin.
    pub plugin: String,
    /// The WIT method.
    pub method: String,
}

/// `{plugin, method, class}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct PluginError {
    /// The plugin.
    pub plugin: String,
    /// The WIT method.
    pub method: String,
    /// The error's class.
    pub class: String,
}

/// `{plugin, result}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct PluginReload {
    /// The plugin (empty when a failed reload names none, e.g. a missing directory).
    pub plugin: String,
    /// `success` or `failure`.
    pub result: String,
}

/// `{controller, error}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub struct ReconcileError {
    /// The loop.
    pub controller: String,
    /// The error's kind ([`ControllerError::metric_label`](crate::ControllerError::metric_label)).
    pub error: String,
}

/// `{type, status, reason, group, kind}`: a condition transition (the operator package's
/// labels).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ConditionTransition {
    /// The condition's type.
    pub type_: String,
    /// The status it changed to.
    pub status: String,
    /// Its reason.
    pub reason: String,
    /// The object's API group.
    pub group: String,
    /// The object's kind.
    pub kind: String,
}

impl EncodeLabelSet for ConditionTransition {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        super::computed::Pairs(&[
            ("type", &self.type_),
            ("status", &self.status),
            ("reason", &self.reason),
            ("group", &self.group),
            ("kind", &self.kind),
        ])
        .encode(encoder)
    }
}

/// `{type, status, group, kind}`: how long a condition held a status.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ConditionDuration {
    /// The condition's type.
    pub type_: String,
    /// The status it held.
    pub status: String,
    /// The object's API group.
    pub group: String,
    /// The object's kind.
    pub kind: String,
}

impl EncodeLabelSet for ConditionDuration {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        super::computed::Pairs(&[
            ("type", &self.type_),
            ("status", &self.status),
            ("group", &self.group),
            ("kind", &self.kind),
        ])
        .encode(encoder)
    }
}

/// `karpenter_pods_state`'s labels for one pod, borrowed from the caches at a scrape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PodState<'a> {
    /// The pod's name.
    pub name: &'a str,
    /// Its namespace.
    pub namespace: &'a str,
    /// Its first owner, `Kind/name`.
    pub owner: &'a str,
    /// Its node.
    pub node: &'a str,
    /// `true` when it has a node.
    pub scheduled: &'a str,
    /// The node's NodePool.
    pub nodepool: &'a str,
    /// The node's zone.
    pub zone: &'a str,
    /// The node's architecture.
    pub arch: &'a str,
    /// The node's capacity type.
    pub capacity_type: &'a str,
    /// The node's instance type.
    pub instance_type: &'a str,
    /// The pod's phase.
    pub phase: &'a str,
    /// `true` when it is Ready.
    pub ready: &'a str,
    /// `true` when its node belongs to a NodePool.
    pub managed: &'a str,
}

impl PodState<'_> {
    /// The labels as (name, value) pairs, in the exposition's order.
    pub fn pairs(&self) -> [(&'static str, &str); 13] {
        [
            ("name", self.name),
            ("namespace", self.namespace),
            ("owner", self.owner),
            ("node", self.node),
            ("scheduled", self.scheduled),
            ("nodepool", self.nodepool),
            ("zone", self.zone),
            ("arch", self.arch),
            ("capacity_type", self.capacity_type),
            ("instance_type", self.instance_type),
            ("phase", self.phase),
            ("ready", self.ready),
            ("managed", self.managed),
        ]
    }
}

// By hand: the derive does not take a lifetime.
impl EncodeLabelSet for PodState<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        super::computed::Pairs(&self.pairs()).encode(encoder)
    }
}
