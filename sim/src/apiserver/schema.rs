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
        assert_eq!(
            value,
            json!({
                "apiVersion": "x/v1", "kind": "W", "metadata": {"name": "w"},
                "spec": {"size": 1, "free": {"anything": {"deep": true}}, "labels": {"a": "b"}}
            })
        );
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
        assert_eq!(
            unknown_fields(&schema, &value),
            vec!["junk", "spec.items[0].b", "spec.typo"]
        );
    }

    #[test]
    fn validation_reports_type_required_and_enum() {
        let mut problems = Vec::new();
        validate(
            &schema(),
            &json!({"spec": {"mode": "medium", "items": "x"}}),
            "",
            &mut problems,
        );
        let fields: Vec<&str> = problems.iter().map(|(f, _)| f.as_str()).collect();
        assert!(fields.contains(&"spec.size"), "{problems:?}");
        assert!(fields.contains(&"spec.mode"), "{problems:?}");
        assert!(fields.contains(&"spec.items"), "{problems:?}");
        let mut none = Vec::new();
        validate(&schema(), &json!({"spec": {"size": 1}}), "", &mut none);
        assert!(none.is_empty(), "{none:?}");
    }

    fn problems_of(schema: &Value, value: &Value, old: Option<&Value>) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        validate_update(schema, value, old, "", &mut problems);
        problems
    }

    fn one_problem(schema: &Value, value: &Value) -> String {
        let problems = problems_of(schema, value, None);
        assert_eq!(problems.len(), 1, "{problems:?}");
        format!("{}: {}", problems[0].0, problems[0].1)
    }

    #[test]
    fn string_patterns_and_lengths_count_characters() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "expireAfter": {"type": "string", "pattern": "^(([0-9]+(s|m|h))+|Never)$"},
            "name": {"type": "string", "minLength": 1, "maxLength": 3}
        }}}});
        assert!(
            problems_of(
                &schema,
                &json!({"spec": {"expireAfter": "720h", "name": "héé"}}),
                None
            )
            .is_empty(),
            "3 characters, 5 bytes"
        );
        assert_eq!(
            one_problem(&schema, &json!({"spec": {"expireAfter": "30 days"}})),
            "spec.expireAfter: Invalid value: \"30 days\": spec.expireAfter in body should match '^(([0-9]+(s|m|h))+|Never)$'"
        );
        assert_eq!(
            one_problem(&schema, &json!({"spec": {"name": "abcd"}})),
            "spec.name: Too long: may not be longer than 3"
        );
        assert_eq!(
            one_problem(&schema, &json!({"spec": {"name": ""}})),
            "spec.name: Invalid value: \"\": spec.name in body should be at least 1 chars long"
        );
    }

    #[test]
    fn pattern_is_an_unanchored_search_and_a_broken_pattern_is_reported() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "b+"}, "c": {"type": "string", "pattern": "("}}});
        assert!(problems_of(&schema, &json!({"a": "abbc"}), None).is_empty());
        assert!(one_problem(&schema, &json!({"c": "x"})).contains("does not compile"));
    }

    #[test]
    fn item_and_property_counts() {
        let schema = json!({"type": "object", "properties": {
            "list": {"type": "array", "minItems": 1, "maxItems": 2, "items": {"type": "string"}},
            "labels": {"type": "object", "minProperties": 1, "maxProperties": 1, "additionalProperties": {"type": "string"}}
        }});
        assert!(
            problems_of(
                &schema,
                &json!({"list": ["a", "b"], "labels": {"a": "b"}}),
                None
            )
            .is_empty()
        );
        assert_eq!(
            one_problem(&schema, &json!({"list": ["a", "b", "c"]})),
            "list: Too many: 3: must have at most 2 items"
        );
        assert_eq!(
            one_problem(&schema, &json!({"list": []})),
            "list: Invalid value: 0: list in body should have at least 1 items"
        );
        assert_eq!(
            one_problem(&schema, &json!({"labels": {"a": "1", "b": "2"}})),
            "labels: Too many: 2: must have at most 1 items"
        );
        assert_eq!(
            one_problem(&schema, &json!({"labels": {}})),
            "labels: Invalid value: 0: labels in body should have at least 1 properties"
        );
    }

    #[test]
    fn numeric_bounds_inclusive_and_exclusive() {
        let schema = json!({"type": "object", "properties": {
            "weight": {"type": "integer", "minimum": 1, "maximum": 100},
            "ratio": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 1.5, "exclusiveMaximum": true}
        }});
        assert!(problems_of(&schema, &json!({"weight": 1, "ratio": 0.5}), None).is_empty());
        assert!(problems_of(&schema, &json!({"weight": 100}), None).is_empty());
        assert_eq!(
            one_problem(&schema, &json!({"weight": 0})),
            "weight: Invalid value: 0: weight in body should be greater than or equal to 1"
        );
        assert_eq!(
            one_problem(&schema, &json!({"weight": 101})),
            "weight: Invalid value: 101: weight in body should be less than or equal to 100"
        );
        assert_eq!(
            one_problem(&schema, &json!({"ratio": 0})),
            "ratio: Invalid value: 0: ratio in body should be greater than 0"
        );
        assert_eq!(
            one_problem(&schema, &json!({"ratio": 1.5})),
            "ratio: Invalid value: 1.5: ratio in body should be less than 1.5"
        );
        // Bounds written as floats (as k8s-openapi serializes them) print as Go prints them.
        let float_bound = json!({"type": "object", "properties": {"weight": {"type": "integer", "maximum": 10000.0}}});
        assert_eq!(
            one_problem(&float_bound, &json!({"weight": 10001})),
            "weight: Invalid value: 10001: weight in body should be less than or equal to 10000"
        );
    }

    #[test]
    fn set_and_map_lists_must_be_unique() {
        let schema = json!({"type": "object", "properties": {
            "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
            "conditions": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                "items": {"type": "object", "properties": {"type": {"type": "string"}, "status": {"type": "string"}}}}
        }});
        assert!(
            problems_of(
                &schema,
                &json!({"tags": ["a", "b"], "conditions": [{"type": "A"}, {"type": "B"}]}),
                None
            )
            .is_empty()
        );
        assert_eq!(
            problems_of(&schema, &json!({"tags": ["a", "b", "a", "a"]}), None),
            vec![("tags[2]".to_string(), "Duplicate value: \"a\"".to_string())]
        );
        assert_eq!(
            one_problem(
                &schema,
                &json!({"conditions": [{"type": "A", "status": "True"}, {"type": "A", "status": "False"}]})
            ),
            "conditions[1]: Duplicate value: map[string]interface {}{\"type\":\"A\"}"
        );
        assert_eq!(
            one_problem(&schema, &json!({"conditions": [{"status": "True"}]})),
            "conditions[0].type: Required value"
        );
    }

    fn pool_schema() -> Value {
        json!({"type": "object", "properties": {"spec": {
            "type": "object",
            "x-kubernetes-validations": [
                {"rule": "has(self.replicas) == has(oldSelf.replicas)", "message": "Cannot transition NodePool between static and dynamic"},
                {"rule": "!has(self.replicas) || !has(self.weight)", "message": "'weight' is not supported on static NodePools"}
            ],
            "properties": {
                "replicas": {"type": "integer"},
                "weight": {"type": "integer", "maximum": 100},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "requirements": {
                    "type": "array",
                    "x-kubernetes-validations": [
                        {"rule": "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)", "message": "requirements with operator 'In' must have a value defined"},
                        {"rule": "self.all(x, (x.operator == 'Gt') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)", "message": "requirements operator 'Gt' must have a single positive integer value"}
                    ],
                    "items": {"type": "object", "properties": {
                        "key": {"type": "string", "x-kubernetes-validations": [{"rule": "self != 'kubernetes.io/hostname'", "message": "label \"kubernetes.io/hostname\" is restricted"}]},
                        "operator": {"type": "string"},
                        "values": {"type": "array", "items": {"type": "string"}}
                    }}
                },
                "labels": {"type": "object", "additionalProperties": {"type": "string"},
                    "x-kubernetes-validations": [{"rule": "self.all(x, x != 'karpenter.sh/nodepool')", "message": "label \"karpenter.sh/nodepool\" is restricted"}]},
                "ref": {"type": "object", "properties": {"kind": {"type": "string"}},
                    "x-kubernetes-validations": [{"rule": "self.kind == oldSelf.kind", "message": "kind is immutable", "reason": "FieldValueForbidden"}]},
                "plain": {"type": "string", "x-kubernetes-validations": [{"rule": "self.startsWith('x')", "fieldPath": ".plain"}]},
                "broken": {"type": "string", "x-kubernetes-validations": [{"rule": "self.frobnicate()", "message": "broken rule"}]}
            }
        }}})
    }

    #[test]
    fn cel_rules_report_their_message_at_the_field_path() {
        let schema = pool_schema();
        let valid = json!({"spec": {"requirements": [{"key": "zone", "operator": "In", "values": ["a"]}], "labels": {"team": "x"}}});
        assert!(problems_of(&schema, &valid, None).is_empty());
        assert_eq!(
            one_problem(
                &schema,
                &json!({"spec": {"requirements": [{"key": "zone", "operator": "In", "values": []}]}})
            ),
            "spec.requirements: Invalid value: \"array\": requirements with operator 'In' must have a value defined"
        );
        assert_eq!(
            one_problem(
                &schema,
                &json!({"spec": {"requirements": [{"key": "kubernetes.io/hostname", "operator": "Exists", "values": []}]}})
            ),
            "spec.requirements[0].key: Invalid value: \"string\": label \"kubernetes.io/hostname\" is restricted"
        );
        assert_eq!(
            one_problem(
                &schema,
                &json!({"spec": {"labels": {"karpenter.sh/nodepool": "x"}}})
            ),
            "spec.labels: Invalid value: \"object\": label \"karpenter.sh/nodepool\" is restricted"
        );
        assert_eq!(
            one_problem(&schema, &json!({"spec": {"replicas": 1, "weight": 5}})),
            "spec: Invalid value: \"object\": 'weight' is not supported on static NodePools"
        );
        // No message: the rule itself; a fieldPath moves the error.
        assert_eq!(
            one_problem(&schema, &json!({"spec": {"plain": "y"}})),
            "spec.plain.plain: Invalid value: \"string\": failed rule: self.startsWith('x')"
        );
    }

    #[test]
    fn a_rule_that_fails_to_evaluate_is_a_failed_validation() {
        let schema = pool_schema();
        assert_eq!(
            one_problem(
                &schema,
                &json!({"spec": {"requirements": [{"key": "cpu", "operator": "Gt", "values": ["many"]}]}})
            ),
            "spec.requirements: Invalid value: \"array\": strconv.ParseInt: parsing \"many\": invalid syntax evaluating rule: \
             requirements operator 'Gt' must have a single positive integer value"
        );
        // Two values: `size() == 1` is false, so the conversion is never reached.
        assert_eq!(
            one_problem(
                &schema,
                &json!({"spec": {"requirements": [{"key": "cpu", "operator": "Gt", "values": ["1", "x"]}]}})
            ),
            "spec.requirements: Invalid value: \"array\": requirements operator 'Gt' must have a single positive integer value"
        );
        let broken = one_problem(&schema, &json!({"spec": {"broken": "x"}}));
        assert!(
            broken.starts_with(
                "spec.broken: Invalid value: \"string\": undeclared reference to 'frobnicate'"
            ),
            "{broken}"
        );
        assert!(broken.ends_with("evaluating rule: broken rule"), "{broken}");
    }

    #[test]
    fn transition_rules_run_only_on_update_with_an_old_value() {
        let schema = pool_schema();
        let dynamic = json!({"spec": {"ref": {"kind": "A"}}});
        let static_pool = json!({"spec": {"replicas": 2, "ref": {"kind": "A"}}});
        assert!(
            problems_of(&schema, &static_pool, None).is_empty(),
            "create: transition rules are skipped"
        );
        assert!(problems_of(&schema, &static_pool, Some(&static_pool)).is_empty());
        assert_eq!(
            problems_of(&schema, &static_pool, Some(&dynamic)),
            vec![(
                "spec".to_string(),
                "Invalid value: \"object\": Cannot transition NodePool between static and dynamic"
                    .to_string()
            )]
        );
        let other_kind = json!({"spec": {"ref": {"kind": "B"}}});
        assert_eq!(
            problems_of(&schema, &other_kind, Some(&dynamic)),
            vec![(
                "spec.ref".to_string(),
                "Forbidden: kind is immutable".to_string()
            )]
        );
        // No old value at that path: the transition rule does not run.
        assert!(problems_of(&schema, &other_kind, Some(&json!({"spec": {}}))).is_empty());
    }

    #[test]
    fn unchanged_values_ratchet_on_update() {
        let schema = pool_schema();
        let invalid = json!({"spec": {"weight": 500, "requirements": [{"key": "zone", "operator": "In", "values": []}]}});
        assert_eq!(problems_of(&schema, &invalid, None).len(), 2);
        assert!(
            problems_of(&schema, &invalid, Some(&invalid)).is_empty(),
            "an update leaving invalid values alone is accepted"
        );
        let mut touched = invalid.clone();
        touched["spec"]["weight"] = json!(600);
        let problems = problems_of(&schema, &touched, Some(&invalid));
        assert_eq!(
            problems,
            vec![(
                "spec.weight".to_string(),
                "Invalid value: 600: spec.weight in body should be less than or equal to 100"
                    .to_string()
            )]
        );
    }

    #[test]
    fn blocking_schema_errors_skip_the_rules() {
        let schema = pool_schema();
        let problems = problems_of(
            &schema,
            &json!({"spec": {"mode": "c", "requirements": [{"key": "zone", "operator": "In", "values": []}]}}),
            None,
        );
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert_eq!(problems[0].0, "spec.mode");
        assert_eq!(
            problems[1],
            (
                "<nil>".to_string(),
                "Invalid value: \"null\": some validation rules were not checked because the object was invalid; correct the existing errors \
                 to complete validation"
                    .to_string()
            )
        );
        // A non-blocking problem (a pattern, a minimum) lets the rules run too.
        let problems = problems_of(
            &schema,
            &json!({"spec": {"weight": 500, "requirements": [{"key": "zone", "operator": "In", "values": []}]}}),
            None,
        );
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert_eq!(problems[1].0, "spec.requirements");
        // Without any rule in the schema there is nothing to skip.
        assert_eq!(
            problems_of(&self::schema(), &json!({"spec": {"mode": "c"}}), None).len(),
            2
        );
    }
}
