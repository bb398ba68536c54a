//! Fault injection for the fake Exoscale API: 5xx rates, 429 throttling with `Retry-After`,
//! capacity shortages, an instance quota, creates and attaches whose operation fails, and
//! the error-body shape. Everything can change while the fake runs.
//!
//! Random decisions come from a seeded generator, so the same calls in the same order see
//! the same failures. Rates and throttling are the shared `faults` core; capacity,
//! quota, failing operations and the error shape are the fake's own.

use std::time::Duration;

use crate::faults::{Countdown, Faults, Injected, rule_setters, wildcard_matches};

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
    /// `PUT /v2/instance/{id}:reboot`.
    RebootInstance,
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

/// The fake's own faults, beside the shared request rules.
#[derive(Debug, Default)]
struct ExoExtras {
    fail_after_create: Countdown,
    fail_attach: Countdown,
    no_capacity: Vec<(String, String)>,
    instance_quota: Option<usize>,
    error_shape: ErrorShape,
}

/// Fault settings of a fake Exoscale API. Clones share the settings, so a test keeps one and
/// changes it while the fake runs. Nothing is injected by default.
#[derive(Debug, Clone)]
pub struct ExoFaults {
    faults: Faults<ExoVerb, ExoExtras>,
}

impl Default for ExoFaults {
    fn default() -> Self {
        ExoFaults::with_seed(0xE805_CA1E)
    }
}

impl ExoFaults {
    /// No faults; random decisions seeded with `seed`.
    pub fn with_seed(seed: u64) -> Self {
        ExoFaults {
            faults: Faults::with_seed(seed),
        }
    }

    /// The next `creates` instance creations make the instance (it is listed, labelled and
    /// announced) but their operation ends in `failure` (reason `fault`), leaving the
    /// instance in state `error` until someone deletes it.
    pub fn fail_after_create(&self, creates: u32) {
        self.faults.lock().extra.fail_after_create.set(creates);
    }

    /// The next `attaches` private-network attachments fail in their operation (reason
    /// `unavailable`); the network is not attached.
    pub fn fail_attach(&self, attaches: u32) {
        self.faults.lock().extra.fail_attach.set(attaches);
    }

    /// Creating an instance of type `instance_type` (`<family>.<size>` or `*`) in `zone` (or
    /// `*`) fails for lack of capacity: the operation ends in `failure` with reason
    /// `unavailable` and no instance remains.
    pub fn insufficient_capacity(&self, instance_type: &str, zone: &str) {
        let key = (instance_type.to_string(), zone.to_string());
        let mut state = self.faults.lock();
        if !state.extra.no_capacity.contains(&key) {
            state.extra.no_capacity.push(key);
        }
    }

    /// Lifts an [`ExoFaults::insufficient_capacity`] set with the same arguments.
    pub fn restore_capacity(&self, instance_type: &str, zone: &str) {
        self.faults
            .lock()
            .extra
            .no_capacity
            .retain(|(t, z)| !(t == instance_type && z == zone));
    }

    /// Limits the number of instances in the organisation (all zones, not being destroyed);
    /// creating one more is refused with 403 and a quota message. `None` lifts the limit.
    pub fn set_instance_quota(&self, limit: Option<usize>) {
        self.faults.lock().extra.instance_quota = limit;
    }

    /// Chooses the shape of error bodies (except 429, which always has `error` and `retry_after`).
    pub fn set_error_shape(&self, shape: ErrorShape) {
        self.faults.lock().extra.error_shape = shape;
    }

    /// Removes every fault (the random sequence continues).
    pub fn clear(&self) {
        self.faults.clear();
    }

    /// The instance quota.
    pub fn instance_quota(&self) -> Option<usize> {
        self.faults.lock().extra.instance_quota
    }

    /// The error-body shape.
    pub fn error_shape(&self) -> ErrorShape {
        self.faults.lock().extra.error_shape
    }

    /// Whether launching `instance_type` in `zone` currently fails for lack of capacity.
    pub fn lacks_capacity(&self, instance_type: &str, zone: &str) -> bool {
        let state = self.faults.lock();
        state
            .extra
            .no_capacity
            .iter()
            .any(|(t, z)| wildcard_matches(t, instance_type) && wildcard_matches(z, zone))
    }

    /// Decides whether a call of `verb` is throttled, fails or proceeds.
    pub(crate) fn before_call(&self, verb: ExoVerb) -> Injected {
        self.faults.before_call(verb)
    }

    /// Consumes one pending "fail after create".
    pub(crate) fn take_fail_after_create(&self) -> bool {
        self.faults.lock().extra.fail_after_create.take()
    }

    /// Consumes one pending "fail attach".
    pub(crate) fn take_fail_attach(&self) -> bool {
        self.faults.lock().extra.fail_attach.take()
    }
}

rule_setters!(ExoFaults {
    /// Makes a fraction `rate` (0 to 1) of the calls of `verb` fail with 500.
    set_error_rate => set_error_rate(verb: ExoVerb, rate: f64);
    /// Makes a fraction `rate` of the calls of every verb without a rate of its own fail with 500.
    set_default_error_rate => set_default_error_rate(rate: f64);
    /// Answers the next `calls` authenticated calls with 429 and `Retry-After` (whole seconds,
    /// rounded up, at least 1).
    throttle_next => throttle_next(calls: u32, retry_after: Duration);
    /// Answers a fraction `rate` (0 to 1) of all authenticated calls with 429 and `Retry-After`
    /// (whole seconds, rounded up, at least 1), on top of [`ExoFaults::throttle_next`].
    set_throttle_rate => set_throttle_rate(rate: f64, retry_after: Duration);
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_rates_are_deterministic_and_verbs_can_override_the_default() {
        let run = || {
            let faults = ExoFaults::with_seed(3);
            faults.set_default_error_rate(0.5);
            faults.set_error_rate(ExoVerb::Zones, 0.0);
            (0..64)
                .map(|_| faults.before_call(ExoVerb::GetInstance) == Injected::Fail)
                .collect::<Vec<_>>()
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
        assert_eq!(
            faults.before_call(ExoVerb::Zones),
            Injected::Throttle(Duration::from_secs(2))
        );
        faults.set_throttle_rate(0.0, Duration::from_secs(2));
        assert_eq!(faults.before_call(ExoVerb::Zones), Injected::Proceed);
        faults.fail_after_create(1);
        assert!(faults.take_fail_after_create());
        assert!(!faults.take_fail_after_create());
    }
}
