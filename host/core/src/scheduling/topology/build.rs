//! Building a [`Topology`]: its groups from the pods' constraints (spread, affinity,
//! anti-affinity and their inverses), their domains from the NodePools and nodes, and the
//! counts they start from.

use super::*;

impl<'a> Topology<'a> {
    /// Builds the domain universe and the inverse anti-affinity groups of bound pods. Pending
    /// pods are added with [`own_inverse`](Self::own_inverse) and [`update`](Self::update).
    pub(crate) fn new(
        pods: &'a [PendingPod],
        nodes: &'a [ExistingNode],
        bound_pods: &'a [BoundPod],
        namespace_labels: &BTreeMap<String, BTreeMap<String, String>>,
        nodepools: &[NodePool],
    ) -> Self {
        let mut keys: BTreeSet<&str> = BTreeSet::new();
        // Namespace selectors are rare: the namespace universe is built only for them.
        let mut selects_namespaces = false;
        for p in pods {
            keys.extend(p.topology_spread.iter().map(|c| c.topology_key.as_str()));
            let preferred = p
                .preferred_pod_affinity
                .iter()
                .chain(&p.preferred_pod_anti_affinity)
                .map(|w| &w.term);
            for term in p
                .pod_affinity
                .iter()
                .chain(&p.pod_anti_affinity)
                .chain(preferred)
            {
                keys.insert(&term.topology_key);
                selects_namespaces |= term.namespace_selector.is_some();
            }
        }
        let pending: BTreeSet<&PodKey> = pods.iter().map(|p| &p.key).collect();
        let counted = |b: &&BoundPod| !pending.contains(&b.key) && !b.terminating;
        // The bound pods' anti-affinity terms, in node and pod order (the order their inverse
        // groups are numbered in).
        let mut repelling: Vec<&BoundPod> = bound_pods
            .iter()
            .filter(|b| !b.anti_affinity.is_empty())
            .filter(counted)
            .collect();
        repelling.sort_by(|a, b| a.node.cmp(&b.node).then_with(|| a.key.cmp(&b.key)));
        for b in &repelling {
            for term in &b.anti_affinity {
                keys.insert(&term.topology_key);
                selects_namespaces |= term.namespace_selector.is_some();
            }
        }
        // Bound pods are counted only into groups, and groups exist only for the keys above:
        // without any, a pass (most of consolidation's simulations) skips the cluster's pods.
        let bound: Vec<&BoundPod> = if keys.is_empty() {
            Vec::new()
        } else {
            bound_pods.iter().filter(counted).collect()
        };

        let mut topology = Topology {
            pods,
            nodes,
            node_index: std::cell::OnceCell::new(),
            namespaces: if selects_namespaces {
                namespace_universe(namespace_labels, pods, &bound)
            } else {
                Vec::new()
            },
            bound,
            universe: build_universe(nodepools, &keys),
            groups: Vec::new(),
            ids: HashMap::default(),
            stated_ids: HashMap::default(),
            inverse: Vec::new(),
            inverse_ids: HashMap::default(),
            owned: vec![Vec::new(); pods.len()],
            selecting: vec![Vec::new(); pods.len()],
            inverse_owned: vec![Vec::new(); pods.len()],
            inverse_selecting: vec![Vec::new(); pods.len()],
            host_rules: vec![Vec::new(); pods.len()],
            other_rules: vec![Vec::new(); pods.len()],
            numbering: vec![KeyNumbering {
                key: HOSTNAME_LABEL.to_owned(),
                ..Default::default()
            }],
            label_classes: None,
        };
        for b in repelling {
            let node = topology.node_named(&b.node).map(|i| &nodes[i]);
            for term in &b.anti_affinity {
                let id = topology.inverse_group(affinity_spec(
                    Kind::AntiAffinity,
                    term,
                    &b.key.namespace,
                    &topology.namespaces,
                ));
                if let Some(domain) = node.and_then(|n| label(n, &term.topology_key)) {
                    topology.inverse[id].record(domain);
                }
            }
        }
        topology
    }

    pub(super) fn group(&mut self, spec: GroupSpec) -> usize {
        let identity = spec.identity();
        if let Some(&id) = self.ids.get(&identity) {
            return id;
        }
        let mut group = Group::new(spec);
        self.seed(&mut group);
        self.count(&mut group);
        self.number_domains(&mut group);
        let id = self.groups.len();
        let pods = self.pods;
        for class in self
            .label_classes
            .get_or_insert_with(|| label_classes(pods))
            .iter()
        {
            let pod = &pods[class[0]];
            if group.selects(&pod.key.namespace, &pod.labels) {
                for &p in class {
                    self.selecting[p].push(id);
                }
            }
        }
        self.groups.push(group);
        self.ids.insert(identity, id);
        id
    }

    pub(super) fn inverse_group(&mut self, spec: GroupSpec) -> usize {
        let identity = spec.identity();
        if let Some(&id) = self.inverse_ids.get(&identity) {
            return id;
        }
        let mut group = Group::new(spec);
        self.seed(&mut group);
        self.number_domains(&mut group);
        let id = self.inverse.len();
        self.inverse.push(group);
        self.inverse_ids.insert(identity, id);
        id
    }

    /// Registers the universe's domains for the group's key (only those offered by a pool
    /// whose taints the group tolerates, when its filter honors taints).
    pub(super) fn seed(&self, group: &mut Group) {
        let Some(domains) = self.universe.get(&group.key) else {
            return;
        };
        for (domain, taint_sets) in domains {
            let admitted = match &group.filter.tolerations {
                None => true,
                Some(tolerations) => taint_sets
                    .iter()
                    .any(|taints| tolerates(tolerations, taints, false)),
            };
            if admitted {
                group.register(domain);
            }
        }
    }

    /// Registers the domains of existing nodes the group's filter admits, then counts the
    /// bound pods it selects (a node without the key counts only for hostname, by name).
    pub(super) fn count(&self, group: &mut Group) {
        for node in self.nodes {
            if let Some(domain) = label(node, &group.key)
                && group
                    .filter
                    .matches(&node.taints, &node.requirements, &NO_KEYS)
            {
                group.register(domain);
            }
        }
        for b in &self.bound {
            if !group.selects(&b.key.namespace, &b.labels) {
                continue;
            }
            let Some(n) = self.node_named(&b.node) else {
                continue;
            };
            let node = &self.nodes[n];
            let domain = match label(node, &group.key) {
                Some(d) => d,
                None if group.key == HOSTNAME_LABEL => node.name.as_str(),
                None => continue,
            };
            if group
                .filter
                .matches(&node.taints, &node.requirements, &NO_KEYS)
            {
                group.record(domain);
            }
        }
    }
}

/// Every namespace a `namespaceSelector` can pick: the Namespaces the caller knows, and the
/// namespace of every pending and bound pod (only namespaces holding pods matter to a pod
/// selector). Each carries `kubernetes.io/metadata.name`, as the API server sets it.
pub(super) fn namespace_universe(
    known: &BTreeMap<String, BTreeMap<String, String>>,
    pods: &[PendingPod],
    bound: &[&BoundPod],
) -> Vec<(String, BTreeMap<String, String>)> {
    let mut all: BTreeMap<String, BTreeMap<String, String>> = known.clone();
    let pod_namespaces = pods
        .iter()
        .map(|p| &p.key.namespace)
        .chain(bound.iter().map(|b| &b.key.namespace));
    for namespace in pod_namespaces {
        if !all.contains_key(namespace) {
            all.insert(namespace.clone(), BTreeMap::new());
        }
    }
    for (name, labels) in &mut all {
        labels
            .entry(NAMESPACE_NAME_LABEL.to_owned())
            .or_insert_with(|| name.clone());
    }
    all.into_iter().collect()
}

/// The label the API server gives every Namespace: its own name.
const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The group of an affinity or anti-affinity term of a pod in `namespace`; `universe` is
/// what the term's `namespaceSelector` picks from.
pub(super) fn affinity_spec(
    kind: Kind,
    term: &PodAffinityTerm,
    namespace: &str,
    universe: &[(String, BTreeMap<String, String>)],
) -> GroupSpec {
    let mut namespaces: BTreeSet<String> = term.namespaces.iter().cloned().collect();
    match &term.namespace_selector {
        Some(selector) => {
            namespaces.extend(
                universe
                    .iter()
                    .filter(|(_, labels)| selector.matches(labels))
                    .map(|(name, _)| name.clone()),
            );
        }
        None if namespaces.is_empty() => {
            namespaces.insert(namespace.to_owned());
        }
        None => {}
    }
    GroupSpec {
        kind,
        key: term.topology_key.clone(),
        namespaces,
        selector: term.label_selector.clone(),
        max_skew: u32::MAX,
        min_domains: None,
        filter: NodeFilter::default(),
    }
}

/// Domains per key from the NodePools: each pool's own requirements (its requirements and
/// template labels; the nodepool and NodeClass labels the template adds are left out, as
/// upstream derives domains from the NodePool spec) intersected with each instance type's
/// requirements, plus the `In` values of the pool's requirements.
pub(super) fn build_universe(nodepools: &[NodePool], keys: &BTreeSet<&str>) -> Universe {
    let mut universe: Universe = BTreeMap::new();
    if keys.is_empty() {
        return universe;
    }
    for pool in nodepools {
        let template = &pool.template;
        let mut base = template.requirements.clone();
        for added in [
            NODEPOOL_LABEL.to_owned(),
            template.node_class_ref.label_key(),
        ] {
            if !template.labels.contains_key(&added) {
                base.remove(&added);
            }
        }
        let taints = &template.taints;
        // Types mostly share their requirement on a key: each distinct one is seen once.
        let mut seen: HashMap<u64, Vec<&Requirement>, BuildHasherDefault<FxHasher>> =
            HashMap::default();
        for t in &pool.instance_types {
            for &key in keys {
                let own = t
                    .requirements()
                    .iter()
                    .zip(t.requirement_fingerprints())
                    .find(|(r, _)| r.key() == key);
                if let Some((r, &fingerprint)) = own {
                    let same = seen.entry(fingerprint).or_default();
                    if same.contains(&r) {
                        continue;
                    }
                    same.push(r);
                }
                let combined = match (base.get(key), own.map(|(r, _)| r)) {
                    (Some(a), Some(b)) => a.intersection(b),
                    (Some(a), None) => a.clone(),
                    (None, Some(b)) => b.clone(),
                    (None, None) => continue,
                };
                if combined.is_complement() {
                    continue;
                }
                let domains = universe.entry(key.to_owned()).or_default();
                for v in combined.values() {
                    insert_domain(domains, v, taints);
                }
            }
        }
        for &key in keys {
            if let Some(r) = base.get(key)
                && !r.is_complement()
            {
                let domains = universe.entry(key.to_owned()).or_default();
                for v in r.values() {
                    insert_domain(domains, v, taints);
                }
            }
        }
    }
    universe
}
