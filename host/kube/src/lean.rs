//! [`LeanPod`]: a pod as Joinery reads it — the fields scheduling, disruption, termination and
//! the metrics look at, under Kubernetes' own field names, and nothing else.
//!
//! Why it exists: `k8s-openapi`'s `Pod` is large even when empty (2,176 bytes, and 2,120 more
//! for each `Container`), because every optional field of the full API is stored inline. A
//! controller caching 50,000 pods held about 7.5 KB per pod that way, whatever was cut from
//! it. A `LeanPod` is deserialized straight from the API server's JSON (fields it does not
//! name are skipped while parsing, never allocated), and every function of this crate that
//! reads a pod takes one. Code holding a full `Pod` (a snapshot file, a test, the simulator's
//! observer) converts it with `LeanPod::from(&pod)`.
//!
//! Requests and limits are kept as [`ResourceList`]s (short sorted lists) rather than
//! `BTreeMap`s, which take room for eleven entries however few they hold.
//!
//! A `LeanPod` is read, never written back: writes to the cluster are patches built from
//! scratch, so the fields it leaves out are never lost.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, ContainerPort, Pod, PodCondition, PodSpec, PodSchedulingGate, ResourceRequirements, Toleration, TopologySpreadConstraint, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The annotation `kubectl apply` keeps a whole copy of the object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A pod with only the fields Joinery reads (see the module documentation). Serialized, it is
/// a valid (partial) `v1` Pod.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeanPod {
    /// `metadata`, without `managedFields` and kubectl's last-applied copy once [trimmed](Self::trim).
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `spec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<LeanPodSpec>,
    /// `status`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<LeanPodStatus>,
}

/// The parts of a `PodSpec` that decide where a pod can run, what it needs, and how it is
/// evicted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeanPodSpec {
    /// `spec.nodeName`: the node the pod is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// `spec.nodeSelector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// `spec.affinity`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// `spec.tolerations`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// `spec.topologySpreadConstraints`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,
    /// `spec.containers`.
    #[serde(default)]
    pub containers: Vec<LeanContainer>,
    /// `spec.initContainers` (sidecars among them have `restartPolicy: Always`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_containers: Option<Vec<LeanContainer>>,
    /// `spec.resources`: pod-level requests and limits, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<LeanResources>,
    /// `spec.overhead` (the RuntimeClass' per-pod overhead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead: Option<BTreeMap<String, Quantity>>,
    /// `spec.priority`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    /// `spec.priorityClassName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// `spec.schedulingGates`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_gates: Option<Vec<PodSchedulingGate>>,
    /// `spec.volumes` (once [trimmed](LeanPod::trim), only those that take part in scheduling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<Volume>>,
    /// `spec.terminationGracePeriodSeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
}

/// A container as scheduling sees it: its name, resources, host ports and restart policy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeanContainer {
    /// `name`.
    #[serde(default)]
    pub name: String,
    /// `resources` (requests and limits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<LeanResources>,
    /// `ports` (once [trimmed](LeanPod::trim), only those with a `hostPort`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<ContainerPort>>,
    /// `restartPolicy` (`Always` makes an init container a sidecar).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
}

/// The parts of a `PodStatus` Joinery reads.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeanPodStatus {
    /// `status.phase`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// `status.reason`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `status.conditions` (once [trimmed](LeanPod::trim), only `PodScheduled` and `Ready`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<LeanPodCondition>>,
    /// `status.nominatedNodeName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nominated_node_name: Option<String>,
    /// `status.startTime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
}

/// The parts of a pod condition Joinery reads: kube-scheduler's verdict (`PodScheduled`) and
/// readiness (`Ready`, whose transition time gives the pod startup metric). Messages and
/// probe times are skipped while parsing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeanPodCondition {
    /// `type`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `status`: `True`, `False` or `Unknown`.
    pub status: String,
    /// `reason`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `lastTransitionTime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

impl From<&PodCondition> for LeanPodCondition {
    fn from(c: &PodCondition) -> Self {
        LeanPodCondition { type_: c.type_.clone(), status: c.status.clone(), reason: c.reason.clone(), last_transition_time: c.last_transition_time.clone() }
    }
}

/// `resources` of a container or a pod: what it requests and what it is limited to.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeanResources {
    /// `requests`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<ResourceList>,
    /// `limits`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceList>,
}

impl From<&ResourceRequirements> for LeanResources {
    fn from(r: &ResourceRequirements) -> Self {
        let list = |map: &Option<BTreeMap<String, Quantity>>| map.as_ref().map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect());
        LeanResources { requests: list(&r.requests), limits: list(&r.limits) }
    }
}

/// A resource list (`requests`, `limits`): resource names and quantities, in name order. It
/// reads and writes as the JSON object Kubernetes uses, but is kept as a short sorted list:
/// a `BTreeMap` takes room for eleven entries (about 540 bytes) for the two or three a pod
/// has.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResourceList(Vec<(String, Quantity)>);

impl ResourceList {
    /// The quantity of `name`, if listed.
    pub fn get(&self, name: &str) -> Option<&Quantity> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(name)).ok().map(|i| &self.0[i].1)
    }

    /// Whether `name` is listed.
    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// The names and quantities, in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Quantity)> {
        self.into_iter()
    }
}

impl<'a> IntoIterator for &'a ResourceList {
    type Item = (&'a String, &'a Quantity);
    type IntoIter = std::iter::Map<std::slice::Iter<'a, (String, Quantity)>, fn(&'a (String, Quantity)) -> (&'a String, &'a Quantity)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

impl FromIterator<(String, Quantity)> for ResourceList {
    /// Sorts by name; of a name given twice, the last quantity stays (as in a map).
    fn from_iter<I: IntoIterator<Item = (String, Quantity)>>(items: I) -> Self {
        let mut list: Vec<(String, Quantity)> = items.into_iter().collect();
        // A stable sort keeps repeated names in input order; dedup keeps the first of each
        // run, so reverse first to keep the last one given.
        list.reverse();
        list.sort_by(|a, b| a.0.cmp(&b.0));
        list.dedup_by(|later, earlier| later.0 == earlier.0);
        list.shrink_to_fit();
        ResourceList(list)
    }
}

impl Serialize for ResourceList {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for ResourceList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ListVisitor;
        impl<'de> Visitor<'de> for ListVisitor {
            type Value = ResourceList;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ResourceList, A::Error> {
                let mut items = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some(entry) = map.next_entry::<String, Quantity>()? {
                    items.push(entry);
                }
                Ok(items.into_iter().collect())
            }
        }
        deserializer.deserialize_map(ListVisitor)
    }
}

impl LeanPod {
    /// Drops what the parser cannot skip but no reader needs: `metadata.managedFields`,
    /// kubectl's last-applied copy, container ports without a host port, volumes that play
    /// no part in scheduling (ConfigMap, Secret, projected, downward API, emptyDir), and the
    /// conditions other than `PodScheduled` and `Ready`.
    pub fn trim(&mut self) {
        if let Some(conditions) = self.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            conditions.retain(|c| matches!(c.type_.as_str(), "PodScheduled" | "Ready"));
        }
        self.metadata.managed_fields = None;
        if let Some(annotations) = self.metadata.annotations.as_mut() {
            annotations.remove(LAST_APPLIED);
        }
        if let Some(spec) = self.spec.as_mut() {
            for container in spec.containers.iter_mut().chain(spec.init_containers.iter_mut().flatten()) {
                if let Some(ports) = container.ports.as_mut() {
                    ports.retain(|p| p.host_port.is_some());
                }
                if container.ports.as_ref().is_some_and(Vec::is_empty) {
                    container.ports = None;
                }
            }
            if let Some(volumes) = spec.volumes.as_mut() {
                volumes.retain(|v| v.config_map.is_none() && v.secret.is_none() && v.projected.is_none() && v.downward_api.is_none() && v.empty_dir.is_none());
            }
        }
    }
}

impl From<&k8s_openapi::api::core::v1::Container> for LeanContainer {
    fn from(c: &k8s_openapi::api::core::v1::Container) -> Self {
        LeanContainer { name: c.name.clone(), resources: c.resources.as_ref().map(LeanResources::from), ports: c.ports.clone(), restart_policy: c.restart_policy.clone() }
    }
}

impl From<&PodSpec> for LeanPodSpec {
    /// Copies the fields a `LeanPodSpec` keeps (nothing is trimmed).
    fn from(s: &PodSpec) -> Self {
        LeanPodSpec {
            node_name: s.node_name.clone(),
            node_selector: s.node_selector.clone(),
            affinity: s.affinity.clone(),
            tolerations: s.tolerations.clone(),
            topology_spread_constraints: s.topology_spread_constraints.clone(),
            containers: s.containers.iter().map(LeanContainer::from).collect(),
            init_containers: s.init_containers.as_ref().map(|c| c.iter().map(LeanContainer::from).collect()),
            resources: s.resources.as_ref().map(LeanResources::from),
            overhead: s.overhead.clone(),
            priority: s.priority,
            priority_class_name: s.priority_class_name.clone(),
            scheduling_gates: s.scheduling_gates.clone(),
            volumes: s.volumes.clone(),
            termination_grace_period_seconds: s.termination_grace_period_seconds,
        }
    }
}

impl From<&Pod> for LeanPod {
    /// Copies the fields a `LeanPod` keeps (nothing is trimmed).
    fn from(pod: &Pod) -> Self {
        let status = pod.status.as_ref().map(|s| LeanPodStatus {
            phase: s.phase.clone(),
            reason: s.reason.clone(),
            conditions: s.conditions.as_ref().map(|c| c.iter().map(LeanPodCondition::from).collect()),
            nominated_node_name: s.nominated_node_name.clone(),
            start_time: s.start_time.clone(),
        });
        LeanPod { metadata: pod.metadata.clone(), spec: pod.spec.as_ref().map(LeanPodSpec::from), status }
    }
}

impl k8s_openapi::Resource for LeanPod {
    const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = <Pod as k8s_openapi::Resource>::Scope;
}

impl k8s_openapi::ListableResource for LeanPod {
    const LIST_KIND: &'static str = <Pod as k8s_openapi::ListableResource>::LIST_KIND;
}

impl k8s_openapi::Metadata for LeanPod {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn full_pod() -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-1", "namespace": "shop", "uid": "u1", "labels": {"app": "web"},
                "annotations": {LAST_APPLIED: "{…}", "karpenter.sh/do-not-disrupt": "true"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
            },
            "spec": {
                "nodeName": "n1",
                "containers": [{
                    "name": "main", "image": "nginx", "env": [{"name": "A", "value": "b"}],
                    "resources": {"requests": {"cpu": "250m"}, "limits": {"memory": "1Gi"}},
                    "ports": [{"containerPort": 80}, {"containerPort": 443, "hostPort": 8443, "protocol": "TCP"}],
                }],
                "initContainers": [{"name": "proxy", "image": "envoy", "restartPolicy": "Always"}],
                "volumes": [
                    {"name": "config", "configMap": {"name": "c"}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "d"}},
                ],
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "priority": 7,
                "terminationGracePeriodSeconds": 5,
                "serviceAccountName": "sa",
            },
            "status": {
                "phase": "Running", "hostIP": "10.0.0.1", "nominatedNodeName": "n1",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "main", "image": "nginx", "imageID": "x", "ready": true, "restartCount": 0}],
            },
        })
    }

    #[test]
    fn converting_a_full_pod_gives_what_parsing_its_json_gives() {
        let pod: Pod = serde_json::from_value(full_pod()).unwrap();
        let parsed: LeanPod = serde_json::from_value(full_pod()).unwrap();
        assert_eq!(LeanPod::from(&pod), parsed);
        // And a lean pod written out reads back as the same lean pod, and as a valid Pod.
        let text = serde_json::to_value(&parsed).unwrap();
        assert_eq!(serde_json::from_value::<LeanPod>(text.clone()).unwrap(), parsed);
        let mut typed = text.as_object().unwrap().clone();
        typed.insert("apiVersion".into(), json!("v1"));
        typed.insert("kind".into(), json!("Pod"));
        let again: Pod = serde_json::from_value(typed.into()).unwrap();
        assert_eq!(again.spec.unwrap().containers[0].name, "main");
    }

    #[test]
    fn a_resource_list_reads_and_writes_as_a_map_and_finds_by_name() {
        let list: ResourceList = serde_json::from_value(json!({"memory": "1Gi", "cpu": "250m", "nvidia.com/gpu": "1"})).unwrap();
        let names: Vec<&str> = list.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["cpu", "memory", "nvidia.com/gpu"], "kept in name order");
        assert_eq!(list.get("memory").map(|q| q.0.as_str()), Some("1Gi"));
        assert!(list.contains_key("nvidia.com/gpu") && !list.contains_key("pods"));
        assert_eq!(serde_json::to_value(&list).unwrap(), json!({"cpu": "250m", "memory": "1Gi", "nvidia.com/gpu": "1"}));
        let twice: ResourceList = [("cpu", "1"), ("memory", "2Gi"), ("cpu", "2")].into_iter().map(|(k, v)| (k.to_string(), Quantity(v.into()))).collect();
        assert_eq!(twice.get("cpu").map(|q| q.0.as_str()), Some("2"), "the last of a repeated name stays, as in a map");
        assert_eq!(twice.iter().count(), 2);
        let e = serde_json::from_value::<ResourceList>(json!(["cpu"])).unwrap_err().to_string();
        assert!(e.starts_with("invalid type: sequence, expected a map"), "{e}");
    }

    #[test]
    fn a_lean_pod_is_far_smaller_than_a_pod() {
        let full = std::mem::size_of::<Pod>() + std::mem::size_of::<k8s_openapi::api::core::v1::Container>();
        let lean = std::mem::size_of::<LeanPod>() + std::mem::size_of::<LeanContainer>();
        assert!(lean * 2 < full, "lean {lean} bytes, full {full} bytes");
    }
}
