//! Choosing what to launch: matching a NodeClaim's requirements and resource requests
//! against the simulated cloud's catalog, cheapest offering first.
//!
//! Everything here is pure (no host calls), so it is unit-tested natively.

use std::collections::BTreeMap;

use joinery_plugin_sdk::cloud::{Requirement, Resource};
use joinery_plugin_sdk::requirements::LabelRequirement;
use serde::{Deserialize, Serialize};

/// Zone label.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// Capacity-type label.
pub const CAPACITY_TYPE_LABEL: &str = "karpenter.sh/capacity-type";
/// The simulated cloud's label domain; a key in it that a type lacks counts as absent.
pub const SIMCLOUD_PREFIX: &str = "simcloud.joinery.dev/";
/// Labels every instance type defines; a requirement on them is always evaluated.
const TYPE_KEYS: [&str; 3] = [
    "node.kubernetes.io/instance-type",
    "kubernetes.io/arch",
    "kubernetes.io/os",
];

/// At most this many launch options go into one create call.
pub const MAX_CANDIDATES: usize = 100;

/// An instance type as `GET /v1/instance-types` describes it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct CatalogType {
    /// Name.
    pub name: String,
    /// Capacity as resource name → quantity.
    pub capacity: BTreeMap<String, String>,
    /// Kubelet reservations.
    pub overhead: CatalogOverhead,
    /// Capacity minus overhead.
    pub allocatable: BTreeMap<String, String>,
    /// The type's labels (arch, os, instance type, `simcloud.joinery.dev/*`, custom ones).
    pub labels: BTreeMap<String, String>,
    /// Priced offerings.
    pub offerings: Vec<CatalogOffering>,
}

/// Overhead of a [`CatalogType`].
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct CatalogOverhead {
    /// `kube-reserved`.
    pub kube_reserved: BTreeMap<String, String>,
    /// `system-reserved`.
    pub system_reserved: BTreeMap<String, String>,
    /// Hard eviction thresholds.
    pub eviction_threshold: BTreeMap<String, String>,
}

/// An offering of a [`CatalogType`].
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct CatalogOffering {
    /// Zone.
    pub zone: String,
    /// `on-demand`, `spot` or `reserved`.
    pub capacity_type: String,
    /// Price per hour.
    pub price: f64,
    /// Whether the cloud lists it as available.
    pub available: bool,
}

/// One launch option sent to `POST /v1/instances`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    /// Instance type.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// Capacity type.
    pub capacity_type: String,
    /// Price per hour (not sent: the cloud prices by itself).
    #[serde(skip)]
    pub price: f64,
}

/// What the NodeClass allows, independent of any claim.
#[derive(Clone, Copy, Debug, Default)]
pub struct ClassFilter<'a> {
    /// Zones the NodeClass restricts launches to (`None`: every zone).
    pub zones: Option<&'a [String]>,
    /// Instance types the NodeClass allows (`None`: every type).
    pub instance_types: Option<&'a [String]>,
}

impl ClassFilter<'_> {
    /// Whether the NodeClass allows this type at all.
    pub fn allows_type(&self, name: &str) -> bool {
        self.instance_types
            .is_none_or(|allowed| allowed.iter().any(|a| a == name))
    }

    /// Whether the NodeClass allows launching in `zone`.
    pub fn allows_zone(&self, zone: &str) -> bool {
        self.zones
            .is_none_or(|allowed| allowed.iter().any(|z| z == zone))
    }
}

/// The value a type (and, for zone and capacity type, an offering) has for `key`:
/// `Some(None)` when the type defines the key but lacks the label, `None` when the key is
/// none of the cloud's business (e.g. `karpenter.sh/nodepool` or a template label), which
/// every type satisfies.
fn lookup<'a>(
    it: &'a CatalogType,
    offering: Option<&'a CatalogOffering>,
    key: &str,
) -> Option<Option<&'a str>> {
    match (key, offering) {
        (ZONE_LABEL, Some(o)) => return Some(Some(&o.zone)),
        (CAPACITY_TYPE_LABEL, Some(o)) => return Some(Some(&o.capacity_type)),
        (ZONE_LABEL | CAPACITY_TYPE_LABEL, None) => return None,
        _ => {}
    }
    match it.labels.get(key) {
        Some(v) => Some(Some(v.as_str())),
        None if key.starts_with(SIMCLOUD_PREFIX) || TYPE_KEYS.contains(&key) => Some(None),
        None => None,
    }
}

/// Whether the type's own labels satisfy every requirement (zone and capacity type are
/// checked per offering).
pub fn type_matches(it: &CatalogType, requirements: &[Requirement]) -> bool {
    requirements.iter().all(|r| match lookup(it, None, &r.key) {
        Some(value) => r.accepts(value),
        None => true,
    })
}

/// Whether an offering satisfies the zone and capacity-type requirements.
pub fn offering_matches(
    it: &CatalogType,
    offering: &CatalogOffering,
    requirements: &[Requirement],
) -> bool {
    requirements
        .iter()
        .filter(|r| r.key == ZONE_LABEL || r.key == CAPACITY_TYPE_LABEL)
        .all(|r| r.accepts(lookup(it, Some(offering), &r.key).flatten()))
}

/// Parses a Kubernetes quantity into thousandths of a unit, rounding up
/// (`"1500m"` → 1500, `"2"` → 2000, `"1Ki"` → 1 024 000). `None` if it is not a quantity or negative.
pub fn parse_milli(quantity: &str) -> Option<u128> {
    let text = quantity.trim().strip_prefix('+').unwrap_or(quantity.trim());
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(number_end);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    // value = digits / 10^fraction_len × multiplier / divisor, in milli-units.
    let digits: u128 = format!("{whole}{fraction}").parse().ok()?;
    let mut numerator = digits;
    let mut denominator: u128 = 10u128.checked_pow(fraction.len() as u32)?;
    let binary = |power: u32| 1u128 << (10 * power);
    let decimal = |power: u32| 10u128.pow(power);
    let multiplier = match suffix {
        "m" => {
            denominator = denominator.checked_mul(1000)?;
            1
        }
        "" => 1,
        "k" => decimal(3),
        "M" => decimal(6),
        "G" => decimal(9),
        "T" => decimal(12),
        "P" => decimal(15),
        "E" => decimal(18),
        "Ki" => binary(1),
        "Mi" => binary(2),
        "Gi" => binary(3),
        "Ti" => binary(4),
        "Pi" => binary(5),
        "Ei" => binary(6),
        exp if exp.starts_with(['e', 'E']) => {
            let power: u32 = exp[1..].parse().ok()?;
            10u128.checked_pow(power)?
        }
        _ => return None,
    };
    numerator = numerator.checked_mul(multiplier)?.checked_mul(1000)?;
    Some(numerator.div_ceil(denominator))
}

/// Whether the requested resources fit the type's allocatable resources. A requested
/// resource the type does not have fits only if the request is zero.
pub fn fits(it: &CatalogType, requests: &[Resource]) -> bool {
    requests.iter().all(|r| {
        let Some(wanted) = parse_milli(&r.quantity) else {
            return false;
        };
        if wanted == 0 {
            return true;
        }
        it.allocatable
            .get(&r.name)
            .and_then(|q| parse_milli(q))
            .is_some_and(|have| have >= wanted)
    })
}

/// The launch options for a claim, cheapest first (ties keep catalog order), at most
/// [`MAX_CANDIDATES`]: every available offering, in an allowed zone, of an allowed type
/// that satisfies the requirements and fits the requests.
pub fn candidates(
    catalog: &[CatalogType],
    class: ClassFilter<'_>,
    requirements: &[Requirement],
    requests: &[Resource],
) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = catalog
        .iter()
        .filter(|it| {
            class.allows_type(&it.name) && type_matches(it, requirements) && fits(it, requests)
        })
        .flat_map(|it| {
            it.offerings
                .iter()
                .filter(move |o| {
                    o.available
                        && class.allows_zone(&o.zone)
                        && offering_matches(it, o, requirements)
                })
                .map(move |o| Candidate {
                    instance_type: it.name.clone(),
                    zone: o.zone.clone(),
                    capacity_type: o.capacity_type.clone(),
                    price: o.price,
                })
        })
        .collect();
    out.sort_by(|a, b| a.price.total_cmp(&b.price));
    out.truncate(MAX_CANDIDATES);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use joinery_plugin_sdk::cloud::Operator;

    fn offering(zone: &str, capacity_type: &str, price: f64) -> CatalogOffering {
        CatalogOffering {
            zone: zone.into(),
            capacity_type: capacity_type.into(),
            price,
            available: true,
        }
    }

    /// A c3-like type with `cpu` vCPUs, 2 GiB per vCPU, in zones a and b.
    fn it(name: &str, cpu: u32, arch: &str) -> CatalogType {
        let od = 0.025 * f64::from(cpu);
        let labels = [
            ("node.kubernetes.io/instance-type", name.to_string()),
            ("kubernetes.io/arch", arch.to_string()),
            ("kubernetes.io/os", "linux".to_string()),
            ("simcloud.joinery.dev/instance-cpu", cpu.to_string()),
            ("simcloud.joinery.dev/instance-family", "c3".to_string()),
        ];
        CatalogType {
            name: name.into(),
            capacity: BTreeMap::new(),
            overhead: CatalogOverhead::default(),
            allocatable: [
                ("cpu".to_string(), format!("{}m", cpu * 1000 - 100)),
                ("memory".to_string(), format!("{}Mi", cpu * 2048 - 10)),
                ("pods".to_string(), "110".to_string()),
            ]
            .into(),
            labels: labels
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            offerings: vec![
                offering("a", "on-demand", od),
                offering("a", "spot", od * 0.7),
                offering("b", "on-demand", od),
            ],
        }
    }

    fn catalog() -> Vec<CatalogType> {
        vec![
            it("c3-16", 8, "amd64"),
            it("c3-4", 2, "amd64"),
            it("c3-8", 4, "arm64"),
        ]
    }

    fn req(key: &str, operator: Operator, values: &[&str]) -> Requirement {
        Requirement::new(key, operator, values)
    }

    fn names(candidates: &[Candidate]) -> Vec<String> {
        candidates
            .iter()
            .map(|c| format!("{}/{}/{}", c.instance_type, c.zone, c.capacity_type))
            .collect()
    }

    #[test]
    fn quantities_parse_to_milli_units() {
        assert_eq!(parse_milli("1500m"), Some(1500));
        assert_eq!(parse_milli("2"), Some(2000));
        assert_eq!(parse_milli("0.5"), Some(500));
        assert_eq!(parse_milli("1Ki"), Some(1_024_000));
        assert_eq!(parse_milli("2Gi"), Some(2u128 * 1024 * 1024 * 1024 * 1000));
        assert_eq!(parse_milli("1k"), Some(1_000_000));
        assert_eq!(parse_milli("1e3"), Some(1_000_000));
        assert_eq!(parse_milli("0.1m"), Some(1), "rounded up");
        assert_eq!(parse_milli("-1"), None);
        assert_eq!(parse_milli("lots"), None);
        assert_eq!(parse_milli(""), None);
    }

    #[test]
    fn candidates_are_cheapest_first_and_respect_every_filter() {
        let all = candidates(&catalog(), ClassFilter::default(), &[], &[]);
        assert_eq!(all.len(), 9);
        assert_eq!(
            names(&all[..3]),
            ["c3-4/a/spot", "c3-4/a/on-demand", "c3-4/b/on-demand"]
        );
        assert!(all.windows(2).all(|w| w[0].price <= w[1].price));

        let requirements = [
            req("kubernetes.io/arch", Operator::In, &["amd64"]),
            req(CAPACITY_TYPE_LABEL, Operator::In, &["on-demand"]),
            req(ZONE_LABEL, Operator::NotIn, &["a"]),
            // Not the cloud's business: ignored.
            req("karpenter.sh/nodepool", Operator::In, &["default"]),
            req("team", Operator::DoesNotExist, &[]),
        ];
        assert_eq!(
            names(&candidates(
                &catalog(),
                ClassFilter::default(),
                &requirements,
                &[]
            )),
            ["c3-4/b/on-demand", "c3-16/b/on-demand"]
        );

        let bigger = [req(
            "simcloud.joinery.dev/instance-cpu",
            Operator::Gt,
            &["2"],
        )];
        let picked = candidates(&catalog(), ClassFilter::default(), &bigger, &[]);
        assert_eq!(picked[0].instance_type, "c3-8");
        let no_gpu = [req(
            "simcloud.joinery.dev/instance-gpu-count",
            Operator::Exists,
            &[],
        )];
        assert!(
            candidates(&catalog(), ClassFilter::default(), &no_gpu, &[]).is_empty(),
            "a simcloud key a type lacks is absent"
        );
        let types = [req(
            "node.kubernetes.io/instance-type",
            Operator::In,
            &["c3-16", "c3-8"],
        )];
        assert_eq!(
            candidates(&catalog(), ClassFilter::default(), &types, &[])[0].instance_type,
            "c3-8"
        );
    }

    #[test]
    fn requests_must_fit_allocatable() {
        let requests = [Resource::new("cpu", "2"), Resource::new("memory", "3Gi")];
        let picked = candidates(&catalog(), ClassFilter::default(), &[], &requests);
        assert_eq!(
            picked[0].instance_type, "c3-8",
            "c3-4 has 1900m allocatable CPU"
        );
        let exact = [Resource::new("cpu", "1900m")];
        assert_eq!(
            candidates(&catalog(), ClassFilter::default(), &[], &exact)[0].instance_type,
            "c3-4"
        );
        let gpu = [Resource::new("nvidia.com/gpu", "1")];
        assert!(candidates(&catalog(), ClassFilter::default(), &[], &gpu).is_empty());
        let zero_gpu = [Resource::new("nvidia.com/gpu", "0")];
        assert_eq!(
            candidates(&catalog(), ClassFilter::default(), &[], &zero_gpu).len(),
            9
        );
    }

    #[test]
    fn the_node_class_limits_zones_and_types() {
        let zones = vec!["b".to_string()];
        let types = vec!["c3-16".to_string(), "c3-8".to_string()];
        let class = ClassFilter {
            zones: Some(&zones),
            instance_types: Some(&types),
        };
        assert_eq!(
            names(&candidates(&catalog(), class, &[], &[])),
            ["c3-8/b/on-demand", "c3-16/b/on-demand"]
        );
    }

    #[test]
    fn unavailable_offerings_are_skipped() {
        let mut catalog = catalog();
        for o in &mut catalog[1].offerings {
            o.available = o.capacity_type != "spot";
        }
        assert_eq!(
            names(&candidates(&catalog, ClassFilter::default(), &[], &[])[..1]),
            ["c3-4/a/on-demand"]
        );
    }
}
