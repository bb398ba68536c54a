//! `helm install` of `charts/joinery` into `joinery sim serve`, then `joinery run` started
//! exactly as the installed Deployment says (args, environment, the grants ConfigMap as its
//! mounted file): the quickstart workload scales up and back to zero through it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::helm::{helm, run_helm};
use crate::support::{KillOnDrop, eventually, free_port, kubectl, kubectl_json, repo};

/// `joinery sim serve` at real speed (the host runs on the real clock); returns the server,
/// its kubeconfig, the API server's URL and the simulated cloud's.
fn sim_serve(dir: &Path) -> (KillOnDrop, PathBuf, String, String) {
    let kubeconfig = dir.join("kubeconfig");
    // Instances boot in 5 s instead of 30 s: the test waits on the real clock.
    let (server, printed) = crate::support::sim_serve(&[
        "--speed".as_ref(),
        "1".as_ref(),
        "--boot-delay".as_ref(),
        "5s".as_ref(),
        "--kubeconfig-out".as_ref(),
        kubeconfig.as_os_str(),
    ]);
    let api = crate::support::printed_value(&printed, "emulated API server:");
    let cloud = crate::support::printed_value(&printed, "simulated cloud:");
    let (Some(api), Some(cloud), true) = (api, cloud, kubeconfig.exists()) else {
        panic!("sim serve did not start: {printed:?}")
    };
    (server, kubeconfig, api, cloud)
}

/// The command line the Deployment's container runs, outside a cluster: the container's args
/// and environment (field references resolved as the kubelet would), every mounted ConfigMap
/// written under `root` and every path into a mount redirected there, the probe and metrics
/// ports moved to free ones, and `--kubeconfig` for the in-cluster configuration.
fn container_command(
    deployment: &Value,
    config_maps: &BTreeMap<String, Value>,
    root: &Path,
    kubeconfig: &Path,
) -> (Command, u16) {
    let pod = &deployment["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let volumes: BTreeMap<&str, &Value> = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["name"].as_str().unwrap(), v))
        .collect();
    // Mount path → local directory.
    let mut mounts: Vec<(String, PathBuf)> = Vec::new();
    for mount in container["volumeMounts"].as_array().into_iter().flatten() {
        let path = mount["mountPath"].as_str().unwrap().to_string();
        let local = root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(&local).unwrap();
        let volume = volumes[mount["name"].as_str().unwrap()];
        if let Some(name) = volume["configMap"]["name"].as_str() {
            let data = config_maps.get(name).unwrap_or_else(|| {
                panic!("the chart mounts ConfigMap {name}, which was not installed")
            });
            for (key, value) in data["data"].as_object().into_iter().flatten() {
                std::fs::write(local.join(key), value.as_str().unwrap()).unwrap();
            }
        }
        mounts.push((path, local));
    }
    let relocate = |value: &str| -> String {
        for (path, local) in &mounts {
            if let Some(rest) = value.strip_prefix(path.as_str()) {
                return format!("{}{rest}", local.display());
            }
        }
        value.to_string()
    };
    let namespace = deployment["metadata"]["namespace"].as_str().unwrap();
    let metrics = free_port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_joinery"));
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    let args: Vec<String> = container["args"]
        .as_array()
        .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    assert!(
        container["command"].is_null()
            || container["command"][0]
                .as_str()
                .unwrap()
                .ends_with("joinery"),
        "{container}"
    );
    command.args(&args).arg("--kubeconfig").arg(kubeconfig);
    for variable in container["env"].as_array().into_iter().flatten() {
        let name = variable["name"].as_str().unwrap();
        let value = match (
            &variable["value"],
            variable["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        ) {
            (Value::String(v), _) => relocate(v),
            (_, Some("metadata.namespace")) => namespace.to_string(),
            (_, Some("metadata.name")) => "joinery-7d4b9c-x2k9f".to_string(),
            other => panic!("the test cannot resolve {name}: {other:?}"),
        };
        command.env(name, value);
    }
    command
        .env("METRICS_PORT", metrics.to_string())
        .env("HEALTH_PROBE_PORT", free_port().to_string());
    (command, metrics)
}

fn running_pods(kubeconfig: &Path) -> usize {
    let pods = kubectl_json(
        kubeconfig,
        &["get", "pods", "-n", "default", "-l", "app=inflate"],
    );
    pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["status"]["phase"] == "Running")
        .count()
}

fn count(kubeconfig: &Path, args: &[&str]) -> usize {
    kubectl_json(kubeconfig, args)["items"]
        .as_array()
        .unwrap()
        .len()
}

#[test]
fn helm_installed_configuration_scales_the_quickstart_up_and_down() {
    let Some(helm) = helm("helm_installed_configuration_scales_the_quickstart_up_and_down") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_server, kubeconfig, api, cloud) = sim_serve(dir.path());
    let kubeconfig_arg = kubeconfig.display().to_string();

    // The grants an operator would write for this cloud, and the renderer's join token.
    let values = dir.path().join("values.yaml");
    std::fs::write(
        &values,
        format!(
            "settings:\n  clusterEndpoint: {api:?}\ngrants:\n  plugins:\n    simcloud:\n      http: [{cloud:?}]\n      config: {{endpoint: {cloud:?}, clusterName: joinery}}\n    k3s:\n      secrets: [k3s-join]\n"
        ),
    )
    .unwrap();
    let (ok, stdout, stderr) = run_helm(
        &helm,
        &[
            "install",
            "joinery",
            "charts/joinery",
            "--namespace",
            "joinery",
            "--create-namespace",
            "--kubeconfig",
            &kubeconfig_arg,
            "-f",
            values.to_str().unwrap(),
        ],
    );
    assert!(ok, "helm install failed:\n{stdout}\n{stderr}");
    let (ok, listed, stderr) = run_helm(
        &helm,
        &[
            "list",
            "-n",
            "joinery",
            "--kubeconfig",
            &kubeconfig_arg,
            "-o",
            "json",
        ],
    );
    assert!(
        ok && listed.contains("\"status\":\"deployed\""),
        "helm list: {listed}\n{stderr}"
    );

    // Every object the chart renders exists in the cluster.
    let (ok, rendered, stderr) = run_helm(
        &helm,
        &[
            "template",
            "joinery",
            "charts/joinery",
            "--namespace",
            "joinery",
            "-f",
            values.to_str().unwrap(),
        ],
    );
    assert!(ok, "{stderr}");
    let mut config_maps = BTreeMap::new();
    let mut deployment = Value::Null;
    for document in serde_norway::Deserializer::from_str(&rendered) {
        let object = Value::deserialize(document).unwrap_or(Value::Null);
        let Some(kind) = object["kind"].as_str() else {
            continue;
        };
        let name = object["metadata"]["name"].as_str().unwrap();
        let mut args = vec!["get", kind, name];
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or("joinery");
        let cluster_scoped = matches!(kind, "ClusterRole" | "ClusterRoleBinding");
        if !cluster_scoped {
            args.extend(["-n", namespace]);
        }
        let installed = kubectl_json(&kubeconfig, &args);
        assert_eq!(
            installed["metadata"]["name"], name,
            "{kind} {name} was not created"
        );
        match kind {
            "ConfigMap" => {
                config_maps.insert(name.to_string(), installed);
            }
            "Deployment" => deployment = installed,
            _ => {}
        }
    }
    assert_eq!(deployment["spec"]["replicas"], 2);

    // The renderer's join token, which the quickstart's NodeClass names.
    let (ok, out) = kubectl(
        &kubeconfig,
        &[
            "create",
            "secret",
            "generic",
            "k3s-join",
            "-n",
            "joinery",
            "--from-literal=token=quickstart-token",
        ],
    );
    assert!(ok, "{out}");

    let root = dir.path().join("pod");
    let (mut command, metrics) = container_command(&deployment, &config_maps, &root, &kubeconfig);
    let _host = KillOnDrop(
        command
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );

    // The quickstart's objects, applied as a user would.
    let mut quickstart: Value = serde_norway::from_str(
        &std::fs::read_to_string(repo().join("examples/scenarios/quickstart.yaml")).unwrap(),
    )
    .unwrap();
    // The empty node goes 5 s after its last pod rather than 30 s (real seconds here).
    let pool = quickstart["manifests"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|m| m["kind"] == "NodePool")
        .expect("the quickstart has a NodePool");
    assert_eq!(
        pool["spec"]["disruption"]["consolidateAfter"], "30s",
        "the quickstart's NodePool changed: {pool}"
    );
    pool["spec"]["disruption"]["consolidateAfter"] = "5s".into();
    let manifests: Vec<String> = quickstart["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| serde_norway::to_string(m).unwrap())
        .collect();
    let workload = dir.path().join("quickstart.yaml");
    std::fs::write(&workload, manifests.join("---\n")).unwrap();
    let (ok, out) = kubectl(&kubeconfig, &["apply", "-f", workload.to_str().unwrap()]);
    assert!(ok, "{out}");
    let replicas = quickstart["manifests"][2]["spec"]["replicas"]
        .as_u64()
        .unwrap() as usize;

    eventually(
        Duration::from_secs(240),
        "the quickstart's pods never all ran",
        || running_pods(&kubeconfig) == replicas,
    );
    assert!(count(&kubeconfig, &["get", "nodes"]) >= 1);
    let metrics_page = std::net::TcpStream::connect(("127.0.0.1", metrics))
        .ok()
        .map(|mut s| {
            use std::io::{Read, Write};
            let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n");
            let mut body = String::new();
            let _ = s.read_to_string(&mut body);
            body
        });
    assert!(metrics_page.unwrap_or_default().contains(
        "karpenter_nodeclaims_created_total{reason=\"provisioned\",nodepool=\"default\"} 1"
    ));

    let (ok, out) = kubectl(
        &kubeconfig,
        &[
            "scale",
            "deployment",
            "inflate",
            "-n",
            "default",
            "--replicas=0",
        ],
    );
    assert!(ok, "{out}");
    eventually(
        Duration::from_secs(300),
        "the nodes never went after the scale-down",
        || {
            count(&kubeconfig, &["get", "nodes"]) == 0
                && count(&kubeconfig, &["get", "nodeclaims"]) == 0
        },
    );
}
