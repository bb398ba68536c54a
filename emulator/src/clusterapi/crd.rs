//! The three Cluster API CRDs the fake serves: `machinedeployments`, `machinesets` and
//! `machines` in `cluster.x-k8s.io`, built as JSON so that both served versions share one
//! schema.
//!
//! The schemas are deliberately loose (real manifests, such as the ones `clusterctl` users
//! write, must be accepted): the fields the fake reads are typed, everything else under
//! `spec` and `status` is kept as given (`x-kubernetes-preserve-unknown-fields`). The rules
//! real Cluster API enforces with webhooks are not emulated.

use serde_json::{Value, json};

use super::{GROUP, Kind, SERVED_VERSIONS, STORAGE_VERSION};

/// A string-to-string map (labels, annotations, `matchLabels`).
fn string_map() -> Value {
    json!({"type": "object", "additionalProperties": {"type": "string"}})
}

/// A `metav1.LabelSelector`; `matchLabels: null` (as some manifests write it) is accepted.
fn label_selector() -> Value {
    json!({
        "type": "object",
        "properties": {
            "matchLabels": {"type": "object", "nullable": true, "additionalProperties": {"type": "string"}},
            "matchExpressions": {
                "type": "array",
                "nullable": true,
                "items": {
                    "type": "object",
                    "required": ["key", "operator"],
                    "properties": {
                        "key": {"type": "string"},
                        "operator": {"type": "string"},
                        "values": {"type": "array", "items": {"type": "string"}},
                    },
                },
            },
        },
    })
}

/// Anything: an object whose fields are kept as given.
fn open_object() -> Value {
    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
}

/// A Machine's spec (also a template's `spec`): the fields the fake reads, typed; the rest kept.
fn machine_spec() -> Value {
    json!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": {
            "clusterName": {"type": "string", "minLength": 1, "maxLength": 63},
            "bootstrap": open_object(),
            "infrastructureRef": open_object(),
            "version": {"type": "string"},
            "providerID": {"type": "string"},
            "failureDomain": {"type": "string"},
            "taints": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["key", "effect"],
                    "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {
                        "key": {"type": "string"},
                        "value": {"type": "string"},
                        "effect": {"type": "string", "enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
                    },
                },
            },
        },
    })
}

/// A Machine template (`spec.template` of MachineDeployments and MachineSets).
fn machine_template() -> Value {
    json!({
        "type": "object",
        "properties": {
            "metadata": {"type": "object", "properties": {"labels": string_map(), "annotations": string_map()}},
            "spec": machine_spec(),
        },
    })
}

/// Spec of a MachineDeployment or a MachineSet: replicas, selector, template; the rest kept.
fn group_spec(kind: Kind) -> Value {
    let mut properties = json!({
        "clusterName": {"type": "string", "minLength": 1, "maxLength": 63},
        "replicas": {"type": "integer", "format": "int32"},
        "selector": label_selector(),
        "template": machine_template(),
        "minReadySeconds": {"type": "integer", "format": "int32"},
    });
    match kind {
        Kind::MachineDeployment => {
            properties["paused"] = json!({"type": "boolean"});
            properties["strategy"] = open_object();
            properties["rolloutAfter"] = json!({"type": "string"});
            properties["revisionHistoryLimit"] = json!({"type": "integer", "format": "int32"});
            properties["progressDeadlineSeconds"] = json!({"type": "integer", "format": "int32"});
        }
        Kind::MachineSet => {
            properties["deletePolicy"] =
                json!({"type": "string", "enum": ["Random", "Newest", "Oldest"]});
        }
        Kind::Machine => {}
    }
    json!({
        "type": "object",
        "required": ["clusterName"],
        "x-kubernetes-preserve-unknown-fields": true,
        "properties": properties,
    })
}

fn printer_columns(kind: Kind) -> Value {
    let age = json!({"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"});
    let cluster = json!({"name": "Cluster", "type": "string", "jsonPath": ".spec.clusterName"});
    let version =
        json!({"name": "Version", "type": "string", "jsonPath": ".spec.template.spec.version"});
    match kind {
        Kind::MachineDeployment => json!([
            cluster,
            {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas"},
            {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas"},
            {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
            {"name": "Updated", "type": "integer", "jsonPath": ".status.updatedReplicas"},
            {"name": "Unavailable", "type": "integer", "jsonPath": ".status.unavailableReplicas"},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            age,
            version,
        ]),
        Kind::MachineSet => json!([
            cluster,
            {"name": "Desired", "type": "integer", "jsonPath": ".spec.replicas"},
            {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas"},
            {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
            {"name": "Available", "type": "integer", "jsonPath": ".status.availableReplicas"},
            age,
            version,
        ]),
        Kind::Machine => json!([
            cluster,
            {"name": "NodeName", "type": "string", "jsonPath": ".status.nodeRef.name"},
            {"name": "ProviderID", "type": "string", "jsonPath": ".spec.providerID"},
            {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
            age,
            {"name": "Version", "type": "string", "jsonPath": ".spec.version"},
        ]),
    }
}

/// The CRD of one kind, serving v1beta1 (stored) and v1beta2 with the same schema: objects
/// of either version are stored as written, without conversion.
pub fn crd(kind: Kind) -> Value {
    let spec = match kind {
        Kind::Machine => {
            let mut spec = machine_spec();
            spec["required"] = json!(["clusterName", "bootstrap", "infrastructureRef"]);
            spec
        }
        other => group_spec(other),
    };
    let schema = json!({
        "type": "object",
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": open_object(),
        },
    });
    let mut subresources = json!({"status": {}});
    if kind != Kind::Machine {
        subresources["scale"] = json!({"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas", "labelSelectorPath": ".status.selector"});
    }
    let versions: Vec<Value> = SERVED_VERSIONS
        .iter()
        .map(|version| {
            json!({
                "name": version,
                "served": true,
                "storage": *version == STORAGE_VERSION,
                "subresources": subresources,
                "additionalPrinterColumns": printer_columns(kind),
                "schema": {"openAPIV3Schema": schema},
            })
        })
        .collect();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{}.{GROUP}", kind.plural()), "labels": {"cluster.x-k8s.io/provider": "cluster-api"}},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind.kind(),
                "listKind": format!("{}List", kind.kind()),
                "plural": kind.plural(),
                "singular": kind.kind().to_lowercase(),
                "shortNames": [kind.short_name()],
                "categories": ["cluster-api"],
            },
            "versions": versions,
        },
    })
}
