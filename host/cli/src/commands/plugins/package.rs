//! `joinery plugins package`: write a plugin directory (plugin.yaml with its sha256, and the
//! component) ready to ship in a ConfigMap.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use joinery_runtime::manifest::PluginManifest;
use joinery_runtime::plugin::sha256_hex;

use crate::commands::Execute;

/// `joinery plugins package …`
#[derive(Debug, clap::Args)]
pub struct PackageArgs {
    /// The plugin's source plugin.yaml.
    #[arg(long)]
    pub manifest: PathBuf,
    /// The built component.
    #[arg(long)]
    pub wasm: PathBuf,
    /// Output directory.
    #[arg(long)]
    pub out: PathBuf,
    /// Store the component gzipped (plugin.wasm.gz).
    #[arg(long)]
    pub gzip: bool,
}

impl Execute for PackageArgs {
    async fn execute(self) -> Result<ExitCode> {
        package(&self.manifest, &self.wasm, &self.out, self.gzip)
    }
}

/// `joinery plugins package`.
fn package(manifest_path: &Path, wasm_path: &Path, out: &Path, gzip: bool) -> Result<ExitCode> {
    let text = std::fs::read_to_string(manifest_path).with_context(|| format!("cannot read {}", manifest_path.display()))?;
    let mut manifest = PluginManifest::parse(&text, &manifest_path.display().to_string())?;
    let wasm = std::fs::read(wasm_path).with_context(|| format!("cannot read {}", wasm_path.display()))?;
    manifest.sha256 = Some(sha256_hex(&wasm));
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    if gzip {
        manifest.component = "plugin.wasm.gz".into();
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(&wasm)?;
        std::fs::write(out.join(&manifest.component), encoder.finish()?)?;
    } else {
        manifest.component = "plugin.wasm".into();
        std::fs::write(out.join(&manifest.component), &wasm)?;
    }
    std::fs::write(out.join("plugin.yaml"), serde_yaml::to_string(&manifest)?)?;
    println!("packaged {} {} into {} (sha256 {})", manifest.name, manifest.version, out.display(), manifest.sha256.unwrap_or_default());
    Ok(ExitCode::SUCCESS)
}
