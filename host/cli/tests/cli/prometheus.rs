//! The chart's alerts (`charts/joinery/files/prometheus-rules.yaml`) and Grafana dashboards
//! (`charts/joinery/files/dashboards/*.json`), checked with the real Prometheus tools:
//! `promtool check rules` and `promtool test rules` on the alerts, and a real Prometheus
//! scraping `joinery run` through a simulated scale-up and scale-down, asked for every
//! dashboard panel's and every alert's expression over its HTTP API.
//!
//! The binaries come from `$JOINERY_PROMETHEUS` and `$JOINERY_PROMTOOL`, else the PATH
//! (`.ci/install-prometheus` installs Debian's `prometheus` package). Without them the tests
//! that need them print a notice and pass; `.ci/run` sets both variables, so in CI a missing
//! binary fails them instead.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use crate::management::apply;
use crate::support::kubectl_output as kubectl;
use crate::support::{KillOnDrop, eventually, free_port, printed_value, repo, sim_serve};

const RULES: &str = "charts/joinery/files/prometheus-rules.yaml";
const RULE_TESTS: &str = "charts/joinery/files/prometheus-rules.test.yaml";
const DASHBOARDS: &str = "charts/joinery/files/dashboards";

/// The binary named by `var`, else `name` on the PATH, or `None` after printing why `test` is
/// skipped. A variable that names no file is an error, not a skip.
fn tool(var: &str, name: &str, test: &str) -> Option<PathBuf> {
    if let Some(named) = std::env::var_os(var) {
        let named = PathBuf::from(named);
        assert!(
            named.is_file(),
            "{var}={} is not a file; run .ci/install-prometheus",
            named.display()
        );
        return Some(named);
    }
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join(name))
            .find(|candidate| candidate.is_file())
    });
    if found.is_none() {
        println!("NOTICE: no {name} (run .ci/install-prometheus, or set {var}); skipping {test}");
    }
    found
}

fn promtool(test: &str) -> Option<PathBuf> {
    tool("JOINERY_PROMTOOL", "promtool", test)
}

fn prometheus(test: &str) -> Option<PathBuf> {
    tool("JOINERY_PROMETHEUS", "prometheus", test)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

/// The rule file, parsed.
fn rules() -> Value {
    serde_norway::from_str(&read(RULES)).expect("the rule file parses")
}

/// Every alert of the rule file: (name, expression).
fn alerts() -> Vec<(String, String)> {
    rules()["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter())
        .filter_map(|r| Some((r["alert"].as_str()?.into(), r["expr"].as_str()?.into())))
        .collect()
}

/// Every panel expression of every dashboard: (dashboard file, panel title, expression).
fn panel_queries() -> Vec<(String, String, String)> {
    let mut queries = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(repo().join(DASHBOARDS))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for file in files {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap())
            .unwrap_or_else(|e| panic!("{name} is not JSON: {e}"));
        for panel in dashboard["panels"].as_array().unwrap() {
            let title = panel["title"].as_str().unwrap_or_default().to_string();
            let targets = panel["targets"].as_array().unwrap();
            assert!(!targets.is_empty(), "{name}: panel {title} has no query");
            for target in targets {
                let expr = target["expr"].as_str().unwrap_or_default();
                assert!(!expr.is_empty(), "{name}: panel {title} has an empty query");
                queries.push((name.clone(), title.clone(), expr.to_string()));
            }
        }
    }
    assert_eq!(
        queries
            .iter()
            .map(|(file, _, _)| file)
            .collect::<BTreeSet<_>>()
            .len(),
        3,
        "the capacity, disruption and plugins dashboards"
    );
    queries
}

/// PromQL's functions, aggregations and keywords: every other identifier outside braces,
/// brackets, strings and grouping clauses is a metric name.
const PROMQL_WORDS: [&str; 24] = [
    "sum",
    "max",
    "min",
    "avg",
    "count",
    "rate",
    "increase",
    "irate",
    "histogram_quantile",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "and",
    "or",
    "unless",
    "bool",
    "offset",
    "topk",
    "bottomk",
    "absent",
    "delta",
];

/// The metric names an expression reads (a histogram's series as written, `…_bucket`).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let chars: Vec<char> = expr.chars().collect();
    let mut i = 0;
    let mut after_grouping = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '{' || c == '[' || (c == '(' && after_grouping) {
            let close = match c {
                '{' => '}',
                '[' => ']',
                _ => ')',
            };
            while i < chars.len() && chars[i] != close {
                i += 1;
            }
            i += 1;
            after_grouping = false;
        } else if c.is_ascii_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            after_grouping = [
                "by",
                "without",
                "on",
                "ignoring",
                "group_left",
                "group_right",
            ]
            .contains(&word.as_str());
            if !PROMQL_WORDS.contains(&word.as_str()) {
                names.insert(word);
            }
        } else {
            if !c.is_whitespace() {
                after_grouping = false;
            }
            i += 1;
        }
    }
    names
}

/// Whether `name` is one of `families` or a series of one of them (a histogram's `_bucket`,
/// `_sum`, `_count`).
fn is_in(name: &str, families: &BTreeSet<String>) -> bool {
    families.contains(name)
        || ["_bucket", "_sum", "_count"]
            .iter()
            .filter_map(|suffix| name.strip_suffix(suffix))
            .any(|family| families.contains(family))
}

/// The metric names the controller declares (the string constants of its `names` module).
fn declared_metrics() -> BTreeSet<String> {
    let source = read("host/controller/src/metrics/names.rs");
    source
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            ["karpenter_", "joinery_", "operator_"]
                .iter()
                .any(|p| s.starts_with(p))
                && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
        .map(String::from)
        .collect()
}

#[test]
fn the_metric_name_reader_sees_names_and_skips_functions_labels_and_ranges() {
    let names = metric_names(
        r#"histogram_quantile(0.9, sum by (le, nodepool) (rate(a_seconds_bucket{x="y{"}[5m]))) / on (pod) group_left b_total > 0 or max without (instance) (c)"#,
    );
    assert_eq!(
        names,
        ["a_seconds_bucket", "b_total", "c"]
            .map(String::from)
            .into()
    );
    let families = ["a_seconds", "x_count"].map(String::from).into();
    assert!(is_in("a_seconds_bucket", &families));
    assert!(is_in("x_count", &families), "a gauge may end in _count");
    assert!(!is_in("b_total", &families));
}

#[test]
fn dashboards_and_alerts_read_only_metrics_the_controller_declares() {
    let declared = declared_metrics();
    assert!(
        declared.contains("karpenter_nodes_allocatable"),
        "{declared:?}"
    );
    let mut expressions: Vec<(String, String)> = panel_queries()
        .into_iter()
        .map(|(file, title, expr)| (format!("{file}: {title}"), expr))
        .collect();
    expressions.extend(
        alerts()
            .into_iter()
            .map(|(name, expr)| (format!("alert {name}"), expr)),
    );
    for (what, expr) in &expressions {
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{what}: {expr}");
        for name in names {
            assert!(
                is_in(&name, &declared),
                "{what} reads {name}, which Joinery does not export: {expr}"
            );
        }
    }
}

#[test]
fn promtool_checks_the_alert_rules() {
    let Some(promtool) = promtool("promtool_checks_the_alert_rules") else {
        return;
    };
    let out = Command::new(&promtool)
        .args(["check", "rules"])
        .arg(repo().join(RULES))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "promtool check rules failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let count = alerts().len();
    assert!(count >= 5, "the alerts of docs/operations.md");
    assert!(
        text.contains(&format!("SUCCESS: {count} rules found")),
        "{text}"
    );
}

#[test]
fn promtool_unit_tests_make_every_alert_fire_and_stay_quiet() {
    let Some(promtool) = promtool("promtool_unit_tests_make_every_alert_fire_and_stay_quiet")
    else {
        return;
    };
    // Every alert has a case where it fires and one where it must not.
    let tests: Value = serde_norway::from_str(&read(RULE_TESTS)).unwrap();
    let mut fires = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for test in tests["tests"].as_array().unwrap() {
        for case in test["alert_rule_test"].as_array().unwrap() {
            let name = case["alertname"].as_str().unwrap().to_string();
            let expected = case["exp_alerts"].as_array().map_or(0, Vec::len);
            if expected == 0 {
                quiet.insert(name);
            } else {
                fires.insert(name);
            }
        }
    }
    let names: BTreeSet<String> = alerts().into_iter().map(|(name, _)| name).collect();
    assert_eq!(fires, names, "a case where each alert fires");
    assert_eq!(quiet, names, "a case where each alert stays quiet");
    let out = Command::new(&promtool)
        .args(["test", "rules"])
        .arg(repo().join(RULE_TESTS))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool test rules failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---------------------------------------------------------------------------------------------
// A real Prometheus scraping `joinery run`

/// A GET on loopback (HTTP/1.0, so the body is never chunked); the status line and body.
fn http_get(port: u16, path: &str) -> Option<(String, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

/// `text` percent-encoded for a query string.
fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Prometheus's HTTP API on one port.
struct Api(u16);

impl Api {
    /// `GET /api/v1/PATH`; the `data` of a successful answer.
    fn get(&self, path: &str) -> Result<Value, String> {
        let (status, body) =
            http_get(self.0, &format!("/api/v1/{path}")).ok_or("Prometheus did not answer")?;
        let answer: Value =
            serde_json::from_str(&body).map_err(|e| format!("{status}: {e}: {body}"))?;
        if answer["status"] != "success" {
            return Err(format!("{status}: {body}"));
        }
        Ok(answer["data"].clone())
    }

    /// The series an instant query returns now.
    fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let data = self.get(&format!("query?query={}", encode(expr)))?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }

    /// The series a range query returns between `start` and now, every 2 s.
    fn query_range(&self, expr: &str, start: SystemTime) -> Result<Vec<Value>, String> {
        let seconds = |t: SystemTime| t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
        let data = self.get(&format!(
            "query_range?query={}&start={}&end={}&step=2",
            encode(expr),
            seconds(start),
            seconds(SystemTime::now()) + 1
        ))?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }

    /// Whether an instant query returns at least one series now.
    fn has(&self, expr: &str) -> bool {
        self.query(expr).is_ok_and(|r| !r.is_empty())
    }
}

/// Metrics a healthy run legitimately never writes (errors, evictions of pods a scale-down
/// deleted first, commands that failed): an expression reading one of them may return
/// nothing, provided every other metric it reads had series and the controller declares these.
const EMPTY_WHEN_HEALTHY: [&str; 7] = [
    "joinery_plugin_errors_total",
    "karpenter_cloudprovider_errors_total",
    "joinery_controller_reconcile_errors_total",
    "karpenter_pods_eviction_requests_total",
    "joinery_instances_garbage_collected_total",
    "karpenter_voluntary_disruption_failed_validations_total",
    "karpenter_voluntary_disruption_queue_failures_total",
];

/// The cluster the run scales: a SimNodeClass and NodePool (with a CPU limit, and empty nodes
/// removed 5 s after they empty), a DaemonSet, and a Deployment of three 1-CPU pods.
const CLUSTER: &str = r#"
apiVersion: sim.joinery.dev/v1alpha1
kind: SimNodeClass
metadata: {name: default}
spec:
  userDataRenderer:
    name: k3s
    parameters: {token: metrics, providerIDCommand: cat /var/lib/simcloud/instance-id}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  limits: {cpu: "1000"}
  template:
    spec:
      nodeClassRef: {group: sim.joinery.dev, kind: SimNodeClass, name: default}
      requirements:
        - {key: kubernetes.io/arch, operator: In, values: [amd64]}
        - {key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}
        - {key: simcloud.joinery.dev/instance-family, operator: In, values: [c]}
  disruption: {consolidationPolicy: WhenEmpty, consolidateAfter: 5s}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: node-agent, namespace: default}
spec:
  selector: {matchLabels: {app: node-agent}}
  template:
    metadata: {labels: {app: node-agent}}
    spec:
      containers:
        - {name: agent, image: agent, resources: {requests: {cpu: 100m, memory: 64Mi}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: inflate, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: inflate}}
  template:
    metadata: {labels: {app: inflate}}
    spec:
      containers:
        - {name: inflate, image: pause, resources: {requests: {cpu: "1", memory: 256Mi}}}
"#;

#[test]
fn every_dashboard_panel_and_alert_reads_what_joinery_run_exports() {
    let test = "every_dashboard_panel_and_alert_reads_what_joinery_run_exports";
    let Some(prometheus) = prometheus(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let (_sim, printed) = sim_serve(&[
        "--kubeconfig-out".as_ref(),
        kubeconfig.as_os_str(),
        "--boot-delay".as_ref(),
        "15s".as_ref(),
    ]);
    let cloud = printed_value(&printed, "simulated cloud:").expect("the cloud's URL");
    let api = printed_value(&printed, "emulated API server:").expect("the API server's URL");

    let grants = dir.path().join("grants.yaml");
    std::fs::write(
        &grants,
        format!(
            "plugins:\n  simcloud:\n    http: [{cloud:?}]\n    config: {{endpoint: {cloud:?}, clusterName: joinery}}\n"
        ),
    )
    .unwrap();
    let (metrics, health) = (free_port(), free_port());
    let _run = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_joinery"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg("--grants")
            .arg(&grants)
            .env("METRICS_PORT", metrics.to_string())
            .env("HEALTH_PROBE_PORT", health.to_string())
            .env("SYSTEM_NAMESPACE", "default")
            .env("POD_NAME", "joinery-metrics")
            .env("CLUSTER_ENDPOINT", &api)
            .env("LOG_LEVEL", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("joinery.log")).unwrap())
            .spawn()
            .unwrap(),
    );

    let port = free_port();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global: {{scrape_interval: 1s, evaluation_interval: 1s}}\nrule_files: [{:?}]\nscrape_configs:\n  - job_name: joinery\n    static_configs: [{{targets: [\"127.0.0.1:{metrics}\"]}}]\n",
            repo().join(RULES).canonicalize().unwrap()
        ),
    )
    .unwrap();
    let _prometheus = KillOnDrop(
        Command::new(&prometheus)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("prometheus.log")).unwrap())
            .spawn()
            .unwrap(),
    );
    let prom = Api(port);
    let start = SystemTime::now();
    let log = |file: &str| std::fs::read_to_string(dir.path().join(file)).unwrap_or_default();
    eventually(
        Duration::from_secs(120),
        "Prometheus never scraped a synced joinery run",
        || prom.has("karpenter_cluster_state_synced == 1"),
    );

    // Scale up: a node for the three pods (and its DaemonSet pod), Ready.
    apply(&kubeconfig, CLUSTER);
    eventually(
        Duration::from_secs(300),
        "the pods never all ran on a node Joinery launched",
        || {
            prom.has(r#"sum(karpenter_nodes_total_pod_requests{nodepool="default", resource_type="cpu"}) >= 3.1"#)
            && prom.has(r#"sum(karpenter_pods_state{owner=~"ReplicaSet/.*", phase="Running"}) >= 3"#)
        },
    );
    eventually(
        Duration::from_secs(120),
        "no NodeClaim condition transition was timed",
        || prom.has(r#"operator_status_condition_transition_seconds_count{kind="NodeClaim"} > 0"#),
    );

    // Scale down: the empty node goes.
    let (ok, _, err) = kubectl(
        &kubeconfig,
        &[
            "scale",
            "deployment",
            "inflate",
            "-n",
            "default",
            "--replicas=0",
        ],
        None,
    );
    assert!(ok, "kubectl scale failed: {err}");
    let gone = [
        "karpenter_nodeclaims_instance_termination_duration_seconds_count > 0",
        "karpenter_nodeclaims_terminated_total > 0",
        r#"absent(karpenter_nodes_allocatable{nodepool="default"})"#,
    ];
    let deadline = Instant::now() + Duration::from_secs(300);
    let mut last = String::new();
    loop {
        let state: Vec<(&str, bool)> = gone.iter().map(|q| (*q, prom.has(q))).collect();
        if state.iter().all(|(_, holds)| *holds) {
            break;
        }
        let text = format!("{state:?}");
        if text != last {
            println!("waiting for the scale-down: {text}");
            last = text;
        }
        assert!(
            Instant::now() < deadline,
            "the empty node was never removed: {last}\njoinery run's log:\n{}",
            log("joinery.log")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // A few more scrapes, so that rates over the scale-down have two samples.
    let scrapes = || -> f64 {
        let result = prom
            .query(r#"sum(count_over_time(up{job="joinery"}[1h]))"#)
            .unwrap_or_default();
        result
            .first()
            .and_then(|s| s["value"][1].as_str()?.parse().ok())
            .unwrap_or(0.0)
    };
    let before = scrapes();
    eventually(
        Duration::from_secs(60),
        "Prometheus stopped scraping",
        || scrapes() >= before + 3.0,
    );

    // Every metric Prometheus saw declared in Joinery's exposition.
    let metadata = prom.get("metadata").unwrap();
    let declared: BTreeSet<String> = metadata.as_object().unwrap().keys().cloned().collect();
    assert!(
        declared.contains("karpenter_nodes_allocatable"),
        "{declared:?}"
    );

    let mut expressions: Vec<(String, String, bool)> = panel_queries()
        .into_iter()
        .map(|(file, title, expr)| (format!("{file}: panel {title:?}"), expr, false))
        .collect();
    expressions.extend(
        alerts()
            .into_iter()
            .map(|(name, expr)| (format!("alert {name}"), expr, true)),
    );
    // A family with no series is not in the exposition at all (the client leaves empty
    // families out), so Prometheus has no metadata for those a healthy run never writes:
    // for them the controller's declaration (its `names` module) stands in.
    let in_source = declared_metrics();
    let empty_when_healthy: BTreeSet<String> =
        EMPTY_WHEN_HEALTHY.iter().map(|n| n.to_string()).collect();
    let mut problems = Vec::new();
    let mut answered: BTreeMap<&str, usize> = BTreeMap::new();
    for (what, expr, alert) in &expressions {
        let result = match prom.query_range(expr, start) {
            Ok(result) => result,
            Err(e) => {
                problems.push(format!("{what}: Prometheus refused {expr}: {e}"));
                continue;
            }
        };
        let names = metric_names(expr);
        for name in &names {
            let declared_empty = is_in(name, &empty_when_healthy) && is_in(name, &in_source);
            if !is_in(name, &declared) && !declared_empty {
                problems.push(format!(
                    "{what} reads {name}, which joinery run does not export"
                ));
            }
        }
        if !result.is_empty() {
            *answered
                .entry(if *alert { "alerts" } else { "panels" })
                .or_default() += 1;
            continue;
        }
        // Empty: an alert may be quiet in a healthy cluster, and so may a panel of errors;
        // the metrics they read must then have series, unless a healthy run never writes
        // them (those Prometheus saw declared, above).
        let may_be_empty = *alert || names.iter().any(|n| is_in(n, &empty_when_healthy));
        if !may_be_empty {
            problems.push(format!("{what} returned no data over the run: {expr}"));
            continue;
        }
        for name in &names {
            let series = prom
                .query_range(&format!("count({{__name__=~\"{name}(_bucket)?\"}})"), start)
                .unwrap_or_default();
            if series.is_empty() && !is_in(name, &empty_when_healthy) {
                problems.push(format!(
                    "{what} reads {name}, which had no series over the run"
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{}\n\njoinery run's log:\n{}\nPrometheus's log:\n{}",
        problems.join("\n"),
        log("joinery.log"),
        log("prometheus.log")
    );
    assert!(answered.get("panels").copied().unwrap_or(0) > 0);

    // Prometheus loaded and evaluated every alert without an error.
    let groups = prom.get("rules").unwrap()["groups"].clone();
    let rules: Vec<&Value> = groups
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter())
        .collect();
    assert_eq!(rules.len(), alerts().len(), "{groups}");
    for rule in rules {
        assert_eq!(rule["health"], "ok", "{rule}");
    }
}
