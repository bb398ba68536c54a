//! The fake Cluster API controllers' loop: watches MachineDeployments, MachineSets and
//! Machines in the management cluster and Nodes in the workload cluster, and on every change
//! (or timer, or resync) makes one pass — MachineDeployments, then MachineSets, then
//! Machines. The behaviour is described in the module above.
//!
//! One file a controller, each an `impl Controllers` block with the helpers only it uses:
//! `machine_deployment.rs`, `machine_set.rs` and `machine.rs` (which also tracks each Machine's
//! simulated timeline and publishes what the handle reports). This file holds the loop, the
//! state the three share ([`Controllers`]) and the helpers more than one of them uses.

mod machine;
mod machine_deployment;
mod machine_set;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use joinery_core::clock::Clock;
use k8s_openapi::api::core::v1::Node;
use kube::Resource;
use kube::api::{Api, DynamicObject};
use kube::runtime::watcher;
use serde_json::{Map, Value};
use tokio::sync::broadcast;

use super::priority::DeletePolicy;
use super::{CapiOptions, CapiSettings, Kind, Ledger};
use crate::cloud::model::CloudEvent;
use crate::fake_operator::{self, Reconciler, mirrored};
use crate::physics::cache::Cache;
use crate::physics::node_is_ready;
use machine::Tracked;

/// Characters of random name suffixes (as Kubernetes' `generateName` uses).
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
/// The MachineDeployment annotation whose value replaces a missing `spec.replicas`.
const MIN_SIZE_ANNOTATION: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size";

/// `<namespace>/<name>` of an object.
fn key_of<K: Resource>(object: &K) -> String {
    let meta = object.meta();
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

struct Controllers {
    settings: CapiSettings,
    clock: Arc<Clock>,
    management: kube::Client,
    nodes: Api<Node>,
    events: broadcast::Sender<CloudEvent>,
    ledger: Arc<Ledger>,
    deployments: Cache<DynamicObject>,
    sets: Cache<DynamicObject>,
    machines: Cache<DynamicObject>,
    nodes_seen: Cache<Node>,
    tracked: BTreeMap<String, Tracked>,
    rng: u64,
}

/// Runs the controllers until the task is aborted.
pub(super) async fn run(
    options: CapiOptions,
    events: broadcast::Sender<CloudEvent>,
    ledger: Arc<Ledger>,
) {
    let CapiOptions {
        management,
        workload,
        clock,
        settings,
    } = options;
    let all = |kind: Kind| Api::<DynamicObject>::all_with(management.clone(), &kind.api_resource());
    let nodes: Api<Node> = Api::all(workload);
    let watches = vec![
        mirrored(
            all(Kind::MachineDeployment),
            watcher::Config::default(),
            |c: &mut Controllers| &mut c.deployments,
        ),
        mirrored(
            all(Kind::MachineSet),
            watcher::Config::default(),
            |c: &mut Controllers| &mut c.sets,
        ),
        mirrored(
            all(Kind::Machine),
            watcher::Config::default(),
            |c: &mut Controllers| &mut c.machines,
        ),
        mirrored(
            nodes.clone(),
            watcher::Config::default(),
            |c: &mut Controllers| &mut c.nodes_seen,
        ),
    ];
    let rng = settings.seed;
    let controllers = Controllers {
        settings,
        clock,
        management,
        nodes,
        events,
        ledger,
        deployments: Cache::new(),
        sets: Cache::new(),
        machines: Cache::new(),
        nodes_seen: Cache::new(),
        tracked: BTreeMap::new(),
        rng,
    };
    fake_operator::run(controllers, watches).await;
}

fn labels_of(object: &DynamicObject) -> BTreeMap<String, String> {
    object.metadata.labels.clone().unwrap_or_default()
}

fn name_of(object: &DynamicObject) -> String {
    object.metadata.name.clone().unwrap_or_default()
}

fn namespace_of(object: &DynamicObject) -> String {
    object.metadata.namespace.clone().unwrap_or_default()
}

/// The desired replicas of a MachineDeployment or MachineSet: `spec.replicas`, else the
/// autoscaler's min-size annotation, else 1 (what Cluster API's webhook defaults to).
fn desired_replicas(object: &DynamicObject) -> usize {
    if let Some(replicas) = object
        .data
        .pointer("/spec/replicas")
        .and_then(Value::as_i64)
    {
        return replicas.max(0) as usize;
    }
    object
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MIN_SIZE_ANNOTATION))
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(1)
}

/// The delete policy a MachineDeployment or MachineSet names (v1beta1 or v1beta2 field).
fn named_policy(object: &DynamicObject) -> Option<DeletePolicy> {
    [
        "/spec/deletePolicy",
        "/spec/strategy/rollingUpdate/deletePolicy",
        "/spec/deletion/order",
    ]
    .iter()
    .find_map(|p| {
        object
            .data
            .pointer(p)
            .and_then(Value::as_str)
            .and_then(DeletePolicy::parse)
    })
}

/// A label selector in query syntax (`a=b,c in (d,e),!f`), as a Scale's `status.selector`.
fn selector_text(selector: Option<&Value>) -> String {
    let Some(selector) = selector else {
        return String::new();
    };
    let text = |v: &Value| {
        v.as_str()
            .map(String::from)
            .unwrap_or_else(|| v.to_string())
    };
    let mut parts: Vec<String> = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", text(v)))
        .collect();
    for expression in selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = expression.get("key").map(text).unwrap_or_default();
        let mut values: Vec<String> = expression
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(text)
            .collect();
        values.sort();
        match expression
            .get("operator")
            .and_then(Value::as_str)
            .unwrap_or_default()
        {
            "In" => parts.push(format!("{key} in ({})", values.join(","))),
            "NotIn" => parts.push(format!("{key} notin ({})", values.join(","))),
            "Exists" => parts.push(key),
            "DoesNotExist" => parts.push(format!("!{key}")),
            _ => {}
        }
    }
    parts.join(",")
}

/// Whether the fields of `wanted` all have those values in `current`.
fn covers(current: Option<&Value>, wanted: &Map<String, Value>) -> bool {
    wanted
        .iter()
        .all(|(k, v)| current.and_then(|c| c.get(k)) == Some(v))
}

impl Reconciler for Controllers {
    /// The real time until the next thing due, at most the resync interval.
    fn real_wait(&self) -> Duration {
        let now = self.now();
        let next = self
            .machines
            .iter()
            .filter_map(|m| {
                let tracked = self.tracked.get(m.metadata.uid.as_deref()?)?;
                tracked.next_due(m.data.pointer("/spec/providerID").is_some())
            })
            .filter(|at| *at > now)
            .min()
            .map(|at| at - now);
        fake_operator::real_wait(&self.clock, self.settings.resync_interval, next)
    }

    fn pass(&mut self) -> impl Future<Output = ()> + Send {
        Controllers::pass(self)
    }
}

impl Controllers {
    /// Simulated time since the clock's origin (immune to the clock being rebased).
    fn now(&self) -> Duration {
        self.clock.elapsed()
    }

    fn api(&self, kind: Kind, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.management.clone(), namespace, &kind.api_resource())
    }

    fn suffix(&mut self) -> String {
        (0..5)
            .map(|_| {
                SUFFIX_ALPHABET[(crate::random::next_u64(&mut self.rng)
                    % SUFFIX_ALPHABET.len() as u64) as usize] as char
            })
            .collect()
    }

    /// A name `<prefix>-<5 random characters>` not taken in the mirror.
    fn fresh_name(
        &mut self,
        prefix: &str,
        namespace: &str,
        taken: impl Fn(&Self, &str, &str) -> bool,
    ) -> String {
        loop {
            let name = format!("{prefix}-{}", self.suffix());
            if !taken(self, namespace, &name) {
                return name;
            }
        }
    }

    async fn pass(&mut self) {
        if !(self.deployments.is_synced()
            && self.sets.is_synced()
            && self.machines.is_synced()
            && self.nodes_seen.is_synced())
        {
            return;
        }
        let deployments: Vec<DynamicObject> = self.deployments.iter().cloned().collect();
        for md in &deployments {
            if let Err(error) = self.reconcile_deployment(md).await {
                tracing::debug!(machinedeployment = %key_of(md), %error, "reconciling a MachineDeployment failed; retrying on the next pass");
            }
        }
        let sets: Vec<DynamicObject> = self.sets.iter().cloned().collect();
        for ms in &sets {
            if let Err(error) = self.reconcile_set(ms).await {
                tracing::debug!(machineset = %key_of(ms), %error, "reconciling a MachineSet failed; retrying on the next pass");
            }
        }
        self.reconcile_machines().await;
        self.publish();
    }

    /// Whether a Machine's Node is Ready (and has been for `min_ready` seconds, for available).
    fn readiness(&self, machine: &DynamicObject, min_ready: i64) -> (bool, bool) {
        let Some(node_name) = machine
            .data
            .pointer("/status/nodeRef/name")
            .and_then(Value::as_str)
        else {
            return (false, false);
        };
        let Some(node) = self.nodes_seen.get("", node_name) else {
            return (false, false);
        };
        if !node_is_ready(node) {
            return (false, false);
        }
        let since = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| std::time::SystemTime::from(t.0));
        let available = min_ready <= 0
            || since.is_some_and(|s| {
                self.clock.now().duration_since(s).unwrap_or_default()
                    >= Duration::from_secs(min_ready as u64)
            });
        (true, available)
    }

    /// Patches the fields of `status` that differ, if any.
    async fn write_status(
        &mut self,
        kind: Kind,
        object: &DynamicObject,
        status: Map<String, Value>,
    ) -> Result<(), kube::Error> {
        if covers(object.data.get("status"), &status) {
            return Ok(());
        }
        let name = name_of(object);
        let api = self.api(kind, &namespace_of(object));
        if let Some(written) = fake_operator::patch_status(&api, &name, &status).await? {
            match kind {
                Kind::MachineDeployment => self.deployments.upsert(written),
                Kind::MachineSet => self.sets.upsert(written),
                Kind::Machine => self.machines.upsert(written),
            }
        }
        Ok(())
    }
}
