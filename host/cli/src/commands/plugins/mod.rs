//! `joinery plugins …`: inspect, list and package plugins.

mod inspect;
mod list;
mod package;

super::subcommands! {
    /// `joinery plugins …`
    pub enum PluginsCommand {
        /// Show a plugin's manifest, WIT version, imports/exports, capabilities, size, digest and whether it loads.
        Inspect(inspect::InspectArgs),
        /// List the built-in plugins and those found in plugin directories.
        List(list::ListArgs),
        /// Write a plugin directory (plugin.yaml with sha256, and the component) ready for a ConfigMap.
        Package(package::PackageArgs),
    }
}
