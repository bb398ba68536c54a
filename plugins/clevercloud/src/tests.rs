//! Unit tests against a fake host whose Kubernetes import holds NodeGroups in memory and
//! plays CKE's answers.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use joinery_plugin_sdk::cloud::{
    CloudError, CloudProvider, CreateRequest, InstanceState, KeyValue, NodeClaim, NodeClass,
    Operator, Requirement, Resource,
};
use joinery_plugin_sdk::kube::{KubeCall, KubeError};
use joinery_plugin_sdk::testing::{self, FakeHost};
use serde_json::{Value, json};

use super::*;

const CONFIG: &str =
    r#"{"clusterName": "prod", "acceptanceTimeoutSeconds": 5, "acceptancePollMillis": 1000}"#;

/// What CKE answers when a new group is read back.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Cke {
    /// `Synced` after this many reads.
    AcceptAfter(usize),
    /// `QuotaExceeded` after this many reads.
    RefuseAfter(usize),
    /// Gone after this many reads.
    VanishAfter(usize),
    /// Never decides.
    Silent,
}

#[derive(Default)]
struct World {
    groups: BTreeMap<String, Value>,
    reads: BTreeMap<String, usize>,
    calls: Vec<KubeCall>,
    events: Vec<Value>,
}

type Shared = Rc<RefCell<World>>;

fn install(cke: Cke) -> (testing::FakeHostGuard, Shared) {
    install_with(cke, CONFIG)
}

fn install_with(cke: Cke, config: &str) -> (testing::FakeHostGuard, Shared) {
    let world: Shared = Rc::default();
    let w = world.clone();
    let host = FakeHost::new().with_config(config).with_kube(move |call| {
        let mut w = w.borrow_mut();
        w.calls.push(call.clone());
        match call {
            KubeCall::Create { target, body } if target.resource == "events" => {
                w.events.push(serde_json::from_str(body).unwrap());
                Ok(body.clone())
            }
            KubeCall::Create { body, .. } => {
                let mut group: Value = serde_json::from_str(body).unwrap();
                let name = group["metadata"]["name"].as_str().unwrap().to_string();
                if w.groups.contains_key(&name) {
                    return Err(KubeError::Conflict(format!("nodegroups {name} already exists")));
                }
                group["metadata"]["uid"] = json!(format!("uid-ng-{name}"));
                group["metadata"]["creationTimestamp"] = json!("2026-12-02T10:00:00Z");
                w.groups.insert(name, group.clone());
                Ok(group.to_string())
            }
            KubeCall::Get { name, .. } => {
                let reads = {
                    let r = w.reads.entry(name.clone()).or_default();
                    *r += 1;
                    *r
                };
                let Some(group) = w.groups.get_mut(name) else { return Err(KubeError::NotFound(format!("nodegroups {name} not found"))) };
                match cke {
                    Cke::AcceptAfter(n) if reads >= n => {
                        group["status"] = json!({"phase": "Synced", "conditions": [{"type": "Ready", "status": "True", "reason": "Synced"}]})
                    }
                    Cke::RefuseAfter(n) if reads >= n => {
                        group["status"] = json!({"phase": "QuotaExceeded", "conditions": [
                            {"type": "ReconcileFailed", "status": "True", "reason": "QuotaExceeded",
                             "message": "Quota exceeded: RAM max: limit = 40.0 GB | actual = 48.0 GB"}]})
                    }
                    Cke::VanishAfter(n) if reads >= n => {
                        w.groups.remove(name);
                        return Err(KubeError::NotFound(format!("nodegroups {name} not found")));
                    }
                    _ => {}
                }
                Ok(w.groups[name].to_string())
            }
            KubeCall::List { label_selector, .. } => {
                let wanted: Vec<(String, String)> = label_selector
                    .as_deref()
                    .unwrap_or_default()
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| s.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())).unwrap())
                    .collect();
                let items: Vec<&Value> = w
                    .groups
                    .values()
                    .filter(|g| wanted.iter().all(|(k, v)| g["metadata"]["labels"][k].as_str() == Some(v)))
                    .collect();
                Ok(json!({"items": items}).to_string())
            }
            KubeCall::Delete { name, .. } => match w.groups.get_mut(name) {
                Some(group) => {
                    group["metadata"]["deletionTimestamp"] = json!("2026-12-02T10:05:00Z");
                    Ok(String::new())
                }
                None => Err(KubeError::NotFound(format!("nodegroups {name} not found"))),
            },
            KubeCall::Patch { .. } => Err(KubeError::Denied("patch is not granted".into())),
        }
    });
    (testing::install(host), world)
}

fn claim(name: &str) -> NodeClaim {
    NodeClaim {
        name: name.into(),
        uid: format!("uid-{name}"),
        node_pool: "general".into(),
        labels: vec![
            KeyValue::new("karpenter.sh/nodepool", "general"),
            KeyValue::new("node.kubernetes.io/instance-type", "S"),
            KeyValue::new("team", "checkout"),
            KeyValue::new("clever-cloud.com/flavor", "S"),
            KeyValue::new("note", "not a valid label value!"),
        ],
        annotations: vec![],
        taints: vec![],
        startup_taints: vec![],
        requirements: vec![
            Requirement::new("kubernetes.io/arch", Operator::In, &["amd64"]),
            Requirement::new("karpenter.sh/nodepool", Operator::In, &["general"]),
            Requirement::new("team", Operator::In, &["checkout"]),
        ],
        resource_requests: vec![Resource::new("cpu", "3"), Resource::new("memory", "2Gi")],
        provider_id: None,
    }
}

fn class(spec: &str) -> NodeClass {
    NodeClass::new("default", spec)
}

fn request(name: &str) -> CreateRequest {
    CreateRequest {
        claim: claim(name),
        node_class: class(r#"{"labels": {"tier": "web"}}"#),
        user_data: String::new(),
    }
}

fn kinds(world: &Shared) -> Vec<&'static str> {
    world
        .borrow()
        .calls
        .iter()
        .map(|c| match c {
            KubeCall::Get { .. } => "get",
            KubeCall::List { .. } => "list",
            KubeCall::Create { target, .. } if target.resource == "events" => "event",
            KubeCall::Create { .. } => "create",
            KubeCall::Patch { .. } => "patch",
            KubeCall::Delete { .. } => "delete",
        })
        .collect()
}

#[test]
fn every_flavor_is_an_instance_type_with_cke_sizes_and_one_offering_in_the_zone() {
    let (_host, _) = install(Cke::Silent);
    let types = Clever::get_instance_types(class("{}")).unwrap();
    let names: Vec<&str> = types.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["2XS", "XS", "S", "M", "L", "XL"]);
    let s = &types[2];
    assert!(s.capacity.contains(&Resource::new("cpu", "8")));
    assert!(s.capacity.contains(&Resource::new("memory", "11957148Ki")));
    assert!(
        s.capacity
            .contains(&Resource::new("ephemeral-storage", "40971488Ki"))
    );
    assert!(s.capacity.contains(&Resource::new("pods", "110")));
    assert_eq!(
        s.overhead.kube_reserved,
        vec![Resource::new("memory", "100Mi")]
    );
    assert_eq!(
        s.overhead.eviction_threshold,
        vec![Resource::new("ephemeral-storage", "4097149Ki")]
    );
    assert_eq!(s.offerings.len(), 1);
    assert_eq!(
        (
            s.offerings[0].zone.as_str(),
            s.offerings[0].capacity_type.as_str(),
            s.offerings[0].price
        ),
        ("par", "on-demand", None)
    );
    let has = |key: &str, value: &str| {
        s.requirements
            .iter()
            .any(|r| r.key == key && r.values == [value.to_string()])
    };
    assert!(
        has("clever-cloud.com/flavor", "S") && has("clever-cloud.com/cluster-node-role", "worker")
    );
    assert!(
        has("karpenter.clever-cloud.com/instance-cpu", "8")
            && has("karpenter.clever-cloud.com/instance-memory", "11957148")
    );
    assert!(has("kubernetes.io/arch", "amd64") && has("topology.kubernetes.io/region", "par"));
}

#[test]
fn the_flavor_overlay_pins_and_adds_flavors_and_names_a_bad_entry() {
    let added = r#"{"clusterName": "prod", "flavors": [{"name": "S", "priceHourly": 0.08}, {"name": "3XL", "cpu": 32, "memoryKi": 64000000, "priceHourly": 0.5}]}"#;
    let (_host, _) = install_with(Cke::Silent, added);
    let types = Clever::get_instance_types(class("{}")).unwrap();
    assert_eq!(
        types.iter().find(|t| t.name == "S").unwrap().offerings[0].price,
        Some(0.08)
    );
    assert_eq!(types.last().unwrap().name, "3XL");
    drop(_host);
    let (_host, _) = install_with(
        Cke::Silent,
        r#"{"clusterName": "prod", "flavors": [{"name": "3XL", "cpu": 32}]}"#,
    );
    let err = Clever::get_instance_types(class("{}")).unwrap_err();
    assert!(
        matches!(&err, CloudError::Invalid(m) if m.contains("flavors[0].name") && m.contains("3XL")),
        "{err:?}"
    );
    drop(_host);
    let (_host, _) = install_with(Cke::Silent, "{}");
    let err = Clever::get_instance_types(class("{}")).unwrap_err();
    assert!(
        matches!(&err, CloudError::Invalid(m) if m.contains("clusterName")),
        "{err:?}"
    );
}

#[test]
fn the_cheapest_flavor_that_fits_and_satisfies_the_requirements_is_chosen() {
    let catalog = flavors::catalog(&[]).unwrap();
    let mut c = claim("a");
    assert_eq!(choose_flavor(&catalog, &c, "par").unwrap().name, "2XS");
    c.resource_requests = vec![Resource::new("cpu", "7"), Resource::new("memory", "1Gi")];
    assert_eq!(choose_flavor(&catalog, &c, "par").unwrap().name, "S");
    // S shows 11957148Ki minus 100Mi reserved: 11.3 GiB do not fit, M's 15 GiB do.
    c.resource_requests = vec![Resource::new("memory", "11.5Gi")];
    assert_eq!(choose_flavor(&catalog, &c, "par").unwrap().name, "M");
    c.resource_requests = vec![Resource::new("cpu", "1")];
    c.requirements.push(Requirement::new(
        "node.kubernetes.io/instance-type",
        Operator::In,
        &["L", "M"],
    ));
    assert_eq!(choose_flavor(&catalog, &c, "par").unwrap().name, "M");
    c.requirements.push(Requirement::new(
        "topology.kubernetes.io/zone",
        Operator::In,
        &["rbx"],
    ));
    assert_eq!(choose_flavor(&catalog, &c, "par"), None);
    let mut big = claim("b");
    big.resource_requests = vec![Resource::new("cpu", "17")];
    assert_eq!(choose_flavor(&catalog, &big, "par"), None);
    big.resource_requests = vec![Resource::new("nvidia.com/gpu", "1")];
    assert_eq!(
        choose_flavor(&catalog, &big, "par"),
        None,
        "no flavor has GPUs"
    );
}

#[test]
fn an_accepted_create_writes_one_nodegroup_named_like_the_claim() {
    let (_host, world) = install(Cke::AcceptAfter(2));
    let instance = Clever::create(request("web-abc12")).unwrap();
    assert_eq!(instance.provider_id, "clevercloud://web-abc12");
    assert_eq!(instance.instance_type, "2XS");
    assert_eq!(
        (instance.zone.as_str(), instance.capacity_type.as_str()),
        ("par", "on-demand")
    );
    assert_eq!(instance.state, InstanceState::Running);
    assert_eq!(instance.node_claim.as_deref(), Some("web-abc12"));
    assert!(
        instance
            .labels
            .contains(&KeyValue::new("joinery.dev/cluster", "prod"))
    );
    assert_eq!(kinds(&world), ["create", "get", "get"]);
    let w = world.borrow();
    let group = &w.groups["web-abc12"];
    assert_eq!(group["spec"]["flavor"], "2XS");
    assert_eq!(group["spec"]["nodeCount"], 1);
    assert_eq!(
        group["spec"]["taints"],
        json!([{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}])
    );
    // NodeClass labels and the claim's, without kubernetes.io keys, CKE's prefix or invalid values.
    assert_eq!(
        group["spec"]["labels"],
        json!({"karpenter.sh/nodepool": "general", "team": "checkout", "tier": "web"})
    );
    let labels = &group["metadata"]["labels"];
    assert_eq!(labels["karpenter.clever-cloud.com/managed"], "true");
    assert_eq!(labels["karpenter.clever-cloud.com/nodeclaim"], "web-abc12");
    assert_eq!(labels["karpenter.clever-cloud.com/nodepool"], "general");
    assert_eq!(labels["karpenter.clever-cloud.com/nodeclass"], "default");
    assert_eq!(labels["joinery.dev/cluster"], "prod");
    assert_eq!(
        group["metadata"]["annotations"]["karpenter.clever-cloud.com/clevernodeclass-hash"],
        nodegroup::spec_hash(r#"{"labels": {"tier": "web"}}"#)
    );
    assert_eq!(
        group["metadata"]["ownerReferences"][0],
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": "web-abc12", "uid": "uid-web-abc12", "blockOwnerDeletion": true})
    );
    assert!(w.events.is_empty());
    assert!(
        testing::logs().iter().any(|(_, m)| m.contains("note=")),
        "the refused label is logged"
    );
}

#[test]
fn a_quota_refusal_deletes_the_group_reports_it_once_and_fails_fast_until_a_deletion() {
    let (_host, world) = install(Cke::RefuseAfter(1));
    let err = Clever::create(request("web-1")).unwrap_err();
    let CloudError::InsufficientCapacity(ice) = &err else {
        panic!("{err:?}")
    };
    assert!(
        ice.message
            .contains("Quota exceeded: RAM max: limit = 40.0 GB | actual = 48.0 GB"),
        "{}",
        ice.message
    );
    // 2XS was refused: it and every flavor at least as large in vCPU and memory (all of them).
    let refused: Vec<&str> = ice
        .offerings
        .iter()
        .map(|o| o.instance_type.as_str())
        .collect();
    assert_eq!(refused, ["2XS", "XS", "S", "M", "L", "XL"]);
    assert!(
        ice.offerings
            .iter()
            .all(|o| o.zone == "par" && o.capacity_type == "on-demand")
    );
    assert_eq!(kinds(&world), ["create", "get", "delete", "event"]);
    {
        let w = world.borrow();
        assert_eq!(w.events.len(), 1);
        let event = &w.events[0];
        assert_eq!(
            (event["reason"].as_str(), event["type"].as_str()),
            (Some("NodeGroupQuotaExceeded"), Some("Warning"))
        );
        assert_eq!(
            event["message"],
            "Quota exceeded: RAM max: limit = 40.0 GB | actual = 48.0 GB"
        );
        assert_eq!(
            event["involvedObject"],
            json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": "web-1", "uid": "uid-web-1"})
        );
        assert_eq!(event["metadata"]["namespace"], "default");
    }
    // The backoff: the next create fails at once, without a call and without another event.
    world.borrow_mut().calls.clear();
    let err = Clever::create(request("web-2")).unwrap_err();
    assert!(
        matches!(&err, CloudError::InsufficientCapacity(i) if i.message.contains("backoff") && i.offerings.len() == 6),
        "{err:?}"
    );
    assert!(kinds(&world).is_empty());
    // A real deletion frees quota and clears the backoff.
    world
        .borrow_mut()
        .groups
        .insert("old".into(), managed_group_json("old", "S", "prod"));
    Clever::delete("clevercloud://old".into()).unwrap();
    world.borrow_mut().calls.clear();
    let _ = Clever::create(request("web-3"));
    assert_eq!(kinds(&world).first(), Some(&"create"));
}

#[test]
fn a_group_that_vanishes_before_acceptance_is_insufficient_capacity_with_backoff() {
    let (_host, world) = install(Cke::VanishAfter(2));
    let err = Clever::create(request("web-1")).unwrap_err();
    assert!(
        matches!(&err, CloudError::InsufficientCapacity(i) if i.message.contains("disappeared")),
        "{err:?}"
    );
    assert_eq!(world.borrow().events[0]["reason"], "NodeGroupVanished");
    assert!(
        matches!(Clever::create(request("web-2")).unwrap_err(), CloudError::InsufficientCapacity(i) if i.message.contains("backoff"))
    );
}

#[test]
fn no_verdict_in_time_is_an_optimistic_launch_with_an_event() {
    let (_host, world) = install(Cke::Silent);
    let instance = Clever::create(request("web-1")).unwrap();
    assert_eq!(instance.state, InstanceState::Pending);
    // 5 s at one read per second.
    assert_eq!(
        kinds(&world),
        ["create", "get", "get", "get", "get", "get", "event"]
    );
    assert_eq!(
        world.borrow().events[0]["reason"],
        "NodeGroupAcceptanceTimeout"
    );
    assert!(
        testing::with_host(|h| h.cache.is_empty()),
        "a timeout arms no backoff"
    );
}

#[test]
fn a_retried_create_adopts_its_own_group_and_refuses_a_strangers() {
    let (_host, world) = install(Cke::AcceptAfter(1));
    Clever::create(request("web-1")).unwrap();
    // The same claim again (a lost answer): its own group is taken as is.
    let again = Clever::create(request("web-1")).unwrap();
    assert_eq!(again.provider_id, "clevercloud://web-1");
    assert_eq!(world.borrow().groups.len(), 1);
    // A group of that name owned by another claim.
    let mut stranger = request("web-1");
    stranger.claim.uid = "uid-other".into();
    let err = Clever::create(stranger).unwrap_err();
    assert!(
        matches!(&err, CloudError::Invalid(m) if m.contains("not this NodeClaim's")),
        "{err:?}"
    );
}

fn managed_group_json(name: &str, flavor: &str, cluster: &str) -> Value {
    json!({
        "apiVersion": "api.clever-cloud.com/v1", "kind": "NodeGroup",
        "metadata": {"name": name, "uid": format!("uid-ng-{name}"), "creationTimestamp": "2026-12-02T09:00:00Z",
            "labels": {"karpenter.clever-cloud.com/managed": "true", "karpenter.clever-cloud.com/nodeclaim": name, "joinery.dev/cluster": cluster},
            "annotations": {"karpenter.clever-cloud.com/clevernodeclass-hash": nodegroup::spec_hash("{}")}},
        "spec": {"flavor": flavor, "nodeCount": 1},
        "status": {"phase": "Synced", "conditions": [{"type": "Ready", "status": "True", "reason": "Synced"}]},
    })
}

#[test]
fn get_and_list_see_only_live_groups_managed_for_this_cluster() {
    let (_host, world) = install(Cke::Silent);
    {
        let mut w = world.borrow_mut();
        w.groups
            .insert("mine".into(), managed_group_json("mine", "M", "prod"));
        w.groups.insert(
            "other-cluster".into(),
            managed_group_json("other-cluster", "M", "staging"),
        );
        let mut unmanaged = managed_group_json("hand-made", "S", "prod");
        unmanaged["metadata"]["labels"] = json!({});
        w.groups.insert("hand-made".into(), unmanaged);
        let mut leaving = managed_group_json("leaving", "S", "prod");
        leaving["metadata"]["deletionTimestamp"] = json!("2026-12-02T10:00:00Z");
        w.groups.insert("leaving".into(), leaving);
    }
    let mine = Clever::get("clevercloud://mine".into()).unwrap();
    assert_eq!(
        (mine.instance_type.as_str(), mine.state),
        ("M", InstanceState::Running)
    );
    assert!(mine.capacity.contains(&Resource::new("cpu", "10")));
    assert_eq!(mine.created_at.as_deref(), Some("2026-12-02T09:00:00Z"));
    for gone in ["other-cluster", "hand-made", "leaving", "absent"] {
        let err = Clever::get(format!("clevercloud://{gone}")).unwrap_err();
        assert!(matches!(err, CloudError::NotFound(_)), "{gone}: {err:?}");
    }
    assert!(matches!(
        Clever::get("exoscale://mine".into()).unwrap_err(),
        CloudError::Invalid(_)
    ));
    let listed: Vec<String> = Clever::list()
        .unwrap()
        .into_iter()
        .map(|i| i.provider_id)
        .collect();
    assert_eq!(listed, ["clevercloud://mine"]);
}

#[test]
fn delete_touches_only_managed_groups_and_a_terminating_group_is_gone() {
    let (_host, world) = install(Cke::Silent);
    {
        let mut w = world.borrow_mut();
        w.groups
            .insert("mine".into(), managed_group_json("mine", "M", "prod"));
        w.groups.insert(
            "theirs".into(),
            managed_group_json("theirs", "M", "staging"),
        );
    }
    assert!(matches!(
        Clever::delete("clevercloud://theirs".into()).unwrap_err(),
        CloudError::NotFound(_)
    ));
    assert!(matches!(
        Clever::delete("clevercloud://absent".into()).unwrap_err(),
        CloudError::NotFound(_)
    ));
    assert!(
        !kinds(&world).contains(&"delete"),
        "nothing unmanaged is deleted"
    );
    Clever::delete("clevercloud://mine".into()).unwrap();
    assert_eq!(kinds(&world).iter().filter(|k| **k == "delete").count(), 1);
    // Deleting again while CKE tears it down: gone for the host, no second call.
    assert!(matches!(
        Clever::delete("clevercloud://mine".into()).unwrap_err(),
        CloudError::NotFound(_)
    ));
    assert_eq!(kinds(&world).iter().filter(|k| **k == "delete").count(), 1);
    assert!(matches!(
        Clever::get("clevercloud://mine".into()).unwrap_err(),
        CloudError::NotFound(_)
    ));
}

#[test]
fn drift_compares_the_groups_hash_with_the_current_class_spec() {
    let (_host, world) = install(Cke::Silent);
    world
        .borrow_mut()
        .groups
        .insert("mine".into(), managed_group_json("mine", "M", "prod"));
    let mut c = claim("mine");
    c.provider_id = Some("clevercloud://mine".into());
    assert_eq!(Clever::is_drifted(c.clone(), class("{}")).unwrap(), None);
    assert_eq!(
        Clever::is_drifted(c.clone(), class(r#"{"labels": {"tier": "db"}}"#))
            .unwrap()
            .as_deref(),
        Some("NodeClassDrifted")
    );
    c.provider_id = None;
    assert_eq!(
        Clever::is_drifted(c, class(r#"{"labels": {"tier": "db"}}"#)).unwrap(),
        None
    );
    assert_eq!(
        nodegroup::spec_hash(r#"{"labels": {"a": "1", "b": "2"}}"#),
        nodegroup::spec_hash(r#"{"labels":{"b":"2","a":"1"}}"#),
        "key order and spacing do not matter"
    );
}

#[test]
fn resolution_reports_refused_labels_and_whether_nodegroups_are_served() {
    let (_host, _) = install(Cke::Silent);
    let ok = Clever::resolve_node_class(class(r#"{"labels": {"tier": "web"}}"#)).unwrap();
    assert!(
        ok.conditions.iter().all(|c| c.status == "True"),
        "{:?}",
        ok.conditions
    );
    let bad = Clever::resolve_node_class(class(r#"{"labels": {"clever-cloud.com/x": "y", "long": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}}"#)).unwrap();
    let labels = bad
        .conditions
        .iter()
        .find(|c| c.type_ == "LabelsValid")
        .unwrap();
    assert_eq!(labels.status, "False");
    assert!(
        labels
            .message
            .contains("clever-cloud.com/x: reserved prefix")
            && labels.message.contains("long: value longer than 63"),
        "{}",
        labels.message
    );
    let err = Clever::resolve_node_class(class(r#"{"unknown": 1}"#)).unwrap_err();
    assert!(matches!(err, CloudError::Invalid(_)));
    drop(_host);
    let denied = FakeHost::new().with_config(CONFIG).with_kube(|_| {
        Err(KubeError::Denied(
            "list on nodegroups is not granted".into(),
        ))
    });
    let _host = testing::install(denied);
    let r = Clever::resolve_node_class(class("{}")).unwrap();
    let served = r
        .conditions
        .iter()
        .find(|c| c.type_ == "NodeGroupsServed")
        .unwrap();
    assert_eq!(served.status, "False");
    assert!(served.message.contains("not granted"), "{}", served.message);
}

#[test]
fn cke_label_rules() {
    assert_eq!(nodegroup::label_problem("team", "checkout"), None);
    assert_eq!(
        nodegroup::label_problem("karpenter.sh/nodepool", "general"),
        None
    );
    assert_eq!(
        nodegroup::label_problem("node.kubernetes.io/instance-type", "S"),
        Some("reserved prefix")
    );
    assert_eq!(
        nodegroup::label_problem("topology.kubernetes.io/zone", "par"),
        Some("reserved prefix")
    );
    assert_eq!(
        nodegroup::label_problem("clever-cloud.com/flavor", "S"),
        Some("reserved prefix")
    );
    assert_eq!(
        nodegroup::label_problem("a", &"x".repeat(64)),
        Some("value longer than 63 characters")
    );
    assert_eq!(
        nodegroup::label_problem("a", "-x"),
        Some("value is not a valid label value")
    );
    assert_eq!(
        nodegroup::label_problem("a", "x y"),
        Some("value is not a valid label value")
    );
    assert_eq!(
        nodegroup::label_problem("a", ""),
        None,
        "an empty value is valid"
    );
}

#[test]
fn rfc3339_timestamps_are_well_formed() {
    let now = now_rfc3339();
    assert_eq!(now.len(), 20, "{now}");
    assert!(
        now.starts_with("20") && now.ends_with('Z') && now.as_bytes()[10] == b'T',
        "{now}"
    );
}

#[test]
fn during_the_backoff_a_flavor_smaller_than_the_refused_one_is_still_tried() {
    let (_host, world) = install(Cke::RefuseAfter(1));
    let mut needs_s = request("big");
    needs_s.claim.resource_requests = vec![Resource::new("cpu", "7")];
    let err = Clever::create(needs_s.clone()).unwrap_err();
    let CloudError::InsufficientCapacity(ice) = &err else {
        panic!("{err:?}")
    };
    let refused: Vec<&str> = ice
        .offerings
        .iter()
        .map(|o| o.instance_type.as_str())
        .collect();
    assert_eq!(
        refused,
        ["S", "M", "L", "XL"],
        "S and the flavors that dominate it"
    );
    // S again: fails fast, no call.
    world.borrow_mut().calls.clear();
    needs_s.claim.name = "big-2".into();
    assert!(
        matches!(Clever::create(needs_s).unwrap_err(), CloudError::InsufficientCapacity(i) if i.message.contains("backoff"))
    );
    assert!(kinds(&world).is_empty());
    // 2XS is smaller in both: CKE is asked.
    let _ = Clever::create(request("small"));
    assert_eq!(kinds(&world).first(), Some(&"create"));
}

#[test]
fn repair_policies_are_ready_for_ten_minutes_and_there_is_no_reboot() {
    let policies = Clever::repair_policies()
        .unwrap()
        .expect("its own policies");
    assert!(
        policies
            .iter()
            .all(|p| p.condition_type == "Ready" && p.toleration_seconds == 600)
    );
    assert_eq!(policies.len(), 2);
    assert!(matches!(
        Clever::reboot("clevercloud://x".into()).unwrap_err(),
        CloudError::Unsupported(_)
    ));
}
