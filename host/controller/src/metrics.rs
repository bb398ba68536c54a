//! Prometheus metrics with upstream Karpenter's names and labels (plus Joinery's own
//! `joinery_*`), kept by the `prometheus-client` crate and rendered in the Prometheus text
//! format for `/metrics`.

use std::hash::Hash;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, prometheus_text};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The metric names (upstream's, namespace `karpenter`; Joinery's own start `joinery_`).
pub mod names {
    /// NodeClaims created, by `reason` and `nodepool`.
    pub const NODECLAIMS_CREATED: &str = "karpenter_nodeclaims_created_total";
    /// NodeClaims whose finalizer completed, by `nodepool`, `capacity_type`, `zone`.
    pub const NODECLAIMS_TERMINATED: &str = "karpenter_nodeclaims_terminated_total";
    /// NodeClaims disrupted, by `reason`, `nodepool`, `capacity_type`.
    pub const NODECLAIMS_DISRUPTED: &str = "karpenter_nodeclaims_disrupted_total";
    /// NodeClaims node repair deleted, by `condition` (snake case), `nodepool`,
    /// `capacity_type`, `image_id`.
    pub const NODECLAIMS_UNHEALTHY_DISRUPTED: &str =
        "karpenter_nodeclaims_unhealthy_disrupted_total";
    /// Nodes registered, by `nodepool`, `zone`.
    pub const NODES_CREATED: &str = "karpenter_nodes_created_total";
    /// Nodes whose finalizer completed, by `nodepool`, `zone`.
    pub const NODES_TERMINATED: &str = "karpenter_nodes_terminated_total";
    /// Nodes whose drain completed, by `nodepool`.
    pub const NODES_DRAINED: &str = "karpenter_nodes_drained_total";
    /// Eviction requests, by `code`.
    pub const EVICTION_REQUESTS: &str = "karpenter_pods_eviction_requests_total";
    /// Reschedulable pods on NodeClaims whose disruption started, by `reason`, `nodepool`,
    /// `capacity_type`.
    pub const PODS_DISRUPTION_INITIATED: &str = "karpenter_pods_disruption_initiated_total";
    /// Failed cloud-provider calls, by `controller`, `method`, `provider` and `error`.
    pub const CLOUDPROVIDER_ERRORS: &str = "karpenter_cloudprovider_errors_total";
    /// Instances no NodeClaim owned that garbage collection deleted, by `provider` (Joinery's own).
    pub const INSTANCES_GARBAGE_COLLECTED: &str = "joinery_instances_garbage_collected_total";
    /// Disruption decisions started, by `decision` (`delete`/`replace`), `reason` and
    /// `consolidation_type`.
    pub const VOLUNTARY_DISRUPTION_DECISIONS: &str =
        "karpenter_voluntary_disruption_decisions_total";
    /// Commands abandoned at validation, by `consolidation_type`.
    pub const VOLUNTARY_DISRUPTION_FAILED_VALIDATIONS: &str =
        "karpenter_voluntary_disruption_failed_validations_total";
    /// Started commands rolled back (a replacement vanished or never initialized), by
    /// `decision` and `reason`.
    pub const VOLUNTARY_DISRUPTION_QUEUE_FAILURES: &str =
        "karpenter_voluntary_disruption_queue_failures_total";
    /// Gauge: nodes a method may consider, by `reason`.
    pub const VOLUNTARY_DISRUPTION_ELIGIBLE_NODES: &str =
        "karpenter_voluntary_disruption_eligible_nodes";
    /// Gauge: nodes of a pool that may still be disrupted now, by `nodepool` and `reason`.
    pub const NODEPOOLS_ALLOWED_DISRUPTIONS: &str = "karpenter_nodepools_allowed_disruptions";
    /// Gauge (always 1): `version`, `goversion` (the Rust toolchain here), `goarch`, `commit`.
    pub const BUILD_INFO: &str = "karpenter_build_info";
    /// Gauge: Nodes in the cluster state.
    pub const CLUSTER_STATE_NODE_COUNT: &str = "karpenter_cluster_state_node_count";
    /// Gauge: 1 when every cache has synced.
    pub const CLUSTER_STATE_SYNCED: &str = "karpenter_cluster_state_synced";
    /// Gauge: a NodePool's resources in use, by `nodepool` and `resource_type`.
    pub const NODEPOOLS_USAGE: &str = "karpenter_nodepools_usage";
    /// Gauge: a NodePool's limits, by `nodepool` and `resource_type`.
    pub const NODEPOOLS_LIMIT: &str = "karpenter_nodepools_limit";
    /// Gauge (1 per pod): `name`, `namespace`, `owner`, `node`, `nodepool`, `zone`, `arch`,
    /// `capacity_type`, `instance_type`, `phase`, `scheduled`, `ready`, `managed`.
    pub const PODS_STATE: &str = "karpenter_pods_state";
    /// Histogram (upstream: summary): seconds from a pod's creation to its first Ready.
    pub const PODS_STARTUP_DURATION: &str = "karpenter_pods_startup_duration_seconds";
    /// Histogram: duration of a scheduling simulation, by `controller`.
    pub const SCHEDULER_SCHEDULING_DURATION: &str =
        "karpenter_scheduler_scheduling_duration_seconds";
    /// Gauge: pods in the scheduling pass under way, by `controller` and `scheduling_id`.
    pub const SCHEDULER_QUEUE_DEPTH: &str = "karpenter_scheduler_queue_depth";
    /// Histogram: from a NodeClaim's deletion to its finalizer's removal, by `nodepool`.
    pub const NODECLAIMS_TERMINATION_DURATION: &str =
        "karpenter_nodeclaims_termination_duration_seconds";
    /// Histogram (upstream: summary): from a Node's deletion to its finalizer's removal, by
    /// `nodepool`.
    pub const NODES_TERMINATION_DURATION: &str = "karpenter_nodes_termination_duration_seconds";
    /// Histogram: duration of cloud-provider calls, by `controller`, `method`, `provider`.
    pub const CLOUDPROVIDER_DURATION: &str = "karpenter_cloudprovider_duration_seconds";
    /// Histogram: duration of one disruption method's evaluation, by `reason` and
    /// `consolidation_type`.
    pub const VOLUNTARY_DISRUPTION_DECISION_EVALUATION_DURATION: &str =
        "karpenter_voluntary_disruption_decision_evaluation_duration_seconds";
    /// Histogram: from a NodeClaim's instance deletion being requested (its
    /// `InstanceTerminating` condition) to the cloud answering that the instance is gone, by
    /// `nodepool`.
    pub const NODECLAIMS_INSTANCE_TERMINATION_DURATION: &str =
        "karpenter_nodeclaims_instance_termination_duration_seconds";
    /// Gauge: a node's allocatable resources, by upstream's node labels and `resource_type`.
    pub const NODES_ALLOCATABLE: &str = "karpenter_nodes_allocatable";
    /// Gauge: what a node's pods request (DaemonSet pods included), by upstream's node labels
    /// and `resource_type`.
    pub const NODES_TOTAL_POD_REQUESTS: &str = "karpenter_nodes_total_pod_requests";
    /// Gauge: what a node's DaemonSet pods request, by upstream's node labels and
    /// `resource_type`.
    pub const NODES_TOTAL_DAEMON_REQUESTS: &str = "karpenter_nodes_total_daemon_requests";
    /// Gauge (1 per condition): `namespace`, `name`, `type`, `status`, `reason`, `group`,
    /// `kind` of each condition of each NodeClaim and NodePool (the operator package's).
    pub const STATUS_CONDITION_COUNT: &str = "operator_status_condition_count";
    /// Gauge: seconds a condition has held its status, labelled as
    /// [`STATUS_CONDITION_COUNT`].
    pub const STATUS_CONDITION_CURRENT_STATUS_SECONDS: &str =
        "operator_status_condition_current_status_seconds";
    /// Condition transitions seen, by `type`, `status` (the new one), `reason`, `group`,
    /// `kind`.
    pub const STATUS_CONDITION_TRANSITIONS: &str = "operator_status_condition_transitions_total";
    /// Histogram: how long a condition held its status before it changed, by `type`,
    /// `status` (the old one), `group`, `kind` (Prometheus's default buckets, as upstream).
    pub const STATUS_CONDITION_TRANSITION_SECONDS: &str =
        "operator_status_condition_transition_seconds";
    /// Plugin calls, by `plugin` and `method` (every world: cloud, renderer, pricing).
    pub const PLUGIN_CALLS: &str = "joinery_plugin_calls_total";
    /// Failed plugin calls, by `plugin`, `method` and `class` (`trap`, `timeout`,
    /// `memory`, `saturated`, the cloud error classes, …).
    pub const PLUGIN_ERRORS: &str = "joinery_plugin_errors_total";
    /// Hot reloads of plugins, by plugin and result (`success`, `failure`).
    pub const PLUGIN_RELOADS: &str = "joinery_plugin_reloads_total";
    /// Histogram: duration of plugin calls, by `plugin` and `method`.
    pub const PLUGIN_CALL_DURATION: &str = "joinery_plugin_call_duration_seconds";
    /// Gauge: peak linear memory of the plugin's latest call, by `plugin` and `method`.
    pub const PLUGIN_MEMORY: &str = "joinery_plugin_memory_bytes";
    /// Gauge: the memory limit (`limits.memoryMiB`) of the plugin's latest call, by `plugin`
    /// and `method` (the labels of [`PLUGIN_MEMORY`], to divide one by the other).
    pub const PLUGIN_MEMORY_LIMIT: &str = "joinery_plugin_memory_limit_bytes";
    /// Failed steps of a controller loop (or of one object's reconcile), by `controller` and
    /// `error` (the error's kind), as kube-rs's controller-rs counts them.
    pub const CONTROLLER_RECONCILE_ERRORS: &str = "joinery_controller_reconcile_errors_total";
}

/// The label sets, one struct per shape: a family is declared with one of them, so all its
/// series carry the same labels (in the order of the fields).
pub mod series {
    use prometheus_client::encoding::{
        EncodeLabelKey, EncodeLabelSet, EncodeLabelValue, LabelSetEncoder,
    };

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
            joinery_api::ConsolidationPolicy::WhenEmptyOrUnderutilized => {
                "when_empty_or_underutilized"
            }
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
            for (key, value) in self.pairs() {
                let mut label = encoder.encode_label();
                let mut key_encoder = label.encode_label_key()?;
                EncodeLabelKey::encode(&key, &mut key_encoder)?;
                let mut value_encoder = key_encoder.encode_label_value()?;
                EncodeLabelValue::encode(&value, &mut value_encoder)?;
                value_encoder.finish()?;
            }
            Ok(())
        }
    }
}

/// Upstream's duration buckets (seconds).
const DURATION_BUCKETS: [f64; 23] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0,
    50.0, 60.0, 120.0, 150.0, 300.0, 450.0, 600.0,
];

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// The Prometheus Go client's default buckets (seconds), which the operator package's
/// un-prefixed condition histogram keeps.
const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

fn default_histogram() -> Histogram {
    Histogram::new(DEFAULT_BUCKETS)
}

/// What a label set of a family must be.
pub trait LabelSet:
    EncodeLabelSet + Clone + Hash + Eq + std::fmt::Debug + Send + Sync + 'static
{
}

impl<T: EncodeLabelSet + Clone + Hash + Eq + std::fmt::Debug + Send + Sync + 'static> LabelSet
    for T
{
}

/// A counter family whose series all carry the label set `L`.
#[derive(Debug)]
pub struct Counters<L: LabelSet>(Family<L, Counter>);

impl<L: LabelSet> Counters<L> {
    fn register(registry: &mut Registry, name: &'static str, help: &str) -> Self {
        let family = Family::<L, Counter>::default();
        // The client adds `_total` to a counter's name.
        registry.register(name.trim_end_matches("_total"), help, family.clone());
        Counters(family)
    }

    /// Adds one to the series `labels`.
    pub fn inc(&self, labels: &L) {
        self.0.get_or_create(labels).inc();
    }

    /// Adds `amount` to the series `labels` (the series appears even for 0).
    pub fn add(&self, labels: &L, amount: u64) {
        self.0.get_or_create(labels).inc_by(amount);
    }

    /// The value of the series `labels` (0 when never incremented).
    pub fn get(&self, labels: &L) -> u64 {
        self.0.get(labels).map(|c| c.get()).unwrap_or(0)
    }
}

/// A gauge family whose series all carry the label set `L`.
#[derive(Debug)]
pub struct Gauges<L: LabelSet>(Family<L, Gauge<f64, AtomicU64>>);

impl<L: LabelSet> Gauges<L> {
    fn register(registry: &mut Registry, name: &'static str, help: &str) -> Self {
        let family = Family::<L, Gauge<f64, AtomicU64>>::default();
        registry.register(name, help, family.clone());
        Gauges(family)
    }

    /// Sets the series `labels` to `value`.
    pub fn set(&self, labels: &L, value: f64) {
        self.0.get_or_create(labels).set(value);
    }

    /// Replaces every series with `series` (series not listed go away: for gauges describing
    /// the current state).
    pub fn replace(&self, series: impl IntoIterator<Item = (L, f64)>) {
        self.0.clear();
        for (labels, value) in series {
            self.set(&labels, value);
        }
    }

    /// Removes every series.
    pub fn clear(&self) {
        self.0.clear();
    }

    /// The value of the series `labels`, if set.
    pub fn get(&self, labels: &L) -> Option<f64> {
        self.0.get(labels).map(|g| g.get())
    }
}

/// A histogram family (upstream's duration buckets) whose series all carry the label set `L`.
#[derive(Debug)]
pub struct Histograms<L: LabelSet>(Family<L, Histogram, fn() -> Histogram>);

impl<L: LabelSet> Histograms<L> {
    fn register(registry: &mut Registry, name: &'static str, help: &str) -> Self {
        Self::register_with(registry, name, help, duration_histogram)
    }

    fn register_with(
        registry: &mut Registry,
        name: &'static str,
        help: &str,
        buckets: fn() -> Histogram,
    ) -> Self {
        let family: Family<L, Histogram, fn() -> Histogram> = Family::new_with_constructor(buckets);
        registry.register(name, help, family.clone());
        Histograms(family)
    }

    /// Records one observation (seconds) in the series `labels`.
    pub fn observe(&self, labels: &L, seconds: f64) {
        self.0.get_or_create(labels).observe(seconds);
    }
}

/// Emits each series of `karpenter_pods_state`: its labels and its value.
pub type SeriesSink<'a> = dyn FnMut(&series::PodState<'_>, f64) + 'a;

/// Computes the series of `karpenter_pods_state`, handing each to the sink.
pub type SeriesSource = dyn Fn(&mut SeriesSink<'_>) + Send + Sync;

/// A gauge whose series are computed from the caches at each scrape rather than kept: one per
/// pod would otherwise hold about a kilobyte of labels per pod between scrapes.
pub struct PodsState {
    source: OnceLock<Box<SeriesSource>>,
}

impl PodsState {
    fn each_series(&self, sink: &mut SeriesSink<'_>) {
        if let Some(source) = self.source.get() {
            source(sink);
        }
    }

    /// Makes `source` compute the series at each scrape (and for [`PodsState::get`]). There
    /// is one source: a second is ignored with a warning.
    pub fn compute_on_scrape(&self, source: Box<SeriesSource>) {
        if self.source.set(source).is_err() {
            tracing::warn!(
                metric = names::PODS_STATE,
                "a second source for a scrape-time gauge; this is a bug in Joinery"
            );
        }
    }

    /// The value of the series `labels`, computed now, if there is one.
    pub fn get(&self, labels: &series::PodState<'_>) -> Option<f64> {
        let mut found = None;
        self.each_series(&mut |series, value| {
            if series == labels {
                found = Some(value);
            }
        });
        found
    }
}

impl std::fmt::Debug for PodsState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodsState")
            .field("source", &self.source.get().is_some())
            .finish()
    }
}

/// The registry's handle on [`PodsState`].
#[derive(Debug)]
struct PodsStateCollector(Arc<PodsState>);

impl Collector for PodsStateCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut metric = encoder.encode_descriptor(
            names::PODS_STATE,
            PODS_STATE_HELP,
            None,
            MetricType::Gauge,
        )?;
        let mut outcome = Ok(());
        self.0.each_series(&mut |labels, value| {
            if outcome.is_ok() {
                outcome = metric
                    .encode_family(labels)
                    .and_then(|mut series| series.encode_gauge(&value));
            }
        });
        outcome
    }
}

const PODS_STATE_HELP: &str = "Pod state is the current state of pods";

/// The controller's metrics, kept by the `prometheus-client` crate and served in the
/// Prometheus text format (what upstream's `/metrics` serves). Each family has its label set's
/// type ([`series`]), so it cannot be written with two label sets.
pub struct Metrics {
    registry: Registry,
    /// `karpenter_nodeclaims_created_total`.
    pub nodeclaims_created: Counters<series::ReasonNodePool>,
    /// `karpenter_nodeclaims_terminated_total`.
    pub nodeclaims_terminated: Counters<series::NodePoolCapacityZone>,
    /// `karpenter_nodeclaims_disrupted_total`.
    pub nodeclaims_disrupted: Counters<series::Disruption>,
    /// `karpenter_nodeclaims_unhealthy_disrupted_total`.
    pub nodeclaims_unhealthy_disrupted: Counters<series::UnhealthyDisruption>,
    /// `karpenter_nodes_created_total`.
    pub nodes_created: Counters<series::NodePoolZone>,
    /// `karpenter_nodes_terminated_total`.
    pub nodes_terminated: Counters<series::NodePoolZone>,
    /// `karpenter_nodes_drained_total`.
    pub nodes_drained: Counters<series::NodePool>,
    /// `karpenter_pods_eviction_requests_total`.
    pub eviction_requests: Counters<series::Code>,
    /// `karpenter_pods_disruption_initiated_total` (upstream: the labels of
    /// `karpenter_nodeclaims_disrupted_total`).
    pub pods_disruption_initiated: Counters<series::Disruption>,
    /// `karpenter_cloudprovider_errors_total`.
    pub cloudprovider_errors: Counters<series::CloudError>,
    /// `joinery_instances_garbage_collected_total`.
    pub instances_garbage_collected: Counters<series::Provider>,
    /// `karpenter_voluntary_disruption_decisions_total`.
    pub voluntary_disruption_decisions: Counters<series::Decision>,
    /// `karpenter_voluntary_disruption_failed_validations_total`.
    pub voluntary_disruption_failed_validations: Counters<series::ConsolidationType>,
    /// `karpenter_voluntary_disruption_queue_failures_total`.
    pub voluntary_disruption_queue_failures: Counters<series::DecisionReason>,
    /// `karpenter_voluntary_disruption_eligible_nodes`.
    pub voluntary_disruption_eligible_nodes: Gauges<series::Reason>,
    /// `karpenter_nodepools_allowed_disruptions`.
    pub nodepools_allowed_disruptions: Gauges<series::NodePoolReason>,
    build_info: Gauges<series::BuildInfo>,
    /// `karpenter_cluster_state_node_count`.
    pub cluster_state_node_count: Gauge<f64, AtomicU64>,
    /// `karpenter_cluster_state_synced`.
    pub cluster_state_synced: Gauge<f64, AtomicU64>,
    /// `karpenter_nodepools_usage`.
    pub nodepools_usage: Gauges<series::NodePoolResource>,
    /// `karpenter_nodepools_limit`.
    pub nodepools_limit: Gauges<series::NodePoolResource>,
    /// `karpenter_pods_state`, computed at each scrape.
    pub pods_state: Arc<PodsState>,
    /// `karpenter_pods_startup_duration_seconds`.
    pub pods_startup_duration: Histogram,
    /// `karpenter_scheduler_scheduling_duration_seconds`.
    pub scheduler_scheduling_duration: Histograms<series::Controller>,
    /// `karpenter_scheduler_queue_depth`.
    pub scheduler_queue_depth: Gauges<series::SchedulingQueue>,
    /// `karpenter_nodeclaims_termination_duration_seconds`.
    pub nodeclaims_termination_duration: Histograms<series::NodePool>,
    /// `karpenter_nodes_termination_duration_seconds`.
    pub nodes_termination_duration: Histograms<series::NodePool>,
    /// `karpenter_cloudprovider_duration_seconds`.
    pub cloudprovider_duration: Histograms<series::CloudCall>,
    /// `karpenter_voluntary_disruption_decision_evaluation_duration_seconds`.
    pub voluntary_disruption_decision_evaluation_duration: Histograms<series::Evaluation>,
    /// `karpenter_nodeclaims_instance_termination_duration_seconds`.
    pub nodeclaims_instance_termination_duration: Histograms<series::NodePool>,
    /// The node gauges (`karpenter_nodes_allocatable`, `…_total_pod_requests`,
    /// `…_total_daemon_requests`) and the condition gauges
    /// (`operator_status_condition_count`, `…_current_status_seconds`), computed at each
    /// scrape.
    pub computed: Arc<computed::Computed>,
    /// `operator_status_condition_transitions_total`.
    pub status_condition_transitions: Counters<series::ConditionTransition>,
    /// `operator_status_condition_transition_seconds`.
    pub status_condition_transition_seconds: Histograms<series::ConditionDuration>,
    /// `joinery_plugin_calls_total`.
    pub plugin_calls: Counters<series::PluginMethod>,
    /// `joinery_plugin_errors_total`.
    pub plugin_errors: Counters<series::PluginError>,
    /// `joinery_plugin_reloads_total{plugin,result}`.
    pub plugin_reloads: Counters<series::PluginReload>,
    /// `joinery_plugin_call_duration_seconds`.
    pub plugin_call_duration: Histograms<series::PluginMethod>,
    /// `joinery_plugin_memory_bytes`.
    pub plugin_memory: Gauges<series::PluginMethod>,
    /// `joinery_plugin_memory_limit_bytes`.
    pub plugin_memory_limit: Gauges<series::PluginMethod>,
    /// `joinery_controller_reconcile_errors_total`.
    pub controller_reconcile_errors: Counters<series::ReconcileError>,
    /// The length of the last exposition, to size the next one's buffer at once: at 50,000
    /// pods `karpenter_pods_state` alone is about 15 MB of text, and a buffer grown by
    /// doubling holds the old and the new copy at once while it grows.
    last_render_len: std::sync::atomic::AtomicUsize,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

fn gauge(registry: &mut Registry, name: &'static str, help: &str) -> Gauge<f64, AtomicU64> {
    let gauge = Gauge::<f64, AtomicU64>::default();
    registry.register(name, help, gauge.clone());
    gauge
}

impl Metrics {
    /// Every metric registered, and `karpenter_build_info` set.
    pub fn new() -> Metrics {
        let mut r = Registry::default();
        let pods_state = Arc::new(PodsState {
            source: OnceLock::new(),
        });
        let metrics = Metrics {
            nodeclaims_created: Counters::register(
                &mut r,
                names::NODECLAIMS_CREATED,
                "Number of nodeclaims created in total by Karpenter",
            ),
            nodeclaims_terminated: Counters::register(
                &mut r,
                names::NODECLAIMS_TERMINATED,
                "Number of nodeclaims terminated in total by Karpenter",
            ),
            nodeclaims_disrupted: Counters::register(
                &mut r,
                names::NODECLAIMS_DISRUPTED,
                "Number of nodeclaims disrupted in total by Karpenter",
            ),
            nodeclaims_unhealthy_disrupted: Counters::register(
                &mut r,
                names::NODECLAIMS_UNHEALTHY_DISRUPTED,
                "Number of unhealthy nodeclaims disrupted in total by Karpenter, by the node condition, nodepool and image",
            ),
            nodes_created: Counters::register(
                &mut r,
                names::NODES_CREATED,
                "Number of nodes created in total by Karpenter",
            ),
            nodes_terminated: Counters::register(
                &mut r,
                names::NODES_TERMINATED,
                "Number of nodes terminated in total by Karpenter",
            ),
            nodes_drained: Counters::register(
                &mut r,
                names::NODES_DRAINED,
                "The total number of nodes drained by Karpenter",
            ),
            eviction_requests: Counters::register(
                &mut r,
                names::EVICTION_REQUESTS,
                "The number of eviction requests by response code",
            ),
            pods_disruption_initiated: Counters::register(
                &mut r,
                names::PODS_DISRUPTION_INITIATED,
                "The number of pods whose disruption was initiated, by the NodeClaim's disruption reason",
            ),
            cloudprovider_errors: Counters::register(
                &mut r,
                names::CLOUDPROVIDER_ERRORS,
                "Total number of errors returned from CloudProvider calls",
            ),
            instances_garbage_collected: Counters::register(
                &mut r,
                names::INSTANCES_GARBAGE_COLLECTED,
                "Number of instances without a NodeClaim deleted by garbage collection",
            ),
            voluntary_disruption_decisions: Counters::register(
                &mut r,
                names::VOLUNTARY_DISRUPTION_DECISIONS,
                "Number of disruption decisions performed",
            ),
            voluntary_disruption_failed_validations: Counters::register(
                &mut r,
                names::VOLUNTARY_DISRUPTION_FAILED_VALIDATIONS,
                "Number of candidates that were selected for disruption but failed validation",
            ),
            voluntary_disruption_queue_failures: Counters::register(
                &mut r,
                names::VOLUNTARY_DISRUPTION_QUEUE_FAILURES,
                "Number of disruption commands that failed in the orchestration queue",
            ),
            voluntary_disruption_eligible_nodes: Gauges::register(
                &mut r,
                names::VOLUNTARY_DISRUPTION_ELIGIBLE_NODES,
                "Number of nodes eligible for disruption by Karpenter",
            ),
            nodepools_allowed_disruptions: Gauges::register(
                &mut r,
                names::NODEPOOLS_ALLOWED_DISRUPTIONS,
                "The number of nodes for a given NodePool that can be concurrently disrupting at a point in time",
            ),
            build_info: Gauges::register(
                &mut r,
                names::BUILD_INFO,
                "A metric with a constant '1' value labeled by version from which the controller was built",
            ),
            cluster_state_node_count: gauge(
                &mut r,
                names::CLUSTER_STATE_NODE_COUNT,
                "Current count of nodes in cluster state",
            ),
            cluster_state_synced: gauge(
                &mut r,
                names::CLUSTER_STATE_SYNCED,
                "Returns 1 if cluster state is synced and 0 otherwise",
            ),
            nodepools_usage: Gauges::register(
                &mut r,
                names::NODEPOOLS_USAGE,
                "The amount of resources that have been provisioned for a nodepool",
            ),
            nodepools_limit: Gauges::register(
                &mut r,
                names::NODEPOOLS_LIMIT,
                "Limits specified on the nodepool that restrict the quantity of resources provisioned",
            ),
            pods_state: {
                r.register_collector(Box::new(PodsStateCollector(pods_state.clone())));
                pods_state
            },
            pods_startup_duration: {
                let histogram = duration_histogram();
                r.register(
                    names::PODS_STARTUP_DURATION,
                    "The time from pod creation until the pod is running",
                    histogram.clone(),
                );
                histogram
            },
            scheduler_scheduling_duration: Histograms::register(
                &mut r,
                names::SCHEDULER_SCHEDULING_DURATION,
                "Duration of scheduling simulations used for deprovisioning and provisioning in seconds",
            ),
            scheduler_queue_depth: Gauges::register(
                &mut r,
                names::SCHEDULER_QUEUE_DEPTH,
                "The number of pods currently waiting to be scheduled",
            ),
            nodeclaims_termination_duration: Histograms::register(
                &mut r,
                names::NODECLAIMS_TERMINATION_DURATION,
                "Duration of NodeClaim termination in seconds",
            ),
            nodes_termination_duration: Histograms::register(
                &mut r,
                names::NODES_TERMINATION_DURATION,
                "The time taken between a node's deletion request and the removal of its finalizer",
            ),
            cloudprovider_duration: Histograms::register(
                &mut r,
                names::CLOUDPROVIDER_DURATION,
                "Duration of cloud provider method calls",
            ),
            voluntary_disruption_decision_evaluation_duration: Histograms::register(
                &mut r,
                names::VOLUNTARY_DISRUPTION_DECISION_EVALUATION_DURATION,
                "Duration of the disruption decision evaluation process in seconds",
            ),
            nodeclaims_instance_termination_duration: Histograms::register(
                &mut r,
                names::NODECLAIMS_INSTANCE_TERMINATION_DURATION,
                "Duration of CloudProvider Instance termination in seconds",
            ),
            computed: {
                let computed = Arc::new(computed::Computed::default());
                r.register_collector(Box::new(computed::ComputedCollector(computed.clone())));
                computed
            },
            status_condition_transitions: Counters::register(
                &mut r,
                names::STATUS_CONDITION_TRANSITIONS,
                "The count of transitions of a given object, type and status",
            ),
            status_condition_transition_seconds: Histograms::register_with(
                &mut r,
                names::STATUS_CONDITION_TRANSITION_SECONDS,
                "The amount of time a condition was in a given state before transitioning",
                default_histogram,
            ),
            plugin_calls: Counters::register(
                &mut r,
                names::PLUGIN_CALLS,
                "Calls of wasm plugins, by plugin and method",
            ),
            plugin_errors: Counters::register(
                &mut r,
                names::PLUGIN_ERRORS,
                "Failed calls of wasm plugins, by plugin, method and error class",
            ),
            plugin_reloads: Counters::register(
                &mut r,
                names::PLUGIN_RELOADS,
                "Hot reloads of wasm plugins, by plugin and result (success, failure)",
            ),
            plugin_call_duration: Histograms::register(
                &mut r,
                names::PLUGIN_CALL_DURATION,
                "Duration of wasm plugin calls in seconds",
            ),
            plugin_memory: Gauges::register(
                &mut r,
                names::PLUGIN_MEMORY,
                "Peak linear memory of the latest call of a wasm plugin method, in bytes",
            ),
            plugin_memory_limit: Gauges::register(
                &mut r,
                names::PLUGIN_MEMORY_LIMIT,
                "Memory limit of a wasm plugin, in bytes, as its latest call of the method ran under",
            ),
            controller_reconcile_errors: Counters::register(
                &mut r,
                names::CONTROLLER_RECONCILE_ERRORS,
                "Failed steps of a controller loop, by controller and error kind",
            ),
            registry: r,
            last_render_len: Default::default(),
        };
        let toolchain = format!(
            "rust {}",
            option_env!("CARGO_PKG_RUST_VERSION").unwrap_or("stable")
        );
        metrics.build_info.set(
            &series::BuildInfo {
                version: env!("CARGO_PKG_VERSION").into(),
                goversion: toolchain,
                goarch: std::env::consts::ARCH.into(),
                commit: option_env!("JOINERY_COMMIT").unwrap_or("unknown").into(),
            },
            1.0,
        );
        metrics
    }

    /// Counts a failed step (or reconcile) of the loop `controller`, by the error's kind.
    pub fn reconcile_error(&self, controller: &str, error: &crate::ControllerError) {
        self.controller_reconcile_errors
            .inc(&series::ReconcileError {
                controller: controller.into(),
                error: error.metric_label().into(),
            });
    }

    /// The Prometheus text exposition (format 0.0.4) of every metric.
    pub fn render(&self) -> String {
        use std::sync::atomic::Ordering;
        let last = self.last_render_len.load(Ordering::Relaxed);
        // Room for the last exposition and a little more, so that a scrape of a steady cluster
        // never grows its buffer.
        let mut out = String::with_capacity(last + last / 16 + 4096);
        // Writing into a String cannot fail.
        let _ = prometheus_text::encode(&mut out, &self.registry);
        self.last_render_len.store(out.len(), Ordering::Relaxed);
        out
    }
}

/// Whether a failed call is in fact the answer its caller waits for: `delete` answers
/// `not-found` once the instance is gone (the WIT contract), which is how a deletion ends, not
/// an error of the plugin.
fn confirms_gone(method: &str, class: &str) -> bool {
    method == "delete" && class == "not_found"
}

/// The content type of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

impl joinery_runtime::services::CallObserver for Metrics {
    fn plugin_reload(&self, plugin: &str, result: &str) {
        self.plugin_reloads.inc(&series::PluginReload {
            plugin: plugin.into(),
            result: result.into(),
        });
    }

    fn plugin_call(&self, call: &joinery_runtime::services::CallRecord<'_>) {
        let series = series::PluginMethod {
            plugin: call.plugin.into(),
            method: call.method.into(),
        };
        self.plugin_calls.inc(&series);
        self.plugin_call_duration
            .observe(&series, call.duration.as_secs_f64());
        self.plugin_memory
            .set(&series, call.peak_memory_bytes as f64);
        self.plugin_memory_limit
            .set(&series, call.memory_limit_bytes as f64);
        if let Some(class) = call.error
            && !confirms_gone(call.method, class)
        {
            self.plugin_errors.inc(&series::PluginError {
                plugin: call.plugin.into(),
                method: call.method.into(),
                class: class.into(),
            });
        }
    }
}

pub mod computed;

#[cfg(test)]
mod tests;
