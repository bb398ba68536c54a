//! Log setup shared by every command: the `--log-format` choice and the `tracing` subscriber.
//!
//! The level: `RUST_LOG` (a `tracing` filter such as `info,joinery_controller=debug`) wins when
//! set; otherwise the command's default applies. For `joinery run` that default is upstream's
//! `LOG_LEVEL` setting (`debug`, `info` or `error`, see [`log_level_filter`]); the other
//! commands pick their own (see `Execute::default_log_level`).
//!
//! `--log-format json` writes one object per line with upstream Karpenter's keys: `level`
//! (`ERROR`, `WARN`, `INFO`, `DEBUG`), `time` (RFC 3339, UTC, milliseconds), `logger`
//! (`controller` for Joinery's own lines, else the crate that logged), `message`, then the
//! event's fields: `controller`, the objects as upstream writes them (`"NodeClaim": {"name":
//! …}`, `"Node"`, `"NodePool"`, `"NodeClass"`) and the rest under their own names (`error`,
//! `plugin`, …).

use std::fmt;

use clap::ValueEnum;
use tracing::field::{Field, Visit};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

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
    "joinery_adapter",
    "joinery_runtime",
    "joinery_controller",
    "joinery_simulate",
    "joinery_emulator",
];

/// The filter upstream's `LOG_LEVEL` value stands for, `None` for a value upstream does not
/// accept (`joinery run` then refuses to start, naming the variable): `info` and `error` are
/// those levels for everything; `debug` is debug for Joinery's crates and info for the rest.
pub fn log_level_filter(level: &str) -> Option<String> {
    match level {
        "info" | "error" => Some(level.to_string()),
        "debug" => Some(
            std::iter::once("info".to_string())
                .chain(JOINERY_TARGETS.iter().map(|t| format!("{t}=debug")))
                .collect::<Vec<_>>()
                .join(","),
        ),
        _ => None,
    }
}

/// The default filter of commands that honour `LOG_LEVEL`: its filter when it is set and valid,
/// else `info`.
pub fn log_level_env_filter() -> String {
    std::env::var("LOG_LEVEL")
        .ok()
        .and_then(|level| log_level_filter(&level))
        .unwrap_or_else(|| "info".to_string())
}

/// Installs the `tracing` subscriber writing to stderr. `RUST_LOG` wins when set; otherwise
/// `default_filter` (the command's own choice, see `Execute::default_log_level`) applies.
pub fn init_tracing(format: LogFormat, default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| default_filter.into());
    // Colour only on a terminal: a file, a pipe or a log collector gets plain text.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.event_format(UpstreamJson).try_init(),
    };
}

/// Formats an event as one JSON object with upstream Karpenter's keys (see the module docs).
struct UpstreamJson;

impl<S, N> FormatEvent<S, N> for UpstreamJson
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let time = k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string();
        let mut fields = Fields::default();
        event.record(&mut fields);
        writeln!(
            writer,
            "{}",
            upstream_line(meta.level().as_str(), &time, meta.target(), fields)
        )
    }
}

/// An event's fields, in the order recorded.
#[derive(Default)]
struct Fields {
    message: String,
    rest: Vec<(String, serde_json::Value)>,
}

impl Fields {
    fn record(&mut self, field: &Field, value: serde_json::Value) {
        if field.name() == "message" {
            self.message = value
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| value.to_string());
        } else {
            self.rest.push((field.name().to_string(), value));
        }
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.record(field, value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.record(field, value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.record(field, value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.record(field, value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.record(field, value.into());
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.record(field, value.to_string().into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.record(field, format!("{value:?}").into());
    }
}

/// The JSON line of one event: upstream's keys first, then the fields, objects renamed to
/// upstream's `"Kind": {"name": …}`.
fn upstream_line(level: &str, time: &str, target: &str, fields: Fields) -> serde_json::Value {
    let krate = target.split("::").next().unwrap_or(target);
    let logger = if krate == "joinery" || krate.starts_with("joinery_") {
        "controller"
    } else {
        krate
    };
    let mut line = serde_json::Map::new();
    line.insert("level".into(), level.into());
    line.insert("time".into(), time.into());
    line.insert("logger".into(), logger.into());
    line.insert("message".into(), fields.message.into());
    for (name, value) in fields.rest {
        let kind = match name.as_str() {
            "nodeclaim" => Some("NodeClaim"),
            "node" => Some("Node"),
            "nodepool" => Some("NodePool"),
            "nodeclass" => Some("NodeClass"),
            _ => None,
        };
        match kind {
            Some(kind) => line.insert(kind.into(), serde_json::json!({"name": value})),
            None => line.insert(name, value),
        };
    }
    serde_json::Value::Object(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_level_maps_upstream_values_to_filters() {
        assert_eq!(log_level_filter("info").as_deref(), Some("info"));
        assert_eq!(log_level_filter("error").as_deref(), Some("error"));
        let debug = log_level_filter("debug").unwrap();
        assert!(
            debug.starts_with("info,") && debug.contains("joinery_controller=debug"),
            "{debug}"
        );
        assert!(
            tracing_subscriber::EnvFilter::try_new(&debug).is_ok(),
            "{debug}"
        );
        assert_eq!(log_level_filter("trace"), None);
    }

    #[test]
    fn json_lines_carry_upstreams_keys_and_object_shapes() {
        let fields = Fields {
            message: "registered nodeclaim".into(),
            rest: vec![
                ("controller".into(), "nodeclaim.lifecycle".into()),
                ("nodeclaim".into(), "default-abc".into()),
                ("node".into(), "n1".into()),
                ("retry_in_ms".into(), 250.into()),
            ],
        };
        let line = upstream_line(
            "INFO",
            "2026-12-01T00:00:00.000Z",
            "joinery_controller::lifecycle",
            fields,
        );
        assert_eq!(
            line,
            serde_json::json!({"level": "INFO", "time": "2026-12-01T00:00:00.000Z", "logger": "controller", "message": "registered nodeclaim",
                               "controller": "nodeclaim.lifecycle", "NodeClaim": {"name": "default-abc"}, "Node": {"name": "n1"}, "retry_in_ms": 250})
        );
        let other = upstream_line("WARN", "t", "kube_client::client", Fields::default());
        assert_eq!(other["logger"], "kube_client");
    }
}
