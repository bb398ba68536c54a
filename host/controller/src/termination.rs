//! Node termination: a managed Node being deleted is tainted `karpenter.sh/disrupted`,
//! drained (eviction honouring PDBs, tier by tier; the NodeClaim's `terminationGracePeriod`
//! forcing deletion when it runs out; pods stuck terminating on a dead kubelet ignored), its
//! instance deleted, and only then its `karpenter.sh/termination` finalizer removed. The
//! decisions are the pure core's ([`joinery_core::drain`]: the drain plan and the order of
//! the steps); the pods' and claim's views come from [`joinery_adapter::drain`]; this loop
//! gathers, asks, and carries out the answer. Each Node is worked on in its own task, so one slow
//! cloud call does not hold up the others.

use crate::state::Ordered;
use std::sync::Arc;
use std::time::Duration;

use joinery_adapter::lean::{LeanNode, LeanPod, WatchedNode};
use joinery_api::{ConditionStatus, HasConditions, NodeClaim};
use joinery_core::drain::{self, DrainAction, DrainPod, NodeTermination, TerminationStep};
use joinery_core::labels;
use joinery_runtime::CallError;
use joinery_runtime::contract::CloudError;
use k8s_openapi::api::core::v1::{Pod, Taint};
use kube::api::{Api, DeleteParams, EvictParams};
use serde_json::json;
use tokio::sync::watch;

use crate::events::Involved;
use crate::lifecycle::conditions::{DRAINED, INSTANCE_TERMINATING};
use crate::util;
use crate::writes::{self, Part};
use crate::{CloudCall, Context, ControllerError};
use joinery_adapter::drain::{drain_pod, termination_deadline};

/// The controller name cloud calls of this loop are counted under.
const CONTROLLER: &str = "node.termination";

/// How many Nodes are terminated at once.
pub const MAX_CONCURRENT_TERMINATIONS: usize = 64;

/// Runs the termination loop.
pub async fn run(ctx: Arc<Context>, stopped: watch::Receiver<bool>) {
    util::run_keyed_loop(
        ctx,
        stopped,
        "node.termination",
        MAX_CONCURRENT_TERMINATIONS,
        step,
    )
    .await;
}

async fn step(ctx: Arc<Context>, workers: Arc<util::KeyedWorkers>) -> Result<(), ControllerError> {
    for node in ctx.state.nodes.state() {
        let terminating = node.metadata.deletion_timestamp.is_some()
            && node
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == labels::TERMINATION_FINALIZER);
        if terminating {
            let ctx = ctx.clone();
            let key = node.name().to_string();
            workers
                .spawn(key, async move { terminate(&ctx, &node).await })
                .await;
        }
    }
    Ok(())
}

async fn terminate(ctx: &Context, node: &LeanNode) -> Result<(), ControllerError> {
    let node_name = node.name().to_string();
    let provider_id = node.provider_id().unwrap_or_default().to_string();
    let claim = (!provider_id.is_empty())
        .then(|| {
            ctx.state.node_claims.ordered().into_iter().find(|c| {
                c.status.as_ref().and_then(|s| s.provider_id.as_deref())
                    == Some(provider_id.as_str())
            })
        })
        .flatten();
    let plugin = match &claim {
        Some(c) => Some(
            ctx.cloud
                .plugin_for(&c.spec.node_class_ref.group, &c.spec.node_class_ref.kind)?,
        ),
        None => None,
    };
    let now = ctx.clock.now();
    let deadline = claim.as_deref().and_then(termination_deadline);
    let pods = ctx.state.pods_on_node(&node_name);
    let views: Vec<DrainPod> = pods.iter().map(|p| drain_pod(p, now)).collect();
    let plan = drain::plan(&views, now, deadline);
    let mut view = NodeTermination {
        claim_live: claim
            .as_ref()
            .is_some_and(|c| c.metadata.deletion_timestamp.is_none()),
        cloud: plugin.is_some(),
        ready: node.is_ready(),
        instance_gone: None,
        tainted: node
            .taints()
            .iter()
            .any(|t| t.key == labels::DISRUPTED_TAINT_KEY && t.effect == "NoSchedule")
            && node
                .label(labels::EXCLUDE_FROM_LOAD_BALANCERS_LABEL)
                .is_some(),
        drained: plan.drained(),
        drained_marked: claim.as_ref().is_none_or(|c| c.is_condition_true(DRAINED)),
        instance_deleted: false,
    };
    loop {
        match drain::next_termination_step(&view) {
            TerminationStep::DeleteClaim => {
                let name = claim
                    .as_ref()
                    .and_then(|c| c.metadata.name.clone())
                    .unwrap_or_default();
                match Api::<NodeClaim>::all(ctx.client.clone())
                    .delete(&name, &DeleteParams::background())
                    .await
                {
                    Ok(_) => {}
                    Err(e) if util::is_not_found(&e) => {}
                    Err(e) => return Err(e.into()),
                }
                view.claim_live = false;
            }
            TerminationStep::CheckInstance => {
                let plugin = plugin.as_ref().expect("a cloud to ask");
                let call = CloudCall::new(plugin.name(), "get", &provider_id);
                let result = ctx
                    .call_cloud(CONTROLLER, &call, plugin.get(&provider_id))
                    .await;
                let gone = matches!(
                    result,
                    Ok(Err(CallError::Cloud {
                        error: CloudError::NotFound(_),
                        ..
                    }))
                );
                if gone {
                    tracing::info!(node = %node_name, %provider_id, "node is not ready and its instance is gone; skipping the drain");
                }
                view.instance_gone = Some(gone);
            }
            TerminationStep::Taint => {
                // Guarded: the taint list is computed from the Node as last read.
                writes::patch_guarded(&writes::node_api(ctx), &WatchedNode::from(node.clone()), Part::Main, |current| {
                    let mut taints = current.taints().to_vec();
                    taints.retain(|t| t.key != labels::DISRUPTED_TAINT_KEY);
                    taints.push(Taint { key: labels::DISRUPTED_TAINT_KEY.into(), effect: "NoSchedule".into(), value: None, time_added: None });
                    Some(json!({"metadata": {"labels": {labels::EXCLUDE_FROM_LOAD_BALANCERS_LABEL: labels::EXCLUDE_FROM_LOAD_BALANCERS_VALUE}},
                                "spec": {"taints": taints}}))
                })
                .await?;
                view.tainted = true;
            }
            TerminationStep::Drain => {
                for action in &plan.actions {
                    match *action {
                        DrainAction::Evict(i) => evict(ctx, &pods[i]).await,
                        DrainAction::ForceDelete { pod, grace } => {
                            force_delete(ctx, &pods[pod], grace).await
                        }
                    }
                }
                if plan.blocked_by_do_not_disrupt > 0 {
                    tracing::debug!(node = %node_name, pods = plan.blocked_by_do_not_disrupt, "drain waits for do-not-disrupt pods");
                }
                let message = format!("{} pods waiting to be evicted", plan.waiting);
                set_drained(
                    ctx,
                    claim.as_deref(),
                    ConditionStatus::Unknown,
                    "Draining",
                    message,
                )
                .await?;
                return Ok(());
            }
            TerminationStep::MarkDrained => {
                if set_drained(
                    ctx,
                    claim.as_deref(),
                    ConditionStatus::True,
                    "Drained",
                    String::new(),
                )
                .await?
                {
                    let pool = node.label(labels::NODEPOOL_LABEL).unwrap_or_default();
                    ctx.metrics
                        .nodes_drained
                        .inc(&crate::metrics::series::NodePool {
                            nodepool: pool.into(),
                        });
                }
                view.drained_marked = true;
            }
            TerminationStep::DeleteInstance => {
                // `delete` is called again on later passes until the cloud answers not-found;
                // only then does the finalizer come off.
                let plugin = plugin.as_ref().expect("a cloud to call");
                let call = CloudCall::new(plugin.name(), "delete", &provider_id);
                match ctx
                    .call_cloud(CONTROLLER, &call, plugin.delete(&provider_id))
                    .await?
                {
                    Ok(()) => {
                        // The deletion has started: the claim says so (upstream's
                        // InstanceTerminating), and its finalizer times the wait from here
                        // to the cloud's not-found.
                        set_instance_terminating(ctx, claim.as_deref()).await?;
                        return Ok(());
                    }
                    Err(CallError::Cloud {
                        error: CloudError::NotFound(_),
                        ..
                    }) => view.instance_deleted = true,
                    Err(e) => return Err(e.into()),
                }
            }
            TerminationStep::RemoveFinalizer => break,
        }
    }
    // The Node may go.
    let ours = |finalizers: &mut Vec<String>| {
        let before = finalizers.len();
        finalizers.retain(|f| f != labels::TERMINATION_FINALIZER);
        finalizers.len() != before
    };
    match writes::edit_finalizers(
        &writes::node_api(ctx),
        &WatchedNode::from(node.clone()),
        ours,
    )
    .await
    {
        Ok(_) => {}
        Err(e) if util::is_not_found(&e) => {}
        Err(e) => return Err(e.into()),
    }
    ctx.metrics
        .nodes_terminated
        .inc(&crate::metrics::series::NodePoolZone {
            nodepool: node.label(labels::NODEPOOL_LABEL).unwrap_or("").into(),
            zone: node.label(labels::ZONE_LABEL).unwrap_or("").into(),
        });
    if let Some(deleted) = node.metadata.deletion_timestamp.as_ref() {
        let seconds = ctx
            .clock
            .now()
            .duration_since(util::system_time(deleted))
            .unwrap_or_default()
            .as_secs_f64();
        let nodepool = node.label(labels::NODEPOOL_LABEL).unwrap_or("");
        ctx.metrics.nodes_termination_duration.observe(
            &crate::metrics::series::NodePool {
                nodepool: nodepool.into(),
            },
            seconds,
        );
    }
    tracing::info!(node = %node_name, "deleted node");
    Ok(())
}

/// Writes the NodeClaim's `Drained` condition (upstream's: `Unknown`/`Draining` while pods
/// remain, `True` once none does) when it changes. Returns whether it was written.
async fn set_drained(
    ctx: &Context,
    claim: Option<&NodeClaim>,
    status: ConditionStatus,
    reason: &str,
    message: String,
) -> Result<bool, ControllerError> {
    let Some(claim) = claim else { return Ok(false) };
    let current = claim.condition(DRAINED);
    if current.is_some_and(|c| c.status == status && c.reason == reason && c.message == message) {
        return Ok(false);
    }
    let condition = util::condition(ctx, DRAINED, status, reason, message);
    match crate::lifecycle::write_status(ctx, claim, vec![condition], json!({})).await {
        Ok(()) => Ok(true),
        Err(ControllerError::Kube(e)) if util::is_not_found(&e) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Sets the claim's `InstanceTerminating` condition, once: the cloud accepted the deletion of
/// its instance.
async fn set_instance_terminating(
    ctx: &Context,
    claim: Option<&NodeClaim>,
) -> Result<(), ControllerError> {
    let Some(claim) = claim.filter(|c| !c.is_condition_true(INSTANCE_TERMINATING)) else {
        return Ok(());
    };
    let condition = util::condition(
        ctx,
        INSTANCE_TERMINATING,
        ConditionStatus::True,
        "InstanceTerminating",
        String::new(),
    );
    match crate::lifecycle::write_status(ctx, claim, vec![condition], json!({})).await {
        Err(ControllerError::Kube(e)) if util::is_not_found(&e) => Ok(()),
        other => other,
    }
}

/// Deletes a pod with `grace`, bypassing PodDisruptionBudgets and do-not-disrupt: the node's
/// terminationGracePeriod is running out.
async fn force_delete(ctx: &Context, pod: &LeanPod, grace: Duration) {
    let namespace = pod
        .metadata
        .namespace
        .as_deref()
        .unwrap_or_default()
        .to_string();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let params = DeleteParams {
        grace_period_seconds: Some(grace.as_secs().max(1) as u32),
        ..DeleteParams::default()
    };
    match api.delete(&name, &params).await {
        Ok(_) => {
            tracing::info!(pod = %format!("{namespace}/{name}"), grace_seconds = grace.as_secs(), "deleted pod: the node's terminationGracePeriod is ending");
            let message = format!(
                "Deleting the pod with a {}s grace period: its node's terminationGracePeriod ends then; this bypasses the pod's disruption budget and do-not-disrupt annotation",
                grace.as_secs().max(1)
            );
            ctx.events
                .warning(
                    &Involved::pod(pod),
                    "TerminationGracePeriodExpiring",
                    &message,
                )
                .await;
        }
        Err(e) if util::is_not_found(&e) => {}
        Err(e) => {
            tracing::warn!(pod = %format!("{namespace}/{name}"), error = %e, "forced pod deletion failed; will retry")
        }
    }
}

async fn evict(ctx: &Context, pod: &LeanPod) {
    let namespace = pod
        .metadata
        .namespace
        .as_deref()
        .unwrap_or_default()
        .to_string();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    match api.evict(&name, &EvictParams::default()).await {
        Ok(_) => {
            ctx.metrics
                .eviction_requests
                .inc(&crate::metrics::series::Code { code: "200".into() });
            tracing::debug!(pod = %format!("{namespace}/{name}"), "evicted pod");
            ctx.events
                .normal(
                    &Involved::pod(pod),
                    "Evicted",
                    "Evicted pod: node is being terminated",
                )
                .await;
        }
        Err(e) if util::is_not_found(&e) => {}
        Err(kube::Error::Api(s)) if s.code == 429 => {
            ctx.metrics
                .eviction_requests
                .inc(&crate::metrics::series::Code { code: "429".into() });
            ctx.events
                .warning(
                    &Involved::pod(pod),
                    "FailedDraining",
                    &format!(
                        "Cannot evict pod as it would violate the pod's disruption budget: {}",
                        s.message
                    ),
                )
                .await;
        }
        Err(e) => {
            tracing::warn!(pod = %format!("{namespace}/{name}"), error = %e, "eviction failed; will retry")
        }
    }
}
