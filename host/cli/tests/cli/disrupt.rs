//! `joinery disrupt` and `joinery explain node` on the worked example (examples/disrupt/) and
//! the fixtures of tests/fixtures/disrupt/: one per method, budgets (percent rounding, a cron
//! window open and closed), do-not-disrupt on a pod and on a node, a PodDisruptionBudget, spot
//! rules, a snapshot without nominations, a garbled snapshot, and a generated 1,000-node one.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::process::{Command, Output};

use crate::support::repo;
use serde_json::Value;

const FIXTURES: &str = "host/cli/tests/fixtures/disrupt";
const EXAMPLE: &str = "examples/disrupt/cluster.yaml";
const CATALOG: &str = "examples/disrupt/catalog.yaml";

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

fn run_ok(args: &[&str]) -> (String, String) {
    let out = joinery(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "joinery {args:?} failed: {stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

/// Runs `joinery disrupt SNAPSHOT --catalog CATALOG --json EXTRA…` and returns the report.
fn report(snapshot: &str, catalog: &str, extra: &[&str]) -> Value {
    let mut args = vec!["disrupt", snapshot, "--catalog", catalog, "--json"];
    args.extend(extra);
    let (stdout, _) = run_ok(&args);
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// Runs `joinery disrupt SNAPSHOT --catalog CATALOG EXTRA…` and returns stdout and stderr.
fn text(snapshot: &str, catalog: &str, extra: &[&str]) -> (String, String) {
    let mut args = vec!["disrupt", snapshot, "--catalog", catalog];
    args.extend(extra);
    run_ok(&args)
}

fn commands(report: &Value) -> &[Value] {
    report["commands"].as_array().unwrap()
}

fn command<'a>(report: &'a Value, method: &str) -> &'a Value {
    commands(report)
        .iter()
        .find(|c| c["method"] == method)
        .unwrap_or_else(|| panic!("no {method} command in {report:#}"))
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect()
}

/// The reasons given for blocking `node`.
fn blocked<'a>(report: &'a Value, node: &str) -> Vec<&'a str> {
    report["blocked"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["node"] == node)
        .map(|b| b["reason"].as_str().unwrap())
        .collect()
}

fn allowed(report: &Value, pool: &str, reason: &str) -> u64 {
    let entry = report["budgets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["nodePool"] == pool && b["reason"] == reason);
    entry.unwrap_or_else(|| panic!("no budget {pool}/{reason} in {report:#}"))["allowed"]
        .as_u64()
        .unwrap()
}

fn keys(value: &Value) -> BTreeSet<&str> {
    value
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect()
}

fn requirement<'a>(replacement: &'a Value, key: &str) -> &'a Value {
    replacement["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["key"] == key)
        .unwrap_or_else(|| panic!("no {key} in {replacement:#}"))
}

#[test]
fn json_has_exactly_the_documented_keys() {
    let r = report(EXAMPLE, CATALOG, &["--all"]);
    assert_eq!(
        keys(&r),
        BTreeSet::from(["commands", "blocked", "budgets", "durationSeconds"])
    );
    assert!(r["durationSeconds"].as_f64().unwrap() >= 0.0);
    assert!(!commands(&r).is_empty());
    for c in commands(&r) {
        assert_eq!(
            keys(c),
            BTreeSet::from([
                "method",
                "decision",
                "reason",
                "candidates",
                "replacements",
                "savingPerHour"
            ]),
            "{c:#}"
        );
        for replacement in c["replacements"].as_array().unwrap() {
            assert_eq!(
                keys(replacement),
                BTreeSet::from(["nodePool", "instanceTypes", "requirements"])
            );
            for req in replacement["requirements"].as_array().unwrap() {
                let k = keys(req);
                assert!(
                    k.is_superset(&BTreeSet::from(["key", "operator", "values"])),
                    "{req}"
                );
                assert!(
                    k.is_subset(&BTreeSet::from(["key", "operator", "values", "minValues"])),
                    "{req}"
                );
            }
        }
    }
    assert!(!r["blocked"].as_array().unwrap().is_empty());
    for b in r["blocked"].as_array().unwrap() {
        assert_eq!(keys(b), BTreeSet::from(["node", "reason"]));
    }
    let budgets = r["budgets"].as_array().unwrap();
    assert_eq!(budgets.len(), 3, "one NodePool, three reasons: {budgets:?}");
    for b in budgets {
        assert_eq!(keys(b), BTreeSet::from(["nodePool", "reason", "allowed"]));
    }
    let reasons: BTreeSet<&str> = budgets
        .iter()
        .map(|b| b["reason"].as_str().unwrap())
        .collect();
    assert_eq!(
        reasons,
        BTreeSet::from(["Empty", "Drifted", "Underutilized"])
    );
}

#[test]
fn the_worked_example_deletes_the_empty_node_next() {
    let r = report(EXAMPLE, CATALOG, &[]);
    let [c] = commands(&r) else {
        panic!("one command expected: {r:#}")
    };
    assert_eq!(
        (
            c["method"].as_str(),
            c["decision"].as_str(),
            c["reason"].as_str()
        ),
        (Some("emptiness"), Some("delete"), Some("Empty"))
    );
    assert_eq!(
        strings(&c["candidates"]),
        ["node-empty"],
        "node names, not NodeClaim names"
    );
    assert_eq!(c["replacements"], serde_json::json!([]));
    assert_eq!(c["savingPerHour"], 0.1);
    // 50% of 4 nodes; the business-hours budget is not active at 07:30.
    for reason in ["Empty", "Drifted", "Underutilized"] {
        assert_eq!(allowed(&r, "general", reason), 2, "{reason}");
    }
}

#[test]
fn every_method_on_its_own_replaces_the_big_node_and_names_what_protects_the_others() {
    let r = report(EXAMPLE, CATALOG, &["--all"]);
    let methods: Vec<&str> = commands(&r)
        .iter()
        .map(|c| c["method"].as_str().unwrap())
        .collect();
    assert_eq!(methods, ["emptiness", "single-node-consolidation"], "{r:#}");
    let single = command(&r, "single-node-consolidation");
    assert_eq!(
        (single["decision"].as_str(), single["reason"].as_str()),
        (Some("replace"), Some("Underutilized"))
    );
    assert_eq!(strings(&single["candidates"]), ["node-big"]);
    let [replacement] = single["replacements"].as_array().unwrap().as_slice() else {
        panic!("{single:#}")
    };
    assert_eq!(replacement["nodePool"], "general");
    assert_eq!(
        strings(&replacement["instanceTypes"]),
        ["medium"],
        "the only cheaper type that holds a 3-CPU pod"
    );
    let types = requirement(replacement, "node.kubernetes.io/instance-type");
    assert_eq!(
        (types["operator"].as_str(), strings(&types["values"])),
        (Some("In"), vec!["medium"])
    );
    assert_eq!(
        strings(&requirement(replacement, "karpenter.sh/capacity-type")["values"]),
        ["on-demand"]
    );
    assert_eq!(
        single["savingPerHour"], 0.3,
        "a large at 0.50/h for a medium at 0.20/h"
    );

    let batch = blocked(&r, "node-batch");
    assert!(
        !batch.is_empty()
            && batch
                .iter()
                .all(|b| b.contains("karpenter.sh/do-not-disrupt")),
        "{batch:?}"
    );
    let db = blocked(&r, "node-db");
    assert!(
        !db.is_empty() && db.iter().all(|b| b.contains("pdb prevents pod evictions")),
        "{db:?}"
    );
    assert!(
        blocked(&r, "node-big").is_empty() && blocked(&r, "node-empty").is_empty(),
        "{r:#}"
    );
}

#[test]
fn text_output_explains_each_decision_and_each_blocked_node_in_a_sentence() {
    let (out, _) = text(EXAMPLE, CATALOG, &["--all"]);
    assert!(
        out.contains("emptiness would delete node node-empty (empty)"),
        "{out}"
    );
    assert!(out.contains("single-node-consolidation would replace node node-big (underutilized) with one NodeClaim of NodePool general (medium"), "{out}");
    assert!(out.contains("saving 0.3000/h"), "{out}");
    assert!(out.contains("Node node-batch may not be disrupted by multi-node-consolidation, single-node-consolidation: pod \"batch/report-1\" has \"karpenter.sh/do-not-disrupt\" annotation."), "{out}");
    assert!(
        out.contains("Node node-db may not be disrupted by"),
        "{out}"
    );
    assert!(out.contains("drift would do nothing."), "{out}");
    assert!(
        out.contains("NodePool general (4 node(s)): Empty 2, Drifted 2, Underutilized 2"),
        "{out}"
    );
}

#[test]
fn a_cron_budget_window_blocks_until_it_closes() {
    // The worked example's pool allows nothing from 09:00 UTC for 8 hours on weekdays.
    let r = report(EXAMPLE, CATALOG, &["--at", "2026-03-02T10:00:00Z"]);
    assert!(commands(&r).is_empty(), "{r:#}");
    assert_eq!(allowed(&r, "general", "Empty"), 0);
    let why = blocked(&r, "node-empty");
    assert!(
        why.iter().any(|b| b.contains(
            "disruption budgets of NodePool \"general\" allow no more Empty disruptions"
        )),
        "{why:?}"
    );
    let (out, _) = text(EXAMPLE, CATALOG, &["--at", "2026-03-02T10:00:00Z"]);
    assert!(
        out.contains("Disruption pass at 2026-03-02T10:00:00Z (--at)"),
        "{out}"
    );
    assert!(out.contains("Nothing to do"), "{out}");

    // empty.yaml: nothing from 22:00 for two hours; before and after, 34% of 4 nodes.
    let inside = report(
        &fixture("empty"),
        CATALOG,
        &["--at", "2026-03-02T23:00:00Z"],
    );
    assert!(commands(&inside).is_empty(), "{inside:#}");
    assert_eq!(allowed(&inside, "general", "Empty"), 0);
    let after = report(
        &fixture("empty"),
        CATALOG,
        &["--at", "2026-03-03T00:30:00Z"],
    );
    assert_eq!(
        command(&after, "emptiness")["candidates"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "{after:#}"
    );
}

#[test]
fn percent_budgets_round_up_and_node_do_not_disrupt_and_pending_pods_block() {
    let r = report(&fixture("empty"), CATALOG, &[]);
    assert_eq!(
        allowed(&r, "general", "Empty"),
        2,
        "34% of 4 nodes is 1.36, rounded up"
    );
    let [c] = commands(&r) else { panic!("{r:#}") };
    assert_eq!(c["method"], "emptiness");
    assert_eq!(
        strings(&c["candidates"]),
        ["node-2", "node-3"],
        "two allowed, node-1 kept for the pending pod: {r:#}"
    );
    assert_eq!(
        blocked(&r, "node-1"),
        ["node is nominated for a pending pod"],
        "the waiting pod would land on node-1"
    );
    assert_eq!(
        blocked(&r, "node-4"),
        ["disruption is blocked through the \"karpenter.sh/do-not-disrupt\" annotation"]
    );
    assert_eq!(c["savingPerHour"], 0.2);
    let (_, stderr) = text(&fixture("empty"), CATALOG, &[]);
    assert!(
        stderr.contains(
            "1 pod(s) wait for capacity: the nodes they would land on count as nominated"
        ),
        "{stderr}"
    );
}

#[test]
fn multi_node_consolidation_deletes_the_longest_prefix_that_fits() {
    let r = report(&fixture("multi"), CATALOG, &[]);
    let [c] = commands(&r) else { panic!("{r:#}") };
    assert_eq!(
        (
            c["method"].as_str(),
            c["decision"].as_str(),
            c["reason"].as_str()
        ),
        (
            Some("multi-node-consolidation"),
            Some("delete"),
            Some("Underutilized")
        )
    );
    assert_eq!(c["candidates"].as_array().unwrap().len(), 2, "{c:#}");
    assert_eq!(c["replacements"], serde_json::json!([]));
    assert_eq!(c["savingPerHour"], 0.4);
}

#[test]
fn expiration_comes_first_and_drift_replaces_a_drifted_node() {
    let r = report(&fixture("drift"), CATALOG, &[]);
    let methods: Vec<&str> = commands(&r)
        .iter()
        .map(|c| c["method"].as_str().unwrap())
        .collect();
    assert_eq!(methods, ["expiration", "drift"], "{r:#}");
    let expired = command(&r, "expiration");
    assert_eq!(
        (expired["decision"].as_str(), expired["reason"].as_str()),
        (Some("delete"), Some("Expired"))
    );
    assert_eq!(
        strings(&expired["candidates"]),
        ["node-old"],
        "expiration ignores the pod's do-not-disrupt"
    );
    let drift = command(&r, "drift");
    assert_eq!(
        (drift["decision"].as_str(), drift["reason"].as_str()),
        (Some("replace"), Some("Drifted"))
    );
    assert_eq!(strings(&drift["candidates"]), ["node-drifted"]);
    assert_eq!(
        strings(&drift["replacements"][0]["instanceTypes"])[0],
        "small"
    );
    assert_eq!(drift["savingPerHour"], 0.1);
    // The pool's minValues travels with the replacement's instance-type requirement.
    let types = requirement(
        &drift["replacements"][0],
        "node.kubernetes.io/instance-type",
    );
    assert_eq!(
        (types["operator"].as_str(), types["minValues"].as_u64()),
        (Some("In"), Some(2)),
        "{types}"
    );
    assert!(
        requirement(&drift["replacements"][0], "karpenter.sh/nodepool")
            .get("minValues")
            .is_none(),
        "minValues only when set"
    );
    // Before node-old's expiry (2026-01-31), only drift acts.
    let early = report(
        &fixture("drift"),
        CATALOG,
        &["--at", "2026-01-15T00:00:00Z"],
    );
    let methods: Vec<&str> = commands(&early)
        .iter()
        .map(|c| c["method"].as_str().unwrap())
        .collect();
    assert!(!methods.contains(&"expiration"), "{early:#}");
}

#[test]
fn spot_to_spot_consolidation_is_off_unless_its_feature_gate_is_on() {
    let catalog = fixture("spot-catalog");
    let off = report(&fixture("spot"), &catalog, &["--all"]);
    assert!(commands(&off).is_empty(), "{off:#}");
    let (out, _) = text(&fixture("spot"), &catalog, &[]);
    assert!(
        out.contains(
            "SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node"
        ),
        "{out}"
    );

    let on = report(
        &fixture("spot"),
        &catalog,
        &["--feature-gates", "SpotToSpotConsolidation=true"],
    );
    let c = command(&on, "single-node-consolidation");
    assert_eq!(c["decision"], "replace");
    let types = strings(&c["replacements"][0]["instanceTypes"]);
    assert_eq!(
        types.len(),
        15,
        "launched with the 15 cheapest of 16 cheaper spot types: {types:?}"
    );
    assert_eq!(types[0], "t01");
    assert_eq!(
        strings(&requirement(&c["replacements"][0], "karpenter.sh/capacity-type")["values"]),
        ["spot"]
    );
    assert_eq!(c["savingPerHour"], 0.49);
}

#[test]
fn a_garbled_snapshot_names_the_document_the_object_and_the_field() {
    let out = joinery(&["disrupt", &fixture("garbled"), "--catalog", CATALOG]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("document 2 (NodeClaim general-broken)"),
        "{stderr}"
    );
    assert!(stderr.contains("status.conditions"), "{stderr}");
    let bad_at = joinery(&[
        "disrupt",
        EXAMPLE,
        "--catalog",
        CATALOG,
        "--at",
        "yesterday",
    ]);
    assert!(!bad_at.status.success());
    assert!(String::from_utf8_lossy(&bad_at.stderr).contains("is not an RFC 3339 time"));
}

#[test]
fn explain_node_gives_each_methods_verdict_and_the_budgets() {
    let (out, _) = run_ok(&["explain", "node", "node-big", EXAMPLE, "--catalog", CATALOG]);
    assert!(
        out.starts_with("At 2026-03-02T07:30:00Z (the latest timestamp in the snapshot):"),
        "{out}"
    );
    assert!(out.contains("node node-big (NodeClaim general-m4f8d, NodePool general, on-demand large in zone-a, 0.5000/h, 1 pod to move)"), "{out}");
    assert!(
        out.contains("budget for Underutilized: 2 more node(s) may be disrupted"),
        "{out}"
    );
    assert!(out.contains("emptiness: no: node is not empty"), "{out}");
    assert!(
        out.contains(
            "single-node-consolidation: yes: underutilized: replace general-m4f8d with one medium"
        ),
        "{out}"
    );

    let (out, _) = run_ok(&[
        "explain",
        "node",
        "general-c9w2l",
        EXAMPLE,
        "--catalog",
        CATALOG,
    ]);
    assert!(out.contains("single-node-consolidation: no: pod \"batch/report-1\" has \"karpenter.sh/do-not-disrupt\" annotation"), "{out}");

    let (out, _) = run_ok(&[
        "explain",
        "node",
        "node-empty",
        EXAMPLE,
        "--catalog",
        CATALOG,
        "--at",
        "2026-03-02T10:00:00Z",
    ]);
    assert!(out.contains("emptiness: no: disruption budgets of NodePool \"general\" allow no more Empty disruptions now"), "{out}");

    let (out, _) = run_ok(&[
        "explain",
        "node",
        "node-big",
        EXAMPLE,
        "--catalog",
        CATALOG,
        "--json",
    ]);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["at"], "2026-03-02T07:30:00Z");
    assert_eq!(
        (
            json["node"].as_str(),
            json["nodeClaim"].as_str(),
            json["nodePool"].as_str()
        ),
        (Some("node-big"), Some("general-m4f8d"), Some("general"))
    );
    assert_eq!(json["pricePerHour"], 0.5);
    assert!(
        json["explanation"].as_array().unwrap().iter().any(|l| l
            .as_str()
            .unwrap()
            .starts_with("single-node-consolidation: yes")),
        "{json:#}"
    );

    let missing = joinery(&[
        "explain",
        "node",
        "node-nope",
        EXAMPLE,
        "--catalog",
        CATALOG,
    ]);
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr)
            .contains("no node or NodeClaim named \"node-nope\"")
    );
}

/// A generated snapshot: one NodePool, `nodes` medium nodes with 10 pods each (200m CPU), so
/// that the pods of about half of them fit on the others.
fn generated(nodes: usize) -> String {
    let mut s = String::from(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: general}\nspec:\n  disruption:\n    consolidateAfter: 10m\n    budgets: [{nodes: \"10%\"}]\n  template:\n    spec:\n      nodeClassRef: {group: sim.joinery.dev, kind: SimNodeClass, name: default}\n      requirements: [{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}]\n---\napiVersion: v1\nkind: List\nitems:\n",
    );
    let t = "2026-03-02T06:00:00Z";
    for i in 0..nodes {
        let zone = ["zone-a", "zone-b"][i % 2];
        let labels = format!(
            "karpenter.sh/nodepool: general, node.kubernetes.io/instance-type: medium, topology.kubernetes.io/zone: {zone}, karpenter.sh/capacity-type: on-demand"
        );
        writeln!(s, "- {{apiVersion: karpenter.sh/v1, kind: NodeClaim, metadata: {{name: claim-{i}, creationTimestamp: \"{t}\", labels: {{{labels}}}}}, spec: {{nodeClassRef: {{group: sim.joinery.dev, kind: SimNodeClass, name: default}}, requirements: []}}, status: {{providerID: sim://n-{i}, conditions: [{{type: Initialized, status: \"True\", lastTransitionTime: \"{t}\"}}]}}}}").unwrap();
        writeln!(s, "- {{apiVersion: v1, kind: Node, metadata: {{name: n-{i}, labels: {{{labels}, kubernetes.io/hostname: n-{i}}}}}, spec: {{providerID: sim://n-{i}}}, status: {{allocatable: {{cpu: 3900m, memory: 16284Mi, pods: \"110\"}}, conditions: [{{type: Ready, status: \"True\", lastTransitionTime: \"{t}\"}}]}}}}").unwrap();
        for j in 0..10 {
            writeln!(s, "- {{apiVersion: v1, kind: Pod, metadata: {{name: p-{i}-{j}, namespace: shop}}, spec: {{nodeName: n-{i}, containers: [{{name: c, resources: {{requests: {{cpu: 150m, memory: 256Mi}}}}}}]}}, status: {{phase: Running}}}}").unwrap();
        }
    }
    s
}

#[test]
fn a_thousand_node_snapshot_decides() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("thousand.yaml");
    std::fs::write(&path, generated(1_000)).unwrap();
    let r = report(
        path.to_str().unwrap(),
        &repo().join(CATALOG).display().to_string(),
        &["--at", "2026-03-02T12:00:00Z"],
    );
    let [c] = commands(&r) else {
        panic!("one command expected: {}", r["commands"])
    };
    assert_eq!(c["reason"], "Underutilized", "{c:#}");
    assert!(!c["candidates"].as_array().unwrap().is_empty());
    assert_eq!(
        allowed(&r, "general", "Underutilized"),
        100,
        "10% of 1,000 nodes"
    );
    eprintln!(
        "1,000 nodes / 10,000 pods: decided in {:.3}s",
        r["durationSeconds"].as_f64().unwrap()
    );
}

/// The worked example with one more pod on `node-empty`, being deleted and owned by `owner`.
fn example_with_terminating_pod(dir: &std::path::Path, owner: &str) -> String {
    let path = dir.join(format!("{owner}.yaml"));
    let pod = format!(
        "---
apiVersion: v1
kind: Pod
metadata:
  name: leaving-0
  namespace: shop
  deletionTimestamp: \"2026-03-02T07:00:00Z\"
  ownerReferences: [{{apiVersion: apps/v1, kind: {owner}, name: leaving, uid: u-1, controller: true}}]
spec:
  nodeName: node-empty
  containers: [{{name: c, image: pause, resources: {{requests: {{cpu: 100m}}}}}}]
status: {{phase: Running}}
"
    );
    let text = std::fs::read_to_string(crate::support::repo().join(EXAMPLE)).unwrap();
    std::fs::write(&path, format!("{}\n{pod}", text.trim_end())).unwrap();
    path.to_string_lossy().to_string()
}

#[test]
fn a_terminating_statefulset_pod_keeps_its_node_from_being_empty() {
    let dir = tempfile::tempdir().unwrap();
    let catalog = crate::support::repo().join(CATALOG);
    let catalog = catalog.to_string_lossy();
    // A terminating ReplicaSet pod is on its way out: the node is still empty.
    let r = report(
        &example_with_terminating_pod(dir.path(), "ReplicaSet"),
        &catalog,
        &[],
    );
    let [c] = commands(&r) else {
        panic!("one command expected: {r:#}")
    };
    assert_eq!(strings(&c["candidates"]), ["node-empty"], "{r:#}");
    assert_eq!(c["method"], "emptiness");
    // A terminating StatefulSet pod comes back under the same name and needs a home first:
    // emptiness leaves the node alone.
    let r = report(
        &example_with_terminating_pod(dir.path(), "StatefulSet"),
        &catalog,
        &[],
    );
    assert!(
        commands(&r)
            .iter()
            .all(|c| c["method"] != "emptiness"
                || !strings(&c["candidates"]).contains(&"node-empty")),
        "{r:#}"
    );
}

const BUFFERS: &str = "examples/buffers/cluster.yaml";

#[test]
fn a_node_holding_a_capacity_buffer_is_kept_only_with_the_gate() {
    let at = ["--at", "2026-03-02T07:30:00Z"];
    // Without the gate the buffer is ignored (and said so): the spare node is empty.
    let (out, err) = text(BUFFERS, CATALOG, &at);
    assert!(
        out.contains("emptiness would delete node node-spare (empty)"),
        "{out}"
    );
    assert!(err.contains("CapacityBuffers are left out"), "{err}");
    // With it, the buffer's chunk keeps the node, and nothing else blocks it.
    let mut gated = at.to_vec();
    gated.extend(["--feature-gates", "CapacityBuffer=true", "--all"]);
    let (out, _) = text(BUFFERS, CATALOG, &gated);
    assert!(
        out.contains(
            "Node node-spare may not be disrupted by emptiness: node holds capacity for a CapacityBuffer."
        ),
        "{out}"
    );
    assert!(out.contains("emptiness would do nothing."), "{out}");
}

#[test]
fn explain_buffers_shows_each_buffers_nodes_and_cost() {
    let (out, _) = run_ok(&["explain", "buffers", BUFFERS, "--catalog", CATALOG]);
    assert!(
        out.contains("CapacityBuffer shop/web-spare: 2 chunk(s) of cpu=1, memory=1Gi, pods=1; existing capacity holds 2 (all of them), 0.1513/h"),
        "{out}"
    );
    // Only the buffer keeps node-spare: it pays for all of it; beside the web pods, its share.
    assert!(
        out.contains(
            "node node-spare: 1 chunk(s), 53 % of it, 0.1000/h of 0.1000/h (no workload runs there"
        ),
        "{out}"
    );
    assert!(
        out.contains("node node-web: 1 chunk(s), 26 % of it, 0.0513/h of 0.2000/h\n"),
        "{out}"
    );
    let (json, _) = run_ok(&[
        "explain",
        "buffers",
        BUFFERS,
        "--catalog",
        CATALOG,
        "--json",
    ]);
    let value: Value = serde_json::from_str(&json).unwrap();
    let buffer = &value["buffers"][0];
    assert_eq!(
        (buffer["name"].as_str(), buffer["ready"].as_bool()),
        (Some("web-spare"), Some(true))
    );
    assert_eq!(buffer["held"], 2);
    assert_eq!(buffer["nodes"][0]["buffersOnly"], true);
    assert!(
        (value["costPerHour"].as_f64().unwrap() - 0.1513).abs() < 1e-3,
        "{value:#}"
    );
}

#[test]
fn explain_buffers_names_the_field_of_a_buffer_that_slipped_past_validation() {
    let dir = tempfile::tempdir().unwrap();
    let snapshot = dir.path().join("bad.yaml");
    let text = std::fs::read_to_string(repo().join(BUFFERS))
        .unwrap()
        .replace("  replicas: 2\n", "  replicas: -1\n");
    std::fs::write(&snapshot, text).unwrap();
    let (out, _) = run_ok(&[
        "explain",
        "buffers",
        snapshot.to_str().unwrap(),
        "--catalog",
        CATALOG,
    ]);
    assert!(
        out.contains("CapacityBuffer shop/web-spare: not ready (ResolutionFailed): spec.replicas is -1; it must be 0 or more"),
        "{out}"
    );
}

/// The worked example with node-big `Ready=False` since 07:25 (and `pool_annotations`, a
/// flow-style map, on NodePool general), written to a temporary file.
fn sick_snapshot(pool_annotations: &str) -> tempfile::NamedTempFile {
    let text = std::fs::read_to_string(repo().join(EXAMPLE)).unwrap();
    let at = text
        .find("name: node-big")
        .expect("node-big in the example");
    let (before, after) = text.split_at(at);
    let healthy = r#"conditions: [{type: Ready, status: "True", lastTransitionTime: "2026-03-02T06:03:00Z"}]"#;
    assert!(after.contains(healthy), "node-big's Ready condition");
    let sick = r#"conditions: [{type: Ready, status: "False", lastTransitionTime: "2026-03-02T07:25:00Z"}]"#;
    let text = format!("{before}{}", after.replacen(healthy, sick, 1)).replacen(
        "metadata: {name: general, ",
        &format!("metadata: {{name: general, annotations: {pool_annotations}, "),
        1,
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), text).unwrap();
    file
}

#[test]
fn explain_node_says_when_repair_replaces_a_node_and_why_not() {
    let file = sick_snapshot("{}");
    let path = file.path().to_str().unwrap();
    let (out, _) = run_ok(&["explain", "node", "node-big", path, "--catalog", CATALOG]);
    assert!(
        out.contains("Node repair (policies from the host's defaults"),
        "{out}"
    );
    assert!(out.contains("the NodeRepair gate is off"), "{out}");
    assert!(
        out.contains("unhealthy, Ready=False since 2026-03-02T07:25:00Z (toleration 10m, from the cloud's policy); repair acts at 2026-03-02T07:35:00Z unless it recovers"),
        "{out}"
    );

    let (out, _) = run_ok(&[
        "explain",
        "node",
        "node-big",
        path,
        "--catalog",
        CATALOG,
        "--at",
        "2026-03-02T07:40:00Z",
        "--feature-gates",
        "NodeRepair=true",
    ]);
    assert!(!out.contains("gate is off"), "{out}");
    assert!(
        out.contains("due: its NodeClaim is deleted and replaced (reason unhealthy"),
        "{out}"
    );

    // The NodePool's veto, and a ceiling that is not a percentage (refused, named).
    let file = sick_snapshot(
        r#"{joinery.dev/do-not-repair: "true", joinery.dev/repair-max-unhealthy: "most"}"#,
    );
    let path = file.path().to_str().unwrap();
    let (out, _) = run_ok(&[
        "explain",
        "node",
        "node-big",
        path,
        "--catalog",
        CATALOG,
        "--at",
        "2026-03-02T07:40:00Z",
        "--json",
    ]);
    let value: Value = serde_json::from_str(&out).unwrap();
    let repair: Vec<&str> = value["repair"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l.as_str().unwrap())
        .collect();
    assert!(
        repair.iter().any(|l| l
            .ends_with("not repaired: joinery.dev/do-not-repair is set on its NodePool general")),
        "{repair:?}"
    );
    assert!(
        repair.iter().any(|l| l.contains("note: NodePool general: annotation joinery.dev/repair-max-unhealthy: \"most\" is not a percentage")),
        "{repair:?}"
    );
}
