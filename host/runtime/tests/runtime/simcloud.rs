//! The built-in `simcloud` plugin through the real runtime, against a running simulated
//! cloud (`joinery_emulator::cloud::SimCloud`) reached over the host's gated outgoing HTTP.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{claim, engine};
use joinery_builtin_plugins::builtin_manifests;
use joinery_emulator::cloud::{CloudVerb, OfferingKey, SimCloud, SimCloudOptions};
use joinery_runtime::CallError;
use joinery_runtime::contract::{
    CloudError, CreateRequest, InstanceState, NodeClaim, NodeClass, Operator, Requirement, Resource,
};
use joinery_runtime::grants::Grants;
use joinery_runtime::plugin::{LoadContext, LoadedPlugin, PluginBytes, PluginSource};
use serde_json::{Value, json};

/// Loads the built-in simcloud plugin granted exactly the cloud's loopback address.
fn plugin(cloud: &SimCloud, cluster: &str) -> Arc<LoadedPlugin> {
    let (manifest, wasm) = builtin_manifests()
        .into_iter()
        .find(|(m, _)| m.name == "simcloud")
        .expect("simcloud is built in");
    let url = cloud.url();
    let grants = format!(
        "plugins:\n  simcloud:\n    http: [\"{url}\"]\n    config: {{endpoint: \"{url}\", clusterName: {cluster}}}\n"
    );
    let grants = Grants::parse(&grants, "test grants").unwrap();
    let cx = LoadContext::new(engine(), grants, Default::default()).unwrap();
    Arc::new(
        LoadedPlugin::load(
            &cx,
            PluginBytes {
                manifest,
                source: PluginSource::Builtin,
                wasm,
                compiled: None,
            },
        )
        .unwrap(),
    )
}

fn class(spec: Value) -> NodeClass {
    NodeClass {
        name: "default".into(),
        uid: "uid-class".into(),
        generation: 1,
        spec: spec.to_string(),
        status: "{}".into(),
    }
}

fn requirement(key: &str, operator: Operator, values: &[&str]) -> Requirement {
    Requirement {
        key: key.into(),
        operator,
        values: values.iter().map(|v| v.to_string()).collect(),
        min_values: None,
    }
}

fn amd64_claim(name: &str) -> NodeClaim {
    claim(
        name,
        vec![
            requirement("kubernetes.io/arch", Operator::In, &["amd64"]),
            requirement(
                "karpenter.sh/capacity-type",
                Operator::In,
                &["spot", "on-demand"],
            ),
            requirement("karpenter.sh/nodepool", Operator::In, &["default"]),
        ],
        vec![
            Resource {
                name: "cpu".into(),
                quantity: "500m".into(),
            },
            Resource {
                name: "pods".into(),
                quantity: "3".into(),
            },
        ],
    )
}

fn create_request(claim: NodeClaim, spec: Value) -> CreateRequest {
    CreateRequest {
        claim,
        node_class: class(spec),
        user_data: "#!/bin/sh\necho joined\n".into(),
    }
}

fn cloud_error(result: Result<impl std::fmt::Debug, CallError>) -> CloudError {
    match result {
        Err(CallError::Cloud { error, .. }) => error,
        other => panic!("expected a classified cloud error, got {other:?}"),
    }
}

async fn start() -> SimCloud {
    SimCloud::start(SimCloudOptions::default())
        .await
        .expect("the simulated cloud starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_and_instance_types_come_from_the_cloud() {
    let cloud = start().await;
    let plugin = plugin(&cloud, "test");

    let resolved = plugin.resolve_node_class(&class(json!({}))).await.unwrap();
    assert_eq!(resolved.conditions.len(), 1);
    assert_eq!(resolved.conditions[0].status, "True");
    let status: Value = serde_json::from_str(&resolved.status).unwrap();
    assert_eq!(
        status["zones"],
        json!(["test-zone-a", "test-zone-b", "test-zone-c", "test-zone-d"])
    );
    let unknown = plugin
        .resolve_node_class(&class(json!({"zones": ["test-zone-a", "mars-1"]})))
        .await
        .unwrap();
    assert_eq!(unknown.conditions[0].status, "False");
    assert!(
        unknown.conditions[0].message.contains("mars-1"),
        "{}",
        unknown.conditions[0].message
    );

    let types = plugin.get_instance_types(&class(json!({}))).await.unwrap();
    assert_eq!(types.len(), 72);
    let c4 = types
        .iter()
        .find(|t| t.name() == "c-4x-amd64-linux")
        .unwrap();
    assert_eq!(c4.offerings().0.len(), 8);
    let on_demand = c4
        .offerings()
        .0
        .iter()
        .find(|o| o.zone() == "test-zone-a" && o.capacity_type() == "on-demand")
        .unwrap();
    assert!(
        (on_demand.price().unwrap() - 0.108_589_934_592).abs() < 1e-9,
        "{:?}",
        on_demand.price()
    );
    assert_eq!(c4.capacity().get("memory"), 8 << 30);
    assert_eq!(c4.overhead().kube_reserved.get("cpu"), 100);
    let family = c4
        .requirements()
        .get("simcloud.joinery.dev/instance-family")
        .expect("family label");
    assert_eq!(family.values().iter().collect::<Vec<_>>(), ["c"]);

    let narrowed = plugin
        .get_instance_types(&class(json!({"instanceTypes": ["c-1x-amd64-linux", "m-2x-arm64-linux", "nope"], "zones": ["test-zone-b"]})))
        .await
        .unwrap();
    assert_eq!(narrowed.len(), 2);
    assert!(
        narrowed.iter().all(|t| t.offerings().0.len() == 2
            && t.offerings().0.iter().all(|o| o.zone() == "test-zone-b"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_launches_the_cheapest_fitting_offering_and_falls_back_on_insufficient_capacity() {
    let cloud = start().await;
    let plugin = plugin(&cloud, "test");
    let spec = json!({"tags": {"team": "sim"}, "userDataRenderer": {"name": "k3s", "parameters": {"x": 1}}, "kubelet": {}});

    let first = plugin
        .create(&create_request(amd64_claim("default-aaaaa"), spec.clone()))
        .await
        .unwrap();
    assert_eq!(first.instance_type, "c-1x-amd64-linux");
    assert_eq!(first.capacity_type, "spot");
    assert_eq!(
        first.zone, "test-zone-a",
        "ties keep the catalog's zone order"
    );
    assert_eq!(first.state, InstanceState::Pending);
    assert_eq!(first.node_claim.as_deref(), Some("default-aaaaa"));
    let id = first.provider_id.strip_prefix("simcloud://").unwrap();
    let launched = cloud.instance(id).expect("the cloud knows the instance");
    assert_eq!(launched.user_data, "#!/bin/sh\necho joined\n");
    assert_eq!(launched.tags["karpenter.sh/nodeclaim"], "default-aaaaa");
    assert_eq!(launched.tags["karpenter.sh/nodepool"], "default");
    assert_eq!(launched.tags["joinery.dev/cluster"], "test");
    assert_eq!(launched.tags["team"], "sim");
    assert!((launched.price_per_hour - 0.7 * (0.025 + 0.002_147_483_648)).abs() < 1e-9);

    // Spot c-1x is gone everywhere: the next cheapest is s-1x spot (0.0205 < 0.02715 for c-1x on-demand).
    cloud
        .faults()
        .insufficient_capacity(OfferingKey::new("c-1x-amd64-linux", "*", "spot"));
    let second = plugin
        .create(&create_request(amd64_claim("default-bbbbb"), spec.clone()))
        .await
        .unwrap();
    assert_eq!(
        (second.instance_type.as_str(), second.capacity_type.as_str()),
        ("s-1x-amd64-linux", "spot")
    );

    // Bigger requests skip types that do not fit.
    let mut big = amd64_claim("default-ccccc");
    big.resource_requests = vec![Resource {
        name: "memory".into(),
        quantity: "20Gi".into(),
    }];
    let third = plugin
        .create(&create_request(big, spec.clone()))
        .await
        .unwrap();
    assert_eq!(
        (third.instance_type.as_str(), third.capacity_type.as_str()),
        ("m-4x-amd64-linux", "spot"),
        "the cheapest type with more than 20Gi allocatable"
    );

    cloud
        .faults()
        .insufficient_capacity(OfferingKey::new("*", "*", "*"));
    match cloud_error(
        plugin
            .create(&create_request(amd64_claim("default-ddddd"), spec))
            .await,
    ) {
        CloudError::InsufficientCapacity(ic) => {
            assert!(!ic.offerings.is_empty() && ic.offerings.len() <= 100)
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(cloud.instances().len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_get_and_delete_see_only_this_clusters_instances() {
    let cloud = start().await;
    let ours = plugin(&cloud, "ours");
    let theirs = plugin(&cloud, "theirs");
    let mine = ours
        .create(&create_request(amd64_claim("default-mine"), json!({})))
        .await
        .unwrap();
    theirs
        .create(&create_request(amd64_claim("default-other"), json!({})))
        .await
        .unwrap();

    let listed = ours.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].provider_id, mine.provider_id);
    assert_eq!(listed[0].node_claim.as_deref(), Some("default-mine"));

    let got = ours.get(&mine.provider_id).await.unwrap();
    assert_eq!(got.instance_type, mine.instance_type);
    assert!(!got.allocatable.is_empty());

    ours.delete(&mine.provider_id).await.unwrap();
    assert!(
        matches!(
            cloud_error(ours.delete(&mine.provider_id).await),
            CloudError::NotFound(_)
        ),
        "gone: not-found"
    );
    assert!(matches!(
        cloud_error(ours.get(&mine.provider_id).await),
        CloudError::NotFound(_)
    ));
    assert!(ours.list().await.unwrap().is_empty());
    assert!(matches!(
        cloud_error(ours.get("simcloud://i-7fffffff").await),
        CloudError::NotFound(_)
    ));
    assert!(matches!(
        cloud_error(ours.delete("simcloud://i-7fffffff").await),
        CloudError::NotFound(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloud_failures_map_to_karpenter_error_classes() {
    let cloud = start().await;
    let plugin = plugin(&cloud, "test");

    cloud.faults().set_quota(Some(0));
    assert!(matches!(
        cloud_error(
            plugin
                .create(&create_request(amd64_claim("default-q"), json!({})))
                .await
        ),
        CloudError::QuotaExceeded(_)
    ));
    cloud.faults().set_quota(None);

    cloud.faults().throttle_next(1, Duration::from_secs(3));
    match cloud_error(plugin.list().await) {
        CloudError::Retryable(r) => assert_eq!(r.retry_after_ms, Some(3000)),
        other => panic!("{other:?}"),
    }

    cloud.faults().set_error_rate(CloudVerb::InstanceTypes, 1.0);
    match cloud_error(plugin.get_instance_types(&class(json!({}))).await) {
        CloudError::Retryable(r) => assert_eq!(r.retry_after_ms, None),
        other => panic!("{other:?}"),
    }
    cloud.faults().set_error_rate(CloudVerb::InstanceTypes, 0.0);

    assert!(matches!(
        cloud_error(plugin.get("aws:///us-east-1a/i-1").await),
        CloudError::Invalid(_)
    ));
    assert!(matches!(
        cloud_error(
            plugin
                .get_instance_types(&class(json!({"zones": "test-zone-a"})))
                .await
        ),
        CloudError::Invalid(_)
    ));

    // A create whose answer is lost: the retry finds the tagged instance instead of launching again.
    cloud.faults().fail_after_create(1);
    assert!(matches!(
        cloud_error(
            plugin
                .create(&create_request(amd64_claim("default-lost"), json!({})))
                .await
        ),
        CloudError::Retryable(_)
    ));
    let found = plugin
        .create(&create_request(amd64_claim("default-lost"), json!({})))
        .await
        .unwrap();
    assert_eq!(found.node_claim.as_deref(), Some("default-lost"));
    assert_eq!(
        cloud.instances().len(),
        1,
        "the retry did not launch a second instance"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_grant_or_an_endpoint_the_plugin_says_what_is_missing() {
    let cloud = start().await;
    let load = |grants: &str| {
        let (manifest, wasm) = builtin_manifests()
            .into_iter()
            .find(|(m, _)| m.name == "simcloud")
            .unwrap();
        let cx = LoadContext::new(
            engine(),
            Grants::parse(grants, "test grants").unwrap(),
            Default::default(),
        )
        .unwrap();
        LoadedPlugin::load(
            &cx,
            PluginBytes {
                manifest,
                source: PluginSource::Builtin,
                wasm,
                compiled: None,
            },
        )
        .unwrap()
    };
    let url = cloud.url();
    let ungranted = load(&format!(
        "plugins:\n  simcloud:\n    config: {{endpoint: \"{url}\"}}\n"
    ));
    match cloud_error(ungranted.list().await) {
        CloudError::Invalid(message) => assert!(message.contains("HttpRequestDenied"), "{message}"),
        other => panic!("{other:?}"),
    }
    let unconfigured = load(&format!("plugins:\n  simcloud:\n    http: [\"{url}\"]\n"));
    match cloud_error(unconfigured.list().await) {
        CloudError::Invalid(message) => assert!(message.contains("endpoint"), "{message}"),
        other => panic!("{other:?}"),
    }
    assert!(cloud.instances().is_empty());
}
