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
    DEFAULT_SCHEDULER_NAME, Shared, Trigger, api_code, is_deleting, is_terminal, labels_of,
    node_name_of, pod_requests, pod_tolerations, scheduling_taints, selector_matches, watch,
};

/// Runs the scheduler until the task is aborted.
pub(crate) async fn run(shared: Arc<Shared>) {
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
    shared: Arc<Shared>,
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
    /// What each bound pod takes on its node (by uid), with the version it was read from.
    placed: HashMap<String, (Option<String>, Arc<PlacedPod>)>,
}

/// A pod bound to a node, as far as affinity rules care.
struct PlacedPod {
    requests: Resources,
    ports: Vec<HostPort>,
    namespace: String,
    labels: BTreeMap<String, String>,
    anti_affinity: Vec<PodAffinityTerm>,
    deleting: bool,
}

impl PlacedPod {
    fn of(pod: &Pod) -> Self {
        Self {
            requests: pod_requests(pod),
            ports: host_ports(pod),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            labels: labels_of(&pod.metadata),
            anti_affinity: required_terms(pod, false),
            deleting: is_deleting(pod),
        }
    }
}

/// A host port a pod uses.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HostPort {
    ip: String,
    protocol: String,
    port: i32,
}

impl HostPort {
    fn conflicts(&self, other: &HostPort) -> bool {
        let wildcard = |ip: &str| ip.is_empty() || ip == "0.0.0.0";
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || wildcard(&self.ip) || wildcard(&other.ip))
    }
}

/// One node as the scheduler sees it.
struct NodeInfo {
    name: String,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    unschedulable: bool,
    allocatable: Resources,
    requested: Resources,
    ports: Vec<HostPort>,
    pods: Vec<Arc<PlacedPod>>,
}

impl NodeInfo {
    fn new(node: &Node) -> Self {
        Self {
            name: node.metadata.name.clone().unwrap_or_default(),
            labels: labels_of(&node.metadata),
            taints: scheduling_taints(node),
            unschedulable: node
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false),
            allocatable: super::resources_of(
                node.status.as_ref().and_then(|s| s.allocatable.as_ref()),
            ),
            requested: Resources::new(),
            ports: Vec::new(),
            pods: Vec::new(),
        }
    }

    fn add(&mut self, placed: Arc<PlacedPod>) {
        self.requested = self.requested.saturating_add(&placed.requests);
        self.ports.extend(placed.ports.iter().cloned());
        self.pods.push(placed);
    }

    /// kube-scheduler's MostAllocated score: the mean share of CPU and memory in use with the pod.
    fn score(&self, requests: &Resources) -> u64 {
        let share = |name: &str| {
            let allocatable = self.allocatable.get(name);
            if allocatable == 0 {
                return 0;
            }
            let used = self.requested.get(name).saturating_add(requests.get(name));
            (u128::from(used.min(allocatable)) * 100 / u128::from(allocatable)) as u64
        };
        (share(CPU) + share(MEMORY)) / 2
    }
}

/// The host ports of a pod's containers (and sidecars).
fn host_ports(pod: &Pod) -> Vec<HostPort> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
    spec.containers
        .iter()
        .chain(sidecars)
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            p.host_port.filter(|port| *port > 0).map(|port| HostPort {
                ip: p.host_ip.clone().unwrap_or_default(),
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_string()),
                port,
            })
        })
        .collect()
}

/// The pod's required pod-affinity (`anti == false`: anti-affinity) terms.
fn required_terms(pod: &Pod, affinity: bool) -> Vec<PodAffinityTerm> {
    let affinity_spec = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    let terms = if affinity {
        affinity_spec
            .and_then(|a| a.pod_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
    } else {
        affinity_spec
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
    };
    terms.cloned().unwrap_or_default()
}

/// Whether a node selector requirement holds for a value (`None`: the label is absent),
/// evaluated with joinery-core's requirement algebra.
fn requirement_holds(expression: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let Ok(operator) = expression.operator.parse::<Operator>() else {
        return false;
    };
    let Ok(requirement) = Requirement::new(
        expression.key.as_str(),
        operator,
        expression.values.iter().flatten().map(String::as_str),
    ) else {
        return false;
    };
    match value {
        Some(value) => requirement.has(value),
        None => requirement.accepts_absent(),
    }
}

fn term_matches(term: &NodeSelectorTerm, labels: &BTreeMap<String, String>, name: &str) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    expressions
        .iter()
        .all(|e| requirement_holds(e, labels.get(&e.key).map(String::as_str)))
        && fields
            .iter()
            .all(|f| f.key == "metadata.name" && requirement_holds(f, Some(name)))
}

/// Whether the pod's nodeSelector and required node affinity admit a node.
pub(crate) fn node_affinity_matches(
    pod: &Pod,
    labels: &BTreeMap<String, String>,
    name: &str,
) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    if !spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
    {
        return false;
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    required.is_none_or(|selector| {
        selector
            .node_selector_terms
            .iter()
            .any(|term| term_matches(term, labels, name))
    })
}

/// The first `NoSchedule`/`NoExecute` taint the tolerations do not tolerate.
pub(crate) fn untolerated<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| t.effect != TaintEffect::PreferNoSchedule)
        .find(|t| !tolerated_by(t, tolerations))
}

/// A prepared `DoNotSchedule` topology spread constraint.
#[derive(Clone)]
struct Spread {
    key: String,
    max_skew: i64,
    self_match: i64,
    /// Matching pods per domain of the eligible nodes.
    counts: HashMap<String, i64>,
    minimum: i64,
    min_domains: usize,
    /// The pods that count: of this namespace, matching this selector.
    namespace: String,
    selector: Option<LabelSelector>,
    /// Whether each node (by index) counts.
    eligible: Vec<bool>,
}

impl Spread {
    /// Counts a pod just placed on node `index`.
    fn count(&mut self, placed: &PlacedPod, node: &NodeInfo, index: usize) {
        if !self.eligible.get(index).copied().unwrap_or(false)
            || placed.deleting
            || placed.namespace != self.namespace
            || !selector_matches(self.selector.as_ref(), &placed.labels)
        {
            return;
        }
        if let Some(domain) = node.labels.get(&self.key) {
            *self.counts.entry(domain.clone()).or_default() += 1;
            self.minimum = if self.counts.len() < self.min_domains {
                0
            } else {
                self.counts.values().copied().min().unwrap_or(0)
            };
        }
    }
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

/// Everything about the pod being placed that does not depend on the node.
struct Candidate<'a> {
    pod: &'a Pod,
    namespace: String,
    labels: BTreeMap<String, String>,
    requests: Resources,
    tolerations: Vec<Toleration>,
    ports: Vec<HostPort>,
    spread_keys: Vec<String>,
    spreads: Vec<Spread>,
    /// Topology pairs where a pod with anti-affinity against this pod runs.
    forbidden_by_existing: HashSet<(String, String)>,
    affinity_terms: Vec<PodAffinityTerm>,
    /// For the affinity terms: topology pairs holding pods that match all of them.
    affinity_counts: HashMap<(String, String), i64>,
    anti_affinity_terms: Vec<PodAffinityTerm>,
    /// For the anti-affinity terms: topology pairs holding a matching pod.
    anti_affinity_counts: HashMap<(String, String), i64>,
}

impl Scheduler {
    fn namespace_labels(&self, namespace: &str) -> BTreeMap<String, String> {
        self.namespaces
            .get("", namespace)
            .map(|n| labels_of(&n.metadata))
            .unwrap_or_default()
    }

    /// Whether a pod-affinity term written in `owner_namespace` selects a pod.
    fn term_selects(
        &self,
        term: &PodAffinityTerm,
        owner_namespace: &str,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> bool {
        let listed = term.namespaces.as_deref().unwrap_or_default();
        let namespace_ok = if listed.is_empty() && term.namespace_selector.is_none() {
            namespace == owner_namespace
        } else {
            listed.iter().any(|n| n == namespace)
                || term
                    .namespace_selector
                    .as_ref()
                    .is_some_and(|s| selector_matches(Some(s), &self.namespace_labels(namespace)))
        };
        namespace_ok && selector_matches(term.label_selector.as_ref(), labels)
    }

    /// The pod's `DoNotSchedule` spread constraints with the matching pods counted.
    fn spreads(&self, pod: &Pod, nodes: &[NodeInfo]) -> Vec<Spread> {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let labels = labels_of(&pod.metadata);
        let tolerations = pod_tolerations(pod);
        let constraints: Vec<_> = pod
            .spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.as_ref())
            .into_iter()
            .flatten()
            .filter(|c| c.when_unsatisfiable == "DoNotSchedule")
            .collect();
        let spread_keys: Vec<String> = constraints.iter().map(|c| c.topology_key.clone()).collect();
        constraints
            .iter()
            .map(|constraint| {
                let mut selector = constraint.label_selector.clone();
                if let Some(selector) = selector.as_mut() {
                    for key in constraint.match_label_keys.iter().flatten() {
                        if let Some(value) = labels.get(key) {
                            selector
                                .match_expressions
                                .get_or_insert_with(Vec::new)
                                .push(LabelSelectorRequirement {
                                    key: key.clone(),
                                    operator: "In".into(),
                                    values: Some(vec![value.clone()]),
                                });
                        }
                    }
                }
                let honor_affinity = constraint.node_affinity_policy.as_deref() != Some("Ignore");
                let honor_taints = constraint.node_taints_policy.as_deref() == Some("Honor");
                let mut counts: HashMap<String, i64> = HashMap::new();
                let mut eligible = vec![false; nodes.len()];
                for (index, node) in nodes.iter().enumerate() {
                    if !spread_keys.iter().all(|k| node.labels.contains_key(k))
                        || (honor_affinity && !node_affinity_matches(pod, &node.labels, &node.name))
                        || (honor_taints && untolerated(&node.taints, &tolerations).is_some())
                    {
                        continue;
                    }
                    eligible[index] = true;
                    let matching = node
                        .pods
                        .iter()
                        .filter(|p| {
                            !p.deleting
                                && p.namespace == namespace
                                && selector_matches(selector.as_ref(), &p.labels)
                        })
                        .count() as i64;
                    *counts
                        .entry(node.labels[&constraint.topology_key].clone())
                        .or_default() += matching;
                }
                let min_domains = constraint.min_domains.unwrap_or(1).max(1) as usize;
                let minimum = if counts.len() < min_domains {
                    0
                } else {
                    counts.values().copied().min().unwrap_or(0)
                };
                Spread {
                    key: constraint.topology_key.clone(),
                    max_skew: i64::from(constraint.max_skew),
                    self_match: i64::from(selector_matches(selector.as_ref(), &labels)),
                    counts,
                    minimum,
                    min_domains,
                    namespace: namespace.clone(),
                    selector,
                    eligible,
                }
            })
            .collect()
    }

    /// Everything about placing `pod` that does not depend on the node, with its spread
    /// constraints already counted; `anti_affinity_placed` tells whether any placed pod has
    /// required anti-affinity terms (else they need no looking at).
    fn candidate<'a>(
        &self,
        pod: &'a Pod,
        nodes: &[NodeInfo],
        spreads: Vec<Spread>,
        anti_affinity_placed: bool,
    ) -> Candidate<'a> {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let labels = labels_of(&pod.metadata);
        let tolerations = pod_tolerations(pod);
        let spread_keys: Vec<String> = spreads.iter().map(|s| s.key.clone()).collect();
        let mut forbidden_by_existing = HashSet::new();
        let affinity_terms = required_terms(pod, true);
        let anti_affinity_terms = required_terms(pod, false);
        let mut affinity_counts: HashMap<(String, String), i64> = HashMap::new();
        let mut anti_affinity_counts: HashMap<(String, String), i64> = HashMap::new();
        let look =
            anti_affinity_placed || !affinity_terms.is_empty() || !anti_affinity_terms.is_empty();
        for node in nodes.iter().filter(|_| look) {
            for placed in &node.pods {
                for term in &placed.anti_affinity {
                    if let Some(value) = node.labels.get(&term.topology_key)
                        && self.term_selects(term, &placed.namespace, &namespace, &labels)
                    {
                        forbidden_by_existing.insert((term.topology_key.clone(), value.clone()));
                    }
                }
                if !affinity_terms.is_empty()
                    && affinity_terms.iter().all(|t| {
                        self.term_selects(t, &namespace, &placed.namespace, &placed.labels)
                    })
                {
                    for term in &affinity_terms {
                        if let Some(value) = node.labels.get(&term.topology_key) {
                            *affinity_counts
                                .entry((term.topology_key.clone(), value.clone()))
                                .or_default() += 1;
                        }
                    }
                }
                for term in &anti_affinity_terms {
                    if let Some(value) = node.labels.get(&term.topology_key)
                        && self.term_selects(term, &namespace, &placed.namespace, &placed.labels)
                    {
                        *anti_affinity_counts
                            .entry((term.topology_key.clone(), value.clone()))
                            .or_default() += 1;
                    }
                }
            }
        }
        Candidate {
            pod,
            requests: pod_requests(pod),
            ports: host_ports(pod),
            namespace,
            labels,
            tolerations,
            spread_keys,
            spreads,
            forbidden_by_existing,
            affinity_terms,
            affinity_counts,
            anti_affinity_terms,
            anti_affinity_counts,
        }
    }

    /// The reasons a node cannot take the pod (empty: it can), from the first failing filter.
    fn filter(&self, candidate: &Candidate<'_>, node: &NodeInfo) -> Vec<String> {
        // NodeUnschedulable.
        let cordon =
            Taint::without_value("node.kubernetes.io/unschedulable", TaintEffect::NoSchedule);
        if node.unschedulable && !tolerated_by(&cordon, &candidate.tolerations) {
            return vec!["node(s) were unschedulable".into()];
        }
        // TaintToleration.
        if let Some(taint) = untolerated(&node.taints, &candidate.tolerations) {
            return vec![format!(
                "node(s) had untolerated taint {{{}: {}}}",
                taint.key, taint.value
            )];
        }
        // NodeAffinity.
        if !node_affinity_matches(candidate.pod, &node.labels, &node.name) {
            return vec!["node(s) didn't match Pod's node affinity/selector".into()];
        }
        // NodePorts.
        if candidate
            .ports
            .iter()
            .any(|wanted| node.ports.iter().any(|used| used.conflicts(wanted)))
        {
            return vec!["node(s) didn't have free ports for the requested pod ports".into()];
        }
        // NodeResourcesFit.
        let free = node.allocatable.saturating_sub(&node.requested);
        let short: Vec<String> = candidate
            .requests
            .exceeding(&free)
            .into_iter()
            .map(|name| {
                if name == PODS {
                    "Too many pods".to_string()
                } else {
                    format!("Insufficient {name}")
                }
            })
            .collect();
        if !short.is_empty() {
            return short;
        }
        // PodTopologySpread.
        if !candidate
            .spread_keys
            .iter()
            .all(|k| node.labels.contains_key(k))
        {
            return vec![
                "node(s) didn't match pod topology spread constraints (missing required label)"
                    .into(),
            ];
        }
        for spread in &candidate.spreads {
            let domain = &node.labels[&spread.key];
            let matching = spread.counts.get(domain).copied().unwrap_or(0);
            if matching + spread.self_match - spread.minimum > spread.max_skew {
                return vec!["node(s) didn't match pod topology spread constraints".into()];
            }
        }
        // InterPodAffinity: the pod's affinity, its anti-affinity, then existing pods' anti-affinity.
        let pair = |key: &str| {
            node.labels
                .get(key)
                .map(|value| (key.to_string(), value.clone()))
        };
        if !candidate.affinity_terms.is_empty() {
            let mut pods_exist = true;
            for term in &candidate.affinity_terms {
                match pair(&term.topology_key) {
                    Some(p) => {
                        pods_exist &= candidate.affinity_counts.get(&p).copied().unwrap_or(0) > 0
                    }
                    None => return vec!["node(s) didn't match pod affinity rules".into()],
                }
            }
            // The first pod of a group whose members attract each other may go anywhere.
            let first_of_its_kind = candidate.affinity_counts.is_empty()
                && candidate.affinity_terms.iter().all(|t| {
                    self.term_selects(
                        t,
                        &candidate.namespace,
                        &candidate.namespace,
                        &candidate.labels,
                    )
                });
            if !pods_exist && !first_of_its_kind {
                return vec!["node(s) didn't match pod affinity rules".into()];
            }
        }
        if candidate.anti_affinity_terms.iter().any(|term| {
            pair(&term.topology_key)
                .is_some_and(|p| candidate.anti_affinity_counts.get(&p).copied().unwrap_or(0) > 0)
        }) {
            return vec!["node(s) didn't match pod anti-affinity rules".into()];
        }
        if candidate
            .forbidden_by_existing
            .iter()
            .any(|(key, value)| node.labels.get(key) == Some(value))
        {
            return vec!["node(s) didn't satisfy existing pods anti-affinity rules".into()];
        }
        Vec::new()
    }

    /// Picks a node for the pod, or explains in kube-scheduler's words why there is none.
    fn place(
        &self,
        pod: &Pod,
        nodes: &[NodeInfo],
        spreads: Vec<Spread>,
        anti_affinity_placed: bool,
    ) -> Result<usize, String> {
        if nodes.is_empty() {
            return Err("no nodes available to schedule pods".into());
        }
        let candidate = self.candidate(pod, nodes, spreads, anti_affinity_placed);
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        let mut best: Option<(u64, usize)> = None;
        for (index, node) in nodes.iter().enumerate() {
            let failed = self.filter(&candidate, node);
            if failed.is_empty() {
                let score = node.score(&candidate.requests);
                if best.is_none_or(|(top, _)| score > top) {
                    best = Some((score, index));
                }
            } else {
                for reason in failed {
                    *reasons.entry(reason).or_default() += 1;
                }
            }
        }
        if let Some((_, index)) = best {
            return Ok(index);
        }
        let mut histogram: Vec<String> = reasons
            .iter()
            .map(|(reason, count)| format!("{count} {reason}"))
            .collect();
        histogram.sort();
        Err(format!(
            "0/{} nodes are available: {}.",
            nodes.len(),
            histogram.join(", ")
        ))
    }

    fn new(shared: Arc<Shared>) -> Self {
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
            placed: HashMap::new(),
        }
    }

    /// Applies a pod event; `true` when a pass should look at something again.
    fn pod_event(&mut self, event: watcher::Event<Pod>) -> bool {
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
        self.nodes.apply(event);
        self.requeue_all |= changed;
        changed
    }

    /// Forgets what is kept about pods that are gone: when verdicts were written for pods no
    /// longer pending, what pods no longer bound took.
    fn forget_old_verdicts(&mut self) {
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
        self.placed.retain(|uid, _| bound.contains(uid.as_str()));
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
        let mut nodes: Vec<NodeInfo> = self.nodes.iter().map(NodeInfo::new).collect();
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
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let share = match placed.get(&uid) {
                Some((version, share)) if *version == pod.metadata.resource_version => {
                    share.clone()
                }
                _ => {
                    let share = Arc::new(PlacedPod::of(pod));
                    placed.insert(uid, (pod.metadata.resource_version.clone(), share.clone()));
                    share
                }
            };
            nodes[*i].add(share);
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
mod tests {
    use super::*;

    #[test]
    fn node_selector_requirements_use_the_core_algebra() {
        let requirement = |operator: &str, values: &[&str]| NodeSelectorRequirement {
            key: "k".into(),
            operator: operator.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        };
        assert!(requirement_holds(
            &requirement("In", &["a", "b"]),
            Some("a")
        ));
        assert!(!requirement_holds(&requirement("In", &["a"]), None));
        assert!(requirement_holds(&requirement("NotIn", &["a"]), None));
        assert!(requirement_holds(&requirement("Exists", &[]), Some("x")));
        assert!(requirement_holds(&requirement("DoesNotExist", &[]), None));
        assert!(requirement_holds(&requirement("Gt", &["3"]), Some("4")));
        assert!(!requirement_holds(&requirement("Gt", &["3"]), Some("3")));
        assert!(!requirement_holds(&requirement("Lt", &["3"]), None));
        assert!(!requirement_holds(
            &requirement("Sometimes", &[]),
            Some("x")
        ));
    }

    fn pod(value: serde_json::Value) -> Pod {
        serde_json::from_value(value).unwrap()
    }

    fn pending(version: &str) -> Pod {
        pod(
            json!({"metadata": {"name": "p", "namespace": "d", "uid": "u1", "resourceVersion": version, "labels": {"app": "a"}},
                   "spec": {"containers": [{"name": "c"}]}}),
        )
    }

    fn bound(version: &str, labels: serde_json::Value) -> Pod {
        pod(
            json!({"metadata": {"name": "p", "namespace": "d", "uid": "u1", "resourceVersion": version, "labels": labels},
                   "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}}),
        )
    }

    #[test]
    fn a_change_requeues_only_what_it_may_let_fit() {
        // A new or changed pending pod is tried; its own write coming back is not.
        assert_eq!(pod_change(None, Some(&pending("1"))), Requeue::Pod);
        assert_eq!(
            pod_change(Some(&pending("1")), Some(&pending("2"))),
            Requeue::Pod
        );
        assert_eq!(
            pod_change(Some(&pending("2")), Some(&pending("2"))),
            Requeue::Nothing
        );
        // A binding (or a relabelled bound pod) matters to spread and affinity only.
        assert_eq!(
            pod_change(Some(&pending("2")), Some(&bound("3", json!({"app": "a"})))),
            Requeue::Constrained
        );
        assert_eq!(
            pod_change(
                Some(&bound("3", json!({"app": "a"}))),
                Some(&bound("4", json!({"app": "a"})))
            ),
            Requeue::Nothing
        );
        assert_eq!(
            pod_change(
                Some(&bound("3", json!({"app": "a"}))),
                Some(&bound("4", json!({"app": "b"})))
            ),
            Requeue::Constrained
        );
        // Room freed: a bound pod gone or finished.
        assert_eq!(pod_change(Some(&bound("3", json!({}))), None), Requeue::All);
        let mut finished = bound("5", json!({}));
        finished.status = Some(serde_json::from_value(json!({"phase": "Succeeded"})).unwrap());
        assert_eq!(
            pod_change(Some(&bound("3", json!({}))), Some(&finished)),
            Requeue::All
        );
        assert_eq!(pod_change(Some(&pending("2")), None), Requeue::Nothing);
        // Another pod of the same name.
        let mut other = pending("9");
        other.metadata.uid = Some("u2".into());
        assert_eq!(pod_change(Some(&pending("2")), Some(&other)), Requeue::All);
        // Pods for another scheduler are left alone.
        let mut foreign = pending("3");
        foreign.spec.as_mut().unwrap().scheduler_name = Some("other".into());
        assert_eq!(
            pod_change(Some(&pending("2")), Some(&foreign)),
            Requeue::Nothing
        );
    }

    #[test]
    fn only_what_the_filters_read_of_a_node_requeues() {
        let node = |labels: serde_json::Value,
                    ready: &str,
                    annotations: serde_json::Value|
         -> Node {
            serde_json::from_value(json!({"metadata": {"name": "n", "labels": labels, "annotations": annotations},
                "status": {"conditions": [{"type": "Ready", "status": ready}], "allocatable": {"cpu": "4"}}}))
            .unwrap()
        };
        let booting = node(json!({"a": "1"}), "False", json!({}));
        let ready = node(json!({"a": "1"}), "True", json!({}));
        // A node that is not Ready takes no pod: its arrival and changes wait.
        assert!(!node_change(None, Some(&booting)));
        assert!(!node_change(
            Some(&booting),
            Some(&node(json!({"a": "2"}), "False", json!({})))
        ));
        // Turning Ready, a Ready node's filtered fields changing, or any node going: try again.
        assert!(node_change(Some(&booting), Some(&ready)));
        assert!(node_change(None, Some(&ready)));
        assert!(node_change(
            Some(&ready),
            Some(&node(json!({"a": "2"}), "True", json!({})))
        ));
        assert!(node_change(Some(&booting), None));
        assert!(!node_change(
            Some(&ready),
            Some(&node(json!({"a": "1"}), "True", json!({"note": "x"})))
        ));
    }

    #[test]
    fn writes_go_bindings_first_then_first_verdicts_then_refreshes() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
        let key = |name: &str| ("d".to_string(), name.to_string());
        let verdict = |message: &str| Verdict {
            uid: None,
            message: message.into(),
            asked: t0,
            refresh: false,
        };
        let mut writes = Writes::new(super::super::lag::Pace::new(100.0, 1));
        writes.verdict(key("old"), verdict("0/1 nodes"), false);
        writes.verdict(key("new"), verdict("no nodes"), true);
        writes.verdict(key("gone"), verdict("no nodes"), true);
        writes.forget_verdict(&key("gone"));
        // A newer decision replaces the queued message, keeping its place.
        writes.verdict(key("old"), verdict("0/2 nodes"), false);
        writes.binds.push_back(Bind {
            key: key("bind"),
            uid: None,
            node: "n1".into(),
            original: pending("1"),
            assumed_version: Some("2".into()),
            asked: t0 + Duration::from_secs(1),
        });
        assert_eq!(writes.next_asked(), Some(t0 + Duration::from_secs(1)));
        let order: Vec<String> = std::iter::from_fn(|| writes.pop())
            .map(|job| match job {
                Job::Bind(bind) => format!("bind {}", bind.key.1),
                Job::Verdict(key, verdict) => format!("{}: {}", key.1, verdict.message),
            })
            .collect();
        assert_eq!(order, vec!["bind bind", "new: no nodes", "old: 0/2 nodes"]);
        assert_eq!(writes.next_asked(), None);
    }

    #[test]
    fn the_unschedulable_patch_keeps_the_transition_time_and_is_not_repeated() {
        let now = Time(k8s_openapi::jiff::Timestamp::from_second(2_000).unwrap());
        let fresh = pending("1");
        let patch = unschedulable_patch(&fresh, "no nodes available to schedule pods", now.clone())
            .unwrap();
        let condition = &patch["status"]["conditions"][0];
        assert_eq!(
            (condition["reason"].as_str(), condition["message"].as_str()),
            (
                Some("Unschedulable"),
                Some("no nodes available to schedule pods")
            )
        );
        let mut marked = fresh.clone();
        marked.status = Some(serde_json::from_value(json!({"conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "no nodes available to schedule pods", "lastTransitionTime": "1970-01-01T00:16:40Z"}]})).unwrap());
        assert!(
            unschedulable_patch(&marked, "no nodes available to schedule pods", now.clone())
                .is_none()
        );
        let refreshed =
            unschedulable_patch(&marked, "0/1 nodes are available: 1 Insufficient cpu.", now)
                .unwrap();
        assert_eq!(
            refreshed["status"]["conditions"][0]["lastTransitionTime"],
            "1970-01-01T00:16:40Z"
        );
    }

    #[test]
    fn host_ports_conflict_on_wildcards() {
        let port = |ip: &str| HostPort {
            ip: ip.into(),
            protocol: "TCP".into(),
            port: 80,
        };
        assert!(port("").conflicts(&port("10.0.0.1")));
        assert!(port("10.0.0.1").conflicts(&port("10.0.0.1")));
        assert!(!port("10.0.0.1").conflicts(&port("10.0.0.2")));
        assert!(!port("").conflicts(&HostPort {
            protocol: "UDP".into(),
            ..port("")
        }));
    }
}
