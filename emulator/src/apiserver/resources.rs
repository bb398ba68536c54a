//! The table of resource types the emulator serves: built-in kinds plus those declared by CRDs,
//! and the discovery documents built from them.

use std::cmp::Ordering;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::error::ApiError;

/// The verbs every top-level resource supports.
const STANDARD_VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// Checks the simple fields of a built-in kind that a real API server's decoding would refuse
/// (it decodes into Go structs): a ConfigMap's `data` (strings) and `binaryData` (base64
/// strings), a Secret's `data` (base64 strings) and `stringData` (strings). The error is a 400
/// BadRequest worded as the API server's decoding error, naming the field and key.
pub(crate) fn check_builtin_fields(kind: &ResourceKind, object: &Value) -> Result<(), ApiError> {
    if !kind.group.is_empty() || kind.crd_name.is_some() {
        return Ok(());
    }
    let fields: &[(&str, bool)] = match kind.kind.as_str() {
        "ConfigMap" => &[("data", false), ("binaryData", true)],
        "Secret" => &[("data", true), ("stringData", false)],
        _ => return Ok(()),
    };
    let refuse = |detail: String| {
        ApiError::bad_request(format!(
            "{kind} in version \"{version}\" cannot be handled as a {kind}: {detail}",
            kind = kind.kind,
            version = kind.version,
        ))
    };
    for (field, base64) in fields {
        let go_type = if *base64 { "[]uint8" } else { "string" };
        let entries = match object.get(*field) {
            None | Some(Value::Null) => continue,
            Some(Value::Object(entries)) => entries,
            Some(other) => {
                return Err(refuse(format!(
                    "json: cannot unmarshal {} into Go struct field {}.{field} of type map[string]{go_type}",
                    json_type(other),
                    kind.kind
                )));
            }
        };
        for (key, value) in entries {
            let text = match value {
                Value::String(text) => text,
                Value::Null => continue,
                other => {
                    return Err(refuse(format!(
                        "json: cannot unmarshal {} into Go struct field {}.{field} of type {go_type} (key {key:?})",
                        json_type(other),
                        kind.kind
                    )));
                }
            };
            if *base64 && let Err(detail) = check_base64(text) {
                return Err(refuse(format!("{detail} in {field}[{key:?}]")));
            }
        }
    }
    Ok(())
}

/// How Go's `encoding/json` names the type of a JSON value in its errors.
fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Whether `text` is standard, padded base64 as Go's `encoding/json` decodes a `[]byte`
/// (line breaks ignored, non-zero trailing bits allowed); the error is worded as Go's.
fn check_base64(text: &str) -> Result<(), String> {
    use base64::Engine as _;
    use base64::engine::{GeneralPurpose, GeneralPurposeConfig};
    const LENIENT: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
    );
    let compact: String = text.chars().filter(|c| !matches!(c, '\r' | '\n')).collect();
    // Go reports a short or badly padded input at the start of its last (incomplete)
    // four-byte quantum.
    let quantum_start = || {
        let length = compact.len();
        if !length.is_multiple_of(4) {
            length - length % 4
        } else {
            compact.find('=').unwrap_or(length)
        }
    };
    LENIENT
        .decode(&compact)
        .map(drop)
        .map_err(|error| match error {
            base64::DecodeError::InvalidByte(at, _)
            | base64::DecodeError::InvalidLastSymbol(at, _) => {
                format!("illegal base64 data at input byte {at}")
            }
            base64::DecodeError::InvalidLength(_) | base64::DecodeError::InvalidPadding => {
                format!("illegal base64 data at input byte {}", quantum_start())
            }
        })
}

/// A subresource other than `status`, listed in discovery (for example `pods/eviction`).
#[derive(Debug, Clone, PartialEq)]
pub struct ExtraSubresource {
    /// Subresource name, e.g. `eviction`.
    pub name: String,
    /// API group of the subresource's kind.
    pub group: String,
    /// API version of the subresource's kind.
    pub version: String,
    /// Kind accepted by the subresource, e.g. `Eviction`.
    pub kind: String,
    /// Verbs listed in discovery.
    pub verbs: Vec<String>,
}

/// One served resource type at one group/version.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceKind {
    /// API group; empty for the core group.
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Plural resource name used in paths, e.g. `pods`.
    pub plural: String,
    /// Singular name, e.g. `pod`.
    pub singular: String,
    /// Kind, e.g. `Pod`.
    pub kind: String,
    /// Kind of the list, e.g. `PodList`.
    pub list_kind: String,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
    /// Short names for kubectl, e.g. `po`.
    pub short_names: Vec<String>,
    /// Categories, e.g. `all`.
    pub categories: Vec<String>,
    /// Whether a `status` subresource exists (the main endpoint then ignores status changes).
    pub has_status: bool,
    /// Other subresources listed in discovery.
    pub extra_subresources: Vec<ExtraSubresource>,
    /// The structural OpenAPI v3 schema (CRDs only), used for defaults and validation.
    pub schema: Option<Value>,
    /// Name of the CRD that declared this type, if any.
    pub crd_name: Option<String>,
}

impl ResourceKind {
    /// `apiVersion` string: `v1` for core, `group/version` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    fn discovery_entries(&self) -> Vec<Value> {
        let mut entries = vec![json!({
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": STANDARD_VERBS,
            "shortNames": self.short_names,
            "categories": self.categories,
        })];
        if self.has_status {
            entries.push(json!({
                "name": format!("{}/status", self.plural),
                "singularName": "",
                "namespaced": self.namespaced,
                "kind": self.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
        for extra in &self.extra_subresources {
            entries.push(json!({
                "name": format!("{}/{}", self.plural, extra.name),
                "singularName": "",
                "namespaced": self.namespaced,
                "group": extra.group,
                "version": extra.version,
                "kind": extra.kind,
                "verbs": extra.verbs,
            }));
        }
        entries
    }
}

fn builtin(
    group: &str,
    plural: &str,
    kind: &str,
    namespaced: bool,
    has_status: bool,
    short: &[&str],
) -> ResourceKind {
    ResourceKind {
        group: group.to_string(),
        version: "v1".to_string(),
        plural: plural.to_string(),
        singular: kind.to_lowercase(),
        kind: kind.to_string(),
        list_kind: format!("{kind}List"),
        namespaced,
        short_names: short.iter().map(|s| s.to_string()).collect(),
        categories: Vec::new(),
        has_status,
        extra_subresources: Vec::new(),
        schema: None,
        crd_name: None,
    }
}

fn subresource(name: &str, group: &str, kind: &str, verbs: &[&str]) -> ExtraSubresource {
    ExtraSubresource {
        name: name.to_string(),
        group: group.to_string(),
        version: "v1".to_string(),
        kind: kind.to_string(),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
    }
}

/// The built-in resource types, in discovery order.
pub fn builtin_kinds() -> Vec<ResourceKind> {
    let mut pods = builtin("", "pods", "Pod", true, true, &["po"]);
    pods.categories = vec!["all".into()];
    pods.extra_subresources = vec![
        subresource("eviction", "policy", "Eviction", &["create"]),
        subresource("binding", "", "Binding", &["create"]),
    ];
    let mut deployments = builtin("apps", "deployments", "Deployment", true, true, &["deploy"]);
    deployments.categories = vec!["all".into()];
    deployments.extra_subresources = vec![subresource(
        "scale",
        "autoscaling",
        "Scale",
        &["get", "patch", "update"],
    )];
    let mut replicasets = builtin("apps", "replicasets", "ReplicaSet", true, true, &["rs"]);
    replicasets.categories = vec!["all".into()];
    replicasets.extra_subresources = vec![subresource(
        "scale",
        "autoscaling",
        "Scale",
        &["get", "patch", "update"],
    )];
    let mut daemonsets = builtin("apps", "daemonsets", "DaemonSet", true, true, &["ds"]);
    daemonsets.categories = vec!["all".into()];
    let mut jobs = builtin("batch", "jobs", "Job", true, true, &[]);
    jobs.categories = vec!["all".into()];
    let mut cronjobs = builtin("batch", "cronjobs", "CronJob", true, true, &["cj"]);
    cronjobs.categories = vec!["all".into()];
    vec![
        pods,
        builtin("", "nodes", "Node", false, true, &["no"]),
        builtin("", "namespaces", "Namespace", false, true, &["ns"]),
        builtin("", "configmaps", "ConfigMap", true, false, &["cm"]),
        builtin("", "secrets", "Secret", true, false, &[]),
        builtin("", "podtemplates", "PodTemplate", true, false, &[]),
        builtin("", "events", "Event", true, false, &["ev"]),
        builtin("", "services", "Service", true, true, &["svc"]),
        builtin(
            "",
            "replicationcontrollers",
            "ReplicationController",
            true,
            true,
            &["rc"],
        ),
        builtin(
            "",
            "serviceaccounts",
            "ServiceAccount",
            true,
            false,
            &["sa"],
        ),
        builtin(
            "",
            "persistentvolumes",
            "PersistentVolume",
            false,
            true,
            &["pv"],
        ),
        builtin(
            "",
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            true,
            true,
            &["pvc"],
        ),
        daemonsets,
        deployments,
        replicasets,
        builtin("apps", "statefulsets", "StatefulSet", true, true, &["sts"]),
        jobs,
        cronjobs,
        builtin("events.k8s.io", "events", "Event", true, false, &["ev"]),
        builtin("coordination.k8s.io", "leases", "Lease", true, false, &[]),
        builtin(
            "policy",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            true,
            true,
            &["pdb"],
        ),
        builtin(
            "storage.k8s.io",
            "storageclasses",
            "StorageClass",
            false,
            false,
            &["sc"],
        ),
        builtin("storage.k8s.io", "csinodes", "CSINode", false, false, &[]),
        builtin(
            "storage.k8s.io",
            "volumeattachments",
            "VolumeAttachment",
            false,
            true,
            &[],
        ),
        builtin(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            true,
            &["crd", "crds"],
        ),
        // What an install (`helm install`) creates besides workloads; stored, not enforced.
        builtin(
            "rbac.authorization.k8s.io",
            "clusterroles",
            "ClusterRole",
            false,
            false,
            &[],
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            "ClusterRoleBinding",
            false,
            false,
            &[],
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "roles",
            "Role",
            true,
            false,
            &[],
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "rolebindings",
            "RoleBinding",
            true,
            false,
            &[],
        ),
    ]
}

/// Group and plural of CustomResourceDefinitions.
pub const CRD_GROUP: &str = "apiextensions.k8s.io";
/// Plural of CustomResourceDefinitions.
pub const CRD_PLURAL: &str = "customresourcedefinitions";

/// Reads the resource types a CRD declares (one per served version).
/// Returns a list of (field, message) problems when the CRD is unusable.
pub fn kinds_from_crd(crd: &Value) -> Result<Vec<ResourceKind>, Vec<(String, String)>> {
    let mut problems = Vec::new();
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or_default();
    let names = &spec["names"];
    let plural = names["plural"].as_str().unwrap_or_default();
    let kind = names["kind"].as_str().unwrap_or_default();
    if group.is_empty() {
        problems.push(("spec.group".into(), "Required value".into()));
    }
    if plural.is_empty() {
        problems.push(("spec.names.plural".into(), "Required value".into()));
    }
    if kind.is_empty() {
        problems.push(("spec.names.kind".into(), "Required value".into()));
    }
    if !group.is_empty() && !plural.is_empty() && name != format!("{plural}.{group}") {
        problems.push((
            "metadata.name".into(),
            format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    let namespaced = match spec["scope"].as_str() {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        other => {
            problems.push((
                "spec.scope".into(),
                format!(
                    "Unsupported value: {other:?}: supported values: \"Cluster\", \"Namespaced\""
                ),
            ));
            false
        }
    };
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        problems.push(("spec.versions".into(), "Required value".into()));
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let strings = |value: &Value| -> Vec<String> {
        value
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let singular = names["singular"]
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| kind.to_lowercase());
    let list_kind = names["listKind"]
        .as_str()
        .map(String::from)
        .unwrap_or_else(|| format!("{kind}List"));
    let mut kinds = Vec::new();
    for version in &versions {
        if version["served"].as_bool() == Some(false) {
            continue;
        }
        let Some(version_name) = version["name"].as_str() else {
            continue;
        };
        let mut extra_subresources = Vec::new();
        if version.pointer("/subresources/scale").is_some() {
            extra_subresources.push(subresource(
                "scale",
                "autoscaling",
                "Scale",
                &["get", "patch", "update"],
            ));
        }
        kinds.push(ResourceKind {
            group: group.to_string(),
            version: version_name.to_string(),
            plural: plural.to_string(),
            singular: singular.clone(),
            kind: kind.to_string(),
            list_kind: list_kind.clone(),
            namespaced,
            short_names: strings(&names["shortNames"]),
            categories: strings(&names["categories"]),
            has_status: version.pointer("/subresources/status").is_some(),
            extra_subresources,
            schema: version.pointer("/schema/openAPIV3Schema").cloned(),
            crd_name: Some(name.to_string()),
        });
    }
    Ok(kinds)
}

/// Orders Kubernetes version names by priority: GA before beta before alpha, higher numbers first,
/// then anything else alphabetically.
pub fn compare_version_priority(a: &str, b: &str) -> Ordering {
    fn rank(version: &str) -> Option<(u8, u64, u64)> {
        let rest = version.strip_prefix('v')?;
        let digits_end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let major: u64 = rest[..digits_end].parse().ok()?;
        let tail = &rest[digits_end..];
        if tail.is_empty() {
            return Some((3, major, 0));
        }
        let (stability, number) = if let Some(n) = tail.strip_prefix("beta") {
            (2, n)
        } else if let Some(n) = tail.strip_prefix("alpha") {
            (1, n)
        } else {
            return None;
        };
        let minor = if number.is_empty() {
            0
        } else {
            number.parse().ok()?
        };
        Some((stability, major, minor))
    }
    match (rank(a), rank(b)) {
        (Some(x), Some(y)) => y.cmp(&x),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// `APIResourceList` for one group/version.
pub fn resource_list(group_version: &str, kinds: &[Arc<ResourceKind>]) -> Value {
    let resources: Vec<Value> = kinds.iter().flat_map(|k| k.discovery_entries()).collect();
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources})
}

/// One `APIGroup` entry for the given group and its versions (ordered by priority).
pub fn api_group(group: &str, versions: &[String]) -> Value {
    let entries: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    let preferred = entries.first().cloned().unwrap_or(Value::Null);
    json!({"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": entries, "preferredVersion": preferred})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_priority_puts_ga_first() {
        let mut versions = vec!["v1alpha1", "v2beta1", "v1", "foo", "v1beta2", "v2"];
        versions.sort_by(|a, b| compare_version_priority(a, b));
        assert_eq!(
            versions,
            vec!["v2", "v1", "v2beta1", "v1beta2", "v1alpha1", "foo"]
        );
    }
}
