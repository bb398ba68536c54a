//! Capacity learned from real nodes: the simulated kubelets keep more than the cloud
//! advertises (`kubeletOverhead`), so a node joins with less allocatable CPU than its instance
//! type promised. Once one has joined, the controller keeps what it saw in its ConfigMap and the
//! next decision uses it: a pod that the estimate says fits the small type, but a real node of
//! that type cannot hold, gets the bigger type.

use std::time::{Duration, Instant};

use joinery_api::{HasConditions, NodeClaim};
use joinery_emulator::cloud::Catalog;
use joinery_simulate::{Simulation, SimulationOptions};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

fn pod(name: &str, cpu: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
           "spec": {"containers": [{"name": "main", "image": "pause", "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}}}]}})
}

/// Polls `check` every 100 ms for at most `simulated` time.
async fn wait_for<T>(
    sim: &Simulation,
    simulated: Duration,
    what: &str,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + sim.clock.to_real(simulated);
    loop {
        if let Some(found) = check().await {
            return found;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn instance_types(claim: &NodeClaim) -> Vec<String> {
    claim
        .spec
        .requirements
        .iter()
        .filter(|r| r.key == "node.kubernetes.io/instance-type")
        .flat_map(|r| r.values.clone().unwrap_or_default())
        .collect()
}

/// The cloud advertises 100m of CPU overhead; its kubelets keep 1100m: an m-4 node offers
/// 2.9 CPU, not 3.9.
fn catalog() -> Catalog {
    serde_norway::from_str(
        "zones: [nova]\ninstanceTypes:\n  - {name: m-4, cpu: 4, memory: 8Gi}\n  - {name: m-8, cpu: 8, memory: 16Gi}\nkubeletOverhead:\n  kubeReserved: {cpu: 1100m, memory: 10Mi}\n",
    )
    .unwrap()
}

/// The NodeClass and the NodePool.
fn pool() -> [Value; 2] {
    [
        json!({"apiVersion": "sim.joinery.dev/v1alpha1", "kind": "SimNodeClass", "metadata": {"name": "default"},
               "spec": {"userDataRenderer": {"name": "k3s", "parameters": {"token": "t", "providerIDCommand": "cat /id"}}}}),
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
               "spec": {"template": {"spec": {"nodeClassRef": {"group": "sim.joinery.dev", "kind": "SimNodeClass", "name": "default"},
                        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}}}}),
    ]
}

#[tokio::test(start_paused = true)]
async fn a_type_whose_nodes_hold_less_than_estimated_is_learned_and_the_next_launch_uses_it() {
    let sim = Simulation::start(SimulationOptions {
        virtual_time: true,
        catalog: catalog(),
        ..Default::default()
    })
    .await
    .unwrap();
    for m in pool().into_iter().chain([pod("first", "2")]) {
        sim.apply(&m).await.unwrap();
    }
    let claims: Api<NodeClaim> = Api::all(sim.client.clone());
    let first = wait_for(
        &sim,
        Duration::from_secs(300),
        "the first node to initialize",
        async || {
            claims
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .find(|c| c.is_condition_true("Initialized"))
        },
    )
    .await;
    assert_eq!(
        instance_types(&first)[0],
        "m-4",
        "the estimate's cheapest fit"
    );

    // What the node showed is kept in the controller's ConfigMap.
    let config_maps: Api<ConfigMap> = Api::namespaced(sim.client.clone(), "joinery");
    let learned = wait_for(
        &sim,
        Duration::from_secs(120),
        "the learned-capacity ConfigMap",
        async || {
            let cm = config_maps
                .get_opt("joinery-learned-capacity")
                .await
                .unwrap()?;
            let json: Value = serde_json::from_str(cm.data?.get("learned.json")?).unwrap();
            Some(json)
        },
    )
    .await;
    let m4 = &learned["sim.joinery.dev/SimNodeClass/default"]["m-4"];
    assert_eq!(m4["allocatable"]["cpu"], "2900m", "{learned:#}");
    assert_eq!(m4["capacity"]["cpu"], "4", "{learned:#}");

    // 3.5 CPU: the estimate (3.9) says m-4; a real m-4 holds 2.9. The next claim is m-8 only.
    sim.apply(&pod("second", "3500m")).await.unwrap();
    let second = wait_for(
        &sim,
        Duration::from_secs(120),
        "a second NodeClaim",
        async || {
            claims
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .find(|c| c.metadata.name != first.metadata.name)
        },
    )
    .await;
    assert_eq!(
        instance_types(&second),
        ["m-8"],
        "the learned allocatable rules m-4 out"
    );
    sim.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn what_was_learned_before_a_restart_is_used_with_no_node_left() {
    let sim = Simulation::start(SimulationOptions {
        virtual_time: true,
        catalog: catalog(),
        start_controller: false,
        ..Default::default()
    })
    .await
    .unwrap();
    // What an earlier leader learned; no m-4 node exists now.
    let learned = json!({"sim.joinery.dev/SimNodeClass/default": {"m-4": {
        "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}, "allocatable": {"cpu": "2900m", "memory": "8182Mi", "pods": "110"}, "nodes": 1}}});
    sim.apply(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "joinery-learned-capacity", "namespace": "joinery"},
                      "data": {"learned.json": learned.to_string()}}))
        .await
        .unwrap();
    let mut sim = sim;
    sim.start_controller().await.unwrap();
    for m in pool().into_iter().chain([pod("big", "3500m")]) {
        sim.apply(&m).await.unwrap();
    }
    let claims: Api<NodeClaim> = Api::all(sim.client.clone());
    let claim = wait_for(&sim, Duration::from_secs(120), "a NodeClaim", async || {
        claims
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .next()
    })
    .await;
    assert_eq!(
        instance_types(&claim),
        ["m-8"],
        "the restored allocatable rules m-4 out"
    );
    sim.shutdown().await;
}
