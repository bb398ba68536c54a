//! The Exoscale judges (Exoscale's OpenAPI document and official Python client; see
//! `conformance/exoscale/`) against `joinery sim serve --cloud exoscale`, and the judge's own
//! ability to fail. The shipped Exoscale scenarios are judged where they run (`simulate.rs`).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use joinery_sim::exoscale::judges::Judges;
use serde_json::{Value, json};

use crate::support::{KillOnDrop, repo};

fn judges(test: &str) -> Option<Judges> {
    Judges::for_test(&repo(), test)
}

/// What `sim serve --cloud exoscale` printed about the fake Exoscale API.
struct Printed {
    url: String,
    zones: Vec<String>,
    key: String,
    secret: String,
}

fn serve_exoscale(journal: &std::path::Path) -> (KillOnDrop, Printed) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_joinery"))
        .args(["sim", "serve", "--cloud", "exoscale", "--exoscale-journal"])
        .arg(journal)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let server = KillOnDrop(child);
    let mut printed = Printed { url: String::new(), zones: Vec::new(), key: String::new(), secret: String::new() };
    let mut text = String::new();
    for line in stdout.by_ref().map_while(Result::ok) {
        text.push_str(&line);
        text.push('\n');
        let value = |prefix: &str| line.trim().strip_prefix(prefix).map(|v| v.trim().to_string());
        if let Some(url) = value("fake Exoscale API:") {
            printed.url = url;
        } else if let Some(rest) = value("zone endpoints:") {
            let zones = rest.split("(zones ").nth(1).unwrap_or_default().trim_end_matches(')');
            printed.zones = zones.split(", ").map(str::to_string).collect();
        } else if let Some(key) = value("API key:") {
            printed.key = key;
        } else if let Some(secret) = value("API secret:") {
            printed.secret = secret;
        } else if line.starts_with("press Ctrl-C") {
            break;
        }
    }
    assert!(!printed.url.is_empty() && !printed.key.is_empty() && !printed.secret.is_empty() && !printed.zones.is_empty(), "{text}");
    // Keep reading: a closed pipe would make the server's next line kill it.
    std::thread::spawn(move || stdout.for_each(drop));
    (server, printed)
}

#[test]
fn the_official_client_drives_sim_serve_within_the_definition() {
    let Some(judges) = judges("the_official_client_drives_sim_serve_within_the_definition") else { return };
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("exoscale.jsonl");
    let (_server, printed) = serve_exoscale(&journal);
    let zone = &printed.zones[1];
    let driven = judges
        .drive_client(&printed.url, zone, &printed.key, &printed.secret, &json!({"karpenter-sh_managed-by": "joinery"}))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(driven["zone"], zone.as_str());
    assert_eq!(driven["steps"].as_array().unwrap().len(), 11, "{driven}");
    let verdict = judges.check_journals(&[journal]).unwrap();
    assert!(verdict.violations.is_empty(), "{:#?}", verdict.violations);
    assert_eq!(verdict.operations["create-instance"], 3, "{:?}", verdict.operations);
    assert!(verdict.operations["get-operation"] >= 6, "{:?}", verdict.operations);
}

/// One exchange of a journal.
fn exchange(method: &str, path: &str, query: &str, request: Value, status: u16, response: Value) -> String {
    json!({"method": method, "path": path, "query": query, "requestBody": request, "status": status,
        "contentType": "application/json", "responseBody": response})
    .to_string()
}

#[test]
fn the_judge_names_the_operation_of_every_kind_of_violation() {
    let Some(judges) = judges("the_judge_names_the_operation_of_every_kind_of_violation") else { return };
    let id = "5f0d3a4e-2c1b-4b8e-9f00-000000000001";
    let good_create = json!({"instance-type": {"id": id}, "template": {"id": id}, "disk-size": 20, "ssh-keys": [{"name": "ops"}]});
    let mut deprecated = good_create.clone();
    deprecated["ssh-key"] = json!({"name": "ops"});
    let mut unknown = good_create.clone();
    unknown["disk-size-gib"] = json!(20);
    let mut mistyped = good_create.clone();
    mistyped["disk-size"] = json!("20");
    let mut missing = good_create.clone();
    missing.as_object_mut().unwrap().remove("template");
    let operation = json!({"id": id, "state": "pending", "reference": {"id": id}});
    let lines = [
        exchange("POST", "/ch-gva-2/v2/instance", "", good_create, 200, operation.clone()),
        exchange("POST", "/ch-gva-2/v2/instance", "", deprecated, 200, operation.clone()),
        exchange("POST", "/ch-gva-2/v2/instance", "", unknown, 200, operation.clone()),
        exchange("POST", "/ch-gva-2/v2/instance", "", mistyped, 200, operation.clone()),
        exchange("POST", "/ch-gva-2/v2/instance", "", missing, 200, operation.clone()),
        exchange("GET", "/ch-gva-2/v2/instance-flavour", "", Value::Null, 200, json!({})),
        exchange("GET", "/ch-gva-2/v2/instance", "colour=blue", Value::Null, 200, json!({"instances": []})),
        exchange("GET", "/ch-gva-2/v2/operation/", "", Value::Null, 200, json!({})),
        exchange("GET", &format!("/ch-gva-2/v2/instance/{id}"), "", Value::Null, 200, json!({"id": id, "state": "flying"})),
    ];
    let dir = tempfile::tempdir().unwrap();
    let journal: PathBuf = dir.path().join("bad.jsonl");
    std::fs::write(&journal, lines.join("\n") + "\n").unwrap();
    let verdict = judges.check_journals(&[journal]).unwrap();
    let found: Vec<(String, String)> = verdict
        .violations
        .iter()
        .map(|v| (v["at"].as_str().unwrap().rsplit(':').next().unwrap().to_string(), format!("{} {}", v["operationId"], v["problem"])))
        .collect();
    let on_line = |line: &str| found.iter().filter(|(l, _)| l == line).map(|(_, p)| p.as_str()).collect::<Vec<_>>().join(" | ");
    assert!(on_line("1").is_empty(), "a conforming create is not a violation: {found:?}");
    assert!(on_line("2").contains("create-instance") && on_line("2").contains("request field ssh-key is deprecated"), "{found:?}");
    assert!(on_line("3").contains("create-instance") && on_line("3").contains("disk-size-gib"), "{found:?}");
    assert!(on_line("4").contains("create-instance") && on_line("4").contains("disk-size"), "{found:?}");
    assert!(on_line("5").contains("create-instance") && on_line("5").contains("template"), "{found:?}");
    assert!(on_line("6").contains("no such operation"), "{found:?}");
    assert!(on_line("7").contains("list-instances") && on_line("7").contains("colour"), "{found:?}");
    assert!(on_line("8").contains("no such operation"), "{found:?}");
    assert!(on_line("9").contains("get-instance") && on_line("9").contains("flying"), "{found:?}");
}
