//! The typed metric families: a counter, gauge or histogram family whose series all carry
//! one label-set type (a struct of [`super::series`]), the histogram buckets, and the helpers
//! that register a family in the registry.

use std::hash::Hash;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Upstream's duration buckets (seconds).
const DURATION_BUCKETS: [f64; 23] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0,
    50.0, 60.0, 120.0, 150.0, 300.0, 450.0, 600.0,
];

pub(super) fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

/// The Prometheus Go client's default buckets (seconds), which the operator package's
/// un-prefixed condition histogram keeps.
const DEFAULT_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

pub(super) fn default_histogram() -> Histogram {
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
    pub(super) fn register(registry: &mut Registry, name: &'static str, help: &str) -> Self {
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
    pub(super) fn register(registry: &mut Registry, name: &'static str, help: &str) -> Self {
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
    pub(super) fn register(registry: &mut Registry, name: &'static str, help: &str) -> Self {
        Self::register_with(registry, name, help, duration_histogram)
    }

    pub(super) fn register_with(
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

/// A gauge without labels, registered as `name`.
pub(super) fn gauge(
    registry: &mut Registry,
    name: &'static str,
    help: &str,
) -> Gauge<f64, AtomicU64> {
    let gauge = Gauge::<f64, AtomicU64>::default();
    registry.register(name, help, gauge.clone());
    gauge
}
