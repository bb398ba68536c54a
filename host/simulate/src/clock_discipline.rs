//! The clock discipline of a virtual-time run: every timestamp in the emulated cluster at the
//! end of a run must lie within the simulated run. A component that read the system clock on
//! a simulated path (instead of the shared [`Clock`](joinery_core::clock::Clock)) writes the
//! real date, months away from the simulated one, and the run fails naming the object and
//! the field.

use std::time::{Duration, SystemTime};

use serde_json::Value;

/// How far before the run's start a timestamp may lie (an object's own dates, written in a
/// scenario's manifests).
const BEFORE_START: Duration = Duration::from_secs(24 * 3600);
/// How far after the run's end a timestamp may lie (deadlines written ahead, such as a
/// NodeClaim's termination timestamp: now plus its `terminationGracePeriod`).
const AFTER_END: Duration = Duration::from_secs(7 * 24 * 3600);

/// The most offenders one failure names.
const MAX_NAMED: usize = 5;

/// The timestamps of `objects` (`(kind, object)`, as [`joinery_emulator::apiserver::store::Store::every_object`]
/// gives them) outside the run from `start` to `end`, give or take the margins above; one
/// message naming the offenders, or `None` when every timestamp is within.
pub fn outside_the_run(
    objects: &[(String, Value)],
    start: SystemTime,
    end: SystemTime,
) -> Option<String> {
    let (from, to) = (start - BEFORE_START, end + AFTER_END);
    let mut offenders = Vec::new();
    for (kind, object) in objects {
        let name = match (
            object
                .pointer("/metadata/namespace")
                .and_then(Value::as_str),
            object.pointer("/metadata/name").and_then(Value::as_str),
        ) {
            (Some(ns), Some(name)) => format!("{ns}/{name}"),
            (None, Some(name)) => name.to_string(),
            _ => "?".to_string(),
        };
        walk(object, &mut String::new(), &mut |path, text| {
            if let Some(at) = timestamp(text)
                && (at < from || at > to)
            {
                offenders.push(format!("{kind} {name} {path} = {text}"));
            }
        });
    }
    if offenders.is_empty() {
        return None;
    }
    let total = offenders.len();
    offenders.truncate(MAX_NAMED);
    Some(format!(
        "clock discipline: {total} timestamp(s) outside the simulated run ({} to {}), written by a component that read the system clock instead of the simulation's: {}{}",
        joinery_core::time::rfc3339(start),
        joinery_core::time::rfc3339(end),
        offenders.join("; "),
        if total > MAX_NAMED { "; …" } else { "" }
    ))
}

/// Calls `found` with the JSON path and text of every string in `value`.
fn walk(value: &Value, path: &mut String, found: &mut impl FnMut(&str, &str)) {
    match value {
        Value::String(text) => found(path, text),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                walk(item, path, found);
                path.truncate(len);
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                walk(item, path, found);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// A string shaped like an RFC 3339 date-time (`2026-01-01T00:00:00Z`, fractions and offsets
/// allowed), parsed.
fn timestamp(text: &str) -> Option<SystemTime> {
    let bytes = text.as_bytes();
    let shaped = bytes.len() >= 20
        && bytes[..4].iter().all(u8::is_ascii_digit)
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && bytes[10] == b'T'
        && bytes[13] == b':'
        && bytes[16] == b':';
    if !shaped {
        return None;
    }
    joinery_core::time::parse_rfc3339(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::UNIX_EPOCH;

    #[test]
    fn a_timestamp_from_the_system_clock_is_named_with_its_object_and_field() {
        let start = UNIX_EPOCH + Duration::from_secs(1_767_225_600); // 2026-01-01
        let end = start + Duration::from_secs(3600);
        let within = json!({"metadata": {"name": "n1", "creationTimestamp": "2026-01-01T00:10:00Z"},
                            "status": {"conditions": [{"lastTransitionTime": "2026-01-01T00:20:00.5Z"}]}});
        let objects = vec![("/nodes".to_string(), within.clone())];
        assert_eq!(outside_the_run(&objects, start, end), None);
        let leaked = json!({"metadata": {"name": "c1", "namespace": "default"},
                            "status": {"conditions": [{"type": "Ready", "lastTransitionTime": "2026-12-05T20:00:00Z"}]}});
        let objects = vec![
            ("/nodes".to_string(), within),
            ("karpenter.sh/nodeclaims".to_string(), leaked),
        ];
        let message = outside_the_run(&objects, start, end).expect("the leak is found");
        assert!(
            message.contains(
                "karpenter.sh/nodeclaims default/c1 status.conditions[0].lastTransitionTime = 2026-12-05T20:00:00Z"
            ),
            "{message}"
        );
        assert!(
            message.starts_with("clock discipline: 1 timestamp(s)"),
            "{message}"
        );
    }

    #[test]
    fn strings_that_are_not_timestamps_are_left_alone() {
        assert_eq!(timestamp("2026-01-01"), None);
        assert_eq!(timestamp("c3-16 in 2026-01-01T00:00:00Z"), None);
        assert!(timestamp("2026-01-01T00:00:00+02:00").is_some());
    }
}
