//! The provisioning pass: the queue, placement on existing nodes, open claims and new claims,
//! then finalization of the claims. The pass's parts are child modules that share its private
//! state: [`pool`] (a NodePool prepared for the pass, and what its limits still allow),
//! [`prepared`] (what does not depend on pods, prepared once for many passes), [`relax`] (the queue order, and pods' constraints as relaxation leaves them), [`room`]
//! (room arithmetic: what a claim's options have free, whether requests fit), [`filter`]
//! (filtering a claim's options, with the type facts and filterings remembered) and
//! [`finalize`] (the filled claims into NodeClaims, their types ordered by price).

mod filter;
mod finalize;
mod pool;
mod prepared;
mod relax;
mod room;

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::labels::{HOSTNAME_LABEL, LabelPolicy};
use crate::requirements::{KeySet, NO_KEYS, Requirement, Requirements};
use crate::resources::Resources;
use crate::taints::{Taint, TaintEffect};

use super::constraints::{
    HostPort, MinValuesPolicy, PreferencePolicy, attach, exceeds_attach_limits, port_conflict,
};
use super::daemons::{Daemon, alternatives, tolerated, tolerates};
use super::open_claims::OpenClaims;
use super::pricing::{FallbackPrice, no_fallback};
use super::render;
use super::topology::{self, Registered, Topology, Violation};
use super::types::{
    ExistingNode, Placement, PodPlacement, SchedulingContext, SchedulingInput, SchedulingResult,
};
use filter::{FactsCache, FilterMemo};
use pool::{Pool, PreparedPools, subtract_max};
pub use prepared::Prepared;
use prepared::PreparedNodes;
pub(crate) use relax::queue_order;
use relax::{Pod, by_weight, constraints, pod_requirements};
use room::{NodeRoom, Room};

pub(super) use room::fits_sum;

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
    let prepared = Prepared::new(input, context);
    Scheduler::new(input, context, &prepared.pools, &prepared.nodes)
        .run(fallback.unwrap_or(&no_fallback))
}

/// [`schedule_with_context`] with what does not depend on pods prepared beforehand by
/// [`Prepared::new`], from an input with the same NodePools, DaemonSets, label policy and
/// nodes (whose `schedulable` flags may differ) and a context with the same minValues policy:
/// for callers running many passes over one cluster, such as consolidation's simulations. A
/// part of the preparation that does not fit the input (other NodePools by name and instance
/// type count, other DaemonSets by name, other nodes by name) is prepared again.
pub fn schedule_prepared(
    input: &SchedulingInput,
    context: &SchedulingContext,
    prepared: &Prepared,
    fallback: Option<FallbackPrice<'_>>,
) -> SchedulingResult {
    let daemons = || -> Vec<Daemon<'_>> { input.daemons.iter().map(Daemon::new).collect() };
    let (fresh_pools, fresh_nodes);
    let pools = if prepared.pools.fits(input, context) {
        &prepared.pools
    } else {
        fresh_pools = PreparedPools::new(input, context, &daemons());
        &fresh_pools
    };
    let nodes = if prepared.nodes.fits(input) {
        &prepared.nodes
    } else {
        fresh_nodes = PreparedNodes::new(input, &daemons());
        &fresh_nodes
    };
    Scheduler::new(input, context, pools, nodes).run(fallback.unwrap_or(&no_fallback))
}

/// An existing node during the pass.
struct Node<'a> {
    input: &'a ExistingNode,
    /// Labels (plus the hostname), narrowed by the pods placed in this pass: the input's own
    /// until a pod narrows them (a consolidation pass builds a scheduler per candidate, and
    /// copying every node's labels each time was most of its cost).
    requirements: Cow<'a, Requirements>,
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
    /// Each node's room, side by side (see [`NodeRoom`]), kept with its `reserved`.
    room: Vec<NodeRoom>,
    pods: Vec<Pod>,
    claims: Vec<Claim>,
    /// The claims in the order they are tried (fewest pods first, then oldest), indexed.
    open: OpenClaims,
    topology: Topology<'a>,
    /// Whether relaxation may tolerate PreferNoSchedule taints (some pool has one).
    prefer_no_schedule_relaxable: bool,
    /// Counter for the hostname placeholders of new claims.
    hostnames: usize,
    /// Per pool: [`Facts`](filter::Facts) of its candidate types for requirement sets seen so far.
    facts: RefCell<Vec<FactsCache>>,
    /// Recent option filterings of pods that ask for no host port.
    filtered: RefCell<FilterMemo>,
}

impl<'a> Scheduler<'a> {
    fn new(
        input: &'a SchedulingInput,
        context: &'a SchedulingContext,
        pools: &'a PreparedPools,
        nodes: &'a PreparedNodes,
    ) -> Self {
        let policy = &input.label_policy;
        let ignore_preferences = context.preference_policy == PreferencePolicy::Ignore;

        let skipped_pools = pools.skipped.clone();
        let pools: Vec<Pool<'a>> = pools
            .pools
            .iter()
            .map(|(index, tables)| Pool::new(&input.nodepools[*index], tables))
            .collect();

        // Host ports and attached volumes of the bound pods (most have neither, so the pending
        // set is consulted only for those that do).
        let pending: BTreeSet<&super::types::PodKey> = input.pods.iter().map(|p| &p.key).collect();
        let mut ports: BTreeMap<&str, Vec<HostPort>> = BTreeMap::new();
        let mut volumes: BTreeMap<&str, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
        let holding = context
            .bound_pods
            .iter()
            .filter(|b| !b.host_ports.is_empty() || !b.volumes.is_empty());
        for b in holding.filter(|b| !pending.contains(&b.key)) {
            if !b.host_ports.is_empty() {
                ports
                    .entry(b.node.as_str())
                    .or_default()
                    .extend(b.host_ports.iter().cloned());
            }
            if !b.volumes.is_empty() {
                attach(volumes.entry(b.node.as_str()).or_default(), &b.volumes);
            }
        }
        let nodes: Vec<Node<'a>> = nodes
            .nodes
            .iter()
            .filter(|facts| input.nodes[facts.index].schedulable)
            .map(|facts| {
                let node = &input.nodes[facts.index];
                Node {
                    input: node,
                    requirements: Cow::Borrowed(
                        facts.with_hostname.as_ref().unwrap_or(&node.requirements),
                    ),
                    available: facts.available.clone(),
                    reserved: facts.reserved.clone(),
                    ports: ports.remove(node.name.as_str()).unwrap_or_default(),
                    volumes: volumes.remove(node.name.as_str()).unwrap_or_default(),
                }
            })
            .collect();

        let room = nodes
            .iter()
            .map(|n| NodeRoom::new(&n.available, &n.reserved))
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
        // The nodes' hostnames are domains of the groups on that key (none without groups).
        if topology.has_groups() {
            for node in &nodes {
                topology.register(
                    HOSTNAME_LABEL,
                    topology::hostname(node.input),
                    Registered::NONE,
                );
            }
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
            room,
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
        let mut targets: Vec<Option<Target>> = vec![None; count];
        let mut errors: Vec<Option<String>> = vec![None; count];
        // Real pods first, to the end of their relaxation; then the CapacityBuffers' virtual
        // pods, in the room the real pods left.
        let (real, buffers): (Vec<usize>, Vec<usize>) = queue_order(&self.input.pods)
            .into_iter()
            .partition(|&p| self.input.pods[p].capacity_buffer.is_none());
        for order in [real, buffers] {
            self.place_all(order, &mut targets, &mut errors);
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

    /// Places the pods of `order` (queue order), retrying a pod that fits nowhere after the
    /// others with one preference relaxed each time, until a full round makes no progress.
    fn place_all(
        &mut self,
        order: Vec<usize>,
        targets: &mut [Option<Target>],
        errors: &mut [Option<String>],
    ) {
        let mut queue: VecDeque<usize> = order.into();
        // Queue length when each pod was last pushed back without being relaxed: meeting it
        // again at the front with the same length means a full round without progress.
        let mut pushed_at: Vec<Option<usize>> = vec![None; targets.len()];
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
    }

    /// Places one pod, or says why it fits nowhere.
    fn add(&mut self, p: usize) -> Result<Target, String> {
        let input = &self.input.pods[p];

        for i in 0..self.nodes.len() {
            if !self.room[i].may_fit(&input.requests) {
                continue;
            }
            if let Some(requirements) = self.try_node(i, p) {
                self.room[i].take(&input.requests);
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
    fn try_node(&self, i: usize, p: usize) -> Option<Cow<'a, Requirements>> {
        let node = &self.nodes[i];
        let input = &self.input.pods[p];
        let pod = &self.pods[p];
        if input.moved_by_consolidation && node.input.under_consolidate_after {
            return None;
        }
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
                .map(|r| r.map_or_else(|| node.requirements.clone(), Cow::Owned))
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
}
