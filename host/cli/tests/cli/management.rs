//! `joinery run` with a management cluster: two emulated API servers (`joinery sim serve`), one
//! as the workload cluster and one as the management cluster, and the test-only `hostile`
//! plugin granted `configmaps` in `cluster: management`. Its NodeClass, in the workload cluster,
//! is resolved by reading `kube-system/x`, which only the management cluster has: the class is
//! Ready only when the plugin's call went there. Also the chart's `managementCluster` values.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::run::sim_serve;
use crate::support::{KillOnDrop, free_port, kubectl_output as kubectl, repo};

pub(crate) fn apply(kubeconfig: &Path, yaml: &str) {
    let (ok, _, err) = kubectl(kubeconfig, &["apply", "-f", "-"], Some(yaml));
    assert!(ok, "kubectl apply failed: {err}\n{yaml}");
}

/// The hostile plugin's NodeClass kind, with free-form spec and status.
const HOSTILE_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: hostilenodeclasses.testing.joinery.dev}
spec:
  group: testing.joinery.dev
  scope: Cluster
  names: {plural: hostilenodeclasses, singular: hostilenodeclass, kind: HostileNodeClass, listKind: HostileNodeClassList}
  versions:
  - name: v1alpha1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

/// Resolving this class makes the plugin `get` ConfigMap `kube-system/x` in the management cluster.
const READS_MANAGEMENT: &str = r#"
apiVersion: testing.joinery.dev/v1alpha1
kind: HostileNodeClass
metadata: {name: reads-management}
spec: {mode: kube, cluster: management}
"#;

const GRANTS: &str = r#"
plugins:
  hostile:
    kubernetes:
      - {cluster: management, group: "", resources: [configmaps], verbs: [get], namespaces: [kube-system]}
"#;

/// A directory plugin: the hostile component under its manifest, changed to request its
/// Kubernetes access in the management cluster instead of the workload one.
fn hostile_plugin(root: &Path) -> PathBuf {
    let wasm = std::fs::read(
        Path::new(joinery_builtin_plugins::PLUGIN_WASM_DIR).join("joinery_plugin_hostile.wasm"),
    )
    .unwrap();
    let manifest =
        std::fs::read_to_string(repo().join("plugins/testing/hostile/plugin.yaml")).unwrap();
    let manifest = manifest.replace("    - cluster: workload\n", "    - cluster: management\n");
    assert!(
        manifest.contains("cluster: management"),
        "the hostile manifest no longer requests `cluster: workload`:\n{manifest}"
    );
    let dir = root.join("hostile");
    std::fs::create_dir_all(&dir).unwrap();
    let sha = joinery_runtime::plugin::sha256_hex(&wasm);
    std::fs::write(
        dir.join("plugin.yaml"),
        format!("{manifest}sha256: {sha}\n"),
    )
    .unwrap();
    std::fs::write(dir.join("plugin.wasm"), wasm).unwrap();
    dir
}

/// What one `joinery run` needs besides the management cluster.
struct Setup {
    workload: PathBuf,
    plugins: PathBuf,
    grants: PathBuf,
    cache: PathBuf,
    logs: PathBuf,
}

impl Setup {
    /// Starts `joinery run` with `args` and `env` (no leader election), its log in `logs/<name>`.
    fn run(&self, name: &str, args: &[&OsStr], env: &[(&str, &str)]) -> (KillOnDrop, PathBuf) {
        let log = self.logs.join(name);
        let mut command = Command::new(env!("CARGO_BIN_EXE_joinery"));
        command
            .arg("run")
            .arg("--kubeconfig")
            .arg(&self.workload)
            .arg("--plugin-dir")
            .arg(&self.plugins)
            .arg("--grants")
            .arg(&self.grants)
            .arg("--plugin-cache-dir")
            .arg(&self.cache)
            .args(args)
            .env("METRICS_PORT", free_port().to_string())
            .env("HEALTH_PROBE_PORT", free_port().to_string())
            .env("SYSTEM_NAMESPACE", "default")
            .env("DISABLE_LEADER_ELECTION", "true")
            .env_remove("RUST_LOG")
            .env_remove("LOG_LEVEL");
        for name in [
            "CLUSTER_API_KUBECONFIG",
            "CLUSTER_API_URL",
            "CLUSTER_API_TOKEN",
            "CLUSTER_API_CERTIFICATE_AUTHORITY_DATA",
            "CLUSTER_API_SKIP_TLS_VERIFY",
        ] {
            command.env_remove(name);
        }
        command.envs(env.iter().copied());
        let child = command
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        (KillOnDrop(child), log)
    }

    /// The `Ready` condition of the class, as (status, message).
    fn ready(&self) -> Option<(String, String)> {
        let (ok, out, _) = kubectl(
            &self.workload,
            &["get", "hostilenodeclass", "reads-management", "-o", "json"],
            None,
        );
        let class: Value = serde_json::from_str(&out).ok().filter(|_| ok)?;
        let condition = class
            .pointer("/status/conditions")?
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Ready")?
            .clone();
        Some((
            condition["status"].as_str()?.to_string(),
            condition["message"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        ))
    }

    /// Waits until the class's `Ready` condition satisfies `check`; fails with the last
    /// condition and `joinery run`'s log.
    fn wait_ready(
        &self,
        run: &mut KillOnDrop,
        log: &Path,
        what: &str,
        check: impl Fn(&str, &str) -> bool,
    ) {
        let deadline = Instant::now() + Duration::from_secs(240);
        loop {
            let ready = self.ready();
            if ready
                .as_ref()
                .is_some_and(|(status, message)| check(status, message))
            {
                return;
            }
            let exited = run.0.try_wait().unwrap();
            if exited.is_some() || Instant::now() > deadline {
                panic!(
                    "{what}: Ready condition {ready:?}; joinery run {}; its log:\n{}",
                    exited.map_or("still runs".to_string(), |s| format!("exited ({s})")),
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// The API server URL of a kubeconfig `joinery sim serve` wrote.
fn server_url(kubeconfig: &Path) -> String {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let value: Value = serde_norway::from_str(&text).unwrap();
    value["clusters"][0]["cluster"]["server"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn a_plugin_granted_the_management_cluster_reads_it_and_is_told_the_flag_when_it_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    for sub in ["workload", "management", "plugins", "cache", "logs"] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
    }
    let (_workload_sim, workload) = sim_serve(&dir.path().join("workload"));
    let (_management_sim, management) = sim_serve(&dir.path().join("management"));
    // The ConfigMap exists in the management cluster only.
    let _ = kubectl(&management, &["create", "namespace", "kube-system"], None);
    let (ok, _, err) = kubectl(
        &management,
        &[
            "-n",
            "kube-system",
            "create",
            "configmap",
            "x",
            "--from-literal=cluster=management",
        ],
        None,
    );
    assert!(ok, "{err}");
    let (found, _, _) = kubectl(
        &workload,
        &["-n", "kube-system", "get", "configmap", "x"],
        None,
    );
    assert!(!found, "the workload cluster must not have kube-system/x");
    // The NodeClass lives in the workload cluster.
    apply(&workload, HOSTILE_CRD);
    apply(&workload, READS_MANAGEMENT);
    hostile_plugin(&dir.path().join("plugins"));
    let grants = dir.path().join("grants.yaml");
    std::fs::write(&grants, GRANTS).unwrap();
    let setup = Setup {
        workload: workload.clone(),
        plugins: dir.path().join("plugins"),
        grants,
        cache: dir.path().join("cache"),
        logs: dir.path().join("logs"),
    };

    // --management-kubeconfig: the plugin's call reaches the management cluster.
    let (mut run, log) = setup.run(
        "with-flag",
        &[
            OsStr::new("--management-kubeconfig"),
            management.as_os_str(),
        ],
        &[],
    );
    setup.wait_ready(
        &mut run,
        &log,
        "with --management-kubeconfig the class never became Ready",
        |status, _| status == "True",
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("plugins can reach the workload and management clusters"),
        "{text}"
    );
    drop(run);

    // No management cluster: the call fails, and the message says which flag to pass.
    let (mut run, log) = setup.run("without", &[], &[]);
    setup.wait_ready(
        &mut run,
        &log,
        "without a management cluster the class never failed naming the flag",
        |status, message| {
            status == "False"
                && message.contains("--management-kubeconfig")
                && message.contains("\"management\"")
        },
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("plugins can reach the workload cluster only"),
        "{text}"
    );
    drop(run);

    // Upstream's variables name the same cluster (the emulator ignores the token).
    let url = server_url(&management);
    let (mut run, log) = setup.run(
        "with-env",
        &[],
        &[
            ("CLUSTER_API_URL", &url),
            ("CLUSTER_API_TOKEN", "test-token"),
        ],
    );
    setup.wait_ready(
        &mut run,
        &log,
        "with CLUSTER_API_URL the class never became Ready again",
        |status, _| status == "True",
    );
    drop(run);

    // A management kubeconfig that cannot be read stops the start, naming the flag.
    let missing = dir.path().join("missing.kubeconfig");
    let (mut run, log) = setup.run(
        "missing",
        &[OsStr::new("--cluster-api-kubeconfig"), missing.as_os_str()],
        &[],
    );
    let status = run.0.wait().unwrap();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        !status.success()
            && text.contains("--management-kubeconfig")
            && text.contains("missing.kubeconfig"),
        "{status:?}\n{text}"
    );
}

// ---------------------------------------------------------------------------------------------
// The chart's `managementCluster` values

/// `helm template` of the chart with `values`; the rendered objects, or Helm's error.
fn template(helm: &Path, values: &str) -> Result<Vec<Value>, String> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("values.yaml");
    std::fs::write(
        &file,
        if values.trim().is_empty() {
            "{}\n"
        } else {
            values
        },
    )
    .unwrap();
    let (ok, out, err) = crate::helm::run_helm(
        helm,
        &[
            "template",
            "joinery",
            "charts/joinery",
            "--namespace",
            "joinery",
            "-f",
            file.to_str().unwrap(),
        ],
    );
    if !ok {
        return Err(err);
    }
    Ok(serde_norway::Deserializer::from_str(&out)
        .map(|doc| <Value as serde::Deserialize>::deserialize(doc).unwrap())
        .filter(|v| !v.is_null())
        .collect())
}

fn deployment(objects: &[Value]) -> &Value {
    objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .expect("a Deployment")
}

#[test]
fn the_chart_mounts_the_management_kubeconfig_secret_and_passes_the_flag() {
    let Some(helm) =
        crate::helm::helm("the_chart_mounts_the_management_kubeconfig_secret_and_passes_the_flag")
    else {
        return;
    };
    // Unset: no flag, no volume.
    let objects = template(&helm, "").unwrap();
    let pod = &deployment(&objects)["spec"]["template"]["spec"];
    assert_eq!(pod["containers"][0]["args"], serde_json::json!(["run"]));
    assert!(
        !serde_json::to_string(pod).unwrap().contains("management"),
        "{pod}"
    );

    let objects = template(
        &helm,
        "managementCluster:\n  kubeconfigSecret: capi-kubeconfig\n",
    )
    .unwrap();
    // The API accepts the Deployment as rendered.
    let typed: k8s_openapi::api::apps::v1::Deployment =
        serde_json::from_value(deployment(&objects).clone()).unwrap();
    let pod = typed.spec.unwrap().template.spec.unwrap();
    let container = &pod.containers[0];
    let args = container.args.clone().unwrap();
    assert_eq!(args[0], "run");
    let flag = args
        .iter()
        .position(|a| a == "--management-kubeconfig")
        .unwrap_or_else(|| panic!("{args:?}"));
    let path = &args[flag + 1];
    let mount = container
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| path.starts_with(&format!("{}/", m.mount_path)))
        .unwrap_or_else(|| panic!("no mount holds {path}"));
    assert_eq!(mount.read_only, Some(true));
    assert!(
        mount.sub_path.is_none(),
        "no subPath, as for every mount of the chart"
    );
    assert_eq!(
        path.strip_prefix(&format!("{}/", mount.mount_path)),
        Some("kubeconfig"),
        "the default key"
    );
    let volume = pod
        .volumes
        .unwrap()
        .into_iter()
        .find(|v| v.name == mount.name)
        .unwrap();
    assert_eq!(
        volume.secret.unwrap().secret_name.as_deref(),
        Some("capi-kubeconfig")
    );

    // Another key.
    let objects = template(
        &helm,
        "managementCluster:\n  kubeconfigSecret: capi-kubeconfig\n  key: mgmt.kubeconfig\n",
    )
    .unwrap();
    let args = deployment(&objects)["spec"]["template"]["spec"]["containers"][0]["args"].clone();
    assert!(
        args.as_array()
            .unwrap()
            .iter()
            .any(|a| a.as_str().is_some_and(|a| a.ends_with("/mgmt.kubeconfig"))),
        "{args}"
    );

    // The schema refuses a typo and an empty key.
    let err = template(&helm, "managementCluster:\n  kubeconfigSecrets: x\n").unwrap_err();
    assert!(err.contains("kubeconfigSecrets"), "{err}");
    let err = template(
        &helm,
        "managementCluster:\n  kubeconfigSecret: x\n  key: \"\"\n",
    )
    .unwrap_err();
    assert!(err.contains("key"), "{err}");
    // Linted strictly with the value set.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("values.yaml");
    std::fs::write(
        &file,
        "managementCluster:\n  kubeconfigSecret: capi-kubeconfig\n",
    )
    .unwrap();
    let (ok, out, err) = crate::helm::run_helm(
        &helm,
        &[
            "lint",
            "--strict",
            "charts/joinery",
            "-f",
            file.to_str().unwrap(),
        ],
    );
    assert!(ok, "{out}\n{err}");
}
