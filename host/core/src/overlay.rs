//! NodeOverlays (`karpenter.sh/v1alpha1`): operator adjustments to the instance types a
//! NodePool simulates with — a price (absolute, or changed by an amount or a percentage) and
//! extra extended resources — applied before scheduling.
//!
//! Matching follows upstream: an overlay applies to an offering of an instance type in a
//! NodePool when its requirements are compatible with the type's requirements, the offering's
//! zone and capacity type, and the NodePool's template requirements and labels (keys none of
//! them define match only `NotIn`/`DoesNotExist`). Overlays are taken by weight, heaviest
//! first, ties by name descending; the first price overlay that matches an offering sets its
//! price, and the first capacity overlay that matches a type adds its resources. Types changed
//! by an overlay are marked, so NodeClaims launched from them carry upstream's
//! `karpenter.sh/price-overlay-applied` / `karpenter.sh/capacity-overlay-applied` annotations.

use crate::instance_type::InstanceType;
use crate::requirements::{NO_KEYS, Requirements};
use crate::resources::Resources;

/// A NodeOverlay that cannot be used; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("NodeOverlay {name}: {message}")]
pub struct OverlayError {
    /// The overlay's name.
    pub name: String,
    /// What is wrong, naming the field.
    pub message: String,
}

/// How an overlay changes a price.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PriceChange {
    /// `spec.price`: the new price.
    Set(f64),
    /// `spec.priceAdjustment` `+x` / `-x`: added to the price.
    Add(f64),
    /// `spec.priceAdjustment` `+x%` / `-x%`: the price changes by this percentage.
    Percent(f64),
}

impl PriceChange {
    /// Parses `spec.price` (`price`) or `spec.priceAdjustment` (`adjustment`); at most one may
    /// be given.
    pub fn parse(
        price: Option<&str>,
        adjustment: Option<&str>,
    ) -> Result<Option<PriceChange>, String> {
        let number = |s: &str, field: &str| {
            s.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| format!("spec.{field}: {s:?} is not a number"))
        };
        match (price, adjustment) {
            (Some(_), Some(_)) => {
                Err("spec.price and spec.priceAdjustment cannot both be set".into())
            }
            (Some(p), None) => {
                let v = number(p, "price")?;
                if v < 0.0 {
                    return Err(format!("spec.price: {p:?} must not be negative"));
                }
                Ok(Some(PriceChange::Set(v)))
            }
            (None, Some(a)) => {
                if !(a.starts_with('+') || a.starts_with('-')) {
                    return Err(format!(
                        "spec.priceAdjustment: {a:?} must start with + or -"
                    ));
                }
                match a.strip_suffix('%') {
                    Some(percent) => {
                        let v = number(percent, "priceAdjustment")?;
                        if v < -100.0 {
                            return Err(format!("spec.priceAdjustment: {a:?} is below -100%"));
                        }
                        Ok(Some(PriceChange::Percent(v)))
                    }
                    None => Ok(Some(PriceChange::Add(number(a, "priceAdjustment")?))),
                }
            }
            (None, None) => Ok(None),
        }
    }

    /// The changed price, never below zero.
    pub fn apply(self, price: f64) -> f64 {
        let changed = match self {
            PriceChange::Set(v) => v,
            PriceChange::Add(v) => price + v,
            PriceChange::Percent(v) => price * (1.0 + v / 100.0),
        };
        changed.max(0.0)
    }
}

/// One NodeOverlay, as the core uses it.
#[derive(Debug, Clone, PartialEq)]
pub struct Overlay {
    /// `metadata.name`.
    pub name: String,
    /// `spec.weight` (absent = 0).
    pub weight: i32,
    /// `spec.requirements`.
    pub requirements: Requirements,
    /// `spec.price` or `spec.priceAdjustment`.
    pub price: Option<PriceChange>,
    /// `spec.capacity`: extended resources to add (standard resources are refused).
    pub capacity: Resources,
}

impl Overlay {
    /// Checks what the CRD's validation also checks (so a snapshot or an old object cannot
    /// slip past): capacity holds only extended resources.
    pub fn validate(&self) -> Result<(), OverlayError> {
        let standard = self.capacity.cpu_millis
            + self.capacity.memory_bytes
            + self.capacity.ephemeral_storage_bytes
            + self.capacity.pods;
        if standard > 0 {
            return Err(OverlayError {
                name: self.name.clone(),
                message: "spec.capacity: cpu, memory, ephemeral-storage and pods cannot be overlaid; only extended resources".into(),
            });
        }
        Ok(())
    }
}

/// Overlays in precedence order: heaviest first, ties by name descending.
fn ordered(overlays: &[Overlay]) -> Vec<&Overlay> {
    let mut out: Vec<&Overlay> = overlays.iter().collect();
    out.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| b.name.cmp(&a.name)));
    out
}

/// The instance types of a NodePool whose template requirements (with its labels and the
/// nodepool label) are `pool`, after `overlays`. Types no overlay matches come back
/// unchanged.
pub fn apply_overlays(
    types: &[InstanceType],
    pool: &Requirements,
    overlays: &[Overlay],
) -> Vec<InstanceType> {
    if overlays.is_empty() {
        return types.to_vec();
    }
    let order = ordered(overlays);
    let prices: Vec<&Overlay> = order
        .iter()
        .copied()
        .filter(|o| o.price.is_some())
        .collect();
    let capacities: Vec<&Overlay> = order
        .iter()
        .copied()
        .filter(|o| !o.capacity.is_zero())
        .collect();
    types
        .iter()
        .map(|t| {
            let base = t.requirements().intersection(pool);
            let capacity = capacities
                .iter()
                .find(|o| base.is_compatible(&o.requirements, &NO_KEYS));
            let mut out = match capacity {
                Some(o) => {
                    let mut grown = t.capacity().clone();
                    grown += &o.capacity;
                    let mut c = InstanceType::new(
                        t.name(),
                        t.requirements().clone(),
                        grown,
                        t.overhead().clone(),
                        t.offerings().clone(),
                    );
                    c.mark_overlaid(t.price_overlaid(), true);
                    c
                }
                None => t.clone(),
            };
            let mut price_applied = out.price_overlaid();
            for offering in out.offerings_mut().0.iter_mut() {
                let labels = base.intersection(offering.requirements());
                if let Some(change) = prices
                    .iter()
                    .find(|o| labels.is_compatible(&o.requirements, &NO_KEYS))
                    .and_then(|o| o.price)
                    && let Some(price) = offering.price()
                {
                    offering.set_price(Some(change.apply(price)));
                    price_applied = true;
                }
            }
            let capacity_applied = out.capacity_overlaid();
            out.mark_overlaid(price_applied, capacity_applied);
            out
        })
        .collect()
}

/// The overlays (in precedence order) that conflict: two price overlays, or two capacity
/// overlays adding the same resource, of equal weight whose requirements can match the same
/// type. Upstream marks such overlays `ValidationSucceeded=False`; the pair's names are given.
pub fn conflicts(overlays: &[Overlay]) -> Vec<(String, String)> {
    let order = ordered(overlays);
    let mut out = Vec::new();
    for (i, a) in order.iter().enumerate() {
        for b in &order[i + 1..] {
            if a.weight != b.weight || !a.requirements.is_intersecting(&b.requirements) {
                continue;
            }
            let both_price = a.price.is_some() && b.price.is_some();
            let shared_resource = a
                .capacity
                .extended()
                .any(|(name, _)| b.capacity.get(name) > 0);
            if both_price || shared_resource {
                out.push((a.name.clone(), b.name.clone()));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instance_type::{Offering, Overhead};
    use crate::labels::{CAPACITY_TYPE_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL, ZONE_LABEL};
    use crate::requirements::Requirement;

    fn itype(name: &str) -> InstanceType {
        let requirements: Requirements = [
            Requirement::in_values(INSTANCE_TYPE_LABEL, [name]),
            Requirement::in_values(ZONE_LABEL, ["a", "b"]),
            Requirement::in_values(CAPACITY_TYPE_LABEL, ["spot", "on-demand"]),
        ]
        .into_iter()
        .collect();
        let offerings = vec![
            Offering::new("a", "spot", Some(1.0), true),
            Offering::new("b", "on-demand", Some(2.0), true),
        ];
        InstanceType::new(
            name,
            requirements,
            Resources::new().with("cpu", 2000),
            Overhead::default(),
            offerings,
        )
    }

    fn overlay(name: &str, weight: i32, requirements: Vec<Requirement>) -> Overlay {
        Overlay {
            name: name.into(),
            weight,
            requirements: requirements.into_iter().collect(),
            price: None,
            capacity: Resources::new(),
        }
    }

    fn pool() -> Requirements {
        [
            Requirement::in_values(NODEPOOL_LABEL, ["default"]),
            Requirement::in_values("team", ["ml"]),
        ]
        .into_iter()
        .collect()
    }

    fn prices(t: &InstanceType) -> Vec<Option<f64>> {
        t.offerings().iter().map(|o| o.price()).collect()
    }

    #[test]
    fn price_changes_parse_and_apply() {
        assert_eq!(
            PriceChange::parse(Some("0.5"), None).unwrap(),
            Some(PriceChange::Set(0.5))
        );
        assert_eq!(
            PriceChange::parse(None, Some("+10%"))
                .unwrap()
                .unwrap()
                .apply(2.0),
            2.2
        );
        assert_eq!(
            PriceChange::parse(None, Some("-0.5"))
                .unwrap()
                .unwrap()
                .apply(0.2),
            0.0,
            "never below zero"
        );
        assert_eq!(
            PriceChange::parse(None, Some("-100%"))
                .unwrap()
                .unwrap()
                .apply(3.0),
            0.0
        );
        assert!(
            PriceChange::parse(Some("1"), Some("+1"))
                .unwrap_err()
                .contains("cannot both")
        );
        assert!(
            PriceChange::parse(None, Some("10%"))
                .unwrap_err()
                .contains("spec.priceAdjustment")
        );
        assert!(PriceChange::parse(None, Some("-150%")).is_err());
        assert!(
            PriceChange::parse(Some("cheap"), None)
                .unwrap_err()
                .contains("spec.price")
        );
    }

    #[test]
    fn the_heaviest_matching_overlay_sets_each_offering_price() {
        let types = vec![itype("m1"), itype("m2")];
        let mut spot = overlay(
            "spot-discount",
            10,
            vec![Requirement::in_values(CAPACITY_TYPE_LABEL, ["spot"])],
        );
        spot.price = Some(PriceChange::Percent(-50.0));
        let mut m1 = overlay(
            "m1-fixed",
            5,
            vec![Requirement::in_values(INSTANCE_TYPE_LABEL, ["m1"])],
        );
        m1.price = Some(PriceChange::Set(9.0));
        let out = apply_overlays(&types, &pool(), &[m1, spot]);
        // m1: spot offering takes the heavier overlay (-50%), on-demand the m1 one.
        assert_eq!(prices(&out[0]), [Some(0.5), Some(9.0)]);
        assert_eq!(prices(&out[1]), [Some(0.5), Some(2.0)]);
        assert!(out[0].price_overlaid() && out[1].price_overlaid());
        assert!(!out[0].capacity_overlaid());
    }

    #[test]
    fn overlays_match_nodepool_labels_and_not_undefined_keys() {
        let types = vec![itype("m1")];
        let mut team = overlay("ml-team", 1, vec![Requirement::in_values("team", ["ml"])]);
        team.price = Some(PriceChange::Add(1.0));
        let mut other = overlay(
            "gpu-only",
            2,
            vec![Requirement::in_values("example.com/gpu", ["true"])],
        );
        other.price = Some(PriceChange::Set(0.0));
        let out = apply_overlays(&types, &pool(), &[team.clone(), other]);
        assert_eq!(
            prices(&out[0]),
            [Some(2.0), Some(3.0)],
            "the undefined gpu key does not match"
        );
        let untouched = apply_overlays(&types, &Requirements::new(), &[team]);
        assert_eq!(prices(&untouched[0]), [Some(1.0), Some(2.0)]);
        assert!(!untouched[0].price_overlaid());
    }

    #[test]
    fn capacity_overlays_add_extended_resources() {
        let types = vec![itype("m1"), itype("m2")];
        let mut gpu = overlay(
            "m2-gpu",
            1,
            vec![Requirement::in_values(INSTANCE_TYPE_LABEL, ["m2"])],
        );
        gpu.capacity = Resources::new().with("nvidia.com/gpu", 4);
        let out = apply_overlays(&types, &pool(), &[gpu]);
        assert_eq!(out[0].capacity().get("nvidia.com/gpu"), 0);
        assert_eq!(out[1].capacity().get("nvidia.com/gpu"), 4);
        assert_eq!(out[1].allocatable().get("nvidia.com/gpu"), 4);
        assert!(out[1].capacity_overlaid() && !out[1].price_overlaid());
    }

    #[test]
    fn standard_resources_and_equal_weight_conflicts_are_reported() {
        let mut bad = overlay("bad", 1, vec![]);
        bad.capacity = Resources::new().with("cpu", 1000);
        assert!(
            bad.validate()
                .unwrap_err()
                .to_string()
                .contains("NodeOverlay bad: spec.capacity")
        );
        let mut a = overlay("a", 3, vec![Requirement::in_values(ZONE_LABEL, ["a"])]);
        a.price = Some(PriceChange::Set(1.0));
        let mut b = overlay("b", 3, vec![Requirement::exists(ZONE_LABEL)]);
        b.price = Some(PriceChange::Set(2.0));
        let mut c = overlay("c", 4, vec![]);
        c.price = Some(PriceChange::Set(3.0));
        assert_eq!(conflicts(&[a, b, c]), [("b".to_owned(), "a".to_owned())]);
    }
}
