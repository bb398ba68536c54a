//! A watch-fed local copy of one resource type, with write-through: a component applies the
//! objects its own writes return at once, so its next pass never acts on a state older than
//! what it just did (the job client-go's "expectations" and "assume" caches do).

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Resource;
use kube::api::DynamicObject;
use kube::runtime::watcher;

/// An object a [`Cache`] holds, stripped as it comes in of what no component of the physics
/// reads: managed fields always; a pod's container statuses (the kubelets write them from
/// scratch; nothing reads them back) and a Node's image list. At 50,000 pods, a pod's
/// container statuses were a quarter of each pod cache.
pub(crate) trait Cached: Resource + Clone {
    /// Drops what no component reads beyond managed fields (which [`slim`] drops for every
    /// kind).
    fn slim_kind(&mut self) {}
}

/// Drops what no component reads from an object about to be cached.
fn slim<K: Cached>(object: &mut K) {
    object.meta_mut().managed_fields = None;
    object.slim_kind();
}

impl Cached for Pod {
    fn slim_kind(&mut self) {
        if let Some(status) = self.status.as_mut() {
            status.container_statuses = None;
            status.init_container_statuses = None;
            status.ephemeral_container_statuses = None;
        }
    }
}

impl Cached for Node {
    fn slim_kind(&mut self) {
        if let Some(status) = self.status.as_mut() {
            status.images = None;
        }
    }
}

impl Cached for Namespace {}
impl Cached for Deployment {}
impl Cached for ReplicaSet {}
impl Cached for DaemonSet {}
impl Cached for Job {}
impl Cached for CronJob {}
impl Cached for DynamicObject {}

/// Objects keyed by (namespace, name), each boxed: a B-tree's nodes hold eleven entries
/// whether full or not, which for a 2 KB pod inline left about a third of the room unused.
pub(crate) struct Cache<K> {
    objects: BTreeMap<(String, String), Box<K>>,
    /// Objects being relisted (between `Init` and `InitDone`).
    relisting: Option<BTreeMap<(String, String), Box<K>>>,
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
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

fn version<K: Resource>(object: &K) -> Option<u64> {
    object
        .meta()
        .resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
}

impl<K: Cached> Cache<K> {
    /// An empty cache, not yet synced.
    pub(crate) fn new() -> Self {
        Self {
            objects: BTreeMap::new(),
            relisting: None,
            written_while_relisting: Vec::new(),
            removed: HashMap::new(),
            synced: false,
        }
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
            watcher::Event::InitApply(mut object) => {
                if let Some(relisting) = self.relisting.as_mut() {
                    slim(&mut object);
                    relisting.insert(key(&object), Box::new(object));
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
    fn store(&mut self, mut object: K) {
        if object
            .meta()
            .uid
            .as_deref()
            .is_some_and(|uid| self.removed.contains_key(uid))
        {
            return;
        }
        let key = key(&object);
        if let Some(existing) = self.objects.get(&key)
            && existing.meta().uid == object.meta().uid
            && let (Some(held), Some(offered)) = (version(&**existing), version(&object))
            && held > offered
        {
            return;
        }
        slim(&mut object);
        self.objects.insert(key, Box::new(object));
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
        self.objects
            .remove(&(namespace.to_string(), name.to_string()));
    }

    /// Every object, ordered by namespace and name.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &K> {
        self.objects.values().map(|object| &**object)
    }

    /// One object.
    pub(crate) fn get(&self, namespace: &str, name: &str) -> Option<&K> {
        self.objects
            .get(&(namespace.to_string(), name.to_string()))
            .map(|object| &**object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn machine(name: &str, version: u64) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": name, "namespace": "default", "uid": name, "resourceVersion": version.to_string()},
        }))
        .unwrap()
    }

    fn names(cache: &Cache<DynamicObject>) -> Vec<String> {
        cache
            .iter()
            .filter_map(|o| o.metadata.name.clone())
            .collect()
    }

    #[test]
    fn pods_and_nodes_are_kept_without_what_no_component_reads() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "u", "resourceVersion": "3", "managedFields": [{"manager": "kubelet"}]},
            "spec": {"nodeName": "n1", "containers": [{"name": "app", "image": "app:1"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "app", "image": "app:1", "imageID": "", "ready": true, "restartCount": 0}]}
        }))
        .unwrap();
        let mut pods = Cache::new();
        pods.apply(watcher::Event::Init);
        pods.apply(watcher::Event::InitApply(pod.clone()));
        pods.apply(watcher::Event::InitDone);
        pods.upsert(pod);
        let kept = pods.get("default", "p").unwrap();
        let status = kept.status.as_ref().unwrap();
        assert!(status.container_statuses.is_none() && kept.metadata.managed_fields.is_none());
        assert_eq!(
            (
                status.phase.as_deref(),
                status.conditions.as_ref().map(Vec::len)
            ),
            (Some("Running"), Some(1)),
            "the rest stays"
        );
        assert_eq!(kept.spec.as_ref().unwrap().containers[0].name, "app");
        let node: Node = serde_json::from_value(json!({"metadata": {"name": "n1"}, "status": {"images": [{"names": ["app:1"]}], "allocatable": {"cpu": "4"}}})).unwrap();
        let mut nodes = Cache::new();
        nodes.upsert(node);
        let kept = nodes.get("", "n1").unwrap().status.as_ref().unwrap();
        assert!(kept.images.is_none() && kept.allocatable.is_some());
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
