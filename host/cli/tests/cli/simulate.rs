//! `joinery simulate` on every shipped scenario, asserting on the JSON report. Every run is
//! in virtual time and made twice, the second time with another core kept busy: the two
//! reports must be the same, byte for byte (but for `wallSeconds`).

use crate::support::repo;
use std::process::Command;
use std::sync::RwLock;

/// Scenarios run two at a time, except the heavy ones, which run alone: in virtual time their
/// results do not depend on the machine's load, but the emulated cluster at 1,000 pods takes
/// both cores, and the real-time tests of other binaries next to it would be starved.
static CPU: RwLock<()> = RwLock::new(());

/// The machine to this test alone: [`CPU`] for this binary, and for other processes the
/// lock file `./dev test` names in `JOINERY_TEST_CPU_LOCK`, which it holds shared while it runs
/// the other test binaries next to this one. Without the variable, only [`CPU`].
struct Alone {
    _in_process: std::sync::RwLockWriteGuard<'static, ()>,
    _across_processes: Option<std::fs::File>,
}

fn alone() -> Alone {
    let in_process = CPU.write().unwrap_or_else(|poisoned| poisoned.into_inner());
    let across_processes = std::env::var_os("JOINERY_TEST_CPU_LOCK").map(|path| {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .unwrap_or_else(|e| {
                panic!(
                    "cannot open the lock file JOINERY_TEST_CPU_LOCK={}: {e}",
                    path.display()
                )
            });
        file.lock().unwrap_or_else(|e| {
            panic!("cannot lock JOINERY_TEST_CPU_LOCK={}: {e}", path.display())
        });
        file
    });
    Alone {
        _in_process: in_process,
        _across_processes: across_processes,
    }
}

fn joinery() -> Command {
    Command::new(env!("CARGO_BIN_EXE_joinery"))
}

/// Runs a scenario (or the quickstart when `None`) and returns the report and stdout.
fn simulate(scenario: Option<&str>) -> (serde_json::Value, String, bool) {
    let _shared = CPU.read().unwrap_or_else(|poisoned| poisoned.into_inner());
    run_scenario(scenario)
}

/// Runs a scenario with the machine to itself (no other scenario of this binary runs
/// meanwhile).
fn simulate_alone(scenario: &str) -> (serde_json::Value, String, bool) {
    let _alone = alone();
    run_scenario(Some(scenario))
}

fn run_scenario(scenario: Option<&str>) -> (serde_json::Value, String, bool) {
    let (report, stdout, ok, _) = run_scenario_plotted(scenario);
    (report, stdout, ok)
}

/// [`run_scenario`] with `--plot`: also returns the SVG drawn. An Exoscale scenario also
/// journals its exchanges with the fake Exoscale API, and every one of them must conform to
/// Exoscale's OpenAPI document ([`conforms_to_exoscales_definition`]).
fn run_scenario_plotted(scenario: Option<&str>) -> (serde_json::Value, String, bool, String) {
    run_scenario_file(
        scenario
            .map(|s| repo().join("examples/scenarios").join(s))
            .as_deref(),
    )
}

/// Keeps one core busy while any `BusyCore` lives: one thread spinning on a counter, shared
/// by the tests that want it (one spinner is enough to take the other core of two, and more
/// would only slow the real-time tests of this binary).
struct BusyCore;

/// How many `BusyCore`s live, and the spinner's stop flag and thread while any does.
type Spinner = (
    usize,
    Option<(
        std::sync::Arc<std::sync::atomic::AtomicBool>,
        std::thread::JoinHandle<()>,
    )>,
);
static SPINNER: std::sync::Mutex<Spinner> = std::sync::Mutex::new((0, None));

impl BusyCore {
    fn start() -> BusyCore {
        let mut spinner = SPINNER.lock().unwrap_or_else(|p| p.into_inner());
        spinner.0 += 1;
        if spinner.1.is_none() {
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let spinning = stop.clone();
            let thread = std::thread::spawn(move || {
                let mut turns = 0u64;
                while !spinning.load(std::sync::atomic::Ordering::Relaxed) {
                    turns = std::hint::black_box(turns.wrapping_add(1));
                }
            });
            spinner.1 = Some((stop, thread));
        }
        BusyCore
    }
}

impl Drop for BusyCore {
    fn drop(&mut self) {
        let mut spinner = SPINNER.lock().unwrap_or_else(|p| p.into_inner());
        spinner.0 -= 1;
        if spinner.0 == 0
            && let Some((stop, thread)) = spinner.1.take()
        {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let _ = thread.join();
        }
    }
}

/// A report's text without its `wallSeconds` line: what two runs of one scenario must share.
fn without_wall_seconds(report: &str) -> String {
    report
        .lines()
        .filter(|line| !line.trim_start().starts_with("\"wallSeconds\""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs a scenario file (or the quickstart) twice in virtual time, the second time with a
/// core kept busy, checks that both reports are the same (but for `wallSeconds`), and returns
/// the first report, its stdout, whether it passed, and its plot.
fn run_scenario_file(path: Option<&std::path::Path>) -> (serde_json::Value, String, bool, String) {
    let first = run_scenario_once(path);
    let second = {
        let _busy = BusyCore::start();
        run_scenario_once(path)
    };
    let (a, b) = (
        without_wall_seconds(&first.0),
        without_wall_seconds(&second.0),
    );
    if a != b {
        let at = a
            .lines()
            .zip(b.lines())
            .position(|(x, y)| x != y)
            .unwrap_or(a.lines().count().min(b.lines().count()));
        let around = |text: &str| {
            text.lines()
                .skip(at.saturating_sub(3))
                .take(8)
                .collect::<Vec<_>>()
                .join("\n")
        };
        panic!(
            "{}: two runs in virtual time wrote different reports; first difference at line {}:\n--- quiet run ---\n{}\n--- run with a busy core ---\n{}",
            path.map_or("quickstart".into(), |p| p.display().to_string()),
            at + 1,
            around(&a),
            around(&b)
        );
    }
    (
        serde_json::from_str(&first.0).unwrap(),
        first.1,
        first.2,
        first.3,
    )
}

/// [`run_scenario_plotted`] on any scenario file.
/// One run of [`run_scenario_file`]: the report's text, stdout, whether it passed, the plot.
fn run_scenario_once(path: Option<&std::path::Path>) -> (String, String, bool, String) {
    let scenario = path.map(|p| p.file_name().unwrap().to_string_lossy().to_string());
    let scenario = scenario.as_deref();
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let plot = dir.path().join("plot.svg");
    let journal = dir.path().join("exoscale.jsonl");
    let exoscale = scenario.is_some_and(|s| s.starts_with("exoscale-"));
    let mut cmd = joinery();
    // The controllers' decisions too, shown with the report when a run fails, and why the
    // last disruption passes did nothing.
    cmd.arg("simulate").env(
        "RUST_LOG",
        "warn,joinery_controller=info,joinery_controller::disruption=debug",
    );
    if let Some(path) = path {
        cmd.arg(path);
    }
    if exoscale {
        cmd.arg("--exoscale-journal").arg(&journal);
    }
    let out = cmd
        .arg("--report")
        .arg(&report)
        .arg("--plot")
        .arg(&plot)
        .output()
        .unwrap();
    let mut stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    if !out.status.success() {
        // What the host logged (its decisions, warnings and errors) is the first clue to a failed run.
        let lines: Vec<&str> = stderr.lines().collect();
        let tail = lines[lines.len().saturating_sub(150)..].join("\n");
        stdout.push_str(&format!("\n--- last lines of stderr ---\n{tail}\n"));
    }
    let text = std::fs::read_to_string(&report)
        .unwrap_or_else(|_| panic!("no report; stdout:\n{stdout}\nstderr:\n{stderr}"));
    let svg =
        std::fs::read_to_string(&plot).unwrap_or_else(|_| panic!("no plot; stderr:\n{stderr}"));
    if exoscale {
        conforms_to_exoscales_definition(scenario.unwrap_or_default(), &journal);
    }
    (text, stdout, out.status.success(), svg)
}

/// Judges a scenario's exchanges with the fake Exoscale API against Exoscale's OpenAPI
/// document: no unknown path or field, no wrong type, no missing required field, no deprecated
/// field in the plugin's requests (skipped with a notice when the judges are not installed).
fn conforms_to_exoscales_definition(scenario: &str, journal: &std::path::Path) {
    let Some(judges) = joinery_emulator::exoscale::judges::Judges::for_test(
        &repo(),
        &format!("judging {scenario}"),
    ) else {
        return;
    };
    let verdict = judges
        .check_journals(&[journal.to_path_buf()])
        .unwrap_or_else(|e| panic!("{scenario}: {e}"));
    assert!(
        verdict.violations.is_empty(),
        "{scenario}: the exchanges break Exoscale's API definition: {:#?}",
        verdict.violations
    );
    assert!(
        !verdict.operations.is_empty(),
        "{scenario}: nothing was judged"
    );
}

#[test]
fn the_quickstart_scales_up_then_to_zero() {
    let (report, stdout, ok, svg) = {
        let _shared = CPU.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        run_scenario_plotted(None)
    };
    plot_shows_the_three_series(&report, &svg);
    assert!(ok, "quickstart failed:\n{stdout}");
    assert_eq!(report["result"], "pass");
    assert_eq!(report["scenario"], "quickstart");
    let launched = report["totals"]["nodesLaunched"].as_u64().unwrap();
    assert!(launched >= 1, "{report:#}");
    assert_eq!(
        report["totals"]["nodesDeleted"].as_u64().unwrap(),
        launched,
        "every node removed after the scale-down"
    );
    assert!(report["totals"]["peakNodes"].as_u64().unwrap() >= 1);
    assert_eq!(report["totals"]["costPerHourAtEnd"].as_f64().unwrap(), 0.0);
    assert!(
        report["timings"]["firstNodeClaimSeconds"]
            .as_f64()
            .is_some()
    );
    assert!(
        report["timings"]["allPodsRunningSeconds"].as_f64().unwrap()
            > report["timings"]["firstNodeClaimSeconds"].as_f64().unwrap()
    );
    for node in report["nodes"].as_array().unwrap() {
        for field in [
            "launchedAt",
            "registeredAt",
            "initializedAt",
            "deletedAt",
            "pricePerHour",
            "instanceType",
            "zone",
            "capacityType",
        ] {
            assert!(!node[field].is_null(), "node {node} lacks {field}");
        }
        assert_eq!(node["capacityType"], "on-demand");
    }
    assert!(stdout.contains("all 10 pods running"), "{stdout}");
    assert!(stdout.contains("PASS"), "{stdout}");
}

/// The report's samples follow the run, and the plot is an SVG document with the three
/// panels and a line per instance type, pod state and the cost.
fn plot_shows_the_three_series(report: &serde_json::Value, svg: &str) {
    let samples = report["samples"].as_array().expect("samples in the report");
    assert!(samples.len() >= 4, "{samples:#?}");
    assert!(samples[0]["at"].as_f64().unwrap() < 5.0);
    assert!(
        samples.iter().any(|s| s["podsRunning"] == 10),
        "a sample with every pod running"
    );
    assert!(
        samples
            .iter()
            .any(|s| s["costPerHour"].as_f64().unwrap() > 0.0)
    );
    let last = samples.last().unwrap();
    assert_eq!(last["podsRunning"], 0);
    assert!(
        last["nodesByInstanceType"].as_object().unwrap().is_empty(),
        "scaled to zero: {last}"
    );
    let document = roxmltree::Document::parse(svg).expect("the plot is well-formed XML");
    assert_eq!(document.root_element().tag_name().name(), "svg");
    let texts: Vec<String> = document
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(|t| t.trim().to_string())
        .collect();
    for label in [
        "Nodes by instance type",
        "Pods",
        "Cost",
        "pending",
        "running",
        "cost per hour",
    ] {
        assert!(
            texts.iter().any(|t| t == label),
            "no {label:?} in the plot's texts: {texts:?}"
        );
    }
    for instance_type in report["instanceTypes"].as_array().unwrap() {
        assert!(
            texts.iter().any(|t| t == instance_type.as_str().unwrap()),
            "no line for {instance_type}"
        );
    }
    let lines = document
        .descendants()
        .filter(|n| n.has_tag_name("polyline") || n.has_tag_name("path"))
        .count();
    assert!(lines >= 4, "{lines} lines drawn");
}

#[test]
fn blog_one_pod_asking_three_vcpu_gets_a_c3_8() {
    let (report, stdout, ok) = simulate(Some("blog-one-pod-3-vcpu.yaml"));
    assert!(ok, "{stdout}");
    assert_eq!(report["instanceTypes"], serde_json::json!(["c3-8"]));
    assert_eq!(report["pods"]["running"], 1);
}

#[test]
fn blog_eight_pods_cost_no_more_than_cluster_autoscaler() {
    let (report, stdout, ok) = simulate(Some("blog-eight-pods.yaml"));
    assert!(ok, "{stdout}");
    assert_eq!(report["pods"]["running"], 8);
    let cost = report["totals"]["costPerHourAtEnd"].as_f64().unwrap();
    assert!(cost <= 0.324 + 1e-9, "cost {cost} > 3 × c3-8; {report:#}");
}

#[test]
fn insufficient_capacity_falls_back_to_the_next_cheapest_type() {
    let (report, stdout, ok) = simulate(Some("insufficient-capacity.yaml"));
    assert!(ok, "{stdout}");
    assert_eq!(report["instanceTypes"], serde_json::json!(["c3-16"]));
    assert_eq!(report["totals"]["nodeClaimsCreated"], 1);
}

#[test]
fn daemonset_overhead_sizes_the_node() {
    let (report, stdout, ok) = simulate(Some("daemonset-overhead.yaml"));
    assert!(ok, "{stdout}");
    assert_eq!(report["instanceTypes"], serde_json::json!(["c3-16"]));
    assert_eq!(report["pods"]["running"], 1);
}

#[test]
fn a_drain_waits_for_the_disruption_budget_then_completes() {
    let (report, stdout, ok) = simulate(Some("drain-respects-pdb.yaml"));
    assert!(ok, "{stdout}");
    assert_eq!(
        report["totals"]["nodeClaimsCreated"], 2,
        "one replacement node: {report:#}"
    );
    assert_eq!(report["totals"]["nodesDeleted"], 1);
    assert_eq!(report["pods"]["running"], 2);
}

#[test]
fn an_unschedulable_pod_is_reported_with_its_reason() {
    let (report, stdout, ok) = simulate(Some("unschedulable-explained.yaml"));
    assert!(ok, "{stdout}");
    let pending = report["pendingPods"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "{report:#}");
    assert_eq!(pending[0]["name"], "huge");
    let reason = pending[0]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("nodepool \"default\""),
        "the reason names the NodePool tried: {reason}"
    );
    assert!(
        reason.contains("cpu"),
        "the reason names the resource: {reason}"
    );
    assert!(stdout.contains("pending default/huge: "), "{stdout}");
}

/// Asserts that every node of a bootstrap scenario registered under its NodeClaim's name:
/// the simulated kubelet ran the renderer's script (node name, provider ID) to register it.
fn nodes_registered_through_the_bootstrap(report: &serde_json::Value) {
    let nodes = report["nodes"].as_array().unwrap();
    assert!(!nodes.is_empty(), "{report:#}");
    for node in nodes {
        assert!(
            !node["registeredAt"].is_null(),
            "node {node} never registered"
        );
        assert_eq!(
            node["name"], node["nodeClaim"],
            "the node is named by the bootstrap's node name: {node}"
        );
    }
}

#[test]
fn rke2_nodes_join_with_the_rke2_renderer() {
    let (report, stdout, ok) = simulate(Some("rke2-bootstrap.yaml"));
    assert!(ok, "{stdout}");
    assert_eq!(report["result"], "pass");
    assert_eq!(report["pods"]["running"], 4);
    nodes_registered_through_the_bootstrap(&report);
}

#[test]
fn kubeadm_nodes_join_with_the_kubeadm_renderer() {
    let (report, stdout, ok) = simulate(Some("kubeadm-bootstrap.yaml"));
    assert!(ok, "{stdout}");
    assert_eq!(report["result"], "pass");
    assert_eq!(report["pods"]["running"], 4);
    nodes_registered_through_the_bootstrap(&report);
}

/// A trace's nightly Job: its pods get a node, run to completion (the Job controller counts
/// them), and the emptied node goes; finished pods are not counted as pending.
#[test]
fn nightly_job_pods_run_to_completion_and_their_node_goes() {
    let (report, stdout, ok) = simulate(Some("nightly-jobs.yaml"));
    assert!(ok, "{stdout}");
    let timeline: Vec<String> = report["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e.as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        timeline.iter().any(|l| l.ends_with("all 30 pods running")),
        "{timeline:#?}"
    );
    // When the pods succeed they leave the counts at once: no "30 pending" after running.
    let after_running = timeline
        .iter()
        .skip_while(|l| !l.ends_with("all 30 pods running"))
        .collect::<Vec<_>>();
    assert!(
        after_running
            .iter()
            .any(|l| l.ends_with("pods: 0 running, 0 pending")),
        "{timeline:#?}"
    );
    assert!(
        !after_running.iter().any(|l| l.ends_with("30 pending")),
        "{timeline:#?}"
    );
    assert_eq!(report["totals"]["nodesDeleted"], 1, "{report:#}");
}

#[test]
fn zonal_spread_gets_one_node_per_zone() {
    let (report, stdout, ok) = simulate(Some("zone-spread.yaml"));
    assert!(ok, "{stdout}");
    let mut zones: Vec<String> = report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["zone"].as_str().unwrap().to_string())
        .collect();
    zones.sort();
    assert_eq!(zones, ["zone-a", "zone-b", "zone-c"], "{report:#}");
}

#[test]
fn scheduler_config_default_spread_puts_replicas_in_every_zone() {
    let (report, stdout, ok) = simulate(Some("default-spread.yaml"));
    assert!(ok, "{stdout}");
    let mut zones: Vec<String> = report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["zone"].as_str().unwrap().to_string())
        .collect();
    zones.sort();
    zones.dedup();
    assert_eq!(zones, ["zone-a", "zone-b", "zone-c"], "{report:#}");
}

/// The live instances of an Exoscale report's cloud section, and its creation count.
fn exoscale_cloud(report: &serde_json::Value) -> (Vec<serde_json::Value>, u64) {
    assert_eq!(report["cloud"]["provider"], "exoscale", "{report:#}");
    let live = report["cloud"]["instances"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["state"] != "terminated")
        .cloned()
        .collect();
    (live, report["cloud"]["instancesCreated"].as_u64().unwrap())
}

#[test]
fn exoscale_two_zones_scale_up_then_to_zero() {
    let (report, stdout, ok) = simulate(Some("exoscale-two-zones.yaml"));
    assert!(ok, "{stdout}");
    let nodes = report["nodes"].as_array().unwrap();
    assert!(nodes.len() >= 2, "{report:#}");
    let mut zones: Vec<&str> = nodes.iter().map(|n| n["zone"].as_str().unwrap()).collect();
    zones.sort();
    zones.dedup();
    assert_eq!(zones, ["ch-gva-2", "de-fra-1"], "{report:#}");
    for node in nodes {
        assert!(
            !node["registeredAt"].is_null(),
            "node {node} never registered from its k3s userData"
        );
        assert!(
            node["instanceType"]
                .as_str()
                .unwrap()
                .starts_with("standard."),
            "{node}"
        );
        assert!(!node["deletedAt"].is_null(), "{node}");
        // Exoscale publishes no prices: the report shows the pricing plugin's, not zero.
        assert!(
            node["pricePerHour"].as_f64().is_some_and(|p| p > 0.0),
            "{node}"
        );
    }
    let (live, created) = exoscale_cloud(&report);
    assert!(
        live.is_empty(),
        "no instance survives the scale-down: {live:?}"
    );
    assert_eq!(created, nodes.len() as u64, "one instance per NodeClaim");
    assert!(stdout.contains("all 6 pods running"), "{stdout}");
}

#[test]
fn exoscale_missing_security_group_is_not_ready_and_launches_nothing() {
    let (report, stdout, ok) = simulate(Some("exoscale-missing-security-group.yaml"));
    assert!(ok, "{stdout}");
    let class = &report["nodeClasses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["kind"] == "ExoscaleNodeClass")
        .cloned()
        .unwrap();
    assert_eq!(class["ready"], false, "{class:#}");
    let conditions = class["conditions"].as_array().unwrap();
    let sg = conditions
        .iter()
        .find(|c| c["type"] == "SecurityGroupsReady")
        .unwrap_or_else(|| panic!("{class:#}"));
    assert_eq!(sg["status"], "False");
    let message = sg["message"].as_str().unwrap();
    assert!(
        message.contains("securityGroupSelectorTerms[1]") && message.contains("k8s-nodes-typo"),
        "the condition names the term: {message}"
    );
    assert!(
        conditions
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "False"),
        "{class:#}"
    );
    assert_eq!(report["totals"]["nodeClaimsCreated"], 0);
    let (live, created) = exoscale_cloud(&report);
    assert!(live.is_empty() && created == 0, "{report:#}");
    assert_eq!(report["pendingPods"].as_array().unwrap().len(), 1);
}

#[test]
fn exoscale_anti_affinity_ceiling_is_insufficient_capacity_not_a_crash_loop() {
    let (report, stdout, ok) = simulate(Some("exoscale-anti-affinity-ceiling.yaml"));
    assert!(ok, "{stdout}");
    assert_eq!(report["pods"]["running"], 2);
    let pending = report["pendingPods"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "{report:#}");
    assert!(
        pending[0]["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "the pending pod says why: {pending:?}"
    );
    // The refused claim is deleted once; its offerings are skipped, not retried in a loop.
    let created = report["totals"]["nodeClaimsCreated"].as_u64().unwrap();
    assert!(
        (3..=4).contains(&created),
        "{created} NodeClaims: a crash loop? {report:#}"
    );
    let (live, instances_created) = exoscale_cloud(&report);
    assert_eq!(live.len(), 2, "{live:?}");
    assert_eq!(instances_created, 2, "the refused create made no instance");
    assert!(
        report["timeline"].to_string().contains("deleted (node -)"),
        "the refused claim was deleted"
    );
}

/// The fake CKE's NodeGroup totals from a Clever Cloud report: (accepted, refused, vanished).
fn node_groups(report: &serde_json::Value) -> (u64, u64, u64) {
    let totals = &report["cloud"]["nodeGroups"];
    let n = |k: &str| {
        totals[k]
            .as_u64()
            .unwrap_or_else(|| panic!("no cloud.nodeGroups.{k}: {report:#}"))
    };
    (n("accepted"), n("rejected"), n("vanished"))
}

#[test]
fn clevercloud_quickstart_registers_platform_nodes_and_scales_to_zero() {
    let (report, stdout, ok) = simulate(Some("clevercloud-quickstart.yaml"));
    assert!(ok, "{stdout}");
    assert_eq!(report["cloud"]["provider"], "clevercloud");
    let nodes = report["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{report:#}");
    let node = &nodes[0];
    assert_eq!(
        node["instanceType"], "2XS",
        "the cheapest flavor holding 3 × (1 CPU, 1Gi)"
    );
    // CKE registered the Node without a provider ID; the host's hook wrote it, so it registered.
    assert!(!node["registeredAt"].is_null(), "{node}");
    // Priced by clevercloud-pricing from the fake's live rates (0.004/vCPU), not the table's 0.0333.
    assert!(
        node["pricePerHour"]
            .as_f64()
            .is_some_and(|p| (p - 0.0382).abs() < 1e-9),
        "the live price of 2XS: {node}"
    );
    assert!(!node["deletedAt"].is_null(), "{node}");
    assert_eq!(node_groups(&report), (1, 0, 0));
    assert_eq!(
        report["cloud"]["instancesAtEnd"], 0,
        "the NodeGroup is gone: {report:#}"
    );
    assert!(stdout.contains("all 3 pods running"), "{stdout}");
}

#[test]
fn clevercloud_quota_refusal_is_reported_and_the_pod_runs_once_quota_frees() {
    let (report, stdout, ok) = simulate(Some("clevercloud-quota.yaml"));
    assert!(ok, "{stdout}");
    let (accepted, refused, vanished) = node_groups(&report);
    assert_eq!(
        (accepted, refused, vanished),
        (2, 1, 0),
        "the S, then the M once quota freed; one refusal: {report:#}"
    );
    // The refused claim was deleted at once (insufficient capacity), not after the 15 min
    // registration timeout, and nothing was left in CKE.
    assert_eq!(
        report["totals"]["nodeClaimsCreated"], 3,
        "{}",
        report["totals"]
    );
    assert_eq!(report["cloud"]["instancesAtEnd"], 1);
    let mut types: Vec<&str> = report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["instanceType"].as_str())
        .collect();
    types.sort();
    assert_eq!(types, ["M", "S"], "{report:#}");
}

/// The Machines of a Cluster API report that are not being deleted (a Machine the plugin
/// released may still be tearing down when the scenario ends).
fn live_machines(report: &serde_json::Value) -> Vec<serde_json::Value> {
    report["cloud"]["machines"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["phase"] != "Deleting")
        .cloned()
        .collect()
}

/// The fake management cluster's Machine totals from a Cluster API report.
fn machine_totals(report: &serde_json::Value) -> serde_json::Value {
    let totals = report["cloud"]["machineTotals"].clone();
    assert!(totals.is_object(), "no cloud.machineTotals: {report:#}");
    totals
}

#[test]
fn clusterapi_blog_one_pod_gets_a_c3_8_machine() {
    let (report, stdout, ok) = simulate(Some("clusterapi-blog-one-pod.yaml"));
    assert!(ok, "{stdout}");
    assert_eq!(report["cloud"]["provider"], "clusterapi");
    let types: Vec<&str> = report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["instanceType"].as_str())
        .collect();
    assert_eq!(
        types,
        ["c3-8"],
        "least waste, not c3-16 by name: {report:#}"
    );
    let machines = report["cloud"]["machines"].as_array().unwrap();
    assert_eq!(machines.len(), 1, "{machines:?}");
    assert_eq!(machines[0]["machineDeployment"], "capi-ovh-karpenter-c3-8");
    assert_eq!(machines[0]["phase"], "Running");
}

#[test]
fn clusterapi_blog_eight_pods_cost_no_more_than_cluster_autoscaler() {
    let (report, stdout, ok) = simulate(Some("clusterapi-blog-eight-pods.yaml"));
    assert!(ok, "{stdout}");
    let cost = report["totals"]["costPerHourAtEnd"].as_f64().unwrap();
    assert!(
        cost <= 0.3225 + 1e-9,
        "3 × c3-8 cost 0.3225/h; Joinery: {cost}"
    );
    assert_eq!(
        machine_totals(&report)["atEnd"].as_u64(),
        Some(report["nodes"].as_array().unwrap().len() as u64)
    );
}

#[test]
fn clusterapi_scale_down_removes_exactly_the_empty_machine() {
    let (report, stdout, ok) = simulate(Some("clusterapi-exact-scale-down.yaml"));
    assert!(ok, "{stdout}");
    let totals = machine_totals(&report);
    assert_eq!(
        (
            totals["created"].as_u64(),
            totals["deleted"].as_u64(),
            totals["atEnd"].as_u64()
        ),
        (Some(2), Some(1), Some(1)),
        "{totals}"
    );
    // The Machine left is the busy pod's: its node was never deleted, the other one was.
    let nodes = report["nodes"].as_array().unwrap();
    let kept: Vec<&serde_json::Value> = nodes.iter().filter(|n| n["deletedAt"].is_null()).collect();
    assert_eq!(kept.len(), 1, "{nodes:?}");
    let machines = report["cloud"]["machines"].as_array().unwrap();
    assert_eq!(machines.len(), 1);
    assert_eq!(
        machines[0]["node"], kept[0]["name"],
        "the Machine left runs the busy pod's node"
    );
    assert_eq!(
        report["totals"]["nodeClaimsCreated"], 2,
        "the busy pod was never evicted"
    );
}

#[test]
fn clusterapi_machine_that_never_provisions_is_given_back() {
    let (report, stdout, ok) = simulate(Some("clusterapi-never-provisions.yaml"));
    assert!(ok, "{stdout}");
    assert_eq!(
        machine_totals(&report)["failed"].as_u64(),
        Some(1),
        "{report:#}"
    );
    let live = live_machines(&report);
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(
        live[0]["machineDeployment"], "capi-ovh-karpenter-c3-16",
        "the failed c3-8 Machine is gone or going"
    );
}

#[test]
fn clusterapi_restart_between_raise_and_claim_adds_no_machine() {
    let (report, stdout, ok) = simulate(Some("clusterapi-restart-resume.yaml"));
    assert!(ok, "{stdout}");
    let totals = machine_totals(&report);
    assert_eq!(
        (totals["created"].as_u64(), totals["atEnd"].as_u64()),
        (Some(1), Some(1)),
        "the Machine already there was claimed: {totals}"
    );
    assert_eq!(report["totals"]["nodeClaimsCreated"], 1);
}

#[test]
fn clusterapi_consolidation_replaces_with_a_cheaper_machine() {
    let (report, stdout, ok) = simulate(Some("clusterapi-replace-cheaper.yaml"));
    assert!(ok, "{stdout}");
    let live = live_machines(&report);
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(
        live[0]["machineDeployment"], "capi-ovh-karpenter-c3-8",
        "the c3-16's Machine is gone or going"
    );
    assert_eq!(machine_totals(&report)["created"].as_u64(), Some(2));
}

#[test]
fn exoscale_failed_create_leaves_no_instance_behind() {
    let (report, stdout, ok) = simulate(Some("exoscale-failed-create.yaml"));
    assert!(ok, "{stdout}");
    assert_eq!(
        report["totals"]["nodeClaimsCreated"], 1,
        "the retry reused the claim: {report:#}"
    );
    assert_eq!(report["totals"]["nodesLaunched"], 1);
    let (live, created) = exoscale_cloud(&report);
    assert_eq!(
        created, 2,
        "the failed create made an instance, the retry another"
    );
    assert!(live.is_empty(), "{live:?}");
}

#[test]
fn exoscale_flaky_api_still_converges_without_leaks() {
    let (report, stdout, ok) = simulate(Some("exoscale-flaky-api.yaml"));
    assert!(ok, "{stdout}");
    assert!(
        report["timings"]["allPodsRunningSeconds"]
            .as_f64()
            .is_some(),
        "{report:#}"
    );
    let launched = report["totals"]["nodesLaunched"].as_u64().unwrap();
    assert!(launched >= 2);
    assert_eq!(report["totals"]["nodesDeleted"].as_u64().unwrap(), launched);
    let (live, created) = exoscale_cloud(&report);
    assert!(live.is_empty(), "{live:?}");
    assert!(created >= launched, "{report:#}");
}

#[test]
fn exoscale_garbage_collection_reaps_only_this_clusters_orphans() {
    let (report, stdout, ok) = simulate(Some("exoscale-garbage-collection.yaml"));
    assert!(ok, "{stdout}");
    let (live, created) = exoscale_cloud(&report);
    assert_eq!(created, 2);
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(
        live[0]["tags"]["owner"], "someone-else",
        "the untagged instance stays: {live:?}"
    );
    assert!(live[0]["tags"].get("karpenter-sh_managed-by").is_none());
    let reaped = report["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l.as_str().unwrap().ends_with("cloud instances: 1"))
        .unwrap();
    let at: f64 = reaped
        .as_str()
        .unwrap()
        .trim_start_matches('[')
        .split('s')
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(at >= 30.0, "not before the grace period: {reaped}");
}

#[test]
fn an_unknown_cloud_provider_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, "name: bad\ncloud: {provider: openstack}\n").unwrap();
    let out = joinery().arg("simulate").arg(&path).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("cloud.provider") && stderr.contains("openstack"),
        "{stderr}"
    );
}

/// The cost, node and pod totals a disruption scenario ends with.
fn totals(report: &serde_json::Value) -> (f64, u64, u64, u64) {
    let totals = &report["totals"];
    (
        totals["costPerHourAtEnd"].as_f64().unwrap(),
        totals["nodeClaimsCreated"].as_u64().unwrap(),
        totals["nodesDeleted"].as_u64().unwrap(),
        report["pods"]["running"].as_u64().unwrap(),
    )
}

#[test]
fn an_underutilized_node_is_replaced_by_a_cheaper_one() {
    let (report, stdout, ok) = simulate(Some("consolidation-replace-cheaper.yaml"));
    assert!(ok, "{stdout}");
    let (cost, created, deleted, running) = totals(&report);
    assert_eq!((created, deleted, running), (2, 1, 1), "{report:#}");
    assert!((cost - 0.06).abs() < 1e-9, "one c3-4 left: {cost}");
    assert_eq!(
        report["instanceTypes"],
        serde_json::json!(["c3-16", "c3-4"])
    );
}

#[test]
fn a_snapshot_starts_the_cluster_its_pending_pods_get_a_node_and_its_idle_node_goes() {
    let (report, stdout, ok) = simulate(Some("snapshot-shop.yaml"));
    assert!(ok, "{stdout}");
    let (cost, created, deleted, running) = totals(&report);
    // One node launched for the reports; the adopted, nearly idle default-q9m4t deleted.
    assert_eq!((created, deleted, running), (1, 1, 8), "{report:#}");
    assert!(
        (cost - 0.324).abs() < 1e-9,
        "a c3-8 and a c3-16 left: {cost}"
    );
    assert_eq!(
        report["instanceTypes"],
        serde_json::json!(["c3-16", "c3-8"])
    );
    let nodes = report["nodes"].as_array().unwrap();
    let adopted: Vec<(&str, bool)> = nodes
        .iter()
        .filter(|n| n["adopted"] == true)
        .map(|n| (n["nodeClaim"].as_str().unwrap(), n["deletedAt"].is_number()))
        .collect();
    assert_eq!(
        adopted,
        [("default-7xk2p", false), ("default-q9m4t", true)],
        "{report:#}"
    );
    let timeline = report["timeline"].as_array().unwrap();
    let said = |text: &str| timeline.iter().any(|l| l.as_str().unwrap().contains(text));
    assert!(
        said(
            "snapshot: adopted Node default-7xk2p (NodeClaim default-7xk2p, c3-8 in nova) as instance i-00000001 (was openstack:///a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c55)"
        ),
        "{stdout}"
    );
    assert!(
        said("snapshot: not written (the emulated cluster makes its own): 1 Event"),
        "{stdout}"
    );
    // The system nodes are no cloud's: the cloud holds the kept c3-8 and the new one.
    assert_eq!(report["cloud"]["instancesAtEnd"], 2, "{report:#}");
}

#[test]
fn several_idle_nodes_go_without_a_new_launch() {
    let (report, stdout, ok) = simulate(Some("consolidation-multi-delete.yaml"));
    assert!(ok, "{stdout}");
    let (cost, created, deleted, running) = totals(&report);
    assert_eq!((created, deleted, running), (3, 2, 3), "{report:#}");
    assert!((cost - 0.108).abs() < 1e-9, "one c3-8 left: {cost}");
}

#[test]
fn do_not_disrupt_pods_and_budgets_hold_consolidation_until_they_go() {
    let (report, stdout, ok) = simulate(Some("consolidation-blocked.yaml"));
    assert!(ok, "{stdout}");
    let (cost, created, deleted, running) = totals(&report);
    assert_eq!((created, deleted, running), (2, 1, 1), "{report:#}");
    assert!((cost - 0.06).abs() < 1e-9, "{cost}");
}

#[test]
fn a_node_within_its_consolidate_after_receives_no_consolidated_pods() {
    let (report, stdout, ok) = simulate(Some("consolidation-destination-protection.yaml"));
    assert!(ok, "{stdout}");
    let (cost, created, deleted, running) = totals(&report);
    assert_eq!((created, deleted, running), (2, 1, 2), "{report:#}");
    assert!((cost - 0.24).abs() < 1e-9, "the c3-16 stays: {cost}");
}

#[test]
fn a_node_annotated_do_not_disrupt_is_never_consolidated() {
    let (report, stdout, ok) = simulate(Some("consolidation-node-do-not-disrupt.yaml"));
    assert!(ok, "{stdout}");
    let (cost, created, deleted, running) = totals(&report);
    assert_eq!((created, deleted, running), (1, 0, 1), "{report:#}");
    assert!((cost - 0.2).abs() < 1e-9, "the c3-16 stays: {cost}");
}

#[test]
fn a_scheduled_zero_budget_holds_consolidation_until_its_window_closes() {
    let (report, stdout, ok) = simulate(Some("consolidation-budget-window.yaml"));
    assert!(ok, "{stdout}");
    let (cost, created, deleted, _) = totals(&report);
    assert_eq!((created, deleted), (2, 1), "{report:#}");
    assert!((cost - 0.06).abs() < 1e-9, "{cost}");
    // The replacement came after 17:00, ten minutes into the scenario.
    let replaced_at = stdout
        .lines()
        .filter(|l| l.contains("nodeclaim") && l.contains("created"))
        .nth(1)
        .unwrap_or_default()
        .to_string();
    let seconds: f64 = replaced_at
        .trim_start_matches('[')
        .split('s')
        .next()
        .unwrap_or("0")
        .trim()
        .parse()
        .unwrap_or(0.0);
    assert!(
        seconds >= 600.0,
        "replaced inside the budget window: {replaced_at}"
    );
}

#[test]
fn drifted_nodes_are_replaced_after_nodepool_and_nodeclass_changes() {
    let (report, stdout, ok) = simulate(Some("drift-replace.yaml"));
    assert!(ok, "{stdout}");
    let (cost, created, deleted, running) = totals(&report);
    assert_eq!((created, deleted, running), (3, 2, 1), "{report:#}");
    assert!(
        (cost - 0.108).abs() < 1e-9,
        "a c3-8 after the NodeClass change: {cost}"
    );
}

#[test]
fn an_expired_node_waits_for_its_grace_period_then_goes() {
    let (report, stdout, ok) = simulate(Some("expiration-grace-period.yaml"));
    assert!(ok, "{stdout}");
    let (_, created, deleted, running) = totals(&report);
    assert_eq!((created, deleted, running), (2, 1, 1), "{report:#}");
}

#[test]
fn a_static_nodepool_holds_its_replicas_and_replaces_a_drifted_node() {
    let (report, stdout, ok) = simulate(Some("static-nodepool.yaml"));
    assert!(ok, "{stdout}");
    let (cost, created, deleted, _) = totals(&report);
    assert_eq!((created, deleted), (3, 2), "{report:#}");
    assert!((cost - 0.06).abs() < 1e-9, "one node left: {cost}");
}

/// The conditions of a buffer in a report, as `type=status` strings.
fn buffer_conditions(buffer: &serde_json::Value) -> Vec<String> {
    buffer["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{}={}",
                c["type"].as_str().unwrap(),
                c["status"].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn a_capacity_buffer_keeps_a_warm_node_for_a_burst_and_through_scale_to_zero() {
    let (report, stdout, ok) = simulate(Some("capacity-buffer-burst.yaml"));
    assert!(ok, "{stdout}");
    let (cost, created, deleted, running) = totals(&report);
    // One node for the buffer, one more when the burst took its room; the burst's node goes.
    assert_eq!((created, deleted, running), (2, 1, 0), "{report:#}");
    assert!((cost - 0.12).abs() < 1e-9, "the buffer's c3-8: {cost}");
    let buffer = &report["buffers"][0];
    assert_eq!(
        (
            buffer["name"].as_str(),
            buffer["chunks"].as_u64(),
            buffer["held"].as_u64()
        ),
        (Some("web-spare"), Some(2), Some(2)),
        "{buffer:#}"
    );
    // Nothing else runs there: the node is the buffer's cost, all of it.
    let buffer_cost = report["totals"]["bufferCostPerHourAtEnd"].as_f64().unwrap();
    assert!((buffer_cost - 0.12).abs() < 1e-9, "{buffer_cost}");
    assert!(
        stdout.contains("capacitybuffer default/web-spare: holds 2 of 2 chunks"),
        "{stdout}"
    );
    // The burst ran on the warm node: no pod waited for a boot.
    let waited = report["workload"]["pendingMaxSeconds"].as_f64().unwrap();
    assert!(waited < 5.0, "a burst pod waited {waited} s");
}

#[test]
fn a_capacity_buffer_over_its_nodepool_limit_is_limited_by_quotas() {
    let (report, stdout, ok) = simulate(Some("capacity-buffer-limits.yaml"));
    assert!(ok, "{stdout}");
    let (_, created, _, running) = totals(&report);
    assert_eq!((created, running), (1, 1), "{report:#}");
    let buffer = &report["buffers"][0];
    let conditions = buffer_conditions(buffer);
    assert!(
        conditions.contains(&"LimitedByQuotas=True".to_string()),
        "{conditions:?}"
    );
    assert!(
        conditions.contains(&"Provisioning=False".to_string()),
        "{conditions:?}"
    );
    let limited = buffer["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "LimitedByQuotas")
        .unwrap();
    assert_eq!(limited["reason"], "NodePoolLimitsReached");
    assert!(
        limited["message"]
            .as_str()
            .unwrap()
            .contains("exceed limits for nodepool"),
        "{limited:#}"
    );
    assert!(
        stdout.contains("LimitedByQuotas=True (NodePoolLimitsReached)"),
        "{stdout}"
    );
}

#[test]
fn bursts_compared_without_and_with_buffers_trade_waiting_for_cost() {
    let _shared = CPU.read().unwrap_or_else(|poisoned| poisoned.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let (comparison, stdout) = compare(dir.path(), "capacity-buffer-bursts", &[]);
    assert!(stdout.contains("buffer $/h"), "{stdout}");
    let row = |name: &str| {
        comparison["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["variant"] == name)
            .unwrap_or_else(|| panic!("no row {name}"))
            .clone()
    };
    let (none, two, four) = (row("no-buffer"), row("baseline"), row("buffer-of-4"));
    let f = |r: &serde_json::Value, k: &str| r[k].as_f64().unwrap();
    // Without a buffer each burst waits for a boot; with one it starts on a warm node.
    assert!(f(&none, "pendingMaxSeconds") >= 30.0, "{none:#}");
    assert!(f(&two, "pendingP50Seconds") < 5.0, "{two:#}");
    // The buffer is paid for: nothing without, more for four chunks than for two.
    assert_eq!(f(&none, "bufferCostPerHourAtEnd"), 0.0);
    assert!(f(&two, "bufferCostPerHourAtEnd") > 0.0, "{two:#}");
    assert!(f(&four, "bufferCostPerHourAtEnd") > f(&two, "bufferCostPerHourAtEnd"));
    assert!(f(&two, "totalCost") > f(&none, "totalCost"));
}

#[test]
fn a_thousand_pod_scale_out_never_deletes_a_node_or_launches_twice() {
    // The emulated cluster is heavy at 1,000 pods in a debug build: a slower clock keeps the
    // simulated kube-scheduler from starving.
    let (report, stdout, ok) = simulate_alone("scale-out-1000-pods.yaml");
    assert!(
        ok,
        "{}",
        stdout.lines().rev().take(20).collect::<Vec<_>>().join("\n")
    );
    let (_, created, deleted, running) = totals(&report);
    assert_eq!(
        (created, deleted, running),
        (33, 0, 1000),
        "{}",
        report["totals"]
    );
}

#[test]
fn two_thousand_pods_scale_out_within_two_minutes_on_few_claims() {
    let (report, stdout, ok) = simulate_alone("scale-out-2000-pods.yaml");
    let tail = stdout.lines().rev().take(20).collect::<Vec<_>>().join("\n");
    assert!(ok, "{tail}");
    let (_, created, _, running) = totals(&report);
    assert_eq!(running, 2000, "{}", report["totals"]);
    // 600 CPUs of pods need at least 38 nodes of the largest type (16 CPUs).
    assert!(
        (38..=50).contains(&created),
        "{created} claims; {}",
        report["totals"]
    );
    let to_running = report["timings"]["allPodsRunningSeconds"].as_f64().unwrap();
    assert!(to_running <= 120.0, "every pod running at {to_running} s");
    assert_eq!(report["lag"]["refused"], false, "{}", report["lag"]);
    for series in ["clock", "scheduler", "workloads", "kubelets"] {
        let found = report["lag"]["series"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == series && s["count"].as_u64().unwrap() > 0);
        assert!(found, "no {series} lag in {}", report["lag"]);
    }
    assert!(stdout.contains("(virtual time, seed 1)"), "{tail}");
}

#[test]
fn the_real_time_mode_still_runs_a_scenario_with_its_lag_meter() {
    let _shared = CPU.read().unwrap_or_else(|poisoned| poisoned.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.json");
    let out = joinery()
        .arg("simulate")
        .arg(repo().join("examples/scenarios/blog-one-pod-3-vcpu.yaml"))
        .args(["--realtime", "--speed", "30", "--quiet", "--report"])
        .arg(&report)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(report["lag"]["speed"], 30.0, "{}", report["lag"]);
    assert_eq!(report["pods"]["running"], 1);
}

#[test]
fn speed_needs_the_real_time_mode_and_a_seed_must_be_a_number() {
    let out = joinery()
        .args(["simulate", "--speed", "30"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--realtime"), "{stderr}");
    let out = joinery()
        .args(["simulate", "--seed", "seven"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--seed") && stderr.contains("seven"),
        "{stderr}"
    );
}

#[test]
fn another_seed_draws_other_names_and_the_same_seed_the_same() {
    let _shared = CPU.read().unwrap_or_else(|poisoned| poisoned.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let run = |seed: &str, name: &str| {
        let path = dir.path().join(name);
        let out = joinery()
            .args(["simulate", "--quiet", "--seed", seed, "--report"])
            .arg(&path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        without_wall_seconds(&std::fs::read_to_string(&path).unwrap())
    };
    let (one, again, other) = (run("7", "a.json"), run("7", "b.json"), run("8", "c.json"));
    assert_eq!(one, again);
    assert_ne!(
        one, other,
        "the NodeClaim's generated name comes from the seed"
    );
}

/// The cost over a report's run from its samples, as the comparison table computes it: each
/// sample's hourly cost holds until the next sample, the last until the end.
fn total_cost(report: &serde_json::Value) -> f64 {
    let samples = report["samples"].as_array().unwrap();
    let end = report["simulatedSeconds"].as_f64().unwrap();
    samples
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let at = s["at"].as_f64().unwrap();
            let until = samples
                .get(i + 1)
                .map_or(end, |n| n["at"].as_f64().unwrap());
            s["costPerHour"].as_f64().unwrap() * (until - at) / 3600.0
        })
        .sum()
}

/// Runs `joinery simulate examples/scenarios/NAME.yaml --compare examples/variants/NAME.yaml
/// --report DIR/comparison.json EXTRA…`, which must succeed; returns the comparison and stdout.
fn compare(
    dir: &std::path::Path,
    name: &str,
    extra: &[&std::ffi::OsStr],
) -> (serde_json::Value, String) {
    let report = dir.join("comparison.json");
    let out = joinery()
        .arg("simulate")
        .arg(repo().join(format!("examples/scenarios/{name}.yaml")))
        .arg("--compare")
        .arg(repo().join(format!("examples/variants/{name}.yaml")))
        .arg("--report")
        .arg(&report)
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let comparison = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    (comparison, stdout)
}

#[test]
fn a_diurnal_day_compared_under_variants_differs_and_adds_up() {
    let _shared = CPU.read().unwrap_or_else(|poisoned| poisoned.into_inner());
    let dir = tempfile::tempdir().unwrap();
    // Three hours of the day's shape (the shipped trace lasts 24 h: minutes in a debug build).
    let trace = dir.path().join("diurnal-3h.yaml");
    let out = joinery()
        .args([
            "trace",
            "generate",
            "diurnal",
            "--duration",
            "3h",
            "--peak-at",
            "90m",
        ])
        .args(["--min", "2", "--max", "30", "--step", "10m", "-o"])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plot = dir.path().join("comparison.svg");
    let (comparison, stdout) = compare(
        dir.path(),
        "diurnal-day",
        &[
            "--trace".as_ref(),
            trace.as_os_str(),
            "--plot".as_ref(),
            plot.as_os_str(),
        ],
    );
    let rows = comparison["rows"].as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["variant"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "baseline",
            "when-empty",
            "consolidate-after-10m",
            "spot-allowed"
        ]
    );
    let svg = std::fs::read_to_string(&plot).unwrap();
    for row in rows {
        let name = row["variant"].as_str().unwrap();
        assert!(
            stdout.contains(name) && svg.contains(name),
            "{name} missing"
        );
        assert_eq!(row["passed"], true, "{row}");
        // The table adds up against the variant's own report.
        let own = &comparison["reports"][name];
        let cost = row["totalCost"].as_f64().unwrap();
        assert!(
            (cost - total_cost(own)).abs() < 1e-9,
            "{name}: {cost} vs {}",
            total_cost(own)
        );
        assert_eq!(row["peakNodes"], own["totals"]["peakNodes"], "{name}");
        assert_eq!(
            row["nodeClaimsLaunched"], own["totals"]["nodesLaunched"],
            "{name}"
        );
        assert_eq!(
            row["podEvictions"], own["workload"]["podEvictions"],
            "{name}"
        );
        assert_eq!(
            row["pendingP95Seconds"], own["workload"]["pendingP95Seconds"],
            "{name}"
        );
        assert!(cost > 0.0, "{name} cost nothing");
    }
    let cost = |i: usize| rows[i]["totalCost"].as_f64().unwrap();
    // Removing only empty nodes keeps the half-full ones of the afternoon: it costs more,
    // and evicts nothing.
    assert!(
        cost(1) > cost(0),
        "when-empty {} vs baseline {}",
        cost(1),
        cost(0)
    );
    assert_eq!(rows[1]["podEvictions"], 0);
    // Spot is cheaper than on-demand in the simulated catalog.
    assert!(
        cost(3) < cost(0),
        "spot {} vs baseline {}",
        cost(3),
        cost(0)
    );
}

#[test]
fn a_garbled_trace_snapshot_or_variant_is_refused_naming_the_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = repo().join("examples/scenarios/quickstart.yaml");
    let cases = [
        (
            "trace",
            "events:\n  - at: 10m\n    scale: {name: inflate, replicas: 2}\n  - at: 5m\n    scale: {name: inflate, replicas: 3}\n",
            "line 4, events[1].at: 5m comes before the previous event's 600s",
        ),
        (
            "trace",
            "events:\n  - at: 1m\n    scale: {name: nginx, replicas: 2}\n",
            "line 2, events[0].scale: Deployment default/nginx is created neither by the scenario nor by an earlier event (Deployments it knows: default/inflate)",
        ),
        (
            "trace",
            "events:\n  - at: 1m\n    scale: {name: inflate, replicas: -1}\n",
            "line 2, events[0].scale.replicas: -1 is negative",
        ),
        (
            "snapshot",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {nodeName: ghost, containers: [{name: c}]}\n",
            "document 1 (Pod default/p): spec.nodeName: the pod is bound to Node ghost, which is not in the snapshot",
        ),
        (
            "compare",
            "variants:\n  - name: slow\n    set: {NodePool/default: {spec.disruption.consolidateAftr: 10m}}\n",
            "line 2, variants[0].set.NodePool/default.spec.disruption.consolidateAftr: NodePool has no field",
        ),
    ];
    for (flag, text, wanted) in cases {
        let file = dir.path().join("input.yaml");
        std::fs::write(&file, text).unwrap();
        let out = joinery()
            .arg("simulate")
            .arg(&scenario)
            .arg(format!("--{flag}"))
            .arg(&file)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{flag}: {text}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&file.display().to_string()) && stderr.contains(wanted),
            "{stderr}\n  wanted: {wanted}"
        );
    }
}

#[test]
fn bench_simulate_measures_a_scenario_in_virtual_time() {
    let _shared = CPU.read().unwrap_or_else(|poisoned| poisoned.into_inner());
    let out = joinery()
        .args(["bench", "simulate", "--json"])
        .arg(repo().join("examples/scenarios/blog-one-pod-3-vcpu.yaml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bench: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = &bench["rows"][0];
    assert_eq!(row["scenario"], "blog-one-pod-3-vcpu", "{bench}");
    assert_eq!(row["passed"], true, "{bench}");
    let simulated = row["simulatedSeconds"].as_f64().unwrap();
    let wall = row["wallSeconds"].as_f64().unwrap();
    assert!(simulated > 0.0 && wall > 0.0, "{row}");
    let speedup = row["speedup"].as_f64().unwrap();
    assert!(
        (speedup - simulated / wall).abs() < 1e-6 * speedup.max(1.0),
        "{row}"
    );
    assert!(row["events"].as_u64().unwrap() > 0, "{row}");
    assert!(row["peakRssMiB"].as_f64().is_some(), "{row}");
}

#[test]
fn every_shipped_scenario_is_covered_by_a_test() {
    let tested = [
        "blog-eight-pods.yaml",
        "blog-one-pod-3-vcpu.yaml",
        "capacity-buffer-burst.yaml",
        "capacity-buffer-bursts.yaml",
        "capacity-buffer-limits.yaml",
        "clevercloud-quickstart.yaml",
        "clevercloud-quota.yaml",
        "clusterapi-blog-eight-pods.yaml",
        "clusterapi-blog-one-pod.yaml",
        "clusterapi-exact-scale-down.yaml",
        "clusterapi-never-provisions.yaml",
        "clusterapi-replace-cheaper.yaml",
        "clusterapi-restart-resume.yaml",
        "consolidation-blocked.yaml",
        "consolidation-budget-window.yaml",
        "consolidation-destination-protection.yaml",
        "consolidation-multi-delete.yaml",
        "consolidation-node-do-not-disrupt.yaml",
        "consolidation-replace-cheaper.yaml",
        "daemonset-overhead.yaml",
        "default-spread.yaml",
        "diurnal-day.yaml",
        "drain-respects-pdb.yaml",
        "drift-replace.yaml",
        "exoscale-anti-affinity-ceiling.yaml",
        "exoscale-failed-create.yaml",
        "exoscale-flaky-api.yaml",
        "exoscale-garbage-collection.yaml",
        "exoscale-missing-security-group.yaml",
        "exoscale-repair-reboot-first.yaml",
        "exoscale-two-zones.yaml",
        "expiration-grace-period.yaml",
        "insufficient-capacity.yaml",
        "kubeadm-bootstrap.yaml",
        "nightly-jobs.yaml",
        "quickstart.yaml",
        "repair-ceiling-zone-outage.yaml",
        "repair-replace.yaml",
        "repair-veto.yaml",
        "rke2-bootstrap.yaml",
        "scale-out-1000-pods.yaml",
        "scale-out-2000-pods.yaml",
        "snapshot-shop.yaml",
        "static-nodepool.yaml",
        "unschedulable-explained.yaml",
        "zone-spread.yaml",
    ];
    let mut shipped: Vec<String> = std::fs::read_dir(repo().join("examples/scenarios"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    shipped.sort();
    assert_eq!(
        shipped, tested,
        "add a test for each new scenario in this file"
    );
    let docs = std::fs::read_to_string(repo().join("docs/simulate.md")).unwrap();
    for file in &shipped {
        let row = format!("| `{}` |", file.trim_end_matches(".yaml"));
        assert!(
            docs.contains(&row),
            "docs/simulate.md's table of shipped scenarios has no row {row}"
        );
    }
}

#[test]
fn an_empty_scenario_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.yaml");
    std::fs::write(&path, "").unwrap();
    let out = joinery().arg("simulate").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("empty.yaml") && stderr.contains("nothing to simulate"),
        "{stderr}"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("PASS"));
}

#[test]
fn a_speed_out_of_range_is_a_usage_error_naming_the_flag() {
    for speed in ["0", "-1", "1e20"] {
        let out = joinery()
            .args(["simulate", "--realtime", "--speed", speed])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--speed {speed}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("--speed") && stderr.contains("out of range"),
            "--speed {speed}: {stderr}"
        );
        let out = joinery()
            .args(["sim", "serve", "--speed", speed])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "sim serve --speed {speed}");
    }
}

#[test]
fn a_garbled_scenario_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, "name: bad\nsteps:\n  - at: tomorrow\n").unwrap();
    let out = joinery().arg("simulate").arg(&path).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("steps[0].at"), "{stderr}");
}

#[test]
fn a_failed_expectation_exits_non_zero_and_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("impossible.yaml");
    let text = std::fs::read_to_string(repo().join("examples/scenarios/blog-one-pod-3-vcpu.yaml"))
        .unwrap();
    let text = text.replace("instanceTypes: [c3-8]\n", "instanceTypes: [c3-4]\n");
    std::fs::write(&path, text).unwrap();
    let report = dir.path().join("r.json");
    let out = joinery()
        .arg("simulate")
        .arg(&path)
        .arg("--report")
        .arg(&report)
        .arg("--quiet")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(report["result"], "fail");
    let failures = report["failures"].to_string();
    assert!(failures.contains("instanceTypes"), "{failures}");
}

/// The simulated second of the `n`th (from 0) "nodeclaim … created" line of a run's timeline.
fn nth_claim_created_at(stdout: &str, n: usize) -> f64 {
    let line = stdout
        .lines()
        .filter(|l| l.contains("nodeclaim") && l.contains("created ("))
        .nth(n)
        .unwrap_or_else(|| panic!("no NodeClaim number {n} created:\n{stdout}"));
    line.trim_start_matches('[')
        .split('s')
        .next()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("no time on {line:?}"))
}

#[test]
fn node_repair_replaces_a_node_not_ready_past_its_toleration() {
    let (report, stdout, ok) = simulate(Some("repair-replace.yaml"));
    assert!(ok, "{stdout}");
    let (_, created, deleted, running) = totals(&report);
    assert_eq!((created, deleted, running), (2, 1, 3), "{report:#}");
    // The node turned NotReady at 34.5 s; simcloud's toleration is 10 minutes and the loop
    // looks every 10 s.
    let replaced = nth_claim_created_at(&stdout, 1);
    assert!(
        (634.5..=646.0).contains(&replaced),
        "replaced at {replaced} s:\n{stdout}"
    );
}

#[test]
fn node_repair_ceiling_holds_back_a_zone_outage_until_the_pool_allows_more() {
    let (report, stdout, ok) = simulate(Some("repair-ceiling-zone-outage.yaml"));
    assert!(ok, "{stdout}");
    let (_, created, deleted, running) = totals(&report);
    assert_eq!((created, deleted, running), (6, 2, 4), "{report:#}");
    // Nothing was replaced during the 20 minutes the outage lasted under the 20 % ceiling.
    let replaced = nth_claim_created_at(&stdout, 4);
    assert!(replaced >= 1234.5, "replaced at {replaced} s:\n{stdout}");
}

#[test]
fn exoscale_repair_reboots_first_and_replaces_what_a_reboot_does_not_cure() {
    let (report, stdout, ok) = simulate(Some("exoscale-repair-reboot-first.yaml"));
    assert!(ok, "{stdout}");
    let (_, created, deleted, running) = totals(&report);
    assert_eq!((created, deleted, running), (2, 1, 2), "{report:#}");
    let (live, total) = exoscale_cloud(&report);
    assert_eq!((live.len(), total), (1, 2), "{report:#}");
    // The hardware fault came at 2,134.5 s: rebooted 15 minutes later, replaced 15 more on.
    let replaced = nth_claim_created_at(&stdout, 1);
    assert!(
        (3934.5..=3956.0).contains(&replaced),
        "replaced at {replaced} s:\n{stdout}"
    );
}

#[test]
fn node_repair_veto_holds_a_sick_node_until_lifted() {
    let (report, stdout, ok) = simulate(Some("repair-veto.yaml"));
    assert!(ok, "{stdout}");
    let (_, created, deleted, running) = totals(&report);
    assert_eq!((created, deleted, running), (2, 1, 2), "{report:#}");
    // Vetoed for the 30 minutes the scenario waits, then replaced within a pass of the lift.
    let replaced = nth_claim_created_at(&stdout, 1);
    assert!(
        (1834.5..=1846.0).contains(&replaced),
        "replaced at {replaced} s:\n{stdout}"
    );
}
