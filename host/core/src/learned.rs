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

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::instance_type::{InstanceType, Overhead};
use crate::resources::{HUGEPAGES_PREFIX, Resources};

/// The resources learned from nodes (a kubelet reports them all as soon as it registers).
pub const LEARNED_RESOURCES: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pods"];

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
    /// Records what the nodes report: for each (NodeClass, type) that has nodes now, the
    /// smallest of their values replaces what was learned before; types without nodes now keep
    /// what was learned (so it survives scaling to zero). Returns whether anything changed.
    pub fn observe(&mut self, reports: &[NodeReport]) -> bool {
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
            let learned = Learned {
                capacity: quantities(&capacity),
                allocatable: quantities(&allocatable),
                nodes,
            };
            let slot = self
                .entries
                .entry(class.to_string())
                .or_default()
                .entry(kind.to_string())
                .or_default();
            if *slot != learned {
                *slot = learned;
                changed = true;
            }
        }
        changed
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
    /// resources' capacity and allocatable (the overhead becomes their difference); other
    /// resources, requirements and offerings unchanged. Types never seen, or seen exactly as
    /// estimated, are returned as they were.
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
            capacity.set(name, capacity_seen.get(name));
        }
        if learned.allocatable.contains_key(name) {
            // compute_allocatable subtracts hugepages from memory again: leave them out here.
            let already = if name == "memory" { hugepages } else { 0 };
            let reserved = capacity
                .get(name)
                .saturating_sub(allocatable_seen.get(name))
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
        assert!(learned.observe(&[
            report("k/K/a", 3800, 14 * GI),
            report("k/K/a", 3900, 13 * GI)
        ]));
        assert!(
            !learned.observe(&[
                report("k/K/a", 3800, 14 * GI),
                report("k/K/a", 3900, 13 * GI)
            ]),
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
        learned.observe(&[report("k/K/a", 3900, 15 * GI + GI / 2)]);
        assert_eq!(
            learned.apply("k/K/a", vec![estimate()]).remove(0),
            estimate()
        );
        assert!(
            !learned.observe(&[]),
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
        learned.observe(&[report("k/K/a", 3990, 16 * GI - GI / 8)]);
        let t = learned.apply("k/K/a", vec![estimate()]).remove(0);
        assert_eq!(t.allocatable().cpu_millis, 3990);
        assert_eq!(t.allocatable().memory_bytes, 16 * GI - GI / 8);
    }
}
