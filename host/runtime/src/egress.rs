//! Plugins' outgoing HTTP(S), after the grant and address checks of [`crate::state`].
//!
//! Three things differ from a plain HTTP client:
//!
//! - **Pinning.** The connection goes to the socket address that was resolved and checked,
//!   never to a second lookup of the host name: a DNS answer that changes between the check
//!   and the connect (DNS rebinding) cannot steer a plugin to the metadata service. TLS still
//!   verifies the certificate against the host name the plugin asked for.
//! - **Trust.** Server certificates are checked against the public web roots, the system's
//!   trust store, and an operator-supplied CA bundle (`JOINERY_EGRESS_CA_BUNDLE`, PEM), so an
//!   on-premises API with a private CA works without turning verification off.
//! - **Proxy.** `HTTPS_PROXY` / `HTTP_PROXY` (an `http://host:port` forward proxy) and
//!   `NO_PROXY` are honoured: the request is tunnelled with `CONNECT host:port`. Through a
//!   proxy the proxy resolves the name; the host still checked every address it resolved
//!   itself before sending anything.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http_body_util::BodyExt;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use wasmtime_wasi_http::Error as HttpError;

/// Largest CONNECT answer header a proxy may send, in bytes.
const MAX_PROXY_ANSWER: usize = 8 * 1024;

/// An HTTP forward proxy: `http://host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proxy {
    /// Proxy host.
    pub host: String,
    /// Proxy port (80 when the URL has none, as for any http URL).
    pub port: u16,
}

impl Proxy {
    /// Parses `http://host[:port]` (a trailing `/` is allowed). Credentials and `https://`
    /// proxies are not supported and say so.
    pub fn parse(url: &str) -> Result<Proxy, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("proxy {url:?}: only http:// forward proxies are supported"))?
            .trim_end_matches('/');
        if rest.contains('@') {
            return Err(format!(
                "proxy {url:?}: credentials in the proxy URL are not supported"
            ));
        }
        if rest.is_empty() || rest.contains('/') {
            return Err(format!("proxy {url:?}: expected http://host[:port]"));
        }
        let (host, port) = match rest.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(']') || rest.starts_with('[') => (
                host,
                port.parse::<u16>()
                    .map_err(|_| format!("proxy {url:?}: port {port:?} is not a number"))?,
            ),
            _ => (rest, 80),
        };
        Ok(Proxy {
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port,
        })
    }
}

/// Which requests go through a proxy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxySettings {
    /// Proxy for `https://` requests.
    pub https: Option<Proxy>,
    /// Proxy for `http://` requests.
    pub http: Option<Proxy>,
    /// Hosts reached directly: `*` for all, a name (`api.example.com`), a domain suffix
    /// (`.example.com` or `example.com`, matching its subdomains too), or an IP address.
    pub no_proxy: Vec<String>,
}

impl ProxySettings {
    /// Reads `HTTPS_PROXY`, `HTTP_PROXY` and `NO_PROXY` (upper or lower case) through `var`.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<ProxySettings, String> {
        let read = |name: &str| {
            var(name)
                .or_else(|| var(&name.to_ascii_lowercase()))
                .filter(|v| !v.trim().is_empty())
        };
        let proxy = |name: &str| {
            read(name)
                .map(|v| Proxy::parse(v.trim()).map_err(|e| format!("{name}: {e}")))
                .transpose()
        };
        Ok(ProxySettings {
            https: proxy("HTTPS_PROXY")?,
            http: proxy("HTTP_PROXY")?,
            no_proxy: read("NO_PROXY")
                .map(|v| {
                    v.split(',')
                        .map(|s| s.trim().to_ascii_lowercase())
                        .filter(|s| !s.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
        })
    }

    /// The proxy for a request to `scheme://host`, if any.
    pub fn proxy_for(&self, scheme: &str, host: &str) -> Option<&Proxy> {
        let proxy = if scheme == "https" {
            self.https.as_ref()
        } else {
            self.http.as_ref()
        }?;
        let host = host.to_ascii_lowercase();
        let bypass = self.no_proxy.iter().any(|entry| {
            let entry = entry.split(':').next().unwrap_or(entry); // ignore a port
            let suffix = entry.trim_start_matches('.');
            entry == "*" || host == suffix || host.ends_with(&format!(".{suffix}"))
        });
        (!bypass).then_some(proxy)
    }
}

/// How plugins' requests leave the host.
#[derive(Debug, Clone, Default)]
pub struct EgressConfig {
    /// Extra trusted CA certificates (the operator's bundle).
    pub extra_roots: Vec<CertificateDer<'static>>,
    /// Whether the system trust store is used besides the public web roots.
    pub system_roots: bool,
    /// Proxies.
    pub proxy: ProxySettings,
}

impl EgressConfig {
    /// Reads the process environment: `HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`, and
    /// `JOINERY_EGRESS_CA_BUNDLE` (a PEM file of extra CA certificates). The system trust
    /// store is used.
    pub fn from_env() -> Result<EgressConfig, String> {
        let mut config = EgressConfig {
            system_roots: true,
            proxy: ProxySettings::from_vars(|name| std::env::var(name).ok())?,
            ..Default::default()
        };
        if let Some(path) = std::env::var_os("JOINERY_EGRESS_CA_BUNDLE").filter(|p| !p.is_empty()) {
            let pem = std::fs::read(&path).map_err(|e| {
                format!(
                    "JOINERY_EGRESS_CA_BUNDLE: cannot read {}: {e}",
                    std::path::Path::new(&path).display()
                )
            })?;
            config
                .add_ca_bundle(&pem)
                .map_err(|e| format!("JOINERY_EGRESS_CA_BUNDLE: {e}"))?;
        }
        Ok(config)
    }

    /// Adds every certificate of a PEM bundle; a bundle without one is an error.
    pub fn add_ca_bundle(&mut self, pem: &[u8]) -> Result<(), String> {
        let before = self.extra_roots.len();
        for cert in CertificateDer::pem_slice_iter(pem) {
            self.extra_roots
                .push(cert.map_err(|e| format!("not a PEM certificate bundle: {e}"))?);
        }
        if self.extra_roots.len() == before {
            return Err(
                "the CA bundle holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
            );
        }
        Ok(())
    }
}

/// Where one request goes, after its checks.
#[derive(Debug, Clone)]
pub struct Destination {
    /// `http` or `https`.
    pub scheme: String,
    /// The host name (or IP) the plugin asked for: TLS server name, CONNECT target.
    pub host: String,
    /// Port.
    pub port: u16,
    /// The checked address to connect to when no proxy is used.
    pub pinned: SocketAddr,
}

/// Timeouts of one request (already clamped to the call's deadline).
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// Connecting (TCP, proxy tunnel and TLS handshake).
    pub connect: Duration,
    /// Waiting for the response head.
    pub first_byte: Duration,
}

/// The response and the future that drives its connection, as `wasi:http` wants them.
pub type Sent = (
    http::Response<wasmtime_wasi_http::WasiBody>,
    Box<dyn Future<Output = Result<(), HttpError>> + Send>,
);

/// A connected byte stream (TCP, TLS over it, or a dialer's).
pub trait Stream: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Sync + Unpin + 'static> Stream for T {}

/// Connects to checked addresses instead of TCP: the simulator's in-process network, in
/// virtual time. Everything else (grants, address checks, the request's deadline, HTTP/1.1)
/// is as over TCP.
pub trait Dialer: Send + Sync {
    /// A stream to `to`, or `None` to connect over TCP.
    fn dial(&self, to: SocketAddr) -> Option<std::io::Result<Box<dyn Stream>>>;
}

/// The egress client: TLS settings built once, proxies, and an optional [`Dialer`].
#[derive(Clone)]
pub struct Egress {
    tls: Arc<rustls::ClientConfig>,
    proxy: ProxySettings,
    dialer: Option<Arc<dyn Dialer>>,
}

impl std::fmt::Debug for Egress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Egress")
            .field("proxy", &self.proxy)
            .field("dialer", &self.dialer.is_some())
            .finish()
    }
}

impl Default for Egress {
    /// Public web roots and the system trust store, no proxy. Built once per process and
    /// shared (every `HostServices::default()` takes one).
    fn default() -> Self {
        static DEFAULT: OnceLock<Egress> = OnceLock::new();
        DEFAULT
            .get_or_init(|| {
                Egress::new(&EgressConfig {
                    system_roots: true,
                    ..Default::default()
                })
            })
            .clone()
    }
}

/// The system's trusted roots, read once per process (reading them touches many files).
fn system_roots() -> &'static [CertificateDer<'static>] {
    static ROOTS: OnceLock<Vec<CertificateDer<'static>>> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        if !found.errors.is_empty() {
            tracing::debug!(
                errors = found.errors.len(),
                "some system trust-store entries could not be read"
            );
        }
        found.certs
    })
}

impl Egress {
    /// Builds the client. Unusable system or extra roots are skipped with a warning (an
    /// unusable extra root makes the request to that API fail its TLS check, loudly).
    pub fn new(config: &EgressConfig) -> Egress {
        let mut roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        if config.system_roots {
            let (_, ignored) = roots.add_parsable_certificates(system_roots().iter().cloned());
            if ignored > 0 {
                tracing::debug!(
                    ignored,
                    "system trust-store certificates rustls cannot use were skipped"
                );
            }
        }
        for cert in &config.extra_roots {
            if let Err(e) = roots.add(cert.clone()) {
                tracing::warn!(error = %e, "a certificate of the egress CA bundle is not a usable root; skipped");
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports the default TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        Egress {
            tls: Arc::new(tls),
            proxy: config.proxy.clone(),
            dialer: None,
        }
    }

    /// This client with `dialer` asked first for every connection (no proxy then applies).
    pub fn with_dialer(mut self, dialer: Arc<dyn Dialer>) -> Egress {
        self.dialer = Some(dialer);
        self
    }

    /// The proxy settings in force.
    pub fn proxy(&self) -> &ProxySettings {
        &self.proxy
    }

    /// Sends `request` to `to`: over a proxy tunnel if one applies, else to the pinned address.
    pub async fn send(
        &self,
        mut request: http::Request<wasmtime_wasi_http::WasiBody>,
        to: &Destination,
        timeouts: Timeouts,
    ) -> Result<Sent, HttpError> {
        let connect = async {
            let dialled = self.dialer.as_ref().and_then(|d| d.dial(to.pinned));
            let stream: Box<dyn Stream> =
                match (dialled, self.proxy.proxy_for(&to.scheme, &to.host)) {
                    (Some(dialled), _) => dialled.map_err(HttpError::Connect)?,
                    (None, Some(proxy)) => Box::new(tunnel(proxy, &to.host, to.port).await?),
                    (None, None) => Box::new(
                        TcpStream::connect(to.pinned)
                            .await
                            .map_err(HttpError::Connect)?,
                    ),
                };
            let stream: Box<dyn Stream> = if to.scheme == "https" {
                let name = ServerName::try_from(to.host.clone())
                    .map_err(|_| HttpError::HttpRequestUriInvalid)?;
                let tls = tokio_rustls::TlsConnector::from(self.tls.clone());
                Box::new(tls.connect(name, stream).await.map_err(HttpError::Tls)?)
            } else {
                stream
            };
            hyper::client::conn::http1::handshake::<_, wasmtime_wasi_http::WasiBody>(
                hyper_util::rt::TokioIo::new(stream),
            )
            .await
            .map_err(HttpError::from)
        };
        let (mut sender, conn) = tokio::time::timeout(timeouts.connect, connect)
            .await
            .map_err(|_| HttpError::ConnectionTimeout)??;
        // The request line carries only the path: the authority stays in the Host header.
        let path = request
            .uri()
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
            .to_string();
        *request.uri_mut() = http::Uri::builder()
            .path_and_query(path)
            .build()
            .map_err(|_| HttpError::HttpRequestUriInvalid)?;
        // Drive the connection while waiting for the response head. A server that answers
        // and closes may end the connection first: then only the response is awaited.
        let mut conn = Some(Box::pin(conn));
        let response = tokio::time::timeout(timeouts.first_byte, async {
            let mut send = std::pin::pin!(sender.send_request(request));
            loop {
                let Some(driving) = conn.as_mut() else {
                    break send.await.map_err(HttpError::from);
                };
                tokio::select! {
                    biased;
                    response = &mut send => break response.map_err(HttpError::from),
                    closed = driving => {
                        conn = None;
                        closed.map_err(HttpError::from)?;
                    }
                }
            }
        })
        .await
        .map_err(|_| HttpError::ConnectionReadTimeout)??;
        let response = response.map(|body| body.map_err(HttpError::from).boxed_unsync());
        let io = async move {
            match conn {
                Some(conn) => conn.await.map_err(HttpError::from),
                None => Ok(()),
            }
        };
        Ok((response, Box::new(io)))
    }
}

/// Opens a `CONNECT host:port` tunnel through a forward proxy.
async fn tunnel(proxy: &Proxy, host: &str, port: u16) -> Result<TcpStream, HttpError> {
    let mut stream = TcpStream::connect((proxy.host.as_str(), proxy.port))
        .await
        .map_err(HttpError::Connect)?;
    let authority = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let hello = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    stream
        .write_all(hello.as_bytes())
        .await
        .map_err(HttpError::Connect)?;
    // Read the answer head byte by byte: nothing after it may be consumed (it is TLS).
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_PROXY_ANSWER {
            return Err(HttpError::HttpProtocolError);
        }
        let byte = stream.read_u8().await.map_err(HttpError::Connect)?;
        head.push(byte);
    }
    let status_line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let ok = std::str::from_utf8(status_line)
        .ok()
        .and_then(|line| line.split_whitespace().nth(1))
        .is_some_and(|code| code.starts_with('2'));
    if !ok {
        tracing::warn!(proxy = %proxy.host, target = %authority, answer = %String::from_utf8_lossy(status_line).trim(), "the proxy refused the tunnel");
        return Err(HttpError::ConnectionRefused);
    }
    Ok(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxy_urls_parse_or_say_why_not() {
        assert_eq!(
            Proxy::parse("http://proxy.corp:3128").unwrap(),
            Proxy {
                host: "proxy.corp".into(),
                port: 3128
            }
        );
        assert_eq!(
            Proxy::parse("http://proxy.corp/").unwrap(),
            Proxy {
                host: "proxy.corp".into(),
                port: 80
            }
        );
        assert_eq!(
            Proxy::parse("http://[fd00::1]:8080").unwrap(),
            Proxy {
                host: "fd00::1".into(),
                port: 8080
            }
        );
        assert!(
            Proxy::parse("https://proxy.corp")
                .unwrap_err()
                .contains("only http://")
        );
        assert!(
            Proxy::parse("http://user:pw@proxy.corp")
                .unwrap_err()
                .contains("credentials")
        );
        assert!(
            Proxy::parse("http://proxy.corp:x")
                .unwrap_err()
                .contains("port")
        );
    }

    #[test]
    fn no_proxy_matches_names_suffixes_and_star() {
        let vars = |name: &str| match name {
            "https_proxy" => Some("http://p:3128".to_string()),
            "NO_PROXY" => Some("internal.corp, .svc ,10.0.0.5,api.local:443".to_string()),
            _ => None,
        };
        let settings = ProxySettings::from_vars(vars).unwrap();
        assert!(settings.http.is_none());
        assert!(settings.proxy_for("https", "api.exoscale.com").is_some());
        assert!(
            settings.proxy_for("http", "api.exoscale.com").is_none(),
            "no HTTP_PROXY"
        );
        for direct in [
            "internal.corp",
            "a.internal.corp",
            "kubernetes.default.svc",
            "10.0.0.5",
            "API.LOCAL",
        ] {
            assert!(settings.proxy_for("https", direct).is_none(), "{direct}");
        }
        assert!(settings.proxy_for("https", "notinternal.corp").is_some());
        let all = ProxySettings::from_vars(|n| {
            (n == "HTTPS_PROXY" || n == "NO_PROXY").then(|| {
                if n == "NO_PROXY" {
                    "*".into()
                } else {
                    "http://p".into()
                }
            })
        })
        .unwrap();
        assert!(all.proxy_for("https", "anything").is_none());
        let bad =
            ProxySettings::from_vars(|n| (n == "HTTPS_PROXY").then(|| "socks5://p".to_string()))
                .unwrap_err();
        assert!(bad.contains("HTTPS_PROXY"), "{bad}");
    }

    #[test]
    fn a_ca_bundle_without_certificates_is_refused() {
        let mut config = EgressConfig::default();
        assert!(
            config
                .add_ca_bundle(b"not pem")
                .unwrap_err()
                .contains("no PEM certificate")
        );
    }
}
