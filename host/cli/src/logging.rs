//! Log setup shared by every command: the `--log-format` choice and the `tracing` subscriber.

use clap::ValueEnum;

/// Log output format.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Installs the `tracing` subscriber writing to stderr. `RUST_LOG` wins when set; otherwise
/// `default_level` (the command's own choice, see `Execute::default_log_level`) applies.
pub fn init_tracing(format: LogFormat, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default_level.into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}
