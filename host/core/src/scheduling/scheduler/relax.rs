//! Pods during the pass: upstream's queue order, each pod's constraints as relaxation leaves
//! them (what a node must satisfy, what its topology groups are built from), and relaxation:
//! one preference loosened at a time, in upstream's order.

use std::cmp::Reverse;

use crate::requirements::Requirements;
use crate::taints::{TaintEffect, Toleration, TolerationOperator};

use super::super::constraints::WhenUnsatisfiable;
use super::super::topology::Constraints;
use super::super::types::PendingPod;
use super::Scheduler;

/// A pod during the pass: its constraints as relaxation leaves them.
pub(super) struct Pod {
    /// Placement alternatives: node selector ∩ each required affinity term.
    pub(super) alternatives: Vec<Requirements>,
    /// The alternative in use (earlier ones were relaxed away).
    pub(super) current: usize,
    /// Remaining preferred node-affinity terms (indices), heaviest first.
    pub(super) preferred_affinity: Vec<usize>,
    /// Remaining preferred pod-affinity terms (indices), heaviest first.
    pub(super) preferred_pod_affinity: Vec<usize>,
    /// Remaining preferred pod-anti-affinity terms (indices), heaviest first.
    pub(super) preferred_pod_anti_affinity: Vec<usize>,
    /// Remaining topology spread constraints (indices).
    pub(super) spreads: Vec<usize>,
    /// Whether relaxation has added a toleration for every PreferNoSchedule taint.
    pub(super) tolerate_prefer_no_schedule: bool,
    /// What a node must satisfy: the alternative in use and, unless preferences are
    /// ignored, the heaviest remaining preferred node-affinity term.
    pub(super) requirements: Requirements,
}

impl Pod {
    /// The required node constraints only (what topology domains are computed from).
    pub(super) fn strict(&self) -> &Requirements {
        &self.alternatives[self.current]
    }
}

/// Indices of weighted items, heaviest first (stable for equal weights).
pub(super) fn by_weight<T>(items: &[T], weight: impl Fn(&T) -> i32) -> Vec<usize> {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| Reverse(weight(&items[i])));
    order
}

/// The toleration relaxation adds: every PreferNoSchedule taint.
fn prefer_no_schedule_toleration() -> Toleration {
    Toleration::exists("", Some(TaintEffect::PreferNoSchedule))
}

/// Pod indices in upstream's queue order: larger CPU, then memory requests first, then older
/// pods, then by UID and name.
pub(crate) fn queue_order(pods: &[PendingPod]) -> Vec<usize> {
    // The sort keys side by side (not read through the pods for every comparison); the
    // index last keeps equal pods in input order, as a stable sort would.
    let mut keys: Vec<_> = pods
        .iter()
        .enumerate()
        .map(|(i, p)| {
            (
                Reverse(p.requests.cpu_millis),
                Reverse(p.requests.memory_bytes),
                p.created,
                p.uid.as_str(),
                &p.key,
                i,
            )
        })
        .collect();
    keys.sort_unstable();
    keys.into_iter().map(|(.., i)| i).collect()
}

/// What a node must satisfy for `pod`: its required alternative in use plus, unless
/// preferences are ignored, the heaviest remaining preferred node-affinity term.
pub(super) fn pod_requirements(
    pod: &Pod,
    input: &PendingPod,
    ignore_preferences: bool,
) -> Requirements {
    let mut requirements = pod.strict().clone();
    if !ignore_preferences && let Some(&i) = pod.preferred_affinity.first() {
        requirements.add_all(&input.preferred_affinity[i].preference);
    }
    requirements
}

/// The constraints topology groups are built from, as relaxation left them.
pub(super) fn constraints<'p>(
    pod: &'p Pod,
    input: &'p PendingPod,
    ignore_preferences: bool,
) -> Constraints<'p> {
    let spreads = pod
        .spreads
        .iter()
        .map(|&i| &input.topology_spread[i])
        .filter(|c| !ignore_preferences || c.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule)
        .collect();
    let mut affinity: Vec<_> = input.pod_affinity.iter().collect();
    let mut anti_affinity: Vec<_> = input.pod_anti_affinity.iter().collect();
    if !ignore_preferences {
        affinity.extend(
            pod.preferred_pod_affinity
                .iter()
                .map(|&i| &input.preferred_pod_affinity[i].term),
        );
        anti_affinity.extend(
            pod.preferred_pod_anti_affinity
                .iter()
                .map(|&i| &input.preferred_pod_anti_affinity[i].term),
        );
    }
    let mut tolerations = input.tolerations.clone();
    if pod.tolerate_prefer_no_schedule {
        tolerations.push(prefer_no_schedule_toleration());
    }
    Constraints {
        spreads,
        affinity,
        anti_affinity,
        node_terms: &pod.alternatives[pod.current..],
        tolerations,
    }
}

impl Scheduler<'_> {
    /// Loosens one preference of a pod that could not be placed, in upstream's order;
    /// false when nothing is left. The pod's topology groups follow its new constraints.
    pub(super) fn relax(&mut self, p: usize) -> bool {
        let input = &self.input.pods[p];
        let pod = &mut self.pods[p];
        let relaxed = if pod.current + 1 < pod.alternatives.len() {
            pod.current += 1;
            true
        } else if !pod.preferred_pod_affinity.is_empty() {
            pod.preferred_pod_affinity.remove(0);
            true
        } else if !pod.preferred_pod_anti_affinity.is_empty() {
            pod.preferred_pod_anti_affinity.remove(0);
            true
        } else if !pod.preferred_affinity.is_empty() {
            pod.preferred_affinity.remove(0);
            true
        } else if let Some(i) = pod.spreads.iter().position(|&s| {
            input.topology_spread[s].when_unsatisfiable == WhenUnsatisfiable::ScheduleAnyway
        }) {
            // Upstream moves the last constraint into the removed one's place.
            pod.spreads.swap_remove(i);
            true
        } else if self.prefer_no_schedule_relaxable
            && !pod.tolerate_prefer_no_schedule
            && !input.tolerations.iter().any(|t| {
                t.key.is_empty()
                    && t.value.is_empty()
                    && t.operator == TolerationOperator::Exists
                    && t.effect == Some(TaintEffect::PreferNoSchedule)
            })
        {
            pod.tolerate_prefer_no_schedule = true;
            true
        } else {
            false
        };
        if relaxed {
            pod.requirements = pod_requirements(pod, input, self.ignore_preferences);
            self.topology.update(
                p,
                &constraints(&self.pods[p], input, self.ignore_preferences),
            );
        }
        relaxed
    }
}
