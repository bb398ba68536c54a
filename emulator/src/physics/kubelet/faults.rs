//! Faults a scenario puts on nodes, and the node controller noticing a kubelet gone silent.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::node::condition;
use super::{AbortOnDrop, INSTANCE_ANNOTATION};
use crate::physics::{PhysicsContext, PhysicsError};

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
pub(super) async fn instance_of(shared: &PhysicsContext, node: &str) -> Result<String, String> {
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
pub(super) async fn stop_kubelet(
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
pub(super) async fn inject(
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
