//! `joinery run` against the emulated cluster served by `joinery sim serve`.

use crate::support::{KillOnDrop, eventually, free_port, http_get};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `joinery sim serve` writing its kubeconfig into `dir`; returns the server and the kubeconfig.
pub(crate) fn sim_serve(dir: &std::path::Path) -> (KillOnDrop, std::path::PathBuf) {
    let kubeconfig = dir.join("kubeconfig");
    let sim = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_joinery"))
            .args(["sim", "serve", "--kubeconfig-out"])
            .arg(&kubeconfig)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while !kubeconfig.exists() {
        assert!(Instant::now() < deadline, "sim serve wrote no kubeconfig");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(200));
    (sim, kubeconfig)
}

/// A `joinery run` replica named `pod` (its Lease identity starts with it); returns the
/// process and its metrics and health ports.
fn replica(kubeconfig: &std::path::Path, pod: &str) -> (KillOnDrop, u16, u16) {
    let (metrics, health) = (free_port(), free_port());
    let child = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_joinery"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .env("METRICS_PORT", metrics.to_string())
            .env("HEALTH_PROBE_PORT", health.to_string())
            .env("SYSTEM_NAMESPACE", "default")
            .env("POD_NAME", pod)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    (child, metrics, health)
}

/// Whether a replica serves the controller's metrics (only the leader runs the loops).
fn leads(metrics: u16) -> bool {
    http_get(metrics, "/metrics")
        .is_some_and(|body| body.contains("# TYPE karpenter_cluster_state_synced gauge"))
}

fn lease_holder(kubeconfig: &std::path::Path) -> String {
    let out = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args([
            "get",
            "lease",
            "-n",
            "default",
            "joinery-leader-election",
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ])
        .output()
        .expect("kubectl is installed");
    String::from_utf8_lossy(&out.stdout).to_string()
}

#[test]
fn run_serves_probes_and_metrics_against_a_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, kubeconfig) = sim_serve(dir.path());
    let (run, metrics, health) = replica(&kubeconfig, "replica-a");
    eventually(
        Duration::from_secs(60),
        "joinery run never became ready",
        || http_get(health, "/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200")),
    );
    assert!(
        http_get(health, "/healthz")
            .unwrap()
            .starts_with("HTTP/1.1 200")
    );
    eventually(
        Duration::from_secs(60),
        "the only replica never led",
        || leads(metrics),
    );
    assert!(
        http_get(metrics, "/nothing")
            .unwrap()
            .starts_with("HTTP/1.1 404")
    );
    // It has turned transparent huge pages off (where the kernel says).
    if let Ok(status) = std::fs::read_to_string(format!("/proc/{}/status", run.0.id()))
        && let Some(line) = status.lines().find(|l| l.starts_with("THP_enabled:"))
    {
        assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
    }
}

/// A GET that gives up after 5 s without an answer (a server that never answers would block
/// `get` forever).
fn get_within_5s(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// `count` idle connections to `port`, from source ports below the kernel's ephemeral range
/// (20000 on): the ports other tests' `free_port` draws are never taken by them.
fn idle_connections(port: u16, count: usize) -> Vec<TcpStream> {
    use socket2::{Domain, Socket, Type};
    let target = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut open = Vec::new();
    for source in 20_000u16..30_000 {
        if open.len() == count {
            break;
        }
        let Ok(socket) = Socket::new(Domain::IPV4, Type::STREAM, None) else {
            continue;
        };
        let from = std::net::SocketAddr::from(([127, 0, 0, 1], source));
        if socket.bind(&from.into()).is_err() {
            continue;
        }
        if socket
            .connect_timeout(&target.into(), Duration::from_secs(2))
            .is_ok()
        {
            open.push(TcpStream::from(socket));
        }
    }
    open
}

/// 300 idle connections to the probe port of a `joinery run` that may open only 160 files:
/// the server keeps at most 64 connections, closes the rest at once and cuts idle ones after
/// 5 s, so `/healthz` answers again (before, the idle connections used up the descriptors,
/// `accept` failed in a tight loop and the probe was never answered).
#[test]
fn idle_connections_cannot_starve_the_probes() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, kubeconfig) = sim_serve(dir.path());
    let (metrics, health) = (free_port(), free_port());
    let _run = KillOnDrop(
        Command::new("bash")
            .arg("-c")
            .arg("ulimit -n 160 && exec \"$0\" run --kubeconfig \"$1\"")
            .arg(env!("CARGO_BIN_EXE_joinery"))
            .arg(&kubeconfig)
            .env("METRICS_PORT", metrics.to_string())
            .env("HEALTH_PROBE_PORT", health.to_string())
            .env("SYSTEM_NAMESPACE", "default")
            .env("POD_NAME", "replica-a")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    eventually(
        Duration::from_secs(60),
        "joinery run never became ready",
        || get_within_5s(health, "/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200")),
    );
    let idle = idle_connections(health, 300);
    eventually(
        Duration::from_secs(60),
        "the probes never answered past 300 idle connections",
        || get_within_5s(health, "/healthz").is_some_and(|r| r.starts_with("HTTP/1.1 200")),
    );
    drop(idle);
}

#[test]
fn a_second_replica_stands_by_ready_and_leads_once_the_first_stops() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, kubeconfig) = sim_serve(dir.path());
    let (mut first, first_metrics, _) = replica(&kubeconfig, "replica-a");
    eventually(
        Duration::from_secs(60),
        "the first replica never led",
        || leads(first_metrics),
    );
    let (_second, second_metrics, second_health) = replica(&kubeconfig, "replica-b");
    eventually(
        Duration::from_secs(60),
        "the follower never became ready",
        || http_get(second_health, "/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200")),
    );
    // Well past several retry periods (2 s), the follower still only stands by.
    std::thread::sleep(Duration::from_secs(5));
    assert!(!leads(second_metrics), "two replicas lead at once");
    assert!(
        lease_holder(&kubeconfig).starts_with("replica-a_"),
        "{}",
        lease_holder(&kubeconfig)
    );
    // SIGTERM: the leader stops its loops and hands the Lease back, so the follower leads
    // within a retry period instead of waiting 15 s for the Lease to lapse.
    let terminated = Command::new("kill")
        .args(["-TERM", &first.0.id().to_string()])
        .status()
        .unwrap();
    assert!(terminated.success());
    let status = first.0.wait().unwrap();
    assert!(status.success(), "a clean stop exits 0: {status:?}");
    // Released: nobody holds the Lease, or the follower already took it (it retries every
    // 2 s, and may have done so before kubectl reads the Lease). Unreleased, the Lease would
    // still name the first replica until it lapsed, so this needs no deadline.
    let holder = lease_holder(&kubeconfig);
    assert!(
        holder.is_empty() || holder.starts_with("replica-b_"),
        "released: {holder}"
    );
    eventually(
        Duration::from_secs(30),
        "the follower never took over",
        || leads(second_metrics),
    );
    assert!(
        lease_holder(&kubeconfig).starts_with("replica-b_"),
        "{}",
        lease_holder(&kubeconfig)
    );
}

#[test]
fn run_refuses_a_bad_setting_naming_the_variable() {
    let out = Command::new(env!("CARGO_BIN_EXE_joinery"))
        .args(["run", "--kubeconfig", "/nonexistent"])
        .env("BATCH_IDLE_DURATION", "soon")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("BATCH_IDLE_DURATION"), "{stderr}");
}

/// `joinery run --log-format json` against an API server that refuses connections, with `env`;
/// the JSON log lines up to the first ERROR (the failed connection, logged at every level).
fn run_logs(cache: &std::path::Path, env: &[(&str, &str)]) -> Vec<serde_json::Value> {
    use std::io::BufRead;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let refused = free_port();
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: \"http://127.0.0.1:{refused}\"}}}}]\nusers: [{{name: u, user: {{}}}}]\ncontexts: [{{name: x, context: {{cluster: c, user: u}}}}]\ncurrent-context: x\n"
        ),
    )
    .unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_joinery"));
    command
        .args(["--log-format", "json", "run", "--kubeconfig"])
        .arg(&kubeconfig)
        .arg("--plugin-cache-dir")
        .arg(cache)
        .env("METRICS_PORT", free_port().to_string())
        .env("HEALTH_PROBE_PORT", free_port().to_string())
        .env_remove("RUST_LOG")
        .env_remove("LOG_LEVEL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = KillOnDrop(command.spawn().unwrap());
    let stderr = child.0.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut lines = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx.recv_timeout(left).unwrap_or_else(|_| {
            panic!("no ERROR line within 120 s with {env:?}; got:\n{lines:#?}")
        });
        let value: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        let error = value["level"] == "ERROR";
        lines.push(value);
        if error {
            return lines;
        }
    }
}

#[test]
fn run_honours_log_level_unless_rust_log_is_set() {
    let cache = tempfile::tempdir().unwrap();
    let levels = |lines: &[serde_json::Value]| {
        lines
            .iter()
            .map(|l| l["level"].as_str().unwrap().to_string())
            .collect::<std::collections::BTreeSet<_>>()
    };
    // Default (info): the start line, with the documented JSON keys.
    let lines = run_logs(cache.path(), &[]);
    let start = lines
        .iter()
        .find(|l| l["message"] == "starting controllers")
        .unwrap_or_else(|| panic!("{lines:#?}"));
    assert_eq!(start["level"], "INFO");
    let time = start["time"].as_str().unwrap();
    assert!(
        time.ends_with('Z') && time.len() == "2026-12-01T00:00:00.000Z".len(),
        "{start}"
    );
    assert_eq!(start["logger"], "controller");
    assert!(start["metrics_port"].is_number(), "{start}");
    assert!(!levels(&lines).contains("DEBUG"));
    // LOG_LEVEL=error: errors only.
    let lines = run_logs(cache.path(), &[("LOG_LEVEL", "error")]);
    assert_eq!(levels(&lines), ["ERROR".to_string()].into(), "{lines:#?}");
    // LOG_LEVEL=debug: Joinery's own debug lines (the compile cache, warm now), nobody else's.
    let lines = run_logs(cache.path(), &[("LOG_LEVEL", "debug")]);
    let debug: Vec<&serde_json::Value> = lines.iter().filter(|l| l["level"] == "DEBUG").collect();
    assert!(!debug.is_empty(), "{lines:#?}");
    assert!(
        debug.iter().all(|l| l["logger"] == "controller"),
        "{debug:#?}"
    );
    // RUST_LOG wins over LOG_LEVEL.
    let lines = run_logs(
        cache.path(),
        &[("LOG_LEVEL", "debug"), ("RUST_LOG", "error")],
    );
    assert_eq!(levels(&lines), ["ERROR".to_string()].into(), "{lines:#?}");
}

/// `KUBECONFIG` lists several files, merged as kubectl merges them (missing ones skipped, the
/// first to define a name wins), and `--context` picks a context from any of them.
#[test]
fn kubeconfig_lists_merge_and_context_picks_the_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, kubeconfig) = sim_serve(dir.path());
    let elsewhere = dir.path().join("elsewhere");
    let refused = free_port();
    std::fs::write(
        &elsewhere,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: elsewhere, cluster: {{server: \"http://127.0.0.1:{refused}\"}}}}]\nusers: [{{name: nobody, user: {{}}}}]\ncontexts: [{{name: elsewhere, context: {{cluster: elsewhere, user: nobody}}}}]\ncurrent-context: elsewhere\n"
        ),
    )
    .unwrap();
    let context = std::fs::read_to_string(&kubeconfig)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("current-context: ").map(str::to_string))
        .unwrap();
    let list = format!(
        "{}:{}:{}",
        dir.path().join("missing").display(),
        elsewhere.display(),
        kubeconfig.display()
    );
    let explain = |extra: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_joinery"))
            .args(["explain", "pod", "default/nope"])
            .args(extra)
            .env("KUBECONFIG", &list)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    // The first file's current context: the refused address.
    let stderr = explain(&[]);
    assert!(
        stderr.contains("Connection refused") || stderr.contains("Connect"),
        "{stderr}"
    );
    // --context names the emulated cluster's context, defined in the last file: it answers.
    let stderr = explain(&["--context", &context]);
    assert!(
        stderr.contains("cannot read pod default/nope: pods \"nope\" not found (404 NotFound)"),
        "{stderr}"
    );
    // The server's answer, not the client's dump of it.
    assert!(!stderr.contains("Status {"), "{stderr}");
    // No colour when stderr is not a terminal.
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
    // A pod that exists, as JSON.
    let pod = dir.path().join("pod.json");
    std::fs::write(&pod, r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"}, "spec": {"containers": [{"name": "c", "image": "pause"}]}}"#).unwrap();
    let applied = Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["apply", "-f"])
        .arg(&pod)
        .output()
        .expect("kubectl is installed");
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let out = Command::new(env!("CARGO_BIN_EXE_joinery"))
        .args([
            "explain",
            "pod",
            "default/web",
            "--json",
            "--context",
            &context,
        ])
        .env("KUBECONFIG", &list)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let explained: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (explained["namespace"].as_str(), explained["name"].as_str()),
        (Some("default"), Some("web"))
    );
    // A bare name is looked up in the context's namespace (`default` when it names none).
    let bare = Command::new(env!("CARGO_BIN_EXE_joinery"))
        .args(["explain", "pod", "web", "--json", "--context", &context])
        .env("KUBECONFIG", &list)
        .output()
        .unwrap();
    assert!(
        bare.status.success(),
        "{}",
        String::from_utf8_lossy(&bare.stderr)
    );
    let bare: serde_json::Value = serde_json::from_slice(&bare.stdout).unwrap();
    assert_eq!(bare["namespace"], explained["namespace"]);
    assert_eq!(bare["name"], explained["name"]);
    assert!(
        explained["explanation"]
            .as_array()
            .is_some_and(|lines| !lines.is_empty()),
        "{explained}"
    );
}
