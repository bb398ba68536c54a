//! What the simulated cloud can launch: zones, instance types and their offerings.
//!
//! A [`Catalog`] is plain data that a scenario file can replace (YAML or JSON, camelCase
//! keys). Every field except `name`, `cpu` and `memory` of an instance type has a default, so a
//! short entry such as `{name: c3-4, cpu: 2, memory: 4Gi}` is a complete instance type:
//!
//! ```yaml
//! zones: [test-zone-a, test-zone-b]
//! instanceTypes:
//!   - {name: c3-4, cpu: 2, memory: 4Gi}
//!   - name: g1-8
//!     cpu: 8
//!     memory: 32Gi
//!     gpu: 1
//!     offerings: [{zone: test-zone-a, capacityType: on-demand, price: 1.2}]
//! ```
//!
//! [`Catalog::default`] mirrors the catalog upstream Karpenter's kwok provider generates
//! (its Linux half): families `c`, `s` and `m` with 2, 4 and 8 GiB per vCPU, twelve sizes from
//! 1 to 256 vCPU, `amd64` and `arm64`, named `<family>-<vCPU>x-<arch>-linux`, offered in four
//! zones as on-demand and spot.
//!
//! Prices follow kwok: on-demand = 0.025 × vCPU + 0.001 × memory in GB (10⁹ bytes), spot = 70 %
//! of on-demand. Overhead follows kwok too: kube-reserved 100m CPU and 10Mi memory, nothing
//! system-reserved, no eviction threshold; allocatable = capacity − overhead.

use std::collections::{BTreeMap, BTreeSet};

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

/// The capacity types an offering may have.
pub const CAPACITY_TYPES: &[&str] = &["on-demand", "spot", "reserved"];

const SIZES: [u32; 12] = [1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256];
const FAMILIES: [(&str, u32); 3] = [("c", 2), ("s", 4), ("m", 8)];
const ARCHES: [&str; 2] = ["amd64", "arm64"];

/// The zones, instance types and overhead of a simulated cloud.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Catalog {
    /// Zone names; default `test-zone-a` … `test-zone-d` (kwok's zones).
    #[serde(default = "default_zones")]
    pub zones: Vec<String>,
    /// Instance types; default: the kwok-like generated catalog.
    #[serde(default = "default_instance_types")]
    pub instance_types: Vec<InstanceTypeSpec>,
    /// Overhead subtracted from every type's capacity; default kube-reserved 100m CPU, 10Mi memory.
    #[serde(default)]
    pub overhead: OverheadSpec,
    /// What the simulated kubelets really keep, when it differs from the advertised
    /// `overhead` (a node that joins with less allocatable than its cloud estimated, as real
    /// ones do); default the same.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet_overhead: Option<OverheadSpec>,
}

/// One instance type as a catalog declares it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstanceTypeSpec {
    /// Name; also the `node.kubernetes.io/instance-type` label value.
    pub name: String,
    /// vCPU count.
    pub cpu: u32,
    /// Memory as a Kubernetes quantity, e.g. `8Gi`.
    pub memory: String,
    /// Pod capacity; default 110 (what kwok assumes when its catalog omits it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<u32>,
    /// CPU architecture; default `amd64`.
    #[serde(default = "default_arch")]
    pub arch: String,
    /// Operating system; default `linux`.
    #[serde(default = "default_os")]
    pub os: String,
    /// Number of GPUs, advertised as `nvidia.com/gpu`; default 0.
    #[serde(default)]
    pub gpu: u32,
    /// Ephemeral storage as a quantity; default `20Gi` (kwok's value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ephemeral_storage: Option<String>,
    /// Extra labels; they override the derived ones with the same key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Offerings; default every zone × {on-demand, spot}, all available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offerings: Option<Vec<OfferingSpec>>,
    /// On-demand price per hour; default from the kwok formula. Spot offerings default to 70 % of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<f64>,
}

/// One offering as a catalog declares it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OfferingSpec {
    /// Zone; must be one of the catalog's zones.
    pub zone: String,
    /// `on-demand`, `spot` or `reserved`.
    pub capacity_type: String,
    /// Price per hour; default: the type's on-demand price (70 % of it for spot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<f64>,
    /// Whether it can be launched; default true. An unavailable offering is listed as such and
    /// refused at launch.
    #[serde(default = "yes")]
    pub available: bool,
}

/// Kubelet reservations applied to every instance type, as resource name → quantity.
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

impl Default for OverheadSpec {
    fn default() -> Self {
        let kube_reserved = [("cpu", "100m"), ("memory", "10Mi")].map(|(k, v)| (k.to_string(), v.to_string()));
        OverheadSpec { kube_reserved: kube_reserved.into(), system_reserved: BTreeMap::new(), eviction_threshold: BTreeMap::new() }
    }
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
        self.offerings.iter().find(|o| o.zone == zone && o.capacity_type == capacity_type)
    }
}

fn yes() -> bool {
    true
}

fn default_arch() -> String {
    "amd64".to_string()
}

fn default_os() -> String {
    "linux".to_string()
}

/// kwok's four zones.
pub fn default_zones() -> Vec<String> {
    ["test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d"].map(String::from).to_vec()
}

/// The generated kwok-like instance types (72: 3 families × 12 sizes × 2 architectures, Linux).
pub fn default_instance_types() -> Vec<InstanceTypeSpec> {
    let mut types = Vec::with_capacity(FAMILIES.len() * SIZES.len() * ARCHES.len());
    for (family, gib_per_cpu) in FAMILIES {
        for cpu in SIZES {
            for arch in ARCHES {
                types.push(InstanceTypeSpec {
                    name: format!("{family}-{cpu}x-{arch}-linux"),
                    cpu,
                    memory: format!("{}Gi", cpu * gib_per_cpu),
                    // kwok's generator: 16 pods per vCPU, at most 1024.
                    pods: Some((16 * cpu).min(1024)),
                    arch: arch.to_string(),
                    os: "linux".to_string(),
                    gpu: 0,
                    ephemeral_storage: None,
                    labels: BTreeMap::new(),
                    offerings: None,
                    price: None,
                });
            }
        }
    }
    types
}

impl Default for Catalog {
    fn default() -> Self {
        Catalog { zones: default_zones(), instance_types: default_instance_types(), overhead: OverheadSpec::default(), kubelet_overhead: None }
    }
}

/// kwok's on-demand price: 0.025 per vCPU plus 0.001 per GB (10⁹ bytes) of memory.
pub fn on_demand_price(cpu: u32, memory_bytes: u64) -> f64 {
    0.025 * f64::from(cpu) + 0.001 * (memory_bytes as f64 / 1e9)
}

/// Spot discount relative to on-demand.
pub const SPOT_FACTOR: f64 = 0.7;

/// Splits a type name into family and size: `c-4x-amd64-linux` → (`c`, `4x`), `m5.xlarge` →
/// (`m5`, `xlarge`), `c3-16` → (`c3`, `16`). Without a separator the family is the first
/// character and the size is the vCPU count.
fn family_and_size(name: &str, cpu: u32) -> (String, String) {
    let mut parts = name.split(['-', '.']);
    match (parts.next(), parts.next()) {
        (Some(family), Some(size)) if !family.is_empty() && !size.is_empty() => (family.to_string(), size.to_string()),
        _ => (name.chars().next().map(String::from).unwrap_or_default(), cpu.to_string()),
    }
}

fn sum_quantities(lists: &[&BTreeMap<String, String>]) -> Result<Resources, String> {
    let mut total = Resources::new();
    for list in lists {
        let parsed = Resources::from_quantities(list.iter()).map_err(|e| format!("overhead: {e}"))?;
        total = total.saturating_add(&parsed);
    }
    Ok(total)
}

impl Catalog {
    /// Checks the catalog and derives every instance type's capacity, labels and offerings.
    /// The error names the offending entry.
    pub fn resolve(&self) -> Result<Vec<InstanceTypeInfo>, String> {
        if self.zones.is_empty() {
            return Err("zones: at least one zone is needed".to_string());
        }
        let zones: BTreeSet<&str> = self.zones.iter().map(String::as_str).collect();
        if zones.len() != self.zones.len() {
            return Err("zones: a zone is listed twice".to_string());
        }
        if zones.iter().any(|z| z.is_empty()) {
            return Err("zones: a zone name is empty".to_string());
        }
        let overhead =
            sum_quantities(&[&self.overhead.kube_reserved, &self.overhead.system_reserved, &self.overhead.eviction_threshold])?;
        let kubelet_overhead = match &self.kubelet_overhead {
            Some(o) => Some(sum_quantities(&[&o.kube_reserved, &o.system_reserved, &o.eviction_threshold]).map_err(|e| format!("kubeletOverhead: {e}"))?),
            None => None,
        };
        let mut names = BTreeSet::new();
        let mut resolved = Vec::with_capacity(self.instance_types.len());
        for (index, spec) in self.instance_types.iter().enumerate() {
            let at = format!("instanceTypes[{index}]");
            if spec.name.is_empty() {
                return Err(format!("{at}.name: must not be empty"));
            }
            if !names.insert(spec.name.as_str()) {
                return Err(format!("{at}.name: {:?} is listed twice", spec.name));
            }
            let mut info = self.resolve_one(spec, &zones, &overhead).map_err(|e| format!("{at} ({}).{e}", spec.name))?;
            if let Some(kubelet) = &kubelet_overhead {
                let capacity = Resources::from_quantities(info.capacity.iter()).map_err(|e| format!("{at}.capacity: {e}"))?;
                info.kubelet_allocatable = capacity.saturating_sub(kubelet).to_quantities();
            }
            resolved.push(info);
        }
        Ok(resolved)
    }

    fn resolve_one(&self, spec: &InstanceTypeSpec, zones: &BTreeSet<&str>, overhead: &Resources) -> Result<InstanceTypeInfo, String> {
        if spec.cpu == 0 {
            return Err("cpu: must be at least 1".to_string());
        }
        let memory = parse_value(&spec.memory).map_err(|e| format!("memory: {:?} is not a quantity ({e})", spec.memory))?;
        let storage_text = spec.ephemeral_storage.as_deref().unwrap_or("20Gi");
        let storage =
            parse_value(storage_text).map_err(|e| format!("ephemeralStorage: {storage_text:?} is not a quantity ({e})"))?;
        let base_price = spec.price.unwrap_or_else(|| on_demand_price(spec.cpu, memory));
        if !base_price.is_finite() || base_price < 0.0 {
            return Err(format!("price: {base_price} must be a finite, non-negative number"));
        }

        let mut capacity = BTreeMap::new();
        capacity.insert("cpu".to_string(), spec.cpu.to_string());
        capacity.insert("memory".to_string(), format_bytes(memory));
        capacity.insert("pods".to_string(), spec.pods.unwrap_or(110).to_string());
        capacity.insert("ephemeral-storage".to_string(), format_bytes(storage));
        if spec.gpu > 0 {
            capacity.insert(GPU_RESOURCE.to_string(), spec.gpu.to_string());
        }
        let capacity_amounts = Resources::from_quantities(capacity.iter()).map_err(|e| format!("capacity: {e}"))?;
        let allocatable = capacity_amounts.saturating_sub(overhead).to_quantities();

        let (family, size) = family_and_size(&spec.name, spec.cpu);
        let mut labels = BTreeMap::new();
        labels.insert("node.kubernetes.io/instance-type".to_string(), spec.name.clone());
        labels.insert("kubernetes.io/arch".to_string(), spec.arch.clone());
        labels.insert("kubernetes.io/os".to_string(), spec.os.clone());
        labels.insert(LABEL_FAMILY.to_string(), family);
        labels.insert(LABEL_SIZE.to_string(), size);
        labels.insert(LABEL_CPU.to_string(), spec.cpu.to_string());
        labels.insert(LABEL_MEMORY.to_string(), (memory >> 20).to_string());
        if spec.gpu > 0 {
            labels.insert(LABEL_GPU_COUNT.to_string(), spec.gpu.to_string());
        }
        labels.extend(spec.labels.iter().map(|(k, v)| (k.clone(), v.clone())));

        let default_price = |capacity_type: &str| if capacity_type == "spot" { base_price * SPOT_FACTOR } else { base_price };
        let offerings = match &spec.offerings {
            None => self
                .zones
                .iter()
                .flat_map(|zone| {
                    ["on-demand", "spot"].map(|ct| OfferingInfo {
                        zone: zone.clone(),
                        capacity_type: ct.to_string(),
                        price: default_price(ct),
                        available: true,
                    })
                })
                .collect(),
            Some(list) => {
                let mut seen = BTreeSet::new();
                let mut out = Vec::with_capacity(list.len());
                for (j, o) in list.iter().enumerate() {
                    if !zones.contains(o.zone.as_str()) {
                        return Err(format!("offerings[{j}].zone: {:?} is not one of the catalog's zones", o.zone));
                    }
                    if !CAPACITY_TYPES.contains(&o.capacity_type.as_str()) {
                        return Err(format!(
                            "offerings[{j}].capacityType: {:?} is not one of {CAPACITY_TYPES:?}",
                            o.capacity_type
                        ));
                    }
                    if !seen.insert((o.zone.as_str(), o.capacity_type.as_str())) {
                        return Err(format!("offerings[{j}]: {} {} is listed twice", o.zone, o.capacity_type));
                    }
                    let price = o.price.unwrap_or_else(|| default_price(&o.capacity_type));
                    if !price.is_finite() || price < 0.0 {
                        return Err(format!("offerings[{j}].price: {price} must be a finite, non-negative number"));
                    }
                    out.push(OfferingInfo {
                        zone: o.zone.clone(),
                        capacity_type: o.capacity_type.clone(),
                        price,
                        available: o.available,
                    });
                }
                out
            }
        };

        Ok(InstanceTypeInfo {
            name: spec.name.clone(),
            capacity,
            overhead: self.overhead.clone(),
            kubelet_allocatable: allocatable.clone(),
            allocatable,
            labels,
            offerings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_catalog_has_kwok_shape() {
        let types = Catalog::default().resolve().unwrap();
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
        assert_eq!(family_and_size("m5.xlarge", 4), ("m5".into(), "xlarge".into()));
        assert_eq!(family_and_size("c3-16", 8), ("c3".into(), "16".into()));
        assert_eq!(family_and_size("big", 8), ("b".into(), "8".into()));
    }

    #[test]
    fn bad_entries_are_named() {
        let mut catalog = Catalog::default();
        catalog.instance_types[3].memory = "lots".into();
        let err = catalog.resolve().unwrap_err();
        assert!(err.starts_with("instanceTypes[3]") && err.contains("memory"), "{err}");
    }
}
