//! Disruption decisions from plain values, as upstream Karpenter's disruption controller takes
//! them: budgets per NodePool and reason ([`budget`]), per-claim signals such as
//! `Consolidatable` and drift ([`signals`]), the candidates and why one is blocked
//! ([`candidate`], [`reasons`]), and each method as a function from a [`Snapshot`] to a [`Command`]
//! ([`methods`]): emptiness, drift, multi-node and single-node consolidation, tried in
//! upstream's order by [`decide`]. A command is re-checked after the validation delay with
//! [`validate`].
//!
//! The disruption controller (and `joinery disrupt`) gathers the snapshot through
//! `joinery-adapter`, asks here, and acts; nothing here does I/O.

pub mod budget;
pub mod candidate;
pub mod fixture;
pub mod methods;
pub mod queue;
pub mod quiet;
pub mod reasons;
pub mod signals;
mod simulate;
pub mod static_pool;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::time::SystemTime;

pub use budget::{Allowance, Budget, BudgetNodes, allowed_disruptions};
pub use candidate::{Candidate, ConsolidationPolicy, Drifted, Pool};
pub use methods::{Evaluator, MethodOutcome, Simulations, decide, evaluate, explain, validate};
pub use queue::{
    QueueStep, QueuedCommand, RollbackReason, command_timeout, drop_settled, next_queue_step,
};
pub use quiet::{QUIET_RECHECK, QuietPass};
pub use reasons::{Blocker, Rejection};
pub use signals::{
    DriftReason, DriftView, consolidatable, consolidatable_at, drift, eviction_cost,
    nomination_window, reschedule_cost,
};
pub use static_pool::{StaticAction, StaticClaim, static_action, static_claim};

use crate::scheduling::{NewNodeClaim, SchedulingContext, SchedulingInput};

/// Why a node is disrupted (upstream's budget reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// Consolidation of a node whose pods fit elsewhere.
    Underutilized,
    /// Removal of a node without workload pods.
    Empty,
    /// Replacement of a node that no longer matches its NodePool or NodeClass.
    Drifted,
    /// Forceful removal of a node past its `expireAfter` (no budget limits it).
    Expired,
}

impl Reason {
    /// Upstream's spelling (`DisruptionReason` condition reason, budget `reasons`).
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Underutilized => "Underutilized",
            Reason::Empty => "Empty",
            Reason::Drifted => "Drifted",
            Reason::Expired => "Expired",
        }
    }

    /// The lowercase form used in metric labels (`reason="underutilized"`).
    pub fn metric_label(self) -> &'static str {
        match self {
            Reason::Underutilized => "underutilized",
            Reason::Empty => "empty",
            Reason::Drifted => "drifted",
            Reason::Expired => "expired",
        }
    }
}

/// A disruption method, in the order a pass tries them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Method {
    /// Delete empty, consolidatable nodes.
    Emptiness,
    /// Replace drifted nodes of static NodePools (one new claim each, within the budget).
    StaticDrift,
    /// Replace drifted nodes, one command per pass.
    Drift,
    /// Delete or replace a prefix of the consolidation candidates at once.
    MultiNodeConsolidation,
    /// Delete or replace one node, round robin across NodePools.
    SingleNodeConsolidation,
    /// Delete every node past its `expireAfter`: forceful, outside the disruption loop (the
    /// lifecycle controller deletes expired claims), so not in [`Method::ALL`].
    Expiration,
}

impl Method {
    /// Every method, in upstream's order.
    pub const ALL: [Method; 5] = [
        Method::Emptiness,
        Method::StaticDrift,
        Method::Drift,
        Method::MultiNodeConsolidation,
        Method::SingleNodeConsolidation,
    ];

    /// The budget reason the method's commands count against.
    pub fn reason(self) -> Reason {
        match self {
            Method::Emptiness => Reason::Empty,
            Method::Drift | Method::StaticDrift => Reason::Drifted,
            Method::MultiNodeConsolidation | Method::SingleNodeConsolidation => {
                Reason::Underutilized
            }
            Method::Expiration => Reason::Expired,
        }
    }

    /// Its name in output and logs (`emptiness`, `drift`, `multi-node-consolidation`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Emptiness => "emptiness",
            Method::StaticDrift => "static",
            Method::Drift => "drift",
            Method::MultiNodeConsolidation => "multi-node-consolidation",
            Method::SingleNodeConsolidation => "single-node-consolidation",
            Method::Expiration => "expiration",
        }
    }

    /// Upstream's `consolidation_type` metric label (`empty`, `multi`, `single`; drift has none).
    pub fn consolidation_type(self) -> &'static str {
        match self {
            Method::Emptiness => "empty",
            Method::Drift | Method::StaticDrift | Method::Expiration => "",
            Method::MultiNodeConsolidation => "multi",
            Method::SingleNodeConsolidation => "single",
        }
    }

    /// Whether pods protected by do-not-disrupt or a PDB may be overridden for a claim with a
    /// `terminationGracePeriod` (upstream's "eventual" methods: drift).
    pub fn is_eventual(self) -> bool {
        matches!(self, Method::Drift | Method::StaticDrift)
    }
}

/// Whether a command removes its candidates only, or replaces them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Delete the candidates; their pods fit on the remaining nodes.
    Delete,
    /// Launch the replacements, wait for them to initialize, then delete the candidates.
    Replace,
}

impl Decision {
    /// `delete` or `replace` (upstream's `decision` metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Delete => "delete",
            Decision::Replace => "replace",
        }
    }
}

/// What a method decided to do.
#[derive(Debug, Clone, PartialEq)]
pub struct Command {
    /// The method that decided it.
    pub method: Method,
    /// The NodeClaims (names) to disrupt.
    pub candidates: Vec<String>,
    /// The NodeClaims to launch first (empty for a delete).
    pub replacements: Vec<NewNodeClaim>,
    /// What the candidates cost per hour, minus what the replacements will at worst.
    pub saving_per_hour: f64,
    /// Why, in one sentence (logged, and put in events).
    pub explanation: String,
}

impl Command {
    /// Delete or replace.
    pub fn decision(&self) -> Decision {
        if self.replacements.is_empty() {
            Decision::Delete
        } else {
            Decision::Replace
        }
    }

    /// The budget reason.
    pub fn reason(&self) -> Reason {
        self.method.reason()
    }
}

/// Switches that change decisions (upstream's defaults from [`Options::default`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Replace spot nodes with cheaper spot nodes (upstream's `SpotToSpotConsolidation` gate,
    /// off by default).
    pub spot_to_spot: bool,
    /// At most this many candidates in one multi-node command (upstream: 100).
    pub multi_node_limit: usize,
    /// After upstream's prefix search finds a multi-node command, at most this many more
    /// simulations looking for one that saves more and disrupts no more pods (see
    /// `methods::improve`); 0 keeps upstream's answer exactly. Default
    /// [`MULTI_NODE_IMPROVEMENT`].
    pub multi_node_improvement: usize,
}

/// The default of [`Options::multi_node_improvement`]: about as many simulations again as
/// the binary search makes over 100 candidates.
pub const MULTI_NODE_IMPROVEMENT: usize = 8;

impl Default for Options {
    fn default() -> Self {
        Options {
            spot_to_spot: false,
            multi_node_limit: 100,
            multi_node_improvement: MULTI_NODE_IMPROVEMENT,
        }
    }
}

/// Everything a disruption pass looks at.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// When the pass runs (budgets' cron windows are evaluated at this moment).
    pub now: Option<SystemTime>,
    /// Every managed node with its NodeClaim.
    pub candidates: Vec<Candidate>,
    /// The NodePools, by name.
    pub pools: BTreeMap<String, Pool>,
    /// The scheduler's view: pending pods (those of nodes being deleted included), every node
    /// and in-flight NodeClaim (candidates included, with their bound pods counted), the
    /// NodePools on offer with their instance types, and the DaemonSets.
    pub scheduling: SchedulingInput,
    /// Bound pods, namespaces and scheduling policies.
    pub context: SchedulingContext,
    /// Decision switches.
    pub options: Options,
}

impl Snapshot {
    /// The moment of the pass (the epoch when unset).
    pub fn now(&self) -> SystemTime {
        self.now.unwrap_or(SystemTime::UNIX_EPOCH)
    }

    /// The candidate with this NodeClaim or Node name.
    pub fn candidate(&self, name: &str) -> Option<&Candidate> {
        self.candidates
            .iter()
            .find(|c| c.claim == name || c.node == name)
    }

    /// Whether `pool` has a budget with a cron window: its allowance can change with time
    /// alone, no object changing.
    pub fn budgets_windowed(&self, pool: &str) -> bool {
        self.pools
            .get(pool)
            .is_some_and(|p| p.budgets.iter().any(|b| b.schedule.is_some()))
    }

    /// How many nodes of `pool` may start disrupting for `reason` now, with the budgets that
    /// are invalid (each allows nothing). A pool not in the snapshot allows nothing.
    pub fn allowance(&self, pool: &str, reason: Reason) -> Allowance {
        match self.pools.get(pool) {
            Some(p) => allowed_disruptions(&p.budgets, reason, p.nodes, p.disrupting, self.now()),
            None => Allowance {
                allowed: 0,
                invalid: vec![format!("NodePool {pool} not found")],
            },
        }
    }
}
