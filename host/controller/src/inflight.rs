//! The in-flight registry: what this process has started that the cluster does not show yet.
//!
//! It is the one piece of memory the loops share, and each entry has one writer:
//!
//! | entry | written by | read by | why the cluster is not enough |
//! |---|---|---|---|
//! | NodeClaims created | provisioner | provisioner, gc | the watch may not have delivered a claim just created |
//! | create attempts | lifecycle | lifecycle | a create whose answer was lost may have launched an instance |
//! | instances launched | lifecycle | lifecycle, gc | the launch result is written to status a moment later (upstream keeps it an hour) |
//! | nominations | provisioner | disruption | which nodes and claims pending pods were just placed on is a decision, not an object |
//!
//! Everything else a loop needs it reads from the cluster caches. The registry forgets a
//! claim once the cache shows it (created) or once it is finalized (attempts, launches), so
//! it holds only what is genuinely in flight.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Mutex;
use std::time::SystemTime;

use joinery_api::NodeClaim;
use joinery_runtime::contract::Instance;

use crate::util::system_time;

/// What this process has in flight (see the module documentation for who writes what).
#[derive(Debug)]
pub struct InFlight {
    /// When this process started (simulated clock): claims older than this may have been
    /// launched by a previous life of the controller.
    started_at: SystemTime,
    /// NodeClaims created by the provisioner that the cache may not show yet.
    created: Mutex<Vec<NodeClaim>>,
    /// NodeClaim UIDs whose create call this process made and did not see succeed.
    create_attempts: Mutex<HashSet<String>>,
    /// Launch results not yet known to be in status, by NodeClaim UID.
    launched: Mutex<HashMap<String, Instance>>,
    /// Nodes and NodeClaims (by name) the provisioner placed pending pods on, until when
    /// they are kept from disruption.
    nominated: Mutex<HashMap<String, SystemTime>>,
}

impl InFlight {
    /// An empty registry for a process started at `started_at`.
    pub fn new(started_at: SystemTime) -> InFlight {
        InFlight {
            started_at,
            created: Mutex::default(),
            create_attempts: Mutex::default(),
            launched: Mutex::default(),
            nominated: Mutex::default(),
        }
    }

    /// Records a NodeClaim the provisioner just created.
    pub fn record_created(&self, claim: NodeClaim) {
        self.created.lock().expect("in-flight lock").push(claim);
    }

    /// Forgets created claims the cache now shows (`cached` holds their names) and tells
    /// whether any is still missing from it.
    pub fn created_not_cached(&self, cached: &BTreeSet<String>) -> bool {
        let mut created = self.created.lock().expect("in-flight lock");
        created.retain(|c| !c.metadata.name.as_ref().is_some_and(|n| cached.contains(n)));
        !created.is_empty()
    }

    /// Names of the claims created and not yet seen in the cache.
    pub fn created_names(&self) -> Vec<String> {
        self.created
            .lock()
            .expect("in-flight lock")
            .iter()
            .filter_map(|c| c.metadata.name.clone())
            .collect()
    }

    /// Records that a create call is about to be made for the claim `uid`.
    pub fn record_create_attempt(&self, uid: &str) {
        self.create_attempts
            .lock()
            .expect("in-flight lock")
            .insert(uid.to_string());
    }

    /// Whether an instance may already exist for `claim` although its status has no provider
    /// ID: it predates this process, or a create call of ours did not return a result.
    pub fn may_have_launched(&self, claim: &NodeClaim) -> bool {
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        if self
            .create_attempts
            .lock()
            .expect("in-flight lock")
            .contains(&uid)
        {
            return true;
        }
        let created = claim.metadata.creation_timestamp.as_ref().map(system_time);
        created.is_none_or(|c| c <= self.started_at)
    }

    /// Forgets a claim's create attempt (it failed cleanly with nothing launched).
    pub fn forget_create_attempt(&self, uid: &str) {
        self.create_attempts
            .lock()
            .expect("in-flight lock")
            .remove(uid);
    }

    /// Records the instance launched for the claim `uid`.
    pub fn record_launched(&self, uid: &str, instance: Instance) {
        self.launched
            .lock()
            .expect("in-flight lock")
            .insert(uid.to_string(), instance);
    }

    /// The instance launched for the claim `uid`, if this process launched (or adopted) it.
    pub fn launched(&self, uid: &str) -> Option<Instance> {
        self.launched
            .lock()
            .expect("in-flight lock")
            .get(uid)
            .cloned()
    }

    /// Provider IDs of every instance this process launched and has not finalized.
    pub fn launched_provider_ids(&self) -> Vec<String> {
        self.launched
            .lock()
            .expect("in-flight lock")
            .values()
            .map(|i| i.provider_id.clone())
            .collect()
    }

    /// Keeps the nodes or NodeClaims `names` from disruption until `until` (the provisioner
    /// placed pending pods on them at `now`); a later nomination extends one. Nominations that
    /// ended by `now` are forgotten here, once per provisioning pass.
    pub fn nominate<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
        now: SystemTime,
        until: SystemTime,
    ) {
        let mut nominated = self.nominated.lock().expect("in-flight lock");
        nominated.retain(|_, end| *end > now);
        for name in names {
            let end = nominated.entry(name.to_string()).or_insert(until);
            *end = (*end).max(until);
        }
    }

    /// Whether the node or NodeClaim `name` is nominated at `now`.
    pub fn is_nominated(&self, name: &str, now: SystemTime) -> bool {
        self.nominated
            .lock()
            .expect("in-flight lock")
            .get(name)
            .is_some_and(|end| *end > now)
    }

    /// Forgets everything about the claim `uid` (it was finalized), including that it was
    /// created: a claim created, refused and finalized between two provisioning passes may
    /// never be seen in the cache, and must not hold provisioning back as "not cached yet".
    pub fn forget(&self, uid: &str) {
        self.launched.lock().expect("in-flight lock").remove(uid);
        self.created
            .lock()
            .expect("in-flight lock")
            .retain(|c| c.metadata.uid.as_deref() != Some(uid));
        self.forget_create_attempt(uid);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn claim(name: &str, uid: &str, created: &str) -> NodeClaim {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "uid": uid, "creationTimestamp": created},
            "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []},
        }))
        .unwrap()
    }

    fn start() -> SystemTime {
        system_time(&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-01-01T00:00:00Z".parse().unwrap(),
        ))
    }

    #[test]
    fn created_claims_are_forgotten_once_cached() {
        let inflight = InFlight::new(start());
        inflight.record_created(claim("a", "1", "2026-01-01T00:01:00Z"));
        inflight.record_created(claim("b", "2", "2026-01-01T00:01:00Z"));
        assert_eq!(inflight.created_names(), ["a", "b"]);
        assert!(inflight.created_not_cached(&BTreeSet::from(["a".to_string()])));
        assert_eq!(inflight.created_names(), ["b"]);
        assert!(!inflight.created_not_cached(&BTreeSet::from(["b".to_string()])));
    }

    #[test]
    fn a_created_claim_finalized_before_the_cache_saw_it_no_longer_counts_as_missing() {
        let inflight = InFlight::new(start());
        inflight.record_created(claim("refused", "7", "2026-01-01T00:00:00Z"));
        assert!(
            inflight.created_not_cached(&BTreeSet::new()),
            "created, not cached yet"
        );
        // Launched, refused and finalized between two provisioning passes.
        inflight.forget("7");
        assert!(
            !inflight.created_not_cached(&BTreeSet::new()),
            "provisioning is not held back by a claim that is gone"
        );
    }

    #[test]
    fn a_nomination_lasts_until_its_end_and_is_extended_by_a_later_one() {
        let inflight = InFlight::new(start());
        let at = |s: u64| start() + Duration::from_secs(s);
        inflight.nominate(["node-a"], at(0), at(20));
        assert!(inflight.is_nominated("node-a", at(19)));
        assert!(!inflight.is_nominated("node-b", at(19)));
        inflight.nominate(["node-a"], at(0), at(10));
        assert!(
            inflight.is_nominated("node-a", at(19)),
            "an earlier end does not shorten it"
        );
        inflight.nominate(["node-a"], at(20), at(40));
        assert!(inflight.is_nominated("node-a", at(39)));
        assert!(!inflight.is_nominated("node-a", at(40)));
    }

    #[test]
    fn a_claim_may_have_launched_if_older_than_the_process_or_attempted() {
        let inflight = InFlight::new(start() + Duration::from_secs(30));
        let old = claim("old", "1", "2026-01-01T00:00:00Z");
        let new = claim("new", "2", "2026-01-01T00:05:00Z");
        assert!(
            inflight.may_have_launched(&old),
            "a previous life of the host may have launched it"
        );
        assert!(!inflight.may_have_launched(&new));
        inflight.record_create_attempt("2");
        assert!(
            inflight.may_have_launched(&new),
            "our create's answer may have been lost"
        );
        inflight.forget("2");
        assert!(!inflight.may_have_launched(&new));
    }
}
