//! The instance-type catalog file: the one format for instance types written by hand.
//!
//! `joinery schedule --catalog`, `joinery disrupt --catalog` and the simulated cloud
//! (`cloud.catalog` of a scenario, `joinery sim serve`) all read this format. A file is either
//! a list of instance types or an object:
//!
//! ```yaml
//! zones: [zone-a, zone-b]          # default: the zones the offerings name, or kwok's four
//! overhead:                        # default of every type: kube-reserved 100m CPU, 10Mi memory
//!   kubeReserved: {cpu: 100m, memory: 10Mi}
//! wellKnownLabels: [example.com/family]
//! instanceTypes:                   # default: the kwok-shaped catalog (72 Linux types)
//!   - {name: c3-4, cpu: 2, memory: 4Gi}
//!   - name: g1-8
//!     cpu: 8                        # a quantity: 8, "8", 7500m
//!     memory: 32Gi
//!     pods: 110                     # default 110
//!     ephemeralStorage: 20Gi        # default 20Gi
//!     arch: amd64                   # or a list; default amd64
//!     os: linux                     # or a list; default linux
//!     resources: {nvidia.com/gpu: 1}
//!     labels: {example.com/family: g}
//!     requirements: [{key: example.com/exotic, operator: DoesNotExist}]
//!     overhead: {kubeReserved: {cpu: 200m}}   # replaces the catalog's overhead for this type
//!     price: 1.2                    # on-demand price; spot defaults to 70 % of it
//!     offerings:                    # default: every zone × {on-demand, spot}
//!       - {zone: zone-a, capacityType: on-demand}
//!       - {zone: zone-b, capacityType: spot, price: 0.4, available: false}
//! ```
//!
//! Every default is the one upstream Karpenter's kwok provider uses, so a short entry such as
//! `{name: c3-4, cpu: 2, memory: 4Gi}` is a complete instance type. An offering's price is, in
//! order: its own `price`, the type's `price` (70 % of it for spot), kwok's formula
//! (0.025 per vCPU + 0.001 per GB of memory, 10⁹ bytes; 70 % of it for spot).
//!
//! [`Catalog::resolve`] checks a catalog and applies the defaults; every error names the entry
//! and the field. [`Catalog::instance_types`] turns it into the core's [`InstanceType`]s.
//! The simulated cloud derives what it serves from [`Catalog::resolve`] on its own.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::de::value::{MapAccessDeserializer, SeqAccessDeserializer};
use serde::de::{MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::contract;
use crate::instance_type::InstanceType;
use crate::labels::{self, CAPACITY_TYPES, LabelPolicy};
use crate::requirements::Operator;
use crate::resources::{Resources, Unit, parse_value};

/// Why a catalog cannot be used: the entry and field, then what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CatalogError(pub String);

/// kwok's on-demand price per hour: 0.025 per vCPU plus 0.001 per GB (10⁹ bytes) of memory.
pub fn on_demand_price(cpu: f64, memory_bytes: u64) -> f64 {
    0.025 * cpu + 0.001 * (memory_bytes as f64 / 1e9)
}

/// Spot's default price relative to on-demand.
pub const SPOT_FACTOR: f64 = 0.7;

/// kwok's four zones: the default when no zone is named.
pub fn default_zones() -> Vec<String> {
    ["test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d"]
        .map(String::from)
        .to_vec()
}

const KWOK_SIZES: [u32; 12] = [1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256];
const KWOK_FAMILIES: [(&str, u32); 3] = [("c", 2), ("s", 4), ("m", 8)];
const KWOK_ARCHES: [&str; 2] = ["amd64", "arm64"];

/// The kwok-shaped default instance types (the Linux half of what upstream's kwok provider
/// generates): families `c`, `s` and `m` with 2, 4 and 8 GiB per vCPU, twelve sizes from 1 to
/// 256 vCPU, `amd64` and `arm64`, named `<family>-<vCPU>x-<arch>-linux`; 16 pods per vCPU, at
/// most 1024.
pub fn default_instance_types() -> Vec<CatalogInstanceType> {
    let mut types = Vec::with_capacity(KWOK_FAMILIES.len() * KWOK_SIZES.len() * KWOK_ARCHES.len());
    for (family, gib_per_cpu) in KWOK_FAMILIES {
        for cpu in KWOK_SIZES {
            for arch in KWOK_ARCHES {
                let mut t = CatalogInstanceType::new(
                    format!("{family}-{cpu}x-{arch}-linux"),
                    cpu.to_string(),
                    format!("{}Gi", cpu * gib_per_cpu),
                );
                t.pods = Some(QuantityText((16 * cpu).min(1024).to_string()));
                t.arch = Some(OneOrMany::One(arch.to_string()));
                types.push(t);
            }
        }
    }
    types
}

/// A quantity as written: a string (`"3500m"`, `16Gi`) or a number (`4`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuantityText(pub String);

impl QuantityText {
    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for QuantityText {
    fn from(text: &str) -> Self {
        QuantityText(text.to_string())
    }
}

impl Serialize for QuantityText {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for QuantityText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Text;
        impl Visitor<'_> for Text {
            type Value = QuantityText;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a quantity such as 4, \"3500m\" or 16Gi")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<QuantityText, E> {
                Ok(QuantityText(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<QuantityText, E> {
                Ok(QuantityText(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<QuantityText, E> {
                Ok(QuantityText(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<QuantityText, E> {
                Ok(QuantityText(v.to_string()))
            }
        }
        deserializer.deserialize_any(Text)
    }
}

/// A string or a list of strings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// One value.
    One(String),
    /// Several values.
    Many(Vec<String>),
}

impl OneOrMany {
    /// The values, in order.
    pub fn values(&self) -> Vec<String> {
        match self {
            OneOrMany::One(v) => vec![v.clone()],
            OneOrMany::Many(v) => v.clone(),
        }
    }
}

/// Kubelet reservations: resource name → quantity, per category.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CatalogOverhead {
    /// `kube-reserved`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kube_reserved: BTreeMap<String, QuantityText>,
    /// `system-reserved`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub system_reserved: BTreeMap<String, QuantityText>,
    /// Hard eviction thresholds.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_threshold: BTreeMap<String, QuantityText>,
}

impl CatalogOverhead {
    /// kwok's overhead, the catalog default: kube-reserved 100m CPU and 10Mi memory.
    pub fn kwok() -> Self {
        let kube_reserved = [("cpu", "100m"), ("memory", "10Mi")]
            .map(|(k, v)| (k.to_string(), QuantityText::from(v)));
        CatalogOverhead {
            kube_reserved: kube_reserved.into(),
            ..Default::default()
        }
    }

    /// The three categories with their field names.
    pub fn categories(&self) -> [(&'static str, &BTreeMap<String, QuantityText>); 3] {
        [
            ("kubeReserved", &self.kube_reserved),
            ("systemReserved", &self.system_reserved),
            ("evictionThreshold", &self.eviction_threshold),
        ]
    }

    /// The three categories summed (a resource in several adds up); the error names the
    /// category and resource of a bad quantity.
    pub fn total(&self) -> Result<Resources, String> {
        let mut total = Resources::new();
        for (category, list) in self.categories() {
            let parsed =
                Resources::from_quantities(list.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                    .map_err(|e| format!("{category}: {e}"))?;
            total = total.saturating_add(&parsed);
        }
        Ok(total)
    }

    fn check(&self, field: &str) -> Result<(), String> {
        for (category, list) in self.categories() {
            for (resource, q) in list {
                check_quantity(
                    &format!("{field}.{category}.{resource}"),
                    resource,
                    q.as_str(),
                )?;
            }
        }
        Ok(())
    }
}

/// A requirement of an instance type (node-selector form).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CatalogRequirement {
    /// Label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`, `Gt`, `Lt`, `Gte`, `Lte`.
    pub operator: String,
    /// Values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    /// minValues.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values: Option<u32>,
}

/// An offering as a catalog declares it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CatalogOffering {
    /// Zone (`topology.kubernetes.io/zone`).
    pub zone: String,
    /// `on-demand`, `spot` or `reserved`.
    pub capacity_type: String,
    /// Price per hour; default the type's (see the module documentation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<f64>,
    /// Whether it can be launched; default true.
    #[serde(default = "yes")]
    pub available: bool,
}

fn yes() -> bool {
    true
}

/// One instance type as a catalog declares it. Only `name`, `cpu` and `memory` are required.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CatalogInstanceType {
    /// Name (the `node.kubernetes.io/instance-type` value).
    pub name: String,
    /// CPU capacity.
    pub cpu: QuantityText,
    /// Memory capacity.
    pub memory: QuantityText,
    /// Pod capacity; default 110.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<QuantityText>,
    /// Ephemeral storage capacity; default 20Gi.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ephemeral_storage: Option<QuantityText>,
    /// Architecture(s) (`kubernetes.io/arch`); default `amd64`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch: Option<OneOrMany>,
    /// Operating system(s) (`kubernetes.io/os`); default `linux`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<OneOrMany>,
    /// Extended resources (e.g. `nvidia.com/gpu`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: BTreeMap<String, QuantityText>,
    /// Labels every node of the type gets.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Further requirements, e.g. `DoesNotExist` for a label the type never has.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requirements: Vec<CatalogRequirement>,
    /// This type's overhead; default the catalog's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead: Option<CatalogOverhead>,
    /// On-demand price per hour; default kwok's formula. Spot defaults to 70 % of it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<f64>,
    /// Where and how it can be bought; default every zone × {on-demand, spot}.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offerings: Option<Vec<CatalogOffering>>,
}

impl CatalogInstanceType {
    /// A type with this name, CPU and memory and every other field defaulted.
    pub fn new(name: impl Into<String>, cpu: impl Into<String>, memory: impl Into<String>) -> Self {
        CatalogInstanceType {
            name: name.into(),
            cpu: QuantityText(cpu.into()),
            memory: QuantityText(memory.into()),
            pods: None,
            ephemeral_storage: None,
            arch: None,
            os: None,
            resources: BTreeMap::new(),
            labels: BTreeMap::new(),
            requirements: Vec::new(),
            overhead: None,
            price: None,
            offerings: None,
        }
    }
}

/// An instance-type catalog file (see the module documentation).
// `remote = "Self"` makes the derives inherent functions; the trait impls below add the list
// form to deserialization and serialize as derived.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self", rename_all = "camelCase", deny_unknown_fields)]
pub struct Catalog {
    /// Zones; default the zones the offerings name, plus kwok's four when a type lists no
    /// offerings. When set, every offering must be in one of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zones: Option<Vec<String>>,
    /// Instance types; default the kwok-shaped catalog ([`default_instance_types`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_types: Option<Vec<CatalogInstanceType>>,
    /// Overhead of every type that sets none; default [`CatalogOverhead::kwok`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead: Option<CatalogOverhead>,
    /// What the simulated kubelets really keep, when it differs from the advertised overhead
    /// (a node that joins with less allocatable than its cloud estimated). Only the simulated
    /// cloud reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet_overhead: Option<CatalogOverhead>,
    /// Label keys to treat as well-known besides upstream's (pods may select them without a
    /// NodePool declaring them). Only `joinery schedule` and `joinery disrupt` read it: a cloud
    /// plugin declares its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub well_known_labels: Vec<String>,
}

impl Serialize for Catalog {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        Catalog::serialize(self, serializer)
    }
}

impl<'de> Deserialize<'de> for Catalog {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Form;
        impl<'de> Visitor<'de> for Form {
            type Value = Catalog;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list of instance types, or a mapping with instanceTypes (and zones, overhead, wellKnownLabels)")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Catalog, A::Error> {
                let types =
                    Vec::<CatalogInstanceType>::deserialize(SeqAccessDeserializer::new(seq))?;
                Ok(Catalog {
                    instance_types: Some(types),
                    ..Default::default()
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Catalog, A::Error> {
                Catalog::deserialize(MapAccessDeserializer::new(map))
            }
        }
        deserializer.deserialize_any(Form)
    }
}

/// An offering with its price settled.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedOffering {
    /// Zone.
    pub zone: String,
    /// Capacity type.
    pub capacity_type: String,
    /// Price per hour.
    pub price: f64,
    /// Whether it can be launched.
    pub available: bool,
}

/// An instance type with every default applied and every field checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedInstanceType {
    /// Name.
    pub name: String,
    /// `cpu`, `memory`, `pods`, `ephemeral-storage` and the extended resources, as written
    /// (each a valid quantity).
    pub capacity: BTreeMap<String, String>,
    /// Overhead (the type's, else the catalog's).
    pub overhead: CatalogOverhead,
    /// Architectures.
    pub arch: Vec<String>,
    /// Operating systems.
    pub os: Vec<String>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Further requirements (operators checked).
    pub requirements: Vec<contract::Requirement>,
    /// Offerings.
    pub offerings: Vec<ResolvedOffering>,
}

/// A catalog with every default applied.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedCatalog {
    /// Zones, in order.
    pub zones: Vec<String>,
    /// Instance types, in file order.
    pub instance_types: Vec<ResolvedInstanceType>,
}

fn check_quantity(field: &str, resource: &str, text: &str) -> Result<(), String> {
    Unit::of(resource)
        .parse(text)
        .map(|_| ())
        .map_err(|e| format!("{field}: {text:?} is not a quantity ({e})"))
}

impl Catalog {
    /// Checks the catalog and applies its defaults. Names must be unique; quantities,
    /// operators, zones, capacity types and prices are checked, each error naming the entry
    /// (`instanceTypes[i] (name)`) and the field.
    pub fn resolve(&self) -> Result<ResolvedCatalog, CatalogError> {
        let generated;
        let types = match &self.instance_types {
            Some(types) => types,
            None => {
                generated = default_instance_types();
                &generated
            }
        };
        let zones = self.zones(types)?;
        let overhead = self.overhead.clone().unwrap_or_else(CatalogOverhead::kwok);
        overhead.check("overhead").map_err(CatalogError)?;
        if let Some(kubelet) = &self.kubelet_overhead {
            kubelet.check("kubeletOverhead").map_err(CatalogError)?;
        }
        let mut names = BTreeSet::new();
        let mut resolved = Vec::with_capacity(types.len());
        for (i, t) in types.iter().enumerate() {
            if t.name.is_empty() {
                return Err(CatalogError(format!(
                    "instanceTypes[{i}].name: must not be empty"
                )));
            }
            let at = format!("instanceTypes[{i}] ({})", t.name);
            if !names.insert(t.name.as_str()) {
                return Err(CatalogError(format!("{at}.name: listed twice")));
            }
            resolved.push(
                resolve_type(t, &zones, self.zones.is_some(), &overhead)
                    .map_err(|e| CatalogError(format!("{at}.{e}")))?,
            );
        }
        Ok(ResolvedCatalog {
            zones,
            instance_types: resolved,
        })
    }

    /// The zones: the listed ones (checked), else the offerings' zones in order of first
    /// appearance, plus kwok's four when a type lists no offerings.
    fn zones(&self, types: &[CatalogInstanceType]) -> Result<Vec<String>, CatalogError> {
        if let Some(zones) = &self.zones {
            if zones.is_empty() {
                return Err(CatalogError("zones: at least one zone is needed".into()));
            }
            if zones.iter().any(String::is_empty) {
                return Err(CatalogError("zones: a zone name is empty".into()));
            }
            if zones.iter().collect::<BTreeSet<_>>().len() != zones.len() {
                return Err(CatalogError("zones: a zone is listed twice".into()));
            }
            return Ok(zones.clone());
        }
        let mut zones = Vec::new();
        if types.iter().any(|t| t.offerings.is_none()) {
            zones = default_zones();
        }
        for o in types.iter().flat_map(|t| t.offerings.iter().flatten()) {
            if !o.zone.is_empty() && !zones.contains(&o.zone) {
                zones.push(o.zone.clone());
            }
        }
        Ok(zones)
    }

    /// The instance types in the core's form, as a cloud plugin would return them.
    pub fn instance_types(&self) -> Result<Vec<InstanceType>, CatalogError> {
        let resolved = self.resolve()?;
        resolved
            .instance_types
            .iter()
            .enumerate()
            .map(|(i, t)| {
                t.to_contract()
                    .to_core()
                    .map(InstanceType::with_offering_requirements)
                    .map_err(|e| CatalogError(format!("instanceTypes[{i}] ({}): {e}", t.name)))
            })
            .collect()
    }

    /// Upstream's label policy plus this catalog's well-known labels.
    pub fn label_policy(&self) -> LabelPolicy {
        self.well_known_labels
            .iter()
            .fold(LabelPolicy::default(), |p, k| p.with_well_known(k.clone()))
    }
}

fn resolve_type(
    t: &CatalogInstanceType,
    zones: &[String],
    zones_listed: bool,
    overhead: &CatalogOverhead,
) -> Result<ResolvedInstanceType, String> {
    let mut capacity = BTreeMap::new();
    let pods = t.pods.as_ref().map_or("110", QuantityText::as_str);
    let storage = t
        .ephemeral_storage
        .as_ref()
        .map_or("20Gi", QuantityText::as_str);
    for (field, resource, text) in [
        ("cpu", "cpu", t.cpu.as_str()),
        ("memory", "memory", t.memory.as_str()),
        ("pods", "pods", pods),
        ("ephemeralStorage", "ephemeral-storage", storage),
    ] {
        check_quantity(field, resource, text)?;
        capacity.insert(resource.to_string(), text.to_string());
    }
    for (name, q) in &t.resources {
        if capacity.contains_key(name) {
            return Err(format!("resources.{name}: set {name} with its own field"));
        }
        check_quantity(&format!("resources.{name}"), name, q.as_str())?;
        capacity.insert(name.clone(), q.0.clone());
    }
    let overhead = match &t.overhead {
        Some(own) => {
            own.check("overhead")?;
            own.clone()
        }
        None => overhead.clone(),
    };
    let mut requirements = Vec::with_capacity(t.requirements.len());
    for (i, r) in t.requirements.iter().enumerate() {
        let operator: Operator = r
            .operator
            .parse()
            .map_err(|e| format!("requirements[{i}].operator: {e}"))?;
        requirements.push(contract::Requirement {
            key: r.key.clone(),
            operator,
            values: r.values.clone(),
            min_values: r.min_values,
        });
    }

    let cpu = Unit::Milli
        .parse(t.cpu.as_str())
        .map_err(|e| format!("cpu: {e}"))? as f64
        / 1000.0;
    let memory = parse_value(t.memory.as_str()).map_err(|e| format!("memory: {e}"))?;
    let base_price = t.price.unwrap_or_else(|| on_demand_price(cpu, memory));
    check_price("price", base_price)?;
    let default_price = |capacity_type: &str| {
        if capacity_type == "spot" {
            base_price * SPOT_FACTOR
        } else {
            base_price
        }
    };
    let offerings = match &t.offerings {
        None => zones
            .iter()
            .flat_map(|zone| {
                ["on-demand", "spot"].map(|ct| ResolvedOffering {
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
                if o.zone.is_empty() {
                    return Err(format!("offerings[{j}].zone: must not be empty"));
                }
                if zones_listed && !zones.contains(&o.zone) {
                    return Err(format!(
                        "offerings[{j}].zone: {:?} is not one of the catalog's zones ({})",
                        o.zone,
                        zones.join(", ")
                    ));
                }
                if !CAPACITY_TYPES.contains(&o.capacity_type.as_str()) {
                    return Err(format!(
                        "offerings[{j}].capacityType: {:?} is not one of {}",
                        o.capacity_type,
                        CAPACITY_TYPES.join(", ")
                    ));
                }
                if !seen.insert((o.zone.as_str(), o.capacity_type.as_str())) {
                    return Err(format!(
                        "offerings[{j}]: {} {} is listed twice",
                        o.zone, o.capacity_type
                    ));
                }
                let price = o.price.unwrap_or_else(|| default_price(&o.capacity_type));
                check_price(&format!("offerings[{j}].price"), price)?;
                out.push(ResolvedOffering {
                    zone: o.zone.clone(),
                    capacity_type: o.capacity_type.clone(),
                    price,
                    available: o.available,
                });
            }
            out
        }
    };
    Ok(ResolvedInstanceType {
        name: t.name.clone(),
        capacity,
        overhead,
        arch: t
            .arch
            .as_ref()
            .map_or_else(|| vec!["amd64".to_string()], OneOrMany::values),
        os: t
            .os
            .as_ref()
            .map_or_else(|| vec!["linux".to_string()], OneOrMany::values),
        labels: t.labels.clone(),
        requirements,
        offerings,
    })
}

fn check_price(field: &str, price: f64) -> Result<(), String> {
    if price.is_finite() && price >= 0.0 {
        Ok(())
    } else {
        Err(format!(
            "{field}: {price} must be a finite, non-negative number"
        ))
    }
}

impl ResolvedInstanceType {
    /// The type in the form a cloud plugin returns: architecture, OS and labels become `In`
    /// requirements, followed by the declared requirements.
    pub fn to_contract(&self) -> contract::InstanceType {
        let in_values = |key: &str, values: Vec<String>| contract::Requirement {
            key: key.to_string(),
            operator: Operator::In,
            values,
            min_values: None,
        };
        let mut requirements = vec![
            in_values(labels::ARCH_LABEL, self.arch.clone()),
            in_values(labels::OS_LABEL, self.os.clone()),
        ];
        requirements.extend(
            self.labels
                .iter()
                .map(|(k, v)| in_values(k, vec![v.clone()])),
        );
        requirements.extend(self.requirements.iter().cloned());
        let resources = |list: &BTreeMap<String, QuantityText>| {
            list.iter()
                .map(|(name, q)| contract::Resource {
                    name: name.clone(),
                    quantity: q.0.clone(),
                })
                .collect()
        };
        contract::InstanceType {
            name: self.name.clone(),
            requirements,
            capacity: self
                .capacity
                .iter()
                .map(|(name, q)| contract::Resource {
                    name: name.clone(),
                    quantity: q.clone(),
                })
                .collect(),
            overhead: contract::Overhead {
                kube_reserved: resources(&self.overhead.kube_reserved),
                system_reserved: resources(&self.overhead.system_reserved),
                eviction_threshold: resources(&self.overhead.eviction_threshold),
            },
            offerings: self
                .offerings
                .iter()
                .map(|o| contract::Offering {
                    zone: o.zone.clone(),
                    capacity_type: o.capacity_type.clone(),
                    price: Some(o.price),
                    available: o.available,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Catalog {
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn a_catalog_serializes_as_it_reads() {
        let text = r#"{"zones":["nova"],"instanceTypes":[{"name":"a","cpu":"2","memory":"4Gi","price":0.5}],"wellKnownLabels":["size"]}"#;
        let c = parse(text);
        assert_eq!(serde_json::to_string(&c).unwrap(), text);
        assert!(
            serde_json::from_str::<Catalog>(r#"{"zone": []}"#)
                .unwrap_err()
                .to_string()
                .contains("zone")
        );
    }

    #[test]
    fn an_empty_catalog_is_the_kwok_shaped_one() {
        let c = parse("{}").resolve().unwrap();
        assert_eq!(c.zones, default_zones());
        assert_eq!(c.instance_types.len(), 72);
        let c1 = c
            .instance_types
            .iter()
            .find(|t| t.name == "c-1x-amd64-linux")
            .unwrap();
        assert_eq!(c1.capacity["memory"], "2Gi");
        assert_eq!(c1.capacity["pods"], "16");
        assert_eq!(c1.capacity["ephemeral-storage"], "20Gi");
        assert_eq!(c1.overhead, CatalogOverhead::kwok());
        assert_eq!(c1.offerings.len(), 8);
        let on_demand = c1
            .offerings
            .iter()
            .find(|o| o.capacity_type == "on-demand")
            .unwrap()
            .price;
        assert!((on_demand - 0.027147483648).abs() < 1e-12, "{on_demand}");
        let spot = c1
            .offerings
            .iter()
            .find(|o| o.capacity_type == "spot")
            .unwrap()
            .price;
        assert!((spot - on_demand * SPOT_FACTOR).abs() < 1e-12, "{spot}");
    }

    #[test]
    fn the_list_form_takes_numbers_and_strings_and_names_the_zones_of_its_offerings() {
        let c = parse(
            r#"[{"name": "a", "cpu": 2, "memory": "4Gi", "pods": "5", "resources": {"nvidia.com/gpu": 1},
                 "offerings": [{"zone": "z1", "capacityType": "spot"}, {"zone": "z2", "capacityType": "on-demand", "price": 0.5}]}]"#,
        )
        .resolve()
        .unwrap();
        assert_eq!(c.zones, ["z1", "z2"]);
        let a = &c.instance_types[0];
        assert_eq!(a.capacity["cpu"], "2");
        assert_eq!(a.capacity["pods"], "5");
        assert_eq!(a.capacity["nvidia.com/gpu"], "1");
        let kwok = on_demand_price(2.0, 4 << 30);
        assert!((a.offerings[0].price - kwok * SPOT_FACTOR).abs() < 1e-12);
        assert_eq!(a.offerings[1].price, 0.5);
    }

    #[test]
    fn a_type_price_sets_on_demand_and_spot_follows_it() {
        let c = parse(r#"{"zones": ["nova"], "instanceTypes": [{"name": "a", "cpu": "1", "memory": "1Gi", "price": 1.0}]}"#).resolve().unwrap();
        let prices: Vec<(&str, f64)> = c.instance_types[0]
            .offerings
            .iter()
            .map(|o| (o.capacity_type.as_str(), o.price))
            .collect();
        assert_eq!(prices, [("on-demand", 1.0), ("spot", 0.7)]);
    }

    #[test]
    fn a_type_overhead_replaces_the_catalog_overhead() {
        let c = parse(
            r#"{"overhead": {"systemReserved": {"cpu": "1"}},
                "instanceTypes": [{"name": "a", "cpu": 4, "memory": "8Gi"}, {"name": "b", "cpu": 4, "memory": "8Gi", "overhead": {}}]}"#,
        )
        .resolve()
        .unwrap();
        assert_eq!(
            c.instance_types[0].overhead.system_reserved["cpu"].as_str(),
            "1"
        );
        assert!(c.instance_types[0].overhead.kube_reserved.is_empty());
        assert_eq!(c.instance_types[1].overhead, CatalogOverhead::default());
    }

    #[test]
    fn errors_name_the_entry_and_field() {
        let cases = [
            (
                r#"[{"name": "a", "cpu": 1, "memory": "lots"}]"#,
                "instanceTypes[0] (a).memory: \"lots\" is not a quantity",
            ),
            (
                r#"[{"name": "a", "cpu": 1, "memory": "1Gi", "offerings": [{"zone": "z", "capacityType": "ondemand"}]}]"#,
                "instanceTypes[0] (a).offerings[0].capacityType",
            ),
            (
                r#"[{"name": "a", "cpu": 1, "memory": "1Gi"}, {"name": "a", "cpu": 1, "memory": "1Gi"}]"#,
                "instanceTypes[1] (a).name: listed twice",
            ),
            (
                r#"[{"name": "a", "cpu": 1, "memory": "1Gi", "requirements": [{"key": "k", "operator": "Within"}]}]"#,
                "instanceTypes[0] (a).requirements[0].operator",
            ),
            (
                r#"[{"name": "a", "cpu": 1, "memory": "1Gi", "price": -1}]"#,
                "instanceTypes[0] (a).price: -1",
            ),
            (
                r#"[{"name": "a", "cpu": 1, "memory": "1Gi", "resources": {"cpu": 2}}]"#,
                "instanceTypes[0] (a).resources.cpu: set cpu with its own field",
            ),
            (
                r#"{"zones": ["nova"], "instanceTypes": [{"name": "a", "cpu": 1, "memory": "1Gi", "offerings": [{"zone": "nowhere", "capacityType": "spot"}]}]}"#,
                "offerings[0].zone: \"nowhere\" is not one of the catalog's zones",
            ),
            (
                r#"{"zones": [], "instanceTypes": []}"#,
                "zones: at least one zone",
            ),
            (
                r#"{"overhead": {"kubeReserved": {"memory": "lots"}}}"#,
                "overhead.kubeReserved.memory",
            ),
        ];
        for (text, expected) in cases {
            let e = parse(text).resolve().unwrap_err().to_string();
            assert!(e.contains(expected), "{text}: {e}");
        }
        let unknown = serde_json::from_str::<Catalog>(
            r#"[{"name": "a", "cpu": 1, "memory": "1Gi", "offering": []}]"#,
        )
        .unwrap_err();
        assert!(unknown.to_string().contains("offering"), "{unknown}");
    }

    #[test]
    fn instance_types_carry_arch_os_labels_requirements_and_offering_zones() {
        let c = parse(
            r#"{"wellKnownLabels": ["size"], "instanceTypes": [{"name": "a", "cpu": 2, "memory": "4Gi", "arch": ["amd64", "arm64"],
                 "labels": {"size": "small"}, "requirements": [{"key": "special", "operator": "DoesNotExist"}],
                 "offerings": [{"zone": "z", "capacityType": "on-demand", "price": 0.1}]}]}"#,
        );
        let types = c.instance_types().unwrap();
        let r = types[0].requirements();
        assert_eq!(r.get(labels::ARCH_LABEL).unwrap().values().len(), 2);
        assert!(r.get("size").unwrap().has("small"));
        assert!(r.get(labels::ZONE_LABEL).unwrap().has("z"));
        assert_eq!(r.get("special").unwrap().operator(), Operator::DoesNotExist);
        assert!(c.label_policy().is_well_known("size"));
        assert_eq!(types[0].allocatable().get("cpu"), 1900);
    }
}
