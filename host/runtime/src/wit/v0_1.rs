//! WIT v0.1 (package `joinery:plugin@0.1.0`): the generated host bindings and their
//! conversions to and from the [`crate::contract`] types.
//!
//! One bindings module per world. The cloud-provider world imports every host interface, so
//! the renderer and pricing worlds reuse its import bindings (`with`), and the host
//! implements each import once.

#![allow(missing_docs)]

use super::{list, list_ref};
use crate::contract as c;

/// The `cloud-provider-plugin` world (and the shared host imports).
pub mod cloud {
    wasmtime::component::bindgen!({
        world: "joinery:plugin/cloud-provider-plugin@0.1.0",
        path: "../../wit/v0.1",
        imports: { default: async },
        exports: { default: async },
        with: {
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
    });
}

/// The `userdata-renderer-plugin` world.
pub mod renderer {
    wasmtime::component::bindgen!({
        world: "joinery:plugin/userdata-renderer-plugin@0.1.0",
        path: "../../wit/v0.1",
        imports: { default: async },
        exports: { default: async },
        with: {
            "joinery:plugin/log": super::cloud::joinery::plugin::log,
            "joinery:plugin/config": super::cloud::joinery::plugin::config,
            "joinery:plugin/types": super::cloud::joinery::plugin::types,
        },
    });
}

/// The `pricing-plugin` world.
pub mod pricing {
    wasmtime::component::bindgen!({
        world: "joinery:plugin/pricing-plugin@0.1.0",
        path: "../../wit/v0.1",
        imports: { default: async },
        exports: { default: async },
        with: {
            "joinery:plugin/log": super::cloud::joinery::plugin::log,
            "joinery:plugin/config": super::cloud::joinery::plugin::config,
            "joinery:plugin/cache": super::cloud::joinery::plugin::cache,
            "joinery:plugin/types": super::cloud::joinery::plugin::types,
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
    });
}

use cloud::exports::joinery::plugin::cloud_provider as w;
use cloud::joinery::plugin::types as wt;
use pricing::exports::joinery::plugin::pricing as wp;
use renderer::exports::joinery::plugin::renderer as wr;

impl From<&c::KeyValue> for wt::KeyValue {
    fn from(v: &c::KeyValue) -> Self {
        wt::KeyValue {
            key: v.key.clone(),
            value: v.value.clone(),
        }
    }
}

impl From<wt::KeyValue> for c::KeyValue {
    fn from(v: wt::KeyValue) -> Self {
        c::KeyValue {
            key: v.key,
            value: v.value,
        }
    }
}

impl From<&c::Resource> for wt::Resource {
    fn from(r: &c::Resource) -> Self {
        wt::Resource {
            name: r.name.clone(),
            quantity: r.quantity.clone(),
        }
    }
}

impl From<wt::Resource> for c::Resource {
    fn from(r: wt::Resource) -> Self {
        c::Resource {
            name: r.name,
            quantity: r.quantity,
        }
    }
}

impl From<&c::Taint> for wt::Taint {
    fn from(t: &c::Taint) -> Self {
        wt::Taint {
            key: t.key.clone(),
            value: t.value.clone(),
            effect: t.effect.clone(),
        }
    }
}

impl From<wt::Taint> for c::Taint {
    fn from(t: wt::Taint) -> Self {
        c::Taint {
            key: t.key,
            value: t.value,
            effect: t.effect,
        }
    }
}

impl From<c::Operator> for wt::Operator {
    fn from(op: c::Operator) -> Self {
        match op {
            c::Operator::In => wt::Operator::In,
            c::Operator::NotIn => wt::Operator::NotIn,
            c::Operator::Exists => wt::Operator::Exists,
            c::Operator::DoesNotExist => wt::Operator::DoesNotExist,
            c::Operator::Gt => wt::Operator::Gt,
            c::Operator::Lt => wt::Operator::Lt,
            c::Operator::Gte => wt::Operator::Gte,
            c::Operator::Lte => wt::Operator::Lte,
        }
    }
}

impl From<wt::Operator> for c::Operator {
    fn from(op: wt::Operator) -> Self {
        match op {
            wt::Operator::In => c::Operator::In,
            wt::Operator::NotIn => c::Operator::NotIn,
            wt::Operator::Exists => c::Operator::Exists,
            wt::Operator::DoesNotExist => c::Operator::DoesNotExist,
            wt::Operator::Gt => c::Operator::Gt,
            wt::Operator::Lt => c::Operator::Lt,
            wt::Operator::Gte => c::Operator::Gte,
            wt::Operator::Lte => c::Operator::Lte,
        }
    }
}

impl From<&c::Requirement> for wt::Requirement {
    fn from(r: &c::Requirement) -> Self {
        wt::Requirement {
            key: r.key.clone(),
            operator: r.operator.into(),
            values: r.values.clone(),
            min_values: r.min_values,
        }
    }
}

impl From<wt::Requirement> for c::Requirement {
    fn from(r: wt::Requirement) -> Self {
        c::Requirement {
            key: r.key,
            operator: r.operator.into(),
            values: r.values,
            min_values: r.min_values,
        }
    }
}

impl From<wt::Condition> for c::Condition {
    fn from(v: wt::Condition) -> Self {
        c::Condition {
            type_: v.type_,
            status: v.status,
            reason: v.reason,
            message: v.message,
        }
    }
}

record_conversions!(extra_errors: {});
