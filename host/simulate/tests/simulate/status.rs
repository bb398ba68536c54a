//! NodeClass and NodePool status written by the host, and NodeClasses that are not ready
//! blocking launches.

use std::time::{Duration, Instant};

use joinery_api::{NodeClaim, NodePool};
use joinery_simulate::{Simulation, SimulationOptions};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::json;

fn pool(class: &str) -> serde_json::Value {
    json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": class},
           "spec": {"template": {"spec": {"nodeClassRef": {"group": "sim.joinery.dev", "kind": "SimNodeClass", "name": class},
                    "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}}}})
}

fn class(name: &str, zones: &[&str]) -> serde_json::Value {
    json!({"apiVersion": "sim.joinery.dev/v1alpha1", "kind": "SimNodeClass", "metadata": {"name": name},
           "spec": {"zones": zones, "userDataRenderer": {"name": "k3s", "parameters": {"token": "t", "providerIDCommand": "cat /id"}}}})
}

fn condition(status: &serde_json::Value, type_: &str) -> Option<String> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str())
        .map(String::from)
}

async fn eventually<F, Fut>(sim: &Simulation, simulated: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + sim.clock.to_real(simulated);
    while Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(start_paused = true)]
async fn status_is_written_and_a_nodeclass_that_is_not_ready_blocks_launches() {
    let sim = Simulation::start(SimulationOptions {
        virtual_time: true,
        ..Default::default()
    })
    .await
    .unwrap();
    for m in [
        class("good", &["test-zone-a"]),
        pool("good"),
        class("bad", &["no-such-zone"]),
        pool("bad"),
    ] {
        sim.apply(&m).await.unwrap();
    }
    // A pod only the "bad" pool could take (it selects that pool).
    sim.apply(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "wants-bad", "namespace": "default"},
        "spec": {"nodeSelector": {"karpenter.sh/nodepool": "bad"},
                 "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]}}))
        .await
        .unwrap();
    let classes: Api<DynamicObject> = Api::all_with(
        sim.client.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "sim.joinery.dev",
            "v1alpha1",
            "SimNodeClass",
        )),
    );
    let pools: Api<NodePool> = Api::all(sim.client.clone());
    let resolved = eventually(&sim, Duration::from_secs(120), || async {
        let good = classes.get("good").await.unwrap();
        let bad = classes.get("bad").await.unwrap();
        condition(&good.data["status"], "Ready").as_deref() == Some("True")
            && condition(&bad.data["status"], "Ready").as_deref() == Some("False")
    })
    .await;
    assert!(resolved, "NodeClass Ready conditions: good True, bad False");
    let bad = classes.get("bad").await.unwrap();
    let text = bad.data["status"].to_string();
    assert!(
        text.contains("no-such-zone"),
        "the failing condition names the zone: {text}"
    );
    let pools_ready = eventually(&sim, Duration::from_secs(60), || async {
        let good = serde_json::to_value(pools.get("good").await.unwrap().status).unwrap();
        let bad = serde_json::to_value(pools.get("bad").await.unwrap().status).unwrap();
        condition(&good, "Ready").as_deref() == Some("True")
            && condition(&bad, "NodeClassReady").as_deref() == Some("False")
    })
    .await;
    assert!(pools_ready, "NodePool conditions follow their NodeClass");
    // Well past a batch window and a boot delay: nothing was launched for the blocked pool.
    tokio::time::sleep(sim.clock.to_real(Duration::from_secs(60))).await;
    let claims = Api::<NodeClaim>::all(sim.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert!(
        claims.is_empty(),
        "no NodeClaim for a NodePool whose NodeClass is not ready: {claims:?}"
    );
    // The good pool gets a node for a pod it can take, and its status counts it.
    sim.apply(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fine", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]}}))
        .await
        .unwrap();
    let counted = eventually(&sim, Duration::from_secs(300), || async {
        let status = pools.get("good").await.unwrap().status.unwrap_or_default();
        status.nodes == Some(1)
            && status
                .resources
                .is_some_and(|r| r.get("cpu").is_some_and(|q| q.0 != "0"))
    })
    .await;
    assert!(
        counted,
        "NodePool status counts the new node and sums its capacity"
    );
    sim.shutdown().await;
}

/// The reasons of the events about `kind` `name`.
async fn event_reasons(sim: &Simulation, kind: &str, name: &str) -> Vec<(String, String)> {
    Api::<k8s_openapi::api::core::v1::Event>::all(sim.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some(kind)
                && e.involved_object.name.as_deref() == Some(name)
        })
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_nodepool_whose_requirements_leave_no_instance_type_is_not_ready_and_says_why() {
    let (logs, _guard) = crate::logs::Logs::capture();
    let sim = Simulation::start(SimulationOptions {
        virtual_time: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut typo = pool("good");
    typo["metadata"]["name"] = json!("typo");
    typo["spec"]["template"]["spec"]["requirements"][0]["values"] = json!(["ondemand"]);
    for m in [class("good", &["test-zone-a"]), pool("good"), typo] {
        sim.apply(&m).await.unwrap();
    }
    let pools: Api<NodePool> = Api::all(sim.client.clone());
    let status_of = |name: &'static str| {
        let pools = pools.clone();
        async move { serde_json::to_value(pools.get(name).await.unwrap().status).unwrap() }
    };
    let settled = eventually(&sim, Duration::from_secs(60), || async {
        let typo = status_of("typo").await;
        condition(&status_of("good").await, "Ready").as_deref() == Some("True")
            && condition(&typo, "InstanceTypesReady").as_deref() == Some("False")
    })
    .await;
    assert!(
        settled,
        "good pool Ready, typo pool InstanceTypesReady=False"
    );
    let typo = status_of("typo").await;
    let good = status_of("good").await;
    assert_eq!(condition(&typo, "Ready").as_deref(), Some("False"));
    assert_eq!(condition(&typo, "NodeClassReady").as_deref(), Some("True"));
    assert_eq!(
        condition(&good, "InstanceTypesReady").as_deref(),
        Some("True")
    );
    let message = typo["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "InstanceTypesReady")
        .unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    for part in [
        "spec.template.spec.requirements",
        "karpenter.sh/capacity-type In [ondemand]",
        "on-demand",
        "fix the requirement's values",
    ] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
    // Ready says what holds it back.
    let ready_message = typo["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        ready_message.starts_with("InstanceTypesReady=False (NoCompatibleInstanceTypes): ")
            && ready_message.contains("karpenter.sh/capacity-type In [ondemand]"),
        "{ready_message}"
    );
    let events = event_reasons(&sim, "NodePool", "typo").await;
    assert!(
        events
            .iter()
            .any(|(reason, text)| reason == "NoCompatibleInstanceTypes" && *text == message),
        "{events:?}"
    );
    assert!(event_reasons(&sim, "NodePool", "good").await.is_empty());
    // One warning, although the status loop ran many times.
    let lines = logs.lines_with(&["WARN", "typo", "karpenter.sh/capacity-type In [ondemand]"]);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    sim.shutdown().await;
}
