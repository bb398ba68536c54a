//! Request bodies in Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`).
//!
//! client-go's typed clients send built-in kinds this way: Helm stores each release in a
//! Secret through one, controllers' leader election writes its Lease through one, and
//! kubectl's generators (`kubectl create deployment|job|cronjob …`) create their objects
//! through one. The body is the `k8s\0` magic and a `runtime.Unknown` envelope (type meta and
//! the object's own protobuf bytes); the object is decoded with the `k8s-pb` type of its kind
//! and turned into the JSON the API server would have been sent, so the store keeps one
//! representation. Responses are JSON (clients accept it besides protobuf).
//!
//! The conversion is generic: prost generates no reflection, so the decoded message's `Debug`
//! text (every field under its Rust name, see [`debug_text`]) is read back as a tree, and each
//! field name is turned back into the JSON name Kubernetes gives it — the camel case of the
//! Rust name, except for the names in [`json_name`]'s table (acronyms such as `podIP`, the
//! `$ref` and `x-kubernetes-…` keywords of schemas) — with the few well-known types written as
//! their JSON forms: times, quantities, int-or-strings, durations, raw JSON, bytes as base64,
//! and Go's embedded structs (a Volume's source, a selector's `LocalObjectReference`) inlined.
//! Empty strings are left out, as Go's JSON encoding leaves them out.
//!
//! Decoded kinds: every built-in kind the emulator serves (see [`decode`]), plus the bodies of
//! its subresources and deletes (Binding, Eviction, Scale, DeleteOptions). Any other kind is
//! refused with 415 naming it, and a client that can fall back (kubectl does) sends JSON
//! instead.

mod debug_text;

use base64::Engine as _;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb_meta;
use prost::Message;
use serde_json::{Map, Value};

use crate::error::ApiError;
use debug_text::Node;

/// The media type of Kubernetes' protobuf encoding.
pub(crate) const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// What every protobuf body starts with.
const MAGIC: &[u8] = b"k8s\0";

/// Decodes a protobuf body into the object's JSON (with `apiVersion` and `kind`).
pub(crate) fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| ApiError::bad_request("protobuf body without the \"k8s\\0\" prefix"))?;
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(envelope)
        .map_err(|e| invalid("envelope", e))?;
    if unknown
        .content_encoding
        .as_deref()
        .is_some_and(|e| !e.is_empty())
    {
        return Err(ApiError::bad_request(format!(
            "protobuf content encoding {:?} is not supported",
            unknown.content_encoding
        )));
    }
    let type_meta = unknown.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    let raw = unknown.raw.unwrap_or_default();
    let text = debug_text(&api_version, &kind, &raw)?.ok_or_else(|| {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the emulator decodes {MEDIA_TYPE} bodies of the built-in kinds it serves, not {api_version} {kind}; send it as application/json"
            ),
        )
    })?;
    let tree = debug_text::parse(&text).map_err(|e| {
        ApiError::internal(format!("cannot read the decoded {api_version} {kind}: {e}"))
    })?;
    let mut object = match to_json(&tree, "") {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    };
    object.insert("apiVersion".into(), Value::String(api_version));
    object.insert("kind".into(), Value::String(kind));
    Ok(Value::Object(object))
}

fn invalid(what: &str, error: prost::DecodeError) -> ApiError {
    ApiError::bad_request(format!("invalid protobuf body ({what}): {error}"))
}

/// Decodes `raw` as the `k8s-pb` message of `api_version` `kind` and writes its `Debug` text;
/// `None` for a kind the emulator does not decode.
fn debug_text(api_version: &str, kind: &str, raw: &[u8]) -> Result<Option<String>, ApiError> {
    macro_rules! kinds {
        ($(($version:pat, $kind:literal) => $type:ty),* $(,)?) => {
            match (api_version, kind) {
                $(($version, $kind) => {
                    let message = <$type>::decode(raw).map_err(|e| invalid($kind, e))?;
                    Ok(Some(format!("{message:?}")))
                })*
                _ => Ok(None),
            }
        };
    }
    use k8s_pb::api;
    kinds! {
        ("v1", "Pod") => api::core::v1::Pod,
        ("v1", "Node") => api::core::v1::Node,
        ("v1", "Namespace") => api::core::v1::Namespace,
        ("v1", "ConfigMap") => api::core::v1::ConfigMap,
        ("v1", "Secret") => api::core::v1::Secret,
        ("v1", "Event") => api::core::v1::Event,
        ("v1", "Service") => api::core::v1::Service,
        ("v1", "ReplicationController") => api::core::v1::ReplicationController,
        ("v1", "ServiceAccount") => api::core::v1::ServiceAccount,
        ("v1", "PersistentVolume") => api::core::v1::PersistentVolume,
        ("v1", "PersistentVolumeClaim") => api::core::v1::PersistentVolumeClaim,
        ("v1", "Binding") => api::core::v1::Binding,
        ("apps/v1", "DaemonSet") => api::apps::v1::DaemonSet,
        ("apps/v1", "Deployment") => api::apps::v1::Deployment,
        ("apps/v1", "ReplicaSet") => api::apps::v1::ReplicaSet,
        ("apps/v1", "StatefulSet") => api::apps::v1::StatefulSet,
        ("batch/v1", "Job") => api::batch::v1::Job,
        ("batch/v1", "CronJob") => api::batch::v1::CronJob,
        ("autoscaling/v1", "Scale") => api::autoscaling::v1::Scale,
        ("events.k8s.io/v1", "Event") => api::events::v1::Event,
        ("coordination.k8s.io/v1", "Lease") => api::coordination::v1::Lease,
        ("policy/v1", "PodDisruptionBudget") => api::policy::v1::PodDisruptionBudget,
        ("policy/v1", "Eviction") => api::policy::v1::Eviction,
        ("storage.k8s.io/v1", "StorageClass") => api::storage::v1::StorageClass,
        ("storage.k8s.io/v1", "CSINode") => api::storage::v1::CSINode,
        ("storage.k8s.io/v1", "VolumeAttachment") => api::storage::v1::VolumeAttachment,
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") =>
            k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => api::rbac::v1::ClusterRole,
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => api::rbac::v1::ClusterRoleBinding,
        ("rbac.authorization.k8s.io/v1", "Role") => api::rbac::v1::Role,
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => api::rbac::v1::RoleBinding,
        ("v1" | "meta.k8s.io/v1", "DeleteOptions") => pb_meta::DeleteOptions,
    }
}

/// The JSON name of field `field` (its Rust name in `k8s-pb`) of message `message`: the
/// camel case of the name, except where Kubernetes' JSON name has an acronym or a keyword the
/// camel case cannot give back.
fn json_name(message: &str, field: &str) -> String {
    let field = field.strip_prefix("r#").unwrap_or(field);
    match (message, field) {
        ("JsonSchemaProps", "ref") => return "$ref".into(),
        ("JsonSchemaProps", "schema") => return "$schema".into(),
        ("DaemonEndpoint", "port") => return "Port".into(),
        _ => {}
    }
    if let Some(rest) = field.strip_prefix("x_kubernetes_") {
        return format!("x-kubernetes-{}", rest.replace('_', "-"));
    }
    let exception = match field {
        "a_pi_group" => "apiGroup",
        "api_server_id" => "apiServerID",
        "boot_id" => "bootID",
        "client_cidr" => "clientCIDR",
        "client_ip" => "clientIP",
        "cluster_ip" => "clusterIP",
        "cluster_ips" => "clusterIPs",
        "container_id" => "containerID",
        "current_cpu_utilization_percentage" => "currentCPUUtilizationPercentage",
        "dataset_uuid" => "datasetUUID",
        "disk_uri" => "diskURI",
        "downward_api" => "downwardAPI",
        "external_id" => "externalID",
        "external_ips" => "externalIPs",
        "host_ip" => "hostIP",
        "host_ipc" => "hostIPC",
        "host_ips" => "hostIPs",
        "host_pid" => "hostPID",
        "image_id" => "imageID",
        "insecure_skip_tls_verify" => "insecureSkipTLSVerify",
        "j_son_schemas" => "JSONSchemas",
        "load_balancer_ip" => "loadBalancerIP",
        "machine_id" => "machineID",
        "node_id" => "nodeID",
        "non_resource_ur_ls" => "nonResourceURLs",
        "open_apiv3_schema" => "openAPIV3Schema",
        "pd_id" => "pdID",
        "pod_cid_rs" => "podCIDRs",
        "pod_cidr" => "podCIDR",
        "pod_ip" => "podIP",
        "pod_ips" => "podIPs",
        "provider_id" => "providerID",
        "resource_id" => "resourceID",
        "scale_io" => "scaleIO",
        "server_address_by_client_cid_rs" => "serverAddressByClientCIDRs",
        "set_hostname_as_fqdn" => "setHostnameAsFQDN",
        "storage_policy_id" => "storagePolicyID",
        "system_uuid" => "systemUUID",
        "target_cpu_utilization_percentage" => "targetCPUUtilizationPercentage",
        "target_ww_ns" => "targetWWNs",
        "u_id" => "uid",
        "volume_id" => "volumeID",
        _ => "",
    };
    if !exception.is_empty() {
        return exception.into();
    }
    let mut name = String::with_capacity(field.len());
    let mut upper = false;
    for character in field.chars() {
        if character == '_' {
            upper = true;
        } else if upper {
            name.extend(character.to_uppercase());
            upper = false;
        } else {
            name.push(character);
        }
    }
    name
}

/// Whether field `field` of message `message` is an embedded Go struct, whose fields the JSON
/// form holds inline (`json:",inline"`).
fn inlined(message: &str, field: &str) -> bool {
    matches!(
        field,
        "local_object_reference"
            | "volume_source"
            | "persistent_volume_source"
            | "ephemeral_container_common"
            | "ingress_rule_value"
            | "rule_with_operations"
            | "device_configuration"
    ) || matches!(
        (message, field),
        ("Probe", "handler") | ("RuleWithOperations", "rule")
    )
}

/// Whether field `field` of message `message` holds bytes (written as base64 in JSON; in a
/// map, its values).
fn bytes_field(message: &str, field: &str) -> bool {
    matches!(
        field,
        "ca_bundle" | "binary_data" | "request" | "certificate"
    ) || matches!((message, field), ("Secret" | "RangeAllocation", "data"))
}

/// The text of a leaf (a string as is, a number as written).
fn leaf_text(node: &Node) -> Option<&str> {
    match node {
        Node::Some(inner) => leaf_text(inner),
        Node::Text(text) | Node::Number(text) => Some(text),
        _ => None,
    }
}

/// Field `name` of a message, if set (raw identifiers such as `r#type` match `type`).
fn field<'a>(fields: &'a [(String, Node)], name: &str) -> Option<&'a Node> {
    fields
        .iter()
        .find(|(field, _)| field.strip_prefix("r#").unwrap_or(field) == name)
        .map(|(_, node)| node)
        .filter(|node| !matches!(node, Node::None))
}

fn number(field: Option<&Node>) -> i64 {
    field
        .and_then(leaf_text)
        .and_then(|text| text.parse().ok())
        .unwrap_or(0)
}

/// Bytes written as a list of numbers, as base64.
fn base64_of(node: &Node) -> Option<Value> {
    match node {
        Node::Some(inner) => base64_of(inner),
        Node::List(items) => {
            let bytes: Option<Vec<u8>> = items
                .iter()
                .map(|item| leaf_text(item).and_then(|t| t.parse().ok()))
                .collect();
            bytes.map(|b| Value::String(base64::engine::general_purpose::STANDARD.encode(b)))
        }
        _ => None,
    }
}

/// Raw JSON held as bytes (`RawExtension`, `JSON`, `FieldsV1`), parsed.
fn raw_json(fields: &[(String, Node)]) -> Option<Value> {
    let Value::String(encoded) = base64_of(field(fields, "raw")?)? else {
        return None;
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// A `Time` or `MicroTime` as the API writes it (seconds, or microseconds, in RFC 3339).
fn timestamp(fields: &[(String, Node)], micro: bool) -> Option<Value> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
    let seconds = number(field(fields, "seconds"));
    let nanos = number(field(fields, "nanos"));
    let at = k8s_openapi::jiff::Timestamp::new(seconds, i32::try_from(nanos).ok()?).ok()?;
    if micro {
        serde_json::to_value(meta::MicroTime(at)).ok()
    } else {
        serde_json::to_value(meta::Time(at)).ok()
    }
}

/// The JSON of a node of the `Debug` tree, `None` for what JSON leaves out (absent optional
/// fields, empty lists and maps). `parent` is the message the node is a field of, `name` its
/// field name there (for bytes).
fn to_json(node: &Node, name: &str) -> Option<Value> {
    to_json_in(node, "", name)
}

fn to_json_in(node: &Node, parent: &str, name: &str) -> Option<Value> {
    match node {
        Node::None => None,
        Node::Some(inner) => to_json_in(inner, parent, name),
        Node::Text(text) => Some(Value::String(text.clone())),
        Node::Bool(value) => Some(Value::Bool(*value)),
        Node::Number(text) => Some(number_value(text)),
        Node::List(items) => {
            if bytes_field(parent, name) {
                return base64_of(node);
            }
            let items: Vec<Value> = items
                .iter()
                .filter_map(|item| to_json_in(item, parent, name))
                .collect();
            (!items.is_empty()).then_some(Value::Array(items))
        }
        Node::Map(entries) => {
            let bytes = bytes_field(parent, name);
            let map: Map<String, Value> = entries
                .iter()
                .filter_map(|(key, value)| {
                    let key = leaf_text(key)?.to_string();
                    let value = if bytes {
                        base64_of(value)?
                    } else {
                        to_json_in(value, parent, name).unwrap_or(Value::Null)
                    };
                    Some((key, value))
                })
                .collect();
            (!map.is_empty()).then_some(Value::Object(map))
        }
        Node::Message(message, fields) => message_json(message, fields),
    }
}

fn number_value(text: &str) -> Value {
    if let Ok(integer) = text.parse::<i64>() {
        return Value::from(integer);
    }
    if let Ok(integer) = text.parse::<u64>() {
        return Value::from(integer);
    }
    text.parse::<f64>()
        .ok()
        .and_then(serde_json::Number::from_f64)
        .map_or(Value::Null, Value::Number)
}

fn message_json(message: &str, fields: &[(String, Node)]) -> Option<Value> {
    match message {
        "Time" => return timestamp(fields, false),
        "MicroTime" => return timestamp(fields, true),
        "Quantity" => return field(fields, "string").and_then(|f| to_json(f, "")),
        "Duration" => return field(fields, "duration").and_then(|f| to_json(f, "")),
        "IntOrString" => {
            return if number(field(fields, "type")) == 1 {
                Some(Value::String(
                    field(fields, "str_val")
                        .and_then(leaf_text)
                        .unwrap_or_default()
                        .to_string(),
                ))
            } else {
                Some(Value::from(number(field(fields, "int_val"))))
            };
        }
        "RawExtension" | "Json" | "FieldsV1" => return raw_json(fields),
        "JsonSchemaPropsOrArray" => {
            return match field(fields, "schema") {
                Some(schema) => to_json(schema, ""),
                None => field(fields, "j_son_schemas")
                    .and_then(|f| to_json(f, ""))
                    .or(Some(Value::Array(Vec::new()))),
            };
        }
        "JsonSchemaPropsOrBool" => {
            return match field(fields, "schema") {
                Some(schema) => to_json(schema, ""),
                None => Some(Value::Bool(
                    field(fields, "allows").and_then(leaf_bool).unwrap_or(false),
                )),
            };
        }
        "JsonSchemaPropsOrStringArray" => {
            return match field(fields, "schema") {
                Some(schema) => to_json(schema, ""),
                None => field(fields, "property")
                    .and_then(|f| to_json(f, ""))
                    .or(Some(Value::Array(Vec::new()))),
            };
        }
        _ => {}
    }
    let mut object = Map::new();
    for (name, node) in fields {
        // The emulator records its own managed fields.
        if message == "ObjectMeta" && name == "managed_fields" {
            continue;
        }
        let Some(value) = to_json_in(node, message, name) else {
            continue;
        };
        // Go writes a string field that is not a pointer even when empty, where its JSON
        // encoding leaves it out (`omitempty`); the API server reads both as unset.
        if value.as_str() == Some("") {
            continue;
        }
        if inlined(message, name) {
            if let Value::Object(embedded) = value {
                object.extend(embedded);
            }
            continue;
        }
        object.insert(json_name(message, name), value);
    }
    Some(Value::Object(object))
}

fn leaf_bool(node: &Node) -> Option<bool> {
    match node {
        Node::Some(inner) => leaf_bool(inner),
        Node::Bool(value) => Some(*value),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body as client-go encodes one: magic, then the envelope around the object's bytes.
    fn body(api_version: &str, kind: &str, object: Vec<u8>) -> Vec<u8> {
        let envelope = k8s_pb::apimachinery::pkg::runtime::Unknown {
            type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
                api_version: Some(api_version.into()),
                kind: Some(kind.into()),
            }),
            raw: Some(object),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        [MAGIC.to_vec(), envelope.encode_to_vec()].concat()
    }

    #[test]
    fn a_helm_release_secret_decodes_to_its_json() {
        let secret = k8s_pb::api::core::v1::Secret {
            metadata: Some(pb_meta::ObjectMeta {
                name: Some("sh.helm.release.v1.joinery.v1".into()),
                namespace: Some("joinery".into()),
                labels: [("owner".to_string(), "helm".to_string())].into(),
                ..Default::default()
            }),
            data: [("release".to_string(), b"H4sI".to_vec())].into(),
            r#type: Some("helm.sh/release.v1".into()),
            ..Default::default()
        };
        let value = decode(&body("v1", "Secret", secret.encode_to_vec())).unwrap();
        assert_eq!(value["metadata"]["name"], "sh.helm.release.v1.joinery.v1");
        assert_eq!(value["metadata"]["labels"]["owner"], "helm");
        assert_eq!(value["type"], "helm.sh/release.v1");
        assert_eq!(
            value["data"]["release"], "SDRzSQ==",
            "bytes become base64 as in JSON"
        );
    }

    #[test]
    fn a_lease_keeps_its_micro_times() {
        let lease = k8s_pb::api::coordination::v1::Lease {
            metadata: Some(pb_meta::ObjectMeta {
                name: Some("karpenter-leader-election".into()),
                ..Default::default()
            }),
            spec: Some(k8s_pb::api::coordination::v1::LeaseSpec {
                holder_identity: Some("a_1".into()),
                lease_duration_seconds: Some(15),
                renew_time: Some(pb_meta::MicroTime {
                    seconds: Some(1_764_547_200),
                    nanos: Some(123_456_000),
                }),
                ..Default::default()
            }),
        };
        let value = decode(&body(
            "coordination.k8s.io/v1",
            "Lease",
            lease.encode_to_vec(),
        ))
        .unwrap();
        assert_eq!(value["spec"]["holderIdentity"], "a_1");
        assert_eq!(value["spec"]["leaseDurationSeconds"], 15);
        assert_eq!(value["spec"]["renewTime"], "2025-12-01T00:00:00.123456Z");
    }

    #[test]
    fn other_kinds_and_garbage_are_refused_clearly() {
        let error = decode(&body("networking.k8s.io/v1", "Ingress", Vec::new())).unwrap_err();
        assert_eq!(error.code, 415);
        assert!(
            error.message.contains("networking.k8s.io/v1 Ingress")
                && error.message.contains("application/json"),
            "{}",
            error.message
        );
        assert_eq!(decode(b"{\"kind\": \"Secret\"}").unwrap_err().code, 400);
        assert_eq!(decode(b"k8s\0\xff\xff").unwrap_err().code, 400);
    }

    fn some<T: Into<String>>(text: T) -> Option<String> {
        Some(text.into())
    }

    /// What `kubectl create deployment web --image=nginx --replicas=2 --port=80` sends, with a
    /// few fields whose JSON names or forms are special.
    #[test]
    fn a_deployment_decodes_with_json_names_and_forms() {
        use k8s_pb::api::apps::v1 as apps;
        use k8s_pb::api::core::v1 as core;
        use k8s_pb::apimachinery::pkg::api::resource::Quantity;
        use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
        let labels: std::collections::BTreeMap<String, String> =
            [("app".to_string(), "web".to_string())].into();
        let deployment = apps::Deployment {
            metadata: Some(pb_meta::ObjectMeta {
                name: some("web"),
                labels: labels.clone(),
                creation_timestamp: Some(pb_meta::Time {
                    seconds: Some(1_767_225_600),
                    nanos: Some(0),
                }),
                ..Default::default()
            }),
            spec: Some(apps::DeploymentSpec {
                replicas: Some(2),
                selector: Some(pb_meta::LabelSelector {
                    match_labels: labels.clone(),
                    ..Default::default()
                }),
                strategy: Some(apps::DeploymentStrategy {
                    r#type: some("RollingUpdate"),
                    rolling_update: Some(apps::RollingUpdateDeployment {
                        max_surge: Some(IntOrString {
                            r#type: Some(1),
                            str_val: some("25%"),
                            ..Default::default()
                        }),
                        max_unavailable: Some(IntOrString {
                            r#type: Some(0),
                            int_val: Some(1),
                            ..Default::default()
                        }),
                    }),
                }),
                template: Some(core::PodTemplateSpec {
                    metadata: Some(pb_meta::ObjectMeta {
                        labels,
                        ..Default::default()
                    }),
                    spec: Some(core::PodSpec {
                        host_ipc: Some(true),
                        containers: vec![core::Container {
                            name: some("nginx"),
                            image: some("nginx"),
                            ports: vec![core::ContainerPort {
                                container_port: Some(80),
                                host_ip: some("0.0.0.0"),
                                ..Default::default()
                            }],
                            resources: Some(core::ResourceRequirements {
                                requests: [(
                                    "cpu".to_string(),
                                    Quantity {
                                        string: some("500m"),
                                    },
                                )]
                                .into(),
                                ..Default::default()
                            }),
                            readiness_probe: Some(core::Probe {
                                handler: Some(core::ProbeHandler {
                                    http_get: Some(core::HttpGetAction {
                                        path: some("/healthz"),
                                        port: Some(IntOrString {
                                            r#type: Some(1),
                                            str_val: some("http"),
                                            ..Default::default()
                                        }),
                                        ..Default::default()
                                    }),
                                    ..Default::default()
                                }),
                                period_seconds: Some(5),
                                ..Default::default()
                            }),
                            env: vec![core::EnvVar {
                                name: some("TOKEN"),
                                value_from: Some(core::EnvVarSource {
                                    secret_key_ref: Some(core::SecretKeySelector {
                                        local_object_reference: Some(core::LocalObjectReference {
                                            name: some("creds"),
                                        }),
                                        key: some("token"),
                                        ..Default::default()
                                    }),
                                    ..Default::default()
                                }),
                                ..Default::default()
                            }],
                            ..Default::default()
                        }],
                        volumes: vec![core::Volume {
                            name: some("scratch"),
                            volume_source: Some(core::VolumeSource {
                                empty_dir: Some(core::EmptyDirVolumeSource::default()),
                                ..Default::default()
                            }),
                        }],
                        ..Default::default()
                    }),
                }),
                ..Default::default()
            }),
            status: None,
        };
        let value = decode(&body("apps/v1", "Deployment", deployment.encode_to_vec())).unwrap();
        assert_eq!(
            value,
            serde_json::json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "web", "labels": {"app": "web"}, "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": {"app": "web"}},
                    "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}},
                        "spec": {
                            "hostIPC": true,
                            "containers": [{
                                "name": "nginx",
                                "image": "nginx",
                                "ports": [{"containerPort": 80, "hostIP": "0.0.0.0"}],
                                "resources": {"requests": {"cpu": "500m"}},
                                "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 5},
                                "env": [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}}],
                            }],
                            "volumes": [{"name": "scratch", "emptyDir": {}}],
                        },
                    },
                },
            })
        );
        // It is a Deployment as k8s-openapi reads one.
        let typed: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(value).unwrap();
        assert_eq!(
            typed.spec.unwrap().template.spec.unwrap().host_ipc,
            Some(true)
        );
    }

    #[test]
    fn a_job_and_a_cronjob_decode() {
        use k8s_pb::api::batch::v1 as batch;
        use k8s_pb::api::core::v1 as core;
        let template = core::PodTemplateSpec {
            metadata: Some(pb_meta::ObjectMeta::default()),
            spec: Some(core::PodSpec {
                restart_policy: some("Never"),
                containers: vec![core::Container {
                    name: some("pi"),
                    image: some("perl"),
                    command: vec!["perl".into(), "-e".into(), "print 1".into()],
                    ..Default::default()
                }],
                ..Default::default()
            }),
        };
        let job = batch::Job {
            metadata: Some(pb_meta::ObjectMeta {
                name: some("pi"),
                ..Default::default()
            }),
            spec: Some(batch::JobSpec {
                template: Some(template.clone()),
                backoff_limit: Some(2),
                ..Default::default()
            }),
            status: None,
        };
        let value = decode(&body("batch/v1", "Job", job.encode_to_vec())).unwrap();
        assert_eq!(value["kind"], "Job");
        assert_eq!(value["spec"]["backoffLimit"], 2);
        assert_eq!(
            value["spec"]["template"]["spec"]["containers"][0]["command"],
            serde_json::json!(["perl", "-e", "print 1"])
        );
        let cronjob = batch::CronJob {
            metadata: Some(pb_meta::ObjectMeta {
                name: some("tick"),
                ..Default::default()
            }),
            spec: Some(batch::CronJobSpec {
                schedule: some("*/5 * * * *"),
                concurrency_policy: some("Forbid"),
                job_template: Some(batch::JobTemplateSpec {
                    metadata: Some(pb_meta::ObjectMeta {
                        name: some("tick"),
                        ..Default::default()
                    }),
                    spec: Some(batch::JobSpec {
                        template: Some(template),
                        ..Default::default()
                    }),
                }),
                ..Default::default()
            }),
            status: None,
        };
        let value = decode(&body("batch/v1", "CronJob", cronjob.encode_to_vec())).unwrap();
        let typed: k8s_openapi::api::batch::v1::CronJob = serde_json::from_value(value).unwrap();
        let spec = typed.spec.unwrap();
        assert_eq!(spec.schedule, "*/5 * * * *");
        assert_eq!(spec.concurrency_policy.as_deref(), Some("Forbid"));
        assert_eq!(
            spec.job_template
                .spec
                .unwrap()
                .template
                .spec
                .unwrap()
                .restart_policy
                .as_deref(),
            Some("Never")
        );
    }

    #[test]
    fn a_crd_keeps_its_schema_keywords_and_defaults() {
        use k8s_pb::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
        let props = ext::JsonSchemaProps {
            r#type: some("object"),
            x_kubernetes_preserve_unknown_fields: Some(true),
            properties: [(
                "size".to_string(),
                ext::JsonSchemaProps {
                    r#type: some("integer"),
                    default: Some(ext::Json {
                        raw: Some(b"3".to_vec()),
                    }),
                    maximum: Some(10.0),
                    ..Default::default()
                },
            )]
            .into(),
            ..Default::default()
        };
        let crd = ext::CustomResourceDefinition {
            metadata: Some(pb_meta::ObjectMeta {
                name: some("widgets.example.com"),
                ..Default::default()
            }),
            spec: Some(ext::CustomResourceDefinitionSpec {
                group: some("example.com"),
                scope: some("Namespaced"),
                names: Some(ext::CustomResourceDefinitionNames {
                    plural: some("widgets"),
                    kind: some("Widget"),
                    ..Default::default()
                }),
                versions: vec![ext::CustomResourceDefinitionVersion {
                    name: some("v1"),
                    served: Some(true),
                    storage: Some(true),
                    schema: Some(ext::CustomResourceValidation {
                        open_apiv3_schema: Some(props),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: None,
        };
        let value = decode(&body(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            crd.encode_to_vec(),
        ))
        .unwrap();
        let schema = &value["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        assert_eq!(schema["x-kubernetes-preserve-unknown-fields"], true);
        assert_eq!(schema["properties"]["size"]["default"], 3);
        assert_eq!(schema["properties"]["size"]["maximum"], 10.0);
    }
}
