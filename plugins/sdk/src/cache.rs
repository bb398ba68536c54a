//! The per-plugin key/value cache (`joinery:plugin/cache`), for the pricing and cloud worlds.
//!
//! Calls are stateless (every call runs in a fresh instance), so this is where a plugin keeps
//! what it learnt between calls. The host bounds the cache's size and may drop entries
//! early: always be ready to recompute a missing value.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// Returns the bytes stored under `key`, if present and not expired.
pub fn get(key: &str) -> Option<Vec<u8>> {
    crate::sys::cache_get(key)
}

/// Stores `value` under `key` for `ttl_seconds` seconds.
pub fn set(key: &str, value: &[u8], ttl_seconds: u32) {
    crate::sys::cache_set(key, value, ttl_seconds)
}

/// Removes `key`.
pub fn remove(key: &str) {
    crate::sys::cache_remove(key)
}

/// Returns the value under `key` decoded from JSON; `None` when missing, expired or not
/// decodable as `T` (treat all three as a cache miss).
pub fn get_json<T: DeserializeOwned>(key: &str) -> Option<T> {
    get(key).and_then(|bytes| serde_json::from_slice(&bytes).ok())
}

/// Stores `value` as JSON under `key` for `ttl_seconds` seconds.
pub fn set_json<T: Serialize + ?Sized>(key: &str, value: &T, ttl_seconds: u32) {
    // Serializing plain data to a Vec cannot fail except for maps with non-string keys;
    // skipping the write then only costs a cache miss later.
    if let Ok(bytes) = serde_json::to_vec(value) {
        set(key, &bytes, ttl_seconds);
    }
}
