//! Scheduling simulations of removing candidates: one copy of the scheduler's input per
//! method, with the candidates' nodes closed and their pods added as pending for each try, then
//! restored (nothing of the cluster is rebuilt per candidate).

use std::collections::{BTreeSet, HashMap};

use super::Snapshot;
use super::candidate::Candidate;
use super::reasons::Rejection;
use crate::scheduling::{self, NewNodeClaim, Placement, SchedulingInput};

/// Where the candidates' pods would go.
pub(crate) struct Simulated {
    /// The NodeClaims the pass would open (pending pods' included).
    pub new_claims: Vec<NewNodeClaim>,
}

/// Where the pending pods alone would go.
#[derive(Debug, Clone, Default)]
pub(crate) struct Baseline {
    /// Nodes that pending pods would be placed on: nominated for them, as upstream's
    /// provisioner would nominate them.
    pub receiving: BTreeSet<String>,
    /// How many new NodeClaims the pending pods need.
    pub new_claims: usize,
}

/// Runs removal simulations against one snapshot.
pub(crate) struct Simulator<'a> {
    snapshot: &'a Snapshot,
    input: SchedulingInput,
    pending: usize,
    node_index: HashMap<String, usize>,
    baseline: Option<Baseline>,
    /// How many simulations ran.
    pub count: usize,
}

impl<'a> Simulator<'a> {
    pub fn new(snapshot: &'a Snapshot) -> Self {
        let input = snapshot.scheduling.clone();
        let node_index = input
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        Simulator {
            snapshot,
            pending: input.pods.len(),
            input,
            node_index,
            baseline: None,
            count: 0,
        }
    }

    /// The pending pods scheduled alone (one simulation, run once; none without pending pods).
    pub fn baseline(&mut self) -> &Baseline {
        if self.baseline.is_none() {
            let mut baseline = Baseline::default();
            if self.pending > 0 {
                self.count += 1;
                let result =
                    scheduling::schedule_with_context(&self.input, &self.snapshot.context, None);
                baseline.new_claims = result.new_claims.len();
                for p in &result.placements {
                    if let Placement::Existing { node } = &p.placement {
                        baseline.receiving.insert(node.clone());
                    }
                }
            }
            self.baseline = Some(baseline);
        }
        self.baseline.as_ref().expect("just computed")
    }

    /// Simulates deleting `candidates`: their pods (with the pending pods) are scheduled on
    /// the other nodes and new NodeClaims. Fails, naming the pod or node, when a candidate's
    /// pod cannot be placed or would land on a node that is not initialized.
    pub fn remove(&mut self, candidates: &[&Candidate]) -> Result<Simulated, Rejection> {
        self.count += 1;
        let mut closed = Vec::new();
        for c in candidates {
            if let Some(&i) = self.node_index.get(&c.node)
                && self.input.nodes[i].schedulable
            {
                self.input.nodes[i].schedulable = false;
                closed.push(i);
            }
            self.input.pods.extend(c.pods.iter().cloned());
        }
        let result = scheduling::schedule_with_context(&self.input, &self.snapshot.context, None);
        self.input.pods.truncate(self.pending);
        for i in closed {
            self.input.nodes[i].schedulable = true;
        }
        let uninitialized: BTreeSet<&str> = self
            .input
            .nodes
            .iter()
            .filter(|n| n.in_flight)
            .map(|n| n.name.as_str())
            .collect();
        for placement in &result.placements[self.pending..] {
            match &placement.placement {
                Placement::Unschedulable { reason } => {
                    return Err(Rejection::Unschedulable {
                        pod: placement.key.clone(),
                        reason: reason.clone(),
                    });
                }
                Placement::Existing { node } if uninitialized.contains(node.as_str()) => {
                    return Err(Rejection::UninitializedNode {
                        pod: placement.key.clone(),
                        node: node.clone(),
                    });
                }
                _ => {}
            }
        }
        Ok(Simulated {
            new_claims: result.new_claims,
        })
    }
}
