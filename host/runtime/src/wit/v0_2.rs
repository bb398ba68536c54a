//! WIT v0.2 (package `joinery:plugin@0.2.0`): the generated host bindings and their
//! conversions to and from the [`crate::contract`] types.
//!
//! 0.2 is 0.1 plus `repair-policies` and `reboot` in the cloud-provider interface (with the
//! `unsupported` error case) and `registration` in the renderer interface. The `types`
//! interface is the same in both, so 0.2 reuses 0.1's generated types for it (`with`) and
//! their conversions; the host interfaces (`log`, `config`, …) are generated again, since
//! a component names them with its own version, and implemented once for both versions
//! (`state::host_imports!`).

#![allow(missing_docs)]

use super::{list, list_ref};
use crate::contract as c;

/// The `cloud-provider-plugin` world (and the shared host imports).
pub mod cloud {
    wasmtime::component::bindgen!({
        world: "joinery:plugin/cloud-provider-plugin@0.2.0",
        path: "../../wit/v0.2",
        imports: { default: async },
        exports: { default: async },
        with: {
            "joinery:plugin/types": crate::wit::v0_1::cloud::joinery::plugin::types,
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
    });
}

/// The `userdata-renderer-plugin` world.
pub mod renderer {
    wasmtime::component::bindgen!({
        world: "joinery:plugin/userdata-renderer-plugin@0.2.0",
        path: "../../wit/v0.2",
        imports: { default: async },
        exports: { default: async },
        with: {
            "joinery:plugin/log": super::cloud::joinery::plugin::log,
            "joinery:plugin/config": super::cloud::joinery::plugin::config,
            "joinery:plugin/types": crate::wit::v0_1::cloud::joinery::plugin::types,
        },
    });
}

/// The `pricing-plugin` world.
pub mod pricing {
    wasmtime::component::bindgen!({
        world: "joinery:plugin/pricing-plugin@0.2.0",
        path: "../../wit/v0.2",
        imports: { default: async },
        exports: { default: async },
        with: {
            "joinery:plugin/log": super::cloud::joinery::plugin::log,
            "joinery:plugin/config": super::cloud::joinery::plugin::config,
            "joinery:plugin/cache": super::cloud::joinery::plugin::cache,
            "joinery:plugin/types": crate::wit::v0_1::cloud::joinery::plugin::types,
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
    });
}

use cloud::exports::joinery::plugin::cloud_provider as w;
use pricing::exports::joinery::plugin::pricing as wp;
use renderer::exports::joinery::plugin::renderer as wr;

record_conversions!(extra_errors: {
    w::CloudError::Unsupported(m) => c::CloudError::Unsupported(m),
});

impl From<w::RepairPolicy> for c::RepairPolicy {
    fn from(p: w::RepairPolicy) -> Self {
        c::RepairPolicy {
            condition_type: p.condition_type,
            condition_status: p.condition_status,
            toleration_seconds: p.toleration_seconds,
        }
    }
}

impl From<wr::NodeRegistration> for c::NodeRegistration {
    fn from(r: wr::NodeRegistration) -> Self {
        c::NodeRegistration {
            node_name: r.node_name,
            labels: list(r.labels),
            taints: list(r.taints),
            provider_id_prefix: r.provider_id_prefix,
        }
    }
}

by_from!(
    w::RepairPolicy => c::RepairPolicy,
    wr::NodeRegistration => c::NodeRegistration,
);
