//! A preloaded static cluster (`joinery sim serve --preload-nodes/--preload-pods`, what
//! `joinery bench controller` measures against) stays as written: its ReplicaSets already have
//! their pods when the workload controllers start, so none is added or deleted.

use std::time::Duration;

use joinery_emulator::preload::Preload;
use joinery_simulate::{Simulation, SimulationOptions};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

#[tokio::test(start_paused = true)]
async fn a_preloaded_cluster_keeps_exactly_its_pods() {
    let preload = Preload::new(10, 100);
    let sim = Simulation::start(SimulationOptions {
        virtual_time: true,
        start_controller: false,
        preload: Some(preload),
        ..Default::default()
    })
    .await
    .unwrap();
    let pods: Api<Pod> = Api::all(sim.api.client().unwrap());
    // Several passes of the workload controllers and of the scheduler (simulated time).
    tokio::time::sleep(sim.clock.to_real(Duration::from_secs(80))).await;
    let listed = pods.list(&ListParams::default()).await.unwrap().items;
    let deleting = listed
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .count();
    let running = listed
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .count();
    assert_eq!(
        (listed.len(), running, deleting),
        (100, 100, 0),
        "pods listed, running, being deleted"
    );
}
