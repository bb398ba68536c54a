//! The objects the fake Exoscale API keeps: instance types, templates, security groups,
//! private networks, anti-affinity groups, SSH keys, instances and operations.
//!
//! These are the fake's own records, exposed read-only through [`super::ExoFake`]'s
//! inspection methods; the HTTP layer renders them in the API's kebab-case JSON.

use std::collections::BTreeMap;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

/// The provider-ID scheme of Exoscale instances: `exoscale://<instance uuid>`.
pub const PROVIDER_ID_PREFIX: &str = "exoscale://";

/// Bytes in a GiB.
pub const GIB: u64 = 1 << 30;

/// An instance type (`GET /v2/instance-type`). Its API name is `<family>.<size>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ExoInstanceType {
    /// UUID.
    pub id: String,
    /// Family, e.g. `standard`, `cpu`, `memory`, `gpua30`.
    pub family: String,
    /// Size, e.g. `medium`.
    pub size: String,
    /// vCPUs.
    pub cpus: u32,
    /// GPUs (0 for CPU types).
    pub gpus: u32,
    /// Memory in bytes, as the API reports it.
    pub memory: u64,
    /// Whether the organisation may launch it (`false`: needs enablement by support).
    pub authorized: bool,
    /// Zones where it is offered.
    pub zones: Vec<String>,
}

impl ExoInstanceType {
    /// The `<family>.<size>` name Karpenter uses for the type.
    pub fn name(&self) -> String {
        format!("{}.{}", self.family, self.size)
    }
}

/// Public (maintained by Exoscale) or private (the organisation's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Visibility {
    /// Maintained by Exoscale, visible to everyone.
    Public,
    /// The organisation's own.
    Private,
}

impl Visibility {
    /// The API's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Visibility::Public => "public",
            Visibility::Private => "private",
        }
    }
}

/// A template (disk image) in one zone. Template IDs differ between zones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ExoTemplate {
    /// UUID.
    pub id: String,
    /// The zone it lives in.
    pub zone: String,
    /// Name, e.g. `Linux Ubuntu 24.04 LTS 64-bit`; several builds share one name.
    pub name: String,
    /// Public or private.
    pub visibility: Visibility,
    /// Build string (opaque, e.g. `2026-03-01-a`).
    pub build: String,
    /// Version string.
    pub version: String,
    /// Size of the image in bytes; an instance's disk must be at least this large.
    pub size: u64,
    /// Creation time (RFC 3339); "newest build" means the latest `created-at`.
    pub created_at: String,
    /// Family, e.g. `ubuntu`.
    pub family: String,
    /// The user cloud-init creates.
    pub default_user: String,
}

/// A security group (organisation-wide: the same object at every zone endpoint).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ExoSecurityGroup {
    /// UUID.
    pub id: String,
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Public groups are Exoscale's (e.g. `public-sks-apiservers`).
    pub visibility: Visibility,
}

/// A private network in one zone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ExoPrivateNetwork {
    /// UUID.
    pub id: String,
    /// The zone it lives in.
    pub zone: String,
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Exoscale labels.
    pub labels: BTreeMap<String, String>,
    /// Attached instances and the address each leased.
    pub leases: Vec<Lease>,
}

/// An instance attached to a private network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Lease {
    /// The instance.
    pub instance_id: String,
    /// Its address on the network.
    pub ip: String,
}

/// An anti-affinity group (organisation-wide). Its members run on distinct hypervisors, so it
/// holds at most as many instances as there are hosts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ExoAntiAffinityGroup {
    /// UUID.
    pub id: String,
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Member instance IDs.
    pub instances: Vec<String>,
}

/// An SSH key (organisation-wide), addressed by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ExoSshKey {
    /// Name.
    pub name: String,
    /// Fingerprint.
    pub fingerprint: String,
}

/// Lifecycle state of an instance (the API's enum, minus states the fake never enters).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ExoInstanceState {
    /// Created, booting.
    Starting,
    /// Booted.
    Running,
    /// Being deleted; gone (404) once the delete operation finishes.
    Destroying,
    /// The create operation failed after the instance was made; it stays until deleted.
    Error,
}

impl ExoInstanceState {
    /// The API's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            ExoInstanceState::Starting => "starting",
            ExoInstanceState::Running => "running",
            ExoInstanceState::Destroying => "destroying",
            ExoInstanceState::Error => "error",
        }
    }
}

/// A compute instance in one zone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ExoInstance {
    /// UUID (also what the metadata service answers for `instance-id`).
    pub id: String,
    /// The zone it runs in.
    pub zone: String,
    /// Name (a hostname).
    pub name: String,
    /// State.
    pub state: ExoInstanceState,
    /// Creation time (simulated clock).
    pub created_at: SystemTime,
    /// Exoscale labels.
    pub labels: BTreeMap<String, String>,
    /// Instance type ID.
    pub instance_type_id: String,
    /// Instance type name, `<family>.<size>`.
    pub instance_type: String,
    /// Template ID.
    pub template_id: String,
    /// Root disk in GiB.
    pub disk_size: u64,
    /// userData exactly as sent (base64).
    pub user_data: Option<String>,
    /// Security group IDs.
    pub security_groups: Vec<String>,
    /// Anti-affinity group IDs.
    pub anti_affinity_groups: Vec<String>,
    /// Attached private network IDs.
    pub private_networks: Vec<String>,
    /// SSH key names.
    pub ssh_keys: Vec<String>,
    /// `inet4`, `dual` or `none`.
    pub public_ip_assignment: String,
    /// Public IPv4 address, unless the assignment is `none`.
    pub public_ip: Option<String>,
    /// Public IPv6 address, when the assignment is `dual`.
    pub ipv6_address: Option<String>,
    /// MAC address of the public interface.
    pub mac_address: String,
}

impl ExoInstance {
    /// `exoscale://<id>`.
    pub fn provider_id(&self) -> String {
        format!("{PROVIDER_ID_PREFIX}{}", self.id)
    }
}

/// State of an asynchronous operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OperationState {
    /// Still running.
    Pending,
    /// Done.
    Success,
    /// Failed; `reason` and `message` say why.
    Failure,
    /// Gave up.
    Timeout,
}

impl OperationState {
    /// The API's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            OperationState::Pending => "pending",
            OperationState::Success => "success",
            OperationState::Failure => "failure",
            OperationState::Timeout => "timeout",
        }
    }
}

/// An asynchronous operation, as every mutating call returns one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct ExoOperation {
    /// UUID.
    pub id: String,
    /// Zone of the endpoint that started it.
    pub zone: String,
    /// Current state.
    pub state: OperationState,
    /// Failure reason (`unavailable`, `fault`, …) once failed.
    pub reason: Option<String>,
    /// Failure message once failed.
    pub message: Option<String>,
    /// ID of the resource it acts on (valid at once, e.g. the new instance's ID).
    pub reference_id: Option<String>,
    /// Name of the command, e.g. `create-instance`.
    pub command: String,
    /// How many times it was polled so far.
    pub polls: u32,
    /// When it started (simulated clock).
    pub started_at: SystemTime,
}
