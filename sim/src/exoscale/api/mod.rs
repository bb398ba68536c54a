//! The fake Exoscale API's HTTP front end and state (see [`crate::exoscale`] for the API).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use joinery_core::clock::Clock;
use joinery_core::resources::Resources;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, watch};

use super::catalog::format_uuid;
use super::faults::{ErrorShape, ExoFaults, ExoVerb};
use super::model::{
    ExoAntiAffinityGroup, ExoInstance, ExoInstanceState, ExoInstanceType, ExoOperation,
    ExoPrivateNetwork, ExoSecurityGroup, ExoSshKey, ExoTemplate, GIB, Lease, OperationState,
    PROVIDER_ID_PREFIX, Visibility,
};
use super::signature::{self, AuthFailure, Presented};
use crate::cloud::catalog::OverheadSpec;
use crate::cloud::model::{CloudEvent, InstanceState, SimInstance};
use crate::faults::InjectedAnswer;

/// Largest accepted `user-data` (base64 characters).
pub(crate) const MAX_USER_DATA: usize = 32_768;
/// Root disk bounds in GiB.
pub(crate) const DISK_RANGE: std::ops::RangeInclusive<u64> = 10..=51_200;

/// What finishing an operation does.
#[derive(Debug, Clone)]
pub(crate) enum Completion {
    /// Ends in success.
    Succeed,
    /// Ends in failure with this reason and message.
    Fail { reason: String, message: String },
    /// Ends in failure and leaves the instance in state `error`.
    FailInstance {
        instance: String,
        reason: String,
        message: String,
    },
    /// Removes the instance (a delete), then succeeds.
    RemoveInstance(String),
}

/// Everything the fake stores.
#[derive(Default)]
pub(crate) struct World {
    pub(crate) instance_types: Vec<ExoInstanceType>,
    pub(crate) templates: Vec<ExoTemplate>,
    pub(crate) security_groups: Vec<ExoSecurityGroup>,
    pub(crate) private_networks: Vec<ExoPrivateNetwork>,
    pub(crate) anti_affinity_groups: Vec<ExoAntiAffinityGroup>,
    pub(crate) ssh_keys: Vec<ExoSshKey>,
    pub(crate) instances: BTreeMap<String, ExoInstance>,
    pub(crate) operations: BTreeMap<String, (ExoOperation, Completion)>,
    pub(crate) rng: u64,
    pub(crate) addresses: u32,
    /// Instances ever created (including ones deleted since, and failed creates that made one).
    pub(crate) created: usize,
}

impl World {
    /// A fresh random UUID (seeded, so runs repeat).
    pub(crate) fn uuid(&mut self) -> String {
        let mut bytes = [0u8; 16];
        for half in bytes.chunks_mut(8) {
            half.copy_from_slice(&crate::random::next_u64(&mut self.rng).to_be_bytes());
        }
        format_uuid(bytes)
    }

    pub(crate) fn next_address(&mut self) -> u32 {
        self.addresses += 1;
        self.addresses
    }

    pub(crate) fn type_by_id(&self, id: &str) -> Option<&ExoInstanceType> {
        self.instance_types.iter().find(|t| t.id == id)
    }

    fn finish(&mut self, id: &str) {
        let Some((operation, completion)) = self.operations.get_mut(id) else {
            return;
        };
        if operation.state != OperationState::Pending {
            return;
        }
        let completion = completion.clone();
        match &completion {
            Completion::Succeed => operation.state = OperationState::Success,
            Completion::Fail { reason, message } => {
                operation.state = OperationState::Failure;
                operation.reason = Some(reason.clone());
                operation.message = Some(message.clone());
            }
            Completion::FailInstance {
                instance,
                reason,
                message,
            } => {
                operation.state = OperationState::Failure;
                operation.reason = Some(reason.clone());
                operation.message = Some(message.clone());
                if let Some(instance) = self.instances.get_mut(instance)
                    && instance.state != ExoInstanceState::Destroying
                {
                    instance.state = ExoInstanceState::Error;
                }
            }
            Completion::RemoveInstance(instance) => {
                operation.state = OperationState::Success;
                self.forget_instance(instance);
            }
        }
    }

    /// Removes an instance and every reference to it.
    fn forget_instance(&mut self, id: &str) {
        self.instances.remove(id);
        for group in &mut self.anti_affinity_groups {
            group.instances.retain(|i| i != id);
        }
        for network in &mut self.private_networks {
            network.leases.retain(|l| l.instance_id != id);
        }
    }

    fn operation(
        &mut self,
        zone: &str,
        command: &str,
        reference: Option<&str>,
        now: SystemTime,
        completion: Completion,
    ) -> Value {
        let id = self.uuid();
        let operation = ExoOperation {
            id: id.clone(),
            zone: zone.to_string(),
            state: OperationState::Pending,
            reason: None,
            message: None,
            reference_id: reference.map(str::to_string),
            command: command.to_string(),
            polls: 0,
            started_at: now,
        };
        let body = operation_json(&operation);
        self.operations.insert(id, (operation, completion));
        body
    }
}

/// Everything the request handlers share.
pub(crate) struct ExoState {
    pub(crate) zones: Vec<String>,
    pub(crate) credentials: BTreeMap<String, String>,
    pub(crate) clock: Arc<Clock>,
    pub(crate) boot_delay: Duration,
    pub(crate) operation_polls: u32,
    pub(crate) operation_deadline: Duration,
    pub(crate) anti_affinity_ceiling: usize,
    pub(crate) overhead: OverheadSpec,
    pub(crate) faults: ExoFaults,
    pub(crate) world: Mutex<World>,
    pub(crate) events: broadcast::Sender<CloudEvent>,
    pub(crate) base_url: String,
    /// Where every exchange is written, when [`super::ExoFakeOptions::journal`] is set.
    pub(crate) journal: Option<Mutex<std::fs::File>>,
}

impl ExoState {
    /// Locks the world after letting time pass: booted instances run, overdue operations end.
    pub(crate) fn world(&self) -> MutexGuard<'_, World> {
        let mut world = self
            .world
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = self.clock.now();
        for instance in world.instances.values_mut() {
            if instance.state == ExoInstanceState::Starting
                && instance.created_at + self.boot_delay <= now
            {
                instance.state = ExoInstanceState::Running;
            }
        }
        let overdue: Vec<String> = world
            .operations
            .values()
            .filter(|(op, _)| {
                op.state == OperationState::Pending
                    && op.started_at + self.operation_deadline <= now
            })
            .map(|(op, _)| op.id.clone())
            .collect();
        for id in overdue {
            world.finish(&id);
        }
        world
    }

    pub(crate) fn publish(&self, event: CloudEvent) {
        // Nobody listening is fine.
        let _ = self.events.send(event);
    }

    /// The instance as the cluster physics sees it (capacity from its type and disk).
    pub(crate) fn sim_instance(
        &self,
        world: &World,
        instance: &ExoInstance,
        live: bool,
    ) -> SimInstance {
        let kind = world.type_by_id(&instance.instance_type_id);
        let mut capacity = Resources::new();
        capacity.set("cpu", u64::from(kind.map_or(0, |t| t.cpus)) * 1000);
        capacity.set("memory", kind.map_or(0, |t| t.memory));
        capacity.set("ephemeral-storage", instance.disk_size * GIB);
        capacity.set("pods", 110);
        if let Some(gpus) = kind.map(|t| t.gpus).filter(|g| *g > 0) {
            capacity.set("nvidia.com/gpu", u64::from(gpus));
        }
        let overhead = [
            &self.overhead.kube_reserved,
            &self.overhead.system_reserved,
            &self.overhead.eviction_threshold,
        ]
        .into_iter()
        .filter_map(|map| Resources::from_quantities(map.iter()).ok())
        .fold(Resources::new(), |sum, r| &sum + &r);
        let allocatable = capacity.saturating_sub(&overhead);
        let mut labels = BTreeMap::new();
        labels.insert("kubernetes.io/arch".to_string(), "amd64".to_string());
        labels.insert("kubernetes.io/os".to_string(), "linux".to_string());
        labels.insert(
            "node.kubernetes.io/instance-type".to_string(),
            instance.instance_type.clone(),
        );
        labels.insert(
            "topology.kubernetes.io/region".to_string(),
            instance.zone.clone(),
        );
        if let Some(t) = kind {
            labels.insert(
                "karpenter.k8s.exoscale/instance-family".into(),
                t.family.clone(),
            );
            labels.insert(
                "karpenter.k8s.exoscale/instance-size".into(),
                t.size.clone(),
            );
            labels.insert(
                "karpenter.k8s.exoscale/instance-cpu".into(),
                t.cpus.to_string(),
            );
            labels.insert(
                "karpenter.k8s.exoscale/instance-memory".into(),
                (t.memory >> 20).to_string(),
            );
            labels.insert(
                "karpenter.k8s.exoscale/instance-gpu-count".into(),
                t.gpus.to_string(),
            );
        }
        let user_data = instance
            .user_data
            .as_deref()
            .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
            .map(|raw| String::from_utf8_lossy(&raw).into_owned())
            .unwrap_or_default();
        SimInstance {
            id: instance.id.clone(),
            provider_id: format!("{PROVIDER_ID_PREFIX}{}", instance.id),
            instance_type: instance.instance_type.clone(),
            zone: instance.zone.clone(),
            capacity_type: "on-demand".to_string(),
            user_data,
            tags: instance.labels.clone(),
            capacity: capacity.to_quantities(),
            allocatable: allocatable.to_quantities(),
            labels,
            price_per_hour: 0.0,
            state: match (live, instance.state) {
                (false, _) => InstanceState::Terminated,
                (true, ExoInstanceState::Running) => InstanceState::Running,
                _ => InstanceState::Pending,
            },
            created_at: super::rfc3339(instance.created_at),
        }
    }
}

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
    listener: TcpListener,
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

/// Appends one exchange to the journal (see [`super::ExoFakeOptions::journal`]) and gives the
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
    // Plugins read the real wall clock, so expiry is checked against it, not the simulated one.
    let now = SystemTime::now()
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
        (["instance", id], &Method::PUT) => update_instance(state, zone, id, call.body),
        (["instance", id], _) => delete_instance(state, zone, id),
        _ => Err(Failure::new(404, "no such endpoint")),
    }
}

fn poll_operation(state: &ExoState, id: &str) -> Result<Value, Failure> {
    let mut world = state.world();
    let Some((operation, _)) = world.operations.get_mut(id) else {
        return Err(Failure::not_found("operation", id));
    };
    if operation.state == OperationState::Pending {
        if operation.polls >= state.operation_polls {
            world.finish(id);
        } else {
            operation.polls += 1;
        }
    }
    Ok(operation_json(&world.operations[id].0))
}

fn operation_json(operation: &ExoOperation) -> Value {
    let mut body = json!({"id": operation.id, "state": operation.state.as_str()});
    if let Some(reason) = &operation.reason {
        body["reason"] = json!(reason);
    }
    if let Some(message) = &operation.message {
        body["message"] = json!(message);
    }
    if let Some(reference) = &operation.reference_id {
        let kind = if operation.command.contains("private-network") {
            "private-network"
        } else {
            "instance"
        };
        body["reference"] = json!({"id": reference, "link": format!("/v2/{kind}/{reference}"), "command": operation.command});
    }
    body
}

/// An instance type. `gpus` is left out when zero: Exoscale's API definition says it is
/// greater than zero whenever present.
fn instance_type_json(t: &ExoInstanceType) -> Value {
    let mut body = json!({
        "id": t.id, "family": t.family, "size": t.size, "cpus": t.cpus,
        "memory": t.memory, "authorized": t.authorized, "zones": t.zones,
    });
    if t.gpus > 0 {
        body["gpus"] = json!(t.gpus);
    }
    body
}

fn template_json(t: &ExoTemplate) -> Value {
    json!({
        "id": t.id, "name": t.name, "description": "", "family": t.family, "build": t.build, "version": t.version,
        "size": t.size, "visibility": t.visibility.as_str(), "zones": [t.zone], "created-at": t.created_at,
        "default-user": t.default_user, "ssh-key-enabled": true, "password-enabled": false, "boot-mode": "uefi",
        "maintainer": if t.visibility == Visibility::Public { "Exoscale" } else { "" },
    })
}

fn security_group_json(g: &ExoSecurityGroup) -> Value {
    // No `visibility` field (the definition has none; it is only a filter of the list) and no
    // `rules` (write-only in the definition).
    json!({"id": g.id, "name": g.name, "description": g.description})
}

fn private_network_json(n: &ExoPrivateNetwork) -> Value {
    json!({
        "id": n.id, "name": n.name, "description": n.description, "labels": n.labels,
        "start-ip": "10.0.0.20", "end-ip": "10.0.0.250", "netmask": "255.255.255.0",
        "leases": n.leases.iter().map(|l| json!({"ip": l.ip, "instance-id": l.instance_id})).collect::<Vec<_>>(),
    })
}

fn anti_affinity_json(g: &ExoAntiAffinityGroup) -> Value {
    json!({
        "id": g.id, "name": g.name, "description": g.description,
        "instances": g.instances.iter().map(|i| json!({"id": i})).collect::<Vec<_>>(),
    })
}

/// An instance; list items (`full` false) omit `disk-size`, `anti-affinity-groups` and
/// `user-data`, as the API definition's list schema does.
fn instance_json(world: &World, i: &ExoInstance, full: bool) -> Value {
    let kind = world
        .type_by_id(&i.instance_type_id)
        .map(instance_type_json)
        .unwrap_or_else(|| json!({"id": i.instance_type_id}));
    let mut body = json!({
        "id": i.id, "name": i.name, "state": i.state.as_str(), "created-at": super::rfc3339(i.created_at),
        "labels": i.labels, "instance-type": kind, "template": {"id": i.template_id},
        "public-ip-assignment": i.public_ip_assignment, "mac-address": i.mac_address,
        "security-groups": i.security_groups.iter().map(|id| json!({"id": id})).collect::<Vec<_>>(),
        "private-networks": i.private_networks.iter().map(|id| json!({"id": id, "mac-address": i.mac_address})).collect::<Vec<_>>(),
        "ssh-keys": i.ssh_keys.iter().map(|n| json!({"name": n})).collect::<Vec<_>>(),
    });
    if let Some(first) = i.ssh_keys.first() {
        body["ssh-key"] = json!({"name": first});
    }
    if let Some(ip) = &i.public_ip {
        body["public-ip"] = json!(ip);
    }
    if let Some(ip) = &i.ipv6_address {
        body["ipv6-address"] = json!(ip);
    }
    if full {
        body["disk-size"] = json!(i.disk_size);
        body["anti-affinity-groups"] = json!(
            i.anti_affinity_groups
                .iter()
                .map(|id| json!({"id": id}))
                .collect::<Vec<_>>()
        );
        if let Some(user_data) = &i.user_data {
            body["user-data"] = json!(user_data);
        }
    }
    body
}

fn list_instances(state: &ExoState, zone: &str, labels: Option<&str>) -> Result<Value, Failure> {
    let mut filters = Vec::new();
    for pair in labels
        .unwrap_or_default()
        .split(' ')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some((k, v)) if !k.is_empty() => filters.push((k, v)),
            _ => {
                return Err(Failure::bad_request(format!(
                    "labels: {pair:?} is not key=value"
                )));
            }
        }
    }
    let world = state.world();
    let instances: Vec<Value> = world
        .instances
        .values()
        .filter(|i| i.zone == zone)
        .filter(|i| {
            filters
                .iter()
                .all(|(k, v)| i.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|i| instance_json(&world, i, false))
        .collect();
    Ok(json!({"instances": instances}))
}

/// Checks a label map against Exoscale's documented limits: values start with a
/// non-digit, use only letters, digits and `* + ! - _ ?`, at most 128 characters; keys (the
/// key grammar is not documented; the fake is conservative) are 1–128 characters without `/`.
pub fn check_labels(labels: &BTreeMap<String, String>) -> Result<(), String> {
    for (key, value) in labels {
        if key.is_empty()
            || key.len() > 128
            || key.contains('/')
            || key.chars().any(char::is_whitespace)
        {
            return Err(format!(
                "label key {key:?} is invalid: 1-128 characters, no '/' or spaces"
            ));
        }
        let bad_char = value
            .chars()
            .any(|c| !(c.is_ascii_alphanumeric() || "*+!-_?".contains(c)));
        if value.len() > 128 || bad_char || value.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(format!(
                "label {key}: value {value:?} is invalid: it must not start with a digit, may only contain letters, digits and * + ! - _ ?, at most 128 characters"
            ));
        }
    }
    Ok(())
}

fn string_map(value: Option<&Value>, field: &str) -> Result<BTreeMap<String, String>, Failure> {
    match value {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => Err(Failure::bad_request(format!(
                    "{field}.{k} must be a string"
                ))),
            })
            .collect(),
        Some(_) => Err(Failure::bad_request(format!(
            "{field} must be an object of strings"
        ))),
    }
}

/// The `id`s of a list of `{"id": …}` references.
fn id_list(object: &Map<String, Value>, field: &str, key: &str) -> Result<Vec<String>, Failure> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.get(key)
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .ok_or_else(|| {
                        Failure::bad_request(format!("{field}: every item needs a string {key:?}"))
                    })
            })
            .collect(),
        Some(_) => Err(Failure::bad_request(format!("{field} must be an array"))),
    }
}

fn reference(
    object: &Map<String, Value>,
    field: &str,
    key: &str,
) -> Result<Option<String>, Failure> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(item) => item
            .get(key)
            .and_then(Value::as_str)
            .map(|s| Some(s.to_string()))
            .ok_or_else(|| {
                Failure::bad_request(format!("{field} must be an object with a string {key:?}"))
            }),
    }
}

fn parse_object(body: &[u8]) -> Result<Map<String, Value>, Failure> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(_) => Err(Failure::bad_request("the body must be a JSON object")),
        Err(e) => Err(Failure::bad_request(format!(
            "the body is not valid JSON: {e}"
        ))),
    }
}

fn create_instance(state: &Arc<ExoState>, zone: &str, body: &[u8]) -> Result<Value, Failure> {
    let object = parse_object(body)?;
    let type_id = reference(&object, "instance-type", "id")?
        .ok_or_else(|| Failure::bad_request("instance-type is required"))?;
    let template_id = reference(&object, "template", "id")?
        .ok_or_else(|| Failure::bad_request("template is required"))?;
    let disk_size = object
        .get("disk-size")
        .and_then(Value::as_u64)
        .ok_or_else(|| Failure::bad_request("disk-size is required (GiB)"))?;
    if !DISK_RANGE.contains(&disk_size) {
        return Err(Failure::bad_request(format!(
            "disk-size {disk_size} is out of range 10-51200"
        )));
    }
    let name = match object.get("name") {
        None | Some(Value::Null) => None,
        Some(Value::String(n)) if (1..=255).contains(&n.len()) => Some(n.clone()),
        Some(_) => {
            return Err(Failure::bad_request(
                "name must be a string of 1-255 characters",
            ));
        }
    };
    let labels = string_map(object.get("labels"), "labels")?;
    check_labels(&labels).map_err(Failure::bad_request)?;
    let user_data = match object.get("user-data") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => {
            if text.is_empty() || text.len() > MAX_USER_DATA {
                return Err(Failure::bad_request(format!(
                    "user-data must be 1-{MAX_USER_DATA} characters of base64"
                )));
            }
            if base64::engine::general_purpose::STANDARD
                .decode(text)
                .is_err()
            {
                return Err(Failure::bad_request("user-data is not valid base64"));
            }
            Some(text.clone())
        }
        Some(_) => return Err(Failure::bad_request("user-data must be a base64 string")),
    };
    let public_ip_assignment = match object.get("public-ip-assignment").and_then(Value::as_str) {
        None => "inet4".to_string(),
        Some(v @ ("inet4" | "dual" | "none")) => v.to_string(),
        Some(other) => {
            return Err(Failure::bad_request(format!(
                "public-ip-assignment {other:?} is not one of inet4, dual, none"
            )));
        }
    };
    let security_groups = id_list(&object, "security-groups", "id")?;
    let anti_affinity_groups = id_list(&object, "anti-affinity-groups", "id")?;
    let mut ssh_keys = id_list(&object, "ssh-keys", "name")?;
    if let Some(key) = reference(&object, "ssh-key", "name")? {
        ssh_keys.insert(0, key);
    }

    let now = state.clock.now();
    let mut world = state.world();
    let kind = world
        .type_by_id(&type_id)
        .cloned()
        .ok_or_else(|| Failure::not_found("instance type", &type_id))?;
    let type_name = kind.name();
    if !kind.authorized {
        return Err(Failure::new(
            403,
            format!(
                "instance type {type_name} is not authorized for this organization; ask support to enable it"
            ),
        ));
    }
    if !kind.zones.iter().any(|z| z == zone) {
        return Err(Failure::bad_request(format!(
            "instance type {type_name} is not available in zone {zone}"
        )));
    }
    let template = world
        .templates
        .iter()
        .find(|t| t.id == template_id && t.zone == zone)
        .cloned()
        .ok_or_else(|| Failure::not_found("template", &template_id))?;
    let minimum = template.size.div_ceil(GIB);
    if disk_size < minimum {
        return Err(Failure::bad_request(format!(
            "disk-size {disk_size} is smaller than template {} ({minimum} GiB)",
            template.name
        )));
    }
    for id in &security_groups {
        if !world.security_groups.iter().any(|g| g.id == *id) {
            return Err(Failure::not_found("security group", id));
        }
    }
    for key in &ssh_keys {
        if !world.ssh_keys.iter().any(|k| k.name == *key) {
            return Err(Failure::not_found("SSH key", key));
        }
    }
    for id in &anti_affinity_groups {
        let group = world
            .anti_affinity_groups
            .iter()
            .find(|g| g.id == *id)
            .ok_or_else(|| Failure::not_found("anti-affinity group", id))?;
        if group.instances.len() >= state.anti_affinity_ceiling {
            return Err(Failure::bad_request(format!(
                "anti-affinity group {} cannot take another instance: its {} members already occupy every available host",
                group.name,
                group.instances.len()
            )));
        }
    }
    if let Some(limit) = state.faults.instance_quota() {
        let used = world
            .instances
            .values()
            .filter(|i| i.state != ExoInstanceState::Destroying)
            .count();
        if used >= limit {
            return Err(Failure::new(
                403,
                format!(
                    "quota exceeded for resource instance: {used} of {limit} in use; request a quota increase"
                ),
            ));
        }
    }

    let id = world.uuid();
    if state.faults.lacks_capacity(&type_name, zone) {
        let message = format!(
            "insufficient capacity to deploy an instance of type {type_name} in zone {zone}, try again later"
        );
        return Ok(world.operation(
            zone,
            "create-instance",
            Some(&id),
            now,
            Completion::Fail {
                reason: "unavailable".into(),
                message,
            },
        ));
    }
    let address = world.next_address();
    let instance = ExoInstance {
        id: id.clone(),
        zone: zone.to_string(),
        name: name.unwrap_or_else(|| format!("vm-{}", &id[..8])),
        state: ExoInstanceState::Starting,
        created_at: now,
        labels,
        instance_type_id: kind.id.clone(),
        instance_type: type_name,
        template_id: template.id,
        disk_size,
        user_data,
        security_groups,
        anti_affinity_groups: anti_affinity_groups.clone(),
        private_networks: Vec::new(),
        ssh_keys,
        public_ip: (public_ip_assignment != "none")
            .then(|| format!("194.182.{}.{}", (address >> 8) & 0xff, address & 0xff)),
        ipv6_address: (public_ip_assignment == "dual")
            .then(|| format!("2a04:c43:e00:{:x}::{:x}", address >> 16, address & 0xffff)),
        public_ip_assignment,
        mac_address: format!(
            "06:00:00:{:02x}:{:02x}:{:02x}",
            (address >> 16) & 0xff,
            (address >> 8) & 0xff,
            address & 0xff
        ),
    };
    for group in world
        .anti_affinity_groups
        .iter_mut()
        .filter(|g| anti_affinity_groups.contains(&g.id))
    {
        group.instances.push(id.clone());
    }
    let event = state.sim_instance(&world, &instance, true);
    world.instances.insert(id.clone(), instance);
    world.created += 1;
    let completion = if state.faults.take_fail_after_create() {
        Completion::FailInstance {
            instance: id.clone(),
            reason: "fault".into(),
            message: "the instance could not be started (injected fault)".into(),
        }
    } else {
        Completion::Succeed
    };
    let body = world.operation(zone, "create-instance", Some(&id), now, completion);
    drop(world);
    tracing::info!(%id, instance_type = %event.instance_type, %zone, "fake Exoscale API created an instance");
    state.publish(CloudEvent::Launched(event));
    Ok(body)
}

fn update_instance(state: &ExoState, zone: &str, id: &str, body: &[u8]) -> Result<Value, Failure> {
    let object = parse_object(body)?;
    let labels = match object.get("labels") {
        Some(value) => {
            let labels = string_map(Some(value), "labels")?;
            check_labels(&labels).map_err(Failure::bad_request)?;
            Some(labels)
        }
        None => None,
    };
    let name = match object.get("name") {
        None => None,
        Some(Value::String(n)) if (1..=255).contains(&n.len()) => Some(n.clone()),
        Some(_) => {
            return Err(Failure::bad_request(
                "name must be a string of 1-255 characters",
            ));
        }
    };
    let now = state.clock.now();
    let mut world = state.world();
    let instance = world
        .instances
        .get_mut(id)
        .filter(|i| i.zone == zone)
        .ok_or_else(|| Failure::not_found("instance", id))?;
    if let Some(labels) = labels {
        // The map is replaced as a whole, never merged.
        instance.labels = labels;
    }
    if let Some(name) = name {
        instance.name = name;
    }
    Ok(world.operation(zone, "update-instance", Some(id), now, Completion::Succeed))
}

fn delete_instance(state: &ExoState, zone: &str, id: &str) -> Result<Value, Failure> {
    let now = state.clock.now();
    let mut world = state.world();
    let Some(instance) = world.instances.get_mut(id).filter(|i| i.zone == zone) else {
        return Err(Failure::not_found("instance", id));
    };
    let first = instance.state != ExoInstanceState::Destroying;
    instance.state = ExoInstanceState::Destroying;
    let snapshot = instance.clone();
    let event = first.then(|| state.sim_instance(&world, &snapshot, false));
    let body = world.operation(
        zone,
        "delete-instance",
        Some(id),
        now,
        Completion::RemoveInstance(id.to_string()),
    );
    drop(world);
    if let Some(instance) = event {
        tracing::info!(%id, %zone, "fake Exoscale API is destroying an instance");
        state.publish(CloudEvent::Terminated { instance, at: now });
    }
    Ok(body)
}

fn attach(
    state: &ExoState,
    zone: &str,
    network_id: &str,
    attach: bool,
    body: &[u8],
) -> Result<Value, Failure> {
    let object = parse_object(body)?;
    let instance_id = reference(&object, "instance", "id")?
        .ok_or_else(|| Failure::bad_request("instance is required"))?;
    let now = state.clock.now();
    let mut world = state.world();
    if !world
        .private_networks
        .iter()
        .any(|n| n.id == network_id && n.zone == zone)
    {
        return Err(Failure::not_found("private network", network_id));
    }
    let Some(instance) = world.instances.get(&instance_id).filter(|i| i.zone == zone) else {
        return Err(Failure::not_found("instance", &instance_id));
    };
    let attached = instance.private_networks.iter().any(|n| n == network_id);
    let command = if attach {
        "attach-instance-to-private-network"
    } else {
        "detach-instance-from-private-network"
    };
    match (attach, attached) {
        (true, true) => {
            return Err(Failure::bad_request(format!(
                "instance {instance_id} is already attached to private network {network_id}"
            )));
        }
        (false, false) => {
            return Err(Failure::bad_request(format!(
                "instance {instance_id} is not attached to private network {network_id}"
            )));
        }
        _ => {}
    }
    if attach && state.faults.take_fail_attach() {
        let message = format!(
            "could not attach instance {instance_id} to private network {network_id} (injected fault)"
        );
        return Ok(world.operation(
            zone,
            command,
            Some(network_id),
            now,
            Completion::Fail {
                reason: "unavailable".into(),
                message,
            },
        ));
    }
    let lease_number = world.next_address();
    let network = world
        .private_networks
        .iter_mut()
        .find(|n| n.id == network_id)
        .expect("checked above");
    if attach {
        let ip = object
            .get("ip")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| format!("10.0.0.{}", 20 + lease_number % 200));
        network.leases.push(Lease {
            instance_id: instance_id.clone(),
            ip,
        });
    } else {
        network.leases.retain(|l| l.instance_id != instance_id);
    }
    let instance = world
        .instances
        .get_mut(&instance_id)
        .expect("checked above");
    if attach {
        instance.private_networks.push(network_id.to_string());
    } else {
        instance.private_networks.retain(|n| n != network_id);
    }
    Ok(world.operation(zone, command, Some(network_id), now, Completion::Succeed))
}
