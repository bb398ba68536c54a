//! Native tests of the plugin's calls against a fake host that plays a small Exoscale API.
//! Every request's signature is checked against the path, query and body actually sent.

use std::cell::RefCell;
use std::rc::Rc;

use joinery_plugin_sdk::cloud::{
    CloudError, CloudProvider, Condition, CreateRequest, InstanceState, NodeClaim, NodeClass,
    Requirement, Resource,
};
use joinery_plugin_sdk::http::{Request, Response};
use joinery_plugin_sdk::testing::{self, FakeHost};
use serde_json::{Value, json};

use super::Exoscale;
use crate::{labels, sign, spec};

const CONFIG: &str =
    r#"{"endpoint": "http://exo.test/{zone}/v2", "zone": "ch-gva-2", "clusterName": "demo"}"#;
const SECRET: &str = "exoscale-credentials";
const ID: &str = "6f1c2a10-0000-4000-8000-00000000abcd";

/// One request as the fake API saw it.
#[derive(Clone, Debug)]
struct Call {
    method: String,
    zone: String,
    path: String,
    query: Vec<(String, String)>,
    body: Value,
}

impl Call {
    fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

fn unescape(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 3 <= bytes.len() {
            out.push(u8::from_str_radix(&text[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap()
}

/// Checks the signature of `req` and splits it into a [`Call`].
fn parse(req: &Request) -> Call {
    let rest = req
        .url
        .strip_prefix("http://exo.test/")
        .expect("only the configured endpoint is called");
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (zone, path) = path.split_once("/v2").unwrap();
    let query: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap();
            (unescape(k), unescape(v))
        })
        .collect();
    let header = req
        .header_value("authorization")
        .expect("every request is signed");
    let expires: u64 = header
        .split("expires=")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let expected = sign::authorization(
        "EXOkey",
        "secret",
        &req.method,
        &format!("/{zone}/v2{path}"),
        &req.body,
        &query,
        expires,
    );
    assert_eq!(header, expected, "signature of {} {}", req.method, req.url);
    let body = if req.body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&req.body).unwrap()
    };
    Call {
        method: req.method.clone(),
        zone: zone.to_string(),
        path: path.to_string(),
        query,
        body,
    }
}

type Seen = Rc<RefCell<Vec<Call>>>;

/// Installs the fake host; `route` answers each call (use [`world`] for the read-only API).
fn install(
    config: &str,
    route: impl Fn(&Call) -> Response + 'static,
) -> (testing::FakeHostGuard, Seen) {
    let seen: Seen = Rc::default();
    let log = seen.clone();
    let host = FakeHost::new()
        .with_config(config)
        .with_secret(SECRET, &[("api-key", "EXOkey"), ("api-secret", "secret\n")])
        .with_http(move |req| {
            let call = parse(req);
            log.borrow_mut().push(call.clone());
            Ok(route(&call))
        });
    (testing::install(host), seen)
}

fn ok(value: Value) -> Response {
    Response::new(200, value.to_string())
}

fn error(status: u16, message: &str) -> Response {
    Response::new(status, json!({"message": message}).to_string())
}

fn operation(id: &str, state: &str, reference: &str) -> Value {
    json!({"id": id, "state": state, "reference": {"id": reference, "command": "x"}})
}

fn instance_json(zone_label: &str, state: &str, networks: &[&str]) -> Value {
    json!({
        "id": ID, "name": "default-abc12", "state": state, "created-at": "2026-05-01T10:00:00Z",
        "labels": {"karpenter-sh_nodeclaim": "default-abc12", "karpenter-sh_managed-by": "demo",
                   "karpenter-k8s-exoscale_nodeclass-hash": zone_label},
        "instance-type": {"id": "t-large", "family": "standard", "size": "large", "cpus": 4, "gpus": 0, "memory": 8u64 << 30,
                          "authorized": true, "zones": ["ch-gva-2", "de-fra-1"]},
        "template": {"id": "tpl-fra-new"}, "disk-size": 50,
        "private-networks": networks.iter().map(|n| json!({"id": n})).collect::<Vec<_>>(),
    })
}

/// The read-only part of a small API: two zones, three types, templates per zone, groups,
/// networks, an SSH key.
fn world(call: &Call) -> Option<Response> {
    if call.method != "GET" {
        return None;
    }
    let zone = call.zone.as_str();
    let template = |id: &str, name: &str, created: &str, visibility: &str| json!({"id": format!("{id}-{zone}"), "name": name, "build": created, "created-at": created, "size": 10u64 << 30, "visibility": visibility});
    let answer = match call.path.as_str() {
        "/zone" => json!({"zones": [{"name": "ch-gva-2"}, {"name": "de-fra-1"}]}),
        "/instance-type" => json!({"instance-types": [
            {"id": "t-large", "family": "standard", "size": "large", "cpus": 4, "gpus": 0, "memory": 8u64 << 30, "authorized": true, "zones": ["ch-gva-2", "de-fra-1"]},
            {"id": "t-small", "family": "standard", "size": "small", "cpus": 2, "gpus": 0, "memory": 2u64 << 30, "authorized": true, "zones": ["ch-gva-2", "de-fra-1"]},
            {"id": "t-gpu3", "family": "gpu3", "size": "small", "cpus": 12, "gpus": 1, "memory": 56u64 << 30, "authorized": false, "zones": ["ch-gva-2"]},
        ]}),
        "/template" if call.param("visibility") == Some("public") => json!({"templates": [
            template("tpl-old", "Ubuntu", "2026-01-01T00:00:00Z", "public"),
            template("tpl-new", "Ubuntu", "2026-03-01T00:00:00Z", "public"),
        ]}),
        "/template" => {
            json!({"templates": [template("tpl-mine", "Custom", "2026-02-01T00:00:00Z", "private")]})
        }
        "/security-group" => {
            json!({"security-groups": [{"id": "sg-1", "name": "k8s-nodes"}, {"id": "sg-2", "name": "ssh"}]})
        }
        "/anti-affinity-group" => {
            json!({"anti-affinity-groups": [{"id": "aag-1", "name": "spread", "instances": []}]})
        }
        "/private-network" => json!({"private-networks": [
            {"id": format!("pn-{zone}"), "name": "k8s-internal", "labels": {"env": "prod"}},
            {"id": format!("pn-dev-{zone}"), "name": "k8s-internal", "labels": {"env": "dev"}},
        ]}),
        "/ssh-key/ops" => json!({"name": "ops", "fingerprint": "aa:bb"}),
        "/ssh-key/ci" => json!({"name": "ci", "fingerprint": "cc:dd"}),
        "/ssh-key/nobody" => return Some(error(404, "SSH key nobody not found")),
        _ => return None,
    };
    Some(ok(answer))
}

fn full_spec() -> Value {
    json!({
        "zones": ["ch-gva-2", "de-fra-1"],
        "templateSelectorTerms": [{"name": "Ubuntu"}],
        "diskSize": 50,
        "securityGroupSelectorTerms": [{"name": "k8s-nodes"}, {"id": "sg-2"}],
        "privateNetworkSelectorTerms": [{"name": "k8s-internal", "labels": {"env": "prod"}}],
        "antiAffinityGroupSelectorTerms": [{"name": "spread"}],
        "sshKey": "ops",
        "sshKeys": ["ci"],
        "labels": {"team": "platform"},
        "namePrefix": "k-",
        "userData": "ignored by the plugin",
        "userDataRenderer": {"name": "k3s", "parameters": {"server": "https://10.0.0.1:6443"}},
    })
}

fn condition<'a>(conditions: &'a [Condition], kind: &str) -> &'a Condition {
    conditions
        .iter()
        .find(|c| c.type_ == kind)
        .unwrap_or_else(|| panic!("no condition {kind}"))
}

fn claim() -> NodeClaim {
    NodeClaim {
        name: "default-abc12".into(),
        uid: "uid-1".into(),
        node_pool: "default".into(),
        labels: vec![],
        annotations: vec![],
        taints: vec![],
        startup_taints: vec![],
        requirements: vec![
            Requirement::is_in(
                "node.kubernetes.io/instance-type",
                &["standard.large", "standard.small"],
            ),
            Requirement::is_in("topology.kubernetes.io/zone", &["de-fra-1"]),
        ],
        resource_requests: vec![Resource::new("cpu", "1800m")],
        provider_id: None,
    }
}

fn create_request(spec: Value) -> CreateRequest {
    CreateRequest {
        claim: claim(),
        node_class: NodeClass::new("default", spec.to_string()),
        user_data: "#!/bin/sh\necho joined\n".into(),
    }
}

#[test]
fn resolve_gives_every_selector_its_own_condition() {
    let (_host, _) = install(CONFIG, |call| {
        world(call).unwrap_or_else(|| panic!("unexpected {call:?}"))
    });
    let resolution =
        Exoscale::resolve_node_class(NodeClass::new("default", full_spec().to_string())).unwrap();
    for c in &resolution.conditions {
        assert_eq!(c.status, "True", "{c:?}");
    }
    let status: Value = serde_json::from_str(&resolution.status).unwrap();
    assert_eq!(status["zones"], json!(["ch-gva-2", "de-fra-1"]));
    assert_eq!(
        status["templates"]["de-fra-1"]["id"], "tpl-new-de-fra-1",
        "the newest public build, per zone"
    );
    assert_eq!(status["templates"]["de-fra-1"]["sizeGib"], 10);
    assert_eq!(status["securityGroups"], json!(["sg-1", "sg-2"]));
    assert_eq!(
        status["privateNetworks"],
        json!({"ch-gva-2": ["pn-ch-gva-2"], "de-fra-1": ["pn-de-fra-1"]})
    );
    assert_eq!(status["antiAffinityGroups"], json!(["aag-1"]));
    assert_eq!(status["sshKeys"], json!(["ops", "ci"]));
    assert_eq!(
        status["specHash"],
        spec::resolution_hash(&full_spec().to_string())
    );

    let mut broken = full_spec();
    broken["securityGroupSelectorTerms"] = json!([{"name": "k8s-nodes"}, {"name": "missing"}]);
    broken["privateNetworkSelectorTerms"] = json!([{"labels": {"env": "staging"}}]);
    broken["sshKey"] = json!("nobody");
    broken["zones"] = json!(["ch-gva-2", "mars-1"]);
    broken["diskSize"] = json!(5);
    broken["templateSelectorTerms"] = json!([{"name": "Custom", "visibility": "public"}]);
    let resolution =
        Exoscale::resolve_node_class(NodeClass::new("default", broken.to_string())).unwrap();
    let sg = condition(&resolution.conditions, "SecurityGroupsReady");
    assert_eq!(
        (sg.status.as_str(), sg.reason.as_str()),
        ("False", "SelectorMatchesNothing")
    );
    assert_eq!(
        sg.message,
        r#"securityGroupSelectorTerms[1] {name: "missing"} matches nothing"#
    );
    let pn = condition(&resolution.conditions, "PrivateNetworksReady");
    assert!(
        pn.status == "False"
            && pn.message.contains("labels: {env=staging}")
            && pn.message.contains("ch-gva-2"),
        "{pn:?}"
    );
    assert_eq!(
        condition(&resolution.conditions, "SSHKeyReady").reason,
        "SSHKeyNotFound"
    );
    assert!(
        condition(&resolution.conditions, "ZonesReady")
            .message
            .contains("mars-1")
    );
    assert!(
        condition(&resolution.conditions, "SpecValid")
            .message
            .contains("diskSize 5")
    );
    let template = condition(&resolution.conditions, "TemplateReady");
    assert!(
        template.status == "False" && template.message.contains("Custom"),
        "private only: {template:?}"
    );
    assert_eq!(
        condition(&resolution.conditions, "AntiAffinityGroupsReady").status,
        "True"
    );
}

#[test]
fn template_ids_are_checked_in_every_zone_and_the_disk_against_the_template() {
    let (_host, _) = install(CONFIG, |call| match call.path.as_str() {
        "/template/tpl-gva" if call.zone == "ch-gva-2" => {
            ok(json!({"id": "tpl-gva", "name": "Big", "size": 60u64 << 30}))
        }
        p if p.starts_with("/template/") => error(404, "template not found"),
        _ => world(call).unwrap(),
    });
    let spec = json!({"zones": ["ch-gva-2", "de-fra-1"], "templateID": "tpl-gva", "diskSize": 50});
    let resolution = Exoscale::resolve_node_class(NodeClass::new("c", spec.to_string())).unwrap();
    let template = condition(&resolution.conditions, "TemplateReady");
    assert!(
        template.message.contains("does not exist in zone de-fra-1"),
        "{template:?}"
    );
    assert!(
        template
            .message
            .contains("smaller than template Big (60 GiB)"),
        "{template:?}"
    );
}

#[test]
fn create_follows_the_operation_attaches_networks_and_labels_the_instance() {
    let attached = Rc::new(RefCell::new(Vec::<String>::new()));
    let attached_in = attached.clone();
    let (_host, seen) = install(CONFIG, move |call| {
        if let Some(answer) = world(call)
            && call.path != "/instance"
        {
            return answer;
        }
        match (call.method.as_str(), call.path.as_str()) {
            ("GET", "/instance") => ok(json!({"instances": []})),
            ("POST", "/instance") => ok(operation("op-1", "pending", ID)),
            ("GET", "/operation/op-1") => ok(operation("op-1", "success", ID)),
            ("GET", p) if p == format!("/instance/{ID}") => {
                let networks: Vec<&str> =
                    attached_in.borrow().iter().map(|_| "pn-de-fra-1").collect();
                ok(instance_json("h0", "starting", &networks))
            }
            ("PUT", "/private-network/pn-de-fra-1:attach") => {
                attached_in
                    .borrow_mut()
                    .push(call.body["instance"]["id"].as_str().unwrap().to_string());
                ok(operation("op-2", "pending", "pn-de-fra-1"))
            }
            ("GET", "/operation/op-2") => ok(operation("op-2", "success", "pn-de-fra-1")),
            _ => panic!("unexpected {call:?}"),
        }
    });
    let instance = Exoscale::create(create_request(full_spec())).unwrap();
    assert_eq!(instance.provider_id, format!("exoscale://{ID}"));
    assert_eq!(
        (instance.zone.as_str(), instance.instance_type.as_str()),
        ("de-fra-1", "standard.large")
    );
    assert_eq!(instance.state, InstanceState::Pending);
    assert_eq!(instance.node_claim.as_deref(), Some("default-abc12"));
    assert_eq!(instance.image_id.as_deref(), Some("tpl-fra-new"));
    assert!(
        instance
            .labels
            .iter()
            .any(|kv| kv.key == "karpenter.k8s.exoscale/instance-memory" && kv.value == "8192")
    );
    assert!(
        instance
            .labels
            .iter()
            .any(|kv| kv.key == "topology.kubernetes.io/region" && kv.value == "de-fra-1")
    );
    assert_eq!(*attached.borrow(), [ID]);

    let seen = seen.borrow();
    let lookup = seen
        .iter()
        .find(|c| c.path == "/instance" && c.method == "GET")
        .unwrap();
    assert_eq!(
        lookup.param("labels"),
        Some("karpenter-sh_managed-by=demo karpenter-sh_nodeclaim=default-abc12")
    );
    let post = seen.iter().find(|c| c.method == "POST").unwrap();
    assert_eq!(post.zone, "de-fra-1");
    let body = &post.body;
    assert_eq!(body["name"], "k-default-abc12");
    assert_eq!(
        body["instance-type"]["id"], "t-large",
        "standard.small leaves too little CPU for 1800m"
    );
    assert_eq!(body["template"]["id"], "tpl-new-de-fra-1");
    assert_eq!(body["disk-size"], 50);
    assert_eq!(body["user-data"], sign::base64(b"#!/bin/sh\necho joined\n"));
    assert_eq!(body["ssh-keys"], json!([{"name": "ops"}, {"name": "ci"}]));
    assert!(
        body.get("ssh-key").is_none(),
        "the deprecated single ssh-key is never sent"
    );
    assert_eq!(
        body["security-groups"],
        json!([{"id": "sg-1"}, {"id": "sg-2"}])
    );
    assert_eq!(body["anti-affinity-groups"], json!([{"id": "aag-1"}]));
    assert_eq!(body["public-ip-assignment"], "inet4");
    let labels = &body["labels"];
    assert_eq!(labels["karpenter-sh_nodeclaim"], "default-abc12");
    assert_eq!(labels["karpenter-sh_nodepool"], "default");
    assert_eq!(labels["karpenter-sh_managed-by"], "demo");
    assert_eq!(labels["karpenter-k8s-exoscale_nodeclass"], "default");
    assert_eq!(
        labels["karpenter-k8s-exoscale_nodeclass-hash"],
        spec::drift_hash(&full_spec().to_string())
    );
    assert_eq!(labels["team"], "platform");
    testing::with_host(|h| {
        assert_eq!(
            h.cache.get(&format!("zone/{ID}")).map(Vec::as_slice),
            Some(&b"de-fra-1"[..])
        )
    });
}

#[test]
fn a_create_whose_operation_fails_deletes_the_instance() {
    let deleted = Rc::new(RefCell::new(false));
    let deleted_in = deleted.clone();
    let (_host, _) = install(CONFIG, move |call| {
        if let Some(answer) = world(call) {
            return answer;
        }
        match (call.method.as_str(), call.path.as_str()) {
            ("GET", "/instance") => ok(json!({"instances": []})),
            ("POST", "/instance") => ok(operation("op-1", "pending", ID)),
            ("GET", "/operation/op-1") => ok(
                json!({"id": "op-1", "state": "failure", "reason": "fault", "message": "could not start"}),
            ),
            ("DELETE", p) if p == format!("/instance/{ID}") => {
                *deleted_in.borrow_mut() = true;
                ok(operation("op-del", "success", ID))
            }
            _ => panic!("unexpected {call:?}"),
        }
    });
    let err = Exoscale::create(create_request(full_spec())).unwrap_err();
    assert!(
        matches!(&err, CloudError::Retryable(r) if r.message.contains("could not start")),
        "{err:?}"
    );
    assert!(
        *deleted.borrow(),
        "the instance made before the failure is deleted"
    );
}

#[test]
fn capacity_and_quota_failures_are_classified() {
    type Expected = fn(&CloudError) -> bool;
    let cases: Vec<(Response, Expected)> = vec![
        (
            ok(
                json!({"id": "op-1", "state": "failure", "reason": "unavailable", "message": "insufficient capacity"}),
            ),
            |e| {
                matches!(e, CloudError::InsufficientCapacity(ic) if ic.offerings.len() == 1
                && ic.offerings[0].instance_type == "standard.large" && ic.offerings[0].zone == "de-fra-1")
            },
        ),
        (error(403, "quota exceeded for resource instance"), |e| {
            matches!(e, CloudError::QuotaExceeded(_))
        }),
        (
            error(
                400,
                "anti-affinity group spread cannot take another instance",
            ),
            |e| matches!(e, CloudError::InsufficientCapacity(_)),
        ),
    ];
    for (answer, expected) in cases {
        let is_operation = answer.status == 200;
        let answer = Rc::new(answer);
        let (_host, _) = install(CONFIG, move |call| {
            if let Some(a) = world(call) {
                return a;
            }
            match (call.method.as_str(), call.path.as_str()) {
                ("GET", "/instance") => ok(json!({"instances": []})),
                ("POST", "/instance") if is_operation => ok(operation("op-1", "pending", ID)),
                ("POST", "/instance") => (*answer).clone(),
                ("GET", "/operation/op-1") => (*answer).clone(),
                ("DELETE", _) => error(404, "instance not found"),
                _ => panic!("unexpected {call:?}"),
            }
        });
        let err = Exoscale::create(create_request(full_spec())).unwrap_err();
        assert!(expected(&err), "{err:?}");
    }
}

#[test]
fn create_returns_the_instance_a_lost_answer_left_behind() {
    let (_host, seen) = install(CONFIG, |call| {
        if let Some(answer) = world(call) {
            return answer;
        }
        match (call.method.as_str(), call.path.as_str()) {
            ("GET", "/instance") if call.zone == "de-fra-1" => {
                ok(json!({"instances": [instance_json("h0", "running", &["pn-de-fra-1"])]}))
            }
            ("GET", "/instance") => ok(json!({"instances": []})),
            _ => panic!("nothing is launched or attached again: {call:?}"),
        }
    });
    let instance = Exoscale::create(create_request(full_spec())).unwrap();
    assert_eq!(instance.state, InstanceState::Running);
    assert!(seen.borrow().iter().all(|c| c.method == "GET"));
}

#[test]
fn an_invalid_or_unready_class_launches_nothing() {
    let (_host, seen) = install(CONFIG, |call| {
        world(call).unwrap_or_else(|| panic!("unexpected {call:?}"))
    });
    let mut spec = full_spec();
    spec["securityGroupSelectorTerms"] = json!([{"name": "missing"}]);
    let err = Exoscale::create(create_request(spec)).unwrap_err();
    assert!(
        matches!(&err, CloudError::NodeClassNotReady(m) if m.contains("SecurityGroupsReady") && m.contains("missing")),
        "{err:?}"
    );
    let mut invalid = full_spec();
    invalid["diskSize"] = json!(100_000);
    assert!(matches!(
        Exoscale::create(create_request(invalid)).unwrap_err(),
        CloudError::NodeClassNotReady(_)
    ));
    assert!(seen.borrow().iter().all(|c| c.method == "GET"));
}

#[test]
fn get_and_delete_search_the_zones_and_remember_where_an_instance_lives() {
    let (_host, seen) = install(CONFIG, |call| {
        if let Some(answer) = world(call) {
            return answer;
        }
        match (call.method.as_str(), call.zone.as_str()) {
            ("GET", "de-fra-1") => ok(instance_json("h0", "running", &[])),
            ("DELETE", "de-fra-1") => ok(operation("op-del", "pending", ID)),
            _ => error(404, "instance not found"),
        }
    });
    let provider_id = format!("exoscale://{ID}");
    let got = Exoscale::get(provider_id.clone()).unwrap();
    assert_eq!(got.zone, "de-fra-1");
    let searched: Vec<String> = seen
        .borrow()
        .iter()
        .filter(|c| c.path.starts_with("/instance/"))
        .map(|c| c.zone.clone())
        .collect();
    assert_eq!(searched, ["ch-gva-2", "de-fra-1"], "home zone first");
    seen.borrow_mut().clear();
    Exoscale::delete(provider_id.clone()).unwrap();
    let zones: Vec<String> = seen
        .borrow()
        .iter()
        .map(|c| format!("{} {}", c.method, c.zone))
        .collect();
    assert_eq!(
        zones,
        ["GET de-fra-1", "DELETE de-fra-1"],
        "the cached zone is used"
    );
    assert!(matches!(
        Exoscale::get("exoscale://not a uuid".into()).unwrap_err(),
        CloudError::Invalid(_)
    ));
    assert!(matches!(
        Exoscale::get("aws:///i-1".into()).unwrap_err(),
        CloudError::Invalid(_)
    ));
}

#[test]
fn an_instance_in_no_zone_is_not_found() {
    let (_host, _) = install(CONFIG, |call| {
        world(call).unwrap_or_else(|| error(404, "instance not found"))
    });
    assert!(matches!(
        Exoscale::get(format!("exoscale://{ID}")).unwrap_err(),
        CloudError::NotFound(_)
    ));
    assert!(matches!(
        Exoscale::delete(format!("exoscale://{ID}")).unwrap_err(),
        CloudError::NotFound(_)
    ));
}

#[test]
fn drift_is_zone_removal_or_a_changed_spec() {
    let current = full_spec();
    let hash = spec::drift_hash(&current.to_string());
    let recorded = Rc::new(hash.clone());
    let (_host, _) = install(CONFIG, move |call| match call.zone.as_str() {
        "de-fra-1" => world(call).unwrap_or_else(|| ok(instance_json(&recorded, "running", &[]))),
        _ => world(call).unwrap_or_else(|| error(404, "instance not found")),
    });
    let mut claim = claim();
    claim.provider_id = Some(format!("exoscale://{ID}"));
    let class = |spec: &Value| NodeClass::new("default", spec.to_string());
    assert_eq!(
        Exoscale::is_drifted(claim.clone(), class(&current)).unwrap(),
        None
    );
    let mut relabelled = current.clone();
    relabelled["labels"] = json!({"team": "other"});
    relabelled["instanceTypes"] = json!(["standard.large"]);
    assert_eq!(
        Exoscale::is_drifted(claim.clone(), class(&relabelled)).unwrap(),
        None,
        "labels are reconciled in place"
    );
    let mut bigger = current.clone();
    bigger["diskSize"] = json!(80);
    assert_eq!(
        Exoscale::is_drifted(claim.clone(), class(&bigger))
            .unwrap()
            .as_deref(),
        Some("NodeClassDrift")
    );
    let mut moved = current.clone();
    moved["zones"] = json!(["ch-gva-2"]);
    assert_eq!(
        Exoscale::is_drifted(claim.clone(), class(&moved))
            .unwrap()
            .as_deref(),
        Some("ZoneRemoved")
    );
    claim.provider_id = None;
    assert_eq!(Exoscale::is_drifted(claim, class(&bigger)).unwrap(), None);
}

#[test]
fn instance_types_are_authorized_allowed_and_unpriced() {
    let (_host, seen) = install(CONFIG, |call| world(call).unwrap());
    let types = Exoscale::get_instance_types(NodeClass::new(
        "c",
        r#"{"diskSize": 20, "templateID": "x"}"#,
    ))
    .unwrap();
    let names: Vec<&str> = types.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        ["standard.large", "standard.small"],
        "gpu3 is not authorized"
    );
    assert!(types.iter().all(|t| t.offerings.len() == 1
        && t.offerings[0].zone == "ch-gva-2"
        && t.offerings[0].price.is_none()));
    let narrowed =
        Exoscale::get_instance_types(NodeClass::new("c", r#"{"diskSize": 20, "templateID": "x", "instanceTypes": ["standard.small"], "zones": ["de-fra-1"]}"#))
            .unwrap();
    assert_eq!(narrowed.len(), 1);
    assert_eq!(narrowed[0].offerings[0].zone, "de-fra-1");
    assert_eq!(seen.borrow().len(), 1, "the catalog is cached");
}

#[test]
fn credentials_come_only_from_the_granted_secret() {
    let _host = testing::install(FakeHost::new().with_config(CONFIG));
    let err = Exoscale::list().unwrap_err();
    assert!(
        matches!(&err, CloudError::Invalid(m) if m.contains("exoscale-credentials") && m.contains("denied")),
        "{err:?}"
    );
    drop(_host);
    let _host = testing::install(
        FakeHost::new()
            .with_config(CONFIG)
            .with_secret(SECRET, &[("api-key", "EXOkey")]),
    );
    let err = Exoscale::list().unwrap_err();
    assert!(
        matches!(&err, CloudError::Invalid(m) if m.contains("api-secret")),
        "{err:?}"
    );
    drop(_host);
    let _host = testing::install(FakeHost::new().with_config(r#"{"clusterName": "1st"}"#));
    assert!(
        matches!(Exoscale::list().unwrap_err(), CloudError::Invalid(m) if m.contains("clusterName"))
    );
}

#[test]
fn list_covers_every_zone_and_only_this_cluster() {
    let (_host, seen) = install(CONFIG, |call| match call.path.as_str() {
        "/instance" if call.zone == "de-fra-1" => {
            ok(json!({"instances": [instance_json("h0", "destroying", &[])]}))
        }
        "/instance" => ok(json!({"instances": []})),
        _ => world(call).unwrap(),
    });
    let listed = Exoscale::list().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].state, InstanceState::Terminating);
    let filters: Vec<String> = seen
        .borrow()
        .iter()
        .filter_map(|c| c.param("labels").map(|l| format!("{} {l}", c.zone)))
        .collect();
    assert_eq!(
        filters,
        [
            "ch-gva-2 karpenter-sh_managed-by=demo",
            "de-fra-1 karpenter-sh_managed-by=demo"
        ]
    );
    assert_eq!(
        labels::flatten_key(labels::MANAGED_BY),
        "karpenter-sh_managed-by"
    );
}

#[test]
fn repair_policies_are_exoscales_and_reboot_puts_the_reboot_action() {
    let policies = Exoscale::repair_policies()
        .unwrap()
        .expect("its own policies");
    let named: Vec<(String, String, u64)> = policies
        .into_iter()
        .map(|p| (p.condition_type, p.condition_status, p.toleration_seconds))
        .collect();
    let expected = [
        ("Ready", "False", 900),
        ("Ready", "Unknown", 900),
        ("DiskPressure", "True", 600),
        ("MemoryPressure", "True", 600),
        ("PIDPressure", "True", 600),
        ("NetworkUnavailable", "True", 300),
    ];
    assert_eq!(
        named,
        expected
            .iter()
            .map(|(t, s, secs)| (t.to_string(), s.to_string(), *secs))
            .collect::<Vec<_>>()
    );

    let state = Rc::new(RefCell::new("running"));
    let answer = state.clone();
    let (_host, seen) = install(CONFIG, move |call| {
        if let Some(found) = world(call) {
            return found;
        }
        match (call.method.as_str(), call.zone.as_str()) {
            ("GET", "ch-gva-2") => ok(instance_json("h0", &answer.borrow(), &[])),
            ("PUT", "ch-gva-2") if *answer.borrow() == "running" => {
                ok(operation("op-reboot", "pending", ID))
            }
            ("PUT", "ch-gva-2") => error(400, "instance is not running"),
            _ => error(404, "instance not found"),
        }
    });
    Exoscale::reboot(format!("exoscale://{ID}")).unwrap();
    let puts: Vec<String> = seen
        .borrow()
        .iter()
        .filter(|c| c.method == "PUT")
        .map(|c| c.path.clone())
        .collect();
    assert_eq!(puts, [format!("/instance/{ID}:reboot")]);
    *state.borrow_mut() = "stopped";
    assert!(matches!(
        Exoscale::reboot(format!("exoscale://{ID}")).unwrap_err(),
        CloudError::Invalid(_)
    ));
}
