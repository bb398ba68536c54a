//! The store's subresource writes that are more than a plain object write: `pods/binding`
//! (assign a pod to a node), `pods/eviction` (delete a pod unless a PodDisruptionBudget
//! forbids it) and the PodDisruptionBudget status both depend on. The `status` subresource is
//! a [`WriteTarget`](super::WriteTarget) of an ordinary update, and `scale` is served by
//! [`crate::apiserver::scale`] on top of updates.

use serde_json::{Value, json};

use super::history::EventType;
use super::{ObjectKey, State, Store, metadata_mut, metadata_str};
use crate::apiserver::disruption;
use crate::apiserver::resources::ResourceKind;
use crate::error::ApiError;

/// A `Status` object reporting success.
fn success_status(code: u16) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code})
}

impl State {
    /// Recomputes the status of the PodDisruptionBudgets in namespaces where pods or budgets changed.
    pub(super) fn refresh_budgets(&mut self) {
        let namespaces = std::mem::take(&mut self.stale_budgets);
        let now = self.now();
        for namespace in namespaces {
            let updates: Vec<(ObjectKey, Value)> = self
                .objects_in("policy", "poddisruptionbudgets", &namespace)
                .filter_map(|(key, budget)| {
                    let mut budget = budget.to_untyped_value();
                    // Pods are read through the store's index of them, without parsing.
                    let pods = self
                        .objects_in("", "pods", &namespace)
                        .map(|(_, pod)| &**pod);
                    let status =
                        disruption::status(&budget, disruption::figures(&budget, pods), &now);
                    (budget.get("status") != Some(&status)).then(|| {
                        budget["status"] = status;
                        (key.clone(), budget)
                    })
                })
                .collect();
            for (key, next) in updates {
                self.commit(key, next, EventType::Modified);
            }
        }
        // The status writes above only touched budgets whose figures are now current.
        self.stale_budgets.clear();
    }
}

impl Store {
    /// The `pods/binding` subresource: assigns a pod to the node a v1 `Binding` targets (sets
    /// `spec.nodeName` and a `PodScheduled=True` condition). 409 when the pod is already bound or
    /// being deleted, 404 when it does not exist.
    pub fn bind(
        &self,
        pods: &ResourceKind,
        namespace: &str,
        name: &str,
        binding: &Value,
    ) -> Result<Value, ApiError> {
        let node = binding
            .pointer("/target/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                ApiError::invalid(
                    "",
                    "Binding",
                    name,
                    &[("target.name".into(), "Required value".into())],
                )
            })?;
        if let Some(body_name) = metadata_str(binding, "name").filter(|n| !n.is_empty())
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the binding ({body_name}) does not match the pod name on the URL ({name})"
            )));
        }
        let mut state = self.lock();
        let key = Self::key(pods, Some(namespace), name);
        let Some(current) = state.objects.get(&key).map(|o| o.to_untyped_value()) else {
            return Err(ApiError::not_found("", "pods", name));
        };
        let conflict = |why: String| ApiError::conflict("", "pods/binding", name, &why);
        if let Some(uid) = metadata_str(binding, "uid").filter(|u| !u.is_empty())
            && Some(uid) != metadata_str(&current, "uid")
        {
            return Err(conflict(
                "Precondition failed: UID in object meta does not match".into(),
            ));
        }
        if current.pointer("/metadata/deletionTimestamp").is_some() {
            return Err(conflict(format!(
                "pod {name} is being deleted, cannot be assigned to a host"
            )));
        }
        if let Some(bound) = current
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            return Err(conflict(format!(
                "pod {name} is already assigned to node \"{bound}\""
            )));
        }
        let mut next = current.clone();
        if !next.get("spec").is_some_and(Value::is_object) {
            next["spec"] = json!({});
        }
        next["spec"]["nodeName"] = Value::String(node.to_string());
        let generation = current
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0)
            + 1;
        metadata_mut(&mut next).insert("generation".into(), json!(generation));
        if !next.get("status").is_some_and(Value::is_object) {
            next["status"] = json!({});
        }
        let mut conditions: Vec<Value> = next["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["type"] != "PodScheduled")
            .cloned()
            .collect();
        conditions.push(json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": state.now()}));
        next["status"]["conditions"] = Value::Array(conditions);
        state.commit(key, next, EventType::Modified);
        state.settle();
        self.publish(state);
        Ok(success_status(201))
    }

    /// The `pods/eviction` subresource: deletes a pod (respecting finalizers) unless the
    /// PodDisruptionBudget covering it forbids the disruption (429). A pod that is not `Running`
    /// or is already being deleted is evicted without consulting budgets; an unhealthy running
    /// pod may be evicted while its budget is satisfied (or always, with
    /// `unhealthyPodEvictionPolicy: AlwaysAllow`). More than one covering budget is a 500, as
    /// on the real server.
    pub fn evict(
        &self,
        pods: &ResourceKind,
        namespace: &str,
        name: &str,
        eviction: &Value,
    ) -> Result<Value, ApiError> {
        if let Some(body_name) = metadata_str(eviction, "name").filter(|n| !n.is_empty())
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "name in URL does not match name in Eviction object ({body_name} vs {name})"
            )));
        }
        let mut state = self.lock();
        let key = Self::key(pods, Some(namespace), name);
        let Some(pod) = state.objects.get(&key).map(|o| o.to_untyped_value()) else {
            return Err(ApiError::not_found("", "pods", name));
        };
        let consult_budgets = pod.pointer("/status/phase").and_then(Value::as_str)
            == Some("Running")
            && pod.pointer("/metadata/deletionTimestamp").is_none();
        if consult_budgets {
            let labels = pod.pointer("/metadata/labels").and_then(Value::as_object);
            let budgets: Vec<Value> = state
                .objects_in("policy", "poddisruptionbudgets", namespace)
                .map(|(_, budget)| budget.to_untyped_value())
                .filter(|budget| {
                    disruption::selector_matches(budget.pointer("/spec/selector"), labels)
                })
                .collect();
            if budgets.len() > 1 {
                return Err(ApiError::internal(
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                ));
            }
            if let Some(budget) = budgets.first() {
                let figures = disruption::figures(
                    budget,
                    state.objects_in("", "pods", namespace).map(|(_, p)| &**p),
                );
                let allowed = if disruption::pod_is_healthy(&pod) {
                    figures.disruptions_allowed > 0
                } else {
                    budget
                        .pointer("/spec/unhealthyPodEvictionPolicy")
                        .and_then(Value::as_str)
                        == Some("AlwaysAllow")
                        || figures.current_healthy >= figures.desired_healthy
                };
                if !allowed {
                    let budget_name = metadata_str(budget, "name").unwrap_or_default();
                    let cause = format!(
                        "The disruption budget {budget_name} needs {} healthy pods and has {} currently",
                        figures.desired_healthy, figures.current_healthy
                    );
                    return Err(ApiError::too_many_requests(
                        format!(
                            "Cannot evict pod as it would violate the pod's disruption budget. {cause}"
                        ),
                        &[("DisruptionBudget", cause.clone())],
                    ));
                }
            }
        }
        let options = eviction
            .get("deleteOptions")
            .cloned()
            .unwrap_or(Value::Null);
        state.delete_key(pods, key, &options)?;
        state.settle();
        self.publish(state);
        self.evictions
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(success_status(201))
    }
}
