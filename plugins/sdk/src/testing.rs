//! A fake host for native unit tests (only on non-wasm targets).
//!
//! The SDK's host helpers ([`crate::log`], [`crate::config`], [`crate::cache`], [`crate::http`],
//! [`crate::kube`], [`crate::secrets`]) call this thread-local fake instead of the real
//! imports when the code does not run as a component. Rust runs every `#[test]` on its own
//! thread, so each test starts with a fresh default host (configuration `{}`, nothing
//! granted) and tests never see each other's state.
//!
//! ```ignore
//! use joinery_plugin_sdk::testing::{self, FakeHost};
//!
//! #[test]
//! fn reads_config() {
//!     let _host = testing::install(FakeHost::new().with_config(r#"{"cpuRate": 0.1}"#));
//!     let prices = MyPricing::price(vec![/* … */]).unwrap();
//!     assert!(testing::logs().is_empty());
//! }
//! ```

use crate::log::Level;
use std::cell::RefCell;
#[cfg(any(feature = "pricing", feature = "cloud"))]
use std::collections::BTreeMap;

/// Handles the fake host's HTTP requests.
#[cfg(any(feature = "pricing", feature = "cloud"))]
pub type HttpHandler =
    Box<dyn FnMut(&crate::http::Request) -> Result<crate::http::Response, crate::http::Error>>;

/// Handles the fake host's Kubernetes calls; return the JSON the real call would return
/// (anything, e.g. an empty string, for `delete`).
#[cfg(feature = "cloud")]
pub type KubeHandler =
    Box<dyn FnMut(&crate::kube::KubeCall) -> Result<String, crate::kube::KubeError>>;

/// What the host imports answer during a native test. Build one with [`FakeHost::new`]
/// and the `with_*` methods; the fields stay public for inspection and tweaks.
#[non_exhaustive]
pub struct FakeHost {
    /// What `get-config` returns; `{}` by default.
    pub config: String,
    /// Every line logged so far.
    pub logs: Vec<(Level, String)>,
    /// The cache's content (TTLs are ignored).
    #[cfg(any(feature = "pricing", feature = "cloud"))]
    pub cache: BTreeMap<String, Vec<u8>>,
    /// Answers to `get-secret` by name; a name not in the map is `denied`.
    #[cfg(feature = "cloud")]
    pub secrets:
        BTreeMap<String, Result<Vec<crate::secrets::SecretEntry>, crate::secrets::SecretError>>,
    /// Answers outgoing HTTP requests; without one every request fails with a transport error.
    #[cfg(any(feature = "pricing", feature = "cloud"))]
    pub http: Option<HttpHandler>,
    /// Answers Kubernetes calls; without one every call is `unavailable`.
    #[cfg(feature = "cloud")]
    pub kube: Option<KubeHandler>,
}

impl Default for FakeHost {
    fn default() -> Self {
        FakeHost {
            config: "{}".to_string(),
            logs: Vec::new(),
            #[cfg(any(feature = "pricing", feature = "cloud"))]
            cache: BTreeMap::new(),
            #[cfg(feature = "cloud")]
            secrets: BTreeMap::new(),
            #[cfg(any(feature = "pricing", feature = "cloud"))]
            http: None,
            #[cfg(feature = "cloud")]
            kube: None,
        }
    }
}

impl FakeHost {
    /// A host with configuration `{}` that grants nothing.
    pub fn new() -> Self {
        FakeHost::default()
    }

    /// Sets the configuration JSON.
    pub fn with_config(mut self, json: impl Into<String>) -> Self {
        self.config = json.into();
        self
    }

    /// Pre-fills a cache entry.
    #[cfg(any(feature = "pricing", feature = "cloud"))]
    pub fn with_cache(mut self, key: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.cache.insert(key.into(), value.into());
        self
    }

    /// Grants the secret `name` with these keys and values.
    #[cfg(feature = "cloud")]
    pub fn with_secret(mut self, name: impl Into<String>, entries: &[(&str, &str)]) -> Self {
        let entries = entries
            .iter()
            .map(|(k, v)| crate::secrets::SecretEntry::new(*k, v.as_bytes()))
            .collect();
        self.secrets.insert(name.into(), Ok(entries));
        self
    }

    /// Makes reading the secret `name` fail with `error`.
    #[cfg(feature = "cloud")]
    pub fn with_secret_error(
        mut self,
        name: impl Into<String>,
        error: crate::secrets::SecretError,
    ) -> Self {
        self.secrets.insert(name.into(), Err(error));
        self
    }

    /// Installs the HTTP handler.
    #[cfg(any(feature = "pricing", feature = "cloud"))]
    pub fn with_http(
        mut self,
        handler: impl FnMut(&crate::http::Request) -> Result<crate::http::Response, crate::http::Error>
        + 'static,
    ) -> Self {
        self.http = Some(Box::new(handler));
        self
    }

    /// Installs the Kubernetes handler.
    #[cfg(feature = "cloud")]
    pub fn with_kube(
        mut self,
        handler: impl FnMut(&crate::kube::KubeCall) -> Result<String, crate::kube::KubeError> + 'static,
    ) -> Self {
        self.kube = Some(Box::new(handler));
        self
    }
}

thread_local! {
    static HOST: RefCell<FakeHost> = RefCell::new(FakeHost::default());
}

/// Replaces this thread's fake host; the returned guard restores a default host when dropped.
#[must_use = "the fake host is reset when the guard is dropped; bind it: `let _host = install(…)`"]
pub fn install(host: FakeHost) -> FakeHostGuard {
    HOST.with(|h| *h.borrow_mut() = host);
    FakeHostGuard { _private: () }
}

/// Resets this thread's fake host to the default when dropped.
pub struct FakeHostGuard {
    _private: (),
}

impl Drop for FakeHostGuard {
    fn drop(&mut self) {
        // The thread-local may already be gone when the guard drops during thread exit.
        let _ = HOST.try_with(|h| *h.borrow_mut() = FakeHost::default());
    }
}

/// Runs `f` with mutable access to this thread's fake host, e.g. to inspect the cache.
pub fn with_host<R>(f: impl FnOnce(&mut FakeHost) -> R) -> R {
    HOST.with(|h| f(&mut h.borrow_mut()))
}

/// The lines logged so far on this thread.
pub fn logs() -> Vec<(Level, String)> {
    with_host(|h| h.logs.clone())
}

/// Forgets the lines logged so far.
pub fn clear_logs() {
    with_host(|h| h.logs.clear());
}

/// Builds a [`RenderContext`](crate::renderer::RenderContext) for a renderer's tests.
///
/// Start from [`render_context`] (the usual sample) or [`RenderContextBuilder::new`] (only
/// the NodeClaim name and the defaults of `RenderContext::for_claim`), chain setters, then
/// [`build`](RenderContextBuilder::build):
///
/// ```ignore
/// use joinery_plugin_sdk::testing;
///
/// let ctx = testing::render_context().join_token_secret("k3s-join/token", "K10abc::server:def\n").build();
/// ```
#[cfg(feature = "renderer")]
#[derive(Clone, Debug)]
pub struct RenderContextBuilder {
    ctx: crate::renderer::RenderContext,
}

#[cfg(feature = "renderer")]
impl RenderContextBuilder {
    /// A context for NodeClaim `node_claim` with nothing else set.
    pub fn new(node_claim: &str) -> Self {
        RenderContextBuilder {
            ctx: crate::renderer::RenderContext::for_claim(node_claim),
        }
    }

    /// Sets the NodePool name.
    pub fn node_pool(mut self, name: &str) -> Self {
        self.ctx.node_pool = name.into();
        self
    }

    /// Sets the API server endpoint.
    pub fn cluster_endpoint(mut self, url: &str) -> Self {
        self.ctx.cluster_endpoint = url.into();
        self
    }

    /// Sets the cluster name.
    pub fn cluster_name(mut self, name: &str) -> Self {
        self.ctx.cluster_name = name.into();
        self
    }

    /// Sets the provider ID prefix.
    pub fn provider_id_prefix(mut self, prefix: &str) -> Self {
        self.ctx.provider_id_prefix = prefix.into();
        self
    }

    /// Replaces the labels.
    pub fn labels(mut self, labels: &[(&str, &str)]) -> Self {
        self.ctx.labels = labels
            .iter()
            .map(|(k, v)| crate::renderer::KeyValue::new(*k, *v))
            .collect();
        self
    }

    /// Replaces the taints.
    pub fn taints(mut self, taints: Vec<crate::renderer::Taint>) -> Self {
        self.ctx.taints = taints;
        self
    }

    /// Replaces the startup taints.
    pub fn startup_taints(mut self, taints: Vec<crate::renderer::Taint>) -> Self {
        self.ctx.startup_taints = taints;
        self
    }

    /// Sets the NodeClass kubelet settings (a JSON object).
    pub fn kubelet(mut self, json: &str) -> Self {
        self.ctx.kubelet = json.into();
        self
    }

    /// Sets the zone.
    pub fn zone(mut self, zone: &str) -> Self {
        self.ctx.zone = Some(zone.into());
        self
    }

    /// Sets the instance type.
    pub fn instance_type(mut self, name: &str) -> Self {
        self.ctx.instance_type = Some(name.into());
        self
    }

    /// Sets the capacity type.
    pub fn capacity_type(mut self, capacity_type: &str) -> Self {
        self.ctx.capacity_type = Some(capacity_type.into());
        self
    }

    /// Sets the NodeClass `userData`.
    pub fn user_data(mut self, text: Option<&str>) -> Self {
        self.ctx.user_data = text.map(str::to_string);
        self
    }

    /// Sets renderer parameter `key` (replacing an earlier value).
    pub fn parameter(mut self, key: &str, value: &str) -> Self {
        set_parameter(&mut self.ctx, key, value);
        self
    }

    /// Adds a granted secret entry, `name` being `secret-name/key`.
    pub fn secret(mut self, name: &str, value: &str) -> Self {
        self.ctx
            .secrets
            .push(crate::renderer::KeyValue::new(name, value));
        self
    }

    /// Points the `tokenSecret` parameter at the granted secret entry `name`
    /// (`secret-name/key`) and grants it with `token`.
    pub fn join_token_secret(self, name: &str, token: &str) -> Self {
        self.parameter("tokenSecret", name).secret(name, token)
    }

    /// The context.
    pub fn build(self) -> crate::renderer::RenderContext {
        self.ctx
    }
}

/// The sample context the shipped renderers' tests start from: NodeClaim `default-abc12`
/// of NodePool `default`, API server `https://10.0.0.1:6443`, labels `zeta=1` and
/// `karpenter.sh/nodepool=default` (in that order, to show the renderer sorts them) and the
/// registration taint; no parameters or secrets.
#[cfg(feature = "renderer")]
pub fn render_context() -> RenderContextBuilder {
    RenderContextBuilder::new("default-abc12")
        .node_pool("default")
        .cluster_endpoint("https://10.0.0.1:6443")
        .labels(&[("zeta", "1"), ("karpenter.sh/nodepool", "default")])
        .taints(vec![crate::renderer::Taint::registration()])
}

/// Sets renderer parameter `key` of `ctx` to `value`, replacing an earlier value.
#[cfg(feature = "renderer")]
pub fn set_parameter(ctx: &mut crate::renderer::RenderContext, key: &str, value: &str) {
    remove_parameter(ctx, key);
    ctx.parameters
        .push(crate::renderer::KeyValue::new(key, value));
}

/// Removes renderer parameter `key` from `ctx`.
#[cfg(feature = "renderer")]
pub fn remove_parameter(ctx: &mut crate::renderer::RenderContext, key: &str) {
    ctx.parameters.retain(|p| p.key != key);
}

/// The message of an `invalid-parameter` error; panics on anything else.
#[cfg(feature = "renderer")]
#[track_caller]
pub fn invalid_parameter(result: Result<String, crate::renderer::RenderError>) -> String {
    match result {
        Err(crate::renderer::RenderError::InvalidParameter(message)) => message,
        other => panic!("expected invalid-parameter, got {other:?}"),
    }
}

/// Runs `sh` with `args`, feeding `script` on standard input; `None` when there is no shell
/// (so a test can skip instead of failing).
pub fn run_sh(args: &[&str], script: &str) -> Option<std::process::Output> {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut child = Command::new("sh")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    child.stdin.take()?.write_all(script.as_bytes()).ok()?;
    child.wait_with_output().ok()
}

/// Asserts that `sh -n` accepts `script` (a syntax check; nothing runs). Does nothing when
/// there is no shell.
#[track_caller]
pub fn assert_shell_syntax(script: &str) {
    if let Some(out) = run_sh(&["-n"], script) {
        assert!(
            out.status.success(),
            "sh -n refused:\n{script}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
