//! NodePool disruption budgets: per reason, counts or percentages (rounded up), active always
//! or inside a cron window; an invalid budget fails closed.

use std::time::{Duration, SystemTime};

use super::Reason;
use crate::cron::Schedule;

/// A budget's `nodes`: a count or a percentage of the pool's nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetNodes {
    /// At most this many nodes.
    Count(u64),
    /// At most this percentage of the pool's nodes, rounded up (upstream's rule).
    Percent(u8),
}

impl BudgetNodes {
    /// Parses `"5"` or `"10%"` (0–100); `None` for anything else.
    pub fn parse(text: &str) -> Option<BudgetNodes> {
        match text.strip_suffix('%') {
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= 100)
                .map(BudgetNodes::Percent),
            None => text.parse().ok().map(BudgetNodes::Count),
        }
    }

    /// How many of `total` nodes it allows.
    pub fn allowed(self, total: u64) -> u64 {
        match self {
            BudgetNodes::Count(n) => n,
            BudgetNodes::Percent(p) => (total * u64::from(p)).div_ceil(100),
        }
    }
}

/// One disruption budget of a NodePool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Budget {
    /// The `nodes` text as written (checked by [`BudgetNodes::parse`]).
    pub nodes: String,
    /// The reasons it limits; `None`: all of them.
    pub reasons: Option<Vec<Reason>>,
    /// Its cron schedule (UTC), if any.
    pub schedule: Option<String>,
    /// How long it stays active after each schedule hit.
    pub duration: Option<Duration>,
}

impl Budget {
    /// Whether it constrains disruption at `now`: always without a schedule; with one, while
    /// the schedule fired within the last `duration`. A schedule without a duration (or the
    /// reverse) or one that does not parse is an error.
    pub fn active(&self, now: SystemTime) -> Result<bool, String> {
        match (&self.schedule, self.duration) {
            (None, None) => Ok(true),
            (Some(schedule), Some(duration)) => Ok(Schedule::parse(schedule)
                .map_err(|e| e.to_string())?
                .active(duration, now)),
            _ => Err("'schedule' must be set with 'duration'".to_string()),
        }
    }

    /// Whether it limits `reason`.
    pub fn applies_to(&self, reason: Reason) -> bool {
        self.reasons
            .as_ref()
            .is_none_or(|reasons| reasons.contains(&reason))
    }
}

/// How many more of a pool's nodes may be disrupted for `reason` at `now`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Allowance {
    /// Nodes that may start disrupting now.
    pub allowed: u64,
    /// Budgets that are invalid (each fails closed: it allows nothing).
    pub invalid: Vec<String>,
}

/// The tightest active budget that applies to `reason`, for a pool of `total` nodes (those
/// already disrupting included) of which `disrupting` are being disrupted: its allowance
/// minus `disrupting`, floored at 0. Inactive budgets do not constrain; no budget at all
/// allows everything; an invalid budget allows nothing.
pub fn allowed_disruptions(
    budgets: &[Budget],
    reason: Reason,
    total: u64,
    disrupting: u64,
    now: SystemTime,
) -> Allowance {
    let mut invalid = Vec::new();
    let mut allowed = u64::MAX;
    for budget in budgets.iter().filter(|b| b.applies_to(reason)) {
        let limit = match (budget.active(now), BudgetNodes::parse(&budget.nodes)) {
            (Err(e), _) => {
                invalid.push(e);
                0
            }
            (Ok(false), _) => continue,
            (Ok(true), Some(nodes)) => nodes.allowed(total),
            (Ok(true), None) => {
                invalid.push(format!(
                    "nodes {:?} is neither a count nor a percentage",
                    budget.nodes
                ));
                0
            }
        };
        allowed = allowed.min(limit);
    }
    Allowance {
        allowed: allowed.saturating_sub(disrupting),
        invalid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(nodes: &str) -> Budget {
        Budget {
            nodes: nodes.into(),
            reasons: None,
            schedule: None,
            duration: None,
        }
    }

    /// 2026-03-02 (a Monday) at `hh:mm` UTC.
    fn monday(hh: u64, mm: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_772_409_600 + hh * 3600 + mm * 60)
    }

    #[test]
    fn percentages_round_up_and_counts_are_counts() {
        assert_eq!(
            BudgetNodes::parse("10%").unwrap().allowed(11),
            2,
            "1.1 rounds up"
        );
        assert_eq!(BudgetNodes::parse("10%").unwrap().allowed(10), 1);
        assert_eq!(BudgetNodes::parse("0%").unwrap().allowed(50), 0);
        assert_eq!(BudgetNodes::parse("100%").unwrap().allowed(7), 7);
        assert_eq!(BudgetNodes::parse("3").unwrap().allowed(100), 3);
        assert_eq!(BudgetNodes::parse("101%"), None);
        assert_eq!(BudgetNodes::parse("many"), None);
    }

    #[test]
    fn the_tightest_active_budget_for_the_reason_wins_minus_what_is_disrupting() {
        let now = monday(12, 0);
        let budgets = vec![
            budget("50%"),
            Budget {
                reasons: Some(vec![Reason::Drifted]),
                ..budget("1")
            },
            Budget {
                reasons: Some(vec![Reason::Empty]),
                ..budget("3")
            },
        ];
        assert_eq!(
            allowed_disruptions(&budgets, Reason::Empty, 10, 0, now).allowed,
            3
        );
        assert_eq!(
            allowed_disruptions(&budgets, Reason::Empty, 10, 2, now).allowed,
            1,
            "two already disrupting"
        );
        assert_eq!(
            allowed_disruptions(&budgets, Reason::Drifted, 10, 0, now).allowed,
            1
        );
        assert_eq!(
            allowed_disruptions(&budgets, Reason::Underutilized, 10, 0, now).allowed,
            5
        );
        assert_eq!(
            allowed_disruptions(&budgets, Reason::Underutilized, 10, 7, now).allowed,
            0,
            "floored at 0"
        );
        assert_eq!(
            allowed_disruptions(&[], Reason::Empty, 10, 0, now).allowed,
            u64::MAX,
            "no budget, no limit"
        );
    }

    #[test]
    fn a_scheduled_budget_counts_only_inside_its_window() {
        // Nothing may be disrupted on weekdays from 09:00 for 8 hours.
        let business_hours = Budget {
            schedule: Some("0 9 * * 1-5".into()),
            duration: Some(Duration::from_secs(8 * 3600)),
            ..budget("0")
        };
        let budgets = vec![budget("10%"), business_hours];
        assert_eq!(
            allowed_disruptions(&budgets, Reason::Empty, 20, 0, monday(10, 0)).allowed,
            0
        );
        assert_eq!(
            allowed_disruptions(&budgets, Reason::Empty, 20, 0, monday(16, 59)).allowed,
            0
        );
        assert_eq!(
            allowed_disruptions(&budgets, Reason::Empty, 20, 0, monday(17, 0)).allowed,
            2,
            "the window closed"
        );
        assert_eq!(
            allowed_disruptions(&budgets, Reason::Empty, 20, 0, monday(8, 59)).allowed,
            2
        );
    }

    #[test]
    fn an_invalid_budget_fails_closed_and_says_why() {
        let now = monday(12, 0);
        let no_duration = Budget {
            schedule: Some("@daily".into()),
            ..budget("5")
        };
        let a = allowed_disruptions(&[budget("10"), no_duration], Reason::Empty, 10, 0, now);
        assert_eq!(a.allowed, 0);
        assert_eq!(a.invalid.len(), 1);
        let bad_cron = Budget {
            schedule: Some("61 * * * *".into()),
            duration: Some(Duration::from_secs(60)),
            ..budget("5")
        };
        assert_eq!(
            allowed_disruptions(&[bad_cron], Reason::Empty, 10, 0, now).allowed,
            0
        );
        let bad_nodes = allowed_disruptions(&[budget("lots")], Reason::Empty, 10, 0, now);
        assert_eq!((bad_nodes.allowed, bad_nodes.invalid.len()), (0, 1));
        let other_reason = Budget {
            reasons: Some(vec![Reason::Drifted]),
            ..budget("lots")
        };
        assert_eq!(
            allowed_disruptions(&[other_reason], Reason::Empty, 10, 0, now).allowed,
            u64::MAX,
            "it does not apply to Empty"
        );
    }
}
