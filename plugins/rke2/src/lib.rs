//! # rke2 — join the node to an RKE2 cluster as an agent
//!
//! Renders a POSIX `sh` script that writes the agent's configuration file
//! `/etc/rancher/rke2/config.yaml`, runs the RKE2 installer with `INSTALL_RKE2_TYPE=agent`
//! and then enables and starts the `rke2-agent` systemd service.
//!
//! ## Parameters (`userDataRenderer.parameters` on the NodeClass)
//!
//! | name | meaning |
//! |---|---|
//! | `serverURL` | the RKE2 supervisor URL (`https://…`). Default: `https://<cluster endpoint host>:9345`, since RKE2 servers accept joining agents on port 9345, not on the API port. |
//! | `token` | the join token, inline (anyone who can read the NodeClass can read it) |
//! | `tokenSecret` | `secret-name/key` of a secret granted to this renderer that holds the token; preferred. Exactly one of `token` and `tokenSecret` must be set. |
//! | `version` | `INSTALL_RKE2_VERSION`, e.g. `v1.31.4+rke2r1`; default: the channel's newest release |
//! | `channel` | `INSTALL_RKE2_CHANNEL`, e.g. `stable`, `latest` or `v1.31`; default: the installer's (`stable`). Not together with `version`. |
//! | `installScriptURL` | where the installer is downloaded from; default `https://get.rke2.io` |
//! | `providerIDCommand` | a shell command printing this instance's ID; when the cloud has a provider ID prefix, the kubelet gets `provider-id=<prefix><id>` |
//!
//! An unknown parameter name is an error, so a misspelt parameter does not go unnoticed.
//!
//! ## Output format (stable: the simulated kubelet reads it)
//!
//! The configuration is written with a quoted here-document, so the shell expands nothing
//! inside it. The lines between `cat > /etc/rancher/rke2/config.yaml <<'JOINERY_RKE2_CONFIG'`
//! and the line `JOINERY_RKE2_CONFIG` are the YAML file, keys in this order:
//!
//! ```yaml
//! server: "https://10.0.0.1:9345"
//! token: "K10…"
//! node-name: "default-abc12"
//! node-label:
//!   - "karpenter.sh/nodepool=default"
//! node-taint:
//!   - "karpenter.sh/unregistered:NoExecute"
//! kubelet-arg:
//!   - "max-pods=110"
//! ```
//!
//! - every value is a YAML double-quoted string on one line (`"` and `\` escaped with a
//!   backslash, control and line-separator characters as `\uXXXX`), so no value can end the
//!   here-document early or change the YAML's structure;
//! - `node-label` is sorted by label key and left out when there is no label;
//! - `node-taint` holds the NodeClaim's taints, then its startup taints, and always
//!   `karpenter.sh/unregistered:NoExecute` (the node must carry it until Joinery registers it);
//! - `kubelet-arg` comes last, so that the provider-ID step can append
//!   `  - "provider-id=<prefix><instance id>"` to the file at boot. It holds the NodeClass
//!   `kubelet` settings as kubelet flags without the dashes (see
//!   [`joinery_plugin_sdk::bootstrap::kubelet_flags`]).
//!
//! The provider-ID step (only with `providerIDCommand` and a non-empty prefix) runs the
//! command, keeps its output without whitespace in `JOINERY_INSTANCE_ID`, stops the script
//! if the result is empty or has characters outside `A-Z a-z 0-9 . _ : / -`, and appends
//! the list item with `printf … >> /etc/rancher/rke2/config.yaml`. Everything used on a
//! shell command line (installer URL, version, channel, the command) is single-quoted,
//! an embedded `'` written as `'\''`.

use joinery_plugin_sdk::bootstrap::{
    self, Endpoint, TokenErrors, kubelet_args, shell_quote, yaml_escape, yaml_quote,
};
use joinery_plugin_sdk::renderer::{RenderContext, RenderError, Renderer};
// The names the unit tests know the quoting helpers by.
#[cfg(test)]
use joinery_plugin_sdk::bootstrap::{shell_quote as sh_quote, yaml_quote as yaml_str};

/// The directory RKE2 reads its configuration from.
pub const CONFIG_DIR: &str = "/etc/rancher/rke2";
/// The agent configuration file.
pub const CONFIG_PATH: &str = "/etc/rancher/rke2/config.yaml";
/// The here-document delimiter around the configuration.
pub const CONFIG_MARKER: &str = "JOINERY_RKE2_CONFIG";
/// The installer used when `installScriptURL` is not set.
pub const DEFAULT_INSTALL_SCRIPT_URL: &str = "https://get.rke2.io";
/// The port RKE2 servers accept joining agents on (the supervisor port).
pub const SUPERVISOR_PORT: u16 = 9345;
/// The systemd unit the installer creates for an agent.
pub const AGENT_SERVICE: &str = "rke2-agent.service";

/// Every parameter this renderer accepts.
pub const PARAMETERS: &[&str] = &[
    "serverURL",
    "token",
    "tokenSecret",
    "version",
    "channel",
    "installScriptURL",
    bootstrap::PROVIDER_ID_COMMAND,
];

/// What the join token errors say (see [`bootstrap::join_token`]).
const TOKEN_ERRORS: TokenErrors = TokenErrors::new(
    "the rke2 renderer needs the cluster's join token: set the parameter tokenSecret to \
     `secret-name/key` of a secret granted to this renderer (or, visible to every reader \
     of the NodeClass, the parameter token)",
    "the RKE2 join token `{reference}` (parameter tokenSecret) did not reach the renderer: grant the \
     secret `{name}` to the rke2 renderer in the grants file and make sure it has a non-empty key `{key}`",
);

/// The RKE2 agent renderer.
pub struct Rke2;

impl Renderer for Rke2 {
    fn render(ctx: RenderContext) -> Result<String, RenderError> {
        render_script(&ctx)
    }
}

joinery_plugin_sdk::export_renderer!(Rke2);

fn invalid(message: impl Into<String>) -> RenderError {
    RenderError::InvalidParameter(message.into())
}

/// The supervisor URL: the `serverURL` parameter, else `https://<endpoint host>:9345`.
pub fn server_url(ctx: &RenderContext) -> Result<String, RenderError> {
    if let Some(url) = ctx.non_empty_parameter("serverURL") {
        let well_formed = url
            .strip_prefix("https://")
            .is_some_and(|rest| !rest.is_empty())
            && !url.contains(char::is_whitespace);
        if !well_formed {
            return Err(invalid(format!(
                "parameter serverURL `{url}` is not an https URL like https://rke2.example.com:{SUPERVISOR_PORT}"
            )));
        }
        return Ok(url.to_string());
    }
    if ctx.cluster_endpoint.trim().is_empty() {
        return Err(invalid(format!(
            "the cluster endpoint is unknown: set the parameter serverURL (e.g. https://rke2.example.com:{SUPERVISOR_PORT})"
        )));
    }
    let Some(Endpoint { host, .. }) = Endpoint::parse(&ctx.cluster_endpoint) else {
        return Err(invalid(format!(
            "no host can be read from the cluster endpoint `{}`: set the parameter serverURL",
            ctx.cluster_endpoint
        )));
    };
    Ok(format!("https://{host}:{SUPERVISOR_PORT}"))
}

/// A version or channel parameter: only `A-Z a-z 0-9 . _ + -` (so `v1.31.4+rke2r1`,
/// `stable` or `v1.31`).
fn release_parameter<'a>(
    ctx: &'a RenderContext,
    name: &str,
) -> Result<Option<&'a str>, RenderError> {
    let Some(value) = ctx.non_empty_parameter(name) else {
        return Ok(None);
    };
    if value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-'))
    {
        Ok(Some(value))
    } else {
        Err(invalid(format!(
            "parameter {name} `{value}` may only contain letters, digits and . _ + - (e.g. v1.31.4+rke2r1, stable)"
        )))
    }
}

/// Renders the whole script.
pub fn render_script(ctx: &RenderContext) -> Result<String, RenderError> {
    bootstrap::check_parameter_names(ctx, "rke2", PARAMETERS)?;
    let server = server_url(ctx)?;
    let token = bootstrap::join_token(ctx, "token", "tokenSecret", &TOKEN_ERRORS)?.value;
    let kubelet = kubelet_args(ctx)?;
    let version = release_parameter(ctx, "version")?;
    let channel = release_parameter(ctx, "channel")?;
    if version.is_some() && channel.is_some() {
        return Err(invalid(
            "set either the parameter version or channel, not both (a version pins the release, a channel follows one)",
        ));
    }
    let installer = ctx
        .non_empty_parameter("installScriptURL")
        .unwrap_or(DEFAULT_INSTALL_SCRIPT_URL);
    if !(installer.starts_with("https://") || installer.starts_with("http://"))
        || installer.contains(char::is_whitespace)
    {
        return Err(invalid(format!(
            "parameter installScriptURL `{installer}` is not an http(s) URL"
        )));
    }
    let provider_id_command = bootstrap::provider_id_command(ctx, "rke2");

    let mut out = String::with_capacity(2048);
    let mut line = |text: &str| {
        out.push_str(text);
        out.push('\n');
    };
    line(&bootstrap::script_header(ctx, "to RKE2 as an agent"));
    line("umask 077");
    line(&format!("mkdir -p {CONFIG_DIR}"));

    // The configuration, in a quoted here-document: the shell expands nothing in it.
    line(&format!("cat > {CONFIG_PATH} <<'{CONFIG_MARKER}'"));
    line(&format!("server: {}", yaml_quote(&server)));
    line(&format!("token: {}", yaml_quote(token)));
    line(&format!("node-name: {}", yaml_quote(&ctx.node_claim)));
    let labels = ctx.sorted_labels();
    if !labels.is_empty() {
        line("node-label:");
        for (key, value) in labels {
            line(&format!("  - {}", yaml_quote(&format!("{key}={value}"))));
        }
    }
    line("node-taint:");
    for taint in ctx.node_taints() {
        line(&format!("  - {}", yaml_quote(&taint.to_spec())));
    }
    // The last key: the provider-ID step appends an item to it.
    if !kubelet.is_empty() || provider_id_command.is_some() {
        line("kubelet-arg:");
        for arg in &kubelet {
            line(&format!("  - {}", yaml_quote(arg)));
        }
    }
    line(CONFIG_MARKER);

    if let Some(command) = provider_id_command {
        line(
            "# Provider ID: the cloud's prefix followed by the instance ID that providerIDCommand prints.",
        );
        line(&bootstrap::read_instance_id(command));
        // The prefix goes into the YAML string, so it is escaped for YAML first, then quoted
        // for the shell; the instance ID was checked above.
        line(&format!(
            "printf '  - \"provider-id=%s%s\"\\n' {} \"$JOINERY_INSTANCE_ID\" >> {CONFIG_PATH}",
            shell_quote(&yaml_escape(&ctx.provider_id_prefix))
        ));
    }
    line(&format!("chmod 600 {CONFIG_PATH}"));

    line(&bootstrap::fetch_installer(installer));
    let mut install = String::from("INSTALL_RKE2_TYPE=agent ");
    if let Some(version) = version {
        install.push_str(&format!("INSTALL_RKE2_VERSION={} ", shell_quote(version)));
    }
    if let Some(channel) = channel {
        install.push_str(&format!("INSTALL_RKE2_CHANNEL={} ", shell_quote(channel)));
    }
    install.push_str("sh \"$JOINERY_INSTALLER\"");
    line(&install);
    line("rm -f \"$JOINERY_INSTALLER\"");
    line(&format!("systemctl enable --now {AGENT_SERVICE}"));
    Ok(out)
}

#[cfg(test)]
mod tests;
