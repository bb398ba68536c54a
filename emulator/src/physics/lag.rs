//! How far the simulation falls behind its scaled clock, and the pace physics writes keep.
//!
//! Simulated time runs `speed` times faster than real time whether or not the process keeps
//! up. When the machine cannot do in real time what a real cluster would do in the simulated
//! time, everything happens late on the simulated clock, and the decisions Karpenter makes on
//! that clock change (batch windows close early, nodes look empty for longer). [`LagMeter`]
//! records how late things happen, in simulated seconds:
//!
//! - `clock`: a probe that sleeps a short simulated interval over and over and records how
//!   late it wakes — how long a ready task waits for the runtime (the host and the physics
//!   share it, so this is everyone's lag);
//! - one series per physics component: how late a pass starts after the change that asked
//!   for it, how late each paced write completes after its slot (see [`Pace`]), how late a
//!   kubelet starts or removes a pod after it was due.
//!
//! [`Pace`] is a component's client-side rate limit in simulated time (what client-go's
//! `QPS`/`Burst` are for the real components): writes get slots at a fixed simulated rate, so
//! a run at any speed the machine keeps up with does its writes at the same simulated
//! moments, and a write that completes well after its slot is lag.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use joinery_core::clock::Clock;
use serde::Serialize;

/// Histogram buckets per decade of simulated seconds.
const BUCKETS_PER_DECADE: f64 = 20.0;
/// The smallest lateness told apart (simulated seconds); anything below counts as this.
const FLOOR_SECONDS: f64 = 1e-3;
/// Buckets from [`FLOOR_SECONDS`] to 10⁴ simulated seconds.
const BUCKETS: usize = 140;

/// Lateness samples of one kind, kept as a log-scale histogram (bounded memory, percentiles
/// within about 12 %) plus the exact count, sum and maximum.
#[derive(Debug, Clone)]
struct Series {
    buckets: Vec<u64>,
    count: u64,
    sum: f64,
    max: f64,
}

impl Series {
    fn new() -> Self {
        Self {
            buckets: vec![0; BUCKETS],
            count: 0,
            sum: 0.0,
            max: 0.0,
        }
    }

    fn bucket(seconds: f64) -> usize {
        if seconds <= FLOOR_SECONDS {
            return 0;
        }
        let index = ((seconds / FLOOR_SECONDS).log10() * BUCKETS_PER_DECADE).ceil();
        (index as usize).min(BUCKETS - 1)
    }

    /// The upper bound of a bucket, in simulated seconds.
    fn bound(index: usize) -> f64 {
        FLOOR_SECONDS * 10f64.powf(index as f64 / BUCKETS_PER_DECADE)
    }

    fn record(&mut self, seconds: f64) {
        let seconds = if seconds.is_finite() {
            seconds.max(0.0)
        } else {
            0.0
        };
        self.buckets[Self::bucket(seconds)] += 1;
        self.count += 1;
        self.sum += seconds;
        self.max = self.max.max(seconds);
    }

    /// The `q` quantile (0–1): the upper bound of the bucket holding it, capped at the maximum.
    fn quantile(&self, q: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let rank = ((self.count as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (index, count) in self.buckets.iter().enumerate() {
            seen += count;
            if seen >= rank {
                let bound = if index == 0 { 0.0 } else { Self::bound(index) };
                return bound.min(self.max);
            }
        }
        self.max
    }
}

/// One series of a [`LagSnapshot`], in simulated seconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LagSeries {
    /// `clock`, `scheduler`, `workloads` or `kubelets`.
    pub name: String,
    /// Samples recorded.
    pub count: u64,
    /// Mean lateness.
    pub mean_seconds: f64,
    /// Median lateness.
    pub p50_seconds: f64,
    /// 95th percentile.
    pub p95_seconds: f64,
    /// 99th percentile.
    pub p99_seconds: f64,
    /// Latest of all.
    pub max_seconds: f64,
}

/// Every series a [`LagMeter`] holds, by name.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LagSnapshot {
    /// The series, ordered by name.
    pub series: Vec<LagSeries>,
}

impl LagSnapshot {
    /// The series of that name, if anything was recorded under it.
    pub fn get(&self, name: &str) -> Option<&LagSeries> {
        self.series.iter().find(|s| s.name == name)
    }

    /// The series whose 95th percentile is the largest.
    pub fn worst(&self) -> Option<&LagSeries> {
        self.series
            .iter()
            .max_by(|a, b| a.p95_seconds.total_cmp(&b.p95_seconds))
    }
}

/// Records how late things happen on the scaled clock (see the module documentation).
/// Shared by the physics' components; cheap to record into from anywhere.
#[derive(Debug, Default)]
pub struct LagMeter {
    series: Mutex<BTreeMap<&'static str, Series>>,
}

impl LagMeter {
    /// An empty meter.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records that something of kind `what` happened `late` (simulated) after it was due.
    pub fn record(&self, what: &'static str, late: Duration) {
        let mut series = self
            .series
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        series
            .entry(what)
            .or_insert_with(Series::new)
            .record(late.as_secs_f64());
    }

    /// Records how late something due at simulated time `due` happened, now on `clock`
    /// (nothing is recorded as early: that is zero).
    pub fn record_since(&self, what: &'static str, clock: &Clock, due: SystemTime) {
        self.record(what, clock.now().duration_since(due).unwrap_or_default());
    }

    /// Forgets everything recorded so far (a simulation calls it when its scenario starts, so
    /// that setting up is not counted).
    pub fn reset(&self) {
        self.series
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clear();
    }

    /// Counts and percentiles of every series so far.
    pub fn snapshot(&self) -> LagSnapshot {
        let series = self
            .series
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        LagSnapshot {
            series: series
                .iter()
                .map(|(name, s)| LagSeries {
                    name: name.to_string(),
                    count: s.count,
                    mean_seconds: if s.count == 0 {
                        0.0
                    } else {
                        s.sum / s.count as f64
                    },
                    p50_seconds: s.quantile(0.5),
                    p95_seconds: s.quantile(0.95),
                    p99_seconds: s.quantile(0.99),
                    max_seconds: s.max,
                })
                .collect(),
        }
    }
}

/// How often the clock probe wakes (simulated).
pub const PROBE_INTERVAL: Duration = Duration::from_millis(250);

/// The clock probe: sleeps [`PROBE_INTERVAL`] of simulated time over and over and records, as
/// `clock`, how late each wake-up is. Runs until the task is aborted.
pub(crate) async fn probe(clock: Arc<Clock>, meter: Arc<LagMeter>) {
    // Never sleep less than a millisecond: the timer wheel's resolution.
    let real = clock.to_real(PROBE_INTERVAL).max(Duration::from_millis(1));
    loop {
        let due = tokio::time::Instant::now() + real;
        tokio::time::sleep_until(due).await;
        let late = tokio::time::Instant::now().saturating_duration_since(due);
        meter.record("clock", clock.to_simulated(late));
    }
}

/// A client-side rate limit in simulated time: `rate` writes per simulated second with bursts
/// of `burst` (the generic cell rate algorithm, as a token bucket). Slots follow the nominal
/// schedule — when the machine falls behind they are not pushed back — so how late a write
/// completes after its slot is the lag.
#[derive(Debug, Clone)]
pub(crate) struct Pace {
    interval: Duration,
    tolerance: Duration,
    /// The theoretical arrival time of the next write.
    next: Option<SystemTime>,
}

impl Pace {
    /// A pace of `rate` writes per simulated second (at least one), with bursts of `burst`.
    pub(crate) fn new(rate: f64, burst: u32) -> Self {
        let rate = if rate.is_finite() && rate >= 1.0 {
            rate
        } else {
            1.0
        };
        let interval = Duration::from_secs_f64(1.0 / rate);
        Self {
            interval,
            tolerance: interval * burst.max(1).saturating_sub(1),
            next: None,
        }
    }

    /// The earliest slot a write asked for at `asked` may have (not consumed).
    pub(crate) fn slot(&self, asked: SystemTime) -> SystemTime {
        match self.next {
            Some(next) => asked.max(next.checked_sub(self.tolerance).unwrap_or(next)),
            None => asked,
        }
    }

    /// Consumes a slot given by [`Pace::slot`].
    pub(crate) fn take(&mut self, slot: SystemTime) {
        let base = self.next.map_or(slot, |next| next.max(slot));
        self.next = Some(base + self.interval);
    }

    /// Reserves the next slot for a write asked for at `asked`.
    pub(crate) fn reserve(&mut self, asked: SystemTime) -> SystemTime {
        let slot = self.slot(asked);
        self.take(slot);
        slot
    }
}

/// How many writes a component has in flight at most. With 8, a loopback round trip of a few
/// milliseconds capped the emulated kube-scheduler below 2,000 bindings per real second, and
/// a 2,000-pod scale-out fell seconds behind its clock at `--speed 20` (kube-scheduler binds
/// each pod in a goroutine of its own, without such a cap).
pub(crate) const CONCURRENT_WRITES: usize = 32;

/// Runs writes at the component's pace, [`CONCURRENT_WRITES`] at a time: each waits for its
/// slot, runs, and is recorded as `what` by how late it completed after its slot. Returns the
/// outputs in the order of `jobs`.
pub(crate) async fn paced<F, T>(
    clock: &Clock,
    pace: &mut Pace,
    meter: &LagMeter,
    what: &'static str,
    jobs: Vec<F>,
) -> Vec<T>
where
    F: Future<Output = T>,
{
    let now = clock.now();
    let timed: Vec<_> = jobs
        .into_iter()
        .enumerate()
        .map(|(index, job)| {
            let slot = pace.reserve(now);
            let wait = slot
                .duration_since(now)
                .map(|d| clock.to_real(d))
                .unwrap_or_default();
            let start = tokio::time::Instant::now() + wait;
            async move {
                tokio::time::sleep_until(start).await;
                let output = job.await;
                meter.record_since(what, clock, slot);
                (index, output)
            }
        })
        .collect();
    let mut done: Vec<(usize, T)> = futures::stream::iter(timed)
        .buffer_unordered(CONCURRENT_WRITES)
        .collect()
        .await;
    done.sort_by_key(|(index, _)| *index);
    done.into_iter().map(|(_, output)| output).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_come_from_the_histogram_and_the_maximum_is_exact() {
        let meter = LagMeter::new();
        for ms in 1..=100u64 {
            meter.record("scheduler", Duration::from_millis(ms * 10));
        }
        meter.record("clock", Duration::ZERO);
        let snapshot = meter.snapshot();
        let scheduler = snapshot.get("scheduler").unwrap();
        assert_eq!(scheduler.count, 100);
        assert_eq!(scheduler.max_seconds, 1.0);
        assert!(
            (scheduler.mean_seconds - 0.505).abs() < 1e-9,
            "{scheduler:?}"
        );
        assert!(
            (0.5..=0.5 * 1.13).contains(&scheduler.p50_seconds),
            "{scheduler:?}"
        );
        assert!(
            (0.95..=1.0).contains(&scheduler.p95_seconds),
            "{scheduler:?}"
        );
        assert_eq!(snapshot.get("clock").unwrap().p95_seconds, 0.0);
        assert_eq!(snapshot.worst().unwrap().name, "scheduler");
        meter.reset();
        assert!(meter.snapshot().series.is_empty());
    }

    #[test]
    fn a_pace_hands_out_a_burst_then_one_slot_per_interval_on_the_nominal_schedule() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let mut pace = Pace::new(10.0, 3);
        let slots: Vec<Duration> = (0..6)
            .map(|_| pace.reserve(t0).duration_since(t0).unwrap())
            .collect();
        let ms = |n| Duration::from_millis(n);
        assert_eq!(slots, vec![ms(0), ms(0), ms(0), ms(100), ms(200), ms(300)]);
        // Asked later than the schedule: the slot is when it was asked, and the bucket refills.
        let later = t0 + Duration::from_secs(10);
        assert_eq!(pace.reserve(later), later);
        assert_eq!(pace.slot(later), later, "the burst allows more at once");
        // Peeking does not consume.
        assert_eq!(pace.slot(later), pace.slot(later));
    }

    #[test]
    fn a_nonsense_rate_is_one_per_second() {
        let t0 = SystemTime::UNIX_EPOCH;
        let mut pace = Pace::new(0.0, 1);
        pace.reserve(t0);
        assert_eq!(pace.reserve(t0), t0 + Duration::from_secs(1));
    }

    #[tokio::test]
    async fn paced_jobs_keep_their_order_and_are_recorded() {
        let clock = Clock::with_speed(1000.0);
        let meter = LagMeter::new();
        let mut pace = Pace::new(100.0, 1);
        let jobs: Vec<_> = (0..20).map(|i| async move { i * 2 }).collect();
        let started = tokio::time::Instant::now();
        let out = paced(&clock, &mut pace, &meter, "workloads", jobs).await;
        assert_eq!(out, (0..20).map(|i| i * 2).collect::<Vec<_>>());
        // 19 intervals of 10 ms simulated = 0.19 ms real at speed 1000: quick.
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(meter.snapshot().get("workloads").unwrap().count, 20);
    }
}
