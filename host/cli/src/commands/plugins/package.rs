//! `joinery plugins package`: a plugin's `plugin.yaml` (with the component's sha256 filled in)
//! and its component, written as a plugin directory (`--out`) or printed as a ConfigMap
//! (`--configmap`) to mount as one.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use joinery_runtime::manifest::PluginManifest;
use joinery_runtime::plugin::sha256_hex;
use joinery_runtime::registry::{MANIFEST_FILE, MAX_COMPONENT_BYTES, read_plugin_dir};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::commands::Execute;

/// The most a ConfigMap may hold: the API server refuses one whose `data` and `binaryData`
/// values (binary values counted decoded) add up to more than 1 MiB.
pub const CONFIGMAP_LIMIT_BYTES: usize = 1024 * 1024;

/// Client-side `kubectl apply` copies the whole object into an annotation, and an object's
/// annotations may hold at most this much.
const ANNOTATIONS_LIMIT_BYTES: usize = 256 * 1024;

const AFTER_HELP: &str = "\
Inputs: one plugin directory (plugin.yaml and the component it names, plugin.wasm or
plugin.wasm.gz), or a plugin.yaml and a component file (.wasm or .wasm.gz) in any order, or
--manifest and --wasm. The component's sha256 (of the uncompressed bytes) is written into
plugin.yaml.

--configmap prints a ConfigMap to stdout: plugin.yaml under data, the component under
binaryData (base64), gzipped as plugin.wasm.gz when that is smaller (the host decompresses
it). It refuses a plugin over the 1 MiB a ConfigMap holds; load such a plugin from another
volume instead (--plugin-dir may point at any mount). Apply it with
`kubectl apply --server-side -f FILE` or `kubectl create -f FILE`: client-side
`kubectl apply` copies the object into an annotation limited to 256 KiB, too small for a
plugin's binaryData.

Examples:
  joinery plugins package --configmap my-plugin --namespace joinery \\
      my-plugin/plugin.yaml my-plugin/target/wasm32-wasip2/release/my_plugin.wasm > my-plugin.configmap.yaml
  joinery plugins package --configmap my-plugin ./my-plugin-dir | kubectl apply --server-side -f -
  joinery plugins package --manifest plugin.yaml --wasm my.wasm --out dir --gzip";

/// `joinery plugins package …`
#[derive(Debug, clap::Args)]
#[command(
    group(clap::ArgGroup::new("input").required(true).args(["inputs", "manifest"])),
    group(clap::ArgGroup::new("output").required(true).args(["out", "configmap"])),
    after_long_help = AFTER_HELP
)]
pub struct PackageArgs {
    /// A plugin directory, or a plugin.yaml and a component file (.wasm or .wasm.gz).
    #[arg(value_name = "PLUGIN_DIR_OR_FILES", conflicts_with_all = ["manifest", "wasm"])]
    pub inputs: Vec<PathBuf>,
    /// The plugin's source plugin.yaml (with --wasm, instead of PLUGIN_DIR_OR_FILES).
    #[arg(long, requires = "wasm")]
    pub manifest: Option<PathBuf>,
    /// The built component, .wasm or .wasm.gz (with --manifest).
    #[arg(long, requires = "manifest")]
    pub wasm: Option<PathBuf>,
    /// Write a plugin directory here.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// With --out: store the component gzipped (plugin.wasm.gz).
    #[arg(long, requires = "out")]
    pub gzip: bool,
    /// Print a ConfigMap of this name holding the plugin to stdout (YAML), the component
    /// gzipped where that is smaller; refused above the 1 MiB a ConfigMap holds. Apply it with
    /// `kubectl apply --server-side` or `kubectl create`, not client-side `kubectl apply`.
    #[arg(long, value_name = "NAME")]
    pub configmap: Option<String>,
    /// The ConfigMap's namespace (left out by default: kubectl's current namespace).
    #[arg(long, value_name = "NS", requires = "configmap")]
    pub namespace: Option<String>,
}

impl Execute for PackageArgs {
    async fn execute(self) -> Result<ExitCode> {
        let (manifest, wasm) = match (&self.manifest, &self.wasm) {
            (Some(manifest), Some(wasm)) => read_files(manifest, wasm)?,
            _ => read_inputs(&self.inputs)?,
        };
        match (&self.out, &self.configmap) {
            (Some(out), _) => write_dir(manifest, &wasm, out, self.gzip),
            (None, Some(name)) => print_configmap(manifest, &wasm, name, self.namespace.as_deref()),
            (None, None) => bail!("give --out DIR or --configmap NAME"),
        }
    }

    fn default_log_level(&self) -> String {
        "warn".into()
    }
}

/// Reads the plugin from the positional inputs: one directory, or a manifest and a component.
fn read_inputs(inputs: &[PathBuf]) -> Result<(PluginManifest, Vec<u8>)> {
    if let [dir] = inputs
        && dir.is_dir()
    {
        let read = read_plugin_dir(dir).with_context(|| {
            format!(
                "cannot read the plugin directory {} (it needs {MANIFEST_FILE} and the component it names; \
                 or pass a plugin.yaml and a .wasm file instead)",
                dir.display()
            )
        })?;
        return Ok((read.manifest, read.wasm));
    }
    let (mut manifests, mut components) = (Vec::new(), Vec::new());
    for input in inputs {
        let name = input
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        if input.is_dir() {
            bail!(
                "{} is a directory: give one plugin directory, or a plugin.yaml and a component file",
                input.display()
            );
        } else if name.ends_with(".wasm") || name.ends_with(".wasm.gz") {
            components.push(input);
        } else if name.ends_with(".yaml") || name.ends_with(".yml") {
            manifests.push(input);
        } else {
            bail!(
                "{}: expected a plugin.yaml (.yaml or .yml) or a component (.wasm or .wasm.gz)",
                input.display()
            );
        }
    }
    match (manifests.as_slice(), components.as_slice()) {
        ([manifest], [component]) => read_files(manifest, component),
        _ => bail!(
            "expected one plugin.yaml and one component (.wasm or .wasm.gz), got {} and {}",
            manifests.len(),
            components.len()
        ),
    }
}

/// Reads a manifest and a component (decompressing a `.gz` one, within the loader's limit).
fn read_files(manifest_path: &Path, wasm_path: &Path) -> Result<(PluginManifest, Vec<u8>)> {
    let text = std::fs::read_to_string(manifest_path)
        .with_context(|| format!("cannot read {}", manifest_path.display()))?;
    let manifest = PluginManifest::parse(&text, &manifest_path.display().to_string())?;
    let file = std::fs::File::open(wasm_path)
        .with_context(|| format!("cannot read {}", wasm_path.display()))?;
    let mut wasm = Vec::new();
    if wasm_path.to_string_lossy().ends_with(".gz") {
        flate2::read::GzDecoder::new(file)
            .take(MAX_COMPONENT_BYTES + 1)
            .read_to_end(&mut wasm)
    } else {
        file.take(MAX_COMPONENT_BYTES + 1).read_to_end(&mut wasm)
    }
    .with_context(|| format!("cannot read {}", wasm_path.display()))?;
    if wasm.len() as u64 > MAX_COMPONENT_BYTES {
        bail!(
            "{} is larger than the {MAX_COMPONENT_BYTES} bytes the host loads",
            wasm_path.display()
        );
    }
    if !wasm.starts_with(b"\0asm") {
        bail!(
            "{} is not a WebAssembly component (no \\0asm header)",
            wasm_path.display()
        );
    }
    Ok((manifest, wasm))
}

fn gzip(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    encoder.write_all(bytes)?;
    Ok(encoder.finish()?)
}

/// `--out`: the plugin directory.
fn write_dir(
    mut manifest: PluginManifest,
    wasm: &[u8],
    out: &Path,
    gzipped: bool,
) -> Result<ExitCode> {
    manifest.sha256 = Some(sha256_hex(wasm));
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let component = if gzipped { gzip(wasm)? } else { wasm.to_vec() };
    manifest.component = if gzipped {
        "plugin.wasm.gz"
    } else {
        "plugin.wasm"
    }
    .into();
    std::fs::write(out.join(&manifest.component), component)?;
    std::fs::write(out.join(MANIFEST_FILE), serde_norway::to_string(&manifest)?)?;
    println!(
        "packaged {} {} into {} (sha256 {})",
        manifest.name,
        manifest.version,
        out.display(),
        manifest.sha256.unwrap_or_default()
    );
    Ok(ExitCode::SUCCESS)
}

/// `--configmap`: the ConfigMap, as YAML on stdout.
fn print_configmap(
    mut manifest: PluginManifest,
    wasm: &[u8],
    name: &str,
    namespace: Option<&str>,
) -> Result<ExitCode> {
    check_name(name, "--configmap", true)?;
    if let Some(namespace) = namespace {
        check_name(namespace, "--namespace", false)?;
    }
    manifest.sha256 = Some(sha256_hex(wasm));
    let gzipped = gzip(wasm)?;
    let (component_name, component) = if gzipped.len() < wasm.len() {
        ("plugin.wasm.gz", gzipped)
    } else {
        ("plugin.wasm", wasm.to_vec())
    };
    manifest.component = component_name.into();
    let manifest_text = serde_norway::to_string(&manifest)?;

    let total = manifest_text.len() + component.len();
    if total > CONFIGMAP_LIMIT_BYTES {
        bail!(
            "plugin {} does not fit in a ConfigMap: it would hold {total} bytes ({MANIFEST_FILE} {} + {component_name} {}), \
             over the limit of {CONFIGMAP_LIMIT_BYTES} bytes (1 MiB) on a ConfigMap's data. Put the plugin directory on another \
             volume instead (an image volume, a PersistentVolumeClaim, or an emptyDir an init container fills; \
             `joinery plugins package --out DIR` writes the directory) and point --plugin-dir at its mount",
            manifest.name,
            manifest_text.len(),
            component.len()
        );
    }

    let labels = BTreeMap::from([
        (
            "app.kubernetes.io/part-of".to_string(),
            "joinery".to_string(),
        ),
        (
            "app.kubernetes.io/component".to_string(),
            "plugin".to_string(),
        ),
    ]);
    let configmap = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            namespace: namespace.map(str::to_string),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(MANIFEST_FILE.to_string(), manifest_text)])),
        binary_data: Some(BTreeMap::from([(
            component_name.to_string(),
            ByteString(component),
        )])),
        ..ConfigMap::default()
    };
    let yaml = format!(
        "# Joinery plugin {} {} ({}, sha256 {}).\n# Apply with `kubectl apply --server-side -f -` or `kubectl create -f -`.\n{}",
        manifest.name,
        manifest.version,
        manifest.kind,
        manifest.sha256.as_deref().unwrap_or_default(),
        serde_norway::to_string(&configmap)?
    );
    std::io::stdout().lock().write_all(yaml.as_bytes())?;

    let kib = |bytes: usize| bytes.div_ceil(1024);
    eprintln!(
        "packaged {} {} as ConfigMap {name}: {component_name} {} bytes ({} bytes uncompressed); {total} of the \
         {CONFIGMAP_LIMIT_BYTES} bytes a ConfigMap holds",
        manifest.name,
        manifest.version,
        configmap
            .binary_data
            .as_ref()
            .and_then(|b| b.get(component_name))
            .map_or(0, |c| c.0.len()),
        wasm.len(),
    );
    // Only when it matters: a ConfigMap under the annotation limit applies either way.
    if yaml.len() > ANNOTATIONS_LIMIT_BYTES {
        eprintln!(
            "warning: client-side `kubectl apply` cannot store this ConfigMap (about {} KiB): it copies the whole \
             object into the kubectl.kubernetes.io/last-applied-configuration annotation, and an object's annotations \
             hold at most {} KiB. Use `kubectl apply --server-side -f …` or `kubectl create -f …` (`kubectl replace -f …` \
             to update).",
            kib(yaml.len()),
            kib(ANNOTATIONS_LIMIT_BYTES),
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Checks a ConfigMap name (a DNS subdomain) or a namespace (a DNS label).
fn check_name(name: &str, flag: &str, subdomain: bool) -> Result<()> {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && label.chars().all(|c| alnum(c) || c == '-')
            && label.starts_with(alnum)
            && label.ends_with(alnum)
    };
    let ok = if subdomain {
        name.len() <= 253 && name.split('.').all(label_ok)
    } else {
        label_ok(name)
    };
    if !ok {
        let grammar = if subdomain {
            "a DNS subdomain: dot-separated labels of lowercase letters, digits and '-', each starting and ending with a \
             letter or digit, at most 253 characters"
        } else {
            "a DNS label: lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters"
        };
        bail!("{flag} {name:?} must be {grammar}");
    }
    Ok(())
}
