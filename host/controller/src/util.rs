//! Small helpers shared by the loops: the loop runner, time conversion and patches.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use joinery_api::{Condition, ConditionStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::{Context, ControllerError};

/// Runs `step` until stopped: after each step, waits for a cache change or `interval`
/// (simulated), whichever comes first. Errors are logged and counted in
/// `joinery_controller_reconcile_errors_total`; the loop goes on.
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
        if let Err(e) = watched_step(&ctx, name, step(ctx.clone())).await {
            tracing::warn!(controller = name, error = %e, "step failed; will retry");
            ctx.metrics.reconcile_error(name, &e);
        }
        tokio::select! {
            biased;
            _ = &mut changed => {
                // Let a burst of watch events settle before the next pass.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            _ = tokio::time::sleep(ctx.clock.to_real(interval)) => {}
            _ = stopped.changed() => break,
        }
    }
}

/// Whether a periodic check last made at `last` is due again at `now`: `every` has passed,
/// or the clock went back before `last` (a wall clock stepped back, or a simulation's clock
/// rebased into the past) — a check that waited for the clock to catch up with `last` would
/// stop for as long as the step.
pub(crate) fn due(last: SystemTime, now: SystemTime, every: Duration) -> bool {
    now.duration_since(last)
        .map_or(true, |since| since >= every)
}

/// How long (simulated) a loop's step may run before it is reported as stalled.
const STALL_WARNING: Duration = Duration::from_secs(120);

/// Awaits one step, warning every [`STALL_WARNING`] while it runs: a step blocked on a request
/// that never returns stops its whole loop, and would otherwise do so silently. The step is
/// never cancelled (a step cut short could leave its loop's memory half updated).
async fn watched_step<Fut>(
    ctx: &Context,
    name: &'static str,
    step: Fut,
) -> Result<(), ControllerError>
where
    Fut: Future<Output = Result<(), ControllerError>>,
{
    tokio::pin!(step);
    let started = ctx.clock.now();
    loop {
        tokio::select! {
            biased;
            result = &mut step => return result,
            _ = tokio::time::sleep(ctx.clock.to_real(STALL_WARNING)) => {
                let seconds = ctx.clock.now().duration_since(started).unwrap_or_default().as_secs();
                tracing::warn!(controller = name, seconds, "a step has been running for a long time; a request may be hanging");
            }
        }
    }
}

/// Runs `step` like [`run_loop`], handing it the loop's [`KeyedWorkers`] (at most `limit`
/// reconciles at once), which live as long as the loop.
pub(crate) async fn run_keyed_loop<F, Fut>(
    ctx: Arc<Context>,
    stopped: watch::Receiver<bool>,
    name: &'static str,
    limit: usize,
    step: F,
) where
    F: Fn(Arc<Context>, Arc<KeyedWorkers>) -> Fut,
    Fut: Future<Output = Result<(), ControllerError>>,
{
    let workers = Arc::new(KeyedWorkers::new(name, limit, ctx.metrics.clone()));
    run_loop(ctx, stopped, name, Duration::from_secs(1), move |ctx| {
        step(ctx, workers.clone())
    })
    .await;
}

/// Runs one reconcile per object key at a time, up to `limit` at once, each in its own task,
/// so one slow object (a cloud call that hangs until its deadline) never delays the others.
///
/// A key whose reconcile is still running is skipped by later passes until it finishes.
/// The tasks belong to this value: dropping it (the loop stops, or is aborted as in a crash)
/// aborts them, so no work outlives its loop.
pub(crate) struct KeyedWorkers {
    name: &'static str,
    /// Where a failed reconcile is counted.
    metrics: Arc<Metrics>,
    in_flight: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    slots: Arc<tokio::sync::Semaphore>,
    tasks: std::sync::Mutex<tokio::task::JoinSet<()>>,
}

impl KeyedWorkers {
    /// Workers for the loop `name`, at most `limit` reconciles at once; failed reconciles are
    /// counted in `metrics`.
    pub(crate) fn new(name: &'static str, limit: usize, metrics: Arc<Metrics>) -> KeyedWorkers {
        KeyedWorkers {
            name,
            metrics,
            in_flight: Default::default(),
            slots: Arc::new(tokio::sync::Semaphore::new(limit.max(1))),
            tasks: Default::default(),
        }
    }

    /// Starts `work` for `key` unless a reconcile of `key` is running. Waits for a free slot
    /// (so a pass never starts more than `limit` at once), never for the work itself.
    pub(crate) async fn spawn<Fut>(&self, key: String, work: Fut)
    where
        Fut: Future<Output = Result<(), ControllerError>> + Send + 'static,
    {
        if !self
            .in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone())
        {
            return;
        }
        let Ok(slot) = self.slots.clone().acquire_owned().await else {
            return;
        };
        let in_flight = self.in_flight.clone();
        let name = self.name;
        let metrics = self.metrics.clone();
        let mut tasks = self.tasks.lock().unwrap_or_else(|p| p.into_inner());
        while tasks.try_join_next().is_some() {}
        tasks.spawn(async move {
            if let Err(e) = work.await {
                tracing::warn!(controller = name, object = %key, error = %e, "reconcile failed; will retry");
                metrics.reconcile_error(name, &e);
            }
            in_flight.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
            drop(slot);
        });
    }

    /// How many reconciles are running.
    #[cfg(test)]
    pub(crate) fn running(&self) -> usize {
        self.in_flight
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }
}

/// A Kubernetes timestamp for a (simulated) time.
pub fn k8s_time(at: SystemTime) -> Time {
    Time(
        joinery_core::time::timestamp(at.max(UNIX_EPOCH))
            .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

/// The (simulated) time of a Kubernetes timestamp.
pub use joinery_adapter::convert::system_time;

/// A condition stamped with the current (simulated) time.
pub fn condition(
    ctx: &Context,
    type_: &str,
    status: ConditionStatus,
    reason: &str,
    message: impl Into<String>,
) -> Condition {
    Condition::new(type_, status, reason, message, k8s_time(ctx.clock.now()))
}

/// Merge-patches an object's metadata or spec.
pub async fn merge_patch<K>(
    api: &Api<K>,
    name: &str,
    patch: serde_json::Value,
) -> Result<K, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

/// Merge-patches an object's status subresource.
pub async fn merge_patch_status<K>(
    api: &Api<K>,
    name: &str,
    patch: serde_json::Value,
) -> Result<K, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
}

/// Whether a kube error is a 404.
pub fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// Truncates a message to `max` characters (upstream keeps condition messages short).
pub fn truncate(message: &str, max: usize) -> String {
    if message.chars().count() <= max {
        message.to_string()
    } else {
        message.chars().take(max).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_periodic_check_is_due_after_its_interval_or_when_the_clock_went_back() {
        let last = UNIX_EPOCH + Duration::from_secs(1_796_000_000);
        let every = Duration::from_secs(10);
        assert!(!due(last, last, every));
        assert!(!due(last, last + Duration::from_secs(9), every));
        assert!(due(last, last + every, every));
        // A scenario's clock rebased nine months back after a loop's first pass: the next
        // pass must not wait nine months.
        assert!(due(last, last - Duration::from_secs(270 * 86_400), every));
    }

    #[tokio::test]
    async fn keyed_workers_run_keys_apart_and_once_at_a_time() {
        let metrics = Arc::new(Metrics::new());
        let workers = KeyedWorkers::new("test", 2, metrics.clone());
        let (release, released) = tokio::sync::watch::channel(false);
        let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let slow = |runs: Arc<std::sync::atomic::AtomicUsize>,
                    mut released: watch::Receiver<bool>| async move {
            runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ = released.wait_for(|r| *r).await;
            Ok(())
        };
        workers
            .spawn("stuck".into(), slow(runs.clone(), released.clone()))
            .await;
        // The same key is not started twice while it runs.
        workers
            .spawn("stuck".into(), slow(runs.clone(), released.clone()))
            .await;
        // Another key runs to completion while the first is stuck.
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        workers
            .spawn("quick".into(), async move {
                let _ = done_tx.send(());
                Ok(())
            })
            .await;
        tokio::time::timeout(Duration::from_secs(5), done_rx)
            .await
            .expect("the quick key is not delayed")
            .unwrap();
        tokio::task::yield_now().await;
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 1);
        release.send_replace(true);
        async fn until(done: impl Fn() -> bool) {
            let started = std::time::Instant::now();
            while !done() && started.elapsed() < Duration::from_secs(30) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        until(|| workers.running() == 0).await;
        assert_eq!(workers.running(), 0);
        // Once finished, the key may run again.
        workers
            .spawn("stuck".into(), slow(runs.clone(), released))
            .await;
        until(|| runs.load(std::sync::atomic::Ordering::SeqCst) == 2).await;
        assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_failed_reconcile_is_counted_by_its_loop_and_error_kind() {
        let metrics = Arc::new(Metrics::new());
        let workers = KeyedWorkers::new("node.termination", 2, metrics.clone());
        workers
            .spawn("bad".into(), async {
                Err(ControllerError::Invalid("malformed".into()))
            })
            .await;
        workers.spawn("good".into(), async { Ok(()) }).await;
        // Each task removes its key once it has finished (and counted its failure).
        while workers.running() != 0 {
            tokio::task::yield_now().await;
        }
        let series = |error: &str| crate::metrics::series::ReconcileError {
            controller: "node.termination".into(),
            error: error.into(),
        };
        assert_eq!(
            metrics.controller_reconcile_errors.get(&series("invalid")),
            1
        );
        let text = metrics.render();
        assert!(
            text.contains(
                "joinery_controller_reconcile_errors_total{controller=\"node.termination\",error=\"invalid\"} 1"
            ),
            "{text}"
        );
        assert_eq!(
            text.matches("joinery_controller_reconcile_errors_total{")
                .count(),
            1,
            "the reconcile that succeeded is not counted: {text}"
        );
    }

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
