//! Topology groups: the bookkeeping behind topology spread constraints, pod affinity and pod
//! anti-affinity, following upstream's `Topology` / `TopologyGroup`.
//!
//! A group counts, per domain (a value of its topology key), the pods its selector matches.
//! Pods with the same constraint share one group (the "owners"). For each placement attempt
//! the pod's owned groups, plus the *inverse* anti-affinity groups that select it (built from
//! the required anti-affinity terms of other pods, placed or pending), each narrow the
//! candidate's requirement on their key to the domains still allowed; once placed, the pod is
//! recorded in every group that selects it.
//!
//! Domains come from the NodePools (their requirements and template labels intersected with
//! each instance type's requirements, plus the `In` values of the pool requirements), from the
//! existing nodes' labels and from hostnames (existing nodes, and the placeholder of each new
//! claim once it holds a pod). Counts start from the pods already bound to nodes.
//!
//! Upstream iterates Go maps where several domains tie; here domains are kept sorted and the
//! first (smallest) one wins, so results are deterministic.
//!
//! How a topology is built (groups, domains, starting counts) is in the `build` module; one
//! group's counts and the domains it allows are in the `group` module.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::hash::BuildHasherDefault;
use std::rc::Rc;

use crate::hash::FxHasher;
use crate::labels::{HOSTNAME_LABEL, NODEPOOL_LABEL};
use crate::requirements::{KeySet, NO_KEYS, Requirement, Requirements};
use crate::taints::{Taint, Toleration};

use super::constraints::{
    LabelSelectorRequirement, NodeInclusionPolicy, PodAffinityTerm, SelectorOperator,
    TopologySpreadConstraint,
};
use super::daemons::tolerates;
use super::render;
use super::types::{BoundPod, ExistingNode, NodePool, PendingPod, PodKey};

mod build;
mod group;

use build::affinity_spec;
use group::{Group, GroupSpec, Kind, NodeFilter, single};

/// The domains of one topology key numbered during a pass, so that per-claim checks count by
/// index instead of by string.
#[derive(Default)]
struct KeyNumbering {
    key: String,
    slots: HashMap<String, u32, BuildHasherDefault<FxHasher>>,
    names: Vec<String>,
}

/// Records a pod in `domain` of `group`, and in the numbered counts when the domain is
/// numbered.
fn record_numbered(group: &mut Group, numbering: &[KeyNumbering], domain: &str) {
    group.record(domain);
    if let Some(&slot) = numbering[group.key_index].slots.get(domain) {
        group.by_slot[slot as usize] += 1;
    }
}

/// How many groups and inverse groups a domain was registered in ([`Topology::register`]):
/// groups are only ever appended, so the first ones.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Registered {
    groups: usize,
    inverse: usize,
}

impl Registered {
    /// Registered nowhere yet.
    pub(crate) const NONE: Registered = Registered {
        groups: 0,
        inverse: 0,
    };
}

/// "Not narrowed to one numbered domain" in a claim's pins (see [`Topology::pin`]).
pub(crate) const UNPINNED: u32 = u32::MAX;

/// Which group a violation or a hostname rule is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum GroupRef {
    Regular(usize),
    Inverse(usize),
}

/// A hostname rule of a pod: a group counted per hostname and the count at which a
/// hostname is ruled out.
pub(crate) type HostRule = (GroupRef, u32);

/// A topology constraint that left no domain: kept cheap, rendered only when a reason is
/// shown.
#[derive(Debug, Clone)]
pub(crate) struct Violation {
    group: GroupRef,
    pod_domains: Requirement,
    node_domains: Requirement,
}

/// The pod-side inputs of [`Topology::update`]: the constraints a pod currently has (after
/// relaxation, and without preferences under the Ignore policy).
pub(crate) struct Constraints<'p> {
    /// Remaining spread constraints.
    pub spreads: Vec<&'p TopologySpreadConstraint>,
    /// Required and remaining preferred affinity terms.
    pub affinity: Vec<&'p PodAffinityTerm>,
    /// Required and remaining preferred anti-affinity terms.
    pub anti_affinity: Vec<&'p PodAffinityTerm>,
    /// Node selector ∩ each remaining required node-affinity term.
    pub node_terms: &'p [Requirements],
    /// The pod's tolerations (plus the PreferNoSchedule one relaxation may have added).
    pub tolerations: Vec<Toleration>,
}

/// Domains per topology key, each with the taint sets of the pools offering it (an empty set
/// means some untainted pool offers it).
type Universe = BTreeMap<String, BTreeMap<String, Vec<Vec<Taint>>>>;

fn insert_domain(domains: &mut BTreeMap<String, Vec<Vec<Taint>>>, domain: &str, taints: &[Taint]) {
    match domains.get_mut(domain) {
        None => {
            domains.insert(domain.to_owned(), vec![taints.to_vec()]);
        }
        Some(sets) => {
            if taints.is_empty() {
                *sets = vec![Vec::new()];
            } else if !sets.first().is_some_and(Vec::is_empty) {
                sets.push(taints.to_vec());
            }
        }
    }
}

/// A node's single label value for `key`, if it has one.
fn label<'n>(node: &'n ExistingNode, key: &str) -> Option<&'n str> {
    node.requirements.get(key).and_then(single)
}

/// The hostname of an existing node: its hostname label, else its name.
pub(crate) fn hostname(node: &ExistingNode) -> &str {
    label(node, HOSTNAME_LABEL).unwrap_or(&node.name)
}

/// All topology groups of a pass.
pub(crate) struct Topology<'a> {
    pods: &'a [PendingPod],
    nodes: &'a [ExistingNode],
    /// The nodes by name, built on first use (a pass without topology never needs it).
    node_index: std::cell::OnceCell<BTreeMap<&'a str, usize>>,
    /// The bound pods groups count (neither pending nor terminating); empty when the pass
    /// has no topology key, so no group.
    bound: Vec<&'a BoundPod>,
    /// Every namespace a `namespaceSelector` can pick, with its labels (see
    /// [`namespace_universe`]); empty when no term of the pass has a selector.
    namespaces: Vec<(String, BTreeMap<String, String>)>,
    universe: Universe,
    groups: Vec<Group>,
    ids: HashMap<u64, usize, BuildHasherDefault<FxHasher>>,
    /// The group of a pod's constraint as the pod states it (see [`Topology::update`]):
    /// pods of one workload find theirs here without building and normalizing a spec.
    stated_ids: HashMap<u64, usize, BuildHasherDefault<FxHasher>>,
    inverse: Vec<Group>,
    inverse_ids: HashMap<u64, usize, BuildHasherDefault<FxHasher>>,
    /// Per pending pod: the regular groups it owns (sorted).
    owned: Vec<Vec<usize>>,
    /// Per pending pod: the regular groups whose selector matches it (sorted).
    selecting: Vec<Vec<usize>>,
    /// Per pending pod: the inverse groups built from its required anti-affinity terms.
    inverse_owned: Vec<Vec<usize>>,
    /// Per pending pod: the inverse groups whose selector matches it.
    inverse_selecting: Vec<Vec<usize>>,
    /// Per pending pod: its hostname rules, each a group and the count at which a hostname
    /// is closed to the pod (see [`rejects_host`](Self::rejects_host)).
    host_rules: Vec<Vec<HostRule>>,
    /// Per pending pod: its groups (owned, or inverse ones selecting it) on other keys.
    other_rules: Vec<Vec<GroupRef>>,
    /// Domains numbered per topology key; entry 0 is the hostname.
    numbering: Vec<KeyNumbering>,
    /// The pending pods grouped by namespace and labels (what a selector reads), built the
    /// first time a group is created: a new group asks each class once, not each pod.
    label_classes: Option<Vec<Vec<usize>>>,
}

/// The pending pods grouped by identical namespace and labels, each class in pod order.
fn label_classes(pods: &[PendingPod]) -> Vec<Vec<usize>> {
    let mut index: HashMap<(&str, &BTreeMap<String, String>), usize, BuildHasherDefault<FxHasher>> =
        HashMap::default();
    let mut classes: Vec<Vec<usize>> = Vec::new();
    for (p, pod) in pods.iter().enumerate() {
        let class = *index
            .entry((pod.key.namespace.as_str(), &pod.labels))
            .or_insert_with(|| {
                classes.push(Vec::new());
                classes.len() - 1
            });
        classes[class].push(p);
    }
    classes
}

impl<'a> Topology<'a> {
    /// Creates the inverse groups of pending pod `p`'s required anti-affinity terms.
    pub(crate) fn own_inverse(&mut self, p: usize) {
        let pod = &self.pods[p];
        let mut ids: Vec<usize> = pod
            .pod_anti_affinity
            .iter()
            .map(|term| {
                let spec = affinity_spec(
                    Kind::AntiAffinity,
                    term,
                    &pod.key.namespace,
                    &self.namespaces,
                );
                self.inverse_group(spec)
            })
            .collect();
        ids.sort_unstable();
        ids.dedup();
        self.inverse_owned[p] = ids;
    }

    /// Once every pending pod owns its inverse groups: which inverse groups select each pod.
    pub(crate) fn index_inverse(&mut self) {
        for (p, pod) in self.pods.iter().enumerate() {
            self.inverse_selecting[p] = self
                .inverse
                .iter()
                .enumerate()
                .filter(|(_, g)| g.selects(&pod.key.namespace, &pod.labels))
                .map(|(i, _)| i)
                .collect();
        }
        for p in 0..self.pods.len() {
            self.index_host_rules(p);
        }
    }

    /// Recomputes pod `p`'s hostname rules from the groups it owns and the inverse groups
    /// selecting it: a hostname holding `limit` or more of a group's pods is closed to it —
    /// one pod for anti-affinity, `maxSkew + 1` (less the pod itself when it is selected) for
    /// a spread, whose hostname minimum is always 0. Affinity never closes a hostname here.
    fn index_host_rules(&mut self, p: usize) {
        let mut rules = Vec::new();
        let mut others = Vec::new();
        for &g in &self.owned[p] {
            let group = &self.groups[g];
            if !group.hostname {
                others.push(GroupRef::Regular(g));
                continue;
            }
            let own = u32::from(self.selecting[p].binary_search(&g).is_ok());
            match group.kind {
                Kind::AntiAffinity => rules.push((GroupRef::Regular(g), 1)),
                Kind::Spread => rules.push((
                    GroupRef::Regular(g),
                    (group.max_skew + 1).saturating_sub(own),
                )),
                Kind::Affinity => {}
            }
        }
        for &g in &self.inverse_selecting[p] {
            if self.inverse[g].hostname {
                rules.push((GroupRef::Inverse(g), 1));
            } else {
                others.push(GroupRef::Inverse(g));
            }
        }
        self.host_rules[p] = rules;
        self.other_rules[p] = others;
    }

    /// Whether pod `p`'s topology constraints already rule out a claim numbered `slot` with
    /// pins `pins` (see [`pin`](Self::pin)), the pod's required node constraints being `strict`: the
    /// hostname rules of [`rejects_host`](Self::rejects_host), then every other group on a
    /// key the claim has narrowed to one domain. Exact where it answers `true` —
    /// [`domains`](Self::domains) would find no domain — and cheap: the common way a claim
    /// fails a pod is skipped without building requirements.
    pub(crate) fn rejects(&self, p: usize, slot: u32, pins: &[u32], strict: &Requirements) -> bool {
        if self.rejects_host(p, slot) {
            return true;
        }
        self.other_rules[p].iter().any(|&rule| {
            let slot = pins
                .get(self.group_of(rule).key_index)
                .copied()
                .unwrap_or(UNPINNED);
            slot != UNPINNED && self.rule_rejects(p, rule, slot, strict)
        })
    }

    /// The numbers of the keys of pod `p`'s rules other than its hostname rules (a claim
    /// pinned on one of them may be ruled out by [`rejects`](Self::rejects)).
    pub(crate) fn pin_keys(&self, p: usize) -> impl Iterator<Item = usize> + '_ {
        self.other_rules[p]
            .iter()
            .map(|&rule| self.group_of(rule).key_index)
    }

    /// How many domains of the key numbered `key_index` are numbered so far.
    pub(crate) fn domains_numbered(&self, key_index: usize) -> usize {
        self.numbering[key_index].names.len()
    }

    /// Whether none of pod `p`'s rules on the key numbered `key_index` rules out a claim
    /// pinned to that key's domain `slot` — what [`rejects`](Self::rejects) checks for it.
    pub(crate) fn admits_pin(
        &self,
        p: usize,
        key_index: usize,
        slot: u32,
        strict: &Requirements,
    ) -> bool {
        !self.other_rules[p].iter().any(|&rule| {
            self.group_of(rule).key_index == key_index && self.rule_rejects(p, rule, slot, strict)
        })
    }

    /// Pod `p`'s hostname rules: a node whose hostname slot counts `limit` or more pods of
    /// the group is ruled out (see [`rejects_host`](Self::rejects_host)).
    pub(crate) fn host_rules(&self, p: usize) -> &[HostRule] {
        &self.host_rules[p]
    }

    /// Whether hostname rule `rule` still admits the hostname numbered `slot`. Counts only
    /// grow during a pass, so once it says no for a slot, it says no for the rest of the pass.
    pub(crate) fn host_admits(&self, (group, limit): HostRule, slot: u32) -> bool {
        self.group_of(group).by_slot[slot as usize] < limit
    }

    fn group_of(&self, rule: GroupRef) -> &Group {
        match rule {
            GroupRef::Regular(g) => &self.groups[g],
            GroupRef::Inverse(g) => &self.inverse[g],
        }
    }

    /// Whether `rule` of pod `p` rules out a claim pinned to the domain numbered `slot` of
    /// the rule's key (the pod's required node constraints being `strict`).
    fn rule_rejects(&self, p: usize, rule: GroupRef, slot: u32, strict: &Requirements) -> bool {
        let (group, self_selecting) = match rule {
            GroupRef::Regular(g) => (&self.groups[g], self.selecting[p].binary_search(&g).is_ok()),
            GroupRef::Inverse(g) => (&self.inverse[g], true),
        };
        let domain = self.numbering[group.key_index].names[slot as usize].as_str();
        let pod = strict.get(&group.key).unwrap_or(&group.everything);
        if !pod.has(domain) {
            // The pod's own requirements exclude the claim's only domain.
            return true;
        }
        let count = group.by_slot[slot as usize];
        match group.kind {
            Kind::AntiAffinity => count > 0,
            Kind::Affinity => count == 0 && !(self_selecting && group.bootstrappable(pod)),
            Kind::Spread => {
                !group.index.contains_key(domain)
                    || i64::from(count) + i64::from(self_selecting) - group.min_count(pod)
                        > i64::from(group.max_skew)
            }
        }
    }

    /// Whether pod `p`'s hostname constraints (anti-affinity, spread, inverse anti-affinity)
    /// already rule out a node whose only possible hostname is the one numbered `slot` — a
    /// cheap, exact pre-check of what [`domains`](Self::domains) would say about it.
    fn rejects_host(&self, p: usize, slot: u32) -> bool {
        self.host_rules[p]
            .iter()
            .any(|&rule| !self.host_admits(rule, slot))
    }

    /// (Re)computes the groups pod `p` owns from its current constraints; groups that do
    /// not exist yet are created (counting only the pods bound to nodes, as upstream).
    pub(crate) fn update(&mut self, p: usize, constraints: &Constraints<'_>) {
        let pods = self.pods;
        let pod = &pods[p];
        let mut ids = Vec::new();
        for c in &constraints.spreads {
            let honor_affinity = c.node_affinity_policy != Some(NodeInclusionPolicy::Ignore);
            let honor_taints = c.node_taints_policy == Some(NodeInclusionPolicy::Honor);
            // Everything the spec below is built from (a finer key than its identity).
            let label_values: Vec<Option<&String>> = c
                .match_label_keys
                .iter()
                .map(|key| pod.labels.get(key))
                .collect();
            let stated = crate::hash::fingerprint(&(
                Kind::Spread,
                *c,
                &label_values,
                &pod.key.namespace,
                honor_affinity.then_some(constraints.node_terms),
                honor_taints.then_some(&constraints.tolerations),
            ));
            if let Some(&id) = self.stated_ids.get(&stated) {
                ids.push(id);
                continue;
            }
            let mut selector = c.label_selector.clone();
            if let Some(selector) = selector.as_mut() {
                for key in &c.match_label_keys {
                    if let Some(value) = pod.labels.get(key) {
                        selector
                            .match_expressions
                            .push(LabelSelectorRequirement::new(
                                key.as_str(),
                                SelectorOperator::In,
                                [value.as_str()],
                            ));
                    }
                }
            }
            let spec = GroupSpec {
                kind: Kind::Spread,
                key: c.topology_key.clone(),
                namespaces: BTreeSet::from([pod.key.namespace.clone()]),
                selector,
                max_skew: c.max_skew,
                min_domains: c.min_domains,
                filter: NodeFilter {
                    affinity: honor_affinity.then(|| constraints.node_terms.to_vec()),
                    tolerations: honor_taints.then(|| constraints.tolerations.clone()),
                },
            };
            let id = self.group(spec);
            self.stated_ids.insert(stated, id);
            ids.push(id);
        }
        let terms = constraints
            .affinity
            .iter()
            .map(|&term| (Kind::Affinity, term));
        let anti_terms = constraints
            .anti_affinity
            .iter()
            .map(|&term| (Kind::AntiAffinity, term));
        for (kind, term) in terms.chain(anti_terms) {
            let stated = crate::hash::fingerprint(&(kind, term, &pod.key.namespace));
            let id = match self.stated_ids.get(&stated) {
                Some(&id) => id,
                None => {
                    let id = self.group(affinity_spec(
                        kind,
                        term,
                        &pod.key.namespace,
                        &self.namespaces,
                    ));
                    self.stated_ids.insert(stated, id);
                    id
                }
            };
            ids.push(id);
        }
        ids.sort_unstable();
        ids.dedup();
        self.owned[p] = ids;
        self.index_host_rules(p);
    }

    /// Whether the pass has any group (without one, [`register`](Self::register) learns
    /// nothing).
    pub(crate) fn has_groups(&self) -> bool {
        !self.groups.is_empty() || !self.inverse.is_empty()
    }

    /// The index of the node named `name`.
    fn node_named(&self, name: &str) -> Option<usize> {
        self.node_index
            .get_or_init(|| {
                self.nodes
                    .iter()
                    .enumerate()
                    .map(|(i, n)| (n.name.as_str(), i))
                    .collect()
            })
            .get(name)
            .copied()
    }

    /// Registers `domain` for `key` in every group (e.g. a new claim's hostname) created
    /// since `seen`, what an earlier call for the same domain returned (`Registered::NONE`
    /// the first time). A registered domain stays registered, so registering a claim's
    /// hostname each time a pod lands on it visits each group once, not once per pod.
    pub(crate) fn register(&mut self, key: &str, domain: &str, seen: Registered) -> Registered {
        let groups = self.groups[seen.groups..].iter_mut();
        let inverse = self.inverse[seen.inverse..].iter_mut();
        // One name for every group that learns the domain now.
        let mut name: Option<Rc<str>> = None;
        for g in groups.chain(inverse) {
            if g.key == key {
                g.register_named(domain, || {
                    name.get_or_insert_with(|| Rc::from(domain)).clone()
                });
            }
        }
        Registered {
            groups: self.groups.len(),
            inverse: self.inverse.len(),
        }
    }

    /// The domain requirements pod `p` adds on a node: one per owned group and per inverse
    /// group selecting the pod. `strict` are the pod's required node constraints (node
    /// selector and the required affinity term in use, no preferences); `node` gives the
    /// node's requirement on a key (the node's or claim's requirements intersected with the
    /// pod's; `None` when neither defines it). A failure carries a [`Violation`] only when
    /// `detail` is set.
    pub(crate) fn domains<'r>(
        &self,
        p: usize,
        strict: &Requirements,
        node: &dyn Fn(&str) -> Option<Cow<'r, Requirement>>,
        detail: bool,
    ) -> Result<Vec<Requirement>, Option<Box<Violation>>> {
        let owned = self.owned[p]
            .iter()
            .map(|&g| (GroupRef::Regular(g), &self.groups[g]));
        let inverse = self.inverse_selecting[p]
            .iter()
            .map(|&g| (GroupRef::Inverse(g), &self.inverse[g]));
        let mut out = Vec::new();
        for (reference, group) in owned.chain(inverse) {
            let pod_domains = strict.get(&group.key).unwrap_or(&group.everything);
            let node_domains = node(&group.key).unwrap_or(Cow::Borrowed(&group.everything));
            let self_selecting = match reference {
                GroupRef::Regular(g) => self.selecting[p].binary_search(&g).is_ok(),
                GroupRef::Inverse(_) => true,
            };
            match group.next(self_selecting, pod_domains, &node_domains) {
                Some(r) => out.push(r),
                None => {
                    return Err(detail.then(|| {
                        Box::new(Violation {
                            group: reference,
                            pod_domains: pod_domains.clone(),
                            node_domains: node_domains.into_owned(),
                        })
                    }));
                }
            }
        }
        Ok(out)
    }

    /// Records pod `p` on a node with these taints and (final) requirements: in every group
    /// that selects it and whose node filter admits the node (spread and affinity only once
    /// the key has a single value; anti-affinity in every domain the node may still be in),
    /// and in the inverse groups it owns.
    pub(crate) fn record<K: KeySet + ?Sized>(
        &mut self,
        p: usize,
        taints: &[Taint],
        requirements: &Requirements,
        allow: &K,
    ) {
        for &g in &self.selecting[p] {
            let group = &mut self.groups[g];
            if !group.filter.matches(taints, requirements, allow) {
                continue;
            }
            let Some(r) = requirements.get(&group.key) else {
                continue;
            };
            if r.is_complement() {
                continue;
            }
            if group.kind == Kind::AntiAffinity {
                for v in r.values() {
                    record_numbered(group, &self.numbering, v);
                }
            } else if let Some(v) = single(r) {
                record_numbered(group, &self.numbering, v);
            }
        }
        for &g in &self.inverse_owned[p] {
            let group = &mut self.inverse[g];
            if let Some(r) = requirements.get(&group.key)
                && !r.is_complement()
            {
                for v in r.values() {
                    record_numbered(group, &self.numbering, v);
                }
            }
        }
    }

    /// The number of hostname `host` in this pass (numbering it if new), for
    /// [`rejects_host`](Self::rejects_host). Number the hostnames of the nodes and claims
    /// that pods are tried on.
    pub(crate) fn host_slot(&mut self, host: &str) -> u32 {
        self.slot(0, host)
    }

    /// The number of `domain` of the key numbered `key_index`, numbering it if new.
    fn slot(&mut self, key_index: usize, domain: &str) -> u32 {
        let numbering = &mut self.numbering[key_index];
        if let Some(&slot) = numbering.slots.get(domain) {
            return slot;
        }
        let slot = numbering.names.len() as u32;
        numbering.slots.insert(domain.to_owned(), slot);
        numbering.names.push(domain.to_owned());
        for group in self.groups.iter_mut().chain(self.inverse.iter_mut()) {
            if group.key_index == key_index {
                let count = group.count(domain);
                group.by_slot.push(count);
            }
        }
        slot
    }

    /// The number of topology key `key`, numbering it if new.
    fn key_index(&mut self, key: &str) -> usize {
        match self.numbering.iter().position(|n| n.key == key) {
            Some(i) => i,
            None => {
                self.numbering.push(KeyNumbering {
                    key: key.to_owned(),
                    ..Default::default()
                });
                self.numbering.len() - 1
            }
        }
    }

    /// A claim's pins: per topology key number (the hostname's, 0, excepted), the number of
    /// the one domain `requirements` allow, or [`UNPINNED`]. Written into `pins`, which
    /// [`rejects`](Self::rejects) reads; refresh them whenever the claim's requirements
    /// change.
    pub(crate) fn pin(&mut self, requirements: &Requirements, pins: &mut Vec<u32>) {
        pins.clear();
        pins.push(UNPINNED);
        for k in 1..self.numbering.len() {
            let domain = requirements.get(&self.numbering[k].key).and_then(single);
            let slot = match domain {
                Some(d) => self.slot(k, d),
                None => UNPINNED,
            };
            pins.push(slot);
        }
    }

    /// Gives a new group its key's number and the counts of the domains numbered so far.
    fn number_domains(&mut self, group: &mut Group) {
        group.key_index = self.key_index(&group.key);
        let numbering = &self.numbering[group.key_index];
        let mut by_slot = vec![0; numbering.names.len()];
        for (domain, &slot) in &numbering.slots {
            by_slot[slot as usize] = group.count(domain);
        }
        group.by_slot = by_slot;
    }

    /// Upstream's reason for a violation: `unsatisfiable topology constraint for <kind>,
    /// key=<key> (counts = <domain: count, …>, podDomains = <req>, nodeDomains = <req>` (the
    /// parenthesis is left open, as upstream prints it).
    pub(crate) fn describe(&self, v: &Violation) -> String {
        let group = match v.group {
            GroupRef::Regular(g) => &self.groups[g],
            GroupRef::Inverse(g) => &self.inverse[g],
        };
        format!(
            "unsatisfiable topology constraint for {}, key={} (counts = {}, podDomains = {}, nodeDomains = {}",
            group.kind.describe(),
            group.key,
            pretty_counts(&group.counts, 25),
            render::requirement(&v.pod_domains),
            render::requirement(&v.node_domains)
        )
    }
}

/// `a: 1, b: 0` for the first `max` domains, then ` and N other(s)`.
fn pretty_counts(counts: &BTreeMap<Rc<str>, u32>, max: usize) -> String {
    let mut out = String::new();
    for (i, (domain, count)) in counts.iter().take(max).enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{domain}: {count}");
    }
    if counts.len() > max {
        let _ = write!(out, " and {} other(s)", counts.len() - max);
    }
    out
}
