//! Per-NodeClaim disruption signals: when a node becomes `Consolidatable`, the nomination
//! window, what a pod costs to evict, and why a claim has drifted.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use crate::instance_type::InstanceType;
use crate::labels::{
    CAPACITY_TYPE_LABEL, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, INSTANCE_TYPE_LABEL,
    WELL_KNOWN_LABELS,
};
use crate::requirements::{Requirement, Requirements};

/// Whether a node is `Consolidatable` at `now`: `consolidateAfter` (`None`: `Never`, the
/// condition goes away) has passed since the later of its initialization and its last pod
/// event. `None` when the condition should not exist.
pub fn consolidatable(
    consolidate_after: Option<Duration>,
    initialized_at: Option<SystemTime>,
    last_pod_event: Option<SystemTime>,
    now: SystemTime,
) -> Option<bool> {
    let after = consolidate_after?;
    let since = match (initialized_at, last_pod_event) {
        (Some(a), Some(b)) => a.max(b),
        (a, b) => a.or(b).unwrap_or(now),
    };
    Some(now.duration_since(since).unwrap_or_default() >= after)
}

/// When a node that is not `Consolidatable` becomes so with time alone: `consolidateAfter`
/// after the later of its initialization and its last pod event. `None` with `Never`, or
/// when neither time is known.
pub fn consolidatable_at(
    consolidate_after: Option<Duration>,
    initialized_at: Option<SystemTime>,
    last_pod_event: Option<SystemTime>,
) -> Option<SystemTime> {
    let since = initialized_at.max(last_pod_event)?;
    since.checked_add(consolidate_after?)
}

/// How long a node (or in-flight NodeClaim) the provisioner chose for pending pods is kept
/// from disruption: twice `BATCH_MAX_DURATION`, at least 10 s (upstream's nomination window).
/// Pods still pending for it renominate it on every provisioning pass.
pub fn nomination_window(batch_max_duration: Duration) -> Duration {
    (batch_max_duration * 2).max(Duration::from_secs(10))
}

/// What evicting one pod costs, upstream's formula: `1 + deletionCost / 2^27 + priority / 2^25`
/// clamped to `[-10, 10]` (`controller.kubernetes.io/pod-deletion-cost` and the pod's
/// priority).
pub fn eviction_cost(deletion_cost: Option<i32>, priority: i32) -> f64 {
    let cost = 1.0
        + f64::from(deletion_cost.unwrap_or(0)) / 2f64.powi(27)
        + f64::from(priority) / 2f64.powi(25);
    cost.clamp(-10.0, 10.0)
}

/// What moving a node's reschedulable pods costs: `1 + Σ max(0, eviction cost)`. A node whose
/// cost is at most 1 counts as empty (upstream's `IsEmpty`).
pub fn reschedule_cost(eviction_costs: impl IntoIterator<Item = f64>) -> f64 {
    1.0 + eviction_costs.into_iter().map(|c| c.max(0.0)).sum::<f64>()
}

/// Why a claim no longer matches its NodePool or NodeClass (the `Drifted` condition's reason).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriftReason {
    /// The NodePool's template hash changed (same hash version on both objects).
    NodePoolDrifted,
    /// The claim's labels no longer satisfy the NodePool's requirements.
    RequirementsDrifted,
    /// The claim's instance type, or every offering compatible with its labels, is gone.
    InstanceTypeNotFound,
}

impl DriftReason {
    /// Upstream's reason string.
    pub fn as_str(self) -> &'static str {
        match self {
            DriftReason::NodePoolDrifted => "NodePoolDrifted",
            DriftReason::RequirementsDrifted => "RequirementsDrifted",
            DriftReason::InstanceTypeNotFound => "InstanceTypeNotFound",
        }
    }
}

/// What the drift check knows about a launched claim and its NodePool.
#[derive(Debug, Clone, Copy)]
pub struct DriftView<'a> {
    /// The claim's `karpenter.sh/nodepool-hash` and `-hash-version` annotations.
    pub claim_hash: (Option<&'a str>, Option<&'a str>),
    /// The NodePool's current hash and hash version.
    pub pool_hash: (&'a str, &'a str),
    /// The claim's labels.
    pub claim_labels: &'a BTreeMap<String, String>,
    /// The NodePool's `spec.template.spec.requirements`.
    pub pool_requirements: &'a Requirements,
    /// The NodePool's instance types now, when the instance-type check is due (upstream: claims
    /// older than an hour); `None` skips it.
    pub instance_types: Option<&'a [InstanceType]>,
}

/// Why the claim drifted, in upstream's order: the template hash, the requirements, the
/// instance type. (The cloud plugin's own `is-drifted` comes after, in the controller.)
pub fn drift(view: &DriftView<'_>) -> Option<DriftReason> {
    if let (Some(hash), Some(version)) = view.claim_hash
        && version == view.pool_hash.1
        && hash != view.pool_hash.0
    {
        return Some(DriftReason::NodePoolDrifted);
    }
    let labels = Requirements::from_labels(
        view.claim_labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str())),
    );
    if labels
        .compatible(view.pool_requirements, &[] as &[&str])
        .is_err()
    {
        return Some(DriftReason::RequirementsDrifted);
    }
    if let Some(types) = view.instance_types
        && instance_type_gone(view.claim_labels, types)
    {
        return Some(DriftReason::InstanceTypeNotFound);
    }
    None
}

/// Whether the claim's instance type is no longer offered, or none of its offerings that are
/// compatible with the claim's labels is available (a reserved claim also accepts on-demand
/// offerings).
fn instance_type_gone(labels: &BTreeMap<String, String>, types: &[InstanceType]) -> bool {
    let Some(name) = labels.get(INSTANCE_TYPE_LABEL) else {
        return false;
    };
    let Some(it) = types.iter().find(|t| t.name() == name) else {
        return true;
    };
    let mut requirements =
        Requirements::from_labels(labels.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    if labels.get(CAPACITY_TYPE_LABEL).map(String::as_str) == Some(CAPACITY_TYPE_RESERVED) {
        requirements.add(Requirement::in_values(
            CAPACITY_TYPE_LABEL,
            [CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_ON_DEMAND],
        ));
    }
    it.offerings()
        .available_compatible(&requirements, &WELL_KNOWN_LABELS[..])
        .next()
        .is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instance_type::Offering;
    use crate::labels::ZONE_LABEL;
    use crate::resources::Resources;

    #[test]
    fn consolidatable_after_the_later_of_initialization_and_the_last_pod_event() {
        let t = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(1_000 + s);
        let after = Some(Duration::from_secs(30));
        assert_eq!(consolidatable(after, Some(t(0)), None, t(29)), Some(false));
        assert_eq!(consolidatable(after, Some(t(0)), None, t(30)), Some(true));
        assert_eq!(
            consolidatable(after, Some(t(0)), Some(t(20)), t(30)),
            Some(false),
            "a pod event restarts the wait"
        );
        assert_eq!(
            consolidatable(after, Some(t(0)), Some(t(20)), t(50)),
            Some(true)
        );
        assert_eq!(
            consolidatable(None, Some(t(0)), None, t(1_000)),
            None,
            "Never: no condition"
        );
        assert_eq!(
            consolidatable(Some(Duration::ZERO), None, None, t(0)),
            Some(true)
        );
    }

    #[test]
    fn consolidatable_at_is_the_moment_consolidatable_turns_true() {
        let t = |s: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(1_000 + s);
        let after = Some(Duration::from_secs(30));
        assert_eq!(consolidatable_at(after, Some(t(0)), None), Some(t(30)));
        assert_eq!(
            consolidatable_at(after, Some(t(0)), Some(t(20))),
            Some(t(50))
        );
        assert_eq!(
            consolidatable_at(after, Some(t(40)), Some(t(20))),
            Some(t(70))
        );
        assert_eq!(consolidatable_at(None, Some(t(0)), None), None, "Never");
        assert_eq!(consolidatable_at(after, None, None), None);
        for (init, pod) in [(Some(t(0)), None), (Some(t(0)), Some(t(20)))] {
            let at = consolidatable_at(after, init, pod).expect("a moment");
            let before = at - Duration::from_secs(1);
            assert_eq!(consolidatable(after, init, pod, before), Some(false));
            assert_eq!(consolidatable(after, init, pod, at), Some(true));
        }
    }

    #[test]
    fn the_nomination_window_is_twice_the_batch_maximum_and_at_least_ten_seconds() {
        assert_eq!(
            nomination_window(Duration::from_secs(10)),
            Duration::from_secs(20)
        );
        assert_eq!(
            nomination_window(Duration::from_secs(2)),
            Duration::from_secs(10)
        );
    }

    #[test]
    fn eviction_costs_follow_deletion_cost_and_priority_and_are_clamped() {
        assert_eq!(eviction_cost(None, 0), 1.0);
        assert_eq!(eviction_cost(Some(1 << 27), 0), 2.0);
        assert_eq!(eviction_cost(None, 1 << 25), 2.0);
        assert_eq!(
            eviction_cost(Some(i32::MAX), 2_000_000_000),
            10.0,
            "clamped high"
        );
        assert_eq!(
            eviction_cost(Some(i32::MIN), -2_000_000_000),
            -10.0,
            "clamped low"
        );
        assert_eq!(reschedule_cost([]), 1.0, "no pods: empty");
        assert_eq!(
            reschedule_cost([1.0, 2.0, -3.0]),
            4.0,
            "negative costs count as zero"
        );
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn view<'a>(
        claim_labels: &'a BTreeMap<String, String>,
        pool: &'a Requirements,
        types: Option<&'a [InstanceType]>,
    ) -> DriftView<'a> {
        DriftView {
            claim_hash: (Some("1"), Some("v3")),
            pool_hash: ("1", "v3"),
            claim_labels,
            pool_requirements: pool,
            instance_types: types,
        }
    }

    #[test]
    fn drift_checks_the_hash_then_the_requirements_then_the_instance_type() {
        let claim = labels(&[
            (INSTANCE_TYPE_LABEL, "m.large"),
            (ZONE_LABEL, "a"),
            (CAPACITY_TYPE_LABEL, "on-demand"),
            ("team", "x"),
        ]);
        let pool: Requirements = [Requirement::in_values(ZONE_LABEL, ["a", "b"])]
            .into_iter()
            .collect();
        let offered = InstanceType::new(
            "m.large",
            Requirements::new(),
            Resources::new(),
            Default::default(),
            vec![Offering::new("a", "on-demand", Some(1.0), true)],
        );
        let types = vec![offered.clone()];
        assert_eq!(drift(&view(&claim, &pool, Some(&types))), None);

        let rehashed = DriftView {
            pool_hash: ("2", "v3"),
            ..view(&claim, &pool, None)
        };
        assert_eq!(drift(&rehashed), Some(DriftReason::NodePoolDrifted));
        let new_version = DriftView {
            pool_hash: ("2", "v4"),
            ..view(&claim, &pool, None)
        };
        assert_eq!(
            drift(&new_version),
            None,
            "a different hash version is not drift"
        );

        let moved: Requirements = [Requirement::in_values(ZONE_LABEL, ["b"])]
            .into_iter()
            .collect();
        assert_eq!(
            drift(&view(&claim, &moved, None)),
            Some(DriftReason::RequirementsDrifted)
        );
        let undefined: Requirements = [Requirement::in_values("gpu", ["yes"])]
            .into_iter()
            .collect();
        assert_eq!(
            drift(&view(&claim, &undefined, None)),
            Some(DriftReason::RequirementsDrifted),
            "a key the claim lacks"
        );
        let excluded: Requirements = [Requirement::does_not_exist("gpu")].into_iter().collect();
        assert_eq!(
            drift(&view(&claim, &excluded, None)),
            None,
            "DoesNotExist is met by an absent label"
        );

        assert_eq!(
            drift(&view(&claim, &pool, Some(&[]))),
            Some(DriftReason::InstanceTypeNotFound)
        );
        let unavailable = vec![InstanceType::new(
            "m.large",
            Requirements::new(),
            Resources::new(),
            Default::default(),
            vec![Offering::new("a", "on-demand", Some(1.0), false)],
        )];
        assert_eq!(
            drift(&view(&claim, &pool, Some(&unavailable))),
            Some(DriftReason::InstanceTypeNotFound)
        );
        let elsewhere = vec![InstanceType::new(
            "m.large",
            Requirements::new(),
            Resources::new(),
            Default::default(),
            vec![Offering::new("b", "on-demand", Some(1.0), true)],
        )];
        assert_eq!(
            drift(&view(&claim, &pool, Some(&elsewhere))),
            Some(DriftReason::InstanceTypeNotFound)
        );
    }
}
