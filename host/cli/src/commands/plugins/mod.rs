//! `joinery plugins …`: inspect, list, compile and package plugins.

mod compile;
mod inspect;
mod list;
mod new;
mod package;

super::subcommands! {
    /// `joinery plugins …`
    pub enum PluginsCommand {
        /// Compile the built-in plugins and those of the plugin directories into the compile
        /// cache (--plugin-cache-dir), as the Helm chart's init container does before `run`.
        Compile(compile::CompileArgs),
        /// Show a plugin's manifest, WIT version, imports/exports, capabilities, size, digest and whether it loads.
        Inspect(inspect::InspectArgs),
        /// List the built-in plugins and those found in plugin directories.
        List(list::ListArgs),
        /// Scaffold a plugin crate (renderer, cloud or pricing) that builds and passes its test as generated.
        New(new::NewArgs),
        /// Package a plugin (plugin.yaml with its sha256, and the component) as a plugin directory
        /// (--out) or as a ConfigMap printed to stdout (--configmap).
        Package(package::PackageArgs),
    }
}
