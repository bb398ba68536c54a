//! Plugins embedded in the joinery binary (built from `plugins/` by the build script).

use crate::manifest::PluginManifest;

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

/// The shipped plugins: the verbatim, k3s, RKE2 and kubeadm renderers, the synthetic pricing
/// function, the Exoscale cloud provider and the cloud provider of the simulated cloud (so
/// `joinery simulate` needs no plugin directory).
pub static BUILTIN_PLUGINS: &[BuiltinPlugin] = &[
    builtin!("template", "joinery_plugin_template.wasm"),
    builtin!("k3s", "joinery_plugin_k3s.wasm"),
    builtin!("rke2", "joinery_plugin_rke2.wasm"),
    builtin!("kubeadm", "joinery_plugin_kubeadm.wasm"),
    builtin!("synthetic-pricing", "joinery_plugin_synthetic_pricing.wasm"),
    builtin!("simcloud", "joinery_plugin_simcloud.wasm"),
    builtin!("exoscale", "joinery_plugin_exoscale.wasm"),
];

/// Parses the manifests of the built-in plugins (they are tested, so this cannot fail in a release).
pub fn builtin_manifests() -> Vec<(PluginManifest, &'static [u8])> {
    BUILTIN_PLUGINS
        .iter()
        .map(|b| (PluginManifest::parse(b.manifest, "built-in plugin").expect("built-in manifests are valid"), b.wasm))
        .collect()
}

/// Directory of the plugins built for this host (including test-only ones such as `hostile`).
pub const PLUGIN_WASM_DIR: &str = env!("JOINERY_PLUGIN_WASM_DIR");
