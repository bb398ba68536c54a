//! Exponential backoff with `Retry-After`, per key: when a failed call may be tried again.
//!
//! Every cloud call the host makes for one object (a NodeClaim's create or delete, a Node's
//! instance lookup) and every plugin as a whole (when its cloud answered 429 with
//! `Retry-After`) has a key here. A failure doubles the key's wait from `base` up to `max`;
//! a `Retry-After` longer than that wins; a success forgets the key. Loops ask
//! [`BackoffTable::wait`] before calling, so a throttling API is not hammered on every watch
//! event.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, SystemTime};

/// The shape of a backoff: first wait and longest wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffPolicy {
    /// Wait after the first failure.
    pub base: Duration,
    /// Longest wait (a `Retry-After` may ask for more).
    pub max: Duration,
}

impl BackoffPolicy {
    /// The wait after `failures` failures in a row (1-based), or `retry_after` when longer.
    pub fn wait(&self, failures: u32, retry_after: Option<Duration>) -> Duration {
        let exponent = failures.saturating_sub(1).min(30);
        let backoff = self
            .base
            .saturating_mul(1u32 << exponent.min(31))
            .min(self.max);
        retry_after.map_or(backoff, |r| r.max(backoff))
    }
}

/// One key's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Failures in a row.
    pub failures: u32,
    /// Earliest time of the next try.
    pub next_at: SystemTime,
}

/// Backoff state by key.
#[derive(Debug, Clone)]
pub struct BackoffTable<K> {
    policy: BackoffPolicy,
    keys: HashMap<K, Backoff>,
}

impl<K: Eq + Hash + Clone> BackoffTable<K> {
    /// An empty table with `policy`.
    pub fn new(policy: BackoffPolicy) -> Self {
        BackoffTable {
            policy,
            keys: HashMap::new(),
        }
    }

    /// How long `key` must still wait at `now` (`None`: it may go).
    pub fn wait(&self, key: &K, now: SystemTime) -> Option<Duration> {
        let next = self.keys.get(key)?.next_at;
        next.duration_since(now).ok().filter(|d| !d.is_zero())
    }

    /// Records a failure at `now`; returns the wait before the next try.
    pub fn fail(&mut self, key: K, now: SystemTime, retry_after: Option<Duration>) -> Duration {
        let entry = self.keys.entry(key).or_insert(Backoff {
            failures: 0,
            next_at: now,
        });
        entry.failures = entry.failures.saturating_add(1);
        let wait = self.policy.wait(entry.failures, retry_after);
        entry.next_at = now + wait;
        wait
    }

    /// Forgets `key` (its call succeeded, or the object is gone).
    pub fn succeed(&mut self, key: &K) {
        self.keys.remove(key);
    }

    /// Failures in a row of `key`.
    pub fn failures(&self, key: &K) -> u32 {
        self.keys.get(key).map_or(0, |b| b.failures)
    }

    /// Drops keys whose wait ended more than `idle` before `now` (bounded memory).
    pub fn forget_idle(&mut self, now: SystemTime, idle: Duration) {
        self.keys.retain(|_, b| b.next_at + idle > now);
    }

    /// Number of keys held.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: BackoffPolicy = BackoffPolicy {
        base: Duration::from_secs(1),
        max: Duration::from_secs(30),
    };

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + seconds)
    }

    #[test]
    fn waits_double_up_to_the_cap_and_retry_after_wins_when_longer() {
        let waits: Vec<u64> = (1..=7).map(|f| POLICY.wait(f, None).as_secs()).collect();
        assert_eq!(waits, vec![1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(
            POLICY.wait(1, Some(Duration::from_secs(120))),
            Duration::from_secs(120)
        );
        assert_eq!(
            POLICY.wait(5, Some(Duration::from_secs(3))),
            Duration::from_secs(16)
        );
        assert_eq!(POLICY.wait(u32::MAX, None), Duration::from_secs(30));
    }

    #[test]
    fn a_key_waits_after_failures_and_is_forgotten_on_success() {
        let mut table = BackoffTable::new(POLICY);
        assert_eq!(table.wait(&"claim-a", at(0)), None);
        assert_eq!(table.fail("claim-a", at(0), None), Duration::from_secs(1));
        assert_eq!(table.fail("claim-a", at(1), None), Duration::from_secs(2));
        assert_eq!(table.wait(&"claim-a", at(2)), Some(Duration::from_secs(1)));
        assert_eq!(table.wait(&"claim-a", at(3)), None);
        assert_eq!(table.wait(&"claim-b", at(2)), None, "keys are independent");
        assert_eq!(table.failures(&"claim-a"), 2);
        table.succeed(&"claim-a");
        assert_eq!(table.failures(&"claim-a"), 0);
        assert!(table.is_empty());
    }

    #[test]
    fn idle_keys_are_dropped() {
        let mut table = BackoffTable::new(POLICY);
        table.fail("old", at(0), None);
        table.fail("new", at(100), None);
        table.forget_idle(at(200), Duration::from_secs(60));
        assert_eq!(table.len(), 0);
        table.fail("new", at(100), None);
        table.forget_idle(at(120), Duration::from_secs(60));
        assert_eq!(table.len(), 1);
    }
}
