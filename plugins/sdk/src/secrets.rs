//! Secrets the operator granted to this plugin by name (`joinery:plugin/secrets`), for the
//! cloud world. Renderers do not import this interface: their granted secrets arrive in the
//! render context (see [`crate::renderer::RenderContext::secret`]).
//!
//! ```ignore
//! let api_key = joinery_plugin_sdk::secrets::get_string("exoscale-credentials", "api-key")?;
//! ```

pub use crate::bindings::cloud::joinery::plugin::secrets::{SecretEntry, SecretError};

impl SecretEntry {
    /// Builds an entry (handy in fake hosts).
    pub fn new(key: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        SecretEntry {
            key: key.into(),
            value: value.into(),
        }
    }
}

impl SecretError {
    /// The short kind of the error: `denied`, `not-found` or `unavailable`.
    pub fn kind(&self) -> &'static str {
        match self {
            SecretError::Denied(_) => "denied",
            SecretError::NotFound(_) => "not-found",
            SecretError::Unavailable(_) => "unavailable",
        }
    }

    /// The host's message, verbatim.
    pub fn message(&self) -> &str {
        match self {
            SecretError::Denied(m) | SecretError::NotFound(m) | SecretError::Unavailable(m) => m,
        }
    }

    /// `kind: message`, e.g. `denied: secret x is not granted …`.
    pub fn describe(&self) -> String {
        format!("{}: {}", self.kind(), self.message())
    }
}

/// All keys of one secret.
#[derive(Clone, Debug, PartialEq)]
pub struct Secret {
    /// The name it was read under.
    pub name: String,
    /// Its keys and (decoded) values.
    pub entries: Vec<SecretEntry>,
}

impl Secret {
    /// The raw bytes under `key`.
    pub fn get(&self, key: &str) -> Option<&[u8]> {
        self.entries
            .iter()
            .find(|e| e.key == key)
            .map(|e| e.value.as_slice())
    }

    /// The value under `key` as UTF-8 text, with surrounding whitespace (a trailing newline
    /// from `kubectl create secret --from-file`) trimmed.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)
            .and_then(|v| std::str::from_utf8(v).ok())
            .map(str::trim)
    }

    /// The keys present.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.key.as_str())
    }
}

/// Reads all keys of the secret `name` (`namespace/name`, or `name` in the host's namespace).
pub fn get(name: &str) -> Result<Secret, SecretError> {
    crate::sys::get_secret(name).map(|entries| Secret {
        name: name.to_string(),
        entries,
    })
}

/// Reads one key of one secret as trimmed UTF-8 text; the error says what is missing and
/// what to do about it.
pub fn get_string(name: &str, key: &str) -> Result<String, String> {
    let secret = get(name).map_err(|e| format!("cannot read secret `{name}`: {}", e.describe()))?;
    match secret.get(key) {
        None => Err(format!(
            "secret `{name}` has no key `{key}` (keys: {})",
            secret.keys().collect::<Vec<_>>().join(", ")
        )),
        Some(bytes) => std::str::from_utf8(bytes)
            .map(|s| s.trim().to_string())
            .map_err(|_| format!("secret `{name}` key `{key}` is not UTF-8 text")),
    }
}
