//! Exoscale instance labels: how Kubernetes-style keys and values are flattened to what
//! Exoscale documents as valid.
//!
//! Documented limits: a value starts with a non-digit and contains only letters, digits and
//! `* + ! - _ ?`, at most 128 characters. Whether keys may contain `.` or `/` is not
//! documented, so keys are flattened conservatively: `.` becomes `-` and `/` becomes `_`
//! (`karpenter.sh/nodeclaim` → `karpenter-sh_nodeclaim`).
//!
//! Values the plugin writes itself (cluster, NodeClaim and NodePool names) are made valid:
//! every character outside the allowed set becomes `-`, and a value starting with a digit
//! gets a leading `_`. Kubernetes names rarely need it (a NodePool named `gpu.large` is
//! stored as `gpu-large`). Values from the NodeClass's `labels` are not rewritten: an
//! invalid one fails the NodeClass instead, so the operator sees it.

use std::collections::BTreeMap;

/// The cluster an instance belongs to (value: `clusterName`).
pub const MANAGED_BY: &str = "karpenter.sh/managed-by";
/// The NodeClaim an instance was launched for.
pub const NODECLAIM: &str = "karpenter.sh/nodeclaim";
/// The NodePool of that NodeClaim.
pub const NODEPOOL: &str = "karpenter.sh/nodepool";
/// The ExoscaleNodeClass the instance was launched from.
pub const NODECLASS: &str = "karpenter.k8s.exoscale/nodeclass";
/// The hash of the NodeClass spec fields whose change makes the instance drift.
pub const NODECLASS_HASH: &str = "karpenter.k8s.exoscale/nodeclass-hash";

/// Longest label value Exoscale accepts.
pub const MAX_VALUE: usize = 128;

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || "*+!-_?".contains(c)
}

/// The Exoscale form of a label key: `.` → `-`, `/` → `_`.
pub fn flatten_key(key: &str) -> String {
    key.chars()
        .map(|c| match c {
            '.' => '-',
            '/' => '_',
            other => other,
        })
        .collect()
}

/// Whether Exoscale accepts `value` as a label value.
pub fn valid_value(value: &str) -> bool {
    value.len() <= MAX_VALUE
        && value.chars().all(allowed)
        && !value.starts_with(|c: char| c.is_ascii_digit())
}

/// A valid label value as close to `value` as possible (see the module docs).
pub fn sanitize_value(value: &str) -> String {
    let mut out: String = value
        .chars()
        .map(|c| if allowed(c) { c } else { '-' })
        .collect();
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, '_');
    }
    while out.len() > MAX_VALUE {
        out.pop();
    }
    out
}

/// Checks the NodeClass's own labels; returns one message per invalid entry.
pub fn check_user_labels(labels: &BTreeMap<String, String>) -> Vec<String> {
    let mut problems = Vec::new();
    for (key, value) in labels {
        let flat = flatten_key(key);
        if flat.is_empty() || flat.len() > MAX_VALUE || flat.chars().any(char::is_whitespace) {
            problems.push(format!(
                "labels: key {key:?} must be 1-128 characters without spaces"
            ));
        } else if !valid_value(value) {
            problems.push(format!(
                "labels: the value of {key:?} ({value:?}) is not a valid Exoscale label value: it must not start with a digit and may only contain letters, digits and * + ! - _ ? (at most 128)"
            ));
        }
    }
    problems
}

/// The labels of a new instance: the NodeClass's labels (flattened keys), then the managed
/// ones, which win.
pub fn instance_labels(
    user: &BTreeMap<String, String>,
    managed: &[(&str, &str)],
) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = user
        .iter()
        .map(|(k, v)| (flatten_key(k), v.clone()))
        .collect();
    for (key, value) in managed {
        out.insert(flatten_key(key), sanitize_value(value));
    }
    out
}

/// The labels a running instance should carry: its managed labels as they are (they record
/// how it was launched), plus the NodeClass's current `labels`. Anything else goes, since the
/// API replaces the whole map.
pub fn reconciled_labels(
    current: &BTreeMap<String, String>,
    user: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let managed: Vec<(String, String)> =
        [MANAGED_BY, NODECLAIM, NODEPOOL, NODECLASS, NODECLASS_HASH]
            .iter()
            .filter_map(|k| {
                current
                    .get(&flatten_key(k))
                    .map(|v| (flatten_key(k), v.clone()))
            })
            .collect();
    let mut out: BTreeMap<String, String> = user
        .iter()
        .map(|(k, v)| (flatten_key(k), v.clone()))
        .collect();
    out.extend(managed);
    out
}

/// Percent-encodes a label filter (`k=v k2=v2`) for the `labels` query parameter.
pub fn filter(pairs: &[(&str, &str)]) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", flatten_key(k), sanitize_value(v)))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconciled_labels_keep_the_managed_ones_and_replace_the_rest() {
        let current: BTreeMap<String, String> = [
            ("karpenter-sh_nodeclaim", "default-abc12"),
            ("karpenter-sh_managed-by", "prod"),
            ("team", "old"),
            ("gone", "x"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let user: BTreeMap<String, String> = [
            ("team", "platform"),
            ("cost.center/id", "c42"),
            ("karpenter.sh/nodeclaim", "hijack"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let wanted = reconciled_labels(&current, &user);
        assert_eq!(wanted.get("team").map(String::as_str), Some("platform"));
        assert_eq!(
            wanted.get("cost-center_id").map(String::as_str),
            Some("c42")
        );
        assert_eq!(
            wanted.get("karpenter-sh_nodeclaim").map(String::as_str),
            Some("default-abc12"),
            "managed labels win"
        );
        assert_eq!(
            wanted.get("karpenter-sh_managed-by").map(String::as_str),
            Some("prod")
        );
        assert!(
            !wanted.contains_key("gone"),
            "labels dropped from the class are removed"
        );
    }

    #[test]
    fn keys_are_flattened() {
        assert_eq!(flatten_key(NODECLAIM), "karpenter-sh_nodeclaim");
        assert_eq!(flatten_key(MANAGED_BY), "karpenter-sh_managed-by");
        assert_eq!(
            flatten_key(NODECLASS_HASH),
            "karpenter-k8s-exoscale_nodeclass-hash"
        );
        assert_eq!(flatten_key("team"), "team");
    }

    #[test]
    fn values_are_made_valid() {
        assert!(valid_value("default-abc12"));
        assert!(valid_value(""));
        assert!(!valid_value("1abc"));
        assert!(!valid_value("a.b"));
        assert_eq!(sanitize_value("gpu.large-x7k2p"), "gpu-large-x7k2p");
        assert_eq!(sanitize_value("2024-pool"), "_2024-pool");
        assert_eq!(sanitize_value(&"a".repeat(200)).len(), 128);
        assert!(valid_value(&sanitize_value("9 lives / 3.5")));
    }

    #[test]
    fn managed_labels_win_and_user_labels_are_checked() {
        let user: BTreeMap<String, String> = [
            ("team".to_string(), "a".to_string()),
            ("karpenter.sh/nodeclaim".to_string(), "spoof".to_string()),
        ]
        .into();
        let labels = instance_labels(&user, &[(NODECLAIM, "default-abc12"), (MANAGED_BY, "demo")]);
        assert_eq!(labels["karpenter-sh_nodeclaim"], "default-abc12");
        assert_eq!(labels["karpenter-sh_managed-by"], "demo");
        assert_eq!(labels["team"], "a");
        let bad: BTreeMap<String, String> = [
            ("env".to_string(), "2026".to_string()),
            ("ok".to_string(), "yes".to_string()),
        ]
        .into();
        let problems = check_user_labels(&bad);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("\"env\""));
        assert_eq!(
            filter(&[(MANAGED_BY, "demo"), (NODECLAIM, "a.b")]),
            "karpenter-sh_managed-by=demo karpenter-sh_nodeclaim=a-b"
        );
    }
}
