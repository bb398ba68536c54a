//! Defaulting the real API server applies to built-in kinds on create, which the rest of the
//! emulator (and its clients) then see as stored: a container's (and a pod's) resource
//! request defaults to its limit where only the limit is given, a new pod without a phase is
//! `Pending`, and Jobs and CronJobs get their defaults (a Job also its generated selector).

use serde_json::{Value, json};

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

/// The label the API server ties a Job's pods to it with (its generated selector).
pub const JOB_CONTROLLER_UID_LABEL: &str = "batch.kubernetes.io/controller-uid";
/// The label naming a Job on its pods.
pub const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";

/// Defaults a new Job as the real API server does (`SetDefaults_Job` and the Job strategy's
/// generated selector): `parallelism` 1 (and `completions` 1 when neither is given),
/// `backoffLimit` 6, `completionMode` `NonIndexed`, `suspend` false, `podReplacementPolicy`
/// `TerminatingOrFailed`; unless `manualSelector`, the selector
/// `batch.kubernetes.io/controller-uid=<uid>` and the labels `batch.kubernetes.io/controller-uid`,
/// `batch.kubernetes.io/job-name`, `controller-uid` and `job-name` on the pod template; a Job
/// without labels gets its template's. Call it once the Job has its name and uid.
pub fn default_job(job: &mut Value) {
    let name = job
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let uid = job
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let Some(spec) = job.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if spec.get("completions").is_none_or(Value::is_null)
        && spec.get("parallelism").is_none_or(Value::is_null)
    {
        spec.insert("completions".into(), json!(1));
    }
    for (field, default) in [
        ("parallelism", json!(1)),
        ("backoffLimit", json!(6)),
        ("completionMode", json!("NonIndexed")),
        ("suspend", json!(false)),
        ("podReplacementPolicy", json!("TerminatingOrFailed")),
    ] {
        if spec.get(field).is_none_or(unset) {
            spec.insert(field.into(), default);
        }
    }
    if spec.get("manualSelector").and_then(Value::as_bool) != Some(true) {
        spec.insert(
            "selector".into(),
            json!({"matchLabels": {JOB_CONTROLLER_UID_LABEL: uid}}),
        );
        let template = spec
            .entry("template")
            .or_insert_with(|| json!({}))
            .as_object_mut();
        if let Some(template) = template {
            let metadata = template.entry("metadata").or_insert_with(|| json!({}));
            if !metadata.get("labels").is_some_and(Value::is_object) {
                metadata["labels"] = json!({});
            }
            let labels = &mut metadata["labels"];
            for (label, value) in [
                (JOB_CONTROLLER_UID_LABEL, &uid),
                (JOB_NAME_LABEL, &name),
                ("controller-uid", &uid),
                ("job-name", &name),
            ] {
                labels[label] = json!(value);
            }
        }
    }
    let template_labels = job.pointer("/spec/template/metadata/labels").cloned();
    if let (Some(labels), Some(metadata)) = (
        template_labels,
        job.get_mut("metadata").and_then(Value::as_object_mut),
    ) && metadata
        .get("labels")
        .and_then(Value::as_object)
        .is_none_or(|l| l.is_empty())
    {
        metadata.insert("labels".into(), labels);
    }
}

/// Defaults a new CronJob as the real API server does: `concurrencyPolicy` `Allow`, `suspend`
/// false, `successfulJobsHistoryLimit` 3, `failedJobsHistoryLimit` 1.
pub fn default_cronjob(cronjob: &mut Value) {
    let Some(spec) = cronjob.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    for (field, default) in [
        ("concurrencyPolicy", json!("Allow")),
        ("suspend", json!(false)),
        ("successfulJobsHistoryLimit", json!(3)),
        ("failedJobsHistoryLimit", json!(1)),
    ] {
        if spec.get(field).is_none_or(unset) {
            spec.insert(field.into(), default);
        }
    }
}

/// Whether a field counts as unset for defaulting: null, or an empty string (Go's zero value).
fn unset(value: &Value) -> bool {
    value.is_null() || value.as_str() == Some("")
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
    fn a_job_gets_its_defaults_and_generated_selector() {
        let mut job = json!({
            "metadata": {"name": "pi", "uid": "u-1"},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": []}}},
        });
        default_job(&mut job);
        let spec = &job["spec"];
        assert_eq!(
            (
                &spec["completions"],
                &spec["parallelism"],
                &spec["backoffLimit"]
            ),
            (&json!(1), &json!(1), &json!(6))
        );
        assert_eq!(
            spec["selector"],
            json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}})
        );
        assert_eq!(spec["template"]["metadata"]["labels"]["job-name"], "pi");
        assert_eq!(
            job["metadata"]["labels"]["batch.kubernetes.io/job-name"],
            "pi"
        );
        // Parallelism alone leaves completions unset (a work queue).
        let mut queue =
            json!({"metadata": {"name": "q", "uid": "u-2"}, "spec": {"parallelism": 3}});
        default_job(&mut queue);
        assert!(queue["spec"].get("completions").is_none());
    }

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
