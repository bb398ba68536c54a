//! The fake CKE operator's loop: watches NodeGroups and their Nodes, and on every change (or
//! timer, or resync) makes one pass over every NodeGroup — finalizer, quota decision,
//! machines, vanishing, teardown, status. The behaviour is described in the module above.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use joinery_core::clock::Clock;
use joinery_core::labels::{ARCH_LABEL, OS_LABEL, REGION_LABEL};
use joinery_core::taints::{Taint, TaintEffect};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::quota::{self, Usage};
use super::{
    CkeSettings, FINALIZER, FLAVOR_LABEL, Flavor, Ledger, MachineRecord, NODEGROUP_LABEL,
    NodeGroupOperatorOptions, PROVIDER_ID_PREFIX, REGION, ROLE_LABEL, api_resource, flavor,
};
use crate::cloud::model::{CloudEvent, InstanceState, NodeRegistration, SimInstance};
use crate::fake_operator::{self, Reconciler, mirrored};
use crate::physics::cache::Cache;
use crate::physics::{api_code, node_is_ready, time_at};

/// Where a NodeGroup's acceptance stands.
#[derive(Debug, Clone)]
enum Decision {
    /// Not decided yet; the quota engine looks at it then (simulated time since the origin).
    Pending { at: Duration },
    /// Refused; the refusal shows in the status then.
    Refusing {
        at: Duration,
        message: String,
        demand: Usage,
    },
    /// Refused, and the status says so.
    Refused { message: String, demand: Usage },
    /// Accepted.
    Accepted,
}

/// One machine of a NodeGroup.
#[derive(Debug, Clone)]
struct Machine {
    instance: SimInstance,
    /// When a scale-down terminates it.
    terminate_at: Option<Duration>,
}

/// What the operator knows of one NodeGroup (by uid).
struct Group {
    name: String,
    /// Order of first sight: decisions are taken in it.
    sequence: u64,
    flavor: &'static Flavor,
    labels: BTreeMap<String, String>,
    taints: Vec<Value>,
    upstream_id: String,
    seen_at: Duration,
    decision: Decision,
    /// Nodes accepted (what the group holds of the quota).
    target: u32,
    /// Why the last scale-up was refused.
    scale_refusal: Option<String>,
    machines: BTreeMap<u32, Machine>,
    launches: u64,
    vanish_at: Option<Duration>,
    vanished: bool,
    teardown_at: Option<Duration>,
    torn_down: bool,
    /// The operator let the NodeGroup go (its finalizer removed, or never needed).
    released: bool,
    last_status: Option<Value>,
}

impl Group {
    fn node_name(&self, index: u32) -> String {
        format!("{}-node{index}", self.name)
    }

    /// What the group holds of the quota now.
    fn holding(&self, leaking: bool) -> Usage {
        match &self.decision {
            Decision::Accepted if !self.torn_down => Usage::of(self.flavor, self.target),
            Decision::Refused { demand, .. } if leaking && !self.released => *demand,
            _ => Usage::default(),
        }
    }

    /// The next moment something is due for this group.
    fn next_due(&self) -> Option<Duration> {
        let decision = match &self.decision {
            Decision::Pending { at } | Decision::Refusing { at, .. } if !self.released => Some(*at),
            _ => None,
        };
        let vanish = self.vanish_at.filter(|_| !self.vanished);
        let teardown = self.teardown_at.filter(|_| !self.torn_down);
        let machines = self.machines.values().filter_map(|m| m.terminate_at);
        decision
            .into_iter()
            .chain(vanish)
            .chain(teardown)
            .chain(machines)
            .min()
    }
}

fn spec_node_count(object: &DynamicObject) -> u32 {
    object
        .data
        .pointer("/spec/nodeCount")
        .and_then(Value::as_u64)
        .unwrap_or(1)
        .min(16) as u32
}

fn has_finalizer(object: &DynamicObject) -> bool {
    object
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER)
}

fn core_taint(taint: &Value) -> Option<Taint> {
    let effect = match taint.get("effect").and_then(Value::as_str)? {
        "NoSchedule" => TaintEffect::NoSchedule,
        "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
        "NoExecute" => TaintEffect::NoExecute,
        _ => return None,
    };
    let key = taint.get("key").and_then(Value::as_str)?;
    Some(Taint::new(
        key,
        taint
            .get("value")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        effect,
    ))
}

struct Operator {
    settings: CkeSettings,
    clock: Arc<Clock>,
    api: Api<DynamicObject>,
    nodes: Api<Node>,
    events: broadcast::Sender<CloudEvent>,
    ledger: Arc<Ledger>,
    /// NodeGroups (cluster-scoped: namespace "").
    groups_seen: Cache<DynamicObject>,
    /// Nodes of NodeGroups.
    nodes_seen: Cache<Node>,
    groups: BTreeMap<String, Group>,
    /// Leaked reservations: until when, how much.
    leaks: Vec<(Duration, Usage)>,
    rng: u64,
    sequence: u64,
}

/// Runs the operator until the task is aborted.
pub(super) async fn run(
    options: NodeGroupOperatorOptions,
    events: broadcast::Sender<CloudEvent>,
    ledger: Arc<Ledger>,
) {
    let NodeGroupOperatorOptions {
        client,
        clock,
        settings,
    } = options;
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &api_resource());
    let nodes: Api<Node> = Api::all(client);
    let watches = vec![
        mirrored(
            api.clone(),
            watcher::Config::default(),
            |o: &mut Operator| &mut o.groups_seen,
        ),
        mirrored(
            nodes.clone(),
            watcher::Config::default().labels(NODEGROUP_LABEL),
            |o: &mut Operator| &mut o.nodes_seen,
        ),
    ];
    let rng = settings.seed;
    let operator = Operator {
        settings,
        clock,
        api,
        nodes,
        events,
        ledger,
        groups_seen: Cache::new(),
        nodes_seen: Cache::new(),
        groups: BTreeMap::new(),
        leaks: Vec::new(),
        rng,
        sequence: 0,
    };
    fake_operator::run(operator, watches).await;
}

impl Reconciler for Operator {
    /// The real time until the next thing due, at most the resync interval.
    fn real_wait(&self) -> Duration {
        let now = self.now();
        let next = self
            .groups
            .values()
            .filter_map(Group::next_due)
            .min()
            .map(|at| at.saturating_sub(now));
        fake_operator::real_wait(&self.clock, self.settings.resync_interval, next)
    }

    fn pass(&mut self) -> impl Future<Output = ()> + Send {
        Operator::pass(self)
    }
}

impl Operator {
    /// Simulated time since the clock's origin (immune to the clock being rebased).
    fn now(&self) -> Duration {
        self.clock.elapsed()
    }

    /// What the organisation uses now, the group being reconciled (taken out) aside.
    fn used(&self) -> Usage {
        let leaking = self.settings.reservation_leak.is_some();
        let groups = self
            .groups
            .values()
            .fold(Usage::default(), |total, g| total.plus(g.holding(leaking)));
        let leaks = self
            .leaks
            .iter()
            .fold(Usage::default(), |total, (_, u)| total.plus(*u));
        self.settings.control_plane.plus(groups).plus(leaks)
    }

    async fn pass(&mut self) {
        if !self.groups_seen.is_synced() {
            return;
        }
        let now = self.now();
        self.leaks.retain(|(until, _)| *until > now);
        let objects: Vec<DynamicObject> = self.groups_seen.iter().cloned().collect();
        let (gone, fresh) = fake_operator::sort_out(&mut self.groups, &objects);
        for group in gone {
            self.forget(group, now);
        }
        // First sight in creation order, so that decisions are taken in it.
        for object in &fresh {
            self.see(object, now);
        }
        let mut ordered: Vec<(u64, DynamicObject)> = objects
            .into_iter()
            .filter_map(|o| {
                let sequence = self.groups.get(o.metadata.uid.as_deref()?)?.sequence;
                Some((sequence, o))
            })
            .collect();
        ordered.sort_by_key(|(sequence, _)| *sequence);
        for (_, object) in ordered {
            let Some(uid) = object.metadata.uid.clone() else {
                continue;
            };
            let Some(mut group) = self.groups.remove(&uid) else {
                continue;
            };
            if let Err(error) = self.reconcile(&mut group, &object, now).await {
                tracing::debug!(nodegroup = %group.name, %error, "reconciling a NodeGroup failed; retrying on the next pass");
            }
            self.groups.insert(uid, group);
        }
        let used = self.used();
        *self.ledger.usage.lock().unwrap_or_else(|p| p.into_inner()) = used;
    }

    /// A NodeGroup seen for the first time.
    fn see(&mut self, object: &DynamicObject, now: Duration) {
        let name = object.metadata.name.clone().unwrap_or_default();
        let uid = object.metadata.uid.clone().unwrap_or_default();
        let flavor_name = object
            .data
            .pointer("/spec/flavor")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Some(flavor) = flavor(flavor_name) else {
            tracing::warn!(nodegroup = %name, flavor = %flavor_name, "NodeGroup of an unknown flavor; ignored");
            return;
        };
        let labels = object
            .data
            .pointer("/spec/labels")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect();
        let taints = object
            .data
            .pointer("/spec/taints")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        self.sequence += 1;
        let group = Group {
            name,
            sequence: self.sequence,
            flavor,
            labels,
            taints,
            upstream_id: format!(
                "nodegroup_{}",
                crate::exoscale::stable_uuid(&format!("cke-nodegroup/{uid}"))
            ),
            seen_at: now,
            decision: Decision::Pending {
                at: now + self.settings.acceptance_delay,
            },
            target: 0,
            scale_refusal: None,
            machines: BTreeMap::new(),
            launches: 0,
            vanish_at: None,
            vanished: false,
            teardown_at: None,
            torn_down: false,
            released: false,
            last_status: None,
        };
        tracing::debug!(nodegroup = %group.name, flavor = %flavor.name, "NodeGroup seen");
        self.groups.insert(uid, group);
    }

    /// A NodeGroup that is gone from the API server.
    fn forget(&mut self, mut group: Group, now: Duration) {
        let leftover: Vec<u32> = group.machines.keys().copied().collect();
        for index in leftover {
            if let Some(machine) = group.machines.remove(&index) {
                self.terminate(machine);
            }
        }
        self.release_refused(&mut group, now);
        tracing::debug!(nodegroup = %group.name, "NodeGroup gone");
    }

    /// A refused group let go: with the leak option, its demand stays held for a while.
    fn release_refused(&mut self, group: &mut Group, now: Duration) {
        if let (Decision::Refused { demand, .. }, Some(leak), false) = (
            &group.decision,
            self.settings.reservation_leak,
            group.released,
        ) {
            tracing::info!(nodegroup = %group.name, leak = ?leak, "refused NodeGroup deleted; its quota reservation leaks");
            self.leaks.push((now + leak, *demand));
        }
        group.released = true;
    }

    async fn reconcile(
        &mut self,
        group: &mut Group,
        object: &DynamicObject,
        now: Duration,
    ) -> Result<(), kube::Error> {
        if object.metadata.deletion_timestamp.is_some() {
            self.tear_down(group, object, now).await?;
        } else {
            if !has_finalizer(object) {
                self.add_finalizer(object).await?;
            }
            self.decide(group, object, now);
            if matches!(group.decision, Decision::Accepted) {
                self.scale(group, object, now);
                if group.vanish_at.is_some_and(|at| at <= now) && !group.vanished {
                    self.vanish(group).await?;
                }
            }
        }
        if !group.released {
            self.write_status(group, object).await?;
        }
        Ok(())
    }

    /// Takes the quota decision when it is due, and shows a refusal when that is due.
    fn decide(&mut self, group: &mut Group, object: &DynamicObject, now: Duration) {
        match &group.decision {
            Decision::Pending { at } if *at <= now => {
                let count = spec_node_count(object);
                let demand = Usage::of(group.flavor, count);
                match quota::check(self.settings.quota, self.used(), demand) {
                    Ok(()) => {
                        group.decision = Decision::Accepted;
                        group.target = count;
                        self.ledger.accepted.fetch_add(1, Ordering::Relaxed);
                        let vanish = self.settings.vanish_names.contains(&group.name)
                            || (self.settings.vanish_probability > 0.0
                                && crate::random::next_unit(&mut self.rng)
                                    < self.settings.vanish_probability);
                        if vanish {
                            group.vanish_at = Some(now + self.settings.vanish_after);
                        }
                        tracing::info!(nodegroup = %group.name, flavor = %group.flavor.name, nodes = count, vanish, "NodeGroup accepted");
                    }
                    Err(refusal) => {
                        let shows_at = (group.seen_at
                            + self.settings.rejection_delay.pick(&mut self.rng))
                        .max(now);
                        group.decision = Decision::Refusing {
                            at: shows_at,
                            message: refusal.to_string(),
                            demand,
                        };
                    }
                }
            }
            Decision::Refusing {
                at,
                message,
                demand,
            } if *at <= now => {
                tracing::info!(nodegroup = %group.name, %message, "NodeGroup refused");
                group.decision = Decision::Refused {
                    message: message.clone(),
                    demand: *demand,
                };
                self.ledger.rejected.fetch_add(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }

    /// Follows `spec.nodeCount`: machines up to the accepted target, scale-downs after the
    /// teardown delay (highest indexes first).
    fn scale(&mut self, group: &mut Group, object: &DynamicObject, now: Duration) {
        let desired = spec_node_count(object);
        if desired > group.target {
            let used = self.used().plus(Usage::of(group.flavor, group.target));
            match quota::check(
                self.settings.quota,
                used,
                Usage::of(group.flavor, desired - group.target),
            ) {
                Ok(()) => {
                    tracing::info!(nodegroup = %group.name, from = group.target, to = desired, "NodeGroup scaled up");
                    group.target = desired;
                    group.scale_refusal = None;
                }
                Err(refusal) => group.scale_refusal = Some(refusal.to_string()),
            }
        } else {
            if desired < group.target {
                tracing::info!(nodegroup = %group.name, from = group.target, to = desired, "NodeGroup scaled down");
            }
            group.target = desired;
            group.scale_refusal = None;
        }
        for index in 0..group.target {
            if let Some(machine) = group.machines.get_mut(&index) {
                machine.terminate_at = None;
            } else if self.nodes_seen.get("", &group.node_name(index)).is_none() {
                self.launch(group, index, now);
            }
            // Otherwise the Node of an earlier machine of that index is still going away.
        }
        let surplus: Vec<u32> = group
            .machines
            .keys()
            .rev()
            .copied()
            .filter(|i| *i >= group.target)
            .collect();
        for index in surplus {
            if let Some(machine) = group.machines.get_mut(&index)
                && machine.terminate_at.is_none()
            {
                machine.terminate_at = Some(now + self.settings.teardown_delay.pick(&mut self.rng));
            }
        }
        let due: Vec<u32> = group
            .machines
            .iter()
            .filter(|(_, m)| m.terminate_at.is_some_and(|at| at <= now))
            .map(|(i, _)| *i)
            .collect();
        for index in due.into_iter().rev() {
            if let Some(machine) = group.machines.remove(&index) {
                self.terminate(machine);
            }
        }
    }

    /// Creates the machine of node `index`; its Node registers after the boot delay.
    fn launch(&mut self, group: &mut Group, index: u32, now: Duration) {
        let boot = self.settings.boot_delay.pick(&mut self.rng);
        let node_name = group.node_name(index);
        group.launches += 1;
        let id = format!("{}-{}", group.upstream_id, group.launches);
        let provider_id = if index == 0 {
            format!("{PROVIDER_ID_PREFIX}{}", group.name)
        } else {
            format!("{PROVIDER_ID_PREFIX}{node_name}")
        };
        let flavor = group.flavor;
        let instance = SimInstance {
            id: id.clone(),
            provider_id,
            instance_type: flavor.name.to_string(),
            zone: REGION.to_string(),
            capacity_type: "on-demand".to_string(),
            user_data: String::new(),
            tags: BTreeMap::from([
                ("nodegroup".to_string(), group.name.clone()),
                ("node".to_string(), node_name.clone()),
                ("upstreamId".to_string(), group.upstream_id.clone()),
            ]),
            capacity: flavor.capacity(),
            allocatable: flavor.allocatable(),
            labels: BTreeMap::from([
                (ARCH_LABEL.to_string(), "amd64".to_string()),
                (OS_LABEL.to_string(), "linux".to_string()),
                (REGION_LABEL.to_string(), REGION.to_string()),
            ]),
            price_per_hour: flavor.price_hourly,
            state: InstanceState::Pending,
            created_at: joinery_core::time::rfc3339(self.clock.now()),
        };
        let mut labels = group.labels.clone();
        labels.insert(NODEGROUP_LABEL.to_string(), group.name.clone());
        labels.insert(FLAVOR_LABEL.to_string(), flavor.name.to_string());
        labels.insert(ROLE_LABEL.to_string(), "worker".to_string());
        let registration = NodeRegistration {
            node_name: node_name.clone(),
            labels,
            taints: group.taints.iter().filter_map(core_taint).collect(),
            provider_id: None,
            boot_delay: Some(boot),
        };
        self.ledger.machines().insert(
            id.clone(),
            MachineRecord {
                instance: instance.clone(),
                booted_at: now + boot,
                terminated: false,
            },
        );
        self.ledger.launched.fetch_add(1, Ordering::Relaxed);
        group.machines.insert(
            index,
            Machine {
                instance: instance.clone(),
                terminate_at: None,
            },
        );
        tracing::info!(nodegroup = %group.name, node = %node_name, machine = %id, boot = ?boot, "machine launched");
        let _ = self.events.send(CloudEvent::PlatformLaunched {
            instance,
            registration,
        });
    }

    /// The machine is gone (the physics deletes its Node).
    fn terminate(&mut self, machine: Machine) {
        let mut instance = machine.instance;
        instance.state = InstanceState::Terminated;
        if let Some(record) = self.ledger.machines().get_mut(&instance.id) {
            record.terminated = true;
        }
        tracing::info!(machine = %instance.id, "machine terminated");
        let _ = self.events.send(CloudEvent::Terminated {
            instance,
            at: self.clock.now(),
        });
    }

    /// Deletes an accepted group upstream, as the real platform once did.
    async fn vanish(&mut self, group: &mut Group) -> Result<(), kube::Error> {
        match self
            .api
            .delete(&group.name, &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(error) if api_code(&error) == Some(404) => {}
            Err(error) => return Err(error),
        }
        group.vanished = true;
        self.ledger.vanished.fetch_add(1, Ordering::Relaxed);
        tracing::info!(nodegroup = %group.name, "NodeGroup vanished (deleted upstream)");
        Ok(())
    }

    /// A NodeGroup being deleted: tear the machines down after the delay, then let it go once
    /// no Node of it is left.
    async fn tear_down(
        &mut self,
        group: &mut Group,
        object: &DynamicObject,
        now: Duration,
    ) -> Result<(), kube::Error> {
        if group.released {
            return Ok(());
        }
        if !matches!(group.decision, Decision::Accepted) {
            // Nothing was ever built.
            self.release_refused(group, now);
            return self.remove_finalizer(group, object).await;
        }
        let at = match group.teardown_at {
            Some(at) => at,
            None => {
                let delay = if group.vanished {
                    Duration::ZERO
                } else {
                    self.settings.teardown_delay.pick(&mut self.rng)
                };
                *group.teardown_at.insert(now + delay)
            }
        };
        if at > now {
            return Ok(());
        }
        if !group.torn_down {
            let machines: Vec<u32> = group.machines.keys().copied().collect();
            for index in machines.into_iter().rev() {
                if let Some(machine) = group.machines.remove(&index) {
                    self.terminate(machine);
                }
            }
            group.torn_down = true;
            tracing::info!(nodegroup = %group.name, "NodeGroup torn down; waiting for its Nodes to go");
        }
        let left = self
            .nodes
            .list(&ListParams::default().labels(&format!("{NODEGROUP_LABEL}={}", group.name)))
            .await?;
        if left.items.is_empty() {
            self.remove_finalizer(group, object).await?;
        }
        Ok(())
    }

    async fn add_finalizer(&mut self, object: &DynamicObject) -> Result<(), kube::Error> {
        if let Some(updated) = fake_operator::add_finalizer(&self.api, object, FINALIZER).await? {
            self.groups_seen.upsert(updated);
        }
        Ok(())
    }

    async fn remove_finalizer(
        &mut self,
        group: &mut Group,
        object: &DynamicObject,
    ) -> Result<(), kube::Error> {
        let name = group.name.clone();
        if has_finalizer(object) {
            if !fake_operator::remove_finalizer(&self.api, &name, FINALIZER).await? {
                group.released = true;
                return Ok(());
            }
            tracing::info!(nodegroup = %name, "NodeGroup finalizer removed");
        }
        group.released = true;
        Ok(())
    }

    /// Writes the status the group should show, if it changed.
    async fn write_status(
        &mut self,
        group: &mut Group,
        object: &DynamicObject,
    ) -> Result<(), kube::Error> {
        let previous = group
            .last_status
            .clone()
            .or_else(|| object.data.get("status").cloned());
        let status = self.status_of(group, object, previous.as_ref());
        if group.last_status.as_ref() == Some(&status) || object.data.get("status") == Some(&status)
        {
            group.last_status = Some(status);
            return Ok(());
        }
        let name = group.name.clone();
        if let Some(updated) = fake_operator::patch_status(&self.api, &name, &status).await? {
            self.groups_seen.upsert(updated);
            group.last_status = Some(status);
        }
        Ok(())
    }

    fn status_of(&self, group: &Group, object: &DynamicObject, previous: Option<&Value>) -> Value {
        let deleting = object.metadata.deletion_timestamp.is_some();
        let mut conditions: Vec<(&str, &str, &str, String)> = Vec::new();
        let mut status = serde_json::Map::new();
        match &group.decision {
            Decision::Pending { .. } | Decision::Refusing { .. } => {
                conditions.push((
                    "Ready",
                    "False",
                    "Reconciling",
                    "The NodeGroup is being reconciled".into(),
                ));
                conditions.push((
                    "ReconcileInProgress",
                    "True",
                    "Reconciling",
                    "The NodeGroup is being reconciled".into(),
                ));
            }
            Decision::Refused { message, .. } => {
                let message = message.clone();
                status.insert("phase".into(), json!("QuotaExceeded"));
                status.insert("nodeCount".into(), json!(0));
                conditions.push(("Ready", "False", "QuotaExceeded", message.clone()));
                conditions.push((
                    "ReconcileInProgress",
                    "False",
                    "QuotaExceeded",
                    "Reconciliation stopped".into(),
                ));
                conditions.push(("ReconcileFailed", "True", "QuotaExceeded", message));
            }
            Decision::Accepted => {
                let ready = self
                    .nodes_seen
                    .iter()
                    .filter(|n| {
                        n.metadata
                            .labels
                            .as_ref()
                            .and_then(|l| l.get(NODEGROUP_LABEL))
                            == Some(&group.name)
                            && node_is_ready(n)
                    })
                    .count();
                status.insert("phase".into(), json!("Synced"));
                status.insert("nodeCount".into(), json!(ready));
                status.insert("targetNodeCount".into(), json!(group.target));
                status.insert("upstreamId".into(), json!(group.upstream_id));
                status.insert("labels".into(), json!(group.labels));
                status.insert("taints".into(), Value::Array(group.taints.clone()));
                if deleting {
                    conditions.push((
                        "Ready",
                        "False",
                        "Terminating",
                        "The NodeGroup is being deleted".into(),
                    ));
                    conditions.push((
                        "ReconcileInProgress",
                        "True",
                        "Terminating",
                        "The NodeGroup's nodes are being removed".into(),
                    ));
                    conditions.push((
                        "Terminating",
                        "True",
                        "Terminating",
                        "The NodeGroup is being deleted".into(),
                    ));
                } else {
                    conditions.push(("Ready", "True", "Synced", "The NodeGroup is synced".into()));
                    conditions.push((
                        "ReconcileInProgress",
                        "False",
                        "Synced",
                        "The NodeGroup is synced".into(),
                    ));
                }
                match &group.scale_refusal {
                    Some(message) => conditions.push((
                        "ReconcileFailed",
                        "True",
                        "QuotaExceeded",
                        message.clone(),
                    )),
                    None => conditions.push((
                        "ReconcileFailed",
                        "False",
                        "Synced",
                        "The NodeGroup is synced".into(),
                    )),
                }
            }
        }
        let generation = object.metadata.generation.unwrap_or(1);
        let now = serde_json::to_value(time_at(self.clock.now())).unwrap_or(Value::Null);
        let earlier =
            |kind: &str, state: &str| fake_operator::earlier_transition(previous, kind, state);
        let conditions: Vec<Value> = conditions
            .into_iter()
            .map(|(kind, state, reason, message)| {
                json!({
                    "type": kind, "status": state, "reason": reason, "message": message,
                    "lastTransitionTime": earlier(kind, state).unwrap_or_else(|| now.clone()),
                    "observedGeneration": generation,
                })
            })
            .collect();
        status.insert("conditions".into(), Value::Array(conditions));
        Value::Object(status)
    }
}
