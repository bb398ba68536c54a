//! Scheduling simulations of removing candidates: one copy of the scheduler's input per
//! method, with the candidates' nodes closed and their pods added as pending for each try, then
//! restored (nothing of the cluster is rebuilt per candidate).
//!
//! **Pods that fit on no other node.** A simulation places the candidate's pods against the
//! whole cluster, so a pass that tries every node costs the square of the cluster. When no
//! pod of the candidate fits on any other node by CPU or memory alone (a full cluster, the
//! worst case of consolidation), the existing nodes cannot take part in the outcome: every
//! pod goes to new NodeClaims or nowhere. If, besides, nothing about the rest of the cluster
//! can shape those NodeClaims (no pending pods, no topology spread or pod (anti-)affinity on
//! the candidate's pods, no bound pod with anti-affinity), the simulation is run against the
//! NodePools alone: the same pods, the same pools, the same DaemonSets, no nodes. Its result
//! is the full simulation's, at the cost of the candidate's pods instead of the cluster's
//! (a test compares the two on every fixture).
//!
//! **Candidates alike.** A pools-only simulation depends on the candidate's pods alone, and
//! on them only through their shapes (everything but name, UID and creation time) in the
//! scheduler's queue order. Nodes of one workload often carry pods of the same shapes, so
//! a pass keeps each pools-only outcome by those shapes and answers a candidate alike from
//! it, pod for pod by queue position (the rejection still names the candidate's own first
//! pod that fits nowhere, the new NodeClaims list its own pods).

use std::collections::{BTreeSet, HashMap};

use super::Snapshot;
use super::candidate::Candidate;
use super::reasons::Rejection;
use crate::scheduling::{
    self, NewNodeClaim, PendingPod, Placement, PodKey, Prepared, SchedulingContext,
    SchedulingInput, SchedulingResult,
};

/// Where the candidates' pods would go.
pub(crate) struct Simulated {
    /// The NodeClaims the pass would open (pending pods' included).
    pub new_claims: Vec<NewNodeClaim>,
}

/// Where the pending pods alone would go.
#[derive(Debug, Clone, Default)]
pub(crate) struct Baseline {
    /// Nodes that pending pods would be placed on: nominated for them, as upstream's
    /// provisioner would nominate them.
    pub receiving: BTreeSet<String>,
    /// Nodes that CapacityBuffers' virtual pods would be placed on (and no real pending
    /// pod): they hold a buffer's room, so emptiness leaves them, but they are not nominated
    /// (drift and expiration still apply, as upstream).
    pub holding_buffers: BTreeSet<String>,
    /// How many new NodeClaims the pending pods need.
    pub new_claims: usize,
}

/// The most free CPU and memory among the schedulable nodes, and on which nodes: the two
/// largest of each, so that the largest apart from one removed node is known.
#[derive(Debug, Clone, Default)]
struct MostFree {
    cpu: [(u64, Option<usize>); 2],
    memory: [(u64, Option<usize>); 2],
}

impl MostFree {
    fn of(nodes: &[crate::scheduling::ExistingNode]) -> MostFree {
        let mut most = MostFree::default();
        let keep = |top: &mut [(u64, Option<usize>); 2], value: u64, i: usize| {
            if value > top[0].0 || top[0].1.is_none() {
                top[1] = top[0];
                top[0] = (value, Some(i));
            } else if value > top[1].0 || top[1].1.is_none() {
                top[1] = (value, Some(i));
            }
        };
        for (i, n) in nodes.iter().enumerate().filter(|(_, n)| n.schedulable) {
            let free = n.allocatable.saturating_sub(&n.requested);
            keep(&mut most.cpu, free.cpu_millis, i);
            keep(&mut most.memory, free.memory_bytes, i);
        }
        most
    }

    /// Whether `pod` fits on no schedulable node but `closed` by CPU or by memory alone.
    fn fits_nowhere(&self, pod: &PendingPod, closed: usize) -> bool {
        let largest = |top: &[(u64, Option<usize>); 2]| {
            top.iter()
                .find(|(_, i)| i.is_some() && *i != Some(closed))
                .map_or(0, |(v, _)| *v)
        };
        pod.requests.cpu_millis > largest(&self.cpu)
            || pod.requests.memory_bytes > largest(&self.memory)
    }
}

/// The scheduler's input without nodes, pods or bound pods: what a simulation of pods that fit
/// on no node needs (see the module's documentation).
struct PoolsOnly {
    input: SchedulingInput,
    context: SchedulingContext,
}

/// A pools-only simulation's outcome, kept for the candidates whose pods have the same
/// shapes in the same queue order (see the module's documentation).
struct AloneOutcome {
    /// The simulated pods, in queue order: what a candidate's pods must match, shape for
    /// shape.
    pods: Vec<PendingPod>,
    /// Why the pod at each queue position could not be placed, if it could not.
    unschedulable: Vec<Option<String>>,
    /// The NodeClaims opened, their `pods` left empty (see `claim_pods`).
    new_claims: Vec<NewNodeClaim>,
    /// Each NodeClaim's pods, by queue position, in the order they were placed.
    claim_pods: Vec<Vec<usize>>,
}

impl AloneOutcome {
    /// The outcome `result` of simulating `pods`, whose queue order is `order`.
    fn new(pods: &[PendingPod], order: &[usize], mut result: SchedulingResult) -> AloneOutcome {
        let position = positions(order);
        let index: HashMap<&PodKey, usize> =
            pods.iter().enumerate().map(|(i, p)| (&p.key, i)).collect();
        let claim_pods = result
            .new_claims
            .iter_mut()
            .map(|claim| {
                std::mem::take(&mut claim.pods)
                    .iter()
                    .map(|key| position[index[key]])
                    .collect()
            })
            .collect();
        let mut reasons: Vec<Option<String>> = result
            .placements
            .into_iter()
            .map(|p| match p.placement {
                Placement::Unschedulable { reason } => Some(reason),
                _ => None,
            })
            .collect();
        AloneOutcome {
            pods: order.iter().map(|&i| pods[i].clone()).collect(),
            unschedulable: order.iter().map(|&i| reasons[i].take()).collect(),
            new_claims: result.new_claims,
            claim_pods,
        }
    }

    /// Whether `pods`, in their queue `order`, have the shapes this outcome was simulated for.
    fn matches(&self, pods: &[PendingPod], order: &[usize]) -> bool {
        self.pods.len() == order.len()
            && order
                .iter()
                .zip(&self.pods)
                .all(|(&i, shape)| shape.same_shape(&pods[i]))
    }

    /// The outcome for `pods` (queue `order`), which [`matches`](Self::matches): rejected for
    /// the first pod in input order that fits nowhere, as the full simulation would be, or
    /// the new NodeClaims with `pods`' keys.
    fn answer(&self, pods: &[PendingPod], order: &[usize]) -> Result<Simulated, Rejection> {
        let position = positions(order);
        let first_unplaced = pods
            .iter()
            .zip(&position)
            .find_map(|(pod, &q)| self.unschedulable[q].as_ref().map(|reason| (pod, reason)));
        if let Some((pod, reason)) = first_unplaced {
            return Err(Rejection::Unschedulable {
                pod: pod.key.clone(),
                reason: reason.clone(),
            });
        }
        let new_claims = self
            .new_claims
            .iter()
            .zip(&self.claim_pods)
            .map(|(claim, queued)| NewNodeClaim {
                pods: queued.iter().map(|&q| pods[order[q]].key.clone()).collect(),
                ..claim.clone()
            })
            .collect();
        Ok(Simulated { new_claims })
    }
}

/// Each pod's position in the queue `order` (the inverse permutation).
fn positions(order: &[usize]) -> Vec<usize> {
    let mut position = vec![0; order.len()];
    for (q, &i) in order.iter().enumerate() {
        position[i] = q;
    }
    position
}

/// Where [`AloneOutcome`]s are looked up first: pod count and total CPU and memory requests.
type AloneKey = (usize, u64, u64);

fn alone_key(pods: &[PendingPod]) -> AloneKey {
    pods.iter().fold((pods.len(), 0, 0), |(n, cpu, memory), p| {
        (
            n,
            cpu.wrapping_add(p.requests.cpu_millis),
            memory.wrapping_add(p.requests.memory_bytes),
        )
    })
}

/// What `input`'s simulations share ([`Prepared`]: its NodePools and nodes), in `slot`, on
/// first use.
fn prepare<'p>(
    slot: &'p mut Option<Prepared>,
    input: &SchedulingInput,
    context: &SchedulingContext,
) -> &'p Prepared {
    slot.get_or_insert_with(|| Prepared::new(input, context))
}

/// Runs removal simulations against one snapshot.
pub(crate) struct Simulator<'a> {
    snapshot: &'a Snapshot,
    input: SchedulingInput,
    pending: usize,
    node_index: HashMap<String, usize>,
    baseline: Option<Baseline>,
    /// Free room of the nodes, for [`MostFree::fits_nowhere`].
    most_free: MostFree,
    /// Set when the cluster allows the pools-only simulation at all (no bound pod with
    /// anti-affinity); built on first use.
    pools_only: Option<Option<PoolsOnly>>,
    /// The NodePools and nodes prepared once for every simulation (they, the DaemonSets and
    /// the policies are the same in all of them; the pools-only ones use the pools part, having
    /// no nodes); on first use.
    prepared: Option<Prepared>,
    /// The pools-only outcomes so far, for candidates alike (see the module's documentation).
    alone: HashMap<AloneKey, Vec<AloneOutcome>>,
    /// Whether the pools-only simulation may be used (tests turn it off to compare).
    pub shortcut: bool,
    /// How many simulations ran (or were answered from a candidate alike).
    pub count: usize,
    /// How many of them were pools-only.
    pub shortcuts: usize,
    /// How many of those were answered from a candidate alike.
    pub reused: usize,
}

impl<'a> Simulator<'a> {
    pub fn new(snapshot: &'a Snapshot) -> Self {
        let mut input = snapshot.scheduling.clone();
        // Destination protection: the nodes whose pods changed within their pool's
        // consolidateAfter receive no pods moved by consolidation.
        let protected: BTreeSet<&str> = snapshot
            .candidates
            .iter()
            .filter(|c| {
                c.initialized
                    && !c.consolidatable
                    && snapshot
                        .pools
                        .get(&c.pool)
                        .and_then(|p| p.consolidate_after)
                        .is_some_and(|after| !after.is_zero())
            })
            .map(|c| c.node.as_str())
            .collect();
        for node in &mut input.nodes {
            node.under_consolidate_after |= protected.contains(node.name.as_str());
        }
        let node_index = input
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        Simulator {
            snapshot,
            prepared: None,
            pending: input.pods.len(),
            most_free: MostFree::of(&input.nodes),
            input,
            node_index,
            baseline: None,
            pools_only: None,
            alone: HashMap::new(),
            shortcut: true,
            count: 0,
            shortcuts: 0,
            reused: 0,
        }
    }

    /// The pools-only input, when the cluster allows it: no bound pod with anti-affinity (it
    /// could keep a new node's domain from the candidate's pods).
    fn pools_only(&mut self) -> Option<&mut PoolsOnly> {
        if self.pools_only.is_none() {
            let context = &self.snapshot.context;
            let allowed = context
                .bound_pods
                .iter()
                .all(|b| b.anti_affinity.is_empty());
            self.pools_only = Some(allowed.then(|| PoolsOnly {
                input: SchedulingInput {
                    pods: Vec::new(),
                    nodes: Vec::new(),
                    nodepools: self.input.nodepools.clone(),
                    daemons: self.input.daemons.clone(),
                    label_policy: self.input.label_policy.clone(),
                },
                context: SchedulingContext {
                    bound_pods: Vec::new(),
                    preference_policy: context.preference_policy,
                    min_values_policy: context.min_values_policy,
                    namespace_labels: context.namespace_labels.clone(),
                },
            }));
        }
        self.pools_only.as_mut().and_then(Option::as_mut)
    }

    /// The pools-only simulation of removing `candidate`, when it gives the full one's result
    /// (see the module's documentation), or the outcome of a candidate alike; `None` otherwise.
    fn remove_alone(&mut self, candidate: &Candidate) -> Option<Result<Simulated, Rejection>> {
        if !self.shortcut || self.pending > 0 || candidate.pods.is_empty() {
            return None;
        }
        let closed = *self.node_index.get(&candidate.node)?;
        let unconstrained = |p: &PendingPod| {
            p.topology_spread.is_empty()
                && p.pod_affinity.is_empty()
                && p.preferred_pod_affinity.is_empty()
                && p.pod_anti_affinity.is_empty()
                && p.preferred_pod_anti_affinity.is_empty()
        };
        if !candidate
            .pods
            .iter()
            .all(|p| unconstrained(p) && self.most_free.fits_nowhere(p, closed))
        {
            return None;
        }
        self.pools_only()?;
        self.shortcuts += 1;
        let pods = &candidate.pods;
        let order = scheduling::queue_order(pods);
        let alike = self.alone.entry(alone_key(pods)).or_default();
        if let Some(outcome) = alike.iter().find(|o| o.matches(pods, &order)) {
            self.reused += 1;
            return Some(outcome.answer(pods, &order));
        }
        let prepared = prepare(&mut self.prepared, &self.input, &self.snapshot.context);
        let alone = self
            .pools_only
            .as_mut()
            .and_then(Option::as_mut)
            .expect("just built");
        alone.input.pods.extend(pods.iter().cloned());
        let result = scheduling::schedule_prepared(&alone.input, &alone.context, prepared, None);
        alone.input.pods.clear();
        let outcome = AloneOutcome::new(pods, &order, result);
        let answer = outcome.answer(pods, &order);
        alike.push(outcome);
        Some(answer)
    }

    /// The pending pods scheduled alone (one simulation, run once; none without pending pods).
    pub fn baseline(&mut self) -> &Baseline {
        if self.baseline.is_none() {
            let mut baseline = Baseline::default();
            if self.pending > 0 {
                self.count += 1;
                let context = &self.snapshot.context;
                let prepared = prepare(&mut self.prepared, &self.input, context);
                let result = scheduling::schedule_prepared(&self.input, context, prepared, None);
                baseline.new_claims = result.new_claims.len();
                for (pod, p) in self.input.pods.iter().zip(&result.placements) {
                    if let Placement::Existing { node } = &p.placement {
                        if pod.capacity_buffer.is_some() {
                            baseline.holding_buffers.insert(node.clone());
                        } else {
                            baseline.receiving.insert(node.clone());
                        }
                    }
                }
                let receiving = &baseline.receiving;
                baseline.holding_buffers.retain(|n| !receiving.contains(n));
            }
            self.baseline = Some(baseline);
        }
        self.baseline.as_ref().expect("just computed")
    }

    /// Simulates deleting `candidates` (for drift): their pods (with the pending pods) are
    /// scheduled on the other nodes and new NodeClaims. Fails, naming the pod or node, when a
    /// candidate's pod cannot be placed or would land on a node that is not initialized.
    pub fn remove(&mut self, candidates: &[&Candidate]) -> Result<Simulated, Rejection> {
        self.simulate(candidates, false)
    }

    /// [`remove`](Self::remove) for consolidation: the candidates' pods also keep off the
    /// nodes still within their pool's `consolidateAfter`
    /// ([`ExistingNode::under_consolidate_after`](crate::scheduling::ExistingNode::under_consolidate_after)).
    pub fn consolidate(&mut self, candidates: &[&Candidate]) -> Result<Simulated, Rejection> {
        self.simulate(candidates, true)
    }

    fn simulate(
        &mut self,
        candidates: &[&Candidate],
        consolidation: bool,
    ) -> Result<Simulated, Rejection> {
        self.count += 1;
        if let [candidate] = candidates
            && let Some(answer) = self.remove_alone(candidate)
        {
            return answer;
        }
        let mut closed = Vec::new();
        for c in candidates {
            if let Some(&i) = self.node_index.get(&c.node)
                && self.input.nodes[i].schedulable
            {
                self.input.nodes[i].schedulable = false;
                closed.push(i);
            }
            self.input.pods.extend(c.pods.iter().map(|p| PendingPod {
                moved_by_consolidation: consolidation,
                ..p.clone()
            }));
        }
        let context = &self.snapshot.context;
        let prepared = prepare(&mut self.prepared, &self.input, context);
        let result = scheduling::schedule_prepared(&self.input, context, prepared, None);
        self.input.pods.truncate(self.pending);
        for i in closed {
            self.input.nodes[i].schedulable = true;
        }
        let uninitialized: BTreeSet<&str> = self
            .input
            .nodes
            .iter()
            .filter(|n| n.in_flight)
            .map(|n| n.name.as_str())
            .collect();
        for placement in &result.placements[self.pending..] {
            match &placement.placement {
                Placement::Unschedulable { reason } => {
                    return Err(Rejection::Unschedulable {
                        pod: placement.key.clone(),
                        reason: reason.clone(),
                    });
                }
                Placement::Existing { node } if uninitialized.contains(node.as_str()) => {
                    return Err(Rejection::UninitializedNode {
                        pod: placement.key.clone(),
                        node: node.clone(),
                    });
                }
                _ => {}
            }
        }
        Ok(Simulated {
            new_claims: result.new_claims,
        })
    }
}
