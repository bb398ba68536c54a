//! Native tests of the plugin's calls against a fake host that plays the simulated cloud.

use std::cell::RefCell;
use std::rc::Rc;

use joinery_plugin_sdk::cloud::{
    CloudError, CloudProvider, CreateRequest, InstanceState, KeyValue, NodeClaim, NodeClass,
    Operator, Requirement, Resource,
};
use joinery_plugin_sdk::http::{Request, Response};
use joinery_plugin_sdk::testing::{self, FakeHost};
use serde_json::{Value, json};

use super::SimCloud;

const CONFIG: &str = r#"{"endpoint": "http://127.0.0.1:9999/", "clusterName": "demo"}"#;

fn offerings(od: f64) -> Value {
    json!([
        {"zone": "test-zone-a", "capacityType": "on-demand", "price": od, "available": true},
        {"zone": "test-zone-a", "capacityType": "spot", "price": od * 0.7, "available": true},
        {"zone": "test-zone-b", "capacityType": "on-demand", "price": od, "available": true},
    ])
}

fn catalog_json() -> String {
    let it = |name: &str, cpu: u32| {
        json!({
            "name": name,
            "capacity": {"cpu": cpu.to_string(), "memory": format!("{}Gi", cpu * 2), "pods": "110"},
            "overhead": {"kubeReserved": {"cpu": "100m", "memory": "10Mi"}, "systemReserved": {}, "evictionThreshold": {}},
            "allocatable": {"cpu": format!("{}m", cpu * 1000 - 100), "memory": format!("{}Mi", cpu * 2048 - 10), "pods": "110"},
            "labels": {
                "node.kubernetes.io/instance-type": name,
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "simcloud.joinery.dev/instance-cpu": cpu.to_string(),
            },
            "offerings": offerings(0.025 * f64::from(cpu)),
        })
    };
    json!({"zones": ["test-zone-a", "test-zone-b"], "instanceTypes": [it("c3-16", 8), it("c3-4", 2), it("c3-8", 4)]})
        .to_string()
}

fn instance_json(id: &str, state: &str, claim: &str) -> Value {
    json!({
        "id": id, "providerId": format!("simcloud://{id}"), "instanceType": "c3-8", "zone": "test-zone-a",
        "capacityType": "spot", "userData": "", "tags": {"karpenter.sh/nodeclaim": claim, "joinery.dev/cluster": "demo"},
        "capacity": {"cpu": "4"}, "allocatable": {"cpu": "3900m"}, "labels": {"kubernetes.io/arch": "amd64"},
        "pricePerHour": 0.07, "state": state, "createdAt": "2026-01-01T00:00:00Z",
    })
}

/// Every request the fake cloud received: method, URL and body.
type Seen = Rc<RefCell<Vec<(String, String, String)>>>;

/// Installs a fake host whose HTTP handler records requests and answers with `answer`.
fn cloud(
    config: &str,
    answer: impl Fn(&Request) -> Response + 'static,
) -> (testing::FakeHostGuard, Seen) {
    let seen: Seen = Rc::default();
    let log = seen.clone();
    let guard = testing::install(FakeHost::new().with_config(config).with_http(move |req| {
        log.borrow_mut().push((
            req.method.clone(),
            req.url.clone(),
            String::from_utf8_lossy(&req.body).into_owned(),
        ));
        Ok(answer(req))
    }));
    (guard, seen)
}

fn with_retry_after(mut response: Response, seconds: &str) -> Response {
    response
        .headers
        .push(("Retry-After".into(), seconds.into()));
    response
}

/// Answers catalog and empty-list calls; `launch` answers the POST.
fn launching(launch: impl Fn(&Request) -> Response + 'static) -> impl Fn(&Request) -> Response {
    move |req| match (req.method.as_str(), req.url.as_str()) {
        ("GET", url) if url.ends_with("/v1/instance-types") => Response::new(200, catalog_json()),
        ("GET", url) if url.contains("/v1/instances?") => {
            Response::new(200, r#"{"instances": []}"#)
        }
        ("POST", _) => launch(req),
        _ => Response::new(404, r#"{"reason": "NotFound", "message": "no such path"}"#),
    }
}

fn claim(requirements: Vec<Requirement>, requests: Vec<Resource>) -> NodeClaim {
    NodeClaim {
        name: "default-abc12".into(),
        uid: "uid-1".into(),
        node_pool: "default".into(),
        labels: vec![],
        annotations: vec![],
        taints: vec![],
        startup_taints: vec![],
        requirements,
        resource_requests: requests,
        provider_id: None,
    }
}

fn create_request(claim: NodeClaim, spec: Value) -> CreateRequest {
    CreateRequest {
        claim,
        node_class: NodeClass::new("default", spec.to_string()),
        user_data: "#!/bin/sh\n".into(),
    }
}

#[test]
fn create_posts_fitting_offerings_cheapest_first_with_the_tags() {
    let (_host, seen) = cloud(
        CONFIG,
        launching(|_| {
            Response::new(
                201,
                instance_json("i-00000001", "pending", "default-abc12").to_string(),
            )
        }),
    );
    let request = create_request(
        claim(
            vec![Requirement::new(
                "karpenter.sh/capacity-type",
                Operator::In,
                &["on-demand"],
            )],
            vec![Resource::new("cpu", "1500m")],
        ),
        json!({"tags": {"team": "a", "joinery.dev/cluster": "spoofed"}, "userData": "ignored", "kubelet": {"maxPods": 20}}),
    );
    let instance = SimCloud::create(request).unwrap();
    assert_eq!(instance.provider_id, "simcloud://i-00000001");
    assert_eq!(instance.node_claim.as_deref(), Some("default-abc12"));
    assert_eq!(instance.state, InstanceState::Pending);
    assert_eq!(instance.allocatable, vec![Resource::new("cpu", "3900m")]);

    let seen = seen.borrow();
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert_eq!(
        seen[0].1,
        "http://127.0.0.1:9999/v1/instances?tag=joinery.dev%2Fcluster%3Ddemo&tag=karpenter.sh%2Fnodeclaim%3Ddefault-abc12"
    );
    assert_eq!(seen[1].1, "http://127.0.0.1:9999/v1/instance-types");
    let (method, url, body) = &seen[2];
    assert_eq!(
        (method.as_str(), url.as_str()),
        ("POST", "http://127.0.0.1:9999/v1/instances")
    );
    let body: Value = serde_json::from_str(body).unwrap();
    let order: Vec<String> = body["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{}/{}/{}",
                c["instanceType"].as_str().unwrap(),
                c["zone"].as_str().unwrap(),
                c["capacityType"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        order,
        [
            "c3-4/test-zone-a/on-demand",
            "c3-4/test-zone-b/on-demand",
            "c3-8/test-zone-a/on-demand",
            "c3-8/test-zone-b/on-demand",
            "c3-16/test-zone-a/on-demand",
            "c3-16/test-zone-b/on-demand"
        ]
    );
    assert_eq!(body["userData"], "#!/bin/sh\n");
    assert_eq!(
        body["tags"],
        json!({"team": "a", "joinery.dev/cluster": "demo", "karpenter.sh/nodeclaim": "default-abc12", "karpenter.sh/nodepool": "default"})
    );
    assert!(
        body["candidates"][0].get("price").is_none(),
        "prices are the cloud's business"
    );
}

#[test]
fn create_returns_the_instance_a_lost_answer_left_behind() {
    let (_host, seen) = cloud(CONFIG, |req| {
        assert_eq!(req.method, "GET", "nothing must be launched again");
        let instances = json!({"instances": [instance_json("i-00000001", "terminated", "default-abc12"), instance_json("i-00000002", "running", "default-abc12")]});
        Response::new(200, instances.to_string())
    });
    let instance = SimCloud::create(create_request(claim(vec![], vec![]), json!({}))).unwrap();
    assert_eq!(instance.provider_id, "simcloud://i-00000002");
    assert_eq!(instance.state, InstanceState::Running);
    assert_eq!(seen.borrow().len(), 1);
}

#[test]
fn create_without_a_fitting_offering_is_insufficient_capacity_without_a_call() {
    let (_host, seen) = cloud(
        CONFIG,
        launching(|_| panic!("nothing fits, nothing is posted")),
    );
    let request = create_request(
        claim(vec![], vec![Resource::new("nvidia.com/gpu", "1")]),
        json!({}),
    );
    match SimCloud::create(request).unwrap_err() {
        CloudError::InsufficientCapacity(ic) => {
            assert!(ic.offerings.is_empty() && ic.message.contains("default-abc12"))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(seen.borrow().len(), 2);
}

#[test]
fn create_errors_map_to_karpenter_classes() {
    type Expected = fn(&CloudError) -> bool;
    let cases: Vec<(Response, Expected)> = vec![
        (
            Response::new(409, json!({"reason": "InsufficientCapacity", "message": "none", "offerings": [{"instanceType": "c3-4", "zone": "test-zone-a", "capacityType": "spot"}]}).to_string()),
            |e| matches!(e, CloudError::InsufficientCapacity(ic) if ic.offerings.len() == 1 && ic.offerings[0].instance_type == "c3-4" && ic.offerings[0].capacity_type == "spot"),
        ),
        (
            Response::new(403, r#"{"reason": "QuotaExceeded", "message": "the quota of 3 live instances is reached"}"#),
            |e| matches!(e, CloudError::QuotaExceeded(m) if m.contains("quota of 3")),
        ),
        (
            with_retry_after(Response::new(429, r#"{"reason": "Throttled", "message": "slow down"}"#), "2"),
            |e| matches!(e, CloudError::Retryable(r) if r.retry_after_ms == Some(2000)),
        ),
        (Response::new(500, r#"{"reason": "InternalError", "message": "boom"}"#), |e| {
            matches!(e, CloudError::Retryable(r) if r.retry_after_ms.is_none() && r.message.contains("boom"))
        }),
        (
            Response::new(400, r#"{"reason": "InvalidRequest", "message": "candidates[0].zone: unknown zone", "field": "candidates[0].zone"}"#),
            |e| matches!(e, CloudError::Invalid(m) if m.contains("candidates[0].zone")),
        ),
    ];
    for (response, expected) in cases {
        let status = response.status;
        let (_host, _) = cloud(CONFIG, launching(move |_| response.clone()));
        let err = SimCloud::create(create_request(claim(vec![], vec![]), json!({}))).unwrap_err();
        assert!(expected(&err), "status {status}: {err:?}");
    }
}

#[test]
fn a_missing_endpoint_is_explained() {
    let _host = testing::install(FakeHost::new());
    let err = SimCloud::list().unwrap_err();
    assert!(
        matches!(&err, CloudError::Invalid(m) if m.contains("endpoint") && m.contains("grants")),
        "{err:?}"
    );
}

#[test]
fn resolve_names_unknown_zones() {
    let (_host, _) = cloud(CONFIG, |_| {
        Response::new(200, r#"{"zones": ["test-zone-a", "test-zone-b"]}"#)
    });
    let ok =
        SimCloud::resolve_node_class(NodeClass::new("a", r#"{"zones": ["test-zone-b"]}"#)).unwrap();
    assert_eq!(ok.conditions[0].status, "True");
    assert_eq!(
        serde_json::from_str::<Value>(&ok.status).unwrap(),
        json!({"zones": ["test-zone-b"]})
    );
    let all = SimCloud::resolve_node_class(NodeClass::new("a", "{}")).unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&all.status).unwrap(),
        json!({"zones": ["test-zone-a", "test-zone-b"]})
    );
    let bad = SimCloud::resolve_node_class(NodeClass::new(
        "a",
        r#"{"zones": ["test-zone-b", "mars-1"]}"#,
    ))
    .unwrap();
    let condition = &bad.conditions[0];
    assert_eq!(
        (
            condition.type_.as_str(),
            condition.status.as_str(),
            condition.reason.as_str()
        ),
        ("ZonesReady", "False", "ZonesNotFound")
    );
    assert!(
        condition.message.contains("mars-1"),
        "{}",
        condition.message
    );
    let invalid = SimCloud::resolve_node_class(NodeClass::new("a", r#"{"zones": "test-zone-a"}"#))
        .unwrap_err();
    assert!(matches!(invalid, CloudError::Invalid(_)));
}

#[test]
fn instance_types_honour_the_allow_list_and_zones() {
    let (_host, _) = cloud(CONFIG, |_| Response::new(200, catalog_json()));
    let types = SimCloud::get_instance_types(NodeClass::new(
        "a",
        r#"{"instanceTypes": ["c3-4", "c3-8"], "zones": ["test-zone-b"]}"#,
    ))
    .unwrap();
    let names: Vec<&str> = types.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["c3-4", "c3-8"]);
    let c4 = &types[0];
    assert_eq!(c4.offerings.len(), 1);
    assert_eq!(c4.offerings[0].zone, "test-zone-b");
    assert_eq!(c4.offerings[0].price, Some(0.05));
    assert_eq!(
        c4.overhead.kube_reserved,
        vec![
            Resource::new("cpu", "100m"),
            Resource::new("memory", "10Mi")
        ]
    );
    assert!(c4.requirements.contains(&Requirement::is_in(
        "simcloud.joinery.dev/instance-cpu",
        &["2"]
    )));
    assert!(c4.requirements.contains(&Requirement::is_in(
        "node.kubernetes.io/instance-type",
        &["c3-4"]
    )));
    assert!(c4.capacity.contains(&Resource::new("pods", "110")));
}

#[test]
fn get_list_and_delete_treat_gone_instances_as_not_found() {
    let (_host, seen) = cloud(CONFIG, |req| {
        match (req.method.as_str(), req.url.rsplit('/').next().unwrap()) {
        ("GET", "i-00000001") => Response::new(200, instance_json("i-00000001", "running", "a").to_string()),
        ("GET", "i-00000002") => Response::new(200, instance_json("i-00000002", "terminated", "b").to_string()),
        ("GET", _) if req.url.contains("?tag=") => Response::new(
            200,
            json!({"instances": [instance_json("i-00000001", "running", "a"), instance_json("i-00000002", "terminated", "b")]}).to_string(),
        ),
        ("DELETE", "i-00000001") => {
            let mut body = instance_json("i-00000001", "terminated", "a");
            body["previousState"] = json!("running");
            Response::new(200, body.to_string())
        }
        ("DELETE", "i-00000002") => Response::new(200, json!({"id": "i-00000002", "state": "terminated", "previousState": "terminated"}).to_string()),
        _ => Response::new(404, r#"{"reason": "NotFound", "message": "instance not found"}"#),
    }
    });
    assert_eq!(
        SimCloud::get("simcloud://i-00000001".into()).unwrap().zone,
        "test-zone-a"
    );
    assert!(matches!(
        SimCloud::get("simcloud://i-00000002".into()),
        Err(CloudError::NotFound(_))
    ));
    assert!(matches!(
        SimCloud::get("simcloud://i-00000009".into()),
        Err(CloudError::NotFound(_))
    ));
    assert!(matches!(
        SimCloud::get("aws:///i-1".into()),
        Err(CloudError::Invalid(_))
    ));

    let listed = SimCloud::list().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].node_claim.as_deref(), Some("a"));
    assert!(
        seen.borrow()
            .iter()
            .any(|(_, url, _)| url.ends_with("/v1/instances?tag=joinery.dev%2Fcluster%3Ddemo"))
    );

    SimCloud::delete("simcloud://i-00000001".into()).unwrap();
    assert!(matches!(
        SimCloud::delete("simcloud://i-00000002".into()),
        Err(CloudError::NotFound(_))
    ));
    assert!(matches!(
        SimCloud::delete("simcloud://i-00000009".into()),
        Err(CloudError::NotFound(_))
    ));
}

#[test]
fn drift_follows_the_node_class_zones_and_types() {
    let _host = testing::install(FakeHost::new().with_config(CONFIG));
    let mut launched = claim(vec![], vec![]);
    launched.labels = vec![
        KeyValue::new("topology.kubernetes.io/zone", "test-zone-a"),
        KeyValue::new("node.kubernetes.io/instance-type", "c3-8"),
    ];
    let drift =
        |spec: &str| SimCloud::is_drifted(launched.clone(), NodeClass::new("a", spec)).unwrap();
    assert_eq!(drift("{}"), None);
    assert_eq!(
        drift(r#"{"zones": ["test-zone-a"], "instanceTypes": ["c3-8"]}"#),
        None
    );
    assert_eq!(
        drift(r#"{"zones": ["test-zone-b"]}"#).as_deref(),
        Some("ZoneNotAllowed")
    );
    assert_eq!(
        drift(r#"{"instanceTypes": ["c3-4"]}"#).as_deref(),
        Some("InstanceTypeNotAllowed")
    );
}

#[test]
fn repair_policies_are_kwoks() {
    let policies = SimCloud::repair_policies()
        .unwrap()
        .expect("its own policies");
    let named: Vec<(&str, &str, u64)> = policies
        .iter()
        .map(|p| {
            (
                p.condition_type.as_str(),
                p.condition_status.as_str(),
                p.toleration_seconds,
            )
        })
        .collect();
    assert_eq!(named, [("Ready", "False", 600), ("Ready", "Unknown", 600)]);
}
