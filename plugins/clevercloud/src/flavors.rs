//! CKE's node flavors: the built-in sizing seed, the operator's overlay, and the instance
//! types the host schedules with.
//!
//! CKE publishes no sizing API: the seed holds each flavor's vCPUs and the memory the kernel
//! of a worker actually shows (measured on live clusters for 2XS–M, estimated for L and XL).
//! The host's learned capacity replaces these estimates once a node of the flavor has joined.

use joinery_plugin_sdk::cloud::{InstanceType, Offering, Overhead, Requirement, Resource};
use serde::Deserialize;

/// The instance-type label.
pub const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";
/// CKE's flavor label on its Nodes.
pub const FLAVOR_LABEL: &str = "clever-cloud.com/flavor";
/// CKE's node-role label on its Nodes.
pub const ROLE_LABEL: &str = "clever-cloud.com/cluster-node-role";
/// The vCPU count label of an instance type (as the upstream provider names it).
pub const CPU_LABEL: &str = "karpenter.clever-cloud.com/instance-cpu";
/// The memory label of an instance type, in KiB.
pub const MEMORY_LABEL: &str = "karpenter.clever-cloud.com/instance-memory";
/// Capacity type of every CKE node.
pub const ON_DEMAND: &str = "on-demand";
/// Ephemeral storage of every flavor, in KiB.
pub const EPHEMERAL_STORAGE_KI: u64 = 40_971_488;
/// The kubelet's hard eviction threshold on ephemeral storage (10 %), in KiB.
pub const EPHEMERAL_EVICTION_KI: u64 = 4_097_149;
/// Pods per node.
pub const MAX_PODS: u64 = 110;
/// Memory the kubelet reserves for Kubernetes daemons.
pub const KUBE_RESERVED_MEMORY: &str = "100Mi";

/// One flavor.
#[derive(Clone, Debug, PartialEq)]
pub struct Flavor {
    /// Name, upper case (`2XS` … `XL`); the instance type's name.
    pub name: String,
    /// vCPUs.
    pub cpu: u64,
    /// Memory the node reports, in KiB.
    pub memory_ki: u64,
    /// Price per hour in EUR when the operator pinned one (the pricing plugin prices the rest).
    pub price_hourly: Option<f64>,
}

/// The built-in seed: (name, vCPUs, memory KiB), smallest first.
const SEED: [(&str, u64, u64); 6] = [
    ("2XS", 4, 3_911_884),
    ("XS", 6, 7_937_580),
    ("S", 8, 11_957_148),
    ("M", 10, 15_988_992),
    ("L", 12, 23_983_488),
    ("XL", 16, 31_977_984),
];

/// An entry of the `flavors` overlay: pins a seed flavor's values or adds a flavor.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FlavorOverlay {
    /// Flavor name, as CKE spells it.
    pub name: String,
    /// vCPUs.
    #[serde(default)]
    pub cpu: Option<u64>,
    /// Memory the node reports, in KiB.
    #[serde(default)]
    pub memory_ki: Option<u64>,
    /// Price per hour (EUR).
    #[serde(default)]
    pub price_hourly: Option<f64>,
}

/// The catalog: the seed with the overlay applied, smallest first. A new flavor must give
/// `cpu`, `memoryKi` and `priceHourly`; the error names the entry.
pub fn catalog(overlay: &[FlavorOverlay]) -> Result<Vec<Flavor>, String> {
    let mut flavors: Vec<Flavor> = SEED
        .iter()
        .map(|(name, cpu, memory_ki)| Flavor {
            name: (*name).into(),
            cpu: *cpu,
            memory_ki: *memory_ki,
            price_hourly: None,
        })
        .collect();
    for (i, entry) in overlay.iter().enumerate() {
        let field = |name: &str| format!("flavors[{i}].{name}");
        if entry.cpu == Some(0) || entry.memory_ki == Some(0) {
            return Err(format!(
                "{}: cpu and memoryKi must be positive",
                field("name")
            ));
        }
        if entry
            .price_hourly
            .is_some_and(|p| !p.is_finite() || p < 0.0)
        {
            return Err(format!(
                "{}: must be a non-negative number",
                field("priceHourly")
            ));
        }
        match flavors.iter_mut().find(|f| f.name == entry.name) {
            Some(flavor) => {
                flavor.cpu = entry.cpu.unwrap_or(flavor.cpu);
                flavor.memory_ki = entry.memory_ki.unwrap_or(flavor.memory_ki);
                flavor.price_hourly = entry.price_hourly.or(flavor.price_hourly);
            }
            None => match (entry.cpu, entry.memory_ki, entry.price_hourly) {
                (Some(cpu), Some(memory_ki), Some(price)) if !entry.name.is_empty() => flavors
                    .push(Flavor {
                        name: entry.name.clone(),
                        cpu,
                        memory_ki,
                        price_hourly: Some(price),
                    }),
                _ => {
                    return Err(format!(
                        "{}: {:?} is not a built-in flavor, so it needs cpu, memoryKi and priceHourly",
                        field("name"),
                        entry.name
                    ));
                }
            },
        }
    }
    flavors.sort_by_key(|f| (f.cpu, f.memory_ki));
    Ok(flavors)
}

impl Flavor {
    /// The labels a node of this flavor carries that describe the type.
    pub fn labels(&self, zone: &str) -> Vec<(String, String)> {
        vec![
            (INSTANCE_TYPE_LABEL.into(), self.name.clone()),
            ("kubernetes.io/arch".into(), "amd64".into()),
            ("kubernetes.io/os".into(), "linux".into()),
            ("topology.kubernetes.io/zone".into(), zone.into()),
            ("topology.kubernetes.io/region".into(), zone.into()),
            ("karpenter.sh/capacity-type".into(), ON_DEMAND.into()),
            (FLAVOR_LABEL.into(), self.name.clone()),
            (ROLE_LABEL.into(), "worker".into()),
            (CPU_LABEL.into(), self.cpu.to_string()),
            (MEMORY_LABEL.into(), self.memory_ki.to_string()),
        ]
    }

    /// Capacity: cpu, memory, ephemeral storage, pods.
    pub fn capacity(&self) -> Vec<Resource> {
        vec![
            Resource::new("cpu", self.cpu.to_string()),
            Resource::new("memory", format!("{}Ki", self.memory_ki)),
            Resource::new("ephemeral-storage", format!("{EPHEMERAL_STORAGE_KI}Ki")),
            Resource::new("pods", MAX_PODS.to_string()),
        ]
    }

    /// What the kubelet of a CKE worker keeps for itself.
    pub fn overhead(&self) -> Overhead {
        Overhead {
            kube_reserved: vec![Resource::new("memory", KUBE_RESERVED_MEMORY)],
            system_reserved: Vec::new(),
            eviction_threshold: vec![Resource::new(
                "ephemeral-storage",
                format!("{EPHEMERAL_EVICTION_KI}Ki"),
            )],
        }
    }

    /// What a node of this flavor leaves allocatable of resource `name`, in thousandths of
    /// a unit (as [`parse_milli`](joinery_plugin_sdk::quantity::parse_milli) reads requests);
    /// `None` for a resource the flavor does not have.
    pub fn allocatable_milli(&self, name: &str) -> Option<u64> {
        let ki = 1024 * 1000;
        match name {
            "cpu" => Some(self.cpu * 1000),
            "memory" => Some((self.memory_ki * ki).saturating_sub(100 * 1024 * ki)),
            "ephemeral-storage" => Some((EPHEMERAL_STORAGE_KI - EPHEMERAL_EVICTION_KI) * ki),
            "pods" => Some(MAX_PODS * 1000),
            _ => None,
        }
    }

    /// The type as the host sees it: one on-demand offering in `zone`.
    pub fn instance_type(&self, zone: &str) -> InstanceType {
        let requirements = self
            .labels(zone)
            .into_iter()
            .filter(|(k, _)| {
                k != INSTANCE_TYPE_LABEL
                    && k != "topology.kubernetes.io/zone"
                    && k != "karpenter.sh/capacity-type"
            })
            .map(|(k, v)| Requirement::is_in(k, &[v.as_str()]))
            .collect();
        InstanceType {
            name: self.name.clone(),
            requirements,
            capacity: self.capacity(),
            overhead: self.overhead(),
            offerings: vec![Offering {
                zone: zone.into(),
                capacity_type: ON_DEMAND.into(),
                price: self.price_hourly,
                available: true,
            }],
        }
    }
}
