use super::*;
use joinery_plugin_sdk::renderer::{KeyValue, Taint};
use joinery_plugin_sdk::testing::{
    self, FakeHost, remove_parameter as unset, run_sh, set_parameter as set,
};

/// A NodeClaim in pool `default` whose token comes from the granted secret `rke2-join/token`.
fn context() -> RenderContext {
    testing::render_context()
        .join_token_secret("rke2-join/token", "K10abc::server:def\n")
        .build()
}

fn invalid_parameter(ctx: &RenderContext) -> String {
    testing::invalid_parameter(render_script(ctx))
}

#[test]
fn the_documented_script() {
    let mut ctx = context();
    ctx.kubelet = r#"{"maxPods": 110}"#.into();
    assert_eq!(
        render_script(&ctx).unwrap(),
        r#"#!/bin/sh
# Joinery: join NodeClaim default-abc12 (NodePool default) to RKE2 as an agent. Generated, do not edit.
set -eu
umask 077
mkdir -p /etc/rancher/rke2
cat > /etc/rancher/rke2/config.yaml <<'JOINERY_RKE2_CONFIG'
server: "https://10.0.0.1:9345"
token: "K10abc::server:def"
node-name: "default-abc12"
node-label:
  - "karpenter.sh/nodepool=default"
  - "zeta=1"
node-taint:
  - "karpenter.sh/unregistered:NoExecute"
kubelet-arg:
  - "max-pods=110"
JOINERY_RKE2_CONFIG
chmod 600 /etc/rancher/rke2/config.yaml
JOINERY_INSTALLER="$(mktemp)"
if command -v curl >/dev/null 2>&1; then
  curl -sfL 'https://get.rke2.io' -o "$JOINERY_INSTALLER"
else
  wget -qO "$JOINERY_INSTALLER" 'https://get.rke2.io'
fi
INSTALL_RKE2_TYPE=agent sh "$JOINERY_INSTALLER"
rm -f "$JOINERY_INSTALLER"
systemctl enable --now rke2-agent.service
"#
    );
}

#[test]
fn the_registration_taint_is_always_there_once() {
    let mut ctx = context();
    ctx.taints = vec![Taint::new("dedicated", Some("gpu"), "NoSchedule")];
    ctx.startup_taints = vec![Taint::new(
        "node.cilium.io/agent-not-ready",
        Some("true"),
        "NoExecute",
    )];
    let script = render_script(&ctx).unwrap();
    assert!(
        script.contains(
            "node-taint:\n  - \"dedicated=gpu:NoSchedule\"\n  - \"node.cilium.io/agent-not-ready=true:NoExecute\"\n  \
             - \"karpenter.sh/unregistered:NoExecute\"\n"
        ),
        "{script}"
    );
    ctx.taints.push(Taint::registration());
    assert_eq!(
        render_script(&ctx)
            .unwrap()
            .matches("karpenter.sh/unregistered")
            .count(),
        1
    );
}

#[test]
fn no_label_no_node_label_key() {
    let mut ctx = context();
    ctx.labels.clear();
    let script = render_script(&ctx).unwrap();
    assert!(!script.contains("node-label"), "{script}");
    assert!(
        !script.contains("kubelet-arg"),
        "no kubelet settings, no provider-ID step: {script}"
    );
}

#[test]
fn hostile_values_stay_inside_their_quotes() {
    let mut ctx = context();
    ctx.node_claim = "evil\nJOINERY_RKE2_CONFIG\nreboot".into();
    ctx.node_pool = "pool\n`reboot`".into();
    ctx.labels = vec![KeyValue::new("team", "it's \"ours\" \\ $(reboot)")];
    ctx.startup_taints = vec![Taint::new("x", Some("a\u{2028}b\tc"), "NoSchedule")];
    ctx.secrets = vec![KeyValue::new("rke2-join/token", "to\"ken\\")];
    ctx.provider_id_prefix = "we'ird\"://".into();
    set(&mut ctx, "providerIDCommand", "echo 'i-1' \"$(date)\"");
    set(
        &mut ctx,
        "installScriptURL",
        "https://mirror.example/get?x='y'",
    );
    let script = render_script(&ctx).unwrap();
    // The marker only ends the here-document once; the newline became an escape.
    assert_eq!(
        script.lines().filter(|l| *l == CONFIG_MARKER).count(),
        1,
        "{script}"
    );
    assert!(
        script.contains("node-name: \"evil\\u000AJOINERY_RKE2_CONFIG\\u000Areboot\"\n"),
        "{script}"
    );
    assert!(
        script.contains("(NodePool pool?`reboot`) to RKE2"),
        "{script}"
    );
    assert!(
        script.contains("  - \"team=it's \\\"ours\\\" \\\\ $(reboot)\"\n"),
        "{script}"
    );
    assert!(
        script.contains("  - \"x=a\\u2028b\\u0009c:NoSchedule\"\n"),
        "{script}"
    );
    assert!(script.contains("token: \"to\\\"ken\\\\\"\n"), "{script}");
    assert!(
        script.contains("sh -c 'echo '\\''i-1'\\'' \"$(date)\"' | tr"),
        "{script}"
    );
    assert!(
        script.contains("' 'we'\\''ird\\\"://' \"$JOINERY_INSTANCE_ID\" >>"),
        "{script}"
    );
    assert!(
        script.contains("curl -sfL 'https://mirror.example/get?x='\\''y'\\''' -o"),
        "{script}"
    );
}

#[test]
fn every_rendering_is_valid_sh() {
    let mut ctx = context();
    ctx.labels.push(KeyValue::new("q", "it's \"x\" $(y) `z`"));
    ctx.provider_id_prefix = "sim://".into();
    ctx.kubelet = r#"{"maxPods": 20, "clusterDNS": ["10.43.0.10"]}"#.into();
    set(
        &mut ctx,
        "providerIDCommand",
        "cat '/var/lib/cloud/instance-id'",
    );
    set(&mut ctx, "version", "v1.31.4+rke2r1");
    let script = render_script(&ctx).unwrap();
    testing::assert_shell_syntax(&script);
}

#[test]
fn the_configuration_written_at_boot() {
    // Runs the script up to the installer, writing into a temporary directory.
    let mut ctx = context();
    ctx.provider_id_prefix = "exoscale://".into();
    ctx.labels = vec![KeyValue::new("q", "it's $(reboot)")];
    ctx.kubelet = r#"{"maxPods": 30}"#.into();
    set(&mut ctx, "providerIDCommand", "printf ' 6a1f-22/0 \\n'");
    let dir = std::env::temp_dir().join(format!("joinery-rke2-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = render_script(&ctx).unwrap();
    let head = &script[..script.find("JOINERY_INSTALLER=").unwrap()];
    let head = head.replace(CONFIG_DIR, dir.to_str().unwrap());
    let Some(out) = run_sh(&[], &head) else {
        return;
    };
    let written = std::fs::read_to_string(dir.join("config.yaml"));
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        written.unwrap(),
        "server: \"https://10.0.0.1:9345\"\ntoken: \"K10abc::server:def\"\nnode-name: \"default-abc12\"\n\
         node-label:\n  - \"q=it's $(reboot)\"\nnode-taint:\n  - \"karpenter.sh/unregistered:NoExecute\"\n\
         kubelet-arg:\n  - \"max-pods=30\"\n  - \"provider-id=exoscale://6a1f-22/0\"\n"
    );
}

#[test]
fn an_unusable_instance_id_stops_the_script() {
    let mut ctx = context();
    ctx.provider_id_prefix = "exoscale://".into();
    set(&mut ctx, "providerIDCommand", "echo 'i-1;reboot'");
    let dir = std::env::temp_dir().join(format!("joinery-rke2-bad-id-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let script = render_script(&ctx).unwrap();
    let head = script[..script.find("JOINERY_INSTALLER=").unwrap()]
        .replace(CONFIG_DIR, dir.to_str().unwrap());
    let out = run_sh(&[], &head);
    std::fs::remove_dir_all(&dir).unwrap();
    let Some(out) = out else { return };
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no usable instance ID"));
}

#[test]
fn server_url_from_the_cluster_endpoint() {
    let mut ctx = context();
    for (endpoint, expected) in [
        ("https://10.0.0.1:6443", "https://10.0.0.1:9345"),
        ("https://k8s.example.com", "https://k8s.example.com:9345"),
        (
            "https://k8s.example.com:443/base/",
            "https://k8s.example.com:9345",
        ),
        ("k8s.example.com:6443", "https://k8s.example.com:9345"),
        ("http://127.0.0.1:38211/", "https://127.0.0.1:9345"),
        ("https://[fd00::1]:6443", "https://[fd00::1]:9345"),
        ("https://[fd00::1]", "https://[fd00::1]:9345"),
    ] {
        ctx.cluster_endpoint = endpoint.into();
        assert_eq!(server_url(&ctx).unwrap(), expected, "{endpoint}");
    }
    for bad in ["", "https://", "fd00::1", "https://[]:6443"] {
        ctx.cluster_endpoint = bad.into();
        assert!(
            matches!(server_url(&ctx), Err(RenderError::InvalidParameter(_))),
            "{bad}"
        );
    }
}

#[test]
fn parameter_server_url() {
    let mut ctx = context();
    set(&mut ctx, "serverURL", "https://rke2.internal:9345");
    assert!(
        render_script(&ctx)
            .unwrap()
            .contains("server: \"https://rke2.internal:9345\"\n")
    );
    ctx.cluster_endpoint.clear();
    assert!(
        render_script(&ctx).is_ok(),
        "with serverURL no cluster endpoint is needed"
    );
    for bad in [
        "rke2.internal:9345",
        "http://rke2.internal:9345",
        "https://",
        "https://a b",
    ] {
        set(&mut ctx, "serverURL", bad);
        assert!(invalid_parameter(&ctx).contains("serverURL"), "{bad}");
    }
}

#[test]
fn parameter_token_inline() {
    let mut ctx = context();
    unset(&mut ctx, "tokenSecret");
    set(&mut ctx, "token", "inline-token");
    assert!(
        render_script(&ctx)
            .unwrap()
            .contains("token: \"inline-token\"\n")
    );
    set(&mut ctx, "tokenSecret", "rke2-join/token");
    assert!(invalid_parameter(&ctx).contains("not both"));
    ctx.parameters.clear();
    assert!(invalid_parameter(&ctx).contains("tokenSecret"));
}

#[test]
fn parameter_token_secret() {
    let mut ctx = context();
    // The value is trimmed (secrets often end with a newline).
    assert!(
        render_script(&ctx)
            .unwrap()
            .contains("token: \"K10abc::server:def\"\n")
    );
    // Not granted, or blank: missing-secret, naming the secret, the key and the grant.
    for secrets in [vec![], vec![KeyValue::new("rke2-join/token", " \n")]] {
        ctx.secrets = secrets;
        match render_script(&ctx) {
            Err(RenderError::MissingSecret(message)) => {
                assert!(
                    message.contains("rke2-join/token") && message.contains("grant"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
    for bad in ["no-key", "/token", "secret/"] {
        set(&mut ctx, "tokenSecret", bad);
        assert!(invalid_parameter(&ctx).contains("secret-name/key"), "{bad}");
    }
}

#[test]
fn parameters_version_and_channel() {
    let mut ctx = context();
    set(&mut ctx, "version", "v1.31.4+rke2r1");
    assert!(render_script(&ctx).unwrap().contains(
        "\nINSTALL_RKE2_TYPE=agent INSTALL_RKE2_VERSION='v1.31.4+rke2r1' sh \"$JOINERY_INSTALLER\"\n"
    ));
    set(&mut ctx, "channel", "latest");
    assert!(invalid_parameter(&ctx).contains("not both"));
    unset(&mut ctx, "version");
    assert!(render_script(&ctx).unwrap().contains(
        "\nINSTALL_RKE2_TYPE=agent INSTALL_RKE2_CHANNEL='latest' sh \"$JOINERY_INSTALLER\"\n"
    ));
    set(&mut ctx, "channel", "v1.31; reboot");
    assert!(invalid_parameter(&ctx).contains("channel"));
    unset(&mut ctx, "channel");
    set(&mut ctx, "version", "v1.31.4 rke2r1");
    assert!(invalid_parameter(&ctx).contains("version"));
    // Blank means unset.
    set(&mut ctx, "version", "  ");
    assert!(
        render_script(&ctx)
            .unwrap()
            .contains("\nINSTALL_RKE2_TYPE=agent sh \"$JOINERY_INSTALLER\"\n")
    );
}

#[test]
fn parameter_install_script_url() {
    let mut ctx = context();
    set(
        &mut ctx,
        "installScriptURL",
        "https://mirror.example/rke2/install.sh",
    );
    let script = render_script(&ctx).unwrap();
    assert!(script.contains(
        "  curl -sfL 'https://mirror.example/rke2/install.sh' -o \"$JOINERY_INSTALLER\"\n"
    ));
    assert!(
        script.contains(
            "  wget -qO \"$JOINERY_INSTALLER\" 'https://mirror.example/rke2/install.sh'\n"
        )
    );
    assert!(!script.contains("get.rke2.io"));
    set(&mut ctx, "installScriptURL", "file:///tmp/install.sh");
    assert!(invalid_parameter(&ctx).contains("installScriptURL"));
}

#[test]
fn parameter_provider_id_command() {
    let _host = testing::install(FakeHost::new());
    let mut ctx = context();
    ctx.provider_id_prefix = "exoscale://".into();
    set(
        &mut ctx,
        "providerIDCommand",
        "curl -s http://169.254.169.254/latest/meta-data/instance-id",
    );
    let script = render_script(&ctx).unwrap();
    let end = script.find("\nJOINERY_RKE2_CONFIG\n").unwrap();
    assert!(
        script[..end].ends_with("\nkubelet-arg:"),
        "kubelet-arg is the last key: {script}"
    );
    assert!(script.contains(
        "JOINERY_INSTANCE_ID=\"$(sh -c 'curl -s http://169.254.169.254/latest/meta-data/instance-id' | tr -d '[:space:]')\"\n"
    ));
    assert!(script.contains(
        "printf '  - \"provider-id=%s%s\"\\n' 'exoscale://' \"$JOINERY_INSTANCE_ID\" >> /etc/rancher/rke2/config.yaml\n"
    ));
    // The step comes before the chmod and the installer.
    assert!(script.find("printf").unwrap() < script.find("chmod 600").unwrap());
    // Without a prefix, the command is not used (and the renderer says so).
    ctx.provider_id_prefix.clear();
    let script = render_script(&ctx).unwrap();
    assert!(
        !script.contains("provider-id") && !script.contains("JOINERY_INSTANCE_ID"),
        "{script}"
    );
    assert!(
        testing::logs()
            .iter()
            .any(|(_, line)| line.contains("providerIDCommand"))
    );
}

#[test]
fn unknown_parameters_are_refused() {
    let mut ctx = context();
    set(&mut ctx, "serverUrl", "https://rke2.internal:9345");
    let message = invalid_parameter(&ctx);
    assert!(
        message.contains("`serverUrl`") && message.contains("serverURL"),
        "{message}"
    );
    let mut ctx = context();
    set(&mut ctx, "extraArgs", "--foo");
    assert!(invalid_parameter(&ctx).contains("extraArgs"));
}

#[test]
fn kubelet_settings_become_kubelet_args() {
    let _host = testing::install(FakeHost::new());
    let mut ctx = context();
    ctx.kubelet = r#"{
        "clusterDNS": ["10.43.0.10", "10.43.0.11"],
        "evictionHard": {"nodefs.available": "10%", "memory.available": "500Mi"},
        "evictionSoft": {},
        "evictionSoftGracePeriod": {"memory.available": "1m"},
        "kubeReserved": {"memory": "256Mi", "cpu": "100m"},
        "systemReserved": {"cpu": "50m"},
        "maxPods": 58,
        "podsPerCore": 10,
        "evictionMaxPodGracePeriod": 60,
        "imageGCHighThresholdPercent": 85,
        "imageGCLowThresholdPercent": 80,
        "cpuCFSQuota": false,
        "podsPerCoreTypo": null,
        "somethingNew": 1
    }"#
    .into();
    let script = render_script(&ctx).unwrap();
    assert!(
        script.contains(
            "kubelet-arg:\n  - \"max-pods=58\"\n  - \"pods-per-core=10\"\n  - \"kube-reserved=cpu=100m,memory=256Mi\"\n  \
             - \"system-reserved=cpu=50m\"\n  - \"eviction-hard=memory.available<500Mi,nodefs.available<10%\"\n  \
             - \"eviction-soft-grace-period=memory.available=1m\"\n  - \"eviction-max-pod-grace-period=60\"\n  \
             - \"image-gc-high-threshold=85\"\n  - \"image-gc-low-threshold=80\"\n  - \"cpu-cfs-quota=false\"\n  \
             - \"cluster-dns=10.43.0.10,10.43.0.11\"\nJOINERY_RKE2_CONFIG\n"
        ),
        "{script}"
    );
    let warning = testing::logs()
        .into_iter()
        .map(|(_, line)| line)
        .find(|l| l.contains("somethingNew"));
    assert!(warning.is_some_and(|w| w.contains("podsPerCoreTypo")));
    for (bad, field) in [
        (r#"{"maxPods": "many"}"#, "maxPods"),
        (r#"{"maxPods": -1}"#, "maxPods"),
        (r#"{"cpuCFSQuota": "yes"}"#, "cpuCFSQuota"),
        (r#"{"kubeReserved": ["cpu"]}"#, "kubeReserved"),
        (r#"{"kubeReserved": {"cpu": "1,memory=1Gi"}}"#, "comma"),
        (r#"{"clusterDNS": "10.43.0.10"}"#, "clusterDNS"),
        ("[1]", "JSON object"),
        ("not json", "JSON"),
    ] {
        ctx.kubelet = bad.into();
        assert!(invalid_parameter(&ctx).contains(field), "{bad}");
    }
}

#[test]
fn quoting_helpers() {
    assert_eq!(sh_quote("plain"), "'plain'");
    assert_eq!(sh_quote("it's"), "'it'\\''s'");
    assert_eq!(sh_quote(""), "''");
    assert_eq!(yaml_str("a\"b\\c"), "\"a\\\"b\\\\c\"");
    assert_eq!(
        yaml_str("\r\n\u{7f}\u{85}\u{2029}\u{feff}é"),
        "\"\\u000D\\u000A\\u007F\\u0085\\u2029\\uFEFFé\""
    );
}

#[test]
fn through_the_renderer_trait() {
    assert!(Rke2::render(context()).unwrap().starts_with("#!/bin/sh\n"));
}
