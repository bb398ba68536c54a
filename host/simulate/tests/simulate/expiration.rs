//! Expiration, upstream's forceful disruption: a NodeClaim older than its NodePool's
//! `expireAfter` is deleted (no budgets, no replacement first); its pods are provisioned again
//! on a new node and nothing leaks.

use std::time::Duration;

use joinery_api::NodeClaim;
use joinery_emulator::cloud::InstanceState;
use joinery_simulate::{Simulation, SimulationOptions};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::json;

#[tokio::test(start_paused = true)]
async fn an_expired_node_is_replaced_and_its_pods_run_again() {
    let sim = Simulation::start(SimulationOptions {
        virtual_time: true,
        ..Default::default()
    })
    .await
    .unwrap();
    for manifest in [
        json!({"apiVersion": "sim.joinery.dev/v1alpha1", "kind": "SimNodeClass", "metadata": {"name": "default"},
               "spec": {"userDataRenderer": {"name": "k3s", "parameters": {"token": "t", "providerIDCommand": "cat /id"}}}}),
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
               "spec": {"template": {"spec": {"nodeClassRef": {"group": "sim.joinery.dev", "kind": "SimNodeClass", "name": "default"},
                                               "expireAfter": "3m",
                                               "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}},
                        "disruption": {"consolidateAfter": "Never"}}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
               "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                                     "spec": {"terminationGracePeriodSeconds": 5,
                                              "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]}}}}),
    ] {
        sim.apply(&manifest).await.unwrap();
    }
    let claims = Api::<NodeClaim>::all(sim.client.clone());
    let pods: Api<Pod> = Api::namespaced(sim.client.clone(), "default");
    let running_on = |pods: Vec<Pod>| -> Option<String> {
        pods.into_iter()
            .find(|p| {
                p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    && p.metadata.deletion_timestamp.is_none()
            })
            .and_then(|p| p.spec.and_then(|s| s.node_name))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let first_node = loop {
        if let Some(node) = running_on(pods.list(&ListParams::default()).await.unwrap().items) {
            break node;
        }
        assert!(std::time::Instant::now() < deadline, "the pod never ran");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let first_claim = claims
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .remove(0);
    assert_eq!(
        first_claim
            .spec
            .expire_after
            .as_ref()
            .map(|e| e.as_str().to_string())
            .as_deref(),
        Some("3m")
    );
    // 3 simulated minutes are 9 s real at 20x; the replacement then boots in 30 s simulated.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let items = claims.list(&ListParams::default()).await.unwrap().items;
        let old_gone = !items
            .iter()
            .any(|c| c.metadata.uid == first_claim.metadata.uid);
        let moved = running_on(pods.list(&ListParams::default()).await.unwrap().items)
            .is_some_and(|n| n != first_node);
        if old_gone && moved && items.len() == 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the expired claim was not replaced: {} claims",
            items.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let live = sim
        .cloud
        .instances()
        .into_iter()
        .filter(|i| i.state != InstanceState::Terminated)
        .count();
    assert_eq!(live, 1, "the expired claim's instance is gone");
    sim.shutdown().await;
}
