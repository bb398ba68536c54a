//! The NodeClaim lifecycle: finalizer → launch → registration → initialization, liveness
//! timeouts, expiration (`expireAfter`), and finalization of deleted claims (Node gone,
//! instance deleted until the cloud says `not-found`, finalizer off). The launch itself (the
//! userData, the cloud's create, a failed launch) is in the `launch` module.

use crate::state::Ordered;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use joinery_adapter::convert;
use joinery_adapter::lean::{LeanNode, WatchedNode};
use joinery_api::{ConditionStatus, HasConditions, NodeClaim};
use joinery_core::backoff::BackoffPolicy;
use joinery_core::labels;
use joinery_core::lifecycle::{self, Action, ClaimView, FinalizationStep, NodeView, Timeouts};
use joinery_core::resources::Unit;
use joinery_runtime::CallError;
use joinery_runtime::contract::{self, CloudError};
use joinery_runtime::manifest::{NodeBootstrap, PluginKind};
use k8s_openapi::api::core::v1::Taint;
use kube::api::{Api, DeleteParams};
use serde_json::json;
use tokio::sync::watch;

use crate::bootstrap::{ClusterInfo, DEFAULT_RENDERER, NodeClassBootstrap, render_context};
use crate::cloud::{group_kind, plugin_node_class};
use crate::events::Involved;
use crate::state::NodeClassKey;
use crate::util::{self, condition, merge_patch, system_time};
use crate::writes;
use crate::{CloudCall, Context, ControllerError};

use conditions::*;
use launch::{find_instance_of, launch};

mod launch;

/// Condition types of a NodeClaim (upstream's exact strings).
pub use joinery_adapter::conditions;

/// Backoff of a failed cloud call (create, delete, get, list, reconcile-instance): 1 s,
/// doubling to 30 s, or the cloud's `Retry-After` when that is longer.
pub const CLOUD_BACKOFF: BackoffPolicy = BackoffPolicy {
    base: Duration::from_secs(1),
    max: Duration::from_secs(30),
};

/// The controller name cloud calls of this loop are counted under.
const CONTROLLER: &str = "nodeclaim.lifecycle";

/// How many NodeClaims the lifecycle loop reconciles at once.
pub const MAX_CONCURRENT_RECONCILES: usize = 64;

/// Runs the lifecycle loop. Each NodeClaim is reconciled in its own task (one at a time per
/// claim, [`MAX_CONCURRENT_RECONCILES`] at once), so a create that hangs until its deadline
/// delays neither other launches nor timeouts nor finalization.
pub async fn run(ctx: Arc<Context>, stopped: watch::Receiver<bool>) {
    let reconciled = Arc::new(Reconciled::default());
    let idle = Arc::new(Idle::default());
    util::run_keyed_loop(
        ctx,
        stopped,
        "nodeclaim.lifecycle",
        MAX_CONCURRENT_RECONCILES,
        move |ctx, workers| step(ctx, workers, reconciled.clone(), idle.clone()),
    )
    .await;
}

/// Set when the last step found every claim [`settled`]: the caches' change count then, and
/// the earliest moment one of them expires. While no cache changes and that moment has not
/// come, a step would find them all settled again, so it looks at none.
type Idle = std::sync::Mutex<crate::mirror::Unchanged>;

/// The NodeClass (UID, generation) each launched NodeClaim's instance was last reconciled
/// with (`reconcile-instance`), by NodeClaim UID: this loop's own memory.
type Reconciled = std::sync::Mutex<std::collections::HashMap<String, (String, i64)>>;

async fn step(
    ctx: Arc<Context>,
    workers: Arc<util::KeyedWorkers>,
    reconciled: Arc<Reconciled>,
    idle: Arc<Idle>,
) -> Result<(), ControllerError> {
    let now = ctx.clock.now();
    // Read before the caches: a change from here on makes the next step look.
    let generation = ctx.state.changed.generation();
    if idle
        .lock()
        .expect("lifecycle idle lock")
        .holds(generation, now)
    {
        return Ok(());
    }
    // By name (claims are cluster-scoped).
    let claims = ctx.state.node_claims.ordered();
    let mut all_settled = true;
    let mut next_expiry: Option<std::time::SystemTime> = None;
    for claim in claims {
        // Most claims, most of the time: no task is started for nothing.
        if settled(&ctx, &claim, &reconciled, now) {
            if let Some(at) = expires_at(&claim) {
                next_expiry = Some(next_expiry.map_or(at, |earliest| earliest.min(at)));
            }
            continue;
        }
        all_settled = false;
        let key = claim
            .metadata
            .uid
            .clone()
            .or_else(|| claim.metadata.name.clone())
            .unwrap_or_default();
        let (ctx, reconciled) = (ctx.clone(), reconciled.clone());
        workers
            .spawn(
                key,
                async move { reconcile(&ctx, &claim, &reconciled).await },
            )
            .await;
    }
    idle.lock()
        .expect("lifecycle idle lock")
        .record(all_settled, generation, next_expiry);
    Ok(())
}

/// Whether reconciling `claim` at `now` would do nothing: the state machine's checks in its
/// order ([`lifecycle::next_action`]: finalizer, expiration, launched, registered,
/// initialized) leave only instance reconciliation, and that is done for its NodeClass's
/// current generation.
fn settled(
    ctx: &Context,
    claim: &NodeClaim,
    reconciled: &Reconciled,
    now: std::time::SystemTime,
) -> bool {
    let meta = &claim.metadata;
    meta.deletion_timestamp.is_none()
        && meta
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == labels::TERMINATION_FINALIZER)
        && expires_at(claim).is_none_or(|at| now < at)
        && claim.is_condition_true(LAUNCHED)
        && claim.is_condition_true(REGISTERED)
        && claim.is_condition_true(INITIALIZED)
        && instance_due(ctx, claim, reconciled).is_none()
}

fn claims(ctx: &Context) -> Api<NodeClaim> {
    Api::all(ctx.client.clone())
}

/// The core's view of a claim (conditions, timestamps, taints, requests) for the state machine.
/// The NodeClass and the create backoff are only looked up for a claim not launched yet (the
/// only one the state machine asks them for), so a pass over launched claims reads neither.
fn claim_view(ctx: &Context, claim: &NodeClaim) -> ClaimView {
    let key = class_key(claim);
    let launched = claim.is_condition_true(LAUNCHED);
    let (node_class_found, create_backoff) = if launched {
        (true, None)
    } else {
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let backoff = ctx
            .cloud
            .plugin_for(&key.group, &key.kind)
            .ok()
            .and_then(|plugin| ctx.cloud_wait(&CloudCall::new(plugin.name(), "create", &uid)));
        (
            ctx.state
                .node_class(&key, &claim.spec.node_class_ref.name)
                .is_some(),
            backoff,
        )
    };
    ClaimView {
        deleting: claim.metadata.deletion_timestamp.is_some(),
        has_finalizer: claim
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == labels::TERMINATION_FINALIZER),
        created: claim.metadata.creation_timestamp.as_ref().map(system_time),
        expire_after: claim.spec.effective_expire_after().duration(),
        launched,
        launched_at: claim
            .condition(LAUNCHED)
            .map(|c| system_time(&c.last_transition_time)),
        registered: claim.is_condition_true(REGISTERED),
        initialized: claim.is_condition_true(INITIALIZED),
        provider_id: claim.status.as_ref().and_then(|s| s.provider_id.clone()),
        node_class_found,
        create_backoff,
        startup_taints: convert::taints(claim.spec.startup_taints.as_ref()),
        requested_resources: claim_requests(claim)
            .filter(|(resource, quantity)| Unit::of(resource).parse(&quantity.0).unwrap_or(0) > 0)
            .map(|(resource, _)| resource.clone())
            .collect(),
    }
}

/// The resources a claim's pods requested.
fn claim_requests(
    claim: &NodeClaim,
) -> impl Iterator<
    Item = (
        &String,
        &k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    ),
> {
    claim
        .spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .into_iter()
        .flatten()
}

/// The core's view of a Node: readiness, taints, advertised resources.
fn node_view(node: &LeanNode) -> NodeView {
    NodeView {
        name: node.name().to_string(),
        deleting: node.metadata.deletion_timestamp.is_some(),
        ready: node.is_ready(),
        taints: convert::taints(node.spec.as_ref().and_then(|s| s.taints.as_deref())),
        allocatable_resources: node
            .allocatable()
            .into_iter()
            .flatten()
            .filter(|(resource, quantity)| Unit::of(resource).parse(&quantity.0).unwrap_or(0) > 0)
            .map(|(resource, _)| resource.clone())
            .collect(),
    }
}

/// The Nodes the claim's state machine looks at: those with its provider ID once it has one
/// and is not registered; its registered Node until it is initialized; none afterwards.
fn claim_nodes(ctx: &Context, claim: &NodeClaim, view: &ClaimView) -> Vec<NodeView> {
    if view.initialized {
        return Vec::new(); // nothing left that needs the Node
    }
    if view.registered {
        let name = claim
            .status
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        return ctx
            .state
            .node(&name)
            .map(|n| vec![node_view(&n)])
            .unwrap_or_default();
    }
    match &view.provider_id {
        Some(provider_id) => ctx
            .state
            .nodes_with_provider_id(provider_id)
            .iter()
            .map(|n| node_view(n))
            .collect(),
        None => Vec::new(),
    }
}

/// Asks the core's state machine what to do next with `claim`, and does it.
async fn reconcile(
    ctx: &Context,
    claim: &NodeClaim,
    reconciled: &Reconciled,
) -> Result<(), ControllerError> {
    let name = claim.metadata.name.clone().unwrap_or_default();
    if claim.metadata.deletion_timestamp.is_some() {
        return finalize(ctx, claim, reconciled).await;
    }
    let view = claim_view(ctx, claim);
    let nodes = claim_nodes(ctx, claim, &view);
    let timeouts = Timeouts {
        launch: ctx.settings.launch_timeout,
        registration: ctx.settings.registration_timeout,
    };
    let involved = Involved::of(claim);
    match lifecycle::next_action(&view, &nodes, ctx.clock.now(), timeouts) {
        Action::AddFinalizer => {
            writes::edit_finalizers(&claims(ctx), claim, |finalizers| {
                let missing = !finalizers
                    .iter()
                    .any(|f| f == labels::TERMINATION_FINALIZER);
                if missing {
                    finalizers.push(labels::TERMINATION_FINALIZER.to_string());
                }
                missing
            })
            .await?;
            Ok(())
        }
        Action::Expire => expire(ctx, claim).await,
        Action::LaunchTimedOut => {
            tracing::info!(nodeclaim = %name, "launch timed out; deleting the NodeClaim");
            ctx.events
                .warning(
                    &involved,
                    "LaunchTimeout",
                    "NodeClaim was not launched within the launch timeout",
                )
                .await;
            delete_claim(ctx, &name).await
        }
        Action::NodeClassMissing => {
            let message = format!(
                "{} {} not found",
                claim.spec.node_class_ref.kind, claim.spec.node_class_ref.name
            );
            write_status(
                ctx,
                claim,
                vec![condition(
                    ctx,
                    LAUNCHED,
                    ConditionStatus::Unknown,
                    "NodeClassNotFound",
                    message,
                )],
                json!({}),
            )
            .await
        }
        // Adopting an instance a lost create left needs no create call: only the call itself waits.
        Action::LaunchBackingOff(_) => launch(ctx, claim, true).await,
        Action::Launch => launch(ctx, claim, false).await,
        Action::RegistrationTimedOut => {
            tracing::info!(nodeclaim = %name, "registration timed out; deleting the NodeClaim");
            ctx.events
                .warning(
                    &involved,
                    "RegistrationTimeout",
                    "no Node registered within the registration timeout",
                )
                .await;
            delete_claim(ctx, &name).await
        }
        Action::AwaitRegistration { conflict, waiting } => {
            if !conflict {
                identify_node(ctx, claim, &view).await?;
            }
            let status = if conflict {
                ConditionStatus::False
            } else {
                ConditionStatus::Unknown
            };
            write_status(
                ctx,
                claim,
                vec![condition(
                    ctx,
                    REGISTERED,
                    status,
                    waiting.reason,
                    waiting.message,
                )],
                json!({}),
            )
            .await
        }
        Action::Idle => Ok(()),
        Action::Register { node } => register(ctx, claim, &node).await,
        Action::AwaitInitialization(waiting) => {
            let update = condition(
                ctx,
                INITIALIZED,
                ConditionStatus::Unknown,
                waiting.reason,
                waiting.message,
            );
            write_status(ctx, claim, vec![update], json!({})).await
        }
        Action::Initialize { node } => {
            initialize(ctx, claim, &node).await?;
            reconcile_instance(ctx, claim, reconciled).await
        }
        Action::ReconcileInstance => reconcile_instance(ctx, claim, reconciled).await,
    }
}

/// When a NodeClaim expires: its creation time plus its `expireAfter` (720h when unset;
/// `None` for `Never`).
pub fn expires_at(claim: &NodeClaim) -> Option<std::time::SystemTime> {
    lifecycle::expires_at(&ClaimView {
        created: claim.metadata.creation_timestamp.as_ref().map(system_time),
        expire_after: claim.spec.effective_expire_after().duration(),
        ..ClaimView::default()
    })
}

/// Expiration, upstream's forceful disruption: the claim is deleted at once — no budgets, no
/// replacement launched first, no do-not-disrupt check (the drain still honours budgets and
/// do-not-disrupt until the claim's terminationGracePeriod). Its pods are provisioned again
/// like any pods that lose their node.
async fn expire(ctx: &Context, claim: &NodeClaim) -> Result<(), ControllerError> {
    let name = claim.metadata.name.clone().unwrap_or_default();
    delete_claim(ctx, &name).await?;
    let disrupted = crate::metrics::series::Disruption::of_claim("expired", "", claim);
    ctx.metrics.nodeclaims_disrupted.inc(&disrupted);
    let node = claim
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    let pods =
        joinery_adapter::drain::reschedulable_pods(&ctx.state.pods_on_node(&node)).len() as u64;
    ctx.metrics.pods_disruption_initiated.add(&disrupted, pods);
    ctx.events
        .normal(
            &Involved::of(claim),
            "DisruptionTerminating",
            "Disrupting NodeClaim: Expired",
        )
        .await;
    tracing::info!(nodeclaim = %name, expire_after = %claim.spec.effective_expire_after().as_str(), "deleting expired nodeclaim");
    Ok(())
}

/// The claim's NodeClass and its (UID, generation) when its instance is due for
/// `reconcile-instance`: the claim has a provider ID, its NodeClass is cached, and this
/// process has not reconciled it with that NodeClass generation yet.
fn instance_due(
    ctx: &Context,
    claim: &NodeClaim,
    reconciled: &Reconciled,
) -> Option<(Arc<kube::api::DynamicObject>, (String, i64))> {
    claim.status.as_ref()?.provider_id.as_ref()?;
    let key = class_key(claim);
    let class = ctx
        .state
        .node_class(&key, &claim.spec.node_class_ref.name)?;
    let uid = claim.metadata.uid.as_deref().unwrap_or_default();
    let seen = (
        class.metadata.uid.clone().unwrap_or_default(),
        class.metadata.generation.unwrap_or_default(),
    );
    let done = reconciled.lock().expect("reconciled lock").get(uid) == Some(&seen);
    (!done).then_some((class, seen))
}

/// Calls the plugin's `reconcile-instance` for a launched claim whose NodeClass generation
/// changed since the last successful call (or that this process has not reconciled yet):
/// in-place updates such as the instance's cloud labels, never a replacement.
async fn reconcile_instance(
    ctx: &Context,
    claim: &NodeClaim,
    reconciled: &Reconciled,
) -> Result<(), ControllerError> {
    let Some((class, seen)) = instance_due(ctx, claim, reconciled) else {
        return Ok(());
    };
    let key = class_key(claim);
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    let plugin = ctx.cloud.plugin_for(&key.group, &key.kind)?;
    let call = CloudCall::new(plugin.name(), "reconcile-instance", &uid);
    let (claim_view, class_view) = (plugin_node_claim(claim), plugin_node_class(&class));
    let Ok(result) = ctx
        .call_cloud(
            CONTROLLER,
            &call,
            plugin.reconcile_instance(&claim_view, &class_view),
        )
        .await
    else {
        return Ok(());
    };
    match result {
        Ok(())
        | Err(CallError::Cloud {
            error: CloudError::NotFound(_),
            ..
        }) => {
            reconciled
                .lock()
                .expect("reconciled lock")
                .insert(uid, seen);
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// Writes conditions (and other status fields) in one status patch.
pub(crate) async fn write_status(
    ctx: &Context,
    claim: &NodeClaim,
    updates: Vec<joinery_api::Condition>,
    extra: serde_json::Value,
) -> Result<(), ControllerError> {
    // Guarded: the conditions are merged into the claim's latest ones (see writes::patch_guarded).
    let ready = condition(ctx, READY, ConditionStatus::True, "Ready", "");
    let not_ready = condition(
        ctx,
        READY,
        ConditionStatus::Unknown,
        "NotReady",
        "waiting for Launched, Registered and Initialized",
    );
    writes::patch_guarded(&claims(ctx), claim, writes::Part::Status, |current| {
        let mut conds = current.conditions().to_vec();
        let mut changed = false;
        for c in &updates {
            changed |= joinery_api::condition::set_condition(&mut conds, c.clone());
        }
        let is_true = |type_: &str| {
            joinery_api::condition::find_condition(&conds, type_).is_some_and(|c| c.is_true())
        };
        let all = is_true(LAUNCHED) && is_true(REGISTERED) && is_true(INITIALIZED);
        changed |= joinery_api::condition::set_condition(
            &mut conds,
            if all {
                ready.clone()
            } else {
                not_ready.clone()
            },
        );
        let mut status = if extra.is_object() {
            extra.clone()
        } else {
            json!({})
        };
        if !changed && status.as_object().is_some_and(|o| o.is_empty()) {
            return None;
        }
        status["conditions"] = serde_json::to_value(&conds).ok()?;
        Some(json!({"status": status}))
    })
    .await?;
    Ok(())
}

/// For a cloud whose platform registers Nodes without a provider ID (its plugin declares
/// `providerIDFromNodeLabel`): writes the claim's provider ID onto the one Node that carries
/// the matching label and no provider ID, so the claim registers on the next pass. Does
/// nothing for other clouds, and never touches a Node that has a provider ID.
async fn identify_node(
    ctx: &Context,
    claim: &NodeClaim,
    view: &ClaimView,
) -> Result<(), ControllerError> {
    let Some(provider_id) = view.provider_id.as_deref() else {
        return Ok(());
    };
    let reference = &claim.spec.node_class_ref;
    let Ok(plugin) = ctx.cloud.plugin_for(&reference.group, &reference.kind) else {
        return Ok(());
    };
    let Some(kind) = plugin.manifest().node_class.as_ref() else {
        return Ok(());
    };
    let (Some(label), Some(prefix)) = (
        kind.provider_id_from_node_label.as_deref(),
        kind.provider_id_prefix.as_deref(),
    ) else {
        return Ok(());
    };
    let all = ctx.state.nodes();
    let candidates = all.iter().map(|n| lifecycle::UnidentifiedNode {
        name: n.metadata.name.as_deref().unwrap_or_default(),
        label_value: n.label(label),
        has_provider_id: n.provider_id().is_some_and(|p| !p.is_empty()),
        deleting: n.metadata.deletion_timestamp.is_some(),
    });
    let Some(node) = lifecycle::node_to_identify(provider_id, prefix, candidates) else {
        return Ok(());
    };
    tracing::info!(nodeclaim = ?claim.metadata.name, node, provider_id, label, "writing the provider ID onto a Node its platform registered without one");
    merge_patch(
        &writes::node_api(ctx),
        node,
        json!({"spec": {"providerID": provider_id}}),
    )
    .await?;
    Ok(())
}

/// The NodeClass kind (API group and kind) a claim's `nodeClassRef` names.
pub(crate) fn class_key(claim: &NodeClaim) -> NodeClassKey {
    NodeClassKey {
        group: claim.spec.node_class_ref.group.clone(),
        kind: claim.spec.node_class_ref.kind.clone(),
    }
}

/// The plugin contract's view of a NodeClaim.
pub(crate) fn plugin_node_claim(claim: &NodeClaim) -> contract::NodeClaim {
    let kv = |m: &Option<BTreeMap<String, String>>| {
        m.iter()
            .flatten()
            .map(|(k, v)| contract::KeyValue {
                key: k.clone(),
                value: v.clone(),
            })
            .collect()
    };
    let taints = |t: &Option<Vec<Taint>>| {
        t.iter()
            .flatten()
            .map(|t| contract::Taint {
                key: t.key.clone(),
                value: t.value.clone().filter(|v| !v.is_empty()),
                effect: t.effect.clone(),
            })
            .collect()
    };
    contract::NodeClaim {
        name: claim.metadata.name.clone().unwrap_or_default(),
        uid: claim.metadata.uid.clone().unwrap_or_default(),
        node_pool: convert::label(&claim.metadata, labels::NODEPOOL_LABEL)
            .unwrap_or_default()
            .to_owned(),
        labels: kv(&claim.metadata.labels),
        annotations: kv(&claim.metadata.annotations),
        taints: taints(&claim.spec.taints),
        startup_taints: taints(&claim.spec.startup_taints),
        requirements: claim
            .spec
            .requirements
            .iter()
            .map(|r| contract::Requirement {
                key: r.key.clone(),
                operator: r.operator,
                values: r.values.clone().unwrap_or_default(),
                min_values: r.min_values.map(|m| m.max(0) as u32),
            })
            .collect(),
        resource_requests: claim_requests(claim)
            .map(|(k, v)| contract::Resource {
                name: k.clone(),
                quantity: v.0.clone(),
            })
            .collect(),
        provider_id: claim.status.as_ref().and_then(|s| s.provider_id.clone()),
    }
}

async fn delete_claim(ctx: &Context, name: &str) -> Result<(), ControllerError> {
    match claims(ctx).delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(e) if util::is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Syncs the claim onto its Node (labels, taints, finalizer, owner reference, annotations)
/// and marks it `Registered`.
async fn register(
    ctx: &Context,
    claim: &NodeClaim,
    node_name: &str,
) -> Result<(), ControllerError> {
    let name = claim.metadata.name.clone().unwrap_or_default();
    let Some(node) = ctx.state.node(node_name) else {
        return Ok(());
    };
    // Sync the claim onto the node: labels (claim wins), taints, finalizer, owner reference.
    let mut labels_patch = serde_json::Map::new();
    for (k, v) in claim.metadata.labels.iter().flatten() {
        labels_patch.insert(k.clone(), json!(v));
    }
    labels_patch.insert(labels::REGISTERED_LABEL.into(), json!("true"));
    let sync_taints = node.label(labels::DO_NOT_SYNC_TAINTS_LABEL) != Some("true");
    if !node_has_unregistered_taint(node.taints()) {
        ctx.events
            .warning(
                &Involved::of(claim),
                "UnregisteredTaintMissing",
                &format!("Node {node_name} registered without the karpenter.sh/unregistered taint"),
            )
            .await;
    }
    let claim_uid = claim.metadata.uid.clone().unwrap_or_default();
    let mut annotations = serde_json::Map::new();
    for (k, v) in claim.metadata.annotations.iter().flatten() {
        annotations.insert(k.clone(), json!(v));
    }
    // Taints, finalizers and owner references are lists another writer (the kubelet, a CNI,
    // an operator) may change meanwhile: they are recomputed from the Node as last read.
    writes::patch_guarded(&writes::node_api(ctx), &WatchedNode::from(node.as_ref().clone()), writes::Part::Main, |current| {
        let mut taints: Vec<Taint> = current.taints().to_vec();
        taints.retain(|t| t.key != labels::UNREGISTERED_TAINT_KEY);
        if sync_taints {
            for t in claim.spec.taints.iter().flatten().chain(claim.spec.startup_taints.iter().flatten()) {
                if !taints.iter().any(|x| x.key == t.key && x.effect == t.effect) {
                    taints.push(t.clone());
                }
            }
        }
        let mut finalizers = current.metadata.finalizers.clone().unwrap_or_default();
        if !finalizers.iter().any(|f| f == labels::TERMINATION_FINALIZER) {
            finalizers.push(labels::TERMINATION_FINALIZER.to_string());
        }
        let mut owners = current.metadata.owner_references.clone().unwrap_or_default();
        if !owners.iter().any(|o| o.uid == claim_uid) {
            owners.push(k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "karpenter.sh/v1".into(),
                kind: "NodeClaim".into(),
                name: name.clone(),
                uid: claim_uid.clone(),
                block_owner_deletion: Some(true),
                controller: None,
            });
        }
        Some(json!({
            "metadata": {"labels": labels_patch, "annotations": annotations, "finalizers": finalizers, "ownerReferences": owners},
            "spec": {"taints": taints},
        }))
    })
    .await?;
    write_status(
        ctx,
        claim,
        vec![condition(
            ctx,
            REGISTERED,
            ConditionStatus::True,
            "Registered",
            "",
        )],
        json!({"nodeName": node_name}),
    )
    .await?;
    let label = |k: &str| {
        convert::label(&claim.metadata, k)
            .unwrap_or_default()
            .to_owned()
    };
    ctx.metrics
        .nodes_created
        .inc(&crate::metrics::series::NodePoolZone {
            nodepool: label(labels::NODEPOOL_LABEL),
            zone: label(labels::ZONE_LABEL),
        });
    tracing::info!(nodeclaim = %name, node = %node_name, "registered nodeclaim");
    Ok(())
}

fn node_has_unregistered_taint(taints: &[Taint]) -> bool {
    taints
        .iter()
        .any(|t| t.key == labels::UNREGISTERED_TAINT_KEY)
}

/// Labels the Node initialized and marks the claim `Initialized` (the core found nothing
/// blocking it).
async fn initialize(
    ctx: &Context,
    claim: &NodeClaim,
    node_name: &str,
) -> Result<(), ControllerError> {
    let name = claim.metadata.name.clone().unwrap_or_default();
    merge_patch(
        &writes::node_api(ctx),
        node_name,
        json!({"metadata": {"labels": {labels::INITIALIZED_LABEL: "true"}}}),
    )
    .await?;
    write_status(
        ctx,
        claim,
        vec![condition(
            ctx,
            INITIALIZED,
            ConditionStatus::True,
            "Initialized",
            "",
        )],
        json!({}),
    )
    .await?;
    tracing::info!(nodeclaim = %name, node = %node_name, "initialized nodeclaim");
    Ok(())
}

/// Finalizes a deleted claim, step by step as the core decides: the termination deadline,
/// the instance of a create whose answer was lost, the Nodes, the instance (until the cloud
/// answers not-found), then the finalizer.
async fn finalize(
    ctx: &Context,
    claim: &NodeClaim,
    reconciled: &Reconciled,
) -> Result<(), ControllerError> {
    let name = claim.metadata.name.clone().unwrap_or_default();
    let finalizers = claim.metadata.finalizers.clone().unwrap_or_default();
    let key = class_key(claim);
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    let stamped = claim
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(labels::NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION));
    let deadline = joinery_adapter::drain::termination_deadline(claim);
    let launched = ctx.inflight.launched(&uid).map(|i| i.provider_id);
    let mut view = lifecycle::Finalization {
        has_finalizer: finalizers
            .iter()
            .any(|f| f == labels::TERMINATION_FINALIZER),
        deadline_stamped: stamped || deadline.is_none(),
        provider_id: claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.clone())
            .or(launched),
        may_have_launched: ctx.inflight.may_have_launched(claim),
        looked_up: false,
        nodes: Vec::new(),
    };
    loop {
        view.nodes = match &view.provider_id {
            Some(pid) => ctx
                .state
                .nodes_with_provider_id(pid)
                .iter()
                .map(|n| node_view(n))
                .collect(),
            None => Vec::new(),
        };
        match lifecycle::next_finalization_step(&view) {
            FinalizationStep::Done | FinalizationStep::AwaitNodes => return Ok(()),
            FinalizationStep::StampDeadline => {
                // Upstream's annotation, so other tools see the deadline the drain enforces.
                let value = util::k8s_time(deadline.expect("a deadline to stamp"))
                    .0
                    .to_string();
                let patch = json!({"metadata": {"annotations": {labels::NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION: value}}});
                match merge_patch(&claims(ctx), &name, patch).await {
                    Ok(_) => view.deadline_stamped = true,
                    Err(e) if util::is_not_found(&e) => return Ok(()),
                    Err(e) => return Err(e.into()),
                }
            }
            FinalizationStep::LookUpInstance => {
                view.looked_up = true;
                if let Ok(plugin) = ctx.cloud.plugin_for(&key.group, &key.kind) {
                    view.provider_id = find_instance_of(ctx, &plugin, claim)
                        .await?
                        .map(|i| i.provider_id);
                }
            }
            FinalizationStep::DeleteNodes(names) => {
                // The termination controller drains them; the claim waits until they are gone.
                for node_name in names {
                    match writes::node_api(ctx)
                        .delete(&node_name, &DeleteParams::background())
                        .await
                    {
                        Ok(_) => {}
                        Err(e) if util::is_not_found(&e) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
                return Ok(());
            }
            FinalizationStep::DeleteInstance(pid) => {
                // `delete` starts the deletion and answers `not-found` once the instance is
                // gone (the WIT contract): the finalizer stays until then, so a claim never
                // disappears while its instance still runs.
                let plugin = ctx.cloud.plugin_for(&key.group, &key.kind)?;
                let call = CloudCall::new(plugin.name(), "delete", &uid);
                let Ok(result) = ctx.call_cloud(CONTROLLER, &call, plugin.delete(&pid)).await
                else {
                    return Ok(());
                };
                return match result {
                    Ok(()) if claim.is_condition_true(INSTANCE_TERMINATING) => Ok(()),
                    Ok(()) => {
                        let update = condition(
                            ctx,
                            INSTANCE_TERMINATING,
                            ConditionStatus::True,
                            "InstanceTerminating",
                            "",
                        );
                        write_status(ctx, claim, vec![update], json!({})).await
                    }
                    Err(CallError::Cloud {
                        error: CloudError::NotFound(_),
                        ..
                    }) => {
                        observe_instance_termination(ctx, claim);
                        remove_finalizer(ctx, claim, reconciled).await
                    }
                    Err(e) => Err(e.into()),
                };
            }
            FinalizationStep::RemoveFinalizer => {
                return remove_finalizer(ctx, claim, reconciled).await;
            }
        }
    }
}

/// Records how long the cloud took to confirm the claim's instance gone: from its
/// `InstanceTerminating` condition (set when the first delete was accepted) to now. Nothing
/// is recorded when no delete was accepted first (the instance was already gone).
fn observe_instance_termination(ctx: &Context, claim: &NodeClaim) {
    let Some(since) = claim
        .condition(INSTANCE_TERMINATING)
        .filter(|c| c.is_true())
        .map(|c| system_time(&c.last_transition_time))
    else {
        return;
    };
    let seconds = ctx
        .clock
        .now()
        .duration_since(since)
        .unwrap_or_default()
        .as_secs_f64();
    let nodepool = convert::label(&claim.metadata, labels::NODEPOOL_LABEL)
        .unwrap_or_default()
        .to_owned();
    ctx.metrics
        .nodeclaims_instance_termination_duration
        .observe(&crate::metrics::series::NodePool { nodepool }, seconds);
}

/// Removes the termination finalizer of a claim whose instance is gone, and forgets it.
async fn remove_finalizer(
    ctx: &Context,
    claim: &NodeClaim,
    reconciled: &Reconciled,
) -> Result<(), ControllerError> {
    let name = claim.metadata.name.clone().unwrap_or_default();
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    let ours = |finalizers: &mut Vec<String>| {
        let before = finalizers.len();
        finalizers.retain(|f| f != labels::TERMINATION_FINALIZER);
        finalizers.len() != before
    };
    match writes::edit_finalizers(&claims(ctx), claim, ours).await {
        Ok(_) => {}
        Err(e) if util::is_not_found(&e) => {}
        Err(e) => return Err(e.into()),
    }
    ctx.inflight.forget(&uid);
    reconciled.lock().expect("reconciled lock").remove(&uid);
    let label = |k: &str| {
        convert::label(&claim.metadata, k)
            .unwrap_or_default()
            .to_owned()
    };
    ctx.metrics
        .nodeclaims_terminated
        .inc(&crate::metrics::series::NodePoolCapacityZone {
            nodepool: label(labels::NODEPOOL_LABEL),
            capacity_type: label(labels::CAPACITY_TYPE_LABEL),
            zone: label(labels::ZONE_LABEL),
        });
    if let Some(deleted) = claim.metadata.deletion_timestamp.as_ref() {
        let seconds = ctx
            .clock
            .now()
            .duration_since(system_time(deleted))
            .unwrap_or_default()
            .as_secs_f64();
        ctx.metrics.nodeclaims_termination_duration.observe(
            &crate::metrics::series::NodePool {
                nodepool: label(labels::NODEPOOL_LABEL),
            },
            seconds,
        );
    }
    tracing::info!(nodeclaim = %name, "deleted nodeclaim");
    Ok(())
}

#[cfg(test)]
mod tests;
