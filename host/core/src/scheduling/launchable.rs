//! Whether a NodePool can launch anything at all: its requirements against its NodeClass's
//! instance types, with no pod in sight. A pool whose requirements rule out every instance
//! type or every offering (`karpenter.sh/capacity-type In [ondemand]`, a zone the cloud does
//! not have) is misconfigured: it would only show when a pod stays pending. The NodePool
//! status controller asks this on every refresh and reports the answer as a condition.
//!
//! Availability is deliberately ignored: an offering that is out of capacity for a while is
//! the cloud's state, not a mistake in the NodePool, and must not flip the pool's readiness.

use std::collections::BTreeSet;

use crate::instance_type::InstanceType;
use crate::requirements::{KeySet, Requirement, Requirements};

/// Why no instance type can be launched for a NodePool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NothingLaunchable {
    /// How many instance types the NodeClass offers.
    pub instance_types: usize,
    /// The pool's requirements that each, alone, leave nothing, with the values the instance
    /// types and their offerings have for that key (empty when none defines it). Empty when
    /// only their combination leaves nothing.
    pub culprits: Vec<(Requirement, BTreeSet<String>)>,
}

impl std::fmt::Display for NothingLaunchable {
    /// What is wrong and how to fix it, for a condition message, an event and a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.instance_types == 0 {
            return write!(
                f,
                "its NodeClass offers no instance types; check the NodeClass and its cloud plugin"
            );
        }
        if self.culprits.is_empty() {
            return write!(
                f,
                "spec.template.spec.requirements together leave none of the NodeClass's {} instance types with a compatible offering; loosen one of them",
                self.instance_types
            );
        }
        let parts: Vec<String> = self
            .culprits
            .iter()
            .map(|(requirement, offered)| {
                let offered = if offered.is_empty() {
                    "no instance type defines this key".to_string()
                } else {
                    let mut values: Vec<&str> =
                        offered.iter().map(String::as_str).take(10).collect();
                    if offered.len() > 10 {
                        values.push("…");
                    }
                    format!("the instance types offer {}", values.join(", "))
                };
                format!(
                    "`{requirement}` matches none of the NodeClass's {} instance types ({offered})",
                    self.instance_types
                )
            })
            .collect();
        write!(
            f,
            "spec.template.spec.requirements: {}; fix the requirement's values",
            parts.join("; ")
        )
    }
}

/// Whether `instance_type` and one of its offerings (available or not) are compatible with
/// `requirements`.
fn launchable<K: KeySet + ?Sized>(
    instance_type: &InstanceType,
    requirements: &Requirements,
    well_known: &K,
) -> bool {
    // The keys an offering defines (zone, capacity type) are judged on the offerings alone:
    // the type's own requirements list only the available ones.
    let offering_keys: BTreeSet<&str> = instance_type
        .offerings()
        .into_iter()
        .flat_map(|o| o.requirements().keys())
        .collect();
    let type_side: Requirements = requirements
        .iter()
        .filter(|r| !offering_keys.contains(r.key()))
        .cloned()
        .collect();
    instance_type.requirements().is_intersecting(&type_side)
        && instance_type
            .offerings()
            .has_compatible(requirements, well_known)
}

/// `Ok(n)`: `n` of `types` can be launched under `requirements` (a NodePool's), `n > 0`.
/// `Err`: none can, and why. Keys in `well_known` may be left undefined by an offering, as in
/// the scheduler.
pub fn launchable_types<K: KeySet + ?Sized>(
    requirements: &Requirements,
    types: &[InstanceType],
    well_known: &K,
) -> Result<usize, NothingLaunchable> {
    let count = types
        .iter()
        .filter(|t| launchable(t, requirements, well_known))
        .count();
    if count > 0 {
        return Ok(count);
    }
    let culprits = requirements
        .iter()
        .filter(|requirement| {
            let mut alone = Requirements::new();
            alone.add((*requirement).clone());
            !types.iter().any(|t| launchable(t, &alone, well_known))
        })
        .map(|requirement| {
            (
                requirement.clone(),
                offered_values(types, requirement.key()),
            )
        })
        .collect();
    Err(NothingLaunchable {
        instance_types: types.len(),
        culprits,
    })
}

/// The values the instance types and their offerings give `key`.
fn offered_values(types: &[InstanceType], key: &str) -> BTreeSet<String> {
    let mut values = BTreeSet::new();
    for t in types {
        let sources = std::iter::once(t.requirements())
            .chain(t.offerings().into_iter().map(|o| o.requirements()));
        for requirements in sources {
            if let Some(r) = requirements.get(key)
                && !r.is_complement()
            {
                values.extend(r.values().iter().cloned());
            }
        }
    }
    values
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instance_type::Offering;
    use crate::labels::{CAPACITY_TYPE_LABEL, LabelPolicy, ZONE_LABEL};
    use crate::resources::Resources;

    fn catalog() -> Vec<InstanceType> {
        ["small", "large"]
            .into_iter()
            .map(|name| {
                InstanceType::new(
                    name,
                    Requirements::new(),
                    Resources::default(),
                    Default::default(),
                    vec![
                        Offering::new("zone-a", "on-demand", Some(1.0), true),
                        Offering::new("zone-b", "spot", Some(0.5), false),
                    ],
                )
                .with_offering_requirements()
            })
            .collect()
    }

    fn pool(requirements: &[Requirement]) -> Requirements {
        let mut out = Requirements::new();
        for r in requirements {
            out.add(r.clone());
        }
        out
    }

    #[test]
    fn a_pool_that_matches_some_offering_is_launchable_even_when_it_is_out_of_capacity() {
        let policy = LabelPolicy::default();
        let types = catalog();
        assert_eq!(
            launchable_types(&Requirements::new(), &types, &policy),
            Ok(2)
        );
        // zone-b's only offering is unavailable now: still launchable, not misconfigured.
        let spot = pool(&[Requirement::in_values(CAPACITY_TYPE_LABEL, ["spot"])]);
        assert_eq!(launchable_types(&spot, &types, &policy), Ok(2));
    }

    #[test]
    fn a_misspelt_value_is_named_with_the_values_offered() {
        let policy = LabelPolicy::default();
        let typo = pool(&[
            Requirement::in_values(CAPACITY_TYPE_LABEL, ["ondemand"]),
            Requirement::in_values(ZONE_LABEL, ["zone-a"]),
        ]);
        let e = launchable_types(&typo, &catalog(), &policy).unwrap_err();
        assert_eq!(e.instance_types, 2);
        assert_eq!(e.culprits.len(), 1);
        let text = e.to_string();
        assert!(
            text.contains("karpenter.sh/capacity-type In [ondemand]")
                && text.contains("the instance types offer on-demand, spot")
                && text.starts_with("spec.template.spec.requirements:"),
            "{text}"
        );
    }

    #[test]
    fn requirements_that_only_conflict_together_are_reported_as_a_combination() {
        let policy = LabelPolicy::default();
        // On-demand exists only in zone-a, spot only in zone-b.
        let together = pool(&[
            Requirement::in_values(CAPACITY_TYPE_LABEL, ["spot"]),
            Requirement::in_values(ZONE_LABEL, ["zone-a"]),
        ]);
        let e = launchable_types(&together, &catalog(), &policy).unwrap_err();
        assert!(e.culprits.is_empty());
        assert!(e.to_string().contains("together"), "{e}");
        let e = launchable_types(&Requirements::new(), &[], &policy).unwrap_err();
        assert!(e.to_string().contains("offers no instance types"), "{e}");
    }
}
