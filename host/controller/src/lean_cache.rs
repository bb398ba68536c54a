//! The caches of the two kinds a large cluster has many of: every pod as a [`LeanPod`] and
//! every Node as a [`LeanNode`], each kept current by one watch.
//!
//! Pods are by far the most numerous objects a controller caches (50,000 on a cluster of
//! 5,000 nodes), and Nodes the largest, so these caches are ours rather than `kube`'s
//! reflector: each object is kept once, in a table of `Arc`s found by namespace and name,
//! with no key of its own (a reflector keys each object by an `ObjectRef`, four more strings
//! per object), and with the compact metadata of the lean types rather than an `ObjectMeta`.
//!
//! Like a reflector, a relist (the watch's first list, or a new one after the watch broke)
//! builds a new table beside the current one and swaps it in once the list is complete
//! ([`Relist`]), so a reader never sees a half-listed cluster.

use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};

/// The caches' hasher: SipHash with fixed keys, so a table's order depends only on what was
/// put in it (not on the process), which a deterministic simulation needs.
type FixedState = BuildHasherDefault<DefaultHasher>;
use std::sync::{Arc, RwLock};

use hashbrown::HashTable;
use joinery_adapter::lean::{LeanNode, LeanPod};
use kube::runtime::watcher;

use crate::mirror::{MirrorTable, Relist};

/// An object a [`LeanCache`] holds: found by namespace (empty for cluster-scoped kinds) and
/// name.
pub trait Cached: Send + Sync + 'static {
    /// The object's namespace and name.
    fn cache_key(&self) -> (&str, &str);

    /// The Node the object is bound to, for kinds the cache indexes by Node (pods); `None`
    /// for objects bound to no Node and for other kinds.
    fn bound_node(&self) -> Option<&str> {
        None
    }
}

impl Cached for LeanPod {
    fn cache_key(&self) -> (&str, &str) {
        (
            self.metadata.namespace.as_deref().unwrap_or(""),
            self.metadata.name.as_deref().unwrap_or(""),
        )
    }

    fn bound_node(&self) -> Option<&str> {
        self.spec.as_ref()?.node_name.as_deref()
    }
}

impl Cached for LeanNode {
    fn cache_key(&self) -> (&str, &str) {
        ("", self.name())
    }
}

/// Every object of one kind, read by the controllers; cheap to clone (all clones read the
/// same cache).
pub struct LeanCache<T> {
    shared: Arc<CacheState<T>>,
    ready: tokio::sync::watch::Receiver<bool>,
}

impl<T> Clone for LeanCache<T> {
    fn clone(&self) -> Self {
        LeanCache {
            shared: self.shared.clone(),
            ready: self.ready.clone(),
        }
    }
}

/// Every pod.
pub type PodCache = LeanCache<LeanPod>;

/// Every Node.
pub type NodeCache = LeanCache<LeanNode>;

/// The writing end of a [`LeanCache`]: the watch applies its events through it.
pub struct LeanCacheWriter<T> {
    shared: Arc<CacheState<T>>,
    ready: tokio::sync::watch::Sender<bool>,
    /// The table a relist is filling, swapped in when it ends.
    relisting: Relist<Table<T>>,
}

struct CacheState<T> {
    objects: RwLock<Table<T>>,
    hasher: FixedState,
}

/// Objects found by namespace and name, and by the Node they are bound to.
struct Table<T> {
    objects: HashTable<Arc<T>>,
    /// The objects bound to each Node ([`Cached::bound_node`]), in the order they were bound:
    /// the controllers ask for one node's pods once per node and pass, and a scan of every pod
    /// for each was most of a long simulation's time.
    by_node: std::collections::HashMap<String, Bound<T>, FixedState>,
}

/// The objects bound to one Node, and a number that changes whenever they do.
struct Bound<T> {
    objects: Vec<Arc<T>>,
    version: u64,
}

impl<T> Default for Bound<T> {
    fn default() -> Self {
        Bound {
            objects: Vec::new(),
            version: 0,
        }
    }
}

/// A number never handed out before in this process (see [`LeanCache::bound_version`]):
/// process-wide, so that a relisted table never repeats a number of the one it replaces.
fn next_bound_version() -> u64 {
    static VERSIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    VERSIONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

impl<T> Default for Table<T> {
    fn default() -> Self {
        Table {
            objects: HashTable::new(),
            by_node: Default::default(),
        }
    }
}

impl<T: Cached> Table<T> {
    fn unbind(&mut self, object: &T) {
        let Some(node) = object.bound_node() else {
            return;
        };
        if let Some(bound) = self.by_node.get_mut(node) {
            bound
                .objects
                .retain(|held| held.cache_key() != object.cache_key());
            bound.version = next_bound_version();
            if bound.objects.is_empty() {
                self.by_node.remove(node);
            }
        }
    }

    fn bind(&mut self, object: &Arc<T>) {
        if let Some(node) = object.bound_node() {
            let bound = self.by_node.entry(node.to_string()).or_default();
            bound.objects.push(object.clone());
            bound.version = next_bound_version();
        }
    }
}

/// The cache is not ready because its watch stopped before the first list was complete.
#[derive(Debug, thiserror::Error)]
#[error("the watch stopped before its first list was complete")]
pub struct WatchStopped;

impl<T: Cached> MirrorTable<Arc<T>> for Table<T> {
    type Context = FixedState;

    fn upsert(&mut self, hasher: &FixedState, object: &Arc<T>) {
        let hash = hasher.hash_one(object.cache_key());
        let previous = match self
            .objects
            .find_mut(hash, |held| held.cache_key() == object.cache_key())
        {
            Some(held) => Some(std::mem::replace(held, object.clone())),
            None => {
                self.objects.insert_unique(hash, object.clone(), |held| {
                    hasher.hash_one(held.cache_key())
                });
                None
            }
        };
        match previous {
            // Still on the same Node: updated in place, keeping its position.
            Some(previous) if previous.bound_node() == object.bound_node() => {
                if let Some(held) = object
                    .bound_node()
                    .and_then(|node| self.by_node.get_mut(node))
                    .and_then(|bound| {
                        bound.version = next_bound_version();
                        bound
                            .objects
                            .iter_mut()
                            .find(|held| held.cache_key() == object.cache_key())
                    })
                {
                    *held = object.clone();
                }
            }
            previous => {
                if let Some(previous) = previous {
                    self.unbind(&previous);
                }
                self.bind(object);
            }
        }
    }

    fn remove(&mut self, hasher: &FixedState, object: &Arc<T>) {
        let hash = hasher.hash_one(object.cache_key());
        if let Ok(entry) = self
            .objects
            .find_entry(hash, |held| held.cache_key() == object.cache_key())
        {
            let (held, _) = entry.remove();
            self.unbind(&held);
        }
    }
}

/// A new, empty cache and the writer that fills it.
pub fn lean_cache<T: Cached>() -> (LeanCache<T>, LeanCacheWriter<T>) {
    let shared = Arc::new(CacheState {
        objects: RwLock::new(Table::default()),
        hasher: FixedState::default(),
    });
    let (ready_tx, ready_rx) = tokio::sync::watch::channel(false);
    (
        LeanCache {
            shared: shared.clone(),
            ready: ready_rx,
        },
        LeanCacheWriter {
            shared,
            ready: ready_tx,
            relisting: Relist::default(),
        },
    )
}

impl<T: Cached> LeanCache<T> {
    /// Every cached object, in the table's order: not sorted, but the same for the same
    /// sequence of watch events (the hasher's keys are fixed), so a simulation's decisions
    /// do not depend on the process.
    pub fn state(&self) -> Vec<Arc<T>> {
        self.shared.read().objects.iter().cloned().collect()
    }

    /// The cached objects bound to Node `node` ([`Cached::bound_node`]), in the order they
    /// were bound: a lookup, not a scan of every object.
    pub fn bound_to(&self, node: &str) -> Vec<Arc<T>> {
        self.shared
            .read()
            .by_node
            .get(node)
            .map(|bound| bound.objects.clone())
            .unwrap_or_default()
    }

    /// A number that changes whenever the objects bound to `node` do (one bound, one gone,
    /// one updated): equal numbers mean the same objects in the same versions, without
    /// looking at them. 0 while none is bound.
    pub fn bound_version(&self, node: &str) -> u64 {
        self.shared
            .read()
            .by_node
            .get(node)
            .map_or(0, |bound| bound.version)
    }

    /// The object `name` in `namespace` (empty for a cluster-scoped kind), if cached.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<T>> {
        let hash = self.shared.hasher.hash_one((namespace, name));
        self.shared
            .read()
            .objects
            .find(hash, |held| held.cache_key() == (namespace, name))
            .cloned()
    }

    /// How many objects are cached.
    pub fn len(&self) -> usize {
        self.shared.read().objects.len()
    }

    /// Whether no object is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits until the first list is in the cache.
    pub async fn wait_until_ready(&self) -> Result<(), WatchStopped> {
        let mut ready = self.ready.clone();
        ready
            .wait_for(|ready| *ready)
            .await
            .map(|_| ())
            .map_err(|_| WatchStopped)
    }
}

impl<T> CacheState<T> {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Table<T>> {
        self.objects
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Table<T>> {
        self.objects
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl<T: Cached> LeanCacheWriter<T> {
    /// Applies one event of the watch.
    pub fn apply(&mut self, event: &watcher::Event<Arc<T>>) {
        let shared = &self.shared;
        if self
            .relisting
            .apply(event, &shared.hasher, || shared.write())
        {
            self.ready.send_replace(true);
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
        pod.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or("")
    }

    #[tokio::test]
    async fn a_relist_is_seen_whole_and_watch_events_apply_by_namespace_and_name() {
        let (cache, mut writer) = lean_cache::<LeanPod>();
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
        assert_eq!(
            cache
                .get("b", "web")
                .map(|p| node_of(&p).to_string())
                .as_deref(),
            Some("n2")
        );
        assert!(cache.get("c", "web").is_none());

        // An update replaces the pod of the same namespace and name; a deletion removes it.
        writer.apply(&watcher::Event::Apply(pod("a", "web", "n3")));
        writer.apply(&watcher::Event::Apply(pod("a", "api", "n1")));
        writer.apply(&watcher::Event::Delete(pod("b", "web", "n2")));
        let mut seen: Vec<(String, String)> = cache
            .state()
            .iter()
            .map(|p| {
                (
                    p.cache_key().0.to_string() + "/" + p.cache_key().1,
                    node_of(p).to_string(),
                )
            })
            .collect();
        seen.sort();
        assert_eq!(
            seen,
            [
                ("a/api".to_string(), "n1".to_string()),
                ("a/web".to_string(), "n3".to_string())
            ]
        );

        // A relist replaces everything at its end: pods it does not list are gone.
        writer.apply(&watcher::Event::Init);
        writer.apply(&watcher::Event::InitApply(pod("c", "db", "n4")));
        assert_eq!(
            cache.len(),
            2,
            "the old state stays until the list is complete"
        );
        writer.apply(&watcher::Event::InitDone);
        assert_eq!(
            cache
                .state()
                .iter()
                .map(|p| p.cache_key().1.to_string())
                .collect::<Vec<_>>(),
            ["db"]
        );
    }

    #[tokio::test]
    async fn pods_are_found_by_their_node_through_binds_moves_updates_deletes_and_relists() {
        let names = |cache: &PodCache, node: &str| -> Vec<String> {
            cache
                .bound_to(node)
                .iter()
                .map(|p| format!("{}/{}", p.cache_key().0, p.cache_key().1))
                .collect()
        };
        let unbound = |namespace: &str, name: &str| -> Arc<LeanPod> {
            Arc::new(serde_json::from_value(json!({"metadata": {"name": name, "namespace": namespace}, "spec": {"containers": []}})).unwrap())
        };
        let (cache, mut writer) = lean_cache::<LeanPod>();
        writer.apply(&watcher::Event::Init);
        writer.apply(&watcher::Event::InitApply(pod("a", "web", "n1")));
        writer.apply(&watcher::Event::InitApply(unbound("a", "pending")));
        writer.apply(&watcher::Event::InitDone);
        assert_eq!(names(&cache, "n1"), ["a/web"]);
        // Each change to a node's pods gives the node a version never seen before; other
        // nodes keep theirs.
        let mut seen = vec![cache.bound_version("n1")];
        let mut changed = |cache: &PodCache, node: &str| {
            let version = cache.bound_version(node);
            let new = !seen.contains(&version);
            seen.push(version);
            new
        };
        // Bound later (the binding is an update of a pod that had no node).
        writer.apply(&watcher::Event::Apply(pod("a", "pending", "n1")));
        assert_eq!(names(&cache, "n1"), ["a/web", "a/pending"]);
        assert!(changed(&cache, "n1"));
        // An update on the same node keeps the pod's place and shows the new object.
        let updated = pod("a", "web", "n1");
        writer.apply(&watcher::Event::Apply(updated.clone()));
        assert_eq!(names(&cache, "n1"), ["a/web", "a/pending"]);
        assert!(Arc::ptr_eq(&cache.bound_to("n1")[0], &updated));
        assert!(changed(&cache, "n1"));
        let (n1, n3) = (cache.bound_version("n1"), cache.bound_version("n3"));
        assert_eq!(n3, 0, "no pod on n3");
        // A pod re-created under the same name on another node moves.
        writer.apply(&watcher::Event::Apply(pod("a", "web", "n2")));
        assert_eq!(names(&cache, "n1"), ["a/pending"]);
        assert_eq!(names(&cache, "n2"), ["a/web"]);
        assert!(changed(&cache, "n1") && changed(&cache, "n2"));
        assert_ne!(cache.bound_version("n1"), n1);
        assert_eq!(cache.bound_version("n3"), n3);
        writer.apply(&watcher::Event::Delete(pod("a", "pending", "n1")));
        assert!(names(&cache, "n1").is_empty());
        assert_eq!(cache.bound_version("n1"), 0);
        // A relist's table is indexed as it is filled, and replaces the old index whole.
        writer.apply(&watcher::Event::Init);
        writer.apply(&watcher::Event::InitApply(pod("b", "db", "n3")));
        assert_eq!(
            names(&cache, "n2"),
            ["a/web"],
            "the old index until the list ends"
        );
        writer.apply(&watcher::Event::InitDone);
        assert!(names(&cache, "n2").is_empty());
        assert_eq!(names(&cache, "n3"), ["b/db"]);
    }

    #[tokio::test]
    async fn nodes_are_found_by_name_alone() {
        let node = |name: &str, zone: &str| -> Arc<LeanNode> {
            Arc::new(serde_json::from_value(json!({"metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}}})).unwrap())
        };
        let (cache, mut writer) = lean_cache::<LeanNode>();
        writer.apply(&watcher::Event::Init);
        writer.apply(&watcher::Event::InitApply(node("n1", "a")));
        writer.apply(&watcher::Event::InitDone);
        writer.apply(&watcher::Event::Apply(node("n2", "b")));
        writer.apply(&watcher::Event::Apply(node("n1", "c")));
        assert_eq!(cache.len(), 2);
        assert_eq!(
            cache
                .get("", "n1")
                .and_then(|n| n.label("topology.kubernetes.io/zone").map(String::from))
                .as_deref(),
            Some("c")
        );
        writer.apply(&watcher::Event::Delete(node("n2", "b")));
        assert!(cache.get("", "n2").is_none());
        assert_eq!(cache.len(), 1);
    }

    #[tokio::test]
    async fn waiting_ends_with_an_error_when_the_watch_stops_before_listing() {
        let (cache, writer) = lean_cache::<LeanPod>();
        drop(writer);
        assert!(cache.wait_until_ready().await.is_err());
    }
}
