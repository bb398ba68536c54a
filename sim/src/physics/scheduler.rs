//! The kube-scheduler stand-in: binds pending pods to feasible nodes through the `binding`
//! subresource, or marks them `PodScheduled=False` with reason `Unschedulable` and a message
//! in kube-scheduler's words.
//!
//! Feasibility follows kube-scheduler's filter plugins, in their order (a node is rejected by
//! the first that fails): NodeUnschedulable, TaintToleration (`NoSchedule`/`NoExecute`, with a
//! `not-ready` taint on nodes that are not Ready), NodeAffinity (nodeSelector and required
//! node affinity terms), NodePorts, NodeResourcesFit (requests by joinery-core against
//! allocatable minus the bound, unfinished pods), PodTopologySpread (`DoNotSchedule`
//! constraints) and InterPodAffinity (required terms). Among feasible nodes the most allocated
//! one wins (bin packing), ties going to the first name.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use joinery_core::requirements::{Operator, Requirement};
use joinery_core::resources::{CPU, MEMORY, PODS, Resources};
use joinery_core::taints::{Taint, TaintEffect, Toleration, tolerated_by};
use k8s_openapi::api::core::v1::{
    Binding, Namespace, Node, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference, Pod, PodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::Status;
use kube::runtime::watcher;
use serde_json::json;

use super::cache::Cache;
use super::{
    DEFAULT_SCHEDULER_NAME, PhysicsError, Shared, Trigger, api_code, is_deleting, is_terminal, labels_of, node_name_of,
    pod_requests, pod_tolerations, scheduling_taints, selector_matches, watch,
};

/// Runs the scheduler until the task is aborted.
pub(crate) async fn run(shared: Arc<Shared>) {
    let client = shared.client.clone();
    let mut pod_events = watch(Api::<Pod>::all(client.clone()), watcher::Config::default());
    let mut node_events = watch(Api::<Node>::all(client.clone()), watcher::Config::default());
    let mut namespace_events = watch(Api::<Namespace>::all(client), watcher::Config::default());
    let mut resync = tokio::time::interval(shared.real_resync());
    let mut scheduler = Scheduler { shared, pods: Cache::new(), nodes: Cache::new(), namespaces: Cache::new() };
    let mut trigger = Trigger::new();
    loop {
        let synced = scheduler.pods.is_synced() && scheduler.nodes.is_synced() && scheduler.namespaces.is_synced();
        tokio::select! {
            Some(event) = pod_events.next() => {
                scheduler.pods.apply(event);
                trigger.fire();
            }
            Some(event) = node_events.next() => {
                scheduler.nodes.apply(event);
                trigger.fire();
            }
            Some(event) = namespace_events.next() => {
                scheduler.namespaces.apply(event);
                trigger.fire();
            }
            _ = resync.tick() => trigger.fire(),
            _ = trigger.due(), if synced => scheduler.pass().await,
        }
    }
}

struct Scheduler {
    shared: Arc<Shared>,
    pods: Cache<Pod>,
    nodes: Cache<Node>,
    namespaces: Cache<Namespace>,
}

/// A pod bound to a node, as far as affinity rules care.
struct PlacedPod {
    namespace: String,
    labels: BTreeMap<String, String>,
    anti_affinity: Vec<PodAffinityTerm>,
    deleting: bool,
}

/// A host port a pod uses.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HostPort {
    ip: String,
    protocol: String,
    port: i32,
}

impl HostPort {
    fn conflicts(&self, other: &HostPort) -> bool {
        let wildcard = |ip: &str| ip.is_empty() || ip == "0.0.0.0";
        self.port == other.port && self.protocol == other.protocol && (self.ip == other.ip || wildcard(&self.ip) || wildcard(&other.ip))
    }
}

/// One node as the scheduler sees it.
struct NodeInfo {
    name: String,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    unschedulable: bool,
    allocatable: Resources,
    requested: Resources,
    ports: Vec<HostPort>,
    pods: Vec<PlacedPod>,
}

impl NodeInfo {
    fn new(node: &Node) -> Self {
        Self {
            name: node.metadata.name.clone().unwrap_or_default(),
            labels: labels_of(&node.metadata),
            taints: scheduling_taints(node),
            unschedulable: node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false),
            allocatable: super::resources_of(node.status.as_ref().and_then(|s| s.allocatable.as_ref())),
            requested: Resources::new(),
            ports: Vec::new(),
            pods: Vec::new(),
        }
    }

    fn add(&mut self, pod: &Pod) {
        self.requested = self.requested.saturating_add(&pod_requests(pod));
        self.ports.extend(host_ports(pod));
        self.pods.push(PlacedPod {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            labels: labels_of(&pod.metadata),
            anti_affinity: required_terms(pod, false),
            deleting: is_deleting(pod),
        });
    }

    /// kube-scheduler's MostAllocated score: the mean share of CPU and memory in use with the pod.
    fn score(&self, requests: &Resources) -> u64 {
        let share = |name: &str| {
            let allocatable = self.allocatable.get(name);
            if allocatable == 0 {
                return 0;
            }
            let used = self.requested.get(name).saturating_add(requests.get(name));
            (u128::from(used.min(allocatable)) * 100 / u128::from(allocatable)) as u64
        };
        (share(CPU) + share(MEMORY)) / 2
    }
}

/// The host ports of a pod's containers (and sidecars).
fn host_ports(pod: &Pod) -> Vec<HostPort> {
    let Some(spec) = pod.spec.as_ref() else { return Vec::new() };
    let sidecars = spec.init_containers.iter().flatten().filter(|c| c.restart_policy.as_deref() == Some("Always"));
    spec.containers
        .iter()
        .chain(sidecars)
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            p.host_port.filter(|port| *port > 0).map(|port| HostPort {
                ip: p.host_ip.clone().unwrap_or_default(),
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_string()),
                port,
            })
        })
        .collect()
}

/// The pod's required pod-affinity (`anti == false`: anti-affinity) terms.
fn required_terms(pod: &Pod, affinity: bool) -> Vec<PodAffinityTerm> {
    let affinity_spec = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    let terms = if affinity {
        affinity_spec.and_then(|a| a.pod_affinity.as_ref()).and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
    } else {
        affinity_spec
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref())
    };
    terms.cloned().unwrap_or_default()
}

/// Whether a node selector requirement holds for a value (`None`: the label is absent),
/// evaluated with joinery-core's requirement algebra.
fn requirement_holds(expression: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let Ok(operator) = expression.operator.parse::<Operator>() else { return false };
    let Ok(requirement) = Requirement::new(expression.key.as_str(), operator, expression.values.iter().flatten().map(String::as_str))
    else {
        return false;
    };
    match value {
        Some(value) => requirement.has(value),
        None => requirement.accepts_absent(),
    }
}

fn term_matches(term: &NodeSelectorTerm, labels: &BTreeMap<String, String>, name: &str) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    expressions.iter().all(|e| requirement_holds(e, labels.get(&e.key).map(String::as_str)))
        && fields.iter().all(|f| f.key == "metadata.name" && requirement_holds(f, Some(name)))
}

/// Whether the pod's nodeSelector and required node affinity admit a node.
pub(crate) fn node_affinity_matches(pod: &Pod, labels: &BTreeMap<String, String>, name: &str) -> bool {
    let Some(spec) = pod.spec.as_ref() else { return true };
    if !spec.node_selector.iter().flatten().all(|(k, v)| labels.get(k) == Some(v)) {
        return false;
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| a.required_during_scheduling_ignored_during_execution.as_ref());
    required.is_none_or(|selector| selector.node_selector_terms.iter().any(|term| term_matches(term, labels, name)))
}

/// The first `NoSchedule`/`NoExecute` taint the tolerations do not tolerate.
pub(crate) fn untolerated<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    taints.iter().filter(|t| t.effect != TaintEffect::PreferNoSchedule).find(|t| !tolerated_by(t, tolerations))
}

/// A prepared `DoNotSchedule` topology spread constraint.
struct Spread {
    key: String,
    max_skew: i64,
    self_match: i64,
    counts: HashMap<String, i64>,
    minimum: i64,
}

/// Everything about the pod being placed that does not depend on the node.
struct Candidate<'a> {
    pod: &'a Pod,
    namespace: String,
    labels: BTreeMap<String, String>,
    requests: Resources,
    tolerations: Vec<Toleration>,
    ports: Vec<HostPort>,
    spread_keys: Vec<String>,
    spreads: Vec<Spread>,
    /// Topology pairs where a pod with anti-affinity against this pod runs.
    forbidden_by_existing: HashSet<(String, String)>,
    affinity_terms: Vec<PodAffinityTerm>,
    /// For the affinity terms: topology pairs holding pods that match all of them.
    affinity_counts: HashMap<(String, String), i64>,
    anti_affinity_terms: Vec<PodAffinityTerm>,
    /// For the anti-affinity terms: topology pairs holding a matching pod.
    anti_affinity_counts: HashMap<(String, String), i64>,
}

impl Scheduler {
    fn namespace_labels(&self, namespace: &str) -> BTreeMap<String, String> {
        self.namespaces.get("", namespace).map(|n| labels_of(&n.metadata)).unwrap_or_default()
    }

    /// Whether a pod-affinity term written in `owner_namespace` selects a pod.
    fn term_selects(&self, term: &PodAffinityTerm, owner_namespace: &str, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        let listed = term.namespaces.as_deref().unwrap_or_default();
        let namespace_ok = if listed.is_empty() && term.namespace_selector.is_none() {
            namespace == owner_namespace
        } else {
            listed.iter().any(|n| n == namespace)
                || term.namespace_selector.as_ref().is_some_and(|s| selector_matches(Some(s), &self.namespace_labels(namespace)))
        };
        namespace_ok && selector_matches(term.label_selector.as_ref(), labels)
    }

    fn candidate<'a>(&self, pod: &'a Pod, nodes: &[NodeInfo]) -> Candidate<'a> {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let labels = labels_of(&pod.metadata);
        let tolerations = pod_tolerations(pod);
        let constraints: Vec<_> = pod
            .spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.as_ref())
            .into_iter()
            .flatten()
            .filter(|c| c.when_unsatisfiable == "DoNotSchedule")
            .collect();
        let spread_keys: Vec<String> = constraints.iter().map(|c| c.topology_key.clone()).collect();
        let spreads = constraints
            .iter()
            .map(|constraint| {
                let mut selector = constraint.label_selector.clone();
                if let Some(selector) = selector.as_mut() {
                    for key in constraint.match_label_keys.iter().flatten() {
                        if let Some(value) = labels.get(key) {
                            selector.match_expressions.get_or_insert_with(Vec::new).push(LabelSelectorRequirement {
                                key: key.clone(),
                                operator: "In".into(),
                                values: Some(vec![value.clone()]),
                            });
                        }
                    }
                }
                let honor_affinity = constraint.node_affinity_policy.as_deref() != Some("Ignore");
                let honor_taints = constraint.node_taints_policy.as_deref() == Some("Honor");
                let mut counts: HashMap<String, i64> = HashMap::new();
                for node in nodes {
                    if !spread_keys.iter().all(|k| node.labels.contains_key(k))
                        || (honor_affinity && !node_affinity_matches(pod, &node.labels, &node.name))
                        || (honor_taints && untolerated(&node.taints, &tolerations).is_some())
                    {
                        continue;
                    }
                    let matching = node
                        .pods
                        .iter()
                        .filter(|p| !p.deleting && p.namespace == namespace && selector_matches(selector.as_ref(), &p.labels))
                        .count() as i64;
                    *counts.entry(node.labels[&constraint.topology_key].clone()).or_default() += matching;
                }
                let min_domains = constraint.min_domains.unwrap_or(1).max(1) as usize;
                let minimum = if counts.len() < min_domains { 0 } else { counts.values().copied().min().unwrap_or(0) };
                Spread {
                    key: constraint.topology_key.clone(),
                    max_skew: i64::from(constraint.max_skew),
                    self_match: i64::from(selector_matches(selector.as_ref(), &labels)),
                    counts,
                    minimum,
                }
            })
            .collect();

        let mut forbidden_by_existing = HashSet::new();
        let affinity_terms = required_terms(pod, true);
        let anti_affinity_terms = required_terms(pod, false);
        let mut affinity_counts: HashMap<(String, String), i64> = HashMap::new();
        let mut anti_affinity_counts: HashMap<(String, String), i64> = HashMap::new();
        for node in nodes {
            for placed in &node.pods {
                for term in &placed.anti_affinity {
                    if let Some(value) = node.labels.get(&term.topology_key)
                        && self.term_selects(term, &placed.namespace, &namespace, &labels)
                    {
                        forbidden_by_existing.insert((term.topology_key.clone(), value.clone()));
                    }
                }
                if !affinity_terms.is_empty()
                    && affinity_terms.iter().all(|t| self.term_selects(t, &namespace, &placed.namespace, &placed.labels))
                {
                    for term in &affinity_terms {
                        if let Some(value) = node.labels.get(&term.topology_key) {
                            *affinity_counts.entry((term.topology_key.clone(), value.clone())).or_default() += 1;
                        }
                    }
                }
                for term in &anti_affinity_terms {
                    if let Some(value) = node.labels.get(&term.topology_key)
                        && self.term_selects(term, &namespace, &placed.namespace, &placed.labels)
                    {
                        *anti_affinity_counts.entry((term.topology_key.clone(), value.clone())).or_default() += 1;
                    }
                }
            }
        }
        Candidate {
            pod,
            requests: pod_requests(pod),
            ports: host_ports(pod),
            namespace,
            labels,
            tolerations,
            spread_keys,
            spreads,
            forbidden_by_existing,
            affinity_terms,
            affinity_counts,
            anti_affinity_terms,
            anti_affinity_counts,
        }
    }

    /// The reasons a node cannot take the pod (empty: it can), from the first failing filter.
    fn filter(&self, candidate: &Candidate<'_>, node: &NodeInfo) -> Vec<String> {
        // NodeUnschedulable.
        let cordon = Taint::without_value("node.kubernetes.io/unschedulable", TaintEffect::NoSchedule);
        if node.unschedulable && !tolerated_by(&cordon, &candidate.tolerations) {
            return vec!["node(s) were unschedulable".into()];
        }
        // TaintToleration.
        if let Some(taint) = untolerated(&node.taints, &candidate.tolerations) {
            return vec![format!("node(s) had untolerated taint {{{}: {}}}", taint.key, taint.value)];
        }
        // NodeAffinity.
        if !node_affinity_matches(candidate.pod, &node.labels, &node.name) {
            return vec!["node(s) didn't match Pod's node affinity/selector".into()];
        }
        // NodePorts.
        if candidate.ports.iter().any(|wanted| node.ports.iter().any(|used| used.conflicts(wanted))) {
            return vec!["node(s) didn't have free ports for the requested pod ports".into()];
        }
        // NodeResourcesFit.
        let free = node.allocatable.saturating_sub(&node.requested);
        let short: Vec<String> = candidate
            .requests
            .exceeding(&free)
            .into_iter()
            .map(|name| if name == PODS { "Too many pods".to_string() } else { format!("Insufficient {name}") })
            .collect();
        if !short.is_empty() {
            return short;
        }
        // PodTopologySpread.
        if !candidate.spread_keys.iter().all(|k| node.labels.contains_key(k)) {
            return vec!["node(s) didn't match pod topology spread constraints (missing required label)".into()];
        }
        for spread in &candidate.spreads {
            let domain = &node.labels[&spread.key];
            let matching = spread.counts.get(domain).copied().unwrap_or(0);
            if matching + spread.self_match - spread.minimum > spread.max_skew {
                return vec!["node(s) didn't match pod topology spread constraints".into()];
            }
        }
        // InterPodAffinity: the pod's affinity, its anti-affinity, then existing pods' anti-affinity.
        let pair = |key: &str| node.labels.get(key).map(|value| (key.to_string(), value.clone()));
        if !candidate.affinity_terms.is_empty() {
            let mut pods_exist = true;
            for term in &candidate.affinity_terms {
                match pair(&term.topology_key) {
                    Some(p) => pods_exist &= candidate.affinity_counts.get(&p).copied().unwrap_or(0) > 0,
                    None => return vec!["node(s) didn't match pod affinity rules".into()],
                }
            }
            // The first pod of a group whose members attract each other may go anywhere.
            let first_of_its_kind = candidate.affinity_counts.is_empty()
                && candidate
                    .affinity_terms
                    .iter()
                    .all(|t| self.term_selects(t, &candidate.namespace, &candidate.namespace, &candidate.labels));
            if !pods_exist && !first_of_its_kind {
                return vec!["node(s) didn't match pod affinity rules".into()];
            }
        }
        if candidate
            .anti_affinity_terms
            .iter()
            .any(|term| pair(&term.topology_key).is_some_and(|p| candidate.anti_affinity_counts.get(&p).copied().unwrap_or(0) > 0))
        {
            return vec!["node(s) didn't match pod anti-affinity rules".into()];
        }
        if candidate.forbidden_by_existing.iter().any(|(key, value)| node.labels.get(key) == Some(value)) {
            return vec!["node(s) didn't satisfy existing pods anti-affinity rules".into()];
        }
        Vec::new()
    }

    /// Picks a node for the pod, or explains in kube-scheduler's words why there is none.
    fn place(&self, pod: &Pod, nodes: &[NodeInfo]) -> Result<usize, String> {
        if nodes.is_empty() {
            return Err("no nodes available to schedule pods".into());
        }
        let candidate = self.candidate(pod, nodes);
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        let mut best: Option<(u64, usize)> = None;
        for (index, node) in nodes.iter().enumerate() {
            let failed = self.filter(&candidate, node);
            if failed.is_empty() {
                let score = node.score(&candidate.requests);
                if best.is_none_or(|(top, _)| score > top) {
                    best = Some((score, index));
                }
            } else {
                for reason in failed {
                    *reasons.entry(reason).or_default() += 1;
                }
            }
        }
        if let Some((_, index)) = best {
            return Ok(index);
        }
        let mut histogram: Vec<String> = reasons.iter().map(|(reason, count)| format!("{count} {reason}")).collect();
        histogram.sort();
        Err(format!("0/{} nodes are available: {}.", nodes.len(), histogram.join(", ")))
    }

    /// One scheduling pass over every pending pod, highest priority and oldest first.
    async fn pass(&mut self) {
        let mut nodes: Vec<NodeInfo> = self.nodes.iter().map(NodeInfo::new).collect();
        let index: HashMap<String, usize> = nodes.iter().enumerate().map(|(i, n)| (n.name.clone(), i)).collect();
        let mut pending = Vec::new();
        for pod in self.pods.iter().filter(|p| !is_terminal(p)) {
            match node_name_of(pod) {
                Some(node) => {
                    if let Some(i) = index.get(node) {
                        nodes[*i].add(pod);
                    }
                }
                None if is_pending(pod) => pending.push(pod.clone()),
                None => {}
            }
        }
        pending.sort_by(|a, b| {
            let priority = |p: &Pod| p.spec.as_ref().and_then(|s| s.priority).unwrap_or(0);
            let created = |p: &Pod| p.metadata.creation_timestamp.clone();
            priority(b).cmp(&priority(a)).then_with(|| created(a).cmp(&created(b)))
        });
        for pod in pending {
            let outcome = self.place(&pod, &nodes);
            let result = match outcome {
                Ok(chosen) => self.bind(&pod, &nodes[chosen].name).await.map(|bound| {
                    if bound {
                        nodes[chosen].add(&pod);
                    }
                }),
                Err(message) => self.report_unschedulable(&pod, message).await,
            };
            if let Err(error) = result {
                tracing::warn!(pod = %pod.metadata.name.as_deref().unwrap_or_default(), %error, "scheduling step failed");
            }
        }
    }

    /// Binds the pod; `false` when it was already bound or deleted meanwhile.
    async fn bind(&mut self, pod: &Pod, node: &str) -> Result<bool, PhysicsError> {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let binding = Binding {
            metadata: ObjectMeta { name: Some(name.clone()), uid: pod.metadata.uid.clone(), ..Default::default() },
            target: ObjectReference { api_version: Some("v1".into()), kind: Some("Node".into()), name: Some(node.to_string()), ..Default::default() },
        };
        let api: Api<Pod> = Api::namespaced(self.shared.client.clone(), &namespace);
        match api.create_subresource::<_, Status>("binding", &name, &PostParams::default(), &binding).await {
            Ok(_) => {
                tracing::debug!(pod = %name, %namespace, %node, "bound");
                let mut bound = pod.clone();
                bound.spec.get_or_insert_with(Default::default).node_name = Some(node.to_string());
                // The watch brings the real object; until then, count the pod on its node (the
                // binding's version is newer than the pod's, so older events cannot undo this).
                let version = pod.metadata.resource_version.as_deref().and_then(|v| v.parse::<u64>().ok());
                bound.metadata.resource_version = version.map(|v| (v + 1).to_string());
                self.pods.upsert(bound);
                Ok(true)
            }
            Err(error) if matches!(api_code(&error), Some(404 | 409)) => Ok(false),
            Err(error) => Err(error.into()),
        }
    }

    /// Sets `PodScheduled=False`, reason `Unschedulable`, unless the pod already says so.
    async fn report_unschedulable(&mut self, pod: &Pod, message: String) -> Result<(), PhysicsError> {
        let conditions = pod.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
        let current = conditions.iter().find(|c| c.type_ == "PodScheduled");
        if current.is_some_and(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable") && c.message.as_deref() == Some(&message)) {
            return Ok(());
        }
        let since = current
            .filter(|c| c.status == "False")
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| self.shared.now());
        let mut next: Vec<serde_json::Value> = conditions
            .iter()
            .filter(|c| c.type_ != "PodScheduled")
            .map(|c| serde_json::to_value(c).unwrap_or_default())
            .collect();
        next.push(json!({
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastProbeTime": null,
            "lastTransitionTime": since,
        }));
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.shared.client.clone(), &namespace);
        let patch = json!({"status": {"conditions": next}});
        match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(updated) => {
                tracing::debug!(pod = %name, %namespace, %message, "unschedulable");
                self.pods.upsert(updated);
                Ok(())
            }
            Err(error) if api_code(&error) == Some(404) => {
                self.pods.forget(&namespace, &name);
                Ok(())
            }
            Err(error) => Err(error.into()),
        }
    }
}

/// Whether the default scheduler should place this unbound pod now.
fn is_pending(pod: &Pod) -> bool {
    let Some(spec) = pod.spec.as_ref() else { return false };
    let scheduler = spec.scheduler_name.as_deref().unwrap_or(DEFAULT_SCHEDULER_NAME);
    scheduler == DEFAULT_SCHEDULER_NAME
        && !is_deleting(pod)
        && spec.scheduling_gates.as_ref().is_none_or(|gates| gates.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_selector_requirements_use_the_core_algebra() {
        let requirement = |operator: &str, values: &[&str]| NodeSelectorRequirement {
            key: "k".into(),
            operator: operator.into(),
            values: Some(values.iter().map(|v| v.to_string()).collect()),
        };
        assert!(requirement_holds(&requirement("In", &["a", "b"]), Some("a")));
        assert!(!requirement_holds(&requirement("In", &["a"]), None));
        assert!(requirement_holds(&requirement("NotIn", &["a"]), None));
        assert!(requirement_holds(&requirement("Exists", &[]), Some("x")));
        assert!(requirement_holds(&requirement("DoesNotExist", &[]), None));
        assert!(requirement_holds(&requirement("Gt", &["3"]), Some("4")));
        assert!(!requirement_holds(&requirement("Gt", &["3"]), Some("3")));
        assert!(!requirement_holds(&requirement("Lt", &["3"]), None));
        assert!(!requirement_holds(&requirement("Sometimes", &[]), Some("x")));
    }

    #[test]
    fn host_ports_conflict_on_wildcards() {
        let port = |ip: &str| HostPort { ip: ip.into(), protocol: "TCP".into(), port: 80 };
        assert!(port("").conflicts(&port("10.0.0.1")));
        assert!(port("10.0.0.1").conflicts(&port("10.0.0.1")));
        assert!(!port("10.0.0.1").conflicts(&port("10.0.0.2")));
        assert!(!port("").conflicts(&HostPort { protocol: "UDP".into(), ..port("") }));
    }
}
