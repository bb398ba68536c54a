//! A misbehaving plugin gets a classified error for that call; the host keeps serving and
//! the next call succeeds.

mod common;

use common::{class, hostile};
use joinery_runtime::CallError;
use serde_json::json;

const LIMITS: &str = "plugins:\n  hostile:\n    limits: {memoryMiB: 16, timeoutMs: 300, maxConcurrency: 4}\n";

async fn assert_next_call_works(plugin: &joinery_runtime::plugin::LoadedPlugin) {
    let types = plugin.get_instance_types(&class(json!({"mode": "ok"}))).await.expect("next call must succeed");
    assert_eq!(types.len(), 1);
    assert_eq!(types[0].name, "ok-1");
}

#[tokio::test]
async fn trap_is_classified_with_the_panic_message() {
    let plugin = hostile(LIMITS, Default::default());
    let err = plugin.get_instance_types(&class(json!({"mode": "trap"}))).await.unwrap_err();
    match &err {
        CallError::Trap { message, op, .. } => {
            assert_eq!(*op, "get-instance-types");
            assert!(message.contains("trap mode requested"), "panic message should be recovered: {message}");
        }
        other => panic!("expected a trap, got {other:?}"),
    }
    assert_next_call_works(&plugin).await;
}

#[tokio::test]
async fn infinite_loop_is_interrupted_at_the_deadline() {
    let plugin = hostile(LIMITS, Default::default());
    let started = std::time::Instant::now();
    let err = plugin.get_instance_types(&class(json!({"mode": "loop"}))).await.unwrap_err();
    assert!(matches!(err, CallError::Timeout { limit_ms: 300, .. }), "expected a timeout, got {err:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "the deadline must stop the loop promptly");
    assert_next_call_works(&plugin).await;
}

#[tokio::test]
async fn unbounded_allocation_hits_the_memory_limit() {
    let plugin = hostile(LIMITS, Default::default());
    let err = plugin.get_instance_types(&class(json!({"mode": "alloc"}))).await.unwrap_err();
    assert!(matches!(err, CallError::MemoryLimit { limit_mib: 16, .. }), "expected a memory-limit error, got {err:?}");
    assert_next_call_works(&plugin).await;
}

#[tokio::test]
async fn garbage_output_is_refused_naming_the_field() {
    let plugin = hostile(LIMITS, Default::default());
    let err = plugin.get_instance_types(&class(json!({"mode": "garbage"}))).await.unwrap_err();
    match &err {
        CallError::InvalidOutput { message, .. } => assert!(message.contains("garbage-1"), "{message}"),
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
        tasks.push(tokio::spawn(async move { (mode, plugin.get_instance_types(&class(json!({"mode": mode}))).await) }));
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
