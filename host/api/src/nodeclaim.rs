//! `karpenter.sh/v1` NodeClaim.

use k8s_openapi::api::core::v1::Taint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::{Condition, HasConditions};
use crate::duration::{Duration, NillableDuration};
use crate::nodepool::{DEFAULT_EXPIRE_AFTER, effective_expire_after};
use crate::requirements::{NodeClassReference, NodeSelectorRequirementWithMinValues, ResourceList};

/// Desired state of a NodeClaim: one node Karpenter asked the cloud provider for. Immutable
/// once created.
// kube's `printcolumn(...)` entries repeat `type_ = "..."`, which clippy mistakes for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodeClaim",
    plural = "nodeclaims",
    singular = "nodeclaim",
    status = "NodeClaimStatus",
    category = "karpenter",
    derive = "PartialEq",
    doc = "A NodeClaim: a request for one node, and the record of the instance that satisfies it.",
    printcolumn(
        name = "Type",
        type_ = "string",
        json_path = r".metadata.labels.node\.kubernetes\.io/instance-type"
    ),
    printcolumn(
        name = "Capacity",
        type_ = "string",
        json_path = r".metadata.labels.karpenter\.sh/capacity-type"
    ),
    printcolumn(
        name = "Zone",
        type_ = "string",
        json_path = r".metadata.labels.topology\.kubernetes\.io/zone"
    ),
    printcolumn(name = "Node", type_ = "string", json_path = ".status.nodeName"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].status"#
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "ImageID",
        type_ = "string",
        json_path = ".status.imageID",
        priority = 1
    ),
    printcolumn(
        name = "ID",
        type_ = "string",
        json_path = ".status.providerID",
        priority = 1
    ),
    printcolumn(
        name = "NodePool",
        type_ = "string",
        json_path = r".metadata.labels.karpenter\.sh/nodepool",
        priority = 1
    ),
    printcolumn(
        name = "NodeClass",
        type_ = "string",
        json_path = ".spec.nodeClassRef.name",
        priority = 1
    ),
    printcolumn(
        name = "Drifted",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Drifted")].status"#,
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{ "message": "spec is immutable", "rule": "self == oldSelf" }]))]
pub struct NodeClaimSpec {
    /// Taints put on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::taint_list")]
    pub taints: Option<Vec<Taint>>,
    /// Taints put on the node at registration that something else is expected to remove.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::taint_list")]
    pub startup_taints: Option<Vec<Taint>>,
    /// Constraints the launched instance must satisfy (at most 100).
    #[schemars(extend(
        "maxItems" = 100,
        "x-kubernetes-list-type" = "atomic",
        "x-kubernetes-validations" = crate::schema::requirements_rules()
    ))]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    /// Resources the claim was sized for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<NodeClaimResources>,
    /// The provider NodeClass holding cloud-specific settings.
    pub node_class_ref: NodeClassReference,
    /// Maximum time the deleting node waits for its pods to drain before they are force-deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<Duration>,
    /// How long the node may live before it is replaced (`Never` disables expiry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = DEFAULT_EXPIRE_AFTER))]
    pub expire_after: Option<NillableDuration>,
}

impl NodeClaimSpec {
    /// `expireAfter`, or its default (`720h`) when absent.
    pub fn effective_expire_after(&self) -> NillableDuration {
        effective_expire_after(self.expire_after.as_ref())
    }
}

/// Resource requests of a NodeClaim.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimResources {
    /// Sum of the requests of the pods (and daemonset overhead) the claim was created for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<ResourceList>,
}

/// Observed state of a NodeClaim.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimStatus {
    /// Name of the Node registered for this claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Cloud provider ID of the instance (matches the Node's `spec.providerID`).
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// Identifier of the image the instance runs.
    #[serde(default, rename = "imageID", skip_serializing_if = "Option::is_none")]
    pub image_id: Option<String>,
    /// Expected full capacity of the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<ResourceList>,
    /// Expected allocatable capacity of the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocatable: Option<ResourceList>,
    /// Lifecycle signals (`Launched`, `Registered`, `Initialized`, `Ready`, `Drifted`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        extend(
            "x-kubernetes-list-type" = "map",
            "x-kubernetes-list-map-keys" = ["type"]
        ),
        transform = crate::schema::relax_node_claim_conditions
    )]
    pub conditions: Option<Vec<Condition>>,
    /// Last time a (non-daemonset) pod was bound to the node or left it (terminal or
    /// terminating).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_pod_event_time: Option<Time>,
}

impl HasConditions for NodeClaimStatus {
    fn conditions(&self) -> &[Condition] {
        self.conditions.as_deref().unwrap_or_default()
    }

    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        self.conditions.get_or_insert_with(Vec::new)
    }
}

/// A NodeClaim's conditions are its status's (empty when it has no status yet).
impl HasConditions for NodeClaim {
    fn conditions(&self) -> &[Condition] {
        self.status
            .as_ref()
            .map(|s| s.conditions())
            .unwrap_or_default()
    }

    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        self.status
            .get_or_insert_with(Default::default)
            .conditions_mut()
    }
}
