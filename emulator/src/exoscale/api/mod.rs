//! The fake Exoscale API's HTTP front end and state (see [`crate::exoscale`] for the API).
//!
//! Its files:
//!
//! - `mod.rs` (this file): the HTTP front end — serving, finding the zone, checking the
//!   signature, fault injection, the journal, error answers ([`Failure`]) — and the router,
//!   which answers the reads itself;
//! - `state.rs`: the stored world and the state the handlers share;
//! - `handlers.rs`: operation polls, the instance list, instance writes and private-network
//!   attachments, with the checks of their bodies;
//! - `json.rs`: the JSON bodies of the answers.

mod handlers;
mod json;
mod state;

use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::faults::{ErrorShape, ExoVerb};
use super::model::{ExoInstanceState, Visibility};
use super::signature::{self, AuthFailure, Presented};
use crate::faults::InjectedAnswer;
pub use handlers::check_labels;
use handlers::{
    attach, create_instance, delete_instance, list_instances, poll_operation, reboot_instance,
    update_instance,
};
use json::{
    anti_affinity_json, instance_json, instance_type_json, private_network_json,
    security_group_json, template_json,
};
pub(crate) use state::{ExoState, World};

type HttpResponse = Response<Full<Bytes>>;

/// An error answer.
pub(crate) struct Failure {
    status: u16,
    message: String,
    retry_after: Option<u64>,
}

impl Failure {
    pub(crate) fn new(status: u16, message: impl Into<String>) -> Self {
        Failure {
            status,
            message: message.into(),
            retry_after: None,
        }
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Failure::new(400, message)
    }

    fn not_found(what: &str, id: &str) -> Self {
        Failure::new(404, format!("{what} {id} not found"))
    }

    fn into_response(self, shape: ErrorShape) -> HttpResponse {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = match (self.retry_after, shape) {
            (Some(seconds), _) => json!({"error": self.message, "retry_after": seconds}),
            (None, ErrorShape::Classic) => json!({"message": self.message}),
            (None, ErrorShape::Problem) => json!({
                "type": "about:blank",
                "title": status.canonical_reason().unwrap_or("Error"),
                "status": self.status,
                "detail": self.message,
            }),
        };
        let content_type = match (self.retry_after, shape) {
            (None, ErrorShape::Problem) => "application/problem+json",
            _ => "application/json",
        };
        let mut response = json_response(self.status, &body);
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static(content_type),
        );
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(seconds));
        }
        response
    }
}

impl InjectedAnswer<ExoVerb> for Failure {
    fn throttled(retry_after_seconds: u64) -> Self {
        Failure {
            status: 429,
            message: "too many requests (injected fault)".into(),
            retry_after: Some(retry_after_seconds),
        }
    }

    fn failed(verb: ExoVerb) -> Self {
        Failure::new(
            500,
            format!("internal error handling {verb:?} (injected fault)"),
        )
    }
}

fn json_response(status: u16, value: &Value) -> HttpResponse {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(value.to_string())))
        .expect("static response parts are valid")
}

/// Accepts connections until `stopped` turns true.
pub(crate) async fn serve(
    listener: crate::network::Listener,
    state: Arc<ExoState>,
    stopped: watch::Receiver<bool>,
) {
    crate::http_server::serve(listener, stopped, "fake Exoscale API", move |request| {
        let state = state.clone();
        async move { handle(&state, request).await }
    })
    .await;
}

/// A request after its zone was found.
struct Call<'a> {
    zone: String,
    method: &'a Method,
    segments: Vec<&'a str>,
    query: &'a str,
    body: &'a [u8],
}

/// Finds the zone: `/<zone>/v2/…`, or `/v2/…` with `Host: api-<zone>.exoscale.com`.
fn zone_of<'a>(
    state: &ExoState,
    path: &'a str,
    host: Option<&str>,
) -> Result<(String, Vec<&'a str>), Failure> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        [zone, "v2", rest @ ..] => {
            if state.zones.iter().any(|z| z == zone) {
                Ok((zone.to_string(), rest.to_vec()))
            } else {
                Err(Failure::new(404, format!("unknown zone {zone}")))
            }
        }
        ["v2", rest @ ..] => {
            let host = host.unwrap_or_default();
            let name = host.split(':').next().unwrap_or_default();
            match name
                .strip_prefix("api-")
                .and_then(|n| n.strip_suffix(".exoscale.com"))
            {
                Some(zone) if state.zones.iter().any(|z| z == zone) => {
                    Ok((zone.to_string(), rest.to_vec()))
                }
                _ => Err(Failure::new(
                    404,
                    format!(
                        "no zone endpoint at host {host:?}; use /<zone>/v2/… or Host: api-<zone>.exoscale.com"
                    ),
                )),
            }
        }
        _ => Err(Failure::new(
            404,
            format!("no such path {path}; the API lives under /v2"),
        )),
    }
}

async fn handle(state: &Arc<ExoState>, request: Request<Incoming>) -> HttpResponse {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let query = request.uri().query().unwrap_or_default().to_string();
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string);
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .map(str::to_string);
    let body = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            return Failure::bad_request(format!("could not read the body: {error}"))
                .into_response(state.faults.error_shape());
        }
    };
    let response = answer(
        state,
        &method,
        &path,
        &query,
        host.as_deref(),
        authorization.as_deref(),
        &body,
    )
    .unwrap_or_else(|failure| failure.into_response(state.faults.error_shape()));
    tracing::debug!(%method, %path, status = response.status().as_u16(), "fake Exoscale API call");
    match &state.journal {
        Some(journal) => record(journal, &method, &path, &query, &body, response).await,
        None => response,
    }
}

/// Appends one exchange to the journal (see [`crate::exoscale::ExoFakeOptions::journal`]) and gives the
/// response back unchanged.
async fn record(
    journal: &Mutex<std::fs::File>,
    method: &Method,
    path: &str,
    query: &str,
    body: &[u8],
    response: HttpResponse,
) -> HttpResponse {
    use std::io::Write as _;
    let (parts, answer) = response.into_parts();
    let answer = match answer.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(never) => match never {},
    };
    let parsed = |bytes: &[u8]| serde_json::from_slice::<Value>(bytes).unwrap_or(Value::Null);
    let entry = json!({
        "method": method.as_str(),
        "path": path,
        "query": query,
        "requestBody": parsed(body),
        "status": parts.status.as_u16(),
        "contentType": parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()),
        "responseBody": parsed(&answer),
    });
    let mut file = journal
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Err(error) = writeln!(file, "{entry}") {
        tracing::warn!(%error, "could not write the fake Exoscale API's journal");
    }
    Response::from_parts(parts, Full::new(answer))
}

fn answer(
    state: &Arc<ExoState>,
    method: &Method,
    path: &str,
    query: &str,
    host: Option<&str>,
    authorization: Option<&str>,
    body: &[u8],
) -> Result<HttpResponse, Failure> {
    let (zone, segments) = zone_of(state, path, host)?;
    let presented = Presented {
        method: method.as_str(),
        path,
        query,
        body,
        authorization,
    };
    // Expiry is checked against the clock the plugins read: the simulation's in virtual time,
    // the real wall clock otherwise (a clock running `speed` times faster is not theirs).
    let now = if state.clock.is_driven() {
        state.clock.now()
    } else {
        SystemTime::now()
    };
    let now = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    // The zone list is public: Exoscale's own client asks for it without credentials (a
    // signed request for it is still checked).
    let public = method == Method::GET && segments == ["zone"] && authorization.is_none();
    match signature::verify(&presented, now, |key| state.credentials.get(key).cloned()) {
        Ok(_) => {}
        Err(AuthFailure::Missing(_)) if public => {}
        Err(AuthFailure::Missing(message)) => return Err(Failure::new(401, message)),
        Err(AuthFailure::Rejected(message)) => return Err(Failure::new(403, message)),
    }
    let call = Call {
        zone,
        method,
        segments,
        query,
        body,
    };
    let verb = verb_of(&call)?;
    if let Some(failure) = state
        .faults
        .before_call(verb)
        .answer::<ExoVerb, Failure>(verb)
    {
        return Err(failure);
    }
    route(state, &call).map(|value| json_response(200, &value))
}

/// Which verb a call is (for fault injection), or why the path is unknown.
fn verb_of(call: &Call<'_>) -> Result<ExoVerb, Failure> {
    let get = call.method == Method::GET;
    let verb = match (call.segments.as_slice(), call.method) {
        (["zone"], _) if get => ExoVerb::Zones,
        (["operation", _], _) if get => ExoVerb::Operation,
        (["instance-type"] | ["instance-type", _], _) if get => ExoVerb::InstanceTypes,
        (["template"] | ["template", _], _) if get => ExoVerb::Templates,
        (["security-group"] | ["security-group", _], _) if get => ExoVerb::SecurityGroups,
        (["private-network", action], &Method::PUT)
            if action.ends_with(":attach") || action.ends_with(":detach") =>
        {
            ExoVerb::AttachPrivateNetwork
        }
        (["private-network"] | ["private-network", _], _) if get => ExoVerb::PrivateNetworks,
        (["anti-affinity-group"] | ["anti-affinity-group", _], _) if get => {
            ExoVerb::AntiAffinityGroups
        }
        (["ssh-key"] | ["ssh-key", _], _) if get => ExoVerb::SshKeys,
        (["quota"], _) if get => ExoVerb::Quotas,
        (["instance"], &Method::GET) => ExoVerb::ListInstances,
        (["instance"], &Method::POST) => ExoVerb::CreateInstance,
        (["instance", _], &Method::GET) => ExoVerb::GetInstance,
        (["instance", action], &Method::PUT) if action.ends_with(":reboot") => {
            ExoVerb::RebootInstance
        }
        (["instance", _], &Method::PUT) => ExoVerb::UpdateInstance,
        (["instance", _], &Method::DELETE) => ExoVerb::DeleteInstance,
        (
            ["zone"]
            | ["operation", _]
            | ["instance-type", ..]
            | ["template", ..]
            | ["security-group", ..]
            | ["private-network", ..]
            | ["anti-affinity-group", ..]
            | ["ssh-key", ..]
            | ["quota"]
            | ["instance"]
            | ["instance", _],
            _,
        ) => {
            return Err(Failure::new(
                405,
                format!(
                    "{} is not supported on /v2/{}",
                    call.method,
                    call.segments.join("/")
                ),
            ));
        }
        _ => {
            return Err(Failure::new(
                404,
                format!("no such endpoint /v2/{}", call.segments.join("/")),
            ));
        }
    };
    Ok(verb)
}

fn route(state: &Arc<ExoState>, call: &Call<'_>) -> Result<Value, Failure> {
    let zone = call.zone.as_str();
    let pairs = signature::query_pairs(call.query);
    let param = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    match (call.segments.as_slice(), call.method) {
        (["zone"], _) => Ok(json!({"zones": state.zones.iter().map(|z| json!({
            "name": z,
            "api-endpoint": format!("{}/{z}/v2", state.base_url),
            "sos-endpoint": format!("https://sos-{z}.exo.io"),
        })).collect::<Vec<_>>()})),
        (["operation", id], _) => poll_operation(state, id),
        (["instance-type"], _) => Ok(
            json!({"instance-types": state.world().instance_types.iter().map(instance_type_json).collect::<Vec<_>>()}),
        ),
        (["instance-type", id], _) => {
            let world = state.world();
            world
                .type_by_id(id)
                .map(instance_type_json)
                .ok_or_else(|| Failure::not_found("instance type", id))
        }
        (["template"], _) => {
            let visibility = match param("visibility") {
                None => None,
                Some("public") => Some(Visibility::Public),
                Some("private") => Some(Visibility::Private),
                Some(other) => {
                    return Err(Failure::bad_request(format!(
                        "visibility {other:?} is not one of public, private"
                    )));
                }
            };
            let family = param("family");
            let world = state.world();
            let templates: Vec<Value> = world
                .templates
                .iter()
                .filter(|t| t.zone == zone)
                .filter(|t| t.visibility == visibility.unwrap_or(Visibility::Public))
                .filter(|t| family.is_none_or(|f| t.family == f))
                .map(template_json)
                .collect();
            Ok(json!({"templates": templates}))
        }
        (["template", id], _) => {
            let world = state.world();
            world
                .templates
                .iter()
                .find(|t| t.id == *id && t.zone == zone)
                .map(template_json)
                .ok_or_else(|| Failure::not_found("template", id))
        }
        (["security-group"], _) => {
            let visibility = param("visibility");
            let world = state.world();
            let groups: Vec<Value> = world
                .security_groups
                .iter()
                .filter(|g| visibility.is_none_or(|v| g.visibility.as_str() == v))
                .map(security_group_json)
                .collect();
            Ok(json!({"security-groups": groups}))
        }
        (["security-group", id], _) => {
            let world = state.world();
            world
                .security_groups
                .iter()
                .find(|g| g.id == *id)
                .map(security_group_json)
                .ok_or_else(|| Failure::not_found("security group", id))
        }
        (["private-network", action], &Method::PUT) => {
            let (id, verb) = action.split_once(':').unwrap_or((action, ""));
            attach(state, zone, id, verb == "attach", call.body)
        }
        (["private-network"], _) => {
            let world = state.world();
            let networks: Vec<Value> = world
                .private_networks
                .iter()
                .filter(|n| n.zone == zone)
                .map(private_network_json)
                .collect();
            Ok(json!({"private-networks": networks}))
        }
        (["private-network", id], _) => {
            let world = state.world();
            world
                .private_networks
                .iter()
                .find(|n| n.id == *id && n.zone == zone)
                .map(private_network_json)
                .ok_or_else(|| Failure::not_found("private network", id))
        }
        (["anti-affinity-group"], _) => {
            let world = state.world();
            Ok(
                json!({"anti-affinity-groups": world.anti_affinity_groups.iter().map(anti_affinity_json).collect::<Vec<_>>()}),
            )
        }
        (["anti-affinity-group", id], _) => {
            let world = state.world();
            world
                .anti_affinity_groups
                .iter()
                .find(|g| g.id == *id)
                .map(anti_affinity_json)
                .ok_or_else(|| Failure::not_found("anti-affinity group", id))
        }
        (["ssh-key"], _) => {
            let world = state.world();
            Ok(
                json!({"ssh-keys": world.ssh_keys.iter().map(|k| json!({"name": k.name, "fingerprint": k.fingerprint})).collect::<Vec<_>>()}),
            )
        }
        (["ssh-key", name], _) => {
            let name = crate::http_server::percent_decode(name);
            let world = state.world();
            world
                .ssh_keys
                .iter()
                .find(|k| k.name == name)
                .map(|k| json!({"name": k.name, "fingerprint": k.fingerprint}))
                .ok_or_else(|| Failure::not_found("SSH key", &name))
        }
        (["quota"], _) => {
            let world = state.world();
            let usage = world
                .instances
                .values()
                .filter(|i| i.state != ExoInstanceState::Destroying)
                .count();
            let limit = state.faults.instance_quota().map_or(-1, |l| l as i64);
            Ok(json!({"quotas": [{"resource": "instance", "usage": usage, "limit": limit}]}))
        }
        (["instance"], &Method::GET) => list_instances(state, zone, param("labels")),
        (["instance"], _) => create_instance(state, zone, call.body),
        (["instance", id], &Method::GET) => {
            let world = state.world();
            match world.instances.get(*id).filter(|i| i.zone == zone) {
                Some(instance) => Ok(instance_json(&world, instance, true)),
                None => Err(Failure::not_found("instance", id)),
            }
        }
        (["instance", action], &Method::PUT) if action.ends_with(":reboot") => {
            reboot_instance(state, zone, action.trim_end_matches(":reboot"))
        }
        (["instance", id], &Method::PUT) => update_instance(state, zone, id, call.body),
        (["instance", id], _) => delete_instance(state, zone, id),
        _ => Err(Failure::new(404, "no such endpoint")),
    }
}
