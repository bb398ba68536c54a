//! Prometheus counters and gauges with upstream Karpenter's metric names and labels, rendered in the
//! text exposition format for `/metrics`.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

/// Counters created by the controllers (all `_total`, namespace `karpenter`).
pub mod names {
    /// NodeClaims created, by `reason` and `nodepool`.
    pub const NODECLAIMS_CREATED: &str = "karpenter_nodeclaims_created_total";
    /// NodeClaims whose finalizer completed, by `nodepool`, `capacity_type`, `zone`.
    pub const NODECLAIMS_TERMINATED: &str = "karpenter_nodeclaims_terminated_total";
    /// NodeClaims disrupted, by `reason`, `nodepool`, `capacity_type`.
    pub const NODECLAIMS_DISRUPTED: &str = "karpenter_nodeclaims_disrupted_total";
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
    pub const VOLUNTARY_DISRUPTION_DECISIONS: &str = "karpenter_voluntary_disruption_decisions_total";
    /// Commands abandoned at validation, by `consolidation_type`.
    pub const VOLUNTARY_DISRUPTION_FAILED_VALIDATIONS: &str = "karpenter_voluntary_disruption_failed_validations_total";
    /// Started commands rolled back (a replacement vanished or never initialized), by
    /// `decision` and `reason`.
    pub const VOLUNTARY_DISRUPTION_QUEUE_FAILURES: &str = "karpenter_voluntary_disruption_queue_failures_total";
    /// Gauge: nodes a method may consider, by `reason`.
    pub const VOLUNTARY_DISRUPTION_ELIGIBLE_NODES: &str = "karpenter_voluntary_disruption_eligible_nodes";
    /// Gauge: nodes of a pool that may still be disrupted now, by `nodepool` and `reason`.
    pub const NODEPOOLS_ALLOWED_DISRUPTIONS: &str = "karpenter_nodepools_allowed_disruptions";
}

const HELP: &[(&str, &str)] = &[
    (names::NODECLAIMS_CREATED, "Number of nodeclaims created in total by Karpenter."),
    (names::NODECLAIMS_TERMINATED, "Number of nodeclaims terminated in total by Karpenter."),
    (names::NODECLAIMS_DISRUPTED, "Number of nodeclaims disrupted in total by Karpenter."),
    (names::NODES_CREATED, "Number of nodes created in total by Karpenter."),
    (names::NODES_TERMINATED, "Number of nodes terminated in total by Karpenter."),
    (names::NODES_DRAINED, "The total number of nodes drained by Karpenter."),
    (names::EVICTION_REQUESTS, "The number of eviction requests by response code."),
    (names::PODS_DISRUPTION_INITIATED, "The number of pods whose disruption was initiated, by the NodeClaim's disruption reason."),
    (names::CLOUDPROVIDER_ERRORS, "Total number of errors returned from CloudProvider calls."),
    (names::INSTANCES_GARBAGE_COLLECTED, "Number of instances without a NodeClaim deleted by garbage collection."),
    (names::VOLUNTARY_DISRUPTION_DECISIONS, "Number of disruption decisions performed."),
    (names::VOLUNTARY_DISRUPTION_FAILED_VALIDATIONS, "Number of candidates that were selected for disruption but failed validation."),
    (names::VOLUNTARY_DISRUPTION_QUEUE_FAILURES, "Number of disruption commands that failed in the orchestration queue."),
];

/// Gauges (current values), with their help text.
const GAUGES: &[(&str, &str)] = &[
    (names::VOLUNTARY_DISRUPTION_ELIGIBLE_NODES, "Number of nodes eligible for disruption by Karpenter."),
    (names::NODEPOOLS_ALLOWED_DISRUPTIONS, "The number of nodes for a given NodePool that can be concurrently disrupting at a point in time."),
];

type Labels = Vec<(&'static str, String)>;

/// A set of counters.
#[derive(Default)]
pub struct Metrics {
    counters: Mutex<BTreeMap<&'static str, BTreeMap<Labels, u64>>>,
    gauges: Mutex<BTreeMap<&'static str, BTreeMap<Labels, u64>>>,
}

impl Metrics {
    /// Adds one to the counter `name` with `labels`.
    pub fn inc(&self, name: &'static str, labels: &[(&'static str, &str)]) {
        self.add(name, labels, 1);
    }

    /// Adds `amount` to the counter `name` with `labels` (the series appears even for 0).
    pub fn add(&self, name: &'static str, labels: &[(&'static str, &str)], amount: u64) {
        let labels: Labels = labels.iter().map(|(k, v)| (*k, v.to_string())).collect();
        *self.counters.lock().expect("metrics lock").entry(name).or_default().entry(labels).or_default() += amount;
    }

    /// Sets the gauge `name` with `labels` to `value`.
    pub fn set(&self, name: &'static str, labels: &[(&'static str, &str)], value: u64) {
        let labels: Labels = labels.iter().map(|(k, v)| (*k, v.to_string())).collect();
        self.gauges.lock().expect("metrics lock").entry(name).or_default().insert(labels, value);
    }

    /// The value of a gauge, if set.
    pub fn gauge(&self, name: &str, labels: &[(&'static str, &str)]) -> Option<u64> {
        let labels: Labels = labels.iter().map(|(k, v)| (*k, v.to_string())).collect();
        self.gauges.lock().expect("metrics lock").get(name).and_then(|m| m.get(&labels)).copied()
    }

    /// The value of a counter (0 when never incremented).
    pub fn get(&self, name: &str, labels: &[(&'static str, &str)]) -> u64 {
        let labels: Labels = labels.iter().map(|(k, v)| (*k, v.to_string())).collect();
        self.counters.lock().expect("metrics lock").get(name).and_then(|m| m.get(&labels)).copied().unwrap_or(0)
    }

    /// The Prometheus text exposition of every counter and gauge.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (kind, help, series) in [("counter", HELP, &self.counters), ("gauge", GAUGES, &self.gauges)] {
            let series = series.lock().expect("metrics lock");
            for (name, help) in help {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
                for (labels, value) in series.get(name).into_iter().flatten() {
                    let rendered: Vec<String> =
                        labels.iter().map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n"))).collect();
                    let _ = writeln!(out, "{name}{{{}}} {value}", rendered.join(","));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_render_in_text_format_with_escaped_labels() {
        let m = Metrics::default();
        m.inc(names::NODECLAIMS_CREATED, &[("reason", "provisioned"), ("nodepool", "a\"b")]);
        m.inc(names::NODECLAIMS_CREATED, &[("reason", "provisioned"), ("nodepool", "a\"b")]);
        assert_eq!(m.get(names::NODECLAIMS_CREATED, &[("reason", "provisioned"), ("nodepool", "a\"b")]), 2);
        let text = m.render();
        assert!(text.contains("# TYPE karpenter_nodeclaims_created_total counter"), "{text}");
        assert!(text.contains("karpenter_nodeclaims_created_total{reason=\"provisioned\",nodepool=\"a\\\"b\"} 2"), "{text}");
        m.set(names::NODEPOOLS_ALLOWED_DISRUPTIONS, &[("nodepool", "p"), ("reason", "Empty")], 3);
        m.set(names::NODEPOOLS_ALLOWED_DISRUPTIONS, &[("nodepool", "p"), ("reason", "Empty")], 1);
        let text = m.render();
        assert!(text.contains("# TYPE karpenter_nodepools_allowed_disruptions gauge"), "{text}");
        assert!(text.contains("karpenter_nodepools_allowed_disruptions{nodepool=\"p\",reason=\"Empty\"} 1"), "{text}");
    }
}
