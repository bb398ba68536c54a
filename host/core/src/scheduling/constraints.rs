//! Inter-pod scheduling constraints as plain data: label selectors, topology spread
//! constraints, pod (anti-)affinity terms, preferred node affinity, host ports, and the
//! preference policy.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

use crate::requirements::Requirements;

/// How the pass treats preferences (upstream's `PREFERENCE_POLICY` setting).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum PreferencePolicy {
    /// Preferences (preferred node affinity, preferred pod affinity and anti-affinity,
    /// `ScheduleAnyway` spread constraints) are treated as required at first and relaxed one
    /// at a time when a pod cannot be placed. Upstream's default.
    #[default]
    Respect,
    /// Preferences are left out from the start; only required constraints shape placements.
    Ignore,
}

/// How the pass enforces `minValues` (upstream's `MIN_VALUES_POLICY` setting).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum MinValuesPolicy {
    /// A claim whose instance types cannot meet a requirement's `minValues` is not created:
    /// its pods stay pending with the unmet keys named. Upstream's default.
    #[default]
    Strict,
    /// `minValues` is lowered to what the remaining instance types can offer; the NodeClaim
    /// is created with `karpenter.sh/nodeclaim-min-values-relaxed: "true"`.
    BestEffort,
}

/// The operator of one label-selector expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SelectorOperator {
    /// The label is present with one of the values.
    In,
    /// The label is absent, or present with none of the values.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

/// One `matchExpressions` entry of a label selector.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LabelSelectorRequirement {
    /// Label key.
    pub key: String,
    /// Operator.
    pub operator: SelectorOperator,
    /// Values (non-empty for `In`/`NotIn`, empty otherwise).
    pub values: Vec<String>,
}

impl LabelSelectorRequirement {
    /// An expression from its parts.
    pub fn new<I, S>(key: impl Into<String>, operator: SelectorOperator, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        LabelSelectorRequirement {
            key: key.into(),
            operator,
            values: values.into_iter().map(Into::into).collect(),
        }
    }

    /// Whether the expression is well formed (Kubernetes validation): `In`/`NotIn` list
    /// values, `Exists`/`DoesNotExist` do not.
    fn is_valid(&self) -> bool {
        match self.operator {
            SelectorOperator::In | SelectorOperator::NotIn => !self.values.is_empty(),
            SelectorOperator::Exists | SelectorOperator::DoesNotExist => self.values.is_empty(),
        }
    }

    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let value = labels.get(&self.key);
        match self.operator {
            SelectorOperator::In => value.is_some_and(|v| self.values.contains(v)),
            SelectorOperator::NotIn => value.is_none_or(|v| !self.values.contains(v)),
            SelectorOperator::Exists => value.is_some(),
            SelectorOperator::DoesNotExist => value.is_none(),
        }
    }
}

/// A Kubernetes label selector: every `matchLabels` pair and every `matchExpressions` entry
/// must hold. The empty selector selects every pod; a malformed one selects none (as
/// Kubernetes' conversion to a selector fails and upstream falls back to "nothing").
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LabelSelector {
    /// Labels that must be present with exactly these values.
    pub match_labels: BTreeMap<String, String>,
    /// Further expressions, all of which must hold.
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

impl LabelSelector {
    /// A selector requiring exactly these labels.
    pub fn from_labels<I, K, V>(labels: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        LabelSelector {
            match_labels: labels
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            match_expressions: Vec::new(),
        }
    }

    /// Adds an expression.
    pub fn with_expression(mut self, expression: LabelSelectorRequirement) -> Self {
        self.match_expressions.push(expression);
        self
    }

    /// Whether the selector is well formed.
    pub fn is_valid(&self) -> bool {
        self.match_expressions
            .iter()
            .all(LabelSelectorRequirement::is_valid)
    }

    /// Whether a pod with `labels` is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.is_valid()
            && self
                .match_labels
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|e| e.matches(labels))
    }

    /// The same selector with expressions (and their values) sorted, so that selectors that
    /// differ only in order compare equal.
    pub(crate) fn normalized(&self) -> LabelSelector {
        let mut out = self.clone();
        for e in &mut out.match_expressions {
            e.values.sort();
            e.values.dedup();
        }
        out.match_expressions.sort();
        out.match_expressions.dedup();
        out
    }
}

/// `whenUnsatisfiable` of a topology spread constraint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum WhenUnsatisfiable {
    /// The constraint is required.
    #[default]
    DoNotSchedule,
    /// The constraint is a preference: honored like a required one until relaxed.
    ScheduleAnyway,
}

/// `nodeAffinityPolicy` / `nodeTaintsPolicy` of a topology spread constraint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NodeInclusionPolicy {
    /// Only nodes matching the pod (its node affinity, or tolerating the node's taints)
    /// count for the spread.
    Honor,
    /// Every node counts.
    Ignore,
}

/// A `topologySpreadConstraints` entry of a pod.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TopologySpreadConstraint {
    /// Largest allowed difference between a domain's matching pod count and the global
    /// minimum.
    pub max_skew: u32,
    /// Node label whose values are the domains (zone, hostname, capacity type, any label).
    pub topology_key: String,
    /// Required or preferred.
    pub when_unsatisfiable: WhenUnsatisfiable,
    /// Which pods count; `None` counts none (only the skew bound of the pod itself applies).
    pub label_selector: Option<LabelSelector>,
    /// While fewer domains than this are eligible, the global minimum is taken as 0.
    pub min_domains: Option<u32>,
    /// Whether node affinity decides which nodes count (`None` = Honor, Kubernetes' default).
    pub node_affinity_policy: Option<NodeInclusionPolicy>,
    /// Whether taints decide which nodes count (`None` = Ignore, Kubernetes' default).
    pub node_taints_policy: Option<NodeInclusionPolicy>,
    /// Label keys whose values on the pod are added to the selector (`key In [value]`).
    pub match_label_keys: Vec<String>,
}

impl TopologySpreadConstraint {
    /// A required (`DoNotSchedule`) constraint over `topology_key` counting pods matched by
    /// `selector`.
    pub fn new(topology_key: impl Into<String>, max_skew: u32, selector: LabelSelector) -> Self {
        TopologySpreadConstraint {
            max_skew,
            topology_key: topology_key.into(),
            when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
            label_selector: Some(selector),
            min_domains: None,
            node_affinity_policy: None,
            node_taints_policy: None,
            match_label_keys: Vec::new(),
        }
    }

    /// The same constraint as a preference (`ScheduleAnyway`).
    pub fn schedule_anyway(mut self) -> Self {
        self.when_unsatisfiable = WhenUnsatisfiable::ScheduleAnyway;
        self
    }
}

/// A pod (anti-)affinity term.
///
/// The namespaces it selects pods in are `namespaces` plus those `namespace_selector`
/// matches; with neither, the pod's own namespace (as kube-scheduler).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodAffinityTerm {
    /// Which pods the term is about; `None` selects none (the term is a no-op).
    pub label_selector: Option<LabelSelector>,
    /// Node label whose values are the domains.
    pub topology_key: String,
    /// Namespaces of the selected pods, listed by name.
    pub namespaces: Vec<String>,
    /// Kubernetes' `namespaceSelector`: adds every namespace whose labels match, as known
    /// from [`SchedulingContext::namespace_labels`](super::SchedulingContext::namespace_labels)
    /// and the namespaces of the pass's pods (each with its `kubernetes.io/metadata.name`
    /// label). An empty selector selects every namespace.
    pub namespace_selector: Option<LabelSelector>,
}

impl PodAffinityTerm {
    /// A term over `topology_key` selecting pods of the pod's own namespace.
    pub fn new(topology_key: impl Into<String>, selector: LabelSelector) -> Self {
        PodAffinityTerm {
            label_selector: Some(selector),
            topology_key: topology_key.into(),
            namespaces: Vec::new(),
            namespace_selector: None,
        }
    }
}

/// A preferred pod (anti-)affinity term with its weight.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct WeightedPodAffinityTerm {
    /// Weight (1–100); heavier terms are kept longer during relaxation.
    pub weight: i32,
    /// The term.
    pub term: PodAffinityTerm,
}

/// A preferred node-affinity term with its weight.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PreferredSchedulingTerm {
    /// Weight (1–100); the heaviest remaining term is treated as required.
    pub weight: i32,
    /// The term's `matchExpressions`.
    pub preference: Requirements,
}

/// A CSI volume a pod needs attached to its node. Pods sharing a volume share its `id`, so
/// it counts once against the node's attach limit (upstream identifies a volume by its
/// PersistentVolumeClaim, `namespace/name`).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AttachedVolume {
    /// The CSI driver attaching it (the PersistentVolume's `csi.driver`, or the StorageClass
    /// provisioner of a claim not bound yet).
    pub driver: String,
    /// Identifies the volume among the driver's.
    pub id: String,
}

impl AttachedVolume {
    /// A volume of `driver` identified by `id`.
    pub fn new(driver: impl Into<String>, id: impl Into<String>) -> Self {
        AttachedVolume {
            driver: driver.into(),
            id: id.into(),
        }
    }
}

/// Whether attaching `wanted` to a node that already has `attached` would exceed one of its
/// per-driver `limits` (drivers without a limit take any number).
pub(crate) fn exceeds_attach_limits(
    wanted: &[AttachedVolume],
    attached: &BTreeMap<String, BTreeSet<String>>,
    limits: &BTreeMap<String, u32>,
) -> bool {
    if wanted.is_empty() || limits.is_empty() {
        return false;
    }
    let mut drivers: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for v in wanted {
        drivers
            .entry(v.driver.as_str())
            .or_default()
            .insert(v.id.as_str());
    }
    drivers.into_iter().any(|(driver, ids)| {
        let Some(&limit) = limits.get(driver) else {
            return false;
        };
        let on_node = attached.get(driver);
        let new = ids
            .iter()
            .filter(|id| !on_node.is_some_and(|set| set.contains(**id)))
            .count();
        on_node.map_or(0, BTreeSet::len) + new > limit as usize
    })
}

/// Records `volumes` as attached in `attached` (per driver).
pub(crate) fn attach(
    attached: &mut BTreeMap<String, BTreeSet<String>>,
    volumes: &[AttachedVolume],
) {
    for v in volumes {
        attached
            .entry(v.driver.clone())
            .or_default()
            .insert(v.id.clone());
    }
}

/// A host port a pod (or DaemonSet pod) binds on its node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// Port number.
    pub port: u16,
    /// Protocol (`TCP`, `UDP`, `SCTP`); empty means TCP.
    pub protocol: String,
    /// Host IP; empty means all addresses (`0.0.0.0`).
    pub host_ip: String,
}

impl HostPort {
    /// A TCP port on all addresses.
    pub fn tcp(port: u16) -> Self {
        HostPort {
            port,
            ..Default::default()
        }
    }

    fn protocol(&self) -> &str {
        if self.protocol.is_empty() {
            "TCP"
        } else {
            &self.protocol
        }
    }

    fn ip(&self) -> &str {
        if self.host_ip.is_empty() {
            "0.0.0.0"
        } else {
            &self.host_ip
        }
    }

    /// Whether two pods binding these ports could not share a node: same protocol, same port,
    /// and the same address or either one unspecified (`0.0.0.0` / `::`).
    pub fn conflicts_with(&self, other: &HostPort) -> bool {
        if self.port != other.port || self.protocol() != other.protocol() {
            return false;
        }
        match (self.ip().parse::<IpAddr>(), other.ip().parse::<IpAddr>()) {
            (Ok(a), Ok(b)) => a == b || a.is_unspecified() || b.is_unspecified(),
            _ => self.ip() == other.ip(),
        }
    }
}

impl fmt::Display for HostPort {
    /// `IP=0.0.0.0 Port=80 Proto=TCP`, as upstream prints it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "IP={} Port={} Proto={}",
            self.ip(),
            self.port,
            self.protocol()
        )
    }
}

/// The first conflict between two port lists, if any.
pub(crate) fn port_conflict<'p>(
    incoming: &'p [HostPort],
    used: &'p [HostPort],
) -> Option<(&'p HostPort, &'p HostPort)> {
    incoming
        .iter()
        .find_map(|a| used.iter().find(|b| a.conflicts_with(b)).map(|b| (a, b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn selectors_follow_kubernetes_semantics() {
        let app = labels(&[("app", "web"), ("tier", "front")]);
        assert!(LabelSelector::default().matches(&app), "empty selects all");
        assert!(LabelSelector::from_labels([("app", "web")]).matches(&app));
        assert!(!LabelSelector::from_labels([("app", "db")]).matches(&app));
        let expr = |op, values: &[&str]| {
            LabelSelector::default().with_expression(LabelSelectorRequirement::new(
                "tier",
                op,
                values.iter().copied(),
            ))
        };
        assert!(expr(SelectorOperator::In, &["front", "back"]).matches(&app));
        assert!(!expr(SelectorOperator::NotIn, &["front"]).matches(&app));
        assert!(expr(SelectorOperator::NotIn, &["front"]).matches(&labels(&[])));
        assert!(expr(SelectorOperator::Exists, &[]).matches(&app));
        assert!(!expr(SelectorOperator::DoesNotExist, &[]).matches(&app));
        // Malformed: In without values selects nothing.
        assert!(!expr(SelectorOperator::In, &[]).matches(&app));
    }

    #[test]
    fn host_ports_conflict_on_protocol_port_and_address() {
        let any = HostPort::tcp(80);
        let local = HostPort {
            host_ip: "127.0.0.1".into(),
            ..HostPort::tcp(80)
        };
        let other_local = HostPort {
            host_ip: "10.0.0.1".into(),
            ..HostPort::tcp(80)
        };
        let udp = HostPort {
            protocol: "UDP".into(),
            ..HostPort::tcp(80)
        };
        assert!(
            any.conflicts_with(&local),
            "unspecified matches any address"
        );
        assert!(!local.conflicts_with(&other_local));
        assert!(!any.conflicts_with(&udp));
        assert!(!any.conflicts_with(&HostPort::tcp(81)));
        assert_eq!(any.to_string(), "IP=0.0.0.0 Port=80 Proto=TCP");
        assert!(port_conflict(&[udp.clone(), any], std::slice::from_ref(&local)).is_some());
        assert!(port_conflict(&[udp], &[local]).is_none());
    }
}
