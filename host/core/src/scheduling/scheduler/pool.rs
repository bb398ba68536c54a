//! A NodePool prepared for the pass: its candidate instance types, their DaemonSet overhead,
//! free room and host ports ([`PoolTables`], the same for every pass over the same NodePools,
//! DaemonSets and policies, so a caller running many passes prepares them once:
//! [`PreparedPools`], part of [`Prepared`](super::Prepared)), and which of them its remaining
//! limits still allow.

use std::collections::BTreeMap;
use std::ops::Deref;

use crate::instance_type::{InstanceType, satisfies_min_values};
use crate::labels::{INITIALIZED_LABEL, LabelPolicy, NODEPOOL_LABEL, REGISTERED_LABEL};
use crate::requirements::{Requirement, Requirements};
use crate::resources::{NODES, ResourceKey, Resources};
use crate::taints::Taint;

use super::super::catalog::{OfferingTable, TypeClasses};
use super::super::constraints::{HostPort, MinValuesPolicy};
use super::super::daemons::Daemon;
use super::super::types::{NodePool, SchedulingContext, SchedulingInput};
use super::room::{Free, Room, fits_sum, no_extended};

/// What a pass knows of a NodePool before any pod: it depends only on the pool, the
/// DaemonSets and the label and minValues policies, never on pods or nodes.
pub(super) struct PoolTables {
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
    /// The instance types' offerings, numbered for mask checks.
    pub(super) offerings: OfferingTable,
    /// The instance types' requirements grouped by class.
    pub(super) classes: TypeClasses,
}

/// The NodePools of a scheduling input prepared once for many passes over the same pools,
/// DaemonSets and policies with different pods and nodes.
pub(super) struct PreparedPools {
    /// The pools with instance types left, in the pass's order (weight descending, then
    /// name descending): their index in the input's NodePools and their tables.
    pub(super) pools: Vec<(usize, PoolTables)>,
    /// The pools no instance type is left for, in the same order.
    pub(super) skipped: Vec<String>,
    /// What the pools were prepared from (see [`PreparedPools::fits`]).
    shape: Shape,
}

impl PreparedPools {
    /// Prepares `input`'s NodePools, under `input`'s DaemonSets (`daemons`) and label policy
    /// and `context`'s minValues policy (the pods, nodes and bound pods play no part).
    pub(super) fn new(
        input: &SchedulingInput,
        context: &SchedulingContext,
        daemons: &[Daemon<'_>],
    ) -> PreparedPools {
        let policy = &input.label_policy;
        let mut ordered: Vec<(usize, &NodePool)> = input.nodepools.iter().enumerate().collect();
        ordered.sort_by(|(_, a), (_, b)| {
            b.template
                .weight
                .cmp(&a.template.weight)
                .then_with(|| b.template.nodepool.cmp(&a.template.nodepool))
        });
        let mut pools = Vec::new();
        let mut skipped = Vec::new();
        for (index, pool) in ordered {
            match PoolTables::new(pool, daemons, policy, context.min_values_policy) {
                Some(tables) => pools.push((index, tables)),
                None => skipped.push(pool.template.nodepool.clone()),
            }
        }
        PreparedPools {
            pools,
            skipped,
            shape: Shape::of(input, context),
        }
    }

    /// Whether these were prepared for `input`'s NodePools (by name and instance type
    /// count) and DaemonSets (by name) and `context`'s minValues policy: a cheap guard
    /// against being handed the preparation of another input.
    pub(super) fn fits(&self, input: &SchedulingInput, context: &SchedulingContext) -> bool {
        let shape = &self.shape;
        shape.min_values == context.min_values_policy
            && shape.pools.len() == input.nodepools.len()
            && shape
                .pools
                .iter()
                .zip(&input.nodepools)
                .all(|((name, types), p)| {
                    *name == p.template.nodepool && *types == p.instance_types.len()
                })
            && shape.daemons.len() == input.daemons.len()
            && shape
                .daemons
                .iter()
                .zip(&input.daemons)
                .all(|(name, d)| *name == d.name)
    }
}

/// What NodePools were prepared from: each NodePool's name and instance type count and each
/// DaemonSet pod's name, in input order, and the minValues policy.
struct Shape {
    pools: Vec<(String, usize)>,
    daemons: Vec<String>,
    min_values: MinValuesPolicy,
}

impl Shape {
    fn of(input: &SchedulingInput, context: &SchedulingContext) -> Shape {
        Shape {
            pools: input
                .nodepools
                .iter()
                .map(|p| (p.template.nodepool.clone(), p.instance_types.len()))
                .collect(),
            daemons: input.daemons.iter().map(|d| d.name.clone()).collect(),
            min_values: context.min_values_policy,
        }
    }
}

impl PoolTables {
    /// `pool`'s tables; `None` when no instance type of it is left (none compatible with its
    /// requirements with an available offering, or minValues cannot be met under `Strict`).
    fn new(
        pool: &NodePool,
        daemons: &[Daemon<'_>],
        policy: &LabelPolicy,
        min_values_policy: MinValuesPolicy,
    ) -> Option<PoolTables> {
        let mut requirements = pool.template.requirements.clone();
        requirements.add(Requirement::in_values(
            NODEPOOL_LABEL,
            [pool.template.nodepool.as_str()],
        ));
        requirements.add(Requirement::in_values(REGISTERED_LABEL, ["true"]));
        requirements.add(Requirement::in_values(INITIALIZED_LABEL, ["true"]));
        let offerings = OfferingTable::new(&pool.instance_types);
        let classes = TypeClasses::new(&pool.instance_types);
        let filter = offerings.filter(&requirements, policy);
        let intersecting = classes.intersecting(&requirements);
        let mut candidates: Vec<usize> = pool
            .instance_types
            .iter()
            .enumerate()
            .filter(|&(i, t)| {
                intersecting[i]
                    && offerings
                        .available_compatible(i, t, filter, &requirements, policy)
                        .next()
                        .is_some()
            })
            .map(|(i, _)| i)
            .collect();
        if requirements.has_min_values() && min_values_policy == MinValuesPolicy::Strict {
            let types: Vec<&InstanceType> = candidates
                .iter()
                .map(|&i| &pool.instance_types[i])
                .collect();
            if satisfies_min_values(&types, &requirements).is_err() {
                candidates.clear();
            }
        }
        if candidates.is_empty() {
            return None;
        }
        let taints = &pool.template.taints;
        let overhead: Resources = daemons
            .iter()
            .filter(|d| d.runs_on_new(taints, &requirements, policy, None))
            .map(Daemon::requests)
            .sum();
        let mut type_overhead = vec![Resources::new(); pool.instance_types.len()];
        let mut type_ports = vec![Vec::new(); pool.instance_types.len()];
        for &i in &candidates {
            let t = &pool.instance_types[i];
            for d in daemons
                .iter()
                .filter(|d| d.runs_on_new(taints, &requirements, policy, Some(t)))
            {
                type_overhead[i] += d.requests();
                type_ports[i].extend(d.host_ports().iter().cloned());
            }
        }
        let type_free = pool
            .instance_types
            .iter()
            .zip(&type_overhead)
            .map(|(t, overhead)| Free::of(t.allocatable(), overhead))
            .collect();
        Some(PoolTables {
            requirements,
            candidates,
            type_overhead,
            type_free,
            type_ports,
            overhead,
            offerings,
            classes,
        })
    }
}

/// A NodePool during the pass: its prepared tables and what its limits still allow.
pub(super) struct Pool<'a> {
    pub(super) input: &'a NodePool,
    tables: &'a PoolTables,
    /// Remaining limits, reduced as claims are opened.
    pub(super) remaining: Option<BTreeMap<String, i128>>,
    /// The candidates within the remaining limits as last filtered (see
    /// [`Pool::new_claim_options`]).
    pub(super) within_limits: Option<WithinLimits>,
}

impl Deref for Pool<'_> {
    type Target = PoolTables;

    fn deref(&self) -> &PoolTables {
        self.tables
    }
}

impl<'a> Pool<'a> {
    /// `input` with its prepared `tables`, its limits untouched.
    pub(super) fn new(input: &'a NodePool, tables: &'a PoolTables) -> Pool<'a> {
        Pool {
            input,
            tables,
            remaining: input.limits.as_ref().map(|l| l.remaining()),
            within_limits: None,
        }
    }

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
            return self.tables.candidates.clone();
        };
        let limits = resolved_limits(remaining);
        let types = &self.input.instance_types;
        let within = self.within_limits.get_or_insert_with(|| WithinLimits {
            options: self.tables.candidates.clone(),
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
