//! Provisioning: batch unschedulable pods, run the core scheduler over a snapshot of the
//! cluster, and create the NodeClaims it asks for (upstream's labels, annotations, owner
//! reference, finalizer and requirements with at most 600 instance types, cheapest first).

use crate::state::Ordered;
use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use joinery_adapter::lean::{LeanNode, LeanPod};
use joinery_api::{
    NodeClaim, NodeClaimResources, NodeClaimSpec, NodeClassReference, NodeOverlay, NodePool,
    NodeSelectorRequirementWithMinValues,
};
use joinery_core::disruption;
use joinery_core::instance_type::InstanceType;
use joinery_core::labels::{self, LabelPolicy};
use joinery_core::overlay::{self, Overlay};
use joinery_core::scheduling::{self, NewNodeClaim, PendingPod, Placement};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;

use crate::events::Involved;
use crate::metrics::series;
use crate::nodeclass;
use crate::state::NodeClassKey;
use crate::{Context, ControllerError};
use joinery_adapter::assemble::{
    Assembly, BatchStatus, PoolOffer, ProblemObject, Source, assemble,
};
use joinery_adapter::convert;
use joinery_adapter::pods::is_provisionable;
use joinery_adapter::template::nodepool_hash;

/// Provisionable pods trigger a new pass at least this often while they stay pending
/// (upstream re-queues them every 10s).
pub const RETRIGGER: Duration = Duration::from_secs(10);

/// How often the batcher looks at the pod cache while a window is open (simulated).
const BATCH_POLL: Duration = Duration::from_millis(100);

/// Runs the provisioning loop until stopped.
pub async fn run(ctx: Arc<Context>, mut stopped: watch::Receiver<bool>) {
    let mut handled: HashSet<String> = HashSet::new();
    // NodeOverlay problems already logged, so each is logged once while it lasts.
    let mut overlay_problems: BTreeSet<String> = BTreeSet::new();
    let mut last_pass: Option<SystemTime> = None;
    loop {
        if *stopped.borrow() {
            return;
        }
        // Registered before the caches are read, so that no change from here on is missed.
        let changed = ctx.state.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let pending = provisionable_uids(&ctx);
        let now = ctx.clock.now();
        let retrigger = last_pass.is_none_or(|at| crate::util::due(at, now, RETRIGGER));
        let fresh = pending.iter().any(|uid| !handled.contains(uid));
        // CapacityBuffers keep a pass coming at the retrigger interval without pending pods:
        // their room is provisioned again after a burst took it.
        let buffers = ctx
            .state
            .buffers
            .as_ref()
            .is_some_and(|b| !b.capacity_buffers.state().is_empty());
        let buffers_due = retrigger && buffers;
        if !buffers_due && (pending.is_empty() || !(fresh || retrigger)) {
            // With nothing pending and no buffer, only a change can make a pass due.
            let timed = !pending.is_empty() || buffers;
            tokio::select! {
                biased;
                _ = &mut changed => {
                    // Changes come in bursts (a scale-out writes every pod several times):
                    // look again once they had a poll interval to settle, not at each one.
                    tokio::select! {
                        biased;
                        _ = tokio::time::sleep(ctx.clock.to_real(BATCH_POLL)) => {}
                        _ = stopped.changed() => return,
                    }
                }
                _ = tokio::time::sleep(ctx.clock.to_real(Duration::from_secs(1))), if timed => {}
                _ = stopped.changed() => return,
            }
            continue;
        }
        // A batch window: ends after BATCH_IDLE_DURATION without new pods, or BATCH_MAX_DURATION.
        let start = ctx.clock.now();
        let mut last_new = start;
        let mut seen = pending;
        loop {
            tokio::select! {
                biased;
                _ = tokio::time::sleep(ctx.clock.to_real(BATCH_POLL)) => {}
                _ = stopped.changed() => return,
            }
            let now = ctx.clock.now();
            let current = provisionable_uids(&ctx);
            if current.iter().any(|uid| !seen.contains(uid)) {
                last_new = now;
                seen.extend(current);
            }
            if now.duration_since(last_new).unwrap_or_default() >= ctx.settings.batch_idle_duration
                || now.duration_since(start).unwrap_or_default() >= ctx.settings.batch_max_duration
            {
                break;
            }
        }
        match provision(&ctx, &mut overlay_problems).await {
            Ok(true) => {
                handled = seen;
                last_pass = Some(ctx.clock.now());
            }
            Ok(false) => {
                // Not synced yet (a NodeClaim is still launching): try again shortly.
                ctx.sleep(Duration::from_secs(1)).await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "provisioning pass failed; will retry");
                ctx.metrics.reconcile_error("provisioner", &e);
                last_pass = Some(ctx.clock.now());
            }
        }
    }
}

/// The uids of the pods a provisioning pass would consider now: the pending ones from the
/// set the pod watch keeps, and those on deleting nodes.
fn provisionable_uids(ctx: &Context) -> HashSet<String> {
    let mut uids = ctx.state.provisionable.uids();
    uids.extend(
        reschedulable_pods(ctx)
            .iter()
            .map(|p| p.metadata.uid.clone().unwrap_or_default()),
    );
    uids
}

/// Pods that must move because their node is being deleted or disrupted (upstream adds them
/// to every provisioning pass so their replacement capacity is launched before they are
/// evicted): the reschedulable ones ([`joinery_adapter::drain::is_reschedulable`]: active, or
/// terminating StatefulSet pods) not held by a PodDisruptionBudget that allows no disruption.
pub(crate) fn reschedulable_pods(ctx: &Context) -> Vec<Arc<LeanPod>> {
    let deleting = joinery_adapter::drain::deleting_node_names(
        ctx.state.nodes.state().iter().map(Arc::as_ref),
        ctx.state.node_claims.ordered().iter().map(Arc::as_ref),
    );
    if deleting.is_empty() {
        return Vec::new();
    }
    let pdbs = ctx.state.pdbs.ordered();
    ctx.state
        .pods
        .state()
        .into_iter()
        .filter(|p| joinery_adapter::disruption::must_move(p, &deleting, &pdbs))
        .collect()
}

/// Whether every NodeClaim is in the cache and launched (upstream's `Synced`): capacity of
/// claims still launching is unknown, so deciding now could launch twice.
pub(crate) fn synced(ctx: &Context) -> bool {
    let claims = ctx.state.node_claims.ordered();
    let names: BTreeSet<String> = claims
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    if ctx.inflight.created_not_cached(&names) {
        return false;
    }
    claims.iter().all(|c| {
        c.metadata.deletion_timestamp.is_some()
            || c.status.as_ref().is_some_and(|s| s.provider_id.is_some())
    })
}

/// One provisioning pass. Returns `Ok(false)` when the state is not synced yet.
/// `overlay_problems` holds the NodeOverlay problems already reported (each is logged once
/// while it lasts).
pub async fn provision(
    ctx: &Context,
    overlay_problems: &mut BTreeSet<String>,
) -> Result<bool, ControllerError> {
    if !synced(ctx) {
        return Ok(false);
    }
    let cached = ctx.state.objects();
    let all_pods = &cached.pods;
    let moving = reschedulable_pods(ctx);
    let pending: Vec<&LeanPod> = all_pods
        .iter()
        .filter(|p| is_provisionable(p))
        .chain(moving.iter())
        .map(|p| p.as_ref())
        .collect();
    // CapacityBuffers (read only with the gate on): their virtual pods join every pass.
    let buffer_objects = crate::buffers::BufferObjects::read(ctx.state.buffers.as_ref());
    let buffer_refs = buffer_objects.refs();
    let buffer_states = buffer_refs.states();
    if pending.is_empty() && buffer_states.is_empty() {
        return Ok(true);
    }
    let overlays = current_overlays(ctx, overlay_problems).await;
    let (pools, unresolved) = ready_nodepools(ctx).await;
    if unresolved {
        // A NodeClass has not been resolved yet (just created): wait for it rather than
        // deciding without its NodePools.
        return Ok(false);
    }
    let objects = cached.lend();
    let offers: Vec<PoolOffer<'_>> = pools
        .iter()
        .map(|(pool, types)| PoolOffer {
            pool: pool.as_ref(),
            instance_types: types,
        })
        .collect();
    let assembly = assemble(
        &objects,
        &pending,
        &offers,
        &overlays,
        LabelPolicy::default(),
        Source::Cluster,
    );
    for problem in &assembly.problems {
        match problem.object {
            ProblemObject::DaemonSet(_) => {
                tracing::warn!(error = %problem.message, "DaemonSet ignored for overhead")
            }
            ProblemObject::NodePool(i) => {
                tracing::warn!(nodepool = pools[i].0.metadata.name.as_deref().unwrap_or(""), error = %problem.message, "NodePool skipped or left without limits")
            }
        }
    }
    let mut pod_objects: BTreeMap<(String, String), &LeanPod> = BTreeMap::new();
    for (pod, batch) in pending.iter().zip(&assembly.pods) {
        match &batch.status {
            BatchStatus::Scheduled(_) => {
                pod_objects.insert((batch.key.namespace.clone(), batch.key.name.clone()), pod);
            }
            BatchStatus::Refused(message) => {
                ctx.events
                    .warning(&Involved::pod(pod), "FailedScheduling", message)
                    .await
            }
        }
    }
    let Assembly {
        mut input,
        mut context,
        ..
    } = assembly;
    input
        .pods
        .extend(joinery_adapter::buffers::virtual_pods(&buffer_states));
    if input.pods.is_empty() {
        crate::buffers::write_status(ctx, &buffer_states, None).await;
        return Ok(true);
    }
    apply_default_spread(ctx, &mut input.pods, &pod_objects);
    if input.nodepools.is_empty() {
        // Upstream's words, then why the NodePools there are do not count (not Ready, and
        // what holds each back).
        let mut message = "no dynamic nodepools found".to_string();
        for pool in ctx.state.node_pools.ordered() {
            if pool.metadata.deletion_timestamp.is_none()
                && !pool.spec.is_static()
                && let Some(why) = joinery_adapter::template::not_ready(&pool)
            {
                message.push_str("; ");
                message.push_str(&why);
            }
        }
        for pod in pod_objects.values() {
            ctx.events
                .warning(&Involved::pod(pod), "FailedScheduling", &message)
                .await;
        }
        crate::buffers::write_status(ctx, &buffer_states, None).await;
        return Ok(true);
    }
    let pools_by_name: BTreeMap<String, &NodePool> = pools
        .iter()
        .map(|(pool, _)| {
            (
                pool.metadata.name.clone().unwrap_or_default(),
                pool.as_ref(),
            )
        })
        .collect();
    let started = std::time::Instant::now();
    context.preference_policy = preference_policy(ctx);
    context.min_values_policy = min_values_policy(ctx);
    let scheduling_id = format!(
        "{:x}",
        ctx.clock
            .now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis()
    );
    ctx.metrics.scheduler_queue_depth.replace([(
        series::SchedulingQueue {
            controller: "provisioner".into(),
            scheduling_id,
        },
        input.pods.len() as f64,
    )]);
    let result = scheduling::schedule_with_context(&input, &context, None);
    ctx.metrics.scheduler_queue_depth.clear();
    ctx.metrics.scheduler_scheduling_duration.observe(
        &series::Controller {
            controller: "provisioner".into(),
        },
        started.elapsed().as_secs_f64(),
    );
    let duration_ms = started.elapsed().as_secs_f64() * 1000.0;
    if result.new_claims.is_empty() {
        tracing::debug!(
            pods = input.pods.len(),
            duration_ms,
            "computed scheduling decision: nothing to launch"
        );
    } else {
        tracing::info!(
            pods = input.pods.len(),
            new_nodeclaims = result.new_claims.len(),
            duration_ms,
            "computed scheduling decision"
        );
    }
    // Nodes and in-flight claims chosen for pending pods are kept from disruption for the
    // nomination window (pods still pending renominate them on every pass).
    let now = ctx.clock.now();
    let nominated_until = now + disruption::nomination_window(ctx.settings.batch_max_duration);
    // Only real pods nominate: a buffer's node stays open to drift and expiration (its
    // emptiness is kept by disruption's own simulation of the buffer).
    let chosen = input
        .pods
        .iter()
        .zip(&result.placements)
        .filter(|(pod, _)| pod.capacity_buffer.is_none())
        .filter_map(|(_, p)| match &p.placement {
            Placement::Existing { node } => Some(node.as_str()),
            _ => None,
        });
    ctx.inflight.nominate(chosen, now, nominated_until);
    for placement in &result.placements {
        let Some(pod) =
            pod_objects.get(&(placement.key.namespace.clone(), placement.key.name.clone()))
        else {
            continue;
        };
        if let Placement::Unschedulable { reason } = &placement.placement {
            ctx.events
                .warning(
                    &Involved::pod(pod),
                    "FailedScheduling",
                    &format!("Failed to schedule pod, {reason}"),
                )
                .await;
        }
    }
    // Pods placed on existing nodes and in-flight NodeClaims get upstream's `Nominated` event
    // too, naming the NodeClaim and the Node (repeats within the window are dropped).
    let mut targets: BTreeMap<&str, String> = BTreeMap::new();
    for placement in &result.placements {
        let Placement::Existing { node } = &placement.placement else {
            continue;
        };
        let Some(pod) =
            pod_objects.get(&(placement.key.namespace.clone(), placement.key.name.clone()))
        else {
            continue;
        };
        let target = targets.entry(node.as_str()).or_insert_with(|| {
            nomination_target(node, ctx.state.node(node).as_deref(), &cached.node_claims)
        });
        ctx.events
            .normal(
                &Involved::pod(pod),
                "Nominated",
                &format!("Pod should schedule on: {target}"),
            )
            .await;
    }
    if !buffer_states.is_empty() {
        let outcomes = joinery_core::buffers::assess(&input, &context, &result);
        crate::buffers::write_status(ctx, &buffer_states, Some(&outcomes)).await;
    }
    for (index, claim) in result.new_claims.iter().enumerate() {
        let Some(pool) = pools_by_name.get(&claim.spec.nodepool) else {
            continue;
        };
        match create_node_claim(ctx, pool, claim).await {
            Ok(created) => {
                let created_name = created.metadata.name.clone().unwrap_or_default();
                tracing::info!(nodeclaim = %created_name, nodepool = %claim.spec.nodepool, pods = claim.pods.len(),
                    instance_types = claim.spec.instance_types.len(), requests = %claim.spec.requests, "created nodeclaim");
                for key in &claim.pods {
                    if let Some(pod) = pod_objects.get(&(key.namespace.clone(), key.name.clone())) {
                        ctx.events
                            .normal(
                                &Involved::pod(pod),
                                "Nominated",
                                &format!("Pod should schedule on: nodeclaim/{created_name}"),
                            )
                            .await;
                    }
                }
                ctx.metrics.nodeclaims_created.inc(&series::ReasonNodePool {
                    reason: "provisioned".into(),
                    nodepool: claim.spec.nodepool.clone(),
                });
                ctx.inflight
                    .nominate([created_name.as_str()], now, nominated_until);
                ctx.inflight.record_created(created);
            }
            Err(e) => {
                tracing::warn!(index, nodepool = %claim.spec.nodepool, error = %e, "creating nodeclaim failed")
            }
        }
    }
    Ok(true)
}

/// What upstream's `Nominated` event names for a pod placed on the existing node or
/// in-flight NodeClaim `name` (the name a pass gives it: the Node's, or the NodeClaim's while
/// it has no Node): `nodeclaim/<claim>, node/<node>`, either part left out when there is none.
fn nomination_target(name: &str, node: Option<&LeanNode>, claims: &[Arc<NodeClaim>]) -> String {
    let claim = match node {
        Some(node) => {
            let provider_id = node.provider_id();
            claims.iter().find(|c| {
                c.status.as_ref().is_some_and(|s| {
                    s.node_name.as_deref() == Some(name)
                        || (provider_id.is_some() && s.provider_id.as_deref() == provider_id)
                })
            })
        }
        None => claims
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name)),
    };
    let claim = claim
        .and_then(|c| c.metadata.name.as_deref())
        .map(|c| format!("nodeclaim/{c}"));
    let node = node.map(|_| format!("node/{name}"));
    let parts: Vec<String> = claim.into_iter().chain(node).collect();
    if parts.is_empty() {
        format!("nodeclaim/{name}")
    } else {
        parts.join(", ")
    }
}

/// `PREFERENCE_POLICY` in the core's form.
pub(crate) fn preference_policy(ctx: &Context) -> scheduling::PreferencePolicy {
    match ctx.settings.preference_policy {
        crate::settings::PreferencePolicy::Respect => scheduling::PreferencePolicy::Respect,
        crate::settings::PreferencePolicy::Ignore => scheduling::PreferencePolicy::Ignore,
    }
}

/// `MIN_VALUES_POLICY` in the core's form.
pub(crate) fn min_values_policy(ctx: &Context) -> scheduling::MinValuesPolicy {
    match ctx.settings.min_values_policy {
        crate::settings::MinValuesPolicy::Strict => scheduling::MinValuesPolicy::Strict,
        crate::settings::MinValuesPolicy::BestEffort => scheduling::MinValuesPolicy::BestEffort,
    }
}

/// Gives the batch's pods without spread constraints of their own `SCHEDULER_CONFIG`'s default
/// constraints, with the selector kube-scheduler would deduce (see [`joinery_adapter::spread`]).
fn apply_default_spread(
    ctx: &Context,
    pods: &mut [PendingPod],
    objects: &BTreeMap<(String, String), &LeanPod>,
) {
    let (defaults, Some(stores)) = (&ctx.settings.default_spread, &ctx.state.selectors) else {
        return;
    };
    if defaults.is_empty() {
        return;
    }
    let (services, replica_sets, stateful_sets, controllers) = (
        stores.services.ordered(),
        stores.replica_sets.ordered(),
        stores.stateful_sets.ordered(),
        stores.replication_controllers.ordered(),
    );
    let services: Vec<&k8s_openapi::api::core::v1::Service> =
        services.iter().map(|s| s.as_ref()).collect();
    let replica_sets: Vec<&k8s_openapi::api::apps::v1::ReplicaSet> =
        replica_sets.iter().map(|s| s.as_ref()).collect();
    let stateful_sets: Vec<&k8s_openapi::api::apps::v1::StatefulSet> =
        stateful_sets.iter().map(|s| s.as_ref()).collect();
    let controllers: Vec<&k8s_openapi::api::core::v1::ReplicationController> =
        controllers.iter().map(|s| s.as_ref()).collect();
    let sources = joinery_adapter::spread::SelectorSources {
        services: &services,
        replica_sets: &replica_sets,
        stateful_sets: &stateful_sets,
        replication_controllers: &controllers,
    };
    joinery_adapter::spread::apply_to_batch(pods, defaults, sources, |pod| {
        objects
            .get(&(pod.key.namespace.clone(), pod.key.name.clone()))
            .copied()
    });
}

/// The NodeOverlays a provisioning pass applies, and the ones it skips.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OverlaySet {
    /// The overlays that convert, in name order.
    pub overlays: Vec<Overlay>,
    /// Overlays that cannot be used, by name, with the reason (naming the field).
    pub invalid: Vec<(String, String)>,
    /// Pairs of overlays of equal weight that can set the same price or resource (the first
    /// of each pair wins; upstream marks both `ValidationSucceeded=False`).
    pub conflicts: Vec<(String, String)>,
}

/// Converts NodeOverlay objects for the scheduler. An overlay that does not convert is left
/// out (the others still apply) and listed in [`OverlaySet::invalid`]; it is never fatal.
pub fn usable_overlays<O: Borrow<NodeOverlay>>(objects: &[O]) -> OverlaySet {
    let mut set = OverlaySet::default();
    let mut objects: Vec<&NodeOverlay> = objects.iter().map(Borrow::borrow).collect();
    objects.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    for o in objects {
        if o.metadata.deletion_timestamp.is_some() {
            continue;
        }
        match convert::overlay(o) {
            Ok(overlay) => set.overlays.push(overlay),
            Err(reason) => set
                .invalid
                .push((o.metadata.name.clone().unwrap_or_default(), reason)),
        }
    }
    set.conflicts = overlay::conflicts(&set.overlays);
    set
}

/// The NodeOverlays to apply in this pass: none unless the `NodeOverlay` feature gate is on.
/// Skipped and conflicting overlays are reported (a warning log the first time a problem is
/// seen, and a `FailedValidation` warning event on a skipped overlay).
pub(crate) async fn current_overlays(
    ctx: &Context,
    reported: &mut BTreeSet<String>,
) -> Vec<Overlay> {
    let Some(store) = ctx
        .state
        .node_overlays
        .as_ref()
        .filter(|_| ctx.settings.feature_gates.node_overlay)
    else {
        return Vec::new();
    };
    let objects = store.ordered();
    let set = usable_overlays(&objects);
    let mut problems = Vec::new();
    for (name, reason) in &set.invalid {
        problems.push(format!("NodeOverlay {name} skipped: {reason}"));
        if let Some(o) = objects
            .iter()
            .find(|o| o.metadata.name.as_deref() == Some(name.as_str()))
        {
            ctx.events
                .warning(
                    &Involved::of(o.as_ref()),
                    "FailedValidation",
                    &format!("NodeOverlay skipped: {reason}"),
                )
                .await;
        }
    }
    for (a, b) in &set.conflicts {
        problems.push(format!(
            "NodeOverlays {a} and {b} have the same weight and can match the same instance types; {a} takes precedence"
        ));
    }
    reported.retain(|p| problems.contains(p));
    for problem in problems {
        if reported.insert(problem.clone()) {
            tracing::warn!(problem = %problem, "NodeOverlay problem");
        }
    }
    set.overlays
}

/// Ready, dynamic NodePools with their NodeClasses' instance types (capacity learned from
/// joined nodes in place of the estimate, before NodeOverlays), by name. Also says whether
/// some NodePool's NodeClass has never been resolved yet.
pub(crate) async fn ready_nodepools(
    ctx: &Context,
) -> (Vec<(Arc<NodePool>, Arc<Vec<InstanceType>>)>, bool) {
    let mut out = Vec::new();
    let mut unresolved = false;
    // By name (NodePools are cluster-scoped).
    let pools = ctx.state.node_pools.ordered();
    for pool in pools {
        let name = pool.metadata.name.clone().unwrap_or_default();
        if pool.metadata.deletion_timestamp.is_some() || pool.spec.is_static() {
            continue;
        }
        if let Some(why) = joinery_adapter::template::not_ready(&pool) {
            tracing::debug!(nodepool = %name, "{why}");
            continue;
        }
        let class_ref = &pool.spec.template.spec.node_class_ref;
        let key = NodeClassKey {
            group: class_ref.group.clone(),
            kind: class_ref.kind.clone(),
        };
        let Some(class) = ctx.state.node_class(&key, &class_ref.name) else {
            tracing::debug!(nodepool = %name, "NodeClass not found; NodePool skipped");
            continue;
        };
        if !nodeclass::is_resolved(&class) {
            unresolved = true;
            continue;
        }
        if !nodeclass::is_ready(&class) {
            ctx.events
                .warning(
                    &Involved::of(pool.as_ref()),
                    "NodeClassNotReady",
                    &format!("NodeClass {} is not ready", class_ref.name),
                )
                .await;
            continue;
        }
        match ctx.cloud.instance_types(&class).await {
            Ok(types) => out.push((pool, types)),
            Err(e) => {
                tracing::warn!(nodepool = %name, error = %e, "cannot list instance types; NodePool skipped")
            }
        }
    }
    (out, unresolved)
}

/// `values` in the order of `ranked` (cheapest first), then any `ranked` does not list, in
/// their own order: the same set, ordered by price.
fn cheapest_first(values: &[String], ranked: &[String]) -> Vec<String> {
    let wanted: BTreeSet<&str> = values.iter().map(String::as_str).collect();
    let mut out: Vec<String> = ranked
        .iter()
        .filter(|n| wanted.contains(n.as_str()))
        .cloned()
        .collect();
    let placed: BTreeSet<String> = out.iter().cloned().collect();
    out.extend(values.iter().filter(|v| !placed.contains(*v)).cloned());
    out
}

pub(crate) async fn create_node_claim(
    ctx: &Context,
    pool: &NodePool,
    claim: &NewNodeClaim,
) -> Result<NodeClaim, ControllerError> {
    let spec = &claim.spec;
    let pool_name = pool.metadata.name.clone().unwrap_or_default();
    let mut annotations = spec.annotations.clone();
    annotations.insert(labels::NODEPOOL_HASH_ANNOTATION.into(), nodepool_hash(pool));
    annotations.insert(
        labels::NODEPOOL_HASH_VERSION_ANNOTATION.into(),
        labels::NODEPOOL_HASH_VERSION.into(),
    );
    let mut claim_labels = spec.labels.clone();
    claim_labels.insert(labels::NODEPOOL_LABEL.into(), pool_name.clone());
    claim_labels.insert(
        spec.node_class_ref.label_key(),
        spec.node_class_ref.name.clone(),
    );
    let requirements: Vec<NodeSelectorRequirementWithMinValues> = spec
        .requirements
        .iter()
        .flat_map(|r| r.to_node_selector())
        .map(|n| {
            // The instance types cheapest first (the order plugins may launch in, as the WIT
            // contract says), not in the requirement's set order; same values either way.
            let values = if n.key == labels::INSTANCE_TYPE_LABEL
                && n.operator == joinery_core::requirements::Operator::In
            {
                cheapest_first(&n.values, &spec.instance_types)
            } else {
                n.values
            };
            NodeSelectorRequirementWithMinValues {
                key: n.key,
                operator: n.operator,
                values: (!values.is_empty()).then_some(values),
                min_values: n.min_values.map(|m| m as i64),
            }
        })
        .collect();
    let template = &pool.spec.template.spec;
    let object = NodeClaim {
        metadata: ObjectMeta {
            generate_name: Some(format!("{pool_name}-")),
            labels: Some(claim_labels),
            annotations: Some(annotations),
            finalizers: Some(vec![labels::TERMINATION_FINALIZER.to_string()]),
            owner_references: Some(vec![OwnerReference {
                api_version: "karpenter.sh/v1".into(),
                kind: "NodePool".into(),
                name: pool_name.clone(),
                uid: pool.metadata.uid.clone().unwrap_or_default(),
                block_owner_deletion: Some(true),
                controller: None,
            }]),
            ..Default::default()
        },
        spec: NodeClaimSpec {
            taints: (!spec.taints.is_empty())
                .then(|| spec.taints.iter().map(convert::taint_to_k8s).collect()),
            startup_taints: (!spec.startup_taints.is_empty()).then(|| {
                spec.startup_taints
                    .iter()
                    .map(convert::taint_to_k8s)
                    .collect()
            }),
            requirements,
            resources: Some(NodeClaimResources {
                requests: Some(convert::to_resource_list(&spec.requests)),
            }),
            node_class_ref: NodeClassReference::new(
                spec.node_class_ref.group.clone(),
                spec.node_class_ref.kind.clone(),
                spec.node_class_ref.name.clone(),
            ),
            termination_grace_period: template.termination_grace_period.clone(),
            expire_after: template.expire_after.clone(),
        },
        status: None,
    };
    Ok(Api::<NodeClaim>::all(ctx.client.clone())
        .create(&PostParams::default(), &object)
        .await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use joinery_core::requirements::Requirements;
    use serde_json::json;

    fn of<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    fn overlay(name: &str, spec: serde_json::Value) -> NodeOverlay {
        of(
            json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": name}, "spec": spec}),
        )
    }

    #[test]
    fn a_nomination_names_the_nodeclaim_and_the_node() {
        let claim = |name: &str, node: Option<&str>, provider: &str| -> Arc<NodeClaim> {
            Arc::new(of(
                json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": name},
                "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []},
                "status": {"nodeName": node, "providerID": provider}}),
            ))
        };
        let node = |name: &str, provider: &str| -> LeanNode {
            of(json!({"metadata": {"name": name}, "spec": {"providerID": provider}}))
        };
        let claims = [
            claim("default-abcde", Some("node-1"), "sim://1"),
            claim("default-fghij", None, "sim://2"),
        ];
        // A registered node: its claim, then the node (upstream's order).
        assert_eq!(
            nomination_target("node-1", Some(&node("node-1", "sim://1")), &claims),
            "nodeclaim/default-abcde, node/node-1"
        );
        // A node whose claim has not recorded its name yet is matched by provider ID.
        assert_eq!(
            nomination_target("node-2", Some(&node("node-2", "sim://2")), &claims),
            "nodeclaim/default-fghij, node/node-2"
        );
        // An in-flight claim without a node, and a node no claim manages.
        assert_eq!(
            nomination_target("default-fghij", None, &claims),
            "nodeclaim/default-fghij"
        );
        assert_eq!(
            nomination_target("static-1", Some(&node("static-1", "static://1")), &claims),
            "node/static-1"
        );
    }

    #[test]
    fn instance_type_values_are_written_cheapest_first() {
        let values: Vec<String> = ["c3-16", "c3-4", "c3-8"].map(String::from).into();
        let ranked: Vec<String> = ["c3-4", "c3-8", "c3-16", "c3-32"].map(String::from).into();
        assert_eq!(
            cheapest_first(&values, &ranked),
            ["c3-4", "c3-8", "c3-16"],
            "ranked order, only the requirement's values"
        );
        let unranked: Vec<String> = ["b", "a"].map(String::from).into();
        assert_eq!(
            cheapest_first(&unranked, &["a".to_string()]),
            ["a", "b"],
            "values missing from the ranking keep their place after"
        );
    }

    #[test]
    fn invalid_overlays_are_skipped_and_named_while_the_others_apply() {
        let objects = vec![
            Arc::new(overlay(
                "cheap-large",
                json!({"requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["large"]}], "price": "0.01"}),
            )),
            Arc::new(overlay(
                "both-prices",
                json!({"requirements": [], "price": "1", "priceAdjustment": "+1"}),
            )),
        ];
        let set = usable_overlays(&objects);
        assert_eq!(
            set.overlays
                .iter()
                .map(|o| o.name.as_str())
                .collect::<Vec<_>>(),
            ["cheap-large"]
        );
        assert_eq!(set.invalid.len(), 1);
        assert_eq!(set.invalid[0].0, "both-prices");
        assert!(
            set.invalid[0]
                .1
                .contains("spec.price and spec.priceAdjustment cannot both be set"),
            "{:?}",
            set.invalid
        );
        assert!(set.conflicts.is_empty());

        // Applied to a NodePool's types, the overlay makes the large type the cheaper one.
        let (catalog, _) = joinery_adapter::snapshot::read_catalog(
            "- {name: small, cpu: 2, memory: 4Gi, offerings: [{zone: a, capacityType: on-demand, price: 0.1}]}\n\
             - {name: large, cpu: 8, memory: 32Gi, offerings: [{zone: a, capacityType: on-demand, price: 0.4}]}\n",
        )
        .unwrap();
        let types = overlay::apply_overlays(&catalog, &Requirements::new(), &set.overlays);
        let price = |name: &str| {
            types
                .iter()
                .find(|t| t.name() == name)
                .unwrap()
                .offerings()
                .cheapest()
                .unwrap()
                .price()
                .unwrap()
        };
        assert_eq!(price("large"), 0.01);
        assert_eq!(
            price("small"),
            0.1,
            "types the overlay does not match keep their price"
        );
    }

    #[test]
    fn equal_weight_price_overlays_on_the_same_types_conflict() {
        let objects = [
            overlay("a", json!({"requirements": [], "priceAdjustment": "-10%"})),
            overlay("b", json!({"requirements": [], "price": "0.5"})),
        ];
        let set = usable_overlays(&objects);
        assert_eq!(set.overlays.len(), 2);
        assert_eq!(
            set.conflicts,
            [("b".to_string(), "a".to_string())],
            "ties go to the name sorted last, as upstream"
        );
    }
}
