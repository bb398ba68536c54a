#![allow(missing_docs)]
//! Shared helpers for the runtime's integration tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use joinery_runtime::contract::{NodeClaim, NodeClass, Requirement, Resource};
use joinery_runtime::engine::{EngineOptions, PluginEngine};
use joinery_runtime::grants::Grants;
use joinery_runtime::manifest::PluginManifest;
use joinery_runtime::plugin::{LoadContext, LoadedPlugin, PluginBytes, PluginSource};
use joinery_runtime::services::HostServices;

/// One engine for the whole test binary (engines reserve address space). It keeps compiled
/// plugins in `JOINERY_PLUGIN_CACHE_DIR` when set (`./dev test` sets it), so the many tests
/// loading one plugin compile it once.
pub fn engine() -> PluginEngine {
    static ENGINE: OnceLock<PluginEngine> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            PluginEngine::new(&EngineOptions {
                pool_instances: 32,
                cache_dir: EngineOptions::cache_dir_from_env(),
                ..Default::default()
            })
            .unwrap()
        })
        .clone()
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn wasm(file: &str) -> Vec<u8> {
    let path = PathBuf::from(joinery_builtin_plugins::PLUGIN_WASM_DIR).join(file);
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

pub fn hostile_manifest() -> PluginManifest {
    let text = std::fs::read_to_string(repo().join("plugins/testing/hostile/plugin.yaml")).unwrap();
    PluginManifest::parse(&text, "hostile").unwrap()
}

pub fn hostile_wasm() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| wasm("joinery_plugin_hostile.wasm"))
}

/// Loads the hostile plugin under the given grants file text and services.
pub fn hostile(grants: &str, services: HostServices) -> Arc<LoadedPlugin> {
    hostile_with(hostile_manifest(), grants, services)
}

/// Loads the hostile component under a modified manifest.
pub fn hostile_with(
    manifest: PluginManifest,
    grants: &str,
    services: HostServices,
) -> Arc<LoadedPlugin> {
    let grants = Grants::parse(grants, "test grants").unwrap();
    let cx = LoadContext::new(engine(), grants, services).unwrap();
    let bytes = PluginBytes {
        manifest,
        source: PluginSource::Builtin,
        wasm: hostile_wasm(),
        compiled: None,
    };
    Arc::new(LoadedPlugin::load(&cx, bytes).unwrap())
}

/// A NodeClass whose spec selects the hostile plugin's mode for this call.
pub fn class(spec: serde_json::Value) -> NodeClass {
    NodeClass {
        name: "test".into(),
        uid: "uid-1".into(),
        generation: 1,
        spec: spec.to_string(),
        status: "{}".into(),
    }
}

/// A NodeClaim `name` (UID `uid-<name>`, NodePool `default`) with these requirements and
/// requests, nothing else, not launched.
pub fn claim(name: &str, requirements: Vec<Requirement>, requests: Vec<Resource>) -> NodeClaim {
    NodeClaim {
        name: name.into(),
        uid: format!("uid-{name}"),
        node_pool: "default".into(),
        labels: vec![],
        annotations: vec![],
        taints: vec![],
        startup_taints: vec![],
        requirements,
        resource_requests: requests,
        provider_id: None,
    }
}
