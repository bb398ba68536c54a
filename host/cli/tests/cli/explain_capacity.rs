//! `joinery explain capacity` against `joinery sim serve`: nothing learned, then what the
//! controller's ConfigMap holds, as a table and as JSON.

use std::io::{Read, Write};
use std::process::Command;

use serde_json::{Value, json};

use crate::run::sim_serve;

/// The emulated API server's URL, from the kubeconfig `sim serve` wrote.
fn server(kubeconfig: &std::path::Path) -> String {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    text.lines()
        .find_map(|l| l.trim().strip_prefix("server:"))
        .unwrap()
        .trim()
        .trim_matches('"')
        .to_string()
}

/// POSTs `body` to the emulated API server (plain HTTP on loopback); returns the status line.
fn post(server: &str, path: &str, body: &Value) -> String {
    let address = server
        .strip_prefix("http://")
        .expect("the emulator speaks plain HTTP");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    let body = body.to_string();
    write!(stream, "POST {path} HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer.lines().next().unwrap_or_default().to_string()
}

fn explain(kubeconfig: &std::path::Path, json: bool) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_joinery"));
    cmd.args(["explain", "capacity", "--kubeconfig"])
        .arg(kubeconfig);
    if json {
        cmd.arg("--json");
    }
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

#[test]
fn explain_capacity_shows_what_the_controller_learned() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, kubeconfig) = sim_serve(dir.path());
    let (ok, stdout, stderr) = explain(&kubeconfig, false);
    assert!(ok, "{stderr}");
    assert!(stdout.starts_with("Nothing learned yet"), "{stdout}");

    let learned = json!({"sim.joinery.dev/SimNodeClass/default": {"m-4": {
        "capacity": {"cpu": "4", "memory": "8Gi"}, "allocatable": {"cpu": "2900m", "memory": "7Gi"}, "nodes": 3},
        "m-bad": {"capacity": {"cpu": "4", "memory": "8Gi"}, "allocatable": {"cpu": "5", "memory": "7Gi"}, "nodes": 1}}});
    let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "joinery-learned-capacity", "namespace": "joinery"},
                            "data": {"learned.json": learned.to_string()}});
    let status = post(
        &server(&kubeconfig),
        "/api/v1/namespaces/joinery/configmaps",
        &config_map,
    );
    assert!(status.contains(" 201 "), "{status}");

    let (ok, stdout, stderr) = explain(&kubeconfig, false);
    assert!(ok, "{stderr}");
    let row = stdout
        .lines()
        .find(|l| l.starts_with("sim.joinery.dev/SimNodeClass/default"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        row.contains("m-4")
            && row.contains("cpu=2900m")
            && row.contains("memory=7Gi")
            && row.contains(" 3 "),
        "{row}"
    );
    let header = stdout
        .lines()
        .find(|l| l.starts_with("NODECLASS"))
        .unwrap_or_else(|| panic!("{stdout}"));
    // The columns line up under their headings, however long the NodeClass key is.
    for (heading, cell) in [("INSTANCE TYPE", "m-4"), ("CAPACITY", "cpu=4")] {
        assert_eq!(header.find(heading), row.find(cell), "{header}\n{row}");
    }
    assert_eq!(
        header.find("NODES").map(|i| i + "NODES".len()),
        row.find(" 3 ").map(|i| i + 2),
        "{header}\n{row}"
    );
    assert!(
        stdout.contains(
            "sim.joinery.dev/SimNodeClass/default m-bad: allocatable.cpu is above capacity.cpu"
        ),
        "the tampered entry is listed as ignored: {stdout}"
    );
    assert!(
        !stdout
            .lines()
            .any(|l| l.starts_with("sim.joinery.dev/SimNodeClass/default") && l.contains("m-bad")),
        "{stdout}"
    );
    let (ok, stdout, stderr) = explain(&kubeconfig, true);
    assert!(ok, "{stderr}");
    let parsed: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(parsed, learned);
}
