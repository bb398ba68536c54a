//! Limits of the emulated API server, as a real one has them: the cost and size budgets of
//! CRD validation rules (an expensive rule is refused, not evaluated for minutes), the size
//! limit of request bodies, and the type checks of what a body says it is and holds.

use joinery_emulator::{ApiServer, ApiServerOptions};
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

/// Sends `body` (JSON) with `method` to `uri` through the client; the API error, if any.
async fn send(
    client: &Client,
    method: &str,
    uri: &str,
    content_type: &str,
    body: Vec<u8>,
) -> Result<String, kube::Error> {
    let request = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", content_type)
        .body(body)
        .unwrap();
    client.request_text(request).await
}

const CONFIG_MAPS: &str = "/api/v1/namespaces/default/configmaps";

fn json_body(value: serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&value).unwrap()
}

#[tokio::test]
async fn a_request_body_over_3_mib_is_refused_with_413() {
    let (_server, client) = start().await;
    let post = |name: &str, bytes: usize| {
        json_body(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name},
            "data": {"blob": "x".repeat(bytes)}
        }))
    };
    // Under the limit: stored.
    send(
        &client,
        "POST",
        CONFIG_MAPS,
        "application/json",
        post("fits", 3_000_000),
    )
    .await
    .unwrap();
    let status = api_status(
        send(
            &client,
            "POST",
            CONFIG_MAPS,
            "application/json",
            post("huge", 7_000_000),
        )
        .await,
    );
    assert_eq!(
        (status.code, status.reason.as_str(), status.message.as_str()),
        (
            413,
            "RequestEntityTooLarge",
            "Request entity too large: limit is 3145728"
        )
    );
    let status = api_status(
        send(
            &client,
            "PUT",
            &format!("{CONFIG_MAPS}/fits"),
            "application/json",
            post("fits", 4_000_000),
        )
        .await,
    );
    assert_eq!(status.code, 413, "{}", status.message);
    let status = api_status(
        send(
            &client,
            "PATCH",
            &format!("{CONFIG_MAPS}/fits"),
            "application/merge-patch+json",
            json_body(json!({"data": {"more": "y".repeat(4_000_000)}})),
        )
        .await,
    );
    assert_eq!(status.code, 413, "{}", status.message);
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::default_namespaced(client.clone());
    assert_eq!(api_status(configmaps.get("huge").await).code, 404);
    let fits = configmaps.get("fits").await.unwrap();
    assert_eq!(
        fits.data.unwrap()["blob"].len(),
        3_000_000,
        "the refused writes changed nothing"
    );
}

#[tokio::test]
async fn a_body_of_another_kind_or_api_version_is_refused() {
    let (_server, client) = start().await;
    let secret = json_body(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "s"},
        "stringData": {"a": "b"}
    }));
    let status = api_status(send(&client, "POST", CONFIG_MAPS, "application/json", secret).await);
    assert_eq!(
        (status.code, status.reason.as_str(), status.message.as_str()),
        (
            400,
            "BadRequest",
            "the kind in the data (Secret) does not match the expected kind (ConfigMap)"
        )
    );
    let wrong_version = json_body(json!({
        "apiVersion": "apps/v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c"}
    }));
    let status = api_status(
        send(
            &client,
            "POST",
            CONFIG_MAPS,
            "application/json",
            wrong_version,
        )
        .await,
    );
    assert_eq!(
        (status.code, status.message.as_str()),
        (
            400,
            "the API version in the data (apps/v1) does not match the expected API version (v1)"
        )
    );
    // Without apiVersion and kind the endpoint's are used; with the right ones, accepted.
    send(
        &client,
        "POST",
        CONFIG_MAPS,
        "application/json",
        json_body(json!({"metadata": {"name": "bare"}, "data": {"a": "b"}})),
    )
    .await
    .unwrap();
    let status = api_status(
        send(
            &client,
            "PUT",
            &format!("{CONFIG_MAPS}/bare"),
            "application/json",
            json_body(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bare"}})),
        )
        .await,
    );
    assert_eq!(
        (status.code, status.message.as_str()),
        (
            400,
            "the kind in the data (Pod) does not match the expected kind (ConfigMap)"
        )
    );
    let configmaps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::default_namespaced(client.clone());
    assert_eq!(api_status(configmaps.get("s").await).code, 404);
    assert_eq!(
        configmaps.get("bare").await.unwrap().data.unwrap()["a"],
        "b"
    );
}

#[tokio::test]
async fn mistyped_config_map_and_secret_fields_are_refused_naming_the_field() {
    let (_server, client) = start().await;
    let secrets = "/api/v1/namespaces/default/secrets";
    let refused = [
        (
            CONFIG_MAPS,
            json!({"data": {"a": 1}}),
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal number into Go struct field ConfigMap.data of type string (key \"a\")",
        ),
        (
            CONFIG_MAPS,
            json!({"data": ["a"]}),
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal array into Go struct field ConfigMap.data of type map[string]string",
        ),
        (
            CONFIG_MAPS,
            json!({"binaryData": {"b": "not base64"}}),
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: illegal base64 data at input byte 3 in binaryData[\"b\"]",
        ),
        (
            CONFIG_MAPS,
            json!({"binaryData": {"b": true}}),
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: json: cannot unmarshal bool into Go struct field ConfigMap.binaryData of type []uint8 (key \"b\")",
        ),
        (
            secrets,
            json!({"data": {"password": "hunter2"}}),
            "Secret in version \"v1\" cannot be handled as a Secret: illegal base64 data at input byte 4 in data[\"password\"]",
        ),
        (
            secrets,
            json!({"stringData": {"password": {"nested": "x"}}}),
            "Secret in version \"v1\" cannot be handled as a Secret: json: cannot unmarshal object into Go struct field Secret.stringData of type string (key \"password\")",
        ),
    ];
    for (index, (uri, fields, message)) in refused.into_iter().enumerate() {
        let mut body = fields;
        body["metadata"] = json!({"name": format!("bad-{index}")});
        let status =
            api_status(send(&client, "POST", uri, "application/json", json_body(body)).await);
        assert_eq!(
            (status.code, status.reason.as_str(), status.message.as_str()),
            (400, "BadRequest", message)
        );
    }
    // Well-typed fields are accepted (padded base64, line breaks ignored).
    send(
        &client,
        "POST",
        CONFIG_MAPS,
        "application/json",
        json_body(json!({
            "metadata": {"name": "good"},
            "data": {"a": "1"},
            "binaryData": {"b": "aGVs\nbG8="}
        })),
    )
    .await
    .unwrap();
    send(
        &client,
        "POST",
        secrets,
        "application/json",
        json_body(json!({"metadata": {"name": "good"}, "data": {"password": "aHVudGVyMg=="}})),
    )
    .await
    .unwrap();
    // A patch that mistypes a field is refused the same way.
    let status = api_status(
        send(
            &client,
            "PATCH",
            &format!("{CONFIG_MAPS}/good"),
            "application/merge-patch+json",
            json_body(json!({"data": {"a": 2}})),
        )
        .await,
    );
    assert_eq!(status.code, 400, "{}", status.message);
    assert!(
        status.message.contains("ConfigMap.data"),
        "{}",
        status.message
    );
}
