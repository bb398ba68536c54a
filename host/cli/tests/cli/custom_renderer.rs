//! A renderer with a userData format of its own (`examples/plugins/talos`, a Talos machine
//! configuration) is bootable before it ships: `render --boot` prints what its node would
//! register with by the renderer's promise (WIT 0.2 `registration`), and `joinery simulate`
//! boots its nodes by that promise.

use std::path::{Path, PathBuf};

use crate::support::joinery;

/// The example packaged as `joinery plugins package` would for an author: `DIR/talos`.
fn packaged_talos(dir: &Path) -> PathBuf {
    let wasm =
        PathBuf::from(joinery_builtin_plugins::PLUGIN_WASM_DIR).join("joinery_example_talos.wasm");
    let out = dir.join("talos");
    let (ok, stdout, stderr) = joinery::<&std::ffi::OsStr>(&[
        "plugins".as_ref(),
        "package".as_ref(),
        "--manifest".as_ref(),
        "examples/plugins/talos/plugin.yaml".as_ref(),
        "--wasm".as_ref(),
        wasm.as_os_str(),
        "--out".as_ref(),
        out.as_os_str(),
    ]);
    assert!(ok, "{stdout}{stderr}");
    out
}

#[test]
fn render_boot_boots_a_custom_format_by_the_renderers_promise() {
    let dir = tempfile::tempdir().unwrap();
    let talos = packaged_talos(dir.path());
    let (ok, out, err) = joinery::<&std::ffi::OsStr>(&[
        "render".as_ref(),
        "--renderer".as_ref(),
        talos.as_os_str(),
        "--claim".as_ref(),
        "examples/render/nodeclaim.yaml".as_ref(),
        "--class".as_ref(),
        "examples/render/nodeclass-template.yaml".as_ref(),
        "--param".as_ref(),
        "token=example.token".as_ref(),
        "--provider-id-prefix".as_ref(),
        "simcloud://".as_ref(),
        "--boot".as_ref(),
    ]);
    assert!(ok, "{out}{err}");
    assert!(out.starts_with("boots by the renderer's promise"), "{out}");
    for line in [
        "  provider ID: simcloud://i-0boot0check0",
        "karpenter.sh/nodepool=default",
        "karpenter.sh/unregistered:NoExecute",
    ] {
        assert!(out.contains(line), "{line:?} in {out}");
    }
    // Without --boot it prints the Talos configuration itself, which no simulated kubelet reads.
    let (ok, out, err) = joinery::<&std::ffi::OsStr>(&[
        "render".as_ref(),
        "--renderer".as_ref(),
        talos.as_os_str(),
        "--claim".as_ref(),
        "examples/render/nodeclaim.yaml".as_ref(),
        "--class".as_ref(),
        "examples/render/nodeclass-template.yaml".as_ref(),
        "--param".as_ref(),
        "token=example.token".as_ref(),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("machine:\n  type: worker\n"), "{out}");
    let taints = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("register-with-taints: "))
        .unwrap_or_else(|| panic!("no register-with-taints in {out}"));
    assert!(
        taints.contains("karpenter.sh/unregistered:NoExecute"),
        "{out}"
    );
}

#[test]
fn the_simulator_boots_a_custom_format_by_the_renderers_promise() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    packaged_talos(&plugins);
    let report = dir.path().join("report.json");
    let (ok, out, err) = joinery::<&std::ffi::OsStr>(&[
        "simulate".as_ref(),
        "--quiet".as_ref(),
        "--plugin-dir".as_ref(),
        plugins.as_os_str(),
        "--report".as_ref(),
        report.as_os_str(),
        "examples/plugins/talos/scenario.yaml".as_ref(),
    ]);
    assert!(ok, "{out}{err}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let text = report.to_string();
    assert!(!text.contains("BootstrapFailed"), "{text}");
    // Without the plugin directory the renderer is missing: the run fails and says so.
    let (ok, out, err) = joinery::<&std::ffi::OsStr>(&[
        "simulate".as_ref(),
        "--quiet".as_ref(),
        "examples/plugins/talos/scenario.yaml".as_ref(),
    ]);
    assert!(!ok, "the scenario cannot pass without its renderer:\n{out}");
    assert!(format!("{out}{err}").contains("talos"), "{out}{err}");
}
