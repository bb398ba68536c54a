//! The input of upstream's scheduling micro-benchmark, rebuilt as plain data so that callers
//! (the CLI) can time [`schedule`](super::schedule) on the same shape upstream measures.

use std::collections::BTreeMap;

use crate::instance_type::{InstanceType, Offering, Overhead};
use crate::labels::{
    ARCH_LABEL, CAPACITY_TYPE_LABEL, HOSTNAME_LABEL, INSTANCE_TYPE_LABEL, LabelPolicy, OS_LABEL,
    ZONE_LABEL,
};
use crate::nodeclaim::{NodeClaimTemplate, NodeClassRef};
use crate::requirements::{Requirement, Requirements};
use crate::resources::{PodResourceSpec, Resources};

use super::constraints::{
    LabelSelector, PodAffinityTerm, PreferredSchedulingTerm, TopologySpreadConstraint,
    WeightedPodAffinityTerm,
};
use super::types::{NodePool, NodePoolLimits, PendingPod, SchedulingInput};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

/// A small deterministic generator (64-bit linear congruential, high bits used).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) % n as u64) as usize
    }

    fn pick<'v, T>(&mut self, values: &'v [T]) -> &'v T {
        &values[self.below(values.len())]
    }
}

/// Upstream's fake catalog entry `fake-it-<i>`: `i+1` vCPU, `2(i+1)` GiB, `10(i+1)` pods,
/// 100m / 10Mi kube-reserved, spot in two zones and on-demand in three, every offering
/// available and priced 0.1 per vCPU plus 0.1 per GB of memory.
fn fake_instance_type(i: usize) -> InstanceType {
    let n = i as u64 + 1;
    let name = format!("fake-it-{i}");
    let memory = 2 * n * GIB;
    let price = 0.1 * n as f64 + 0.1 * memory as f64 / 1e9;
    let zones = ["test-zone-1", "test-zone-2", "test-zone-3"];
    let mut offerings: Vec<Offering> = zones[..2]
        .iter()
        .map(|z| Offering::new(*z, "spot", Some(price), true))
        .collect();
    offerings.extend(
        zones
            .iter()
            .map(|z| Offering::new(*z, "on-demand", Some(price), true)),
    );
    let requirements: Requirements = [
        Requirement::in_values(INSTANCE_TYPE_LABEL, [name.as_str()]),
        Requirement::in_values(ARCH_LABEL, ["amd64"]),
        Requirement::in_values(OS_LABEL, ["darwin", "linux", "windows"]),
        Requirement::in_values(ZONE_LABEL, zones),
        Requirement::in_values(CAPACITY_TYPE_LABEL, ["on-demand", "spot"]),
    ]
    .into_iter()
    .collect();
    let capacity = Resources::new()
        .with("cpu", n * 1000)
        .with("memory", memory)
        .with("pods", 10 * n);
    let overhead = Overhead {
        kube_reserved: Resources::new().with("cpu", 100).with("memory", 10 * MIB),
        ..Default::default()
    };
    InstanceType::new(name, requirements, capacity, overhead, offerings)
}

/// The cluster of upstream's benchmark: one NodePool (`default`, no requirements, limits of
/// 10,000,000 CPU and 10,000,000Gi memory) over `instance_types` fake types (`fake-it-0..`;
/// upstream uses 400), no existing nodes, no DaemonSets, and no pods yet.
pub fn benchmark_cluster(instance_types: usize) -> SchedulingInput {
    let class = NodeClassRef {
        group: "karpenter.test.sh".into(),
        kind: "TestNodeClass".into(),
        name: "default".into(),
    };
    let limits = NodePoolLimits::from_quantities(
        [("cpu", "10000000"), ("memory", "10000000Gi")],
        Resources::new(),
    )
    .expect("valid quantities");
    let pool = NodePool {
        template: NodeClaimTemplate::new("default", class, &Requirements::new(), BTreeMap::new()),
        instance_types: (0..instance_types).map(fake_instance_type).collect(),
        limits: Some(limits),
    };
    SchedulingInput {
        pods: Vec::new(),
        nodes: Vec::new(),
        nodepools: vec![pool],
        daemons: Vec::new(),
        label_policy: LabelPolicy::default(),
    }
}

/// Upstream's benchmark shape: one NodePool (`default`, no requirements, limits of 10,000,000
/// CPU and 10,000,000Gi memory) over `instance_types` fake types (`fake-it-0..`; upstream uses
/// 400), no existing nodes, no DaemonSets, and `pods` "diverse" pods: a fifth generic, a fifth
/// with a zonal topology spread (maxSkew 1, DoNotSchedule, selecting a random `my-label`
/// value of seven), a fifth with the same spread over hostnames, a fifth with zonal
/// self-affinity (a random `my-affininity` value, upstream's spelling), a fifth with hostname
/// self anti-affinity (all `app=nginx`, so one per node), the rest generic. Generic and spread
/// pods carry a random `my-label`. CPU requests are drawn from {100m, 250m, 500m, 1, 1.5} and
/// memory from {100, 256, 512, 1024, 2048, 4096}Mi. The draws are seeded, so the input is
/// the same on every call (though not the same draws as upstream's Go generator).
pub fn benchmark_input(pods: usize, instance_types: usize) -> SchedulingInput {
    let mut rng = Lcg(42);
    let label_values = ["a", "b", "c", "d", "e", "f", "g"];
    let cpus = [100, 250, 500, 1000, 1500];
    let memories = [100, 256, 512, 1024, 2048, 4096];
    let fifth = pods / 5;
    let mut out = Vec::with_capacity(pods);
    for i in 0..pods {
        let spec = PodResourceSpec {
            containers: vec![
                Resources::new()
                    .with("cpu", *rng.pick(&cpus))
                    .with("memory", *rng.pick(&memories) * MIB),
            ],
            ..Default::default()
        };
        let mut pod = PendingPod::from_spec("default", format!("pod-{i:06}"), &spec);
        pod.uid = format!("00000000-0000-0000-0000-{i:012}");
        let mut random_label =
            |key: &str| BTreeMap::from([(key.to_owned(), (*rng.pick(&label_values)).to_owned())]);
        match (i / fifth.max(1), fifth) {
            (_, 0) | (5.., _) | (0, _) => pod.labels = random_label("my-label"),
            (kind @ (1 | 2), _) => {
                pod.labels = random_label("my-label");
                let key = if kind == 1 {
                    ZONE_LABEL
                } else {
                    HOSTNAME_LABEL
                };
                let selector = LabelSelector {
                    match_labels: random_label("my-label"),
                    ..Default::default()
                };
                pod.topology_spread = vec![TopologySpreadConstraint::new(key, 1, selector)];
            }
            (3, _) => {
                pod.labels = random_label("my-affininity");
                let selector = LabelSelector {
                    match_labels: pod.labels.clone(),
                    ..Default::default()
                };
                pod.pod_affinity = vec![PodAffinityTerm::new(ZONE_LABEL, selector)];
            }
            (4, _) => {
                pod.labels = BTreeMap::from([("app".to_owned(), "nginx".to_owned())]);
                let selector = LabelSelector::from_labels([("app", "nginx")]);
                pod.pod_anti_affinity = vec![PodAffinityTerm::new(HOSTNAME_LABEL, selector)];
            }
        }
        out.push(pod);
    }

    SchedulingInput {
        pods: out,
        ..benchmark_cluster(instance_types)
    }
}

/// One pod of upstream's exported benchmark workloads (`benches/workloads/*.json.gz`): the
/// exact pods upstream's `BenchmarkScheduling<N>` and `Benchmark{Respect,Ignore}Preferences`
/// solve with their generator seeded at 42. Field names follow the export.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
pub struct WorkloadPod {
    /// Index in the workload.
    pub i: usize,
    /// `generic`, `topology_spread`, `pod_affinity`, `pod_anti_affinity` or `preference`.
    pub kind: String,
    /// The pod's labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// CPU request in millicores.
    pub cpu_m: u64,
    /// Memory request in bytes.
    pub mem_bytes: u64,
    /// Spread pods: the constraint's topology key (maxSkew 1, DoNotSchedule).
    #[serde(default)]
    pub tsc_topology_key: Option<String>,
    /// Spread pods: the constraint's `matchLabels`.
    #[serde(default)]
    pub tsc_selector: Option<BTreeMap<String, String>>,
    /// Affinity pods: the required pod-affinity term's topology key.
    #[serde(default)]
    pub affinity_topology_key: Option<String>,
    /// Affinity pods: the term's `matchLabels`.
    #[serde(default)]
    pub affinity_selector: Option<BTreeMap<String, String>>,
    /// Anti-affinity pods: the required pod-anti-affinity term's topology key.
    #[serde(default)]
    pub anti_affinity_topology_key: Option<String>,
    /// Anti-affinity pods: the term's `matchLabels`.
    #[serde(default)]
    pub anti_affinity_selector: Option<BTreeMap<String, String>>,
    /// Preference pods: preferred node affinity to `test-zone-1` (weight 1), preferred zonal
    /// anti-affinity to `app=nginx` (weight 10) and preferred hostname anti-affinity to
    /// `app=nginx` (weight 1).
    #[serde(default)]
    pub preference_pod: bool,
}

/// A workload record that cannot be turned into a pod.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("workload pod {index}: {message}")]
pub struct WorkloadError {
    /// The record's `i`.
    pub index: usize,
    /// What is missing or wrong.
    pub message: String,
}

impl WorkloadPod {
    /// The pending pod this record describes (namespace `default`, name `pod-<i>`).
    pub fn to_pending_pod(&self) -> Result<PendingPod, WorkloadError> {
        let fail = |message: &str| WorkloadError {
            index: self.i,
            message: message.to_owned(),
        };
        let term = |key: &Option<String>,
                    selector: &Option<BTreeMap<String, String>>,
                    what: &str| match (key, selector) {
            (Some(key), Some(selector)) => Ok(PodAffinityTerm::new(
                key.clone(),
                LabelSelector {
                    match_labels: selector.clone(),
                    ..Default::default()
                },
            )),
            _ => Err(fail(&format!(
                "kind {} needs {what}_topology_key and {what}_selector",
                self.kind
            ))),
        };
        let spec = PodResourceSpec {
            containers: vec![
                Resources::new()
                    .with("cpu", self.cpu_m)
                    .with("memory", self.mem_bytes),
            ],
            ..Default::default()
        };
        let mut pod = PendingPod::from_spec("default", format!("pod-{:06}", self.i), &spec);
        pod.uid = format!("00000000-0000-0000-0000-{:012}", self.i);
        pod.labels = self.labels.clone();
        match self.kind.as_str() {
            "generic" => {}
            "topology_spread" => {
                let t = term(&self.tsc_topology_key, &self.tsc_selector, "tsc")?;
                let selector = t.label_selector.expect("built with a selector");
                pod.topology_spread =
                    vec![TopologySpreadConstraint::new(t.topology_key, 1, selector)];
            }
            "pod_affinity" => {
                pod.pod_affinity = vec![term(
                    &self.affinity_topology_key,
                    &self.affinity_selector,
                    "affinity",
                )?]
            }
            "pod_anti_affinity" => {
                pod.pod_anti_affinity = vec![term(
                    &self.anti_affinity_topology_key,
                    &self.anti_affinity_selector,
                    "anti_affinity",
                )?]
            }
            "preference" => {}
            other => return Err(fail(&format!("unknown kind {other:?}"))),
        }
        if self.preference_pod {
            let nginx = || LabelSelector::from_labels([("app", "nginx")]);
            pod.preferred_affinity = vec![PreferredSchedulingTerm {
                weight: 1,
                preference: [Requirement::in_values(ZONE_LABEL, ["test-zone-1"])]
                    .into_iter()
                    .collect(),
            }];
            pod.preferred_pod_anti_affinity = vec![
                WeightedPodAffinityTerm {
                    weight: 10,
                    term: PodAffinityTerm::new(ZONE_LABEL, nginx()),
                },
                WeightedPodAffinityTerm {
                    weight: 1,
                    term: PodAffinityTerm::new(HOSTNAME_LABEL, nginx()),
                },
            ];
        }
        Ok(pod)
    }
}

/// Upstream's benchmark cluster ([`benchmark_cluster`] with 400 types) with these workload
/// pods pending.
pub fn workload_input(records: &[WorkloadPod]) -> Result<SchedulingInput, WorkloadError> {
    let pods = records
        .iter()
        .map(WorkloadPod::to_pending_pod)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(SchedulingInput {
        pods,
        ..benchmark_cluster(400)
    })
}
