//! Structural-schema handling for custom resources: pruning, defaulting and validation as the
//! API server does it. Validation checks types, `required`, `enum`, `nullable` and
//! int-or-string; the value validations (`pattern`, `minLength`/`maxLength` in characters,
//! `minItems`/`maxItems`, `minProperties`/`maxProperties`, `minimum`/`maximum` with their
//! exclusive forms); the uniqueness of `x-kubernetes-list-type` `set` and `map` lists; and the
//! `x-kubernetes-validations` CEL rules (evaluated by [`crate::apiserver::cel`]), transition rules
//! (`oldSelf`) only on update. Problems are worded as the API server words them.

use serde_json::Value;

use crate::apiserver::cel::{self, CelError, Val};

/// Drops fields the structural schema does not declare, as the API server does for custom
/// resources, except under `x-kubernetes-preserve-unknown-fields`. At the root, `apiVersion`,
/// `kind` and `metadata` are always kept (as in objects marked `x-kubernetes-embedded-resource`).
pub fn prune_unknown_fields(schema: &Value, value: &mut Value) {
    prune(schema, value, true);
}

fn prune(schema: &Value, value: &mut Value, keeps_type_and_metadata: bool) {
    let preserve_unknown = schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true);
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let embedded = schema
                .get("x-kubernetes-embedded-resource")
                .and_then(Value::as_bool)
                == Some(true);
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

fn collect_unknown(
    schema: &Value,
    value: &Value,
    path: &str,
    keeps_type_and_metadata: bool,
    found: &mut Vec<String>,
) {
    if schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true)
        && schema.get("properties").is_none()
    {
        return;
    }
    let child_path = |name: &str| {
        if path.is_empty() {
            name.to_string()
        } else {
            format!("{path}.{name}")
        }
    };
    match value {
        Value::Object(map) => {
            let preserve_unknown = schema
                .get("x-kubernetes-preserve-unknown-fields")
                .and_then(Value::as_bool)
                == Some(true);
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let embedded = schema
                .get("x-kubernetes-embedded-resource")
                .and_then(Value::as_bool)
                == Some(true);
            for (name, child) in map {
                if (keeps_type_and_metadata || embedded)
                    && matches!(name.as_str(), "apiVersion" | "kind" | "metadata")
                {
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
            } else if let Some(additional) =
                schema.get("additionalProperties").filter(|a| a.is_object())
            {
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

/// Checks a value against the schema, collecting (field path, message) problems: the schema
/// validation of a create.
pub fn validate(schema: &Value, value: &Value, path: &str, problems: &mut Vec<(String, String)>) {
    validate_update(schema, value, None, path, problems);
}

/// Checks a value against the schema as the API server checks a write, collecting (field path,
/// message) problems. `old` is the stored object on an update (`None` on a create): transition
/// rules (those referring to `oldSelf`) run only where it has a value at the same place, and
/// value validations and CEL rules pass a value unchanged from `old` (validation ratcheting).
/// When the schema validation finds a type, required, enum, length or size problem, the CEL
/// rules are skipped with one more problem saying so, as on a real cluster.
pub fn validate_update(
    schema: &Value,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    problems: &mut Vec<(String, String)>,
) {
    let mut found = Vec::new();
    check_structure(schema, value, old, path, &mut found);
    let blocked = found.iter().any(|p| p.blocking);
    problems.extend(found.into_iter().map(|p| (p.field, p.message)));
    if blocked {
        if !has_rules(schema) {
            return;
        }
        problems.push((
            "<nil>".to_string(),
            "Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing \
             errors to complete validation"
                .to_string(),
        ));
    } else {
        let mut budget = Some(RUNTIME_COST_BUDGET);
        check_rules(schema, value, old, path, &mut budget, problems);
    }
}

/// One schema validation problem; `blocking` ones (wrong type, required, enum, too long, too
/// many) keep the CEL rules from running.
struct Problem {
    field: String,
    message: String,
    blocking: bool,
}

impl Problem {
    fn blocking(field: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            field: field.into(),
            message: message.into(),
            blocking: true,
        }
    }

    fn other(field: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            field: field.into(),
            message: message.into(),
            blocking: false,
        }
    }
}

fn child_path(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// The OpenAPI part of the validation: types, required, enum, the value validations and the
/// list types.
fn check_structure(
    schema: &Value,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    problems: &mut Vec<Problem>,
) {
    let field = if path.is_empty() {
        "<root>".to_string()
    } else {
        path.to_string()
    };
    if value.is_null() {
        if schema.get("nullable").and_then(Value::as_bool) != Some(true)
            && schema.get("type").is_some()
        {
            problems.push(Problem::blocking(
                field,
                "Invalid value: \"null\": must not be null",
            ));
        }
        return;
    }
    // Validation ratcheting: a value the update leaves as it was passes the value validations.
    let unchanged = old == Some(value);
    if schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true)
    {
        if !(value.is_string() || is_integer(value)) {
            problems.push(Problem::blocking(
                field,
                format!("Invalid value: {value}: must be an integer or a string"),
            ));
        } else if !unchanged {
            check_values(schema, value, &field, problems);
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
            problems.push(Problem::blocking(
                field,
                format!(
                    "Invalid value: {}: must be of type {expected}",
                    describe(value)
                ),
            ));
            return;
        }
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let listed: Vec<String> = allowed.iter().map(Value::to_string).collect();
        problems.push(Problem::blocking(
            field.clone(),
            format!(
                "Unsupported value: {value}: supported values: {}",
                listed.join(", ")
            ),
        ));
    }
    if !unchanged {
        check_values(schema, value, &field, problems);
    }
    match value {
        Value::Object(map) => {
            if let Some(required) = schema.get("required").and_then(Value::as_array) {
                for name in required.iter().filter_map(Value::as_str) {
                    if !map.contains_key(name) {
                        problems.push(Problem::blocking(child_path(path, name), "Required value"));
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
                        let old_child = old.and_then(|o| o.get(name));
                        check_structure(
                            property_schema,
                            child,
                            old_child,
                            &child_path(path, name),
                            problems,
                        );
                    }
                }
            } else if let Some(additional) =
                schema.get("additionalProperties").filter(|a| a.is_object())
            {
                for (name, child) in map {
                    let old_child = old.and_then(|o| o.get(name));
                    check_structure(
                        additional,
                        child,
                        old_child,
                        &child_path(path, name),
                        problems,
                    );
                }
            }
        }
        Value::Array(items) => {
            if !unchanged {
                check_list_type(schema, items, path, problems);
            }
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter().enumerate() {
                    let old_item = correlated_item(schema, item, old);
                    check_structure(
                        item_schema,
                        item,
                        old_item,
                        &format!("{path}[{index}]"),
                        problems,
                    );
                }
            }
        }
        _ => {}
    }
}

/// The value validations of OpenAPI v3, worded as kube-openapi and the API server word them.
fn check_values(schema: &Value, value: &Value, field: &str, problems: &mut Vec<Problem>) {
    let limit = |name: &str| schema.get(name).and_then(Value::as_u64);
    match value {
        Value::String(text) => {
            let length = text.chars().count() as u64;
            if let Some(max) = limit("maxLength")
                && length > max
            {
                problems.push(Problem::blocking(
                    field,
                    format!("Too long: may not be longer than {max}"),
                ));
            }
            if let Some(min) = limit("minLength")
                && length < min
            {
                problems
                    .push(Problem::other(field, format!("Invalid value: {value}: {field} in body should be at least {min} chars long")));
            }
            if let Some(pattern) = schema.get("pattern").and_then(Value::as_str) {
                match cel::regex(pattern) {
                    Ok(re) if re.is_match(text) => {}
                    Ok(_) => {
                        problems.push(Problem::other(field, format!("Invalid value: {value}: {field} in body should match '{pattern}'")))
                    }
                    Err(e) => problems.push(Problem::other(
                        field,
                        format!("Invalid value: {value}: {field} in body: the schema's pattern '{pattern}' does not compile: {e}"),
                    )),
                }
            }
        }
        Value::Array(items) => {
            let count = items.len() as u64;
            if let Some(max) = limit("maxItems")
                && count > max
            {
                problems.push(Problem::blocking(
                    field,
                    format!("Too many: {count}: must have at most {max} items"),
                ));
            }
            if let Some(min) = limit("minItems")
                && count < min
            {
                problems.push(Problem::other(
                    field,
                    format!(
                        "Invalid value: {count}: {field} in body should have at least {min} items"
                    ),
                ));
            }
        }
        Value::Object(map) => {
            let count = map.len() as u64;
            if let Some(max) = limit("maxProperties")
                && count > max
            {
                problems.push(Problem::blocking(
                    field,
                    format!("Too many: {count}: must have at most {max} items"),
                ));
            }
            if let Some(min) = limit("minProperties")
                && count < min
            {
                problems
                    .push(Problem::other(field, format!("Invalid value: {count}: {field} in body should have at least {min} properties")));
            }
        }
        Value::Number(number) => {
            let exclusive = |name: &str| schema.get(name).and_then(Value::as_bool) == Some(true);
            if let Some(max) = schema.get("maximum").and_then(Value::as_number) {
                let ordering = compare_numbers(number, max);
                let (value, max) = (go_number(number), go_number(max));
                if exclusive("exclusiveMaximum") && ordering.is_ge() {
                    problems.push(Problem::other(
                        field,
                        format!(
                            "Invalid value: {value}: {field} in body should be less than {max}"
                        ),
                    ));
                } else if ordering.is_gt() {
                    problems.push(Problem::other(
                        field,
                        format!("Invalid value: {value}: {field} in body should be less than or equal to {max}"),
                    ));
                }
            }
            if let Some(min) = schema.get("minimum").and_then(Value::as_number) {
                let ordering = compare_numbers(number, min);
                let (value, min) = (go_number(number), go_number(min));
                if exclusive("exclusiveMinimum") && ordering.is_le() {
                    problems.push(Problem::other(
                        field,
                        format!(
                            "Invalid value: {value}: {field} in body should be greater than {min}"
                        ),
                    ));
                } else if ordering.is_lt() {
                    problems.push(Problem::other(
                        field,
                        format!("Invalid value: {value}: {field} in body should be greater than or equal to {min}"),
                    ));
                }
            }
        }
        _ => {}
    }
}

/// A number as Go's `%v` prints it: integral floats without a fraction (`10000`, not `10000.0`).
fn go_number(number: &serde_json::Number) -> String {
    match number.as_f64() {
        Some(f) if !(number.is_i64() || number.is_u64()) && f.fract() == 0.0 && f.abs() < 1e21 => {
            format!("{f:.0}")
        }
        _ => number.to_string(),
    }
}

/// Orders two JSON numbers, exactly when both are integers.
fn compare_numbers(a: &serde_json::Number, b: &serde_json::Number) -> std::cmp::Ordering {
    match (a.as_i64(), b.as_i64()) {
        (Some(a), Some(b)) => a.cmp(&b),
        _ => {
            let (a, b) = (
                a.as_f64().unwrap_or(f64::NAN),
                b.as_f64().unwrap_or(f64::NAN),
            );
            a.partial_cmp(&b).unwrap_or(std::cmp::Ordering::Equal)
        }
    }
}

/// `x-kubernetes-list-type: set` items and `map` keys must be unique; each repeated value is
/// reported once, at its second occurrence. Items of a `map` list need their key fields.
fn check_list_type(schema: &Value, items: &[Value], path: &str, problems: &mut Vec<Problem>) {
    match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("set") => {
            let mut reported: Vec<&Value> = Vec::new();
            for (index, item) in items.iter().enumerate() {
                if items[..index].contains(item) && !reported.contains(&item) {
                    reported.push(item);
                    problems.push(Problem::other(
                        format!("{path}[{index}]"),
                        format!("Duplicate value: {}", go_value(item)),
                    ));
                }
            }
        }
        Some("map") => {
            let keys = map_keys(schema);
            let mut reported: Vec<Vec<Option<&Value>>> = Vec::new();
            for (index, item) in items.iter().enumerate() {
                let Some(object) = item.as_object() else {
                    continue;
                };
                let mut complete = true;
                for key in &keys {
                    if !object.contains_key(*key) {
                        complete = false;
                        problems.push(Problem::blocking(
                            format!("{path}[{index}].{key}"),
                            "Required value",
                        ));
                    }
                }
                if !complete {
                    continue;
                }
                let identity: Vec<Option<&Value>> = keys.iter().map(|k| object.get(*k)).collect();
                let repeated = items[..index].iter().any(|earlier| {
                    keys.iter()
                        .map(|k| earlier.get(*k))
                        .eq(identity.iter().copied())
                });
                if repeated && !reported.contains(&identity) {
                    let mut shown: Vec<(&str, &Value)> = keys
                        .iter()
                        .zip(&identity)
                        .filter_map(|(k, v)| v.map(|v| (*k, v)))
                        .collect();
                    shown.sort_by(|a, b| a.0.cmp(b.0));
                    let entries: Vec<String> = shown
                        .iter()
                        .map(|(k, v)| format!("\"{k}\":{}", go_value(v)))
                        .collect();
                    problems.push(Problem::other(
                        format!("{path}[{index}]"),
                        format!(
                            "Duplicate value: map[string]interface {{}}{{{}}}",
                            entries.join(", ")
                        ),
                    ));
                    reported.push(identity);
                }
            }
        }
        _ => {}
    }
}

fn map_keys(schema: &Value) -> Vec<&str> {
    schema
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|keys| keys.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// The item of the old list that a new list item corresponds to: for `x-kubernetes-list-type:
/// map` lists, the one with the same keys; other lists do not correlate their items.
fn correlated_item<'a>(schema: &Value, item: &Value, old: Option<&'a Value>) -> Option<&'a Value> {
    if schema.get("x-kubernetes-list-type").and_then(Value::as_str) != Some("map") {
        return None;
    }
    let keys = map_keys(schema);
    if keys.is_empty() {
        return None;
    }
    old?.as_array()?
        .iter()
        .find(|candidate| keys.iter().all(|k| candidate.get(*k) == item.get(*k)))
}

/// A value as Go's `%v`/`%q` prints it in a field error: strings quoted, numbers and booleans
/// bare, containers by their kind.
fn go_value(value: &Value) -> String {
    match value {
        Value::Object(_) | Value::Array(_) => describe(value),
        other => other.to_string(),
    }
}

/// Whether the schema has `x-kubernetes-validations` anywhere (a real API server only has a
/// CEL validator, and so the "rules were not checked" problem, for such schemas).
fn has_rules(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => {
            map.get("x-kubernetes-validations")
                .and_then(Value::as_array)
                .is_some_and(|rules| !rules.is_empty())
                || ["properties", "patternProperties", "definitions"]
                    .iter()
                    .filter_map(|k| map.get(*k).and_then(Value::as_object))
                    .any(|children| children.values().any(has_rules))
                || ["items", "additionalProperties"]
                    .iter()
                    .filter_map(|k| map.get(*k))
                    .any(has_rules)
                || ["allOf", "anyOf", "oneOf"]
                    .iter()
                    .filter_map(|k| map.get(*k).and_then(Value::as_array))
                    .any(|s| s.iter().any(has_rules))
        }
        _ => false,
    }
}

/// What all the CEL rules run on one write may cost together, in CEL cost units: the API
/// server's `RuntimeCELCostBudget`.
const RUNTIME_COST_BUDGET: u64 = 10_000_000;

/// Runs the `x-kubernetes-validations` rules of every schema node the value reaches, as the
/// API server's CEL validator does. `budget` is what the rules may still cost together; once a
/// rule runs out of it, it is `None` and no further rule runs.
fn check_rules(
    schema: &Value,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    budget: &mut Option<u64>,
    problems: &mut Vec<(String, String)>,
) {
    if value.is_null() {
        return;
    }
    if let Some(rules) = schema
        .get("x-kubernetes-validations")
        .and_then(Value::as_array)
    {
        for rule in rules {
            if budget.is_none() {
                return;
            }
            check_rule(schema, rule, value, old, path, budget, problems);
        }
    }
    match value {
        Value::Object(map) => {
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (name, child) in map {
                if path.is_empty() && name == "metadata" {
                    continue;
                }
                let child_schema = match properties {
                    Some(properties) => properties.get(name),
                    None => additional,
                };
                if let Some(child_schema) = child_schema {
                    check_rules(
                        child_schema,
                        child,
                        old.and_then(|o| o.get(name)),
                        &child_path(path, name),
                        budget,
                        problems,
                    );
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (index, item) in items.iter().enumerate() {
                    check_rules(
                        item_schema,
                        item,
                        correlated_item(schema, item, old),
                        &format!("{path}[{index}]"),
                        budget,
                        problems,
                    );
                }
            }
        }
        _ => {}
    }
}

/// One `x-kubernetes-validations` rule on one value, within the API server's per-call cost
/// limit and what is left of the write's `budget` (`None` once a rule ran out of it).
fn check_rule(
    schema: &Value,
    rule: &Value,
    value: &Value,
    old: Option<&Value>,
    path: &str,
    budget: &mut Option<u64>,
    problems: &mut Vec<(String, String)>,
) {
    let Some(remaining) = *budget else {
        return;
    };
    let Some(text) = rule.get("rule").and_then(Value::as_str) else {
        return;
    };
    let message = rule
        .get("message")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|m| !m.is_empty());
    // What error messages call the rule: its message, or else its text.
    let described = message.unwrap_or(text.trim());
    let type_name = schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let field = if path.is_empty() {
        "<nil>".to_string()
    } else {
        path.to_string()
    };
    let program = match cel::compile(text) {
        Ok(program) => program,
        Err(e) => {
            problems.push((
                field,
                format!(
                    "Invalid value: \"{type_name}\": compilation failed: {e} for rule: {described}"
                ),
            ));
            return;
        }
    };
    let transition = program.references("oldSelf");
    if transition && old.is_none() {
        return;
    }
    if !transition && old == Some(value) {
        // Ratcheting: a rule does not fail a value the update leaves as it was.
        return;
    }
    let mut variables = vec![("self", Val::from_json(value))];
    if let Some(old) = old.filter(|_| transition) {
        variables.push(("oldSelf", Val::from_json(old)));
    }
    let (result, cost) = program.evaluate_metered(&variables, cel::PER_CALL_LIMIT.min(remaining));
    if cost > remaining {
        problems.push((
            field,
            format!(
                "Invalid value: \"{type_name}\": validation failed due to running out of cost budget, no further validation rules will be run"
            ),
        ));
        *budget = None;
        return;
    }
    *budget = Some(remaining - cost);
    match result {
        Ok(Val::Bool(true)) => {}
        Ok(Val::Bool(false)) => {
            let field = match rule.get("fieldPath").and_then(Value::as_str).map(|p| p.trim_start_matches('.')).filter(|p| !p.is_empty()) {
                Some(relative) if path.is_empty() => relative.to_string(),
                Some(relative) if relative.starts_with('[') => format!("{path}{relative}"),
                Some(relative) => format!("{path}.{relative}"),
                None => field,
            };
            let detail = message.map_or_else(|| format!("failed rule: {}", text.trim()), str::to_string);
            let body = match rule.get("reason").and_then(Value::as_str) {
                Some("FieldValueForbidden") => format!("Forbidden: {detail}"),
                Some("FieldValueRequired") => format!("Required value: {detail}"),
                Some("FieldValueDuplicate") => format!("Duplicate value: \"{type_name}\""),
                _ => format!("Invalid value: \"{type_name}\": {detail}"),
            };
            problems.push((field, body));
        }
        Ok(other) => problems.push((
            field,
            format!("Invalid value: \"{type_name}\": rule evaluated to {} instead of bool evaluating rule: {described}", other.type_name()),
        )),
        Err(e @ CelError::NoSuchOverload(_)) => problems.push((
            field,
            format!(
                "Invalid value: \"{type_name}\": '{e}': call arguments did not match a supported operator, function or macro signature for rule: {described}"
            ),
        )),
        Err(e) if e.is_limit() => problems.push((
            field,
            format!("Invalid value: \"{type_name}\": '{e}': call cost exceeds limit for rule: {described}"),
        )),
        Err(e) => problems.push((field, format!("Invalid value: \"{type_name}\": {e} evaluating rule: {described}"))),
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
mod tests;
