//! What termination and disruption need to know about pods and claims: the drain's view of a
//! pod (tier, protection, grace period), `karpenter.sh/do-not-disrupt`, which pods must find a
//! new home when a node goes, and a deleting claim's termination deadline. The drain's
//! decisions themselves are the core's ([`joinery_core::drain`]).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use joinery_api::NodeClaim;
use joinery_core::drain::{self, DrainPod};
use joinery_core::labels;

use crate::convert::system_time;
use crate::lean::{LeanNode, LeanPod};
use crate::pods::{is_daemon_pod, is_mirror_pod, is_owned_by, is_terminal};

/// Whether a pod tolerates the `karpenter.sh/disrupted:NoSchedule` taint (such pods are
/// never drained, like DaemonSet pods).
pub fn tolerates_disrupted_taint(pod: &LeanPod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .into_iter()
        .flatten()
        .any(|t| {
            let key_matches = match t.key.as_deref() {
                None | Some("") => t.operator.as_deref() == Some("Exists"),
                Some(k) => k == labels::DISRUPTED_TAINT_KEY,
            };
            let effect_matches = t
                .effect
                .as_deref()
                .is_none_or(|e| e.is_empty() || e == "NoSchedule");
            let value_matches = t.operator.as_deref() == Some("Exists")
                || t.value.as_deref().unwrap_or("").is_empty();
            key_matches && effect_matches && value_matches
        })
}

/// Priority classes upstream drains last.
const CRITICAL_PRIORITY_CLASSES: [&str; 2] = ["system-cluster-critical", "system-node-critical"];

/// Whether a pod's `karpenter.sh/do-not-disrupt` protects it at `now`: `"true"`, or a
/// duration that has not yet elapsed since the pod started. Other values are ignored.
pub fn do_not_disrupt_active(pod: &LeanPod, now: SystemTime) -> bool {
    let Some(value) = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::DO_NOT_DISRUPT_ANNOTATION))
    else {
        return false;
    };
    if value == "true" {
        return true;
    }
    let Ok(protect_for) = joinery_api::duration::parse_go_duration(value) else {
        return false;
    };
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(system_time);
    protect_for > Duration::ZERO && started.is_none_or(|started| now < started + protect_for)
}

/// The drain's view of a pod.
pub fn drain_pod(pod: &LeanPod, now: SystemTime) -> DrainPod {
    let spec = pod.spec.as_ref();
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    DrainPod {
        key: format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or(""),
            pod.metadata.name.as_deref().unwrap_or("")
        ),
        terminal: matches!(phase, Some("Succeeded" | "Failed")),
        mirror: is_mirror_pod(pod),
        daemon: is_daemon_pod(pod),
        critical: spec
            .and_then(|s| s.priority_class_name.as_deref())
            .is_some_and(|c| CRITICAL_PRIORITY_CLASSES.contains(&c)),
        tolerates_disrupted: tolerates_disrupted_taint(pod),
        do_not_disrupt: do_not_disrupt_active(pod, now),
        deleting_at: pod.metadata.deletion_timestamp.as_ref().map(system_time),
        grace_period: spec
            .and_then(|s| s.termination_grace_period_seconds)
            .map_or(drain::DEFAULT_POD_GRACE, |s| {
                Duration::from_secs(s.max(0) as u64)
            }),
    }
}

/// Whether a pod must find a home elsewhere when its node goes, as upstream's
/// `IsReschedulable`: active (not finished, not terminating), or terminating but owned by a
/// StatefulSet (its replacement needs room as soon as it is gone, under the same name); and
/// not a DaemonSet or mirror pod, nor one tolerating the disrupted taint.
pub fn is_reschedulable(pod: &LeanPod) -> bool {
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let active = !is_terminal(pod) && !terminating;
    (active || (terminating && !is_terminal(pod) && is_owned_by(pod, "StatefulSet")))
        && !is_daemon_pod(pod)
        && !is_mirror_pod(pod)
        && !tolerates_disrupted_taint(pod)
}

/// The pods of a node that must find a home elsewhere when it goes (what makes a node
/// non-empty; see [`is_reschedulable`]). The drain itself also evicts DaemonSet pods, last
/// (see [`joinery_core::drain`]).
pub fn reschedulable_pods(pods: &[Arc<LeanPod>]) -> Vec<Arc<LeanPod>> {
    pods.iter()
        .filter(|p| is_reschedulable(p))
        .cloned()
        .collect()
}

/// The names of the nodes whose pods must move: managed Nodes (labelled with a NodePool) that
/// are being deleted, or whose NodeClaim is.
pub fn deleting_node_names<'a>(
    nodes: impl IntoIterator<Item = &'a LeanNode>,
    claims: impl IntoIterator<Item = &'a NodeClaim>,
) -> BTreeSet<String> {
    let deleting_claims: BTreeSet<&str> = claims
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_some())
        .filter_map(|c| c.status.as_ref().and_then(|s| s.provider_id.as_deref()))
        .collect();
    nodes
        .into_iter()
        .filter(|n| {
            let managed = n.label(labels::NODEPOOL_LABEL).is_some();
            let claim_deleting = n
                .provider_id()
                .is_some_and(|pid| deleting_claims.contains(pid));
            managed && (n.metadata.deletion_timestamp.is_some() || claim_deleting)
        })
        .filter_map(|n| n.metadata.name.as_deref().map(String::from))
        .collect()
}

/// When a deleting NodeClaim's node must be gone: its
/// `karpenter.sh/nodeclaim-termination-timestamp`, else its deletion time plus its
/// `terminationGracePeriod`; `None` without a grace period (the drain may take as long as
/// budgets make it).
pub fn termination_deadline(claim: &NodeClaim) -> Option<SystemTime> {
    let stamped = claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION))
        .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
        .map(|t| system_time(&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(t)));
    stamped.or_else(|| {
        let deleted = claim
            .metadata
            .deletion_timestamp
            .as_ref()
            .map(system_time)?;
        Some(deleted + claim.spec.termination_grace_period.as_ref()?.duration())
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(value: serde_json::Value) -> LeanPod {
        serde_json::from_value(value).unwrap()
    }

    fn at(rfc3339: &str) -> SystemTime {
        system_time(&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            rfc3339.parse().unwrap(),
        ))
    }

    #[test]
    fn do_not_disrupt_is_true_or_a_duration_since_the_pod_started() {
        let now = at("2026-01-01T01:00:00Z");
        let with = |value: &str| {
            pod(
                json!({"metadata": {"name": "p", "annotations": {"karpenter.sh/do-not-disrupt": value}},
                       "status": {"startTime": "2026-01-01T00:30:00Z"}}),
            )
        };
        assert!(do_not_disrupt_active(&with("true"), now));
        assert!(
            do_not_disrupt_active(&with("45m"), now),
            "30 minutes old, protected for 45"
        );
        assert!(!do_not_disrupt_active(&with("20m"), now), "protection over");
        assert!(!do_not_disrupt_active(&with("false"), now));
        assert!(
            !do_not_disrupt_active(&with("soon"), now),
            "invalid values are ignored"
        );
        assert!(!do_not_disrupt_active(
            &pod(json!({"metadata": {"name": "p"}})),
            now
        ));
    }

    #[test]
    fn the_drain_view_of_a_pod() {
        let now = at("2026-01-01T01:00:00Z");
        let view = drain_pod(
            &pod(json!({
                "metadata": {"name": "agent", "namespace": "kube-system", "deletionTimestamp": "2026-01-01T00:59:00Z",
                             "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "u"}]},
                "spec": {"containers": [], "priorityClassName": "system-node-critical", "terminationGracePeriodSeconds": 5,
                         "tolerations": [{"operator": "Exists"}]},
                "status": {"phase": "Running"}
            })),
            now,
        );
        assert_eq!(view.key, "kube-system/agent");
        assert!(
            view.daemon
                && view.critical
                && view.tolerates_disrupted
                && !view.terminal
                && !view.mirror
        );
        assert_eq!(view.deleting_at, Some(at("2026-01-01T00:59:00Z")));
        assert_eq!(view.grace_period, Duration::from_secs(5));
        let plain = drain_pod(
            &pod(
                json!({"metadata": {"name": "web"}, "spec": {"containers": []}, "status": {"phase": "Succeeded"}}),
            ),
            now,
        );
        assert!(plain.terminal && !plain.daemon && !plain.critical);
        assert_eq!(plain.grace_period, drain::DEFAULT_POD_GRACE);
    }

    #[test]
    fn the_deadline_is_the_annotation_or_deletion_plus_grace_period() {
        let claim =
            |value: serde_json::Value| -> NodeClaim { serde_json::from_value(value).unwrap() };
        let spec =
            json!({"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []});
        let mut with_tgp = spec.clone();
        with_tgp["terminationGracePeriod"] = json!("10m");
        let deleting = claim(
            json!({"metadata": {"name": "c", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": with_tgp}),
        );
        assert_eq!(
            termination_deadline(&deleting),
            Some(at("2026-01-01T00:10:00Z"))
        );
        let stamped = claim(
            json!({"metadata": {"name": "c", "annotations": {"karpenter.sh/nodeclaim-termination-timestamp": "2026-01-01T00:05:00Z"}},
                                   "spec": spec.clone()}),
        );
        assert_eq!(
            termination_deadline(&stamped),
            Some(at("2026-01-01T00:05:00Z"))
        );
        let no_tgp = claim(
            json!({"metadata": {"name": "c", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": spec}),
        );
        assert_eq!(
            termination_deadline(&no_tgp),
            None,
            "without a grace period the drain has no deadline"
        );
    }
}
