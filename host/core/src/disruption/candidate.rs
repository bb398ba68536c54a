//! Disruption candidates (a managed node with its NodeClaim) and the rules that keep one from
//! being disrupted, each a [`Blocker`] (printed in upstream's words: the text of
//! `DisruptionBlocked` events).

use std::time::{Duration, SystemTime};

use super::budget::Budget;
use super::reasons::Blocker;
use super::{Method, Snapshot};
use crate::scheduling::PendingPod;

/// A NodePool's `spec.disruption.consolidationPolicy`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ConsolidationPolicy {
    /// Only empty nodes are consolidated.
    WhenEmpty,
    /// Empty and underutilized nodes are consolidated (upstream's default).
    #[default]
    WhenEmptyOrUnderutilized,
    /// Like `WhenEmptyOrUnderutilized`, but a move must save enough for the disruption it
    /// causes: (saving / pool cost) ÷ (moved disruption cost / pool disruption cost) ≥ 1/2
    /// (upstream's balanced score).
    Balanced,
}

/// The balanced policy's threshold on the score (upstream: 1/k with k = 2).
pub const BALANCED_THRESHOLD: f64 = 0.5;

/// A minimum saving before consolidation acts on a pool's nodes (beyond upstream; off unless
/// the NodePool asks for it).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MinSaving {
    /// At least this fraction (0–1) of what the candidates cost.
    Ratio(f64),
    /// At least this amount per hour.
    PerHour(f64),
}

impl MinSaving {
    /// Parses `"10%"` (a ratio) or `"0.05"` (per hour); `None` for anything else.
    pub fn parse(text: &str) -> Option<MinSaving> {
        let text = text.trim();
        match text.strip_suffix('%') {
            Some(p) => p
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|p| (0.0..=100.0).contains(p))
                .map(|p| MinSaving::Ratio(p / 100.0)),
            None => text
                .parse::<f64>()
                .ok()
                .filter(|v| *v >= 0.0 && v.is_finite())
                .map(MinSaving::PerHour),
        }
    }

    /// Whether `saving` out of `cost` is enough.
    pub fn met(self, saving: f64, cost: f64) -> bool {
        match self {
            MinSaving::Ratio(r) => saving >= r * cost - 1e-12,
            MinSaving::PerHour(v) => saving >= v - 1e-12,
        }
    }
}

/// What disruption knows about a NodePool.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pool {
    /// `spec.disruption.budgets`.
    pub budgets: Vec<Budget>,
    /// Nodes counted by percentage budgets: managed, initialized and not terminating.
    pub nodes: u64,
    /// Of those, nodes being disrupted now (marked for deletion or not ready).
    pub disrupting: u64,
    /// `spec.disruption.consolidationPolicy`.
    pub policy: ConsolidationPolicy,
    /// `spec.disruption.consolidateAfter`; `None` for `Never`.
    pub consolidate_after: Option<Duration>,
    /// A static pool (`spec.replicas`): never consolidated.
    pub is_static: bool,
    /// The minimum saving before consolidation replaces or deletes this pool's nodes.
    pub min_saving: Option<MinSaving>,
    /// A static pool's template (what its drifted nodes are replaced with).
    pub template: Option<crate::nodeclaim::NodeClaimTemplate>,
}

/// A claim's `Drifted` condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drifted {
    /// The condition's reason (e.g. `NodePoolDrifted`, or the cloud plugin's).
    pub reason: String,
    /// When it became true.
    pub since: SystemTime,
}

/// A managed node and its NodeClaim, as disruption sees them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Candidate {
    /// The NodeClaim's name.
    pub claim: String,
    /// The Node's name.
    pub node: String,
    /// Its NodePool.
    pub pool: String,
    /// Its instance type (`node.kubernetes.io/instance-type`).
    pub instance_type: String,
    /// Its capacity type (`karpenter.sh/capacity-type`).
    pub capacity_type: String,
    /// Its zone (`topology.kubernetes.io/zone`).
    pub zone: String,
    /// What it costs per hour: its instance type's offering in its zone and capacity type;
    /// `None` when the instance type or offering is not among the pool's (unresolvable).
    pub price: Option<f64>,
    /// The pods that must move if it goes (not DaemonSet, mirror, terminal or
    /// disrupted-tolerating pods), in the scheduler's form.
    pub pods: Vec<PendingPod>,
    /// Upstream's `RescheduleDisruptionCost`: `1 + Σ max(0, eviction cost)` of those pods.
    pub disruption_cost: f64,
    /// Its claim is `Initialized`.
    pub initialized: bool,
    /// The Node or NodeClaim is marked for deletion.
    pub deleting: bool,
    /// The provisioner chose it for pending pods within the nomination window.
    pub nominated: bool,
    /// A disruption command holds it already.
    pub disrupting: bool,
    /// The Node carries `karpenter.sh/do-not-disrupt: "true"`.
    pub do_not_disrupt: bool,
    /// Pods that keep it (a pod with `karpenter.sh/do-not-disrupt`, a PDB allowing no
    /// eviction), each in upstream's words.
    pub pod_blockers: Vec<String>,
    /// Its claim has a `terminationGracePeriod` (then drift may override `pod_blockers`).
    pub termination_grace_period: bool,
    /// Its claim is `Consolidatable`.
    pub consolidatable: bool,
    /// Its claim is `Drifted`.
    pub drifted: Option<Drifted>,
    /// When its claim expires (`creationTimestamp + expireAfter`); `None` for `Never`.
    pub expires_at: Option<SystemTime>,
}

impl Candidate {
    /// Whether no pod needs to move (upstream: a reschedule cost of at most 1).
    pub fn is_empty(&self) -> bool {
        self.disruption_cost <= 1.0
    }

    /// Its price, 0 when unknown.
    pub fn price_or_zero(&self) -> f64 {
        self.price.unwrap_or(0.0)
    }

    /// Upstream's consolidation order key: price per unit of disruption (higher first).
    pub fn savings_ratio(&self) -> f64 {
        self.price_or_zero() / self.disruption_cost.max(f64::MIN_POSITIVE)
    }
}

/// Why `candidate` cannot be disrupted by `method` now (budgets aside); `None` when it can.
/// The first rule that applies, in upstream's order: the node's state, then do-not-disrupt
/// and PDBs, then what the method itself requires.
pub fn blocked(snapshot: &Snapshot, candidate: &Candidate, method: Method) -> Option<Blocker> {
    if method == Method::Expiration {
        // Forceful: no budget, do-not-disrupt or PDB keeps an expired node (the drain still
        // honours them until the claim's terminationGracePeriod).
        return match candidate.expires_at {
            _ if candidate.deleting => Some(Blocker::MarkedForDeletion),
            Some(at) if at <= snapshot.now() => None,
            Some(_) => Some(Blocker::NotExpired),
            None => Some(Blocker::ExpireAfterNever),
        };
    }
    let Some(pool) = snapshot.pools.get(&candidate.pool) else {
        return Some(Blocker::NodePoolNotFound {
            pool: candidate.pool.clone(),
        });
    };
    if !candidate.initialized {
        return Some(Blocker::NotInitialized);
    }
    if candidate.deleting {
        return Some(Blocker::MarkedForDeletion);
    }
    if candidate.disrupting {
        return Some(Blocker::AlreadyDisrupting);
    }
    if candidate.nominated {
        return Some(Blocker::Nominated);
    }
    if candidate.do_not_disrupt {
        return Some(Blocker::DoNotDisrupt);
    }
    if pool.is_static != (method == Method::StaticDrift) {
        let name = candidate.pool.clone();
        return Some(if pool.is_static {
            Blocker::StaticPool { pool: name }
        } else {
            Blocker::NotStaticPool { pool: name }
        });
    }
    let overridable = method.is_eventual() && candidate.termination_grace_period;
    if let Some(blocker) = candidate.pod_blockers.first()
        && !overridable
    {
        return Some(Blocker::Pod(blocker.clone()));
    }
    match method {
        Method::Emptiness => {
            if pool.consolidate_after.is_none() {
                return Some(Blocker::ConsolidateAfterNever);
            }
            if !candidate.is_empty() {
                return Some(Blocker::NotEmpty);
            }
            if !candidate.consolidatable {
                return Some(Blocker::NotConsolidatableYet);
            }
        }
        Method::Expiration => unreachable!("expiration is checked above"),
        Method::Drift | Method::StaticDrift => {
            if candidate.drifted.is_none() {
                return Some(Blocker::NotDrifted);
            }
        }
        Method::MultiNodeConsolidation | Method::SingleNodeConsolidation => {
            if pool.consolidate_after.is_none() {
                return Some(Blocker::ConsolidateAfterNever);
            }
            if pool.policy == ConsolidationPolicy::WhenEmpty {
                return Some(Blocker::WhenEmptyPolicy);
            }
            if candidate.price.is_none() {
                return Some(Blocker::NotOffered {
                    instance_type: candidate.instance_type.clone(),
                });
            }
            if candidate.capacity_type.is_empty() || candidate.zone.is_empty() {
                return Some(Blocker::NoCapacityTypeOrZone);
            }
            if candidate.is_empty() {
                return Some(Blocker::Empty);
            }
            if !candidate.consolidatable {
                return Some(Blocker::NotConsolidatableYet);
            }
        }
    }
    None
}
