//! Garbage collection between the cloud and the cluster, as upstream Karpenter and its
//! providers do it:
//!
//! - **instances without a NodeClaim.** Every [`GC_INTERVAL`], each cloud plugin lists the
//!   instances it launched for this cluster (`list`, which only returns instances carrying
//!   the cluster's tag). An instance that no NodeClaim owns — by provider ID, or by the
//!   NodeClaim name read back from its tags — is deleted once it is older than
//!   [`INSTANCE_GRACE_PERIOD`], and never while a create of this process may still be
//!   writing its result (the launch cache, claims created but not yet in the cache). A Node
//!   left with the deleted instance's provider ID is deleted too.
//! - **NodeClaims without an instance.** A Registered NodeClaim that is not being deleted,
//!   whose instance the cloud no longer lists and whose Node is missing or not Ready, is
//!   deleted (upstream's NodeClaim garbage collection). Unregistered claims are left to the
//!   registration timeout.
//!
//! A listing that fails skips that plugin for the round: nothing is deleted on partial
//! knowledge.

use crate::state::Ordered;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use joinery_api::HasConditions;
use joinery_runtime::CallError;
use joinery_runtime::contract::{self, CloudError};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams};
use tokio::sync::watch;

use crate::util;
use crate::{CloudCall, Context, ControllerError};

/// The controller name cloud calls of this loop are counted under.
const CONTROLLER: &str = "garbagecollection";

/// How often the cloud is compared with the cluster (upstream: every 2 minutes).
pub const GC_INTERVAL: Duration = Duration::from_secs(120);

/// How old an instance without a NodeClaim must be before it is deleted (upstream providers
/// wait 30 seconds after launch, so a create whose result is being written is never reaped).
pub const INSTANCE_GRACE_PERIOD: Duration = Duration::from_secs(30);

/// Runs the garbage collector until stopped: one round at start, then every [`GC_INTERVAL`].
pub async fn run(ctx: Arc<Context>, mut stopped: watch::Receiver<bool>) {
    loop {
        if *stopped.borrow() {
            break;
        }
        if let Err(e) = step(&ctx).await {
            tracing::warn!(controller = "garbagecollection", error = %e, "garbage collection failed; will retry");
            ctx.metrics.reconcile_error("garbagecollection", &e);
        }
        tokio::select! {
            biased;
            _ = stopped.changed() => {}
            _ = tokio::time::sleep(ctx.clock.to_real(GC_INTERVAL)) => {}
        }
    }
}

/// Parses an RFC 3339 time.
fn parse_time(text: &str) -> Option<SystemTime> {
    joinery_core::time::parse_rfc3339(text).filter(|at| *at >= UNIX_EPOCH)
}

/// What decides whether an instance may be reaped: this cluster's name, the provider IDs
/// and claim names the cluster (and this process) knows, and the time.
#[derive(Debug, Default)]
pub struct Owners {
    /// This cluster's name (`CLUSTER_NAME`): an instance must carry it in its
    /// `joinery.dev/cluster` label to be reaped.
    pub cluster: String,
    /// Provider IDs of NodeClaims (status or launch cache).
    pub provider_ids: HashSet<String>,
    /// Names of NodeClaims that exist (in the cache or just created by this process).
    pub claim_names: HashSet<String>,
}

/// Whether the instance says it belongs to `cluster` (its `joinery.dev/cluster` label).
pub fn is_this_clusters(instance: &contract::Instance, cluster: &str) -> bool {
    instance
        .labels
        .iter()
        .any(|kv| kv.key == joinery_core::labels::CLUSTER_LABEL && kv.value == cluster)
}

/// Whether `instance` is an orphan to delete at `now`: provably this cluster's (checked
/// here, whatever the plugin's `list` returned), not terminating, owned by no NodeClaim, and
/// older than the grace period (an instance without a creation time is never reaped).
pub fn is_orphan(instance: &contract::Instance, owners: &Owners, now: SystemTime) -> bool {
    if !is_this_clusters(instance, &owners.cluster) {
        return false;
    }
    if matches!(
        instance.state,
        contract::InstanceState::Terminating | contract::InstanceState::Terminated
    ) {
        return false;
    }
    if owners.provider_ids.contains(&instance.provider_id) {
        return false;
    }
    if instance
        .node_claim
        .as_ref()
        .is_some_and(|name| owners.claim_names.contains(name))
    {
        return false;
    }
    let Some(created) = instance.created_at.as_deref().and_then(parse_time) else {
        return false;
    };
    now.duration_since(created)
        .is_ok_and(|age| age >= INSTANCE_GRACE_PERIOD)
}

fn owners(ctx: &Context) -> Owners {
    let mut owners = Owners {
        cluster: ctx.settings.cluster_name.clone(),
        ..Default::default()
    };
    for claim in ctx.state.node_claims.ordered() {
        if let Some(pid) = claim.status.as_ref().and_then(|s| s.provider_id.clone()) {
            owners.provider_ids.insert(pid);
        }
        if let Some(name) = claim.metadata.name.clone() {
            owners.claim_names.insert(name);
        }
    }
    owners.claim_names.extend(ctx.inflight.created_names());
    owners
        .provider_ids
        .extend(ctx.inflight.launched_provider_ids());
    owners
}

async fn step(ctx: &Context) -> Result<(), ControllerError> {
    let plugins: Vec<_> = ctx
        .cloud
        .registry()
        .current()
        .iter()
        .filter(|p| p.manifest().node_class.is_some())
        .cloned()
        .collect();
    for plugin in plugins {
        let Some(node_class) = plugin.manifest().node_class.clone() else {
            continue;
        };
        // Only plugins whose NodeClass kind has objects in the cluster are asked: one that
        // serves nothing here has launched nothing here (and may not even be configured).
        let key = crate::state::NodeClassKey {
            group: node_class.group.clone(),
            kind: node_class.kind.clone(),
        };
        if ctx
            .state
            .node_classes
            .get(&key)
            .is_none_or(|store| store.state().is_empty())
        {
            continue;
        }
        // Owners are read before listing: a claim created after this point launches an
        // instance younger than the grace period.
        let owners = owners(ctx);
        let call = CloudCall::new(plugin.name(), "list", "");
        let Ok(result) = ctx.call_cloud(CONTROLLER, &call, plugin.list()).await else {
            continue;
        };
        let instances = match result {
            Ok(instances) => instances,
            Err(e) => {
                tracing::warn!(plugin = plugin.name(), error = %e, "listing instances for garbage collection failed; skipping this round");
                continue;
            }
        };
        let now = ctx.clock.now();
        let foreign = instances
            .iter()
            .filter(|i| !is_this_clusters(i, &owners.cluster))
            .count();
        if foreign > 0 {
            tracing::warn!(plugin = plugin.name(), instances = foreign, cluster = %owners.cluster,
                "the plugin listed instances without this cluster's joinery.dev/cluster label; they are never garbage collected (check the plugin's cluster name against CLUSTER_NAME)");
        }
        for instance in instances.iter().filter(|i| is_orphan(i, &owners, now)) {
            tracing::info!(plugin = plugin.name(), provider_id = %instance.provider_id, node_claim = ?instance.node_claim,
                "garbage collecting an instance no NodeClaim owns");
            let call = CloudCall::new(plugin.name(), "delete", &instance.provider_id);
            let Ok(result) = ctx
                .call_cloud(CONTROLLER, &call, plugin.delete(&instance.provider_id))
                .await
            else {
                continue;
            };
            match result {
                Ok(())
                | Err(CallError::Cloud {
                    error: CloudError::NotFound(_),
                    ..
                }) => {
                    ctx.metrics.instances_garbage_collected.inc(
                        &crate::metrics::series::Provider {
                            provider: plugin.name().into(),
                        },
                    );
                }
                Err(e) => {
                    tracing::warn!(provider_id = %instance.provider_id, error = %e, "deleting an orphan instance failed; will retry");
                    continue;
                }
            }
            for node in ctx.state.nodes_with_provider_id(&instance.provider_id) {
                if let Some(name) = node.metadata.name.clone() {
                    delete_node(ctx, &name).await?;
                }
            }
        }
        collect_claims(
            ctx,
            &plugin,
            &node_class.group,
            &node_class.kind,
            &instances,
        )
        .await?;
    }
    Ok(())
}

/// Deletes Registered NodeClaims of this plugin's kind whose instance is gone and whose Node
/// is missing or not Ready. "Gone" is confirmed by asking for the instance itself: one listing
/// can miss an instance that exists (an eventually consistent list, a lost page), and deleting
/// a claim whose machine still runs would drain a node for nothing.
async fn collect_claims(
    ctx: &Context,
    plugin: &joinery_runtime::plugin::LoadedPlugin,
    group: &str,
    kind: &str,
    instances: &[contract::Instance],
) -> Result<(), ControllerError> {
    let listed: HashSet<&str> = instances
        .iter()
        .filter(|i| i.state != contract::InstanceState::Terminated)
        .map(|i| i.provider_id.as_str())
        .collect();
    for claim in ctx.state.node_claims.ordered() {
        if claim.metadata.deletion_timestamp.is_some()
            || claim.spec.node_class_ref.group != group
            || claim.spec.node_class_ref.kind != kind
            || !claim.is_condition_true(crate::lifecycle::conditions::REGISTERED)
        {
            continue;
        }
        let Some(pid) = claim.status.as_ref().and_then(|s| s.provider_id.clone()) else {
            continue;
        };
        if listed.contains(pid.as_str()) {
            continue;
        }
        let node_ready = ctx
            .state
            .nodes_with_provider_id(&pid)
            .iter()
            .any(|n| n.is_ready());
        if node_ready {
            continue;
        }
        let name = claim.metadata.name.clone().unwrap_or_default();
        let call = CloudCall::new(plugin.name(), "get", &pid);
        let Ok(answer) = ctx.call_cloud(CONTROLLER, &call, plugin.get(&pid)).await else {
            continue;
        };
        match answer {
            Err(CallError::Cloud {
                error: CloudError::NotFound(_),
                ..
            }) => {}
            Ok(instance) if instance.state == contract::InstanceState::Terminated => {}
            Ok(_) => {
                tracing::info!(nodeclaim = %name, provider_id = %pid, "the cloud's listing left out this NodeClaim's instance, but the instance exists; not garbage collecting the claim");
                continue;
            }
            Err(error) => {
                tracing::warn!(nodeclaim = %name, provider_id = %pid, %error, "cannot confirm that this NodeClaim's instance is gone; will retry");
                continue;
            }
        }
        tracing::info!(nodeclaim = %name, provider_id = %pid, "garbage collecting a NodeClaim whose instance is gone");
        ctx.events
            .warning(
                &crate::events::Involved::of(claim.as_ref()),
                "GarbageCollected",
                "the cloud no longer has this NodeClaim's instance",
            )
            .await;
        match Api::<joinery_api::NodeClaim>::all(ctx.client.clone())
            .delete(&name, &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(e) if util::is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

async fn delete_node(ctx: &Context, name: &str) -> Result<(), ControllerError> {
    match Api::<Node>::all(ctx.client.clone())
        .delete(name, &DeleteParams::background())
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if util::is_not_found(&e) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(
        pid: &str,
        claim: Option<&str>,
        created_at: Option<&str>,
        state: contract::InstanceState,
    ) -> contract::Instance {
        foreign(pid, claim, created_at, state, "prod")
    }

    fn foreign(
        pid: &str,
        claim: Option<&str>,
        created_at: Option<&str>,
        state: contract::InstanceState,
        cluster: &str,
    ) -> contract::Instance {
        contract::Instance {
            provider_id: pid.into(),
            instance_type: "standard.small".into(),
            zone: "ch-gva-2".into(),
            capacity_type: "on-demand".into(),
            image_id: None,
            labels: vec![contract::KeyValue {
                key: joinery_core::labels::CLUSTER_LABEL.into(),
                value: cluster.into(),
            }],
            capacity: vec![],
            allocatable: vec![],
            state,
            node_claim: claim.map(str::to_string),
            created_at: created_at.map(str::to_string),
        }
    }

    #[test]
    fn only_old_unowned_live_instances_are_orphans() {
        let created = "2026-01-01T00:00:00Z";
        let at = |seconds: u64| parse_time(created).unwrap() + Duration::from_secs(seconds);
        let owners = Owners {
            cluster: "prod".into(),
            provider_ids: ["exoscale://owned".to_string()].into(),
            claim_names: ["default-abc12".to_string()].into(),
        };
        let running = contract::InstanceState::Running;
        let orphan = instance("exoscale://lost", Some("gone-x"), Some(created), running);
        assert!(
            !is_orphan(&orphan, &owners, at(29)),
            "inside the grace period"
        );
        assert!(is_orphan(&orphan, &owners, at(30)));
        assert!(
            !is_orphan(
                &instance("exoscale://owned", None, Some(created), running),
                &owners,
                at(600)
            ),
            "owned by provider ID"
        );
        assert!(
            !is_orphan(
                &instance(
                    "exoscale://new",
                    Some("default-abc12"),
                    Some(created),
                    running
                ),
                &owners,
                at(600)
            ),
            "its NodeClaim exists (a create whose result is not written yet)"
        );
        assert!(
            !is_orphan(
                &instance("exoscale://x", None, None, running),
                &owners,
                at(600)
            ),
            "no creation time: never reaped"
        );
        assert!(!is_orphan(
            &instance(
                "exoscale://x",
                None,
                Some(created),
                contract::InstanceState::Terminating
            ),
            &owners,
            at(600)
        ));
        assert!(!is_orphan(
            &instance("exoscale://x", None, Some("yesterday"), running),
            &owners,
            at(600)
        ));
    }

    #[test]
    fn an_instance_not_provably_this_clusters_is_never_an_orphan() {
        let created = "2026-01-01T00:00:00Z";
        let later = parse_time(created).unwrap() + Duration::from_secs(3600);
        let owners = Owners {
            cluster: "prod".into(),
            ..Default::default()
        };
        let running = contract::InstanceState::Running;
        assert!(is_orphan(
            &instance("sim://mine", Some("gone"), Some(created), running),
            &owners,
            later
        ));
        // Another cluster's instance that a buggy or hostile plugin listed anyway.
        assert!(!is_orphan(
            &foreign(
                "sim://theirs",
                Some("gone"),
                Some(created),
                running,
                "staging"
            ),
            &owners,
            later
        ));
        // No cluster label at all: the host cannot tell, so it leaves it alone.
        let mut unlabelled = instance("sim://unknown", Some("gone"), Some(created), running);
        unlabelled.labels.clear();
        assert!(!is_orphan(&unlabelled, &owners, later));
    }
}
