//! A lower bound on what a pass must spend, to judge how close a placement comes to optimal.

use crate::resources::Resources;

use super::types::SchedulingInput;

/// A lower bound on the hourly price of the new NodeClaims any placement of `input` needs.
///
/// Resource-volume bound: for each resource, the amount pending pods request beyond the free
/// room of the schedulable existing nodes is priced at the best price per unit any launchable
/// instance type offers (its cheapest available offering compatible with its NodePool,
/// divided by its allocatable amount of that resource); the bound is the largest of these.
/// Every real placement buys at least that much of the scarcest resource at no better rate,
/// so no placement is cheaper. The bound relaxes away pod constraints, DaemonSet overhead,
/// limits and the indivisibility of nodes, so it is exact only when one resource dominates
/// and the cheapest rate's instance types fill up exactly.
///
/// Returns 0 when the existing nodes have room for everything, and infinity when some
/// requested resource is offered by no instance type with a known price. Instance types
/// without a known price are left out.
pub fn cost_lower_bound(input: &SchedulingInput) -> f64 {
    let mut requested = Resources::new();
    for pod in &input.pods {
        requested += &pod.requests;
    }
    let mut free = Resources::new();
    for node in input.nodes.iter().filter(|n| n.schedulable) {
        free += &(&node.allocatable - &node.requested);
    }
    let needed = &requested - &free;

    let mut bound = 0.0f64;
    for (name, amount) in needed.iter() {
        let mut best = f64::INFINITY;
        for pool in &input.nodepools {
            let requirements = &pool.template.requirements;
            for t in &pool.instance_types {
                let units = t.allocatable().get(name);
                if units == 0 || !t.requirements().is_intersecting(requirements) {
                    continue;
                }
                if let Some(price) = t.cheapest_price(requirements, &input.label_policy) {
                    best = best.min(price / units as f64);
                }
            }
        }
        bound = bound.max(amount as f64 * best);
    }
    bound
}
