//! Node repair (gate `NodeRepair`, upstream's node health controller): each pass reads the
//! Nodes, NodeClaims and NodePools from the caches and the repair policies of the cloud
//! plugins, asks [`joinery_core::repair::decide`] what to do about every managed node, and
//! does it — reboots an instance through its plugin (when its NodePool asks for that first),
//! or stamps the claim's termination timestamp and deletes the claim. The decisions, their
//! order and the ceiling are the core's; this loop only gathers and acts.
//!
//! The policies of each cloud plugin are read once per loaded build of the plugin (its
//! digest), so a hot reload that changes a plugin reads them again. A plugin whose
//! `repair-policies` answers `none` (or that speaks WIT 0.1) gets the host's defaults; one
//! that answers an empty list turns repair off for its nodes. A plugin that answers
//! `unsupported` to `reboot` is not asked again until it is reloaded: its nodes are replaced.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use joinery_adapter::repair::{
    claims_by_provider_id, node_vetoed, pools_settings, repair_claim, repair_node,
};
use joinery_api::NodeClaim;
use joinery_core::contract::{CloudError, RepairPolicy};
use joinery_core::labels;
use joinery_core::repair::{
    self, BLOCKED_RECHECK, Decision, Input, RepairNode, Unhealthy, Verdict, human,
};
use joinery_core::time::rfc3339;
use joinery_runtime::CallError;
use joinery_runtime::plugin::LoadedPlugin;
use kube::api::{Api, DeleteParams};
use serde_json::json;
use tokio::sync::watch;

use crate::events::Involved;
use crate::metrics::series;
use crate::state::Ordered;
use crate::{CloudCall, Context, ControllerError, util};

/// The controller's name (upstream's), in logs and metrics.
pub const CONTROLLER: &str = "node.health";

/// How often a pass runs without a change in the caches (simulated time). A due node is acted
/// on within this of its toleration running out.
const INTERVAL: Duration = Duration::from_secs(10);

/// A plugin's policies and the digest of the build they were read from.
type ReadPolicies = (String, Arc<[RepairPolicy]>);

/// What the loop remembers between passes.
#[derive(Default)]
struct Memory {
    /// Each cloud plugin's policies, by plugin name, with the digest they were read from.
    policies: Mutex<HashMap<String, ReadPolicies>>,
    /// Digests of plugins that answered `unsupported` to `reboot`.
    no_reboot: Mutex<HashSet<String>>,
    /// Refused annotations already reported (each once while it stays).
    reported: Mutex<HashSet<String>>,
    /// What this process did to each claim (by UID) that the cache may not show yet: when it
    /// rebooted the claim's instance, and whether it deleted the claim. A pass that runs
    /// before the write comes back through the watch neither reboots nor deletes twice.
    acted: Mutex<HashMap<String, Acted>>,
}

/// What the loop did to one claim.
#[derive(Debug, Clone, Copy, Default)]
struct Acted {
    rebooted_at: Option<std::time::SystemTime>,
    deleted: bool,
}

/// Runs node repair (only with the `NodeRepair` gate on).
pub async fn run(ctx: Arc<Context>, stopped: watch::Receiver<bool>) {
    if !ctx.settings.feature_gates.node_repair {
        return;
    }
    let memory = Arc::new(Memory::default());
    util::run_loop(ctx, stopped, CONTROLLER, INTERVAL, move |ctx| {
        let memory = memory.clone();
        async move { step(&ctx, &memory).await }
    })
    .await;
}

/// The policies of `plugin`, read once per digest; the host's defaults for `none`.
async fn policies_of(
    memory: &Memory,
    plugin: &LoadedPlugin,
) -> Result<Arc<[RepairPolicy]>, CallError> {
    let name = plugin.name().to_string();
    if let Some((digest, policies)) = memory.policies.lock().expect("policies lock").get(&name)
        && digest == plugin.digest()
    {
        return Ok(policies.clone());
    }
    let policies: Arc<[RepairPolicy]> = plugin
        .repair_policies()
        .await?
        .unwrap_or_else(repair::default_policies)
        .into();
    tracing::info!(plugin = %name, policies = %describe(&policies), "node repair: read the cloud plugin's repair policies");
    memory
        .policies
        .lock()
        .expect("policies lock")
        .insert(name, (plugin.digest().to_string(), policies.clone()));
    Ok(policies)
}

/// `Ready=False for 10m, …` (or `none: repair is off`).
fn describe(policies: &[RepairPolicy]) -> String {
    if policies.is_empty() {
        return "none: repair is off for this cloud".into();
    }
    policies
        .iter()
        .map(|p| {
            format!(
                "{}={} for {}",
                p.condition_type,
                p.condition_status,
                human(Duration::from_secs(p.toleration_seconds))
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

async fn step(ctx: &Context, memory: &Memory) -> Result<(), ControllerError> {
    let now = ctx.clock.now();
    let claims = ctx.state.node_claims.ordered();
    let by_provider_id = claims_by_provider_id(claims.iter().map(|c| c.as_ref()));
    let pools = ctx.state.node_pools.ordered();
    let (settings, mut problems) = pools_settings(pools.iter().map(|p| p.as_ref()));
    let plugins = ctx.cloud.registry().current();
    // Unmanaged Nodes only count toward a standalone claim's ceiling, with the policies of
    // the first cloud plugin loaded (upstream has one cloud provider).
    let fallback: Arc<[RepairPolicy]> =
        match plugins.iter().find(|p| p.manifest().node_class.is_some()) {
            Some(plugin) => policies_of(memory, plugin)
                .await
                .unwrap_or_else(|_| repair::default_policies().into()),
            None => repair::default_policies().into(),
        };
    let mut nodes: Vec<RepairNode> = Vec::new();
    let mut plugin_of: HashMap<String, Arc<LoadedPlugin>> = HashMap::new();
    let mut claim_of: HashMap<String, Arc<NodeClaim>> = HashMap::new();
    let arcs: HashMap<&str, &Arc<NodeClaim>> = claims
        .iter()
        .filter_map(|c| c.metadata.name.as_deref().map(|n| (n, c)))
        .collect();
    let acted = {
        let mut acted = memory.acted.lock().expect("acted lock");
        // Forget claims that are gone.
        let live: HashSet<&str> = claims
            .iter()
            .filter_map(|c| c.metadata.uid.as_deref())
            .collect();
        acted.retain(|uid, _| live.contains(uid.as_str()));
        acted.clone()
    };
    for node in ctx.state.nodes() {
        if let (_, Some(problem)) = node_vetoed(&node) {
            problems.push(problem);
        }
        let claim: Option<&NodeClaim> = node
            .provider_id()
            .and_then(|pid| by_provider_id.get(pid).copied());
        let Some(claim) = claim else {
            nodes.push(repair_node(&node, None, fallback.clone()));
            continue;
        };
        let class = &claim.spec.node_class_ref;
        let Ok(plugin) = ctx.cloud.plugin_for(&class.group, &class.kind) else {
            // No plugin, no policies: the node is left alone (and not counted).
            continue;
        };
        let policies = match policies_of(memory, &plugin).await {
            Ok(p) => p,
            Err(error) => {
                tracing::warn!(plugin = %plugin.name(), %error, "node repair: the cloud plugin's repair-policies failed; its nodes are not repaired this pass");
                continue;
            }
        };
        let can_reboot = !memory
            .no_reboot
            .lock()
            .expect("reboot lock")
            .contains(plugin.digest());
        let name = node.name().to_string();
        let mut view = repair_claim(claim, can_reboot);
        if let Some(done) = claim.metadata.uid.as_ref().and_then(|uid| acted.get(uid)) {
            view.rebooted_at = view.rebooted_at.or(done.rebooted_at);
            view.deleting |= done.deleted;
        }
        nodes.push(repair_node(&node, Some(view), policies));
        plugin_of.insert(name.clone(), plugin);
        if let Some(arc) = claim.metadata.name.as_deref().and_then(|n| arcs.get(n)) {
            claim_of.insert(name, Arc::clone(arc));
        }
    }
    report(ctx, memory, &pools, problems).await;
    let decisions = repair::decide(&Input {
        nodes: &nodes,
        pools: &settings,
        now,
    });
    for decision in decisions {
        let (Some(claim), Some(plugin)) =
            (claim_of.get(&decision.node), plugin_of.get(&decision.node))
        else {
            continue;
        };
        act(ctx, memory, &decision, claim, plugin).await?;
    }
    Ok(())
}

/// Reports each refused annotation once while it stays: a warning log line and an event on
/// the NodePool or Node naming the annotation and value.
async fn report(
    ctx: &Context,
    memory: &Memory,
    pools: &[Arc<joinery_api::NodePool>],
    problems: Vec<joinery_adapter::repair::AnnotationProblem>,
) {
    let texts: HashSet<String> = problems.iter().map(ToString::to_string).collect();
    let fresh: Vec<_> = {
        let mut reported = memory.reported.lock().expect("reported lock");
        reported.retain(|t| texts.contains(t));
        problems
            .into_iter()
            .filter(|p| reported.insert(p.to_string()))
            .collect()
    };
    for problem in fresh {
        tracing::warn!(kind = problem.kind, object = %problem.object, annotation = problem.annotation, value = %problem.value, "node repair: {problem}");
        let on = match problem.kind {
            "NodePool" => pools
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(problem.object.as_str()))
                .map(|p| Involved::of(p.as_ref())),
            _ => ctx.state.node(&problem.object).map(|n| Involved::node(&n)),
        };
        if let Some(on) = on {
            ctx.events
                .warning(&on, "NodeRepairAnnotationInvalid", &problem.to_string())
                .await;
        }
    }
}

async fn act(
    ctx: &Context,
    memory: &Memory,
    decision: &Decision,
    claim: &NodeClaim,
    plugin: &Arc<LoadedPlugin>,
) -> Result<(), ControllerError> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    match &decision.verdict {
        Verdict::Healthy {
            clear_reboot_record: true,
        } => {
            let patch =
                json!({"metadata": {"annotations": {labels::REPAIR_REBOOTED_AT_ANNOTATION: null}}});
            match util::merge_patch(&api, &decision.claim, patch).await {
                Ok(_) => {
                    tracing::info!(node = %decision.node, nodeclaim = %decision.claim, "node repair: the node is healthy again after its reboot")
                }
                Err(e) if util::is_not_found(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Verdict::Healthy { .. } | Verdict::Waiting { .. } | Verdict::Vetoed { .. } => {}
        Verdict::Blocked { ceiling, .. } => {
            if let Some(node) = ctx.state.node(&decision.node) {
                let message = format!("Not repairing node {}: {ceiling}", decision.node);
                ctx.events
                    .warning_within(
                        &Involved::node(&node),
                        "NodeRepairBlocked",
                        &message,
                        BLOCKED_RECHECK,
                    )
                    .await;
            }
        }
        Verdict::Reboot { unhealthy } => {
            if !reboot(ctx, memory, decision, claim, plugin, unhealthy).await? {
                // The cloud cannot reboot: replace now.
                replace(ctx, decision, claim, unhealthy, true, true).await?;
                remember(memory, claim, |a| a.deleted = true);
            }
        }
        Verdict::Replace {
            unhealthy,
            stamp,
            delete,
            ..
        } => {
            replace(ctx, decision, claim, unhealthy, *stamp, *delete).await?;
            if *delete {
                remember(memory, claim, |a| a.deleted = true);
            }
        }
    }
    if let Verdict::Healthy { .. } = decision.verdict
        && let Some(uid) = &claim.metadata.uid
    {
        memory.acted.lock().expect("acted lock").remove(uid);
    }
    Ok(())
}

/// Records what the loop did to `claim` until the cache shows it (or the claim is gone).
fn remember(memory: &Memory, claim: &NodeClaim, change: impl FnOnce(&mut Acted)) {
    if let Some(uid) = &claim.metadata.uid {
        change(
            memory
                .acted
                .lock()
                .expect("acted lock")
                .entry(uid.clone())
                .or_default(),
        );
    }
}

/// Reboots the claim's instance; `false` when the plugin cannot (`unsupported`).
async fn reboot(
    ctx: &Context,
    memory: &Memory,
    decision: &Decision,
    claim: &NodeClaim,
    plugin: &Arc<LoadedPlugin>,
    unhealthy: &Unhealthy,
) -> Result<bool, ControllerError> {
    let Some(provider_id) = claim.status.as_ref().and_then(|s| s.provider_id.clone()) else {
        return Ok(false);
    };
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    let call = CloudCall::new(plugin.name(), "reboot", &uid);
    let result = match ctx
        .call_cloud(CONTROLLER, &call, plugin.reboot(&provider_id))
        .await
    {
        Ok(result) => result,
        // Backing off after a failed reboot: the next pass tries again.
        Err(ControllerError::BackingOff { .. }) => return Ok(true),
        Err(e) => return Err(e),
    };
    match result {
        Ok(()) => {
            let at = ctx.clock.now();
            remember(memory, claim, |a| a.rebooted_at = Some(at));
            let now = rfc3339(at);
            let patch =
                json!({"metadata": {"annotations": {labels::REPAIR_REBOOTED_AT_ANNOTATION: now}}});
            let api: Api<NodeClaim> = Api::all(ctx.client.clone());
            match util::merge_patch(&api, &decision.claim, patch).await {
                Ok(_) => {}
                Err(e) if util::is_not_found(&e) => return Ok(true),
                Err(e) => return Err(e.into()),
            }
            tracing::warn!(node = %decision.node, nodeclaim = %decision.claim, plugin = %plugin.name(),
                condition = %unhealthy.condition_type, status = %unhealthy.status, since = %rfc3339(unhealthy.since),
                "node repair: rebooting an unhealthy node; it is replaced if still unhealthy after {}", human(unhealthy.toleration));
            if let Some(node) = ctx.state.node(&decision.node) {
                ctx.events
                    .warning(
                        &Involved::node(&node),
                        "NodeRepairRebooting",
                        &format!(
                            "Rebooting node {}: {}={} since {}",
                            decision.node,
                            unhealthy.condition_type,
                            unhealthy.status,
                            rfc3339(unhealthy.since)
                        ),
                    )
                    .await;
            }
            Ok(true)
        }
        Err(CallError::Cloud {
            error: CloudError::Unsupported(why),
            ..
        }) => {
            tracing::info!(plugin = %plugin.name(), reason = %why, "node repair: the cloud plugin cannot reboot; unhealthy nodes are replaced");
            memory
                .no_reboot
                .lock()
                .expect("reboot lock")
                .insert(plugin.digest().to_string());
            Ok(false)
        }
        Err(error) => {
            tracing::warn!(node = %decision.node, nodeclaim = %decision.claim, %error, "node repair: reboot failed; trying again");
            Ok(true)
        }
    }
}

/// Stamps the claim's termination timestamp (now) and deletes it: upstream's repair.
async fn replace(
    ctx: &Context,
    decision: &Decision,
    claim: &NodeClaim,
    unhealthy: &Unhealthy,
    stamp: bool,
    delete: bool,
) -> Result<(), ControllerError> {
    let api: Api<NodeClaim> = Api::all(ctx.client.clone());
    if stamp {
        let now = rfc3339(ctx.clock.now());
        let patch = json!({"metadata": {"annotations": {labels::NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION: now}}});
        match util::merge_patch(&api, &decision.claim, patch).await {
            Ok(_) => {}
            Err(e) if util::is_not_found(&e) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
    if !delete {
        return Ok(());
    }
    match api
        .delete(&decision.claim, &DeleteParams::background())
        .await
    {
        Ok(_) => {}
        Err(e) if util::is_not_found(&e) => return Ok(()),
        Err(e) => return Err(e.into()),
    }
    let disrupted = series::Disruption::of_claim("unhealthy", "", claim);
    ctx.metrics.nodeclaims_disrupted.inc(&disrupted);
    let pods =
        joinery_adapter::drain::reschedulable_pods(&ctx.state.pods_on_node(&decision.node)).len();
    ctx.metrics
        .pods_disruption_initiated
        .add(&disrupted, pods as u64);
    ctx.metrics
        .nodeclaims_unhealthy_disrupted
        .inc(&series::UnhealthyDisruption {
            condition: repair::metric_condition(&unhealthy.condition_type),
            nodepool: disrupted.nodepool.clone(),
            capacity_type: disrupted.capacity_type.clone(),
            image_id: claim
                .status
                .as_ref()
                .and_then(|s| s.image_id.clone())
                .unwrap_or_default(),
        });
    tracing::warn!(node = %decision.node, nodeclaim = %decision.claim, nodepool = %disrupted.nodepool,
        condition = %unhealthy.condition_type, status = %unhealthy.status, since = %rfc3339(unhealthy.since),
        toleration = %human(unhealthy.toleration), pods,
        "node repair: deleting unhealthy node");
    ctx.events
        .normal(
            &Involved::of(claim),
            "DisruptionTerminating",
            "Disrupting NodeClaim: Unhealthy",
        )
        .await;
    Ok(())
}
