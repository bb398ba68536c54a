//! Each claim's disruption signals, kept current by the disruption loop before its pass:
//! `lastPodEventTime`, `Consolidatable`, `Drifted`, and the untainting of nodes an
//! interrupted disruption left behind.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::SystemTime;

use joinery_adapter::convert;
use joinery_adapter::disruption as kube_disruption;
use joinery_adapter::drain::reschedulable_pods;
use joinery_adapter::lean::LeanNode;
use joinery_api::{ConditionStatus, HasConditions, NodeClaim, NodePool};
use joinery_core::disruption;
use joinery_core::instance_type::InstanceType;
use joinery_core::labels;
use kube::api::Api;
use serde_json::json;

use super::{
    DRIFT_RECHECK, INSTANCE_TYPE_DRIFT_AGE, INSTANCE_TYPE_RECHECK, POD_EVENT_DEDUP, SharedMemory,
    inputs, lock, name_of, node_of,
};
use crate::lifecycle::conditions::{
    CONSOLIDATABLE, DISRUPTION_REASON, DRIFTED, INITIALIZED, LAUNCHED,
};
use crate::state::Ordered;
use crate::util::{self, condition, k8s_time, merge_patch_status, system_time};
use crate::writes::{edit_claim_conditions, edit_node_taints};
use crate::{Context, ControllerError, provisioner};

/// Keeps each initialized claim's signals current: `lastPodEventTime`, `Consolidatable` and
/// `Drifted`; and untaints nodes an interrupted disruption left tainted. A claim whose update
/// fails (an API error) is retried on the next pass; the others, and the pass's decision, go on.
///
/// A claim is revisited only when something its signals are read from changed (see
/// [`inputs::claim_digest`]) or when one of them is due to change with time alone (its
/// `consolidateAfter` running out, the next drift check with its plugin); when no cache
/// changed at all and no claim is due, no claim is looked at. Upstream's controllers are
/// woken by watch events and requeue themselves for such moments; walking every claim every
/// second was most of a long simulation's time.
pub(super) async fn maintain_signals(
    ctx: &Context,
    memory: &SharedMemory,
    pools: &BTreeMap<String, Arc<NodePool>>,
    now: SystemTime,
) -> Result<(), ControllerError> {
    // Read before the caches: a change from here on makes the next visit look again.
    let generation = ctx.state.changed.generation();
    {
        let memory = lock(memory);
        let idle = memory
            .signals_idle
            .as_ref()
            .is_some_and(|(seen, disrupting, until)| {
                *seen == generation && *disrupting == memory.disrupting && now < *until
            });
        if idle {
            return Ok(());
        }
    }
    let mut types_by_pool: Option<BTreeMap<String, Arc<Vec<InstanceType>>>> = None;
    let claims = ctx.state.node_claims.ordered();
    // The earliest moment a claim is due with time alone; `None` once one is not settled.
    let mut all_settled = Some(now + DRIFT_RECHECK);
    for claim in &claims {
        if claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let pool_name = convert::label(&claim.metadata, labels::NODEPOOL_LABEL).unwrap_or_default();
        let Some(pool) = pools.get(pool_name).cloned() else {
            continue;
        };
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        if let Some(until) = still_settled(ctx, memory, claim, &pool, &uid, generation, now) {
            all_settled = all_settled.map(|earliest| earliest.min(until));
            continue;
        }
        let digest = inputs::claim_digest(ctx, &lock(memory), claim, &pool);
        match maintain_claim(ctx, memory, claim, &pool, &mut types_by_pool, now).await {
            Ok(Some(until)) if !uid.is_empty() => {
                all_settled = all_settled.map(|earliest| earliest.min(until));
                let ours = is_disrupting(&lock(memory), claim);
                lock(memory).settled.insert(
                    uid,
                    Settled {
                        digest,
                        until,
                        generation,
                        ours,
                    },
                );
            }
            Ok(_) => {
                all_settled = None;
                lock(memory).settled.remove(&uid);
            }
            Err(error) => {
                all_settled = None;
                lock(memory).settled.remove(&uid);
                tracing::debug!(nodeclaim = %name_of(claim.as_ref()), %error, "updating disruption signals failed; retried next pass");
            }
        }
    }
    let mut memory = lock(memory);
    memory.signals_idle = all_settled.map(|until| (generation, memory.disrupting.clone(), until));
    // What is remembered per claim UID is forgotten once the claim is gone (looked for only
    // when a table holds more entries than there are claims).
    let entries = [
        memory.settled.len(),
        memory.plugin_drift.len(),
        memory.static_drift.len(),
        memory.instance_type_found.len(),
    ];
    if entries.into_iter().any(|n| n > claims.len()) {
        let live: BTreeSet<&str> = claims
            .iter()
            .filter_map(|c| c.metadata.uid.as_deref())
            .collect();
        let live = |uid: &String| live.contains(uid.as_str());
        memory.settled.retain(|uid, _| live(uid));
        memory.plugin_drift.retain(|uid, _| live(uid));
        memory.static_drift.retain(|uid, _| live(uid));
        memory.instance_type_found.retain(|uid, _| live(uid));
    }
    Ok(())
}

/// What is known of a claim whose signals need no visit.
pub(super) struct Settled {
    /// The digest of what they were last maintained from ([`inputs::claim_digest`]).
    digest: u64,
    /// Until when they hold with time alone.
    until: SystemTime,
    /// The caches' change count when `digest` was last found current: while it stays the
    /// same (and so does whether this process disrupts the claim), the digest needs no
    /// recomputing.
    generation: u64,
    /// Whether this process was disrupting the claim then.
    ours: bool,
}

fn is_disrupting(memory: &super::Memory, claim: &NodeClaim) -> bool {
    claim
        .metadata
        .name
        .as_ref()
        .is_some_and(|name| memory.disrupting.contains(name))
}

/// Until when `claim`'s signals hold if it needs no visit now: nothing it is read from
/// changed since it was maintained, and no deadline came. The digest is recomputed only when
/// some cache changed since it was last found current.
fn still_settled(
    ctx: &Context,
    memory: &SharedMemory,
    claim: &NodeClaim,
    pool: &NodePool,
    uid: &str,
    generation: u64,
    now: SystemTime,
) -> Option<SystemTime> {
    let mut memory = lock(memory);
    let ours = is_disrupting(&memory, claim);
    let known = memory.settled.get(uid)?;
    if now >= known.until || known.ours != ours {
        return None;
    }
    if known.generation == generation {
        return Some(known.until);
    }
    let digest = inputs::claim_digest(ctx, &memory, claim, pool);
    let known = memory.settled.get_mut(uid)?;
    (known.digest == digest).then(|| {
        known.generation = generation;
        known.until
    })
}

/// Updates one claim's signals. Returns until when they stay as they are if nothing they are
/// read from changes (at most [`DRIFT_RECHECK`] ahead), or `None` when they must be looked at
/// again on the next pass (a pod change whose `lastPodEventTime` write waits out
/// [`POD_EVENT_DEDUP`], a plugin verdict not obtained).
async fn maintain_claim(
    ctx: &Context,
    memory: &SharedMemory,
    claim: &NodeClaim,
    pool: &NodePool,
    types_by_pool: &mut Option<BTreeMap<String, Arc<Vec<InstanceType>>>>,
    now: SystemTime,
) -> Result<Option<SystemTime>, ControllerError> {
    let mut until = now + DRIFT_RECHECK;
    if claim.is_condition_true(LAUNCHED) {
        match update_drifted(ctx, memory, claim, pool, types_by_pool, now).await? {
            Some(due) => until = until.min(due),
            None => return Ok(None),
        }
    }
    if !claim.is_condition_true(INITIALIZED) {
        return Ok(Some(until));
    }
    let Some(node) = node_of(ctx, claim) else {
        return Ok(Some(until));
    };
    let node_name = node.name();
    if !record_pod_events(ctx, memory, claim, node_name, now).await? {
        return Ok(None);
    }
    if let Some(flips) = update_consolidatable(ctx, claim, pool, now).await? {
        until = until.min(flips);
    }
    // Crash recovery (upstream's rule): a node that carries the disrupted taint while
    // neither it nor its claim is being deleted was left by a disruption that never
    // finished: untaint it.
    let ours = lock(memory).disrupting.contains(&name_of(claim));
    if node.metadata.deletion_timestamp.is_none() && !ours {
        release(ctx, claim, &node).await?;
    }
    Ok(Some(until))
}

/// A workload pod arrived on or left the node: record the pod event time (at most every
/// [`POD_EVENT_DEDUP`]). Returns whether the node's pods are recorded as seen (`false`
/// while a change waits for the dedup window).
async fn record_pod_events(
    ctx: &Context,
    memory: &SharedMemory,
    claim: &NodeClaim,
    node_name: &str,
    now: SystemTime,
) -> Result<bool, ControllerError> {
    let workload = reschedulable_pods(&ctx.state.pods_on_node(node_name));
    let mut uids: Vec<String> = workload
        .iter()
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    uids.sort();
    let previous = lock(memory).pods_seen.get(node_name).cloned();
    if previous.as_ref() == Some(&uids) {
        return Ok(true);
    }
    let last = claim
        .status
        .as_ref()
        .and_then(|s| s.last_pod_event_time.as_ref())
        .map(system_time);
    let first_sight = previous.is_none() && last.is_some();
    let recent = last.is_some_and(|l| now.duration_since(l).unwrap_or_default() < POD_EVENT_DEDUP);
    if !first_sight && !recent {
        merge_patch_status(
            &Api::<NodeClaim>::all(ctx.client.clone()),
            &name_of(claim),
            json!({"status": {"lastPodEventTime": k8s_time(now)}}),
        )
        .await?;
    }
    let seen = first_sight || !recent;
    if seen {
        lock(memory).pods_seen.insert(node_name.to_string(), uids);
    }
    Ok(seen)
}

async fn update_consolidatable(
    ctx: &Context,
    claim: &NodeClaim,
    pool: &NodePool,
    now: SystemTime,
) -> Result<Option<SystemTime>, ControllerError> {
    let initialized_at = claim
        .condition(INITIALIZED)
        .map(|c| system_time(&c.last_transition_time));
    let last_pod = claim
        .status
        .as_ref()
        .and_then(|s| s.last_pod_event_time.as_ref())
        .map(system_time);
    let after = kube_disruption::consolidate_after(pool);
    let wanted = disruption::consolidatable(after, initialized_at, last_pod, now);
    let flips = if wanted == Some(false) {
        disruption::signals::consolidatable_at(after, initialized_at, last_pod)
    } else {
        None
    };
    // `None`: consolidateAfter is Never, and the condition goes away.
    let changed = match wanted {
        None => claim.condition(CONSOLIDATABLE).is_some(),
        Some(wanted) => wanted != claim.is_condition_true(CONSOLIDATABLE),
    };
    if !changed {
        return Ok(flips);
    }
    let consolidatable = condition(
        ctx,
        CONSOLIDATABLE,
        ConditionStatus::True,
        "Consolidatable",
        "",
    );
    edit_claim_conditions(ctx, claim, |conds| {
        if wanted == Some(true) {
            joinery_api::condition::set_condition(conds, consolidatable.clone())
        } else {
            joinery_api::condition::remove_condition(conds, CONSOLIDATABLE)
        }
    })
    .await?;
    Ok(flips)
}

/// Sets or clears the claim's `Drifted` condition: the core's checks (template hash,
/// requirements, and for claims older than an hour the instance type), then the cloud
/// plugin's `is-drifted` (asked at most every [`DRIFT_RECHECK`] per claim). Returns when the
/// verdict is due again with time alone, `None` when it must be looked at on the next pass.
async fn update_drifted(
    ctx: &Context,
    memory: &SharedMemory,
    claim: &NodeClaim,
    pool: &NodePool,
    types_by_pool: &mut Option<BTreeMap<String, Arc<Vec<InstanceType>>>>,
    now: SystemTime,
) -> Result<Option<SystemTime>, ControllerError> {
    let created = claim
        .metadata
        .creation_timestamp
        .as_ref()
        .map(system_time)
        .unwrap_or(now);
    // The instance-type check needs the pool's types from its plugin: only for claims older
    // than an hour, only when the claim's plugin verdict is due again (every DRIFT_RECHECK),
    // not on every pass, and not within INSTANCE_TYPE_RECHECK of finding the type offered.
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    let old = {
        let memory = lock(memory);
        instance_type_check_due(
            created,
            memory.plugin_drift.get(&uid).map(|(at, _, _)| *at),
            memory.instance_type_found.get(&uid).copied(),
            now,
        )
    };
    if old && types_by_pool.is_none() {
        let (offers, _) = provisioner::ready_nodepools(ctx).await;
        *types_by_pool = Some(
            offers
                .into_iter()
                .map(|(p, types)| (name_of(p.as_ref()), types))
                .collect(),
        );
    }
    let types = if old {
        types_by_pool
            .as_ref()
            .and_then(|m| m.get(&name_of(pool)))
            .map(|types| types.as_slice())
    } else {
        None
    };
    let versions = (
        claim.metadata.resource_version.clone().unwrap_or_default(),
        pool.metadata.resource_version.clone().unwrap_or_default(),
    );
    let memoizable = types.is_none() && !versions.0.is_empty() && !versions.1.is_empty();
    let remembered = memoizable
        .then(|| {
            lock(memory)
                .static_drift
                .get(&uid)
                .filter(|(seen, _)| *seen == versions)
                .map(|(_, reason)| reason.clone())
        })
        .flatten();
    let mut reason = match remembered {
        Some(reason) => reason,
        None => {
            let reason = kube_disruption::drift(claim, pool, types).map(|r| r.as_str().to_string());
            if memoizable {
                lock(memory)
                    .static_drift
                    .insert(uid.clone(), (versions, reason.clone()));
            }
            if types.is_some() && reason.is_none() {
                // Checked and still offered (a claim drifted for another reason was not
                // checked): not checked again for a while.
                lock(memory).instance_type_found.insert(uid.clone(), now);
            }
            reason
        }
    };
    let drifted_alone = reason.is_some();
    if !drifted_alone {
        reason = plugin_drift(ctx, memory, claim, now).await;
    }
    // When the verdict is due again with time alone: the next check with the plugin (and of
    // the instance type, for old claims), and the moment the claim is old enough for that.
    let next_check = match lock(memory).plugin_drift.get(&uid) {
        Some((at, _, _)) => Some(*at + DRIFT_RECHECK),
        // No verdict from the plugin, or an old claim's instance type to check every pass.
        None if !drifted_alone || old => None,
        None => Some(now + DRIFT_RECHECK),
    };
    let aging = created + INSTANCE_TYPE_DRIFT_AGE;
    let next = next_check.map(|at| if aging > now { at.min(aging) } else { at });
    let current = claim
        .condition(DRIFTED)
        .filter(|c| c.is_true())
        .map(|c| c.reason.clone());
    if current == reason {
        return Ok(next);
    }
    let drifted = reason
        .as_ref()
        .map(|reason| condition(ctx, DRIFTED, ConditionStatus::True, reason, ""));
    edit_claim_conditions(ctx, claim, |conds| match &drifted {
        Some(drifted) => joinery_api::condition::set_condition(conds, drifted.clone()),
        None => joinery_api::condition::remove_condition(conds, DRIFTED),
    })
    .await?;
    if let Some(reason) = &reason {
        tracing::info!(nodeclaim = %name_of(claim), %reason, "nodeclaim drifted");
    }
    Ok(next)
}

/// Whether a claim `created` then has its instance type checked on a visit at `now`: once it
/// is an hour old, when its plugin verdict (last asked at `plugin_asked`) is due again, and not
/// within [`INSTANCE_TYPE_RECHECK`] of the type last being `found` offered (upstream's
/// cadence: the check asks the plugin for every instance type).
fn instance_type_check_due(
    created: SystemTime,
    plugin_asked: Option<SystemTime>,
    found: Option<SystemTime>,
    now: SystemTime,
) -> bool {
    let aged = now.duration_since(created).unwrap_or_default() >= INSTANCE_TYPE_DRIFT_AGE;
    let plugin_due = plugin_asked.is_none_or(|at| util::due(at, now, DRIFT_RECHECK));
    let found_lately = found.is_some_and(|at| !util::due(at, now, INSTANCE_TYPE_RECHECK));
    aged && plugin_due && !found_lately
}

/// The cloud plugin's drift verdict for the claim, cached for [`DRIFT_RECHECK`] or until its
/// NodeClass changes. A failed call keeps the previous verdict.
async fn plugin_drift(
    ctx: &Context,
    memory: &SharedMemory,
    claim: &NodeClaim,
    now: SystemTime,
) -> Option<String> {
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    let class_ref = &claim.spec.node_class_ref;
    let key = crate::lifecycle::class_key(claim);
    let class = ctx.state.node_class(&key, &class_ref.name)?;
    let version = class.metadata.resource_version.clone().unwrap_or_default();
    if let Some((at, seen, verdict)) = lock(memory).plugin_drift.get(&uid).cloned()
        && seen == version
        && now.duration_since(at).unwrap_or_default() < DRIFT_RECHECK
    {
        return verdict;
    }
    let plugin = ctx
        .cloud
        .plugin_for(&class_ref.group, &class_ref.kind)
        .ok()?;
    let previous = lock(memory)
        .plugin_drift
        .get(&uid)
        .and_then(|(_, _, v)| v.clone());
    let verdict = match plugin
        .is_drifted(
            &crate::lifecycle::plugin_node_claim(claim),
            &crate::cloud::plugin_node_class(&class),
        )
        .await
    {
        Ok(verdict) => verdict,
        Err(e) => {
            tracing::debug!(nodeclaim = %name_of(claim), error = %e, "is-drifted failed; keeping the previous verdict");
            previous
        }
    };
    lock(memory)
        .plugin_drift
        .insert(uid, (now, version, verdict.clone()));
    verdict
}

/// Removes the disrupted taint and the `DisruptionReason` condition from a node and claim that
/// are not being deleted.
pub(super) async fn release(
    ctx: &Context,
    claim: &NodeClaim,
    node: &LeanNode,
) -> Result<(), ControllerError> {
    let tainted = node
        .taints()
        .iter()
        .any(|t| t.key == labels::DISRUPTED_TAINT_KEY);
    if tainted {
        edit_node_taints(ctx, node, |taints| {
            let before = taints.len();
            taints.retain(|t| t.key != labels::DISRUPTED_TAINT_KEY);
            taints.len() != before
        })
        .await?;
        tracing::info!(node = %node.name(), "removed the disrupted taint of a disruption that did not complete");
    }
    edit_claim_conditions(ctx, claim, |conds| {
        joinery_api::condition::remove_condition(conds, DISRUPTION_REASON)
    })
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn an_instance_type_found_offered_is_checked_again_after_thirty_minutes() {
        let created = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let at = |minutes: u64| created + Duration::from_secs(minutes * 60);
        // Younger than an hour: never.
        assert!(!instance_type_check_due(created, None, None, at(59)));
        // An hour old, never checked: due.
        assert!(instance_type_check_due(created, None, None, at(60)));
        // Only when the plugin's verdict is due again (every 5 minutes).
        assert!(!instance_type_check_due(
            created,
            Some(at(58)),
            None,
            at(61)
        ));
        assert!(instance_type_check_due(created, Some(at(56)), None, at(61)));
        // Found offered at 60: not before 90, whatever the plugin.
        for minute in [65, 70, 85, 89] {
            assert!(
                !instance_type_check_due(created, Some(at(minute - 5)), Some(at(60)), at(minute)),
                "{minute}"
            );
        }
        assert!(instance_type_check_due(
            created,
            Some(at(85)),
            Some(at(60)),
            at(90)
        ));
        // A clock stepped back before the last finding checks at once, as `util::due` does.
        assert!(instance_type_check_due(created, None, Some(at(90)), at(80)));
    }
}
