//! Drain decisions for a Node being terminated: which pods to evict now, which to delete
//! by force, and which still hold the drain open; and the order of a termination's steps
//! ([`next_termination_step`]).
//!
//! Upstream's rules (`pkg/controllers/node/termination`), decided here from plain values:
//!
//! - A pod **waits for eviction** unless it is terminal (Succeeded/Failed), a mirror pod,
//!   tolerates `karpenter.sh/disrupted:NoSchedule`, or is *stuck terminating* (its
//!   `deletionTimestamp` passed more than [`STUCK_TERMINATING_AFTER`] ago: a dead kubelet will
//!   never confirm it, so it must not hold the node forever).
//! - Pods are evicted **tier by tier**, only the first non-empty tier per pass: non-critical
//!   non-daemon pods, then non-critical DaemonSet pods, then critical non-daemon, then
//!   critical DaemonSet pods (critical = priority class `system-cluster-critical` or
//!   `system-node-critical`).
//! - A pod with an active `karpenter.sh/do-not-disrupt` is never evicted; it holds the drain
//!   open until the node's termination deadline.
//! - With a **termination deadline** (the NodeClaim's deletion time plus its
//!   `terminationGracePeriod`), a pod whose own grace period would run past the deadline is
//!   deleted now, bypassing PodDisruptionBudgets and do-not-disrupt, with a grace period of the
//!   time left (at least 1 s): it gets its full grace period before the node goes. A pod
//!   already terminating with a `deletionTimestamp` after the deadline is deleted the same way.
//! - Pods already terminating (not stuck) are waited for, not evicted again.

use std::time::{Duration, SystemTime};

/// A terminating pod stops holding the drain this long after its `deletionTimestamp`.
pub const STUCK_TERMINATING_AFTER: Duration = Duration::from_secs(60);
/// Kubernetes' default `terminationGracePeriodSeconds`.
pub const DEFAULT_POD_GRACE: Duration = Duration::from_secs(30);
/// Least grace period of a forced deletion.
pub const MIN_FORCED_GRACE: Duration = Duration::from_secs(1);

/// What the drain needs to know about one pod on the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainPod {
    /// `namespace/name`, for reports.
    pub key: String,
    /// Phase Succeeded or Failed.
    pub terminal: bool,
    /// Owned by its Node (static pod).
    pub mirror: bool,
    /// Owned by a DaemonSet.
    pub daemon: bool,
    /// Priority class `system-cluster-critical` or `system-node-critical`.
    pub critical: bool,
    /// Tolerates `karpenter.sh/disrupted:NoSchedule` (never drained).
    pub tolerates_disrupted: bool,
    /// An active `karpenter.sh/do-not-disrupt` annotation.
    pub do_not_disrupt: bool,
    /// The pod's `deletionTimestamp`, when it is being deleted.
    pub deleting_at: Option<SystemTime>,
    /// The pod's `terminationGracePeriodSeconds` ([`DEFAULT_POD_GRACE`] when unset).
    pub grace_period: Duration,
}

/// One thing to do to a pod, by its index in the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainAction {
    /// Evict through the Eviction API (PodDisruptionBudgets hold).
    Evict(usize),
    /// Delete with this grace period, bypassing budgets and do-not-disrupt.
    ForceDelete {
        /// Index of the pod.
        pod: usize,
        /// Grace period of the deletion.
        grace: Duration,
    },
}

/// The outcome of one drain pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DrainPlan {
    /// What to do now.
    pub actions: Vec<DrainAction>,
    /// Pods still holding the drain open (including the ones acted on now).
    pub waiting: usize,
    /// Pods held back by do-not-disrupt (a subset of `waiting`).
    pub blocked_by_do_not_disrupt: usize,
}

impl DrainPlan {
    /// Whether no pod holds the drain open: the instance may go.
    pub fn drained(&self) -> bool {
        self.waiting == 0
    }
}

/// Whether a pod still holds the drain open at `now`.
pub fn waits_for_eviction(pod: &DrainPod, now: SystemTime) -> bool {
    let stuck = pod
        .deleting_at
        .is_some_and(|at| now > at + STUCK_TERMINATING_AFTER);
    !pod.terminal && !pod.mirror && !pod.tolerates_disrupted && !stuck
}

fn tier(pod: &DrainPod) -> u8 {
    match (pod.critical, pod.daemon) {
        (false, false) => 0,
        (false, true) => 1,
        (true, false) => 2,
        (true, true) => 3,
    }
}

/// Decides one drain pass over the pods of a node at `now`; `deadline` is the node's
/// termination deadline, if its NodeClaim has a `terminationGracePeriod`.
pub fn plan(pods: &[DrainPod], now: SystemTime, deadline: Option<SystemTime>) -> DrainPlan {
    let mut plan = DrainPlan::default();
    let waiting: Vec<usize> = (0..pods.len())
        .filter(|&i| waits_for_eviction(&pods[i], now))
        .collect();
    plan.waiting = waiting.len();
    let mut evictable = Vec::new();
    for &i in &waiting {
        let pod = &pods[i];
        if let Some(deadline) = deadline {
            let left = deadline.duration_since(now).unwrap_or_default();
            let forced = match pod.deleting_at {
                Some(at) => at > deadline,
                None => now + pod.grace_period > deadline,
            };
            if forced {
                plan.actions.push(DrainAction::ForceDelete {
                    pod: i,
                    grace: left.max(MIN_FORCED_GRACE),
                });
                continue;
            }
        }
        if pod.deleting_at.is_some() {
            continue; // already going; wait for it
        }
        if pod.do_not_disrupt {
            plan.blocked_by_do_not_disrupt += 1;
            continue;
        }
        evictable.push(i);
    }
    if let Some(first) = evictable.iter().map(|&i| tier(&pods[i])).min() {
        plan.actions.extend(
            evictable
                .into_iter()
                .filter(|&i| tier(&pods[i]) == first)
                .map(DrainAction::Evict),
        );
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Duration = Duration::from_secs(1_000_000);

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + T0 + Duration::from_secs(seconds)
    }

    fn pod(key: &str) -> DrainPod {
        DrainPod {
            key: key.into(),
            terminal: false,
            mirror: false,
            daemon: false,
            critical: false,
            tolerates_disrupted: false,
            do_not_disrupt: false,
            deleting_at: None,
            grace_period: DEFAULT_POD_GRACE,
        }
    }

    #[test]
    fn ordinary_pods_are_evicted_and_hold_the_drain() {
        let pods = vec![pod("a"), pod("b")];
        let plan = plan(&pods, at(0), None);
        assert_eq!(
            plan.actions,
            vec![DrainAction::Evict(0), DrainAction::Evict(1)]
        );
        assert_eq!(plan.waiting, 2);
        assert!(!plan.drained());
    }

    #[test]
    fn terminal_mirror_and_tolerating_pods_do_not_hold_the_drain() {
        let pods = vec![
            DrainPod {
                terminal: true,
                ..pod("done")
            },
            DrainPod {
                mirror: true,
                ..pod("static")
            },
            DrainPod {
                tolerates_disrupted: true,
                ..pod("tolerant")
            },
        ];
        let plan = plan(&pods, at(0), None);
        assert!(plan.actions.is_empty());
        assert!(plan.drained());
    }

    #[test]
    fn tiers_go_one_at_a_time() {
        let pods = vec![
            DrainPod {
                critical: true,
                daemon: true,
                ..pod("critical-daemon")
            },
            DrainPod {
                critical: true,
                ..pod("critical")
            },
            DrainPod {
                daemon: true,
                ..pod("daemon")
            },
            pod("app"),
        ];
        assert_eq!(
            plan(&pods, at(0), None).actions,
            vec![DrainAction::Evict(3)]
        );
        assert_eq!(
            plan(&pods[..3], at(0), None).actions,
            vec![DrainAction::Evict(2)]
        );
        assert_eq!(
            plan(&pods[..2], at(0), None).actions,
            vec![DrainAction::Evict(1)]
        );
        assert_eq!(
            plan(&pods[..1], at(0), None).actions,
            vec![DrainAction::Evict(0)]
        );
    }

    #[test]
    fn terminating_pods_are_waited_for_until_stuck() {
        let pods = vec![DrainPod {
            deleting_at: Some(at(30)),
            ..pod("going")
        }];
        let waiting = plan(&pods, at(40), None);
        assert!(
            waiting.actions.is_empty() && waiting.waiting == 1,
            "{waiting:?}"
        );
        // A dead kubelet never confirms the deletion: a minute past it, the pod stops counting.
        assert_eq!(plan(&pods, at(90), None).waiting, 1);
        assert!(plan(&pods, at(91), None).drained());
    }

    #[test]
    fn do_not_disrupt_blocks_eviction_until_the_deadline() {
        let pods = vec![DrainPod {
            do_not_disrupt: true,
            ..pod("precious")
        }];
        let blocked = plan(&pods, at(0), None);
        assert!(blocked.actions.is_empty());
        assert_eq!((blocked.waiting, blocked.blocked_by_do_not_disrupt), (1, 1));
        // Deadline in 10 minutes, pod grace 30 s: still blocked.
        assert!(plan(&pods, at(0), Some(at(600))).actions.is_empty());
        // 20 s left, less than the pod's grace: deleted now, with the time left.
        assert_eq!(
            plan(&pods, at(580), Some(at(600))).actions,
            vec![DrainAction::ForceDelete {
                pod: 0,
                grace: Duration::from_secs(20)
            }]
        );
        // Past the deadline: deleted with the least grace.
        assert_eq!(
            plan(&pods, at(700), Some(at(600))).actions,
            vec![DrainAction::ForceDelete {
                pod: 0,
                grace: MIN_FORCED_GRACE
            }]
        );
    }

    #[test]
    fn the_deadline_forces_pods_across_all_tiers_at_once() {
        let pods = vec![
            DrainPod {
                critical: true,
                grace_period: Duration::from_secs(120),
                ..pod("critical")
            },
            DrainPod {
                grace_period: Duration::from_secs(10),
                ..pod("app")
            },
        ];
        // 60 s left: the critical pod needs 120 s, so it goes now; the app pod is evicted.
        let plan = plan(&pods, at(540), Some(at(600)));
        assert_eq!(
            plan.actions,
            vec![
                DrainAction::ForceDelete {
                    pod: 0,
                    grace: Duration::from_secs(60)
                },
                DrainAction::Evict(1)
            ]
        );
    }

    #[test]
    fn a_terminating_pod_whose_deletion_lands_after_the_deadline_is_forced() {
        let pods = vec![DrainPod {
            deleting_at: Some(at(700)),
            grace_period: Duration::from_secs(300),
            ..pod("slow")
        }];
        assert_eq!(
            plan(&pods, at(500), Some(at(600))).actions,
            vec![DrainAction::ForceDelete {
                pod: 0,
                grace: Duration::from_secs(100)
            }]
        );
        let early = vec![DrainPod {
            deleting_at: Some(at(550)),
            ..pod("quick")
        }];
        assert!(plan(&early, at(500), Some(at(600))).actions.is_empty());
    }
}

/// What terminating a Node knows, gathered by the termination controller.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeTermination {
    /// Its NodeClaim exists and is not being deleted yet.
    pub claim_live: bool,
    /// A cloud plugin owns its instance (the Node has a NodeClaim).
    pub cloud: bool,
    /// Its `Ready` condition is `True`.
    pub ready: bool,
    /// Whether the cloud said its instance is gone (`None`: not asked).
    pub instance_gone: Option<bool>,
    /// It carries `karpenter.sh/disrupted:NoSchedule` and the exclude-from-load-balancers label.
    pub tainted: bool,
    /// The drain plan has nothing left to evict or wait for.
    pub drained: bool,
    /// The claim's `Drained` condition is `True` already (or there is no claim to mark).
    pub drained_marked: bool,
    /// The cloud answered not-found to the instance's deletion.
    pub instance_deleted: bool,
}

/// The next step of terminating a Node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TerminationStep {
    /// Delete its NodeClaim too.
    DeleteClaim,
    /// It is not Ready: ask the cloud whether its instance still exists.
    CheckInstance,
    /// Taint it `karpenter.sh/disrupted:NoSchedule` and exclude it from load balancers.
    Taint,
    /// Carry out the drain plan and wait.
    Drain,
    /// Mark the claim `Drained`.
    MarkDrained,
    /// Delete the instance (again, until the cloud answers not-found).
    DeleteInstance,
    /// Remove the `karpenter.sh/termination` finalizer: the Node may go.
    RemoveFinalizer,
}

/// The next termination step, in upstream's order: the claim goes too; a NotReady node whose
/// instance is gone has nothing to drain; otherwise taint, drain, mark drained, delete the
/// instance until it is gone, and only then release the Node.
pub fn next_termination_step(t: &NodeTermination) -> TerminationStep {
    if t.claim_live {
        return TerminationStep::DeleteClaim;
    }
    if t.cloud && !t.ready && t.instance_gone.is_none() {
        return TerminationStep::CheckInstance;
    }
    if t.instance_gone == Some(true) {
        return TerminationStep::RemoveFinalizer;
    }
    if !t.tainted {
        return TerminationStep::Taint;
    }
    if !t.drained {
        return TerminationStep::Drain;
    }
    if !t.drained_marked {
        return TerminationStep::MarkDrained;
    }
    if t.cloud && !t.instance_deleted {
        return TerminationStep::DeleteInstance;
    }
    TerminationStep::RemoveFinalizer
}

#[cfg(test)]
mod termination_tests {
    use super::*;

    #[test]
    fn a_ready_node_is_tainted_drained_and_its_instance_deleted_before_release() {
        let mut t = NodeTermination {
            claim_live: true,
            cloud: true,
            ready: true,
            ..NodeTermination::default()
        };
        assert_eq!(next_termination_step(&t), TerminationStep::DeleteClaim);
        t.claim_live = false;
        assert_eq!(
            next_termination_step(&t),
            TerminationStep::Taint,
            "a Ready node is not looked up"
        );
        t.tainted = true;
        assert_eq!(next_termination_step(&t), TerminationStep::Drain);
        t.drained = true;
        assert_eq!(next_termination_step(&t), TerminationStep::MarkDrained);
        t.drained_marked = true;
        assert_eq!(next_termination_step(&t), TerminationStep::DeleteInstance);
        t.instance_deleted = true;
        assert_eq!(next_termination_step(&t), TerminationStep::RemoveFinalizer);
    }

    #[test]
    fn a_not_ready_node_whose_instance_is_gone_skips_the_drain() {
        let mut t = NodeTermination {
            cloud: true,
            ..NodeTermination::default()
        };
        assert_eq!(next_termination_step(&t), TerminationStep::CheckInstance);
        t.instance_gone = Some(true);
        assert_eq!(next_termination_step(&t), TerminationStep::RemoveFinalizer);
        t.instance_gone = Some(false);
        assert_eq!(
            next_termination_step(&t),
            TerminationStep::Taint,
            "its instance lives: drain as usual"
        );
    }

    #[test]
    fn a_node_without_a_claim_is_drained_and_released_without_a_cloud_call() {
        let t = NodeTermination {
            tainted: true,
            drained: true,
            drained_marked: true,
            ..NodeTermination::default()
        };
        assert_eq!(next_termination_step(&t), TerminationStep::RemoveFinalizer);
        let not_ready = NodeTermination {
            ready: false,
            ..NodeTermination::default()
        };
        assert_eq!(
            next_termination_step(&not_ready),
            TerminationStep::Taint,
            "no cloud to ask"
        );
    }
}
