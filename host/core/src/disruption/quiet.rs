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

use super::{Blocker, MethodOutcome};

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

    /// Records a pass that ran at `now` over inputs digesting to `digest` with these
    /// outcomes: it is quiet when no method found a command and no candidate was held back
    /// by a disruption budget (a budget's window may open without any object changing).
    pub fn record(&mut self, digest: u64, now: SystemTime, outcomes: &[MethodOutcome]) {
        let quiet = outcomes.iter().all(|o| {
            o.command.is_none()
                && !o
                    .blocked
                    .iter()
                    .any(|(_, why)| matches!(why, Blocker::Budget { .. }))
        });
        self.last = quiet.then_some((digest, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disruption::fixture::{Fleet, consolidation_fleet};
    use crate::disruption::{Method, Reason, decide};

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
    }

    fn nothing(method: Method) -> MethodOutcome {
        MethodOutcome {
            method,
            command: None,
            blocked: Vec::new(),
            rejected: Vec::new(),
            simulations: 0,
            skipped: None,
        }
    }

    #[test]
    fn a_quiet_pass_is_skipped_until_the_inputs_change_or_five_minutes_pass() {
        let mut quiet = QuietPass::default();
        assert!(!quiet.can_skip(7, at(0)), "nothing recorded yet");
        quiet.record(7, at(100), &Method::ALL.map(nothing));
        assert!(quiet.can_skip(7, at(110)));
        assert!(quiet.can_skip(7, at(399)));
        assert!(!quiet.can_skip(8, at(110)), "the inputs changed");
        assert!(!quiet.can_skip(7, at(400)), "rechecked after five minutes");
        // The recheck found nothing again: trusted for five more minutes from then.
        quiet.record(7, at(400), &Method::ALL.map(nothing));
        assert!(quiet.can_skip(7, at(650)));
    }

    #[test]
    fn a_pass_with_a_command_or_a_budget_hold_is_not_quiet() {
        let mut quiet = QuietPass::default();
        let mut held = nothing(Method::SingleNodeConsolidation);
        held.blocked.push((
            "node-a".into(),
            Blocker::Budget {
                pool: "default".into(),
                reason: Reason::Underutilized,
            },
        ));
        quiet.record(7, at(0), &[nothing(Method::Emptiness), held]);
        assert!(!quiet.can_skip(7, at(10)), "a budget window may open");

        let outcomes = decide(&consolidation_fleet(Fleet::Mixed, 20));
        assert!(
            outcomes.iter().any(|o| o.command.is_some()),
            "the fleet has a command"
        );
        quiet.record(7, at(0), &outcomes);
        assert!(!quiet.can_skip(7, at(10)), "a command was found");

        let outcomes = decide(&consolidation_fleet(Fleet::Full, 20));
        assert!(
            outcomes.iter().all(|o| o.command.is_none()),
            "nothing to do"
        );
        quiet.record(7, at(0), &outcomes);
        assert!(quiet.can_skip(7, at(10)), "a full fleet's pass is quiet");
    }
}
