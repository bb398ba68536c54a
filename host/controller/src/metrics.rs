//! Prometheus counters with upstream Karpenter's metric names and labels, rendered in the
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
];

type Labels = Vec<(&'static str, String)>;

/// A set of counters.
#[derive(Default)]
pub struct Metrics {
    counters: Mutex<BTreeMap<&'static str, BTreeMap<Labels, u64>>>,
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

    /// The value of a counter (0 when never incremented).
    pub fn get(&self, name: &str, labels: &[(&'static str, &str)]) -> u64 {
        let labels: Labels = labels.iter().map(|(k, v)| (*k, v.to_string())).collect();
        self.counters.lock().expect("metrics lock").get(name).and_then(|m| m.get(&labels)).copied().unwrap_or(0)
    }

    /// The Prometheus text exposition of every counter.
    pub fn render(&self) -> String {
        let counters = self.counters.lock().expect("metrics lock");
        let mut out = String::new();
        for (name, help) in HELP {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (labels, value) in counters.get(name).into_iter().flatten() {
                let rendered: Vec<String> =
                    labels.iter().map(|(k, v)| format!("{k}=\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n"))).collect();
                let _ = writeln!(out, "{name}{{{}}} {value}", rendered.join(","));
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
    }
}
