//! A NodePool prepared for the pass: its candidate instance types, their DaemonSet overhead,
//! free room and host ports, and which of them its remaining limits still allow.

use std::collections::BTreeMap;

use crate::instance_type::InstanceType;
use crate::requirements::Requirements;
use crate::resources::{NODES, ResourceKey, Resources};
use crate::taints::Taint;

use super::super::catalog::{OfferingTable, TypeClasses};
use super::super::constraints::HostPort;
use super::super::types::NodePool;
use super::room::{Free, Room, fits_sum, no_extended};

/// A NodePool prepared for the pass.
pub(super) struct Pool<'a> {
    pub(super) input: &'a NodePool,
    /// Template requirements plus the nodepool label and the simulation-only
    /// registered/initialized labels (so DaemonSets selecting them are counted).
    pub(super) requirements: Requirements,
    /// Indices of the instance types compatible with the pool on their own.
    pub(super) candidates: Vec<usize>,
    /// DaemonSet requests per instance type index (filled for candidates).
    pub(super) type_overhead: Vec<Resources>,
    /// What each instance type has free once its DaemonSet overhead is reserved (see
    /// [`Free`]), by index.
    pub(super) type_free: Vec<Option<Free>>,
    /// Host ports of the DaemonSets per instance type index (filled for candidates).
    pub(super) type_ports: Vec<Vec<HostPort>>,
    /// DaemonSet requests for the pool regardless of instance type, as reported in reasons.
    pub(super) overhead: Resources,
    /// Remaining limits, reduced as claims are opened.
    pub(super) remaining: Option<BTreeMap<String, i128>>,
    /// The candidates within the remaining limits as last filtered (see
    /// [`Pool::new_claim_options`]).
    pub(super) within_limits: Option<WithinLimits>,
    /// The instance types' offerings, numbered for mask checks.
    pub(super) offerings: OfferingTable,
    /// The instance types' requirements grouped by class.
    pub(super) classes: TypeClasses,
}

impl Pool<'_> {
    pub(super) fn name(&self) -> &str {
        &self.input.template.nodepool
    }

    pub(super) fn instance_type(&self, index: usize) -> &InstanceType {
        &self.input.instance_types[index]
    }

    pub(super) fn taints(&self) -> &[Taint] {
        &self.input.template.taints
    }

    /// Whether instance type `t` holds pods requesting `requests` besides its DaemonSet
    /// overhead.
    pub(super) fn fits(&self, t: usize, requests: &Resources) -> bool {
        self.fits_plain(t, requests, no_extended(requests))
    }

    /// [`fits`](Self::fits), told whether `requests` asks for no extended resource (`plain`),
    /// for loops over many types with the same requests.
    pub(super) fn fits_plain(&self, t: usize, requests: &Resources, plain: bool) -> bool {
        match &self.type_free[t] {
            Some(free) if plain => free.holds(requests),
            _ => fits_sum(
                &[requests, &self.type_overhead[t]],
                self.instance_type(t).allocatable(),
            ),
        }
    }

    /// Counts instance type `t` holding `requests` (besides its overhead) in `room`.
    pub(super) fn widen(&self, room: &mut Room, t: usize, requests: &Resources) {
        match &self.type_free[t] {
            Some(free) => room.widen_free(free, requests),
            None => room.widen(
                self.instance_type(t).allocatable(),
                &self.type_overhead[t],
                requests,
            ),
        }
    }

    /// The instance types a new claim may use: the candidates whose capacity fits the
    /// remaining limits, in candidate order. Limits only shrink during a pass, so a type
    /// once out stays out: the list is kept between claims and filtered again only when a
    /// limit falls below the largest capacity it still holds (or no node is left).
    pub(super) fn new_claim_options(&mut self) -> Vec<usize> {
        let Some(remaining) = &self.remaining else {
            return self.candidates.clone();
        };
        let limits = resolved_limits(remaining);
        let types = &self.input.instance_types;
        let within = self.within_limits.get_or_insert_with(|| WithinLimits {
            options: self.candidates.clone(),
            largest: vec![i128::MAX; limits.len()],
        });
        if limits
            .iter()
            .zip(&within.largest)
            .any(|((_, left), largest)| largest > left)
        {
            within
                .options
                .retain(|&t| within_limits(&types[t], &limits));
            within.largest = limits
                .iter()
                .map(|(key, _)| match key {
                    // One node per claim, whichever type.
                    None => 1,
                    Some(key) => within
                        .options
                        .iter()
                        .map(|&t| i128::from(types[t].capacity().amount(*key)))
                        .max()
                        .unwrap_or(0),
                })
                .collect();
        }
        within.options.clone()
    }
}

/// A pool's candidates within its remaining limits, and per limited resource (in the order
/// of the remaining limits) the largest amount one of them would take from it.
pub(super) struct WithinLimits {
    options: Vec<usize>,
    largest: Vec<i128>,
}

/// The remaining limits with each resource name resolved once; `None` stands for `nodes`.
fn resolved_limits(remaining: &BTreeMap<String, i128>) -> Vec<(Option<ResourceKey<'_>>, i128)> {
    remaining
        .iter()
        .map(|(name, left)| ((name != NODES).then(|| ResourceKey::of(name)), *left))
        .collect()
}

/// Whether launching `t` stays within the remaining limits: its capacity of every limited
/// resource fits what is left, and a node is left when `nodes` is limited.
fn within_limits(t: &InstanceType, limits: &[(Option<ResourceKey<'_>>, i128)]) -> bool {
    limits.iter().all(|(key, left)| match key {
        None => *left >= 1,
        Some(key) => i128::from(t.capacity().amount(*key)) <= *left,
    })
}

/// Charges a new claim against the limits pessimistically: for each limited resource, the
/// largest capacity among the claim's instance types (any of them may be launched); one node.
pub(super) fn subtract_max<'r>(
    remaining: &mut BTreeMap<String, i128>,
    capacities: impl Iterator<Item = &'r Resources> + Clone,
) {
    for (name, left) in remaining.iter_mut() {
        let used = if name == NODES {
            1
        } else {
            let key = ResourceKey::of(name);
            capacities
                .clone()
                .map(|c| i128::from(c.amount(key)))
                .max()
                .unwrap_or(0)
        };
        *left -= used;
    }
}
