//! The provisioning pass: queue, placement on existing nodes, open claims and new claims,
//! then finalization of the claims.

use std::borrow::Cow;
use std::cell::RefCell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::hash::BuildHasherDefault;
use std::rc::Rc;

use crate::hash::FxHasher;
use crate::instance_type::{InstanceType, MinValuesError, satisfies_min_values};
use crate::labels::{
    CAPACITY_OVERLAY_APPLIED_ANNOTATION, CAPACITY_TYPE_LABEL, HOSTNAME_LABEL, INITIALIZED_LABEL,
    INSTANCE_TYPE_LABEL, LabelPolicy, NODECLAIM_MIN_VALUES_RELAXED_ANNOTATION, NODEPOOL_LABEL,
    PRICE_OVERLAY_APPLIED_ANNOTATION, REGISTERED_LABEL,
};
use crate::nodeclaim::{MAX_INSTANCE_TYPES, NodeClaimSpec, NodeClaimTemplate};
use crate::requirements::{KeySet, NO_KEYS, Requirement, Requirements};
use crate::resources::{NODES, ResourceKey, Resources};
use crate::taints::{Taint, TaintEffect, Toleration, TolerationOperator};

use super::catalog::{OfferingTable, TypeClasses};
use super::constraints::{
    HostPort, MinValuesPolicy, PreferencePolicy, WhenUnsatisfiable, attach, exceeds_attach_limits,
    port_conflict,
};
use super::daemons::{Daemon, alternatives, tolerated, tolerates};
use super::open_claims::OpenClaims;
use super::pricing::{FallbackPrice, no_fallback, order_by_price};
use super::render;
use super::topology::{self, Constraints, Registered, Topology, Violation};
use super::types::{
    ExistingNode, NewNodeClaim, NodePool, Placement, PodPlacement, SchedulingContext,
    SchedulingInput, SchedulingResult,
};

/// Reason given to every pod that fits no existing node when there is no NodePool at all.
const NO_NODEPOOLS: &str = "no dynamic nodepools found";

/// Runs one provisioning pass over `input`, with no pods known to be bound to the nodes and
/// upstream's default preference policy (see [`schedule_with_context`]).
///
/// Pods are tried in upstream's order (CPU request descending, then memory descending, then
/// creation time, then UID; then key, for total determinism). Each pod goes to the first of:
/// an existing node (initialized nodes first, then by name) whose taints the pod tolerates,
/// whose host ports are free, whose remaining allocatable (after reserving DaemonSet pods not
/// yet running there) holds the pod, whose labels are strictly compatible with the pod's and
/// where its volume and topology constraints hold; a NodeClaim opened earlier in this pass
/// (fewest pods first) that can still take it; a new NodeClaim from the first NodePool
/// (weight descending, then name descending, as upstream) that can take it. A pod that fits
/// nowhere is retried after the others, with one preference relaxed each time (upstream's
/// order: the first of several required node-affinity terms, the heaviest preferred pod
/// affinity, then pod anti-affinity, then node affinity term, one `ScheduleAnyway` spread
/// constraint, finally a toleration for PreferNoSchedule taints), until a full round makes no
/// progress.
///
/// Prices of offerings without a price stay unknown; see [`schedule_with_fallback_price`].
pub fn schedule(input: &SchedulingInput) -> SchedulingResult {
    schedule_with_context(input, &SchedulingContext::default(), None)
}

/// [`schedule`] with a fallback price: when an offering has no price, `fallback` is asked
/// for one before the claim's instance types are ordered; offerings for which it also returns
/// `None` stay unknown, and instance types without any priced offering are listed after all
/// priced ones, smallest machine first. Prices only order the instance types of new claims;
/// they never decide where pods go.
pub fn schedule_with_fallback_price(
    input: &SchedulingInput,
    fallback: FallbackPrice<'_>,
) -> SchedulingResult {
    schedule_with_context(input, &SchedulingContext::default(), Some(fallback))
}

/// [`schedule`] knowing the cluster's bound pods (their labels count for topology spread and
/// pod affinity, their required anti-affinity keeps pods they select away, their host ports
/// are taken) and the preference policy; `fallback` as in [`schedule_with_fallback_price`].
pub fn schedule_with_context(
    input: &SchedulingInput,
    context: &SchedulingContext,
    fallback: Option<FallbackPrice<'_>>,
) -> SchedulingResult {
    Scheduler::new(input, context).run(fallback.unwrap_or(&no_fallback))
}

/// A NodePool prepared for the pass.
struct Pool<'a> {
    input: &'a NodePool,
    /// Template requirements plus the nodepool label and the simulation-only
    /// registered/initialized labels (so DaemonSets selecting them are counted).
    requirements: Requirements,
    /// Indices of the instance types compatible with the pool on their own.
    candidates: Vec<usize>,
    /// DaemonSet requests per instance type index (filled for candidates).
    type_overhead: Vec<Resources>,
    /// What each instance type has free once its DaemonSet overhead is reserved (see
    /// [`Free`]), by index.
    type_free: Vec<Option<Free>>,
    /// Host ports of the DaemonSets per instance type index (filled for candidates).
    type_ports: Vec<Vec<HostPort>>,
    /// DaemonSet requests for the pool regardless of instance type, as reported in reasons.
    overhead: Resources,
    /// Remaining limits, reduced as claims are opened.
    remaining: Option<BTreeMap<String, i128>>,
    /// The candidates within the remaining limits as last filtered (see
    /// [`Pool::new_claim_options`]).
    within_limits: Option<WithinLimits>,
    /// The instance types' offerings, numbered for mask checks.
    offerings: OfferingTable,
    /// The instance types' requirements grouped by class.
    classes: TypeClasses,
}

impl Pool<'_> {
    fn name(&self) -> &str {
        &self.input.template.nodepool
    }

    fn instance_type(&self, index: usize) -> &InstanceType {
        &self.input.instance_types[index]
    }

    fn taints(&self) -> &[Taint] {
        &self.input.template.taints
    }

    /// Whether instance type `t` holds pods requesting `requests` besides its DaemonSet
    /// overhead.
    fn fits(&self, t: usize, requests: &Resources) -> bool {
        self.fits_plain(t, requests, no_extended(requests))
    }

    /// [`fits`](Self::fits), told whether `requests` asks for no extended resource (`plain`),
    /// for loops over many types with the same requests.
    fn fits_plain(&self, t: usize, requests: &Resources, plain: bool) -> bool {
        match &self.type_free[t] {
            Some(free) if plain => free.holds(requests),
            _ => fits_sum(
                &[requests, &self.type_overhead[t]],
                self.instance_type(t).allocatable(),
            ),
        }
    }

    /// Counts instance type `t` holding `requests` (besides its overhead) in `room`.
    fn widen(&self, room: &mut Room, t: usize, requests: &Resources) {
        match &self.type_free[t] {
            Some(free) => room.widen_free(free, requests),
            None => room.widen(
                self.instance_type(t).allocatable(),
                &self.type_overhead[t],
                requests,
            ),
        }
    }

    /// The instance types a new claim may use: the candidates whose capacity fits the
    /// remaining limits, in candidate order. Limits only shrink during a pass, so a type
    /// once out stays out: the list is kept between claims and filtered again only when a
    /// limit falls below the largest capacity it still holds (or no node is left).
    fn new_claim_options(&mut self) -> Vec<usize> {
        let Some(remaining) = &self.remaining else {
            return self.candidates.clone();
        };
        let limits = resolved_limits(remaining);
        let types = &self.input.instance_types;
        let within = self.within_limits.get_or_insert_with(|| WithinLimits {
            options: self.candidates.clone(),
            largest: vec![i128::MAX; limits.len()],
        });
        if limits
            .iter()
            .zip(&within.largest)
            .any(|((_, left), largest)| largest > left)
        {
            within
                .options
                .retain(|&t| within_limits(&types[t], &limits));
            within.largest = limits
                .iter()
                .map(|(key, _)| match key {
                    // One node per claim, whichever type.
                    None => 1,
                    Some(key) => within
                        .options
                        .iter()
                        .map(|&t| i128::from(types[t].capacity().amount(*key)))
                        .max()
                        .unwrap_or(0),
                })
                .collect();
        }
        within.options.clone()
    }
}

/// A pool's candidates within its remaining limits, and per limited resource (in the order
/// of the remaining limits) the largest amount one of them would take from it.
struct WithinLimits {
    options: Vec<usize>,
    largest: Vec<i128>,
}

/// An existing node during the pass.
struct Node<'a> {
    input: &'a ExistingNode,
    /// Labels (plus the hostname), narrowed by the pods placed in this pass.
    requirements: Requirements,
    /// Allocatable minus what bound pods request.
    available: Resources,
    /// DaemonSet pods still to come plus the pods placed in this pass.
    reserved: Resources,
    /// Host ports of the bound pods and of the pods placed in this pass.
    ports: Vec<HostPort>,
    /// CSI volumes attached (per driver) for the bound pods and the pods placed in this pass.
    volumes: BTreeMap<String, BTreeSet<String>>,
}

/// A NodeClaim being filled.
struct Claim {
    pool: usize,
    /// The placeholder hostname (a topology domain once the claim holds a pod).
    hostname: String,
    /// The hostname's number in the topology ([`Topology::host_slot`]).
    slot: u32,
    /// The domains the claim is narrowed to, by topology key ([`Topology::pin`]).
    pins: Vec<u32>,
    requirements: Requirements,
    /// Instance type indices (into the pool's list) that can still hold every pod.
    options: Vec<usize>,
    /// Summed pod requests (DaemonSet overhead is added per instance type when filtering and
    /// once at finalization).
    requests: Resources,
    /// The most CPU, memory and pods any remaining option still has free (see
    /// [`Room::admits`]).
    room: Room,
    /// Host ports of the pods placed on the claim.
    ports: Vec<HostPort>,
    pods: Vec<usize>,
    /// Whether minValues were lowered for it (BestEffort).
    min_values_relaxed: bool,
    /// The topology groups its hostname is registered in.
    registered: Registered,
}

/// A pod during the pass: its constraints as relaxation leaves them.
struct Pod {
    /// Placement alternatives: node selector ∩ each required affinity term.
    alternatives: Vec<Requirements>,
    /// The alternative in use (earlier ones were relaxed away).
    current: usize,
    /// Remaining preferred node-affinity terms (indices), heaviest first.
    preferred_affinity: Vec<usize>,
    /// Remaining preferred pod-affinity terms (indices), heaviest first.
    preferred_pod_affinity: Vec<usize>,
    /// Remaining preferred pod-anti-affinity terms (indices), heaviest first.
    preferred_pod_anti_affinity: Vec<usize>,
    /// Remaining topology spread constraints (indices).
    spreads: Vec<usize>,
    /// Whether relaxation has added a toleration for every PreferNoSchedule taint.
    tolerate_prefer_no_schedule: bool,
    /// What a node must satisfy: the alternative in use and, unless preferences are
    /// ignored, the heaviest remaining preferred node-affinity term.
    requirements: Requirements,
}

impl Pod {
    /// The required node constraints only (what topology domains are computed from).
    fn strict(&self) -> &Requirements {
        &self.alternatives[self.current]
    }
}

/// Indices of weighted items, heaviest first (stable for equal weights).
fn by_weight<T>(items: &[T], weight: impl Fn(&T) -> i32) -> Vec<usize> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| Reverse(weight(&items[i])));
    order
}

/// The toleration relaxation adds: every PreferNoSchedule taint.
fn prefer_no_schedule_toleration() -> Toleration {
    Toleration::exists("", Some(TaintEffect::PreferNoSchedule))
}

/// The most CPU, memory and pods any of a claim's remaining instance types has free (after
/// its DaemonSet overhead and the claim's pods): a pod asking more of one of them fits no
/// option, so the claim is skipped without filtering its types — exactly what the filter
/// would conclude, only cheaper (a full claim is otherwise tried by every later pod).
#[derive(Clone, Copy)]
struct Room {
    cpu_millis: u64,
    memory_bytes: u64,
    pods: u64,
}

impl Room {
    /// Before any pod: nothing is known, nothing is skipped.
    const UNKNOWN: Room = Room {
        cpu_millis: u64::MAX,
        memory_bytes: u64::MAX,
        pods: u64::MAX,
    };

    /// No option yet: room for nothing.
    const NONE: Room = Room {
        cpu_millis: 0,
        memory_bytes: 0,
        pods: 0,
    };

    /// Counts in an option with `allocatable` and DaemonSet `overhead` holding `requests`.
    fn widen(&mut self, allocatable: &Resources, overhead: &Resources, requests: &Resources) {
        let free = |allocatable: u64, overhead: u64, asked: u64| {
            allocatable.saturating_sub(overhead.saturating_add(asked))
        };
        self.cpu_millis = self.cpu_millis.max(free(
            allocatable.cpu_millis,
            overhead.cpu_millis,
            requests.cpu_millis,
        ));
        self.memory_bytes = self.memory_bytes.max(free(
            allocatable.memory_bytes,
            overhead.memory_bytes,
            requests.memory_bytes,
        ));
        self.pods = self
            .pods
            .max(free(allocatable.pods, overhead.pods, requests.pods));
    }

    /// Counts in an option with `free` room past its overhead holding `requests`.
    fn widen_free(&mut self, free: &Free, requests: &Resources) {
        self.cpu_millis = self
            .cpu_millis
            .max(free.cpu_millis.saturating_sub(requests.cpu_millis));
        self.memory_bytes = self
            .memory_bytes
            .max(free.memory_bytes.saturating_sub(requests.memory_bytes));
        self.pods = self.pods.max(free.pods.saturating_sub(requests.pods));
    }

    /// Whether some option may still hold a pod asking `requests` (false only when none can).
    fn admits(&self, requests: &Resources) -> bool {
        requests.cpu_millis <= self.cpu_millis
            && requests.memory_bytes <= self.memory_bytes
            && requests.pods <= self.pods
    }
}

/// What an instance type has free for pods once its DaemonSet overhead is reserved, so
/// that the usual check (a claim's requests, none of them extended) is four comparisons.
#[derive(Clone, Copy)]
struct Free {
    cpu_millis: u64,
    memory_bytes: u64,
    ephemeral_storage_bytes: u64,
    pods: u64,
}

impl Free {
    /// `None` where the shortcut would not say what [`fits_sum`] says: the overhead asks
    /// for an extended resource, does not fit on its own, or an amount is unbounded.
    fn of(allocatable: &Resources, overhead: &Resources) -> Option<Free> {
        let free = |allocatable: u64, overhead: u64| {
            (allocatable != u64::MAX)
                .then(|| allocatable.checked_sub(overhead))
                .flatten()
        };
        if !no_extended(overhead) {
            return None;
        }
        Some(Free {
            cpu_millis: free(allocatable.cpu_millis, overhead.cpu_millis)?,
            memory_bytes: free(allocatable.memory_bytes, overhead.memory_bytes)?,
            ephemeral_storage_bytes: free(
                allocatable.ephemeral_storage_bytes,
                overhead.ephemeral_storage_bytes,
            )?,
            pods: free(allocatable.pods, overhead.pods)?,
        })
    }

    /// Whether `requests` (with no extended resource) fit.
    fn holds(&self, requests: &Resources) -> bool {
        requests.cpu_millis <= self.cpu_millis
            && requests.memory_bytes <= self.memory_bytes
            && requests.ephemeral_storage_bytes <= self.ephemeral_storage_bytes
            && requests.pods <= self.pods
    }
}

/// Whether `resources` asks for no extended resource.
fn no_extended(resources: &Resources) -> bool {
    resources.extended().all(|(_, amount)| amount == 0)
}

/// Where a pod was put during the pass.
#[derive(Clone, Copy)]
enum Target {
    Node(usize),
    Claim(usize),
}

/// A pod accepted by a claim: the claim's new state.
struct Accepted {
    /// The claim's new requirements; `None` when the pod left them as they were.
    requirements: Option<Requirements>,
    options: Options,
    requests: Resources,
    /// The room the options leave with the pod on the claim.
    room: Room,
    /// Whether minValues had to be lowered to accept the pod (BestEffort).
    min_values_relaxed: bool,
}

/// How an accepted pod changes a claim's instance-type options.
enum Options {
    /// Exactly these remain.
    Filtered(Vec<usize>),
    /// The first `n` no longer hold the claim's pods and go; the rest stay unchecked: they
    /// are a superset of what holds the pods, narrowed to exactly that when the claim's
    /// requirements next change and when the claim is finalized.
    DropFirst(usize),
}

/// Why volume or topology constraints rule a node out; rendered only for reasons shown.
enum Failure {
    /// A topology group left no domain (described only when asked for).
    Topology(Option<Box<Violation>>),
    /// The volume alternative does not fit the node's requirements.
    Volume {
        node: Requirements,
        volume: Requirements,
    },
    /// The domains topology allows do not fit the node's requirements.
    Domains {
        node: Requirements,
        domains: Requirements,
    },
}

/// What an instance type offers under a set of requirements.
#[derive(Debug, Clone, Copy, Default)]
struct Facts {
    /// Its labels intersect the requirements.
    compatible: bool,
    /// It has an available offering compatible with the requirements.
    offering: bool,
}

/// Requirement sets (hostname removed) seen for one NodePool, with their types' [`Facts`].
type FactsCache = Vec<(Requirements, Rc<[Facts]>)>;

/// How many requirement sets per NodePool have their [`Facts`] remembered.
const FACTS_PER_POOL: usize = 64;

/// Whether two requirement sets are equal once the hostname key is set aside (instance types
/// and offerings never define it, so it cannot change their [`Facts`]).
fn same_but_hostname(a: &Requirements, b: &Requirements) -> bool {
    let mut x = a.iter().filter(|r| r.key() != HOSTNAME_LABEL);
    let mut y = b.iter().filter(|r| r.key() != HOSTNAME_LABEL);
    loop {
        match (x.next(), y.next()) {
            (None, None) => return true,
            (Some(r), Some(q)) if r == q => {}
            _ => return false,
        }
    }
}

/// The node's requirement on `key` intersected with the pod's (`None` when neither defines
/// it), without building the whole intersection.
fn layered<'r>(
    node: &'r Requirements,
    pod: &'r Requirements,
    key: &str,
) -> Option<Cow<'r, Requirement>> {
    match (node.get(key), pod.get(key)) {
        (Some(a), Some(b)) => Some(Cow::Owned(a.intersection(b))),
        (Some(a), None) => Some(Cow::Borrowed(a)),
        (None, Some(b)) => Some(Cow::Borrowed(b)),
        (None, None) => None,
    }
}

/// Which criteria at least one instance type met while filtering, for upstream's reasons.
#[derive(Default, Clone, Copy)]
struct FilterFlags {
    requirements: bool,
    fits: bool,
    offering: bool,
    requirements_and_fits: bool,
    requirements_and_offering: bool,
    fits_and_offering: bool,
}

impl FilterFlags {
    fn record(&mut self, compatible: bool, fits: bool, offering: bool) {
        self.requirements |= compatible;
        self.fits |= fits;
        self.offering |= offering;
        self.requirements_and_fits |= compatible && fits && !offering;
        self.requirements_and_offering |= compatible && offering && !fits;
        self.fits_and_offering |= fits && offering && !compatible;
    }

    /// Why no instance type was left, in upstream's words.
    fn reason(&self, min_values: Option<&MinValuesError>, requests: &Resources) -> String {
        if let Some(err) = min_values {
            return err.to_string();
        }
        let msg = match (self.requirements, self.fits, self.offering) {
            (false, false, false) => {
                "no instance type met the scheduling requirements or had enough resources or had a required offering"
            }
            (false, false, true) => {
                "no instance type met the scheduling requirements or had enough resources"
            }
            (false, true, false) => {
                "no instance type met the scheduling requirements or had a required offering"
            }
            (true, false, false) => {
                "no instance type had enough resources or had a required offering"
            }
            (false, true, true) => "no instance type met all requirements",
            (true, false, true) => {
                // One million cores: almost certainly `M` written for `m`.
                if requests.cpu_millis >= 1_000_000_000 {
                    return "no instance type has enough resources (CPU request >= 1 Million, m vs M typo?)".to_owned();
                }
                "no instance type has enough resources"
            }
            (true, true, false) => "no instance type has the required offering",
            (true, true, true) if self.requirements_and_fits => {
                "no instance type which met the scheduling requirements and had enough resources, had a required offering"
            }
            (true, true, true) if self.fits_and_offering => {
                "no instance type which had enough resources and the required offering met the scheduling requirements"
            }
            (true, true, true) if self.requirements_and_offering => {
                "no instance type which met the scheduling requirements and the required offering had the required resources"
            }
            (true, true, true) => "no instance type met the requirements/resources/offering tuple",
        };
        msg.to_owned()
    }
}

struct Scheduler<'a> {
    input: &'a SchedulingInput,
    policy: &'a LabelPolicy,
    /// Preferences are ignored (PreferencePolicy::Ignore).
    ignore_preferences: bool,
    /// minValues are lowered to what the types offer (MinValuesPolicy::BestEffort).
    best_effort_min_values: bool,
    pools: Vec<Pool<'a>>,
    skipped_pools: Vec<String>,
    nodes: Vec<Node<'a>>,
    pods: Vec<Pod>,
    claims: Vec<Claim>,
    /// The claims in the order they are tried (fewest pods first, then oldest), indexed.
    open: OpenClaims,
    topology: Topology<'a>,
    /// Whether relaxation may tolerate PreferNoSchedule taints (some pool has one).
    prefer_no_schedule_relaxable: bool,
    /// Counter for the hostname placeholders of new claims.
    hostnames: usize,
    /// Per pool: [`Facts`] of its candidate types for requirement sets seen so far.
    facts: RefCell<Vec<FactsCache>>,
    /// Recent option filterings of pods that ask for no host port.
    filtered: RefCell<FilterMemo>,
}

/// What filtering a claim's options kept ([`Scheduler::filter`]).
#[derive(Clone)]
struct Filtered {
    options: Vec<usize>,
    room: Room,
    flags: FilterFlags,
}

/// How many filterings [`FilterMemo`] remembers.
const FILTERINGS_REMEMBERED: usize = 16;

/// The last filterings of options for pods asking for no host port, by what decides them:
/// the pool, the type facts of the requirements (`None`: unchanged, every type compatible),
/// the claim's requests with the pod and the options filtered. Many claims ask the same (the
/// first pod of each kind on a new claim, the same narrowing of claims filled alike), so
/// the 400-type loop runs once for them. Facts are compared by identity: the memo holds
/// them, so an address is never reused while remembered.
#[derive(Default)]
struct FilterMemo {
    entries: Vec<Remembered>,
    /// The entry to replace next once full.
    next: usize,
}

/// One filtering [`FilterMemo`] remembers: the question, then the answer.
struct Remembered {
    pool: usize,
    facts: Option<Rc<[Facts]>>,
    requests: Resources,
    options: Vec<usize>,
    filtered: Filtered,
}

impl FilterMemo {
    fn get(
        &self,
        pool: usize,
        facts: Option<&Rc<[Facts]>>,
        requests: &Resources,
        options: &[usize],
    ) -> Option<Filtered> {
        self.entries
            .iter()
            .find(|e| {
                e.pool == pool
                    && match (&e.facts, facts) {
                        (None, None) => true,
                        (Some(a), Some(b)) => Rc::ptr_eq(a, b),
                        _ => false,
                    }
                    && &e.requests == requests
                    && e.options.as_slice() == options
            })
            .map(|e| e.filtered.clone())
    }

    fn put(
        &mut self,
        pool: usize,
        facts: Option<Rc<[Facts]>>,
        requests: Resources,
        options: Vec<usize>,
        filtered: Filtered,
    ) {
        let entry = Remembered {
            pool,
            facts,
            requests,
            options,
            filtered,
        };
        if self.entries.len() < FILTERINGS_REMEMBERED {
            self.entries.push(entry);
        } else {
            self.entries[self.next] = entry;
            self.next = (self.next + 1) % FILTERINGS_REMEMBERED;
        }
    }
}

/// Pod indices in upstream's queue order.
fn queue_order(pods: &[super::types::PendingPod]) -> Vec<usize> {
    // The sort keys side by side (not read through the pods for every comparison); the
    // index last keeps equal pods in input order, as a stable sort would.
    let mut keys: Vec<_> = pods
        .iter()
        .enumerate()
        .map(|(i, p)| {
            (
                Reverse(p.requests.cpu_millis),
                Reverse(p.requests.memory_bytes),
                p.created,
                p.uid.as_str(),
                &p.key,
                i,
            )
        })
        .collect();
    keys.sort_unstable();
    keys.into_iter().map(|(.., i)| i).collect()
}

/// What a node must satisfy for `pod`: its required alternative in use plus, unless
/// preferences are ignored, the heaviest remaining preferred node-affinity term.
fn pod_requirements(
    pod: &Pod,
    input: &super::types::PendingPod,
    ignore_preferences: bool,
) -> Requirements {
    let mut requirements = pod.strict().clone();
    if !ignore_preferences && let Some(&i) = pod.preferred_affinity.first() {
        requirements.add_all(&input.preferred_affinity[i].preference);
    }
    requirements
}

/// The constraints topology groups are built from, as relaxation left them.
fn constraints<'p>(
    pod: &'p Pod,
    input: &'p super::types::PendingPod,
    ignore_preferences: bool,
) -> Constraints<'p> {
    let spreads = pod
        .spreads
        .iter()
        .map(|&i| &input.topology_spread[i])
        .filter(|c| !ignore_preferences || c.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule)
        .collect();
    let mut affinity: Vec<_> = input.pod_affinity.iter().collect();
    let mut anti_affinity: Vec<_> = input.pod_anti_affinity.iter().collect();
    if !ignore_preferences {
        affinity.extend(
            pod.preferred_pod_affinity
                .iter()
                .map(|&i| &input.preferred_pod_affinity[i].term),
        );
        anti_affinity.extend(
            pod.preferred_pod_anti_affinity
                .iter()
                .map(|&i| &input.preferred_pod_anti_affinity[i].term),
        );
    }
    let mut tolerations = input.tolerations.clone();
    if pod.tolerate_prefer_no_schedule {
        tolerations.push(prefer_no_schedule_toleration());
    }
    Constraints {
        spreads,
        affinity,
        anti_affinity,
        node_terms: &pod.alternatives[pod.current..],
        tolerations,
    }
}

impl<'a> Scheduler<'a> {
    fn new(input: &'a SchedulingInput, context: &'a SchedulingContext) -> Self {
        let policy = &input.label_policy;
        let ignore_preferences = context.preference_policy == PreferencePolicy::Ignore;
        let daemons: Vec<Daemon<'_>> = input.daemons.iter().map(Daemon::new).collect();

        let mut ordered: Vec<&NodePool> = input.nodepools.iter().collect();
        ordered.sort_by(|a, b| {
            b.template
                .weight
                .cmp(&a.template.weight)
                .then_with(|| b.template.nodepool.cmp(&a.template.nodepool))
        });
        let mut pools = Vec::new();
        let mut skipped_pools = Vec::new();
        for pool in ordered {
            let mut requirements = pool.template.requirements.clone();
            requirements.add(Requirement::in_values(
                NODEPOOL_LABEL,
                [pool.template.nodepool.as_str()],
            ));
            requirements.add(Requirement::in_values(REGISTERED_LABEL, ["true"]));
            requirements.add(Requirement::in_values(INITIALIZED_LABEL, ["true"]));
            let offerings = OfferingTable::new(&pool.instance_types);
            let classes = TypeClasses::new(&pool.instance_types);
            let filter = offerings.filter(&requirements, policy);
            let intersecting = classes.intersecting(&requirements);
            let mut candidates: Vec<usize> = pool
                .instance_types
                .iter()
                .enumerate()
                .filter(|&(i, t)| {
                    intersecting[i]
                        && offerings
                            .available_compatible(i, t, filter, &requirements, policy)
                            .next()
                            .is_some()
                })
                .map(|(i, _)| i)
                .collect();
            if requirements.has_min_values() && context.min_values_policy == MinValuesPolicy::Strict
            {
                let types: Vec<&InstanceType> = candidates
                    .iter()
                    .map(|&i| &pool.instance_types[i])
                    .collect();
                if satisfies_min_values(&types, &requirements).is_err() {
                    candidates.clear();
                }
            }
            if candidates.is_empty() {
                skipped_pools.push(pool.template.nodepool.clone());
                continue;
            }
            let taints = &pool.template.taints;
            let overhead: Resources = daemons
                .iter()
                .filter(|d| d.runs_on_new(taints, &requirements, policy, None))
                .map(Daemon::requests)
                .sum();
            let mut type_overhead = vec![Resources::new(); pool.instance_types.len()];
            let mut type_ports = vec![Vec::new(); pool.instance_types.len()];
            for &i in &candidates {
                let t = &pool.instance_types[i];
                for d in daemons
                    .iter()
                    .filter(|d| d.runs_on_new(taints, &requirements, policy, Some(t)))
                {
                    type_overhead[i] += d.requests();
                    type_ports[i].extend(d.host_ports().iter().cloned());
                }
            }
            let type_free = pool
                .instance_types
                .iter()
                .zip(&type_overhead)
                .map(|(t, overhead)| Free::of(t.allocatable(), overhead))
                .collect();
            pools.push(Pool {
                input: pool,
                requirements,
                candidates,
                type_overhead,
                type_free,
                type_ports,
                overhead,
                remaining: pool.limits.as_ref().map(|l| l.remaining()),
                within_limits: None,
                offerings,
                classes,
            });
        }

        let pending: BTreeSet<&super::types::PodKey> = input.pods.iter().map(|p| &p.key).collect();
        let mut ports: BTreeMap<&str, Vec<HostPort>> = BTreeMap::new();
        let mut volumes: BTreeMap<&str, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
        for b in &context.bound_pods {
            if !pending.contains(&b.key) {
                ports
                    .entry(b.node.as_str())
                    .or_default()
                    .extend(b.host_ports.iter().cloned());
                if !b.volumes.is_empty() {
                    attach(volumes.entry(b.node.as_str()).or_default(), &b.volumes);
                }
            }
        }
        let mut schedulable: Vec<&ExistingNode> =
            input.nodes.iter().filter(|n| n.schedulable).collect();
        schedulable.sort_by(|a, b| a.in_flight.cmp(&b.in_flight).then(a.name.cmp(&b.name)));
        let nodes: Vec<Node<'a>> = schedulable
            .into_iter()
            .map(|node| {
                let daemon_total: Resources = daemons
                    .iter()
                    .filter(|d| d.runs_on_existing(&node.taints, &node.requirements))
                    .map(Daemon::requests)
                    .sum();
                let mut requirements = node.requirements.clone();
                if !requirements.has(HOSTNAME_LABEL) {
                    requirements.add(Requirement::in_values(HOSTNAME_LABEL, [node.name.as_str()]));
                }
                Node {
                    input: node,
                    requirements,
                    available: &node.allocatable - &node.requested,
                    reserved: &daemon_total - &node.daemon_requested,
                    ports: ports.remove(node.name.as_str()).unwrap_or_default(),
                    volumes: volumes.remove(node.name.as_str()).unwrap_or_default(),
                }
            })
            .collect();

        let pods: Vec<Pod> = input
            .pods
            .iter()
            .map(|p| {
                let mut pod = Pod {
                    alternatives: alternatives(&p.node_selector, &p.required_affinity),
                    current: 0,
                    preferred_affinity: by_weight(&p.preferred_affinity, |t| t.weight),
                    preferred_pod_affinity: by_weight(&p.preferred_pod_affinity, |t| t.weight),
                    preferred_pod_anti_affinity: by_weight(&p.preferred_pod_anti_affinity, |t| {
                        t.weight
                    }),
                    spreads: (0..p.topology_spread.len()).collect(),
                    tolerate_prefer_no_schedule: false,
                    requirements: Requirements::new(),
                };
                pod.requirements = pod_requirements(&pod, p, ignore_preferences);
                pod
            })
            .collect();

        let mut topology = Topology::new(
            &input.pods,
            &input.nodes,
            &context.bound_pods,
            &context.namespace_labels,
            &input.nodepools,
        );
        let order = queue_order(&input.pods);
        for &p in &order {
            topology.own_inverse(p);
        }
        topology.index_inverse();
        for &p in &order {
            topology.update(
                p,
                &constraints(&pods[p], &input.pods[p], ignore_preferences),
            );
        }
        for node in &nodes {
            topology.register(
                HOSTNAME_LABEL,
                topology::hostname(node.input),
                Registered::NONE,
            );
        }

        let pool_count = pools.len();
        let prefer_no_schedule_relaxable = input.nodepools.iter().any(|p| {
            p.template
                .taints
                .iter()
                .any(|t| t.effect == TaintEffect::PreferNoSchedule)
        });

        Scheduler {
            input,
            policy,
            ignore_preferences,
            best_effort_min_values: context.min_values_policy == MinValuesPolicy::BestEffort,
            pools,
            skipped_pools,
            nodes,
            pods,
            claims: Vec::new(),
            open: OpenClaims::default(),
            topology,
            prefer_no_schedule_relaxable,
            hostnames: 0,
            facts: RefCell::new(vec![Vec::new(); pool_count]),
            filtered: RefCell::default(),
        }
    }

    fn run(mut self, fallback: FallbackPrice<'_>) -> SchedulingResult {
        let count = self.input.pods.len();
        let mut queue: VecDeque<usize> = queue_order(&self.input.pods).into();
        // Queue length when each pod was last pushed back without being relaxed: meeting it
        // again at the front with the same length means a full round without progress.
        let mut pushed_at: Vec<Option<usize>> = vec![None; count];
        let mut targets: Vec<Option<Target>> = vec![None; count];
        let mut errors: Vec<Option<String>> = vec![None; count];
        while let Some(&p) = queue.front() {
            if pushed_at[p] == Some(queue.len()) {
                break;
            }
            queue.pop_front();
            match self.add(p) {
                Ok(target) => {
                    targets[p] = Some(target);
                    errors[p] = None;
                }
                Err(reason) => {
                    errors[p] = Some(reason);
                    let relaxed = self.relax(p);
                    queue.push_back(p);
                    if relaxed {
                        pushed_at.iter_mut().for_each(|v| *v = None);
                    } else {
                        pushed_at[p] = Some(queue.len());
                    }
                }
            }
        }

        let (new_claims, claim_index, dropped) = self.finalize(fallback);
        let placements = self
            .input
            .pods
            .iter()
            .enumerate()
            .map(|(p, pod)| {
                let placement = match targets[p] {
                    Some(Target::Node(n)) => Placement::Existing {
                        node: self.nodes[n].input.name.clone(),
                    },
                    Some(Target::Claim(c)) => match claim_index[c] {
                        Some(index) => Placement::NewClaim { index },
                        None => Placement::Unschedulable {
                            reason: dropped[c].clone().unwrap_or_default(),
                        },
                    },
                    None => Placement::Unschedulable {
                        reason: errors[p].clone().unwrap_or_default(),
                    },
                };
                PodPlacement {
                    key: pod.key.clone(),
                    uid: pod.uid.clone(),
                    placement,
                }
            })
            .collect();
        SchedulingResult {
            placements,
            new_claims,
            nodepools_without_instance_types: self.skipped_pools,
        }
    }

    /// Loosens one preference of a pod that could not be placed, in upstream's order;
    /// false when nothing is left. The pod's topology groups follow its new constraints.
    fn relax(&mut self, p: usize) -> bool {
        let input = &self.input.pods[p];
        let pod = &mut self.pods[p];
        let relaxed = if pod.current + 1 < pod.alternatives.len() {
            pod.current += 1;
            true
        } else if !pod.preferred_pod_affinity.is_empty() {
            pod.preferred_pod_affinity.remove(0);
            true
        } else if !pod.preferred_pod_anti_affinity.is_empty() {
            pod.preferred_pod_anti_affinity.remove(0);
            true
        } else if !pod.preferred_affinity.is_empty() {
            pod.preferred_affinity.remove(0);
            true
        } else if let Some(i) = pod.spreads.iter().position(|&s| {
            input.topology_spread[s].when_unsatisfiable == WhenUnsatisfiable::ScheduleAnyway
        }) {
            // Upstream moves the last constraint into the removed one's place.
            pod.spreads.swap_remove(i);
            true
        } else if self.prefer_no_schedule_relaxable
            && !pod.tolerate_prefer_no_schedule
            && !input.tolerations.iter().any(|t| {
                t.key.is_empty()
                    && t.value.is_empty()
                    && t.operator == TolerationOperator::Exists
                    && t.effect == Some(TaintEffect::PreferNoSchedule)
            })
        {
            pod.tolerate_prefer_no_schedule = true;
            true
        } else {
            false
        };
        if relaxed {
            pod.requirements = pod_requirements(pod, input, self.ignore_preferences);
            self.topology.update(
                p,
                &constraints(&self.pods[p], input, self.ignore_preferences),
            );
        }
        relaxed
    }

    /// Places one pod, or says why it fits nowhere.
    fn add(&mut self, p: usize) -> Result<Target, String> {
        let input = &self.input.pods[p];

        for i in 0..self.nodes.len() {
            if let Some(requirements) = self.try_node(i, p) {
                let node = &mut self.nodes[i];
                node.reserved += &input.requests;
                node.ports.extend(input.host_ports.iter().cloned());
                attach(&mut node.volumes, &input.volumes);
                node.requirements = requirements;
                self.topology
                    .record(p, &node.input.taints, &node.requirements, &NO_KEYS);
                return Ok(Target::Node(i));
            }
        }

        if let Some((c, accepted)) = self.first_open_claim(p) {
            self.apply(c, accepted, p);
            return Ok(Target::Claim(c));
        }

        let mut reasons = Vec::new();
        for index in 0..self.pools.len() {
            let options = self.pools[index].new_claim_options();
            let pool = &self.pools[index];
            if options.is_empty() {
                reasons.push(format!(
                    "all available instance types exceed limits for nodepool: {:?}",
                    pool.name()
                ));
                continue;
            }
            self.hostnames += 1;
            let hostname = format!("hostname-placeholder-{:04}", self.hostnames);
            let mut requirements = pool.requirements.clone();
            requirements.add(Requirement::in_values(HOSTNAME_LABEL, [hostname.as_str()]));
            let claim = Claim {
                pool: index,
                slot: self.topology.host_slot(&hostname),
                pins: Vec::new(),
                hostname,
                requirements,
                options,
                requests: Resources::new(),
                room: Room::UNKNOWN,
                ports: Vec::new(),
                pods: Vec::new(),
                min_values_relaxed: false,
                registered: Registered::NONE,
            };
            match self.try_claim(&claim, p, true) {
                Ok(accepted) => {
                    self.claims.push(claim);
                    let c = self.claims.len() - 1;
                    self.apply(c, accepted, p);
                    let pool = &mut self.pools[index];
                    if let Some(remaining) = pool.remaining.as_mut() {
                        subtract_max(
                            remaining,
                            self.claims[c]
                                .options
                                .iter()
                                .map(|&t| pool.input.instance_types[t].capacity()),
                        );
                    }
                    return Ok(Target::Claim(c));
                }
                Err(reason) => reasons.push(format!(
                    "incompatible with nodepool {:?}, daemonset overhead={}, {}",
                    pool.name(),
                    render::resources(&pool.overhead),
                    reason.unwrap_or_default()
                )),
            }
        }
        if !reasons.is_empty() {
            return Err(reasons.join("; "));
        }
        if self.input.nodepools.is_empty() {
            return Err(NO_NODEPOOLS.to_owned());
        }
        Err(self
            .skipped_pools
            .iter()
            .map(|name| {
                format!("skipped nodepool {name:?}, nodepool requirements filtered out all instance types")
            })
            .collect::<Vec<_>>()
            .join("; "))
    }

    /// The first claim, in try order, that takes pod `p`, with what it becomes. Only the
    /// claims [`OpenClaims::walk`] leaves in are tried: the others are ruled out by the
    /// pod's topology anyway.
    fn first_open_claim(&mut self, p: usize) -> Option<(usize, Accepted)> {
        let walk = self.open.walk(p, self.pods[p].strict(), &self.topology);
        let requests = &self.input.pods[p].requests;
        self.open.claims(&walk).find_map(|c| {
            let claim = &self.claims[c];
            if !claim.room.admits(requests) {
                return None;
            }
            if self
                .topology
                .rejects(p, claim.slot, &claim.pins, self.pods[p].strict())
            {
                return None;
            }
            self.try_claim(claim, p, false)
                .ok()
                .map(|accepted| (c, accepted))
        })
    }

    /// The requirements existing node `i` would have with pod `p` on it, if it can take it.
    fn try_node(&self, i: usize, p: usize) -> Option<Requirements> {
        let node = &self.nodes[i];
        let input = &self.input.pods[p];
        let pod = &self.pods[p];
        if !tolerates(
            &input.tolerations,
            &node.input.taints,
            pod.tolerate_prefer_no_schedule,
        ) {
            return None;
        }
        if port_conflict(&input.host_ports, &node.ports).is_some() {
            return None;
        }
        if exceeds_attach_limits(&input.volumes, &node.volumes, &node.input.volume_limits) {
            return None;
        }
        if !fits_sum(&[&node.reserved, &input.requests], &node.available) {
            return None;
        }
        if !node.requirements.is_compatible(&pod.requirements, &NO_KEYS) {
            return None;
        }
        let narrowed = |volume| {
            self.narrow(p, &node.requirements, volume, &NO_KEYS, false)
                .ok()
                .map(|r| r.unwrap_or_else(|| node.requirements.clone()))
        };
        if input.volume_requirements.is_empty() {
            return narrowed(None);
        }
        input
            .volume_requirements
            .iter()
            .find_map(|v| narrowed(Some(v)))
    }

    /// Adds pod `p`'s requirements, then `volume` (one of its volume alternatives), then the
    /// domains its topology constraints allow, to `base` (a node's or claim's requirements,
    /// already compatible with the pod's). `allow` lists the keys `base` may leave
    /// undefined. Topology comes last, as upstream, since it may collapse a key to one value.
    /// Without `detail`, a topology failure is not described (it is the common, cheap case).
    /// `None` means `base` is left as it is.
    fn narrow<K: KeySet + ?Sized>(
        &self,
        p: usize,
        base: &Requirements,
        volume: Option<&Requirements>,
        allow: &K,
        detail: bool,
    ) -> Result<Option<Requirements>, Failure> {
        let pod = &self.pods[p];
        let mut merged = None;
        if let Some(volume) = volume {
            let mut m = base.intersection(&pod.requirements);
            if !m.is_compatible(volume, allow) {
                return Err(Failure::Volume {
                    node: m,
                    volume: volume.clone(),
                });
            }
            m.add_all(volume);
            merged = Some(m);
        }
        let domains = match &merged {
            Some(m) => self.topology.domains(
                p,
                pod.strict(),
                &|key| m.get(key).map(Cow::Borrowed),
                detail,
            ),
            None => self.topology.domains(
                p,
                pod.strict(),
                &|key| layered(base, &pod.requirements, key),
                detail,
            ),
        }
        .map_err(Failure::Topology)?;
        if merged.is_none() && domains.is_empty() && pod.requirements.is_empty() {
            return Ok(None);
        }
        let mut m = merged.unwrap_or_else(|| base.intersection(&pod.requirements));
        if !domains.is_empty() {
            let domains: Requirements = domains.into_iter().collect();
            if !m.is_compatible(&domains, allow) {
                return Err(Failure::Domains { node: m, domains });
            }
            m.add_all(&domains);
        }
        Ok(Some(m))
    }

    /// A failure in upstream's words.
    fn describe(&self, failure: &Failure) -> String {
        let clauses =
            |node: &Requirements, other: &Requirements| match node.compatible(other, self.policy) {
                Err(err) => render::incompatibility(node, other, &err),
                Ok(()) => String::new(),
            };
        match failure {
            Failure::Topology(v) => v
                .as_ref()
                .map(|v| self.topology.describe(v))
                .unwrap_or_default(),
            Failure::Volume { node, volume } => {
                format!(
                    "incompatible volume requirements, {}",
                    clauses(node, volume)
                )
            }
            Failure::Domains { node, domains } => clauses(node, domains),
        }
    }

    /// Whether `claim` can take pod `p`; on failure, the reason when `detail` is set.
    fn try_claim(&self, claim: &Claim, p: usize, detail: bool) -> Result<Accepted, Option<String>> {
        let pool = &self.pools[claim.pool];
        let input = &self.input.pods[p];
        let pod = &self.pods[p];
        let pod_requirements = &pod.requirements;

        let untolerated: Vec<&Taint> = pool
            .taints()
            .iter()
            .filter(|t| !tolerated(&input.tolerations, t, pod.tolerate_prefer_no_schedule))
            .collect();
        if !untolerated.is_empty() {
            return Err(detail.then(|| render::untolerated(&untolerated)));
        }

        if !claim
            .requirements
            .is_compatible(pod_requirements, self.policy)
        {
            return Err(detail.then(|| {
                match claim.requirements.compatible(pod_requirements, self.policy) {
                    Err(err) => render::incompatible(&claim.requirements, pod_requirements, &err),
                    Ok(()) => "incompatible requirements".to_owned(),
                }
            }));
        }

        let attempt = |volume: Option<&Requirements>| {
            let requirements = self
                .narrow(p, &claim.requirements, volume, self.policy, detail)
                .map_err(|f| detail.then(|| self.describe(&f)))?;
            self.filter(claim, p, requirements, detail)
        };
        if input.volume_requirements.is_empty() {
            return attempt(None);
        }
        let mut last = Err(None);
        for volume in &input.volume_requirements {
            last = attempt(Some(volume));
            if last.is_ok() {
                break;
            }
        }
        last
    }

    /// Keeps the claim's instance types that still work with pod `p` added under
    /// `requirements` (compatible labels, enough room including DaemonSet overhead, an
    /// available compatible offering, no host-port conflict), then checks minValues.
    fn filter(
        &self,
        claim: &Claim,
        p: usize,
        narrowed: Option<Requirements>,
        detail: bool,
    ) -> Result<Accepted, Option<String>> {
        let pool = &self.pools[claim.pool];
        let input = &self.input.pods[p];
        let requests = &claim.requests + &input.requests;
        // Requirements the pod did not narrow leave label and offering compatibility as they
        // were when the options were last filtered: only room and ports need checking.
        let unchanged = narrowed.as_ref().is_none_or(|r| *r == claim.requirements);
        let requirements = narrowed.as_ref().unwrap_or(&claim.requirements);
        let ports = &input.host_ports;
        let claim_conflict = port_conflict(ports, &claim.ports).is_some();

        // The common case: a claim that already holds pods gets one that leaves its
        // requirements as they were and asks for no host port (so it conflicts with none).
        // The first option with room for every pod is proof enough; options before it cannot
        // hold the pods any more (requests only grow) and go, the rest are left unchecked.
        // Every pod added since the last full filter only took room, so the room shrinks by
        // the pod's requests at most.
        if unchanged && ports.is_empty() && !claim.pods.is_empty() && !requirements.has_min_values()
        {
            let plain = no_extended(&requests);
            let first_fit = claim
                .options
                .iter()
                .position(|&t| pool.fits_plain(t, &requests, plain));
            if let Some(first) = first_fit {
                let asked = &input.requests;
                let room = Room {
                    cpu_millis: claim.room.cpu_millis.saturating_sub(asked.cpu_millis),
                    memory_bytes: claim.room.memory_bytes.saturating_sub(asked.memory_bytes),
                    pods: claim.room.pods.saturating_sub(asked.pods),
                };
                return Ok(Accepted {
                    requirements: None,
                    options: Options::DropFirst(first),
                    requests,
                    room,
                    min_values_relaxed: false,
                });
            }
        }

        let facts = (!unchanged).then(|| self.type_facts(claim.pool, requirements));
        let remembered = ports
            .is_empty()
            .then(|| {
                self.filtered
                    .borrow()
                    .get(claim.pool, facts.as_ref(), &requests, &claim.options)
            })
            .flatten();
        let Filtered {
            mut options,
            room,
            flags,
        } = match remembered {
            Some(filtered) => filtered,
            None => {
                let filtered = filter_options(
                    pool,
                    &claim.options,
                    facts.as_deref(),
                    &requests,
                    ports,
                    claim_conflict,
                );
                if ports.is_empty() {
                    self.filtered.borrow_mut().put(
                        claim.pool,
                        facts,
                        requests.clone(),
                        claim.options.clone(),
                        filtered.clone(),
                    );
                }
                filtered
            }
        };
        let mut min_values = None;
        let mut relaxed = None;
        if requirements.has_min_values() && !options.is_empty() {
            let types: Vec<&InstanceType> =
                options.iter().map(|&t| pool.instance_type(t)).collect();
            if let Err(err) = satisfies_min_values(&types, requirements) {
                if self.best_effort_min_values {
                    relaxed = Some(relax_min_values(requirements, &err));
                } else {
                    min_values = Some(err);
                    options.clear();
                }
            }
        }
        if options.is_empty() {
            return Err(detail.then(|| {
                let cumulative = &pool.overhead + &input.requests;
                format!(
                    "no instance type satisfied resources {} and requirements {} ({})",
                    render::resources(&cumulative),
                    render::requirements(requirements),
                    flags.reason(min_values.as_ref(), &requests)
                )
            }));
        }
        let min_values_relaxed = relaxed.is_some();
        Ok(Accepted {
            requirements: relaxed.or(if unchanged { None } else { narrowed }),
            options: Options::Filtered(options),
            requests,
            room,
            min_values_relaxed,
        })
    }

    /// The [`Facts`] of pool `pool`'s candidate types under `requirements` (indexed by type),
    /// remembered per requirement set.
    fn type_facts(&self, pool: usize, requirements: &Requirements) -> Rc<[Facts]> {
        let mut cache = self.facts.borrow_mut();
        if let Some((_, facts)) = cache[pool]
            .iter()
            .find(|(seen, _)| same_but_hostname(seen, requirements))
        {
            return facts.clone();
        }
        let p = &self.pools[pool];
        let mut facts = vec![Facts::default(); p.input.instance_types.len()];
        let filter = p.offerings.filter(requirements, self.policy);
        let intersecting = p.classes.intersecting(requirements);
        for &t in &p.candidates {
            let it = p.instance_type(t);
            facts[t] = Facts {
                compatible: intersecting[t],
                offering: p
                    .offerings
                    .available_compatible(t, it, filter, requirements, self.policy)
                    .next()
                    .is_some(),
            };
        }
        let facts: Rc<[Facts]> = facts.into();
        if cache[pool].len() < FACTS_PER_POOL {
            let mut key = requirements.clone();
            key.remove(HOSTNAME_LABEL);
            cache[pool].push((key, facts.clone()));
        }
        facts
    }

    /// Records an accepted pod on claim `c`: its new state, the pod's ports, the claim's
    /// hostname as a domain, and the pod in the topology groups.
    fn apply(&mut self, c: usize, accepted: Accepted, p: usize) {
        let input = &self.input.pods[p];
        let claim = &mut self.claims[c];
        if let Some(requirements) = accepted.requirements {
            claim.requirements = requirements;
            self.topology.pin(&claim.requirements, &mut claim.pins);
        } else if claim.pins.is_empty() {
            self.topology.pin(&claim.requirements, &mut claim.pins);
        }
        match accepted.options {
            Options::Filtered(options) => claim.options = options,
            Options::DropFirst(n) => {
                claim.options.drain(..n);
            }
        }
        claim.requests = accepted.requests;
        claim.room = accepted.room;
        claim.min_values_relaxed |= accepted.min_values_relaxed;
        claim.pods.push(p);
        claim.ports.extend(input.host_ports.iter().cloned());
        claim.registered =
            self.topology
                .register(HOSTNAME_LABEL, &claim.hostname, claim.registered);
        let claim = &self.claims[c];
        self.topology.record(
            p,
            self.pools[claim.pool].taints(),
            &claim.requirements,
            self.policy,
        );
        // Back into the try order at its new pod count (after older claims with as many).
        self.open
            .record(c, claim.pods.len(), claim.slot, &claim.pins, &self.topology);
    }

    /// Turns the filled claims into NodeClaim specs. Returns the kept claims, the new index
    /// of each pass claim (`None` when dropped) and the reason a dropped claim's pods get.
    fn finalize(
        &self,
        fallback: FallbackPrice<'_>,
    ) -> (Vec<NewNodeClaim>, Vec<Option<usize>>, Vec<Option<String>>) {
        let mut kept = Vec::new();
        let mut index = vec![None; self.claims.len()];
        let mut dropped = vec![None; self.claims.len()];
        // Per (pool, final requirements): each candidate type's launch price and the capacity
        // types of its available compatible offerings. Many claims share requirements.
        let mut memo: Vec<Priced> = Vec::new();
        let mut fitting: Vec<usize> = Vec::new();
        // Per pool: the names of the lists of types kept so far.
        let mut type_names: Vec<TypeNames> = (0..self.pools.len())
            .map(|_| TypeNames::default())
            .collect();
        for (c, claim) in self.claims.iter().enumerate() {
            let pool = &self.pools[claim.pool];
            let template = &pool.input.template;
            let mut requirements = claim.requirements.clone();
            for key in render::SIMULATION_ONLY_KEYS {
                requirements.remove(key);
            }

            let entry = match memo
                .iter()
                .position(|m| m.pool == claim.pool && m.requirements == requirements)
            {
                Some(i) => i,
                None => {
                    memo.push(Priced::new(
                        claim.pool,
                        pool,
                        &requirements,
                        self.policy,
                        fallback,
                    ));
                    memo.len() - 1
                }
            };
            // Options left unchecked by later pods (see `Options::DropFirst`) are checked here.
            fitting.clear();
            let plain = no_extended(&claim.requests);
            fitting.extend(
                claim
                    .options
                    .iter()
                    .copied()
                    .filter(|&t| pool.fits_plain(t, &claim.requests, plain)),
            );
            if !memo[entry].decided.contains_key(fitting.as_slice()) {
                let kept_types =
                    KeptTypes::new(pool, &memo[entry], &fitting, &mut type_names[claim.pool]);
                memo[entry].decided.insert(fitting.clone(), kept_types);
            }
            let priced = &memo[entry];
            let kept_types = &priced.decided[fitting.as_slice()];
            let mut min_values_relaxed = claim.min_values_relaxed;
            if let Err(err) = &kept_types.min_values {
                if !self.best_effort_min_values {
                    dropped[c] = Some(format!(
                        "pod didn’t schedule because NodePool {:?} couldn’t meet minValues requirements, {err}",
                        template.nodepool
                    ));
                    continue;
                }
                requirements = relax_min_values(&requirements, err);
                min_values_relaxed = true;
            }
            requirements.add(kept_types.type_requirement.clone());
            if let Some(capacity_types) = &kept_types.capacity_requirement {
                requirements.add(capacity_types.clone());
            }

            // What this claim added or relaxed are well-known keys' values and minValues,
            // which labels leave out: the memo's labels are the claim's.
            debug_assert_eq!(
                priced.labels,
                claim_labels(template, &requirements, self.policy)
            );
            let labels = priced.labels.clone();

            let mut annotations = template.annotations.clone();
            // Upstream's marks for NodeClaims that may launch an overlaid instance type.
            if kept_types.price_overlaid {
                annotations.insert(
                    PRICE_OVERLAY_APPLIED_ANNOTATION.to_owned(),
                    "true".to_owned(),
                );
            }
            if kept_types.capacity_overlaid {
                annotations.insert(
                    CAPACITY_OVERLAY_APPLIED_ANNOTATION.to_owned(),
                    "true".to_owned(),
                );
            }
            if self.best_effort_min_values && (min_values_relaxed || requirements.has_min_values())
            {
                annotations.insert(
                    NODECLAIM_MIN_VALUES_RELAXED_ANNOTATION.to_owned(),
                    min_values_relaxed.to_string(),
                );
            }

            index[c] = Some(kept.len());
            kept.push(NewNodeClaim {
                spec: NodeClaimSpec {
                    nodepool: template.nodepool.clone(),
                    node_class_ref: template.node_class_ref.clone(),
                    requirements,
                    requests: &claim.requests + &kept_types.daemon_overhead,
                    taints: template.taints.clone(),
                    startup_taints: template.startup_taints.clone(),
                    labels,
                    annotations,
                    instance_types: kept_types.names.clone(),
                },
                pods: claim
                    .pods
                    .iter()
                    .map(|&p| self.input.pods[p].key.clone())
                    .collect(),
                daemon_overhead: kept_types.daemon_overhead.clone(),
                launch_price: kept_types.launch_price,
            });
        }
        (kept, index, dropped)
    }
}

/// What a claim's remaining instance types decide, the same for every claim of a pool
/// whose requirements and fitting options are the same ([`Scheduler::finalize`]).
struct KeptTypes {
    /// The price of the first type launched (the cheapest), if known.
    launch_price: Option<f64>,
    /// The names of the types launched, cheapest first, at most [`MAX_INSTANCE_TYPES`].
    names: std::sync::Arc<[String]>,
    /// `node.kubernetes.io/instance-type In [names]`, names sorted.
    type_requirement: Requirement,
    /// Whether the types meet the requirements' minValues.
    min_values: Result<usize, MinValuesError>,
    /// The DaemonSet overhead counted: resource by resource, the least any type has.
    daemon_overhead: Resources,
    /// `karpenter.sh/capacity-type In [what the types offer]`, unless they offer none.
    capacity_requirement: Option<Requirement>,
    /// Whether a NodeOverlay changed a type's price.
    price_overlaid: bool,
    /// Whether a NodeOverlay changed a type's capacity.
    capacity_overlaid: bool,
}

impl KeptTypes {
    /// Decides for the `fitting` options of a claim of `pool` priced by `priced`, taking the
    /// types' names from the pool's `type_names`.
    fn new(
        pool: &Pool<'_>,
        priced: &Priced,
        fitting: &[usize],
        type_names: &mut TypeNames,
    ) -> Self {
        // In launch order: kept from the memo's ordered candidates.
        let mut is_fitting = vec![false; pool.input.instance_types.len()];
        for &t in fitting {
            is_fitting[t] = true;
        }
        let indices: Vec<usize> = priced
            .order
            .iter()
            .copied()
            .filter(|&t| is_fitting[t])
            .take(MAX_INSTANCE_TYPES)
            .collect();
        let types: Vec<&InstanceType> = indices.iter().map(|&t| pool.instance_type(t)).collect();
        let (names, type_requirement) = type_names.of(pool, &indices);
        KeptTypes {
            names,
            type_requirement,
            min_values: satisfies_min_values(&types, &priced.requirements),
            daemon_overhead: elementwise_min(indices.iter().map(|&t| &pool.type_overhead[t])),
            capacity_requirement: priced.capacity_requirement(&indices),
            price_overlaid: types.iter().any(|t| t.price_overlaid()),
            capacity_overlaid: types.iter().any(|t| t.capacity_overlaid()),
            launch_price: indices.first().and_then(|&t| priced.prices[t]),
        }
    }
}

/// A pool's lists of kept types by name, each built once (claims of different requirements
/// often keep the same types).
#[derive(Default)]
struct TypeNames {
    /// Each candidate's rank by name (built on first use): a claim's instance-type
    /// requirement lists its types in name order without comparing names.
    rank: Option<Vec<u32>>,
    /// Per list of types (launch order): their names and instance-type requirement.
    built: HashMap<Vec<usize>, NamedTypes, BuildHasherDefault<FxHasher>>,
}

/// A list of types' names and the instance-type requirement naming them.
type NamedTypes = (std::sync::Arc<[String]>, Requirement);

impl TypeNames {
    /// The names of types `indices` of `pool`, in order, and `node.kubernetes.io/instance-type
    /// In [those names]`.
    fn of(
        &mut self,
        pool: &Pool<'_>,
        indices: &[usize],
    ) -> (std::sync::Arc<[String]>, Requirement) {
        if let Some(built) = self.built.get(indices) {
            return built.clone();
        }
        let rank = self.rank.get_or_insert_with(|| {
            let mut order = pool.candidates.clone();
            order.sort_by(|&a, &b| {
                pool.instance_type(a)
                    .name()
                    .cmp(pool.instance_type(b).name())
            });
            let mut rank = vec![u32::MAX; pool.input.instance_types.len()];
            for (r, &t) in order.iter().enumerate() {
                rank[t] = r as u32;
            }
            rank
        });
        let mut in_name_order = indices.to_vec();
        in_name_order.sort_unstable_by_key(|&t| rank[t]);
        let sorted = in_name_order.iter().map(|&t| pool.instance_type(t).name());
        let names: std::sync::Arc<[String]> = indices
            .iter()
            .map(|&t| pool.instance_type(t).name().to_owned())
            .collect();
        let built = (names, Requirement::in_values(INSTANCE_TYPE_LABEL, sorted));
        self.built.insert(indices.to_vec(), built.clone());
        built
    }
}

/// The labels of a NodeClaim from `template` with `requirements`: the template's, the
/// NodePool's and node class's, and each single-valued requirement that is neither
/// well-known nor restricted.
fn claim_labels(
    template: &NodeClaimTemplate,
    requirements: &Requirements,
    policy: &LabelPolicy,
) -> BTreeMap<String, String> {
    let mut labels = template.labels.clone();
    labels.insert(NODEPOOL_LABEL.to_owned(), template.nodepool.clone());
    if !template.node_class_ref.kind.is_empty() {
        labels.insert(
            template.node_class_ref.label_key(),
            template.node_class_ref.name.clone(),
        );
    }
    for (key, value) in requirements.labels() {
        if !policy.is_well_known(&key) && !policy.is_restricted(&key) {
            labels.entry(key).or_insert(value);
        }
    }
    labels
}

/// Keeps the `options` of a claim in `pool` that fit `requests` (the claim's with the pod's),
/// are compatible with the requirements and have a compatible available offering (`facts`;
/// `None` when the requirements did not change: all of them), and whose DaemonSets' ports do
/// not clash with the pod's (none when `claim_conflict`: the pod clashes with the claim).
fn filter_options(
    pool: &Pool<'_>,
    options: &[usize],
    facts: Option<&[Facts]>,
    requests: &Resources,
    ports: &[HostPort],
    claim_conflict: bool,
) -> Filtered {
    let mut flags = FilterFlags::default();
    let mut room = Room::NONE;
    let mut kept = Vec::with_capacity(options.len());
    for &t in options {
        if claim_conflict
            || (!ports.is_empty() && port_conflict(ports, &pool.type_ports[t]).is_some())
        {
            continue;
        }
        let fits = pool.fits(t, requests);
        let Facts {
            compatible,
            offering,
        } = facts.map_or(
            Facts {
                compatible: true,
                offering: true,
            },
            |f| f[t],
        );
        flags.record(compatible, fits, offering);
        if compatible && fits && offering {
            kept.push(t);
            pool.widen(&mut room, t, requests);
        }
    }
    Filtered {
        options: kept,
        room,
        flags,
    }
}

/// `requirements` with each unmet key's minValues lowered to the number of values the types
/// offer (removed when they offer none), as upstream's BestEffort policy does.
fn relax_min_values(requirements: &Requirements, unmet: &MinValuesError) -> Requirements {
    let mut out = requirements.clone();
    for (key, &(found, _)) in &unmet.unmet {
        if let Some(r) = out.remove(key) {
            out.add(r.with_min_values((found > 0).then_some(found)));
        }
    }
    out
}

/// Launch facts of a pool's types under one set of final claim requirements (many claims
/// share them): each type's launch price and the capacity types of its available compatible
/// offerings.
struct Priced {
    pool: usize,
    requirements: Requirements,
    /// Launch price per type index (candidates only).
    prices: Vec<Option<f64>>,
    /// The pool's capacity types, by number (at most 64 are told apart).
    capacity_type_names: Vec<String>,
    /// Per type index: bit `i` set when it offers `capacity_type_names[i]`.
    capacity_types: Vec<u64>,
    /// Every candidate in launch order (`order_by_price`): a claim's options are put in order
    /// by keeping theirs from this list, which the order's total tie-breaking makes the same
    /// as sorting them.
    order: Vec<usize>,
    /// The labels of a NodeClaim of the pool with these requirements ([`claim_labels`]).
    labels: BTreeMap<String, String>,
    /// Per list of a claim's options that still fit: what those types decide. Claims filled
    /// alike keep the same options, so most claims find theirs here.
    decided: HashMap<Vec<usize>, KeptTypes, BuildHasherDefault<FxHasher>>,
}

impl Priced {
    /// `karpenter.sh/capacity-type In [the capacity types the types `indices` offer]`.
    fn capacity_requirement(&self, indices: &[usize]) -> Option<Requirement> {
        let mask = indices
            .iter()
            .fold(0u64, |m, &t| m | self.capacity_types[t]);
        let names: Vec<&str> = self
            .capacity_type_names
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, n)| n.as_str())
            .collect();
        (!names.is_empty()).then(|| Requirement::in_values(CAPACITY_TYPE_LABEL, names))
    }

    fn new(
        index: usize,
        pool: &Pool<'_>,
        requirements: &Requirements,
        policy: &LabelPolicy,
        fallback: FallbackPrice<'_>,
    ) -> Self {
        let count = pool.input.instance_types.len();
        let mut priced = Priced {
            pool: index,
            requirements: requirements.clone(),
            prices: vec![None; count],
            capacity_type_names: pool
                .offerings
                .capacity_type_names()
                .map(str::to_owned)
                .collect(),
            capacity_types: vec![0; count],
            order: pool.candidates.clone(),
            labels: claim_labels(&pool.input.template, requirements, policy),
            decided: HashMap::default(),
        };
        let filter = pool.offerings.filter(requirements, policy);
        for &t in &pool.candidates {
            let it = pool.instance_type(t);
            // The cheapest available compatible offering's price (the fallback's where the
            // offering has none), and the capacity types offered.
            let mut cheapest: Option<f64> = None;
            for (o, capacity_type) in
                pool.offerings
                    .available_compatible_numbered(t, it, filter, requirements, policy)
            {
                if let Some(price) = o
                    .price()
                    .or_else(|| fallback(it, o))
                    .filter(|p| p.is_finite())
                {
                    cheapest = Some(cheapest.map_or(price, |c: f64| c.min(price)));
                }
                if let Some(bit) = capacity_type {
                    priced.capacity_types[t] |= 1 << bit;
                }
            }
            priced.prices[t] = cheapest;
        }
        let prices = &priced.prices;
        order_by_price(&mut priced.order, &pool.input.instance_types, |t| prices[t]);
        priced
    }
}

/// Whether the sum of `parts` fits `available`, by the rule of [`Resources::fits`] (every
/// requested amount at most the available one; resources nobody asks for are not checked),
/// without building the sum.
pub(super) fn fits_sum(parts: &[&Resources], available: &Resources) -> bool {
    let (mut cpu, mut memory, mut storage, mut pods) = (0u64, 0u64, 0u64, 0u64);
    for r in parts {
        cpu = cpu.saturating_add(r.cpu_millis);
        memory = memory.saturating_add(r.memory_bytes);
        storage = storage.saturating_add(r.ephemeral_storage_bytes);
        pods = pods.saturating_add(r.pods);
    }
    let total = |get: &dyn Fn(&Resources) -> u64| {
        parts.iter().fold(0u64, |sum, r| sum.saturating_add(get(r)))
    };
    cpu <= available.cpu_millis
        && memory <= available.memory_bytes
        && storage <= available.ephemeral_storage_bytes
        && pods <= available.pods
        && parts.iter().all(|part| {
            part.extended().all(|(name, _)| {
                let asked = total(&|r| r.get(name));
                asked == 0 || asked <= available.get(name)
            })
        })
}

/// The remaining limits with each resource name resolved once; `None` stands for `nodes`.
fn resolved_limits(remaining: &BTreeMap<String, i128>) -> Vec<(Option<ResourceKey<'_>>, i128)> {
    remaining
        .iter()
        .map(|(name, left)| ((name != NODES).then(|| ResourceKey::of(name)), *left))
        .collect()
}

/// Whether launching `t` stays within the remaining limits: its capacity of every limited
/// resource fits what is left, and a node is left when `nodes` is limited.
fn within_limits(t: &InstanceType, limits: &[(Option<ResourceKey<'_>>, i128)]) -> bool {
    limits.iter().all(|(key, left)| match key {
        None => *left >= 1,
        Some(key) => i128::from(t.capacity().amount(*key)) <= *left,
    })
}

/// Charges a new claim against the limits pessimistically: for each limited resource, the
/// largest capacity among the claim's instance types (any of them may be launched); one node.
fn subtract_max<'r>(
    remaining: &mut BTreeMap<String, i128>,
    capacities: impl Iterator<Item = &'r Resources> + Clone,
) {
    for (name, left) in remaining.iter_mut() {
        let used = if name == NODES {
            1
        } else {
            let key = ResourceKey::of(name);
            capacities
                .clone()
                .map(|c| i128::from(c.amount(key)))
                .max()
                .unwrap_or(0)
        };
        *left -= used;
    }
}

/// Resource-by-resource minimum (zero when any side lacks the resource).
fn elementwise_min<'r>(mut all: impl Iterator<Item = &'r Resources>) -> Resources {
    let Some(first) = all.next() else {
        return Resources::new();
    };
    let mut out = first.clone();
    for r in all {
        if out.is_zero() {
            break;
        }
        out.min_with(r);
    }
    out
}

#[cfg(test)]
mod room_tests {
    use super::*;

    #[test]
    fn room_is_the_most_any_option_has_free() {
        let small = Resources::new()
            .with("cpu", 2000)
            .with("memory", 4 << 30)
            .with("pods", 10);
        let large = Resources::new()
            .with("cpu", 8000)
            .with("memory", 8 << 30)
            .with("pods", 10);
        let overhead = Resources::new().with("cpu", 500);
        let held = Resources::new()
            .with("cpu", 1000)
            .with("memory", 1 << 30)
            .with("pods", 2);
        let mut room = Room::NONE;
        room.widen(&small, &overhead, &held);
        room.widen(&large, &overhead, &held);
        // 6,500m CPU free on the large type, 3 GiB on the small one: each limit from its own type.
        assert!(
            room.admits(
                &Resources::new()
                    .with("cpu", 6500)
                    .with("memory", 3 << 30)
                    .with("pods", 1)
            )
        );
        assert!(!room.admits(&Resources::new().with("cpu", 6501)));
        assert!(!room.admits(&Resources::new().with("memory", (7 << 30) + 1)));
        assert!(!room.admits(&Resources::new().with("pods", 9)));
        assert!(Room::UNKNOWN.admits(&Resources::new().with("cpu", u64::MAX)));
    }

    #[test]
    fn a_remembered_filtering_is_found_only_for_the_same_question() {
        let filtered = |options: Vec<usize>| Filtered {
            options,
            room: Room::NONE,
            flags: FilterFlags::default(),
        };
        let facts: Rc<[Facts]> = vec![
            Facts {
                compatible: true,
                offering: true
            };
            3
        ]
        .into();
        let same_facts_elsewhere: Rc<[Facts]> = facts.to_vec().into();
        let one_cpu = Resources::new().with("cpu", 1000);
        let mut memo = FilterMemo::default();
        memo.put(
            0,
            Some(facts.clone()),
            one_cpu.clone(),
            vec![0, 1, 2],
            filtered(vec![1, 2]),
        );
        memo.put(0, None, one_cpu.clone(), vec![0, 1, 2], filtered(vec![2]));
        let kept = |m: &FilterMemo, pool, f: Option<&Rc<[Facts]>>, r: &Resources, o: &[usize]| {
            m.get(pool, f, r, o).map(|x| x.options)
        };
        assert_eq!(
            kept(&memo, 0, Some(&facts), &one_cpu, &[0, 1, 2]),
            Some(vec![1, 2])
        );
        assert_eq!(kept(&memo, 0, None, &one_cpu, &[0, 1, 2]), Some(vec![2]));
        // Equal facts from another requirement set are another question: compared by identity.
        assert_eq!(
            kept(&memo, 0, Some(&same_facts_elsewhere), &one_cpu, &[0, 1, 2]),
            None
        );
        assert_eq!(kept(&memo, 1, Some(&facts), &one_cpu, &[0, 1, 2]), None);
        assert_eq!(
            kept(
                &memo,
                0,
                Some(&facts),
                &Resources::new().with("cpu", 1001),
                &[0, 1, 2]
            ),
            None
        );
        assert_eq!(kept(&memo, 0, Some(&facts), &one_cpu, &[0, 1]), None);
        // Once full, the oldest entry goes first.
        for i in 0..FILTERINGS_REMEMBERED - 1 {
            memo.put(2, None, one_cpu.clone(), vec![i], filtered(vec![i]));
        }
        assert_eq!(kept(&memo, 0, Some(&facts), &one_cpu, &[0, 1, 2]), None);
        assert_eq!(kept(&memo, 0, None, &one_cpu, &[0, 1, 2]), Some(vec![2]));
    }

    #[test]
    fn the_free_room_shortcut_decides_as_the_full_sum() {
        let allocatable = Resources::new()
            .with("cpu", 4000)
            .with("memory", 8 << 30)
            .with("pods", 20)
            .with("nvidia.com/gpu", 1);
        let overheads = [
            Resources::new(),
            Resources::new().with("cpu", 500).with("pods", 2),
            // More than the type has: nothing fits.
            Resources::new().with("cpu", 5000),
            // An extended resource in the overhead: the shortcut steps aside.
            Resources::new().with("nvidia.com/gpu", 1),
        ];
        let requests = [
            Resources::new(),
            Resources::new()
                .with("cpu", 3500)
                .with("memory", 8 << 30)
                .with("pods", 18),
            Resources::new().with("cpu", 3501),
            Resources::new().with("ephemeral-storage", 1),
            Resources::new().with("nvidia.com/gpu", 1),
            Resources::new().with("nvidia.com/gpu", 2),
        ];
        assert!(Free::of(&allocatable, &overheads[2]).is_none());
        assert!(Free::of(&allocatable, &overheads[3]).is_none());
        for overhead in &overheads {
            for asked in &requests {
                let full = fits_sum(&[asked, overhead], &allocatable);
                let free = Free::of(&allocatable, overhead);
                if let Some(free) = free.filter(|_| no_extended(asked)) {
                    assert_eq!(free.holds(asked), full, "{asked:?} besides {overhead:?}");
                }
                let (mut by_free, mut by_sum) = (Room::NONE, Room::NONE);
                if let Some(free) = free {
                    by_free.widen_free(&free, asked);
                    by_sum.widen(&allocatable, overhead, asked);
                    assert_eq!(
                        (by_free.cpu_millis, by_free.memory_bytes, by_free.pods),
                        (by_sum.cpu_millis, by_sum.memory_bytes, by_sum.pods)
                    );
                }
            }
        }
        // The overhead alone fills the type's CPU: a pod asking one more millicore is refused.
        let full =
            Free::of(&allocatable, &Resources::new().with("cpu", 4000)).expect("fits exactly");
        assert!(full.holds(&Resources::new().with("memory", 1)));
        assert!(!full.holds(&Resources::new().with("cpu", 1)));
    }
}
