//! A loaded plugin and the calls into it.
//!
//! Loading checks the digest, compiles (or reuses the compiled component), checks the
//! component's imports against its kind and capabilities, and pre-instantiates it. Each call
//! then gets a fresh store with a memory limit, an epoch deadline and a wall-clock timeout,
//! behind a per-plugin concurrency bound. Whatever the plugin does, the caller gets a
//! classified [`CallError`] and the next call starts clean.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sha2::Digest;
use tokio::sync::Semaphore;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Store, Trap};

use crate::contract;
use crate::engine::PluginEngine;
use crate::error::{CallError, LoadError};
use crate::grants::{Capabilities, Grants};
use crate::manifest::{Limits, PluginKind, PluginManifest};
use crate::services::{CallRecord, HostServices};
use crate::state::{CallState, PluginContext};
use crate::wit::{IntoContract, v0_1, v0_2};
use joinery_core::instance_type::InstanceType;

/// Largest userData a renderer may return (bytes). Clouds accept far less; this only stops garbage.
pub const MAX_RENDERED_BYTES: usize = 1024 * 1024;
/// Extra wall-clock time allowed beyond the epoch deadline before a call is abandoned.
const WALL_CLOCK_GRACE: Duration = Duration::from_millis(500);

/// Where a plugin came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginSource {
    /// Embedded in the joinery binary.
    Builtin,
    /// Loaded from a directory.
    Directory(PathBuf),
}

impl std::fmt::Display for PluginSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PluginSource::Builtin => f.write_str("built-in"),
            PluginSource::Directory(p) => write!(f, "{}", p.display()),
        }
    }
}

/// Hex sha256 of bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Builds the one linker every plugin kind uses. Which imports a component may actually
/// have is checked per component at load time (`check_imports`).
///
/// The host interfaces of every WIT version are linked side by side (a component names them
/// with its version), each backed by the same [`CallState`] implementation.
pub fn build_linker(engine: &PluginEngine) -> Result<Linker<CallState>, String> {
    let mut linker = Linker::new(engine.engine());
    let link = |r: wasmtime::Result<()>| r.map_err(|e| format!("cannot link host imports: {e:#}"));
    link(wasmtime_wasi::p2::add_to_linker_async(&mut linker))?;
    link(wasmtime_wasi_http::p2::add_only_http_to_linker_async(
        &mut linker,
    ))?;
    macro_rules! link_host_interfaces {
        ($($module:ident)::+) => {{
            use $($module)::+ as host;
            type Own = HasSelf<CallState>;
            link(host::log::add_to_linker::<CallState, Own>(&mut linker, |s| s))?;
            link(host::config::add_to_linker::<CallState, Own>(&mut linker, |s| s))?;
            link(host::secrets::add_to_linker::<CallState, Own>(&mut linker, |s| s))?;
            link(host::kubernetes::add_to_linker::<CallState, Own>(&mut linker, |s| s))?;
            link(host::cache::add_to_linker::<CallState, Own>(&mut linker, |s| s))?;
        }};
    }
    link_host_interfaces!(crate::wit::v0_1::cloud::joinery::plugin);
    link_host_interfaces!(crate::wit::v0_2::cloud::joinery::plugin);
    Ok(linker)
}

/// Decides whether a component of `kind` with capabilities `caps` may import `name`.
/// Returns the reason when it may not.
///
/// `wasi:http` (and the clocks it brings) is linked for cloud plugins, for any plugin both
/// requesting and granted HTTP, and for pricing plugins that request HTTP in their manifest
/// even when the operator granted none: every request is still checked against the grant,
/// so such a plugin's requests are all denied and a live pricing plugin prices from its
/// built-in table, instead of the whole plugin set failing to load.
pub fn import_refusal(kind: PluginKind, caps: &Capabilities, name: &str) -> Option<String> {
    let iface = name.split('@').next().unwrap_or(name);
    let (package, _) = iface.split_once('/').unwrap_or((iface, ""));
    let wants_http = matches!(kind, PluginKind::CloudProvider)
        || caps.any_http()
        || (kind == PluginKind::Pricing && caps.requests_http());
    match package {
        "wasi:cli" | "wasi:io" | "wasi:random" => None,
        "joinery:plugin" => match (kind, iface) {
            (_, "joinery:plugin/log" | "joinery:plugin/config" | "joinery:plugin/types") => None,
            (PluginKind::CloudProvider, _) => None,
            (PluginKind::Pricing, "joinery:plugin/cache") => None,
            _ => Some(format!(
                "a {kind} plugin may not use; only cloud-provider plugins get secrets, kubernetes and cache"
            )),
        },
        "wasi:http" if wants_http => None,
        "wasi:http" => Some(format!(
            "needs outgoing HTTP: request it under capabilities.http in plugin.yaml and have the operator grant it ({kind} plugins get no network by default)"
        )),
        "wasi:clocks" if wants_http || caps.clock() => None,
        "wasi:clocks" => Some(format!(
            "reads the clock: set capabilities.clock: true in plugin.yaml and clock: true in the grants file ({kind} plugins are clock-free by default)"
        )),
        // Linked but inert, so that components of toolchains that always import them (most
        // non-Rust ones) load: no directory is preopened, so there is no file to open; TCP,
        // UDP and name lookups are refused. Outgoing HTTP stays wasi:http, checked against
        // the grants.
        "wasi:filesystem" | "wasi:sockets" => None,
        _ => Some(
            "is not provided by this host; rebuild the plugin against the joinery:plugin WIT"
                .into(),
        ),
    }
}

/// Calls one cloud-provider export in whichever WIT version the plugin speaks:
/// `cloud_call!(self, "op", call_x(args…))`. The arguments are written once and type-checked
/// per version, so `&class.into()` converts a contract value to that version's record.
macro_rules! cloud_call {
    ($self:ident, $op:literal, $method:ident ( $($arg:expr),* )) => {{
        match &$self.pre {
            Pre::Cloud(Versioned::V0_1(pre)) => cloud_call!(@in $self, $op, pre, $method($($arg),*)),
            Pre::Cloud(Versioned::V0_2(pre)) => cloud_call!(@in $self, $op, pre, $method($($arg),*)),
            _ => return Err($self.wrong_kind($op, PluginKind::CloudProvider)),
        }
    }};
    (@in $self:ident, $op:literal, $pre:ident, $method:ident ( $($arg:expr),* )) => {{
        let plugin = $self.name().to_string();
        $self
            .run($op, |mut store| async move {
                let result = match $pre.instantiate_async(&mut store).await {
                    Ok(bindings) => bindings.joinery_plugin_cloud_provider().$method(&mut store, $($arg),*).await,
                    Err(e) => Err(e),
                };
                let mapped = result.map(|r| {
                    r.map(IntoContract::into_contract).map_err(|error| CallError::Cloud { plugin: plugin.clone(), op: $op, error: error.into() })
                });
                (store, mapped)
            })
            .await
    }};
}

/// Instantiates a renderer or pricing component in its WIT version and calls one export:
/// `export_call!(pre, store, joinery_plugin_x().call_y(args…))`. As in [`cloud_call!`] the
/// arguments are type-checked per version; the export's error becomes the contract's.
macro_rules! export_call {
    ($pre:ident, $store:ident, $iface:ident () . $method:ident ( $($arg:expr),* )) => {
        match $pre {
            Versioned::V0_1(pre) => match pre.instantiate_async(&mut $store).await {
                Ok(bindings) => bindings.$iface().$method(&mut $store, $($arg),*).await.map(|r| r.map_err(Into::into)),
                Err(e) => Err(e),
            },
            Versioned::V0_2(pre) => match pre.instantiate_async(&mut $store).await {
                Ok(bindings) => bindings.$iface().$method(&mut $store, $($arg),*).await.map(|r| r.map_err(Into::into)),
                Err(e) => Err(e),
            },
        }
    };
}

/// A plugin's pre-instantiated component in the WIT version it was built against.
enum Versioned<V01, V02> {
    /// `joinery:plugin@0.1.0`.
    V0_1(V01),
    /// `joinery:plugin@0.2.0`.
    V0_2(V02),
}

enum Pre {
    Cloud(
        Versioned<
            v0_1::cloud::CloudProviderPluginPre<CallState>,
            v0_2::cloud::CloudProviderPluginPre<CallState>,
        >,
    ),
    Renderer(
        Versioned<
            v0_1::renderer::UserdataRendererPluginPre<CallState>,
            v0_2::renderer::UserdataRendererPluginPre<CallState>,
        >,
    ),
    Pricing(
        Versioned<
            v0_1::pricing::PricingPluginPre<CallState>,
            v0_2::pricing::PricingPluginPre<CallState>,
        >,
    ),
}

/// A plugin ready to be called.
pub struct LoadedPlugin {
    manifest: PluginManifest,
    source: PluginSource,
    digest: String,
    size: usize,
    imports: Vec<String>,
    exports: Vec<String>,
    limits: Limits,
    context: Arc<PluginContext>,
    services: HostServices,
    semaphore: Arc<Semaphore>,
    /// Slots of `create` calls when the manifest limits them (`limits.maxConcurrentCreates`).
    create_slots: Option<Arc<Semaphore>>,
    component: Component,
    pre: Pre,
}

impl std::fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedPlugin")
            .field("name", &self.manifest.name)
            .field("kind", &self.manifest.kind)
            .field("digest", &self.digest)
            .field("source", &self.source)
            .finish()
    }
}

/// Everything needed to load plugins: engine, linker, grants, services.
#[derive(Clone)]
pub struct LoadContext {
    /// The engine.
    pub engine: PluginEngine,
    /// The shared linker.
    pub linker: Arc<Linker<CallState>>,
    /// Operator grants.
    pub grants: Arc<Grants>,
    /// Host services.
    pub services: HostServices,
}

impl LoadContext {
    /// A context with a fresh linker.
    pub fn new(
        engine: PluginEngine,
        grants: Grants,
        services: HostServices,
    ) -> Result<LoadContext, String> {
        let linker = Arc::new(build_linker(&engine)?);
        Ok(LoadContext {
            engine,
            linker,
            grants: Arc::new(grants),
            services,
        })
    }
}

/// The inputs of one plugin load.
pub struct PluginBytes<'a> {
    /// The parsed manifest.
    pub manifest: PluginManifest,
    /// Where it came from.
    pub source: PluginSource,
    /// The component bytes (uncompressed).
    pub wasm: &'a [u8],
    /// A component compiled earlier from the same digest, to reuse.
    pub compiled: Option<Component>,
}

impl LoadedPlugin {
    /// Checks, compiles (unless `compiled` is given) and pre-instantiates a plugin.
    pub fn load(cx: &LoadContext, input: PluginBytes<'_>) -> Result<LoadedPlugin, LoadError> {
        let PluginBytes {
            manifest,
            source,
            wasm,
            compiled,
        } = input;
        let name = manifest.name.clone();
        let digest = sha256_hex(wasm);
        match (&manifest.sha256, &source) {
            (Some(expected), _) if !expected.eq_ignore_ascii_case(&digest) => {
                return Err(LoadError::Digest {
                    plugin: name,
                    expected: expected.clone(),
                    actual: digest,
                });
            }
            (None, PluginSource::Directory(_)) => {
                return Err(LoadError::MissingDigest {
                    plugin: name,
                    actual: digest,
                });
            }
            _ => {}
        }
        let component = match compiled {
            Some(c) => c,
            None => cx.engine.compile(&name, &digest, wasm)?,
        };
        let capabilities = cx.grants.capabilities_for(&manifest);
        let engine = cx.engine.engine();
        let ty = component.component_type();
        let imports: Vec<String> = ty.imports(engine).map(|(n, _)| n.to_string()).collect();
        let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
        for import in &imports {
            if let Some(reason) = import_refusal(manifest.kind, &capabilities, import) {
                return Err(LoadError::Import {
                    plugin: name,
                    import: import.clone(),
                    reason,
                });
            }
        }
        let expected = manifest.kind.export_interface(&manifest.wit);
        if !exports.iter().any(|e| e == &expected) {
            // The kind's interface at another version: say which versions this host speaks.
            let unversioned = manifest.kind.export_interface("");
            if let Some(built) = exports
                .iter()
                .find_map(|e| e.strip_prefix(unversioned.as_str()))
            {
                let supported = crate::manifest::SUPPORTED_WIT_VERSIONS;
                let fix = if supported.contains(&built) {
                    format!(
                        "set `wit: {built}` in plugin.yaml (it says {})",
                        manifest.wit
                    )
                } else {
                    "rebuild it against a supported version (the joinery-plugin-sdk of this host's release) and set `wit:` in plugin.yaml to it".to_string()
                };
                return Err(LoadError::WitVersion {
                    plugin: name,
                    built: built.to_string(),
                    supported: supported.join(", "),
                    fix,
                });
            }
            return Err(LoadError::Export {
                plugin: name,
                expected,
                found: exports.join(", "),
            });
        }
        let link_err = |e: wasmtime::Error| LoadError::Link {
            plugin: manifest.name.clone(),
            message: format!("{e:#}"),
        };
        let instance_pre = cx.linker.instantiate_pre(&component).map_err(link_err)?;
        // The export check above settled the version: the manifest's `wit` is what it exports.
        let v0_1 = manifest.wit == "0.1.0";
        let pre = match (manifest.kind, v0_1) {
            (PluginKind::CloudProvider, true) => Pre::Cloud(Versioned::V0_1(
                v0_1::cloud::CloudProviderPluginPre::new(instance_pre).map_err(link_err)?,
            )),
            (PluginKind::CloudProvider, false) => Pre::Cloud(Versioned::V0_2(
                v0_2::cloud::CloudProviderPluginPre::new(instance_pre).map_err(link_err)?,
            )),
            (PluginKind::UserdataRenderer, true) => Pre::Renderer(Versioned::V0_1(
                v0_1::renderer::UserdataRendererPluginPre::new(instance_pre).map_err(link_err)?,
            )),
            (PluginKind::UserdataRenderer, false) => Pre::Renderer(Versioned::V0_2(
                v0_2::renderer::UserdataRendererPluginPre::new(instance_pre).map_err(link_err)?,
            )),
            (PluginKind::Pricing, true) => Pre::Pricing(Versioned::V0_1(
                v0_1::pricing::PricingPluginPre::new(instance_pre).map_err(link_err)?,
            )),
            (PluginKind::Pricing, false) => Pre::Pricing(Versioned::V0_2(
                v0_2::pricing::PricingPluginPre::new(instance_pre).map_err(link_err)?,
            )),
        };
        let limits = capabilities.grant().effective_limits(&manifest.limits);
        let config = capabilities
            .grant()
            .config
            .clone()
            .unwrap_or_else(|| serde_json::json!({}));
        let context = Arc::new(PluginContext {
            name: name.clone(),
            config_json: config.to_string(),
            capabilities,
            memory_limit: limits.memory_mib as usize * 1024 * 1024,
            secret_values: Default::default(),
        });
        Ok(LoadedPlugin {
            semaphore: Arc::new(Semaphore::new(limits.max_concurrency as usize)),
            create_slots: limits
                .max_concurrent_creates
                .map(|n| Arc::new(Semaphore::new(n as usize))),
            size: wasm.len(),
            manifest,
            source,
            digest,
            imports,
            exports,
            limits,
            context,
            services: cx.services.clone(),
            component,
            pre,
        })
    }

    /// The compiled component.
    pub fn component(&self) -> &Component {
        &self.component
    }
    /// The manifest.
    pub fn manifest(&self) -> &PluginManifest {
        &self.manifest
    }
    /// Plugin name.
    pub fn name(&self) -> &str {
        &self.manifest.name
    }
    /// Plugin kind.
    pub fn kind(&self) -> PluginKind {
        self.manifest.kind
    }
    /// Where it was loaded from.
    pub fn source(&self) -> &PluginSource {
        &self.source
    }
    /// Hex sha256 of the component.
    pub fn digest(&self) -> &str {
        &self.digest
    }
    /// Component size in bytes (uncompressed).
    pub fn size(&self) -> usize {
        self.size
    }
    /// The component's imports.
    pub fn imports(&self) -> &[String] {
        &self.imports
    }
    /// The component's exports.
    pub fn exports(&self) -> &[String] {
        &self.exports
    }
    /// Effective limits.
    pub fn limits(&self) -> Limits {
        self.limits
    }
    /// Effective capabilities.
    pub fn capabilities(&self) -> &Capabilities {
        &self.context.capabilities
    }

    /// Runs one call: permit, fresh store, limits, deadline, classification.
    async fn run<T, F, Fut>(&self, op: &'static str, body: F) -> Result<T, CallError>
    where
        F: FnOnce(Store<CallState>) -> Fut,
        Fut: Future<Output = (Store<CallState>, wasmtime::Result<Result<T, CallError>>)>,
    {
        let started = std::time::Instant::now();
        let plugin = self.name().to_string();
        let timeout = Duration::from_millis(u64::from(self.limits.timeout_ms));
        // Wait for a slot at most one call's deadline: calls queued behind stuck ones fail
        // with a clear error instead of piling up without bound.
        let _permit = match tokio::time::timeout(timeout, self.semaphore.acquire()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_closed)) => {
                return Err(CallError::Host {
                    plugin: plugin.clone(),
                    op,
                    message: "plugin is being unloaded".into(),
                });
            }
            Err(_elapsed) => {
                let error = CallError::Saturated {
                    plugin: plugin.clone(),
                    op,
                    limit: "maxConcurrency",
                    max_concurrency: self.limits.max_concurrency,
                    waited_ms: self.limits.timeout_ms,
                };
                let record = CallRecord {
                    plugin: &plugin,
                    method: op,
                    duration: started.elapsed(),
                    error: Some(error.class()),
                    peak_memory_bytes: 0,
                    memory_limit_bytes: self.context.memory_limit,
                };
                self.services.observers.notify(&record);
                return Err(error);
            }
        };
        // One deadline for the guest (epoch) and for the host's work on its behalf (its
        // outgoing requests, see `state::HttpGate`).
        let deadline = tokio::time::Instant::now() + timeout;
        let state = CallState::new(self.context.clone(), self.services.clone(), op, deadline);
        let memory_hit = state.limiter.hit.clone();
        let memory_peak = state.limiter.peak.clone();
        let stderr = state.stderr.clone();
        let mut store = Store::new(self.pre_engine(), state);
        store.limiter(|s| &mut s.limiter);
        // On every epoch tick the guest yields to the executor, so a spinning plugin shares
        // its worker thread with the rest of the host (probes, other loops) instead of holding
        // it for the whole deadline; past the deadline the next tick interrupts it.
        // The CPU deadline is in real time (epoch ticks are), whatever clock the host runs on.
        // In a simulation's virtual time the guest runs on without yielding (see
        // `HostServices::virtual_clock`).
        let cpu_deadline = std::time::Instant::now() + timeout;
        let yields = self.services.virtual_clock.is_none();
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            Ok(if std::time::Instant::now() >= cpu_deadline {
                wasmtime::UpdateDeadline::Interrupt
            } else if yields {
                wasmtime::UpdateDeadline::Yield(1)
            } else {
                wasmtime::UpdateDeadline::Continue(1)
            })
        });
        let outcome = tokio::time::timeout(timeout + WALL_CLOCK_GRACE, body(store)).await;
        let classify = |error: wasmtime::Error| -> CallError {
            if memory_hit.load(std::sync::atomic::Ordering::Relaxed) {
                return CallError::MemoryLimit {
                    plugin: plugin.clone(),
                    op,
                    limit_mib: self.limits.memory_mib,
                };
            }
            if matches!(error.downcast_ref::<Trap>(), Some(Trap::Interrupt)) {
                return CallError::Timeout {
                    plugin: plugin.clone(),
                    op,
                    limit_ms: self.limits.timeout_ms,
                };
            }
            // The panic's own words first (a Rust guest prints them to stderr), then the kind
            // of trap; the wasm frames go to the log only, never to events and conditions.
            let output = String::from_utf8_lossy(&stderr.contents()).to_string();
            let panic = output
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
                .collect::<Vec<_>>()
                .join(" ");
            let trap = match error.downcast_ref::<Trap>() {
                Some(trap) => trap.to_string(),
                None => error.root_cause().to_string(),
            };
            let version = &self.manifest.version;
            let mut message = if panic.is_empty() {
                format!("{trap} (plugin version {version})")
            } else {
                format!("{panic} (plugin version {version}; wasm trap: {trap})")
            };
            let mut frames = format!("{error:?}");
            // Scrubbed before anything is logged (the call's result is scrubbed again below).
            let secrets = &self.context.secret_values;
            if !secrets.is_empty() {
                secrets.scrub_in_place(&mut message);
                secrets.scrub_in_place(&mut frames);
            }
            tracing::warn!(plugin = %plugin, version = %version, op, %frames, "plugin {plugin} {version} trapped in {op}: {message}");
            CallError::Trap {
                plugin: plugin.clone(),
                op,
                message,
            }
        };
        let result = match outcome {
            Err(_elapsed) => Err(CallError::Timeout {
                plugin: plugin.clone(),
                op,
                limit_ms: self.limits.timeout_ms,
            }),
            Ok((_store, Err(error))) => Err(classify(error)),
            Ok((_store, Ok(result))) => result,
        };
        // What the plugin says reaches Events and conditions: never with a secret in it.
        let result = result.map_err(|mut e| {
            e.scrub(&self.context.secret_values);
            e
        });
        match &result {
            Err(e) => {
                tracing::debug!(plugin = %plugin, op, error = %e, kind = e.metric_label(), "plugin call failed")
            }
            Ok(_) => {
                tracing::trace!(plugin = %plugin, op, duration_ms = started.elapsed().as_millis() as u64, "plugin call")
            }
        }
        self.services.observers.notify(&CallRecord {
            plugin: &plugin,
            method: op,
            duration: started.elapsed(),
            error: result.as_ref().err().map(CallError::class),
            peak_memory_bytes: memory_peak.load(std::sync::atomic::Ordering::Relaxed),
            memory_limit_bytes: self.context.memory_limit,
        });
        result
    }

    fn pre_engine(&self) -> &wasmtime::Engine {
        match &self.pre {
            Pre::Cloud(Versioned::V0_1(p)) => p.engine(),
            Pre::Cloud(Versioned::V0_2(p)) => p.engine(),
            Pre::Renderer(Versioned::V0_1(p)) => p.engine(),
            Pre::Renderer(Versioned::V0_2(p)) => p.engine(),
            Pre::Pricing(Versioned::V0_1(p)) => p.engine(),
            Pre::Pricing(Versioned::V0_2(p)) => p.engine(),
        }
    }

    /// The WIT version the plugin was built against (`0.1.0`, `0.2.0`).
    pub fn wit_version(&self) -> &str {
        &self.manifest.wit
    }

    fn wrong_kind(&self, op: &'static str, wanted: PluginKind) -> CallError {
        CallError::Host {
            plugin: self.name().to_string(),
            op,
            message: format!(
                "{op} needs a {wanted} plugin, but this one is a {}",
                self.kind()
            ),
        }
    }

    /// Renders userData (renderer plugins). In a simulation
    /// ([`HostServices::registrations`]), a 0.2 renderer is then asked what the node will
    /// register with, and its promise goes to the simulated kubelets.
    pub async fn render(&self, context: &contract::RenderContext) -> Result<String, CallError> {
        let user_data = self.render_only(context).await?;
        if let Some(sink) = &self.services.registrations {
            match self.registration(context).await {
                Ok(Some(promise)) => sink.declared(&user_data, &promise),
                Ok(None) => {}
                // The launch goes on; a userData the kubelet cannot read then fails to boot,
                // and says why.
                Err(error) => {
                    tracing::warn!(plugin = %self.name(), %error, "the renderer could not say what the node will register with")
                }
            }
        }
        Ok(user_data)
    }

    /// The `render` call itself.
    async fn render_only(&self, context: &contract::RenderContext) -> Result<String, CallError> {
        let Pre::Renderer(pre) = &self.pre else {
            return Err(self.wrong_kind("render", PluginKind::UserdataRenderer));
        };
        for secret in &context.secrets {
            self.context.secret_values.remember(secret.value.as_bytes());
        }
        let plugin = self.name().to_string();
        self.run("render", |mut store| async move {
            let result = export_call!(pre, store, joinery_plugin_renderer().call_render(&context.into()));
            let mapped = result.map(|r: Result<String, contract::RenderError>| match r {
                Ok(text) if text.len() > MAX_RENDERED_BYTES => Err(CallError::InvalidOutput {
                    plugin: plugin.clone(),
                    op: "render",
                    message: format!(
                        "userData is {} bytes, more than the {MAX_RENDERED_BYTES}-byte ceiling",
                        text.len()
                    ),
                }),
                // Nothing an instance could boot with: refused here rather than launched.
                Ok(text) if text.chars().all(|c| c == '\0' || c.is_whitespace()) => {
                    Err(CallError::Render {
                        plugin: plugin.clone(),
                        error: contract::RenderError::InvalidTemplate(format!(
                            "the rendered userData is empty{}: an instance launched with it could never join the cluster; check the renderer's template and parameters",
                            if text.is_empty() { "" } else { " (only NUL bytes and blanks)" }
                        )),
                    })
                }
                Ok(text) => Ok(text),
                Err(error) => Err(CallError::Render {
                    plugin: plugin.clone(),
                    error,
                }),
            });
            (store, mapped)
        })
        .await
    }

    /// `registration` (WIT 0.2, renderer plugins): what a node booted from this context's
    /// userData registers with, as the renderer promises it. `None` when it makes no
    /// promise, which a 0.1 renderer never does.
    pub async fn registration(
        &self,
        context: &contract::RenderContext,
    ) -> Result<Option<contract::NodeRegistration>, CallError> {
        let pre = match &self.pre {
            Pre::Renderer(Versioned::V0_1(_)) => return Ok(None),
            Pre::Renderer(Versioned::V0_2(pre)) => pre,
            _ => return Err(self.wrong_kind("registration", PluginKind::UserdataRenderer)),
        };
        for secret in &context.secrets {
            self.context.secret_values.remember(secret.value.as_bytes());
        }
        let plugin = self.name().to_string();
        self.run("registration", |mut store| async move {
            let result = async {
                let bindings = pre.instantiate_async(&mut store).await?;
                bindings
                    .joinery_plugin_renderer()
                    .call_registration(&mut store, &context.into())
                    .await
            }
            .await;
            let mapped = result.map(|r| match r {
                Ok(promise) => Ok(promise.into_contract()),
                Err(error) => Err(CallError::Render {
                    plugin: plugin.clone(),
                    error: error.into(),
                }),
            });
            (store, mapped)
        })
        .await
    }

    /// Prices a batch (pricing plugins). Checks one finite, non-negative price per request.
    pub async fn price(
        &self,
        requests: &[contract::PriceRequest],
    ) -> Result<Vec<Option<f64>>, CallError> {
        let Pre::Pricing(pre) = &self.pre else {
            return Err(self.wrong_kind("price", PluginKind::Pricing));
        };
        let plugin = self.name().to_string();
        self.run("price", |mut store| async move {
            let result = export_call!(
                pre,
                store,
                joinery_plugin_pricing()
                    .call_price(&requests.iter().map(Into::into).collect::<Vec<_>>())
            );
            let mapped = result.map(|r| match r {
                Err(message) => Err(CallError::Pricing {
                    plugin: plugin.clone(),
                    message,
                }),
                Ok(prices) => check_prices(&plugin, requests.len(), prices),
            });
            (store, mapped)
        })
        .await
    }

    /// `resolve-node-class`.
    pub async fn resolve_node_class(
        &self,
        class: &contract::NodeClass,
    ) -> Result<contract::NodeClassResolution, CallError> {
        cloud_call!(
            self,
            "resolve-node-class",
            call_resolve_node_class(&class.into())
        )
    }

    /// `get-instance-types`: checked (quantities, zones, capacity types, prices) and
    /// converted to the core's instance types.
    pub async fn get_instance_types(
        &self,
        class: &contract::NodeClass,
    ) -> Result<Vec<InstanceType>, CallError> {
        let types: Vec<contract::InstanceType> = cloud_call!(
            self,
            "get-instance-types",
            call_get_instance_types(&class.into())
        )?;
        crate::validate::instance_types(self.name(), &types)?;
        types
            .iter()
            .map(|t| {
                t.to_core().map_err(|message| CallError::InvalidOutput {
                    plugin: self.name().to_string(),
                    op: "get-instance-types",
                    message,
                })
            })
            .collect()
    }

    /// `create`.
    ///
    /// With `limits.maxConcurrentCreates`, a create first waits for one of those slots (at
    /// most one call deadline, then it fails as saturated), so launches run one after another.
    pub async fn create(
        &self,
        request: &contract::CreateRequest,
    ) -> Result<contract::Instance, CallError> {
        let _create_slot = match &self.create_slots {
            Some(slots) => {
                let timeout = Duration::from_millis(u64::from(self.limits.timeout_ms));
                match tokio::time::timeout(timeout, slots.clone().acquire_owned()).await {
                    Ok(Ok(permit)) => Some(permit),
                    Ok(Err(_closed)) => {
                        return Err(CallError::Host {
                            plugin: self.name().to_string(),
                            op: "create",
                            message: "plugin is being unloaded".into(),
                        });
                    }
                    Err(_elapsed) => {
                        return Err(CallError::Saturated {
                            plugin: self.name().to_string(),
                            op: "create",
                            limit: "maxConcurrentCreates",
                            max_concurrency: self.limits.max_concurrent_creates.unwrap_or(1),
                            waited_ms: self.limits.timeout_ms,
                        });
                    }
                }
            }
            None => None,
        };
        let instance = cloud_call!(self, "create", call_create(&request.into()))?;
        crate::validate::instance(self.name(), "create", &instance)?;
        Ok(instance)
    }

    /// `get`.
    pub async fn get(&self, provider_id: &str) -> Result<contract::Instance, CallError> {
        let instance = cloud_call!(self, "get", call_get(provider_id))?;
        crate::validate::instance(self.name(), "get", &instance)?;
        Ok(instance)
    }

    /// `list`.
    pub async fn list(&self) -> Result<Vec<contract::Instance>, CallError> {
        let instances: Vec<contract::Instance> = cloud_call!(self, "list", call_list())?;
        for instance in &instances {
            crate::validate::instance(self.name(), "list", instance)?;
        }
        Ok(instances)
    }

    /// `delete`.
    pub async fn delete(&self, provider_id: &str) -> Result<(), CallError> {
        cloud_call!(self, "delete", call_delete(provider_id))
    }

    /// `reconcile-instance`.
    pub async fn reconcile_instance(
        &self,
        claim: &contract::NodeClaim,
        class: &contract::NodeClass,
    ) -> Result<(), CallError> {
        cloud_call!(
            self,
            "reconcile-instance",
            call_reconcile_instance(&claim.into(), &class.into())
        )
    }

    /// `is-drifted`.
    pub async fn is_drifted(
        &self,
        claim: &contract::NodeClaim,
        class: &contract::NodeClass,
    ) -> Result<Option<String>, CallError> {
        cloud_call!(
            self,
            "is-drifted",
            call_is_drifted(&claim.into(), &class.into())
        )
    }

    /// `repair-policies` (WIT 0.2): the node conditions this cloud calls unhealthy. `None`
    /// when the plugin leaves the choice to the host, which a 0.1 plugin always does.
    pub async fn repair_policies(&self) -> Result<Option<Vec<contract::RepairPolicy>>, CallError> {
        match &self.pre {
            Pre::Cloud(Versioned::V0_1(_)) => Ok(None),
            Pre::Cloud(Versioned::V0_2(pre)) => {
                cloud_call!(@in self, "repair-policies", pre, call_repair_policies())
            }
            _ => Err(self.wrong_kind("repair-policies", PluginKind::CloudProvider)),
        }
    }

    /// `reboot` (WIT 0.2): reboots the instance in place. A 0.1 plugin cannot: the error
    /// is [`contract::CloudError::Unsupported`], as a 0.2 cloud without reboot answers.
    pub async fn reboot(&self, provider_id: &str) -> Result<(), CallError> {
        match &self.pre {
            Pre::Cloud(Versioned::V0_1(_)) => Err(CallError::Cloud {
                plugin: self.name().to_string(),
                op: "reboot",
                error: contract::CloudError::Unsupported(format!(
                    "plugin {} speaks WIT 0.1, which has no reboot; rebuild it against 0.2 to reboot before replacing",
                    self.name()
                )),
            }),
            Pre::Cloud(Versioned::V0_2(pre)) => {
                cloud_call!(@in self, "reboot", pre, call_reboot(provider_id))
            }
            _ => Err(self.wrong_kind("reboot", PluginKind::CloudProvider)),
        }
    }
}

fn check_prices(
    plugin: &str,
    expected: usize,
    prices: Vec<Option<f64>>,
) -> Result<Vec<Option<f64>>, CallError> {
    let bad = |message: String| CallError::InvalidOutput {
        plugin: plugin.to_string(),
        op: "price",
        message,
    };
    if prices.len() != expected {
        return Err(bad(format!(
            "returned {} prices for {expected} requests",
            prices.len()
        )));
    }
    if let Some((i, p)) = prices
        .iter()
        .enumerate()
        .find(|(_, p)| p.is_some_and(|p| !p.is_finite() || p < 0.0))
    {
        return Err(bad(format!(
            "price[{i}] = {p:?} is not a finite, non-negative number"
        )));
    }
    Ok(prices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn price_checks_length_and_values() {
        assert!(check_prices("p", 2, vec![Some(1.0), None]).is_ok());
        let e = check_prices("p", 2, vec![Some(1.0)]).unwrap_err();
        assert!(e.to_string().contains("1 prices for 2 requests"), "{e}");
        let e = check_prices("p", 2, vec![Some(1.0), Some(f64::NAN)]).unwrap_err();
        assert!(e.to_string().contains("price[1]"), "{e}");
        assert!(check_prices("p", 1, vec![Some(-1.0)]).is_err());
    }

    #[test]
    fn imports_are_refused_by_kind_and_capability() {
        let caps = Capabilities::deny_all("r");
        assert!(
            import_refusal(PluginKind::UserdataRenderer, &caps, "wasi:cli/stdout@0.2.6").is_none()
        );
        assert!(
            import_refusal(
                PluginKind::UserdataRenderer,
                &caps,
                "joinery:plugin/log@0.1.0"
            )
            .is_none()
        );
        let http = import_refusal(
            PluginKind::UserdataRenderer,
            &caps,
            "wasi:http/outgoing-handler@0.2.12",
        )
        .unwrap();
        assert!(http.contains("capabilities.http"), "{http}");
        let clock =
            import_refusal(PluginKind::Pricing, &caps, "wasi:clocks/wall-clock@0.2.12").unwrap();
        assert!(clock.contains("clock: true"), "{clock}");
        assert!(
            import_refusal(
                PluginKind::Pricing,
                &caps,
                "wasi:http/outgoing-handler@0.2.12"
            )
            .is_some()
        );
        assert!(
            import_refusal(
                PluginKind::UserdataRenderer,
                &caps,
                "joinery:plugin/secrets@0.1.0"
            )
            .is_some()
        );
        assert!(
            import_refusal(
                PluginKind::CloudProvider,
                &caps,
                "joinery:plugin/secrets@0.1.0"
            )
            .is_none()
        );
        // Inert imports: linked, reaching nothing (see the runtime's capability tests).
        assert!(
            import_refusal(
                PluginKind::UserdataRenderer,
                &caps,
                "wasi:filesystem/preopens@0.2.12"
            )
            .is_none()
        );
        assert!(
            import_refusal(
                PluginKind::UserdataRenderer,
                &caps,
                "wasi:sockets/tcp@0.2.12"
            )
            .is_none()
        );
        assert!(import_refusal(PluginKind::CloudProvider, &caps, "evil:thing/x").is_some());
    }

    #[test]
    fn a_pricing_plugin_requesting_http_links_it_even_ungranted() {
        let manifest = |kind: &str| {
            let text = format!(
                "name: p\nversion: 0.1.0\nkind: {kind}\nwit: 0.1.0\ncapabilities:\n  http: [\"https://prices.example.com\"]\n"
            );
            PluginManifest::parse(&text, "t").unwrap()
        };
        let caps = Grants::default().capabilities_for(&manifest("pricing"));
        assert!(!caps.any_http());
        for import in [
            "wasi:http/outgoing-handler@0.2.12",
            "wasi:clocks/wall-clock@0.2.12",
        ] {
            assert_eq!(
                import_refusal(PluginKind::Pricing, &caps, import),
                None,
                "{import}"
            );
        }
        // Linked, but every request is still checked: nothing is granted.
        assert!(caps.check_http("https", "prices.example.com", 443).is_err());
    }
}
