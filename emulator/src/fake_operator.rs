//! What the fake clouds' operators share (the Clever Cloud NodeGroup operator and the Cluster
//! API controllers): the loop that feeds watch events (retried with kube's default backoff)
//! into [`Cache`]s and makes one pass on every change, when something is due, or at the resync
//! interval; and the handle that starts that loop as a task, owns the simulated clock and the
//! state the task shares, publishes the machines' [`CloudEvent`]s and stops the task when
//! dropped.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use joinery_core::clock::Clock;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::watcher;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use crate::cloud::model::CloudEvent;
use crate::physics::cache::{Cache, Cached};
use crate::physics::{Trigger, api_code, watch};

/// How many events a slow subscriber may fall behind before it misses some.
const EVENT_BUFFER: usize = 4096;

/// A change a watch brings to an operator's state (a watch event applied to one of its caches).
pub(crate) type Update<S> = Box<dyn FnOnce(&mut S) + Send>;

/// A watch of `api` whose events go into the cache `mirror` picks out of the operator's state.
pub(crate) fn mirrored<S, K>(
    api: Api<K>,
    config: watcher::Config,
    mirror: fn(&mut S) -> &mut Cache<K>,
) -> BoxStream<'static, Update<S>>
where
    S: 'static,
    K: Cached + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watch(api, config)
        .map(move |event| Box::new(move |state: &mut S| mirror(state).apply(event)) as Update<S>)
        .boxed()
}

/// An operator's state, as the loop ([`run`]) drives it.
pub(crate) trait Reconciler: Send {
    /// The real time until a pass is next due if nothing changes ([`real_wait`]).
    fn real_wait(&self) -> Duration;
    /// One pass over everything the operator looks after; what fails is retried on the next.
    fn pass(&mut self) -> impl Future<Output = ()> + Send;
}

/// The real time to wait on `clock` for something due after `until_next` (simulated), at most
/// the resync interval and at least a millisecond.
pub(crate) fn real_wait(clock: &Clock, resync: Duration, until_next: Option<Duration>) -> Duration {
    clock
        .to_real(until_next.unwrap_or(resync).min(resync))
        .max(Duration::from_millis(1))
}

/// Sets what an operator tracks by uid against the objects that exist: takes out (and returns,
/// by uid) what it tracks of objects now gone, and returns the objects it does not track yet,
/// in creation order (then by name), so that what it does on first sight is done in that order.
pub(crate) fn sort_out<T>(
    tracked: &mut BTreeMap<String, T>,
    objects: &[DynamicObject],
) -> (Vec<T>, Vec<DynamicObject>) {
    let live: BTreeSet<&str> = objects
        .iter()
        .filter_map(|o| o.metadata.uid.as_deref())
        .collect();
    let gone: Vec<String> = tracked
        .keys()
        .filter(|uid| !live.contains(uid.as_str()))
        .cloned()
        .collect();
    let gone = gone
        .into_iter()
        .filter_map(|uid| tracked.remove(&uid))
        .collect();
    let mut fresh: Vec<&DynamicObject> = objects
        .iter()
        .filter(|o| {
            o.metadata
                .uid
                .as_ref()
                .is_some_and(|u| !tracked.contains_key(u))
        })
        .collect();
    fresh.sort_by_key(|o| {
        (
            o.metadata.creation_timestamp.as_ref().map(|t| t.0),
            o.metadata.name.clone(),
        )
    });
    (gone, fresh.into_iter().cloned().collect())
}

/// The `lastTransitionTime` of the condition `kind` in an earlier status, if it had the status
/// `state` then (a condition keeps its transition time while it stays as it was).
pub(crate) fn earlier_transition(
    previous: Option<&serde_json::Value>,
    kind: &str,
    state: &str,
) -> Option<serde_json::Value> {
    previous
        .and_then(|p| p.get("conditions"))
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c["type"] == kind && c["status"] == state)
        .and_then(|c| c.get("lastTransitionTime").cloned())
}

/// Merge-patches `status` into the status of `name`: the object as written, or `None` if it is
/// gone (a 404 answer).
pub(crate) async fn patch_status<K>(
    api: &Api<K>,
    name: &str,
    status: &impl serde::Serialize,
) -> Result<Option<K>, kube::Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = serde_json::json!({ "status": status });
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(written) => Ok(Some(written)),
        Err(error) if api_code(&error) == Some(404) => Ok(None),
        Err(error) => Err(error),
    }
}

/// Adds `finalizer` to `object` with a merge patch that holds its resource version: the object
/// as written, or `None` if it is gone or changed meanwhile (a 404 or 409 answer; the next pass
/// sees the news).
pub(crate) async fn add_finalizer(
    api: &Api<DynamicObject>,
    object: &DynamicObject,
    finalizer: &str,
) -> Result<Option<DynamicObject>, kube::Error> {
    let name = object.metadata.name.clone().unwrap_or_default();
    let mut finalizers = object.metadata.finalizers.clone().unwrap_or_default();
    finalizers.push(finalizer.to_string());
    let patch = serde_json::json!({"metadata": {"finalizers": finalizers, "resourceVersion": object.metadata.resource_version}});
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(written) => Ok(Some(written)),
        Err(error) if matches!(api_code(&error), Some(404 | 409)) => Ok(None),
        Err(error) => Err(error),
    }
}

/// Removes `finalizer` from the object `name` as it is now (read afresh), with a merge patch
/// that holds its resource version: whether the object was still there to read (a 404 answer
/// to the patch counts as done; a 409, changed meanwhile, is an error).
pub(crate) async fn remove_finalizer(
    api: &Api<DynamicObject>,
    name: &str,
    finalizer: &str,
) -> Result<bool, kube::Error> {
    let current = match api.get(name).await {
        Ok(current) => current,
        Err(error) if api_code(&error) == Some(404) => return Ok(false),
        Err(error) => return Err(error),
    };
    let kept: Vec<String> = current
        .metadata
        .finalizers
        .iter()
        .flatten()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    let patch = serde_json::json!({"metadata": {"finalizers": kept, "resourceVersion": current.metadata.resource_version}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(true),
        Err(error) if api_code(&error) == Some(404) => Ok(true),
        Err(error) => Err(error),
    }
}

/// Runs `state`'s passes until the task is aborted: after every burst of watch updates, and
/// when [`Reconciler::real_wait`] has gone by.
pub(crate) async fn run<S: Reconciler>(mut state: S, watches: Vec<BoxStream<'static, Update<S>>>) {
    let mut updates = futures::stream::select_all(watches);
    let mut trigger = Trigger::new();
    loop {
        let wait = state.real_wait();
        tokio::select! {
            biased;
            Some(update) = updates.next() => {
                update(&mut state);
                trigger.fire();
            }
            _ = trigger.due() => state.pass().await,
            _ = tokio::time::sleep(wait) => state.pass().await,
        }
    }
}

/// A running fake operator's task, with what it shares with its handle: the machines' events,
/// a ledger `L` and the clock. Dropping it stops the task.
pub(crate) struct OperatorTask<L> {
    /// What the operator is called in the log.
    name: &'static str,
    events: broadcast::Sender<CloudEvent>,
    ledger: Arc<L>,
    clock: Arc<Clock>,
    task: Option<JoinHandle<()>>,
}

impl<L: Default + Send + Sync + 'static> OperatorTask<L> {
    /// Starts `run` (given the events' sender and the ledger) as a tokio task (call from within
    /// a tokio runtime).
    pub(crate) fn start<F, Fut>(name: &'static str, clock: Arc<Clock>, run: F) -> Self
    where
        F: FnOnce(broadcast::Sender<CloudEvent>, Arc<L>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        let ledger = Arc::new(L::default());
        let task = tokio::spawn(run(events.clone(), ledger.clone()));
        tracing::info!("{name} started");
        OperatorTask {
            name,
            events,
            ledger,
            clock,
            task: Some(task),
        }
    }

    /// A receiver of the machines' [`CloudEvent`]s from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<CloudEvent> {
        self.events.subscribe()
    }

    /// What the task shares with the handle.
    pub(crate) fn ledger(&self) -> &L {
        &self.ledger
    }

    /// Simulated time since the clock's origin.
    pub(crate) fn elapsed(&self) -> Duration {
        self.clock.elapsed()
    }

    /// Stops the task and waits for it to end.
    pub(crate) async fn shutdown(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
        tracing::info!("{} stopped", self.name);
    }
}

impl<L> Drop for OperatorTask<L> {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}
