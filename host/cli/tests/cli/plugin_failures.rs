//! A plugin's failure in a live cluster shows where the operator looks: `joinery run` with a
//! renderer from a plugin directory (the test-only `fragile`, which panics on demand)
//! against `joinery sim serve`. The panic's own words, the plugin and its version reach the
//! `LaunchFailed` event and the NodeClaim's condition (no wasm frames); a reload that fails
//! shows on the NodeClass that uses the plugin and in `joinery_plugin_reloads_total`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::{
    KillOnDrop, eventually, free_port, http_get, kubectl, kubectl_json_or_null, repo,
};

/// The plugin's panic message, with a value no other text contains.
const PANIC: &str = "fragile renderer gave up: boom-7431";

/// `fragile`, packaged into `DIR/fragile` as an author would.
fn package_fragile(dir: &Path) -> PathBuf {
    let wasm =
        PathBuf::from(joinery_builtin_plugins::PLUGIN_WASM_DIR).join("joinery_plugin_fragile.wasm");
    let out = dir.join("fragile");
    let status = Command::new(env!("CARGO_BIN_EXE_joinery"))
        .args([
            "plugins",
            "package",
            "--manifest",
            "plugins/testing/fragile/plugin.yaml",
            "--wasm",
        ])
        .arg(&wasm)
        .arg("--out")
        .arg(&out)
        .current_dir(repo())
        .status()
        .unwrap();
    assert!(status.success());
    out
}

fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

#[test]
fn a_renderer_panic_and_a_failed_reload_are_visible_in_the_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    let fragile = package_fragile(&plugins);
    let (_server, kubeconfig, grants, nodeclass) = crate::hands_on::serve(dir.path(), "simulated");
    let metrics = free_port();
    let log = dir.path().join("run.log");
    let _run = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_joinery"))
            .args(["run", "--kubeconfig"])
            .arg(&kubeconfig)
            .arg("--grants")
            .arg(&grants)
            .arg("--plugin-dir")
            .arg(&plugins)
            .env("METRICS_PORT", metrics.to_string())
            .env("HEALTH_PROBE_PORT", free_port().to_string())
            .env_remove("JOINERY_GRANTS")
            .env_remove("JOINERY_PLUGIN_DIRS")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    // The hands-on NodeClass, rendering with `fragile` told to panic.
    let text = std::fs::read_to_string(&nodeclass).unwrap();
    let renderer = text
        .find("  userDataRenderer:")
        .expect("the hands-on NodeClass names a renderer");
    let end = text[renderer..].find("\n---").unwrap() + renderer;
    let text = format!(
        "{}  userDataRenderer:\n    name: fragile\n    parameters:\n      panic: boom-7431{}",
        &text[..renderer],
        &text[end..]
    );
    std::fs::write(&nodeclass, &text).unwrap();
    let (ok, out) = kubectl(&kubeconfig, &["apply", "-f", &nodeclass.to_string_lossy()]);
    assert!(ok, "{out}\n{text}");
    let deployment = dir.path().join("web.yaml");
    std::fs::write(
        &deployment,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web, namespace: default}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: web}}\n  template:\n    metadata: {labels: {app: web}}\n    spec:\n      containers: [{name: web, image: nginx, resources: {requests: {cpu: \"1\"}}}]\n",
    )
    .unwrap();
    let (ok, out) = kubectl(&kubeconfig, &["apply", "-f", &deployment.to_string_lossy()]);
    assert!(ok, "{out}");

    // The panic, in the event and on the NodeClaim.
    let mut event = String::new();
    eventually(
        Duration::from_secs(180),
        "no LaunchFailed event carried the panic",
        || {
            let events =
                kubectl_json_or_null(&kubeconfig, &["get", "events", "-A"]).unwrap_or_default();
            event = events["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["reason"] == "LaunchFailed")
                .filter_map(|e| e["message"].as_str())
                .find(|m| m.contains(PANIC))
                .unwrap_or_default()
                .to_string();
            !event.is_empty()
        },
    );
    assert!(
        event.contains("fragile") && event.contains("1.2.3"),
        "{event}"
    );
    assert!(
        !event.contains("<wasm") && !event.contains("wasm backtrace"),
        "{event}"
    );
    let claims = kubectl_json_or_null(&kubeconfig, &["get", "nodeclaims"]).unwrap_or_default();
    let launched = claims["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| condition(c, "Launched"))
        .find(|c| c["message"].as_str().is_some_and(|m| m.contains(PANIC)));
    assert!(
        launched.is_some(),
        "no NodeClaim's Launched condition has the panic: {claims}"
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged
            .lines()
            .any(|l| l.contains("WARN") && l.contains(PANIC)),
        "no warning log line has the panic:\n{logged}"
    );

    // A broken new version: the reload fails, the NodeClass says so, the counter counts it.
    std::fs::write(fragile.join("plugin.wasm"), b"\0asm not a component").unwrap();
    eventually(
        Duration::from_secs(120),
        "the NodeClass never showed the failed reload",
        || {
            let class = kubectl_json_or_null(&kubeconfig, &["get", "simnodeclass", "default"])
                .unwrap_or_default();
            condition(&class, "PluginsReloaded").is_some_and(|c| {
                c["status"] == "False"
                    && c["reason"] == "ReloadFailed"
                    && c["message"].as_str().is_some_and(|m| {
                        m.contains("plugin fragile")
                            && m.contains("version 1.2.3")
                            && m.contains("keeps serving")
                    })
            })
        },
    );
    let class =
        kubectl_json_or_null(&kubeconfig, &["get", "simnodeclass", "default"]).unwrap_or_default();
    assert_eq!(
        condition(&class, "Ready").map(|c| c["status"].clone()),
        Some(Value::from("True")),
        "a failed reload leaves the NodeClass working: {class}"
    );
    let scraped = http_get(metrics, "/metrics").unwrap_or_default();
    assert!(
        scraped
            .lines()
            .any(|l| l.starts_with("joinery_plugin_reloads_total{")
                && l.contains("plugin=\"fragile\"")
                && l.contains("result=\"failure\"")
                && l.ends_with(" 1")),
        "{scraped}"
    );
    // `plugins list` on the same directory names what a reload would fail on, after the
    // plugins that load.
    let listed = Command::new(env!("CARGO_BIN_EXE_joinery"))
        .args(["plugins", "list", "--plugin-dir"])
        .arg(&plugins)
        .env_remove("JOINERY_PLUGIN_DIRS")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(listed.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("k3s "),
        "the plugins that load are listed: {stdout}"
    );
    let line = stdout
        .lines()
        .find(|l| l.starts_with("does not load: "))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(line.contains("plugin fragile: sha256 mismatch"), "{line}");
}
