//! The Machine controller: a Machine's life from first sight through bootstrap, provisioning,
//! its machine's boot and its Node's registration (or an injected failure), to its teardown and
//! finalizer release on deletion; the Machine's status and the sync of its Node; and what the
//! handle reports. Each Machine's simulated timeline is a [`Tracked`].

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use joinery_core::labels::{ARCH_LABEL, INSTANCE_TYPE_LABEL, OS_LABEL, REGION_LABEL, ZONE_LABEL};
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::{Map, Value, json};

use super::{Controllers, key_of, labels_of, name_of, namespace_of};
use crate::cloud::model::{CloudEvent, InstanceState, NodeRegistration, SimInstance};
use crate::clusterapi::shape::{is_propagated_label, node_shape};
use crate::clusterapi::{
    CLUSTER_NAME_ANNOTATION, CLUSTER_NAME_LABEL, CLUSTER_NAMESPACE_ANNOTATION,
    DEPLOYMENT_NAME_LABEL, FAILURE_REASON, FINALIZER, Kind, LABELS_FROM_MACHINE_ANNOTATION, Ledger,
    MACHINE_ANNOTATION, MachineInfo, MachineRecord, OWNER_KIND_ANNOTATION, OWNER_NAME_ANNOTATION,
    SET_NAME_LABEL, provider_id,
};
use crate::fake_operator;
use crate::physics::cache::Cache;
use crate::physics::{api_code, node_is_ready, time_at};

/// How long after its creation a Machine's bootstrap data is ready (simulated; never later
/// than its provisioning).
const BOOTSTRAP_DELAY: Duration = Duration::from_secs(1);

/// What the controllers know of one Machine (by uid).
#[derive(Debug, Clone)]
pub(super) struct Tracked {
    /// When its bootstrap data is ready.
    bootstrap_at: Duration,
    /// When it gets its providerID (unless it never does).
    provision_at: Duration,
    /// It never gets a providerID.
    never: bool,
    /// When a never-provisioned Machine fails.
    fail_at: Option<Duration>,
    failed: bool,
    /// The ID of its launched machine.
    launched: Option<String>,
    running: bool,
    teardown_at: Option<Duration>,
    terminated: bool,
    released: bool,
}

impl Tracked {
    /// The next moment something is due for this Machine.
    pub(super) fn next_due(&self, provisioned: bool) -> Option<Duration> {
        let bootstrap = Some(self.bootstrap_at);
        let provision = (!provisioned && !self.never).then_some(self.provision_at);
        let fail = self.fail_at.filter(|_| !self.failed);
        let teardown = self.teardown_at.filter(|_| !self.terminated);
        [bootstrap, provision, fail, teardown]
            .into_iter()
            .flatten()
            .min()
    }
}

fn condition(
    kind: &str,
    state: bool,
    reason: &str,
    message: &str,
) -> (String, String, String, String) {
    let status = if state { "True" } else { "False" };
    (
        kind.to_string(),
        status.to_string(),
        if state {
            String::new()
        } else {
            reason.to_string()
        },
        if state {
            String::new()
        } else {
            message.to_string()
        },
    )
}

impl Controllers {
    /// The Node of a providerID, if one has registered.
    fn node_of(&self, provider_id: &str) -> Option<&Node> {
        self.nodes_seen
            .iter()
            .find(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id))
    }

    pub(super) async fn reconcile_machines(&mut self) {
        let now = self.now();
        let machines: Vec<DynamicObject> = self.machines.iter().cloned().collect();
        let (gone, fresh) = fake_operator::sort_out(&mut self.tracked, &machines);
        for tracked in gone {
            self.forget(tracked);
        }
        // First sight in creation order, so that random draws are taken in it.
        for machine in &fresh {
            self.see(machine, now);
        }
        for machine in machines {
            let Some(uid) = machine.metadata.uid.clone() else {
                continue;
            };
            let Some(mut tracked) = self.tracked.remove(&uid) else {
                continue;
            };
            if let Err(error) = self.reconcile_machine(&machine, &mut tracked, now).await {
                tracing::debug!(machine = %key_of(&machine), %error, "reconciling a Machine failed; retrying on the next pass");
            }
            self.tracked.insert(uid, tracked);
        }
    }

    /// A Machine seen for the first time.
    fn see(&mut self, machine: &DynamicObject, now: Duration) {
        let name = name_of(machine);
        let deployment = labels_of(machine)
            .get(DEPLOYMENT_NAME_LABEL)
            .cloned()
            .unwrap_or_default();
        let provision = self.settings.provision_delay.pick(&mut self.rng);
        let listed = self
            .settings
            .never_provision
            .iter()
            .any(|p| name.starts_with(p.as_str()) || deployment == *p);
        let drawn = self.settings.never_provision_probability > 0.0
            && crate::random::next_unit(&mut self.rng) < self.settings.never_provision_probability;
        let never = listed || drawn;
        if never {
            tracing::info!(machine = %key_of(machine), "this Machine will never be provisioned (injected failure)");
        }
        let tracked = Tracked {
            bootstrap_at: now + BOOTSTRAP_DELAY.min(provision),
            provision_at: now + provision,
            never,
            fail_at: self
                .settings
                .fail_after
                .filter(|_| never)
                .map(|after| now + after),
            failed: false,
            launched: None,
            running: false,
            teardown_at: None,
            terminated: false,
            released: false,
        };
        self.tracked
            .insert(machine.metadata.uid.clone().unwrap_or_default(), tracked);
    }

    /// A Machine gone from the API server: a machine it still had is terminated.
    pub(super) fn forget(&mut self, mut tracked: Tracked) {
        if !tracked.terminated {
            self.terminate(&mut tracked);
        }
    }

    /// Terminates the Machine's launched machine, if it has one (the physics deletes its Node).
    fn terminate(&mut self, tracked: &mut Tracked) {
        tracked.terminated = true;
        let Some(id) = tracked.launched.clone() else {
            return;
        };
        let instance = {
            let mut machines = self.ledger.machines();
            let Some(record) = machines.get_mut(&id) else {
                return;
            };
            record.terminated = true;
            let mut instance = record.instance.clone();
            instance.state = InstanceState::Terminated;
            instance
        };
        tracing::info!(machine = %id, "machine terminated");
        let _ = self.events.send(CloudEvent::Terminated {
            instance,
            at: self.clock.now(),
        });
    }

    /// The annotations of a Machine's MachineDeployment (or, without one, its MachineSet's).
    fn shape_annotations(&self, machine: &DynamicObject) -> BTreeMap<String, String> {
        let namespace = namespace_of(machine);
        let labels = labels_of(machine);
        let by_label = |mirror: &Cache<DynamicObject>, label: &str| {
            labels
                .get(label)
                .and_then(|name| mirror.get(&namespace, name))
                .and_then(|o| o.metadata.annotations.clone())
        };
        by_label(&self.deployments, DEPLOYMENT_NAME_LABEL)
            .or_else(|| by_label(&self.sets, SET_NAME_LABEL))
            .unwrap_or_default()
    }

    /// The machine of a provisioned Machine boots; its Node registers after the boot delay.
    fn launch(&mut self, machine: &DynamicObject, tracked: &mut Tracked, provider_id: &str) {
        let namespace = namespace_of(machine);
        let name = name_of(machine);
        let labels = labels_of(machine);
        let annotations = self.shape_annotations(machine);
        let template_taints = machine
            .data
            .pointer("/spec/taints")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let shape = node_shape(
            &annotations,
            &labels,
            &template_taints,
            &self.settings.registration_taints,
            &self.settings.default_capacity,
        );
        for problem in &shape.problems {
            tracing::warn!(machine = %name, %namespace, %problem, "an annotation of the MachineDeployment cannot be used; the machine boots with a default");
        }
        let boot = self.settings.boot_delay.pick(&mut self.rng);
        let label = |key: &str| shape.labels.get(key).cloned();
        let id = format!("{namespace}/{name}");
        let mut instance_labels = BTreeMap::new();
        for key in [ARCH_LABEL, OS_LABEL, REGION_LABEL] {
            if let Some(value) = label(key) {
                instance_labels.insert(key.to_string(), value);
            }
        }
        let tags = BTreeMap::from([
            ("namespace".to_string(), namespace.clone()),
            ("machine".to_string(), name.clone()),
            (
                "machineSet".to_string(),
                labels.get(SET_NAME_LABEL).cloned().unwrap_or_default(),
            ),
            (
                "machineDeployment".to_string(),
                labels
                    .get(DEPLOYMENT_NAME_LABEL)
                    .cloned()
                    .unwrap_or_default(),
            ),
            (
                "cluster".to_string(),
                labels.get(CLUSTER_NAME_LABEL).cloned().unwrap_or_default(),
            ),
        ]);
        let instance = SimInstance {
            id: id.clone(),
            provider_id: provider_id.to_string(),
            instance_type: label(INSTANCE_TYPE_LABEL).unwrap_or_default(),
            zone: label(ZONE_LABEL).unwrap_or_default(),
            capacity_type: label("karpenter.sh/capacity-type")
                .unwrap_or_else(|| "on-demand".to_string()),
            user_data: String::new(),
            tags,
            capacity: shape.capacity.clone(),
            allocatable: shape.capacity.clone(),
            labels: instance_labels,
            price_per_hour: shape.price_per_hour,
            state: InstanceState::Pending,
            created_at: joinery_core::time::rfc3339(self.clock.now()),
        };
        let registration = NodeRegistration {
            node_name: name.clone(),
            labels: shape.labels,
            taints: shape.taints,
            provider_id: Some(provider_id.to_string()),
            boot_delay: Some(boot),
        };
        self.ledger.machines().insert(
            id.clone(),
            MachineRecord {
                instance: instance.clone(),
                booted_at: self.now() + boot,
                terminated: false,
            },
        );
        Ledger::bump(&self.ledger.machines_provisioned);
        tracked.launched = Some(id);
        tracing::info!(machine = %name, %namespace, %provider_id, boot = ?boot, "Machine provisioned; its machine boots");
        let _ = self.events.send(CloudEvent::PlatformLaunched {
            instance,
            registration,
        });
    }

    async fn reconcile_machine(
        &mut self,
        machine: &DynamicObject,
        tracked: &mut Tracked,
        now: Duration,
    ) -> Result<(), kube::Error> {
        if tracked.released {
            return Ok(());
        }
        let namespace = namespace_of(machine);
        let name = name_of(machine);
        let api = self.api(Kind::Machine, &namespace);
        let deleting = machine.metadata.deletion_timestamp.is_some();
        let mut machine = machine.clone();
        if !deleting
            && !machine
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == FINALIZER)
        {
            let Some(written) = fake_operator::add_finalizer(&api, &machine, FINALIZER).await?
            else {
                // Changed meanwhile (or gone): the next pass sees the news.
                return Ok(());
            };
            self.machines.upsert(written.clone());
            machine = written;
        }
        let mut provider = machine
            .data
            .pointer("/spec/providerID")
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .map(String::from);
        if !deleting && provider.is_none() && !tracked.never && now >= tracked.provision_at {
            let id = provider_id(&namespace, &name);
            match api
                .patch(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"spec": {"providerID": id}})),
                )
                .await
            {
                Ok(written) => {
                    self.machines.upsert(written.clone());
                    machine = written;
                    self.launch(&machine, tracked, &id);
                    provider = Some(id);
                }
                Err(error) if api_code(&error) == Some(404) => return Ok(()),
                Err(error) => return Err(error),
            }
        }
        if tracked.never && !tracked.failed && tracked.fail_at.is_some_and(|at| at <= now) {
            tracked.failed = true;
            Ledger::bump(&self.ledger.machines_failed);
            tracing::info!(machine = %name, %namespace, "Machine failed (injected): no server could be created");
        }
        let node = provider.as_deref().and_then(|p| self.node_of(p)).cloned();
        if let Some(node) = &node
            && !deleting
        {
            self.sync_node(&machine, node).await?;
            if !tracked.running {
                tracked.running = true;
                Ledger::bump(&self.ledger.machines_running);
                tracing::info!(machine = %name, %namespace, node = ?node.metadata.name, "Machine running: its Node registered");
            }
        }
        if deleting {
            let at = match tracked.teardown_at {
                Some(at) => at,
                None => *tracked
                    .teardown_at
                    .insert(now + self.settings.teardown_delay.pick(&mut self.rng)),
            };
            if at <= now {
                if !tracked.terminated {
                    self.terminate(tracked);
                    // Cluster API deletes the Node itself once the infrastructure is gone.
                    if let Some(node_name) = node.as_ref().and_then(|n| n.metadata.name.clone()) {
                        match self
                            .nodes
                            .delete(&node_name, &DeleteParams::background())
                            .await
                        {
                            Ok(either) => match either.left() {
                                Some(written) => self.nodes_seen.upsert(written),
                                None => {
                                    self.nodes_seen.forget("", &node_name);
                                }
                            },
                            Err(error) if api_code(&error) == Some(404) => {}
                            Err(error) => return Err(error),
                        }
                    }
                }
                let blocked = provider.as_deref().is_some_and(|p| {
                    self.nodes_seen.iter().any(|n| {
                        n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(p)
                            && n.metadata.deletion_timestamp.is_none()
                    })
                });
                if !blocked {
                    self.release(&machine, tracked).await?;
                    return Ok(());
                }
            }
        }
        let status = self.machine_status(&machine, tracked, provider.as_deref(), node.as_ref());
        self.write_status(Kind::Machine, &machine, status).await
    }

    /// Removes the finalizer of a Machine whose machine is gone.
    async fn release(
        &mut self,
        machine: &DynamicObject,
        tracked: &mut Tracked,
    ) -> Result<(), kube::Error> {
        let name = name_of(machine);
        let namespace = namespace_of(machine);
        let api = self.api(Kind::Machine, &namespace);
        match fake_operator::remove_finalizer(&api, &name, FINALIZER).await {
            Ok(true) => {}
            Ok(false) => {
                tracked.released = true;
                return Ok(());
            }
            // Changed meanwhile: try again on the next pass.
            Err(error) if api_code(&error) == Some(409) => return Ok(()),
            Err(error) => return Err(error),
        }
        tracked.released = true;
        Ledger::bump(&self.ledger.machines_deleted);
        tracing::info!(machine = %name, %namespace, "Machine deleted: its machine is gone");
        Ok(())
    }

    /// Annotates a Machine's Node and keeps its propagated labels in sync.
    async fn sync_node(&mut self, machine: &DynamicObject, node: &Node) -> Result<(), kube::Error> {
        let node_name = node.metadata.name.clone().unwrap_or_default();
        let node_labels = node.metadata.labels.clone().unwrap_or_default();
        let node_annotations = node.metadata.annotations.clone().unwrap_or_default();
        let owner = machine
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true));
        let mut wanted_annotations: BTreeMap<&str, String> = BTreeMap::from([
            (MACHINE_ANNOTATION, name_of(machine)),
            (
                CLUSTER_NAME_ANNOTATION,
                machine
                    .data
                    .pointer("/spec/clusterName")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            ),
            (CLUSTER_NAMESPACE_ANNOTATION, namespace_of(machine)),
        ]);
        if let Some(owner) = owner {
            wanted_annotations.insert(OWNER_KIND_ANNOTATION, owner.kind.clone());
            wanted_annotations.insert(OWNER_NAME_ANNOTATION, owner.name.clone());
        }
        let propagated: BTreeMap<String, String> = labels_of(machine)
            .into_iter()
            .filter(|(k, _)| is_propagated_label(k))
            .collect();
        let synced_keys = propagated.keys().cloned().collect::<Vec<_>>().join(",");
        wanted_annotations.insert(LABELS_FROM_MACHINE_ANNOTATION, synced_keys);
        let previous: BTreeSet<String> = node_annotations
            .get(LABELS_FROM_MACHINE_ANNOTATION)
            .map(|v| {
                v.split(',')
                    .filter(|k| !k.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        let mut labels = Map::new();
        for (key, value) in &propagated {
            if node_labels.get(key) != Some(value) {
                labels.insert(key.clone(), json!(value));
            }
        }
        for key in previous
            .iter()
            .filter(|k| !propagated.contains_key(*k) && node_labels.contains_key(*k))
        {
            labels.insert(key.clone(), Value::Null);
        }
        let mut annotations = Map::new();
        for (key, value) in &wanted_annotations {
            if node_annotations.get(*key) != Some(value) {
                annotations.insert(key.to_string(), json!(value));
            }
        }
        if labels.is_empty() && annotations.is_empty() {
            return Ok(());
        }
        let patch = json!({"metadata": {"labels": labels, "annotations": annotations}});
        match self
            .nodes
            .patch(&node_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(written) => {
                tracing::debug!(node = %node_name, machine = %name_of(machine), "Node annotated and labelled from its Machine");
                self.nodes_seen.upsert(written);
                Ok(())
            }
            Err(error) if api_code(&error) == Some(404) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// The status a Machine should show (the fields the controllers own).
    fn machine_status(
        &self,
        machine: &DynamicObject,
        tracked: &Tracked,
        provider: Option<&str>,
        node: Option<&Node>,
    ) -> Map<String, Value> {
        let now = self.now();
        let previous = machine.data.get("status");
        let deleting = machine.metadata.deletion_timestamp.is_some();
        let bootstrap_ready = now >= tracked.bootstrap_at || provider.is_some();
        let infrastructure_ready = provider.is_some();
        let node_ref = match node {
            Some(node) => Some(
                json!({"apiVersion": "v1", "kind": "Node", "name": node.metadata.name, "uid": node.metadata.uid}),
            ),
            None => previous
                .and_then(|s| s.get("nodeRef"))
                .filter(|r| !r.is_null())
                .cloned(),
        };
        let mut status = Map::new();
        status.insert("bootstrapReady".into(), json!(bootstrap_ready));
        status.insert("infrastructureReady".into(), json!(infrastructure_ready));
        status.insert(
            "observedGeneration".into(),
            json!(machine.metadata.generation.unwrap_or(1)),
        );
        let mut phase = "Pending";
        if bootstrap_ready && !infrastructure_ready {
            phase = "Provisioning";
        }
        if infrastructure_ready {
            phase = "Provisioned";
        }
        if node_ref.is_some() && infrastructure_ready {
            phase = "Running";
        }
        if tracked.failed {
            phase = "Failed";
            status.insert("failureReason".into(), json!(FAILURE_REASON));
            status.insert(
                "failureMessage".into(),
                json!(format!("Failure detected from referenced resource {}: no server could be created for this machine (injected by the simulator)", machine_infrastructure(machine))),
            );
        }
        if deleting {
            phase = "Deleting";
        }
        status.insert("phase".into(), json!(phase));
        let timestamp = serde_json::to_value(time_at(self.clock.now())).unwrap_or(Value::Null);
        let same_phase = previous.and_then(|s| s.get("phase")) == Some(&json!(phase));
        let last_updated = previous
            .and_then(|s| s.get("lastUpdated"))
            .filter(|_| same_phase)
            .cloned()
            .unwrap_or_else(|| timestamp.clone());
        status.insert("lastUpdated".into(), last_updated);
        let node_ready = node.is_some_and(node_is_ready);
        let mut conditions = vec![
            condition(
                "BootstrapReady",
                bootstrap_ready,
                "WaitingForDataSecret",
                "Waiting for the bootstrap data secret",
            ),
            condition(
                "InfrastructureReady",
                infrastructure_ready,
                if tracked.failed {
                    "InstanceCreateFailed"
                } else {
                    "WaitingForInfrastructure"
                },
                "Waiting for the machine to be provisioned",
            ),
        ];
        if let Some(reference) = &node_ref {
            let healthy = node.is_some() && node_ready;
            let (reason, message) = if node.is_none() {
                ("NodeNotFound", "The Node is gone")
            } else {
                ("NodeConditionsFailed", "The Node is not Ready")
            };
            conditions.push(condition("NodeHealthy", healthy, reason, message));
            status.insert("nodeRef".into(), reference.clone());
        } else {
            conditions.push(condition(
                "NodeHealthy",
                false,
                "WaitingForNodeRef",
                "Waiting for a Node with the Machine's providerID",
            ));
        }
        let ready = bootstrap_ready && infrastructure_ready && node_ready && !deleting;
        let reason = if deleting { "Deleting" } else { "NotReady" };
        conditions.insert(
            0,
            condition("Ready", ready, reason, "The Machine is not ready"),
        );
        let earlier =
            |kind: &str, state: &str| fake_operator::earlier_transition(previous, kind, state);
        let conditions: Vec<Value> = conditions
            .into_iter()
            .map(|(kind, state, reason, message)| {
                let mut c = json!({"type": kind, "status": state, "lastTransitionTime": earlier(&kind, &state).unwrap_or_else(|| timestamp.clone())});
                if !reason.is_empty() {
                    c["reason"] = json!(reason);
                    c["message"] = json!(message);
                    c["severity"] = json!("Info");
                }
                c
            })
            .collect();
        status.insert("conditions".into(), Value::Array(conditions));
        if let Some(node) = node {
            let addresses: Vec<Value> = node
                .status
                .as_ref()
                .and_then(|s| s.addresses.as_ref())
                .into_iter()
                .flatten()
                .map(|a| json!({"type": a.type_, "address": a.address}))
                .collect();
            status.insert("addresses".into(), Value::Array(addresses));
            if let Some(info) = node.status.as_ref().and_then(|s| s.node_info.as_ref()) {
                status.insert(
                    "nodeInfo".into(),
                    serde_json::to_value(info).unwrap_or(Value::Null),
                );
            }
        }
        status
    }

    /// Shares what the handle reports.
    pub(super) fn publish(&self) {
        let infos: Vec<MachineInfo> = self
            .machines
            .iter()
            .map(|m| {
                let labels = labels_of(m);
                MachineInfo {
                    namespace: namespace_of(m),
                    name: name_of(m),
                    deployment: labels.get(DEPLOYMENT_NAME_LABEL).cloned(),
                    machine_set: labels.get(SET_NAME_LABEL).cloned(),
                    provider_id: m
                        .data
                        .pointer("/spec/providerID")
                        .and_then(Value::as_str)
                        .map(String::from),
                    phase: m
                        .data
                        .pointer("/status/phase")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    node: m
                        .data
                        .pointer("/status/nodeRef/name")
                        .and_then(Value::as_str)
                        .map(String::from),
                    marked_for_deletion: m.metadata.annotations.as_ref().is_some_and(|a| {
                        a.contains_key(crate::clusterapi::DELETE_MACHINE_ANNOTATION)
                    }),
                }
            })
            .collect();
        *self.ledger.infos() = infos;
    }
}

/// `<Kind>/<name>` of a Machine's infrastructure object, for failure messages.
fn machine_infrastructure(machine: &DynamicObject) -> String {
    let kind = machine
        .data
        .pointer("/spec/infrastructureRef/kind")
        .and_then(Value::as_str)
        .unwrap_or("Machine");
    format!("{kind}/{}", name_of(machine))
}
