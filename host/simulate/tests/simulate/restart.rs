//! Crash safety of the launch path: whatever happens between the cloud's create and the
//! NodeClaim status write, the pod ends Running on exactly one instance and nothing leaks.

use std::time::Duration;

use joinery_api::NodeClaim;
use joinery_emulator::cloud::{CloudEvent, InstanceState};
use joinery_simulate::{Simulation, SimulationOptions};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use serde_json::json;

pub(crate) async fn apply_basics(sim: &Simulation) {
    let manifests = [
        json!({"apiVersion": "sim.joinery.dev/v1alpha1", "kind": "SimNodeClass", "metadata": {"name": "default"},
               "spec": {"userDataRenderer": {"name": "k3s", "parameters": {"token": "t", "providerIDCommand": "cat /id"}}}}),
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
               "spec": {"template": {"spec": {"nodeClassRef": {"group": "sim.joinery.dev", "kind": "SimNodeClass", "name": "default"},
                        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}}}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
               "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]}}),
    ];
    for m in &manifests {
        sim.apply(m).await.expect("apply");
    }
}

pub(crate) async fn wait_pod_running(sim: &Simulation, limit: Duration) -> bool {
    let pods: Api<Pod> = Api::namespaced(sim.client.clone(), "default");
    let deadline = std::time::Instant::now() + sim.clock.to_real(limit);
    while std::time::Instant::now() < deadline {
        if let Ok(p) = pods.get("web").await
            && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

pub(crate) async fn assert_one_instance_one_claim(sim: &Simulation) {
    let live: Vec<_> = sim
        .cloud
        .instances()
        .into_iter()
        .filter(|i| i.state != InstanceState::Terminated)
        .collect();
    assert_eq!(live.len(), 1, "exactly one live instance, got {live:?}");
    let claims = Api::<NodeClaim>::all(sim.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(claims.len(), 1, "exactly one NodeClaim");
    let pid = claims[0]
        .status
        .as_ref()
        .and_then(|s| s.provider_id.clone());
    assert_eq!(
        pid.as_deref(),
        Some(live[0].provider_id.as_str()),
        "the claim owns the instance"
    );
}

#[tokio::test(start_paused = true)]
async fn host_killed_mid_launch_adopts_the_instance_on_restart() {
    let mut sim = Simulation::start(SimulationOptions {
        virtual_time: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut events = sim.cloud.subscribe();
    // The cloud creates the instance but holds its answer back, so the host is killed
    // between the create and the NodeClaim status write, however loaded the machine is.
    sim.cloud.faults().hold_create_answers();
    apply_basics(&sim).await;
    let launched = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if let Ok(CloudEvent::Launched(i)) = events.recv().await {
                return i;
            }
        }
    })
    .await
    .expect("an instance is launched");
    sim.crash_controller();
    let claims = Api::<NodeClaim>::all(sim.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    assert_eq!(claims.len(), 1);
    assert!(
        claims[0]
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_ref())
            .is_none(),
        "the crash came before the status write (otherwise this test proves nothing)"
    );
    sim.cloud.faults().release_create_answers();
    sim.start_controller().await.unwrap();
    assert!(
        wait_pod_running(&sim, Duration::from_secs(600)).await,
        "the pod ends Running"
    );
    assert_one_instance_one_claim(&sim).await;
    assert_eq!(
        sim.cloud
            .instances()
            .iter()
            .find(|i| i.state != InstanceState::Terminated)
            .unwrap()
            .id,
        launched.id
    );
    sim.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_create_that_fails_after_the_instance_exists_leaks_nothing() {
    let sim = Simulation::start(SimulationOptions {
        virtual_time: true,
        ..Default::default()
    })
    .await
    .unwrap();
    sim.cloud.faults().fail_after_create(1);
    apply_basics(&sim).await;
    assert!(
        wait_pod_running(&sim, Duration::from_secs(600)).await,
        "the pod ends Running"
    );
    assert_one_instance_one_claim(&sim).await;
    sim.shutdown().await;
}

/// A host killed in the middle of a replace command — candidate tainted, replacement created,
/// not yet initialized — loses nothing: the next host untaints the candidate (it is not in its
/// queue), the candidate is never deleted before a replacement is up, and the cluster settles
/// on one cheaper node with no instance leaked.
#[tokio::test(start_paused = true)]
async fn host_killed_mid_replace_strands_no_taint_and_leaks_nothing() {
    use joinery_simulate::scenario::Scale;
    use k8s_openapi::api::core::v1::Node;

    let catalog: joinery_emulator::cloud::Catalog = serde_json::from_value(json!({
        "zones": ["nova"],
        "instanceTypes": [
            {"name": "c3-4", "cpu": 2, "memory": "4Gi", "offerings": [{"zone": "nova", "capacityType": "on-demand", "price": 0.06}]},
            {"name": "c3-16", "cpu": 8, "memory": "16Gi", "offerings": [{"zone": "nova", "capacityType": "on-demand", "price": 0.2}]}
        ]
    }))
    .unwrap();
    let mut sim = Simulation::start(SimulationOptions {
        virtual_time: true,
        catalog,
        ..Default::default()
    })
    .await
    .unwrap();
    let manifests = [
        json!({"apiVersion": "sim.joinery.dev/v1alpha1", "kind": "SimNodeClass", "metadata": {"name": "default"},
               "spec": {"userDataRenderer": {"name": "k3s", "parameters": {"token": "t", "providerIDCommand": "cat /id"}}}}),
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
               "spec": {"template": {"spec": {"nodeClassRef": {"group": "sim.joinery.dev", "kind": "SimNodeClass", "name": "default"},
                        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}},
                        "disruption": {"consolidateAfter": "10s"}}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
               "spec": {"replicas": 6, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                                     "spec": {"terminationGracePeriodSeconds": 5,
                                              "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]}}}}),
    ];
    for m in &manifests {
        sim.apply(m).await.expect("apply");
    }
    let claims: Api<NodeClaim> = Api::all(sim.client.clone());
    let nodes: Api<Node> = Api::all(sim.client.clone());
    let tainted = |n: &Node| {
        n.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == "karpenter.sh/disrupted"))
    };
    let clock = sim.clock.clone();
    let wait = |what: &'static str, limit: Duration| {
        let deadline = std::time::Instant::now() + clock.to_real(limit);
        move || {
            assert!(
                std::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            )
        }
    };
    let check = wait("six pods on one node", Duration::from_secs(600));
    loop {
        let running = Api::<Pod>::namespaced(sim.client.clone(), "default")
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        if running == 6
            && nodes
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .len()
                == 1
        {
            break;
        }
        check();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sim.scale(&Scale {
        namespace: None,
        name: "web".into(),
        replicas: 1,
    })
    .await
    .unwrap();
    // Wait for the command to start: the c3-16 tainted and a replacement claim created.
    let check = wait("the replace command to start", Duration::from_secs(600));
    loop {
        let tainted_nodes = nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|n| tainted(n))
            .count();
        if tainted_nodes == 1
            && claims
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .len()
                == 2
        {
            break;
        }
        check();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sim.crash_controller();
    let replacement_initialized = claims
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|c| {
            c.status.as_ref().is_some_and(|s| {
                s.conditions.iter().flatten().any(|c| {
                    c.type_ == "Initialized" && c.status == joinery_api::ConditionStatus::True
                })
            })
        })
        .count();
    assert_eq!(
        replacement_initialized, 1,
        "the crash came before the replacement initialized (otherwise this test proves nothing)"
    );
    sim.start_controller().await.unwrap();
    // The cluster settles on one c3-4 with the pod running, nothing tainted, nothing leaked.
    let check = wait("one c3-4 running the pod", Duration::from_secs(1200));
    loop {
        let live: Vec<_> = sim
            .cloud
            .instances()
            .into_iter()
            .filter(|i| i.state != InstanceState::Terminated)
            .collect();
        let node_list = nodes.list(&ListParams::default()).await.unwrap().items;
        let running = Api::<Pod>::namespaced(sim.client.clone(), "default")
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        // The candidate's NodeClaim goes last (its finalizer waits for the instance to be gone).
        let claim_count = claims
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len();
        if live.len() == 1
            && live[0].instance_type == "c3-4"
            && node_list.len() == 1
            && !tainted(&node_list[0])
            && running == 1
            && claim_count == 1
        {
            break;
        }
        check();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_one_instance_one_claim(&sim).await;
    sim.shutdown().await;
}
