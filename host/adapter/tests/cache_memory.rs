//! How much memory a cached pod and a cached Node take: pods of ReplicaSets and k3s Nodes,
//! parsed from the JSON an API server sends as the controller's caches keep them, counted by
//! an allocator that adds up what is live. These are the figures behind the controller's
//! resident memory on large clusters (5,000 nodes, 50,000 pods), so a change that makes
//! either heavier fails here.
//!
//! Its own test binary: the counting allocator sees every allocation of the process, and the
//! tests of this file take turns (`ONE_AT_A_TIME`).
#![allow(unsafe_code)] // a global allocator is an unsafe impl; it only forwards to `System`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::{Arc, Mutex};

use joinery_adapter::lean::{LeanNode, LeanPod};
use serde_json::json;

/// Forwards to the system allocator, keeping the number of bytes live.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call forwards to `System` with the caller's arguments unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Held by each test while it counts, so that no other test allocates meanwhile.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Pod `index` of 2,000, in 20 ReplicaSets over 200 nodes: what a Deployment's pod looks like
/// once running (the same fields as the simulator's preloaded pods).
fn pod_json(index: usize) -> String {
    let app = format!("app-{}", index % 20);
    let since = "2026-01-01T00:00:00Z";
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("{app}-7c9d4f-{index:06}"),
            "generateName": format!("{app}-7c9d4f-"),
            "namespace": format!("team-{}", index % 5),
            "uid": format!("{index:08x}-1111-2222-3333-444455556666"),
            "resourceVersion": format!("{}", 100_000 + index),
            "creationTimestamp": since,
            "labels": {"app": app, "pod-template-hash": "7c9d4f"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app}-7c9d4f"), "uid": format!("owner-{app}"), "controller": true, "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1", "time": since, "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {}}}],
        },
        "spec": {
            "nodeName": format!("node-{:05}", index / 10),
            "schedulerName": "default-scheduler",
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "serviceAccountName": "default",
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "containers": [{
                "name": "app",
                "image": "registry.example/app:1",
                "env": [{"name": "MODE", "value": "production"}],
                "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "512Mi"}},
                "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}],
            }],
            "volumes": [{"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}}],
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ],
        },
        "status": {
            "phase": "Running",
            "qosClass": "Burstable",
            "podIP": format!("10.128.{}.{}", index / 256 % 256, index % 256),
            "hostIP": "10.0.0.1",
            "startTime": since,
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": since},
                {"type": "Initialized", "status": "True", "lastTransitionTime": since},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": since},
                {"type": "Ready", "status": "True", "lastTransitionTime": since},
            ],
            "containerStatuses": [{
                "name": "app", "ready": true, "started": true, "restartCount": 0,
                "image": "registry.example/app:1", "imageID": "registry.example/app@sha256:0000",
                "containerID": format!("containerd://{index:064x}"),
                "state": {"running": {"startedAt": since}},
            }],
        },
    })
    .to_string()
}

/// The live bytes `build` leaves behind, per item it returns.
fn bytes_per_item<T>(count: usize, build: impl FnOnce() -> Vec<T>) -> (isize, Vec<T>) {
    let before = LIVE.load(Ordering::Relaxed);
    let items = build();
    let after = LIVE.load(Ordering::Relaxed);
    ((after - before) / count as isize, items)
}

#[test]
fn a_cached_replica_set_pod_takes_under_700_bytes() {
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    const PODS: usize = 2_000;
    let texts: Vec<String> = (0..PODS).map(pod_json).collect();
    let (lean, pods) = bytes_per_item(PODS, || {
        texts
            .iter()
            .map(|text| {
                let mut pod: LeanPod = serde_json::from_str(text).expect("a pod");
                pod.trim();
                Arc::new(pod)
            })
            .collect::<Vec<_>>()
    });
    let (full, _) = bytes_per_item(PODS, || {
        texts
            .iter()
            .map(|text| {
                serde_json::from_str::<k8s_openapi::api::core::v1::Pod>(text).expect("a pod")
            })
            .collect::<Vec<_>>()
    });
    eprintln!("per pod: {lean} bytes as a cached LeanPod, {full} bytes as a k8s-openapi Pod");
    // Still the pods they were.
    assert_eq!(
        pods[7]
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app"))
            .map(String::as_str),
        Some("app-7")
    );
    assert_eq!(
        pods[7].spec.as_ref().map(|s| s.containers[0].name.as_str()),
        Some("app")
    );
    assert!(
        lean < 700,
        "a cached pod takes {lean} bytes (a k8s-openapi Pod {full})"
    );
    // The record itself, with its reference counts, fits the allocator's 384-byte size class.
    assert!(
        std::mem::size_of::<LeanPod>() + 16 <= 384,
        "a LeanPod is {} bytes inline",
        std::mem::size_of::<LeanPod>()
    );
}

/// Node `index` of 300, as a k3s agent on a cloud instance reports itself: three zones, two
/// instance types, the labels and annotations k3s, the kubelet and Karpenter set, and the
/// images, addresses and system info a kubelet posts.
fn node_json(index: usize) -> String {
    let name = format!("default-{index:05x}");
    let zone = ["zone-a", "zone-b", "zone-c"][index % 3];
    let instance_type = ["standard.medium", "standard.large"][index % 2];
    let ip = format!("10.0.{}.{}", index / 256, index % 256);
    let since = "2026-01-01T00:00:00Z";
    let condition = |kind: &str, status: &str, reason: &str, message: &str| json!({"type": kind, "status": status, "reason": reason, "message": message, "lastHeartbeatTime": "2026-01-01T01:02:03Z", "lastTransitionTime": since});
    let images: Vec<_> = (0..12)
        .map(|i| json!({"names": [format!("registry.example/image-{i}@sha256:{i:064x}"), format!("registry.example/image-{i}:v1")], "sizeBytes": 10_000_000 + i}))
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "uid": format!("{index:08x}-aaaa-bbbb-cccc-ddddeeeeffff"),
            "resourceVersion": format!("{}", 500_000 + index),
            "creationTimestamp": since,
            "labels": {
                "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": name, "node.kubernetes.io/instance-type": instance_type, "beta.kubernetes.io/instance-type": instance_type,
                "topology.kubernetes.io/zone": zone, "topology.kubernetes.io/region": "region-1", "failure-domain.beta.kubernetes.io/zone": zone,
                "karpenter.sh/nodepool": "default", "karpenter.sh/capacity-type": "on-demand", "karpenter.sh/registered": "true",
                "karpenter.sh/initialized": "true", "node.kubernetes.io/exclude-from-external-load-balancers": "false",
            },
            "annotations": {
                "alpha.kubernetes.io/provided-node-ip": ip, "flannel.alpha.coreos.com/public-ip": ip,
                "flannel.alpha.coreos.com/backend-type": "vxlan", "flannel.alpha.coreos.com/kube-subnet-manager": "true",
                "k3s.io/hostname": name, "k3s.io/internal-ip": ip, "k3s.io/node-config-hash": format!("{index:052X}"),
                "node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "karpenter.sh/nodepool-hash": "4012513481623584108", "karpenter.sh/nodepool-hash-version": "v3",
            },
            "finalizers": ["karpenter.sh/termination"],
            "ownerReferences": [{"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": name, "uid": format!("claim-{index:08x}"), "blockOwnerDeletion": true}],
            "managedFields": [{"manager": "k3s", "operation": "Update", "apiVersion": "v1", "time": since, "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {}}}],
        },
        "spec": {"podCIDR": format!("10.42.{index}.0/24"), "podCIDRs": [format!("10.42.{index}.0/24")], "providerID": format!("exoscale://{index:08x}-1111-2222-3333-444455556666")},
        "status": {
            "capacity": {"cpu": "4", "ephemeral-storage": "51474912Ki", "hugepages-2Mi": "0", "memory": "8148204Ki", "pods": "110"},
            "allocatable": {"cpu": "4", "ephemeral-storage": "50074590514", "hugepages-2Mi": "0", "memory": "8148204Ki", "pods": "110"},
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
            ],
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": format!("{index:032x}"), "systemUUID": format!("{index:08x}-0000-0000-0000-000000000000"), "bootID": format!("{index:08x}-9999-9999-9999-999999999999"),
                "kernelVersion": "6.1.0-28-cloud-amd64", "osImage": "Debian GNU/Linux 12 (bookworm)", "containerRuntimeVersion": "containerd://1.7.23-k3s2",
                "kubeletVersion": "v1.31.4+k3s1", "kubeProxyVersion": "v1.31.4+k3s1", "operatingSystem": "linux", "architecture": "amd64"},
            "images": images,
        },
    })
    .to_string()
}

#[test]
fn a_cached_k3s_node_takes_under_2500_bytes() {
    let _turn = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    const NODES: usize = 300;
    let texts: Vec<String> = (0..NODES).map(node_json).collect();
    let (lean, nodes) = bytes_per_item(NODES, || {
        texts
            .iter()
            .map(|text| Arc::new(serde_json::from_str::<LeanNode>(text).expect("a Node")))
            .collect::<Vec<_>>()
    });
    let (full, _) = bytes_per_item(NODES, || {
        texts
            .iter()
            .map(|text| {
                serde_json::from_str::<k8s_openapi::api::core::v1::Node>(text).expect("a Node")
            })
            .collect::<Vec<_>>()
    });
    eprintln!("per node: {lean} bytes as a cached LeanNode, {full} bytes as a k8s-openapi Node");
    // Still the Nodes they were.
    assert_eq!(
        nodes[4].label("topology.kubernetes.io/zone"),
        Some("zone-b")
    );
    assert_eq!(
        nodes[4]
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("k3s.io/internal-ip")),
        Some("10.0.0.4")
    );
    assert!(nodes[4].is_ready());
    // About 2 KB: a k3s Node's own strings (name, uid, addresses, a config hash, its
    // NodeClaim's reference) are most of it; the labels' and annotations' keys and common
    // values are shared.
    assert!(
        lean < 2_500,
        "a cached Node takes {lean} bytes (a k8s-openapi Node {full})"
    );
    assert!(
        lean * 5 < full,
        "a cached Node takes {lean} bytes, a k8s-openapi Node {full}"
    );
}
