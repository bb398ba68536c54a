//! The one place where host imports are called.
//!
//! On `wasm32` every function forwards to the generated import. Elsewhere (native unit
//! tests) the imports are unreachable stubs, so every function goes to the thread-local
//! [`crate::testing::FakeHost`] instead.
//!
//! Shared interfaces (`log`, `config`, `cache`, `wasi:http`) exist in several worlds' bindings.
//! Their core-level import names are identical, so any enabled world's binding produces the
//! same import; the component ends up with exactly the imports the plugin calls.

use crate::log::Level;

#[cfg(target_arch = "wasm32")]
mod imp {
    use super::Level;

    #[cfg(all(feature = "cloud", not(feature = "renderer"), not(feature = "pricing")))]
    use crate::bindings::cloud::joinery::plugin as base;
    #[cfg(all(feature = "pricing", not(feature = "renderer")))]
    use crate::bindings::pricing::joinery::plugin as base;
    #[cfg(feature = "renderer")]
    use crate::bindings::renderer::joinery::plugin as base;

    pub(crate) fn log(level: Level, message: &str) {
        use base::log::Level as L;
        let level = match level {
            Level::Trace => L::Trace,
            Level::Debug => L::Debug,
            Level::Info => L::Info,
            Level::Warn => L::Warn,
            Level::Error => L::Error,
        };
        base::log::log(level, message);
    }

    pub(crate) fn get_config() -> String {
        base::config::get_config()
    }

    #[cfg(all(feature = "cloud", not(feature = "pricing")))]
    use crate::bindings::cloud::joinery::plugin::cache as cache_if;
    #[cfg(feature = "pricing")]
    use crate::bindings::pricing::joinery::plugin::cache as cache_if;

    #[cfg(any(feature = "pricing", feature = "cloud"))]
    pub(crate) fn cache_get(key: &str) -> Option<Vec<u8>> {
        cache_if::get(key)
    }

    #[cfg(any(feature = "pricing", feature = "cloud"))]
    pub(crate) fn cache_set(key: &str, value: &[u8], ttl_seconds: u32) {
        cache_if::set(key, value, ttl_seconds)
    }

    #[cfg(any(feature = "pricing", feature = "cloud"))]
    pub(crate) fn cache_remove(key: &str) {
        cache_if::remove(key)
    }

    #[cfg(any(feature = "pricing", feature = "cloud"))]
    pub(crate) fn http_send(
        request: &crate::http::Request,
    ) -> Result<crate::http::Response, crate::http::Error> {
        crate::http::wasi::send(request)
    }

    #[cfg(feature = "cloud")]
    pub(crate) use crate::bindings::cloud::joinery::plugin::secrets::get_secret;

    #[cfg(feature = "cloud")]
    mod kube_imp {
        use crate::bindings::cloud::joinery::plugin::kubernetes as k;
        use crate::kube::KubeCall;

        pub(crate) fn kube(call: KubeCall) -> Result<String, k::KubeError> {
            match call {
                KubeCall::Get { target, name } => k::get(&target, &name),
                KubeCall::List {
                    target,
                    label_selector,
                } => k::list(&target, label_selector.as_deref()),
                KubeCall::Create { target, body } => k::create(&target, &body),
                KubeCall::Patch {
                    target,
                    name,
                    kind,
                    body,
                } => k::patch(&target, &name, kind, &body),
                KubeCall::Delete { target, name } => {
                    k::delete(&target, &name).map(|()| String::new())
                }
            }
        }
    }
    #[cfg(feature = "cloud")]
    pub(crate) use kube_imp::kube;
}

#[cfg(not(target_arch = "wasm32"))]
mod imp {
    use super::Level;
    use crate::testing::with_host;

    pub(crate) fn log(level: Level, message: &str) {
        with_host(|h| h.logs.push((level, message.to_string())));
    }

    pub(crate) fn get_config() -> String {
        with_host(|h| h.config.clone())
    }

    #[cfg(any(feature = "pricing", feature = "cloud"))]
    pub(crate) fn cache_get(key: &str) -> Option<Vec<u8>> {
        with_host(|h| h.cache.get(key).cloned())
    }

    #[cfg(any(feature = "pricing", feature = "cloud"))]
    pub(crate) fn cache_set(key: &str, value: &[u8], _ttl_seconds: u32) {
        with_host(|h| {
            h.cache.insert(key.to_string(), value.to_vec());
        });
    }

    #[cfg(any(feature = "pricing", feature = "cloud"))]
    pub(crate) fn cache_remove(key: &str) {
        with_host(|h| {
            h.cache.remove(key);
        });
    }

    #[cfg(any(feature = "pricing", feature = "cloud"))]
    pub(crate) fn http_send(
        request: &crate::http::Request,
    ) -> Result<crate::http::Response, crate::http::Error> {
        // Take the handler out while it runs so it may itself log or use the cache.
        let handler = with_host(|h| h.http.take());
        match handler {
            Some(mut f) => {
                let result = f(request);
                with_host(|h| {
                    if h.http.is_none() {
                        h.http = Some(f);
                    }
                });
                result
            }
            None => Err(crate::http::Error::Transport(format!(
                "no HTTP handler installed in the fake host (request: {} {})",
                request.method, request.url
            ))),
        }
    }

    #[cfg(feature = "cloud")]
    pub(crate) fn get_secret(
        name: &str,
    ) -> Result<Vec<crate::secrets::SecretEntry>, crate::secrets::SecretError> {
        with_host(|h| match h.secrets.get(name) {
            Some(result) => result.clone(),
            None => Err(crate::secrets::SecretError::Denied(format!(
                "secret `{name}` is not granted to this plugin (fake host)"
            ))),
        })
    }

    #[cfg(feature = "cloud")]
    pub(crate) fn kube(call: crate::kube::KubeCall) -> Result<String, crate::kube::KubeError> {
        let handler = with_host(|h| h.kube.take());
        match handler {
            Some(mut f) => {
                let result = f(&call);
                with_host(|h| {
                    if h.kube.is_none() {
                        h.kube = Some(f);
                    }
                });
                result
            }
            None => Err(crate::kube::KubeError::Unavailable(format!(
                "no Kubernetes handler installed in the fake host (call: {call:?})"
            ))),
        }
    }
}

pub(crate) use imp::*;
