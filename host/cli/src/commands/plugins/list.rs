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
}

impl Execute for ListArgs {
    async fn execute(self) -> Result<ExitCode> {
        list(&self.options)
    }
}

/// `joinery plugins list`.
fn list(options: &PluginOptions) -> Result<ExitCode> {
    let registry = open_registry(options, HostServices::default())?;
    println!("{:<20} {:<18} {:<9} {:>10}  {:<14} SOURCE", "NAME", "KIND", "VERSION", "SIZE", "SHA256");
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
