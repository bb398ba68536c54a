//! Per-call store state and the host side of every import.
//!
//! A fresh [`CallState`] is built for each call. It carries the plugin's identity and
//! effective capabilities; each gated import checks them before touching a service, and a
//! refusal reaches the plugin as a typed error naming the grant line to add.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpHooks, WasiHttpView};

use crate::grants::{Capabilities, KubeAccess, Verb};
use crate::kube_names;
use crate::services::{HostServices, KubeCallError, KubeTarget, PatchType, SecretLookupError};

/// Largest log message kept, in bytes.
const MAX_LOG_MESSAGE: usize = 4096;
/// Bytes of a denied request's body read (and thrown away) before the denial is answered.
const MAX_DENIED_BODY: usize = 64 * 1024;
/// Log lines a single call may emit before the rest are dropped.
const MAX_LOG_LINES_PER_CALL: u32 = 200;

/// The log lines one call may still cause: the plugin's own and the host's warnings about
/// what it asked for (a denied request, a refused Kubernetes call), so that neither floods
/// the host's logs. Shared by the call's imports and its outgoing-HTTP gate.
#[derive(Debug, Default)]
struct LogBudget {
    used: AtomicU32,
}

impl LogBudget {
    /// Whether one more line may be written; the first line past the budget is replaced by
    /// a warning that the rest of the call's lines are dropped.
    fn take(&self, plugin: &str, op: &str) -> bool {
        let used = self.used.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        if used == MAX_LOG_LINES_PER_CALL + 1 {
            tracing::warn!(
                plugin,
                op,
                "plugin logs too much; dropping the rest of this call's lines"
            );
        }
        used <= MAX_LOG_LINES_PER_CALL
    }
}

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
    /// Every secret value the plugin was given, scrubbed from what it says.
    pub secret_values: crate::redact::SecretValues,
}

/// Memory limiter that remembers whether the limit was what stopped the call.
pub(crate) struct CallLimiter {
    limit: usize,
    pub(crate) hit: Arc<AtomicBool>,
    /// The largest linear memory the call grew to, in bytes.
    pub(crate) peak: Arc<std::sync::atomic::AtomicUsize>,
}

impl wasmtime::ResourceLimiter for CallLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit {
            self.hit.store(true, Ordering::Relaxed);
            return Err(wasmtime::format_err!(
                "memory limit of {} bytes reached (wanted {desired})",
                self.limit
            ));
        }
        self.peak.fetch_max(desired, Ordering::Relaxed);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

/// A plugin's wall clock in virtual time: the simulation's clock.
struct VirtualWallClock(Arc<joinery_core::clock::Clock>);

impl wasmtime_wasi::HostWallClock for VirtualWallClock {
    fn resolution(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(1)
    }

    fn now(&self) -> std::time::Duration {
        self.0
            .now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
    }
}

/// A plugin's monotonic clock in virtual time: nanoseconds of simulated time elapsed.
struct VirtualMonotonicClock(Arc<joinery_core::clock::Clock>);

impl wasmtime_wasi::HostMonotonicClock for VirtualMonotonicClock {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX)
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
    log_budget: Arc<LogBudget>,
    op: &'static str,
}

impl CallState {
    /// A sandboxed state: no environment, no arguments, no preopened directories, no sockets;
    /// stderr captured (4 KiB) so a panic message can be reported. `deadline` is the call's:
    /// the host's work on the plugin's outgoing requests ends there too.
    pub(crate) fn new(
        plugin: Arc<PluginContext>,
        services: HostServices,
        op: &'static str,
        deadline: Instant,
    ) -> CallState {
        let stderr = MemoryOutputPipe::new(4096);
        let mut wasi = WasiCtx::builder();
        wasi.stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false);
        if let Some(clock) = &services.virtual_clock {
            wasi.wall_clock(VirtualWallClock(clock.clone()))
                .monotonic_clock(VirtualMonotonicClock(clock.clone()));
        }
        let wasi = wasi.build();
        let hit = Arc::new(AtomicBool::new(false));
        let log_budget = Arc::new(LogBudget::default());
        CallState {
            wasi,
            table: ResourceTable::new(),
            http: WasiHttpCtx::new(),
            gate: HttpGate {
                plugin: plugin.clone(),
                deadline,
                egress: services.egress.clone(),
                log_budget: log_budget.clone(),
                op,
            },
            limiter: CallLimiter {
                limit: plugin.memory_limit,
                hit,
                peak: Default::default(),
            },
            stderr,
            plugin,
            services,
            log_budget,
            op,
        }
    }
}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl WasiHttpView for CallState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http,
            table: &mut self.table,
            hooks: &mut self.gate,
        }
    }
}

/// The outgoing-HTTP gate: checks each request against the plugin's effective grants,
/// resolves the host and checks every address, clamps timeouts, and sends through
/// [`crate::egress`], which connects to the checked address (no second lookup).
///
/// The request future runs in a task of its own: the epoch deadline interrupts only guest
/// code, and the call's wall-clock timeout stops the task only by dropping the store, half a
/// second late. So the host's work for the plugin (grant checks, DNS, connect, TLS, the
/// response head) is bounded here by the call's own deadline and ends there with
/// `connection-timeout`. A timeout cannot preempt work that never yields: the grant matching
/// in it is linear and sees only names of valid length ([`crate::grants::check_host_name`]).
struct HttpGate {
    plugin: Arc<PluginContext>,
    deadline: Instant,
    egress: Arc<crate::egress::Egress>,
    log_budget: Arc<LogBudget>,
    op: &'static str,
}

type SendResult = Result<
    (
        http::Response<wasmtime_wasi_http::WasiBody>,
        Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ),
    wasmtime_wasi_http::Error,
>;

impl WasiHttpHooks for HttpGate {
    fn send_request(
        &mut self,
        request: http::Request<wasmtime_wasi_http::WasiBody>,
        options: Option<wasmtime_wasi_http::RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), wasmtime_wasi_http::Error>> + Send>,
    ) -> Box<dyn Future<Output = SendResult> + Send> {
        drop(fut);
        let plugin = self.plugin.clone();
        let deadline = self.deadline;
        let egress = self.egress.clone();
        let abandoned_by = plugin.name.clone();
        let log_budget = self.log_budget.clone();
        let op = self.op;
        let work = async move {
            use http_body_util::BodyExt;
            let said_by = plugin.clone();
            let deny = move |request: http::Request<wasmtime_wasi_http::WasiBody>, why: String| async move {
                // `why` quotes the plugin's host name, which may carry a secret it was given.
                if log_budget.take(&said_by.name, op) {
                    let why = said_by.secret_values.scrub(&why);
                    tracing::warn!(plugin = %said_by.name, op, "outgoing request denied: {why}");
                }
                // Drain the body first, or the guest sees a reset instead of the denial; but
                // only so much of it: a denied request does not get to fill host memory.
                let mut body = request.into_body();
                let mut drained = 0usize;
                while drained <= MAX_DENIED_BODY {
                    match body.frame().await {
                        Some(Ok(frame)) => drained += frame.data_ref().map_or(0, |d| d.len()),
                        _ => break,
                    }
                }
                Err(wasmtime_wasi_http::Error::HttpRequestDenied)
            };
            let uri = request.uri().clone();
            let scheme = uri.scheme_str().unwrap_or("https").to_string();
            let Some(host) = uri
                .host()
                .map(|h| h.trim_start_matches('[').trim_end_matches(']').to_string())
            else {
                return deny(request, "request has no host".into()).await;
            };
            let port = uri
                .port_u16()
                .unwrap_or(if scheme == "https" { 443 } else { 80 });
            let pattern = match plugin.capabilities.check_http(&scheme, &host, port) {
                Ok(p) => p.clone(),
                Err(refusal) => return deny(request, refusal.0).await,
            };
            let addresses: Vec<std::net::SocketAddr> =
                match tokio::net::lookup_host((host.as_str(), port)).await {
                    Ok(a) => a.collect(),
                    Err(e) => return deny(request, format!("cannot resolve {host}: {e}")).await,
                };
            if addresses.is_empty() {
                return deny(request, format!("{host} resolves to no address")).await;
            }
            for address in &addresses {
                if let Err(refusal) =
                    plugin
                        .capabilities
                        .check_resolved_ip(&pattern, address.ip(), &host)
                {
                    return deny(request, refusal.0).await;
                }
            }
            let clamp = deadline.saturating_duration_since(Instant::now());
            let clamp_opt = |d: Option<Duration>| d.map_or(clamp, |d| d.min(clamp));
            let timeouts = crate::egress::Timeouts {
                connect: clamp_opt(options.and_then(|o| o.connect_timeout)),
                first_byte: clamp_opt(options.and_then(|o| o.first_byte_timeout)),
            };
            let destination = crate::egress::Destination {
                scheme,
                host,
                port,
                pinned: addresses[0],
            };
            egress.send(request, &destination, timeouts).await
        };
        Box::new(async move {
            match tokio::time::timeout_at(deadline, work).await {
                Ok(sent) => sent,
                Err(_elapsed) => {
                    tracing::warn!(plugin = %abandoned_by, "outgoing request abandoned at the call's deadline (resolving, checking, connecting or waiting for the answer took the time left)");
                    Err(wasmtime_wasi_http::Error::ConnectionTimeout)
                }
            }
        })
    }
}

/// Why the host refused a plugin's Kubernetes call before making it.
enum KubeRefusal {
    /// A name or path part is malformed.
    Invalid(String),
    /// The grant does not cover it.
    Denied(String),
}

impl CallState {
    /// Checks the call's path parts (before the grant, so nothing unchecked reaches a path),
    /// then the grant, and returns the target for the backend.
    fn kube_target(
        &self,
        target: KubeTarget,
        name: Option<&str>,
        verb: Verb,
    ) -> Result<KubeTarget, KubeRefusal> {
        if let Err(invalid) = kube_names::check(&target.parts(name)) {
            // The refusal quotes the plugin's names, which may carry a secret it was given.
            if self.log_budget.take(&self.plugin.name, self.op) {
                let shown = self.plugin.secret_values.scrub(&invalid.to_string());
                tracing::warn!(plugin = %self.plugin.name, op = self.op, verb = verb.as_str(), "kubernetes call refused: {shown}");
            }
            return Err(KubeRefusal::Invalid(format!(
                "plugin {}: {invalid}",
                self.plugin.name
            )));
        }
        let access = KubeAccess {
            cluster: &target.cluster,
            group: &target.group,
            resource: &target.resource,
            namespace: target.namespace.as_deref(),
            verb,
        };
        self.plugin
            .capabilities
            .check_kube(&access)
            .map_err(|r| KubeRefusal::Denied(r.0))?;
        Ok(target)
    }
}

/// Implements the host interfaces of one WIT version for [`CallState`]. The interfaces are
/// the same in every version (only the package version in their names differs), so one text
/// serves them all: `host_imports!(crate::wit::v0_1::cloud::joinery::plugin)`.
macro_rules! host_imports {
    ($($module:ident)::+) => {
        const _: () = {
        use $($module)::+::{cache, config, kubernetes, log, secrets};

        fn target_of(target: kubernetes::ResourceRef) -> KubeTarget {
                    KubeTarget {
                        cluster: target.cluster,
                        group: target.group,
                        version: target.version,
                        resource: target.resource,
                        namespace: target.namespace,
                    }
                }

                fn refused(refusal: KubeRefusal) -> kubernetes::KubeError {
                    match refusal {
                        KubeRefusal::Invalid(m) => kubernetes::KubeError::Invalid(m),
                        KubeRefusal::Denied(m) => kubernetes::KubeError::Denied(m),
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

        impl log::Host for CallState {
            async fn log(&mut self, level: log::Level, message: String) {
                if !self.log_budget.take(&self.plugin.name, self.op) {
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
                self.plugin.secret_values.scrub_in_place(&mut message);
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
            async fn get_secret(
                &mut self,
                name: String,
            ) -> Result<Vec<secrets::SecretEntry>, secrets::SecretError> {
                self.plugin
                    .capabilities
                    .check_secret(&name)
                    .map_err(|r| secrets::SecretError::Denied(r.0))?;
                kube_names::check_secret_ref(&name)
                    .map_err(|e| secrets::SecretError::Denied(e.to_string()))?;
                match self.services.secrets.get(&name).await {
                    Ok(entries) => {
                        for value in entries.values() {
                            self.plugin.secret_values.remember(value);
                        }
                        Ok(entries
                            .into_iter()
                            .map(|(key, value)| secrets::SecretEntry { key, value })
                            .collect())
                    }
                    Err(SecretLookupError::NotFound(m)) => Err(secrets::SecretError::NotFound(m)),
                    Err(SecretLookupError::Unavailable(m)) => Err(secrets::SecretError::Unavailable(m)),
                }
            }
        }

        impl kubernetes::Host for CallState {
            async fn get(
                &mut self,
                target: kubernetes::ResourceRef,
                name: String,
            ) -> Result<String, kubernetes::KubeError> {
                let target = self.kube_target(target_of(target), Some(&name), Verb::Get).map_err(refused)?;
                self.services
                    .kube
                    .get(&target, &name)
                    .await
                    .map_err(kube_err)
            }

            async fn list(
                &mut self,
                target: kubernetes::ResourceRef,
                label_selector: Option<String>,
            ) -> Result<String, kubernetes::KubeError> {
                let target = self.kube_target(target_of(target), None, Verb::List).map_err(refused)?;
                self.services
                    .kube
                    .list(&target, label_selector.as_deref())
                    .await
                    .map_err(kube_err)
            }

            async fn create(
                &mut self,
                target: kubernetes::ResourceRef,
                body: String,
            ) -> Result<String, kubernetes::KubeError> {
                let target = self.kube_target(target_of(target), None, Verb::Create).map_err(refused)?;
                self.services
                    .kube
                    .create(&target, &body)
                    .await
                    .map_err(kube_err)
            }

            async fn patch(
                &mut self,
                target: kubernetes::ResourceRef,
                name: String,
                kind: kubernetes::PatchKind,
                body: String,
            ) -> Result<String, kubernetes::KubeError> {
                let target = self.kube_target(target_of(target), Some(&name), Verb::Patch).map_err(refused)?;
                let kind = match kind {
                    kubernetes::PatchKind::Merge => PatchType::Merge,
                    kubernetes::PatchKind::Json => PatchType::Json,
                    kubernetes::PatchKind::Apply => PatchType::Apply,
                };
                self.services
                    .kube
                    .patch(&target, &name, kind, &body)
                    .await
                    .map_err(kube_err)
            }

            async fn delete(
                &mut self,
                target: kubernetes::ResourceRef,
                name: String,
            ) -> Result<(), kubernetes::KubeError> {
                let target = self.kube_target(target_of(target), Some(&name), Verb::Delete).map_err(refused)?;
                self.services
                    .kube
                    .delete(&target, &name)
                    .await
                    .map_err(kube_err)
            }
        }

        impl cache::Host for CallState {
            async fn get(&mut self, key: String) -> Option<Vec<u8>> {
                self.services.cache.get(&self.plugin.name, &key)
            }

            async fn set(&mut self, key: String, value: Vec<u8>, ttl_seconds: u32) {
                if !self
                    .services
                    .cache
                    .set(&self.plugin.name, &key, value, ttl_seconds)
                {
                    tracing::debug!(plugin = %self.plugin.name, key, "cache value too large; not stored");
                }
            }

            async fn remove(&mut self, key: String) {
                self.services.cache.remove(&self.plugin.name, &key)
            }
        }
        };
    };
}

host_imports!(crate::wit::v0_1::cloud::joinery::plugin);
host_imports!(crate::wit::v0_2::cloud::joinery::plugin);

// `types` has no functions; 0.2 shares 0.1's (see `wit::v0_2`).
impl crate::wit::v0_1::cloud::joinery::plugin::types::Host for CallState {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grants::Grants;
    use crate::manifest::PluginManifest;

    /// The host's work on a plugin's request is bounded by the call's deadline, not by a
    /// fresh full timeout: at a deadline already passed, a request to a granted server that
    /// never answers ends with a timeout instead of waiting for the answer.
    #[tokio::test]
    async fn an_outgoing_request_ends_at_the_calls_deadline() {
        // Accepts connections (the kernel does) and never answers.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let manifest = PluginManifest::parse(
            "name: p\nversion: 0.1.0\nkind: cloud-provider\nwit: 0.1.0\nnodeClass: {group: g, version: v1, kind: K}\ncapabilities:\n  http: [\"http://127.0.0.1:*\"]\n",
            "p",
        )
        .unwrap();
        let grants =
            Grants::parse("plugins:\n  p:\n    http: [\"http://127.0.0.1:*\"]\n", "g").unwrap();
        let plugin = Arc::new(PluginContext {
            name: "p".into(),
            config_json: "{}".into(),
            capabilities: grants.capabilities_for(&manifest),
            memory_limit: 1 << 20,
            secret_values: Default::default(),
        });
        let mut gate = HttpGate {
            plugin,
            deadline: Instant::now(),
            egress: Default::default(),
            log_budget: Default::default(),
            op: "test",
        };
        use http_body_util::BodyExt;
        let request = http::Request::get(format!("http://127.0.0.1:{port}/"))
            .body(
                http_body_util::Empty::new()
                    .map_err(|never| match never {})
                    .boxed_unsync(),
            )
            .unwrap();
        let sent =
            Box::into_pin(gate.send_request(request, None, Box::new(async { Ok(()) }))).await;
        assert!(
            matches!(
                sent,
                Err(wasmtime_wasi_http::Error::ConnectionTimeout
                    | wasmtime_wasi_http::Error::ConnectionReadTimeout)
            ),
            "{:?}",
            sent.err()
        );
        drop(listener);
    }
}
