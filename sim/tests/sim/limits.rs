//! Limits of the emulated API server, as a real one has them: the cost and size budgets of
//! CRD validation rules (an expensive rule is refused, not evaluated for minutes), the size
//! limit of request bodies, and the type checks of what a body says it is and holds.

use joinery_sim::{ApiServer, ApiServerOptions};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::core::Status;
use serde_json::json;

async fn start() -> (ApiServer, Client) {
    let server = ApiServer::start(ApiServerOptions::default())
        .await
        .expect("server starts");
    let client = server.client().expect("client builds");
    (server, client)
}

fn api_status<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> Box<Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// A CRD whose `spec.numbers` (a list of integers) and `spec.text` carry rules that cost
/// nothing on small values and explode on big ones.
fn samples_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "samples.limits.joinery.sh"},
        "spec": {
            "group": "limits.joinery.sh",
            "scope": "Namespaced",
            "names": {"plural": "samples", "singular": "sample", "kind": "Sample", "listKind": "SampleList"},
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": {"type": "object", "properties": {
                        "numbers": {
                            "type": "array",
                            "items": {"type": "integer"},
                            "x-kubernetes-validations": [{
                                "rule": "self.all(x, self.all(y, self.all(z, x + y + z >= 0)))",
                                "message": "numbers must not be negative"
                            }]
                        },
                        "text": {
                            "type": "string",
                            "x-kubernetes-validations": [{
                                "rule": "self.replace('a', self + self).size() > 0"
                            }]
                        }
                    }}}
                }}
            }]
        }
    }))
    .unwrap()
}

async fn samples(client: &Client) -> Api<DynamicObject> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &samples_crd())
        .await
        .unwrap();
    let gvk = GroupVersionKind::gvk("limits.joinery.sh", "v1", "Sample");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "samples");
    Api::default_namespaced_with(client.clone(), &resource)
}

fn sample(name: &str, spec: serde_json::Value) -> DynamicObject {
    let gvk = GroupVersionKind::gvk("limits.joinery.sh", "v1", "Sample");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "samples");
    DynamicObject::new(name, &resource).data(json!({ "spec": spec }))
}

#[tokio::test]
async fn a_rule_over_its_cost_limit_is_refused_and_the_server_keeps_serving() {
    let (_server, client) = start().await;
    let api = samples(&client).await;
    // Cheap on a small list: accepted, and the rule still works.
    api.create(
        &PostParams::default(),
        &sample("small", json!({"numbers": [1, 2, 3]})),
    )
    .await
    .unwrap();
    let negative = api_status(
        api.create(
            &PostParams::default(),
            &sample("negative", json!({"numbers": [1, -5]})),
        )
        .await,
    );
    assert_eq!(negative.code, 422, "{}", negative.message);
    assert!(
        negative.message.contains("numbers must not be negative"),
        "{}",
        negative.message
    );
    // 700³ comprehension steps: refused at the per-call limit instead of evaluated for minutes.
    let numbers: Vec<i64> = (0..700).collect();
    let status = api_status(
        api.create(
            &PostParams::default(),
            &sample("big", json!({ "numbers": numbers })),
        )
        .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert!(
        status.message.contains(
            "spec.numbers: Invalid value: \"array\": 'operation cancelled: actual cost limit \
             exceeded': call cost exceeds limit for rule: numbers must not be negative"
        ),
        "{}",
        status.message
    );
    // The server still answers.
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.major, "1");
    assert!(
        api.get("big").await.is_err(),
        "the refused object is not stored"
    );
}

#[tokio::test]
async fn a_rule_building_an_oversized_string_is_refused() {
    let (_server, client) = start().await;
    let api = samples(&client).await;
    api.create(
        &PostParams::default(),
        &sample("short", json!({"text": "banana"})),
    )
    .await
    .unwrap();
    // 20,000 'a's, each replaced by 40,000 bytes: an 800 MB string, refused before it is built.
    let text = "a".repeat(20_000);
    let status = api_status(
        api.create(
            &PostParams::default(),
            &sample("long", json!({ "text": text })),
        )
        .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert!(
        status.message.contains("spec.text: Invalid value: \"string\": 'operation cancelled: actual cost limit exceeded: the rule builds a string of 800000000 bytes, over the limit of 1048576'"),
        "{}",
        status.message
    );
}
