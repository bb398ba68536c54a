//! The Exoscale judges (Exoscale's OpenAPI document and official Python client; see
//! `conformance/exoscale/`) against `joinery sim serve --cloud exoscale`, and the judge's own
//! ability to fail. The shipped Exoscale scenarios are judged where they run (`simulate.rs`).

use std::path::PathBuf;

use joinery_emulator::exoscale::judges::Judges;
use serde_json::{Value, json};

use crate::support::{KillOnDrop, printed_value, repo, sim_serve};

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
    let (server, lines) = sim_serve(&[
        "--cloud".as_ref(),
        "exoscale".as_ref(),
        "--exoscale-journal".as_ref(),
        journal.as_os_str(),
    ]);
    let value = |label: &str| {
        printed_value(&lines, label)
            .unwrap_or_else(|| panic!("sim serve printed no {label:?}: {lines:#?}"))
    };
    let endpoints = value("zone endpoints:");
    let zones = endpoints
        .split("(zones ")
        .nth(1)
        .unwrap_or_default()
        .trim_end_matches(')');
    let printed = Printed {
        url: value("fake Exoscale API:"),
        zones: zones.split(", ").map(str::to_string).collect(),
        key: value("API key:"),
        secret: value("API secret:"),
    };
    (server, printed)
}

#[test]
fn the_official_client_drives_sim_serve_within_the_definition() {
    let Some(judges) = judges("the_official_client_drives_sim_serve_within_the_definition") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("exoscale.jsonl");
    let (_server, printed) = serve_exoscale(&journal);
    let zone = &printed.zones[1];
    let driven = judges
        .drive_client(
            &printed.url,
            zone,
            &printed.key,
            &printed.secret,
            &json!({"karpenter-sh_managed-by": "joinery"}),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(driven["zone"], zone.as_str());
    assert_eq!(driven["steps"].as_array().unwrap().len(), 11, "{driven}");
    let verdict = judges.check_journals(&[journal]).unwrap();
    assert!(verdict.violations.is_empty(), "{:#?}", verdict.violations);
    assert_eq!(
        verdict.operations["create-instance"], 3,
        "{:?}",
        verdict.operations
    );
    assert!(
        verdict.operations["get-operation"] >= 6,
        "{:?}",
        verdict.operations
    );
}

/// One exchange of a journal.
fn exchange(
    method: &str,
    path: &str,
    query: &str,
    request: Value,
    status: u16,
    response: Value,
) -> String {
    json!({"method": method, "path": path, "query": query, "requestBody": request, "status": status,
        "contentType": "application/json", "responseBody": response})
    .to_string()
}

#[test]
fn the_judge_names_the_operation_of_every_kind_of_violation() {
    let Some(judges) = judges("the_judge_names_the_operation_of_every_kind_of_violation") else {
        return;
    };
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
        exchange(
            "POST",
            "/ch-gva-2/v2/instance",
            "",
            good_create,
            200,
            operation.clone(),
        ),
        exchange(
            "POST",
            "/ch-gva-2/v2/instance",
            "",
            deprecated,
            200,
            operation.clone(),
        ),
        exchange(
            "POST",
            "/ch-gva-2/v2/instance",
            "",
            unknown,
            200,
            operation.clone(),
        ),
        exchange(
            "POST",
            "/ch-gva-2/v2/instance",
            "",
            mistyped,
            200,
            operation.clone(),
        ),
        exchange(
            "POST",
            "/ch-gva-2/v2/instance",
            "",
            missing,
            200,
            operation.clone(),
        ),
        exchange(
            "GET",
            "/ch-gva-2/v2/instance-flavour",
            "",
            Value::Null,
            200,
            json!({}),
        ),
        exchange(
            "GET",
            "/ch-gva-2/v2/instance",
            "colour=blue",
            Value::Null,
            200,
            json!({"instances": []}),
        ),
        exchange(
            "GET",
            "/ch-gva-2/v2/operation/",
            "",
            Value::Null,
            200,
            json!({}),
        ),
        exchange(
            "GET",
            &format!("/ch-gva-2/v2/instance/{id}"),
            "",
            Value::Null,
            200,
            json!({"id": id, "state": "flying"}),
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    let journal: PathBuf = dir.path().join("bad.jsonl");
    std::fs::write(&journal, lines.join("\n") + "\n").unwrap();
    let verdict = judges.check_journals(&[journal]).unwrap();
    let found: Vec<(String, String)> = verdict
        .violations
        .iter()
        .map(|v| {
            (
                v["at"]
                    .as_str()
                    .unwrap()
                    .rsplit(':')
                    .next()
                    .unwrap()
                    .to_string(),
                format!("{} {}", v["operationId"], v["problem"]),
            )
        })
        .collect();
    let on_line = |line: &str| {
        found
            .iter()
            .filter(|(l, _)| l == line)
            .map(|(_, p)| p.as_str())
            .collect::<Vec<_>>()
            .join(" | ")
    };
    assert!(
        on_line("1").is_empty(),
        "a conforming create is not a violation: {found:?}"
    );
    assert!(
        on_line("2").contains("create-instance")
            && on_line("2").contains("request field ssh-key is deprecated"),
        "{found:?}"
    );
    assert!(
        on_line("3").contains("create-instance") && on_line("3").contains("disk-size-gib"),
        "{found:?}"
    );
    assert!(
        on_line("4").contains("create-instance") && on_line("4").contains("disk-size"),
        "{found:?}"
    );
    assert!(
        on_line("5").contains("create-instance") && on_line("5").contains("template"),
        "{found:?}"
    );
    assert!(on_line("6").contains("no such operation"), "{found:?}");
    assert!(
        on_line("7").contains("list-instances") && on_line("7").contains("colour"),
        "{found:?}"
    );
    assert!(on_line("8").contains("no such operation"), "{found:?}");
    assert!(
        on_line("9").contains("get-instance") && on_line("9").contains("flying"),
        "{found:?}"
    );
}
