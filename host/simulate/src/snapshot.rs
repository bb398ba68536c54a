//! A cluster snapshot as a simulation's starting state (`snapshot: FILE` in a scenario, or
//! `joinery simulate --snapshot FILE`).
//!
//! The snapshot is what `joinery schedule` reads — `kubectl get -o yaml` output, a `List` or
//! a stream of documents — and is read by the same reader first
//! ([`joinery_adapter::snapshot::Snapshot::parse`]), so a file that works for one works for
//! the other. Then every object is checked against what the emulated cluster serves and
//! written into its store before the physics and the host start, as `kubectl apply` of the
//! exported YAML would create it: server-set fields go (`uid`, `resourceVersion`,
//! `managedFields`, `creationTimestamp`, `generation`, the last-applied annotation), owner
//! references are pointed at the new uids, and workloads lose their `status` (their
//! controllers compute it again). Times restart at the simulation's start.
//!
//! - **Nodes** keep their labels, taints, capacity, allocatable, addresses and system info,
//!   and start `Ready`. A Node that a NodeClaim of the snapshot names (its `status.nodeName`
//!   or `status.providerID`) is **Karpenter's**: the simulated cloud adopts it as a running
//!   instance of the catalog's type and offering (so consolidation can delete it and the
//!   cloud's cost counts it), and the claim and the Node get the instance's provider ID. Any
//!   other Node runs as a node of its own: a kubelet keeps it and runs its pods until the end.
//! - **Pods** bound to a node stay bound and `Running` (a pod bound but not started is
//!   started by the node's kubelet); pending pods are pending; finished pods keep their
//!   phase. A pod being deleted is left out.
//! - **NodeClaims** of adopted nodes get the status of an initialized claim. A NodeClaim with
//!   no Node in the snapshot (still launching) is left out: its pods are provisioned again.
//! - Everything else the emulated cluster serves is created as written; namespaces the
//!   objects use but the snapshot lacks are created.
//!
//! What cannot be used is an error naming the file, the document (and the line, when the
//! YAML reader gives one), the object and the field: text that is not YAML, a kind the
//! emulated cluster does not serve, a pod bound to a node the snapshot lacks, the same object
//! twice, a Node or NodeClaim being deleted, a Karpenter node the cloud cannot hold (another
//! cloud than `simcloud`, an instance type or offering its catalog lacks). What is left out or
//! changed on purpose is listed on the run's timeline.
//!
//! This module reads and checks; `seed` writes a checked snapshot into a cluster.

use std::collections::{BTreeMap, BTreeSet};

use joinery_emulator::apiserver::resources::builtin_kinds;
use joinery_emulator::cloud::Adoption;
use joinery_emulator::physics::ExistingNode;
use serde_json::{Value, json};

use crate::scenario::ScenarioError;

/// The label naming a node's instance type.
const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";
/// The label naming a node's zone.
const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// The label naming a Karpenter node's capacity type.
const CAPACITY_TYPE_LABEL: &str = "karpenter.sh/capacity-type";
/// The label naming a Karpenter node's NodePool.
const NODEPOOL_LABEL: &str = "karpenter.sh/nodepool";
/// The instance tags the `simcloud` plugin finds a claim's instance by.
const TAG_NODECLAIM: &str = "karpenter.sh/nodeclaim";
const TAG_NODEPOOL: &str = "karpenter.sh/nodepool";
const TAG_CLUSTER: &str = "joinery.dev/cluster";
/// The annotation `kubectl apply` keeps the applied object in (dropped: it is rewritten).
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// Namespaces every emulated cluster has.
const STANDARD_NAMESPACES: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

/// Kinds a snapshot may hold that are not written into the cluster: what the cluster makes
/// of its own (events, leases) and the CRDs (the simulation installs its own).
const SKIPPED_KINDS: [(&str, &str); 4] = [
    ("", "Event"),
    ("events.k8s.io", "Event"),
    ("coordination.k8s.io", "Lease"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
];

/// The order objects are created in, so that owners exist before what they own and Nodes
/// before the pods bound to them; kinds not listed come after the listed configuration kinds.
const CREATION_ORDER: [&str; 15] = [
    "Namespace",
    "StorageClass",
    "PersistentVolume",
    "NodeOverlay",
    "NodePool",
    "PersistentVolumeClaim",
    "Deployment",
    "CronJob",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "Job",
    "NodeClaim",
    "Node",
    "Pod",
];

/// Where a kind comes in [`CREATION_ORDER`]: kinds not listed come right before the workloads.
fn rank(kind: &str) -> usize {
    const UNLISTED: usize = 5;
    match CREATION_ORDER.iter().position(|k| *k == kind) {
        Some(p) if p < UNLISTED => p,
        Some(p) => p + 1,
        None => UNLISTED,
    }
}

/// A snapshot read, checked and ready to be written into an emulated cluster.
#[derive(Debug, Clone)]
pub struct ClusterSnapshot {
    /// The file it was read from.
    pub origin: String,
    /// The objects, in creation order.
    objects: Vec<Entry>,
    /// What is left out or changed on purpose, for the timeline.
    notes: Vec<String>,
}

/// One object of the snapshot, cleaned for creation.
#[derive(Debug, Clone)]
struct Entry {
    /// `document 3, items[2] (Pod default/web-1)`: where it is, for errors.
    place: String,
    group: String,
    version: String,
    kind: String,
    namespace: Option<String>,
    name: String,
    /// Its uid in the snapshot (what owner references name).
    uid: Option<String>,
    /// The object to create, without status.
    body: Value,
    /// What the object is to the simulation.
    role: Role,
}

#[derive(Debug, Clone)]
enum Role {
    /// Created as written.
    Plain,
    /// A Node no cloud manages.
    StaticNode { address: Option<std::net::Ipv4Addr> },
    /// A Karpenter node, adopted by the cloud; `claim` is its NodeClaim's name.
    AdoptedNode {
        claim: String,
        address: Option<std::net::Ipv4Addr>,
        adoption: Adoption,
        was: String,
    },
    /// The NodeClaim of an adopted node, with its status in the snapshot.
    Claim { status: Value },
    /// A pod, with the status it starts with (`None`: pending, the server sets it).
    Pod { status: Option<Value> },
}

/// What writing a snapshot into a cluster gave.
#[derive(Debug, Default)]
pub struct Seeded {
    /// The Nodes whose kubelets the physics takes over.
    pub existing_nodes: Vec<ExistingNode>,
    /// What is left out or changed on purpose, for the timeline.
    pub notes: Vec<String>,
}

/// Where an object is: `document 3` or `document 3, items[7]`.
fn place(document: usize, item: Option<usize>) -> String {
    match item {
        Some(i) => format!("document {document}, items[{i}]"),
        None => format!("document {document}"),
    }
}

/// The kinds the emulated cluster serves, by (group, kind): their versions and whether they
/// are namespaced (the built-in kinds, the karpenter.sh and CapacityBuffer CRDs, and the
/// NodeClasses of the built-in cloud plugins).
fn served_kinds() -> BTreeMap<(String, String), (BTreeSet<String>, bool)> {
    let mut served: BTreeMap<(String, String), (BTreeSet<String>, bool)> = BTreeMap::new();
    for kind in builtin_kinds() {
        let entry = served
            .entry((kind.group.clone(), kind.kind.clone()))
            .or_insert_with(|| (BTreeSet::new(), kind.namespaced));
        entry.0.insert(kind.version.clone());
    }
    let mut crds: Vec<Value> = joinery_api::crds()
        .into_iter()
        .filter_map(|crd| serde_json::to_value(crd).ok())
        .collect();
    for (_, text) in crate::simulation::NODECLASS_CRDS {
        if let Ok(crd) = serde_norway::from_str::<Value>(text) {
            crds.push(crd);
        }
    }
    for crd in crds {
        let spec = &crd["spec"];
        let (Some(group), Some(kind)) = (spec["group"].as_str(), spec["names"]["kind"].as_str())
        else {
            continue;
        };
        let versions = spec["versions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v["name"].as_str().map(String::from))
            .collect();
        served.insert(
            (group.to_string(), kind.to_string()),
            (versions, spec["scope"] == "Namespaced"),
        );
    }
    served
}

/// Reads one object of a kind whose fields have types (so that plain YAML scalars such as
/// `cpu: 1` read as the strings Kubernetes expects) into JSON; other kinds are read as they
/// are.
fn typed_json(group: &str, kind: &str, yaml: &serde_norway::Value) -> Result<Value, String> {
    fn via<T: serde::de::DeserializeOwned + serde::Serialize>(
        yaml: &serde_norway::Value,
    ) -> Result<Value, String> {
        // Through text, where an untagged scalar reads as whatever the field wants.
        let text = serde_norway::to_string(yaml).map_err(|e| e.to_string())?;
        let typed: T = serde_norway::from_str(&text).map_err(|e| e.to_string())?;
        serde_json::to_value(typed).map_err(|e| e.to_string())
    }
    use k8s_openapi::api::{apps, batch, core, policy, storage};
    match (group, kind) {
        ("", "Pod") => via::<core::v1::Pod>(yaml),
        ("", "Node") => via::<core::v1::Node>(yaml),
        ("", "Namespace") => via::<core::v1::Namespace>(yaml),
        ("", "ConfigMap") => via::<core::v1::ConfigMap>(yaml),
        ("", "Secret") => via::<core::v1::Secret>(yaml),
        ("", "Service") => via::<core::v1::Service>(yaml),
        ("", "PodTemplate") => via::<core::v1::PodTemplate>(yaml),
        ("", "PersistentVolume") => via::<core::v1::PersistentVolume>(yaml),
        ("", "PersistentVolumeClaim") => via::<core::v1::PersistentVolumeClaim>(yaml),
        ("", "ReplicationController") => via::<core::v1::ReplicationController>(yaml),
        ("apps", "Deployment") => via::<apps::v1::Deployment>(yaml),
        ("apps", "ReplicaSet") => via::<apps::v1::ReplicaSet>(yaml),
        ("apps", "DaemonSet") => via::<apps::v1::DaemonSet>(yaml),
        ("apps", "StatefulSet") => via::<apps::v1::StatefulSet>(yaml),
        ("batch", "Job") => via::<batch::v1::Job>(yaml),
        ("batch", "CronJob") => via::<batch::v1::CronJob>(yaml),
        ("policy", "PodDisruptionBudget") => via::<policy::v1::PodDisruptionBudget>(yaml),
        ("storage.k8s.io", "StorageClass") => via::<storage::v1::StorageClass>(yaml),
        ("storage.k8s.io", "CSINode") => via::<storage::v1::CSINode>(yaml),
        ("karpenter.sh", "NodePool") => via::<joinery_api::NodePool>(yaml),
        ("karpenter.sh", "NodeClaim") => via::<joinery_api::NodeClaim>(yaml),
        ("karpenter.sh", "NodeOverlay") => via::<joinery_api::NodeOverlay>(yaml),
        ("autoscaling.x-k8s.io", "CapacityBuffer") => via::<joinery_api::CapacityBuffer>(yaml),
        _ => serde_norway::from_value(yaml.clone()).map_err(|e| e.to_string()),
    }
}

/// The documents of a YAML stream with `*List` documents unpacked: (place, object).
fn raw_objects(text: &str) -> Result<Vec<(usize, Option<usize>, serde_norway::Value)>, String> {
    use serde::Deserialize;
    let mut out = Vec::new();
    for (i, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
        let document = i + 1;
        let value = serde_norway::Value::deserialize(doc)
            .map_err(|e| format!("{}: {e}", place(document, None)))?;
        if value.is_null() {
            continue;
        }
        let is_list = value
            .get("kind")
            .and_then(serde_norway::Value::as_str)
            .is_some_and(|k| k.ends_with("List"))
            && value.get("items").is_some();
        if is_list {
            let items = value
                .get("items")
                .and_then(serde_norway::Value::as_sequence)
                .cloned()
                .unwrap_or_default();
            for (j, item) in items.into_iter().enumerate() {
                if !item.is_null() {
                    out.push((document, Some(j), item));
                }
            }
        } else {
            out.push((document, None, value));
        }
    }
    Ok(out)
}

/// The string at `pointer`, if any and not empty.
fn string_at<'a>(object: &'a Value, pointer: &str) -> Option<&'a str> {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// A label of an object.
fn label<'a>(object: &'a Value, key: &str) -> Option<&'a str> {
    object
        .pointer("/metadata/labels")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The Node's `InternalIP`, if it has one that parses.
fn internal_ip(node: &Value) -> Option<std::net::Ipv4Addr> {
    node.pointer("/status/addresses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|a| a["type"] == "InternalIP")
        .and_then(|a| a["address"].as_str())
        .and_then(|a| a.parse().ok())
}

/// Drops what the API server sets and what a fresh object must not carry, as `kubectl
/// apply` of the exported object would need: server-set metadata, the last-applied
/// annotation and the status.
fn clean(object: &mut Value) {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in [
            "uid",
            "resourceVersion",
            "managedFields",
            "creationTimestamp",
            "generation",
            "selfLink",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            metadata.remove(field);
        }
        if let Some(annotations) = metadata
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.remove(LAST_APPLIED);
        }
    }
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
    }
}

impl ClusterSnapshot {
    /// Reads and checks a snapshot: `origin` names it in errors, `provider` is the scenario's
    /// cloud (only the simulated cloud adopts Karpenter nodes).
    pub fn parse(
        text: &str,
        origin: &str,
        provider: &str,
    ) -> Result<ClusterSnapshot, ScenarioError> {
        let err = |message: String| ScenarioError {
            origin: origin.to_string(),
            message,
        };
        // The reader `joinery schedule` uses: YAML errors with their line, objects without
        // kind or name, Karpenter kinds of another version, the same object twice.
        joinery_adapter::snapshot::Snapshot::parse(text).map_err(|e| err(e.to_string()))?;
        let served = served_kinds();
        let mut entries = Vec::new();
        let mut notes = Vec::new();
        let mut skipped: BTreeMap<String, usize> = BTreeMap::new();
        let mut seen: BTreeMap<(String, String, String, String), String> = BTreeMap::new();
        for (document, item, yaml) in raw_objects(text).map_err(err)? {
            let at = place(document, item);
            let api_version = yaml
                .get("apiVersion")
                .and_then(serde_norway::Value::as_str)
                .unwrap_or_default()
                .to_string();
            let kind = yaml
                .get("kind")
                .and_then(serde_norway::Value::as_str)
                .unwrap_or_default()
                .to_string();
            let (group, version) = match api_version.rsplit_once('/') {
                Some((g, v)) => (g.to_string(), v.to_string()),
                None => (String::new(), api_version.clone()),
            };
            let name = yaml
                .get("metadata")
                .and_then(|m| m.get("name"))
                .and_then(serde_norway::Value::as_str)
                .unwrap_or_default()
                .to_string();
            if SKIPPED_KINDS.contains(&(group.as_str(), kind.as_str())) {
                *skipped.entry(kind.clone()).or_default() += 1;
                continue;
            }
            let Some((versions, namespaced)) = served.get(&(group.clone(), kind.clone())) else {
                return Err(err(format!(
                    "{at} ({kind} {name}): kind: {api_version} {kind} is not served by the emulated cluster (it serves the built-in kinds, the karpenter.sh kinds, CapacityBuffers and the NodeClasses of the built-in cloud plugins); leave it out of the snapshot"
                )));
            };
            if !versions.contains(&version) {
                let known: Vec<&str> = versions.iter().map(String::as_str).collect();
                return Err(err(format!(
                    "{at} ({kind} {name}): apiVersion: {api_version} is not served; {kind} is served as {}",
                    known.join(", ")
                )));
            }
            let mut object = typed_json(&group, &kind, &yaml)
                .map_err(|e| err(format!("{at} ({kind} {name}): {e}")))?;
            let namespace = namespaced.then(|| {
                string_at(&object, "/metadata/namespace")
                    .unwrap_or("default")
                    .to_string()
            });
            if let (Some(ns), Some(meta)) = (
                &namespace,
                object.get_mut("metadata").and_then(Value::as_object_mut),
            ) {
                meta.insert("namespace".into(), Value::String(ns.clone()));
            }
            let describe = match &namespace {
                Some(ns) => format!("{kind} {ns}/{name}"),
                None => format!("{kind} {name}"),
            };
            let at = format!("{at} ({describe})");
            let key = (
                group.clone(),
                kind.clone(),
                namespace.clone().unwrap_or_default(),
                name.clone(),
            );
            if let Some(first) = seen.insert(key, at.clone()) {
                return Err(err(format!(
                    "{at}: listed twice (first as {first}); keep one of them"
                )));
            }
            let deleting = object.pointer("/metadata/deletionTimestamp").is_some();
            if deleting && matches!(kind.as_str(), "Node" | "NodeClaim") {
                return Err(err(format!(
                    "{at}: metadata.deletionTimestamp: the {kind} is being deleted; a snapshot's Nodes and NodeClaims must be live (take the snapshot again once it is gone, or leave it out)"
                )));
            }
            if deleting && kind == "Pod" {
                notes.push(format!("{describe} is being deleted: left out"));
                continue;
            }
            entries.push(Entry {
                place: at,
                group,
                version,
                kind,
                namespace,
                name,
                uid: string_at(&object, "/metadata/uid").map(String::from),
                body: object,
                role: Role::Plain,
            });
        }
        if !skipped.is_empty() {
            let kinds: Vec<String> = skipped.iter().map(|(k, n)| format!("{n} {k}")).collect();
            notes.push(format!(
                "not written (the emulated cluster makes its own): {}",
                kinds.join(", ")
            ));
        }
        let mut snapshot = ClusterSnapshot {
            origin: origin.to_string(),
            objects: entries,
            notes,
        };
        snapshot.classify(provider).map_err(err)?;
        snapshot.add_namespaces();
        // Stable: within a rank, the snapshot's order.
        snapshot.objects.sort_by_key(|e| rank(&e.kind));
        Ok(snapshot)
    }

    /// Decides what each Node, NodeClaim and pod is to the simulation; the error names the
    /// object and the field.
    fn classify(&mut self, provider: &str) -> Result<(), String> {
        let mut notes = Vec::new();
        let nodes: BTreeMap<String, usize> = self
            .objects
            .iter()
            .enumerate()
            .filter(|(_, e)| e.kind == "Node")
            .map(|(i, e)| (e.name.clone(), i))
            .collect();
        let by_provider_id: BTreeMap<String, String> = self
            .objects
            .iter()
            .filter(|e| e.kind == "Node")
            .filter_map(|e| {
                Some((
                    string_at(&e.body, "/spec/providerID")?.to_string(),
                    e.name.clone(),
                ))
            })
            .collect();
        // Each launched claim and its Node, by name or provider ID.
        let mut node_of_claim: BTreeMap<usize, String> = BTreeMap::new();
        let mut claim_of_node: BTreeMap<String, usize> = BTreeMap::new();
        for (i, entry) in self.objects.iter().enumerate() {
            if entry.kind != "NodeClaim" {
                continue;
            }
            let node = string_at(&entry.body, "/status/nodeName")
                .filter(|n| nodes.contains_key(*n))
                .map(String::from)
                .or_else(|| {
                    string_at(&entry.body, "/status/providerID")
                        .and_then(|p| by_provider_id.get(p))
                        .cloned()
                });
            let Some(node) = node else {
                notes.push(format!(
                    "NodeClaim {} has no Node in the snapshot (not registered yet): left out, its pods are provisioned again",
                    entry.name
                ));
                continue;
            };
            if let Some(other) = claim_of_node.insert(node.clone(), i) {
                return Err(format!(
                    "{}: status.nodeName: Node {node} is claimed by {} too; a Node has one NodeClaim",
                    entry.place, self.objects[other].place
                ));
            }
            node_of_claim.insert(i, node);
        }
        if !claim_of_node.is_empty() && provider != "simcloud" {
            let names: Vec<&str> = claim_of_node.keys().map(String::as_str).collect();
            return Err(format!(
                "the Karpenter nodes {} (with NodeClaims) can be adopted only by the simulated cloud, and this scenario's cloud.provider is {provider}: use simcloud, or leave their NodeClaims out to run them as nodes of their own",
                names.join(", ")
            ));
        }
        let mut roles = Vec::with_capacity(self.objects.len());
        for (i, entry) in self.objects.iter().enumerate() {
            let role = match entry.kind.as_str() {
                // A claim with no Node is left out (noted above).
                "NodeClaim" => node_of_claim.get(&i).map(|_| Role::Claim {
                    status: entry.body["status"].clone(),
                }),
                "Node" => {
                    let address = internal_ip(&entry.body);
                    Some(match claim_of_node.get(&entry.name) {
                        Some(&c) => self.adopted(entry, &self.objects[c], address)?,
                        None => {
                            if let Some(pool) = label(&entry.body, NODEPOOL_LABEL) {
                                notes.push(format!(
                                    "Node {} is labelled {NODEPOOL_LABEL}={pool}, but no NodeClaim of the snapshot names it: it runs as a node of its own (add the NodeClaims to the snapshot to have it adopted)",
                                    entry.name
                                ));
                            }
                            Role::StaticNode { address }
                        }
                    })
                }
                "Pod" => {
                    let node = string_at(&entry.body, "/spec/nodeName");
                    if let Some(node) = node
                        && !nodes.contains_key(node)
                    {
                        return Err(format!(
                            "{}: spec.nodeName: the pod is bound to Node {node}, which is not in the snapshot; add the Node (kubectl get nodes -o yaml) or leave the pod out",
                            entry.place
                        ));
                    }
                    let phase = string_at(&entry.body, "/status/phase").unwrap_or("Pending");
                    let status = match phase {
                        "Succeeded" | "Failed" => Some(json!({"phase": phase})),
                        // Written when the pod is created, with the node's address.
                        "Running" if node.is_some() => Some(Value::Null),
                        _ => None,
                    };
                    Some(Role::Pod { status })
                }
                _ => Some(Role::Plain),
            };
            roles.push(role);
        }
        let objects = std::mem::take(&mut self.objects);
        self.objects = objects
            .into_iter()
            .zip(roles)
            .filter_map(|(mut entry, role)| {
                entry.role = role?;
                Some(entry)
            })
            .collect();
        self.notes.extend(notes);
        Ok(())
    }

    /// The role of a Karpenter node: adopted by the cloud as an instance of its type, zone and
    /// capacity type (labels of the Node, else of its NodeClaim).
    fn adopted(
        &self,
        node: &Entry,
        claim: &Entry,
        address: Option<std::net::Ipv4Addr>,
    ) -> Result<Role, String> {
        let wanted = |key: &str| -> Result<String, String> {
            label(&node.body, key)
                .or_else(|| label(&claim.body, key))
                .map(String::from)
                .ok_or_else(|| {
                    format!(
                        "{}: metadata.labels.{key}: missing (on the Node and on its NodeClaim {}); the simulated cloud adopts a Karpenter node by its instance type and zone",
                        node.place, claim.name
                    )
                })
        };
        let adoption = Adoption {
            instance_type: wanted(INSTANCE_TYPE_LABEL)?,
            zone: wanted(ZONE_LABEL)?,
            capacity_type: label(&node.body, CAPACITY_TYPE_LABEL)
                .or_else(|| label(&claim.body, CAPACITY_TYPE_LABEL))
                .unwrap_or("on-demand")
                .to_string(),
            tags: BTreeMap::from([
                (TAG_NODECLAIM.to_string(), claim.name.clone()),
                (
                    TAG_NODEPOOL.to_string(),
                    label(&claim.body, NODEPOOL_LABEL)
                        .or_else(|| label(&node.body, NODEPOOL_LABEL))
                        .unwrap_or_default()
                        .to_string(),
                ),
            ]),
        };
        let was = string_at(&claim.body, "/status/providerID")
            .or_else(|| string_at(&node.body, "/spec/providerID"))
            .unwrap_or("no provider ID")
            .to_string();
        Ok(Role::AdoptedNode {
            claim: claim.name.clone(),
            address,
            adoption,
            was,
        })
    }
}

impl ClusterSnapshot {
    /// Adds the Namespaces that objects of the snapshot live in but that neither the snapshot
    /// nor every cluster has (`kubectl get pods -A` exports no Namespace).
    fn add_namespaces(&mut self) {
        let have: BTreeSet<String> = self
            .objects
            .iter()
            .filter(|e| e.kind == "Namespace")
            .map(|e| e.name.clone())
            .chain(STANDARD_NAMESPACES.iter().map(|n| n.to_string()))
            .collect();
        let wanted: BTreeSet<String> = self
            .objects
            .iter()
            .filter_map(|e| e.namespace.clone())
            .filter(|n| !have.contains(n))
            .collect();
        if wanted.is_empty() {
            return;
        }
        self.notes.push(format!(
            "namespaces the snapshot uses but lacks, created: {}",
            wanted.iter().cloned().collect::<Vec<_>>().join(", ")
        ));
        for name in wanted {
            self.objects.push(Entry {
                place: format!("Namespace {name} (used by the snapshot's objects)"),
                group: String::new(),
                version: "v1".into(),
                kind: "Namespace".into(),
                namespace: None,
                name: name.clone(),
                uid: None,
                body: json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
                role: Role::Plain,
            });
        }
    }

    /// The names of the NodeClaims it writes (those of the Karpenter nodes it adopts).
    pub fn claims(&self) -> Vec<String> {
        self.objects
            .iter()
            .filter(|e| matches!(e.role, Role::Claim { .. }))
            .map(|e| e.name.clone())
            .collect()
    }

    /// How many objects it writes.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether it writes nothing.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

mod seed;
#[cfg(test)]
mod tests;
