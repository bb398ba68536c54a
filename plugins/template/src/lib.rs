//! # template — the verbatim userData renderer
//!
//! Hands the NodeClass `userData` to the instance unchanged, except for placeholders of the
//! form `{{joinery.NAME}}` (spaces or tabs allowed inside the braces: `{{ joinery.NAME }}`):
//!
//! | placeholder | value |
//! |---|---|
//! | `nodeClaim` | NodeClaim name |
//! | `nodePool` | NodePool name |
//! | `nodeLabels` | `k=v,k=v`, sorted by key |
//! | `nodeTaints` | `key[=value]:Effect,…`: taints, then startup taints; always includes `karpenter.sh/unregistered:NoExecute` |
//! | `providerIdPrefix` | provider ID prefix, e.g. `exoscale://` (may be empty) |
//! | `zone` | zone, empty when not known at render time |
//! | `instanceType` | instance type, empty when not known |
//! | `capacityType` | capacity type, empty when not known |
//! | `clusterName` | cluster name |
//! | `clusterEndpoint` | API server endpoint |
//!
//! Nothing else is touched: shell `$VARS`, Go templates (`{{.Names}}`), CRLF line ends and
//! trailing whitespace come out byte for byte. An unknown `{{joinery.x}}` fails with
//! `invalid-template`; a NodeClass without `userData` fails with `invalid-parameter`.

use joinery_plugin_sdk::renderer::{RenderContext, RenderError, Renderer};

/// The placeholder names this renderer knows, in documentation order.
pub const PLACEHOLDERS: &[&str] = &[
    "nodeClaim",
    "nodePool",
    "nodeLabels",
    "nodeTaints",
    "providerIdPrefix",
    "zone",
    "instanceType",
    "capacityType",
    "clusterName",
    "clusterEndpoint",
];

const PREFIX: &str = "joinery.";

/// The verbatim renderer.
pub struct Template;

impl Renderer for Template {
    fn render(ctx: RenderContext) -> Result<String, RenderError> {
        let Some(user_data) = ctx.user_data.as_deref() else {
            return Err(RenderError::InvalidParameter(
                "the template renderer needs userData, but this NodeClass has none: set `userData` on the \
                 NodeClass (it is passed to the instance verbatim, with {{joinery.*}} placeholders filled in)"
                    .to_string(),
            ));
        };
        render_template(user_data, &ctx)
    }
}

joinery_plugin_sdk::export_renderer!(Template);

/// The value of placeholder `name`, or `None` for an unknown name.
fn value(name: &str, ctx: &RenderContext) -> Option<String> {
    let opt = |v: &Option<String>| v.clone().unwrap_or_default();
    Some(match name {
        "nodeClaim" => ctx.node_claim.clone(),
        "nodePool" => ctx.node_pool.clone(),
        "nodeLabels" => ctx
            .sorted_labels()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(","),
        "nodeTaints" => ctx
            .node_taints()
            .iter()
            .map(|t| t.to_spec())
            .collect::<Vec<_>>()
            .join(","),
        "providerIdPrefix" => ctx.provider_id_prefix.clone(),
        "zone" => opt(&ctx.zone),
        "instanceType" => opt(&ctx.instance_type),
        "capacityType" => opt(&ctx.capacity_type),
        "clusterName" => ctx.cluster_name.clone(),
        "clusterEndpoint" => ctx.cluster_endpoint.clone(),
        _ => return None,
    })
}

/// 1-based line number of byte offset `at`.
fn line_of(text: &str, at: usize) -> usize {
    text[..at].bytes().filter(|b| *b == b'\n').count() + 1
}

/// Replaces every `{{ joinery.NAME }}` in `template`; copies everything else unchanged.
pub fn render_template(template: &str, ctx: &RenderContext) -> Result<String, RenderError> {
    let mut out = String::with_capacity(template.len() + 256);
    let mut rest = template;
    let mut offset = 0; // byte offset of `rest` in `template`, for error positions
    while let Some(open) = rest.find("{{") {
        let after_open = &rest[open + 2..];
        let inner_start = after_open.trim_start_matches([' ', '\t']);
        if !inner_start.starts_with(PREFIX) {
            // Not ours (e.g. a Go template): copy one brace and look again from the next one,
            // so `{{{joinery.x}}}` still finds the placeholder inside.
            out.push_str(&rest[..open + 1]);
            offset += open + 1;
            rest = &rest[open + 1..];
            continue;
        }
        let at = offset + open;
        let Some(close) = after_open.find("}}") else {
            return Err(RenderError::InvalidTemplate(format!(
                "line {}: placeholder `{{{{{}` is not closed with `}}}}`",
                line_of(template, at),
                after_open.lines().next().unwrap_or("")
            )));
        };
        let inner = after_open[..close].trim_matches([' ', '\t']);
        let name = &inner[PREFIX.len()..];
        let Some(v) = value(name, ctx) else {
            return Err(RenderError::InvalidTemplate(format!(
                "line {}: unknown placeholder `{{{{{inner}}}}}`; valid names: {}",
                line_of(template, at),
                PLACEHOLDERS
                    .iter()
                    .map(|p| format!("{PREFIX}{p}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        };
        out.push_str(&rest[..open]);
        out.push_str(&v);
        let consumed = open + 2 + close + 2;
        offset += consumed;
        rest = &rest[consumed..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use joinery_plugin_sdk::renderer::Taint;
    use joinery_plugin_sdk::testing;

    fn ctx(user_data: Option<&str>) -> RenderContext {
        testing::render_context()
            .labels(&[
                ("zeta", "1"),
                ("karpenter.sh/nodepool", "default"),
                ("alpha", "x"),
            ])
            .taints(vec![
                Taint::new("dedicated", Some("gpu"), "NoSchedule"),
                Taint::registration(),
            ])
            .startup_taints(vec![Taint::new(
                "node.cilium.io/agent-not-ready",
                None,
                "NoExecute",
            )])
            .zone("ch-gva-2")
            .instance_type("standard.medium")
            .cluster_name("prod")
            .provider_id_prefix("exoscale://")
            .user_data(user_data)
            .build()
    }

    fn render(ud: &str) -> Result<String, RenderError> {
        Template::render(ctx(Some(ud)))
    }

    #[test]
    fn replaces_every_placeholder() {
        let ud = "claim={{joinery.nodeClaim}}\npool={{ joinery.nodePool }}\nlabels={{joinery.nodeLabels}}\n\
                  taints={{joinery.nodeTaints}}\nprefix={{\tjoinery.providerIdPrefix\t}}\nzone={{joinery.zone}}\n\
                  type={{joinery.instanceType}}\ncap=[{{joinery.capacityType}}]\ncluster={{joinery.clusterName}}\n\
                  endpoint={{joinery.clusterEndpoint}}\n";
        assert_eq!(
            render(ud).unwrap(),
            "claim=default-abc12\npool=default\nlabels=alpha=x,karpenter.sh/nodepool=default,zeta=1\n\
             taints=dedicated=gpu:NoSchedule,karpenter.sh/unregistered:NoExecute,node.cilium.io/agent-not-ready:NoExecute\n\
             prefix=exoscale://\nzone=ch-gva-2\ntype=standard.medium\ncap=[]\ncluster=prod\n\
             endpoint=https://10.0.0.1:6443\n"
        );
    }

    #[test]
    fn everything_else_is_byte_identical() {
        let ud = "#!/bin/bash\r\nexport NAME=$HOSTNAME ${FOO:-bar}  \r\n\
                  docker ps --format '{{.Names}}' {{ .Status }}\t\r\n\
                  echo '{{' \"}}\" {{joinery_x}} {{ joinery }} {joinery.zone}\n\n   \n";
        assert_eq!(render(ud).unwrap(), ud);
        // Non-UTF-8-looking but valid Unicode survives as well.
        let ud = "grüße — {{joinery.zone}} ✓\u{0}\u{7f}";
        assert_eq!(render(ud).unwrap(), "grüße — ch-gva-2 ✓\u{0}\u{7f}");
    }

    #[test]
    fn placeholders_next_to_other_braces() {
        assert_eq!(render("{{{joinery.zone}}}").unwrap(), "{ch-gva-2}");
        assert_eq!(render("{{.X}}{{joinery.zone}}").unwrap(), "{{.X}}ch-gva-2");
        assert_eq!(
            render("a{{joinery.zone}}{{joinery.zone}}b").unwrap(),
            "ach-gva-2ch-gva-2b"
        );
    }

    #[test]
    fn registration_taint_added_when_the_host_forgot_it() {
        let mut c = ctx(Some("{{joinery.nodeTaints}}"));
        c.taints.clear();
        c.startup_taints.clear();
        assert_eq!(
            Template::render(c).unwrap(),
            "karpenter.sh/unregistered:NoExecute"
        );
    }

    #[test]
    fn unknown_placeholder_is_an_error_listing_valid_names() {
        let err = render("ok\n{{ joinery.nodename }}").unwrap_err();
        let RenderError::InvalidTemplate(msg) = err else {
            panic!("wrong error {err:?}")
        };
        assert!(msg.contains("line 2"), "{msg}");
        assert!(msg.contains("joinery.nodename"), "{msg}");
        for p in PLACEHOLDERS {
            assert!(msg.contains(&format!("joinery.{p}")), "{msg}");
        }
    }

    #[test]
    fn unclosed_placeholder_is_an_error() {
        assert!(matches!(
            render("{{joinery.zone"),
            Err(RenderError::InvalidTemplate(_))
        ));
    }

    #[test]
    fn unset_optional_values_render_empty() {
        let mut c = ctx(Some(
            "[{{joinery.zone}}][{{joinery.instanceType}}][{{joinery.capacityType}}]",
        ));
        c.zone = None;
        c.instance_type = None;
        assert_eq!(Template::render(c).unwrap(), "[][][]");
    }

    #[test]
    fn missing_user_data_is_an_invalid_parameter() {
        let err = Template::render(ctx(None)).unwrap_err();
        let RenderError::InvalidParameter(msg) = err else {
            panic!("wrong error {err:?}")
        };
        assert!(msg.contains("userData"), "{msg}");
        assert_eq!(Template::render(ctx(Some(""))).unwrap(), "");
    }
}
