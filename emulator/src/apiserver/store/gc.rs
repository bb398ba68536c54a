//! Deletion and garbage collection: DELETE preconditions, the grace period of bound pods,
//! finalizers (an object with finalizers is only marked with a `deletionTimestamp`), the
//! `Orphan` propagation policy, and the collector that removes dependents whose
//! ownerReferences all name objects that are gone.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use super::history::EventType;
use super::{
    ListOptions, ObjectKey, State, Store, StoredObject, metadata_mut, metadata_str, with_type,
};
use crate::apiserver::resources::ResourceKind;
use crate::error::ApiError;

pub(super) fn has_finalizers(object: &Value) -> bool {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

impl State {
    /// Keeps the owner-uid → dependents index in step with the object at `key` becoming `next`
    /// (`None`: removed). Called before the object map changes.
    pub(super) fn index_owners(&mut self, key: &ObjectKey, next: Option<&StoredObject>) {
        let before: BTreeSet<String> = self
            .objects
            .get(key)
            .map(|o| o.owner_uids().map(String::from).collect())
            .unwrap_or_default();
        let after: BTreeSet<String> = next
            .map(|o| o.owner_uids().map(String::from).collect())
            .unwrap_or_default();
        for uid in before.difference(&after) {
            if let Some(dependents) = self.dependents.get_mut(uid) {
                dependents.remove(key);
                if dependents.is_empty() {
                    self.dependents.remove(uid);
                }
            }
        }
        for uid in after.difference(&before) {
            self.dependents
                .entry(uid.clone())
                .or_default()
                .insert(key.clone());
        }
        if !after.is_empty() && after != before {
            // New owner references may already dangle; let the collector check them.
            self.gc_candidates.push(key.clone());
        }
    }

    /// Deletes the object at `key` as a DELETE request would: preconditions, the orphan
    /// propagation policy, then finalizers (deletionTimestamp only) or removal.
    pub(super) fn delete_key(
        &mut self,
        kind: &ResourceKind,
        key: ObjectKey,
        options: &Value,
    ) -> Result<Value, ApiError> {
        let name = key.3.clone();
        let Some(current) = self.objects.get(&key).map(|o| o.to_untyped_value()) else {
            return Err(ApiError::not_found(&kind.group, &kind.plural, &name));
        };
        if let Some(uid) = options
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            && Some(uid) != metadata_str(&current, "uid")
        {
            return Err(ApiError::conflict(
                &kind.group,
                &kind.plural,
                &name,
                "Precondition failed: UID does not match",
            ));
        }
        if let Some(version) = options
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            && Some(version) != metadata_str(&current, "resourceVersion")
        {
            return Err(ApiError::conflict(
                &kind.group,
                &kind.plural,
                &name,
                "Precondition failed: ResourceVersion does not match",
            ));
        }
        let orphan = options.get("propagationPolicy").and_then(Value::as_str) == Some("Orphan")
            || options.get("orphanDependents").and_then(Value::as_bool) == Some(true);
        if orphan && let Some(uid) = metadata_str(&current, "uid") {
            self.orphan_dependents(uid);
        }
        let grace = self.grace_period(&key, &current, options);
        if grace > 0 {
            // A pod on a node is only marked: its kubelet stops it and removes it (with a zero
            // grace period) once the grace period is over. A shorter grace period shortens it.
            let remaining = current
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64);
            if current.pointer("/metadata/deletionTimestamp").is_some()
                && remaining.is_some_and(|r| r <= grace)
            {
                return Ok(current);
            }
            let mut next = current.clone();
            let deadline = self.clock.now() + Duration::from_secs(grace as u64);
            let metadata = metadata_mut(&mut next);
            metadata.insert(
                "deletionTimestamp".into(),
                Value::String(joinery_core::time::rfc3339(deadline)),
            );
            metadata.insert("deletionGracePeriodSeconds".into(), json!(grace));
            return Ok(self.commit(key, next, EventType::Modified));
        }
        if has_finalizers(&current) {
            let marked = current.pointer("/metadata/deletionTimestamp").is_some();
            if marked
                && current
                    .pointer("/metadata/deletionGracePeriodSeconds")
                    .and_then(Value::as_i64)
                    .unwrap_or(0)
                    == 0
            {
                return Ok(current);
            }
            let mut next = current.clone();
            let now = self.now();
            let metadata = metadata_mut(&mut next);
            if !marked {
                metadata.insert("deletionTimestamp".into(), Value::String(now));
            }
            metadata.insert("deletionGracePeriodSeconds".into(), json!(0));
            Ok(self.commit(key, next, EventType::Modified))
        } else {
            let stored = self.commit(key, current, EventType::Deleted);
            self.after_crd_write(kind, &stored, true);
            Ok(stored)
        }
    }

    /// The grace period (seconds) a DELETE of the object at `key` waits for: zero except for a
    /// pod bound to a node that has not finished, as on the real server — then the
    /// DeleteOptions' `gracePeriodSeconds`, else the pod's `terminationGracePeriodSeconds`,
    /// else 30.
    pub(super) fn grace_period(&self, key: &ObjectKey, current: &Value, options: &Value) -> i64 {
        let is_pod = key.0.is_empty() && key.1 == "pods";
        if !self.pod_grace_periods || !is_pod {
            return 0;
        }
        let bound = current
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        let finished = matches!(
            current.pointer("/status/phase").and_then(Value::as_str),
            Some("Succeeded" | "Failed")
        );
        if !bound || finished {
            return 0;
        }
        options
            .get("gracePeriodSeconds")
            .and_then(Value::as_i64)
            .or_else(|| {
                current
                    .pointer("/spec/terminationGracePeriodSeconds")
                    .and_then(Value::as_i64)
            })
            .unwrap_or(30)
            .max(0)
    }

    /// Removes the owner references pointing at `owner_uid` from every object.
    pub(super) fn orphan_dependents(&mut self, owner_uid: &str) {
        let dependents: Vec<ObjectKey> = self
            .dependents
            .get(owner_uid)
            .into_iter()
            .flatten()
            .cloned()
            .collect();
        for key in dependents {
            let Some(mut next) = self.objects.get(&key).map(|o| o.to_untyped_value()) else {
                continue;
            };
            let metadata = metadata_mut(&mut next);
            let kept: Vec<Value> = metadata
                .get("ownerReferences")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|reference| reference["uid"].as_str() != Some(owner_uid))
                .cloned()
                .collect();
            if kept.is_empty() {
                metadata.remove("ownerReferences");
            } else {
                metadata.insert("ownerReferences".into(), Value::Array(kept));
            }
            self.commit(key, next, EventType::Modified);
        }
    }

    /// Housekeeping after a write, under the same lock: garbage collection of dependents whose
    /// owners are all gone, then PodDisruptionBudget status.
    pub(super) fn settle(&mut self) {
        self.collect_garbage();
        self.refresh_budgets();
    }

    /// Deletes (respecting finalizers) every object whose owner references all name objects
    /// that no longer exist: dependents of the objects removed since the last run, and objects
    /// whose owner references changed (they may have been created with dangling ones).
    pub(super) fn collect_garbage(&mut self) {
        loop {
            if let Some(removed) = self.removed_uids.pop() {
                let dependents: Vec<ObjectKey> = self
                    .dependents
                    .get(&removed)
                    .into_iter()
                    .flatten()
                    .cloned()
                    .collect();
                for key in dependents {
                    self.collect_if_orphaned(key);
                }
            } else if let Some(key) = self.gc_candidates.pop() {
                self.collect_if_orphaned(key);
            } else {
                break;
            }
        }
    }

    /// Deletes the object at `key` if it has owner references and none of them names a stored object.
    pub(super) fn collect_if_orphaned(&mut self, key: ObjectKey) {
        let Some(current) = self.objects.get(&key) else {
            return;
        };
        let keep = {
            let mut owners = current.owner_uids().peekable();
            owners.peek().is_none()
                || owners.any(|uid| self.live_uids.contains(uid))
                || current.is_deleting()
        };
        if keep {
            return;
        }
        tracing::debug!(plural = %key.1, namespace = %key.2, name = %key.3, "garbage-collecting a dependent whose owners are gone");
        let kind = self
            .all_kinds()
            .find(|k| k.group == key.0 && k.plural == key.1)
            .cloned();
        if let Some(kind) = kind {
            let _ = self.delete_key(&kind, key, &Value::Null);
        }
    }
}

impl Store {
    /// Deletes an object: with finalizers it only gets a deletionTimestamp; otherwise it is removed
    /// and its dependents are garbage-collected. `options` is a DeleteOptions body: preconditions
    /// are honoured, `propagationPolicy: Orphan` (or `orphanDependents`) strips the owner
    /// references to the object from its dependents instead; `Foreground` acts as `Background`.
    pub fn delete(
        &self,
        kind: &ResourceKind,
        namespace: Option<&str>,
        name: &str,
        options: &Value,
    ) -> Result<Value, ApiError> {
        let mut state = self.lock();
        let stored = state.delete_key(kind, Self::key(kind, namespace, name), options)?;
        state.settle();
        self.publish(state);
        Ok(with_type(kind, &stored))
    }

    /// Deletes every object of a type (in a namespace) matching the selectors; `delete_options`
    /// (a DeleteOptions body) applies to each object as in [`Store::delete`].
    pub fn delete_collection(
        &self,
        kind: &ResourceKind,
        namespace: Option<&str>,
        options: &ListOptions,
        delete_options: &Value,
    ) -> Result<Value, ApiError> {
        let selected = self.list(
            kind,
            namespace,
            &ListOptions {
                limit: None,
                continue_token: None,
                ..options.clone()
            },
        )?;
        let mut deleted = Vec::new();
        for item in &selected.items {
            let item_namespace = Some(item.namespace()).filter(|n| !n.is_empty());
            match self.delete(
                kind,
                item_namespace.or(namespace),
                item.name(),
                delete_options,
            ) {
                Ok(object) => deleted.push(object),
                Err(error) if error.code == 404 => {}
                Err(error) => return Err(error),
            }
        }
        Ok(json!({
            "kind": kind.list_kind,
            "apiVersion": kind.api_version(),
            "metadata": {"resourceVersion": self.resource_version().to_string()},
            "items": deleted,
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use joinery_core::clock::Clock;

    use super::super::WriteTarget;
    use super::*;

    #[test]
    fn bound_pods_wait_for_their_grace_period_on_the_store_clock() {
        let clock = Arc::new(Clock::with_speed(1000.0));
        let store = Store::with_clock(100, clock.clone(), true);
        let pods = store.lookup("", "v1", "pods").unwrap();
        let pod = |name: &str, node: Option<&str>| json!({"metadata": {"name": name}, "spec": {"nodeName": node, "terminationGracePeriodSeconds": 120, "containers": []}});
        store
            .create(&pods, Some("default"), pod("unbound", None))
            .unwrap();
        store
            .create(&pods, Some("default"), pod("bound", Some("n1")))
            .unwrap();
        store
            .delete(&pods, Some("default"), "unbound", &Value::Null)
            .unwrap();
        assert!(
            store.get(&pods, Some("default"), "unbound").is_err(),
            "unbound pods go at once"
        );

        store
            .delete(&pods, Some("default"), "bound", &Value::Null)
            .unwrap();
        let marked = store.get(&pods, Some("default"), "bound").unwrap();
        assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 120);
        let deadline = marked["metadata"]["deletionTimestamp"]
            .as_str()
            .unwrap()
            .to_string();
        let expected = joinery_core::time::rfc3339(clock.now() + Duration::from_secs(120));
        assert!(
            deadline.as_str() <= expected.as_str() && deadline.len() == expected.len(),
            "{deadline} vs {expected}"
        );
        // Status writes do not finish a pod within its grace period; a zero grace period does.
        store
            .update(
                &pods,
                Some("default"),
                "bound",
                WriteTarget::Main,
                |current| {
                    let mut next = current.clone();
                    next["status"] = json!({"phase": "Running"});
                    Ok(next)
                },
            )
            .unwrap();
        assert!(store.get(&pods, Some("default"), "bound").is_ok());
        store
            .delete(
                &pods,
                Some("default"),
                "bound",
                &json!({"gracePeriodSeconds": 0}),
            )
            .unwrap();
        assert!(store.get(&pods, Some("default"), "bound").is_err());
    }
}
