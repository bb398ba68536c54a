//! # fragile — a renderer that panics on demand
//!
//! **Test-only; never shipped.** The CLI's live tests load it into `joinery run` to show how
//! a plugin's failure reaches the operator: with the NodeClass parameter `panic` set, `render`
//! panics with the message `fragile renderer gave up: <value>`; without it, it renders a
//! script that runs the kubelet (which the simulated kubelets read).

use joinery_plugin_sdk::renderer::{RenderContext, RenderError, Renderer};

/// The renderer.
pub struct Fragile;

impl Renderer for Fragile {
    fn render(ctx: RenderContext) -> Result<String, RenderError> {
        if let Some(why) = ctx.parameter("panic") {
            panic!("fragile renderer gave up: {why}");
        }
        let taints: Vec<String> = ctx.node_taints().iter().map(|t| t.to_spec()).collect();
        let labels: Vec<String> = ctx
            .sorted_labels()
            .into_iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        Ok(format!(
            "#!/bin/sh\nexec kubelet --hostname-override={} --node-labels={} --register-with-taints={}\n",
            ctx.node_claim,
            labels.join(","),
            taints.join(",")
        ))
    }
}

joinery_plugin_sdk::export_renderer!(Fragile);
