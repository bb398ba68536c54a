//! `karpenter_pods_state`: a gauge computed from the caches at each scrape rather than kept.

use std::sync::{Arc, OnceLock};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::{names, series};

/// Emits each series of `karpenter_pods_state`: its labels and its value.
pub type SeriesSink<'a> = dyn FnMut(&series::PodState<'_>, f64) + 'a;

/// Computes the series of `karpenter_pods_state`, handing each to the sink.
pub type SeriesSource = dyn Fn(&mut SeriesSink<'_>) + Send + Sync;

/// A gauge whose series are computed from the caches at each scrape rather than kept: one per
/// pod would otherwise hold about a kilobyte of labels per pod between scrapes.
pub struct PodsState {
    pub(super) source: OnceLock<Box<SeriesSource>>,
}

impl PodsState {
    pub(super) fn each_series(&self, sink: &mut SeriesSink<'_>) {
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
pub(super) struct PodsStateCollector(pub(super) Arc<PodsState>);

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
