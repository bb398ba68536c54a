//! Structured logging into the host's log stream (`joinery:plugin/log`).
//!
//! The host tags every line with the plugin and the call, may truncate very long lines and
//! rate-limits floods, so log what an operator needs, not every step.
//!
//! ```ignore
//! joinery_plugin_sdk::log::info(format!("launching {}", claim.name));
//! ```

/// Log severity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    /// Very detailed tracing.
    Trace,
    /// Debugging detail.
    Debug,
    /// Normal operational messages.
    Info,
    /// Something unexpected that the plugin recovered from.
    Warn,
    /// A failure.
    Error,
}

/// Writes one log line at `level`.
pub fn log(level: Level, message: &str) {
    crate::sys::log(level, message);
}

/// Logs at [`Level::Trace`].
pub fn trace(message: impl AsRef<str>) {
    log(Level::Trace, message.as_ref());
}

/// Logs at [`Level::Debug`].
pub fn debug(message: impl AsRef<str>) {
    log(Level::Debug, message.as_ref());
}

/// Logs at [`Level::Info`].
pub fn info(message: impl AsRef<str>) {
    log(Level::Info, message.as_ref());
}

/// Logs at [`Level::Warn`].
pub fn warn(message: impl AsRef<str>) {
    log(Level::Warn, message.as_ref());
}

/// Logs at [`Level::Error`].
pub fn error(message: impl AsRef<str>) {
    log(Level::Error, message.as_ref());
}
