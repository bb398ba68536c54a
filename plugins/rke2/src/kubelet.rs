//! The NodeClass `kubelet` settings (Karpenter's field names) as kubelet command-line flags.
//!
//! | NodeClass field | kubelet flag | value |
//! |---|---|---|
//! | `maxPods` | `max-pods` | integer |
//! | `podsPerCore` | `pods-per-core` | integer |
//! | `kubeReserved` | `kube-reserved` | `name=quantity,…`, sorted |
//! | `systemReserved` | `system-reserved` | `name=quantity,…`, sorted |
//! | `evictionHard` | `eviction-hard` | `signal<threshold,…`, sorted |
//! | `evictionSoft` | `eviction-soft` | `signal<threshold,…`, sorted |
//! | `evictionSoftGracePeriod` | `eviction-soft-grace-period` | `signal=duration,…`, sorted |
//! | `evictionMaxPodGracePeriod` | `eviction-max-pod-grace-period` | integer (seconds) |
//! | `imageGCHighThresholdPercent` | `image-gc-high-threshold` | integer |
//! | `imageGCLowThresholdPercent` | `image-gc-low-threshold` | integer |
//! | `cpuCFSQuota` | `cpu-cfs-quota` | `true`/`false` |
//! | `clusterDNS` | `cluster-dns` | `ip,…` in the given order |
//!
//! Flags come in the table's order. `null` values and empty maps or lists are skipped; other
//! fields are logged and ignored (the cloud plugin may still use them for allocatable).
//! A `,` inside a map entry or list item is refused, since the kubelet splits on it.

use joinery_plugin_sdk::log;
use joinery_plugin_sdk::renderer::{RenderContext, RenderError};
use serde_json::Value;

/// How a NodeClass field's JSON becomes the flag value.
#[derive(Clone, Copy)]
enum Shape {
    /// A non-negative integer.
    Count,
    /// `true` or `false`.
    Switch,
    /// An object joined as `key<separator>value,…`, sorted by key.
    Pairs(char),
    /// A list joined with `,`.
    List,
}

/// NodeClass field, kubelet flag, shape: in output order.
const MAPPING: &[(&str, &str, Shape)] = &[
    ("maxPods", "max-pods", Shape::Count),
    ("podsPerCore", "pods-per-core", Shape::Count),
    ("kubeReserved", "kube-reserved", Shape::Pairs('=')),
    ("systemReserved", "system-reserved", Shape::Pairs('=')),
    ("evictionHard", "eviction-hard", Shape::Pairs('<')),
    ("evictionSoft", "eviction-soft", Shape::Pairs('<')),
    (
        "evictionSoftGracePeriod",
        "eviction-soft-grace-period",
        Shape::Pairs('='),
    ),
    (
        "evictionMaxPodGracePeriod",
        "eviction-max-pod-grace-period",
        Shape::Count,
    ),
    (
        "imageGCHighThresholdPercent",
        "image-gc-high-threshold",
        Shape::Count,
    ),
    (
        "imageGCLowThresholdPercent",
        "image-gc-low-threshold",
        Shape::Count,
    ),
    ("cpuCFSQuota", "cpu-cfs-quota", Shape::Switch),
    ("clusterDNS", "cluster-dns", Shape::List),
];

/// What a JSON value is, for error messages.
fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_u64() => "an integer",
        Value::Number(_) => "a negative or fractional number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn wrong(field: &str, expected: &str, value: &Value) -> RenderError {
    RenderError::InvalidParameter(format!(
        "kubelet.{field} must be {expected}, not {}",
        describe(value)
    ))
}

/// A scalar inside a map or list: a string or a number, without `,`.
fn item(field: &str, value: &Value) -> Result<String, RenderError> {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => return Err(wrong(field, "made of strings", other)),
    };
    if text.contains(',') {
        return Err(RenderError::InvalidParameter(format!(
            "kubelet.{field}: `{text}` contains a comma, which would split it in two"
        )));
    }
    Ok(text)
}

/// One field's flag value; `None` when there is nothing to pass.
fn flag_value(field: &str, shape: Shape, value: &Value) -> Result<Option<String>, RenderError> {
    let text = match (shape, value) {
        (_, Value::Null) => return Ok(None),
        (Shape::Count, Value::Number(n)) if n.is_u64() => n.to_string(),
        (Shape::Count, other) => return Err(wrong(field, "a non-negative integer", other)),
        (Shape::Switch, Value::Bool(b)) => b.to_string(),
        (Shape::Switch, other) => return Err(wrong(field, "true or false", other)),
        (Shape::Pairs(separator), Value::Object(map)) => {
            let mut pairs = Vec::with_capacity(map.len());
            for (key, value) in map {
                let key = item(field, &Value::String(key.clone()))?;
                pairs.push(format!("{key}{separator}{}", item(field, value)?));
            }
            pairs.sort();
            pairs.join(",")
        }
        (Shape::Pairs(_), other) => return Err(wrong(field, "an object", other)),
        (Shape::List, Value::Array(items)) => items
            .iter()
            .map(|v| item(field, v))
            .collect::<Result<Vec<_>, _>>()?
            .join(","),
        (Shape::List, other) => return Err(wrong(field, "a list", other)),
    };
    Ok((!text.is_empty()).then_some(text))
}

/// The kubelet flags (name without `--`, value) for the NodeClass `kubelet` settings.
pub fn kubelet_flags(ctx: &RenderContext) -> Result<Vec<(&'static str, String)>, RenderError> {
    let settings = ctx.kubelet_settings()?;
    let mut flags = Vec::new();
    for (field, flag, shape) in MAPPING {
        if let Some(value) = settings.get(*field)
            && let Some(text) = flag_value(field, *shape, value)?
        {
            flags.push((*flag, text));
        }
    }
    let unmapped: Vec<&str> = settings
        .keys()
        .map(String::as_str)
        .filter(|key| !MAPPING.iter().any(|(field, _, _)| field == key))
        .collect();
    if !unmapped.is_empty() {
        log::warn(format!(
            "kubelet settings without a kubelet flag are ignored by this renderer: {}",
            unmapped.join(", ")
        ));
    }
    Ok(flags)
}
