//! NodePools in the core's form: the template a NodePool turns into a NodeClaim, and the
//! template hash upstream stamps on NodeClaims (`karpenter.sh/nodepool-hash`).

use joinery_api::NodePool;
use joinery_core::nodeclaim::{NodeClaimTemplate, NodeClassRef};
use joinery_core::requirements::{Requirement, Requirements};

use crate::convert;

/// Why a NodePool may not provision: its `Ready` condition is present and not `True` (upstream
/// provisions only from Ready NodePools). A NodePool without a `Ready` condition (not yet
/// reconciled, or written by hand into a snapshot) is not refused.
pub fn not_ready(pool: &NodePool) -> Option<String> {
    use joinery_api::HasConditions;
    let ready = pool.status.as_ref()?.condition("Ready")?;
    (!ready.is_true()).then(|| {
        let name = pool.metadata.name.as_deref().unwrap_or_default();
        let why = if ready.message.is_empty() {
            ready.reason.clone()
        } else {
            format!("{}: {}", ready.reason, ready.message)
        };
        format!("NodePool {name} is not Ready ({why}); it does not provision until it is")
    })
}

/// The core's template of a NodePool; errors name the pool and field.
pub fn node_claim_template(pool: &NodePool) -> Result<NodeClaimTemplate, String> {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let spec = &pool.spec.template.spec;
    let requirements = pool_requirements(pool)?;
    let meta = pool.spec.template.metadata.clone().unwrap_or_default();
    let class = NodeClassRef {
        group: spec.node_class_ref.group.clone(),
        kind: spec.node_class_ref.kind.clone(),
        name: spec.node_class_ref.name.clone(),
    };
    let mut template =
        NodeClaimTemplate::new(name, class, &requirements, meta.labels.unwrap_or_default());
    template.weight = pool.spec.weight.unwrap_or(0);
    template.annotations = meta.annotations.unwrap_or_default();
    template.taints = convert::taints(spec.taints.as_ref());
    template.startup_taints = convert::taints(spec.startup_taints.as_ref());
    Ok(template)
}

/// A NodePool's `spec.template.spec.requirements` in the core's form; errors name the pool and
/// the requirement.
pub fn pool_requirements(pool: &NodePool) -> Result<Requirements, String> {
    let name = pool.metadata.name.as_deref().unwrap_or_default();
    let mut requirements = Requirements::new();
    for (i, r) in pool.spec.template.spec.requirements.iter().enumerate() {
        let req = Requirement::new(
            r.key.clone(),
            r.operator,
            r.values.clone().unwrap_or_default(),
        )
        .map_err(|e| format!("NodePool {name}: spec.template.spec.requirements[{i}]: {e}"))?
        .with_min_values(r.min_values.map(|m| m.max(0) as usize));
        requirements.add(req);
    }
    Ok(requirements)
}

/// A stable hash of the NodePool template (requirements excluded, as upstream), for the
/// `karpenter.sh/nodepool-hash` annotation.
pub fn nodepool_hash(pool: &NodePool) -> String {
    let mut template = serde_json::to_value(&pool.spec.template).unwrap_or_default();
    if let Some(spec) = template.get_mut("spec").and_then(|s| s.as_object_mut()) {
        spec.remove("requirements");
    }
    let text = template.to_string();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in text.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash.to_string()
}
