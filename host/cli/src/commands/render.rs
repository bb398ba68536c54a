//! `joinery render`: render a NodeClaim's userData with a renderer plugin.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use joinery_api::NodeClaim;
use joinery_controller::bootstrap::{
    ClusterInfo, DEFAULT_RENDERER, NodeClassBootstrap, render_context,
};
use joinery_emulator::physics::{BootCheck, DeclaredBoot};
use joinery_runtime::contract::KeyValue;
use joinery_runtime::manifest::PluginKind;
use joinery_runtime::registry::read_plugin_dir;

use super::Execute;
use crate::plugin_options::PluginOptions;

/// `joinery render …`
#[derive(Debug, clap::Args)]
pub struct RenderArgs {
    /// Renderer: a built-in or loaded plugin's name, or a plugin directory or plugin
    /// ConfigMap YAML written as a path (`./my-renderer`, `./cm.yaml`; a bare name is always a
    /// plugin's name). Defaults to the NodeClass's
    /// `spec.userDataRenderer.name`, else `template`.
    #[arg(long)]
    pub renderer: Option<String>,
    /// NodeClaim YAML (karpenter.sh/v1).
    #[arg(long)]
    pub claim: PathBuf,
    /// NodeClass YAML (any kind: `spec.userData`, `spec.userDataRenderer`, `spec.kubelet` are read).
    #[arg(long)]
    pub class: PathBuf,
    /// Renderer parameter overriding the NodeClass's (`key=value`). Repeatable.
    #[arg(long = "param", value_parser = parse_key_value)]
    pub params: Vec<(String, String)>,
    /// Secret value handed to the renderer (`secret/key=value`). Repeatable.
    #[arg(long = "secret", value_parser = parse_key_value)]
    pub secrets: Vec<(String, String)>,
    /// Cluster name.
    #[arg(long, env = "CLUSTER_NAME", default_value = "joinery")]
    pub cluster_name: String,
    /// API server endpoint.
    #[arg(
        long,
        env = "CLUSTER_ENDPOINT",
        default_value = "https://127.0.0.1:6443"
    )]
    pub cluster_endpoint: String,
    /// Provider ID prefix the node registers with (e.g. `exoscale://`).
    #[arg(long, default_value = "")]
    pub provider_id_prefix: String,
    /// Instead of printing the userData, boot it as a simulated instance's kubelet would (the
    /// parser `joinery simulate` runs) and print what would register: the node's name, labels,
    /// taints and provider ID, or exactly why nothing would (exit code 1).
    #[arg(long)]
    pub boot: bool,
    /// Plugin loading options.
    #[command(flatten)]
    pub options: PluginOptions,
}

/// The instance ID (and hostname) a `--boot` check gives the simulated instance.
const BOOT_INSTANCE_ID: &str = "i-0boot0check0";

impl Execute for RenderArgs {
    async fn execute(self) -> Result<ExitCode> {
        render_command(self).await
    }
}

/// Splits a `key=value` argument at its first `=`.
fn parse_key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("expected key=value, got {s:?}"))
}

fn read_yaml(path: &std::path::Path, what: &str) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read {what} {}", path.display()))?;
    serde_norway::from_str(&text)
        .with_context(|| format!("{what} {} is not valid YAML", path.display()))
}

/// `joinery render`.
async fn render_command(args: RenderArgs) -> Result<ExitCode> {
    let claim_value = read_yaml(&args.claim, "NodeClaim")?;
    let claim: NodeClaim = serde_json::from_value(claim_value).with_context(|| {
        format!(
            "NodeClaim {}: not a karpenter.sh/v1 NodeClaim",
            args.claim.display()
        )
    })?;
    let class_value = read_yaml(&args.class, "NodeClass")?;
    let class_name = class_value
        .pointer("/metadata/name")
        .and_then(|v| v.as_str())
        .unwrap_or("(unnamed)")
        .to_string();
    let mut class = NodeClassBootstrap::from_object(&class_value, &class_name)?;
    class.parameters.extend(args.params.iter().cloned());
    let mut options = args.options.clone();
    let renderer = args
        .renderer
        .clone()
        .or(class.renderer.clone())
        .unwrap_or_else(|| DEFAULT_RENDERER.to_string());
    // Kept alive until the render is done: a ConfigMap is rendered from its unpacked copy.
    let mut _unpacked = None;
    let renderer_name = match renderer_source(&renderer) {
        RendererSource::Directory(path) => {
            let dir = match crate::plugin_options::unpack_configmap(&path)? {
                Some(unpacked) => _unpacked.insert(unpacked).dir.clone(),
                None => path,
            };
            let plugin = read_plugin_dir(&dir)?;
            options.plugin_dirs.push(dir);
            plugin.manifest.name
        }
        RendererSource::Name => renderer.clone(),
    };
    let registry = crate::plugin_options::open_registry(&options, Default::default())?;
    if !renderer.contains('/') && std::path::Path::new(&renderer).exists() {
        if registry.current().get(&renderer).is_some() {
            bail!(
                "--renderer {renderer}: both a loaded plugin and a file or directory here are named {renderer:?}; \
                 write ./{renderer} to render with the directory's plugin (a bare name is a plugin's name)"
            );
        }
        bail!(
            "--renderer {renderer}: no loaded plugin is named {renderer:?}, but a file or directory here is: write \
             ./{renderer} to render with the plugin in it (a bare name is a plugin's name)"
        );
    }
    let plugin = registry
        .current()
        .require(&renderer_name, PluginKind::UserdataRenderer)?;
    let secrets = args
        .secrets
        .iter()
        .map(|(k, v)| KeyValue {
            key: k.clone(),
            value: v.clone(),
        })
        .collect();
    let cluster = ClusterInfo {
        name: args.cluster_name.clone(),
        endpoint: args.cluster_endpoint.clone(),
        provider_id_prefix: args.provider_id_prefix.clone(),
    };
    let context = render_context(&claim, &class, &cluster, secrets);
    let text = match plugin.render(&context).await {
        Ok(text) => text,
        // The renderer's advice is written for `joinery run` (grant the secret); here the
        // secret is handed over on the command line.
        Err(
            e @ joinery_runtime::error::CallError::Render {
                error: joinery_runtime::contract::RenderError::MissingSecret(_),
                ..
            },
        ) => {
            return Err(anyhow::Error::new(e).context(
                "a secret the renderer reads was not given: with `joinery render`, pass it as \
                 --secret NAME/KEY=VALUE (the NodeClass's `secret/key` reference, e.g. \
                 --secret k3s/token=K10…); the grants file is read only by `joinery run`",
            ));
        }
        Err(e) => return Err(e.into()),
    };
    if args.boot {
        let promise = plugin
            .registration(&context)
            .await
            .context("the renderer failed to say what the node will register with")?
            .map(|p| joinery_simulate::declared_boot(&p));
        return Ok(print_boot(
            &text,
            &args.provider_id_prefix,
            promise.as_ref(),
        ));
    }
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}

/// `--boot`: what a simulated instance booted with `user_data` registers as. A format the
/// simulator does not read boots by the renderer's `promise` (WIT 0.2 `registration`); for
/// a format it reads, the promise must agree with what the userData really registers.
fn print_boot(user_data: &str, prefix: &str, promise: Option<&DeclaredBoot>) -> ExitCode {
    let checked =
        joinery_emulator::physics::boot_check_declared(user_data, BOOT_INSTANCE_ID, promise);
    if let (Ok(boot), Some(promise)) = (&checked, promise)
        && boot.format != "declared"
    {
        let differences = promise_differences(boot, promise);
        if !differences.is_empty() {
            println!(
                "the renderer's promise (registration) disagrees with its {} userData:",
                boot.format
            );
            for difference in differences {
                println!("  - {difference}");
            }
            return crate::exit::CHECK_FAILED;
        }
    }
    match checked {
        Err(why) => {
            println!("would not register: {why}");
            crate::exit::CHECK_FAILED
        }
        Ok(boot) => {
            if boot.format == "declared" {
                println!(
                    "boots by the renderer's promise (WIT 0.2 registration; the simulator does not read this userData format), as simulated instance {BOOT_INSTANCE_ID}"
                );
            } else {
                println!(
                    "boots as a {} node (simulated instance {BOOT_INSTANCE_ID}, its hostname and metadata ID)",
                    boot.format
                );
                if promise.is_some() {
                    println!("  promise:     the renderer's registration agrees with it");
                }
            }
            println!("  node name:   {}", boot.node_name);
            match &boot.provider_id {
                Some(id) => println!("  provider ID: {id}"),
                None if prefix.is_empty() => println!(
                    "  provider ID: (none set by the userData; the cloud plugin or the host must set one)"
                ),
                None => println!(
                    "  provider ID: (none set by the userData; expected one starting with {prefix})"
                ),
            }
            let labels: Vec<String> = boot
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            println!("  labels:      {}", labels.join(", "));
            println!("  taints:      {}", boot.taints.join(", "));
            if let Some(max) = boot.max_pods {
                println!("  max pods:    {max}");
            }
            let registration = joinery_core::taints::Taint::unregistered().to_string();
            if boot.taints.contains(&registration) {
                println!(
                    "  then:        Joinery removes {registration} once the node registers and matches its NodeClaim"
                );
            } else {
                println!(
                    "  warning:     the node registers without {registration}: pods may land on it before Joinery has synced its labels and taints"
                );
            }
            if let Some(id) = &boot.provider_id
                && !prefix.is_empty()
                && !id.starts_with(prefix)
            {
                println!(
                    "  warning:     the provider ID does not start with {prefix}: Joinery would not match the node to its NodeClaim"
                );
                return crate::exit::CHECK_FAILED;
            }
            ExitCode::SUCCESS
        }
    }
}

/// Where a renderer's promise differs from what its userData registers, one line each.
fn promise_differences(boot: &BootCheck, promise: &DeclaredBoot) -> Vec<String> {
    let mut differences = Vec::new();
    if let Some(name) = &promise.node_name
        && name != &boot.node_name
    {
        differences.push(format!(
            "node name: promised {name}, the userData registers {}",
            boot.node_name
        ));
    }
    for (key, value) in &promise.labels {
        match boot.labels.get(key) {
            Some(actual) if actual == value => {}
            Some(actual) => differences.push(format!(
                "label {key}: promised {value:?}, the userData registers {actual:?}"
            )),
            None => differences.push(format!(
                "label {key}={value} is promised but not registered"
            )),
        }
    }
    for (key, value) in &boot.labels {
        if !promise.labels.contains_key(key) {
            differences.push(format!(
                "label {key}={value} is registered but not promised"
            ));
        }
    }
    let promised: BTreeSet<&String> = promise.taints.iter().collect();
    let registered: BTreeSet<&String> = boot.taints.iter().collect();
    for taint in promised.difference(&registered) {
        differences.push(format!("taint {taint} is promised but not registered"));
    }
    for taint in registered.difference(&promised) {
        differences.push(format!("taint {taint} is registered but not promised"));
    }
    let promised_id = promise
        .provider_id_prefix
        .as_ref()
        .map(|prefix| format!("{prefix}{BOOT_INSTANCE_ID}"));
    if promised_id != boot.provider_id {
        differences.push(format!(
            "provider ID: promised {}, the userData registers {}",
            promised_id.as_deref().unwrap_or("none"),
            boot.provider_id.as_deref().unwrap_or("none")
        ));
    }
    differences
}

/// Where `--renderer` (or the NodeClass's renderer) points.
enum RendererSource {
    /// A plugin directory or a plugin ConfigMap's YAML, written as a path (`./dir`,
    /// `/abs/dir`, `dir/`, `./cm.yaml`).
    Directory(std::path::PathBuf),
    /// A loaded plugin's name.
    Name,
}

/// A value with a `/` is a path; anything else is a plugin's name, even when a directory of
/// that name exists here (a source folder named like its plugin must not shadow it).
fn renderer_source(value: &str) -> RendererSource {
    if value.contains('/') {
        RendererSource::Directory(value.into())
    } else {
        RendererSource::Name
    }
}

#[cfg(test)]
mod promise_tests {
    use super::*;

    /// A promise is held to what a userData the simulator reads really registers.
    #[test]
    fn a_promise_that_disagrees_with_the_userdata_is_named_line_by_line() {
        let boot = BootCheck {
            format: "k3s",
            node_name: "n-1".into(),
            labels: [("team".to_string(), "a".to_string())].into(),
            taints: vec!["karpenter.sh/unregistered:NoExecute".into()],
            provider_id: Some(format!("simcloud://{BOOT_INSTANCE_ID}")),
            max_pods: None,
        };
        let agreeing = DeclaredBoot {
            node_name: Some("n-1".into()),
            labels: boot.labels.clone(),
            taints: boot.taints.clone(),
            provider_id_prefix: Some("simcloud://".into()),
        };
        assert!(promise_differences(&boot, &agreeing).is_empty());
        let wrong = DeclaredBoot {
            node_name: Some("n-2".into()),
            labels: [("team".to_string(), "b".to_string())].into(),
            taints: vec![],
            provider_id_prefix: None,
        };
        let differences = promise_differences(&boot, &wrong);
        assert_eq!(differences.len(), 4, "{differences:#?}");
        assert!(differences[0].starts_with("node name: promised n-2"));
        assert!(differences[1].contains("label team: promised \"b\""));
        assert!(
            differences[2]
                .contains("karpenter.sh/unregistered:NoExecute is registered but not promised")
        );
        assert!(differences[3].starts_with("provider ID: promised none"));
    }
}
