//! The one classification of pods: terminal, bound, pending (what Karpenter provisions for),
//! or left out with the reason; DaemonSet and mirror pods; and which pods a
//! PodDisruptionBudget that allows no eviction protects. The provisioner, `joinery schedule`,
//! termination and disruption all ask here.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::lean::LeanPod;

/// What a pod is to a provisioning pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodState {
    /// Succeeded or Failed: ignored entirely.
    Terminal,
    /// Bound to a node (`spec.nodeName`): cluster state.
    Bound,
    /// Waiting for capacity: part of the batch.
    Pending,
    /// Not bound, but not something the controller provisions for; the reason says why.
    LeftOut(String),
}

/// Classifies a pod of a snapshot. A pod without `spec.nodeName` is pending unless it is
/// being deleted, owned by a DaemonSet or its Node (mirror pod), scheduling-gated, nominated
/// to a node, or marked by kube-scheduler `PodScheduled` with another reason than
/// `Unschedulable`. Unlike the controller, a pod kube-scheduler has not looked at yet (no
/// `PodScheduled` condition) counts as pending, so hand-written snapshots need no status.
pub fn pod_state(pod: &LeanPod) -> PodState {
    if is_terminal(pod) {
        return PodState::Terminal;
    }
    if pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
    {
        return PodState::Bound;
    }
    let left_out = |why: &str| PodState::LeftOut(why.to_string());
    if pod.metadata.deletion_timestamp.is_some() {
        return left_out("being deleted");
    }
    if is_daemon_pod(pod) {
        return left_out("DaemonSet pod; its DaemonSet counts as overhead instead");
    }
    if is_mirror_pod(pod) {
        return left_out("mirror pod");
    }
    if pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty())
    {
        return left_out("scheduling gated");
    }
    let status = pod.status.as_ref();
    if let Some(node) = status
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty())
    {
        return PodState::LeftOut(format!("nominated to node {node}"));
    }
    if let Some(c) = scheduled_condition(pod) {
        let reason = c.reason.as_deref().unwrap_or("");
        if c.status != "False" || reason != "Unschedulable" {
            return PodState::LeftOut(format!("PodScheduled={} reason {reason:?}", c.status));
        }
    }
    PodState::Pending
}

/// Whether a Kubernetes label selector selects `labels`, by the core's rules (the one label
/// selector of the host): an empty selector selects everything, a malformed one nothing.
pub fn selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    crate::convert::label_selector(selector, "selector").is_ok_and(|s| s.matches(labels))
}

/// The PodDisruptionBudgets (`namespace/name`) that keep the eviction API from evicting
/// `pod` now, as upstream's disruption reads them: every budget covering the pod when more
/// than one does (the eviction API refuses a pod under several budgets, whatever they
/// allow); else its one budget when that allows no disruption, unless the budget's
/// `unhealthyPodEvictionPolicy` is `AlwaysAllow` and the pod is not Ready. `None` when the
/// pod can be evicted.
pub fn eviction_blockers(pod: &LeanPod, pdbs: &[Arc<PodDisruptionBudget>]) -> Option<Vec<String>> {
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let covering: Vec<&PodDisruptionBudget> = pdbs
        .iter()
        .map(Arc::as_ref)
        .filter(|pdb| {
            pdb.metadata.namespace.as_deref() == pod.metadata.namespace.as_deref()
                && pdb
                    .spec
                    .as_ref()
                    .and_then(|s| s.selector.as_ref())
                    .is_some_and(|sel| selector_matches(sel, &labels))
        })
        .collect();
    let name = |pdb: &PodDisruptionBudget| {
        format!(
            "{}/{}",
            pdb.metadata.namespace.as_deref().unwrap_or_default(),
            pdb.metadata.name.as_deref().unwrap_or_default()
        )
    };
    match covering.as_slice() {
        [] => None,
        [pdb] => {
            let unhealthy_may_go = pdb
                .spec
                .as_ref()
                .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref())
                == Some("AlwaysAllow");
            let not_ready = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "False");
            let allowed = pdb.status.as_ref().map_or(0, |s| s.disruptions_allowed);
            (!(unhealthy_may_go && not_ready) && allowed <= 0).then(|| vec![name(pdb)])
        }
        several => Some(several.iter().map(|pdb| name(pdb)).collect()),
    }
}

/// Whether PodDisruptionBudgets keep `pod` from being evicted now ([`eviction_blockers`]).
pub fn blocked_by_budget(pod: &LeanPod, pdbs: &[Arc<PodDisruptionBudget>]) -> bool {
    eviction_blockers(pod, pdbs).is_some()
}

/// Whether a pod has finished (phase Succeeded or Failed).
pub fn is_terminal(pod: &LeanPod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Whether a pod is owned by a DaemonSet.
pub fn is_daemon_pod(pod: &LeanPod) -> bool {
    is_owned_by(pod, "DaemonSet")
}

/// Whether one of a pod's owner references is of this kind.
pub fn is_owned_by(pod: &LeanPod, kind: &str) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == kind)
}

/// Whether a pod is a static (mirror) pod, owned by its Node.
pub fn is_mirror_pod(pod: &LeanPod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "Node")
        || pod
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"))
}

/// Whether Karpenter should provision for this pod (upstream's rule): a pending pod (see
/// [`pod_state`]) that kube-scheduler marked `PodScheduled=False` with reason
/// `Unschedulable`. A snapshot also counts a pod kube-scheduler has not looked at yet; the
/// controller waits for kube-scheduler's verdict.
pub fn is_provisionable(pod: &LeanPod) -> bool {
    pod_state(pod) == PodState::Pending && scheduled_condition(pod).is_some()
}

/// The pod's `PodScheduled` condition.
fn scheduled_condition(pod: &LeanPod) -> Option<&crate::lean::LeanCondition> {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> LeanPod {
        serde_json::from_value(value).unwrap()
    }

    fn pdb(name: &str, allowed: i32, policy: Option<&str>) -> Arc<PodDisruptionBudget> {
        let mut spec = json!({"selector": {"matchLabels": {"app": "web"}}});
        if let Some(policy) = policy {
            spec["unhealthyPodEvictionPolicy"] = json!(policy);
        }
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default"},
                "spec": spec, "status": {"disruptionsAllowed": allowed, "currentHealthy": 1,
                "desiredHealthy": 1, "expectedPods": 1}}))
            .unwrap(),
        )
    }

    fn web(ready: &str) -> LeanPod {
        pod(
            json!({"metadata": {"name": "w", "namespace": "default", "labels": {"app": "web"}},
            "spec": {"containers": [], "nodeName": "n1"},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}}),
        )
    }

    #[test]
    fn a_pod_under_two_budgets_cannot_be_evicted_whatever_they_allow() {
        let two = [pdb("a", 5, None), pdb("b", 5, None)];
        assert_eq!(
            eviction_blockers(&web("True"), &two),
            Some(vec!["default/a".to_string(), "default/b".to_string()])
        );
        assert_eq!(eviction_blockers(&web("True"), &two[..1]), None);
        let other = pod(
            json!({"metadata": {"name": "o", "namespace": "default", "labels": {"app": "db"}},
            "spec": {"containers": []}}),
        );
        assert_eq!(eviction_blockers(&other, &two), None);
    }

    #[test]
    fn always_allow_lets_an_unready_pod_go_past_a_budget_that_allows_nothing() {
        let strict = [pdb("a", 0, None)];
        let always = [pdb("a", 0, Some("AlwaysAllow"))];
        let if_healthy = [pdb("a", 0, Some("IfHealthyBudget"))];
        assert!(blocked_by_budget(&web("False"), &strict));
        assert!(!blocked_by_budget(&web("False"), &always));
        assert!(blocked_by_budget(&web("True"), &always));
        assert!(blocked_by_budget(&web("False"), &if_healthy));
    }

    #[test]
    fn label_selectors_match_like_kubernetes() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
        let sel: LabelSelector = serde_json::from_value(json!({"matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["db"]}]}))
        .unwrap();
        let labels = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(selector_matches(&sel, &labels(&[("app", "web")])));
        assert!(!selector_matches(
            &sel,
            &labels(&[("app", "web"), ("tier", "db")])
        ));
        assert!(!selector_matches(&sel, &labels(&[("app", "api")])));
        assert!(selector_matches(&LabelSelector::default(), &labels(&[])));
    }

    #[test]
    fn only_unschedulable_unbound_pods_are_provisionable() {
        let pending = json!({"metadata": {"name": "a"}, "spec": {"containers": []},
            "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}});
        assert!(is_provisionable(&pod(pending.clone())));
        let mut bound = pending.clone();
        bound["spec"]["nodeName"] = json!("n1");
        assert!(!is_provisionable(&pod(bound)));
        let mut nominated = pending.clone();
        nominated["status"]["nominatedNodeName"] = json!("n1");
        assert!(!is_provisionable(&pod(nominated)));
        let mut daemon = pending.clone();
        daemon["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]);
        assert!(!is_provisionable(&pod(daemon)));
        let never_tried =
            json!({"metadata": {"name": "b"}, "spec": {"containers": []}, "status": {}});
        assert!(!is_provisionable(&pod(never_tried)));
        let other_reason = json!({"metadata": {"name": "c"}, "spec": {"containers": []},
            "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}});
        assert!(!is_provisionable(&pod(other_reason)));
    }
}
