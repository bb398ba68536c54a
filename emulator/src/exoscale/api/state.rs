//! What the fake stores ([`World`]: instances, operations, the catalog) and what the request
//! handlers share ([`ExoState`]): time passing (instances booting, operations ending) happens
//! when the world is locked.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use joinery_core::clock::Clock;
use joinery_core::resources::Resources;
use serde_json::Value;
use tokio::sync::broadcast;

use super::json::operation_json;
use crate::cloud::catalog::OverheadSpec;
use crate::cloud::model::{CloudEvent, InstanceState, SimInstance};
use crate::exoscale::catalog::format_uuid;
use crate::exoscale::faults::ExoFaults;
use crate::exoscale::model::{
    ExoAntiAffinityGroup, ExoInstance, ExoInstanceState, ExoInstanceType, ExoOperation,
    ExoPrivateNetwork, ExoSecurityGroup, ExoSshKey, ExoTemplate, GIB, OperationState,
    PROVIDER_ID_PREFIX,
};

/// What finishing an operation does.
#[derive(Debug, Clone)]
pub(crate) enum Completion {
    /// Ends in success.
    Succeed,
    /// Ends in failure with this reason and message.
    Fail { reason: String, message: String },
    /// Ends in failure and leaves the instance in state `error`.
    FailInstance {
        instance: String,
        reason: String,
        message: String,
    },
    /// Removes the instance (a delete), then succeeds.
    RemoveInstance(String),
}

/// Everything the fake stores.
#[derive(Default)]
pub(crate) struct World {
    pub(crate) instance_types: Vec<ExoInstanceType>,
    pub(crate) templates: Vec<ExoTemplate>,
    pub(crate) security_groups: Vec<ExoSecurityGroup>,
    pub(crate) private_networks: Vec<ExoPrivateNetwork>,
    pub(crate) anti_affinity_groups: Vec<ExoAntiAffinityGroup>,
    pub(crate) ssh_keys: Vec<ExoSshKey>,
    pub(crate) instances: BTreeMap<String, ExoInstance>,
    pub(crate) operations: BTreeMap<String, (ExoOperation, Completion)>,
    pub(crate) rng: u64,
    pub(crate) addresses: u32,
    /// Instances ever created (including ones deleted since, and failed creates that made one).
    pub(crate) created: usize,
}

impl World {
    /// A fresh random UUID (seeded, so runs repeat).
    pub(crate) fn uuid(&mut self) -> String {
        let mut bytes = [0u8; 16];
        for half in bytes.chunks_mut(8) {
            half.copy_from_slice(&crate::random::next_u64(&mut self.rng).to_be_bytes());
        }
        format_uuid(bytes)
    }

    pub(crate) fn next_address(&mut self) -> u32 {
        self.addresses += 1;
        self.addresses
    }

    pub(crate) fn type_by_id(&self, id: &str) -> Option<&ExoInstanceType> {
        self.instance_types.iter().find(|t| t.id == id)
    }

    pub(super) fn finish(&mut self, id: &str) {
        let Some((operation, completion)) = self.operations.get_mut(id) else {
            return;
        };
        if operation.state != OperationState::Pending {
            return;
        }
        let completion = completion.clone();
        match &completion {
            Completion::Succeed => operation.state = OperationState::Success,
            Completion::Fail { reason, message } => {
                operation.state = OperationState::Failure;
                operation.reason = Some(reason.clone());
                operation.message = Some(message.clone());
            }
            Completion::FailInstance {
                instance,
                reason,
                message,
            } => {
                operation.state = OperationState::Failure;
                operation.reason = Some(reason.clone());
                operation.message = Some(message.clone());
                if let Some(instance) = self.instances.get_mut(instance)
                    && instance.state != ExoInstanceState::Destroying
                {
                    instance.state = ExoInstanceState::Error;
                }
            }
            Completion::RemoveInstance(instance) => {
                operation.state = OperationState::Success;
                self.forget_instance(instance);
            }
        }
    }

    /// Removes an instance and every reference to it.
    fn forget_instance(&mut self, id: &str) {
        self.instances.remove(id);
        for group in &mut self.anti_affinity_groups {
            group.instances.retain(|i| i != id);
        }
        for network in &mut self.private_networks {
            network.leases.retain(|l| l.instance_id != id);
        }
    }

    pub(super) fn operation(
        &mut self,
        zone: &str,
        command: &str,
        reference: Option<&str>,
        now: SystemTime,
        completion: Completion,
    ) -> Value {
        let id = self.uuid();
        let operation = ExoOperation {
            id: id.clone(),
            zone: zone.to_string(),
            state: OperationState::Pending,
            reason: None,
            message: None,
            reference_id: reference.map(str::to_string),
            command: command.to_string(),
            polls: 0,
            started_at: now,
        };
        let body = operation_json(&operation);
        self.operations.insert(id, (operation, completion));
        body
    }
}

/// Everything the request handlers share.
pub(crate) struct ExoState {
    pub(crate) zones: Vec<String>,
    pub(crate) credentials: BTreeMap<String, String>,
    pub(crate) clock: Arc<Clock>,
    pub(crate) boot_delay: Duration,
    pub(crate) operation_polls: u32,
    pub(crate) operation_deadline: Duration,
    pub(crate) anti_affinity_ceiling: usize,
    pub(crate) overhead: OverheadSpec,
    pub(crate) faults: ExoFaults,
    pub(crate) world: Mutex<World>,
    pub(crate) events: broadcast::Sender<CloudEvent>,
    pub(crate) base_url: String,
    /// Where every exchange is written, when [`crate::exoscale::ExoFakeOptions::journal`] is set.
    pub(crate) journal: Option<Mutex<std::fs::File>>,
}

impl ExoState {
    /// Locks the world after letting time pass: booted instances run, overdue operations end.
    pub(crate) fn world(&self) -> MutexGuard<'_, World> {
        let mut world = self
            .world
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = self.clock.now();
        for instance in world.instances.values_mut() {
            if instance.state == ExoInstanceState::Starting
                && instance.created_at + self.boot_delay <= now
            {
                instance.state = ExoInstanceState::Running;
            }
        }
        let overdue: Vec<String> = world
            .operations
            .values()
            .filter(|(op, _)| {
                op.state == OperationState::Pending
                    && op.started_at + self.operation_deadline <= now
            })
            .map(|(op, _)| op.id.clone())
            .collect();
        for id in overdue {
            world.finish(&id);
        }
        world
    }

    pub(crate) fn publish(&self, event: CloudEvent) {
        // Nobody listening is fine.
        let _ = self.events.send(event);
    }

    /// The instance as the cluster physics sees it (capacity from its type and disk).
    pub(crate) fn sim_instance(
        &self,
        world: &World,
        instance: &ExoInstance,
        live: bool,
    ) -> SimInstance {
        let kind = world.type_by_id(&instance.instance_type_id);
        let mut capacity = Resources::new();
        capacity.set("cpu", u64::from(kind.map_or(0, |t| t.cpus)) * 1000);
        capacity.set("memory", kind.map_or(0, |t| t.memory));
        capacity.set("ephemeral-storage", instance.disk_size * GIB);
        capacity.set("pods", 110);
        if let Some(gpus) = kind.map(|t| t.gpus).filter(|g| *g > 0) {
            capacity.set("nvidia.com/gpu", u64::from(gpus));
        }
        let overhead = [
            &self.overhead.kube_reserved,
            &self.overhead.system_reserved,
            &self.overhead.eviction_threshold,
        ]
        .into_iter()
        .filter_map(|map| Resources::from_quantities(map.iter()).ok())
        .fold(Resources::new(), |sum, r| &sum + &r);
        let allocatable = capacity.saturating_sub(&overhead);
        let mut labels = BTreeMap::new();
        labels.insert("kubernetes.io/arch".to_string(), "amd64".to_string());
        labels.insert("kubernetes.io/os".to_string(), "linux".to_string());
        labels.insert(
            "node.kubernetes.io/instance-type".to_string(),
            instance.instance_type.clone(),
        );
        labels.insert(
            "topology.kubernetes.io/region".to_string(),
            instance.zone.clone(),
        );
        if let Some(t) = kind {
            labels.insert(
                "karpenter.k8s.exoscale/instance-family".into(),
                t.family.clone(),
            );
            labels.insert(
                "karpenter.k8s.exoscale/instance-size".into(),
                t.size.clone(),
            );
            labels.insert(
                "karpenter.k8s.exoscale/instance-cpu".into(),
                t.cpus.to_string(),
            );
            labels.insert(
                "karpenter.k8s.exoscale/instance-memory".into(),
                (t.memory >> 20).to_string(),
            );
            labels.insert(
                "karpenter.k8s.exoscale/instance-gpu-count".into(),
                t.gpus.to_string(),
            );
        }
        let user_data = instance
            .user_data
            .as_deref()
            .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
            .map(|raw| String::from_utf8_lossy(&raw).into_owned())
            .unwrap_or_default();
        SimInstance {
            id: instance.id.clone(),
            provider_id: format!("{PROVIDER_ID_PREFIX}{}", instance.id),
            instance_type: instance.instance_type.clone(),
            zone: instance.zone.clone(),
            capacity_type: "on-demand".to_string(),
            user_data,
            tags: instance.labels.clone(),
            capacity: capacity.to_quantities(),
            allocatable: allocatable.to_quantities(),
            labels,
            price_per_hour: 0.0,
            state: match (live, instance.state) {
                (false, _) => InstanceState::Terminated,
                (true, ExoInstanceState::Running) => InstanceState::Running,
                _ => InstanceState::Pending,
            },
            created_at: joinery_core::time::rfc3339(instance.created_at),
        }
    }
}
