//! A large static cluster written straight into the store, for measuring what runs against it
//! (`joinery sim serve --preload-nodes N --preload-pods M`, `joinery bench controller`).
//!
//! The nodes are a node group no autoscaler manages: no `karpenter.sh/*` label, a provider ID
//! of their own scheme (`static:///<name>`), Ready, 16 vCPU / 64 GiB, and tainted
//! `joinery.dev/static=true:NoSchedule` so that only the pods written here land on them. The
//! pods are owned by ReplicaSets (ten per namespace), tolerate that taint, are bound
//! round-robin to the nodes and Running — what a controller has to list, watch and keep in
//! its cluster state without acting on it. Writing through the store skips HTTP: loading 50,000
//! pods takes seconds, not minutes.

use serde_json::{Value, json};

use crate::apiserver::store::Store;
use crate::error::ApiError;

/// The taint on the preloaded nodes (key; value `true`, effect `NoSchedule`).
pub const STATIC_TAINT_KEY: &str = "joinery.dev/static";

/// How large a cluster to preload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preload {
    /// Nodes (`static-00000`, …).
    pub nodes: usize,
    /// Running pods, spread round-robin over the nodes.
    pub pods: usize,
    /// Namespaces the pods are spread over (`static-00`, …), each with ten ReplicaSets.
    pub namespaces: usize,
}

impl Preload {
    /// `nodes` nodes and `pods` pods over 50 namespaces (fewer when there are few pods).
    pub fn new(nodes: usize, pods: usize) -> Self {
        Self {
            nodes,
            pods,
            namespaces: pods.div_ceil(1_000).clamp(1, 50),
        }
    }
}

/// Writes the cluster `shape` describes into `store`, yielding to other tasks now and then so
/// that watches opened meanwhile keep up.
pub async fn preload(store: &Store, shape: Preload) -> Result<(), ApiError> {
    let kind = |group: &str, plural: &str| {
        store
            .lookup(group, "v1", plural)
            .expect("built-in kinds are served")
    };
    let (namespaces_kind, nodes_kind, pods_kind, replica_sets_kind) = (
        kind("", "namespaces"),
        kind("", "nodes"),
        kind("", "pods"),
        kind("apps", "replicasets"),
    );
    for index in 0..shape.nodes {
        store.create(&nodes_kind, None, node(index))?;
        if index % 200 == 0 {
            tokio::task::yield_now().await;
        }
    }
    if shape.pods == 0 || shape.nodes == 0 {
        return Ok(());
    }
    let namespaces = shape.namespaces.max(1);
    // Pod `index` goes to namespace `index % namespaces`, ReplicaSet `index / namespaces % 10`;
    // each ReplicaSet wants exactly the pods it gets, so no workload controller adds any.
    let mut replicas = vec![[0usize; 10]; namespaces];
    for index in 0..shape.pods {
        replicas[index % namespaces][index / namespaces % 10] += 1;
    }
    let mut owners: Vec<Vec<String>> = Vec::with_capacity(namespaces);
    for (n, counts) in replicas.iter().enumerate() {
        let namespace = format!("static-{n:02}");
        store.create(
            &namespaces_kind,
            None,
            json!({"metadata": {"name": namespace}}),
        )?;
        let mut uids = Vec::with_capacity(10);
        for (app, &count) in counts.iter().enumerate() {
            let created = store.create(
                &replica_sets_kind,
                Some(&namespace),
                replica_set(app, count),
            )?;
            uids.push(
                created
                    .pointer("/metadata/uid")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            );
        }
        owners.push(uids);
    }
    for index in 0..shape.pods {
        let n = index % namespaces;
        let app = index / namespaces % 10;
        let namespace = format!("static-{n:02}");
        let node = node_name(index % shape.nodes);
        store.create(
            &pods_kind,
            Some(&namespace),
            pod(index, &namespace, &node, app, &owners[n][app]),
        )?;
        if index % 100 == 0 {
            tokio::task::yield_now().await;
        }
    }
    Ok(())
}

fn node_name(index: usize) -> String {
    format!("static-{index:05}")
}

fn node(index: usize) -> Value {
    let name = node_name(index);
    let zone = ["zone-a", "zone-b", "zone-c"][index % 3];
    json!({
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": name,
                "node.kubernetes.io/instance-type": "static-16",
                "topology.kubernetes.io/zone": zone,
            },
        },
        "spec": {
            "providerID": format!("static:///{name}"),
            "taints": [{"key": STATIC_TAINT_KEY, "value": "true", "effect": "NoSchedule"}],
        },
        "status": node_status(index, &name),
    })
}

/// When every preloaded object started.
const SINCE: &str = "2026-01-01T00:00:00Z";

/// The status of a Ready 16 vCPU / 64 GiB node, `index` picking its address (also used by
/// `joinery bench sim`).
pub(crate) fn node_status(index: usize, name: &str) -> Value {
    let condition = |kind: &str, status: &str, reason: &str| json!({"type": kind, "status": status, "reason": reason, "lastHeartbeatTime": SINCE, "lastTransitionTime": SINCE});
    json!({
        "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"},
        "allocatable": {"cpu": "15890m", "memory": "62Gi", "pods": "110", "ephemeral-storage": "95Gi"},
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            condition("PIDPressure", "False", "KubeletHasSufficientPID"),
            condition("Ready", "True", "KubeletReady"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": format!("10.{}.{}.{}", index / 65_536 % 256, index / 256 % 256, index % 256)},
            {"type": "Hostname", "address": name},
        ],
        "nodeInfo": {
            "kubeletVersion": "v1.33.0", "kubeProxyVersion": "", "osImage": "Simulated Linux", "kernelVersion": "6.1.0",
            "containerRuntimeVersion": "containerd://2.0.0", "architecture": "amd64", "operatingSystem": "linux",
            "machineID": "", "systemUUID": "", "bootID": "",
        },
    })
}

/// The status of a Running pod with one ready container `app`, `index` picking its IP and
/// container ID (also used by `joinery bench sim`).
pub(crate) fn running_pod_status(index: usize) -> Value {
    json!({
        "phase": "Running",
        "qosClass": "Burstable",
        "podIP": format!("10.128.{}.{}", index / 256 % 256, index % 256),
        "hostIP": "10.0.0.1",
        "startTime": SINCE,
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": SINCE},
            {"type": "Initialized", "status": "True", "lastTransitionTime": SINCE},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": SINCE},
            {"type": "Ready", "status": "True", "lastTransitionTime": SINCE},
        ],
        "containerStatuses": [{
            "name": "app", "ready": true, "started": true, "restartCount": 0,
            "image": "registry.example/app:1", "imageID": "registry.example/app@sha256:0000",
            "containerID": format!("containerd://{index:064x}"),
            "state": {"running": {"startedAt": SINCE}},
        }],
    })
}

fn replica_set(app: usize, replicas: usize) -> Value {
    let labels = json!({"app": format!("static-{app}"), "pod-template-hash": "7c9d4f"});
    json!({
        "metadata": {"name": format!("static-{app}-7c9d4f"), "labels": {"app": format!("static-{app}")}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{"name": "app", "image": "registry.example/app:1", "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}}}],
                    "tolerations": [{"key": STATIC_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
                },
            },
        },
        "status": {"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas},
    })
}

fn pod(index: usize, namespace: &str, node: &str, app: usize, owner_uid: &str) -> Value {
    let app_name = format!("static-{app}");
    json!({
        "metadata": {
            "name": format!("{app_name}-7c9d4f-{index:06}"),
            "namespace": namespace,
            "labels": {"app": app_name, "pod-template-hash": "7c9d4f"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app_name}-7c9d4f"), "uid": owner_uid, "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {
            "nodeName": node,
            "schedulerName": "default-scheduler",
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "containers": [{
                "name": "app",
                "image": "registry.example/app:1",
                "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "512Mi"}},
            }],
            "tolerations": [
                {"key": STATIC_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ],
        },
        "status": running_pod_status(index),
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{Node, Pod};
    use kube::api::{Api, ListParams};

    use super::*;
    use crate::{ApiServer, ApiServerOptions};

    #[tokio::test]
    async fn preloads_tainted_static_nodes_and_their_running_pods() {
        let server = ApiServer::start(ApiServerOptions::default()).await.unwrap();
        preload(server.store(), Preload::new(4, 10)).await.unwrap();
        let client = server.client().unwrap();
        let nodes = Api::<Node>::all(client.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        let pods = Api::<Pod>::all(client)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
        assert_eq!((nodes.len(), pods.len()), (4, 10));
        for node in &nodes {
            let taints = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default();
            assert_eq!(taints[0].key, STATIC_TAINT_KEY);
            assert!(
                node.metadata
                    .labels
                    .as_ref()
                    .unwrap()
                    .keys()
                    .all(|k| !k.starts_with("karpenter.sh/"))
            );
        }
        assert!(
            pods.iter()
                .all(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        );
        // Round-robin: the first node holds pods 0, 4 and 8.
        let on_first = pods
            .iter()
            .filter(|p| {
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some("static-00000")
            })
            .count();
        assert_eq!(on_first, 3);
        server.shutdown().await;
    }
}
