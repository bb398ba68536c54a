use super::*;
use serde_json::json;

fn full_pod() -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": "web-1", "namespace": "shop", "uid": "u1", "labels": {"app": "web"},
            "annotations": {LAST_APPLIED: "{…}", "karpenter.sh/do-not-disrupt": "true"},
            "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
        },
        "spec": {
            "nodeName": "n1",
            "containers": [{
                "name": "main", "image": "nginx", "env": [{"name": "A", "value": "b"}],
                "resources": {"requests": {"cpu": "250m"}, "limits": {"memory": "1Gi"}},
                "ports": [{"containerPort": 80}, {"containerPort": 443, "hostPort": 8443, "protocol": "TCP"}],
            }],
            "initContainers": [{"name": "proxy", "image": "envoy", "restartPolicy": "Always"}],
            "volumes": [
                {"name": "config", "configMap": {"name": "c"}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "d"}},
            ],
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "priority": 7,
            "terminationGracePeriodSeconds": 5,
            "serviceAccountName": "sa",
        },
        "status": {
            "phase": "Running", "hostIP": "10.0.0.1", "nominatedNodeName": "n1",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "main", "image": "nginx", "imageID": "x", "ready": true, "restartCount": 0}],
        },
    })
}

#[test]
fn converting_a_full_pod_gives_what_parsing_its_json_gives() {
    let pod: Pod = serde_json::from_value(full_pod()).unwrap();
    let parsed: LeanPod = serde_json::from_value(full_pod()).unwrap();
    assert_eq!(LeanPod::from(&pod), parsed);
    // And a lean pod written out reads back as the same lean pod, and as a valid Pod.
    let text = serde_json::to_value(&parsed).unwrap();
    assert_eq!(
        serde_json::from_value::<LeanPod>(text.clone()).unwrap(),
        parsed
    );
    let mut typed = text.as_object().unwrap().clone();
    typed.insert("apiVersion".into(), json!("v1"));
    typed.insert("kind".into(), json!("Pod"));
    let again: Pod = serde_json::from_value(typed.into()).unwrap();
    assert_eq!(again.spec.unwrap().containers[0].name, "main");
}

#[test]
fn a_resource_list_reads_and_writes_as_a_map_and_finds_by_name() {
    let list: ResourceList =
        serde_json::from_value(json!({"memory": "1Gi", "cpu": "250m", "nvidia.com/gpu": "1"}))
            .unwrap();
    let names: Vec<&str> = list.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(
        names,
        ["cpu", "memory", "nvidia.com/gpu"],
        "kept in name order"
    );
    assert_eq!(list.get("memory").map(|q| q.0.as_str()), Some("1Gi"));
    assert!(list.contains_key("nvidia.com/gpu") && !list.contains_key("pods"));
    assert_eq!(
        serde_json::to_value(&list).unwrap(),
        json!({"cpu": "250m", "memory": "1Gi", "nvidia.com/gpu": "1"})
    );
    let twice: ResourceList = [("cpu", "1"), ("memory", "2Gi"), ("cpu", "2")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), Quantity(v.into())))
        .collect();
    assert_eq!(
        twice.get("cpu").map(|q| q.0.as_str()),
        Some("2"),
        "the last of a repeated name stays, as in a map"
    );
    assert_eq!(twice.iter().count(), 2);
    let e = serde_json::from_value::<ResourceList>(json!(["cpu"]))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("invalid type: sequence, expected a map"),
        "{e}"
    );
}

#[test]
fn pods_stating_the_same_tolerations_and_affinity_share_one_copy() {
    let pod = |name: &str, seconds: i64| -> LeanPod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "containers": [{"name": "main"}],
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}
                ]}},
                "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}],
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"}]
            }
        }))
        .unwrap()
    };
    let (a, b, other) = (pod("a", 300), pod("b", 300), pod("c", 60));
    let (a, b, other) = (a.spec.unwrap(), b.spec.unwrap(), other.spec.unwrap());
    let tolerations = |s: &LeanPodSpec| s.tolerations.clone().unwrap();
    assert!(
        Arc::ptr_eq(&tolerations(&a).0, &tolerations(&b).0),
        "the same tolerations are held once"
    );
    assert!(!Arc::ptr_eq(&tolerations(&a).0, &tolerations(&other).0));
    assert_eq!(
        other.tolerations.as_ref().unwrap()[0].toleration_seconds,
        Some(60)
    );
    assert!(Arc::ptr_eq(
        &a.affinity.as_ref().unwrap().0,
        &b.affinity.as_ref().unwrap().0
    ));
    assert!(Arc::ptr_eq(
        &a.topology_spread_constraints.as_ref().unwrap().0,
        &b.topology_spread_constraints.as_ref().unwrap().0
    ));
    // Read and written as the value itself.
    let written = serde_json::to_value(&a).unwrap();
    assert_eq!(written["tolerations"][0]["tolerationSeconds"], json!(300));
    assert_eq!(
        written["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
            ["topologyKey"],
        json!("kubernetes.io/hostname")
    );
    assert_eq!(serde_json::from_value::<LeanPodSpec>(written).unwrap(), a);
    // A full pod converts to the same shared copy.
    let full: Pod = serde_json::from_value(json!({"metadata": {"name": "d"}, "spec": {"containers": [{"name": "main"}],
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]}}))
    .unwrap();
    assert!(Arc::ptr_eq(
        &LeanPod::from(&full).spec.unwrap().tolerations.unwrap().0,
        &tolerations(&a).0
    ));
}

#[test]
fn pods_of_one_namespace_and_node_share_their_strings_which_read_and_write_as_strings() {
    let pod = |name: &str, node: &str| -> LeanPod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True", "reason": "PodCompleted"}]}
        }))
        .unwrap()
    };
    let (a, b, other) = (pod("a", "node-1"), pod("b", "node-1"), pod("c", "node-2"));
    let atom = |value: &Option<Atom>| value.clone().unwrap().0.0;
    assert!(Arc::ptr_eq(
        &atom(&a.metadata.namespace),
        &atom(&b.metadata.namespace)
    ));
    let node = |p: &LeanPod| p.spec.as_ref().unwrap().node_name.clone();
    assert!(Arc::ptr_eq(&atom(&node(&a)), &atom(&node(&b))));
    assert!(!Arc::ptr_eq(&atom(&node(&a)), &atom(&node(&other))));
    let ready = |p: &LeanPod| p.status.as_ref().unwrap().conditions.as_ref().unwrap()[0].clone();
    assert!(Arc::ptr_eq(
        &ready(&a).status.0.0,
        &ready(&other).status.0.0
    ));
    // Compared, ordered and printed as the string.
    assert_eq!(node(&a).unwrap(), "node-1");
    assert_eq!(node(&a).as_deref(), Some("node-1"));
    assert!(node(&a).unwrap() < node(&other).unwrap());
    assert_eq!(
        format!(
            "{}/{:?}",
            a.metadata.namespace.as_ref().unwrap(),
            ready(&a).type_
        ),
        "team-a/\"Ready\""
    );
    let written = serde_json::to_value(&a).unwrap();
    assert_eq!(written["metadata"]["namespace"], json!("team-a"));
    assert_eq!(
        written["status"]["conditions"][0],
        json!({"type": "Ready", "status": "True", "reason": "PodCompleted"})
    );
    assert_eq!(serde_json::from_value::<LeanPod>(written).unwrap(), a);
}

#[test]
fn a_shared_value_no_pod_holds_is_let_go() {
    // A type of its own, so that no other test shares its entries.
    #[derive(Serialize, PartialEq, Debug)]
    struct Probe(u32);
    let first = Interned::new(Probe(1));
    assert!(Arc::ptr_eq(&first.0, &Interned::new(Probe(1)).0));
    let weak = Arc::downgrade(&first.0);
    drop(first);
    assert!(
        weak.upgrade().is_none(),
        "the interner holds no strong reference"
    );
    // Many values come and go; the sweep keeps the table at about what is held.
    let kept: Vec<Interned<Probe>> = (0..10).map(|i| Interned::new(Probe(i))).collect();
    for i in 100..5_000 {
        drop(Interned::new(Probe(i)));
    }
    let probes = INTERNER
        .lock()
        .unwrap()
        .values
        .keys()
        .filter(|(t, _)| *t == TypeId::of::<Probe>())
        .count();
    assert!(
        probes <= 2 * 1024 + kept.len(),
        "{probes} entries for {} values held",
        kept.len()
    );
    assert!(Arc::ptr_eq(&kept[3].0, &Interned::new(Probe(3)).0));
}

#[test]
fn a_lean_pod_is_far_smaller_than_a_pod() {
    let full =
        std::mem::size_of::<Pod>() + std::mem::size_of::<k8s_openapi::api::core::v1::Container>();
    let lean = std::mem::size_of::<LeanPod>() + std::mem::size_of::<LeanContainer>();
    assert!(lean * 2 < full, "lean {lean} bytes, full {full} bytes");
}
