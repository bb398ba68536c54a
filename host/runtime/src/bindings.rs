//! Host bindings generated from `wit/v0.1` (package `joinery:plugin@0.1.0`).
//!
//! One module per world. The cloud-provider world imports every host interface, so the
//! renderer and pricing worlds reuse its import bindings (`with`), and the host implements
//! each import once.

#![allow(missing_docs)]

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
