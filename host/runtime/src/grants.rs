//! Capability grants: deny by default, allow the intersection of what the operator grants
//! and what the plugin requests, and check every call's arguments against it.
//!
//! The operator's grants file (YAML) looks like:
//!
//! ```yaml
//! plugins:
//!   exoscale:
//!     http: ["https://api-*.exoscale.com"]
//!     kubernetes:
//!       - {cluster: workload, group: "", resources: [configmaps], verbs: [get, list]}
//!   capi:
//!     kubernetes:
//!       - {cluster: management, group: cluster.x-k8s.io, resources: [machinedeployments], verbs: [get, patch], namespaces: [capi]}
//!     secrets: [exoscale-credentials]
//!     config: {zone: ch-gva-2}
//!     limits: {memoryMiB: 64, timeoutMs: 30000, maxConcurrency: 4}
//! ```
//!
//! A refusal always names the line to add, and on which side (grants file or plugin.yaml).

use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::LoadError;
use crate::manifest::{GrantLimits, Limits, PluginManifest, RequestedCapabilities};

/// An outgoing HTTP destination pattern: `scheme://host[:port]`.
///
/// `host` may contain `*` wildcards (`*.exoscale.com`, `api-*.exoscale.com`) but may not be
/// `*` alone; `port` is a number or `*` and defaults to the scheme's port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HttpPattern {
    scheme: String,
    host: String,
    port: Option<u16>,
    raw: String,
}

impl HttpPattern {
    /// Parses a pattern, explaining the syntax on error.
    pub fn parse(raw: &str) -> Result<HttpPattern, String> {
        let syntax =
            "expected scheme://host[:port], e.g. https://api.example.com or http://127.0.0.1:*";
        let (scheme, rest) = raw
            .split_once("://")
            .ok_or_else(|| format!("{raw:?}: {syntax}"))?;
        if scheme != "http" && scheme != "https" {
            return Err(format!("{raw:?}: scheme must be http or https"));
        }
        if rest.contains('/') || rest.contains('@') || rest.is_empty() {
            return Err(format!("{raw:?}: {syntax} (no path or user info)"));
        }
        let (host, port) = match rest.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || rest.starts_with('[') => {
                let port = if p == "*" {
                    None
                } else {
                    Some(
                        p.parse::<u16>()
                            .map_err(|_| format!("{raw:?}: port {p:?} must be a number or *"))?,
                    )
                };
                (h, port)
            }
            _ => (rest, Some(if scheme == "https" { 443 } else { 80 })),
        };
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase();
        if host.is_empty() || host.chars().all(|c| c == '*' || c == '.') {
            return Err(format!(
                "{raw:?}: the host may not be only a wildcard; name the hosts the plugin needs"
            ));
        }
        Ok(HttpPattern {
            scheme: scheme.to_string(),
            host,
            port,
            raw: raw.to_string(),
        })
    }

    /// Whether a request to `scheme://host:port` matches. A host that is no valid name
    /// (see [`check_host_name`]) matches nothing.
    pub fn matches(&self, scheme: &str, host: &str, port: u16) -> bool {
        self.scheme == scheme
            && self.port.is_none_or(|p| p == port)
            && check_host_name(host).is_ok()
            && glob(&self.host, &host.to_ascii_lowercase())
    }

    /// Whether every address `other` admits, this pattern admits too (its host read as a
    /// glob over `other`'s, wildcards and all).
    pub fn covers(&self, other: &HttpPattern) -> bool {
        self.scheme == other.scheme
            && match (self.port, other.port) {
                (None, _) => true,
                (Some(a), Some(b)) => a == b,
                (Some(_), None) => false,
            }
            && glob(&self.host, &other.host)
    }

    /// The IP address this pattern names literally, if its host is an IP.
    pub fn literal_ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.raw
    }
}

impl std::fmt::Display for HttpPattern {
    /// The pattern as written.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.raw)
    }
}

impl Serialize for HttpPattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.raw)
    }
}

impl<'de> Deserialize<'de> for HttpPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        HttpPattern::parse(&raw).map_err(serde::de::Error::custom)
    }
}

/// The longest host name DNS allows, in bytes (without a trailing dot).
pub const MAX_HOST_NAME_BYTES: usize = 253;
/// The longest label (the part between two dots) of a DNS name, in bytes.
pub const MAX_HOST_LABEL_BYTES: usize = 63;

/// Checks that `host` could be a DNS name or an IP address at all: at most
/// [`MAX_HOST_NAME_BYTES`] bytes (a trailing dot aside), no label over
/// [`MAX_HOST_LABEL_BYTES`]. Nothing longer can resolve, so such a request is refused before
/// any pattern is tried, and matching never sees more than a few hundred bytes.
pub fn check_host_name(host: &str) -> Result<(), String> {
    let name = host.strip_suffix('.').unwrap_or(host);
    if name.len() > MAX_HOST_NAME_BYTES {
        return Err(format!(
            "the name is {} bytes long, and a DNS name has at most {MAX_HOST_NAME_BYTES}",
            name.len()
        ));
    }
    if let Some(label) = name.split('.').find(|l| l.len() > MAX_HOST_LABEL_BYTES) {
        return Err(format!(
            "its label {:?} is {} bytes long, and a DNS label has at most {MAX_HOST_LABEL_BYTES}",
            shorten(label),
            label.len()
        ));
    }
    Ok(())
}

/// The first 40 characters of `text`, with `…` when cut: for naming an overlong host.
fn shorten(text: &str) -> String {
    match text.char_indices().nth(40) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// `*` matches any run of characters (including dots).
///
/// Linear in the lengths of pattern and text: the part before the first `*` must be a
/// prefix, the part after the last `*` a suffix of what is left, and each part between two
/// `*` is taken at its leftmost occurrence after the previous one (`str::find` is a linear
/// two-way search). Taking the leftmost occurrence never loses a match, since every `*`
/// absorbs whatever lies between, so nothing is ever retried.
fn glob(pattern: &str, text: &str) -> bool {
    let Some((head, rest_of_pattern)) = pattern.split_once('*') else {
        return pattern == text;
    };
    let Some(mut rest) = text.strip_prefix(head) else {
        return false;
    };
    let (middle, tail) = rest_of_pattern
        .rsplit_once('*')
        .unwrap_or(("", rest_of_pattern));
    for part in middle.split('*').filter(|p| !p.is_empty()) {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.ends_with(tail)
}

/// A Kubernetes verb a plugin may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    /// Read one object.
    Get,
    /// List objects.
    List,
    /// Create an object.
    Create,
    /// Patch an object.
    Patch,
    /// Delete an object.
    Delete,
    /// All of the above.
    #[serde(rename = "*")]
    All,
}

impl Verb {
    fn covers(self, verb: Verb) -> bool {
        self == Verb::All || self == verb
    }

    /// The verb's name as written in grants.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Create => "create",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::All => "*",
        }
    }
}

fn default_cluster() -> String {
    "workload".to_string()
}

/// One Kubernetes access rule: these verbs on these resources of one API group in one cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeRule {
    /// The cluster the rule is for: `workload` (the default; the cluster Joinery scales) or
    /// `management` (the cluster holding Cluster API objects, which `joinery run` reaches
    /// through `--management-kubeconfig`). A call reaches a cluster only through a rule naming it.
    #[serde(default = "default_cluster")]
    pub cluster: String,
    /// API group (`""` for core).
    pub group: String,
    /// Plural resource names; `*` for all in the group.
    pub resources: Vec<String>,
    /// Allowed verbs.
    pub verbs: Vec<Verb>,
    /// Namespaces the rule is limited to; empty means all namespaces and cluster-scoped objects.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
}

/// A Kubernetes call to check against the rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeAccess<'a> {
    /// Target cluster.
    pub cluster: &'a str,
    /// API group.
    pub group: &'a str,
    /// Plural resource.
    pub resource: &'a str,
    /// Namespace, if any.
    pub namespace: Option<&'a str>,
    /// Verb.
    pub verb: Verb,
}

impl KubeRule {
    /// What both rules allow: same cluster and group, the resources, verbs and namespaces
    /// they share (`*` and an empty namespace list stand for all); `None` when that is
    /// nothing.
    pub fn intersection(&self, other: &KubeRule) -> Option<KubeRule> {
        if self.cluster != other.cluster || self.group != other.group {
            return None;
        }
        fn common<T: Clone + PartialEq>(
            a: &[T],
            b: &[T],
            all: impl Fn(&T) -> bool,
            sub: impl Fn(&T, &T) -> bool,
        ) -> Vec<T> {
            let mut out = Vec::new();
            for x in a {
                for y in b {
                    let both = if all(x) || sub(x, y) {
                        Some(y)
                    } else if all(y) || sub(y, x) {
                        Some(x)
                    } else {
                        None
                    };
                    if let Some(v) = both
                        && !out.contains(v)
                    {
                        out.push(v.clone());
                    }
                }
            }
            out
        }
        let resources = common(
            &self.resources,
            &other.resources,
            |r| r == "*",
            |a, b| a == b,
        );
        let verbs = common(
            &self.verbs,
            &other.verbs,
            |v| *v == Verb::All,
            |a, b| a.covers(*b),
        );
        let namespaces = match (self.namespaces.is_empty(), other.namespaces.is_empty()) {
            (true, _) => other.namespaces.clone(),
            (_, true) => self.namespaces.clone(),
            _ => self
                .namespaces
                .iter()
                .filter(|n| other.namespaces.contains(n))
                .cloned()
                .collect(),
        };
        let namespaces_empty_by_conflict =
            !self.namespaces.is_empty() && !other.namespaces.is_empty() && namespaces.is_empty();
        (!resources.is_empty() && !verbs.is_empty() && !namespaces_empty_by_conflict).then(|| {
            KubeRule {
                cluster: self.cluster.clone(),
                group: self.group.clone(),
                resources,
                verbs,
                namespaces,
            }
        })
    }

    fn allows(&self, access: &KubeAccess<'_>) -> bool {
        self.cluster == access.cluster
            && self.group == access.group
            && self
                .resources
                .iter()
                .any(|r| r == "*" || r == access.resource)
            && self.verbs.iter().any(|v| v.covers(access.verb))
            && (self.namespaces.is_empty()
                || access
                    .namespace
                    .is_some_and(|ns| self.namespaces.iter().any(|n| n == ns)))
    }
}

impl KubeAccess<'_> {
    fn as_rule_line(&self) -> String {
        let ns = self
            .namespace
            .map(|n| format!(", namespaces: [{n}]"))
            .unwrap_or_default();
        format!(
            "- {{cluster: {}, group: {:?}, resources: [{}], verbs: [{}]{ns}}}",
            self.cluster,
            self.group,
            self.resource,
            self.verb.as_str()
        )
    }
}

/// What the operator grants one plugin.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginGrant {
    /// Allowed outgoing HTTP destinations.
    #[serde(default)]
    pub http: Vec<HttpPattern>,
    /// Outgoing HTTP destinations granted although the plugin's manifest does not request
    /// them: the operator's way to point a plugin (a built-in one too) at a proxy, a mirror
    /// or a fake of its API without rebuilding it. Only the grants file can add them; the
    /// address checks still apply (a loopback or private address must be named exactly).
    #[serde(default)]
    pub extra_http: Vec<HttpPattern>,
    /// Whether private (RFC 1918 / unique-local) addresses may be reached by granted host names.
    #[serde(default)]
    pub private_networks: bool,
    /// Allowed Kubernetes access.
    #[serde(default)]
    pub kubernetes: Vec<KubeRule>,
    /// Allowed secret names.
    #[serde(default)]
    pub secrets: Vec<String>,
    /// Whether `wasi:clocks` may be linked for renderers and pricing plugins.
    #[serde(default)]
    pub clock: bool,
    /// The plugin's configuration (any JSON/YAML object), served by the `config` import.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<serde_json::Value>,
    /// For a cloud-provider plugin: the pricing plugin for the offerings it leaves unpriced,
    /// in place of the one its manifest names (`pricing`) or the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pricing: Option<String>,
    /// Limits the operator imposes: each field that is set caps the manifest's same field;
    /// a field left out leaves the manifest's value alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<GrantLimits>,
}

impl PluginGrant {
    /// The limits the plugin's calls run under: the manifest's `limits`, each field capped
    /// by this grant's field of the same name when set (a grant lowers, never raises). The
    /// runtime applies exactly these when it loads the plugin.
    pub fn effective_limits(&self, manifest: &Limits) -> Limits {
        match &self.limits {
            Some(caps) => manifest.capped_by(caps),
            None => *manifest,
        }
    }
}

/// The operator's grants file: one entry per plugin name.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Grants {
    /// Grants by plugin name. A plugin with no entry gets nothing but logging and `{}` config.
    #[serde(default)]
    pub plugins: BTreeMap<String, PluginGrant>,
}

impl Grants {
    /// Parses a grants file; `origin` names it in errors.
    /// Every plugin's limits are validated here, so a grants file asking for
    /// `maxConcurrency: 0` or `timeoutMs: 0` is refused at load, naming the field.
    pub fn parse(text: &str, origin: &str) -> Result<Grants, LoadError> {
        let error = |message: String| LoadError::Grants {
            origin: origin.to_string(),
            message,
        };
        let grants: Grants = serde_norway::from_str(text).map_err(|e| error(e.to_string()))?;
        for (plugin, grant) in &grants.plugins {
            if let Some(limits) = &grant.limits {
                limits.validate(plugin).map_err(error)?;
            }
            if let Some(name) = &grant.pricing
                && !crate::manifest::is_plugin_name(name)
            {
                return Err(error(format!(
                    "plugins.{plugin}.pricing: {name:?} is not a plugin name"
                )));
            }
        }
        Ok(grants)
    }

    /// The limits `manifest`'s plugin runs under with these grants (see
    /// [`PluginGrant::effective_limits`]); a plugin without an entry keeps its manifest's.
    pub fn effective_limits(&self, manifest: &PluginManifest) -> Limits {
        self.plugins
            .get(&manifest.name)
            .map_or(manifest.limits, |grant| {
                grant.effective_limits(&manifest.limits)
            })
    }

    /// The grant entries that name no plugin in `loaded`, each with the loaded name it most
    /// likely meant (one or two letters off), if any.
    pub fn unknown_plugins(&self, loaded: &[&str]) -> Vec<(String, Option<String>)> {
        self.plugins
            .keys()
            .filter(|name| !loaded.contains(&name.as_str()))
            .map(|name| {
                let meant = loaded
                    .iter()
                    .map(|l| (edit_distance(name, l), *l))
                    .filter(|(d, _)| *d <= 2)
                    .min()
                    .map(|(_, l)| l.to_string());
                (name.clone(), meant)
            })
            .collect()
    }

    /// Why the plugin `capabilities` belongs to can use nothing it asked for, with the fix,
    /// naming any grant entry that matches no loaded plugin (a misspelt name is the usual
    /// cause); `None` when it requests nothing or is granted something.
    pub fn not_granted_message(
        &self,
        capabilities: &Capabilities,
        loaded: &[&str],
    ) -> Option<String> {
        let requested = capabilities.nothing_granted()?;
        let plugin = &capabilities.plugin;
        let mut message = if self.plugins.is_empty() {
            format!(
                "plugin {plugin} requests {requested}, and no grants were given: start joinery run with --grants FILE (or JOINERY_GRANTS; the chart's `grants` value) holding a plugins.{plugin} entry"
            )
        } else {
            format!(
                "plugin {plugin} requests {requested}, and the grants file grants it nothing: add a plugins.{plugin} entry"
            )
        };
        for (name, meant) in self.unknown_plugins(loaded) {
            match meant {
                Some(meant) => message.push_str(&format!(
                    "; the grants file's entry plugins.{name} names no loaded plugin (did you mean {meant}?)"
                )),
                None => message.push_str(&format!(
                    "; the grants file's entry plugins.{name} names no loaded plugin"
                )),
            }
        }
        Some(message)
    }

    /// The effective capabilities of a plugin: the intersection of grant and request.
    pub fn capabilities_for(&self, manifest: &PluginManifest) -> Capabilities {
        let grant = self
            .plugins
            .get(&manifest.name)
            .cloned()
            .unwrap_or_default();
        Capabilities {
            plugin: manifest.name.clone(),
            requested: manifest.capabilities.clone(),
            granted: grant,
        }
    }
}

/// What a plugin may do once its request and its grant are intersected (`joinery plugins
/// inspect --grants` prints it). Outgoing HTTP lists, for each requested and granted pattern
/// where one contains the other, the narrower one, then the operator's `extraHttp` patterns;
/// Kubernetes rules are the pairwise intersections (same cluster and group, common resources,
/// verbs and namespaces).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EffectiveCapabilities {
    /// Outgoing HTTP patterns.
    pub http: Vec<String>,
    /// Kubernetes rules.
    pub kubernetes: Vec<KubeRule>,
    /// Secret names.
    pub secrets: Vec<String>,
    /// Whether `wasi:clocks` is linked (renderers and pricing plugins).
    pub clock: bool,
}

/// Why a capability check failed; the message says which line to add and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String);

/// A plugin's effective capabilities: checked on every host call.
#[derive(Debug, Clone, PartialEq)]
pub struct Capabilities {
    plugin: String,
    requested: RequestedCapabilities,
    granted: PluginGrant,
}

impl Capabilities {
    /// Capabilities that allow nothing (for tests and unnamed plugins).
    pub fn deny_all(plugin: &str) -> Capabilities {
        Capabilities {
            plugin: plugin.to_string(),
            requested: Default::default(),
            granted: Default::default(),
        }
    }

    /// The operator grant half.
    pub fn grant(&self) -> &PluginGrant {
        &self.granted
    }

    /// What the plugin may actually do: the intersection of its request and its grant, as
    /// the host checks calls (see [`EffectiveCapabilities`]).
    pub fn effective(&self) -> EffectiveCapabilities {
        let (r, g) = (&self.requested, &self.granted);
        let mut http: Vec<String> = Vec::new();
        for requested in &r.http {
            for granted in &g.http {
                // The narrower of two patterns where one contains the other.
                let narrower = if requested.covers(granted) {
                    Some(granted)
                } else if granted.covers(requested) {
                    Some(requested)
                } else {
                    None
                };
                if let Some(p) = narrower
                    && !http.contains(&p.raw)
                {
                    http.push(p.raw.clone());
                }
            }
        }
        http.extend(
            g.extra_http
                .iter()
                .map(|p| format!("{} (extraHttp)", p.raw)),
        );
        let mut kubernetes = Vec::new();
        for requested in &r.kubernetes {
            for granted in &g.kubernetes {
                if let Some(rule) = requested.intersection(granted) {
                    kubernetes.push(rule);
                }
            }
        }
        let secrets = r
            .secrets
            .iter()
            .filter(|s| g.secrets.contains(s))
            .cloned()
            .collect();
        EffectiveCapabilities {
            http,
            kubernetes,
            secrets,
            clock: r.clock && g.clock,
        }
    }

    /// Whether any outgoing HTTP at all is possible (decides linking of `wasi:http`).
    pub fn any_http(&self) -> bool {
        (!self.requested.http.is_empty() && !self.granted.http.is_empty())
            || !self.granted.extra_http.is_empty()
    }

    /// What the plugin's manifest requests (`http [...]`, `kubernetes`, `secrets [...]`)
    /// when the operator grants it none of it: no grant entry for this plugin, or an empty
    /// one. `None` when it requests nothing or something is granted.
    pub fn nothing_granted(&self) -> Option<String> {
        let g = &self.granted;
        let granted_any = !(g.http.is_empty()
            && g.extra_http.is_empty()
            && g.kubernetes.is_empty()
            && g.secrets.is_empty());
        let r = &self.requested;
        let mut requested = Vec::new();
        if !r.http.is_empty() {
            let http: Vec<String> = r.http.iter().map(|p| p.to_string()).collect();
            requested.push(format!("http [{}]", http.join(", ")));
        }
        if !r.kubernetes.is_empty() {
            requested.push(format!("{} kubernetes rules", r.kubernetes.len()));
        }
        if !r.secrets.is_empty() {
            requested.push(format!("secrets [{}]", r.secrets.join(", ")));
        }
        (!granted_any && !requested.is_empty()).then(|| requested.join(", "))
    }

    /// Whether the plugin's manifest requests any outgoing HTTP (granted or not).
    pub fn requests_http(&self) -> bool {
        !self.requested.http.is_empty()
    }

    /// Whether `wasi:clocks` may be used by a renderer or pricing plugin.
    pub fn clock(&self) -> bool {
        self.requested.clock && self.granted.clock
    }

    /// Checks a request URL (before DNS). Returns the granted pattern that allowed it.
    /// A host name longer than DNS allows is refused as invalid before any pattern is tried.
    pub fn check_http(&self, scheme: &str, host: &str, port: u16) -> Result<&HttpPattern, Refusal> {
        if let Err(why) = check_host_name(host) {
            return Err(Refusal(format!(
                "plugin {} may not reach {scheme}://{}:{port}: invalid host name: {why}; the plugin must request a valid host name",
                self.plugin,
                shorten(host)
            )));
        }
        let line = format!("{scheme}://{host}:{port}");
        if let Some(extra) = self
            .granted
            .extra_http
            .iter()
            .find(|p| p.matches(scheme, host, port))
        {
            return Ok(extra);
        }
        let granted = self
            .granted
            .http
            .iter()
            .find(|p| p.matches(scheme, host, port));
        let requested = self
            .requested
            .http
            .iter()
            .any(|p| p.matches(scheme, host, port));
        match (granted, requested) {
            (Some(p), true) => Ok(p),
            (None, _) => Err(Refusal(format!(
                "plugin {} may not reach {line}: not granted; add \"{line}\" under plugins.{}.http in the grants file",
                self.plugin, self.plugin
            ))),
            (Some(_), false) => Err(Refusal(format!(
                "plugin {} may not reach {line}: the plugin did not request it; add \"{line}\" under capabilities.http in its plugin.yaml, or, to point the plugin at another endpoint (a proxy, a mirror, a fake) without changing it, grant it under plugins.{}.extraHttp instead of http",
                self.plugin, self.plugin
            ))),
        }
    }

    /// Checks a resolved address. Loopback, link-local (cloud metadata), unspecified and
    /// multicast addresses are refused unless the allowing pattern names that exact address;
    /// private ranges need `privateNetworks: true`.
    pub fn check_resolved_ip(
        &self,
        allowed_by: &HttpPattern,
        ip: IpAddr,
        host: &str,
    ) -> Result<(), Refusal> {
        let ip = canonical(ip);
        if allowed_by.literal_ip().map(canonical) == Some(ip) {
            return Ok(());
        }
        let special = match ip {
            IpAddr::V4(v4) => {
                let [a, b, c, _] = v4.octets();
                v4.is_loopback()
                    || v4.is_link_local()
                    || v4.is_multicast()
                    || v4.is_broadcast()
                    || a == 0 // "this network", 0.0.0.0/8
                    || a >= 240 // reserved, 240.0.0.0/4
                    || (a == 192 && b == 0 && c == 0) // IETF protocol assignments, 192.0.0.0/24
                    || (a == 198 && (b & 0xfe) == 18) // benchmarking, 198.18.0.0/15
            }
            IpAddr::V6(v6) => {
                let s = v6.segments();
                v6.is_loopback()
                    || v6.is_unspecified()
                    || v6.is_multicast()
                    || (s[0] & 0xffc0) == 0xfe80 // link-local
                    || (s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1) // local-use NAT64, 64:ff9b:1::/48
                    || (s[0] == 0x2001 && s[1] == 0) // Teredo, 2001::/32 (the IPv4 inside is hidden)
                    || (s[0] == 0x0100 && s[1..4] == [0, 0, 0]) // discard-only, 100::/64
            }
        };
        if special {
            return Err(Refusal(format!(
                "plugin {} may not reach {host}: it resolves to {ip} (loopback, link-local/metadata or otherwise special); grant that exact address to allow it",
                self.plugin
            )));
        }
        let private = match ip {
            IpAddr::V4(v4) => {
                v4.is_private() || (v4.octets()[0] == 100 && (v4.octets()[1] & 0xc0) == 64)
            }
            // unique-local fc00::/7 and the deprecated site-local fec0::/10
            IpAddr::V6(v6) => {
                (v6.segments()[0] & 0xfe00) == 0xfc00 || (v6.segments()[0] & 0xffc0) == 0xfec0
            }
        };
        if private && !self.granted.private_networks {
            return Err(Refusal(format!(
                "plugin {} may not reach {host}: it resolves to the private address {ip}; set privateNetworks: true under plugins.{} in the grants file",
                self.plugin, self.plugin
            )));
        }
        Ok(())
    }

    /// Checks a Kubernetes call.
    pub fn check_kube(&self, access: &KubeAccess<'_>) -> Result<(), Refusal> {
        let granted = self.granted.kubernetes.iter().any(|r| r.allows(access));
        let requested = self.requested.kubernetes.iter().any(|r| r.allows(access));
        match (granted, requested) {
            (true, true) => Ok(()),
            (false, _) => Err(Refusal(format!(
                "plugin {} may not {} {}: not granted; add `{}` under plugins.{}.kubernetes in the grants file",
                self.plugin,
                access.verb.as_str(),
                access.resource,
                access.as_rule_line(),
                self.plugin
            ))),
            (true, false) => Err(Refusal(format!(
                "plugin {} may not {} {}: the plugin did not request it; add `{}` under capabilities.kubernetes in its plugin.yaml",
                self.plugin,
                access.verb.as_str(),
                access.resource,
                access.as_rule_line()
            ))),
        }
    }

    /// Checks a secret read.
    pub fn check_secret(&self, name: &str) -> Result<(), Refusal> {
        let granted = self.granted.secrets.iter().any(|s| s == name);
        let requested = self.requested.secrets.iter().any(|s| s == name);
        match (granted, requested) {
            (true, true) => Ok(()),
            (false, _) => Err(Refusal(format!(
                "plugin {} may not read secret {name:?}: not granted; add \"{name}\" under plugins.{}.secrets in the grants file",
                self.plugin, self.plugin
            ))),
            (true, false) => Err(Refusal(format!(
                "plugin {} may not read secret {name:?}: the plugin did not request it; add \"{name}\" under capabilities.secrets in its plugin.yaml",
                self.plugin
            ))),
        }
    }
}

/// The address a connection really reaches, for the checks: IPv6 forms that carry an IPv4
/// address and are routed to it are checked as that IPv4 address — IPv4-mapped
/// (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`), NAT64 (`64:ff9b::/96`) and 6to4
/// (`2002:aabb:ccdd::/48`). So `64:ff9b::a9fe:a9fe` is the metadata address 169.254.169.254.
fn canonical(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else { return ip };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let s = v6.segments();
    let embedded = |hi: u16, lo: u16| {
        IpAddr::V4(std::net::Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        ))
    };
    // IPv4-compatible: ::a.b.c.d (but not :: or ::1, which are IPv6's own).
    if s[..6] == [0; 6] && !(s[6] == 0 && s[7] <= 1) {
        return embedded(s[6], s[7]);
    }
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0; 4] {
        return embedded(s[6], s[7]);
    }
    if s[0] == 0x2002 {
        return embedded(s[1], s[2]);
    }
    ip
}

/// The Levenshtein distance between two short names (a misspelt grant entry and a plugin).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous + usize::from(ca != *cb);
            previous = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(previous + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests;
