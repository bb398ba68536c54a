//! The pod cache: every pod of the cluster as a [`LeanPod`], kept current by one watch.
//!
//! Pods are by far the most numerous objects a controller caches (50,000 on a cluster of
//! 5,000 nodes), so this cache is ours rather than `kube`'s reflector: it keeps each pod once,
//! in a table of `Arc`s found by namespace and name, with no key of its own (a reflector keys
//! each object by an `ObjectRef`, four more strings per pod), and a pod's metadata is the
//! compact [`PodMeta`](joinery_kube::lean::PodMeta) rather than an `ObjectMeta`.
//!
//! Like a reflector, a relist (the watch's first list, or a new one after the watch broke)
//! builds a new table beside the current one and swaps it in once the list is complete, so a
//! reader never sees a half-listed cluster.

use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, RwLock};

use hashbrown::HashTable;
use joinery_kube::lean::LeanPod;
use kube::runtime::watcher;

/// Every pod, read by the controllers; cheap to clone (all clones read the same cache).
#[derive(Clone)]
pub struct PodCache {
    shared: Arc<Shared>,
    ready: tokio::sync::watch::Receiver<bool>,
}

/// The writing end of a [`PodCache`]: the pod watch applies its events through it.
pub struct PodCacheWriter {
    shared: Arc<Shared>,
    ready: tokio::sync::watch::Sender<bool>,
    /// The table a relist is filling, swapped in when it ends.
    relisting: Option<Pods>,
}

struct Shared {
    pods: RwLock<Pods>,
    hasher: RandomState,
}

/// Pods found by namespace and name.
#[derive(Default)]
struct Pods(HashTable<Arc<LeanPod>>);

/// The cache is not ready because its watch stopped before the first list was complete.
#[derive(Debug, thiserror::Error)]
#[error("the pod watch stopped before its first list was complete")]
pub struct PodWatchStopped;

fn key(pod: &LeanPod) -> (&str, &str) {
    (pod.metadata.namespace.as_deref().unwrap_or(""), pod.metadata.name.as_deref().unwrap_or(""))
}

impl Pods {
    fn insert(&mut self, hasher: &RandomState, pod: Arc<LeanPod>) {
        let hash = hasher.hash_one(key(&pod));
        match self.0.find_mut(hash, |held| key(held) == key(&pod)) {
            Some(held) => *held = pod,
            None => {
                self.0.insert_unique(hash, pod, |held| hasher.hash_one(key(held)));
            }
        }
    }

    fn remove(&mut self, hasher: &RandomState, pod: &LeanPod) {
        let hash = hasher.hash_one(key(pod));
        if let Ok(entry) = self.0.find_entry(hash, |held| key(held) == key(pod)) {
            entry.remove();
        }
    }
}

/// A new, empty cache and the writer that fills it.
pub fn pod_cache() -> (PodCache, PodCacheWriter) {
    let shared = Arc::new(Shared { pods: RwLock::new(Pods::default()), hasher: RandomState::new() });
    let (ready_tx, ready_rx) = tokio::sync::watch::channel(false);
    (PodCache { shared: shared.clone(), ready: ready_rx }, PodCacheWriter { shared, ready: ready_tx, relisting: None })
}

impl PodCache {
    /// Every cached pod, in no particular order.
    pub fn state(&self) -> Vec<Arc<LeanPod>> {
        self.shared.read().0.iter().cloned().collect()
    }

    /// The pod `name` in `namespace`, if cached.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<LeanPod>> {
        let hash = self.shared.hasher.hash_one((namespace, name));
        self.shared.read().0.find(hash, |held| key(held) == (namespace, name)).cloned()
    }

    /// How many pods are cached.
    pub fn len(&self) -> usize {
        self.shared.read().0.len()
    }

    /// Whether no pod is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits until the first list of pods is in the cache.
    pub async fn wait_until_ready(&self) -> Result<(), PodWatchStopped> {
        let mut ready = self.ready.clone();
        ready.wait_for(|ready| *ready).await.map(|_| ()).map_err(|_| PodWatchStopped)
    }
}

impl Shared {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Pods> {
        self.pods.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Pods> {
        self.pods.write().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl PodCacheWriter {
    /// Applies one event of the pod watch.
    pub fn apply(&mut self, event: &watcher::Event<Arc<LeanPod>>) {
        let hasher = &self.shared.hasher;
        match event {
            watcher::Event::Init => self.relisting = Some(Pods::default()),
            watcher::Event::InitApply(pod) => self.relisting.get_or_insert_with(Pods::default).insert(hasher, pod.clone()),
            watcher::Event::InitDone => {
                let listed = self.relisting.take().unwrap_or_default();
                *self.shared.write() = listed;
                self.ready.send_replace(true);
            }
            watcher::Event::Apply(pod) => self.shared.write().insert(hasher, pod.clone()),
            watcher::Event::Delete(pod) => self.shared.write().remove(hasher, pod),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(namespace: &str, name: &str, node: &str) -> Arc<LeanPod> {
        Arc::new(serde_json::from_value(json!({"metadata": {"name": name, "namespace": namespace}, "spec": {"nodeName": node, "containers": []}})).unwrap())
    }

    fn node_of(pod: &LeanPod) -> &str {
        pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).unwrap_or("")
    }

    #[tokio::test]
    async fn a_relist_is_seen_whole_and_watch_events_apply_by_namespace_and_name() {
        let (cache, mut writer) = pod_cache();
        writer.apply(&watcher::Event::Init);
        writer.apply(&watcher::Event::InitApply(pod("a", "web", "n1")));
        writer.apply(&watcher::Event::InitApply(pod("b", "web", "n2")));
        assert!(cache.is_empty(), "a list in progress is not seen");
        let waiting = tokio::spawn({
            let cache = cache.clone();
            async move { cache.wait_until_ready().await }
        });
        writer.apply(&watcher::Event::InitDone);
        waiting.await.unwrap().unwrap();
        assert_eq!(cache.len(), 2);
        assert_eq!(cache.get("b", "web").map(|p| node_of(&p).to_string()).as_deref(), Some("n2"));
        assert!(cache.get("c", "web").is_none());

        // An update replaces the pod of the same namespace and name; a deletion removes it.
        writer.apply(&watcher::Event::Apply(pod("a", "web", "n3")));
        writer.apply(&watcher::Event::Apply(pod("a", "api", "n1")));
        writer.apply(&watcher::Event::Delete(pod("b", "web", "n2")));
        let mut seen: Vec<(String, String)> = cache.state().iter().map(|p| (key(p).0.to_string() + "/" + key(p).1, node_of(p).to_string())).collect();
        seen.sort();
        assert_eq!(seen, [("a/api".to_string(), "n1".to_string()), ("a/web".to_string(), "n3".to_string())]);

        // A relist replaces everything at its end: pods it does not list are gone.
        writer.apply(&watcher::Event::Init);
        writer.apply(&watcher::Event::InitApply(pod("c", "db", "n4")));
        assert_eq!(cache.len(), 2, "the old state stays until the list is complete");
        writer.apply(&watcher::Event::InitDone);
        assert_eq!(cache.state().iter().map(|p| key(p).1.to_string()).collect::<Vec<_>>(), ["db"]);
    }

    #[tokio::test]
    async fn waiting_ends_with_an_error_when_the_watch_stops_before_listing() {
        let (cache, writer) = pod_cache();
        drop(writer);
        assert!(cache.wait_until_ready().await.is_err());
    }
}
