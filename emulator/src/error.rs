//! Errors: the library's own failures and the Kubernetes `Status` errors the emulated API returns.

use serde_json::{Value, json};

/// A failure of the emulator itself (binding a port, building a client, writing a file).
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The listening socket could not be opened.
    #[error("could not bind the API server socket: {0}")]
    Bind(#[source] std::io::Error),
    /// A file (for example a kubeconfig) could not be written.
    #[error("could not write {what}: {source}")]
    Write {
        /// What was being written.
        what: String,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The server URL could not be turned into a client configuration.
    #[error("invalid server URL {0}")]
    InvalidUrl(String),
    /// A client's name cannot be sent as a `User-Agent` header (use visible ASCII).
    #[error("{0:?} is not a valid User-Agent header value; use visible ASCII characters")]
    InvalidUserAgent(String),
    /// The kube client could not be built.
    #[error("could not build a kube client: {0}")]
    Client(#[from] kube::Error),
    /// The simulated cloud's catalog is inconsistent; the text names the bad entry.
    #[error("invalid simulated cloud catalog: {0}")]
    InvalidCatalog(String),
}

/// An error answered to an API client, rendered as a Kubernetes `Status` object.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status code (also the `code` field of the Status).
    pub code: u16,
    /// Machine-readable reason, e.g. `NotFound` or `Conflict`.
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// Optional `details` object (name, group, kind, causes).
    pub details: Option<Value>,
}

impl ApiError {
    pub(crate) fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, group: &str, plural: &str, name: &str) -> Self {
        self.details = Some(json!({"name": name, "group": group, "kind": plural}));
        self
    }

    /// 404: the named object does not exist.
    pub fn not_found(group: &str, plural: &str, name: &str) -> Self {
        let resource = qualified(group, plural);
        Self::new(404, "NotFound", format!("{resource} \"{name}\" not found"))
            .with_details(group, plural, name)
    }

    /// 404: no such path or resource type.
    pub fn no_such_resource() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    /// 409: an object of that name already exists.
    pub fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        let resource = qualified(group, plural);
        Self::new(
            409,
            "AlreadyExists",
            format!("{resource} \"{name}\" already exists"),
        )
        .with_details(group, plural, name)
    }

    /// 409: the write was based on a stale resourceVersion (or failed a precondition).
    pub fn conflict(group: &str, plural: &str, name: &str, why: &str) -> Self {
        let resource = qualified(group, plural);
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {resource} \"{name}\": {why}"),
        )
        .with_details(group, plural, name)
    }

    /// 422: the object failed validation; `causes` are (field, message) pairs.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: &[(String, String)]) -> Self {
        let qualified_kind = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        let summary: Vec<String> = causes
            .iter()
            .map(|(field, msg)| format!("{field}: {msg}"))
            .collect();
        let mut error = Self::new(
            422,
            "Invalid",
            format!(
                "{qualified_kind} \"{name}\" is invalid: {}",
                summary.join(", ")
            ),
        );
        let causes: Vec<Value> = causes
            .iter()
            .map(|(field, msg)| json!({"reason": "FieldValueInvalid", "message": msg, "field": field}))
            .collect();
        error.details = Some(json!({"name": name, "group": group, "kind": kind, "causes": causes}));
        error
    }

    /// 400: the request itself is malformed.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 413: the request body is over the server's limit of `limit` bytes.
    pub fn request_entity_too_large(limit: usize) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {limit}"),
        )
    }

    /// 405: the verb is not supported on this path.
    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    /// 410: the requested resourceVersion is older than the retained history.
    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 429: the request would violate a limit (for evictions: a PodDisruptionBudget); `causes`
    /// are (reason, message) pairs.
    pub fn too_many_requests(message: impl Into<String>, causes: &[(&str, String)]) -> Self {
        let mut error = Self::new(429, "TooManyRequests", message);
        let causes: Vec<Value> = causes
            .iter()
            .map(|(reason, msg)| json!({"reason": reason, "message": msg}))
            .collect();
        error.details = Some(json!({"causes": causes}));
        error
    }

    /// 500: the server cannot handle an otherwise valid request.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// 415: the patch content type is not understood.
    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format: {content_type}"),
        )
    }

    /// Renders the error as a Kubernetes `Status` object.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_string()
    } else {
        format!("{plural}.{group}")
    }
}
