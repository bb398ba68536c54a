//! NodePool status: resources (summed capacity of the pool's NodeClaims, plus `nodes`), the
//! node count, and the `NodeClassReady`, `ValidationSucceeded`, `InstanceTypesReady` and
//! `Ready` conditions. Refreshed every 5 seconds like upstream's counter controller.
//!
//! `InstanceTypesReady` is Joinery's: `False` when the pool's requirements leave no instance
//! type of its NodeClass with a compatible offering (a misspelt capacity type, a zone the
//! cloud does not have), which upstream only shows once a pod stays pending. Entering that
//! state is also an event on the NodePool and one warning in the log, naming the field and
//! the fix. It is `Unknown` while the NodeClass is not ready or its instance types cannot be
//! listed (a cloud error is not a misconfiguration), and then does not hold `Ready` down.
//!
//! A refresh is skipped while no cache changed since the last one succeeded, no offering is
//! marked unavailable and the instance types it read are still cached
//! ([`INSTANCE_TYPE_TTL`]): it would write nothing (upstream's controller is woken by
//! events the same way).

use crate::state::Ordered;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use joinery_api::{ConditionStatus, NodePool};
use joinery_core::instance_type::InstanceType;
use joinery_core::labels;
use joinery_core::resources::Resources;
use kube::api::Api;
use serde_json::json;
use tokio::sync::watch;

use crate::state::NodeClassKey;
use crate::util::{self, condition};
use crate::writes;
use joinery_adapter::convert;

use crate::cloud::INSTANCE_TYPE_TTL;
use crate::mirror::Unchanged;
use crate::{Context, ControllerError, nodeclass};

/// Runs the NodePool status loop.
pub async fn run(ctx: Arc<Context>, stopped: watch::Receiver<bool>) {
    let last: Arc<Mutex<Unchanged>> = Arc::default();
    let remembered: Arc<Mutex<Remembered>> = Arc::default();
    util::run_loop(
        ctx,
        stopped,
        "nodepool.status",
        Duration::from_secs(5),
        move |ctx| {
            let (last, remembered) = (last.clone(), remembered.clone());
            async move {
                let now = ctx.clock.now();
                // Read before the caches: a change from here on makes the next step look.
                let generation = ctx.state.changed.generation();
                let unchanged = last
                    .lock()
                    .expect("nodepool refresh lock")
                    .holds(generation, now);
                if unchanged && !ctx.cloud.any_unavailable(now) {
                    return Ok(());
                }
                let complete = step(ctx.clone(), &remembered).await?;
                last.lock().expect("nodepool refresh lock").record(
                    complete && !ctx.cloud.any_unavailable(now),
                    generation,
                    Some(now + INSTANCE_TYPE_TTL),
                );
                Ok(())
            }
        },
    )
    .await;
}

/// Refreshes every NodePool's status. `Ok(false)` when a pool's instance types could not be
/// listed (a cloud error): the next round tries again whether or not anything changed.
async fn step(ctx: Arc<Context>, remembered: &Mutex<Remembered>) -> Result<bool, ControllerError> {
    let mut complete = true;
    let mut usage: BTreeMap<String, (Resources, u64)> = BTreeMap::new();
    let claims = ctx.state.node_claims.ordered();
    {
        let mut memory = lock(remembered);
        for claim in &claims {
            if claim.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let Some(pool) =
                convert::label(&claim.metadata, labels::NODEPOOL_LABEL).map(str::to_owned)
            else {
                continue;
            };
            let entry = usage.entry(pool).or_default();
            entry.1 += 1;
            if let Some(capacity) = memory.capacity(claim) {
                entry.0 += capacity;
            }
        }
        if memory.capacities.len() > claims.len() {
            let live: std::collections::HashSet<&str> = claims
                .iter()
                .filter_map(|c| c.metadata.uid.as_deref())
                .collect();
            memory
                .capacities
                .retain(|uid, _| live.contains(uid.as_str()));
        }
    }
    let pools = ctx.state.node_pools.ordered();
    for pool in pools.iter().cloned() {
        let name = pool.metadata.name.clone().unwrap_or_default();
        let (capacity, nodes) = usage.remove(&name).unwrap_or_default();
        let mut resources = capacity;
        resources.set("nodes", nodes);
        let class_ref = &pool.spec.template.spec.node_class_ref;
        let key = NodeClassKey {
            group: class_ref.group.clone(),
            kind: class_ref.kind.clone(),
        };
        let class_ready = match ctx.state.node_class(&key, &class_ref.name) {
            None => condition(
                &ctx,
                "NodeClassReady",
                ConditionStatus::False,
                "NodeClassNotFound",
                format!("{} {} not found", key.kind, class_ref.name),
            ),
            Some(c) if nodeclass::is_ready(&c) => condition(
                &ctx,
                "NodeClassReady",
                ConditionStatus::True,
                "NodeClassReady",
                "",
            ),
            Some(_) => condition(
                &ctx,
                "NodeClassReady",
                ConditionStatus::False,
                "NodeClassNotReady",
                format!("{} {} is not ready", key.kind, class_ref.name),
            ),
        };
        let validation = match joinery_adapter::template::node_claim_template(&pool) {
            Ok(_) => condition(
                &ctx,
                "ValidationSucceeded",
                ConditionStatus::True,
                "ValidationSucceeded",
                "",
            ),
            Err(e) => condition(
                &ctx,
                "ValidationSucceeded",
                ConditionStatus::False,
                "ValidationFailed",
                util::truncate(&e.to_string(), 1000),
            ),
        };
        let instance_types = instance_types_condition(&ctx, &pool, &key, remembered).await;
        complete &= instance_types.reason != INSTANCE_TYPES_UNAVAILABLE;
        let ready = if class_ready.is_true()
            && validation.is_true()
            && instance_types.status != ConditionStatus::False
        {
            condition(&ctx, "Ready", ConditionStatus::True, "Ready", "")
        } else {
            // What holds it back, so that `kubectl describe` and the pods' scheduling events
            // say it without a second look.
            let failing: Vec<String> = [&class_ready, &validation, &instance_types]
                .into_iter()
                .filter(|c| c.status == ConditionStatus::False)
                .map(|c| format!("{}=False ({}): {}", c.type_, c.reason, c.message))
                .collect();
            condition(
                &ctx,
                "Ready",
                ConditionStatus::False,
                "NotReady",
                util::truncate(&failing.join("; "), 1000),
            )
        };
        let resource_list = convert::to_resource_list(&resources);
        let api: Api<NodePool> = Api::all(ctx.client.clone());
        // Guarded: the conditions are merged into the pool's latest ones (another controller
        // may own other condition types).
        let written = writes::patch_guarded(&api, pool.as_ref(), writes::Part::Status, |current| {
            let mut conds = current.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
            let mut changed = false;
            for c in [&class_ready, &validation, &instance_types, &ready] {
                changed |= joinery_api::condition::set_condition(&mut conds, c.clone());
            }
            let current_resources = current.status.as_ref().and_then(|s| s.resources.clone()).unwrap_or_default();
            let current_nodes = current.status.as_ref().and_then(|s| s.nodes).unwrap_or(0);
            (changed || current_resources != resource_list || current_nodes != nodes as i64)
                .then(|| json!({"status": {"resources": resource_list, "nodes": nodes, "conditions": conds}}))
        })
        .await;
        match written {
            Ok(_) => {}
            Err(e) if util::is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    lock(remembered).launchable.retain(|uid, _| {
        pools
            .iter()
            .any(|p| p.metadata.uid.as_deref() == Some(uid.as_str()))
    });
    Ok(complete)
}

/// Per NodePool (by UID: a pool deleted and created again under its name starts over): the
/// generation and instance-type list (by identity) last checked for launchable types, and
/// the answer; pools gone are forgotten at the end of each refresh. Both change rarely; the check reads every type's
/// offerings, and the loop runs every 5 s while the cluster changes.
type Launchable = HashMap<
    String,
    (
        i64,
        Arc<Vec<InstanceType>>,
        Result<usize, joinery_core::scheduling::NothingLaunchable>,
    ),
>;

/// What the loop remembers between refreshes.
#[derive(Default)]
struct Remembered {
    launchable: Launchable,
    /// Each NodeClaim's parsed `status.capacity` (by UID) with the resourceVersion it was
    /// read from (`None`: unreadable): a refresh runs whenever any cache changed, and parsing
    /// every claim's quantities each time was most of its cost. Claims gone are forgotten.
    capacities: HashMap<String, (String, Option<Resources>)>,
}

impl Remembered {
    /// The claim's capacity, parsed once per version of the claim.
    fn capacity(&mut self, claim: &joinery_api::NodeClaim) -> Option<&Resources> {
        let uid = claim.metadata.uid.as_deref().unwrap_or_default();
        let version = claim
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default();
        let fresh = self
            .capacities
            .get(uid)
            .is_some_and(|(seen, _)| seen == version && !version.is_empty());
        if !fresh {
            let parsed = convert::resource_list(
                "status.capacity",
                claim.status.as_ref().and_then(|s| s.capacity.as_ref()),
            )
            .ok();
            self.capacities
                .insert(uid.to_string(), (version.to_string(), parsed));
        }
        self.capacities.get(uid).and_then(|(_, c)| c.as_ref())
    }
}

fn lock(remembered: &Mutex<Remembered>) -> std::sync::MutexGuard<'_, Remembered> {
    remembered.lock().expect("nodepool status memory lock")
}

/// The `InstanceTypesReady` reason while a NodeClass's instance types cannot be listed.
const INSTANCE_TYPES_UNAVAILABLE: &str = "InstanceTypesUnavailable";

/// The condition type saying whether a NodePool's requirements leave anything to launch.
pub const INSTANCE_TYPES_READY: &str = "InstanceTypesReady";

/// The pool's `InstanceTypesReady` condition. When it turns `False` (or its message changes),
/// also an event on the pool and one warning log line.
async fn instance_types_condition(
    ctx: &Context,
    pool: &NodePool,
    key: &NodeClassKey,
    remembered: &Mutex<Remembered>,
) -> joinery_api::Condition {
    use joinery_api::HasConditions;
    let unknown = |reason: &str, message: String| {
        condition(
            ctx,
            INSTANCE_TYPES_READY,
            ConditionStatus::Unknown,
            reason,
            message,
        )
    };
    let class_ref = &pool.spec.template.spec.node_class_ref;
    let class = match ctx.state.node_class(key, &class_ref.name) {
        Some(class) if nodeclass::is_ready(&class) => class,
        _ => {
            return unknown(
                "NodeClassNotReady",
                format!("{} {} is not ready", key.kind, class_ref.name),
            );
        }
    };
    let Ok(template) = joinery_adapter::template::node_claim_template(pool) else {
        return unknown("ValidationFailed", "see ValidationSucceeded".into());
    };
    let types = match ctx.cloud.instance_types(&class).await {
        Ok(types) => types,
        Err(e) => {
            return unknown(
                INSTANCE_TYPES_UNAVAILABLE,
                util::truncate(
                    &format!("cannot list the NodeClass's instance types: {e}"),
                    1000,
                ),
            );
        }
    };
    let generation = pool.metadata.generation.unwrap_or_default();
    let uid = pool.metadata.uid.clone().unwrap_or_default();
    let known = lock(remembered)
        .launchable
        .get(&uid)
        .and_then(|(seen, listed, answer)| {
            (*seen == generation && Arc::ptr_eq(listed, &types)).then(|| answer.clone())
        });
    let answer = known.unwrap_or_else(|| {
        let policy = joinery_core::labels::LabelPolicy::default();
        let answer =
            joinery_core::scheduling::launchable_types(&template.requirements, &types, &policy);
        lock(remembered)
            .launchable
            .insert(uid, (generation, types.clone(), answer.clone()));
        answer
    });
    match answer {
        Ok(count) => condition(
            ctx,
            INSTANCE_TYPES_READY,
            ConditionStatus::True,
            "InstanceTypesReady",
            format!("{count} instance types have an offering compatible with the requirements"),
        ),
        Err(nothing) => {
            let message = util::truncate(&nothing.to_string(), 1000);
            let name = pool.metadata.name.as_deref().unwrap_or_default();
            let already = pool
                .status
                .as_ref()
                .and_then(|s| s.condition(INSTANCE_TYPES_READY))
                .is_some_and(|c| c.status == ConditionStatus::False && c.message == message);
            if !already {
                tracing::warn!(nodepool = %name, "NodePool {name} can launch nothing: {message}");
                ctx.events
                    .warning(
                        &crate::events::Involved::of(pool),
                        "NoCompatibleInstanceTypes",
                        &message,
                    )
                    .await;
            }
            condition(
                ctx,
                INSTANCE_TYPES_READY,
                ConditionStatus::False,
                "NoCompatibleInstanceTypes",
                message,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(uid: &str, version: &str, cpu: &str) -> joinery_api::NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": uid, "uid": uid, "resourceVersion": version},
            "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []},
            "status": {"capacity": {"cpu": cpu}}
        }))
        .unwrap()
    }

    #[test]
    fn a_claims_capacity_is_read_again_when_its_version_changes() {
        let mut memory = Remembered::default();
        let cpu = |r: Option<&Resources>| r.map(|r| r.cpu_millis);
        assert_eq!(cpu(memory.capacity(&claim("a", "1", "4"))), Some(4000));
        // Same version: what was read then, whatever the object says now.
        assert_eq!(cpu(memory.capacity(&claim("a", "1", "8"))), Some(4000));
        assert_eq!(cpu(memory.capacity(&claim("a", "2", "8"))), Some(8000));
        // An unreadable capacity counts nothing, and is remembered as such.
        assert_eq!(cpu(memory.capacity(&claim("b", "3", "lots"))), None);
        assert_eq!(cpu(memory.capacity(&claim("b", "4", "2"))), Some(2000));
        // Without a version, always read again.
        assert_eq!(cpu(memory.capacity(&claim("c", "", "1"))), Some(1000));
        assert_eq!(cpu(memory.capacity(&claim("c", "", "3"))), Some(3000));
    }
}
