//! The hands-on path of docs/simulator.md, as a newcomer types it: `joinery sim serve --cloud
//! X --grants-out … --nodeclass-out …`, `joinery run --grants …` with the built-in plugins as
//! they ship, `kubectl apply` of the NodeClass and a Deployment, and nodes appear. Then the
//! two grant mistakes that used to be silent: a misspelt plugin name in the grants file, and
//! no grants at all, each a NodeClass condition, an event and a log line.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::support::{KillOnDrop, eventually, free_port, kubectl, kubectl_json_or_null, sim_serve};

/// The Deployment the docs scale.
const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: nginx, resources: {requests: {cpu: \"1\"}}}]
";

/// `joinery sim serve --cloud CLOUD` with the hands-on files written into `dir`: the server,
/// its kubeconfig, grants and NodeClass files.
pub(crate) fn serve(dir: &Path, cloud: &str) -> (KillOnDrop, PathBuf, PathBuf, PathBuf) {
    let (kubeconfig, grants, nodeclass) = (
        dir.join("sim.kubeconfig"),
        dir.join("grants.yaml"),
        dir.join("nodeclass.yaml"),
    );
    let (server, printed) = sim_serve(&[
        "--cloud".as_ref(),
        cloud.as_ref(),
        "--boot-delay".as_ref(),
        "5s".as_ref(),
        "--kubeconfig-out".as_ref(),
        kubeconfig.as_os_str(),
        "--grants-out".as_ref(),
        grants.as_os_str(),
        "--nodeclass-out".as_ref(),
        nodeclass.as_os_str(),
    ]);
    assert!(
        kubeconfig.exists() && grants.exists() && nodeclass.exists(),
        "sim serve did not write its files: {printed:?}"
    );
    (server, kubeconfig, grants, nodeclass)
}

/// `joinery run` against the emulator, its log (plain text) going to `log`.
fn run(kubeconfig: &Path, grants: Option<&Path>, log: &Path) -> KillOnDrop {
    let mut command = Command::new(env!("CARGO_BIN_EXE_joinery"));
    command
        .args(["run", "--kubeconfig"])
        .arg(kubeconfig)
        .env("METRICS_PORT", free_port().to_string())
        .env("HEALTH_PROBE_PORT", free_port().to_string())
        .env_remove("JOINERY_GRANTS")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap());
    if let Some(grants) = grants {
        command.arg("--grants").arg(grants);
    }
    KillOnDrop(command.spawn().unwrap())
}

fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

fn walk_the_documented_path(cloud: &str, class_kind: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (_server, kubeconfig, grants, nodeclass) = serve(dir.path(), cloud);
    let log = dir.path().join("run.log");
    let _run = run(&kubeconfig, Some(&grants), &log);
    let nodeclass = nodeclass.to_string_lossy().to_string();
    let (ok, text) = kubectl(&kubeconfig, &["apply", "-f", &nodeclass]);
    assert!(ok, "{text}");
    let deployment = dir.path().join("web.yaml");
    std::fs::write(&deployment, DEPLOYMENT).unwrap();
    let (ok, text) = kubectl(&kubeconfig, &["apply", "-f", &deployment.to_string_lossy()]);
    assert!(ok, "{text}");
    eventually(
        Duration::from_secs(240),
        &format!("the {cloud} NodeClass never became Ready"),
        || {
            let class = kubectl_json_or_null(&kubeconfig, &["get", class_kind, "default"])
                .unwrap_or_default();
            condition(&class, "Ready").is_some_and(|c| c["status"] == "True")
        },
    );
    eventually(
        Duration::from_secs(300),
        &format!("the 3 pods never ran on {cloud} nodes"),
        || {
            let pods = kubectl_json_or_null(
                &kubeconfig,
                &["get", "pods", "-n", "default", "-l", "app=web"],
            )
            .unwrap_or_default();
            pods["items"].as_array().is_some_and(|items| {
                items.len() == 3 && items.iter().all(|p| p["status"]["phase"] == "Running")
            })
        },
    );
    let nodes = kubectl_json_or_null(&kubeconfig, &["get", "nodes"]).unwrap_or_default();
    let nodes = nodes["items"].as_array().unwrap();
    assert!(!nodes.is_empty());
    let prefix = match cloud {
        "exoscale" => "exoscale://",
        "clevercloud" => "clevercloud://",
        _ => "simcloud://",
    };
    assert!(
        nodes.iter().all(|n| n["spec"]["providerID"]
            .as_str()
            .is_some_and(|id| id.starts_with(prefix))),
        "{nodes:?}"
    );
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(!log.contains("HttpRequestDenied"), "{log}");
}

#[test]
fn the_simulated_cloud_works_hands_on_with_the_printed_grants() {
    walk_the_documented_path("simulated", "simnodeclass");
}

#[test]
fn exoscale_works_hands_on_with_the_built_in_plugin_and_the_printed_grants() {
    walk_the_documented_path("exoscale", "exoscalenodeclass");
}

#[test]
fn clever_cloud_works_hands_on_with_the_built_in_plugins_and_the_printed_grants() {
    walk_the_documented_path("clevercloud", "clevernodeclass");
}

#[test]
fn a_misspelt_grant_and_missing_grants_are_a_condition_an_event_and_a_log_line() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, kubeconfig, grants, nodeclass) = serve(dir.path(), "simulated");
    let typo = dir.path().join("typo.yaml");
    std::fs::write(
        &typo,
        std::fs::read_to_string(&grants)
            .unwrap()
            .replace("  simcloud:", "  simcloudd:"),
    )
    .unwrap();
    let (ok, text) = kubectl(&kubeconfig, &["apply", "-f", &nodeclass.to_string_lossy()]);
    assert!(ok, "{text}");
    let not_granted = |expected: &str| {
        let class = kubectl_json_or_null(&kubeconfig, &["get", "simnodeclass", "default"])
            .unwrap_or_default();
        condition(&class, "Ready").is_some_and(|c| {
            c["status"] == "False"
                && c["reason"] == "CapabilitiesNotGranted"
                && c["message"].as_str().is_some_and(|m| m.contains(expected))
        })
    };
    let events = |part: &str| -> usize {
        let events =
            kubectl_json_or_null(&kubeconfig, &["get", "events", "-A"]).unwrap_or_default();
        events["items"].as_array().map_or(0, |items| {
            items
                .iter()
                .filter(|e| {
                    e["reason"] == "CapabilitiesNotGranted"
                        && e["involvedObject"]["kind"] == "SimNodeClass"
                        && e["message"].as_str().is_some_and(|m| m.contains(part))
                })
                .count()
        })
    };
    let lines = |log: &Path, parts: &[&str]| -> usize {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("WARN") && parts.iter().all(|p| l.contains(p)))
            .count()
    };

    // A misspelt plugin name: the class says which entry and what was meant.
    let log = dir.path().join("typo.log");
    let run_typo = run(&kubeconfig, Some(&typo), &log);
    let meant = "plugins.simcloudd names no loaded plugin (did you mean simcloud?)";
    eventually(
        Duration::from_secs(120),
        "no CapabilitiesNotGranted condition",
        || not_granted(meant),
    );
    eventually(
        Duration::from_secs(60),
        "no CapabilitiesNotGranted event",
        || events(meant) > 0,
    );
    // At start-up, and once about the class (the loop runs every few seconds).
    assert_eq!(
        lines(
            &log,
            &["(did you mean simcloud?)", "names no loaded plugin"]
        ),
        2
    );
    assert_eq!(
        lines(&log, &["SimNodeClass default is not Ready", meant]),
        1
    );
    drop(run_typo);

    // No grants at all: the fix is --grants.
    let log = dir.path().join("none.log");
    let _run = run(&kubeconfig, None, &log);
    eventually(
        Duration::from_secs(120),
        "the condition does not name --grants",
        || not_granted("no grants were given"),
    );
    eventually(Duration::from_secs(60), "no event naming --grants", || {
        events("no grants were given") > 0
    });
    assert_eq!(
        lines(&log, &["no grants were given", "simcloud"]),
        2,
        "start-up line and class line"
    );
}

#[test]
fn a_granted_secret_that_is_missing_is_named_with_the_namespace_searched() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, kubeconfig, grants, nodeclass) = serve(dir.path(), "simulated");
    let (ok, text) = kubectl(
        &kubeconfig,
        &["delete", "secret", "-n", "joinery", "k3s-join"],
    );
    assert!(ok, "{text}");
    let log = dir.path().join("run.log");
    let _run = run(&kubeconfig, Some(&grants), &log);
    let (ok, text) = kubectl(&kubeconfig, &["apply", "-f", &nodeclass.to_string_lossy()]);
    assert!(ok, "{text}");
    let deployment = dir.path().join("web.yaml");
    std::fs::write(&deployment, DEPLOYMENT).unwrap();
    let (ok, text) = kubectl(&kubeconfig, &["apply", "-f", &deployment.to_string_lossy()]);
    assert!(ok, "{text}");
    let mut seen = String::new();
    eventually(
        Duration::from_secs(120),
        "no launch failure naming the Secret and the namespace searched",
        || {
            let events =
                kubectl_json_or_null(&kubeconfig, &["get", "events", "-A"]).unwrap_or_default();
            seen = events["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["involvedObject"]["kind"] == "NodeClaim")
                .filter_map(|e| e["message"].as_str())
                .find(|m| m.contains("Secret joinery/k3s-join not found"))
                .unwrap_or_default()
                .to_string();
            !seen.is_empty()
        },
    );
    // The renderer's `secret/key` reference and the grant's Secret stay apart in the text.
    assert!(
        seen.contains("k3s-join/token") && seen.contains("it is granted to renderer k3s"),
        "{seen}"
    );
}

#[test]
fn a_nodeclass_naming_a_renderer_no_plugin_provides_is_not_ready_and_lists_the_renderers() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, kubeconfig, grants, _) = serve(dir.path(), "simulated");
    let class = dir.path().join("typo.yaml");
    std::fs::write(
        &class,
        "apiVersion: sim.joinery.dev/v1alpha1
kind: SimNodeClass
metadata: {name: typo}
spec:
  userDataRenderer: {name: my-jion}
",
    )
    .unwrap();
    let log = dir.path().join("run.log");
    let _run = run(&kubeconfig, Some(&grants), &log);
    let (ok, text) = kubectl(&kubeconfig, &["apply", "-f", &class.to_string_lossy()]);
    assert!(ok, "{text}");
    let mut message = String::new();
    eventually(
        Duration::from_secs(120),
        "no RendererNotFound condition",
        || {
            let class = kubectl_json_or_null(&kubeconfig, &["get", "simnodeclass", "typo"])
                .unwrap_or_default();
            message = condition(&class, "Ready")
                .filter(|c| c["status"] == "False" && c["reason"] == "RendererNotFound")
                .and_then(|c| c["message"].as_str())
                .unwrap_or_default()
                .to_string();
            !message.is_empty()
        },
    );
    assert!(
        message.contains("\"my-jion\"") && message.contains("k3s") && message.contains("template"),
        "{message}"
    );
    eventually(Duration::from_secs(60), "no RendererNotFound event", || {
        let events =
            kubectl_json_or_null(&kubeconfig, &["get", "events", "-A"]).unwrap_or_default();
        events["items"].as_array().is_some_and(|items| {
            items
                .iter()
                .any(|e| e["reason"] == "RendererNotFound" && e["involvedObject"]["name"] == "typo")
        })
    });
}
