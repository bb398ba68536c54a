//! A watch-fed local copy of one resource type, with write-through: a component applies the
//! objects its own writes return at once, so its next pass never acts on a state older than
//! what it just did (the job client-go's "expectations" and "assume" caches do).

use std::collections::{BTreeMap, HashMap};

use kube::Resource;
use kube::runtime::watcher;

/// Objects keyed by (namespace, name).
pub(crate) struct Cache<K> {
    objects: BTreeMap<(String, String), K>,
    /// Objects being relisted (between `Init` and `InitDone`).
    relisting: Option<BTreeMap<(String, String), K>>,
    /// What this component wrote while a relist was under way: the relist's list may have been
    /// read before the write, and must not take back what the component just did (a
    /// controller would create the same object again).
    written_while_relisting: Vec<K>,
    /// uids this component removed, until the watch reports the removal.
    removed: HashMap<String, ()>,
    synced: bool,
}

fn key<K: Resource>(object: &K) -> (String, String) {
    let meta = object.meta();
    (meta.namespace.clone().unwrap_or_default(), meta.name.clone().unwrap_or_default())
}

fn version<K: Resource>(object: &K) -> Option<u64> {
    object.meta().resource_version.as_deref().and_then(|v| v.parse().ok())
}

impl<K: Resource + Clone> Cache<K> {
    /// An empty cache, not yet synced.
    pub(crate) fn new() -> Self {
        Self { objects: BTreeMap::new(), relisting: None, written_while_relisting: Vec::new(), removed: HashMap::new(), synced: false }
    }

    /// Whether the first full list has arrived.
    pub(crate) fn is_synced(&self) -> bool {
        self.synced
    }

    /// Applies one watch event.
    pub(crate) fn apply(&mut self, event: watcher::Event<K>) {
        match event {
            watcher::Event::Apply(object) => self.store(object),
            watcher::Event::Delete(object) => {
                self.objects.remove(&key(&object));
                if let Some(uid) = object.meta().uid.as_deref() {
                    self.removed.remove(uid);
                }
            }
            watcher::Event::Init => {
                self.relisting = Some(BTreeMap::new());
                self.written_while_relisting.clear();
            }
            watcher::Event::InitApply(object) => {
                if let Some(relisting) = self.relisting.as_mut() {
                    relisting.insert(key(&object), object);
                }
            }
            watcher::Event::InitDone => {
                if let Some(relisting) = self.relisting.take() {
                    self.objects = relisting;
                }
                self.removed.clear();
                // Writes newer than the list win (`store` keeps the newer version). An object
                // written during the relist and deleted before its list was read stays until the
                // next relist: the watch, resumed after the list, never reports that deletion.
                for written in std::mem::take(&mut self.written_while_relisting) {
                    self.store(written);
                }
                self.synced = true;
            }
        }
    }

    /// Records what one of this component's writes returned.
    pub(crate) fn upsert(&mut self, object: K) {
        if self.relisting.is_some() {
            self.written_while_relisting.push(object.clone());
        }
        self.store(object);
    }

    /// Stores an object unless the cache holds a newer version or this component removed it.
    fn store(&mut self, object: K) {
        if object.meta().uid.as_deref().is_some_and(|uid| self.removed.contains_key(uid)) {
            return;
        }
        let key = key(&object);
        if let Some(existing) = self.objects.get(&key)
            && existing.meta().uid == object.meta().uid
            && let (Some(held), Some(offered)) = (version(existing), version(&object))
            && held > offered
        {
            return;
        }
        self.objects.insert(key, object);
    }

    /// Records the answer to a DELETE: the object is gone unless it came back marked for
    /// deletion and still held (finalizers, or a pod's grace period unless `force`, a delete
    /// with a zero grace period).
    pub(crate) fn deleted(&mut self, object: K, force: bool) {
        let meta = object.meta();
        let held = meta.deletion_timestamp.is_some()
            && (meta.finalizers.as_ref().is_some_and(|f| !f.is_empty())
                || (!force && meta.deletion_grace_period_seconds.unwrap_or(0) > 0));
        if held {
            self.upsert(object);
        } else {
            self.objects.remove(&key(&object));
            if let Some(uid) = meta.uid.clone() {
                self.removed.insert(uid, ());
            }
        }
    }

    /// Forgets an object that turned out to be gone already (a 404 answer).
    pub(crate) fn forget(&mut self, namespace: &str, name: &str) {
        self.objects.remove(&(namespace.to_string(), name.to_string()));
    }

    /// Every object, ordered by namespace and name.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &K> {
        self.objects.values()
    }

    /// One object.
    pub(crate) fn get(&self, namespace: &str, name: &str) -> Option<&K> {
        self.objects.get(&(namespace.to_string(), name.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::DynamicObject;
    use serde_json::json;

    fn machine(name: &str, version: u64) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": name, "namespace": "default", "uid": name, "resourceVersion": version.to_string()},
        }))
        .unwrap()
    }

    fn names(cache: &Cache<DynamicObject>) -> Vec<String> {
        cache.iter().filter_map(|o| o.metadata.name.clone()).collect()
    }

    #[test]
    fn a_relist_read_before_a_write_does_not_take_the_write_back() {
        let mut cache = Cache::new();
        cache.apply(watcher::Event::Init);
        cache.apply(watcher::Event::InitDone);
        cache.upsert(machine("before", 5));
        // A watch that expired: the relist starts, the component creates an object, and the
        // list (read before the create) holds only what existed before.
        cache.apply(watcher::Event::Init);
        cache.upsert(machine("during", 9));
        cache.apply(watcher::Event::InitApply(machine("before", 5)));
        cache.apply(watcher::Event::InitDone);
        assert_eq!(names(&cache), ["before", "during"]);
        // A later relist that does not list it means it is gone.
        cache.apply(watcher::Event::Init);
        cache.apply(watcher::Event::InitApply(machine("before", 5)));
        cache.apply(watcher::Event::InitDone);
        assert_eq!(names(&cache), ["before"]);
        // A listed version newer than the write wins.
        cache.apply(watcher::Event::Init);
        cache.upsert(machine("before", 6));
        cache.apply(watcher::Event::InitApply(machine("before", 7)));
        cache.apply(watcher::Event::InitDone);
        assert_eq!(version(cache.get("default", "before").unwrap()), Some(7));
    }
}
