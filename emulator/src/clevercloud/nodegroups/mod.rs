//! The NodeGroup API of Clever Cloud Kubernetes Engine (CKE), faked inside the emulated
//! cluster: the CRD ([`crd`], [`install_crd`]) and the operator ([`NodeGroupOperator`]) that
//! plays Clever Cloud's side of it.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use joinery_core::clock::Clock;
//! use joinery_emulator::clevercloud::nodegroups::{NodeGroupOperator, NodeGroupOperatorOptions, install_crd};
//! use joinery_emulator::{ApiServer, ApiServerOptions, Physics, PhysicsOptions};
//! let clock = Arc::new(Clock::with_speed(20.0));
//! let server = ApiServer::start(ApiServerOptions { clock: clock.clone(), ..Default::default() }).await?;
//! let client = server.client()?;
//! install_crd(&client).await?;
//! let operator = NodeGroupOperator::start(NodeGroupOperatorOptions::new(client.clone(), clock.clone()));
//! let physics = Physics::start(PhysicsOptions::new(client, clock).with_cloud(operator.subscribe(), std::time::Duration::ZERO));
//! # let _ = physics;
//! # Ok(()) }
//! ```
//!
//! # The CRD
//!
//! `nodegroups.api.clever-cloud.com`, version `v1`, kind `NodeGroup`, cluster-scoped, with the
//! `status` subresource and a `scale` subresource on `spec.nodeCount` / `status.nodeCount`.
//! The emulated API server enforces its schema: `spec.flavor` one of `2XS XS S M L XL`
//! (required), `spec.nodeCount` 0–16 (default 1, the fake's choice), `spec.labels` values of at
//! most 63 characters matching the label-value pattern and keys outside `kubernetes.io/`,
//! `node.kubernetes.io/` and `clever-cloud.com/`, `spec.taints` `{key, value?, effect}`; and
//! `flavor`, `labels`, `taints` immutable after creation (CEL transition rules). See
//! `crd.yaml`.
//!
//! # The operator
//!
//! It talks to the API server only through its `kube::Client` and keeps time with the shared
//! clock. For every NodeGroup it:
//!
//! - adds its finalizer [`FINALIZER`] at once (the name is the fake's choice; Clever Cloud's
//!   own is not documented);
//! - after [`CkeSettings::acceptance_delay`] (1 s) decides with the quota
//!   engine: the organisation's limit ([`CkeSettings::quota`], 40 vCPU / 40 GB)
//!   must hold the control plane ([`CkeSettings::control_plane`], 24 vCPU /
//!   24 GB), every accepted group (flavor's nominal size × its node count) and the new group.
//!   Accepted: `status.phase: Synced`, `Ready=True` reason `Synced`,
//!   `ReconcileInProgress=False`, `targetNodeCount`, `upstreamId`, `labels`, `taints`.
//!   Refused: after [`CkeSettings::rejection_delay`] (1–3 s from creation)
//!   `phase: QuotaExceeded`, `ReconcileFailed=True` reason `QuotaExceeded` with the message
//!   of [`QuotaExceeded`] (e.g. `Quota exceeded: RAM max: limit = 40.0 GB | actual = 48.0 GB`),
//!   `Ready=False`. A refusal is final (the fake does not retry it) and holds no quota, unless
//!   [`CkeSettings::reservation_leak`] is set: then it holds its demand from the
//!   refusal until that long after its deletion, as Clever Cloud once leaked reservations;
//! - launches one machine per node (`<nodegroup>-node<i>`, i from 0) as a
//!   [`CloudEvent::PlatformLaunched`]: after its boot delay
//!   ([`CkeSettings::boot_delay`], uniformly 26–60 s) its Node registers itself
//!   with an **empty providerID**, the labels `clever-cloud.com/nodegroup`,
//!   `clever-cloud.com/flavor`, `clever-cloud.com/cluster-node-role=worker`, the group's
//!   labels and taints, the kubelet's usual labels (instance type = the flavor, zone and
//!   region `par`) and the flavor's capacity ([`FLAVORS`]); the physics' kubelet then runs it
//!   like any simulated node;
//! - follows `spec.nodeCount`: more nodes if the quota allows (otherwise `ReconcileFailed=True`
//!   reason `QuotaExceeded` while the group stays `Synced` with its current nodes, retried on
//!   every pass), fewer by terminating the highest indexes after the teardown delay;
//! - on deletion (a `deletionTimestamp`), after [`CkeSettings::teardown_delay`]
//!   (30–40 s) terminates the machines (the physics deletes their Nodes; a Node held by a
//!   finalizer such as `karpenter.sh/termination` stays until that is removed), and removes
//!   its finalizer only once no Node of the group exists any more. A group that was never
//!   accepted is let go at once. Garbage collection of a NodeGroup whose owner (a NodeClaim)
//!   is gone is the API server's, and ends the same way;
//! - optionally "vanishes" an accepted group ([`CkeSettings::vanish_names`],
//!   [`CkeSettings::vanish_probability`]): it deletes the NodeGroup itself
//!   [`CkeSettings::vanish_after`] after `Synced` and tears it down at once, as
//!   the real platform once did near the quota edge.
//!
//! Random draws (delays, vanishing) come from [`CkeSettings::seed`]; the same
//! seed and the same sequence of NodeGroups give the same run.

mod operator;
pub mod quota;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use joinery_core::clock::Clock;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, GroupVersionKind, PostParams};
use serde_json::Value;
use tokio::sync::broadcast;

#[cfg(test)]
use crate::cloud::model::InstanceState;
use crate::cloud::model::{CloudEvent, MachineRecord, SimInstance, platform_instances};
use crate::fake_operator::OperatorTask;

pub use quota::{QuotaExceeded, Usage};

/// The API group.
pub const GROUP: &str = "api.clever-cloud.com";
/// The API version.
pub const VERSION: &str = "v1";
/// The kind.
pub const KIND: &str = "NodeGroup";
/// The plural resource name.
pub const PLURAL: &str = "nodegroups";
/// The CRD's name.
pub const CRD_NAME: &str = "nodegroups.api.clever-cloud.com";
/// The finalizer the fake operator puts on every NodeGroup (the fake's choice of name).
pub const FINALIZER: &str = "api.clever-cloud.com/nodegroup-cleanup";
/// Node label naming the node's NodeGroup.
pub const NODEGROUP_LABEL: &str = "clever-cloud.com/nodegroup";
/// Node label naming the node's flavor.
pub const FLAVOR_LABEL: &str = "clever-cloud.com/flavor";
/// Node label with the node's role (`worker` for NodeGroup nodes).
pub const ROLE_LABEL: &str = "clever-cloud.com/cluster-node-role";
/// The region, and the only zone, of CKE (Paris).
pub const REGION: &str = "par";
/// The provider-ID scheme the Clever Cloud provider gives its nodes (`clevercloud://<nodegroup>`);
/// the fake uses it for its machines' [`SimInstance::provider_id`] (the Nodes themselves
/// register with none).
pub const PROVIDER_ID_PREFIX: &str = "clevercloud://";
/// `ephemeral-storage` capacity of every flavor, in KiB.
pub const EPHEMERAL_STORAGE_KI: u64 = 40_971_488;
/// Hard eviction threshold on ephemeral storage (10 %), in KiB.
pub const EPHEMERAL_EVICTION_KI: u64 = 4_097_149;
/// Memory the kubelet reserves (kube-reserved), in KiB (100 Mi).
pub const KUBE_RESERVED_MEMORY_KI: u64 = 100 * 1024;
/// Pods per node.
pub const MAX_PODS: u32 = 110;

/// The CRD as YAML.
pub const CRD_YAML: &str = include_str!("crd.yaml");

/// One CKE flavor.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Flavor {
    /// Name (`2XS` … `XL`).
    pub name: &'static str,
    /// vCPUs.
    pub vcpu: u32,
    /// Nominal RAM in GB (what quota and price count).
    pub memory_gb: u32,
    /// Memory the kernel sees, in KiB (the Node's `memory` capacity).
    pub memory_ki: u64,
    /// List price in EUR per hour.
    pub price_hourly: f64,
}

/// The flavors of CKE, smallest first (memory of L and XL estimated, the others measured).
pub const FLAVORS: [Flavor; 6] = [
    Flavor {
        name: "2XS",
        vcpu: 4,
        memory_gb: 4,
        memory_ki: 3_911_884,
        price_hourly: 0.0333,
    },
    Flavor {
        name: "XS",
        vcpu: 6,
        memory_gb: 8,
        memory_ki: 7_937_580,
        price_hourly: 0.0611,
    },
    Flavor {
        name: "S",
        vcpu: 8,
        memory_gb: 12,
        memory_ki: 11_957_148,
        price_hourly: 0.0889,
    },
    Flavor {
        name: "M",
        vcpu: 10,
        memory_gb: 16,
        memory_ki: 15_988_992,
        price_hourly: 0.1167,
    },
    Flavor {
        name: "L",
        vcpu: 12,
        memory_gb: 24,
        memory_ki: 23_983_488,
        price_hourly: 0.1667,
    },
    Flavor {
        name: "XL",
        vcpu: 16,
        memory_gb: 32,
        memory_ki: 31_977_984,
        price_hourly: 0.2222,
    },
];

/// The flavor of that name.
pub fn flavor(name: &str) -> Option<&'static Flavor> {
    FLAVORS.iter().find(|f| f.name == name)
}

impl Flavor {
    /// Node capacity in Kubernetes quantities (`cpu`, `memory`, `ephemeral-storage`, `pods`).
    pub fn capacity(&self) -> BTreeMap<String, String> {
        resources(self.vcpu, self.memory_ki, EPHEMERAL_STORAGE_KI)
    }

    /// Node allocatable: capacity minus kube-reserved memory and the ephemeral-storage
    /// eviction threshold.
    pub fn allocatable(&self) -> BTreeMap<String, String> {
        resources(
            self.vcpu,
            self.memory_ki - KUBE_RESERVED_MEMORY_KI,
            EPHEMERAL_STORAGE_KI - EPHEMERAL_EVICTION_KI,
        )
    }
}

fn resources(cpu: u32, memory_ki: u64, storage_ki: u64) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("cpu".to_string(), cpu.to_string()),
        ("memory".to_string(), format!("{memory_ki}Ki")),
        ("ephemeral-storage".to_string(), format!("{storage_ki}Ki")),
        ("pods".to_string(), MAX_PODS.to_string()),
    ])
}

/// The CRD `nodegroups.api.clever-cloud.com` as JSON.
pub fn crd() -> Value {
    serde_norway::from_str(CRD_YAML).expect("the NodeGroup CRD is valid YAML")
}

/// Creates the CRD in a cluster (already there is fine).
pub async fn install_crd(client: &kube::Client) -> Result<(), kube::Error> {
    let crd: CustomResourceDefinition = serde_json::from_value(crd())
        .expect("the NodeGroup CRD is a valid CustomResourceDefinition");
    match Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// The NodeGroup resource, for `Api::<DynamicObject>::all_with`.
pub fn api_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

/// A delay drawn uniformly between two bounds (simulated time).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelayRange {
    /// Shortest.
    pub min: Duration,
    /// Longest (`max < min` is treated as `min`).
    pub max: Duration,
}

impl DelayRange {
    /// Always `delay`.
    pub fn fixed(delay: Duration) -> DelayRange {
        DelayRange {
            min: delay,
            max: delay,
        }
    }

    /// Uniformly between `min` and `max` seconds.
    pub fn seconds(min: u64, max: u64) -> DelayRange {
        DelayRange {
            min: Duration::from_secs(min),
            max: Duration::from_secs(max),
        }
    }

    /// Draws one delay from the seeded generator.
    pub(crate) fn pick(&self, rng: &mut u64) -> Duration {
        if self.max <= self.min {
            return self.min;
        }
        self.min + (self.max - self.min).mul_f64(crate::random::next_unit(rng))
    }
}

/// How the fake platform behaves: quota, delays, faults. Every duration is simulated time;
/// the default is CKE as measured.
#[derive(Debug, Clone, PartialEq)]
pub struct CkeSettings {
    /// The organisation's quota; default 40 vCPU / 40 GB.
    pub quota: Usage,
    /// What the control plane uses of the quota; default 24 vCPU / 24 GB (a 3-node S
    /// control plane).
    pub control_plane: Usage,
    /// From creation to acceptance (`Synced`); default 1 s.
    pub acceptance_delay: Duration,
    /// From creation to a quota refusal showing in the status; default 1–3 s (never before
    /// the acceptance delay).
    pub rejection_delay: DelayRange,
    /// From acceptance (or scale-up) to a node registering; default 26–60 s.
    pub boot_delay: DelayRange,
    /// From deletion (or scale-down) to the machine terminating; default 30–40 s.
    pub teardown_delay: DelayRange,
    /// A refused group holds its demand from the refusal until this long after its
    /// deletion; default `None` (refusals hold nothing).
    pub reservation_leak: Option<Duration>,
    /// NodeGroups (by name) deleted upstream once accepted.
    pub vanish_names: BTreeSet<String>,
    /// Chance (0–1) that an accepted group is deleted upstream; default 0.
    pub vanish_probability: f64,
    /// From `Synced` to a vanishing group's deletion; default 3 s.
    pub vanish_after: Duration,
    /// Seed of every random draw.
    pub seed: u64,
    /// How often everything is re-checked without a change; default 5 s.
    pub resync_interval: Duration,
}

impl Default for CkeSettings {
    fn default() -> Self {
        CkeSettings {
            quota: Usage::new(40, 40.0),
            control_plane: Usage::new(24, 24.0),
            acceptance_delay: Duration::from_secs(1),
            rejection_delay: DelayRange::seconds(1, 3),
            boot_delay: DelayRange::seconds(26, 60),
            teardown_delay: DelayRange::seconds(30, 40),
            reservation_leak: None,
            vanish_names: BTreeSet::new(),
            vanish_probability: 0.0,
            vanish_after: Duration::from_secs(3),
            seed: 0xC1E7_E4C1,
            resync_interval: Duration::from_secs(5),
        }
    }
}

/// What the fake CKE operator runs against, and how the platform behaves.
#[derive(Clone)]
pub struct NodeGroupOperatorOptions {
    /// Client of the API server the NodeGroups live in.
    pub client: kube::Client,
    /// The shared clock: sleeps last `clock.to_real(d)`, timestamps come from `clock.now()`.
    pub clock: Arc<Clock>,
    /// Quota, delays and faults.
    pub settings: CkeSettings,
}

impl NodeGroupOperatorOptions {
    /// The default [`CkeSettings`] on this client and clock.
    pub fn new(client: kube::Client, clock: Arc<Clock>) -> NodeGroupOperatorOptions {
        NodeGroupOperatorOptions {
            client,
            clock,
            settings: CkeSettings::default(),
        }
    }
}

impl std::fmt::Debug for NodeGroupOperatorOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeGroupOperatorOptions")
            .field("clock", &self.clock)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// How many NodeGroups the operator decided on so far, and what became of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeGroupCounters {
    /// Accepted (`Synced`).
    pub accepted: u64,
    /// Refused for quota (counted when the refusal shows).
    pub rejected: u64,
    /// Deleted upstream after acceptance.
    pub vanished: u64,
    /// Machines launched.
    pub machines: u64,
}

/// What the operator shares with its handle.
#[derive(Default)]
struct Ledger {
    machines: Mutex<BTreeMap<String, MachineRecord>>,
    accepted: AtomicU64,
    rejected: AtomicU64,
    vanished: AtomicU64,
    launched: AtomicU64,
    usage: Mutex<Usage>,
}

impl Ledger {
    fn machines(&self) -> MutexGuard<'_, BTreeMap<String, MachineRecord>> {
        self.machines.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The running fake CKE operator. Dropping it stops it.
pub struct NodeGroupOperator {
    task: OperatorTask<Ledger>,
}

impl NodeGroupOperator {
    /// Starts the operator as a tokio task (call from within a tokio runtime). Subscribe the
    /// physics ([`NodeGroupOperator::subscribe`]) before any NodeGroup is created.
    pub fn start(options: NodeGroupOperatorOptions) -> NodeGroupOperator {
        let clock = options.clock.clone();
        let task = OperatorTask::start("fake CKE NodeGroup operator", clock, |events, ledger| {
            operator::run(options, events, ledger)
        });
        NodeGroupOperator { task }
    }

    /// A receiver of the machines' [`CloudEvent`]s (`PlatformLaunched`, `Terminated`) from
    /// now on: give it to the physics.
    pub fn subscribe(&self) -> broadcast::Receiver<CloudEvent> {
        self.task.subscribe()
    }

    /// The counters so far.
    pub fn counters(&self) -> NodeGroupCounters {
        NodeGroupCounters {
            accepted: self.task.ledger().accepted.load(Ordering::Relaxed),
            rejected: self.task.ledger().rejected.load(Ordering::Relaxed),
            vanished: self.task.ledger().vanished.load(Ordering::Relaxed),
            machines: self.task.ledger().launched.load(Ordering::Relaxed),
        }
    }

    /// What the organisation uses of its quota now (control plane, accepted groups, leaked
    /// reservations), as of the operator's last pass.
    pub fn usage(&self) -> Usage {
        *self
            .task
            .ledger()
            .usage
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Every machine launched so far, ordered by ID, as the physics sees them: `pending`
    /// while booting, `running`, `terminated` once torn down. Instance type = flavor, zone
    /// `par`, provider ID `clevercloud://<nodegroup>` (`clevercloud://<nodegroup>-node<i>`
    /// for i > 0), tags `nodegroup`, `node`, `upstreamId`, price the flavor's list price.
    pub fn instances(&self) -> Vec<SimInstance> {
        platform_instances(self.task.ledger().machines().values(), self.task.elapsed())
    }

    /// Stops the operator and waits for it to end (machines are left as they are).
    pub async fn shutdown(self) {
        self.task.shutdown().await;
    }
}

impl std::fmt::Debug for NodeGroupOperator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeGroupOperator")
            .field("counters", &self.counters())
            .finish_non_exhaustive()
    }
}
