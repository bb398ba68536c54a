//! The disruption methods, each a function from a [`Snapshot`] to at most one [`Command`]:
//! emptiness, drift, multi-node and single-node consolidation, tried in that order by
//! [`decide`]; [`validate`] re-checks a command after the validation delay, and [`explain`]
//! says why a node is or is not disrupted.

use std::collections::{BTreeMap, BTreeSet};

use super::candidate::{Candidate, blocked};
use super::reasons::{Blocker, Rejection};
use super::simulate::{Simulated, Simulator};
use super::{Command, Decision, Method, Snapshot};
use crate::instance_type::{InstanceType, satisfies_min_values};
use crate::labels::{
    CAPACITY_TYPE_LABEL, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT, INSTANCE_TYPE_LABEL,
};
use crate::requirements::Requirement;
use crate::scheduling::NewNodeClaim;

/// How many cheaper spot options a single-node spot-to-spot replacement needs (upstream: 15),
/// and how many it launches with.
pub const SPOT_TO_SPOT_MIN_OPTIONS: usize = 15;

/// What one method concluded.
#[derive(Debug, Clone, PartialEq)]
pub struct MethodOutcome {
    /// The method.
    pub method: Method,
    /// The command it would start, if any.
    pub command: Option<Command>,
    /// Candidates it could not consider, with why (claim name, blocker): printed, the text of
    /// `DisruptionBlocked` events. Nodes a method never applies to (not drifted, for drift;
    /// not empty, for emptiness) are left out.
    pub blocked: Vec<(String, Blocker)>,
    /// Candidates it considered but could not disrupt, with why (claim name, rejection):
    /// printed, the text of `Unconsolidatable` events.
    pub rejected: Vec<(String, Rejection)>,
    /// How many scheduling simulations it ran.
    pub simulations: usize,
    /// Why the method did not look at any candidate, when it skipped them all.
    pub skipped: Option<String>,
}

impl MethodOutcome {
    /// `method` having found, blocked, rejected and simulated nothing yet.
    pub fn nothing(method: Method) -> MethodOutcome {
        MethodOutcome {
            method,
            command: None,
            blocked: Vec::new(),
            rejected: Vec::new(),
            simulations: 0,
            skipped: None,
        }
    }
}

/// The first command a pass would start: each method in upstream's order until one decides
/// something. Returns every outcome up to and including that one.
pub fn decide(snapshot: &Snapshot) -> Vec<MethodOutcome> {
    let mut evaluator = Evaluator::new(snapshot);
    decide_with(|method| evaluator.evaluate(method))
}

/// [`decide`] with each method's evaluation done by `evaluate` (the controller wraps
/// [`Evaluator::evaluate`] to time it): methods in order until one returns a command.
pub fn decide_with(mut evaluate: impl FnMut(Method) -> MethodOutcome) -> Vec<MethodOutcome> {
    let mut outcomes = Vec::new();
    for method in Method::ALL {
        let outcome = evaluate(method);
        let done = outcome.command.is_some();
        outcomes.push(outcome);
        if done {
            break;
        }
    }
    outcomes
}

/// What `method` alone would decide on `snapshot`.
pub fn evaluate(snapshot: &Snapshot, method: Method) -> MethodOutcome {
    Evaluator::new(snapshot).evaluate(method)
}

/// [`evaluate`], with the pools-only simulation of pods that fit on no other node allowed or
/// not (see `simulate`), and how many simulations took it.
#[cfg(test)]
pub(crate) fn evaluate_with(
    snapshot: &Snapshot,
    method: Method,
    shortcut: bool,
) -> (MethodOutcome, usize) {
    let mut evaluator = Evaluator::new(snapshot);
    let outcome = evaluator.evaluate_with(method, shortcut);
    (outcome, evaluator.simulations().pools_only)
}

/// The simulation counts of an [`Evaluator`] (see [`Evaluator::simulations`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Simulations {
    /// Every simulation, those answered from a candidate alike included.
    pub total: usize,
    /// Those run against the NodePools alone.
    pub pools_only: usize,
    /// Those of the pools-only ones answered from a candidate alike.
    pub reused: usize,
}

/// The methods of one pass over one snapshot, evaluated with one simulator: its copy of the
/// scheduler's input, its prepared NodePools and nodes and the pending pods' baseline are
/// built once for the pass instead of once per method.
pub struct Evaluator<'s> {
    snapshot: &'s Snapshot,
    sim: Simulator<'s>,
}

impl<'s> Evaluator<'s> {
    /// An evaluator of `snapshot`'s methods.
    pub fn new(snapshot: &'s Snapshot) -> Self {
        Evaluator {
            snapshot,
            sim: Simulator::new(snapshot),
        }
    }

    /// How many simulations the evaluations so far took: in all, against the NodePools alone
    /// (candidates whose pods fit on no other node), and of those, answered from a candidate
    /// alike.
    pub fn simulations(&self) -> Simulations {
        Simulations {
            total: self.sim.count,
            pools_only: self.sim.shortcuts,
            reused: self.sim.reused,
        }
    }

    /// What `method` alone would decide on the snapshot.
    pub fn evaluate(&mut self, method: Method) -> MethodOutcome {
        self.evaluate_with(method, true)
    }

    /// [`evaluate`](Self::evaluate), with the pools-only shortcut allowed or not.
    pub(crate) fn evaluate_with(&mut self, method: Method, shortcut: bool) -> MethodOutcome {
        let snapshot = self.snapshot;
        let sim = &mut self.sim;
        let count = sim.count;
        sim.shortcut = shortcut;
        let mut outcome = MethodOutcome::nothing(method);
        let eligible = eligible(snapshot, method, sim, &mut outcome.blocked);
        match method {
            Method::Emptiness => {
                outcome.command = emptiness(snapshot, &eligible, &mut outcome.blocked)
            }
            Method::StaticDrift => {
                outcome.command = static_drift(snapshot, &eligible, &mut outcome.blocked)
            }
            Method::Drift => drift(snapshot, sim, eligible, &mut outcome),
            Method::MultiNodeConsolidation => multi_node(snapshot, sim, eligible, &mut outcome),
            Method::SingleNodeConsolidation => single_node(snapshot, sim, eligible, &mut outcome),
            Method::Expiration => outcome.command = expiration(&eligible),
        }
        outcome.simulations = sim.count - count;
        outcome
    }
}

/// Candidates `method` may consider, in its order; the others that it would apply to are
/// recorded in `blocked`. Besides [`blocked`]'s rules, a node that pending pods would be placed
/// on is nominated for them (except for expiration, which is forceful).
fn eligible<'s>(
    snapshot: &'s Snapshot,
    method: Method,
    sim: &mut Simulator<'_>,
    blocked_out: &mut Vec<(String, Blocker)>,
) -> Vec<&'s Candidate> {
    let mut out = Vec::new();
    for c in &snapshot.candidates {
        let verdict = blocked(snapshot, c, method).or_else(|| {
            if method == Method::Expiration {
                return None;
            }
            let baseline = sim.baseline();
            if baseline.receiving.contains(&c.node) {
                Some(Blocker::Nominated)
            } else if method == Method::Emptiness && baseline.holding_buffers.contains(&c.node) {
                Some(Blocker::CapacityBuffer)
            } else {
                None
            }
        });
        match verdict {
            None => out.push(c),
            Some(reason) => {
                let relevant = match method {
                    Method::Expiration => false,
                    Method::Emptiness => c.is_empty(),
                    Method::Drift => {
                        c.drifted.is_some()
                            && !snapshot.pools.get(&c.pool).is_some_and(|p| p.is_static)
                    }
                    Method::StaticDrift => {
                        c.drifted.is_some()
                            && snapshot.pools.get(&c.pool).is_some_and(|p| p.is_static)
                    }
                    _ => !c.is_empty(),
                };
                if relevant {
                    blocked_out.push((c.claim.clone(), reason));
                }
            }
        }
    }
    match method {
        Method::Drift | Method::StaticDrift => out.sort_by(|a, b| {
            let since = |c: &Candidate| c.drifted.as_ref().map(|d| d.since);
            b.is_empty()
                .cmp(&a.is_empty())
                .then(since(a).cmp(&since(b)))
                .then(a.claim.cmp(&b.claim))
        }),
        _ => out.sort_by(|a, b| {
            b.savings_ratio()
                .total_cmp(&a.savings_ratio())
                .then(a.claim.cmp(&b.claim))
        }),
    }
    out
}

/// Each pool's allowance for `method`'s reason, with invalid budgets reported once.
fn allowances(
    snapshot: &Snapshot,
    method: Method,
    candidates: &[&Candidate],
) -> BTreeMap<String, u64> {
    let pools: BTreeSet<&str> = candidates.iter().map(|c| c.pool.as_str()).collect();
    pools
        .into_iter()
        .map(|p| {
            (
                p.to_string(),
                snapshot.allowance(p, method.reason()).allowed,
            )
        })
        .collect()
}

fn budget_blocked(pool: &str, method: Method) -> Blocker {
    Blocker::Budget {
        pool: pool.to_string(),
        reason: method.reason(),
    }
}

/// Emptiness: every eligible empty node, within its pool's budget, in one delete command.
fn emptiness(
    snapshot: &Snapshot,
    eligible: &[&Candidate],
    blocked_out: &mut Vec<(String, Blocker)>,
) -> Option<Command> {
    let mut left = allowances(snapshot, Method::Emptiness, eligible);
    let mut chosen = Vec::new();
    for c in eligible {
        let slot = left.entry(c.pool.clone()).or_default();
        if *slot == 0 {
            blocked_out.push((c.claim.clone(), budget_blocked(&c.pool, Method::Emptiness)));
            continue;
        }
        *slot -= 1;
        chosen.push(*c);
    }
    if chosen.is_empty() {
        return None;
    }
    let saving: f64 = chosen.iter().map(|c| c.price_or_zero()).sum();
    Some(Command {
        method: Method::Emptiness,
        candidates: chosen.iter().map(|c| c.claim.clone()).collect(),
        replacements: Vec::new(),
        saving_per_hour: saving,
        explanation: format!("{} empty: delete {}", count(chosen.len()), names(&chosen)),
    })
}

/// Expiration: every node past its `expireAfter`, deleted without budgets or replacements.
fn expiration(eligible: &[&Candidate]) -> Option<Command> {
    if eligible.is_empty() {
        return None;
    }
    Some(Command {
        method: Method::Expiration,
        candidates: eligible.iter().map(|c| c.claim.clone()).collect(),
        replacements: Vec::new(),
        saving_per_hour: eligible.iter().map(|c| c.price_or_zero()).sum(),
        explanation: format!(
            "{} past expireAfter: delete {}",
            count(eligible.len()),
            names(eligible)
        ),
    })
}

/// Static drift: the drifted nodes of static NodePools, each replaced by one NodeClaim from its
/// pool's template, within each pool's `Drifted` budget, in one command.
fn static_drift(
    snapshot: &Snapshot,
    eligible: &[&Candidate],
    blocked_out: &mut Vec<(String, Blocker)>,
) -> Option<Command> {
    let mut left = allowances(snapshot, Method::StaticDrift, eligible);
    let mut chosen = Vec::new();
    let mut replacements = Vec::new();
    for c in eligible {
        let Some(template) = snapshot
            .pools
            .get(&c.pool)
            .and_then(|p| p.template.as_ref())
        else {
            continue;
        };
        let slot = left.entry(c.pool.clone()).or_default();
        if *slot == 0 {
            blocked_out.push((
                c.claim.clone(),
                budget_blocked(&c.pool, Method::StaticDrift),
            ));
            continue;
        }
        *slot -= 1;
        chosen.push(*c);
        replacements.push(super::static_claim(template));
    }
    if chosen.is_empty() {
        return None;
    }
    Some(Command {
        method: Method::StaticDrift,
        candidates: chosen.iter().map(|c| c.claim.clone()).collect(),
        replacements,
        saving_per_hour: 0.0,
        explanation: format!(
            "{} of static NodePools drifted: replace {}",
            count(chosen.len()),
            names(&chosen)
        ),
    })
}

/// Drift: the drifted nodes (empty first, then the longest drifted), one at a time within the
/// budget; the first whose pods can move becomes a delete or a replace with as many new
/// NodeClaims as its pods need.
fn drift(
    snapshot: &Snapshot,
    sim: &mut Simulator<'_>,
    eligible: Vec<&Candidate>,
    outcome: &mut MethodOutcome,
) {
    let left = allowances(snapshot, Method::Drift, &eligible);
    for c in eligible {
        if left.get(&c.pool).copied().unwrap_or(0) == 0 {
            outcome
                .blocked
                .push((c.claim.clone(), budget_blocked(&c.pool, Method::Drift)));
            continue;
        }
        match sim.remove(&[c]) {
            Ok(Simulated { new_claims }) => {
                let reason = c
                    .drifted
                    .as_ref()
                    .map(|d| d.reason.as_str())
                    .unwrap_or_default();
                let replaced: f64 = new_claims.iter().filter_map(|n| n.launch_price).sum();
                let explanation = if new_claims.is_empty() {
                    format!(
                        "drifted ({reason}): delete {}, its pods fit on other nodes",
                        c.claim
                    )
                } else {
                    format!(
                        "drifted ({reason}): replace {} with {}",
                        c.claim,
                        describe_claims(&new_claims)
                    )
                };
                outcome.command = Some(Command {
                    method: Method::Drift,
                    candidates: vec![c.claim.clone()],
                    saving_per_hour: c.price_or_zero() - replaced,
                    replacements: new_claims,
                    explanation,
                });
                break;
            }
            Err(reason) => outcome.rejected.push((c.claim.clone(), reason)),
        }
    }
}

/// Multi-node consolidation: the consolidation candidates within their budgets (at most
/// [`Options::multi_node_limit`](super::Options)), and a binary search for the longest prefix
/// that can be deleted or replaced by one cheaper node.
fn multi_node(
    snapshot: &Snapshot,
    sim: &mut Simulator<'_>,
    eligible: Vec<&Candidate>,
    outcome: &mut MethodOutcome,
) {
    let mut left = allowances(snapshot, Method::MultiNodeConsolidation, &eligible);
    let mut batch = Vec::new();
    for c in eligible {
        let slot = left.entry(c.pool.clone()).or_default();
        if *slot == 0 {
            outcome.blocked.push((
                c.claim.clone(),
                budget_blocked(&c.pool, Method::MultiNodeConsolidation),
            ));
            continue;
        }
        *slot -= 1;
        batch.push(c);
        if batch.len() == snapshot.options.multi_node_limit {
            break;
        }
    }
    if batch.len() < 2 {
        return;
    }
    if let Some(why) = pending_need_nodes(sim) {
        outcome.skipped = Some(why);
        return;
    }
    let (mut lo, mut hi) = (1usize, batch.len() - 1);
    let mut best = None;
    while lo <= hi {
        let mid = (lo + hi) / 2;
        match consolidate(
            snapshot,
            sim,
            &batch[..=mid],
            Method::MultiNodeConsolidation,
        ) {
            Ok(command) => {
                best = Some((mid + 1, command));
                lo = mid + 1;
            }
            Err(_) => {
                if mid == 0 {
                    break;
                }
                hi = mid - 1;
            }
        }
    }
    outcome.command = best.map(|(len, floor)| improve(snapshot, sim, &batch, len, floor));
}

/// Improves upstream's multi-node answer (`floor`: the first `len` of `batch`) without
/// disrupting more pods, within [`Options::multi_node_improvement`](super::Options)
/// simulations: swaps a member of the command for a batch member outside it with no more
/// pods to move (dearest outsiders first, each against the cheapest members first), keeping
/// the first swap whose command saves more per hour, then looks again from there. Every
/// member of `batch` is within its budget already, so any such set is too.
///
/// Why swaps: the prefix can hold a node whose pods only fit on a new node, when an outsider
/// with as few pods fits on the nodes that stay; the swap drops the replacement.
fn improve(
    snapshot: &Snapshot,
    sim: &mut Simulator<'_>,
    batch: &[&Candidate],
    len: usize,
    floor: Command,
) -> Command {
    let mut tries = snapshot.options.multi_node_improvement;
    let mut chosen: Vec<&Candidate> = batch[..len].to_vec();
    let mut best = floor;
    let mut improved = true;
    while improved && tries > 0 {
        improved = false;
        let mut outsiders: Vec<&Candidate> = batch
            .iter()
            .copied()
            .filter(|c| !chosen.iter().any(|m| m.claim == c.claim))
            .collect();
        outsiders.sort_by(|a, b| b.price_or_zero().total_cmp(&a.price_or_zero()));
        'search: for outsider in outsiders {
            let mut members: Vec<usize> = (0..chosen.len())
                .filter(|&i| chosen[i].pods.len() >= outsider.pods.len())
                .collect();
            members.sort_by(|&a, &b| {
                chosen[a]
                    .price_or_zero()
                    .total_cmp(&chosen[b].price_or_zero())
            });
            for i in members {
                if tries == 0 {
                    break 'search;
                }
                tries -= 1;
                let mut trial = chosen.clone();
                trial[i] = outsider;
                if let Ok(command) =
                    consolidate(snapshot, sim, &trial, Method::MultiNodeConsolidation)
                    && command.saving_per_hour > best.saving_per_hour + 1e-9
                {
                    chosen = trial;
                    best = command;
                    improved = true;
                    break 'search;
                }
            }
        }
    }
    best
}

/// Single-node consolidation: one candidate at a time, round robin across NodePools, until one
/// can be deleted or replaced by a cheaper node.
fn single_node(
    snapshot: &Snapshot,
    sim: &mut Simulator<'_>,
    eligible: Vec<&Candidate>,
    outcome: &mut MethodOutcome,
) {
    let left = allowances(snapshot, Method::SingleNodeConsolidation, &eligible);
    let mut by_pool: BTreeMap<&str, Vec<&Candidate>> = BTreeMap::new();
    for c in &eligible {
        by_pool.entry(c.pool.as_str()).or_default().push(c);
    }
    let longest = by_pool.values().map(Vec::len).max().unwrap_or(0);
    let order = (0..longest).flat_map(|i| {
        by_pool
            .values()
            .filter_map(move |list| list.get(i).copied())
    });
    if !eligible.is_empty()
        && let Some(why) = pending_need_nodes(sim)
    {
        outcome.skipped = Some(why);
        return;
    }
    for c in order {
        if left.get(&c.pool).copied().unwrap_or(0) == 0 {
            outcome.blocked.push((
                c.claim.clone(),
                budget_blocked(&c.pool, Method::SingleNodeConsolidation),
            ));
            continue;
        }
        match consolidate(snapshot, sim, &[c], Method::SingleNodeConsolidation) {
            Ok(command) => {
                outcome.command = Some(command);
                break;
            }
            Err(reason) => outcome.rejected.push((c.claim.clone(), reason)),
        }
    }
}

/// Why no consolidation can succeed now, if so: the pending pods alone already need two or
/// more new NodeClaims, and removing nodes only adds pods, so every simulation would need at
/// least as many (upstream simulates each candidate anyway and rejects each one). Checked with
/// one simulation before any candidate's, which keeps consolidation cheap during a scale-out.
fn pending_need_nodes(sim: &mut Simulator<'_>) -> Option<String> {
    let needed = sim.baseline().new_claims;
    (needed >= 2).then(|| {
        format!("pending pods need {needed} new nodes; consolidation waits until they are placed")
    })
}

/// Upstream's `computeConsolidation` for one set of candidates: their pods move to the other
/// nodes (delete) or to the other nodes and one new, cheaper NodeClaim (replace).
fn consolidate(
    snapshot: &Snapshot,
    sim: &mut Simulator<'_>,
    candidates: &[&Candidate],
    method: Method,
) -> Result<Command, Rejection> {
    let Simulated { mut new_claims } = sim.consolidate(candidates)?;
    let cost: f64 = candidates.iter().map(|c| c.price_or_zero()).sum();
    let min_saving = candidates
        .iter()
        .filter_map(|c| snapshot.pools.get(&c.pool).and_then(|p| p.min_saving))
        .collect::<Vec<_>>();
    let check_saving = |saving: f64| -> Result<(), Rejection> {
        if let Some(&minimum) = min_saving.iter().find(|m| !m.met(saving, cost)) {
            return Err(Rejection::BelowMinimumSaving {
                saving,
                cost,
                minimum,
            });
        }
        balanced_score(snapshot, candidates, saving, cost)
    };
    match new_claims.len() {
        0 => {
            check_saving(cost)?;
            return Ok(Command {
                method,
                candidates: candidates.iter().map(|c| c.claim.clone()).collect(),
                replacements: Vec::new(),
                saving_per_hour: cost,
                explanation: format!(
                    "underutilized: delete {}, their pods fit on other nodes; saves {cost:.4}/h",
                    names(candidates)
                ),
            });
        }
        1 => {}
        n => {
            return Err(Rejection::TooManyNewNodes {
                candidates: candidates.iter().map(|c| c.claim.clone()).collect(),
                new_nodes: n,
            });
        }
    }
    let mut claim = new_claims.remove(0);
    let types = pool_types(snapshot, &claim.spec.nodepool);
    let well_known = snapshot.scheduling.label_policy.well_known();
    let capacity = claim.spec.requirements.get(CAPACITY_TYPE_LABEL).cloned();
    let allows = |ct: &str| capacity.as_ref().is_none_or(|r| r.has(ct));
    let all_spot = candidates
        .iter()
        .all(|c| c.capacity_type == CAPACITY_TYPE_SPOT);
    let spot_to_spot = all_spot && allows(CAPACITY_TYPE_SPOT);
    if spot_to_spot {
        if !snapshot.options.spot_to_spot {
            return Err(Rejection::SpotToSpotDisabled);
        }
        claim.spec.requirements.add(Requirement::in_values(
            CAPACITY_TYPE_LABEL,
            [CAPACITY_TYPE_SPOT],
        ));
    }
    // Keep the options that cost less than the candidates even at their worst launch price.
    let mut options: Vec<(&InstanceType, f64)> = claim
        .spec
        .instance_types
        .iter()
        .filter_map(|name| types.iter().find(|t| t.name() == name))
        .filter_map(|t| {
            t.offerings()
                .worst_launch_price(&claim.spec.requirements, well_known)
                .map(|p| (t, p))
        })
        .filter(|(_, price)| *price < cost)
        .collect();
    if method == Method::MultiNodeConsolidation {
        filter_out_same_instance_type(candidates, &mut options);
    }
    options.sort_by(|a, b| a.1.total_cmp(&b.1).then_with(|| a.0.name().cmp(b.0.name())));
    if options.is_empty() {
        return Err(if spot_to_spot {
            Rejection::NoCheaperSpot
        } else {
            Rejection::NoCheaper
        });
    }
    if spot_to_spot && method == Method::SingleNodeConsolidation {
        if options.len() < SPOT_TO_SPOT_MIN_OPTIONS {
            return Err(Rejection::TooFewSpotOptions {
                options: options.len(),
            });
        }
        options.truncate(SPOT_TO_SPOT_MIN_OPTIONS.max(min_values_needed(&claim)));
    }
    if claim.spec.requirements.has_min_values() {
        let kept: Vec<&InstanceType> = options.iter().map(|(t, _)| *t).collect();
        satisfies_min_values(&kept, &claim.spec.requirements).map_err(Rejection::MinValues)?;
    }
    if !spot_to_spot && allows(CAPACITY_TYPE_SPOT) && allows(CAPACITY_TYPE_ON_DEMAND) {
        // Priced assuming spot launches: never fall back to a pricier on-demand node.
        claim.spec.requirements.add(Requirement::in_values(
            CAPACITY_TYPE_LABEL,
            [CAPACITY_TYPE_SPOT],
        ));
    }
    let names_kept: Vec<String> = options.iter().map(|(t, _)| t.name().to_string()).collect();
    claim.spec.requirements.add(Requirement::in_values(
        INSTANCE_TYPE_LABEL,
        names_kept.iter().map(String::as_str),
    ));
    claim.spec.instance_types = names_kept.into();
    claim.launch_price = Some(options[0].1);
    let saving = cost - options[0].1;
    check_saving(saving)?;
    Ok(Command {
        method,
        candidates: candidates.iter().map(|c| c.claim.clone()).collect(),
        explanation: format!(
            "underutilized: replace {} with one {} ({} option{}); saves {saving:.4}/h",
            names(candidates),
            options[0].0.name(),
            options.len(),
            if options.len() == 1 { "" } else { "s" }
        ),
        replacements: vec![claim],
        saving_per_hour: saving,
    })
}

/// Upstream's balanced-consolidation check, for each `Balanced` pool among the candidates:
/// the pool's share of the saving (split by the candidates' prices) over the pool's total
/// cost, divided by the moved disruption cost over the pool's total disruption cost, must
/// reach [`BALANCED_THRESHOLD`](super::candidate::BALANCED_THRESHOLD).
fn balanced_score(
    snapshot: &Snapshot,
    candidates: &[&Candidate],
    saving: f64,
    cost: f64,
) -> Result<(), Rejection> {
    let pools: BTreeSet<&str> = candidates.iter().map(|c| c.pool.as_str()).collect();
    for pool in pools {
        if snapshot.pools.get(pool).map(|p| p.policy) != Some(super::ConsolidationPolicy::Balanced)
        {
            continue;
        }
        let members = snapshot.candidates.iter().filter(|c| c.pool == pool);
        let (pool_cost, pool_disruption) = members.fold((0.0, 0.0), |(p, d), c| {
            (p + c.price_or_zero(), d + c.disruption_cost)
        });
        let moving: Vec<&&Candidate> = candidates.iter().filter(|c| c.pool == pool).collect();
        let share = if cost > 0.0 {
            moving.iter().map(|c| c.price_or_zero()).sum::<f64>() / cost
        } else {
            0.0
        };
        let moved: f64 = moving.iter().map(|c| c.disruption_cost).sum();
        if pool_cost <= 0.0 || pool_disruption <= 0.0 || moved <= 0.0 {
            continue;
        }
        let score = (saving * share / pool_cost) / (moved / pool_disruption);
        if score < super::candidate::BALANCED_THRESHOLD {
            return Err(Rejection::UnbalancedMove {
                pool: pool.to_string(),
                score,
            });
        }
    }
    Ok(())
}

/// Upstream's `filterOutSameInstanceType`: when a replacement option is the instance type of
/// a candidate, only options cheaper than the cheapest such candidate stay (otherwise
/// deleting the other candidates alone would be better).
fn filter_out_same_instance_type(
    candidates: &[&Candidate],
    options: &mut Vec<(&InstanceType, f64)>,
) {
    let mut price_of: BTreeMap<&str, f64> = BTreeMap::new();
    for c in candidates {
        let p = c.price_or_zero();
        price_of
            .entry(c.instance_type.as_str())
            .and_modify(|v| *v = v.max(p))
            .or_insert(p);
    }
    let ceiling = options
        .iter()
        .filter_map(|(t, _)| price_of.get(t.name()).copied())
        .fold(f64::INFINITY, f64::min);
    options.retain(|(_, price)| *price < ceiling);
}

/// The most options any `minValues` of the claim asks for.
fn min_values_needed(claim: &NewNodeClaim) -> usize {
    claim
        .spec
        .requirements
        .iter()
        .filter_map(|r| r.min_values())
        .max()
        .unwrap_or(0)
}

fn pool_types<'s>(snapshot: &'s Snapshot, pool: &str) -> &'s [InstanceType] {
    snapshot
        .scheduling
        .nodepools
        .iter()
        .find(|p| p.template.nodepool == pool)
        .map(|p| p.instance_types.as_slice())
        .unwrap_or(&[])
}

/// Re-checks `command` on a fresh snapshot taken after the validation delay (upstream's
/// validators): every candidate must still be eligible and within budget, and a
/// consolidation or drift must simulate to the same decision, with replacement instance types
/// among those decided. An emptiness command keeps its candidates that are still valid.
/// Returns the command to execute, or why it was abandoned.
pub fn validate(snapshot: &Snapshot, command: &Command) -> Result<Command, String> {
    let method = command.method;
    let mut sim = Simulator::new(snapshot);
    let mut blocked_now = Vec::new();
    let eligible_now = eligible(snapshot, method, &mut sim, &mut blocked_now);
    let mut valid = Vec::new();
    let mut problems = Vec::new();
    for name in &command.candidates {
        match eligible_now.iter().find(|c| &c.claim == name) {
            Some(c) => valid.push(*c),
            None => match blocked_now.iter().find(|(c, _)| c == name) {
                Some((_, reason)) => problems.push(format!("{name}: {reason}")),
                None if snapshot.candidates.iter().any(|c| &c.claim == name) => {
                    problems.push(format!(
                        "{name}: {}",
                        blocked(snapshot, snapshot.candidate(name).expect("present"), method)
                            .map(|b| b.to_string())
                            .unwrap_or_default()
                    ))
                }
                None => problems.push(format!("{name} is gone")),
            },
        }
    }
    let mut left = allowances(snapshot, method, &valid);
    valid.retain(|c| {
        let slot = left.entry(c.pool.clone()).or_default();
        let ok = *slot > 0;
        if ok {
            *slot -= 1;
        } else {
            problems.push(format!("{}: {}", c.claim, budget_blocked(&c.pool, method)));
        }
        ok
    });
    if method == Method::StaticDrift && problems.is_empty() {
        return Ok(command.clone());
    }
    if method == Method::Emptiness {
        if valid.is_empty() {
            return Err(problems.join("; "));
        }
        let mut kept = command.clone();
        kept.candidates = valid.iter().map(|c| c.claim.clone()).collect();
        kept.saving_per_hour = valid.iter().map(|c| c.price_or_zero()).sum();
        return Ok(kept);
    }
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    let again = match method {
        Method::Drift => sim
            .remove(&valid)
            .map(|s| {
                if s.new_claims.is_empty() {
                    Decision::Delete
                } else {
                    Decision::Replace
                }
            })
            .map_err(|e| e.to_string()),
        _ => consolidate(snapshot, &mut sim, &valid, method)
            .map_err(|e| e.to_string())
            .and_then(|fresh| {
                let before: BTreeSet<&String> = command
                    .replacements
                    .iter()
                    .flat_map(|r| r.spec.instance_types.iter())
                    .collect();
                let subset = fresh
                    .replacements
                    .iter()
                    .flat_map(|r| r.spec.instance_types.iter())
                    .all(|t| before.contains(t));
                if subset {
                    Ok(fresh.decision())
                } else {
                    Err("the replacement's instance types changed".to_string())
                }
            }),
    }?;
    if again != command.decision() {
        return Err(format!(
            "the decision changed from {} to {}",
            command.decision().as_str(),
            again.as_str()
        ));
    }
    Ok(command.clone())
}

/// Why the node or NodeClaim `name` is or is not disrupted now, one line per point: its
/// NodePool's budgets per reason, each method's verdict, and for consolidation what removing
/// it alone would bring. `None` when no managed node has that name.
pub fn explain(snapshot: &Snapshot, name: &str) -> Option<Vec<String>> {
    let c = snapshot.candidate(name)?;
    let mut lines = vec![format!(
        "node {} (NodeClaim {}, NodePool {}, {} {} in {}, {}/h, {} pod{} to move)",
        c.node,
        c.claim,
        c.pool,
        c.capacity_type,
        c.instance_type,
        c.zone,
        c.price
            .map_or("price unknown".to_string(), |p| format!("{p:.4}")),
        c.pods.len(),
        if c.pods.len() == 1 { "" } else { "s" }
    )];
    for reason in [
        super::Reason::Empty,
        super::Reason::Drifted,
        super::Reason::Underutilized,
    ] {
        let a = snapshot.allowance(&c.pool, reason);
        let allowed = if a.allowed == u64::MAX {
            "unlimited".to_string()
        } else {
            a.allowed.to_string()
        };
        let mut line = format!(
            "budget for {}: {allowed} more node(s) may be disrupted",
            reason.as_str()
        );
        for invalid in a.invalid {
            line.push_str(&format!(" (invalid budget: {invalid})"));
        }
        lines.push(line);
    }
    for method in [Method::Expiration].into_iter().chain(Method::ALL) {
        let verdict = match blocked(snapshot, c, method) {
            Some(reason) => format!("no: {reason}"),
            None if method != Method::Expiration
                && snapshot.allowance(&c.pool, method.reason()).allowed == 0 =>
            {
                format!("no: {}", budget_blocked(&c.pool, method))
            }
            None => {
                let mut sim = Simulator::new(snapshot);
                let result = match method {
                    Method::Expiration => Ok("delete (expired; forceful, no budget applies)".to_string()),
                    Method::StaticDrift => Ok("replace with a NodeClaim from its static NodePool's template".to_string()),
                    Method::Emptiness => Ok(format!("delete (empty); saves {:.4}/h", c.price_or_zero())),
                    Method::Drift => sim.remove(&[c]).map(|s| {
                        if s.new_claims.is_empty() { "delete".to_string() } else { format!("replace with {}", describe_claims(&s.new_claims)) }
                    }),
                    // Multi-node acts on two candidates or more: alone, a node is its
                    // candidate, and what removing it would bring is single-node's verdict.
                    Method::MultiNodeConsolidation => Ok("a candidate (a command takes two or more; `joinery disrupt --all` shows the batch)".to_string()),
                    _ => consolidate(snapshot, &mut sim, &[c], method).map(|cmd| cmd.explanation),
                };
                match result {
                    Ok(text) => format!("yes: {text}"),
                    Err(reason) => format!("no: {reason}"),
                }
            }
        };
        lines.push(format!("{}: {verdict}", method.as_str()));
    }
    Some(lines)
}

fn names(candidates: &[&Candidate]) -> String {
    candidates
        .iter()
        .map(|c| c.claim.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn count(n: usize) -> String {
    if n == 1 {
        "1 node".to_string()
    } else {
        format!("{n} nodes")
    }
}

fn describe_claims(claims: &[NewNodeClaim]) -> String {
    claims
        .iter()
        .map(|c| {
            format!(
                "one {} node",
                c.spec
                    .instance_types
                    .first()
                    .map(String::as_str)
                    .unwrap_or("new")
            )
        })
        .collect::<Vec<_>>()
        .join(" and ")
}
