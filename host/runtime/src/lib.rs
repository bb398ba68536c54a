//! Joinery's plugin runtime.
//!
//! Loads WIT components (cloud providers, userData renderers, pricing functions), compiles
//! each once per digest (with an optional on-disk cache), and runs every call in a fresh
//! store with a memory limit, a deadline and a concurrency bound. Host capabilities are
//! denied by default: a plugin gets the intersection of what its manifest requests and what
//! the operator grants, checked on every call.

pub mod bindings;
pub mod error;
pub mod grants;
pub mod kube_names;
pub mod manifest;

pub use error::{CallError, LoadError};
pub mod egress;
pub mod engine;
pub mod services;
pub mod state;
mod trusted_cache;
pub mod plugin;
pub mod redact;
pub mod validate;
pub mod registry;

/// Short paths to the WIT types the host exchanges with plugins.
pub mod types {
    pub use crate::bindings::cloud::exports::joinery::plugin::cloud_provider::{
        CloudError, CreateRequest, Instance, InstanceState, InstanceType, NodeClaim, NodeClass, NodeClassResolution, Offering,
        Overhead, Retryable,
    };
    pub use crate::bindings::cloud::joinery::plugin::types::{Condition, KeyValue, Operator, Requirement, Resource, Taint};
    pub use crate::bindings::pricing::exports::joinery::plugin::pricing::PriceRequest;
    pub use crate::bindings::renderer::exports::joinery::plugin::renderer::{RenderContext, RenderError};
}
