//! Bootstrap: what the host reads from any NodeClass to render userData, and the renderer
//! context built from a NodeClaim.

use std::collections::BTreeMap;

use joinery_api::{NodeClaim, Operator};
use joinery_core::labels;
use joinery_runtime::contract::{KeyValue, RenderContext, Resource, Taint};

/// A NodeClass whose bootstrap fields are malformed; the message names the object and field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("NodeClass {node_class}: {field} {problem}")]
pub struct BootstrapFieldError {
    /// The NodeClass name.
    pub node_class: String,
    /// The offending field, e.g. `spec.userData`.
    pub field: String,
    /// What is wrong with it and what is expected.
    pub problem: String,
}

fn field_error(
    node_class: &str,
    field: impl Into<String>,
    problem: impl Into<String>,
) -> BootstrapFieldError {
    BootstrapFieldError {
        node_class: node_class.to_string(),
        field: field.into(),
        problem: problem.into(),
    }
}

/// The renderer used when a NodeClass names none.
pub const DEFAULT_RENDERER: &str = "template";

/// What the host reads from any NodeClass to render userData:
/// `spec.userData`, `spec.userDataRenderer.{name,parameters}` and `spec.kubelet`.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct NodeClassBootstrap {
    /// `spec.userData`.
    pub user_data: Option<String>,
    /// `spec.userDataRenderer.name`.
    pub renderer: Option<String>,
    /// `spec.userDataRenderer.parameters`.
    pub parameters: BTreeMap<String, String>,
    /// `spec.kubelet` as JSON.
    pub kubelet: serde_json::Value,
}

impl NodeClassBootstrap {
    /// Reads the bootstrap fields from a NodeClass object; errors name the field.
    pub fn from_object(
        object: &serde_json::Value,
        name: &str,
    ) -> Result<NodeClassBootstrap, BootstrapFieldError> {
        let spec = object.get("spec").cloned().unwrap_or_default();
        let user_data = match spec.get("userData") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(other) => {
                return Err(field_error(
                    name,
                    "spec.userData",
                    format!("must be a string, got {other}"),
                ));
            }
        };
        let mut renderer = None;
        let mut parameters = BTreeMap::new();
        if let Some(r) = spec.get("userDataRenderer") {
            renderer = match r.get("name") {
                None | Some(serde_json::Value::Null) => None,
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                Some(other) => {
                    return Err(field_error(
                        name,
                        "spec.userDataRenderer.name",
                        format!("must be a string, got {other}"),
                    ));
                }
            };
            if let Some(params) = r.get("parameters") {
                let map = params.as_object().ok_or_else(|| {
                    field_error(
                        name,
                        "spec.userDataRenderer.parameters",
                        "must be a map of strings",
                    )
                })?;
                for (k, v) in map {
                    let v = match v {
                        serde_json::Value::String(s) => s.clone(),
                        serde_json::Value::Number(n) => n.to_string(),
                        serde_json::Value::Bool(b) => b.to_string(),
                        other => {
                            return Err(field_error(
                                name,
                                format!("spec.userDataRenderer.parameters.{k}"),
                                format!("must be a string, got {other}"),
                            ));
                        }
                    };
                    parameters.insert(k.clone(), v);
                }
            }
        }
        let kubelet = spec
            .get("kubelet")
            .cloned()
            .unwrap_or(serde_json::json!({}));
        Ok(NodeClassBootstrap {
            user_data,
            renderer,
            parameters,
            kubelet,
        })
    }
}

/// Cluster facts every render needs.
#[derive(Debug, Clone)]
pub struct ClusterInfo {
    /// Cluster name.
    pub name: String,
    /// API server endpoint.
    pub endpoint: String,
    /// Provider ID prefix of the cloud plugin (e.g. `exoscale://`).
    pub provider_id_prefix: String,
}

fn taint_of(t: &k8s_openapi::api::core::v1::Taint) -> Taint {
    Taint {
        key: t.key.clone(),
        value: t.value.clone().filter(|v| !v.is_empty()),
        effect: t.effect.clone(),
    }
}

/// Builds the render context for a NodeClaim: labels are the claim's labels plus every
/// single-value `In` requirement (restricted labels left out); taints always include the
/// `karpenter.sh/unregistered:NoExecute` registration taint.
pub fn render_context(
    claim: &NodeClaim,
    class: &NodeClassBootstrap,
    cluster: &ClusterInfo,
    secrets: Vec<KeyValue>,
) -> RenderContext {
    let name = claim.metadata.name.clone().unwrap_or_default();
    let mut node_labels: BTreeMap<String, String> =
        claim.metadata.labels.clone().unwrap_or_default();
    for r in &claim.spec.requirements {
        if r.operator == Operator::In
            && let Some([value]) = r.values.as_deref()
            && r.key != labels::HOSTNAME_LABEL
        {
            node_labels
                .entry(r.key.clone())
                .or_insert_with(|| value.clone());
        }
    }
    let mut taints: Vec<Taint> = claim.spec.taints.iter().flatten().map(taint_of).collect();
    if !taints
        .iter()
        .any(|t| t.key == labels::UNREGISTERED_TAINT_KEY && t.effect == "NoExecute")
    {
        taints.push(Taint {
            key: labels::UNREGISTERED_TAINT_KEY.to_string(),
            value: None,
            effect: "NoExecute".into(),
        });
    }
    let startup_taints = claim
        .spec
        .startup_taints
        .iter()
        .flatten()
        .map(taint_of)
        .collect();
    let label = |key: &str| node_labels.get(key).cloned();
    let resource_requests = claim
        .spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .map(|reqs| {
            reqs.iter()
                .map(|(k, v)| Resource {
                    name: k.clone(),
                    quantity: v.0.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    RenderContext {
        node_claim: name,
        node_pool: label(labels::NODEPOOL_LABEL).unwrap_or_default(),
        instance_type: label(labels::INSTANCE_TYPE_LABEL),
        zone: label(labels::ZONE_LABEL),
        capacity_type: label(labels::CAPACITY_TYPE_LABEL),
        labels: node_labels
            .iter()
            .map(|(k, v)| KeyValue {
                key: k.clone(),
                value: v.clone(),
            })
            .collect(),
        taints,
        startup_taints,
        kubelet: class.kubelet.to_string(),
        cluster_name: cluster.name.clone(),
        cluster_endpoint: cluster.endpoint.clone(),
        provider_id_prefix: cluster.provider_id_prefix.clone(),
        user_data: class.user_data.clone(),
        parameters: class
            .parameters
            .iter()
            .map(|(k, v)| KeyValue {
                key: k.clone(),
                value: v.clone(),
            })
            .collect(),
        secrets,
        resource_requests,
    }
}
