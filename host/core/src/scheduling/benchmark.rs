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

use super::constraints::{LabelSelector, PodAffinityTerm, TopologySpreadConstraint};
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

/// Upstream's fake catalogue entry `fake-it-<i>`: `i+1` vCPU, `2(i+1)` GiB, `10(i+1)` pods,
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
        nodes: Vec::new(),
        nodepools: vec![pool],
        daemons: Vec::new(),
        label_policy: LabelPolicy::default(),
    }
}
