//! Safe writes: what another writer adds to a list-valued field (taints, finalizers,
//! conditions) survives the host's writes, whether the host's copy is stale (guarded writes,
//! checked directly) or the other writer races the whole control loop.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use joinery_api::NodeClaim;
use joinery_controller::writes::{Part, patch_guarded};
use joinery_emulator::cloud::InstanceState;
use joinery_simulate::{Simulation, SimulationOptions};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::restart::{apply_basics, wait_pod_running};

const RACER_TAINT: &str = "racer.example.com/mark";
const RACER_FINALIZER: &str = "racer.example.com/keep";
const RACER_CONDITION: &str = "RacerSeen";

fn taint_keys(node: &Node) -> Vec<String> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .map(|t| t.key.clone())
        .collect()
}

/// A JSON-patch operation appending `value` to the list at `path` (creating the list when
/// the object has none yet).
fn append_op(path: &str, list_exists: bool, value: serde_json::Value) -> serde_json::Value {
    if list_exists {
        json!({"op": "add", "path": format!("{path}/-"), "value": value})
    } else {
        json!({"op": "add", "path": path, "value": [value]})
    }
}

/// A JSON-patch `test` that the object is still at the version read (the patch then fails,
/// and is tried again on a fresh read, instead of overwriting a newer write).
fn unchanged_since(metadata: &kube::api::ObjectMeta) -> serde_json::Value {
    json!({"op": "test", "path": "/metadata/resourceVersion", "value": metadata.resource_version.clone().unwrap_or_default()})
}

/// The racer removes its own finalizer from an object being deleted (`test` first, so it
/// never removes another entry that moved into that position).
async fn release_racer_finalizer<K>(api: &Api<K>, metadata: &kube::api::ObjectMeta)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let finalizers = metadata.finalizers.clone().unwrap_or_default();
    if let Some(at) = finalizers.iter().position(|f| f == RACER_FINALIZER) {
        let ops = json!([{"op": "test", "path": format!("/metadata/finalizers/{at}"), "value": RACER_FINALIZER},
                         {"op": "remove", "path": format!("/metadata/finalizers/{at}")}]);
        let _ = api
            .patch(
                metadata.name.as_deref().unwrap_or_default(),
                &PatchParams::default(),
                &Patch::Json::<()>(serde_json::from_value(ops).unwrap()),
            )
            .await;
    }
}

/// Another writer appends to the list (a JSON patch, as a careless client would send).
async fn append_taint(api: &Api<Node>, name: &str, key: &str) {
    let node = api.get(name).await.unwrap();
    let op = json!([append_op(
        "/spec/taints",
        !taint_keys(&node).is_empty(),
        json!({"key": key, "effect": "PreferNoSchedule"})
    )]);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Json::<()>(serde_json::from_value(op).unwrap()),
    )
    .await
    .unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_guarded_write_from_a_stale_copy_keeps_the_other_writers_entry() {
    let sim = Simulation::start(SimulationOptions {
        virtual_time: true,
        start_controller: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let nodes: Api<Node> = Api::all(sim.client.clone());
    let node: Node = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
        "spec": {"taints": [{"key": "first", "effect": "NoSchedule"}]}}),
    )
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let stale = nodes.get("n1").await.unwrap();
    append_taint(&nodes, "n1", "other-writer").await;

    // The hazard: a merge patch computed from the stale copy drops the other writer's taint.
    let mut careless = taint_keys(&stale);
    careless.push("careless".into());
    let patch = json!({"spec": {"taints": careless.iter().map(|k| json!({"key": k, "effect": "NoSchedule"})).collect::<Vec<_>>()}});
    let written = nodes
        .patch("n1", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(
        taint_keys(&written),
        ["first", "careless"],
        "without a guard the other writer's taint is lost"
    );
    append_taint(&nodes, "n1", "other-writer").await;

    // Guarded: the stale copy's write is refused, recomputed from a fresh read, and keeps it.
    let calls = AtomicUsize::new(0);
    let written = patch_guarded(&nodes, &stale, Part::Main, |current| {
        calls.fetch_add(1, Ordering::SeqCst);
        let mut taints = current
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        taints.push(k8s_openapi::api::core::v1::Taint {
            key: "guarded".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        });
        Some(json!({"spec": {"taints": taints}}))
    })
    .await
    .unwrap()
    .expect("written");
    assert_eq!(
        taint_keys(&written),
        ["first", "careless", "other-writer", "guarded"]
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        2,
        "one refused attempt from the stale copy, one from the fresh read"
    );
    // Nothing to change: nothing is written.
    let unchanged = patch_guarded(&nodes, &written, Part::Main, |_| None)
        .await
        .unwrap();
    assert!(unchanged.is_none());
    sim.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_guarded_status_write_keeps_another_owners_condition() {
    let sim = Simulation::start(SimulationOptions {
        virtual_time: true,
        start_controller: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let claims: Api<NodeClaim> = Api::all(sim.client.clone());
    let claim: NodeClaim = serde_json::from_value(json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "c1"},
        "spec": {"nodeClassRef": {"group": "sim.joinery.dev", "kind": "SimNodeClass", "name": "default"}, "requirements": []}}))
    .unwrap();
    claims.create(&PostParams::default(), &claim).await.unwrap();
    let stale = claims.get("c1").await.unwrap();
    let other = json!({"status": {"conditions": [{"type": "OtherOwner", "status": "True", "reason": "Mine", "message": "",
                                                   "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    claims
        .patch_status("c1", &PatchParams::default(), &Patch::Merge(&other))
        .await
        .unwrap();
    let written = patch_guarded(&claims, &stale, Part::Status, |current| {
        let mut conditions = current
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        let mut mine = conditions.first().cloned().unwrap_or_else(|| {
            serde_json::from_value(other["status"]["conditions"][0].clone()).unwrap()
        });
        mine.type_ = "Launched".into();
        conditions.push(mine);
        Some(json!({"status": {"conditions": conditions}}))
    })
    .await
    .unwrap()
    .expect("written");
    let types: Vec<String> = written
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| c.type_)
        .collect();
    assert_eq!(types, ["OtherOwner", "Launched"]);
    sim.shutdown().await;
}

/// Another controller marks every Node (a taint and a finalizer) and every NodeClaim (a
/// finalizer and a status condition) the moment it sees them, once each, and lets go of its
/// finalizers when they are deleted. The host scales up and down through it; every mark
/// survives, and nothing leaks.
#[tokio::test(start_paused = true)]
async fn a_racing_writer_loses_nothing_through_a_scale_up_and_down() {
    let mut sim = Simulation::start(SimulationOptions {
        virtual_time: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let marked_nodes = Arc::new(std::sync::Mutex::new(BTreeSet::<String>::new()));
    let marked_claims = Arc::new(std::sync::Mutex::new(BTreeSet::<String>::new()));
    let racer = {
        let (client, marked_nodes, marked_claims) = (
            sim.client.clone(),
            marked_nodes.clone(),
            marked_claims.clone(),
        );
        tokio::spawn(async move {
            let nodes: Api<Node> = Api::all(client.clone());
            let claims: Api<NodeClaim> = Api::all(client);
            let json_patch =
                |ops: serde_json::Value| Patch::Json::<()>(serde_json::from_value(ops).unwrap());
            loop {
                for node in nodes
                    .list(&ListParams::default())
                    .await
                    .map(|l| l.items)
                    .unwrap_or_default()
                {
                    let name = node.metadata.name.clone().unwrap();
                    let finalizers = node.metadata.finalizers.clone().unwrap_or_default();
                    if node.metadata.deletion_timestamp.is_some() {
                        release_racer_finalizer(&nodes, &node.metadata).await;
                        continue;
                    }
                    if marked_nodes.lock().unwrap().contains(&name) {
                        continue;
                    }
                    // `test` the version read first: creating a list that another writer has
                    // just created would replace its entries (the racer is careful too).
                    let ops = vec![
                        unchanged_since(&node.metadata),
                        append_op(
                            "/spec/taints",
                            !taint_keys(&node).is_empty(),
                            json!({"key": RACER_TAINT, "effect": "PreferNoSchedule"}),
                        ),
                        append_op(
                            "/metadata/finalizers",
                            !finalizers.is_empty(),
                            json!(RACER_FINALIZER),
                        ),
                    ];
                    if nodes
                        .patch(&name, &PatchParams::default(), &json_patch(json!(ops)))
                        .await
                        .is_ok()
                    {
                        marked_nodes.lock().unwrap().insert(name);
                    }
                }
                for claim in claims
                    .list(&ListParams::default())
                    .await
                    .map(|l| l.items)
                    .unwrap_or_default()
                {
                    let name = claim.metadata.name.clone().unwrap();
                    let finalizers = claim.metadata.finalizers.clone().unwrap_or_default();
                    if claim.metadata.deletion_timestamp.is_some() {
                        release_racer_finalizer(&claims, &claim.metadata).await;
                        continue;
                    }
                    if marked_claims.lock().unwrap().contains(&name) {
                        continue;
                    }
                    let finalizer = append_op(
                        "/metadata/finalizers",
                        !finalizers.is_empty(),
                        json!(RACER_FINALIZER),
                    );
                    let condition = json!({"type": RACER_CONDITION, "status": "True", "reason": "Seen", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"});
                    let has_conditions = claim
                        .status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| !c.is_empty());
                    let status_op = if claim.status.is_some() {
                        json!([append_op("/status/conditions", has_conditions, condition)])
                    } else {
                        json!([{"op": "add", "path": "/status", "value": {"conditions": [condition]}}])
                    };
                    if claims
                        .patch(
                            &name,
                            &PatchParams::default(),
                            &json_patch(json!([unchanged_since(&claim.metadata), finalizer])),
                        )
                        .await
                        .is_ok()
                        && claims
                            .patch_status(&name, &PatchParams::default(), &json_patch(status_op))
                            .await
                            .is_ok()
                    {
                        marked_claims.lock().unwrap().insert(name);
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    apply_basics(&sim).await;
    assert!(
        wait_pod_running(&sim, Duration::from_secs(600)).await,
        "the pod ends Running"
    );
    // Once registered and initialized, every Node and NodeClaim still carries both writers' marks.
    let nodes: Api<Node> = Api::all(sim.client.clone());
    let claims: Api<NodeClaim> = Api::all(sim.client.clone());
    let deadline = std::time::Instant::now() + sim.clock.to_real(Duration::from_secs(120));
    loop {
        let marked = marked_claims.lock().unwrap().len();
        let all_initialized = claims
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .all(|c| {
                c.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Initialized" && c.is_true()))
            });
        if marked >= 1 && all_initialized {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the claim was never marked and initialized"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for node in nodes.list(&ListParams::default()).await.unwrap().items {
        let keys = taint_keys(&node);
        assert!(
            keys.iter().any(|k| k == RACER_TAINT),
            "the other writer's taint was lost: {keys:?}"
        );
        assert!(
            !keys.iter().any(|k| k == "karpenter.sh/unregistered"),
            "the host's own change was made too: {keys:?}"
        );
        let finalizers = node.metadata.finalizers.clone().unwrap_or_default();
        assert!(
            finalizers.iter().any(|f| f == RACER_FINALIZER)
                && finalizers.iter().any(|f| f == "karpenter.sh/termination"),
            "{finalizers:?}"
        );
    }
    for claim in claims.list(&ListParams::default()).await.unwrap().items {
        let finalizers = claim.metadata.finalizers.clone().unwrap_or_default();
        assert!(
            finalizers.iter().any(|f| f == RACER_FINALIZER)
                && finalizers.iter().any(|f| f == "karpenter.sh/termination"),
            "{finalizers:?}"
        );
        let types: Vec<String> = claim
            .status
            .unwrap()
            .conditions
            .unwrap()
            .into_iter()
            .map(|c| c.type_)
            .collect();
        assert!(
            types.iter().any(|t| t == RACER_CONDITION),
            "the other owner's condition was lost: {types:?}"
        );
        assert!(
            types.iter().any(|t| t == "Registered") && types.iter().any(|t| t == "Ready"),
            "{types:?}"
        );
    }
    // Scale to zero: the node goes (the host drops only its own finalizers), nothing leaks.
    Api::<Pod>::namespaced(sim.client.clone(), "default")
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + sim.clock.to_real(Duration::from_secs(900));
    loop {
        let left = nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len()
            + claims
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .len();
        let live = sim
            .cloud
            .instances()
            .into_iter()
            .filter(|i| i.state != InstanceState::Terminated)
            .count();
        if left == 0 && live == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{left} nodes and claims, {live} instances left"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    racer.abort();
    sim.crash_controller();
    sim.shutdown().await;
}
