//! The plugins embedded in the joinery binary.
//!
//! This crate's build script builds the guest workspace (`plugins/`) for `wasm32-wasip2`;
//! the components it produces are embedded here with their `plugin.yaml`. Depend on it where
//! the built-in plugins are needed (the CLI, simulations, tests); `joinery-runtime` itself
//! only loads whatever plugins it is given.

use joinery_runtime::manifest::PluginManifest;

/// One embedded plugin.
pub struct BuiltinPlugin {
    /// Its `plugin.yaml`.
    pub manifest: &'static str,
    /// Its component.
    pub wasm: &'static [u8],
}

macro_rules! builtin {
    ($dir:literal, $file:literal) => {
        BuiltinPlugin {
            manifest: include_str!(concat!("../../../plugins/", $dir, "/plugin.yaml")),
            wasm: include_bytes!(concat!(env!("JOINERY_PLUGIN_WASM_DIR"), "/", $file)),
        }
    };
}

/// The shipped plugins: the verbatim, k3s, RKE2 and kubeadm renderers, the synthetic and
/// Clever Cloud pricing functions, the Exoscale, Clever Cloud and Cluster API cloud providers
/// and the cloud provider of the simulated cloud (so `joinery simulate` needs no plugin directory).
pub static BUILTIN_PLUGINS: &[BuiltinPlugin] = &[
    builtin!("template", "joinery_plugin_template.wasm"),
    builtin!("k3s", "joinery_plugin_k3s.wasm"),
    builtin!("rke2", "joinery_plugin_rke2.wasm"),
    builtin!("kubeadm", "joinery_plugin_kubeadm.wasm"),
    builtin!("synthetic-pricing", "joinery_plugin_synthetic_pricing.wasm"),
    builtin!(
        "clevercloud-pricing",
        "joinery_plugin_clevercloud_pricing.wasm"
    ),
    builtin!("simcloud", "joinery_plugin_simcloud.wasm"),
    builtin!("exoscale", "joinery_plugin_exoscale.wasm"),
    builtin!("clevercloud", "joinery_plugin_clevercloud.wasm"),
    builtin!("clusterapi", "joinery_plugin_clusterapi.wasm"),
];

/// Parses the manifests of the built-in plugins (they are tested, so this cannot fail in a
/// release); pass the result to `PluginRegistry::load`.
pub fn builtin_manifests() -> Vec<(PluginManifest, &'static [u8])> {
    BUILTIN_PLUGINS
        .iter()
        .map(|b| {
            (
                PluginManifest::parse(b.manifest, "built-in plugin")
                    .expect("built-in manifests are valid"),
                b.wasm,
            )
        })
        .collect()
}

/// Directory of the plugins built for this host, including test-only ones such as `hostile`.
pub const PLUGIN_WASM_DIR: &str = env!("JOINERY_PLUGIN_WASM_DIR");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_manifest_parses_and_names_a_distinct_plugin() {
        let plugins = builtin_manifests();
        assert_eq!(plugins.len(), BUILTIN_PLUGINS.len());
        let mut names: Vec<&str> = plugins.iter().map(|(m, _)| m.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), plugins.len());
        assert!(plugins.iter().all(|(_, wasm)| wasm.starts_with(b"\0asm")));
    }
}
