//! Which Machines a MachineSet deletes when it has more than its replicas, by Cluster API's
//! deletion priorities.

use std::time::{Duration, SystemTime};

use kube::api::DynamicObject;
use serde_json::Value;

use super::DELETE_MACHINE_ANNOTATION;

/// A MachineSet's deletion order (`spec.deletePolicy` in v1beta1, `spec.deletion.order` in
/// v1beta2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DeletePolicy {
    /// Every healthy Machine ranks the same (20): ties go by name, and names end in a random
    /// suffix. Cluster API's default.
    #[default]
    Random,
    /// Older Machines first.
    Oldest,
    /// Newer Machines first.
    Newest,
}

impl DeletePolicy {
    /// The policy of that name (`Random`, `Oldest`, `Newest`).
    pub fn parse(text: &str) -> Option<DeletePolicy> {
        match text {
            "Random" => Some(DeletePolicy::Random),
            "Oldest" => Some(DeletePolicy::Oldest),
            "Newest" => Some(DeletePolicy::Newest),
            _ => None,
        }
    }

    /// The policy's name.
    pub fn as_str(self) -> &'static str {
        match self {
            DeletePolicy::Random => "Random",
            DeletePolicy::Oldest => "Oldest",
            DeletePolicy::Newest => "Newest",
        }
    }
}

/// Priority of a Machine being deleted already.
pub const MUST_DELETE: f64 = 100.0;
/// Priority of a Machine carrying [`DELETE_MACHINE_ANNOTATION`].
pub const SHOULD_DELETE: f64 = 75.0;
/// Priority of an unhealthy Machine (and the ceiling of the age-based ones).
pub const BETTER_DELETE: f64 = 50.0;
/// Priority of a healthy Machine under [`DeletePolicy::Random`].
pub const COULD_DELETE: f64 = 20.0;
/// Priority of a Machine without a usable creation time under `Oldest` or `Newest`.
pub const MUST_NOT_DELETE: f64 = 0.0;
/// The age scale of the `Oldest` and `Newest` priorities.
const TEN_DAYS: Duration = Duration::from_secs(864_000);

fn condition_false(machine: &DynamicObject, kind: &str) -> bool {
    machine
        .data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "False")
}

/// Whether Cluster API counts a Machine healthy: it has a `status.nodeRef`, no
/// `status.failureReason` nor `status.failureMessage`, and neither its `NodeHealthy` nor its
/// `MachineHealthCheckSucceeded` condition is `False`.
pub fn is_healthy(machine: &DynamicObject) -> bool {
    let status = machine.data.get("status");
    let set = |field: &str| {
        status
            .and_then(|s| s.get(field))
            .is_some_and(|v| !v.is_null())
    };
    set("nodeRef")
        && !set("failureReason")
        && !set("failureMessage")
        && !condition_false(machine, "NodeHealthy")
        && !condition_false(machine, "MachineHealthCheckSucceeded")
}

/// A Machine's deletion priority (higher goes first): 100 when it is being deleted, 75 with
/// the delete-machine annotation, 50 when unhealthy; otherwise 20 under `Random`,
/// 50·(1 − e^(−age/10 days)) under `Oldest` and 50 minus that under `Newest` (0 without a
/// creation time, or one in the future).
pub fn deletion_priority(machine: &DynamicObject, policy: DeletePolicy, now: SystemTime) -> f64 {
    if machine.metadata.deletion_timestamp.is_some() {
        return MUST_DELETE;
    }
    if machine
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(DELETE_MACHINE_ANNOTATION))
    {
        return SHOULD_DELETE;
    }
    if !is_healthy(machine) {
        return BETTER_DELETE;
    }
    let oldest = || {
        let Some(created) = machine.metadata.creation_timestamp.as_ref() else {
            return MUST_NOT_DELETE;
        };
        let Ok(age) = now.duration_since(SystemTime::from(created.0)) else {
            return MUST_NOT_DELETE;
        };
        BETTER_DELETE * (1.0 - (-age.as_secs_f64() / TEN_DAYS.as_secs_f64()).exp())
    };
    match policy {
        DeletePolicy::Random => COULD_DELETE,
        DeletePolicy::Oldest => oldest(),
        DeletePolicy::Newest => {
            if machine.metadata.creation_timestamp.is_none() {
                MUST_NOT_DELETE
            } else {
                BETTER_DELETE - oldest()
            }
        }
    }
}

/// The `count` Machines to delete: highest priority first, ties by name (all of them if
/// `count` covers them).
pub fn machines_to_delete(
    machines: &[DynamicObject],
    count: usize,
    policy: DeletePolicy,
    now: SystemTime,
) -> Vec<&DynamicObject> {
    let mut ranked: Vec<(f64, &DynamicObject)> = machines
        .iter()
        .map(|m| (deletion_priority(m, policy, now), m))
        .collect();
    ranked.sort_by(|(pa, a), (pb, b)| {
        pb.total_cmp(pa)
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    ranked.into_iter().take(count).map(|(_, m)| m).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn machine(name: &str, age_days: u64, extra: Value) -> DynamicObject {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(100 * 86_400);
        let created = now - Duration::from_secs(age_days * 86_400);
        let created = k8s_openapi::jiff::Timestamp::try_from(created)
            .unwrap()
            .to_string();
        let mut object = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": name, "namespace": "default", "creationTimestamp": created},
            "status": {"nodeRef": {"kind": "Node", "name": name}},
        });
        json_patch::merge(&mut object, &extra);
        serde_json::from_value(object).unwrap()
    }

    fn names(picked: Vec<&DynamicObject>) -> Vec<String> {
        picked
            .into_iter()
            .map(|m| m.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn deleting_then_annotated_then_unhealthy_then_policy_ties_by_name() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(100 * 86_400);
        let machines = vec![
            machine("a-healthy", 5, json!({})),
            machine("b-no-node", 1, json!({"status": {"nodeRef": null}})),
            machine(
                "c-annotated",
                1,
                json!({"metadata": {"annotations": {DELETE_MACHINE_ANNOTATION: "2026-01-01T00:00:00Z"}}}),
            ),
            machine(
                "d-deleting",
                1,
                json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
            ),
            machine(
                "e-failed",
                1,
                json!({"status": {"failureReason": "CreateError"}}),
            ),
            machine(
                "f-node-unhealthy",
                1,
                json!({"status": {"conditions": [{"type": "NodeHealthy", "status": "False"}]}}),
            ),
            machine("g-healthy", 9, json!({})),
        ];
        assert_eq!(
            names(machines_to_delete(&machines, 7, DeletePolicy::Random, now)),
            [
                "d-deleting",
                "c-annotated",
                "b-no-node",
                "e-failed",
                "f-node-unhealthy",
                "a-healthy",
                "g-healthy"
            ]
        );
        assert_eq!(
            names(machines_to_delete(&machines, 1, DeletePolicy::Random, now)),
            ["d-deleting"]
        );
        let healthy = [machines[0].clone(), machines[6].clone()];
        assert_eq!(
            names(machines_to_delete(&healthy, 1, DeletePolicy::Oldest, now)),
            ["g-healthy"]
        );
        assert_eq!(
            names(machines_to_delete(&healthy, 1, DeletePolicy::Newest, now)),
            ["a-healthy"]
        );
        assert_eq!(
            names(machines_to_delete(&healthy, 1, DeletePolicy::Random, now)),
            ["a-healthy"],
            "ties by name"
        );
        let p = deletion_priority(&machines[6], DeletePolicy::Oldest, now);
        assert!((p - 50.0 * (1.0 - (-0.9f64).exp())).abs() < 1e-9, "{p}");
        assert!(machines_to_delete(&machines, 0, DeletePolicy::Random, now).is_empty());
    }
}
