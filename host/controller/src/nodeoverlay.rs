//! NodeOverlay status: the `ValidationSucceeded` and `Ready` conditions, as upstream's
//! `nodeoverlay.validation` controller writes them. Runs only with the `NodeOverlay` feature
//! gate (the overlays are not watched otherwise). Refreshed on every cache change and every
//! 5 seconds.
//!
//! An overlay that does not convert (a bad requirement, price or capacity) is
//! `ValidationSucceeded=False` with reason `RuntimeValidation` and the field in the message;
//! two overlays of equal weight that can set the same price or resource of one instance type
//! are both `ValidationSucceeded=False` with reason `Conflict`.

use crate::state::Ordered;
use std::sync::Arc;
use std::time::Duration;

use joinery_api::{ConditionStatus, NodeOverlay};
use kube::api::Api;
use serde_json::json;
use tokio::sync::watch;

use crate::provisioner::{OverlaySet, usable_overlays};
use crate::util::{self, condition};
use crate::writes;
use crate::{Context, ControllerError};

/// Runs the NodeOverlay status loop (returns at once when overlays are not watched).
pub async fn run(ctx: Arc<Context>, stopped: watch::Receiver<bool>) {
    if ctx.state.node_overlays.is_none() {
        return;
    }
    util::run_loop(
        ctx,
        stopped,
        "nodeoverlay.status",
        Duration::from_secs(5),
        step,
    )
    .await;
}

/// What validation says of one overlay: the `ValidationSucceeded` status, reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Validation {
    /// `True` when the overlay converts and conflicts with no other.
    pub status: ConditionStatus,
    /// `ValidationSucceeded`, `RuntimeValidation` or `Conflict` (upstream's reasons).
    pub reason: &'static str,
    /// Empty when valid; otherwise what is wrong, naming the field or the other overlay.
    pub message: String,
}

/// The validation outcome of the overlay `name` within `set` (pure: no I/O).
pub fn validation(set: &OverlaySet, name: &str) -> Validation {
    if let Some((_, reason)) = set.invalid.iter().find(|(n, _)| n == name) {
        return Validation {
            status: ConditionStatus::False,
            reason: "RuntimeValidation",
            message: reason.clone(),
        };
    }
    let others: Vec<&str> = set
        .conflicts
        .iter()
        .filter_map(|(a, b)| {
            if a == name {
                Some(b.as_str())
            } else if b == name {
                Some(a.as_str())
            } else {
                None
            }
        })
        .collect();
    if others.is_empty() {
        return Validation {
            status: ConditionStatus::True,
            reason: "ValidationSucceeded",
            message: String::new(),
        };
    }
    Validation {
        status: ConditionStatus::False,
        reason: "Conflict",
        message: format!(
            "conflict with another overlay: {} (same weight, can set the same price or resource of one instance type)",
            others.join(", ")
        ),
    }
}

async fn step(ctx: Arc<Context>) -> Result<(), ControllerError> {
    let Some(store) = ctx.state.node_overlays.as_ref() else {
        return Ok(());
    };
    let objects = store.ordered();
    let set = usable_overlays(&objects);
    let api: Api<NodeOverlay> = Api::all(ctx.client.clone());
    for overlay in &objects {
        let Some(name) = overlay.metadata.name.as_deref() else {
            continue;
        };
        if overlay.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let outcome = validation(&set, name);
        let validated = condition(
            &ctx,
            "ValidationSucceeded",
            outcome.status,
            outcome.reason,
            outcome.message,
        );
        let ready = if validated.is_true() {
            condition(&ctx, "Ready", ConditionStatus::True, "Ready", "")
        } else {
            condition(
                &ctx,
                "Ready",
                ConditionStatus::False,
                "NotReady",
                "ValidationSucceeded must be True",
            )
        };
        let written =
            writes::patch_guarded(&api, overlay.as_ref(), writes::Part::Status, |current| {
                let mut conds = current
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.clone())
                    .unwrap_or_default();
                let mut changed = false;
                for c in [&validated, &ready] {
                    changed |= joinery_api::condition::set_condition(&mut conds, c.clone());
                }
                changed.then(|| json!({"status": {"conditions": conds}}))
            })
            .await;
        match written {
            Ok(_) => {}
            // Deleted since the cache saw it: nothing to report on.
            Err(e) if util::is_not_found(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set() -> OverlaySet {
        OverlaySet {
            overlays: Vec::new(),
            invalid: vec![("bad".into(), "spec.price: \"x\" is not a decimal".into())],
            conflicts: vec![("a".into(), "b".into()), ("a".into(), "c".into())],
        }
    }

    #[test]
    fn an_overlay_that_does_not_convert_fails_runtime_validation_with_the_field() {
        let v = validation(&set(), "bad");
        assert_eq!(
            (v.status, v.reason),
            (ConditionStatus::False, "RuntimeValidation")
        );
        assert!(v.message.contains("spec.price"), "{}", v.message);
    }

    #[test]
    fn both_sides_of_a_conflict_are_marked_and_name_each_other() {
        let a = validation(&set(), "a");
        assert_eq!((a.status, a.reason), (ConditionStatus::False, "Conflict"));
        assert!(a.message.contains("b, c"), "{}", a.message);
        let c = validation(&set(), "c");
        assert_eq!(c.reason, "Conflict");
        assert!(c.message.contains(": a "), "{}", c.message);
    }

    #[test]
    fn an_overlay_without_problems_is_validated() {
        let v = validation(&set(), "fine");
        assert_eq!(
            (v.status, v.reason, v.message.as_str()),
            (ConditionStatus::True, "ValidationSucceeded", "")
        );
    }
}
