//! `joinery plugins list`: the built-in plugins and those found in plugin directories.

use std::path::PathBuf;
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
    /// Print a JSON array (name, kind, version, wit, sizeBytes, sha256, source, nodeClass;
    /// a directory that does not load appears as {source, error}).
    #[arg(long)]
    pub json: bool,
}

impl Execute for ListArgs {
    async fn execute(self) -> Result<ExitCode> {
        list(&self.options, self.json)
    }
}

/// The plugin directories that do not load on their own, each with why: what a host's
/// reload would fail on (it keeps the previous version of such a plugin serving).
fn failing_directories(options: &PluginOptions) -> Result<Vec<(PathBuf, String)>> {
    let mut failing = Vec::new();
    for dir in joinery_runtime::registry::discover(&options.plugin_dirs) {
        let alone = PluginOptions {
            plugin_dirs: vec![dir.clone()],
            ..options.clone()
        };
        if let Err(error) = open_registry(&alone, HostServices::default()) {
            // The load error itself, without `open_registry`'s general advice around it.
            let why = error
                .chain()
                .nth(1)
                .map_or_else(|| format!("{error:#}"), |e| e.to_string());
            failing.push((dir, why));
        }
    }
    Ok(failing)
}

/// `joinery plugins list`. A plugin directory that does not load is listed with its error
/// (and the exit code is 1), after the plugins that do.
fn list(options: &PluginOptions, json: bool) -> Result<ExitCode> {
    let (registry, failing) = match open_registry(options, HostServices::default()) {
        Ok(registry) => (registry, Vec::new()),
        Err(error) => {
            let failing = failing_directories(options)?;
            if failing.is_empty() {
                return Err(error);
            }
            let loading = PluginOptions {
                plugin_dirs: joinery_runtime::registry::discover(&options.plugin_dirs)
                    .into_iter()
                    .filter(|d| !failing.iter().any(|(f, _)| f == d))
                    .collect(),
                ..options.clone()
            };
            (open_registry(&loading, HostServices::default())?, failing)
        }
    };
    let code = if failing.is_empty() {
        ExitCode::SUCCESS
    } else {
        crate::exit::CHECK_FAILED
    };
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
            .chain(failing.iter().map(|(dir, error)| {
                serde_json::json!({"source": dir.display().to_string(), "error": error})
            }))
            .collect();
        println!("{}", serde_json::to_string_pretty(&plugins)?);
        return Ok(code);
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
    for (dir, error) in &failing {
        println!("does not load: {}: {error}", dir.display());
    }
    Ok(code)
}
