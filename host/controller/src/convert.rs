//! Conversions between Kubernetes objects and the pure core's plain data. Errors name the
//! object and the field.

use std::collections::BTreeMap;

use joinery_api::Operator as ApiOperator;
use joinery_core::requirements::{Operator, Requirement, Requirements};
use joinery_core::resources::{InitContainer, PodLevelRequests, PodResourceSpec, Resources};
use joinery_core::scheduling::{DaemonPod, PendingPod, PodKey};
use joinery_core::taints::{Taint, TaintEffect, Toleration, TolerationOperator};
use joinery_runtime::types as wit;
use k8s_openapi::api::core::v1::{self as corev1, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// The WIT form of an API operator.
pub fn operator_to_wit(op: ApiOperator) -> wit::Operator {
    match op {
        ApiOperator::In => wit::Operator::In,
        ApiOperator::NotIn => wit::Operator::NotIn,
        ApiOperator::Exists => wit::Operator::Exists,
        ApiOperator::DoesNotExist => wit::Operator::DoesNotExist,
        ApiOperator::Gt => wit::Operator::Gt,
        ApiOperator::Lt => wit::Operator::Lt,
        ApiOperator::Gte => wit::Operator::Gte,
        ApiOperator::Lte => wit::Operator::Lte,
    }
}

/// The core form of an API operator.
pub fn operator_to_core(op: ApiOperator) -> Operator {
    match op {
        ApiOperator::In => Operator::In,
        ApiOperator::NotIn => Operator::NotIn,
        ApiOperator::Exists => Operator::Exists,
        ApiOperator::DoesNotExist => Operator::DoesNotExist,
        ApiOperator::Gt => Operator::Gt,
        ApiOperator::Lt => Operator::Lt,
        ApiOperator::Gte => Operator::Gte,
        ApiOperator::Lte => Operator::Lte,
    }
}

/// The API form of a core operator.
pub fn operator_to_api(op: Operator) -> ApiOperator {
    match op {
        Operator::In => ApiOperator::In,
        Operator::NotIn => ApiOperator::NotIn,
        Operator::Exists => ApiOperator::Exists,
        Operator::DoesNotExist => ApiOperator::DoesNotExist,
        Operator::Gt => ApiOperator::Gt,
        Operator::Lt => ApiOperator::Lt,
        Operator::Gte => ApiOperator::Gte,
        Operator::Lte => ApiOperator::Lte,
    }
}

/// Parses a taint effect.
pub fn taint_effect(effect: &str) -> Option<TaintEffect> {
    match effect {
        "NoSchedule" => Some(TaintEffect::NoSchedule),
        "PreferNoSchedule" => Some(TaintEffect::PreferNoSchedule),
        "NoExecute" => Some(TaintEffect::NoExecute),
        _ => None,
    }
}

/// A Kubernetes taint in core form (`None` for an unknown effect).
pub fn taint(t: &corev1::Taint) -> Option<Taint> {
    Some(Taint::new(t.key.clone(), t.value.clone().unwrap_or_default(), taint_effect(&t.effect)?))
}

/// A core taint in Kubernetes form.
pub fn taint_to_k8s(t: &Taint) -> corev1::Taint {
    corev1::Taint {
        key: t.key.clone(),
        value: (!t.value.is_empty()).then(|| t.value.clone()),
        effect: t.effect.as_str().to_string(),
        time_added: None,
    }
}

/// Kubernetes taints in core form (unknown effects are dropped).
pub fn taints(items: Option<&Vec<corev1::Taint>>) -> Vec<Taint> {
    items.into_iter().flatten().filter_map(taint).collect()
}

/// A Kubernetes toleration in core form.
pub fn toleration(t: &corev1::Toleration) -> Toleration {
    Toleration {
        key: t.key.clone().unwrap_or_default(),
        operator: if t.operator.as_deref() == Some("Exists") { TolerationOperator::Exists } else { TolerationOperator::Equal },
        value: t.value.clone().unwrap_or_default(),
        effect: t.effect.as_deref().and_then(taint_effect),
        toleration_seconds: t.toleration_seconds,
    }
}

fn resources_of(what: &str, requests: Option<&BTreeMap<String, Quantity>>) -> Result<Resources, String> {
    Resources::from_quantities(requests.into_iter().flatten().map(|(k, v)| (k.as_str(), v.0.as_str())))
        .map_err(|e| format!("{what}: {e}"))
}

/// What a pod spec asks of a node (init containers, sidecars, overhead, pod-level requests,
/// one pod slot). Errors name the container.
pub fn pod_requests(spec: &PodSpec) -> Result<Resources, String> {
    let mut containers = Vec::new();
    for c in &spec.containers {
        containers.push(resources_of(&format!("spec.containers[{}].resources.requests", c.name), c.resources.as_ref().and_then(|r| r.requests.as_ref()))?);
    }
    let mut init_containers = Vec::new();
    for c in spec.init_containers.iter().flatten() {
        init_containers.push(InitContainer {
            requests: resources_of(&format!("spec.initContainers[{}].resources.requests", c.name), c.resources.as_ref().and_then(|r| r.requests.as_ref()))?,
            restartable: c.restart_policy.as_deref() == Some("Always"),
        });
    }
    let overhead = resources_of("spec.overhead", spec.overhead.as_ref())?;
    let pod_level = spec.resources.as_ref().and_then(|r| r.requests.as_ref());
    let pod_level = PodLevelRequests {
        cpu_millis: pod_level.and_then(|r| r.get("cpu")).map(|q| joinery_core::resources::parse_milli(&q.0)).transpose().map_err(|e| format!("spec.resources.requests.cpu: {e}"))?,
        memory_bytes: pod_level.and_then(|r| r.get("memory")).map(|q| joinery_core::resources::parse_value(&q.0)).transpose().map_err(|e| format!("spec.resources.requests.memory: {e}"))?,
    };
    Ok(PodResourceSpec { containers, init_containers, overhead, pod_level }.requests())
}

/// Required node-affinity terms of a pod spec as OR-ed requirement sets. `matchFields` is
/// refused, as upstream does.
pub fn required_affinity(spec: &PodSpec) -> Result<Vec<Requirements>, String> {
    let Some(terms) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required_during_scheduling_ignored_during_execution.as_ref())
    else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (i, term) in terms.node_selector_terms.iter().enumerate() {
        if term.match_fields.as_ref().is_some_and(|f| !f.is_empty()) {
            return Err(format!(
                "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}].matchFields is not supported"
            ));
        }
        let mut reqs = Requirements::new();
        for (j, e) in term.match_expressions.iter().flatten().enumerate() {
            let op = match e.operator.as_str() {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                "Gt" => Operator::Gt,
                "Lt" => Operator::Lt,
                other => {
                    return Err(format!("spec.affinity.nodeAffinity…nodeSelectorTerms[{i}].matchExpressions[{j}].operator {other:?} is not a node selector operator"));
                }
            };
            let r = Requirement::new(e.key.clone(), op, e.values.clone().unwrap_or_default())
                .map_err(|err| format!("spec.affinity.nodeAffinity…nodeSelectorTerms[{i}].matchExpressions[{j}]: {err}"))?;
            reqs.add(r);
        }
        out.push(reqs);
    }
    Ok(out)
}

/// A pending pod in core form; the error names the pod and field.
pub fn pending_pod(pod: &Pod) -> Result<PendingPod, String> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let ctx = |e: String| format!("Pod {namespace}/{name}: {e}");
    let spec = pod.spec.clone().unwrap_or_default();
    Ok(PendingPod {
        key: PodKey::new(namespace.clone(), name.clone()),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        created: pod.metadata.creation_timestamp.as_ref().map(|t| t.0.as_second()).unwrap_or_default(),
        priority: spec.priority.unwrap_or_default(),
        requests: pod_requests(&spec).map_err(ctx)?,
        node_selector: spec.node_selector.clone().unwrap_or_default(),
        required_affinity: required_affinity(&spec).map_err(ctx)?,
        tolerations: spec.tolerations.iter().flatten().map(toleration).collect(),
    })
}

/// The representative daemon pod of a DaemonSet.
pub fn daemon_pod(ds: &k8s_openapi::api::apps::v1::DaemonSet) -> Result<DaemonPod, String> {
    let name = format!("{}/{}", ds.metadata.namespace.clone().unwrap_or_default(), ds.metadata.name.clone().unwrap_or_default());
    let spec = ds.spec.as_ref().and_then(|s| s.template.spec.clone()).unwrap_or_default();
    let ctx = |e: String| format!("DaemonSet {name}: spec.template.{e}");
    Ok(DaemonPod {
        requests: pod_requests(&spec).map_err(ctx)?,
        node_selector: spec.node_selector.clone().unwrap_or_default(),
        required_affinity: required_affinity(&spec).map_err(ctx)?,
        tolerations: spec.tolerations.iter().flatten().map(toleration).collect(),
        name,
    })
}

/// Resources from a Kubernetes resource list; the error names `what`.
pub fn resource_list(what: &str, list: Option<&BTreeMap<String, Quantity>>) -> Result<Resources, String> {
    resources_of(what, list)
}

/// A core resource vector as a Kubernetes resource list.
pub fn to_resource_list(resources: &Resources) -> BTreeMap<String, Quantity> {
    resources.to_quantities().into_iter().map(|(k, v)| (k, Quantity(v))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pod_requests_include_init_overhead_and_slot() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "containers": [{"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}],
                "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}],
                "overhead": {"cpu": "100m"}
            }
        }))
        .unwrap();
        let p = pending_pod(&pod).unwrap();
        assert_eq!(p.requests.cpu_millis, 2100);
        assert_eq!(p.requests.memory_bytes, 1 << 30);
        assert_eq!(p.requests.get("pods"), 1);
    }

    #[test]
    fn match_fields_is_refused_with_the_field_named() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}]}}}}
        }))
        .unwrap();
        let e = pending_pod(&pod).unwrap_err();
        assert!(e.contains("Pod ns/p") && e.contains("matchFields"), "{e}");
    }

    #[test]
    fn bad_quantity_names_the_container() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [{"name": "web", "resources": {"requests": {"cpu": "lots"}}}]}
        }))
        .unwrap();
        let e = pending_pod(&pod).unwrap_err();
        assert!(e.contains("spec.containers[web]"), "{e}");
    }

    #[test]
    fn tolerations_and_taints_convert() {
        let t = toleration(&corev1::Toleration { key: Some("k".into()), operator: Some("Exists".into()), ..Default::default() });
        assert_eq!(t.operator, TolerationOperator::Exists);
        let taint = taint(&corev1::Taint { key: "k".into(), value: None, effect: "NoSchedule".into(), time_added: None }).unwrap();
        assert!(t.tolerates(&taint));
        assert_eq!(taint_to_k8s(&taint).effect, "NoSchedule");
    }
}
