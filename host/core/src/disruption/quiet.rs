//! Upstream's "consolidated" memory: a disruption pass that found nothing to do is not
//! repeated until the cluster changes, or at the latest after [`QUIET_RECHECK`].
//!
//! Upstream keeps a cluster-wide consolidation state, a timestamp moved on by the changes it
//! deems relevant (a pod bound or deleted, a node added, removed, initialized or marked for
//! deletion, a NodePool or NodeOverlay changed) and reset every five minutes; a consolidation
//! method that found nothing skips its passes while that state stays the same, unless a
//! disruption budget held a candidate back. Joinery keys the same memory by a digest of the
//! pass's inputs, which the controller computes from its caches (every object's
//! resourceVersion, the nominations, the commands in flight): equal inputs give an equal
//! "nothing", so a change upstream does not watch (a node's `Consolidatable` condition, a
//! nomination running out) is not missed until the five-minute recheck. The recheck still
//! catches what no object shows, such as a price or an offering's availability.

use std::time::{Duration, SystemTime};

use super::{Blocker, MethodOutcome, Snapshot};

/// How long a quiet pass is trusted while the cluster does not change (upstream: 5 minutes).
pub const QUIET_RECHECK: Duration = Duration::from_secs(300);

/// The last pass that found nothing to do: the digest of its inputs and when it ran.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuietPass {
    last: Option<(u64, SystemTime)>,
}

impl QuietPass {
    /// Whether a pass over inputs digesting to `digest` at `now` would find nothing again:
    /// the last pass found nothing over the same inputs less than [`QUIET_RECHECK`] ago.
    pub fn can_skip(&self, digest: u64, now: SystemTime) -> bool {
        self.last.is_some_and(|(seen, at)| {
            seen == digest && now.duration_since(at).is_ok_and(|age| age < QUIET_RECHECK)
        })
    }

    /// Records a pass that ran at `now` over `snapshot`, whose inputs digest to `digest`, with
    /// these outcomes: it is quiet when no method found a command and no candidate was held
    /// back by a budget that can open with time alone (one with a cron window). A budget
    /// without a window allows a share of the pool's nodes, which only the objects in the
    /// digest change; upstream treats every budget hold as not quiet, so a NodePool with more
    /// candidates than its budget (multi-node consolidation truncates the list) would be
    /// evaluated on every poll while nothing happens.
    pub fn record(
        &mut self,
        digest: u64,
        now: SystemTime,
        outcomes: &[MethodOutcome],
        snapshot: &Snapshot,
    ) {
        let quiet = outcomes.iter().all(|o| {
            o.command.is_none()
                && !o.blocked.iter().any(|(_, why)| match why {
                    Blocker::Budget { pool, .. } => snapshot.budgets_windowed(pool),
                    _ => false,
                })
        });
        self.last = quiet.then_some((digest, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disruption::budget::Budget;
    use crate::disruption::fixture::{Fleet, consolidation_fleet};
    use crate::disruption::{Method, Reason, decide};

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
    }

    fn pool_with_budget(schedule: Option<&str>) -> Snapshot {
        let mut snapshot = consolidation_fleet(Fleet::Full, 4);
        let pool = snapshot
            .pools
            .get_mut("default")
            .expect("the fixture's pool");
        pool.budgets = vec![Budget {
            nodes: "10%".into(),
            reasons: None,
            schedule: schedule.map(str::to_owned),
            duration: schedule.map(|_| Duration::from_secs(3600)),
        }];
        snapshot
    }

    fn held_by_budget() -> MethodOutcome {
        let mut held = MethodOutcome::nothing(Method::MultiNodeConsolidation);
        held.blocked.push((
            "node-a".into(),
            Blocker::Budget {
                pool: "default".into(),
                reason: Reason::Underutilized,
            },
        ));
        held
    }

    #[test]
    fn a_quiet_pass_is_skipped_until_the_inputs_change_or_five_minutes_pass() {
        let snapshot = Snapshot::default();
        let mut quiet = QuietPass::default();
        assert!(!quiet.can_skip(7, at(0)), "nothing recorded yet");
        quiet.record(
            7,
            at(100),
            &Method::ALL.map(MethodOutcome::nothing),
            &snapshot,
        );
        assert!(quiet.can_skip(7, at(110)));
        assert!(quiet.can_skip(7, at(399)));
        assert!(!quiet.can_skip(8, at(110)), "the inputs changed");
        assert!(!quiet.can_skip(7, at(400)), "rechecked after five minutes");
        // The recheck found nothing again: trusted for five more minutes from then.
        quiet.record(
            7,
            at(400),
            &Method::ALL.map(MethodOutcome::nothing),
            &snapshot,
        );
        assert!(quiet.can_skip(7, at(650)));
    }

    #[test]
    fn a_pass_with_a_command_is_not_quiet() {
        let mut quiet = QuietPass::default();
        let snapshot = consolidation_fleet(Fleet::Mixed, 20);
        let outcomes = decide(&snapshot);
        assert!(
            outcomes.iter().any(|o| o.command.is_some()),
            "the fleet has a command"
        );
        quiet.record(7, at(0), &outcomes, &snapshot);
        assert!(!quiet.can_skip(7, at(10)), "a command was found");

        let snapshot = consolidation_fleet(Fleet::Full, 20);
        let outcomes = decide(&snapshot);
        assert!(
            outcomes.iter().all(|o| o.command.is_none()),
            "nothing to do"
        );
        quiet.record(7, at(0), &outcomes, &snapshot);
        assert!(quiet.can_skip(7, at(10)), "a full fleet's pass is quiet");
    }

    #[test]
    fn a_budget_hold_breaks_the_quiet_only_when_the_budget_has_a_window() {
        let outcomes = [MethodOutcome::nothing(Method::Emptiness), held_by_budget()];
        let mut quiet = QuietPass::default();
        quiet.record(7, at(0), &outcomes, &pool_with_budget(None));
        assert!(
            quiet.can_skip(7, at(10)),
            "a share of the pool's nodes changes only with the objects in the digest"
        );
        quiet.record(7, at(0), &outcomes, &pool_with_budget(Some("0 9 * * *")));
        assert!(!quiet.can_skip(7, at(10)), "the budget's window may open");
        let mut unknown_pool = held_by_budget();
        unknown_pool.blocked[0].1 = Blocker::Budget {
            pool: "gone".into(),
            reason: Reason::Underutilized,
        };
        quiet.record(
            7,
            at(0),
            &[unknown_pool],
            &pool_with_budget(Some("0 9 * * *")),
        );
        assert!(
            quiet.can_skip(7, at(10)),
            "a missing pool allows nothing, always"
        );
    }
}
