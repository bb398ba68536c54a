//! Simulated kubelets, one per instance the cloud launches, plus what the cloud controller
//! manager and the pod garbage collector do around them.
//!
//! For every [`CloudEvent::Launched`] a kubelet task waits the boot delay, then runs the
//! instance's bootstrap (see [`super::bootstrap`] for the userData formats it understands);
//! for a [`CloudEvent::PlatformLaunched`] machine it registers the platform's ready-made
//! Node instead (after the registration's own boot delay, if it has one). A
//! bootstrap it does not understand registers no Node: the kubelet logs a warning and records
//! a `Warning` Event (reason `BootstrapFailed`) naming the instance. Otherwise it registers the
//! Node — labels from the bootstrap plus the ones kubelet and cloud controller set, taints and
//! provider ID from the bootstrap, capacity and allocatable from the instance — turns it
//! `Ready` after the node-ready delay, and runs its pods: pods bound to it become `Running`
//! and ready after the pod-start delay, pods that run to completion (`restartPolicy` `Never`
//! or `OnFailure`, as a Job's) finish after their run time (see [`super::run_time`]) as
//! `Succeeded` or `Failed`, and pods being deleted are removed (with a zero grace period) once
//! their `deletionTimestamp` has come.
//!
//! A scenario's fault ([`NodeFault`]) sets a Node condition or stops the kubelet as a hang
//! does. On [`CloudEvent::Rebooted`] a machine's kubelet starts afresh (registers again, turns
//! the Node `Ready`, clears pressure) unless the fault was a hardware one.
//!
//! On [`CloudEvent::Hung`] the kubelet stops (nothing it would do happens any more) and,
//! after the node monitor grace period, the Node turns `Ready=Unknown`.
//!
//! On [`CloudEvent::Terminated`] the machine is gone: its kubelet stops, its Node is deleted
//! if it still exists, and the pods bound to it are deleted at once. Pods bound to a node that
//! does not exist are deleted after 40 simulated seconds, as by the pod garbage collector.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus,
    NodeSystemInfo, Pod, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use futures::FutureExt;
use futures::future::BoxFuture;

use super::bootstrap::{self, Bootstrap, Format};
use super::cache::Cache;
use super::lag::{Pace, paced};
use super::{
    PhysicsContext, PhysicsError, api_code, exit_code, is_deleting, is_terminal, node_name_of,
    object_reference, run_time, system_time, watch,
};
use crate::cloud::model::NodeRegistration;
use crate::cloud::{CloudEvent, SimInstance};
use joinery_core::labels::{
    ARCH_LABEL, HOSTNAME_LABEL, INSTANCE_TYPE_LABEL, OS_LABEL, REGION_LABEL, ZONE_LABEL,
};

/// The annotation naming the instance a simulated kubelet registered a Node for.
pub(crate) const INSTANCE_ANNOTATION: &str = "sim.joinery.dev/instance-id";

/// How long a pod bound to a missing node is left alone before it is deleted (simulated).
const ORPHAN_QUARANTINE: Duration = Duration::from_secs(40);
/// How often orphaned pods are looked for (simulated).
const POD_GC_INTERVAL: Duration = Duration::from_secs(20);
/// How many bound pods the pod GC reads per request.
const ORPHAN_PAGE: u32 = 500;
/// How long a kubelet waits before retrying a failed registration (simulated).
const REGISTRATION_RETRY: Duration = Duration::from_secs(1);
/// The kubelet version nodes report.
const KUBELET_VERSION: &str = "v1.33.1";

async fn next_event(
    events: &mut Option<broadcast::Receiver<CloudEvent>>,
) -> Result<CloudEvent, broadcast::error::RecvError> {
    match events.as_mut() {
        Some(receiver) => receiver.recv().await,
        None => std::future::pending().await,
    }
}

/// Runs the kubelet manager until the task is aborted (which aborts every kubelet).
pub(crate) async fn run(
    shared: Arc<PhysicsContext>,
    mut events: Option<broadcast::Receiver<CloudEvent>>,
    mut faults: mpsc::UnboundedReceiver<FaultRequest>,
) {
    let mut kubelets: HashMap<String, JoinHandle<()>> = HashMap::new();
    // Machines with a hardware fault (a reboot does not clear it), and the node-controller
    // timers of machines whose kubelet died (a reboot cancels them).
    let mut broken: HashSet<String> = HashSet::new();
    let mut lost: HashMap<String, tokio::task::AbortHandle> = HashMap::new();
    let mut guard = AbortOnDrop(Vec::new());
    let mut machines: u32 = 0;
    let mut pod_gc = tokio::time::interval(
        shared
            .clock
            .to_real(POD_GC_INTERVAL)
            .max(Duration::from_millis(1)),
    );
    let mut orphans: HashMap<String, SystemTime> = HashMap::new();
    loop {
        tokio::select! {
            biased;
            event = next_event(&mut events) => match event {
                Ok(CloudEvent::Launched(instance)) => {
                    boot(&shared, &mut kubelets, &mut guard, &mut machines, instance, None);
                }
                Ok(CloudEvent::PlatformLaunched { instance, registration }) => {
                    boot(&shared, &mut kubelets, &mut guard, &mut machines, instance, Some(registration));
                }
                Ok(CloudEvent::Hung(instance)) => {
                    stop_kubelet(&shared, &mut kubelets, &mut guard, &mut lost, &instance.id).await;
                    tracing::info!(instance = %instance.id, "machine hung; its kubelet stopped");
                }
                Ok(CloudEvent::Rebooted(instance)) => {
                    if broken.contains(&instance.id) {
                        tracing::info!(instance = %instance.id, "machine rebooted; its hardware fault stays");
                    } else {
                        if let Some(timer) = lost.remove(&instance.id) {
                            timer.abort();
                        }
                        tracing::info!(instance = %instance.id, "machine rebooted; its kubelet starts afresh");
                        boot(&shared, &mut kubelets, &mut guard, &mut machines, instance, None);
                    }
                }
                Ok(CloudEvent::Terminated { instance, .. }) => {
                    if let Some(task) = kubelets.remove(&instance.id) {
                        task.abort();
                        let _ = task.await;
                    }
                    if let Err(error) = machine_gone(&shared, &instance).await {
                        tracing::warn!(instance = %instance.id, %error, "cleaning up after a terminated instance failed");
                    }
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "the kubelets missed cloud events; instances launched meanwhile never boot");
                }
                Err(broadcast::error::RecvError::Closed) => {
                    tracing::debug!("the cloud's event channel closed");
                    events = None;
                }
            },
            Some(request) = faults.recv() => {
                let result = inject(&shared, &mut kubelets, &mut guard, &mut lost, &request).await;
                if result.is_ok() && request.hardware
                    && let Ok(instance) = instance_of(&shared, &request.node).await
                {
                    broken.insert(instance);
                }
                let _ = request.done.send(result);
            }
            _ = pod_gc.tick() => {
                if let Err(error) = collect_orphans(&shared, &mut orphans).await {
                    tracing::debug!(%error, "pod garbage collection failed");
                }
            }
        }
        guard.0.retain(|task| !task.is_finished());
    }
}

/// Starts the kubelet of a launched machine (replacing one of the same instance ID).
fn boot(
    shared: &Arc<PhysicsContext>,
    kubelets: &mut HashMap<String, JoinHandle<()>>,
    guard: &mut AbortOnDrop,
    machines: &mut u32,
    instance: SimInstance,
    registration: Option<NodeRegistration>,
) {
    tracing::debug!(instance = %instance.id, platform = registration.is_some(), "instance launched; its kubelet boots");
    kubelets.retain(|_, task| !task.is_finished());
    let task = tokio::spawn(kubelet(
        shared.clone(),
        instance.clone(),
        registration,
        *machines,
    ));
    *machines = machines.wrapping_add(1);
    guard.0.push(task.abort_handle());
    if let Some(previous) = kubelets.insert(instance.id, task) {
        previous.abort();
    }
}

/// How soon a kubelet tries again after an action failed (the API server refused a write).
const ACTION_RETRY: Duration = Duration::from_secs(1);

/// How long the node controller waits for a silent kubelet before marking its Node
/// `Ready=Unknown` (kube-controller-manager's `--node-monitor-grace-period`).
pub(crate) const NODE_MONITOR_GRACE_PERIOD: Duration = Duration::from_secs(40);

/// The node controller noticing a hung machine: after the grace period its Node's `Ready`
/// condition turns `Unknown` (reason `NodeStatusUnknown`), as when kubelet stops posting.
async fn node_lost(shared: Arc<PhysicsContext>, instance_id: String) {
    shared.sleep(NODE_MONITOR_GRACE_PERIOD).await;
    let nodes: Api<Node> = Api::all(shared.client.clone());
    let Ok(list) = nodes.list(&ListParams::default()).await else {
        return;
    };
    let now = shared.now();
    for node in list {
        if node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(INSTANCE_ANNOTATION))
            != Some(&instance_id)
        {
            continue;
        }
        let name = node.metadata.name.clone().unwrap_or_default();
        let mut conditions = node.status.and_then(|s| s.conditions).unwrap_or_default();
        conditions.retain(|c| c.type_ != "Ready");
        conditions.push(condition(
            "Ready",
            "Unknown",
            "NodeStatusUnknown",
            "Kubelet stopped posting node status.",
            &now,
        ));
        let patch = json!({"status": {"conditions": conditions}});
        match nodes
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                tracing::info!(node = %name, "node controller: kubelet stopped posting status; node NotReady")
            }
            Err(error) => {
                tracing::warn!(node = %name, %error, "marking a lost node NotReady failed")
            }
        }
    }
}

/// Aborts the kubelets when the manager goes.
struct AbortOnDrop(Vec<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// A fault a scenario puts on a node (see [`crate::physics::Physics::fault`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeFault {
    /// The kubelet reports `Ready=False` (a broken container runtime or network plugin).
    NotReady,
    /// `Ready` turns `Unknown` at once (the node controller lost touch with the machine).
    Unknown,
    /// The kubelet reports this condition `True` (`MemoryPressure`, `DiskPressure`,
    /// `PIDPressure`, `NetworkUnavailable`).
    Condition(String),
    /// The kubelet dies: nothing it would do happens any more, and after the node monitor
    /// grace period its Node's `Ready` turns `Unknown` (as for a hung machine).
    KubeletDies,
}

impl std::fmt::Display for NodeFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeFault::NotReady => write!(f, "Ready=False"),
            NodeFault::Unknown => write!(f, "Ready=Unknown"),
            NodeFault::Condition(type_) => write!(f, "{type_}=True"),
            NodeFault::KubeletDies => write!(f, "kubelet died"),
        }
    }
}

/// A request to put a fault on a node, answered on `done`.
pub(crate) struct FaultRequest {
    pub(crate) node: String,
    pub(crate) fault: NodeFault,
    pub(crate) hardware: bool,
    pub(crate) done: oneshot::Sender<Result<(), String>>,
}

/// The instance whose simulated kubelet registered `node`.
async fn instance_of(shared: &PhysicsContext, node: &str) -> Result<String, String> {
    let nodes: Api<Node> = Api::all(shared.client.clone());
    let found = nodes
        .get(node)
        .await
        .map_err(|e| format!("node {node}: {e}"))?;
    found
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(INSTANCE_ANNOTATION))
        .cloned()
        .ok_or_else(|| format!("node {node} was not registered by a simulated kubelet"))
}

/// Stops a machine's kubelet for good and starts the node controller's timer that turns its
/// Node `Ready=Unknown`.
async fn stop_kubelet(
    shared: &Arc<PhysicsContext>,
    kubelets: &mut HashMap<String, JoinHandle<()>>,
    guard: &mut AbortOnDrop,
    lost: &mut HashMap<String, tokio::task::AbortHandle>,
    instance: &str,
) {
    if let Some(task) = kubelets.remove(instance) {
        task.abort();
        let _ = task.await;
    }
    let task = tokio::spawn(node_lost(shared.clone(), instance.to_string()));
    guard.0.push(task.abort_handle());
    if let Some(previous) = lost.insert(instance.to_string(), task.abort_handle()) {
        previous.abort();
    }
}

/// Puts a fault on a node.
async fn inject(
    shared: &Arc<PhysicsContext>,
    kubelets: &mut HashMap<String, JoinHandle<()>>,
    guard: &mut AbortOnDrop,
    lost: &mut HashMap<String, tokio::task::AbortHandle>,
    request: &FaultRequest,
) -> Result<(), String> {
    let instance = instance_of(shared, &request.node).await?;
    let (type_, status, reason, message) = match &request.fault {
        NodeFault::KubeletDies => {
            stop_kubelet(shared, kubelets, guard, lost, &instance).await;
            tracing::info!(node = %request.node, %instance, hardware = request.hardware, "fault: the kubelet died");
            return Ok(());
        }
        NodeFault::NotReady => (
            "Ready",
            "False",
            "KubeletNotReady",
            "container runtime network not ready (injected fault)",
        ),
        NodeFault::Unknown => (
            "Ready",
            "Unknown",
            "NodeStatusUnknown",
            "Kubelet stopped posting node status (injected fault).",
        ),
        NodeFault::Condition(type_) => (
            type_.as_str(),
            "True",
            "InjectedFault",
            "the condition was injected by the scenario",
        ),
    };
    set_condition(shared, &request.node, type_, status, reason, message)
        .await
        .map_err(|e| format!("node {}: {e}", request.node))?;
    tracing::info!(node = %request.node, %instance, fault = %request.fault, hardware = request.hardware, "fault injected");
    Ok(())
}

/// Sets one condition of a Node (a new transition time when its status changes).
async fn set_condition(
    shared: &PhysicsContext,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
) -> Result<(), PhysicsError> {
    let nodes: Api<Node> = Api::all(shared.client.clone());
    let node = nodes.get(name).await?;
    let now = shared.now();
    let mut conditions = node.status.and_then(|s| s.conditions).unwrap_or_default();
    let unchanged = conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == status);
    if unchanged {
        return Ok(());
    }
    conditions.retain(|c| c.type_ != type_);
    conditions.push(condition(type_, status, reason, message, &now));
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"conditions": conditions}})),
        )
        .await?;
    Ok(())
}

/// The conditions a kubelet reports `False` while healthy: a kubelet starting afresh clears
/// them.
const PRESSURE_CONDITIONS: [&str; 4] = [
    "MemoryPressure",
    "DiskPressure",
    "PIDPressure",
    "NetworkUnavailable",
];

/// The cloud controller manager and pod garbage collector after an instance is terminated:
/// its Node goes, and so do the pods bound to it.
async fn machine_gone(shared: &PhysicsContext, instance: &SimInstance) -> Result<(), PhysicsError> {
    let nodes: Api<Node> = Api::all(shared.client.clone());
    let mut node_names = Vec::new();
    for node in nodes.list(&ListParams::default()).await? {
        let ours = node
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(INSTANCE_ANNOTATION))
            == Some(&instance.id);
        if !ours {
            continue;
        }
        let name = node.metadata.name.clone().unwrap_or_default();
        match nodes.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {
                tracing::info!(node = %name, instance = %instance.id, "instance terminated; node deleted")
            }
            Err(error) if api_code(&error) == Some(404) => {}
            Err(error) => return Err(error.into()),
        }
        node_names.push(name);
    }
    let pods: Api<Pod> = Api::all(shared.client.clone());
    for node in node_names {
        let bound = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
            .await?;
        for pod in bound {
            force_delete(shared, &pod).await?;
        }
    }
    Ok(())
}

/// Deletes a pod with a zero grace period (a kubelet confirming it stopped, or the pod GC).
async fn force_delete(shared: &PhysicsContext, pod: &Pod) -> Result<Option<Pod>, PhysicsError> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let name = pod.metadata.name.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(shared.client.clone(), &namespace);
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: pod.metadata.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&name, &params).await {
        Ok(either) => {
            tracing::debug!(pod = %name, %namespace, "pod removed");
            Ok(either.left())
        }
        Err(error) if matches!(api_code(&error), Some(404 | 409)) => Ok(None),
        Err(error) => Err(error.into()),
    }
}

/// Deletes pods bound to nodes that have not existed for the quarantine period.
async fn collect_orphans(
    shared: &PhysicsContext,
    orphans: &mut HashMap<String, SystemTime>,
) -> Result<(), PhysicsError> {
    let nodes: HashSet<String> = Api::<Node>::all(shared.client.clone())
        .list(&ListParams::default())
        .await?
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    // The bound pods are read a page at a time: on a cluster of 50,000 pods, one list held
    // them all at once (about 450 MB parsed) every 20 simulated seconds.
    let api = Api::<Pod>::all(shared.client.clone());
    let mut params = ListParams::default()
        .fields("spec.nodeName!=")
        .limit(ORPHAN_PAGE);
    let now = shared.clock.now();
    let mut seen = HashSet::new();
    let mut expired = Vec::new();
    loop {
        let page = api.list(&params).await?;
        for pod in page.items {
            let Some(node) = node_name_of(&pod) else {
                continue;
            };
            let Some(uid) = pod.metadata.uid.clone() else {
                continue;
            };
            if nodes.contains(node) {
                continue;
            }
            seen.insert(uid.clone());
            let since = *orphans.entry(uid).or_insert(now);
            if now.duration_since(since).unwrap_or_default() >= ORPHAN_QUARANTINE {
                expired.push(pod);
            }
        }
        match page.metadata.continue_.filter(|token| !token.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    for pod in expired {
        let node = node_name_of(&pod).unwrap_or_default();
        tracing::info!(pod = %pod.metadata.name.as_deref().unwrap_or_default(), %node, "deleting a pod bound to a node that no longer exists");
        force_delete(shared, &pod).await?;
    }
    orphans.retain(|uid, _| seen.contains(uid));
    Ok(())
}

/// The address of a machine, from its sequence number.
fn machine_address(machine: u32) -> Ipv4Addr {
    Ipv4Addr::from((10u32 << 24) + 10 + (machine % 60_000))
}

/// The first address of a machine's pod range (a /24 out of 10.244.0.0/14).
fn pod_range(machine: u32) -> Ipv4Addr {
    Ipv4Addr::from((10u32 << 24) + (244 << 16) + ((machine % 1024) << 8))
}

fn quantities(list: &BTreeMap<String, String>) -> BTreeMap<String, Quantity> {
    list.iter()
        .map(|(k, v)| (k.clone(), Quantity(v.clone())))
        .collect()
}

fn condition(kind: &str, status: &str, reason: &str, message: &str, now: &Time) -> NodeCondition {
    NodeCondition {
        type_: kind.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(now.clone()),
    }
}

/// The Node a bootstrap registers on an instance.
fn node_object(
    shared: &PhysicsContext,
    instance: &SimInstance,
    bootstrap: &Bootstrap,
    machine: u32,
) -> Node {
    let instance_label = |key: &str, fallback: &str| {
        instance
            .labels
            .get(key)
            .cloned()
            .unwrap_or_else(|| fallback.to_string())
    };
    let arch = instance_label(ARCH_LABEL, "amd64");
    let os = instance_label(OS_LABEL, "linux");
    let mut labels = bootstrap.labels.clone();
    // What the kubelet and the cloud controller manager set win over the bootstrap's.
    labels.insert(HOSTNAME_LABEL.into(), bootstrap.node_name.clone());
    labels.insert(ARCH_LABEL.into(), arch.clone());
    labels.insert(OS_LABEL.into(), os.clone());
    // An instance of no known type or zone (a platform that does not say) sets no label.
    if !instance.instance_type.is_empty() {
        labels.insert(INSTANCE_TYPE_LABEL.into(), instance.instance_type.clone());
    }
    if !instance.zone.is_empty() {
        labels.insert(ZONE_LABEL.into(), instance.zone.clone());
    }
    labels.insert(
        REGION_LABEL.into(),
        instance_label(REGION_LABEL, &shared.region),
    );

    let mut capacity = quantities(&instance.capacity);
    let mut allocatable = if instance.allocatable.is_empty() {
        capacity.clone()
    } else {
        quantities(&instance.allocatable)
    };
    let pods = bootstrap
        .max_pods
        .map(|p| p.to_string())
        .or_else(|| capacity.get("pods").map(|q| q.0.clone()))
        .unwrap_or_else(|| "110".into());
    capacity.insert("pods".into(), Quantity(pods.clone()));
    allocatable.insert("pods".into(), Quantity(pods));

    let taints: Vec<Taint> = bootstrap
        .taints
        .iter()
        .map(|t| Taint {
            key: t.key.clone(),
            value: (!t.value.is_empty()).then(|| t.value.clone()),
            effect: t.effect.as_str().to_string(),
            time_added: None,
        })
        .collect();
    let now = shared.now();
    let address = machine_address(machine).to_string();
    let pod_cidr = format!("{}/24", pod_range(machine));
    let kubelet_version = match bootstrap.format {
        Format::K3s => format!("{KUBELET_VERSION}+k3s1"),
        Format::Rke2 => format!("{KUBELET_VERSION}+rke2r1"),
        Format::Kubeadm | Format::KubeletFlags | Format::Platform | Format::Declared => {
            KUBELET_VERSION.to_string()
        }
    };
    Node {
        metadata: ObjectMeta {
            name: Some(bootstrap.node_name.clone()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([
                (INSTANCE_ANNOTATION.to_string(), instance.id.clone()),
                ("node.alpha.kubernetes.io/ttl".to_string(), "0".to_string()),
                (
                    "volumes.kubernetes.io/controller-managed-attach-detach".to_string(),
                    "true".to_string(),
                ),
            ])),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            provider_id: bootstrap.provider_id.clone(),
            taints: (!taints.is_empty()).then_some(taints),
            pod_cidr: Some(pod_cidr.clone()),
            pod_cidrs: Some(vec![pod_cidr]),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(capacity),
            allocatable: Some(allocatable),
            conditions: Some(vec![
                condition(
                    "MemoryPressure",
                    "False",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                    &now,
                ),
                condition(
                    "DiskPressure",
                    "False",
                    "KubeletHasNoDiskPressure",
                    "kubelet has no disk pressure",
                    &now,
                ),
                condition(
                    "PIDPressure",
                    "False",
                    "KubeletHasSufficientPID",
                    "kubelet has sufficient PID available",
                    &now,
                ),
                condition(
                    "Ready",
                    "False",
                    "KubeletNotReady",
                    "container runtime status check may not have completed yet",
                    &now,
                ),
            ]),
            addresses: Some(vec![
                NodeAddress {
                    type_: "InternalIP".into(),
                    address: address.clone(),
                },
                NodeAddress {
                    type_: "Hostname".into(),
                    address: bootstrap.node_name.clone(),
                },
            ]),
            daemon_endpoints: Some(NodeDaemonEndpoints {
                kubelet_endpoint: Some(DaemonEndpoint { port: 10250 }),
            }),
            node_info: Some(NodeSystemInfo {
                architecture: arch,
                operating_system: os,
                boot_id: format!("boot-{}", instance.id),
                machine_id: format!("machine-{}", instance.id),
                system_uuid: format!("uuid-{}", instance.id),
                container_runtime_version: "containerd://1.7.27".into(),
                kernel_version: "6.8.0-joinery-sim".into(),
                kube_proxy_version: String::new(),
                kubelet_version,
                os_image: "Joinery simulated machine".into(),
                swap: None,
            }),
            ..Default::default()
        }),
    }
}

/// The bootstrap of a managed platform's machine: its registration as given.
fn platform_bootstrap(registration: NodeRegistration) -> Bootstrap {
    Bootstrap {
        format: Format::Platform,
        node_name: registration.node_name,
        labels: registration.labels,
        taints: registration.taints,
        provider_id: registration.provider_id,
        max_pods: None,
    }
}

/// One kubelet: boots, registers, turns ready, then runs its pods until aborted. A machine
/// with a platform `registration` registers that Node (after its own boot delay, if it has
/// one) instead of running its userData.
async fn kubelet(
    shared: Arc<PhysicsContext>,
    instance: SimInstance,
    registration: Option<NodeRegistration>,
    machine: u32,
) {
    let boot_delay = registration
        .as_ref()
        .and_then(|r| r.boot_delay)
        .unwrap_or(shared.boot_delay);
    shared.sleep(boot_delay).await;
    let parsed = match registration {
        Some(registration) => Ok(platform_bootstrap(registration)),
        None => bootstrap::parse(
            &instance.user_data,
            &instance.id,
            shared.declared_boots.get(&instance.user_data).as_ref(),
        ),
    };
    let bootstrap = match parsed {
        Ok(bootstrap) => bootstrap,
        Err(error) => {
            tracing::warn!(instance = %instance.id, %error, "the instance's bootstrap is not understood; no node registers");
            let message = format!(
                "instance {} booted, but its kubelet could not run the bootstrap: {error}; no Node registers",
                instance.id
            );
            let involved = object_reference("Node", "v1", &instance.id, None, None);
            shared
                .record_kubelet_warning(involved, "BootstrapFailed", message, &instance.id)
                .await;
            return;
        }
    };
    let node = node_object(&shared, &instance, &bootstrap, machine);
    let name = bootstrap.node_name.clone();
    if !register(&shared, &instance, &node).await {
        return;
    }
    shared.sleep(shared.node_ready_delay).await;
    // A kubelet keeps posting its status: a refused write is tried again.
    while let Err(error) = mark_ready(&shared, &name).await {
        tracing::warn!(node = %name, %error, "could not report the node ready; retrying");
        shared.sleep(ACTION_RETRY).await;
    }
    let mut runner = PodRunner {
        shared: shared.clone(),
        node: name,
        host_ip: machine_address(machine).to_string(),
        pod_range: pod_range(machine),
        next_ip: 2,
        pods: Cache::new(),
        starting: HashSet::new(),
        removing: HashSet::new(),
        finishing: HashSet::new(),
        timers: BinaryHeap::new(),
        sequence: 0,
        pace: Pace::new(KUBELET_WRITE_RATE, KUBELET_WRITE_BURST),
    };
    runner.run().await;
}

/// Registers the Node, retrying failures like the kubelet does; `false` if it never can.
async fn register(shared: &PhysicsContext, instance: &SimInstance, node: &Node) -> bool {
    let nodes: Api<Node> = Api::all(shared.client.clone());
    let name = node.metadata.name.clone().unwrap_or_default();
    loop {
        match nodes.create(&PostParams::default(), node).await {
            Ok(_) => {
                tracing::info!(node = %name, instance = %instance.id, provider_id = ?node.spec.as_ref().and_then(|s| s.provider_id.as_deref()), "node registered");
                return true;
            }
            Err(error) if api_code(&error) == Some(409) => {
                // A Node of that name exists: the kubelet takes it over if it is this machine's.
                let existing = nodes.get(&name).await.ok();
                let ours = existing
                    .as_ref()
                    .and_then(|n| n.metadata.annotations.as_ref())
                    .and_then(|a| a.get(INSTANCE_ANNOTATION))
                    == Some(&instance.id);
                if ours {
                    return true;
                }
                tracing::warn!(node = %name, instance = %instance.id, "a node of that name belongs to another machine; not registering");
                let message = format!(
                    "instance {} cannot register node {name}: a node of that name already exists",
                    instance.id
                );
                let involved = object_reference("Node", "v1", &name, None, None);
                shared
                    .record_kubelet_warning(involved, "NodeNameConflict", message, &instance.id)
                    .await;
                return false;
            }
            Err(error) => {
                tracing::warn!(node = %name, %error, "node registration failed; retrying");
                shared.sleep(REGISTRATION_RETRY).await;
            }
        }
    }
}

/// Sets the node's `Ready` condition to `True`.
async fn mark_ready(shared: &PhysicsContext, name: &str) -> Result<(), PhysicsError> {
    let nodes: Api<Node> = Api::all(shared.client.clone());
    let node = nodes.get(name).await?;
    let now = shared.now();
    let mut conditions = node.status.and_then(|s| s.conditions).unwrap_or_default();
    conditions.retain(|c| c.type_ != "Ready");
    // A kubelet starting afresh (after a reboot) reports no pressure.
    for c in &mut conditions {
        if PRESSURE_CONDITIONS.contains(&c.type_.as_str()) && c.status != "False" {
            *c = condition(
                &c.type_,
                "False",
                "KubeletReady",
                "the kubelet reports no pressure",
                &now,
            );
        }
    }
    conditions.push(condition(
        "Ready",
        "True",
        "KubeletReady",
        "kubelet is posting ready status",
        &now,
    ));
    nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"conditions": conditions}})),
        )
        .await?;
    tracing::debug!(node = %name, "node ready");
    Ok(())
}

/// Something a kubelet does at a given time.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Action {
    /// Report the pod's containers running.
    Start {
        namespace: String,
        name: String,
        uid: String,
    },
    /// Report the pod's containers exited (a pod that runs to completion).
    Finish {
        namespace: String,
        name: String,
        uid: String,
    },
    /// Remove the pod whose grace period is over.
    Remove {
        namespace: String,
        name: String,
        uid: String,
    },
}

/// The pod side of a kubelet.
struct PodRunner {
    shared: Arc<PhysicsContext>,
    node: String,
    host_ip: String,
    pod_range: Ipv4Addr,
    next_ip: u32,
    pods: Cache<Pod>,
    /// uids with a start planned or done.
    starting: HashSet<String>,
    /// uids with a removal planned.
    removing: HashSet<String>,
    /// uids with an end planned (pods that run to completion).
    finishing: HashSet<String>,
    timers: BinaryHeap<Reverse<(Instant, u64, Action)>>,
    sequence: u64,
    /// The kubelet's own write pace.
    pace: Pace,
}

/// Writes per simulated second of each kubelet, and its bursts (the kubelet's `kubeAPIQPS`
/// and `kubeAPIBurst` defaults).
const KUBELET_WRITE_RATE: f64 = 50.0;
const KUBELET_WRITE_BURST: u32 = 100;

/// The request an [`Action`] makes, ready to run.
type Request = BoxFuture<'static, (Action, Result<Option<Pod>, PhysicsError>)>;

impl PodRunner {
    async fn run(&mut self) {
        let config = watcher::Config::default().fields(&format!("spec.nodeName={}", self.node));
        let mut events = watch(Api::<Pod>::all(self.shared.client.clone()), config);
        loop {
            let next = self.timers.peek().map(|Reverse((at, _, _))| *at);
            tokio::select! {
                biased;
                Some(event) = events.next() => {
                    self.pods.apply(event);
                    if self.pods.is_synced() {
                        self.plan();
                    }
                }
                _ = tokio::time::sleep_until(next.unwrap_or_else(Instant::now)), if next.is_some() => {
                    let mut requests = Vec::new();
                    while let Some(Reverse((at, _, _))) = self.timers.peek() {
                        if *at > Instant::now() {
                            break;
                        }
                        let Some(Reverse((_, _, action))) = self.timers.pop() else { break };
                        requests.extend(self.request(action));
                    }
                    // Every pod due now is started (or removed) at the kubelet's pace, a few
                    // at once, as its pod workers would.
                    let shared = self.shared.clone();
                    for (action, result) in paced(&shared.clock, &mut self.pace, &shared.lag, "kubelets", requests).await {
                        if let Err(error) = self.done(&action, result) {
                            // A real kubelet syncs its pods again on its next pass.
                            tracing::warn!(node = %self.node, %error, "kubelet action failed; retrying");
                            self.schedule(self.shared.clock.to_real(ACTION_RETRY), action);
                        }
                    }
                    // Pods that just started and run to completion get their end planned.
                    self.plan();
                }
            }
        }
    }

    fn schedule(&mut self, after: Duration, action: Action) {
        self.sequence += 1;
        self.timers
            .push(Reverse((Instant::now() + after, self.sequence, action)));
    }

    /// Plans starts for new pods, ends for running pods that run to completion, and removals
    /// for pods being deleted.
    fn plan(&mut self) {
        let mut starts = Vec::new();
        let mut removals = Vec::new();
        let mut ends = Vec::new();
        let mut present = HashSet::new();
        for pod in self.pods.iter() {
            let Some(uid) = pod.metadata.uid.clone() else {
                continue;
            };
            present.insert(uid.clone());
            let namespace = pod.metadata.namespace.clone().unwrap_or_default();
            let name = pod.metadata.name.clone().unwrap_or_default();
            if is_deleting(pod) {
                if !self.removing.contains(&uid) {
                    let at = pod
                        .metadata
                        .deletion_timestamp
                        .as_ref()
                        .map(system_time)
                        .unwrap_or_else(|| self.shared.clock.now());
                    removals.push((
                        self.shared.real_until(at),
                        Action::Remove {
                            namespace,
                            name,
                            uid,
                        },
                    ));
                }
            } else if !is_terminal(pod) {
                let running =
                    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
                if running {
                    self.starting.insert(uid.clone());
                    if let Some(run_for) = run_time(pod)
                        && !self.finishing.contains(&uid)
                    {
                        let started = pod
                            .status
                            .as_ref()
                            .and_then(|s| s.start_time.as_ref())
                            .map(system_time)
                            .unwrap_or_else(|| self.shared.clock.now());
                        ends.push((
                            self.shared.real_until(started + run_for),
                            Action::Finish {
                                namespace,
                                name,
                                uid,
                            },
                        ));
                    }
                } else if !self.starting.contains(&uid) {
                    starts.push(Action::Start {
                        namespace,
                        name,
                        uid,
                    });
                }
            }
        }
        for (after, action) in ends {
            if let Action::Finish { uid, .. } = &action {
                self.finishing.insert(uid.clone());
            }
            self.schedule(after, action);
        }
        for (after, action) in removals {
            if let Action::Remove { uid, .. } = &action {
                self.removing.insert(uid.clone());
            }
            self.schedule(after, action);
        }
        let delay = self.shared.clock.to_real(self.shared.pod_start_delay);
        for action in starts {
            if let Action::Start { uid, .. } = &action {
                self.starting.insert(uid.clone());
            }
            self.schedule(delay, action);
        }
        self.starting.retain(|uid| present.contains(uid));
        self.removing.retain(|uid| present.contains(uid));
        self.finishing.retain(|uid| present.contains(uid));
    }

    /// The request an action makes; `None` when there is nothing left to do (the pod went, or
    /// is being deleted before it started).
    fn request(&mut self, action: Action) -> Option<Request> {
        let (namespace, name, uid) = match &action {
            Action::Start {
                namespace,
                name,
                uid,
            }
            | Action::Finish {
                namespace,
                name,
                uid,
            }
            | Action::Remove {
                namespace,
                name,
                uid,
            } => (namespace, name, uid),
        };
        let pod = self
            .pods
            .get(namespace, name)
            .filter(|p| p.metadata.uid.as_deref() == Some(uid.as_str()))
            .cloned()?;
        let shared = self.shared.clone();
        // Starting and finishing a pod are both one status patch; only the status differs.
        let status = match action {
            Action::Start { .. } => {
                if is_deleting(&pod) {
                    return None;
                }
                self.running_status(&pod)
            }
            Action::Finish { .. } => {
                if is_deleting(&pod) || is_terminal(&pod) {
                    return None;
                }
                self.finished_status(&pod)
            }
            Action::Remove { .. } => {
                return Some(
                    async move {
                        let result = force_delete(&shared, &pod).await;
                        (action, result)
                    }
                    .boxed(),
                );
            }
        };
        Some(
            async move {
                let (namespace, name) = (
                    pod.metadata.namespace.clone().unwrap_or_default(),
                    pod.metadata.name.clone().unwrap_or_default(),
                );
                let api: Api<Pod> = Api::namespaced(shared.client.clone(), &namespace);
                let result = match api
                    .patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(&json!({"status": status})),
                    )
                    .await
                {
                    Ok(updated) => Ok(Some(updated)),
                    Err(error) if api_code(&error) == Some(404) => Ok(None),
                    Err(error) => Err(error.into()),
                };
                (action, result)
            }
            .boxed(),
        )
    }

    /// Takes in what an action's request answered.
    fn done(
        &mut self,
        action: &Action,
        result: Result<Option<Pod>, PhysicsError>,
    ) -> Result<(), PhysicsError> {
        let answer = result?;
        match action {
            Action::Start {
                namespace, name, ..
            } => {
                if let Some(updated) = answer {
                    tracing::debug!(pod = %name, %namespace, node = %self.node, "pod running");
                    self.pods.upsert(updated);
                }
            }
            Action::Finish {
                namespace, name, ..
            } => {
                if let Some(updated) = answer {
                    tracing::debug!(pod = %name, %namespace, node = %self.node, "pod finished");
                    self.pods.upsert(updated);
                }
            }
            Action::Remove {
                namespace, name, ..
            } => match answer {
                Some(object) => self.pods.deleted(object, true),
                None => self.pods.forget(namespace, name),
            },
        }
        Ok(())
    }

    /// The status of a pod whose containers have exited: `Succeeded` with exit code 0 (reason
    /// `Completed`), else `Failed` (reason `Error`), no longer ready.
    fn finished_status(&self, pod: &Pod) -> Value {
        let spec = pod.spec.clone().unwrap_or_default();
        let now = serde_json::to_value(self.shared.now()).unwrap_or(Value::Null);
        let started = pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .and_then(|t| serde_json::to_value(t).ok())
            .unwrap_or_else(|| now.clone());
        let code = exit_code(pod);
        let (phase, reason) = if code == 0 {
            ("Succeeded", "Completed")
        } else {
            ("Failed", "Error")
        };
        let containers: Vec<Value> = spec
            .containers
            .iter()
            .map(|c| {
                json!({
                    "name": c.name, "image": c.image.clone().unwrap_or_default(), "imageID": "",
                    "containerID": container_id(pod, &c.name), "ready": false, "started": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": code, "reason": reason, "startedAt": started, "finishedAt": now, "containerID": container_id(pod, &c.name)}},
                })
            })
            .collect();
        let not_ready = |kind: &str| json!({"type": kind, "status": "False", "reason": "PodCompleted", "lastProbeTime": null, "lastTransitionTime": now});
        let mut conditions: Vec<Value> = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .filter(|c| {
                !matches!(
                    c.type_.as_str(),
                    "PodReadyToStartContainers" | "Ready" | "ContainersReady"
                )
            })
            .filter_map(|c| serde_json::to_value(c).ok())
            .collect();
        conditions.extend([
            json!({"type": "PodReadyToStartContainers", "status": "False", "lastProbeTime": null, "lastTransitionTime": now}),
            not_ready("Ready"),
            not_ready("ContainersReady"),
        ]);
        json!({
            "phase": phase,
            "conditions": conditions,
            "containerStatuses": containers,
        })
    }

    /// The status of the pod with its containers running and ready.
    fn running_status(&mut self, pod: &Pod) -> Value {
        let spec = pod.spec.clone().unwrap_or_default();
        let now = serde_json::to_value(self.shared.now()).unwrap_or(Value::Null);
        let pod_ip = if spec.host_network == Some(true) {
            self.host_ip.clone()
        } else {
            let offset = self.next_ip;
            self.next_ip = if self.next_ip >= 254 {
                2
            } else {
                self.next_ip + 1
            };
            Ipv4Addr::from(u32::from(self.pod_range) + offset).to_string()
        };
        let scheduled_since = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| {
                c.iter()
                    .find(|c| c.type_ == "PodScheduled" && c.status == "True")
            })
            .and_then(|c| c.last_transition_time.as_ref())
            .and_then(|t| serde_json::to_value(t).ok())
            .unwrap_or_else(|| now.clone());
        let condition = |kind: &str, since: &Value| json!({"type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": since});
        let container_id = |container: &str| container_id(pod, container);
        let containers: Vec<Value> = spec
            .containers
            .iter()
            .map(|c| {
                json!({
                    "name": c.name, "image": c.image.clone().unwrap_or_default(), "imageID": "",
                    "containerID": container_id(&c.name), "ready": true, "started": true, "restartCount": 0,
                    "state": {"running": {"startedAt": now}},
                })
            })
            .collect();
        let init_containers: Vec<Value> = spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| {
                let sidecar = c.restart_policy.as_deref() == Some("Always");
                let state = if sidecar {
                    json!({"running": {"startedAt": now}})
                } else {
                    json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now, "containerID": container_id(&c.name)}})
                };
                json!({
                    "name": c.name, "image": c.image.clone().unwrap_or_default(), "imageID": "",
                    "containerID": container_id(&c.name), "ready": sidecar, "started": sidecar, "restartCount": 0, "state": state,
                })
            })
            .collect();
        let mut conditions: Vec<Value> = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .filter(|c| {
                !matches!(
                    c.type_.as_str(),
                    "PodReadyToStartContainers"
                        | "Initialized"
                        | "Ready"
                        | "ContainersReady"
                        | "PodScheduled"
                )
            })
            .filter_map(|c| serde_json::to_value(c).ok())
            .collect();
        conditions.extend([
            condition("PodReadyToStartContainers", &now),
            condition("Initialized", &now),
            condition("Ready", &now),
            condition("ContainersReady", &now),
            condition("PodScheduled", &scheduled_since),
        ]);
        let mut status = json!({
            "phase": "Running",
            "conditions": conditions,
            "hostIP": self.host_ip,
            "hostIPs": [{"ip": self.host_ip}],
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": now,
            "containerStatuses": containers,
        });
        if !init_containers.is_empty() {
            status["initContainerStatuses"] = Value::Array(init_containers);
        }
        status
    }
}

/// A stable made-up ID of a pod's container.
fn container_id(pod: &Pod, container: &str) -> String {
    format!(
        "containerd://{:016x}",
        fnv(&format!(
            "{}/{container}",
            pod.metadata.uid.as_deref().unwrap_or_default()
        ))
    )
}

/// FNV-1a, for stable made-up container IDs.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
