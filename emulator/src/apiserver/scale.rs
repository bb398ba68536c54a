//! The `scale` subresource (`autoscaling/v1` `Scale`) of Deployments, ReplicaSets and custom
//! resources whose CRD declares one: `kubectl scale` reads and patches it, and writes land in
//! the object's replica field.

use bytes::Bytes;
use http::Method;
use serde_json::{Value, json};

use crate::apiserver::resources::{CRD_GROUP, CRD_PLURAL, ResourceKind};
use crate::apiserver::store::{Store, WriteTarget};
use crate::apiserver::table::label_selector_string;
use crate::error::ApiError;

/// Where a type keeps what a Scale shows.
struct ScalePaths {
    /// JSON pointer of the desired replicas.
    spec_replicas: String,
    /// JSON pointer of the observed replicas, if the type reports them.
    status_replicas: Option<String>,
    /// Where the pod selector is.
    selector: Selector,
    /// Replicas assumed when the field is absent (built-in workloads default to 1).
    default_replicas: i64,
}

/// Where a Scale's `status.selector` comes from.
enum Selector {
    /// A `metav1.LabelSelector` object at this pointer (built-in workloads).
    Object(String),
    /// A selector already in query syntax at this pointer (a CRD's `labelSelectorPath`).
    Text(String),
    /// The type declares no selector.
    None,
}

/// Turns a CRD's `.spec.replicas` path into a JSON pointer.
fn pointer(path: &str) -> String {
    path.trim_start_matches('.')
        .split('.')
        .fold(String::new(), |mut pointer, part| {
            pointer.push('/');
            pointer.push_str(&part.replace('~', "~0").replace('/', "~1"));
            pointer
        })
}

fn scale_paths(store: &Store, kind: &ResourceKind) -> Result<ScalePaths, ApiError> {
    if kind.crd_name.is_none() {
        return Ok(ScalePaths {
            spec_replicas: "/spec/replicas".into(),
            status_replicas: Some("/status/replicas".into()),
            selector: Selector::Object("/spec/selector".into()),
            default_replicas: 1,
        });
    }
    let crds = store
        .lookup(CRD_GROUP, "v1", CRD_PLURAL)
        .ok_or_else(ApiError::no_such_resource)?;
    let crd = store.get(&crds, None, kind.crd_name.as_deref().unwrap_or_default())?;
    let scale = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|versions| {
            versions
                .iter()
                .find(|v| v["name"].as_str() == Some(kind.version.as_str()))
        })
        .and_then(|version| version.pointer("/subresources/scale"))
        .cloned()
        .ok_or_else(ApiError::no_such_resource)?;
    let path = |field: &str| {
        scale
            .get(field)
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .map(pointer)
    };
    Ok(ScalePaths {
        spec_replicas: path("specReplicasPath").unwrap_or_else(|| "/spec/replicas".into()),
        status_replicas: path("statusReplicasPath"),
        selector: path("labelSelectorPath").map_or(Selector::None, Selector::Text),
        default_replicas: 0,
    })
}

/// The Scale of an object.
fn scale_of(object: &Value, paths: &ScalePaths) -> Value {
    let replicas = object
        .pointer(&paths.spec_replicas)
        .and_then(Value::as_i64)
        .unwrap_or(paths.default_replicas);
    let observed = paths
        .status_replicas
        .as_deref()
        .and_then(|p| object.pointer(p))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let selector = match &paths.selector {
        Selector::Object(at) => label_selector_string(object.pointer(at)),
        Selector::Text(at) => object
            .pointer(at)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        Selector::None => String::new(),
    };
    let metadata = &object["metadata"];
    let mut scale_metadata = json!({});
    for field in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(value) = metadata.get(field) {
            scale_metadata[field] = value.clone();
        }
    }
    let mut status = json!({"replicas": observed});
    if !selector.is_empty() {
        status["selector"] = json!(selector);
    }
    json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": scale_metadata,
        "spec": {"replicas": replicas},
        "status": status,
    })
}

/// Serves `GET`, `PUT` and `PATCH` (merge, strategic merge or JSON patch) on
/// `…/<plural>/<name>/scale`, answering with the resulting Scale.
pub(crate) fn handle(
    store: &Store,
    kind: &ResourceKind,
    namespace: Option<&str>,
    name: &str,
    method: &Method,
    content_type: &str,
    body: &Bytes,
) -> Result<Value, ApiError> {
    let paths = scale_paths(store, kind)?;
    let desired = |current_scale: &Value| -> Result<Value, ApiError> {
        match *method {
            Method::PUT => serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("invalid Scale: {e}"))),
            Method::PATCH => {
                let mut scale = current_scale.clone();
                match content_type {
                    "application/json-patch+json" => {
                        let operations: json_patch::Patch =
                            serde_json::from_slice(body).map_err(|e| {
                                ApiError::bad_request(format!("invalid JSON patch: {e}"))
                            })?;
                        json_patch::patch(&mut scale, &operations).map_err(|e| {
                            ApiError::invalid(
                                "autoscaling",
                                "Scale",
                                name,
                                &[("patch".into(), e.to_string())],
                            )
                        })?;
                    }
                    "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
                        let changes: Value = serde_json::from_slice(body).map_err(|e| {
                            ApiError::bad_request(format!("invalid merge patch: {e}"))
                        })?;
                        json_patch::merge(&mut scale, &changes);
                    }
                    other => return Err(ApiError::unsupported_media_type(other)),
                }
                Ok(scale)
            }
            _ => Err(ApiError::method_not_allowed(format!(
                "{method} is not supported on the scale subresource"
            ))),
        }
    };
    if *method == Method::GET {
        return Ok(scale_of(&store.get(kind, namespace, name)?, &paths));
    }
    let updated = store.update(kind, namespace, name, WriteTarget::Main, |current| {
        let wanted = desired(&scale_of(current, &paths))?;
        if let Some(version) = wanted.pointer("/metadata/resourceVersion").and_then(Value::as_str).filter(|v| !v.is_empty())
            && Some(version) != current.pointer("/metadata/resourceVersion").and_then(Value::as_str)
        {
            return Err(ApiError::conflict(
                &kind.group,
                &kind.plural,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        let replicas = wanted.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(0);
        if replicas < 0 {
            return Err(ApiError::invalid(
                "autoscaling",
                "Scale",
                name,
                &[("spec.replicas".into(), format!("Invalid value: {replicas}: must be greater than or equal to 0"))],
            ));
        }
        let mut next = current.clone();
        set_pointer(&mut next, &paths.spec_replicas, json!(replicas));
        Ok(next)
    })?;
    Ok(scale_of(&updated, &paths))
}

/// Sets the value at a JSON pointer, creating the objects on the way.
fn set_pointer(target: &mut Value, pointer: &str, value: Value) {
    let mut current = target;
    let parts: Vec<String> = pointer
        .split('/')
        .skip(1)
        .map(|p| p.replace("~1", "/").replace("~0", "~"))
        .collect();
    for (index, part) in parts.iter().enumerate() {
        if !current.is_object() {
            *current = json!({});
        }
        let map = current.as_object_mut().expect("just made an object");
        if index + 1 == parts.len() {
            map.insert(part.clone(), value);
            return;
        }
        current = map.entry(part.clone()).or_insert_with(|| json!({}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_reads_replicas_and_selector() {
        let paths = ScalePaths {
            spec_replicas: "/spec/replicas".into(),
            status_replicas: Some("/status/replicas".into()),
            selector: Selector::Object("/spec/selector".into()),
            default_replicas: 1,
        };
        let deployment = json!({
            "metadata": {"name": "web", "namespace": "default", "resourceVersion": "7", "labels": {"x": "y"}},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"replicas": 2}
        });
        let scale = scale_of(&deployment, &paths);
        assert_eq!(
            scale["spec"]["replicas"], 1,
            "absent replicas read as the default"
        );
        assert_eq!(
            scale["status"],
            json!({"replicas": 2, "selector": "app=web"})
        );
        assert_eq!(scale["metadata"]["resourceVersion"], "7");
        assert!(scale["metadata"].get("labels").is_none());
    }

    #[test]
    fn pointers_and_nested_writes() {
        assert_eq!(pointer(".spec.replicas"), "/spec/replicas");
        let mut object = json!({});
        set_pointer(&mut object, "/spec/scale/count", json!(3));
        assert_eq!(object, json!({"spec": {"scale": {"count": 3}}}));
    }
}
