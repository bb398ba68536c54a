//! Instance types as Karpenter sees them (labels, capacity, overhead, offerings) and the
//! choice of what to launch for a NodeClaim.

use std::collections::BTreeMap;

use joinery_plugin_sdk::cloud::{
    InstanceType, NodeClaim, Offering, Overhead, Requirement, Resource,
};
use joinery_plugin_sdk::requirements::{self, LabelRequirement};

use crate::api;
use crate::spec::{Kubelet, Spec};

/// Label prefix of the provider's instance-type labels.
pub const PREFIX: &str = "karpenter.k8s.exoscale/";
/// vCPUs.
pub const LABEL_CPU: &str = "karpenter.k8s.exoscale/instance-cpu";
/// Memory in MiB.
pub const LABEL_MEMORY: &str = "karpenter.k8s.exoscale/instance-memory";
/// Family, e.g. `standard`.
pub const LABEL_FAMILY: &str = "karpenter.k8s.exoscale/instance-family";
/// Size, e.g. `large`.
pub const LABEL_SIZE: &str = "karpenter.k8s.exoscale/instance-size";
/// GPUs.
pub const LABEL_GPU_COUNT: &str = "karpenter.k8s.exoscale/instance-gpu-count";
/// The extended resource GPUs are advertised as.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";
/// Zone label.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// Region label (the Exoscale zone too: there is nothing above a zone).
pub const REGION_LABEL: &str = "topology.kubernetes.io/region";
/// Instance-type label.
pub const TYPE_LABEL: &str = "node.kubernetes.io/instance-type";
/// Capacity-type label.
pub const CAPACITY_TYPE_LABEL: &str = "karpenter.sh/capacity-type";
/// Exoscale sells only on-demand capacity.
pub const ON_DEMAND: &str = "on-demand";

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

pub use joinery_plugin_sdk::quantity::parse_milli;

/// The labels of a type (without zone, which depends on the offering).
pub fn type_labels(t: &api::InstanceType) -> BTreeMap<String, String> {
    let pairs = [
        (TYPE_LABEL, t.name()),
        ("kubernetes.io/arch", "amd64".to_string()),
        ("kubernetes.io/os", "linux".to_string()),
        (LABEL_CPU, t.cpus.to_string()),
        (LABEL_MEMORY, (t.memory / MIB).to_string()),
        (LABEL_FAMILY, t.family.clone()),
        (LABEL_SIZE, t.size.clone()),
        (LABEL_GPU_COUNT, t.gpus.to_string()),
    ];
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// Capacity of a type with the class's disk (when known) and pod limit: cpu, memory, ephemeral-storage,
/// pods and, for GPU types, `nvidia.com/gpu`.
pub fn capacity(t: &api::InstanceType, disk_gib: Option<u64>, max_pods: u64) -> Vec<Resource> {
    let mut out = vec![
        Resource::new("cpu", t.cpus.to_string()),
        Resource::new("memory", format!("{}Mi", t.memory / MIB)),
        Resource::new("pods", max_pods.to_string()),
    ];
    if let Some(disk_gib) = disk_gib {
        out.insert(
            2,
            Resource::new("ephemeral-storage", format!("{disk_gib}Gi")),
        );
    }
    if t.gpus > 0 {
        out.push(Resource::new(GPU_RESOURCE, t.gpus.to_string()));
    }
    out
}

fn reserved(given: Option<&BTreeMap<String, String>>, defaults: &[(&str, &str)]) -> Vec<Resource> {
    match given {
        Some(map) => map
            .iter()
            .map(|(k, v)| Resource::new(k.clone(), v.clone()))
            .collect(),
        None => defaults
            .iter()
            .map(|(k, v)| Resource::new(*k, *v))
            .collect(),
    }
}

/// An eviction threshold as bytes: an absolute quantity, or a percentage of `total`.
fn threshold(value: &str, total: u64) -> Option<u64> {
    match value.trim().strip_suffix('%') {
        // Thousandths of a percent: bytes = total × milli-percent / 100 000, rounded up.
        Some(pct) => parse_milli(pct)
            .and_then(|mp| total.checked_mul(mp))
            .map(|x| x.div_ceil(100_000)),
        None => parse_milli(value).map(|m| m / 1000),
    }
}

/// Overhead from the class's kubelet settings, or the defaults documented on [`Kubelet`].
pub fn overhead(kubelet: Option<&Kubelet>, memory: u64, disk_gib: u64) -> Overhead {
    let kube_reserved = reserved(
        kubelet.and_then(|k| k.kube_reserved.as_ref()),
        &[
            ("cpu", "200m"),
            ("memory", "300Mi"),
            ("ephemeral-storage", "1Gi"),
        ],
    );
    let system_reserved = reserved(
        kubelet.and_then(|k| k.system_reserved.as_ref()),
        &[
            ("cpu", "100m"),
            ("memory", "100Mi"),
            ("ephemeral-storage", "3Gi"),
        ],
    );
    let eviction = match kubelet.and_then(|k| k.eviction_hard.as_ref()) {
        None => vec![Resource::new("memory", "100Mi")],
        Some(signals) => {
            let mut out = Vec::new();
            if let Some(bytes) = signals
                .get("memory.available")
                .and_then(|v| threshold(v, memory))
            {
                out.push(Resource::new("memory", bytes.to_string()));
            }
            if let Some(bytes) = signals
                .get("nodefs.available")
                .and_then(|v| threshold(v, disk_gib * GIB))
            {
                out.push(Resource::new("ephemeral-storage", bytes.to_string()));
            }
            out
        }
    };
    Overhead {
        kube_reserved,
        system_reserved,
        eviction_threshold: eviction,
    }
}

/// Whether the class lets this type be used at all.
pub fn allowed(t: &api::InstanceType, spec: &Spec) -> bool {
    t.authorized != Some(false)
        && (spec.instance_types.is_empty() || spec.instance_types.iter().any(|n| *n == t.name()))
}

/// Converts a type for the host: offerings in the class's zones that offer it, on-demand,
/// no price (Exoscale publishes none; the host's pricing plugin prices them).
pub fn to_instance_type(t: &api::InstanceType, spec: &Spec, zones: &[String]) -> InstanceType {
    let disk = spec.disk_size.unwrap_or(crate::spec::DISK_MIN);
    let kubelet = spec.kubelet.as_ref();
    let max_pods = kubelet.and_then(|k| k.max_pods).unwrap_or(110);
    let offered: Vec<&String> = zones.iter().filter(|z| t.zones.contains(z)).collect();
    let mut requirements: Vec<Requirement> = type_labels(t)
        .into_iter()
        .filter(|(k, _)| k != TYPE_LABEL)
        .map(|(k, v)| Requirement::is_in(k, &[v.as_str()]))
        .collect();
    let regions: Vec<&str> = offered.iter().map(|z| z.as_str()).collect();
    requirements.push(Requirement::is_in(REGION_LABEL, &regions));
    InstanceType {
        name: t.name(),
        requirements,
        capacity: capacity(t, Some(disk), max_pods),
        overhead: overhead(kubelet, t.memory, disk),
        offerings: offered
            .into_iter()
            .map(|zone| Offering {
                zone: zone.clone(),
                capacity_type: ON_DEMAND.into(),
                price: None,
                available: true,
            })
            .collect(),
    }
}

/// Milli-units of a resource a type leaves allocatable.
fn allocatable(t: &api::InstanceType, spec: &Spec, name: &str) -> u64 {
    let disk = spec.disk_size.unwrap_or(crate::spec::DISK_MIN);
    let kubelet = spec.kubelet.as_ref();
    let total: u64 = capacity(
        t,
        Some(disk),
        kubelet.and_then(|k| k.max_pods).unwrap_or(110),
    )
    .iter()
    .filter(|r| r.name == name)
    .filter_map(|r| parse_milli(&r.quantity))
    .sum();
    let o = overhead(kubelet, t.memory, disk);
    let used: u64 = [o.kube_reserved, o.system_reserved, o.eviction_threshold]
        .iter()
        .flatten()
        .filter(|r| r.name == name)
        .filter_map(|r| parse_milli(&r.quantity))
        .sum();
    total.saturating_sub(used)
}

/// Whether the claim's requests fit the type's allocatable.
pub fn fits(t: &api::InstanceType, spec: &Spec, requests: &[Resource]) -> bool {
    requests.iter().all(|r| match parse_milli(&r.quantity) {
        Some(0) => true,
        Some(wanted) => allocatable(t, spec, &r.name) >= wanted,
        None => false,
    })
}

/// Whether the type satisfies the claim's requirements on instance-type labels (zone and
/// capacity type are checked per offering; keys the cloud does not set are not its business).
pub fn satisfies(t: &api::InstanceType, claim: &NodeClaim) -> bool {
    let labels = type_labels(t);
    claim.requirements.iter().all(|r| {
        // Our instance labels; other keys of our prefix (the host's
        // `karpenter.k8s.exoscale/exoscalenodeclass`) describe the claim, not the type.
        let ours = labels.contains_key(&r.key)
            || r.key
                .strip_prefix(PREFIX)
                .is_some_and(|k| k.starts_with("instance-"));
        match r.key.as_str() {
            ZONE_LABEL | REGION_LABEL => true,
            CAPACITY_TYPE_LABEL => r.accepts(Some(ON_DEMAND)),
            _ if ours => r.accepts(labels.get(&r.key).map(String::as_str)),
            _ => true,
        }
    })
}

/// What to launch: the smallest type (fewest GPUs, then vCPUs, then memory: the cheapest on
/// Exoscale's list, whose prices grow with size) among those the claim's instance-type
/// requirement lists, that the class allows, the requirements accept and the requests fit,
/// in the first of the class's zones that offers it and the claim allows. The claim's values
/// carry no price order (they arrive as a set). `None` when nothing qualifies.
pub fn pick<'a>(
    types: &'a [api::InstanceType],
    spec: &Spec,
    zones: &[String],
    claim: &NodeClaim,
) -> Option<(&'a api::InstanceType, String)> {
    let listed = requirements::allowed_values(&claim.requirements, TYPE_LABEL);
    let mut ordered: Vec<&api::InstanceType> = types
        .iter()
        .filter(|t| {
            listed
                .as_ref()
                .is_none_or(|names| names.contains(&t.name().as_str()))
        })
        .collect();
    ordered.sort_by_key(|t| (t.gpus, t.cpus, t.memory));
    let zone_ok = |zone: &str| {
        requirements::allows(&claim.requirements, ZONE_LABEL, zone)
            && requirements::allows(&claim.requirements, REGION_LABEL, zone)
    };
    ordered
        .into_iter()
        .filter(|t| {
            allowed(t, spec) && satisfies(t, claim) && fits(t, spec, &claim.resource_requests)
        })
        .find_map(|t| {
            zones
                .iter()
                .find(|z| t.zones.contains(z) && zone_ok(z))
                .map(|z| (t, z.clone()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use joinery_plugin_sdk::cloud::Operator;

    fn kind(
        family: &str,
        size: &str,
        cpus: u64,
        memory_mib: u64,
        gpus: u64,
        zones: &[&str],
    ) -> api::InstanceType {
        api::InstanceType {
            id: format!("id-{family}-{size}"),
            family: family.into(),
            size: size.into(),
            cpus,
            gpus,
            memory: memory_mib * MIB,
            authorized: Some(true),
            zones: zones.iter().map(|z| z.to_string()).collect(),
        }
    }

    fn catalog() -> Vec<api::InstanceType> {
        vec![
            kind("standard", "large", 4, 8192, 0, &["ch-gva-2", "de-fra-1"]),
            kind("standard", "small", 2, 2048, 0, &["ch-gva-2", "de-fra-1"]),
            kind("gpua30", "small", 12, 57_344, 1, &["ch-gva-2"]),
            api::InstanceType {
                authorized: Some(false),
                ..kind("gpu3", "small", 12, 57_344, 1, &["ch-gva-2", "de-fra-1"])
            },
        ]
    }

    fn spec(json: &str) -> Spec {
        serde_json::from_str(json).unwrap()
    }

    fn claim(requirements: Vec<Requirement>, requests: Vec<Resource>) -> NodeClaim {
        NodeClaim {
            name: "c".into(),
            uid: "u".into(),
            node_pool: "p".into(),
            labels: vec![],
            annotations: vec![],
            taints: vec![],
            startup_taints: vec![],
            requirements,
            resource_requests: requests,
            provider_id: None,
        }
    }

    #[test]
    fn quantities_parse() {
        assert_eq!(parse_milli("1500m"), Some(1500));
        assert_eq!(parse_milli("2"), Some(2000));
        assert_eq!(parse_milli("1.5Gi"), Some(1_610_612_736_000));
        assert_eq!(parse_milli("0.5"), Some(500));
        assert_eq!(parse_milli("99999999999999999999"), None);
        assert_eq!(parse_milli("x"), None);
        assert_eq!(parse_milli(""), None);
    }

    #[test]
    fn instance_types_carry_the_provider_labels_and_gpus() {
        let zones = vec!["ch-gva-2".to_string(), "de-fra-1".to_string()];
        let s = spec(r#"{"diskSize": 50, "kubelet": {"maxPods": 58}}"#);
        let gpu = to_instance_type(&catalog()[2], &s, &zones);
        assert_eq!(gpu.name, "gpua30.small");
        let value = |key: &str| {
            gpu.requirements
                .iter()
                .find(|r| r.key == key)
                .map(|r| r.values.clone())
        };
        assert_eq!(value(LABEL_CPU), Some(vec!["12".to_string()]));
        assert_eq!(value(LABEL_MEMORY), Some(vec!["57344".to_string()]));
        assert_eq!(value(LABEL_FAMILY), Some(vec!["gpua30".to_string()]));
        assert_eq!(value(LABEL_SIZE), Some(vec!["small".to_string()]));
        assert_eq!(value(LABEL_GPU_COUNT), Some(vec!["1".to_string()]));
        assert_eq!(value(REGION_LABEL), Some(vec!["ch-gva-2".to_string()]));
        assert!(gpu.capacity.contains(&Resource::new(GPU_RESOURCE, "1")));
        assert!(
            gpu.capacity
                .contains(&Resource::new("ephemeral-storage", "50Gi"))
        );
        assert!(gpu.capacity.contains(&Resource::new("pods", "58")));
        assert_eq!(gpu.offerings.len(), 1);
        assert_eq!(gpu.offerings[0].price, None, "Exoscale publishes no prices");
        assert_eq!(gpu.offerings[0].capacity_type, "on-demand");
        let large = to_instance_type(&catalog()[0], &s, &zones);
        assert_eq!(large.offerings.len(), 2);
        assert!(!large.capacity.iter().any(|r| r.name == GPU_RESOURCE));
    }

    #[test]
    fn overhead_follows_the_kubelet_settings() {
        let defaults = overhead(None, 8192 * MIB, 50);
        assert!(
            defaults
                .kube_reserved
                .contains(&Resource::new("memory", "300Mi"))
        );
        assert_eq!(
            defaults.eviction_threshold,
            vec![Resource::new("memory", "100Mi")]
        );
        let kubelet: Kubelet = serde_json::from_str(
            r#"{"kubeReserved": {"cpu": "1"}, "evictionHard": {"memory.available": "10%", "nodefs.available": "5Gi"}}"#,
        )
        .unwrap();
        let custom = overhead(Some(&kubelet), 1000, 50);
        assert_eq!(custom.kube_reserved, vec![Resource::new("cpu", "1")]);
        assert_eq!(
            custom.eviction_threshold,
            vec![
                Resource::new("memory", "100"),
                Resource::new("ephemeral-storage", (5 * GIB).to_string())
            ]
        );
    }

    #[test]
    fn the_first_fitting_allowed_type_and_zone_is_launched() {
        let zones = vec!["de-fra-1".to_string(), "ch-gva-2".to_string()];
        let types = catalog();
        let any = spec(r#"{"diskSize": 50}"#);
        let (t, zone) = pick(&types, &any, &zones, &claim(vec![], vec![])).unwrap();
        assert_eq!(
            (t.name().as_str(), zone.as_str()),
            ("standard.small", "de-fra-1")
        );

        // The claim's list restricts (its order means nothing: the smallest type wins); the
        // zone requirement narrows.
        let order = Requirement::is_in(
            TYPE_LABEL,
            &["gpu3.small", "gpua30.small", "standard.large"],
        );
        let (t, _) = pick(&types, &any, &zones, &claim(vec![order.clone()], vec![])).unwrap();
        assert_eq!(
            t.name(),
            "standard.large",
            "the smallest listed type, not the first listed"
        );
        let gpus = Requirement::is_in(TYPE_LABEL, &["gpu3.small", "gpua30.small"]);
        let (t, zone) = pick(&types, &any, &zones, &claim(vec![gpus.clone()], vec![])).unwrap();
        assert_eq!(
            (t.name().as_str(), zone.as_str()),
            ("gpua30.small", "ch-gva-2"),
            "gpu3 is not authorized; gpua30 only in ch-gva-2"
        );
        let not_gva = Requirement::new(ZONE_LABEL, Operator::NotIn, &["ch-gva-2"]);
        assert!(pick(&types, &any, &zones, &claim(vec![gpus, not_gva], vec![])).is_none());

        // Requests must fit allocatable: small has 2 CPUs minus 300m.
        let (t, _) = pick(
            &types,
            &any,
            &zones,
            &claim(vec![], vec![Resource::new("cpu", "1800m")]),
        )
        .unwrap();
        assert_eq!(t.name(), "standard.large");
        let (t, _) = pick(
            &types,
            &any,
            &zones,
            &claim(vec![], vec![Resource::new(GPU_RESOURCE, "1")]),
        )
        .unwrap();
        assert_eq!(t.name(), "gpua30.small");

        // Provider labels and the allow-list.
        let no_gpu = Requirement::is_in(LABEL_GPU_COUNT, &["0"]);
        let more_cpu = Requirement::new(LABEL_CPU, Operator::Gt, &["2"]);
        let (t, _) = pick(&types, &any, &zones, &claim(vec![no_gpu, more_cpu], vec![])).unwrap();
        assert_eq!(t.name(), "standard.large");
        let only_small = spec(r#"{"diskSize": 50, "instanceTypes": ["standard.small"]}"#);
        assert!(pick(&types, &only_small, &zones, &claim(vec![order], vec![])).is_none());
        let spot_only = Requirement::is_in(CAPACITY_TYPE_LABEL, &["spot"]);
        assert!(
            pick(&types, &any, &zones, &claim(vec![spot_only], vec![])).is_none(),
            "Exoscale has no spot"
        );

        // The host's NodeClass label requirement names the claim's class, not a type label;
        // an unknown instance label of ours still has to match.
        let class = Requirement::is_in("karpenter.k8s.exoscale/exoscalenodeclass", &["default"]);
        assert!(pick(&types, &any, &zones, &claim(vec![class], vec![])).is_some());
        let unknown = Requirement::is_in("karpenter.k8s.exoscale/instance-hypervisor", &["kvm"]);
        assert!(pick(&types, &any, &zones, &claim(vec![unknown], vec![])).is_none());
    }
}
