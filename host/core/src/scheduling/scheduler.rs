//! The provisioning pass: queue, placement on existing nodes, open claims and new claims,
//! then finalization of the claims.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::instance_type::{InstanceType, MinValuesError, satisfies_min_values};
use crate::labels::{
    CAPACITY_TYPE_LABEL, HOSTNAME_LABEL, INITIALIZED_LABEL, INSTANCE_TYPE_LABEL, LabelPolicy,
    NODEPOOL_LABEL, REGISTERED_LABEL,
};
use crate::nodeclaim::{MAX_INSTANCE_TYPES, NodeClaimSpec};
use crate::requirements::{NO_KEYS, Requirement, Requirements};
use crate::resources::{NODES, Resources};
use crate::taints::{Taint, TaintEffect};

use super::daemons::{Daemon, alternatives, tolerated, tolerates};
use super::pricing::{FallbackPrice, no_fallback, order_cheapest_first};
use super::render;
use super::types::{
    ExistingNode, NewNodeClaim, NodePool, Placement, PodPlacement, SchedulingInput,
    SchedulingResult,
};

/// Reason given to every pod that fits no existing node when there is no NodePool at all.
const NO_NODEPOOLS: &str = "no dynamic nodepools found";

/// Runs one provisioning pass over `input`.
///
/// Pods are tried in upstream's order (CPU request descending, then memory descending, then
/// creation time, then UID; then key, for total determinism). Each pod goes to the first of:
/// an existing node (initialized nodes first, then by name) whose taints the pod tolerates,
/// whose remaining allocatable (after reserving DaemonSet pods not yet running there) holds
/// the pod and whose labels are strictly compatible with the pod's; a NodeClaim opened
/// earlier in this pass (fewest pods first) that can still take it; a new NodeClaim from the
/// first NodePool (weight descending, then name descending, as upstream) that can take it. A
/// pod that fits nowhere is retried after the others, with its next required node-affinity
/// term, or tolerating PreferNoSchedule taints once nothing else is left to relax, until a
/// full round makes no progress.
///
/// Prices of offerings without a price stay unknown; see [`schedule_with_fallback_price`].
pub fn schedule(input: &SchedulingInput) -> SchedulingResult {
    schedule_with_fallback_price(input, &no_fallback)
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
    Scheduler::new(input).run(fallback)
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
    /// DaemonSet requests for the pool regardless of instance type, as reported in reasons.
    overhead: Resources,
    /// Remaining limits, reduced as claims are opened.
    remaining: Option<BTreeMap<String, i128>>,
}

impl Pool<'_> {
    fn name(&self) -> &str {
        &self.input.template.nodepool
    }

    fn instance_type(&self, index: usize) -> &InstanceType {
        &self.input.instance_types[index]
    }
}

/// An existing node during the pass.
struct Node<'a> {
    input: &'a ExistingNode,
    /// Labels, narrowed by the pods placed in this pass.
    requirements: Requirements,
    /// Allocatable minus what bound pods request.
    available: Resources,
    /// DaemonSet pods still to come plus the pods placed in this pass.
    reserved: Resources,
}

/// A NodeClaim being filled.
struct Claim {
    pool: usize,
    requirements: Requirements,
    /// Instance type indices (into the pool's list) that can still hold every pod.
    options: Vec<usize>,
    /// Summed pod requests (DaemonSet overhead is added per instance type when filtering and
    /// once at finalization).
    requests: Resources,
    pods: Vec<usize>,
}

/// A pod during the pass.
struct Pod {
    /// Placement alternatives: node selector ∩ each required affinity term.
    alternatives: Vec<Requirements>,
    /// The alternative in use (earlier ones were relaxed away).
    current: usize,
    /// Whether relaxation has added a toleration for every PreferNoSchedule taint.
    tolerate_prefer_no_schedule: bool,
}

impl Pod {
    fn requirements(&self) -> &Requirements {
        &self.alternatives[self.current]
    }
}

/// Where a pod was put during the pass.
#[derive(Clone, Copy)]
enum Target {
    Node(usize),
    Claim(usize),
}

/// A pod accepted by a claim: the claim's new state.
struct Accepted {
    requirements: Requirements,
    options: Vec<usize>,
    requests: Resources,
}

/// Which criteria at least one instance type met while filtering, for upstream's reasons.
#[derive(Default)]
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
    pools: Vec<Pool<'a>>,
    skipped_pools: Vec<String>,
    nodes: Vec<Node<'a>>,
    pods: Vec<Pod>,
    claims: Vec<Claim>,
    /// Whether relaxation may tolerate PreferNoSchedule taints (some pool has one).
    prefer_no_schedule_relaxable: bool,
    /// Counter for the hostname placeholders of new claims.
    hostnames: usize,
}

impl<'a> Scheduler<'a> {
    fn new(input: &'a SchedulingInput) -> Self {
        let policy = &input.label_policy;
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
            let mut candidates: Vec<usize> = pool
                .instance_types
                .iter()
                .enumerate()
                .filter(|(_, t)| {
                    t.requirements().is_intersecting(&requirements)
                        && t.has_available_compatible(&requirements, policy)
                })
                .map(|(i, _)| i)
                .collect();
            if requirements.has_min_values() {
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
            for &i in &candidates {
                let t = &pool.instance_types[i];
                type_overhead[i] = daemons
                    .iter()
                    .filter(|d| d.runs_on_new(taints, &requirements, policy, Some(t)))
                    .map(Daemon::requests)
                    .sum();
            }
            pools.push(Pool {
                input: pool,
                requirements,
                candidates,
                type_overhead,
                overhead,
                remaining: pool.limits.as_ref().map(|l| l.remaining()),
            });
        }

        let mut schedulable: Vec<&ExistingNode> =
            input.nodes.iter().filter(|n| n.schedulable).collect();
        schedulable.sort_by(|a, b| a.in_flight.cmp(&b.in_flight).then(a.name.cmp(&b.name)));
        let nodes = schedulable
            .into_iter()
            .map(|node| {
                let daemon_total: Resources = daemons
                    .iter()
                    .filter(|d| d.runs_on_existing(&node.taints, &node.requirements))
                    .map(Daemon::requests)
                    .sum();
                Node {
                    input: node,
                    requirements: node.requirements.clone(),
                    available: &node.allocatable - &node.requested,
                    reserved: &daemon_total - &node.daemon_requested,
                }
            })
            .collect();

        let pods = input
            .pods
            .iter()
            .map(|p| Pod {
                alternatives: alternatives(&p.node_selector, &p.required_affinity),
                current: 0,
                tolerate_prefer_no_schedule: false,
            })
            .collect();

        let prefer_no_schedule_relaxable = input.nodepools.iter().any(|p| {
            p.template
                .taints
                .iter()
                .any(|t| t.effect == TaintEffect::PreferNoSchedule)
        });

        Scheduler {
            input,
            policy,
            pools,
            skipped_pools,
            nodes,
            pods,
            claims: Vec::new(),
            prefer_no_schedule_relaxable,
            hostnames: 0,
        }
    }

    /// Pod indices in upstream's queue order.
    fn queue_order(&self) -> Vec<usize> {
        let pods = &self.input.pods;
        let mut order: Vec<usize> = (0..pods.len()).collect();
        order.sort_by(|&a, &b| {
            let (pa, pb) = (&pods[a], &pods[b]);
            pb.requests
                .cpu_millis
                .cmp(&pa.requests.cpu_millis)
                .then(pb.requests.memory_bytes.cmp(&pa.requests.memory_bytes))
                .then(pa.created.cmp(&pb.created))
                .then_with(|| pa.uid.cmp(&pb.uid))
                .then_with(|| pa.key.cmp(&pb.key))
        });
        order
    }

    fn run(mut self, fallback: FallbackPrice<'_>) -> SchedulingResult {
        let count = self.input.pods.len();
        let mut queue: VecDeque<usize> = self.queue_order().into();
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

    /// Loosens one preference of a pod that could not be placed; false when nothing is left.
    fn relax(&mut self, p: usize) -> bool {
        let pod = &mut self.pods[p];
        if pod.current + 1 < pod.alternatives.len() {
            pod.current += 1;
            return true;
        }
        if self.prefer_no_schedule_relaxable && !pod.tolerate_prefer_no_schedule {
            pod.tolerate_prefer_no_schedule = true;
            return true;
        }
        false
    }

    /// Places one pod, or says why it fits nowhere.
    fn add(&mut self, p: usize) -> Result<Target, String> {
        let input = &self.input.pods[p];
        let pod = &self.pods[p];

        for (i, node) in self.nodes.iter_mut().enumerate() {
            if !tolerates(
                &input.tolerations,
                &node.input.taints,
                pod.tolerate_prefer_no_schedule,
            ) {
                continue;
            }
            if !fits_sum(&[&node.reserved, &input.requests], &node.available) {
                continue;
            }
            if !node
                .requirements
                .is_compatible(pod.requirements(), &NO_KEYS)
            {
                continue;
            }
            node.reserved += &input.requests;
            node.requirements.add_all(pod.requirements());
            return Ok(Target::Node(i));
        }

        let mut order: Vec<usize> = (0..self.claims.len()).collect();
        order.sort_by_key(|&c| self.claims[c].pods.len());
        for c in order {
            if let Ok(accepted) = self.try_claim(&self.claims[c], p, false) {
                apply(&mut self.claims[c], accepted, p);
                return Ok(Target::Claim(c));
            }
        }

        let mut reasons = Vec::new();
        for (index, pool) in self.pools.iter().enumerate() {
            let options: Vec<usize> = match &pool.remaining {
                None => pool.candidates.clone(),
                Some(remaining) => pool
                    .candidates
                    .iter()
                    .copied()
                    .filter(|&t| within_limits(pool.instance_type(t), remaining))
                    .collect(),
            };
            if options.is_empty() {
                reasons.push(format!(
                    "all available instance types exceed limits for nodepool: {:?}",
                    pool.name()
                ));
                continue;
            }
            self.hostnames += 1;
            let mut requirements = pool.requirements.clone();
            requirements.add(Requirement::in_values(
                HOSTNAME_LABEL,
                [format!("hostname-placeholder-{:04}", self.hostnames)],
            ));
            let mut claim = Claim {
                pool: index,
                requirements,
                options,
                requests: Resources::new(),
                pods: Vec::new(),
            };
            match self.try_claim(&claim, p, true) {
                Ok(accepted) => {
                    apply(&mut claim, accepted, p);
                    let pool = &mut self.pools[index];
                    if let Some(remaining) = pool.remaining.as_mut() {
                        subtract_max(
                            remaining,
                            claim
                                .options
                                .iter()
                                .map(|&t| pool.input.instance_types[t].capacity()),
                        );
                    }
                    self.claims.push(claim);
                    return Ok(Target::Claim(self.claims.len() - 1));
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

    /// Whether `claim` can take pod `p`; on failure, the reason when `detail` is set.
    fn try_claim(&self, claim: &Claim, p: usize, detail: bool) -> Result<Accepted, Option<String>> {
        let pool = &self.pools[claim.pool];
        let input = &self.input.pods[p];
        let pod = &self.pods[p];
        let pod_requirements = pod.requirements();

        let untolerated: Vec<&Taint> = pool
            .input
            .template
            .taints
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
        let mut requirements = claim.requirements.clone();
        requirements.add_all(pod_requirements);
        let requests = &claim.requests + &input.requests;

        let mut flags = FilterFlags::default();
        let mut options = Vec::new();
        for &t in &claim.options {
            let it = pool.instance_type(t);
            let compatible = it.requirements().is_intersecting(&requirements);
            let fits = fits_sum(&[&requests, &pool.type_overhead[t]], it.allocatable());
            let offering = it.has_available_compatible(&requirements, self.policy);
            flags.record(compatible, fits, offering);
            if compatible && fits && offering {
                options.push(t);
            }
        }
        let mut min_values = None;
        if requirements.has_min_values() && !options.is_empty() {
            let types: Vec<&InstanceType> =
                options.iter().map(|&t| pool.instance_type(t)).collect();
            if let Err(err) = satisfies_min_values(&types, &requirements) {
                min_values = Some(err);
                options.clear();
            }
        }
        if options.is_empty() {
            return Err(detail.then(|| {
                let cumulative = &pool.overhead + &input.requests;
                format!(
                    "no instance type satisfied resources {} and requirements {} ({})",
                    render::resources(&cumulative),
                    render::requirements(&requirements),
                    flags.reason(min_values.as_ref(), &requests)
                )
            }));
        }
        Ok(Accepted {
            requirements,
            options,
            requests,
        })
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
        for (c, claim) in self.claims.iter().enumerate() {
            let pool = &self.pools[claim.pool];
            let template = &pool.input.template;
            let mut requirements = claim.requirements.clone();
            for key in render::SIMULATION_ONLY_KEYS {
                requirements.remove(key);
            }

            let mut kept_indices = claim.options.clone();
            let mut prices = order_cheapest_first(
                &mut kept_indices,
                &pool.input.instance_types,
                &requirements,
                self.policy,
                fallback,
            );
            kept_indices.truncate(MAX_INSTANCE_TYPES);
            prices.truncate(MAX_INSTANCE_TYPES);
            let types: Vec<&InstanceType> = kept_indices
                .iter()
                .map(|&t| pool.instance_type(t))
                .collect();
            if let Err(err) = satisfies_min_values(&types, &requirements) {
                dropped[c] = Some(format!(
                    "pod didn’t schedule because NodePool {:?} couldn’t meet minValues requirements, {err}",
                    template.nodepool
                ));
                continue;
            }
            let daemon_overhead =
                elementwise_min(kept_indices.iter().map(|&i| &pool.type_overhead[i]));

            let capacity_types: BTreeSet<String> = types
                .iter()
                .flat_map(|t| {
                    t.offerings()
                        .available_compatible(&requirements, self.policy)
                })
                .map(|o| o.capacity_type().to_owned())
                .collect();
            let names: Vec<String> = types.iter().map(|t| t.name().to_owned()).collect();
            requirements.add(Requirement::in_values(
                INSTANCE_TYPE_LABEL,
                names.iter().map(String::as_str),
            ));
            if !capacity_types.is_empty() {
                requirements.add(Requirement::in_values(CAPACITY_TYPE_LABEL, capacity_types));
            }

            let mut labels = template.labels.clone();
            labels.insert(NODEPOOL_LABEL.to_owned(), template.nodepool.clone());
            if !template.node_class_ref.kind.is_empty() {
                labels.insert(
                    template.node_class_ref.label_key(),
                    template.node_class_ref.name.clone(),
                );
            }
            for (key, value) in requirements.labels() {
                if !self.policy.is_well_known(&key) && !self.policy.is_restricted(&key) {
                    labels.entry(key).or_insert(value);
                }
            }

            index[c] = Some(kept.len());
            kept.push(NewNodeClaim {
                spec: NodeClaimSpec {
                    nodepool: template.nodepool.clone(),
                    node_class_ref: template.node_class_ref.clone(),
                    requirements,
                    requests: &claim.requests + &daemon_overhead,
                    taints: template.taints.clone(),
                    startup_taints: template.startup_taints.clone(),
                    labels,
                    annotations: template.annotations.clone(),
                    instance_types: names,
                },
                pods: claim
                    .pods
                    .iter()
                    .map(|&p| self.input.pods[p].key.clone())
                    .collect(),
                daemon_overhead,
                launch_price: prices.first().copied().flatten(),
            });
        }
        (kept, index, dropped)
    }
}

/// Whether the sum of `parts` fits `available`, by the rule of [`Resources::fits`] (every
/// requested amount at most the available one; resources nobody asks for are not checked),
/// without building the sum.
pub(super) fn fits_sum(parts: &[&Resources], available: &Resources) -> bool {
    let total = |get: &dyn Fn(&Resources) -> u64| {
        parts.iter().fold(0u64, |sum, r| sum.saturating_add(get(r)))
    };
    total(&|r| r.cpu_millis) <= available.cpu_millis
        && total(&|r| r.memory_bytes) <= available.memory_bytes
        && total(&|r| r.ephemeral_storage_bytes) <= available.ephemeral_storage_bytes
        && total(&|r| r.pods) <= available.pods
        && parts.iter().all(|part| {
            part.extended().all(|(name, _)| {
                let asked = total(&|r| r.get(name));
                asked == 0 || asked <= available.get(name)
            })
        })
}

/// Records an accepted pod on a claim.
fn apply(claim: &mut Claim, accepted: Accepted, p: usize) {
    claim.requirements = accepted.requirements;
    claim.options = accepted.options;
    claim.requests = accepted.requests;
    claim.pods.push(p);
}

/// Whether launching `t` stays within the remaining limits: its capacity of every limited
/// resource fits what is left, and a node is left when `nodes` is limited.
fn within_limits(t: &InstanceType, remaining: &BTreeMap<String, i128>) -> bool {
    remaining.iter().all(|(name, left)| {
        if name == NODES {
            *left >= 1
        } else {
            i128::from(t.capacity().get(name)) <= *left
        }
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
            capacities
                .clone()
                .map(|c| i128::from(c.get(name)))
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
        let current: Vec<(String, u64)> = out.iter().map(|(k, v)| (k.to_owned(), v)).collect();
        for (name, amount) in current {
            out.set(&name, amount.min(r.get(&name)));
        }
    }
    out
}
