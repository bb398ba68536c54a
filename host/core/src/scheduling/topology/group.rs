//! One topology group: the pods its selector matches counted per domain of its key, and the
//! domains it still allows a pod on a node (spread within the skew, affinity where a selected
//! pod is, anti-affinity where none is). [`Topology`](super::Topology) keeps the groups of a
//! pass and decides which of them apply to a pod.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::BuildHasherDefault;
use std::rc::Rc;

use crate::hash::FxHasher;
use crate::labels::HOSTNAME_LABEL;
use crate::requirements::{KeySet, Requirement, Requirements};
use crate::taints::{Taint, Toleration};

use super::super::constraints::LabelSelector;
use super::super::daemons::tolerates;

/// What a group enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Kind {
    /// Topology spread: a bounded skew between domains.
    Spread,
    /// Pod affinity: a domain that already holds a selected pod.
    Affinity,
    /// Pod anti-affinity: a domain without selected pods.
    AntiAffinity,
}

impl Kind {
    /// Upstream's name, used in failure reasons.
    pub(super) fn describe(self) -> &'static str {
        match self {
            Kind::Spread => "topology spread",
            Kind::Affinity => "pod affinity",
            Kind::AntiAffinity => "pod anti-affinity",
        }
    }
}

/// Which nodes count for a spread constraint (`nodeAffinityPolicy` / `nodeTaintsPolicy`).
/// The default matches every node (what affinity and anti-affinity groups use).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub(crate) struct NodeFilter {
    /// With node affinity honored: the pod's node selector intersected with each of its
    /// remaining required node-affinity terms; a node counts if it can satisfy any of them.
    pub affinity: Option<Vec<Requirements>>,
    /// With taints honored: the pod's tolerations, which must tolerate the node's taints.
    pub tolerations: Option<Vec<Toleration>>,
}

impl NodeFilter {
    /// Whether a node with these taints and requirements counts; `allow` lists the keys the
    /// node may leave undefined (well-known keys for new claims, none for existing nodes).
    pub(super) fn matches<K: KeySet + ?Sized>(
        &self,
        taints: &[Taint],
        requirements: &Requirements,
        allow: &K,
    ) -> bool {
        if let Some(tolerations) = &self.tolerations
            && !tolerates(tolerations, taints, false)
        {
            return false;
        }
        match &self.affinity {
            Some(alternatives) if !alternatives.is_empty() => alternatives
                .iter()
                .any(|alt| requirements.is_compatible(alt, allow)),
            _ => true,
        }
    }
}

/// Everything that identifies a group (upstream's hash: key, type, namespaces, selector,
/// max skew and node filter; `minDomains` is not part of it, so the first constraint to
/// create a group decides it).
pub(super) struct GroupSpec {
    pub(super) kind: Kind,
    pub(super) key: String,
    pub(super) namespaces: BTreeSet<String>,
    pub(super) selector: Option<LabelSelector>,
    pub(super) max_skew: u32,
    pub(super) min_domains: Option<u32>,
    pub(super) filter: NodeFilter,
}

impl GroupSpec {
    /// A fingerprint of what identifies the group (the selector normalized).
    pub(super) fn identity(&self) -> u64 {
        crate::hash::fingerprint(&(
            self.kind,
            &self.key,
            &self.namespaces,
            self.selector.as_ref().map(LabelSelector::normalized),
            self.max_skew,
            &self.filter,
        ))
    }
}

/// Pod counts per domain for one constraint shared by its owners.
pub(super) struct Group {
    pub(super) kind: Kind,
    pub(super) key: String,
    pub(super) namespaces: BTreeSet<String>,
    selector: Option<LabelSelector>,
    pub(super) max_skew: u32,
    pub(super) min_domains: Option<u32>,
    pub(super) filter: NodeFilter,
    /// Known domains and how many selected pods each holds (ordered: iteration order
    /// breaks ties between domains).
    pub(super) counts: BTreeMap<Rc<str>, u32>,
    /// The same counts, for lookups by domain (sharing each domain's name with `counts`).
    pub(super) index: HashMap<Rc<str>, u32, BuildHasherDefault<FxHasher>>,
    /// The counts of the domains numbered so far for the group's key, by number (see
    /// [`Topology::slot`]).
    pub(super) by_slot: Vec<u32>,
    /// The key's number in [`Topology::numbering`].
    pub(super) key_index: usize,
    /// How many known domains hold no selected pod.
    empty: usize,
    /// `key Exists`, what a pod or node that does not constrain the key allows.
    pub(super) everything: Requirement,
    /// Whether the key is `kubernetes.io/hostname`.
    pub(super) hostname: bool,
}

/// A finite requirement's only value.
pub(super) fn single(r: &Requirement) -> Option<&str> {
    if r.is_complement() || r.values().len() != 1 {
        return None;
    }
    r.values().first().map(String::as_str)
}

/// Whether a requirement admits every value (a plain `Exists`).
fn is_everything(r: &Requirement) -> bool {
    r.is_complement() && r.values().is_empty() && r.gte().is_none() && r.lte().is_none()
}

impl Group {
    pub(super) fn new(spec: GroupSpec) -> Self {
        Group {
            everything: Requirement::exists(spec.key.as_str()),
            hostname: spec.key == HOSTNAME_LABEL,
            kind: spec.kind,
            key: spec.key,
            namespaces: spec.namespaces,
            selector: spec.selector,
            max_skew: spec.max_skew,
            min_domains: spec.min_domains,
            filter: spec.filter,
            counts: BTreeMap::new(),
            index: HashMap::default(),
            by_slot: Vec::new(),
            key_index: 0,
            empty: 0,
        }
    }

    pub(super) fn selects(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        self.namespaces.contains(namespace)
            && self.selector.as_ref().is_some_and(|s| s.matches(labels))
    }

    pub(super) fn register(&mut self, domain: &str) {
        self.register_named(domain, || Rc::from(domain));
    }

    /// Registers `domain` with no pod, its name from `name` (one name can serve many groups).
    pub(super) fn register_named(&mut self, domain: &str, name: impl FnOnce() -> Rc<str>) {
        if !self.index.contains_key(domain) {
            self.insert(name(), 0);
            self.empty += 1;
        }
    }

    /// Adds a domain not known yet with `count` selected pods.
    fn insert(&mut self, name: Rc<str>, count: u32) {
        self.counts.insert(name.clone(), count);
        self.index.insert(name, count);
    }

    pub(super) fn record(&mut self, domain: &str) {
        match self.index.get_mut(domain) {
            Some(count) => {
                if *count == 0 {
                    self.empty -= 1;
                }
                *count += 1;
                *self
                    .counts
                    .get_mut(domain)
                    .expect("both maps hold every domain") += 1;
            }
            None => self.insert(Rc::from(domain), 1),
        }
    }

    pub(super) fn count(&self, domain: &str) -> u32 {
        self.index.get(domain).copied().unwrap_or(0)
    }

    /// The domains still allowed for a pod whose own requirement on the key is `pod` on a
    /// node whose requirement is `node`; `None` when there is none.
    pub(super) fn next(
        &self,
        self_selecting: bool,
        pod: &Requirement,
        node: &Requirement,
    ) -> Option<Requirement> {
        let options = match self.kind {
            Kind::Spread => self.next_spread(self_selecting, pod, node),
            Kind::Affinity => self.next_affinity(self_selecting, pod, node),
            Kind::AntiAffinity => self.next_anti_affinity(pod, node),
        };
        (!options.is_empty()).then(|| Requirement::in_values(self.key.as_str(), options))
    }

    /// The global minimum over the domains the pod may use (0 for hostname: a new node can
    /// always be created; 0 while fewer than `minDomains` domains are eligible).
    pub(super) fn min_count(&self, pod: &Requirement) -> i64 {
        if self.key == HOSTNAME_LABEL {
            return 0;
        }
        let mut min = i64::from(i32::MAX);
        let mut eligible = 0u64;
        for (domain, &count) in &self.counts {
            if pod.has(domain) {
                eligible += 1;
                min = min.min(i64::from(count));
            }
        }
        if self.min_domains.is_some_and(|m| eligible < u64::from(m)) {
            return 0;
        }
        min
    }

    /// Spread: the node domain with the fewest matching pods among those within the skew.
    fn next_spread<'s>(
        &'s self,
        self_selecting: bool,
        pod: &Requirement,
        node: &'s Requirement,
    ) -> Vec<&'s str> {
        let own = i64::from(self_selecting);
        let skew = i64::from(self.max_skew);
        if self.key == HOSTNAME_LABEL
            && let Some(host) = single(node)
        {
            let count = i64::from(self.count(host)) + own;
            return if count <= skew {
                vec![host]
            } else {
                Vec::new()
            };
        }
        let min = self.min_count(pod);
        let mut best: Option<(&str, i64)> = None;
        let mut consider = |domain: &'s str, count: u32| {
            let count = i64::from(count) + own;
            if count - min <= skew && best.is_none_or(|(_, b)| count < b) {
                best = Some((domain, count));
            }
        };
        if node.is_complement() {
            for (domain, &count) in &self.counts {
                if node.has(domain) {
                    consider(domain, count);
                }
            }
        } else {
            for domain in node.values() {
                if let Some(&count) = self.index.get(domain.as_str())
                    && node.has(domain)
                {
                    consider(domain, count);
                }
            }
        }
        best.map(|(d, _)| vec![d]).unwrap_or_default()
    }

    /// Whether a self-selecting pod may start the group anywhere: nothing recorded yet, or
    /// nothing in a domain the pod may use.
    pub(super) fn bootstrappable(&self, pod: &Requirement) -> bool {
        let occupied = self.counts.len() - self.empty;
        if occupied == 0 {
            return true;
        }
        if is_everything(pod) {
            return false;
        }
        !self.counts.iter().any(|(d, &c)| c > 0 && pod.has(d))
    }

    /// Affinity: node domains that hold a selected pod; a self-selecting pod bootstraps.
    fn next_affinity<'s>(
        &'s self,
        self_selecting: bool,
        pod: &'s Requirement,
        node: &'s Requirement,
    ) -> Vec<&'s str> {
        if self.key == HOSTNAME_LABEL
            && let Some(host) = single(node)
        {
            if !pod.has(host) {
                return Vec::new();
            }
            if self.count(host) > 0 || (self_selecting && self.bootstrappable(pod)) {
                return vec![host];
            }
            return Vec::new();
        }
        let mut options: Vec<&str> = if node.is_complement() {
            self.counts
                .iter()
                .filter(|(d, c)| **c > 0 && pod.has(d) && node.has(d))
                .map(|(d, _)| &**d)
                .collect()
        } else {
            node.values()
                .iter()
                .filter(|d| self.count(d) > 0 && pod.has(d) && node.has(d))
                .map(String::as_str)
                .collect()
        };
        if options.is_empty() && self_selecting && self.bootstrappable(pod) {
            // Prefer a domain the node can already be in, then any domain the pod may use.
            if let Some(d) = self.counts.keys().find(|d| pod.has(d) && node.has(d)) {
                options.push(d);
            }
            if let Some(d) = self.counts.keys().find(|d| pod.has(d))
                && !options.contains(&&**d)
            {
                options.push(d);
            }
        }
        options
    }

    /// Anti-affinity: node domains without a selected pod.
    fn next_anti_affinity<'s>(&'s self, pod: &Requirement, node: &'s Requirement) -> Vec<&'s str> {
        if self.key == HOSTNAME_LABEL
            && let Some(host) = single(node)
        {
            return if self.count(host) == 0 {
                vec![host]
            } else {
                Vec::new()
            };
        }
        if self.empty == 0 {
            return Vec::new();
        }
        if node.is_complement() {
            self.counts
                .iter()
                .filter(|(d, c)| **c == 0 && pod.has(d) && node.has(d))
                .map(|(d, _)| &**d)
                .collect()
        } else {
            node.values()
                .iter()
                .filter(|d| self.index.get(d.as_str()) == Some(&0) && pod.has(d) && node.has(d))
                .map(String::as_str)
                .collect()
        }
    }
}
