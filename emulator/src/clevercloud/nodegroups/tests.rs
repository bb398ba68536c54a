//! The fake CKE against the emulated API server and the cluster physics over loopback: the
//! CRD's validation, then the operator driven through a `kube::Client` with a fast clock.

use std::sync::Arc;
use std::time::Duration;

use joinery_core::clock::Clock;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::*;
use crate::test_support::eventually;
use crate::{ApiServer, ApiServerOptions, Physics, PhysicsOptions};

const SPEED: f64 = 100.0;

struct Fake {
    _server: ApiServer,
    client: Client,
    operator: NodeGroupOperator,
    _physics: Physics,
}

impl Fake {
    fn groups(&self) -> Api<DynamicObject> {
        Api::all_with(self.client.clone(), &api_resource())
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    async fn create(&self, object: Value) -> Result<DynamicObject, kube::Error> {
        self.groups()
            .create(
                &PostParams::default(),
                &serde_json::from_value(object).unwrap(),
            )
            .await
    }

    /// Waits for the NodeGroup's `status.phase`.
    async fn phase(&self, name: &str, phase: &str) -> DynamicObject {
        let groups = self.groups();
        eventually(&format!("NodeGroup {name} {phase}"), || {
            let groups = groups.clone();
            async move {
                groups
                    .get(name)
                    .await
                    .ok()
                    .filter(|g| g.data.pointer("/status/phase") == Some(&json!(phase)))
            }
        })
        .await
    }

    async fn gone<K>(&self, api: Api<K>, name: &str)
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        eventually(&format!("{name} gone"), || {
            let api = api.clone();
            async move {
                matches!(api.get(name).await, Err(kube::Error::Api(s)) if s.code == 404)
                    .then_some(())
            }
        })
        .await
    }

    async fn ready_node(&self, name: &str) -> Node {
        let nodes = self.nodes();
        eventually(&format!("node {name} ready"), || {
            let nodes = nodes.clone();
            async move {
                nodes
                    .get(name)
                    .await
                    .ok()
                    .filter(crate::physics::node_is_ready)
            }
        })
        .await
    }
}

async fn server(clock: &Arc<Clock>) -> (ApiServer, Client) {
    let server = ApiServer::start(ApiServerOptions {
        clock: clock.clone(),
        ..Default::default()
    })
    .await
    .unwrap();
    let client = server.client().unwrap();
    install_crd(&client).await.unwrap();
    (server, client)
}

async fn fake(configure: impl FnOnce(&mut CkeSettings)) -> Fake {
    let clock = Arc::new(Clock::with_speed(SPEED));
    let (server, client) = server(&clock).await;
    let mut options = NodeGroupOperatorOptions::new(client.clone(), clock.clone());
    options.settings.boot_delay = DelayRange::fixed(Duration::from_secs(5));
    options.settings.teardown_delay = DelayRange::fixed(Duration::from_secs(3));
    configure(&mut options.settings);
    let operator = NodeGroupOperator::start(options);
    let physics = Physics::start(
        PhysicsOptions::new(client.clone(), clock)
            .with_cloud(operator.subscribe(), Duration::from_secs(30)),
    );
    Fake {
        _server: server,
        client,
        operator,
        _physics: physics,
    }
}

fn nodegroup(name: &str, flavor: &str) -> Value {
    json!({"apiVersion": "api.clever-cloud.com/v1", "kind": "NodeGroup", "metadata": {"name": name}, "spec": {"flavor": flavor, "nodeCount": 1}})
}

fn condition<'a>(group: &'a DynamicObject, kind: &str) -> &'a Value {
    group
        .data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Value::Null)
}

fn refused_message(error: kube::Error) -> String {
    match error {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 422, "{status:?}");
            status.message
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn the_crd_is_the_documented_one() {
    let crd: CustomResourceDefinition = serde_json::from_value(crd()).unwrap();
    assert_eq!(crd.metadata.name.as_deref(), Some(CRD_NAME));
    assert_eq!(
        (
            crd.spec.group.as_str(),
            crd.spec.scope.as_str(),
            crd.spec.names.plural.as_str()
        ),
        (GROUP, "Cluster", PLURAL)
    );
    let version = &crd.spec.versions[0];
    assert_eq!(version.name, VERSION);
    let scale = version
        .subresources
        .as_ref()
        .and_then(|s| s.scale.as_ref())
        .unwrap();
    assert_eq!(
        (
            scale.spec_replicas_path.as_str(),
            scale.status_replicas_path.as_str()
        ),
        (".spec.nodeCount", ".status.nodeCount")
    );
    let memory: Vec<u64> = FLAVORS.iter().map(|f| f.memory_ki).collect();
    assert_eq!(
        memory,
        [
            3_911_884, 7_937_580, 11_957_148, 15_988_992, 23_983_488, 31_977_984
        ]
    );
    assert_eq!(flavor("XS").unwrap().allocatable()["memory"], "7835180Ki");
    assert_eq!(
        flavor("XS").unwrap().allocatable()["ephemeral-storage"],
        "36874339Ki"
    );
}

#[tokio::test]
async fn the_api_server_enforces_the_schema_and_immutability() {
    let clock = Arc::new(Clock::with_speed(SPEED));
    let (_server, client) = server(&clock).await;
    let groups: Api<DynamicObject> = Api::all_with(client.clone(), &api_resource());
    let create = |object: Value| {
        let groups = groups.clone();
        async move {
            groups
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(object).unwrap(),
                )
                .await
        }
    };
    let with_spec = |spec: Value| json!({"apiVersion": "api.clever-cloud.com/v1", "kind": "NodeGroup", "metadata": {"name": "bad"}, "spec": spec});

    for prefix in ["kubernetes.io/", "node.kubernetes.io/", "clever-cloud.com/"] {
        let message = refused_message(
            create(with_spec(
                json!({"flavor": "S", "labels": {format!("{prefix}role"): "x"}}),
            ))
            .await
            .unwrap_err(),
        );
        assert!(
            message.contains("must not start with"),
            "{prefix}: {message}"
        );
    }
    let long = "v".repeat(64);
    let message = refused_message(
        create(with_spec(json!({"flavor": "S", "labels": {"team": long}})))
            .await
            .unwrap_err(),
    );
    assert!(
        message.contains("spec.labels.team") && message.contains("63"),
        "{message}"
    );
    let message = refused_message(
        create(with_spec(
            json!({"flavor": "S", "labels": {"team": "no spaces"}}),
        ))
        .await
        .unwrap_err(),
    );
    assert!(message.contains("should match"), "{message}");
    let message = refused_message(
        create(with_spec(json!({"flavor": "S", "nodeCount": 17})))
            .await
            .unwrap_err(),
    );
    assert!(
        message.contains("spec.nodeCount") && message.contains("16"),
        "{message}"
    );
    let message = refused_message(
        create(with_spec(json!({"flavor": "XXL"})))
            .await
            .unwrap_err(),
    );
    assert!(message.contains("spec.flavor"), "{message}");
    let message = refused_message(
        create(with_spec(json!({"nodeCount": 1})))
            .await
            .unwrap_err(),
    );
    assert!(message.contains("spec.flavor"), "{message}");
    let message = refused_message(
        create(with_spec(
            json!({"flavor": "S", "taints": [{"key": "a", "effect": "Sometimes"}]}),
        ))
        .await
        .unwrap_err(),
    );
    assert!(message.contains("effect"), "{message}");

    let good = json!({
        "apiVersion": "api.clever-cloud.com/v1", "kind": "NodeGroup", "metadata": {"name": "good"},
        "spec": {"flavor": "S", "labels": {"team": "blue", "example.com/tier": "web"}, "taints": [{"key": "dedicated", "value": "web", "effect": "NoSchedule"}]},
    });
    let created = create(good).await.unwrap();
    assert_eq!(
        created.data.pointer("/spec/nodeCount"),
        Some(&json!(1)),
        "nodeCount defaults to 1"
    );
    let patch = |spec: Value| {
        let groups = groups.clone();
        async move {
            groups
                .patch(
                    "good",
                    &PatchParams::default(),
                    &Patch::Merge(&json!({"spec": spec})),
                )
                .await
        }
    };
    let message = refused_message(patch(json!({"flavor": "M"})).await.unwrap_err());
    assert!(message.contains("flavor is immutable"), "{message}");
    let message = refused_message(patch(json!({"labels": {"team": "red"}})).await.unwrap_err());
    assert!(message.contains("labels are immutable"), "{message}");
    let message = refused_message(patch(json!({"labels": {"extra": "x"}})).await.unwrap_err());
    assert!(message.contains("labels are immutable"), "{message}");
    let message = refused_message(patch(json!({"taints": []})).await.unwrap_err());
    assert!(message.contains("taints are immutable"), "{message}");
    let updated = patch(json!({"nodeCount": 3})).await.unwrap();
    assert_eq!(updated.data.pointer("/spec/nodeCount"), Some(&json!(3)));
    let message = refused_message(patch(json!({"nodeCount": 17})).await.unwrap_err());
    assert!(message.contains("spec.nodeCount"), "{message}");
    // The scale subresource writes spec.nodeCount.
    let scale = groups
        .patch_scale(
            "good",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(2));
    assert_eq!(
        groups
            .get("good")
            .await
            .unwrap()
            .data
            .pointer("/spec/nodeCount"),
        Some(&json!(2))
    );
}

#[tokio::test]
async fn an_accepted_group_gets_a_node_with_an_empty_provider_id() {
    let fake = fake(|_| {}).await;
    let mut object = nodegroup("ng-a", "XS");
    object["spec"]["labels"] = json!({"team": "blue"});
    object["spec"]["taints"] =
        json!([{"key": "dedicated", "value": "web", "effect": "NoSchedule"}]);
    fake.create(object).await.unwrap();

    let group = fake.phase("ng-a", "Synced").await;
    assert!(
        group
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == FINALIZER)
    );
    let ready = condition(&group, "Ready");
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("True"), Some("Synced")),
        "{ready}"
    );
    assert_eq!(condition(&group, "ReconcileInProgress")["status"], "False");
    assert_eq!(condition(&group, "Ready")["observedGeneration"], 1);
    let status = &group.data["status"];
    assert_eq!(status["targetNodeCount"], 1);
    assert!(
        status["upstreamId"]
            .as_str()
            .is_some_and(|id| id.starts_with("nodegroup_")),
        "{status}"
    );
    assert_eq!(status["labels"], json!({"team": "blue"}));
    assert_eq!(
        status["taints"],
        json!([{"key": "dedicated", "value": "web", "effect": "NoSchedule"}])
    );

    let node = fake.ready_node("ng-a-node0").await;
    let spec = node.spec.clone().unwrap_or_default();
    assert!(
        spec.provider_id.as_deref().unwrap_or_default().is_empty(),
        "CKE leaves the provider ID empty: {:?}",
        spec.provider_id
    );
    let labels = node.metadata.labels.clone().unwrap_or_default();
    for (key, value) in [
        (NODEGROUP_LABEL, "ng-a"),
        (FLAVOR_LABEL, "XS"),
        (ROLE_LABEL, "worker"),
        ("team", "blue"),
        ("node.kubernetes.io/instance-type", "XS"),
        ("topology.kubernetes.io/zone", "par"),
        ("topology.kubernetes.io/region", "par"),
        ("kubernetes.io/arch", "amd64"),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/hostname", "ng-a-node0"),
    ] {
        assert_eq!(
            labels.get(key).map(String::as_str),
            Some(value),
            "label {key}: {labels:?}"
        );
    }
    let taints = spec.taints.unwrap_or_default();
    assert!(
        taints.iter().any(|t| t.key == "dedicated"
            && t.value.as_deref() == Some("web")
            && t.effect == "NoSchedule"),
        "{taints:?}"
    );
    let status = node.status.unwrap();
    let quantity = |list: &Option<
        std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
                    key: &str| {
        list.as_ref()
            .and_then(|l| l.get(key))
            .map(|q| q.0.clone())
            .unwrap_or_default()
    };
    assert_eq!(quantity(&status.capacity, "cpu"), "6");
    assert_eq!(quantity(&status.capacity, "memory"), "7937580Ki");
    assert_eq!(
        quantity(&status.capacity, "ephemeral-storage"),
        "40971488Ki"
    );
    assert_eq!(quantity(&status.capacity, "pods"), "110");
    assert_eq!(quantity(&status.allocatable, "memory"), "7835180Ki");
    assert_eq!(
        quantity(&status.allocatable, "ephemeral-storage"),
        "36874339Ki"
    );

    // The group reports its ready node.
    let groups = fake.groups();
    eventually("status.nodeCount 1", || {
        let groups = groups.clone();
        async move {
            (groups
                .get("ng-a")
                .await
                .ok()?
                .data
                .pointer("/status/nodeCount")
                == Some(&json!(1)))
            .then_some(())
        }
    })
    .await;
    assert_eq!(
        fake.operator.counters(),
        NodeGroupCounters {
            accepted: 1,
            rejected: 0,
            vanished: 0,
            machines: 1
        }
    );
    let instances = fake.operator.instances();
    assert_eq!(instances.len(), 1);
    assert_eq!(
        (
            instances[0].provider_id.as_str(),
            instances[0].instance_type.as_str()
        ),
        ("clevercloud://ng-a", "XS")
    );
    assert_eq!(instances[0].state, InstanceState::Running);
    assert_eq!(fake.operator.usage(), Usage::new(30, 32.0));
}

#[tokio::test]
async fn a_group_over_quota_is_refused_with_the_platform_message() {
    let fake = fake(|o| o.rejection_delay = DelayRange::fixed(Duration::from_secs(2))).await;
    fake.create(nodegroup("big", "L")).await.unwrap();
    let group = fake.phase("big", "QuotaExceeded").await;
    let failed = condition(&group, "ReconcileFailed");
    assert_eq!(
        (failed["status"].as_str(), failed["reason"].as_str()),
        (Some("True"), Some("QuotaExceeded")),
        "{failed}"
    );
    assert_eq!(
        failed["message"],
        "Quota exceeded: RAM max: limit = 40.0 GB | actual = 48.0 GB"
    );
    assert_eq!(condition(&group, "Ready")["status"], "False");
    assert_eq!(fake.operator.counters().rejected, 1);
    assert_eq!(
        fake.operator.usage(),
        Usage::new(24, 24.0),
        "a refusal holds nothing"
    );

    // What is left fits exactly: an M (10 vCPU, 16 GB).
    fake.create(nodegroup("medium", "M")).await.unwrap();
    fake.phase("medium", "Synced").await;
    // And nothing more: vCPU has room for a 2XS, RAM has not.
    fake.create(nodegroup("tiny", "2XS")).await.unwrap();
    let tiny = fake.phase("tiny", "QuotaExceeded").await;
    assert_eq!(
        condition(&tiny, "ReconcileFailed")["message"],
        "Quota exceeded: RAM max: limit = 40.0 GB | actual = 44.0 GB"
    );
    assert!(fake.nodes().get_opt("big-node0").await.unwrap().is_none());

    // A refused group is let go at once when deleted.
    fake.groups()
        .delete("big", &DeleteParams::background())
        .await
        .unwrap();
    fake.gone(fake.groups(), "big").await;
}

#[tokio::test]
async fn deleting_a_group_removes_its_node_then_the_group() {
    let fake = fake(|_| {}).await;
    fake.create(nodegroup("ng-d", "S")).await.unwrap();
    fake.ready_node("ng-d-node0").await;
    // Karpenter holds the Node until it has drained it.
    let hold = json!({"metadata": {"finalizers": ["karpenter.sh/termination"]}});
    fake.nodes()
        .patch("ng-d-node0", &PatchParams::default(), &Patch::Merge(&hold))
        .await
        .unwrap();
    fake.groups()
        .delete("ng-d", &DeleteParams::background())
        .await
        .unwrap();

    let nodes = fake.nodes();
    eventually("the node marked for deletion", || {
        let nodes = nodes.clone();
        async move {
            nodes
                .get("ng-d-node0")
                .await
                .ok()
                .filter(|n| n.metadata.deletion_timestamp.is_some())
        }
    })
    .await;
    let group = fake
        .groups()
        .get("ng-d")
        .await
        .expect("the NodeGroup waits for its Node");
    assert!(group.metadata.deletion_timestamp.is_some());
    assert_eq!(condition(&group, "Terminating")["status"], "True");
    assert_eq!(
        fake.operator.usage(),
        Usage::new(24, 24.0),
        "a torn-down group holds nothing"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        fake.groups().get_opt("ng-d").await.unwrap().is_some(),
        "still waiting for the Node"
    );

    fake.nodes()
        .patch(
            "ng-d-node0",
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    fake.gone(fake.nodes(), "ng-d-node0").await;
    fake.gone(fake.groups(), "ng-d").await;
    assert_eq!(
        fake.operator.instances()[0].state,
        InstanceState::Terminated
    );
}

#[tokio::test]
async fn a_group_owned_by_a_deleted_nodeclaim_is_collected() {
    let fake = fake(|_| {}).await;
    let crds: Api<CustomResourceDefinition> = Api::all(fake.client.clone());
    for crd in joinery_api::crds() {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    let claims: Api<DynamicObject> = Api::all_with(
        fake.client.clone(),
        &kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
            "karpenter.sh",
            "v1",
            "NodeClaim",
        )),
    );
    let claim = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "default-x1"},
        "spec": {"nodeClassRef": {"group": "karpenter.clever-cloud.com", "kind": "CleverNodeClass", "name": "default"}, "requirements": []},
    });
    let claim = claims
        .create(
            &PostParams::default(),
            &serde_json::from_value(claim).unwrap(),
        )
        .await
        .unwrap();
    let mut group = nodegroup("default-x1", "2XS");
    group["metadata"]["ownerReferences"] = json!([{"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": "default-x1", "uid": claim.metadata.uid, "blockOwnerDeletion": true}]);
    fake.create(group).await.unwrap();
    fake.ready_node("default-x1-node0").await;

    claims
        .delete("default-x1", &DeleteParams::background())
        .await
        .unwrap();
    fake.gone(fake.nodes(), "default-x1-node0").await;
    fake.gone(fake.groups(), "default-x1").await;
}

#[tokio::test]
async fn node_count_changes_scale_the_group() {
    let fake = fake(|_| {}).await;
    let mut object = nodegroup("pool", "2XS");
    object["spec"]["nodeCount"] = json!(2);
    fake.create(object).await.unwrap();
    fake.ready_node("pool-node0").await;
    fake.ready_node("pool-node1").await;
    assert_eq!(fake.operator.usage(), Usage::new(32, 32.0));

    // Over quota: the group keeps its nodes and says why it cannot grow.
    fake.groups()
        .patch(
            "pool",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"nodeCount": 5}})),
        )
        .await
        .unwrap();
    let groups = fake.groups();
    let group = eventually("a refused scale-up", || {
        let groups = groups.clone();
        async move {
            groups
                .get("pool")
                .await
                .ok()
                .filter(|g| condition(g, "ReconcileFailed")["status"] == "True")
        }
    })
    .await;
    assert_eq!(
        condition(&group, "ReconcileFailed")["message"],
        "Quota exceeded: RAM max: limit = 40.0 GB | actual = 44.0 GB"
    );
    assert_eq!(group.data.pointer("/status/phase"), Some(&json!("Synced")));
    assert_eq!(
        group.data.pointer("/status/targetNodeCount"),
        Some(&json!(2))
    );

    fake.groups()
        .patch(
            "pool",
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"nodeCount": 1}})),
        )
        .await
        .unwrap();
    fake.gone(fake.nodes(), "pool-node1").await;
    assert!(
        fake.nodes().get_opt("pool-node0").await.unwrap().is_some(),
        "the highest index goes first"
    );
    eventually("usage back to one node", || async {
        (fake.operator.usage() == Usage::new(28, 28.0)).then_some(())
    })
    .await;
}

#[tokio::test]
async fn refused_groups_leak_their_reservation_for_a_while() {
    let fake = fake(|o| o.reservation_leak = Some(Duration::from_secs(60))).await;
    fake.create(nodegroup("big", "L")).await.unwrap();
    fake.phase("big", "QuotaExceeded").await;
    assert_eq!(
        fake.operator.usage(),
        Usage::new(36, 48.0),
        "with the leak option a refusal holds its demand"
    );
    fake.groups()
        .delete("big", &DeleteParams::background())
        .await
        .unwrap();
    fake.gone(fake.groups(), "big").await;

    // Right after the deletion the reservation is still held: an M that would fit is refused.
    fake.create(nodegroup("m1", "M")).await.unwrap();
    let m1 = fake.phase("m1", "QuotaExceeded").await;
    assert_eq!(
        condition(&m1, "ReconcileFailed")["message"],
        "Quota exceeded: RAM max: limit = 40.0 GB | actual = 64.0 GB"
    );
    fake.groups()
        .delete("m1", &DeleteParams::background())
        .await
        .unwrap();

    // Once the leaks have expired, the same M is accepted.
    eventually("the leaks expire", || async {
        (fake.operator.usage() == Usage::new(24, 24.0)).then_some(())
    })
    .await;
    fake.create(nodegroup("m2", "M")).await.unwrap();
    fake.phase("m2", "Synced").await;
}

#[tokio::test]
async fn a_vanishing_group_is_deleted_upstream_after_it_synced() {
    let fake = fake(|o| {
        o.vanish_names.insert("ghost".to_string());
    })
    .await;
    fake.create(nodegroup("ghost", "XS")).await.unwrap();
    fake.create(nodegroup("solid", "XS")).await.unwrap();
    fake.gone(fake.groups(), "ghost").await;
    fake.phase("solid", "Synced").await;
    let counters = fake.operator.counters();
    assert_eq!((counters.accepted, counters.vanished), (2, 1));
    assert!(fake.nodes().get_opt("ghost-node0").await.unwrap().is_none());
    eventually("the ghost's machine terminated", || async {
        fake.operator
            .instances()
            .iter()
            .any(|i| i.tags["nodegroup"] == "ghost" && i.state == InstanceState::Terminated)
            .then_some(())
    })
    .await;
}

#[test]
fn delays_are_drawn_within_their_range_and_repeat_with_the_seed() {
    let range = DelayRange::seconds(26, 60);
    let (mut a, mut b) = (7u64, 7u64);
    let first: Vec<Duration> = (0..50).map(|_| range.pick(&mut a)).collect();
    assert!(
        first
            .iter()
            .all(|d| (Duration::from_secs(26)..=Duration::from_secs(60)).contains(d))
    );
    assert_eq!(
        first,
        (0..50).map(|_| range.pick(&mut b)).collect::<Vec<_>>()
    );
    assert_eq!(
        DelayRange::fixed(Duration::from_secs(3)).pick(&mut a),
        Duration::from_secs(3)
    );
}
