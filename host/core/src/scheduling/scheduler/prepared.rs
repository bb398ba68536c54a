//! What a pass knows before looking at any pod, prepared once for many passes over one
//! cluster ([`Prepared`]): the NodePools' tables ([`PreparedPools`]) and the existing nodes'
//! facts ([`PreparedNodes`]). A consolidation pass simulates removing each candidate in turn:
//! only the pods and which nodes are open differ between its simulations.

use crate::labels::HOSTNAME_LABEL;
use crate::requirements::{Requirement, Requirements};
use crate::resources::Resources;

use super::super::daemons::Daemon;
use super::super::types::{SchedulingContext, SchedulingInput};
use super::pool::PreparedPools;

/// A scheduling input's NodePools and nodes prepared for many passes that differ only in
/// their pods, bound pods and which nodes are schedulable (see
/// [`schedule_prepared`](crate::scheduling::schedule_prepared)).
pub struct Prepared {
    pub(super) pools: PreparedPools,
    pub(super) nodes: PreparedNodes,
}

impl Prepared {
    /// Prepares `input`'s NodePools (under its DaemonSets, its label policy and `context`'s
    /// minValues policy) and nodes.
    pub fn new(input: &SchedulingInput, context: &SchedulingContext) -> Prepared {
        let daemons: Vec<Daemon<'_>> = input.daemons.iter().map(Daemon::new).collect();
        Prepared {
            pools: PreparedPools::new(input, context, &daemons),
            nodes: PreparedNodes::new(input, &daemons),
        }
    }
}

/// An existing node's facts that no pod of a pass changes.
pub(super) struct NodeFacts {
    /// Its index in the input's nodes.
    pub(super) index: usize,
    /// Its name, to check that a later input has the same nodes.
    name: String,
    /// Its labels with its hostname, when the labels lack it (`None`: the labels as they are).
    pub(super) with_hostname: Option<Requirements>,
    /// Allocatable minus what bound pods request.
    pub(super) available: Resources,
    /// DaemonSet pods that should run there and do not yet.
    pub(super) reserved: Resources,
}

/// The input's nodes, schedulable or not, in the order a pass tries them (initialized first,
/// then by name).
pub(super) struct PreparedNodes {
    pub(super) nodes: Vec<NodeFacts>,
}

impl PreparedNodes {
    pub(super) fn new(input: &SchedulingInput, daemons: &[Daemon<'_>]) -> PreparedNodes {
        let mut order: Vec<usize> = (0..input.nodes.len()).collect();
        order.sort_by(|&a, &b| {
            let (a, b) = (&input.nodes[a], &input.nodes[b]);
            a.in_flight.cmp(&b.in_flight).then(a.name.cmp(&b.name))
        });
        let nodes = order
            .into_iter()
            .map(|index| {
                let node = &input.nodes[index];
                let daemon_total: Resources = daemons
                    .iter()
                    .filter(|d| d.runs_on_existing(&node.taints, &node.requirements))
                    .map(Daemon::requests)
                    .sum();
                let with_hostname = (!node.requirements.has(HOSTNAME_LABEL)).then(|| {
                    let mut requirements = node.requirements.clone();
                    requirements.add(Requirement::in_values(HOSTNAME_LABEL, [node.name.as_str()]));
                    requirements
                });
                NodeFacts {
                    index,
                    name: node.name.clone(),
                    with_hostname,
                    available: &node.allocatable - &node.requested,
                    reserved: &daemon_total - &node.daemon_requested,
                }
            })
            .collect();
        PreparedNodes { nodes }
    }

    /// Whether these are `input`'s nodes (same count, same names at the same indices).
    pub(super) fn fits(&self, input: &SchedulingInput) -> bool {
        self.nodes.len() == input.nodes.len()
            && self
                .nodes
                .iter()
                .all(|f| input.nodes[f.index].name == f.name)
    }
}
