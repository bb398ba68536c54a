//! The Node a simulated kubelet registers, and the conditions it reports.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus,
    NodeSystemInfo, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::INSTANCE_ANNOTATION;
use crate::cloud::SimInstance;
use crate::cloud::model::NodeRegistration;
use crate::physics::bootstrap::{Bootstrap, Format};
use crate::physics::{PhysicsContext, PhysicsError};
use joinery_core::labels::{
    ARCH_LABEL, HOSTNAME_LABEL, INSTANCE_TYPE_LABEL, OS_LABEL, REGION_LABEL, ZONE_LABEL,
};

/// The kubelet version nodes report.
const KUBELET_VERSION: &str = "v1.33.1";

/// The conditions a kubelet reports `False` while healthy: a kubelet starting afresh clears
/// them.
const PRESSURE_CONDITIONS: [&str; 4] = [
    "MemoryPressure",
    "DiskPressure",
    "PIDPressure",
    "NetworkUnavailable",
];

/// The address of a machine, from its sequence number.
pub(super) fn machine_address(machine: u32) -> Ipv4Addr {
    Ipv4Addr::from((10u32 << 24) + 10 + (machine % 60_000))
}

/// The first address of a machine's pod range (a /24 out of 10.244.0.0/14).
pub(super) fn pod_range(machine: u32) -> Ipv4Addr {
    Ipv4Addr::from((10u32 << 24) + (244 << 16) + ((machine % 1024) << 8))
}

fn quantities(list: &BTreeMap<String, String>) -> BTreeMap<String, Quantity> {
    list.iter()
        .map(|(k, v)| (k.clone(), Quantity(v.clone())))
        .collect()
}

pub(super) fn condition(
    kind: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: &Time,
) -> NodeCondition {
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
pub(super) fn node_object(
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
pub(super) fn platform_bootstrap(registration: NodeRegistration) -> Bootstrap {
    Bootstrap {
        format: Format::Platform,
        node_name: registration.node_name,
        labels: registration.labels,
        taints: registration.taints,
        provider_id: registration.provider_id,
        max_pods: None,
    }
}

/// Sets the node's `Ready` condition to `True`.
pub(super) async fn mark_ready(shared: &PhysicsContext, name: &str) -> Result<(), PhysicsError> {
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
