//! Structural-schema handling for custom resources: defaulting and a basic validation
//! (types, `required`, `enum`, `nullable`, int-or-string).

use serde_json::Value;

/// Drops fields the structural schema does not declare, as the API server does for custom
/// resources, except under `x-kubernetes-preserve-unknown-fields`. At the root, `apiVersion`,
/// `kind` and `metadata` are always kept (as in objects marked `x-kubernetes-embedded-resource`).
pub fn prune_unknown_fields(schema: &Value, value: &mut Value) {
    prune(schema, value, true);
}

fn prune(schema: &Value, value: &mut Value, keeps_type_and_metadata: bool) {
    let preserve_unknown = schema.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true);
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let embedded = schema.get("x-kubernetes-embedded-resource").and_then(Value::as_bool) == Some(true);
            let keeps_envelope = keeps_type_and_metadata || embedded;
            map.retain(|name, child| {
                if keeps_envelope && matches!(name.as_str(), "apiVersion" | "kind" | "metadata") {
                    return true;
                }
                if let Some(property_schema) = properties.and_then(|p| p.get(name)) {
                    prune(property_schema, child, false);
                    return true;
                }
                if let Some(additional_schema) = additional {
                    prune(additional_schema, child, false);
                    return true;
                }
                preserve_unknown
            });
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    prune(item_schema, item, false);
                }
            }
        }
        _ => {}
    }
}

/// The fields (as dotted paths, e.g. `spec.colour`) that [`prune_unknown_fields`] would drop:
/// what a `fieldValidation=Strict` request is refused for.
pub fn unknown_fields(schema: &Value, value: &Value) -> Vec<String> {
    let mut found = Vec::new();
    collect_unknown(schema, value, "", true, &mut found);
    found
}

fn collect_unknown(schema: &Value, value: &Value, path: &str, keeps_type_and_metadata: bool, found: &mut Vec<String>) {
    if schema.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true) && schema.get("properties").is_none() {
        return;
    }
    let child_path = |name: &str| if path.is_empty() { name.to_string() } else { format!("{path}.{name}") };
    match value {
        Value::Object(map) => {
            let preserve_unknown = schema.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true);
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let embedded = schema.get("x-kubernetes-embedded-resource").and_then(Value::as_bool) == Some(true);
            for (name, child) in map {
                if (keeps_type_and_metadata || embedded) && matches!(name.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(property_schema) = properties.and_then(|p| p.get(name)) {
                    collect_unknown(property_schema, child, &child_path(name), false, found);
                } else if let Some(additional_schema) = additional {
                    collect_unknown(additional_schema, child, &child_path(name), false, found);
                } else if !preserve_unknown {
                    found.push(child_path(name));
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter().enumerate() {
                    collect_unknown(item_schema, item, &format!("{path}[{index}]"), false, found);
                }
            }
        }
        _ => {}
    }
}

/// Fills in `default` values from the schema wherever a property is absent, at any depth.
pub fn apply_defaults(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (name, property_schema) in properties {
                    if !map.contains_key(name)
                        && let Some(default) = property_schema.get("default")
                    {
                        map.insert(name.clone(), default.clone());
                    }
                    if let Some(child) = map.get_mut(name) {
                        apply_defaults(property_schema, child);
                    }
                }
            } else if let Some(additional) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for child in map.values_mut() {
                    apply_defaults(additional, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    apply_defaults(item_schema, item);
                }
            }
        }
        _ => {}
    }
}

/// Checks a value against the schema, collecting (field path, message) problems.
pub fn validate(schema: &Value, value: &Value, path: &str, problems: &mut Vec<(String, String)>) {
    let field = if path.is_empty() { "<root>".to_string() } else { path.to_string() };
    if value.is_null() {
        if schema.get("nullable").and_then(Value::as_bool) != Some(true) && schema.get("type").is_some() {
            problems.push((field, "Invalid value: \"null\": must not be null".to_string()));
        }
        return;
    }
    if schema.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true) {
        if !(value.is_string() || is_integer(value)) {
            problems.push((field, format!("Invalid value: {value}: must be an integer or a string")));
        }
        return;
    }
    if let Some(expected) = schema.get("type").and_then(Value::as_str) {
        let fits = match expected {
            "object" => value.is_object(),
            "array" => value.is_array(),
            "string" => value.is_string(),
            "integer" => is_integer(value),
            "number" => value.is_number(),
            "boolean" => value.is_boolean(),
            _ => true,
        };
        if !fits {
            problems.push((field, format!("Invalid value: {}: must be of type {expected}", describe(value))));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let listed: Vec<String> = allowed.iter().map(Value::to_string).collect();
        problems.push((field.clone(), format!("Unsupported value: {value}: supported values: {}", listed.join(", "))));
    }
    let child_path = |name: &str| if path.is_empty() { name.to_string() } else { format!("{path}.{name}") };
    match value {
        Value::Object(map) => {
            if let Some(required) = schema.get("required").and_then(Value::as_array) {
                for name in required.iter().filter_map(Value::as_str) {
                    if !map.contains_key(name) {
                        problems.push((child_path(name), "Required value".to_string()));
                    }
                }
            }
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (name, child) in map {
                    // metadata is validated by the server itself, not by the CRD schema.
                    if path.is_empty() && name == "metadata" {
                        continue;
                    }
                    if let Some(property_schema) = properties.get(name) {
                        validate(property_schema, child, &child_path(name), problems);
                    }
                }
            } else if let Some(additional) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                for (name, child) in map {
                    validate(additional, child, &child_path(name), problems);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter().enumerate() {
                    validate(item_schema, item, &format!("{path}[{index}]"), problems);
                }
            }
        }
        _ => {}
    }
}

fn is_integer(value: &Value) -> bool {
    value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
}

fn describe(value: &Value) -> String {
    match value {
        Value::Object(_) => "object".to_string(),
        Value::Array(_) => "array".to_string(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["size"], "properties": {
                "size": {"type": "integer"},
                "mode": {"type": "string", "enum": ["fast", "slow"], "default": "slow"},
                "nested": {"type": "object", "default": {}, "properties": {"depth": {"type": "integer", "default": 3}}},
                "items": {"type": "array", "items": {"type": "object", "properties": {"weight": {"type": "integer", "default": 1}}}}
            }}
        }})
    }

    #[test]
    fn defaults_fill_absent_fields_at_any_depth() {
        let mut value = json!({"spec": {"size": 2, "items": [{}, {"weight": 5}]}});
        apply_defaults(&schema(), &mut value);
        assert_eq!(value["spec"]["mode"], "slow");
        assert_eq!(value["spec"]["nested"]["depth"], 3);
        assert_eq!(value["spec"]["items"][0]["weight"], 1);
        assert_eq!(value["spec"]["items"][1]["weight"], 5);
    }

    #[test]
    fn pruning_drops_undeclared_fields_but_keeps_preserved_ones() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "size": {"type": "integer"},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}
            }}
        }});
        let mut value = json!({
            "apiVersion": "x/v1", "kind": "W", "metadata": {"name": "w"},
            "junk": 1,
            "spec": {"size": 1, "typo": 2, "free": {"anything": {"deep": true}}, "labels": {"a": "b"}}
        });
        prune_unknown_fields(&schema, &mut value);
        assert_eq!(value, json!({
            "apiVersion": "x/v1", "kind": "W", "metadata": {"name": "w"},
            "spec": {"size": 1, "free": {"anything": {"deep": true}}, "labels": {"a": "b"}}
        }));
    }

    #[test]
    fn unknown_fields_are_the_ones_pruning_drops() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "size": {"type": "integer"},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "items": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}}
            }}
        }});
        let value = json!({
            "apiVersion": "x/v1", "kind": "W", "metadata": {"name": "w"},
            "junk": 1,
            "spec": {"size": 1, "typo": 2, "free": {"anything": true}, "items": [{"a": "x", "b": "y"}]}
        });
        assert_eq!(unknown_fields(&schema, &value), vec!["junk", "spec.items[0].b", "spec.typo"]);
    }

    #[test]
    fn validation_reports_type_required_and_enum() {
        let mut problems = Vec::new();
        validate(&schema(), &json!({"spec": {"mode": "medium", "items": "x"}}), "", &mut problems);
        let fields: Vec<&str> = problems.iter().map(|(f, _)| f.as_str()).collect();
        assert!(fields.contains(&"spec.size"), "{problems:?}");
        assert!(fields.contains(&"spec.mode"), "{problems:?}");
        assert!(fields.contains(&"spec.items"), "{problems:?}");
        let mut none = Vec::new();
        validate(&schema(), &json!({"spec": {"size": 1}}), "", &mut none);
        assert!(none.is_empty(), "{none:?}");
    }
}
