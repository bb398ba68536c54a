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
//! Nodes that exist before the physics starts (a cluster snapshot's, see [`ExistingNode`])
//! are taken over: their kubelet neither boots nor registers, it runs the pods bound to the
//! Node at once (pods `Running` already stay as they are). A Node on an instance the cloud
//! adopted goes with the instance and restarts with it on a reboot; a Node no cloud manages
//! keeps its kubelet until the end.
//!
//! On [`CloudEvent::Terminated`] the machine is gone: its kubelet stops, its Node is deleted
//! if it still exists, and the pods bound to it are deleted at once. Pods bound to a node that
//! does not exist are deleted after 40 simulated seconds, as by the pod garbage collector.

//!
//! The submodules: `node` (the Node object a kubelet registers and its conditions), `faults`
//! (faults a scenario puts on nodes, and the node controller's view of a silent kubelet) and
//! `pods` (the pod side of a kubelet: starting, finishing and removing its pods).

mod faults;
mod node;
mod pods;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;

use super::bootstrap;
use super::cache::{Cache, Cached};
use super::{PhysicsContext, PhysicsError, api_code, node_name_of, object_reference};
use crate::cloud::model::NodeRegistration;
use crate::cloud::{CloudEvent, SimInstance};
pub(crate) use faults::FaultRequest;
pub use faults::NodeFault;
use faults::{inject, instance_of, stop_kubelet};
use node::{machine_address, mark_ready, node_object, platform_bootstrap, pod_range};
use pods::PodRunner;
/// The annotation naming the instance a simulated kubelet registered a Node for.
pub const INSTANCE_ANNOTATION: &str = "sim.joinery.dev/instance-id";

/// How long a pod bound to a missing node is left alone before it is deleted (simulated).
const ORPHAN_QUARANTINE: Duration = Duration::from_secs(40);
/// How often orphaned pods are looked for (simulated).
const POD_GC_INTERVAL: Duration = Duration::from_secs(20);
/// Up to how many Nodes the pod GC names in its field selector (one `spec.nodeName!=` term
/// each), so that the API server serves only the orphans.
const ORPHAN_SELECTOR_NODES: usize = 1000;
/// How many bound pods the pod GC reads per request.
const ORPHAN_PAGE: u32 = 500;
/// How long a kubelet waits before retrying a failed registration (simulated).
const REGISTRATION_RETRY: Duration = Duration::from_secs(1);

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
    existing: Vec<ExistingNode>,
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
    // The Nodes that were there before the physics started, by the ID their kubelet has.
    let mut taken_over: HashMap<String, TakenOver> = HashMap::new();
    for node in existing {
        let id = node.kubelet_id();
        let machine = TakenOver {
            host_ip: node
                .address
                .unwrap_or_else(|| machine_address(machines))
                .to_string(),
            pod_range: pod_range(machines),
            node: node.node,
        };
        machines = machines.wrapping_add(1);
        take_over(
            &shared,
            &mut kubelets,
            &mut guard,
            id.clone(),
            &machine,
            false,
        );
        taken_over.insert(id, machine);
    }
    // The Nodes by name, for the pod GC: watched, so that each Node is read once per change
    // rather than the whole list every round.
    let mut node_events = super::watch(
        Api::<NodeName>::all(shared.client.clone()),
        kube::runtime::watcher::Config::default(),
    );
    let mut nodes: Cache<NodeName> = Cache::new();
    loop {
        tokio::select! {
            biased;
            Some(event) = node_events.next() => nodes.apply(event),
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
                        match taken_over.get(&instance.id) {
                            // An adopted machine has no bootstrap: its kubelet comes back to its Node.
                            Some(machine) => take_over(&shared, &mut kubelets, &mut guard, instance.id.clone(), machine, true),
                            None => boot(&shared, &mut kubelets, &mut guard, &mut machines, instance, None),
                        }
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
            _ = pod_gc.tick(), if nodes.is_synced() => {
                let names = nodes.iter().filter_map(|n| n.metadata.name.clone()).collect();
                if let Err(error) = collect_orphans(&shared, &names, &mut orphans).await {
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

/// A Node that was in the cluster before the physics started (a cluster snapshot's): a
/// kubelet takes it over instead of booting a machine and registering a Node.
#[derive(Debug, Clone, PartialEq)]
pub struct ExistingNode {
    /// The Node's name.
    pub node: String,
    /// The cloud instance it runs on (adopted by the cloud, see
    /// [`SimCloud::adopt`](crate::cloud::SimCloud::adopt)): its termination deletes the Node
    /// and its pods, and a reboot restarts its kubelet. `None`: a node no cloud manages,
    /// whose kubelet runs until the simulation ends.
    pub instance: Option<SimInstance>,
    /// The Node's `InternalIP` (its pods' `hostIP`); default: an address of the simulated
    /// machines' range.
    pub address: Option<std::net::Ipv4Addr>,
}

impl ExistingNode {
    /// The ID the Node's kubelet goes by, which the Node must carry in its
    /// [`INSTANCE_ANNOTATION`] (so that faults reach it): the instance's ID, or
    /// `node/<name>` for a node no cloud manages.
    pub fn kubelet_id(&self) -> String {
        match &self.instance {
            Some(instance) => instance.id.clone(),
            None => format!("node/{}", self.node),
        }
    }
}

/// What a taken-over Node's kubelet needs (again after a reboot).
struct TakenOver {
    node: String,
    host_ip: String,
    pod_range: std::net::Ipv4Addr,
}

/// Starts the kubelet of a Node that exists already (replacing one of the same ID): after a
/// `reboot` it waits the boot delay and reports the Node `Ready` again; then it runs the
/// Node's pods (those `Running` already stay as they are).
fn take_over(
    shared: &Arc<PhysicsContext>,
    kubelets: &mut HashMap<String, JoinHandle<()>>,
    guard: &mut AbortOnDrop,
    id: String,
    machine: &TakenOver,
    reboot: bool,
) {
    tracing::debug!(node = %machine.node, %id, reboot, "a kubelet takes over an existing node");
    kubelets.retain(|_, task| !task.is_finished());
    let shared = shared.clone();
    let (node, host_ip, range) = (
        machine.node.clone(),
        machine.host_ip.clone(),
        machine.pod_range,
    );
    let task = tokio::spawn(async move {
        if reboot {
            shared.sleep(shared.boot_delay).await;
            while let Err(error) = mark_ready(&shared, &node).await {
                tracing::warn!(%node, %error, "could not report the node ready; retrying");
                shared.sleep(ACTION_RETRY).await;
            }
        }
        PodRunner::new(shared, node, host_ip, range).run().await;
    });
    guard.0.push(task.abort_handle());
    if let Some(previous) = kubelets.insert(id, task) {
        previous.abort();
    }
}

/// How soon a kubelet tries again after an action failed (the API server refused a write).
pub(super) const ACTION_RETRY: Duration = Duration::from_secs(1);

/// Aborts the kubelets when the manager goes.
pub(super) struct AbortOnDrop(pub(super) Vec<tokio::task::AbortHandle>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

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
pub(super) async fn force_delete(
    shared: &PhysicsContext,
    pod: &Pod,
) -> Result<Option<Pod>, PhysicsError> {
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

/// A Node read for its name alone: the rest of each object is skipped while parsing (the pod
/// GC only needs to know which Nodes exist).
#[derive(Clone, Debug, serde::Deserialize)]
struct NodeName {
    metadata: kube::api::ObjectMeta,
}

impl Cached for NodeName {}

impl kube::Resource for NodeName {
    type DynamicType = ();
    type Scope = kube::core::ClusterResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "Node".into()
    }

    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "".into()
    }

    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1".into()
    }

    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "nodes".into()
    }

    fn meta(&self) -> &kube::api::ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut kube::api::ObjectMeta {
        &mut self.metadata
    }
}

/// Deletes the pods bound to none of `nodes` (the Nodes that exist) once they have been so
/// for [`ORPHAN_QUARANTINE`]; `orphans` remembers since when each was seen orphaned.
async fn collect_orphans(
    shared: &PhysicsContext,
    nodes: &HashSet<String>,
    orphans: &mut HashMap<String, SystemTime>,
) -> Result<(), PhysicsError> {
    // Only pods bound to none of these nodes are served: on a day-long simulation of 3,000
    // pods, reading every bound pod every 20 simulated seconds was a fifth of the run. Past
    // ORPHAN_SELECTOR_NODES nodes the selector would grow too long, and every bound pod is
    // read instead, a page at a time (on a cluster of 50,000 pods, one list held them all
    // at once, about 450 MB parsed).
    let api = Api::<Pod>::all(shared.client.clone());
    let mut selector = String::from("spec.nodeName!=");
    if nodes.len() <= ORPHAN_SELECTOR_NODES {
        let mut names: Vec<&String> = nodes.iter().collect();
        names.sort();
        for name in names {
            selector.push_str(",spec.nodeName!=");
            selector.push_str(name);
        }
    }
    let mut params = ListParams::default().fields(&selector).limit(ORPHAN_PAGE);
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
    let mut runner = PodRunner::new(
        shared.clone(),
        name,
        machine_address(machine).to_string(),
        pod_range(machine),
    );
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
