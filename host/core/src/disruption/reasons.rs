//! Why a candidate is not disrupted, as values: a [`Blocker`] keeps a candidate from being
//! considered at all (the text of `DisruptionBlocked` events), a [`Rejection`] is why a method
//! considered a candidate but found no command for it (the text of `Unconsolidatable`
//! events). Each prints upstream Karpenter's wording; callers decide on the variants.

use super::Reason;
use super::candidate::{BALANCED_THRESHOLD, MinSaving};
use super::methods::SPOT_TO_SPOT_MIN_OPTIONS;
use crate::instance_type::MinValuesError;
use crate::scheduling::PodKey;

/// Why a candidate cannot be disrupted by a method now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Blocker {
    /// The Node or NodeClaim is marked for deletion.
    #[error("node is marked for deletion")]
    MarkedForDeletion,
    /// Expiration: the claim has not reached its `expireAfter`.
    #[error("node has not expired")]
    NotExpired,
    /// Expiration: the claim's `expireAfter` is `Never`.
    #[error("expireAfter is Never")]
    ExpireAfterNever,
    /// The candidate's NodePool is not in the snapshot.
    #[error("NodePool {pool:?} not found")]
    NodePoolNotFound {
        /// The NodePool's name.
        pool: String,
    },
    /// The claim is not `Initialized` yet.
    #[error("node is not initialized")]
    NotInitialized,
    /// A disruption command holds the node already.
    #[error("node is already being disrupted")]
    AlreadyDisrupting,
    /// The provisioner chose the node for pending pods, or pending pods would be placed on it.
    #[error("node is nominated for a pending pod")]
    Nominated,
    /// Emptiness: a CapacityBuffer's virtual pods would be placed on the node, so it holds
    /// spare capacity and is not empty.
    #[error("node holds capacity for a CapacityBuffer")]
    CapacityBuffer,
    /// The Node carries `karpenter.sh/do-not-disrupt: "true"`.
    #[error("disruption is blocked through the \"karpenter.sh/do-not-disrupt\" annotation")]
    DoNotDisrupt,
    /// The NodePool is static (`spec.replicas`): only static drift replaces its nodes.
    #[error("NodePool {pool:?} is static")]
    StaticPool {
        /// The NodePool's name.
        pool: String,
    },
    /// Static drift: the NodePool is not static.
    #[error("NodePool {pool:?} is not static")]
    NotStaticPool {
        /// The NodePool's name.
        pool: String,
    },
    /// A pod keeps the node (a pod with `karpenter.sh/do-not-disrupt`, a PDB allowing no
    /// eviction), in upstream's words as the snapshot recorded them.
    #[error("{0}")]
    Pod(String),
    /// The NodePool's `consolidateAfter` is `Never`.
    #[error("consolidateAfter is Never")]
    ConsolidateAfterNever,
    /// Emptiness: pods would have to move.
    #[error("node is not empty")]
    NotEmpty,
    /// The claim is not `Consolidatable` yet: `consolidateAfter` has not passed.
    #[error("node is not consolidatable yet (consolidateAfter has not passed)")]
    NotConsolidatableYet,
    /// Drift: the claim has not drifted.
    #[error("node has not drifted")]
    NotDrifted,
    /// Consolidation: the NodePool's `consolidationPolicy` is `WhenEmpty`.
    #[error("consolidationPolicy is WhenEmpty")]
    WhenEmptyPolicy,
    /// Consolidation: the node's price is unknown (its instance type or offering is not the
    /// NodePool's).
    #[error("instance type {instance_type:?} or its offering is not offered by the NodePool")]
    NotOffered {
        /// The node's instance type.
        instance_type: String,
    },
    /// Consolidation: the node lacks its capacity type or zone label.
    #[error("node has no capacity type or zone label")]
    NoCapacityTypeOrZone,
    /// Consolidation: the node is empty, which emptiness handles.
    #[error("node is empty (emptiness removes it)")]
    Empty,
    /// The NodePool's disruption budgets for the method's reason are used up.
    #[error(
        "disruption budgets of NodePool {pool:?} allow no more {} disruptions now",
        .reason.as_str()
    )]
    Budget {
        /// The NodePool's name.
        pool: String,
        /// The method's budget reason.
        reason: Reason,
    },
}

impl Blocker {
    /// Whether an operator can act on it (a protection, a budget, a nomination, the NodePool's
    /// settings or the node's state): the disruption controller emits a `DisruptionBlocked`
    /// event for these. `false` for what passes by itself — a node waiting for initialization,
    /// for `consolidateAfter` or for its expiry — for a method that does not apply to the node
    /// (not empty, not drifted, empty for consolidation; such nodes are not reported as
    /// blocked), and for a node kept on purpose as a CapacityBuffer's room.
    pub fn is_operator_actionable(&self) -> bool {
        match self {
            Blocker::NotInitialized
            | Blocker::NotConsolidatableYet
            | Blocker::NotExpired
            | Blocker::NotEmpty
            | Blocker::NotDrifted
            | Blocker::Empty
            | Blocker::CapacityBuffer => false,
            Blocker::MarkedForDeletion
            | Blocker::ExpireAfterNever
            | Blocker::NodePoolNotFound { .. }
            | Blocker::AlreadyDisrupting
            | Blocker::Nominated
            | Blocker::DoNotDisrupt
            | Blocker::StaticPool { .. }
            | Blocker::NotStaticPool { .. }
            | Blocker::Pod(_)
            | Blocker::ConsolidateAfterNever
            | Blocker::WhenEmptyPolicy
            | Blocker::NotOffered { .. }
            | Blocker::NoCapacityTypeOrZone
            | Blocker::Budget { .. } => true,
        }
    }
}

/// Why a method considered candidates but found no command for them.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Rejection {
    /// A pod of the candidates fits nowhere else.
    #[error("pod {pod} cannot be rescheduled: {reason}")]
    Unschedulable {
        /// The pod.
        pod: PodKey,
        /// The scheduler's reason, in upstream's wording.
        reason: String,
    },
    /// A pod of the candidates would go to a node that is not initialized.
    #[error("pod {pod} would schedule against the uninitialized node {node}")]
    UninitializedNode {
        /// The pod.
        pod: PodKey,
        /// The node (or in-flight NodeClaim) it would go to.
        node: String,
    },
    /// The saving is below a NodePool's minimum saving.
    #[error("saving {saving:.4}/h of {cost:.4}/h is below the NodePool's minimum ({minimum:?})")]
    BelowMinimumSaving {
        /// What the move saves per hour.
        saving: f64,
        /// What the candidates cost per hour.
        cost: f64,
        /// The NodePool's minimum.
        minimum: MinSaving,
    },
    /// A `Balanced` NodePool's score for the move is below [`BALANCED_THRESHOLD`].
    #[error(
        "NodePool {pool:?} is Balanced: the move scores {score:.2}, below {BALANCED_THRESHOLD} (saving too small for the pods it disrupts)"
    )]
    UnbalancedMove {
        /// The NodePool's name.
        pool: String,
        /// The move's score.
        score: f64,
    },
    /// The candidates' pods would need more than one new node.
    #[error("can't consolidate {}: their pods would need {new_nodes} new nodes", .candidates.join(", "))]
    TooManyNewNodes {
        /// The candidates' NodeClaim names.
        candidates: Vec<String>,
        /// How many new nodes their pods would need.
        new_nodes: usize,
    },
    /// Replacing spot with spot would be needed but the `SpotToSpotConsolidation` gate is off.
    #[error("SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node")]
    SpotToSpotDisabled,
    /// No spot instance type is cheaper than the spot candidates.
    #[error("can't replace spot with a cheaper spot node")]
    NoCheaperSpot,
    /// No instance type is cheaper than the candidates.
    #[error("can't replace with a cheaper node")]
    NoCheaper,
    /// Single-node spot-to-spot needs [`SPOT_TO_SPOT_MIN_OPTIONS`] cheaper options.
    #[error(
        "SpotToSpotConsolidation requires {SPOT_TO_SPOT_MIN_OPTIONS} cheaper instance type options than the current candidate to consolidate, got {options}"
    )]
    TooFewSpotOptions {
        /// How many cheaper options there are.
        options: usize,
    },
    /// The cheaper options do not meet the replacement's `minValues`.
    #[error("can't replace with a cheaper node: {0}")]
    MinValues(MinValuesError),
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn blockers_print_upstream_wording() {
        let pool = || "default".to_string();
        for (blocker, text) in [
            (Blocker::MarkedForDeletion, "node is marked for deletion"),
            (Blocker::NotExpired, "node has not expired"),
            (Blocker::ExpireAfterNever, "expireAfter is Never"),
            (
                Blocker::NodePoolNotFound { pool: pool() },
                "NodePool \"default\" not found",
            ),
            (Blocker::NotInitialized, "node is not initialized"),
            (
                Blocker::AlreadyDisrupting,
                "node is already being disrupted",
            ),
            (Blocker::Nominated, "node is nominated for a pending pod"),
            (
                Blocker::CapacityBuffer,
                "node holds capacity for a CapacityBuffer",
            ),
            (
                Blocker::DoNotDisrupt,
                "disruption is blocked through the \"karpenter.sh/do-not-disrupt\" annotation",
            ),
            (
                Blocker::StaticPool { pool: pool() },
                "NodePool \"default\" is static",
            ),
            (
                Blocker::NotStaticPool { pool: pool() },
                "NodePool \"default\" is not static",
            ),
            (
                Blocker::Pod("pdb prevents pod evictions".into()),
                "pdb prevents pod evictions",
            ),
            (Blocker::ConsolidateAfterNever, "consolidateAfter is Never"),
            (Blocker::NotEmpty, "node is not empty"),
            (
                Blocker::NotConsolidatableYet,
                "node is not consolidatable yet (consolidateAfter has not passed)",
            ),
            (Blocker::NotDrifted, "node has not drifted"),
            (Blocker::WhenEmptyPolicy, "consolidationPolicy is WhenEmpty"),
            (
                Blocker::NotOffered {
                    instance_type: "c-8".into(),
                },
                "instance type \"c-8\" or its offering is not offered by the NodePool",
            ),
            (
                Blocker::NoCapacityTypeOrZone,
                "node has no capacity type or zone label",
            ),
            (Blocker::Empty, "node is empty (emptiness removes it)"),
            (
                Blocker::Budget {
                    pool: pool(),
                    reason: Reason::Underutilized,
                },
                "disruption budgets of NodePool \"default\" allow no more Underutilized disruptions now",
            ),
        ] {
            assert_eq!(blocker.to_string(), text, "{blocker:?}");
        }
    }

    #[test]
    fn only_waiting_and_not_applying_blockers_are_not_for_the_operator() {
        for waiting in [
            Blocker::NotInitialized,
            Blocker::NotConsolidatableYet,
            Blocker::NotExpired,
            Blocker::NotEmpty,
            Blocker::NotDrifted,
            Blocker::Empty,
            Blocker::CapacityBuffer,
        ] {
            assert!(!waiting.is_operator_actionable(), "{waiting:?}");
        }
        for actionable in [
            Blocker::MarkedForDeletion,
            Blocker::ExpireAfterNever,
            Blocker::NodePoolNotFound { pool: "p".into() },
            Blocker::AlreadyDisrupting,
            Blocker::Nominated,
            Blocker::DoNotDisrupt,
            Blocker::StaticPool { pool: "p".into() },
            Blocker::NotStaticPool { pool: "p".into() },
            Blocker::Pod("pdb prevents pod evictions".into()),
            Blocker::ConsolidateAfterNever,
            Blocker::WhenEmptyPolicy,
            Blocker::NotOffered {
                instance_type: "c-8".into(),
            },
            Blocker::NoCapacityTypeOrZone,
            Blocker::Budget {
                pool: "p".into(),
                reason: Reason::Drifted,
            },
        ] {
            assert!(actionable.is_operator_actionable(), "{actionable:?}");
        }
    }

    #[test]
    fn rejections_print_upstream_wording() {
        let pod = || PodKey::new("default", "p-0");
        for (rejection, text) in [
            (
                Rejection::Unschedulable {
                    pod: pod(),
                    reason: "no NodePool fits".into(),
                },
                "pod default/p-0 cannot be rescheduled: no NodePool fits",
            ),
            (
                Rejection::UninitializedNode {
                    pod: pod(),
                    node: "n1".into(),
                },
                "pod default/p-0 would schedule against the uninitialized node n1",
            ),
            (
                Rejection::BelowMinimumSaving {
                    saving: 0.32,
                    cost: 0.36,
                    minimum: MinSaving::Ratio(0.95),
                },
                "saving 0.3200/h of 0.3600/h is below the NodePool's minimum (Ratio(0.95))",
            ),
            (
                Rejection::UnbalancedMove {
                    pool: "default".into(),
                    score: 0.125,
                },
                "NodePool \"default\" is Balanced: the move scores 0.12, below 0.5 (saving too small for the pods it disrupts)",
            ),
            (
                Rejection::TooManyNewNodes {
                    candidates: vec!["a".into(), "b".into()],
                    new_nodes: 2,
                },
                "can't consolidate a, b: their pods would need 2 new nodes",
            ),
            (
                Rejection::SpotToSpotDisabled,
                "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node",
            ),
            (
                Rejection::NoCheaperSpot,
                "can't replace spot with a cheaper spot node",
            ),
            (Rejection::NoCheaper, "can't replace with a cheaper node"),
            (
                Rejection::TooFewSpotOptions { options: 3 },
                "SpotToSpotConsolidation requires 15 cheaper instance type options than the current candidate to consolidate, got 3",
            ),
            (
                Rejection::MinValues(MinValuesError {
                    unmet: BTreeMap::from([("karpenter.sh/instance-family".into(), (1, 3))]),
                }),
                "can't replace with a cheaper node: minValues requirement is not met for label(s) karpenter.sh/instance-family (1 of 3)",
            ),
        ] {
            assert_eq!(rejection.to_string(), text, "{rejection:?}");
        }
    }
}
