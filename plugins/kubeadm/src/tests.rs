use super::*;
use joinery_plugin_sdk::renderer::{KeyValue, Taint};
use joinery_plugin_sdk::testing::{
    self, FakeHost, remove_parameter as unset, run_sh, set_parameter as set,
};

const HASH: &str = "sha256:8f5a4c1e0d2b3a69788d6e5f4c3b2a190817263544536271809a8b7c6d5e4f30";
const TOKEN: &str = "abcdef.0123456789abcdef";

/// A NodeClaim in pool `default` whose token comes from the granted secret `kubeadm-join/token`.
fn context() -> RenderContext {
    testing::render_context()
        .join_token_secret("kubeadm-join/token", &format!("{TOKEN}\n"))
        .parameter("caCertHash", HASH)
        .build()
}

fn invalid_parameter(ctx: &RenderContext) -> String {
    testing::invalid_parameter(render_script(ctx))
}

/// Runs the script up to `systemctl` in a temporary directory; returns the file it wrote.
fn written_configuration(script: &str, tag: &str) -> Option<Result<String, String>> {
    let dir = std::env::temp_dir().join(format!("joinery-kubeadm-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let head =
        script[..script.find("systemctl").unwrap()].replace(CONFIG_DIR, dir.to_str().unwrap());
    let out = run_sh(&[], &head);
    let written = std::fs::read_to_string(dir.join("kubeadm-join.yaml"));
    std::fs::remove_dir_all(&dir).unwrap();
    let out = out?;
    Some(if out.status.success() {
        Ok(written.unwrap())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into())
    })
}

#[test]
fn the_documented_script() {
    let mut ctx = context();
    ctx.kubelet = r#"{"maxPods": 110}"#.into();
    assert_eq!(
        render_script(&ctx).unwrap(),
        r#"#!/bin/sh
# Joinery: join NodeClaim default-abc12 (NodePool default) with kubeadm. Generated, do not edit.
set -eu
umask 077
mkdir -p /etc/joinery
cat > /etc/joinery/kubeadm-join.yaml <<'JOINERY_KUBEADM_CONFIG'
apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: "10.0.0.1:6443"
    token: "abcdef.0123456789abcdef"
    caCertHashes:
      - "sha256:8f5a4c1e0d2b3a69788d6e5f4c3b2a190817263544536271809a8b7c6d5e4f30"
nodeRegistration:
  name: "default-abc12"
  kubeletExtraArgs:
    - name: "node-labels"
      value: "karpenter.sh/nodepool=default,zeta=1"
    - name: "register-with-taints"
      value: "karpenter.sh/unregistered:NoExecute"
    - name: "max-pods"
      value: "110"
JOINERY_KUBEADM_CONFIG
chmod 600 /etc/joinery/kubeadm-join.yaml
systemctl enable kubelet.service
kubeadm join --config /etc/joinery/kubeadm-join.yaml
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
            "      value: \"dedicated=gpu:NoSchedule,node.cilium.io/agent-not-ready=true:NoExecute,\
             karpenter.sh/unregistered:NoExecute\"\n"
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
    // Without labels, node-labels is left out; register-with-taints is always there.
    ctx.labels.clear();
    let script = render_script(&ctx).unwrap();
    assert!(!script.contains("node-labels"), "{script}");
    assert!(
        script.contains("  kubeletExtraArgs:\n    - name: \"register-with-taints\"\n"),
        "{script}"
    );
}

#[test]
fn hostile_values_stay_inside_their_quotes() {
    let mut ctx = context();
    ctx.node_claim = "evil\nJOINERY_KUBEADM_CONFIG\nreboot".into();
    ctx.node_pool = "pool\n$(reboot)".into();
    ctx.labels = vec![KeyValue::new("team", "it's \"ours\" \\ $(reboot)")];
    ctx.startup_taints = vec![Taint::new("x", Some("a\u{2028}b"), "NoSchedule")];
    ctx.provider_id_prefix = "we'ird\"://".into();
    set(&mut ctx, "providerIDCommand", "echo 'i-1' \"$(date)\"");
    let script = render_script(&ctx).unwrap();
    assert_eq!(
        script.lines().filter(|l| *l == CONFIG_MARKER).count(),
        1,
        "{script}"
    );
    assert!(
        script.contains("  name: \"evil\\u000AJOINERY_KUBEADM_CONFIG\\u000Areboot\"\n"),
        "{script}"
    );
    assert!(
        script.contains("(NodePool pool?$(reboot)) with kubeadm"),
        "{script}"
    );
    assert!(
        script.contains("      value: \"team=it's \\\"ours\\\" \\\\ $(reboot)\"\n"),
        "{script}"
    );
    assert!(
        script.contains(":NoExecute,x=a\\u2028b:NoSchedule\"\n"),
        "{script}"
    );
    assert!(
        script.contains("sh -c 'echo '\\''i-1'\\'' \"$(date)\"' | tr"),
        "{script}"
    );
    assert!(
        script.contains("' 'we'\\''ird\\\"://' \"$JOINERY_INSTANCE_ID\" >>"),
        "{script}"
    );
    // A comma would smuggle another label or taint into the kubelet's list.
    ctx.labels = vec![KeyValue::new(
        "a",
        "b,node-role.kubernetes.io/control-plane=",
    )];
    assert!(invalid_parameter(&ctx).contains("comma"));
    ctx.labels.clear();
    ctx.startup_taints = vec![Taint::new("x", Some("1,y=2"), "NoSchedule")];
    assert!(invalid_parameter(&ctx).contains("comma"));
}

#[test]
fn every_rendering_is_valid_sh() {
    for extra in [
        vec![],
        vec![("packages", "apt"), ("kubernetesVersion", "v1.33.2")],
        vec![
            ("packages", "dnf"),
            ("kubernetesVersion", "1.32"),
            ("configAPIVersion", "v1beta3"),
        ],
    ] {
        let mut ctx = context();
        ctx.labels.push(KeyValue::new("q", "it's \"x\" $(y) `z`"));
        ctx.provider_id_prefix = "sim://".into();
        ctx.kubelet = r#"{"maxPods": 20, "clusterDNS": ["10.96.0.10"]}"#.into();
        set(
            &mut ctx,
            "providerIDCommand",
            "cat '/var/lib/cloud/instance-id'",
        );
        for (key, value) in extra {
            set(&mut ctx, key, value);
        }
        let script = render_script(&ctx).unwrap();
        testing::assert_shell_syntax(&script);
    }
}

#[test]
fn the_configuration_written_at_boot_v1beta4() {
    let mut ctx = context();
    ctx.provider_id_prefix = "exoscale://".into();
    ctx.labels = vec![KeyValue::new("q", "it's $(reboot)")];
    ctx.kubelet = r#"{"maxPods": 30}"#.into();
    set(&mut ctx, "providerIDCommand", "printf ' 6a1f-22/0 \\n'");
    let script = render_script(&ctx).unwrap();
    let Some(written) = written_configuration(&script, "v1beta4") else {
        return;
    };
    assert_eq!(
        written.unwrap(),
        format!(
            "apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    \
             apiServerEndpoint: \"10.0.0.1:6443\"\n    token: \"{TOKEN}\"\n    caCertHashes:\n      - \"{HASH}\"\n\
             nodeRegistration:\n  name: \"default-abc12\"\n  kubeletExtraArgs:\n    - name: \"node-labels\"\n      \
             value: \"q=it's $(reboot)\"\n    - name: \"register-with-taints\"\n      \
             value: \"karpenter.sh/unregistered:NoExecute\"\n    - name: \"max-pods\"\n      value: \"30\"\n    \
             - name: \"provider-id\"\n      value: \"exoscale://6a1f-22/0\"\n"
        )
    );
}

#[test]
fn the_configuration_written_at_boot_v1beta3() {
    let mut ctx = context();
    ctx.provider_id_prefix = "exoscale://".into();
    set(&mut ctx, "configAPIVersion", "kubeadm.k8s.io/v1beta3");
    set(&mut ctx, "providerIDCommand", "echo i-42");
    let script = render_script(&ctx).unwrap();
    let Some(written) = written_configuration(&script, "v1beta3") else {
        return;
    };
    let written = written.unwrap();
    assert!(
        written.starts_with("apiVersion: kubeadm.k8s.io/v1beta3\nkind: JoinConfiguration\n"),
        "{written}"
    );
    assert!(
        written.ends_with(
            "  kubeletExtraArgs:\n    node-labels: \"karpenter.sh/nodepool=default,zeta=1\"\n    \
             register-with-taints: \"karpenter.sh/unregistered:NoExecute\"\n    provider-id: \"exoscale://i-42\"\n"
        ),
        "{written}"
    );
}

#[test]
fn an_unusable_instance_id_stops_the_script() {
    let mut ctx = context();
    ctx.provider_id_prefix = "exoscale://".into();
    set(&mut ctx, "providerIDCommand", "echo 'i-1 $(reboot)'");
    let script = render_script(&ctx).unwrap();
    let Some(result) = written_configuration(&script, "bad-id") else {
        return;
    };
    assert!(result.unwrap_err().contains("no usable instance ID"));
}

#[test]
fn parameter_token_inline() {
    let mut ctx = context();
    unset(&mut ctx, "tokenSecret");
    set(&mut ctx, "token", "0abc12.fedcba9876543210");
    assert!(
        render_script(&ctx)
            .unwrap()
            .contains("    token: \"0abc12.fedcba9876543210\"\n")
    );
    set(&mut ctx, "tokenSecret", "kubeadm-join/token");
    assert!(invalid_parameter(&ctx).contains("not both"));
    unset(&mut ctx, "tokenSecret");
    for bad in [
        "zyxwvu0123456789abcdef",
        "ZYXWVU.0123456789abcdef",
        "zyxwv.0123456789abcdefg",
        "zyxwvu.0123456789abcde",
    ] {
        set(&mut ctx, "token", bad);
        let message = invalid_parameter(&ctx);
        assert!(
            message.contains("the parameter token") && !message.contains(bad),
            "{message}"
        );
    }
    unset(&mut ctx, "token");
    assert!(invalid_parameter(&ctx).contains("tokenSecret"));
}

#[test]
fn parameter_token_secret() {
    let mut ctx = context();
    assert!(
        render_script(&ctx)
            .unwrap()
            .contains(&format!("    token: \"{TOKEN}\"\n")),
        "the value is trimmed"
    );
    for secrets in [vec![], vec![KeyValue::new("kubeadm-join/token", "\n")]] {
        ctx.secrets = secrets;
        match render_script(&ctx) {
            Err(RenderError::MissingSecret(message)) => {
                assert!(
                    message.contains("kubeadm-join/token") && message.contains("grant"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
    }
    // A malformed token in the secret is refused without printing the secret.
    ctx.secrets = vec![KeyValue::new("kubeadm-join/token", "hunter2")];
    let message = invalid_parameter(&ctx);
    assert!(
        message.contains("`kubeadm-join/token`") && !message.contains("hunter2"),
        "{message}"
    );
    for bad in ["no-key", "/token", "secret/"] {
        set(&mut ctx, "tokenSecret", bad);
        assert!(invalid_parameter(&ctx).contains("secret-name/key"), "{bad}");
    }
}

#[test]
fn parameter_ca_cert_hash() {
    let mut ctx = context();
    let second = format!("sha256:{}", "AB".repeat(32));
    set(&mut ctx, "caCertHash", &format!(" {HASH} , {second},"));
    assert!(render_script(&ctx).unwrap().contains(&format!(
        "    caCertHashes:\n      - \"{HASH}\"\n      - \"{second}\"\nnodeRegistration:\n"
    )));
    unset(&mut ctx, "caCertHash");
    assert!(invalid_parameter(&ctx).contains("caCertHash"), "required");
    for bad in [
        "8f5a4c1e",
        &HASH[7..],
        "sha1:8f5a4c1e0d2b3a69788d6e5f4c3b2a1908172635",
        format!("{HASH}0").as_str(),
        HASH.replace('f', "g").as_str(),
    ] {
        set(&mut ctx, "caCertHash", bad);
        assert!(invalid_parameter(&ctx).contains("64 hexadecimal"), "{bad}");
    }
}

#[test]
fn parameter_api_server_endpoint() {
    let mut ctx = context();
    for (endpoint, expected) in [
        ("https://10.0.0.1:6443", "10.0.0.1:6443"),
        ("https://k8s.example.com", "k8s.example.com:443"),
        ("https://k8s.example.com:8443/base/", "k8s.example.com:8443"),
        ("k8s.example.com:6443", "k8s.example.com:6443"),
        ("http://127.0.0.1:38211/", "127.0.0.1:38211"),
        ("http://127.0.0.1", "127.0.0.1:80"),
        ("https://[fd00::1]:6443", "[fd00::1]:6443"),
        ("https://[fd00::1]", "[fd00::1]:443"),
    ] {
        ctx.cluster_endpoint = endpoint.into();
        assert_eq!(api_server_endpoint(&ctx).unwrap(), expected, "{endpoint}");
    }
    for bad in [
        "",
        "https://",
        "fd00::1",
        "https://k8s:http",
        "https://k8s:0",
        "https://k8s:70000",
    ] {
        ctx.cluster_endpoint = bad.into();
        assert!(
            matches!(
                api_server_endpoint(&ctx),
                Err(RenderError::InvalidParameter(_))
            ),
            "{bad}"
        );
    }
    set(&mut ctx, "apiServerEndpoint", "k8s-api.internal:6443");
    assert!(
        render_script(&ctx)
            .unwrap()
            .contains("    apiServerEndpoint: \"k8s-api.internal:6443\"\n")
    );
    for bad in [
        "https://k8s-api.internal:6443",
        "k8s-api.internal",
        "k8s api:6443",
        "[fd00::1]",
    ] {
        set(&mut ctx, "apiServerEndpoint", bad);
        assert!(
            invalid_parameter(&ctx).contains("apiServerEndpoint"),
            "{bad}"
        );
    }
}

#[test]
fn parameter_config_api_version() {
    let mut ctx = context();
    set(&mut ctx, "configAPIVersion", "v1beta4");
    assert!(
        render_script(&ctx)
            .unwrap()
            .contains("apiVersion: kubeadm.k8s.io/v1beta4\n")
    );
    set(&mut ctx, "configAPIVersion", "v1beta3");
    let script = render_script(&ctx).unwrap();
    assert!(
        script.contains("apiVersion: kubeadm.k8s.io/v1beta3\n"),
        "{script}"
    );
    assert!(
        script.contains(
            "  kubeletExtraArgs:\n    node-labels: \"karpenter.sh/nodepool=default,zeta=1\"\n"
        ),
        "{script}"
    );
    set(&mut ctx, "configAPIVersion", "v1beta2");
    assert!(invalid_parameter(&ctx).contains("configAPIVersion"));
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
    assert!(script.contains(
        "JOINERY_INSTANCE_ID=\"$(sh -c 'curl -s http://169.254.169.254/latest/meta-data/instance-id' | tr -d '[:space:]')\"\n"
    ));
    assert!(script.contains(
        "printf '    - name: \"provider-id\"\\n      value: \"%s%s\"\\n' 'exoscale://' \"$JOINERY_INSTANCE_ID\" \
         >> /etc/joinery/kubeadm-join.yaml\n"
    ));
    assert!(script.find("printf").unwrap() < script.find("kubeadm join").unwrap());
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
fn parameters_packages_and_kubernetes_version() {
    let mut ctx = context();
    set(&mut ctx, "packages", "apt");
    set(&mut ctx, "kubernetesVersion", "v1.33.2");
    let script = render_script(&ctx).unwrap();
    let install = "set -eu\n\
        # Install kubelet and kubeadm 1.33.2 from https://pkgs.k8s.io/core:/stable:/v1.33 (parameter packages: apt).\n\
        umask 022\nexport DEBIAN_FRONTEND=noninteractive\napt-get update\napt-get install -y ca-certificates curl gpg\n\
        mkdir -p /etc/apt/keyrings\n\
        curl -fsSL 'https://pkgs.k8s.io/core:/stable:/v1.33/deb/Release.key' | gpg --dearmor --yes -o /etc/apt/keyrings/kubernetes-apt-keyring.gpg\n\
        echo 'deb [signed-by=/etc/apt/keyrings/kubernetes-apt-keyring.gpg] https://pkgs.k8s.io/core:/stable:/v1.33/deb/ /' > /etc/apt/sources.list.d/kubernetes.list\n\
        apt-get update\napt-get install -y kubelet='1.33.2-*' kubeadm='1.33.2-*'\napt-mark hold kubelet kubeadm\numask 077\n";
    assert!(script.contains(install), "{script}");

    set(&mut ctx, "packages", "dnf");
    set(&mut ctx, "kubernetesVersion", "1.32");
    let script = render_script(&ctx).unwrap();
    assert!(
        script.contains(
            "umask 022\ncat > /etc/yum.repos.d/kubernetes.repo <<'JOINERY_KUBERNETES_REPO'\n[kubernetes]\nname=Kubernetes\n\
             baseurl=https://pkgs.k8s.io/core:/stable:/v1.32/rpm/\nenabled=1\ngpgcheck=1\n\
             gpgkey=https://pkgs.k8s.io/core:/stable:/v1.32/rpm/repodata/repomd.xml.key\n\
             exclude=kubelet kubeadm kubectl cri-tools kubernetes-cni\nJOINERY_KUBERNETES_REPO\n\
             dnf install -y --disableexcludes=kubernetes kubelet kubeadm\numask 077\n"
        ),
        "{script}"
    );
    set(&mut ctx, "kubernetesVersion", "v1.32.4");
    assert!(
        render_script(&ctx)
            .unwrap()
            .contains(" kubelet-1.32.4 kubeadm-1.32.4\n")
    );

    for bad in ["1", "v1.33.2.1", "latest", "v1.33-rc.0", "v1.33; reboot"] {
        set(&mut ctx, "kubernetesVersion", bad);
        assert!(
            invalid_parameter(&ctx).contains("kubernetesVersion"),
            "{bad}"
        );
    }
    unset(&mut ctx, "kubernetesVersion");
    assert!(
        invalid_parameter(&ctx).contains("kubernetesVersion"),
        "packages needs a version"
    );
    set(&mut ctx, "packages", "zypper");
    assert!(invalid_parameter(&ctx).contains("apt, dnf or none"));
    set(&mut ctx, "packages", "none");
    assert!(!render_script(&ctx).unwrap().contains("umask 022"));
    set(&mut ctx, "kubernetesVersion", "v1.33");
    assert!(
        invalid_parameter(&ctx).contains("packages"),
        "a version with nothing to install is refused"
    );
}

#[test]
fn unknown_parameters_are_refused() {
    let mut ctx = context();
    set(&mut ctx, "caCertHashes", HASH);
    let message = invalid_parameter(&ctx);
    assert!(
        message.contains("`caCertHashes`") && message.contains("caCertHash,"),
        "{message}"
    );
}

#[test]
fn kubelet_settings_become_extra_args() {
    let _host = testing::install(FakeHost::new());
    let mut ctx = context();
    ctx.kubelet =
        r#"{"maxPods": 58, "kubeReserved": {"memory": "256Mi", "cpu": "100m"}, "cpuCFSQuota": true,
        "clusterDNS": ["10.96.0.10"], "somethingNew": 1}"#
            .into();
    assert_eq!(
        kubelet_extra_args(&ctx).unwrap(),
        vec![
            (
                "node-labels",
                "karpenter.sh/nodepool=default,zeta=1".to_string()
            ),
            (
                "register-with-taints",
                "karpenter.sh/unregistered:NoExecute".to_string()
            ),
            ("max-pods", "58".to_string()),
            ("kube-reserved", "cpu=100m,memory=256Mi".to_string()),
            ("cpu-cfs-quota", "true".to_string()),
            ("cluster-dns", "10.96.0.10".to_string()),
        ]
    );
    assert!(
        testing::logs()
            .iter()
            .any(|(_, line)| line.contains("somethingNew"))
    );
    ctx.kubelet = r#"{"maxPods": 1.5}"#.into();
    assert!(invalid_parameter(&ctx).contains("maxPods"));
}

#[test]
fn bootstrap_token_form() {
    assert!(is_bootstrap_token(TOKEN));
    assert!(!is_bootstrap_token("abcdef.0123456789abcdef.x"));
    assert!(!is_bootstrap_token(""));
}

#[test]
fn through_the_renderer_trait() {
    assert!(
        Kubeadm::render(context())
            .unwrap()
            .starts_with("#!/bin/sh\n")
    );
}
