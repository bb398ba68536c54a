//! The CapacityBuffers' part of a run's report: the room each buffer holds at the end, on
//! which nodes, and what that costs, computed the way the controller places the buffers'
//! virtual pods ([`joinery_adapter::buffers::holdings`]).

use joinery_adapter::assemble::{ClusterObjects, Source};
use joinery_adapter::buffers::{BufferSources, holdings, resolve_all};
use joinery_adapter::lean::{LeanNode, LeanPod};
use joinery_api::CapacityBuffer;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Node, Pod, PodTemplate};
use kube::api::{Api, ListParams};
use serde::de::DeserializeOwned;

use crate::observer::Observation;
use crate::report::{BufferNodeReport, BufferReport, ConditionReport};
use crate::simulation::Simulation;

/// Every object of a kind (none when the kind is not served or the list fails: the report
/// then has no buffers).
async fn list<K>(sim: &Simulation) -> Vec<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    Api::<K>::all(sim.client.clone())
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

/// The buffers at the end of the run (none without CapacityBuffers).
pub(crate) async fn buffer_report(sim: &Simulation, seen: &Observation) -> Vec<BufferReport> {
    let buffers: Vec<CapacityBuffer> = list(sim).await;
    if buffers.is_empty() {
        return Vec::new();
    }
    let pod_templates: Vec<PodTemplate> = list(sim).await;
    let deployments: Vec<Deployment> = list(sim).await;
    let stateful_sets: Vec<StatefulSet> = list(sim).await;
    let replica_sets: Vec<ReplicaSet> = list(sim).await;
    let nodes: Vec<LeanNode> = list::<Node>(sim).await.iter().map(LeanNode::from).collect();
    let pods: Vec<LeanPod> = list::<Pod>(sim).await.iter().map(LeanPod::from).collect();
    let claims: Vec<joinery_api::NodeClaim> = list(sim).await;
    let daemon_sets: Vec<DaemonSet> = list(sim).await;
    let cluster = ClusterObjects {
        nodes: nodes.iter().collect(),
        node_claims: claims.iter().collect(),
        pods: pods.iter().collect(),
        daemon_sets: daemon_sets.iter().collect(),
        ..Default::default()
    };
    let pending: Vec<&LeanPod> = pods
        .iter()
        .filter(|p| joinery_adapter::pods::is_provisionable(p))
        .collect();
    let buffer_refs: Vec<&CapacityBuffer> = buffers.iter().collect();
    let pod_templates: Vec<&PodTemplate> = pod_templates.iter().collect();
    let deployments: Vec<&Deployment> = deployments.iter().collect();
    let stateful_sets: Vec<&StatefulSet> = stateful_sets.iter().collect();
    let replica_sets: Vec<&ReplicaSet> = replica_sets.iter().collect();
    let sources = BufferSources {
        pod_templates: &pod_templates,
        deployments: &deployments,
        stateful_sets: &stateful_sets,
        replica_sets: &replica_sets,
    };
    let states = resolve_all(&buffer_refs, &sources);
    let price = |name: &str| {
        seen.claims
            .iter()
            .filter(|c| c.deleted_at.is_none())
            .find(|c| c.name.as_deref() == Some(name) || c.node_claim == name)
            .and_then(|c| c.price_per_hour)
    };
    let held = holdings(&cluster, &pending, &states, &price, Source::Cluster);
    states
        .iter()
        .map(|state| {
            let holding = held.get(&state.key()).cloned().unwrap_or_default();
            BufferReport {
                namespace: state.namespace.clone(),
                name: state.name.clone(),
                chunks: state
                    .resolution
                    .ready()
                    .map_or(0, |r| usize::try_from(r.chunks).unwrap_or(0)),
                held: holding.held,
                cost_per_hour: holding.cost_per_hour(),
                nodes: holding
                    .nodes
                    .iter()
                    .map(|(node, h)| BufferNodeReport {
                        node: node.clone(),
                        chunks: h.chunks,
                        share: h.share,
                        price_per_hour: h.price_per_hour,
                        cost_per_hour: h.cost_per_hour,
                    })
                    .collect(),
                conditions: state
                    .buffer
                    .status
                    .iter()
                    .flat_map(|s| s.conditions.iter().flatten())
                    .map(|c| ConditionReport {
                        type_: c.type_.clone(),
                        status: c.status.as_str().to_string(),
                        reason: c.reason.clone(),
                        message: c.message.clone(),
                    })
                    .collect(),
            }
        })
        .collect()
}
