//! Small helpers shared by the loops: the loop runner, time conversion and patches.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use joinery_api::{Condition, ConditionStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use tokio::sync::watch;

use crate::{Context, ControllerError};

/// Runs `step` until stopped: after each step, waits for a cache change or `interval`
/// (simulated), whichever comes first. Errors are logged; the loop goes on.
pub(crate) async fn run_loop<F, Fut>(
    ctx: Arc<Context>,
    mut stopped: watch::Receiver<bool>,
    name: &'static str,
    interval: Duration,
    step: F,
) where
    F: Fn(Arc<Context>) -> Fut,
    Fut: Future<Output = Result<(), ControllerError>>,
{
    loop {
        if *stopped.borrow() {
            break;
        }
        let changed = ctx.state.changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if let Err(e) = step(ctx.clone()).await {
            tracing::warn!(controller = name, error = %e, "step failed; will retry");
        }
        tokio::select! {
            _ = &mut changed => {
                // Let a burst of watch events settle before the next pass.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            _ = tokio::time::sleep(ctx.clock.to_real(interval)) => {}
            _ = stopped.changed() => break,
        }
    }
}

/// A Kubernetes timestamp for a (simulated) time.
pub fn k8s_time(at: SystemTime) -> Time {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let ts = k8s_openapi::jiff::Timestamp::new(since.as_secs() as i64, since.subsec_nanos() as i32)
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    Time(ts)
}

/// The (simulated) time of a Kubernetes timestamp.
pub fn system_time(t: &Time) -> SystemTime {
    let nanos = t.0.as_nanosecond();
    if nanos >= 0 { UNIX_EPOCH + Duration::from_nanos(nanos as u64) } else { UNIX_EPOCH }
}

/// A condition stamped with the current (simulated) time.
pub fn condition(ctx: &Context, type_: &str, status: ConditionStatus, reason: &str, message: impl Into<String>) -> Condition {
    Condition::new(type_, status, reason, message, k8s_time(ctx.clock.now()))
}

/// Merge-patches an object's metadata or spec.
pub async fn merge_patch<K>(api: &Api<K>, name: &str, patch: serde_json::Value) -> Result<K, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await
}

/// Merge-patches an object's status subresource.
pub async fn merge_patch_status<K>(api: &Api<K>, name: &str, patch: serde_json::Value) -> Result<K, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)).await
}

/// Whether a kube error is a 404.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}


/// Truncates a message to `max` characters (upstream keeps condition messages short).
pub fn truncate(message: &str, max: usize) -> String {
    if message.chars().count() <= max { message.to_string() } else { message.chars().take(max).collect() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip() {
        let at = UNIX_EPOCH + Duration::from_millis(1_700_000_000_123);
        assert_eq!(system_time(&k8s_time(at)), at);
    }

    #[test]
    fn truncation_counts_characters() {
        assert_eq!(truncate("héllo", 2), "hé");
        assert_eq!(truncate("ok", 10), "ok");
    }
}
