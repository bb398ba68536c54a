//! OpenAPI v3 documents: the `/openapi/v3` index and one document per group/version, built
//! from the served types. Custom resources carry their CRD's structural schema (so
//! `kubectl explain` works for them); built-in types get a minimal schema. Every PATCH operation
//! declares the `fieldValidation` parameter and its group/version/kind, which is how kubectl
//! learns that the server validates fields itself (and then skips client-side validation,
//! which would need `/openapi/v2`).

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::apiserver::resources::ResourceKind;

/// Name of the shared ObjectMeta schema in `components.schemas`.
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
/// Name of the shared patch body schema.
const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";

/// The path of a group/version in the index and under `/openapi/v3/`: `api/v1` or
/// `apis/<group>/<version>`.
pub(crate) fn group_version_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The `/openapi/v3` index: every group/version with the URL of its document. The URL carries a
/// hash of the document, so clients that cache by URL notice CRD changes.
pub(crate) fn index(documents: &BTreeMap<String, Value>) -> Value {
    let paths: Map<String, Value> = documents
        .iter()
        .map(|(path, document)| {
            let url = format!("/openapi/v3/{path}?hash={}", content_hash(document));
            (path.clone(), json!({"serverRelativeURL": url}))
        })
        .collect();
    json!({"paths": paths})
}

/// A stable hash of a document's JSON text, as upper-case hex.
fn content_hash(document: &Value) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    document.to_string().hash(&mut hasher);
    format!("{:016X}", hasher.finish())
}

/// The schema name of a type: `io.k8s.api.<group>.<version>.<Kind>` for built-ins (as the real
/// server names them) and the reversed group for custom resources
/// (`sh.karpenter.v1.NodePool`).
fn definition_name(kind: &ResourceKind) -> String {
    if kind.crd_name.is_some() {
        let reversed: Vec<&str> = kind.group.split('.').rev().collect();
        return format!("{}.{}.{}", reversed.join("."), kind.version, kind.kind);
    }
    let package = match kind.group.as_str() {
        "" => "core".to_string(),
        "apiextensions.k8s.io" => {
            return format!(
                "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.{}.{}",
                kind.version, kind.kind
            );
        }
        group => group.trim_end_matches(".k8s.io").replace('.', "_"),
    };
    format!("io.k8s.api.{package}.{}.{}", kind.version, kind.kind)
}

/// The OpenAPI v3 document of one group/version; `kinds` are the types served there.
pub(crate) fn group_version_document(kinds: &[Arc<ResourceKind>]) -> Value {
    let mut paths = Map::new();
    let mut schemas = Map::new();
    schemas.insert(OBJECT_META.to_string(), object_meta_schema());
    schemas.insert(
        PATCH.to_string(),
        json!({"type": "object", "description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body."}),
    );
    for kind in kinds {
        let definition = definition_name(kind);
        let mut schema = match &kind.schema {
            Some(schema) => custom_resource_schema(schema),
            None => builtin_schema(kind),
        };
        schema["x-kubernetes-group-version-kind"] =
            json!([{"group": kind.group, "kind": kind.kind, "version": kind.version}]);
        schemas.insert(definition.clone(), schema);
        let list_definition = format!("{definition}List");
        schemas.insert(
            list_definition.clone(),
            json!({
                "type": "object",
                "description": format!("{} is a list of {}.", kind.list_kind, kind.kind),
                "required": ["items"],
                "properties": {
                    "apiVersion": {"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."},
                    "kind": {"type": "string", "description": "Kind is a string value representing the REST resource this object represents."},
                    "items": {"type": "array", "items": {"$ref": format!("#/components/schemas/{definition}")}},
                    "metadata": {"type": "object"},
                },
                "x-kubernetes-group-version-kind": [{"group": kind.group, "kind": kind.list_kind, "version": kind.version}],
            }),
        );
        add_paths(&mut paths, kind, &definition, &list_definition);
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

/// The operations of one type: list, create and deletecollection on the collection; get,
/// replace, patch and delete on an object; and the status subresource when there is one.
fn add_paths(
    paths: &mut Map<String, Value>,
    kind: &ResourceKind,
    definition: &str,
    list_definition: &str,
) {
    let prefix = format!("/{}", group_version_path(&kind.group, &kind.version));
    let collection = if kind.namespaced {
        format!("{prefix}/namespaces/{{namespace}}/{}", kind.plural)
    } else {
        format!("{prefix}/{}", kind.plural)
    };
    let gvk = json!({"group": kind.group, "version": kind.version, "kind": kind.kind});
    let reference = |name: &str| json!({"$ref": format!("#/components/schemas/{name}")});
    let response = |name: &str| json!({"200": {"description": "OK", "content": {"application/json": {"schema": reference(name)}}}});
    let operation_id = |verb: &str, suffix: &str| {
        let group_part: String = kind
            .group
            .split(['.', '-'])
            .filter(|p| !p.is_empty())
            .map(capitalized)
            .collect();
        let version_part = capitalized(&kind.version);
        let scope = if kind.namespaced { "Namespaced" } else { "" };
        format!(
            "{verb}{}{group_part}{version_part}{scope}{}{suffix}",
            if kind.group.is_empty() { "Core" } else { "" },
            kind.kind
        )
    };
    let write_parameters = json!([
        {"name": "dryRun", "in": "query", "description": "When present, indicates that modifications should not be persisted.", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "fieldManager", "in": "query", "description": "fieldManager is a name associated with the actor or entity that is making these changes.", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "fieldValidation", "in": "query", "description": "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields: Ignore, Warn or Strict.", "schema": {"type": "string", "uniqueItems": true}},
    ]);
    let mut patch_parameters = write_parameters.clone();
    if let Some(list) = patch_parameters.as_array_mut() {
        list.push(json!({"name": "force", "in": "query", "description": "Force is going to \"force\" Apply requests.", "schema": {"type": "boolean", "uniqueItems": true}}));
    }
    // Strategic merge is not listed: the minimal built-in schemas carry no patch strategies,
    // and without it kubectl computes strategic patches from its own compiled-in types.
    let patch_body = json!({"content": {
        "application/apply-patch+yaml": {"schema": reference(PATCH)},
        "application/json-patch+json": {"schema": reference(PATCH)},
        "application/merge-patch+json": {"schema": reference(PATCH)},
    }});
    let body = json!({"content": {"application/json": {"schema": reference(definition)}}, "required": true});
    paths.insert(
        collection.clone(),
        json!({
            "get": {"operationId": operation_id("list", ""), "x-kubernetes-action": "list", "x-kubernetes-group-version-kind": gvk, "responses": response(list_definition)},
            "post": {"operationId": operation_id("create", ""), "x-kubernetes-action": "post", "x-kubernetes-group-version-kind": gvk, "parameters": write_parameters, "requestBody": body, "responses": response(definition)},
            "delete": {"operationId": operation_id("deleteCollection", ""), "x-kubernetes-action": "deletecollection", "x-kubernetes-group-version-kind": gvk, "responses": response(list_definition)},
        }),
    );
    let item = |suffix: &str, subresource: &str| {
        let path = format!("{collection}/{{name}}{subresource}");
        let value = json!({
            "get": {"operationId": operation_id("read", suffix), "x-kubernetes-action": "get", "x-kubernetes-group-version-kind": gvk, "responses": response(definition)},
            "put": {"operationId": operation_id("replace", suffix), "x-kubernetes-action": "put", "x-kubernetes-group-version-kind": gvk, "parameters": write_parameters, "requestBody": body, "responses": response(definition)},
            "patch": {"operationId": operation_id("patch", suffix), "x-kubernetes-action": "patch", "x-kubernetes-group-version-kind": gvk, "parameters": patch_parameters, "requestBody": patch_body, "responses": response(definition)},
        });
        (path, value)
    };
    let (object_path, mut object_operations) = item("", "");
    object_operations["delete"] = json!({"operationId": operation_id("delete", ""), "x-kubernetes-action": "delete", "x-kubernetes-group-version-kind": gvk, "responses": response(definition)});
    paths.insert(object_path, object_operations);
    if kind.has_status {
        let (status_path, status_operations) = item("Status", "/status");
        paths.insert(status_path, status_operations);
    }
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// A CRD's structural schema as served: `metadata` refers to ObjectMeta, and `apiVersion` and
/// `kind` are described when the CRD does not describe them.
fn custom_resource_schema(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if !schema.is_object() {
        schema = json!({"type": "object"});
    }
    if !schema.get("properties").is_some_and(Value::is_object) {
        schema["properties"] = json!({});
    }
    let properties = &mut schema["properties"];
    properties["metadata"] = json!({
        "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
        "allOf": [{"$ref": format!("#/components/schemas/{OBJECT_META}")}],
    });
    if properties.get("apiVersion").is_none() {
        properties["apiVersion"] = json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."});
    }
    if properties.get("kind").is_none() {
        properties["kind"] = json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."});
    }
    schema
}

/// The minimal schema of a built-in type: its envelope, with `spec` and `status` (where the
/// type has them) left open.
fn builtin_schema(kind: &ResourceKind) -> Value {
    let mut properties = json!({
        "apiVersion": {"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."},
        "kind": {"type": "string", "description": "Kind is a string value representing the REST resource this object represents."},
        "metadata": {
            "description": "Standard object's metadata.",
            "allOf": [{"$ref": format!("#/components/schemas/{OBJECT_META}")}],
        },
    });
    let (has_spec, extra): (bool, &[&str]) = match (kind.group.as_str(), kind.plural.as_str()) {
        ("", "configmaps") => (false, &["data", "binaryData", "immutable"]),
        ("", "secrets") => (false, &["data", "stringData", "type", "immutable"]),
        ("", "podtemplates") => (false, &["template"]),
        ("", "events") => (
            false,
            &[
                "involvedObject",
                "reason",
                "message",
                "type",
                "count",
                "firstTimestamp",
                "lastTimestamp",
                "source",
            ],
        ),
        ("events.k8s.io", "events") => (
            false,
            &[
                "regarding",
                "reason",
                "note",
                "type",
                "eventTime",
                "series",
                "reportingController",
            ],
        ),
        ("", "serviceaccounts") => (
            false,
            &[
                "secrets",
                "imagePullSecrets",
                "automountServiceAccountToken",
            ],
        ),
        ("storage.k8s.io", "storageclasses") => (
            false,
            &[
                "provisioner",
                "parameters",
                "reclaimPolicy",
                "volumeBindingMode",
                "allowVolumeExpansion",
            ],
        ),
        ("rbac.authorization.k8s.io", "clusterroles") => (false, &["rules", "aggregationRule"]),
        ("rbac.authorization.k8s.io", "roles") => (false, &["rules"]),
        ("rbac.authorization.k8s.io", "clusterrolebindings" | "rolebindings") => {
            (false, &["subjects", "roleRef"])
        }
        _ => (true, &[]),
    };
    if has_spec {
        properties["spec"] = json!({"type": "object", "description": format!("The desired state of the {}.", kind.kind), "x-kubernetes-preserve-unknown-fields": true});
    }
    if kind.has_status {
        properties["status"] = json!({"type": "object", "description": format!("The most recently observed state of the {}. Read-only.", kind.kind), "x-kubernetes-preserve-unknown-fields": true});
    }
    for field in extra {
        properties[*field] = json!({"description": format!("The {field} of the {}.", kind.kind), "x-kubernetes-preserve-unknown-fields": true});
    }
    json!({
        "type": "object",
        "description": format!("{} (a built-in type; the emulator serves a minimal schema for it).", kind.kind),
        "properties": properties,
    })
}

fn object_meta_schema() -> Value {
    let string =
        |description: &str| json!({"type": "string", "default": "", "description": description});
    let string_map = |description: &str| json!({"type": "object", "additionalProperties": {"type": "string", "default": ""}, "description": description});
    json!({
        "type": "object",
        "description": "ObjectMeta is metadata that all persisted resources must have, which includes all objects users must create.",
        "properties": {
            "name": string("Name must be unique within a namespace."),
            "generateName": string("GenerateName is an optional prefix, used by the server, to generate a unique name ONLY IF the Name field has not been provided."),
            "namespace": string("Namespace defines the space within which each name must be unique."),
            "uid": string("UID is the unique in time and space value for this object. Populated by the system. Read-only."),
            "resourceVersion": string("An opaque value that represents the internal version of this object. Populated by the system. Read-only."),
            "generation": {"type": "integer", "format": "int64", "description": "A sequence number representing a specific generation of the desired state. Populated by the system. Read-only."},
            "creationTimestamp": {"type": "string", "format": "date-time", "description": "CreationTimestamp is a timestamp representing the server time when this object was created."},
            "deletionTimestamp": {"type": "string", "format": "date-time", "description": "DeletionTimestamp is RFC 3339 date and time at which this resource will be deleted."},
            "deletionGracePeriodSeconds": {"type": "integer", "format": "int64", "description": "Number of seconds allowed for this object to gracefully terminate before it will be removed from the system."},
            "labels": string_map("Map of string keys and values that can be used to organize and categorize (scope and select) objects."),
            "annotations": string_map("Annotations is an unstructured key value map stored with a resource that may be set by external tools to store and retrieve arbitrary metadata."),
            "finalizers": {"type": "array", "items": {"type": "string", "default": ""}, "description": "Must be empty before the object is deleted from the registry.", "x-kubernetes-list-type": "set"},
            "ownerReferences": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}, "description": "List of objects depended by this object."},
            "managedFields": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}, "description": "ManagedFields maps workflow-id and version to the set of fields that are managed by that workflow."},
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::resources::builtin_kinds;

    #[test]
    fn patch_operations_declare_field_validation_and_their_kind() {
        let kinds: Vec<Arc<ResourceKind>> = builtin_kinds()
            .into_iter()
            .filter(|k| k.group == "apps" && k.version == "v1")
            .map(Arc::new)
            .collect();
        let document = group_version_document(&kinds);
        let patch =
            &document["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"],
            json!({"group": "apps", "version": "v1", "kind": "Deployment"})
        );
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation" && p["in"] == "query")
        );
        let schema = &document["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"];
        assert_eq!(
            schema["x-kubernetes-group-version-kind"][0]["kind"],
            "Deployment"
        );
    }

    #[test]
    fn custom_resource_definitions_use_the_reversed_group() {
        let kind = ResourceKind {
            group: "karpenter.sh".into(),
            version: "v1".into(),
            plural: "nodepools".into(),
            singular: "nodepool".into(),
            kind: "NodePool".into(),
            list_kind: "NodePoolList".into(),
            namespaced: false,
            short_names: vec![],
            categories: vec![],
            has_status: true,
            extra_subresources: vec![],
            schema: Some(
                json!({"type": "object", "properties": {"spec": {"type": "object", "description": "the spec"}}}),
            ),
            crd_name: Some("nodepools.karpenter.sh".into()),
        };
        let document = group_version_document(&[Arc::new(kind)]);
        let schema = &document["components"]["schemas"]["sh.karpenter.v1.NodePool"];
        assert_eq!(schema["properties"]["spec"]["description"], "the spec");
        assert!(
            schema["properties"]["metadata"]["allOf"][0]["$ref"]
                .as_str()
                .unwrap()
                .ends_with(OBJECT_META)
        );
        assert!(
            document["paths"]
                .get("/apis/karpenter.sh/v1/nodepools/{name}/status")
                .is_some()
        );
        let mut documents = BTreeMap::new();
        documents.insert(group_version_path("karpenter.sh", "v1"), document);
        let index = index(&documents);
        assert!(
            index["paths"]["apis/karpenter.sh/v1"]["serverRelativeURL"]
                .as_str()
                .unwrap()
                .starts_with("/openapi/v3/apis/karpenter.sh/v1?hash=")
        );
    }
}
