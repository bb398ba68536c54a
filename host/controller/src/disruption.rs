//! Disruption v0: emptiness. Initialized nodes without workload pods (DaemonSet, mirror and
//! disrupted-taint-tolerating pods do not count) for `consolidateAfter` become
//! `Consolidatable`; the loop then deletes them within the NodePool's disruption budgets
//! (a budget with a `schedule` counts only while its window is open), after re-validating the
//! decision `disruption_validation_delay` later, as upstream does. The decisions —
//! `Consolidatable`, budgets, which empty nodes go — are the core's
//! ([`joinery_core::disruption`]); this loop gathers the view, asks, and acts.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use joinery_api::{ConditionStatus, HasConditions, NodeClaim, NodePool};
use joinery_core::disruption::{self, EmptyCandidate, Reason};
use joinery_core::labels;
use joinery_kube::disruption as kube_disruption;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{Api, DeleteParams};
use serde_json::json;
use tokio::sync::watch;

use crate::events::Involved;
use crate::lifecycle::conditions::{CONSOLIDATABLE, DISRUPTION_REASON, INITIALIZED};
use joinery_kube::drain::reschedulable_pods;
use crate::util::{self, condition, k8s_time, merge_patch, merge_patch_status, system_time};
use crate::{Context, ControllerError};

/// How often `status.lastPodEventTime` may be rewritten for one claim (upstream: 10s).
pub const POD_EVENT_DEDUP: Duration = Duration::from_secs(10);

#[derive(Default)]
struct Memory {
    last_decision: Option<SystemTime>,
    /// Workload pod UIDs last seen per node, to notice pods arriving or leaving.
    pods_seen: HashMap<String, Vec<String>>,
    /// Claims (by UID) this process started disrupting: their taint is not a crash's leftover
    /// even before the cache shows their deletion.
    disrupting: std::collections::HashSet<String>,
}

/// Runs the disruption loop.
pub async fn run(ctx: Arc<Context>, stopped: watch::Receiver<bool>) {
    let memory: Arc<Mutex<Memory>> = Arc::default();
    util::run_loop(ctx, stopped, "disruption", Duration::from_secs(1), move |ctx| {
        let memory = memory.clone();
        async move { step(ctx, memory).await }
    })
    .await;
}

/// One managed node as the disruption loop sees it.
struct Candidate {
    claim: Arc<NodeClaim>,
    node: Arc<Node>,
    pool: Arc<NodePool>,
    empty: bool,
}

fn node_of(ctx: &Context, claim: &NodeClaim) -> Option<Arc<Node>> {
    let name = claim.status.as_ref()?.node_name.clone()?;
    ctx.state.node(&name)
}

async fn step(ctx: Arc<Context>, memory: Arc<Mutex<Memory>>) -> Result<(), ControllerError> {
    let now = ctx.clock.now();
    let pools: BTreeMap<String, Arc<NodePool>> =
        ctx.state.node_pools.state().into_iter().map(|p| (p.metadata.name.clone().unwrap_or_default(), p)).collect();
    let mut candidates = Vec::new();
    for claim in ctx.state.node_claims.state() {
        if claim.metadata.deletion_timestamp.is_some() || !claim.is_condition_true(INITIALIZED) {
            continue;
        }
        let Some(node) = node_of(&ctx, &claim) else { continue };
        let pool_name = claim.metadata.labels.as_ref().and_then(|l| l.get(labels::NODEPOOL_LABEL)).cloned().unwrap_or_default();
        let Some(pool) = pools.get(&pool_name).cloned() else { continue };
        let node_name = node.metadata.name.clone().unwrap_or_default();
        let workload = reschedulable_pods(&ctx.state.pods_on_node(&node_name));
        let empty = workload.is_empty();
        // A workload pod arrived on or left the node: record the pod event time.
        let mut uids: Vec<String> = workload.iter().filter_map(|p| p.metadata.uid.clone()).collect();
        uids.sort();
        let previous = memory.lock().expect("disruption memory lock").pods_seen.get(&node_name).cloned();
        if previous.as_ref() != Some(&uids) {
            let last = claim.status.as_ref().and_then(|s| s.last_pod_event_time.as_ref()).map(system_time);
            let first_sight = previous.is_none() && last.is_some();
            let recent = last.is_some_and(|l| now.duration_since(l).unwrap_or_default() < POD_EVENT_DEDUP);
            if !first_sight && !recent {
                let name = claim.metadata.name.clone().unwrap_or_default();
                merge_patch_status(&Api::<NodeClaim>::all(ctx.client.clone()), &name, json!({"status": {"lastPodEventTime": k8s_time(now)}}))
                    .await?;
            }
            if first_sight || !recent {
                memory.lock().expect("disruption memory lock").pods_seen.insert(node_name.clone(), uids);
            }
        }
        update_consolidatable(&ctx, &claim, &pool, now).await?;
        // Crash recovery (upstream's rule): a node that carries the disrupted taint while
        // neither it nor its claim is being deleted was left by a disruption that never
        // finished (the host died between tainting and deleting): untaint it.
        let ours = claim.metadata.uid.as_ref().is_some_and(|uid| memory.lock().expect("disruption memory lock").disrupting.contains(uid));
        if node.metadata.deletion_timestamp.is_none() && !ours {
            release_abandoned(&ctx, &claim, &node).await?;
        }
        candidates.push(Candidate { claim, node, pool, empty });
    }
    let poll_due = memory
        .lock()
        .expect("disruption memory lock")
        .last_decision
        .is_none_or(|at| now.duration_since(at).unwrap_or_default() >= ctx.settings.disruption_poll);
    if !poll_due {
        return Ok(());
    }
    memory.lock().expect("disruption memory lock").last_decision = Some(now);
    let chosen = choose_empty(&ctx, &candidates);
    if chosen.is_empty() {
        return Ok(());
    }
    tracing::info!(count = chosen.len(), "empty nodes found; validating before disruption");
    ctx.sleep(ctx.settings.disruption_validation_delay).await;
    for name in chosen {
        let Some(claim) = ctx.state.node_claims.state().into_iter().find(|c| c.metadata.name.as_deref() == Some(name.as_str())) else {
            continue;
        };
        let Some(node) = node_of(&ctx, &claim) else { continue };
        let node_name = node.metadata.name.clone().unwrap_or_default();
        let still_empty = reschedulable_pods(&ctx.state.pods_on_node(&node_name)).is_empty();
        if !still_empty || !claim.is_condition_true(CONSOLIDATABLE) || claim.metadata.deletion_timestamp.is_some() {
            tracing::info!(nodeclaim = %name, "no longer empty; disruption abandoned");
            continue;
        }
        if nominated(&ctx, &claim, &node) {
            tracing::info!(nodeclaim = %name, "nominated for pending pods; disruption abandoned");
            continue;
        }
        if let Some(uid) = claim.metadata.uid.clone() {
            memory.lock().expect("disruption memory lock").disrupting.insert(uid);
        }
        disrupt(&ctx, &claim, &node).await?;
    }
    // Forget disruptions whose claim is gone.
    let live: std::collections::HashSet<String> = ctx.state.node_claims.state().iter().filter_map(|c| c.metadata.uid.clone()).collect();
    memory.lock().expect("disruption memory lock").disrupting.retain(|uid| live.contains(uid));
    Ok(())
}

async fn update_consolidatable(ctx: &Context, claim: &NodeClaim, pool: &NodePool, now: SystemTime) -> Result<(), ControllerError> {
    let name = claim.metadata.name.clone().unwrap_or_default();
    let api = Api::<NodeClaim>::all(ctx.client.clone());
    let initialized_at = claim.condition(INITIALIZED).map(|c| system_time(&c.last_transition_time));
    let last_pod = claim.status.as_ref().and_then(|s| s.last_pod_event_time.as_ref()).map(system_time);
    let wanted = disruption::consolidatable(kube_disruption::consolidate_after(pool), initialized_at, last_pod, now);
    // `None`: consolidateAfter is Never, and the condition goes away.
    let changed = match wanted {
        None => claim.condition(CONSOLIDATABLE).is_some(),
        Some(wanted) => wanted != claim.is_condition_true(CONSOLIDATABLE),
    };
    if !changed {
        return Ok(());
    }
    let mut conds = claim.conditions().to_vec();
    if wanted == Some(true) {
        joinery_api::condition::set_condition(&mut conds, condition(ctx, CONSOLIDATABLE, ConditionStatus::True, "Consolidatable", ""));
    } else {
        joinery_api::condition::remove_condition(&mut conds, CONSOLIDATABLE);
    }
    merge_patch_status(&api, &name, json!({"status": {"conditions": conds}})).await?;
    Ok(())
}

/// How many nodes of each pool may start disrupting for `reason` now (the core decides from
/// each pool's budgets, its node count and the nodes it is already disrupting).
fn allowed_disruptions(
    candidates: &[Candidate],
    deleting: &HashMap<String, u64>,
    reason: Reason,
    now: SystemTime,
) -> BTreeMap<String, u64> {
    let mut totals: BTreeMap<String, (Arc<NodePool>, u64)> = BTreeMap::new();
    for c in candidates {
        let name = c.pool.metadata.name.clone().unwrap_or_default();
        totals.entry(name).or_insert_with(|| (c.pool.clone(), 0)).1 += 1;
    }
    totals
        .into_iter()
        .map(|(name, (pool, total))| {
            let busy = deleting.get(&name).copied().unwrap_or(0);
            let allowance = disruption::allowed_disruptions(&kube_disruption::budgets(&pool), reason, total + busy, busy, now);
            for error in &allowance.invalid {
                tracing::warn!(nodepool = %name, %error, "invalid disruption budget; allowing no disruption");
            }
            (name, allowance.allowed)
        })
        .collect()
}

/// Whether the provisioner just chose this node (by Node or NodeClaim name) for pending pods.
fn nominated(ctx: &Context, claim: &NodeClaim, node: &Node) -> bool {
    let now = ctx.clock.now();
    [claim.metadata.name.as_deref(), node.metadata.name.as_deref()].into_iter().flatten().any(|name| ctx.inflight.is_nominated(name, now))
}

fn choose_empty(ctx: &Context, candidates: &[Candidate]) -> Vec<String> {
    let mut deleting: HashMap<String, u64> = HashMap::new();
    for claim in ctx.state.node_claims.state() {
        if claim.metadata.deletion_timestamp.is_some() {
            let pool = claim.metadata.labels.as_ref().and_then(|l| l.get(labels::NODEPOOL_LABEL)).cloned().unwrap_or_default();
            *deleting.entry(pool).or_default() += 1;
        }
    }
    let allowed = allowed_disruptions(candidates, &deleting, Reason::Empty, ctx.clock.now());
    let views: Vec<EmptyCandidate> = candidates
        .iter()
        .map(|c| EmptyCandidate {
            claim: c.claim.metadata.name.clone().unwrap_or_default(),
            pool: c.pool.metadata.name.clone().unwrap_or_default(),
            empty: c.empty,
            consolidatable: c.claim.is_condition_true(CONSOLIDATABLE),
            deleting: c.node.metadata.deletion_timestamp.is_some(),
            do_not_disrupt: c.node.metadata.annotations.as_ref().and_then(|a| a.get(labels::DO_NOT_DISRUPT_ANNOTATION)).map(String::as_str)
                == Some("true"),
            nominated: nominated(ctx, &c.claim, &c.node),
        })
        .collect();
    disruption::choose_empty(&views, &allowed)
}

/// Removes the disrupted taint and the `DisruptionReason` condition that an interrupted
/// disruption left on a node and claim that are not being deleted.
async fn release_abandoned(ctx: &Context, claim: &NodeClaim, node: &Node) -> Result<(), ControllerError> {
    let taints: Vec<Taint> = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    if !taints.iter().any(|t| t.key == labels::DISRUPTED_TAINT_KEY) {
        return Ok(());
    }
    let node_name = node.metadata.name.clone().unwrap_or_default();
    let kept: Vec<&Taint> = taints.iter().filter(|t| t.key != labels::DISRUPTED_TAINT_KEY).collect();
    merge_patch(&Api::<Node>::all(ctx.client.clone()), &node_name, json!({"spec": {"taints": kept}})).await?;
    if claim.condition(DISRUPTION_REASON).is_some() {
        let mut conds = claim.conditions().to_vec();
        joinery_api::condition::remove_condition(&mut conds, DISRUPTION_REASON);
        let name = claim.metadata.name.clone().unwrap_or_default();
        merge_patch_status(&Api::<NodeClaim>::all(ctx.client.clone()), &name, json!({"status": {"conditions": conds}})).await?;
    }
    tracing::info!(node = %node_name, "removed the disrupted taint an interrupted disruption left behind");
    Ok(())
}

async fn disrupt(ctx: &Context, claim: &NodeClaim, node: &Node) -> Result<(), ControllerError> {
    let name = claim.metadata.name.clone().unwrap_or_default();
    let node_name = node.metadata.name.clone().unwrap_or_default();
    let mut taints: Vec<Taint> = node.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    if !taints.iter().any(|t| t.key == labels::DISRUPTED_TAINT_KEY) {
        taints.push(Taint { key: labels::DISRUPTED_TAINT_KEY.into(), effect: "NoSchedule".into(), value: None, time_added: None });
        merge_patch(&Api::<Node>::all(ctx.client.clone()), &node_name, json!({"spec": {"taints": taints}})).await?;
    }
    let mut conds = claim.conditions().to_vec();
    joinery_api::condition::set_condition(&mut conds, condition(ctx, DISRUPTION_REASON, ConditionStatus::True, "Empty", ""));
    let api = Api::<NodeClaim>::all(ctx.client.clone());
    merge_patch_status(&api, &name, json!({"status": {"conditions": conds}})).await?;
    ctx.events.normal(&Involved::of(node), "DisruptionTerminating", "Disrupting Node: Empty").await;
    ctx.events.normal(&Involved::of(claim), "DisruptionTerminating", "Disrupting NodeClaim: Empty").await;
    match api.delete(&name, &DeleteParams::background()).await {
        Ok(_) => {}
        Err(e) if util::is_not_found(&e) => {}
        Err(e) => return Err(e.into()),
    }
    let label = |k: &str| claim.metadata.labels.as_ref().and_then(|l| l.get(k)).cloned().unwrap_or_default();
    ctx.metrics.inc(
        crate::metrics::names::NODECLAIMS_DISRUPTED,
        &[("reason", "empty"), ("nodepool", &label(labels::NODEPOOL_LABEL)), ("capacity_type", &label(labels::CAPACITY_TYPE_LABEL))],
    );
    tracing::info!(nodeclaim = %name, node = %node_name, reason = "empty", "disrupting nodeclaim");
    Ok(())
}
