//! NodePool disruption settings in the core's form: budgets (with their reasons, schedules and
//! durations) and `consolidateAfter`.

use std::time::Duration;

use joinery_api::NodePool;
use joinery_api::nodepool::DisruptionReason;
use joinery_core::disruption::{Budget, Reason};

/// The core's form of an API disruption reason.
pub fn reason(r: DisruptionReason) -> Reason {
    match r {
        DisruptionReason::Underutilized => Reason::Underutilized,
        DisruptionReason::Empty => Reason::Empty,
        DisruptionReason::Drifted => Reason::Drifted,
    }
}

/// A NodePool's budgets (upstream's default `nodes: 10%` when it has none).
pub fn budgets(pool: &NodePool) -> Vec<Budget> {
    pool.spec
        .effective_disruption()
        .effective_budgets()
        .into_iter()
        .map(|b| Budget {
            nodes: b.nodes.clone(),
            reasons: b.reasons.as_ref().map(|rs| rs.iter().copied().map(reason).collect()),
            schedule: b.schedule.clone(),
            duration: b.duration.as_ref().map(|d| d.duration()),
        })
        .collect()
}

/// A NodePool's `consolidateAfter` (`None`: `Never`).
pub fn consolidate_after(pool: &NodePool) -> Option<Duration> {
    pool.spec.effective_disruption().effective_consolidate_after().duration()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_and_consolidate_after_come_from_the_pool() {
        let pool: NodePool = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
            "spec": {"disruption": {"consolidateAfter": "30s", "budgets": [
                {"nodes": "0", "reasons": ["Drifted"], "schedule": "0 9 * * *", "duration": "8h"},
                {"nodes": "20%"}
            ]}, "template": {"spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []}}}
        }))
        .unwrap();
        let b = budgets(&pool);
        assert_eq!(b.len(), 2);
        assert_eq!(b[0].reasons, Some(vec![Reason::Drifted]));
        assert_eq!(b[0].duration, Some(Duration::from_secs(8 * 3600)));
        assert_eq!(b[1].nodes, "20%");
        assert_eq!(consolidate_after(&pool), Some(Duration::from_secs(30)));
    }
}
