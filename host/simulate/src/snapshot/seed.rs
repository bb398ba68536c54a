//! Writing a checked snapshot into an emulated cluster: the cloud adopts its Karpenter
//! nodes, owner references point at the new uids, Nodes, pods and NodeClaims get the status
//! they start with.

use std::collections::BTreeMap;
use std::sync::Arc;

use joinery_emulator::apiserver::resources::ResourceKind;
use joinery_emulator::apiserver::store::{Store, WriteTarget};
use joinery_emulator::cloud::SimCloud;
use joinery_emulator::physics::{ExistingNode, INSTANCE_ANNOTATION};
use serde_json::{Value, json};

use super::{ClusterSnapshot, Entry, Role, Seeded, TAG_CLUSTER, clean, internal_ip, string_at};
use crate::scenario::ScenarioError;

impl ClusterSnapshot {
    /// Writes the snapshot into `store` (before the physics and the host start): Karpenter
    /// nodes are adopted by `cloud` (tagged for cluster `cluster`), owner references point
    /// at the new uids, and every Node gets a fresh healthy status. Returns the Nodes whose
    /// kubelets the physics takes over and the notes for the timeline; the error names the
    /// object (a Karpenter node the catalog cannot hold, an object the server refuses).
    pub fn seed(
        &self,
        store: &Store,
        cloud: &SimCloud,
        cluster: &str,
    ) -> Result<Seeded, ScenarioError> {
        let err = |message: String| ScenarioError {
            origin: self.origin.clone(),
            message,
        };
        let now = store.now_timestamp();
        let mut seeded = Seeded {
            notes: self.notes.clone(),
            ..Default::default()
        };
        // Old uid → new uid, and (group, kind, namespace, name) → new uid.
        let mut uids: BTreeMap<String, String> = BTreeMap::new();
        let mut by_name: BTreeMap<(String, String, String, String), String> = BTreeMap::new();
        let mut dangling: BTreeMap<String, usize> = BTreeMap::new();
        // Adopted nodes' instances, by NodeClaim.
        let mut instances: BTreeMap<String, joinery_emulator::cloud::SimInstance> = BTreeMap::new();
        for entry in self
            .objects
            .iter()
            .filter(|e| matches!(e.role, Role::AdoptedNode { .. }))
        {
            let Role::AdoptedNode {
                claim,
                adoption,
                was,
                ..
            } = &entry.role
            else {
                continue;
            };
            let mut adoption = adoption.clone();
            adoption
                .tags
                .insert(TAG_CLUSTER.to_string(), cluster.to_string());
            let instance = cloud.adopt(&adoption).map_err(|e| {
                err(format!(
                    "{}: the simulated cloud cannot adopt this Karpenter node (NodeClaim {claim}): {e}",
                    entry.place
                ))
            })?;
            seeded.notes.push(format!(
                "adopted Node {} (NodeClaim {claim}, {} in {}) as instance {} (was {was})",
                entry.name, instance.instance_type, instance.zone, instance.id
            ));
            instances.insert(claim.clone(), instance);
        }
        for entry in &self.objects {
            let kind = lookup(store, entry).ok_or_else(|| {
                err(format!(
                    "{}: kind: not served by the emulated cluster",
                    entry.place
                ))
            })?;
            let mut body = entry.body.clone();
            let status = match &entry.role {
                Role::Claim { status, .. } => {
                    Some(claim_status(status, &instances, &entry.name, &now))
                }
                _ => None,
            };
            clean(&mut body);
            let owners = body
                .pointer_mut("/metadata/ownerReferences")
                .and_then(Value::as_array_mut);
            if let Some(owners) = owners {
                let namespace = entry.namespace.clone().unwrap_or_default();
                owners.retain_mut(|owner| {
                    let api_version = owner["apiVersion"].as_str().unwrap_or_default();
                    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
                    let owner_kind = owner["kind"].as_str().unwrap_or_default().to_string();
                    let owner_name = owner["name"].as_str().unwrap_or_default().to_string();
                    let found = owner["uid"]
                        .as_str()
                        .and_then(|u| uids.get(u))
                        .or_else(|| {
                            by_name
                                .get(&(
                                    group.into(),
                                    owner_kind.clone(),
                                    namespace.clone(),
                                    owner_name.clone(),
                                ))
                                .or_else(|| {
                                    by_name.get(&(
                                        group.into(),
                                        owner_kind.clone(),
                                        String::new(),
                                        owner_name.clone(),
                                    ))
                                })
                        })
                        .cloned();
                    match found {
                        Some(uid) => {
                            owner["uid"] = Value::String(uid);
                            true
                        }
                        None => {
                            *dangling
                                .entry(format!("{owner_kind} {owner_name}"))
                                .or_default() += 1;
                            false
                        }
                    }
                });
            }
            match &entry.role {
                Role::StaticNode { address } => {
                    let existing = ExistingNode {
                        node: entry.name.clone(),
                        instance: None,
                        address: *address,
                    };
                    body["status"] = node_status(&entry.body, &now);
                    annotate(&mut body, &existing.kubelet_id());
                    seeded.existing_nodes.push(existing);
                }
                Role::AdoptedNode { claim, address, .. } => {
                    let instance = instances[claim].clone();
                    body["spec"]["providerID"] = Value::String(instance.provider_id.clone());
                    body["status"] = node_status(&entry.body, &now);
                    annotate(&mut body, &instance.id);
                    seeded.existing_nodes.push(ExistingNode {
                        node: entry.name.clone(),
                        instance: Some(instance),
                        address: *address,
                    });
                }
                Role::Pod {
                    status: Some(status),
                } => {
                    body["status"] = if status.is_null() {
                        running_status(&entry.body, &self.node_address(&entry.body), &now)
                    } else {
                        status.clone()
                    };
                }
                Role::Pod { status: None } | Role::Plain | Role::Claim { .. } => {}
            }
            let created = store
                .create(&kind, entry.namespace.as_deref(), body)
                .map_err(|e| {
                    err(format!(
                        "{}: the emulated API server refused it: {}",
                        entry.place, e.message
                    ))
                })?;
            if let Some(status) = status {
                store
                    .update(
                        &kind,
                        entry.namespace.as_deref(),
                        &entry.name,
                        WriteTarget::Status,
                        |current| {
                            let mut next = current.clone();
                            next["status"] = status;
                            Ok(next)
                        },
                    )
                    .map_err(|e| {
                        err(format!(
                            "{}: status: the emulated API server refused it: {}",
                            entry.place, e.message
                        ))
                    })?;
            }
            if let Some(uid) = created.pointer("/metadata/uid").and_then(Value::as_str) {
                if let Some(old) = &entry.uid {
                    uids.insert(old.clone(), uid.to_string());
                }
                by_name.insert(
                    (
                        entry.group.clone(),
                        entry.kind.clone(),
                        entry.namespace.clone().unwrap_or_default(),
                        entry.name.clone(),
                    ),
                    uid.to_string(),
                );
            }
        }
        if !dangling.is_empty() {
            let total: usize = dangling.values().sum();
            let owners: Vec<&str> = dangling.keys().map(String::as_str).collect();
            seeded.notes.push(format!(
                "{total} object(s) name owners the snapshot lacks ({}): those owner references are dropped, so nothing recreates them once they go",
                joinery_adapter::snapshot::abbreviate(&owners, 5)
            ));
        }
        Ok(seeded)
    }

    /// The `InternalIP` of the Node a pod is bound to, as its `hostIP`.
    fn node_address(&self, pod: &Value) -> String {
        let node = string_at(pod, "/spec/nodeName").unwrap_or_default();
        self.objects
            .iter()
            .find(|e| e.kind == "Node" && e.name == node)
            .and_then(|e| internal_ip(&e.body))
            .map(|a| a.to_string())
            .unwrap_or_default()
    }
}

/// The served kind of an entry.
fn lookup(store: &Store, entry: &Entry) -> Option<Arc<ResourceKind>> {
    store
        .kinds_at(&entry.group, &entry.version)
        .into_iter()
        .find(|k| k.kind == entry.kind)
}

/// Puts the kubelet's ID on a Node (faults and the cloud's termination find its kubelet by it).
fn annotate(node: &mut Value, id: &str) {
    let metadata = &mut node["metadata"];
    if !metadata["annotations"].is_object() {
        metadata["annotations"] = json!({});
    }
    metadata["annotations"][INSTANCE_ANNOTATION] = Value::String(id.to_string());
}

/// A Node's status at the start: its capacity, allocatable, addresses and system info as in
/// the snapshot, and the conditions of a healthy, `Ready` node since `now`.
fn node_status(node: &Value, now: &str) -> Value {
    let mut status = json!({});
    for field in [
        "capacity",
        "allocatable",
        "addresses",
        "nodeInfo",
        "daemonEndpoints",
    ] {
        if let Some(value) = node.pointer(&format!("/status/{field}")) {
            status[field] = value.clone();
        }
    }
    let condition = |kind: &str, value: &str, reason: &str, message: &str| {
        json!({"type": kind, "status": value, "reason": reason, "message": message,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    status["conditions"] = json!([
        condition(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available"
        ),
        condition(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure"
        ),
        condition(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available"
        ),
        condition(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status"
        ),
    ]);
    status
}

/// A bound, running pod's status at the start: `Running` and ready since `now`, its IP kept,
/// its containers running.
fn running_status(pod: &Value, host_ip: &str, now: &str) -> Value {
    let condition = |kind: &str| json!({"type": kind, "status": "True", "lastTransitionTime": now});
    let containers: Vec<Value> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| {
            json!({"name": c["name"], "image": c["image"], "imageID": "", "ready": true, "started": true,
                   "restartCount": 0, "state": {"running": {"startedAt": now}}})
        })
        .collect();
    let mut status = json!({
        "phase": "Running",
        "conditions": [condition("PodScheduled"), condition("Initialized"), condition("ContainersReady"), condition("Ready")],
        "startTime": now,
        "containerStatuses": containers,
    });
    if !host_ip.is_empty() {
        status["hostIP"] = json!(host_ip);
        status["hostIPs"] = json!([{"ip": host_ip}]);
    }
    for field in ["podIP", "podIPs", "qosClass"] {
        if let Some(value) = pod.pointer(&format!("/status/{field}")) {
            status[field] = value.clone();
        }
    }
    status
}

/// An adopted node's NodeClaim status: as in the snapshot (node name, capacity, allocatable,
/// image), with the instance's provider ID and the conditions of an initialized claim since
/// `now`.
fn claim_status(
    status: &Value,
    instances: &BTreeMap<String, joinery_emulator::cloud::SimInstance>,
    claim: &str,
    now: &str,
) -> Value {
    let mut out = json!({});
    for field in ["nodeName", "capacity", "allocatable", "imageID"] {
        if let Some(value) = status.get(field) {
            out[field] = value.clone();
        }
    }
    if let Some(instance) = instances.get(claim) {
        out["providerID"] = Value::String(instance.provider_id.clone());
    }
    let condition = |kind: &str| json!({"type": kind, "status": "True", "reason": kind, "message": "", "lastTransitionTime": now});
    out["conditions"] = json!([
        condition("Launched"),
        condition("Registered"),
        condition("Initialized"),
        condition("Ready"),
    ]);
    out
}
