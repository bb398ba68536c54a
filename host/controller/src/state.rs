//! Cluster state: one reflector per kind the controllers read, and a "something changed"
//! signal that wakes the loops. No decision is taken before every cache has synced.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::lean_cache::{Cached, LeanCacheWriter, NodeCache, PodCache, lean_cache};
use crate::mirror::{Changes, MirrorTable, Relist, spawn_watch};
use joinery_adapter::lean::{LeanNode, LeanPod, WatchedNode, WatchedPod};
use joinery_api::{CapacityBuffer, NodeClaim, NodeOverlay, NodePool};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, PersistentVolume, PersistentVolumeClaim, PodTemplate, ReplicationController, Service,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kube::api::{Api, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::task::JoinHandle;

use crate::ControllerError;
use joinery_adapter::pods::is_terminal;

/// The objects of a watch cache in a fixed order — by namespace, then name — so that what
/// the controllers decide never depends on a hash map's order: kube-runtime's stores iterate
/// in an order that changes from process to process, and two runs of a simulation with one
/// seed must decide alike (see docs/simulate.md, "Virtual time").
pub trait Ordered<K> {
    /// Every cached object, ordered by namespace and name.
    fn ordered(&self) -> Vec<Arc<K>>;
}

impl<K> Ordered<K> for Store<K>
where
    K: kube::Resource + reflector::Lookup + Clone + 'static,
    <K as reflector::Lookup>::DynamicType: Eq + std::hash::Hash + Clone,
{
    fn ordered(&self) -> Vec<Arc<K>> {
        let mut objects = self.state();
        objects.sort_by(|a, b| {
            (a.meta().namespace.as_deref(), a.meta().name.as_deref())
                .cmp(&(b.meta().namespace.as_deref(), b.meta().name.as_deref()))
        });
        objects
    }
}

/// The NodeClass kind a cloud plugin serves, identified by API group and kind.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeClassKey {
    /// API group, e.g. `sim.joinery.dev`.
    pub group: String,
    /// Kind, e.g. `SimNodeClass`.
    pub kind: String,
}

/// Read-only caches of the cluster, kept current by watches.
#[derive(Clone)]
pub struct ClusterState {
    /// All pods.
    pub pods: PodCache,
    /// All Nodes.
    pub nodes: NodeCache,
    /// All NodeClaims.
    pub node_claims: Store<NodeClaim>,
    /// All NodePools.
    pub node_pools: Store<NodePool>,
    /// All DaemonSets (their pod templates are the per-node overhead).
    pub daemon_sets: Store<DaemonSet>,
    /// All PodDisruptionBudgets.
    pub pdbs: Store<PodDisruptionBudget>,
    /// All PersistentVolumes (their node affinity constrains where claiming pods can run).
    pub persistent_volumes: Store<PersistentVolume>,
    /// All PersistentVolumeClaims.
    pub persistent_volume_claims: Store<PersistentVolumeClaim>,
    /// All StorageClasses (`allowedTopologies` of claims not bound yet).
    pub storage_classes: Store<StorageClass>,
    /// All Namespaces (their labels, for affinity terms' `namespaceSelector`).
    pub namespaces: Store<Namespace>,
    /// All CSINodes (each node's CSI volume attach limits).
    pub csi_nodes: Store<CSINode>,
    /// All NodeOverlays, when they are watched: only with the `NodeOverlay` feature gate on and
    /// the `nodeoverlays.karpenter.sh` CRD served (as upstream, which watches them only then).
    pub node_overlays: Option<Store<NodeOverlay>>,
    /// CapacityBuffers and what they refer to, when they are watched: only with the
    /// `CapacityBuffer` feature gate on and the `capacitybuffers.autoscaling.x-k8s.io` CRD
    /// served.
    pub buffers: Option<BufferStores>,
    /// Services, ReplicaSets, StatefulSets and ReplicationControllers, when default spread
    /// constraints need their selectors (`SCHEDULER_CONFIG` set); `None` otherwise.
    pub selectors: Option<SelectorStores>,
    /// NodeClass objects, per kind served by a loaded cloud plugin.
    pub node_classes: BTreeMap<NodeClassKey, Store<DynamicObject>>,
    /// Notified (and counted) whenever any cache changes.
    pub changed: Arc<Changes>,
    /// The uids of the pods a provisioning pass would take, kept from the pod watch.
    pub provisionable: Arc<ProvisionablePods>,
}

/// The uids of the pods a provisioning pass would take
/// ([`is_provisionable`](joinery_adapter::pods::is_provisionable)), kept up to date from the pod
/// watch's events, so that the provisioner's batcher, which asks many times a second whether
/// new pending pods came, reads a set of a few entries instead of scanning every cached pod.
/// A relist builds a new set and swaps it in when the list is complete, as the cache does
/// (both through [`Relist`]).
#[derive(Debug, Default)]
pub struct ProvisionablePods {
    sets: std::sync::Mutex<ProvisionableSets>,
}

#[derive(Debug, Default)]
struct ProvisionableSets {
    current: Uids,
    relisting: Relist<Uids>,
}

/// The uids of provisionable pods.
#[derive(Debug, Default)]
struct Uids(std::collections::HashSet<String>);

impl MirrorTable<Arc<LeanPod>> for Uids {
    type Context = ();

    fn upsert(&mut self, _: &(), pod: &Arc<LeanPod>) {
        if joinery_adapter::pods::is_provisionable(pod) {
            self.0.insert(uid(pod));
        } else {
            self.0.remove(&uid(pod));
        }
    }

    fn remove(&mut self, _: &(), pod: &Arc<LeanPod>) {
        self.0.remove(&uid(pod));
    }
}

fn uid(pod: &LeanPod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

impl ProvisionablePods {
    /// Takes in one event of the pod watch.
    pub fn observe(&self, event: &watcher::Event<Arc<LeanPod>>) {
        let mut sets = self
            .sets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let ProvisionableSets { current, relisting } = &mut *sets;
        relisting.apply(event, &(), || current);
    }

    /// The uids now.
    pub fn uids(&self) -> std::collections::HashSet<String> {
        self.sets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .current
            .0
            .clone()
    }
}

/// The cached objects of one pass (see [`ClusterState::objects`]).
pub struct CachedObjects {
    /// Nodes.
    pub nodes: Vec<Arc<LeanNode>>,
    /// NodeClaims.
    pub node_claims: Vec<Arc<NodeClaim>>,
    /// Every pod.
    pub pods: Vec<Arc<LeanPod>>,
    /// DaemonSets.
    pub daemon_sets: Vec<Arc<DaemonSet>>,
    /// PersistentVolumes.
    pub persistent_volumes: Vec<Arc<PersistentVolume>>,
    /// PersistentVolumeClaims.
    pub persistent_volume_claims: Vec<Arc<PersistentVolumeClaim>>,
    /// StorageClasses.
    pub storage_classes: Vec<Arc<StorageClass>>,
    /// CSINodes.
    pub csi_nodes: Vec<Arc<CSINode>>,
    /// Namespaces.
    pub namespaces: Vec<Arc<Namespace>>,
}

impl CachedObjects {
    /// Lends them to [`joinery_adapter::assemble`].
    pub fn lend(&self) -> joinery_adapter::assemble::ClusterObjects<'_> {
        fn refs<T>(list: &[Arc<T>]) -> Vec<&T> {
            list.iter().map(|o| o.as_ref()).collect()
        }
        joinery_adapter::assemble::ClusterObjects {
            nodes: refs(&self.nodes),
            node_claims: refs(&self.node_claims),
            pods: refs(&self.pods),
            daemon_sets: refs(&self.daemon_sets),
            persistent_volumes: refs(&self.persistent_volumes),
            persistent_volume_claims: refs(&self.persistent_volume_claims),
            storage_classes: refs(&self.storage_classes),
            csi_nodes: refs(&self.csi_nodes),
            namespaces: refs(&self.namespaces),
        }
    }
}

/// The watch tasks behind a [`ClusterState`]; dropping them stops the watches.
pub struct StateTasks(Vec<JoinHandle<()>>);

impl Drop for StateTasks {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// The caches whose selectors make a pod's default spread selector (see [`joinery_adapter::spread`]).
#[derive(Clone)]
pub struct SelectorStores {
    /// Services.
    pub services: Store<Service>,
    /// ReplicaSets.
    pub replica_sets: Store<ReplicaSet>,
    /// StatefulSets.
    pub stateful_sets: Store<StatefulSet>,
    /// ReplicationControllers.
    pub replication_controllers: Store<ReplicationController>,
}

/// The caches of CapacityBuffers and of the objects that shape their chunks.
#[derive(Clone)]
pub struct BufferStores {
    /// CapacityBuffers.
    pub capacity_buffers: Store<CapacityBuffer>,
    /// PodTemplates (`podTemplateRef`).
    pub pod_templates: Store<PodTemplate>,
    /// Deployments (`scalableRef`).
    pub deployments: Store<Deployment>,
    /// StatefulSets (`scalableRef`).
    pub stateful_sets: Store<StatefulSet>,
    /// ReplicaSets (`scalableRef`).
    pub replica_sets: Store<ReplicaSet>,
}

/// What the caches keep of each object: everything but what no controller reads. Trimming
/// happens as objects arrive, before they are stored, so that a cluster of 50,000 pods does
/// not hold their container images, environments, probes and container statuses in memory.
/// Cached objects are read, never written back (writes are patches built from scratch), so
/// the cut fields are never lost from the cluster.
pub trait Trim {
    /// Drops the fields no controller reads. The default keeps everything but
    /// `metadata.managedFields`.
    fn trim(&mut self)
    where
        Self: kube::Resource,
    {
        self.meta_mut().managed_fields = None;
    }
}

macro_rules! keep_all_but_managed_fields {
    ($($ty:ty),*) => { $(impl Trim for $ty {})* };
}
keep_all_but_managed_fields!(
    CapacityBuffer,
    PodTemplate,
    Deployment,
    NodeClaim,
    NodePool,
    NodeOverlay,
    DaemonSet,
    PodDisruptionBudget,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
    Namespace,
    CSINode,
    Service,
    ReplicaSet,
    StatefulSet,
    ReplicationController,
    DynamicObject
);

/// An object watched into a [`LeanCache`](crate::lean_cache::LeanCache): what the watch
/// reads, and how it becomes what the cache keeps.
trait LeanWatched:
    kube::Resource<DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// What the cache keeps.
    type Lean: Cached;
    /// The object as the cache keeps it.
    fn lean(self) -> Self::Lean;
}

impl LeanWatched for WatchedPod {
    type Lean = LeanPod;
    /// The pod, [trimmed](LeanPod::trim).
    fn lean(self) -> LeanPod {
        let mut pod = self.pod;
        pod.trim();
        pod
    }
}

impl LeanWatched for WatchedNode {
    type Lean = LeanNode;
    fn lean(self) -> LeanNode {
        self.node
    }
}

/// A watch into a lean cache: each object made [lean](LeanWatched::lean) into the cache, and
/// every event then handed to `observe` (the pod watch's [provisionable set](ProvisionablePods)).
fn spawn_lean_watch<W: LeanWatched>(
    api: Api<W>,
    mut cache: LeanCacheWriter<W::Lean>,
    mut observe: impl FnMut(&watcher::Event<Arc<W::Lean>>) + Send + 'static,
    changed: Arc<Changes>,
) -> JoinHandle<()> {
    let lean = |watched: W| Arc::new(watched.lean());
    spawn_watch(
        watcher(api, watcher::Config::default()).default_backoff(),
        W::kind(&()).into_owned(),
        move |event| {
            let event = match event {
                watcher::Event::Init => watcher::Event::Init,
                watcher::Event::InitApply(object) => watcher::Event::InitApply(lean(object)),
                watcher::Event::InitDone => watcher::Event::InitDone,
                watcher::Event::Apply(object) => watcher::Event::Apply(lean(object)),
                watcher::Event::Delete(object) => watcher::Event::Delete(lean(object)),
            };
            cache.apply(&event);
            observe(&event);
        },
        changed,
    )
}

fn spawn_reflector<K>(
    api: Api<K>,
    writer: reflector::store::Writer<K>,
    changed: Arc<Changes>,
    what: String,
) -> JoinHandle<()>
where
    K: kube::Resource
        + Trim
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    spawn_watch(
        reflector::reflector(
            writer,
            watcher(api, watcher::Config::default()).modify(Trim::trim),
        )
        .default_backoff(),
        what,
        |_| {},
        changed,
    )
}

impl ClusterState {
    /// Starts the watches and waits until every cache has its initial list. NodeOverlays are
    /// watched only when `watch_node_overlays` (the `NodeOverlay` feature gate) is set and
    /// their CRD is served; otherwise [`node_overlays`](Self::node_overlays) is `None`. The
    /// objects whose selectors default spread constraints use are watched only with
    /// `watch_selectors`.
    pub async fn start(
        client: kube::Client,
        node_class_kinds: &[(NodeClassKey, String)],
        watch_node_overlays: bool,
        watch_selectors: bool,
        watch_buffers: bool,
    ) -> Result<(ClusterState, StateTasks), ControllerError> {
        let changed = Arc::new(Changes::default());
        let mut tasks = Vec::new();
        macro_rules! watch_all {
            ($ty:ty, $what:literal) => {{
                let (reader, writer) = reflector::store::<$ty>();
                tasks.push(spawn_reflector(
                    Api::<$ty>::all(client.clone()),
                    writer,
                    changed.clone(),
                    $what.to_string(),
                ));
                reader
            }};
        }
        let provisionable = Arc::new(ProvisionablePods::default());
        let pods = {
            let (reader, writer) = lean_cache();
            let provisionable = provisionable.clone();
            let observe = move |event: &watcher::Event<Arc<LeanPod>>| provisionable.observe(event);
            tasks.push(spawn_lean_watch(
                Api::<WatchedPod>::all(client.clone()),
                writer,
                observe,
                changed.clone(),
            ));
            reader
        };
        let nodes = {
            let (reader, writer) = lean_cache();
            tasks.push(spawn_lean_watch(
                Api::<WatchedNode>::all(client.clone()),
                writer,
                |_| {},
                changed.clone(),
            ));
            reader
        };
        let node_claims = watch_all!(NodeClaim, "NodeClaim");
        let node_pools = watch_all!(NodePool, "NodePool");
        let daemon_sets = watch_all!(DaemonSet, "DaemonSet");
        let pdbs = watch_all!(PodDisruptionBudget, "PodDisruptionBudget");
        let persistent_volumes = watch_all!(PersistentVolume, "PersistentVolume");
        let persistent_volume_claims = watch_all!(PersistentVolumeClaim, "PersistentVolumeClaim");
        let storage_classes = watch_all!(StorageClass, "StorageClass");
        let namespaces = watch_all!(Namespace, "Namespace");
        let csi_nodes = watch_all!(CSINode, "CSINode");
        let node_overlays = if !watch_node_overlays {
            None
        } else {
            let gvk = GroupVersionKind::gvk("karpenter.sh", "v1alpha1", "NodeOverlay");
            match kube::discovery::pinned_kind(&client, &gvk).await {
                Ok(_) => Some(watch_all!(NodeOverlay, "NodeOverlay")),
                Err(e) => {
                    // Waiting for a cache of a kind that is not served would block every decision.
                    tracing::warn!(error = %e,
                        "the NodeOverlay feature gate is on but nodeoverlays.karpenter.sh is not served (install it with `joinery crds`); NodeOverlays are ignored until the controller restarts with the CRD in place");
                    None
                }
            }
        };
        let buffers = if !watch_buffers {
            None
        } else {
            let gvk = GroupVersionKind::gvk("autoscaling.x-k8s.io", "v1beta1", "CapacityBuffer");
            match kube::discovery::pinned_kind(&client, &gvk).await {
                Ok(_) => Some(BufferStores {
                    capacity_buffers: watch_all!(CapacityBuffer, "CapacityBuffer"),
                    pod_templates: watch_all!(PodTemplate, "PodTemplate"),
                    deployments: watch_all!(Deployment, "Deployment"),
                    stateful_sets: watch_all!(StatefulSet, "StatefulSet"),
                    replica_sets: watch_all!(ReplicaSet, "ReplicaSet"),
                }),
                Err(e) => {
                    tracing::warn!(error = %e,
                        "the CapacityBuffer feature gate is on but capacitybuffers.autoscaling.x-k8s.io is not served (install it with `joinery crds`); CapacityBuffers are ignored until the controller restarts with the CRD in place");
                    None
                }
            }
        };
        let selectors = watch_selectors.then(|| SelectorStores {
            services: watch_all!(Service, "Service"),
            replica_sets: watch_all!(ReplicaSet, "ReplicaSet"),
            stateful_sets: watch_all!(StatefulSet, "StatefulSet"),
            replication_controllers: watch_all!(ReplicationController, "ReplicationController"),
        });
        let mut node_classes = BTreeMap::new();
        for (key, version) in node_class_kinds {
            let gvk = GroupVersionKind::gvk(&key.group, version, &key.kind);
            // A plugin whose NodeClass CRD is not installed serves nothing here: skip it
            // (waiting for its cache would block every decision).
            let resource = match kube::discovery::pinned_kind(&client, &gvk).await {
                Ok((resource, _)) => resource,
                Err(e) => {
                    tracing::warn!(group = %key.group, kind = %key.kind, error = %e,
                        "NodeClass kind not served (its CRD is not installed); NodePools using it cannot launch until the controller restarts with the CRD in place");
                    continue;
                }
            };
            let writer = reflector::store::Writer::<DynamicObject>::new(resource.clone());
            let reader = writer.as_reader();
            let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
            tasks.push(spawn_reflector(
                api,
                writer,
                changed.clone(),
                key.kind.clone(),
            ));
            node_classes.insert(key.clone(), reader);
        }
        let tasks = StateTasks(tasks);
        let state = ClusterState {
            pods,
            nodes,
            node_claims,
            node_pools,
            daemon_sets,
            pdbs,
            persistent_volumes,
            persistent_volume_claims,
            storage_classes,
            namespaces,
            csi_nodes,
            node_overlays,
            buffers,
            selectors,
            node_classes,
            changed,
            provisionable,
        };
        state.wait_synced().await?;
        Ok((state, tasks))
    }

    async fn wait_synced(&self) -> Result<(), ControllerError> {
        let not_synced = |what: &str| ControllerError::NotSynced(what.to_string());
        self.pods
            .wait_until_ready()
            .await
            .map_err(|_| not_synced("pods"))?;
        self.nodes
            .wait_until_ready()
            .await
            .map_err(|_| not_synced("nodes"))?;
        self.node_claims
            .wait_until_ready()
            .await
            .map_err(|_| not_synced("nodeclaims"))?;
        self.node_pools
            .wait_until_ready()
            .await
            .map_err(|_| not_synced("nodepools"))?;
        self.daemon_sets
            .wait_until_ready()
            .await
            .map_err(|_| not_synced("daemonsets"))?;
        self.pdbs
            .wait_until_ready()
            .await
            .map_err(|_| not_synced("poddisruptionbudgets"))?;
        self.persistent_volumes
            .wait_until_ready()
            .await
            .map_err(|_| not_synced("persistentvolumes"))?;
        self.persistent_volume_claims
            .wait_until_ready()
            .await
            .map_err(|_| not_synced("persistentvolumeclaims"))?;
        self.storage_classes
            .wait_until_ready()
            .await
            .map_err(|_| not_synced("storageclasses"))?;
        self.namespaces
            .wait_until_ready()
            .await
            .map_err(|_| not_synced("namespaces"))?;
        self.csi_nodes
            .wait_until_ready()
            .await
            .map_err(|_| not_synced("csinodes"))?;
        if let Some(overlays) = &self.node_overlays {
            overlays
                .wait_until_ready()
                .await
                .map_err(|_| not_synced("nodeoverlays"))?;
        }
        if let Some(buffers) = &self.buffers {
            buffers
                .capacity_buffers
                .wait_until_ready()
                .await
                .map_err(|_| not_synced("capacitybuffers"))?;
            buffers
                .pod_templates
                .wait_until_ready()
                .await
                .map_err(|_| not_synced("podtemplates"))?;
            buffers
                .deployments
                .wait_until_ready()
                .await
                .map_err(|_| not_synced("deployments"))?;
            buffers
                .stateful_sets
                .wait_until_ready()
                .await
                .map_err(|_| not_synced("statefulsets"))?;
            buffers
                .replica_sets
                .wait_until_ready()
                .await
                .map_err(|_| not_synced("replicasets"))?;
        }
        if let Some(selectors) = &self.selectors {
            selectors
                .services
                .wait_until_ready()
                .await
                .map_err(|_| not_synced("services"))?;
            selectors
                .replica_sets
                .wait_until_ready()
                .await
                .map_err(|_| not_synced("replicasets"))?;
            selectors
                .stateful_sets
                .wait_until_ready()
                .await
                .map_err(|_| not_synced("statefulsets"))?;
            selectors
                .replication_controllers
                .wait_until_ready()
                .await
                .map_err(|_| not_synced("replicationcontrollers"))?;
        }
        for (key, store) in &self.node_classes {
            store
                .wait_until_ready()
                .await
                .map_err(|_| not_synced(&key.kind))?;
        }
        Ok(())
    }

    /// The Node whose `spec.providerID` is `provider_id`, if exactly one exists.
    pub fn nodes_with_provider_id(&self, provider_id: &str) -> Vec<Arc<LeanNode>> {
        self.nodes
            .state()
            .into_iter()
            .filter(|n| n.provider_id() == Some(provider_id))
            .collect()
    }

    /// The objects a scheduling or disruption pass reads, taken from the caches at once.
    pub fn objects(&self) -> CachedObjects {
        CachedObjects {
            nodes: self.nodes.state(),
            node_claims: self.node_claims.ordered(),
            pods: self.pods.state(),
            daemon_sets: self.daemon_sets.ordered(),
            persistent_volumes: self.persistent_volumes.ordered(),
            persistent_volume_claims: self.persistent_volume_claims.ordered(),
            storage_classes: self.storage_classes.ordered(),
            csi_nodes: self.csi_nodes.ordered(),
            namespaces: self.namespaces.ordered(),
        }
    }

    /// Every Node in the cache.
    pub fn nodes(&self) -> Vec<Arc<LeanNode>> {
        self.nodes.state()
    }

    /// The Node named `name` (a keyed lookup, not a scan).
    pub fn node(&self, name: &str) -> Option<Arc<LeanNode>> {
        self.nodes.get("", name)
    }

    /// The pods bound to `node` that are not finished (Succeeded/Failed).
    pub fn pods_on_node(&self, node: &str) -> Vec<Arc<LeanPod>> {
        let mut pods = self.pods.bound_to(node);
        pods.retain(|p| !is_terminal(p));
        pods
    }

    /// The NodeClass object `name` of the given kind.
    pub fn node_class(&self, key: &NodeClassKey, name: &str) -> Option<Arc<DynamicObject>> {
        self.node_classes
            .get(key)?
            .ordered()
            .into_iter()
            .find(|o| o.metadata.name.as_deref() == Some(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_cached_pod_keeps_what_the_controllers_read_and_nothing_else() {
        let mut pod: LeanPod = serde_json::from_value(json!({
            "metadata": {"name": "web-1", "namespace": "default", "labels": {"app": "web"},
                "annotations": {"karpenter.sh/do-not-disrupt": "true", "kubectl.kubernetes.io/last-applied-configuration": "{...}"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u1", "controller": true}]},
            "spec": {
                "nodeSelector": {"disk": "ssd"},
                "tolerations": [{"key": "gpu", "operator": "Exists"}],
                "initContainers": [{"name": "proxy", "image": "envoy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}}],
                "containers": [{"name": "app", "image": "app:1", "command": ["run"], "env": [{"name": "A", "value": "b"}],
                    "ports": [{"containerPort": 8080}, {"containerPort": 53, "hostPort": 53, "protocol": "UDP"}],
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "config", "configMap": {"name": "c"}}, {"name": "token", "projected": {"sources": []}}]},
            "status": {"phase": "Pending", "podIP": "10.0.0.1", "nominatedNodeName": "n1",
                "conditions": [
                    {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastProbeTime": null,
                        "message": "0/3 nodes are available: 3 Insufficient cpu.", "lastTransitionTime": "2026-01-01T00:00:01Z"},
                    {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady"},
                    {"type": "Ready", "status": "False", "reason": "ContainersNotReady", "message": "containers with unready status: [app]"}],
                "containerStatuses": [{"name": "app", "ready": false, "restartCount": 0, "image": "app:1", "imageID": ""}]}
        }))
        .unwrap();
        pod.trim();
        let kept = serde_json::to_value(&pod).unwrap();
        assert_eq!(
            kept["metadata"]["annotations"],
            json!({"karpenter.sh/do-not-disrupt": "true"})
        );
        assert!(kept["metadata"].get("managedFields").is_none());
        assert_eq!(kept["metadata"]["ownerReferences"][0]["uid"], "u1");
        assert_eq!(kept["spec"]["nodeSelector"], json!({"disk": "ssd"}));
        assert_eq!(kept["spec"]["tolerations"][0]["key"], "gpu");
        assert_eq!(
            kept["spec"]["containers"],
            json!([{"name": "app", "ports": [{"containerPort": 53, "hostPort": 53, "protocol": "UDP"}], "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}])
        );
        assert_eq!(
            kept["spec"]["initContainers"],
            json!([{"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}}])
        );
        assert_eq!(
            kept["spec"]["volumes"],
            json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}])
        );
        // Only kube-scheduler's verdict and readiness stay, without messages.
        assert_eq!(
            kept["status"],
            json!({"phase": "Pending", "nominatedNodeName": "n1",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "lastTransitionTime": "2026-01-01T00:00:01Z"},
                {"type": "Ready", "status": "False", "reason": "ContainersNotReady"}]})
        );
    }

    #[test]
    fn a_cached_node_keeps_what_the_controllers_read() {
        let watched: WatchedNode = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "resourceVersion": "7", "labels": {"a": "b"}, "annotations": {"k": "v"}, "finalizers": ["karpenter.sh/termination"],
                "managedFields": [{"manager": "kubelet"}]},
            "spec": {"providerID": "sim:///i-1", "unschedulable": true, "taints": [{"key": "t", "effect": "NoSchedule"}]},
            "status": {"allocatable": {"cpu": "4"}, "capacity": {"cpu": "4"}, "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": "2026-01-01T00:00:30Z", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "images": [{"names": ["app:1"], "sizeBytes": 1}], "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "nodeInfo": {"kubeletVersion": "v1.33.0", "kubeProxyVersion": "", "osImage": "", "kernelVersion": "", "containerRuntimeVersion": "",
                    "architecture": "amd64", "operatingSystem": "linux", "machineID": "", "systemUUID": "", "bootID": ""},
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}, "volumesInUse": ["v"]}
        }))
        .unwrap();
        // What guarded writes and finalizer edits read.
        use kube::Resource;
        assert_eq!(
            (
                watched.meta().name.as_deref(),
                watched.meta().resource_version.as_deref()
            ),
            (Some("n1"), Some("7"))
        );
        assert_eq!(
            watched.meta().finalizers,
            Some(vec!["karpenter.sh/termination".to_string()])
        );
        let kept = serde_json::to_value(watched.lean()).unwrap();
        assert_eq!(
            kept,
            json!({
                "metadata": {"name": "n1", "resourceVersion": "7", "labels": {"a": "b"}, "annotations": {"k": "v"}, "finalizers": ["karpenter.sh/termination"]},
                "spec": {"providerID": "sim:///i-1", "unschedulable": true, "taints": [{"key": "t", "effect": "NoSchedule"}]},
                "status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
        );
    }

    #[test]
    fn the_provisionable_set_follows_the_watch_and_a_relist_replaces_it() {
        let pod = |uid: &str, unschedulable: bool, node: Option<&str>| -> Arc<LeanPod> {
            let status = if unschedulable { "False" } else { "True" };
            serde_json::from_value(json!({
                "metadata": {"name": uid, "namespace": "default", "uid": uid},
                "spec": {"containers": [{"name": "c"}], "nodeName": node},
                "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": status, "reason": if unschedulable { "Unschedulable" } else { "" }}]}
            }))
            .map(Arc::new)
            .unwrap()
        };
        let set = ProvisionablePods::default();
        let sorted = |set: &ProvisionablePods| {
            let mut uids: Vec<String> = set.uids().into_iter().collect();
            uids.sort();
            uids
        };
        set.observe(&watcher::Event::Init);
        set.observe(&watcher::Event::InitApply(pod("a", true, None)));
        set.observe(&watcher::Event::InitApply(pod("b", false, Some("n1"))));
        assert!(set.uids().is_empty(), "nothing until the list is complete");
        set.observe(&watcher::Event::InitDone);
        assert_eq!(sorted(&set), vec!["a"]);
        set.observe(&watcher::Event::Apply(pod("c", true, None)));
        set.observe(&watcher::Event::Apply(pod("a", false, Some("n1"))));
        assert_eq!(sorted(&set), vec!["c"], "a was bound");
        // A relist keeps the old set until it is complete, then replaces it.
        set.observe(&watcher::Event::Init);
        set.observe(&watcher::Event::InitApply(pod("d", true, None)));
        assert_eq!(sorted(&set), vec!["c"]);
        set.observe(&watcher::Event::InitDone);
        assert_eq!(sorted(&set), vec!["d"]);
        set.observe(&watcher::Event::Delete(pod("d", true, None)));
        assert!(set.uids().is_empty());
    }
}
