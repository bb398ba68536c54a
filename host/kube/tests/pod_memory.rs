//! How much memory a cached pod takes: pods of ReplicaSets, parsed from the JSON an API
//! server sends and trimmed as the controller's pod cache keeps them, counted by an allocator
//! that adds up what is live. This is the figure behind the controller's resident memory on
//! large clusters (50,000 pods), so a change that makes each pod heavier fails here.
//!
//! Its own test binary: the counting allocator sees every allocation of the process, and this
//! file runs one test at a time.
#![allow(unsafe_code)] // a global allocator is an unsafe impl; it only forwards to `System`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};

use joinery_kube::lean::LeanPod;
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
        LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System` with this layout.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

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
    let (full, _) = bytes_per_item(PODS, || texts.iter().map(|text| serde_json::from_str::<k8s_openapi::api::core::v1::Pod>(text).expect("a pod")).collect::<Vec<_>>());
    eprintln!("per pod: {lean} bytes as a cached LeanPod, {full} bytes as a k8s-openapi Pod");
    // Still the pods they were.
    assert_eq!(pods[7].metadata.labels.as_ref().and_then(|l| l.get("app")).map(String::as_str), Some("app-7"));
    assert_eq!(pods[7].spec.as_ref().map(|s| s.containers[0].name.as_str()), Some("app"));
    assert!(lean < 700, "a cached pod takes {lean} bytes (a k8s-openapi Pod {full})");
    // The record itself, with its reference counts, fits the allocator's 384-byte size class.
    assert!(std::mem::size_of::<LeanPod>() + 16 <= 384, "a LeanPod is {} bytes inline", std::mem::size_of::<LeanPod>());
}
