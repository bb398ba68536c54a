//! CapacityBuffers as the core sees them: each buffer's chunk shape (from its PodTemplate or
//! its workload's pod template), its chunk count, and its virtual pods
//! ([`joinery_core::buffers`]). The controller, the simulator and the CLI all resolve buffers
//! here, from plain objects.

use std::collections::BTreeMap;

use joinery_api::capacitybuffer::{ACTIVE_CAPACITY_STRATEGY, SCALABLE_KINDS};
use joinery_api::{CapacityBuffer, HasConditions};
use joinery_core::buffers::{self, BufferSize};
use joinery_core::resources::Unit;
use joinery_core::scheduling::PendingPod;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, PodTemplate, PodTemplateSpec};

use crate::lean::LeanPod;

/// The objects buffers refer to.
#[derive(Debug, Clone, Copy, Default)]
pub struct BufferSources<'a> {
    /// PodTemplates (`podTemplateRef`).
    pub pod_templates: &'a [&'a PodTemplate],
    /// Deployments (`scalableRef`).
    pub deployments: &'a [&'a Deployment],
    /// StatefulSets (`scalableRef`).
    pub stateful_sets: &'a [&'a StatefulSet],
    /// ReplicaSets (`scalableRef`).
    pub replica_sets: &'a [&'a ReplicaSet],
}

/// A buffer whose chunk shape and count are known (`ReadyForProvisioning=True`).
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// One chunk, in the scheduler's form.
    pub shape: PendingPod,
    /// How many chunks the buffer keeps (`status.replicas`).
    pub chunks: i32,
    /// The PodTemplate's name and generation, for a `podTemplateRef` buffer.
    pub pod_template: Option<(String, Option<i64>)>,
    /// The workload's replicas, for a `scalableRef` buffer.
    pub workload_replicas: Option<i32>,
}

/// What resolving a buffer gave.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolution {
    /// Ready for provisioning.
    Ready(Box<Resolved>),
    /// Not ready: the `ReadyForProvisioning` reason and a message naming the field or object.
    NotReady {
        /// Upstream's reason (`PodTemplateNotFound`, `ScalableRefNotFound`, `ResolutionFailed`).
        reason: &'static str,
        /// What is wrong and what to do.
        message: String,
    },
}

impl Resolution {
    /// The resolved buffer, when ready.
    pub fn ready(&self) -> Option<&Resolved> {
        match self {
            Resolution::Ready(r) => Some(r),
            Resolution::NotReady { .. } => None,
        }
    }
}

/// A buffer with its resolution.
#[derive(Debug, Clone)]
pub struct BufferState<'a> {
    /// The object.
    pub buffer: &'a CapacityBuffer,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its shape and count, or why not.
    pub resolution: Resolution,
}

impl BufferState<'_> {
    /// `namespace/name`, the key virtual pods carry ([`PendingPod::capacity_buffer`]).
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The buffer's virtual pods (none unless ready).
    pub fn virtual_pods(&self) -> Vec<PendingPod> {
        match &self.resolution {
            Resolution::Ready(r) if r.chunks > 0 => buffers::virtual_pods(
                &self.namespace,
                &self.name,
                usize::try_from(r.chunks).unwrap_or(0),
                &r.shape,
            ),
            _ => Vec::new(),
        }
    }
}

/// Resolves every buffer not being deleted, sorted by namespace and name.
pub fn resolve_all<'a>(
    buffers: &[&'a CapacityBuffer],
    sources: &BufferSources<'_>,
) -> Vec<BufferState<'a>> {
    let mut out: Vec<BufferState<'a>> = buffers
        .iter()
        .filter(|b| b.metadata.deletion_timestamp.is_none())
        .map(|b| BufferState {
            buffer: b,
            namespace: b.metadata.namespace.clone().unwrap_or_default(),
            name: b.metadata.name.clone().unwrap_or_default(),
            resolution: resolve(b, sources),
        })
        .collect();
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    out
}

/// Every ready buffer's virtual pods, in buffer order.
pub fn virtual_pods(states: &[BufferState<'_>]) -> Vec<PendingPod> {
    states.iter().flat_map(BufferState::virtual_pods).collect()
}

fn failed(message: String) -> Resolution {
    Resolution::NotReady {
        reason: buffers::REASON_RESOLUTION_FAILED,
        message,
    }
}

/// Resolves one buffer: checks what the CRD's validation would have refused (in case the
/// object got past it), finds its pod template, and counts its chunks.
pub fn resolve(buffer: &CapacityBuffer, sources: &BufferSources<'_>) -> Resolution {
    let spec = &buffer.spec;
    let namespace = buffer.metadata.namespace.as_deref().unwrap_or_default();
    if spec.effective_strategy() != ACTIVE_CAPACITY_STRATEGY {
        return failed(format!(
            "spec.provisioningStrategy {:?} is not supported; use {ACTIVE_CAPACITY_STRATEGY:?}",
            spec.effective_strategy()
        ));
    }
    if let Some(r) = spec.replicas.filter(|r| *r < 0) {
        return failed(format!("spec.replicas is {r}; it must be 0 or more"));
    }
    if let Some(p) = spec.percentage.filter(|p| *p < 0) {
        return failed(format!("spec.percentage is {p}; it must be 0 or more"));
    }
    let limits = match convert_limits(spec.limits.as_ref()) {
        Ok(limits) => limits,
        Err(message) => return failed(message),
    };
    let (template, pod_template, workload_replicas) =
        match (&spec.pod_template_ref, &spec.scalable_ref) {
            (Some(_), Some(_)) => {
                return failed(
                    "spec.podTemplateRef and spec.scalableRef are both set; keep exactly one"
                        .into(),
                );
            }
            (None, None) => {
                return failed("set spec.podTemplateRef or spec.scalableRef".into());
            }
            (Some(r), None) => {
                let Some(t) = sources.pod_templates.iter().find(|t| {
                    t.metadata.namespace.as_deref() == Some(namespace)
                        && t.metadata.name.as_deref() == Some(r.name.as_str())
                }) else {
                    return Resolution::NotReady {
                        reason: buffers::REASON_POD_TEMPLATE_NOT_FOUND,
                        message: format!(
                            "PodTemplate {namespace}/{} (spec.podTemplateRef) not found",
                            r.name
                        ),
                    };
                };
                let Some(template) = t.template.clone() else {
                    return failed(format!(
                        "PodTemplate {namespace}/{} has no template",
                        r.name
                    ));
                };
                (
                    template,
                    Some((r.name.clone(), t.metadata.generation)),
                    None,
                )
            }
            (None, Some(r)) => {
                if !SCALABLE_KINDS.contains(&r.kind.as_str()) {
                    return failed(format!(
                        "spec.scalableRef.kind {:?} is not supported; use one of {}",
                        r.kind,
                        SCALABLE_KINDS.join(", ")
                    ));
                }
                let found = workload(sources, namespace, &r.kind, &r.name);
                let Some((template, replicas)) = found else {
                    return Resolution::NotReady {
                        reason: buffers::REASON_SCALABLE_REF_NOT_FOUND,
                        message: format!(
                            "{} {namespace}/{} (spec.scalableRef) not found",
                            r.kind, r.name
                        ),
                    };
                };
                (template, None, Some(replicas))
            }
        };
    let pod = Pod {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            namespace: Some(namespace.to_string()),
            name: Some("capacity-buffer-shape".into()),
            labels: template.metadata.as_ref().and_then(|m| m.labels.clone()),
            ..Default::default()
        },
        spec: template.spec.clone(),
        status: None,
    };
    let shape = match crate::convert::pending_pod(&LeanPod::from(&pod)) {
        Ok(shape) => shape,
        Err(e) => return failed(format!("the buffer's pod template does not convert: {e}")),
    };
    let size = BufferSize {
        replicas: spec.replicas,
        percentage: spec.percentage,
        limits,
    };
    let chunks = buffers::desired_chunks(&size, workload_replicas, &shape.requests);
    Resolution::Ready(Box::new(Resolved {
        shape,
        chunks,
        pod_template,
        workload_replicas,
    }))
}

/// `spec.limits` in each resource's unit; the error names the entry.
fn convert_limits(
    limits: Option<&joinery_api::ResourceList>,
) -> Result<Option<BTreeMap<String, u64>>, String> {
    let Some(limits) = limits else {
        return Ok(None);
    };
    limits
        .iter()
        .map(|(name, q)| {
            Unit::of(name)
                .parse(&q.0)
                .map(|v| (name.clone(), v))
                .map_err(|e| format!("spec.limits.{name} {:?}: {e}", q.0))
        })
        .collect::<Result<_, _>>()
        .map(Some)
}

/// The pod template and replicas (`spec.replicas`, 1 when unset) of a workload.
fn workload(
    sources: &BufferSources<'_>,
    namespace: &str,
    kind: &str,
    name: &str,
) -> Option<(PodTemplateSpec, i32)> {
    let here = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        m.namespace.as_deref() == Some(namespace) && m.name.as_deref() == Some(name)
    };
    match kind {
        "Deployment" => sources
            .deployments
            .iter()
            .find(|d| here(&d.metadata))
            .and_then(|d| d.spec.as_ref())
            .map(|s| (s.template.clone(), s.replicas.unwrap_or(1))),
        "StatefulSet" => sources
            .stateful_sets
            .iter()
            .find(|d| here(&d.metadata))
            .and_then(|d| d.spec.as_ref())
            .map(|s| (s.template.clone(), s.replicas.unwrap_or(1))),
        "ReplicaSet" => sources
            .replica_sets
            .iter()
            .find(|d| here(&d.metadata))
            .and_then(|d| d.spec.as_ref())
            .and_then(|s| Some((s.template.clone()?, s.replicas.unwrap_or(1)))),
        _ => None,
    }
}

/// Where each buffer's chunks sit on the cluster's nodes (and NodeClaims in flight), and what
/// that costs ([`joinery_core::buffers::holdings`]): `pending` real pods are placed first, as
/// the provisioner would; no new node is opened. `price` gives a node's price per hour.
pub fn holdings(
    cluster: &crate::assemble::ClusterObjects<'_>,
    pending: &[&LeanPod],
    states: &[BufferState<'_>],
    price: &dyn Fn(&str) -> Option<f64>,
    source: crate::assemble::Source,
) -> BTreeMap<String, buffers::Holding> {
    let mut assembly = crate::assemble::assemble(
        cluster,
        pending,
        &[],
        &[],
        joinery_core::labels::LabelPolicy::default(),
        source,
    );
    assembly.input.pods.extend(virtual_pods(states));
    buffers::holdings(&assembly.input, &assembly.context, price)
}

/// Whether the buffer's `ReadyForProvisioning` condition is True.
pub fn is_ready(buffer: &CapacityBuffer) -> bool {
    buffer.status.as_ref().is_some_and(|s| {
        s.is_condition_true(joinery_api::capacitybuffer::CONDITION_READY_FOR_PROVISIONING)
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn of<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    fn template() -> PodTemplate {
        of(
            json!({"metadata": {"name": "chunk", "namespace": "shop", "generation": 3},
            "template": {"metadata": {"labels": {"app": "spare"}},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}]}}}),
        )
    }

    fn deployment(replicas: i32) -> Deployment {
        of(json!({"metadata": {"name": "web", "namespace": "shop"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "500m"}}}]}}}}))
    }

    fn buffer(spec: serde_json::Value) -> CapacityBuffer {
        of(
            json!({"apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
            "metadata": {"name": "spare", "namespace": "shop"}, "spec": spec}),
        )
    }

    #[test]
    fn a_pod_template_buffer_takes_its_shape_and_generation() {
        let t = template();
        let templates = [&t];
        let sources = BufferSources {
            pod_templates: &templates,
            ..Default::default()
        };
        let b = buffer(json!({"podTemplateRef": {"name": "chunk"}, "replicas": 3,
            "limits": {"cpu": "5"}}));
        let r = resolve(&b, &sources);
        let ready = r.ready().expect("ready");
        // 3 wanted, 5 cpu allow 2 chunks of 2 cpu.
        assert_eq!(ready.chunks, 2);
        assert_eq!(ready.pod_template, Some(("chunk".into(), Some(3))));
        assert_eq!(ready.shape.requests.cpu_millis, 2000);
        let state = resolve_all(&[&b], &sources);
        let pods = virtual_pods(&state);
        assert_eq!(pods.len(), 2);
        assert_eq!(pods[0].labels.get("app").map(String::as_str), Some("spare"));
        assert_eq!(pods[0].capacity_buffer.as_deref(), Some("shop/spare"));
    }

    #[test]
    fn a_deployment_buffer_takes_a_percentage_of_its_replicas() {
        let d = deployment(10);
        let deployments = [&d];
        let sources = BufferSources {
            deployments: &deployments,
            ..Default::default()
        };
        let b = buffer(
            json!({"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "web"},
            "percentage": 25}),
        );
        let resolution = resolve(&b, &sources);
        let ready = resolution.ready().expect("ready");
        assert_eq!((ready.chunks, ready.workload_replicas), (3, Some(10)));
        assert_eq!(ready.shape.requests.cpu_millis, 500);
    }

    #[test]
    fn bad_buffers_are_not_ready_and_name_the_field() {
        let sources = BufferSources::default();
        for (spec, reason, field) in [
            (
                json!({"podTemplateRef": {"name": "chunk"}, "scalableRef": {"kind": "Deployment", "name": "web"}, "replicas": 1}),
                "ResolutionFailed",
                "spec.podTemplateRef and spec.scalableRef",
            ),
            (
                json!({"replicas": 1}),
                "ResolutionFailed",
                "spec.podTemplateRef or spec.scalableRef",
            ),
            (
                json!({"podTemplateRef": {"name": "chunk"}, "replicas": -2}),
                "ResolutionFailed",
                "spec.replicas is -2",
            ),
            (
                json!({"scalableRef": {"kind": "DaemonSet", "name": "x"}}),
                "ResolutionFailed",
                "spec.scalableRef.kind",
            ),
            (
                json!({"podTemplateRef": {"name": "chunk"}, "replicas": 1}),
                "PodTemplateNotFound",
                "spec.podTemplateRef",
            ),
            (
                json!({"scalableRef": {"kind": "Deployment", "name": "web"}}),
                "ScalableRefNotFound",
                "spec.scalableRef",
            ),
            (
                json!({"podTemplateRef": {"name": "chunk"}, "limits": {"cpu": "lots"}}),
                "ResolutionFailed",
                "spec.limits.cpu",
            ),
        ] {
            match resolve(&buffer(spec.clone()), &sources) {
                Resolution::NotReady { reason: r, message } => {
                    assert_eq!(r, reason, "{spec}");
                    assert!(message.contains(field), "{spec}: {message}");
                }
                ready => panic!("{spec}: {ready:?}"),
            }
        }
    }
}
