//! Building a renderer's context from a NodeClaim and its NodeClass, and `joinery render`.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use joinery_api::{NodeClaim, Operator};
use joinery_core::labels;
use joinery_runtime::manifest::PluginKind;
use joinery_runtime::registry::read_plugin_dir;
use joinery_runtime::types::{KeyValue, RenderContext, Resource, Taint};

use crate::cli::RenderArgs;

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
    pub fn from_object(object: &serde_json::Value, name: &str) -> Result<NodeClassBootstrap> {
        let spec = object.get("spec").cloned().unwrap_or_default();
        let user_data = match spec.get("userData") {
            None | Some(serde_json::Value::Null) => None,
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(other) => bail!("NodeClass {name}: spec.userData must be a string, got {other}"),
        };
        let mut renderer = None;
        let mut parameters = BTreeMap::new();
        if let Some(r) = spec.get("userDataRenderer") {
            renderer = match r.get("name") {
                None | Some(serde_json::Value::Null) => None,
                Some(serde_json::Value::String(s)) => Some(s.clone()),
                Some(other) => bail!("NodeClass {name}: spec.userDataRenderer.name must be a string, got {other}"),
            };
            if let Some(params) = r.get("parameters") {
                let map = params
                    .as_object()
                    .with_context(|| format!("NodeClass {name}: spec.userDataRenderer.parameters must be a map of strings"))?;
                for (k, v) in map {
                    let v = match v {
                        serde_json::Value::String(s) => s.clone(),
                        serde_json::Value::Number(n) => n.to_string(),
                        serde_json::Value::Bool(b) => b.to_string(),
                        other => bail!("NodeClass {name}: spec.userDataRenderer.parameters.{k} must be a string, got {other}"),
                    };
                    parameters.insert(k.clone(), v);
                }
            }
        }
        let kubelet = spec.get("kubelet").cloned().unwrap_or(serde_json::json!({}));
        Ok(NodeClassBootstrap { user_data, renderer, parameters, kubelet })
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
    Taint { key: t.key.clone(), value: t.value.clone().filter(|v| !v.is_empty()), effect: t.effect.clone() }
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
    let mut node_labels: BTreeMap<String, String> = claim.metadata.labels.clone().unwrap_or_default();
    for r in &claim.spec.requirements {
        if r.operator == Operator::In
            && let Some([value]) = r.values.as_deref()
            && r.key != labels::HOSTNAME_LABEL
        {
            node_labels.entry(r.key.clone()).or_insert_with(|| value.clone());
        }
    }
    let mut taints: Vec<Taint> = claim.spec.taints.iter().flatten().map(taint_of).collect();
    if !taints.iter().any(|t| t.key == labels::UNREGISTERED_TAINT_KEY && t.effect == "NoExecute") {
        taints.push(Taint { key: labels::UNREGISTERED_TAINT_KEY.to_string(), value: None, effect: "NoExecute".into() });
    }
    let startup_taints = claim.spec.startup_taints.iter().flatten().map(taint_of).collect();
    let label = |key: &str| node_labels.get(key).cloned();
    let resource_requests = claim
        .spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .map(|reqs| reqs.iter().map(|(k, v)| Resource { name: k.clone(), quantity: v.0.clone() }).collect())
        .unwrap_or_default();
    RenderContext {
        node_claim: name,
        node_pool: label(labels::NODEPOOL_LABEL).unwrap_or_default(),
        instance_type: label(labels::INSTANCE_TYPE_LABEL),
        zone: label(labels::ZONE_LABEL),
        capacity_type: label(labels::CAPACITY_TYPE_LABEL),
        labels: node_labels.iter().map(|(k, v)| KeyValue { key: k.clone(), value: v.clone() }).collect(),
        taints,
        startup_taints,
        kubelet: class.kubelet.to_string(),
        cluster_name: cluster.name.clone(),
        cluster_endpoint: cluster.endpoint.clone(),
        provider_id_prefix: cluster.provider_id_prefix.clone(),
        user_data: class.user_data.clone(),
        parameters: class.parameters.iter().map(|(k, v)| KeyValue { key: k.clone(), value: v.clone() }).collect(),
        secrets,
        resource_requests,
    }
}

fn read_yaml(path: &std::path::Path, what: &str) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {what} {}", path.display()))?;
    serde_yaml::from_str(&text).with_context(|| format!("{what} {} is not valid YAML", path.display()))
}

/// `joinery render`.
pub async fn render_command(args: RenderArgs) -> Result<ExitCode> {
    let claim_value = read_yaml(&args.claim, "NodeClaim")?;
    let claim: NodeClaim = serde_json::from_value(claim_value)
        .with_context(|| format!("NodeClaim {}: not a karpenter.sh/v1 NodeClaim", args.claim.display()))?;
    let class_value = read_yaml(&args.class, "NodeClass")?;
    let class_name = class_value.pointer("/metadata/name").and_then(|v| v.as_str()).unwrap_or("(unnamed)").to_string();
    let mut class = NodeClassBootstrap::from_object(&class_value, &class_name)?;
    class.parameters.extend(args.params.iter().cloned());
    let mut options = args.options.clone();
    let renderer = args.renderer.clone().or(class.renderer.clone()).unwrap_or_else(|| DEFAULT_RENDERER.to_string());
    let renderer_name = if std::path::Path::new(&renderer).is_dir() {
        let dir = read_plugin_dir(std::path::Path::new(&renderer))?;
        options.plugin_dirs.push(renderer.clone().into());
        dir.manifest.name
    } else {
        renderer
    };
    let registry = crate::plugins_cmd::open_registry(&options, Default::default())?;
    let plugin = registry.current().require(&renderer_name, PluginKind::UserdataRenderer)?;
    let secrets = args.secrets.iter().map(|(k, v)| KeyValue { key: k.clone(), value: v.clone() }).collect();
    let cluster = ClusterInfo {
        name: args.cluster_name.clone(),
        endpoint: args.cluster_endpoint.clone(),
        provider_id_prefix: args.provider_id_prefix.clone(),
    };
    let context = render_context(&claim, &class, &cluster, secrets);
    let text = plugin.render(&context).await?;
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}
