//! A small client for the Exoscale v2 API: per-zone endpoints, a signature on every request,
//! bounded retries of idempotent calls, operations followed to completion, and errors
//! classified the way Karpenter reacts to them.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use joinery_plugin_sdk::cloud::{CloudError, OfferingRef};
use joinery_plugin_sdk::http;
use joinery_plugin_sdk::url::percent_encode;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::sign;

/// The real API's per-zone base URL.
pub const DEFAULT_ENDPOINT: &str = "https://api-{zone}.exoscale.com/v2";
/// How long a signature stays valid.
const SIGNATURE_LIFETIME_S: u64 = 600;
/// Timeout of one HTTP exchange.
const REQUEST_TIMEOUT_MS: u64 = 20_000;
/// Extra attempts of an idempotent call after a transient failure.
const RETRIES: u32 = 2;
/// Consecutive failed polls tolerated while following an operation.
const POLL_ERRORS: u32 = 4;

pub use joinery_plugin_sdk::pause;

/// Why an API call failed, before classification.
#[derive(Clone, Debug, PartialEq)]
pub enum ApiError {
    /// The request did not get an answer (or the host refused it).
    Transport(http::Error),
    /// A non-2xx answer.
    Status {
        /// HTTP status.
        status: u16,
        /// The message from the body, whatever its shape.
        message: String,
        /// `Retry-After` (header, or `retry_after` in the body), in milliseconds.
        retry_after_ms: Option<u64>,
    },
    /// An operation ended in `failure` or `timeout`.
    Operation {
        /// `failure` or `timeout`.
        state: String,
        /// The API's reason (`unavailable`, `fault`, …), possibly empty.
        reason: String,
        /// The API's message.
        message: String,
    },
    /// An operation was still pending when the plugin's time ran out.
    Timeout(String),
    /// An answer that is not the expected JSON.
    Decode(String),
}

impl ApiError {
    /// Whether retrying the same call soon may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            ApiError::Transport(e) => e.is_transient(),
            ApiError::Status { status, .. } => *status == 429 || (*status >= 500 && *status != 501),
            _ => false,
        }
    }

    /// Whether the API said 404.
    pub fn is_not_found(&self) -> bool {
        matches!(self, ApiError::Status { status: 404, .. })
    }

    fn retry_after(&self) -> Option<u64> {
        match self {
            ApiError::Status { retry_after_ms, .. } => *retry_after_ms,
            _ => None,
        }
    }

    /// Classifies the failure for the host; `offering` is what a capacity error refers to.
    pub fn into_cloud(self, offering: Option<OfferingRef>) -> CloudError {
        let capacity = |message: String| {
            CloudError::insufficient_capacity(message, offering.clone().into_iter().collect())
        };
        match self {
            ApiError::Transport(e) => CloudError::from(e),
            ApiError::Status {
                status,
                message,
                retry_after_ms,
            } => {
                let text = format!("Exoscale API: HTTP {status}: {message}");
                match status {
                    404 => CloudError::NotFound(text),
                    429 => CloudError::retryable(text, retry_after_ms),
                    500.. if status != 501 => CloudError::retryable(text, retry_after_ms),
                    401 => CloudError::invalid(format!(
                        "{text} (the API key was not accepted: check api-key and api-secret in the credentials secret)"
                    )),
                    _ if mentions_quota(&message) => CloudError::QuotaExceeded(text),
                    // A full anti-affinity group refuses every type in every zone: no
                    // offerings listed means all offerings of the request.
                    _ if message.to_ascii_lowercase().contains("anti-affinity group") => {
                        CloudError::insufficient_capacity(text, Vec::new())
                    }
                    _ if mentions_capacity(&message) => capacity(text),
                    _ => CloudError::invalid(text),
                }
            }
            ApiError::Operation {
                state,
                reason,
                message,
            } => {
                let text = format!("Exoscale operation {state} ({reason}): {message}");
                match reason.as_str() {
                    _ if state == "timeout" => CloudError::retryable(text, None),
                    "unavailable" => capacity(text),
                    _ if mentions_capacity(&message) => capacity(text),
                    _ if mentions_quota(&message) => CloudError::QuotaExceeded(text),
                    "busy" | "interrupted" | "fault" | "unknown" | "partial" | "" => {
                        CloudError::retryable(text, None)
                    }
                    _ => CloudError::invalid(text),
                }
            }
            ApiError::Timeout(message) => CloudError::retryable(message, None),
            ApiError::Decode(message) => CloudError::internal(message),
        }
    }
}

/// Whether an error message is about an exhausted quota or limit of the organisation.
pub fn mentions_quota(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("quota") || m.contains("limit exceeded") || m.contains("limit reached")
}

/// Whether an error message is about capacity: the zone has none for the type, or an
/// anti-affinity group has no free host left.
pub fn mentions_capacity(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    m.contains("capacity") || m.contains("anti-affinity group")
}

/// The message of an error body: `message`, `error`, RFC 9457 `detail`/`title`/`errors`, or
/// the raw text.
pub fn error_message(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let message = match serde_json::from_str::<Value>(&text) {
        Ok(json) => {
            let field = |k: &str| {
                json.get(k)
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
            };
            let details: Vec<String> = json
                .get("errors")
                .and_then(Value::as_array)
                .map(|items| {
                    items
                        .iter()
                        .filter_map(|e| {
                            e.as_str().map(str::to_string).or_else(|| {
                                e.get("detail").and_then(Value::as_str).map(str::to_string)
                            })
                        })
                        .collect()
                })
                .unwrap_or_default();
            let main = field("message")
                .or_else(|| field("error"))
                .or_else(|| field("detail"))
                .or_else(|| field("title"));
            match (main, details.is_empty()) {
                (Some(m), true) => m,
                (Some(m), false) => format!("{m}: {}", details.join("; ")),
                (None, false) => details.join("; "),
                (None, true) => text.trim().to_string(),
            }
        }
        Err(_) => text.trim().to_string(),
    };
    let mut message = if message.is_empty() {
        "(no message)".to_string()
    } else {
        message
    };
    if message.len() > 400 {
        let mut cut = 400;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    message
}

/// Credentials and endpoints: everything needed to sign and send.
pub struct Api {
    key: String,
    secret: String,
    endpoint: String,
    deadline: Instant,
}

impl Api {
    /// A client for `endpoint` (a URL with `{zone}`, or one URL for every zone) that gives
    /// operations until `budget` from now.
    pub fn new(key: String, secret: String, endpoint: String, budget: Duration) -> Api {
        Api {
            key,
            secret,
            endpoint,
            deadline: Instant::now() + budget,
        }
    }

    /// The base URL of `zone`.
    pub fn base(&self, zone: &str) -> String {
        self.endpoint
            .trim()
            .trim_end_matches('/')
            .replace("{zone}", zone)
    }

    fn time_left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// Sends one signed request; a 2xx answer's JSON (or `null` for an empty body).
    fn once(
        &self,
        zone: &str,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<Value, ApiError> {
        let base = self.base(zone);
        // The signed path is the URL's path: the endpoint's own path (e.g. `/v2`) plus `path`.
        let after_scheme = base
            .split_once("://")
            .map_or(base.as_str(), |(_, rest)| rest);
        let prefix = after_scheme.find('/').map_or("", |i| &after_scheme[i..]);
        let signed_path = format!("{prefix}{path}");
        let mut url = format!("{base}{path}");
        if !query.is_empty() {
            url.push('?');
            url.push_str(&joinery_plugin_sdk::url::query_string(query));
        }
        let bytes = match body {
            Some(value) => {
                serde_json::to_vec(value).map_err(|e| ApiError::Decode(e.to_string()))?
            }
            None => Vec::new(),
        };
        let decoded: Vec<(String, String)> = query
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let expires = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0)
            + SIGNATURE_LIFETIME_S;
        let authorization = sign::authorization(
            &self.key,
            &self.secret,
            method,
            &signed_path,
            &bytes,
            &decoded,
            expires,
        );
        let mut request = http::Request::new(method, url)
            .header("accept", "application/json")
            .header("authorization", authorization)
            .header("user-agent", "joinery-exoscale/0.1");
        if body.is_some() {
            request = request
                .header("content-type", "application/json")
                .body(bytes);
        }
        request.timeout_ms = Some(REQUEST_TIMEOUT_MS);
        let response = request.send().map_err(ApiError::Transport)?;
        if !response.is_success() {
            let body_retry = serde_json::from_slice::<Value>(&response.body)
                .ok()
                .and_then(|v| v.get("retry_after").and_then(Value::as_u64))
                .map(|s| s.saturating_mul(1000));
            return Err(ApiError::Status {
                status: response.status,
                message: error_message(&response.body),
                retry_after_ms: response.retry_after_ms().or(body_retry),
            });
        }
        if response.body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Value::Null);
        }
        response
            .json()
            .map_err(|e| ApiError::Decode(format!("{method} {path}: {e}")))
    }

    /// Sends a request; `GET` and `DELETE` are retried (twice, briefly) after a transient
    /// failure. Nothing else is: a repeated `POST /instance` could launch a second machine.
    pub fn call(
        &self,
        zone: &str,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<Value, ApiError> {
        let idempotent = matches!(method, "GET" | "DELETE");
        let mut attempt = 0;
        loop {
            match self.once(zone, method, path, query, body) {
                Err(e) if idempotent && e.is_transient() && attempt < RETRIES => {
                    let wait = Duration::from_millis(
                        e.retry_after()
                            .unwrap_or(300 * (u64::from(attempt) + 1))
                            .min(2_000),
                    );
                    if wait >= self.time_left() {
                        return Err(e);
                    }
                    attempt += 1;
                    joinery_plugin_sdk::log::debug(format!(
                        "exoscale: retrying {method} {path} in {}ms",
                        wait.as_millis()
                    ));
                    pause(wait);
                }
                other => return other,
            }
        }
    }

    /// `GET` decoded into `T`.
    pub fn get<T: DeserializeOwned>(
        &self,
        zone: &str,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<T, ApiError> {
        let value = self.call(zone, "GET", path, query, None)?;
        serde_json::from_value(value)
            .map_err(|e| ApiError::Decode(format!("GET {path}: unexpected answer: {e}")))
    }

    /// Sends a mutating request and returns the operation it started.
    pub fn start(
        &self,
        zone: &str,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Operation, ApiError> {
        let value = self.call(zone, method, path, &[], body)?;
        serde_json::from_value(value)
            .map_err(|e| ApiError::Decode(format!("{method} {path}: not an operation: {e}")))
    }

    /// Polls `operation` until it leaves `pending`: every 250 ms at first, doubling up to
    /// 2 s, within the plugin's time budget, tolerating a few failed polls.
    pub fn wait(&self, zone: &str, mut operation: Operation) -> Result<Operation, ApiError> {
        let mut delay = Duration::from_millis(250);
        let mut errors = 0;
        loop {
            match operation.state.as_str() {
                "success" => return Ok(operation),
                "failure" | "timeout" => {
                    return Err(ApiError::Operation {
                        state: operation.state,
                        reason: operation.reason.unwrap_or_default(),
                        message: operation.message.unwrap_or_default(),
                    });
                }
                _ => {}
            }
            if delay >= self.time_left() {
                return Err(ApiError::Timeout(format!(
                    "Exoscale operation {} ({}) is still pending; it is checked again on the next call",
                    operation.id,
                    operation
                        .reference
                        .as_ref()
                        .map_or("", |r| r.command.as_str())
                )));
            }
            pause(delay);
            delay = (delay * 2).min(Duration::from_secs(2));
            match self.get::<Operation>(
                zone,
                &format!("/operation/{}", percent_encode(&operation.id)),
                &[],
            ) {
                Ok(next) => {
                    operation = next;
                    errors = 0;
                }
                Err(e) if e.is_transient() && errors < POLL_ERRORS => errors += 1,
                Err(e) => return Err(e),
            }
        }
    }
}

/// An asynchronous operation.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
pub struct Operation {
    /// ID.
    pub id: String,
    /// `pending`, `success`, `failure` or `timeout`.
    pub state: String,
    /// Why it failed.
    pub reason: Option<String>,
    /// What failed.
    pub message: Option<String>,
    /// The resource it acts on.
    pub reference: Option<Reference>,
}

/// What an operation acts on.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct Reference {
    /// The resource's ID (e.g. the new instance).
    pub id: String,
    /// The command, e.g. `create-instance`.
    pub command: String,
}

/// `GET /zone`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub struct ZoneList {
    /// The zones.
    pub zones: Vec<Named>,
}

/// Anything with an ID, a name and optionally labels and visibility: security groups,
/// private networks, anti-affinity groups, templates, zones.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "kebab-case")]
pub struct Named {
    /// ID (empty for zones).
    pub id: String,
    /// Name.
    pub name: String,
    /// Exoscale labels.
    pub labels: BTreeMap<String, String>,
    /// `public` or `private`, where the object has one.
    pub visibility: Option<String>,
    /// Template size in bytes.
    pub size: Option<u64>,
    /// Template build.
    pub build: Option<String>,
    /// Creation time (templates).
    pub created_at: Option<String>,
    /// Members (anti-affinity groups).
    pub instances: Vec<IdRef>,
}

/// `{"id": …}`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct IdRef {
    /// The ID.
    pub id: String,
}

/// An instance type.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct InstanceType {
    /// ID.
    pub id: String,
    /// Family, e.g. `standard`.
    pub family: String,
    /// Size, e.g. `medium`.
    pub size: String,
    /// vCPUs.
    pub cpus: u64,
    /// GPUs.
    pub gpus: u64,
    /// Memory in bytes.
    pub memory: u64,
    /// Whether the organisation may launch it.
    pub authorized: Option<bool>,
    /// Zones where it is offered.
    pub zones: Vec<String>,
}

impl InstanceType {
    /// `<family>.<size>`.
    pub fn name(&self) -> String {
        format!("{}.{}", self.family, self.size)
    }
}

/// An instance (the fields the plugin reads).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "kebab-case")]
pub struct ApiInstance {
    /// UUID.
    pub id: String,
    /// Name.
    pub name: String,
    /// State.
    pub state: String,
    /// Creation time.
    pub created_at: Option<String>,
    /// Exoscale labels.
    pub labels: BTreeMap<String, String>,
    /// Its type.
    pub instance_type: InstanceType,
    /// Its template.
    pub template: IdRef,
    /// Root disk in GiB; only `GET /instance/{id}` has it (`None` in list items).
    pub disk_size: Option<u64>,
    /// Attached private networks.
    pub private_networks: Vec<IdRef>,
    /// Its security groups.
    pub security_groups: Vec<IdRef>,
    /// Its anti-affinity groups; only `GET /instance/{id}` has them (`None` in list items,
    /// which omit the field).
    pub anti_affinity_groups: Option<Vec<IdRef>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_bodies_of_every_shape_are_read() {
        assert_eq!(
            error_message(br#"{"message": "quota exceeded"}"#),
            "quota exceeded"
        );
        assert_eq!(
            error_message(br#"{"error": "slow down", "retry_after": 3}"#),
            "slow down"
        );
        assert_eq!(
            error_message(br#"{"type": "about:blank", "title": "Bad Request", "status": 400, "detail": "bad disk", "errors": ["disk-size", {"detail": "too small", "location": "$['disk-size']"}]}"#),
            "bad disk: disk-size; too small"
        );
        assert_eq!(error_message(b"<html>502</html>"), "<html>502</html>");
        assert_eq!(error_message(b""), "(no message)");
    }

    fn status(status: u16, message: &str, retry_after_ms: Option<u64>) -> ApiError {
        ApiError::Status {
            status,
            message: message.into(),
            retry_after_ms,
        }
    }

    fn operation(state: &str, reason: &str, message: &str) -> ApiError {
        ApiError::Operation {
            state: state.into(),
            reason: reason.into(),
            message: message.into(),
        }
    }

    #[test]
    fn every_error_maps_to_the_class_karpenter_expects() {
        let offering = OfferingRef {
            instance_type: "standard.large".into(),
            zone: "de-fra-1".into(),
            capacity_type: "on-demand".into(),
        };
        let cls = |e: ApiError| e.into_cloud(Some(offering.clone()));
        assert!(
            matches!(cls(status(429, "slow", Some(2000))), CloudError::Retryable(r) if r.retry_after_ms == Some(2000))
        );
        assert!(
            matches!(cls(status(503, "down", None)), CloudError::Retryable(r) if r.retry_after_ms.is_none())
        );
        assert!(matches!(
            cls(status(500, "boom", None)),
            CloudError::Retryable(_)
        ));
        assert!(matches!(
            cls(status(501, "no", None)),
            CloudError::Invalid(_)
        ));
        assert!(matches!(
            cls(status(404, "instance x not found", None)),
            CloudError::NotFound(_)
        ));
        assert!(
            matches!(cls(status(401, "missing Authorization header", None)), CloudError::Invalid(m) if m.contains("api-secret"))
        );
        assert!(matches!(
            cls(status(403, "invalid request signature", None)),
            CloudError::Invalid(_)
        ));
        assert!(matches!(
            cls(status(403, "quota exceeded for resource instance", None)),
            CloudError::QuotaExceeded(_)
        ));
        match cls(status(
            400,
            "anti-affinity group spread cannot take another instance",
            None,
        )) {
            CloudError::InsufficientCapacity(ic) => assert!(
                ic.offerings.is_empty(),
                "a full group refuses every offering: {ic:?}"
            ),
            other => panic!("{other:?}"),
        }
        match cls(status(
            400,
            "insufficient capacity for standard.large",
            None,
        )) {
            CloudError::InsufficientCapacity(ic) => {
                assert_eq!(ic.offerings, vec![offering.clone()])
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            cls(status(400, "disk-size 5 is out of range", None)),
            CloudError::Invalid(_)
        ));
        assert!(matches!(
            cls(operation("failure", "unavailable", "no room")),
            CloudError::InsufficientCapacity(_)
        ));
        assert!(matches!(
            cls(operation("failure", "incorrect", "insufficient capacity")),
            CloudError::InsufficientCapacity(_)
        ));
        assert!(matches!(
            cls(operation("failure", "forbidden", "quota reached")),
            CloudError::QuotaExceeded(_)
        ));
        assert!(matches!(
            cls(operation("failure", "fault", "could not start")),
            CloudError::Retryable(_)
        ));
        assert!(matches!(
            cls(operation("timeout", "", "")),
            CloudError::Retryable(_)
        ));
        assert!(matches!(
            cls(operation("failure", "incorrect", "bad template")),
            CloudError::Invalid(_)
        ));
        assert!(matches!(
            cls(ApiError::Timeout("pending".into())),
            CloudError::Retryable(_)
        ));
        assert!(matches!(
            cls(ApiError::Transport(http::Error::Transport(
                "ConnectionRefused".into()
            ))),
            CloudError::Retryable(_)
        ));
        assert!(matches!(
            cls(ApiError::Transport(http::Error::Transport(
                "HttpRequestDenied".into()
            ))),
            CloudError::Invalid(_)
        ));
        assert!(matches!(
            cls(ApiError::Decode("x".into())),
            CloudError::Internal(_)
        ));
    }
}
