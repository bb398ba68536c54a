//! [`LeanPod`]: a pod as Joinery reads it — the fields scheduling, disruption, termination and
//! the metrics look at, under Kubernetes' own field names, and nothing else.
//!
//! Why it exists: `k8s-openapi`'s `Pod` is large even when empty (2,176 bytes, and 2,120 more
//! for each `Container`), because every optional field of the full API is stored inline. A
//! controller caching 50,000 pods held about 7.5 KB per pod that way, whatever was cut from
//! it. A `LeanPod` is deserialized straight from the API server's JSON (fields it does not
//! name are skipped while parsing, never allocated), and every function of this crate that
//! reads a pod takes one. Code holding a full `Pod` (a snapshot file, a test, the simulator's
//! observer) converts it with `LeanPod::from(&pod)`.
//!
//! Its metadata is a [`PodMeta`], not an `ObjectMeta` (360 bytes inline). Requests and limits
//! are kept as [`ResourceList`]s (short sorted lists) rather than `BTreeMap`s, which take room
//! for eleven entries however few they hold. Labels, annotations, owner references,
//! containers, node selectors, overhead, tolerations, affinity and topology spread
//! constraints, which the pods of one workload state alike, are [`Interned`]: held once for all
//! the pods that state the same. So are, as [`Atom`]s, the short strings many pods repeat
//! (namespace, node name, phase, the conditions' type, status and reason). Pod-level
//! resources and scheduling gates, which few pods state, are shared too, so that they take a
//! pointer, not their whole size, in the pods that do not. A pod of a ReplicaSet, cached,
//! takes under 700 bytes, its record 360 (`tests/cache_memory.rs`).
//!
//! Without an `ObjectMeta`, a `LeanPod` is not a `kube` resource: the pod watch reads
//! [`WatchedPod`]s, which carry what a watch needs beside the pod.
//!
//! A `LeanPod` is read, never written back: writes to the cluster are patches built from
//! scratch, so the fields it leaves out are never lost.
//!
//! Nodes are read the same way, as [`LeanNode`]s, whose labels and annotations are
//! [`AtomMap`]s.

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use k8s_openapi::api::core::v1::{
    Affinity, ContainerPort, Pod, PodCondition, PodSchedulingGate, PodSpec, ResourceRequirements,
    Toleration, TopologySpreadConstraint, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The annotation `kubectl apply` keeps a whole copy of the object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

mod node;
pub use node::{AtomMap, LeanNode, LeanNodeSpec, LeanNodeStatus, NodeMeta};

/// A pod with only the fields Joinery reads (see the module documentation). Serialized, it is
/// a valid (partial) `v1` Pod.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeanPod {
    /// `metadata`: the fields Joinery reads.
    #[serde(default)]
    pub metadata: PodMeta,
    /// `spec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<LeanPodSpec>,
    /// `status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<LeanPodStatus>,
}

/// The parts of a pod's `ObjectMeta` Joinery reads, under the same names. Labels, annotations
/// and owner references, which the pods of one workload mostly state alike, are [`Interned`];
/// the rest (`managedFields`, `generateName`, …) is skipped while parsing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodMeta {
    /// `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `namespace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<Atom>,
    /// `uid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// `resourceVersion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// `creationTimestamp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<Time>,
    /// `deletionTimestamp`: set once the pod is being deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<Time>,
    /// `labels` ([shared](Interned) between pods stating the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Interned<BTreeMap<String, String>>>,
    /// `annotations` ([shared](Interned) between pods stating the same), without kubectl's
    /// last-applied copy of the object (dropped while parsing).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "annotations_without_last_applied"
    )]
    pub annotations: Option<Interned<BTreeMap<String, String>>>,
    /// `ownerReferences` ([shared](Interned) between pods stating the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_references: Option<Interned<Vec<OwnerReference>>>,
}

impl From<&ObjectMeta> for PodMeta {
    /// Copies the fields a `PodMeta` keeps, as parsing would (without kubectl's last-applied
    /// copy).
    fn from(m: &ObjectMeta) -> Self {
        PodMeta {
            name: m.name.clone(),
            namespace: m.namespace.as_ref().map(Atom::from),
            uid: m.uid.clone(),
            resource_version: m.resource_version.clone(),
            creation_timestamp: m.creation_timestamp.clone(),
            deletion_timestamp: m.deletion_timestamp.clone(),
            labels: m.labels.clone().map(Interned::new),
            annotations: m.annotations.clone().map(shared_without_last_applied),
            owner_references: m.owner_references.clone().map(Interned::new),
        }
    }
}

/// The parts of a `PodSpec` that decide where a pod can run, what it needs, and how it is
/// evicted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeanPodSpec {
    /// `spec.nodeName`: the node the pod is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<Atom>,
    /// `spec.nodeSelector` ([shared](Interned) between pods stating the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<Interned<BTreeMap<String, String>>>,
    /// `spec.affinity` ([shared](Interned) between pods stating the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Interned<Affinity>>,
    /// `spec.tolerations` ([shared](Interned) between pods stating the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Interned<Vec<Toleration>>>,
    /// `spec.topologySpreadConstraints` ([shared](Interned) between pods stating the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Interned<Vec<TopologySpreadConstraint>>>,
    /// `spec.containers` ([shared](Interned) between pods stating the same).
    #[serde(default)]
    pub containers: Interned<Vec<LeanContainer>>,
    /// `spec.initContainers` (sidecars among them have `restartPolicy: Always`;
    /// [shared](Interned) between pods stating the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_containers: Option<Interned<Vec<LeanContainer>>>,
    /// `spec.resources`: pod-level requests and limits, when set ([shared](Interned) between
    /// pods stating the same; out of line, as few pods state them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Interned<LeanResources>>,
    /// `spec.overhead` (the RuntimeClass' per-pod overhead; [shared](Interned) between pods
    /// stating the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead: Option<Interned<BTreeMap<String, Quantity>>>,
    /// `spec.priority`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// `spec.priorityClassName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<Atom>,
    /// `spec.schedulingGates` ([shared](Interned) between pods stating the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_gates: Option<Interned<Vec<PodSchedulingGate>>>,
    /// `spec.volumes` (once [trimmed](LeanPod::trim), only those that take part in scheduling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<Volume>>,
    /// `spec.terminationGracePeriodSeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
}

/// A container as scheduling sees it: its name, resources, host ports and restart policy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeanContainer {
    /// `name`.
    #[serde(default)]
    pub name: String,
    /// `resources` (requests and limits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<LeanResources>,
    /// `ports`: only those with a `hostPort` (the only ones scheduling reads); the others are
    /// dropped while parsing.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "host_ports_only"
    )]
    pub ports: Option<Vec<ContainerPort>>,
    /// `restartPolicy` (`Always` makes an init container a sidecar).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
}

/// The parts of a `PodStatus` Joinery reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeanPodStatus {
    /// `status.phase`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Atom>,
    /// `status.reason`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Atom>,
    /// `status.conditions` (once [trimmed](LeanPod::trim), only `PodScheduled` and `Ready`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<LeanCondition>>,
    /// `status.nominatedNodeName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nominated_node_name: Option<Atom>,
    /// `status.startTime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
}

/// The parts of a pod's or a Node's condition Joinery reads: a pod's kube-scheduler verdict
/// (`PodScheduled`) and readiness (`Ready`, whose transition time gives the pod startup
/// metric), a Node's `Ready` and pressure conditions. Messages, probe and heartbeat times
/// (a kubelet renews those every few seconds) are skipped while parsing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeanCondition {
    /// `type`.
    #[serde(rename = "type")]
    pub type_: Atom,
    /// `status`: `True`, `False` or `Unknown`.
    pub status: Atom,
    /// `reason`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Atom>,
    /// `lastTransitionTime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

impl From<&PodCondition> for LeanCondition {
    fn from(c: &PodCondition) -> Self {
        LeanCondition::new(
            &c.type_,
            &c.status,
            c.reason.as_deref(),
            c.last_transition_time.as_ref(),
        )
    }
}

impl From<&k8s_openapi::api::core::v1::NodeCondition> for LeanCondition {
    fn from(c: &k8s_openapi::api::core::v1::NodeCondition) -> Self {
        LeanCondition::new(
            &c.type_,
            &c.status,
            c.reason.as_deref(),
            c.last_transition_time.as_ref(),
        )
    }
}

impl LeanCondition {
    fn new(
        type_: &str,
        status: &str,
        reason: Option<&str>,
        last_transition_time: Option<&Time>,
    ) -> Self {
        LeanCondition {
            type_: Atom::from(type_),
            status: Atom::from(status),
            reason: reason.map(Atom::from),
            last_transition_time: last_transition_time.cloned(),
        }
    }
}

/// `resources` of a container or a pod: what it requests and what it is limited to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeanResources {
    /// `requests`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<ResourceList>,
    /// `limits`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceList>,
}

impl From<&ResourceRequirements> for LeanResources {
    fn from(r: &ResourceRequirements) -> Self {
        let list = |map: &Option<BTreeMap<String, Quantity>>| {
            map.as_ref()
                .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        };
        LeanResources {
            requests: list(&r.requests),
            limits: list(&r.limits),
        }
    }
}

/// A resource list (`requests`, `limits`): resource names and quantities, in name order. It
/// reads and writes as the JSON object Kubernetes uses, but is kept as a short sorted list:
/// a `BTreeMap` takes room for eleven entries (about 540 bytes) for the two or three a pod
/// has.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResourceList(Vec<(String, Quantity)>);

impl ResourceList {
    /// The quantity of `name`, if listed.
    pub fn get(&self, name: &str) -> Option<&Quantity> {
        self.0
            .binary_search_by(|(k, _)| k.as_str().cmp(name))
            .ok()
            .map(|i| &self.0[i].1)
    }

    /// Whether `name` is listed.
    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// The names and quantities, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Quantity)> {
        self.into_iter()
    }
}

impl<'a> IntoIterator for &'a ResourceList {
    type Item = (&'a String, &'a Quantity);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (String, Quantity)>,
        fn(&'a (String, Quantity)) -> (&'a String, &'a Quantity),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

impl FromIterator<(String, Quantity)> for ResourceList {
    /// Sorts by name; of a name given twice, the last quantity stays (as in a map).
    fn from_iter<I: IntoIterator<Item = (String, Quantity)>>(items: I) -> Self {
        ResourceList(sorted_last_wins(items.into_iter().collect()))
    }
}

impl Serialize for ResourceList {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        write_pairs(serializer, &self.0)
    }
}

impl<'de> Deserialize<'de> for ResourceList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        read_pairs(deserializer).map(|pairs| ResourceList(sorted_last_wins(pairs)))
    }
}

/// `pairs` sorted by key, without room to spare; of a key given twice, the last value stays
/// (as in a map). What [`ResourceList`] and [`AtomMap`] keep instead of a `BTreeMap`, which
/// takes room for eleven entries however few it holds.
fn sorted_last_wins<K: Ord, V>(mut pairs: Vec<(K, V)>) -> Vec<(K, V)> {
    // A stable sort keeps repeated keys in input order; dedup keeps the first of each run,
    // so reverse first to keep the last one given.
    pairs.reverse();
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    pairs.dedup_by(|later, earlier| later.0 == earlier.0);
    pairs.shrink_to_fit();
    pairs
}

/// Writes `(key, value)` pairs as a JSON object.
fn write_pairs<S: Serializer, K: Serialize, V: Serialize>(
    serializer: S,
    pairs: &[(K, V)],
) -> Result<S::Ok, S::Error> {
    let mut map = serializer.serialize_map(Some(pairs.len()))?;
    for (k, v) in pairs {
        map.serialize_entry(k, v)?;
    }
    map.end()
}

/// Reads a JSON object as its `(key, value)` pairs, in the order written.
fn read_pairs<'de, D: Deserializer<'de>, K: Deserialize<'de>, V: Deserialize<'de>>(
    deserializer: D,
) -> Result<Vec<(K, V)>, D::Error> {
    struct PairsVisitor<K, V>(std::marker::PhantomData<(K, V)>);
    impl<'de, K: Deserialize<'de>, V: Deserialize<'de>> Visitor<'de> for PairsVisitor<K, V> {
        type Value = Vec<(K, V)>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map")
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<(K, V)>, A::Error> {
            let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(0));
            while let Some(entry) = map.next_entry::<K, V>()? {
                pairs.push(entry);
            }
            Ok(pairs)
        }
    }
    deserializer.deserialize_map(PairsVisitor(std::marker::PhantomData))
}

/// A part of a pod that the pods of one workload state alike (labels, annotations, owner
/// references, tolerations, affinity, spread constraints): parsed with the pod like any
/// field, then swapped for an equal copy the cache already holds, if any. 50,000 pods of a
/// few hundred workloads keep a few hundred copies instead of 50,000 (a pod's label map alone
/// takes about 600 bytes, its three default tolerations about as much).
///
/// Reads as the value (`Deref`), and reads and writes the same JSON as the value.
#[derive(Clone)]
pub struct Interned<T>(Arc<T>);

impl<T: Serialize + PartialEq + Send + Sync + 'static> Interned<T> {
    /// `value`, or an equal value already shared.
    pub fn new(value: T) -> Self {
        Interned(interned(value))
    }
}

impl<T> Interned<T> {
    /// The shared value itself, for holders that keep it past the pod (a bound pod's labels).
    pub fn as_arc(&self) -> &Arc<T> {
        &self.0
    }
}

impl<T: Default + Serialize + PartialEq + Send + Sync + 'static> Default for Interned<T> {
    fn default() -> Self {
        Interned::new(T::default())
    }
}

impl<T> std::ops::Deref for Interned<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: PartialEq> PartialEq for Interned<T> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || *self.0 == *other.0
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Interned<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl<T: Serialize> Serialize for Interned<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de, T: Deserialize<'de> + Serialize + PartialEq + Send + Sync + 'static> Deserialize<'de>
    for Interned<T>
{
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(deserializer).map(Interned::new)
    }
}

impl<'a, T> IntoIterator for &'a Interned<Vec<T>> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// A short string many pods state alike (a namespace, a node's name, a phase, a condition's
/// type and status): [interned](Interned) like the other shared parts, so 50,000 pods hold a
/// few hundred copies, and 8 bytes in the pod instead of a `String`'s 24. Reads as a `str`.
#[derive(Clone, PartialEq, Default)]
pub struct Atom(Interned<String>);

impl Atom {
    /// The string itself.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl std::ops::Deref for Atom {
    type Target = str;
    fn deref(&self) -> &str {
        self.0.as_str()
    }
}

impl Eq for Atom {}

impl PartialOrd for Atom {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Atom {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialEq<&str> for Atom {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl From<&str> for Atom {
    fn from(value: &str) -> Self {
        Atom(Interned::new(value.to_string()))
    }
}

impl From<String> for Atom {
    fn from(value: String) -> Self {
        Atom(Interned::new(value))
    }
}

impl From<&String> for Atom {
    fn from(value: &String) -> Self {
        Atom::from(value.as_str())
    }
}

impl std::fmt::Debug for Atom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_str().fmt(f)
    }
}

impl std::fmt::Display for Atom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Atom {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Atom {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(Atom::from)
    }
}

/// The values shared so far, by type and a hash of their JSON text (values with the same hash
/// are told apart by comparing them); an entry goes once no pod holds it. Only the hash is
/// kept, not the text: a value no other pod states (a StatefulSet pod's labels) costs its
/// table slot, not a second copy.
#[derive(Default)]
struct Interner {
    values: HashMap<(TypeId, u64), Vec<Weak<dyn Any + Send + Sync>>>,
    /// New entries since dead ones were last swept.
    added: usize,
}

static INTERNER: LazyLock<Mutex<Interner>> = LazyLock::new(Mutex::default);

/// Feeds the JSON text of a value to a hasher without building it.
struct HashingWriter(std::hash::DefaultHasher);

impl std::io::Write for HashingWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        std::hash::Hasher::write(&mut self.0, bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The shared copy of `value` (the first equal one still held, else `value` itself).
fn interned<T: Serialize + PartialEq + Send + Sync + 'static>(value: T) -> Arc<T> {
    let mut writer = HashingWriter(std::hash::DefaultHasher::new());
    if serde_json::to_writer(&mut writer, &value).is_err() {
        return Arc::new(value);
    }
    let key = (TypeId::of::<T>(), std::hash::Hasher::finish(&writer.0));
    let mut interner = INTERNER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let same_hash = interner.values.entry(key).or_default();
    let held = same_hash
        .iter()
        .filter_map(Weak::upgrade)
        .filter_map(|held| held.downcast::<T>().ok())
        .find(|held| **held == value);
    if let Some(held) = held {
        return held;
    }
    let shared = Arc::new(value);
    same_hash.retain(|held| held.strong_count() > 0);
    // Nearly every hash has one value: room for one, not the four a first push makes.
    same_hash.reserve_exact(1);
    same_hash.push(Arc::downgrade(&shared) as Weak<dyn Any + Send + Sync>);
    interner.added += 1;
    // Sweep when the entries added since the last sweep could be half of them.
    if interner.added > 1024 && interner.added * 2 > interner.values.len() {
        interner.values.retain(|_, same_hash| {
            same_hash.retain(|held| held.strong_count() > 0);
            !same_hash.is_empty()
        });
        interner.added = 0;
    }
    shared
}

/// Reads a container's `ports`, keeping those with a `hostPort` (`None` when none has one).
fn host_ports_only<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Vec<ContainerPort>>, D::Error> {
    Option::<Vec<ContainerPort>>::deserialize(deserializer)
        .map(|ports| with_host_port(ports.as_deref()))
}

/// The ports of `ports` that have a `hostPort`, `None` when none has one.
fn with_host_port(ports: Option<&[ContainerPort]>) -> Option<Vec<ContainerPort>> {
    let kept: Vec<ContainerPort> = ports?
        .iter()
        .filter(|p| p.host_port.is_some())
        .cloned()
        .collect();
    (!kept.is_empty()).then_some(kept)
}

/// Reads `metadata.annotations` without kubectl's last-applied copy of the object.
fn annotations_without_last_applied<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Interned<BTreeMap<String, String>>>, D::Error> {
    Ok(
        Option::<BTreeMap<String, String>>::deserialize(deserializer)?
            .map(shared_without_last_applied),
    )
}

/// `annotations` without kubectl's last-applied copy, shared.
fn shared_without_last_applied(
    mut annotations: BTreeMap<String, String>,
) -> Interned<BTreeMap<String, String>> {
    annotations.remove(LAST_APPLIED);
    Interned::new(annotations)
}

/// A pod as the pod watch delivers it: the [`LeanPod`], and the name, namespace, uid and
/// resource version again as an `ObjectMeta`, which a watch needs (`kube`'s watcher reads an
/// object's resource version from its `ObjectMeta`). The cache keeps only the `LeanPod`.
#[derive(Debug, Clone)]
pub struct WatchedPod {
    meta: ObjectMeta,
    /// The pod.
    pub pod: LeanPod,
}

impl From<LeanPod> for WatchedPod {
    fn from(pod: LeanPod) -> Self {
        let meta = ObjectMeta {
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.as_deref().map(String::from),
            uid: pod.metadata.uid.clone(),
            resource_version: pod.metadata.resource_version.clone(),
            ..ObjectMeta::default()
        };
        WatchedPod { meta, pod }
    }
}

/// A Node as the node watch delivers it: the [`LeanNode`], and the name, uid, resource
/// version, finalizers and owner references again as an `ObjectMeta`, which a watch needs,
/// and which guarded writes (a patch carrying the version read), finalizer edits and
/// registration read. Derefs to the `LeanNode`. The cache keeps only the `LeanNode`.
#[derive(Debug, Clone)]
pub struct WatchedNode {
    meta: ObjectMeta,
    /// The Node.
    pub node: LeanNode,
}

impl From<LeanNode> for WatchedNode {
    fn from(node: LeanNode) -> Self {
        let meta = ObjectMeta {
            name: node.metadata.name.as_deref().map(String::from),
            uid: node.metadata.uid.clone(),
            resource_version: node.metadata.resource_version.clone(),
            finalizers: node.metadata.finalizers.clone(),
            owner_references: node.metadata.owner_references.clone(),
            ..ObjectMeta::default()
        };
        WatchedNode { meta, node }
    }
}

impl std::ops::Deref for WatchedNode {
    type Target = LeanNode;
    fn deref(&self) -> &LeanNode {
        &self.node
    }
}

/// Makes a watched type a `kube` resource of the same kind as the full type it stands for.
macro_rules! watched_resource {
    ($watched:ty, $lean:ty, $full:ty) => {
        impl<'de> Deserialize<'de> for $watched {
            fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                <$lean>::deserialize(deserializer).map(<$watched>::from)
            }
        }

        impl k8s_openapi::Resource for $watched {
            const API_VERSION: &'static str = <$full as k8s_openapi::Resource>::API_VERSION;
            const GROUP: &'static str = <$full as k8s_openapi::Resource>::GROUP;
            const KIND: &'static str = <$full as k8s_openapi::Resource>::KIND;
            const VERSION: &'static str = <$full as k8s_openapi::Resource>::VERSION;
            const URL_PATH_SEGMENT: &'static str =
                <$full as k8s_openapi::Resource>::URL_PATH_SEGMENT;
            type Scope = <$full as k8s_openapi::Resource>::Scope;
        }

        impl k8s_openapi::ListableResource for $watched {
            const LIST_KIND: &'static str = <$full as k8s_openapi::ListableResource>::LIST_KIND;
        }

        impl k8s_openapi::Metadata for $watched {
            type Ty = ObjectMeta;

            fn metadata(&self) -> &ObjectMeta {
                &self.meta
            }

            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.meta
            }
        }
    };
}

watched_resource!(WatchedPod, LeanPod, Pod);
watched_resource!(WatchedNode, LeanNode, k8s_openapi::api::core::v1::Node);

impl LeanPod {
    /// The pod's namespace and name as the scheduling core keys pods (empty when missing).
    pub fn key(&self) -> joinery_core::scheduling::PodKey {
        let meta = &self.metadata;
        joinery_core::scheduling::PodKey::new(
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default(),
        )
    }

    /// Drops what the parser cannot skip but no reader needs: volumes that play no part in
    /// scheduling (ConfigMap, Secret, projected, downward API, emptyDir) and the conditions
    /// other than `PodScheduled` and `Ready`; and gives back the room parsed lists keep
    /// unused (a list grows by doubling from room for four).
    pub fn trim(&mut self) {
        if let Some(conditions) = self.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            conditions.retain(|c| matches!(c.type_.as_str(), "PodScheduled" | "Ready"));
            conditions.shrink_to_fit();
        }
        if let Some(volumes) = self.spec.as_mut().and_then(|s| s.volumes.as_mut()) {
            volumes.retain(|v| {
                v.config_map.is_none()
                    && v.secret.is_none()
                    && v.projected.is_none()
                    && v.downward_api.is_none()
                    && v.empty_dir.is_none()
            });
            volumes.shrink_to_fit();
        }
    }
}

impl From<&k8s_openapi::api::core::v1::Container> for LeanContainer {
    fn from(c: &k8s_openapi::api::core::v1::Container) -> Self {
        LeanContainer {
            name: c.name.clone(),
            resources: c.resources.as_ref().map(LeanResources::from),
            ports: with_host_port(c.ports.as_deref()),
            restart_policy: c.restart_policy.clone(),
        }
    }
}

impl From<&PodSpec> for LeanPodSpec {
    /// Copies the fields a `LeanPodSpec` keeps (nothing is trimmed).
    fn from(s: &PodSpec) -> Self {
        LeanPodSpec {
            node_name: s.node_name.as_ref().map(Atom::from),
            node_selector: s.node_selector.clone().map(Interned::new),
            affinity: s.affinity.clone().map(Interned::new),
            tolerations: s.tolerations.clone().map(Interned::new),
            topology_spread_constraints: s.topology_spread_constraints.clone().map(Interned::new),
            containers: Interned::new(s.containers.iter().map(LeanContainer::from).collect()),
            init_containers: s
                .init_containers
                .as_ref()
                .map(|c| Interned::new(c.iter().map(LeanContainer::from).collect())),
            resources: s
                .resources
                .as_ref()
                .map(|r| Interned::new(LeanResources::from(r))),
            overhead: s.overhead.clone().map(Interned::new),
            priority: s.priority,
            priority_class_name: s.priority_class_name.as_ref().map(Atom::from),
            scheduling_gates: s.scheduling_gates.clone().map(Interned::new),
            volumes: s.volumes.clone(),
            termination_grace_period_seconds: s.termination_grace_period_seconds,
        }
    }
}

impl From<&Pod> for LeanPod {
    /// Copies the fields a `LeanPod` keeps (nothing is trimmed).
    fn from(pod: &Pod) -> Self {
        let status = pod.status.as_ref().map(|s| LeanPodStatus {
            phase: s.phase.as_ref().map(Atom::from),
            reason: s.reason.as_ref().map(Atom::from),
            conditions: s
                .conditions
                .as_ref()
                .map(|c| c.iter().map(LeanCondition::from).collect()),
            nominated_node_name: s.nominated_node_name.as_ref().map(Atom::from),
            start_time: s.start_time.clone(),
        });
        LeanPod {
            metadata: PodMeta::from(&pod.metadata),
            spec: pod.spec.as_ref().map(LeanPodSpec::from),
            status,
        }
    }
}

#[cfg(test)]
mod tests;
