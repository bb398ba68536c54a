//! `joinery run` against the emulated cluster served by `joinery sim serve`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn get(port: u16, path: &str) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

#[test]
fn run_serves_probes_and_metrics_against_a_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let _sim = KillOnDrop(
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
    let (metrics, health) = (free_port(), free_port());
    let _run = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_joinery"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .env("METRICS_PORT", metrics.to_string())
            .env("HEALTH_PROBE_PORT", health.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if get(health, "/readyz").is_some_and(|r| r.starts_with("HTTP/1.1 200")) {
            break;
        }
        assert!(Instant::now() < deadline, "joinery run never became ready");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(get(health, "/healthz").unwrap().starts_with("HTTP/1.1 200"));
    let body = get(metrics, "/metrics").unwrap();
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(body.contains("# TYPE karpenter_nodeclaims_created_total counter"), "{body}");
    assert!(get(metrics, "/nothing").unwrap().starts_with("HTTP/1.1 404"));
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
