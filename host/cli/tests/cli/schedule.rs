//! `joinery schedule` on snapshot fixtures (tests/fixtures/schedule/) and the documented
//! examples (examples/schedule/), asserting on the JSON report: one fixture per scheduling
//! category of the core scheduler.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::support::{KillOnDrop, repo};
use serde_json::Value;

const FIXTURES: &str = "host/cli/tests/fixtures/schedule";
const SMALL: &str = "host/cli/tests/fixtures/schedule/catalog.yaml";
const SIMCLOUD: &str = "examples/catalogs/simcloud.yaml";
const FAKE: &str = "examples/catalogs/fake-default.yaml";
const INCREMENTING: &str = "examples/catalogs/fake-incrementing.yaml";

fn joinery(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_joinery"))
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap()
}

fn fixture(name: &str) -> String {
    format!("{FIXTURES}/{name}.yaml")
}

/// Runs `joinery schedule SNAPSHOT --catalog CATALOG --json EXTRA…` and returns the report.
fn report(snapshot: &str, catalog: &str, extra: &[&str]) -> Value {
    let mut args = vec!["schedule", snapshot, "--catalog", catalog, "--json"];
    args.extend(extra);
    let out = joinery(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "joinery {args:?} failed: {stderr}");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

fn placement<'a>(report: &'a Value, pod: &str) -> &'a Value {
    let (namespace, name) = pod.split_once('/').unwrap();
    report["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["namespace"] == namespace && p["name"] == name)
        .map(|p| &p["placement"])
        .unwrap_or_else(|| panic!("no pod {pod} in {report:#}"))
}

fn reason<'a>(report: &'a Value, pod: &str) -> &'a str {
    let p = placement(report, pod);
    assert_eq!(p["kind"], "none", "{pod}: {p}");
    p["reason"].as_str().unwrap()
}

fn claim_of<'a>(report: &'a Value, pod: &str) -> &'a Value {
    let p = placement(report, pod);
    assert_eq!(p["kind"], "new", "{pod}: {p}");
    let claim = &report["newNodeClaims"][p["claim"].as_u64().unwrap() as usize];
    assert_eq!(claim["index"], p["claim"]);
    claim
}

/// The values of the claim's requirement on `key` (empty when it has none).
fn values(claim: &Value, key: &str) -> Vec<String> {
    claim["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == key)
        .map(|r| {
            r["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn names(claim: &Value) -> Vec<&str> {
    claim["instanceTypes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect()
}

#[test]
fn json_has_exactly_the_documented_shape() {
    let r = report(&fixture("taints"), SMALL, &[]);
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    let mut top = keys(&r);
    top.sort();
    assert_eq!(top, ["durationSeconds", "newNodeClaims", "pods"]);
    assert!(r["durationSeconds"].as_f64().unwrap() >= 0.0);
    for pod in r["pods"].as_array().unwrap() {
        let mut k = keys(pod);
        k.sort();
        assert_eq!(k, ["name", "namespace", "placement"]);
        let p = &pod["placement"];
        let mut k = keys(p);
        k.sort();
        match p["kind"].as_str().unwrap() {
            "existing" => assert_eq!(k, ["kind", "node"]),
            "new" => assert_eq!(k, ["claim", "kind"]),
            "none" => assert_eq!(k, ["kind", "reason"]),
            other => panic!("unknown placement kind {other}"),
        }
    }
    let claim = claim_of(&r, "ml/trainer");
    let mut k = keys(claim);
    k.sort();
    assert_eq!(
        k,
        [
            "index",
            "instanceTypes",
            "labels",
            "nodePool",
            "requests",
            "requirements",
            "taints"
        ]
    );
    for req in claim["requirements"].as_array().unwrap() {
        let mut k = keys(req);
        k.sort();
        assert_eq!(k, ["key", "minValues", "operator", "values"]);
    }
    assert_eq!(
        claim["taints"],
        serde_json::json!([{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}])
    );
    assert_eq!(claim["labels"]["karpenter.sh/nodepool"], "gpu");
}

#[test]
fn resources_decide_the_instance_types_and_pods_pack_onto_open_claims() {
    let r = report(&fixture("resources"), SMALL, &[]);
    assert!(
        reason(&r, "shop/huge").contains("no instance type has enough resources"),
        "{r:#}"
    );
    let trainer = claim_of(&r, "shop/trainer");
    assert_eq!(
        names(trainer),
        ["gpu"],
        "only the gpu type has nvidia.com/gpu"
    );
    assert_eq!(
        placement(&r, "shop/sidecar-heavy"),
        placement(&r, "shop/trainer"),
        "the small pod joins the open claim"
    );
    // 2 + max(1.5 init, 0.5) CPU; 4Gi + 1Gi; two pod slots; the GPU.
    assert_eq!(
        trainer["requests"],
        serde_json::json!({"cpu": "3500m", "memory": "5Gi", "nvidia.com/gpu": "1", "pods": "2"})
    );
}

#[test]
fn node_selectors_and_required_affinity_narrow_the_claims() {
    let r = report(&fixture("selectors"), SMALL, &[]);
    let arm = claim_of(&r, "shop/arm");
    assert_eq!(values(arm, "kubernetes.io/arch"), ["arm64"]);
    assert_eq!(names(arm), ["arm-medium"]);
    let zone_c = claim_of(&r, "shop/zone-c");
    assert_eq!(
        values(zone_c, "topology.kubernetes.io/zone"),
        ["test-zone-c"]
    );
    assert_eq!(
        claim_of(&r, "shop/platform")["labels"]["team"],
        "platform",
        "template labels are on the claim"
    );
    let other = reason(&r, "shop/other-team");
    assert!(
        other.contains("incompatible requirements") && other.contains("team In [data]"),
        "{other}"
    );
    let refused = reason(&r, "shop/by-field");
    assert!(
        refused.contains("matchFields is not supported"),
        "{refused}"
    );
}

#[test]
fn taints_must_be_tolerated_on_pools_and_nodes() {
    let r = report(&fixture("taints"), SMALL, &[]);
    assert_eq!(claim_of(&r, "ml/trainer")["nodePool"], "gpu");
    let intolerant = reason(&r, "ml/intolerant-trainer");
    assert!(
        intolerant.contains(r#"incompatible with nodepool "gpu""#)
            && intolerant.contains("did not tolerate taint nvidia.com/gpu=true:NoSchedule"),
        "{intolerant}"
    );
    assert!(
        intolerant.contains(r#"incompatible with nodepool "general""#),
        "every pool tried is named: {intolerant}"
    );
    assert_eq!(
        placement(&r, "db/postgres"),
        &serde_json::json!({"kind": "existing", "node": "db-1"})
    );
    let web = claim_of(&r, "shop/web");
    assert_eq!(
        web["nodePool"], "general",
        "the tainted node is not for web"
    );
    assert_eq!(web["taints"], serde_json::json!([]));
}

#[test]
fn heavier_nodepools_are_tried_first_and_ties_go_by_name_descending() {
    let r = report(&fixture("weights"), SMALL, &[]);
    assert_eq!(claim_of(&r, "shop/anywhere")["nodePool"], "arm-first");
    assert_eq!(claim_of(&r, "shop/needs-amd64")["nodePool"], "zulu");
}

#[test]
fn nodepool_limits_count_existing_claims_and_are_charged_pessimistically() {
    let r = report(&fixture("limits"), SMALL, &[]);
    assert_eq!(
        names(claim_of(&r, "shop/first")),
        ["small"],
        "6 of 8 CPU used: only the 2-CPU type fits the limit"
    );
    assert_eq!(
        reason(&r, "shop/second"),
        r#"all available instance types exceed limits for nodepool: "limited""#
    );
}

#[test]
fn daemonset_overhead_counts_only_daemons_that_would_run() {
    let r = report(&fixture("daemonsets"), SMALL, &[]);
    let claim = claim_of(&r, "shop/app");
    assert_eq!(
        claim["requests"],
        serde_json::json!({"cpu": "1200m", "memory": "1280Mi", "pods": "2"})
    );
    assert!(!names(claim).contains(&"arm-medium"));
}

#[test]
fn existing_nodes_are_packed_first_and_unusable_ones_skipped() {
    let out = joinery(&[
        "schedule",
        &fixture("existing"),
        "--catalog",
        SMALL,
        "--json",
    ]);
    assert!(out.status.success());
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        placement(&r, "shop/fits"),
        &serde_json::json!({"kind": "existing", "node": "node-1"})
    );
    // node-1: 4 − 0.5 agent − 2 db (the finished pod does not count) − 1 = 0.5 left.
    let overflow = claim_of(&r, "shop/overflows");
    assert_eq!(
        overflow["requests"]["cpu"], "1500m",
        "pod plus the agent DaemonSet"
    );
    assert_eq!(
        r["pods"].as_array().unwrap().len(),
        2,
        "the gated pod is not in the batch"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("shop/gated (scheduling gated)"), "{stderr}");
}

#[test]
fn csi_attach_limits_keep_new_volumes_off_a_full_node() {
    let r = report(&fixture("attach-limits"), SIMCLOUD, &[]);
    let on_node = serde_json::json!({"kind": "existing", "node": "node-1"});
    assert_eq!(placement(&r, "shop/plain"), &on_node);
    assert_eq!(
        placement(&r, "shop/db-reader"),
        &on_node,
        "db's volume is attached already"
    );
    claim_of(&r, "shop/db-replica");
    assert_eq!(r["newNodeClaims"].as_array().unwrap().len(), 1, "{r:#}");
}

#[test]
fn in_flight_claims_and_uninitialized_nodes_take_pods() {
    let r = report(&fixture("inflight"), SMALL, &[]);
    assert_eq!(
        placement(&r, "shop/big"),
        &serde_json::json!({"kind": "existing", "node": "default-launching"})
    );
    assert_eq!(
        placement(&r, "shop/small"),
        &serde_json::json!({"kind": "existing", "node": "node-registering"}),
        "startup taints of an uninitialized node do not repel"
    );
    assert_eq!(r["newNodeClaims"], serde_json::json!([]));
}

#[test]
fn zones_and_capacity_types_follow_available_offerings() {
    let r = report(&fixture("zones"), SMALL, &[]);
    let c = claim_of(&r, "shop/in-c");
    assert_eq!(values(c, "topology.kubernetes.io/zone"), ["test-zone-c"]);
    assert_eq!(values(c, "karpenter.sh/capacity-type"), ["spot"]);
    assert_eq!(
        names(c),
        ["medium"],
        "small's spot offering in zone c is unavailable, arm-medium has no spot there, large none at all"
    );
    assert!(reason(&r, "shop/in-d").contains("topology.kubernetes.io/zone In [test-zone-d]"));
    assert!(reason(&r, "shop/on-demand-only").contains(
        "karpenter.sh/capacity-type In [on-demand] not in karpenter.sh/capacity-type In [spot]"
    ));
}

#[test]
fn min_values_keeps_enough_instance_types_or_refuses() {
    let r = report(&fixture("minvalues"), FAKE, &[]);
    let small = claim_of(&r, "shop/small");
    assert!(names(small).len() >= 3);
    let req = small["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == "node.kubernetes.io/instance-type")
        .unwrap();
    assert_eq!(req["minValues"], 3);
    assert_eq!(req["operator"], "In");
    assert!(reason(&r, "shop/big").contains(
        "minValues requirement is not met for label(s) node.kubernetes.io/instance-type (1 of 3)"
    ));
    assert!(
        reason(&r, "shop/large-only").contains("size In [large]"),
        "size is well-known in the fake catalog"
    );
}

#[test]
fn instance_types_are_listed_cheapest_first() {
    let r = report(&fixture("ordering"), SIMCLOUD, &[]);
    let claim = claim_of(&r, "shop/one");
    let listed = names(claim);
    assert_eq!(
        listed[..4],
        [
            "c-2x-amd64-linux",
            "c-2x-arm64-linux",
            "s-2x-amd64-linux",
            "s-2x-arm64-linux"
        ]
    );
    assert_eq!(listed.len(), 66, "every type but the six 1-vCPU ones");
    // Cheapest offering of each type from the catalog file: prices never decrease.
    let catalog: serde_norway::Value =
        serde_norway::from_str(&std::fs::read_to_string(repo().join(SIMCLOUD)).unwrap()).unwrap();
    let cheapest = |name: &str| -> f64 {
        let entry = catalog
            .as_sequence()
            .unwrap()
            .iter()
            .find(|e| e["name"].as_str() == Some(name))
            .unwrap();
        entry["offerings"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|o| o["price"].as_f64().unwrap())
            .fold(f64::INFINITY, f64::min)
    };
    let prices: Vec<f64> = listed.iter().map(|n| cheapest(n)).collect();
    assert!(
        prices.windows(2).all(|w| w[0] <= w[1]),
        "{listed:?} {prices:?}"
    );
}

#[test]
fn topology_spread_and_anti_affinity_shape_the_claims() {
    let r = report(&fixture("topology"), SIMCLOUD, &[]);
    let zones: std::collections::BTreeSet<Vec<String>> = ["shop/web-1", "shop/web-2", "shop/web-3"]
        .iter()
        .map(|p| values(claim_of(&r, p), "topology.kubernetes.io/zone"))
        .collect();
    assert_eq!(zones.len(), 3, "one replica per zone: {zones:?}");
    let claims: std::collections::BTreeSet<u64> = ["shop/cache-1", "shop/cache-2", "shop/cache-3"]
        .iter()
        .map(|p| placement(&r, p)["claim"].as_u64().unwrap())
        .collect();
    assert_eq!(claims.len(), 3, "one cache per node");
}

#[test]
fn namespace_selectors_pick_the_namespaces_by_their_labels() {
    let r = report(&fixture("namespaces"), SIMCLOUD, &[]);
    assert_eq!(
        values(claim_of(&r, "data/db"), "topology.kubernetes.io/zone"),
        ["test-zone-c"]
    );
    assert_eq!(
        values(claim_of(&r, "shop/web"), "topology.kubernetes.io/zone"),
        ["test-zone-c"],
        "web follows db across namespaces"
    );
    assert!(
        reason(&r, "shop/lost").contains("affinity"),
        "{}",
        reason(&r, "shop/lost")
    );
}

#[test]
fn preferences_are_respected_unless_ignored() {
    let respected = report(&fixture("preferences"), SMALL, &[]);
    assert_eq!(
        values(claim_of(&respected, "shop/likes-arm"), "kubernetes.io/arch"),
        ["arm64"]
    );
    let ignored = report(
        &fixture("preferences"),
        SMALL,
        &["--preference-policy", "Ignore"],
    );
    let claim = claim_of(&ignored, "shop/likes-arm");
    assert!(values(claim, "kubernetes.io/arch").is_empty());
    assert_eq!(
        names(claim)[0],
        "small",
        "the cheapest type, whatever its architecture"
    );
}

#[test]
fn volume_topology_comes_from_bound_volumes_and_storage_classes() {
    let r = report(&fixture("volumes"), SMALL, &[]);
    assert_eq!(
        values(
            claim_of(&r, "shop/uses-data"),
            "topology.kubernetes.io/zone"
        ),
        ["test-zone-b"]
    );
    assert_eq!(
        values(
            claim_of(&r, "shop/uses-scratch"),
            "topology.kubernetes.io/zone"
        ),
        ["test-zone-c"]
    );
    assert_eq!(
        reason(&r, "shop/lost-claim"),
        "PersistentVolumeClaim shop/nowhere (volume x) is not in the snapshot"
    );
}

#[test]
fn a_garbled_snapshot_is_refused_naming_the_document_object_and_field() {
    let out = joinery(&["schedule", &fixture("garbled"), "--catalog", SMALL]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("document 3 (Pod shop/broken): spec.containers[0].resources.requests: invalid type: sequence, expected a map at line"),
        "{stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "nothing is printed for a snapshot that does not parse"
    );
}

#[test]
fn a_garbled_catalog_is_refused_naming_the_entry_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, "- {name: ok, cpu: 1, memory: 1Gi, offerings: []}\n- {name: bad, cpu: 1, memory: 1Gi, offerings: [{zone: z, capacityType: reserve}]}\n").unwrap();
    let out = joinery(&[
        "schedule",
        &fixture("ordering"),
        "--catalog",
        path.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("[1] (bad).offerings[0].capacityType: \"reserve\" is not one of"),
        "{stderr}"
    );
}

#[test]
fn the_instance_types_must_come_from_somewhere() {
    let out = joinery(&["schedule", &fixture("ordering")]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--catalog"));
    let out = joinery(&["schedule", &fixture("ordering"), "--plugin", "simcloud"]);
    assert!(!out.status.success(), "--plugin needs --node-class");
    let out = joinery(&[
        "schedule",
        &fixture("ordering"),
        "--plugin",
        "template",
        "--node-class",
        &fixture("simnodeclass"),
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not a cloud provider"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = joinery(&[
        "schedule",
        &fixture("ordering"),
        "--plugin",
        "nope",
        "--node-class",
        &fixture("simnodeclass"),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no plugin named \"nope\"; cloud plugins loaded: ")
            && stderr.contains("simcloud"),
        "{stderr}"
    );
}

#[test]
fn best_effort_min_values_launches_what_strict_refuses() {
    let r = report(
        &fixture("minvalues"),
        FAKE,
        &["--min-values-policy", "BestEffort"],
    );
    // Strict leaves `big` pending (one type holds 10 CPU); BestEffort lowers minValues to 1.
    let big = claim_of(&r, "shop/big");
    assert_eq!(names(big), ["arm-instance-type"]);
    let req = big["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == "node.kubernetes.io/instance-type")
        .unwrap();
    assert_eq!(req["minValues"], 1);
    // The big pod is placed first (largest request) and the small one packs onto its claim.
    assert_eq!(claim_of(&r, "shop/small"), big);
    assert_eq!(r["newNodeClaims"].as_array().unwrap().len(), 1);
}

#[test]
fn node_overlays_change_prices_and_capacity_before_scheduling() {
    let r = report(&fixture("overlays"), FAKE, &[]);
    // The discounted arm type is listed first for the plain pod.
    assert_eq!(names(claim_of(&r, "shop/web"))[0], "arm-instance-type");
    // Only the overlaid type offers the extended resource.
    assert_eq!(names(claim_of(&r, "shop/fpga")), ["small-instance-type"]);
    // A malformed overlay is refused, naming it and the field.
    let text = std::fs::read_to_string(repo().join(fixture("overlays")))
        .unwrap()
        .replace(
            "price: \"0.001\"",
            "price: \"0.1\"\n  priceAdjustment: \"+1\"",
        );
    let path = std::env::temp_dir().join(format!("joinery-overlay-{}.yaml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let out = joinery(&["schedule", path.to_str().unwrap(), "--catalog", FAKE]);
    let _ = std::fs::remove_file(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(
            "NodeOverlay arm-deal: spec.price and spec.priceAdjustment cannot both be set"
        ),
        "{stderr}"
    );
}

#[test]
fn default_spread_constraints_come_from_the_scheduler_config() {
    let zones = |r: &Value| -> Vec<String> {
        let mut zones: Vec<String> = ["web-5d8f-a", "web-5d8f-b", "web-5d8f-c"]
            .iter()
            .map(|p| {
                let claim = claim_of(r, &format!("shop/{p}"));
                let req = claim["requirements"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|q| q["key"] == "topology.kubernetes.io/zone");
                req.map(|q| {
                    q["values"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_str().unwrap().to_owned())
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default()
            })
            .collect();
        zones.sort();
        zones
    };
    // Without defaults the three replicas share one claim.
    let plain = report(&fixture("default-spread"), FAKE, &[]);
    assert_eq!(plain["newNodeClaims"].as_array().unwrap().len(), 1);
    // With them, one replica per zone; the pod nothing selects joins one of those claims.
    let config = fixture("default-spread-config");
    let r = report(
        &fixture("default-spread"),
        FAKE,
        &["--scheduler-config", &config],
    );
    assert_eq!(zones(&r), ["test-zone-1", "test-zone-2", "test-zone-3"]);
    assert_eq!(r["newNodeClaims"].as_array().unwrap().len(), 3);
    // A selector in a default constraint is refused, naming the field.
    let bad =
        std::env::temp_dir().join(format!("joinery-sched-config-{}.yaml", std::process::id()));
    std::fs::write(&bad, "podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: k, whenUnsatisfiable: DoNotSchedule, labelSelector: {}}]}").unwrap();
    let out = joinery(&[
        "schedule",
        &fixture("default-spread"),
        "--catalog",
        FAKE,
        "--scheduler-config",
        bad.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_file(&bad);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("defaultConstraints[0].labelSelector"));
}

#[test]
fn the_same_snapshot_gives_the_same_output() {
    let strip = |mut v: Value| {
        v.as_object_mut().unwrap().remove("durationSeconds");
        v
    };
    for (snapshot, catalog) in [
        (fixture("topology"), SIMCLOUD),
        ("examples/schedule/design-spot-arm.yaml".into(), SIMCLOUD),
        (fixture("taints"), SMALL),
    ] {
        let a = strip(report(&snapshot, catalog, &[]));
        let b = strip(report(&snapshot, catalog, &[]));
        assert_eq!(a, b, "{snapshot}");
    }
    let text = |snapshot: &str| {
        let out = joinery(&["schedule", snapshot, "--catalog", SIMCLOUD]);
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.contains("pass took"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(text(&fixture("topology")), text(&fixture("topology")));
}

#[test]
fn the_text_report_has_one_line_per_pod_then_the_claims() {
    let out = joinery(&["schedule", &fixture("taints"), "--catalog", SMALL]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("Pods (4):\n"), "{text}");
    assert!(
        text.contains("ml/trainer             -> new NodeClaim #0 of NodePool gpu"),
        "{text}"
    );
    assert!(
        text.contains("db/postgres            -> existing node db-1"),
        "{text}"
    );
    assert!(
        text.contains(
            "ml/intolerant-trainer  -- not schedulable: incompatible with nodepool \"gpu\""
        ),
        "{text}"
    );
    assert!(
        text.contains("NodeClaims to create (2):\n  #0 NodePool gpu: 1 pod(s), from 1.2000/h"),
        "{text}"
    );
    assert!(text.contains("instance types (4, cheapest first): small (0.0400/h), arm-medium (0.0600/h), medium (0.0800/h), large (0.5000/h)"), "{text}");
    assert!(text.contains("zones: test-zone-a\n"), "{text}");
    assert!(text.contains("capacity types: on-demand, spot"), "{text}");
    assert!(
        text.contains("taints: nvidia.com/gpu=true:NoSchedule"),
        "{text}"
    );
    assert!(
        text.contains("4 pod(s): 1 on existing nodes, 2 on 2 new NodeClaim(s), 1 not schedulable"),
        "{text}"
    );
}

#[test]
fn shipped_catalogs_reproduce_upstreams_test_providers() {
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dir.path().join("s.yaml");
    std::fs::write(
        &snapshot,
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec: {template: {spec: {nodeClassRef: {group: karpenter.test.sh, kind: TestNodeClass, name: default}, requirements: []}}}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {name: fifty}\nspec: {containers: [{name: c, resources: {requests: {cpu: '50'}}}]}\n---\n\
         apiVersion: v1\nkind: Pod\nmetadata: {name: vendor-a}\nspec: {containers: [{name: c, resources: {requests: {fake.com/vendor-a: '1', cpu: '60'}}}]}\n",
    )
    .unwrap();
    let s = snapshot.to_str().unwrap();
    // fake-it-N has N+1 vCPU less 100m kube-reserved: 50 CPU first fits fake-it-50.
    let r = report(s, INCREMENTING, &[]);
    let claim = claim_of(&r, "default/fifty");
    assert_eq!(names(claim)[0], "fake-it-50");
    assert_eq!(names(claim).len(), 350, "fake-it-50 … fake-it-399");
    assert_eq!(
        values(claim, "karpenter.sh/capacity-type"),
        ["on-demand", "spot"]
    );
    assert!(reason(&r, "default/vendor-a").contains("no instance type"));
    // The fake provider's default types: only gpu-vendor-instance-type has vendor-a GPUs (4 CPU).
    let r = report(s, FAKE, &[]);
    assert!(reason(&r, "default/fifty").contains("no instance type has enough resources"));
    assert!(reason(&r, "default/vendor-a").contains("no instance type"));
}

#[test]
fn documented_zonal_spread_example_blocks_one_replica() {
    let r = report("examples/schedule/zonal-spread.yaml", SIMCLOUD, &[]);
    let blocked = reason(&r, "shop/web-5");
    assert!(
        blocked.contains(
            "unsatisfiable topology constraint for topology spread, key=topology.kubernetes.io/zone"
        ),
        "{blocked}"
    );
    assert!(
        blocked.contains("test-zone-a: 2, test-zone-b: 2, test-zone-c: 0"),
        "{blocked}"
    );
    assert_eq!(placement(&r, "shop/api-1")["kind"], "existing");
    let worker = claim_of(&r, "jobs/worker");
    let zones = values(worker, "topology.kubernetes.io/zone");
    assert_eq!(
        zones,
        ["test-zone-a", "test-zone-b"],
        "the NodePool's zones"
    );
}

#[test]
fn documented_nodepool_designs_compare_by_cost() {
    let cost = |snapshot: &str| -> f64 {
        let out = joinery(&["schedule", snapshot, "--catalog", SIMCLOUD]);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let line = text
            .lines()
            .find(|l| l.starts_with("estimated cost of the new NodeClaims: "))
            .unwrap_or_else(|| panic!("{text}"));
        line["estimated cost of the new NodeClaims: ".len()..]
            .split('/')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let on_demand = cost("examples/schedule/design-on-demand.yaml");
    let spot_arm = cost("examples/schedule/design-spot-arm.yaml");
    assert!((on_demand - 0.9374).abs() < 1e-3, "{on_demand}");
    assert!((spot_arm - 0.8106).abs() < 1e-3, "{spot_arm}");
    let a = report("examples/schedule/design-on-demand.yaml", SIMCLOUD, &[]);
    let b = report("examples/schedule/design-spot-arm.yaml", SIMCLOUD, &[]);
    assert_eq!(a["pods"].as_array().unwrap().len(), 14);
    assert_eq!(b["pods"].as_array().unwrap().len(), 14);
    assert_eq!(a["newNodeClaims"].as_array().unwrap().len(), 1);
    let pools: Vec<&str> = b["newNodeClaims"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["nodePool"].as_str().unwrap())
        .collect();
    assert_eq!(
        pools,
        ["spot", "on-demand"],
        "the spot pool's 16-CPU limit sends the rest on-demand"
    );
}

/// The simcloud plugin against a simulated cloud with its default catalog gives the same
/// decisions as the shipped simcloud catalog file.
#[test]
fn the_simcloud_plugin_and_the_simcloud_catalog_agree() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_joinery"))
        .args(["sim", "serve"])
        .current_dir(repo())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let _sim = KillOnDrop(child);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut url = None;
    let mut lines = BufReader::new(stdout).lines();
    for line in lines.by_ref() {
        let line = line.unwrap();
        if let Some(rest) = line.strip_prefix("simulated cloud:") {
            url = Some(rest.trim().to_string());
            break;
        }
        assert!(Instant::now() < deadline, "sim serve printed no cloud URL");
    }
    // Keep reading what the server prints next: with the pipe closed its next line would fail
    // and stop it.
    std::thread::spawn(move || lines.for_each(drop));
    let url = url.expect("sim serve printed no cloud URL");
    let dir = tempfile::tempdir().unwrap();
    let grants = dir.path().join("grants.yaml");
    std::fs::write(
        &grants,
        format!("plugins:\n  simcloud:\n    http: [{url:?}]\n    config: {{endpoint: {url:?}}}\n"),
    )
    .unwrap();
    let strip = |mut v: Value| {
        v.as_object_mut().unwrap().remove("durationSeconds");
        v
    };
    for name in ["ordering", "topology", "selectors"] {
        let snapshot = fixture(name);
        let from_catalog = strip(report(&snapshot, SIMCLOUD, &[]));
        let out = joinery(&[
            "schedule",
            &snapshot,
            "--plugin",
            "simcloud",
            "--node-class",
            &fixture("simnodeclass"),
            "--grants",
            grants.to_str().unwrap(),
            "--json",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let from_plugin = strip(serde_json::from_slice(&out.stdout).unwrap());
        assert_eq!(from_plugin, from_catalog, "{name}");
    }
}

/// `--fail-on-pending` turns a pod that fits nowhere into exit code 1 (a failed check), after
/// printing the report; without it, or when every pod fits, the exit code is 0.
#[test]
fn fail_on_pending_exits_one_when_a_pod_fits_nowhere() {
    let stuck = joinery(&[
        "schedule",
        &fixture("resources"),
        "--catalog",
        SMALL,
        "--json",
        "--fail-on-pending",
    ]);
    assert_eq!(
        stuck.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&stuck.stderr)
    );
    let printed: Value =
        serde_json::from_slice(&stuck.stdout).expect("the report is printed anyway");
    assert!(reason(&printed, "shop/huge").contains("no instance type"));
    assert!(
        String::from_utf8_lossy(&stuck.stderr).contains("would stay pending (--fail-on-pending)")
    );
    let lenient = joinery(&[
        "schedule",
        &fixture("resources"),
        "--catalog",
        SMALL,
        "--json",
    ]);
    assert_eq!(lenient.status.code(), Some(0));
}
