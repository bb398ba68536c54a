//! The disruption controller, thin around [`joinery_core::disruption`]: it keeps each claim's
//! signals current (`lastPodEventTime`, `Consolidatable`, `Drifted`), gathers a snapshot
//! through [`joinery_adapter::disruption::snapshot`], asks the core for the next command
//! (emptiness, drift, multi-node then single-node consolidation, in upstream's order), waits
//! `disruption_validation_delay` and has the core re-validate it on a fresh snapshot, then
//! acts as upstream's orchestration queue does: taint the candidates
//! `karpenter.sh/disrupted:NoSchedule` with a `DisruptionReason` condition, create the
//! replacements, wait until they are `Initialized` (rolling back on timeout or if one
//! vanishes), and only then delete the candidates.
//!
//! Nothing here survives a restart on purpose: a host killed mid-command leaves tainted
//! candidates that the next process untaints (they are not deleting and not in its queue),
//! replacements that are ordinary NodeClaims (consolidated later if unneeded), and never a
//! deleted candidate whose replacement did not come up.

use crate::state::Ordered;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use joinery_adapter::assemble::{PoolOffer, Source};
use joinery_adapter::convert;
use joinery_adapter::disruption::{self as kube_disruption, DisruptionObjects, Marks};
use joinery_adapter::drain::reschedulable_pods;
use joinery_adapter::lean::LeanNode;
use joinery_api::{ConditionStatus, HasConditions, NodeClaim, NodePool};
use joinery_core::disruption::{self, Command, Options, Snapshot};
use joinery_core::labels;
use k8s_openapi::api::core::v1::Taint;
use kube::api::{Api, DeleteParams};
use tokio::sync::watch;

use crate::events::Involved;
use crate::lifecycle::conditions::{DISRUPTION_REASON, INITIALIZED};
use crate::metrics::series;
use crate::util::{self, condition};
use crate::writes::{edit_claim_conditions, edit_node_taints};
use crate::{Context, ControllerError, provisioner};

/// How often `status.lastPodEventTime` may be rewritten for one claim (upstream: 10s).
pub const POD_EVENT_DEDUP: Duration = Duration::from_secs(10);
/// How often a claim's drift is re-checked with its cloud plugin (upstream: 5 min).
pub const DRIFT_RECHECK: Duration = Duration::from_secs(300);
/// Claims younger than this are not checked for a vanished instance type (upstream: 1 h).
pub const INSTANCE_TYPE_DRIFT_AGE: Duration = Duration::from_secs(3600);
/// After a claim's instance type was found still offered, it is not checked again for this
/// long (upstream: 30 min; a claim found drifted by it is checked on every visit).
pub const INSTANCE_TYPE_RECHECK: Duration = Duration::from_secs(1800);

/// A command started and waiting for its replacements.
#[derive(Clone)]
struct Queued {
    command: Command,
    /// Names of the replacement NodeClaims created for it.
    replacements: Vec<String>,
    started: SystemTime,
}

#[derive(Default)]
struct Memory {
    last_decision: Option<SystemTime>,
    /// Workload pod UIDs last seen per node, to notice pods arriving or leaving.
    pods_seen: HashMap<String, Vec<String>>,
    /// Claims (by name) this process tainted for a command: their taint is not a crash's
    /// leftover even before the cache shows their deletion.
    disrupting: BTreeSet<String>,
    /// Commands waiting for their replacements to initialize.
    queue: Vec<Queued>,
    /// When each claim (by UID) was last checked with its cloud plugin for drift, against which
    /// version of its NodeClass, and the plugin's answer.
    plugin_drift: HashMap<String, (SystemTime, String, Option<String>)>,
    /// When each claim (by UID) was last found with its instance type still offered (see
    /// [`INSTANCE_TYPE_RECHECK`]).
    instance_type_found: HashMap<String, SystemTime>,
    /// The last drift verdict from a claim and its NodePool alone (no instance types), by
    /// claim UID, with the resourceVersions of both it was computed from: the check runs on
    /// every step for every claim, and parsing and hashing the NodePool each time was most of
    /// a long simulation's time. A new version of either object recomputes it.
    static_drift: HashMap<String, ((String, String), Option<String>)>,
    /// Claims (by UID) whose signals need no visit (see [`signals::Settled`]).
    settled: HashMap<String, signals::Settled>,
    /// Set when every claim was settled by the last visit: the caches' change count then, the
    /// claims this process was disrupting, and the earliest moment one of them is due. While
    /// all three hold, the visit is skipped without looking at any claim.
    signals_idle: Option<(u64, BTreeSet<String>, SystemTime)>,
    /// The caches' change count and the digest of the cached objects then (see
    /// [`inputs::digest`]).
    objects_digest: Option<(u64, u64)>,
    /// The last pass that found nothing to do, so that the next passes over the same inputs
    /// are skipped (upstream's "consolidated" state; see [`disruption::quiet`]).
    quiet: disruption::QuietPass,
}

type SharedMemory = Arc<Mutex<Memory>>;

fn lock(memory: &SharedMemory) -> std::sync::MutexGuard<'_, Memory> {
    memory.lock().expect("disruption memory lock")
}

/// Runs the disruption loop.
pub async fn run(ctx: Arc<Context>, stopped: watch::Receiver<bool>) {
    let memory: SharedMemory = Arc::default();
    util::run_loop(
        ctx,
        stopped,
        "disruption",
        Duration::from_secs(1),
        move |ctx| {
            let memory = memory.clone();
            async move { step(ctx, memory).await }
        },
    )
    .await;
}

fn name_of<K: kube::Resource>(object: &K) -> String {
    object.meta().name.clone().unwrap_or_default()
}

fn node_of(ctx: &Context, claim: &NodeClaim) -> Option<Arc<LeanNode>> {
    let name = claim.status.as_ref()?.node_name.clone()?;
    ctx.state.node(&name)
}

fn claim_named(ctx: &Context, name: &str) -> Option<Arc<NodeClaim>> {
    ctx.state
        .node_claims
        .ordered()
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some(name))
}

async fn step(ctx: Arc<Context>, memory: SharedMemory) -> Result<(), ControllerError> {
    let now = ctx.clock.now();
    let pools: BTreeMap<String, Arc<NodePool>> = ctx
        .state
        .node_pools
        .ordered()
        .into_iter()
        .map(|p| (name_of(p.as_ref()), p))
        .collect();
    maintain_signals(&ctx, &memory, &pools, now).await?;
    advance_queue(&ctx, &memory).await?;
    let poll_due = lock(&memory)
        .last_decision
        .is_none_or(|at| util::due(at, now, ctx.settings.disruption_poll));
    if !poll_due {
        return Ok(());
    }
    lock(&memory).last_decision = Some(now);
    let inputs = inputs::digest(&ctx, &mut lock(&memory), now);
    if lock(&memory).quiet.can_skip(inputs, now) {
        tracing::trace!(
            "disruption pass skipped: nothing changed since a pass found nothing to do"
        );
        return Ok(());
    }
    let Some(snapshot) = gather(&ctx, &memory).await else {
        tracing::debug!(
            "disruption pass skipped: the cluster state is not synced or a NodeClass is unresolved"
        );
        return Ok(());
    };
    tracing::debug!(candidates = snapshot.candidates.len(), "disruption pass");
    publish_allowances(&ctx, &snapshot);
    let mut evaluator = disruption::Evaluator::new(&snapshot);
    let outcomes = disruption::methods::decide_with(|method| {
        let started = std::time::Instant::now();
        let outcome = evaluator.evaluate(method);
        ctx.metrics
            .voluntary_disruption_decision_evaluation_duration
            .observe(
                &series::Evaluation {
                    reason: method.reason().metric_label().into(),
                    consolidation_type: method.consolidation_type().into(),
                },
                started.elapsed().as_secs_f64(),
            );
        outcome
    });
    let simulations = evaluator.simulations();
    tracing::debug!(
        simulations = simulations.total,
        pools_only = simulations.pools_only,
        reused = simulations.reused,
        "disruption pass simulated"
    );
    for outcome in &outcomes {
        let eligible = snapshot
            .candidates
            .iter()
            .filter(|c| disruption::candidate::blocked(&snapshot, c, outcome.method).is_none())
            .count();
        ctx.metrics.voluntary_disruption_eligible_nodes.set(
            &series::Reason {
                reason: outcome.method.reason().metric_label().into(),
            },
            eligible as f64,
        );
        tracing::debug!(
            method = outcome.method.as_str(),
            simulations = outcome.simulations,
            rejected = outcome.rejected.len(),
            blocked = outcome.blocked.len(),
            decided = outcome.command.is_some(),
            "disruption method evaluated"
        );
        if let Some(why) = &outcome.skipped {
            tracing::debug!(method = outcome.method.as_str(), reason = %why, "disruption method skipped every candidate");
        }
        for (claim, why) in &outcome.blocked {
            tracing::debug!(method = outcome.method.as_str(), nodeclaim = %claim, reason = %why, "disruption candidate blocked");
        }
        // Events for what an operator can act on (protections, budgets, nominations), not for
        // nodes merely waiting for consolidateAfter or initialization.
        let actionable = outcome
            .blocked
            .iter()
            .filter(|(_, why)| why.is_operator_actionable());
        for (claim, why) in actionable {
            if let Some(c) = snapshot.candidate(claim)
                && let Some(node) = ctx.state.node(&c.node)
            {
                // De-duplicated by node, whatever the message, as upstream.
                ctx.events
                    .normal_per_object(
                        &Involved::node(&node),
                        "DisruptionBlocked",
                        &format!("Cannot disrupt Node: {why}"),
                        crate::events::DEDUP_WINDOW,
                    )
                    .await;
            }
        }
        for (claim, why) in &outcome.rejected {
            tracing::debug!(method = outcome.method.as_str(), nodeclaim = %claim, reason = %why, "disruption candidate rejected");
            if let Some(c) = snapshot.candidate(claim)
                && let Some(node) = ctx.state.node(&c.node)
            {
                // Once per node per 15 minutes, whatever the message, as upstream.
                ctx.events
                    .normal_per_object(
                        &Involved::node(&node),
                        "Unconsolidatable",
                        &why.to_string(),
                        crate::events::UNCONSOLIDATABLE_DEDUP_WINDOW,
                    )
                    .await;
            }
        }
    }
    lock(&memory)
        .quiet
        .record(inputs, now, &outcomes, &snapshot);
    let Some(command) = outcomes.into_iter().find_map(|o| o.command) else {
        return Ok(());
    };
    tracing::info!(method = command.method.as_str(), decision = command.decision().as_str(), candidates = ?command.candidates,
        explanation = %command.explanation, "disruption command found; validating before acting");
    ctx.sleep(ctx.settings.disruption_validation_delay).await;
    let Some(fresh) = gather(&ctx, &memory).await else {
        return Ok(());
    };
    let command = match disruption::validate(&fresh, &command) {
        Ok(command) => command,
        Err(why) => {
            tracing::info!(method = command.method.as_str(), candidates = ?command.candidates, reason = %why, "disruption abandoned after validation");
            ctx.metrics
                .voluntary_disruption_failed_validations
                .inc(&series::ConsolidationType {
                    consolidation_type: command.method.consolidation_type().into(),
                });
            return Ok(());
        }
    };
    start(&ctx, &memory, command).await
}

/// Gathers the snapshot a pass decides on; `None` while the state is not synced or a
/// NodeClass has not been resolved yet.
async fn gather(ctx: &Context, memory: &SharedMemory) -> Option<Snapshot> {
    if !provisioner::synced(ctx) {
        return None;
    }
    let cached = ctx.state.objects();
    let (pdbs, node_pools) = (ctx.state.pdbs.ordered(), ctx.state.node_pools.ordered());
    let (offers, unresolved) = provisioner::ready_nodepools(ctx).await;
    if unresolved {
        return None;
    }
    let overlays = provisioner::current_overlays(ctx, &mut BTreeSet::new()).await;
    let cluster = cached.lend();
    let pending = kube_disruption::pending_pods(&cluster, &pdbs);
    let objects = DisruptionObjects {
        cluster,
        pdbs: &pdbs,
        node_pools: node_pools.iter().map(|p| p.as_ref()).collect(),
        offers: offers
            .iter()
            .map(|(pool, types)| PoolOffer {
                pool: pool.as_ref(),
                instance_types: types,
            })
            .collect(),
        overlays: &overlays,
        pending,
        virtual_pods: crate::buffers::BufferObjects::read(ctx.state.buffers.as_ref())
            .refs()
            .states()
            .iter()
            .flat_map(|b| b.virtual_pods())
            .collect(),
    };
    let now = ctx.clock.now();
    let disrupting = lock(memory).disrupting.clone();
    let nominated = |name: &str| ctx.inflight.is_nominated(name, now);
    let marks = Marks {
        now,
        nominated: &nominated,
        disrupting: &disrupting,
        source: Source::Cluster,
    };
    let options = Options {
        spot_to_spot: ctx.settings.feature_gates.spot_to_spot_consolidation,
        ..Options::default()
    };
    let (mut snapshot, _problems, messages) = kube_disruption::snapshot(&objects, &marks, options);
    for message in messages {
        tracing::warn!(error = %message, "ignored a NodePool disruption setting");
    }
    if !ctx.settings.feature_gates.static_capacity {
        // Static pools are not managed without the gate: nothing replaces their nodes.
        snapshot.pools.values_mut().for_each(|p| p.template = None);
    }
    snapshot.context.preference_policy = provisioner::preference_policy(ctx);
    snapshot.context.min_values_policy = provisioner::min_values_policy(ctx);
    Some(snapshot)
}

fn publish_allowances(ctx: &Context, snapshot: &Snapshot) {
    for pool in snapshot.pools.keys() {
        for reason in [
            disruption::Reason::Empty,
            disruption::Reason::Drifted,
            disruption::Reason::Underutilized,
        ] {
            let allowance = snapshot.allowance(pool, reason);
            for error in &allowance.invalid {
                tracing::warn!(nodepool = %pool, %error, "invalid disruption budget; allowing no disruption");
            }
            let allowed = allowance.allowed.min(snapshot.pools[pool].nodes);
            ctx.metrics.nodepools_allowed_disruptions.set(
                &series::NodePoolReason {
                    nodepool: pool.clone(),
                    reason: reason.as_str().into(),
                },
                allowed as f64,
            );
        }
    }
}

/// Starts a validated command: taints the candidates with a `DisruptionReason`, creates the
/// replacements, then deletes the candidates right away (a delete) or queues the command until
/// the replacements initialize.
async fn start(
    ctx: &Context,
    memory: &SharedMemory,
    command: Command,
) -> Result<(), ControllerError> {
    let decision = command.decision();
    ctx.metrics
        .voluntary_disruption_decisions
        .inc(&series::Decision {
            decision: decision.as_str().into(),
            reason: command.reason().metric_label().into(),
            consolidation_type: command.method.consolidation_type().into(),
        });
    let mut tainted = Vec::new();
    for name in &command.candidates {
        let Some(claim) = claim_named(ctx, name) else {
            continue;
        };
        let Some(node) = node_of(ctx, &claim) else {
            continue;
        };
        lock(memory).disrupting.insert(name.clone());
        if let Err(e) = mark(ctx, &claim, &node, command.reason().as_str()).await {
            tracing::warn!(nodeclaim = %name, error = %e, "could not mark the candidate; disruption rolled back");
            rollback(ctx, memory, &command.candidates).await;
            return Err(e);
        }
        tainted.push(name.clone());
    }
    if tainted.len() != command.candidates.len() && decision == disruption::Decision::Replace {
        tracing::info!(candidates = ?command.candidates, "a candidate vanished before it was marked; disruption rolled back");
        rollback(ctx, memory, &command.candidates).await;
        return Ok(());
    }
    let mut replacements = Vec::new();
    for replacement in &command.replacements {
        let Some(pool) = ctx
            .state
            .node_pools
            .ordered()
            .into_iter()
            .find(|p| name_of(p.as_ref()) == replacement.spec.nodepool)
        else {
            rollback(ctx, memory, &command.candidates).await;
            return Ok(());
        };
        match provisioner::create_node_claim(ctx, &pool, replacement).await {
            Ok(created) => {
                let created_name = name_of(&created);
                ctx.metrics.nodeclaims_created.inc(&series::ReasonNodePool {
                    reason: command.reason().metric_label().into(),
                    nodepool: replacement.spec.nodepool.clone(),
                });
                tracing::info!(nodeclaim = %created_name, replaces = ?command.candidates, "created replacement nodeclaim");
                ctx.inflight.record_created(created);
                replacements.push(created_name);
            }
            Err(e) => {
                // Replacements already created are ordinary claims now; the candidates stay.
                tracing::warn!(error = %e, candidates = ?command.candidates, "creating a replacement failed; disruption rolled back");
                rollback(ctx, memory, &command.candidates).await;
                return Err(e);
            }
        }
    }
    if replacements.is_empty() {
        // Nothing retries this command: a candidate whose delete fails is released.
        return finish(ctx, memory, &command, true).await;
    }
    for name in &command.candidates {
        if let Some(claim) = claim_named(ctx, name) {
            let message = format!("Launching NodeClaim: {}", replacements.join(", "));
            ctx.events
                .normal(
                    &Involved::of(claim.as_ref()),
                    "DisruptionLaunching",
                    &message,
                )
                .await;
        }
    }
    lock(memory).queue.push(Queued {
        command,
        replacements,
        started: ctx.clock.now(),
    });
    Ok(())
}

/// Moves queued commands on: deletes the candidates once every replacement is initialized;
/// rolls back a command whose replacement vanished or that timed out
/// ([`disruption::next_queue_step`] decides). A failed delete stops the pass and leaves its
/// command queued for the next one; the commands settled before it are dropped all the same.
async fn advance_queue(ctx: &Context, memory: &SharedMemory) -> Result<(), ControllerError> {
    let queued: Vec<Queued> = lock(memory).queue.clone();
    let now = ctx.clock.now();
    let steps: Vec<disruption::QueueStep> = queued
        .iter()
        .map(|q| disruption::next_queue_step(&queue_facts(ctx, q), queued.len(), now))
        .collect();
    let (settled, failure) = queue_pass(&queued, &steps, &mut LiveQueue { ctx, memory }).await;
    disruption::drop_settled(&mut lock(memory).queue, &settled);
    failure.map_or(Ok(()), Err)
}

/// What a pass knows about a queued command's replacements.
fn queue_facts(ctx: &Context, queued: &Queued) -> disruption::QueuedCommand {
    let claims: Vec<Option<Arc<NodeClaim>>> = queued
        .replacements
        .iter()
        .map(|r| claim_named(ctx, r))
        .collect();
    // A replacement just created may not be in the cache yet: only a claim the cache has
    // seen and lost (or that is being deleted) has vanished.
    let cached_names: BTreeSet<String> = ctx
        .state
        .node_claims
        .ordered()
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    disruption::QueuedCommand {
        started: queued.started,
        replacements_initialized: claims
            .iter()
            .all(|c| c.as_ref().is_some_and(|c| c.is_condition_true(INITIALIZED))),
        replacement_vanished: claims.iter().any(|c| {
            c.as_ref()
                .is_none_or(|c| c.metadata.deletion_timestamp.is_some())
        }) && !ctx.inflight.created_not_cached(&cached_names),
    }
}

/// The effects of a pass of the queue on one command: the controller's writes
/// ([`LiveQueue`]), or a test's record of them.
trait QueueEffects<T> {
    /// Deletes the command's candidates (its replacements are ready).
    async fn finish(&mut self, command: &T) -> Result<(), ControllerError>;
    /// Releases the command's candidates.
    async fn roll_back(&mut self, command: &T, why: disruption::RollbackReason);
    /// Says that the command waits for its replacements.
    async fn wait(&mut self, command: &T);
}

/// Acts on each command's step in queue order and stops at the first failed finish (its
/// command stays queued, and so do those after it). Returns the indices of the commands
/// settled (finished or rolled back) and the failure, if any: the caller drops the settled
/// ones in either case.
async fn queue_pass<T>(
    queued: &[T],
    steps: &[disruption::QueueStep],
    effects: &mut impl QueueEffects<T>,
) -> (Vec<usize>, Option<ControllerError>) {
    let mut settled = Vec::new();
    for (index, (command, step)) in queued.iter().zip(steps).enumerate() {
        match step {
            disruption::QueueStep::Finish => {
                if let Err(error) = effects.finish(command).await {
                    return (settled, Some(error));
                }
                settled.push(index);
            }
            disruption::QueueStep::RollBack(why) => {
                effects.roll_back(command, *why).await;
                settled.push(index);
            }
            disruption::QueueStep::Wait => effects.wait(command).await,
        }
    }
    (settled, None)
}

/// The controller's effects on its queue.
struct LiveQueue<'a> {
    ctx: &'a Context,
    memory: &'a SharedMemory,
}

impl QueueEffects<Queued> for LiveQueue<'_> {
    async fn finish(&mut self, queued: &Queued) -> Result<(), ControllerError> {
        finish(self.ctx, self.memory, &queued.command, false).await
    }

    async fn roll_back(&mut self, queued: &Queued, why: disruption::RollbackReason) {
        let command = &queued.command;
        tracing::warn!(candidates = ?command.candidates, replacements = ?queued.replacements, reason = %why, "disruption command failed; rolled back");
        self.ctx
            .metrics
            .voluntary_disruption_queue_failures
            .inc(&series::DecisionReason {
                decision: command.decision().as_str().into(),
                reason: command.reason().metric_label().into(),
            });
        rollback(self.ctx, self.memory, &command.candidates).await;
    }

    async fn wait(&mut self, queued: &Queued) {
        for name in &queued.command.candidates {
            if let Some(claim) = claim_named(self.ctx, name) {
                self.ctx
                    .events
                    .normal(
                        &Involved::of(claim.as_ref()),
                        "DisruptionWaitingReadiness",
                        "Waiting on readiness to continue disruption",
                    )
                    .await;
            }
        }
    }
}

/// The `consolidation_policy` label of the NodePool `claim` belongs to (empty when the pool
/// is not cached).
fn pool_policy(ctx: &Context, claim: &NodeClaim) -> &'static str {
    let Some(pool) = convert::label(&claim.metadata, labels::NODEPOOL_LABEL) else {
        return "";
    };
    ctx.state
        .node_pools
        .get(&kube::runtime::reflector::ObjectRef::new(pool))
        .map(|p| {
            let disruption = p.spec.disruption.clone().unwrap_or_default();
            series::consolidation_policy(disruption.effective_consolidation_policy())
        })
        .unwrap_or_default()
}

/// Deletes a command's candidates (their replacements, if any, are initialized). When a
/// delete fails and `release_on_failure` is set (nothing will retry the command), the
/// candidates not deleted yet are released (untainted, no longer counted as being disrupted)
/// so that a later pass decides on them again; left marked, they would be blocked as "already
/// being disrupted" forever.
async fn finish(
    ctx: &Context,
    memory: &SharedMemory,
    command: &Command,
    release_on_failure: bool,
) -> Result<(), ControllerError> {
    let api = Api::<NodeClaim>::all(ctx.client.clone());
    let reason = command.reason();
    for (index, name) in command.candidates.iter().enumerate() {
        let Some(claim) = claim_named(ctx, name) else {
            continue;
        };
        let message = format!(
            "Disrupting NodeClaim: {} ({})",
            reason.as_str(),
            command.explanation
        );
        ctx.events
            .normal(
                &Involved::of(claim.as_ref()),
                "DisruptionTerminating",
                &message,
            )
            .await;
        // Drift flows through here too: only consolidation reports a policy (upstream).
        let policy = if command.method.consolidation_type().is_empty() {
            ""
        } else {
            pool_policy(ctx, &claim)
        };
        let disrupted = series::Disruption::of_claim(reason.metric_label(), policy, &claim);
        if let Some(node) = node_of(ctx, &claim) {
            ctx.events
                .normal(
                    &Involved::node(&node),
                    "DisruptionTerminating",
                    &format!("Disrupting Node: {}", reason.as_str()),
                )
                .await;
            let moving = reschedulable_pods(&ctx.state.pods_on_node(node.name())).len();
            ctx.metrics
                .pods_disruption_initiated
                .add(&disrupted, moving as u64);
        }
        match api.delete(name, &DeleteParams::background()).await {
            Ok(_) => {}
            Err(e) if util::is_not_found(&e) => {}
            Err(e) => {
                if release_on_failure {
                    tracing::warn!(nodeclaim = %name, error = %e, "could not delete a disruption candidate; released for a later pass");
                    rollback(ctx, memory, &command.candidates[index..]).await;
                }
                return Err(e.into());
            }
        }
        ctx.metrics.nodeclaims_disrupted.inc(&disrupted);
        tracing::info!(nodeclaim = %name, reason = reason.metric_label(), decision = command.decision().as_str(), "disrupting nodeclaim");
    }
    let mut memory = lock(memory);
    let live: BTreeSet<String> = ctx
        .state
        .node_claims
        .ordered()
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .collect();
    memory.disrupting.retain(|n| live.contains(n));
    Ok(())
}

/// Taints the candidate's Node `karpenter.sh/disrupted:NoSchedule` and sets its claim's
/// `DisruptionReason`.
async fn mark(
    ctx: &Context,
    claim: &NodeClaim,
    node: &LeanNode,
    reason: &str,
) -> Result<(), ControllerError> {
    edit_node_taints(ctx, node, |taints| {
        let missing = !taints.iter().any(|t| t.key == labels::DISRUPTED_TAINT_KEY);
        if missing {
            taints.push(Taint {
                key: labels::DISRUPTED_TAINT_KEY.into(),
                effect: "NoSchedule".into(),
                value: None,
                time_added: None,
            });
        }
        missing
    })
    .await?;
    let reason_condition = condition(ctx, DISRUPTION_REASON, ConditionStatus::True, reason, "");
    edit_claim_conditions(ctx, claim, |conds| {
        joinery_api::condition::set_condition(conds, reason_condition.clone())
    })
    .await?;
    Ok(())
}

/// Untaints a command's candidates and clears their `DisruptionReason` (best effort: what
/// fails here is retried by the abandoned-taint sweep of later passes).
async fn rollback(ctx: &Context, memory: &SharedMemory, candidates: &[String]) {
    for name in candidates {
        lock(memory).disrupting.remove(name);
        let Some(claim) = claim_named(ctx, name) else {
            continue;
        };
        let Some(node) = node_of(ctx, &claim) else {
            continue;
        };
        if let Err(e) = release(ctx, &claim, &node).await {
            tracing::warn!(nodeclaim = %name, error = %e, "could not untaint a candidate; a later pass retries");
        }
    }
}

mod inputs;
mod signals;

use signals::{maintain_signals, release};

#[cfg(test)]
mod tests;
