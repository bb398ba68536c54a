//! NodePool status: resources (summed capacity of the pool's NodeClaims, plus `nodes`), the
//! node count, and the `NodeClassReady`, `ValidationSucceeded` and `Ready` conditions.
//! Refreshed every 5 seconds like upstream's counter controller.

use crate::state::Ordered;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use joinery_api::{ConditionStatus, NodePool};
use joinery_core::labels;
use joinery_core::resources::Resources;
use kube::api::Api;
use serde_json::json;
use tokio::sync::watch;

use crate::state::NodeClassKey;
use crate::util::{self, condition};
use crate::writes;
use joinery_kube::convert;

use crate::{Context, ControllerError, nodeclass};

/// Runs the NodePool status loop.
pub async fn run(ctx: Arc<Context>, stopped: watch::Receiver<bool>) {
    util::run_loop(
        ctx,
        stopped,
        "nodepool.status",
        Duration::from_secs(5),
        step,
    )
    .await;
}

async fn step(ctx: Arc<Context>) -> Result<(), ControllerError> {
    let mut usage: BTreeMap<String, (Resources, u64)> = BTreeMap::new();
    for claim in ctx.state.node_claims.ordered() {
        if claim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let Some(pool) = claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::NODEPOOL_LABEL))
            .cloned()
        else {
            continue;
        };
        let entry = usage.entry(pool).or_default();
        entry.1 += 1;
        if let Ok(capacity) = convert::resource_list(
            "status.capacity",
            claim.status.as_ref().and_then(|s| s.capacity.as_ref()),
        ) {
            entry.0 += &capacity;
        }
    }
    for pool in ctx.state.node_pools.ordered() {
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
        let validation = match joinery_kube::template::node_claim_template(&pool) {
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
        let ready = if class_ready.is_true() && validation.is_true() {
            condition(&ctx, "Ready", ConditionStatus::True, "Ready", "")
        } else {
            condition(
                &ctx,
                "Ready",
                ConditionStatus::False,
                "NotReady",
                "NodeClassReady and ValidationSucceeded must be True",
            )
        };
        let resource_list = convert::to_resource_list(&resources);
        let api: Api<NodePool> = Api::all(ctx.client.clone());
        // Guarded: the conditions are merged into the pool's latest ones (another controller
        // may own other condition types).
        let written = writes::patch_guarded(&api, pool.as_ref(), writes::Part::Status, |current| {
            let mut conds = current.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
            let mut changed = false;
            for c in [&class_ready, &validation, &ready] {
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
    Ok(())
}
