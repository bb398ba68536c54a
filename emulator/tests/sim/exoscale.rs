//! The fake Exoscale API over HTTP: signature checks, zones, catalog, instances and their
//! operations, private-network attachment, labels, events and injected faults. Requests are
//! signed by a small signer written here, independently of the fake's verifier.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use joinery_emulator::cloud::{CloudEvent, InstanceState};
use joinery_emulator::exoscale::{
    DEFAULT_API_KEY, DEFAULT_API_SECRET, ErrorShape, ExoFake, ExoFakeOptions, ExoInstanceState,
    ExoTemplate, ExoVerb, GIB, UBUNTU_2404, Visibility,
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// HMAC-SHA256, written out from RFC 2104.
fn hmac(key: &[u8], message: &[u8]) -> Vec<u8> {
    let mut padded = [0u8; 64];
    padded[..key.len()].copy_from_slice(key);
    let inner: Vec<u8> = padded
        .iter()
        .map(|b| b ^ 0x36)
        .chain(message.iter().copied())
        .collect();
    let inner_hash = Sha256::digest(&inner);
    let outer: Vec<u8> = padded
        .iter()
        .map(|b| b ^ 0x5c)
        .chain(inner_hash.iter().copied())
        .collect();
    Sha256::digest(&outer).to_vec()
}

fn unescape(text: &str) -> String {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 3 <= bytes.len() {
            out.push(
                u8::from_str_radix(std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap(), 16).unwrap(),
            );
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// How to sign (the defaults sign correctly).
#[derive(Clone)]
struct Signing {
    key: String,
    secret: String,
    expires_in: i64,
    omit: bool,
}

impl Default for Signing {
    fn default() -> Self {
        Signing {
            key: DEFAULT_API_KEY.into(),
            secret: DEFAULT_API_SECRET.into(),
            expires_in: 600,
            omit: false,
        }
    }
}

/// The `Authorization` value for a request.
fn authorization(signing: &Signing, method: &str, path_and_query: &str, body: &[u8]) -> String {
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    let mut params: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (unescape(k), unescape(v))
        })
        .collect();
    params.sort();
    let names: Vec<&str> = params.iter().map(|(k, _)| k.as_str()).collect();
    let values: String = params.iter().map(|(_, v)| v.as_str()).collect();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let expires = now + signing.expires_in;
    let mut text = format!("{method} {path}\n").into_bytes();
    text.extend_from_slice(body);
    text.extend_from_slice(format!("\n{values}\n\n{expires}").as_bytes());
    let signature =
        base64::engine::general_purpose::STANDARD.encode(hmac(signing.secret.as_bytes(), &text));
    let args = if names.is_empty() {
        String::new()
    } else {
        format!(",signed-query-args={}", names.join(";"))
    };
    format!(
        "EXO2-HMAC-SHA256 credential={}{args},expires={expires},signature={signature}",
        signing.key
    )
}

struct Api {
    base: String,
    http: Client<HttpConnector, Full<Bytes>>,
}

struct Answer {
    status: u16,
    retry_after: Option<String>,
    body: Value,
}

impl Api {
    fn new(fake: &ExoFake) -> Api {
        Api {
            base: fake.url().to_string(),
            http: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    async fn send(
        &self,
        signing: &Signing,
        method: &str,
        path: &str,
        body: Option<Value>,
        host: Option<&str>,
    ) -> Answer {
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let mut request = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if !signing.omit {
            request = request.header(
                "authorization",
                authorization(signing, method, path, &bytes),
            );
        }
        if let Some(host) = host {
            request = request.header("host", host);
        }
        if !bytes.is_empty() {
            request = request.header("content-type", "application/json");
        }
        let response = self
            .http
            .request(request.body(Full::new(Bytes::from(bytes))).unwrap())
            .await
            .unwrap();
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_string());
        let raw = response.into_body().collect().await.unwrap().to_bytes();
        let body = serde_json::from_slice(&raw).unwrap_or(Value::Null);
        Answer {
            status,
            retry_after,
            body,
        }
    }

    async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Answer {
        self.send(&Signing::default(), method, path, body, None)
            .await
    }

    async fn ok(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let answer = self.call(method, path, body).await;
        assert_eq!(answer.status, 200, "{method} {path}: {}", answer.body);
        answer.body
    }

    /// Polls an operation until it leaves `pending`; returns it and how many polls said pending.
    async fn wait(&self, zone: &str, operation: &Value) -> (Value, u32) {
        let id = operation["id"].as_str().unwrap();
        for pending in 0..20 {
            let op = self
                .ok("GET", &format!("/{zone}/v2/operation/{id}"), None)
                .await;
            if op["state"] != "pending" {
                return (op, pending);
            }
        }
        panic!("operation {id} never finished");
    }
}

fn user_data(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn type_id(fake: &ExoFake, name: &str) -> String {
    fake.instance_types()
        .into_iter()
        .find(|t| t.name() == name)
        .unwrap()
        .id
}

/// The newest Ubuntu build's ID in `zone`.
fn ubuntu(fake: &ExoFake, zone: &str) -> String {
    let mut builds: Vec<ExoTemplate> = fake
        .templates()
        .into_iter()
        .filter(|t| t.zone == zone && t.name == UBUNTU_2404)
        .collect();
    builds.sort_by(|a, b| a.created_at.cmp(&b.created_at));
    builds.pop().unwrap().id
}

fn create_body(fake: &ExoFake, zone: &str, instance_type: &str) -> Value {
    json!({
        "name": "node-a",
        "instance-type": {"id": type_id(fake, instance_type)},
        "template": {"id": ubuntu(fake, zone)},
        "disk-size": 20,
        "labels": {"karpenter-sh_nodeclaim": "default-abc12", "karpenter-sh_managed-by": "demo"},
        "user-data": user_data("#!/bin/sh\necho hello\n"),
    })
}

async fn start(options: ExoFakeOptions) -> (ExoFake, Api) {
    let fake = ExoFake::start(options).await.unwrap();
    let api = Api::new(&fake);
    (fake, api)
}

#[tokio::test]
async fn only_correctly_signed_unexpired_requests_get_through() {
    let (fake, api) = start(ExoFakeOptions::default()).await;
    let path = "/ch-gva-2/v2/instance?labels=a%3Db%20c%3Dd";
    assert_eq!(api.call("GET", path, None).await.status, 200);

    let anonymous = api
        .send(
            &Signing {
                omit: true,
                ..Signing::default()
            },
            "GET",
            path,
            None,
            None,
        )
        .await;
    assert_eq!(anonymous.status, 401);
    assert!(
        anonymous.body["message"]
            .as_str()
            .unwrap()
            .contains("Authorization"),
        "{}",
        anonymous.body
    );

    let wrong_secret = Signing {
        secret: "nope".into(),
        ..Signing::default()
    };
    assert_eq!(
        api.send(&wrong_secret, "GET", path, None, None)
            .await
            .status,
        403
    );
    let unknown_key = Signing {
        key: "EXOdeadbeef".into(),
        ..Signing::default()
    };
    let refused = api.send(&unknown_key, "GET", path, None, None).await;
    assert_eq!(refused.status, 403);
    assert!(
        refused.body["message"]
            .as_str()
            .unwrap()
            .contains("unknown API key")
    );
    let expired = api
        .send(
            &Signing {
                expires_in: -5,
                ..Signing::default()
            },
            "GET",
            path,
            None,
            None,
        )
        .await;
    assert_eq!(expired.status, 403);
    assert!(
        expired.body["message"]
            .as_str()
            .unwrap()
            .contains("expired"),
        "{}",
        expired.body
    );

    // The signature covers the body: sign one body, send another.
    let body = json!({"name": "x"});
    let header = authorization(
        &Signing::default(),
        "PUT",
        "/ch-gva-2/v2/instance/abc",
        b"{\"name\":\"y\"}",
    );
    let request = http::Request::builder()
        .method("PUT")
        .uri(format!("{}/ch-gva-2/v2/instance/abc", api.base))
        .header("authorization", header)
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    assert_eq!(
        api.http.request(request).await.unwrap().status().as_u16(),
        403
    );

    // A query parameter left out of signed-query-args is refused.
    let header = authorization(&Signing::default(), "GET", "/ch-gva-2/v2/instance", b"");
    let request = http::Request::builder()
        .uri(format!("{}/ch-gva-2/v2/instance?labels=a%3Db", api.base))
        .header("authorization", header)
        .body(Full::new(Bytes::new()))
        .unwrap();
    assert_eq!(
        api.http.request(request).await.unwrap().status().as_u16(),
        403
    );

    // Host routing: /v2/... with the zone's host name.
    let by_host = api
        .send(
            &Signing::default(),
            "GET",
            "/v2/zone",
            None,
            Some("api-de-fra-1.exoscale.com"),
        )
        .await;
    assert_eq!(by_host.status, 200);
    assert_eq!(api.call("GET", "/mars-1/v2/zone", None).await.status, 404);

    fake.faults().set_error_shape(ErrorShape::Problem);
    let problem = api.send(&wrong_secret, "GET", path, None, None).await;
    assert_eq!(problem.body["status"], 403);
    assert_eq!(problem.body["title"], "Forbidden");
    assert!(
        problem.body["detail"]
            .as_str()
            .unwrap()
            .contains("signature")
    );
}

#[tokio::test]
async fn zones_instance_types_and_templates() {
    let (fake, api) = start(ExoFakeOptions::default()).await;
    let zones = api.ok("GET", "/at-vie-1/v2/zone", None).await;
    let names: Vec<&str> = zones["zones"]
        .as_array()
        .unwrap()
        .iter()
        .map(|z| z["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ch-gva-2", "de-fra-1", "at-vie-1"]);
    assert_eq!(
        zones["zones"][1]["api-endpoint"],
        format!("{}/de-fra-1/v2", fake.url())
    );

    let types = api.ok("GET", "/de-fra-1/v2/instance-type", None).await;
    let types = types["instance-types"].as_array().unwrap();
    let medium = types
        .iter()
        .find(|t| t["family"] == "standard" && t["size"] == "medium")
        .unwrap();
    assert_eq!(
        (medium["cpus"].as_u64(), medium["memory"].as_u64()),
        (Some(2), Some(4 * GIB))
    );
    assert_eq!(medium["authorized"], true);
    let gpu3 = types.iter().find(|t| t["family"] == "gpu3").unwrap();
    assert_eq!(
        (gpu3["authorized"].as_bool(), gpu3["gpus"].as_u64()),
        (Some(false), Some(1))
    );
    let one = api
        .ok(
            "GET",
            &format!(
                "/de-fra-1/v2/instance-type/{}",
                medium["id"].as_str().unwrap()
            ),
            None,
        )
        .await;
    assert_eq!(one["size"], "medium");

    let public = api
        .ok("GET", "/de-fra-1/v2/template?visibility=public", None)
        .await;
    let ubuntu_builds: Vec<&Value> = public["templates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"] == UBUNTU_2404)
        .collect();
    assert_eq!(ubuntu_builds.len(), 2);
    assert!(
        ubuntu_builds
            .iter()
            .all(|t| t["zones"] == json!(["de-fra-1"]) && t["size"] == 10 * GIB)
    );
    let private_id = fake.add_template(ExoTemplate {
        id: String::new(),
        zone: "de-fra-1".into(),
        name: "k3s-node".into(),
        visibility: Visibility::Private,
        build: "7".into(),
        version: "1".into(),
        size: 30 * GIB,
        created_at: String::new(),
        family: "ubuntu".into(),
        default_user: "ubuntu".into(),
    });
    let private = api
        .ok("GET", "/de-fra-1/v2/template?visibility=private", None)
        .await;
    assert_eq!(private["templates"].as_array().unwrap().len(), 1);
    assert_eq!(private["templates"][0]["id"], private_id.as_str());
    assert!(
        private["templates"][0]["created-at"]
            .as_str()
            .unwrap()
            .ends_with('Z')
    );
    assert_eq!(
        api.call("GET", &format!("/ch-gva-2/v2/template/{private_id}"), None)
            .await
            .status,
        404,
        "zonal"
    );
    assert_eq!(
        api.ok("GET", &format!("/de-fra-1/v2/template/{private_id}"), None)
            .await["name"],
        "k3s-node"
    );
    assert_eq!(
        api.call("GET", "/de-fra-1/v2/template?visibility=secret", None)
            .await
            .status,
        400
    );

    assert_eq!(
        api.ok("GET", "/de-fra-1/v2/quota", None).await["quotas"][0]["limit"],
        -1
    );
}

#[tokio::test]
async fn an_instance_is_created_followed_attached_listed_and_deleted() {
    let (fake, api) = start(ExoFakeOptions::default()).await;
    let mut events = fake.subscribe();
    let sg = fake.add_security_group("k8s-nodes");
    let network = fake.add_private_network("de-fra-1", "k8s-internal", &[("env", "prod")]);
    let group = fake.add_anti_affinity_group("spread");
    fake.add_ssh_key("ops-team");

    let mut body = create_body(&fake, "de-fra-1", "standard.medium");
    body["security-groups"] = json!([{"id": sg}]);
    body["anti-affinity-groups"] = json!([{"id": group}]);
    body["ssh-key"] = json!({"name": "ops-team"});
    body["public-ip-assignment"] = json!("none");
    let operation = api.ok("POST", "/de-fra-1/v2/instance", Some(body)).await;
    assert_eq!(operation["state"], "pending");
    let id = operation["reference"]["id"].as_str().unwrap().to_string();

    // The reference is usable before the operation ends.
    let instance = api
        .ok("GET", &format!("/de-fra-1/v2/instance/{id}"), None)
        .await;
    assert_eq!(instance["state"], "starting");
    assert_eq!(instance["instance-type"]["size"], "medium");
    assert_eq!(instance["anti-affinity-groups"], json!([{"id": group}]));
    assert_eq!(instance["ssh-key"]["name"], "ops-team");
    assert!(
        instance.get("public-ip").is_none(),
        "a private instance has no public address"
    );
    assert_eq!(
        api.call("GET", &format!("/ch-gva-2/v2/instance/{id}"), None)
            .await
            .status,
        404,
        "zonal"
    );

    let (done, pending_polls) = api.wait("de-fra-1", &operation).await;
    assert_eq!(
        (done["state"].as_str(), pending_polls),
        (Some("success"), 1)
    );
    assert_eq!(done["reference"]["id"], id.as_str());

    let CloudEvent::Launched(launched) = events.recv().await.unwrap() else {
        panic!("expected a launch")
    };
    assert_eq!(launched.provider_id, format!("exoscale://{id}"));
    assert_eq!(launched.id, id);
    assert_eq!(launched.user_data, "#!/bin/sh\necho hello\n");
    assert_eq!(
        (launched.zone.as_str(), launched.instance_type.as_str()),
        ("de-fra-1", "standard.medium")
    );
    assert_eq!(launched.capacity["cpu"], "2");
    assert_eq!(launched.capacity["memory"], "4Gi");
    assert_eq!(launched.capacity["ephemeral-storage"], "20Gi");
    assert_eq!(launched.allocatable["cpu"], "1700m");
    assert_eq!(
        launched.labels["karpenter.k8s.exoscale/instance-memory"],
        "4096"
    );
    assert_eq!(launched.labels["topology.kubernetes.io/region"], "de-fra-1");
    assert_eq!(launched.tags["karpenter-sh_nodeclaim"], "default-abc12");
    assert_eq!(launched.state, InstanceState::Pending);

    let attach = api
        .ok(
            "PUT",
            &format!("/de-fra-1/v2/private-network/{network}:attach"),
            Some(json!({"instance": {"id": id}})),
        )
        .await;
    assert_eq!(attach["reference"]["id"], network.as_str());
    assert_eq!(api.wait("de-fra-1", &attach).await.0["state"], "success");
    let again = api
        .call(
            "PUT",
            &format!("/de-fra-1/v2/private-network/{network}:attach"),
            Some(json!({"instance": {"id": id}})),
        )
        .await;
    assert_eq!(again.status, 400);
    let net = api
        .ok(
            "GET",
            &format!("/de-fra-1/v2/private-network/{network}"),
            None,
        )
        .await;
    assert_eq!(net["leases"][0]["instance-id"], id.as_str());
    assert_eq!(net["labels"]["env"], "prod");

    // Label filter: space-separated pairs, all must match; list items omit anti-affinity groups.
    let listed = api.ok("GET", "/de-fra-1/v2/instance?labels=karpenter-sh_managed-by%3Ddemo%20karpenter-sh_nodeclaim%3Ddefault-abc12", None).await;
    let items = listed["instances"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert!(items[0].get("anti-affinity-groups").is_none());
    assert_eq!(items[0]["private-networks"][0]["id"], network.as_str());
    let none = api
        .ok(
            "GET",
            "/de-fra-1/v2/instance?labels=karpenter-sh_managed-by%3Dother",
            None,
        )
        .await;
    assert!(none["instances"].as_array().unwrap().is_empty());
    assert!(
        api.ok("GET", "/ch-gva-2/v2/instance", None).await["instances"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    // Labels are replaced as a whole.
    let update = api
        .ok(
            "PUT",
            &format!("/de-fra-1/v2/instance/{id}"),
            Some(json!({"labels": {"team": "a"}})),
        )
        .await;
    api.wait("de-fra-1", &update).await;
    assert_eq!(
        fake.instance(&id).unwrap().labels,
        [("team".to_string(), "a".to_string())].into()
    );

    let delete = api
        .ok("DELETE", &format!("/de-fra-1/v2/instance/{id}"), None)
        .await;
    assert_eq!(
        fake.instance(&id).unwrap().state,
        ExoInstanceState::Destroying
    );
    let CloudEvent::Terminated { instance, .. } = events.recv().await.unwrap() else {
        panic!("expected a termination")
    };
    assert_eq!(instance.id, id);
    assert_eq!(api.wait("de-fra-1", &delete).await.0["state"], "success");
    assert_eq!(
        api.call("GET", &format!("/de-fra-1/v2/instance/{id}"), None)
            .await
            .status,
        404
    );
    assert!(fake.anti_affinity_groups()[0].instances.is_empty());
    assert!(fake.private_networks()[0].leases.is_empty());
    assert_eq!(
        api.call("DELETE", &format!("/de-fra-1/v2/instance/{id}"), None)
            .await
            .status,
        404
    );
}

#[tokio::test]
async fn creates_are_validated() {
    let (fake, api) = start(ExoFakeOptions::default()).await;
    let post = |body: Value| {
        let api = &api;
        async move { api.call("POST", "/ch-gva-2/v2/instance", Some(body)).await }
    };
    let good = create_body(&fake, "ch-gva-2", "standard.small");
    let with = |key: &str, value: Value| {
        let mut body = good.clone();
        body[key] = value;
        body
    };
    let message = |answer: Answer| {
        answer.body["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };

    let small_disk = post(with("disk-size", json!(9))).await;
    assert_eq!(small_disk.status, 400);
    assert!(message(small_disk).contains("10-51200"));
    assert_eq!(post(with("disk-size", json!(51_201))).await.status, 400);
    let big_template = fake.add_template(ExoTemplate {
        id: String::new(),
        zone: "ch-gva-2".into(),
        name: "big".into(),
        visibility: Visibility::Private,
        build: "1".into(),
        version: "1".into(),
        size: 40 * GIB + 1,
        created_at: String::new(),
        family: "other".into(),
        default_user: "root".into(),
    });
    let under_template = post(with("template", json!({"id": big_template}))).await;
    assert_eq!(under_template.status, 400);
    assert!(message(under_template).contains("41 GiB"));
    let bad_label = post(with("labels", json!({"karpenter.sh/nodeclaim": "x"}))).await;
    assert_eq!(bad_label.status, 400);
    assert_eq!(
        post(with("labels", json!({"count": "3x"}))).await.status,
        400,
        "values may not start with a digit"
    );
    assert_eq!(
        post(with("labels", json!({"dotted": "a.b"}))).await.status,
        400
    );
    assert_eq!(
        post(with("user-data", json!("not base64!"))).await.status,
        400
    );
    assert_eq!(
        post(with("user-data", json!("A".repeat(32_772))))
            .await
            .status,
        400
    );
    assert_eq!(
        post(with("public-ip-assignment", json!("inet6")))
            .await
            .status,
        400
    );
    assert_eq!(post(with("name", json!(""))).await.status, 400);
    let unauthorized = post(with(
        "instance-type",
        json!({"id": type_id(&fake, "gpu3.small")}),
    ))
    .await;
    assert_eq!(unauthorized.status, 403);
    assert!(message(unauthorized).contains("not authorized"));
    let elsewhere = api
        .call("POST", "/de-fra-1/v2/instance", Some(json!({
            "instance-type": {"id": type_id(&fake, "gpua30.small")}, "template": {"id": ubuntu(&fake, "de-fra-1")}, "disk-size": 50,
        })))
        .await;
    assert_eq!(
        elsewhere.status, 400,
        "GPU types are only offered in the first zone"
    );
    assert_eq!(
        post(with("template", json!({"id": ubuntu(&fake, "de-fra-1")})))
            .await
            .status,
        404,
        "template IDs are zonal"
    );
    assert_eq!(
        post(with(
            "security-groups",
            json!([{"id": "00000000-0000-4000-8000-000000000000"}])
        ))
        .await
        .status,
        404
    );
    assert_eq!(
        post(with("ssh-key", json!({"name": "nobody"})))
            .await
            .status,
        404
    );
    let mut missing = good.clone();
    missing.as_object_mut().unwrap().remove("template");
    assert_eq!(post(missing).await.status, 400);
    assert!(fake.instances().is_empty());
    assert_eq!(post(good).await.status, 200);
    assert_eq!(fake.instances().len(), 1);
}

#[tokio::test]
async fn injected_faults_look_like_the_real_thing() {
    let options = ExoFakeOptions {
        anti_affinity_ceiling: 1,
        operation_polls: 0,
        ..ExoFakeOptions::default()
    };
    let (fake, api) = start(options).await;
    let faults = fake.faults().clone();

    faults.throttle_next(1, Duration::from_millis(1500));
    let throttled = api.call("GET", "/ch-gva-2/v2/zone", None).await;
    assert_eq!(throttled.status, 429);
    assert_eq!(throttled.retry_after.as_deref(), Some("2"));
    assert_eq!(throttled.body["retry_after"], 2);
    assert!(throttled.body["error"].is_string());

    faults.set_error_rate(ExoVerb::ListInstances, 1.0);
    assert_eq!(
        api.call("GET", "/ch-gva-2/v2/instance", None).await.status,
        500
    );
    faults.set_error_rate(ExoVerb::ListInstances, 0.0);

    faults.set_instance_quota(Some(0));
    let quota = api
        .call(
            "POST",
            "/ch-gva-2/v2/instance",
            Some(create_body(&fake, "ch-gva-2", "standard.small")),
        )
        .await;
    assert_eq!(quota.status, 403);
    assert!(quota.body["message"].as_str().unwrap().contains("quota"));
    assert_eq!(
        api.ok("GET", "/ch-gva-2/v2/quota", None).await["quotas"][0]["limit"],
        0
    );
    faults.set_instance_quota(None);

    // No capacity: the operation fails, nothing remains.
    faults.insufficient_capacity("standard.small", "ch-gva-2");
    let op = api
        .ok(
            "POST",
            "/ch-gva-2/v2/instance",
            Some(create_body(&fake, "ch-gva-2", "standard.small")),
        )
        .await;
    let (failed, _) = api.wait("ch-gva-2", &op).await;
    assert_eq!(
        (failed["state"].as_str(), failed["reason"].as_str()),
        (Some("failure"), Some("unavailable"))
    );
    assert!(failed["message"].as_str().unwrap().contains("capacity"));
    let reference = failed["reference"]["id"].as_str().unwrap();
    assert_eq!(
        api.call("GET", &format!("/ch-gva-2/v2/instance/{reference}"), None)
            .await
            .status,
        404
    );
    assert!(fake.instances().is_empty());
    faults.restore_capacity("standard.small", "ch-gva-2");

    // Fails after the instance exists: it stays, in state error.
    faults.fail_after_create(1);
    let op = api
        .ok(
            "POST",
            "/ch-gva-2/v2/instance",
            Some(create_body(&fake, "ch-gva-2", "standard.small")),
        )
        .await;
    let (failed, _) = api.wait("ch-gva-2", &op).await;
    assert_eq!(
        (failed["state"].as_str(), failed["reason"].as_str()),
        (Some("failure"), Some("fault"))
    );
    let id = failed["reference"]["id"].as_str().unwrap();
    assert_eq!(
        api.ok("GET", &format!("/ch-gva-2/v2/instance/{id}"), None)
            .await["state"],
        "error"
    );

    // A failing attachment leaves the network unattached.
    let network = fake.add_private_network("ch-gva-2", "net", &[]);
    faults.fail_attach(1);
    let attach = api
        .ok(
            "PUT",
            &format!("/ch-gva-2/v2/private-network/{network}:attach"),
            Some(json!({"instance": {"id": id}})),
        )
        .await;
    assert_eq!(
        api.wait("ch-gva-2", &attach).await.0["reason"],
        "unavailable"
    );
    assert!(fake.instance(id).unwrap().private_networks.is_empty());

    // The anti-affinity group's host ceiling (1 here).
    let group = fake.add_anti_affinity_group("spread");
    let mut body = create_body(&fake, "ch-gva-2", "standard.small");
    body["anti-affinity-groups"] = json!([{"id": group}]);
    assert_eq!(
        api.call("POST", "/ch-gva-2/v2/instance", Some(body.clone()))
            .await
            .status,
        200
    );
    let full = api.call("POST", "/ch-gva-2/v2/instance", Some(body)).await;
    assert_eq!(full.status, 400);
    assert!(
        full.body["message"]
            .as_str()
            .unwrap()
            .contains("anti-affinity group spread"),
        "{}",
        full.body
    );
}

#[tokio::test]
async fn operations_nobody_polls_end_after_the_deadline_and_instances_boot() {
    let clock = std::sync::Arc::new(joinery_core::clock::Clock::with_speed(1000.0));
    let options = ExoFakeOptions {
        clock,
        boot_delay: Duration::from_secs(5),
        ..ExoFakeOptions::default()
    };
    let (fake, api) = start(options).await;
    let op = api
        .ok(
            "POST",
            "/ch-gva-2/v2/instance",
            Some(create_body(&fake, "ch-gva-2", "standard.small")),
        )
        .await;
    let id = op["reference"]["id"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(60)).await; // 60 simulated seconds
    assert_eq!(
        api.ok("GET", &format!("/ch-gva-2/v2/instance/{id}"), None)
            .await["state"],
        "running"
    );
    assert_eq!(
        fake.operations()[0].state,
        joinery_emulator::exoscale::OperationState::Success
    );
    assert_eq!(fake.operations()[0].polls, 0);
}
