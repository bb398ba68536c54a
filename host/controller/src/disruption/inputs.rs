//! What the disruption loop reads, as numbers: for a pass, skipped while its digest equals
//! that of a pass that found nothing (see `joinery_core::disruption::quiet`); for a claim's
//! signals, not revisited while theirs stays the same (see `signals::maintain_signals`).

use std::sync::Arc;
use std::time::SystemTime;

use joinery_api::NodeClaim;

use super::Memory;
use crate::Context;

/// A digest of what a disruption pass decides from, time aside: every cached object the
/// snapshot is gathered from (by kind, namespace, name and resourceVersion, so any change to
/// one changes the digest; the kube caches skip no event), the nominated nodes and the
/// commands in flight. Order-independent (a sum of per-object hashes with fixed keys), so the
/// same cluster digests alike whatever order the caches list it in.
///
/// The cached objects' part is kept with the caches' change count
/// ([`crate::mirror::Changes::generation`]) and reused while no cache changed; the
/// nominations (which expire with time), the disrupting claims and the queue are added on
/// every call.
pub(super) fn digest(ctx: &Context, memory: &mut Memory, now: SystemTime) -> u64 {
    let generation = ctx.state.changed.generation();
    let objects = match memory.objects_digest {
        Some((seen, digest)) if seen == generation => digest,
        _ => {
            let digest = objects_digest(ctx);
            memory.objects_digest = Some((generation, digest));
            digest
        }
    };
    let mut digest = Digest {
        sum: objects,
        ..Digest::default()
    };
    for node in ctx.state.nodes.state() {
        digest.add((
            "nominated",
            node.name(),
            ctx.inflight.is_nominated(node.name(), now),
        ));
    }
    for name in &memory.disrupting {
        digest.add(("disrupting", name));
    }
    for queued in &memory.queue {
        digest.add(("queued", &queued.command.candidates, &queued.replacements));
    }
    digest.sum
}

/// The digest of every cached object a pass reads, by kind, namespace, name and
/// resourceVersion (see [`digest`]).
fn objects_digest(ctx: &Context) -> u64 {
    let mut digest = Digest::default();
    let state = &ctx.state;
    for pod in state.pods.state() {
        let meta = &pod.metadata;
        let key = (meta.namespace.as_deref(), meta.name.as_deref());
        digest.add(("Pod", key, &meta.resource_version));
    }
    for node in state.nodes.state() {
        let (name, version) = (node.name(), &node.metadata.resource_version);
        digest.add(("Node", name, version));
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
    digest.sum
}

/// A digest of what a claim's signals are read from, time aside: the claim, its NodePool,
/// its NodeClass and its Node (by resourceVersion), the pods on the Node (by the pod cache's
/// count of their changes, [`crate::lean_cache::LeanCache::bound_version`]), and whether
/// this process is disrupting it.
pub(super) fn claim_digest(
    ctx: &Context,
    memory: &Memory,
    claim: &NodeClaim,
    pool: &joinery_api::NodePool,
) -> u64 {
    let mut digest = Digest::default();
    let meta = &claim.metadata;
    digest.add(("NodeClaim", &meta.resource_version));
    digest.add(("NodePool", &pool.metadata.resource_version));
    let class_ref = &claim.spec.node_class_ref;
    let key = crate::lifecycle::class_key(claim);
    let class = ctx.state.node_class(&key, &class_ref.name);
    digest.add((
        "NodeClass",
        class.as_ref().map(|c| &c.metadata.resource_version),
    ));
    let node_name = claim.status.as_ref().and_then(|s| s.node_name.as_deref());
    if let Some(node) = node_name.and_then(|name| ctx.state.node(name)) {
        digest.add(("Node", node.name(), &node.metadata.resource_version));
        digest.add(("Pods", ctx.state.pods.bound_version(node.name())));
    }
    let ours = meta
        .name
        .as_ref()
        .is_some_and(|name| memory.disrupting.contains(name));
    digest.add(("disrupting", ours));
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
