//! The filter side of the scheduler: what a bound pod takes on its node, the node-by-node
//! view of them, and the filter plugins that decide whether a pending pod fits a node.

use super::*;

/// A pod bound to a node, as far as affinity rules care.
pub(super) struct PlacedPod {
    pub(super) requests: Resources,
    pub(super) ports: Vec<HostPort>,
    pub(super) namespace: String,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) anti_affinity: Vec<PodAffinityTerm>,
    pub(super) deleting: bool,
}

impl PlacedPod {
    pub(super) fn of(pod: &Pod) -> Self {
        Self {
            requests: pod_requests(pod),
            ports: host_ports(pod),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            labels: labels_of(&pod.metadata),
            anti_affinity: required_terms(pod, false),
            deleting: is_deleting(pod),
        }
    }
}

/// A host port a pod uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HostPort {
    pub(super) ip: String,
    pub(super) protocol: String,
    pub(super) port: i32,
}

impl HostPort {
    pub(super) fn conflicts(&self, other: &HostPort) -> bool {
        let wildcard = |ip: &str| ip.is_empty() || ip == "0.0.0.0";
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || wildcard(&self.ip) || wildcard(&other.ip))
    }
}

/// What the scheduler reads of a node itself, apart from its pods: read once per node
/// version and shared by the passes until the node changes.
pub(super) struct NodeBase {
    pub(super) name: String,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) taints: Vec<Taint>,
    pub(super) unschedulable: bool,
    pub(super) allocatable: Resources,
}

impl NodeBase {
    pub(super) fn of(node: &Node) -> Self {
        Self {
            name: node.metadata.name.clone().unwrap_or_default(),
            labels: labels_of(&node.metadata),
            taints: scheduling_taints(node),
            unschedulable: node
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false),
            allocatable: crate::physics::resources_of(
                node.status.as_ref().and_then(|s| s.allocatable.as_ref()),
            ),
        }
    }
}

/// One node as a pass sees it: the node and what its pods take.
pub(super) struct NodeInfo {
    base: Arc<NodeBase>,
    pub(super) requested: Resources,
    pub(super) ports: Vec<HostPort>,
    pub(super) pods: Vec<Arc<PlacedPod>>,
}

impl std::ops::Deref for NodeInfo {
    type Target = NodeBase;

    fn deref(&self) -> &NodeBase {
        &self.base
    }
}

impl NodeInfo {
    /// The node with no pod on it yet.
    pub(super) fn new(base: Arc<NodeBase>) -> Self {
        Self {
            base,
            requested: Resources::new(),
            ports: Vec::new(),
            pods: Vec::new(),
        }
    }

    pub(super) fn add(&mut self, placed: Arc<PlacedPod>) {
        self.requested = self.requested.saturating_add(&placed.requests);
        self.ports.extend(placed.ports.iter().cloned());
        self.pods.push(placed);
    }

    /// kube-scheduler's MostAllocated score: the mean share of CPU and memory in use with the pod.
    pub(super) fn score(&self, requests: &Resources) -> u64 {
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
pub(super) fn host_ports(pod: &Pod) -> Vec<HostPort> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"));
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
pub(super) fn required_terms(pod: &Pod, affinity: bool) -> Vec<PodAffinityTerm> {
    let affinity_spec = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
    let terms = if affinity {
        affinity_spec
            .and_then(|a| a.pod_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
    } else {
        affinity_spec
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
    };
    terms.cloned().unwrap_or_default()
}

/// Whether a node selector requirement holds for a value (`None`: the label is absent),
/// evaluated with joinery-core's requirement algebra.
pub(super) fn requirement_holds(expression: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let Ok(operator) = expression.operator.parse::<Operator>() else {
        return false;
    };
    let Ok(requirement) = Requirement::new(
        expression.key.as_str(),
        operator,
        expression.values.iter().flatten().map(String::as_str),
    ) else {
        return false;
    };
    match value {
        Some(value) => requirement.has(value),
        None => requirement.accepts_absent(),
    }
}

pub(super) fn term_matches(
    term: &NodeSelectorTerm,
    labels: &BTreeMap<String, String>,
    name: &str,
) -> bool {
    let expressions = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if expressions.is_empty() && fields.is_empty() {
        return false;
    }
    expressions
        .iter()
        .all(|e| requirement_holds(e, labels.get(&e.key).map(String::as_str)))
        && fields
            .iter()
            .all(|f| f.key == "metadata.name" && requirement_holds(f, Some(name)))
}

/// Whether the pod's nodeSelector and required node affinity admit a node.
pub(crate) fn node_affinity_matches(
    pod: &Pod,
    labels: &BTreeMap<String, String>,
    name: &str,
) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    if !spec
        .node_selector
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v))
    {
        return false;
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    required.is_none_or(|selector| {
        selector
            .node_selector_terms
            .iter()
            .any(|term| term_matches(term, labels, name))
    })
}

/// The first `NoSchedule`/`NoExecute` taint the tolerations do not tolerate.
pub(crate) fn untolerated<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| t.effect != TaintEffect::PreferNoSchedule)
        .find(|t| !tolerated_by(t, tolerations))
}

/// A prepared `DoNotSchedule` topology spread constraint.
#[derive(Clone)]
pub(super) struct Spread {
    pub(super) key: String,
    pub(super) max_skew: i64,
    pub(super) self_match: i64,
    /// Matching pods per domain of the eligible nodes.
    pub(super) counts: HashMap<String, i64>,
    pub(super) minimum: i64,
    pub(super) min_domains: usize,
    /// The pods that count: of this namespace, matching this selector.
    pub(super) namespace: String,
    pub(super) selector: Option<LabelSelector>,
    /// Whether each node (by index) counts.
    pub(super) eligible: Vec<bool>,
}

impl Spread {
    /// Counts a pod just placed on node `index`.
    pub(super) fn count(&mut self, placed: &PlacedPod, node: &NodeInfo, index: usize) {
        if !self.eligible.get(index).copied().unwrap_or(false)
            || placed.deleting
            || placed.namespace != self.namespace
            || !selector_matches(self.selector.as_ref(), &placed.labels)
        {
            return;
        }
        if let Some(domain) = node.labels.get(&self.key) {
            *self.counts.entry(domain.clone()).or_default() += 1;
            self.minimum = if self.counts.len() < self.min_domains {
                0
            } else {
                self.counts.values().copied().min().unwrap_or(0)
            };
        }
    }
}

/// Everything about the pod being placed that does not depend on the node.
pub(super) struct Candidate<'a> {
    pub(super) pod: &'a Pod,
    pub(super) namespace: String,
    pub(super) labels: BTreeMap<String, String>,
    pub(super) requests: Resources,
    pub(super) tolerations: Vec<Toleration>,
    pub(super) ports: Vec<HostPort>,
    pub(super) spread_keys: Vec<String>,
    pub(super) spreads: Vec<Spread>,
    /// Topology pairs where a pod with anti-affinity against this pod runs.
    pub(super) forbidden_by_existing: HashSet<(String, String)>,
    pub(super) affinity_terms: Vec<PodAffinityTerm>,
    /// For the affinity terms: topology pairs holding pods that match all of them.
    pub(super) affinity_counts: HashMap<(String, String), i64>,
    pub(super) anti_affinity_terms: Vec<PodAffinityTerm>,
    /// For the anti-affinity terms: topology pairs holding a matching pod.
    pub(super) anti_affinity_counts: HashMap<(String, String), i64>,
}

impl Scheduler {
    pub(super) fn namespace_labels(&self, namespace: &str) -> BTreeMap<String, String> {
        self.namespaces
            .get("", namespace)
            .map(|n| labels_of(&n.metadata))
            .unwrap_or_default()
    }

    /// Whether a pod-affinity term written in `owner_namespace` selects a pod.
    pub(super) fn term_selects(
        &self,
        term: &PodAffinityTerm,
        owner_namespace: &str,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> bool {
        let listed = term.namespaces.as_deref().unwrap_or_default();
        let namespace_ok = if listed.is_empty() && term.namespace_selector.is_none() {
            namespace == owner_namespace
        } else {
            listed.iter().any(|n| n == namespace)
                || term
                    .namespace_selector
                    .as_ref()
                    .is_some_and(|s| selector_matches(Some(s), &self.namespace_labels(namespace)))
        };
        namespace_ok && selector_matches(term.label_selector.as_ref(), labels)
    }

    /// The pod's `DoNotSchedule` spread constraints with the matching pods counted.
    pub(super) fn spreads(&self, pod: &Pod, nodes: &[NodeInfo]) -> Vec<Spread> {
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
        constraints
            .iter()
            .map(|constraint| {
                let mut selector = constraint.label_selector.clone();
                if let Some(selector) = selector.as_mut() {
                    for key in constraint.match_label_keys.iter().flatten() {
                        if let Some(value) = labels.get(key) {
                            selector
                                .match_expressions
                                .get_or_insert_with(Vec::new)
                                .push(LabelSelectorRequirement {
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
                let mut eligible = vec![false; nodes.len()];
                for (index, node) in nodes.iter().enumerate() {
                    if !spread_keys.iter().all(|k| node.labels.contains_key(k))
                        || (honor_affinity && !node_affinity_matches(pod, &node.labels, &node.name))
                        || (honor_taints && untolerated(&node.taints, &tolerations).is_some())
                    {
                        continue;
                    }
                    eligible[index] = true;
                    let matching = node
                        .pods
                        .iter()
                        .filter(|p| {
                            !p.deleting
                                && p.namespace == namespace
                                && selector_matches(selector.as_ref(), &p.labels)
                        })
                        .count() as i64;
                    *counts
                        .entry(node.labels[&constraint.topology_key].clone())
                        .or_default() += matching;
                }
                let min_domains = constraint.min_domains.unwrap_or(1).max(1) as usize;
                let minimum = if counts.len() < min_domains {
                    0
                } else {
                    counts.values().copied().min().unwrap_or(0)
                };
                Spread {
                    key: constraint.topology_key.clone(),
                    max_skew: i64::from(constraint.max_skew),
                    self_match: i64::from(selector_matches(selector.as_ref(), &labels)),
                    counts,
                    minimum,
                    min_domains,
                    namespace: namespace.clone(),
                    selector,
                    eligible,
                }
            })
            .collect()
    }

    /// Everything about placing `pod` that does not depend on the node, with its spread
    /// constraints already counted; `anti_affinity_placed` tells whether any placed pod has
    /// required anti-affinity terms (else they need no looking at).
    pub(super) fn candidate<'a>(
        &self,
        pod: &'a Pod,
        nodes: &[NodeInfo],
        spreads: Vec<Spread>,
        anti_affinity_placed: bool,
    ) -> Candidate<'a> {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let labels = labels_of(&pod.metadata);
        let tolerations = pod_tolerations(pod);
        let spread_keys: Vec<String> = spreads.iter().map(|s| s.key.clone()).collect();
        let mut forbidden_by_existing = HashSet::new();
        let affinity_terms = required_terms(pod, true);
        let anti_affinity_terms = required_terms(pod, false);
        let mut affinity_counts: HashMap<(String, String), i64> = HashMap::new();
        let mut anti_affinity_counts: HashMap<(String, String), i64> = HashMap::new();
        let look =
            anti_affinity_placed || !affinity_terms.is_empty() || !anti_affinity_terms.is_empty();
        for node in nodes.iter().filter(|_| look) {
            for placed in &node.pods {
                for term in &placed.anti_affinity {
                    if let Some(value) = node.labels.get(&term.topology_key)
                        && self.term_selects(term, &placed.namespace, &namespace, &labels)
                    {
                        forbidden_by_existing.insert((term.topology_key.clone(), value.clone()));
                    }
                }
                if !affinity_terms.is_empty()
                    && affinity_terms.iter().all(|t| {
                        self.term_selects(t, &namespace, &placed.namespace, &placed.labels)
                    })
                {
                    for term in &affinity_terms {
                        if let Some(value) = node.labels.get(&term.topology_key) {
                            *affinity_counts
                                .entry((term.topology_key.clone(), value.clone()))
                                .or_default() += 1;
                        }
                    }
                }
                for term in &anti_affinity_terms {
                    if let Some(value) = node.labels.get(&term.topology_key)
                        && self.term_selects(term, &namespace, &placed.namespace, &placed.labels)
                    {
                        *anti_affinity_counts
                            .entry((term.topology_key.clone(), value.clone()))
                            .or_default() += 1;
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
    pub(super) fn filter(&self, candidate: &Candidate<'_>, node: &NodeInfo) -> Vec<String> {
        // NodeUnschedulable.
        let cordon =
            Taint::without_value("node.kubernetes.io/unschedulable", TaintEffect::NoSchedule);
        if node.unschedulable && !tolerated_by(&cordon, &candidate.tolerations) {
            return vec!["node(s) were unschedulable".into()];
        }
        // TaintToleration.
        if let Some(taint) = untolerated(&node.taints, &candidate.tolerations) {
            return vec![format!(
                "node(s) had untolerated taint {{{}: {}}}",
                taint.key, taint.value
            )];
        }
        // NodeAffinity.
        if !node_affinity_matches(candidate.pod, &node.labels, &node.name) {
            return vec!["node(s) didn't match Pod's node affinity/selector".into()];
        }
        // NodePorts.
        if candidate
            .ports
            .iter()
            .any(|wanted| node.ports.iter().any(|used| used.conflicts(wanted)))
        {
            return vec!["node(s) didn't have free ports for the requested pod ports".into()];
        }
        // NodeResourcesFit.
        let free = node.allocatable.saturating_sub(&node.requested);
        let short: Vec<String> = candidate
            .requests
            .exceeding(&free)
            .into_iter()
            .map(|name| {
                if name == PODS {
                    "Too many pods".to_string()
                } else {
                    format!("Insufficient {name}")
                }
            })
            .collect();
        if !short.is_empty() {
            return short;
        }
        // PodTopologySpread.
        if !candidate
            .spread_keys
            .iter()
            .all(|k| node.labels.contains_key(k))
        {
            return vec![
                "node(s) didn't match pod topology spread constraints (missing required label)"
                    .into(),
            ];
        }
        for spread in &candidate.spreads {
            let domain = &node.labels[&spread.key];
            let matching = spread.counts.get(domain).copied().unwrap_or(0);
            if matching + spread.self_match - spread.minimum > spread.max_skew {
                return vec!["node(s) didn't match pod topology spread constraints".into()];
            }
        }
        // InterPodAffinity: the pod's affinity, its anti-affinity, then existing pods' anti-affinity.
        let pair = |key: &str| {
            node.labels
                .get(key)
                .map(|value| (key.to_string(), value.clone()))
        };
        if !candidate.affinity_terms.is_empty() {
            let mut pods_exist = true;
            for term in &candidate.affinity_terms {
                match pair(&term.topology_key) {
                    Some(p) => {
                        pods_exist &= candidate.affinity_counts.get(&p).copied().unwrap_or(0) > 0
                    }
                    None => return vec!["node(s) didn't match pod affinity rules".into()],
                }
            }
            // The first pod of a group whose members attract each other may go anywhere.
            let first_of_its_kind = candidate.affinity_counts.is_empty()
                && candidate.affinity_terms.iter().all(|t| {
                    self.term_selects(
                        t,
                        &candidate.namespace,
                        &candidate.namespace,
                        &candidate.labels,
                    )
                });
            if !pods_exist && !first_of_its_kind {
                return vec!["node(s) didn't match pod affinity rules".into()];
            }
        }
        if candidate.anti_affinity_terms.iter().any(|term| {
            pair(&term.topology_key)
                .is_some_and(|p| candidate.anti_affinity_counts.get(&p).copied().unwrap_or(0) > 0)
        }) {
            return vec!["node(s) didn't match pod anti-affinity rules".into()];
        }
        if candidate
            .forbidden_by_existing
            .iter()
            .any(|(key, value)| node.labels.get(key) == Some(value))
        {
            return vec!["node(s) didn't satisfy existing pods anti-affinity rules".into()];
        }
        Vec::new()
    }

    /// Picks a node for the pod, or explains in kube-scheduler's words why there is none.
    pub(super) fn place(
        &self,
        pod: &Pod,
        nodes: &[NodeInfo],
        spreads: Vec<Spread>,
        anti_affinity_placed: bool,
    ) -> Result<usize, String> {
        if nodes.is_empty() {
            return Err("no nodes available to schedule pods".into());
        }
        let candidate = self.candidate(pod, nodes, spreads, anti_affinity_placed);
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
        let mut histogram: Vec<String> = reasons
            .iter()
            .map(|(reason, count)| format!("{count} {reason}"))
            .collect();
        histogram.sort();
        Err(format!(
            "0/{} nodes are available: {}.",
            nodes.len(),
            histogram.join(", ")
        ))
    }
}
