//! PodDisruptionBudget arithmetic: which pods a budget covers, which of them count as healthy,
//! and how many voluntary disruptions it allows. Pure functions over JSON objects.
//!
//! The emulator's definitions (documented in `docs/simulator.md`):
//! - a budget covers the pods of its namespace that its `spec.selector` matches (an empty
//!   selector matches every pod, a missing one none) and that are not being deleted;
//! - `expectedPods` is the number of covered pods (there is no controller scale lookup);
//! - a covered pod is healthy when its phase is `Running` and its `Ready` condition is `True`;
//! - `desiredHealthy` is `minAvailable` (a percentage of `expectedPods`, rounded up), or
//!   `expectedPods - maxUnavailable` (a percentage rounded up), or 0 when neither is set;
//! - `disruptionsAllowed` is `currentHealthy - desiredHealthy`, never below 0.

use serde_json::{Value, json};

/// The figures a budget's status reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetFigures {
    /// Covered pods that are not being deleted.
    pub expected_pods: i64,
    /// Covered pods that are Running and Ready.
    pub current_healthy: i64,
    /// Healthy pods the budget wants to keep.
    pub desired_healthy: i64,
    /// How many healthy pods may be disrupted now.
    pub disruptions_allowed: i64,
}

/// What the budget arithmetic reads of a pod: its JSON, or the store's index of it.
pub trait BudgetPod {
    /// The value of a (string) label, if the pod has it.
    fn label(&self, key: &str) -> Option<&str>;
    /// Whether the pod has a `deletionTimestamp`.
    fn is_deleting(&self) -> bool;
    /// Whether the pod counts as healthy (see [`pod_is_healthy`]).
    fn is_healthy(&self) -> bool;
}

impl BudgetPod for Value {
    fn label(&self, key: &str) -> Option<&str> {
        self.pointer("/metadata/labels")
            .and_then(|labels| labels.get(key))
            .and_then(Value::as_str)
    }

    fn is_deleting(&self) -> bool {
        self.pointer("/metadata/deletionTimestamp").is_some()
    }

    fn is_healthy(&self) -> bool {
        pod_is_healthy(self)
    }
}

/// Whether a `metav1.LabelSelector` (`matchLabels`, `matchExpressions`) selects these labels.
/// `None` (no selector) selects nothing; an empty selector selects everything.
pub fn selector_matches(
    selector: Option<&Value>,
    labels: Option<&serde_json::Map<String, Value>>,
) -> bool {
    selector_matches_by(selector, |key| {
        labels.and_then(|l| l.get(key)).and_then(Value::as_str)
    })
}

/// [`selector_matches`] over the labels `label` looks up.
pub fn selector_matches_by<'a>(
    selector: Option<&Value>,
    label: impl Fn(&str) -> Option<&'a str>,
) -> bool {
    let Some(selector) = selector.filter(|s| s.is_object()) else {
        return false;
    };
    let labels_match = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .all(|(key, value)| label(key) == value.as_str());
    let expressions_match = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .all(|expression| {
            let key = expression["key"].as_str().unwrap_or_default();
            let values: Vec<&str> = expression["values"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            match expression["operator"].as_str() {
                Some("In") => label(key).is_some_and(|v| values.contains(&v)),
                Some("NotIn") => !label(key).is_some_and(|v| values.contains(&v)),
                Some("Exists") => label(key).is_some(),
                Some("DoesNotExist") => label(key).is_none(),
                _ => false,
            }
        });
    labels_match && expressions_match
}

/// Whether a budget covers a pod (selector match, pod not being deleted).
pub fn covers(budget: &Value, pod: &(impl BudgetPod + ?Sized)) -> bool {
    !pod.is_deleting()
        && selector_matches_by(budget.pointer("/spec/selector"), |key| pod.label(key))
}

/// Whether a pod counts as healthy: phase `Running` and condition `Ready` is `True`.
pub fn pod_is_healthy(pod: &Value) -> bool {
    pod.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
        && pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// Resolves an int-or-percent against a total; percentages round up. `None` when malformed.
fn scaled(value: &Value, total: i64) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(text) => {
            let percent: i64 = text.strip_suffix('%')?.trim().parse().ok()?;
            Some((percent * total + 99) / 100)
        }
        _ => None,
    }
}

/// Computes a budget's figures over the pods of its namespace.
pub fn figures<'a, P: BudgetPod + ?Sized + 'a>(
    budget: &Value,
    pods: impl IntoIterator<Item = &'a P>,
) -> BudgetFigures {
    let covered: Vec<&P> = pods
        .into_iter()
        .filter(|pod| covers(budget, *pod))
        .collect();
    let expected_pods = covered.len() as i64;
    let current_healthy = covered.iter().filter(|pod| pod.is_healthy()).count() as i64;
    let spec = budget.get("spec");
    let desired_healthy = if let Some(max_unavailable) = spec
        .and_then(|s| s.get("maxUnavailable"))
        .filter(|v| !v.is_null())
    {
        (expected_pods - scaled(max_unavailable, expected_pods).unwrap_or(0)).max(0)
    } else if let Some(min_available) = spec
        .and_then(|s| s.get("minAvailable"))
        .filter(|v| !v.is_null())
    {
        scaled(min_available, expected_pods).unwrap_or(0)
    } else {
        0
    };
    BudgetFigures {
        expected_pods,
        current_healthy,
        desired_healthy,
        disruptions_allowed: (current_healthy - desired_healthy).max(0),
    }
}

/// The budget's status for these figures, keeping fields the emulator does not compute; `now`
/// is the timestamp a changed condition gets.
pub fn status(budget: &Value, figures: BudgetFigures, now: &str) -> Value {
    let mut status = budget
        .get("status")
        .filter(|s| s.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}));
    status["observedGeneration"] = budget
        .pointer("/metadata/generation")
        .cloned()
        .unwrap_or(json!(1));
    status["expectedPods"] = json!(figures.expected_pods);
    status["currentHealthy"] = json!(figures.current_healthy);
    status["desiredHealthy"] = json!(figures.desired_healthy);
    status["disruptionsAllowed"] = json!(figures.disruptions_allowed);
    let (allowed, reason) = if figures.disruptions_allowed > 0 {
        ("True", "SufficientPods")
    } else {
        ("False", "InsufficientPods")
    };
    let previous = budget
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|conditions| conditions.iter().find(|c| c["type"] == "DisruptionAllowed"));
    // Keep the transition time while the condition holds, so unchanged figures rewrite nothing.
    let since = previous
        .filter(|c| c["status"] == allowed)
        .and_then(|c| c.get("lastTransitionTime").cloned())
        .unwrap_or_else(|| Value::String(now.to_string()));
    let mut conditions: Vec<Value> = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["type"] != "DisruptionAllowed")
        .cloned()
        .collect();
    conditions.push(json!({
        "type": "DisruptionAllowed",
        "status": allowed,
        "reason": reason,
        "message": "",
        "observedGeneration": status["observedGeneration"],
        "lastTransitionTime": since,
    }));
    status["conditions"] = Value::Array(conditions);
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(labels: Value, phase: &str, ready: bool) -> Value {
        json!({
            "metadata": {"name": "p", "labels": labels},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]},
        })
    }

    #[test]
    fn selectors_follow_label_selector_rules() {
        let labels = json!({"app": "web", "tier": "front"});
        let labels = labels.as_object();
        assert!(selector_matches(Some(&json!({})), labels));
        assert!(!selector_matches(None, labels));
        assert!(selector_matches(
            Some(&json!({"matchLabels": {"app": "web"}})),
            labels
        ));
        assert!(!selector_matches(
            Some(&json!({"matchLabels": {"app": "db"}})),
            labels
        ));
        let expression = json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["front", "back"]}, {"key": "x", "operator": "DoesNotExist"}]});
        assert!(selector_matches(Some(&expression), labels));
    }

    #[test]
    fn figures_for_integers_and_percentages() {
        let pods = [
            pod(json!({"app": "web"}), "Running", true),
            pod(json!({"app": "web"}), "Running", true),
            pod(json!({"app": "web"}), "Running", false),
            pod(json!({"app": "db"}), "Running", true),
        ];
        let budget = |spec: Value| json!({"spec": spec});
        let selector = json!({"matchLabels": {"app": "web"}});
        let min2 = figures(
            &budget(json!({"selector": selector, "minAvailable": 2})),
            &pods,
        );
        assert_eq!(
            min2,
            BudgetFigures {
                expected_pods: 3,
                current_healthy: 2,
                desired_healthy: 2,
                disruptions_allowed: 0
            }
        );
        let max_half = figures(
            &budget(json!({"selector": selector, "maxUnavailable": "50%"})),
            &pods,
        );
        assert_eq!(max_half.desired_healthy, 1);
        assert_eq!(max_half.disruptions_allowed, 1);
        let min_half = figures(
            &budget(json!({"selector": selector, "minAvailable": "50%"})),
            &pods,
        );
        assert_eq!(min_half.desired_healthy, 2);
        let none = figures(&budget(json!({"selector": selector})), &pods);
        assert_eq!(none.disruptions_allowed, 2);
    }
}
