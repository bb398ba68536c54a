//! Gauges computed from the caches when `/metrics` is read, like `karpenter_pods_state`:
//! upstream's per-node resource gauges (`karpenter_nodes_allocatable`,
//! `karpenter_nodes_total_pod_requests`, `karpenter_nodes_total_daemon_requests`) and the
//! operator package's per-object condition gauges (`operator_status_condition_count`,
//! `operator_status_condition_current_status_seconds`). Computed rather than kept, a series
//! exists exactly while its node (or object, or condition) is cached: nothing has to remove
//! it when the node goes, and nothing is held between scrapes.

use std::sync::OnceLock;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelKey, EncodeLabelSet, EncodeLabelValue, LabelSetEncoder,
};
use prometheus_client::metrics::MetricType;

use super::names;

/// Label (name, value) pairs encoded in their order: the one way the hand-written label sets
/// of this module reach the exposition.
#[derive(Debug, Clone, Copy)]
pub struct Pairs<'a>(pub &'a [(&'a str, &'a str)]);

impl EncodeLabelSet for Pairs<'_> {
    fn encode(&self, encoder: &mut LabelSetEncoder) -> Result<(), std::fmt::Error> {
        for (key, value) in self.0 {
            let mut label = encoder.encode_label();
            let mut key_encoder = label.encode_label_key()?;
            EncodeLabelKey::encode(key, &mut key_encoder)?;
            let mut value_encoder = key_encoder.encode_label_value()?;
            EncodeLabelValue::encode(value, &mut value_encoder)?;
            value_encoder.finish()?;
        }
        Ok(())
    }
}

/// Upstream's labels of a node's gauges (without `resource_type`): the suffixes of the
/// well-known labels in snake case, then `node_name`, `phase` and `managed`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeLabels {
    /// `karpenter.sh/nodepool`.
    pub nodepool: String,
    /// `topology.kubernetes.io/zone`.
    pub zone: String,
    /// `topology.kubernetes.io/region`.
    pub region: String,
    /// `node.kubernetes.io/instance-type`.
    pub instance_type: String,
    /// `kubernetes.io/arch`.
    pub arch: String,
    /// `kubernetes.io/os`.
    pub os: String,
    /// `karpenter.sh/capacity-type`.
    pub capacity_type: String,
    /// `node.kubernetes.io/windows-build`.
    pub windows_build: String,
    /// The Node's name.
    pub node_name: String,
    /// The Node's `status.phase` (deprecated in Kubernetes; empty on most nodes).
    pub phase: String,
    /// `true` when a NodePool manages the node.
    pub managed: String,
}

impl NodeLabels {
    /// The labels as (name, value) pairs, followed by `resource_type`.
    pub fn pairs<'a>(&'a self, resource_type: &'a str) -> [(&'static str, &'a str); 12] {
        [
            ("nodepool", &self.nodepool),
            ("zone", &self.zone),
            ("region", &self.region),
            ("instance_type", &self.instance_type),
            ("arch", &self.arch),
            ("os", &self.os),
            ("capacity_type", &self.capacity_type),
            ("windows_build", &self.windows_build),
            ("node_name", &self.node_name),
            ("phase", &self.phase),
            ("managed", &self.managed),
            ("resource_type", resource_type),
        ]
    }
}

/// One node's resource gauges: amounts by upstream's resource type (`cpu` in cores,
/// `memory` and `ephemeral_storage` in bytes, other resources as counts).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeRow {
    /// The node's labels.
    pub labels: NodeLabels,
    /// `status.allocatable`.
    pub allocatable: Vec<(String, f64)>,
    /// What the node's unfinished pods request, DaemonSet pods included.
    pub pod_requests: Vec<(String, f64)>,
    /// What the node's unfinished DaemonSet pods request.
    pub daemon_requests: Vec<(String, f64)>,
}

/// The operator package's labels of one condition of one object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConditionLabels {
    /// The object's namespace (empty for cluster-scoped kinds).
    pub namespace: String,
    /// The object's name.
    pub name: String,
    /// The condition's type.
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// The condition's reason.
    pub reason: String,
    /// The object's API group.
    pub group: String,
    /// The object's kind.
    pub kind: String,
}

impl ConditionLabels {
    /// The labels as (name, value) pairs, in the exposition's order.
    pub fn pairs(&self) -> [(&'static str, &str); 7] {
        [
            ("namespace", &self.namespace),
            ("name", &self.name),
            ("type", &self.type_),
            ("status", &self.status),
            ("reason", &self.reason),
            ("group", &self.group),
            ("kind", &self.kind),
        ]
    }
}

/// One condition of one object, and how long it has held its status.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConditionRow {
    /// Its labels.
    pub labels: ConditionLabels,
    /// Seconds since its `lastTransitionTime`.
    pub seconds: f64,
}

/// Computes every node's row at a scrape.
pub type NodeSource = dyn Fn() -> Vec<NodeRow> + Send + Sync;

/// Computes every condition's row at a scrape.
pub type ConditionSource = dyn Fn() -> Vec<ConditionRow> + Send + Sync;

/// The sources of the scrape-time node and condition gauges (none until set: the families
/// are then declared without series).
#[derive(Default)]
pub struct Computed {
    nodes: OnceLock<Box<NodeSource>>,
    conditions: OnceLock<Box<ConditionSource>>,
}

impl std::fmt::Debug for Computed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Computed")
            .field("nodes", &self.nodes.get().is_some())
            .field("conditions", &self.conditions.get().is_some())
            .finish()
    }
}

impl Computed {
    /// Makes `source` compute the node gauges at each scrape (a second source is ignored
    /// with a warning).
    pub fn nodes_on_scrape(&self, source: Box<NodeSource>) {
        if self.nodes.set(source).is_err() {
            tracing::warn!(
                metric = names::NODES_ALLOCATABLE,
                "a second source for a scrape-time gauge; this is a bug in Joinery"
            );
        }
    }

    /// Makes `source` compute the condition gauges at each scrape (a second source is
    /// ignored with a warning).
    pub fn conditions_on_scrape(&self, source: Box<ConditionSource>) {
        if self.conditions.set(source).is_err() {
            tracing::warn!(
                metric = names::STATUS_CONDITION_COUNT,
                "a second source for a scrape-time gauge; this is a bug in Joinery"
            );
        }
    }

    /// The node rows, computed now (none without a source).
    pub fn node_rows(&self) -> Vec<NodeRow> {
        self.nodes.get().map(|source| source()).unwrap_or_default()
    }

    /// The condition rows, computed now (none without a source).
    pub fn condition_rows(&self) -> Vec<ConditionRow> {
        self.conditions
            .get()
            .map(|source| source())
            .unwrap_or_default()
    }
}

/// The registry's handle on [`Computed`].
#[derive(Debug)]
pub(super) struct ComputedCollector(pub(super) std::sync::Arc<Computed>);

/// A node gauge: its name, help, and which amounts of a row it shows.
type NodeFamily = (&'static str, &'static str, fn(&NodeRow) -> &[(String, f64)]);

/// A condition gauge: its name, help, and its value for a row.
type ConditionFamily = (&'static str, &'static str, fn(&ConditionRow) -> f64);

const NODE_FAMILIES: [NodeFamily; 3] = [
    (
        names::NODES_ALLOCATABLE,
        "Node allocatable are the resources allocatable by nodes",
        |row| &row.allocatable,
    ),
    (
        names::NODES_TOTAL_POD_REQUESTS,
        "Node total pod requests are the resources requested by pods bound to nodes, including the DaemonSet pods",
        |row| &row.pod_requests,
    ),
    (
        names::NODES_TOTAL_DAEMON_REQUESTS,
        "Node total daemon requests are the resource requested by DaemonSet pods bound to nodes",
        |row| &row.daemon_requests,
    ),
];

impl Collector for ComputedCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let rows = self.0.node_rows();
        for (name, help, amounts) in NODE_FAMILIES {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for row in &rows {
                for (resource, value) in amounts(row) {
                    let pairs = row.labels.pairs(resource);
                    metric.encode_family(&Pairs(&pairs))?.encode_gauge(value)?;
                }
            }
        }
        let conditions = self.0.condition_rows();
        let families: [ConditionFamily; 2] = [
            (
                names::STATUS_CONDITION_COUNT,
                "The number of a condition for a given object, type and status",
                |_| 1.0,
            ),
            (
                names::STATUS_CONDITION_CURRENT_STATUS_SECONDS,
                "The current amount of time in seconds that a status condition has been in a specific state",
                |row| row.seconds,
            ),
        ];
        for (name, help, value) in families {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for row in &conditions {
                let pairs = row.labels.pairs();
                metric
                    .encode_family(&Pairs(&pairs))?
                    .encode_gauge(&value(row))?;
            }
        }
        Ok(())
    }
}
