//! A fake Cluster API management cluster, for the `clusterapi` cloud plugin: the
//! `cluster.x-k8s.io` CRDs ([`crd`], [`install_crds`]) on an emulated API server of their own,
//! and the MachineDeployment, MachineSet and Machine controllers ([`CapiControllers`]) that
//! turn replicas into machines whose Nodes register in the *workload* cluster.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use joinery_core::clock::Clock;
//! use joinery_emulator::clusterapi::{CapiControllers, CapiOptions, install_crds};
//! use joinery_emulator::{ApiServer, ApiServerOptions, Physics, PhysicsOptions};
//! let clock = Arc::new(Clock::with_speed(20.0));
//! let management = ApiServer::start(ApiServerOptions { clock: clock.clone(), ..Default::default() }).await?;
//! let workload = ApiServer::start(ApiServerOptions { clock: clock.clone(), ..Default::default() }).await?;
//! install_crds(&management.client()?).await?;
//! let controllers = CapiControllers::start(CapiOptions::new(management.client()?, workload.client()?, clock.clone()));
//! let physics = Physics::start(PhysicsOptions::new(workload.client()?, clock).with_cloud(controllers.subscribe(), std::time::Duration::ZERO));
//! # let _ = physics;
//! # Ok(()) }
//! ```
//!
//! # The CRDs
//!
//! `machinedeployments`, `machinesets` and `machines` in `cluster.x-k8s.io`, namespaced,
//! served as `v1beta1` (stored) and `v1beta2` with one loose schema and no conversion (an
//! object reads back as written, whichever version it is read at). All three have the
//! `status` subresource; MachineDeployments and MachineSets have `scale` (`.spec.replicas`,
//! `.status.replicas`, selector `.status.selector`). Optimistic concurrency is the emulated
//! API server's: an update, or a merge patch, naming a stale `metadata.resourceVersion` is
//! refused with 409 Conflict. The validating and defaulting webhooks of Cluster API are not
//! emulated.
//!
//! # The controllers
//!
//! One task talks to the management cluster and to the workload cluster only through their
//! `kube::Client`s, and keeps time with the shared clock. On every change (or timer, or
//! resync):
//!
//! - **MachineDeployment**: creates one MachineSet `<md>-<5 random characters>` owned by it
//!   (controller ownerReference), labelled with the MD's template labels,
//!   [`DEPLOYMENT_NAME_LABEL`], [`CLUSTER_NAME_LABEL`] and a [`TEMPLATE_HASH_LABEL`] (a hash of
//!   the template), and keeps its `spec.replicas` (absent: 1), template and delete policy
//!   (`spec.strategy.rollingUpdate.deletePolicy`, or v1beta2's `spec.deletion.order`) equal to
//!   the MD's. Template changes are copied, not rolled out: they apply to new Machines. The
//!   selector is the MD's `spec.selector.matchLabels`, or (when empty, as Cluster API's
//!   webhook defaults it) cluster-name and deployment-name. Status: `replicas`,
//!   `updatedReplicas`, `readyReplicas`, `availableReplicas`, `unavailableReplicas`,
//!   `selector` (as text), `observedGeneration`, `phase` (`Running`, `ScalingUp` or
//!   `ScalingDown`, comparing the desired replicas with the ready ones).
//! - **MachineSet**: counts the Machines it controls (those being deleted included, as
//!   Cluster API does). Too few: creates Machines `<ms>-<5 random characters>` with the
//!   template's labels plus [`CLUSTER_NAME_LABEL`], [`DEPLOYMENT_NAME_LABEL`] and
//!   [`SET_NAME_LABEL`], the template's annotations, an ownerReference to the MachineSet, the
//!   finalizer [`FINALIZER`], `spec.clusterName`, the template's `spec` with
//!   `infrastructureRef` and `bootstrap.configRef` pointing at per-Machine objects (kind
//!   without `Template`, named after the Machine; the fake does not create them). Too many:
//!   deletes the surplus by Cluster API's deletion priorities ([`deletion_priority`]: being
//!   deleted 100, [`DELETE_MACHINE_ANNOTATION`] 75, unhealthy 50, then the policy; highest
//!   first, ties by name), chosen among the Machines listed afresh from the API server, so
//!   that a mark written just before the replicas were lowered is never missed for a watch
//!   event still on its way. Status: `replicas`, `fullyLabeledReplicas`, `readyReplicas`,
//!   `availableReplicas`, `selector`, `observedGeneration`.
//! - **Machine**: phase `Pending` at first sight, `Provisioning` (bootstrap ready) until
//!   [`CapiSettings::provision_delay`] has passed, then `Provisioned`: `spec.providerID`
//!   [`provider_id`] (`clusterapi-sim:///<namespace>/<machine>`), infrastructure ready, and
//!   the machine boots — a [`CloudEvent::PlatformLaunched`] whose Node (named after the
//!   Machine, with that providerID) registers after [`CapiSettings::boot_delay`]. The Node's
//!   labels, taints and capacity come from [`node_shape`]: the Machine's propagated labels
//!   ([`is_propagated_label`]), the MD's `capacity.cluster-autoscaler.kubernetes.io/*`
//!   annotations (`labels`, `taints`, `cpu`, `memory`, `ephemeral-disk`, `maxPods`,
//!   `gpu-count` + `gpu-type`; missing or malformed capacity falls back to
//!   [`CapiSettings::default_capacity`]), the template's `spec.taints` and
//!   [`CapiSettings::registration_taints`]; allocatable = capacity; instance type and zone
//!   from the `node.kubernetes.io/instance-type` and `topology.kubernetes.io/zone` labels;
//!   price from [`PRICE_ANNOTATION`]. Once a workload Node with the Machine's providerID
//!   exists: phase `Running`, `status.nodeRef {kind: Node, name, uid}`, `addresses`,
//!   conditions (`BootstrapReady`, `InfrastructureReady`, `NodeHealthy` = the Node's
//!   readiness, `Ready`), the Node annotated with [`MACHINE_ANNOTATION`],
//!   [`CLUSTER_NAME_ANNOTATION`], [`CLUSTER_NAMESPACE_ANNOTATION`], [`OWNER_KIND_ANNOTATION`],
//!   [`OWNER_NAME_ANNOTATION`], and the Machine's propagated labels kept in sync on the Node
//!   (added, changed, and removed again — the keys last synced are in
//!   [`LABELS_FROM_MACHINE_ANNOTATION`]).
//! - **Deletion**: a Machine with a `deletionTimestamp` is in phase `Deleting`; after
//!   [`CapiSettings::teardown_delay`] (draining is not emulated) its machine terminates
//!   ([`CloudEvent::Terminated`]: the physics deletes its Node, and a Node held by a finalizer
//!   such as `karpenter.sh/termination` stays until that is released) and the fake deletes
//!   the Node too, as Cluster API does; the finalizer is removed once no Node of that
//!   providerID is left that is not being deleted. A Machine deleted before it was
//!   provisioned goes after the teardown delay.
//! - **Failures** ([`CapiSettings::never_provision`],
//!   [`CapiSettings::never_provision_probability`]): such a Machine never gets a providerID
//!   (it stays `Provisioning`); with [`CapiSettings::fail_after`], that long after its
//!   creation it gets `status.failureReason: InsufficientResources` and a
//!   `status.failureMessage`, and its phase turns `Failed` (as Cluster API v1beta1 sets it).
//!
//! Random draws (names, delays, which Machines never provision) come from
//! [`CapiSettings::seed`]; the same seed and the same sequence of changes give the same run.

mod controller;
pub mod crd;
mod priority;
mod shape;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use joinery_core::clock::Clock;
use joinery_core::taints::Taint;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, GroupVersionKind, PostParams};
use serde_json::Value;
use tokio::sync::broadcast;

pub use crate::clevercloud::nodegroups::DelayRange;
#[cfg(test)]
use crate::cloud::model::InstanceState;
use crate::cloud::model::{CloudEvent, MachineRecord, SimInstance, platform_instances};
use crate::fake_operator::OperatorTask;

pub use priority::{
    BETTER_DELETE, COULD_DELETE, DeletePolicy, MUST_DELETE, MUST_NOT_DELETE, SHOULD_DELETE,
    deletion_priority, is_healthy, machines_to_delete,
};
pub use shape::{
    NodeShape, is_propagated_label, node_shape, parse_labels, parse_taint, parse_taints,
};

/// The API group.
pub const GROUP: &str = "cluster.x-k8s.io";
/// The version objects are stored at (and the controllers read and write).
pub const STORAGE_VERSION: &str = "v1beta1";
/// Every version served.
pub const SERVED_VERSIONS: [&str; 2] = ["v1beta1", "v1beta2"];
/// The finalizer on every Machine (Cluster API's).
pub const FINALIZER: &str = "machine.cluster.x-k8s.io";
/// The provider-ID scheme of the fake's machines: `clusterapi-sim:///<namespace>/<machine>`.
pub const PROVIDER_ID_PREFIX: &str = "clusterapi-sim:///";
/// Label naming an object's Cluster.
pub const CLUSTER_NAME_LABEL: &str = "cluster.x-k8s.io/cluster-name";
/// Label naming a MachineSet's or Machine's MachineDeployment.
pub const DEPLOYMENT_NAME_LABEL: &str = "cluster.x-k8s.io/deployment-name";
/// Label naming a Machine's MachineSet.
pub const SET_NAME_LABEL: &str = "cluster.x-k8s.io/set-name";
/// Label with a hash of the Machine template a MachineSet was made from.
pub const TEMPLATE_HASH_LABEL: &str = "machine-template-hash";
/// Annotation marking a Machine to delete first on scale-down (any value).
pub const DELETE_MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/delete-machine";
/// Node annotation naming its Machine.
pub const MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/machine";
/// Node annotation naming its Machine's Cluster.
pub const CLUSTER_NAME_ANNOTATION: &str = "cluster.x-k8s.io/cluster-name";
/// Node annotation naming its Machine's namespace.
pub const CLUSTER_NAMESPACE_ANNOTATION: &str = "cluster.x-k8s.io/cluster-namespace";
/// Node annotation with the kind of its Machine's owner (`MachineSet`).
pub const OWNER_KIND_ANNOTATION: &str = "cluster.x-k8s.io/owner-kind";
/// Node annotation with the name of its Machine's owner.
pub const OWNER_NAME_ANNOTATION: &str = "cluster.x-k8s.io/owner-name";
/// Node annotation listing the label keys last synced from its Machine (comma-separated).
pub const LABELS_FROM_MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/labels-from-machine";
/// The label marking MachineDeployments (with an empty value) and Machines Karpenter's
/// Cluster API provider manages.
pub const KARPENTER_MEMBER_LABEL: &str = "node.cluster.x-k8s.io/karpenter-member";
/// Prefix of the scale-from-zero annotations of MachineDeployments.
pub const CAPACITY_ANNOTATION_PREFIX: &str = "capacity.cluster-autoscaler.kubernetes.io/";
/// MachineDeployment annotation with the hourly price of its machines (a proposal upstream,
/// not read by the upstream provider; the fake prices its machines with it).
pub const PRICE_ANNOTATION: &str = "cluster.x-k8s.io/machine-current-price";
/// The `failureReason` of a Machine that never provisions.
pub const FAILURE_REASON: &str = "InsufficientResources";

/// One of the three kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// `MachineDeployment`.
    MachineDeployment,
    /// `MachineSet`.
    MachineSet,
    /// `Machine`.
    Machine,
}

impl Kind {
    /// All three.
    pub const ALL: [Kind; 3] = [Kind::MachineDeployment, Kind::MachineSet, Kind::Machine];

    /// The kind's name.
    pub fn kind(self) -> &'static str {
        match self {
            Kind::MachineDeployment => "MachineDeployment",
            Kind::MachineSet => "MachineSet",
            Kind::Machine => "Machine",
        }
    }

    /// The plural resource name.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::MachineDeployment => "machinedeployments",
            Kind::MachineSet => "machinesets",
            Kind::Machine => "machines",
        }
    }

    /// The short name (`md`, `ms`, `ma`).
    pub fn short_name(self) -> &'static str {
        match self {
            Kind::MachineDeployment => "md",
            Kind::MachineSet => "ms",
            Kind::Machine => "ma",
        }
    }

    /// The resource at the storage version, for `Api::<DynamicObject>::all_with` /
    /// `namespaced_with`.
    pub fn api_resource(self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(GROUP, STORAGE_VERSION, self.kind()),
            self.plural(),
        )
    }
}

/// The provider ID the fake gives a Machine: `clusterapi-sim:///<namespace>/<name>`.
pub fn provider_id(namespace: &str, name: &str) -> String {
    format!("{PROVIDER_ID_PREFIX}{namespace}/{name}")
}

/// The three CRDs as JSON.
pub fn crds() -> Vec<Value> {
    Kind::ALL.into_iter().map(crd::crd).collect()
}

/// Creates the three CRDs in a cluster (already there is fine).
pub async fn install_crds(client: &kube::Client) -> Result<(), kube::Error> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    for crd in crds() {
        let crd: CustomResourceDefinition = serde_json::from_value(crd)
            .expect("the Cluster API CRDs are valid CustomResourceDefinitions");
        match api.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// How the fake management cluster behaves: delays, defaults, faults. Every duration is
/// simulated time; the delays are the fake's choice, of the order of a VM cloud's.
#[derive(Debug, Clone, PartialEq)]
pub struct CapiSettings {
    /// From a Machine's creation to its providerID (the infrastructure provider creating
    /// the server); default 10–20 s.
    pub provision_delay: DelayRange,
    /// From the providerID to the Node registering (the server booting and joining);
    /// default 40–60 s.
    pub boot_delay: DelayRange,
    /// From a Machine's deletion to its machine terminating; default 10–20 s.
    pub teardown_delay: DelayRange,
    /// The delete policy of MachineSets whose MachineDeployment names none; default `Random`.
    pub delete_policy: DeletePolicy,
    /// Machines that never get a providerID: those whose name starts with one of these, or
    /// whose MachineDeployment (label [`DEPLOYMENT_NAME_LABEL`]) is named one of these.
    pub never_provision: BTreeSet<String>,
    /// Chance (0–1) that any Machine never gets a providerID; default 0.
    pub never_provision_probability: f64,
    /// How long after its creation a never-provisioned Machine gets `failureReason` and
    /// `failureMessage`; default `None` (it stays `Provisioning`).
    pub fail_after: Option<Duration>,
    /// Taints every Node registers with besides the MD's, as the bootstrap template's
    /// `nodeRegistration.taints` would give them; default `karpenter.sh/unregistered:NoExecute`
    /// (what Karpenter expects of nodes it launches).
    pub registration_taints: Vec<Taint>,
    /// Capacity of a machine whose MD does not say (`cpu` 2, `memory` 4Gi,
    /// `ephemeral-storage` 20Gi, `pods` 110).
    pub default_capacity: BTreeMap<String, String>,
    /// Seed of every random draw.
    pub seed: u64,
    /// How often everything is re-checked without a change; default 5 s.
    pub resync_interval: Duration,
}

impl Default for CapiSettings {
    fn default() -> Self {
        CapiSettings {
            provision_delay: DelayRange::seconds(10, 20),
            boot_delay: DelayRange::seconds(40, 60),
            teardown_delay: DelayRange::seconds(10, 20),
            delete_policy: DeletePolicy::Random,
            never_provision: BTreeSet::new(),
            never_provision_probability: 0.0,
            fail_after: None,
            registration_taints: vec![Taint::unregistered()],
            default_capacity: [
                ("cpu", "2"),
                ("memory", "4Gi"),
                ("ephemeral-storage", "20Gi"),
                ("pods", "110"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
            seed: 0xCA91_5EED,
            resync_interval: Duration::from_secs(5),
        }
    }
}

/// What the fake Cluster API controllers run against, and how they behave.
#[derive(Clone)]
pub struct CapiOptions {
    /// Client of the management cluster (where the CRDs are installed).
    pub management: kube::Client,
    /// Client of the workload cluster (where the Nodes register).
    pub workload: kube::Client,
    /// The shared clock: sleeps last `clock.to_real(d)`, timestamps come from `clock.now()`.
    pub clock: Arc<Clock>,
    /// Delays, defaults and faults.
    pub settings: CapiSettings,
}

impl CapiOptions {
    /// The default [`CapiSettings`] on these clients and clock.
    pub fn new(management: kube::Client, workload: kube::Client, clock: Arc<Clock>) -> CapiOptions {
        CapiOptions {
            management,
            workload,
            clock,
            settings: CapiSettings::default(),
        }
    }
}

impl std::fmt::Debug for CapiOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapiOptions")
            .field("clock", &self.clock)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// What the controllers did so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CapiCounters {
    /// MachineSets created.
    pub machine_sets_created: u64,
    /// Machines created.
    pub machines_created: u64,
    /// Machines that got a providerID (machines launched).
    pub machines_provisioned: u64,
    /// Machines that got a nodeRef.
    pub machines_running: u64,
    /// Machines that failed (`failureReason` set).
    pub machines_failed: u64,
    /// Machines whose deletion the controllers finished (finalizer removed).
    pub machines_deleted: u64,
}

/// One Machine as the controllers last saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MachineInfo {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its MachineDeployment (label [`DEPLOYMENT_NAME_LABEL`]), if any.
    pub deployment: Option<String>,
    /// Its MachineSet (label [`SET_NAME_LABEL`]), if any.
    pub machine_set: Option<String>,
    /// `spec.providerID`, once provisioned.
    pub provider_id: Option<String>,
    /// `status.phase`.
    pub phase: String,
    /// `status.nodeRef.name`, once running.
    pub node: Option<String>,
    /// Whether it carries [`DELETE_MACHINE_ANNOTATION`].
    pub marked_for_deletion: bool,
}

/// What the controllers share with their handle.
#[derive(Default)]
struct Ledger {
    machines: Mutex<BTreeMap<String, MachineRecord>>,
    infos: Mutex<Vec<MachineInfo>>,
    machine_sets_created: AtomicU64,
    machines_created: AtomicU64,
    machines_provisioned: AtomicU64,
    machines_running: AtomicU64,
    machines_failed: AtomicU64,
    machines_deleted: AtomicU64,
}

impl Ledger {
    fn machines(&self) -> MutexGuard<'_, BTreeMap<String, MachineRecord>> {
        self.machines.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn infos(&self) -> MutexGuard<'_, Vec<MachineInfo>> {
        self.infos.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// The running fake Cluster API controllers. Dropping it stops them.
pub struct CapiControllers {
    task: OperatorTask<Ledger>,
}

impl CapiControllers {
    /// Starts the controllers as a tokio task (call from within a tokio runtime). Install
    /// the CRDs first ([`install_crds`]), and subscribe the physics
    /// ([`CapiControllers::subscribe`]) before any Machine is provisioned.
    pub fn start(options: CapiOptions) -> CapiControllers {
        let clock = options.clock.clone();
        let task = OperatorTask::start("fake Cluster API controllers", clock, |events, ledger| {
            controller::run(options, events, ledger)
        });
        CapiControllers { task }
    }

    /// A receiver of the machines' [`CloudEvent`]s (`PlatformLaunched`, `Terminated`) from
    /// now on: give it to the workload cluster's physics.
    pub fn subscribe(&self) -> broadcast::Receiver<CloudEvent> {
        self.task.subscribe()
    }

    /// The counters so far.
    pub fn counters(&self) -> CapiCounters {
        let l = self.task.ledger();
        CapiCounters {
            machine_sets_created: l.machine_sets_created.load(Ordering::Relaxed),
            machines_created: l.machines_created.load(Ordering::Relaxed),
            machines_provisioned: l.machines_provisioned.load(Ordering::Relaxed),
            machines_running: l.machines_running.load(Ordering::Relaxed),
            machines_failed: l.machines_failed.load(Ordering::Relaxed),
            machines_deleted: l.machines_deleted.load(Ordering::Relaxed),
        }
    }

    /// The Machines that exist, as of the controllers' last pass, by namespace and name.
    pub fn machines(&self) -> Vec<MachineInfo> {
        self.task.ledger().infos().clone()
    }

    /// Every machine launched so far, ordered by ID (`<namespace>/<machine>`), as the physics
    /// sees them: `pending` while booting, `running`, `terminated` once torn down. Provider
    /// ID [`provider_id`], instance type and zone from the Node's labels (empty when the MD
    /// does not say), capacity type `on-demand` unless the labels say
    /// `karpenter.sh/capacity-type`, tags `namespace`, `machine`, `machineSet`,
    /// `machineDeployment`, `cluster`, price from [`PRICE_ANNOTATION`].
    pub fn instances(&self) -> Vec<SimInstance> {
        platform_instances(self.task.ledger().machines().values(), self.task.elapsed())
    }

    /// Stops the controllers and waits for them to end (machines are left as they are).
    pub async fn shutdown(self) {
        self.task.shutdown().await;
    }
}

impl std::fmt::Debug for CapiControllers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CapiControllers")
            .field("counters", &self.counters())
            .finish_non_exhaustive()
    }
}
