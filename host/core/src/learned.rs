//! Instance-type capacity learned from the nodes that really joined.
//!
//! A cloud plugin's instance types carry an *estimate* of a node's capacity and of what the
//! kubelet keeps for itself; the real kubelet may report less (a bigger system reservation, a
//! kernel that keeps more memory) or more. Upstream guesses a flat overhead and is wrong both
//! ways (aws/karpenter-provider-aws#6611): it launches a node for a pod that cannot fit, or
//! refuses a pod that would. Here the nodes of a type, once initialized, say what they hold:
//! [`LearnedCapacity::observe`] records the smallest capacity and allocatable seen per
//! (NodeClass, instance type) for CPU, memory, ephemeral storage and pods, and
//! [`LearnedCapacity::apply`] puts them in place of the estimate. A type never seen keeps the
//! estimate; extended resources (GPUs…) always keep it.
//!
//! What was learned is kept in a ConfigMap, which anyone with write access to it can change, so
//! it is not trusted blindly: [`LearnedCapacity::validated`] drops entries that cannot be a
//! kubelet's report (unparsable or unknown quantities, allocatable above capacity, no nodes);
//! [`LearnedCapacity::apply`] keeps every learned value within a band around the plugin's
//! estimate ([`BAND`]); and an entry not confirmed by a node for [`LEARNED_TTL`] expires
//! ([`LearnedCapacity::expire`]), so that a wrong value (a type ruled out because it seemed too
//! small is never launched, so never relearned) does not last.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::instance_type::{InstanceType, Overhead};
use crate::resources::{HUGEPAGES_PREFIX, Resources};

/// The resources learned from nodes (a kubelet reports them all as soon as it registers).
pub const LEARNED_RESOURCES: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pods"];

/// The band a learned value is kept in, as fractions of the plugin's estimate of the same
/// value (capacity of capacity, allocatable of allocatable): half to one and a half times.
/// Real kubelets differ from a good estimate by a few percent, from a poor one by tens of
/// percent; a value outside the band is more likely tampered with than true.
pub const BAND: (f64, f64) = (0.5, 1.5);

/// How long an entry lasts without a node confirming it (then the estimate is used again, and
/// the next node of the type teaches it anew).
pub const LEARNED_TTL: Duration = Duration::from_secs(3 * 24 * 3600);

/// How often an entry's `observedAt` is refreshed while its nodes keep reporting the same
/// values (each refresh is a write of the ConfigMap).
const REFRESH: Duration = Duration::from_secs(3600);

/// What the initialized nodes of one instance type of one NodeClass reported: per resource,
/// the smallest capacity and allocatable among them (a pod that fits this fits them all).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Learned {
    /// Capacity, as quantities (`cpu`, `memory`, `ephemeral-storage`, `pods`).
    pub capacity: BTreeMap<String, String>,
    /// Allocatable, as quantities.
    pub allocatable: BTreeMap<String, String>,
    /// How many nodes it was learned from (the latest observation).
    pub nodes: u32,
    /// When nodes last reported it (seconds since the Unix epoch; refreshed hourly while they
    /// keep reporting). 0 in a ConfigMap written before this field existed: the entry is then
    /// taken as observed when it is restored.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub observed_at: u64,
}

/// A learned entry refused when restored, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedEntry {
    /// The NodeClass key (`group/kind/name`).
    pub node_class: String,
    /// The instance type.
    pub instance_type: String,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for RejectedEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.node_class, self.instance_type, self.reason
        )
    }
}

impl Learned {
    /// Why this entry cannot be a kubelet's report, if it cannot.
    pub fn problem(&self) -> Option<String> {
        if self.nodes == 0 {
            return Some("learned from 0 nodes".into());
        }
        for (what, list) in [
            ("capacity", &self.capacity),
            ("allocatable", &self.allocatable),
        ] {
            if let Some(name) = list
                .keys()
                .find(|n| !LEARNED_RESOURCES.contains(&n.as_str()))
            {
                return Some(format!("{what}.{name} is not a learned resource"));
            }
            if let Err(error) = Resources::from_quantities(list.iter()) {
                return Some(format!("{what}: {error}"));
            }
        }
        let capacity = Resources::from_quantities(self.capacity.iter()).ok()?;
        let allocatable = Resources::from_quantities(self.allocatable.iter()).ok()?;
        for name in ["cpu", "memory"] {
            if capacity.get(name) == 0 {
                return Some(format!("capacity.{name} is missing or zero"));
            }
        }
        LEARNED_RESOURCES
            .iter()
            .find(|name| allocatable.get(name) > capacity.get(name))
            .map(|name| format!("allocatable.{name} is above capacity.{name}"))
    }
}

/// One initialized node's word about its instance type.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeReport {
    /// The NodeClass it was launched from, as `group/kind/name`.
    pub node_class: String,
    /// Its instance type.
    pub instance_type: String,
    /// Its `status.capacity`.
    pub capacity: Resources,
    /// Its `status.allocatable`.
    pub allocatable: Resources,
}

/// Learned capacity by NodeClass (`group/kind/name`) and instance type.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LearnedCapacity {
    entries: BTreeMap<String, BTreeMap<String, Learned>>,
}

impl LearnedCapacity {
    /// Records what the nodes report at `now`: for each (NodeClass, type) that has nodes now,
    /// the smallest of their values replaces what was learned before; types without nodes now
    /// keep what was learned (so it survives scaling to zero, until [`LEARNED_TTL`]). Returns
    /// whether anything changed (values, or an hourly refresh of `observedAt`).
    pub fn observe(&mut self, reports: &[NodeReport], now: SystemTime) -> bool {
        let at = unix_seconds(now);
        let mut now: BTreeMap<(&str, &str), (Resources, Resources, u32)> = BTreeMap::new();
        for r in reports {
            let entry = now
                .entry((r.node_class.as_str(), r.instance_type.as_str()))
                .or_insert_with(|| (r.capacity.clone(), r.allocatable.clone(), 0));
            entry.0 = min_learned(&entry.0, &r.capacity);
            entry.1 = min_learned(&entry.1, &r.allocatable);
            entry.2 += 1;
        }
        let mut changed = false;
        for ((class, kind), (capacity, allocatable, nodes)) in now {
            let mut learned = Learned {
                capacity: quantities(&capacity),
                allocatable: quantities(&allocatable),
                nodes,
                observed_at: at,
            };
            let slot = self
                .entries
                .entry(class.to_string())
                .or_default()
                .entry(kind.to_string())
                .or_default();
            let fresh = at.saturating_sub(slot.observed_at) < REFRESH.as_secs();
            if fresh {
                learned.observed_at = slot.observed_at;
            }
            if *slot != learned {
                *slot = learned;
                changed = true;
            }
        }
        changed
    }

    /// This capacity without the entries that cannot be a kubelet's report (see
    /// [`Learned::problem`]), and those entries with the reason; entries without `observedAt`
    /// are taken as observed at `now`. For what is restored from the ConfigMap.
    pub fn validated(mut self, now: SystemTime) -> (LearnedCapacity, Vec<RejectedEntry>) {
        let mut rejected = Vec::new();
        for (class, types) in &mut self.entries {
            types.retain(|kind, learned| match learned.problem() {
                Some(reason) => {
                    rejected.push(RejectedEntry {
                        node_class: class.clone(),
                        instance_type: kind.clone(),
                        reason,
                    });
                    false
                }
                None => {
                    if learned.observed_at == 0 {
                        learned.observed_at = unix_seconds(now);
                    }
                    true
                }
            });
        }
        self.entries.retain(|_, types| !types.is_empty());
        (self, rejected)
    }

    /// Removes the entries no node has confirmed for [`LEARNED_TTL`] at `now`; returns them
    /// as (NodeClass, instance type).
    pub fn expire(&mut self, now: SystemTime) -> Vec<(String, String)> {
        let now = unix_seconds(now);
        let mut expired = Vec::new();
        for (class, types) in &mut self.entries {
            types.retain(|kind, learned| {
                let alive = now.saturating_sub(learned.observed_at) < LEARNED_TTL.as_secs();
                if !alive {
                    expired.push((class.clone(), kind.clone()));
                }
                alive
            });
        }
        self.entries.retain(|_, types| !types.is_empty());
        expired
    }

    /// What was learned of `instance_type` under `node_class`, if anything.
    pub fn get(&self, node_class: &str, instance_type: &str) -> Option<&Learned> {
        self.entries.get(node_class)?.get(instance_type)
    }

    /// Every entry, by NodeClass then instance type.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str, &Learned)> {
        self.entries.iter().flat_map(|(class, types)| {
            types
                .iter()
                .map(move |(t, l)| (class.as_str(), t.as_str(), l))
        })
    }

    /// Whether nothing was learned.
    pub fn is_empty(&self) -> bool {
        self.entries.values().all(BTreeMap::is_empty)
    }

    /// `types` of `node_class` with what was learned in place of the estimate: the learned
    /// resources' capacity and allocatable (the overhead becomes their difference), each kept
    /// within [`BAND`] of the estimate; other resources, requirements and offerings unchanged.
    /// Types never seen, or seen exactly as estimated, are returned as they were.
    pub fn apply(&self, node_class: &str, types: Vec<InstanceType>) -> Vec<InstanceType> {
        let Some(learned) = self.entries.get(node_class) else {
            return types;
        };
        types
            .into_iter()
            .map(|t| match learned.get(t.name()) {
                Some(l) => with_learned(t, l),
                None => t,
            })
            .collect()
    }
}

/// `t` with the learned resources of `learned`.
fn with_learned(t: InstanceType, learned: &Learned) -> InstanceType {
    let (Ok(capacity_seen), Ok(allocatable_seen)) = (
        Resources::from_quantities(learned.capacity.iter()),
        Resources::from_quantities(learned.allocatable.iter()),
    ) else {
        return t;
    };
    let mut capacity = t.capacity().clone();
    let mut overhead = t.overhead().clone();
    let hugepages: u64 = capacity
        .extended()
        .filter(|(n, _)| n.starts_with(HUGEPAGES_PREFIX))
        .map(|(_, v)| v)
        .sum();
    for name in LEARNED_RESOURCES {
        if learned.capacity.contains_key(name) {
            capacity.set(
                name,
                within_band(capacity_seen.get(name), t.capacity().get(name)),
            );
        }
        if learned.allocatable.contains_key(name) {
            let allocatable = within_band(allocatable_seen.get(name), t.allocatable().get(name))
                .min(capacity.get(name));
            // compute_allocatable subtracts hugepages from memory again: leave them out here.
            let already = if name == "memory" { hugepages } else { 0 };
            let reserved = capacity
                .get(name)
                .saturating_sub(allocatable)
                .saturating_sub(already);
            set_overhead(&mut overhead, name, reserved);
        }
    }
    if capacity == *t.capacity() && overhead == *t.overhead() {
        return t;
    }
    InstanceType::new(
        t.name(),
        t.requirements().clone(),
        capacity,
        overhead,
        t.offerings().clone(),
    )
}

/// `seen` kept within [`BAND`] of `estimate` (as it is when the estimate is 0: nothing to
/// compare with).
fn within_band(seen: u64, estimate: u64) -> u64 {
    if estimate == 0 {
        return seen;
    }
    let low = (estimate as f64 * BAND.0) as u64;
    let high = (estimate as f64 * BAND.1) as u64;
    seen.clamp(low, high)
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

/// Seconds since the Unix epoch (0 before it).
fn unix_seconds(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Puts all of a resource's reservation in `kube_reserved`.
fn set_overhead(overhead: &mut Overhead, name: &str, reserved: u64) {
    overhead.kube_reserved.set(name, reserved);
    overhead.system_reserved.set(name, 0);
    overhead.eviction_threshold.set(name, 0);
}

/// Per learned resource, the smaller of the two.
fn min_learned(a: &Resources, b: &Resources) -> Resources {
    let mut out = Resources::new();
    for name in LEARNED_RESOURCES {
        out.set(name, a.get(name).min(b.get(name)));
    }
    out
}

/// The learned resources as quantities (zeros left out: a kubelet that reports none of a
/// resource says nothing about it).
fn quantities(r: &Resources) -> BTreeMap<String, String> {
    r.to_quantities()
        .into_iter()
        .filter(|(k, _)| LEARNED_RESOURCES.contains(&k.as_str()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instance_type::Offering;
    use crate::requirements::Requirements;

    const GI: u64 = 1 << 30;
    const T0: SystemTime = UNIX_EPOCH;
    const HOUR: Duration = Duration::from_secs(3600);

    fn estimate() -> InstanceType {
        let capacity = Resources::new()
            .with("cpu", 4000)
            .with("memory", 16 * GI)
            .with("pods", 110)
            .with("nvidia.com/gpu", 1);
        let overhead = Overhead {
            kube_reserved: Resources::new().with("cpu", 100).with("memory", GI / 2),
            ..Overhead::default()
        };
        InstanceType::new(
            "g-4",
            Requirements::new(),
            capacity,
            overhead,
            vec![Offering::new("zone-a", "on-demand", Some(1.0), true)],
        )
    }

    fn report(class: &str, cpu: u64, memory: u64) -> NodeReport {
        NodeReport {
            node_class: class.into(),
            instance_type: "g-4".into(),
            capacity: Resources::new()
                .with("cpu", 4000)
                .with("memory", 16 * GI)
                .with("pods", 110),
            allocatable: Resources::new()
                .with("cpu", cpu)
                .with("memory", memory)
                .with("pods", 110),
        }
    }

    #[test]
    fn the_smallest_node_seen_replaces_the_estimate_and_extended_resources_stay() {
        let mut learned = LearnedCapacity::default();
        assert!(learned.observe(
            &[
                report("k/K/a", 3800, 14 * GI),
                report("k/K/a", 3900, 13 * GI)
            ],
            T0
        ));
        assert!(
            !learned.observe(
                &[
                    report("k/K/a", 3800, 14 * GI),
                    report("k/K/a", 3900, 13 * GI)
                ],
                T0
            ),
            "nothing new"
        );
        assert_eq!(learned.get("k/K/a", "g-4").unwrap().nodes, 2);
        let t = learned.apply("k/K/a", vec![estimate()]).remove(0);
        assert_eq!(t.allocatable().cpu_millis, 3800);
        assert_eq!(
            t.allocatable().memory_bytes,
            13 * GI,
            "the node that holds less"
        );
        assert_eq!(
            t.allocatable().get("nvidia.com/gpu"),
            1,
            "extended resources keep the estimate"
        );
        assert_eq!(t.offerings().0.len(), 1);
        // Another NodeClass (other kubelet settings) learned nothing.
        assert_eq!(
            learned.apply("k/K/b", vec![estimate()]).remove(0),
            estimate()
        );
    }

    #[test]
    fn a_type_seen_as_estimated_is_unchanged_and_learning_survives_scale_to_zero() {
        let mut learned = LearnedCapacity::default();
        learned.observe(&[report("k/K/a", 3900, 15 * GI + GI / 2)], T0);
        assert_eq!(
            learned.apply("k/K/a", vec![estimate()]).remove(0),
            estimate()
        );
        assert!(
            !learned.observe(&[], T0),
            "no nodes now: what was learned stays"
        );
        assert!(learned.get("k/K/a", "g-4").is_some());
        let json = serde_json::to_string(&learned).unwrap();
        assert_eq!(
            serde_json::from_str::<LearnedCapacity>(&json).unwrap(),
            learned,
            "persisted as JSON"
        );
    }

    #[test]
    fn a_node_reporting_more_than_estimated_lets_more_in() {
        let mut learned = LearnedCapacity::default();
        learned.observe(&[report("k/K/a", 3990, 16 * GI - GI / 8)], T0);
        let t = learned.apply("k/K/a", vec![estimate()]).remove(0);
        assert_eq!(t.allocatable().cpu_millis, 3990);
        assert_eq!(t.allocatable().memory_bytes, 16 * GI - GI / 8);
    }

    /// A learned capacity as a ConfigMap holds it, parsed.
    fn saved(json: &str) -> LearnedCapacity {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn a_tampered_value_is_kept_within_the_band_around_the_estimate() {
        // cpu 999999999 (cores) written into the ConfigMap, with no node of the type present.
        let huge = saved(
            r#"{"k/K/a": {"g-4": {"capacity": {"cpu": "999999999", "memory": "16Gi", "pods": "110"},
                "allocatable": {"cpu": "999999999", "memory": "15Gi", "pods": "110"}, "nodes": 1}}}"#,
        );
        let (huge, rejected) = huge.validated(T0);
        assert!(rejected.is_empty(), "{rejected:?}");
        let t = huge.apply("k/K/a", vec![estimate()]).remove(0);
        assert_eq!(
            t.capacity().cpu_millis,
            6000,
            "1.5 × the estimate's 4 cores"
        );
        assert_eq!(
            t.allocatable().cpu_millis,
            5850,
            "1.5 × the estimate's 3.9 cores"
        );
        // A too-small value cannot rule the type out: half the estimate at least.
        let tiny = saved(
            r#"{"k/K/a": {"g-4": {"capacity": {"cpu": "1m", "memory": "16Gi", "pods": "110"},
                "allocatable": {"cpu": "1m", "memory": "1Ki", "pods": "110"}, "nodes": 1}}}"#,
        );
        let t = tiny
            .validated(T0)
            .0
            .apply("k/K/a", vec![estimate()])
            .remove(0);
        assert_eq!(t.capacity().cpu_millis, 2000);
        assert_eq!(t.allocatable().cpu_millis, 1950);
        assert_eq!(t.allocatable().memory_bytes, (16 * GI - GI / 2) / 2);
    }

    #[test]
    fn entries_that_cannot_be_a_kubelets_report_are_rejected_naming_the_field() {
        let (kept, rejected) = saved(
            r#"{"k/K/a": {
                "ok": {"capacity": {"cpu": "4", "memory": "16Gi"}, "allocatable": {"cpu": "3900m", "memory": "15Gi"}, "nodes": 2},
                "above": {"capacity": {"cpu": "4", "memory": "16Gi"}, "allocatable": {"cpu": "5", "memory": "15Gi"}, "nodes": 1},
                "garbled": {"capacity": {"cpu": "four", "memory": "16Gi"}, "allocatable": {}, "nodes": 1},
                "gpu": {"capacity": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "8"}, "allocatable": {}, "nodes": 1},
                "nobody": {"capacity": {"cpu": "4", "memory": "16Gi"}, "allocatable": {}, "nodes": 0}}}"#,
        )
        .validated(T0);
        assert!(kept.get("k/K/a", "ok").is_some());
        assert_eq!(kept.iter().count(), 1);
        let reasons: BTreeMap<&str, &str> = rejected
            .iter()
            .map(|r| (r.instance_type.as_str(), r.reason.as_str()))
            .collect();
        assert_eq!(reasons["above"], "allocatable.cpu is above capacity.cpu");
        assert!(
            reasons["garbled"].starts_with("capacity: "),
            "{}",
            reasons["garbled"]
        );
        assert_eq!(
            reasons["gpu"],
            "capacity.nvidia.com/gpu is not a learned resource"
        );
        assert_eq!(reasons["nobody"], "learned from 0 nodes");
        assert_eq!(
            rejected[0].to_string(),
            "k/K/a above: allocatable.cpu is above capacity.cpu"
        );
    }

    #[test]
    fn entries_expire_unless_nodes_confirm_them() {
        let mut learned = LearnedCapacity::default();
        learned.observe(&[report("k/K/a", 3800, 14 * GI)], T0);
        // The same report an hour later refreshes the entry (a write); sooner, nothing changes.
        assert!(!learned.observe(&[report("k/K/a", 3800, 14 * GI)], T0 + HOUR / 2));
        assert!(learned.observe(&[report("k/K/a", 3800, 14 * GI)], T0 + HOUR));
        assert!(
            learned
                .expire(T0 + HOUR + LEARNED_TTL - HOUR / 2)
                .is_empty()
        );
        assert_eq!(
            learned.expire(T0 + HOUR + LEARNED_TTL),
            [("k/K/a".to_string(), "g-4".to_string())]
        );
        assert!(learned.is_empty());
        // An entry saved before `observedAt` existed counts from its restore.
        let (old, _) = saved(
            r#"{"k/K/a": {"g-4": {"capacity": {"cpu": "4", "memory": "16Gi"}, "allocatable": {"cpu": "3", "memory": "15Gi"}, "nodes": 1}}}"#,
        )
        .validated(T0 + HOUR);
        assert_eq!(old.get("k/K/a", "g-4").unwrap().observed_at, 3600);
    }
}
