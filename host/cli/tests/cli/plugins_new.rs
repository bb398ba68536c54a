//! `joinery plugins new`: each kind of scaffold builds and passes its own test outside this
//! repository, and the renderer, built as a component and packaged, loads and renders.

use crate::support::{joinery, repo};
use std::path::{Path, PathBuf};
use std::process::Command;

/// `cargo ARGS` in `dir`, sharing the guest target directory of `./dev test` (the SDK and its
/// dependencies are built there already, at the versions of the plugins' lock file).
fn cargo(dir: &Path, args: &[&str]) -> (bool, String) {
    let target = plugins_target();
    let out = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .args(args)
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target)
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// The guest target directory (`JOINERY_PLUGINS_TARGET_DIR`, relative to the repository as
/// `./dev` takes it; default `target/plugins`).
fn plugins_target() -> PathBuf {
    repo().join(
        std::env::var_os("JOINERY_PLUGINS_TARGET_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("target/plugins")),
    )
}

/// Scaffolds `kind` into a temporary directory and runs its tests.
fn scaffold_and_test(kind: &str, root: &Path) -> PathBuf {
    let name = format!("hello-{kind}");
    let dir = root.join(&name);
    let sdk = repo().join("plugins/sdk");
    let (ok, stdout, stderr) = joinery(&[
        "plugins",
        "new",
        kind,
        &name,
        "--dir",
        dir.to_str().unwrap(),
        "--sdk",
        sdk.to_str().unwrap(),
    ]);
    assert!(ok, "{stdout}{stderr}");
    for file in ["Cargo.toml", "src/lib.rs", "plugin.yaml", "README.md"] {
        assert!(dir.join(file).is_file(), "{kind}: no {file}");
    }
    // Each scaffold offers only what its kind can use.
    let manifest = std::fs::read_to_string(dir.join("plugin.yaml")).unwrap();
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    match kind {
        "renderer" => {
            assert!(!manifest.contains("\ncapabilities:"), "{manifest}");
            assert!(!readme.contains("Kubernetes"), "{readme}");
            assert!(readme.contains("assert_shell_syntax"), "{readme}");
        }
        "pricing" => assert!(!manifest.contains("kubernetes:"), "{manifest}"),
        _ => assert!(manifest.contains("kubernetes: []"), "{manifest}"),
    }
    // The same dependency versions as the shipped plugins, so the build reuses theirs.
    std::fs::copy(repo().join("plugins/Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let (ok, out) = cargo(&dir, &["test"]);
    assert!(ok, "{kind}: the scaffold's tests fail:\n{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("test tests::") && l.ends_with("ok")),
        "{kind}: no test ran:\n{out}"
    );
    dir
}

#[test]
fn every_kind_of_scaffold_builds_and_passes_its_test_and_the_renderer_renders() {
    let root = tempfile::tempdir().unwrap();
    for kind in ["cloud", "pricing"] {
        scaffold_and_test(kind, root.path());
    }
    let dir = scaffold_and_test("renderer", root.path());
    let (ok, out) = cargo(&dir, &["build", "--release", "--target", "wasm32-wasip2"]);
    assert!(ok, "{out}");
    let target = plugins_target();
    std::fs::copy(
        target.join("wasm32-wasip2/release/hello_renderer.wasm"),
        dir.join("plugin.wasm"),
    )
    .unwrap();
    let dist = dir.join("dist");
    let (ok, stdout, stderr) = joinery(&[
        "plugins",
        "package",
        "--out",
        dist.to_str().unwrap(),
        dir.join("plugin.yaml").to_str().unwrap(),
        dir.join("plugin.wasm").to_str().unwrap(),
    ]);
    assert!(ok, "{stdout}{stderr}");
    let (ok, stdout, stderr) = joinery(&["plugins", "inspect", dist.to_str().unwrap()]);
    assert!(ok && stdout.contains("loads:      yes"), "{stdout}{stderr}");
    let (ok, stdout, stderr) = joinery(&[
        "render",
        "--renderer",
        dist.to_str().unwrap(),
        "--claim",
        "examples/render/nodeclaim.yaml",
        "--class",
        "examples/render/nodeclass-k3s.yaml",
        "--param",
        "greeting=hi",
    ]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.starts_with("#!/bin/sh\necho 'hi from hello-renderer: NodeClaim "),
        "{stdout}"
    );
}

#[test]
fn a_bad_name_or_an_existing_directory_is_refused() {
    let (ok, _, stderr) = joinery(&[
        "plugins",
        "new",
        "renderer",
        "Bad_Name",
        "--dir",
        "/nonexistent/x",
    ]);
    assert!(!ok && stderr.contains("lowercase letters"), "{stderr}");
    let root = tempfile::tempdir().unwrap();
    let (ok, _, stderr) = joinery(&[
        "plugins",
        "new",
        "pricing",
        "p",
        "--dir",
        root.path().to_str().unwrap(),
    ]);
    assert!(!ok && stderr.contains("already exists"), "{stderr}");
}
