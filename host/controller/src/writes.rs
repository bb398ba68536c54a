//! Guarded writes: every list-valued field the host writes (finalizers, taints, owner
//! references, conditions) is computed from the object's state *and* sent with that state's
//! resourceVersion, so that a write computed from a stale copy is refused (409) instead of
//! silently dropping what another writer added; the change is then recomputed from a fresh
//! read. A JSON merge patch replaces a list whole, which is why this matters: without the
//! precondition, a cache a moment behind would undo another controller's finalizer, the
//! kubelet's taint or another condition owner's condition.

use joinery_adapter::lean::{LeanNode, WatchedNode};
use joinery_api::Condition;
use kube::api::{Api, Patch, PatchParams};

use crate::Context;

/// Which part of an object a guarded patch writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The object itself (metadata and spec).
    Main,
    /// The status subresource.
    Status,
}

/// How many times a guarded write is tried before its conflict is returned.
const GUARDED_ATTEMPTS: usize = 5;

/// Writes a change computed from the object's state, without losing what another writer did
/// meanwhile.
///
/// `change` receives the object (first `cached`, after a conflict a fresh read) and returns
/// the merge patch to send, or `None` when there is nothing to write. The patch carries the
/// resourceVersion of the object it was computed from, so the API server refuses it with 409
/// if the object changed since; the object is then read again and the change recomputed.
/// This is how every list-valued field (finalizers, taints, owner references, conditions) is
/// written: a merge patch replaces such a list whole, and a list computed from a stale copy
/// would drop another writer's entry. Returns the written object, or `None` if nothing was
/// written.
pub async fn patch_guarded<K>(
    api: &Api<K>,
    cached: &K,
    part: Part,
    mut change: impl FnMut(&K) -> Option<serde_json::Value>,
) -> Result<Option<K>, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = cached.meta().name.clone().unwrap_or_default();
    let mut fresh: Option<K> = None;
    for attempt in 1..=GUARDED_ATTEMPTS {
        let current = fresh.as_ref().unwrap_or(cached);
        let Some(mut patch) = change(current) else {
            return Ok(None);
        };
        if let Some(version) = current.meta().resource_version.as_ref()
            && patch.is_object()
        {
            patch["metadata"]["resourceVersion"] = serde_json::json!(version);
        }
        let written = match part {
            Part::Main => {
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
            }
            Part::Status => {
                api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
            }
        };
        match written {
            Ok(object) => return Ok(Some(object)),
            Err(kube::Error::Api(status)) if status.code == 409 && attempt < GUARDED_ATTEMPTS => {
                tracing::debug!(object = %name, attempt, "conflicting write; retrying from a fresh read");
                fresh = Some(api.get(&name).await?);
            }
            Err(error) => return Err(error),
        }
    }
    unreachable!("the last attempt returns")
}

/// Edits a NodeClaim's status conditions from its latest state (see [`patch_guarded`]);
/// `edit` returns whether it changed anything.
pub async fn edit_claim_conditions(
    ctx: &Context,
    claim: &joinery_api::NodeClaim,
    edit: impl Fn(&mut Vec<Condition>) -> bool,
) -> Result<(), kube::Error> {
    use joinery_api::condition::HasConditions;
    let api: Api<joinery_api::NodeClaim> = Api::all(ctx.client.clone());
    patch_guarded(&api, claim, Part::Status, |current| {
        let mut conditions = current.conditions().to_vec();
        edit(&mut conditions).then(|| serde_json::json!({"status": {"conditions": conditions}}))
    })
    .await?;
    Ok(())
}

/// Edits a Node's taints from its latest state (see [`patch_guarded`]); `edit` returns
/// whether it changed anything.
pub async fn edit_node_taints(
    ctx: &Context,
    node: &LeanNode,
    edit: impl Fn(&mut Vec<k8s_openapi::api::core::v1::Taint>) -> bool,
) -> Result<(), kube::Error> {
    patch_guarded(
        &node_api(ctx),
        &WatchedNode::from(node.clone()),
        Part::Main,
        |current| {
            let mut taints = current.taints().to_vec();
            edit(&mut taints).then(|| serde_json::json!({"spec": {"taints": taints}}))
        },
    )
    .await?;
    Ok(())
}

/// The Nodes' API for writes: they read and return [`WatchedNode`]s (a cached [`LeanNode`]
/// becomes one with `WatchedNode::from`), which carry the version and finalizers that
/// [`patch_guarded`] and [`edit_finalizers`] read.
pub fn node_api(ctx: &Context) -> Api<WatchedNode> {
    Api::all(ctx.client.clone())
}

/// Edits an object's finalizers from its latest state (see [`patch_guarded`]); `edit`
/// returns whether it changed anything.
pub async fn edit_finalizers<K>(
    api: &Api<K>,
    object: &K,
    edit: impl Fn(&mut Vec<String>) -> bool,
) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    patch_guarded(api, object, Part::Main, |current| {
        let mut finalizers = current.meta().finalizers.clone().unwrap_or_default();
        edit(&mut finalizers).then(|| serde_json::json!({"metadata": {"finalizers": finalizers}}))
    })
    .await?;
    Ok(())
}
