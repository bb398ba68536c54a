//! # talos — an example renderer with a format of its own
//!
//! Renders a [Talos Linux](https://www.talos.dev) worker machine configuration (YAML, no
//! shell script): the machine joins the cluster with the machine token, names itself after
//! the NodeClaim and hands the kubelet the node's labels and taints. The simulator reads
//! k3s, RKE2 and kubeadm scripts and kubelet command lines, not Talos configurations, so
//! this renderer also implements WIT 0.2's `registration`: it says what the node registers
//! with, `joinery simulate` boots the node by that promise, and `joinery render --boot`
//! prints it. The unit tests below check the promise against the rendered configuration.
//!
//! ## Parameters
//!
//! | name | meaning |
//! |---|---|
//! | `token` | the Talos machine token, inline |
//! | `tokenSecret` | `secret-name/key` of a secret granted to this renderer holding it; preferred. Exactly one of the two. |
//! | `caCertificate` | the cluster CA certificate, base64 (`machine.ca.crt`); optional |
//!
//! ## Output
//!
//! ```yaml
//! version: v1alpha1
//! machine:
//!   type: worker
//!   token: "…"
//!   network:
//!     hostname: "default-abc12"
//!   kubelet:
//!     extraArgs:
//!       node-labels: "karpenter.sh/nodepool=default"
//!       register-with-taints: "karpenter.sh/unregistered:NoExecute"
//!       max-pods: "110"
//! cluster:
//!   controlPlane:
//!     endpoint: "https://10.0.0.1:6443"
//! ```
//!
//! The provider ID: on a cloud Talos supports, its platform integration registers the node
//! with the instance's ID from the metadata service; the promise says so with the cloud's
//! provider-ID prefix.

use joinery_plugin_sdk::bootstrap::{self, TokenErrors, yaml_quote};
use joinery_plugin_sdk::renderer::{
    KeyValue, NodeRegistration, RenderContext, RenderError, Renderer,
};

/// Every parameter this renderer accepts.
pub const PARAMETERS: &[&str] = &["token", "tokenSecret", "caCertificate"];

const TOKEN_ERRORS: TokenErrors = TokenErrors {
    both: "set only one of the parameters token and tokenSecret",
    neither: "the talos renderer needs the machine token: set the parameter tokenSecret to `secret-name/key` \
              (a secret granted to this renderer) or, less safely, token",
    malformed: "parameter tokenSecret `{reference}` must be `secret-name/key`",
    not_granted: "the Talos machine token secret `{reference}` (parameter tokenSecret) was not supplied: grant the \
                  secret `{name}` to this renderer in the grants file and check that it has the key `{key}`",
};

/// The Talos worker renderer.
pub struct Talos;

impl Renderer for Talos {
    fn render(ctx: RenderContext) -> Result<String, RenderError> {
        render_config(&ctx)
    }

    fn registration(ctx: RenderContext) -> Result<Option<NodeRegistration>, RenderError> {
        Ok(Some(promise(&ctx)))
    }
}

joinery_plugin_sdk::export_renderer!(Talos);

/// The labels the node registers with, sorted by key, as `key=value`.
fn label_args(ctx: &RenderContext) -> Vec<String> {
    ctx.sorted_labels()
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect()
}

/// Renders the machine configuration.
pub fn render_config(ctx: &RenderContext) -> Result<String, RenderError> {
    bootstrap::check_parameter_names(ctx, "talos", PARAMETERS)?;
    let token = bootstrap::join_token(ctx, "token", "tokenSecret", &TOKEN_ERRORS)?.value;
    let endpoint = ctx.cluster_endpoint.trim();
    if endpoint.is_empty() {
        return Err(RenderError::InvalidParameter(
            "no cluster endpoint is known: Talos needs the control plane's URL".into(),
        ));
    }
    let taints: Vec<String> = ctx.node_taints().iter().map(|t| t.to_spec()).collect();
    let mut s = String::with_capacity(1024);
    s.push_str(&format!(
        "# Talos worker configuration rendered by Joinery for NodeClaim {} (NodePool {})\n",
        bootstrap::comment_safe(&ctx.node_claim),
        bootstrap::comment_safe(&ctx.node_pool)
    ));
    s.push_str("version: v1alpha1\nmachine:\n  type: worker\n");
    s.push_str(&format!("  token: {}\n", yaml_quote(token)));
    if let Some(ca) = ctx.non_empty_parameter("caCertificate") {
        s.push_str(&format!("  ca:\n    crt: {}\n", yaml_quote(ca)));
    }
    s.push_str(&format!(
        "  network:\n    hostname: {}\n",
        yaml_quote(&ctx.node_claim)
    ));
    s.push_str("  kubelet:\n    extraArgs:\n");
    s.push_str(&format!(
        "      node-labels: {}\n",
        yaml_quote(&label_args(ctx).join(","))
    ));
    s.push_str(&format!(
        "      register-with-taints: {}\n",
        yaml_quote(&taints.join(","))
    ));
    for (flag, value) in bootstrap::kubelet_flags(ctx)? {
        s.push_str(&format!("      {flag}: {}\n", yaml_quote(&value)));
    }
    s.push_str(&format!(
        "cluster:\n  controlPlane:\n    endpoint: {}\n",
        yaml_quote(endpoint)
    ));
    Ok(s)
}

/// What a node booted from [`render_config`]'s output registers with.
pub fn promise(ctx: &RenderContext) -> NodeRegistration {
    NodeRegistration {
        node_name: Some(ctx.node_claim.clone()),
        labels: ctx
            .sorted_labels()
            .into_iter()
            .map(|(k, v)| KeyValue {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        taints: ctx.node_taints(),
        provider_id_prefix: (!ctx.provider_id_prefix.is_empty())
            .then(|| ctx.provider_id_prefix.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use joinery_plugin_sdk::renderer::Taint;

    fn context() -> RenderContext {
        let mut ctx = RenderContext::for_claim("default-abc12");
        ctx.node_pool = "default".into();
        ctx.cluster_endpoint = "https://10.0.0.1:6443".into();
        ctx.provider_id_prefix = "simcloud://".into();
        ctx.labels = vec![
            KeyValue {
                key: "team".into(),
                value: "a".into(),
            },
            KeyValue {
                key: "karpenter.sh/nodepool".into(),
                value: "default".into(),
            },
        ];
        ctx.taints = vec![Taint::new("gpu", Some("true"), "NoSchedule")];
        ctx.parameters = vec![KeyValue {
            key: "token".into(),
            value: "abc.def".into(),
        }];
        ctx
    }

    /// The value of `key:` under `extraArgs` in the rendered configuration.
    fn extra_arg(config: &str, key: &str) -> String {
        let prefix = format!("      {key}: ");
        let line = config
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {key} in\n{config}"));
        line.trim_matches('"').to_string()
    }

    /// The promise is what the configuration really tells the kubelet.
    #[test]
    fn the_promise_matches_the_configuration() {
        let ctx = context();
        let config = render_config(&ctx).unwrap();
        let promised = promise(&ctx);
        let labels: Vec<String> = promised
            .labels
            .iter()
            .map(|kv| format!("{}={}", kv.key, kv.value))
            .collect();
        assert_eq!(extra_arg(&config, "node-labels"), labels.join(","));
        let taints: Vec<String> = promised.taints.iter().map(|t| t.to_spec()).collect();
        assert_eq!(extra_arg(&config, "register-with-taints"), taints.join(","));
        assert!(taints.contains(&"karpenter.sh/unregistered:NoExecute".to_string()));
        assert!(
            config.contains("    hostname: \"default-abc12\"\n"),
            "{config}"
        );
        assert_eq!(promised.node_name.as_deref(), Some("default-abc12"));
        assert_eq!(promised.provider_id_prefix.as_deref(), Some("simcloud://"));
    }

    #[test]
    fn a_missing_token_is_a_parameter_error() {
        let mut ctx = context();
        ctx.parameters.clear();
        assert!(matches!(
            render_config(&ctx),
            Err(RenderError::InvalidParameter(m)) if m.contains("machine token")
        ));
    }
}
