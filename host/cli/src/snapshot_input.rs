//! What the dry-run commands over a cluster snapshot (`schedule`, `disrupt`, `explain node`)
//! read besides their own options: the snapshot file itself, and the instance types it is
//! judged against, from a catalog file (`--catalog`) or from a cloud plugin asked the way the
//! controller asks it (`--plugin` with `--node-class`). Errors name the file, and for the
//! snapshot the document, object and field ([`Snapshot::parse`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use joinery_adapter::snapshot::{Snapshot, read_catalog};
use joinery_controller::cloud::{Cloud, group_kind};
use joinery_core::clock::Clock;
use joinery_core::contract::RepairPolicy;
use joinery_core::instance_type::InstanceType;
use joinery_core::labels::LabelPolicy;
use joinery_runtime::manifest::PluginKind;
use joinery_runtime::services::HostServices;
use kube::api::DynamicObject;

use crate::plugin_options::PluginOptions;

/// Where the instance types come from: `--catalog FILE`, or `--plugin NAME --node-class FILE`.
#[derive(Debug, clap::Args)]
pub struct InstanceTypeArgs {
    /// Instance-type catalog file (YAML or JSON); see examples/catalogs/.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["plugin", "node_class"], required_unless_present = "plugin")]
    pub catalog: Option<PathBuf>,
    /// Cloud plugin (built-in or from --plugin-dir) to ask for instance types instead.
    #[arg(long, value_name = "NAME", requires = "node_class")]
    pub plugin: Option<String>,
    /// NodeClass YAML passed to the plugin's get-instance-types (with --plugin).
    #[arg(long, value_name = "FILE", requires = "plugin")]
    pub node_class: Option<PathBuf>,
    /// Plugin loading options (with --plugin).
    #[command(flatten)]
    pub plugins: PluginOptions,
}

impl InstanceTypeArgs {
    /// The instance types every NodePool of the snapshot is offered, with the label policy
    /// (upstream's, plus a catalog's `wellKnownLabels`).
    pub async fn load(&self) -> Result<(Vec<InstanceType>, LabelPolicy)> {
        match (&self.catalog, &self.plugin, &self.node_class) {
            (Some(path), _, _) => read_catalog(&read(path, "catalog")?)
                .with_context(|| format!("catalog {}", path.display())),
            (None, Some(plugin), Some(class)) => Ok((
                plugin_instance_types(&self.plugins, plugin, class).await?,
                LabelPolicy::default(),
            )),
            _ => bail!(
                "give the instance types: --catalog FILE, or --plugin NAME with --node-class FILE"
            ),
        }
    }
}

impl InstanceTypeArgs {
    /// The repair policies nodes are judged with, and where they come from: the cloud
    /// plugin's (`--plugin`; the host's defaults when it names none), else the host's.
    pub async fn repair_policies(&self) -> Result<(Vec<RepairPolicy>, String)> {
        let Some(name) = &self.plugin else {
            return Ok((
                joinery_core::repair::default_policies(),
                "the host's defaults (give --plugin to use a cloud plugin's)".into(),
            ));
        };
        let registry =
            crate::plugin_options::open_registry(&self.plugins, HostServices::default())?;
        let plugins = registry.current();
        let plugin = plugins
            .get(name)
            .with_context(|| format!("no plugin named {name:?}"))?;
        match plugin
            .repair_policies()
            .await
            .with_context(|| format!("plugin {name}: repair-policies"))?
        {
            Some(policies) => Ok((policies, format!("plugin {name}"))),
            None => Ok((
                joinery_core::repair::default_policies(),
                format!("the host's defaults (plugin {name} names none)"),
            )),
        }
    }
}

/// Reads a file the command was given; the error names what it is (`snapshot`, `catalog`, …).
/// Prints a dry-run command's report to stdout: `report` as pretty JSON with `json`, else
/// the text `write_text` writes (buffered, flushed once).
pub fn print_report(
    json: bool,
    report: &impl serde::Serialize,
    write_text: impl FnOnce(&mut std::io::BufWriter<std::io::StdoutLock<'static>>) -> Result<()>,
) -> Result<()> {
    use std::io::Write;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if json {
        serde_json::to_writer_pretty(&mut out, report)?;
        writeln!(out)?;
    } else {
        write_text(&mut out)?;
    }
    out.flush()?;
    Ok(())
}

/// Reads a file the command was given, naming it (`what`) when it cannot.
pub fn read(path: &Path, what: &str) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read {what} {}", path.display()))
}

/// Reads and parses a snapshot file: multi-document YAML as `kubectl get -o yaml` prints it.
/// The text's memory is given back before the caller allocates its own.
pub fn read_snapshot(path: &Path) -> Result<Snapshot> {
    let text = read(path, "snapshot")?;
    Snapshot::parse(&text).with_context(|| format!("snapshot {}", path.display()))
}

/// Asks the cloud plugin `name` for the instance types of the NodeClass in `class_path`, the
/// way the controller does (unknown prices filled by the fallback pricing plugin).
async fn plugin_instance_types(
    options: &PluginOptions,
    name: &str,
    class_path: &Path,
) -> Result<Vec<InstanceType>> {
    let text = read(class_path, "NodeClass")?;
    let class: DynamicObject = serde_norway::from_str(&text).with_context(|| {
        format!(
            "NodeClass {}: expected one Kubernetes object with apiVersion, kind and metadata",
            class_path.display()
        )
    })?;
    let (group, kind) = group_kind(&class);
    let registry = crate::plugin_options::open_registry(options, HostServices::default())?;
    let plugins = registry.current();
    let Some(plugin) = plugins.get(name) else {
        let loaded: Vec<&str> = plugins
            .iter()
            .filter(|p| p.kind() == PluginKind::CloudProvider)
            .map(|p| p.name())
            .collect();
        bail!(
            "no plugin named {name:?}; cloud plugins loaded: {}",
            loaded.join(", ")
        );
    };
    if plugin.kind() != PluginKind::CloudProvider {
        bail!(
            "plugin {name} is a {} plugin, not a cloud provider",
            plugin.kind().as_str()
        );
    }
    let serving = plugins
        .cloud_for(&group, &kind)
        .map(|p| p.name().to_string());
    if serving.as_deref() != Some(name) {
        let serves = plugin
            .manifest()
            .node_class
            .as_ref()
            .map(|n| format!("{}.{}", n.kind, n.group))
            .unwrap_or_else(|| "no NodeClass".into());
        bail!(
            "plugin {name} serves {serves}, but {} is a {kind}.{group}",
            class_path.display()
        );
    }
    let cloud = Cloud::new(registry.clone(), Arc::new(Clock::real()));
    let types = cloud.instance_types(&class).await.with_context(|| {
        format!(
            "plugin {name}: get-instance-types for {}",
            class_path.display()
        )
    })?;
    // Already with their offering requirements (as every user of `Cloud` gets them).
    Ok(Arc::unwrap_or_clone(types))
}
