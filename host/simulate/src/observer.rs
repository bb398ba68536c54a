//! Watches the emulated cluster and the simulated cloud while a scenario runs: the timeline
//! printed to the user and the figures of the report.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::SystemTime;

use futures::StreamExt;
use joinery_adapter::convert;
use joinery_api::{HasConditions, NodeClaim};
use joinery_core::clock::Clock;
use joinery_core::labels;
use joinery_emulator::cloud::{InstanceState, SimInstance};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde::Serialize;
use tokio::task::JoinHandle;

/// Pod counts (workload pods: DaemonSet pods are not counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PodCounts {
    /// Workload pods.
    pub total: usize,
    /// Of which Running.
    pub running: usize,
    /// Of which not Running.
    pub pending: usize,
    /// Of the pending ones, those marked `PodScheduled=False` with reason `Unschedulable`.
    pub unschedulable: usize,
}

/// A workload pod that was not running at the end, with why.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingPod {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Joinery's latest `FailedScheduling` message, else the scheduler's `PodScheduled` message.
    pub reason: Option<String>,
}

/// One node's life, in simulated seconds since the scenario started.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeRecord {
    /// Node name (once registered).
    pub name: Option<String>,
    /// NodeClaim name.
    pub node_claim: String,
    /// NodePool.
    pub node_pool: String,
    /// Instance type launched.
    pub instance_type: Option<String>,
    /// Zone.
    pub zone: Option<String>,
    /// Capacity type.
    pub capacity_type: Option<String>,
    /// Price of the launched offering per hour.
    pub price_per_hour: Option<f64>,
    /// When the NodeClaim appeared.
    pub created_at: f64,
    /// When it was launched.
    pub launched_at: Option<f64>,
    /// When its Node registered.
    pub registered_at: Option<f64>,
    /// When it was initialized.
    pub initialized_at: Option<f64>,
    /// When the NodeClaim was gone.
    pub deleted_at: Option<f64>,
    /// Provider ID.
    #[serde(skip)]
    pub provider_id: Option<String>,
    /// A NodeClaim of the cluster snapshot the run started from (adopted, not created).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub adopted: bool,
}

/// The cluster at one moment, as plotted: recorded at the start and whenever one of its
/// figures changed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sample {
    /// Simulated seconds since the scenario started.
    pub at: f64,
    /// Workload pods not running.
    pub pods_pending: usize,
    /// Workload pods running.
    pub pods_running: usize,
    /// Nodes, by their `node.kubernetes.io/instance-type` label (`unknown` without one).
    pub nodes_by_instance_type: BTreeMap<String, usize>,
    /// Hourly price of the live instances.
    pub cost_per_hour: f64,
}

/// A snapshot of the cluster plus everything seen so far.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    /// Simulated seconds since start.
    pub at: f64,
    /// Pod counts now.
    pub pods: PodCounts,
    /// Nodes now.
    pub nodes: usize,
    /// NodeClaims now.
    pub node_claims: usize,
    /// Most nodes seen at once.
    pub peak_nodes: usize,
    /// NodeClaims seen, by name, in order of appearance (the snapshot's first).
    pub claims: Vec<NodeRecord>,
    /// Hourly price of the live (not terminated) instances now.
    pub cost_per_hour: f64,
    /// First time a NodeClaim was seen.
    pub first_node_claim: Option<f64>,
    /// Last time all workload pods became Running (with at least one pod).
    pub all_pods_running: Option<f64>,
    /// Instances in the cloud now that are not being deleted (owned by a NodeClaim or not).
    pub cloud_instances: usize,
    /// The figures over time (see [`Sample`]).
    pub samples: Vec<Sample>,
    /// Reasons of the Events seen so far (only when the observer records events).
    pub event_reasons: BTreeSet<String>,
    /// CapacityBuffers' conditions now (only when the observer records buffers):
    /// `namespace/name` → condition type → (status, reason).
    pub buffer_conditions: BTreeMap<String, BTreeMap<String, (String, String)>>,
    /// Workload pods seen so far, by uid (in no order): simulated seconds from creation to running
    /// (`None` while not running yet), and when each was created.
    pub pod_pending: HashMap<String, (f64, Option<f64>)>,
}

impl Observation {
    /// Zones of the NodeClaims launched and not deleted.
    pub fn live_zones(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .claims
            .iter()
            .filter(|c| c.deleted_at.is_none())
            .filter_map(|c| c.zone.clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// Instance types launched so far.
    pub fn instance_types(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .claims
            .iter()
            .filter_map(|c| c.instance_type.clone())
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

/// Watch-fed copies of the objects the observer samples: a sample reads them instead of
/// listing every pod from the API server (which, at thousands of pods and a sample every
/// half simulated second, would load the machine more than the cluster being observed).
struct Stores {
    pods: Store<Pod>,
    nodes: Store<Node>,
    claims: Store<NodeClaim>,
    /// Every NodeClaim the watch delivered since the last sample, by name (its latest
    /// version): a claim created and deleted between two samples is still recorded (in
    /// virtual time a refused launch can come and go within one simulated instant).
    claims_seen: Arc<std::sync::Mutex<BTreeMap<String, NodeClaim>>>,
    tasks: Vec<JoinHandle<()>>,
    ready: bool,
}

impl Stores {
    fn start(client: &kube::Client) -> Stores {
        fn feed<K>(api: Api<K>, seen: impl Fn(&K) + Send + 'static) -> (Store<K>, JoinHandle<()>)
        where
            K: kube::Resource<DynamicType = ()>
                + Clone
                + serde::de::DeserializeOwned
                + std::fmt::Debug
                + Send
                + Sync
                + 'static,
        {
            let (reader, writer) = reflector::store();
            let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
                .default_backoff();
            let task = tokio::spawn(async move {
                let mut stream = std::pin::pin!(stream);
                while let Some(event) = stream.next().await {
                    match event {
                        Ok(watcher::Event::Apply(object) | watcher::Event::InitApply(object)) => {
                            seen(&object)
                        }
                        Ok(_) => {}
                        Err(error) => {
                            tracing::debug!(%error, "the observer's watch failed; retrying")
                        }
                    }
                }
            });
            (reader, task)
        }
        let (pods, pods_task) = feed(Api::<Pod>::all(client.clone()), |_| {});
        let (nodes, nodes_task) = feed(Api::<Node>::all(client.clone()), |_| {});
        let claims_seen: Arc<std::sync::Mutex<BTreeMap<String, NodeClaim>>> = Arc::default();
        let recorder = claims_seen.clone();
        let (claims, claims_task) = feed(
            Api::<NodeClaim>::all(client.clone()),
            move |claim: &NodeClaim| {
                recorder.lock().unwrap_or_else(|p| p.into_inner()).insert(
                    claim.metadata.name.clone().unwrap_or_default(),
                    claim.clone(),
                );
            },
        );
        Stores {
            pods,
            nodes,
            claims,
            claims_seen,
            tasks: vec![pods_task, nodes_task, claims_task],
            ready: false,
        }
    }

    /// Waits for the first full list of each kind (once).
    async fn ready(&mut self) {
        if !self.ready {
            let _ = self.pods.wait_until_ready().await;
            let _ = self.nodes.wait_until_ready().await;
            let _ = self.claims.wait_until_ready().await;
            self.ready = true;
        }
    }
}

impl Drop for Stores {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Samples the cluster and records transitions.
pub struct Observer {
    client: kube::Client,
    stores: Stores,
    clock: Arc<Clock>,
    state: Observation,
    index: BTreeMap<String, usize>,
    was_all_running: bool,
    /// Timeline lines printed so far.
    pub timeline: Vec<String>,
    echo: bool,
    origin: f64,
    record_events: bool,
    record_buffers: bool,
    /// Whether the timeline already says the run fell behind its clock.
    pub lag_noted: bool,
    /// The NodeClaims of the cluster snapshot the run started from.
    adopted: std::collections::BTreeSet<String>,
}

fn is_daemon(pod: &Pod) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet")
}

/// Whether the scheduler marked the pod `PodScheduled=False` with reason `Unschedulable`.
fn is_marked_unschedulable(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        })
}

impl Observation {
    /// The NodeClaims the run created (those of the snapshot it started from not counted).
    pub fn claims_created(&self) -> usize {
        self.claims.iter().filter(|c| !c.adopted).count()
    }
}

impl Observer {
    /// An observer; with `echo`, timeline lines are printed as they happen.
    pub fn new(client: kube::Client, clock: Arc<Clock>, echo: bool) -> Observer {
        let origin = clock.seconds();
        Observer {
            stores: Stores::start(&client),
            client,
            clock,
            state: Observation::default(),
            index: BTreeMap::new(),
            was_all_running: false,
            timeline: Vec::new(),
            echo,
            origin,
            record_events: false,
            record_buffers: false,
            lag_noted: false,
            adopted: Default::default(),
        }
    }

    /// Records `claims` as the cluster snapshot's NodeClaims: adopted, not created by the
    /// run (they count in no `nodeClaimsCreated` and no `nodesLaunched`).
    pub fn adopted_claims(&mut self, claims: impl IntoIterator<Item = String>) {
        self.adopted.extend(claims);
    }

    /// Also records the reasons of the cluster's Events at every sample (a list of all
    /// Events, so only when an expectation needs them).
    pub fn record_events(&mut self) {
        self.record_events = true;
    }

    /// Also records the CapacityBuffers' conditions at every sample (and notes their changes
    /// on the timeline).
    pub fn record_buffers(&mut self) {
        self.record_buffers = true;
    }

    /// The current observation.
    pub fn observation(&self) -> &Observation {
        &self.state
    }

    /// Adds a line to the timeline.
    pub fn note(&mut self, text: impl AsRef<str>) {
        let line = format!("[{:>8.1}s] {}", self.now(), text.as_ref());
        if self.echo {
            println!("{line}");
        }
        self.timeline.push(line);
    }

    /// Simulated seconds since the scenario started (set-up excluded).
    pub fn now(&self) -> f64 {
        self.clock.seconds() - self.origin
    }

    /// The workload pods not running now, each with the latest reason found in its events
    /// (Joinery's `FailedScheduling`) or its `PodScheduled` condition.
    pub async fn pending_pods(&self) -> Result<Vec<PendingPod>, kube::Error> {
        let pods = Api::<Pod>::all(self.client.clone())
            .list(&ListParams::default())
            .await?;
        let events = Api::<k8s_openapi::api::core::v1::Event>::all(self.client.clone())
            .list(&ListParams::default())
            .await?;
        let mut out = Vec::new();
        for pod in pods.items.iter().filter(|p| is_workload(p)) {
            if pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
                continue;
            }
            let namespace = pod.metadata.namespace.clone().unwrap_or_default();
            let name = pod.metadata.name.clone().unwrap_or_default();
            let uid = pod.metadata.uid.clone();
            let from_events = events
                .items
                .iter()
                .filter(|e| {
                    e.involved_object.uid == uid && e.reason.as_deref() == Some("FailedScheduling")
                })
                .max_by_key(|e| e.last_timestamp.as_ref().map(|t| t.0))
                .and_then(|e| e.message.clone());
            let from_condition = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                .and_then(|c| c.message.clone());
            out.push(PendingPod {
                namespace,
                name,
                reason: from_events.or(from_condition),
            });
        }
        out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        Ok(out)
    }

    /// Takes one sample; `instances` gives the cloud's instances, read after the cluster (so a
    /// claim seen launched finds its instance).
    pub async fn sample(
        &mut self,
        instances: impl FnOnce() -> Vec<SimInstance>,
    ) -> Result<(), kube::Error> {
        self.stores.ready().await;
        let now = self.now();
        tracing::debug!(simulated_seconds = now, "sampling the cluster");
        self.state.at = now;
        let pods = self.stores.pods.state();
        let nodes = self.stores.nodes.state();
        let mut claims = self.stores.claims.state();
        // By name, as a list gives them.
        claims.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let seen = std::mem::take(
            &mut *self
                .stores
                .claims_seen
                .lock()
                .unwrap_or_else(|p| p.into_inner()),
        );
        // Claims that came and went since the last sample: recorded, then seen deleted.
        let live_names: HashSet<Option<&str>> = claims
            .iter()
            .map(|live| live.metadata.name.as_deref())
            .collect();
        let gone: Vec<Arc<NodeClaim>> = seen
            .into_values()
            .filter(|c| !live_names.contains(&c.metadata.name.as_deref()))
            .map(Arc::new)
            .collect();
        if self.record_events {
            let events = Api::<k8s_openapi::api::core::v1::Event>::all(self.client.clone())
                .list(&ListParams::default())
                .await?;
            self.state
                .event_reasons
                .extend(events.items.into_iter().filter_map(|e| e.reason));
        }
        if self.record_buffers {
            let buffers = Api::<joinery_api::CapacityBuffer>::all(self.client.clone())
                .list(&ListParams::default())
                .await?;
            let mut now_conditions = BTreeMap::new();
            for b in buffers.items {
                let key = format!(
                    "{}/{}",
                    b.metadata.namespace.as_deref().unwrap_or_default(),
                    b.metadata.name.as_deref().unwrap_or_default()
                );
                let conditions: BTreeMap<String, (String, String)> = b
                    .status
                    .iter()
                    .flat_map(|s| s.conditions.iter().flatten())
                    .map(|c| {
                        (
                            c.type_.clone(),
                            (c.status.as_str().to_string(), c.reason.clone()),
                        )
                    })
                    .collect();
                now_conditions.insert(key, conditions);
            }
            for (key, conditions) in &now_conditions {
                for (type_, (status, reason)) in conditions {
                    let before = self
                        .state
                        .buffer_conditions
                        .get(key)
                        .and_then(|c| c.get(type_));
                    if before.map(|(s, _)| s) != Some(status) {
                        self.note(format!("capacitybuffer {key}: {type_}={status} ({reason})"));
                    }
                }
            }
            self.state.buffer_conditions = now_conditions;
        }
        let workload: Vec<&Pod> = pods
            .iter()
            .map(Arc::as_ref)
            .filter(|p| is_workload(p))
            .collect();
        let running = workload
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        for pod in &workload {
            let Some(uid) = pod.metadata.uid.as_deref() else {
                continue;
            };
            // A pod seen running once is done with: samples do not look at it again.
            if matches!(self.state.pod_pending.get(uid), Some((_, Some(_)))) {
                continue;
            }
            let created = pod.metadata.creation_timestamp.as_ref().map_or(now, |t| {
                self.clock.seconds_at(SystemTime::from(t.0)) - self.origin
            });
            let entry = self
                .state
                .pod_pending
                .entry(uid.to_string())
                .or_insert((created, None));
            if entry.1.is_none()
                && pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            {
                // When it turned Ready, on the clock; else when this sample saw it running.
                let ready = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|c| c.iter().find(|c| c.type_ == "Ready" && c.status == "True"))
                    .and_then(|c| c.last_transition_time.as_ref())
                    .map_or(now, |t| {
                        self.clock.seconds_at(SystemTime::from(t.0)) - self.origin
                    });
                entry.1 = Some((ready - created).max(0.0));
            }
        }
        let unschedulable = workload
            .iter()
            .filter(|p| is_marked_unschedulable(p))
            .count();
        let counts = PodCounts {
            total: workload.len(),
            running,
            pending: workload.len() - running,
            unschedulable,
        };
        if (counts.running, counts.pending) != (self.state.pods.running, self.state.pods.pending) {
            self.note(format!(
                "pods: {} running, {} pending",
                counts.running, counts.pending
            ));
        }
        self.state.pods = counts;
        let all_running = counts.total > 0 && counts.pending == 0;
        if all_running && !self.was_all_running {
            self.state.all_pods_running = Some(now);
            self.note(format!("all {} pods running", counts.total));
        }
        self.was_all_running = all_running;
        if nodes.len() != self.state.nodes {
            self.note(format!("nodes: {}", nodes.len()));
        }
        self.state.nodes = nodes.len();
        self.state.peak_nodes = self.state.peak_nodes.max(self.state.nodes);
        self.state.node_claims = claims.len();
        let instances = instances();
        let mut live = std::collections::BTreeSet::new();
        for (claim, is_live) in claims
            .iter()
            .map(|c| (c, true))
            .chain(gone.iter().map(|c| (c, false)))
        {
            let name = claim.metadata.name.clone().unwrap_or_default();
            if is_live {
                live.insert(name.clone());
            }
            let i = match self.index.get(&name) {
                Some(i) => *i,
                None => {
                    let pool = convert::label(&claim.metadata, labels::NODEPOOL_LABEL)
                        .unwrap_or_default()
                        .to_owned();
                    let adopted = self.adopted.contains(&name);
                    self.state.claims.push(NodeRecord {
                        node_claim: name.clone(),
                        node_pool: pool.clone(),
                        created_at: now,
                        adopted,
                        ..Default::default()
                    });
                    self.index.insert(name.clone(), self.state.claims.len() - 1);
                    if adopted {
                        self.note(format!(
                            "nodeclaim {name} from the snapshot (nodepool {pool})"
                        ));
                        self.state.claims.len() - 1
                    } else {
                        self.state.first_node_claim.get_or_insert(now);
                        let options = claim
                            .spec
                            .requirements
                            .iter()
                            .find(|r| r.key == labels::INSTANCE_TYPE_LABEL)
                            .and_then(|r| r.values.as_ref())
                            .map(|v| v.len())
                            .unwrap_or(0);
                        self.note(format!("nodeclaim {name} created (nodepool {pool}, {options} instance-type options)"));
                        self.state.claims.len() - 1
                    }
                }
            };
            let provider_id = claim.status.as_ref().and_then(|s| s.provider_id.clone());
            if self.state.claims[i].launched_at.is_none() && claim.is_condition_true("Launched") {
                let instance = provider_id
                    .as_deref()
                    .and_then(|pid| instances.iter().find(|x| x.provider_id == pid));
                let record = &mut self.state.claims[i];
                record.launched_at = Some(now);
                record.provider_id = provider_id.clone();
                if let Some(x) = instance {
                    record.instance_type = Some(x.instance_type.clone());
                    record.zone = Some(x.zone.clone());
                    record.capacity_type = Some(x.capacity_type.clone());
                    record.price_per_hour = Some(x.price_per_hour);
                }
                let line = format!(
                    "nodeclaim {name} launched: {} in {} ({}), {}/h",
                    record.instance_type.clone().unwrap_or_default(),
                    record.zone.clone().unwrap_or_default(),
                    record.capacity_type.clone().unwrap_or_default(),
                    record
                        .price_per_hour
                        .map(|p| format!("{p:.4}"))
                        .unwrap_or_else(|| "?".into())
                );
                self.note(line);
            }
            if self.state.claims[i].registered_at.is_none() && claim.is_condition_true("Registered")
            {
                let node = claim.status.as_ref().and_then(|s| s.node_name.clone());
                self.state.claims[i].registered_at = Some(now);
                self.state.claims[i].name = node.clone();
                self.note(format!(
                    "node {} registered (nodeclaim {name})",
                    node.unwrap_or_default()
                ));
            }
            if self.state.claims[i].initialized_at.is_none()
                && claim.is_condition_true("Initialized")
            {
                self.state.claims[i].initialized_at = Some(now);
                self.note(format!(
                    "node {} initialized",
                    self.state.claims[i].name.clone().unwrap_or_default()
                ));
            }
        }
        for record in self.state.claims.iter_mut() {
            if record.deleted_at.is_none() && !live.contains(&record.node_claim) {
                record.deleted_at = Some(now);
                let line = format!(
                    "nodeclaim {} deleted (node {})",
                    record.node_claim,
                    record.name.clone().unwrap_or_else(|| "-".into())
                );
                let stamped = format!("[{:>8.1}s] {line}", self.clock.seconds() - self.origin);
                if self.echo {
                    println!("{stamped}");
                }
                self.timeline.push(stamped);
            }
        }
        let alive = instances
            .iter()
            .filter(|x| x.state != InstanceState::Terminated)
            .count();
        if alive != self.state.cloud_instances {
            self.note(format!("cloud instances: {alive}"));
        }
        self.state.cloud_instances = alive;
        self.state.cost_per_hour = instances
            .iter()
            .filter(|x| x.state != InstanceState::Terminated)
            .fold(0.0, |total, x| total + x.price_per_hour);
        let mut by_type: BTreeMap<String, usize> = BTreeMap::new();
        for node in &nodes {
            let instance_type =
                convert::label(&node.metadata, labels::INSTANCE_TYPE_LABEL).map(str::to_owned);
            *by_type
                .entry(instance_type.unwrap_or_else(|| "unknown".into()))
                .or_default() += 1;
        }
        let sample = Sample {
            at: now,
            pods_pending: counts.pending,
            pods_running: counts.running,
            nodes_by_instance_type: by_type,
            cost_per_hour: self.state.cost_per_hour,
        };
        let changed = self.state.samples.last().is_none_or(|last| {
            Sample {
                at: now,
                ..last.clone()
            } != sample
        });
        if changed {
            self.state.samples.push(sample);
        }
        Ok(())
    }
}

/// A pod the counts look at: not a DaemonSet's, not being deleted, and not finished (a Job's
/// pod that `Succeeded` or `Failed` holds no capacity and waits for nothing).
fn is_workload(pod: &Pod) -> bool {
    let finished = matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    !is_daemon(pod) && pod.metadata.deletion_timestamp.is_none() && !finished
}
