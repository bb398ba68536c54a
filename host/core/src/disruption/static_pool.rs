//! Static NodePools (`spec.replicas`, gate `StaticCapacity`): how many NodeClaims to add or
//! which to remove to keep a pool at its count, ignoring pods, as upstream's static
//! provisioning and deprovisioning controllers do. Their drifted nodes are replaced by the
//! disruption loop's static-drift method, within the `Drifted` budget.

use std::collections::BTreeMap;

use crate::nodeclaim::{NodeClaimSpec, NodeClaimTemplate};
use crate::resources::Resources;
use crate::scheduling::NewNodeClaim;

/// One NodeClaim of a static pool.
#[derive(Debug, Clone, PartialEq)]
pub struct StaticClaim {
    /// Its name.
    pub name: String,
    /// Its instance is launched.
    pub launched: bool,
    /// Its node runs no workload pod.
    pub empty: bool,
    /// What moving its pods costs (see [`reschedule_cost`](super::reschedule_cost)).
    pub disruption_cost: f64,
}

/// What a static pool needs now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StaticAction {
    /// Create this many NodeClaims.
    Create(u64),
    /// Delete these NodeClaims.
    Delete(Vec<String>),
    /// Nothing.
    Keep,
}

/// Keeps a static pool at `replicas` NodeClaims, never above its `limits.nodes`. `claims` are
/// its NodeClaims that count: those not being deleted (the caller leaves a pool alone while a
/// disruption command replaces one of its claims). Scale-down removes claims
/// not launched yet first, then empty nodes, then the cheapest to disrupt (ties by name).
pub fn static_action(
    replicas: u64,
    limit_nodes: Option<u64>,
    claims: &[StaticClaim],
) -> StaticAction {
    let desired = limit_nodes.map_or(replicas, |l| replicas.min(l));
    let have = claims.len() as u64;
    if have < desired {
        return StaticAction::Create(desired - have);
    }
    if have == desired {
        return StaticAction::Keep;
    }
    let mut order: Vec<&StaticClaim> = claims.iter().collect();
    order.sort_by(|a, b| {
        a.launched
            .cmp(&b.launched)
            .then(b.empty.cmp(&a.empty))
            .then(a.disruption_cost.total_cmp(&b.disruption_cost))
            .then(a.name.cmp(&b.name))
    });
    StaticAction::Delete(
        order
            .into_iter()
            .take((have - desired) as usize)
            .map(|c| c.name.clone())
            .collect(),
    )
}

/// The NodeClaim a static pool launches: its template as is, with no instance types injected
/// (the cloud plugin chooses among those its requirements allow).
pub fn static_claim(template: &NodeClaimTemplate) -> NewNodeClaim {
    NewNodeClaim {
        spec: NodeClaimSpec {
            nodepool: template.nodepool.clone(),
            node_class_ref: template.node_class_ref.clone(),
            requirements: template.requirements.clone(),
            requests: Resources::new(),
            taints: template.taints.clone(),
            startup_taints: template.startup_taints.clone(),
            labels: template.labels.clone(),
            annotations: template.annotations.clone(),
            instance_types: Vec::new().into(),
        },
        pods: Vec::new(),
        daemon_overhead: Resources::new(),
        launch_price: None,
    }
}

/// Static pools' templates by name, for the static-drift method.
pub type StaticTemplates = BTreeMap<String, NodeClaimTemplate>;

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(name: &str, launched: bool, empty: bool, cost: f64) -> StaticClaim {
        StaticClaim {
            name: name.into(),
            launched,
            empty,
            disruption_cost: cost,
        }
    }

    #[test]
    fn a_static_pool_grows_to_its_replicas_within_its_node_limit() {
        assert_eq!(
            static_action(3, None, &[claim("a", true, false, 2.0)]),
            StaticAction::Create(2)
        );
        assert_eq!(
            static_action(3, Some(2), &[claim("a", true, false, 2.0)]),
            StaticAction::Create(1)
        );
        assert_eq!(
            static_action(1, None, &[claim("a", true, false, 2.0)]),
            StaticAction::Keep
        );
    }

    #[test]
    fn scale_down_takes_unlaunched_then_empty_then_cheapest_to_disrupt() {
        let claims = [
            claim("busy", true, false, 5.0),
            claim("light", true, false, 2.0),
            claim("empty", true, true, 1.0),
            claim("launching", false, true, 1.0),
        ];
        assert_eq!(
            static_action(3, None, &claims),
            StaticAction::Delete(vec!["launching".into()])
        );
        assert_eq!(
            static_action(1, None, &claims),
            StaticAction::Delete(vec!["launching".into(), "empty".into(), "light".into()])
        );
        assert_eq!(
            static_action(0, None, &claims),
            StaticAction::Delete(vec![
                "launching".into(),
                "empty".into(),
                "light".into(),
                "busy".into()
            ])
        );
    }
}
