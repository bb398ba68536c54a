//! Disruption snapshots built from plain numbers: for unit tests, `joinery bench
//! consolidation` and examples. One NodePool, instance types with on-demand and spot offerings
//! in three zones, nodes filled with pods of given requests.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::Snapshot;
use super::candidate::{Candidate, Pool};
use super::signals::{eviction_cost, reschedule_cost};
use crate::instance_type::{InstanceType, Offering, Overhead};
use crate::labels::{
    CAPACITY_TYPE_LABEL, HOSTNAME_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL, ZONE_LABEL,
};
use crate::nodeclaim::{NodeClaimTemplate, NodeClassRef};
use crate::requirements::{Requirement, Requirements};
use crate::resources::Resources;
use crate::scheduling::{
    BoundPod, ExistingNode, LabelSelector, NodePool, PendingPod, TopologySpreadConstraint,
    WhenUnsatisfiable,
};

/// The zones of the fixture's instance types.
pub const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

const GIB: u64 = 1 << 30;

/// An instance type with `cpu` whole CPUs, 4 GiB per CPU, 110 pods, on-demand at `price` and
/// spot at 40 % of it, in every zone of [`ZONES`].
pub fn instance_type(name: &str, cpu: u64, price: f64) -> InstanceType {
    let mut offerings: Vec<Offering> = ZONES
        .iter()
        .map(|z| Offering::new(*z, "on-demand", Some(price), true))
        .collect();
    offerings.extend(
        ZONES
            .iter()
            .map(|z| Offering::new(*z, "spot", Some(price * 0.4), true)),
    );
    let requirements: Requirements = [
        Requirement::in_values(INSTANCE_TYPE_LABEL, [name]),
        Requirement::in_values(ZONE_LABEL, ZONES),
        Requirement::in_values(CAPACITY_TYPE_LABEL, ["on-demand", "spot"]),
    ]
    .into_iter()
    .collect();
    let capacity = Resources::new()
        .with("cpu", cpu * 1000)
        .with("memory", cpu * 4 * GIB)
        .with("pods", 110);
    InstanceType::new(name, requirements, capacity, Overhead::default(), offerings)
}

/// A pod of a fixture node: name, CPU millicores, and an optional app label.
#[derive(Debug, Clone, Default)]
pub struct FixturePod {
    /// Name (namespace `default`).
    pub name: String,
    /// CPU request in millicores (memory: 1 MiB per millicore).
    pub cpu_millis: u64,
    /// `app` label; pods of an app with `spread` set spread over zones (ScheduleAnyway).
    pub app: Option<String>,
    /// Spread the app's pods over zones.
    pub spread: bool,
}

impl FixturePod {
    /// A pod without labels.
    pub fn new(name: impl Into<String>, cpu_millis: u64) -> Self {
        FixturePod {
            name: name.into(),
            cpu_millis,
            ..Default::default()
        }
    }

    /// The pod as the scheduler takes it.
    pub(crate) fn pending(&self) -> PendingPod {
        let mut pod = PendingPod::new(
            "default",
            self.name.clone(),
            Resources::new()
                .with("cpu", self.cpu_millis)
                .with("memory", self.cpu_millis << 20),
        );
        if let Some(app) = &self.app {
            pod.labels.insert("app".into(), app.clone());
            if self.spread {
                pod.topology_spread.push(TopologySpreadConstraint {
                    max_skew: 1,
                    topology_key: ZONE_LABEL.into(),
                    when_unsatisfiable: WhenUnsatisfiable::ScheduleAnyway,
                    label_selector: Some(LabelSelector {
                        match_labels: BTreeMap::from([("app".to_string(), app.clone())]),
                        ..Default::default()
                    }),
                    min_domains: None,
                    node_affinity_policy: None,
                    node_taints_policy: None,
                    match_label_keys: Vec::new(),
                });
            }
        }
        pod
    }
}

/// Builds a [`Snapshot`] of one NodePool (`default`).
#[derive(Debug, Clone)]
pub struct Builder {
    snapshot: Snapshot,
}

impl Builder {
    /// A cluster whose NodePool `default` launches `types`; consolidation enabled
    /// (`WhenEmptyOrUnderutilized`, `consolidateAfter: 0s`), no budget.
    pub fn new(types: Vec<InstanceType>) -> Self {
        let class = NodeClassRef {
            group: "test.joinery.dev".into(),
            kind: "TestNodeClass".into(),
            name: "default".into(),
        };
        let template =
            NodeClaimTemplate::new("default", class, &Requirements::new(), BTreeMap::new());
        let mut snapshot = Snapshot {
            now: Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000)),
            ..Default::default()
        };
        snapshot.scheduling.nodepools.push(NodePool {
            template,
            instance_types: types,
            limits: None,
        });
        snapshot.pools.insert(
            "default".into(),
            Pool {
                consolidate_after: Some(Duration::ZERO),
                ..Default::default()
            },
        );
        Builder { snapshot }
    }

    /// The NodePool's disruption settings, to adjust.
    pub fn pool(&mut self) -> &mut Pool {
        self.snapshot
            .pools
            .get_mut("default")
            .expect("the fixture's pool")
    }

    /// The snapshot so far, to adjust.
    pub fn snapshot(&mut self) -> &mut Snapshot {
        &mut self.snapshot
    }

    /// Adds an initialized, consolidatable node `name` (its NodeClaim has the same name) of
    /// `instance_type` in `zone` and `capacity_type`, running `pods`; returns its candidate
    /// for adjustment.
    pub fn node(
        &mut self,
        name: &str,
        instance_type: &str,
        capacity_type: &str,
        zone: &str,
        pods: &[FixturePod],
    ) -> &mut Candidate {
        let it = self.snapshot.scheduling.nodepools[0]
            .instance_types
            .iter()
            .find(|t| t.name() == instance_type)
            .unwrap_or_else(|| panic!("the fixture has no instance type {instance_type}"));
        let price = it
            .offerings()
            .iter()
            .find(|o| o.zone() == zone && o.capacity_type() == capacity_type)
            .and_then(|o| o.price());
        let labels: BTreeMap<String, String> = [
            (INSTANCE_TYPE_LABEL, instance_type),
            (ZONE_LABEL, zone),
            (CAPACITY_TYPE_LABEL, capacity_type),
            (NODEPOOL_LABEL, "default"),
            (HOSTNAME_LABEL, name),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let mut node = ExistingNode::new(name, &labels, it.allocatable().clone());
        node.nodepool = Some("default".into());
        let pending: Vec<PendingPod> = pods.iter().map(FixturePod::pending).collect();
        for p in &pending {
            node.requested += &p.requests;
            self.snapshot.context.bound_pods.push(BoundPod {
                key: p.key.clone(),
                node: name.to_string(),
                labels: std::sync::Arc::new(p.labels.clone()),
                ..Default::default()
            });
        }
        self.snapshot.scheduling.nodes.push(node);
        self.snapshot.candidates.push(Candidate {
            claim: name.into(),
            node: name.into(),
            pool: "default".into(),
            instance_type: instance_type.into(),
            capacity_type: capacity_type.into(),
            zone: zone.into(),
            price,
            disruption_cost: reschedule_cost(
                pending.iter().map(|p| eviction_cost(None, p.priority)),
            ),
            pods: pending,
            initialized: true,
            consolidatable: true,
            ..Default::default()
        });
        self.snapshot.pools.get_mut("default").expect("pool").nodes += 1;
        self.snapshot.candidates.last_mut().expect("just pushed")
    }

    /// Adds a pending pod.
    pub fn pending(&mut self, pod: FixturePod) {
        self.snapshot.scheduling.pods.push(pod.pending());
    }

    /// The snapshot.
    pub fn build(self) -> Snapshot {
        self.snapshot
    }
}

/// The cluster of `joinery bench consolidation`: `nodes` nodes of four sizes (2, 4, 8 and 16
/// CPUs, bigger ones cheaper per CPU) spread over three zones, each running 10 pods that fill
/// about two thirds of it; a fifth of the pods spread their app over zones. Deterministic.
pub fn consolidation_cluster(nodes: usize) -> Snapshot {
    let sizes: [(&str, u64, f64); 4] = [
        ("c-2", 2, 0.10),
        ("c-4", 4, 0.19),
        ("c-8", 8, 0.36),
        ("c-16", 16, 0.68),
    ];
    let mut builder = Builder::new(
        sizes
            .iter()
            .map(|(n, cpu, price)| instance_type(n, *cpu, *price))
            .collect(),
    );
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (seed >> 33) % n
    };
    for i in 0..nodes {
        let (type_name, cpu, _) = sizes[next(4) as usize];
        let zone = ZONES[i % ZONES.len()];
        let capacity_type = if next(5) == 0 { "spot" } else { "on-demand" };
        // Ten pods filling about two thirds of the node.
        let share = cpu * 1000 * 2 / 3 / 10;
        let pods: Vec<FixturePod> = (0..10)
            .map(|p| {
                let app = next(20);
                FixturePod {
                    name: format!("n{i}-p{p}"),
                    cpu_millis: share * (80 + next(41)) / 100,
                    app: Some(format!("app-{app}")),
                    spread: app < 4,
                }
            })
            .collect();
        builder.node(
            &format!("node-{i:05}"),
            type_name,
            capacity_type,
            zone,
            &pods,
        );
    }
    builder.build()
}

/// The fleets of `joinery bench consolidation --fleet`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fleet {
    /// [`consolidation_cluster`]: mixed sizes two thirds full; the first candidates tried
    /// usually succeed.
    Easy,
    /// Nothing can be consolidated: every node an on-demand 4-CPU node running three
    /// 1.2-CPU pods of a NodePool that launches on-demand only, no pod fits on another node,
    /// and no type is cheaper per CPU than the 4-CPU one, so every candidate (and every multi-node prefix) is simulated and rejected.
    Full,
    /// [`Fleet::Full`], but every tenth node runs one 300m pod that fits in another node's
    /// free 400m: a tenth of the nodes can go.
    Mixed,
}

/// The instance types of the full and mixed fleets: the price of a CPU is the same in every
/// size (no bigger node is cheaper than the nodes it would replace).
fn flat_priced_types() -> Vec<InstanceType> {
    [
        ("c-2", 2, 0.10),
        ("c-4", 4, 0.20),
        ("c-8", 8, 0.40),
        ("c-16", 16, 0.80),
    ]
    .iter()
    .map(|(n, cpu, price)| instance_type(n, *cpu, *price))
    .collect()
}

/// A fleet of `nodes` nodes for the consolidation benchmark. Deterministic.
pub fn consolidation_fleet(fleet: Fleet, nodes: usize) -> Snapshot {
    if fleet == Fleet::Easy {
        return consolidation_cluster(nodes);
    }
    let mut builder = Builder::new(flat_priced_types());
    // On-demand only: a spot replacement would be cheaper than anything.
    builder.snapshot().scheduling.nodepools[0]
        .template
        .requirements
        .add(Requirement::in_values(CAPACITY_TYPE_LABEL, ["on-demand"]));
    for i in 0..nodes {
        let light = fleet == Fleet::Mixed && i % 10 == 9;
        let pods: Vec<FixturePod> = if light {
            vec![FixturePod::new(format!("n{i}-p0"), 300)]
        } else {
            (0..3)
                .map(|p| FixturePod::new(format!("n{i}-p{p}"), 1200))
                .collect()
        };
        builder.node(
            &format!("node-{i:05}"),
            "c-4",
            "on-demand",
            ZONES[i % ZONES.len()],
            &pods,
        );
    }
    builder.build()
}
