//! Data a plugin fetches from an API now and then and keeps between calls, for the pricing
//! and cloud worlds: a live price list, a catalogue, rates.
//!
//! Every plugin call runs in a fresh instance, so nothing survives in memory. A [`Refresher`]
//! keeps a [`Snapshot`] in the [`cache`](crate::cache) import under one key: the last good
//! value, when it was fetched, and when to try again. Each call asks
//! [`Refresher::get`]; when the refresh is due it runs the plugin's fetch (which validates
//! what it got and returns an error for anything it does not trust) and then:
//!
//! - on success, stores the new value and schedules the next refresh one interval later,
//!   with jitter;
//! - on failure, **keeps the last good value**, logs why (warn, through the log import) and
//!   schedules a retry after a backoff that starts at [`Schedule::retry_min_seconds`] and
//!   doubles per consecutive failure up to [`Schedule::retry_max_seconds`].
//!
//! When nothing good was ever fetched (or the host dropped the entry), the value is `None`
//! and the plugin falls back to whatever it ships with (a built-in table).
//!
//! # What the cache guarantees
//!
//! The host's cache is per plugin (no other plugin reads or evicts these entries), shared by
//! every call and instance of the plugin in one host process, and survives hot reloads of
//! the plugin set. It does not survive a restart (or a new leader): the first call after
//! one fetches again. The host keeps an entry at most 24 hours ([`CACHE_TTL_SECONDS`]) and
//! refuses values over 256 KiB; every attempt, failed or not, rewrites the snapshot and so
//! renews its lifetime, which keeps a last good value alive as long as attempts happen at
//! least daily (keep `interval_seconds` at most 24 h). Keep the value small (rates, a
//! list of names), not the raw API answer.
//!
//! Concurrent calls may both find a refresh due and both fetch; the later write wins, which
//! is harmless for idempotent reads.
//!
//! # Testing
//!
//! [`Refresher::get_at`] takes the time and the jitter draw, so native tests drive the
//! schedule without waiting; the snapshot lives in the fake host's cache
//! ([`testing::FakeHost`](crate::testing::FakeHost)).
//!
//! ```ignore
//! use joinery_plugin_sdk::refresh::{Refresher, Schedule};
//!
//! let rates = Refresher::new("rates/v1", Schedule::every(12 * 3600))
//!     .get(|| fetch_and_validate_rates())   // Result<Rates, String>
//!     .value
//!     .unwrap_or(BUILT_IN_RATES);
//! ```

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The longest time the host keeps a cache entry, in seconds (24 h); snapshots are stored
/// with it.
pub const CACHE_TTL_SECONDS: u32 = 24 * 3600;

/// When to refresh: an interval with jitter, and a backoff after failures.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Schedule {
    /// Seconds between successful refreshes (at least 1).
    pub interval_seconds: u64,
    /// Spread of every wait: a wait of `w` seconds becomes `w × (1 + jitter × d)` with `d`
    /// drawn uniformly in `[-1, 1)`. `0.1` is ±10 %; clamped to `0..=0.5`.
    pub jitter: f64,
    /// Wait after the first failure; doubled per further consecutive failure.
    pub retry_min_seconds: u64,
    /// Longest wait after failures.
    pub retry_max_seconds: u64,
}

impl Schedule {
    /// Every `interval_seconds` (at least 1) with ±10 % jitter; after a failure, retry after
    /// a minute (or the interval, if shorter), doubling up to the interval.
    pub fn every(interval_seconds: u64) -> Schedule {
        let interval_seconds = interval_seconds.max(1);
        Schedule {
            interval_seconds,
            jitter: 0.1,
            retry_min_seconds: interval_seconds.min(60),
            retry_max_seconds: interval_seconds,
        }
    }

    /// Sets the jitter fraction (clamped to `0..=0.5`).
    pub fn with_jitter(mut self, jitter: f64) -> Schedule {
        self.jitter = jitter;
        self
    }

    /// Sets the backoff after failures: `min` seconds, doubling up to `max`.
    pub fn with_retry(mut self, min_seconds: u64, max_seconds: u64) -> Schedule {
        self.retry_min_seconds = min_seconds.max(1);
        self.retry_max_seconds = max_seconds.max(self.retry_min_seconds);
        self
    }

    fn jittered(&self, seconds: u64, draw: f64) -> u64 {
        let jitter = if self.jitter.is_finite() {
            self.jitter.clamp(0.0, 0.5)
        } else {
            0.0
        };
        let d = if draw.is_finite() {
            draw.clamp(0.0, 1.0) * 2.0 - 1.0
        } else {
            0.0
        };
        ((seconds as f64) * (1.0 + jitter * d)).round().max(1.0) as u64
    }

    /// When to refresh after a success at `now` (Unix seconds); `draw` is uniform in `[0, 1)`.
    pub fn after_success(&self, now: u64, draw: f64) -> u64 {
        now.saturating_add(self.jittered(self.interval_seconds.max(1), draw))
    }

    /// When to retry after the `failures`-th consecutive failure (1 for the first) at `now`.
    pub fn after_failure(&self, now: u64, failures: u32, draw: f64) -> u64 {
        let min = self.retry_min_seconds.max(1);
        let max = self.retry_max_seconds.max(min);
        let doublings = failures.saturating_sub(1).min(32);
        let wait = min.saturating_mul(1u64 << doublings).min(max);
        now.saturating_add(self.jittered(wait, draw))
    }

    /// The longest wait this schedule ever sets; a due time further away than this means
    /// the clock went back, and the refresh is due now.
    fn longest_wait(&self) -> u64 {
        let longest = self.interval_seconds.max(self.retry_max_seconds).max(1) as f64;
        (longest * 1.5).ceil() as u64 + 1
    }
}

/// What a [`Refresher`] keeps in the cache.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot<T> {
    /// The last good value, if any fetch ever succeeded (and the entry was kept).
    pub value: Option<T>,
    /// When `value` was fetched, Unix seconds.
    pub fetched_at: Option<u64>,
    /// When the next refresh is due, Unix seconds.
    pub next_attempt: u64,
    /// Consecutive failed attempts since the last success.
    pub failures: u32,
    /// Why the last attempt failed, if it did.
    pub last_error: Option<String>,
}

impl<T> Default for Snapshot<T> {
    fn default() -> Self {
        Snapshot {
            value: None,
            fetched_at: None,
            next_attempt: 0,
            failures: 0,
            last_error: None,
        }
    }
}

/// What this call's [`Refresher::get`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Not due: the cached snapshot was used as it is.
    NotDue,
    /// A refresh ran and succeeded.
    Refreshed,
    /// A refresh ran and failed with this error; the last good value (if any) was kept.
    Failed(String),
}

/// The value to use now.
#[derive(Clone, Debug, PartialEq)]
pub struct Current<T> {
    /// The last good value; `None` when nothing good was ever fetched (use a built-in
    /// fallback then).
    pub value: Option<T>,
    /// When `value` was fetched, Unix seconds.
    pub fetched_at: Option<u64>,
    /// What this call did.
    pub outcome: Outcome,
}

/// Keeps the last good copy of fetched data in the cache and refreshes it when due.
#[derive(Clone, Debug, PartialEq)]
pub struct Refresher {
    key: String,
    schedule: Schedule,
}

impl Refresher {
    /// A refresher storing its snapshot under cache `key`. Put what the value depends on
    /// (a format version, the endpoint, the zone) in the key, so a new plugin version or
    /// configuration never reads an old snapshot it cannot trust.
    pub fn new(key: impl Into<String>, schedule: Schedule) -> Refresher {
        Refresher {
            key: key.into(),
            schedule,
        }
    }

    /// The cache key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The schedule.
    pub fn schedule(&self) -> &Schedule {
        &self.schedule
    }

    /// The stored snapshot, without refreshing; `None` when missing, expired or not
    /// decodable as a `Snapshot<T>`.
    pub fn snapshot<T: DeserializeOwned>(&self) -> Option<Snapshot<T>> {
        crate::cache::get_json(&self.key)
    }

    /// Forgets the snapshot (the next call fetches).
    pub fn clear(&self) {
        crate::cache::remove(&self.key)
    }

    /// The value to use now, running `fetch` first when a refresh is due, with the wall
    /// clock and a random jitter draw. See [`Refresher::get_at`].
    pub fn get<T, F>(&self, fetch: F) -> Current<T>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Result<T, String>,
    {
        self.get_at(unix_now(), random_draw(), fetch)
    }

    /// The value to use at `now` (Unix seconds), running `fetch` first when a refresh is due
    /// (no snapshot yet, its due time passed, or a due time implausibly far ahead — the clock
    /// went back). `draw`, uniform in `[0, 1)`, picks the jitter of the next due time.
    pub fn get_at<T, F>(&self, now: u64, draw: f64, fetch: F) -> Current<T>
    where
        T: Serialize + DeserializeOwned,
        F: FnOnce() -> Result<T, String>,
    {
        let mut snapshot: Snapshot<T> = self.snapshot().unwrap_or_default();
        let clock_went_back =
            snapshot.next_attempt > now.saturating_add(self.schedule.longest_wait());
        if now < snapshot.next_attempt && !clock_went_back {
            return Current {
                value: snapshot.value,
                fetched_at: snapshot.fetched_at,
                outcome: Outcome::NotDue,
            };
        }
        let outcome = match fetch() {
            Ok(value) => {
                if snapshot.failures > 0 {
                    crate::log::info(format!(
                        "{}: refreshed after {} failed attempt(s)",
                        self.key, snapshot.failures
                    ));
                }
                snapshot.value = Some(value);
                snapshot.fetched_at = Some(now);
                snapshot.failures = 0;
                snapshot.last_error = None;
                snapshot.next_attempt = self.schedule.after_success(now, draw);
                Outcome::Refreshed
            }
            Err(error) => {
                snapshot.failures = snapshot.failures.saturating_add(1);
                snapshot.next_attempt = self.schedule.after_failure(now, snapshot.failures, draw);
                let kept = match snapshot.fetched_at {
                    Some(at) if snapshot.value.is_some() => {
                        format!("keeping the data fetched {} s ago", now.saturating_sub(at))
                    }
                    _ => "no good data yet, using the built-in fallback".to_string(),
                };
                crate::log::warn(format!(
                    "{}: refresh failed ({} in a row): {error}; {kept}; next attempt in {} s",
                    self.key,
                    snapshot.failures,
                    snapshot.next_attempt.saturating_sub(now)
                ));
                snapshot.last_error = Some(error.clone());
                Outcome::Failed(error)
            }
        };
        crate::cache::set_json(&self.key, &snapshot, CACHE_TTL_SECONDS);
        Current {
            value: snapshot.value,
            fetched_at: snapshot.fetched_at,
            outcome,
        }
    }
}

/// Unix time in seconds from the wall clock (`0` if the clock is before 1970).
///
/// In a component this reads `wasi:clocks/wall-clock`, which the host links for cloud
/// plugins, for pricing plugins that request HTTP, and for plugins granted `clock: true`.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A number drawn uniformly in `[0, 1)` from the standard library's randomly seeded hasher
/// (so from `wasi:random` in a component): good enough for jitter, not for secrets.
pub fn random_draw() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(0x006a_6f69_6e65_7279);
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::log::Level;
    use crate::testing::{self, FakeHost};

    const HOUR: u64 = 3600;

    #[test]
    fn jitter_spreads_the_interval_by_the_fraction() {
        let s = Schedule::every(12 * HOUR);
        assert_eq!(s.after_success(1000, 0.5), 1000 + 12 * HOUR);
        assert_eq!(s.after_success(1000, 0.0), 1000 + (12 * HOUR) * 9 / 10);
        let high = s.after_success(1000, 0.999_999);
        assert!(
            high <= 1000 + (12 * HOUR) * 11 / 10 && high > 1000 + 13 * HOUR,
            "{high}"
        );
        // Draws out of range are clamped; no jitter means exactly the interval.
        assert_eq!(s.after_success(0, 7.0), (12 * HOUR) * 11 / 10);
        assert_eq!(s.with_jitter(0.0).after_success(0, 0.0), 12 * HOUR);
        assert_eq!(
            s.with_jitter(5.0).after_success(0, 0.0),
            6 * HOUR,
            "jitter is capped at 50 %"
        );
    }

    #[test]
    fn failures_back_off_doubling_up_to_the_cap() {
        let s = Schedule::every(12 * HOUR).with_jitter(0.0);
        let waits: Vec<u64> = (1..=12).map(|n| s.after_failure(0, n, 0.5)).collect();
        assert_eq!(&waits[..4], &[60, 120, 240, 480]);
        assert_eq!(waits[11], 12 * HOUR);
        assert!(waits.windows(2).all(|w| w[0] <= w[1]), "{waits:?}");
        let short = Schedule::every(5);
        assert_eq!((short.retry_min_seconds, short.retry_max_seconds), (5, 5));
        assert_eq!(Schedule::every(0).interval_seconds, 1);
        assert_eq!(s.with_retry(10, 30).after_failure(0, 9, 0.5), 30);
    }

    #[test]
    fn the_first_call_fetches_and_later_calls_reuse_until_due() {
        let _host = testing::install(FakeHost::new());
        let r = Refresher::new("k", Schedule::every(100).with_jitter(0.0));
        let first = r.get_at(1000, 0.5, || Ok(1u32));
        assert_eq!(
            (first.value, first.fetched_at, first.outcome),
            (Some(1), Some(1000), Outcome::Refreshed)
        );
        let calls = std::cell::Cell::new(0);
        let fetch = |v: u32| {
            calls.set(calls.get() + 1);
            Ok::<u32, String>(v)
        };
        let reused = r.get_at(1099, 0.5, || fetch(2));
        assert_eq!((reused.value, reused.outcome), (Some(1), Outcome::NotDue));
        assert_eq!(calls.get(), 0, "not due, no fetch");
        let refreshed = r.get_at(1100, 0.5, || fetch(2));
        assert_eq!(
            (refreshed.value, refreshed.fetched_at),
            (Some(2), Some(1100))
        );
        assert_eq!(r.snapshot::<u32>().unwrap().next_attempt, 1200);
    }

    #[test]
    fn a_failure_keeps_the_last_good_value_logs_and_backs_off() {
        let _host = testing::install(FakeHost::new());
        let r = Refresher::new(
            "rates",
            Schedule::every(1000).with_jitter(0.0).with_retry(10, 40),
        );
        r.get_at(0, 0.5, || Ok(7u32));
        let failed = r.get_at(1000, 0.5, || Err::<u32, _>("HTTP status 500".to_string()));
        assert_eq!(failed.value, Some(7));
        assert_eq!(failed.fetched_at, Some(0));
        assert_eq!(failed.outcome, Outcome::Failed("HTTP status 500".into()));
        let snap = r.snapshot::<u32>().unwrap();
        assert_eq!(
            (snap.failures, snap.next_attempt, snap.last_error.as_deref()),
            (1, 1010, Some("HTTP status 500"))
        );
        let logs = testing::logs();
        let (level, line) = logs.last().unwrap();
        assert_eq!(*level, Level::Warn);
        assert!(
            line.contains("rates")
                && line.contains("HTTP status 500")
                && line.contains("keeping the data fetched 1000 s ago"),
            "{line}"
        );
        // Not retried before the backoff ends; the next failures back off further.
        assert_eq!(
            r.get_at(1009, 0.5, || Err::<u32, _>("x".into())).outcome,
            Outcome::NotDue
        );
        r.get_at(1010, 0.5, || Err::<u32, _>("x".into()));
        assert_eq!(r.snapshot::<u32>().unwrap().next_attempt, 1030);
        r.get_at(1030, 0.5, || Err::<u32, _>("x".into()));
        r.get_at(1070, 0.5, || Err::<u32, _>("x".into()));
        assert_eq!(
            r.snapshot::<u32>().unwrap().next_attempt,
            1110,
            "capped at retry_max"
        );
        // Still the last good value; a success resets the count and logs the recovery.
        let back = r.get_at(1110, 0.5, || Ok(8u32));
        assert_eq!((back.value, back.outcome), (Some(8), Outcome::Refreshed));
        assert_eq!(r.snapshot::<u32>().unwrap().failures, 0);
        assert!(
            testing::logs()
                .last()
                .unwrap()
                .1
                .contains("refreshed after 4 failed")
        );
    }

    #[test]
    fn without_good_data_a_failure_says_so_and_retries_on_the_backoff() {
        let _host = testing::install(FakeHost::new());
        let r = Refresher::new(
            "k",
            Schedule::every(100).with_jitter(0.0).with_retry(10, 10),
        );
        let c = r.get_at(50, 0.5, || Err::<u32, _>("denied".into()));
        assert_eq!(c.value, None);
        assert!(
            testing::logs()[0].1.contains("no good data yet"),
            "{:?}",
            testing::logs()
        );
        assert_eq!(
            r.get_at(55, 0.5, || Ok(1u32)).outcome,
            Outcome::NotDue,
            "a failure is not retried at once"
        );
        assert_eq!(r.get_at(60, 0.5, || Ok(1u32)).value, Some(1));
    }

    #[test]
    fn a_due_time_far_ahead_means_the_clock_went_back() {
        let _host = testing::install(FakeHost::new());
        let r = Refresher::new("k", Schedule::every(100).with_jitter(0.0));
        r.get_at(1_000_000, 0.5, || Ok(1u32));
        // The wall clock was set back a day: refresh now instead of in a day.
        assert_eq!(
            r.get_at(1_000_000 - 86_400, 0.5, || Ok(2u32)).value,
            Some(2)
        );
    }

    #[test]
    fn an_unreadable_snapshot_is_a_miss() {
        let _host = testing::install(FakeHost::new().with_cache("k", b"not json".to_vec()));
        let r = Refresher::new("k", Schedule::every(100));
        assert_eq!(r.snapshot::<u32>(), None);
        assert_eq!(r.get_at(0, 0.5, || Ok(3u32)).value, Some(3));
        r.clear();
        assert_eq!(r.snapshot::<u32>(), None);
    }

    #[test]
    fn draws_are_in_the_unit_interval() {
        for _ in 0..100 {
            let d = random_draw();
            assert!((0.0..1.0).contains(&d), "{d}");
        }
        assert!(unix_now() > 1_600_000_000);
    }
}
