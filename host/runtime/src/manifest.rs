//! `plugin.yaml`: what a plugin says about itself.
//!
//! The manifest names the plugin, the world it implements, the WIT version it was built
//! against, the capabilities it *requests* and its limits. Requests are only half of a
//! grant: the operator's grants file is the other half (see [`crate::grants`]).

use serde::{Deserialize, Serialize};

use crate::error::LoadError;
use crate::grants::{HttpPattern, KubeRule};

/// The WIT package versions this host can run, oldest first.
pub const SUPPORTED_WIT_VERSIONS: &[&str] = &["0.1.0", "0.2.0"];
/// The newest WIT version: what `joinery plugins new` scaffolds and the SDK is built against.
pub const CURRENT_WIT_VERSION: &str = "0.2.0";

/// The pricing plugin for the unpriced offerings of a cloud plugin that names none.
pub const DEFAULT_PRICING_PLUGIN: &str = "synthetic-pricing";

/// Whether `name` is a valid plugin name: 1-63 lowercase letters, digits and `-`, not
/// starting or ending with `-`.
pub fn is_plugin_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// Which world a plugin implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum PluginKind {
    /// `cloud-provider-plugin`: launches and deletes instances.
    CloudProvider,
    /// `userdata-renderer-plugin`: renders bootstrap userData.
    UserdataRenderer,
    /// `pricing-plugin`: prices offerings.
    Pricing,
}

impl PluginKind {
    /// The manifest spelling, e.g. `userdata-renderer`.
    pub fn as_str(self) -> &'static str {
        match self {
            PluginKind::CloudProvider => "cloud-provider",
            PluginKind::UserdataRenderer => "userdata-renderer",
            PluginKind::Pricing => "pricing",
        }
    }

    /// The interface the component must export, e.g. `joinery:plugin/renderer@0.1.0`.
    pub fn export_interface(self, wit: &str) -> String {
        let iface = match self {
            PluginKind::CloudProvider => "cloud-provider",
            PluginKind::UserdataRenderer => "renderer",
            PluginKind::Pricing => "pricing",
        };
        format!("joinery:plugin/{iface}@{wit}")
    }
}

impl std::fmt::Display for PluginKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The NodeClass kind a cloud-provider plugin serves.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NodeClassKind {
    /// API group, e.g. `karpenter.k8s.exoscale`.
    pub group: String,
    /// API version, e.g. `v1alpha1`.
    pub version: String,
    /// Kind, e.g. `ExoscaleNodeClass`.
    pub kind: String,
    /// Scheme of the provider IDs this cloud gives its instances, e.g. `exoscale://`. Renderers
    /// receive it to write the kubelet's `provider-id`.
    #[serde(
        default,
        rename = "providerIDPrefix",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id_prefix: Option<String>,
    /// For clouds that register their Nodes themselves and leave `spec.providerID` empty
    /// (Clever Cloud's CKE): the Node label whose value, after `providerIDPrefix`, is the
    /// instance's provider ID. The host writes that provider ID onto such a Node when a
    /// launched NodeClaim of this plugin waits for exactly it, and onto no other Node.
    #[serde(
        default,
        rename = "providerIDFromNodeLabel",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id_from_node_label: Option<String>,
    /// Who bootstraps the nodes: `userData` (default: the host renders the NodeClass's
    /// userData and passes it to `create`) or `platform` (the cloud joins its nodes itself,
    /// as CKE does; the host renders nothing and passes an empty userData).
    #[serde(default, skip_serializing_if = "NodeBootstrap::is_user_data")]
    pub bootstrap: NodeBootstrap,
}

/// Who bootstraps a cloud's nodes (`nodeClass.bootstrap` in `plugin.yaml`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum NodeBootstrap {
    /// The host renders userData with the NodeClass's renderer.
    #[default]
    UserData,
    /// The platform joins its nodes itself; no userData is rendered.
    Platform,
}

impl NodeBootstrap {
    fn is_user_data(&self) -> bool {
        *self == NodeBootstrap::UserData
    }
}

/// Capabilities a plugin asks for. Each is denied unless the operator grants it too.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RequestedCapabilities {
    /// Outgoing HTTP destinations, as `scheme://host[:port]` patterns.
    #[serde(default)]
    pub http: Vec<HttpPattern>,
    /// Kubernetes access rules.
    #[serde(default)]
    pub kubernetes: Vec<KubeRule>,
    /// Secret names.
    #[serde(default)]
    pub secrets: Vec<String>,
    /// Whether the plugin needs `wasi:clocks` (renderers and pricing plugins are clock-free by default).
    #[serde(default)]
    pub clock: bool,
}

/// Resource limits for one call. The operator may lower them; the host caps them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Limits {
    /// Linear memory a single call may use, in MiB.
    #[serde(default = "Limits::default_memory", rename = "memoryMiB")]
    pub memory_mib: u32,
    /// Deadline of a single call, in milliseconds (CPU via epoch interruption, and wall clock).
    #[serde(default = "Limits::default_timeout")]
    pub timeout_ms: u32,
    /// How many calls of this plugin may run at once.
    #[serde(default = "Limits::default_concurrency")]
    pub max_concurrency: u32,
    /// How many `create` calls may run at once (within `maxConcurrency`); unset means no
    /// limit beyond `maxConcurrency`. `1` serialises launches, for clouds whose accounting
    /// misbehaves under bursts of creations (Clever Cloud's quota reservations, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrent_creates: Option<u32>,
}

impl Limits {
    /// Largest memory limit the host accepts, in MiB.
    pub const MAX_MEMORY_MIB: u32 = 256;
    /// Largest call deadline the host accepts, in milliseconds.
    pub const MAX_TIMEOUT_MS: u32 = 120_000;
    fn default_memory() -> u32 {
        32
    }
    fn default_timeout() -> u32 {
        2_000
    }
    fn default_concurrency() -> u32 {
        8
    }

    /// These limits lowered by the operator's caps, field by field: a field the grant does
    /// not set keeps the manifest's value (it is not reset to a default).
    pub fn capped_by(self, caps: &GrantLimits) -> Limits {
        Limits {
            memory_mib: caps
                .memory_mib
                .map_or(self.memory_mib, |cap| self.memory_mib.min(cap)),
            timeout_ms: caps
                .timeout_ms
                .map_or(self.timeout_ms, |cap| self.timeout_ms.min(cap)),
            max_concurrency: caps
                .max_concurrency
                .map_or(self.max_concurrency, |cap| self.max_concurrency.min(cap)),
            max_concurrent_creates: self.max_concurrent_creates,
        }
    }

    fn validate(&self, plugin: &str) -> Result<(), LoadError> {
        let bad = |field: &str, why: String| LoadError::Manifest {
            plugin: plugin.to_string(),
            message: format!("limits.{field}: {why}"),
        };
        if self.memory_mib == 0 || self.memory_mib > Self::MAX_MEMORY_MIB {
            return Err(bad(
                "memoryMiB",
                format!(
                    "must be 1..={}, got {}",
                    Self::MAX_MEMORY_MIB,
                    self.memory_mib
                ),
            ));
        }
        if self.timeout_ms == 0 || self.timeout_ms > Self::MAX_TIMEOUT_MS {
            return Err(bad(
                "timeoutMs",
                format!(
                    "must be 1..={}, got {}",
                    Self::MAX_TIMEOUT_MS,
                    self.timeout_ms
                ),
            ));
        }
        if self.max_concurrency == 0 {
            return Err(bad("maxConcurrency", "must be at least 1".into()));
        }
        if self.max_concurrent_creates == Some(0) {
            return Err(bad(
                "maxConcurrentCreates",
                "must be at least 1 (or unset)".into(),
            ));
        }
        Ok(())
    }
}

/// The operator's caps on a plugin's limits (`plugins.<name>.limits` in the grants file).
/// Each field is optional and only lowers the manifest's value of the same field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GrantLimits {
    /// Cap on the linear memory of one call, in MiB.
    #[serde(default, rename = "memoryMiB", skip_serializing_if = "Option::is_none")]
    pub memory_mib: Option<u32>,
    /// Cap on the deadline of one call, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u32>,
    /// Cap on the calls of this plugin that may run at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_concurrency: Option<u32>,
}

impl GrantLimits {
    /// Checks each set field against the same bounds as a manifest's; the error names the
    /// field as `plugins.<plugin>.limits.<field>`.
    pub fn validate(&self, plugin: &str) -> Result<(), String> {
        let bad = |field: &str, why: String| format!("plugins.{plugin}.limits.{field}: {why}");
        if let Some(m) = self.memory_mib
            && (m == 0 || m > Limits::MAX_MEMORY_MIB)
        {
            return Err(bad(
                "memoryMiB",
                format!("must be 1..={}, got {m}", Limits::MAX_MEMORY_MIB),
            ));
        }
        if let Some(t) = self.timeout_ms
            && (t == 0 || t > Limits::MAX_TIMEOUT_MS)
        {
            return Err(bad(
                "timeoutMs",
                format!("must be 1..={}, got {t}", Limits::MAX_TIMEOUT_MS),
            ));
        }
        if self.max_concurrency == Some(0) {
            return Err(bad(
                "maxConcurrency",
                "must be at least 1 (0 would block every call)".into(),
            ));
        }
        Ok(())
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_mib: Self::default_memory(),
            timeout_ms: Self::default_timeout(),
            max_concurrency: Self::default_concurrency(),
            max_concurrent_creates: None,
        }
    }
}

/// The parsed `plugin.yaml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginManifest {
    /// Unique plugin name (lowercase letters, digits and `-`).
    pub name: String,
    /// The plugin's own version.
    pub version: String,
    /// The world it implements.
    pub kind: PluginKind,
    /// WIT package version it was built against, e.g. `0.1.0`.
    pub wit: String,
    /// Component file name inside the plugin directory: `plugin.wasm` or `plugin.wasm.gz`.
    #[serde(default = "PluginManifest::default_component")]
    pub component: String,
    /// Hex sha256 of the (uncompressed) component. Required when loading from a directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// For cloud-provider plugins: the NodeClass kind served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class: Option<NodeClassKind>,
    /// For cloud-provider plugins: the pricing plugin that prices the offerings this plugin
    /// leaves unpriced (default [`DEFAULT_PRICING_PLUGIN`]; the operator's grant may name
    /// another, see [`crate::grants::PluginGrant::pricing`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pricing: Option<String>,
    /// Requested capabilities.
    #[serde(default)]
    pub capabilities: RequestedCapabilities,
    /// Requested limits.
    #[serde(default)]
    pub limits: Limits,
}

impl PluginManifest {
    fn default_component() -> String {
        "plugin.wasm".to_string()
    }

    /// Parses and validates a manifest. `origin` names the file in errors.
    pub fn parse(text: &str, origin: &str) -> Result<PluginManifest, LoadError> {
        let manifest: PluginManifest =
            serde_norway::from_str(text).map_err(|e| LoadError::Manifest {
                plugin: origin.to_string(),
                message: format!("{e} (see docs/plugins.md for the plugin.yaml format)"),
            })?;
        manifest.validate()?;
        Ok(manifest)
    }

    /// Checks the fields the serde types cannot express.
    pub fn validate(&self) -> Result<(), LoadError> {
        let bad = |message: String| LoadError::Manifest {
            plugin: self.name.clone(),
            message,
        };
        if !is_plugin_name(&self.name) {
            return Err(bad(format!(
                "name {:?}: use 1-63 lowercase letters, digits and '-', not starting or ending with '-'",
                self.name
            )));
        }
        if !SUPPORTED_WIT_VERSIONS.contains(&self.wit.as_str()) {
            return Err(bad(format!(
                "wit {:?} is not supported by this host (supported: {}); rebuild the plugin against a supported joinery:plugin version",
                self.wit,
                SUPPORTED_WIT_VERSIONS.join(", ")
            )));
        }
        if self.component.contains('/')
            || !(self.component.ends_with(".wasm") || self.component.ends_with(".wasm.gz"))
        {
            return Err(bad(format!(
                "component {:?}: must be a file name in the plugin directory ending in .wasm or .wasm.gz",
                self.component
            )));
        }
        if let Some(sha) = &self.sha256
            && (sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()))
        {
            return Err(bad(format!("sha256 {sha:?}: expected 64 hex digits")));
        }
        match (self.kind, &self.node_class) {
            (PluginKind::CloudProvider, None) => {
                return Err(bad("nodeClass: a cloud-provider plugin must name the NodeClass {group, version, kind} it serves".into()));
            }
            (PluginKind::UserdataRenderer | PluginKind::Pricing, Some(_)) => {
                return Err(bad(format!(
                    "nodeClass: only cloud-provider plugins serve a NodeClass, this one is {}",
                    self.kind
                )));
            }
            _ => {}
        }
        match (&self.pricing, self.kind) {
            (Some(_), PluginKind::UserdataRenderer | PluginKind::Pricing) => {
                return Err(bad(format!(
                    "pricing: only cloud-provider plugins name the pricing plugin of their offerings, this one is {}",
                    self.kind
                )));
            }
            (Some(name), _) if !is_plugin_name(name) => {
                return Err(bad(format!(
                    "pricing {name:?}: not a plugin name (lowercase letters, digits and '-')"
                )));
            }
            _ => {}
        }
        if self.kind == PluginKind::UserdataRenderer
            && (!self.capabilities.http.is_empty()
                || !self.capabilities.kubernetes.is_empty()
                || !self.capabilities.secrets.is_empty())
        {
            return Err(bad(
                "capabilities: renderers cannot request http, kubernetes or secrets; secrets reach them through the render context".into(),
            ));
        }
        if self.kind == PluginKind::Pricing
            && (!self.capabilities.kubernetes.is_empty() || !self.capabilities.secrets.is_empty())
        {
            return Err(bad(
                "capabilities: pricing plugins can request http only".into()
            ));
        }
        self.limits.validate(&self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RENDERER: &str = "name: template\nversion: 0.1.0\nkind: userdata-renderer\nwit: 0.1.0\n";

    #[test]
    fn minimal_renderer_manifest_gets_defaults() {
        let m = PluginManifest::parse(RENDERER, "t").unwrap();
        assert_eq!(m.component, "plugin.wasm");
        assert_eq!(m.limits, Limits::default());
        assert_eq!(
            m.kind.export_interface(&m.wit),
            "joinery:plugin/renderer@0.1.0"
        );
    }

    #[test]
    fn unknown_field_is_rejected_with_its_name() {
        let err = PluginManifest::parse(&format!("{RENDERER}colour: blue\n"), "x/plugin.yaml")
            .unwrap_err();
        assert!(err.to_string().contains("colour"), "{err}");
    }

    #[test]
    fn unsupported_wit_version_names_supported_ones() {
        let err =
            PluginManifest::parse(&RENDERER.replace("wit: 0.1.0", "wit: 9.0.0"), "t").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("9.0.0") && text.contains("0.1.0"), "{text}");
    }

    #[test]
    fn cloud_provider_needs_node_class() {
        let text = RENDERER.replace("userdata-renderer", "cloud-provider");
        let err = PluginManifest::parse(&text, "t").unwrap_err();
        assert!(err.to_string().contains("nodeClass"), "{err}");
    }

    #[test]
    fn renderer_cannot_request_http() {
        let text = format!("{RENDERER}capabilities:\n  http: [\"https://example.com\"]\n");
        let err = PluginManifest::parse(&text, "t").unwrap_err();
        assert!(
            err.to_string().contains("renderers cannot request"),
            "{err}"
        );
    }

    #[test]
    fn limits_out_of_range_name_the_field() {
        let text = format!("{RENDERER}limits:\n  memoryMiB: 100000\n");
        let err = PluginManifest::parse(&text, "t").unwrap_err();
        assert!(err.to_string().contains("limits.memoryMiB"), "{err}");
    }

    #[test]
    fn a_cloud_plugin_may_name_its_pricing_plugin() {
        let cloud = "name: c\nversion: 0.1.0\nkind: cloud-provider\nwit: 0.1.0\nnodeClass: {group: g, version: v1, kind: K}\n";
        assert_eq!(PluginManifest::parse(cloud, "t").unwrap().pricing, None);
        let named =
            PluginManifest::parse(&format!("{cloud}pricing: clevercloud-pricing\n"), "t").unwrap();
        assert_eq!(named.pricing.as_deref(), Some("clevercloud-pricing"));
        let err = PluginManifest::parse(&format!("{cloud}pricing: Bad_Name\n"), "t").unwrap_err();
        assert!(err.to_string().contains("pricing \"Bad_Name\""), "{err}");
        let err = PluginManifest::parse(&format!("{RENDERER}pricing: synthetic-pricing\n"), "t")
            .unwrap_err();
        assert!(
            err.to_string().contains("only cloud-provider plugins"),
            "{err}"
        );
    }

    #[test]
    fn bad_names_and_digests_are_rejected() {
        assert!(PluginManifest::parse(&RENDERER.replace("template", "Bad_Name"), "t").is_err());
        let text = format!("{RENDERER}sha256: abc\n");
        assert!(
            PluginManifest::parse(&text, "t")
                .unwrap_err()
                .to_string()
                .contains("64 hex")
        );
    }
}
