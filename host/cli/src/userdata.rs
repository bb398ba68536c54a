//! `joinery render`: render a NodeClaim's userData with a renderer plugin.

use std::process::ExitCode;

use anyhow::{Context, Result};
use joinery_api::NodeClaim;
use joinery_controller::bootstrap::{ClusterInfo, DEFAULT_RENDERER, NodeClassBootstrap, render_context};
use joinery_runtime::manifest::PluginKind;
use joinery_runtime::registry::read_plugin_dir;
use joinery_runtime::contract::KeyValue;

use crate::cli::RenderArgs;

fn read_yaml(path: &std::path::Path, what: &str) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {what} {}", path.display()))?;
    serde_yaml::from_str(&text).with_context(|| format!("{what} {} is not valid YAML", path.display()))
}

/// `joinery render`.
pub async fn render_command(args: RenderArgs) -> Result<ExitCode> {
    let claim_value = read_yaml(&args.claim, "NodeClaim")?;
    let claim: NodeClaim = serde_json::from_value(claim_value)
        .with_context(|| format!("NodeClaim {}: not a karpenter.sh/v1 NodeClaim", args.claim.display()))?;
    let class_value = read_yaml(&args.class, "NodeClass")?;
    let class_name = class_value.pointer("/metadata/name").and_then(|v| v.as_str()).unwrap_or("(unnamed)").to_string();
    let mut class = NodeClassBootstrap::from_object(&class_value, &class_name)?;
    class.parameters.extend(args.params.iter().cloned());
    let mut options = args.options.clone();
    let renderer = args.renderer.clone().or(class.renderer.clone()).unwrap_or_else(|| DEFAULT_RENDERER.to_string());
    let renderer_name = if std::path::Path::new(&renderer).is_dir() {
        let dir = read_plugin_dir(std::path::Path::new(&renderer))?;
        options.plugin_dirs.push(renderer.clone().into());
        dir.manifest.name
    } else {
        renderer
    };
    let registry = crate::plugins_cmd::open_registry(&options, Default::default())?;
    let plugin = registry.current().require(&renderer_name, PluginKind::UserdataRenderer)?;
    let secrets = args.secrets.iter().map(|(k, v)| KeyValue { key: k.clone(), value: v.clone() }).collect();
    let cluster = ClusterInfo {
        name: args.cluster_name.clone(),
        endpoint: args.cluster_endpoint.clone(),
        provider_id_prefix: args.provider_id_prefix.clone(),
    };
    let context = render_context(&claim, &class, &cluster, secrets);
    let text = plugin.render(&context).await?;
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}
