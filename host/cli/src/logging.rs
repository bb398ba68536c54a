//! Log setup shared by every command: the `--log-format` choice and the `tracing` subscriber.
//!
//! The level: `RUST_LOG` (a `tracing` filter such as `info,joinery_controller=debug`) wins when
//! set; otherwise the command's default applies. For `joinery run` that default is upstream's
//! `LOG_LEVEL` setting (`debug`, `info` or `error`, see [`log_level_filter`]); the other
//! commands pick their own (see `Execute::default_log_level`).
//!
//! `--log-format json` writes one object per line with `tracing-subscriber`'s keys:
//! `timestamp` (RFC 3339, UTC), `level` (`ERROR`, `WARN`, `INFO`, `DEBUG`, `TRACE`), `fields`
//! (`message` plus the event's own fields, e.g. `nodeclaim`, `error`), `target` (the Rust
//! module that logged, e.g. `joinery_controller::lifecycle`) and, inside a span, `span` and
//! `spans`.

use clap::ValueEnum;

/// Log output format.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Joinery's own crates: what `LOG_LEVEL=debug` turns to debug (the Kubernetes client, HTTP and
/// TLS crates stay at info, or their debug lines would drown Joinery's).
const JOINERY_TARGETS: [&str; 8] = [
    "joinery",
    "joinery_api",
    "joinery_core",
    "joinery_kube",
    "joinery_runtime",
    "joinery_controller",
    "joinery_simulate",
    "joinery_sim",
];

/// The filter upstream's `LOG_LEVEL` value stands for, `None` for a value upstream does not
/// accept (`joinery run` then refuses to start, naming the variable): `info` and `error` are
/// those levels for everything; `debug` is debug for Joinery's crates and info for the rest.
pub fn log_level_filter(level: &str) -> Option<String> {
    match level {
        "info" | "error" => Some(level.to_string()),
        "debug" => Some(std::iter::once("info".to_string()).chain(JOINERY_TARGETS.iter().map(|t| format!("{t}=debug"))).collect::<Vec<_>>().join(",")),
        _ => None,
    }
}

/// The default filter of commands that honour `LOG_LEVEL`: its filter when it is set and valid,
/// else `info`.
pub fn log_level_env_filter() -> String {
    std::env::var("LOG_LEVEL").ok().and_then(|level| log_level_filter(&level)).unwrap_or_else(|| "info".to_string())
}

/// Installs the `tracing` subscriber writing to stderr. `RUST_LOG` wins when set; otherwise
/// `default_filter` (the command's own choice, see `Execute::default_log_level`) applies.
pub fn init_tracing(format: LogFormat, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default_filter.into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_level_maps_upstream_values_to_filters() {
        assert_eq!(log_level_filter("info").as_deref(), Some("info"));
        assert_eq!(log_level_filter("error").as_deref(), Some("error"));
        let debug = log_level_filter("debug").unwrap();
        assert!(debug.starts_with("info,") && debug.contains("joinery_controller=debug"), "{debug}");
        assert!(tracing_subscriber::EnvFilter::try_new(&debug).is_ok(), "{debug}");
        assert_eq!(log_level_filter("trace"), None);
    }
}
