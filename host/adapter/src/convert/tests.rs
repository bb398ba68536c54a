use super::*;
use serde_json::json;

#[test]
fn pod_requests_include_init_overhead_and_slot() {
    let pod: LeanPod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "containers": [{"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}],
            "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "2"}}}],
            "overhead": {"cpu": "100m"}
        }
    }))
    .unwrap();
    let p = pending_pod(&pod).unwrap();
    assert_eq!(p.requests.cpu_millis, 2100);
    assert_eq!(p.requests.memory_bytes, 1 << 30);
    assert_eq!(p.requests.get("pods"), 1);
}

#[test]
fn limits_stand_in_for_missing_requests_in_containers_and_init_containers() {
    let pod: LeanPod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "containers": [
                {"name": "limited", "resources": {"limits": {"cpu": "1", "memory": "2Gi"}}},
                {"name": "both", "resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "4", "nvidia.com/gpu": "1"}}}
            ],
            "initContainers": [{"name": "i", "resources": {"limits": {"cpu": "3"}}}]
        }
    }))
    .unwrap();
    let p = pending_pod(&pod).unwrap();
    // Containers: 1 + 0.25 (a request wins over its own limit); the init container's limit (3) is larger.
    assert_eq!(p.requests.cpu_millis, 3000);
    assert_eq!(p.requests.memory_bytes, 2 << 30);
    assert_eq!(
        p.requests.get("nvidia.com/gpu"),
        1,
        "an extended resource only limited counts too"
    );
    let bad: LeanPod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": [{"name": "web", "resources": {"limits": {"cpu": "lots"}}}]}
    }))
    .unwrap();
    let e = pending_pod(&bad).unwrap_err();
    assert!(
        e.contains("spec.containers[web].resources.requests (or .limits)"),
        "{e}"
    );
}

#[test]
fn an_uninitialized_node_counts_the_extended_resources_its_claim_expects() {
    let claim: NodeClaim = serde_json::from_value(json!({
        "metadata": {"name": "gpu-1"},
        "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []},
        "status": {"providerID": "sim://gpu-1", "allocatable": {"cpu": "7", "nvidia.com/gpu": "4", "pods": "110"},
            "conditions": [{"type": "Launched", "status": "True", "reason": "Launched", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                           {"type": "Registered", "status": "True", "reason": "Registered", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    }))
    .unwrap();
    let node = |gpus: &str| -> LeanNode {
        serde_json::from_value(json!({
            "metadata": {"name": "gpu-1", "labels": {"karpenter.sh/nodepool": "default"}},
            "spec": {"providerID": "sim://gpu-1"},
            "status": {"allocatable": {"cpu": "6500m", "nvidia.com/gpu": gpus, "pods": "110"}}
        }))
        .unwrap()
    };
    let fresh = node("0");
    let nodes = existing_nodes(&[&fresh], &[&claim], &Vec::<&LeanPod>::new());
    assert_eq!(
        nodes[0].allocatable.get("nvidia.com/gpu"),
        4,
        "the claim's expectation while the kubelet shows zero"
    );
    assert_eq!(
        nodes[0].allocatable.cpu_millis, 6500,
        "a value the kubelet reports wins"
    );
    let mut initialized = claim.clone();
    initialized.status.as_mut().unwrap().conditions.as_mut().unwrap().push(
        serde_json::from_value(json!({"type": "Initialized", "status": "True", "reason": "Initialized", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"})).unwrap(),
    );
    let nodes = existing_nodes(&[&fresh], &[&initialized], &Vec::<&LeanPod>::new());
    assert_eq!(
        nodes[0].allocatable.get("nvidia.com/gpu"),
        0,
        "once initialized, the node's own word"
    );
}

#[test]
fn match_fields_is_refused_with_the_field_named() {
    let pod: LeanPod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": [], "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n"]}]}]}}}}
    }))
    .unwrap();
    let e = pending_pod(&pod).unwrap_err();
    assert!(e.contains("Pod ns/p") && e.contains("matchFields"), "{e}");
}

#[test]
fn bad_quantity_names_the_container() {
    let pod: LeanPod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": [{"name": "web", "resources": {"requests": {"cpu": "lots"}}}]}
    }))
    .unwrap();
    let e = pending_pod(&pod).unwrap_err();
    assert!(e.contains("spec.containers[web]"), "{e}");
}

#[test]
fn tolerations_and_taints_convert() {
    let t = toleration(&corev1::Toleration {
        key: Some("k".into()),
        operator: Some("Exists".into()),
        ..Default::default()
    });
    assert_eq!(t.operator, TolerationOperator::Exists);
    let taint = taint(&corev1::Taint {
        key: "k".into(),
        value: None,
        effect: "NoSchedule".into(),
        time_added: None,
    })
    .unwrap();
    assert!(t.tolerates(&taint));
    assert_eq!(taint_to_k8s(&taint).effect, "NoSchedule");
}

#[test]
fn inter_pod_constraints_and_host_ports_convert() {
    let pod: LeanPod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web"}},
        "spec": {
            "containers": [{"name": "a", "ports": [{"containerPort": 80, "hostPort": 8080, "protocol": "UDP"}, {"containerPort": 81}]}],
            "topologySpreadConstraints": [{
                "maxSkew": 2, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app": "web"}}, "minDomains": 3, "nodeTaintsPolicy": "Honor",
                "matchLabelKeys": ["pod-template-hash"]
            }],
            "affinity": {
                "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 7, "preference": {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}]}}
                ]},
                "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["db"]}]}, "namespaces": ["data"]}
                ]},
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 3, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}, "namespaceSelector": {}}}
                ]}
            }
        }
    }))
    .unwrap();
    let p = pending_pod(&pod).unwrap();
    assert_eq!(p.labels.get("app").map(String::as_str), Some("web"));
    assert_eq!(
        p.host_ports,
        vec![HostPort {
            port: 8080,
            protocol: "UDP".into(),
            host_ip: String::new()
        }]
    );
    let c = &p.topology_spread[0];
    assert_eq!(
        (c.max_skew, c.min_domains, c.when_unsatisfiable),
        (2, Some(3), WhenUnsatisfiable::ScheduleAnyway)
    );
    assert_eq!(c.node_taints_policy, Some(NodeInclusionPolicy::Honor));
    assert_eq!(c.node_affinity_policy, None);
    assert_eq!(c.match_label_keys, ["pod-template-hash"]);
    assert_eq!(p.preferred_affinity[0].weight, 7);
    assert!(
        p.preferred_affinity[0]
            .preference
            .has("topology.kubernetes.io/zone")
    );
    assert_eq!(p.pod_affinity[0].namespaces, ["data"]);
    assert_eq!(
        p.pod_affinity[0]
            .label_selector
            .as_ref()
            .unwrap()
            .match_expressions[0]
            .operator,
        SelectorOperator::In
    );
    assert!(p.pod_anti_affinity.is_empty());
    let w = &p.preferred_pod_anti_affinity[0];
    assert_eq!(w.weight, 3);
    assert!(w.term.namespaces.is_empty());
    assert_eq!(
        w.term.namespace_selector,
        Some(LabelSelector::default()),
        "an empty namespaceSelector (every namespace) is kept"
    );

    let mut on_node = pod.clone();
    on_node.spec.as_mut().unwrap().node_name = Some("n1".into());
    let b = bound_pod(&on_node).unwrap();
    assert_eq!((b.node.as_str(), b.host_ports.len()), ("n1", 1));
    assert!(bound_pod(&pod).is_none(), "not bound");
    // Bound pods hold the labels their pods share; pods with other labels, another map.
    let mut sibling = on_node.clone();
    sibling.metadata.name = Some("web-2".into());
    let mut other = on_node.clone();
    let mut labels = (**other.metadata.labels.as_ref().unwrap()).clone();
    labels.insert("pod-template-hash".into(), "v2".into());
    other.metadata.labels = Some(crate::lean::Interned::new(labels));
    let [first, second, third] = [&on_node, &sibling, &other].map(|p| bound_pod(p).unwrap());
    assert!(std::sync::Arc::ptr_eq(&first.labels, &second.labels));
    assert!(!std::sync::Arc::ptr_eq(&first.labels, &third.labels));
    assert_eq!(
        third.labels.get("pod-template-hash").map(String::as_str),
        Some("v2")
    );
    assert_eq!(*first.labels, *b.labels);
    assert_eq!([pod, on_node].iter().filter_map(bound_pod).count(), 1);
}

#[test]
fn bad_label_selector_operator_names_the_field() {
    let pod: LeanPod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": [], "topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Near"}]}
        }]}
    }))
    .unwrap();
    let e = pending_pod(&pod).unwrap_err();
    assert!(
        e.contains("spec.topologySpreadConstraints[0].labelSelector.matchExpressions[0].operator"),
        "{e}"
    );
}

#[test]
fn node_affinity_takes_kubernetes_six_operators_and_names_any_other() {
    let pod = |operator: &str, preferred: bool| -> LeanPod {
        let term =
            json!({"matchExpressions": [{"key": "size", "operator": operator, "values": ["4"]}]});
        let affinity = if preferred {
            json!({"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": term}]})
        } else {
            json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}})
        };
        serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [], "affinity": {"nodeAffinity": affinity}}}))
        .unwrap()
    };
    for preferred in [false, true] {
        assert!(pending_pod(&pod("Gt", preferred)).is_ok());
        for karpenter_only in ["Gte", "Lte", "Near"] {
            let e = pending_pod(&pod(karpenter_only, preferred)).unwrap_err();
            assert!(
                e.contains(".matchExpressions[0].operator")
                    && e.contains(&format!(
                        "{karpenter_only:?} is not a node selector operator"
                    )),
                "{e}"
            );
        }
    }
}

#[test]
fn remembered_requests_follow_each_container_list() {
    let pod = |cpu: u64, extra: serde_json::Value| -> LeanPod {
        let mut spec = json!({"containers": [{"name": "a", "resources": {"requests": {"cpu": format!("{cpu}m")}}}]});
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}))
            .unwrap()
    };
    let cpu_of = |p: &LeanPod| pod_requests(p.spec.as_ref().unwrap()).unwrap().cpu_millis;
    // More lists than are remembered, each read twice: every answer is its own list's.
    for round in 0..2 {
        for cpu in 1..=(REMEMBERED_CONTAINER_LISTS as u64 + 40) {
            assert_eq!(cpu_of(&pod(cpu, json!({}))), cpu, "round {round}");
        }
    }
    // The same containers with an overhead are not the plain list's answer.
    assert_eq!(cpu_of(&pod(300, json!({}))), 300);
    assert_eq!(cpu_of(&pod(300, json!({"overhead": {"cpu": "50m"}}))), 350);
    // A bad quantity stays an error when asked again.
    let bad: LeanPod = serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": [{"name": "web", "resources": {"requests": {"cpu": "lots"}}}]}
    }))
    .unwrap();
    for _ in 0..2 {
        assert!(pod_requests(bad.spec.as_ref().unwrap()).is_err());
    }
}
