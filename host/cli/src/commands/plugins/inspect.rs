//! `joinery plugins inspect`: a plugin's manifest, WIT version, imports and exports,
//! capabilities, size and digest, the limits its calls run under (the manifest's, capped by
//! the given grants), and whether it loads under those grants.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use joinery_runtime::engine::{EngineOptions, PluginEngine};
use joinery_runtime::manifest::{Limits, PluginManifest};
use joinery_runtime::plugin::{LoadContext, LoadedPlugin, PluginBytes, PluginSource, sha256_hex};
use joinery_runtime::registry::read_plugin_dir;
use joinery_runtime::services::HostServices;

use crate::commands::Execute;
use crate::plugin_options::read_grants;

/// ConfigMap-friendly size budget for a shipped plugin.
pub const SIZE_BUDGET_BYTES: usize = 512 * 1024;

/// `joinery plugins inspect …`
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// A plugin directory, a component file (.wasm / .wasm.gz), a plugin ConfigMap's YAML (as
    /// `plugins package --configmap` writes it), or the name of a built-in plugin.
    pub path: String,
    /// Grants file to evaluate the plugin against: whether it loads, and the limits it runs under.
    #[arg(long)]
    pub grants: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

impl Execute for InspectArgs {
    async fn execute(self) -> Result<ExitCode> {
        inspect(&self.path, self.grants.as_deref(), self.json)
    }
}

struct Inspected {
    manifest: Option<PluginManifest>,
    source: PluginSource,
    wasm: Vec<u8>,
    file_size: u64,
}

fn locate(path: &str) -> Result<Inspected> {
    let p = PathBuf::from(path);
    if let Some(unpacked) = crate::plugin_options::unpack_configmap(&p)? {
        let dir = read_plugin_dir(&unpacked.dir).with_context(|| format!("ConfigMap {path}"))?;
        return Ok(Inspected {
            manifest: Some(dir.manifest),
            source: PluginSource::Directory(p),
            file_size: dir.wasm.len() as u64,
            wasm: dir.wasm,
        });
    }
    if p.is_dir() {
        let file_size = std::fs::read_to_string(p.join("plugin.yaml"))
            .ok()
            .and_then(|t| PluginManifest::parse(&t, path).ok())
            .and_then(|m| std::fs::metadata(p.join(&m.component)).ok())
            .map(|m| m.len())
            .unwrap_or(0);
        let dir = read_plugin_dir(&p)?;
        return Ok(Inspected {
            manifest: Some(dir.manifest),
            source: PluginSource::Directory(p),
            wasm: dir.wasm,
            file_size,
        });
    }
    if p.is_file() {
        let raw = std::fs::read(&p).with_context(|| format!("cannot read {path}"))?;
        let file_size = raw.len() as u64;
        let wasm = if path.ends_with(".gz") {
            let mut out = Vec::new();
            std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(raw.as_slice()), &mut out)
                .with_context(|| format!("{path} is not valid gzip"))?;
            out
        } else {
            raw
        };
        return Ok(Inspected {
            manifest: None,
            source: PluginSource::Directory(p),
            wasm,
            file_size,
        });
    }
    for builtin in joinery_builtin_plugins::BUILTIN_PLUGINS {
        let manifest = PluginManifest::parse(builtin.manifest, "built-in")?;
        if manifest.name == path {
            return Ok(Inspected {
                manifest: Some(manifest),
                source: PluginSource::Builtin,
                wasm: builtin.wasm.to_vec(),
                file_size: builtin.wasm.len() as u64,
            });
        }
    }
    let names: Vec<String> = joinery_builtin_plugins::builtin_manifests()
        .into_iter()
        .map(|(m, _)| m.name)
        .collect();
    bail!(
        "{path:?} is neither a plugin directory, a component file, nor a built-in plugin ({})",
        names.join(", ")
    )
}

fn gzip_size(bytes: &[u8]) -> usize {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let _ = encoder.write_all(bytes);
    encoder.finish().map(|v| v.len()).unwrap_or(0)
}

/// `joinery plugins inspect`.
fn inspect(path: &str, grants_path: Option<&Path>, json: bool) -> Result<ExitCode> {
    let item = locate(path)?;
    let grants = read_grants(grants_path)?;
    // The limits in force, computed by the runtime's own rule (the manifest's, capped by
    // the grants file), not the manifest's request.
    let effective_limits = item.manifest.as_ref().map(|m| grants.effective_limits(m));
    // What the plugin may do under these grants: its request intersected with its grant (a
    // renderer's granted secrets reach it whole, through the render context).
    let effective = match (&item.manifest, grants_path) {
        (Some(m), Some(_)) => {
            let caps = grants.capabilities_for(m);
            let mut effective = caps.effective();
            if m.kind == joinery_runtime::manifest::PluginKind::UserdataRenderer {
                effective.secrets = caps.grant().secrets.clone();
            }
            Some(effective)
        }
        _ => None,
    };
    let engine = PluginEngine::new(&EngineOptions {
        pooling: false,
        ..Default::default()
    })
    .map_err(anyhow::Error::msg)?;
    let digest = sha256_hex(&item.wasm);
    let component = engine.compile(path, &digest, &item.wasm);
    let (imports, exports): (Vec<String>, Vec<String>) = match &component {
        Ok(c) => {
            let ty = c.component_type();
            (
                ty.imports(engine.engine())
                    .map(|(n, _)| n.to_string())
                    .collect(),
                ty.exports(engine.engine())
                    .map(|(n, _)| n.to_string())
                    .collect(),
            )
        }
        Err(_) => (vec![], vec![]),
    };
    let loads: Result<(), String> = match (&item.manifest, component) {
        (_, Err(e)) => Err(e.to_string()),
        (None, Ok(_)) => {
            Err("no plugin.yaml: a component alone cannot be loaded (see docs/plugins.md)".into())
        }
        (Some(manifest), Ok(component)) => {
            let cx = LoadContext::new(engine.clone(), grants, HostServices::default())
                .map_err(anyhow::Error::msg)?;
            LoadedPlugin::load(
                &cx,
                PluginBytes {
                    manifest: manifest.clone(),
                    source: item.source.clone(),
                    wasm: &item.wasm,
                    compiled: Some(component),
                },
            )
            .map(|_| ())
            .map_err(|e| e.to_string())
        }
    };
    let size = item.wasm.len();
    let within_budget = size <= SIZE_BUDGET_BYTES;
    if json {
        let value = serde_json::json!({
            "source": item.source.to_string(),
            "manifest": item.manifest,
            "effectiveLimits": effective_limits,
            "effectiveCapabilities": effective,
            "sizeBytes": size,
            "fileSizeBytes": item.file_size,
            "gzipSizeBytes": gzip_size(&item.wasm),
            "withinSizeBudget": within_budget,
            "sha256": digest,
            "imports": imports,
            "exports": exports,
            "loads": loads.is_ok(),
            "loadError": loads.as_ref().err(),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        println!("source:     {}", item.source);
        if let Some(m) = &item.manifest {
            println!("name:       {}", m.name);
            println!("version:    {}", m.version);
            println!("kind:       {}", m.kind);
            println!("wit:        joinery:plugin@{}", m.wit);
            if let Some(nc) = &m.node_class {
                println!("nodeClass:  {}/{} {}", nc.group, nc.version, nc.kind);
            }
            let limits = effective_limits.unwrap_or(m.limits);
            let describe = |l: &Limits| {
                let creates = l
                    .max_concurrent_creates
                    .map(|n| format!(", concurrent creates {n}"))
                    .unwrap_or_default();
                format!(
                    "memory {} MiB, timeout {} ms, concurrency {}{creates}",
                    l.memory_mib, l.timeout_ms, l.max_concurrency
                )
            };
            if limits == m.limits {
                println!("limits:     {}", describe(&limits));
            } else {
                println!(
                    "limits:     {} (under the grants; the manifest asks {})",
                    describe(&limits),
                    describe(&m.limits)
                );
            }
            let caps = &m.capabilities;
            println!("requests:");
            println!(
                "  http:       {}",
                list_or_none(caps.http.iter().map(|p| p.as_str().to_string()))
            );
            println!(
                "  kubernetes: {}",
                list_or_none(caps.kubernetes.iter().map(|r| format!(
                    "{}:{}/{}[{}]",
                    r.cluster,
                    r.group,
                    r.resources.join(","),
                    r.verbs.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(",")
                )))
            );
            println!(
                "  secrets:    {}",
                list_or_none(caps.secrets.iter().cloned())
            );
            println!("  clock:      {}", caps.clock);
            if let Some(e) = &effective {
                println!("effective under the grants (request ∩ grant; what calls may do):");
                println!("  http:       {}", list_or_none(e.http.iter().cloned()));
                println!(
                    "  kubernetes: {}",
                    list_or_none(e.kubernetes.iter().map(|r| format!(
                        "{}:{}/{}[{}]{}",
                        r.cluster,
                        r.group,
                        r.resources.join(","),
                        r.verbs.iter().map(|v| v.as_str()).collect::<Vec<_>>().join(","),
                        if r.namespaces.is_empty() {
                            String::new()
                        } else {
                            format!(" in {}", r.namespaces.join(","))
                        }
                    )))
                );
                println!("  secrets:    {}", list_or_none(e.secrets.iter().cloned()));
                println!("  clock:      {}", e.clock);
            }
        }
        println!(
            "size:       {} bytes ({:.1} KiB; gzip -9 {:.1} KiB) — {}",
            size,
            size as f64 / 1024.0,
            gzip_size(&item.wasm) as f64 / 1024.0,
            if within_budget {
                "within the 512 KiB budget"
            } else {
                "OVER the 512 KiB budget"
            }
        );
        println!("sha256:     {digest}");
        println!("imports:");
        for i in &imports {
            println!("  {i}");
        }
        println!("exports:");
        for e in &exports {
            println!("  {e}");
        }
        match &loads {
            Ok(()) => println!("loads:      yes"),
            Err(e) => println!("loads:      no — {e}"),
        }
    }
    Ok(if loads.is_ok() {
        ExitCode::SUCCESS
    } else {
        crate::exit::CHECK_FAILED
    })
}

fn list_or_none(items: impl Iterator<Item = String>) -> String {
    let v: Vec<String> = items.collect();
    if v.is_empty() {
        "(none)".into()
    } else {
        v.join(", ")
    }
}
