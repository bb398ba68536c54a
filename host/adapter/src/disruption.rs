//! Disruption's view of the cluster in the core's form: a NodePool's budgets and settings,
//! why a NodeClaim drifted, and the whole [`Snapshot`] a disruption pass decides on — built
//! the same way for the controller (from its caches) and `joinery disrupt` (from a file).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use joinery_api::nodepool::{ConsolidationPolicy as ApiPolicy, DisruptionReason};
use joinery_api::{HasConditions, NodeClaim, NodePool};
use joinery_core::disruption::candidate::MinSaving;
use joinery_core::disruption::{
    Budget, Candidate, ConsolidationPolicy, DriftReason, DriftView, Drifted, Options, Pool, Reason,
    Snapshot, eviction_cost, reschedule_cost,
};
use joinery_core::instance_type::InstanceType;
use joinery_core::labels::{self, LabelPolicy};
use joinery_core::overlay::Overlay;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::assemble::{ClusterObjects, PoolOffer, Problem, Source, assemble};
use crate::conditions::{CONSOLIDATABLE, DRIFTED, INITIALIZED};
use crate::convert::{self, system_time};
use crate::drain::{do_not_disrupt_active, tolerates_disrupted_taint};
use crate::lean::{LeanNode, LeanPod};
use crate::pods::{eviction_blockers, is_daemon_pod, is_mirror_pod, is_terminal};
use crate::template::nodepool_hash;

/// The core's form of an API disruption reason.
pub fn reason(r: DisruptionReason) -> Reason {
    match r {
        DisruptionReason::Underutilized => Reason::Underutilized,
        DisruptionReason::Empty => Reason::Empty,
        DisruptionReason::Drifted => Reason::Drifted,
    }
}

/// A NodePool's budgets (upstream's default `nodes: 10%` when it has none).
pub fn budgets(pool: &NodePool) -> Vec<Budget> {
    pool.spec
        .effective_disruption()
        .effective_budgets()
        .into_iter()
        .map(|b| Budget {
            nodes: b.nodes.clone(),
            reasons: b
                .reasons
                .as_ref()
                .map(|rs| rs.iter().copied().map(reason).collect()),
            schedule: b.schedule.clone(),
            duration: b.duration.as_ref().map(|d| d.duration()),
        })
        .collect()
}

/// A NodePool's `consolidateAfter` (`None`: `Never`).
pub fn consolidate_after(pool: &NodePool) -> Option<Duration> {
    pool.spec
        .effective_disruption()
        .effective_consolidate_after()
        .duration()
}

/// A NodePool's minimum consolidation saving (the `joinery.dev/consolidation-min-saving`
/// annotation); an unparsable value is an error naming the pool.
pub fn min_saving(pool: &NodePool) -> Result<Option<MinSaving>, String> {
    let Some(text) = pool
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::CONSOLIDATION_MIN_SAVING_ANNOTATION))
    else {
        return Ok(None);
    };
    MinSaving::parse(text).map(Some).ok_or_else(|| {
        format!(
            "NodePool {}: annotation {}: {text:?} is neither a percentage (\"10%\") nor an amount per hour (\"0.05\")",
            pool.metadata.name.as_deref().unwrap_or(""),
            labels::CONSOLIDATION_MIN_SAVING_ANNOTATION
        )
    })
}

/// Why `claim` drifted from `pool`, by the core's rules (the cloud plugin's own check comes
/// after). `instance_types`: the pool's types now, when the instance-type check is due.
pub fn drift(
    claim: &NodeClaim,
    pool: &NodePool,
    instance_types: Option<&[InstanceType]>,
) -> Option<DriftReason> {
    let annotation = |k: &str| {
        claim
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(k))
            .map(String::as_str)
    };
    // A NodePool whose requirements do not parse launches nothing; its claims are not judged
    // against them.
    let requirements = crate::template::pool_requirements(pool).unwrap_or_default();
    let hash = nodepool_hash(pool);
    let empty = BTreeMap::new();
    joinery_core::disruption::drift(&DriftView {
        claim_hash: (
            annotation(labels::NODEPOOL_HASH_ANNOTATION),
            annotation(labels::NODEPOOL_HASH_VERSION_ANNOTATION),
        ),
        pool_hash: (&hash, labels::NODEPOOL_HASH_VERSION),
        claim_labels: claim.metadata.labels.as_ref().unwrap_or(&empty),
        pool_requirements: &requirements,
        instance_types,
    })
}

/// Everything a disruption pass reads.
#[derive(Debug, Clone)]
pub struct DisruptionObjects<'a> {
    /// The cluster (nodes, claims, every pod, DaemonSets, volumes, namespaces).
    pub cluster: ClusterObjects<'a>,
    /// PodDisruptionBudgets.
    pub pdbs: &'a [Arc<PodDisruptionBudget>],
    /// Every NodePool (budgets and settings).
    pub node_pools: Vec<&'a NodePool>,
    /// The NodePools replacements may come from, with their instance types.
    pub offers: Vec<PoolOffer<'a>>,
    /// NodeOverlays in effect.
    pub overlays: &'a [Overlay],
    /// Pending pods (those waiting for capacity, and those of nodes being deleted).
    pub pending: Vec<&'a LeanPod>,
    /// The CapacityBuffers' virtual pods ([`crate::buffers::virtual_pods`]), placed after the
    /// pending pods in every simulation: a node they would use is not empty.
    pub virtual_pods: Vec<joinery_core::scheduling::PendingPod>,
}

/// The pods a disruption pass places before the candidates' own, gathered the one way the
/// controller and `joinery disrupt` both use: every pod waiting for capacity (including
/// those kube-scheduler has not looked at yet: the nodes they would land on count as
/// nominated), then the pods that must move off managed nodes being deleted
/// ([`crate::drain::is_reschedulable`]: terminating StatefulSet pods included) that no
/// PodDisruptionBudget holds.
pub fn pending_pods<'a>(
    cluster: &ClusterObjects<'a>,
    pdbs: &[Arc<PodDisruptionBudget>],
) -> Vec<&'a LeanPod> {
    let deleting = crate::drain::deleting_node_names(
        cluster.nodes.iter().copied(),
        cluster.node_claims.iter().copied(),
    );
    let waiting = cluster
        .pods
        .iter()
        .copied()
        .filter(|p| crate::pods::pod_state(p) == crate::pods::PodState::Pending);
    let moving = cluster
        .pods
        .iter()
        .copied()
        .filter(|p| must_move(p, &deleting, pdbs));
    waiting.chain(moving).collect()
}

/// Whether `pod` must move because its node is among `deleting` (see
/// [`crate::drain::deleting_node_names`]): a reschedulable pod ([`crate::drain::is_reschedulable`],
/// terminating StatefulSet pods included) that no PodDisruptionBudget holds. The provisioner
/// and disruption passes both place these pods.
pub fn must_move(
    pod: &LeanPod,
    deleting: &BTreeSet<String>,
    pdbs: &[Arc<PodDisruptionBudget>],
) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| deleting.contains(n))
        && crate::drain::is_reschedulable(pod)
        && !crate::pods::blocked_by_budget(pod, pdbs)
}

/// What the caller knows beyond the objects.
pub struct Marks<'a> {
    /// When the pass runs.
    pub now: SystemTime,
    /// Whether a node or NodeClaim (by name) was chosen for pending pods within the nomination
    /// window.
    pub nominated: &'a dyn Fn(&str) -> bool,
    /// NodeClaims a disruption command holds already.
    pub disrupting: &'a BTreeSet<String>,
    /// Where the objects come from.
    pub source: Source,
}

/// Builds the disruption snapshot: one candidate per NodeClaim with a Node, each pool's
/// budgets and settings, and the scheduler's view through [`assemble`]. What cannot be
/// converted comes back as problems (as for provisioning) or, for a NodePool's disruption
/// settings, as messages naming the pool.
pub fn snapshot(
    objects: &DisruptionObjects<'_>,
    marks: &Marks<'_>,
    options: Options,
) -> (Snapshot, Vec<Problem>, Vec<String>) {
    let mut assembly = assemble(
        &objects.cluster,
        &objects.pending,
        &objects.offers,
        objects.overlays,
        LabelPolicy::default(),
        marks.source,
    );
    assembly
        .input
        .pods
        .extend(objects.virtual_pods.iter().cloned());
    let mut messages = Vec::new();
    let mut pods_by_node: BTreeMap<&str, Vec<&LeanPod>> = BTreeMap::new();
    for pod in &objects.cluster.pods {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
            pods_by_node.entry(node).or_default().push(pod);
        }
    }
    let node_by_provider: BTreeMap<&str, &LeanNode> = objects
        .cluster
        .nodes
        .iter()
        .filter_map(|n| n.provider_id().map(|pid| (pid, *n)))
        .collect();
    let mut pools: BTreeMap<String, Pool> = BTreeMap::new();
    for pool in &objects.node_pools {
        let name = pool.metadata.name.clone().unwrap_or_default();
        let disruption = pool.spec.effective_disruption();
        let min_saving = min_saving(pool).unwrap_or_else(|message| {
            messages.push(message);
            None
        });
        pools.insert(
            name,
            Pool {
                budgets: budgets(pool),
                policy: match disruption.effective_consolidation_policy() {
                    ApiPolicy::WhenEmpty => ConsolidationPolicy::WhenEmpty,
                    ApiPolicy::WhenEmptyOrUnderutilized => {
                        ConsolidationPolicy::WhenEmptyOrUnderutilized
                    }
                    ApiPolicy::Balanced => ConsolidationPolicy::Balanced,
                },
                consolidate_after: consolidate_after(pool),
                is_static: pool.spec.is_static(),
                template: if pool.spec.is_static() {
                    crate::template::node_claim_template(pool).ok()
                } else {
                    None
                },
                min_saving,
                ..Default::default()
            },
        );
    }
    let mut candidates = Vec::new();
    for claim in &objects.cluster.node_claims {
        let claim_name = claim.metadata.name.clone().unwrap_or_default();
        let claim_labels = claim.metadata.labels.clone().unwrap_or_default();
        let Some(pool_name) = claim_labels.get(labels::NODEPOOL_LABEL).cloned() else {
            continue;
        };
        let Some(node) = claim
            .status
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .and_then(|pid| node_by_provider.get(pid).copied())
        else {
            continue;
        };
        let node_name = node.name().to_string();
        let initialized = claim.is_condition_true(INITIALIZED);
        let deleting = claim.metadata.deletion_timestamp.is_some()
            || node.metadata.deletion_timestamp.is_some();
        let disrupting = marks.disrupting.contains(&claim_name);
        if let Some(pool) = pools.get_mut(&pool_name)
            && initialized
        {
            pool.nodes += 1;
            if deleting || disrupting || !node.is_ready() {
                pool.disrupting += 1;
            }
        }
        let label = |k: &str| {
            node.label(k)
                .or_else(|| claim_labels.get(k).map(String::as_str))
                .unwrap_or_default()
                .to_string()
        };
        let (instance_type, zone, capacity_type) = (
            label(labels::INSTANCE_TYPE_LABEL),
            label(labels::ZONE_LABEL),
            label(labels::CAPACITY_TYPE_LABEL),
        );
        let price = assembly
            .input
            .nodepools
            .iter()
            .find(|p| p.template.nodepool == pool_name)
            .and_then(|p| p.instance_types.iter().find(|t| t.name() == instance_type))
            .and_then(|t| {
                t.offerings()
                    .iter()
                    .find(|o| o.zone() == zone && o.capacity_type() == capacity_type)
            })
            .and_then(|o| o.price());
        let on_node = pods_by_node
            .get(node_name.as_str())
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let mut pod_blockers = Vec::new();
        let mut pods = Vec::new();
        let mut costs = Vec::new();
        // Active pods, and terminating StatefulSet pods (their replacement needs a home before
        // they are gone: upstream counts them, so such a node is not empty).
        for pod in on_node.iter().filter(|p| {
            !is_terminal(p)
                && (p.metadata.deletion_timestamp.is_none() || crate::drain::is_reschedulable(p))
        }) {
            let key = format!(
                "{}/{}",
                pod.metadata.namespace.as_deref().unwrap_or(""),
                pod.metadata.name.as_deref().unwrap_or("")
            );
            if do_not_disrupt_active(pod, marks.now) {
                pod_blockers.push(format!(
                    "pod {key:?} has \"karpenter.sh/do-not-disrupt\" annotation"
                ));
            }
            if is_daemon_pod(pod) || is_mirror_pod(pod) || tolerates_disrupted_taint(pod) {
                continue;
            }
            if let Some(budgets) = eviction_blockers(pod, objects.pdbs) {
                let several = if budgets.len() > 1 {
                    ", a pod under several budgets cannot be evicted"
                } else {
                    ""
                };
                pod_blockers.push(format!(
                    "pdb prevents pod evictions (pod {key:?}, PodDisruptionBudget {}{several})",
                    budgets.join(", ")
                ));
            }
            match convert::pending_pod(pod) {
                Ok(p) => {
                    let deletion_cost = pod
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(labels::POD_DELETION_COST_ANNOTATION))
                        .and_then(|v| v.parse().ok());
                    costs.push(eviction_cost(deletion_cost, p.priority));
                    pods.push(p);
                }
                Err(e) => pod_blockers.push(format!("pod {key:?} cannot be simulated: {e}")),
            }
        }
        let drifted = claim
            .condition(DRIFTED)
            .filter(|c| c.is_true())
            .map(|c| Drifted {
                reason: c.reason.clone(),
                since: system_time(&c.last_transition_time),
            });
        candidates.push(Candidate {
            claim: claim_name.clone(),
            node: node_name.clone(),
            pool: pool_name,
            instance_type,
            capacity_type,
            zone,
            price,
            disruption_cost: reschedule_cost(costs),
            pods,
            initialized,
            deleting,
            nominated: (marks.nominated)(&claim_name) || (marks.nominated)(&node_name),
            disrupting,
            do_not_disrupt: node
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(labels::DO_NOT_DISRUPT_ANNOTATION))
                == Some("true"),
            pod_blockers,
            termination_grace_period: claim.spec.termination_grace_period.is_some(),
            consolidatable: claim.is_condition_true(CONSOLIDATABLE),
            drifted,
            expires_at: claim
                .metadata
                .creation_timestamp
                .as_ref()
                .and_then(|created| {
                    Some(system_time(created) + claim.spec.effective_expire_after().duration()?)
                }),
        });
    }
    candidates.sort_by(|a, b| a.claim.cmp(&b.claim));
    let snapshot = Snapshot {
        now: Some(marks.now),
        candidates,
        pools,
        scheduling: assembly.input,
        context: assembly.context,
        options,
    };
    (snapshot, assembly.problems, messages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budgets_and_consolidate_after_come_from_the_pool() {
        let pool: NodePool = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "p"},
            "spec": {"disruption": {"consolidateAfter": "30s", "budgets": [
                {"nodes": "0", "reasons": ["Drifted"], "schedule": "0 9 * * *", "duration": "8h"},
                {"nodes": "20%"}
            ]}, "template": {"spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []}}}
        }))
        .unwrap();
        let b = budgets(&pool);
        assert_eq!(b.len(), 2);
        assert_eq!(b[0].reasons, Some(vec![Reason::Drifted]));
        assert_eq!(b[0].duration, Some(Duration::from_secs(8 * 3600)));
        assert_eq!(b[1].nodes, "20%");
        assert_eq!(consolidate_after(&pool), Some(Duration::from_secs(30)));
    }
}
