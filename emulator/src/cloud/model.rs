//! The simulated cloud's data model, shared by its HTTP API, the `simcloud` plugin's wire
//! format and the cluster physics (whose kubelets boot the instances it launches).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use joinery_core::taints::Taint;
use serde::{Deserialize, Serialize};

/// The provider-ID scheme of simulated instances: `simcloud://<instance id>`.
pub const PROVIDER_ID_PREFIX: &str = "simcloud://";

/// Lifecycle of a simulated instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum InstanceState {
    /// Created; the machine is booting (its kubelet has not started yet).
    Pending,
    /// Booted.
    Running,
    /// Deleted; kept in listings for a short while like real clouds do.
    Terminated,
}

/// One simulated instance, as the cloud API returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimInstance {
    /// Instance ID, e.g. `i-00000001`.
    pub id: String,
    /// `simcloud://<id>`.
    pub provider_id: String,
    /// Instance-type name, e.g. `c-4x-amd64-linux` (empty when the platform does not say:
    /// the Node then gets no `node.kubernetes.io/instance-type` label from the kubelet).
    pub instance_type: String,
    /// Zone, e.g. `test-zone-a` (empty: no `topology.kubernetes.io/zone` label).
    pub zone: String,
    /// `on-demand` or `spot`.
    pub capacity_type: String,
    /// The userData the instance was created with (its kubelet runs it at boot).
    pub user_data: String,
    /// Free-form tags (the host tags instances with cluster and NodeClaim names).
    pub tags: BTreeMap<String, String>,
    /// Machine capacity in Kubernetes quantity notation (`cpu`, `memory`, `pods`,
    /// `ephemeral-storage`, extended resources).
    pub capacity: BTreeMap<String, String>,
    /// What the kubelet reports as allocatable: capacity minus the instance type's overhead
    /// (kube-reserved, system-reserved, eviction threshold).
    pub allocatable: BTreeMap<String, String>,
    /// Labels the instance type carries (architecture, OS, family, size…).
    pub labels: BTreeMap<String, String>,
    /// Price of the offering it was launched on, per hour.
    pub price_per_hour: f64,
    /// Current state.
    pub state: InstanceState,
    /// RFC 3339 creation time (simulated clock).
    pub created_at: String,
}

impl SimInstance {
    /// The instance ID from a provider ID, if it has the simcloud scheme.
    pub fn id_from_provider_id(provider_id: &str) -> Option<&str> {
        provider_id
            .strip_prefix(PROVIDER_ID_PREFIX)
            .filter(|id| !id.is_empty())
    }
}

/// The Node a managed platform registers for one of its machines by itself: the machine
/// carries no userData for its kubelet to read (a managed Kubernetes service such as Clever
/// Cloud's joins its nodes without any bootstrap from the autoscaler).
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRegistration {
    /// The Node's name.
    pub node_name: String,
    /// Labels the Node registers with; the kubelet's own (hostname, architecture, OS,
    /// instance type, zone, region from the instance) are added on top and win.
    pub labels: BTreeMap<String, String>,
    /// Taints the Node registers with.
    pub taints: Vec<Taint>,
    /// `spec.providerID`; `None` leaves it empty (for someone else to set later).
    pub provider_id: Option<String>,
    /// How long this machine takes to boot before its Node registers (simulated); `None`
    /// uses the physics' boot delay.
    pub boot_delay: Option<Duration>,
}

/// What happened in the simulated cloud; the physics subscribes to boot and stop kubelets.
#[derive(Debug, Clone)]
pub enum CloudEvent {
    /// An instance was created (state `pending`); its kubelet should boot after the boot delay.
    Launched(SimInstance),
    /// A managed platform's machine was created: its kubelet registers `registration`'s Node
    /// after the boot delay, without reading the instance's userData. Hang and termination
    /// work as for [`CloudEvent::Launched`] instances.
    PlatformLaunched {
        /// The machine.
        instance: SimInstance,
        /// The Node it registers.
        registration: NodeRegistration,
    },
    /// The machine hangs (a kernel panic, a network partition): the cloud still runs it, but
    /// its kubelet is gone — pods on it are never confirmed deleted, and its Node turns
    /// `Ready=Unknown` once the node controller's grace period has passed.
    Hung(SimInstance),
    /// The machine was rebooted through its cloud's API: a kubelet that died or reported a
    /// fault starts afresh (its Node turns `Ready` again after the boot), unless the machine
    /// has a hardware fault (see [`crate::physics::NodeFault`]), which a reboot does not clear.
    Rebooted(SimInstance),
    /// An instance was deleted; its Node must go away.
    Terminated {
        /// The instance.
        instance: SimInstance,
        /// When (simulated clock).
        at: SystemTime,
    },
}

/// A machine a platform fake (the fake CKE operator, the fake Cluster API controllers)
/// launched, as it records it for its reports.
#[derive(Debug, Clone)]
pub(crate) struct MachineRecord {
    /// The instance, as the physics boots it.
    pub(crate) instance: SimInstance,
    /// Simulated time (since the clock's origin) its boot ends.
    pub(crate) booted_at: std::time::Duration,
    /// Torn down.
    pub(crate) terminated: bool,
}

/// The recorded machines as instances at simulated time `now`: `pending` while booting,
/// `running`, `terminated` once torn down.
pub(crate) fn platform_instances<'a>(
    records: impl IntoIterator<Item = &'a MachineRecord>,
    now: std::time::Duration,
) -> Vec<SimInstance> {
    records
        .into_iter()
        .map(|m| {
            let mut instance = m.instance.clone();
            instance.state = if m.terminated {
                InstanceState::Terminated
            } else if now >= m.booted_at {
                InstanceState::Running
            } else {
                InstanceState::Pending
            };
            instance
        })
        .collect()
}
