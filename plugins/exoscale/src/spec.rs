//! The `ExoscaleNodeClass` spec: its fields, the checks that need no API call, and the
//! hashes used for drift and for trusting a resolved status.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::labels;

/// Root disk bounds in GiB.
pub const DISK_MIN: u64 = 10;
/// Root disk bounds in GiB.
pub const DISK_MAX: u64 = 51_200;

/// One selector term. Terms are ORed; the fields set within one term are ANDed. Which fields
/// a list accepts is fixed by the CRD (templates: `name`, `visibility`; security and
/// anti-affinity groups: `id`, `name`; private networks: `id`, `name`, `labels`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Term {
    /// Exact ID.
    pub id: Option<String>,
    /// Exact name.
    pub name: Option<String>,
    /// Exoscale labels that must all be present with these values.
    pub labels: BTreeMap<String, String>,
    /// `public` or `private` (templates).
    pub visibility: Option<String>,
}

impl Term {
    /// Whether the term sets nothing (it would match everything).
    pub fn is_empty(&self) -> bool {
        self.id.is_none()
            && self.name.is_none()
            && self.labels.is_empty()
            && self.visibility.is_none()
    }

    /// A short description for messages, e.g. `{name: "k8s-nodes"}`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(id) = &self.id {
            parts.push(format!("id: {id:?}"));
        }
        if let Some(name) = &self.name {
            parts.push(format!("name: {name:?}"));
        }
        if !self.labels.is_empty() {
            let pairs: Vec<String> = self
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            parts.push(format!("labels: {{{}}}", pairs.join(", ")));
        }
        if let Some(visibility) = &self.visibility {
            parts.push(format!("visibility: {visibility}"));
        }
        format!("{{{}}}", parts.join(", "))
    }
}

/// The kubelet settings the plugin reads (for allocatable; it writes no kubelet config).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct Kubelet {
    /// Pod capacity; default 110.
    pub max_pods: Option<u64>,
    /// `kube-reserved`; default cpu 200m, memory 300Mi, ephemeral-storage 1Gi.
    pub kube_reserved: Option<BTreeMap<String, String>>,
    /// `system-reserved`; default cpu 100m, memory 100Mi, ephemeral-storage 3Gi.
    pub system_reserved: Option<BTreeMap<String, String>>,
    /// Hard eviction signals; `memory.available` and `nodefs.available` (absolute or `%`)
    /// count as overhead. Default `memory.available: 100Mi`.
    pub eviction_hard: Option<BTreeMap<String, String>>,
}

/// The spec fields the plugin reads; `userData`, `userDataRenderer` and other renderer
/// fields belong to the host and are ignored here.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Spec {
    /// Zones to launch in; default the configured zone.
    pub zones: Option<Vec<String>>,
    /// A template UUID (zone-scoped).
    #[serde(rename = "templateID")]
    pub template_id: Option<String>,
    /// Templates by name (and visibility), resolved per zone.
    pub template_selector_terms: Vec<Term>,
    /// Root disk in GiB.
    pub disk_size: Option<u64>,
    /// Allowed instance types (`<family>.<size>`); empty: every authorized type.
    pub instance_types: Vec<String>,
    /// SSH key names (Exoscale's `ssh-keys`).
    pub ssh_keys: Vec<String>,
    /// One SSH key name: the older spelling, kept so existing classes still work; merged
    /// before [`Spec::ssh_keys`] by [`Spec::ssh_key_names`].
    pub ssh_key: Option<String>,
    /// Security groups.
    pub security_group_selector_terms: Vec<Term>,
    /// Private networks, attached after launch.
    pub private_network_selector_terms: Vec<Term>,
    /// Anti-affinity groups.
    pub anti_affinity_group_selector_terms: Vec<Term>,
    /// `inet4` (default), `dual` (IPv4 and IPv6) or `none`.
    #[serde(rename = "publicIPAssignment")]
    pub public_ip_assignment: Option<String>,
    /// Extra Exoscale instance labels.
    pub labels: BTreeMap<String, String>,
    /// Prepended to the instance name.
    pub name_prefix: Option<String>,
    /// Kubelet settings used for allocatable.
    pub kubelet: Option<Kubelet>,
}

impl Spec {
    /// The zones the class launches in: `zones`, or the configured default zone.
    pub fn effective_zones(&self, default_zone: Option<&str>) -> Vec<String> {
        match &self.zones {
            Some(zones) => zones.clone(),
            None => default_zone
                .map(|z| vec![z.to_string()])
                .unwrap_or_default(),
        }
    }

    /// `publicIPAssignment` with its default.
    pub fn public_ip(&self) -> &str {
        self.public_ip_assignment.as_deref().unwrap_or("inet4")
    }

    /// Every SSH key the class names: `sshKey`, then `sshKeys`, each once.
    pub fn ssh_key_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for name in self.ssh_key.iter().chain(&self.ssh_keys) {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
        names
    }

    /// Every problem that needs no API call to see.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        match self.disk_size {
            None => problems.push("diskSize is required (GiB, 10-51200)".to_string()),
            Some(size) if !(DISK_MIN..=DISK_MAX).contains(&size) => {
                problems.push(format!("diskSize {size} is outside 10-51200 GiB"))
            }
            Some(_) => {}
        }
        match (&self.template_id, self.template_selector_terms.is_empty()) {
            (Some(_), false) => {
                problems.push("set either templateID or templateSelectorTerms, not both".into())
            }
            (None, true) => {
                problems.push("one of templateID or templateSelectorTerms is required".into())
            }
            _ => {}
        }
        for (i, term) in self.template_selector_terms.iter().enumerate() {
            if term.name.is_none() {
                problems.push(format!("templateSelectorTerms[{i}] needs a name"));
            }
            if term
                .visibility
                .as_deref()
                .is_some_and(|v| v != "public" && v != "private")
            {
                problems.push(format!(
                    "templateSelectorTerms[{i}].visibility must be public or private"
                ));
            }
        }
        let lists = [
            (
                "securityGroupSelectorTerms",
                &self.security_group_selector_terms,
            ),
            (
                "privateNetworkSelectorTerms",
                &self.private_network_selector_terms,
            ),
            (
                "antiAffinityGroupSelectorTerms",
                &self.anti_affinity_group_selector_terms,
            ),
        ];
        for (field, terms) in lists {
            for (i, term) in terms.iter().enumerate() {
                if term.is_empty() {
                    problems.push(format!("{field}[{i}] is empty: set id, name or labels"));
                }
            }
        }
        if !matches!(self.public_ip(), "inet4" | "dual" | "none") {
            problems.push(format!(
                "publicIPAssignment {:?} must be inet4, dual or none",
                self.public_ip()
            ));
        }
        if self.zones.as_ref().is_some_and(Vec::is_empty) {
            problems.push("zones is empty: list at least one zone or omit the field".into());
        }
        if let Some(prefix) = &self.name_prefix
            && (prefix.len() > 63
                || !prefix
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-'))
        {
            problems.push(format!(
                "namePrefix {prefix:?} may only contain letters, digits and '-' (at most 63)"
            ));
        }
        problems.extend(labels::check_user_labels(&self.labels));
        problems
    }
}

/// FNV-1a, 64 bits, as 16 hex digits.
pub fn fnv(text: &str) -> String {
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// The spec as canonical JSON (object keys sorted), optionally without some fields.
fn canonical(spec: &str, without: &[&str]) -> String {
    match serde_json::from_str::<Value>(spec) {
        Ok(Value::Object(mut object)) => {
            for key in without {
                object.remove(*key);
            }
            // serde_json's map is ordered by key, so this is canonical.
            Value::Object(object).to_string()
        }
        _ => spec.to_string(),
    }
}

/// Hash of the whole spec: a resolved status is trusted only for the spec it was made for.
pub fn resolution_hash(spec: &str) -> String {
    fnv(&canonical(spec, &[]))
}

/// Hash of the spec fields whose change replaces nodes. Left out: `labels` (reconciled in
/// place), `zones` (removing one drifts only its nodes, adding one drifts none) and
/// `instanceTypes` (core's own instance-type drift covers narrowing it).
pub fn drift_hash(spec: &str) -> String {
    format!(
        "h{}",
        fnv(&canonical(spec, &["labels", "zones", "instanceTypes"]))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> Spec {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn static_checks_name_every_problem() {
        let good = spec(
            r#"{"diskSize": 50, "templateSelectorTerms": [{"name": "Linux Ubuntu 24.04 LTS 64-bit"}]}"#,
        );
        assert!(good.problems().is_empty(), "{:?}", good.problems());
        let both = spec(
            r#"{"diskSize": 50, "templateID": "x", "templateSelectorTerms": [{"name": "y"}]}"#,
        );
        assert!(both.problems()[0].contains("not both"));
        let neither = spec(r#"{"diskSize": 9}"#);
        let problems = neither.problems();
        assert!(problems.iter().any(|p| p.contains("outside 10-51200")));
        assert!(problems.iter().any(|p| p.contains("is required")));
        let bad = spec(
            r#"{"diskSize": 50, "templateID": "x", "publicIPAssignment": "inet6", "securityGroupSelectorTerms": [{}],
                "namePrefix": "a_b", "labels": {"env": "2026"}, "zones": []}"#,
        );
        let problems = bad.problems();
        assert_eq!(problems.len(), 5, "{problems:?}");
        assert!(
            problems
                .iter()
                .any(|p| p.contains("must be inet4, dual or none")),
            "{problems:?}"
        );
        let dual = spec(r#"{"diskSize": 50, "templateID": "x", "publicIPAssignment": "dual"}"#);
        assert!(dual.problems().is_empty(), "{:?}", dual.problems());
        assert!(
            serde_json::from_str::<Spec>(r#"{"securityGroupSelectorTerms": [{"tag": "x"}]}"#)
                .is_err(),
            "unknown term fields are refused"
        );
    }

    #[test]
    fn ssh_keys_merge_the_old_single_key_first_without_repeats() {
        let both = spec(r#"{"sshKey": "ops", "sshKeys": ["dev", "ops", "ci"]}"#);
        assert_eq!(both.ssh_key_names(), ["ops", "dev", "ci"]);
        assert!(spec("{}").ssh_key_names().is_empty());
    }

    #[test]
    fn drift_ignores_labels_zones_and_allowed_types() {
        let a =
            r#"{"diskSize": 50, "labels": {"a": "b"}, "zones": ["ch-gva-2"], "templateID": "t"}"#;
        let b = r#"{"templateID": "t", "zones": ["de-fra-1", "ch-gva-2"], "instanceTypes": ["standard.large"], "diskSize": 50}"#;
        assert_eq!(drift_hash(a), drift_hash(b));
        assert_ne!(resolution_hash(a), resolution_hash(b));
        assert_ne!(
            drift_hash(a),
            drift_hash(r#"{"diskSize": 60, "templateID": "t"}"#)
        );
        assert!(
            drift_hash(a).starts_with('h'),
            "label values may not start with a digit"
        );
        assert_eq!(fnv(""), "cbf29ce484222325");
    }

    #[test]
    fn terms_describe_themselves() {
        let term: Term =
            serde_json::from_str(r#"{"name": "k8s", "labels": {"env": "prod"}}"#).unwrap();
        assert_eq!(term.describe(), r#"{name: "k8s", labels: {env=prod}}"#);
        assert!(Term::default().is_empty());
    }
}
