//! Finalization: the filled claims become NodeClaim specs, each with its fitting types in
//! launch order (cheapest first, at most `MAX_INSTANCE_TYPES`), its labels, annotations and
//! DaemonSet overhead; what a pool's types decide is computed once per set of requirements
//! and fitting types, since claims filled alike share them.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasherDefault;

use crate::hash::FxHasher;
use crate::instance_type::{InstanceType, MinValuesError, satisfies_min_values};
use crate::labels::{
    CAPACITY_OVERLAY_APPLIED_ANNOTATION, CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, LabelPolicy,
    NODECLAIM_MIN_VALUES_RELAXED_ANNOTATION, NODEPOOL_LABEL, PRICE_OVERLAY_APPLIED_ANNOTATION,
};
use crate::nodeclaim::{MAX_INSTANCE_TYPES, NodeClaimSpec, NodeClaimTemplate};
use crate::requirements::{Requirement, Requirements};
use crate::resources::Resources;

use super::super::pricing::{FallbackPrice, order_by_price};
use super::super::render;
use super::super::types::NewNodeClaim;
use super::Scheduler;
use super::filter::relax_min_values;
use super::pool::Pool;
use super::room::no_extended;

impl Scheduler<'_> {
    /// Turns the filled claims into NodeClaim specs. Returns the kept claims, the new index
    /// of each pass claim (`None` when dropped) and the reason a dropped claim's pods get.
    pub(super) fn finalize(
        &self,
        fallback: FallbackPrice<'_>,
    ) -> (Vec<NewNodeClaim>, Vec<Option<usize>>, Vec<Option<String>>) {
        let mut kept = Vec::new();
        let mut index = vec![None; self.claims.len()];
        let mut dropped = vec![None; self.claims.len()];
        // Per (pool, final requirements): each candidate type's launch price and the capacity
        // types of its available compatible offerings. Many claims share requirements.
        let mut memo: Vec<Priced> = Vec::new();
        let mut fitting: Vec<usize> = Vec::new();
        // Per pool: the names of the lists of types kept so far.
        let mut type_names: Vec<TypeNames> = (0..self.pools.len())
            .map(|_| TypeNames::default())
            .collect();
        for (c, claim) in self.claims.iter().enumerate() {
            let pool = &self.pools[claim.pool];
            let template = &pool.input.template;
            let mut requirements = claim.requirements.clone();
            for key in render::SIMULATION_ONLY_KEYS {
                requirements.remove(key);
            }

            let entry = match memo
                .iter()
                .position(|m| m.pool == claim.pool && m.requirements == requirements)
            {
                Some(i) => i,
                None => {
                    memo.push(Priced::new(
                        claim.pool,
                        pool,
                        &requirements,
                        self.policy,
                        fallback,
                    ));
                    memo.len() - 1
                }
            };
            // Options left unchecked by later pods (see `Options::DropFirst`) are checked here.
            fitting.clear();
            let plain = no_extended(&claim.requests);
            fitting.extend(
                claim
                    .options
                    .iter()
                    .copied()
                    .filter(|&t| pool.fits_plain(t, &claim.requests, plain)),
            );
            if !memo[entry].decided.contains_key(fitting.as_slice()) {
                let kept_types =
                    KeptTypes::new(pool, &memo[entry], &fitting, &mut type_names[claim.pool]);
                memo[entry].decided.insert(fitting.clone(), kept_types);
            }
            let priced = &memo[entry];
            let kept_types = &priced.decided[fitting.as_slice()];
            let mut min_values_relaxed = claim.min_values_relaxed;
            if let Err(err) = &kept_types.min_values {
                if !self.best_effort_min_values {
                    dropped[c] = Some(format!(
                        "pod didn’t schedule because NodePool {:?} couldn’t meet minValues requirements, {err}",
                        template.nodepool
                    ));
                    continue;
                }
                requirements = relax_min_values(&requirements, err);
                min_values_relaxed = true;
            }
            requirements.add(kept_types.type_requirement.clone());
            if let Some(capacity_types) = &kept_types.capacity_requirement {
                requirements.add(capacity_types.clone());
            }

            // What this claim added or relaxed are well-known keys' values and minValues,
            // which labels leave out: the memo's labels are the claim's.
            debug_assert_eq!(
                priced.labels,
                claim_labels(template, &requirements, self.policy)
            );
            let labels = priced.labels.clone();

            let mut annotations = template.annotations.clone();
            // Upstream's marks for NodeClaims that may launch an overlaid instance type.
            if kept_types.price_overlaid {
                annotations.insert(
                    PRICE_OVERLAY_APPLIED_ANNOTATION.to_owned(),
                    "true".to_owned(),
                );
            }
            if kept_types.capacity_overlaid {
                annotations.insert(
                    CAPACITY_OVERLAY_APPLIED_ANNOTATION.to_owned(),
                    "true".to_owned(),
                );
            }
            if self.best_effort_min_values && (min_values_relaxed || requirements.has_min_values())
            {
                annotations.insert(
                    NODECLAIM_MIN_VALUES_RELAXED_ANNOTATION.to_owned(),
                    min_values_relaxed.to_string(),
                );
            }

            index[c] = Some(kept.len());
            kept.push(NewNodeClaim {
                spec: NodeClaimSpec {
                    nodepool: template.nodepool.clone(),
                    node_class_ref: template.node_class_ref.clone(),
                    requirements,
                    requests: &claim.requests + &kept_types.daemon_overhead,
                    taints: template.taints.clone(),
                    startup_taints: template.startup_taints.clone(),
                    labels,
                    annotations,
                    instance_types: kept_types.names.clone(),
                },
                pods: claim
                    .pods
                    .iter()
                    .map(|&p| self.input.pods[p].key.clone())
                    .collect(),
                daemon_overhead: kept_types.daemon_overhead.clone(),
                launch_price: kept_types.launch_price,
            });
        }
        (kept, index, dropped)
    }
}

/// What a claim's remaining instance types decide, the same for every claim of a pool
/// whose requirements and fitting options are the same ([`Scheduler::finalize`]).
struct KeptTypes {
    /// The price of the first type launched (the cheapest), if known.
    launch_price: Option<f64>,
    /// The names of the types launched, cheapest first, at most [`MAX_INSTANCE_TYPES`].
    names: std::sync::Arc<[String]>,
    /// `node.kubernetes.io/instance-type In [names]`, names sorted.
    type_requirement: Requirement,
    /// Whether the types meet the requirements' minValues.
    min_values: Result<usize, MinValuesError>,
    /// The DaemonSet overhead counted: resource by resource, the least any type has.
    daemon_overhead: Resources,
    /// `karpenter.sh/capacity-type In [what the types offer]`, unless they offer none.
    capacity_requirement: Option<Requirement>,
    /// Whether a NodeOverlay changed a type's price.
    price_overlaid: bool,
    /// Whether a NodeOverlay changed a type's capacity.
    capacity_overlaid: bool,
}

impl KeptTypes {
    /// Decides for the `fitting` options of a claim of `pool` priced by `priced`, taking the
    /// types' names from the pool's `type_names`.
    fn new(
        pool: &Pool<'_>,
        priced: &Priced,
        fitting: &[usize],
        type_names: &mut TypeNames,
    ) -> Self {
        // In launch order: kept from the memo's ordered candidates.
        let mut is_fitting = vec![false; pool.input.instance_types.len()];
        for &t in fitting {
            is_fitting[t] = true;
        }
        let indices: Vec<usize> = priced
            .order
            .iter()
            .copied()
            .filter(|&t| is_fitting[t])
            .take(MAX_INSTANCE_TYPES)
            .collect();
        let types: Vec<&InstanceType> = indices.iter().map(|&t| pool.instance_type(t)).collect();
        let (names, type_requirement) = type_names.of(pool, &indices);
        KeptTypes {
            names,
            type_requirement,
            min_values: satisfies_min_values(&types, &priced.requirements),
            daemon_overhead: elementwise_min(indices.iter().map(|&t| &pool.type_overhead[t])),
            capacity_requirement: priced.capacity_requirement(&indices),
            price_overlaid: types.iter().any(|t| t.price_overlaid()),
            capacity_overlaid: types.iter().any(|t| t.capacity_overlaid()),
            launch_price: indices.first().and_then(|&t| priced.prices[t]),
        }
    }
}

/// A pool's lists of kept types by name, each built once (claims of different requirements
/// often keep the same types).
#[derive(Default)]
struct TypeNames {
    /// Each candidate's rank by name (built on first use): a claim's instance-type
    /// requirement lists its types in name order without comparing names.
    rank: Option<Vec<u32>>,
    /// Per list of types (launch order): their names and instance-type requirement.
    built: HashMap<Vec<usize>, NamedTypes, BuildHasherDefault<FxHasher>>,
}

/// A list of types' names and the instance-type requirement naming them.
type NamedTypes = (std::sync::Arc<[String]>, Requirement);

impl TypeNames {
    /// The names of types `indices` of `pool`, in order, and `node.kubernetes.io/instance-type
    /// In [those names]`.
    fn of(
        &mut self,
        pool: &Pool<'_>,
        indices: &[usize],
    ) -> (std::sync::Arc<[String]>, Requirement) {
        if let Some(built) = self.built.get(indices) {
            return built.clone();
        }
        let rank = self.rank.get_or_insert_with(|| {
            let mut order = pool.candidates.clone();
            order.sort_by(|&a, &b| {
                pool.instance_type(a)
                    .name()
                    .cmp(pool.instance_type(b).name())
            });
            let mut rank = vec![u32::MAX; pool.input.instance_types.len()];
            for (r, &t) in order.iter().enumerate() {
                rank[t] = r as u32;
            }
            rank
        });
        let mut in_name_order = indices.to_vec();
        in_name_order.sort_unstable_by_key(|&t| rank[t]);
        let sorted = in_name_order.iter().map(|&t| pool.instance_type(t).name());
        let names: std::sync::Arc<[String]> = indices
            .iter()
            .map(|&t| pool.instance_type(t).name().to_owned())
            .collect();
        let built = (names, Requirement::in_values(INSTANCE_TYPE_LABEL, sorted));
        self.built.insert(indices.to_vec(), built.clone());
        built
    }
}

/// The labels of a NodeClaim from `template` with `requirements`: the template's, the
/// NodePool's and node class's, and each single-valued requirement that is neither
/// well-known nor restricted.
fn claim_labels(
    template: &NodeClaimTemplate,
    requirements: &Requirements,
    policy: &LabelPolicy,
) -> BTreeMap<String, String> {
    let mut labels = template.labels.clone();
    labels.insert(NODEPOOL_LABEL.to_owned(), template.nodepool.clone());
    if !template.node_class_ref.kind.is_empty() {
        labels.insert(
            template.node_class_ref.label_key(),
            template.node_class_ref.name.clone(),
        );
    }
    for (key, value) in requirements.labels() {
        if !policy.is_well_known(&key) && !policy.is_restricted(&key) {
            labels.entry(key).or_insert(value);
        }
    }
    labels
}

/// Launch facts of a pool's types under one set of final claim requirements (many claims
/// share them): each type's launch price and the capacity types of its available compatible
/// offerings.
struct Priced {
    pool: usize,
    requirements: Requirements,
    /// Launch price per type index (candidates only).
    prices: Vec<Option<f64>>,
    /// The pool's capacity types, by number (at most 64 are told apart).
    capacity_type_names: Vec<String>,
    /// Per type index: bit `i` set when it offers `capacity_type_names[i]`.
    capacity_types: Vec<u64>,
    /// Every candidate in launch order (`order_by_price`): a claim's options are put in order
    /// by keeping theirs from this list, which the order's total tie-breaking makes the same
    /// as sorting them.
    order: Vec<usize>,
    /// The labels of a NodeClaim of the pool with these requirements ([`claim_labels`]).
    labels: BTreeMap<String, String>,
    /// Per list of a claim's options that still fit: what those types decide. Claims filled
    /// alike keep the same options, so most claims find theirs here.
    decided: HashMap<Vec<usize>, KeptTypes, BuildHasherDefault<FxHasher>>,
}

impl Priced {
    /// `karpenter.sh/capacity-type In [the capacity types the types `indices` offer]`.
    fn capacity_requirement(&self, indices: &[usize]) -> Option<Requirement> {
        let mask = indices
            .iter()
            .fold(0u64, |m, &t| m | self.capacity_types[t]);
        let names: Vec<&str> = self
            .capacity_type_names
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, n)| n.as_str())
            .collect();
        (!names.is_empty()).then(|| Requirement::in_values(CAPACITY_TYPE_LABEL, names))
    }

    fn new(
        index: usize,
        pool: &Pool<'_>,
        requirements: &Requirements,
        policy: &LabelPolicy,
        fallback: FallbackPrice<'_>,
    ) -> Self {
        let count = pool.input.instance_types.len();
        let mut priced = Priced {
            pool: index,
            requirements: requirements.clone(),
            prices: vec![None; count],
            capacity_type_names: pool
                .offerings
                .capacity_type_names()
                .map(str::to_owned)
                .collect(),
            capacity_types: vec![0; count],
            order: pool.candidates.clone(),
            labels: claim_labels(&pool.input.template, requirements, policy),
            decided: HashMap::default(),
        };
        let filter = pool.offerings.filter(requirements, policy);
        for &t in &pool.candidates {
            let it = pool.instance_type(t);
            // The cheapest available compatible offering's price (the fallback's where the
            // offering has none), and the capacity types offered.
            let mut cheapest: Option<f64> = None;
            for (o, capacity_type) in
                pool.offerings
                    .available_compatible_numbered(t, it, filter, requirements, policy)
            {
                if let Some(price) = o
                    .price()
                    .or_else(|| fallback(it, o))
                    .filter(|p| p.is_finite())
                {
                    cheapest = Some(cheapest.map_or(price, |c: f64| c.min(price)));
                }
                if let Some(bit) = capacity_type {
                    priced.capacity_types[t] |= 1 << bit;
                }
            }
            priced.prices[t] = cheapest;
        }
        let prices = &priced.prices;
        order_by_price(&mut priced.order, &pool.input.instance_types, |t| prices[t]);
        priced
    }
}

/// Resource-by-resource minimum (zero when any side lacks the resource).
fn elementwise_min<'r>(mut all: impl Iterator<Item = &'r Resources>) -> Resources {
    let Some(first) = all.next() else {
        return Resources::new();
    };
    let mut out = first.clone();
    for r in all {
        if out.is_zero() {
            break;
        }
        out.min_with(r);
    }
    out
}
