//! What a disruption pass decides from, as one number: the pass is skipped while it equals
//! that of a pass that found nothing (see `joinery_core::disruption::quiet`).

use std::sync::Arc;
use std::time::SystemTime;

use super::Memory;
use crate::Context;

/// A digest of what a disruption pass decides from, time aside: every cached object the
/// snapshot is gathered from (by kind, namespace, name and resourceVersion, so any change to
/// one changes the digest; the kube caches skip no event), the nominated nodes and the
/// commands in flight. Order-independent (a sum of per-object hashes with fixed keys), so the
/// same cluster digests alike whatever order the caches list it in.
pub(super) fn digest(ctx: &Context, memory: &Memory, now: SystemTime) -> u64 {
    let mut digest = Digest::default();
    let state = &ctx.state;
    for pod in state.pods.state() {
        let meta = &pod.metadata;
        let key = (meta.namespace.as_deref(), meta.name.as_deref());
        digest.add(("Pod", key, &meta.resource_version));
    }
    for node in state.nodes.state() {
        let (name, version) = (node.name(), &node.metadata.resource_version);
        digest.add(("Node", name, version, ctx.inflight.is_nominated(name, now)));
    }
    digest.objects("NodeClaim", &state.node_claims.state());
    digest.objects("NodePool", &state.node_pools.state());
    digest.objects("PodDisruptionBudget", &state.pdbs.state());
    digest.objects("DaemonSet", &state.daemon_sets.state());
    digest.objects("PersistentVolume", &state.persistent_volumes.state());
    digest.objects(
        "PersistentVolumeClaim",
        &state.persistent_volume_claims.state(),
    );
    digest.objects("StorageClass", &state.storage_classes.state());
    digest.objects("CSINode", &state.csi_nodes.state());
    digest.objects("Namespace", &state.namespaces.state());
    if let Some(overlays) = &state.node_overlays {
        digest.objects("NodeOverlay", &overlays.state());
    }
    if let Some(buffers) = &state.buffers {
        digest.objects("CapacityBuffer", &buffers.capacity_buffers.state());
        digest.objects("PodTemplate", &buffers.pod_templates.state());
        digest.objects("Deployment", &buffers.deployments.state());
        digest.objects("StatefulSet", &buffers.stateful_sets.state());
        digest.objects("ReplicaSet", &buffers.replica_sets.state());
    }
    for (key, classes) in &state.node_classes {
        digest.objects(&key.kind, &classes.state());
    }
    for name in &memory.disrupting {
        digest.add(("disrupting", name));
    }
    for queued in &memory.queue {
        digest.add(("queued", &queued.command.candidates, &queued.replacements));
    }
    digest.sum
}

/// An order-independent digest: the wrapping sum of each item's hash (fixed keys).
#[derive(Default)]
struct Digest {
    hasher: std::hash::BuildHasherDefault<std::hash::DefaultHasher>,
    sum: u64,
}

impl Digest {
    fn add(&mut self, item: impl std::hash::Hash) {
        use std::hash::BuildHasher;
        self.sum = self.sum.wrapping_add(self.hasher.hash_one(item));
    }

    fn objects<K: kube::Resource>(&mut self, kind: &str, list: &[Arc<K>]) {
        for object in list {
            let meta = object.meta();
            self.add((kind, &meta.namespace, &meta.name, &meta.resource_version));
        }
    }
}
