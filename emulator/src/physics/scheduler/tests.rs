use super::*;

#[test]
fn node_selector_requirements_use_the_core_algebra() {
    let requirement = |operator: &str, values: &[&str]| NodeSelectorRequirement {
        key: "k".into(),
        operator: operator.into(),
        values: Some(values.iter().map(|v| v.to_string()).collect()),
    };
    assert!(requirement_holds(
        &requirement("In", &["a", "b"]),
        Some("a")
    ));
    assert!(!requirement_holds(&requirement("In", &["a"]), None));
    assert!(requirement_holds(&requirement("NotIn", &["a"]), None));
    assert!(requirement_holds(&requirement("Exists", &[]), Some("x")));
    assert!(requirement_holds(&requirement("DoesNotExist", &[]), None));
    assert!(requirement_holds(&requirement("Gt", &["3"]), Some("4")));
    assert!(!requirement_holds(&requirement("Gt", &["3"]), Some("3")));
    assert!(!requirement_holds(&requirement("Lt", &["3"]), None));
    assert!(!requirement_holds(
        &requirement("Sometimes", &[]),
        Some("x")
    ));
}

fn pod(value: serde_json::Value) -> Pod {
    serde_json::from_value(value).unwrap()
}

fn pending(version: &str) -> Pod {
    pod(
        json!({"metadata": {"name": "p", "namespace": "d", "uid": "u1", "resourceVersion": version, "labels": {"app": "a"}},
               "spec": {"containers": [{"name": "c"}]}}),
    )
}

fn bound(version: &str, labels: serde_json::Value) -> Pod {
    pod(
        json!({"metadata": {"name": "p", "namespace": "d", "uid": "u1", "resourceVersion": version, "labels": labels},
               "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}}),
    )
}

#[test]
fn a_change_requeues_only_what_it_may_let_fit() {
    // A new or changed pending pod is tried; its own write coming back is not.
    assert_eq!(pod_change(None, Some(&pending("1"))), Requeue::Pod);
    assert_eq!(
        pod_change(Some(&pending("1")), Some(&pending("2"))),
        Requeue::Pod
    );
    assert_eq!(
        pod_change(Some(&pending("2")), Some(&pending("2"))),
        Requeue::Nothing
    );
    // A binding (or a relabelled bound pod) matters to spread and affinity only.
    assert_eq!(
        pod_change(Some(&pending("2")), Some(&bound("3", json!({"app": "a"})))),
        Requeue::Constrained
    );
    assert_eq!(
        pod_change(
            Some(&bound("3", json!({"app": "a"}))),
            Some(&bound("4", json!({"app": "a"})))
        ),
        Requeue::Nothing
    );
    assert_eq!(
        pod_change(
            Some(&bound("3", json!({"app": "a"}))),
            Some(&bound("4", json!({"app": "b"})))
        ),
        Requeue::Constrained
    );
    // Room freed: a bound pod gone or finished.
    assert_eq!(pod_change(Some(&bound("3", json!({}))), None), Requeue::All);
    let mut finished = bound("5", json!({}));
    finished.status = Some(serde_json::from_value(json!({"phase": "Succeeded"})).unwrap());
    assert_eq!(
        pod_change(Some(&bound("3", json!({}))), Some(&finished)),
        Requeue::All
    );
    assert_eq!(pod_change(Some(&pending("2")), None), Requeue::Nothing);
    // Another pod of the same name.
    let mut other = pending("9");
    other.metadata.uid = Some("u2".into());
    assert_eq!(pod_change(Some(&pending("2")), Some(&other)), Requeue::All);
    // Pods for another scheduler are left alone.
    let mut foreign = pending("3");
    foreign.spec.as_mut().unwrap().scheduler_name = Some("other".into());
    assert_eq!(
        pod_change(Some(&pending("2")), Some(&foreign)),
        Requeue::Nothing
    );
}

#[test]
fn only_what_the_filters_read_of_a_node_requeues() {
    let node = |labels: serde_json::Value, ready: &str, annotations: serde_json::Value| -> Node {
        serde_json::from_value(json!({"metadata": {"name": "n", "labels": labels, "annotations": annotations},
            "status": {"conditions": [{"type": "Ready", "status": ready}], "allocatable": {"cpu": "4"}}}))
        .unwrap()
    };
    let booting = node(json!({"a": "1"}), "False", json!({}));
    let ready = node(json!({"a": "1"}), "True", json!({}));
    // A node that is not Ready takes no pod: its arrival and changes wait.
    assert!(!node_change(None, Some(&booting)));
    assert!(!node_change(
        Some(&booting),
        Some(&node(json!({"a": "2"}), "False", json!({})))
    ));
    // Turning Ready, a Ready node's filtered fields changing, or any node going: try again.
    assert!(node_change(Some(&booting), Some(&ready)));
    assert!(node_change(None, Some(&ready)));
    assert!(node_change(
        Some(&ready),
        Some(&node(json!({"a": "2"}), "True", json!({})))
    ));
    assert!(node_change(Some(&booting), None));
    assert!(!node_change(
        Some(&ready),
        Some(&node(json!({"a": "1"}), "True", json!({"note": "x"})))
    ));
}

#[test]
fn writes_go_bindings_first_then_first_verdicts_then_refreshes() {
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(100);
    let key = |name: &str| ("d".to_string(), name.to_string());
    let verdict = |message: &str| Verdict {
        uid: None,
        message: message.into(),
        asked: t0,
        refresh: false,
    };
    let mut writes = Writes::new(super::super::lag::Pace::new(100.0, 1));
    writes.verdict(key("old"), verdict("0/1 nodes"), false);
    writes.verdict(key("new"), verdict("no nodes"), true);
    writes.verdict(key("gone"), verdict("no nodes"), true);
    writes.forget_verdict(&key("gone"));
    // A newer decision replaces the queued message, keeping its place.
    writes.verdict(key("old"), verdict("0/2 nodes"), false);
    writes.binds.push_back(Bind {
        key: key("bind"),
        uid: None,
        node: "n1".into(),
        original: pending("1"),
        assumed_version: Some("2".into()),
        asked: t0 + Duration::from_secs(1),
    });
    assert_eq!(writes.next_asked(), Some(t0 + Duration::from_secs(1)));
    let order: Vec<String> = std::iter::from_fn(|| writes.pop())
        .map(|job| match job {
            Job::Bind(bind) => format!("bind {}", bind.key.1),
            Job::Verdict(key, verdict) => format!("{}: {}", key.1, verdict.message),
        })
        .collect();
    assert_eq!(order, vec!["bind bind", "new: no nodes", "old: 0/2 nodes"]);
    assert_eq!(writes.next_asked(), None);
}

#[test]
fn the_unschedulable_patch_keeps_the_transition_time_and_is_not_repeated() {
    let now = Time(k8s_openapi::jiff::Timestamp::from_second(2_000).unwrap());
    let fresh = pending("1");
    let patch =
        unschedulable_patch(&fresh, "no nodes available to schedule pods", now.clone()).unwrap();
    let condition = &patch["status"]["conditions"][0];
    assert_eq!(
        (condition["reason"].as_str(), condition["message"].as_str()),
        (
            Some("Unschedulable"),
            Some("no nodes available to schedule pods")
        )
    );
    let mut marked = fresh.clone();
    marked.status = Some(serde_json::from_value(json!({"conditions": [{"type": "PodScheduled", "status": "False",
        "reason": "Unschedulable", "message": "no nodes available to schedule pods", "lastTransitionTime": "1970-01-01T00:16:40Z"}]})).unwrap());
    assert!(
        unschedulable_patch(&marked, "no nodes available to schedule pods", now.clone()).is_none()
    );
    let refreshed =
        unschedulable_patch(&marked, "0/1 nodes are available: 1 Insufficient cpu.", now).unwrap();
    assert_eq!(
        refreshed["status"]["conditions"][0]["lastTransitionTime"],
        "1970-01-01T00:16:40Z"
    );
}

#[test]
fn host_ports_conflict_on_wildcards() {
    let port = |ip: &str| HostPort {
        ip: ip.into(),
        protocol: "TCP".into(),
        port: 80,
    };
    assert!(port("").conflicts(&port("10.0.0.1")));
    assert!(port("10.0.0.1").conflicts(&port("10.0.0.1")));
    assert!(!port("10.0.0.1").conflicts(&port("10.0.0.2")));
    assert!(!port("").conflicts(&HostPort {
        protocol: "UDP".into(),
        ..port("")
    }));
}
