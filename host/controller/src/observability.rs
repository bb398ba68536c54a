//! Gauges of the cluster as the caches see it, refreshed every 10 s (upstream's observability
//! controllers): node count and sync state, NodePool usage and limits, each pod's startup
//! duration once it is first Ready, and the transitions of NodeClaims' and NodePools'
//! conditions. `karpenter_pods_state` (one series per pod), the per-node resource gauges and
//! the per-condition gauges are computed from the caches at each scrape instead
//! ([`pods_state_source`], [`node_rows_source`], [`condition_rows_source`]): kept, their
//! labels would hold about a kilobyte per series, and a series would outlive its object until
//! something removed it.

use crate::state::Ordered;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use joinery_adapter::convert::pod_requests;
use joinery_adapter::lean::{LeanNode, LeanPod};
use joinery_adapter::pods::{is_daemon_pod, is_terminal};
use joinery_api::{Condition, HasConditions, NodeClaim, NodePool};
use joinery_core::clock::Clock;
use joinery_core::labels;
use joinery_core::resources::{Resources, Unit};
use kube::runtime::reflector::Store;
use tokio::sync::watch;

use crate::Context;
use crate::metrics::computed::{
    ConditionLabels, ConditionRow, ConditionSource, NodeLabels, NodeRow, NodeSource,
};
use crate::metrics::{SeriesSink, SeriesSource, series};
use crate::state::ClusterState;
use crate::util::system_time;

/// How often the gauges are refreshed (simulated time).
const INTERVAL: Duration = Duration::from_secs(10);

/// Refreshes the gauges until stopped.
pub(crate) async fn run(ctx: Arc<Context>, mut stopped: watch::Receiver<bool>) {
    // Pods whose startup duration was recorded (so each is recorded once), by a hash of
    // their UID: at 50,000 pods that is 0.4 MB instead of 4 MB of UID strings.
    let mut started: HashSet<u64> = HashSet::new();
    let mut conditions = SeenConditions::new();
    // The gauges are read from the caches alone: while none changed, they stand.
    let mut observed = crate::mirror::Unchanged::default();
    loop {
        // Also follows this process's own writes in flight, not only the caches.
        let synced = crate::provisioner::synced(&ctx);
        ctx.metrics
            .cluster_state_synced
            .set(if synced { 1.0 } else { 0.0 });
        let generation = ctx.state.changed.generation();
        if !observed.holds(generation, ctx.clock.now()) {
            observe(&ctx, &mut started);
            record_transitions(&ctx, &mut conditions);
            observed.record(true, generation, None);
        }
        tokio::select! {
            biased;
            _ = stopped.changed() => return,
            _ = tokio::time::sleep(ctx.clock.to_real(INTERVAL)) => {}
        }
    }
}

/// A 64-bit hash of a pod UID (two UIDs sharing one would only lose a startup sample).
fn uid_hash(uid: &str) -> u64 {
    use std::hash::BuildHasher;
    std::hash::BuildHasherDefault::<std::hash::DefaultHasher>::default().hash_one(uid)
}

fn observe(ctx: &Context, started: &mut HashSet<u64>) {
    let nodes = ctx.state.nodes.state();
    ctx.metrics.cluster_state_node_count.set(nodes.len() as f64);

    let pools = ctx.state.node_pools.ordered();
    let mut usage = Vec::new();
    let mut limits = Vec::new();
    for pool in &pools {
        let name = pool.metadata.name.clone().unwrap_or_default();
        for (resource, quantity) in pool
            .status
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .into_iter()
            .flatten()
        {
            if let Some(value) = amount(&quantity.0) {
                usage.push((
                    series::NodePoolResource {
                        nodepool: name.clone(),
                        resource_type: resource.clone(),
                    },
                    value,
                ));
            }
        }
        for (resource, quantity) in pool.spec.limits.iter().flatten() {
            if let Some(value) = amount(&quantity.0) {
                limits.push((
                    series::NodePoolResource {
                        nodepool: name.clone(),
                        resource_type: resource.clone(),
                    },
                    value,
                ));
            }
        }
    }
    ctx.metrics.nodepools_usage.replace(usage);
    ctx.metrics.nodepools_limit.replace(limits);

    for seconds in new_startups(&ctx.state.pods.state(), started) {
        ctx.metrics.pods_startup_duration.observe(seconds);
    }
}

/// The startup durations (creation to `Ready`) of the pods that became Ready since the last
/// call, each pod once; `started` remembers them, and forgets pods no longer cached.
fn new_startups(pods: &[Arc<LeanPod>], started: &mut HashSet<u64>) -> Vec<f64> {
    let live: HashSet<u64> = pods
        .iter()
        .filter_map(|p| p.metadata.uid.as_deref())
        .map(uid_hash)
        .collect();
    started.retain(|uid| live.contains(uid));
    let mut durations = Vec::new();
    for pod in pods {
        let Some(uid) = pod.metadata.uid.as_deref().map(uid_hash) else {
            continue;
        };
        if started.contains(&uid) {
            continue;
        }
        let (Some(ready), Some(created)) = (
            ready_condition(pod).and_then(|c| c.last_transition_time.as_ref()),
            pod.metadata.creation_timestamp.as_ref(),
        ) else {
            continue;
        };
        durations.push(
            system_time(ready)
                .duration_since(system_time(created))
                .unwrap_or_default()
                .as_secs_f64(),
        );
        started.insert(uid);
    }
    durations
}

/// The pod's `Ready` condition, when it is `True`.
fn ready_condition(pod: &LeanPod) -> Option<&joinery_adapter::lean::LeanCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")
}

/// A quantity as a plain number (cores, bytes, counts).
fn amount(quantity: &str) -> Option<f64> {
    let millis = joinery_core::Quantity::parse(quantity)
        .ok()?
        .milli_value()?;
    Some(millis as f64 / 1000.0)
}

/// The source of the per-node gauges: one row per cached Node, with what its unfinished pods
/// (and, apart, its DaemonSet pods) request, read from the caches when scraped.
pub(crate) fn node_rows_source(state: &ClusterState) -> Box<NodeSource> {
    let (pods, nodes) = (state.pods.clone(), state.nodes.clone());
    Box::new(move || node_rows(&nodes.state(), &pods.state()))
}

/// Upstream's `resource_type` of a resource name: lowercase, `-` as `_`.
fn resource_type(name: &str) -> String {
    name.to_lowercase().replace('-', "_")
}

/// The amounts of `resources` by upstream's resource type, CPU in cores.
fn amounts(resources: &Resources) -> Vec<(String, f64)> {
    resources
        .iter()
        .filter(|(name, _)| *name != joinery_core::resources::PODS)
        .map(|(name, amount)| {
            let value = match Unit::of(name) {
                Unit::Milli => amount as f64 / 1000.0,
                Unit::Bytes | Unit::Count => amount as f64,
            };
            (resource_type(name), value)
        })
        .collect()
}

/// One row per node: its labels, allocatable, and the requests of the unfinished pods bound
/// to it (all of them, and the DaemonSet pods alone). A pod whose requests do not parse is
/// left out.
fn node_rows(nodes: &[Arc<LeanNode>], pods: &[Arc<LeanPod>]) -> Vec<NodeRow> {
    let mut requests: HashMap<&str, (Resources, Resources)> = HashMap::new();
    for pod in pods {
        let Some(spec) = pod.spec.as_ref() else {
            continue;
        };
        let Some(node) = spec.node_name.as_deref() else {
            continue;
        };
        if is_terminal(pod) {
            continue;
        }
        let Ok(asked) = pod_requests(spec) else {
            continue;
        };
        let (all, daemons) = requests.entry(node).or_default();
        *all += &asked;
        if is_daemon_pod(pod) {
            *daemons += &asked;
        }
    }
    let none = (Resources::new(), Resources::new());
    nodes
        .iter()
        .map(|node| {
            let label = |key: &str| node.label(key).unwrap_or_default().to_string();
            let (all, daemons) = requests.get(node.name()).unwrap_or(&none);
            NodeRow {
                labels: NodeLabels {
                    nodepool: label(labels::NODEPOOL_LABEL),
                    zone: label(labels::ZONE_LABEL),
                    region: label(labels::REGION_LABEL),
                    instance_type: label(labels::INSTANCE_TYPE_LABEL),
                    arch: label(labels::ARCH_LABEL),
                    os: label(labels::OS_LABEL),
                    capacity_type: label(labels::CAPACITY_TYPE_LABEL),
                    windows_build: label(labels::WINDOWS_BUILD_LABEL),
                    node_name: node.name().to_string(),
                    // Joinery's node cache does not keep the deprecated `status.phase`.
                    phase: String::new(),
                    managed: node.label(labels::NODEPOOL_LABEL).is_some().to_string(),
                },
                allocatable: node
                    .allocatable()
                    .into_iter()
                    .flatten()
                    .filter_map(|(name, quantity)| {
                        Some((resource_type(name), amount(&quantity.0)?))
                    })
                    .collect(),
                pod_requests: amounts(all),
                daemon_requests: amounts(daemons),
            }
        })
        .collect()
}

/// One condition as last seen: what a transition is detected against.
#[derive(Debug, Clone, PartialEq)]
struct SeenCondition {
    type_: String,
    status: String,
    reason: String,
    since: std::time::SystemTime,
}

/// The conditions last seen, by object (kind and name).
type SeenConditions = HashMap<(&'static str, String), Vec<SeenCondition>>;

/// The API group of the kinds whose conditions are observed.
const GROUP: &str = "karpenter.sh";

impl SeenCondition {
    fn of(condition: &Condition) -> Self {
        SeenCondition {
            type_: condition.type_.clone(),
            status: condition.status.as_str().to_string(),
            reason: condition.reason.clone(),
            since: system_time(&condition.last_transition_time),
        }
    }
}

/// Hands each cached NodeClaim's and NodePool's kind, name and conditions to `f`.
fn each_conditioned(
    claims: &Store<NodeClaim>,
    pools: &Store<NodePool>,
    mut f: impl FnMut(&'static str, &str, &[Condition]),
) {
    for claim in claims.state() {
        f(
            "NodeClaim",
            claim.metadata.name.as_deref().unwrap_or_default(),
            claim.conditions(),
        );
    }
    for pool in pools.state() {
        f(
            "NodePool",
            pool.metadata.name.as_deref().unwrap_or_default(),
            pool.status
                .as_ref()
                .map(|s| s.conditions())
                .unwrap_or_default(),
        );
    }
}

/// The conditions of `now` whose status differs from what `before` had for their type (or
/// that `before` lacked: the first sight of a condition counts, as upstream's does), each
/// with the condition it replaced and how long that held, when there was one.
fn transitions<'a>(
    before: &'a [SeenCondition],
    now: &'a [SeenCondition],
) -> Vec<(&'a SeenCondition, Option<(&'a SeenCondition, f64)>)> {
    now.iter()
        .filter_map(|current| {
            let previous = before.iter().find(|b| b.type_ == current.type_);
            if previous.is_some_and(|p| p.status == current.status) {
                return None;
            }
            let held = previous.map(|p| {
                let seconds = current
                    .since
                    .duration_since(p.since)
                    .unwrap_or_default()
                    .as_secs_f64();
                (p, seconds)
            });
            Some((current, held))
        })
        .collect()
}

/// Counts the condition transitions since the last call and records how long the replaced
/// statuses held; `seen` remembers the conditions, and forgets objects no longer cached.
fn record_transitions(ctx: &Context, seen: &mut SeenConditions) {
    let mut now_seen = SeenConditions::new();
    each_conditioned(
        &ctx.state.node_claims,
        &ctx.state.node_pools,
        |kind, name, conditions| {
            let current: Vec<SeenCondition> = conditions.iter().map(SeenCondition::of).collect();
            let key = (kind, name.to_string());
            let before = seen.get(&key).map(Vec::as_slice).unwrap_or_default();
            for (condition, held) in transitions(before, &current) {
                ctx.metrics
                    .status_condition_transitions
                    .inc(&series::ConditionTransition {
                        type_: condition.type_.clone(),
                        status: condition.status.clone(),
                        reason: condition.reason.clone(),
                        group: GROUP.into(),
                        kind: kind.into(),
                    });
                if let Some((previous, seconds)) = held {
                    ctx.metrics.status_condition_transition_seconds.observe(
                        &series::ConditionDuration {
                            type_: previous.type_.clone(),
                            status: previous.status.clone(),
                            group: GROUP.into(),
                            kind: kind.into(),
                        },
                        seconds,
                    );
                }
            }
            now_seen.insert(key, current);
        },
    );
    *seen = now_seen;
}

/// The source of the per-condition gauges: one row per condition of each cached NodeClaim and
/// NodePool, with the seconds since its last transition on `clock`, read when scraped.
pub(crate) fn condition_rows_source(
    state: &ClusterState,
    clock: Arc<Clock>,
) -> Box<ConditionSource> {
    let (claims, pools) = (state.node_claims.clone(), state.node_pools.clone());
    Box::new(move || {
        let now = clock.now();
        let mut rows = Vec::new();
        each_conditioned(&claims, &pools, |kind, name, conditions| {
            for condition in conditions {
                rows.push(ConditionRow {
                    labels: ConditionLabels {
                        namespace: String::new(),
                        name: name.to_string(),
                        type_: condition.type_.clone(),
                        status: condition.status.as_str().to_string(),
                        reason: condition.reason.clone(),
                        group: GROUP.into(),
                        kind: kind.into(),
                    },
                    seconds: now
                        .duration_since(system_time(&condition.last_transition_time))
                        .unwrap_or_default()
                        .as_secs_f64(),
                });
            }
        });
        rows
    })
}

/// The source of `karpenter_pods_state`: one series per cached pod, with upstream's labels,
/// read from the pod and node caches when scraped.
pub(crate) fn pods_state_source(state: &ClusterState) -> Box<SeriesSource> {
    let (pods, nodes) = (state.pods.clone(), state.nodes.clone());
    Box::new(move |sink: &mut SeriesSink<'_>| {
        let nodes = nodes.state();
        let nodes_by_name: BTreeMap<&str, &LeanNode> =
            nodes.iter().map(|n| (n.name(), n.as_ref())).collect();
        for pod in pods.state().iter() {
            emit_pod_state(pod, &nodes_by_name, sink);
        }
    })
}

/// Hands upstream's `karpenter_pods_state` series for one pod to `sink`.
fn emit_pod_state(pod: &LeanPod, nodes: &BTreeMap<&str, &LeanNode>, sink: &mut SeriesSink<'_>) {
    let node_name = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or_default();
    let node_labels = nodes
        .get(node_name)
        .and_then(|n| n.metadata.labels.as_ref());
    let node_label = |key: &str| node_labels.and_then(|l| l.get(key)).unwrap_or_default();
    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .next()
        .map(|o| format!("{}/{}", o.kind, o.name))
        .unwrap_or_default();
    let flag = |b: bool| if b { "true" } else { "false" };
    let labels = series::PodState {
        name: pod.metadata.name.as_deref().unwrap_or_default(),
        namespace: pod.metadata.namespace.as_deref().unwrap_or_default(),
        owner: owner.as_str(),
        node: node_name,
        scheduled: flag(!node_name.is_empty()),
        nodepool: node_label(labels::NODEPOOL_LABEL),
        zone: node_label(labels::ZONE_LABEL),
        arch: node_label(labels::ARCH_LABEL),
        capacity_type: node_label(labels::CAPACITY_TYPE_LABEL),
        instance_type: node_label(labels::INSTANCE_TYPE_LABEL),
        phase: pod
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or_default(),
        ready: flag(ready_condition(pod).is_some()),
        managed: flag(node_labels.is_some_and(|l| l.contains_key(labels::NODEPOOL_LABEL))),
    };
    sink(&labels, 1.0);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, ready_after: Option<u64>) -> Arc<LeanPod> {
        let conditions = match ready_after {
            Some(seconds) => {
                serde_json::json!([{"type": "Ready", "status": "True", "lastTransitionTime": format!("2026-01-01T00:00:{seconds:02}Z")}])
            }
            None => serde_json::json!([{"type": "Ready", "status": "False"}]),
        };
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": uid, "uid": uid, "creationTimestamp": "2026-01-01T00:00:00Z"},
                "status": {"conditions": conditions}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn each_pod_startup_is_observed_once() {
        let mut started = HashSet::new();
        let pods = vec![pod("a", Some(12)), pod("b", None)];
        assert_eq!(new_startups(&pods, &mut started), [12.0]);
        assert!(
            new_startups(&pods, &mut started).is_empty(),
            "a pod already observed is not observed again"
        );
        // b becomes Ready; a is deleted and forgotten.
        let pods = vec![pod("b", Some(30))];
        assert_eq!(new_startups(&pods, &mut started), [30.0]);
        assert_eq!(started.len(), 1, "pods no longer cached are forgotten");
        assert!(new_startups(&pods, &mut started).is_empty());
    }

    fn node(name: &str, pool: Option<&str>) -> Arc<LeanNode> {
        let mut labels = serde_json::json!({"topology.kubernetes.io/zone": "z-a", "kubernetes.io/arch": "amd64"});
        if let Some(pool) = pool {
            labels["karpenter.sh/nodepool"] = pool.into();
        }
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "labels": labels},
                "status": {"allocatable": {"cpu": "3900m", "memory": "1Gi", "ephemeral-storage": "10G", "pods": "110"}}
            }))
            .unwrap(),
        )
    }

    fn bound_pod(name: &str, node: &str, cpu: &str, daemon: bool, phase: &str) -> Arc<LeanPod> {
        let owners = if daemon {
            serde_json::json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u"}])
        } else {
            serde_json::json!([])
        };
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "default", "uid": name, "ownerReferences": owners},
                "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}}}]},
                "status": {"phase": phase}
            }))
            .unwrap(),
        )
    }

    #[test]
    fn node_rows_sum_unfinished_pods_per_node_with_upstreams_names_and_units() {
        let nodes = vec![node("n-1", Some("default")), node("n-2", None)];
        let pods = vec![
            bound_pod("a", "n-1", "500m", false, "Running"),
            bound_pod("b", "n-1", "250m", true, "Running"),
            bound_pod("done", "n-1", "8", false, "Succeeded"),
            bound_pod("elsewhere", "gone", "1", false, "Running"),
        ];
        let rows = node_rows(&nodes, &pods);
        assert_eq!(rows.len(), 2, "one row per cached node");
        let one = &rows[0];
        assert_eq!(one.labels.node_name, "n-1");
        assert_eq!(one.labels.nodepool, "default");
        assert_eq!(one.labels.zone, "z-a");
        assert_eq!(one.labels.arch, "amd64");
        assert_eq!(one.labels.managed, "true");
        let value = |list: &[(String, f64)], resource: &str| {
            list.iter().find(|(r, _)| r == resource).map(|(_, v)| *v)
        };
        assert_eq!(value(&one.allocatable, "cpu"), Some(3.9), "cores");
        assert_eq!(
            value(&one.allocatable, "memory"),
            Some(1073741824.0),
            "bytes"
        );
        assert_eq!(
            value(&one.allocatable, "ephemeral_storage"),
            Some(1e10),
            "upstream's resource_type: lowercase, - as _"
        );
        assert_eq!(value(&one.allocatable, "pods"), Some(110.0));
        assert_eq!(
            value(&one.pod_requests, "cpu"),
            Some(0.75),
            "DaemonSet pods included, finished pods not"
        );
        assert_eq!(value(&one.pod_requests, "memory"), Some(200.0 * 1048576.0));
        assert_eq!(
            value(&one.pod_requests, "pods"),
            None,
            "no pod slots, as upstream"
        );
        assert_eq!(value(&one.daemon_requests, "cpu"), Some(0.25));
        let two = &rows[1];
        assert_eq!(two.labels.managed, "false");
        assert!(two.pod_requests.is_empty() && two.daemon_requests.is_empty());
    }

    fn seen(type_: &str, status: &str, at: u64) -> SeenCondition {
        SeenCondition {
            type_: type_.into(),
            status: status.into(),
            reason: format!("{type_}{status}"),
            since: std::time::UNIX_EPOCH + Duration::from_secs(at),
        }
    }

    #[test]
    fn a_transition_is_a_changed_or_new_status_and_carries_how_long_the_old_one_held() {
        let before = [seen("Launched", "True", 10), seen("Ready", "Unknown", 10)];
        let now = [
            seen("Launched", "True", 10),
            seen("Ready", "True", 40),
            seen("Drifted", "True", 50),
        ];
        let found = transitions(&before, &now);
        assert_eq!(found.len(), 2, "{found:?}");
        let (ready, held) = &found[0];
        assert_eq!(
            (ready.type_.as_str(), ready.status.as_str()),
            ("Ready", "True")
        );
        let (previous, seconds) = held.expect("Ready held Unknown before");
        assert_eq!(previous.status, "Unknown");
        assert_eq!(seconds, 30.0);
        let (drifted, held) = &found[1];
        assert_eq!(drifted.type_, "Drifted");
        assert!(held.is_none(), "a new condition has no previous status");
        assert!(transitions(&now, &now).is_empty(), "nothing changed");
        assert_eq!(
            transitions(&[], &now).len(),
            3,
            "first sight counts, as upstream"
        );
    }
}
