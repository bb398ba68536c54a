//! Two replicas of the host on one Lease: only the leader acts; when it dies mid-launch the
//! follower takes over within the lease timings and finishes the job, with no duplicate
//! NodeClaim and no leaked instance.

use std::time::Duration;

use joinery_controller::Controller;
use joinery_controller::leader::{Elector, LeaderElectionConfig};
use joinery_core::lease::LeaseTimings;
use joinery_sim::cloud::CloudEvent;
use joinery_simulate::{Simulation, SimulationOptions};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

use super::restart::{apply_basics, assert_one_instance_one_claim, wait_pod_running};

/// Slower than the other simulator tests: at 20× a lease of 15 simulated seconds lasts 0.75 s
/// of real time, and a loaded machine could starve the leader's renewals that long.
const SPEED: f64 = 5.0;

fn replica(sim: &Simulation, identity: &str) -> Elector {
    let config = LeaderElectionConfig {
        namespace: "default".into(),
        name: "joinery-leader-election".into(),
        identity: identity.into(),
        timings: LeaseTimings::default(),
    };
    Elector::new(sim.client.clone(), sim.clock.clone(), config)
}

async fn holder(sim: &Simulation) -> Option<String> {
    let lease = Api::<Lease>::namespaced(sim.client.clone(), "default")
        .get("joinery-leader-election")
        .await
        .ok()?;
    lease.spec?.holder_identity
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_follower_takes_over_a_leader_killed_mid_launch_without_duplicates() {
    let sim = Simulation::start(SimulationOptions {
        speed: SPEED,
        start_controller: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut events = sim.cloud.subscribe();
    // The cloud holds its create answer back, so the leader dies between the cloud's create
    // and the NodeClaim's status write: the follower must adopt, not relaunch.
    sim.cloud.faults().hold_create_answers();

    let leader = replica(&sim, "replica-a").acquire().await;
    let leader_loops = Controller::start(sim.controller_options()).await.unwrap();
    let follower = {
        let elector = replica(&sim, "replica-b");
        let options = sim.controller_options();
        tokio::spawn(async move {
            let leadership = elector.acquire().await;
            (leadership, Controller::start(options).await.unwrap())
        })
    };
    apply_basics(&sim).await;
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            if let Ok(CloudEvent::Launched(_)) = events.recv().await {
                return;
            }
        }
    })
    .await
    .expect("the leader launches an instance");
    // Several retry periods have passed since the follower started: it still stands by.
    tokio::time::sleep(sim.clock.to_real(Duration::from_secs(6))).await;
    assert!(
        !follower.is_finished(),
        "the follower must not lead while the leader renews"
    );
    assert_eq!(holder(&sim).await.as_deref(), Some("replica-a"));

    // The leader dies without releasing the Lease.
    leader_loops.abort();
    leader.abandon();
    let killed_at = sim.clock.now();
    sim.cloud.faults().release_create_answers();

    let (new_leader, loops) =
        tokio::time::timeout(sim.clock.to_real(Duration::from_secs(120)), follower)
            .await
            .expect("the follower takes over")
            .unwrap();
    let took = sim.clock.now().duration_since(killed_at).unwrap();
    // The lease lapses 15 s after the follower last saw it renewed; one retry period later
    // (2 s) at most, plus the time the loaded machine needs, it is taken.
    assert!(
        took >= Duration::from_secs(9),
        "taken over before the lease could lapse: {took:?}"
    );
    assert!(took <= Duration::from_secs(60), "took {took:?}");
    assert_eq!(holder(&sim).await.as_deref(), Some("replica-b"));
    let lease = Api::<Lease>::namespaced(sim.client.clone(), "default")
        .get("joinery-leader-election")
        .await
        .unwrap();
    assert_eq!(lease.spec.unwrap().lease_transitions, Some(1));

    assert!(
        wait_pod_running(&sim, Duration::from_secs(600)).await,
        "the pod ends Running"
    );
    assert_one_instance_one_claim(&sim).await;
    loops.shutdown().await;
    new_leader.release().await;
    assert_eq!(
        holder(&sim).await,
        None,
        "a clean stop hands the Lease back"
    );
    sim.shutdown().await;
}
