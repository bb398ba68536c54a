//! `joinery explain node NAME SNAPSHOT`: why a node of a cluster snapshot is or is not
//! disrupted — its NodePool's budgets per reason, each method's verdict on it alone, and what
//! consolidating it would save — in the words of [`joinery_core::disruption::explain`] (the
//! text of the controller's `DisruptionBlocked` and `Unconsolidatable` events). The snapshot is
//! read exactly as `joinery disrupt` reads it.

use std::process::ExitCode;

use anyhow::{Result, bail};

use crate::commands::Execute;
use crate::commands::disrupt::PassArgs;
use joinery_core::time::rfc3339;

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

impl Execute for NodeArgs {
    async fn execute(self) -> Result<ExitCode> {
        let pass = self.pass.load().await?;
        let snapshot = &pass.snapshot;
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
            });
            println!("{}", serde_json::to_string_pretty(&value)?);
        } else {
            println!("At {} ({}):", rfc3339(snapshot.now()), pass.now_from);
            for line in lines {
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
