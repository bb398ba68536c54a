//! `joinery explain node NAME SNAPSHOT`: why a node of a cluster snapshot is or is not
//! disrupted — its NodePool's budgets per reason, each method's verdict on it alone, and what
//! consolidating it would save — in the words of [`joinery_core::disruption::explain`] (the
//! text of the controller's `DisruptionBlocked` and `Unconsolidatable` events). The snapshot is
//! read exactly as `joinery disrupt` reads it. Then whether and when node repair replaces it,
//! and why not, as [`joinery_core::repair::decide_node`] decides for the controller.

use std::process::ExitCode;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, bail};
use joinery_adapter::repair::{
    claims_by_provider_id, node_vetoed, pools_settings, repair_claim, repair_node,
};
use joinery_api::NodePool;
use joinery_core::contract::RepairPolicy;
use joinery_core::repair::{Input, RepairNode, decide_node, human};

use crate::commands::Execute;
use crate::commands::disrupt::PassArgs;
use joinery_core::time::rfc3339;

use crate::snapshot_input::read_snapshot;

/// `joinery explain node …`
#[derive(Debug, clap::Args)]
pub struct NodeArgs {
    /// The Node (or its NodeClaim).
    pub node: String,
    /// The snapshot and the moment of the pass.
    #[command(flatten)]
    pub pass: PassArgs,
    /// Print JSON: `at`, `node`, `nodeClaim`, `nodePool`, `instanceType`, `capacityType`,
    /// `zone`, `pricePerHour`, `pods`, `disruptionCost` and `explanation` (the lines).
    #[arg(long)]
    pub json: bool,
}

impl NodeArgs {
    /// What node repair would do about the node at `now`: the lines printed under "Node
    /// repair".
    async fn repair(&self, now: std::time::SystemTime) -> Result<Vec<String>> {
        let objects = read_snapshot(&self.pass.snapshot)?;
        let (policies, from) = self.pass.instance_types.repair_policies().await?;
        let policies: Arc<[RepairPolicy]> = policies.into();
        let pools: Vec<&NodePool> = objects.node_pools.iter().map(|l| &l.object).collect();
        let (settings, mut problems) = pools_settings(pools.iter().copied());
        let by_provider_id = claims_by_provider_id(objects.node_claims.iter().map(|l| &l.object));
        let nodes: Vec<RepairNode> = objects
            .nodes
            .iter()
            .map(|l| {
                if let (_, Some(problem)) = node_vetoed(&l.object) {
                    problems.push(problem);
                }
                let claim = l
                    .object
                    .provider_id()
                    .and_then(|pid| by_provider_id.get(pid))
                    .map(|c| repair_claim(c, true));
                repair_node(&l.object, claim, policies.clone())
            })
            .collect();
        let input = Input {
            nodes: &nodes,
            pools: &settings,
            now,
        };
        let gate = self.pass.feature_gates.is_some_and(|g| g.node_repair);
        let mut lines = vec![format!(
            "Node repair (policies from {from}: {}):",
            policies
                .iter()
                .map(|p| format!(
                    "{}={} {}",
                    p.condition_type,
                    p.condition_status,
                    human(Duration::from_secs(p.toleration_seconds))
                ))
                .collect::<Vec<_>>()
                .join(", ")
        )];
        if !gate {
            lines.push(
                "  the NodeRepair gate is off (--feature-gates NodeRepair=true): nothing is repaired; were it on:"
                    .into(),
            );
        }
        match decide_node(&input, &self.node) {
            Some(decision) => lines.push(format!("  {}", decision.verdict)),
            None => lines
                .push("  not a managed node with a NodeClaim: repair does not act on it".into()),
        }
        lines.extend(problems.iter().map(|p| format!("  note: {p}")));
        Ok(lines)
    }
}

impl Execute for NodeArgs {
    async fn execute(self) -> Result<ExitCode> {
        let pass = self.pass.load().await?;
        let snapshot = &pass.snapshot;
        let repair = self.repair(snapshot.now()).await?;
        let Some(lines) = joinery_core::disruption::explain(snapshot, &self.node) else {
            let known: Vec<&str> = snapshot
                .candidates
                .iter()
                .map(|c| c.node.as_str())
                .take(10)
                .collect();
            let known = if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            };
            bail!(
                "no node or NodeClaim named {:?} is managed in the snapshot (managed nodes: {known})",
                self.node
            );
        };
        if self.json {
            let c = snapshot
                .candidate(&self.node)
                .expect("explained, so a candidate");
            let value = serde_json::json!({
                "at": rfc3339(snapshot.now()),
                "node": c.node,
                "nodeClaim": c.claim,
                "nodePool": c.pool,
                "instanceType": c.instance_type,
                "capacityType": c.capacity_type,
                "zone": c.zone,
                "pricePerHour": c.price,
                "pods": c.pods.len(),
                "disruptionCost": c.disruption_cost,
                "explanation": lines,
                "repair": repair,
            });
            println!("{}", serde_json::to_string_pretty(&value)?);
        } else {
            println!("At {} ({}):", rfc3339(snapshot.now()), pass.now_from);
            for line in lines {
                println!("{line}");
            }
            for line in &repair {
                println!("{line}");
            }
        }
        for note in &pass.notes {
            eprintln!("note: {note}");
        }
        Ok(ExitCode::SUCCESS)
    }

    /// The explanation is the output: only warnings are logged.
    fn default_log_level(&self) -> String {
        "warn".to_string()
    }
}
