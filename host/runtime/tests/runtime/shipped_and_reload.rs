//! The shipped plugins through the real runtime, directory loading, digests, the compile
//! cache, and hot reload keeping the last good set.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use common::engine;
use joinery_builtin_plugins::builtin_manifests;
use joinery_runtime::contract::{KeyValue, PriceRequest, RenderContext, Taint};
use joinery_runtime::engine::{EngineOptions, PluginEngine};
use joinery_runtime::grants::Grants;
use joinery_runtime::manifest::{PluginKind, PluginManifest};
use joinery_runtime::plugin::{LoadContext, sha256_hex};
use joinery_runtime::registry::PluginRegistry;
use joinery_runtime::{CallError, LoadError};

fn registry(dirs: Vec<std::path::PathBuf>) -> Result<PluginRegistry, LoadError> {
    let cx = LoadContext::new(engine(), Grants::default(), Default::default()).unwrap();
    PluginRegistry::load(cx, dirs, builtin_manifests())
}

fn context(user_data: &str) -> RenderContext {
    RenderContext {
        node_claim: "default-abc12".into(),
        node_pool: "default".into(),
        labels: vec![
            KeyValue {
                key: "topology.kubernetes.io/zone".into(),
                value: "zone-b".into(),
            },
            KeyValue {
                key: "karpenter.sh/nodepool".into(),
                value: "default".into(),
            },
        ],
        taints: vec![Taint {
            key: "dedicated".into(),
            value: Some("gpu".into()),
            effect: "NoSchedule".into(),
        }],
        startup_taints: vec![],
        kubelet: "{}".into(),
        instance_type: Some("c3-8".into()),
        zone: Some("zone-b".into()),
        capacity_type: Some("spot".into()),
        cluster_name: "demo".into(),
        cluster_endpoint: "https://10.0.0.1:6443".into(),
        provider_id_prefix: "sim://".into(),
        user_data: Some(user_data.into()),
        parameters: vec![KeyValue {
            key: "token".into(),
            value: "s3cr3t".into(),
        }],
        secrets: vec![],
        resource_requests: vec![],
    }
}

#[tokio::test]
async fn template_renderer_replaces_only_its_placeholders() {
    let set = registry(vec![]).unwrap().current();
    let template = set
        .require("template", PluginKind::UserdataRenderer)
        .unwrap();
    let input = "#!/bin/sh\r\necho $HOME {{.Names}} {{ joinery.nodeClaim }}\nlabels={{joinery.nodeLabels}}\ntaints={{joinery.nodeTaints}}  \n";
    let out = template.render(&context(input)).await.unwrap();
    assert_eq!(
        out,
        "#!/bin/sh\r\necho $HOME {{.Names}} default-abc12\nlabels=karpenter.sh/nodepool=default,topology.kubernetes.io/zone=zone-b\ntaints=dedicated=gpu:NoSchedule,karpenter.sh/unregistered:NoExecute  \n"
    );
}

#[tokio::test]
async fn template_renderer_rejects_unknown_placeholders_as_a_render_error() {
    let set = registry(vec![]).unwrap().current();
    let template = set
        .require("template", PluginKind::UserdataRenderer)
        .unwrap();
    let err = template
        .render(&context("{{joinery.bogus}}"))
        .await
        .unwrap_err();
    assert!(matches!(err, CallError::Render { .. }), "{err:?}");
    assert!(err.to_string().contains("bogus"), "{err}");
}

#[tokio::test]
async fn empty_or_nul_filled_user_data_is_refused_as_a_render_error() {
    let set = registry(vec![]).unwrap().current();
    let template = set
        .require("template", PluginKind::UserdataRenderer)
        .unwrap();
    for input in ["", "\0\0\0", " \n\t\0 "] {
        let err = template.render(&context(input)).await.unwrap_err();
        assert!(
            matches!(err, CallError::Render { .. }),
            "{input:?}: {err:?}"
        );
        assert!(
            err.to_string().contains("the rendered userData is empty"),
            "{input:?}: {err}"
        );
    }
    assert!(template.render(&context("#!/bin/sh\n")).await.is_ok());
}

#[tokio::test]
async fn k3s_renderer_joins_with_the_registration_taint() {
    let set = registry(vec![]).unwrap().current();
    let k3s = set.require("k3s", PluginKind::UserdataRenderer).unwrap();
    let out = k3s.render(&context("")).await.unwrap();
    assert!(out.contains("karpenter.sh/unregistered:NoExecute"), "{out}");
    assert!(out.contains("dedicated=gpu:NoSchedule"), "{out}");
    assert!(out.contains("default-abc12"), "{out}");
    assert!(
        out.contains("s3cr3t"),
        "the token parameter must reach the config: {out}"
    );
}

#[tokio::test]
async fn synthetic_pricing_orders_by_size_and_keeps_one_price_per_request() {
    let set = registry(vec![]).unwrap().current();
    let pricing = set
        .require("synthetic-pricing", PluginKind::Pricing)
        .unwrap();
    let request = |name: &str, cpus: u64| PriceRequest {
        instance_type: name.into(),
        zone: "zone-a".into(),
        capacity_type: "on-demand".into(),
        cpu_millis: cpus * 1000,
        memory_bytes: (cpus * 2) << 30,
        gpu_count: 0,
        known_price: None,
        labels: vec![],
    };
    let prices = pricing
        .price(&[request("c3-4", 2), request("c3-8", 4), request("c3-16", 8)])
        .await
        .unwrap();
    let prices: Vec<f64> = prices
        .into_iter()
        .map(|p| p.expect("synthetic prices are always known"))
        .collect();
    assert!(prices[0] < prices[1] && prices[1] < prices[2], "{prices:?}");
}

#[test]
fn shipped_plugins_fit_the_size_budget() {
    for (manifest, wasm) in builtin_manifests() {
        assert!(
            wasm.len() <= 512 * 1024,
            "{} is {} bytes, over the 512 KiB budget",
            manifest.name,
            wasm.len()
        );
    }
}

/// Writes a plugin directory the way the kubelet mounts a ConfigMap: the files live in a
/// timestamped hidden directory, `..data` points at it, and the visible names are symlinks.
fn write_configmap_dir(root: &Path, name: &str, generation: u32, manifest: &str, wasm: &[u8]) {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let data = format!("..gen_{generation}");
    std::fs::create_dir_all(dir.join(&data)).unwrap();
    std::fs::write(dir.join(&data).join("plugin.yaml"), manifest).unwrap();
    std::fs::write(dir.join(&data).join("plugin.wasm"), wasm).unwrap();
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&data, &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
    for file in ["plugin.yaml", "plugin.wasm"] {
        let link = dir.join(file);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(format!("..data/{file}"), &link).unwrap();
        }
    }
}

fn template_parts() -> (PluginManifest, &'static [u8]) {
    builtin_manifests()
        .into_iter()
        .find(|(m, _)| m.name == "template")
        .unwrap()
}

fn manifest_text(mut manifest: PluginManifest, name: &str, sha: &str) -> String {
    manifest.name = name.into();
    manifest.sha256 = Some(sha.into());
    serde_norway::to_string(&manifest).unwrap()
}

#[tokio::test]
async fn hot_reload_swaps_good_sets_and_keeps_the_last_good_one_on_a_broken_update() {
    let root = tempfile::tempdir().unwrap();
    let (manifest, wasm) = template_parts();
    let sha = sha256_hex(wasm);
    write_configmap_dir(
        root.path(),
        "mine",
        1,
        &manifest_text(manifest.clone(), "my-renderer", &sha),
        wasm,
    );
    let registry = Arc::new(registry(vec![root.path().to_path_buf()]).unwrap());
    let reloads = Arc::new(Reloads::default());
    registry.observe_calls(reloads.clone());
    let first = registry
        .current()
        .require("my-renderer", PluginKind::UserdataRenderer)
        .unwrap();
    assert!(matches!(
        first.source(),
        joinery_runtime::plugin::PluginSource::Directory(_)
    ));
    assert!(
        !registry.reload_if_changed().unwrap(),
        "nothing changed yet"
    );

    // A broken update: the digest no longer matches the component.
    let wrong = "0".repeat(64);
    write_configmap_dir(
        root.path(),
        "mine",
        2,
        &manifest_text(manifest.clone(), "my-renderer", &wrong),
        wasm,
    );
    let err = registry.reload_if_changed().unwrap_err();
    assert!(matches!(err, LoadError::Digest { .. }), "{err}");
    // Retried on every poll, the same failure is counted once.
    assert!(registry.reload_if_changed().is_err());
    assert!(registry.last_error().unwrap().contains("sha256 mismatch"));
    let still = registry
        .current()
        .require("my-renderer", PluginKind::UserdataRenderer)
        .unwrap();
    assert_eq!(
        still.render(&context("ok {{joinery.zone}}")).await.unwrap(),
        "ok zone-b",
        "last good set keeps serving"
    );

    // A good update (renamed plugin) is swapped in.
    write_configmap_dir(
        root.path(),
        "mine",
        3,
        &manifest_text(manifest, "renamed", &sha),
        wasm,
    );
    assert!(registry.reload_if_changed().unwrap());
    let set = registry.current();
    assert!(set.get("my-renderer").is_none());
    assert!(set.require("renamed", PluginKind::UserdataRenderer).is_ok());
    assert!(registry.last_error().is_none());
    // Only the new plugin counts as reloaded: the built-ins did not change.
    assert_eq!(
        *reloads.0.lock().unwrap(),
        [
            ("my-renderer".to_string(), "failure".to_string()),
            ("renamed".to_string(), "success".to_string())
        ]
    );
}

/// The reloads an observer hears of, in order.
#[derive(Default)]
struct Reloads(std::sync::Mutex<Vec<(String, String)>>);

impl joinery_runtime::services::CallObserver for Reloads {
    fn plugin_call(&self, _: &joinery_runtime::services::CallRecord<'_>) {}
    fn plugin_reload(&self, plugin: &str, result: &str) {
        self.0
            .lock()
            .unwrap()
            .push((plugin.to_string(), result.to_string()));
    }
}

#[test]
fn directory_plugins_need_a_matching_digest() {
    let root = tempfile::tempdir().unwrap();
    let (manifest, wasm) = template_parts();
    let mut without = manifest.clone();
    without.name = "nodigest".into();
    write_configmap_dir(
        root.path(),
        "a",
        1,
        &serde_norway::to_string(&without).unwrap(),
        wasm,
    );
    let err = registry(vec![root.path().to_path_buf()])
        .err()
        .expect("a digest is required");
    assert!(
        err.to_string()
            .contains(&format!("sha256: {}", sha256_hex(wasm))),
        "the error gives the line to add: {err}"
    );
}

#[test]
fn duplicate_names_in_directories_are_refused() {
    let root = tempfile::tempdir().unwrap();
    let (manifest, wasm) = template_parts();
    let sha = sha256_hex(wasm);
    write_configmap_dir(
        root.path(),
        "a",
        1,
        &manifest_text(manifest.clone(), "same", &sha),
        wasm,
    );
    write_configmap_dir(
        root.path(),
        "b",
        1,
        &manifest_text(manifest, "same", &sha),
        wasm,
    );
    let err = registry(vec![root.path().to_path_buf()])
        .err()
        .expect("duplicates are refused");
    assert!(matches!(err, LoadError::Duplicate { .. }), "{err}");
}

#[test]
fn compile_cache_is_used_and_a_corrupt_entry_is_a_miss() {
    let cache = tempfile::tempdir().unwrap();
    let engine = PluginEngine::new(&EngineOptions {
        pooling: false,
        cache_dir: Some(cache.path().into()),
        ..Default::default()
    })
    .unwrap();
    let (_, wasm) = template_parts();
    let digest = sha256_hex(wasm);
    let first = engine.compile("template", &digest, wasm).unwrap();
    let entries: Vec<_> = std::fs::read_dir(cache.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(entries.len(), 1, "one cache entry per digest");
    assert!(
        entries[0]
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(&digest)
    );
    // Even the first compile runs the stored copy: its code is mapped from the cache file,
    // not held in anonymous memory.
    let start = first.image_range().start as usize;
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let mapping = maps.lines().find(|line| {
        let (from, to) = line
            .split_whitespace()
            .next()
            .unwrap()
            .split_once('-')
            .unwrap();
        (usize::from_str_radix(from, 16).unwrap()..usize::from_str_radix(to, 16).unwrap())
            .contains(&start)
    });
    assert!(
        mapping.is_some_and(|line| line.ends_with(".cwasm")),
        "the compiled image is mapped from {mapping:?}"
    );
    let second = engine
        .compile("template", &digest, wasm)
        .expect("loads from the cache");
    // Truncating a file a component is mapped from would fault its next read: the host itself
    // only ever renames new entries into place.
    drop((first, second));
    std::fs::write(&entries[0], b"not a compiled component").unwrap();
    engine
        .compile("template", &digest, wasm)
        .expect("a corrupt entry is recompiled");
    assert_ne!(
        std::fs::read(&entries[0]).unwrap(),
        b"not a compiled component",
        "and rewritten"
    );
}

/// A reload keeps the compile-cache entries of the new set and removes those this registry
/// wrote for plugins it no longer loads; files that are not its own entries stay.
#[test]
fn a_reload_prunes_the_cache_entries_of_plugins_no_longer_loaded() {
    let cache = tempfile::tempdir().unwrap();
    let engine = PluginEngine::new(&EngineOptions {
        pooling: false,
        cache_dir: Some(cache.path().into()),
        ..Default::default()
    })
    .unwrap();
    let parts = |name: &str| {
        builtin_manifests()
            .into_iter()
            .find(|(m, _)| m.name == name)
            .unwrap()
    };
    let (a_manifest, a_wasm) = parts("template");
    let (b_manifest, b_wasm) = parts("k3s");
    let (a_sha, b_sha) = (sha256_hex(a_wasm), sha256_hex(b_wasm));
    let root = tempfile::tempdir().unwrap();
    write_configmap_dir(
        root.path(),
        "mine",
        1,
        &manifest_text(a_manifest, "mine", &a_sha),
        a_wasm,
    );
    // Not this engine's entries: an operator's file, another engine's entry of A.
    let notes = cache.path().join("README");
    std::fs::write(&notes, "compiled plugins").unwrap();
    let other_engine = cache.path().join(format!("{a_sha}-0123456789abcdef.cwasm"));
    std::fs::write(&other_engine, "another engine's entry").unwrap();

    let cx = LoadContext::new(engine.clone(), Grants::default(), Default::default()).unwrap();
    let registry = PluginRegistry::load(cx, vec![root.path().to_path_buf()], vec![]).unwrap();
    let a_entry = engine.cache_path(&a_sha).unwrap();
    let b_entry = engine.cache_path(&b_sha).unwrap();
    assert!(a_entry.is_file(), "set A is cached");

    write_configmap_dir(
        root.path(),
        "mine",
        2,
        &manifest_text(b_manifest, "mine", &b_sha),
        b_wasm,
    );
    assert!(registry.reload_if_changed().unwrap());
    assert_eq!(registry.current().get("mine").unwrap().digest(), b_sha);
    assert!(b_entry.is_file(), "set B's entry stays");
    assert!(!a_entry.exists(), "set A's entry is pruned");
    assert!(
        notes.is_file() && other_engine.is_file(),
        "other files stay"
    );
}

#[test]
fn a_renderer_importing_the_network_is_refused_at_load() {
    // The hostile plugin is a cloud-provider component; declared as a renderer, the host
    // refuses it before running anything.
    let mut manifest = common::hostile_manifest();
    manifest.kind = PluginKind::UserdataRenderer;
    manifest.node_class = None;
    manifest.capabilities = Default::default();
    let cx = LoadContext::new(engine(), Grants::default(), Default::default()).unwrap();
    let bytes = joinery_runtime::plugin::PluginBytes {
        manifest,
        source: joinery_runtime::plugin::PluginSource::Builtin,
        wasm: common::hostile_wasm(),
        compiled: None,
    };
    let err = joinery_runtime::plugin::LoadedPlugin::load(&cx, bytes).unwrap_err();
    assert!(matches!(err, LoadError::Import { .. }), "{err}");
}

/// Writes a plain plugin directory (no ConfigMap symlinks): `plugin.yaml` and `component`.
fn write_plain_dir(dir: &Path, manifest: &str, component: &str, bytes: &[u8]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("plugin.yaml"), manifest).unwrap();
    std::fs::write(dir.join(component), bytes).unwrap();
}

#[test]
fn a_missing_plugin_directory_is_an_error_naming_it() {
    let root = tempfile::tempdir().unwrap();
    let missing = root.path().join("not-mounted");
    let err = registry(vec![missing.clone()])
        .err()
        .expect("a missing --plugin-dir is an error");
    assert!(matches!(err, LoadError::PluginDir { .. }), "{err}");
    assert!(
        err.to_string().contains("not-mounted") && err.to_string().contains("--plugin-dir"),
        "{err}"
    );
    let file = root.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let err = registry(vec![file])
        .err()
        .expect("a file is not a plugin directory");
    assert!(err.to_string().contains("is not a directory"), "{err}");
}

#[test]
fn oversized_manifests_decompression_bombs_and_fifos_are_refused() {
    let (manifest, wasm) = template_parts();
    let sha = sha256_hex(wasm);
    // plugin.yaml over its cap.
    let root = tempfile::tempdir().unwrap();
    let mut text = manifest_text(manifest.clone(), "big", &sha);
    text.push_str(&format!("# {}\n", "x".repeat(70 * 1024)));
    write_plain_dir(&root.path().join("big"), &text, "plugin.wasm", wasm);
    let err = registry(vec![root.path().to_path_buf()])
        .err()
        .expect("an oversized plugin.yaml is refused");
    assert!(err.to_string().contains("larger than"), "{err}");

    // A small .wasm.gz that inflates past the component cap.
    let root = tempfile::tempdir().unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut gz, &vec![0u8; 33 * 1024 * 1024]).unwrap();
    let bomb = gz.finish().unwrap();
    assert!(
        bomb.len() < 1024 * 1024,
        "the bomb is small on disk ({} bytes)",
        bomb.len()
    );
    let mut gz_manifest = manifest.clone();
    gz_manifest.component = "plugin.wasm.gz".into();
    write_plain_dir(
        &root.path().join("bomb"),
        &manifest_text(gz_manifest, "bomb", &sha),
        "plugin.wasm.gz",
        &bomb,
    );
    let err = registry(vec![root.path().to_path_buf()])
        .err()
        .expect("a decompression bomb is refused");
    assert!(err.to_string().contains("after decompression"), "{err}");

    // A FIFO where the component should be: refused at once, not read forever.
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("fifo");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("plugin.yaml"),
        manifest_text(manifest, "fifo", &sha),
    )
    .unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(dir.join("plugin.wasm"))
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    let err = registry(vec![root.path().to_path_buf()])
        .err()
        .expect("a FIFO is refused");
    assert!(err.to_string().contains("not a regular file"), "{err}");
}

#[test]
fn two_plugins_serving_one_nodeclass_kind_are_refused_naming_both() {
    let root = tempfile::tempdir().unwrap();
    let wasm = common::hostile_wasm();
    let sha = sha256_hex(wasm);
    for name in ["cloud-one", "cloud-two"] {
        write_plain_dir(
            &root.path().join(name),
            &manifest_text(common::hostile_manifest(), name, &sha),
            "plugin.wasm",
            wasm,
        );
    }
    let err = registry(vec![root.path().to_path_buf()])
        .err()
        .expect("a NodeClass kind has one plugin");
    assert!(matches!(err, LoadError::NodeClassConflict { .. }), "{err}");
    let shown = err.to_string();
    assert!(
        shown.contains("cloud-one")
            && shown.contains("cloud-two")
            && shown.contains("HostileNodeClass"),
        "{shown}"
    );
}

/// A reload that failed is tried again on the next poll even if the files look the same
/// (same sizes and times): the failure may have been transient.
#[test]
fn a_failed_reload_is_retried() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("mine");
    let (manifest, wasm) = template_parts();
    let sha = sha256_hex(wasm);
    write_plain_dir(
        &dir,
        &manifest_text(manifest.clone(), "first1", &sha),
        "plugin.wasm",
        wasm,
    );
    let registry = registry(vec![root.path().to_path_buf()]).unwrap();
    assert!(registry.current().get("first1").is_some());
    // A broken manifest (wrong digest): the reload fails, the last good set serves.
    let manifest_path = dir.join("plugin.yaml");
    std::fs::write(
        &manifest_path,
        manifest_text(manifest.clone(), "first1", &"0".repeat(64)),
    )
    .unwrap();
    assert!(registry.reload_if_changed().is_err());
    assert!(registry.current().get("first1").is_some());
    // Fixed with a manifest of the same size and modification time: nothing a fingerprint sees.
    let broken_at = std::fs::metadata(&manifest_path)
        .unwrap()
        .modified()
        .unwrap();
    std::fs::write(&manifest_path, manifest_text(manifest, "second", &sha)).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&manifest_path)
        .unwrap()
        .set_modified(broken_at)
        .unwrap();
    assert!(
        registry.reload_if_changed().unwrap(),
        "the failed reload is retried and succeeds"
    );
    assert!(registry.current().get("second").is_some());
    assert!(registry.last_error().is_none());
}

/// `wasm` with every occurrence of `from` replaced by `to` (the same length).
fn replaced(wasm: &[u8], from: &str, to: &str) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let mut out = wasm.to_vec();
    let mut at = 0;
    while let Some(i) = out[at..]
        .windows(from.len())
        .position(|w| w == from.as_bytes())
    {
        out[at + i..at + i + from.len()].copy_from_slice(to.as_bytes());
        at += i + from.len();
    }
    out
}

#[tokio::test]
async fn a_component_of_another_wit_version_is_named_with_the_versions_supported() {
    let (manifest, wasm) = template_parts();
    // The same renderer, as if built against a later version of the interface.
    let later = replaced(
        wasm,
        "joinery:plugin/renderer@0.2.0",
        "joinery:plugin/renderer@0.9.0",
    );
    assert!(later != wasm, "the export name is in the component");
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("later");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("plugin.wasm"), &later).unwrap();
    std::fs::write(
        dir.join("plugin.yaml"),
        manifest_text(manifest, "later", &sha256_hex(&later)),
    )
    .unwrap();
    let err = match registry(vec![root.path().to_path_buf()]) {
        Ok(_) => panic!("a component of WIT 0.9.0 loaded"),
        Err(e) => e,
    };
    let text = err.to_string();
    assert!(
        text.contains("built against WIT version 0.9.0")
            && text.contains("this host supports 0.1.0, 0.2.0")
            && text.contains("rebuild it against a supported version"),
        "{text}"
    );
}
