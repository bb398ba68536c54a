//! `joinery explain buffers SNAPSHOT`: each CapacityBuffer of a cluster snapshot — whether it
//! is ready and how many chunks it keeps, the capacity it holds and on which nodes, and what
//! that costs per hour ([`joinery_core::buffers::holdings`], the placement the controller's
//! provisioning pass makes: real pending pods first, then the buffers' virtual pods). The
//! snapshot is read as `joinery disrupt` reads it; node prices come from its instance types.

use std::collections::BTreeMap;
use std::process::ExitCode;

use anyhow::Result;
use joinery_adapter::buffers::Resolution;
use joinery_core::buffers::holdings;

use crate::commands::Execute;
use crate::commands::disrupt::PassArgs;
use joinery_core::time::rfc3339;

/// `joinery explain buffers …`
#[derive(Debug, clap::Args)]
pub struct BuffersArgs {
    /// The snapshot and the moment of the pass (the buffers take part whatever
    /// `--feature-gates` says).
    #[command(flatten)]
    pub pass: PassArgs,
    /// Print JSON: `at`, `costPerHour` (all buffers) and `buffers[]` with `namespace`,
    /// `name`, `ready`, `reason`, `message`, `chunks`, `held`, `costPerHour` and `nodes[]`
    /// (`node`, `chunks`, `share`, `pricePerHour`, `costPerHour`, `buffersOnly`).
    #[arg(long)]
    pub json: bool,
}

impl Execute for BuffersArgs {
    async fn execute(self) -> Result<ExitCode> {
        let pass = self.pass.load_with(true).await?;
        let snapshot = &pass.snapshot;
        let prices: BTreeMap<&str, Option<f64>> = snapshot
            .candidates
            .iter()
            .flat_map(|c| [(c.node.as_str(), c.price), (c.claim.as_str(), c.price)])
            .collect();
        let price = |node: &str| prices.get(node).copied().flatten();
        let held = holdings(&snapshot.scheduling, &snapshot.context, &price);
        let mut rows = Vec::new();
        let mut lines = Vec::new();
        let mut total = 0.0;
        for buffer in &pass.buffers {
            let holding = held.get(&buffer.key).cloned().unwrap_or_default();
            let (namespace, name) = buffer.key.split_once('/').unwrap_or(("", &buffer.key));
            let (ready, reason, message, chunks) = match &buffer.resolution {
                Resolution::Ready(r) => (true, "Resolved", String::new(), r.chunks.max(0)),
                Resolution::NotReady { reason, message } => (false, *reason, message.clone(), 0),
            };
            let cost = holding.cost_per_hour();
            total += cost;
            if ready {
                lines.push(format!(
                    "CapacityBuffer {}: {chunks} chunk(s) of {}; existing capacity holds {} ({}), {:.4}/h",
                    buffer.key,
                    match &buffer.resolution {
                        Resolution::Ready(r) => r.shape.requests.to_string(),
                        Resolution::NotReady { .. } => String::new(),
                    },
                    holding.held,
                    if chunks as usize > holding.held {
                        format!(
                            "{} would need new nodes",
                            chunks as usize - holding.held
                        )
                    } else {
                        "all of them".to_string()
                    },
                    cost
                ));
                for (node, h) in &holding.nodes {
                    lines.push(format!(
                        "  node {node}: {} chunk(s), {:.0} % of it, {}{}",
                        h.chunks,
                        h.share * 100.0,
                        match h.price_per_hour {
                            Some(p) => format!("{:.4}/h of {p:.4}/h", h.cost_per_hour),
                            None => "price unknown".to_string(),
                        },
                        if h.buffers_only {
                            " (no workload runs there: the buffer keeps it, emptiness leaves it)"
                        } else {
                            ""
                        }
                    ));
                }
            } else {
                lines.push(format!(
                    "CapacityBuffer {}: not ready ({reason}): {message}",
                    buffer.key
                ));
            }
            rows.push(serde_json::json!({
                "namespace": namespace,
                "name": name,
                "ready": ready,
                "reason": reason,
                "message": message,
                "chunks": chunks,
                "held": holding.held,
                "costPerHour": cost,
                "nodes": holding.nodes.iter().map(|(node, h)| serde_json::json!({
                    "node": node,
                    "chunks": h.chunks,
                    "share": h.share,
                    "pricePerHour": h.price_per_hour,
                    "costPerHour": h.cost_per_hour,
                    "buffersOnly": h.buffers_only,
                })).collect::<Vec<_>>(),
            }));
        }
        if self.json {
            let value = serde_json::json!({
                "at": rfc3339(snapshot.now()),
                "costPerHour": total,
                "buffers": rows,
            });
            println!("{}", serde_json::to_string_pretty(&value)?);
        } else {
            println!("At {} ({}):", rfc3339(snapshot.now()), pass.now_from);
            if lines.is_empty() {
                println!("no CapacityBuffer in the snapshot");
            } else {
                for line in lines {
                    println!("{line}");
                }
                println!("buffers cost {total:.4}/h in all");
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
