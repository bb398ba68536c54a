//! # joinery-plugin-sdk
//!
//! Write Joinery plugins in Rust: a plugin is one trait impl plus one export macro.
//!
//! Joinery loads cloud backends, userData renderers and pricing functions as WebAssembly
//! components (WIT package `joinery:plugin@0.2.0`). This crate wraps the bindings that
//! `wit-bindgen` generates for that package:
//!
//! | world | cargo feature | trait | export macro |
//! |---|---|---|---|
//! | `userdata-renderer-plugin` | `renderer` | [`renderer::Renderer`] | [`export_renderer!`] |
//! | `pricing-plugin` | `pricing` | [`pricing::Pricing`] | [`export_pricing!`] |
//! | `cloud-provider-plugin` | `cloud` | [`cloud::CloudProvider`] | [`export_cloud_provider!`] |
//!
//! Enable only the feature of the world you implement. A component only imports the host
//! interfaces its code really calls, so a renderer never asks for HTTP or Kubernetes.
//!
//! ```ignore
//! use joinery_plugin_sdk::renderer::{RenderContext, RenderError, Renderer};
//!
//! struct Hello;
//!
//! impl Renderer for Hello {
//!     fn render(ctx: RenderContext) -> Result<String, RenderError> {
//!         joinery_plugin_sdk::log::info(format!("rendering for {}", ctx.node_claim));
//!         Ok(format!("#!/bin/sh\necho hello from {}\n", ctx.node_claim))
//!     }
//! }
//!
//! joinery_plugin_sdk::export_renderer!(Hello);
//! ```
//!
//! ## Host helpers
//!
//! - [`log`]: structured logging (`log::info(…)`, …), every world;
//! - [`config`] / [`config_json`]: the plugin's configuration from the operator, every world;
//! - [`cache`]: the per-plugin key/value cache, pricing and cloud worlds;
//! - [`http`]: a small blocking HTTP client over `wasi:http`, pricing and cloud worlds;
//! - [`refresh`]: data fetched from an API now and then (a price list), its last good copy
//!   kept in the cache, refreshed on a jittered schedule, pricing and cloud worlds;
//! - [`kube`]: Kubernetes objects as JSON, cloud world;
//! - [`secrets`]: granted secrets, cloud world (renderers get theirs in the render context).
//!
//! Pure helpers, every world:
//!
//! - [`requirements`]: Karpenter's requirement operators (`In`, `NotIn`, `Exists`,
//!   `DoesNotExist`, `Gt`, `Lt`, `Gte`, `Lte`) over the WIT `requirement` record and labels;
//! - [`url`]: percent-encoding of URL path segments and query strings.
//!
//! Renderers that write a shell bootstrap script also get [`bootstrap`]: shell and YAML
//! quoting, the join token from an inline parameter or a granted secret, cluster endpoint
//! parsing, parameter-name checks and the NodeClass kubelet settings as kubelet flags.
//!
//! ## Native unit tests
//!
//! On a native target (`cargo test`) the host imports do not exist. Every helper above then
//! talks to a thread-local [`testing::FakeHost`] instead, which a test fills with
//! configuration, secrets, cache entries and HTTP/Kubernetes handlers, and inspects
//! afterwards (logs, cache). See the crate's README for a walk-through.

#![warn(missing_docs)]

pub mod bindings;

#[cfg(any(feature = "renderer", feature = "pricing", feature = "cloud"))]
mod sys;

#[cfg(any(feature = "renderer", feature = "pricing", feature = "cloud"))]
pub mod log;

#[cfg(any(feature = "pricing", feature = "cloud"))]
pub mod cache;

#[cfg(any(feature = "pricing", feature = "cloud"))]
pub mod http;

#[cfg(any(feature = "pricing", feature = "cloud"))]
pub mod refresh;

#[cfg(feature = "cloud")]
pub mod kube;

#[cfg(feature = "cloud")]
pub mod secrets;

#[cfg(feature = "renderer")]
pub mod renderer;

#[cfg(feature = "renderer")]
pub mod bootstrap;

#[cfg(feature = "pricing")]
pub mod pricing;

#[cfg(feature = "cloud")]
pub mod cloud;

#[cfg(all(
    not(target_arch = "wasm32"),
    any(feature = "renderer", feature = "pricing", feature = "cloud")
))]
pub mod testing;

mod common;

pub mod quantity;

pub mod requirements;

pub mod url;

pub use common::{REGISTRATION_TAINT_EFFECT, REGISTRATION_TAINT_KEY};

/// Re-exported so plugins can use the exact versions the SDK was built with.
pub use serde;
/// Re-exported so plugins can use the exact versions the SDK was built with.
pub use serde_json;

/// The WIT package version this SDK was generated from; write it as `wit:` in `plugin.yaml`.
pub const WIT_VERSION: &str = "0.2.0";

/// Returns the plugin's configuration exactly as the host passed it: a JSON object, `{}`
/// when the operator configured nothing.
#[cfg(any(feature = "renderer", feature = "pricing", feature = "cloud"))]
pub fn config_json() -> String {
    let raw = sys::get_config();
    if raw.trim().is_empty() {
        "{}".to_string()
    } else {
        raw
    }
}

/// Parses the plugin's configuration (the host's `get-config` JSON) into `T`.
///
/// Give `T` `#[serde(default)]` fields so an empty configuration (`{}`) is valid. The error
/// says what is wrong in words an operator can act on.
///
/// ```ignore
/// #[derive(serde::Deserialize, Default)]
/// #[serde(default, rename_all = "camelCase")]
/// struct Config { endpoint: String, retries: u32 }
///
/// let cfg: Config = joinery_plugin_sdk::config()?;
/// ```
#[cfg(any(feature = "renderer", feature = "pricing", feature = "cloud"))]
pub fn config<T: serde::de::DeserializeOwned>() -> Result<T, String> {
    let raw = config_json();
    serde_json::from_str(&raw).map_err(|e| format!("invalid plugin configuration: {e}"))
}

/// Waits `duration` inside the component (between polls of a cloud's answer, say). Native
/// unit tests do not wait, so a test drives a polling loop by its fake host's answers.
pub fn pause(duration: std::time::Duration) {
    #[cfg(target_arch = "wasm32")]
    std::thread::sleep(duration);
    #[cfg(not(target_arch = "wasm32"))]
    let _ = duration;
}
