//! Workload controllers: Deployments (through ReplicaSets) and DaemonSets.
//!
//! The **Deployment controller** keeps one ReplicaSet per pod template — named
//! `<deployment>-<pod-template-hash>`, owned by the Deployment, with the `pod-template-hash`
//! label on itself, its selector and its pods — at the Deployment's replica count, and scales
//! the ReplicaSets of older templates to zero (a template change replaces all pods at once;
//! rolling updates are not emulated). The **ReplicaSet controller** creates pods from the
//! template (`generateName: <replicaset>-`, owned by the ReplicaSet) until the active ones
//! (not finished, not being deleted) reach the replica count — so evicted or deleted pods are
//! replaced — and deletes surplus pods, unscheduled, pending, unready and newest first. Both
//! keep their `status` counts current.
//!
//! The **DaemonSet controller** runs one pod per node whose labels match the template's
//! nodeSelector and required node affinity and whose `NoSchedule`/`NoExecute` taints its
//! tolerations (plus the ones the real controller adds) tolerate. Its pods are created with
//! `spec.nodeName` set, bypassing the scheduler; a pod whose node no longer admits it (an
//! untolerated `NoExecute` taint, a selector mismatch) or no longer exists is deleted.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetStatus, Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet,
    ReplicaSetSpec, ReplicaSetStatus,
};
use k8s_openapi::api::core::v1::{Node, Pod, PodTemplateSpec, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

use super::cache::Cache;
use super::lag::{Pace, paced};
use super::scheduler::{node_affinity_matches, untolerated};
use super::{
    PhysicsContext, PhysicsError, Trigger, api_code, controller_reference, controller_uid,
    core_toleration, delete_pod, is_deleting, is_ready, is_terminal, labels_of, name_of,
    node_name_of, scheduling_taints, watch,
};
use joinery_core::taints::TaintEffect;

/// The label tying a ReplicaSet and its pods to one pod template of a Deployment.
const POD_TEMPLATE_HASH_LABEL: &str = "pod-template-hash";

/// The characters Kubernetes encodes generated name parts with.
const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The `pod-template-hash` of a pod template: FNV-1a of its JSON, written the way
/// Kubernetes writes it (the decimal digits mapped onto its safe alphabet).
fn template_hash(template: &PodTemplateSpec) -> String {
    let text = serde_json::to_string(template).unwrap_or_default();
    let mut hash: u32 = 0x811c_9dc5;
    for byte in text.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash.to_string()
        .bytes()
        .map(|b| SAFE_ALPHABET[usize::from(b) % SAFE_ALPHABET.len()] as char)
        .collect()
}

/// The ReplicaSet of a Deployment's current template among those it owns: the one named
/// after the template's hash, else one whose template is the same but for the
/// `pod-template-hash` label (as the real controller finds it, so a ReplicaSet created by
/// another controller — one from a cluster snapshot — is kept, not rolled over).
fn current_replica_set<'a>(
    owned: &'a [ReplicaSet],
    deployment: &str,
    template: &PodTemplateSpec,
) -> Option<&'a ReplicaSet> {
    let named = format!("{deployment}-{}", template_hash(template));
    let without_hash = |t: &PodTemplateSpec| {
        let mut t = t.clone();
        if let Some(labels) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
            labels.remove(POD_TEMPLATE_HASH_LABEL);
        }
        t
    };
    let wanted = without_hash(template);
    owned
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some(named.as_str()))
        .or_else(|| {
            owned.iter().find(|r| {
                r.spec
                    .as_ref()
                    .and_then(|s| s.template.as_ref())
                    .is_some_and(|t| without_hash(t) == wanted)
            })
        })
}

/// A pod from a template, owned by `owner`.
fn pod_from_template(template: &PodTemplateSpec, namespace: &str, owner: OwnerReference) -> Pod {
    let template_meta = template.metadata.clone().unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", owner.name)),
            namespace: Some(namespace.to_string()),
            labels: template_meta.labels,
            annotations: template_meta.annotations,
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

/// Creates a pod, recording it in the cache.
async fn create_pod(
    shared: &PhysicsContext,
    pods: &mut Cache<Pod>,
    pod: &Pod,
) -> Result<(), PhysicsError> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(shared.client.clone(), &namespace);
    let created = api.create(&PostParams::default(), pod).await?;
    tracing::debug!(pod = %created.metadata.name.as_deref().unwrap_or_default(), %namespace, "pod created");
    pods.upsert(created);
    Ok(())
}

/// Runs the Deployment and ReplicaSet controllers until the task is aborted.
pub(crate) async fn run_deployments(shared: Arc<PhysicsContext>) {
    let client = shared.client.clone();
    let mut deployment_events = watch(
        Api::<Deployment>::all(client.clone()),
        watcher::Config::default(),
    );
    let mut replica_set_events = watch(
        Api::<ReplicaSet>::all(client.clone()),
        watcher::Config::default(),
    );
    let mut pod_events = watch(Api::<Pod>::all(client), watcher::Config::default());
    let mut resync = tokio::time::interval(shared.real_resync());
    let mut trigger = Trigger::scaled(&shared.clock);
    let pace = shared.pace();
    let mut controller = Deployments {
        shared,
        deployments: Cache::new(),
        replica_sets: Cache::new(),
        pods: Cache::new(),
        pace,
        writes: 0,
    };
    // Whether the last pass wrote nothing and nothing was seen since: a resync would then
    // find the same caches and do nothing again (the pass reads no clock), so it is skipped.
    let mut settled = false;
    loop {
        let synced = controller.deployments.is_synced()
            && controller.replica_sets.is_synced()
            && controller.pods.is_synced();
        tokio::select! {
            biased;
            Some(event) = deployment_events.next() => {
                controller.deployments.apply(event);
                settled = false;
                trigger.fire();
            }
            Some(event) = replica_set_events.next() => {
                controller.replica_sets.apply(event);
                settled = false;
                trigger.fire();
            }
            Some(event) = pod_events.next() => {
                controller.pods.apply(event);
                settled = false;
                trigger.fire();
            }
            _ = resync.tick() => if !settled {
                trigger.fire();
            },
            fired = trigger.due(), if synced => {
                controller.shared.record_pass(LAG_SERIES, fired);
                let before = controller.writes;
                controller.pass().await;
                settled = controller.writes == before;
            }
        }
    }
}

struct Deployments {
    shared: Arc<PhysicsContext>,
    deployments: Cache<Deployment>,
    replica_sets: Cache<ReplicaSet>,
    pods: Cache<Pod>,
    pace: Pace,
    /// How many writes the controller has attempted (failed ones included).
    writes: u64,
}

/// The lag series the workload controllers record into.
const LAG_SERIES: &str = "workloads";

/// Most pods a ReplicaSet creates or deletes in one pass (kube-controller-manager's
/// `burstReplicas`); the next pass goes on.
const BURST_REPLICAS: usize = 500;

/// A pod a ReplicaSet creates or deletes.
enum PodWrite {
    Create(Pod),
    Delete(Pod),
}

/// What came of a [`PodWrite`].
#[expect(
    clippy::large_enum_variant,
    reason = "short-lived, one per write in flight; boxing would add an allocation each"
)]
enum PodWritten {
    Created(Result<Pod, kube::Error>),
    Deleted(Pod, Result<Option<Pod>, kube::Error>),
}

/// The writes of several ReplicaSets taken in turn, one of each at a time, so that they grow
/// (or shrink) together as with the real controller's parallel workers.
fn interleave(mut plans: Vec<std::collections::VecDeque<PodWrite>>) -> Vec<PodWrite> {
    let mut out = Vec::new();
    while plans.iter().any(|p| !p.is_empty()) {
        for plan in &mut plans {
            if let Some(write) = plan.pop_front() {
                out.push(write);
            }
        }
    }
    out
}

impl Deployments {
    async fn pass(&mut self) {
        let deployments: Vec<Deployment> = self
            .deployments
            .iter()
            .filter(|d| d.metadata.deletion_timestamp.is_none())
            .cloned()
            .collect();
        for deployment in &deployments {
            if let Err(error) = self.sync_replica_sets(deployment).await {
                tracing::warn!(deployment = %deployment.metadata.name.as_deref().unwrap_or_default(), %error, "deployment sync failed");
            }
        }
        let replica_sets: Vec<ReplicaSet> = self
            .replica_sets
            .iter()
            .filter(|r| r.metadata.deletion_timestamp.is_none())
            .cloned()
            .collect();
        let plans = replica_sets
            .iter()
            .map(|replica_set| self.plan_pods(replica_set).into())
            .collect();
        self.write_pods(interleave(plans)).await;
        for replica_set in &replica_sets {
            let Some(uid) = replica_set.metadata.uid.as_deref() else {
                continue;
            };
            if let Err(error) = self.sync_replica_set_status(replica_set, uid).await {
                tracing::warn!(replicaset = %replica_set.metadata.name.as_deref().unwrap_or_default(), %error, "replicaset status update failed");
            }
        }
        for deployment in &deployments {
            if let Err(error) = self.sync_deployment_status(deployment).await {
                tracing::warn!(deployment = %deployment.metadata.name.as_deref().unwrap_or_default(), %error, "deployment status update failed");
            }
        }
    }

    fn owned_replica_sets(&self, deployment: &Deployment) -> Vec<ReplicaSet> {
        let uid = deployment.metadata.uid.as_deref();
        self.replica_sets
            .iter()
            .filter(|r| uid.is_some() && controller_uid(&r.metadata) == uid)
            .cloned()
            .collect()
    }

    /// Creates the ReplicaSet of the current template, or brings it to the replica count, and
    /// scales the others to zero.
    async fn sync_replica_sets(&mut self, deployment: &Deployment) -> Result<(), PhysicsError> {
        let Some(spec) = deployment.spec.as_ref() else {
            return Ok(());
        };
        let (namespace, name) = name_of(&deployment.metadata);
        let desired = spec.replicas.unwrap_or(1);
        let hash = template_hash(&spec.template);
        let api: Api<ReplicaSet> = Api::namespaced(self.shared.client.clone(), &namespace);
        let owned = self.owned_replica_sets(deployment);
        let current = current_replica_set(&owned, &name, &spec.template);
        let new_name = current
            .and_then(|r| r.metadata.name.clone())
            .unwrap_or_else(|| format!("{name}-{hash}"));
        match current {
            None => {
                let mut template = spec.template.clone();
                let template_meta = template.metadata.get_or_insert_with(Default::default);
                template_meta
                    .labels
                    .get_or_insert_with(BTreeMap::new)
                    .insert(POD_TEMPLATE_HASH_LABEL.into(), hash.clone());
                let labels = template_meta.labels.clone();
                let mut selector = spec.selector.clone();
                selector
                    .match_labels
                    .get_or_insert_with(BTreeMap::new)
                    .insert(POD_TEMPLATE_HASH_LABEL.into(), hash.clone());
                let replica_set = ReplicaSet {
                    metadata: ObjectMeta {
                        name: Some(new_name.clone()),
                        namespace: Some(namespace.clone()),
                        labels,
                        owner_references: Some(vec![controller_reference(deployment)]),
                        ..Default::default()
                    },
                    spec: Some(ReplicaSetSpec {
                        replicas: Some(desired),
                        selector,
                        template: Some(template),
                        min_ready_seconds: spec.min_ready_seconds,
                    }),
                    status: None,
                };
                self.writes += 1;
                match api.create(&PostParams::default(), &replica_set).await {
                    Ok(created) => {
                        tracing::debug!(replicaset = %new_name, %namespace, "replicaset created");
                        self.replica_sets.upsert(created);
                    }
                    Err(error) if api_code(&error) == Some(409) => {}
                    Err(error) => return Err(error.into()),
                }
            }
            Some(current) if current.spec.as_ref().and_then(|s| s.replicas) != Some(desired) => {
                self.scale(&api, &new_name, desired).await?;
            }
            Some(_) => {}
        }
        for old in owned
            .iter()
            .filter(|r| r.metadata.name.as_deref() != Some(new_name.as_str()))
        {
            if old.spec.as_ref().and_then(|s| s.replicas) != Some(0)
                && old.metadata.deletion_timestamp.is_none()
            {
                self.scale(&api, old.metadata.name.as_deref().unwrap_or_default(), 0)
                    .await?;
            }
        }
        Ok(())
    }

    async fn scale(
        &mut self,
        api: &Api<ReplicaSet>,
        name: &str,
        replicas: i32,
    ) -> Result<(), PhysicsError> {
        let patch = json!({"spec": {"replicas": replicas}});
        self.writes += 1;
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(updated) => {
                tracing::debug!(replicaset = %name, replicas, "replicaset scaled");
                self.replica_sets.upsert(updated);
                Ok(())
            }
            Err(error) if api_code(&error) == Some(404) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// The pods to create or delete so that the ReplicaSet's active pods match its replica
    /// count (at most [`BURST_REPLICAS`]): surplus pods go unscheduled first, then pending,
    /// unready, cheaper to delete, newest.
    fn plan_pods(&self, replica_set: &ReplicaSet) -> Vec<PodWrite> {
        let Some(spec) = replica_set.spec.as_ref() else {
            return Vec::new();
        };
        let Some(uid) = replica_set.metadata.uid.as_deref() else {
            return Vec::new();
        };
        let (namespace, _) = name_of(&replica_set.metadata);
        let desired = spec.replicas.unwrap_or(1).max(0) as usize;
        let active: Vec<&Pod> = self
            .pods
            .iter()
            .filter(|p| {
                controller_uid(&p.metadata) == Some(uid) && !is_terminal(p) && !is_deleting(p)
            })
            .collect();
        if active.len() < desired
            && let Some(template) = spec.template.as_ref()
        {
            let pod = pod_from_template(template, &namespace, controller_reference(replica_set));
            return (active.len()..desired)
                .take(BURST_REPLICAS)
                .map(|_| PodWrite::Create(pod.clone()))
                .collect();
        }
        if active.len() <= desired {
            return Vec::new();
        }
        let mut ranked = active.clone();
        ranked.sort_by_key(|p| {
            let phase = match p.status.as_ref().and_then(|s| s.phase.as_deref()) {
                Some("Pending") | None => 0,
                Some("Running") => 2,
                Some(_) => 1,
            };
            let cost: i64 = p
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(joinery_core::labels::POD_DELETION_COST_ANNOTATION))
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            (
                node_name_of(p).is_some(),
                phase,
                is_ready(p),
                cost,
                Reverse(p.metadata.creation_timestamp.clone()),
                p.metadata.name.clone(),
            )
        });
        ranked
            .into_iter()
            .take((active.len() - desired).min(BURST_REPLICAS))
            .map(|p| PodWrite::Delete(p.clone()))
            .collect()
    }

    /// Makes pod creations and deletions at the controllers' pace, a few at once, and takes
    /// what they return into the cache.
    async fn write_pods(&mut self, writes: Vec<PodWrite>) {
        if writes.is_empty() {
            return;
        }
        self.writes += writes.len() as u64;
        let client = self.shared.client.clone();
        let jobs: Vec<_> = writes
            .into_iter()
            .map(|write| {
                let client = client.clone();
                async move {
                    match write {
                        PodWrite::Create(pod) => {
                            let api: Api<Pod> = Api::namespaced(
                                client,
                                pod.metadata.namespace.as_deref().unwrap_or_default(),
                            );
                            PodWritten::Created(api.create(&PostParams::default(), &pod).await)
                        }
                        PodWrite::Delete(pod) => {
                            let (namespace, name) = name_of(&pod.metadata);
                            let api: Api<Pod> = Api::namespaced(client, &namespace);
                            let result = api
                                .delete(&name, &DeleteParams::default())
                                .await
                                .map(|answer| answer.left());
                            PodWritten::Deleted(pod, result)
                        }
                    }
                }
            })
            .collect();
        let shared = self.shared.clone();
        for written in paced(&shared.clock, &mut self.pace, &shared.lag, LAG_SERIES, jobs).await {
            match written {
                PodWritten::Created(Ok(created)) => {
                    tracing::debug!(pod = %created.metadata.name.as_deref().unwrap_or_default(), "pod created");
                    self.pods.upsert(created);
                }
                PodWritten::Created(Err(error)) => tracing::warn!(%error, "creating a pod failed"),
                PodWritten::Deleted(pod, result) => {
                    let (namespace, name) = name_of(&pod.metadata);
                    match result {
                        Ok(answer) => {
                            match answer {
                                Some(object) => self.pods.deleted(object, false),
                                None => self.pods.forget(&namespace, &name),
                            }
                            tracing::debug!(pod = %name, %namespace, "pod deleted");
                        }
                        Err(error) if api_code(&error) == Some(404) => {
                            self.pods.forget(&namespace, &name)
                        }
                        Err(error) => {
                            tracing::warn!(pod = %name, %namespace, %error, "deleting a pod failed")
                        }
                    }
                }
            }
        }
    }

    /// One write at the controllers' pace.
    async fn paced_write<T>(&mut self, write: impl std::future::Future<Output = T>) -> T {
        self.writes += 1;
        let shared = self.shared.clone();
        let mut done = paced(
            &shared.clock,
            &mut self.pace,
            &shared.lag,
            LAG_SERIES,
            vec![write],
        )
        .await;
        done.pop().expect("one write gives one result")
    }

    async fn sync_replica_set_status(
        &mut self,
        replica_set: &ReplicaSet,
        uid: &str,
    ) -> Result<(), PhysicsError> {
        let active: Vec<&Pod> = self
            .pods
            .iter()
            .filter(|p| {
                controller_uid(&p.metadata) == Some(uid) && !is_terminal(p) && !is_deleting(p)
            })
            .collect();
        let ready = active.iter().filter(|p| is_ready(p)).count() as i32;
        let status = ReplicaSetStatus {
            replicas: active.len() as i32,
            fully_labeled_replicas: Some(active.len() as i32),
            ready_replicas: Some(ready),
            available_replicas: Some(ready),
            observed_generation: replica_set.metadata.generation,
            ..Default::default()
        };
        if replica_set.status.as_ref() == Some(&status) {
            return Ok(());
        }
        let (namespace, name) = name_of(&replica_set.metadata);
        let api: Api<ReplicaSet> = Api::namespaced(self.shared.client.clone(), &namespace);
        let patch = json!({"status": status});
        match self
            .paced_write(api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)))
            .await
        {
            Ok(updated) => {
                self.replica_sets.upsert(updated);
                Ok(())
            }
            Err(error) if api_code(&error) == Some(404) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    async fn sync_deployment_status(
        &mut self,
        deployment: &Deployment,
    ) -> Result<(), PhysicsError> {
        let Some(spec) = deployment.spec.as_ref() else {
            return Ok(());
        };
        let desired = spec.replicas.unwrap_or(1);
        let hash = template_hash(&spec.template);
        let owned = self.owned_replica_sets(deployment);
        let name = deployment.metadata.name.as_deref().unwrap_or_default();
        let new_name = current_replica_set(&owned, name, &spec.template)
            .and_then(|r| r.metadata.name.clone())
            .unwrap_or_else(|| format!("{name}-{hash}"));
        let figure = |f: fn(&ReplicaSetStatus) -> i32| {
            owned
                .iter()
                .filter_map(|r| r.status.as_ref())
                .map(f)
                .sum::<i32>()
        };
        let replicas = figure(|s| s.replicas);
        let ready = figure(|s| s.ready_replicas.unwrap_or(0));
        let available = figure(|s| s.available_replicas.unwrap_or(0));
        let updated = owned
            .iter()
            .find(|r| r.metadata.name.as_deref() == Some(new_name.as_str()))
            .and_then(|r| r.status.as_ref())
            .map_or(0, |s| s.replicas);
        let previous = deployment
            .status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default();
        let condition = |kind: &str, holds: bool, reason: &str, message: String| {
            let status = if holds { "True" } else { "False" };
            let kept = previous
                .iter()
                .find(|c| c.type_ == kind && c.status == status);
            DeploymentCondition {
                type_: kind.to_string(),
                status: status.to_string(),
                reason: Some(reason.to_string()),
                message: Some(message.clone()),
                last_transition_time: kept
                    .and_then(|c| c.last_transition_time.clone())
                    .or_else(|| Some(self.shared.now())),
                last_update_time: kept
                    .filter(|c| c.message.as_deref() == Some(message.as_str()))
                    .and_then(|c| c.last_update_time.clone())
                    .or_else(|| Some(self.shared.now())),
            }
        };
        let available_enough = available >= desired;
        let done = updated == desired && available >= desired && replicas == desired;
        let conditions = vec![
            if available_enough {
                condition(
                    "Available",
                    true,
                    "MinimumReplicasAvailable",
                    "Deployment has minimum availability.".into(),
                )
            } else {
                condition(
                    "Available",
                    false,
                    "MinimumReplicasUnavailable",
                    "Deployment does not have minimum availability.".into(),
                )
            },
            if done {
                condition(
                    "Progressing",
                    true,
                    "NewReplicaSetAvailable",
                    format!("ReplicaSet \"{new_name}\" has successfully progressed."),
                )
            } else {
                condition(
                    "Progressing",
                    true,
                    "ReplicaSetUpdated",
                    format!("ReplicaSet \"{new_name}\" is progressing."),
                )
            },
        ];
        let status = DeploymentStatus {
            replicas: Some(replicas),
            updated_replicas: Some(updated),
            ready_replicas: Some(ready),
            available_replicas: Some(available),
            unavailable_replicas: Some((desired - available).max(0)),
            observed_generation: deployment.metadata.generation,
            conditions: Some(conditions),
            ..Default::default()
        };
        if deployment.status.as_ref() == Some(&status) {
            return Ok(());
        }
        let (namespace, name) = name_of(&deployment.metadata);
        let api: Api<Deployment> = Api::namespaced(self.shared.client.clone(), &namespace);
        let patch = json!({"status": status});
        match self
            .paced_write(api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch)))
            .await
        {
            Ok(updated) => {
                self.deployments.upsert(updated);
                Ok(())
            }
            Err(error) if api_code(&error) == Some(404) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }
}

/// Runs the DaemonSet controller until the task is aborted.
pub(crate) async fn run_daemonsets(shared: Arc<PhysicsContext>) {
    let client = shared.client.clone();
    let mut daemon_set_events = watch(
        Api::<DaemonSet>::all(client.clone()),
        watcher::Config::default(),
    );
    let mut node_events = watch(Api::<Node>::all(client.clone()), watcher::Config::default());
    // Pods are watched only while a DaemonSet exists: decoding every pod event of a large
    // cluster for nothing would cost what the scheduler and the kubelets need.
    let mut pod_events = None;
    let mut resync = tokio::time::interval(shared.real_resync());
    let mut trigger = Trigger::scaled(&shared.clock);
    let mut controller = DaemonSets {
        shared,
        daemon_sets: Cache::new(),
        nodes: Cache::new(),
        pods: Cache::new(),
    };
    loop {
        let wanted = controller.daemon_sets.iter().next().is_some();
        if wanted != pod_events.is_some() && controller.daemon_sets.is_synced() {
            pod_events =
                wanted.then(|| watch(Api::<Pod>::all(client.clone()), watcher::Config::default()));
            controller.pods = Cache::new();
        }
        let pods_synced = pod_events.is_none() || controller.pods.is_synced();
        let synced =
            controller.daemon_sets.is_synced() && controller.nodes.is_synced() && pods_synced;
        let next_pod = async {
            match pod_events.as_mut() {
                Some(events) => events.next().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            Some(event) = daemon_set_events.next() => {
                controller.daemon_sets.apply(event);
                trigger.fire();
            }
            Some(event) = node_events.next() => {
                controller.nodes.apply(event);
                trigger.fire();
            }
            Some(event) = next_pod => {
                controller.pods.apply(event);
                trigger.fire();
            }
            _ = resync.tick() => trigger.fire(),
            fired = trigger.due(), if synced => {
                controller.shared.record_pass(LAG_SERIES, fired);
                controller.pass().await;
            }
        }
    }
}

struct DaemonSets {
    shared: Arc<PhysicsContext>,
    daemon_sets: Cache<DaemonSet>,
    nodes: Cache<Node>,
    pods: Cache<Pod>,
}

/// The tolerations the real DaemonSet controller adds to its pods.
fn daemon_tolerations(host_network: bool) -> Vec<Toleration> {
    let toleration = |key: &str, effect: &str| Toleration {
        key: Some(key.to_string()),
        operator: Some("Exists".into()),
        effect: Some(effect.to_string()),
        ..Default::default()
    };
    let mut tolerations = vec![
        toleration("node.kubernetes.io/not-ready", "NoExecute"),
        toleration("node.kubernetes.io/unreachable", "NoExecute"),
        toleration("node.kubernetes.io/disk-pressure", "NoSchedule"),
        toleration("node.kubernetes.io/memory-pressure", "NoSchedule"),
        toleration("node.kubernetes.io/pid-pressure", "NoSchedule"),
        toleration("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if host_network {
        tolerations.push(toleration(
            "node.kubernetes.io/network-unavailable",
            "NoSchedule",
        ));
    }
    tolerations
}

/// The pod a DaemonSet runs on `node`.
fn daemon_pod(daemon_set: &DaemonSet, node: &str) -> Option<Pod> {
    let spec = daemon_set.spec.as_ref()?;
    let (namespace, _) = name_of(&daemon_set.metadata);
    let mut pod = pod_from_template(&spec.template, &namespace, controller_reference(daemon_set));
    let pod_spec = pod.spec.get_or_insert_with(Default::default);
    pod_spec.node_name = Some(node.to_string());
    let tolerations = pod_spec.tolerations.get_or_insert_with(Vec::new);
    for extra in daemon_tolerations(pod_spec.host_network == Some(true)) {
        if !tolerations
            .iter()
            .any(|t| t.key == extra.key && t.effect == extra.effect)
        {
            tolerations.push(extra);
        }
    }
    Some(pod)
}

/// Whether a DaemonSet should get a new pod on a node, and whether an existing one may stay.
fn placement(pod: &Pod, node: &Node) -> (bool, bool) {
    let name = node.metadata.name.as_deref().unwrap_or_default();
    if !node_affinity_matches(pod, &labels_of(&node.metadata), name) {
        return (false, false);
    }
    let tolerations: Vec<_> = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .into_iter()
        .flatten()
        .map(core_toleration)
        .collect();
    let taints = scheduling_taints(node);
    let schedule = untolerated(&taints, &tolerations).is_none();
    let no_execute: Vec<_> = taints
        .into_iter()
        .filter(|t| t.effect == TaintEffect::NoExecute)
        .collect();
    let stay = untolerated(&no_execute, &tolerations).is_none();
    (schedule, stay)
}

impl DaemonSets {
    async fn pass(&mut self) {
        let daemon_sets: Vec<DaemonSet> = self
            .daemon_sets
            .iter()
            .filter(|d| d.metadata.deletion_timestamp.is_none())
            .cloned()
            .collect();
        for daemon_set in &daemon_sets {
            if let Err(error) = self.sync(daemon_set).await {
                tracing::warn!(daemonset = %daemon_set.metadata.name.as_deref().unwrap_or_default(), %error, "daemonset sync failed");
            }
        }
    }

    async fn sync(&mut self, daemon_set: &DaemonSet) -> Result<(), PhysicsError> {
        let Some(uid) = daemon_set.metadata.uid.clone() else {
            return Ok(());
        };
        let nodes: Vec<Node> = self.nodes.iter().cloned().collect();
        let mut by_node: HashMap<String, Vec<Pod>> = HashMap::new();
        for pod in self
            .pods
            .iter()
            .filter(|p| controller_uid(&p.metadata) == Some(uid.as_str()))
        {
            by_node
                .entry(node_name_of(pod).unwrap_or_default().to_string())
                .or_default()
                .push(pod.clone());
        }
        let (mut desired, mut current, mut misscheduled, mut ready) = (0, 0, 0, 0);
        for node in &nodes {
            let name = node.metadata.name.clone().unwrap_or_default();
            let Some(template_pod) = daemon_pod(daemon_set, &name) else {
                return Ok(());
            };
            let (schedule, stay) = placement(&template_pod, node);
            let mut here = by_node.remove(&name).unwrap_or_default();
            // Finished pods are replaced.
            for finished in here.iter().filter(|p| is_terminal(p) && !is_deleting(p)) {
                delete_pod(&self.shared, &mut self.pods, finished, false).await?;
            }
            here.retain(|p| !is_terminal(p) && !is_deleting(p));
            here.sort_by_key(|p| {
                (
                    p.metadata.creation_timestamp.clone(),
                    p.metadata.name.clone(),
                )
            });
            if !stay {
                for pod in &here {
                    delete_pod(&self.shared, &mut self.pods, pod, false).await?;
                }
                here.clear();
            } else if here.len() > 1 {
                for extra in &here[1..] {
                    delete_pod(&self.shared, &mut self.pods, extra, false).await?;
                }
                here.truncate(1);
            }
            if schedule && here.is_empty() && node.metadata.deletion_timestamp.is_none() {
                create_pod(&self.shared, &mut self.pods, &template_pod).await?;
            }
            if schedule {
                desired += 1;
                if !here.is_empty() {
                    current += 1;
                }
                if here.iter().any(is_ready) {
                    ready += 1;
                }
            } else if !here.is_empty() {
                misscheduled += 1;
            }
        }
        // Pods left over are on nodes that no longer exist: nobody will finish them gracefully.
        for pod in by_node.into_values().flatten().filter(|p| !is_terminal(p)) {
            if node_name_of(&pod).is_some() {
                delete_pod(&self.shared, &mut self.pods, &pod, true).await?;
            }
        }
        let status = DaemonSetStatus {
            desired_number_scheduled: desired,
            current_number_scheduled: current,
            number_misscheduled: misscheduled,
            number_ready: ready,
            number_available: Some(ready),
            number_unavailable: Some(desired - ready),
            updated_number_scheduled: Some(current),
            observed_generation: daemon_set.metadata.generation,
            ..Default::default()
        };
        if daemon_set.status.as_ref() == Some(&status) {
            return Ok(());
        }
        let (namespace, name) = name_of(&daemon_set.metadata);
        let api: Api<DaemonSet> = Api::namespaced(self.shared.client.clone(), &namespace);
        match api
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(&json!({"status": status})),
            )
            .await
        {
            Ok(updated) => {
                self.daemon_sets.upsert(updated);
                Ok(())
            }
            Err(error) if api_code(&error) == Some(404) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_hashes_are_stable_safe_and_template_specific() {
        let template = |image: &str| -> PodTemplateSpec {
            serde_json::from_value(json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "a", "image": image}]}}))
                .unwrap()
        };
        let hash = template_hash(&template("one"));
        assert_eq!(hash, template_hash(&template("one")));
        assert_ne!(hash, template_hash(&template("two")));
        assert!(hash.bytes().all(|b| SAFE_ALPHABET.contains(&b)), "{hash}");
    }
}
