//! The stored form of an object: [`StoredObject`], its JSON text written once at commit time
//! plus the few facts reads filter on, shared as `Arc<StoredObject>` by the object map and
//! the watch history and never changed afterwards.
//!
//! The text leaves out `apiVersion` and `kind`: one object is served through every version
//! of its resource (the Cluster API fake serves `v1beta2` of objects written as `v1beta1`),
//! so both are spliced in on output from the [`ResourceKind`] the client asked through.

use std::borrow::Cow;

use serde_json::Value;

use crate::apiserver::disruption::{self, BudgetPod};
use crate::apiserver::resources::ResourceKind;
use crate::apiserver::selectors::{
    FieldSelector, LabelSelector, absent_field_value, field_as_string, field_value,
};

/// Field-selector paths beyond name and namespace whose values are extracted at write time,
/// so that selecting on them does not parse the object: what the kubelet, the scheduler and
/// `kubectl` select pods and nodes by. Any other path parses the object's text.
const INDEXED_FIELDS: [&str; 3] = ["spec.nodeName", "status.phase", "spec.unschedulable"];

/// The object has a `metadata.deletionTimestamp`.
const DELETING: u8 = 1;
/// The object counts as a healthy pod for PodDisruptionBudgets (Running and Ready).
const HEALTHY_POD: u8 = 2;

/// One version of a stored object, immutable once built.
#[derive(Debug)]
pub struct StoredObject {
    /// The object as a JSON object, without `apiVersion` and `kind`.
    json: Box<str>,
    name: Box<str>,
    namespace: Box<str>,
    uid: Box<str>,
    resource_version: u64,
    /// String-valued labels, sorted by key.
    labels: Box<[(Box<str>, Box<str>)]>,
    /// The uids `metadata.ownerReferences` name.
    owner_uids: Box<[Box<str>]>,
    /// The [`INDEXED_FIELDS`] the object has (by index), in their field-selector string form.
    fields: Box<[(u8, Box<str>)]>,
    /// [`DELETING`], [`HEALTHY_POD`].
    flags: u8,
}

/// Writes a JSON object's members except `apiVersion` and `kind`, as `{…}`.
fn untyped_json(object: &Value) -> String {
    let Some(map) = object.as_object() else {
        return object.to_string();
    };
    let mut out = Vec::with_capacity(1024);
    out.push(b'{');
    for (key, value) in map
        .iter()
        .filter(|(key, _)| *key != "apiVersion" && *key != "kind")
    {
        if out.len() > 1 {
            out.push(b',');
        }
        // Writing into a Vec cannot fail, and a Value always serializes.
        let _ = serde_json::to_writer(&mut out, key);
        out.push(b':');
        let _ = serde_json::to_writer(&mut out, value);
    }
    out.push(b'}');
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

fn boxed(text: Option<&str>) -> Box<str> {
    text.unwrap_or_default().into()
}

impl StoredObject {
    /// Serializes `object` (its `apiVersion` and `kind` are left out) and extracts its index.
    pub fn new(object: &Value) -> Self {
        let metadata = object.get("metadata");
        let text = |field: &str| metadata.and_then(|m| m.get(field)).and_then(Value::as_str);
        let mut labels: Vec<(Box<str>, Box<str>)> = metadata
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(key, value)| Some((key.as_str().into(), value.as_str()?.into())))
            .collect();
        labels.sort();
        let owner_uids = metadata
            .and_then(|m| m.get("ownerReferences"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|reference| reference["uid"].as_str().map(Box::from))
            .collect();
        let fields = INDEXED_FIELDS
            .iter()
            .enumerate()
            .filter_map(|(index, path)| {
                Some((index as u8, field_value(object, path)?.into_boxed_str()))
            })
            .collect();
        let mut flags = 0;
        if metadata.is_some_and(|m| m.get("deletionTimestamp").is_some()) {
            flags |= DELETING;
        }
        if disruption::pod_is_healthy(object) {
            flags |= HEALTHY_POD;
        }
        StoredObject {
            json: untyped_json(object).into_boxed_str(),
            name: boxed(text("name")),
            namespace: boxed(text("namespace")),
            uid: boxed(text("uid")),
            resource_version: text("resourceVersion")
                .and_then(|v| v.parse().ok())
                .unwrap_or_default(),
            labels: labels.into_boxed_slice(),
            owner_uids,
            fields,
            flags,
        }
    }

    /// The stored JSON text, without `apiVersion` and `kind`.
    pub fn untyped_json(&self) -> &str {
        &self.json
    }

    /// `metadata.name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `metadata.namespace` (empty for cluster-scoped objects).
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// `metadata.uid`.
    pub fn uid(&self) -> &str {
        &self.uid
    }

    /// `metadata.resourceVersion` as a number.
    pub fn resource_version(&self) -> u64 {
        self.resource_version
    }

    /// The value of a label, if the object has it as a string.
    pub fn label(&self, key: &str) -> Option<&str> {
        let index = self.labels.binary_search_by(|(k, _)| (**k).cmp(key)).ok()?;
        Some(&self.labels[index].1)
    }

    /// The uids the object's owner references name.
    pub fn owner_uids(&self) -> impl Iterator<Item = &str> {
        self.owner_uids.iter().map(|uid| &**uid)
    }

    /// Whether the object has a `deletionTimestamp`.
    pub fn is_deleting(&self) -> bool {
        self.flags & DELETING != 0
    }

    /// The value of the field at a dotted path as field selectors compare it (see
    /// [`field_as_string`]): from the index for name, namespace and the indexed fields, else
    /// by parsing the stored text.
    pub fn field(&self, path: &str) -> Cow<'_, str> {
        self.indexed_field(path)
            .unwrap_or_else(|| Cow::Owned(field_as_string(&self.to_untyped_value(), path)))
    }

    /// The value of a field the index holds, `None` for paths it does not cover.
    fn indexed_field(&self, path: &str) -> Option<Cow<'_, str>> {
        match path {
            "metadata.name" => Some(Cow::Borrowed(&self.name)),
            "metadata.namespace" => Some(Cow::Borrowed(&self.namespace)),
            _ => {
                let position = INDEXED_FIELDS.iter().position(|p| *p == path)? as u8;
                let value = self
                    .fields
                    .iter()
                    .find(|(index, _)| *index == position)
                    .map(|(_, v)| &**v);
                Some(Cow::Borrowed(
                    value.unwrap_or_else(|| absent_field_value(path)),
                ))
            }
        }
    }

    /// Whether the object's labels and fields satisfy both selectors. The text is parsed (once)
    /// only when the field selector names a path the index does not hold.
    pub fn matches(&self, labels: &LabelSelector, fields: &FieldSelector) -> bool {
        if !labels.matches_by(|key| self.label(key)) {
            return false;
        }
        let mut parsed: Option<Value> = None;
        fields.matches_by(|path| match self.indexed_field(path) {
            Some(value) => value,
            None => Cow::Owned(field_as_string(
                parsed.get_or_insert_with(|| self.to_untyped_value()),
                path,
            )),
        })
    }

    /// The object as stored (without `apiVersion` and `kind`).
    pub fn to_untyped_value(&self) -> Value {
        serde_json::from_str(&self.json).unwrap_or(Value::Null)
    }

    /// The object as served through `kind`: with its `apiVersion` and `kind`.
    pub fn to_value(&self, kind: &ResourceKind) -> Value {
        let mut object = self.to_untyped_value();
        if let Some(map) = object.as_object_mut() {
            map.insert("apiVersion".into(), Value::String(kind.api_version()));
            map.insert("kind".into(), Value::String(kind.kind.clone()));
        }
        object
    }

    /// How many bytes [`StoredObject::write_json`] writes for `kind` (its `type_prefix`
    /// given).
    pub fn json_len(&self, type_prefix: &[u8]) -> usize {
        type_prefix.len() + self.json.len()
    }

    /// Appends the object's JSON as served through the kind `type_prefix` was made for (see
    /// [`type_prefix`]): the stored text with `apiVersion` and `kind` spliced in first.
    pub fn write_json(&self, type_prefix: &[u8], out: &mut Vec<u8>) {
        let Some(members) = self.json.strip_prefix('{') else {
            out.extend_from_slice(self.json.as_bytes());
            return;
        };
        out.extend_from_slice(type_prefix);
        if members.trim_start().starts_with('}') {
            // An empty object: no comma after `kind`.
            out.extend_from_slice(members.as_bytes());
        } else {
            out.push(b',');
            out.extend_from_slice(members.as_bytes());
        }
    }

    /// The object's JSON as served through `kind`.
    pub fn json_for(&self, kind: &ResourceKind) -> Vec<u8> {
        let prefix = type_prefix(kind);
        let mut out = Vec::with_capacity(self.json_len(&prefix) + 1);
        self.write_json(&prefix, &mut out);
        out
    }
}

/// The opening of an object served through `kind`, `{"apiVersion":…,"kind":…` (without the
/// comma), to pass to [`StoredObject::write_json`].
pub fn type_prefix(kind: &ResourceKind) -> Vec<u8> {
    let mut prefix = Vec::with_capacity(64);
    prefix.extend_from_slice(b"{\"apiVersion\":");
    let _ = serde_json::to_writer(&mut prefix, &kind.api_version());
    prefix.extend_from_slice(b",\"kind\":");
    let _ = serde_json::to_writer(&mut prefix, &kind.kind);
    prefix
}

impl BudgetPod for StoredObject {
    fn label(&self, key: &str) -> Option<&str> {
        StoredObject::label(self, key)
    }

    fn is_deleting(&self) -> bool {
        StoredObject::is_deleting(self)
    }

    fn is_healthy(&self) -> bool {
        self.flags & HEALTHY_POD != 0
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::apiserver::resources::builtin_kinds;

    fn pods() -> ResourceKind {
        builtin_kinds()
            .into_iter()
            .find(|k| k.plural == "pods")
            .unwrap()
    }

    #[test]
    fn the_type_is_left_out_of_the_text_and_spliced_back_in() {
        let object = json!({
            "apiVersion": "stale/v0", "kind": "Stale",
            "metadata": {"name": "p", "namespace": "default", "uid": "u-1", "resourceVersion": "42"},
            "spec": {"nodeName": "n1", "ratio": 0.25, "list": [1, -2, null, "x"]},
        });
        let stored = StoredObject::new(&object);
        assert!(
            !stored.untyped_json().contains("apiVersion")
                && !stored.untyped_json().contains("Stale")
        );
        assert_eq!(
            (
                stored.name(),
                stored.namespace(),
                stored.uid(),
                stored.resource_version()
            ),
            ("p", "default", "u-1", 42)
        );
        let kind = pods();
        let mut expected = object.clone();
        expected["apiVersion"] = json!("v1");
        expected["kind"] = json!("Pod");
        assert_eq!(stored.to_value(&kind), expected);
        let written: Value = serde_json::from_slice(&stored.json_for(&kind)).unwrap();
        assert_eq!(written, expected);
        // An object with nothing but its type still writes valid JSON.
        let empty = StoredObject::new(&json!({"apiVersion": "v1", "kind": "Pod"}));
        let written: Value = serde_json::from_slice(&empty.json_for(&kind)).unwrap();
        assert_eq!(written, json!({"apiVersion": "v1", "kind": "Pod"}));
    }

    #[test]
    fn labels_owners_and_flags_are_indexed() {
        let object = json!({"metadata": {
            "name": "p", "labels": {"b": "2", "a": "1", "odd": 3},
            "ownerReferences": [{"uid": "o-1"}, {"uid": "o-2"}],
            "deletionTimestamp": "2026-01-01T00:00:00Z",
        }, "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
        let stored = StoredObject::new(&object);
        assert_eq!(
            (
                stored.label("a"),
                stored.label("b"),
                stored.label("odd"),
                stored.label("c")
            ),
            (Some("1"), Some("2"), None, None)
        );
        assert_eq!(stored.owner_uids().collect::<Vec<_>>(), ["o-1", "o-2"]);
        assert!(stored.is_deleting());
        assert!(BudgetPod::is_healthy(&stored) && BudgetPod::is_healthy(&object));
        for selector in ["a=1", "a in (1,3),b", "odd", "!odd", "c!=x", "a notin (1)"] {
            let selector = LabelSelector::parse(selector).unwrap();
            assert_eq!(
                stored.matches(&selector, &FieldSelector::default()),
                selector.matches_object(&object),
                "{selector:?}"
            );
        }
    }

    #[test]
    fn indexed_fields_answer_as_parsing_the_object_would() {
        let objects = [
            json!({"metadata": {"name": "a", "namespace": "ns"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}),
            json!({"metadata": {"name": "b", "namespace": "ns"}, "spec": {"nodeName": null}, "status": {}}),
            json!({"metadata": {"name": "c"}, "spec": {"unschedulable": true}}),
            json!({"metadata": {"name": "d"}, "spec": {"unschedulable": false, "replicas": 3}}),
            json!({"metadata": {"name": "e"}}),
            json!({"metadata": {"name": "f"}, "spec": "not an object", "status": {"phase": 7}}),
        ];
        let paths = [
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "status.phase",
            "spec.unschedulable",
            "spec.replicas",
            "spec",
        ];
        let selectors = [
            "spec.nodeName=n1",
            "spec.nodeName=",
            "spec.nodeName!=",
            "status.phase=Running",
            "status.phase!=Running",
            "spec.unschedulable=false",
            "spec.unschedulable==true",
            "metadata.namespace=ns,metadata.name=a",
            "spec.replicas=3",
            "spec.nodeName!=n1,spec.replicas!=3",
            "status.phase=7",
        ];
        for object in &objects {
            let stored = StoredObject::new(object);
            for path in paths {
                assert_eq!(
                    stored.field(path),
                    field_as_string(object, path),
                    "{path} of {object}"
                );
            }
            for selector in selectors {
                let selector = FieldSelector::parse(selector).unwrap();
                assert_eq!(
                    stored.matches(&LabelSelector::default(), &selector),
                    selector.matches(object),
                    "{selector:?} on {object}"
                );
            }
        }
    }
}
