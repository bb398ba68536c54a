//! Indexes over a pool's instance types that answer "which types (and offerings) are
//! compatible with these requirements?" without comparing every type's requirements.
//!
//! ## Instance-type requirements by class
//!
//! Hundreds of instance types share most of their requirements (the same architectures,
//! operating systems, zones, capacity types); they differ on a few keys such as the type's
//! name or size. [`TypeClasses`] groups the types, key by key, by identical requirement, so
//! checking a claim's requirements against all types costs one overlap test per distinct
//! requirement instead of one per type.
//!
//! ## Offering compatibility by bit masks
//!
//! Almost every offering requires exactly its zone and capacity type. For such an offering,
//! compatibility with a claim's requirements only asks whether the claim admits that zone
//! and that capacity type — two answers that are the same for every instance type. The
//! table numbers the distinct zones and capacity types of a pool's offerings once, a claim's
//! requirements become two masks ([`OfferingFilter`]), and each offering is then checked
//! with two bit tests instead of two requirement lookups. Offerings with further
//! requirements (e.g. a reservation ID) are checked the general way.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use crate::hash::FxHasher;

use crate::instance_type::{InstanceType, Offering};
use crate::labels::{CAPACITY_TYPE_LABEL, ZONE_LABEL};
use crate::requirements::{KeySet, Requirement, Requirements};

/// For each key some instance type defines: the distinct requirements on it and which
/// types (by index) carry each.
#[derive(Debug, Clone, Default)]
pub(crate) struct TypeClasses {
    count: usize,
    keys: Vec<KeyClasses>,
}

#[derive(Debug, Clone)]
struct KeyClasses {
    key: String,
    /// Distinct requirements on the key and the types carrying them.
    classes: Vec<(Requirement, Vec<u32>)>,
}

impl TypeClasses {
    /// Groups `types` key by key.
    pub(crate) fn new(types: &[InstanceType]) -> Self {
        let mut keys: Vec<KeyClasses> = Vec::new();
        // Class numbers by the requirement's fingerprint (computed when the instance type was
        // built; requirements carry their key, and a 64-bit SipHash fingerprint stands for
        // the requirement). The classes keep first-seen order.
        let mut numbers: HashMap<u64, (usize, usize), BuildHasherDefault<FxHasher>> =
            HashMap::default();
        for (t, it) in types.iter().enumerate() {
            for (r, &fingerprint) in it.requirements().iter().zip(it.requirement_fingerprints()) {
                if let Some(&(k, c)) = numbers.get(&fingerprint) {
                    debug_assert_eq!(keys[k].classes[c].0, *r, "fingerprint collision");
                    keys[k].classes[c].1.push(t as u32);
                    continue;
                }
                let k = match keys.iter().position(|k| k.key == r.key()) {
                    Some(k) => k,
                    None => {
                        keys.push(KeyClasses {
                            key: r.key().to_owned(),
                            classes: Vec::new(),
                        });
                        keys.len() - 1
                    }
                };
                keys[k].classes.push((r.clone(), vec![t as u32]));
                numbers.insert(fingerprint, (k, keys[k].classes.len() - 1));
            }
        }
        TypeClasses {
            count: types.len(),
            keys,
        }
    }

    /// Per type index: whether its requirements intersect `requirements` (what
    /// [`Requirements::is_intersecting`] says of each type).
    pub(crate) fn intersecting(&self, requirements: &Requirements) -> Vec<bool> {
        let mut out = vec![true; self.count];
        for key in &self.keys {
            let Some(existing) = requirements.get(&key.key) else {
                continue;
            };
            for (class, members) in &key.classes {
                if existing.overlaps(class) || (class.accepts_absent() && existing.accepts_absent())
                {
                    continue;
                }
                for &t in members {
                    out[t as usize] = false;
                }
            }
        }
        out
    }
}

/// Bits available per mask.
const MAX_VALUES: usize = 64;

/// One offering, numbered.
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Zone number.
    zone: u8,
    /// Capacity-type number.
    capacity_type: u8,
    /// Whether the offering requires more than its zone and capacity type.
    general: bool,
}

/// The zones and capacity types of a list of instance types' offerings, numbered.
#[derive(Debug, Clone, Default)]
pub(crate) struct OfferingTable {
    /// Distinct zones: fingerprint and name.
    zones: Vec<(u64, String)>,
    /// Distinct capacity types: fingerprint and name.
    capacity_types: Vec<(u64, String)>,
    /// Every type's offerings, type after type, in [`InstanceType::offerings`] order.
    entries: Vec<Entry>,
    /// Where each type's entries start in `entries`.
    starts: Vec<usize>,
}

/// What one set of requirements admits, as masks over an [`OfferingTable`]'s numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OfferingFilter {
    zones: u64,
    capacity_types: u64,
}

fn number(values: &mut Vec<(u64, String)>, fingerprint: u64, value: &str) -> Option<u8> {
    match values.iter().position(|(f, _)| *f == fingerprint) {
        Some(i) => Some(i as u8),
        None if values.len() < MAX_VALUES => {
            values.push((fingerprint, value.to_owned()));
            Some((values.len() - 1) as u8)
        }
        None => None,
    }
}

impl OfferingTable {
    /// Numbers the offerings of `types`. Offerings beyond 64 distinct zones or capacity
    /// types are marked general (checked without the masks).
    pub(crate) fn new(types: &[InstanceType]) -> Self {
        let mut table = OfferingTable {
            starts: Vec::with_capacity(types.len()),
            ..Default::default()
        };
        for t in types {
            table.starts.push(table.entries.len());
            for o in t.offerings().iter() {
                let (zone_fingerprint, capacity_type_fingerprint) = o.fingerprints();
                let zone = number(&mut table.zones, zone_fingerprint, o.zone());
                let capacity_type = number(
                    &mut table.capacity_types,
                    capacity_type_fingerprint,
                    o.capacity_type(),
                );
                table.entries.push(Entry {
                    zone: zone.unwrap_or(0),
                    capacity_type: capacity_type.unwrap_or(0),
                    general: zone.is_none()
                        || capacity_type.is_none()
                        || o.requirements().len() != 2,
                });
            }
        }
        table
    }

    /// The masks of what `requirements` admit (a key they leave undefined admits every
    /// value if `well_known` allows it undefined, as [`Requirements::is_compatible`] does).
    pub(crate) fn filter<K: KeySet + ?Sized>(
        &self,
        requirements: &Requirements,
        well_known: &K,
    ) -> OfferingFilter {
        let mask = |key: &str, values: &[(u64, String)]| {
            let requirement = requirements.get(key);
            let undefined_ok = requirement.is_none() && well_known.contains_key(key);
            values.iter().enumerate().fold(0u64, |mask, (i, (_, v))| {
                let admitted = match requirement {
                    Some(r) => r.has(v),
                    None => undefined_ok,
                };
                if admitted { mask | 1 << i } else { mask }
            })
        };
        OfferingFilter {
            zones: mask(ZONE_LABEL, &self.zones),
            capacity_types: mask(CAPACITY_TYPE_LABEL, &self.capacity_types),
        }
    }

    /// Whether offering `o` (number `index` of type number `t`) is compatible with the
    /// requirements `filter` was made from.
    pub(crate) fn is_compatible<K: KeySet + ?Sized>(
        &self,
        t: usize,
        index: usize,
        o: &Offering,
        filter: OfferingFilter,
        requirements: &Requirements,
        well_known: &K,
    ) -> bool {
        let e = self.entries[self.starts[t] + index];
        if e.general {
            return o.is_compatible(requirements, well_known);
        }
        filter.zones & (1 << e.zone) != 0 && filter.capacity_types & (1 << e.capacity_type) != 0
    }

    /// The distinct capacity types, by number.
    pub(crate) fn capacity_type_names(&self) -> impl Iterator<Item = &str> {
        self.capacity_types.iter().map(|(_, name)| name.as_str())
    }

    /// [`available_compatible`](Self::available_compatible), each offering with its
    /// capacity type's number (`None` beyond the 64 numbered ones).
    pub(crate) fn available_compatible_numbered<'a, K: KeySet + ?Sized>(
        &'a self,
        t: usize,
        it: &'a InstanceType,
        filter: OfferingFilter,
        requirements: &'a Requirements,
        well_known: &'a K,
    ) -> impl Iterator<Item = (&'a Offering, Option<u8>)> + 'a {
        let start = self.starts[t];
        it.offerings()
            .iter()
            .enumerate()
            .filter(move |(i, o)| {
                o.available() && self.is_compatible(t, *i, o, filter, requirements, well_known)
            })
            .map(move |(i, o)| {
                let e = self.entries[start + i];
                let number = if e.general {
                    self.capacity_types
                        .iter()
                        .position(|(_, n)| n == o.capacity_type())
                        .map(|n| n as u8)
                } else {
                    Some(e.capacity_type)
                };
                (o, number)
            })
    }

    /// The available offerings of type number `t` (`it`) compatible with the requirements
    /// `filter` was made from.
    pub(crate) fn available_compatible<'a, K: KeySet + ?Sized>(
        &'a self,
        t: usize,
        it: &'a InstanceType,
        filter: OfferingFilter,
        requirements: &'a Requirements,
        well_known: &'a K,
    ) -> impl Iterator<Item = &'a Offering> + 'a {
        self.available_compatible_numbered(t, it, filter, requirements, well_known)
            .map(|(o, _)| o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instance_type::{Offering, Overhead};
    use crate::labels::{LabelPolicy, WELL_KNOWN_LABELS};
    use crate::requirements::{NO_KEYS, Requirement};
    use crate::resources::Resources;

    fn types() -> Vec<InstanceType> {
        let offerings = vec![
            Offering::new("a", "spot", Some(1.0), true),
            Offering::new("b", "on-demand", Some(2.0), true),
            Offering::new("c", "reserved", Some(0.5), true)
                .with_requirement(Requirement::in_values("example.com/reservation", ["r1"])),
        ];
        vec![InstanceType::new(
            "t",
            Requirements::new(),
            Resources::new(),
            Overhead::default(),
            offerings,
        )]
    }

    /// Class-wise intersection agrees with the per-type check.
    #[test]
    fn classes_agree_with_the_per_type_check() {
        let input = crate::scheduling::benchmark_cluster(30);
        let types = &input.nodepools[0].instance_types;
        let classes = TypeClasses::new(types);
        let cases: Vec<Requirements> = vec![
            Requirements::new(),
            [Requirement::in_values(
                crate::labels::INSTANCE_TYPE_LABEL,
                ["fake-it-3", "fake-it-7"],
            )]
            .into_iter()
            .collect(),
            [Requirement::not_in(
                crate::labels::INSTANCE_TYPE_LABEL,
                ["fake-it-3"],
            )]
            .into_iter()
            .collect(),
            [Requirement::in_values(ZONE_LABEL, ["test-zone-9"])]
                .into_iter()
                .collect(),
            [Requirement::does_not_exist(crate::labels::ARCH_LABEL)]
                .into_iter()
                .collect(),
        ];
        let mut compatible = 0;
        for requirements in &cases {
            let got = classes.intersecting(requirements);
            for (t, it) in types.iter().enumerate() {
                assert_eq!(
                    got[t],
                    it.requirements().is_intersecting(requirements),
                    "{requirements:?} {}",
                    it.name()
                );
                compatible += usize::from(got[t]);
            }
        }
        assert!(compatible > 30 && compatible < 150, "{compatible}");
    }

    /// The masks agree with the general check for every offering, under requirements that
    /// pin, exclude or leave undefined the zone and capacity type.
    #[test]
    fn masks_agree_with_the_general_check() {
        let types = types();
        let table = OfferingTable::new(&types);
        let policy = LabelPolicy::default();
        let cases: Vec<Requirements> = vec![
            Requirements::new(),
            [Requirement::in_values(ZONE_LABEL, ["a"])]
                .into_iter()
                .collect(),
            [Requirement::not_in(ZONE_LABEL, ["a"])]
                .into_iter()
                .collect(),
            [Requirement::in_values(
                CAPACITY_TYPE_LABEL,
                ["on-demand", "reserved"],
            )]
            .into_iter()
            .collect(),
            [
                Requirement::in_values(ZONE_LABEL, ["c"]),
                Requirement::in_values("example.com/reservation", ["r2"]),
            ]
            .into_iter()
            .collect(),
            [Requirement::does_not_exist(ZONE_LABEL)]
                .into_iter()
                .collect(),
        ];
        let mut compatible = 0;
        for requirements in &cases {
            let filter = table.filter(requirements, &policy);
            let filter_none = table.filter(requirements, &NO_KEYS);
            for (i, o) in types[0].offerings().iter().enumerate() {
                let expected = o.is_compatible(requirements, &policy);
                assert_eq!(
                    table.is_compatible(0, i, o, filter, requirements, &policy),
                    expected,
                    "{requirements:?} {o:?}"
                );
                compatible += usize::from(expected);
                let expected = o.is_compatible(requirements, &NO_KEYS);
                assert_eq!(
                    table.is_compatible(0, i, o, filter_none, requirements, &NO_KEYS),
                    expected
                );
                let expected = o.is_compatible(requirements, &WELL_KNOWN_LABELS);
                let filter_wk = table.filter(requirements, &WELL_KNOWN_LABELS);
                assert_eq!(
                    table.is_compatible(0, i, o, filter_wk, requirements, &WELL_KNOWN_LABELS),
                    expected
                );
            }
        }
        assert!(
            compatible > 3,
            "some offerings are compatible: {compatible}"
        );
    }
}
