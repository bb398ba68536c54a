//! Node repair: which managed nodes are unhealthy, for how long, and what to do about each.
//!
//! Upstream's rules (Karpenter's node health controller, gate `NodeRepair`):
//!
//! - a node is unhealthy when one of its cloud's repair policies matches a node condition (the
//!   first condition of the policy's type has the policy's status); when several match, the
//!   one whose toleration runs out first is the node's (the first such policy on a tie);
//! - nothing happens until the condition has held its status for the policy's toleration
//!   (a condition without a transition time counts from the epoch);
//! - then the node is repaired unless more of its NodePool's nodes are unhealthy than the
//!   ceiling allows: 20 % of the Nodes carrying the pool's label, rounded up (1 of 3 may be
//!   repaired). Every node with a matching condition counts, whether or not its toleration is
//!   over. A standalone NodeClaim (no NodePool label) is held to the same share of every Node
//!   in the cluster;
//! - repairing stamps `karpenter.sh/nodeclaim-termination-timestamp` with the present moment
//!   (unless it already holds a moment in the past), so the drain deletes what it cannot evict,
//!   and deletes the NodeClaim. Budgets and `karpenter.sh/do-not-disrupt` are not consulted. A
//!   claim already being deleted is stamped and left to its finalization.
//!
//! Joinery's additions, each off unless a NodePool or Node asks for it (see
//! [`PoolRepair`]): another ceiling, other tolerations, a reboot before the replacement, and
//! the veto `joinery.dev/do-not-repair`.
//!
//! [`decide`] takes plain data and returns one [`Decision`] per managed node, in the order the
//! controller acts on them (earliest due first).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::contract::RepairPolicy;
use crate::time::rfc3339;

/// Upstream's ceiling: at most this share (percent, rounded up) of a NodePool's nodes may be
/// unhealthy for repair to act.
pub const DEFAULT_MAX_UNHEALTHY_PERCENT: u32 = 20;

/// How long upstream waits before looking again at a node held back by the ceiling.
pub const BLOCKED_RECHECK: Duration = Duration::from_secs(5 * 60);

/// The host's policies for a cloud plugin that names none (`repair-policies` answers `none`,
/// or the plugin speaks WIT 0.1): `Ready` `False` or `Unknown` for 10 minutes, as kwok's.
pub fn default_policies() -> Vec<RepairPolicy> {
    ["False", "Unknown"]
        .into_iter()
        .map(|status| RepairPolicy {
            condition_type: "Ready".into(),
            condition_status: status.into(),
            toleration_seconds: 600,
        })
        .collect()
}

/// One node condition as repair reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeCondition {
    /// `type`, e.g. `Ready`.
    pub type_: String,
    /// `status`: `True`, `False` or `Unknown`.
    pub status: String,
    /// `lastTransitionTime`; `None` counts from the epoch, as upstream's zero time.
    pub since: Option<SystemTime>,
}

/// A Node as repair reads it.
#[derive(Debug, Clone)]
pub struct RepairNode {
    /// Node name.
    pub name: String,
    /// The Node's `karpenter.sh/nodepool` label: it counts toward that pool's ceiling.
    pub pool_label: Option<String>,
    /// `status.conditions`, in the Node's order.
    pub conditions: Vec<NodeCondition>,
    /// The repair policies of the node's cloud (also used to count it toward a ceiling).
    pub policies: Arc<[RepairPolicy]>,
    /// The NodeClaim owning the node; `None` for a Node Joinery does not manage (it only
    /// counts toward the cluster-wide ceiling of standalone claims).
    pub claim: Option<RepairClaim>,
    /// `joinery.dev/do-not-repair: "true"` on the Node.
    pub do_not_repair: bool,
}

/// The NodeClaim of a managed node, as repair reads it.
#[derive(Debug, Clone, Default)]
pub struct RepairClaim {
    /// NodeClaim name.
    pub name: String,
    /// The claim's `karpenter.sh/nodepool` label; `None` for a standalone claim.
    pub pool: Option<String>,
    /// The claim is being deleted already.
    pub deleting: bool,
    /// Its `karpenter.sh/nodeclaim-termination-timestamp`, when set and readable.
    pub termination_timestamp: Option<SystemTime>,
    /// Its `joinery.dev/repair-rebooted-at`: when repair rebooted its instance.
    pub rebooted_at: Option<SystemTime>,
    /// Its cloud plugin may reboot instances (it has not answered `unsupported`).
    pub can_reboot: bool,
}

/// A NodePool's repair settings from its annotations (Joinery's additions; the default is
/// upstream's behaviour).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolRepair {
    /// `joinery.dev/repair-max-unhealthy`: the ceiling in percent (`None`: 20 %).
    pub max_unhealthy_percent: Option<u32>,
    /// `joinery.dev/repair-toleration` as one duration: every policy's toleration.
    pub toleration: Option<Duration>,
    /// `joinery.dev/repair-toleration` per condition type (wins over [`Self::toleration`]).
    pub tolerations: BTreeMap<String, Duration>,
    /// `joinery.dev/repair-reboot-first: "true"`.
    pub reboot_first: bool,
    /// `joinery.dev/do-not-repair: "true"` on the NodePool.
    pub do_not_repair: bool,
}

impl PoolRepair {
    /// The ceiling in percent.
    pub fn percent(&self) -> u32 {
        self.max_unhealthy_percent
            .unwrap_or(DEFAULT_MAX_UNHEALTHY_PERCENT)
    }

    /// The toleration of a policy for this pool's nodes, and where it comes from.
    fn toleration(&self, policy: &RepairPolicy) -> (Duration, TolerationSource) {
        if let Some(t) = self.tolerations.get(&policy.condition_type) {
            (*t, TolerationSource::NodePool)
        } else if let Some(t) = self.toleration {
            (t, TolerationSource::NodePool)
        } else {
            (
                Duration::from_secs(policy.toleration_seconds),
                TolerationSource::Cloud,
            )
        }
    }
}

/// Everything one repair pass decides on.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    /// Every Node of the cluster (managed or not: all count toward the ceilings).
    pub nodes: &'a [RepairNode],
    /// Repair settings per NodePool name (a pool missing here has the defaults).
    pub pools: &'a BTreeMap<String, PoolRepair>,
    /// The moment of the pass.
    pub now: SystemTime,
}

/// Where a toleration comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TolerationSource {
    /// The cloud plugin's policy (or the host's default policies).
    Cloud,
    /// The NodePool's `joinery.dev/repair-toleration`.
    NodePool,
}

/// The condition that makes a node unhealthy, and since when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unhealthy {
    /// The condition type, e.g. `Ready`.
    pub condition_type: String,
    /// Its unhealthy status.
    pub status: String,
    /// When it took that status.
    pub since: SystemTime,
    /// How long it may hold it.
    pub toleration: Duration,
    /// Where the toleration comes from.
    pub toleration_from: TolerationSource,
    /// `since + toleration`: when repair may act.
    pub due: SystemTime,
}

impl fmt::Display for Unhealthy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let from = match self.toleration_from {
            TolerationSource::Cloud => "the cloud's policy",
            TolerationSource::NodePool => "the NodePool's joinery.dev/repair-toleration",
        };
        write!(
            f,
            "{}={} since {} (toleration {}, from {from})",
            self.condition_type,
            self.status,
            rfc3339(self.since),
            human(self.toleration)
        )
    }
}

/// Whose ceiling applies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// The nodes carrying this NodePool's label.
    NodePool(String),
    /// Every Node of the cluster (a standalone NodeClaim).
    Cluster,
}

/// The unhealthy ceiling as counted for one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ceiling {
    /// Whose nodes are counted.
    pub scope: Scope,
    /// Nodes with a condition one of their policies calls unhealthy.
    pub unhealthy: usize,
    /// Nodes counted.
    pub total: usize,
    /// The percentage.
    pub percent: u32,
    /// `percent` of `total`, rounded up: how many may be unhealthy.
    pub allowed: usize,
}

impl Ceiling {
    /// Whether repair may act: no more unhealthy nodes than allowed.
    pub fn holds(&self) -> bool {
        self.unhealthy <= self.allowed
    }
}

impl fmt::Display for Ceiling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let whose = match &self.scope {
            Scope::NodePool(pool) => format!("of NodePool {pool}"),
            Scope::Cluster => "of the cluster".to_string(),
        };
        write!(
            f,
            "{} of {} nodes {whose} are unhealthy; repair acts while at most {}% ({}) are",
            self.unhealthy, self.total, self.percent, self.allowed
        )
    }
}

/// Who vetoed a repair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Veto {
    /// `joinery.dev/do-not-repair` on the Node.
    Node,
    /// `joinery.dev/do-not-repair` on the NodePool.
    NodePool(String),
}

/// What to do about one managed node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No repair policy matches. `clear_reboot_record`: the claim still records a reboot,
    /// which may go (the node recovered).
    Healthy {
        /// The claim's `joinery.dev/repair-rebooted-at` can be removed.
        clear_reboot_record: bool,
    },
    /// Unhealthy, but its toleration is not over (after a reboot, the toleration again).
    Waiting {
        /// The condition.
        unhealthy: Unhealthy,
        /// When repair may act.
        until: SystemTime,
        /// When repair rebooted the node, if it did.
        rebooted_at: Option<SystemTime>,
    },
    /// Unhealthy, but `joinery.dev/do-not-repair` holds it (due or not).
    Vetoed {
        /// The condition.
        unhealthy: Unhealthy,
        /// Where the veto is.
        by: Veto,
    },
    /// Due, but too many nodes are unhealthy (`NodeRepairBlocked`).
    Blocked {
        /// The condition.
        unhealthy: Unhealthy,
        /// The count that holds it back.
        ceiling: Ceiling,
    },
    /// Due: reboot the instance first (the NodePool asked for it and the cloud can).
    Reboot {
        /// The condition.
        unhealthy: Unhealthy,
    },
    /// Due: stamp the termination timestamp (when `stamp`) and delete the NodeClaim (when
    /// `delete`; a claim being deleted already is only stamped).
    Replace {
        /// The condition.
        unhealthy: Unhealthy,
        /// Write `karpenter.sh/nodeclaim-termination-timestamp` = now.
        stamp: bool,
        /// Delete the NodeClaim.
        delete: bool,
        /// When repair rebooted the node first, if it did.
        rebooted_at: Option<SystemTime>,
    },
}

impl Verdict {
    /// The unhealthy condition, unless the node is healthy.
    pub fn unhealthy(&self) -> Option<&Unhealthy> {
        match self {
            Verdict::Healthy { .. } => None,
            Verdict::Waiting { unhealthy, .. }
            | Verdict::Vetoed { unhealthy, .. }
            | Verdict::Blocked { unhealthy, .. }
            | Verdict::Reboot { unhealthy }
            | Verdict::Replace { unhealthy, .. } => Some(unhealthy),
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Verdict::Healthy { .. } => {
                write!(f, "healthy: no repair policy matches its conditions")
            }
            Verdict::Waiting {
                unhealthy,
                until,
                rebooted_at: None,
            } => write!(
                f,
                "unhealthy, {unhealthy}; repair acts at {} unless it recovers",
                rfc3339(*until)
            ),
            Verdict::Waiting {
                unhealthy,
                until,
                rebooted_at: Some(at),
            } => write!(
                f,
                "unhealthy, {unhealthy}; rebooted at {}, replaced at {} unless it recovers",
                rfc3339(*at),
                rfc3339(*until)
            ),
            Verdict::Vetoed { unhealthy, by } => {
                let on = match by {
                    Veto::Node => "the node".to_string(),
                    Veto::NodePool(pool) => format!("its NodePool {pool}"),
                };
                write!(
                    f,
                    "unhealthy, {unhealthy}, due at {}; not repaired: joinery.dev/do-not-repair is set on {on}",
                    rfc3339(unhealthy.due)
                )
            }
            Verdict::Blocked { unhealthy, ceiling } => write!(
                f,
                "unhealthy, {unhealthy}, due since {}; not repaired: {ceiling}",
                rfc3339(unhealthy.due)
            ),
            Verdict::Reboot { unhealthy } => write!(
                f,
                "unhealthy, {unhealthy}; due: rebooting its instance first (joinery.dev/repair-reboot-first)"
            ),
            Verdict::Replace {
                unhealthy,
                delete,
                rebooted_at,
                ..
            } => {
                write!(f, "unhealthy, {unhealthy}; due: ")?;
                if let Some(at) = rebooted_at {
                    write!(f, "the reboot at {} did not help; ", rfc3339(*at))?;
                }
                if *delete {
                    write!(
                        f,
                        "its NodeClaim is deleted and replaced (reason unhealthy; budgets and do-not-disrupt do not apply)"
                    )
                } else {
                    write!(
                        f,
                        "its NodeClaim is being deleted already; its drain deadline is now"
                    )
                }
            }
        }
    }
}

/// The decision about one managed node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Node name.
    pub node: String,
    /// Its NodeClaim.
    pub claim: String,
    /// The claim's NodePool, if any.
    pub pool: Option<String>,
    /// What to do.
    pub verdict: Verdict,
}

/// The first condition of `type_` on a node (Kubernetes' and upstream's `GetCondition`).
fn condition<'a>(node: &'a RepairNode, type_: &str) -> Option<&'a NodeCondition> {
    node.conditions.iter().find(|c| c.type_ == type_)
}

/// Whether one of the node's policies matches one of its conditions (how upstream counts a
/// node toward the ceiling: tolerations do not matter).
pub fn counts_unhealthy(node: &RepairNode) -> bool {
    node.policies
        .iter()
        .any(|p| condition(node, &p.condition_type).is_some_and(|c| c.status == p.condition_status))
}

/// The node's unhealthy condition: of the policies matching, the one due first (the first
/// policy on a tie), with the pool's tolerations.
pub fn unhealthy(node: &RepairNode, pool: &PoolRepair) -> Option<Unhealthy> {
    let mut found: Option<Unhealthy> = None;
    for policy in node.policies.iter() {
        let Some(c) = condition(node, &policy.condition_type) else {
            continue;
        };
        if c.status != policy.condition_status {
            continue;
        }
        let since = c.since.unwrap_or(SystemTime::UNIX_EPOCH);
        let (toleration, toleration_from) = pool.toleration(policy);
        let due = since + toleration;
        if found.as_ref().is_none_or(|f| due < f.due) {
            found = Some(Unhealthy {
                condition_type: policy.condition_type.clone(),
                status: policy.condition_status.clone(),
                since,
                toleration,
                toleration_from,
                due,
            });
        }
    }
    found
}

/// `percent` of `total`, rounded up (Kubernetes' scaled int-or-percent, as PDBs round).
pub fn allowed_unhealthy(total: usize, percent: u32) -> usize {
    (total * percent as usize).div_ceil(100)
}

/// Nodes and unhealthy nodes, per NodePool label and in the whole cluster: counted once per
/// pass.
#[derive(Debug, Default)]
struct Counts {
    pools: BTreeMap<String, (usize, usize)>,
    cluster: (usize, usize),
}

impl Counts {
    fn of(nodes: &[RepairNode]) -> Counts {
        let mut counts = Counts::default();
        for node in nodes {
            let sick = usize::from(counts_unhealthy(node));
            counts.cluster.0 += 1;
            counts.cluster.1 += sick;
            if let Some(pool) = &node.pool_label {
                let entry = counts.pools.entry(pool.clone()).or_default();
                entry.0 += 1;
                entry.1 += sick;
            }
        }
        counts
    }
}

/// The ceiling for a node whose claim belongs to `pool` (`None`: standalone).
fn ceiling(counts: &Counts, pool: Option<&str>, settings: &PoolRepair) -> Ceiling {
    let (total, unhealthy) = match pool {
        Some(p) => counts.pools.get(p).copied().unwrap_or_default(),
        None => counts.cluster,
    };
    let percent = settings.percent();
    Ceiling {
        scope: match pool {
            Some(p) => Scope::NodePool(p.to_string()),
            None => Scope::Cluster,
        },
        unhealthy,
        total,
        percent,
        allowed: allowed_unhealthy(total, percent),
    }
}

/// The verdict on one managed node.
fn verdict(input: &Input, counts: &Counts, node: &RepairNode, claim: &RepairClaim) -> Verdict {
    let defaults = PoolRepair::default();
    let settings = claim
        .pool
        .as_ref()
        .and_then(|p| input.pools.get(p))
        .unwrap_or(&defaults);
    let Some(unhealthy) = unhealthy(node, settings) else {
        return Verdict::Healthy {
            clear_reboot_record: claim.rebooted_at.is_some(),
        };
    };
    // The veto (Joinery's) holds the node whenever it is unhealthy, due or not.
    if node.do_not_repair {
        return Verdict::Vetoed {
            unhealthy,
            by: Veto::Node,
        };
    }
    if settings.do_not_repair {
        return Verdict::Vetoed {
            unhealthy,
            by: Veto::NodePool(claim.pool.clone().unwrap_or_default()),
        };
    }
    // A reboot counts only where the pool asks for reboots: then the toleration runs again
    // from the reboot.
    let rebooted_at = claim.rebooted_at.filter(|_| settings.reboot_first);
    let until = match rebooted_at {
        Some(at) => unhealthy.due.max(at + unhealthy.toleration),
        None => unhealthy.due,
    };
    if input.now < until {
        return Verdict::Waiting {
            unhealthy,
            until,
            rebooted_at,
        };
    }
    // A standalone claim has the default settings, upstream's ceiling among them.
    let ceiling = ceiling(counts, claim.pool.as_deref(), settings);
    if !ceiling.holds() {
        return Verdict::Blocked { unhealthy, ceiling };
    }
    if settings.reboot_first && claim.can_reboot && rebooted_at.is_none() && !claim.deleting {
        return Verdict::Reboot { unhealthy };
    }
    Verdict::Replace {
        unhealthy,
        stamp: claim.termination_timestamp.is_none_or(|t| t >= input.now),
        delete: !claim.deleting,
        rebooted_at,
    }
}

/// The decision about one node (by Node or NodeClaim name), if it is managed.
pub fn decide_node(input: &Input, name: &str) -> Option<Decision> {
    let counts = Counts::of(input.nodes);
    input.nodes.iter().find_map(|node| {
        let claim = node.claim.as_ref()?;
        (node.name == name || claim.name == name).then(|| Decision {
            node: node.name.clone(),
            claim: claim.name.clone(),
            pool: claim.pool.clone(),
            verdict: verdict(input, &counts, node, claim),
        })
    })
}

/// One decision per managed node: unhealthy nodes first, the one due earliest first (then by
/// name), healthy ones last by name.
pub fn decide(input: &Input) -> Vec<Decision> {
    let counts = Counts::of(input.nodes);
    let mut decisions: Vec<Decision> = input
        .nodes
        .iter()
        .filter_map(|node| {
            let claim = node.claim.as_ref()?;
            Some(Decision {
                node: node.name.clone(),
                claim: claim.name.clone(),
                pool: claim.pool.clone(),
                verdict: verdict(input, &counts, node, claim),
            })
        })
        .collect();
    decisions.sort_by(|a, b| {
        let due = |d: &Decision| d.verdict.unhealthy().map(|u| u.due);
        match (due(a), due(b)) {
            (Some(x), Some(y)) => x.cmp(&y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        }
        .then_with(|| a.node.cmp(&b.node))
    });
    decisions
}

/// A condition type as upstream labels it in `karpenter_nodeclaims_unhealthy_disrupted_total`:
/// snake case the way Karpenter's `pretty.ToSnakeCase` writes it (`MemoryPressure` →
/// `memory_pressure`, `PIDPressure` → `pid_pressure`).
pub fn metric_condition(type_: &str) -> String {
    let chars: Vec<char> = type_.chars().collect();
    // First: any character, then a capital followed by lower-case letters.
    let mut first = Vec::with_capacity(chars.len() + 4);
    let mut i = 0;
    while i < chars.len() {
        let capital_word = i + 2 < chars.len()
            && chars[i + 1].is_ascii_uppercase()
            && chars[i + 2].is_ascii_lowercase();
        if capital_word {
            let mut end = i + 2;
            while end < chars.len() && chars[end].is_ascii_lowercase() {
                end += 1;
            }
            first.push(chars[i]);
            first.push('_');
            first.extend_from_slice(&chars[i + 1..end]);
            i = end;
        } else {
            first.push(chars[i]);
            i += 1;
        }
    }
    // Then: a lower-case letter or digit followed by a capital.
    let mut out = String::with_capacity(first.len() + 4);
    let mut i = 0;
    while i < first.len() {
        let c = first[i];
        if i + 1 < first.len()
            && (c.is_ascii_lowercase() || c.is_ascii_digit())
            && first[i + 1].is_ascii_uppercase()
        {
            out.push(c);
            out.push('_');
            out.push(first[i + 1]);
            i += 2;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out.to_lowercase()
}

/// A duration as an operator writes it: `10m`, `1h30m`, `45s`.
pub fn human(d: Duration) -> String {
    let secs = d.as_secs();
    if secs == 0 {
        return format!("{}ms", d.as_millis());
    }
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if s > 0 {
        out.push_str(&format!("{s}s"));
    }
    out
}

#[cfg(test)]
mod tests;
