//! The Job and CronJob controllers with the whole physics, in virtual time: a paused tokio
//! clock drives the simulated one, the API server listens on the in-process network, and
//! every wait is counted in simulated seconds.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use joinery_core::clock::Clock;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::cloud::model::NodeRegistration;
use crate::cloud::{CloudEvent, InstanceState, SimInstance};
use crate::network::Network;
use crate::{ApiServer, ApiServerOptions, Physics, PhysicsOptions};

struct Cluster {
    _server: ApiServer,
    _physics: Physics,
    _cloud: broadcast::Sender<CloudEvent>,
    client: kube::Client,
    clock: Arc<Clock>,
}

/// An emulated cluster with one Ready node of 4 CPUs, in virtual time.
async fn cluster() -> Cluster {
    let origin = tokio::time::Instant::now();
    let clock = Arc::new(Clock::driven(
        UNIX_EPOCH + Duration::from_secs(1_767_225_600),
        Arc::new(move || tokio::time::Instant::now().saturating_duration_since(origin)),
    ));
    let server = ApiServer::start(ApiServerOptions {
        clock: clock.clone(),
        network: Network::in_process(),
        seed: Some(7),
        ..Default::default()
    })
    .await
    .expect("server starts");
    let client = server.client().expect("client builds");
    let (cloud, events) = broadcast::channel(16);
    let physics = Physics::start(
        PhysicsOptions::new(client.clone(), clock.clone()).with_cloud(events, Duration::ZERO),
    );
    let resources = |cpu: &str| -> BTreeMap<String, String> {
        [("cpu", cpu), ("memory", "8Gi"), ("pods", "110")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    cloud
        .send(CloudEvent::PlatformLaunched {
            instance: SimInstance {
                id: "i-1".into(),
                provider_id: "simcloud://i-1".into(),
                instance_type: "c-4x".into(),
                zone: "zone-a".into(),
                capacity_type: "on-demand".into(),
                user_data: String::new(),
                tags: BTreeMap::new(),
                capacity: resources("4"),
                allocatable: resources("4"),
                labels: BTreeMap::new(),
                price_per_hour: 0.1,
                state: InstanceState::Pending,
                created_at: "2026-01-01T00:00:00Z".into(),
            },
            registration: NodeRegistration {
                node_name: "node-1".into(),
                labels: BTreeMap::new(),
                taints: Vec::new(),
                provider_id: Some("simcloud://i-1".into()),
                boot_delay: None,
            },
        })
        .unwrap();
    Cluster {
        _server: server,
        _physics: physics,
        _cloud: cloud,
        client,
        clock,
    }
}

/// Checks `probe` every simulated second until it yields a value; fails after `limit` of
/// simulated time.
async fn within<T, F, Fut>(limit: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {limit:?}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

fn pod_template(run_for: &str, exit_code: i32, cpu: &str) -> Value {
    json!({
        "metadata": {"annotations": {
            crate::physics::RUN_FOR_ANNOTATION: run_for,
            crate::physics::EXIT_CODE_ANNOTATION: exit_code.to_string(),
        }},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "work", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}],
        },
    })
}

async fn create_job(client: &kube::Client, name: &str, spec: Value) -> Job {
    let job: Job =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
    Api::<Job>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &job)
        .await
        .unwrap()
}

/// The pods of a Job, by name, with their phases.
async fn job_pods(client: &kube::Client, job: &str) -> BTreeMap<String, String> {
    Api::<Pod>::namespaced(client.clone(), "default")
        .list(&ListParams::default().labels(&format!("job-name={job}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| {
            (
                p.metadata.name.unwrap_or_default(),
                p.status.and_then(|s| s.phase).unwrap_or_default(),
            )
        })
        .collect()
}

fn condition(job: &Job, kind: &str) -> Option<(String, String)> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == kind)
        .map(|c| (c.status.clone(), c.reason.clone().unwrap_or_default()))
}

#[tokio::test(start_paused = true)]
async fn a_job_runs_its_pods_to_completion_within_parallelism() {
    let cluster = cluster().await;
    let jobs: Api<Job> = Api::namespaced(cluster.client.clone(), "default");
    create_job(
        &cluster.client,
        "crunch",
        json!({"completions": 3, "parallelism": 2, "template": pod_template("30s", 0, "100m")}),
    )
    .await;
    let mut most_running = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    let job = loop {
        let running = job_pods(&cluster.client, "crunch")
            .await
            .values()
            .filter(|phase| *phase == "Running")
            .count();
        most_running = most_running.max(running);
        let job = jobs.get("crunch").await.unwrap();
        if condition(&job, "Complete").is_some() {
            break job;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "job crunch never completed"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    };
    let status = job.status.clone().unwrap();
    assert_eq!(status.succeeded, Some(3));
    assert_eq!(status.failed, None);
    assert_eq!(status.active, None, "no pod left running");
    assert_eq!(
        condition(&job, "Complete"),
        Some(("True".into(), "CompletionsReached".into()))
    );
    assert_eq!(
        condition(&job, "SuccessCriteriaMet").map(|c| c.0),
        Some("True".into())
    );
    assert_eq!(most_running, 2, "parallelism bounds the running pods");
    let pods = job_pods(&cluster.client, "crunch").await;
    assert_eq!(pods.len(), 3, "one pod per completion: {pods:?}");
    assert!(pods.values().all(|phase| phase == "Succeeded"), "{pods:?}");
    // Two waves of 30 s each.
    let took = status
        .completion_time
        .unwrap()
        .0
        .duration_since(status.start_time.unwrap().0);
    assert!(
        took.as_secs() >= 60 && took.as_secs() < 120,
        "the job took {took:?}"
    );
    // The pod selector the API server generated matches the pods.
    let selector = job.spec.unwrap().selector.unwrap().match_labels.unwrap();
    assert_eq!(
        selector.get(crate::apiserver::admission::JOB_CONTROLLER_UID_LABEL),
        job.metadata.uid.as_ref()
    );
    assert!(cluster.clock.now() > UNIX_EPOCH + Duration::from_secs(1_767_225_660));
}

#[tokio::test(start_paused = true)]
async fn finished_pods_give_their_room_back_to_the_next_ones() {
    let cluster = cluster().await;
    let jobs: Api<Job> = Api::namespaced(cluster.client.clone(), "default");
    // Each pod takes 3 of the node's 4 CPUs: the second can only run once the first is done.
    create_job(
        &cluster.client,
        "big",
        json!({"completions": 2, "parallelism": 2, "template": pod_template("20s", 0, "3")}),
    )
    .await;
    let mut together = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(300);
    loop {
        let pods = job_pods(&cluster.client, "big").await;
        together = together.max(pods.values().filter(|p| *p == "Running").count());
        if condition(&jobs.get("big").await.unwrap(), "Complete").is_some() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "job big never completed"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(together, 1, "the node holds one of them at a time");
    let pods = job_pods(&cluster.client, "big").await;
    assert_eq!(
        pods.values().filter(|p| *p == "Succeeded").count(),
        2,
        "{pods:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_job_whose_pods_fail_stops_at_its_backoff_limit() {
    let cluster = cluster().await;
    let jobs: Api<Job> = Api::namespaced(cluster.client.clone(), "default");
    create_job(
        &cluster.client,
        "flaky",
        json!({"backoffLimit": 1, "template": pod_template("5s", 1, "100m")}),
    )
    .await;
    let job = within(Duration::from_secs(300), "job flaky failed", || async {
        let job = jobs.get("flaky").await.unwrap();
        condition(&job, "Failed").is_some().then_some(job)
    })
    .await;
    assert_eq!(
        condition(&job, "Failed"),
        Some(("True".into(), "BackoffLimitExceeded".into()))
    );
    let status = job.status.unwrap();
    assert_eq!(status.failed, Some(2), "backoffLimit 1 allows one retry");
    assert_eq!(status.succeeded, None);
    assert!(condition_is_absent(&jobs, "flaky", "Complete").await);
    // Nothing more starts.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let pods = job_pods(&cluster.client, "flaky").await;
    assert_eq!(pods.len(), 2, "{pods:?}");
    assert!(pods.values().all(|p| p == "Failed"), "{pods:?}");
}

async fn condition_is_absent(jobs: &Api<Job>, name: &str, kind: &str) -> bool {
    condition(&jobs.get(name).await.unwrap(), kind).is_none()
}

#[tokio::test(start_paused = true)]
async fn deleting_a_job_takes_its_pods_away() {
    let cluster = cluster().await;
    let jobs: Api<Job> = Api::namespaced(cluster.client.clone(), "default");
    create_job(
        &cluster.client,
        "long",
        json!({"parallelism": 2, "completions": 2, "template": pod_template("1h", 0, "100m")}),
    )
    .await;
    within(
        Duration::from_secs(120),
        "job long's pods running",
        || async {
            let pods = job_pods(&cluster.client, "long").await;
            (pods.values().filter(|p| *p == "Running").count() == 2).then_some(())
        },
    )
    .await;
    jobs.delete("long", &DeleteParams::background())
        .await
        .unwrap();
    // The bound pods wait out their grace period (30 s), then their kubelet removes them.
    within(Duration::from_secs(120), "job long's pods gone", || async {
        job_pods(&cluster.client, "long")
            .await
            .is_empty()
            .then_some(())
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_cronjob_runs_jobs_on_its_schedule_with_its_policy_and_history() {
    let cluster = cluster().await;
    let cronjobs: Api<CronJob> = Api::namespaced(cluster.client.clone(), "default");
    let jobs: Api<Job> = Api::namespaced(cluster.client.clone(), "default");
    let cronjob = |name: &str, policy: &str, run_for: &str| -> CronJob {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "schedule": "* * * * *",
                "concurrencyPolicy": policy,
                "successfulJobsHistoryLimit": 2,
                "jobTemplate": {"spec": {"template": pod_template(run_for, 0, "100m")}},
            },
        }))
        .unwrap()
    };
    // Every minute; the jobs of `forbid` take 90 s, so every other run is skipped; those of
    // `allow` take 150 s, so up to three run at once.
    cronjobs
        .create(&PostParams::default(), &cronjob("forbid", "Forbid", "90s"))
        .await
        .unwrap();
    cronjobs
        .create(&PostParams::default(), &cronjob("allow", "Allow", "150s"))
        .await
        .unwrap();
    let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut most_active: BTreeMap<String, usize> = BTreeMap::new();
    for _ in 0..(10 * 60) {
        for job in jobs.list(&ListParams::default()).await.unwrap().items {
            let owner = job.metadata.owner_references.clone().unwrap_or_default();
            let owner = owner.first().map(|o| o.name.clone()).unwrap_or_default();
            seen.entry(owner)
                .or_default()
                .insert(job.metadata.name.clone().unwrap_or_default());
        }
        for name in ["forbid", "allow"] {
            let cronjob = cronjobs.get(name).await.unwrap();
            let active = cronjob.status.and_then(|s| s.active).map_or(0, |a| a.len());
            let most = most_active.entry(name.to_string()).or_default();
            *most = (*most).max(active);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // Forbid: one at a time, and fewer runs than minutes.
    assert_eq!(most_active["forbid"], 1);
    let forbid_runs = seen["forbid"].len();
    assert!((4..=6).contains(&forbid_runs), "{:?}", seen["forbid"]);
    // Allow: runs overlap, one per minute.
    assert!(most_active["allow"] >= 2, "{most_active:?}");
    assert!(seen["allow"].len() >= 9, "{:?}", seen["allow"]);
    // History: two finished Jobs are kept (of the five or so that finished).
    let kept: Vec<Job> = jobs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|j| j.metadata.owner_references.as_ref().unwrap()[0].name == "forbid")
        .collect();
    let finished = kept
        .iter()
        .filter(|j| condition(j, "Complete").is_some())
        .count();
    assert_eq!(finished, 2, "{kept:?}");
    // Jobs are named after the minute they were scheduled for, and annotated with it.
    for job in &kept {
        let name = job.metadata.name.clone().unwrap();
        let minutes: i64 = name.strip_prefix("forbid-").unwrap().parse().unwrap();
        let annotated =
            &job.metadata.annotations.as_ref().unwrap()[super::SCHEDULED_TIMESTAMP_ANNOTATION];
        let at: k8s_openapi::jiff::Timestamp = annotated.parse().unwrap();
        assert_eq!(at.as_second(), minutes * 60, "{name}: {annotated}");
    }
    let status = cronjobs.get("forbid").await.unwrap().status.unwrap();
    assert!(status.last_schedule_time.is_some());
    assert!(status.last_successful_time.is_some());

    // Deleting a CronJob takes its Jobs (and their pods) away.
    cronjobs
        .delete("allow", &DeleteParams::background())
        .await
        .unwrap();
    within(
        Duration::from_secs(120),
        "allow's jobs and pods gone",
        || async {
            let left = jobs
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter(|j| j.metadata.name.as_deref().unwrap().starts_with("allow-"))
                .count();
            let pods = Api::<Pod>::namespaced(cluster.client.clone(), "default")
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter(|p| p.metadata.name.as_deref().unwrap().starts_with("allow-"))
                .count();
            (left == 0 && pods == 0).then_some(())
        },
    )
    .await;
}
