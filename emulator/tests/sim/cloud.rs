//! The simulated cloud's HTTP API, driven over real HTTP like the `simcloud` plugin does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use joinery_core::clock::Clock;
use joinery_emulator::SimError;
use joinery_emulator::cloud::{
    Catalog, CloudEvent, CloudVerb, InstanceState, OfferingKey, SimCloud, SimCloudOptions,
};
use serde_json::{Value, json};

/// An answer: status, `Retry-After` (if any) and the JSON body (`null` when empty).
struct Answer {
    status: u16,
    retry_after: Option<String>,
    body: Value,
}

async fn call(cloud: &SimCloud, method: &str, path: &str, body: Option<Value>) -> Answer {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let payload = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
    let request = http::Request::builder()
        .method(method)
        .uri(format!("{}{path}", cloud.url()))
        .header("content-type", "application/json")
        .body(Full::new(payload))
        .unwrap();
    let response = client.request(request).await.expect("the cloud answers");
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).expect("JSON body")
    };
    Answer {
        status,
        retry_after,
        body,
    }
}

async fn start() -> SimCloud {
    SimCloud::start(SimCloudOptions::default())
        .await
        .expect("cloud starts")
}

fn candidate(instance_type: &str, zone: &str, capacity_type: &str) -> Value {
    json!({"instanceType": instance_type, "zone": zone, "capacityType": capacity_type})
}

fn launch_body(candidates: Vec<Value>, tags: Value) -> Value {
    json!({"candidates": candidates, "userData": "#!/bin/sh\necho hi\n", "tags": tags})
}

const C1: &str = "c-1x-amd64-linux";

#[tokio::test]
async fn create_get_list_by_tag_and_delete_round_trip() {
    let cloud = start().await;
    let created = call(
        &cloud,
        "POST",
        "/v1/instances",
        Some(launch_body(
            vec![candidate(C1, "test-zone-b", "on-demand")],
            json!({"team": "a", "env": "prod"}),
        )),
    )
    .await;
    assert_eq!(created.status, 201, "{}", created.body);
    let id = created.body["id"].as_str().unwrap().to_string();
    assert!(
        id.starts_with("i-") && id.len() >= 10 && id[2..].chars().all(|c| c.is_ascii_hexdigit()),
        "{id}"
    );
    assert_eq!(created.body["providerId"], format!("simcloud://{id}"));
    assert_eq!(created.body["state"], "pending");
    assert_eq!(created.body["zone"], "test-zone-b");
    assert_eq!(created.body["userData"], "#!/bin/sh\necho hi\n");
    assert_eq!(created.body["capacity"]["cpu"], "1");
    assert_eq!(created.body["allocatable"]["cpu"], "900m");
    assert_eq!(created.body["allocatable"]["memory"], "2038Mi");
    assert_eq!(created.body["labels"]["kubernetes.io/arch"], "amd64");
    assert!(created.body["createdAt"].as_str().unwrap().ends_with('Z'));

    let other = call(
        &cloud,
        "POST",
        "/v1/instances",
        Some(launch_body(
            vec![candidate(C1, "test-zone-a", "spot")],
            json!({"team": "a", "env": "dev"}),
        )),
    )
    .await;
    assert_eq!(other.status, 201);
    assert_ne!(other.body["id"], created.body["id"], "IDs are unique");

    let got = call(&cloud, "GET", &format!("/v1/instances/{id}"), None).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body["tags"]["team"], "a");

    let both = call(&cloud, "GET", "/v1/instances?tag=team%3Da", None).await;
    assert_eq!(both.body["instances"].as_array().unwrap().len(), 2);
    let prod = call(&cloud, "GET", "/v1/instances?tag=team=a&tag=env=prod", None).await;
    let prod = prod.body["instances"].as_array().unwrap().clone();
    assert_eq!(prod.len(), 1, "repeated tags are ANDed");
    assert_eq!(prod[0]["id"], id.as_str());
    let none = call(&cloud, "GET", "/v1/instances?tag=team=b", None).await;
    assert!(none.body["instances"].as_array().unwrap().is_empty());
    let bad = call(&cloud, "GET", "/v1/instances?tag=novalue", None).await;
    assert_eq!(bad.status, 400);

    let deleted = call(&cloud, "DELETE", &format!("/v1/instances/{id}"), None).await;
    assert_eq!(deleted.status, 200);
    assert_eq!(deleted.body["state"], "terminated");
    assert_eq!(deleted.body["previousState"], "pending");
    let again = call(&cloud, "DELETE", &format!("/v1/instances/{id}"), None).await;
    assert_eq!(again.status, 200, "delete is idempotent");
    assert_eq!(again.body["previousState"], "terminated");
    let still_listed = call(&cloud, "GET", &format!("/v1/instances/{id}"), None).await;
    assert_eq!(still_listed.status, 200);
    assert_eq!(still_listed.body["state"], "terminated");

    assert_eq!(
        call(&cloud, "GET", "/v1/instances/i-0000ffff", None)
            .await
            .status,
        404
    );
    assert_eq!(
        call(&cloud, "DELETE", "/v1/instances/i-0000ffff", None)
            .await
            .status,
        404
    );
    assert_eq!(call(&cloud, "GET", "/v1/nothing", None).await.status, 404);
    assert_eq!(call(&cloud, "PUT", "/v1/instances", None).await.status, 405);
    assert_eq!(cloud.instances().len(), 2);
    cloud.shutdown().await;
}

#[tokio::test]
async fn instances_boot_after_the_delay_and_are_forgotten_after_the_retention() {
    let cloud = SimCloud::start(SimCloudOptions {
        clock: Arc::new(Clock::with_speed(1000.0)),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(cloud.boot_delay(), Duration::from_secs(30));
    let created = call(
        &cloud,
        "POST",
        "/v1/instances",
        Some(launch_body(
            vec![candidate(C1, "test-zone-a", "spot")],
            json!({}),
        )),
    )
    .await;
    let id = created.body["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(5);
    while cloud.instance(&id).unwrap().state != InstanceState::Running {
        assert!(
            Instant::now() < deadline,
            "30 simulated seconds should pass in about 30 ms"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        call(&cloud, "DELETE", &format!("/v1/instances/{id}"), None)
            .await
            .body["previousState"],
        "running"
    );
    // Five simulated minutes are 300 ms at this speed.
    while call(&cloud, "GET", &format!("/v1/instances/{id}"), None)
        .await
        .status
        != 404
    {
        assert!(
            Instant::now() < deadline,
            "terminated instances are forgotten after the retention period"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let late = call(&cloud, "DELETE", &format!("/v1/instances/{id}"), None).await;
    assert_eq!(
        late.status, 200,
        "a forgotten instance still existed once: {}",
        late.body
    );
    assert_eq!(late.body["previousState"], "terminated");
    assert!(cloud.instances().is_empty());
}

#[tokio::test]
async fn create_falls_back_to_the_next_candidate_on_insufficient_capacity() {
    let cloud = start().await;
    cloud
        .faults()
        .insufficient_capacity(OfferingKey::new(C1, "test-zone-a", "spot"));
    let candidates = vec![
        candidate(C1, "test-zone-a", "spot"),
        candidate(C1, "test-zone-b", "spot"),
        candidate(C1, "test-zone-a", "on-demand"),
    ];
    let created = call(
        &cloud,
        "POST",
        "/v1/instances",
        Some(launch_body(candidates, json!({}))),
    )
    .await;
    assert_eq!(created.status, 201);
    assert_eq!(created.body["zone"], "test-zone-b");
    assert_eq!(created.body["capacityType"], "spot");
    let spot_price = created.body["pricePerHour"].as_f64().unwrap();
    assert!(
        (spot_price - 0.7 * (0.025 + 0.002_147_483_648)).abs() < 1e-9,
        "{spot_price}"
    );

    cloud
        .faults()
        .insufficient_capacity(OfferingKey::new("*", "*", "spot"));
    let refused = call(
        &cloud,
        "POST",
        "/v1/instances",
        Some(launch_body(
            vec![
                candidate(C1, "test-zone-a", "spot"),
                candidate(C1, "test-zone-c", "spot"),
            ],
            json!({}),
        )),
    )
    .await;
    assert_eq!(refused.status, 409);
    assert_eq!(refused.body["reason"], "InsufficientCapacity");
    assert_eq!(
        refused.body["offerings"],
        json!([
            candidate(C1, "test-zone-a", "spot"),
            candidate(C1, "test-zone-c", "spot")
        ])
    );
    cloud
        .faults()
        .restore_capacity(&OfferingKey::new("*", "*", "spot"));
    let ok = call(
        &cloud,
        "POST",
        "/v1/instances",
        Some(launch_body(
            vec![candidate(C1, "test-zone-c", "spot")],
            json!({}),
        )),
    )
    .await;
    assert_eq!(ok.status, 201);
}

#[tokio::test]
async fn quota_limits_live_instances() {
    let cloud = start().await;
    cloud.faults().set_quota(Some(1));
    let body = launch_body(vec![candidate(C1, "test-zone-a", "on-demand")], json!({}));
    let first = call(&cloud, "POST", "/v1/instances", Some(body.clone())).await;
    assert_eq!(first.status, 201);
    let second = call(&cloud, "POST", "/v1/instances", Some(body.clone())).await;
    assert_eq!(second.status, 403);
    assert_eq!(second.body["reason"], "QuotaExceeded");
    let id = first.body["id"].as_str().unwrap();
    call(&cloud, "DELETE", &format!("/v1/instances/{id}"), None).await;
    assert_eq!(
        call(&cloud, "POST", "/v1/instances", Some(body))
            .await
            .status,
        201,
        "terminated instances do not count"
    );
}

#[tokio::test]
async fn throttling_answers_429_with_retry_after_then_recovers() {
    let cloud = start().await;
    cloud.faults().throttle_next(2, Duration::from_millis(2500));
    for _ in 0..2 {
        let throttled = call(&cloud, "GET", "/v1/zones", None).await;
        assert_eq!(throttled.status, 429);
        assert_eq!(
            throttled.retry_after.as_deref(),
            Some("3"),
            "whole seconds, rounded up"
        );
        assert_eq!(throttled.body["reason"], "Throttled");
    }
    let ok = call(&cloud, "GET", "/v1/zones", None).await;
    assert_eq!(ok.status, 200);
    assert_eq!(
        ok.body["zones"],
        json!(["test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d"])
    );
}

#[tokio::test]
async fn error_rates_and_latency_apply_per_verb() {
    let cloud = SimCloud::start(SimCloudOptions {
        clock: Arc::new(Clock::with_speed(100.0)),
        ..Default::default()
    })
    .await
    .unwrap();
    cloud.faults().set_error_rate(CloudVerb::InstanceTypes, 1.0);
    let failed = call(&cloud, "GET", "/v1/instance-types", None).await;
    assert_eq!(failed.status, 500);
    assert_eq!(failed.body["reason"], "InternalError");
    assert_eq!(
        call(&cloud, "GET", "/v1/zones", None).await.status,
        200,
        "other verbs are unaffected"
    );
    cloud.faults().set_error_rate(CloudVerb::InstanceTypes, 0.0);
    assert_eq!(
        call(&cloud, "GET", "/v1/instance-types", None).await.status,
        200
    );

    // 10 simulated seconds at speed 100 are 100 ms.
    cloud
        .faults()
        .set_latency(CloudVerb::Zones, Duration::from_secs(10));
    let started = Instant::now();
    assert_eq!(call(&cloud, "GET", "/v1/zones", None).await.status, 200);
    assert!(
        started.elapsed() >= Duration::from_millis(90),
        "{:?}",
        started.elapsed()
    );
    cloud.faults().clear();
    let started = Instant::now();
    call(&cloud, "GET", "/v1/zones", None).await;
    assert!(started.elapsed() < Duration::from_millis(90));
}

#[tokio::test]
async fn fail_after_create_leaves_a_tagged_instance_behind() {
    let cloud = start().await;
    let mut events = cloud.subscribe();
    cloud.faults().fail_after_create(1);
    let body = launch_body(
        vec![candidate(C1, "test-zone-a", "on-demand")],
        json!({"karpenter.sh/nodeclaim": "default-x1"}),
    );
    let lost = call(&cloud, "POST", "/v1/instances", Some(body)).await;
    assert_eq!(lost.status, 500);
    let found = call(
        &cloud,
        "GET",
        "/v1/instances?tag=karpenter.sh/nodeclaim=default-x1",
        None,
    )
    .await;
    let found = found.body["instances"].as_array().unwrap().clone();
    assert_eq!(
        found.len(),
        1,
        "the instance exists although the call failed"
    );
    match events.try_recv().expect("the launch was announced") {
        CloudEvent::Launched(instance) => assert_eq!(instance.id, found[0]["id"].as_str().unwrap()),
        other => panic!("unexpected event {other:?}"),
    }
}

#[tokio::test]
async fn launches_and_terminations_are_published() {
    let cloud = start().await;
    let mut events = cloud.subscribe();
    let created = call(
        &cloud,
        "POST",
        "/v1/instances",
        Some(launch_body(
            vec![candidate(C1, "test-zone-d", "spot")],
            json!({}),
        )),
    )
    .await;
    let id = created.body["id"].as_str().unwrap().to_string();
    match events.recv().await.unwrap() {
        CloudEvent::Launched(instance) => {
            assert_eq!(instance.id, id);
            assert_eq!(instance.state, InstanceState::Pending);
            assert_eq!(instance.user_data, "#!/bin/sh\necho hi\n");
        }
        other => panic!("unexpected event {other:?}"),
    }
    call(&cloud, "DELETE", &format!("/v1/instances/{id}"), None).await;
    call(&cloud, "DELETE", &format!("/v1/instances/{id}"), None).await;
    match events.recv().await.unwrap() {
        CloudEvent::Terminated { instance, at } => {
            assert_eq!(instance.id, id);
            assert_eq!(instance.state, InstanceState::Terminated);
            assert!(at <= cloud.clock().now());
        }
        other => panic!("unexpected event {other:?}"),
    }
    assert!(
        events.try_recv().is_err(),
        "a repeated delete announces nothing"
    );
}

#[tokio::test]
async fn invalid_create_bodies_name_the_field() {
    let cloud = start().await;
    let cases = [
        (json!({}), "candidates"),
        (json!({"candidates": []}), "candidates"),
        (
            json!({"candidates": [{"instanceType": C1, "zone": "test-zone-a"}]}),
            "candidates[0].capacityType",
        ),
        (
            json!({"candidates": [candidate(C1, "test-zone-a", "spot"), candidate(C1, "mars-1", "spot")]}),
            "candidates[1].zone",
        ),
        (
            json!({"candidates": [candidate("huge", "test-zone-a", "spot")]}),
            "candidates[0].instanceType",
        ),
        (
            json!({"candidates": [candidate(C1, "test-zone-a", "cheap")]}),
            "candidates[0].capacityType",
        ),
        (
            json!({"candidates": [candidate(C1, "test-zone-a", "spot")], "userData": 3}),
            "userData",
        ),
        (
            json!({"candidates": [candidate(C1, "test-zone-a", "spot")], "tags": {"team": 1}}),
            "tags.team",
        ),
        (json!([1, 2]), "body"),
    ];
    for (body, field) in cases {
        let answer = call(&cloud, "POST", "/v1/instances", Some(body.clone())).await;
        assert_eq!(answer.status, 400, "{body}");
        assert_eq!(answer.body["field"], field, "{body}: {}", answer.body);
        assert!(answer.body["message"].as_str().unwrap().starts_with(field));
    }
    assert!(cloud.instances().is_empty());
}

#[tokio::test]
async fn the_default_catalog_follows_kwok() {
    let cloud = start().await;
    let answer = call(&cloud, "GET", "/v1/instance-types", None).await;
    let types = answer.body["instanceTypes"].as_array().unwrap();
    assert_eq!(types.len(), 72, "3 families × 12 sizes × 2 architectures");
    let find = |name: &str| {
        types
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    let c4 = find("c-4x-amd64-linux");
    assert_eq!(
        c4["capacity"],
        json!({"cpu": "4", "memory": "8Gi", "pods": "64", "ephemeral-storage": "20Gi"})
    );
    assert_eq!(
        c4["overhead"]["kubeReserved"],
        json!({"cpu": "100m", "memory": "10Mi"})
    );
    assert_eq!(c4["allocatable"]["cpu"], "3900m");
    assert_eq!(c4["labels"]["simcloud.joinery.dev/instance-family"], "c");
    assert_eq!(c4["labels"]["simcloud.joinery.dev/instance-size"], "4x");
    assert_eq!(c4["labels"]["simcloud.joinery.dev/instance-cpu"], "4");
    assert_eq!(c4["labels"]["simcloud.joinery.dev/instance-memory"], "8192");
    assert_eq!(
        c4["labels"]["node.kubernetes.io/instance-type"],
        "c-4x-amd64-linux"
    );
    assert_eq!(c4["labels"]["kubernetes.io/os"], "linux");
    let offerings = c4["offerings"].as_array().unwrap();
    assert_eq!(offerings.len(), 8, "4 zones × on-demand and spot");
    let price = |ct: &str| {
        offerings
            .iter()
            .find(|o| o["zone"] == "test-zone-c" && o["capacityType"] == ct)
            .unwrap()["price"]
            .as_f64()
            .unwrap()
    };
    // 0.025 × 4 vCPU + 0.001 × 8 GiB in GB (8.589934592).
    assert!(
        (price("on-demand") - 0.108_589_934_592).abs() < 1e-12,
        "{}",
        price("on-demand")
    );
    assert!(
        (price("spot") - 0.076_012_954_214_4).abs() < 1e-12,
        "{}",
        price("spot")
    );
    let m256 = find("m-256x-arm64-linux");
    assert_eq!(m256["capacity"]["memory"], "2Ti");
    assert_eq!(m256["capacity"]["pods"], "1024");
    assert_eq!(m256["labels"]["kubernetes.io/arch"], "arm64");
    assert!(types.iter().all(|t| {
        t["offerings"]
            .as_array()
            .unwrap()
            .iter()
            .all(|o| o["available"] == true)
    }));
}

#[tokio::test]
async fn a_scenario_can_replace_the_catalog() {
    let catalog: Catalog = serde_norway::from_str(
        "instanceTypes:\n\
         - {name: c3-4, cpu: 2, memory: 4Gi}\n\
         - {name: c3-8, cpu: 4, memory: 8Gi, arch: arm64}\n\
         - name: c3-16\n  cpu: 8\n  memory: 16Gi\n  resources: {nvidia.com/gpu: 1}\n  price: 1.5\n  labels: {tier: gold}\n  offerings:\n  \
           - {zone: test-zone-a, capacityType: on-demand}\n  - {zone: test-zone-b, capacityType: spot, available: false}\n",
    )
    .unwrap();
    let cloud = SimCloud::start(SimCloudOptions {
        catalog,
        ..Default::default()
    })
    .await
    .unwrap();
    let answer = call(&cloud, "GET", "/v1/instance-types", None).await;
    let types = answer.body["instanceTypes"].as_array().unwrap();
    let names: Vec<&str> = types.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["c3-4", "c3-8", "c3-16"]);
    assert_eq!(types[0]["capacity"]["pods"], "110");
    assert_eq!(
        types[0]["labels"]["simcloud.joinery.dev/instance-family"],
        "c3"
    );
    assert_eq!(
        types[0]["labels"]["simcloud.joinery.dev/instance-size"],
        "4"
    );
    assert_eq!(types[0]["offerings"].as_array().unwrap().len(), 8);
    assert_eq!(types[1]["labels"]["kubernetes.io/arch"], "arm64");
    let big = &types[2];
    assert_eq!(big["capacity"]["nvidia.com/gpu"], "1");
    assert_eq!(big["labels"]["tier"], "gold");
    let offerings = big["offerings"].as_array().unwrap();
    assert_eq!(offerings.len(), 2);
    assert_eq!(
        offerings[0],
        json!({"zone": "test-zone-a", "capacityType": "on-demand", "price": 1.5, "available": true})
    );
    assert_eq!(offerings[1]["capacityType"], "spot");
    assert_eq!(offerings[1]["available"], false);
    assert!(
        (offerings[1]["price"].as_f64().unwrap() - 1.05).abs() < 1e-9,
        "spot defaults to 70 % of the price override"
    );
    // An unavailable or absent offering is never launched.
    let refused = call(
        &cloud,
        "POST",
        "/v1/instances",
        Some(launch_body(
            vec![
                candidate("c3-16", "test-zone-b", "spot"),
                candidate("c3-16", "test-zone-c", "on-demand"),
            ],
            json!({}),
        )),
    )
    .await;
    assert_eq!(refused.status, 409);
    let ok = call(
        &cloud,
        "POST",
        "/v1/instances",
        Some(launch_body(
            vec![candidate("c3-16", "test-zone-a", "on-demand")],
            json!({}),
        )),
    )
    .await;
    assert_eq!(ok.status, 201);
    assert_eq!(ok.body["pricePerHour"], 1.5);
}

#[tokio::test]
async fn an_inconsistent_catalog_is_refused_at_start() {
    let mut types = joinery_core::catalog::default_instance_types();
    types[0].offerings = Some(vec![
        serde_json::from_value(json!({"zone": "nowhere", "capacityType": "spot"})).unwrap(),
    ]);
    let catalog = Catalog {
        zones: Some(joinery_core::catalog::default_zones()),
        instance_types: Some(types),
        ..Default::default()
    };
    let err = SimCloud::start(SimCloudOptions {
        catalog,
        ..Default::default()
    })
    .await
    .err()
    .expect("refused");
    match err {
        SimError::InvalidCatalog(message) => assert!(message.contains("nowhere"), "{message}"),
        other => panic!("unexpected error {other}"),
    }
}

#[tokio::test]
async fn the_simcloud_node_class_crd_is_served_by_the_emulator() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};

    let server = joinery_emulator::ApiServer::start(Default::default())
        .await
        .unwrap();
    let client = server.client().unwrap();
    let crd: CustomResourceDefinition =
        serde_norway::from_str(include_str!("../../../plugins/simcloud/nodeclass-crd.yaml"))
            .expect("the CRD parses");
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .expect("the CRD is accepted");
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "sim.joinery.dev",
        "v1alpha1",
        "SimNodeClass",
    ));
    let classes: Api<DynamicObject> = Api::all_with(client, &resource);
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "sim.joinery.dev/v1alpha1",
        "kind": "SimNodeClass",
        "metadata": {"name": "default"},
        "spec": {
            "zones": ["test-zone-a"],
            "instanceTypes": ["c3-4"],
            "tags": {"team": "sim"},
            "userData": "#!/bin/sh\n",
            "userDataRenderer": {"name": "k3s", "parameters": {"tokenSecret": "k3s/token", "nested": {"x": 1}}},
            "kubelet": {"maxPods": 30},
            "bogus": true,
        },
    }))
    .unwrap();
    let created = classes
        .create(&PostParams::default(), &object)
        .await
        .expect("a full SimNodeClass is valid");
    let spec = &created.data["spec"];
    assert_eq!(
        spec["userDataRenderer"]["parameters"]["nested"]["x"], 1,
        "renderer parameters keep unknown fields"
    );
    assert_eq!(spec["kubelet"]["maxPods"], 30);
    assert!(
        spec.get("bogus").is_none(),
        "unknown spec fields are pruned"
    );
    let wrong: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "sim.joinery.dev/v1alpha1", "kind": "SimNodeClass", "metadata": {"name": "wrong"},
        "spec": {"zones": "test-zone-a"},
    }))
    .unwrap();
    assert!(
        classes
            .create(&PostParams::default(), &wrong)
            .await
            .is_err(),
        "zones must be a list"
    );
}
