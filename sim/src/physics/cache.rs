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
        Self { objects: BTreeMap::new(), relisting: None, removed: HashMap::new(), synced: false }
    }

    /// Whether the first full list has arrived.
    pub(crate) fn is_synced(&self) -> bool {
        self.synced
    }

    /// Applies one watch event.
    pub(crate) fn apply(&mut self, event: watcher::Event<K>) {
        match event {
            watcher::Event::Apply(object) => self.upsert(object),
            watcher::Event::Delete(object) => {
                self.objects.remove(&key(&object));
                if let Some(uid) = object.meta().uid.as_deref() {
                    self.removed.remove(uid);
                }
            }
            watcher::Event::Init => self.relisting = Some(BTreeMap::new()),
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
                self.synced = true;
            }
        }
    }

    /// Stores an object unless the cache holds a newer version or this component removed it.
    pub(crate) fn upsert(&mut self, object: K) {
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
