//! The host against the fake Exoscale API: an ExoscaleNodeClass whose `labels` change gets
//! them onto its running instance in place (the host calls `reconcile-instance` when the
//! class's generation changes), with no replacement.

use std::time::{Duration, Instant};

use joinery_simulate::{ExoscaleSpec, Simulation, SimulationOptions};
use serde_json::json;

fn class(labels: serde_json::Value) -> serde_json::Value {
    json!({"apiVersion": "karpenter.k8s.exoscale/v1alpha1", "kind": "ExoscaleNodeClass", "metadata": {"name": "default"},
           "spec": {"templateSelectorTerms": [{"name": "Linux Ubuntu 24.04 LTS 64-bit"}], "diskSize": 20, "labels": labels,
                    "userDataRenderer": {"name": "k3s", "parameters": {"token": "t",
                        "providerIDCommand": "curl -s http://169.254.169.254/latest/meta-data/instance-id"}}}})
}

/// Waits (in simulated time) until `check` holds.
async fn eventually(
    sim: &Simulation,
    simulated: Duration,
    mut check: impl FnMut() -> bool,
) -> bool {
    let deadline = Instant::now() + sim.clock.to_real(simulated);
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[tokio::test(start_paused = true)]
async fn changed_nodeclass_labels_reach_the_running_instance_in_place() {
    let exoscale = ExoscaleSpec {
        zones: Some(vec!["ch-gva-2".into()]),
        ..ExoscaleSpec::default()
    };
    let sim = Simulation::start(SimulationOptions {
        virtual_time: true,
        exoscale: Some(exoscale),
        ..Default::default()
    })
    .await
    .unwrap();
    let fake = sim.exoscale.as_ref().expect("the fake Exoscale API runs");
    sim.apply(&class(json!({"team": "platform"})))
        .await
        .unwrap();
    sim.apply(&json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.exoscale", "kind": "ExoscaleNodeClass", "name": "default"},
                 "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}}}}))
        .await
        .unwrap();
    sim.apply(&json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]}}))
        .await
        .unwrap();
    let launched = eventually(&sim, Duration::from_secs(300), || {
        fake.instances()
            .iter()
            .any(|i| i.labels.get("team").map(String::as_str) == Some("platform"))
    })
    .await;
    assert!(
        launched,
        "an instance with the class's labels: {:?}",
        fake.instances()
    );
    let before = fake.instances();
    assert_eq!(before.len(), 1);

    sim.apply(&class(json!({"team": "data", "cost.center/id": "c42"})))
        .await
        .unwrap();
    let relabelled = eventually(&sim, Duration::from_secs(120), || {
        fake.instance(&before[0].id)
            .is_some_and(|i| i.labels.get("team").map(String::as_str) == Some("data"))
    })
    .await;
    let after = fake.instance(&before[0].id).expect("the same instance");
    assert!(relabelled, "labels updated in place: {:?}", after.labels);
    assert_eq!(after.labels["cost-center_id"], "c42");
    assert_eq!(
        after.labels["karpenter-sh_nodeclaim"], before[0].labels["karpenter-sh_nodeclaim"],
        "managed labels stay"
    );
    assert_eq!(fake.instances().len(), 1, "no replacement");
    assert_eq!(fake.created_count(), 1);
    sim.shutdown().await;
}
