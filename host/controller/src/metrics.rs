//! Prometheus metrics with upstream Karpenter's names and labels (plus Joinery's own
//! `joinery_*`), kept by the `prometheus-client` crate and rendered in the Prometheus text
//! format for `/metrics`.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, prometheus_text};
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
    /// Plugin calls, by `plugin` and `method` (every world: cloud, renderer, pricing).
    pub const PLUGIN_CALLS: &str = "joinery_plugin_calls_total";
    /// Failed plugin calls, by `plugin`, `method` and `class` (`trap`, `timeout`,
    /// `memory_limit`, `saturated`, the cloud error classes, …).
    pub const PLUGIN_ERRORS: &str = "joinery_plugin_errors_total";
    /// Histogram: duration of plugin calls, by `plugin` and `method`.
    pub const PLUGIN_CALL_DURATION: &str = "joinery_plugin_call_duration_seconds";
    /// Gauge: peak linear memory of the plugin's latest call, by `plugin` and `method`.
    pub const PLUGIN_MEMORY: &str = "joinery_plugin_memory_bytes";
}

/// What kind of metric a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
    /// A gauge whose series are computed from the caches at each scrape rather than kept
    /// (see [`Metrics::compute_on_scrape`]): one per pod would otherwise hold about a
    /// kilobyte of labels per pod between scrapes.
    ScrapeTimeGauge,
}

/// Every metric: name, kind and help text.
const DEFINITIONS: &[(&str, Kind, &str)] = &[
    (
        names::NODECLAIMS_CREATED,
        Kind::Counter,
        "Number of nodeclaims created in total by Karpenter",
    ),
    (
        names::NODECLAIMS_TERMINATED,
        Kind::Counter,
        "Number of nodeclaims terminated in total by Karpenter",
    ),
    (
        names::NODECLAIMS_DISRUPTED,
        Kind::Counter,
        "Number of nodeclaims disrupted in total by Karpenter",
    ),
    (
        names::NODES_CREATED,
        Kind::Counter,
        "Number of nodes created in total by Karpenter",
    ),
    (
        names::NODES_TERMINATED,
        Kind::Counter,
        "Number of nodes terminated in total by Karpenter",
    ),
    (
        names::NODES_DRAINED,
        Kind::Counter,
        "The total number of nodes drained by Karpenter",
    ),
    (
        names::EVICTION_REQUESTS,
        Kind::Counter,
        "The number of eviction requests by response code",
    ),
    (
        names::PODS_DISRUPTION_INITIATED,
        Kind::Counter,
        "The number of pods whose disruption was initiated, by the NodeClaim's disruption reason",
    ),
    (
        names::CLOUDPROVIDER_ERRORS,
        Kind::Counter,
        "Total number of errors returned from CloudProvider calls",
    ),
    (
        names::INSTANCES_GARBAGE_COLLECTED,
        Kind::Counter,
        "Number of instances without a NodeClaim deleted by garbage collection",
    ),
    (
        names::VOLUNTARY_DISRUPTION_DECISIONS,
        Kind::Counter,
        "Number of disruption decisions performed",
    ),
    (
        names::VOLUNTARY_DISRUPTION_FAILED_VALIDATIONS,
        Kind::Counter,
        "Number of candidates that were selected for disruption but failed validation",
    ),
    (
        names::VOLUNTARY_DISRUPTION_QUEUE_FAILURES,
        Kind::Counter,
        "Number of disruption commands that failed in the orchestration queue",
    ),
    (
        names::VOLUNTARY_DISRUPTION_ELIGIBLE_NODES,
        Kind::Gauge,
        "Number of nodes eligible for disruption by Karpenter",
    ),
    (
        names::NODEPOOLS_ALLOWED_DISRUPTIONS,
        Kind::Gauge,
        "The number of nodes for a given NodePool that can be concurrently disrupting at a point in time",
    ),
    (
        names::BUILD_INFO,
        Kind::Gauge,
        "A metric with a constant '1' value labeled by version from which the controller was built",
    ),
    (
        names::CLUSTER_STATE_NODE_COUNT,
        Kind::Gauge,
        "Current count of nodes in cluster state",
    ),
    (
        names::CLUSTER_STATE_SYNCED,
        Kind::Gauge,
        "Returns 1 if cluster state is synced and 0 otherwise",
    ),
    (
        names::NODEPOOLS_USAGE,
        Kind::Gauge,
        "The amount of resources that have been provisioned for a nodepool",
    ),
    (
        names::NODEPOOLS_LIMIT,
        Kind::Gauge,
        "Limits specified on the nodepool that restrict the quantity of resources provisioned",
    ),
    (
        names::PODS_STATE,
        Kind::ScrapeTimeGauge,
        "Pod state is the current state of pods",
    ),
    (
        names::PODS_STARTUP_DURATION,
        Kind::Histogram,
        "The time from pod creation until the pod is running",
    ),
    (
        names::SCHEDULER_SCHEDULING_DURATION,
        Kind::Histogram,
        "Duration of scheduling simulations used for deprovisioning and provisioning in seconds",
    ),
    (
        names::SCHEDULER_QUEUE_DEPTH,
        Kind::Gauge,
        "The number of pods currently waiting to be scheduled",
    ),
    (
        names::NODECLAIMS_TERMINATION_DURATION,
        Kind::Histogram,
        "Duration of NodeClaim termination in seconds",
    ),
    (
        names::NODES_TERMINATION_DURATION,
        Kind::Histogram,
        "The time taken between a node's deletion request and the removal of its finalizer",
    ),
    (
        names::CLOUDPROVIDER_DURATION,
        Kind::Histogram,
        "Duration of cloud provider method calls",
    ),
    (
        names::VOLUNTARY_DISRUPTION_DECISION_EVALUATION_DURATION,
        Kind::Histogram,
        "Duration of the disruption decision evaluation process in seconds",
    ),
    (
        names::PLUGIN_CALLS,
        Kind::Counter,
        "Calls of wasm plugins, by plugin and method",
    ),
    (
        names::PLUGIN_ERRORS,
        Kind::Counter,
        "Failed calls of wasm plugins, by plugin, method and error class",
    ),
    (
        names::PLUGIN_CALL_DURATION,
        Kind::Histogram,
        "Duration of wasm plugin calls in seconds",
    ),
    (
        names::PLUGIN_MEMORY,
        Kind::Gauge,
        "Peak linear memory of the latest call of a wasm plugin method, in bytes",
    ),
];

/// Upstream's duration buckets (seconds).
const DURATION_BUCKETS: [f64; 23] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0,
    50.0, 60.0, 120.0, 150.0, 300.0, 450.0, 600.0,
];

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

type Labels = Vec<(String, String)>;
type HistogramFamily = Family<Labels, Histogram, fn() -> Histogram>;

fn labels(pairs: &[(&str, &str)]) -> Labels {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The controller's metrics, kept by the `prometheus-client` crate and served in the
/// Prometheus text format (what upstream's `/metrics` serves). Metrics are addressed by their
/// [`names`]; a name that is not defined here is ignored with a warning.
pub struct Metrics {
    registry: Registry,
    counters: HashMap<&'static str, Family<Labels, Counter>>,
    gauges: HashMap<&'static str, Family<Labels, Gauge<f64, AtomicU64>>>,
    histograms: HashMap<&'static str, HistogramFamily>,
    scrape_time_gauges: HashMap<&'static str, Arc<ScrapeTimeGauge>>,
    /// The length of the last exposition, to size the next one's buffer at once: at 50,000
    /// pods `karpenter_pods_state` alone is about 15 MB of text, and a buffer grown by
    /// doubling holds the old and the new copy at once while it grows.
    last_render_len: std::sync::atomic::AtomicUsize,
}

/// Emits each series of a scrape-time gauge: its label pairs and its value.
pub type SeriesSink<'a> = dyn FnMut(&[(&str, &str)], f64) + 'a;

/// Computes the series of a scrape-time gauge, handing each to the sink.
pub type SeriesSource = dyn Fn(&mut SeriesSink<'_>) + Send + Sync;

/// A gauge computed when scraped: a name, its help, and (once the caches exist) its source.
struct ScrapeTimeGauge {
    name: &'static str,
    help: &'static str,
    source: OnceLock<Box<SeriesSource>>,
}

impl ScrapeTimeGauge {
    fn each_series(&self, sink: &mut SeriesSink<'_>) {
        if let Some(source) = self.source.get() {
            source(sink);
        }
    }
}

impl std::fmt::Debug for ScrapeTimeGauge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScrapeTimeGauge")
            .field("name", &self.name)
            .finish()
    }
}

impl Collector for ScrapeTimeGauge {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut metric =
            encoder.encode_descriptor(self.name, self.help, None, MetricType::Gauge)?;
        let mut outcome = Ok(());
        self.each_series(&mut |pairs, value| {
            if outcome.is_ok() {
                outcome = metric
                    .encode_family(&pairs)
                    .and_then(|mut series| series.encode_gauge(&value));
            }
        });
        outcome
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("metrics", &DEFINITIONS.len())
            .finish()
    }
}

impl Metrics {
    /// Every metric registered, and `karpenter_build_info` set.
    pub fn new() -> Metrics {
        let mut metrics = Metrics {
            registry: Registry::default(),
            counters: HashMap::new(),
            gauges: HashMap::new(),
            histograms: HashMap::new(),
            scrape_time_gauges: HashMap::new(),
            last_render_len: Default::default(),
        };
        for &(name, kind, help) in DEFINITIONS {
            match kind {
                Kind::Counter => {
                    let family = Family::<Labels, Counter>::default();
                    // The client adds `_total` to a counter's name.
                    metrics.registry.register(
                        name.trim_end_matches("_total"),
                        help,
                        family.clone(),
                    );
                    metrics.counters.insert(name, family);
                }
                Kind::Gauge => {
                    let family = Family::<Labels, Gauge<f64, AtomicU64>>::default();
                    metrics.registry.register(name, help, family.clone());
                    metrics.gauges.insert(name, family);
                }
                Kind::Histogram => {
                    let family: HistogramFamily = Family::new_with_constructor(duration_histogram);
                    metrics.registry.register(name, help, family.clone());
                    metrics.histograms.insert(name, family);
                }
                Kind::ScrapeTimeGauge => {
                    let gauge = Arc::new(ScrapeTimeGauge {
                        name,
                        help,
                        source: OnceLock::new(),
                    });
                    metrics.registry.register_collector(Box::new(gauge.clone()));
                    metrics.scrape_time_gauges.insert(name, gauge);
                }
            }
        }
        let toolchain = format!(
            "rust {}",
            option_env!("CARGO_PKG_RUST_VERSION").unwrap_or("stable")
        );
        metrics.set(
            names::BUILD_INFO,
            &[
                ("version", env!("CARGO_PKG_VERSION")),
                ("goversion", &toolchain),
                ("goarch", std::env::consts::ARCH),
                ("commit", option_env!("JOINERY_COMMIT").unwrap_or("unknown")),
            ],
            1.0,
        );
        metrics
    }

    fn unknown(name: &str) {
        tracing::warn!(metric = name, "no such metric; this is a bug in Joinery");
    }

    /// Adds one to the counter `name` with `labels`.
    pub fn inc(&self, name: &'static str, labels: &[(&str, &str)]) {
        self.add(name, labels, 1);
    }

    /// Adds `amount` to the counter `name` with `labels` (the series appears even for 0).
    pub fn add(&self, name: &'static str, pairs: &[(&str, &str)], amount: u64) {
        match self.counters.get(name) {
            Some(family) => {
                family.get_or_create(&labels(pairs)).inc_by(amount);
            }
            None => Self::unknown(name),
        }
    }

    /// Sets the gauge `name` with `labels` to `value`.
    pub fn set(&self, name: &'static str, pairs: &[(&str, &str)], value: f64) {
        match self.gauges.get(name) {
            Some(family) => {
                family.get_or_create(&labels(pairs)).set(value);
            }
            None => Self::unknown(name),
        }
    }

    /// Replaces every series of the gauge `name` with `series` (series not listed go away:
    /// for gauges describing the current state, such as one per pod).
    pub fn replace<'a>(
        &self,
        name: &'static str,
        series: impl IntoIterator<Item = (Vec<(&'a str, String)>, f64)>,
    ) {
        let Some(family) = self.gauges.get(name) else {
            return Self::unknown(name);
        };
        family.clear();
        for (pairs, value) in series {
            let labels: Labels = pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
            family.get_or_create(&labels).set(value);
        }
    }

    /// Makes `source` compute the series of the scrape-time gauge `name` at each scrape (and
    /// for [`Metrics::gauge`]). A gauge has one source: a second is ignored with a warning.
    pub fn compute_on_scrape(&self, name: &'static str, source: Box<SeriesSource>) {
        match self.scrape_time_gauges.get(name) {
            Some(gauge) => {
                if gauge.source.set(source).is_err() {
                    tracing::warn!(
                        metric = name,
                        "a second source for a scrape-time gauge; this is a bug in Joinery"
                    );
                }
            }
            None => Self::unknown(name),
        }
    }

    /// Removes every series of the gauge `name`.
    pub fn clear(&self, name: &'static str) {
        match self.gauges.get(name) {
            Some(family) => family.clear(),
            None => Self::unknown(name),
        }
    }

    /// Records one observation (seconds) of the histogram `name` with `labels`.
    pub fn observe(&self, name: &'static str, pairs: &[(&str, &str)], seconds: f64) {
        match self.histograms.get(name) {
            Some(family) => family.get_or_create(&labels(pairs)).observe(seconds),
            None => Self::unknown(name),
        }
    }

    /// The value of a gauge, if set.
    pub fn gauge(&self, name: &str, pairs: &[(&str, &str)]) -> Option<f64> {
        if let Some(gauge) = self.scrape_time_gauges.get(name) {
            let mut found = None;
            gauge.each_series(&mut |series, value| {
                if series.len() == pairs.len() && pairs.iter().all(|pair| series.contains(pair)) {
                    found = Some(value);
                }
            });
            return found;
        }
        self.gauges.get(name)?.get(&labels(pairs)).map(|g| g.get())
    }

    /// The value of a counter (0 when never incremented).
    pub fn get(&self, name: &str, pairs: &[(&str, &str)]) -> u64 {
        self.counters
            .get(name)
            .and_then(|f| f.get(&labels(pairs)).map(|c| c.get()))
            .unwrap_or(0)
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

/// The content type of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = prometheus_text::CONTENT_TYPE;

impl joinery_runtime::services::CallObserver for Metrics {
    fn plugin_call(&self, call: &joinery_runtime::services::CallRecord<'_>) {
        let series = [("plugin", call.plugin), ("method", call.method)];
        self.inc(names::PLUGIN_CALLS, &series);
        self.observe(
            names::PLUGIN_CALL_DURATION,
            &series,
            call.duration.as_secs_f64(),
        );
        self.set(names::PLUGIN_MEMORY, &series, call.peak_memory_bytes as f64);
        if let Some(class) = call.error {
            self.inc(
                names::PLUGIN_ERRORS,
                &[
                    ("plugin", call.plugin),
                    ("method", call.method),
                    ("class", class),
                ],
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::RwLock;

    use super::*;

    #[test]
    fn metrics_render_in_the_prometheus_text_format_with_escaped_labels() {
        let m = Metrics::default();
        m.inc(
            names::NODECLAIMS_CREATED,
            &[("reason", "provisioned"), ("nodepool", "a\"b")],
        );
        m.inc(
            names::NODECLAIMS_CREATED,
            &[("reason", "provisioned"), ("nodepool", "a\"b")],
        );
        assert_eq!(
            m.get(
                names::NODECLAIMS_CREATED,
                &[("reason", "provisioned"), ("nodepool", "a\"b")]
            ),
            2
        );
        let text = m.render();
        assert!(
            text.contains("# TYPE karpenter_nodeclaims_created_total counter"),
            "{text}"
        );
        assert!(
            text.contains(
                "karpenter_nodeclaims_created_total{reason=\"provisioned\",nodepool=\"a\\\"b\"} 2"
            ),
            "{text}"
        );
        m.set(
            names::NODEPOOLS_ALLOWED_DISRUPTIONS,
            &[("nodepool", "p"), ("reason", "Empty")],
            3.0,
        );
        m.set(
            names::NODEPOOLS_ALLOWED_DISRUPTIONS,
            &[("nodepool", "p"), ("reason", "Empty")],
            1.0,
        );
        let text = m.render();
        assert!(
            text.contains("# TYPE karpenter_nodepools_allowed_disruptions gauge"),
            "{text}"
        );
        assert!(
            text.contains(
                "karpenter_nodepools_allowed_disruptions{nodepool=\"p\",reason=\"Empty\"} 1"
            ),
            "{text}"
        );
        assert!(text.contains("karpenter_build_info{version=\""), "{text}");
        assert!(
            !text.contains(".."),
            "help texts end with one period: {text}"
        );
    }

    #[test]
    fn histograms_use_upstreams_duration_buckets() {
        let m = Metrics::default();
        m.observe(
            names::CLOUDPROVIDER_DURATION,
            &[("controller", "c"), ("method", "create"), ("provider", "p")],
            0.3,
        );
        let text = m.render();
        assert!(
            text.contains("# TYPE karpenter_cloudprovider_duration_seconds histogram"),
            "{text}"
        );
        assert!(text.contains("karpenter_cloudprovider_duration_seconds_bucket{controller=\"c\",method=\"create\",provider=\"p\",le=\"0.25\"} 0"), "{text}");
        assert!(text.contains("karpenter_cloudprovider_duration_seconds_bucket{controller=\"c\",method=\"create\",provider=\"p\",le=\"0.5\"} 1"), "{text}");
        assert!(text.contains("karpenter_cloudprovider_duration_seconds_count{controller=\"c\",method=\"create\",provider=\"p\"} 1"), "{text}");
    }

    #[test]
    fn replacing_a_gauge_drops_series_no_longer_listed() {
        let m = Metrics::default();
        m.replace(
            names::NODEPOOLS_USAGE,
            [
                (vec![("nodepool", "a".to_string())], 1.0),
                (vec![("nodepool", "b".to_string())], 1.0),
            ],
        );
        m.replace(
            names::NODEPOOLS_USAGE,
            [(vec![("nodepool", "b".to_string())], 1.0)],
        );
        assert_eq!(m.gauge(names::NODEPOOLS_USAGE, &[("nodepool", "a")]), None);
        assert_eq!(
            m.gauge(names::NODEPOOLS_USAGE, &[("nodepool", "b")]),
            Some(1.0)
        );
    }

    #[test]
    fn a_scrape_time_gauge_is_computed_from_its_source_at_each_scrape() {
        let m = Metrics::default();
        let text = m.render();
        assert!(
            text.contains("# TYPE karpenter_pods_state gauge"),
            "declared before a source is set: {text}"
        );
        assert!(!text.contains("karpenter_pods_state{"), "{text}");
        let pods = Arc::new(RwLock::new(vec!["a", "b\"x"]));
        let source = pods.clone();
        m.compute_on_scrape(
            names::PODS_STATE,
            Box::new(move |sink| {
                for name in source.read().unwrap().iter() {
                    sink(&[("name", name), ("ready", "true")], 1.0);
                }
            }),
        );
        let text = m.render();
        assert!(
            text.contains("karpenter_pods_state{name=\"a\",ready=\"true\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("karpenter_pods_state{name=\"b\\\"x\",ready=\"true\"} 1"),
            "{text}"
        );
        assert_eq!(
            m.gauge(names::PODS_STATE, &[("ready", "true"), ("name", "a")]),
            Some(1.0)
        );
        pods.write().unwrap().retain(|p| *p != "a");
        assert_eq!(
            m.gauge(names::PODS_STATE, &[("name", "a"), ("ready", "true")]),
            None,
            "a gone pod's series goes at the next scrape"
        );
        assert!(!m.render().contains("name=\"a\""));
    }

    #[test]
    fn every_name_is_defined_once() {
        let mut seen = std::collections::BTreeSet::new();
        for (name, kind, help) in DEFINITIONS {
            assert!(seen.insert(*name), "{name} twice");
            assert_eq!(
                *kind == Kind::Counter,
                name.ends_with("_total"),
                "{name}: counters and only counters end in _total"
            );
            assert!(!help.ends_with('.'), "{name}: the client adds the period");
        }
    }
}
