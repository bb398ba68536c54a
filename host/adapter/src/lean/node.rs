//! [`LeanNode`]: a Node as Joinery reads it, under Kubernetes' own field names.
//!
//! `k8s-openapi`'s `Node`, even trimmed of its images, addresses and system info, took about
//! 4.3 KB per node in a controller watching 5,000 nodes: 1.5 KB of inline optional fields,
//! then a `BTreeMap` for the labels and one for each of capacity and allocatable, each with
//! room for eleven entries. A `LeanNode` is parsed straight from the API server's JSON,
//! skipping what no reader needs (images, addresses, system info, daemon endpoints, volumes,
//! the conditions' messages and heartbeats, managed fields). Its labels and annotations are
//! [`AtomMap`]s, sorted lists of [interned](Atom) strings: the keys and most values (zone,
//! instance type, NodePool, architecture) are held once for the whole cluster, and the
//! node's name is the same string its pods' `spec.nodeName` holds. Taints, capacity,
//! allocatable and conditions, which the nodes of one group state alike, are [`Interned`].
//!
//! Like a [`LeanPod`](super::LeanPod), it is read, never written back: writes are patches
//! built from scratch. The watch reads [`WatchedNode`]s, and writes that need the object's
//! version and finalizers go through them too.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{
    Atom, Interned, LAST_APPLIED, LeanCondition, read_pairs, sorted_last_wins, write_pairs,
};

/// A Node with only the fields Joinery reads (see the module documentation). Serialized, it
/// is a valid (partial) `v1` Node.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeanNode {
    /// `metadata`: the fields Joinery reads.
    #[serde(default)]
    pub metadata: NodeMeta,
    /// `spec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<LeanNodeSpec>,
    /// `status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<LeanNodeStatus>,
}

/// The parts of a Node's `ObjectMeta` Joinery reads, under the same names.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeMeta {
    /// `name` (interned: the pods bound to the node hold the same string).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<Atom>,
    /// `uid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// `resourceVersion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// `creationTimestamp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<Time>,
    /// `deletionTimestamp`: set once the Node is being deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<Time>,
    /// `labels`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<AtomMap>,
    /// `annotations`, without kubectl's last-applied copy of the object (dropped while
    /// parsing).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "annotations_without_last_applied"
    )]
    pub annotations: Option<AtomMap>,
    /// `finalizers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finalizers: Option<Vec<String>>,
    /// `ownerReferences` (a registered Node's NodeClaim).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_references: Option<Vec<OwnerReference>>,
}

/// The parts of a `NodeSpec` Joinery reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeanNodeSpec {
    /// `spec.providerID`: the cloud instance behind the Node.
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// `spec.taints` ([shared](Interned) between Nodes stating the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taints: Option<Interned<Vec<Taint>>>,
    /// `spec.unschedulable`: cordoned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unschedulable: Option<bool>,
}

/// The parts of a `NodeStatus` Joinery reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeanNodeStatus {
    /// `status.capacity` ([shared](Interned) between Nodes stating the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<Interned<BTreeMap<String, Quantity>>>,
    /// `status.allocatable` ([shared](Interned) between Nodes stating the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocatable: Option<Interned<BTreeMap<String, Quantity>>>,
    /// `status.conditions`, without messages and heartbeat times ([shared](Interned) between
    /// Nodes stating the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Interned<Vec<LeanCondition>>>,
}

impl LeanNode {
    /// The Node's name (empty when missing).
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// The label `key`, if set.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.metadata.labels.as_ref()?.get(key)
    }

    /// `spec.providerID`, if set.
    pub fn provider_id(&self) -> Option<&str> {
        self.spec.as_ref()?.provider_id.as_deref()
    }

    /// `spec.taints` (empty when none).
    pub fn taints(&self) -> &[Taint] {
        self.spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// `status.allocatable`, if reported.
    pub fn allocatable(&self) -> Option<&BTreeMap<String, Quantity>> {
        self.status.as_ref()?.allocatable.as_deref()
    }

    /// Whether the `Ready` condition is `True`.
    pub fn is_ready(&self) -> bool {
        let conditions = self.status.as_ref().and_then(|s| s.conditions.as_deref());
        conditions
            .into_iter()
            .flatten()
            .any(|c| c.type_.as_str() == "Ready" && c.status.as_str() == "True")
    }
}

impl From<&ObjectMeta> for NodeMeta {
    /// Copies the fields a `NodeMeta` keeps, as parsing would (without kubectl's last-applied
    /// copy).
    fn from(m: &ObjectMeta) -> Self {
        NodeMeta {
            name: m.name.as_ref().map(Atom::from),
            uid: m.uid.clone(),
            resource_version: m.resource_version.clone(),
            creation_timestamp: m.creation_timestamp.clone(),
            deletion_timestamp: m.deletion_timestamp.clone(),
            labels: m.labels.as_ref().map(|l| l.iter().collect()),
            annotations: m.annotations.as_ref().map(|a| {
                a.iter()
                    .filter(|(k, _)| k.as_str() != LAST_APPLIED)
                    .collect()
            }),
            finalizers: m.finalizers.clone(),
            owner_references: m.owner_references.clone(),
        }
    }
}

impl From<&NodeSpec> for LeanNodeSpec {
    fn from(s: &NodeSpec) -> Self {
        LeanNodeSpec {
            provider_id: s.provider_id.clone(),
            taints: s.taints.clone().map(Interned::new),
            unschedulable: s.unschedulable,
        }
    }
}

impl From<&NodeStatus> for LeanNodeStatus {
    fn from(s: &NodeStatus) -> Self {
        LeanNodeStatus {
            capacity: s.capacity.clone().map(Interned::new),
            allocatable: s.allocatable.clone().map(Interned::new),
            conditions: s
                .conditions
                .as_ref()
                .map(|c| Interned::new(c.iter().map(LeanCondition::from).collect())),
        }
    }
}

impl From<&Node> for LeanNode {
    /// Copies the fields a `LeanNode` keeps.
    fn from(node: &Node) -> Self {
        LeanNode {
            metadata: NodeMeta::from(&node.metadata),
            spec: node.spec.as_ref().map(LeanNodeSpec::from),
            status: node.status.as_ref().map(LeanNodeStatus::from),
        }
    }
}

/// A string-to-string map (labels, annotations) kept as a sorted list of [`Atom`] pairs: 16
/// bytes an entry, the strings held once for every object stating them. It reads and writes
/// as the JSON object Kubernetes uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AtomMap(Box<[(Atom, Atom)]>);

impl AtomMap {
    /// The value of `key`, if set.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .binary_search_by(|(k, _)| k.as_str().cmp(key))
            .ok()
            .map(|i| self.0[i].1.as_str())
    }

    /// Whether `key` is set.
    pub fn contains_key(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The keys and values, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// How many keys are set.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no key is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A copy as a `BTreeMap`, for the APIs that take one.
    pub fn to_btree_map(&self) -> BTreeMap<String, String> {
        self.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }
}

impl<K: AsRef<str>, V: AsRef<str>> FromIterator<(K, V)> for AtomMap {
    /// Sorts by key; of a key given twice, the last value stays (as in a map).
    fn from_iter<I: IntoIterator<Item = (K, V)>>(items: I) -> Self {
        AtomMap::sorted(
            items
                .into_iter()
                .map(|(k, v)| (Atom::from(k.as_ref()), Atom::from(v.as_ref())))
                .collect(),
        )
    }
}

impl AtomMap {
    /// The map of `pairs`: sorted by key; of a key given twice, the last value stays.
    fn sorted(pairs: Vec<(Atom, Atom)>) -> AtomMap {
        AtomMap(sorted_last_wins(pairs).into_boxed_slice())
    }
}

impl Serialize for AtomMap {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        write_pairs(serializer, &self.0)
    }
}

impl<'de> Deserialize<'de> for AtomMap {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        read_pairs(deserializer).map(AtomMap::sorted)
    }
}

/// `metadata.annotations` as written, values not interned yet (kubectl's last-applied copy of
/// the object is dropped before it would be).
struct RawAnnotations(Vec<(Atom, String)>);

impl<'de> Deserialize<'de> for RawAnnotations {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        read_pairs(deserializer).map(RawAnnotations)
    }
}

/// Reads `metadata.annotations` without kubectl's last-applied copy of the object.
fn annotations_without_last_applied<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<AtomMap>, D::Error> {
    let annotations = Option::<RawAnnotations>::deserialize(deserializer)?;
    Ok(annotations.map(|RawAnnotations(pairs)| {
        AtomMap::sorted(
            pairs
                .into_iter()
                .filter(|(k, _)| k.as_str() != LAST_APPLIED)
                .map(|(k, v)| (k, Atom::from(v)))
                .collect(),
        )
    }))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use serde_json::json;

    fn full_node(name: &str) -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": name, "uid": format!("uid-{name}"), "resourceVersion": "12",
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "labels": {"topology.kubernetes.io/zone": "zone-a", "kubernetes.io/hostname": name, "karpenter.sh/nodepool": "default"},
                "annotations": {LAST_APPLIED: "{…}", "karpenter.sh/do-not-disrupt": "true"},
                "finalizers": ["karpenter.sh/termination"],
                "ownerReferences": [{"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": "default-x", "uid": "c1"}],
                "managedFields": [{"manager": "kubelet", "operation": "Update"}],
            },
            "spec": {"providerID": "sim:///i-1", "podCIDR": "10.0.0.0/24", "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
            "status": {
                "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"},
                "allocatable": {"cpu": "3900m", "memory": "15Gi", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": "2026-01-01T00:05:00Z", "lastTransitionTime": "2026-01-01T00:00:10Z"}],
                "images": [{"names": ["app:1"], "sizeBytes": 1}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "nodeInfo": {"kubeletVersion": "v1.33.0", "kubeProxyVersion": "", "osImage": "", "kernelVersion": "", "containerRuntimeVersion": "",
                    "architecture": "amd64", "operatingSystem": "linux", "machineID": "", "systemUUID": "", "bootID": ""},
            },
        })
    }

    #[test]
    fn parsing_keeps_what_is_read_and_converting_a_full_node_gives_the_same() {
        let parsed: LeanNode = serde_json::from_value(full_node("n1")).unwrap();
        let written = serde_json::to_value(&parsed).unwrap();
        assert_eq!(
            written,
            json!({
                "metadata": {"name": "n1", "uid": "uid-n1", "resourceVersion": "12", "creationTimestamp": "2026-01-01T00:00:00Z",
                    "labels": {"karpenter.sh/nodepool": "default", "kubernetes.io/hostname": "n1", "topology.kubernetes.io/zone": "zone-a"},
                    "annotations": {"karpenter.sh/do-not-disrupt": "true"},
                    "finalizers": ["karpenter.sh/termination"],
                    "ownerReferences": [{"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": "default-x", "uid": "c1"}]},
                "spec": {"providerID": "sim:///i-1", "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
                "status": {"capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"}, "allocatable": {"cpu": "3900m", "memory": "15Gi", "pods": "110"},
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "lastTransitionTime": "2026-01-01T00:00:10Z"}]},
            })
        );
        let full: Node = serde_json::from_value(full_node("n1")).unwrap();
        assert_eq!(LeanNode::from(&full), parsed);
        assert_eq!(
            serde_json::from_value::<LeanNode>(written).unwrap(),
            parsed,
            "what it writes reads back the same"
        );
        // The readers' shortcuts.
        assert_eq!(
            (
                parsed.name(),
                parsed.provider_id(),
                parsed.label("topology.kubernetes.io/zone")
            ),
            ("n1", Some("sim:///i-1"), Some("zone-a"))
        );
        assert_eq!(parsed.label("missing"), None);
        assert_eq!(parsed.taints()[0].key, "k");
        assert_eq!(
            parsed
                .allocatable()
                .and_then(|a| a.get("cpu"))
                .map(|q| q.0.as_str()),
            Some("3900m")
        );
        assert!(parsed.is_ready());
        assert!(!LeanNode::default().is_ready() && LeanNode::default().taints().is_empty());
    }

    #[test]
    fn nodes_of_one_group_share_their_strings_taints_and_resources() {
        let (a, b): (LeanNode, LeanNode) = (
            serde_json::from_value(full_node("a")).unwrap(),
            serde_json::from_value(full_node("b")).unwrap(),
        );
        let zone = |n: &LeanNode| {
            n.metadata
                .labels
                .as_ref()
                .unwrap()
                .0
                .iter()
                .find(|(k, _)| k.as_str() == "topology.kubernetes.io/zone")
                .unwrap()
                .1
                .clone()
        };
        assert!(
            Arc::ptr_eq(zone(&a).0.as_arc(), zone(&b).0.as_arc()),
            "a zone's name is held once"
        );
        let taints = |n: &LeanNode| n.spec.as_ref().unwrap().taints.clone().unwrap();
        assert!(Arc::ptr_eq(taints(&a).as_arc(), taints(&b).as_arc()));
        let allocatable = |n: &LeanNode| n.status.as_ref().unwrap().allocatable.clone().unwrap();
        assert!(Arc::ptr_eq(
            allocatable(&a).as_arc(),
            allocatable(&b).as_arc()
        ));
        let conditions = |n: &LeanNode| n.status.as_ref().unwrap().conditions.clone().unwrap();
        assert!(Arc::ptr_eq(
            conditions(&a).as_arc(),
            conditions(&b).as_arc()
        ));
        // The node's name is the string its pods' `spec.nodeName` holds.
        let pod: super::super::LeanPod = serde_json::from_value(
            json!({"metadata": {"name": "p"}, "spec": {"nodeName": "a", "containers": []}}),
        )
        .unwrap();
        let bound = pod.spec.unwrap().node_name.unwrap();
        assert!(Arc::ptr_eq(
            bound.0.as_arc(),
            a.metadata.name.as_ref().unwrap().0.as_arc()
        ));
    }

    #[test]
    fn an_atom_map_reads_and_writes_as_a_map_and_finds_by_key() {
        let map: AtomMap = serde_json::from_value(json!({"b": "2", "a": "1", "c": ""})).unwrap();
        assert_eq!(
            map.iter().collect::<Vec<_>>(),
            [("a", "1"), ("b", "2"), ("c", "")],
            "kept in key order"
        );
        assert_eq!((map.get("b"), map.get("z")), (Some("2"), None));
        assert!(map.contains_key("c") && !map.contains_key("d"));
        assert_eq!(
            (map.len(), map.is_empty(), AtomMap::default().is_empty()),
            (3, false, true)
        );
        assert_eq!(
            serde_json::to_value(&map).unwrap(),
            json!({"a": "1", "b": "2", "c": ""})
        );
        assert_eq!(map.to_btree_map().get("a").map(String::as_str), Some("1"));
        let twice: AtomMap = [("k", "1"), ("j", "0"), ("k", "2")].into_iter().collect();
        assert_eq!(
            twice.get("k"),
            Some("2"),
            "the last of a repeated key stays, as in a map"
        );
        assert_eq!(twice.len(), 2);
        let e = serde_json::from_value::<AtomMap>(json!({"a": 1}))
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("invalid type: integer `1`, expected a string"),
            "{e}"
        );
    }

    #[test]
    fn a_lean_node_is_far_smaller_than_a_node() {
        let (lean, full) = (std::mem::size_of::<LeanNode>(), std::mem::size_of::<Node>());
        assert!(lean * 4 < full, "lean {lean} bytes, full {full} bytes");
    }
}
