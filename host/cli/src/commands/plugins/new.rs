//! `joinery plugins new renderer|cloud|pricing NAME`: a plugin crate that builds and passes
//! its test as generated — `Cargo.toml`, `src/lib.rs` with a working implementation and a
//! test, `plugin.yaml`, and a README with the build, test and packaging steps.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};

use crate::commands::Execute;

/// The kind of plugin to scaffold.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Kind {
    /// A userData renderer (`userdata-renderer-plugin` world).
    Renderer,
    /// A cloud provider (`cloud-provider-plugin` world).
    Cloud,
    /// A pricing function (`pricing-plugin` world).
    Pricing,
}

/// `joinery plugins new …`
#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// What the plugin is.
    #[arg(value_enum)]
    pub kind: Kind,
    /// The plugin's name (lowercase letters, digits and `-`; also the crate's name).
    pub name: String,
    /// The directory to create (default: `./NAME`); it must not exist yet.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Use the SDK from this directory (a checkout's `plugins/sdk`) instead of the published
    /// `joinery-plugin-sdk` crate.
    #[arg(long, value_name = "PATH")]
    pub sdk: Option<PathBuf>,
}

impl Execute for NewArgs {
    async fn execute(self) -> Result<ExitCode> {
        let dir = self
            .dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(&self.name));
        scaffold(self.kind, &self.name, &dir, self.sdk.as_deref())?;
        println!(
            "created {} plugin {} in {}",
            kind_name(self.kind),
            self.name,
            dir.display()
        );
        println!(
            "next: cd {} && cargo test && cargo build --release --target wasm32-wasip2 (see its README.md)",
            dir.display()
        );
        Ok(ExitCode::SUCCESS)
    }
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Renderer => "userdata-renderer",
        Kind::Cloud => "cloud-provider",
        Kind::Pricing => "pricing",
    }
}

/// Whether `name` is usable as a plugin, crate and Kubernetes name.
fn valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !name.is_empty()
        && name.len() <= 63
        && bytes[0].is_ascii_lowercase()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
        && !name.ends_with('-')
}

/// Writes the crate for a `kind` plugin called `name` into `dir`.
pub fn scaffold(kind: Kind, name: &str, dir: &Path, sdk: Option<&Path>) -> Result<()> {
    if !valid_name(name) {
        bail!(
            "plugin name {name:?} is not usable: use lowercase letters, digits and '-', starting with a letter (at most 63)"
        );
    }
    if dir.exists() {
        bail!("{} already exists; choose another --dir", dir.display());
    }
    let sdk_dependency = match sdk {
        Some(path) => {
            let path = path
                .canonicalize()
                .with_context(|| format!("--sdk {}: no such directory", path.display()))?;
            if !path.join("Cargo.toml").is_file() {
                bail!(
                    "--sdk {}: not a crate directory (no Cargo.toml); point it at plugins/sdk of a Joinery checkout",
                    path.display()
                );
            }
            format!("path = {:?}", path.display().to_string())
        }
        None => "version = \"0.1.0\"".to_string(),
    };
    let feature = match kind {
        Kind::Renderer => "renderer",
        Kind::Cloud => "cloud",
        Kind::Pricing => "pricing",
    };
    let camel: String = name
        .split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect();
    let files: Vec<(&str, String)> = vec![
        (
            "Cargo.toml",
            cargo_toml(name, kind, feature, &sdk_dependency),
        ),
        (
            "src/lib.rs",
            lib_rs(kind).replace("NAME", name).replace("PLUGIN", &camel),
        ),
        ("plugin.yaml", manifest(kind, name, &camel)),
        ("README.md", readme(kind, name)),
        (".gitignore", "/target\n/plugin.wasm\n".to_string()),
    ];
    for (path, text) in files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

fn cargo_toml(name: &str, kind: Kind, feature: &str, sdk: &str) -> String {
    format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition = "2024"
description = "A Joinery {kind} plugin."
publish = false

[lib]
# cdylib: the wasm component; rlib: the native unit tests.
crate-type = ["cdylib", "rlib"]

[dependencies]
joinery-plugin-sdk = {{ {sdk}, features = ["{feature}"] }}

# A crate of its own, not a member of an enclosing workspace.
[workspace]

# Small components: Joinery stores plugins in ConfigMaps (1 MiB) and compiles them at load.
[profile.release]
opt-level = "z"
lto = true
strip = true
codegen-units = 1
panic = "abort"
"#,
        kind = kind_name(kind)
    )
}

/// The WIT version a new plugin targets (the SDK's).
const WIT: &str = joinery_runtime::manifest::CURRENT_WIT_VERSION;

fn manifest(kind: Kind, name: &str, camel: &str) -> String {
    let mut text = format!(
        "# Joinery plugin manifest (see the README). `joinery plugins package` adds the sha256.\nname: {name}\nversion: 0.1.0\nkind: {}\nwit: {WIT}\ncomponent: plugin.wasm\n",
        kind_name(kind)
    );
    if let Kind::Cloud = kind {
        text.push_str(&format!(
            "# The NodeClass kind this plugin serves (its CRD is yours to write and apply).\nnodeClass:\n  group: {name}.example.com\n  version: v1alpha1\n  kind: {camel}NodeClass\n"
        ));
    }
    text.push_str(match kind {
        // A renderer makes no calls: it requests nothing, and the secrets the operator grants
        // it reach it through the render context.
        Kind::Renderer => "# A renderer requests no capabilities: it makes no calls. Secrets the operator grants it\n# (plugins.<name>.secrets in the grants file) reach it in the render context.\nlimits:\n  memoryMiB: 16\n  timeoutMs: 1000\n  maxConcurrency: 8\n",
        Kind::Pricing => "# What the plugin asks for (a pricing plugin may only request http); the operator's\n# grants file decides what it gets.\ncapabilities:\n  http: []\nlimits:\n  memoryMiB: 16\n  timeoutMs: 1000\n  maxConcurrency: 8\n",
        Kind::Cloud => "# What the plugin asks for; the operator's grants file decides what it gets.\ncapabilities:\n  http: []\n  kubernetes: []\n  secrets: []\nlimits:\n  memoryMiB: 16\n  timeoutMs: 1000\n  maxConcurrency: 8\n",
    });
    text
}

fn lib_rs(kind: Kind) -> &'static str {
    match kind {
        Kind::Renderer => RENDERER,
        Kind::Cloud => CLOUD,
        Kind::Pricing => PRICING,
    }
}

const RENDERER: &str = r##"//! # NAME — a Joinery userData renderer
//!
//! Renders a shell script that says which NodeClaim is joining which cluster. The NodeClass
//! parameter `greeting` (default `hello`) shows how parameters arrive.

use joinery_plugin_sdk::renderer::{RenderContext, RenderError, Renderer};

/// The renderer.
pub struct PLUGIN;

impl Renderer for PLUGIN {
    fn render(ctx: RenderContext) -> Result<String, RenderError> {
        let greeting = ctx.non_empty_parameter("greeting").unwrap_or("hello");
        if greeting.contains('\'') {
            return Err(RenderError::InvalidParameter("greeting must not contain a single quote".to_string()));
        }
        Ok(format!(
            "#!/bin/sh\necho '{greeting} from NAME: NodeClaim {} of NodePool {} joins {}'\n",
            ctx.node_claim, ctx.node_pool, ctx.cluster_endpoint
        ))
    }
}

joinery_plugin_sdk::export_renderer!(PLUGIN);

#[cfg(test)]
mod tests {
    use super::*;
    use joinery_plugin_sdk::testing;

    #[test]
    fn renders_the_claim_pool_and_endpoint() {
        let script = PLUGIN::render(testing::render_context().build()).unwrap();
        assert_eq!(script, "#!/bin/sh\necho 'hello from NAME: NodeClaim default-abc12 of NodePool default joins https://10.0.0.1:6443'\n");
        testing::assert_shell_syntax(&script);
    }

    #[test]
    fn a_quote_in_the_greeting_is_refused() {
        let mut ctx = testing::render_context().build();
        testing::set_parameter(&mut ctx, "greeting", "it's");
        assert!(testing::invalid_parameter(PLUGIN::render(ctx)).contains("single quote"));
    }
}
"##;

const PRICING: &str = r##"//! # NAME — a Joinery pricing function
//!
//! Prices an instance type from its size: 0.02 per vCPU-hour plus 0.005 per GiB-hour, and
//! half that for spot. Replace the formula with your contract's.

use joinery_plugin_sdk::pricing::{PriceRequest, Pricing};

/// The pricing function.
pub struct PLUGIN;

impl Pricing for PLUGIN {
    fn price(requests: Vec<PriceRequest>) -> Result<Vec<Option<f64>>, String> {
        Ok(requests
            .iter()
            .map(|r| {
                let hourly = r.cpu_millis as f64 / 1000.0 * 0.02 + r.memory_bytes as f64 / (1u64 << 30) as f64 * 0.005;
                Some(if r.capacity_type == "spot" { hourly / 2.0 } else { hourly })
            })
            .collect())
    }
}

joinery_plugin_sdk::export_pricing!(PLUGIN);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_follow_size_and_capacity_type() {
        let on_demand = PriceRequest::new("m-4", 4000, 16 << 30);
        let mut spot = PriceRequest::new("m-4", 4000, 16 << 30);
        spot.capacity_type = "spot".to_string();
        let prices = PLUGIN::price(vec![on_demand, spot]).unwrap();
        assert_eq!(prices, vec![Some(0.16), Some(0.08)]);
    }
}
"##;

const CLOUD: &str = r##"//! # NAME — a Joinery cloud provider
//!
//! A skeleton: it offers one instance type and launches nothing yet. Implement `create`,
//! `get`, `list` and `delete` against your cloud's API (outgoing HTTP with
//! `joinery_plugin_sdk::http`, after asking for the hosts under `capabilities.http`).

use joinery_plugin_sdk::cloud::{CloudError, CloudProvider, InstanceType, NodeClass, Offering, Overhead, Requirement, Resource};

/// The cloud provider.
pub struct PLUGIN;

impl CloudProvider for PLUGIN {
    fn get_instance_types(_node_class: NodeClass) -> Result<Vec<InstanceType>, CloudError> {
        Ok(vec![InstanceType {
            name: "small".to_string(),
            requirements: vec![Requirement::is_in("kubernetes.io/arch", &["amd64"]), Requirement::is_in("kubernetes.io/os", &["linux"])],
            capacity: vec![Resource::new("cpu", "2"), Resource::new("memory", "4Gi"), Resource::new("pods", "110")],
            overhead: Overhead { kube_reserved: vec![Resource::new("cpu", "100m")], system_reserved: Vec::new(), eviction_threshold: Vec::new() },
            offerings: vec![Offering { zone: "zone-a".to_string(), capacity_type: "on-demand".to_string(), price: Some(0.05), available: true }],
        }])
    }
}

joinery_plugin_sdk::export_cloud_provider!(PLUGIN);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offers_one_instance_type_and_launches_nothing_yet() {
        let types = PLUGIN::get_instance_types(NodeClass::new("default", "{}")).unwrap();
        assert_eq!(types.len(), 1);
        assert_eq!(types[0].name, "small");
        assert!(PLUGIN::list().is_err(), "list is not implemented yet");
    }
}
"##;

fn readme(kind: Kind, name: &str) -> String {
    format!(
        r#"# {name}

A Joinery {kind} plugin, generated by `joinery plugins new`.

```sh
rustup target add wasm32-wasip2
cargo test                                            # the unit tests, natively
cargo build --release --target wasm32-wasip2          # the component
cp target/wasm32-wasip2/release/{crate_file}.wasm plugin.wasm
joinery plugins package --out dist plugin.yaml plugin.wasm   # a plugin directory, sha256 filled in
joinery plugins inspect dist                          # WIT version, imports, whether it loads
joinery plugins package --configmap {name} plugin.yaml plugin.wasm > configmap.yaml
kubectl apply --server-side -f configmap.yaml         # then list it under plugins in the chart's values
```

{helpers}
"#,
        kind = kind_name(kind),
        crate_file = name.replace('-', "_"),
        helpers = readme_helpers(kind),
    )
}

/// What the scaffold's README says the plugin may use: only what its kind can.
fn readme_helpers(kind: Kind) -> &'static str {
    match kind {
        Kind::Renderer => {
            "A renderer makes no calls: it turns the render context (the NodeClaim, the NodeClass's
parameters and userData, the cluster, and the secrets the operator grants it in the grants
file) into a script. The SDK's `bootstrap` module quotes for sh and YAML, checks parameter
names, reads the join token (inline or from a granted secret) and builds kubelet flags;
`testing::assert_shell_syntax(&script)` checks a rendered shell script with `sh -n` in your
unit tests (see `src/lib.rs`), and `joinery render --renderer ./dist …` renders with the host."
        }
        Kind::Pricing => {
            "`plugin.yaml` declares the HTTP destinations the plugin asks for (`capabilities.http`, the
only capability a pricing plugin may request); the operator's grants file decides what it
gets. The SDK's documentation (`cargo doc --open`) lists the helpers: HTTP, logs, cache and
test fakes."
        }
        Kind::Cloud => {
            "`plugin.yaml` declares what the plugin asks for (`capabilities`); the operator's grants file
decides what it gets. The SDK's documentation (`cargo doc --open`) lists the helpers: HTTP,
Kubernetes, secrets, logs, cache and test fakes."
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_must_suit_crates_and_kubernetes() {
        assert!(valid_name("hello-renderer") && valid_name("p2"));
        for bad in [
            "",
            "Hello",
            "2fast",
            "with_underscore",
            "trailing-",
            &"x".repeat(64),
        ] {
            assert!(!valid_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn an_existing_directory_is_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let error = scaffold(Kind::Renderer, "hello", dir.path(), None).unwrap_err();
        assert!(error.to_string().contains("already exists"), "{error}");
    }
}
