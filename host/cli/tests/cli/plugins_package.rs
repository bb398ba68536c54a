//! `joinery plugins package`: a plugin as a ConfigMap (and as a directory), loaded back the
//! way a mounted ConfigMap is.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::support::{joinery, repo};
use joinery_runtime::manifest::PluginManifest;
use joinery_runtime::plugin::sha256_hex;
use k8s_openapi::api::core::v1::ConfigMap;

/// `joinery plugins package ARGS…`.
fn package(args: &[&dyn AsRef<std::ffi::OsStr>]) -> (bool, String, String) {
    let mut all: Vec<&std::ffi::OsStr> = vec!["plugins".as_ref(), "package".as_ref()];
    all.extend(args.iter().map(|a| a.as_ref()));
    joinery(&all)
}

/// The built-in k3s renderer: its source manifest, its built component and the component's bytes.
fn k3s() -> (PathBuf, PathBuf, Vec<u8>) {
    let manifest = repo().join("plugins/k3s/plugin.yaml");
    let wasm =
        PathBuf::from(joinery_builtin_plugins::PLUGIN_WASM_DIR).join("joinery_plugin_k3s.wasm");
    let bytes = std::fs::read(&wasm).unwrap();
    (manifest, wasm, bytes)
}

fn gunzip(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes)
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// `len` bytes that do not compress, behind a wasm header (the packager checks for one).
fn incompressible_component(len: usize) -> Vec<u8> {
    let mut bytes = b"\0asm\x0d\0\x01\0".to_vec();
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    while bytes.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        bytes.extend_from_slice(&state.to_le_bytes());
    }
    bytes.truncate(len);
    bytes
}

/// Writes a ConfigMap's files the way the kubelet mounts them: the files in a timestamped
/// directory, `..data` pointing at it, and each key a symlink through `..data`.
fn mount(configmap: &ConfigMap, dir: &Path) {
    let data = dir.join("..2026_12_01_00_00_00.000000001");
    std::fs::create_dir_all(&data).unwrap();
    let mut keys = Vec::new();
    for (key, value) in configmap.data.iter().flatten() {
        std::fs::write(data.join(key), value).unwrap();
        keys.push(key.clone());
    }
    for (key, value) in configmap.binary_data.iter().flatten() {
        std::fs::write(data.join(key), &value.0).unwrap();
        keys.push(key.clone());
    }
    std::os::unix::fs::symlink(data.file_name().unwrap(), dir.join("..data")).unwrap();
    for key in keys {
        std::os::unix::fs::symlink(Path::new("..data").join(&key), dir.join(&key)).unwrap();
    }
}

#[test]
fn a_builtin_renderer_becomes_a_configmap_that_round_trips_and_loads() {
    let (manifest, wasm, bytes) = k3s();
    let (ok, out, err) = package(&[
        &"--configmap",
        &"k3s-plugin",
        &"--namespace",
        &"joinery",
        &manifest,
        &wasm,
    ]);
    assert!(ok, "{err}");
    let out_configmap = out.clone();
    // A ConfigMap this size applies client-side too: no warning about it.
    assert!(!err.contains("client-side"), "{err}");

    let configmap: ConfigMap = serde_norway::from_str(&out).expect("stdout is one ConfigMap");
    assert!(
        out.contains("apiVersion: v1") && out.contains("kind: ConfigMap"),
        "{out}"
    );
    assert_eq!(configmap.metadata.name.as_deref(), Some("k3s-plugin"));
    assert_eq!(configmap.metadata.namespace.as_deref(), Some("joinery"));
    let data = configmap.data.as_ref().unwrap();
    let binary = configmap.binary_data.as_ref().unwrap();
    assert_eq!(data.keys().collect::<Vec<_>>(), ["plugin.yaml"]);
    assert_eq!(
        binary.keys().collect::<Vec<_>>(),
        ["plugin.wasm.gz"],
        "a component compresses well: stored gzipped"
    );

    let packaged = PluginManifest::parse(&data["plugin.yaml"], "configmap").unwrap();
    assert_eq!(packaged.name, "k3s");
    assert_eq!(packaged.component, "plugin.wasm.gz");
    assert_eq!(
        packaged.sha256.as_deref(),
        Some(sha256_hex(&bytes).as_str()),
        "the digest of the uncompressed component"
    );
    let stored = &binary["plugin.wasm.gz"].0;
    assert!(stored.len() < bytes.len());
    assert_eq!(
        gunzip(stored),
        bytes,
        "binaryData round-trips the component"
    );

    // Mounted as the kubelet would, the directory loads: the host gunzips plugin.wasm.gz and
    // checks its digest.
    let mounted = tempfile::tempdir().unwrap();
    mount(&configmap, mounted.path());
    let (ok, out, err) = joinery(&[
        "plugins".as_ref(),
        "inspect".as_ref(),
        mounted.path().as_os_str(),
        "--json".as_ref(),
    ]);
    assert!(ok, "{err}");
    let inspected: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(inspected["loads"], true, "{inspected}");
    assert_eq!(
        inspected["sha256"].as_str(),
        Some(sha256_hex(&bytes).as_str())
    );

    // The ConfigMap's YAML itself, as an author holds it, inspects and renders the same.
    let yaml = mounted.path().join("k3s-configmap.yaml");
    std::fs::write(&yaml, &out_configmap).unwrap();
    let (ok, out, err) = joinery(&[
        "plugins".as_ref(),
        "inspect".as_ref(),
        yaml.as_os_str(),
        "--json".as_ref(),
    ]);
    assert!(ok, "{err}");
    let from_yaml: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(from_yaml["loads"], true, "{from_yaml}");
    assert_eq!(from_yaml["sha256"], inspected["sha256"]);
    let (ok, out, err) = joinery(&[
        "render".as_ref(),
        "--renderer".as_ref(),
        yaml.as_os_str(),
        "--claim".as_ref(),
        crate::support::repo()
            .join("examples/render/nodeclaim.yaml")
            .as_os_str(),
        "--class".as_ref(),
        crate::support::repo()
            .join("examples/render/nodeclass-k3s.yaml")
            .as_os_str(),
        "--secret".as_ref(),
        "k3s/token=K10configmap".as_ref(),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("K10configmap"), "{out}");
}

#[test]
fn a_directory_or_files_or_flags_package_the_same_configmap() {
    let (manifest, wasm, bytes) = k3s();
    let (ok, from_files, err) = package(&[&"--configmap", &"k3s", &wasm, &manifest]);
    assert!(ok, "{err}");

    // A source-like directory: plugin.yaml and plugin.wasm.
    let plain = tempfile::tempdir().unwrap();
    std::fs::copy(&manifest, plain.path().join("plugin.yaml")).unwrap();
    std::fs::write(plain.path().join("plugin.wasm"), &bytes).unwrap();
    let (ok, from_dir, err) = package(&[&"--configmap", &"k3s", &plain.path()]);
    assert!(ok, "{err}");
    assert_eq!(from_dir, from_files);

    // A directory `--out --gzip` wrote (plugin.wasm.gz with its sha256): the same again.
    let written = tempfile::tempdir().unwrap();
    let out_dir = written.path().join("k3s");
    let (ok, _, err) = package(&[
        &"--manifest",
        &manifest,
        &"--wasm",
        &wasm,
        &"--out",
        &out_dir,
        &"--gzip",
    ]);
    assert!(ok, "{err}");
    assert!(out_dir.join("plugin.wasm.gz").is_file());
    let (ok, from_packaged, err) = package(&[&"--configmap", &"k3s", &out_dir]);
    assert!(ok, "{err}");
    assert_eq!(from_packaged, from_files);
    let (ok, from_flags, err) = package(&[
        &"--configmap",
        &"k3s",
        &"--manifest",
        &manifest,
        &"--wasm",
        &wasm,
    ]);
    assert!(ok, "{err}");
    assert_eq!(from_flags, from_files);
    assert!(
        !from_files.contains("namespace:"),
        "no namespace unless asked: {from_files}"
    );
}

#[test]
fn a_component_that_gzip_does_not_shrink_is_stored_as_is() {
    let (manifest, _, _) = k3s();
    let dir = tempfile::tempdir().unwrap();
    let component = incompressible_component(300 * 1024);
    let wasm = dir.path().join("random.wasm");
    std::fs::write(&wasm, &component).unwrap();
    let (ok, out, err) = package(&[&"--configmap", &"random", &manifest, &wasm]);
    assert!(ok, "{err}");
    // 300 KiB stored as is is over the 256 KiB annotation limit: client-side apply would fail.
    assert!(
        err.contains("warning: client-side `kubectl apply` cannot store this ConfigMap")
            && err.contains("kubectl apply --server-side")
            && err.contains("kubectl create")
            && err.contains("last-applied-configuration"),
        "{err}"
    );
    let configmap: ConfigMap = serde_norway::from_str(&out).unwrap();
    let binary = configmap.binary_data.unwrap();
    assert_eq!(binary.keys().collect::<Vec<_>>(), ["plugin.wasm"]);
    assert_eq!(binary["plugin.wasm"].0, component);
    let packaged =
        PluginManifest::parse(&configmap.data.unwrap()["plugin.yaml"], "configmap").unwrap();
    assert_eq!(packaged.component, "plugin.wasm");
}

#[test]
fn a_plugin_over_the_configmap_limit_is_refused_with_its_size() {
    let (manifest, _, _) = k3s();
    let dir = tempfile::tempdir().unwrap();
    let len = 1024 * 1024 + 512 * 1024;
    let wasm = dir.path().join("big.wasm");
    std::fs::write(&wasm, incompressible_component(len)).unwrap();
    let (ok, out, err) = package(&[&"--configmap", &"big", &manifest, &wasm]);
    assert!(!ok);
    assert!(out.is_empty(), "nothing on stdout: {out}");
    assert!(
        err.contains(&format!("plugin.wasm {len}")),
        "names the component's size: {err}"
    );
    assert!(
        err.contains("1048576 bytes (1 MiB)"),
        "names the limit: {err}"
    );
    assert!(
        err.contains("another volume") && err.contains("--plugin-dir"),
        "suggests another volume: {err}"
    );
}

#[test]
fn bad_inputs_and_names_are_refused_clearly() {
    let (manifest, wasm, _) = k3s();
    let (ok, _, err) = package(&[&"--configmap", &"Not_A_Name", &manifest, &wasm]);
    assert!(
        !ok && err.contains("--configmap \"Not_A_Name\"") && err.contains("DNS subdomain"),
        "{err}"
    );
    let (ok, _, err) = package(&[
        &"--configmap",
        &"k3s",
        &"--namespace",
        &"a.b",
        &manifest,
        &wasm,
    ]);
    assert!(!ok && err.contains("DNS label"), "{err}");
    let (ok, _, err) = package(&[&"--configmap", &"k3s", &wasm, &wasm]);
    assert!(
        !ok && err.contains("one plugin.yaml and one component"),
        "{err}"
    );
    let (ok, _, err) = package(&[&"--configmap", &"k3s", &manifest, &manifest]);
    assert!(!ok && err.contains("got 2 and 0"), "{err}");
    let (ok, _, err) = package(&[
        &"--configmap",
        &"k3s",
        &"--manifest",
        &manifest,
        &"--wasm",
        &manifest,
    ]);
    assert!(
        !ok && err.contains("is not a WebAssembly component"),
        "{err}"
    );
    let (ok, _, err) = package(&[&"--configmap", &"k3s", &repo().join("plugins/k3s")]);
    assert!(
        !ok && err.contains("plugin.wasm"),
        "a source directory without its component: {err}"
    );
    let (ok, _, err) = package(&[&manifest, &wasm]);
    assert!(
        !ok && err.contains("--out") && err.contains("--configmap"),
        "an output is required: {err}"
    );
    let (ok, out, _) = package(&[&"--help"]);
    assert!(
        ok && out.contains("--server-side") && out.contains("1 MiB"),
        "{out}"
    );
}
