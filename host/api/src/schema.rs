//! Schema building blocks referenced from the `#[schemars(...)]` attributes of the API types,
//! and the final clean-up applied to the CRDs that kube's derive produces.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use schemars::{Schema, SchemaGenerator, json_schema};
use serde_json::{Value, json};

use crate::patterns;

/// A requirement's `operator`: one of the eight operator names.
pub(crate) fn operator(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "enum": ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte"],
    })
}

/// One `x-kubernetes-validations` entry.
fn rule(rule: &str, message: &str) -> Value {
    json!({ "message": message, "rule": rule })
}

/// `self != ''` on a string field.
pub(crate) fn not_empty_rule(field: &str) -> Value {
    json!([rule("self != ''", &format!("{field} may not be empty"))])
}

/// Rule text: a label key outside the `karpenter.sh` domain, unless it is one of the keys users
/// may set. `var` is the CEL variable holding the key.
fn karpenter_domain_rule(var: &str) -> String {
    format!(
        r#"{var} in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || !{var}.find("^([^/]+)").endsWith("karpenter.sh")"#
    )
}

const KARPENTER_DOMAIN_MESSAGE: &str = r#"label domain "karpenter.sh" is restricted"#;
const NODEPOOL_LABEL_MESSAGE: &str = r#"label "karpenter.sh/nodepool" is restricted"#;
const HOSTNAME_LABEL_MESSAGE: &str = r#"label "kubernetes.io/hostname" is restricted"#;

/// Rules on a requirement's `key` shared by all kinds.
pub(crate) fn requirement_key_rules() -> Value {
    json!([
        rule(&karpenter_domain_rule("self"), KARPENTER_DOMAIN_MESSAGE),
        rule(
            r#"self != "kubernetes.io/hostname""#,
            HOSTNAME_LABEL_MESSAGE
        ),
    ])
}

/// Field transform for NodePool requirements: a pool may not require `karpenter.sh/nodepool`
/// itself (core adds that requirement). Inserted between the two shared key rules, where
/// upstream has it.
pub(crate) fn forbid_nodepool_requirement_key(schema: &mut Schema) {
    let rules = schema
        .get_mut("items")
        .and_then(|items| items.get_mut("properties"))
        .and_then(|props| props.get_mut("key"))
        .and_then(|key| key.get_mut("x-kubernetes-validations"))
        .and_then(Value::as_array_mut)
        .expect("requirement key schema carries validation rules");
    rules.insert(
        1,
        rule(r#"self != "karpenter.sh/nodepool""#, NODEPOOL_LABEL_MESSAGE),
    );
}

/// List-level rules on NodePool/NodeClaim `requirements`.
pub(crate) fn requirements_rules() -> Value {
    json!([
        rule(
            "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
            "requirements with operator 'In' must have a value defined",
        ),
        rule(
            "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
            "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
        ),
        rule(
            "self.all(x, (x.operator == 'In' && has(x.minValues)) ? x.values.size() >= x.minValues : true)",
            "requirements with 'minValues' must have at least that many values specified in the 'values' field",
        ),
    ])
}

/// List-level rules on NodeOverlay `requirements`.
pub(crate) fn overlay_requirements_rules() -> Value {
    json!([
        rule(
            "self.all(x, x.operator == 'NotIn' ? x.values.size() != 0 : true)",
            "requirements with operator 'NotIn' must have a value defined",
        ),
        rule(
            "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
            "requirements with operator 'In' must have a value defined",
        ),
        rule(
            "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)",
            "requirements operator 'Gt', 'Lt', 'Gte' or 'Lte' must have a single positive integer value",
        ),
    ])
}

/// Rules on NodePool `template.metadata.labels` keys.
pub(crate) fn template_label_rules() -> Value {
    json!([
        rule(
            &format!("self.all(x, {})", karpenter_domain_rule("x")),
            KARPENTER_DOMAIN_MESSAGE,
        ),
        rule(
            r#"self.all(x, x != "karpenter.sh/nodepool")"#,
            NODEPOOL_LABEL_MESSAGE,
        ),
        rule(
            r#"self.all(x, x != "kubernetes.io/hostname")"#,
            HOSTNAME_LABEL_MESSAGE,
        ),
    ])
}

/// NodePool spec rules for static (`replicas`) pools.
pub(crate) fn node_pool_spec_rules() -> Value {
    json!([
        rule(
            "has(self.replicas) == has(oldSelf.replicas)",
            "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes",
        ),
        rule(
            "!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || (size(self.limits) == 1 && 'nodes' in self.limits))",
            "only 'limits.nodes' is supported on static NodePools",
        ),
        rule(
            "!has(self.replicas) || !has(self.weight)",
            "'weight' is not supported on static NodePools",
        ),
    ])
}

/// NodePool `nodeClassRef`: group and kind may not change (name may; that causes drift).
pub(crate) fn node_class_ref_immutability_rules() -> Value {
    json!([
        rule(
            "self.group == oldSelf.group",
            "nodeClassRef.group is immutable"
        ),
        rule(
            "self.kind == oldSelf.kind",
            "nodeClassRef.kind is immutable"
        ),
    ])
}

/// Disruption budgets: `schedule` and `duration` come together.
pub(crate) fn budgets_rules() -> Value {
    json!([rule(
        "self.all(x, has(x.schedule) == has(x.duration))",
        "'schedule' must be set with 'duration'",
    )])
}

/// NodeOverlay spec: `price` and `priceAdjustment` are exclusive.
pub(crate) fn overlay_spec_rules() -> Value {
    json!([rule(
        "!has(self.price) || !has(self.priceAdjustment)",
        "cannot set both 'price' and 'priceAdjustment'",
    )])
}

/// CapacityBuffer spec: a `podTemplateRef` buffer needs a count (`replicas` or `limits`), and
/// the two references exclude each other (upstream's rules and messages).
pub(crate) fn capacity_buffer_spec_rules() -> Value {
    json!([
        rule(
            "!has(self.podTemplateRef) || has(self.replicas) || has(self.limits)",
            "If podTemplateRef is set, replicas or limits must also be set",
        ),
        rule(
            "!(has(self.podTemplateRef) && has(self.scalableRef))",
            "You must define either PodTemplateRef or ScalableRef, but not both",
        ),
    ])
}

/// NodeOverlay `capacity`: only extended resources may be added.
pub(crate) fn overlay_capacity_rules() -> Value {
    json!([rule(
        "self.all(x, !(x in ['cpu', 'memory', 'ephemeral-storage', 'pods']))",
        "invalid resource restricted",
    )])
}

/// Schema of `minValues`: a plain (formatless) integer in 1..=50.
pub(crate) fn min_values(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "integer",
        "minimum": 1,
        "maximum": 50,
    })
}

/// Schema of a `taints` / `startupTaints` list (core `Taint` with Karpenter's validation).
pub(crate) fn taint_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "x-kubernetes-list-type": "atomic",
        "items": {
            "type": "object",
            "description": "A taint: pods that do not tolerate it are affected according to its effect.",
            "required": ["effect", "key"],
            "properties": {
                "effect": {
                    "type": "string",
                    "description": "Effect on pods that do not tolerate the taint.",
                    "enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"],
                },
                "key": {
                    "type": "string",
                    "description": "Taint key.",
                    "minLength": 1,
                    "pattern": patterns::QUALIFIED_NAME,
                },
                "timeAdded": {
                    "type": "string",
                    "format": "date-time",
                    "description": "When the taint was added.",
                },
                "value": {
                    "type": "string",
                    "description": "Taint value.",
                    "pattern": patterns::QUALIFIED_NAME,
                },
            },
        },
    })
}

/// Container transform for [`crate::Condition`]: `reason` and `message` default to `""` when
/// reading, but the schema must neither default them nor treat them as optional (upstream
/// requires all five fields on NodePool and NodeOverlay conditions).
pub(crate) fn strict_condition(schema: &mut Schema) {
    if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
        for field in ["reason", "message"] {
            if let Some(prop) = props.get_mut(field).and_then(Value::as_object_mut) {
                prop.remove("default");
            }
        }
    }
    schema.insert(
        "required".into(),
        json!(["lastTransitionTime", "message", "reason", "status", "type"]),
    );
}

/// Field transform for NodeClaim conditions: upstream's NodeClaim CRD lets `reason` be empty
/// and requires only `lastTransitionTime`, `status` and `type`.
pub(crate) fn relax_node_claim_conditions(schema: &mut Schema) {
    let item = schema
        .get_mut("items")
        .and_then(Value::as_object_mut)
        .expect("conditions schema is an array");
    item.insert(
        "required".into(),
        json!(["lastTransitionTime", "status", "type"]),
    );
    let reason = item
        .get_mut("properties")
        .and_then(|p| p.get_mut("reason"))
        .and_then(Value::as_object_mut)
        .expect("condition schema has a reason");
    reason.remove("minLength");
    reason.insert(
        "pattern".into(),
        Value::String(patterns::CONDITION_REASON_OR_EMPTY.into()),
    );
}

/// Turns the CRD produced by kube's derive into the one we ship:
///
/// * `spec.names.listKind` is filled in;
/// * the root schema gets the `apiVersion`, `kind` and `metadata` properties (kube leaves them
///   out; the API server validates them itself, but upstream lists them);
/// * `nullable: true` markers added for `Option` fields are dropped: like upstream, optional
///   fields are simply omitted, and a `null` sent by a client is pruned before defaulting;
/// * every int-or-string node (resource quantities) gets the explicit `anyOf` integer/string
///   form and the quantity pattern, as controller-gen writes it (and loses k8s-openapi's long
///   `Quantity` description);
/// * the root `title` schemars adds is dropped.
pub(crate) fn finalize_crd(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let kind = crd.spec.names.kind.clone();
    crd.spec.names.list_kind = Some(format!("{kind}List"));
    for version in &mut crd.spec.versions {
        let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        else {
            continue;
        };
        let mut value = serde_json::to_value(&*schema).expect("schema serializes");
        clean_schema(&mut value);
        if let Some(root) = value.as_object_mut() {
            root.remove("title");
        }
        if let Some(props) = value.get_mut("properties").and_then(Value::as_object_mut) {
            props.insert("apiVersion".into(), json!({
                "type": "string",
                "description": "Versioned schema of this representation of the object (`group/version`).",
            }));
            props.insert(
                "kind".into(),
                json!({
                    "type": "string",
                    "description": "REST resource this object represents, in CamelCase.",
                }),
            );
            props.insert("metadata".into(), json!({ "type": "object" }));
        }
        *schema = serde_json::from_value::<JSONSchemaProps>(value).expect("schema deserializes");
    }
    crd
}

/// Recursive part of [`finalize_crd`].
fn clean_schema(value: &mut Value) {
    let Some(obj) = value.as_object_mut() else {
        return;
    };
    obj.remove("nullable");
    if obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) {
        obj.insert(
            "anyOf".into(),
            json!([{ "type": "integer" }, { "type": "string" }]),
        );
        obj.remove("description");
        obj.entry("pattern")
            .or_insert_with(|| Value::String(patterns::QUANTITY.into()));
    }
    for key in ["items", "additionalProperties"] {
        if let Some(sub) = obj.get_mut(key) {
            clean_schema(sub);
        }
    }
    if let Some(props) = obj.get_mut("properties").and_then(Value::as_object_mut) {
        props.values_mut().for_each(clean_schema);
    }
}

/// Rewrites whole-number floats as integers. k8s-openapi stores bounds such as `minimum` as
/// `f64`; this keeps the YAML output as `minimum: 1` rather than `minimum: 1.0`.
pub(crate) fn integral_floats_to_ints(value: &mut Value) {
    match value {
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|_| n.is_f64())
                && f.fract() == 0.0
                && f.abs() < 9.0e15
            {
                *value = Value::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_floats_to_ints),
        Value::Object(map) => map.values_mut().for_each(integral_floats_to_ints),
        _ => {}
    }
}

/// Collects every property path of a schema (used by tests and tooling).
///
/// Paths are dotted; array items are written `[]` and map values `{}`, e.g.
/// `spec.template.spec.requirements[].key` or `spec.limits{}`.
pub fn property_paths(schema: &Value) -> Vec<String> {
    let mut out = Vec::new();
    walk_paths(schema, String::new(), &mut out);
    out
}

fn walk_paths(schema: &Value, prefix: String, out: &mut Vec<String>) {
    let Some(obj) = schema.as_object() else {
        return;
    };
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            let path = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}.{name}")
            };
            out.push(path.clone());
            walk_paths(sub, path, out);
        }
    }
    if let Some(items) = obj.get("items") {
        let path = format!("{prefix}[]");
        out.push(path.clone());
        walk_paths(items, path, out);
    }
    if let Some(add) = obj.get("additionalProperties").filter(|v| v.is_object()) {
        let path = format!("{prefix}{{}}");
        out.push(path.clone());
        walk_paths(add, path, out);
    }
}

/// Looks up the schema node at a path produced by [`property_paths`] (`""` is the root).
pub fn schema_at<'a>(schema: &'a Value, path: &str) -> Option<&'a Value> {
    let mut node = schema;
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("[]") {
            node = node.get("items")?;
            rest = r;
        } else if let Some(r) = rest.strip_prefix("{}") {
            node = node.get("additionalProperties")?;
            rest = r;
        } else {
            let r = rest.strip_prefix('.').unwrap_or(rest);
            let end = r.find(['.', '[', '{']).unwrap_or(r.len());
            node = node.get("properties")?.get(&r[..end])?;
            rest = &r[end..];
        }
    }
    Some(node)
}
