//! The `joinery` binary's commands, run as a user would.

use std::process::Command;

#[test]
fn crds_prints_the_karpenter_crds_then_the_builtin_node_classes() {
    let (ok, out, _) = joinery(&["crds"]);
    assert!(ok);
    let names: Vec<String> = serde_norway::Deserializer::from_str(&out)
        .map(|doc| {
            let v = serde_norway::Value::deserialize(doc).unwrap();
            v["metadata"]["name"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(
        names,
        [
            "nodepools.karpenter.sh",
            "nodeclaims.karpenter.sh",
            "nodeoverlays.karpenter.sh",
            "capacitybuffers.autoscaling.x-k8s.io",
            "simnodeclasses.sim.joinery.dev",
            "exoscalenodeclasses.karpenter.k8s.exoscale",
            "clevernodeclasses.karpenter.clever-cloud.com",
            "clusterapinodeclasses.karpenter.cluster.x-k8s.io"
        ]
    );
}

use crate::support::{joinery, repo};
use serde::Deserialize;

#[test]
fn inspect_reports_size_digest_and_that_each_shipped_plugin_loads() {
    for name in ["template", "k3s", "rke2", "kubeadm", "synthetic-pricing"] {
        let (ok, out, err) = joinery(&["plugins", "inspect", name, "--json"]);
        assert!(ok, "{name}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["loads"], true, "{name}");
        assert_eq!(v["withinSizeBudget"], true, "{name}");
        assert!(v["sizeBytes"].as_u64().unwrap() > 10_000, "{name}");
        assert_eq!(v["sha256"].as_str().unwrap().len(), 64);
        assert!(
            v["exports"]
                .as_array()
                .unwrap()
                .iter()
                .any(|e| e.as_str().unwrap().starts_with("joinery:plugin/"))
        );
    }
}

#[test]
fn inspect_of_an_unknown_name_says_what_exists() {
    let (ok, _, err) = joinery(&["plugins", "inspect", "no-such-plugin"]);
    assert!(!ok);
    assert!(err.contains("template") && err.contains("k3s"), "{err}");
}

#[test]
fn render_with_the_verbatim_template_fills_only_placeholders() {
    let (ok, out, err) = joinery(&[
        "render",
        "--claim",
        "examples/render/nodeclaim.yaml",
        "--class",
        "examples/render/nodeclass-template.yaml",
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("--node-name \"default-7xk2p\""), "{out}");
    assert!(
        out.contains("node.kubernetes.io/instance-type=standard.medium"),
        "{out}"
    );
    assert!(out.contains("karpenter.sh/unregistered:NoExecute"), "{out}");
    assert!(
        out.contains("K3S_TOKEN=\"$(cat /run/k3s-token)\""),
        "shell syntax passes through untouched: {out}"
    );
}

#[test]
fn render_with_k3s_needs_the_token_secret_and_uses_it() {
    let args = [
        "render",
        "--renderer",
        "k3s",
        "--claim",
        "examples/render/nodeclaim.yaml",
        "--class",
        "examples/render/nodeclass-k3s.yaml",
    ];
    let (ok, _, err) = joinery(&args);
    assert!(!ok, "rendering without the token secret must fail");
    assert!(
        err.contains("k3s/token"),
        "the error names the missing secret: {err}"
    );
    let mut with_secret = args.to_vec();
    with_secret.extend([
        "--secret",
        "k3s/token=K10abc",
        "--provider-id-prefix",
        "exoscale://",
    ]);
    let (ok, out, err) = joinery(&with_secret);
    assert!(ok, "{err}");
    assert!(out.contains("token: \"K10abc\""), "{out}");
    assert!(out.contains("max-pods=110"), "{out}");
    assert!(
        out.contains("provider-id=%s%s") && out.contains("'exoscale://'"),
        "the provider ID is built at boot from the prefix: {out}"
    );
}

#[test]
fn render_with_rke2_needs_the_token_secret_and_uses_it() {
    let args = [
        "render",
        "--claim",
        "examples/render/nodeclaim.yaml",
        "--class",
        "examples/render/nodeclass-rke2.yaml",
    ];
    let (ok, _, err) = joinery(&args);
    assert!(!ok, "rendering without the token secret must fail");
    assert!(
        err.contains("rke2/token"),
        "the error names the missing secret: {err}"
    );
    let mut with_secret = args.to_vec();
    with_secret.extend([
        "--secret",
        "rke2/token=K10abc",
        "--provider-id-prefix",
        "exoscale://",
    ]);
    let (ok, out, err) = joinery(&with_secret);
    assert!(ok, "{err}");
    assert!(
        out.contains("cat > /etc/rancher/rke2/config.yaml <<'JOINERY_RKE2_CONFIG'\n"),
        "{out}"
    );
    assert!(
        out.contains("server: \"https://10.0.0.10:9345\"\n") && out.contains("token: \"K10abc\"\n"),
        "{out}"
    );
    assert!(out.contains("node-name: \"default-7xk2p\"\n"), "{out}");
    assert!(
        out.contains("  - \"karpenter.sh/unregistered:NoExecute\"\n"),
        "{out}"
    );
    assert!(
        out.contains("  - \"max-pods=110\"\n  - \"system-reserved=cpu=100m,memory=256Mi\"\n"),
        "{out}"
    );
    assert!(
        out.contains("provider-id=%s%s") && out.contains("'exoscale://'"),
        "the provider ID is built at boot: {out}"
    );
    assert!(
        out.contains("INSTALL_RKE2_TYPE=agent INSTALL_RKE2_VERSION='v1.33.4+rke2r1' sh"),
        "{out}"
    );
    assert!(
        out.ends_with("systemctl enable --now rke2-agent.service\n"),
        "{out}"
    );
    let (ok, _, err) =
        joinery(&[&with_secret[..], &["--param", "serverUrl=https://x:9345"]].concat());
    assert!(
        !ok && err.contains("serverUrl"),
        "an unknown parameter is refused: {err}"
    );
}

#[test]
fn render_with_kubeadm_writes_a_join_configuration() {
    let args = [
        "render",
        "--claim",
        "examples/render/nodeclaim.yaml",
        "--class",
        "examples/render/nodeclass-kubeadm.yaml",
    ];
    let (ok, _, err) = joinery(&args);
    assert!(
        !ok,
        "rendering without the bootstrap token secret must fail"
    );
    assert!(
        err.contains("kubeadm/token"),
        "the error names the missing secret: {err}"
    );
    let (ok, _, err) = joinery(&[&args[..], &["--secret", "kubeadm/token=hunter2"]].concat());
    assert!(
        !ok && err.contains("[a-z0-9]{6}") && !err.contains("hunter2"),
        "a malformed token is refused, unprinted: {err}"
    );
    let mut with_secret = args.to_vec();
    with_secret.extend([
        "--secret",
        "kubeadm/token=abcdef.0123456789abcdef",
        "--provider-id-prefix",
        "exoscale://",
    ]);
    let (ok, out, err) = joinery(&with_secret);
    assert!(ok, "{err}");
    assert!(
        out.contains("apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\n"),
        "{out}"
    );
    assert!(
        out.contains(
            "    apiServerEndpoint: \"10.0.0.10:6443\"\n    token: \"abcdef.0123456789abcdef\"\n"
        ),
        "{out}"
    );
    assert!(
        out.contains("    caCertHashes:\n      - \"sha256:2f4b6c1d"),
        "{out}"
    );
    assert!(out.contains("  name: \"default-7xk2p\"\n"), "{out}");
    assert!(out.contains("    - name: \"register-with-taints\"\n      value: \"dedicated=web:NoSchedule,karpenter.sh/unregistered:NoExecute,"), "{out}");
    assert!(
        out.contains("    - name: \"max-pods\"\n      value: \"110\"\n"),
        "{out}"
    );
    assert!(
        out.contains(
            "printf '    - name: \"provider-id\"\\n      value: \"%s%s\"\\n' 'exoscale://'"
        ),
        "{out}"
    );
    assert!(
        out.contains("apt-get install -y kubelet kubeadm\n")
            && out.contains("https://pkgs.k8s.io/core:/stable:/v1.33/deb/"),
        "{out}"
    );
    assert!(
        out.ends_with("kubeadm join --config /etc/joinery/kubeadm-join.yaml\n"),
        "{out}"
    );
    let (ok, out, err) =
        joinery(&[&with_secret[..], &["--param", "configAPIVersion=v1beta3"]].concat());
    assert!(ok, "{err}");
    assert!(
        out.contains("apiVersion: kubeadm.k8s.io/v1beta3\n")
            && out.contains("    max-pods: \"110\"\n"),
        "{out}"
    );
}

#[test]
fn bench_scheduling_solves_upstreams_workloads_with_upstreams_node_counts() {
    let (ok, out, err) = joinery(&[
        "bench",
        "scheduling",
        "--workload",
        "diverse-100",
        "--workload",
        "ignore-preferences-4000",
        "--runs",
        "1",
        "--json",
    ]);
    assert!(ok, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for row in rows {
        assert_eq!(row["placedPods"], row["pods"], "{row}");
        // Upstream's node counts: 20 for diverse-100 (20 hostname anti-affinity pods), 21 when
        // preferences are ignored.
        assert_eq!(row["nodes"], row["upstreamNodes"], "{row}");
        let (cost, bound) = (
            row["costPerHour"].as_f64().unwrap(),
            row["costLowerBound"].as_f64().unwrap(),
        );
        assert!(
            bound > 0.0 && cost >= bound - 1e-9,
            "the bound is a lower bound: {row}"
        );
        assert!(row["peakRssMiB"].as_f64().unwrap() > 0.0, "{row}");
        assert!(
            row["upstreamSeconds"].as_f64().unwrap() > 0.0 && row["speedup"].as_f64().is_some(),
            "{row}"
        );
    }
    assert_eq!(rows[0]["workload"], "diverse-100");
    assert_eq!(rows[0]["pods"], 100);
    let (ok, _, err) = joinery(&["bench", "scheduling", "--workload", "diverse-7"]);
    assert!(
        !ok && err.contains("unknown workload \"diverse-7\"") && err.contains("diverse-20000"),
        "{err}"
    );
}

/// `joinery bench controller` on a small cluster: the two processes start, the controller
/// syncs, and the burst gets NodeClaims through real provisioning passes.
#[test]
fn bench_controller_runs_the_controller_against_a_preloaded_sim_serve() {
    let (ok, out, err) = joinery(&[
        "bench",
        "controller",
        "--nodes",
        "20",
        "--pods",
        "200",
        "--pending",
        "30",
        "--idle-seconds",
        "1",
        "--json",
    ]);
    assert!(ok, "{err}");
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (
            report["nodes"].as_u64(),
            report["pods"].as_u64(),
            report["pending"].as_u64()
        ),
        (Some(20), Some(200), Some(30))
    );
    assert!(report["nodeclaims"].as_u64().unwrap() >= 1, "{report}");
    assert!(report["passes"].as_u64().unwrap() >= 1, "{report}");
    assert!(
        report["syncSeconds"].as_f64().unwrap() > 0.0
            && report["burstToNodeclaimsSeconds"].as_f64().unwrap() > 0.0,
        "{report}"
    );
    assert!(
        report["peakRssMib"].as_f64().unwrap() > 0.0
            && report["serverRssMib"].as_f64().unwrap() > 0.0,
        "{report}"
    );
    let (idle, idle_max) = (
        report["rssIdleMib"].as_f64().unwrap(),
        report["rssIdleMaxMib"].as_f64().unwrap(),
    );
    assert!(
        0.0 < idle && idle <= idle_max,
        "the idle median is within the samples: {report}"
    );
    let (ok, _, err) = joinery(&["sim", "serve", "--preload-pods", "10"]);
    assert!(
        !ok && err.contains("--preload-pods needs --preload-nodes"),
        "{err}"
    );
}

/// One exit-code convention: 0 done, 1 a check failed, 2 a usage error, 3 a runtime error.
#[test]
fn exit_codes_tell_usage_errors_runtime_errors_and_failed_checks_apart() {
    let code = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_joinery"))
            .args(args)
            .output()
            .unwrap()
            .status
            .code()
    };
    assert_eq!(code(&["no-such-command"]), Some(2));
    assert_eq!(
        code(&["schedule"]),
        Some(2),
        "a missing argument is a usage error"
    );
    assert_eq!(code(&["--help"]), Some(0));
    assert_eq!(
        code(&["simulate", "no-such-scenario.yaml"]),
        Some(3),
        "an unreadable input is a runtime error"
    );
    assert_eq!(code(&["plugins", "inspect", "no-such-plugin"]), Some(3));
    assert_eq!(code(&["plugins", "list"]), Some(0));
    let bad_delay = std::process::Command::new(env!("CARGO_BIN_EXE_joinery"))
        .args(["sim", "serve", "--boot-delay", "soon"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&bad_delay.stderr);
    assert_eq!(bad_delay.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--boot-delay") && err.contains("Go duration"),
        "{err}"
    );
}

/// `plugins list --json`: one object per plugin, with the fields scripts read.
#[test]
fn plugins_list_prints_json_on_request() {
    let (ok, stdout, stderr) = joinery(&["plugins", "list", "--json"]);
    assert!(ok, "{stderr}");
    let plugins: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let k3s = plugins
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "k3s")
        .expect("k3s is built in");
    assert_eq!(k3s["kind"], "userdata-renderer");
    assert_eq!(k3s["source"], "built-in");
    assert_eq!(k3s["sha256"].as_str().unwrap().len(), 64);
    assert!(k3s["sizeBytes"].as_u64().unwrap() > 0);
    let simcloud = plugins
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "simcloud")
        .unwrap();
    assert_eq!(simcloud["nodeClass"]["kind"], "SimNodeClass");
}

/// `plugins compile` fills the cache directory it is given with one compiled file per plugin,
/// named by the plugin's digest (what `joinery run` then loads instead of compiling), and
/// refuses to run without one.
#[test]
fn plugins_compile_fills_the_cache_and_needs_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let (ok, stdout, stderr) = joinery(&[
        "plugins",
        "compile",
        "--plugin-cache-dir",
        cache.to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");
    let (_, listed, _) = joinery(&["plugins", "list", "--json"]);
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    let mut digests: Vec<String> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["sha256"].as_str().unwrap().to_string())
        .collect();
    let mut files: Vec<String> = std::fs::read_dir(&cache)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|name| Some(name.strip_suffix(".cwasm")?.split_once('-')?.0.to_string()))
        .collect();
    digests.sort();
    files.sort();
    assert_eq!(files, digests, "one compiled file per plugin");
    assert!(
        stdout.contains(&format!("{} plugins compiled into", digests.len())),
        "{stdout}"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_joinery"))
        .args(["plugins", "compile"])
        .env_remove("JOINERY_PLUGIN_CACHE_DIR")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(err.contains("--plugin-cache-dir"), "{err}");
}

/// The SDK carries its own copy of the WIT (so it builds outside this repository and can be
/// published); it must be the host's, file for file.
#[test]
fn the_sdk_carries_the_hosts_wit_unchanged() {
    let pairs = [
        ("wit/v0.2", "plugins/sdk/wit/v0.2"),
        ("wit/deps", "plugins/sdk/wit/v0.2/deps"),
    ];
    for (host, sdk) in pairs {
        let mut count = 0;
        for entry in std::fs::read_dir(repo().join(host)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "wit") {
                continue;
            }
            let name = path.file_name().unwrap();
            let copy = repo().join(sdk).join(name);
            assert_eq!(
                std::fs::read_to_string(&path).unwrap(),
                std::fs::read_to_string(&copy).unwrap_or_default(),
                "{sdk}/{} differs from {host}/{}: copy it (cp {host}/*.wit {sdk}/)",
                name.to_string_lossy(),
                name.to_string_lossy()
            );
            count += 1;
        }
        assert!(count >= 6, "{host}: {count} files");
        let copies = std::fs::read_dir(repo().join(sdk))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "wit")
            })
            .count();
        assert_eq!(copies, count, "{sdk} holds a WIT file {host} does not");
    }
}

#[test]
fn a_renderer_name_means_the_loaded_plugin_and_a_directory_must_be_a_path() {
    let dir = tempfile::tempdir().unwrap();
    // A source folder named like a built-in plugin, and one named like no plugin.
    std::fs::create_dir(dir.path().join("k3s")).unwrap();
    std::fs::create_dir(dir.path().join("my-join")).unwrap();
    let claim = repo().join("examples/render/nodeclaim.yaml");
    let class = repo().join("examples/render/nodeclass-template.yaml");
    let render = |renderer: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_joinery"))
            .args(["render", "--renderer", renderer, "--claim"])
            .arg(&claim)
            .arg("--class")
            .arg(&class)
            .current_dir(dir.path())
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (ok, err) = render("k3s");
    assert!(!ok);
    assert!(
        err.contains("both a loaded plugin and a file or directory here are named \"k3s\"")
            && err.contains("./k3s"),
        "{err}"
    );
    let (ok, err) = render("my-join");
    assert!(!ok);
    assert!(err.contains("write ./my-join"), "{err}");
    // Outside that folder, the name is the built-in plugin.
    let (ok, _, err) = joinery(&[
        "render",
        "--renderer",
        "template",
        "--claim",
        "examples/render/nodeclaim.yaml",
        "--class",
        "examples/render/nodeclass-template.yaml",
    ]);
    assert!(ok, "{err}");
}

#[test]
fn render_boot_prints_what_the_simulated_kubelet_would_register_or_why_not() {
    let (ok, out, err) = joinery(&[
        "render",
        "--renderer",
        "k3s",
        "--claim",
        "examples/render/nodeclaim.yaml",
        "--class",
        "examples/render/nodeclass-k3s.yaml",
        "--secret",
        "k3s/token=K10boot",
        "--provider-id-prefix",
        "simcloud://",
        "--boot",
    ]);
    assert!(ok, "{out}{err}");
    assert!(out.starts_with("boots as a k3s node"), "{out}");
    for line in [
        "  provider ID: simcloud://i-0boot0check0",
        "karpenter.sh/nodepool=default",
        "karpenter.sh/unregistered:NoExecute",
        "  then:        Joinery removes karpenter.sh/unregistered:NoExecute",
    ] {
        assert!(out.contains(line), "{line:?} in {out}");
    }
    // The node name is the NodeClaim's.
    let claim = std::fs::read_to_string(repo().join("examples/render/nodeclaim.yaml")).unwrap();
    let name = claim
        .lines()
        .find_map(|l| l.trim().strip_prefix("name: "))
        .unwrap()
        .trim();
    assert!(out.contains(&format!("  node name:   {name}")), "{out}");
    // A plain template script is no bootstrap a kubelet runs: nothing registers, exit code 1.
    let out = Command::new(env!("CARGO_BIN_EXE_joinery"))
        .args([
            "render",
            "--renderer",
            "template",
            "--claim",
            "examples/render/nodeclaim.yaml",
            "--class",
            "examples/render/nodeclass-template.yaml",
            "--boot",
        ])
        .current_dir(repo())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("would not register: the userData is neither"),
        "{stdout}"
    );
}
