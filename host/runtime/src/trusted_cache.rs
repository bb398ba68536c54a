//! The one place that deserializes precompiled code.
//!
//! Deserializing is `unsafe` in wasmtime because the bytes become machine code. Only files
//! this host wrote into its own cache directory (named by digest and engine compatibility
//! key) are ever passed here; plugin directories are never read as precompiled code.

#![allow(unsafe_code)]

use std::path::Path;

use wasmtime::Engine;
use wasmtime::component::Component;

/// Loads a compiled component the host itself serialized into its cache directory.
pub(crate) fn deserialize_file(engine: &Engine, path: &Path) -> wasmtime::Result<Component> {
    // SAFETY: the file lives in the host-owned cache directory and was produced by
    // `Component::serialize` of an engine with the same compatibility key (part of the name);
    // wasmtime still checks the header and rejects mismatched engines.
    unsafe { Component::deserialize_file(engine, path) }
}
