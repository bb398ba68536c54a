//! What the simulated cloud serves: zones, instance types and their offerings, derived from
//! a [`Catalog`] (the instance-type catalog file of [`joinery_core::catalog`]).
//!
//! A scenario's `cloud.catalog` replaces the default, the kwok-shaped catalog upstream
//! Karpenter's kwok provider generates (its Linux half). The cloud adds its own labels to every
//! type (`simcloud.joinery.dev/instance-family`, `-size`, `-cpu`, `-memory` and, with GPUs,
//! `-gpu-count`), normalizes the quantities it reports, and refuses what a machine it launches
//! cannot be: a fractional vCPU count, several architectures or operating systems, or
//! requirements beyond labels. `wellKnownLabels` is refused too: the `simcloud` plugin declares
//! its own.

use std::collections::BTreeMap;

pub use joinery_core::catalog::Catalog;
use joinery_core::catalog::{CatalogOverhead, QuantityText, ResolvedInstanceType};
pub use joinery_core::labels::CAPACITY_TYPES;
use joinery_core::resources::{Resources, format_bytes, parse_value};
use serde::{Deserialize, Serialize};

/// Label prefix of the simulated cloud's own instance-type labels.
pub const LABEL_DOMAIN: &str = "simcloud.joinery.dev";
/// Instance family label, e.g. `c` for `c-4x-amd64-linux`.
pub const LABEL_FAMILY: &str = "simcloud.joinery.dev/instance-family";
/// Instance size label, e.g. `4x` for `c-4x-amd64-linux`.
pub const LABEL_SIZE: &str = "simcloud.joinery.dev/instance-size";
/// vCPU count label, e.g. `4`.
pub const LABEL_CPU: &str = "simcloud.joinery.dev/instance-cpu";
/// Memory label in MiB, e.g. `8192`.
pub const LABEL_MEMORY: &str = "simcloud.joinery.dev/instance-memory";
/// GPU count label; only set on types with GPUs.
pub const LABEL_GPU_COUNT: &str = "simcloud.joinery.dev/instance-gpu-count";
/// The extended resource GPUs are advertised as.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// Kubelet reservations of an instance type as the cloud serves them: resource name → quantity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OverheadSpec {
    /// `kube-reserved`.
    #[serde(default)]
    pub kube_reserved: BTreeMap<String, String>,
    /// `system-reserved`.
    #[serde(default)]
    pub system_reserved: BTreeMap<String, String>,
    /// Hard eviction thresholds.
    #[serde(default)]
    pub eviction_threshold: BTreeMap<String, String>,
}

/// An instance type with everything derived: capacity, allocatable, labels and priced
/// offerings. This is what `GET /v1/instance-types` returns for each type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceTypeInfo {
    /// Name.
    pub name: String,
    /// `cpu`, `memory`, `pods`, `ephemeral-storage` and `nvidia.com/gpu` (when present).
    pub capacity: BTreeMap<String, String>,
    /// The catalog's overhead.
    pub overhead: OverheadSpec,
    /// Capacity minus overhead.
    pub allocatable: BTreeMap<String, String>,
    /// What its kubelets report as allocatable: capacity minus the catalog's
    /// `kubeletOverhead` (the advertised `allocatable` unless that is set). Not served.
    #[serde(skip)]
    pub kubelet_allocatable: BTreeMap<String, String>,
    /// Architecture, OS, instance type and the `simcloud.joinery.dev/*` labels.
    pub labels: BTreeMap<String, String>,
    /// Every offering, with its price and static availability.
    pub offerings: Vec<OfferingInfo>,
}

/// A priced offering of an [`InstanceTypeInfo`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OfferingInfo {
    /// Zone.
    pub zone: String,
    /// Capacity type.
    pub capacity_type: String,
    /// Price per hour.
    pub price: f64,
    /// Whether the catalog lists it as available (injected capacity faults are not shown).
    pub available: bool,
}

impl InstanceTypeInfo {
    /// The offering in `zone` with `capacity_type`, if the type has one.
    pub fn offering(&self, zone: &str, capacity_type: &str) -> Option<&OfferingInfo> {
        self.offerings
            .iter()
            .find(|o| o.zone == zone && o.capacity_type == capacity_type)
    }
}

/// Splits a type name into family and size: `c-4x-amd64-linux` → (`c`, `4x`), `m5.xlarge` →
/// (`m5`, `xlarge`), `c3-16` → (`c3`, `16`). Without a separator the family is the first
/// character and the size is the vCPU count.
fn family_and_size(name: &str, cpu: u32) -> (String, String) {
    let mut parts = name.split(['-', '.']);
    match (parts.next(), parts.next()) {
        (Some(family), Some(size)) if !family.is_empty() && !size.is_empty() => {
            (family.to_string(), size.to_string())
        }
        _ => (
            name.chars().next().map(String::from).unwrap_or_default(),
            cpu.to_string(),
        ),
    }
}

impl From<&CatalogOverhead> for OverheadSpec {
    fn from(o: &CatalogOverhead) -> Self {
        let texts = |list: &BTreeMap<String, QuantityText>| {
            list.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect()
        };
        OverheadSpec {
            kube_reserved: texts(&o.kube_reserved),
            system_reserved: texts(&o.system_reserved),
            eviction_threshold: texts(&o.eviction_threshold),
        }
    }
}

/// What the simulated cloud serves: its zones and its instance types, in catalog order.
#[derive(Debug, Clone, PartialEq)]
pub struct ServedCatalog {
    /// Zones.
    pub zones: Vec<String>,
    /// Instance types.
    pub types: Vec<InstanceTypeInfo>,
}

/// Checks `catalog` and derives what the simulated cloud serves. Errors name the entry and
/// the field.
pub fn serve(catalog: &Catalog) -> Result<ServedCatalog, String> {
    if !catalog.well_known_labels.is_empty() {
        return Err("wellKnownLabels: the simcloud plugin declares its own well-known labels; remove this field".to_string());
    }
    let resolved = catalog.resolve().map_err(|e| e.to_string())?;
    let kubelet_overhead = match &catalog.kubelet_overhead {
        Some(o) => Some(o.total().map_err(|e| format!("kubeletOverhead: {e}"))?),
        None => None,
    };
    let types = resolved
        .instance_types
        .iter()
        .enumerate()
        .map(|(i, t)| {
            serve_one(t, kubelet_overhead.as_ref())
                .map_err(|e| format!("instanceTypes[{i}] ({}).{e}", t.name))
        })
        .collect::<Result<_, _>>()?;
    Ok(ServedCatalog {
        zones: resolved.zones,
        types,
    })
}

fn only_one<'a>(field: &str, values: &'a [String]) -> Result<&'a str, String> {
    match values {
        [one] => Ok(one),
        _ => Err(format!(
            "{field}: a simulated machine has one {field}, not {values:?}"
        )),
    }
}

fn serve_one(
    t: &ResolvedInstanceType,
    kubelet_overhead: Option<&Resources>,
) -> Result<InstanceTypeInfo, String> {
    let arch = only_one("arch", &t.arch)?;
    let os = only_one("os", &t.os)?;
    if !t.requirements.is_empty() {
        return Err(
            "requirements: the simulated cloud describes types by their labels only; use labels"
                .to_string(),
        );
    }
    let cpu_text = &t.capacity["cpu"];
    let cpu: u32 = cpu_text.parse().ok().filter(|c| *c > 0).ok_or_else(|| {
        format!("cpu: {cpu_text:?}: the simulated cloud sells whole vCPUs, at least 1")
    })?;
    let mut capacity = t.capacity.clone();
    capacity.insert("cpu".to_string(), cpu.to_string());
    let memory = parse_value(&t.capacity["memory"]).map_err(|e| format!("memory: {e}"))?;
    capacity.insert("memory".to_string(), format_bytes(memory));
    let storage = parse_value(&t.capacity["ephemeral-storage"])
        .map_err(|e| format!("ephemeralStorage: {e}"))?;
    capacity.insert("ephemeral-storage".to_string(), format_bytes(storage));
    let capacity_amounts =
        Resources::from_quantities(capacity.iter()).map_err(|e| format!("capacity: {e}"))?;
    let allocatable = capacity_amounts
        .saturating_sub(&t.overhead.total().map_err(|e| format!("overhead: {e}"))?)
        .to_quantities();
    let kubelet_allocatable = match kubelet_overhead {
        Some(o) => capacity_amounts.saturating_sub(o).to_quantities(),
        None => allocatable.clone(),
    };

    let (family, size) = family_and_size(&t.name, cpu);
    let mut labels = BTreeMap::new();
    labels.insert(
        "node.kubernetes.io/instance-type".to_string(),
        t.name.clone(),
    );
    labels.insert("kubernetes.io/arch".to_string(), arch.to_string());
    labels.insert("kubernetes.io/os".to_string(), os.to_string());
    labels.insert(LABEL_FAMILY.to_string(), family);
    labels.insert(LABEL_SIZE.to_string(), size);
    labels.insert(LABEL_CPU.to_string(), cpu.to_string());
    labels.insert(LABEL_MEMORY.to_string(), (memory >> 20).to_string());
    if let Some(gpus) = capacity.get(GPU_RESOURCE) {
        labels.insert(LABEL_GPU_COUNT.to_string(), gpus.clone());
    }
    labels.extend(t.labels.iter().map(|(k, v)| (k.clone(), v.clone())));

    let offerings = t
        .offerings
        .iter()
        .map(|o| OfferingInfo {
            zone: o.zone.clone(),
            capacity_type: o.capacity_type.clone(),
            price: o.price,
            available: o.available,
        })
        .collect();
    Ok(InstanceTypeInfo {
        name: t.name.clone(),
        capacity,
        overhead: OverheadSpec::from(&t.overhead),
        allocatable,
        kubelet_allocatable,
        labels,
        offerings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_catalog_has_kwok_shape() {
        let served = serve(&Catalog::default()).unwrap();
        assert_eq!(served.zones.len(), 4);
        let types = served.types;
        assert_eq!(types.len(), 72);
        let c1 = types.iter().find(|t| t.name == "c-1x-amd64-linux").unwrap();
        assert_eq!(c1.capacity["memory"], "2Gi");
        assert_eq!(c1.capacity["pods"], "16");
        assert_eq!(c1.allocatable["cpu"], "900m");
        assert_eq!(c1.offerings.len(), 8);
        let od = c1.offering("test-zone-a", "on-demand").unwrap().price;
        assert!((od - 0.027147483648).abs() < 1e-12, "{od}");
        assert_eq!(c1.labels[LABEL_SIZE], "1x");
        assert_eq!(c1.labels[LABEL_FAMILY], "c");
    }

    #[test]
    fn names_split_into_family_and_size() {
        assert_eq!(
            family_and_size("m5.xlarge", 4),
            ("m5".into(), "xlarge".into())
        );
        assert_eq!(family_and_size("c3-16", 8), ("c3".into(), "16".into()));
        assert_eq!(family_and_size("big", 8), ("b".into(), "8".into()));
    }

    #[test]
    fn bad_entries_are_named() {
        let mut types = joinery_core::catalog::default_instance_types();
        types[3].memory = "lots".into();
        let err = serve(&Catalog {
            instance_types: Some(types),
            ..Default::default()
        })
        .unwrap_err();
        assert!(
            err.starts_with("instanceTypes[3]") && err.contains("memory"),
            "{err}"
        );
    }

    #[test]
    fn what_a_simulated_machine_cannot_be_is_refused() {
        for (text, expected) in [
            (
                "[{name: a, cpu: 1500m, memory: 1Gi}]",
                "instanceTypes[0] (a).cpu: \"1500m\": the simulated cloud sells whole vCPUs",
            ),
            (
                "[{name: a, cpu: 1, memory: 1Gi, arch: [amd64, arm64]}]",
                "instanceTypes[0] (a).arch: a simulated machine has one arch",
            ),
            (
                "[{name: a, cpu: 1, memory: 1Gi, requirements: [{key: k, operator: Exists}]}]",
                "instanceTypes[0] (a).requirements",
            ),
            ("{wellKnownLabels: [size]}", "wellKnownLabels"),
        ] {
            let catalog: Catalog = serde_norway::from_str(text).unwrap();
            let err = serve(&catalog).unwrap_err();
            assert!(err.starts_with(expected), "{text}: {err}");
        }
    }

    #[test]
    fn gpus_and_kubelet_overhead_are_served() {
        let catalog: Catalog = serde_norway::from_str(
            "instanceTypes: [{name: g-8, cpu: 8, memory: 32Gi, resources: {nvidia.com/gpu: 2}}]\nkubeletOverhead: {kubeReserved: {cpu: 1}}\n",
        )
        .unwrap();
        let g = &serve(&catalog).unwrap().types[0];
        assert_eq!(g.capacity[GPU_RESOURCE], "2");
        assert_eq!(g.labels[LABEL_GPU_COUNT], "2");
        assert_eq!(g.allocatable["cpu"], "7900m");
        assert_eq!(g.kubelet_allocatable["cpu"], "7");
    }
}
