//! Two replicas of the host on one Lease: only the leader acts; when it dies mid-launch the
//! follower takes over within the lease timings and finishes the job, with no duplicate
//! NodeClaim and no leaked instance.

use std::time::Duration;

use joinery_controller::Controller;
use joinery_controller::leader::{Elector, LeaderElectionConfig, Leadership, TermEnd, lead};
use joinery_core::lease::LeaseTimings;
use joinery_emulator::cloud::CloudEvent;
use joinery_simulate::{Simulation, SimulationOptions};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;

use super::restart::{apply_basics, assert_one_instance_one_claim, wait_pod_running};

fn replica(sim: &Simulation, identity: &str) -> Elector {
    replica_on(sim, sim.client.clone(), identity)
}

fn replica_on(sim: &Simulation, client: kube::Client, identity: &str) -> Elector {
    let config = LeaderElectionConfig {
        namespace: "default".into(),
        name: "joinery-leader-election".into(),
        identity: identity.into(),
        timings: LeaseTimings::default(),
    };
    Elector::new(client, sim.clock.clone(), config)
}

/// A simulation in virtual time (the 5 s margin between the renew deadline, 10 s, and the
/// lease duration, 15 s, holds exactly: no timer fires late) in which replica A leads with loops on a client of its own (`User-Agent: replica-a`), which the API server can
/// be made to hang; returns the simulation, A's Lease and its loops.
async fn leader_on_own_client() -> (Simulation, Leadership, Controller) {
    let sim = Simulation::start(SimulationOptions {
        virtual_time: true,
        start_controller: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let client = sim.api.client_as("replica-a").unwrap();
    let leadership = replica_on(&sim, client.clone(), "replica-a")
        .acquire()
        .await;
    let mut options = sim.controller_options();
    options.client = client;
    let loops = Controller::start(options).await.unwrap();
    (sim, leadership, loops)
}

/// How long the loops get to stop in these tests, as `joinery run` gives them.
const LOOPS_STOP_BUDGET: Duration = Duration::from_secs(15);

/// The leader's API server accepts its requests and never answers them (the renewal hangs):
/// the leader stops leading within the renew deadline, before the follower's lease duration
/// runs out, so that at no moment do two replicas act. Before the fix, the hung renewal kept
/// the old leader's loops running until the connection died.
#[tokio::test(start_paused = true)]
async fn a_leader_whose_requests_hang_stops_before_the_follower_leads() {
    let (sim, leadership, loops) = leader_on_own_client().await;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let clock = sim.clock.clone();
    let term = tokio::spawn(async move {
        let end = lead(
            loops,
            leadership,
            async {
                let _ = stopped.await;
            },
            LOOPS_STOP_BUDGET,
        )
        .await;
        (end, clock.now())
    });
    let follower = {
        let elector = replica_on(&sim, sim.api.client_as("replica-b").unwrap(), "replica-b");
        let clock = sim.clock.clone();
        tokio::spawn(async move {
            let leadership = elector.acquire().await;
            (leadership, clock.now())
        })
    };
    // The leader renews; the follower stands by.
    tokio::time::sleep(sim.clock.to_real(Duration::from_secs(5))).await;
    assert!(!follower.is_finished(), "the follower must not lead yet");
    assert!(!term.is_finished(), "the leader still leads");

    sim.api.faults().hang_client("replica-a");
    let (end, ended_at) = tokio::time::timeout(sim.clock.to_real(Duration::from_secs(120)), term)
        .await
        .expect("a leader whose renewals hang stops leading")
        .unwrap();
    assert_eq!(end, TermEnd::Lost);
    let (new_leader, led_at) =
        tokio::time::timeout(sim.clock.to_real(Duration::from_secs(120)), follower)
            .await
            .expect("the follower takes over")
            .unwrap();
    assert!(
        ended_at <= led_at,
        "two leaders: the old one stopped at {:?}, the new one led from {:?}",
        sim.clock.seconds_at(ended_at),
        sim.clock.seconds_at(led_at)
    );
    assert_eq!(holder(&sim).await.as_deref(), Some("replica-b"));
    drop(stop);
    sim.api.faults().release_client("replica-a");
    new_leader.release().await;
    sim.shutdown().await;
}

/// SIGTERM while the API server hangs every request of the leader: the stop is bounded (the
/// loops' budget, then the Lease's release within the renew deadline) and ends within the
/// chart's default grace period of 30 s. Before the fix, the release waited for the hung
/// renewal forever.
#[tokio::test(start_paused = true)]
async fn a_leader_stopped_while_its_requests_hang_stops_within_the_grace_period() {
    let (sim, leadership, loops) = leader_on_own_client().await;
    tokio::time::sleep(sim.clock.to_real(Duration::from_secs(3))).await;
    sim.api.faults().hang_client("replica-a");
    let signalled_at = sim.clock.now();
    let end = tokio::time::timeout(
        sim.clock.to_real(Duration::from_secs(120)),
        lead(loops, leadership, async {}, LOOPS_STOP_BUDGET),
    )
    .await
    .expect("a stop while the API server hangs ends");
    let took = sim.clock.now().duration_since(signalled_at).unwrap();
    assert!(
        took <= Duration::from_secs(30),
        "{end:?} after {took:?}: past the grace period"
    );
    sim.api.faults().release_client("replica-a");
    sim.shutdown().await;
}

async fn holder(sim: &Simulation) -> Option<String> {
    let lease = Api::<Lease>::namespaced(sim.client.clone(), "default")
        .get("joinery-leader-election")
        .await
        .ok()?;
    lease.spec?.holder_identity
}

#[tokio::test(start_paused = true)]
async fn the_follower_takes_over_a_leader_killed_mid_launch_without_duplicates() {
    let sim = Simulation::start(SimulationOptions {
        virtual_time: true,
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
