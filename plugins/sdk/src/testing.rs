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
