//! The simulated cloud's HTTP front end and instance table (see the module docs of
//! [`crate::cloud`] for the API).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use joinery_core::clock::Clock;
use serde_json::{Map, Value, json};
use tokio::sync::{broadcast, watch};

use super::Adoption;
use super::catalog::{CAPACITY_TYPES, InstanceTypeInfo};
use super::faults::{CloudFaults, CloudVerb};
use super::model::{CloudEvent, InstanceState, PROVIDER_ID_PREFIX, SimInstance};
use crate::faults::InjectedAnswer;

/// One instance and, once deleted, when.
struct Entry {
    instance: SimInstance,
    terminated_at: Option<SystemTime>,
}

/// What an instance is launched (or adopted) as, besides its type.
struct Launch {
    zone: String,
    capacity_type: String,
    user_data: String,
    tags: BTreeMap<String, String>,
    price: f64,
    state: InstanceState,
}

/// Every instance the cloud still remembers, and the ID counter.
#[derive(Default)]
pub(crate) struct InstanceTable {
    entries: BTreeMap<String, Entry>,
    /// IDs handed out so far (`i-00000001` … `i-{issued:08x}`).
    issued: u64,
}

impl InstanceTable {
    fn format_id(number: u64) -> String {
        format!("i-{number:08x}")
    }

    /// Whether `id` was ever handed out (even if it has been forgotten since).
    fn ever_existed(&self, id: &str) -> bool {
        id.strip_prefix("i-")
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
            .is_some_and(|n| n >= 1 && n <= self.issued && Self::format_id(n) == id)
    }

    /// Hands out the next ID to a new instance of `info` and remembers it.
    fn record(&mut self, info: &InstanceTypeInfo, launch: Launch, now: SystemTime) -> SimInstance {
        self.issued += 1;
        let id = Self::format_id(self.issued);
        let instance = SimInstance {
            provider_id: format!("{PROVIDER_ID_PREFIX}{id}"),
            id: id.clone(),
            instance_type: info.name.clone(),
            zone: launch.zone,
            capacity_type: launch.capacity_type,
            user_data: launch.user_data,
            tags: launch.tags,
            capacity: info.capacity.clone(),
            allocatable: info.kubelet_allocatable.clone(),
            labels: info.labels.clone(),
            price_per_hour: launch.price,
            state: launch.state,
            created_at: joinery_core::time::rfc3339(now),
        };
        self.entries.insert(
            id,
            Entry {
                instance: instance.clone(),
                terminated_at: None,
            },
        );
        instance
    }

    fn live_count(&self) -> usize {
        self.entries
            .values()
            .filter(|e| e.terminated_at.is_none())
            .count()
    }
}

/// Everything the request handlers share.
pub(crate) struct CloudState {
    pub(crate) types: Vec<InstanceTypeInfo>,
    pub(crate) by_name: HashMap<String, usize>,
    pub(crate) zones: Vec<String>,
    pub(crate) clock: Arc<Clock>,
    pub(crate) boot_delay: Duration,
    pub(crate) retention: Duration,
    pub(crate) faults: CloudFaults,
    pub(crate) table: Mutex<InstanceTable>,
    pub(crate) events: broadcast::Sender<CloudEvent>,
    pub(crate) stopped: watch::Receiver<bool>,
}

impl CloudState {
    /// Locks the instance table after forgetting instances terminated longer ago than the
    /// retention period.
    pub(crate) fn table(&self) -> MutexGuard<'_, InstanceTable> {
        let mut table = self
            .table
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let now = self.clock.now();
        let retention = self.retention;
        table
            .entries
            .retain(|_, e| e.terminated_at.is_none_or(|at| at + retention > now));
        table
    }

    /// Every remembered instance, by ID.
    pub(crate) fn instances(&self) -> Vec<SimInstance> {
        self.table()
            .entries
            .values()
            .map(|e| e.instance.clone())
            .collect()
    }

    /// One remembered instance.
    pub(crate) fn instance(&self, id: &str) -> Option<SimInstance> {
        self.table().entries.get(id).map(|e| e.instance.clone())
    }

    fn publish(&self, event: CloudEvent) {
        // No subscriber is fine: nobody is watching the cloud.
        let _ = self.events.send(event);
    }
}

type HttpResponse = Response<Full<Bytes>>;

/// A JSON answer, written straight from `value` (a `Value` or any serializable struct).
fn json_response(status: u16, value: &impl serde::Serialize) -> HttpResponse {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(
            serde_json::to_vec(value).unwrap_or_default(),
        )))
        .expect("static response parts are valid")
}

/// An error answer: status, `reason`, `message` and extra fields.
struct Failure {
    status: u16,
    body: Value,
    retry_after: Option<u64>,
}

impl Failure {
    fn new(status: u16, reason: &str, message: impl Into<String>) -> Self {
        Failure {
            status,
            body: json!({"reason": reason, "message": message.into()}),
            retry_after: None,
        }
    }

    fn invalid(field: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        let mut failure = Failure::new(400, "InvalidRequest", format!("{field}: {message}"));
        failure.body["field"] = Value::String(field.to_string());
        failure
    }

    fn into_response(self) -> HttpResponse {
        let mut response = json_response(self.status, &self.body);
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(seconds));
        }
        response
    }
}

impl InjectedAnswer<CloudVerb> for Failure {
    fn throttled(retry_after_seconds: u64) -> Self {
        let mut failure = Failure::new(429, "Throttled", "request rate exceeded (injected fault)");
        failure.retry_after = Some(retry_after_seconds);
        failure
    }

    fn failed(verb: CloudVerb) -> Self {
        Failure::new(
            500,
            "InternalError",
            format!("{verb:?} failed (injected fault)"),
        )
    }
}

/// Accepts connections until `stopped` turns true.
pub(crate) async fn serve(
    listener: crate::network::Listener,
    state: Arc<CloudState>,
    stopped: watch::Receiver<bool>,
) {
    crate::http_server::serve(listener, stopped, "simulated cloud", move |request| {
        let state = state.clone();
        async move { handle(&state, request).await }
    })
    .await;
}

/// The routes: which verb a request is, and the instance ID it names.
enum Route {
    Zones,
    InstanceTypes,
    Create,
    List,
    Get(String),
    Delete(String),
    Reboot(String),
}

impl Route {
    fn verb(&self) -> CloudVerb {
        match self {
            Route::Zones => CloudVerb::Zones,
            Route::InstanceTypes => CloudVerb::InstanceTypes,
            Route::Create => CloudVerb::Create,
            Route::List => CloudVerb::List,
            Route::Get(_) => CloudVerb::Get,
            Route::Delete(_) => CloudVerb::Delete,
            Route::Reboot(_) => CloudVerb::Reboot,
        }
    }
}

fn route(method: &Method, path: &str) -> Result<Route, Failure> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let not_allowed = || {
        Failure::new(
            405,
            "MethodNotAllowed",
            format!("{method} is not supported on {path}"),
        )
    };
    match (segments.as_slice(), method) {
        (["v1", "zones"], &Method::GET) => Ok(Route::Zones),
        (["v1", "instance-types"], &Method::GET) => Ok(Route::InstanceTypes),
        (["v1", "instances"], &Method::GET) => Ok(Route::List),
        (["v1", "instances"], &Method::POST) => Ok(Route::Create),
        (["v1", "instances", id], &Method::GET) => Ok(Route::Get(id.to_string())),
        (["v1", "instances", id], &Method::DELETE) => Ok(Route::Delete(id.to_string())),
        (["v1", "instances", id, "reboot"], &Method::POST) => Ok(Route::Reboot(id.to_string())),
        (
            ["v1", "zones"]
            | ["v1", "instance-types"]
            | ["v1", "instances"]
            | ["v1", "instances", _]
            | ["v1", "instances", _, "reboot"],
            _,
        ) => Err(not_allowed()),
        _ => Err(Failure::new(
            404,
            "NotFound",
            format!("no such path {path}"),
        )),
    }
}

async fn handle(state: &Arc<CloudState>, request: Request<Incoming>) -> HttpResponse {
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let query = request.uri().query().unwrap_or_default().to_string();
    let body = match request.into_body().collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            return Failure::new(
                400,
                "InvalidRequest",
                format!("could not read the body: {error}"),
            )
            .into_response();
        }
    };
    let response = match answer(state, &method, &path, &query, &body).await {
        Ok(response) => response,
        Err(failure) => failure.into_response(),
    };
    tracing::debug!(%method, %path, status = response.status().as_u16(), "simulated cloud call");
    response
}

async fn answer(
    state: &Arc<CloudState>,
    method: &Method,
    path: &str,
    query: &str,
    body: &Bytes,
) -> Result<HttpResponse, Failure> {
    let route = route(method, path)?;
    let verb = route.verb();
    if let Some(failure) = state.faults.inject::<Failure>(verb, &state.clock).await {
        return Err(failure);
    }
    match route {
        Route::Zones => Ok(json_response(200, &json!({"zones": state.zones}))),
        Route::InstanceTypes => Ok(json_response(
            200,
            &json!({"zones": state.zones, "instanceTypes": state.types}),
        )),
        Route::Create => {
            let answer = create(state, body);
            let mut stopped = state.stopped.clone();
            tokio::select! {
                biased;
                _ = state.faults.wait_create_release() => {}
                _ = stopped.wait_for(|stop| *stop) => {}
            }
            answer
        }
        Route::List => list(state, query),
        Route::Get(id) => match state.instance(&id) {
            Some(instance) => Ok(json_response(200, &to_json(&instance))),
            None => Err(Failure::new(
                404,
                "NotFound",
                format!("instance {id} not found"),
            )),
        },
        Route::Delete(id) => delete(state, &id),
        Route::Reboot(id) => reboot(state, &id),
    }
}

fn to_json(instance: &SimInstance) -> Value {
    serde_json::to_value(instance).unwrap_or(Value::Null)
}

/// A launch option from the request body.
struct Candidate {
    instance_type: String,
    zone: String,
    capacity_type: String,
}

impl Candidate {
    fn to_json(&self) -> Value {
        json!({"instanceType": self.instance_type, "zone": self.zone, "capacityType": self.capacity_type})
    }
}

/// A validated create request.
struct CreateRequest {
    candidates: Vec<Candidate>,
    user_data: String,
    tags: BTreeMap<String, String>,
}

fn parse_create(state: &CloudState, body: &Bytes) -> Result<CreateRequest, Failure> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| Failure::invalid("body", format!("not valid JSON: {e}")))?;
    let Value::Object(object) = value else {
        return Err(Failure::invalid("body", "must be a JSON object"));
    };
    let candidates = match object.get("candidates") {
        Some(Value::Array(list)) if !list.is_empty() => list,
        Some(Value::Array(_)) => {
            return Err(Failure::invalid(
                "candidates",
                "must list at least one candidate",
            ));
        }
        Some(_) => return Err(Failure::invalid("candidates", "must be an array")),
        None => return Err(Failure::invalid("candidates", "is required")),
    };
    let mut parsed = Vec::with_capacity(candidates.len());
    for (index, candidate) in candidates.iter().enumerate() {
        let text = |key: &str| -> Result<String, Failure> {
            match candidate.get(key) {
                Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
                _ => Err(Failure::invalid(
                    &format!("candidates[{index}].{key}"),
                    "must be a non-empty string",
                )),
            }
        };
        let candidate = Candidate {
            instance_type: text("instanceType")?,
            zone: text("zone")?,
            capacity_type: text("capacityType")?,
        };
        if !state.by_name.contains_key(&candidate.instance_type) {
            return Err(Failure::invalid(
                &format!("candidates[{index}].instanceType"),
                format!("unknown instance type {:?}", candidate.instance_type),
            ));
        }
        if !state.zones.contains(&candidate.zone) {
            return Err(Failure::invalid(
                &format!("candidates[{index}].zone"),
                format!("unknown zone {:?}", candidate.zone),
            ));
        }
        if !CAPACITY_TYPES.contains(&candidate.capacity_type.as_str()) {
            return Err(Failure::invalid(
                &format!("candidates[{index}].capacityType"),
                format!(
                    "{:?} is not one of {CAPACITY_TYPES:?}",
                    candidate.capacity_type
                ),
            ));
        }
        parsed.push(candidate);
    }
    let user_data = match object.get("userData") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(Failure::invalid("userData", "must be a string")),
    };
    let tags = match object.get("tags") {
        None | Some(Value::Null) => BTreeMap::new(),
        Some(Value::Object(map)) => string_map(map)?,
        Some(_) => return Err(Failure::invalid("tags", "must be an object of strings")),
    };
    Ok(CreateRequest {
        candidates: parsed,
        user_data,
        tags,
    })
}

fn string_map(map: &Map<String, Value>) -> Result<BTreeMap<String, String>, Failure> {
    map.iter()
        .map(|(k, v)| match v {
            Value::String(s) => Ok((k.clone(), s.clone())),
            _ => Err(Failure::invalid(&format!("tags.{k}"), "must be a string")),
        })
        .collect()
}

fn create(state: &Arc<CloudState>, body: &Bytes) -> Result<HttpResponse, Failure> {
    let request = parse_create(state, body)?;
    let instance = {
        let mut table = state.table();
        if let Some(quota) = state.faults.quota()
            && table.live_count() >= quota
        {
            return Err(Failure::new(
                403,
                "QuotaExceeded",
                format!("the quota of {quota} live instances is reached"),
            ));
        }
        let launchable = request.candidates.iter().find_map(|c| {
            let info = &state.types[state.by_name[&c.instance_type]];
            let offering = info.offering(&c.zone, &c.capacity_type)?;
            let refused = !offering.available
                || state
                    .faults
                    .lacks_capacity(&c.instance_type, &c.zone, &c.capacity_type);
            (!refused).then_some((c, info, offering.price))
        });
        let Some((candidate, info, price)) = launchable else {
            let mut failure = Failure::new(
                409,
                "InsufficientCapacity",
                format!(
                    "none of the {} candidate offerings has capacity",
                    request.candidates.len()
                ),
            );
            failure.body["offerings"] =
                Value::Array(request.candidates.iter().map(Candidate::to_json).collect());
            return Err(failure);
        };
        let launch = Launch {
            zone: candidate.zone.clone(),
            capacity_type: candidate.capacity_type.clone(),
            user_data: request.user_data,
            tags: request.tags,
            price,
            state: InstanceState::Pending,
        };
        table.record(info, launch, state.clock.now())
    };
    tracing::info!(id = %instance.id, instance_type = %instance.instance_type, zone = %instance.zone,
        capacity_type = %instance.capacity_type, "simulated cloud launched an instance");
    state.publish(CloudEvent::Launched(instance.clone()));
    schedule_boot(state, instance.id.clone());
    if state.faults.take_fail_after_create() {
        return Err(Failure::new(
            500,
            "InternalError",
            "the response was lost after the instance was created (injected fault)",
        ));
    }
    Ok(json_response(201, &to_json(&instance)))
}

/// Takes in a machine that was running before the cloud started (a Karpenter node of a
/// cluster snapshot), as a `running` instance of an offering of the catalog: a new ID, the
/// type's capacity, allocatable, labels and the offering's price, no userData. Nothing is
/// announced: whoever adopts it starts its kubelet. The error says what the catalog lacks.
pub(crate) fn adopt(state: &CloudState, machine: &Adoption) -> Result<SimInstance, String> {
    let Some(&index) = state.by_name.get(&machine.instance_type) else {
        let mut known: Vec<&str> = state.types.iter().map(|t| t.name.as_str()).collect();
        known.sort_unstable();
        return Err(format!(
            "instance type {:?} is not in the simulated cloud's catalog (it has {}); add it under cloud.catalog.instanceTypes",
            machine.instance_type,
            abbreviated(&known)
        ));
    };
    let info = &state.types[index];
    let Some(offering) = info.offering(&machine.zone, &machine.capacity_type) else {
        let offered: Vec<String> = info
            .offerings
            .iter()
            .map(|o| format!("{}/{}", o.zone, o.capacity_type))
            .collect();
        return Err(format!(
            "the catalog offers {} in no zone {:?} as {:?} (its offerings: {}); add the zone under cloud.catalog.zones",
            machine.instance_type,
            machine.zone,
            machine.capacity_type,
            offered.join(", ")
        ));
    };
    let launch = Launch {
        zone: machine.zone.clone(),
        capacity_type: machine.capacity_type.clone(),
        user_data: String::new(),
        tags: machine.tags.clone(),
        price: offering.price,
        state: InstanceState::Running,
    };
    let instance = state.table().record(info, launch, state.clock.now());
    tracing::info!(id = %instance.id, instance_type = %instance.instance_type, zone = %instance.zone,
        "simulated cloud adopted a running machine");
    Ok(instance)
}

/// The first few names, then how many more.
fn abbreviated(names: &[&str]) -> String {
    const SHOWN: usize = 8;
    let mut text = names
        .iter()
        .take(SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        text.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    text
}

/// Flips the instance to `running` once the boot delay has passed (unless deleted first).
fn schedule_boot(state: &Arc<CloudState>, id: String) {
    let delay = state.clock.to_real(state.boot_delay);
    let mut stopped = state.stopped.clone();
    let weak = Arc::downgrade(state);
    tokio::spawn(async move {
        tokio::select! {
            biased;
            _ = tokio::time::sleep(delay) => {}
            _ = stopped.wait_for(|stop| *stop) => return,
        }
        let Some(state) = weak.upgrade() else { return };
        let mut table = state.table();
        if let Some(entry) = table.entries.get_mut(&id)
            && entry.instance.state == InstanceState::Pending
        {
            entry.instance.state = InstanceState::Running;
            tracing::debug!(%id, "simulated instance is running");
        }
    });
}

fn list(state: &CloudState, query: &str) -> Result<HttpResponse, Failure> {
    let mut filters = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if crate::http_server::percent_decode(key) != "tag" {
            continue;
        }
        let value = crate::http_server::percent_decode(value);
        match value.split_once('=') {
            Some((k, v)) if !k.is_empty() => filters.push((k.to_string(), v.to_string())),
            _ => {
                return Err(Failure::invalid(
                    "tag",
                    format!("{value:?}: expected KEY=VALUE"),
                ));
            }
        }
    }
    /// The list's body, written straight from the table (no intermediate JSON values: the
    /// host's garbage collector lists every instance every two simulated minutes).
    #[derive(serde::Serialize)]
    struct List<'a> {
        instances: Vec<&'a SimInstance>,
    }
    let table = state.table();
    let instances = table
        .entries
        .values()
        .filter(|e| {
            filters
                .iter()
                .all(|(k, v)| e.instance.tags.get(k) == Some(v))
                && !state.faults.is_unlisted(&e.instance.id)
        })
        .map(|e| &e.instance)
        .collect();
    Ok(json_response(200, &List { instances }))
}

/// Reboots a running instance: the machine restarts in place (same ID, same Node); the
/// physics restarts its kubelet unless the machine has a hardware fault.
fn reboot(state: &CloudState, id: &str) -> Result<HttpResponse, Failure> {
    let instance = state
        .instance(id)
        .ok_or_else(|| Failure::new(404, "NotFound", format!("instance {id} not found")))?;
    if instance.state == InstanceState::Terminated {
        return Err(Failure::new(
            409,
            "InvalidState",
            format!("instance {id} is terminated; it cannot be rebooted"),
        ));
    }
    tracing::info!(%id, "simulated cloud rebooted an instance");
    state.publish(CloudEvent::Rebooted(instance.clone()));
    Ok(json_response(200, &to_json(&instance)))
}

fn delete(state: &CloudState, id: &str) -> Result<HttpResponse, Failure> {
    let now = state.clock.now();
    let (previous, instance) = {
        let mut table = state.table();
        let existed = table.ever_existed(id);
        match table.entries.get_mut(id) {
            Some(entry) => {
                let previous = entry.instance.state;
                if entry.terminated_at.is_none() {
                    entry.terminated_at = Some(now);
                    entry.instance.state = InstanceState::Terminated;
                }
                (previous, entry.instance.clone())
            }
            None if existed => {
                let body = json!({"id": id, "state": "terminated", "previousState": "terminated"});
                return Ok(json_response(200, &body));
            }
            None => {
                return Err(Failure::new(
                    404,
                    "NotFound",
                    format!("instance {id} not found"),
                ));
            }
        }
    };
    if previous != InstanceState::Terminated {
        tracing::info!(%id, "simulated cloud terminated an instance");
        state.publish(CloudEvent::Terminated {
            instance: instance.clone(),
            at: now,
        });
    }
    let mut body = to_json(&instance);
    body["previousState"] = serde_json::to_value(previous).unwrap_or(Value::Null);
    Ok(json_response(200, &body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_handed_out_ids_existed() {
        let table = InstanceTable {
            entries: BTreeMap::new(),
            issued: 3,
        };
        assert!(table.ever_existed("i-00000003"));
        assert!(!table.ever_existed("i-00000004"));
        assert!(!table.ever_existed("i-3"));
        assert!(!table.ever_existed("i-00000000"));
    }
}
