//! Static NodePools (`spec.replicas`, gate `StaticCapacity`): each is kept at its count of
//! NodeClaims, whatever the pods, as the core's [`static_action`] decides. While a disruption
//! command holds one of a pool's claims, the pool is left alone until the command has finished
//! or rolled back (the candidate is marked before its replacement is created, so counting in
//! between would launch one too many).

use crate::state::Ordered;
use std::sync::Arc;
use std::time::Duration;

use joinery_adapter::convert;
use joinery_adapter::drain::reschedulable_pods;
use joinery_adapter::template::node_claim_template;
use joinery_api::{HasConditions, NodeClaim, NodePool};
use joinery_core::disruption::{
    StaticAction, StaticClaim, reschedule_cost, static_action, static_claim,
};
use joinery_core::labels;
use kube::api::{Api, DeleteParams};
use tokio::sync::watch;

use crate::lifecycle::conditions::{DISRUPTION_REASON, LAUNCHED};
use crate::{Context, ControllerError, provisioner, util};

/// Runs the static-pool loop (only with the `StaticCapacity` gate on).
pub async fn run(ctx: Arc<Context>, stopped: watch::Receiver<bool>) {
    if !ctx.settings.feature_gates.static_capacity {
        return;
    }
    util::run_loop(
        ctx,
        stopped,
        "static-pools",
        Duration::from_secs(2),
        |ctx| async move { step(&ctx).await },
    )
    .await;
}

async fn step(ctx: &Context) -> Result<(), ControllerError> {
    if !provisioner::synced(ctx) {
        return Ok(());
    }
    let claims = ctx.state.node_claims.ordered();
    for pool in ctx.state.node_pools.ordered() {
        let Some(replicas) = pool.spec.replicas else {
            continue;
        };
        if pool.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let name = pool.metadata.name.clone().unwrap_or_default();
        let mine: Vec<&Arc<NodeClaim>> = claims
            .iter()
            .filter(|c| convert::label(&c.metadata, labels::NODEPOOL_LABEL) == Some(name.as_str()))
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .collect();
        if mine
            .iter()
            .any(|c| c.condition(DISRUPTION_REASON).is_some())
        {
            // A disruption command replaces one of its claims (marked first, replacement
            // created next): count again once it has finished or rolled back.
            continue;
        }
        let views: Vec<StaticClaim> = mine.iter().map(|c| view(ctx, c)).collect();
        match static_action(replicas.max(0) as u64, node_limit(&pool), &views) {
            StaticAction::Keep => {}
            StaticAction::Create(n) => create(ctx, &pool, n).await?,
            StaticAction::Delete(names) => {
                let api = Api::<NodeClaim>::all(ctx.client.clone());
                for claim in names {
                    tracing::info!(nodepool = %name, nodeclaim = %claim, replicas, "static nodepool above its replicas; deleting nodeclaim");
                    match api.delete(&claim, &DeleteParams::background()).await {
                        Ok(_) => {}
                        Err(e) if util::is_not_found(&e) => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        }
    }
    Ok(())
}

fn view(ctx: &Context, claim: &NodeClaim) -> StaticClaim {
    let node = claim.status.as_ref().and_then(|s| s.node_name.clone());
    let pods = node
        .map(|n| reschedulable_pods(&ctx.state.pods_on_node(&n)))
        .unwrap_or_default();
    StaticClaim {
        name: claim.metadata.name.clone().unwrap_or_default(),
        launched: claim.is_condition_true(LAUNCHED),
        empty: pods.is_empty(),
        disruption_cost: reschedule_cost(pods.iter().map(|_| 1.0)),
    }
}

/// The pool's `limits.nodes`, if set and a count.
fn node_limit(pool: &NodePool) -> Option<u64> {
    let quantity = pool.spec.limits.as_ref()?.get("nodes")?;
    quantity.0.parse().ok()
}

async fn create(ctx: &Context, pool: &NodePool, count: u64) -> Result<(), ControllerError> {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let template = node_claim_template(pool).map_err(ControllerError::Invalid)?;
    for _ in 0..count {
        let created = provisioner::create_node_claim(ctx, pool, &static_claim(&template)).await?;
        let created_name = created.metadata.name.clone().unwrap_or_default();
        tracing::info!(nodepool = %name, nodeclaim = %created_name, "static nodepool below its replicas; created nodeclaim");
        ctx.metrics
            .nodeclaims_created
            .inc(&crate::metrics::series::ReasonNodePool {
                reason: "static".into(),
                nodepool: name.clone(),
            });
        ctx.inflight.record_created(created);
    }
    Ok(())
}
