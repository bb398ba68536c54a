//! Per-call store state and the host side of every import.
//!
//! A fresh [`CallState`] is built for each call. It carries the plugin's identity and
//! effective capabilities; each gated import checks them before touching a service, and a
//! refusal reaches the plugin as a typed error naming the grant line to add.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView};

use crate::bindings::cloud::joinery::plugin::{cache, config, kubernetes, log, secrets};
use crate::grants::{Capabilities, KubeAccess, Verb};
use crate::services::{HostServices, KubeCallError, KubeTarget, PatchType, SecretLookupError};

/// Largest log message kept, in bytes.
const MAX_LOG_MESSAGE: usize = 4096;
/// Log lines a single call may emit before the rest are dropped.
const MAX_LOG_LINES_PER_CALL: u32 = 200;

/// What a call knows about the plugin it runs.
#[derive(Debug)]
pub struct PluginContext {
    /// Plugin name.
    pub name: String,
    /// The plugin's configuration as JSON.
    pub config_json: String,
    /// Effective capabilities.
    pub capabilities: Capabilities,
    /// Memory limit per call, bytes.
    pub memory_limit: usize,
}

/// Memory limiter that remembers whether the limit was what stopped the call.
pub(crate) struct CallLimiter {
    limit: usize,
    pub(crate) hit: Arc<AtomicBool>,
}

impl wasmtime::ResourceLimiter for CallLimiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired > self.limit {
            self.hit.store(true, Ordering::Relaxed);
            return Err(wasmtime::format_err!("memory limit of {} bytes reached (wanted {desired})", self.limit));
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

/// The store data of one call.
pub struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    http: WasiHttpCtx,
    gate: HttpGate,
    pub(crate) limiter: CallLimiter,
    pub(crate) stderr: MemoryOutputPipe,
    plugin: Arc<PluginContext>,
    services: HostServices,
    log_lines: u32,
    op: &'static str,
}

impl CallState {
    /// A sandboxed state: no environment, no arguments, no preopened directories, no sockets;
    /// stderr captured (4 KiB) so a panic message can be reported.
    pub(crate) fn new(plugin: Arc<PluginContext>, services: HostServices, op: &'static str, http_timeout: Duration) -> CallState {
        let stderr = MemoryOutputPipe::new(4096);
        let wasi = WasiCtx::builder()
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        let hit = Arc::new(AtomicBool::new(false));
        CallState {
            wasi,
            table: ResourceTable::new(),
            http: WasiHttpCtx::new(),
            gate: HttpGate { plugin: plugin.clone(), timeout: http_timeout },
            limiter: CallLimiter { limit: plugin.memory_limit, hit },
            stderr,
            plugin,
            services,
            log_lines: 0,
            op,
        }
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl WasiHttpView for CallState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.gate }
    }
}

/// The outgoing-HTTP gate: checks each request against the plugin's effective grants,
/// resolves the host and checks every address, pins plain-HTTP requests to the checked
/// address, and clamps timeouts.
struct HttpGate {
    plugin: Arc<PluginContext>,
    timeout: Duration,
}

type SendResult = Result<
    (http::Response<wasmtime_wasi_http::WasiBody>, Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>),
    wasmtime_wasi_http::Error,
>;

impl WasiHttpHooks for HttpGate {
    fn send_request(
        &mut self,
        mut request: http::Request<wasmtime_wasi_http::WasiBody>,
        options: Option<wasmtime_wasi_http::RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        drop(fut);
        let plugin = self.plugin.clone();
        let clamp = self.timeout;
        Box::new(async move {
            use http_body_util::BodyExt;
            let name = plugin.name.clone();
            let deny = move |request: http::Request<wasmtime_wasi_http::WasiBody>, why: String| async move {
                tracing::warn!(plugin = %name, "outgoing request denied: {why}");
                // Drain the body first, or the guest sees a reset instead of the denial.
                let _ = request.into_body().collect().await;
                Err(wasmtime_wasi_http::Error::HttpRequestDenied)
            };
            let uri = request.uri().clone();
            let scheme = uri.scheme_str().unwrap_or("https").to_string();
            let Some(host) = uri.host().map(|h| h.trim_start_matches('[').trim_end_matches(']').to_string()) else {
                return deny(request, "request has no host".into()).await;
            };
            let port = uri.port_u16().unwrap_or(if scheme == "https" { 443 } else { 80 });
            let pattern = match plugin.capabilities.check_http(&scheme, &host, port) {
                Ok(p) => p.clone(),
                Err(refusal) => return deny(request, refusal.0).await,
            };
            let addresses: Vec<std::net::SocketAddr> = match tokio::net::lookup_host((host.as_str(), port)).await {
                Ok(a) => a.collect(),
                Err(e) => return deny(request, format!("cannot resolve {host}: {e}")).await,
            };
            if addresses.is_empty() {
                return deny(request, format!("{host} resolves to no address")).await;
            }
            for address in &addresses {
                if let Err(refusal) = plugin.capabilities.check_resolved_ip(&pattern, address.ip(), &host) {
                    return deny(request, refusal.0).await;
                }
            }
            if scheme == "http" {
                // Pin to the address just checked, so a second lookup cannot swap it.
                // The Host header was already set from the original authority.
                let pinned = addresses[0];
                let path = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
                if let Ok(new_uri) = format!("http://{pinned}{path}").parse() {
                    *request.uri_mut() = new_uri;
                }
            }
            let clamp_opt = |d: Option<Duration>| Some(d.map_or(clamp, |d| d.min(clamp)));
            let options = wasmtime_wasi_http::RequestOptions {
                connect_timeout: clamp_opt(options.and_then(|o| o.connect_timeout)),
                first_byte_timeout: clamp_opt(options.and_then(|o| o.first_byte_timeout)),
                between_bytes_timeout: clamp_opt(options.and_then(|o| o.between_bytes_timeout)),
            };
            let (response, io) = wasmtime_wasi_http::default_send_request(request, Some(options)).await?;
            Ok((response.map(BodyExt::boxed_unsync), Box::new(io) as Box<dyn Future<Output = _> + Send>))
        })
    }
}

impl log::Host for CallState {
    async fn log(&mut self, level: log::Level, message: String) {
        self.log_lines += 1;
        if self.log_lines > MAX_LOG_LINES_PER_CALL {
            if self.log_lines == MAX_LOG_LINES_PER_CALL + 1 {
                tracing::warn!(plugin = %self.plugin.name, op = self.op, "plugin logs too much; dropping the rest of this call's lines");
            }
            return;
        }
        let mut message = message;
        if message.len() > MAX_LOG_MESSAGE {
            let mut cut = MAX_LOG_MESSAGE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push('…');
        }
        let plugin = self.plugin.name.as_str();
        let op = self.op;
        match level {
            log::Level::Trace => tracing::trace!(plugin, op, "{message}"),
            log::Level::Debug => tracing::debug!(plugin, op, "{message}"),
            log::Level::Info => tracing::info!(plugin, op, "{message}"),
            log::Level::Warn => tracing::warn!(plugin, op, "{message}"),
            log::Level::Error => tracing::error!(plugin, op, "{message}"),
        }
    }
}

impl config::Host for CallState {
    async fn get_config(&mut self) -> String {
        self.plugin.config_json.clone()
    }
}

impl secrets::Host for CallState {
    async fn get_secret(&mut self, name: String) -> Result<Vec<secrets::SecretEntry>, secrets::SecretError> {
        self.plugin.capabilities.check_secret(&name).map_err(|r| secrets::SecretError::Denied(r.0))?;
        match self.services.secrets.get(&name).await {
            Ok(entries) => Ok(entries.into_iter().map(|(key, value)| secrets::SecretEntry { key, value }).collect()),
            Err(SecretLookupError::NotFound(m)) => Err(secrets::SecretError::NotFound(m)),
            Err(SecretLookupError::Unavailable(m)) => Err(secrets::SecretError::Unavailable(m)),
        }
    }
}

impl CallState {
    fn kube_target(&self, target: kubernetes::ResourceRef, verb: Verb) -> Result<KubeTarget, kubernetes::KubeError> {
        let access = KubeAccess {
            cluster: &target.cluster,
            group: &target.group,
            resource: &target.resource,
            namespace: target.namespace.as_deref(),
            verb,
        };
        self.plugin.capabilities.check_kube(&access).map_err(|r| kubernetes::KubeError::Denied(r.0))?;
        Ok(KubeTarget {
            cluster: target.cluster,
            group: target.group,
            version: target.version,
            resource: target.resource,
            namespace: target.namespace,
        })
    }
}

fn kube_err(e: KubeCallError) -> kubernetes::KubeError {
    match e {
        KubeCallError::NotFound(m) => kubernetes::KubeError::NotFound(m),
        KubeCallError::Conflict(m) => kubernetes::KubeError::Conflict(m),
        KubeCallError::Invalid(m) => kubernetes::KubeError::Invalid(m),
        KubeCallError::Unavailable(m) => kubernetes::KubeError::Unavailable(m),
    }
}

impl kubernetes::Host for CallState {
    async fn get(&mut self, target: kubernetes::ResourceRef, name: String) -> Result<String, kubernetes::KubeError> {
        let target = self.kube_target(target, Verb::Get)?;
        self.services.kube.get(&target, &name).await.map_err(kube_err)
    }

    async fn list(&mut self, target: kubernetes::ResourceRef, label_selector: Option<String>) -> Result<String, kubernetes::KubeError> {
        let target = self.kube_target(target, Verb::List)?;
        self.services.kube.list(&target, label_selector.as_deref()).await.map_err(kube_err)
    }

    async fn create(&mut self, target: kubernetes::ResourceRef, body: String) -> Result<String, kubernetes::KubeError> {
        let target = self.kube_target(target, Verb::Create)?;
        self.services.kube.create(&target, &body).await.map_err(kube_err)
    }

    async fn patch(
        &mut self,
        target: kubernetes::ResourceRef,
        name: String,
        kind: kubernetes::PatchKind,
        body: String,
    ) -> Result<String, kubernetes::KubeError> {
        let target = self.kube_target(target, Verb::Patch)?;
        let kind = match kind {
            kubernetes::PatchKind::Merge => PatchType::Merge,
            kubernetes::PatchKind::Json => PatchType::Json,
            kubernetes::PatchKind::Apply => PatchType::Apply,
        };
        self.services.kube.patch(&target, &name, kind, &body).await.map_err(kube_err)
    }

    async fn delete(&mut self, target: kubernetes::ResourceRef, name: String) -> Result<(), kubernetes::KubeError> {
        let target = self.kube_target(target, Verb::Delete)?;
        self.services.kube.delete(&target, &name).await.map_err(kube_err)
    }
}

impl cache::Host for CallState {
    async fn get(&mut self, key: String) -> Option<Vec<u8>> {
        self.services.cache.get(&self.plugin.name, &key)
    }

    async fn set(&mut self, key: String, value: Vec<u8>, ttl_seconds: u32) {
        if !self.services.cache.set(&self.plugin.name, &key, value, ttl_seconds) {
            tracing::debug!(plugin = %self.plugin.name, key, "cache value too large; not stored");
        }
    }

    async fn remove(&mut self, key: String) {
        self.services.cache.remove(&self.plugin.name, &key)
    }
}

impl crate::bindings::cloud::joinery::plugin::types::Host for CallState {}
