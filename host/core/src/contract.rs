//! The plugin contract as the host sees it: plain Rust types, independent of any WIT version.
//!
//! The controllers, the CLI and the simulator speak only these types. Each WIT version the
//! runtime supports has a module under its `wit` folder that converts between these types and
//! its generated bindings at the runtime's edge, so adding `v0.2` means a new module there
//! and nothing elsewhere. Quantities stay Kubernetes quantity strings here (plugins receive
//! exactly the text the cluster holds); [`InstanceType::to_core`] turns a plugin's instance
//! type into the core's checked form.

use crate::instance_type::{
    InstanceType as CoreInstanceType, Offering as CoreOffering, Overhead as CoreOverhead,
};
use crate::labels;
use crate::requirements::{Requirement as CoreRequirement, Requirements};
use crate::resources::Resources;

pub use crate::requirements::Operator;

/// A key and its value (labels, annotations, parameters, secret entries).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The key.
    pub key: String,
    /// The value.
    pub value: String,
}

/// A resource name and a Kubernetes quantity, e.g. `cpu` = `1500m`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    /// Resource name (`cpu`, `memory`, `nvidia.com/gpu`, …).
    pub name: String,
    /// Quantity text.
    pub quantity: String,
}

/// A node taint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    /// Taint key.
    pub key: String,
    /// Taint value, if any.
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// A scheduling requirement with Karpenter's operators.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// Label key.
    pub key: String,
    /// How the key relates to the values.
    pub operator: Operator,
    /// Values (one integer for the bound operators, none for `Exists`/`DoesNotExist`).
    pub values: Vec<String>,
    /// The minimum number of distinct values a launch must span, if any.
    pub min_values: Option<u32>,
}

/// A status condition a plugin reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// Condition type.
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// CamelCase reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

/// A NodeClass object as a cloud plugin receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeClass {
    /// Object name.
    pub name: String,
    /// Object UID.
    pub uid: String,
    /// `metadata.generation`.
    pub generation: u64,
    /// `spec` as JSON text.
    pub spec: String,
    /// `status` as JSON text.
    pub status: String,
}

/// What resolving a NodeClass produced: its conditions and the status to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeClassResolution {
    /// Conditions besides `Ready` (the host derives `Ready` from them).
    pub conditions: Vec<Condition>,
    /// The NodeClass `status` (JSON text) to write.
    pub status: String,
}

/// The NodeClaim fields a cloud plugin needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeClaim {
    /// Object name.
    pub name: String,
    /// Object UID.
    pub uid: String,
    /// The NodePool it belongs to.
    pub node_pool: String,
    /// Labels.
    pub labels: Vec<KeyValue>,
    /// Annotations.
    pub annotations: Vec<KeyValue>,
    /// Taints of the node.
    pub taints: Vec<Taint>,
    /// Startup taints of the node.
    pub startup_taints: Vec<Taint>,
    /// Requirements the instance must satisfy.
    pub requirements: Vec<Requirement>,
    /// Resources the scheduled pods request.
    pub resource_requests: Vec<Resource>,
    /// The instance's provider ID once launched.
    pub provider_id: Option<String>,
}

/// Where and how an instance type is sold.
#[derive(Debug, Clone, PartialEq)]
pub struct Offering {
    /// Zone.
    pub zone: String,
    /// `on-demand`, `spot` or `reserved`.
    pub capacity_type: String,
    /// Hourly price, when the cloud publishes one.
    pub price: Option<f64>,
    /// Whether it can be launched now.
    pub available: bool,
}

/// Capacity a node keeps for itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Overhead {
    /// kubelet's `kube-reserved`.
    pub kube_reserved: Vec<Resource>,
    /// kubelet's `system-reserved`.
    pub system_reserved: Vec<Resource>,
    /// kubelet's hard eviction thresholds.
    pub eviction_threshold: Vec<Resource>,
}

/// An instance type in the form a cloud plugin (or a catalog file) describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceType {
    /// Name (the `node.kubernetes.io/instance-type` value).
    pub name: String,
    /// The labels a node of this type has, as requirements.
    pub requirements: Vec<Requirement>,
    /// Capacity.
    pub capacity: Vec<Resource>,
    /// Overhead.
    pub overhead: Overhead,
    /// Offerings.
    pub offerings: Vec<Offering>,
}

/// What `create` is asked to launch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateRequest {
    /// The NodeClaim.
    pub claim: NodeClaim,
    /// Its NodeClass.
    pub node_class: NodeClass,
    /// The rendered userData.
    pub user_data: String,
}

/// The lifecycle state of a cloud instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceState {
    /// Being created.
    Pending,
    /// Running.
    Running,
    /// Being deleted.
    Terminating,
    /// Gone (some clouds list terminated instances for a while).
    Terminated,
}

/// A cloud instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    /// `<provider>://<id>`.
    pub provider_id: String,
    /// Instance type name.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// Capacity type.
    pub capacity_type: String,
    /// Image, if the cloud reports one.
    pub image_id: Option<String>,
    /// Labels the node will carry (and the cloud's tags the host reads, such as the cluster).
    pub labels: Vec<KeyValue>,
    /// Capacity.
    pub capacity: Vec<Resource>,
    /// Allocatable.
    pub allocatable: Vec<Resource>,
    /// State.
    pub state: InstanceState,
    /// The NodeClaim it was created for, from the cloud's tags.
    pub node_claim: Option<String>,
    /// RFC 3339 creation time, if known.
    pub created_at: Option<String>,
}

/// One offering named by an insufficient-capacity error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferingRef {
    /// Instance type.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// Capacity type.
    pub capacity_type: String,
}

/// Insufficient capacity, with the offerings that ran out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InsufficientCapacity {
    /// What the cloud said.
    pub message: String,
    /// The offerings to mark unavailable.
    pub offerings: Vec<OfferingRef>,
}

/// A transient failure, with the cloud's `Retry-After` if it gave one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retryable {
    /// What the cloud said.
    pub message: String,
    /// How long to wait, in milliseconds.
    pub retry_after_ms: Option<u64>,
}

/// A classified cloud error (Karpenter's error classes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloudError {
    /// The instance (or object) does not exist.
    NotFound(String),
    /// No capacity for the requested offerings.
    InsufficientCapacity(InsufficientCapacity),
    /// The NodeClass cannot be used yet.
    NodeClassNotReady(String),
    /// An account quota stops the launch.
    QuotaExceeded(String),
    /// Transient; retry later.
    Retryable(Retryable),
    /// The request is invalid; retrying will not help.
    Invalid(String),
    /// Anything else.
    Internal(String),
    /// The cloud cannot do this at all (WIT 0.2; for a 0.1 plugin the host answers it for
    /// the functions 0.1 does not have).
    Unsupported(String),
}

/// A node condition that means "unhealthy" once it has held a status for long enough
/// (Karpenter's `RepairPolicy`; WIT 0.2 `repair-policy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairPolicy {
    /// Node condition type, e.g. `Ready`.
    pub condition_type: String,
    /// The unhealthy status: `True`, `False` or `Unknown`.
    pub condition_status: String,
    /// How long the condition may hold that status, in seconds.
    pub toleration_seconds: u64,
}

/// What a node booted from a renderer's userData registers with, as the renderer promises
/// it (WIT 0.2 `node-registration`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRegistration {
    /// Node name; `None` means the instance's hostname.
    pub node_name: Option<String>,
    /// Labels the node registers with.
    pub labels: Vec<KeyValue>,
    /// Taints the node registers with.
    pub taints: Vec<Taint>,
    /// The node's provider ID is this prefix followed by the instance ID; `None` when the
    /// cloud controller manager sets it.
    pub provider_id_prefix: Option<String>,
}

/// What a userData renderer gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderContext {
    /// NodeClaim name.
    pub node_claim: String,
    /// NodePool name.
    pub node_pool: String,
    /// Node labels.
    pub labels: Vec<KeyValue>,
    /// Node taints.
    pub taints: Vec<Taint>,
    /// Startup taints.
    pub startup_taints: Vec<Taint>,
    /// The NodePool's kubelet configuration as JSON text.
    pub kubelet: String,
    /// Instance type, when already chosen.
    pub instance_type: Option<String>,
    /// Zone, when already chosen.
    pub zone: Option<String>,
    /// Capacity type, when already chosen.
    pub capacity_type: Option<String>,
    /// Cluster name.
    pub cluster_name: String,
    /// API server endpoint.
    pub cluster_endpoint: String,
    /// Provider-ID prefix of the cloud.
    pub provider_id_prefix: String,
    /// The NodeClass's own userData, if any.
    pub user_data: Option<String>,
    /// Renderer parameters from the NodeClass.
    pub parameters: Vec<KeyValue>,
    /// Secret entries granted to the renderer.
    pub secrets: Vec<KeyValue>,
    /// Resources the scheduled pods request.
    pub resource_requests: Vec<Resource>,
}

/// Why a renderer refused to render.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenderError {
    /// A parameter is missing or malformed.
    InvalidParameter(String),
    /// A secret it needs was not given.
    MissingSecret(String),
    /// The template does not render.
    InvalidTemplate(String),
}

/// One offering a pricing function is asked to price.
#[derive(Debug, Clone, PartialEq)]
pub struct PriceRequest {
    /// Instance type.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// Capacity type.
    pub capacity_type: String,
    /// vCPU in millicores.
    pub cpu_millis: u64,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// GPUs.
    pub gpu_count: u32,
    /// The cloud's price, if it gave one.
    pub known_price: Option<f64>,
    /// The instance type's labels.
    pub labels: Vec<KeyValue>,
}

/// Requirements in the core's form; errors name the key.
pub fn requirements_to_core(items: &[Requirement]) -> Result<Requirements, String> {
    let mut out = Requirements::new();
    for r in items {
        let requirement = CoreRequirement::new(r.key.clone(), r.operator, r.values.clone())
            .map_err(|e| format!("requirement {}: {e}", r.key))?
            .with_min_values(r.min_values.map(|m| m as usize));
        out.add(requirement);
    }
    Ok(out)
}

/// Resources in the core's form.
pub fn resources_to_core(items: &[Resource]) -> Result<Resources, String> {
    Resources::from_quantities(items.iter().map(|r| (r.name.as_str(), r.quantity.as_str())))
        .map_err(|e| format!("resources: {e}"))
}

impl InstanceType {
    /// The core's instance type; errors name the type and field. A type whose requirements
    /// do not name `node.kubernetes.io/instance-type` gets `In [name]`.
    pub fn to_core(&self) -> Result<CoreInstanceType, String> {
        let ctx = |e: String| format!("instance type {}: {e}", self.name);
        let mut requirements = requirements_to_core(&self.requirements).map_err(ctx)?;
        if !requirements.has(labels::INSTANCE_TYPE_LABEL) {
            requirements.add(CoreRequirement::in_values(
                labels::INSTANCE_TYPE_LABEL,
                [self.name.as_str()],
            ));
        }
        let capacity = resources_to_core(&self.capacity).map_err(ctx)?;
        let overhead = CoreOverhead {
            kube_reserved: resources_to_core(&self.overhead.kube_reserved).map_err(ctx)?,
            system_reserved: resources_to_core(&self.overhead.system_reserved).map_err(ctx)?,
            eviction_threshold: resources_to_core(&self.overhead.eviction_threshold)
                .map_err(ctx)?,
        };
        let offerings: Vec<CoreOffering> = self
            .offerings
            .iter()
            .map(|o| {
                CoreOffering::new(
                    o.zone.clone(),
                    o.capacity_type.clone(),
                    o.price,
                    o.available,
                )
            })
            .collect();
        Ok(CoreInstanceType::new(
            self.name.clone(),
            requirements,
            capacity,
            overhead,
            offerings,
        ))
    }
}
