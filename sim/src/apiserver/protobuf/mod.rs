//! Request bodies in Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`).
//!
//! client-go's typed clients send built-in kinds this way: Helm stores each release in a
//! Secret through one, and controllers' leader election writes its Lease through one. The
//! body is the `k8s\0` magic and a `runtime.Unknown` envelope (type meta and the object's own
//! protobuf bytes); the object is decoded with the `k8s-pb` types, converted to the
//! `k8s-openapi` type of the same kind and stored as its JSON, so the store keeps one
//! representation. Responses are JSON (clients accept it besides protobuf).
//!
//! Decoded kinds: Secret, ConfigMap, Namespace, ServiceAccount (core/v1) and Lease
//! (coordination.k8s.io/v1). Any other kind is refused with 415 naming it, and a client that
//! can fall back (kubectl does) sends JSON instead.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::coordination::v1 as coordination;
use k8s_openapi::api::core::v1 as core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb_meta;
use prost::Message;
use serde_json::Value;

use crate::error::ApiError;

/// The media type of Kubernetes' protobuf encoding.
pub(crate) const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// What every protobuf body starts with.
const MAGIC: &[u8] = b"k8s\0";

/// Decodes a protobuf body into the object's JSON (with `apiVersion` and `kind`).
pub(crate) fn decode(body: &[u8]) -> Result<Value, ApiError> {
    let invalid = |what: &str, error: prost::DecodeError| {
        ApiError::bad_request(format!("invalid protobuf body ({what}): {error}"))
    };
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
    let raw = raw.as_slice();
    let object = match (api_version.as_str(), kind.as_str()) {
        ("v1", "Secret") => json(secret(
            k8s_pb::api::core::v1::Secret::decode(raw).map_err(|e| invalid("Secret", e))?,
        )),
        ("v1", "ConfigMap") => json(config_map(
            k8s_pb::api::core::v1::ConfigMap::decode(raw).map_err(|e| invalid("ConfigMap", e))?,
        )),
        ("v1", "Namespace") => json(namespace(
            k8s_pb::api::core::v1::Namespace::decode(raw).map_err(|e| invalid("Namespace", e))?,
        )),
        ("v1", "ServiceAccount") => json(service_account(
            k8s_pb::api::core::v1::ServiceAccount::decode(raw)
                .map_err(|e| invalid("ServiceAccount", e))?,
        )),
        ("coordination.k8s.io/v1", "Lease") => json(lease(
            k8s_pb::api::coordination::v1::Lease::decode(raw).map_err(|e| invalid("Lease", e))?,
        )),
        _ => {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!(
                    "the emulator decodes {MEDIA_TYPE} bodies of Secret, ConfigMap, Namespace, ServiceAccount and Lease only, not {api_version} {kind}; send it as application/json"
                ),
            ));
        }
    }?;
    Ok(object)
}

fn json<T: serde::Serialize>(object: T) -> Result<Value, ApiError> {
    serde_json::to_value(object)
        .map_err(|e| ApiError::bad_request(format!("cannot represent the decoded object: {e}")))
}

fn timestamp(seconds: Option<i64>, nanos: Option<i32>) -> Option<k8s_openapi::jiff::Timestamp> {
    k8s_openapi::jiff::Timestamp::new(seconds.unwrap_or(0), nanos.unwrap_or(0)).ok()
}

fn time(time: Option<pb_meta::Time>) -> Option<meta::Time> {
    time.and_then(|t| timestamp(t.seconds, t.nanos))
        .map(meta::Time)
}

fn micro_time(time: Option<pb_meta::MicroTime>) -> Option<meta::MicroTime> {
    time.and_then(|t| timestamp(t.seconds, t.nanos))
        .map(meta::MicroTime)
}

fn non_empty<K: Ord, V>(map: BTreeMap<K, V>) -> Option<BTreeMap<K, V>> {
    (!map.is_empty()).then_some(map)
}

fn non_empty_list<T>(list: Vec<T>) -> Option<Vec<T>> {
    (!list.is_empty()).then_some(list)
}

/// Object metadata (managed fields are dropped: the emulator records its own).
fn object_meta(metadata: Option<pb_meta::ObjectMeta>) -> meta::ObjectMeta {
    let m = metadata.unwrap_or_default();
    meta::ObjectMeta {
        name: m.name,
        generate_name: m.generate_name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        generation: m.generation,
        creation_timestamp: time(m.creation_timestamp),
        deletion_timestamp: time(m.deletion_timestamp),
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        labels: non_empty(m.labels),
        annotations: non_empty(m.annotations),
        owner_references: non_empty_list(
            m.owner_references
                .into_iter()
                .map(|o| meta::OwnerReference {
                    api_version: o.api_version.unwrap_or_default(),
                    kind: o.kind.unwrap_or_default(),
                    name: o.name.unwrap_or_default(),
                    uid: o.uid.unwrap_or_default(),
                    controller: o.controller,
                    block_owner_deletion: o.block_owner_deletion,
                })
                .collect(),
        ),
        finalizers: non_empty_list(m.finalizers),
        ..Default::default()
    }
}

fn secret(s: k8s_pb::api::core::v1::Secret) -> core::Secret {
    core::Secret {
        metadata: object_meta(s.metadata),
        data: non_empty(
            s.data
                .into_iter()
                .map(|(k, v)| (k, ByteString(v)))
                .collect(),
        ),
        string_data: non_empty(s.string_data),
        type_: s.r#type,
        immutable: s.immutable,
    }
}

fn config_map(c: k8s_pb::api::core::v1::ConfigMap) -> core::ConfigMap {
    core::ConfigMap {
        metadata: object_meta(c.metadata),
        data: non_empty(c.data),
        binary_data: non_empty(
            c.binary_data
                .into_iter()
                .map(|(k, v)| (k, ByteString(v)))
                .collect(),
        ),
        immutable: c.immutable,
    }
}

fn namespace(n: k8s_pb::api::core::v1::Namespace) -> core::Namespace {
    core::Namespace {
        metadata: object_meta(n.metadata),
        spec: n.spec.map(|s| core::NamespaceSpec {
            finalizers: non_empty_list(s.finalizers),
        }),
        status: None,
    }
}

fn service_account(a: k8s_pb::api::core::v1::ServiceAccount) -> core::ServiceAccount {
    core::ServiceAccount {
        metadata: object_meta(a.metadata),
        automount_service_account_token: a.automount_service_account_token,
        image_pull_secrets: non_empty_list(
            a.image_pull_secrets
                .into_iter()
                .map(|r| core::LocalObjectReference {
                    name: r.name.unwrap_or_default(),
                })
                .collect(),
        ),
        secrets: non_empty_list(
            a.secrets
                .into_iter()
                .map(|r| core::ObjectReference {
                    name: r.name,
                    namespace: r.namespace,
                    ..Default::default()
                })
                .collect(),
        ),
    }
}

fn lease(l: k8s_pb::api::coordination::v1::Lease) -> coordination::Lease {
    coordination::Lease {
        metadata: object_meta(l.metadata),
        spec: l.spec.map(|s| coordination::LeaseSpec {
            holder_identity: s.holder_identity,
            lease_duration_seconds: s.lease_duration_seconds,
            acquire_time: micro_time(s.acquire_time),
            renew_time: micro_time(s.renew_time),
            lease_transitions: s.lease_transitions,
            strategy: s.strategy,
            preferred_holder: s.preferred_holder,
        }),
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
        let error = decode(&body("apps/v1", "Deployment", Vec::new())).unwrap_err();
        assert_eq!(error.code, 415);
        assert!(
            error.message.contains("apps/v1 Deployment")
                && error.message.contains("application/json"),
            "{}",
            error.message
        );
        assert_eq!(decode(b"{\"kind\": \"Secret\"}").unwrap_err().code, 400);
        assert_eq!(decode(b"k8s\0\xff\xff").unwrap_err().code, 400);
    }
}
