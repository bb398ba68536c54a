//! The one assembly of the scheduler's input from cluster objects.
//!
//! The provisioner (from its caches), `joinery schedule` (from a snapshot file) and
//! disruption (to simulate a node's removal) all call [`assemble`]: pending pods with the
//! topology their volumes require, Nodes and in-flight NodeClaims as existing capacity with
//! their bound pods and CSI attach limits, DaemonSet overhead, namespace labels, and the
//! NodePools offered to the pass as templates with limits and their instance types after the
//! NodeOverlays. What cannot be converted is reported as a [`Problem`] naming the object; the
//! caller decides whether that is an error (a snapshot) or a warning (the controller).

use std::collections::BTreeMap;

use joinery_api::{NodeClaim, NodePool};
use joinery_core::instance_type::InstanceType;
use joinery_core::labels::LabelPolicy;
use joinery_core::overlay::{self, Overlay};
use joinery_core::resources::Resources;
use joinery_core::scheduling::{
    self, NodePoolLimits, PendingPod, PodKey, SchedulingContext, SchedulingInput,
};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};

use crate::convert;
use crate::lean::{LeanNode, LeanPod};
use crate::template::node_claim_template;
use crate::volumes::{VolumeError, VolumeIndex, apply_attach_limits};

/// The cluster objects a pass reads, lent by the caller (its caches, or a snapshot).
#[derive(Debug, Clone, Default)]
pub struct ClusterObjects<'a> {
    /// Nodes.
    pub nodes: Vec<&'a LeanNode>,
    /// NodeClaims (launched ones count as capacity in flight; all count against limits).
    pub node_claims: Vec<&'a NodeClaim>,
    /// Every pod (bound pods fill existing nodes and serve affinity and spread).
    pub pods: Vec<&'a LeanPod>,
    /// DaemonSets (their pods' requests are every new node's overhead).
    pub daemon_sets: Vec<&'a DaemonSet>,
    /// PersistentVolumes.
    pub persistent_volumes: Vec<&'a PersistentVolume>,
    /// PersistentVolumeClaims.
    pub persistent_volume_claims: Vec<&'a PersistentVolumeClaim>,
    /// StorageClasses.
    pub storage_classes: Vec<&'a StorageClass>,
    /// CSINodes (attach limits of existing nodes).
    pub csi_nodes: Vec<&'a CSINode>,
    /// Namespaces (their labels serve pod-affinity namespace selectors).
    pub namespaces: Vec<&'a Namespace>,
}

/// A NodePool the pass may launch from, with the instance types its NodeClass offers
/// (before NodeOverlays).
#[derive(Debug, Clone)]
pub struct PoolOffer<'a> {
    /// The NodePool.
    pub pool: &'a NodePool,
    /// Its instance types.
    pub instance_types: &'a [InstanceType],
}

/// Where the objects come from, for the wording of a missing volume object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A live cluster: the pod waits until the object exists.
    Cluster,
    /// A snapshot file: the object is not in it.
    Snapshot,
}

/// One pending pod of the pass, in the order given.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchPod {
    /// Namespace and name.
    pub key: PodKey,
    /// Whether the scheduler sees it.
    pub status: BatchStatus,
}

/// Whether a pending pod was handed to the scheduler.
#[derive(Debug, Clone, PartialEq)]
pub enum BatchStatus {
    /// It is [`SchedulingInput::pods`] at this index (so also the scheduler's placement index).
    Scheduled(usize),
    /// It could not be converted (e.g. a `matchFields` node selector term, a missing
    /// PersistentVolumeClaim); the reason says why.
    Refused(String),
}

/// The kind of object a [`Problem`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemObject {
    /// `ClusterObjects::daemon_sets[i]`: left out of the overhead.
    DaemonSet(usize),
    /// The NodePool of `pools[i]`: left out (a bad template), or without limits (a limit that
    /// is not a quantity).
    NodePool(usize),
}

/// Something the assembly could not convert, and what it did instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The object.
    pub object: ProblemObject,
    /// What is wrong (names the object and field).
    pub message: String,
}

/// The scheduler's input and what became of every object.
#[derive(Debug, Clone, Default)]
pub struct Assembly {
    /// What the scheduler gets.
    pub input: SchedulingInput,
    /// Bound pods and namespace labels; the preference and minValues policies are left at
    /// their defaults for the caller to set.
    pub context: SchedulingContext,
    /// The pending pods, in the order given.
    pub pods: Vec<BatchPod>,
    /// Objects that could not be (fully) converted.
    pub problems: Vec<Problem>,
    /// Things a reader should know (a snapshot's left-out pods and NodePools, kinds it does
    /// not use); the controller leaves it empty.
    pub notes: Vec<String>,
}

/// A pending pod in the core's form, with the topology its volumes require and the volumes
/// it attaches. A pod whose PersistentVolumeClaim, bound PersistentVolume or StorageClass is
/// missing is refused, as upstream does.
pub fn batch_pod(
    pod: &LeanPod,
    volumes: &VolumeIndex<'_>,
    source: Source,
) -> Result<PendingPod, String> {
    let mut pending = convert::pending_pod(pod)?;
    pending.volume_requirements = volumes.requirements(pod).map_err(|e| match (e, source) {
        (VolumeError::Invalid(message), _) => message,
        (missing, Source::Cluster) => {
            format!("{missing}; the pod is not provisioned for until it exists")
        }
        (missing, Source::Snapshot) => missing.missing_from("the snapshot"),
    })?;
    pending.volumes = volumes.attachments(pod);
    Ok(pending)
}

/// Builds the scheduler's input: `pending` pods are the batch (in order); `objects` give the
/// existing capacity, overhead and context; each of `pools` becomes a template with its
/// limits and its instance types after `overlays`.
pub fn assemble(
    objects: &ClusterObjects<'_>,
    pending: &[&LeanPod],
    pools: &[PoolOffer<'_>],
    overlays: &[Overlay],
    label_policy: LabelPolicy,
    source: Source,
) -> Assembly {
    let mut out = Assembly::default();
    let volumes = VolumeIndex::new(
        &objects.persistent_volumes,
        &objects.persistent_volume_claims,
        &objects.storage_classes,
    );
    for pod in pending {
        let key = pod.key();
        let status = match batch_pod(pod, &volumes, source) {
            Ok(p) => {
                out.input.pods.push(p);
                BatchStatus::Scheduled(out.input.pods.len() - 1)
            }
            Err(reason) => BatchStatus::Refused(reason),
        };
        out.pods.push(BatchPod { key, status });
    }

    out.input.nodes = convert::existing_nodes(&objects.nodes, &objects.node_claims, &objects.pods);
    apply_attach_limits(&mut out.input.nodes, &objects.csi_nodes);
    out.context.bound_pods = volumes.bound_pods(&objects.pods);
    out.context.namespace_labels = convert::namespace_labels(&objects.namespaces);

    let representatives = convert::representative_daemon_pods(&objects.pods);
    for (i, ds) in objects.daemon_sets.iter().enumerate() {
        let representative = ds
            .metadata
            .uid
            .as_deref()
            .filter(|u| !u.is_empty())
            .and_then(|uid| representatives.get(uid).copied());
        match convert::daemon_pod(ds, representative) {
            Ok(d) => out.input.daemons.push(d),
            Err(message) => out.problems.push(Problem {
                object: ProblemObject::DaemonSet(i),
                message,
            }),
        }
    }

    for (i, offer) in pools.iter().enumerate() {
        let template = match node_claim_template(offer.pool) {
            Ok(t) => t,
            Err(message) => {
                out.problems.push(Problem {
                    object: ProblemObject::NodePool(i),
                    message,
                });
                continue;
            }
        };
        let limits = match convert::nodepool_limits(offer.pool, &objects.node_claims) {
            Ok(limits) => limits,
            Err(message) => {
                // Left without limits rather than without the pool.
                out.problems.push(Problem {
                    object: ProblemObject::NodePool(i),
                    message,
                });
                Some(NodePoolLimits::new(BTreeMap::new(), Resources::new()))
            }
        };
        let instance_types =
            overlay::apply_overlays(offer.instance_types, &template.requirements, overlays);
        out.input.nodepools.push(scheduling::NodePool {
            template,
            instance_types,
            limits,
        });
    }
    out.input.label_policy = label_policy;
    out
}

#[cfg(test)]
mod tests {
    use joinery_core::labels::ZONE_LABEL;
    use serde_json::json;

    use super::*;

    fn of<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    fn pod_with_claim(claim: &str) -> LeanPod {
        of(json!({"metadata": {"name": "db-0", "namespace": "db"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
                     "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}}))
    }

    #[test]
    fn batch_pods_carry_their_volume_topology() {
        let pvs: Vec<PersistentVolume> = vec![of(json!({"metadata": {"name": "pv-1"}, "spec": {
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": ZONE_LABEL, "operator": "In", "values": ["zone-c"]}]}]}}}}))];
        let pvcs: Vec<PersistentVolumeClaim> = vec![of(
            json!({"metadata": {"name": "data", "namespace": "db"}, "spec": {"volumeName": "pv-1"}}),
        )];
        let classes: Vec<StorageClass> = Vec::new();
        let index = VolumeIndex::new(&pvs, &pvcs, &classes);
        let pending = batch_pod(&pod_with_claim("data"), &index, Source::Cluster).unwrap();
        assert_eq!(pending.volume_requirements.len(), 1);
        let zone = pending.volume_requirements[0].get(ZONE_LABEL).unwrap();
        assert!(zone.has("zone-c") && !zone.has("zone-a"), "{zone:?}");
        assert_eq!(
            pending.requests.cpu_millis, 1000,
            "the rest of the conversion is unchanged"
        );
    }

    #[test]
    fn a_pod_whose_claim_is_missing_is_refused_in_the_words_of_its_source() {
        let none: (
            Vec<PersistentVolume>,
            Vec<PersistentVolumeClaim>,
            Vec<StorageClass>,
        ) = Default::default();
        let index = VolumeIndex::new(&none.0, &none.1, &none.2);
        let pod = pod_with_claim("data");
        assert_eq!(
            batch_pod(&pod, &index, Source::Cluster).unwrap_err(),
            "PersistentVolumeClaim db/data (volume data) does not exist; the pod is not provisioned for until it exists"
        );
        assert_eq!(
            batch_pod(&pod, &index, Source::Snapshot).unwrap_err(),
            "PersistentVolumeClaim db/data (volume data) is not in the snapshot"
        );
    }

    #[test]
    fn a_daemonsets_newest_pod_gives_its_requests_and_the_template_its_affinity() {
        let template_affinity = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}});
        let daemon: DaemonSet = of(
            json!({"metadata": {"name": "agent", "namespace": "kube-system", "uid": "ds-uid"}, "spec": {"selector": {},
            "template": {"spec": {"affinity": template_affinity,
                "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]}}}}),
        );
        // What the DaemonSet controller makes: a pod pinned to its node by matchFields, with the
        // requests admission gave it.
        let pod = |name: &str, created: &str, cpu: &str, owner_uid: &str| -> LeanPod {
            of(
                json!({"metadata": {"name": name, "namespace": "kube-system", "creationTimestamp": created,
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": owner_uid, "controller": true}]},
                "spec": {"nodeName": "n1", "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}},
                    "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}],
                    "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}}),
            )
        };
        let older = pod("agent-old", "2026-01-01T00:00:00Z", "300m", "ds-uid");
        let newer = pod("agent-new", "2026-01-02T00:00:00Z", "500m", "ds-uid");
        let stranger = pod("other", "2026-01-03T00:00:00Z", "900m", "another-uid");
        let objects = ClusterObjects {
            daemon_sets: vec![&daemon],
            pods: vec![&older, &stranger, &newer],
            ..ClusterObjects::default()
        };
        let assembly = assemble(
            &objects,
            &[],
            &[],
            &[],
            LabelPolicy::default(),
            Source::Snapshot,
        );
        assert!(
            assembly.problems.is_empty(),
            "the pod's matchFields affinity is not used: {:?}",
            assembly.problems
        );
        let d = &assembly.input.daemons[0];
        assert_eq!(
            d.requests.cpu_millis, 500,
            "the newest pod the DaemonSet controls"
        );
        assert_eq!(
            d.tolerations.len(),
            1,
            "with the tolerations its controller added"
        );
        assert_eq!(d.required_affinity.len(), 1);
        assert!(
            d.required_affinity[0]
                .get("kubernetes.io/os")
                .is_some_and(|r| r.has("linux")),
            "the template's affinity"
        );

        let alone = ClusterObjects {
            daemon_sets: vec![&daemon],
            pods: vec![&stranger],
            ..ClusterObjects::default()
        };
        let assembly = assemble(
            &alone,
            &[],
            &[],
            &[],
            LabelPolicy::default(),
            Source::Snapshot,
        );
        assert_eq!(
            assembly.input.daemons[0].requests.cpu_millis, 100,
            "no pod of its own: the template"
        );
    }

    #[test]
    fn problems_name_the_object_and_a_bad_limit_keeps_the_pool() {
        let pool: NodePool = of(
            json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "general"},
            "spec": {"limits": {"cpu": "lots"}, "template": {"spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"},
                "requirements": []}}}}),
        );
        let daemon: DaemonSet = of(
            json!({"metadata": {"name": "agent", "namespace": "kube-system"}, "spec": {"selector": {},
            "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "many"}}}]}}}}),
        );
        let objects = ClusterObjects {
            daemon_sets: vec![&daemon],
            ..ClusterObjects::default()
        };
        let offers = [PoolOffer {
            pool: &pool,
            instance_types: &[],
        }];
        let pod = pod_with_claim("data");
        let assembly = assemble(
            &objects,
            &[&pod],
            &offers,
            &[],
            LabelPolicy::default(),
            Source::Snapshot,
        );
        assert_eq!(
            assembly
                .problems
                .iter()
                .map(|p| p.object)
                .collect::<Vec<_>>(),
            [ProblemObject::DaemonSet(0), ProblemObject::NodePool(0)]
        );
        assert_eq!(
            assembly.input.nodepools.len(),
            1,
            "a limit that does not parse leaves the pool without limits"
        );
        assert!(assembly.input.daemons.is_empty());
        assert!(
            matches!(assembly.pods[0].status, BatchStatus::Refused(_)),
            "its claim is not in the snapshot"
        );
    }
}
