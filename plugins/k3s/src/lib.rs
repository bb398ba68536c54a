//! # k3s — join the node to a k3s cluster as an agent
//!
//! Renders a POSIX `sh` script that writes the agent's configuration to
//! `/etc/rancher/k3s/config.yaml` and then runs the k3s installer in agent mode.
//!
//! ## Parameters (`userDataRenderer.parameters` on the NodeClass)
//!
//! | name | meaning |
//! |---|---|
//! | `serverURL` | k3s server (supervisor) URL. Default: the cluster endpoint's scheme and host, with its port if it has one, else port `6443` (k3s serves its supervisor and API on 6443). |
//! | `token` | the join token, inline (visible to anyone who can read the NodeClass) |
//! | `tokenSecret` | `secret-name/key` of a secret granted to this renderer holding the token; preferred. Exactly one of `token`/`tokenSecret`. |
//! | `version` | `INSTALL_K3S_VERSION`, e.g. `v1.31.4+k3s1`; default: the installer's choice |
//! | `installScriptURL` | where to fetch the installer; default `https://get.k3s.io` |
//! | `providerIDCommand` | shell command printing this instance's ID; with a non-empty provider ID prefix it adds the kubelet arg `provider-id=<prefix><id>` |
//! | `extraArgs` | extra `k3s agent` arguments, separated by spaces (no quoting) |
//!
//! Unknown parameter names are rejected, so a typo does not go unnoticed.
//!
//! ## Output format (stable; a simulated kubelet may parse it)
//!
//! The configuration is written by a quoted here-document, so the shell expands nothing in
//! it; the lines between `cat > /etc/rancher/k3s/config.yaml <<'JOINERY_K3S_CONFIG'` and the
//! line `JOINERY_K3S_CONFIG` are exactly the YAML file:
//!
//! ```yaml
//! server: "https://10.0.0.1:6443"
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
//! Every value is a YAML double-quoted string (`\` and `"` escaped, control characters as
//! `\uXXXX`), so no value can end the here-document or break the YAML. `node-label` is
//! sorted by key; `node-taint` lists the taints, then the startup taints, and always
//! `karpenter.sh/unregistered:NoExecute`; `kubelet-arg` is the last key, so the
//! provider-ID step can append `  - "provider-id=<prefix><id>"` to it at boot. It holds the
//! NodeClass `kubelet` settings as `name=value` kubelet flags (the mapping is
//! [`joinery_plugin_sdk::bootstrap::kubelet_flags`]'s). Values used in shell commands
//! (installer URL, version, provider-ID command, extra arguments) are single-quoted, with
//! embedded `'` written as `'\''`.

use joinery_plugin_sdk::bootstrap::{
    self, Endpoint, TokenErrors, kubelet_args, shell_quote, yaml_escape, yaml_quote,
};
use joinery_plugin_sdk::renderer::{RenderContext, RenderError, Renderer};

/// Where k3s reads its configuration.
pub const CONFIG_PATH: &str = "/etc/rancher/k3s/config.yaml";
/// The here-document delimiter around the configuration.
pub const CONFIG_MARKER: &str = "JOINERY_K3S_CONFIG";
/// The default installer URL.
pub const DEFAULT_INSTALL_SCRIPT_URL: &str = "https://get.k3s.io";
/// The default k3s server port.
pub const DEFAULT_SERVER_PORT: u16 = 6443;

/// Every parameter this renderer accepts.
pub const PARAMETERS: &[&str] = &[
    "serverURL",
    "token",
    "tokenSecret",
    "version",
    "installScriptURL",
    bootstrap::PROVIDER_ID_COMMAND,
    "extraArgs",
];

/// What the join token errors say (see [`bootstrap::join_token`]).
const TOKEN_ERRORS: TokenErrors = TokenErrors {
    both: "set only one of the parameters token and tokenSecret",
    neither: "the k3s renderer needs a join token: set the parameter tokenSecret to `secret-name/key` \
              (a secret granted to this renderer) or, less safely, token",
    malformed: "parameter tokenSecret `{reference}` must be `secret-name/key`",
    not_granted: "the k3s join token secret `{reference}` (parameter tokenSecret) was not supplied: grant the \
                  secret `{name}` to this renderer in the grants file and check that it has the key `{key}`",
};

/// The k3s agent renderer.
pub struct K3s;

impl Renderer for K3s {
    fn render(ctx: RenderContext) -> Result<String, RenderError> {
        render_script(&ctx)
    }
}

joinery_plugin_sdk::export_renderer!(K3s);

fn invalid(msg: impl Into<String>) -> RenderError {
    RenderError::InvalidParameter(msg.into())
}

/// The k3s server URL: the `serverURL` parameter, or derived from the cluster endpoint.
pub fn server_url(ctx: &RenderContext) -> Result<String, RenderError> {
    if let Some(url) = ctx.non_empty_parameter("serverURL") {
        if url.chars().any(char::is_whitespace) || !url.contains("://") {
            return Err(invalid(format!(
                "parameter serverURL `{url}` is not a URL like https://k3s.example.com:6443"
            )));
        }
        return Ok(url.to_string());
    }
    let endpoint = ctx.cluster_endpoint.trim();
    if endpoint.is_empty() {
        return Err(invalid(
            "no cluster endpoint is known: set the parameter serverURL (e.g. https://k3s.example.com:6443)",
        ));
    }
    let Some(Endpoint { scheme, host, port }) = Endpoint::parse(endpoint) else {
        return Err(invalid(format!(
            "cannot derive the k3s server URL from the cluster endpoint `{endpoint}`: set the parameter serverURL"
        )));
    };
    Ok(format!(
        "{}://{host}:{}",
        scheme.unwrap_or("https"),
        port.unwrap_or(DEFAULT_SERVER_PORT)
    ))
}

/// Renders the whole join script.
pub fn render_script(ctx: &RenderContext) -> Result<String, RenderError> {
    bootstrap::check_parameter_names(ctx, "k3s", PARAMETERS)?;
    let server = server_url(ctx)?;
    let token = bootstrap::join_token(ctx, "token", "tokenSecret", &TOKEN_ERRORS)?.value;
    let kubelet = kubelet_args(ctx)?;
    let install_url = ctx
        .non_empty_parameter("installScriptURL")
        .unwrap_or(DEFAULT_INSTALL_SCRIPT_URL);
    let version = ctx.non_empty_parameter("version");
    let extra: Vec<&str> = ctx
        .parameter("extraArgs")
        .map(|a| a.split_whitespace().collect())
        .unwrap_or_default();
    let provider_id_cmd = bootstrap::provider_id_command(ctx, "k3s");

    let mut s = String::with_capacity(2048);
    s.push_str(&bootstrap::script_header(ctx, "to k3s as an agent"));
    s.push_str("\numask 077\nmkdir -p /etc/rancher/k3s\n");

    // The agent configuration: a quoted here-document, so nothing in it is expanded.
    s.push_str(&format!("cat > {CONFIG_PATH} <<'{CONFIG_MARKER}'\n"));
    s.push_str(&format!("server: {}\n", yaml_quote(&server)));
    s.push_str(&format!("token: {}\n", yaml_quote(token)));
    s.push_str(&format!("node-name: {}\n", yaml_quote(&ctx.node_claim)));
    let labels = ctx.sorted_labels();
    if !labels.is_empty() {
        s.push_str("node-label:\n");
        for (k, v) in labels {
            s.push_str(&format!("  - {}\n", yaml_quote(&format!("{k}={v}"))));
        }
    }
    s.push_str("node-taint:\n");
    for t in ctx.node_taints() {
        s.push_str(&format!("  - {}\n", yaml_quote(&t.to_spec())));
    }
    // Last key: the provider-ID step below appends to this list.
    if !kubelet.is_empty() || provider_id_cmd.is_some() {
        s.push_str("kubelet-arg:\n");
        for a in &kubelet {
            s.push_str(&format!("  - {}\n", yaml_quote(a)));
        }
    }
    s.push_str(CONFIG_MARKER);
    s.push('\n');

    if let Some(cmd) = provider_id_cmd {
        s.push_str("# The kubelet registers with provider ID <prefix><instance id>.\n");
        s.push_str(&bootstrap::read_instance_id(cmd));
        s.push('\n');
        // The prefix is escaped for YAML now, then quoted for the shell; the ID is checked above.
        s.push_str(&format!(
            "printf '  - \"provider-id=%s%s\"\\n' {} \"$JOINERY_INSTANCE_ID\" >> {CONFIG_PATH}\n",
            shell_quote(&yaml_escape(&ctx.provider_id_prefix))
        ));
    }

    s.push_str("chmod 600 ");
    s.push_str(CONFIG_PATH);
    s.push('\n');
    s.push_str(&bootstrap::fetch_installer(install_url));
    s.push('\n');
    let mut run = String::new();
    if let Some(v) = version {
        run.push_str(&format!("INSTALL_K3S_VERSION={} ", shell_quote(v)));
    }
    run.push_str("sh \"$JOINERY_INSTALLER\" agent");
    for a in extra {
        run.push(' ');
        run.push_str(&shell_quote(a));
    }
    s.push_str(&run);
    s.push('\n');
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use joinery_plugin_sdk::renderer::{KeyValue, Taint};
    use joinery_plugin_sdk::testing::{self, FakeHost, set_parameter as param};

    fn ctx() -> RenderContext {
        testing::render_context()
            .join_token_secret("k3s-join/token", "K10secret::server:abc\n")
            .build()
    }

    #[test]
    fn renders_the_exact_script() {
        let mut c = ctx();
        c.kubelet = r#"{"maxPods": 110}"#.into();
        let script = render_script(&c).unwrap();
        assert_eq!(
            script,
            r#"#!/bin/sh
# Joinery: join NodeClaim default-abc12 (NodePool default) to k3s as an agent. Generated, do not edit.
set -eu
umask 077
mkdir -p /etc/rancher/k3s
cat > /etc/rancher/k3s/config.yaml <<'JOINERY_K3S_CONFIG'
server: "https://10.0.0.1:6443"
token: "K10secret::server:abc"
node-name: "default-abc12"
node-label:
  - "karpenter.sh/nodepool=default"
  - "zeta=1"
node-taint:
  - "karpenter.sh/unregistered:NoExecute"
kubelet-arg:
  - "max-pods=110"
JOINERY_K3S_CONFIG
chmod 600 /etc/rancher/k3s/config.yaml
JOINERY_INSTALLER="$(mktemp)"
if command -v curl >/dev/null 2>&1; then
  curl -sfL 'https://get.k3s.io' -o "$JOINERY_INSTALLER"
else
  wget -qO "$JOINERY_INSTALLER" 'https://get.k3s.io'
fi
sh "$JOINERY_INSTALLER" agent
"#
        );
    }

    #[test]
    fn registration_taint_is_always_present() {
        let mut c = ctx();
        c.taints.clear();
        c.startup_taints = vec![Taint::new("example.com/init", Some("true"), "NoSchedule")];
        let script = render_script(&c).unwrap();
        assert!(script.contains(
            "node-taint:\n  - \"example.com/init=true:NoSchedule\"\n  - \"karpenter.sh/unregistered:NoExecute\"\n"
        ));
        assert_eq!(script.matches("karpenter.sh/unregistered").count(), 1);
    }

    #[test]
    fn quotes_hostile_values() {
        let mut c = ctx();
        c.labels = vec![KeyValue::new("team", "it's \"ours\" \\ok")];
        // A value trying to end the here-document early stays on one line.
        c.startup_taints = vec![Taint::new(
            "x",
            Some("a\nJOINERY_K3S_CONFIG\nrm -rf /"),
            "NoSchedule",
        )];
        param(&mut c, "version", "v1.31.4+k3s1'; reboot; echo '");
        param(&mut c, "extraArgs", "--node-ip=10.0.0.5  --flag=it's");
        let script = render_script(&c).unwrap();
        assert!(
            script.contains("  - \"team=it's \\\"ours\\\" \\\\ok\"\n"),
            "{script}"
        );
        assert!(
            script.contains("  - \"x=a\\u000AJOINERY_K3S_CONFIG\\u000Arm -rf /:NoSchedule\"\n"),
            "{script}"
        );
        assert_eq!(script.lines().filter(|l| *l == CONFIG_MARKER).count(), 1);
        assert!(script.contains(
            "INSTALL_K3S_VERSION='v1.31.4+k3s1'\\''; reboot; echo '\\''' sh \"$JOINERY_INSTALLER\" agent \
             '--node-ip=10.0.0.5' '--flag=it'\\''s'\n"
        ), "{script}");
    }

    #[test]
    fn shell_quote_escapes_single_quotes() {
        assert_eq!(shell_quote("plain"), "'plain'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote("$(x) `y` \"z\""), "'$(x) `y` \"z\"'");
        assert_eq!(shell_quote(""), "''");
    }

    #[test]
    fn missing_token_secret_is_named() {
        let mut c = ctx();
        c.secrets.clear();
        let err = render_script(&c).unwrap_err();
        let RenderError::MissingSecret(msg) = err else {
            panic!("wrong error {err:?}")
        };
        assert!(msg.contains("k3s-join/token"), "{msg}");
        assert!(msg.contains("grant"), "{msg}");
    }

    #[test]
    fn token_parameter_rules() {
        let mut c = ctx();
        param(&mut c, "token", "inline");
        assert!(matches!(
            render_script(&c),
            Err(RenderError::InvalidParameter(_))
        ));
        c.parameters.retain(|p| p.key != "tokenSecret");
        assert!(render_script(&c).unwrap().contains("token: \"inline\"\n"));
        c.parameters.clear();
        assert!(matches!(
            render_script(&c),
            Err(RenderError::InvalidParameter(_))
        ));
        param(&mut c, "tokenSecret", "no-key");
        assert!(matches!(
            render_script(&c),
            Err(RenderError::InvalidParameter(_))
        ));
    }

    #[test]
    fn unknown_parameters_are_rejected() {
        let mut c = ctx();
        param(&mut c, "serverUrl", "https://x:6443");
        let err = render_script(&c).unwrap_err();
        assert!(
            err.message().contains("serverUrl") && err.message().contains("serverURL"),
            "{err:?}"
        );
    }

    #[test]
    fn server_url_defaults() {
        let mut c = ctx();
        for (endpoint, want) in [
            ("https://10.0.0.1:6443", "https://10.0.0.1:6443"),
            ("https://k8s.example.com", "https://k8s.example.com:6443"),
            (
                "https://k8s.example.com:443/",
                "https://k8s.example.com:443",
            ),
            ("k8s.example.com", "https://k8s.example.com:6443"),
            ("https://[fd00::1]", "https://[fd00::1]:6443"),
            ("https://[fd00::1]:7443", "https://[fd00::1]:7443"),
        ] {
            c.cluster_endpoint = endpoint.into();
            assert_eq!(server_url(&c).unwrap(), want, "{endpoint}");
        }
        param(&mut c, "serverURL", "https://k3s.internal:9443");
        assert_eq!(server_url(&c).unwrap(), "https://k3s.internal:9443");
        c.parameters.clear();
        c.cluster_endpoint.clear();
        assert!(server_url(&c).is_err());
    }

    #[test]
    fn kubelet_settings_map_to_args() {
        let _host = testing::install(FakeHost::new());
        let mut c = ctx();
        c.kubelet = r#"{
            "clusterDNS": ["10.43.0.10"],
            "evictionHard": {"nodefs.available": "10%", "memory.available": "500Mi"},
            "kubeReserved": {"memory": "256Mi", "cpu": "100m"},
            "systemReserved": {"cpu": "50m"},
            "maxPods": 58,
            "cpuCFSQuota": false,
            "evictionSoft": {},
            "somethingNew": 1
        }"#
        .into();
        assert_eq!(
            kubelet_args(&c).unwrap(),
            vec![
                "max-pods=58",
                "kube-reserved=cpu=100m,memory=256Mi",
                "system-reserved=cpu=50m",
                "eviction-hard=memory.available<500Mi,nodefs.available<10%",
                "cpu-cfs-quota=false",
                "cluster-dns=10.43.0.10",
            ]
        );
        assert!(
            testing::logs()
                .iter()
                .any(|(_, l)| l.contains("somethingNew"))
        );
        c.kubelet = r#"{"maxPods": "many"}"#.into();
        assert!(matches!(
            kubelet_args(&c),
            Err(RenderError::InvalidParameter(_))
        ));
        c.kubelet = "not json".into();
        assert!(matches!(
            kubelet_args(&c),
            Err(RenderError::InvalidParameter(_))
        ));
    }

    #[test]
    fn provider_id_command() {
        let mut c = ctx();
        c.provider_id_prefix = "exoscale://".into();
        param(
            &mut c,
            "providerIDCommand",
            "curl -s http://169.254.169.254/latest/meta-data/instance-id",
        );
        let script = render_script(&c).unwrap();
        let config_end = script.find("\nJOINERY_K3S_CONFIG\n").unwrap();
        // kubelet-arg is the last key of the config, ready for the appended item.
        assert!(script[..config_end].ends_with("kubelet-arg:"), "{script}");
        assert!(script.contains(
            "JOINERY_INSTANCE_ID=\"$(sh -c 'curl -s http://169.254.169.254/latest/meta-data/instance-id' | tr -d '[:space:]')\"\n"
        ));
        assert!(script.contains(
            "printf '  - \"provider-id=%s%s\"\\n' 'exoscale://' \"$JOINERY_INSTANCE_ID\" >> /etc/rancher/k3s/config.yaml\n"
        ));
        // Without a prefix the command is not used.
        c.provider_id_prefix.clear();
        let script = render_script(&c).unwrap();
        assert!(!script.contains("provider-id"));
        assert!(!script.contains("kubelet-arg"));
    }

    #[test]
    fn scripts_are_valid_sh() {
        let mut c = ctx();
        c.provider_id_prefix = "exoscale://".into();
        param(&mut c, "providerIDCommand", "echo 'i-123'");
        param(&mut c, "extraArgs", "--a=it's");
        c.labels.push(KeyValue::new("q", "it's \"x\" $(y)"));
        let script = render_script(&c).unwrap();
        testing::assert_shell_syntax(&script);
    }

    #[test]
    fn config_written_at_boot_is_the_expected_yaml() {
        // Runs the script's configuration part (up to the installer) with sh, in a temporary
        // directory instead of /etc/rancher/k3s.
        let mut c = ctx();
        c.provider_id_prefix = "exoscale://".into();
        param(&mut c, "providerIDCommand", "printf ' i-0abc/123 \\n'");
        c.labels = vec![KeyValue::new("q", "it's $(reboot)")];
        c.kubelet = r#"{"maxPods": 30}"#.into();
        let dir = std::env::temp_dir().join(format!("joinery-k3s-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = render_script(&c).unwrap();
        let config_part = &script[..script.find("JOINERY_INSTALLER=").unwrap()];
        let config_part = config_part.replace("/etc/rancher/k3s", dir.to_str().unwrap());
        let Some(out) = testing::run_sh(&[], &config_part) else {
            return; // no sh on this machine
        };
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let written = std::fs::read_to_string(dir.join("config.yaml")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            written,
            "server: \"https://10.0.0.1:6443\"\ntoken: \"K10secret::server:abc\"\nnode-name: \"default-abc12\"\n\
             node-label:\n  - \"q=it's $(reboot)\"\nnode-taint:\n  - \"karpenter.sh/unregistered:NoExecute\"\n\
             kubelet-arg:\n  - \"max-pods=30\"\n  - \"provider-id=exoscale://i-0abc/123\"\n"
        );
    }

    #[test]
    fn via_the_trait() {
        assert!(K3s::render(ctx()).unwrap().starts_with("#!/bin/sh\n"));
    }
}
