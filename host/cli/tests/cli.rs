//! The `joinery` binary's commands, run as a user would.

use std::path::PathBuf;
use std::process::Command;

fn joinery(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_joinery")).args(args).current_dir(repo()).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn crds_prints_the_three_karpenter_crds() {
    let (ok, out, _) = joinery(&["crds"]);
    assert!(ok);
    let names: Vec<String> = serde_yaml::Deserializer::from_str(&out)
        .map(|doc| {
            let v = serde_yaml::Value::deserialize(doc).unwrap();
            v["metadata"]["name"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(names, ["nodepools.karpenter.sh", "nodeclaims.karpenter.sh", "nodeoverlays.karpenter.sh"]);
}

use serde::Deserialize;

#[test]
fn inspect_reports_size_digest_and_that_each_shipped_plugin_loads() {
    for name in ["template", "k3s", "synthetic-pricing"] {
        let (ok, out, err) = joinery(&["plugins", "inspect", name, "--json"]);
        assert!(ok, "{name}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["loads"], true, "{name}");
        assert_eq!(v["withinSizeBudget"], true, "{name}");
        assert!(v["sizeBytes"].as_u64().unwrap() > 10_000, "{name}");
        assert_eq!(v["sha256"].as_str().unwrap().len(), 64);
        assert!(v["exports"].as_array().unwrap().iter().any(|e| e.as_str().unwrap().starts_with("joinery:plugin/")));
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
    assert!(out.contains("node.kubernetes.io/instance-type=standard.medium"), "{out}");
    assert!(out.contains("karpenter.sh/unregistered:NoExecute"), "{out}");
    assert!(out.contains("K3S_TOKEN=\"$(cat /run/k3s-token)\""), "shell syntax passes through untouched: {out}");
}

#[test]
fn render_with_k3s_needs_the_token_secret_and_uses_it() {
    let args = ["render", "--renderer", "k3s", "--claim", "examples/render/nodeclaim.yaml", "--class", "examples/render/nodeclass-k3s.yaml"];
    let (ok, _, err) = joinery(&args);
    assert!(!ok, "rendering without the token secret must fail");
    assert!(err.contains("k3s/token"), "the error names the missing secret: {err}");
    let mut with_secret = args.to_vec();
    with_secret.extend(["--secret", "k3s/token=K10abc", "--provider-id-prefix", "exoscale://"]);
    let (ok, out, err) = joinery(&with_secret);
    assert!(ok, "{err}");
    assert!(out.contains("token: \"K10abc\""), "{out}");
    assert!(out.contains("max-pods=110"), "{out}");
    assert!(out.contains("provider-id=%s%s") && out.contains("'exoscale://'"), "the provider ID is built at boot from the prefix: {out}");
}
