//! The HTTP front end: routing, discovery documents and verbs; watch streams are in the
//! `watches` module.
//!
//! It stays one file (a little over 1,000 lines without its tests) because the verbs of
//! `resource_request` and `patch` share one parsed request, one error path and the response
//! helpers above them; splitting them would spread that shared part over files.

use std::collections::{BTreeSet, HashMap};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::apiserver::resources::{CRD_GROUP, CRD_PLURAL, ResourceKind, api_group, resource_list};
use crate::apiserver::selectors::{FieldSelector, LabelSelector};
use crate::apiserver::store::{
    EventType, ListOptions, NODE_FIELD, ObjectList, Store, StoredEvent, StoredObject, Topic,
    WriteTarget, type_prefix,
};
use crate::apiserver::table::{Printer, TableRequest};
use crate::error::ApiError;
use crate::faults::{Faults, InjectedAnswer, rule_setters};
use crate::http_server::percent_decode;

mod watches;

use watches::start_watch;

/// State shared by every connection.
pub(crate) struct ServerState {
    pub(crate) store: Store,
    pub(crate) bookmark_interval: Duration,
    /// Bumped to end every open watch stream.
    pub(crate) watch_epoch: watch::Sender<u64>,
    /// While `true`, new watch streams wait before reading history.
    pub(crate) watches_paused: watch::Sender<bool>,
    /// How many watches were answered with `410 Gone`.
    pub(crate) expired_watches: AtomicU64,
    /// Injected failures, latency and throttling (test hooks).
    pub(crate) faults: ApiFaults,
}

/// A response body: either complete or a stream of chunks (watches).
pub(crate) enum ResponseBody {
    Complete(Option<Bytes>),
    Streaming(mpsc::Receiver<Bytes>),
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.get_mut() {
            ResponseBody::Complete(data) => Poll::Ready(data.take().map(|d| Ok(Frame::data(d)))),
            ResponseBody::Streaming(chunks) => chunks
                .poll_recv(cx)
                .map(|chunk| chunk.map(|d| Ok(Frame::data(d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, ResponseBody::Complete(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ResponseBody::Complete(Some(data)) => SizeHint::with_exact(data.len() as u64),
            ResponseBody::Complete(None) => SizeHint::with_exact(0),
            ResponseBody::Streaming(_) => SizeHint::default(),
        }
    }
}

type HttpResponse = Response<ResponseBody>;

fn json_response(code: u16, value: &Value) -> HttpResponse {
    bytes_response(code, serde_json::to_vec(value).unwrap_or_default())
}

/// A response with a JSON body already written.
fn bytes_response(code: u16, body: Vec<u8>) -> HttpResponse {
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header(header::CONTENT_TYPE, "application/json")
        .body(ResponseBody::Complete(Some(Bytes::from(body))))
        .expect("static response parts are valid")
}

/// Accepts connections until `shutdown` turns true.
pub(crate) async fn serve(
    listener: crate::network::Listener,
    shared: Arc<ServerState>,
    shutdown: watch::Receiver<bool>,
) {
    crate::http_server::serve(listener, shutdown, "API server", move |request| {
        handle(shared.clone(), request)
    })
    .await;
}

fn parse_query(query: Option<&str>) -> HashMap<String, String> {
    query
        .unwrap_or_default()
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(key), percent_decode(value))
        })
        .collect()
}

/// Everything a handler needs from the request.
struct Call<'a> {
    method: &'a Method,
    query: &'a HashMap<String, String>,
    content_type: &'a str,
    /// The `Accept` header (empty when absent).
    accept: &'a str,
    body: &'a Bytes,
}

impl Call<'_> {
    fn flag(&self, name: &str) -> bool {
        matches!(
            self.query.get(name).map(String::as_str),
            Some("true") | Some("1")
        )
    }

    /// The Table the client asked for with its `Accept` header, if any.
    fn table_request(&self) -> Option<TableRequest> {
        TableRequest::from_request(
            self.accept,
            self.query.get("includeObject").map(String::as_str),
        )
    }

    /// The `fieldValidation` directive (`Strict`, `Warn`; anything else ignores unknown fields).
    fn field_validation(&self) -> &str {
        self.query
            .get("fieldValidation")
            .map(String::as_str)
            .unwrap_or("Ignore")
    }

    fn body_json(&self) -> Result<Value, ApiError> {
        if self.body.is_empty() {
            return Ok(Value::Null);
        }
        if self.content_type == crate::apiserver::protobuf::MEDIA_TYPE {
            return crate::apiserver::protobuf::decode(self.body);
        }
        if self.content_type.contains("protobuf") || self.content_type.contains("cbor") {
            // Clients such as kubectl fall back to JSON on 415.
            return Err(ApiError::unsupported_media_type(self.content_type));
        }
        serde_json::from_slice(self.body)
            .map_err(|error| ApiError::bad_request(format!("invalid JSON body: {error}")))
    }

    fn list_options(&self) -> Result<ListOptions, ApiError> {
        let text = |name: &str| self.query.get(name).filter(|v| !v.is_empty()).cloned();
        let labels = LabelSelector::parse(&text("labelSelector").unwrap_or_default())
            .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        let fields = FieldSelector::parse(&text("fieldSelector").unwrap_or_default())
            .map_err(|e| ApiError::bad_request(format!("invalid field selector: {e}")))?;
        let limit = match text("limit") {
            Some(limit) => Some(
                limit
                    .parse()
                    .map_err(|_| ApiError::bad_request(format!("invalid limit {limit:?}")))?,
            ),
            None => None,
        };
        Ok(ListOptions {
            labels,
            fields,
            limit,
            continue_token: text("continue"),
            resource_version: text("resourceVersion"),
            resource_version_match: text("resourceVersionMatch"),
        })
    }
}

async fn handle(shared: Arc<ServerState>, request: Request<Incoming>) -> HttpResponse {
    if let Some(agent) = request.headers().get(header::USER_AGENT) {
        // A hung client's request is read no further and never answered (until released).
        shared
            .faults
            .wait_while_hung(agent.to_str().unwrap_or_default())
            .await;
    }
    let method = request.method().clone();
    let uri = request.uri().clone();
    let path = uri.path().to_string();
    let query = parse_query(uri.query());
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.split(';').next().unwrap_or_default().trim().to_string())
        .unwrap_or_default();
    let accept = request
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = match read_body(request.into_body()).await {
        Ok(body) => body,
        Err(error) => return json_response(error.code, &error.to_status()),
    };
    let call = Call {
        method: &method,
        query: &query,
        content_type: &content_type,
        accept: &accept,
        body: &body,
    };
    // Writes validate the object (CEL rules included) synchronously. On a multi-threaded
    // runtime (`joinery sim serve`, `joinery simulate`) the worker that validates hands its
    // other tasks to the rest (`block_in_place`), so an expensive write does not hold up the
    // requests they serve (`/version`, reads, watches); the cost limit bounds the wait. A
    // single-threaded runtime (the emulator's own tests) has no other worker: it validates
    // in place.
    let validate_aside = matches!(method, Method::POST | Method::PUT | Method::PATCH)
        && tokio::runtime::Handle::current().runtime_flavor()
            == tokio::runtime::RuntimeFlavor::MultiThread;
    let routed = if validate_aside {
        tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(route(&shared, &path, &call))
        })
    } else {
        route(&shared, &path, &call).await
    };
    let response = match routed {
        Ok(response) => response,
        Err(error) => json_response(error.code, &error.to_status()),
    };
    tracing::debug!(%method, %path, query = uri.query().unwrap_or_default(), status = response.status().as_u16(), "request served");
    response
}

/// The largest request body the server reads: a real API server's limit for writes (3 MiB).
pub(crate) const MAX_REQUEST_BODY_BYTES: usize = 3 << 20;

/// How much of an oversized body is read (and dropped) before answering 413, so that a client
/// still sending it reads the answer rather than a reset connection.
const MAX_DRAINED_BYTES: usize = 64 << 20;

/// Reads a request body of at most [`MAX_REQUEST_BODY_BYTES`]; a bigger one is
/// `413 RequestEntityTooLarge`, and nothing past the limit is kept.
async fn read_body(mut incoming: Incoming) -> Result<Bytes, ApiError> {
    let declared = incoming.size_hint().exact();
    let mut body = bytes::BytesMut::new();
    let mut received = 0usize;
    let mut too_large = declared.is_some_and(|length| length > MAX_REQUEST_BODY_BYTES as u64);
    while let Some(frame) = incoming.frame().await {
        let frame = frame
            .map_err(|error| ApiError::bad_request(format!("could not read body: {error}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        received = received.saturating_add(data.len());
        too_large |= received > MAX_REQUEST_BODY_BYTES;
        if too_large {
            body = bytes::BytesMut::new();
            if received > MAX_DRAINED_BYTES {
                break;
            }
        } else {
            body.extend_from_slice(&data);
        }
    }
    if too_large {
        return Err(ApiError::request_entity_too_large(MAX_REQUEST_BODY_BYTES));
    }
    Ok(body.freeze())
}

/// Refuses a create or update body whose `apiVersion` or `kind`, when present, is not the
/// endpoint's, with the API server's 400 BadRequest.
fn check_body_type(kind: &ResourceKind, body: &Value) -> Result<(), ApiError> {
    let expected_version = kind.api_version();
    if let Some(version) = body.get("apiVersion").filter(|v| !v.is_null())
        && version.as_str() != Some(expected_version.as_str())
    {
        let version = version
            .as_str()
            .map_or_else(|| version.to_string(), str::to_string);
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({version}) does not match the expected API version ({expected_version})"
        )));
    }
    if let Some(body_kind) = body.get("kind").filter(|k| !k.is_null())
        && body_kind.as_str() != Some(kind.kind.as_str())
    {
        let body_kind = body_kind
            .as_str()
            .map_or_else(|| body_kind.to_string(), str::to_string);
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({body_kind}) does not match the expected kind ({})",
            kind.kind
        )));
    }
    Ok(())
}

async fn route(
    shared: &Arc<ServerState>,
    path: &str,
    call: &Call<'_>,
) -> Result<HttpResponse, ApiError> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let store = &shared.store;
    match segments.as_slice() {
        ["version"] => Ok(json_response(200, &version_info())),
        ["healthz"] | ["livez"] | ["readyz"] => Ok(Response::builder()
            .status(200)
            .header(header::CONTENT_TYPE, "text/plain")
            .body(ResponseBody::Complete(Some(Bytes::from_static(b"ok"))))
            .expect("static response parts are valid")),
        ["api"] => Ok(json_response(
            200,
            &json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]}),
        )),
        ["api", "v1"] => Ok(json_response(
            200,
            &resource_list("v1", &store.kinds_at("", "v1")),
        )),
        ["apis"] => {
            let groups: Vec<Value> = store
                .groups()
                .iter()
                .map(|(group, versions)| api_group(group, versions))
                .collect();
            Ok(json_response(
                200,
                &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}),
            ))
        }
        ["apis", group] => {
            let groups = store.groups();
            let (name, versions) = groups
                .iter()
                .find(|(g, _)| g == group)
                .ok_or_else(ApiError::no_such_resource)?;
            Ok(json_response(200, &api_group(name, versions)))
        }
        ["apis", group, version] => {
            let kinds = store.kinds_at(group, version);
            if kinds.is_empty() {
                return Err(ApiError::no_such_resource());
            }
            Ok(json_response(
                200,
                &resource_list(&format!("{group}/{version}"), &kinds),
            ))
        }
        ["openapi", "v3"] => Ok(json_response(
            200,
            &crate::apiserver::openapi::index(&openapi_documents(store)),
        )),
        ["openapi", "v3", "api", version] => openapi_document(store, "", version),
        ["openapi", "v3", "apis", group, version] => openapi_document(store, group, version),
        ["api", "v1", rest @ ..] => resource_request(shared, "", "v1", rest, call).await,
        ["apis", group, version, rest @ ..] => {
            resource_request(shared, group, version, rest, call).await
        }
        _ => Err(ApiError::no_such_resource()),
    }
}

/// The OpenAPI v3 document of every served group/version, keyed by its index path.
fn openapi_documents(store: &Store) -> std::collections::BTreeMap<String, Value> {
    let mut group_versions = vec![(String::new(), "v1".to_string())];
    for (group, versions) in store.groups() {
        group_versions.extend(versions.into_iter().map(|version| (group.clone(), version)));
    }
    group_versions
        .into_iter()
        .map(|(group, version)| {
            let kinds = store.kinds_at(&group, &version);
            let document = crate::apiserver::openapi::group_version_document(&kinds);
            (
                crate::apiserver::openapi::group_version_path(&group, &version),
                document,
            )
        })
        .collect()
}

fn openapi_document(store: &Store, group: &str, version: &str) -> Result<HttpResponse, ApiError> {
    let kinds = store.kinds_at(group, version);
    if kinds.is_empty() {
        return Err(ApiError::no_such_resource());
    }
    Ok(json_response(
        200,
        &crate::apiserver::openapi::group_version_document(&kinds),
    ))
}

/// The Table printer of a type (custom resources read their CRD's printer columns).
fn printer_for(store: &Store, kind: &ResourceKind) -> Printer {
    let crd = kind.crd_name.as_deref().and_then(|name| {
        let crds = store.lookup(CRD_GROUP, "v1", CRD_PLURAL)?;
        store.get(&crds, None, name).ok()
    });
    Printer::for_kind(kind, crd.as_ref())
}

/// A list as the client wants it: as is (the stored texts concatenated, see
/// [`ObjectList::to_json`]), or as a Table (only then are the items parsed).
fn list_or_table(
    store: &Store,
    kind: &ResourceKind,
    call: &Call<'_>,
    list: ObjectList,
) -> HttpResponse {
    match call.table_request() {
        Some(request) => {
            let items: Vec<Value> = list.items.iter().map(|item| item.to_value(kind)).collect();
            let table = printer_for(store, kind).table(
                request,
                &items,
                list.metadata(),
                store.clock().now(),
            );
            json_response(200, &table)
        }
        None => bytes_response(200, list.to_json(kind)),
    }
}

/// A single object as the client wants it: as is (its stored text), or as a Table.
fn object_or_table(
    store: &Store,
    kind: &ResourceKind,
    call: &Call<'_>,
    object: &StoredObject,
) -> HttpResponse {
    match call.table_request() {
        Some(request) => {
            let object = object.to_value(kind);
            let metadata = json!({"resourceVersion": object.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null)});
            let table = printer_for(store, kind).table(
                request,
                std::slice::from_ref(&object),
                metadata,
                store.clock().now(),
            );
            json_response(200, &table)
        }
        None => bytes_response(200, object.json_for(kind)),
    }
}

/// Field validation of a custom resource body: with `fieldValidation=Strict`, fields its schema
/// does not declare are a 400 (as on the real server); with `Warn` they come back as warnings.
fn validate_fields(
    kind: &ResourceKind,
    object: &Value,
    call: &Call<'_>,
) -> Result<Vec<String>, ApiError> {
    let Some(schema) = kind.schema.as_ref() else {
        return Ok(Vec::new());
    };
    let directive = call.field_validation();
    if directive != "Strict" && directive != "Warn" {
        return Ok(Vec::new());
    }
    let unknown = crate::apiserver::schema::unknown_fields(schema, object);
    if unknown.is_empty() {
        return Ok(Vec::new());
    }
    let described: Vec<String> = unknown
        .iter()
        .map(|field| format!("unknown field \"{field}\""))
        .collect();
    if directive == "Strict" {
        return Err(ApiError::bad_request(format!(
            "{kind_name} in version \"{version}\" cannot be handled as a {kind_name}: strict decoding error: {}",
            described.join(", "),
            kind_name = kind.kind,
            version = kind.version,
        )));
    }
    Ok(described)
}

/// Adds `Warning` headers (code 299, as the real server sends them) to a response.
fn with_warnings(mut response: HttpResponse, warnings: &[String]) -> HttpResponse {
    for warning in warnings {
        let text = format!("299 - {:?}", warning);
        if let Ok(value) = header::HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

fn version_info() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-joinery-sim",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.24.0",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

async fn resource_request(
    shared: &Arc<ServerState>,
    group: &str,
    version: &str,
    rest: &[&str],
    call: &Call<'_>,
) -> Result<HttpResponse, ApiError> {
    let store = &shared.store;
    let (namespace, plural, tail) = match rest {
        ["namespaces", namespace, plural, tail @ ..]
            if store
                .lookup(group, version, plural)
                .is_some_and(|k| k.namespaced) =>
        {
            (Some(*namespace), *plural, tail)
        }
        [plural, tail @ ..] => (None, *plural, tail),
        [] => return Err(ApiError::no_such_resource()),
    };
    if tail.len() > 2 {
        return Err(ApiError::no_such_resource());
    }
    let kind = store
        .lookup(group, version, plural)
        .ok_or_else(ApiError::no_such_resource)?;
    let name = tail.first().copied();
    let subresource = tail.get(1).copied();
    if (!kind.namespaced && namespace.is_some())
        || (kind.namespaced && namespace.is_none() && name.is_some())
    {
        return Err(ApiError::no_such_resource());
    }
    let method = call.method;
    if *method != Method::GET && call.query.get("dryRun").is_some_and(|d| !d.is_empty()) {
        // Refused rather than ignored: ignoring it would make a dry run (`kubectl diff`,
        // `--dry-run=server`) really change the object.
        return Err(ApiError::bad_request(
            "dryRun is not supported by the emulated API server",
        ));
    }
    if let Some(verb) = ApiVerb::of(method, name.is_some(), call.flag("watch"))
        && let Some(injected) = shared.faults.inject(verb, shared.store.clock()).await
    {
        return Ok(injected);
    }
    match (name, subresource) {
        (None, None) => match *method {
            Method::GET if call.flag("watch") => start_watch(shared, kind, namespace, None, call),
            Method::GET => Ok(list_or_table(
                store,
                &kind,
                call,
                store.list(&kind, namespace, &call.list_options()?)?,
            )),
            Method::POST => {
                let body = call.body_json()?;
                check_body_type(&kind, &body)?;
                let warnings = validate_fields(&kind, &body, call)?;
                Ok(with_warnings(
                    json_response(201, &store.create(&kind, namespace, body)?),
                    &warnings,
                ))
            }
            Method::DELETE => {
                let delete_options = call.body_json()?;
                Ok(json_response(
                    200,
                    &store.delete_collection(
                        &kind,
                        namespace,
                        &call.list_options()?,
                        &delete_options,
                    )?,
                ))
            }
            _ => Err(ApiError::method_not_allowed(format!(
                "{method} is not supported on a collection"
            ))),
        },
        (Some(name), None) => match *method {
            Method::GET if call.flag("watch") => {
                start_watch(shared, kind, namespace, Some(name.to_string()), call)
            }
            Method::GET => Ok(object_or_table(
                store,
                &kind,
                call,
                &*store.get_stored(&kind, namespace, name)?,
            )),
            Method::PUT => {
                let body = call.body_json()?;
                check_body_type(&kind, &body)?;
                let warnings = validate_fields(&kind, &body, call)?;
                let updated =
                    store.update(&kind, namespace, name, WriteTarget::Main, |_| Ok(body))?;
                Ok(with_warnings(json_response(200, &updated), &warnings))
            }
            Method::PATCH => patch(store, &kind, namespace, name, WriteTarget::Main, call),
            Method::DELETE => {
                let mut options = call.body_json()?;
                // `?gracePeriodSeconds=N` counts when the body does not say.
                if let Some(grace) = call
                    .query
                    .get("gracePeriodSeconds")
                    .and_then(|g| g.parse::<i64>().ok())
                    && options.get("gracePeriodSeconds").is_none()
                {
                    if !options.is_object() {
                        options = json!({});
                    }
                    options["gracePeriodSeconds"] = json!(grace);
                }
                Ok(json_response(
                    200,
                    &store.delete(&kind, namespace, name, &options)?,
                ))
            }
            _ => Err(ApiError::method_not_allowed(format!(
                "{method} is not supported on an object"
            ))),
        },
        (Some(name), Some("status")) if kind.has_status => match *method {
            Method::GET => Ok(bytes_response(
                200,
                store.get_stored(&kind, namespace, name)?.json_for(&kind),
            )),
            Method::PUT => {
                let body = call.body_json()?;
                check_body_type(&kind, &body)?;
                Ok(json_response(
                    200,
                    &store.update(&kind, namespace, name, WriteTarget::Status, |_| Ok(body))?,
                ))
            }
            Method::PATCH => patch(store, &kind, namespace, name, WriteTarget::Status, call),
            _ => Err(ApiError::method_not_allowed(format!(
                "{method} is not supported on the status subresource"
            ))),
        },
        (Some(name), Some("binding")) if kind.group.is_empty() && kind.plural == "pods" => {
            match *method {
                Method::POST => Ok(json_response(
                    201,
                    &store.bind(
                        &kind,
                        namespace.unwrap_or_default(),
                        name,
                        &call.body_json()?,
                    )?,
                )),
                _ => Err(ApiError::method_not_allowed(format!(
                    "{method} is not supported on pods/binding"
                ))),
            }
        }
        (Some(name), Some("scale"))
            if kind.extra_subresources.iter().any(|s| s.name == "scale") =>
        {
            crate::apiserver::scale::handle(
                store,
                &kind,
                namespace,
                name,
                call.method,
                call.content_type,
                call.body,
            )
            .map(|scale| json_response(200, &scale))
        }
        (Some(name), Some("eviction")) if kind.group.is_empty() && kind.plural == "pods" => {
            match *method {
                Method::POST => Ok(json_response(
                    201,
                    &store.evict(
                        &kind,
                        namespace.unwrap_or_default(),
                        name,
                        &call.body_json()?,
                    )?,
                )),
                _ => Err(ApiError::method_not_allowed(format!(
                    "{method} is not supported on pods/eviction"
                ))),
            }
        }
        (Some(_), Some(other)) if kind.extra_subresources.iter().any(|s| s.name == other) => {
            Err(ApiError::method_not_allowed(format!(
                "the {}/{other} subresource is not emulated yet",
                kind.plural
            )))
        }
        _ => Err(ApiError::no_such_resource()),
    }
}

fn patch(
    store: &Store,
    kind: &Arc<ResourceKind>,
    namespace: Option<&str>,
    name: &str,
    target: WriteTarget,
    call: &Call<'_>,
) -> Result<HttpResponse, ApiError> {
    let patch_failed = |error: String| {
        ApiError::invalid(
            &kind.group,
            &kind.kind,
            name,
            &[("patch".to_string(), error)],
        )
    };
    // Unknown-field warnings found while patching (the patched object is only known inside
    // the store's update).
    let warnings = std::cell::RefCell::new(Vec::new());
    let checked = |document: Value| -> Result<Value, ApiError> {
        warnings
            .borrow_mut()
            .extend(validate_fields(kind, &document, call)?);
        Ok(document)
    };
    let response = match call.content_type {
        "application/json-patch+json" => {
            let operations: json_patch::Patch = serde_json::from_slice(call.body)
                .map_err(|e| ApiError::bad_request(format!("invalid JSON patch: {e}")))?;
            let updated = store.update(kind, namespace, name, target, |current| {
                let mut document = current.clone();
                json_patch::patch(&mut document, &operations)
                    .map_err(|e| patch_failed(e.to_string()))?;
                checked(document)
            })?;
            json_response(200, &updated)
        }
        // Built-in types merge lists by their patch strategy; custom resources (which a real
        // server refuses strategic patches for) get a JSON merge.
        "application/strategic-merge-patch+json" if kind.crd_name.is_none() => {
            let changes: Value = serde_json::from_slice(call.body).map_err(|e| {
                ApiError::bad_request(format!("invalid strategic merge patch: {e}"))
            })?;
            let updated = store.update(kind, namespace, name, target, |current| {
                let mut document = current.clone();
                crate::apiserver::strategic::apply(&mut document, &changes)
                    .map_err(patch_failed)?;
                checked(document)
            })?;
            json_response(200, &updated)
        }
        "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
            let changes: Value = serde_json::from_slice(call.body)
                .map_err(|e| ApiError::bad_request(format!("invalid merge patch: {e}")))?;
            let updated = store.update(kind, namespace, name, target, |current| {
                let mut document = current.clone();
                json_patch::merge(&mut document, &changes);
                checked(document)
            })?;
            json_response(200, &updated)
        }
        // Server-side apply is approximated as a merge patch that creates missing objects and
        // records the field manager with the fields its configuration sets; field ownership
        // and conflicts are not tracked.
        "application/apply-patch+yaml" => {
            let manager = call
                .query
                .get("fieldManager")
                .filter(|m| !m.is_empty())
                .cloned()
                .ok_or_else(|| {
                    ApiError::bad_request("PATCH with apply-patch+yaml requires a fieldManager")
                })?;
            let applied: Value = serde_norway::from_slice(call.body)
                .map_err(|e| ApiError::bad_request(format!("invalid apply configuration: {e}")))?;
            if !applied.is_object() {
                return Err(ApiError::bad_request(
                    "the apply configuration must be an object",
                ));
            }
            warnings
                .borrow_mut()
                .extend(validate_fields(kind, &applied, call)?);
            let now = store.now_timestamp();
            let subresource = if target == WriteTarget::Status {
                Some("status")
            } else {
                None
            };
            let record_manager = |object: &mut Value| {
                let mut entry = json!({
                    "manager": manager,
                    "operation": "Apply",
                    "apiVersion": kind.api_version(),
                    "time": now,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": applied_fields(&applied),
                });
                if let Some(subresource) = subresource {
                    entry["subresource"] = json!(subresource);
                }
                let metadata = &mut object["metadata"];
                let mut entries: Vec<Value> = metadata["managedFields"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|e| {
                        e["manager"].as_str() != Some(manager.as_str())
                            || e["operation"].as_str() != Some("Apply")
                            || e.get("subresource").and_then(Value::as_str) != subresource
                    })
                    .collect();
                entries.push(entry);
                metadata["managedFields"] = Value::Array(entries);
            };
            let result = store.update(kind, namespace, name, target, |current| {
                let mut document = current.clone();
                json_patch::merge(&mut document, &applied);
                record_manager(&mut document);
                Ok(document)
            });
            match result {
                Ok(updated) => json_response(200, &updated),
                Err(error) if error.code == 404 && target == WriteTarget::Main => {
                    let mut object = applied.clone();
                    record_manager(&mut object);
                    if object.pointer("/metadata/name").is_none() {
                        object["metadata"]["name"] = Value::String(name.to_string());
                    }
                    json_response(201, &store.create(kind, namespace, object)?)
                }
                Err(error) => return Err(error),
            }
        }
        other => return Err(ApiError::unsupported_media_type(other)),
    };
    Ok(with_warnings(response, &warnings.into_inner()))
}

/// The `fieldsV1` set of an apply configuration: `f:<field>` for every field it sets, lists
/// treated as atomic; the object's identity (`apiVersion`, `kind`, name, namespace) is left out.
fn applied_fields(applied: &Value) -> Value {
    fn fields(value: &Value) -> Value {
        match value {
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(key, child)| (format!("f:{key}"), fields(child)))
                    .collect(),
            ),
            _ => json!({}),
        }
    }
    let mut set = fields(applied);
    if let Some(map) = set.as_object_mut() {
        map.remove("f:apiVersion");
        map.remove("f:kind");
        if let Some(metadata) = map.get_mut("f:metadata").and_then(Value::as_object_mut) {
            for identity in [
                "f:name",
                "f:namespace",
                "f:resourceVersion",
                "f:managedFields",
                "f:uid",
            ] {
                metadata.remove(identity);
            }
            if metadata.is_empty() {
                map.remove("f:metadata");
            }
        }
    }
    set
}

/// The Kubernetes verbs API faults can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ApiVerb {
    /// Read one object (or one of its subresources).
    Get,
    /// List a collection.
    List,
    /// Start a watch.
    Watch,
    /// `POST`, including pod bindings and evictions.
    Create,
    /// `PUT`.
    Update,
    /// `PATCH`.
    Patch,
    /// Delete one object.
    Delete,
    /// Delete a collection.
    DeleteCollection,
}

impl ApiVerb {
    /// The verb of a resource request, if it is one the server serves.
    fn of(method: &Method, named: bool, watch: bool) -> Option<ApiVerb> {
        Some(match *method {
            Method::GET if watch => ApiVerb::Watch,
            Method::GET if named => ApiVerb::Get,
            Method::GET => ApiVerb::List,
            Method::POST => ApiVerb::Create,
            Method::PUT => ApiVerb::Update,
            Method::PATCH => ApiVerb::Patch,
            Method::DELETE if named => ApiVerb::Delete,
            Method::DELETE => ApiVerb::DeleteCollection,
            _ => return None,
        })
    }
}

/// Test hooks that make the emulated API server misbehave like a loaded real one. They apply
/// to resource requests only (discovery, `/version` and health checks are never affected),
/// change at run time, and draw their random numbers from a seeded generator so a test that
/// sends the same requests sees the same failures. Nothing is injected by default. The rules
/// are the shared `faults` core; only the answers (Kubernetes `Status` bodies) are
/// the server's own.
#[derive(Debug)]
pub struct ApiFaults {
    faults: Faults<ApiVerb, ()>,
    /// The `User-Agent`s whose requests are accepted and never answered.
    hung_clients: watch::Sender<BTreeSet<String>>,
}

impl ApiFaults {
    /// No faults; random decisions seeded with `seed`.
    pub fn with_seed(seed: u64) -> Self {
        ApiFaults {
            faults: Faults::with_seed(seed),
            hung_clients: watch::Sender::new(BTreeSet::new()),
        }
    }

    /// Hangs every request, of any path, sent with `User-Agent: user_agent`: the server reads
    /// its head and then answers nothing (the connection stays open), as a stuck API server or
    /// proxy does to one client. Streams already open keep flowing. Until
    /// [`ApiFaults::release_client`] (or [`ApiFaults::clear`]).
    pub fn hang_client(&self, user_agent: &str) {
        self.hung_clients.send_modify(|hung| {
            hung.insert(user_agent.to_string());
        });
    }

    /// Answers `user_agent`'s requests again, the hung ones included.
    pub fn release_client(&self, user_agent: &str) {
        self.hung_clients.send_modify(|hung| {
            hung.remove(user_agent);
        });
    }

    /// Waits while `user_agent`'s requests are hung.
    async fn wait_while_hung(&self, user_agent: &str) {
        if self.hung_clients.borrow().is_empty() {
            return;
        }
        let mut hung = self.hung_clients.subscribe();
        let _ = hung.wait_for(|hung| !hung.contains(user_agent)).await;
    }

    /// Restarts the random sequence from `seed`.
    pub fn reseed(&self, seed: u64) {
        self.faults.reseed(seed);
    }

    /// Removes every fault (the random sequence continues where it was).
    pub fn clear(&self) {
        self.faults.clear();
        self.hung_clients.send_replace(BTreeSet::new());
    }

    /// Waits out the latency, then returns the injected answer, if any, for a request of `verb`.
    async fn inject(
        &self,
        verb: ApiVerb,
        clock: &joinery_core::clock::Clock,
    ) -> Option<HttpResponse> {
        self.faults.delay_and_decide(verb, clock).await
    }
}

rule_setters!(ApiFaults {
    /// Answers a fraction `rate` (0 to 1) of the requests of `verb` with `500 InternalError`.
    set_error_rate => set_error_rate(verb: ApiVerb, rate: f64);
    /// Delays every resource request by `latency` of the server's (simulated) clock.
    set_latency => set_default_latency(latency: Duration);
    /// Answers the next `requests` resource requests with `429 TooManyRequests` and a
    /// `Retry-After` of `retry_after` (whole seconds, rounded up, at least 1).
    throttle_next => throttle_next(requests: u32, retry_after: Duration);
});

impl Default for ApiFaults {
    fn default() -> Self {
        ApiFaults::with_seed(0xA91_5EED)
    }
}

impl InjectedAnswer<ApiVerb> for HttpResponse {
    fn throttled(retry_after_seconds: u64) -> Self {
        let mut error =
            ApiError::too_many_requests("the server is throttling requests (injected fault)", &[]);
        error.details = Some(json!({"retryAfterSeconds": retry_after_seconds}));
        let mut response = json_response(429, &error.to_status());
        response.headers_mut().insert(
            header::RETRY_AFTER,
            header::HeaderValue::from(retry_after_seconds),
        );
        response
    }

    fn failed(verb: ApiVerb) -> Self {
        let error = ApiError::internal(format!("{verb:?} failed (injected fault)"));
        json_response(500, &error.to_status())
    }
}

#[cfg(test)]
mod tests;
