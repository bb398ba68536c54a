//! Keeping secret values out of what a plugin says.
//!
//! A plugin's error messages, its stderr (carried by trap errors) and its log lines end up in
//! Kubernetes Events, NodeClaim conditions and the host's logs, where anyone who can read
//! those sees them. So every secret value the host hands a plugin (through the `secrets`
//! import, or in a renderer's context) is remembered for that plugin, and every string the
//! plugin produces is scrubbed of those values — as written and base64-encoded, the form
//! userData carries — before it leaves the runtime. Values shorter than
//! [`MIN_SECRET_LEN`] are not scrubbed (they would blot out ordinary words).

use std::collections::BTreeSet;
use std::sync::Mutex;

use base64::Engine;

/// Secret values shorter than this are not scrubbed.
pub const MIN_SECRET_LEN: usize = 4;
/// What a scrubbed value is replaced with.
pub const REDACTED: &str = "[redacted]";
/// Most values remembered per plugin (each granted secret has a few keys).
const MAX_REMEMBERED: usize = 256;

/// The secret values one plugin has been given, as the strings to scrub.
#[derive(Debug, Default)]
pub struct SecretValues {
    patterns: Mutex<BTreeSet<String>>,
}

impl SecretValues {
    /// Remembers a value given to the plugin.
    pub fn remember(&self, value: &[u8]) {
        if value.len() < MIN_SECRET_LEN {
            return;
        }
        let mut patterns = self.patterns.lock().unwrap_or_else(|p| p.into_inner());
        if patterns.len() >= MAX_REMEMBERED {
            return;
        }
        if let Ok(text) = std::str::from_utf8(value) {
            patterns.insert(text.to_string());
        }
        patterns.insert(base64::engine::general_purpose::STANDARD.encode(value));
    }

    /// Whether any value was remembered.
    pub fn is_empty(&self) -> bool {
        self.patterns
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// `text` with every remembered value replaced by [`REDACTED`] (longest first, so a
    /// value containing another is replaced whole).
    pub fn scrub(&self, text: &str) -> String {
        let patterns = self.patterns.lock().unwrap_or_else(|p| p.into_inner());
        if patterns.is_empty() {
            return text.to_string();
        }
        let mut ordered: Vec<&String> = patterns.iter().collect();
        ordered.sort_by_key(|p| std::cmp::Reverse(p.len()));
        let mut out = text.to_string();
        for pattern in ordered {
            if out.contains(pattern.as_str()) {
                out = out.replace(pattern.as_str(), REDACTED);
            }
        }
        out
    }

    /// Scrubs a string in place.
    pub fn scrub_in_place(&self, text: &mut String) {
        if !self.is_empty() {
            *text = self.scrub(text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_scrubbed_as_written_and_base64_encoded() {
        let secrets = SecretValues::default();
        secrets.remember(b"K10abc::server:s3cr3t");
        let encoded = base64::engine::general_purpose::STANDARD.encode(b"K10abc::server:s3cr3t");
        let message = format!("bad token K10abc::server:s3cr3t in userData {encoded}");
        let scrubbed = secrets.scrub(&message);
        assert_eq!(scrubbed, "bad token [redacted] in userData [redacted]");
    }

    #[test]
    fn short_values_and_nothing_remembered_leave_text_alone() {
        let secrets = SecretValues::default();
        assert_eq!(secrets.scrub("a b c"), "a b c");
        secrets.remember(b"abc");
        assert!(secrets.is_empty());
        assert_eq!(secrets.scrub("abc"), "abc");
    }

    #[test]
    fn the_longest_value_wins() {
        let secrets = SecretValues::default();
        secrets.remember(b"secret");
        secrets.remember(b"secret-and-more");
        assert_eq!(
            secrets.scrub("x secret-and-more y secret"),
            "x [redacted] y [redacted]"
        );
    }
}
