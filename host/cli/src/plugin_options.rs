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

/// A plugin ConfigMap (what `joinery plugins package --configmap` writes, the distribution
/// format) unpacked into a private temporary directory as the kubelet would mount it; the
/// directory is removed when this is dropped.
#[derive(Debug)]
pub struct UnpackedConfigMap {
    /// The plugin directory.
    pub dir: PathBuf,
}

impl Drop for UnpackedConfigMap {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `path` unpacked when it is a plugin ConfigMap's YAML; `None` for anything else (a
/// component, a directory), so callers go on as before. A ConfigMap without `plugin.yaml` is
/// an error naming the field.
pub fn unpack_configmap(path: &Path) -> Result<Option<UnpackedConfigMap>> {
    use std::sync::atomic::{AtomicU32, Ordering};
    if !path.is_file() {
        return Ok(None);
    }
    let raw = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    // A component (`\0asm`) or a gzip file is not YAML.
    if raw.starts_with(b"\0asm") || raw.starts_with(&[0x1f, 0x8b]) {
        return Ok(None);
    }
    let Ok(text) = std::str::from_utf8(&raw) else {
        return Ok(None);
    };
    let Ok(value) = serde_norway::from_str::<serde_json::Value>(text) else {
        return Ok(None);
    };
    if value.get("kind").and_then(|k| k.as_str()) != Some("ConfigMap") {
        return Ok(None);
    }
    let configmap: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(value)
        .with_context(|| format!("{}: not a valid ConfigMap", path.display()))?;
    let data = configmap.data.unwrap_or_default();
    if !data.contains_key("plugin.yaml") {
        anyhow::bail!(
            "{}: the ConfigMap has no data[\"plugin.yaml\"]: it is not a plugin ConfigMap (make one with `joinery plugins package --configmap`)",
            path.display()
        );
    }
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "joinery-configmap-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let unpacked = UnpackedConfigMap { dir };
    let write = |name: &str, bytes: &[u8]| {
        // Keys are file names: no path may leave the directory.
        if name.contains('/') || name == ".." || name == "." {
            anyhow::bail!("{}: key {name:?} is not a file name", path.display());
        }
        std::fs::write(unpacked.dir.join(name), bytes)
            .with_context(|| format!("cannot unpack {name} of {}", path.display()))
    };
    for (name, text) in &data {
        write(name, text.as_bytes())?;
    }
    for (name, bytes) in configmap.binary_data.unwrap_or_default() {
        write(&name, &bytes.0)?;
    }
    Ok(Some(unpacked))
}
