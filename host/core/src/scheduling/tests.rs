//! Scenario tests for the provisioning pass, built from plain data.

use crate::labels::{
    CAPACITY_OVERLAY_APPLIED_ANNOTATION, NODECLAIM_MIN_VALUES_RELAXED_ANNOTATION,
    PRICE_OVERLAY_APPLIED_ANNOTATION,
};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::*;
use crate::instance_type::{InstanceType, Offering, Overhead};
use crate::labels::{
    ARCH_LABEL, CAPACITY_TYPE_LABEL, HOSTNAME_LABEL, INITIALIZED_LABEL, INSTANCE_TYPE_LABEL,
    LabelPolicy, NODEPOOL_LABEL, OS_LABEL, REGISTERED_LABEL, ZONE_LABEL,
};
use crate::nodeclaim::{MAX_INSTANCE_TYPES, NodeClaimTemplate, NodeClassRef};
use crate::requirements::{Operator, Requirement, Requirements};
use crate::resources::{InitContainer, PodResourceSpec, Resources};
use crate::taints::{Taint, TaintEffect, Toleration};

const GI: u64 = 1 << 30;
const CPU_LABEL: &str = "example.com/instance-cpu";
const FAMILY_LABEL: &str = "example.com/family";

// ---------------------------------------------------------------------------------------------
// fixtures

fn class() -> NodeClassRef {
    NodeClassRef {
        group: "test.joinery.dev".into(),
        kind: "TestNodeClass".into(),
        name: "default".into(),
    }
}

fn cpu(millis: u64) -> Resources {
    Resources::new().with("cpu", millis)
}

fn reqs(items: impl IntoIterator<Item = Requirement>) -> Requirements {
    items.into_iter().collect()
}

/// An instance type with explicit offerings; requirements cover instance type, zones and
/// capacity types of its offerings, arch, OS and a CPU count label.
fn itype_with(name: &str, vcpu: u64, arch: &str, offerings: Vec<Offering>) -> InstanceType {
    let zones: Vec<&str> = offerings.iter().map(|o| o.zone()).collect();
    let cts: Vec<&str> = offerings.iter().map(|o| o.capacity_type()).collect();
    let requirements = reqs([
        Requirement::in_values(INSTANCE_TYPE_LABEL, [name]),
        Requirement::in_values(ZONE_LABEL, zones),
        Requirement::in_values(CAPACITY_TYPE_LABEL, cts),
        Requirement::in_values(ARCH_LABEL, [arch]),
        Requirement::in_values(OS_LABEL, ["linux"]),
        Requirement::in_values(CPU_LABEL, [vcpu.to_string()]),
    ]);
    let capacity = Resources::new()
        .with("cpu", vcpu * 1000)
        .with("memory", vcpu * 2 * GI)
        .with("pods", 110);
    InstanceType::new(name, requirements, capacity, Overhead::default(), offerings)
}

/// On-demand and spot (70%) offerings in zones a and b.
fn offerings(price: Option<f64>) -> Vec<Offering> {
    let spot = price.map(|p| p * 0.7);
    vec![
        Offering::new("a", "on-demand", price, true),
        Offering::new("b", "on-demand", price, true),
        Offering::new("a", "spot", spot, true),
        Offering::new("b", "spot", spot, true),
    ]
}

fn itype(name: &str, vcpu: u64, price: Option<f64>) -> InstanceType {
    itype_with(name, vcpu, "amd64", offerings(price))
}

/// The c3 family: price proportional to size.
fn c3() -> Vec<InstanceType> {
    vec![
        itype("c3-4", 2, Some(0.1)),
        itype("c3-8", 4, Some(0.2)),
        itype("c3-16", 8, Some(0.4)),
    ]
}

fn pool_with(name: &str, requirements: Requirements, types: Vec<InstanceType>) -> NodePool {
    NodePool {
        template: NodeClaimTemplate::new(name, class(), &requirements, BTreeMap::new()),
        instance_types: types,
        limits: None,
    }
}

fn pool(name: &str) -> NodePool {
    pool_with(name, Requirements::new(), c3())
}

fn weighted(name: &str, weight: i32) -> NodePool {
    let mut p = pool(name);
    p.template.weight = weight;
    p
}

fn pod(name: &str, cpu_millis: u64) -> PendingPod {
    let spec = PodResourceSpec {
        containers: vec![cpu(cpu_millis)],
        ..Default::default()
    };
    PendingPod::from_spec("default", name, &spec)
}

fn pods(prefix: &str, n: usize, cpu_millis: u64) -> Vec<PendingPod> {
    (0..n)
        .map(|i| {
            let mut p = pod(&format!("{prefix}-{i}"), cpu_millis);
            p.created = i as i64;
            p
        })
        .collect()
}

fn with_selector(mut p: PendingPod, key: &str, value: &str) -> PendingPod {
    p.node_selector.insert(key.into(), value.into());
    p
}

fn node(name: &str, labels: &[(&str, &str)], cpu_millis: u64) -> ExistingNode {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    ExistingNode::new(name, &labels, cpu(cpu_millis).with("pods", 110))
}

fn daemon(name: &str, cpu_millis: u64) -> DaemonPod {
    let spec = PodResourceSpec {
        containers: vec![cpu(cpu_millis)],
        ..Default::default()
    };
    DaemonPod {
        name: name.into(),
        requests: spec.requests(),
        ..Default::default()
    }
}

fn input(pods: Vec<PendingPod>, nodes: Vec<ExistingNode>, pools: Vec<NodePool>) -> SchedulingInput {
    SchedulingInput {
        pods,
        nodes,
        nodepools: pools,
        daemons: Vec::new(),
        label_policy: LabelPolicy::default(),
    }
}

fn run(pods: Vec<PendingPod>, nodes: Vec<ExistingNode>, pools: Vec<NodePool>) -> SchedulingResult {
    schedule(&input(pods, nodes, pools))
}

fn claim_of<'r>(r: &'r SchedulingResult, name: &str) -> &'r NewNodeClaim {
    match r.placement("default", name) {
        Some(Placement::NewClaim { index }) => &r.new_claims[*index],
        other => panic!("{name} is not on a new claim: {other:?}"),
    }
}

fn node_of<'r>(r: &'r SchedulingResult, name: &str) -> &'r str {
    match r.placement("default", name) {
        Some(Placement::Existing { node }) => node,
        other => panic!("{name} is not on an existing node: {other:?}"),
    }
}

fn reason_of<'r>(r: &'r SchedulingResult, name: &str) -> &'r str {
    match r.placement("default", name) {
        Some(Placement::Unschedulable { reason }) => reason,
        other => panic!("{name} was placed: {other:?}"),
    }
}

fn types_of(c: &NewNodeClaim) -> Vec<&str> {
    c.spec.instance_types.iter().map(String::as_str).collect()
}

fn values(r: &Requirements, key: &str) -> Vec<String> {
    r.get(key)
        .unwrap_or_else(|| panic!("no requirement on {key}"))
        .values()
        .iter()
        .cloned()
        .collect()
}

// ---------------------------------------------------------------------------------------------
// cost and packing

#[test]
fn one_pod_lists_the_cheapest_fitting_type_first() {
    let r = run(vec![pod("p", 3000)], vec![], vec![pool("default")]);
    let c = claim_of(&r, "p");
    assert_eq!(types_of(c), ["c3-8", "c3-16"]);
    assert_eq!(c.launch_price, Some(0.2 * 0.7));
    assert_eq!(c.spec.requests.cpu_millis, 3000);
    assert_eq!(c.spec.requests.pods, 1);
    assert_eq!(r.new_claims.len(), 1);
}

#[test]
fn eight_one_cpu_pods_cost_at_most_three_c3_8() {
    let price_c3_8 = 0.2 * 0.7;
    let r = run(pods("p", 8, 1000), vec![], vec![pool("default")]);
    assert_eq!(r.new_claims.len(), 1, "one claim packs all eight pods");
    assert_eq!(types_of(&r.new_claims[0]), ["c3-16"]);
    assert_eq!(r.new_claims[0].pods.len(), 8);
    let total: f64 = r.new_claims.iter().filter_map(|c| c.launch_price).sum();
    assert!(total <= 3.0 * price_c3_8 + 1e-9, "total {total}");

    // With kubelet overhead the largest type holds seven pods; the eighth opens a claim
    // whose cheapest option is the smallest type.
    let mut p = pool("default");
    let overhead = Overhead {
        kube_reserved: cpu(100),
        ..Default::default()
    };
    p.instance_types = c3()
        .into_iter()
        .map(|t| {
            InstanceType::new(
                t.name(),
                t.requirements().clone(),
                t.capacity().clone(),
                overhead.clone(),
                t.offerings().clone(),
            )
        })
        .collect();
    let r = run(pods("p", 8, 1000), vec![], vec![p]);
    assert_eq!(r.new_claims.len(), 2);
    assert_eq!(r.new_claims[0].pods.len(), 7);
    assert_eq!(types_of(&r.new_claims[0]), ["c3-16"]);
    assert_eq!(types_of(&r.new_claims[1])[0], "c3-4");
    let total: f64 = r.new_claims.iter().filter_map(|c| c.launch_price).sum();
    assert!(total <= 3.0 * price_c3_8 + 1e-9, "total {total}");
}

#[test]
fn claim_options_shrink_as_requests_grow() {
    // 3 + 3 cpu: after the second pod only the 8-vCPU type still fits.
    let r = run(pods("p", 2, 3000), vec![], vec![pool("default")]);
    assert_eq!(r.new_claims.len(), 1);
    assert_eq!(types_of(&r.new_claims[0]), ["c3-16"]);
    assert_eq!(r.new_claims[0].spec.requests.cpu_millis, 6000);
    assert_eq!(r.new_claims[0].spec.requests.pods, 2);
}

#[test]
fn requests_include_init_containers_and_sidecars() {
    // The init container (3 cpu) dominates the app container (1 cpu).
    let spec = PodResourceSpec {
        containers: vec![cpu(1000)],
        init_containers: vec![InitContainer {
            requests: cpu(3000),
            restartable: false,
        }],
        ..Default::default()
    };
    let r = run(
        vec![PendingPod::from_spec("default", "init", &spec)],
        vec![],
        vec![pool("default")],
    );
    assert_eq!(types_of(claim_of(&r, "init")), ["c3-8", "c3-16"]);

    // A sidecar runs next to the app: 1500m + 1 = 2500m no longer fits 2 vCPU.
    let spec = PodResourceSpec {
        containers: vec![cpu(1500)],
        init_containers: vec![InitContainer {
            requests: cpu(1000),
            restartable: true,
        }],
        ..Default::default()
    };
    let r = run(
        vec![PendingPod::from_spec("default", "sidecar", &spec)],
        vec![],
        vec![pool("default")],
    );
    let c = claim_of(&r, "sidecar");
    assert_eq!(types_of(c)[0], "c3-8");
    assert_eq!(c.spec.requests.cpu_millis, 2500);
}

#[test]
fn extended_resources_select_the_type_that_has_them() {
    let mut gpu = itype("g-4", 4, Some(1.0));
    gpu = InstanceType::new(
        gpu.name(),
        gpu.requirements().clone(),
        gpu.capacity().clone().with("nvidia.com/gpu", 1),
        Overhead::default(),
        gpu.offerings().clone(),
    );
    let mut types = c3();
    types.push(gpu);
    let mut gpu_pod = pod("gpu", 1000);
    gpu_pod.requests.set("nvidia.com/gpu", 1);
    let p = pool_with("default", Requirements::new(), types);
    let r = run(vec![gpu_pod, pod("plain", 1000)], vec![], vec![p.clone()]);
    assert_eq!(types_of(claim_of(&r, "gpu")), ["g-4"]);
    // The plain pod fits the open GPU claim, which is preferred over a new claim.
    assert_eq!(r.new_claims.len(), 1);
    assert_eq!(claim_of(&r, "plain").pods.len(), 2);
    // Alone, it gets the cheapest plain type.
    let r = run(vec![pod("plain", 1000)], vec![], vec![p]);
    assert_eq!(types_of(claim_of(&r, "plain"))[0], "c3-4");
}

#[test]
fn open_claims_with_fewest_pods_are_tried_first() {
    let mut all = pods("big", 2, 7000);
    all.extend(pods("small", 2, 500));
    let r = run(all, vec![], vec![pool("default")]);
    assert_eq!(r.new_claims.len(), 2);
    // small-0: both claims hold one pod, the older claim wins; small-1 then prefers the
    // claim with fewer pods even though the first still has room.
    assert_eq!(
        r.placement("default", "small-0"),
        Some(&Placement::NewClaim { index: 0 })
    );
    assert_eq!(
        r.placement("default", "small-1"),
        Some(&Placement::NewClaim { index: 1 })
    );
}

#[test]
fn pods_are_tried_largest_cpu_first() {
    // The small pod comes first in the input and is older, but the large one is tried first
    // and takes the node.
    let mut small = pod("small", 1000);
    small.created = 0;
    let mut large = pod("large", 4000);
    large.created = 10;
    let r = run(
        vec![small, large],
        vec![node("n1", &[], 4000)],
        vec![pool("default")],
    );
    assert_eq!(node_of(&r, "large"), "n1");
    claim_of(&r, "small");
}

// ---------------------------------------------------------------------------------------------
// existing nodes

#[test]
fn existing_nodes_are_packed_before_new_claims() {
    let r = run(
        pods("p", 3, 1000),
        vec![node("n1", &[], 4000)],
        vec![pool("default")],
    );
    assert!(r.new_claims.is_empty());
    assert_eq!(r.pods_on_node("n1").len(), 3);

    let r = run(
        pods("p", 5, 1000),
        vec![node("n1", &[], 4000)],
        vec![pool("default")],
    );
    assert_eq!(r.pods_on_node("n1").len(), 4);
    assert_eq!(r.new_claims.len(), 1);
    assert_eq!(r.new_claims[0].pods.len(), 1);
}

#[test]
fn already_bound_pods_reduce_what_a_node_offers() {
    let mut n = node("n1", &[], 4000);
    n.requested = cpu(3500).with("pods", 3);
    let r = run(vec![pod("p", 1000)], vec![n], vec![pool("default")]);
    claim_of(&r, "p");
}

#[test]
fn initialized_nodes_come_first_then_names() {
    let mut in_flight = node("a-in-flight", &[], 1000);
    in_flight.in_flight = true;
    let nodes = vec![
        node("c-ready", &[], 1000),
        in_flight,
        node("b-ready", &[], 1000),
    ];
    let r = run(pods("p", 3, 1000), nodes, vec![pool("default")]);
    assert_eq!(node_of(&r, "p-0"), "b-ready");
    assert_eq!(node_of(&r, "p-1"), "c-ready");
    assert_eq!(node_of(&r, "p-2"), "a-in-flight");
}

#[test]
fn unschedulable_nodes_are_skipped() {
    let mut cordoned = node("cordoned", &[], 8000);
    cordoned.schedulable = false;
    let r = run(vec![pod("p", 1000)], vec![cordoned], vec![pool("default")]);
    claim_of(&r, "p");
    assert!(r.pods_on_node("cordoned").is_empty());
}

#[test]
fn node_taints_must_be_tolerated() {
    let mut tainted = node("tainted", &[], 8000);
    tainted.taints = vec![Taint::new("dedicated", "db", TaintEffect::NoSchedule)];
    let r = run(
        vec![pod("p", 1000)],
        vec![tainted.clone()],
        vec![pool("default")],
    );
    claim_of(&r, "p");

    let mut tolerant = pod("p", 1000);
    tolerant.tolerations = vec![Toleration::equal("dedicated", "db", None)];
    let r = run(vec![tolerant], vec![tainted], vec![pool("default")]);
    assert_eq!(node_of(&r, "p"), "tainted");
}

#[test]
fn node_labels_must_strictly_match() {
    // The node lacks the custom label, so the pod cannot go there even though it fits; a
    // pool that declares the label takes it and stamps the label on the claim.
    let mut p = pool("default");
    p.template = NodeClaimTemplate::new(
        "default",
        class(),
        &Requirements::new(),
        BTreeMap::from([("team".to_owned(), "red".to_owned())]),
    );
    let r = run(
        vec![with_selector(pod("p", 1000), "team", "red")],
        vec![node("n1", &[], 8000)],
        vec![p],
    );
    let c = claim_of(&r, "p");
    assert_eq!(c.spec.labels.get("team").map(String::as_str), Some("red"));

    let r = run(
        vec![with_selector(pod("p", 1000), "team", "red")],
        vec![node("n1", &[("team", "red")], 8000)],
        vec![pool("default")],
    );
    assert_eq!(node_of(&r, "p"), "n1");
}

#[test]
fn daemons_not_yet_running_are_reserved_on_existing_nodes() {
    let mut inp = input(
        vec![pod("p", 1500)],
        vec![node("n1", &[("kubernetes.io/arch", "amd64")], 2000)],
        vec![pool("default")],
    );
    inp.daemons = vec![daemon("kube-system/agent", 1000)];
    let r = schedule(&inp);
    claim_of(&r, "p");

    // Once the daemon runs there (its requests are already counted as bound) only the bound
    // requests count, and the pod still does not fit.
    inp.nodes[0].requested = daemon("x", 1000).requests;
    inp.nodes[0].daemon_requested = daemon("x", 1000).requests;
    let r = schedule(&inp);
    claim_of(&r, "p");

    // A daemon that selects another architecture reserves nothing.
    inp.nodes[0].requested = Resources::new();
    inp.nodes[0].daemon_requested = Resources::new();
    inp.daemons[0]
        .node_selector
        .insert(ARCH_LABEL.into(), "arm64".into());
    let r = schedule(&inp);
    assert_eq!(node_of(&r, "p"), "n1");
}

#[test]
fn an_unexpected_daemon_on_a_node_never_makes_the_reservation_negative() {
    // n1 runs a daemon pod of 1500m that no DaemonSet of the pass would place (say its
    // DaemonSet is gone); the pass's own daemon (1000m) is not running there yet.
    let mut inp = input(
        vec![pod("fits", 500)],
        vec![node("n1", &[("kubernetes.io/arch", "amd64")], 2000)],
        vec![pool("default")],
    );
    inp.nodes[0].requested = daemon("x", 1500).requests;
    inp.nodes[0].daemon_requested = daemon("x", 1500).requests;
    inp.daemons = vec![daemon("kube-system/agent", 1000)];
    // Reserved = max(0, 1000 - 1500) = 0: the 500m left take the pod, and no more than that.
    let r = schedule(&inp);
    assert_eq!(node_of(&r, "fits"), "n1");
    inp.pods = vec![pod("too-big", 600)];
    let r = schedule(&inp);
    claim_of(&r, "too-big");
}

#[test]
fn in_flight_claim_requirements_narrow_as_pods_land() {
    let mut claim = ExistingNode {
        name: "default-abc12".into(),
        nodepool: Some("default".into()),
        requirements: reqs([Requirement::in_values(ZONE_LABEL, ["a", "b"])]),
        allocatable: cpu(8000).with("pods", 110),
        in_flight: true,
        schedulable: true,
        ..Default::default()
    };
    claim.requested = Resources::new();
    let mut a = with_selector(pod("zone-a", 1000), ZONE_LABEL, "a");
    a.created = 0;
    let mut b = with_selector(pod("zone-b", 1000), ZONE_LABEL, "b");
    b.created = 1;
    let r = run(vec![b, a], vec![claim], vec![pool("default")]);
    assert_eq!(node_of(&r, "zone-a"), "default-abc12");
    let c = claim_of(&r, "zone-b");
    assert_eq!(values(&c.spec.requirements, ZONE_LABEL), ["b"]);
}

// ---------------------------------------------------------------------------------------------
// requirements

#[test]
fn custom_selector_needs_a_pool_that_declares_it() {
    let r = run(
        vec![with_selector(pod("p", 1000), "team", "red")],
        vec![],
        vec![pool("default")],
    );
    assert_eq!(
        reason_of(&r, "p"),
        "incompatible with nodepool \"default\", daemonset overhead={}, incompatible requirements, label \"team\" does not have known values"
    );
}

#[test]
fn well_known_selector_narrows_the_claim() {
    let r = run(
        vec![with_selector(pod("p", 1000), ZONE_LABEL, "b")],
        vec![],
        vec![pool("default")],
    );
    let c = claim_of(&r, "p");
    assert_eq!(values(&c.spec.requirements, ZONE_LABEL), ["b"]);
    assert_eq!(values(&c.spec.requirements, NODEPOOL_LABEL), ["default"]);
    assert!(
        !c.spec.labels.contains_key(ZONE_LABEL),
        "well-known keys are left to the provider"
    );
}

#[test]
fn deprecated_selector_keys_are_normalized() {
    let r = run(
        vec![with_selector(
            pod("p", 1000),
            "failure-domain.beta.kubernetes.io/zone",
            "a",
        )],
        vec![],
        vec![pool("default")],
    );
    assert_eq!(
        values(&claim_of(&r, "p").spec.requirements, ZONE_LABEL),
        ["a"]
    );
}

#[test]
fn required_affinity_terms_are_alternatives() {
    let mut p = pod("p", 1000);
    p.required_affinity = vec![
        reqs([Requirement::in_values(ZONE_LABEL, ["nowhere"])]),
        reqs([Requirement::in_values(ZONE_LABEL, ["b"])]),
    ];
    let r = run(vec![p.clone()], vec![], vec![pool("default")]);
    assert_eq!(
        values(&claim_of(&r, "p").spec.requirements, ZONE_LABEL),
        ["b"]
    );

    // The first satisfiable term is used, not a union.
    p.required_affinity = vec![
        reqs([Requirement::in_values(ZONE_LABEL, ["a"])]),
        reqs([Requirement::in_values(ZONE_LABEL, ["b"])]),
    ];
    let r = run(vec![p.clone()], vec![], vec![pool("default")]);
    assert_eq!(
        values(&claim_of(&r, "p").spec.requirements, ZONE_LABEL),
        ["a"]
    );

    // No term works: the reason comes from the last term tried.
    p.required_affinity = vec![
        reqs([Requirement::in_values(ZONE_LABEL, ["c"])]),
        reqs([Requirement::in_values(ZONE_LABEL, ["d"])]),
    ];
    let r = run(vec![p], vec![], vec![pool("default")]);
    assert_eq!(
        reason_of(&r, "p"),
        "incompatible with nodepool \"default\", daemonset overhead={}, no instance type satisfied resources {\"cpu\":\"1\",\"pods\":\"1\"} and requirements karpenter.sh/nodepool In [default], test.joinery.dev/testnodeclass In [default], topology.kubernetes.io/zone In [d] (no instance type met the scheduling requirements or had a required offering)"
    );
}

#[test]
fn affinity_terms_combine_with_the_node_selector() {
    let mut p = with_selector(pod("p", 1000), CAPACITY_TYPE_LABEL, "on-demand");
    p.required_affinity = vec![reqs([Requirement::in_values(ZONE_LABEL, ["a"])])];
    let r = run(vec![p], vec![], vec![pool("default")]);
    let c = claim_of(&r, "p");
    assert_eq!(values(&c.spec.requirements, ZONE_LABEL), ["a"]);
    assert_eq!(
        values(&c.spec.requirements, CAPACITY_TYPE_LABEL),
        ["on-demand"]
    );
}

#[test]
fn not_in_excludes_instance_types() {
    let mut p = pod("p", 1000);
    p.required_affinity = vec![reqs([Requirement::not_in(
        INSTANCE_TYPE_LABEL,
        ["c3-4", "c3-8"],
    )])];
    let r = run(vec![p], vec![], vec![pool("default")]);
    assert_eq!(types_of(claim_of(&r, "p")), ["c3-16"]);
}

#[test]
fn exists_on_a_declared_custom_key() {
    let pool_reqs = reqs([Requirement::in_values("team", ["red", "blue"])]);
    let mut any_team = pod("any", 1000);
    any_team.required_affinity = vec![reqs([Requirement::exists("team")])];
    any_team.created = 0;
    let mut red = with_selector(pod("red", 1000), "team", "red");
    red.created = 1;
    // Separate claims: "red" would otherwise join "any"'s claim and narrow it.
    let mut inp = input(
        vec![any_team.clone()],
        vec![],
        vec![pool_with("default", pool_reqs.clone(), c3())],
    );
    let r = schedule(&inp);
    let c = claim_of(&r, "any");
    assert_eq!(values(&c.spec.requirements, "team"), ["blue", "red"]);
    assert_eq!(
        c.spec.labels.get("team").map(String::as_str),
        Some("blue"),
        "two values: labelled with one that satisfies the requirement (upstream picks any; we pick the smallest)"
    );

    inp.pods = vec![red];
    let r = schedule(&inp);
    let c = claim_of(&r, "red");
    assert_eq!(c.spec.labels.get("team").map(String::as_str), Some("red"));

    let r = run(vec![any_team], vec![], vec![pool("undeclared")]);
    assert!(reason_of(&r, "any").contains("label \"team\" does not have known values"));
}

#[test]
fn does_not_exist_rejects_pools_that_set_the_key() {
    let mut p = pod("p", 1000);
    p.required_affinity = vec![reqs([Requirement::does_not_exist("team")])];
    let mut labelled = pool_with(
        "labelled",
        reqs([Requirement::in_values("team", ["red"])]),
        c3(),
    );
    labelled.template.weight = 10;
    let r = run(vec![p.clone()], vec![], vec![labelled.clone()]);
    assert_eq!(
        reason_of(&r, "p"),
        "incompatible with nodepool \"labelled\", daemonset overhead={}, incompatible requirements, key team, team DoesNotExist not in team In [red]"
    );
    let r = run(vec![p], vec![], vec![labelled, pool("plain")]);
    assert_eq!(claim_of(&r, "p").spec.nodepool, "plain");
}

#[test]
fn gt_and_lt_filter_integer_labels() {
    let mut p = pod("p", 500);
    p.required_affinity = vec![reqs([
        Requirement::new(CPU_LABEL, Operator::Gt, ["2"]).unwrap(),
        Requirement::new(CPU_LABEL, Operator::Lt, ["8"]).unwrap(),
    ])];
    let mut inp = input(vec![p], vec![], vec![pool("default")]);
    inp.label_policy = LabelPolicy::default().with_well_known(CPU_LABEL);
    let r = schedule(&inp);
    assert_eq!(types_of(claim_of(&r, "p")), ["c3-8"]);

    // Without the key being well-known (or declared by the pool) the pod cannot use it.
    inp.label_policy = LabelPolicy::default();
    let r = schedule(&inp);
    assert!(
        reason_of(&r, "p")
            .contains("label \"example.com/instance-cpu\" does not have known values")
    );
}

#[test]
fn exists_on_a_custom_key_no_pool_declares_is_unschedulable() {
    let mut p = pod("p", 500);
    p.required_affinity = vec![reqs([Requirement::exists("example.com/gpu-model")])];
    let r = run(vec![p.clone()], vec![], vec![pool("default")]);
    assert!(
        reason_of(&r, "p").contains("label \"example.com/gpu-model\" does not have known values"),
        "{}",
        reason_of(&r, "p")
    );
    // DoesNotExist (and NotIn) on the same undeclared key are satisfied by its absence.
    p.required_affinity = vec![reqs([Requirement::new(
        "example.com/gpu-model",
        Operator::DoesNotExist,
        Vec::<String>::new(),
    )
    .unwrap()])];
    let r = run(vec![p], vec![], vec![pool("default")]);
    claim_of(&r, "p");
}

#[test]
fn pool_requirements_on_custom_keys_become_labels_that_satisfy_them() {
    let pool_reqs = reqs([
        Requirement::new("example.com/tier", Operator::NotIn, ["0", "1"]).unwrap(),
        Requirement::exists("example.com/any"),
        Requirement::new("example.com/generation", Operator::Gt, ["5"]).unwrap(),
        Requirement::new("example.com/rack", Operator::Lt, ["-3"]).unwrap(),
        Requirement::new(
            "example.com/absent",
            Operator::DoesNotExist,
            Vec::<String>::new(),
        )
        .unwrap(),
    ]);
    let r = run(
        vec![pod("p", 500)],
        vec![],
        vec![pool_with("default", pool_reqs.clone(), c3())],
    );
    let labels = &claim_of(&r, "p").spec.labels;
    for requirement in pool_reqs.iter().filter(|r| r.key() != "example.com/absent") {
        let value = labels
            .get(requirement.key())
            .unwrap_or_else(|| panic!("no label {} in {labels:?}", requirement.key()));
        assert!(
            requirement.has(value),
            "{} = {value} does not satisfy {requirement:?}",
            requirement.key()
        );
    }
    assert_eq!(labels["example.com/tier"], "2");
    assert_eq!(labels["example.com/generation"], "6");
    assert_eq!(labels["example.com/rack"], "-4");
    assert!(
        !labels.contains_key("example.com/absent"),
        "DoesNotExist gives no label"
    );
}

#[test]
fn incompatible_pool_requirement_is_reported_with_both_sides() {
    let pool_reqs = reqs([Requirement::in_values(
        INSTANCE_TYPE_LABEL,
        ["c3-4", "c3-8"],
    )]);
    let r = run(
        vec![with_selector(pod("p", 1000), INSTANCE_TYPE_LABEL, "c3-16")],
        vec![],
        vec![pool_with("default", pool_reqs, c3())],
    );
    assert_eq!(
        reason_of(&r, "p"),
        "incompatible with nodepool \"default\", daemonset overhead={}, incompatible requirements, key node.kubernetes.io/instance-type, node.kubernetes.io/instance-type In [c3-16] not in node.kubernetes.io/instance-type In [c3-4 c3-8]"
    );
}

// ---------------------------------------------------------------------------------------------
// taints

#[test]
fn pool_taints_must_be_tolerated() {
    let mut tainted = pool("default");
    tainted.template.taints = vec![Taint::new("dedicated", "gpu", TaintEffect::NoSchedule)];
    let r = run(vec![pod("p", 1000)], vec![], vec![tainted.clone()]);
    assert_eq!(
        reason_of(&r, "p"),
        "incompatible with nodepool \"default\", daemonset overhead={}, did not tolerate taint dedicated=gpu:NoSchedule"
    );

    let mut tolerant = pod("p", 1000);
    tolerant.tolerations = vec![Toleration::exists(
        "dedicated",
        Some(TaintEffect::NoSchedule),
    )];
    let r = run(vec![tolerant], vec![], vec![tainted]);
    let c = claim_of(&r, "p");
    assert_eq!(
        c.spec.taints,
        vec![Taint::new("dedicated", "gpu", TaintEffect::NoSchedule)]
    );
}

#[test]
fn startup_taints_need_no_toleration() {
    let mut p = pool("default");
    p.template.startup_taints = vec![Taint::without_value(
        "example.com/agent-not-ready",
        TaintEffect::NoSchedule,
    )];
    let r = run(vec![pod("p", 1000)], vec![], vec![p]);
    let c = claim_of(&r, "p");
    assert_eq!(c.spec.startup_taints.len(), 1);
    assert!(c.spec.taints.is_empty());
}

#[test]
fn prefer_no_schedule_is_relaxed_only_when_nothing_else_fits() {
    let mut soft = weighted("soft", 50);
    soft.template.taints = vec![Taint::new(
        "spot-only",
        "true",
        TaintEffect::PreferNoSchedule,
    )];
    // The heavier pool is avoided while another pool can take the pod.
    let r = run(
        vec![pod("p", 1000)],
        vec![],
        vec![soft.clone(), pool("plain")],
    );
    assert_eq!(claim_of(&r, "p").spec.nodepool, "plain");
    // Alone, it is used after relaxation.
    let r = run(vec![pod("p", 1000)], vec![], vec![soft]);
    assert_eq!(claim_of(&r, "p").spec.nodepool, "soft");
}

// ---------------------------------------------------------------------------------------------
// NodePool order and limits

#[test]
fn heavier_pools_win_and_ties_go_to_the_later_name() {
    let r = run(
        vec![pod("p", 1000)],
        vec![],
        vec![weighted("low", 1), weighted("high", 50)],
    );
    assert_eq!(claim_of(&r, "p").spec.nodepool, "high");
    let r = run(
        vec![pod("p", 1000)],
        vec![],
        vec![weighted("alpha", 5), weighted("beta", 5)],
    );
    assert_eq!(
        claim_of(&r, "p").spec.nodepool,
        "beta",
        "upstream orders equal weights by name, descending"
    );
}

#[test]
fn lower_weight_pools_are_the_fallback() {
    let mut high = weighted("high", 50);
    high.template.taints = vec![Taint::without_value("reserved", TaintEffect::NoSchedule)];
    let r = run(vec![pod("p", 1000)], vec![], vec![high, weighted("low", 1)]);
    assert_eq!(claim_of(&r, "p").spec.nodepool, "low");
}

#[test]
fn reasons_list_every_pool_tried() {
    let mut high = weighted("high", 50);
    high.template.taints = vec![Taint::without_value("reserved", TaintEffect::NoSchedule)];
    let r = run(
        vec![pod("p", 100_000)],
        vec![],
        vec![weighted("low", 1), high],
    );
    let reason = reason_of(&r, "p");
    let clauses: Vec<&str> = reason.split("; ").collect();
    assert_eq!(clauses.len(), 2, "{reason}");
    assert!(clauses[0].starts_with("incompatible with nodepool \"high\""));
    assert!(clauses[0].ends_with("did not tolerate taint reserved:NoSchedule"));
    assert!(clauses[1].starts_with("incompatible with nodepool \"low\""));
    assert!(clauses[1].ends_with("(no instance type has enough resources)"));
}

#[test]
fn a_preparation_gives_every_pass_the_result_of_a_fresh_one() {
    // Limits are spent per pass: the second pass must start from the pool's own limits, not
    // from what the first pass left of them.
    let mut limited = pool("limited");
    limited.limits = Some(NodePoolLimits::from_quantities([("cpu", "8")], cpu(0)).unwrap());
    limited.template.weight = 10;
    let nodes = vec![
        node("n1", &[], 4000),
        node("n2", &[(HOSTNAME_LABEL, "n2")], 2000),
        node("n3", &[], 1000),
    ];
    let mut base = input(Vec::new(), nodes, vec![limited, pool("spare")]);
    base.daemons.push(daemon("agent", 500));
    let context = SchedulingContext::default();
    let prepared = Prepared::new(&base, &context);
    // Only the pods and which nodes are open change between passes.
    let passes = [
        (pods("a", 6, 1500), [true, true, true]),
        (pods("b", 3, 3000), [false, true, true]),
        (vec![pod("c", 900)], [true, false, false]),
        (pods("d", 4, 700), [false, true, false]),
    ];
    for (pods, open) in passes {
        base.pods = pods;
        for (n, open) in base.nodes.iter_mut().zip(open) {
            n.schedulable = open;
        }
        let fresh = schedule_with_context(&base, &context, None);
        assert!(!fresh.placements.is_empty());
        assert_eq!(schedule_prepared(&base, &context, &prepared, None), fresh);
    }

    // Prepared for other NodePools, DaemonSets or nodes: that part is prepared again.
    let other_pools = input(Vec::new(), base.nodes.clone(), vec![pool("spare")]);
    let no_daemons = input(Vec::new(), base.nodes.clone(), base.nodepools.clone());
    let mut other_nodes = input(
        Vec::new(),
        vec![node("n1", &[], 4000)],
        base.nodepools.clone(),
    );
    other_nodes.daemons = base.daemons.clone();
    for other in [other_pools, no_daemons, other_nodes] {
        let foreign = Prepared::new(&other, &context);
        assert_eq!(
            schedule_prepared(&base, &context, &foreign, None),
            schedule_with_context(&base, &context, None)
        );
    }
}

#[test]
fn limits_exclude_types_larger_than_what_is_left() {
    let mut p = pool("default");
    p.limits = Some(NodePoolLimits::from_quantities([("cpu", "1")], Resources::new()).unwrap());
    let r = run(vec![pod("p", 500)], vec![], vec![p.clone()]);
    assert_eq!(
        reason_of(&r, "p"),
        "all available instance types exceed limits for nodepool: \"default\""
    );

    // 10 cpu allowed, 8 used: only the 2-vCPU type can still be launched.
    p.limits = Some(NodePoolLimits::from_quantities([("cpu", "10")], cpu(8000)).unwrap());
    let r = run(vec![pod("p", 500)], vec![], vec![p.clone()]);
    assert_eq!(types_of(claim_of(&r, "p")), ["c3-4"]);

    // A pod larger than what may still be launched fails on resources.
    let r = run(vec![pod("p", 3000)], vec![], vec![p]);
    assert!(reason_of(&r, "p").ends_with("(no instance type has enough resources)"));
}

#[test]
fn new_claims_count_their_largest_option_against_limits() {
    let mut p = pool("default");
    p.limits = Some(NodePoolLimits::from_quantities([("cpu", "8")], Resources::new()).unwrap());
    let mut a = with_selector(pod("zone-a", 1000), ZONE_LABEL, "a");
    a.created = 0;
    let mut b = with_selector(pod("zone-b", 1000), ZONE_LABEL, "b");
    b.created = 1;
    let r = run(vec![a, b], vec![], vec![p]);
    // The first claim could become a c3-16, so all 8 cpu are spoken for.
    assert_eq!(types_of(claim_of(&r, "zone-a")), ["c3-4", "c3-8", "c3-16"]);
    assert_eq!(
        reason_of(&r, "zone-b"),
        "all available instance types exceed limits for nodepool: \"default\""
    );
}

#[test]
fn each_new_claim_sees_the_limits_its_predecessors_left() {
    let mut p = pool("default");
    p.limits = Some(NodePoolLimits::from_quantities([("cpu", "12")], Resources::new()).unwrap());
    let pods: Vec<_> = ["a", "b", "c"]
        .into_iter()
        .enumerate()
        .map(|(i, zone)| {
            let mut pod = with_selector(pod(&format!("zone-{zone}"), 1000), ZONE_LABEL, zone);
            pod.created = i as i64;
            pod
        })
        .collect();
    let r = run(pods, vec![], vec![p]);
    // 12 cpu: the first claim may become an 8-vCPU c3-16, which leaves 4 for the second
    // (up to a c3-8), which leaves none for the third.
    assert_eq!(types_of(claim_of(&r, "zone-a")), ["c3-4", "c3-8", "c3-16"]);
    assert_eq!(types_of(claim_of(&r, "zone-b")), ["c3-4", "c3-8"]);
    assert_eq!(
        reason_of(&r, "zone-c"),
        "all available instance types exceed limits for nodepool: \"default\""
    );
}

#[test]
fn node_count_limit() {
    let mut p = pool("default");
    p.limits = Some(NodePoolLimits::from_quantities([("nodes", "1")], Resources::new()).unwrap());
    let a = with_selector(pod("zone-a", 1000), ZONE_LABEL, "a");
    let mut b = with_selector(pod("zone-b", 1000), ZONE_LABEL, "b");
    b.created = 1;
    let r = run(vec![a, b], vec![], vec![p.clone()]);
    claim_of(&r, "zone-a");
    assert!(reason_of(&r, "zone-b").starts_with("all available instance types exceed limits"));

    p.limits = Some(
        NodePoolLimits::from_quantities([("nodes", "3")], Resources::new().with("nodes", 3))
            .unwrap(),
    );
    let r = run(vec![pod("p", 1000)], vec![], vec![p]);
    assert!(reason_of(&r, "p").starts_with("all available instance types exceed limits"));
}

#[test]
fn resources_without_a_limit_are_unlimited() {
    let mut p = pool("default");
    p.limits =
        Some(NodePoolLimits::from_quantities([("memory", "1Ti")], Resources::new()).unwrap());
    let r = run(vec![pod("p", 6000)], vec![], vec![p.clone()]);
    assert_eq!(types_of(claim_of(&r, "p")), ["c3-16"]);
    let limits = p.limits.unwrap();
    assert_eq!(limits.remaining().get("memory"), Some(&(1i128 << 40)));
    assert_eq!(limits.remaining().get("cpu"), None);
}

#[test]
fn a_full_pool_falls_back_to_the_next_one() {
    let mut capped = weighted("capped", 50);
    capped.limits =
        Some(NodePoolLimits::from_quantities([("cpu", "0")], Resources::new()).unwrap());
    let r = run(
        vec![pod("p", 1000)],
        vec![],
        vec![capped, weighted("open", 1)],
    );
    assert_eq!(claim_of(&r, "p").spec.nodepool, "open");
}

// ---------------------------------------------------------------------------------------------
// offerings and prices

#[test]
fn zone_restrictions_follow_offerings() {
    let mut types = c3();
    types[0] = itype_with(
        "c3-4",
        2,
        "amd64",
        vec![Offering::new("a", "on-demand", Some(0.1), true)],
    );
    let r = run(
        vec![with_selector(pod("p", 1000), ZONE_LABEL, "b")],
        vec![],
        vec![pool_with("default", Requirements::new(), types)],
    );
    assert_eq!(types_of(claim_of(&r, "p")), ["c3-8", "c3-16"]);
}

#[test]
fn capacity_type_restrictions() {
    let r = run(
        vec![with_selector(
            pod("p", 1000),
            CAPACITY_TYPE_LABEL,
            "on-demand",
        )],
        vec![],
        vec![pool("default")],
    );
    let c = claim_of(&r, "p");
    assert_eq!(
        values(&c.spec.requirements, CAPACITY_TYPE_LABEL),
        ["on-demand"]
    );
    assert_eq!(c.launch_price, Some(0.1), "on-demand price, not spot");

    // Without a restriction both capacity types are offered to the provider.
    let r = run(vec![pod("p", 1000)], vec![], vec![pool("default")]);
    let c = claim_of(&r, "p");
    assert_eq!(
        values(&c.spec.requirements, CAPACITY_TYPE_LABEL),
        ["on-demand", "spot"]
    );

    // A spot-only type is dropped for an on-demand pod.
    let types = vec![
        itype_with(
            "spot-2",
            2,
            "amd64",
            vec![Offering::new("a", "spot", Some(0.01), true)],
        ),
        itype("c3-8", 4, Some(0.2)),
    ];
    let r = run(
        vec![with_selector(
            pod("p", 1000),
            CAPACITY_TYPE_LABEL,
            "on-demand",
        )],
        vec![],
        vec![pool_with("default", Requirements::new(), types)],
    );
    assert_eq!(types_of(claim_of(&r, "p")), ["c3-8"]);
}

#[test]
fn unavailable_offerings_do_not_count() {
    let offerings_a_only = |price: f64| {
        vec![
            Offering::new("a", "on-demand", Some(price), true),
            Offering::new("b", "on-demand", Some(price), false),
            Offering::new("a", "spot", Some(price * 0.7), false),
        ]
    };
    let types = vec![
        itype_with("c3-4", 2, "amd64", offerings_a_only(0.1)),
        itype_with("c3-8", 4, "amd64", offerings_a_only(0.2)),
    ];
    let p = pool_with("default", Requirements::new(), types);
    let r = run(
        vec![
            with_selector(pod("b", 1000), ZONE_LABEL, "b"),
            pod("any", 1000),
        ],
        vec![],
        vec![p],
    );
    assert!(
        reason_of(&r, "b").ends_with("(no instance type has the required offering)"),
        "{}",
        reason_of(&r, "b")
    );
    let c = claim_of(&r, "any");
    assert_eq!(
        values(&c.spec.requirements, CAPACITY_TYPE_LABEL),
        ["on-demand"],
        "spot is unavailable"
    );
    assert_eq!(c.launch_price, Some(0.1));
}

#[test]
fn unknown_prices_go_last_smallest_first() {
    let types = vec![
        itype("a-big", 8, None),
        itype("z-small", 2, None),
        itype("priced", 4, Some(0.5)),
    ];
    let p = pool_with("default", Requirements::new(), types);
    let r = run(vec![pod("p", 1000)], vec![], vec![p.clone()]);
    let c = claim_of(&r, "p");
    assert_eq!(types_of(c), ["priced", "z-small", "a-big"]);
    assert_eq!(c.launch_price, Some(0.5 * 0.7));

    // A fallback price turns unknown prices into known ones before ordering.
    let fallback =
        |t: &InstanceType, _: &Offering| Some(t.capacity().cpu_millis as f64 / 100_000.0);
    let r = schedule_with_fallback_price(&input(vec![pod("p", 1000)], vec![], vec![p]), &fallback);
    let c = claim_of(&r, "p");
    assert_eq!(types_of(c), ["z-small", "a-big", "priced"]);
    assert_eq!(c.launch_price, Some(0.02));
}

#[test]
fn equal_prices_are_ordered_by_name() {
    let types = vec![itype("m-b", 4, Some(0.2)), itype("m-a", 8, Some(0.2))];
    let r = run(
        vec![pod("p", 1000)],
        vec![],
        vec![pool_with("default", Requirements::new(), types)],
    );
    assert_eq!(types_of(claim_of(&r, "p")), ["m-a", "m-b"]);
}

// ---------------------------------------------------------------------------------------------
// DaemonSet overhead

#[test]
fn daemon_overhead_is_part_of_new_claims() {
    let mut inp = input(vec![pod("p", 3000)], vec![], vec![pool("default")]);
    inp.daemons = vec![daemon("kube-system/agent", 1000)];
    let r = schedule(&inp);
    let c = claim_of(&r, "p");
    assert_eq!(types_of(c), ["c3-8", "c3-16"]);
    assert_eq!(c.spec.requests.cpu_millis, 4000);
    assert_eq!(c.spec.requests.pods, 2);
    assert_eq!(c.daemon_overhead, cpu(1000).with("pods", 1));

    inp.pods = vec![pod("p", 3500)];
    let r = schedule(&inp);
    assert_eq!(types_of(claim_of(&r, "p")), ["c3-16"]);
}

#[test]
fn daemons_must_tolerate_pool_taints_to_count() {
    let mut tainted = pool("default");
    tainted.template.taints = vec![Taint::without_value("dedicated", TaintEffect::NoSchedule)];
    let mut p = pod("p", 4000);
    p.tolerations = vec![Toleration::exists("dedicated", None)];
    let mut inp = input(vec![p], vec![], vec![tainted]);
    inp.daemons = vec![daemon("kube-system/agent", 1000)];
    let r = schedule(&inp);
    assert_eq!(
        types_of(claim_of(&r, "p")),
        ["c3-8", "c3-16"],
        "daemon stays off"
    );

    inp.daemons[0].tolerations = vec![Toleration::everything()];
    let r = schedule(&inp);
    assert_eq!(types_of(claim_of(&r, "p")), ["c3-16"], "daemon lands");
}

#[test]
fn daemon_overhead_is_computed_per_instance_type() {
    // The daemon only runs on arm64 machines, so it only reserves room there.
    let types = vec![
        itype_with("arm-4", 4, "arm64", offerings(Some(0.15))),
        itype_with("amd-4", 4, "amd64", offerings(Some(0.2))),
    ];
    let mut arm_daemon = daemon("kube-system/arm-agent", 1000);
    arm_daemon.required_affinity = vec![reqs([Requirement::in_values(ARCH_LABEL, ["arm64"])])];
    let mut inp = input(
        vec![pod("p", 3500)],
        vec![],
        vec![pool_with("default", Requirements::new(), types)],
    );
    inp.daemons = vec![arm_daemon];
    let r = schedule(&inp);
    let c = claim_of(&r, "p");
    assert_eq!(types_of(c), ["amd-4"]);
    assert!(c.daemon_overhead.is_zero());
    assert_eq!(c.spec.requests.cpu_millis, 3500);

    // A small pod keeps both; the claim carries the smaller overhead.
    inp.pods = vec![pod("p", 1000)];
    let r = schedule(&inp);
    let c = claim_of(&r, "p");
    assert_eq!(types_of(c), ["arm-4", "amd-4"]);
    assert!(c.daemon_overhead.is_zero());
}

#[test]
fn daemon_overhead_appears_in_the_reason() {
    let mut inp = input(vec![pod("p", 9000)], vec![], vec![pool("default")]);
    inp.daemons = vec![daemon("kube-system/agent", 500)];
    let r = schedule(&inp);
    assert_eq!(
        reason_of(&r, "p"),
        "incompatible with nodepool \"default\", daemonset overhead={\"cpu\":\"500m\",\"pods\":\"1\"}, no instance type satisfied resources {\"cpu\":\"9500m\",\"pods\":\"2\"} and requirements karpenter.sh/nodepool In [default], test.joinery.dev/testnodeclass In [default] (no instance type has enough resources)"
    );
}

#[test]
fn daemons_selecting_registered_nodes_count() {
    let mut d = daemon("kube-system/agent", 1000);
    d.node_selector
        .insert(INITIALIZED_LABEL.into(), "true".into());
    let mut inp = input(vec![pod("p", 3500)], vec![], vec![pool("default")]);
    inp.daemons = vec![d];
    let r = schedule(&inp);
    let c = claim_of(&r, "p");
    assert_eq!(types_of(c), ["c3-16"]);
    for key in [HOSTNAME_LABEL, REGISTERED_LABEL, INITIALIZED_LABEL] {
        assert!(!c.spec.requirements.has(key), "{key} is simulation-only");
    }
}

// ---------------------------------------------------------------------------------------------
// minValues and truncation

#[test]
fn min_values_must_hold_after_each_pod() {
    let pool_reqs = reqs([Requirement::exists(INSTANCE_TYPE_LABEL).with_min_values(Some(2))]);
    let p = pool_with("default", pool_reqs, c3());
    let r = run(
        vec![pod("big", 7000), pod("mid", 3000)],
        vec![],
        vec![p.clone()],
    );
    assert!(
        reason_of(&r, "big").ends_with(
            "(minValues requirement is not met for label(s) node.kubernetes.io/instance-type (1 of 2))"
        ),
        "{}",
        reason_of(&r, "big")
    );
    let c = claim_of(&r, "mid");
    assert_eq!(types_of(c), ["c3-8", "c3-16"]);
    assert_eq!(
        c.spec
            .requirements
            .get(INSTANCE_TYPE_LABEL)
            .unwrap()
            .min_values(),
        Some(2)
    );

    // A second pod that would leave a single type opens a new claim instead.
    let r = run(pods("p", 2, 3000), vec![], vec![p]);
    assert_eq!(r.new_claims.len(), 2);
}

fn many_types(n: usize, family: impl Fn(usize) -> String) -> Vec<InstanceType> {
    (0..n)
        .map(|i| {
            let mut t = itype(&format!("t{i:04}"), 4, Some(1000.0 - i as f64));
            let mut requirements = t.requirements().clone();
            requirements.add(Requirement::in_values(FAMILY_LABEL, [family(i)]));
            t = InstanceType::new(
                t.name(),
                requirements,
                t.capacity().clone(),
                Overhead::default(),
                t.offerings().clone(),
            );
            t
        })
        .collect()
}

#[test]
fn claims_list_at_most_600_types_cheapest_first() {
    let p = pool_with(
        "default",
        Requirements::new(),
        many_types(700, |_| "f".into()),
    );
    let r = run(vec![pod("p", 1000)], vec![], vec![p]);
    let c = claim_of(&r, "p");
    assert_eq!(c.spec.instance_types.len(), MAX_INSTANCE_TYPES);
    assert_eq!(c.spec.instance_types[0], "t0699");
    assert_eq!(c.spec.instance_types[599], "t0100");
    let listed = c.spec.requirements.get(INSTANCE_TYPE_LABEL).unwrap();
    assert_eq!(listed.values().len(), MAX_INSTANCE_TYPES);
    assert!(!listed.has("t0000"));
}

#[test]
fn truncation_that_breaks_min_values_drops_the_claim() {
    // The 600 cheapest types (t0100..t0699) share one family; the second family is only among
    // the expensive ones that are cut off.
    let types = many_types(700, |i| if i < 50 { "f2".into() } else { "f1".into() });
    let pool_reqs = reqs([Requirement::exists(FAMILY_LABEL).with_min_values(Some(2))]);
    let mut inp = input(
        vec![pod("p", 1000)],
        vec![],
        vec![pool_with("default", pool_reqs, types)],
    );
    inp.label_policy = LabelPolicy::default().with_well_known(FAMILY_LABEL);
    let r = schedule(&inp);
    assert!(r.new_claims.is_empty());
    assert_eq!(
        reason_of(&r, "p"),
        "pod didn’t schedule because NodePool \"default\" couldn’t meet minValues requirements, minValues requirement is not met for label(s) example.com/family (1 of 2)"
    );
}

fn best_effort(inp: &SchedulingInput) -> SchedulingResult {
    schedule_with_context(
        inp,
        &SchedulingContext {
            min_values_policy: MinValuesPolicy::BestEffort,
            ..Default::default()
        },
        None,
    )
}

#[test]
fn best_effort_lowers_min_values_and_annotates_the_claim() {
    // Strict leaves the 7-CPU pod pending (only c3-16 holds it); BestEffort launches it with
    // minValues lowered to the one type left, and says so.
    let pool_reqs = reqs([Requirement::exists(INSTANCE_TYPE_LABEL).with_min_values(Some(2))]);
    let inp = input(
        vec![pod("big", 7000)],
        vec![],
        vec![pool_with("default", pool_reqs, c3())],
    );
    assert!(schedule(&inp).new_claims.is_empty());
    let r = best_effort(&inp);
    let c = claim_of(&r, "big");
    assert_eq!(types_of(c), ["c3-16"]);
    assert_eq!(
        c.spec
            .requirements
            .get(INSTANCE_TYPE_LABEL)
            .unwrap()
            .min_values(),
        Some(1)
    );
    assert_eq!(
        c.spec
            .annotations
            .get(NODECLAIM_MIN_VALUES_RELAXED_ANNOTATION)
            .map(String::as_str),
        Some("true")
    );
}

#[test]
fn best_effort_keeps_min_values_that_hold_and_says_false() {
    let pool_reqs = reqs([Requirement::exists(INSTANCE_TYPE_LABEL).with_min_values(Some(2))]);
    let inp = input(
        vec![pod("mid", 3000)],
        vec![],
        vec![pool_with("default", pool_reqs, c3())],
    );
    let r = best_effort(&inp);
    let c = claim_of(&r, "mid");
    assert_eq!(types_of(c), ["c3-8", "c3-16"]);
    assert_eq!(
        c.spec
            .requirements
            .get(INSTANCE_TYPE_LABEL)
            .unwrap()
            .min_values(),
        Some(2)
    );
    assert_eq!(
        c.spec
            .annotations
            .get(NODECLAIM_MIN_VALUES_RELAXED_ANNOTATION)
            .map(String::as_str),
        Some("false")
    );
    // Strict adds no annotation at all.
    let strict = schedule(&inp);
    assert!(
        !claim_of(&strict, "mid")
            .spec
            .annotations
            .contains_key(NODECLAIM_MIN_VALUES_RELAXED_ANNOTATION)
    );
}

#[test]
fn best_effort_keeps_a_claim_that_truncation_would_drop() {
    let types = many_types(700, |i| if i < 50 { "f2".into() } else { "f1".into() });
    let pool_reqs = reqs([Requirement::exists(FAMILY_LABEL).with_min_values(Some(2))]);
    let mut inp = input(
        vec![pod("p", 1000)],
        vec![],
        vec![pool_with("default", pool_reqs, types)],
    );
    inp.label_policy = LabelPolicy::default().with_well_known(FAMILY_LABEL);
    let r = best_effort(&inp);
    let c = claim_of(&r, "p");
    assert_eq!(c.spec.instance_types.len(), MAX_INSTANCE_TYPES);
    assert_eq!(
        c.spec.requirements.get(FAMILY_LABEL).unwrap().min_values(),
        Some(1)
    );
    assert_eq!(
        c.spec
            .annotations
            .get(NODECLAIM_MIN_VALUES_RELAXED_ANNOTATION)
            .map(String::as_str),
        Some("true")
    );
}

#[test]
fn best_effort_does_not_skip_a_pool_whose_types_cannot_meet_min_values() {
    // Three c3 types cannot offer 5 instance types: Strict skips the pool, BestEffort uses it.
    let pool_reqs = reqs([Requirement::exists(INSTANCE_TYPE_LABEL).with_min_values(Some(5))]);
    let inp = input(
        vec![pod("p", 1000)],
        vec![],
        vec![pool_with("default", pool_reqs, c3())],
    );
    let strict = schedule(&inp);
    assert_eq!(strict.nodepools_without_instance_types, ["default"]);
    let r = best_effort(&inp);
    assert_eq!(types_of(claim_of(&r, "p")), ["c3-4", "c3-8", "c3-16"]);
    assert_eq!(
        claim_of(&r, "p")
            .spec
            .requirements
            .get(INSTANCE_TYPE_LABEL)
            .unwrap()
            .min_values(),
        Some(3)
    );
}

// ---------------------------------------------------------------------------------------------
// NodeOverlays

#[test]
fn a_price_overlay_reorders_the_options_and_marks_the_claim() {
    use crate::overlay::{Overlay, PriceChange, apply_overlays};
    // c3-16 becomes the cheapest type for pods in pool "default": a 1-CPU pod's claim lists it
    // first and says an overlay set the price.
    let overlay = Overlay {
        name: "c3-16-deal".into(),
        weight: 1,
        requirements: reqs([
            Requirement::in_values(INSTANCE_TYPE_LABEL, ["c3-16"]),
            Requirement::in_values(NODEPOOL_LABEL, ["default"]),
        ]),
        price: Some(PriceChange::Set(0.01)),
        capacity: Resources::new(),
    };
    let mut p = pool("default");
    p.instance_types = apply_overlays(&p.instance_types, &p.template.requirements, &[overlay]);
    let r = run(vec![pod("p", 1000)], vec![], vec![p]);
    let c = claim_of(&r, "p");
    assert_eq!(types_of(c), ["c3-16", "c3-4", "c3-8"]);
    assert_eq!(c.launch_price, Some(0.01));
    assert_eq!(
        c.spec
            .annotations
            .get(PRICE_OVERLAY_APPLIED_ANNOTATION)
            .map(String::as_str),
        Some("true")
    );
    assert!(
        !c.spec
            .annotations
            .contains_key(CAPACITY_OVERLAY_APPLIED_ANNOTATION)
    );
}

#[test]
fn a_capacity_overlay_lets_extended_resource_pods_schedule() {
    use crate::overlay::{Overlay, apply_overlays};
    let mut gpu_pod = pod("trainer", 1000);
    gpu_pod.requests = gpu_pod.requests.clone().with("example.com/fpga", 1);
    let p = pool("default");
    let r = run(vec![gpu_pod.clone()], vec![], vec![p.clone()]);
    assert!(r.new_claims.is_empty(), "no type offers the resource");
    let overlay = Overlay {
        name: "fpga".into(),
        weight: 1,
        requirements: reqs([Requirement::in_values(INSTANCE_TYPE_LABEL, ["c3-8"])]),
        price: None,
        capacity: Resources::new().with("example.com/fpga", 2),
    };
    let mut overlaid = p;
    overlaid.instance_types = apply_overlays(
        &overlaid.instance_types,
        &overlaid.template.requirements,
        &[overlay],
    );
    let r = run(vec![gpu_pod], vec![], vec![overlaid]);
    let c = claim_of(&r, "trainer");
    assert_eq!(types_of(c), ["c3-8"]);
    assert_eq!(
        c.spec
            .annotations
            .get(CAPACITY_OVERLAY_APPLIED_ANNOTATION)
            .map(String::as_str),
        Some("true")
    );
}

// ---------------------------------------------------------------------------------------------
// pools without candidates, failure wording

#[test]
fn pools_without_compatible_types_are_skipped() {
    let arm = pool_with(
        "arm",
        reqs([Requirement::in_values(ARCH_LABEL, ["arm64"])]),
        c3(),
    );
    let r = run(
        vec![pod("p", 1000)],
        vec![],
        vec![arm.clone(), pool("default")],
    );
    assert_eq!(r.nodepools_without_instance_types, ["arm"]);
    assert_eq!(claim_of(&r, "p").spec.nodepool, "default");

    let r = run(vec![pod("p", 1000)], vec![], vec![arm]);
    assert_eq!(
        reason_of(&r, "p"),
        "skipped nodepool \"arm\", nodepool requirements filtered out all instance types"
    );
}

#[test]
fn without_nodepools_only_existing_nodes_are_used() {
    let r = run(
        vec![pod("fits", 1000), pod("too-big", 9000)],
        vec![node("n1", &[], 2000)],
        vec![],
    );
    assert_eq!(node_of(&r, "fits"), "n1");
    assert_eq!(reason_of(&r, "too-big"), "no dynamic nodepools found");
}

#[test]
fn oversized_requests_name_the_cause() {
    let r = run(vec![pod("p", 64_000)], vec![], vec![pool("default")]);
    assert!(reason_of(&r, "p").ends_with("(no instance type has enough resources)"));

    // 2M cores instead of 2m: the typo hint.
    let r = run(vec![pod("p", 2_000_000_000)], vec![], vec![pool("default")]);
    assert!(reason_of(&r, "p").ends_with(
        "(no instance type has enough resources (CPU request >= 1 Million, m vs M typo?))"
    ));
}

#[test]
fn failing_pods_do_not_block_others() {
    let mut all = vec![pod("huge", 100_000)];
    all.extend(pods("p", 3, 1000));
    let r = run(all, vec![], vec![pool("default")]);
    assert_eq!(r.unschedulable().len(), 1);
    assert_eq!(r.unschedulable()[0].0.name, "huge");
    assert_eq!(r.new_claims.len(), 1);
    assert_eq!(r.new_claims[0].pods.len(), 3);
}

#[test]
fn claim_spec_carries_pool_metadata_and_labels() {
    let mut p = pool_with(
        "default",
        reqs([Requirement::in_values("tier", ["gold", "silver"])]),
        c3(),
    );
    p.template = NodeClaimTemplate::new(
        "default",
        class(),
        &reqs([Requirement::in_values("tier", ["gold", "silver"])]),
        BTreeMap::from([("team".to_owned(), "red".to_owned())]),
    );
    p.template
        .annotations
        .insert("example.com/owner".into(), "platform".into());
    let r = run(
        vec![with_selector(pod("p", 1000), "tier", "gold")],
        vec![],
        vec![p],
    );
    let c = claim_of(&r, "p");
    assert_eq!(c.spec.nodepool, "default");
    assert_eq!(c.spec.node_class_ref, class());
    let labels: Vec<(&str, &str)> = c
        .spec
        .labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        labels,
        [
            ("karpenter.sh/nodepool", "default"),
            ("team", "red"),
            ("test.joinery.dev/testnodeclass", "default"),
            ("tier", "gold"),
        ]
    );
    assert_eq!(
        c.spec
            .annotations
            .get("example.com/owner")
            .map(String::as_str),
        Some("platform")
    );
    assert_eq!(c.pods, vec![PodKey::new("default", "p")]);
}

// ---------------------------------------------------------------------------------------------
// determinism

/// A small deterministic shuffle (linear congruential generator).
fn shuffled<T: Clone>(items: &[T], seed: u64) -> Vec<T> {
    let mut out = items.to_vec();
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    for i in (1..out.len()).rev() {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let j = (state >> 33) as usize % (i + 1);
        out.swap(i, j);
    }
    out
}

fn scenario() -> SchedulingInput {
    let mut all = Vec::new();
    for (i, millis) in [
        250, 500, 1000, 1500, 3000, 500, 250, 7000, 1000, 2000, 500, 4000,
    ]
    .into_iter()
    .enumerate()
    {
        let mut p = pod(&format!("p{i:02}"), millis);
        p.created = (i % 4) as i64; // ties on creation time, broken by UID
        if i % 3 == 0 {
            p = with_selector(p, ZONE_LABEL, if i % 2 == 0 { "a" } else { "b" });
        }
        if i % 5 == 0 {
            p.tolerations = vec![Toleration::exists("dedicated", None)];
        }
        all.push(p);
    }
    let mut tainted = weighted("tainted", 10);
    tainted.template.taints = vec![Taint::without_value("dedicated", TaintEffect::NoSchedule)];
    let mut limited = weighted("limited", 10);
    limited.limits =
        Some(NodePoolLimits::from_quantities([("cpu", "16")], Resources::new()).unwrap());
    let mut unpriced = pool_with(
        "unpriced",
        Requirements::new(),
        vec![
            itype("u-8", 8, None),
            itype("u-2", 2, None),
            itype("u-4", 4, None),
        ],
    );
    unpriced.template.weight = 1;
    let mut inp = input(
        all,
        vec![
            node("n2", &[(ZONE_LABEL, "a")], 1500),
            node("n1", &[(ZONE_LABEL, "b")], 1000),
        ],
        vec![tainted, limited, unpriced],
    );
    inp.daemons = vec![daemon("kube-system/agent", 100)];
    inp
}

fn by_key(r: &SchedulingResult) -> BTreeMap<PodKey, Placement> {
    r.placements
        .iter()
        .map(|p| (p.key.clone(), p.placement.clone()))
        .collect()
}

#[test]
fn shuffled_input_gives_the_same_result() {
    let base = scenario();
    let expected = schedule(&base);
    assert!(!expected.new_claims.is_empty());
    for seed in 1..=8u64 {
        let mut inp = base.clone();
        inp.pods = shuffled(&base.pods, seed);
        inp.nodes = shuffled(&base.nodes, seed + 100);
        inp.nodepools = shuffled(&base.nodepools, seed + 200);
        for pool in &mut inp.nodepools {
            pool.instance_types = shuffled(&pool.instance_types, seed + 300);
        }
        let got = schedule(&inp);
        assert_eq!(got.new_claims, expected.new_claims, "seed {seed}");
        assert_eq!(by_key(&got), by_key(&expected), "seed {seed}");
    }
    // And running twice on the same input is identical, placements in input order.
    assert_eq!(schedule(&base), expected);
}

#[test]
fn summed_fit_matches_fits_on_the_sum() {
    let gpu = |n| Resources::new().with("nvidia.com/gpu", n);
    let slots = |n| Resources::new().with("pods", n);
    let cases = [
        (cpu(1000), cpu(1000), cpu(2000), true),
        (cpu(1000), cpu(1001), cpu(2000), false),
        (gpu(1), Resources::new(), cpu(1000), false),
        (gpu(1), gpu(1), gpu(2), true),
        (gpu(1), gpu(2), gpu(2), false),
        (gpu(0), cpu(1), cpu(1), true),
        (slots(2), slots(1), slots(2), false),
    ];
    for (a, b, available, expected) in cases {
        assert_eq!(
            (&a + &b).fits(&available),
            expected,
            "{a} + {b} in {available}"
        );
        assert_eq!(
            super::scheduler::fits_sum(&[&a, &b], &available),
            expected,
            "{a} + {b} in {available}"
        );
    }
}

// =============================================================================================
// Inter-pod constraints: fixtures

/// On-demand and spot (70%) offerings in zones a, b and c.
fn offerings3(price: Option<f64>) -> Vec<Offering> {
    let spot = price.map(|p| p * 0.7);
    ["a", "b", "c"]
        .into_iter()
        .flat_map(|z| {
            [
                Offering::new(z, "on-demand", price, true),
                Offering::new(z, "spot", spot, true),
            ]
        })
        .collect()
}

/// The c3 family offered in three zones.
fn c3z() -> Vec<InstanceType> {
    vec![
        itype_with("c3-4", 2, "amd64", offerings3(Some(0.1))),
        itype_with("c3-8", 4, "amd64", offerings3(Some(0.2))),
        itype_with("c3-16", 8, "amd64", offerings3(Some(0.4))),
    ]
}

/// A pool without requirements over the three-zone c3 family.
fn zonal(name: &str) -> NodePool {
    pool_with(name, Requirements::new(), c3z())
}

/// A three-zone pool restricted to `zones`.
fn zonal_in(name: &str, zones: &[&str]) -> NodePool {
    pool_with(
        name,
        reqs([Requirement::in_values(ZONE_LABEL, zones.iter().copied())]),
        c3z(),
    )
}

fn sel(pairs: &[(&str, &str)]) -> LabelSelector {
    LabelSelector::from_labels(pairs.iter().copied())
}

fn labelled(mut p: PendingPod, pairs: &[(&str, &str)]) -> PendingPod {
    for (k, v) in pairs {
        p.labels.insert((*k).into(), (*v).into());
    }
    p
}

/// A required spread over `key` counting pods with `app=<app>`.
fn spread(key: &str, max_skew: u32, app: &str) -> TopologySpreadConstraint {
    TopologySpreadConstraint::new(key, max_skew, sel(&[("app", app)]))
}

/// `n` pods labelled `app=<prefix>` spreading themselves over `key`.
fn spread_pods(
    prefix: &str,
    n: usize,
    cpu_millis: u64,
    key: &str,
    max_skew: u32,
) -> Vec<PendingPod> {
    pods(prefix, n, cpu_millis)
        .into_iter()
        .map(|p| {
            let mut p = labelled(p, &[("app", prefix)]);
            p.topology_spread = vec![spread(key, max_skew, prefix)];
            p
        })
        .collect()
}

/// A term over `key` selecting `app=<app>`.
fn term(key: &str, app: &str) -> PodAffinityTerm {
    PodAffinityTerm::new(key, sel(&[("app", app)]))
}

/// A node with zone and hostname labels and `cpu_millis` of room for up to 110 pods.
fn zone_node(name: &str, zone: &str, cpu_millis: u64) -> ExistingNode {
    node(
        name,
        &[(ZONE_LABEL, zone), (HOSTNAME_LABEL, name)],
        cpu_millis,
    )
}

/// A full node (no room), still counting for topology.
fn full_node(name: &str, zone: &str) -> ExistingNode {
    let mut n = zone_node(name, zone, 0);
    n.schedulable = false;
    n
}

fn bound(name: &str, node: &str, app: &str) -> BoundPod {
    BoundPod {
        key: PodKey::new("default", name),
        node: node.into(),
        labels: Arc::new(BTreeMap::from([("app".to_owned(), app.to_owned())])),
        ..Default::default()
    }
}

fn with_context(inp: &SchedulingInput, bound_pods: Vec<BoundPod>) -> SchedulingResult {
    schedule_with_context(
        inp,
        &SchedulingContext {
            bound_pods,
            ..Default::default()
        },
        None,
    )
}

fn ignoring_preferences(inp: &SchedulingInput) -> SchedulingResult {
    schedule_with_context(
        inp,
        &SchedulingContext {
            preference_policy: PreferencePolicy::Ignore,
            ..Default::default()
        },
        None,
    )
}

fn zone_of(c: &NewNodeClaim) -> Vec<String> {
    values(&c.spec.requirements, ZONE_LABEL)
}

/// The single zone of each new claim, in claim order.
fn claim_zones(r: &SchedulingResult) -> Vec<String> {
    r.new_claims
        .iter()
        .map(|c| {
            let z = zone_of(c);
            assert_eq!(z.len(), 1, "claim zone not narrowed: {z:?}");
            z[0].clone()
        })
        .collect()
}

fn pod_counts(r: &SchedulingResult) -> Vec<usize> {
    r.new_claims.iter().map(|c| c.pods.len()).collect()
}

fn all_placed(r: &SchedulingResult) {
    assert!(r.unschedulable().is_empty(), "{:?}", r.unschedulable());
}

// ---------------------------------------------------------------------------------------------
// topology spread

#[test]
fn zonal_spread_puts_one_pod_per_zone() {
    let r = run(
        spread_pods("web", 3, 1000, ZONE_LABEL, 1),
        vec![],
        vec![zonal("default")],
    );
    all_placed(&r);
    assert_eq!(claim_zones(&r), ["a", "b", "c"]);
    assert_eq!(pod_counts(&r), [1, 1, 1]);
}

#[test]
fn zonal_spread_fills_zones_evenly() {
    let r = run(
        spread_pods("web", 6, 1000, ZONE_LABEL, 1),
        vec![],
        vec![zonal("default")],
    );
    all_placed(&r);
    assert_eq!(claim_zones(&r), ["a", "b", "c"]);
    assert_eq!(pod_counts(&r), [2, 2, 2]);
}

#[test]
fn zonal_spread_with_a_larger_skew_packs_more() {
    let r = run(
        spread_pods("web", 3, 1000, ZONE_LABEL, 2),
        vec![],
        vec![zonal("default")],
    );
    all_placed(&r);
    assert_eq!(claim_zones(&r), ["a", "b"]);
    assert_eq!(pod_counts(&r), [2, 1]);
}

#[test]
fn zonal_spread_counts_pods_already_bound() {
    // Zone a holds two matching pods and zone b one: the first pod goes to c, the second can
    // join it (skew 1 against b), the third opens b.
    let inp = input(
        spread_pods("web", 3, 1000, ZONE_LABEL, 1),
        vec![full_node("n-a", "a"), full_node("n-b", "b")],
        vec![zonal("default")],
    );
    let r = with_context(
        &inp,
        vec![
            bound("w1", "n-a", "web"),
            bound("w2", "n-a", "web"),
            bound("w3", "n-b", "web"),
        ],
    );
    all_placed(&r);
    assert_eq!(claim_zones(&r), ["c", "b"]);
    assert_eq!(pod_counts(&r), [2, 1]);
}

#[test]
fn zonal_spread_ignores_pods_other_selectors_do_not_match() {
    let inp = input(
        spread_pods("web", 3, 1000, ZONE_LABEL, 1),
        vec![full_node("n-a", "a")],
        vec![zonal("default")],
    );
    let r = with_context(
        &inp,
        vec![bound("d1", "n-a", "db"), bound("d2", "n-a", "db")],
    );
    assert_eq!(claim_zones(&r), ["a", "b", "c"]);
}

#[test]
fn spread_only_counts_the_pods_own_namespace() {
    let inp = input(
        spread_pods("web", 1, 1000, ZONE_LABEL, 1),
        vec![full_node("n-a", "a")],
        vec![zonal("default")],
    );
    let mut other = bound("w1", "n-a", "web");
    other.key.namespace = "other".into();
    let r = with_context(&inp, vec![other]);
    assert_eq!(claim_zones(&r), ["a"]);
}

#[test]
fn bound_pods_of_unknown_nodes_and_pending_pods_do_not_count() {
    let pending = spread_pods("web", 1, 1000, ZONE_LABEL, 1);
    let inp = input(
        pending.clone(),
        vec![full_node("n-a", "a")],
        vec![zonal("default")],
    );
    // On a node the input does not know, or the pending pod itself (being rescheduled).
    let ghost = bound("w1", "ghost", "web");
    let mut itself = bound("web-0", "n-a", "web");
    itself.key = pending[0].key.clone();
    let r = with_context(&inp, vec![ghost, itself]);
    assert_eq!(claim_zones(&r), ["a"]);
}

#[test]
fn terminating_bound_pods_do_not_count_for_spread() {
    let inp = input(
        spread_pods("web", 1, 1000, ZONE_LABEL, 1),
        vec![full_node("n-a", "a"), full_node("n-b", "b")],
        vec![zonal("default")],
    );
    // Zone b holds one live pod; zone a one that is being deleted, so a is the emptiest.
    let mut leaving = bound("w1", "n-a", "web");
    leaving.terminating = true;
    let r = with_context(&inp, vec![leaving.clone(), bound("w2", "n-b", "web")]);
    assert_eq!(claim_zones(&r), ["a"]);
    // Counted, it would send the pod to c.
    leaving.terminating = false;
    let r = with_context(&inp, vec![leaving, bound("w2", "n-b", "web")]);
    assert_eq!(claim_zones(&r), ["c"]);
}

#[test]
fn spread_domains_follow_the_pods_node_selector() {
    let mut all = spread_pods("web", 4, 1000, ZONE_LABEL, 1);
    for p in &mut all {
        p.required_affinity = vec![reqs([Requirement::in_values(ZONE_LABEL, ["a", "b"])])];
    }
    let r = run(all, vec![], vec![zonal("default")]);
    all_placed(&r);
    // Zone c is not a domain the pods may use, so its zero count does not hold them back.
    assert_eq!(claim_zones(&r), ["a", "b"]);
    assert_eq!(pod_counts(&r), [2, 2]);
}

#[test]
fn spread_domains_follow_the_nodepool() {
    let r = run(
        spread_pods("web", 4, 1000, ZONE_LABEL, 1),
        vec![],
        vec![zonal_in("default", &["a", "b"])],
    );
    all_placed(&r);
    assert_eq!(claim_zones(&r), ["a", "b"]);
    assert_eq!(pod_counts(&r), [2, 2]);
}

#[test]
fn an_existing_node_in_another_zone_is_a_domain_too() {
    // The pool launches in a and b only, but a node in c exists: with c at zero, a third pod
    // would exceed the skew anywhere the pool can launch.
    let inp = input(
        spread_pods("web", 3, 1000, ZONE_LABEL, 1),
        vec![full_node("n-c", "c")],
        vec![zonal_in("default", &["a", "b"])],
    );
    let r = schedule(&inp);
    assert_eq!(claim_zones(&r), ["a", "b"]);
    assert_eq!(
        reason_of(&r, "web-2"),
        "incompatible with nodepool \"default\", daemonset overhead={}, unsatisfiable topology constraint for topology spread, key=topology.kubernetes.io/zone (counts = a: 1, b: 1, c: 0, podDomains = topology.kubernetes.io/zone Exists, nodeDomains = topology.kubernetes.io/zone In [a b]"
    );
}

#[test]
fn min_domains_keeps_the_global_minimum_at_zero() {
    let mut all = spread_pods("web", 3, 1000, ZONE_LABEL, 1);
    for p in &mut all {
        p.topology_spread[0].min_domains = Some(3);
    }
    let r = run(all.clone(), vec![], vec![zonal_in("default", &["a", "b"])]);
    assert_eq!(claim_zones(&r), ["a", "b"]);
    assert!(
        reason_of(&r, "web-2").contains("unsatisfiable topology constraint for topology spread")
    );

    // Two domains satisfy minDomains 2: the third pod joins zone a.
    for p in &mut all {
        p.topology_spread[0].min_domains = Some(2);
    }
    let r = run(all, vec![], vec![zonal_in("default", &["a", "b"])]);
    all_placed(&r);
    assert_eq!(pod_counts(&r), [2, 1]);
}

#[test]
fn node_taints_policy_honor_skips_domains_of_untolerated_pools() {
    let mut open = zonal_in("open", &["a", "b"]);
    open.template.weight = 10;
    let mut tainted = zonal_in("tainted", &["c"]);
    tainted.template.taints = vec![Taint::without_value("dedicated", TaintEffect::NoSchedule)];
    let pools = vec![open, tainted];

    // Ignore (the default): zone c counts with zero pods, so the third pod cannot go anywhere.
    let r = run(
        spread_pods("web", 3, 1000, ZONE_LABEL, 1),
        vec![],
        pools.clone(),
    );
    assert_eq!(r.unschedulable().len(), 1);

    let mut honoring = spread_pods("web", 3, 1000, ZONE_LABEL, 1);
    for p in &mut honoring {
        p.topology_spread[0].node_taints_policy = Some(NodeInclusionPolicy::Honor);
    }
    let r = run(honoring, vec![], pools);
    all_placed(&r);
    assert_eq!(claim_zones(&r), ["a", "b"]);
    assert_eq!(pod_counts(&r), [2, 1]);
}

#[test]
fn node_affinity_policy_decides_which_nodes_count() {
    let mut on_demand = full_node("n-a", "a");
    on_demand
        .requirements
        .add(Requirement::in_values(CAPACITY_TYPE_LABEL, ["on-demand"]));
    let make = |policy: Option<NodeInclusionPolicy>| {
        let mut all = spread_pods("web", 2, 1000, ZONE_LABEL, 1);
        for p in &mut all {
            p.node_selector
                .insert(CAPACITY_TYPE_LABEL.into(), "spot".into());
            p.topology_spread[0].node_affinity_policy = policy;
        }
        input(all, vec![on_demand.clone()], vec![zonal("default")])
    };
    let bound_pods = || vec![bound("w1", "n-a", "web"), bound("w2", "n-a", "web")];

    // Honor (default): the on-demand node does not match the pods, its pods do not count.
    let r = with_context(&make(None), bound_pods());
    assert_eq!(claim_zones(&r), ["a", "b"]);

    // Ignore: zone a holds two matching pods.
    let r = with_context(&make(Some(NodeInclusionPolicy::Ignore)), bound_pods());
    assert_eq!(claim_zones(&r), ["b", "c"]);
}

#[test]
fn match_label_keys_narrow_the_selector_to_the_pods_revision() {
    let make = |hash: &str| {
        let mut p = labelled(
            pod("web", 1000),
            &[("app", "web"), ("pod-template-hash", hash)],
        );
        let mut c = spread(ZONE_LABEL, 1, "web");
        c.match_label_keys = vec!["pod-template-hash".into()];
        p.topology_spread = vec![c];
        input(vec![p], vec![full_node("n-a", "a")], vec![zonal("default")])
    };
    let old_revision = || {
        (0..2)
            .map(|i| {
                let mut b = bound(&format!("old-{i}"), "n-a", "web");
                Arc::make_mut(&mut b.labels).insert("pod-template-hash".into(), "v1".into());
                b
            })
            .collect::<Vec<_>>()
    };
    // A new revision does not count the old one's pods.
    let r = with_context(&make("v2"), old_revision());
    assert_eq!(claim_zones(&r), ["a"]);
    // The same revision does.
    let r = with_context(&make("v1"), old_revision());
    assert_eq!(claim_zones(&r), ["b"]);
}

#[test]
fn two_revisions_in_one_pass_count_apart() {
    // The same constraint stated by pods of two revisions is two groups, however the pass
    // finds a pod's group: the old revision's pod counts its own revision's pods only.
    let revision = |name: &str, hash: &str, cpu| {
        let mut p = labelled(
            pod(name, cpu),
            &[("app", "web"), ("pod-template-hash", hash)],
        );
        let mut c = spread(ZONE_LABEL, 1, "web");
        c.match_label_keys = vec!["pod-template-hash".into()];
        p.topology_spread = vec![c];
        p
    };
    // The new revision's pod goes first (larger); nothing of its revision runs yet.
    let pods = vec![
        revision("web-new", "v2", 2000),
        revision("web-old", "v1", 1000),
    ];
    let old_revision = (0..2)
        .map(|i| {
            let mut b = bound(&format!("old-{i}"), "n-a", "web");
            Arc::make_mut(&mut b.labels).insert("pod-template-hash".into(), "v1".into());
            b
        })
        .collect::<Vec<_>>();
    let r = with_context(
        &input(pods, vec![full_node("n-a", "a")], vec![zonal("default")]),
        old_revision,
    );
    // Zone a holds two of the old revision's pods: its new pod goes elsewhere. Counting
    // only the new revision's pod, it would have joined that pod's claim in zone a.
    assert_eq!(claim_zones(&r), ["a", "b"]);
}

#[test]
fn hostname_spread_puts_one_pod_per_node() {
    let r = run(
        spread_pods("web", 3, 500, HOSTNAME_LABEL, 1),
        vec![],
        vec![zonal("default")],
    );
    all_placed(&r);
    assert_eq!(pod_counts(&r), [1, 1, 1]);
}

#[test]
fn hostname_spread_with_skew_two_pairs_pods() {
    let r = run(
        spread_pods("web", 4, 500, HOSTNAME_LABEL, 2),
        vec![],
        vec![zonal("default")],
    );
    all_placed(&r);
    assert_eq!(pod_counts(&r), [2, 2]);
}

#[test]
fn hostname_spread_counts_pods_bound_on_existing_nodes() {
    let inp = input(
        spread_pods("web", 1, 500, HOSTNAME_LABEL, 1),
        vec![zone_node("n1", "a", 8000)],
        vec![zonal("default")],
    );
    let r = with_context(&inp, vec![bound("w1", "n1", "web")]);
    assert!(r.pods_on_node("n1").is_empty());
    claim_of(&r, "web-0");

    let mut relaxed = inp.clone();
    relaxed.pods[0].topology_spread[0].max_skew = 2;
    let r = with_context(&relaxed, vec![bound("w1", "n1", "web")]);
    assert_eq!(node_of(&r, "web-0"), "n1");
}

#[test]
fn hostname_of_a_node_without_the_label_is_its_name() {
    // n1 has no hostname label: bound pods still count on it, by name.
    let inp = input(
        spread_pods("web", 1, 500, HOSTNAME_LABEL, 1),
        vec![node("n1", &[(ZONE_LABEL, "a")], 8000)],
        vec![zonal("default")],
    );
    let r = with_context(&inp, vec![bound("w1", "n1", "web")]);
    claim_of(&r, "web-0");
    let r = with_context(&inp, vec![]);
    assert_eq!(node_of(&r, "web-0"), "n1");
}

#[test]
fn spread_pods_that_do_not_match_their_own_selector() {
    // The pods are not `app=web`, so they do not add to the count they are bound by.
    let all: Vec<PendingPod> = pods("other", 2, 1000)
        .into_iter()
        .map(|p| {
            let mut p = labelled(p, &[("app", "other")]);
            p.topology_spread = vec![spread(ZONE_LABEL, 1, "web")];
            p
        })
        .collect();
    let inp = input(all, vec![full_node("n-a", "a")], vec![zonal("default")]);
    let r = with_context(
        &inp,
        vec![bound("w1", "n-a", "web"), bound("w2", "n-a", "web")],
    );
    all_placed(&r);
    assert_eq!(claim_zones(&r), ["b"]);
    assert_eq!(pod_counts(&r), [2]);
}

#[test]
fn spread_without_a_selector_counts_nothing_but_still_picks_a_domain() {
    // No pod is ever counted, so the skew never grows; upstream still narrows the claim to
    // the least loaded (here: first) domain.
    let mut all = spread_pods("web", 3, 1000, ZONE_LABEL, 1);
    for p in &mut all {
        p.topology_spread[0].label_selector = None;
    }
    let r = run(all, vec![], vec![zonal("default")]);
    assert_eq!(pod_counts(&r), [3]);
    assert_eq!(claim_zones(&r), ["a"]);
}

#[test]
fn capacity_type_spread_uses_both_capacity_types() {
    let r = run(
        spread_pods("web", 2, 1000, CAPACITY_TYPE_LABEL, 1),
        vec![],
        vec![zonal("default")],
    );
    all_placed(&r);
    let cts: Vec<Vec<String>> = r
        .new_claims
        .iter()
        .map(|c| values(&c.spec.requirements, CAPACITY_TYPE_LABEL))
        .collect();
    assert_eq!(cts, [vec!["on-demand".to_owned()], vec!["spot".to_owned()]]);
    assert_eq!(r.new_claims[0].launch_price, Some(0.1));
    assert_eq!(r.new_claims[1].launch_price, Some(0.1 * 0.7));
}

#[test]
fn spread_over_a_custom_label_declared_by_the_pool() {
    let p = pool_with(
        "default",
        reqs([Requirement::in_values("example.com/rack", ["r1", "r2"])]),
        c3z(),
    );
    let r = run(
        spread_pods("web", 2, 1000, "example.com/rack", 1),
        vec![],
        vec![p],
    );
    all_placed(&r);
    let racks: Vec<&str> = r
        .new_claims
        .iter()
        .map(|c| c.spec.labels["example.com/rack"].as_str())
        .collect();
    assert_eq!(racks, ["r1", "r2"]);
}

#[test]
fn spread_over_an_undeclared_label_has_no_domains() {
    let r = run(
        spread_pods("web", 1, 1000, "example.com/rack", 1),
        vec![],
        vec![zonal("default")],
    );
    assert!(
        reason_of(&r, "web-0").contains(
            "unsatisfiable topology constraint for topology spread, key=example.com/rack (counts = , podDomains = example.com/rack Exists, nodeDomains = example.com/rack Exists"
        ),
        "{}",
        reason_of(&r, "web-0")
    );
}

#[test]
fn spread_counts_pods_placed_on_existing_nodes_in_the_same_pass() {
    let r = run(
        spread_pods("web", 2, 1000, ZONE_LABEL, 1),
        vec![zone_node("n-a", "a", 8000)],
        vec![zonal("default")],
    );
    all_placed(&r);
    assert_eq!(node_of(&r, "web-0"), "n-a");
    assert_eq!(zone_of(claim_of(&r, "web-1")), ["b"]);
}

#[test]
fn spread_narrows_the_claims_instance_types_to_the_zone() {
    let mut types = c3z();
    types[0] = itype_with(
        "c3-4",
        2,
        "amd64",
        vec![Offering::new("a", "on-demand", Some(0.1), true)],
    );
    let r = run(
        spread_pods("web", 2, 1000, ZONE_LABEL, 1),
        vec![],
        vec![pool_with("default", Requirements::new(), types)],
    );
    assert_eq!(claim_zones(&r), ["a", "b"]);
    assert_eq!(types_of(&r.new_claims[0]), ["c3-4", "c3-8", "c3-16"]);
    assert_eq!(types_of(&r.new_claims[1]), ["c3-8", "c3-16"]);
}

#[test]
fn spread_across_nodepools_in_different_zones() {
    let mut pa = zonal_in("pa", &["a"]);
    pa.template.weight = 10;
    let pb = zonal_in("pb", &["b"]);
    let r = run(
        spread_pods("web", 2, 1000, ZONE_LABEL, 1),
        vec![],
        vec![pa, pb],
    );
    all_placed(&r);
    let pools: Vec<&str> = r
        .new_claims
        .iter()
        .map(|c| c.spec.nodepool.as_str())
        .collect();
    assert_eq!(pools, ["pa", "pb"]);
    assert_eq!(claim_zones(&r), ["a", "b"]);
}

#[test]
fn spread_narrows_an_in_flight_claim() {
    let in_flight = ExistingNode {
        name: "default-abc12".into(),
        nodepool: Some("default".into()),
        requirements: reqs([Requirement::in_values(ZONE_LABEL, ["a", "b"])]),
        allocatable: cpu(8000).with("pods", 110),
        in_flight: true,
        schedulable: true,
        ..Default::default()
    };
    let r = run(
        spread_pods("web", 2, 1000, ZONE_LABEL, 1),
        vec![in_flight],
        vec![zonal("default")],
    );
    all_placed(&r);
    // The first pod narrows the in-flight node to zone a; the second needs another zone.
    assert_eq!(node_of(&r, "web-0"), "default-abc12");
    assert_eq!(zone_of(claim_of(&r, "web-1")), ["b"]);
}

#[test]
fn two_spread_constraints_must_both_hold() {
    let mut all = spread_pods("web", 4, 500, ZONE_LABEL, 1);
    for p in &mut all {
        p.topology_spread.push(spread(HOSTNAME_LABEL, 1, "web"));
    }
    let r = run(all, vec![], vec![zonal("default")]);
    all_placed(&r);
    assert_eq!(claim_zones(&r), ["a", "b", "c", "a"]);
    assert_eq!(pod_counts(&r), [1, 1, 1, 1]);
}

#[test]
fn schedule_anyway_spread_is_kept_while_it_can_be() {
    let mut all = spread_pods("web", 3, 1000, ZONE_LABEL, 1);
    for p in &mut all {
        p.topology_spread[0] = p.topology_spread[0].clone().schedule_anyway();
    }
    let r = run(all, vec![], vec![zonal("default")]);
    assert_eq!(claim_zones(&r), ["a", "b", "c"]);
}

#[test]
fn schedule_anyway_spread_is_relaxed_when_it_cannot_hold() {
    let mut all = spread_pods("web", 3, 1000, ZONE_LABEL, 1);
    for p in &mut all {
        p.topology_spread[0] = p.topology_spread[0].clone().schedule_anyway();
    }
    let inp = input(
        all,
        vec![full_node("n-c", "c")],
        vec![zonal_in("default", &["a", "b"])],
    );
    let r = schedule(&inp);
    all_placed(&r);
    assert_eq!(claim_zones(&r), ["a", "b"]);
    assert_eq!(
        r.placement("default", "web-2"),
        Some(&Placement::NewClaim { index: 0 })
    );
}

#[test]
fn ignored_preferences_drop_schedule_anyway_spreads() {
    let mut all = spread_pods("web", 3, 1000, ZONE_LABEL, 1);
    for p in &mut all {
        p.topology_spread[0] = p.topology_spread[0].clone().schedule_anyway();
    }
    let r = ignoring_preferences(&input(all, vec![], vec![zonal("default")]));
    assert_eq!(pod_counts(&r), [3]);
}

#[test]
fn ignored_preferences_keep_do_not_schedule_spreads() {
    let r = ignoring_preferences(&input(
        spread_pods("web", 3, 1000, ZONE_LABEL, 1),
        vec![],
        vec![zonal("default")],
    ));
    assert_eq!(claim_zones(&r), ["a", "b", "c"]);
}

#[test]
fn spread_groups_are_shared_by_pods_with_the_same_constraint() {
    // Two deployments' worth of pods with the same constraint, mixed in the queue, still
    // balance as one group.
    let mut all = spread_pods("web", 4, 1000, ZONE_LABEL, 1);
    all.extend(
        spread_pods("web", 2, 2000, ZONE_LABEL, 1)
            .into_iter()
            .map(|mut p| {
                p.key.name = format!("big-{}", p.key.name);
                p.uid = p.key.to_string();
                p
            }),
    );
    let r = run(all, vec![], vec![zonal("default")]);
    all_placed(&r);
    assert_eq!(claim_zones(&r), ["a", "b", "c"]);
    assert_eq!(pod_counts(&r), [2, 2, 2]);
}

// ---------------------------------------------------------------------------------------------
// pod affinity

/// `n` pods labelled `app=<prefix>` with required affinity to themselves over `key`.
fn self_affine(prefix: &str, n: usize, cpu_millis: u64, key: &str) -> Vec<PendingPod> {
    pods(prefix, n, cpu_millis)
        .into_iter()
        .map(|p| {
            let mut p = labelled(p, &[("app", prefix)]);
            p.pod_affinity = vec![term(key, prefix)];
            p
        })
        .collect()
}

/// `n` pods labelled `app=<prefix>` with required anti-affinity to themselves over `key`.
fn self_averse(prefix: &str, n: usize, cpu_millis: u64, key: &str) -> Vec<PendingPod> {
    pods(prefix, n, cpu_millis)
        .into_iter()
        .map(|p| {
            let mut p = labelled(p, &[("app", prefix)]);
            p.pod_anti_affinity = vec![term(key, prefix)];
            p
        })
        .collect()
}

#[test]
fn zonal_self_affinity_keeps_a_group_in_one_zone() {
    // Each pod needs its own node; all land in the zone the first one picked.
    let r = run(
        self_affine("db", 3, 7000, ZONE_LABEL),
        vec![],
        vec![zonal("default")],
    );
    all_placed(&r);
    assert_eq!(claim_zones(&r), ["a", "a", "a"]);
}

#[test]
fn hostname_self_affinity_packs_a_group_on_one_node() {
    let r = run(
        self_affine("db", 3, 1000, HOSTNAME_LABEL),
        vec![],
        vec![zonal("default")],
    );
    all_placed(&r);
    assert_eq!(pod_counts(&r), [3]);
}

#[test]
fn hostname_self_affinity_that_does_not_fit_one_node_fails() {
    let r = run(
        self_affine("db", 2, 5000, HOSTNAME_LABEL),
        vec![],
        vec![zonal("default")],
    );
    assert_eq!(pod_counts(&r), [1]);
    assert!(
        reason_of(&r, "db-1").contains(
            "unsatisfiable topology constraint for pod affinity, key=kubernetes.io/hostname"
        ),
        "{}",
        reason_of(&r, "db-1")
    );
}

#[test]
fn affinity_to_a_bound_pod_follows_its_zone() {
    let mut web = labelled(pod("web", 1000), &[("app", "web")]);
    web.pod_affinity = vec![term(ZONE_LABEL, "db")];
    let inp = input(
        vec![web],
        vec![full_node("n-b", "b")],
        vec![zonal("default")],
    );
    let r = with_context(&inp, vec![bound("db-0", "n-b", "db")]);
    assert_eq!(claim_zones(&r), ["b"]);
}

#[test]
fn hostname_affinity_to_a_bound_pod_means_its_node() {
    let mut web = labelled(pod("web", 1000), &[("app", "web")]);
    web.pod_affinity = vec![term(HOSTNAME_LABEL, "db")];
    let inp = input(
        vec![web.clone()],
        vec![zone_node("n1", "a", 4000), zone_node("n2", "a", 4000)],
        vec![zonal("default")],
    );
    let r = with_context(&inp, vec![bound("db-0", "n2", "db")]);
    assert_eq!(node_of(&r, "web"), "n2");

    // Without room there, no other node will do.
    let mut big = web;
    big.requests = cpu(6000).with("pods", 1);
    let inp = input(vec![big], inp.nodes.clone(), vec![zonal("default")]);
    let r = with_context(&inp, vec![bound("db-0", "n2", "db")]);
    assert!(reason_of(&r, "web").contains(
        "unsatisfiable topology constraint for pod affinity, key=kubernetes.io/hostname"
    ));
}

#[test]
fn affinity_without_a_matching_pod_fails() {
    let mut web = labelled(pod("web", 1000), &[("app", "web")]);
    web.pod_affinity = vec![term(ZONE_LABEL, "db")];
    let r = run(vec![web], vec![], vec![zonal("default")]);
    assert_eq!(
        reason_of(&r, "web"),
        "incompatible with nodepool \"default\", daemonset overhead={}, unsatisfiable topology constraint for pod affinity, key=topology.kubernetes.io/zone (counts = a: 0, b: 0, c: 0, podDomains = topology.kubernetes.io/zone Exists, nodeDomains = topology.kubernetes.io/zone Exists"
    );
}

#[test]
fn affinity_to_a_pod_of_the_same_batch_is_retried_after_it() {
    // The web pod is larger, so it is tried first and fails; once the db pod has a node,
    // web joins it.
    let db = labelled(pod("db", 1000), &[("app", "db")]);
    let mut web = labelled(pod("web", 2000), &[("app", "web")]);
    web.pod_affinity = vec![term(HOSTNAME_LABEL, "db")];
    let r = run(vec![web, db], vec![], vec![zonal("default")]);
    all_placed(&r);
    assert_eq!(pod_counts(&r), [2]);
}

#[test]
fn zonal_affinity_to_a_pod_of_the_same_batch_needs_its_zone_decided() {
    // The db claim is not narrowed to a zone, so it does not count in any zone (upstream
    // records spread and affinity only once the key has one value): web cannot follow.
    let db = labelled(pod("db", 1000), &[("app", "db")]);
    let mut web = labelled(pod("web", 2000), &[("app", "web")]);
    web.pod_affinity = vec![term(ZONE_LABEL, "db")];
    let r = run(
        vec![web.clone(), db.clone()],
        vec![],
        vec![zonal("default")],
    );
    reason_of(&r, "web");

    // With db pinned to zone b, web follows it there.
    let db = with_selector(db, ZONE_LABEL, "b");
    let mut big_web = web;
    big_web.requests = cpu(7500).with("pods", 1);
    let r = run(vec![big_web, db], vec![], vec![zonal("default")]);
    all_placed(&r);
    assert_eq!(claim_zones(&r), ["b", "b"]);
}

#[test]
fn affinity_terms_may_name_other_namespaces() {
    let mut web = labelled(pod("web", 1000), &[("app", "web")]);
    web.pod_affinity = vec![term(ZONE_LABEL, "db")];
    let mut db = bound("db-0", "n-b", "db");
    db.key.namespace = "data".into();
    let inp = input(
        vec![web.clone()],
        vec![full_node("n-b", "b")],
        vec![zonal("default")],
    );
    // Only the pod's own namespace by default.
    let r = with_context(&inp, vec![db.clone()]);
    reason_of(&r, "web");

    web.pod_affinity[0].namespaces = vec!["data".into()];
    let inp = input(
        vec![web],
        vec![full_node("n-b", "b")],
        vec![zonal("default")],
    );
    let r = with_context(&inp, vec![db]);
    assert_eq!(claim_zones(&r), ["b"]);
}

#[test]
fn an_empty_namespace_selector_selects_pods_of_every_namespace() {
    let mut web = labelled(pod("web", 1000), &[("app", "web")]);
    web.pod_affinity = vec![term(ZONE_LABEL, "db")];
    web.pod_affinity[0].namespace_selector = Some(LabelSelector::default());
    let mut db = bound("db-0", "n-b", "db");
    db.key.namespace = "data".into();
    let inp = input(
        vec![web],
        vec![full_node("n-b", "b")],
        vec![zonal("default")],
    );
    // No Namespace objects are given: the bound pod's namespace is still known.
    let r = with_context(&inp, vec![db]);
    assert_eq!(claim_zones(&r), ["b"]);
}

#[test]
fn a_namespace_selector_matches_namespace_labels_and_the_name_label() {
    let mut web = labelled(pod("web", 1000), &[("app", "web")]);
    web.pod_anti_affinity = vec![term(HOSTNAME_LABEL, "db")];
    let mut db = bound("db-0", "n1", "db");
    db.key.namespace = "data".into();
    let run_with = |selector: LabelSelector, labels: &[(&str, &str)]| {
        let mut web = web.clone();
        web.pod_anti_affinity[0].namespace_selector = Some(selector);
        let inp = input(
            vec![web],
            vec![zone_node("n1", "a", 8000)],
            vec![zonal("default")],
        );
        let context = SchedulingContext {
            bound_pods: vec![db.clone()],
            namespace_labels: BTreeMap::from([(
                "data".to_owned(),
                labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )]),
            ..Default::default()
        };
        schedule_with_context(&inp, &context, None)
    };
    // The selector matches the namespace's label: db's node is closed to web.
    let r = run_with(sel(&[("team", "storage")]), &[("team", "storage")]);
    claim_of(&r, "web");
    // A label the namespace does not have: db is not selected, web shares its node.
    let r = run_with(sel(&[("team", "storage")]), &[("team", "web")]);
    assert_eq!(node_of(&r, "web"), "n1");
    // Every namespace carries its name as kubernetes.io/metadata.name.
    let r = run_with(sel(&[("kubernetes.io/metadata.name", "data")]), &[]);
    claim_of(&r, "web");
}

#[test]
fn a_namespace_selector_adds_to_the_listed_namespaces_and_drops_the_pods_own() {
    let mut web = labelled(pod("web", 1000), &[("app", "web")]);
    web.pod_anti_affinity = vec![term(HOSTNAME_LABEL, "db")];
    // A selector matching nothing and no list: not even the pod's own namespace.
    web.pod_anti_affinity[0].namespace_selector = Some(sel(&[("team", "nobody")]));
    let db = bound("db-0", "n1", "db");
    let inp = input(
        vec![web.clone()],
        vec![zone_node("n1", "a", 8000)],
        vec![zonal("default")],
    );
    let r = with_context(&inp, vec![db.clone()]);
    assert_eq!(node_of(&r, "web"), "n1");
    // Listing the namespace brings it back alongside the selector's (empty) match.
    web.pod_anti_affinity[0].namespaces = vec!["default".into()];
    let inp = input(
        vec![web],
        vec![zone_node("n1", "a", 8000)],
        vec![zonal("default")],
    );
    let r = with_context(&inp, vec![db]);
    claim_of(&r, "web");
}

/// A bound pod using the CSI volume `id` of `driver` on `node`.
fn bound_with_volume(name: &str, node: &str, driver: &str, id: &str) -> BoundPod {
    BoundPod {
        volumes: vec![AttachedVolume::new(driver, id)],
        ..bound(name, node, "db")
    }
}

#[test]
fn a_node_at_its_csi_attach_limit_takes_no_pod_with_a_new_volume() {
    let mut n1 = zone_node("n1", "a", 8000);
    n1.volume_limits = BTreeMap::from([("ebs.csi.aws.com".to_owned(), 2)]);
    let bound_pods = vec![
        bound_with_volume("db-0", "n1", "ebs.csi.aws.com", "data/vol-0"),
        bound_with_volume("db-1", "n1", "ebs.csi.aws.com", "data/vol-1"),
    ];
    let with_volume = |id: &str| {
        let mut p = pod("web", 500);
        p.volumes = vec![AttachedVolume::new("ebs.csi.aws.com", id)];
        p
    };
    // A third volume of the driver exceeds the limit: a new claim instead.
    let inp = input(
        vec![with_volume("data/vol-2")],
        vec![n1.clone()],
        vec![zonal("default")],
    );
    let r = with_context(&inp, bound_pods.clone());
    claim_of(&r, "web");
    // A volume already attached there counts once: the node takes the pod.
    let inp = input(
        vec![with_volume("data/vol-1")],
        vec![n1.clone()],
        vec![zonal("default")],
    );
    let r = with_context(&inp, bound_pods.clone());
    assert_eq!(node_of(&r, "web"), "n1");
    // Another driver's volumes are not limited by this one's count.
    let mut other = pod("web", 500);
    other.volumes = vec![AttachedVolume::new("pd.csi.storage.gke.io", "data/vol-9")];
    let inp = input(vec![other], vec![n1], vec![zonal("default")]);
    let r = with_context(&inp, bound_pods);
    assert_eq!(node_of(&r, "web"), "n1");
}

#[test]
fn pods_placed_in_the_pass_use_up_the_attach_limit() {
    let mut n1 = zone_node("n1", "a", 8000);
    n1.volume_limits = BTreeMap::from([("csi.example.com".to_owned(), 1)]);
    let pods: Vec<PendingPod> = (0..2)
        .map(|i| {
            let mut p = pod(&format!("db-{i}"), 500);
            p.volumes = vec![AttachedVolume::new(
                "csi.example.com",
                format!("data/vol-{i}"),
            )];
            p
        })
        .collect();
    let r = run(pods, vec![n1], vec![zonal("default")]);
    all_placed(&r);
    let on_node = r
        .placements
        .iter()
        .filter(|p| matches!(&p.placement, Placement::Existing { node } if node == "n1"))
        .count();
    assert_eq!(
        (on_node, r.new_claims.len()),
        (1, 1),
        "one volume fits the node, the other pod gets a claim"
    );
}

#[test]
fn affinity_and_node_selector_must_agree() {
    let mut web = labelled(
        with_selector(pod("web", 1000), ZONE_LABEL, "a"),
        &[("app", "web")],
    );
    web.pod_affinity = vec![term(ZONE_LABEL, "db")];
    let inp = input(
        vec![web],
        vec![full_node("n-b", "b")],
        vec![zonal("default")],
    );
    let r = with_context(&inp, vec![bound("db-0", "n-b", "db")]);
    assert!(reason_of(&r, "web").contains("podDomains = topology.kubernetes.io/zone In [a]"));
}

#[test]
fn self_affinity_starts_in_the_zone_of_a_usable_existing_node() {
    let r = run(
        self_affine("db", 3, 1000, ZONE_LABEL),
        vec![zone_node("n-b", "b", 2000)],
        vec![zonal("default")],
    );
    all_placed(&r);
    assert_eq!(r.pods_on_node("n-b").len(), 2);
    assert_eq!(claim_zones(&r), ["b"]);
}

#[test]
fn self_affinity_joins_where_the_group_already_runs() {
    let inp = input(
        self_affine("db", 1, 1000, ZONE_LABEL),
        vec![full_node("n-c", "c")],
        vec![zonal("default")],
    );
    let r = with_context(&inp, vec![bound("db-old", "n-c", "db")]);
    assert_eq!(claim_zones(&r), ["c"]);
}

#[test]
fn self_affinity_may_start_over_where_the_group_cannot_go() {
    // The only matching pod runs in zone c, which the pod's node selector excludes: it may
    // bootstrap in a zone it can use.
    let mut p = self_affine("db", 1, 1000, ZONE_LABEL);
    p[0].required_affinity = vec![reqs([Requirement::in_values(ZONE_LABEL, ["a", "b"])])];
    let inp = input(p, vec![full_node("n-c", "c")], vec![zonal("default")]);
    let r = with_context(&inp, vec![bound("db-old", "n-c", "db")]);
    assert_eq!(claim_zones(&r), ["a"]);
}

#[test]
fn preferred_pod_affinity_is_honored_when_possible() {
    let mut web = labelled(pod("web", 1000), &[("app", "web")]);
    web.preferred_pod_affinity = vec![WeightedPodAffinityTerm {
        weight: 10,
        term: term(ZONE_LABEL, "db"),
    }];
    let inp = input(
        vec![web.clone()],
        vec![full_node("n-b", "b")],
        vec![zonal("default")],
    );
    let r = with_context(&inp, vec![bound("db-0", "n-b", "db")]);
    assert_eq!(claim_zones(&r), ["b"]);
    // And dropped otherwise.
    let r = with_context(&inp, vec![]);
    all_placed(&r);
    assert!(!r.new_claims[0].spec.requirements.has(ZONE_LABEL));
    // Or ignored outright.
    let r = schedule_with_context(
        &inp,
        &SchedulingContext {
            bound_pods: vec![bound("db-0", "n-b", "db")],
            preference_policy: PreferencePolicy::Ignore,
            ..Default::default()
        },
        None,
    );
    assert!(!r.new_claims[0].spec.requirements.has(ZONE_LABEL));
}

// ---------------------------------------------------------------------------------------------
// pod anti-affinity

#[test]
fn hostname_self_anti_affinity_puts_one_pod_per_node() {
    let r = run(
        self_averse("web", 3, 500, HOSTNAME_LABEL),
        vec![],
        vec![zonal("default")],
    );
    all_placed(&r);
    assert_eq!(pod_counts(&r), [1, 1, 1]);
}

#[test]
fn zonal_self_anti_affinity_blocks_every_zone_a_claim_may_land_in() {
    // The first claim is not narrowed to a zone, so its pod blocks all three.
    let r = run(
        self_averse("web", 3, 500, ZONE_LABEL),
        vec![],
        vec![zonal("default")],
    );
    assert_eq!(pod_counts(&r), [1]);
    assert_eq!(zone_of(&r.new_claims[0]), ["a", "b", "c"]);
    assert_eq!(r.unschedulable().len(), 2);
    assert!(
        r.unschedulable()[0]
            .1
            .contains("unsatisfiable topology constraint for pod anti-affinity")
    );
}

#[test]
fn zonal_self_anti_affinity_with_pinned_zones() {
    let mut all = self_averse("web", 4, 500, ZONE_LABEL);
    for (p, zone) in all.iter_mut().zip(["a", "b", "c", "a"]) {
        p.node_selector.insert(ZONE_LABEL.into(), zone.into());
    }
    let r = run(all, vec![], vec![zonal("default")]);
    assert_eq!(claim_zones(&r), ["a", "b", "c"]);
    reason_of(&r, "web-3");
}

#[test]
fn anti_affinity_keeps_away_from_bound_pods() {
    let mut web = labelled(pod("web", 1000), &[("app", "web")]);
    web.pod_anti_affinity = vec![term(HOSTNAME_LABEL, "db")];
    let inp = input(
        vec![web],
        vec![zone_node("n1", "a", 8000)],
        vec![zonal("default")],
    );
    let r = with_context(&inp, vec![bound("db-0", "n1", "db")]);
    claim_of(&r, "web");
    let r = with_context(&inp, vec![]);
    assert_eq!(node_of(&r, "web"), "n1");
}

#[test]
fn zonal_anti_affinity_to_bound_pods_excludes_their_zones() {
    let mut web = labelled(pod("web", 1000), &[("app", "web")]);
    web.pod_anti_affinity = vec![term(ZONE_LABEL, "db")];
    let inp = input(
        vec![web],
        vec![full_node("n-a", "a")],
        vec![zonal("default")],
    );
    let r = with_context(&inp, vec![bound("db-0", "n-a", "db")]);
    assert_eq!(zone_of(&r.new_claims[0]), ["b", "c"]);
}

#[test]
fn inverse_anti_affinity_of_a_bound_pod_keeps_its_targets_away() {
    // The bound db pod repels web pods from its zone; web itself has no constraint.
    let web = labelled(pod("web", 1000), &[("app", "web")]);
    let inp = input(
        vec![web],
        vec![full_node("n-a", "a")],
        vec![zonal("default")],
    );
    let mut db = bound("db-0", "n-a", "db");
    db.anti_affinity = vec![term(ZONE_LABEL, "web")];
    let r = with_context(&inp, vec![db]);
    assert_eq!(zone_of(&r.new_claims[0]), ["b", "c"]);
}

#[test]
fn inverse_anti_affinity_on_an_existing_node() {
    let web = labelled(pod("web", 1000), &[("app", "web")]);
    let inp = input(
        vec![web],
        vec![zone_node("n1", "a", 8000)],
        vec![zonal("default")],
    );
    let mut db = bound("db-0", "n1", "db");
    db.anti_affinity = vec![term(HOSTNAME_LABEL, "web")];
    let r = with_context(&inp, vec![db.clone()]);
    claim_of(&r, "web");
    // Terms of other namespaces' pods only select their own namespace.
    db.key.namespace = "other".into();
    let r = with_context(&inp, vec![db]);
    assert_eq!(node_of(&r, "web"), "n1");
}

#[test]
fn inverse_anti_affinity_of_a_pending_pod() {
    // a is placed first (larger); b has no constraint but a's anti-affinity selects it.
    let mut a = labelled(pod("a", 2000), &[("app", "a")]);
    a.pod_anti_affinity = vec![term(HOSTNAME_LABEL, "b")];
    let b = labelled(pod("b", 1000), &[("app", "b")]);
    let r = run(vec![a.clone(), b.clone()], vec![], vec![zonal("default")]);
    all_placed(&r);
    assert_eq!(pod_counts(&r), [1, 1]);

    // Without the term they share a claim.
    a.pod_anti_affinity.clear();
    let r = run(vec![a, b], vec![], vec![zonal("default")]);
    assert_eq!(pod_counts(&r), [2]);
}

#[test]
fn anti_affinity_only_sees_the_named_namespaces() {
    let mut web = labelled(pod("web", 1000), &[("app", "web")]);
    web.pod_anti_affinity = vec![term(HOSTNAME_LABEL, "db")];
    let inp = input(
        vec![web.clone()],
        vec![zone_node("n1", "a", 8000)],
        vec![zonal("default")],
    );
    let mut db = bound("db-0", "n1", "db");
    db.key.namespace = "data".into();
    let r = with_context(&inp, vec![db.clone()]);
    assert_eq!(node_of(&r, "web"), "n1");

    web.pod_anti_affinity[0].namespaces = vec!["data".into()];
    let inp = input(
        vec![web],
        vec![zone_node("n1", "a", 8000)],
        vec![zonal("default")],
    );
    let r = with_context(&inp, vec![db]);
    claim_of(&r, "web");
}

#[test]
fn anti_affinity_and_spread_together() {
    let mut all = self_averse("web", 3, 500, HOSTNAME_LABEL);
    for p in &mut all {
        p.topology_spread = vec![spread(ZONE_LABEL, 1, "web")];
    }
    let r = run(all, vec![], vec![zonal("default")]);
    all_placed(&r);
    assert_eq!(claim_zones(&r), ["a", "b", "c"]);
}

#[test]
fn preferred_anti_affinity_is_honored_while_possible() {
    let all: Vec<PendingPod> = pods("web", 3, 500)
        .into_iter()
        .map(|p| {
            let mut p = labelled(p, &[("app", "web")]);
            p.preferred_pod_anti_affinity = vec![WeightedPodAffinityTerm {
                weight: 1,
                term: term(HOSTNAME_LABEL, "web"),
            }];
            p
        })
        .collect();
    let r = run(all.clone(), vec![], vec![zonal("default")]);
    assert_eq!(pod_counts(&r), [1, 1, 1]);
    let r = ignoring_preferences(&input(all, vec![], vec![zonal("default")]));
    assert_eq!(pod_counts(&r), [3]);
}

/// Upstream's preference benchmark pod: a satisfiable preferred zone, an unsatisfiable
/// preferred zonal self anti-affinity (weight 10), a satisfiable preferred hostname self
/// anti-affinity (weight 1).
fn preference_pods(n: usize) -> Vec<PendingPod> {
    pods("web", n, 500)
        .into_iter()
        .map(|p| {
            let mut p = labelled(p, &[("app", "web")]);
            p.preferred_affinity = vec![PreferredSchedulingTerm {
                weight: 1,
                preference: reqs([Requirement::in_values(ZONE_LABEL, ["b"])]),
            }];
            p.preferred_pod_anti_affinity = vec![
                WeightedPodAffinityTerm {
                    weight: 10,
                    term: term(ZONE_LABEL, "web"),
                },
                WeightedPodAffinityTerm {
                    weight: 1,
                    term: term(HOSTNAME_LABEL, "web"),
                },
            ];
            p
        })
        .collect()
}

#[test]
fn preferences_are_relaxed_heaviest_first() {
    let r = run(preference_pods(4), vec![], vec![zonal("default")]);
    all_placed(&r);
    // The zonal anti-affinity gives way, the hostname one and the zone preference hold.
    assert_eq!(pod_counts(&r), [1, 1, 1, 1]);
    assert_eq!(claim_zones(&r), ["b", "b", "b", "b"]);
}

#[test]
fn preferences_ignored_pack_the_preference_pods() {
    let r = ignoring_preferences(&input(preference_pods(4), vec![], vec![zonal("default")]));
    all_placed(&r);
    assert_eq!(pod_counts(&r), [4]);
    assert!(!r.new_claims[0].spec.requirements.has(ZONE_LABEL));
}

// ---------------------------------------------------------------------------------------------
// preferred node affinity and relaxation order

fn prefer(p: PendingPod, weight: i32, zones: &[&str]) -> PendingPod {
    let mut p = p;
    p.preferred_affinity.push(PreferredSchedulingTerm {
        weight,
        preference: reqs([Requirement::in_values(ZONE_LABEL, zones.iter().copied())]),
    });
    p
}

#[test]
fn preferred_node_affinity_is_honored_when_possible() {
    let r = run(
        vec![prefer(pod("p", 1000), 10, &["b"])],
        vec![],
        vec![zonal("default")],
    );
    assert_eq!(claim_zones(&r), ["b"]);
}

#[test]
fn unsatisfiable_preferred_node_affinity_is_dropped() {
    let r = run(
        vec![prefer(pod("p", 1000), 10, &["nowhere"])],
        vec![],
        vec![zonal("default")],
    );
    all_placed(&r);
    assert!(!r.new_claims[0].spec.requirements.has(ZONE_LABEL));
}

#[test]
fn the_heaviest_preferred_term_is_tried_first() {
    let p = prefer(prefer(pod("p", 1000), 1, &["a"]), 50, &["b"]);
    let r = run(vec![p], vec![], vec![zonal("default")]);
    assert_eq!(claim_zones(&r), ["b"]);
}

#[test]
fn lighter_preferred_terms_follow_when_heavier_ones_fail() {
    let p = prefer(prefer(pod("p", 1000), 50, &["nowhere"]), 1, &["c"]);
    let r = run(vec![p], vec![], vec![zonal("default")]);
    assert_eq!(claim_zones(&r), ["c"]);
}

#[test]
fn equal_weights_keep_their_order() {
    let p = prefer(prefer(pod("p", 1000), 5, &["c"]), 5, &["b"]);
    let r = run(vec![p], vec![], vec![zonal("default")]);
    assert_eq!(claim_zones(&r), ["c"]);
}

#[test]
fn ignored_preferences_leave_the_node_unconstrained() {
    let inp = input(
        vec![prefer(pod("p", 1000), 10, &["b"])],
        vec![],
        vec![zonal("default")],
    );
    let r = ignoring_preferences(&inp);
    assert!(!r.new_claims[0].spec.requirements.has(ZONE_LABEL));
}

#[test]
fn preferred_node_affinity_prefers_an_existing_node_in_that_zone() {
    let nodes = vec![zone_node("n-a", "a", 4000), zone_node("n-b", "b", 4000)];
    let r = run(
        vec![prefer(pod("p", 1000), 10, &["b"])],
        nodes.clone(),
        vec![zonal("default")],
    );
    assert_eq!(node_of(&r, "p"), "n-b");
    let r = run(
        vec![prefer(pod("p", 1000), 10, &["c"])],
        nodes,
        vec![zonal("default")],
    );
    // No node in c: a new claim in c rather than an existing node elsewhere.
    assert_eq!(claim_zones(&r), ["c"]);
}

#[test]
fn preferred_node_affinity_does_not_narrow_spread_domains() {
    // Spread domains come from required constraints only: with zone a preferred, the second
    // pod would exceed the skew in a (b and c are still empty), so the preference gives way.
    let all: Vec<PendingPod> = spread_pods("web", 2, 1000, ZONE_LABEL, 1)
        .into_iter()
        .map(|p| prefer(p, 10, &["a"]))
        .collect();
    let r = run(all, vec![], vec![zonal("default")]);
    all_placed(&r);
    assert_eq!(claim_zones(&r), ["a", "b"]);
}

#[test]
fn preferred_pod_affinity_is_relaxed_before_preferred_node_affinity() {
    // The pod affinity cannot be met; dropping it first keeps the zone preference.
    let mut p = prefer(labelled(pod("p", 1000), &[("app", "web")]), 10, &["b"]);
    p.preferred_pod_affinity = vec![WeightedPodAffinityTerm {
        weight: 100,
        term: term(ZONE_LABEL, "ghost"),
    }];
    let r = run(vec![p], vec![], vec![zonal("default")]);
    assert_eq!(claim_zones(&r), ["b"]);
}

#[test]
fn preferred_anti_affinity_is_relaxed_before_preferred_node_affinity() {
    // Zone b holds a pod the anti-affinity avoids, and b is preferred: the anti-affinity
    // gives way first, so the pod still lands in b.
    let mut p = prefer(labelled(pod("p", 1000), &[("app", "web")]), 10, &["b"]);
    p.preferred_pod_anti_affinity = vec![WeightedPodAffinityTerm {
        weight: 100,
        term: term(ZONE_LABEL, "db"),
    }];
    let inp = input(vec![p], vec![full_node("n-b", "b")], vec![zonal("default")]);
    let r = with_context(&inp, vec![bound("db-0", "n-b", "db")]);
    assert_eq!(claim_zones(&r), ["b"]);
}

#[test]
fn preferred_node_affinity_is_relaxed_before_schedule_anyway_spreads() {
    // Zone a is preferred but already holds a matching pod while b and c hold none: the zone
    // preference gives way before the spread, which then picks b.
    let mut p = prefer(labelled(pod("web", 1000), &[("app", "web")]), 10, &["a"]);
    p.topology_spread = vec![spread(ZONE_LABEL, 1, "web").schedule_anyway()];
    let inp = input(vec![p], vec![full_node("n-a", "a")], vec![zonal("default")]);
    let r = with_context(&inp, vec![bound("w1", "n-a", "web")]);
    assert_eq!(claim_zones(&r), ["b"]);
}

#[test]
fn required_terms_are_relaxed_before_preferences() {
    // The first required term cannot be met; the second can, together with the preference.
    let mut p = prefer(pod("p", 1000), 10, &["c"]);
    p.required_affinity = vec![
        reqs([Requirement::in_values(ZONE_LABEL, ["nowhere"])]),
        reqs([Requirement::in_values(ZONE_LABEL, ["b", "c"])]),
    ];
    let r = run(vec![p], vec![], vec![zonal("default")]);
    assert_eq!(claim_zones(&r), ["c"]);
}

#[test]
fn prefer_no_schedule_is_relaxed_even_when_preferences_are_ignored() {
    let mut soft = zonal("soft");
    soft.template.taints = vec![Taint::new(
        "spot-only",
        "true",
        TaintEffect::PreferNoSchedule,
    )];
    let r = ignoring_preferences(&input(vec![pod("p", 1000)], vec![], vec![soft]));
    assert_eq!(claim_of(&r, "p").spec.nodepool, "soft");
}

#[test]
fn pods_tolerating_prefer_no_schedule_need_no_relaxation() {
    let mut soft = weighted("soft", 50);
    soft.template.taints = vec![Taint::new(
        "spot-only",
        "true",
        TaintEffect::PreferNoSchedule,
    )];
    let mut p = pod("p", 1000);
    p.tolerations = vec![Toleration::exists("", Some(TaintEffect::PreferNoSchedule))];
    let r = run(vec![p], vec![], vec![soft, pool("plain")]);
    assert_eq!(claim_of(&r, "p").spec.nodepool, "soft");
}

#[test]
fn a_pod_that_cannot_be_placed_still_gets_a_reason_after_all_relaxations() {
    let mut p = prefer(labelled(pod("p", 100_000), &[("app", "web")]), 10, &["b"]);
    p.preferred_pod_anti_affinity = vec![WeightedPodAffinityTerm {
        weight: 1,
        term: term(HOSTNAME_LABEL, "web"),
    }];
    p.topology_spread = vec![spread(ZONE_LABEL, 1, "web").schedule_anyway()];
    let r = run(vec![p], vec![], vec![zonal("default")]);
    // The last attempt had no preference left: only the resources are reported.
    assert_eq!(
        reason_of(&r, "p"),
        "incompatible with nodepool \"default\", daemonset overhead={}, no instance type satisfied resources {\"cpu\":\"100\",\"pods\":\"1\"} and requirements karpenter.sh/nodepool In [default], test.joinery.dev/testnodeclass In [default] (no instance type has enough resources)"
    );
}

// ---------------------------------------------------------------------------------------------
// host ports

fn with_ports(mut p: PendingPod, ports: &[HostPort]) -> PendingPod {
    p.host_ports = ports.to_vec();
    p
}

#[test]
fn pods_binding_the_same_host_port_need_separate_nodes() {
    let all: Vec<PendingPod> = pods("p", 3, 500)
        .into_iter()
        .map(|p| with_ports(p, &[HostPort::tcp(8080)]))
        .collect();
    let r = run(all, vec![], vec![pool("default")]);
    all_placed(&r);
    assert_eq!(pod_counts(&r), [1, 1, 1]);
}

#[test]
fn different_ports_protocols_or_addresses_share_a_node() {
    let udp = HostPort {
        protocol: "UDP".into(),
        ..HostPort::tcp(53)
    };
    let on = |ip: &str| HostPort {
        host_ip: ip.into(),
        ..HostPort::tcp(80)
    };
    let all = vec![
        with_ports(pod("a", 500), &[HostPort::tcp(53)]),
        with_ports(pod("b", 500), &[udp]),
        with_ports(pod("c", 500), &[on("10.0.0.1")]),
        with_ports(pod("d", 500), &[on("10.0.0.2")]),
    ];
    let r = run(all, vec![], vec![pool("default")]);
    assert_eq!(pod_counts(&r), [4]);
}

#[test]
fn an_unspecified_address_conflicts_with_any_address() {
    let all = vec![
        with_ports(pod("a", 500), &[HostPort::tcp(80)]),
        with_ports(
            pod("b", 500),
            &[HostPort {
                host_ip: "10.0.0.1".into(),
                ..HostPort::tcp(80)
            }],
        ),
    ];
    let r = run(all, vec![], vec![pool("default")]);
    assert_eq!(pod_counts(&r), [1, 1]);
}

#[test]
fn host_ports_of_bound_pods_are_taken() {
    let p = with_ports(pod("p", 500), &[HostPort::tcp(8080)]);
    let inp = input(
        vec![p],
        vec![zone_node("n1", "a", 4000)],
        vec![pool("default")],
    );
    let mut holder = bound("holder", "n1", "x");
    holder.host_ports = vec![HostPort::tcp(8080)];
    let r = with_context(&inp, vec![holder.clone()]);
    claim_of(&r, "p");
    holder.host_ports = vec![HostPort::tcp(9090)];
    let r = with_context(&inp, vec![holder]);
    assert_eq!(node_of(&r, "p"), "n1");
}

#[test]
fn host_ports_taken_in_the_same_pass_on_an_existing_node() {
    let all: Vec<PendingPod> = pods("p", 2, 500)
        .into_iter()
        .map(|p| with_ports(p, &[HostPort::tcp(8080)]))
        .collect();
    let r = run(all, vec![zone_node("n1", "a", 4000)], vec![pool("default")]);
    assert_eq!(node_of(&r, "p-0"), "n1");
    claim_of(&r, "p-1");
}

#[test]
fn daemon_host_ports_rule_out_the_types_the_daemon_runs_on() {
    let types = vec![
        itype_with("arm-4", 4, "arm64", offerings(Some(0.15))),
        itype_with("amd-4", 4, "amd64", offerings(Some(0.2))),
    ];
    let mut agent = daemon("kube-system/arm-agent", 100);
    agent
        .node_selector
        .insert(ARCH_LABEL.into(), "arm64".into());
    agent.host_ports = vec![HostPort::tcp(9100)];
    let mut inp = input(
        vec![with_ports(pod("p", 500), &[HostPort::tcp(9100)])],
        vec![],
        vec![pool_with("default", Requirements::new(), types)],
    );
    inp.daemons = vec![agent];
    let r = schedule(&inp);
    assert_eq!(types_of(claim_of(&r, "p")), ["amd-4"]);

    // Running everywhere, it leaves nothing.
    inp.daemons[0].node_selector.clear();
    let r = schedule(&inp);
    assert!(
        reason_of(&r, "p").ends_with(
            "(no instance type met the scheduling requirements or had enough resources or had a required offering)"
        ),
        "{}",
        reason_of(&r, "p")
    );
}

#[test]
fn pods_without_host_ports_ignore_daemon_ports() {
    let mut agent = daemon("kube-system/agent", 100);
    agent.host_ports = vec![HostPort::tcp(9100)];
    let mut inp = input(pods("p", 2, 500), vec![], vec![pool("default")]);
    inp.daemons = vec![agent];
    let r = schedule(&inp);
    assert_eq!(pod_counts(&r), [2]);
}

// ---------------------------------------------------------------------------------------------
// volume topology

fn zones(list: &[&str]) -> Requirements {
    reqs([Requirement::in_values(ZONE_LABEL, list.iter().copied())])
}

#[test]
fn volume_topology_narrows_the_claim() {
    let mut p = pod("p", 1000);
    p.volume_requirements = vec![zones(&["b"])];
    let r = run(vec![p], vec![], vec![zonal("default")]);
    assert_eq!(claim_zones(&r), ["b"]);
}

#[test]
fn volume_alternatives_are_tried_in_order() {
    let mut p = pod("p", 1000);
    p.volume_requirements = vec![zones(&["nowhere"]), zones(&["c"]), zones(&["a"])];
    let r = run(vec![p], vec![], vec![zonal("default")]);
    assert_eq!(claim_zones(&r), ["c"]);
}

#[test]
fn volume_topology_decides_existing_nodes() {
    let mut p = pod("p", 1000);
    p.volume_requirements = vec![zones(&["b"])];
    let nodes = vec![zone_node("n-a", "a", 4000), zone_node("n-b", "b", 4000)];
    let r = run(vec![p], nodes, vec![zonal("default")]);
    assert_eq!(node_of(&r, "p"), "n-b");
}

#[test]
fn volume_topology_that_matches_no_node_is_reported() {
    let mut p = with_selector(pod("p", 1000), ZONE_LABEL, "a");
    p.volume_requirements = vec![zones(&["b"])];
    let r = run(vec![p], vec![], vec![zonal("default")]);
    assert_eq!(
        reason_of(&r, "p"),
        "incompatible with nodepool \"default\", daemonset overhead={}, incompatible volume requirements, key topology.kubernetes.io/zone, topology.kubernetes.io/zone In [b] not in topology.kubernetes.io/zone In [a]"
    );
}

#[test]
fn volume_topology_on_an_undeclared_custom_label() {
    let mut p = pod("p", 1000);
    p.volume_requirements = vec![reqs([Requirement::in_values("example.com/rack", ["r1"])])];
    let r = run(vec![p], vec![], vec![zonal("default")]);
    assert!(reason_of(&r, "p").ends_with(
        "incompatible volume requirements, label \"example.com/rack\" does not have known values"
    ));
}

#[test]
fn volume_topology_does_not_narrow_spread_domains() {
    // Both pods' volumes live in zone a. Spread domains come from the pods' own constraints,
    // so zones b and c still count: the second pod would exceed the skew in a.
    let mut all = spread_pods("web", 2, 1000, ZONE_LABEL, 1);
    for p in &mut all {
        p.volume_requirements = vec![zones(&["a"])];
    }
    let r = run(all, vec![], vec![zonal("default")]);
    assert_eq!(claim_zones(&r), ["a"]);
    assert!(
        reason_of(&r, "web-1").contains("unsatisfiable topology constraint for topology spread")
    );
}

#[test]
fn volume_alternatives_combine_with_topology() {
    // Zone a is taken by a matching pod; the first volume alternative (a) fails the
    // anti-affinity, the second (b) works.
    let mut p = labelled(pod("web", 1000), &[("app", "web")]);
    p.pod_anti_affinity = vec![term(ZONE_LABEL, "web")];
    p.volume_requirements = vec![zones(&["a"]), zones(&["b"])];
    let inp = input(vec![p], vec![full_node("n-a", "a")], vec![zonal("default")]);
    let r = with_context(&inp, vec![bound("w0", "n-a", "web")]);
    assert_eq!(claim_zones(&r), ["b"]);
}

// ---------------------------------------------------------------------------------------------
// determinism with inter-pod constraints

fn topology_scenario() -> (SchedulingInput, Vec<BoundPod>) {
    let mut all = spread_pods("web", 5, 700, ZONE_LABEL, 1);
    all.extend(self_averse("cache", 3, 300, HOSTNAME_LABEL));
    all.extend(self_affine("db", 3, 900, ZONE_LABEL));
    all.push(prefer(
        labelled(pod("solo", 1200), &[("app", "solo")]),
        5,
        &["c"],
    ));
    all.push(with_ports(pod("agent", 250), &[HostPort::tcp(9100)]));
    for (i, p) in all.iter_mut().enumerate() {
        p.created = (i % 3) as i64;
    }
    let mut second = zonal_in("second", &["b", "c"]);
    second.template.weight = 5;
    let inp = input(
        all,
        vec![zone_node("n-a", "a", 1500), full_node("n-b", "b")],
        vec![zonal("first"), second],
    );
    let mut repel = bound("x1", "n-b", "x");
    repel.anti_affinity = vec![term(HOSTNAME_LABEL, "cache")];
    (inp, vec![bound("w1", "n-b", "web"), repel])
}

#[test]
fn shuffled_input_with_topology_gives_the_same_result() {
    let (base, bound_pods) = topology_scenario();
    let expected = with_context(&base, bound_pods.clone());
    all_placed(&expected);
    assert!(expected.new_claims.len() >= 3);
    for seed in 1..=6u64 {
        let mut inp = base.clone();
        inp.pods = shuffled(&base.pods, seed);
        inp.nodes = shuffled(&base.nodes, seed + 100);
        inp.nodepools = shuffled(&base.nodepools, seed + 200);
        let got = with_context(&inp, shuffled(&bound_pods, seed + 300));
        assert_eq!(got.new_claims, expected.new_claims, "seed {seed}");
        assert_eq!(by_key(&got), by_key(&expected), "seed {seed}");
    }
}

#[test]
fn topology_scenario_respects_every_constraint() {
    let (inp, bound_pods) = topology_scenario();
    let r = with_context(&inp, bound_pods);
    all_placed(&r);
    // Cache pods: one per node, never on n-b's hostname (repelled) and never together.
    let cache_claims: BTreeSet<usize> = (0..3)
        .filter_map(|i| match r.placement("default", &format!("cache-{i}")) {
            Some(Placement::NewClaim { index }) => Some(*index),
            Some(Placement::Existing { node }) => {
                assert_ne!(node, "n-b");
                None
            }
            _ => panic!("cache pod not placed"),
        })
        .collect();
    assert!(cache_claims.len() >= 2);
    // The db group shares one zone.
    let db_zones: BTreeSet<Vec<String>> = (0..3)
        .map(|i| match r.placement("default", &format!("db-{i}")) {
            Some(Placement::NewClaim { index }) => zone_of(&r.new_claims[*index]),
            Some(Placement::Existing { node }) => {
                vec![if node == "n-a" { "a" } else { "b" }.to_owned()]
            }
            other => panic!("db pod not placed: {other:?}"),
        })
        .collect();
    assert_eq!(db_zones.len(), 1, "{db_zones:?}");
}

// ---------------------------------------------------------------------------------------------
// cost lower bound

#[test]
fn lower_bound_is_exact_for_one_pod_filling_the_cheapest_rate() {
    // c3 prices are proportional to size: 2 CPU of spot in any size costs 0.07.
    let inp = input(vec![pod("p", 2000)], vec![], vec![pool("default")]);
    let bound = cost_lower_bound(&inp);
    assert!((bound - 0.07).abs() < 1e-9, "{bound}");
    let r = schedule(&inp);
    let spent: f64 = r.new_claims.iter().filter_map(|c| c.launch_price).sum();
    assert!((spent - bound).abs() < 1e-9, "spent {spent}, bound {bound}");
}

#[test]
fn lower_bound_is_exact_when_pods_fill_nodes() {
    // Eight 1-CPU pods fill one 8-CPU node exactly.
    let inp = input(pods("p", 8, 1000), vec![], vec![pool("default")]);
    let bound = cost_lower_bound(&inp);
    let r = schedule(&inp);
    let spent: f64 = r.new_claims.iter().filter_map(|c| c.launch_price).sum();
    assert!((bound - 0.4 * 0.7).abs() < 1e-9, "{bound}");
    assert!((spent - bound).abs() < 1e-9, "spent {spent}, bound {bound}");
}

#[test]
fn lower_bound_uses_the_scarcest_resource() {
    // Memory-heavy pods: 8 GiB on a family with 2 GiB per CPU costs as much as 4 CPUs.
    let mut p = pod("p", 100);
    p.requests.memory_bytes = 8 * GI;
    let inp = input(vec![p], vec![], vec![pool("default")]);
    let bound = cost_lower_bound(&inp);
    assert!((bound - 0.2 * 0.7).abs() < 1e-9, "{bound}");
}

#[test]
fn lower_bound_subtracts_existing_room() {
    let inp = input(
        pods("p", 3, 1000),
        vec![node("n1", &[], 4000)],
        vec![pool("default")],
    );
    assert_eq!(cost_lower_bound(&inp), 0.0);
    let inp = input(
        pods("p", 6, 1000),
        vec![node("n1", &[], 4000)],
        vec![pool("default")],
    );
    assert!((cost_lower_bound(&inp) - 0.07).abs() < 1e-9);
}

#[test]
fn lower_bound_is_infinite_for_resources_nobody_offers() {
    let mut p = pod("p", 1000);
    p.requests.set("nvidia.com/gpu", 1);
    let inp = input(vec![p], vec![], vec![pool("default")]);
    assert!(cost_lower_bound(&inp).is_infinite());
    assert_eq!(
        cost_lower_bound(&input(vec![], vec![], vec![pool("default")])),
        0.0
    );
}

#[test]
fn lower_bound_never_exceeds_what_scheduling_spends() {
    let cases = [
        input(pods("p", 13, 700), vec![], vec![pool("default")]),
        input(
            spread_pods("web", 7, 1300, ZONE_LABEL, 1),
            vec![],
            vec![zonal("default")],
        ),
        input(
            self_averse("web", 5, 300, HOSTNAME_LABEL),
            vec![],
            vec![zonal("default")],
        ),
        benchmark_input(200, 40),
    ];
    for (i, inp) in cases.iter().enumerate() {
        let bound = cost_lower_bound(inp);
        let r = schedule(inp);
        all_placed(&r);
        let spent: f64 = r.new_claims.iter().filter_map(|c| c.launch_price).sum();
        assert!(
            bound <= spent + 1e-9,
            "case {i}: bound {bound} > spent {spent}"
        );
        assert!(bound > 0.0, "case {i}");
    }
}

// ---------------------------------------------------------------------------------------------
// upstream's benchmark shape

#[test]
fn benchmark_catalog_matches_upstreams_fake_types() {
    let inp = benchmark_input(10, 400);
    let types = &inp.nodepools[0].instance_types;
    assert_eq!(types.len(), 400);
    let first = &types[0];
    assert_eq!(first.name(), "fake-it-0");
    assert_eq!(first.capacity().cpu_millis, 1000);
    assert_eq!(first.capacity().memory_bytes, 2 * GI);
    assert_eq!(first.capacity().pods, 10);
    assert_eq!(first.allocatable().cpu_millis, 900);
    assert_eq!(first.offerings().len(), 5);
    let price = first
        .offerings()
        .cheapest()
        .and_then(|o| o.price())
        .unwrap();
    assert!((price - (0.1 + 0.1 * (2 * GI) as f64 / 1e9)).abs() < 1e-12);
    assert_eq!(types[399].name(), "fake-it-399");
    assert_eq!(types[399].capacity().cpu_millis, 400_000);
    assert_eq!(benchmark_input(10, 400), inp, "deterministic");
}

#[test]
fn benchmark_pods_follow_upstreams_mix() {
    let inp = benchmark_input(1000, 10);
    let count = |f: &dyn Fn(&PendingPod) -> bool| inp.pods.iter().filter(|p| f(p)).count();
    assert_eq!(inp.pods.len(), 1000);
    assert_eq!(
        count(&|p| p
            .topology_spread
            .iter()
            .any(|c| c.topology_key == ZONE_LABEL)),
        200
    );
    assert_eq!(
        count(&|p| p
            .topology_spread
            .iter()
            .any(|c| c.topology_key == HOSTNAME_LABEL)),
        200
    );
    assert_eq!(count(&|p| !p.pod_affinity.is_empty()), 200);
    assert_eq!(count(&|p| !p.pod_anti_affinity.is_empty()), 200);
    let cpus: BTreeSet<u64> = inp.pods.iter().map(|p| p.requests.cpu_millis).collect();
    assert_eq!(cpus, BTreeSet::from([100, 250, 500, 1000, 1500]));
    let mems: BTreeSet<u64> = inp
        .pods
        .iter()
        .map(|p| p.requests.memory_bytes >> 20)
        .collect();
    assert_eq!(mems, BTreeSet::from([100, 256, 512, 1024, 2048, 4096]));
}

#[test]
fn benchmark_2000_pods_over_400_types_schedule_sanely() {
    let inp = benchmark_input(2000, 400);
    let r = schedule(&inp);
    all_placed(&r);
    // 400 pods with hostname self anti-affinity need 400 nodes; upstream reports 400.
    assert!(
        (400..=420).contains(&r.new_claims.len()),
        "{} claims",
        r.new_claims.len()
    );
    let anti: Vec<&PendingPod> = inp
        .pods
        .iter()
        .filter(|p| !p.pod_anti_affinity.is_empty())
        .collect();
    let anti_claims: BTreeSet<usize> = anti
        .iter()
        .map(|p| match r.placement("default", &p.key.name) {
            Some(Placement::NewClaim { index }) => *index,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        anti_claims.len(),
        anti.len(),
        "one anti-affinity pod per node"
    );
    // Each self-affinity group sits in one zone.
    let mut group_zones: BTreeMap<String, BTreeSet<Vec<String>>> = BTreeMap::new();
    for p in inp.pods.iter().filter(|p| !p.pod_affinity.is_empty()) {
        let Some(Placement::NewClaim { index }) = r.placement("default", &p.key.name) else {
            panic!("affinity pod not on a new claim");
        };
        group_zones
            .entry(p.labels["my-affininity"].clone())
            .or_default()
            .insert(zone_of(&r.new_claims[*index]));
    }
    assert!(
        group_zones.values().all(|z| z.len() == 1),
        "{group_zones:?}"
    );
    // Every claim lists cheapest types first and fits its pods.
    for c in &r.new_claims {
        assert!(!c.spec.instance_types.is_empty());
        assert!(c.spec.instance_types.len() <= MAX_INSTANCE_TYPES);
    }
    // Within a factor of the resource-volume bound.
    let spent: f64 = r.new_claims.iter().filter_map(|c| c.launch_price).sum();
    let bound = cost_lower_bound(&inp);
    assert!(
        bound <= spent && spent <= 3.0 * bound,
        "spent {spent}, bound {bound}"
    );
}

#[test]
fn a_daemon_pod_using_more_than_its_template_leaves_no_negative_overhead() {
    // The DaemonSet's template asks 1 CPU; its pod on the node was given 1.5 (a VPA, say).
    // The node keeps 4 - 3 = 1 CPU: exactly what a 1-CPU pod needs, with nothing reserved.
    let mut n = node("n1", &[], 4000);
    n.requested = cpu(3000).with("pods", 2);
    n.daemon_requested = cpu(1500).with("pods", 1);
    let mut inp = input(
        vec![pod("fits", 1000), pod("too-big", 1001)],
        vec![n],
        vec![],
    );
    inp.daemons = vec![daemon("agent", 1000)];
    let r = schedule(&inp);
    assert!(
        matches!(
            r.placements.iter().find(|p| p.key.name == "fits").map(|p| &p.placement),
            Some(Placement::Existing { node }) if node == "n1"
        ),
        "{:?}",
        r.placements
    );
    assert!(
        matches!(
            r.placements
                .iter()
                .find(|p| p.key.name == "too-big")
                .map(|p| &p.placement),
            Some(Placement::Unschedulable { .. })
        ),
        "the node keeps only what is really left: {:?}",
        r.placements
    );
}

// ---------------------------------------------------------------------------------------------
// capacity buffers

/// `n` virtual pods of `cpu_millis` for the buffer `default/spare`.
fn buffer_pods(n: usize, cpu_millis: u64) -> Vec<PendingPod> {
    crate::buffers::virtual_pods("default", "spare", n, &pod("shape", cpu_millis))
}

#[test]
fn virtual_pods_never_take_room_a_real_pod_needs() {
    // The buffer's chunk is larger, so upstream's size order alone would place it first and
    // push the real pod onto a new claim. Real pods go first: the real pod takes the node.
    let mut pods = buffer_pods(1, 3000);
    pods.push(pod("real", 2000));
    let r = run(pods, vec![node("n1", &[], 4000)], vec![pool("default")]);
    assert_eq!(node_of(&r, "real"), "n1");
    let chunk = claim_of(&r, "capacity-buffer-spare-1");
    assert_eq!(chunk.pods.len(), 1);
}

#[test]
fn virtual_pods_fill_existing_room_before_opening_a_claim() {
    let r = run(
        buffer_pods(2, 1000),
        vec![node("n1", &[], 4000)],
        vec![pool("default")],
    );
    assert_eq!(node_of(&r, "capacity-buffer-spare-1"), "n1");
    assert_eq!(node_of(&r, "capacity-buffer-spare-2"), "n1");
    assert!(r.new_claims.is_empty());
}

#[test]
fn virtual_pods_within_limits_a_real_pod_consumed_first_fit_nowhere() {
    let mut p = pool("default");
    p.limits = Some(NodePoolLimits::from_quantities([("cpu", "4")], Resources::new()).unwrap());
    let mut pods = buffer_pods(1, 3000);
    pods.push(pod("real", 3000));
    let r = run(pods, vec![], vec![p]);
    // The real pod's claim could become a c3-8 (4 cpu): the whole limit is spoken for.
    assert_eq!(types_of(claim_of(&r, "real")), ["c3-8"]);
    assert!(
        reason_of(&r, "capacity-buffer-spare-1")
            .starts_with("all available instance types exceed limits")
    );
}

#[test]
fn assess_tells_limits_from_other_reasons() {
    use crate::buffers::{assess, limited_by_quotas_condition, provisioning_condition};
    let mut p = pool("default");
    p.limits = Some(NodePoolLimits::from_quantities([("cpu", "4")], cpu(4000)).unwrap());
    let mut pods = buffer_pods(1, 1000);
    // A chunk no type can hold at all (16 cpu): not the limits' doing.
    pods.extend(crate::buffers::virtual_pods(
        "default",
        "huge",
        1,
        &pod("shape", 16_000),
    ));
    let input = input(pods, vec![], vec![p]);
    let result = schedule(&input);
    let outcomes = assess(&input, &SchedulingContext::default(), &result);
    let spare = &outcomes["default/spare"];
    assert_eq!(
        (spare.chunks, spare.limited, spare.unschedulable),
        (1, 1, 0)
    );
    let huge = &outcomes["default/huge"];
    assert_eq!((huge.chunks, huge.limited, huge.unschedulable), (1, 0, 1));

    let limited = limited_by_quotas_condition(Some(spare)).unwrap();
    assert!(limited.status);
    assert_eq!(limited.reason, "NodePoolLimitsReached");
    assert!(
        limited.message.contains("exceed limits"),
        "{}",
        limited.message
    );
    assert!(!limited_by_quotas_condition(Some(huge)).unwrap().status);
    let provisioning = provisioning_condition(true, 1, Some(spare)).unwrap();
    assert!(!provisioning.status);
    assert_eq!(provisioning.reason, "RequiresNewCapacity");
}

#[test]
fn assess_counts_chunks_by_node_and_new_claim() {
    use crate::buffers::{assess, provisioning_condition};
    let input = input(
        buffer_pods(3, 1500),
        vec![node("n1", &[], 4000)],
        vec![pool("default")],
    );
    let result = schedule(&input);
    let outcome = &assess(&input, &SchedulingContext::default(), &result)["default/spare"];
    assert_eq!(outcome.on_nodes.get("n1"), Some(&2));
    assert_eq!(outcome.on_new(), 1);
    assert_eq!(
        provisioning_condition(true, 3, Some(outcome))
            .unwrap()
            .reason,
        "RequiresNewCapacity"
    );

    let input = SchedulingInput {
        pods: buffer_pods(2, 1500),
        ..input
    };
    let result = schedule(&input);
    let outcome = &assess(&input, &SchedulingContext::default(), &result)["default/spare"];
    let fits = provisioning_condition(true, 2, Some(outcome)).unwrap();
    assert!(fits.status);
    assert_eq!(fits.reason, "FitsExistingCapacity");
}

#[test]
fn holdings_share_a_node_by_the_room_a_buffer_takes_and_open_nothing() {
    use crate::buffers::holdings;
    // n1 has 4 cpu and a real pending pod of 1 cpu; the buffer's three 1.5-cpu chunks: two
    // fit beside the pod (3 of 4 cpu), the third would need a new node.
    let mut pods = vec![pod("real", 1000)];
    pods.extend(buffer_pods(3, 1500));
    let input = input(pods, vec![node("n1", &[], 4000)], vec![pool("default")]);
    let price = |name: &str| (name == "n1").then_some(0.2);
    let held = &holdings(&input, &SchedulingContext::default(), &price)["default/spare"];
    assert_eq!((held.chunks, held.held), (3, 2));
    let on_n1 = &held.nodes["n1"];
    assert_eq!(on_n1.chunks, 2);
    assert!((on_n1.share - 0.75).abs() < 1e-9, "{}", on_n1.share);
    assert!((held.cost_per_hour() - 0.15).abs() < 1e-9);
}

#[test]
fn a_node_only_buffers_hold_is_charged_to_them_whole() {
    use crate::buffers::holdings;
    let mut pods = buffer_pods(1, 1000);
    pods.extend(crate::buffers::virtual_pods(
        "default",
        "other",
        1,
        &pod("shape", 3000),
    ));
    let input = input(pods, vec![node("n1", &[], 4000)], vec![]);
    let price = |_: &str| Some(0.2);
    let held = holdings(&input, &SchedulingContext::default(), &price);
    // No workload on n1: the buffers pay for all of it, 1 : 3.
    assert!((held["default/spare"].cost_per_hour() - 0.05).abs() < 1e-9);
    assert!((held["default/other"].cost_per_hour() - 0.15).abs() < 1e-9);
}
