//! Defaulting the real API server applies to built-in kinds on create, which the rest of the
//! emulator (and its clients) then see as stored: a container's (and a pod's) resource
//! request defaults to its limit where only the limit is given, and a new pod without a phase
//! is `Pending`.

use serde_json::Value;

/// Defaults a Pod's requests from its limits: for every container, init container and the
/// pod-level `spec.resources`, each resource with a limit and no request gets the limit as its
/// request (Kubernetes' `SetDefaults_ResourceRequirements`).
pub fn default_pod(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec") else {
        return;
    };
    for list in ["containers", "initContainers"] {
        if let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for container in containers {
                if let Some(resources) = container.get_mut("resources") {
                    requests_from_limits(resources);
                }
            }
        }
    }
    if let Some(resources) = spec.get_mut("resources") {
        requests_from_limits(resources);
    }
}

/// Gives a new pod without `status.phase` the phase `Pending`, as the real API server does when
/// it creates a pod (a pod created with a phase keeps it).
pub fn pending_phase(pod: &mut Value) {
    let Some(object) = pod.as_object_mut() else {
        return;
    };
    let status = object
        .entry("status")
        .or_insert_with(|| Value::Object(Default::default()));
    if !status.is_object() {
        *status = Value::Object(Default::default());
    }
    if let Some(status) = status.as_object_mut()
        && status.get("phase").is_none_or(Value::is_null)
    {
        status.insert("phase".into(), Value::String("Pending".into()));
    }
}

fn requests_from_limits(resources: &mut Value) {
    let Some(limits) = resources.get("limits").and_then(Value::as_object).cloned() else {
        return;
    };
    if limits.is_empty() || !resources.is_object() {
        return;
    }
    let requests = resources
        .as_object_mut()
        .expect("checked above")
        .entry("requests")
        .or_insert_with(|| Value::Object(Default::default()));
    let Some(requests) = requests.as_object_mut() else {
        return;
    };
    for (name, quantity) in limits {
        requests.entry(name).or_insert(quantity);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_new_pod_without_a_phase_is_pending() {
        let mut pod = json!({"spec": {"containers": []}});
        pending_phase(&mut pod);
        assert_eq!(pod["status"]["phase"], "Pending");
        let mut running = json!({"status": {"phase": "Running", "podIP": "10.0.0.1"}});
        pending_phase(&mut running);
        assert_eq!(running["status"]["phase"], "Running", "a given phase stays");
    }

    #[test]
    fn a_limit_without_a_request_becomes_the_request() {
        let mut pod = json!({"spec": {
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "1Gi"}}},
                {"name": "b", "resources": {"limits": {"cpu": "250m"}}},
                {"name": "c"}
            ],
            "initContainers": [{"name": "i", "resources": {"limits": {"memory": "64Mi"}}}],
            "resources": {"limits": {"cpu": "2"}}
        }});
        default_pod(&mut pod);
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["requests"],
            json!({"cpu": "500m", "memory": "1Gi"}),
            "a given request stays"
        );
        assert_eq!(
            pod["spec"]["containers"][1]["resources"]["requests"],
            json!({"cpu": "250m"})
        );
        assert!(
            pod["spec"]["containers"][2].get("resources").is_none(),
            "nothing to default"
        );
        assert_eq!(
            pod["spec"]["initContainers"][0]["resources"]["requests"],
            json!({"memory": "64Mi"})
        );
        assert_eq!(pod["spec"]["resources"]["requests"], json!({"cpu": "2"}));
    }
}
