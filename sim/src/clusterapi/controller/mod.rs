//! The fake Cluster API controllers' loop: watches MachineDeployments, MachineSets and
//! Machines in the management cluster and Nodes in the workload cluster, and on every change
//! (or timer, or resync) makes one pass — MachineDeployments, then MachineSets, then
//! Machines. The behaviour is described in the module above.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use joinery_core::clock::Clock;
use joinery_core::labels::{ARCH_LABEL, INSTANCE_TYPE_LABEL, OS_LABEL, REGION_LABEL, ZONE_LABEL};
use k8s_openapi::api::core::v1::Node;
use kube::Resource;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use super::priority::{DeletePolicy, machines_to_delete};
use super::shape::{is_propagated_label, node_shape};
use super::{
    CLUSTER_NAME_ANNOTATION, CLUSTER_NAME_LABEL, CLUSTER_NAMESPACE_ANNOTATION, CapiOptions,
    CapiSettings, DEPLOYMENT_NAME_LABEL, FAILURE_REASON, FINALIZER, GROUP, Kind,
    LABELS_FROM_MACHINE_ANNOTATION, Ledger, MACHINE_ANNOTATION, MachineInfo, MachineRecord,
    OWNER_KIND_ANNOTATION, OWNER_NAME_ANNOTATION, SET_NAME_LABEL, STORAGE_VERSION,
    TEMPLATE_HASH_LABEL, provider_id,
};
use crate::cloud::model::{CloudEvent, InstanceState, NodeRegistration, SimInstance};
use crate::physics::cache::Cache;
use crate::physics::{Trigger, api_code, controller_uid, node_is_ready, time_at, watch};

/// How long after its creation a Machine's bootstrap data is ready (simulated; never later
/// than its provisioning).
const BOOTSTRAP_DELAY: Duration = Duration::from_secs(1);
/// Characters of random name suffixes (as Kubernetes' `generateName` uses).
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
/// The MachineDeployment annotation whose value replaces a missing `spec.replicas`.
const MIN_SIZE_ANNOTATION: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size";

/// `<namespace>/<name>` of an object.
fn key_of<K: Resource>(object: &K) -> String {
    let meta = object.meta();
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

/// What the controllers know of one Machine (by uid).
#[derive(Debug, Clone)]
struct Tracked {
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
    fn next_due(&self, provisioned: bool) -> Option<Duration> {
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

struct Controllers {
    settings: CapiSettings,
    clock: Arc<Clock>,
    management: kube::Client,
    nodes: Api<Node>,
    events: broadcast::Sender<CloudEvent>,
    ledger: Arc<Ledger>,
    deployments: Cache<DynamicObject>,
    sets: Cache<DynamicObject>,
    machines: Cache<DynamicObject>,
    nodes_seen: Cache<Node>,
    tracked: BTreeMap<String, Tracked>,
    rng: u64,
}

/// Runs the controllers until the task is aborted.
pub(super) async fn run(
    options: CapiOptions,
    events: broadcast::Sender<CloudEvent>,
    ledger: Arc<Ledger>,
) {
    let CapiOptions {
        management,
        workload,
        clock,
        settings,
    } = options;
    let all = |kind: Kind| Api::<DynamicObject>::all_with(management.clone(), &kind.api_resource());
    let mut deployment_events = watch(all(Kind::MachineDeployment), watcher::Config::default());
    let mut set_events = watch(all(Kind::MachineSet), watcher::Config::default());
    let mut machine_events = watch(all(Kind::Machine), watcher::Config::default());
    let nodes: Api<Node> = Api::all(workload);
    let mut node_events = watch(nodes.clone(), watcher::Config::default());
    let rng = settings.seed;
    let mut controllers = Controllers {
        settings,
        clock,
        management,
        nodes,
        events,
        ledger,
        deployments: Cache::new(),
        sets: Cache::new(),
        machines: Cache::new(),
        nodes_seen: Cache::new(),
        tracked: BTreeMap::new(),
        rng,
    };
    let mut trigger = Trigger::new();
    loop {
        let wait = controllers.real_wait();
        tokio::select! {
            Some(event) = deployment_events.next() => {
                controllers.deployments.apply(event);
                trigger.fire();
            }
            Some(event) = set_events.next() => {
                controllers.sets.apply(event);
                trigger.fire();
            }
            Some(event) = machine_events.next() => {
                controllers.machines.apply(event);
                trigger.fire();
            }
            Some(event) = node_events.next() => {
                controllers.nodes_seen.apply(event);
                trigger.fire();
            }
            _ = trigger.due() => controllers.pass().await,
            _ = tokio::time::sleep(wait) => controllers.pass().await,
        }
    }
}

fn labels_of(object: &DynamicObject) -> BTreeMap<String, String> {
    object.metadata.labels.clone().unwrap_or_default()
}

fn name_of(object: &DynamicObject) -> String {
    object.metadata.name.clone().unwrap_or_default()
}

fn namespace_of(object: &DynamicObject) -> String {
    object.metadata.namespace.clone().unwrap_or_default()
}

fn string_map(value: Option<&Value>) -> BTreeMap<String, String> {
    value
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

/// The desired replicas of a MachineDeployment or MachineSet: `spec.replicas`, else the
/// autoscaler's min-size annotation, else 1 (what Cluster API's webhook defaults to).
fn desired_replicas(object: &DynamicObject) -> usize {
    if let Some(replicas) = object
        .data
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
    {
        return replicas.max(0) as usize;
    }
    object
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MIN_SIZE_ANNOTATION))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(1)
}

/// The delete policy a MachineDeployment or MachineSet names (v1beta1 or v1beta2 field).
fn named_policy(object: &DynamicObject) -> Option<DeletePolicy> {
    [
        "/spec/deletePolicy",
        "/spec/strategy/rollingUpdate/deletePolicy",
        "/spec/deletion/order",
    ]
    .iter()
    .find_map(|p| {
        object
            .data
            .pointer(p)
            .and_then(Value::as_str)
            .and_then(DeletePolicy::parse)
    })
}

/// 32-bit FNV-1a of a text, in decimal (the template hash label's value).
fn template_hash(template: &Value) -> String {
    let text = serde_json::to_string(template).unwrap_or_default();
    let hash = text.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    hash.to_string()
}

/// A per-Machine object reference made from a template reference: kind without `Template`,
/// named after the Machine, in its namespace.
fn instance_ref(template_ref: &Value, name: &str, namespace: &str) -> Value {
    let mut reference = template_ref.as_object().cloned().unwrap_or_default();
    if let Some(kind) = reference.get("kind").and_then(Value::as_str) {
        let kind = kind.strip_suffix("Template").unwrap_or(kind).to_string();
        reference.insert("kind".into(), json!(kind));
    }
    reference.insert("name".into(), json!(name));
    if reference.contains_key("apiVersion") || !reference.contains_key("apiGroup") {
        reference.insert("namespace".into(), json!(namespace));
    }
    Value::Object(reference)
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

/// A label selector in query syntax (`a=b,c in (d,e),!f`), as a Scale's `status.selector`.
fn selector_text(selector: Option<&Value>) -> String {
    let Some(selector) = selector else {
        return String::new();
    };
    let text = |v: &Value| {
        v.as_str()
            .map(String::from)
            .unwrap_or_else(|| v.to_string())
    };
    let mut parts: Vec<String> = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", text(v)))
        .collect();
    for expression in selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = expression.get("key").map(text).unwrap_or_default();
        let mut values: Vec<String> = expression
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(text)
            .collect();
        values.sort();
        match expression
            .get("operator")
            .and_then(Value::as_str)
            .unwrap_or_default()
        {
            "In" => parts.push(format!("{key} in ({})", values.join(","))),
            "NotIn" => parts.push(format!("{key} notin ({})", values.join(","))),
            "Exists" => parts.push(key),
            "DoesNotExist" => parts.push(format!("!{key}")),
            _ => {}
        }
    }
    parts.join(",")
}

/// Whether the fields of `wanted` all have those values in `current`.
fn covers(current: Option<&Value>, wanted: &Map<String, Value>) -> bool {
    wanted
        .iter()
        .all(|(k, v)| current.and_then(|c| c.get(k)) == Some(v))
}

impl Controllers {
    /// Simulated time since the clock's origin (immune to the clock being rebased).
    fn now(&self) -> Duration {
        self.clock.elapsed()
    }

    fn api(&self, kind: Kind, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.management.clone(), namespace, &kind.api_resource())
    }

    /// The real time until the next thing due, at most the resync interval.
    fn real_wait(&self) -> Duration {
        let now = self.now();
        let resync = self.settings.resync_interval;
        let next = self
            .machines
            .iter()
            .filter_map(|m| {
                let tracked = self.tracked.get(m.metadata.uid.as_deref()?)?;
                tracked.next_due(m.data.pointer("/spec/providerID").is_some())
            })
            .filter(|at| *at > now)
            .min()
            .map(|at| at - now)
            .unwrap_or(resync);
        self.clock
            .to_real(next.min(resync))
            .max(Duration::from_millis(1))
    }

    fn suffix(&mut self) -> String {
        (0..5)
            .map(|_| {
                SUFFIX_ALPHABET[(crate::random::next_u64(&mut self.rng)
                    % SUFFIX_ALPHABET.len() as u64) as usize] as char
            })
            .collect()
    }

    /// A name `<prefix>-<5 random characters>` not taken in the mirror.
    fn fresh_name(
        &mut self,
        prefix: &str,
        namespace: &str,
        taken: impl Fn(&Self, &str, &str) -> bool,
    ) -> String {
        loop {
            let name = format!("{prefix}-{}", self.suffix());
            if !taken(self, namespace, &name) {
                return name;
            }
        }
    }

    async fn pass(&mut self) {
        if !(self.deployments.is_synced()
            && self.sets.is_synced()
            && self.machines.is_synced()
            && self.nodes_seen.is_synced())
        {
            return;
        }
        let deployments: Vec<DynamicObject> = self.deployments.iter().cloned().collect();
        for md in &deployments {
            if let Err(error) = self.reconcile_deployment(md).await {
                tracing::debug!(machinedeployment = %key_of(md), %error, "reconciling a MachineDeployment failed; retrying on the next pass");
            }
        }
        let sets: Vec<DynamicObject> = self.sets.iter().cloned().collect();
        for ms in &sets {
            if let Err(error) = self.reconcile_set(ms).await {
                tracing::debug!(machineset = %key_of(ms), %error, "reconciling a MachineSet failed; retrying on the next pass");
            }
        }
        self.reconcile_machines().await;
        self.publish();
    }

    /// The MachineSets a MachineDeployment controls, oldest first.
    fn sets_of(&self, md: &DynamicObject) -> Vec<DynamicObject> {
        let uid = md.metadata.uid.as_deref();
        let mut sets: Vec<DynamicObject> = self
            .sets
            .iter()
            .filter(|ms| {
                controller_uid(&ms.metadata).is_some() && controller_uid(&ms.metadata) == uid
            })
            .cloned()
            .collect();
        sets.sort_by_key(|ms| {
            (
                ms.metadata.creation_timestamp.as_ref().map(|t| t.0),
                ms.metadata.name.clone(),
            )
        });
        sets
    }

    /// The Machines a MachineSet controls.
    fn machines_of(&self, ms: &DynamicObject) -> Vec<DynamicObject> {
        let uid = ms.metadata.uid.as_deref();
        self.machines
            .iter()
            .filter(|m| controller_uid(&m.metadata).is_some() && controller_uid(&m.metadata) == uid)
            .cloned()
            .collect()
    }

    /// The Node of a providerID, if one has registered.
    fn node_of(&self, provider_id: &str) -> Option<&Node> {
        self.nodes_seen
            .iter()
            .find(|n| n.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id))
    }

    /// Whether a Machine's Node is Ready (and has been for `min_ready` seconds, for available).
    fn readiness(&self, machine: &DynamicObject, min_ready: i64) -> (bool, bool) {
        let Some(node_name) = machine
            .data
            .pointer("/status/nodeRef/name")
            .and_then(Value::as_str)
        else {
            return (false, false);
        };
        let Some(node) = self.nodes_seen.get("", node_name) else {
            return (false, false);
        };
        if !node_is_ready(node) {
            return (false, false);
        }
        let since = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| std::time::SystemTime::from(t.0));
        let available = min_ready <= 0
            || since.is_some_and(|s| {
                self.clock.now().duration_since(s).unwrap_or_default()
                    >= Duration::from_secs(min_ready as u64)
            });
        (true, available)
    }

    /// The MachineDeployment's selector as matchLabels: its own, or (when it has none) the
    /// cluster-name and deployment-name labels Cluster API's webhook defaults it to.
    fn deployment_selector(md: &DynamicObject) -> Value {
        let match_labels = md
            .data
            .pointer("/spec/selector/matchLabels")
            .and_then(Value::as_object)
            .filter(|m| !m.is_empty())
            .cloned();
        let expressions = md
            .data
            .pointer("/spec/selector/matchExpressions")
            .filter(|e| e.as_array().is_some_and(|a| !a.is_empty()))
            .cloned();
        let match_labels = match_labels.unwrap_or_else(|| {
            let cluster = md
                .data
                .pointer("/spec/clusterName")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let mut defaults = Map::new();
            defaults.insert(CLUSTER_NAME_LABEL.into(), json!(cluster));
            defaults.insert(DEPLOYMENT_NAME_LABEL.into(), json!(name_of(md)));
            defaults
        });
        let mut selector = json!({"matchLabels": match_labels});
        if let Some(expressions) = expressions {
            selector["matchExpressions"] = expressions;
        }
        selector
    }

    /// The MachineSet spec a MachineDeployment wants, with the template hash `hash`.
    fn set_spec(&self, md: &DynamicObject, hash: &str) -> Value {
        let cluster = md
            .data
            .pointer("/spec/clusterName")
            .cloned()
            .unwrap_or(json!(""));
        let mut selector = Self::deployment_selector(md);
        selector["matchLabels"][TEMPLATE_HASH_LABEL] = json!(hash);
        let mut template = md
            .data
            .pointer("/spec/template")
            .cloned()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        if !template.get("metadata").is_some_and(Value::is_object) {
            template["metadata"] = json!({});
        }
        let mut labels = template["metadata"]
            .get("labels")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for (key, value) in selector["matchLabels"].as_object().into_iter().flatten() {
            labels.insert(key.clone(), value.clone());
        }
        labels.insert(DEPLOYMENT_NAME_LABEL.into(), json!(name_of(md)));
        labels.insert(CLUSTER_NAME_LABEL.into(), cluster.clone());
        labels.insert(TEMPLATE_HASH_LABEL.into(), json!(hash));
        template["metadata"]["labels"] = Value::Object(labels);
        let mut spec = json!({"clusterName": cluster, "replicas": desired_replicas(md), "selector": selector, "template": template});
        if let Some(policy) = named_policy(md) {
            spec["deletePolicy"] = json!(policy.as_str());
        }
        if let Some(min_ready) = md.data.pointer("/spec/minReadySeconds") {
            spec["minReadySeconds"] = min_ready.clone();
        }
        spec
    }

    async fn reconcile_deployment(&mut self, md: &DynamicObject) -> Result<(), kube::Error> {
        let namespace = namespace_of(md);
        let name = name_of(md);
        let paused = md.data.pointer("/spec/paused").and_then(Value::as_bool) == Some(true);
        let mut sets = self.sets_of(md);
        if md.metadata.deletion_timestamp.is_none() && !paused {
            match sets.first().cloned() {
                None => {
                    let hash =
                        template_hash(md.data.pointer("/spec/template").unwrap_or(&Value::Null));
                    let set_name = self.fresh_name(&name, &namespace, |s, namespace, name| {
                        s.sets.get(namespace, name).is_some()
                    });
                    let spec = self.set_spec(md, &hash);
                    let labels = spec
                        .pointer("/template/metadata/labels")
                        .cloned()
                        .unwrap_or_else(|| json!({}));
                    let object = json!({
                        "apiVersion": format!("{GROUP}/{STORAGE_VERSION}"), "kind": "MachineSet",
                        "metadata": {
                            "name": set_name, "namespace": namespace, "labels": labels,
                            "ownerReferences": [{
                                "apiVersion": format!("{GROUP}/{STORAGE_VERSION}"), "kind": "MachineDeployment", "name": name,
                                "uid": md.metadata.uid, "controller": true, "blockOwnerDeletion": true,
                            }],
                        },
                        "spec": spec,
                    });
                    let object: DynamicObject =
                        serde_json::from_value(object).map_err(kube::Error::SerdeError)?;
                    let created = self
                        .api(Kind::MachineSet, &namespace)
                        .create(&PostParams::default(), &object)
                        .await?;
                    tracing::info!(machinedeployment = %name, machineset = %set_name, %namespace, "MachineSet created");
                    Ledger::bump(&self.ledger.machine_sets_created);
                    self.sets.upsert(created.clone());
                    sets.push(created);
                }
                Some(current) => {
                    let hash = current
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(TEMPLATE_HASH_LABEL))
                        .cloned()
                        .unwrap_or_default();
                    let wanted = self.set_spec(md, &hash);
                    let mut updated = current.clone();
                    for field in ["replicas", "template", "deletePolicy", "minReadySeconds"] {
                        match wanted.get(field) {
                            Some(value) => updated.data["spec"][field] = value.clone(),
                            None => {
                                if let Some(spec) =
                                    updated.data.get_mut("spec").and_then(Value::as_object_mut)
                                {
                                    spec.remove(field);
                                }
                            }
                        }
                    }
                    if updated.data != current.data {
                        let set_name = name_of(&current);
                        match self
                            .api(Kind::MachineSet, &namespace)
                            .replace(&set_name, &PostParams::default(), &updated)
                            .await
                        {
                            Ok(written) => {
                                tracing::debug!(machineset = %set_name, replicas = ?wanted.get("replicas"), "MachineSet follows its MachineDeployment");
                                self.sets.upsert(written.clone());
                                sets[0] = written;
                            }
                            Err(error) if matches!(api_code(&error), Some(404 | 409)) => {}
                            Err(error) => return Err(error),
                        }
                    }
                    // Older MachineSets (none unless made by hand) wind down.
                    for old in sets.iter_mut().skip(1) {
                        if desired_replicas(old) != 0 {
                            let patch = json!({"spec": {"replicas": 0}});
                            if let Ok(written) = self
                                .api(Kind::MachineSet, &namespace)
                                .patch(
                                    &name_of(old),
                                    &PatchParams::default(),
                                    &Patch::Merge(&patch),
                                )
                                .await
                            {
                                self.sets.upsert(written.clone());
                                *old = written;
                            }
                        }
                    }
                }
            }
        }
        // Status, from the Machines of every MachineSet it controls.
        let desired = desired_replicas(md);
        let min_ready = md
            .data
            .pointer("/spec/minReadySeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let (mut replicas, mut ready, mut available) = (0usize, 0usize, 0usize);
        let mut updated_replicas = 0usize;
        for (index, ms) in sets.iter().enumerate() {
            let machines = self.machines_of(ms);
            replicas += machines.len();
            if index == 0 {
                updated_replicas = machines.len();
            }
            for machine in &machines {
                let (r, a) = self.readiness(machine, min_ready);
                ready += usize::from(r);
                available += usize::from(a);
            }
        }
        let phase = match desired.cmp(&ready) {
            std::cmp::Ordering::Equal => "Running",
            std::cmp::Ordering::Greater => "ScalingUp",
            std::cmp::Ordering::Less => "ScalingDown",
        };
        let selector = selector_text(Some(&Self::deployment_selector(md)));
        let mut status = Map::new();
        status.insert(
            "observedGeneration".into(),
            json!(md.metadata.generation.unwrap_or(1)),
        );
        status.insert("selector".into(), json!(selector));
        status.insert("replicas".into(), json!(replicas));
        status.insert("updatedReplicas".into(), json!(updated_replicas));
        status.insert("readyReplicas".into(), json!(ready));
        status.insert("availableReplicas".into(), json!(available));
        status.insert(
            "unavailableReplicas".into(),
            json!(desired.saturating_sub(available)),
        );
        status.insert("phase".into(), json!(phase));
        self.write_status(Kind::MachineDeployment, md, status).await
    }

    /// Patches the fields of `status` that differ, if any.
    async fn write_status(
        &mut self,
        kind: Kind,
        object: &DynamicObject,
        status: Map<String, Value>,
    ) -> Result<(), kube::Error> {
        if covers(object.data.get("status"), &status) {
            return Ok(());
        }
        let name = name_of(object);
        let api = self.api(kind, &namespace_of(object));
        match api
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await
        {
            Ok(written) => {
                match kind {
                    Kind::MachineDeployment => self.deployments.upsert(written),
                    Kind::MachineSet => self.sets.upsert(written),
                    Kind::Machine => self.machines.upsert(written),
                }
                Ok(())
            }
            Err(error) if api_code(&error) == Some(404) => Ok(()),
            Err(error) => Err(error),
        }
    }

    async fn reconcile_set(&mut self, ms: &DynamicObject) -> Result<(), kube::Error> {
        let namespace = namespace_of(ms);
        let name = name_of(ms);
        let machines = self.machines_of(ms);
        let desired = desired_replicas(ms);
        if ms.metadata.deletion_timestamp.is_none() {
            if machines.len() < desired {
                for _ in machines.len()..desired {
                    self.create_machine(ms).await?;
                }
            } else if machines.len() - desired
                > machines
                    .iter()
                    .filter(|m| m.metadata.deletion_timestamp.is_some())
                    .count()
            {
                // A Machine not yet being deleted must go (those being deleted count, and go
                // first). Choose from the Machines as the API server has them now, not as the
                // watch has delivered them so far: whoever lowers the replicas may have annotated
                // a Machine with delete-machine just before, and that mark must decide which one
                // goes.
                let uid = ms.metadata.uid.as_deref();
                let machines: Vec<DynamicObject> = self
                    .api(Kind::Machine, &namespace)
                    .list(&ListParams::default())
                    .await?
                    .items
                    .into_iter()
                    .filter(|m| {
                        controller_uid(&m.metadata).is_some() && controller_uid(&m.metadata) == uid
                    })
                    .collect();
                let policy = named_policy(ms).unwrap_or(self.settings.delete_policy);
                let surplus = machines.len().saturating_sub(desired);
                let picked: Vec<DynamicObject> =
                    machines_to_delete(&machines, surplus, policy, self.clock.now())
                        .into_iter()
                        .cloned()
                        .collect();
                for machine in picked
                    .iter()
                    .filter(|m| m.metadata.deletion_timestamp.is_none())
                {
                    let machine_name = name_of(machine);
                    match self
                        .api(Kind::Machine, &namespace)
                        .delete(&machine_name, &DeleteParams::background())
                        .await
                    {
                        Ok(either) => {
                            tracing::info!(machineset = %name, machine = %machine_name, policy = policy.as_str(), "Machine deleted on scale-down");
                            match either.left() {
                                Some(object) => self.machines.upsert(object),
                                None => {
                                    self.machines
                                        .forget(&namespace_of(machine), &name_of(machine));
                                }
                            }
                        }
                        Err(error) if api_code(&error) == Some(404) => {}
                        Err(error) => return Err(error),
                    }
                }
            }
        }
        let machines = self.machines_of(ms);
        let min_ready = ms
            .data
            .pointer("/spec/minReadySeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let template_labels = string_map(ms.data.pointer("/spec/template/metadata/labels"));
        let (mut ready, mut available) = (0usize, 0usize);
        for machine in &machines {
            let (r, a) = self.readiness(machine, min_ready);
            ready += usize::from(r);
            available += usize::from(a);
        }
        let fully_labeled = machines
            .iter()
            .filter(|m| {
                template_labels
                    .iter()
                    .all(|(k, v)| labels_of(m).get(k) == Some(v))
            })
            .count();
        let selector = selector_text(ms.data.pointer("/spec/selector"));
        let mut status = Map::new();
        status.insert(
            "observedGeneration".into(),
            json!(ms.metadata.generation.unwrap_or(1)),
        );
        status.insert("selector".into(), json!(selector));
        status.insert("replicas".into(), json!(machines.len()));
        status.insert("fullyLabeledReplicas".into(), json!(fully_labeled));
        status.insert("readyReplicas".into(), json!(ready));
        status.insert("availableReplicas".into(), json!(available));
        self.write_status(Kind::MachineSet, ms, status).await
    }

    /// Creates one Machine of a MachineSet.
    async fn create_machine(&mut self, ms: &DynamicObject) -> Result<(), kube::Error> {
        let namespace = namespace_of(ms);
        let set_name = name_of(ms);
        let name = self.fresh_name(&set_name, &namespace, |s, namespace, name| {
            s.machines.get(namespace, name).is_some()
        });
        let template = ms
            .data
            .pointer("/spec/template")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let cluster = ms
            .data
            .pointer("/spec/clusterName")
            .cloned()
            .unwrap_or(json!(""));
        let mut labels = template
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        labels.insert(CLUSTER_NAME_LABEL.into(), cluster.clone());
        labels.insert(SET_NAME_LABEL.into(), json!(set_name));
        if let Some(deployment) = ms
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(DEPLOYMENT_NAME_LABEL))
        {
            labels.insert(DEPLOYMENT_NAME_LABEL.into(), json!(deployment));
        }
        let annotations = template
            .pointer("/metadata/annotations")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let mut spec = template
            .get("spec")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        spec.remove("providerID");
        spec.insert("clusterName".into(), cluster);
        let infrastructure = spec.get("infrastructureRef").cloned().unwrap_or_else(|| {
            json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "SimMachineTemplate"})
        });
        spec.insert(
            "infrastructureRef".into(),
            instance_ref(&infrastructure, &name, &namespace),
        );
        let mut bootstrap = spec
            .get("bootstrap")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        if let Some(config) = bootstrap.get("configRef").cloned() {
            bootstrap.insert("configRef".into(), instance_ref(&config, &name, &namespace));
        }
        bootstrap.insert("dataSecretName".into(), json!(name));
        spec.insert("bootstrap".into(), Value::Object(bootstrap));
        let object = json!({
            "apiVersion": format!("{GROUP}/{STORAGE_VERSION}"), "kind": "Machine",
            "metadata": {
                "name": name, "namespace": namespace, "labels": labels, "annotations": annotations, "finalizers": [FINALIZER],
                "ownerReferences": [{
                    "apiVersion": format!("{GROUP}/{STORAGE_VERSION}"), "kind": "MachineSet", "name": set_name,
                    "uid": ms.metadata.uid, "controller": true, "blockOwnerDeletion": true,
                }],
            },
            "spec": spec,
        });
        let object: DynamicObject =
            serde_json::from_value(object).map_err(kube::Error::SerdeError)?;
        let created = self
            .api(Kind::Machine, &namespace)
            .create(&PostParams::default(), &object)
            .await?;
        tracing::info!(machineset = %set_name, machine = %name, %namespace, "Machine created");
        Ledger::bump(&self.ledger.machines_created);
        self.machines.upsert(created);
        Ok(())
    }

    async fn reconcile_machines(&mut self) {
        let now = self.now();
        let machines: Vec<DynamicObject> = self.machines.iter().cloned().collect();
        let live: BTreeSet<String> = machines
            .iter()
            .filter_map(|m| m.metadata.uid.clone())
            .collect();
        let gone: Vec<String> = self
            .tracked
            .keys()
            .filter(|uid| !live.contains(*uid))
            .cloned()
            .collect();
        for uid in gone {
            if let Some(tracked) = self.tracked.remove(&uid) {
                self.forget(tracked);
            }
        }
        // First sight in creation order, so that random draws are taken in it.
        let mut fresh: Vec<&DynamicObject> = machines
            .iter()
            .filter(|m| {
                m.metadata
                    .uid
                    .as_ref()
                    .is_some_and(|u| !self.tracked.contains_key(u))
            })
            .collect();
        fresh.sort_by_key(|m| {
            (
                m.metadata.creation_timestamp.as_ref().map(|t| t.0),
                m.metadata.name.clone(),
            )
        });
        let fresh: Vec<DynamicObject> = fresh.into_iter().cloned().collect();
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
    fn forget(&mut self, mut tracked: Tracked) {
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
            created_at: crate::exoscale::rfc3339(self.clock.now()),
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
            let mut finalizers = machine.metadata.finalizers.clone().unwrap_or_default();
            finalizers.push(FINALIZER.to_string());
            let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": machine.metadata.resource_version}});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(written) => {
                    self.machines.upsert(written.clone());
                    machine = written;
                }
                // Changed meanwhile (or gone): the next pass sees the news.
                Err(error) if matches!(api_code(&error), Some(404 | 409)) => return Ok(()),
                Err(error) => return Err(error),
            }
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
        let current = match api.get(&name).await {
            Ok(current) => current,
            Err(error) if api_code(&error) == Some(404) => {
                tracked.released = true;
                return Ok(());
            }
            Err(error) => return Err(error),
        };
        let kept: Vec<String> = current
            .metadata
            .finalizers
            .iter()
            .flatten()
            .filter(|f| *f != FINALIZER)
            .cloned()
            .collect();
        let patch = json!({"metadata": {"finalizers": kept, "resourceVersion": current.metadata.resource_version}});
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {}
            Err(error) if api_code(&error) == Some(404) => {}
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
        let earlier = |kind: &str, state: &str| {
            previous
                .and_then(|p| p.get("conditions"))
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|c| c["type"] == kind && c["status"] == state)
                .and_then(|c| c.get("lastTransitionTime").cloned())
        };
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
    fn publish(&self) {
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
                    marked_for_deletion: m
                        .metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key(super::DELETE_MACHINE_ANNOTATION)),
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
