//! The change history of the store: every write becomes a [`StoredEvent`] with its own
//! resourceVersion, a bounded window of them is kept, and watches read it from a version on
//! (or learn, with [`HistoryExpired`], that the window no longer reaches back that far).

use std::sync::Arc;

use serde_json::Value;

use super::{ObjectKey, State, Store, StoredObject, metadata_mut};
use crate::apiserver::resources::ResourceKind;

/// Kind of change recorded in the event history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// The object was created.
    Added,
    /// The object changed.
    Modified,
    /// The object was removed.
    Deleted,
}

impl EventType {
    /// The watch event name, e.g. `ADDED`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change in the history. Its objects are the very ones the object map holds (or held),
/// shared rather than copied.
#[derive(Debug)]
pub struct StoredEvent {
    /// The resourceVersion this change produced.
    pub resource_version: u64,
    /// API group of the changed object.
    pub group: String,
    /// Plural resource name of the changed object.
    pub plural: String,
    /// Namespace (empty for cluster-scoped objects).
    pub namespace: String,
    /// What happened.
    pub event_type: EventType,
    /// The object after the change (for deletions: its last state).
    pub object: Arc<StoredObject>,
    /// The object before the change, if it existed.
    pub previous: Option<Arc<StoredObject>>,
}

/// The watch history no longer covers the requested version.
#[derive(Debug, Clone, Copy)]
pub struct HistoryExpired {
    /// The oldest version a watch can still start from.
    pub oldest_watchable: u64,
}

impl State {
    /// Records a change of the object at `key` to `object` (for deletions: its last state) under
    /// the next resourceVersion: stores it (serialized once, see [`StoredObject`]), keeps the
    /// indexes in step and appends the event, which shares the stored object and the one it
    /// replaced. Returns `object` with its new resourceVersion.
    pub(super) fn commit(
        &mut self,
        key: ObjectKey,
        mut object: Value,
        event_type: EventType,
    ) -> Value {
        self.resource_version += 1;
        let resource_version = self.resource_version;
        metadata_mut(&mut object).insert(
            "resourceVersion".into(),
            Value::String(resource_version.to_string()),
        );
        if (key.0.is_empty() && key.1 == "pods")
            || (key.0 == "policy" && key.1 == "poddisruptionbudgets")
        {
            self.stale_budgets.insert(key.2.clone());
        }
        let stored = Arc::new(StoredObject::new(&object));
        let deleted = event_type == EventType::Deleted;
        self.index_owners(&key, (!deleted).then_some(&*stored));
        let previous = if deleted {
            self.live_uids.remove(stored.uid());
            self.removed_uids.push(stored.uid().to_string());
            self.objects.remove(&key)
        } else {
            self.live_uids.insert(stored.uid().to_string());
            self.objects.insert(key.clone(), stored.clone())
        };
        self.reindex(&key, previous.as_deref(), (!deleted).then_some(&*stored));
        self.touch(&key.0, &key.1, &stored, previous.as_deref());
        let (group, plural, namespace, name) = key;
        tracing::trace!(%group, resource = %plural, %namespace, %name, resource_version, ?event_type, "object written");
        self.history.push_back(Arc::new(StoredEvent {
            resource_version,
            group,
            plural,
            namespace,
            event_type,
            object: stored,
            previous,
        }));
        self.trim_history();
        object
    }

    pub(super) fn trim_history(&mut self) {
        while self.history.len() > self.window.max(1) {
            if let Some(evicted) = self.history.pop_front() {
                self.oldest_watchable = evicted.resource_version;
            }
        }
    }
}

impl Store {
    /// Changes how many events are retained for watches (older ones are dropped at once).
    pub fn set_window(&self, window: usize) {
        let mut state = self.lock();
        state.window = window;
        state.trim_history();
    }

    /// Forgets the whole event history, as an etcd compaction would: any watch or continue
    /// token older than the current version now gets `410 Gone`.
    pub fn compact(&self) {
        let mut state = self.lock();
        state.history.clear();
        state.oldest_watchable = state.resource_version;
    }

    /// The objects a watch without a starting version begins with (shared, not copied), and the
    /// version it continues from.
    pub fn watch_snapshot(
        &self,
        kind: &ResourceKind,
        namespace: Option<&str>,
    ) -> (Vec<Arc<StoredObject>>, u64) {
        let state = self.lock();
        let namespace = if kind.namespaced { namespace } else { None };
        let objects = state
            .objects
            .range(
                (
                    kind.group.clone(),
                    kind.plural.clone(),
                    namespace.unwrap_or_default().to_string(),
                    String::new(),
                )..,
            )
            .take_while(|((group, plural, object_namespace, _), _)| {
                *group == kind.group
                    && *plural == kind.plural
                    && namespace.is_none_or(|n| n == object_namespace)
            })
            .map(|(_, object)| object.clone())
            .collect();
        (objects, state.resource_version)
    }

    /// Events of a type (in a namespace) newer than `since`, plus the current version; fails when
    /// the history no longer reaches back to `since`.
    pub fn events_since(
        &self,
        kind: &ResourceKind,
        namespace: Option<&str>,
        since: u64,
    ) -> Result<(Vec<Arc<StoredEvent>>, u64), HistoryExpired> {
        let state = self.lock();
        if since < state.oldest_watchable {
            return Err(HistoryExpired {
                oldest_watchable: state.oldest_watchable,
            });
        }
        let namespace = if kind.namespaced { namespace } else { None };
        let first = state
            .history
            .partition_point(|event| event.resource_version <= since);
        let events = state
            .history
            .range(first..)
            .filter(|event| {
                event.group == kind.group
                    && event.plural == kind.plural
                    && namespace.is_none_or(|n| n == event.namespace)
            })
            .cloned()
            .collect();
        Ok((events, state.resource_version))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn history_window_expires_old_versions() {
        let store = Store::new(3);
        let configmaps = store.lookup("", "v1", "configmaps").unwrap();
        let start = store.resource_version();
        for i in 0..5 {
            store
                .create(
                    &configmaps,
                    Some("default"),
                    json!({"metadata": {"name": format!("c{i}")}}),
                )
                .unwrap();
        }
        assert!(
            store
                .events_since(&configmaps, Some("default"), start)
                .is_err()
        );
        let (events, _) = store
            .events_since(&configmaps, Some("default"), start + 3)
            .unwrap();
        assert_eq!(events.len(), 2);
    }
}
