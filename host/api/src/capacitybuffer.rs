//! `autoscaling.x-k8s.io/v1beta1` CapacityBuffer: SIG Autoscaling's API for spare capacity,
//! served with the `CapacityBuffer` feature gate.
//!
//! The shape follows the upstream API field for field (spec `provisioningStrategy`,
//! `podTemplateRef` or `scalableRef`, `replicas`, `percentage`, `limits`; status
//! `podTemplateRef`, `replicas`, `podTemplateGeneration`, `conditions`,
//! `provisioningStrategy`), with the same bounds and CEL rules.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::{Condition, HasConditions};
use crate::requirements::ResourceList;

/// The one provisioning strategy defined upstream (and the default): the buffer's chunks are
/// virtual pods that the autoscaler provisions capacity for.
pub const ACTIVE_CAPACITY_STRATEGY: &str = "buffer.x-k8s.io/active-capacity";
/// Condition: the buffer's pod shape was resolved and `status.replicas` computed.
pub const CONDITION_READY_FOR_PROVISIONING: &str = "ReadyForProvisioning";
/// Condition: every chunk of the buffer fits on capacity that exists (True) or not (False).
pub const CONDITION_PROVISIONING: &str = "Provisioning";
/// Condition: some chunks cannot be provisioned because a limit (a NodePool's `limits`)
/// would be exceeded.
pub const CONDITION_LIMITED_BY_QUOTAS: &str = "LimitedByQuotas";
/// The `scalableRef` kinds whose pod template a buffer can take.
pub const SCALABLE_KINDS: [&str; 3] = ["Deployment", "StatefulSet", "ReplicaSet"];

/// Desired state of a CapacityBuffer: the shape of one chunk (a pod) and how many chunks to
/// keep room for.
// kube's `printcolumn(...)` entries repeat `type_ = "..."`, which clippy mistakes for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "autoscaling.x-k8s.io",
    version = "v1beta1",
    kind = "CapacityBuffer",
    plural = "capacitybuffers",
    singular = "capacitybuffer",
    shortname = "cb",
    namespaced,
    status = "CapacityBufferStatus",
    category = "autoscaling",
    derive = "PartialEq",
    doc = "A CapacityBuffer: spare capacity, in chunks shaped like a pod, kept ready for a burst.",
    printcolumn(
        name = "Strategy",
        type_ = "string",
        json_path = ".spec.provisioningStrategy",
        description = "The strategy to be used."
    ),
    printcolumn(
        name = "PodTemplate",
        type_ = "string",
        json_path = ".status.podTemplateRef.name",
        description = "The name of the PodTemplate used."
    ),
    printcolumn(
        name = "Replicas",
        type_ = "integer",
        json_path = ".status.replicas",
        description = "The actual number of buffer chunks."
    ),
    printcolumn(
        name = "ConditionsType",
        type_ = "string",
        json_path = ".status.conditions[*].type",
        description = "List of all condition types."
    ),
    printcolumn(
        name = "ConditionsStatus",
        type_ = "string",
        json_path = ".status.conditions[*].status",
        description = "List of all condition statuses."
    ),
    printcolumn(
        name = "ConditionsReason",
        type_ = "string",
        json_path = ".status.conditions[*].reason",
        description = "List of all condition reasons."
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "The age of the CapacityBuffer."
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = crate::schema::capacity_buffer_spec_rules()))]
pub struct CapacityBufferSpec {
    /// How the buffer is used; `buffer.x-k8s.io/active-capacity` (the default) keeps room by
    /// provisioning capacity for the buffer's virtual pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = ACTIVE_CAPACITY_STRATEGY))]
    pub provisioning_strategy: Option<String>,
    /// A PodTemplate in the buffer's namespace giving the shape of one chunk. Set this or
    /// `scalableRef`, not both; with it, `replicas` or `limits` must be set too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// A Deployment, StatefulSet or ReplicaSet in the buffer's namespace: one chunk is one of
    /// its pods, and `percentage` is taken of its replicas. Set this or `podTemplateRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scalable_ref: Option<ScalableRef>,
    /// Number of chunks. With `percentage` too, the larger of the two counts; `limits` caps
    /// either. Without both, as many chunks as `limits` allows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,
    /// Chunks as a percentage of the `scalableRef` workload's replicas, rounded up, at least
    /// one when both are positive. Only used with `scalableRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub percentage: Option<i32>,
    /// Resource totals (requests of all chunks together) the buffer may not exceed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceList>,
}

/// A reference to an object in the same namespace, by name.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LocalObjectRef {
    /// Name of the object.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// A reference to a workload with a scale subresource in the same namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScalableRef {
    /// API group of the workload (`apps`); empty for the core group.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    /// Kind of the workload: Deployment, StatefulSet or ReplicaSet.
    #[schemars(length(min = 1))]
    pub kind: String,
    /// Name of the workload.
    #[schemars(length(min = 1))]
    pub name: String,
}

/// Observed state of a CapacityBuffer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityBufferStatus {
    /// The PodTemplate the chunks were shaped from (unset for a `scalableRef` buffer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_ref: Option<LocalObjectRef>,
    /// Number of chunks computed from `replicas`, `percentage` and `limits`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    /// `metadata.generation` of the PodTemplate the chunks were shaped from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_template_generation: Option<i64>,
    /// `ReadyForProvisioning`, `Provisioning` and `LimitedByQuotas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["type"]
    ))]
    pub conditions: Option<Vec<Condition>>,
    /// The `spec.provisioningStrategy` the status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning_strategy: Option<String>,
}

impl HasConditions for CapacityBufferStatus {
    fn conditions(&self) -> &[Condition] {
        self.conditions.as_deref().unwrap_or_default()
    }

    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        self.conditions.get_or_insert_with(Vec::new)
    }
}

impl CapacityBufferSpec {
    /// The strategy in effect (`provisioningStrategy`, defaulted as the API server does).
    pub fn effective_strategy(&self) -> &str {
        self.provisioning_strategy
            .as_deref()
            .unwrap_or(ACTIVE_CAPACITY_STRATEGY)
    }
}
