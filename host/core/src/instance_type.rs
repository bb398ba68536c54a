//! Instance types and their offerings, as a cloud plugin describes them.
//!
//! An [`InstanceType`] is a machine shape: requirements (the labels a node of this type will
//! carry), capacity, kubelet overhead and [`Offerings`] — where (zone) and how (capacity type)
//! it can be bought, at what price, and whether it can be bought right now.
//!
//! Offering compatibility always tolerates well-known keys that the claim's requirements do
//! not mention: the functions take the set of such keys explicitly (upstream's
//! [`WELL_KNOWN_LABELS`](crate::labels::WELL_KNOWN_LABELS), or a
//! [`LabelPolicy`](crate::labels::LabelPolicy) extended by the plugin).

use std::borrow::Borrow;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Deref;

use crate::labels::{
    CAPACITY_TYPE_LABEL, CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, CAPACITY_TYPE_SPOT,
    ZONE_LABEL,
};
use crate::requirements::{KeySet, Requirement, Requirements};
use crate::resources::{HUGEPAGES_PREFIX, Resources};

/// One way to buy an instance type: a zone and a capacity type, with a price and availability.
#[derive(Debug, Clone, PartialEq)]
pub struct Offering {
    zone: String,
    capacity_type: String,
    price: Option<f64>,
    available: bool,
    requirements: Requirements,
    /// Fingerprints of the zone and capacity type, for per-pass indexes.
    fingerprints: (u64, u64),
}

impl Offering {
    /// An offering; its requirements are `zone In [zone]` and `capacity-type In [capacity_type]`.
    /// `price` is `None` when unknown (it is never guessed).
    pub fn new(
        zone: impl Into<String>,
        capacity_type: impl Into<String>,
        price: Option<f64>,
        available: bool,
    ) -> Self {
        let zone = zone.into();
        let capacity_type = capacity_type.into();
        let requirements = [
            Requirement::in_values(ZONE_LABEL, [zone.as_str()]),
            Requirement::in_values(CAPACITY_TYPE_LABEL, [capacity_type.as_str()]),
        ]
        .into_iter()
        .collect();
        Offering {
            fingerprints: (
                crate::hash::fingerprint(zone.as_str()),
                crate::hash::fingerprint(capacity_type.as_str()),
            ),
            zone,
            capacity_type,
            price,
            available,
            requirements,
        }
    }

    /// Adds a further requirement (e.g. a reservation ID label). Zone and capacity type are
    /// fixed at construction; use other keys here.
    pub fn with_requirement(mut self, requirement: Requirement) -> Self {
        self.requirements.add(requirement);
        self
    }

    /// Zone.
    pub fn zone(&self) -> &str {
        &self.zone
    }

    /// Capacity type (`on-demand`, `spot`, `reserved`).
    pub fn capacity_type(&self) -> &str {
        &self.capacity_type
    }

    /// Fingerprints of the zone and of the capacity type.
    pub(crate) fn fingerprints(&self) -> (u64, u64) {
        self.fingerprints
    }

    /// Price per hour, if known.
    pub fn price(&self) -> Option<f64> {
        self.price
    }

    /// Sets (or forgets) the price, e.g. from a pricing plugin or an overlay.
    pub fn set_price(&mut self, price: Option<f64>) {
        self.price = price;
    }

    /// Whether the offering can be launched now.
    pub fn available(&self) -> bool {
        self.available
    }

    /// Marks the offering (un)available, e.g. after an insufficient-capacity error.
    pub fn set_available(&mut self, available: bool) {
        self.available = available;
    }

    /// The offering's requirements (zone, capacity type and any extra ones).
    pub fn requirements(&self) -> &Requirements {
        &self.requirements
    }

    /// Whether the offering satisfies `requirements`, tolerating well-known keys that
    /// `requirements` leaves undefined.
    pub fn is_compatible<K: KeySet + ?Sized>(
        &self,
        requirements: &Requirements,
        well_known: &K,
    ) -> bool {
        requirements.is_compatible(&self.requirements, well_known)
    }
}

fn cmp_price(a: f64, b: f64) -> Ordering {
    a.total_cmp(&b)
}

/// Cheapest offering with a known price among `offerings`.
fn cheapest_of<'a>(offerings: impl Iterator<Item = &'a Offering>) -> Option<&'a Offering> {
    offerings
        .filter(|o| o.price.is_some())
        .min_by(|a, b| cmp_price(a.price.unwrap_or(f64::MAX), b.price.unwrap_or(f64::MAX)))
}

/// Most expensive offering with a known price among `offerings`.
fn most_expensive_of<'a>(offerings: impl Iterator<Item = &'a Offering>) -> Option<&'a Offering> {
    offerings
        .filter(|o| o.price.is_some())
        .max_by(|a, b| cmp_price(a.price.unwrap_or(0.0), b.price.unwrap_or(0.0)))
}

/// The offerings of an instance type.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Offerings(pub Vec<Offering>);

impl Deref for Offerings {
    type Target = [Offering];
    fn deref(&self) -> &[Offering] {
        &self.0
    }
}

impl From<Vec<Offering>> for Offerings {
    fn from(v: Vec<Offering>) -> Self {
        Offerings(v)
    }
}

impl FromIterator<Offering> for Offerings {
    fn from_iter<I: IntoIterator<Item = Offering>>(iter: I) -> Self {
        Offerings(iter.into_iter().collect())
    }
}

impl<'a> IntoIterator for &'a Offerings {
    type Item = &'a Offering;
    type IntoIter = std::slice::Iter<'a, Offering>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl Offerings {
    /// Offerings that can be launched now.
    pub fn available(&self) -> impl Iterator<Item = &Offering> {
        self.0.iter().filter(|o| o.available)
    }

    /// Offerings (available or not) compatible with `requirements`.
    pub fn compatible<'a, K: KeySet + ?Sized>(
        &'a self,
        requirements: &'a Requirements,
        well_known: &'a K,
    ) -> impl Iterator<Item = &'a Offering> {
        self.0
            .iter()
            .filter(move |o| o.is_compatible(requirements, well_known))
    }

    /// Available offerings compatible with `requirements`.
    pub fn available_compatible<'a, K: KeySet + ?Sized>(
        &'a self,
        requirements: &'a Requirements,
        well_known: &'a K,
    ) -> impl Iterator<Item = &'a Offering> {
        self.0
            .iter()
            .filter(move |o| o.available && o.is_compatible(requirements, well_known))
    }

    /// Whether some offering (available or not) is compatible with `requirements`.
    pub fn has_compatible<K: KeySet + ?Sized>(
        &self,
        requirements: &Requirements,
        well_known: &K,
    ) -> bool {
        self.compatible(requirements, well_known).next().is_some()
    }

    /// The cheapest offering with a known price.
    pub fn cheapest(&self) -> Option<&Offering> {
        cheapest_of(self.0.iter())
    }

    /// The most expensive offering with a known price.
    pub fn most_expensive(&self) -> Option<&Offering> {
        most_expensive_of(self.0.iter())
    }

    /// The price to budget for when launching with `requirements`: the most expensive
    /// compatible offering of the first capacity type — reserved, then spot, then on-demand —
    /// that has any compatible offering. `None` if there is none or its prices are unknown.
    pub fn worst_launch_price<K: KeySet + ?Sized>(
        &self,
        requirements: &Requirements,
        well_known: &K,
    ) -> Option<f64> {
        for capacity_type in [
            CAPACITY_TYPE_RESERVED,
            CAPACITY_TYPE_SPOT,
            CAPACITY_TYPE_ON_DEMAND,
        ] {
            let mut of_type = self
                .compatible(requirements, well_known)
                .filter(|o| o.capacity_type == capacity_type)
                .peekable();
            if of_type.peek().is_some() {
                return most_expensive_of(of_type).and_then(|o| o.price);
            }
        }
        None
    }
}

/// Capacity the kubelet keeps for itself and the system.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overhead {
    /// `--kube-reserved`.
    pub kube_reserved: Resources,
    /// `--system-reserved`.
    pub system_reserved: Resources,
    /// Hard eviction thresholds.
    pub eviction_threshold: Resources,
}

impl Overhead {
    /// Sum of the three parts.
    pub fn total(&self) -> Resources {
        let mut total = self.kube_reserved.saturating_add(&self.system_reserved);
        total += &self.eviction_threshold;
        total
    }
}

/// A machine shape a cloud plugin can launch.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceType {
    name: String,
    requirements: Requirements,
    capacity: Resources,
    overhead: Overhead,
    offerings: Offerings,
    allocatable: Resources,
    /// [`fingerprint`](crate::hash::fingerprint) of each requirement, in the requirements'
    /// order; computed once here so that scheduling passes group types without hashing.
    fingerprints: Vec<u64>,
    /// Whether a NodeOverlay changed an offering's price / added capacity.
    overlaid: (bool, bool),
}

impl InstanceType {
    /// An instance type. `requirements` should define every well-known label (the plugin's
    /// contract), including `node.kubernetes.io/instance-type In [name]`. Allocatable capacity
    /// is computed once here.
    pub fn new(
        name: impl Into<String>,
        requirements: Requirements,
        capacity: Resources,
        overhead: Overhead,
        offerings: impl Into<Offerings>,
    ) -> Self {
        let allocatable = compute_allocatable(&capacity, &overhead);
        let fingerprints = requirements.iter().map(crate::hash::fingerprint).collect();
        InstanceType {
            name: name.into(),
            fingerprints,
            overlaid: (false, false),
            requirements,
            capacity,
            overhead,
            offerings: offerings.into(),
            allocatable,
        }
    }

    /// An instance type whose requirements also say where it is sold, as upstream's providers
    /// declare: `topology.kubernetes.io/zone In [zones with an available offering]` and
    /// `karpenter.sh/capacity-type In [capacity types with one]`, each added only when the type
    /// does not define the key already. Topology spread and affinity find their zone domains
    /// there. Types without available offerings are returned unchanged.
    pub fn with_offering_requirements(self) -> InstanceType {
        let t = self;
        let zones: BTreeSet<&str> = t.offerings().available().map(|o| o.zone()).collect();
        let capacity_types: BTreeSet<&str> = t
            .offerings()
            .available()
            .map(|o| o.capacity_type())
            .collect();
        let missing_zone = !zones.is_empty() && !t.requirements().has(crate::labels::ZONE_LABEL);
        let missing_ct =
            !capacity_types.is_empty() && !t.requirements().has(crate::labels::CAPACITY_TYPE_LABEL);
        if !missing_zone && !missing_ct {
            return t;
        }
        let mut requirements = t.requirements().clone();
        if missing_zone {
            requirements.add(Requirement::in_values(crate::labels::ZONE_LABEL, zones));
        }
        if missing_ct {
            requirements.add(Requirement::in_values(
                crate::labels::CAPACITY_TYPE_LABEL,
                capacity_types,
            ));
        }
        InstanceType::new(
            t.name(),
            requirements,
            t.capacity().clone(),
            t.overhead().clone(),
            t.offerings().clone(),
        )
    }

    /// Name (the `node.kubernetes.io/instance-type` value).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Labels a node of this type will have.
    pub fn requirements(&self) -> &Requirements {
        &self.requirements
    }

    /// Whether a NodeOverlay changed the price of one of its offerings.
    pub fn price_overlaid(&self) -> bool {
        self.overlaid.0
    }

    /// Whether a NodeOverlay added capacity to it.
    pub fn capacity_overlaid(&self) -> bool {
        self.overlaid.1
    }

    /// Records which NodeOverlays changed the type (see [`crate::overlay`]).
    pub(crate) fn mark_overlaid(&mut self, price: bool, capacity: bool) {
        self.overlaid = (price, capacity);
    }

    /// The fingerprint of each of [`requirements`](Self::requirements), in order.
    pub(crate) fn requirement_fingerprints(&self) -> &[u64] {
        &self.fingerprints
    }

    /// Total capacity.
    pub fn capacity(&self) -> &Resources {
        &self.capacity
    }

    /// Kubelet overhead.
    pub fn overhead(&self) -> &Overhead {
        &self.overhead
    }

    /// Offerings.
    pub fn offerings(&self) -> &Offerings {
        &self.offerings
    }

    /// Offerings, mutable (prices and availability only change these; allocatable does not
    /// depend on them).
    pub fn offerings_mut(&mut self) -> &mut Offerings {
        &mut self.offerings
    }

    /// What pods can use: capacity minus overhead, with memory further reduced by all
    /// `hugepages-*` capacity; every amount floored at zero.
    pub fn allocatable(&self) -> &Resources {
        &self.allocatable
    }

    /// Price of the cheapest available offering compatible with `requirements` whose price is
    /// known.
    pub fn cheapest_price<K: KeySet + ?Sized>(
        &self,
        requirements: &Requirements,
        well_known: &K,
    ) -> Option<f64> {
        cheapest_of(
            self.offerings
                .available_compatible(requirements, well_known),
        )
        .and_then(|o| o.price)
    }

    /// Whether some available offering is compatible with `requirements`.
    pub fn has_available_compatible<K: KeySet + ?Sized>(
        &self,
        requirements: &Requirements,
        well_known: &K,
    ) -> bool {
        self.offerings
            .available_compatible(requirements, well_known)
            .next()
            .is_some()
    }
}

fn compute_allocatable(capacity: &Resources, overhead: &Overhead) -> Resources {
    let mut allocatable = capacity.saturating_sub(&overhead.total());
    let hugepages = capacity
        .extended()
        .filter(|(name, _)| name.starts_with(HUGEPAGES_PREFIX))
        .fold(0u64, |sum, (_, amount)| sum.saturating_add(amount));
    allocatable.memory_bytes = allocatable.memory_bytes.saturating_sub(hugepages);
    allocatable
}

/// Keeps the instance types that have an available offering compatible with `requirements`.
pub fn compatible_instance_types<'a, T, K>(
    types: &'a [T],
    requirements: &Requirements,
    well_known: &K,
) -> Vec<&'a T>
where
    T: Borrow<InstanceType>,
    K: KeySet + ?Sized,
{
    types
        .iter()
        .filter(|t| {
            (*t).borrow()
                .has_available_compatible(requirements, well_known)
        })
        .collect()
}

/// Sorts instance types by the price of their cheapest available compatible offering,
/// ascending; types without such a priced offering go last; ties are broken by name.
pub fn order_by_price<T, K>(types: &mut [T], requirements: &Requirements, well_known: &K)
where
    T: Borrow<InstanceType>,
    K: KeySet + ?Sized,
{
    // Compute each key once, then sort a permutation.
    let keys: Vec<Option<f64>> = types
        .iter()
        .map(|t| t.borrow().cheapest_price(requirements, well_known))
        .collect();
    let mut order: Vec<usize> = (0..types.len()).collect();
    order.sort_by(|&a, &b| {
        let by_price = match (keys[a], keys[b]) {
            (Some(x), Some(y)) => cmp_price(x, y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        };
        by_price.then_with(|| types[a].borrow().name().cmp(types[b].borrow().name()))
    });
    apply_permutation(types, order);
}

/// Reorders `items` so that position `i` holds the element previously at `order[i]`.
fn apply_permutation<T>(items: &mut [T], mut order: Vec<usize>) {
    for i in 0..items.len() {
        // Follow the cycle starting at i, swapping elements into place.
        let mut current = i;
        while order[current] != i {
            let next = order[current];
            items.swap(current, next);
            order[current] = current;
            current = next;
        }
        order[current] = current;
    }
}

/// minValues cannot be met by a list of instance types.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("minValues requirement is not met for label(s) {}", describe(.unmet))]
pub struct MinValuesError {
    /// Per failing key: (distinct values found, minValues required).
    pub unmet: BTreeMap<String, (usize, usize)>,
}

fn describe(unmet: &BTreeMap<String, (usize, usize)>) -> String {
    unmet
        .iter()
        .map(|(k, (found, needed))| format!("{k} ({found} of {needed})"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Walks `types` in order, collecting the distinct values each minValues key takes across
/// their requirements. Returns how many leading types are needed to meet every minValues
/// (0 when there are none), or the keys that the whole list cannot satisfy.
pub fn satisfies_min_values<T: Borrow<InstanceType>>(
    types: &[T],
    requirements: &Requirements,
) -> Result<usize, MinValuesError> {
    let keyed: Vec<(&str, usize)> = requirements
        .iter()
        .filter_map(|r| r.min_values().map(|m| (r.key(), m)))
        .collect();
    if keyed.is_empty() {
        return Ok(0);
    }
    let mut seen: Vec<BTreeSet<&str>> = vec![BTreeSet::new(); keyed.len()];
    for (i, t) in types.iter().enumerate() {
        let t = t.borrow();
        for ((key, _), values) in keyed.iter().zip(seen.iter_mut()) {
            if let Some(r) = t.requirements().get(key)
                && !r.is_complement()
            {
                values.extend(r.values().iter().map(String::as_str));
            }
        }
        if keyed
            .iter()
            .zip(&seen)
            .all(|((_, min), values)| values.len() >= *min)
        {
            return Ok(i + 1);
        }
    }
    Err(MinValuesError {
        unmet: keyed
            .iter()
            .zip(&seen)
            .filter(|((_, min), values)| values.len() < *min)
            .map(|((key, min), values)| ((*key).to_owned(), (values.len(), *min)))
            .collect(),
    })
}

/// Orders `types` by price (see [`order_by_price`]) and keeps the first `n`. The list is
/// truncated in every case; the error reports that the kept types no longer meet minValues
/// (a Strict minValues policy drops the claim then).
pub fn truncate<T, K>(
    types: &mut Vec<T>,
    requirements: &Requirements,
    well_known: &K,
    n: usize,
) -> Result<(), MinValuesError>
where
    T: Borrow<InstanceType>,
    K: KeySet + ?Sized,
{
    order_by_price(types, requirements, well_known);
    types.truncate(n);
    satisfies_min_values(types, requirements).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labels::{ARCH_LABEL, INSTANCE_TYPE_LABEL, WELL_KNOWN_LABELS};

    fn it(name: &str, offerings: Vec<Offering>) -> InstanceType {
        let reqs = [
            Requirement::in_values(INSTANCE_TYPE_LABEL, [name]),
            Requirement::in_values(ZONE_LABEL, ["a", "b"]),
            Requirement::in_values(CAPACITY_TYPE_LABEL, ["on-demand", "spot"]),
        ]
        .into_iter()
        .collect();
        InstanceType::new(
            name,
            reqs,
            Resources::new().with("cpu", 2000),
            Overhead::default(),
            offerings,
        )
    }

    fn od(zone: &str, price: Option<f64>) -> Offering {
        Offering::new(zone, CAPACITY_TYPE_ON_DEMAND, price, true)
    }

    fn names<T: Borrow<InstanceType>>(types: &[T]) -> Vec<&str> {
        types.iter().map(|t| t.borrow().name()).collect()
    }

    #[test]
    fn allocatable_subtracts_overhead_and_hugepages() {
        let capacity = Resources::from_quantities([
            ("cpu", "4"),
            ("memory", "16Gi"),
            ("pods", "110"),
            ("hugepages-2Mi", "1Gi"),
            ("hugepages-1Gi", "2Gi"),
        ])
        .unwrap();
        let overhead = Overhead {
            kube_reserved: Resources::from_quantities([("cpu", "100m"), ("memory", "1Gi")])
                .unwrap(),
            system_reserved: Resources::from_quantities([("cpu", "50m"), ("memory", "512Mi")])
                .unwrap(),
            eviction_threshold: Resources::from_quantities([("memory", "100Mi")]).unwrap(),
        };
        let t = InstanceType::new("m", Requirements::new(), capacity, overhead, vec![]);
        let a = t.allocatable();
        assert_eq!(a.cpu_millis, 3850);
        assert_eq!(
            a.memory_bytes,
            (16 << 30) - (1 << 30) - (512 << 20) - (100 << 20) - (3 << 30)
        );
        assert_eq!(a.pods, 110);
        assert_eq!(
            a.get("hugepages-2Mi"),
            1 << 30,
            "hugepages themselves stay allocatable"
        );
        assert_eq!(t.capacity().memory_bytes, 16 << 30);
    }

    #[test]
    fn allocatable_floors_at_zero() {
        let capacity =
            Resources::from_quantities([("cpu", "1"), ("memory", "1Gi"), ("hugepages-1Gi", "4Gi")])
                .unwrap();
        let overhead = Overhead {
            kube_reserved: Resources::from_quantities([("cpu", "2")]).unwrap(),
            ..Default::default()
        };
        let t = InstanceType::new("tiny", Requirements::new(), capacity, overhead, vec![]);
        assert_eq!(t.allocatable().cpu_millis, 0);
        assert_eq!(t.allocatable().memory_bytes, 0);
    }

    #[test]
    fn offering_compatibility_allows_undefined_well_known() {
        let o = Offering::new("a", "spot", Some(1.0), true);
        assert!(o.is_compatible(&Requirements::new(), &WELL_KNOWN_LABELS));
        let zone_b: Requirements = [Requirement::in_values(ZONE_LABEL, ["b"])]
            .into_iter()
            .collect();
        assert!(!o.is_compatible(&zone_b, &WELL_KNOWN_LABELS));
        let zone_a: Requirements = [Requirement::in_values(ZONE_LABEL, ["a", "b"])]
            .into_iter()
            .collect();
        assert!(o.is_compatible(&zone_a, &WELL_KNOWN_LABELS));
        // Strict: the claim does not define zone/capacity-type, so the offering's keys are undefined.
        assert!(!o.is_compatible(&Requirements::new(), &crate::requirements::NO_KEYS));
        // An extra non-well-known key on the offering must be declared by the claim.
        let reserved = Offering::new("a", "reserved", Some(0.5), true).with_requirement(
            Requirement::in_values("example.com/reservation-id", ["r-1"]),
        );
        assert!(!reserved.is_compatible(&Requirements::new(), &WELL_KNOWN_LABELS));
        let policy =
            crate::labels::LabelPolicy::default().with_well_known("example.com/reservation-id");
        assert!(reserved.is_compatible(&Requirements::new(), &policy));
    }

    #[test]
    fn offerings_helpers() {
        let offerings: Offerings = vec![
            Offering::new("a", "on-demand", Some(3.0), true),
            Offering::new("b", "on-demand", Some(2.0), false),
            Offering::new("a", "spot", Some(1.0), true),
            Offering::new("b", "spot", None, true),
        ]
        .into();
        assert_eq!(offerings.available().count(), 3);
        assert_eq!(offerings.cheapest().unwrap().price(), Some(1.0));
        assert_eq!(offerings.most_expensive().unwrap().price(), Some(3.0));
        let zone_b: Requirements = [Requirement::in_values(ZONE_LABEL, ["b"])]
            .into_iter()
            .collect();
        assert_eq!(offerings.compatible(&zone_b, &WELL_KNOWN_LABELS).count(), 2);
        assert_eq!(
            offerings
                .available_compatible(&zone_b, &WELL_KNOWN_LABELS)
                .count(),
            1
        );
        assert!(offerings.has_compatible(&zone_b, &WELL_KNOWN_LABELS));
        let zone_c: Requirements = [Requirement::in_values(ZONE_LABEL, ["c"])]
            .into_iter()
            .collect();
        assert!(!offerings.has_compatible(&zone_c, &WELL_KNOWN_LABELS));
    }

    #[test]
    fn worst_launch_price_prefers_reserved_then_spot() {
        let offerings: Offerings = vec![
            Offering::new("a", "on-demand", Some(3.0), true),
            Offering::new("a", "spot", Some(1.0), true),
            Offering::new("b", "spot", Some(1.5), true),
        ]
        .into();
        let any = Requirements::new();
        assert_eq!(
            offerings.worst_launch_price(&any, &WELL_KNOWN_LABELS),
            Some(1.5)
        );
        let od_only: Requirements = [Requirement::in_values(CAPACITY_TYPE_LABEL, ["on-demand"])]
            .into_iter()
            .collect();
        assert_eq!(
            offerings.worst_launch_price(&od_only, &WELL_KNOWN_LABELS),
            Some(3.0)
        );
        let with_reserved: Offerings = vec![
            Offering::new("a", "spot", Some(1.0), true),
            Offering::new("a", "reserved", Some(0.1), true),
        ]
        .into();
        assert_eq!(
            with_reserved.worst_launch_price(&any, &WELL_KNOWN_LABELS),
            Some(0.1)
        );
        let reserved_only: Requirements =
            [Requirement::in_values(CAPACITY_TYPE_LABEL, ["reserved"])]
                .into_iter()
                .collect();
        assert_eq!(
            offerings.worst_launch_price(&reserved_only, &WELL_KNOWN_LABELS),
            None
        );
    }

    #[test]
    fn cheapest_price_ignores_unavailable_incompatible_and_unknown() {
        let t = it(
            "m",
            vec![
                Offering::new("a", "on-demand", Some(0.5), false),
                od("a", None),
                od("b", Some(2.0)),
                od("a", Some(3.0)),
            ],
        );
        let any = Requirements::new();
        assert_eq!(t.cheapest_price(&any, &WELL_KNOWN_LABELS), Some(2.0));
        let zone_a: Requirements = [Requirement::in_values(ZONE_LABEL, ["a"])]
            .into_iter()
            .collect();
        assert_eq!(t.cheapest_price(&zone_a, &WELL_KNOWN_LABELS), Some(3.0));
        let only_unknown = it("u", vec![od("a", None)]);
        assert_eq!(only_unknown.cheapest_price(&any, &WELL_KNOWN_LABELS), None);
        assert!(only_unknown.has_available_compatible(&any, &WELL_KNOWN_LABELS));
    }

    #[test]
    fn order_by_price_puts_unknown_last_and_breaks_ties_by_name() {
        let mut types = vec![
            it("unknown-b", vec![od("a", None)]),
            it("pricey", vec![od("a", Some(5.0))]),
            it("cheap-b", vec![od("a", Some(1.0))]),
            it(
                "unavailable",
                vec![Offering::new("a", "on-demand", Some(0.01), false)],
            ),
            it("cheap-a", vec![od("a", Some(1.0))]),
            it("unknown-a", vec![od("a", None)]),
            it("zoned", vec![od("b", Some(0.5)), od("a", Some(9.0))]),
        ];
        order_by_price(&mut types, &Requirements::new(), &WELL_KNOWN_LABELS);
        assert_eq!(
            names(&types),
            [
                "zoned",
                "cheap-a",
                "cheap-b",
                "pricey",
                "unavailable",
                "unknown-a",
                "unknown-b"
            ]
        );
        // Requirements change the relevant offerings.
        let zone_a: Requirements = [Requirement::in_values(ZONE_LABEL, ["a"])]
            .into_iter()
            .collect();
        order_by_price(&mut types, &zone_a, &WELL_KNOWN_LABELS);
        assert_eq!(
            names(&types),
            [
                "cheap-a",
                "cheap-b",
                "pricey",
                "zoned",
                "unavailable",
                "unknown-a",
                "unknown-b"
            ]
        );
        // Works on references too.
        let mut refs: Vec<&InstanceType> = types.iter().rev().collect();
        order_by_price(&mut refs, &Requirements::new(), &WELL_KNOWN_LABELS);
        assert_eq!(names(&refs)[0], "zoned");
    }

    #[test]
    fn compatible_types_need_available_compatible_offering() {
        let types = vec![
            it("a-only", vec![od("a", Some(1.0))]),
            it("b-only", vec![od("b", Some(1.0))]),
            it(
                "b-down",
                vec![Offering::new("b", "on-demand", Some(1.0), false)],
            ),
        ];
        let zone_b: Requirements = [Requirement::in_values(ZONE_LABEL, ["b"])]
            .into_iter()
            .collect();
        let kept = compatible_instance_types(&types, &zone_b, &WELL_KNOWN_LABELS);
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].name(), "b-only");
    }

    fn arch_type(name: &str, arch: &str, price: f64) -> InstanceType {
        let reqs = [
            Requirement::in_values(INSTANCE_TYPE_LABEL, [name]),
            Requirement::in_values(ARCH_LABEL, [arch]),
        ]
        .into_iter()
        .collect();
        InstanceType::new(
            name,
            reqs,
            Resources::new(),
            Overhead::default(),
            vec![od("a", Some(price))],
        )
    }

    #[test]
    fn min_values_counts_distinct_values_in_order() {
        let types = vec![
            arch_type("t1", "amd64", 1.0),
            arch_type("t2", "amd64", 2.0),
            arch_type("t3", "arm64", 3.0),
        ];
        let reqs: Requirements = [
            Requirement::exists(INSTANCE_TYPE_LABEL).with_min_values(Some(2)),
            Requirement::exists(ARCH_LABEL).with_min_values(Some(2)),
        ]
        .into_iter()
        .collect();
        assert_eq!(satisfies_min_values(&types, &reqs), Ok(3));
        assert_eq!(satisfies_min_values(&types, &Requirements::new()), Ok(0));
        let err = satisfies_min_values(&types[..2], &reqs).unwrap_err();
        assert_eq!(err.unmet.get(ARCH_LABEL), Some(&(1, 2)));
        assert!(!err.unmet.contains_key(INSTANCE_TYPE_LABEL));
        assert!(err.to_string().contains("kubernetes.io/arch (1 of 2)"));
    }

    #[test]
    fn truncate_orders_keeps_n_and_reports_min_values() {
        let mut types = vec![
            arch_type("t3", "arm64", 3.0),
            arch_type("t1", "amd64", 1.0),
            arch_type("t2", "amd64", 2.0),
        ];
        let reqs: Requirements = [Requirement::exists(ARCH_LABEL).with_min_values(Some(2))]
            .into_iter()
            .collect();
        let err = truncate(&mut types, &reqs, &WELL_KNOWN_LABELS, 2).unwrap_err();
        assert_eq!(names(&types), ["t1", "t2"]);
        assert!(err.unmet.contains_key(ARCH_LABEL));
        let mut types = vec![arch_type("t3", "arm64", 3.0), arch_type("t1", "amd64", 1.0)];
        assert!(truncate(&mut types, &reqs, &WELL_KNOWN_LABELS, 600).is_ok());
        assert_eq!(names(&types), ["t1", "t3"]);
    }

    #[test]
    fn permutation_is_applied_correctly() {
        let mut v = vec!['a', 'b', 'c', 'd', 'e'];
        apply_permutation(&mut v, vec![3, 0, 4, 1, 2]);
        assert_eq!(v, ['d', 'a', 'e', 'b', 'c']);
    }
}
