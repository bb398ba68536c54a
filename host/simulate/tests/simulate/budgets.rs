//! Disruption budgets with a `schedule` constrain disruption only while active: the schedule
//! (UTC cron) fired within the last `duration`. An active `nodes: "0"` budget keeps an empty
//! node; the same budget on a schedule that is not active now does not.

use std::time::Duration;

use joinery_simulate::{Simulation, SimulationOptions};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

async fn nodes(sim: &Simulation) -> usize {
    Api::<Node>::all(sim.client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items.len())
        .unwrap_or(usize::MAX)
}

fn pool(budgets: Value) -> Value {
    json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
           "spec": {"template": {"spec": {"nodeClassRef": {"group": "sim.joinery.dev", "kind": "SimNodeClass", "name": "default"},
                                           "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}},
                    "disruption": {"consolidateAfter": "10s", "budgets": budgets}}})
}

#[tokio::test(start_paused = true)]
async fn a_scheduled_budget_blocks_only_while_its_window_is_open() {
    let sim = Simulation::start(SimulationOptions {
        virtual_time: true,
        ..Default::default()
    })
    .await
    .unwrap();
    sim.apply(&json!({"apiVersion": "sim.joinery.dev/v1alpha1", "kind": "SimNodeClass", "metadata": {"name": "default"},
                      "spec": {"userDataRenderer": {"name": "k3s", "parameters": {"token": "t", "providerIDCommand": "cat /id"}}}}))
        .await
        .unwrap();
    // Fires every minute, open for an hour: always active.
    sim.apply(&pool(
        json!([{"nodes": "0", "schedule": "* * * * *", "duration": "1h"}]),
    ))
    .await
    .unwrap();
    sim.apply(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
                      "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]}}))
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(sim.client.clone(), "default");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while pods
        .get("web")
        .await
        .ok()
        .and_then(|p| p.status)
        .and_then(|s| s.phase)
        .as_deref()
        != Some("Running")
    {
        assert!(std::time::Instant::now() < deadline, "the pod never ran");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    pods.delete("web", &DeleteParams::default()).await.unwrap();
    // Empty for two simulated minutes (consolidateAfter is 10 s): the open window holds it.
    tokio::time::sleep(sim.clock.to_real(Duration::from_secs(120))).await;
    assert_eq!(
        nodes(&sim).await,
        1,
        "an active nodes: 0 budget blocks emptiness"
    );
    // The same budget on a schedule that is not open now (29 February, for a minute).
    let inactive = json!({"spec": {"disruption": {"budgets": [{"nodes": "0", "schedule": "0 0 29 2 *", "duration": "1m"}]}}});
    Api::<joinery_api::NodePool>::all(sim.client.clone())
        .patch("default", &PatchParams::default(), &Patch::Merge(&inactive))
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while nodes(&sim).await != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "an inactive budget must not block the empty node's removal"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sim.shutdown().await;
}
