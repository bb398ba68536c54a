//! Plugin loading shared by the commands that load plugins (`run`, `schedule`, `render`,
//! `plugins`, `bench plugins`): the `--plugin-dir`/`--grants`/`--plugin-cache-dir` options and
//! the registry they open.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use joinery_runtime::engine::{EngineOptions, PluginEngine};
use joinery_runtime::grants::Grants;
use joinery_runtime::plugin::LoadContext;
use joinery_runtime::registry::PluginRegistry;
use joinery_runtime::services::HostServices;

/// Options shared by commands that load plugins.
#[derive(Debug, Clone, clap::Args)]
pub struct PluginOptions {
    /// Plugin directories (a plugin directory, or a parent of several). Repeatable.
    #[arg(
        long = "plugin-dir",
        env = "JOINERY_PLUGIN_DIRS",
        value_delimiter = ','
    )]
    pub plugin_dirs: Vec<PathBuf>,
    /// Operator grants file (YAML). Without it, plugins get no capabilities.
    #[arg(long, env = "JOINERY_GRANTS")]
    pub grants: Option<PathBuf>,
    /// Directory for compiled plugins (speeds up start-up). Unset: no cache.
    #[arg(long, env = "JOINERY_PLUGIN_CACHE_DIR")]
    pub plugin_cache_dir: Option<PathBuf>,
}

/// Reads a grants file, or returns empty grants.
pub fn read_grants(path: Option<&Path>) -> Result<Grants> {
    match path {
        None => Ok(Grants::default()),
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read grants file {}", p.display()))?;
            Ok(Grants::parse(&text, &p.display().to_string())?)
        }
    }
}

/// Opens the plugin registry: built-ins plus the configured directories.
pub fn open_registry(
    options: &PluginOptions,
    services: HostServices,
) -> Result<Arc<PluginRegistry>> {
    let engine = PluginEngine::new(&EngineOptions {
        cache_dir: options.plugin_cache_dir.clone(),
        ..Default::default()
    })
    .map_err(anyhow::Error::msg)?;
    let grants = read_grants(options.grants.as_deref())?;
    let cx = LoadContext::new(engine, grants, services).map_err(anyhow::Error::msg)?;
    let registry = PluginRegistry::load(
        cx,
        options.plugin_dirs.clone(),
        joinery_builtin_plugins::builtin_manifests(),
    )
    .context("cannot load plugins; fix the plugin named above or remove its directory")?;
    Ok(Arc::new(registry))
}
