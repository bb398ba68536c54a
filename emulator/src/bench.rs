//! A load benchmark of the emulated API server: it loads a large cluster (nodes, pods and the
//! ReplicaSets that own them) directly into the store while a pod watch is open, then times
//! list requests made over HTTP with the kube client, and reads the process's memory use
//! from `/proc/self/status`. `joinery bench sim` runs it and prints the medians.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::AsyncBufReadExt;
use kube::api::{ListParams, WatchParams};
use serde_json::{Value, json};

use crate::{ApiServer, ApiServerOptions};

/// Any failure of a benchmark run.
pub type BenchError = Box<dyn std::error::Error + Send + Sync>;

/// How big a cluster to load and how often to repeat each measurement.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Nodes to create.
    pub nodes: usize,
    /// Pods to create, bound round-robin to the nodes and spread over the namespaces.
    pub pods: usize,
    /// Namespaces the pods are spread over (each with ten ReplicaSets owning its pods).
    pub namespaces: usize,
    /// Measured repetitions of each list.
    pub runs: usize,
    /// Page size of the chunked lists.
    pub chunk: usize,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            nodes: 5_000,
            pods: 50_000,
            namespaces: 50,
            runs: 5,
            chunk: 500,
        }
    }
}

/// The timings of one kind of list request.
#[derive(Debug, Clone)]
pub struct ListTiming {
    /// What was listed, e.g. `pods, full list`.
    pub name: String,
    /// Items (or Table rows) the list returned.
    pub items: usize,
    /// Response bytes of one list (all pages together for chunked lists).
    pub bytes: usize,
    /// HTTP requests one list took.
    pub requests: usize,
    /// Wall time of each repetition, from the first request to the last byte of the last page.
    pub samples: Vec<Duration>,
}

impl ListTiming {
    /// The median repetition.
    pub fn median(&self) -> Duration {
        let mut sorted = self.samples.clone();
        sorted.sort();
        sorted.get(sorted.len() / 2).copied().unwrap_or_default()
    }

    /// The fastest repetition.
    pub fn min(&self) -> Duration {
        self.samples.iter().min().copied().unwrap_or_default()
    }

    /// The slowest repetition.
    pub fn max(&self) -> Duration {
        self.samples.iter().max().copied().unwrap_or_default()
    }
}

/// What a benchmark run measured.
#[derive(Debug, Clone)]
pub struct BenchReport {
    /// Nodes loaded.
    pub nodes: usize,
    /// Pods loaded.
    pub pods: usize,
    /// Other objects loaded (namespaces and ReplicaSets).
    pub other_objects: usize,
    /// Time to load everything, including waiting for the watch to keep up.
    pub load_time: Duration,
    /// Pod `ADDED` events the open watch received.
    pub watch_events: u64,
    /// Times the watch fell out of the event window and had to restart (410 Gone).
    pub watch_restarts: u64,
    /// Resident memory (KiB) before the server started, if the platform reports it.
    pub rss_before_kib: Option<u64>,
    /// Resident memory (KiB) once everything was loaded.
    pub rss_loaded_kib: Option<u64>,
    /// Peak resident memory (KiB) at the end, after the lists.
    pub rss_peak_kib: Option<u64>,
    /// The list measurements.
    pub lists: Vec<ListTiming>,
}

/// The list latency the emulator is held to: a full list of all pods (50,000 at the default
/// size), median over the runs.
pub const FULL_LIST_TARGET: Duration = Duration::from_secs(1);

/// The resident memory (MiB) the emulator is held to once the default cluster (5,000 nodes,
/// 50,000 pods) is loaded with a pod watch open.
pub const RSS_LOADED_TARGET_MIB: f64 = 400.0;

/// One target of [`BenchReport::targets`] and whether the run met it.
#[derive(Debug, Clone)]
pub struct TargetCheck {
    /// What is measured, e.g. `full list of 50000 pods (median)`.
    pub name: String,
    /// The target, e.g. `≤ 1000 ms`.
    pub target: String,
    /// What the run measured, e.g. `412 ms`.
    pub measured: String,
    /// Whether the measurement is within the target (`None`: not measured on this platform).
    pub met: Option<bool>,
}

impl BenchReport {
    /// The median of the full pod list, if it was measured.
    pub fn full_list_median(&self) -> Option<Duration> {
        self.lists
            .iter()
            .find(|l| l.name.starts_with("pods, full list"))
            .map(ListTiming::median)
    }

    /// The targets the emulator is held to (they are set for the default size: 5,000 nodes
    /// and 50,000 pods), each with what this run measured.
    pub fn targets(&self) -> Vec<TargetCheck> {
        let median = self.full_list_median();
        let rss_mib = self.rss_loaded_kib.map(|kib| kib as f64 / 1024.0);
        vec![
            TargetCheck {
                name: format!("full list of {} pods (median)", self.pods),
                target: format!("≤ {} ms", FULL_LIST_TARGET.as_millis()),
                measured: median
                    .map_or("n/a".into(), |d| format!("{:.0} ms", d.as_secs_f64() * 1e3)),
                met: median.map(|d| d <= FULL_LIST_TARGET),
            },
            TargetCheck {
                name: "resident memory loaded, watch open".into(),
                target: format!("≤ {RSS_LOADED_TARGET_MIB:.0} MiB"),
                measured: rss_mib.map_or("n/a".into(), |m| format!("{m:.0} MiB")),
                met: rss_mib.map(|m| m <= RSS_LOADED_TARGET_MIB),
            },
        ]
    }
}

/// A field of `/proc/self/status` in KiB (`VmRSS`, `VmHWM`); `None` off Linux.
pub fn proc_status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status
        .lines()
        .find(|line| line.starts_with(field) && line[field.len()..].starts_with(':'))?;
    line[field.len() + 1..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

fn node(index: usize) -> Value {
    let name = format!("node-{index:05}");
    let zone = format!("zone-{}", ["a", "b", "c"][index % 3]);
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "kubernetes.io/hostname": name,
                "node.kubernetes.io/instance-type": "c3-16",
                "topology.kubernetes.io/zone": zone,
                "karpenter.sh/nodepool": "default",
                "karpenter.sh/capacity-type": if index.is_multiple_of(4) { "spot" } else { "on-demand" },
            },
        },
        "spec": {"providerID": format!("sim://{zone}/{name}")},
        "status": crate::preload::node_status(index, &name),
    })
}

fn replica_set(app: usize) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": format!("app-{app}-5d8f9c"), "labels": {"app": format!("app-{app}")}},
        "spec": {
            "replicas": 100,
            "selector": {"matchLabels": {"app": format!("app-{app}"), "pod-template-hash": "5d8f9c"}},
            "template": {"metadata": {"labels": {"app": format!("app-{app}"), "pod-template-hash": "5d8f9c"}}, "spec": {"containers": [{"name": "app", "image": "registry.example/app:1"}]}},
        },
    })
}

fn pod(index: usize, namespace: &str, node: &str, app: usize, owner_uid: &str) -> Value {
    let app_name = format!("app-{app}");
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("{app_name}-5d8f9c-{index:06}"),
            "namespace": namespace,
            "labels": {"app": app_name, "pod-template-hash": "5d8f9c", "shard": format!("s{:02}", index % 100)},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("{app_name}-5d8f9c"), "uid": owner_uid, "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": {
            "nodeName": node,
            "schedulerName": "default-scheduler",
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "containers": [{
                "name": "app",
                "image": "registry.example/app:1",
                "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                "env": [{"name": "MODE", "value": "production"}],
                "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "512Mi"}},
            }],
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ],
        },
        "status": crate::preload::running_pod_status(index),
    })
}

/// Pod `ADDED` events seen by the watch, and how often it had to start over.
#[derive(Default)]
struct WatchProgress {
    added: AtomicU64,
    restarts: AtomicU64,
}

/// Keeps a watch on all pods open, counting `ADDED` events. A watch that falls out of the event
/// window (an `ERROR` event) or ends starts again from the current version, as an informer
/// would after relisting.
async fn watch_pods(client: kube::Client, progress: Arc<WatchProgress>) {
    let mut version = "0".to_string();
    loop {
        let Ok(request) = kube::core::Request::new("/api/v1/pods")
            .watch(&WatchParams::default().timeout(290), &version)
        else {
            return;
        };
        let Ok(stream) = client.request_stream(request).await else {
            return;
        };
        let mut lines = Box::pin(stream).lines();
        while let Some(Ok(line)) = futures::StreamExt::next(&mut lines).await {
            if line.contains("\"type\":\"ADDED\"") {
                progress.added.fetch_add(1, Ordering::Relaxed);
            } else if line.contains("\"type\":\"ERROR\"") {
                progress.restarts.fetch_add(1, Ordering::Relaxed);
                break;
            }
        }
        let Ok(request) =
            kube::core::Request::new("/api/v1/pods").list(&ListParams::default().limit(1))
        else {
            return;
        };
        let Ok(list) = client.request::<Value>(request).await else {
            return;
        };
        version = list
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or("0")
            .to_string();
    }
}

/// One GET over HTTP; returns the body.
async fn get(
    client: &kube::Client,
    path: &str,
    params: &ListParams,
    table: bool,
) -> Result<String, BenchError> {
    let mut request = kube::core::Request::new(path).list(params)?;
    if table {
        request.headers_mut().insert(
            http::header::ACCEPT,
            http::HeaderValue::from_static(
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
            ),
        );
    }
    Ok(client.request_text(request).await?)
}

/// The list's `metadata.continue` token (the list metadata comes last in the body).
fn continue_token(body: &str) -> Option<String> {
    let marker = "\"continue\":\"";
    let start = body.rfind(marker)? + marker.len();
    let end = body[start..].find('"')? + start;
    Some(body[start..end].to_string()).filter(|token| !token.is_empty())
}

/// The items (or Table rows) of a list body, counted without building them (a parsed
/// 50,000-pod list would take more memory than the server holding it).
fn count_items(body: &str, table: bool) -> Result<usize, BenchError> {
    #[derive(serde::Deserialize)]
    struct Counted {
        #[serde(default)]
        items: Vec<serde::de::IgnoredAny>,
        #[serde(default)]
        rows: Vec<serde::de::IgnoredAny>,
    }
    let counted: Counted = serde_json::from_str(body)?;
    Ok(if table {
        counted.rows.len()
    } else {
        counted.items.len()
    })
}

/// What one list returned: items (or Table rows), bytes and requests.
async fn list_once(
    client: &kube::Client,
    path: &str,
    params: &ListParams,
    table: bool,
    count: bool,
) -> Result<(usize, usize, usize), BenchError> {
    let mut params = params.clone();
    let (mut items, mut bytes, mut requests) = (0, 0, 0);
    loop {
        let body = get(client, path, &params, table).await?;
        requests += 1;
        bytes += body.len();
        let token = continue_token(&body);
        if count {
            items += count_items(&body, table)?;
        }
        match token {
            Some(token) if params.limit.is_some() => params.continue_token = Some(token),
            _ => return Ok((items, bytes, requests)),
        }
    }
}

/// Loads the cluster and measures; see the module documentation.
pub async fn run(options: &BenchOptions) -> Result<BenchReport, BenchError> {
    let rss_before_kib = proc_status_kib("VmRSS");
    let server = ApiServer::start(ApiServerOptions::default()).await?;
    let client = server.client()?;
    let progress = Arc::new(WatchProgress::default());
    let watcher = tokio::spawn(watch_pods(client.clone(), progress.clone()));

    let started = Instant::now();
    let store = server.store();
    let kind = |group: &str, plural: &str| {
        store
            .lookup(group, "v1", plural)
            .expect("built-in kinds are served")
    };
    let (namespaces_kind, nodes_kind, pods_kind, replica_sets_kind) = (
        kind("", "namespaces"),
        kind("", "nodes"),
        kind("", "pods"),
        kind("apps", "replicasets"),
    );
    for index in 0..options.nodes {
        store.create(&nodes_kind, None, node(index))?;
        if index % 200 == 0 {
            tokio::task::yield_now().await;
        }
    }
    let namespaces = options.namespaces.max(1);
    let mut owners: Vec<Vec<String>> = Vec::new();
    for n in 0..namespaces {
        let namespace = format!("team-{n:02}");
        store.create(
            &namespaces_kind,
            None,
            json!({"metadata": {"name": namespace}}),
        )?;
        let mut uids = Vec::new();
        for app in 0..10 {
            let created = store.create(&replica_sets_kind, Some(&namespace), replica_set(app))?;
            uids.push(
                created
                    .pointer("/metadata/uid")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            );
        }
        owners.push(uids);
    }
    for index in 0..options.pods {
        let n = index % namespaces;
        let app = index / namespaces % 10;
        let namespace = format!("team-{n:02}");
        let node = format!("node-{:05}", index % options.nodes.max(1));
        store.create(
            &pods_kind,
            Some(&namespace),
            pod(index, &namespace, &node, app, &owners[n][app]),
        )?;
        if index % 100 == 0 {
            tokio::task::yield_now().await;
            // Let the watch keep up, as the real server's write path would under a lagging watcher.
            while (index as u64).saturating_sub(progress.added.load(Ordering::Relaxed)) > 5_000 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    while progress.added.load(Ordering::Relaxed) < options.pods as u64 && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let load_time = started.elapsed();
    let rss_loaded_kib = proc_status_kib("VmRSS");

    let chunk = options.chunk.max(1) as u32;
    let node_name = format!("node-{:05}", options.nodes / 2);
    let namespace = format!("team-{:02}", namespaces / 2);
    let cases: Vec<(String, String, ListParams, bool)> = vec![
        (
            "pods, full list (all namespaces)".into(),
            "/api/v1/pods".into(),
            ListParams::default(),
            false,
        ),
        (
            format!("pods, in pages of {chunk} (limit/continue)"),
            "/api/v1/pods".into(),
            ListParams::default().limit(chunk),
            false,
        ),
        (
            format!("pods, first page of {chunk}"),
            "/api/v1/pods".into(),
            ListParams::default().limit(chunk),
            false,
        ),
        (
            "pods, label selector shard=s07 (1%)".into(),
            "/api/v1/pods".into(),
            ListParams::default().labels("shard=s07"),
            false,
        ),
        (
            "pods, label selector app=app-3 (10%)".into(),
            "/api/v1/pods".into(),
            ListParams::default().labels("app=app-3"),
            false,
        ),
        (
            format!("pods, field selector spec.nodeName={node_name}"),
            "/api/v1/pods".into(),
            ListParams::default().fields(&format!("spec.nodeName={node_name}")),
            false,
        ),
        (
            format!("pods in one namespace ({namespace})"),
            format!("/api/v1/namespaces/{namespace}/pods"),
            ListParams::default(),
            false,
        ),
        (
            format!("pods as Table in pages of {chunk} (kubectl get pods -A)"),
            "/api/v1/pods".into(),
            ListParams::default().limit(chunk),
            true,
        ),
        (
            "nodes, full list".into(),
            "/api/v1/nodes".into(),
            ListParams::default(),
            false,
        ),
    ];
    let mut lists = Vec::new();
    for (name, path, params, table) in cases {
        let first_page_only = name.contains("first page");
        let measure = |count: bool| {
            let (client, path, params) = (&client, path.clone(), params.clone());
            async move {
                if first_page_only {
                    let body = get(client, &path, &params, table).await?;
                    let items = if count { count_items(&body, table)? } else { 0 };
                    Ok::<_, BenchError>((items, body.len(), 1))
                } else {
                    list_once(client, &path, &params, table, count).await
                }
            }
        };
        // One unmeasured run that also counts what the list returns.
        let (items, bytes, requests) = measure(true).await?;
        let mut samples = Vec::with_capacity(options.runs);
        for _ in 0..options.runs.max(1) {
            let start = Instant::now();
            measure(false).await?;
            samples.push(start.elapsed());
        }
        lists.push(ListTiming {
            name,
            items,
            bytes,
            requests,
            samples,
        });
    }
    let report = BenchReport {
        nodes: options.nodes,
        pods: options.pods,
        other_objects: namespaces * 11,
        load_time,
        watch_events: progress.added.load(Ordering::Relaxed),
        watch_restarts: progress.restarts.load(Ordering::Relaxed),
        rss_before_kib,
        rss_loaded_kib,
        rss_peak_kib: proc_status_kib("VmHWM"),
        lists,
    };
    watcher.abort();
    server.shutdown().await;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_are_read_from_the_list_metadata() {
        let body = r#"{"items":[{"metadata":{"name":"a"}}],"metadata":{"continue":"abc123","resourceVersion":"9"}}"#;
        assert_eq!(continue_token(body).as_deref(), Some("abc123"));
        assert_eq!(
            continue_token(r#"{"items":[],"metadata":{"resourceVersion":"9"}}"#),
            None
        );
    }

    #[test]
    fn items_and_rows_are_counted_without_parsing_them() {
        let list = r#"{"apiVersion":"v1","items":[{"metadata":{"name":"a"}},{"a":[1,{"b":null}]}],"kind":"PodList","metadata":{}}"#;
        assert_eq!(count_items(list, false).unwrap(), 2);
        let table = r#"{"kind":"Table","rows":[{"cells":["a"]}],"columnDefinitions":[]}"#;
        assert_eq!(count_items(table, true).unwrap(), 1);
    }

    #[test]
    fn targets_report_whether_they_were_met() {
        let timing = |millis: u64| ListTiming {
            name: "pods, full list (all namespaces)".into(),
            items: 1,
            bytes: 1,
            requests: 1,
            samples: vec![Duration::from_millis(millis)],
        };
        let mut report = BenchReport {
            nodes: 1,
            pods: 1,
            other_objects: 0,
            load_time: Duration::ZERO,
            watch_events: 1,
            watch_restarts: 0,
            rss_before_kib: Some(1024),
            rss_loaded_kib: Some(300 * 1024),
            rss_peak_kib: Some(500 * 1024),
            lists: vec![timing(900)],
        };
        assert_eq!(
            report.targets().iter().map(|t| t.met).collect::<Vec<_>>(),
            [Some(true), Some(true)]
        );
        report.lists = vec![timing(1100)];
        report.rss_loaded_kib = None;
        assert_eq!(
            report.targets().iter().map(|t| t.met).collect::<Vec<_>>(),
            [Some(false), None]
        );
    }

    #[test]
    fn proc_status_fields_parse() {
        if cfg!(target_os = "linux") {
            assert!(proc_status_kib("VmRSS").is_some_and(|kib| kib > 0));
        }
        assert_eq!(proc_status_kib("NoSuchField"), None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_small_run_loads_everything_and_lists_it_back() {
        let options = BenchOptions {
            nodes: 20,
            pods: 300,
            namespaces: 3,
            runs: 1,
            chunk: 50,
        };
        let report = run(&options).await.unwrap();
        assert_eq!(report.watch_events, 300);
        let by_name = |prefix: &str| {
            report
                .lists
                .iter()
                .find(|l| l.name.starts_with(prefix))
                .unwrap()
        };
        assert_eq!(by_name("pods, full list").items, 300);
        let paged = by_name("pods, in pages");
        assert_eq!((paged.items, paged.requests), (300, 6));
        assert_eq!(by_name("pods, label selector shard").items, 3);
        assert_eq!(by_name("pods, field selector").items, 15);
        assert_eq!(by_name("pods as Table").items, 300);
        assert_eq!(by_name("nodes").items, 20);
        assert_eq!(by_name("pods in one namespace").items, 100);
    }
}
