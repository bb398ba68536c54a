//! `joinery sim serve` as kubectl and Helm see it: kubectl's generators (`kubectl create
//! deployment|job|cronjob`, which send protobuf), a Job run to completion on a node the host
//! launched, and the README's two Helm commands into `sim serve --without-crds`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::helm::{helm, run_helm};
use crate::support::{KillOnDrop, eventually, kubectl_json, kubectl_with_input};

/// `joinery sim serve` with `extra` arguments; the server and its kubeconfig.
fn serve(dir: &Path, extra: &[&str]) -> (KillOnDrop, PathBuf) {
    let kubeconfig = dir.join("kubeconfig");
    let mut args: Vec<&std::ffi::OsStr> = extra.iter().map(|a| a.as_ref()).collect();
    args.extend(["--kubeconfig-out".as_ref(), kubeconfig.as_os_str()]);
    let (server, printed) = crate::support::sim_serve(&args);
    assert!(kubeconfig.exists(), "sim serve did not start: {printed:?}");
    (server, kubeconfig)
}

/// A NodeClass of the simulated cloud whose nodes join with the k3s renderer, and a NodePool
/// using it: what the host needs to launch a node for pending pods.
const NODEPOOL: &str = r#"
apiVersion: sim.joinery.dev/v1alpha1
kind: SimNodeClass
metadata:
  name: default
spec:
  userDataRenderer:
    name: k3s
    parameters:
      token: K10test::server:token
      providerIDCommand: cat /var/lib/simcloud/instance-id
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      nodeClassRef: {group: sim.joinery.dev, kind: SimNodeClass, name: default}
      requirements:
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
"#;

#[test]
fn kubectl_generators_work_and_a_job_runs_to_completion() {
    let dir = tempfile::tempdir().unwrap();
    // Ten simulated seconds per real one; the host launches the node the pods need.
    let (_server, kubeconfig) = serve(
        dir.path(),
        &["--with-host", "--speed", "10", "--boot-delay", "5s"],
    );
    let (ok, out) = kubectl_with_input(&kubeconfig, &["apply", "-f", "-"], Some(NODEPOOL));
    assert!(ok, "{out}");

    // The generators send their objects as protobuf.
    let (ok, out) = kubectl_with_input(
        &kubeconfig,
        &[
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            "--replicas=2",
            "--port=80",
        ],
        None,
    );
    assert!(ok, "kubectl create deployment: {out}");
    let deployment = kubectl_json(&kubeconfig, &["get", "deployment", "web"]);
    assert_eq!(deployment["spec"]["replicas"], 2);
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "nginx:1.27");
    assert_eq!(container["ports"][0]["containerPort"], 80);
    assert_eq!(deployment["spec"]["selector"]["matchLabels"]["app"], "web");

    let (ok, out) = kubectl_with_input(
        &kubeconfig,
        &["create", "job", "pi", "--image=busybox:1.36", "--", "true"],
        None,
    );
    assert!(ok, "kubectl create job: {out}");
    let job = kubectl_json(&kubeconfig, &["get", "job", "pi"]);
    assert_eq!(
        job["spec"]["template"]["spec"]["containers"][0]["command"],
        serde_json::json!(["true"])
    );
    assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never");
    assert_eq!(job["spec"]["backoffLimit"], 6, "defaulted by the server");

    let (ok, out) = kubectl_with_input(
        &kubeconfig,
        &[
            "create",
            "cronjob",
            "tick",
            "--image=busybox:1.36",
            "--schedule=*/5 * * * *",
        ],
        None,
    );
    assert!(ok, "kubectl create cronjob: {out}");
    let cronjob = kubectl_json(&kubeconfig, &["get", "cronjob", "tick"]);
    assert_eq!(cronjob["spec"]["schedule"], "*/5 * * * *");
    assert_eq!(cronjob["spec"]["concurrencyPolicy"], "Allow");

    // The Job's pod runs on the node the host launches, finishes, and the Job completes.
    eventually(Duration::from_secs(240), "job pi did not complete", || {
        let job = kubectl_json(&kubeconfig, &["get", "job", "pi"]);
        job["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Complete" && c["status"] == "True")
    });
    let job = kubectl_json(&kubeconfig, &["get", "job", "pi"]);
    assert_eq!(job["status"]["succeeded"], 1);
    let pods = kubectl_json(&kubeconfig, &["get", "pods", "-l", "job-name=pi"]);
    let pods = pods["items"].as_array().unwrap();
    assert_eq!(pods.len(), 1, "{pods:?}");
    assert_eq!(pods[0]["status"]["phase"], "Succeeded");
    assert!(pods[0]["spec"]["nodeName"].is_string(), "it ran on a node");
    // kubectl prints it with the server's Job columns.
    let (ok, table) = kubectl_with_input(&kubeconfig, &["get", "jobs"], None);
    assert!(ok, "{table}");
    assert!(
        table.contains("STATUS") && table.contains("COMPLETIONS") && table.contains("1/1"),
        "{table}"
    );
    let (ok, table) = kubectl_with_input(&kubeconfig, &["get", "cronjobs"], None);
    assert!(
        ok && table.contains("SCHEDULE") && table.contains("*/5 * * * *"),
        "{table}"
    );
}

#[test]
fn the_readme_helm_commands_install_both_charts_into_sim_serve_without_crds() {
    let Some(helm) =
        helm("the_readme_helm_commands_install_both_charts_into_sim_serve_without_crds")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (_server, kubeconfig) = serve(dir.path(), &["--without-crds"]);
    let kubeconfig_arg = kubeconfig.display().to_string();
    let (ok, out) = kubectl_with_input(&kubeconfig, &["get", "crd", "-o", "name"], None);
    assert!(
        ok && !out.contains("karpenter.sh"),
        "no CRD is installed yet: {out}"
    );
    let (ok, stdout, stderr) = run_helm(
        &helm,
        &[
            "upgrade",
            "--install",
            "joinery-crd",
            "charts/joinery-crd",
            "--kubeconfig",
            &kubeconfig_arg,
        ],
    );
    assert!(ok, "helm install joinery-crd:\n{stdout}\n{stderr}");
    let (ok, stdout, stderr) = run_helm(
        &helm,
        &[
            "upgrade",
            "--install",
            "joinery",
            "charts/joinery",
            "-n",
            "joinery",
            "--create-namespace",
            "--kubeconfig",
            &kubeconfig_arg,
        ],
    );
    assert!(ok, "helm install joinery:\n{stdout}\n{stderr}");
    let (ok, out) = kubectl_with_input(&kubeconfig, &["get", "crd", "-o", "name"], None);
    assert!(
        ok && out.contains("nodepools.karpenter.sh") && out.contains("nodeclaims.karpenter.sh"),
        "{out}"
    );
    let (ok, listed, stderr) = run_helm(
        &helm,
        &["list", "-A", "--kubeconfig", &kubeconfig_arg, "-o", "json"],
    );
    assert!(ok, "{stderr}");
    let releases: Value = serde_json::from_str(&listed).unwrap();
    let mut deployed: Vec<&str> = releases
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["status"] == "deployed")
        .filter_map(|r| r["name"].as_str())
        .collect();
    deployed.sort();
    assert_eq!(deployed, ["joinery", "joinery-crd"], "{listed}");
    let deployment = kubectl_json(
        &kubeconfig,
        &["get", "deployment", "-n", "joinery", "joinery"],
    );
    assert!(deployment["spec"]["template"]["spec"]["containers"][0]["image"].is_string());
}
