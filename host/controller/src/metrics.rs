//! Prometheus metrics with upstream Karpenter's names and labels (plus Joinery's own
//! `joinery_*`), kept by the `prometheus-client` crate and rendered in the Prometheus text
//! format for `/metrics`.
//!
//! The pieces: [`names`] (every metric's name), [`series`] (one label-set struct per shape
//! of labels), the typed families ([`Counters`], [`Gauges`], [`Histograms`]), the gauges
//! computed at each scrape ([`PodsState`], [`computed`]), and here [`Metrics`], which
//! registers them all and renders the exposition.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

pub mod computed;
mod family;
pub mod names;
mod pods_state;
pub mod series;

pub use family::{Counters, Gauges, Histograms, LabelSet};
use family::{default_histogram, duration_histogram, gauge};
use pods_state::PodsStateCollector;
pub use pods_state::{PodsState, SeriesSink, SeriesSource};

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

#[cfg(test)]
mod tests;
