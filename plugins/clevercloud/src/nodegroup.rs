//! CKE's `NodeGroup` custom resource (`api.clever-cloud.com/v1`, cluster-scoped): what the
//! plugin writes, and how it reads the platform's answer.

use std::collections::BTreeMap;

use joinery_plugin_sdk::cloud::{CLUSTER_LABEL, REGISTRATION_TAINT_EFFECT, REGISTRATION_TAINT_KEY};
use joinery_plugin_sdk::kube::ResourceRef;
use serde::Deserialize;
use serde_json::{Value, json};

/// API group of NodeGroups.
pub const GROUP: &str = "api.clever-cloud.com";
/// API version of NodeGroups.
pub const VERSION: &str = "v1";
/// Plural resource name.
pub const RESOURCE: &str = "nodegroups";
/// Label marking a NodeGroup this plugin manages.
pub const MANAGED_LABEL: &str = "karpenter.clever-cloud.com/managed";
/// Label naming the NodeClaim of a managed NodeGroup.
pub const NODECLAIM_LABEL: &str = "karpenter.clever-cloud.com/nodeclaim";
/// Label naming the NodePool of a managed NodeGroup.
pub const NODEPOOL_LABEL: &str = "karpenter.clever-cloud.com/nodepool";
/// Label naming the CleverNodeClass of a managed NodeGroup.
pub const NODECLASS_LABEL: &str = "karpenter.clever-cloud.com/nodeclass";
/// Annotation holding the hash of the CleverNodeClass spec the group was created from.
pub const HASH_ANNOTATION: &str = "karpenter.clever-cloud.com/clevernodeclass-hash";
/// Largest `nodeCount` CKE accepts.
pub const MAX_NODE_COUNT: i64 = 16;

/// The NodeGroups collection.
pub fn collection() -> ResourceRef {
    ResourceRef::new(GROUP, VERSION, RESOURCE)
}

/// Why a label cannot go on a NodeGroup, or `None` when it can. CKE refuses keys under
/// `kubernetes.io/`, `node.kubernetes.io/` and `clever-cloud.com/`, and values over 63
/// characters or outside the label-value pattern; keys containing `kubernetes.io/` are left
/// to the kubelet and Karpenter's registration (the upstream provider drops them too).
pub fn label_problem(key: &str, value: &str) -> Option<&'static str> {
    if key.contains("kubernetes.io/") || key.starts_with("clever-cloud.com/") {
        return Some("reserved prefix");
    }
    if value.len() > 63 {
        return Some("value longer than 63 characters");
    }
    let edge_ok = |c: Option<char>| c.is_none_or(|c| c.is_ascii_alphanumeric());
    let body_ok = value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if !body_ok || !edge_ok(value.chars().next()) || !edge_ok(value.chars().last()) {
        return Some("value is not a valid label value");
    }
    None
}

/// What a NodeGroup for one NodeClaim carries.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired<'a> {
    /// NodeGroup name = NodeClaim name.
    pub name: &'a str,
    /// NodeClaim UID (owner reference).
    pub claim_uid: &'a str,
    /// NodePool of the claim.
    pub node_pool: &'a str,
    /// CleverNodeClass name.
    pub node_class: &'a str,
    /// Hash of the CleverNodeClass spec.
    pub class_hash: String,
    /// The cluster tag (`joinery.dev/cluster`).
    pub cluster: &'a str,
    /// The flavor.
    pub flavor: &'a str,
    /// Labels for the Node, already filtered.
    pub labels: BTreeMap<String, String>,
}

impl Desired<'_> {
    /// The NodeGroup object: one node of the flavor, the node labels, the registration taint,
    /// the managed labels and hash, and an owner reference to the NodeClaim (so Kubernetes
    /// deletes the group if the claim disappears without Joinery).
    pub fn object(&self) -> Value {
        json!({
            "apiVersion": format!("{GROUP}/{VERSION}"),
            "kind": "NodeGroup",
            "metadata": {
                "name": self.name,
                "labels": {
                    MANAGED_LABEL: "true",
                    NODECLAIM_LABEL: self.name,
                    NODEPOOL_LABEL: self.node_pool,
                    NODECLASS_LABEL: self.node_class,
                    CLUSTER_LABEL: self.cluster,
                },
                "annotations": { HASH_ANNOTATION: self.class_hash },
                "ownerReferences": [{
                    "apiVersion": "karpenter.sh/v1",
                    "kind": "NodeClaim",
                    "name": self.name,
                    "uid": self.claim_uid,
                    "blockOwnerDeletion": true,
                }],
            },
            "spec": {
                "flavor": self.flavor,
                "nodeCount": 1,
                "labels": self.labels,
                "taints": [{"key": REGISTRATION_TAINT_KEY, "effect": REGISTRATION_TAINT_EFFECT}],
            },
        })
    }
}

/// A NodeGroup as read back.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct NodeGroup {
    /// Metadata.
    pub metadata: Metadata,
    /// Spec.
    pub spec: Spec,
    /// Status, written by CKE.
    pub status: Status,
}

/// The metadata fields read.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct Metadata {
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// Owner references.
    pub owner_references: Vec<OwnerReference>,
    /// Creation time.
    pub creation_timestamp: Option<String>,
    /// Set once the group is being deleted.
    pub deletion_timestamp: Option<String>,
}

/// An owner reference.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct OwnerReference {
    /// Kind of the owner.
    pub kind: String,
    /// Name of the owner.
    pub name: String,
    /// UID of the owner.
    pub uid: String,
}

/// The spec fields read.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct Spec {
    /// Flavor.
    pub flavor: String,
    /// Wanted node count.
    pub node_count: i64,
}

/// The status fields read.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct Status {
    /// `Synced`, `QuotaExceeded`…
    pub phase: Option<String>,
    /// Conditions.
    pub conditions: Vec<Condition>,
}

/// One status condition.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Condition {
    /// Type, e.g. `Ready`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Reason.
    pub reason: Option<String>,
    /// Message.
    pub message: Option<String>,
}

/// What CKE has said about a new NodeGroup so far.
#[derive(Clone, Debug, PartialEq)]
pub enum Acceptance {
    /// Accepted: `Ready=True` (reason `Synced`) or phase `Synced`.
    Accepted,
    /// Refused for the organisation's quota; the platform's message.
    QuotaExceeded(String),
    /// Nothing decided yet.
    Pending,
}

impl NodeGroup {
    fn condition(&self, kind: &str) -> Option<&Condition> {
        self.status.conditions.iter().find(|c| c.kind == kind)
    }

    /// CKE's verdict on the group.
    pub fn acceptance(&self) -> Acceptance {
        let failed = self
            .condition("ReconcileFailed")
            .filter(|c| c.status == "True" && c.reason.as_deref() == Some("QuotaExceeded"));
        if self.status.phase.as_deref() == Some("QuotaExceeded") || failed.is_some() {
            let message = failed
                .and_then(|c| c.message.clone())
                .or_else(|| self.condition("Ready").and_then(|c| c.message.clone()))
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| "Quota exceeded".to_string());
            return Acceptance::QuotaExceeded(message);
        }
        if self.is_ready() {
            return Acceptance::Accepted;
        }
        Acceptance::Pending
    }

    /// `Ready=True`, or phase `Synced`.
    pub fn is_ready(&self) -> bool {
        self.condition("Ready").is_some_and(|c| c.status == "True")
            || self.status.phase.as_deref() == Some("Synced")
    }

    /// Whether this plugin manages it for `cluster`.
    pub fn is_managed_by(&self, cluster: &str) -> bool {
        let labels = &self.metadata.labels;
        labels.get(MANAGED_LABEL).map(String::as_str) == Some("true")
            && labels.get(CLUSTER_LABEL).map(String::as_str) == Some(cluster)
    }

    /// Whether an owner reference names the NodeClaim with `uid`.
    pub fn is_owned_by_claim(&self, uid: &str) -> bool {
        self.metadata
            .owner_references
            .iter()
            .any(|o| o.kind == "NodeClaim" && o.uid == uid)
    }

    /// Whether it is being deleted.
    pub fn is_terminating(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }
}

/// FNV-1a over the NodeClass spec with its object keys sorted: a stable hash of what the
/// class asks for (the drift annotation).
pub fn spec_hash(spec_json: &str) -> String {
    let value: Value = serde_json::from_str(spec_json).unwrap_or(Value::Null);
    // serde_json's default map is ordered by key, so re-serialising canonicalises.
    let canonical = value.to_string();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in canonical.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}
