//! Tests of the bootstrap formats, mostly through [`super::parse`] on the renderers' scripts.

use super::shell::printf;
use super::*;

/// The k3s renderer's output for a NodeClaim with a provider-ID command (format copied from
/// the renderer's documented, stable output).
const K3S_SCRIPT: &str = r#"#!/bin/sh
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
  - "q=it's \"x\""
node-taint:
  - "dedicated=gpu:NoSchedule"
  - "karpenter.sh/unregistered:NoExecute"
kubelet-arg:
  - "max-pods=58"
JOINERY_K3S_CONFIG
# The kubelet registers with provider ID <prefix><instance id>.
JOINERY_INSTANCE_ID="$(sh -c 'curl -s http://169.254.169.254/latest/meta-data/instance-id' | tr -d '[:space:]')"
case "$JOINERY_INSTANCE_ID" in
  ''|*[!A-Za-z0-9._:/-]*)
    echo "joinery: providerIDCommand printed no usable instance ID: '$JOINERY_INSTANCE_ID'" >&2
    exit 1 ;;
esac
printf '  - "provider-id=%s%s"\n' 'simcloud://' "$JOINERY_INSTANCE_ID" >> /etc/rancher/k3s/config.yaml
chmod 600 /etc/rancher/k3s/config.yaml
JOINERY_INSTALLER="$(mktemp)"
if command -v curl >/dev/null 2>&1; then
  curl -sfL 'https://get.k3s.io' -o "$JOINERY_INSTALLER"
else
  wget -qO "$JOINERY_INSTALLER" 'https://get.k3s.io'
fi
sh "$JOINERY_INSTALLER" agent
"#;

#[test]
fn k3s_script_with_the_provider_id_step() {
    let bootstrap = parse(K3S_SCRIPT, "i-0000002a", None).unwrap();
    assert_eq!(bootstrap.format, Format::K3s);
    assert_eq!(bootstrap.node_name, "default-abc12");
    assert_eq!(
        bootstrap.provider_id.as_deref(),
        Some("simcloud://i-0000002a")
    );
    assert_eq!(bootstrap.max_pods, Some(58));
    assert_eq!(bootstrap.labels["karpenter.sh/nodepool"], "default");
    assert_eq!(bootstrap.labels["q"], "it's \"x\"");
    assert_eq!(
        bootstrap.taints,
        vec![
            Taint::new("dedicated", "gpu", TaintEffect::NoSchedule),
            Taint::without_value("karpenter.sh/unregistered", TaintEffect::NoExecute)
        ]
    );
}

#[test]
fn k3s_without_a_provider_id_registers_with_the_k3s_scheme() {
    let script = K3S_SCRIPT.replace("printf '  - \"provider-id", "# printf '  - \"provider-id");
    let bootstrap = parse(&script, "i-1", None).unwrap();
    assert_eq!(
        bootstrap.provider_id.as_deref(),
        Some("k3s://default-abc12")
    );
    let unnamed = script.replace("node-name: \"default-abc12\"\n", "");
    assert_eq!(parse(&unnamed, "i-1", None).unwrap().node_name, "i-1");
}

#[test]
fn k3s_errors_are_reported() {
    let unterminated = K3S_SCRIPT.replace("JOINERY_K3S_CONFIG\n#", "#");
    assert_eq!(
        parse(&unterminated, "i-1", None),
        Err(BootstrapError::UnterminatedConfig("JOINERY_K3S_CONFIG"))
    );
    let bad_taint = K3S_SCRIPT.replace("dedicated=gpu:NoSchedule", "dedicated=gpu:Sometimes");
    assert!(matches!(
        parse(&bad_taint, "i-1", None),
        Err(BootstrapError::Taint(_))
    ));
}

/// The rke2 renderer's output (`joinery render`, copied verbatim) for a NodeClaim with a
/// provider-ID command on the simulated cloud.
const RKE2_SCRIPT: &str = r#"#!/bin/sh
# Joinery: join NodeClaim default-abc12 (NodePool default) to RKE2 as an agent. Generated, do not edit.
set -eu
umask 077
mkdir -p /etc/rancher/rke2
cat > /etc/rancher/rke2/config.yaml <<'JOINERY_RKE2_CONFIG'
server: "https://10.0.0.1:9345"
token: "K10secret::server:abc"
node-name: "default-abc12"
node-label:
  - "karpenter.sh/nodepool=default"
  - "q=it's \"x\""
node-taint:
  - "dedicated=gpu:NoSchedule"
  - "karpenter.sh/unregistered:NoExecute"
kubelet-arg:
  - "max-pods=58"
JOINERY_RKE2_CONFIG
# Provider ID: the cloud's prefix followed by the instance ID that providerIDCommand prints.
JOINERY_INSTANCE_ID="$(sh -c 'cat /var/lib/simcloud/instance-id' | tr -d '[:space:]')"
case "$JOINERY_INSTANCE_ID" in
  ''|*[!A-Za-z0-9._:/-]*)
    echo "joinery: providerIDCommand printed no usable instance ID: '$JOINERY_INSTANCE_ID'" >&2
    exit 1 ;;
esac
printf '  - "provider-id=%s%s"\n' 'simcloud://' "$JOINERY_INSTANCE_ID" >> /etc/rancher/rke2/config.yaml
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
"#;

/// The kubeadm renderer's output (`joinery render`, copied verbatim), v1beta4.
const KUBEADM_SCRIPT: &str = r#"#!/bin/sh
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
      - "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
nodeRegistration:
  name: "default-abc12"
  kubeletExtraArgs:
    - name: "node-labels"
      value: "karpenter.sh/nodepool=default,q=it's \"x\""
    - name: "register-with-taints"
      value: "dedicated=gpu:NoSchedule,karpenter.sh/unregistered:NoExecute"
    - name: "max-pods"
      value: "58"
JOINERY_KUBEADM_CONFIG
# Provider ID: the cloud's prefix followed by the instance ID that providerIDCommand prints.
JOINERY_INSTANCE_ID="$(sh -c 'cat /var/lib/simcloud/instance-id' | tr -d '[:space:]')"
case "$JOINERY_INSTANCE_ID" in
  ''|*[!A-Za-z0-9._:/-]*)
    echo "joinery: providerIDCommand printed no usable instance ID: '$JOINERY_INSTANCE_ID'" >&2
    exit 1 ;;
esac
printf '    - name: "provider-id"\n      value: "%s%s"\n' 'simcloud://' "$JOINERY_INSTANCE_ID" >> /etc/joinery/kubeadm-join.yaml
chmod 600 /etc/joinery/kubeadm-join.yaml
systemctl enable kubelet.service
kubeadm join --config /etc/joinery/kubeadm-join.yaml
"#;

/// The kubeadm renderer's output with `configAPIVersion: v1beta3` (copied verbatim).
const KUBEADM_V1BETA3_SCRIPT: &str = r#"#!/bin/sh
# Joinery: join NodeClaim default-abc12 (NodePool default) with kubeadm. Generated, do not edit.
set -eu
umask 077
mkdir -p /etc/joinery
cat > /etc/joinery/kubeadm-join.yaml <<'JOINERY_KUBEADM_CONFIG'
apiVersion: kubeadm.k8s.io/v1beta3
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: "10.0.0.1:6443"
    token: "abcdef.0123456789abcdef"
    caCertHashes:
      - "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
nodeRegistration:
  name: "default-abc12"
  kubeletExtraArgs:
    node-labels: "karpenter.sh/nodepool=default,q=it's \"x\""
    register-with-taints: "dedicated=gpu:NoSchedule,karpenter.sh/unregistered:NoExecute"
    max-pods: "58"
JOINERY_KUBEADM_CONFIG
# Provider ID: the cloud's prefix followed by the instance ID that providerIDCommand prints.
JOINERY_INSTANCE_ID="$(sh -c 'cat /var/lib/simcloud/instance-id' | tr -d '[:space:]')"
case "$JOINERY_INSTANCE_ID" in
  ''|*[!A-Za-z0-9._:/-]*)
    echo "joinery: providerIDCommand printed no usable instance ID: '$JOINERY_INSTANCE_ID'" >&2
    exit 1 ;;
esac
printf '    provider-id: "%s%s"\n' 'simcloud://' "$JOINERY_INSTANCE_ID" >> /etc/joinery/kubeadm-join.yaml
chmod 600 /etc/joinery/kubeadm-join.yaml
systemctl enable kubelet.service
kubeadm join --config /etc/joinery/kubeadm-join.yaml
"#;

fn expected_taints() -> Vec<Taint> {
    vec![
        Taint::new("dedicated", "gpu", TaintEffect::NoSchedule),
        Taint::without_value("karpenter.sh/unregistered", TaintEffect::NoExecute),
    ]
}

#[test]
fn rke2_script_with_the_provider_id_step() {
    let bootstrap = parse(RKE2_SCRIPT, "i-0000002a", None).unwrap();
    assert_eq!(bootstrap.format, Format::Rke2);
    assert_eq!(bootstrap.node_name, "default-abc12");
    assert_eq!(
        bootstrap.provider_id.as_deref(),
        Some("simcloud://i-0000002a")
    );
    assert_eq!(bootstrap.max_pods, Some(58));
    assert_eq!(bootstrap.labels["karpenter.sh/nodepool"], "default");
    assert_eq!(bootstrap.labels["q"], "it's \"x\"");
    assert_eq!(bootstrap.taints, expected_taints());
}

#[test]
fn rke2_without_a_provider_id_registers_with_the_rke2_scheme() {
    let script = RKE2_SCRIPT.replace("printf '  - \"provider-id", "# printf '  - \"provider-id");
    let bootstrap = parse(&script, "i-1", None).unwrap();
    assert_eq!(
        bootstrap.provider_id.as_deref(),
        Some("rke2://default-abc12")
    );
    assert_eq!(bootstrap.max_pods, Some(58));
}

#[test]
fn rke2_errors_are_reported() {
    let unterminated = RKE2_SCRIPT.replace("JOINERY_RKE2_CONFIG\n#", "#");
    assert_eq!(
        parse(&unterminated, "i-1", None),
        Err(BootstrapError::UnterminatedConfig("JOINERY_RKE2_CONFIG"))
    );
    let bad_label = RKE2_SCRIPT.replace(
        "\"karpenter.sh/nodepool=default\"",
        "\"karpenter.sh/nodepool\"",
    );
    assert!(matches!(
        parse(&bad_label, "i-1", None),
        Err(BootstrapError::Label(_))
    ));
    let not_yaml = RKE2_SCRIPT.replace("node-taint:\n", "node-taint: [\n");
    assert!(matches!(
        parse(&not_yaml, "i-1", None),
        Err(BootstrapError::Config("RKE2", _))
    ));
}

#[test]
fn kubeadm_script_with_the_provider_id_step() {
    for script in [KUBEADM_SCRIPT, KUBEADM_V1BETA3_SCRIPT] {
        let bootstrap = parse(script, "i-0000002a", None).unwrap();
        assert_eq!(bootstrap.format, Format::Kubeadm);
        assert_eq!(bootstrap.node_name, "default-abc12");
        assert_eq!(
            bootstrap.provider_id.as_deref(),
            Some("simcloud://i-0000002a")
        );
        assert_eq!(bootstrap.max_pods, Some(58));
        assert_eq!(bootstrap.labels.len(), 2);
        assert_eq!(bootstrap.labels["q"], "it's \"x\"");
        assert_eq!(bootstrap.taints, expected_taints());
    }
}

#[test]
fn kubeadm_flags_the_way_kubeadm_builds_them() {
    // Without the provider-ID step: no provider ID (no cloud controller in the picture).
    let script = KUBEADM_SCRIPT.replace("printf '    - name", "# printf '    - name");
    assert_eq!(parse(&script, "i-1", None).unwrap().provider_id, None);
    // Without nodeRegistration.name the node is named after the machine.
    let unnamed = KUBEADM_SCRIPT.replace("  name: \"default-abc12\"\n", "");
    assert_eq!(parse(&unnamed, "i-1", None).unwrap().node_name, "i-1");
    // nodeRegistration.taints count when kubeletExtraArgs has no register-with-taints.
    let taint_arg = "    - name: \"register-with-taints\"\n      value: \"dedicated=gpu:NoSchedule,karpenter.sh/unregistered:NoExecute\"\n";
    let structured = KUBEADM_SCRIPT.replace(taint_arg, "");
    let structured = structured.replace(
        "  kubeletExtraArgs:\n",
        "  taints:\n    - {key: dedicated, value: gpu, effect: NoSchedule}\n    \
         - {key: karpenter.sh/unregistered, effect: NoExecute}\n  kubeletExtraArgs:\n",
    );
    assert_eq!(
        parse(&structured, "i-1", None).unwrap().taints,
        expected_taints()
    );
}

#[test]
fn kubeadm_refuses_what_kubeadm_refuses() {
    let config_error = |script: &str| {
        matches!(
            parse(script, "i-1", None),
            Err(BootstrapError::Config("kubeadm", _))
        )
    };
    let never_joins = KUBEADM_SCRIPT.replace("kubeadm join --config", "echo kubeadm join --config");
    assert_eq!(
        parse(&never_joins, "i-1", None),
        Err(BootstrapError::KubeadmNotJoined)
    );
    let other_file = KUBEADM_SCRIPT.replace(
        "join --config /etc/joinery/kubeadm-join.yaml",
        "join --config /tmp/x.yaml",
    );
    assert_eq!(
        parse(&other_file, "i-1", None),
        Err(BootstrapError::KubeadmNotJoined)
    );
    let equals = KUBEADM_SCRIPT.replace("join --config /etc", "join --config=/etc");
    assert!(parse(&equals, "i-1", None).is_ok());
    let hashes = "    caCertHashes:\n      - \"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"\n";
    let unpinned = KUBEADM_SCRIPT.replace(hashes, "");
    assert!(config_error(&unpinned), "token discovery without a CA hash");
    let skipped = unpinned.replace(
        "    token:",
        "    unsafeSkipCAVerification: true\n    token:",
    );
    assert!(parse(&skipped, "i-1", None).is_ok());
    assert!(config_error(
        &KUBEADM_SCRIPT.replace("kubeadm.k8s.io/v1beta4", "kubeadm.k8s.io/v1beta2")
    ));
    assert!(config_error(
        &KUBEADM_SCRIPT.replace("kind: JoinConfiguration", "kind: InitConfiguration")
    ));
    // The extra arguments' shape must match the version.
    assert!(config_error(
        &KUBEADM_SCRIPT.replace("kubeadm.k8s.io/v1beta4", "kubeadm.k8s.io/v1beta3")
    ));
    assert!(config_error(
        &KUBEADM_V1BETA3_SCRIPT.replace("kubeadm.k8s.io/v1beta3", "kubeadm.k8s.io/v1beta4")
    ));
    let unterminated = KUBEADM_SCRIPT.replace("JOINERY_KUBEADM_CONFIG\n#", "#");
    assert_eq!(
        parse(&unterminated, "i-1", None),
        Err(BootstrapError::UnterminatedConfig("JOINERY_KUBEADM_CONFIG"))
    );
}

#[test]
fn a_script_for_another_path_is_not_understood() {
    let elsewhere = RKE2_SCRIPT.replace(
        "/etc/rancher/rke2/config.yaml <<",
        "/etc/rancher/other/config.yaml <<",
    );
    assert_eq!(
        parse(&elsewhere, "i-1", None),
        Err(BootstrapError::NotUnderstood)
    );
}

#[test]
fn kubelet_command_lines() {
    let script = "#!/bin/bash\nset -e\nINSTANCE=\"$(curl -s http://169.254.169.254/id)\"\n\
        /usr/bin/kubelet --kubeconfig=/etc/kubernetes/kubelet.conf \\\n  --node-labels=karpenter.sh/nodepool=default,team=a \\\n  \
        --register-with-taints=karpenter.sh/unregistered:NoExecute,gpu=true:NoSchedule \\\n  \
        --provider-id=simcloud://$INSTANCE --hostname-override My-Node --max-pods=20 &\n";
    let bootstrap = parse(script, "i-7", None).unwrap();
    assert_eq!(bootstrap.format, Format::KubeletFlags);
    assert_eq!(bootstrap.node_name, "my-node");
    assert_eq!(bootstrap.provider_id.as_deref(), Some("simcloud://i-7"));
    assert_eq!(bootstrap.max_pods, Some(20));
    assert_eq!(bootstrap.labels.len(), 2);
    assert_eq!(bootstrap.taints.len(), 2);

    let unit = "write_files:\n- path: /etc/systemd/system/kubelet.service\n  content: |\n    [Service]\n    \
        ExecStart=/usr/bin/kubelet --provider-id=simcloud://$(cat /run/instance-id) --node-labels=a=b\n";
    let bootstrap = parse(unit, "i-8", None).unwrap();
    assert_eq!(
        (
            bootstrap.node_name.as_str(),
            bootstrap.provider_id.as_deref()
        ),
        ("i-8", Some("simcloud://i-8"))
    );
}

#[test]
fn other_scripts_are_not_understood() {
    assert_eq!(
        parse(
            "#!/bin/sh\necho hello\nsystemctl restart kubelet\n",
            "i-1",
            None
        ),
        Err(BootstrapError::NotUnderstood)
    );
    assert_eq!(parse("", "i-1", None), Err(BootstrapError::NotUnderstood));
}

#[test]
fn printf_reuses_the_format_and_expands_escapes() {
    assert_eq!(
        printf(
            "%s=%s\\n",
            &["a".into(), "1".into(), "b".into(), "2".into()]
        ),
        "a=1\nb=2\n"
    );
    assert_eq!(printf("100%%\\t", &[]), "100%\t");
}

/// A format no parser reads boots by its renderer's promise, and only then.
#[test]
fn an_unknown_format_boots_by_its_renderers_promise() {
    let ignition = r#"{"ignition":{"version":"3.4.0"},"systemd":{"units":[]}}"#;
    assert_eq!(
        parse(ignition, "i-7", None),
        Err(BootstrapError::NotUnderstood)
    );
    let promise = DeclaredBoot {
        node_name: None,
        labels: BTreeMap::from([("team".to_string(), "a".to_string())]),
        taints: vec!["karpenter.sh/unregistered:NoExecute".to_string()],
        provider_id_prefix: Some("simcloud://".to_string()),
    };
    let boot = parse(ignition, "i-7", Some(&promise)).unwrap();
    assert_eq!(boot.format, Format::Declared);
    assert_eq!(boot.node_name, "i-7");
    assert_eq!(boot.labels["team"], "a");
    assert_eq!(boot.taints.len(), 1);
    assert_eq!(boot.provider_id.as_deref(), Some("simcloud://i-7"));
    // A promise cannot smuggle in a malformed taint.
    let bad = DeclaredBoot {
        taints: vec!["no-effect".to_string()],
        ..promise.clone()
    };
    assert!(matches!(
        parse(ignition, "i-7", Some(&bad)),
        Err(BootstrapError::Taint(_))
    ));
    // A format the simulator reads wins over a promise (the promise is checked elsewhere).
    let kubelet = "#!/bin/sh\nexec kubelet --node-labels=team=b\n";
    let boot = parse(kubelet, "i-7", Some(&promise)).unwrap();
    assert_eq!(boot.format, Format::KubeletFlags);
    // The table hands back what was declared for exactly that text.
    let table = DeclaredBoots::default();
    table.declare(ignition, promise.clone());
    assert_eq!(table.get(ignition), Some(promise));
    assert_eq!(table.get("other"), None);
}
