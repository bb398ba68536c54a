//! Errors of the plugin runtime. Load errors name the plugin and the file or field;
//! call errors are classified so controllers can react (retry, skip, report).

use crate::contract::{CloudError, RenderError};

/// Why a plugin (or the grants file) could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// `plugin.yaml` is malformed or invalid.
    #[error("plugin {plugin}: invalid plugin.yaml: {message}")]
    Manifest {
        /// Plugin name, or the manifest path when the name is unknown.
        plugin: String,
        /// What is wrong.
        message: String,
    },
    /// The grants file is malformed.
    #[error("grants file {origin}: {message}")]
    Grants {
        /// Where the grants came from.
        origin: String,
        /// What is wrong.
        message: String,
    },
    /// A file could not be read.
    #[error("plugin {plugin}: cannot read {path}: {source}")]
    Io {
        /// Plugin name or directory.
        plugin: String,
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The component's digest differs from the manifest's `sha256`.
    #[error(
        "plugin {plugin}: sha256 mismatch: plugin.yaml says {expected}, the component is {actual}; rebuild or re-package the plugin"
    )]
    Digest {
        /// Plugin name.
        plugin: String,
        /// Digest from the manifest.
        expected: String,
        /// Digest of the file.
        actual: String,
    },
    /// The manifest carries no digest.
    #[error(
        "plugin {plugin}: plugin.yaml has no sha256; add `sha256: {actual}` (run `joinery plugins inspect` to compute it)"
    )]
    MissingDigest {
        /// Plugin name.
        plugin: String,
        /// Digest of the file.
        actual: String,
    },
    /// The bytes are not a valid component for this engine.
    #[error("plugin {plugin}: not a valid WebAssembly component: {message}")]
    Compile {
        /// Plugin name.
        plugin: String,
        /// Compiler message.
        message: String,
    },
    /// The component imports something its kind or capabilities do not allow.
    #[error("plugin {plugin}: imports {import}, which {reason}")]
    Import {
        /// Plugin name.
        plugin: String,
        /// The offending import.
        import: String,
        /// Why it is refused and what to do.
        reason: String,
    },
    /// The component exports its kind's interface at a WIT version other than its manifest's.
    #[error(
        "plugin {plugin}: its component was built against WIT version {built} of the plugin interface; this host supports {supported}; {fix}"
    )]
    WitVersion {
        /// Plugin name.
        plugin: String,
        /// The version the component exports.
        built: String,
        /// The versions this host loads.
        supported: String,
        /// What to change.
        fix: String,
    },
    /// The component does not export its kind's interface.
    #[error(
        "plugin {plugin}: does not export {expected} (it exports: {found}); check `kind` and `wit` in plugin.yaml"
    )]
    Export {
        /// Plugin name.
        plugin: String,
        /// The expected export.
        expected: String,
        /// What it exports.
        found: String,
    },
    /// Linking failed.
    #[error("plugin {plugin}: cannot link: {message}")]
    Link {
        /// Plugin name.
        plugin: String,
        /// Linker message.
        message: String,
    },
    /// Two plugins share a name.
    #[error("plugin {plugin}: defined twice ({first} and {second}); plugin names must be unique")]
    Duplicate {
        /// Plugin name.
        plugin: String,
        /// First location.
        first: String,
        /// Second location.
        second: String,
    },
    /// A configured plugin directory is missing or unusable.
    #[error(
        "plugin directory {path} {message}; fix --plugin-dir (JOINERY_PLUGIN_DIRS) or the volume mount"
    )]
    PluginDir {
        /// The configured path.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// Two cloud plugins serve the same NodeClass kind.
    #[error(
        "NodeClass kind {kind} in group {group} is served by two plugins, {first} and {second}; remove one, or change the nodeClass in its plugin.yaml"
    )]
    NodeClassConflict {
        /// API group.
        group: String,
        /// Kind.
        kind: String,
        /// The first plugin (and where it came from).
        first: String,
        /// The second plugin (and where it came from).
        second: String,
    },
    /// Several plugins failed; the set was not swapped in.
    #[error("{} plugin(s) failed to load: {}", .0.len(), .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))]
    Set(Vec<LoadError>),
}

impl LoadError {
    /// The plugins the error is about (every failed plugin of a [`LoadError::Set`]); empty
    /// when it is about a directory, the grants file or a pair of plugins.
    pub fn plugins(&self) -> Vec<&str> {
        match self {
            LoadError::Manifest { plugin, .. }
            | LoadError::Io { plugin, .. }
            | LoadError::Digest { plugin, .. }
            | LoadError::MissingDigest { plugin, .. }
            | LoadError::Compile { plugin, .. }
            | LoadError::Import { plugin, .. }
            | LoadError::WitVersion { plugin, .. }
            | LoadError::Export { plugin, .. }
            | LoadError::Link { plugin, .. }
            | LoadError::Duplicate { plugin, .. } => vec![plugin.as_str()],
            LoadError::Set(errors) => errors.iter().flat_map(LoadError::plugins).collect(),
            _ => Vec::new(),
        }
    }
}

/// Why a plugin call failed. Every variant names the plugin and the operation.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The plugin trapped (panic, unreachable, out-of-bounds…); `message` carries its stderr.
    #[error("plugin {plugin} trapped in {op}: {message}")]
    Trap {
        /// Plugin name.
        plugin: String,
        /// Operation.
        op: &'static str,
        /// Trap description and the plugin's stderr.
        message: String,
    },
    /// The call ran past its deadline.
    #[error(
        "plugin {plugin} timed out in {op} after {limit_ms} ms; raise limits.timeoutMs if the plugin is legitimately slow"
    )]
    Timeout {
        /// Plugin name.
        plugin: String,
        /// Operation.
        op: &'static str,
        /// The deadline.
        limit_ms: u32,
    },
    /// Every concurrency slot of the plugin stayed busy for a whole call deadline.
    #[error(
        "plugin {plugin}: {op} waited {waited_ms} ms for one of its {max_concurrency} call slots (limits.{limit}); earlier calls are stuck or slow, check the plugin or raise {limit}"
    )]
    Saturated {
        /// Plugin name.
        plugin: String,
        /// Operation.
        op: &'static str,
        /// The limit that was full: `maxConcurrency`, or `maxConcurrentCreates` for creates.
        limit: &'static str,
        /// The concurrency limit.
        max_concurrency: u32,
        /// How long the call waited.
        waited_ms: u32,
    },
    /// The call tried to grow memory past its limit.
    #[error(
        "plugin {plugin} exceeded its memory limit of {limit_mib} MiB in {op}; raise limits.memoryMiB if that is expected"
    )]
    MemoryLimit {
        /// Plugin name.
        plugin: String,
        /// Operation.
        op: &'static str,
        /// The limit.
        limit_mib: u32,
    },
    /// The plugin returned something the host refuses (bad quantity, wrong list length…).
    #[error("plugin {plugin} returned invalid output from {op}: {message}")]
    InvalidOutput {
        /// Plugin name.
        plugin: String,
        /// Operation.
        op: &'static str,
        /// What is wrong, naming the field.
        message: String,
    },
    /// The cloud plugin returned a classified error.
    #[error("plugin {plugin} {op}: {}", describe_cloud_error(error))]
    Cloud {
        /// Plugin name.
        plugin: String,
        /// Operation.
        op: &'static str,
        /// The classified error.
        error: CloudError,
    },
    /// The renderer refused to render.
    #[error("renderer {plugin}: {}", describe_render_error(error))]
    Render {
        /// Plugin name.
        plugin: String,
        /// Why.
        error: RenderError,
    },
    /// The pricing plugin refused the batch.
    #[error("pricing plugin {plugin}: {message}")]
    Pricing {
        /// Plugin name.
        plugin: String,
        /// Why.
        message: String,
    },
    /// No plugin with that name (or of that kind) is loaded.
    #[error(
        "no {kind} plugin named {name:?} is loaded (loaded: {loaded}); check the plugin directories and names"
    )]
    NotFound {
        /// Wanted kind.
        kind: &'static str,
        /// Wanted name.
        name: String,
        /// What is loaded.
        loaded: String,
    },
    /// The host could not set up the call.
    #[error("plugin {plugin}: host error in {op}: {message}")]
    Host {
        /// Plugin name.
        plugin: String,
        /// Operation.
        op: &'static str,
        /// What failed.
        message: String,
    },
}

impl CallError {
    /// Replaces every secret value the plugin was given in the messages the plugin wrote
    /// (its errors and its stderr).
    pub fn scrub(&mut self, secrets: &crate::redact::SecretValues) {
        if secrets.is_empty() {
            return;
        }
        let scrub = |text: &mut String| secrets.scrub_in_place(text);
        match self {
            CallError::Trap { message, .. }
            | CallError::InvalidOutput { message, .. }
            | CallError::Pricing { message, .. }
            | CallError::Host { message, .. } => scrub(message),
            CallError::Cloud { error, .. } => match error {
                CloudError::NotFound(m)
                | CloudError::NodeClassNotReady(m)
                | CloudError::QuotaExceeded(m)
                | CloudError::Invalid(m)
                | CloudError::Internal(m)
                | CloudError::Unsupported(m) => scrub(m),
                CloudError::InsufficientCapacity(c) => scrub(&mut c.message),
                CloudError::Retryable(r) => scrub(&mut r.message),
            },
            CallError::Render { error, .. } => match error {
                RenderError::InvalidParameter(m)
                | RenderError::MissingSecret(m)
                | RenderError::InvalidTemplate(m) => scrub(m),
            },
            CallError::Timeout { .. }
            | CallError::Saturated { .. }
            | CallError::MemoryLimit { .. }
            | CallError::NotFound { .. } => {}
        }
    }

    /// The error's class for `joinery_plugin_errors_total`: the cloud error's kind
    /// (`not_found`, `insufficient_capacity`, `retryable`, …) for a cloud error, else as
    /// [`CallError::metric_label`].
    pub fn class(&self) -> &'static str {
        match self {
            CallError::Cloud { error, .. } => match error {
                CloudError::NotFound(_) => "not_found",
                CloudError::InsufficientCapacity(_) => "insufficient_capacity",
                CloudError::NodeClassNotReady(_) => "nodeclass_not_ready",
                CloudError::QuotaExceeded(_) => "quota_exceeded",
                CloudError::Retryable(_) => "retryable",
                CloudError::Invalid(_) => "invalid",
                CloudError::Internal(_) => "internal",
                CloudError::Unsupported(_) => "unsupported",
            },
            other => other.metric_label(),
        }
    }

    /// A short label for metrics (`trap`, `timeout`, `memory`, `invalid_output`, `cloud`, …),
    /// as in `karpenter_cloudprovider_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            CallError::Trap { .. } => "trap",
            CallError::Timeout { .. } => "timeout",
            CallError::Saturated { .. } => "saturated",
            CallError::MemoryLimit { .. } => "memory",
            CallError::InvalidOutput { .. } => "invalid_output",
            CallError::Cloud { .. } => "cloud",
            CallError::Render { .. } => "render",
            CallError::Pricing { .. } => "pricing",
            CallError::NotFound { .. } => "not_found",
            CallError::Host { .. } => "host",
        }
    }
}

/// A human-readable description of a classified cloud error.
pub fn describe_cloud_error(error: &CloudError) -> String {
    use std::fmt::Write;
    let mut f = String::new();
    let _ = {
        match error {
            CloudError::NotFound(m) => write!(f, "not found: {m}"),
            CloudError::InsufficientCapacity(c) => {
                write!(f, "insufficient capacity: {}", c.message)
            }
            CloudError::NodeClassNotReady(m) => write!(f, "node class not ready: {m}"),
            CloudError::QuotaExceeded(m) => write!(f, "quota exceeded: {m}"),
            CloudError::Retryable(r) => match r.retry_after_ms {
                Some(ms) => write!(f, "retryable (after {ms} ms): {}", r.message),
                None => write!(f, "retryable: {}", r.message),
            },
            CloudError::Invalid(m) => write!(f, "invalid: {m}"),
            CloudError::Internal(m) => write!(f, "internal: {m}"),
            CloudError::Unsupported(m) => write!(f, "unsupported: {m}"),
        }
    };
    f
}

/// A human-readable description of a renderer error.
pub fn describe_render_error(error: &RenderError) -> String {
    match error {
        RenderError::InvalidParameter(m) => format!("invalid parameter: {m}"),
        RenderError::MissingSecret(m) => format!("missing secret: {m}"),
        RenderError::InvalidTemplate(m) => format!("invalid template: {m}"),
    }
}
