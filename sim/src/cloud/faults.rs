//! Fault injection for the simulated cloud: error rates, latency, throttling, lost
//! responses, insufficient capacity and quotas, all changeable while the cloud runs.
//!
//! Random decisions come from a seeded generator, so a scenario that makes the same calls in
//! the same order sees the same failures.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The API operations faults can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CloudVerb {
    /// `POST /v1/instances`.
    Create,
    /// `GET /v1/instances/{id}`.
    Get,
    /// `GET /v1/instances`.
    List,
    /// `DELETE /v1/instances/{id}`.
    Delete,
    /// `GET /v1/instance-types`.
    InstanceTypes,
    /// `GET /v1/zones`.
    Zones,
}

/// An offering an insufficient-capacity fault applies to. Any field may be `*` to match
/// every value (e.g. all spot offerings of a zone).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OfferingKey {
    /// Instance type name or `*`.
    pub instance_type: String,
    /// Zone or `*`.
    pub zone: String,
    /// Capacity type or `*`.
    pub capacity_type: String,
}

impl OfferingKey {
    /// Builds a key; pass `*` for a wildcard.
    pub fn new(instance_type: impl Into<String>, zone: impl Into<String>, capacity_type: impl Into<String>) -> Self {
        OfferingKey { instance_type: instance_type.into(), zone: zone.into(), capacity_type: capacity_type.into() }
    }

    fn covers(&self, instance_type: &str, zone: &str, capacity_type: &str) -> bool {
        let field = |pattern: &str, value: &str| pattern == "*" || pattern == value;
        field(&self.instance_type, instance_type) && field(&self.zone, zone) && field(&self.capacity_type, capacity_type)
    }
}

/// What the cloud does with one call before handling it (decided by [`CloudFaults::before_call`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Injected {
    /// Handle the call normally.
    Proceed,
    /// Answer 429 with this `Retry-After`.
    Throttle(Duration),
    /// Answer 500.
    Fail,
}

#[derive(Debug)]
struct FaultState {
    rng: u64,
    error_rates: BTreeMap<CloudVerb, f64>,
    latency: BTreeMap<CloudVerb, Duration>,
    default_latency: Duration,
    throttled_calls: u32,
    retry_after: Duration,
    fail_after_create: u32,
    insufficient: Vec<OfferingKey>,
    quota: Option<usize>,
}

impl FaultState {
    fn new(seed: u64) -> Self {
        FaultState {
            rng: seed,
            error_rates: BTreeMap::new(),
            latency: BTreeMap::new(),
            default_latency: Duration::ZERO,
            throttled_calls: 0,
            retry_after: Duration::from_secs(1),
            fail_after_create: 0,
            insufficient: Vec::new(),
            quota: None,
        }
    }

    /// splitmix64: a uniform float in [0, 1).
    fn next_unit(&mut self) -> f64 {
        crate::random::next_unit(&mut self.rng)
    }
}

/// Fault settings of a simulated cloud. Cheap to clone; clones share the same settings, so
/// a test can keep one and change it while the cloud runs. Nothing is injected by default.
#[derive(Debug, Clone)]
pub struct CloudFaults {
    inner: Arc<Mutex<FaultState>>,
    /// `true` while create answers are held back (see [`CloudFaults::hold_create_answers`]).
    held: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Default for CloudFaults {
    fn default() -> Self {
        CloudFaults::with_seed(0x5EED_C10D)
    }
}

impl CloudFaults {
    /// No faults, random decisions seeded with `seed`.
    pub fn with_seed(seed: u64) -> Self {
        CloudFaults {
            inner: Arc::new(Mutex::new(FaultState::new(seed))),
            held: Arc::new(tokio::sync::watch::channel(false).0),
        }
    }

    fn state(&self) -> MutexGuard<'_, FaultState> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Restarts the random sequence from `seed`.
    pub fn reseed(&self, seed: u64) {
        self.state().rng = seed;
    }

    /// Makes a fraction `rate` (0 to 1) of the calls of `verb` fail with 500.
    pub fn set_error_rate(&self, verb: CloudVerb, rate: f64) {
        let rate = if rate.is_finite() { rate.clamp(0.0, 1.0) } else { 0.0 };
        self.state().error_rates.insert(verb, rate);
    }

    /// Adds `latency` (simulated time) to every call of `verb`, replacing the default latency.
    pub fn set_latency(&self, verb: CloudVerb, latency: Duration) {
        self.state().latency.insert(verb, latency);
    }

    /// Adds `latency` (simulated time) to every call whose verb has no latency of its own.
    pub fn set_default_latency(&self, latency: Duration) {
        self.state().default_latency = latency;
    }

    /// Answers the next `calls` calls (of any verb) with 429 and `Retry-After` (whole
    /// simulated seconds, rounded up, at least 1).
    pub fn throttle_next(&self, calls: u32, retry_after: Duration) {
        let mut state = self.state();
        state.throttled_calls = calls;
        state.retry_after = retry_after;
    }

    /// The next `calls` successful creates launch and tag their instance but answer 500, as
    /// if the response was lost: the caller must find the instance by its tags.
    pub fn fail_after_create(&self, calls: u32) {
        self.state().fail_after_create = calls;
    }

    /// Holds back the answer of every create until [`CloudFaults::release_create_answers`]:
    /// the instance exists (and [`super::CloudEvent::Launched`] is published) but the caller
    /// hears nothing. Lets a test act between the cloud's create and the caller's next step,
    /// e.g. kill the host before it records the instance.
    pub fn hold_create_answers(&self) {
        self.held.send_replace(true);
    }

    /// Lets held and future create answers go out.
    pub fn release_create_answers(&self) {
        self.held.send_replace(false);
    }

    /// Waits while create answers are held back.
    pub(crate) async fn wait_create_release(&self) {
        let mut held = self.held.subscribe();
        // The sender lives as long as `self`, so `wait_for` only ends on release.
        let _ = held.wait_for(|held| !*held).await;
    }

    /// Makes launches of the offerings matching `offering` fail with insufficient capacity
    /// until [`CloudFaults::restore_capacity`]. The catalogue still lists them as available.
    pub fn insufficient_capacity(&self, offering: OfferingKey) {
        let mut state = self.state();
        if !state.insufficient.contains(&offering) {
            state.insufficient.push(offering);
        }
    }

    /// Removes an insufficient-capacity fault set with the same key.
    pub fn restore_capacity(&self, offering: &OfferingKey) {
        self.state().insufficient.retain(|o| o != offering);
    }

    /// Limits the number of live (not terminated) instances; `None` lifts the limit.
    pub fn set_quota(&self, max_live_instances: Option<usize>) {
        self.state().quota = max_live_instances;
    }

    /// Removes every fault (the random sequence continues where it was).
    pub fn clear(&self) {
        let mut state = self.state();
        let rng = state.rng;
        *state = FaultState::new(rng);
        self.held.send_replace(false);
    }

    /// The current quota.
    pub fn quota(&self) -> Option<usize> {
        self.state().quota
    }

    /// Whether launching this offering currently fails with insufficient capacity.
    pub fn lacks_capacity(&self, instance_type: &str, zone: &str, capacity_type: &str) -> bool {
        self.state().insufficient.iter().any(|o| o.covers(instance_type, zone, capacity_type))
    }

    /// The latency to add to a call of `verb`.
    pub(crate) fn latency(&self, verb: CloudVerb) -> Duration {
        let state = self.state();
        state.latency.get(&verb).copied().unwrap_or(state.default_latency)
    }

    /// Decides whether a call of `verb` is throttled, fails, or proceeds.
    pub(crate) fn before_call(&self, verb: CloudVerb) -> Injected {
        let mut state = self.state();
        if state.throttled_calls > 0 {
            state.throttled_calls -= 1;
            return Injected::Throttle(state.retry_after);
        }
        let rate = state.error_rates.get(&verb).copied().unwrap_or(0.0);
        if rate > 0.0 && state.next_unit() < rate {
            return Injected::Fail;
        }
        Injected::Proceed
    }

    /// Consumes one "fail after create" if any is pending.
    pub(crate) fn take_fail_after_create(&self) -> bool {
        let mut state = self.state();
        if state.fail_after_create > 0 {
            state.fail_after_create -= 1;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_rate_is_deterministic_per_seed() {
        let run = || {
            let faults = CloudFaults::with_seed(7);
            faults.set_error_rate(CloudVerb::Get, 0.5);
            (0..64).map(|_| faults.before_call(CloudVerb::Get) == Injected::Fail).collect::<Vec<_>>()
        };
        let first = run();
        assert_eq!(first, run());
        let failures = first.iter().filter(|f| **f).count();
        assert!((16..=48).contains(&failures), "{failures}");
    }

    #[test]
    fn wildcards_match_offerings() {
        let faults = CloudFaults::default();
        faults.insufficient_capacity(OfferingKey::new("*", "test-zone-a", "spot"));
        assert!(faults.lacks_capacity("c-1x-amd64-linux", "test-zone-a", "spot"));
        assert!(!faults.lacks_capacity("c-1x-amd64-linux", "test-zone-a", "on-demand"));
        faults.restore_capacity(&OfferingKey::new("*", "test-zone-a", "spot"));
        assert!(!faults.lacks_capacity("c-1x-amd64-linux", "test-zone-a", "spot"));
    }
}
