//! Node termination: a managed Node being deleted is tainted `karpenter.sh/disrupted`,
//! drained through the Eviction API (so PodDisruptionBudgets hold), its instance deleted,
//! and only then its `karpenter.sh/termination` finalizer removed.

use std::sync::Arc;
use std::time::Duration;

use joinery_api::NodeClaim;
use joinery_core::labels;
use joinery_runtime::CallError;
use joinery_runtime::types::CloudError;
use k8s_openapi::api::core::v1::{Node, Pod, Taint};
use kube::api::{Api, DeleteParams, EvictParams};
use serde_json::json;
use tokio::sync::watch;

use crate::events::Involved;
use crate::state::{is_daemon_pod, is_mirror_pod};
use crate::util::{self, merge_patch};
use crate::{Context, ControllerError};

/// Runs the termination loop.
pub async fn run(ctx: Arc<Context>, stopped: watch::Receiver<bool>) {
    util::run_loop(ctx, stopped, "node.termination", Duration::from_secs(1), step).await;
}

async fn step(ctx: Arc<Context>) -> Result<(), ControllerError> {
    for node in ctx.state.nodes.state() {
        let terminating = node.metadata.deletion_timestamp.is_some()
            && node.metadata.finalizers.iter().flatten().any(|f| f == labels::TERMINATION_FINALIZER);
        if terminating && let Err(e) = terminate(&ctx, &node).await {
            tracing::warn!(node = node.metadata.name.as_deref().unwrap_or(""), error = %e, "node termination step failed");
        }
    }
    Ok(())
}

/// Whether a pod tolerates the `karpenter.sh/disrupted:NoSchedule` taint (such pods are
/// never drained, like DaemonSet pods).
pub fn tolerates_disrupted_taint(pod: &Pod) -> bool {
    pod.spec.as_ref().and_then(|s| s.tolerations.as_ref()).into_iter().flatten().any(|t| {
        let key_matches = match t.key.as_deref() {
            None | Some("") => t.operator.as_deref() == Some("Exists"),
            Some(k) => k == labels::DISRUPTED_TAINT_KEY,
        };
        let effect_matches = t.effect.as_deref().is_none_or(|e| e.is_empty() || e == "NoSchedule");
        let value_matches = t.operator.as_deref() == Some("Exists") || t.value.as_deref().unwrap_or("").is_empty();
        key_matches && effect_matches && value_matches
    })
}

/// The pods a drain must evict from a node: not finished, not DaemonSet or mirror pods, not
/// tolerating the disrupted taint.
pub fn pods_to_drain(pods: &[Arc<Pod>]) -> Vec<Arc<Pod>> {
    pods.iter().filter(|p| !is_daemon_pod(p) && !is_mirror_pod(p) && !tolerates_disrupted_taint(p)).cloned().collect()
}

async fn terminate(ctx: &Context, node: &Node) -> Result<(), ControllerError> {
    let node_name = node.metadata.name.clone().unwrap_or_default();
    let provider_id = node.spec.as_ref().and_then(|s| s.provider_id.clone()).unwrap_or_default();
    // 1. The NodeClaim goes too.
    let claims: Api<NodeClaim> = Api::all(ctx.client.clone());
    for claim in ctx.state.node_claims.state() {
        if claim.status.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id.as_str())
            && claim.metadata.deletion_timestamp.is_none()
        {
            let name = claim.metadata.name.clone().unwrap_or_default();
            match claims.delete(&name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(e) if util::is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    // 2. Taint and exclude from load balancers.
    let mut taints: Vec<Taint> = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    let node_labels = node.metadata.labels.clone().unwrap_or_default();
    let tainted = taints.iter().any(|t| t.key == labels::DISRUPTED_TAINT_KEY && t.effect == "NoSchedule");
    if !tainted || !node_labels.contains_key(labels::EXCLUDE_FROM_LOAD_BALANCERS_LABEL) {
        taints.retain(|t| t.key != labels::DISRUPTED_TAINT_KEY);
        taints.push(Taint { key: labels::DISRUPTED_TAINT_KEY.into(), effect: "NoSchedule".into(), value: None, time_added: None });
        merge_patch(
            &Api::<Node>::all(ctx.client.clone()),
            &node_name,
            json!({"metadata": {"labels": {labels::EXCLUDE_FROM_LOAD_BALANCERS_LABEL: labels::EXCLUDE_FROM_LOAD_BALANCERS_VALUE}},
                   "spec": {"taints": taints}}),
        )
        .await?;
    }
    // 3. Drain through the Eviction API.
    let remaining = pods_to_drain(&ctx.state.pods_on_node(&node_name));
    if !remaining.is_empty() {
        for pod in &remaining {
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            evict(ctx, pod).await;
        }
        return Ok(());
    }
    // 4. The instance goes, then the finalizer.
    if !provider_id.is_empty() {
        let class_ref = ctx
            .state
            .node_claims
            .state()
            .into_iter()
            .find(|c| c.status.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id.as_str()))
            .map(|c| (c.spec.node_class_ref.group.clone(), c.spec.node_class_ref.kind.clone()));
        if let Some((group, kind)) = class_ref {
            let plugin = ctx.cloud.plugin_for(&group, &kind)?;
            match plugin.delete(&provider_id).await {
                Ok(()) => {}
                Err(CallError::Cloud { error: CloudError::NotFound(_), .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    let finalizers: Vec<String> =
        node.metadata.finalizers.iter().flatten().filter(|f| *f != labels::TERMINATION_FINALIZER).cloned().collect();
    match merge_patch(&Api::<Node>::all(ctx.client.clone()), &node_name, json!({"metadata": {"finalizers": finalizers}})).await {
        Ok(_) => {}
        Err(e) if util::is_not_found(&e) => {}
        Err(e) => return Err(e.into()),
    }
    ctx.metrics.inc(
        crate::metrics::names::NODES_TERMINATED,
        &[("nodepool", node_labels.get(labels::NODEPOOL_LABEL).map(String::as_str).unwrap_or("")), ("zone", node_labels.get(labels::ZONE_LABEL).map(String::as_str).unwrap_or(""))],
    );
    tracing::info!(node = %node_name, "deleted node");
    Ok(())
}

async fn evict(ctx: &Context, pod: &Pod) {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    match api.evict(&name, &EvictParams::default()).await {
        Ok(_) => {
            ctx.metrics.inc(crate::metrics::names::EVICTION_REQUESTS, &[("code", "200")]);
            tracing::debug!(pod = %format!("{namespace}/{name}"), "evicted pod");
            ctx.events.normal(&Involved::of(pod), "Evicted", "Evicted pod: node is being terminated").await;
        }
        Err(e) if util::is_not_found(&e) => {}
        Err(kube::Error::Api(s)) if s.code == 429 => {
            ctx.metrics.inc(crate::metrics::names::EVICTION_REQUESTS, &[("code", "429")]);
            ctx.events.warning(&Involved::of(pod), "FailedDraining", &format!("Cannot evict pod as it would violate the pod's disruption budget: {}", s.message)).await;
        }
        Err(e) => tracing::warn!(pod = %format!("{namespace}/{name}"), error = %e, "eviction failed; will retry"),
    }
}
