//! The real `kubectl` against the emulated API server: every test starts a server in-process,
//! writes its kubeconfig to a temporary file and runs `kubectl --kubeconfig …` the way a person
//! would, asserting on what kubectl prints and its exit code. When `kubectl` is not on PATH the
//! tests print a notice and pass without checking anything.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use joinery_emulator::{ApiServer, ApiServerOptions};
use serde_json::{Value, json};

/// What one kubectl run produced.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Asserts a zero exit code and returns stdout.
    fn ok(&self) -> &str {
        assert_eq!(
            self.code, 0,
            "kubectl failed\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        &self.stdout
    }

    /// The lines of stdout split into whitespace-separated cells.
    fn rows(&self) -> Vec<Vec<String>> {
        self.ok()
            .lines()
            .map(|line| line.split_whitespace().map(String::from).collect())
            .collect()
    }
}

/// A running emulator with a kubeconfig for it.
struct Cluster {
    _server: ApiServer,
    client: kube::Client,
    kubeconfig: PathBuf,
    cache_dir: PathBuf,
    _dir: tempfile::TempDir,
}

fn kubectl_available() -> bool {
    Command::new("kubectl")
        .args(["version", "--client"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Cluster {
    /// Starts a server, or returns `None` (after printing why) when kubectl is missing.
    async fn start(test: &str) -> Option<Cluster> {
        Self::start_with(test, ApiServerOptions::default()).await
    }

    async fn start_with(test: &str, options: ApiServerOptions) -> Option<Cluster> {
        if !kubectl_available() {
            println!("NOTICE: kubectl is not on PATH; skipping {test}");
            return None;
        }
        let server = ApiServer::start(options).await.expect("server starts");
        let dir = tempfile::tempdir().expect("temporary directory");
        let kubeconfig = dir.path().join("kubeconfig");
        server
            .write_kubeconfig(&kubeconfig)
            .expect("kubeconfig written");
        let client = server.client().expect("client builds");
        let cache_dir = dir.path().join("cache");
        Some(Cluster {
            _server: server,
            client,
            kubeconfig,
            cache_dir,
            _dir: dir,
        })
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("kubectl");
        command
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache_dir)
            .args(args)
            .env_remove("KUBECONFIG");
        command
    }

    /// Runs kubectl to completion (off the async threads, so the in-process server keeps serving).
    async fn kubectl(&self, args: &[&str]) -> Run {
        self.kubectl_with_input(args, None).await
    }

    /// Runs kubectl with `input` on its standard input (for `-f -`).
    async fn kubectl_with_input(&self, args: &[&str], input: Option<&str>) -> Run {
        let mut command = self.command(args);
        let input = input.map(String::from);
        tokio::task::spawn_blocking(move || {
            command.stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            });
            command.stdout(Stdio::piped()).stderr(Stdio::piped());
            let mut child = command.spawn().expect("kubectl starts");
            if let Some(input) = input {
                child
                    .stdin
                    .take()
                    .expect("stdin piped")
                    .write_all(input.as_bytes())
                    .expect("stdin written");
            }
            let output = child.wait_with_output().expect("kubectl finishes");
            Run {
                code: output.status.code().unwrap_or(-1),
                stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            }
        })
        .await
        .expect("kubectl task")
    }

    /// `kubectl apply -f -` of a YAML document.
    async fn apply(&self, yaml: &str) -> Run {
        self.kubectl_with_input(&["apply", "-f", "-"], Some(yaml))
            .await
    }

    /// Starts a long-running kubectl (`get -w`, `wait`) whose stdout lines arrive on a channel.
    fn spawn(&self, args: &[&str]) -> Background {
        let mut child = self
            .command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl starts");
        let (sender, lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("stdout piped");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Background { child, lines }
    }

    /// A raw API request through the kube client; returns the decoded body.
    async fn api(
        &self,
        method: &str,
        path: &str,
        content_type: &str,
        body: Option<Value>,
    ) -> Value {
        let request = http::Request::builder()
            .method(method)
            .uri(path)
            .header("Content-Type", content_type)
            .body(body.map(|b| b.to_string().into_bytes()).unwrap_or_default())
            .expect("request builds");
        self.client
            .request::<Value>(request)
            .await
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    async fn create(&self, collection: &str, object: Value) -> Value {
        self.api("POST", collection, "application/json", Some(object))
            .await
    }

    async fn patch_status(&self, object_path: &str, status: Value) -> Value {
        self.api(
            "PATCH",
            &format!("{object_path}/status"),
            "application/merge-patch+json",
            Some(json!({"status": status})),
        )
        .await
    }

    async fn get(&self, path: &str) -> Option<Value> {
        let request = http::Request::get(path)
            .body(Vec::new())
            .expect("request builds");
        self.client.request::<Value>(request).await.ok()
    }
}

/// A kubectl process running in the background; killed when dropped.
struct Background {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Background {
    /// Collects stdout lines until one satisfies `done` or `timeout` passes.
    async fn lines_until(&mut self, timeout: Duration, done: impl Fn(&str) -> bool) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        while Instant::now() < deadline {
            match self.lines.try_recv() {
                Ok(line) => {
                    let finished = done(&line);
                    seen.push(line);
                    if finished {
                        return seen;
                    }
                }
                Err(mpsc::TryRecvError::Empty) => {
                    tokio::time::sleep(Duration::from_millis(20)).await
                }
                Err(mpsc::TryRecvError::Disconnected) => break,
            }
        }
        seen
    }

    /// Waits for the process to exit by itself; returns its exit code and stderr.
    async fn wait(mut self, timeout: Duration) -> (i32, String) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("child status") {
                let mut stderr = String::new();
                if let Some(mut pipe) = self.child.stderr.take() {
                    let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
                }
                return (status.code().unwrap_or(-1), stderr);
            }
            assert!(
                Instant::now() < deadline,
                "kubectl did not finish within {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The header cells of a `kubectl get` table.
fn header(run: &Run) -> Vec<String> {
    run.rows().into_iter().next().unwrap_or_default()
}

/// The row of a `kubectl get` table whose first cell is `name`.
fn row(run: &Run, name: &str) -> Vec<String> {
    run.rows()
        .into_iter()
        .find(|cells| cells.first().map(String::as_str) == Some(name))
        .unwrap_or_else(|| panic!("no row {name} in\n{}", run.stdout))
}

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: app
        image: registry.example/web:1
        ports: [{containerPort: 8080, name: http}]
        env: [{name: MODE, value: fast}]
      - name: sidecar
        image: registry.example/proxy:1
"#;

const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, shortNames: [wd], categories: [all, gadgets]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas, labelSelectorPath: .status.selector}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Ready, type: string, jsonPath: '.status.conditions[?(@.type=="Ready")].status'}
    - {name: First-Part, type: string, jsonPath: '.spec.parts[0].name'}
    - {name: Zone, type: string, priority: 1, jsonPath: '.metadata.labels.topology\.kubernetes\.io/zone'}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
    schema:
      openAPIV3Schema:
        type: object
        description: A Widget is a gadget for testing.
        properties:
          spec:
            type: object
            description: The desired shape of the widget.
            properties:
              size: {type: integer, description: 'How big the widget is, in centimetres.'}
              replicas: {type: integer, description: How many copies of the widget to keep.}
              colour: {type: string, enum: [red, blue], default: red, description: The colour of the widget.}
              parts:
                type: array
                description: The parts the widget is made of.
                items:
                  type: object
                  properties:
                    name: {type: string, description: Name of the part.}
          status:
            type: object
            properties:
              replicas: {type: integer}
              selector: {type: string}
              conditions:
                type: array
                items:
                  type: object
                  properties:
                    type: {type: string}
                    status: {type: string}
"#;

const WIDGET: &str = r#"
apiVersion: example.com/v1
kind: Widget
metadata:
  name: gizmo
  labels: {topology.kubernetes.io/zone: zone-b}
spec:
  size: 3
  replicas: 1
  parts: [{name: cog}, {name: lever}]
"#;

/// Creates the Widget CRD and one Widget through kubectl.
async fn install_widgets(cluster: &Cluster) {
    cluster.apply(WIDGET_CRD).await.ok();
    cluster.apply(WIDGET).await.ok();
}

fn pod(name: &str, node: Option<&str>, labels: Value, owner: Option<(&str, &str, &str)>) -> Value {
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}, {"name": "helper", "image": "registry.example/helper:1"}]},
    });
    if let Some(node) = node {
        pod["spec"]["nodeName"] = json!(node);
    }
    if let Some((kind, owner_name, uid)) = owner {
        let api_version = if kind == "Node" { "v1" } else { "apps/v1" };
        pod["metadata"]["ownerReferences"] = json!([{"apiVersion": api_version, "kind": kind, "name": owner_name, "uid": uid, "controller": true}]);
    }
    pod
}

/// Reports a pod Running with both containers started and the given readiness.
async fn run_pod(cluster: &Cluster, name: &str, ready: bool, restarts: i64) {
    let container = |container: &str| {
        json!({"name": container, "ready": ready, "restartCount": restarts, "image": "x", "imageID": "", "started": true,
               "state": {"running": {"startedAt": "2024-01-01T00:00:00Z"}}})
    };
    cluster
        .patch_status(
            &format!("/api/v1/namespaces/default/pods/{name}"),
            json!({
                "phase": "Running",
                "podIP": "10.1.0.7",
                "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}],
                "containerStatuses": [container("main"), container("helper")],
            }),
        )
        .await;
}

async fn ready_node(cluster: &Cluster, name: &str, labels: Value) {
    cluster
        .create(
            "/api/v1/nodes",
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}, "spec": {}}),
        )
        .await;
    cluster
        .patch_status(
            &format!("/api/v1/nodes/{name}"),
            json!({
                "conditions": [{"type": "Ready", "status": "True"}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.4"}],
                "nodeInfo": {"kubeletVersion": "v1.33.0", "osImage": "Simulated Linux", "kernelVersion": "6.1.0",
                             "containerRuntimeVersion": "containerd://2.0.0", "architecture": "amd64", "operatingSystem": "linux",
                             "bootID": "", "kubeProxyVersion": "", "machineID": "", "systemUUID": ""},
            }),
        )
        .await;
}

#[tokio::test]
async fn apply_client_side_creates_then_patches_keeping_unmentioned_list_fields() {
    let Some(cluster) = Cluster::start("apply_client_side").await else {
        return;
    };
    let created = cluster.apply(DEPLOYMENT).await;
    assert!(
        created.ok().contains("deployment.apps/web created"),
        "{}",
        created.stdout
    );
    assert!(
        !created.stderr.contains("--validate=false"),
        "validation must not need turning off: {}",
        created.stderr
    );
    let stored = cluster
        .get("/apis/apps/v1/namespaces/default/deployments/web")
        .await
        .unwrap();
    let last_applied =
        stored["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .unwrap();
    assert!(
        last_applied.contains("registry.example/web:1"),
        "{last_applied}"
    );

    // A second apply with one changed image sends a strategic merge patch that names only the
    // changed container: the other fields and the sidecar must survive.
    let changed = DEPLOYMENT.replace("registry.example/web:1", "registry.example/web:2");
    let configured = cluster.apply(&changed).await;
    assert!(
        configured.ok().contains("deployment.apps/web configured"),
        "{}",
        configured.stdout
    );
    assert!(
        configured.stderr.is_empty(),
        "no warnings expected: {}",
        configured.stderr
    );
    let stored = cluster
        .get("/apis/apps/v1/namespaces/default/deployments/web")
        .await
        .unwrap();
    let containers = &stored["spec"]["template"]["spec"]["containers"];
    assert_eq!(containers[0]["image"], "registry.example/web:2");
    assert_eq!(containers[0]["ports"][0]["containerPort"], 8080);
    assert_eq!(containers[0]["env"][0]["value"], "fast");
    assert_eq!(containers[1]["image"], "registry.example/proxy:1");
    assert_eq!(stored["metadata"]["generation"], 2);

    // Dropping a container from the configuration removes it (a `$patch: delete` element).
    let without_sidecar = changed
        .split("      - name: sidecar")
        .next()
        .unwrap()
        .to_string();
    cluster.apply(&without_sidecar).await.ok();
    let stored = cluster
        .get("/apis/apps/v1/namespaces/default/deployments/web")
        .await
        .unwrap();
    let names: Vec<&str> = stored["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["app"]);

    // Unchanged configuration: nothing to do.
    assert!(
        cluster
            .apply(&without_sidecar)
            .await
            .ok()
            .contains("deployment.apps/web unchanged")
    );
}

#[tokio::test]
async fn apply_client_side_of_a_custom_resource_merges_and_strict_validation_rejects_unknown_fields()
 {
    let Some(cluster) = Cluster::start("apply_custom_resource").await else {
        return;
    };
    install_widgets(&cluster).await;
    let resized = WIDGET.replace("size: 3", "size: 5");
    assert!(
        cluster
            .apply(&resized)
            .await
            .ok()
            .contains("widget.example.com/gizmo configured")
    );
    let stored = cluster
        .get("/apis/example.com/v1/namespaces/default/widgets/gizmo")
        .await
        .unwrap();
    assert_eq!(stored["spec"]["size"], 5);
    assert_eq!(stored["spec"]["colour"], "red", "schema defaults apply");

    let typo = WIDGET.replace("size: 3", "size: 3\n  sise: 4");
    let refused = cluster.apply(&typo).await;
    assert_ne!(refused.code, 0);
    assert!(
        refused.stderr.contains(r#"unknown field "spec.sise""#),
        "{}",
        refused.stderr
    );
    let warned = cluster
        .kubectl_with_input(&["apply", "--validate=warn", "-f", "-"], Some(&typo))
        .await;
    warned.ok();
    assert!(
        warned.stderr.contains(r#"unknown field "spec.sise""#),
        "{}",
        warned.stderr
    );
}

#[tokio::test]
async fn apply_server_side_creates_merges_and_records_the_field_manager() {
    let Some(cluster) = Cluster::start("apply_server_side").await else {
        return;
    };
    let applied = cluster
        .kubectl_with_input(&["apply", "--server-side", "-f", "-"], Some(DEPLOYMENT))
        .await;
    assert!(
        applied
            .ok()
            .contains("deployment.apps/web serverside-applied"),
        "{}",
        applied.stdout
    );
    let scaled = DEPLOYMENT.replace("replicas: 2", "replicas: 3");
    cluster
        .kubectl_with_input(
            &[
                "apply",
                "--server-side",
                "--field-manager=deployer",
                "-f",
                "-",
            ],
            Some(&scaled),
        )
        .await
        .ok();
    let shown = cluster
        .kubectl(&[
            "get",
            "deployment",
            "web",
            "-o",
            "json",
            "--show-managed-fields",
        ])
        .await;
    let object: Value = serde_json::from_str(shown.ok()).unwrap();
    assert_eq!(object["spec"]["replicas"], 3);
    let managers: Vec<(&str, &str)> = object["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            (
                entry["manager"].as_str().unwrap(),
                entry["operation"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(managers, [("kubectl", "Apply"), ("deployer", "Apply")]);
    let fields = &object["metadata"]["managedFields"][1]["fieldsV1"];
    assert!(fields["f:spec"].get("f:replicas").is_some(), "{fields}");
    // Without --show-managed-fields kubectl hides them, as against a real cluster.
    let yaml = cluster
        .kubectl(&["get", "deployment", "web", "-o", "yaml"])
        .await;
    assert!(!yaml.ok().contains("managedFields"));
}

#[tokio::test]
async fn get_pods_prints_ready_status_restarts_and_age_columns() {
    let Some(cluster) = Cluster::start("get_pods").await else {
        return;
    };
    cluster
        .create(
            "/api/v1/namespaces/default/pods",
            pod("web-1", Some("node-a"), json!({"app": "web"}), None),
        )
        .await;
    cluster
        .create(
            "/api/v1/namespaces/default/pods",
            pod("web-2", None, json!({"app": "web"}), None),
        )
        .await;
    run_pod(&cluster, "web-1", true, 3).await;
    let run = cluster.kubectl(&["get", "pods"]).await;
    assert_eq!(header(&run), ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]);
    let running = row(&run, "web-1");
    assert_eq!(
        &running[1..4],
        ["2/2", "Running", "6"],
        "restarts of both containers add up"
    );
    assert!(running[4].ends_with('s'), "age like 0s: {running:?}");
    assert_eq!(&row(&run, "web-2")[1..4], ["0/2", "Pending", "0"]);

    let wide = cluster.kubectl(&["get", "pods", "-o", "wide"]).await;
    assert_eq!(
        header(&wide),
        [
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "IP",
            "NODE",
            "NOMINATED",
            "NODE",
            "READINESS",
            "GATES"
        ]
    );
    assert_eq!(&row(&wide, "web-1")[5..7], ["10.1.0.7", "node-a"]);

    let all = cluster
        .kubectl(&["get", "pods", "-A", "--show-labels"])
        .await;
    assert_eq!(header(&all)[0], "NAMESPACE");
    assert_eq!(header(&all).last().map(String::as_str), Some("LABELS"));
    let labelled = all
        .rows()
        .into_iter()
        .find(|r| r.get(1).map(String::as_str) == Some("web-1"))
        .unwrap();
    assert_eq!(
        (labelled[0].as_str(), labelled.last().unwrap().as_str()),
        ("default", "app=web")
    );

    let selected = cluster
        .kubectl(&[
            "get",
            "pods",
            "-l",
            "app=web",
            "--field-selector",
            "spec.nodeName=node-a",
            "--no-headers",
        ])
        .await;
    assert_eq!(selected.rows().len(), 1);
    let single = cluster.kubectl(&["get", "pod", "web-2"]).await;
    assert_eq!(single.rows().len(), 2, "header and one row");

    cluster
        .api(
            "DELETE",
            "/api/v1/namespaces/default/pods/web-1",
            "application/json",
            None,
        )
        .await;
    let terminating = cluster
        .kubectl(&["get", "pod", "web-1", "--no-headers"])
        .await;
    assert_eq!(
        terminating.rows()[0][2],
        "Terminating",
        "a bound pod waits for its grace period"
    );
}

#[tokio::test]
async fn get_nodes_prints_status_roles_age_and_version() {
    let Some(cluster) = Cluster::start("get_nodes").await else {
        return;
    };
    ready_node(
        &cluster,
        "node-a",
        json!({"node-role.kubernetes.io/control-plane": ""}),
    )
    .await;
    cluster
        .create(
            "/api/v1/nodes",
            json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-b"}}),
        )
        .await;
    let run = cluster.kubectl(&["get", "nodes"]).await;
    assert_eq!(header(&run), ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]);
    let a = row(&run, "node-a");
    assert_eq!(
        (a[1].as_str(), a[2].as_str(), a[4].as_str()),
        ("Ready", "control-plane", "v1.33.0")
    );
    assert_eq!(&row(&run, "node-b")[1..3], ["Unknown", "<none>"]);
    let wide = cluster.kubectl(&["get", "nodes", "-o", "wide"]).await;
    assert!(header(&wide).contains(&"INTERNAL-IP".to_string()));
    assert!(row(&wide, "node-a").contains(&"10.0.0.4".to_string()));
}

#[tokio::test]
async fn get_workloads_prints_deployment_daemonset_and_replicaset_columns() {
    let Some(cluster) = Cluster::start("get_workloads").await else {
        return;
    };
    cluster.apply(DEPLOYMENT).await.ok();
    cluster
        .patch_status(
            "/apis/apps/v1/namespaces/default/deployments/web",
            json!({"replicas": 2, "readyReplicas": 1, "updatedReplicas": 2, "availableReplicas": 1}),
        )
        .await;
    let run = cluster.kubectl(&["get", "deployments", "-o", "wide"]).await;
    assert_eq!(
        header(&run),
        [
            "NAME",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ]
    );
    let web = row(&run, "web");
    assert_eq!(
        (web[1].as_str(), web[2].as_str(), web[3].as_str()),
        ("1/2", "2", "1")
    );
    assert_eq!(
        &web[5..],
        [
            "app,sidecar",
            "registry.example/web:1,registry.example/proxy:1",
            "app=web"
        ]
    );

    let template = json!({"metadata": {"labels": {"app": "agent"}}, "spec": {"nodeSelector": {"kubernetes.io/os": "linux"}, "containers": [{"name": "agent", "image": "agent:1"}]}});
    cluster
        .create(
            "/apis/apps/v1/namespaces/default/daemonsets",
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent"}, "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": template}}),
        )
        .await;
    cluster
        .patch_status(
            "/apis/apps/v1/namespaces/default/daemonsets/agent",
            json!({"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 2, "updatedNumberScheduled": 3, "numberAvailable": 2, "numberMisscheduled": 0}),
        )
        .await;
    let run = cluster.kubectl(&["get", "ds"]).await;
    assert_eq!(
        header(&run),
        [
            "NAME",
            "DESIRED",
            "CURRENT",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "NODE",
            "SELECTOR",
            "AGE"
        ]
    );
    assert_eq!(
        &row(&run, "agent")[1..7],
        ["3", "3", "2", "3", "2", "kubernetes.io/os=linux"]
    );

    cluster
        .create(
            "/apis/apps/v1/namespaces/default/replicasets",
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web-5d8f"}, "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "agent"}}, "template": template}}),
        )
        .await;
    cluster
        .patch_status(
            "/apis/apps/v1/namespaces/default/replicasets/web-5d8f",
            json!({"replicas": 4, "readyReplicas": 3}),
        )
        .await;
    let run = cluster.kubectl(&["get", "rs"]).await;
    assert_eq!(header(&run), ["NAME", "DESIRED", "CURRENT", "READY", "AGE"]);
    assert_eq!(&row(&run, "web-5d8f")[1..4], ["4", "4", "3"]);
}

#[tokio::test]
async fn get_namespaces_configmaps_secrets_and_budgets_print_their_columns() {
    let Some(cluster) = Cluster::start("get_config").await else {
        return;
    };
    let run = cluster.kubectl(&["get", "namespaces"]).await;
    assert_eq!(header(&run), ["NAME", "STATUS", "AGE"]);
    assert_eq!(row(&run, "kube-system")[1], "Active");

    cluster
        .create(
            "/api/v1/namespaces/default/configmaps",
            json!({"metadata": {"name": "settings"}, "data": {"a": "1", "b": "2"}}),
        )
        .await;
    let run = cluster.kubectl(&["get", "configmaps"]).await;
    assert_eq!(header(&run), ["NAME", "DATA", "AGE"]);
    assert_eq!(row(&run, "settings")[1], "2");

    cluster
        .create(
            "/api/v1/namespaces/default/secrets",
            json!({"metadata": {"name": "token"}, "type": "Opaque", "data": {"t": "c2VjcmV0"}}),
        )
        .await;
    let run = cluster.kubectl(&["get", "secrets"]).await;
    assert_eq!(header(&run), ["NAME", "TYPE", "DATA", "AGE"]);
    assert_eq!(&row(&run, "token")[1..3], ["Opaque", "1"]);

    cluster
        .create(
            "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
            json!({"metadata": {"name": "web-pdb"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}),
        )
        .await;
    let run = cluster.kubectl(&["get", "pdb"]).await;
    assert_eq!(
        header(&run),
        [
            "NAME",
            "MIN",
            "AVAILABLE",
            "MAX",
            "UNAVAILABLE",
            "ALLOWED",
            "DISRUPTIONS",
            "AGE"
        ]
    );
    assert_eq!(&row(&run, "web-pdb")[1..4], ["1", "N/A", "0"]);
}

#[tokio::test]
async fn get_events_and_crds_print_their_columns() {
    let Some(cluster) = Cluster::start("get_events").await else {
        return;
    };
    cluster
        .create(
            "/api/v1/namespaces/default/events",
            json!({
                "metadata": {"name": "web-1.17a"},
                "involvedObject": {"kind": "Pod", "name": "web-1", "namespace": "default"},
                "reason": "BackOff", "message": "Back-off restarting failed container", "type": "Warning", "count": 4,
                "firstTimestamp": "2020-01-01T00:00:00Z", "lastTimestamp": "2020-01-01T00:05:00Z",
                "source": {"component": "kubelet", "host": "node-a"},
            }),
        )
        .await;
    let run = cluster.kubectl(&["get", "events"]).await;
    assert_eq!(
        header(&run),
        ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    );
    let line = run.stdout.lines().nth(1).unwrap();
    assert!(line.contains("(x4 over"), "{line}");
    assert!(
        line.contains("Warning") && line.contains("BackOff") && line.contains("pod/web-1"),
        "{line}"
    );
    assert!(
        line.contains("Back-off restarting failed container"),
        "{line}"
    );

    cluster.apply(WIDGET_CRD).await.ok();
    let run = cluster.kubectl(&["get", "crds"]).await;
    assert_eq!(header(&run), ["NAME", "CREATED", "AT"]);
    assert!(row(&run, "widgets.example.com")[1].ends_with('Z'));
}

#[tokio::test]
async fn get_custom_resources_prints_the_crd_printer_columns() {
    let Some(cluster) = Cluster::start("get_custom_resources").await else {
        return;
    };
    install_widgets(&cluster).await;
    cluster
        .patch_status(
            "/apis/example.com/v1/namespaces/default/widgets/gizmo",
            json!({"conditions": [{"type": "Launched", "status": "True"}, {"type": "Ready", "status": "False"}]}),
        )
        .await;
    let run = cluster.kubectl(&["get", "widgets"]).await;
    assert_eq!(header(&run), ["NAME", "SIZE", "READY", "FIRST-PART", "AGE"]);
    assert_eq!(&row(&run, "gizmo")[1..4], ["3", "False", "cog"]);
    let wide = cluster.kubectl(&["get", "wd", "-o", "wide"]).await;
    assert_eq!(
        header(&wide),
        ["NAME", "SIZE", "READY", "FIRST-PART", "ZONE", "AGE"]
    );
    assert_eq!(row(&wide, "gizmo")[4], "zone-b");
    // Categories work too: `get all` and `get gadgets` include widgets.
    let gadgets = cluster.kubectl(&["get", "gadgets"]).await;
    assert_eq!(row(&gadgets, "gizmo")[1], "3");
    let all = cluster.kubectl(&["get", "all"]).await;
    assert!(
        all.ok().contains("widget.example.com/gizmo"),
        "{}",
        all.stdout
    );
}

#[tokio::test]
async fn get_output_yaml_and_json_print_the_stored_object() {
    let Some(cluster) = Cluster::start("get_output").await else {
        return;
    };
    install_widgets(&cluster).await;
    let yaml = cluster
        .kubectl(&["get", "widget", "gizmo", "-o", "yaml"])
        .await;
    let object: Value = serde_norway::from_str(yaml.ok()).unwrap();
    assert_eq!(
        (object["kind"].as_str(), object["spec"]["size"].as_i64()),
        (Some("Widget"), Some(3))
    );
    let json_list = cluster.kubectl(&["get", "namespaces", "-o", "json"]).await;
    let list: Value = serde_json::from_str(json_list.ok()).unwrap();
    assert_eq!(list["kind"], "List");
    assert_eq!(list["items"].as_array().unwrap().len(), 4);
    let names = cluster.kubectl(&["get", "ns", "-o", "name"]).await;
    assert!(names.ok().lines().any(|l| l == "namespace/kube-system"));
    let path = cluster
        .kubectl(&[
            "get",
            "widget",
            "gizmo",
            "-o",
            "jsonpath={.spec.parts[1].name}",
        ])
        .await;
    assert_eq!(path.ok(), "lever");
}

#[tokio::test]
async fn get_watch_prints_a_table_row_for_every_change() {
    let Some(cluster) = Cluster::start("get_watch").await else {
        return;
    };
    cluster
        .create(
            "/api/v1/namespaces/default/configmaps",
            json!({"metadata": {"name": "first"}, "data": {"a": "1"}}),
        )
        .await;
    let mut watch = cluster.spawn(&["get", "configmaps", "-w"]);
    let initial = watch
        .lines_until(Duration::from_secs(10), |line| line.starts_with("first"))
        .await;
    assert!(
        initial[0].starts_with("NAME") && initial[0].contains("DATA"),
        "{initial:?}"
    );
    cluster
        .create(
            "/api/v1/namespaces/default/configmaps",
            json!({"metadata": {"name": "second"}, "data": {"a": "1", "b": "2"}}),
        )
        .await;
    let added = watch
        .lines_until(Duration::from_secs(10), |line| line.starts_with("second"))
        .await;
    let cells: Vec<&str> = added
        .last()
        .expect("a row for the new object")
        .split_whitespace()
        .collect();
    assert_eq!(&cells[..2], ["second", "2"]);
    cluster
        .api(
            "PATCH",
            "/api/v1/namespaces/default/configmaps/first",
            "application/merge-patch+json",
            Some(json!({"data": {"c": "3"}})),
        )
        .await;
    let modified = watch
        .lines_until(Duration::from_secs(10), |line| line.starts_with("first"))
        .await;
    let cells: Vec<&str> = modified
        .last()
        .expect("a row for the change")
        .split_whitespace()
        .collect();
    assert_eq!(&cells[..2], ["first", "2"]);
}

#[tokio::test]
async fn describe_pod_shows_its_events_found_by_involved_object() {
    let Some(cluster) = Cluster::start("describe_pod").await else {
        return;
    };
    let created = cluster
        .create(
            "/api/v1/namespaces/default/pods",
            pod("web-1", Some("node-a"), json!({"app": "web"}), None),
        )
        .await;
    let uid = created["metadata"]["uid"].as_str().unwrap().to_string();
    for (name, pod_name, pod_uid, reason) in [
        ("web-1.1", "web-1", uid.as_str(), "Scheduled"),
        (
            "other.1",
            "other",
            "00000000-0000-4000-8000-000000000000",
            "Unrelated",
        ),
    ] {
        cluster
            .create(
                "/api/v1/namespaces/default/events",
                json!({
                    "metadata": {"name": name},
                    "involvedObject": {"kind": "Pod", "name": pod_name, "namespace": "default", "uid": pod_uid, "apiVersion": "v1"},
                    "reason": reason, "message": format!("Successfully assigned default/{pod_name} to node-a"), "type": "Normal",
                    "firstTimestamp": "2020-01-01T00:00:00Z", "lastTimestamp": "2020-01-01T00:00:00Z", "count": 1,
                    "source": {"component": "default-scheduler"},
                }),
            )
            .await;
    }
    let run = cluster.kubectl(&["describe", "pod", "web-1"]).await;
    let text = run.ok();
    assert!(text.contains("Name:") && text.contains("web-1"), "{text}");
    assert!(text.contains("Node:") && text.contains("node-a"), "{text}");
    let events = text.split("Events:").nth(1).expect("an Events section");
    assert!(
        events.contains("Scheduled") && events.contains("default-scheduler"),
        "{events}"
    );
    assert!(
        !events.contains("Unrelated"),
        "only the pod's own events: {events}"
    );

    ready_node(&cluster, "node-a", json!({})).await;
    let node = cluster.kubectl(&["describe", "node", "node-a"]).await;
    assert!(
        node.ok().contains("Non-terminated Pods:"),
        "{}",
        node.stdout
    );
    assert!(node.stdout.contains("web-1"), "{}", node.stdout);
}

#[tokio::test]
async fn delete_removes_objects_by_name_and_by_selector() {
    let Some(cluster) = Cluster::start("delete").await else {
        return;
    };
    for (name, tier) in [("a", "front"), ("b", "front"), ("c", "back")] {
        cluster
            .create(
                "/api/v1/namespaces/default/configmaps",
                json!({"metadata": {"name": name, "labels": {"tier": tier}}}),
            )
            .await;
    }
    let run = cluster.kubectl(&["delete", "configmap", "a"]).await;
    assert_eq!(run.ok().trim(), r#"configmap "a" deleted"#);
    let run = cluster
        .kubectl(&["delete", "configmaps", "-l", "tier=front"])
        .await;
    assert_eq!(run.ok().trim(), r#"configmap "b" deleted"#);
    let missing = cluster.kubectl(&["delete", "configmap", "a"]).await;
    assert_eq!(missing.code, 1);
    assert!(
        missing.stderr.contains(r#"configmaps "a" not found"#),
        "{}",
        missing.stderr
    );
    let left = cluster.kubectl(&["get", "configmaps", "-o", "name"]).await;
    assert_eq!(left.ok().trim(), "configmap/c");
    // An unbound pod goes at once and kubectl's wait for its removal returns.
    cluster
        .create(
            "/api/v1/namespaces/default/pods",
            pod("loose", None, json!({}), None),
        )
        .await;
    cluster
        .kubectl(&["delete", "pod", "loose", "--timeout=20s"])
        .await
        .ok();
}

#[tokio::test]
async fn wait_for_condition_ready_returns_once_the_condition_is_true() {
    let Some(cluster) = Cluster::start("wait").await else {
        return;
    };
    cluster
        .create(
            "/api/v1/namespaces/default/pods",
            pod("web-1", Some("node-a"), json!({}), None),
        )
        .await;
    let waiting = cluster.spawn(&[
        "wait",
        "--for=condition=Ready",
        "pod/web-1",
        "--timeout=30s",
    ]);
    tokio::time::sleep(Duration::from_millis(800)).await;
    run_pod(&cluster, "web-1", true, 0).await;
    let (code, stderr) = waiting.wait(Duration::from_secs(30)).await;
    assert_eq!(code, 0, "{stderr}");

    install_widgets(&cluster).await;
    let timed_out = cluster
        .kubectl(&[
            "wait",
            "--for=condition=Ready",
            "widget/gizmo",
            "--timeout=1s",
        ])
        .await;
    assert_ne!(timed_out.code, 0);
    cluster
        .patch_status(
            "/apis/example.com/v1/namespaces/default/widgets/gizmo",
            json!({"conditions": [{"type": "Ready", "status": "True"}]}),
        )
        .await;
    let met = cluster
        .kubectl(&[
            "wait",
            "--for=condition=Ready",
            "widget/gizmo",
            "--timeout=10s",
        ])
        .await;
    assert!(
        met.ok().contains("widget.example.com/gizmo condition met"),
        "{}",
        met.stdout
    );
    let deleted = cluster.spawn(&["wait", "--for=delete", "widget/gizmo", "--timeout=30s"]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster
        .api(
            "DELETE",
            "/apis/example.com/v1/namespaces/default/widgets/gizmo",
            "application/json",
            None,
        )
        .await;
    assert_eq!(deleted.wait(Duration::from_secs(30)).await.0, 0);
}

#[tokio::test]
async fn scale_sets_replicas_through_the_scale_subresource() {
    let Some(cluster) = Cluster::start("scale").await else {
        return;
    };
    cluster.apply(DEPLOYMENT).await.ok();
    assert_eq!(
        cluster
            .kubectl(&["scale", "deployment/web", "--replicas=5"])
            .await
            .ok()
            .trim(),
        "deployment.apps/web scaled"
    );
    let stored = cluster
        .get("/apis/apps/v1/namespaces/default/deployments/web")
        .await
        .unwrap();
    assert_eq!(stored["spec"]["replicas"], 5);
    let scale = cluster
        .get("/apis/apps/v1/namespaces/default/deployments/web/scale")
        .await
        .unwrap();
    assert_eq!(
        (scale["kind"].as_str(), scale["status"]["selector"].as_str()),
        (Some("Scale"), Some("app=web"))
    );
    // A precondition on the current size is checked.
    let refused = cluster
        .kubectl(&[
            "scale",
            "deployment/web",
            "--current-replicas=2",
            "--replicas=1",
        ])
        .await;
    assert_ne!(refused.code, 0);
    assert!(
        refused.stderr.contains("Expected replicas to be 2, was 5"),
        "{}",
        refused.stderr
    );

    let template = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app", "image": "web:1"}]}});
    cluster
        .create(
            "/apis/apps/v1/namespaces/default/replicasets",
            json!({"metadata": {"name": "web-rs"}, "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": template}}),
        )
        .await;
    cluster
        .kubectl(&["scale", "rs", "web-rs", "--replicas=0"])
        .await
        .ok();
    assert_eq!(
        cluster
            .get("/apis/apps/v1/namespaces/default/replicasets/web-rs")
            .await
            .unwrap()["spec"]["replicas"],
        0
    );

    install_widgets(&cluster).await;
    assert!(
        cluster
            .kubectl(&["scale", "widget", "gizmo", "--replicas=3"])
            .await
            .ok()
            .contains("widget.example.com/gizmo scaled")
    );
    assert_eq!(
        cluster
            .get("/apis/example.com/v1/namespaces/default/widgets/gizmo")
            .await
            .unwrap()["spec"]["replicas"],
        3
    );
}

#[tokio::test]
async fn cordon_and_uncordon_toggle_unschedulable() {
    let Some(cluster) = Cluster::start("cordon").await else {
        return;
    };
    ready_node(&cluster, "node-a", json!({})).await;
    assert_eq!(
        cluster.kubectl(&["cordon", "node-a"]).await.ok().trim(),
        "node/node-a cordoned"
    );
    let nodes = cluster.kubectl(&["get", "nodes"]).await;
    assert_eq!(row(&nodes, "node-a")[1], "Ready,SchedulingDisabled");
    let unschedulable = cluster
        .kubectl(&[
            "get",
            "nodes",
            "--field-selector",
            "spec.unschedulable=true",
            "-o",
            "name",
        ])
        .await;
    assert_eq!(unschedulable.ok().trim(), "node/node-a");
    assert_eq!(
        cluster.kubectl(&["uncordon", "node-a"]).await.ok().trim(),
        "node/node-a uncordoned"
    );
    let stored = cluster.get("/api/v1/nodes/node-a").await.unwrap();
    assert!(stored["spec"].get("unschedulable").is_none(), "{stored}");
}

/// Stands in for the kubelets: removes pods whose grace period has started, as a kubelet does
/// once their containers stop (the emulator has no physics in these tests).
fn finish_terminating_pods(client: kube::Client) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let list = http::Request::get("/api/v1/pods").body(Vec::new()).unwrap();
            if let Ok(pods) = client.request::<Value>(list).await {
                for pod in pods["items"].as_array().into_iter().flatten() {
                    if pod.pointer("/metadata/deletionTimestamp").is_some() {
                        let path = format!(
                            "/api/v1/namespaces/{}/pods/{}",
                            pod["metadata"]["namespace"].as_str().unwrap(),
                            pod["metadata"]["name"].as_str().unwrap()
                        );
                        let delete = http::Request::delete(path)
                            .header("Content-Type", "application/json")
                            .body(json!({"gracePeriodSeconds": 0}).to_string().into_bytes())
                            .unwrap();
                        let _ = client.request::<Value>(delete).await;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// A node with a daemon pod and two replica pods owned by real owners.
async fn node_with_workloads(cluster: &Cluster) {
    ready_node(cluster, "node-a", json!({})).await;
    let template = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "app", "image": "web:1"}]}});
    let replica_set = cluster
        .create(
            "/apis/apps/v1/namespaces/default/replicasets",
            json!({"metadata": {"name": "web-rs"}, "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": template}}),
        )
        .await;
    let daemon_set = cluster
        .create(
            "/apis/apps/v1/namespaces/default/daemonsets",
            json!({"metadata": {"name": "agent"}, "spec": {"selector": {"matchLabels": {"app": "agent"}}, "template": template}}),
        )
        .await;
    let rs_uid = replica_set["metadata"]["uid"].as_str().unwrap();
    let ds_uid = daemon_set["metadata"]["uid"].as_str().unwrap();
    for (name, labels, owner) in [
        (
            "web-1",
            json!({"app": "web"}),
            ("ReplicaSet", "web-rs", rs_uid),
        ),
        (
            "web-2",
            json!({"app": "web"}),
            ("ReplicaSet", "web-rs", rs_uid),
        ),
        (
            "agent-x",
            json!({"app": "agent"}),
            ("DaemonSet", "agent", ds_uid),
        ),
    ] {
        cluster
            .create(
                "/api/v1/namespaces/default/pods",
                pod(name, Some("node-a"), labels, Some(owner)),
            )
            .await;
        run_pod(cluster, name, true, 0).await;
    }
}

#[tokio::test]
async fn drain_evicts_pods_within_their_budget_and_leaves_daemon_pods() {
    let Some(cluster) = Cluster::start("drain").await else {
        return;
    };
    node_with_workloads(&cluster).await;
    cluster
        .create(
            "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
            json!({"metadata": {"name": "web-pdb"}, "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}}),
        )
        .await;
    let kubelet = finish_terminating_pods(cluster.client.clone());
    // Without --ignore-daemonsets kubectl refuses, as against a real cluster.
    let refused = cluster.kubectl(&["drain", "node-a", "--timeout=20s"]).await;
    assert_ne!(refused.code, 0);
    assert!(
        refused.stderr.contains("DaemonSet-managed Pods"),
        "{}",
        refused.stderr
    );

    let run = cluster
        .kubectl(&["drain", "node-a", "--ignore-daemonsets", "--timeout=60s"])
        .await;
    let text = run.ok();
    assert!(
        text.contains("node/node-a already cordoned"),
        "the refused drain cordoned it: {text}"
    );
    assert!(
        text.contains("pod/web-1 evicted") && text.contains("pod/web-2 evicted"),
        "{text}"
    );
    assert!(text.contains("node/node-a drained"), "{text}");
    assert!(
        run.stderr
            .to_lowercase()
            .contains("ignoring daemonset-managed pods: default/agent-x"),
        "{}",
        run.stderr
    );
    kubelet.abort();
    let left = cluster.kubectl(&["get", "pods", "-o", "name"]).await;
    assert_eq!(left.ok().trim(), "pod/agent-x");
    let node = cluster.get("/api/v1/nodes/node-a").await.unwrap();
    assert_eq!(node["spec"]["unschedulable"], true);
}

#[tokio::test]
async fn drain_stops_at_a_disruption_budget_that_allows_no_eviction() {
    let Some(cluster) = Cluster::start("drain_blocked").await else {
        return;
    };
    node_with_workloads(&cluster).await;
    cluster
        .create(
            "/apis/policy/v1/namespaces/default/poddisruptionbudgets",
            json!({"metadata": {"name": "web-pdb"}, "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}),
        )
        .await;
    let run = cluster
        .kubectl(&["drain", "node-a", "--ignore-daemonsets", "--timeout=3s"])
        .await;
    assert_ne!(run.code, 0);
    assert!(
        run.stderr
            .contains("Cannot evict pod as it would violate the pod's disruption budget"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("web-pdb"), "{}", run.stderr);
    let left = cluster.kubectl(&["get", "pods", "--no-headers"]).await;
    assert_eq!(left.rows().len(), 3, "nothing was evicted");
}

#[tokio::test]
async fn api_resources_lists_verbs_short_names_and_categories() {
    let Some(cluster) = Cluster::start("api_resources").await else {
        return;
    };
    cluster.apply(WIDGET_CRD).await.ok();
    let run = cluster.kubectl(&["api-resources", "-o", "wide"]).await;
    assert_eq!(
        header(&run),
        [
            "NAME",
            "SHORTNAMES",
            "APIVERSION",
            "NAMESPACED",
            "KIND",
            "VERBS",
            "CATEGORIES"
        ]
    );
    let pods = row(&run, "pods");
    assert_eq!(&pods[1..5], ["po", "v1", "true", "Pod"]);
    assert_eq!(
        pods[5],
        "create,delete,deletecollection,get,list,patch,update,watch"
    );
    assert_eq!(pods[6], "all");
    let widgets = row(&run, "widgets");
    assert_eq!(&widgets[1..5], ["wd", "example.com/v1", "true", "Widget"]);
    assert_eq!(widgets[6], "all,gadgets");
    let nodes = cluster
        .kubectl(&["api-resources", "--namespaced=false", "-o", "name"])
        .await;
    assert!(
        nodes.ok().lines().any(|l| l == "nodes") && !nodes.stdout.lines().any(|l| l == "pods"),
        "{}",
        nodes.stdout
    );
    let versions = cluster.kubectl(&["api-versions"]).await;
    assert!(
        versions.ok().lines().any(|l| l == "example.com/v1"),
        "{}",
        versions.stdout
    );
}

#[tokio::test]
async fn explain_reads_custom_resource_schemas_from_openapi_v3() {
    let Some(cluster) = Cluster::start("explain").await else {
        return;
    };
    cluster.apply(WIDGET_CRD).await.ok();
    let run = cluster.kubectl(&["explain", "widgets"]).await;
    let text = run.ok();
    assert!(
        text.contains("KIND:       Widget") && text.contains("A Widget is a gadget for testing."),
        "{text}"
    );
    assert!(text.contains("spec\t<Object>"), "{text}");
    let spec = cluster.kubectl(&["explain", "widgets.spec"]).await;
    let text = spec.ok();
    assert!(
        text.contains("How big the widget is, in centimetres."),
        "{text}"
    );
    assert!(text.contains("enum: red, blue"), "{text}");
    let parts = cluster.kubectl(&["explain", "wd.spec.parts.name"]).await;
    assert!(parts.ok().contains("Name of the part."), "{}", parts.stdout);
    let recursive = cluster
        .kubectl(&["explain", "widgets", "--recursive"])
        .await;
    assert!(recursive.ok().contains("colour"), "{}", recursive.stdout);
    // Built-in types are served with a minimal schema.
    let pods = cluster.kubectl(&["explain", "pods"]).await;
    assert!(pods.ok().contains("KIND:       Pod"), "{}", pods.stdout);
    let missing = cluster.kubectl(&["explain", "widgets.spec.nothing"]).await;
    assert_ne!(missing.code, 0);
}

#[tokio::test]
async fn create_from_a_file_and_edit_free_commands_work() {
    let Some(cluster) = Cluster::start("create_label_annotate").await else {
        return;
    };
    let created = cluster
        .kubectl_with_input(&["create", "-f", "-"], Some(DEPLOYMENT))
        .await;
    assert!(created.ok().contains("deployment.apps/web created"));
    cluster
        .kubectl(&["label", "deployment", "web", "tier=front"])
        .await
        .ok();
    cluster
        .kubectl(&["annotate", "deployment", "web", "note=hello"])
        .await
        .ok();
    let patched = cluster
        .kubectl(&[
            "patch",
            "deployment",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec":{"paused":true}}"#,
        ])
        .await;
    assert!(patched.ok().contains("deployment.apps/web patched"));
    let stored = cluster
        .get("/apis/apps/v1/namespaces/default/deployments/web")
        .await
        .unwrap();
    assert_eq!(stored["metadata"]["labels"]["tier"], "front");
    assert_eq!(stored["metadata"]["annotations"]["note"], "hello");
    assert_eq!(stored["spec"]["paused"], true);
    let shown = cluster
        .kubectl(&["get", "deploy", "-l", "tier=front", "-o", "name"])
        .await;
    assert_eq!(shown.ok().trim(), "deployment.apps/web");
}
