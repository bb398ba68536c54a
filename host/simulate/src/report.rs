//! The JSON report of a simulation (`--report FILE`). Field names are an interface: keep them.

use serde::Serialize;

use crate::observer::{NodeRecord, Observation, PendingPod, PodCounts};
use crate::scenario::Scenario;

/// Totals over the run.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    /// NodeClaims created.
    pub node_claims_created: usize,
    /// NodeClaims launched.
    pub nodes_launched: usize,
    /// NodeClaims deleted.
    pub nodes_deleted: usize,
    /// Most Nodes at once.
    pub peak_nodes: usize,
    /// Hourly price of the live instances at the end.
    pub cost_per_hour_at_end: f64,
    /// Of that, the CapacityBuffers' share: the room they hold (see `buffers`).
    pub buffer_cost_per_hour_at_end: f64,
}

/// Milestones in simulated seconds.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Timings {
    /// First NodeClaim seen.
    pub first_node_claim_seconds: Option<f64>,
    /// Last time every workload pod became Running.
    pub all_pods_running_seconds: Option<f64>,
}

/// One cloud instance at the end of the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CloudInstance {
    /// Provider ID.
    pub provider_id: String,
    /// Instance type.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// `pending`, `running` or `terminated` (being deleted).
    pub state: String,
    /// The cloud's tags (Exoscale labels).
    pub tags: std::collections::BTreeMap<String, String>,
}

/// The cloud at the end of the run.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CloudReport {
    /// `simcloud`, `exoscale`, `clevercloud` or `clusterapi`.
    pub provider: String,
    /// Instances the cloud ever created, including deleted ones and failed creates that
    /// made an instance (Exoscale; for Clever Cloud, the NodeGroups' machines; for Cluster
    /// API, the Machines provisioned; `null` for simcloud).
    pub instances_created: Option<usize>,
    /// Instances not being deleted at the end.
    pub instances_at_end: usize,
    /// Every instance still known at the end (for Clever Cloud: the machines of the
    /// NodeGroups, tagged with `nodegroup`, `node` and `upstreamId`, not yet torn down).
    pub instances: Vec<CloudInstance>,
    /// What the fake Clever Cloud decided on NodeGroups (`clevercloud` only; absent
    /// otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_groups: Option<NodeGroupTotals>,
    /// The Machines of the fake Cluster API management cluster at the end (`clusterapi`
    /// only; absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machines: Option<Vec<MachineReport>>,
    /// What the fake Cluster API controllers did with Machines (`clusterapi` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub machine_totals: Option<MachineTotals>,
}

/// One Cluster API Machine at the end of the run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineReport {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its MachineDeployment.
    pub machine_deployment: Option<String>,
    /// `spec.providerID`, once provisioned.
    #[serde(rename = "providerID")]
    pub provider_id: Option<String>,
    /// `status.phase` (`Provisioning`, `Running`, `Deleting`, `Failed`…).
    pub phase: String,
    /// Its Node (`status.nodeRef.name`), once running.
    pub node: Option<String>,
}

/// Machines the fake Cluster API controllers created, provisioned, saw running, failed and
/// deleted over the run, and how many exist at the end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineTotals {
    /// Created by the MachineSets.
    pub created: u64,
    /// Got a providerID (their machine booted).
    pub provisioned: u64,
    /// Got a nodeRef.
    pub running: u64,
    /// Got a failureReason (injected).
    pub failed: u64,
    /// Deleted (their finalizer released).
    pub deleted: u64,
    /// Existing at the end.
    pub at_end: usize,
}

/// NodeGroups the fake Clever Cloud accepted, refused for quota, and deleted upstream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeGroupTotals {
    /// Accepted (`Synced`).
    pub accepted: u64,
    /// Refused for quota.
    pub rejected: u64,
    /// Accepted, then deleted upstream.
    pub vanished: u64,
}

/// A NodeClass condition at the end of the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionReport {
    /// Type, e.g. `SecurityGroupsReady`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Reason.
    pub reason: String,
    /// Message.
    pub message: String,
}

/// A CapacityBuffer at the end of the run: the room it holds and what that costs.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BufferReport {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Chunks it keeps (`status.replicas`; 0 when not ready).
    pub chunks: usize,
    /// Chunks the nodes hold (the others would need new nodes).
    pub held: usize,
    /// The nodes holding its chunks.
    pub nodes: Vec<BufferNodeReport>,
    /// What it costs per hour: its share of each node's price, or the whole price of a node
    /// no workload pod uses (split between the buffers on it).
    pub cost_per_hour: f64,
    /// Its conditions.
    pub conditions: Vec<ConditionReport>,
}

/// The room a buffer holds on one node.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BufferNodeReport {
    /// The node (or NodeClaim in flight).
    pub node: String,
    /// Chunks on it.
    pub chunks: usize,
    /// The share of the node they take (the larger of CPU and memory).
    pub share: f64,
    /// The node's price per hour, when known.
    pub price_per_hour: Option<f64>,
    /// What the buffer is charged for it per hour.
    pub cost_per_hour: f64,
}

/// A NodeClass at the end of the run.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassReport {
    /// Kind, e.g. `ExoscaleNodeClass`.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Whether its `Ready` condition is `True`.
    pub ready: bool,
    /// Its status conditions.
    pub conditions: Vec<ConditionReport>,
}

/// How far the simulation fell behind its scaled clock, in simulated seconds (see
/// `joinery_emulator::physics::lag`), judged by the 95th percentile of each series: within
/// `toleranceSeconds` the speed is honoured; beyond it the run warns that its decisions may
/// differ from a slower run's; beyond `refusalSeconds` the run is refused (it fails, naming
/// the speed, the lag and a speed to use instead).
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LagReport {
    /// The speed-up the run asked for (`--speed`).
    pub speed: f64,
    /// The largest 95th percentile a series may have for the speed to count as honoured.
    pub tolerance_seconds: f64,
    /// A 95th percentile beyond this refuses the run.
    pub refusal_seconds: f64,
    /// Whether every series (with enough samples to judge) stayed within the tolerance.
    pub honoured: bool,
    /// Whether a series went beyond the refusal limit.
    pub refused: bool,
    /// The series with the largest 95th percentile.
    pub worst: Option<String>,
    /// `clock` (the runtime's own lateness, shared by the host and the physics), `scheduler`,
    /// `workloads` and `kubelets`.
    pub series: Vec<joinery_emulator::physics::LagSeries>,
}

impl LagReport {
    fn worst_series(&self) -> Option<&joinery_emulator::physics::LagSeries> {
        let name = self.worst.as_deref()?;
        self.series.iter().find(|s| s.name == name)
    }

    /// A speed to try instead, rounded down; `None` when this one was honoured. Lag does not
    /// grow in proportion to the speed: it stays small until a component cannot keep up,
    /// then grows fast (measured on `scale-out-2000-pods`: p95 0.35 s at speed 10, 1.4 s at
    /// 20, 32 s at 60). So the suggestion is a step down, not a ratio of the lag: half the
    /// speed when it was only warned about, a third when it was refused.
    pub fn suggested_speed(&self) -> Option<f64> {
        if self.honoured {
            return None;
        }
        let guess = self.speed / if self.refused { 3.0 } else { 2.0 };
        let rounded = if guess >= 10.0 {
            (guess / 5.0).floor() * 5.0
        } else {
            guess.floor()
        };
        Some(rounded.max(1.0))
    }

    /// What went wrong and what to do, when the speed was not honoured.
    fn explanation(&self) -> Option<String> {
        let suggested = self.suggested_speed()?;
        let worst = self.worst_series()?;
        let latest = self
            .series
            .iter()
            .map(|s| s.max_seconds)
            .fold(0.0, f64::max);
        let advice = if self.speed <= 1.0 {
            "this machine cannot run the scenario in real time; try a smaller one".to_string()
        } else {
            format!("run it again with --speed {suggested} or lower")
        };
        Some(format!(
            "--speed {} is more than this machine can simulate faithfully: the simulation fell behind its clock \
             ({} p95 {:.2} s, up to {:.1} s; tolerance {} s), so its decisions may not be those of a real cluster; {advice}",
            self.speed, worst.name, worst.p95_seconds, latest, self.tolerance_seconds
        ))
    }

    /// The refusal, when the lag went beyond the refusal limit: which speed, how late, and
    /// what to do instead.
    pub fn refusal(&self) -> Option<String> {
        if !self.refused {
            return None;
        }
        self.explanation()
            .map(|text| format!("speed: refused, {text}"))
    }

    /// The warning, when the speed was not honoured but the run not refused.
    pub fn warning(&self) -> Option<String> {
        if self.refused {
            return None;
        }
        self.explanation().map(|text| format!("WARNING: {text}"))
    }

    /// One line for the summary.
    pub fn line(&self) -> String {
        let series: Vec<String> = self
            .series
            .iter()
            .map(|s| format!("{} {:.2}/{:.2}", s.name, s.p95_seconds, s.max_seconds))
            .collect();
        let verdict = if self.refused {
            "refused"
        } else if self.honoured {
            "honoured"
        } else {
            "NOT honoured"
        };
        format!(
            "lag behind the clock (simulated s, p95/max): {}; speed {} {verdict} (tolerance {} s, refused beyond {} s)",
            if series.is_empty() {
                "-".to_string()
            } else {
                series.join(", ")
            },
            self.speed,
            self.tolerance_seconds,
            self.refusal_seconds
        )
    }
}

/// The report.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Scenario name.
    pub scenario: String,
    /// `pass` or `fail`.
    pub result: String,
    /// Failed expectations, each naming what failed.
    pub failures: Vec<String>,
    /// Workload pods at the end.
    pub pods: PodCounts,
    /// Workload pods not running at the end, each with why.
    pub pending_pods: Vec<PendingPod>,
    /// Every node (NodeClaim) seen.
    pub nodes: Vec<NodeRecord>,
    /// Totals.
    pub totals: Totals,
    /// Milestones.
    pub timings: Timings,
    /// Instance types launched.
    pub instance_types: Vec<String>,
    /// The cloud at the end.
    pub cloud: CloudReport,
    /// The NodeClasses at the end, with their conditions.
    pub node_classes: Vec<NodeClassReport>,
    /// The CapacityBuffers at the end: the room each holds, on which nodes, and its cost
    /// (counted in `totals.costPerHourAtEnd` too; `totals.bufferCostPerHourAtEnd` is their
    /// sum).
    pub buffers: Vec<BufferReport>,
    /// How far the simulation fell behind its clock.
    pub lag: LagReport,
    /// Simulated seconds the run took.
    pub simulated_seconds: f64,
    /// Real seconds the run took (the one field two runs of a scenario in virtual time, with
    /// the same seed, may not share).
    pub wall_seconds: f64,
    /// What the workload went through: pods seen, evictions, time pending.
    pub workload: WorkloadReport,
    /// Writes the emulated API server took (its last resourceVersion): how much happened.
    pub api_writes: u64,
    /// `virtual` (the clock jumps to the next timer whenever the simulation is idle) or
    /// `realtime` (real time × the lag report's speed).
    pub time: String,
    /// The seed of the simulation's generators.
    pub seed: u64,
    /// The timeline, as printed.
    pub timeline: Vec<String>,
    /// The cluster over time: one sample at the start and at every change of its pods,
    /// nodes or cost (what `joinery simulate --plot` draws).
    pub samples: Vec<crate::observer::Sample>,
}

/// What the workload went through over the run.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadReport {
    /// Workload (non-DaemonSet) pods seen over the run.
    pub pods_seen: usize,
    /// Pods evicted (through the eviction API: drains of disrupted nodes).
    pub pod_evictions: u64,
    /// Evictions per pod seen: how often a pod was disrupted, on average.
    pub disruptions_per_pod: f64,
    /// Seconds from a pod's creation until it ran (pods never running count until the end),
    /// median.
    pub pending_p50_seconds: f64,
    /// The same, 95th percentile.
    pub pending_p95_seconds: f64,
    /// The same, the longest.
    pub pending_max_seconds: f64,
}

impl WorkloadReport {
    /// The figures of an observation, with `evictions` from the API server, at `end`.
    pub fn of(seen: &Observation, evictions: u64, end: f64) -> WorkloadReport {
        let mut pending: Vec<f64> = seen
            .pod_pending
            .values()
            .map(|(created, waited)| waited.unwrap_or((end - created).max(0.0)))
            .collect();
        pending.sort_by(f64::total_cmp);
        let at = |q: f64| {
            if pending.is_empty() {
                return 0.0;
            }
            let index = ((pending.len() as f64 * q).ceil() as usize).clamp(1, pending.len()) - 1;
            pending[index]
        };
        let pods_seen = pending.len();
        WorkloadReport {
            pods_seen,
            pod_evictions: evictions,
            disruptions_per_pod: if pods_seen == 0 {
                0.0
            } else {
                evictions as f64 / pods_seen as f64
            },
            pending_p50_seconds: at(0.5),
            pending_p95_seconds: at(0.95),
            pending_max_seconds: pending.last().copied().unwrap_or(0.0),
        }
    }
}

impl Report {
    /// Builds the report from the final observation.
    pub fn new(
        scenario: &Scenario,
        seen: &Observation,
        pending_pods: Vec<PendingPod>,
        timeline: &[String],
        failures: Vec<String>,
        simulated: f64,
        wall: f64,
    ) -> Report {
        Report {
            scenario: scenario.name.clone(),
            result: if failures.is_empty() {
                "pass".into()
            } else {
                "fail".into()
            },
            failures,
            pods: seen.pods,
            pending_pods,
            nodes: seen.claims.clone(),
            totals: Totals {
                node_claims_created: seen.claims_created(),
                nodes_launched: seen
                    .claims
                    .iter()
                    .filter(|c| c.launched_at.is_some() && !c.adopted)
                    .count(),
                nodes_deleted: seen
                    .claims
                    .iter()
                    .filter(|c| c.deleted_at.is_some())
                    .count(),
                peak_nodes: seen.peak_nodes,
                cost_per_hour_at_end: seen.cost_per_hour,
                buffer_cost_per_hour_at_end: 0.0,
            },
            timings: Timings {
                first_node_claim_seconds: seen.first_node_claim,
                all_pods_running_seconds: seen.all_pods_running,
            },
            instance_types: seen.instance_types(),
            cloud: CloudReport::default(),
            node_classes: Vec::new(),
            buffers: Vec::new(),
            lag: LagReport::default(),
            simulated_seconds: simulated,
            wall_seconds: wall,
            api_writes: 0,
            // Filled in by the run, with the API server's eviction count.
            workload: WorkloadReport::default(),
            time: "realtime".into(),
            seed: crate::DEFAULT_SEED,
            timeline: timeline.to_vec(),
            samples: seen.samples.clone(),
        }
    }

    /// Whether every expectation held.
    pub fn passed(&self) -> bool {
        self.result == "pass"
    }

    /// The human summary printed after the timeline.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!(
            "scenario {}: {}\n",
            self.scenario,
            self.result.to_uppercase()
        ));
        s.push_str(&format!(
            "  pods: {} total, {} running, {} pending\n",
            self.pods.total, self.pods.running, self.pods.pending
        ));
        s.push_str(&format!(
            "  nodeclaims created {}, launched {}, deleted {}; peak nodes {}; cost at end {:.4}/h\n",
            self.totals.node_claims_created, self.totals.nodes_launched, self.totals.nodes_deleted, self.totals.peak_nodes, self.totals.cost_per_hour_at_end
        ));
        s.push_str(&format!(
            "  instance types: {}\n",
            if self.instance_types.is_empty() {
                "-".to_string()
            } else {
                self.instance_types.join(", ")
            }
        ));
        let t = |v: Option<f64>| v.map(|x| format!("{x:.1}s")).unwrap_or_else(|| "-".into());
        s.push_str(&format!(
            "  first nodeclaim at {}, all pods running at {}; {:.0} simulated seconds in {:.1} s{}\n",
            t(self.timings.first_node_claim_seconds),
            t(self.timings.all_pods_running_seconds),
            self.simulated_seconds,
            self.wall_seconds,
            if self.time == "virtual" {
                format!(" (virtual time, seed {})", self.seed)
            } else {
                String::new()
            }
        ));
        if self.cloud.provider != "simcloud" || self.cloud.instances_at_end > 0 {
            s.push_str(&format!(
                "  cloud {}: {} instances at end{}{}\n",
                self.cloud.provider,
                self.cloud.instances_at_end,
                self.cloud.instances_created.map(|n| format!(", {n} created")).unwrap_or_default(),
                self.cloud
                    .node_groups
                    .map(|g| format!("; nodegroups accepted {}, refused for quota {}, vanished {}", g.accepted, g.rejected, g.vanished))
                    .or_else(|| self.cloud.machine_totals.map(|m| format!(
                        "; machines created {}, provisioned {}, running {}, failed {}, deleted {}, {} at end",
                        m.created, m.provisioned, m.running, m.failed, m.deleted, m.at_end
                    )))
                    .unwrap_or_default()
            ));
        }
        // In virtual time nothing can fall behind the clock: it waits for everyone.
        if self.lag.speed > 0.0 && self.time != "virtual" {
            s.push_str(&format!("  {}\n", self.lag.line()));
            if let Some(warning) = self.lag.warning() {
                s.push_str(&format!("  {warning}\n"));
            }
        }
        for b in &self.buffers {
            let nodes: Vec<String> = b
                .nodes
                .iter()
                .map(|n| format!("{} ({:.0} %)", n.node, n.share * 100.0))
                .collect();
            s.push_str(&format!(
                "  capacitybuffer {}/{}: holds {} of {} chunks{}{}, {:.4}/h\n",
                b.namespace,
                b.name,
                b.held,
                b.chunks,
                if nodes.is_empty() { "" } else { " on " },
                nodes.join(", "),
                b.cost_per_hour
            ));
        }
        for c in &self.node_classes {
            if !c.ready {
                let failing: Vec<String> = c
                    .conditions
                    .iter()
                    .filter(|x| x.status != "True")
                    .map(|x| format!("{}: {}", x.type_, x.message))
                    .collect();
                s.push_str(&format!(
                    "  {} {} not ready: {}\n",
                    c.kind,
                    c.name,
                    failing.join("; ")
                ));
            }
        }
        for p in &self.pending_pods {
            s.push_str(&format!(
                "  pending {}/{}: {}\n",
                p.namespace,
                p.name,
                p.reason.as_deref().unwrap_or("no reason recorded")
            ));
        }
        for f in &self.failures {
            s.push_str(&format!("  FAILED: {f}\n"));
        }
        s
    }
}
