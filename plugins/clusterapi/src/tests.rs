//! Unit tests against a fake host whose Kubernetes import is a small management cluster:
//! MachineDeployments and Machines with resourceVersions (a stale write is a conflict), and a
//! MachineSet stand-in that adds a Machine when replicas grow.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use joinery_plugin_sdk::cloud::{
    CloudError, CloudProvider, CreateRequest, InstanceState, NodeClaim, NodeClass, Operator,
    Requirement, Resource,
};
use joinery_plugin_sdk::kube::{KubeCall, KubeError};
use joinery_plugin_sdk::testing::{self, FakeHost};
use serde_json::{Value, json};

use super::*;

const CONFIG: &str = r#"{"clusterName": "prod", "claimTimeoutSeconds": 3, "pollMillis": 1000}"#;

#[derive(Default)]
struct World {
    deployments: BTreeMap<String, Value>,
    machines: BTreeMap<String, Value>,
    version: u64,
    /// New Machines get a provider ID at once.
    provision: bool,
    /// The next patches of these `resource/name` answer 409 (each entry once).
    conflicts: Vec<String>,
    /// Patches of MachineDeployments fail with `invalid` (a refused scale).
    refuse_scale: bool,
    writes: Vec<String>,
}

type Shared = Rc<RefCell<World>>;

fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

fn selector_matches(selector: Option<&str>, labels: &Value) -> bool {
    selector
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .all(|part| match part.split_once('=') {
            Some((k, v)) => labels[k].as_str() == Some(v),
            None => !labels[part].is_null(),
        })
}

impl World {
    fn bump(&mut self, object: &mut Value) {
        self.version += 1;
        object["metadata"]["resourceVersion"] = json!(self.version.to_string());
    }

    fn add_deployment(&mut self, mut md: Value) {
        self.bump(&mut md);
        let k = key(
            md["metadata"]["namespace"].as_str().unwrap(),
            md["metadata"]["name"].as_str().unwrap(),
        );
        self.deployments.insert(k, md);
    }

    fn add_machine(
        &mut self,
        namespace: &str,
        name: &str,
        deployment: &str,
        provider_id: Option<&str>,
        extra_labels: Value,
    ) {
        let mut labels = json!({"cluster.x-k8s.io/deployment-name": deployment, "cluster.x-k8s.io/cluster-name": "capi-ovh"});
        for (k, v) in extra_labels.as_object().unwrap() {
            labels[k] = v.clone();
        }
        let mut machine = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Machine",
            "metadata": {"name": name, "namespace": namespace, "labels": labels, "annotations": {}, "creationTimestamp": "2026-12-02T10:00:00Z"},
            "spec": {"clusterName": "capi-ovh"},
            "status": {"phase": if provider_id.is_some() { "Running" } else { "Provisioning" }},
        });
        if let Some(id) = provider_id {
            machine["spec"]["providerID"] = json!(id);
        }
        self.bump(&mut machine);
        self.machines.insert(key(namespace, name), machine);
    }

    fn machines_of(&self, deployment: &str) -> usize {
        self.machines
            .values()
            .filter(|m| m["metadata"]["labels"]["cluster.x-k8s.io/deployment-name"] == deployment)
            .count()
    }

    fn handle(&mut self, call: &KubeCall) -> Result<String, KubeError> {
        match call {
            KubeCall::List {
                target,
                label_selector,
            } => {
                let store = if target.resource == "machines" {
                    &self.machines
                } else {
                    &self.deployments
                };
                let items: Vec<&Value> = store
                    .values()
                    .filter(|o| {
                        selector_matches(label_selector.as_deref(), &o["metadata"]["labels"])
                    })
                    .collect();
                Ok(json!({"items": items}).to_string())
            }
            KubeCall::Get { target, name } => {
                let k = key(target.namespace.as_deref().unwrap_or_default(), name);
                let store = if target.resource == "machines" {
                    &self.machines
                } else {
                    &self.deployments
                };
                store.get(&k).map(|o| o.to_string()).ok_or_else(|| {
                    KubeError::NotFound(format!("{} {k} not found", target.resource))
                })
            }
            KubeCall::Patch {
                target, name, body, ..
            } => {
                let namespace = target.namespace.clone().unwrap_or_default();
                let k = key(&namespace, name);
                self.writes.push(format!("{} {k} {body}", target.resource));
                let conflict = format!("{}/{name}", target.resource);
                if let Some(i) = self.conflicts.iter().position(|c| *c == conflict) {
                    self.conflicts.remove(i);
                    self.version += 1;
                    if let Some(o) = self
                        .machines
                        .get_mut(&k)
                        .or_else(|| self.deployments.get_mut(&k))
                    {
                        o["metadata"]["resourceVersion"] = json!(self.version.to_string());
                    }
                    return Err(KubeError::Conflict(format!(
                        "{conflict}: the object has been modified"
                    )));
                }
                if target.resource == "machinedeployments" && self.refuse_scale {
                    return Err(KubeError::Invalid("replicas refused".into()));
                }
                let patch: Value = serde_json::from_str(body).unwrap();
                let machines = target.resource == "machines";
                let mut object = if machines {
                    self.machines.get(&k)
                } else {
                    self.deployments.get(&k)
                }
                .cloned()
                .ok_or_else(|| KubeError::NotFound(format!("{k} not found")))?;
                let wanted = patch["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default();
                if wanted
                    != object["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap_or_default()
                {
                    return Err(KubeError::Conflict(format!(
                        "{k}: stale resourceVersion {wanted}"
                    )));
                }
                merge(&mut object, &patch);
                self.bump(&mut object);
                if machines {
                    self.machines.insert(k, object.clone());
                } else {
                    let replicas = object["spec"]["replicas"].as_i64().unwrap_or(0) as usize;
                    self.deployments.insert(k, object.clone());
                    // The MachineSet controller: one new Machine per missing replica.
                    while self.machines_of(name) < replicas {
                        let n = self.machines_of(name);
                        let machine = format!("{name}-m{n}");
                        let id = format!("openstack:///{machine}");
                        let provision = self.provision;
                        self.add_machine(
                            &namespace,
                            &machine,
                            name,
                            provision.then_some(id.as_str()),
                            json!({}),
                        );
                    }
                }
                Ok(object.to_string())
            }
            KubeCall::Create { .. } | KubeCall::Delete { .. } => {
                Err(KubeError::Denied("not granted".into()))
            }
        }
    }
}

/// RFC 7386 merge.
fn merge(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

fn deployment(name: &str, cpu: &str, memory: &str, instance_type: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineDeployment",
        "metadata": {"name": name, "namespace": "capi", "labels": {"node.cluster.x-k8s.io/karpenter-member": ""},
            "annotations": {
                "capacity.cluster-autoscaler.kubernetes.io/cpu": cpu,
                "capacity.cluster-autoscaler.kubernetes.io/memory": memory,
                "capacity.cluster-autoscaler.kubernetes.io/maxPods": "110",
                "capacity.cluster-autoscaler.kubernetes.io/labels":
                    format!("kubernetes.io/arch=amd64,topology.kubernetes.io/zone=nova,node.kubernetes.io/instance-type={instance_type},karpenter.sh/capacity-type=on-demand"),
            }},
        "spec": {"clusterName": "capi-ovh", "replicas": replicas,
            "template": {"metadata": {"labels": {"node-role.kubernetes.io/worker": "", "app": "not-propagated"}}}},
    })
}

/// The blog's three MachineDeployments, at zero replicas.
fn blog() -> World {
    let mut w = World {
        provision: true,
        ..Default::default()
    };
    w.add_deployment(deployment("capi-ovh-karpenter-c3-4", "2", "4G", "c3-4", 0));
    w.add_deployment(deployment("capi-ovh-karpenter-c3-8", "4", "8G", "c3-8", 0));
    w.add_deployment(deployment(
        "capi-ovh-karpenter-c3-16",
        "8",
        "16G",
        "c3-16",
        0,
    ));
    w
}

fn install(world: World, config: &str) -> (testing::FakeHostGuard, Shared) {
    let shared: Shared = Rc::new(RefCell::new(world));
    let s = shared.clone();
    let host = FakeHost::new().with_config(config).with_kube(move |call| {
        assert_eq!(
            match call {
                KubeCall::List { target, .. }
                | KubeCall::Get { target, .. }
                | KubeCall::Patch { target, .. } => target.cluster.as_str(),
                _ => "management",
            },
            "management",
            "every call goes to the management cluster"
        );
        s.borrow_mut().handle(call)
    });
    (testing::install(host), shared)
}

fn class(spec: Value) -> NodeClass {
    NodeClass::new("default", spec.to_string())
}

fn claim(name: &str, types: &[&str], cpu: &str) -> NodeClaim {
    let mut requirements = vec![Requirement::new(
        "karpenter.sh/capacity-type",
        Operator::In,
        &["on-demand"],
    )];
    if !types.is_empty() {
        requirements.push(Requirement::new(
            "node.kubernetes.io/instance-type",
            Operator::In,
            types,
        ));
    }
    requirements.push(Requirement::new(
        "karpenter.sh/nodepool",
        Operator::In,
        &["default"],
    ));
    NodeClaim {
        name: name.into(),
        uid: format!("uid-{name}"),
        node_pool: "default".into(),
        labels: vec![],
        annotations: vec![],
        taints: vec![],
        startup_taints: vec![],
        requirements,
        resource_requests: vec![Resource::new("cpu", cpu)],
        provider_id: None,
    }
}

fn request(name: &str, types: &[&str], cpu: &str) -> CreateRequest {
    CreateRequest {
        claim: claim(name, types, cpu),
        node_class: class(json!({})),
        user_data: String::new(),
    }
}

fn replicas(world: &Shared, md: &str) -> i64 {
    world.borrow().deployments[&key("capi", md)]["spec"]["replicas"]
        .as_i64()
        .unwrap()
}

#[test]
fn each_selected_member_machine_deployment_is_an_instance_type() {
    let mut w = blog();
    // Not members: no label, or a non-empty value.
    let mut outsider = deployment("md-0", "4", "8G", "c3-8x", 1);
    outsider["metadata"]["labels"] = json!({});
    w.add_deployment(outsider);
    let mut wrong_value = deployment("md-1", "4", "8G", "c3-8y", 1);
    wrong_value["metadata"]["labels"]["node.cluster.x-k8s.io/karpenter-member"] = json!("true");
    w.add_deployment(wrong_value);
    let (_host, _) = install(w, CONFIG);
    let types = ClusterApi::get_instance_types(class(json!({}))).unwrap();
    let names: Vec<&str> = types.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        ["c3-16", "c3-4", "c3-8"],
        "sorted by MachineDeployment name"
    );
    let c3_8 = types.iter().find(|t| t.name == "c3-8").unwrap();
    assert!(
        c3_8.capacity.contains(&Resource::new("cpu", "4"))
            && c3_8.capacity.contains(&Resource::new("memory", "8G"))
    );
    assert!(c3_8.capacity.contains(&Resource::new("pods", "110")));
    assert_eq!(
        (
            c3_8.offerings[0].zone.as_str(),
            c3_8.offerings[0].capacity_type.as_str()
        ),
        ("nova", "on-demand")
    );
    assert_eq!(
        c3_8.offerings[0].price, None,
        "no price annotation: the pricing plugin prices it"
    );
    assert!(c3_8.offerings[0].available);
    let has = |key: &str, value: &str| {
        c3_8.requirements
            .iter()
            .any(|r| r.key == key && r.values == [value.to_string()])
    };
    assert!(has("kubernetes.io/arch", "amd64") && has("node-role.kubernetes.io/worker", ""));
    assert!(
        !c3_8.requirements.iter().any(|r| r.key == "app"),
        "only the labels CAPI propagates"
    );
}

#[test]
fn the_selector_prices_maximum_size_and_gpus_come_from_the_machine_deployment() {
    let mut w = World::default();
    let mut gpu = deployment("gpu", "8", "32Gi", "g1", 2);
    let a = gpu["metadata"]["annotations"].as_object_mut().unwrap();
    a.insert(
        "capacity.cluster-autoscaler.kubernetes.io/gpu-count".into(),
        json!("1"),
    );
    a.insert(
        "capacity.cluster-autoscaler.kubernetes.io/gpu-type".into(),
        json!("nvidia.com/gpu"),
    );
    a.insert(
        "cluster.x-k8s.io/machine-current-price".into(),
        json!("1.25"),
    );
    a.insert(
        "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size".into(),
        json!("2"),
    );
    gpu["metadata"]["labels"]["pool"] = json!("gpu");
    w.add_deployment(gpu);
    let mut general = deployment("general", "4", "8G", "c3-8", 0);
    general["metadata"]["labels"]["pool"] = json!("general");
    w.add_deployment(general);
    let (_host, _) = install(w, CONFIG);
    let only_gpu = class(json!({"scalableResourceSelector": {"matchLabels": {"pool": "gpu"}}}));
    let types = ClusterApi::get_instance_types(only_gpu).unwrap();
    assert_eq!(types.len(), 1);
    assert!(
        types[0]
            .capacity
            .contains(&Resource::new("nvidia.com/gpu", "1"))
    );
    assert_eq!(types[0].offerings[0].price, Some(1.25));
    assert!(
        !types[0].offerings[0].available,
        "2 replicas at a maximum of 2"
    );
    let not_gpu = class(
        json!({"scalableResourceSelector": {"matchExpressions": [{"key": "pool", "operator": "NotIn", "values": ["gpu"]}]}}),
    );
    let names: Vec<String> = ClusterApi::get_instance_types(not_gpu)
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["c3-8"]);
}

#[test]
fn malformed_annotations_leave_the_machine_deployment_out_and_say_why() {
    let mut w = blog();
    let mut broken = deployment("broken", "two", "8G", "b1", 0);
    broken["metadata"]["annotations"]["capacity.cluster-autoscaler.kubernetes.io/cpu"] =
        json!("two");
    w.add_deployment(broken);
    let mut no_memory = deployment("no-memory", "2", "8G", "b2", 0);
    no_memory["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove("capacity.cluster-autoscaler.kubernetes.io/memory");
    w.add_deployment(no_memory);
    w.add_deployment(deployment("twin", "4", "8G", "c3-8", 0));
    let (_host, _) = install(w, CONFIG);
    assert_eq!(
        ClusterApi::get_instance_types(class(json!({})))
            .unwrap()
            .len(),
        3,
        "the blog's three; the broken ones are left out"
    );
    let resolution = ClusterApi::resolve_node_class(class(json!({}))).unwrap();
    let annotations = resolution
        .conditions
        .iter()
        .find(|c| c.type_ == "CapacityAnnotationsValid")
        .unwrap();
    assert_eq!(annotations.status, "False");
    for needle in [
        "capi/broken",
        "cpu: \"two\" is not a quantity",
        "capi/no-memory",
        "memory is missing",
        "capi/twin",
        "already offered",
    ] {
        assert!(
            annotations.message.contains(needle),
            "{needle}: {}",
            annotations.message
        );
    }
    let found = resolution
        .conditions
        .iter()
        .find(|c| c.type_ == "MachineDeploymentsReady")
        .unwrap();
    assert_eq!(found.status, "True");
}

#[test]
fn an_unreachable_management_cluster_is_a_not_ready_class_not_a_crash() {
    let denied = FakeHost::new().with_config(CONFIG).with_kube(|_| {
        Err(KubeError::Unavailable(
            "no Kubernetes cluster named management is configured".into(),
        ))
    });
    let _host = testing::install(denied);
    let r = ClusterApi::resolve_node_class(class(json!({}))).unwrap();
    assert_eq!(r.conditions[0].status, "False");
    assert_eq!(r.conditions[0].reason, "ManagementClusterUnreachable");
    assert!(
        r.conditions[0].message.contains("--management-kubeconfig"),
        "{}",
        r.conditions[0].message
    );
}

#[test]
fn the_claims_order_picks_the_machine_deployment_not_the_name() {
    let (_host, _) = install(blog(), CONFIG);
    let spec = ClassSpec::default();
    let config = Config {
        cluster_name: "prod".into(),
        ..Config::default()
    };
    let kept = offers(&spec, &deployments(&config).unwrap()).unwrap().kept;
    // The host lists the types cheapest first: c3-8 before c3-16, although "c3-16" < "c3-8".
    let c = claim("a", &["c3-8", "c3-16"], "3");
    assert_eq!(choose(&kept, &c, &config).unwrap().name, "c3-8");
    // 3 vCPU do not fit c3-4.
    let c = claim("b", &["c3-4"], "3");
    assert!(choose(&kept, &c, &config).is_none());
    // No instance-type requirement: name order among those that fit.
    let c = claim("c", &[], "3");
    assert_eq!(choose(&kept, &c, &config).unwrap().name, "c3-16");
}

#[test]
fn create_raises_the_machine_deployment_and_claims_its_new_machine() {
    let (_host, world) = install(blog(), CONFIG);
    let instance = ClusterApi::create(request("default-abc", &["c3-8", "c3-16"], "3")).unwrap();
    assert_eq!(instance.instance_type, "c3-8");
    assert_eq!(
        instance.provider_id,
        "openstack:///capi-ovh-karpenter-c3-8-m0"
    );
    assert_eq!(instance.node_claim.as_deref(), Some("default-abc"));
    assert_eq!(instance.zone, "nova");
    assert!(
        instance
            .labels
            .contains(&KeyValue::new("joinery.dev/cluster", "prod"))
    );
    assert_eq!(replicas(&world, "capi-ovh-karpenter-c3-8"), 1);
    assert_eq!(replicas(&world, "capi-ovh-karpenter-c3-16"), 0);
    let w = world.borrow();
    let labels = &w.machines["capi/capi-ovh-karpenter-c3-8-m0"]["metadata"]["labels"];
    assert_eq!(labels["node.cluster.x-k8s.io/karpenter-member"], "");
    assert_eq!(labels["joinery.dev/nodeclaim"], "default-abc");
    assert_eq!(labels["joinery.dev/cluster"], "prod");
    // Every write named the version it read.
    assert!(
        w.writes
            .iter()
            .all(|write| write.contains("\"resourceVersion\"")),
        "{:?}",
        w.writes
    );
}

#[test]
fn an_unclaimed_machine_left_by_a_restart_is_claimed_without_raising_again() {
    let mut w = blog();
    // Replicas were raised to 1 and the Machine created, then the host restarted before claiming.
    w.add_machine(
        "capi",
        "capi-ovh-karpenter-c3-8-left",
        "capi-ovh-karpenter-c3-8",
        Some("openstack:///left"),
        json!({}),
    );
    let md = w
        .deployments
        .get_mut("capi/capi-ovh-karpenter-c3-8")
        .unwrap();
    md["spec"]["replicas"] = json!(1);
    let (_host, world) = install(w, CONFIG);
    let instance = ClusterApi::create(request("default-abc", &["c3-8"], "3")).unwrap();
    assert_eq!(instance.provider_id, "openstack:///left");
    assert_eq!(
        replicas(&world, "capi-ovh-karpenter-c3-8"),
        1,
        "no extra Machine"
    );
    assert_eq!(world.borrow().machines.len(), 1);
}

#[test]
fn a_claim_that_already_has_its_machine_resumes_with_it() {
    let mut w = blog();
    w.add_machine(
        "capi",
        "mine",
        "capi-ovh-karpenter-c3-8",
        Some("openstack:///mine"),
        json!({"node.cluster.x-k8s.io/karpenter-member": "", "joinery.dev/nodeclaim": "default-abc", "joinery.dev/cluster": "prod"}),
    );
    let (_host, world) = install(w, CONFIG);
    let instance = ClusterApi::create(request("default-abc", &["c3-16"], "3")).unwrap();
    assert_eq!(instance.provider_id, "openstack:///mine");
    assert_eq!(
        instance.instance_type, "c3-8",
        "the Machine's own MachineDeployment, whatever the claim would pick now"
    );
    assert!(
        world.borrow().writes.is_empty(),
        "{:?}",
        world.borrow().writes
    );
}

#[test]
fn conflicts_are_retried_on_fresh_objects() {
    let mut w = blog();
    w.conflicts = vec![
        "machinedeployments/capi-ovh-karpenter-c3-8".into(),
        "machines/capi-ovh-karpenter-c3-8-m0".into(),
    ];
    let (_host, world) = install(w, CONFIG);
    let instance = ClusterApi::create(request("default-abc", &["c3-8"], "3")).unwrap();
    assert_eq!(
        instance.provider_id,
        "openstack:///capi-ovh-karpenter-c3-8-m0"
    );
    assert_eq!(
        replicas(&world, "capi-ovh-karpenter-c3-8"),
        1,
        "raised once, not twice"
    );
    assert!(
        world.borrow().conflicts.is_empty(),
        "both conflicts were met"
    );
}

#[test]
fn a_machine_without_provider_id_stays_claimed_and_the_next_create_resumes() {
    let mut w = blog();
    w.provision = false;
    let (_host, world) = install(w, CONFIG);
    let err = ClusterApi::create(request("default-abc", &["c3-8"], "3")).unwrap_err();
    assert!(
        matches!(&err, CloudError::Retryable(r) if r.message.contains("no provider ID yet")),
        "{err:?}"
    );
    // It is listed under a pending provider ID, owned by the claim.
    let listed = ClusterApi::list().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].provider_id,
        "clusterapi-pending://capi/capi-ovh-karpenter-c3-8-m0"
    );
    assert_eq!(listed[0].state, InstanceState::Pending);
    // The infrastructure provider catches up; the next attempt resumes without raising again.
    world
        .borrow_mut()
        .machines
        .get_mut("capi/capi-ovh-karpenter-c3-8-m0")
        .unwrap()["spec"]["providerID"] = json!("openstack:///late");
    let instance = ClusterApi::create(request("default-abc", &["c3-8"], "3")).unwrap();
    assert_eq!(instance.provider_id, "openstack:///late");
    assert_eq!(replicas(&world, "capi-ovh-karpenter-c3-8"), 1);
}

#[test]
fn delete_marks_exactly_that_machine_and_lowers_replicas() {
    let mut w = blog();
    let member = json!({"node.cluster.x-k8s.io/karpenter-member": "", "joinery.dev/nodeclaim": "busy", "joinery.dev/cluster": "prod"});
    w.add_machine(
        "capi",
        "a-busy",
        "capi-ovh-karpenter-c3-8",
        Some("openstack:///busy"),
        member.clone(),
    );
    let mut empty = member.clone();
    empty["joinery.dev/nodeclaim"] = json!("empty");
    w.add_machine(
        "capi",
        "z-empty",
        "capi-ovh-karpenter-c3-8",
        Some("openstack:///empty"),
        empty,
    );
    w.deployments
        .get_mut("capi/capi-ovh-karpenter-c3-8")
        .unwrap()["spec"]["replicas"] = json!(2);
    let (_host, world) = install(w, CONFIG);
    ClusterApi::delete("openstack:///empty".into()).unwrap();
    {
        let w = world.borrow();
        assert!(!w.machines["capi/z-empty"]["metadata"]["annotations"]["cluster.x-k8s.io/delete-machine"].is_null());
        assert!(
            w.machines["capi/a-busy"]["metadata"]["annotations"]["cluster.x-k8s.io/delete-machine"]
                .is_null(),
            "the busy one is untouched"
        );
    }
    assert_eq!(replicas(&world, "capi-ovh-karpenter-c3-8"), 1);
    // Marked: gone for the host; no second scale-down.
    assert!(matches!(
        ClusterApi::delete("openstack:///empty".into()).unwrap_err(),
        CloudError::NotFound(_)
    ));
    assert_eq!(replicas(&world, "capi-ovh-karpenter-c3-8"), 1);
}

#[test]
fn a_refused_scale_down_unmarks_the_machine() {
    let mut w = blog();
    let member = json!({"node.cluster.x-k8s.io/karpenter-member": "", "joinery.dev/nodeclaim": "c", "joinery.dev/cluster": "prod"});
    w.add_machine(
        "capi",
        "m",
        "capi-ovh-karpenter-c3-8",
        Some("openstack:///m"),
        member,
    );
    w.refuse_scale = true;
    let (_host, world) = install(w, CONFIG);
    assert!(ClusterApi::delete("openstack:///m".into()).is_err());
    assert!(world.borrow().machines["capi/m"]["metadata"]["annotations"]["cluster.x-k8s.io/delete-machine"].is_null());
}

#[test]
fn only_this_clusters_claimed_machines_exist_for_the_plugin() {
    let mut w = blog();
    w.add_machine(
        "capi",
        "unclaimed",
        "capi-ovh-karpenter-c3-8",
        Some("openstack:///unclaimed"),
        json!({}),
    );
    let other = json!({"node.cluster.x-k8s.io/karpenter-member": "", "joinery.dev/nodeclaim": "x", "joinery.dev/cluster": "staging"});
    w.add_machine(
        "capi",
        "other",
        "capi-ovh-karpenter-c3-8",
        Some("openstack:///other"),
        other,
    );
    let mine = json!({"node.cluster.x-k8s.io/karpenter-member": "", "joinery.dev/nodeclaim": "y", "joinery.dev/cluster": "prod"});
    w.add_machine(
        "capi",
        "mine",
        "capi-ovh-karpenter-c3-16",
        Some("openstack:///mine"),
        mine,
    );
    let (_host, world) = install(w, CONFIG);
    let listed: Vec<String> = ClusterApi::list()
        .unwrap()
        .into_iter()
        .map(|i| i.provider_id)
        .collect();
    assert_eq!(listed, ["openstack:///mine"]);
    let mine = ClusterApi::get("openstack:///mine".into()).unwrap();
    assert_eq!(
        (mine.instance_type.as_str(), mine.state),
        ("c3-16", InstanceState::Running)
    );
    for id in [
        "openstack:///unclaimed",
        "openstack:///other",
        "openstack:///nothing",
    ] {
        assert!(
            matches!(
                ClusterApi::get(id.into()).unwrap_err(),
                CloudError::NotFound(_)
            ),
            "{id}"
        );
        assert!(
            matches!(
                ClusterApi::delete(id.into()).unwrap_err(),
                CloudError::NotFound(_)
            ),
            "{id}"
        );
    }
    assert!(
        world.borrow().writes.is_empty(),
        "nothing of anyone else's was touched"
    );
}

#[test]
fn a_machine_whose_deployment_is_no_longer_selected_has_drifted() {
    let mut w = blog();
    let mine = json!({"node.cluster.x-k8s.io/karpenter-member": "", "joinery.dev/nodeclaim": "y", "joinery.dev/cluster": "prod"});
    w.add_machine(
        "capi",
        "mine",
        "capi-ovh-karpenter-c3-16",
        Some("openstack:///mine"),
        mine,
    );
    let (_host, _) = install(w, CONFIG);
    let mut c = claim("y", &[], "1");
    c.provider_id = Some("openstack:///mine".into());
    assert_eq!(
        ClusterApi::is_drifted(c.clone(), class(json!({}))).unwrap(),
        None
    );
    let elsewhere = class(json!({"scalableResourceSelector": {"matchLabels": {"pool": "other"}}}));
    assert_eq!(
        ClusterApi::is_drifted(c, elsewhere).unwrap().as_deref(),
        Some("MachineDeploymentDrifted")
    );
}

#[test]
fn propagated_label_keys_follow_cluster_api() {
    for key in [
        "node-role.kubernetes.io/worker",
        "node-restriction.kubernetes.io/x",
        "a.node-restriction.kubernetes.io/x",
        "node.cluster.x-k8s.io/pool",
        "b.node.cluster.x-k8s.io/y",
    ] {
        assert!(capi::is_propagated(key), "{key}");
    }
    for key in [
        "app",
        "kubernetes.io/arch",
        "x.node-role.kubernetes.io/worker",
        "evilnode.cluster.x-k8s.io/y",
    ] {
        assert!(!capi::is_propagated(key), "{key}");
    }
}

#[test]
fn a_configured_namespace_scopes_every_list() {
    let seen: Rc<RefCell<Vec<Option<String>>>> = Rc::default();
    let s = seen.clone();
    let mut world = blog();
    let host = FakeHost::new()
        .with_config(r#"{"clusterName": "prod", "namespace": "capi"}"#)
        .with_kube(move |call| {
            if let KubeCall::List { target, .. } = call {
                s.borrow_mut().push(target.namespace.clone());
            }
            world.handle(call)
        });
    let _host = testing::install(host);
    ClusterApi::get_instance_types(class(json!({}))).unwrap();
    ClusterApi::list().unwrap();
    let seen = seen.borrow();
    assert!(
        !seen.is_empty() && seen.iter().all(|n| n.as_deref() == Some("capi")),
        "{seen:?}"
    );
}

#[test]
fn a_machine_capi_gave_up_on_fails_the_launch_for_its_type_only() {
    let mut w = blog();
    w.provision = false;
    let (_host, world) = install(w, CONFIG);
    assert!(matches!(
        ClusterApi::create(request("default-abc", &["c3-8"], "3")).unwrap_err(),
        CloudError::Retryable(_)
    ));
    {
        let mut w = world.borrow_mut();
        let m = w
            .machines
            .get_mut("capi/capi-ovh-karpenter-c3-8-m0")
            .unwrap();
        m["status"] = json!({"phase": "Failed", "failureReason": "InsufficientResources", "failureMessage": "no host has room"});
    }
    let err = ClusterApi::create(request("default-abc", &["c3-8"], "3")).unwrap_err();
    let CloudError::InsufficientCapacity(ice) = &err else {
        panic!("{err:?}")
    };
    assert!(
        ice.message
            .contains("InsufficientResources: no host has room"),
        "{}",
        ice.message
    );
    assert_eq!(ice.offerings.len(), 1);
    assert_eq!(
        (
            ice.offerings[0].instance_type.as_str(),
            ice.offerings[0].zone.as_str()
        ),
        ("c3-8", "nova")
    );
    // The failed Machine was released at once: marked, and its replica returned.
    assert_eq!(replicas(&world, "capi-ovh-karpenter-c3-8"), 0);
    assert!(!world.borrow().machines["capi/capi-ovh-karpenter-c3-8-m0"]["metadata"]["annotations"]["cluster.x-k8s.io/delete-machine"].is_null());
    // A later delete of the claim finds it leaving: gone, nothing lowered twice.
    assert!(matches!(
        ClusterApi::delete("clusterapi-pending://capi/capi-ovh-karpenter-c3-8-m0".into())
            .unwrap_err(),
        CloudError::NotFound(_)
    ));
    assert_eq!(replicas(&world, "capi-ovh-karpenter-c3-8"), 0);
}
