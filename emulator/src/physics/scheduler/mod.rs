//! The kube-scheduler stand-in: binds pending pods to feasible nodes through the `binding`
//! subresource, or marks them `PodScheduled=False` with reason `Unschedulable` and a message
//! in kube-scheduler's words.
//!
//! Feasibility follows kube-scheduler's filter plugins, in their order (a node is rejected by
//! the first that fails): NodeUnschedulable, TaintToleration (`NoSchedule`/`NoExecute`, with a
//! `not-ready` taint on nodes that are not Ready), NodeAffinity (nodeSelector and required
//! node affinity terms), NodePorts, NodeResourcesFit (requests by joinery-core against
//! allocatable minus the bound, unfinished pods), PodTopologySpread (`DoNotSchedule`
//! constraints) and InterPodAffinity (required terms). Among feasible nodes the most allocated
//! one wins (bin packing), ties going to the first name.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use joinery_core::requirements::{Operator, Requirement};
use joinery_core::resources::{CPU, MEMORY, PODS, Resources};
use joinery_core::taints::{Taint, TaintEffect, Toleration, tolerated_by};
use k8s_openapi::api::core::v1::{
    Binding, Namespace, Node, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference, Pod,
    PodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta, Time,
};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::Status;
use kube::runtime::watcher;
use serde_json::json;
use tokio::time::Instant;

use super::cache::Cache;
use super::lag::CONCURRENT_WRITES;
use super::{
    DEFAULT_SCHEDULER_NAME, PhysicsContext, Trigger, api_code, is_deleting, is_terminal, labels_of,
    node_name_of, pod_requests, pod_tolerations, scheduling_taints, selector_matches, watch,
};

mod filter;

use filter::*;
pub(crate) use filter::{node_affinity_matches, untolerated};

/// Runs the scheduler until the task is aborted.
pub(crate) async fn run(shared: Arc<PhysicsContext>) {
    let client = shared.client.clone();
    let mut pod_events = watch(Api::<Pod>::all(client.clone()), watcher::Config::default());
    let mut node_events = watch(Api::<Node>::all(client.clone()), watcher::Config::default());
    let mut namespace_events = watch(Api::<Namespace>::all(client), watcher::Config::default());
    let mut resync = tokio::time::interval(shared.real_resync());
    let mut trigger = Trigger::scaled(&shared.clock);
    let mut scheduler = Scheduler::new(shared);
    loop {
        let synced = scheduler.pods.is_synced()
            && scheduler.nodes.is_synced()
            && scheduler.namespaces.is_synced();
        let next_write = scheduler.next_write();
        tokio::select! {
            biased;
            Some(event) = pod_events.next() => {
                if scheduler.pod_event(event) {
                    trigger.fire();
                }
            }
            Some(event) = node_events.next() => {
                if scheduler.node_event(event) {
                    trigger.fire();
                }
            }
            Some(event) = namespace_events.next() => {
                scheduler.namespaces.apply(event);
                scheduler.requeue_all = true;
                trigger.fire();
            }
            _ = resync.tick() => {
                scheduler.requeue_all = true;
                scheduler.forget_old_verdicts();
                trigger.fire();
            }
            Some(done) = scheduler.in_flight.next(), if !scheduler.in_flight.is_empty() => {
                if scheduler.finish(done) {
                    trigger.fire();
                }
            }
            _ = tokio::time::sleep_until(next_write.unwrap_or_else(Instant::now)), if next_write.is_some() => scheduler.start_writes(),
            fired = trigger.due(), if synced => {
                scheduler.shared.record_pass(LAG_SERIES, fired);
                if scheduler.pass() {
                    // Pods tried before a binding of this pass may depend on it (spread, affinity).
                    scheduler.requeue_constrained = true;
                    trigger.fire();
                }
            }
        }
    }
}

/// The lag series the scheduler records into.
const LAG_SERIES: &str = "scheduler";

/// At most this often (simulated) a pod's `Unschedulable` message is rewritten when only the
/// message changed; a pod's first verdict is written at once. Refreshed messages are the
/// scheduler's least urgent writes: they go after bindings and first verdicts, with what is
/// left of its write rate, and are not counted as lag.
const VERDICT_REFRESH: Duration = Duration::from_secs(30);

/// A pod's namespace and name.
type Key = (String, String);

fn key_of(pod: &Pod) -> Key {
    (
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default(),
    )
}

/// What a change asks the scheduler to look at again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Requeue {
    /// Nothing: the change cannot make a pending pod schedulable (or it is this scheduler's
    /// own write coming back).
    Nothing,
    /// The pod itself: it is new, or changed while pending.
    Pod,
    /// The pending pods whose placement depends on other pods (topology spread, pod affinity
    /// and anti-affinity): a pod was bound, relabelled or started terminating.
    Constrained,
    /// Every pending pod: room was freed, or the pod was replaced by another of its name.
    All,
}

/// What a pass read from objects, by key, each with the resourceVersion it was read from: read
/// again only when the object's version changes (or is unknown).
struct ByVersion<T>(HashMap<String, (String, Arc<T>)>);

impl<T> Default for ByVersion<T> {
    fn default() -> Self {
        ByVersion(HashMap::new())
    }
}

impl<T> ByVersion<T> {
    /// What was read for `key` at `meta`'s version, or `read()` now (and kept).
    fn read(&mut self, key: &str, meta: &ObjectMeta, read: impl FnOnce() -> T) -> Arc<T> {
        let version = meta.resource_version.as_deref();
        if let Some((seen, value)) = self.0.get(key)
            && version == Some(seen.as_str())
        {
            return value.clone();
        }
        let value = Arc::new(read());
        if let Some(version) = version {
            self.0
                .insert(key.to_string(), (version.to_string(), value.clone()));
        }
        value
    }

    /// Keeps only the keys `keep` accepts.
    fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.0.retain(|key, _| keep(key));
    }
}

/// Whether a pod takes room on its node: bound and not finished (terminating pods still do).
fn occupies(pod: &Pod) -> bool {
    node_name_of(pod).is_some() && !is_terminal(pod)
}

/// What a pod's change from `old` to `new` (`None`: absent) asks the scheduler to look at
/// again — kube-scheduler's queueing hints, coarsely.
fn pod_change(old: Option<&Pod>, new: Option<&Pod>) -> Requeue {
    if let (Some(old), Some(new)) = (old, new)
        && old.metadata.uid != new.metadata.uid
    {
        return Requeue::All;
    }
    let was = old.is_some_and(occupies);
    match new {
        None if was => Requeue::All,
        None => Requeue::Nothing,
        Some(new) if occupies(new) => {
            let changed = old.is_none_or(|old| {
                !was || old.metadata.labels != new.metadata.labels
                    || (!is_deleting(old) && is_deleting(new))
            });
            if changed {
                Requeue::Constrained
            } else {
                Requeue::Nothing
            }
        }
        Some(_) if was => Requeue::All,
        Some(new) if is_pending(new) && node_name_of(new).is_none() => {
            let same = old
                .is_some_and(|old| old.metadata.resource_version == new.metadata.resource_version);
            if same { Requeue::Nothing } else { Requeue::Pod }
        }
        Some(_) => Requeue::Nothing,
    }
}

/// Whether a node's change from `old` to `new` (`None`: absent) may let a pending pod fit: a
/// node gone (spread domains change), or a Ready node new or changed in anything the filters
/// read (labels, taints, cordon, allocatable, readiness). A node that is not Ready takes no
/// pod (its implied `not-ready` taint), so its changes wait for the resync, as kube-scheduler's
/// queueing hints skip them.
fn node_change(old: Option<&Node>, new: Option<&Node>) -> bool {
    let Some(new) = new else { return true };
    if !super::node_is_ready(new) {
        return false;
    }
    let Some(old) = old else { return true };
    let taints = |n: &Node| n.spec.as_ref().and_then(|s| s.taints.clone());
    let cordoned = |n: &Node| {
        n.spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false)
    };
    let allocatable = |n: &Node| n.status.as_ref().and_then(|s| s.allocatable.clone());
    old.metadata.labels != new.metadata.labels
        || taints(old) != taints(new)
        || cordoned(old) != cordoned(new)
        || allocatable(old) != allocatable(new)
        || super::node_is_ready(old) != super::node_is_ready(new)
}

/// Whether a pod's placement depends on where other pods are.
fn depends_on_others(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    spec.and_then(|s| s.topology_spread_constraints.as_ref())
        .is_some_and(|c| !c.is_empty())
        || spec
            .and_then(|s| s.affinity.as_ref())
            .is_some_and(|a| a.pod_affinity.is_some() || a.pod_anti_affinity.is_some())
}

/// A binding decided and not yet written; the pod is assumed bound in the cache meanwhile.
struct Bind {
    key: Key,
    uid: Option<String>,
    node: String,
    /// The pod as it was before the assumption, to restore if the binding fails.
    original: Pod,
    /// The version the assumed copy carries in the cache.
    assumed_version: Option<String>,
    /// When it was decided (simulated).
    asked: SystemTime,
}

/// An `Unschedulable` verdict decided and not yet written.
struct Verdict {
    uid: Option<String>,
    message: String,
    asked: SystemTime,
    /// Whether it only refreshes the message of a pod already unschedulable.
    refresh: bool,
}

/// A write to start.
#[expect(
    clippy::large_enum_variant,
    reason = "short-lived, one per write in flight; boxing would add an allocation per binding"
)]
enum Job {
    Bind(Bind),
    Verdict(Key, Verdict),
}

/// The scheduler's writes waiting for their turn: bindings first, then pods' first verdicts,
/// then refreshed verdict messages, each in the order decided, at the scheduler's pace.
struct Writes {
    pace: super::lag::Pace,
    binds: VecDeque<Bind>,
    /// The latest verdict decided per pod; a pod is in one of the two queues below while here.
    verdicts: HashMap<Key, Verdict>,
    first: VecDeque<Key>,
    refresh: VecDeque<Key>,
}

impl Writes {
    fn new(pace: super::lag::Pace) -> Self {
        Self {
            pace,
            binds: VecDeque::new(),
            verdicts: HashMap::new(),
            first: VecDeque::new(),
            refresh: VecDeque::new(),
        }
    }

    /// Queues a verdict, or updates the message of one queued for the pod.
    fn verdict(&mut self, key: Key, verdict: Verdict, first: bool) {
        if let Some(queued) = self.verdicts.get_mut(&key) {
            queued.message = verdict.message;
            queued.uid = verdict.uid;
            return;
        }
        if first {
            self.first.push_back(key.clone())
        } else {
            self.refresh.push_back(key.clone())
        }
        self.verdicts.insert(
            key,
            Verdict {
                refresh: !first,
                ..verdict
            },
        );
    }

    fn is_queued(&self, key: &Key) -> bool {
        self.verdicts.contains_key(key)
    }

    /// Drops the verdict queued for a pod, if any.
    fn forget_verdict(&mut self, key: &Key) {
        self.verdicts.remove(key);
    }

    /// When the next write was asked for, dropping forgotten verdicts from the queues' heads.
    fn next_asked(&mut self) -> Option<SystemTime> {
        if let Some(bind) = self.binds.front() {
            return Some(bind.asked);
        }
        for queue in [&mut self.first, &mut self.refresh] {
            while let Some(key) = queue.front() {
                match self.verdicts.get(key) {
                    Some(verdict) => return Some(verdict.asked),
                    None => {
                        queue.pop_front();
                    }
                }
            }
        }
        None
    }

    /// Takes the next write, in the order of [`Writes::next_asked`].
    fn pop(&mut self) -> Option<Job> {
        if let Some(bind) = self.binds.pop_front() {
            return Some(Job::Bind(bind));
        }
        for queue in [&mut self.first, &mut self.refresh] {
            while let Some(key) = queue.pop_front() {
                if let Some(verdict) = self.verdicts.remove(&key) {
                    return Some(Job::Verdict(key, verdict));
                }
            }
        }
        None
    }
}

/// A finished write.
enum Done {
    Bound {
        bind: Bind,
        slot: SystemTime,
        result: Result<(), kube::Error>,
    },
    Marked {
        key: Key,
        uid: Option<String>,
        slot: Option<SystemTime>,
        result: Result<Pod, kube::Error>,
    },
}

struct Scheduler {
    shared: Arc<PhysicsContext>,
    pods: Cache<Pod>,
    nodes: Cache<Node>,
    namespaces: Cache<Namespace>,
    /// Pending pods to try again in the next pass.
    requeued: HashSet<Key>,
    /// Try every pending pod that depends on other pods in the next pass.
    requeue_constrained: bool,
    /// Try every pending pod in the next pass.
    requeue_all: bool,
    writes: Writes,
    in_flight: FuturesUnordered<BoxFuture<'static, Done>>,
    /// When this scheduler last wrote each pod's verdict (by uid).
    written: HashMap<String, SystemTime>,
    /// What each bound pod takes on its node (by uid).
    placed: ByVersion<PlacedPod>,
    /// What each node is apart from its pods (by name).
    node_bases: ByVersion<NodeBase>,
    /// Whether a pod event came since [`Scheduler::forget_old_verdicts`] last pruned.
    pods_changed: bool,
}

/// Something a pass decided.
#[expect(
    clippy::large_enum_variant,
    reason = "short-lived, one per pod a pass decides on; boxing would add an allocation each"
)]
enum Decision {
    /// Bind the pod (a copy of it as it is now) to the node.
    Bind(Pod, String),
    /// Queue this verdict (`true`: the pod's first).
    Verdict(Key, Verdict, bool),
    /// The pod already says what a queued verdict would: drop it.
    Settled(Key),
}

impl Scheduler {
    fn new(shared: Arc<PhysicsContext>) -> Self {
        let pace = shared.pace();
        Self {
            shared,
            pods: Cache::new(),
            nodes: Cache::new(),
            namespaces: Cache::new(),
            requeued: HashSet::new(),
            requeue_constrained: false,
            requeue_all: true,
            writes: Writes::new(pace),
            in_flight: FuturesUnordered::new(),
            written: HashMap::new(),
            placed: ByVersion::default(),
            node_bases: ByVersion::default(),
            pods_changed: false,
        }
    }

    /// Applies a pod event; `true` when a pass should look at something again.
    fn pod_event(&mut self, event: watcher::Event<Pod>) -> bool {
        self.pods_changed = true;
        let requeue = match &event {
            watcher::Event::Apply(pod) => {
                let key = key_of(pod);
                let old = self.pods.get(&key.0, &key.1);
                // The cache keeps what is newer: an older event changes nothing.
                let stale = old.is_some_and(|old| {
                    old.metadata.uid == pod.metadata.uid && version(old) > version(pod)
                });
                let requeue = if stale {
                    Requeue::Nothing
                } else {
                    pod_change(old, Some(pod))
                };
                if requeue == Requeue::Pod {
                    self.requeued.insert(key);
                }
                requeue
            }
            watcher::Event::Delete(pod) => {
                let key = key_of(pod);
                if let Some(uid) = pod.metadata.uid.as_deref() {
                    self.written.remove(uid);
                }
                self.requeued.remove(&key);
                pod_change(self.pods.get(&key.0, &key.1), None)
            }
            watcher::Event::InitDone => Requeue::All,
            watcher::Event::Init | watcher::Event::InitApply(_) => Requeue::Nothing,
        };
        self.pods.apply(event);
        match requeue {
            Requeue::Nothing => false,
            Requeue::Pod => true,
            Requeue::Constrained => {
                self.requeue_constrained = true;
                true
            }
            Requeue::All => {
                self.requeue_all = true;
                true
            }
        }
    }

    /// Applies a node event; `true` when every pending pod should be tried again.
    fn node_event(&mut self, event: watcher::Event<Node>) -> bool {
        let changed = match &event {
            watcher::Event::Apply(node) => {
                let old = self
                    .nodes
                    .get("", node.metadata.name.as_deref().unwrap_or_default());
                node_change(old, Some(node))
            }
            watcher::Event::Delete(_) | watcher::Event::InitDone => true,
            watcher::Event::Init | watcher::Event::InitApply(_) => false,
        };
        let gone = matches!(event, watcher::Event::Delete(_) | watcher::Event::InitDone);
        self.nodes.apply(event);
        if gone {
            // What is kept of nodes no longer there goes with them.
            let nodes = &self.nodes;
            self.node_bases.retain(|name| nodes.get("", name).is_some());
        }
        self.requeue_all |= changed;
        changed
    }

    /// Forgets what is kept about pods that are gone: when verdicts were written for pods no
    /// longer pending, what pods no longer bound took.
    fn forget_old_verdicts(&mut self) {
        // Entries go stale only when pods are bound or go away: without a pod event since the
        // last prune, there is nothing to forget.
        if !std::mem::take(&mut self.pods_changed) {
            return;
        }
        let pending: HashSet<&str> = self
            .pods
            .iter()
            .filter(|p| node_name_of(p).is_none())
            .filter_map(|p| p.metadata.uid.as_deref())
            .collect();
        self.written.retain(|uid, _| pending.contains(uid.as_str()));
        let bound: HashSet<&str> = self
            .pods
            .iter()
            .filter(|p| occupies(p))
            .filter_map(|p| p.metadata.uid.as_deref())
            .collect();
        self.placed.retain(|uid| bound.contains(uid));
    }

    /// When the next queued write may start (real time), if one is queued and there is room.
    fn next_write(&mut self) -> Option<Instant> {
        if self.in_flight.len() >= CONCURRENT_WRITES {
            return None;
        }
        let asked = self.writes.next_asked()?;
        Some(Instant::now() + self.shared.real_until(self.writes.pace.slot(asked)))
    }

    /// Starts the queued writes whose slot has come, while there is room.
    fn start_writes(&mut self) {
        // Wake-ups land within a timer tick of the slot.
        let now =
            self.shared.clock.now() + self.shared.clock.to_simulated(Duration::from_millis(1));
        while self.in_flight.len() < CONCURRENT_WRITES {
            let Some(asked) = self.writes.next_asked() else {
                break;
            };
            let slot = self.writes.pace.slot(asked);
            if slot > now {
                break;
            }
            let Some(job) = self.writes.pop() else { break };
            if let Some(write) = self.start(job, slot) {
                self.writes.pace.take(slot);
                self.in_flight.push(write);
            }
        }
    }

    /// The request of a write; `None` when a verdict is no longer needed (the pod was bound,
    /// went, or already says so).
    fn start(&mut self, job: Job, slot: SystemTime) -> Option<BoxFuture<'static, Done>> {
        let client = self.shared.client.clone();
        match job {
            Job::Bind(bind) => {
                let binding = Binding {
                    metadata: ObjectMeta {
                        name: Some(bind.key.1.clone()),
                        uid: bind.uid.clone(),
                        ..Default::default()
                    },
                    target: ObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("Node".into()),
                        name: Some(bind.node.clone()),
                        ..Default::default()
                    },
                };
                Some(
                    async move {
                        let api: Api<Pod> = Api::namespaced(client, &bind.key.0);
                        let result = api
                            .create_subresource::<_, Status>(
                                "binding",
                                &bind.key.1,
                                &PostParams::default(),
                                &binding,
                            )
                            .await
                            .map(|_| ());
                        Done::Bound { bind, slot, result }
                    }
                    .boxed(),
                )
            }
            Job::Verdict(key, verdict) => {
                let pod = self.pods.get(&key.0, &key.1)?;
                if pod.metadata.uid != verdict.uid
                    || node_name_of(pod).is_some()
                    || !is_pending(pod)
                {
                    return None;
                }
                let patch = unschedulable_patch(pod, &verdict.message, self.shared.now())?;
                let uid = verdict.uid;
                let slot = (!verdict.refresh).then_some(slot);
                Some(
                    async move {
                        let api: Api<Pod> = Api::namespaced(client, &key.0);
                        let result = api
                            .patch_status(&key.1, &PatchParams::default(), &Patch::Merge(&patch))
                            .await;
                        Done::Marked {
                            key,
                            uid,
                            slot,
                            result,
                        }
                    }
                    .boxed(),
                )
            }
        }
    }

    /// Takes in a finished write; `true` when a pod should be tried again.
    fn finish(&mut self, done: Done) -> bool {
        match done {
            Done::Bound { bind, slot, result } => {
                self.shared
                    .lag
                    .record_since(LAG_SERIES, &self.shared.clock, slot);
                let (namespace, name) = &bind.key;
                let error = match result {
                    Ok(()) => {
                        tracing::debug!(pod = %name, %namespace, node = %bind.node, "bound");
                        return false;
                    }
                    Err(error) => error,
                };
                if matches!(api_code(&error), Some(404 | 409)) {
                    tracing::debug!(pod = %name, %namespace, %error, "binding refused; the pod changed meanwhile");
                } else {
                    tracing::warn!(pod = %name, %namespace, %error, "binding failed");
                }
                // Undo the assumption, unless the watch has brought newer news of the pod.
                let assumed = self.pods.get(namespace, name).is_some_and(|p| {
                    p.metadata.uid == bind.uid
                        && p.metadata.resource_version == bind.assumed_version
                });
                if assumed {
                    self.pods.forget(namespace, name);
                    self.pods.upsert(bind.original);
                }
                self.requeued.insert(bind.key);
                true
            }
            Done::Marked {
                key,
                uid,
                slot,
                result,
            } => {
                if let Some(slot) = slot {
                    self.shared
                        .lag
                        .record_since(LAG_SERIES, &self.shared.clock, slot);
                }
                match result {
                    Ok(updated) => {
                        tracing::debug!(pod = %key.1, namespace = %key.0, "unschedulable");
                        if let Some(uid) = uid {
                            self.written.insert(uid, self.shared.clock.now());
                        }
                        self.pods.upsert(updated);
                        false
                    }
                    Err(error) if api_code(&error) == Some(404) => {
                        self.pods.forget(&key.0, &key.1);
                        false
                    }
                    Err(error) => {
                        tracing::warn!(pod = %key.1, namespace = %key.0, %error, "reporting the pod unschedulable failed");
                        self.requeued.insert(key);
                        true
                    }
                }
            }
        }
    }

    /// One scheduling pass over the pending pods something asked to look at again, highest
    /// priority and oldest first: bindings are assumed at once (later pods see them) and
    /// queued, as are verdicts for pods that fit nowhere. Returns whether it bound a pod.
    fn pass(&mut self) -> bool {
        let all = std::mem::take(&mut self.requeue_all);
        let constrained = std::mem::take(&mut self.requeue_constrained);
        let requeued = std::mem::take(&mut self.requeued);
        if !all && !constrained && requeued.is_empty() {
            return false;
        }
        let now = self.shared.clock.now();
        let decisions = self.decide(all, constrained, &requeued, now);
        let mut bound = false;
        for decision in decisions {
            match decision {
                Decision::Bind(pod, node) => {
                    self.assume(&pod, &node, now);
                    bound = true;
                }
                Decision::Verdict(key, verdict, first) => self.writes.verdict(key, verdict, first),
                Decision::Settled(key) => self.writes.forget_verdict(&key),
            }
        }
        bound
    }

    /// What the pass decides, pod by pod, against the nodes with what their pods take (each
    /// bound pod's share cached by uid and version across passes).
    fn decide(
        &mut self,
        all: bool,
        constrained: bool,
        requeued: &HashSet<Key>,
        now: SystemTime,
    ) -> Vec<Decision> {
        let mut pending: Vec<&Pod> = self
            .pods
            .iter()
            .filter(|pod| node_name_of(pod).is_none() && !is_terminal(pod) && is_pending(pod))
            .filter(|pod| {
                all || (constrained && depends_on_others(pod)) || requeued.contains(&key_of(pod))
            })
            .collect();
        if pending.is_empty() {
            // Nothing to place: the nodes' room is not worth adding up (a resync of a large,
            // settled cluster would otherwise cost a pass over every bound pod).
            return Vec::new();
        }
        let bases = &mut self.node_bases;
        let mut nodes: Vec<NodeInfo> = self
            .nodes
            .iter()
            .map(|node| {
                let name = node.metadata.name.as_deref().unwrap_or_default();
                NodeInfo::new(bases.read(name, &node.metadata, || NodeBase::of(node)))
            })
            .collect();
        let index: HashMap<String, usize> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        let placed = &mut self.placed;
        for pod in self.pods.iter().filter(|p| !is_terminal(p)) {
            let Some(i) = node_name_of(pod).and_then(|node| index.get(node)) else {
                continue;
            };
            let uid = pod.metadata.uid.as_deref().unwrap_or_default();
            nodes[*i].add(placed.read(uid, &pod.metadata, || PlacedPod::of(pod)));
        }
        let priority = |p: &Pod| p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
        pending.sort_by(|a, b| {
            priority(b).cmp(&priority(a)).then_with(|| {
                a.metadata
                    .creation_timestamp
                    .cmp(&b.metadata.creation_timestamp)
            })
        });
        let mut anti_affinity_placed = nodes
            .iter()
            .any(|n| n.pods.iter().any(|p| !p.anti_affinity.is_empty()));
        let mut decisions = Vec::new();
        // Pods of one controller with the same spec and labels are alike (kube-scheduler's
        // equivalence classes): they share spread counts, and where one fits nowhere so do the
        // others until a binding changes the nodes — which can only help pods that depend on
        // other pods, as a binding only takes room.
        let mut failed: HashMap<&str, (&Pod, String)> = HashMap::new();
        let mut spreads: HashMap<&str, (&Pod, Vec<Spread>)> = HashMap::new();
        let alike = |seen: &Pod, pod: &Pod| {
            seen.metadata.namespace == pod.metadata.namespace
                && seen.metadata.labels == pod.metadata.labels
                && seen.spec == pod.spec
        };
        for pod in pending {
            let class = super::controller_uid(&pod.metadata);
            let known = class
                .and_then(|c| failed.get(c))
                .filter(|(seen, _)| alike(seen, pod))
                .map(|(_, message)| message.clone());
            let outcome = match known {
                Some(message) => Err(message),
                None => {
                    let counted = class
                        .and_then(|c| spreads.get(c))
                        .filter(|(seen, _)| alike(seen, pod))
                        .map(|(_, s)| s.clone());
                    let counted = counted.unwrap_or_else(|| {
                        let fresh = self.spreads(pod, &nodes);
                        if let Some(class) = class {
                            spreads.insert(class, (pod, fresh.clone()));
                        }
                        fresh
                    });
                    self.place(pod, &nodes, counted, anti_affinity_placed)
                }
            };
            match outcome {
                Ok(chosen) => {
                    let share = Arc::new(PlacedPod::of(pod));
                    anti_affinity_placed |= !share.anti_affinity.is_empty();
                    for (_, class_spreads) in spreads.values_mut() {
                        for spread in class_spreads.iter_mut() {
                            spread.count(&share, &nodes[chosen], chosen);
                        }
                    }
                    nodes[chosen].add(share);
                    failed.retain(|_, (seen, _)| !depends_on_others(seen));
                    decisions.push(Decision::Bind(pod.clone(), nodes[chosen].name.clone()));
                }
                Err(message) => {
                    decisions.extend(self.verdict_for(pod, &message, now));
                    if let Some(class) = class {
                        failed.insert(class, (pod, message));
                    }
                }
            }
        }
        decisions
    }

    /// Assumes the pod bound to `node` in the cache and queues the binding.
    fn assume(&mut self, pod: &Pod, node: &str, now: SystemTime) {
        let key = key_of(pod);
        self.writes.forget_verdict(&key);
        let mut assumed = pod.clone();
        assumed.spec.get_or_insert_with(Default::default).node_name = Some(node.to_string());
        // The watch brings the bound pod later; its version is newer than the pod's was, so
        // older events cannot undo the assumption meanwhile.
        assumed.metadata.resource_version = version(pod).map(|v| (v + 1).to_string());
        let assumed_version = assumed.metadata.resource_version.clone();
        self.pods.upsert(assumed);
        self.writes.binds.push_back(Bind {
            key,
            uid: pod.metadata.uid.clone(),
            node: node.to_string(),
            original: pod.clone(),
            assumed_version,
            asked: now,
        });
    }

    /// What to do about a pod that fits nowhere: queue `PodScheduled=False`, reason
    /// `Unschedulable`, with `message`, unless the pod already says so; a changed message of a
    /// pod already unschedulable waits for [`VERDICT_REFRESH`] (unless a verdict is queued
    /// anyway, whose message it then updates).
    fn verdict_for(&self, pod: &Pod, message: &str, now: SystemTime) -> Option<Decision> {
        let key = key_of(pod);
        let current = scheduled_condition(pod);
        let unschedulable = current
            .is_some_and(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"));
        if unschedulable && current.is_some_and(|c| c.message.as_deref() == Some(message)) {
            return self
                .writes
                .is_queued(&key)
                .then_some(Decision::Settled(key));
        }
        let uid = pod.metadata.uid.clone();
        let recent = uid
            .as_deref()
            .and_then(|u| self.written.get(u))
            .is_some_and(|at| now.duration_since(*at).unwrap_or_default() < VERDICT_REFRESH);
        if unschedulable && recent && !self.writes.is_queued(&key) {
            // The resync pass gets back to it.
            return None;
        }
        Some(Decision::Verdict(
            key,
            Verdict {
                uid,
                message: message.to_string(),
                asked: now,
                refresh: unschedulable,
            },
            !unschedulable,
        ))
    }
}

/// A pod's resource version as a number.
fn version(pod: &Pod) -> Option<u64> {
    pod.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
}

/// The pod's `PodScheduled` condition.
fn scheduled_condition(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::PodCondition> {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
}

/// The status patch that says `PodScheduled=False`, reason `Unschedulable`, with `message`
/// (keeping the transition time of a condition already `False`); `None` if it already says so.
fn unschedulable_patch(pod: &Pod, message: &str, now: Time) -> Option<serde_json::Value> {
    let conditions = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let current = conditions.iter().find(|c| c.type_ == "PodScheduled");
    if current.is_some_and(|c| {
        c.status == "False"
            && c.reason.as_deref() == Some("Unschedulable")
            && c.message.as_deref() == Some(message)
    }) {
        return None;
    }
    let since = current
        .filter(|c| c.status == "False")
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or(now);
    let mut next: Vec<serde_json::Value> = conditions
        .iter()
        .filter(|c| c.type_ != "PodScheduled")
        .map(|c| serde_json::to_value(c).unwrap_or_default())
        .collect();
    next.push(json!({
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
        "lastProbeTime": null,
        "lastTransitionTime": since,
    }));
    Some(json!({"status": {"conditions": next}}))
}

/// Whether the default scheduler should place this unbound pod now.
fn is_pending(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return false;
    };
    let scheduler = spec
        .scheduler_name
        .as_deref()
        .unwrap_or(DEFAULT_SCHEDULER_NAME);
    scheduler == DEFAULT_SCHEDULER_NAME
        && !is_deleting(pod)
        && spec
            .scheduling_gates
            .as_ref()
            .is_none_or(|gates| gates.is_empty())
}

#[cfg(test)]
mod tests;
