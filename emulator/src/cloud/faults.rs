//! Fault injection for the simulated cloud: error rates, latency, throttling, lost
//! responses, insufficient capacity and quotas, all changeable while the cloud runs.
//!
//! Random decisions come from a seeded generator, so a scenario that makes the same calls in
//! the same order sees the same failures. The rates, latency and throttling are the shared
//! `faults` core; capacity, quota and lost or held create answers are the cloud's own.

use std::sync::Arc;
use std::time::Duration;

use joinery_core::clock::Clock;

use crate::faults::{Countdown, Faults, InjectedAnswer, rule_setters, wildcard_matches};

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
    /// `POST /v1/instances/{id}/reboot`.
    Reboot,
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
    pub fn new(
        instance_type: impl Into<String>,
        zone: impl Into<String>,
        capacity_type: impl Into<String>,
    ) -> Self {
        OfferingKey {
            instance_type: instance_type.into(),
            zone: zone.into(),
            capacity_type: capacity_type.into(),
        }
    }

    fn covers(&self, instance_type: &str, zone: &str, capacity_type: &str) -> bool {
        wildcard_matches(&self.instance_type, instance_type)
            && wildcard_matches(&self.zone, zone)
            && wildcard_matches(&self.capacity_type, capacity_type)
    }
}

/// The cloud's own faults, beside the shared request rules.
#[derive(Debug, Default)]
struct CloudExtras {
    fail_after_create: Countdown,
    insufficient: Vec<OfferingKey>,
    quota: Option<usize>,
    /// Instance IDs that `list` leaves out (see [`CloudFaults::hide_from_list`]).
    unlisted: Vec<String>,
}

/// Fault settings of a simulated cloud. Cheap to clone; clones share the same settings, so
/// a test can keep one and change it while the cloud runs. Nothing is injected by default.
#[derive(Debug, Clone)]
pub struct CloudFaults {
    faults: Faults<CloudVerb, CloudExtras>,
    /// `true` while create answers are held back (see [`CloudFaults::hold_create_answers`]).
    held: Arc<tokio::sync::watch::Sender<bool>>,
}

rule_setters!(CloudFaults {
    /// Makes a fraction `rate` (0 to 1) of the calls of `verb` fail with 500.
    set_error_rate => set_error_rate(verb: CloudVerb, rate: f64);
    /// Adds `latency` (simulated time) to every call of `verb`, replacing the default latency.
    set_latency => set_latency(verb: CloudVerb, latency: Duration);
    /// Adds `latency` (simulated time) to every call whose verb has no latency of its own.
    set_default_latency => set_default_latency(latency: Duration);
    /// Answers the next `calls` calls (of any verb) with 429 and `Retry-After` (whole
    /// simulated seconds, rounded up, at least 1).
    throttle_next => throttle_next(calls: u32, retry_after: Duration);
});

impl Default for CloudFaults {
    fn default() -> Self {
        CloudFaults::with_seed(0x5EED_C10D)
    }
}

impl CloudFaults {
    /// No faults, random decisions seeded with `seed`.
    pub fn with_seed(seed: u64) -> Self {
        CloudFaults {
            faults: Faults::with_seed(seed),
            held: Arc::new(tokio::sync::watch::channel(false).0),
        }
    }

    /// Restarts the random sequence from `seed`.
    pub fn reseed(&self, seed: u64) {
        self.faults.reseed(seed);
    }

    /// The next `calls` successful creates launch and tag their instance but answer 500, as
    /// if the response was lost: the caller must find the instance by its tags.
    pub fn fail_after_create(&self, calls: u32) {
        self.faults.lock().extra.fail_after_create.set(calls);
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
    /// until [`CloudFaults::restore_capacity`]. The catalog still lists them as available.
    pub fn insufficient_capacity(&self, offering: OfferingKey) {
        let mut state = self.faults.lock();
        if !state.extra.insufficient.contains(&offering) {
            state.extra.insufficient.push(offering);
        }
    }

    /// Removes an insufficient-capacity fault set with the same key.
    pub fn restore_capacity(&self, offering: &OfferingKey) {
        self.faults
            .lock()
            .extra
            .insufficient
            .retain(|o| o != offering);
    }

    /// Limits the number of live (not terminated) instances; `None` lifts the limit.
    pub fn set_quota(&self, max_live_instances: Option<usize>) {
        self.faults.lock().extra.quota = max_live_instances;
    }

    /// Leaves instance `id` out of every `list` answer while `get` still finds it, as an
    /// eventually consistent listing (or a lost page) of a real cloud can.
    pub fn hide_from_list(&self, id: &str) {
        self.faults.lock().extra.unlisted.push(id.to_string());
    }

    /// Whether `list` leaves instance `id` out.
    pub(crate) fn is_unlisted(&self, id: &str) -> bool {
        self.faults.lock().extra.unlisted.iter().any(|u| u == id)
    }

    /// Removes every fault (the random sequence continues where it was).
    pub fn clear(&self) {
        self.faults.clear();
        self.held.send_replace(false);
    }

    /// The current quota.
    pub fn quota(&self) -> Option<usize> {
        self.faults.lock().extra.quota
    }

    /// Whether launching this offering currently fails with insufficient capacity.
    pub fn lacks_capacity(&self, instance_type: &str, zone: &str, capacity_type: &str) -> bool {
        self.faults
            .lock()
            .extra
            .insufficient
            .iter()
            .any(|o| o.covers(instance_type, zone, capacity_type))
    }

    /// Waits out the latency of a call of `verb`, then decides whether it is throttled, fails
    /// or proceeds; returns the cloud's answer to an injected fault.
    pub(crate) async fn inject<A: InjectedAnswer<CloudVerb>>(
        &self,
        verb: CloudVerb,
        clock: &Clock,
    ) -> Option<A> {
        self.faults.delay_and_decide(verb, clock).await
    }

    /// Consumes one "fail after create" if any is pending.
    pub(crate) fn take_fail_after_create(&self) -> bool {
        self.faults.lock().extra.fail_after_create.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
