//! A misbehaving plugin gets a classified error for that call; the host keeps serving and
//! the next call succeeds.

use crate::common;

use std::time::{Duration, Instant};

use common::{class, hostile};
use joinery_runtime::CallError;
use joinery_runtime::plugin::LoadedPlugin;
use joinery_runtime::services::{HostServices, KubeBackend, KubeCallError, KubeTarget, PatchType};
use serde_json::json;

const LIMITS: &str =
    "plugins:\n  hostile:\n    limits: {memoryMiB: 16, timeoutMs: 300, maxConcurrency: 4}\n";

async fn assert_next_call_works(plugin: &joinery_runtime::plugin::LoadedPlugin) {
    let types = plugin
        .get_instance_types(&class(json!({"mode": "ok"})))
        .await
        .expect("next call must succeed");
    assert_eq!(types.len(), 1);
    assert_eq!(types[0].name(), "ok-1");
}

#[tokio::test]
async fn trap_is_classified_with_the_panic_message() {
    let plugin = hostile(LIMITS, Default::default());
    let err = plugin
        .get_instance_types(&class(json!({"mode": "trap"})))
        .await
        .unwrap_err();
    match &err {
        CallError::Trap { message, op, .. } => {
            assert_eq!(*op, "get-instance-types");
            assert!(
                message.contains("trap mode requested"),
                "panic message should be recovered: {message}"
            );
            // The panic first, then the plugin's version and the trap; no wasm frames.
            assert!(message.starts_with("thread"), "{message}");
            assert!(message.contains("(plugin version "), "{message}");
            assert!(
                !message.contains("<wasm") && !message.contains("backtrace"),
                "{message}"
            );
        }
        other => panic!("expected a trap, got {other:?}"),
    }
    assert_next_call_works(&plugin).await;
}

#[tokio::test]
async fn infinite_loop_is_interrupted_at_the_deadline() {
    let plugin = hostile(LIMITS, Default::default());
    let started = std::time::Instant::now();
    let err = plugin
        .get_instance_types(&class(json!({"mode": "loop"})))
        .await
        .unwrap_err();
    assert!(
        matches!(err, CallError::Timeout { limit_ms: 300, .. }),
        "expected a timeout, got {err:?}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "the deadline must stop the loop promptly"
    );
    assert_next_call_works(&plugin).await;
}

#[tokio::test]
async fn unbounded_allocation_hits_the_memory_limit() {
    let plugin = hostile(LIMITS, Default::default());
    let err = plugin
        .get_instance_types(&class(json!({"mode": "alloc"})))
        .await
        .unwrap_err();
    assert!(
        matches!(err, CallError::MemoryLimit { limit_mib: 16, .. }),
        "expected a memory-limit error, got {err:?}"
    );
    assert_next_call_works(&plugin).await;
}

#[tokio::test]
async fn garbage_output_is_refused_naming_the_field() {
    let plugin = hostile(LIMITS, Default::default());
    let err = plugin
        .get_instance_types(&class(json!({"mode": "garbage"})))
        .await
        .unwrap_err();
    match &err {
        CallError::InvalidOutput { message, .. } => {
            assert!(message.contains("garbage-1"), "{message}")
        }
        other => panic!("expected invalid output, got {other:?}"),
    }
    assert_next_call_works(&plugin).await;
}

#[tokio::test]
async fn faults_in_parallel_do_not_disturb_good_calls() {
    let plugin = hostile(LIMITS, Default::default());
    let mut tasks = Vec::new();
    for mode in ["trap", "loop", "alloc", "garbage", "ok", "ok"] {
        let plugin = plugin.clone();
        tasks.push(tokio::spawn(async move {
            (
                mode,
                plugin
                    .get_instance_types(&class(json!({"mode": mode})))
                    .await,
            )
        }));
    }
    for task in tasks {
        let (mode, result) = task.await.unwrap();
        assert_eq!(result.is_ok(), mode == "ok", "mode {mode}: {result:?}");
    }
    assert_next_call_works(&plugin).await;
}

#[tokio::test]
async fn wrong_kind_call_is_a_host_error_not_a_crash() {
    let plugin = hostile(LIMITS, Default::default());
    let err = plugin.price(&[]).await.unwrap_err();
    assert!(err.to_string().contains("needs a pricing plugin"), "{err}");
}

/// The hostile plugin with a longer deadline, so a stall would be plain to see.
fn slow_hostile(
    timeout_ms: u32,
    max_concurrency: u32,
    grants: &str,
    services: HostServices,
) -> std::sync::Arc<LoadedPlugin> {
    let mut manifest = common::hostile_manifest();
    manifest.limits.timeout_ms = timeout_ms;
    manifest.limits.max_concurrency = max_concurrency;
    common::hostile_with(manifest, grants, services)
}

/// How long a trivial task spawned now takes to run: what a `/healthz` handler would wait.
async fn probe_latency() -> Duration {
    let asked = Instant::now();
    let answered = tokio::spawn(async move { Instant::now() }).await.unwrap();
    answered - asked
}

/// More looping calls than worker threads: the executor still answers other tasks at once
/// (the guest yields on every epoch tick), and a good call of the same plugin completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn looping_calls_do_not_starve_other_tasks() {
    let plugin = slow_hostile(4_000, 8, "plugins: {}\n", Default::default());
    let loops: Vec<_> = (0..4)
        .map(|_| {
            let plugin = plugin.clone();
            tokio::spawn(async move {
                plugin
                    .get_instance_types(&class(json!({"mode": "loop"})))
                    .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..5 {
        let latency = probe_latency().await;
        assert!(
            latency < Duration::from_secs(1),
            "a probe waited {latency:?} while plugins looped"
        );
    }
    let started = Instant::now();
    assert_next_call_works(&plugin).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "a good call waited {:?} behind looping ones",
        started.elapsed()
    );
    for task in loops {
        let err = task.await.unwrap().unwrap_err();
        assert!(
            matches!(
                err,
                CallError::Timeout {
                    limit_ms: 4_000,
                    ..
                }
            ),
            "{err:?}"
        );
    }
}

/// A Kubernetes backend whose every call hangs (a dead API server behind a granted import),
/// and says when a call has entered it.
#[derive(Default)]
struct HangingKube {
    entered: tokio::sync::Notify,
}

impl HangingKube {
    async fn hang<T>(&self) -> T {
        self.entered.notify_one();
        std::future::pending().await
    }
}

#[async_trait::async_trait]
impl KubeBackend for HangingKube {
    async fn get(&self, _: &KubeTarget, _: &str) -> Result<String, KubeCallError> {
        self.hang().await
    }
    async fn list(&self, _: &KubeTarget, _: Option<&str>) -> Result<String, KubeCallError> {
        self.hang().await
    }
    async fn create(&self, _: &KubeTarget, _: &str) -> Result<String, KubeCallError> {
        self.hang().await
    }
    async fn patch(
        &self,
        _: &KubeTarget,
        _: &str,
        _: PatchType,
        _: &str,
    ) -> Result<String, KubeCallError> {
        self.hang().await
    }
    async fn delete(&self, _: &KubeTarget, _: &str) -> Result<(), KubeCallError> {
        self.hang().await
    }
}

/// A call stuck inside a host import is abandoned at its deadline; the executor stays free
/// meanwhile, and calls queued behind a full set of stuck slots fail as `Saturated` after one
/// deadline instead of waiting forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_stuck_in_a_host_import_time_out_and_queued_calls_are_bounded() {
    let grants = "plugins:\n  hostile:\n    kubernetes:\n      - {group: \"\", resources: [configmaps], verbs: [get]}\n";
    let kube = std::sync::Arc::new(HangingKube::default());
    let services = HostServices {
        kube: kube.clone(),
        ..Default::default()
    };
    let plugin = slow_hostile(1_500, 1, grants, services);
    let stuck = {
        let plugin = plugin.clone();
        tokio::spawn(async move {
            plugin
                .get_instance_types(&class(json!({"mode": "kube"})))
                .await
        })
    };
    // The stuck call holds the only slot once it is inside the import.
    kube.entered.notified().await;
    assert!(probe_latency().await < Duration::from_secs(1));
    let queued = plugin
        .get_instance_types(&class(json!({"mode": "ok"})))
        .await
        .unwrap_err();
    assert!(
        matches!(
            queued,
            CallError::Saturated {
                max_concurrency: 1,
                ..
            }
        ),
        "{queued:?}"
    );
    assert!(queued.to_string().contains("maxConcurrency"), "{queued}");
    let err = stuck.await.unwrap().unwrap_err();
    assert!(
        matches!(
            err,
            CallError::Timeout {
                limit_ms: 1_500,
                ..
            }
        ),
        "{err:?}"
    );
    assert_next_call_works(&plugin).await;
}

/// `limits.maxConcurrentCreates: 1` serialises creates only: a create stuck in the cloud holds
/// the one create slot, a second create fails as saturated on `maxConcurrentCreates` after one
/// deadline, while other calls of the same plugin still run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creates_beyond_max_concurrent_creates_wait_while_other_calls_run() {
    let grants = "plugins:\n  hostile:\n    kubernetes:\n      - {group: \"\", resources: [configmaps], verbs: [get]}\n";
    let kube = std::sync::Arc::new(HangingKube::default());
    let services = HostServices {
        kube: kube.clone(),
        ..Default::default()
    };
    let mut manifest = common::hostile_manifest();
    manifest.limits.timeout_ms = 1_500;
    manifest.limits.max_concurrency = 4;
    manifest.limits.max_concurrent_creates = Some(1);
    let plugin = common::hostile_with(manifest, grants, services);
    let request = |mode: &str, name: &str| joinery_runtime::contract::CreateRequest {
        claim: common::claim(name, vec![], vec![]),
        node_class: class(json!({"mode": mode})),
        user_data: String::new(),
    };
    let stuck = {
        let plugin = plugin.clone();
        let request = request("kube", "first");
        tokio::spawn(async move { plugin.create(&request).await })
    };
    kube.entered.notified().await;
    // Another kind of call is not held up by the create slot.
    plugin
        .get_instance_types(&class(json!({"mode": "ok"})))
        .await
        .expect("other calls run beside a stuck create");
    let queued = plugin.create(&request("ok", "second")).await.unwrap_err();
    assert!(
        matches!(
            queued,
            CallError::Saturated {
                limit: "maxConcurrentCreates",
                max_concurrency: 1,
                ..
            }
        ),
        "{queued:?}"
    );
    assert!(
        queued.to_string().contains("maxConcurrentCreates"),
        "{queued}"
    );
    assert!(matches!(
        stuck.await.unwrap().unwrap_err(),
        CallError::Timeout { .. }
    ));
    // The slot is free again once the stuck create ended.
    plugin
        .create(&request("ok", "third"))
        .await
        .expect("the create slot is released");
}
