//! Joinery's plugin runtime.
//!
//! Loads WIT components (cloud providers, userData renderers, pricing functions), compiles
//! each once per digest (with an optional on-disk cache), and runs every call in a fresh
//! store with a memory limit, a deadline and a concurrency bound. Host capabilities are
//! denied by default: a plugin gets the intersection of what its manifest requests and what
//! the operator grants, checked on every call.

/// The plugin contract's host-side types (the core's), which every WIT version converts to.
pub use joinery_core::contract;
pub mod error;
pub mod grants;
pub mod kube_names;
pub mod manifest;
mod wit;

pub use error::{CallError, LoadError};
pub mod egress;
pub mod engine;
pub mod plugin;
pub mod redact;
pub mod registry;
pub mod services;
pub mod state;
mod trusted_cache;
pub mod validate;
