//! A small blocking HTTP client over `wasi:http/outgoing-handler`, for the pricing and cloud
//! worlds.
//!
//! The host only lets a request through when the operator granted its scheme, host and
//! port; a refused request fails with [`Error::Transport`] carrying the `wasi:http` error
//! code (`HttpRequestDenied`). The host also clamps timeouts.
//!
//! ```ignore
//! use joinery_plugin_sdk::http;
//!
//! let zones: Vec<String> = http::Request::get("https://api.example.com/v1/zones")
//!     .header("authorization", format!("Bearer {token}"))
//!     .send()?
//!     .error_for_status()?
//!     .json()?;
//! ```

use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt;

/// An HTTP request to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// Method, e.g. `GET`; any token is allowed.
    pub method: String,
    /// Absolute URL: `scheme://authority/path?query` (a `#fragment` is dropped).
    pub url: String,
    /// Header fields, in order; repeated names are sent as repeated fields.
    pub headers: Vec<(String, String)>,
    /// Request body; empty for none.
    pub body: Vec<u8>,
    /// Connect, first-byte and between-bytes timeout in milliseconds; the host clamps it.
    pub timeout_ms: Option<u64>,
}

impl Request {
    /// A request with `method` to `url`, no headers and no body.
    pub fn new(method: impl Into<String>, url: impl Into<String>) -> Self {
        Request {
            method: method.into(),
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout_ms: None,
        }
    }

    /// A `GET` request.
    pub fn get(url: impl Into<String>) -> Self {
        Request::new("GET", url)
    }

    /// A `POST` request.
    pub fn post(url: impl Into<String>) -> Self {
        Request::new("POST", url)
    }

    /// A `PUT` request.
    pub fn put(url: impl Into<String>) -> Self {
        Request::new("PUT", url)
    }

    /// A `PATCH` request.
    pub fn patch(url: impl Into<String>) -> Self {
        Request::new("PATCH", url)
    }

    /// A `DELETE` request.
    pub fn delete(url: impl Into<String>) -> Self {
        Request::new("DELETE", url)
    }

    /// Adds a header field.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// Sets a JSON body and the `content-type: application/json` header.
    pub fn json<T: Serialize + ?Sized>(mut self, value: &T) -> Result<Self, Error> {
        self.body = serde_json::to_vec(value)
            .map_err(|e| Error::InvalidRequest(format!("cannot encode JSON body: {e}")))?;
        self.headers
            .push(("content-type".to_string(), "application/json".to_string()));
        Ok(self)
    }

    /// Sets the timeout in milliseconds.
    pub fn timeout_ms(mut self, ms: u64) -> Self {
        self.timeout_ms = Some(ms);
        self
    }

    /// The first value of header `name` (case-insensitive), e.g. in a fake host's handler.
    pub fn header_value(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Sends the request and reads the whole response; see [`send`].
    pub fn send(&self) -> Result<Response, Error> {
        send(self)
    }
}

/// A complete HTTP response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Header fields as received (values decoded lossily as UTF-8).
    pub headers: Vec<(String, String)>,
    /// The whole body.
    pub body: Vec<u8>,
}

impl Response {
    /// A response with `status` and `body` and no headers (handy in fake hosts).
    pub fn new(status: u16, body: impl Into<Vec<u8>>) -> Self {
        Response {
            status,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    /// Whether the status is 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// `Retry-After` in milliseconds, when given in seconds.
    pub fn retry_after_ms(&self) -> Option<u64> {
        self.header("retry-after")?
            .trim()
            .parse::<u64>()
            .ok()
            .map(|s| s.saturating_mul(1000))
    }

    /// The body as text (invalid UTF-8 is replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Decodes the body as JSON.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, Error> {
        serde_json::from_slice(&self.body)
            .map_err(|e| Error::Decode(format!("response body is not the expected JSON: {e}")))
    }

    /// Turns a non-2xx response into [`Error::Status`] (with up to 512 bytes of the body).
    pub fn error_for_status(self) -> Result<Self, Error> {
        if self.is_success() {
            return Ok(self);
        }
        let mut body = self.text();
        if body.len() > 512 {
            let mut cut = 512;
            while !body.is_char_boundary(cut) {
                cut -= 1;
            }
            body.truncate(cut);
        }
        Err(Error::Status {
            status: self.status,
            body,
            retry_after_ms: self.retry_after_ms(),
        })
    }
}

/// Why an HTTP call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// The request could not be built (bad URL, method or header).
    InvalidRequest(String),
    /// The host refused the request or the transport failed. The text is the `wasi:http`
    /// error code as the host reported it, e.g. `HttpRequestDenied`, `ConnectionRefused`,
    /// `ConnectionReadTimeout`.
    Transport(String),
    /// The server answered with a non-2xx status (from [`Response::error_for_status`]).
    Status {
        /// Status code.
        status: u16,
        /// The start of the response body.
        body: String,
        /// `Retry-After`, in milliseconds, if the server sent one in seconds.
        retry_after_ms: Option<u64>,
    },
    /// The response could not be decoded.
    Decode(String),
}

impl Error {
    /// Whether the host refused the request because it is not granted.
    pub fn is_denied(&self) -> bool {
        matches!(self, Error::Transport(code) if code.contains("HttpRequestDenied"))
    }

    /// Whether retrying later may help: transport failures other than a refusal, HTTP 429 and 5xx.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Transport(_) => !self.is_denied(),
            Error::Status { status, .. } => *status == 429 || *status >= 500,
            _ => false,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidRequest(m) => write!(f, "invalid HTTP request: {m}"),
            Error::Transport(code) => write!(f, "HTTP request failed: {code}"),
            Error::Status { status, body, .. } if body.is_empty() => {
                write!(f, "HTTP status {status}")
            }
            Error::Status { status, body, .. } => write!(f, "HTTP status {status}: {body}"),
            Error::Decode(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for Error {}

/// Sends `request` and reads the whole response. Blocks the (single-threaded) plugin until
/// the response is complete; non-2xx statuses are *not* errors here (see
/// [`Response::error_for_status`]).
pub fn send(request: &Request) -> Result<Response, Error> {
    // Validate the URL on every target so native tests see the same errors.
    split_url(&request.url)?;
    crate::sys::http_send(request)
}

/// `GET url` with `headers`, requires a 2xx status, decodes the JSON body.
pub fn get_json<T: DeserializeOwned>(url: &str, headers: &[(&str, &str)]) -> Result<T, Error> {
    let mut req = Request::get(url).header("accept", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send()?.error_for_status()?.json()
}

/// `method url` with a JSON `body` and `headers`, requires a 2xx status, decodes the JSON
/// response body.
pub fn send_json<B: Serialize + ?Sized, T: DeserializeOwned>(
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &B,
) -> Result<T, Error> {
    let mut req = Request::new(method, url)
        .header("accept", "application/json")
        .json(body)?;
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send()?.error_for_status()?.json()
}

/// The parts of an absolute URL that `wasi:http` wants separately.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct UrlParts<'a> {
    pub(crate) scheme: &'a str,
    pub(crate) authority: &'a str,
    pub(crate) path_with_query: String,
}

/// Splits `scheme://authority/path?query#fragment`; the fragment is dropped.
pub(crate) fn split_url(url: &str) -> Result<UrlParts<'_>, Error> {
    let invalid = |why: &str| Error::InvalidRequest(format!("invalid URL `{url}`: {why}"));
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| invalid("expected scheme://host"))?;
    if scheme.is_empty()
        || !scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    {
        return Err(invalid("bad scheme"));
    }
    let rest = rest.split('#').next().unwrap_or("");
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.is_empty() {
        return Err(invalid("missing host"));
    }
    if authority.contains('@') {
        return Err(invalid(
            "credentials in the URL are not supported; use a header",
        ));
    }
    let path_with_query = match tail.chars().next() {
        None => "/".to_string(),
        Some('?') => format!("/{tail}"),
        Some(_) => tail.to_string(),
    };
    Ok(UrlParts {
        scheme,
        authority,
        path_with_query,
    })
}

/// The real client, over the generated `wasi:http` bindings.
#[cfg(target_arch = "wasm32")]
pub(crate) mod wasi {
    use super::{Error, Request, Response, split_url};

    #[cfg(feature = "cloud")]
    use crate::bindings::cloud::wasi as w;
    #[cfg(all(feature = "pricing", not(feature = "cloud")))]
    use crate::bindings::pricing::wasi as w;

    use w::http::outgoing_handler;
    use w::http::types as t;
    use w::io::streams::StreamError;

    fn method(m: &str) -> t::Method {
        match m.to_ascii_uppercase().as_str() {
            "GET" => t::Method::Get,
            "HEAD" => t::Method::Head,
            "POST" => t::Method::Post,
            "PUT" => t::Method::Put,
            "DELETE" => t::Method::Delete,
            "CONNECT" => t::Method::Connect,
            "OPTIONS" => t::Method::Options,
            "TRACE" => t::Method::Trace,
            "PATCH" => t::Method::Patch,
            _ => t::Method::Other(m.to_string()),
        }
    }

    fn scheme(s: &str) -> t::Scheme {
        match s.to_ascii_lowercase().as_str() {
            "http" => t::Scheme::Http,
            "https" => t::Scheme::Https,
            _ => t::Scheme::Other(s.to_string()),
        }
    }

    /// The error code's name (and payload), e.g. `HttpRequestDenied` or `ConnectionRefused`.
    fn code_text(code: &t::ErrorCode) -> String {
        let text = format!("{code:?}");
        match text.strip_prefix("ErrorCode::") {
            Some(rest) => rest.to_string(),
            None => text,
        }
    }

    fn stream_error(e: StreamError) -> Error {
        match e {
            StreamError::Closed => Error::Transport("stream closed".to_string()),
            StreamError::LastOperationFailed(err) => match t::http_error_code(&err) {
                Some(code) => Error::Transport(code_text(&code)),
                None => Error::Transport(err.to_debug_string()),
            },
        }
    }

    /// Waits for the response (or the error the host reported for the request).
    fn wait(future: &t::FutureIncomingResponse) -> Result<t::IncomingResponse, Error> {
        loop {
            match future.get() {
                Some(Ok(Ok(response))) => return Ok(response),
                Some(Ok(Err(code))) => return Err(Error::Transport(code_text(&code))),
                Some(Err(())) => {
                    return Err(Error::Transport("response already taken".to_string()));
                }
                None => future.subscribe().block(),
            }
        }
    }

    pub(crate) fn send(req: &Request) -> Result<Response, Error> {
        let url = split_url(&req.url)?;
        let entries: Vec<(String, Vec<u8>)> = req
            .headers
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.as_bytes().to_vec()))
            .collect();
        let headers = t::Fields::from_list(&entries)
            .map_err(|e| Error::InvalidRequest(format!("invalid or forbidden header: {e:?}")))?;
        let outgoing = t::OutgoingRequest::new(headers);
        outgoing
            .set_method(&method(&req.method))
            .map_err(|()| Error::InvalidRequest(format!("invalid method `{}`", req.method)))?;
        outgoing
            .set_scheme(Some(&scheme(url.scheme)))
            .map_err(|()| Error::InvalidRequest(format!("invalid scheme `{}`", url.scheme)))?;
        outgoing.set_authority(Some(url.authority)).map_err(|()| {
            Error::InvalidRequest(format!("invalid authority `{}`", url.authority))
        })?;
        outgoing
            .set_path_with_query(Some(&url.path_with_query))
            .map_err(|()| {
                Error::InvalidRequest(format!("invalid path `{}`", url.path_with_query))
            })?;
        let body = outgoing
            .body()
            .map_err(|()| Error::Transport("request body unavailable".to_string()))?;

        let options = req.timeout_ms.map(|ms| {
            let options = t::RequestOptions::new();
            let ns = Some(ms.saturating_mul(1_000_000));
            // A host may refuse to let plugins set a timeout; its own clamp applies then.
            let _ = options.set_connect_timeout(ns);
            let _ = options.set_first_byte_timeout(ns);
            let _ = options.set_between_bytes_timeout(ns);
            options
        });

        let future = outgoing_handler::handle(outgoing, options)
            .map_err(|code| Error::Transport(code_text(&code)))?;

        // Write the body; if that fails, the host's verdict on the request (e.g. a refusal)
        // is the more useful error, so prefer it.
        let written: Result<(), Error> = (|| {
            if !req.body.is_empty() {
                let stream = body.write().map_err(|()| {
                    Error::Transport("request body stream unavailable".to_string())
                })?;
                for chunk in req.body.chunks(4096) {
                    stream
                        .blocking_write_and_flush(chunk)
                        .map_err(stream_error)?;
                }
            }
            Ok(())
        })();
        let finished =
            t::OutgoingBody::finish(body, None).map_err(|code| Error::Transport(code_text(&code)));
        if let Err(write_error) = written.and(finished) {
            return Err(match wait(&future) {
                Err(host_error) => host_error,
                Ok(_) => write_error,
            });
        }

        let response = wait(&future)?;
        let status = response.status();
        let headers = response
            .headers()
            .entries()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
            .collect();
        let incoming = response
            .consume()
            .map_err(|()| Error::Transport("response body unavailable".to_string()))?;
        let mut bytes = Vec::new();
        {
            let stream = incoming
                .stream()
                .map_err(|()| Error::Transport("response body stream unavailable".to_string()))?;
            loop {
                match stream.blocking_read(64 * 1024) {
                    Ok(chunk) => bytes.extend_from_slice(&chunk),
                    Err(StreamError::Closed) => break,
                    Err(e) => return Err(stream_error(e)),
                }
            }
        }
        drop(t::IncomingBody::finish(incoming));
        Ok(Response {
            status,
            headers,
            body: bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_urls() {
        let p = split_url("https://api.example.com:8443/v1/zones?x=1#frag").unwrap();
        assert_eq!(p.scheme, "https");
        assert_eq!(p.authority, "api.example.com:8443");
        assert_eq!(p.path_with_query, "/v1/zones?x=1");
        assert_eq!(split_url("http://h").unwrap().path_with_query, "/");
        assert_eq!(split_url("http://h?q").unwrap().path_with_query, "/?q");
        assert!(split_url("h/x").is_err());
        assert!(split_url("http:///x").is_err());
        assert!(split_url("http://u:p@h/").is_err());
    }

    #[test]
    fn status_errors_carry_retry_after() {
        let mut r = Response::new(429, "slow down");
        r.headers.push(("Retry-After".into(), "3".into()));
        let e = r.error_for_status().unwrap_err();
        assert_eq!(
            e,
            Error::Status {
                status: 429,
                body: "slow down".into(),
                retry_after_ms: Some(3000)
            }
        );
        assert!(e.is_transient());
        assert!(Error::Transport("HttpRequestDenied".into()).is_denied());
        assert!(!Error::Transport("HttpRequestDenied".into()).is_transient());
    }
}
