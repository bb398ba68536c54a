//! `joinery plugins list`: the built-in plugins and those found in plugin directories.

use std::process::ExitCode;

use anyhow::Result;
use joinery_runtime::services::HostServices;

use crate::commands::Execute;
use crate::plugin_options::{PluginOptions, open_registry};

/// `joinery plugins list …`
#[derive(Debug, clap::Args)]
pub struct ListArgs {
    /// Plugin loading options.
    #[command(flatten)]
    pub options: PluginOptions,
    /// Print a JSON array (name, kind, version, wit, sizeBytes, sha256, source, nodeClass).
    #[arg(long)]
    pub json: bool,
}

impl Execute for ListArgs {
    async fn execute(self) -> Result<ExitCode> {
        list(&self.options, self.json)
    }
}

/// `joinery plugins list`.
fn list(options: &PluginOptions, json: bool) -> Result<ExitCode> {
    let registry = open_registry(options, HostServices::default())?;
    if json {
        let plugins: Vec<serde_json::Value> = registry
            .current()
            .iter()
            .map(|p| {
                let manifest = p.manifest();
                serde_json::json!({
                    "name": p.name(),
                    "kind": p.kind().as_str(),
                    "version": manifest.version,
                    "wit": manifest.wit,
                    "sizeBytes": p.size(),
                    "sha256": p.digest(),
                    "source": p.source().to_string(),
                    "nodeClass": manifest.node_class.as_ref().map(|n| serde_json::json!({"group": n.group, "version": n.version, "kind": n.kind})),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&plugins)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<20} {:<18} {:<9} {:>10}  {:<14} SOURCE",
        "NAME", "KIND", "VERSION", "SIZE", "SHA256"
    );
    for p in registry.current().iter() {
        println!(
            "{:<20} {:<18} {:<9} {:>10}  {:<14} {}",
            p.name(),
            p.kind().as_str(),
            p.manifest().version,
            p.size(),
            &p.digest()[..12],
            p.source()
        );
    }
    Ok(ExitCode::SUCCESS)
}
