//! Fault injection for the fake Exoscale API: 5xx rates, 429 throttling with `Retry-After`,
//! capacity shortages, an instance quota, creates and attaches whose operation fails, and
//! the error-body shape. Everything can change while the fake runs.
//!
//! Random decisions come from a seeded generator, so the same calls in the same order see
//! the same failures.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// The API calls faults can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ExoVerb {
    /// `GET /v2/zone`.
    Zones,
    /// `GET /v2/operation/{id}`.
    Operation,
    /// `GET /v2/instance-type[/{id}]`.
    InstanceTypes,
    /// `GET /v2/template[/{id}]`.
    Templates,
    /// `GET /v2/security-group[/{id}]`.
    SecurityGroups,
    /// `GET /v2/private-network[/{id}]`.
    PrivateNetworks,
    /// `PUT /v2/private-network/{id}:attach` and `:detach`.
    AttachPrivateNetwork,
    /// `GET /v2/anti-affinity-group[/{id}]`.
    AntiAffinityGroups,
    /// `GET /v2/ssh-key[/{name}]`.
    SshKeys,
    /// `GET /v2/quota`.
    Quotas,
    /// `POST /v2/instance`.
    CreateInstance,
    /// `GET /v2/instance`.
    ListInstances,
    /// `GET /v2/instance/{id}`.
    GetInstance,
    /// `PUT /v2/instance/{id}`.
    UpdateInstance,
    /// `DELETE /v2/instance/{id}`.
    DeleteInstance,
}

/// How error bodies look. The real API answers with either; a client must read both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorShape {
    /// `{"message": "…"}`.
    #[default]
    Classic,
    /// RFC 9457 problem details: `{"type", "title", "status", "detail"}`.
    Problem,
}

/// What happens to one call before it is handled.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Injected {
    /// Handle it.
    Proceed,
    /// Answer 429 with this `Retry-After`.
    Throttle(Duration),
    /// Answer 500.
    Fail,
}

#[derive(Debug)]
struct FaultState {
    rng: u64,
    error_rates: BTreeMap<ExoVerb, f64>,
    default_error_rate: f64,
    throttled_calls: u32,
    throttle_rate: f64,
    retry_after: Duration,
    fail_after_create: u32,
    fail_attach: u32,
    no_capacity: Vec<(String, String)>,
    instance_quota: Option<usize>,
    error_shape: ErrorShape,
}

impl FaultState {
    fn new(seed: u64) -> Self {
        FaultState {
            rng: seed,
            error_rates: BTreeMap::new(),
            default_error_rate: 0.0,
            throttled_calls: 0,
            throttle_rate: 0.0,
            retry_after: Duration::from_secs(1),
            fail_after_create: 0,
            fail_attach: 0,
            no_capacity: Vec::new(),
            instance_quota: None,
            error_shape: ErrorShape::Classic,
        }
    }

    /// A uniform float in [0, 1) (splitmix64).
    fn next_unit(&mut self) -> f64 {
        crate::random::next_unit(&mut self.rng)
    }
}

/// Fault settings of a fake Exoscale API. Clones share the settings, so a test keeps one and
/// changes it while the fake runs. Nothing is injected by default.
#[derive(Debug, Clone)]
pub struct ExoFaults {
    inner: Arc<Mutex<FaultState>>,
}

impl Default for ExoFaults {
    fn default() -> Self {
        ExoFaults::with_seed(0xE805_CA1E)
    }
}

fn clamp_rate(rate: f64) -> f64 {
    if rate.is_finite() { rate.clamp(0.0, 1.0) } else { 0.0 }
}

impl ExoFaults {
    /// No faults; random decisions seeded with `seed`.
    pub fn with_seed(seed: u64) -> Self {
        ExoFaults { inner: Arc::new(Mutex::new(FaultState::new(seed))) }
    }

    fn state(&self) -> MutexGuard<'_, FaultState> {
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Makes a fraction `rate` (0 to 1) of the calls of `verb` fail with 500.
    pub fn set_error_rate(&self, verb: ExoVerb, rate: f64) {
        self.state().error_rates.insert(verb, clamp_rate(rate));
    }

    /// Makes a fraction `rate` of the calls of every verb without a rate of its own fail with 500.
    pub fn set_default_error_rate(&self, rate: f64) {
        self.state().default_error_rate = clamp_rate(rate);
    }

    /// Answers the next `calls` authenticated calls with 429 and `Retry-After` (whole seconds,
    /// rounded up, at least 1).
    pub fn throttle_next(&self, calls: u32, retry_after: Duration) {
        let mut state = self.state();
        state.throttled_calls = calls;
        state.retry_after = retry_after;
    }

    /// Answers a fraction `rate` (0 to 1) of all authenticated calls with 429 and `Retry-After`
    /// (whole seconds, rounded up, at least 1), on top of [`ExoFaults::throttle_next`].
    pub fn set_throttle_rate(&self, rate: f64, retry_after: Duration) {
        let mut state = self.state();
        state.throttle_rate = clamp_rate(rate);
        state.retry_after = retry_after;
    }

    /// The next `creates` instance creations make the instance (it is listed, labelled and
    /// announced) but their operation ends in `failure` (reason `fault`), leaving the
    /// instance in state `error` until someone deletes it.
    pub fn fail_after_create(&self, creates: u32) {
        self.state().fail_after_create = creates;
    }

    /// The next `attaches` private-network attachments fail in their operation (reason
    /// `unavailable`); the network is not attached.
    pub fn fail_attach(&self, attaches: u32) {
        self.state().fail_attach = attaches;
    }

    /// Creating an instance of type `instance_type` (`<family>.<size>` or `*`) in `zone` (or
    /// `*`) fails for lack of capacity: the operation ends in `failure` with reason
    /// `unavailable` and no instance remains.
    pub fn insufficient_capacity(&self, instance_type: &str, zone: &str) {
        let key = (instance_type.to_string(), zone.to_string());
        let mut state = self.state();
        if !state.no_capacity.contains(&key) {
            state.no_capacity.push(key);
        }
    }

    /// Lifts an [`ExoFaults::insufficient_capacity`] set with the same arguments.
    pub fn restore_capacity(&self, instance_type: &str, zone: &str) {
        self.state().no_capacity.retain(|(t, z)| !(t == instance_type && z == zone));
    }

    /// Limits the number of instances in the organisation (all zones, not being destroyed);
    /// creating one more is refused with 403 and a quota message. `None` lifts the limit.
    pub fn set_instance_quota(&self, limit: Option<usize>) {
        self.state().instance_quota = limit;
    }

    /// Chooses the shape of error bodies (except 429, which always has `error` and `retry_after`).
    pub fn set_error_shape(&self, shape: ErrorShape) {
        self.state().error_shape = shape;
    }

    /// Removes every fault (the random sequence continues).
    pub fn clear(&self) {
        let mut state = self.state();
        let rng = state.rng;
        *state = FaultState::new(rng);
    }

    /// The instance quota.
    pub fn instance_quota(&self) -> Option<usize> {
        self.state().instance_quota
    }

    /// The error-body shape.
    pub fn error_shape(&self) -> ErrorShape {
        self.state().error_shape
    }

    /// Whether launching `instance_type` in `zone` currently fails for lack of capacity.
    pub fn lacks_capacity(&self, instance_type: &str, zone: &str) -> bool {
        let matches = |pattern: &str, value: &str| pattern == "*" || pattern == value;
        self.state().no_capacity.iter().any(|(t, z)| matches(t, instance_type) && matches(z, zone))
    }

    /// Decides whether a call of `verb` is throttled, fails or proceeds.
    pub(crate) fn before_call(&self, verb: ExoVerb) -> Injected {
        let mut state = self.state();
        if state.throttled_calls > 0 {
            state.throttled_calls -= 1;
            return Injected::Throttle(state.retry_after);
        }
        if state.throttle_rate > 0.0 && state.next_unit() < state.throttle_rate {
            return Injected::Throttle(state.retry_after);
        }
        let rate = state.error_rates.get(&verb).copied().unwrap_or(state.default_error_rate);
        if rate > 0.0 && state.next_unit() < rate {
            return Injected::Fail;
        }
        Injected::Proceed
    }

    /// Consumes one pending "fail after create".
    pub(crate) fn take_fail_after_create(&self) -> bool {
        let mut state = self.state();
        let pending = state.fail_after_create > 0;
        state.fail_after_create = state.fail_after_create.saturating_sub(1);
        pending
    }

    /// Consumes one pending "fail attach".
    pub(crate) fn take_fail_attach(&self) -> bool {
        let mut state = self.state();
        let pending = state.fail_attach > 0;
        state.fail_attach = state.fail_attach.saturating_sub(1);
        pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_rates_are_deterministic_and_verbs_can_override_the_default() {
        let run = || {
            let faults = ExoFaults::with_seed(3);
            faults.set_default_error_rate(0.5);
            faults.set_error_rate(ExoVerb::Zones, 0.0);
            (0..64).map(|_| faults.before_call(ExoVerb::GetInstance) == Injected::Fail).collect::<Vec<_>>()
        };
        let first = run();
        assert_eq!(first, run());
        assert!((16..=48).contains(&first.iter().filter(|f| **f).count()));
        let faults = ExoFaults::with_seed(3);
        faults.set_default_error_rate(1.0);
        faults.set_error_rate(ExoVerb::Zones, 0.0);
        assert_eq!(faults.before_call(ExoVerb::Zones), Injected::Proceed);
        assert_eq!(faults.before_call(ExoVerb::Quotas), Injected::Fail);
    }

    #[test]
    fn capacity_faults_take_wildcards() {
        let faults = ExoFaults::default();
        faults.insufficient_capacity("standard.large", "*");
        assert!(faults.lacks_capacity("standard.large", "de-fra-1"));
        assert!(!faults.lacks_capacity("standard.medium", "de-fra-1"));
        faults.restore_capacity("standard.large", "*");
        assert!(!faults.lacks_capacity("standard.large", "de-fra-1"));
        assert!(!faults.take_fail_after_create());
        faults.set_throttle_rate(1.0, Duration::from_secs(2));
        assert_eq!(faults.before_call(ExoVerb::Zones), Injected::Throttle(Duration::from_secs(2)));
        faults.set_throttle_rate(0.0, Duration::from_secs(2));
        assert_eq!(faults.before_call(ExoVerb::Zones), Injected::Proceed);
        faults.fail_after_create(1);
        assert!(faults.take_fail_after_create());
        assert!(!faults.take_fail_after_create());
    }
}
