//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::path::PathBuf;

use serde_json::Value;

/// Path of a file under `tests/fixtures/`.
pub fn fixture_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("fixtures")
        .join(rel)
}

/// Reads a file under `tests/fixtures/`.
pub fn read_fixture(rel: &str) -> String {
    let path = fixture_path(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Parses YAML into a JSON value.
pub fn yaml_value(text: &str) -> Value {
    serde_norway::from_str(text).expect("fixture is valid YAML")
}

/// Rewrites whole-number floats as integers so `50` and `50.0` compare equal.
pub fn normalize_numbers(value: &mut Value) {
    match value {
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().expect("f64");
            if f.fract() == 0.0 && f.abs() < 9.0e15 {
                *value = Value::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(normalize_numbers),
        Value::Object(map) => map.values_mut().for_each(normalize_numbers),
        _ => {}
    }
}

/// One CRD under test: upstream's copy and ours, both as JSON values.
pub struct CrdPair {
    /// File name of the upstream fixture.
    pub file: &'static str,
    /// Upstream's CRD.
    pub upstream: Value,
    /// Our CRD.
    pub ours: Value,
}

impl CrdPair {
    /// `spec.versions[0].schema.openAPIV3Schema` of upstream's CRD.
    pub fn upstream_schema(&self) -> &Value {
        schema_of(&self.upstream)
    }

    /// `spec.versions[0].schema.openAPIV3Schema` of our CRD.
    pub fn our_schema(&self) -> &Value {
        schema_of(&self.ours)
    }
}

/// The (single) version's openAPIV3Schema.
pub fn schema_of(crd: &Value) -> &Value {
    &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
}

/// Upstream's and our CRDs, matched by name.
pub fn crd_pairs() -> Vec<CrdPair> {
    let ours: Vec<Value> = joinery_api::crds()
        .iter()
        .map(|crd| {
            let mut v = serde_json::to_value(crd).expect("CRD serializes");
            normalize_numbers(&mut v);
            v
        })
        .collect();
    [
        "karpenter.sh_nodepools.yaml",
        "karpenter.sh_nodeclaims.yaml",
        "karpenter.sh_nodeoverlays.yaml",
        "autoscaling.x-k8s.io_capacitybuffers.yaml",
    ]
    .into_iter()
    .map(|file| {
        let mut upstream = yaml_value(&read_fixture(&format!("upstream/{file}")));
        normalize_numbers(&mut upstream);
        let name = upstream["metadata"]["name"].clone();
        let ours = ours
            .iter()
            .find(|crd| crd["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("we generate no CRD named {name}"))
            .clone();
        CrdPair {
            file,
            upstream,
            ours,
        }
    })
    .collect()
}

/// A small OpenAPI v3 validator covering the keywords the Karpenter CRDs use (no CEL, no
/// formats). Returns one message per violation. Unknown fields are violations, as with the API
/// server's field validation in strict mode.
pub fn validate(schema: &Value, value: &Value, path: &str, errors: &mut Vec<String>) {
    let at = if path.is_empty() { "<root>" } else { path };
    if schema["x-kubernetes-int-or-string"] == Value::Bool(true) {
        if !(value.is_string() || value.is_i64() || value.is_u64()) {
            errors.push(format!("{at}: expected int-or-string, got {value}"));
        } else if let (Some(p), Some(s)) = (schema["pattern"].as_str(), value.as_str()) {
            check_pattern(p, s, at, errors);
        }
        return;
    }
    match schema["type"].as_str() {
        Some("object") => {
            let Some(obj) = value.as_object() else {
                errors.push(format!("{at}: expected object, got {value}"));
                return;
            };
            if let Some(max) = schema["maxProperties"].as_u64()
                && obj.len() as u64 > max
            {
                errors.push(format!("{at}: more than {max} properties"));
            }
            for req in schema["required"].as_array().into_iter().flatten() {
                let name = req.as_str().expect("required names are strings");
                if !obj.contains_key(name) {
                    errors.push(format!("{at}: missing required {name}"));
                }
            }
            let props = schema["properties"].as_object();
            for (k, v) in obj {
                let child = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                if let Some(sub) = props.and_then(|p| p.get(k)) {
                    if sub["type"] == "object"
                        && sub.get("properties").is_none()
                        && sub.get("additionalProperties").is_none()
                    {
                        continue; // opaque object (e.g. metadata)
                    }
                    validate(sub, v, &child, errors);
                } else if let Some(add) =
                    schema.get("additionalProperties").filter(|a| a.is_object())
                {
                    validate(add, v, &child, errors);
                } else {
                    errors.push(format!("{at}: unknown field {k}"));
                }
            }
        }
        Some("array") => {
            let Some(items) = value.as_array() else {
                errors.push(format!("{at}: expected array, got {value}"));
                return;
            };
            if let Some(max) = schema["maxItems"].as_u64()
                && items.len() as u64 > max
            {
                errors.push(format!("{at}: more than {max} items"));
            }
            if schema["x-kubernetes-list-type"] == "set" {
                for (i, a) in items.iter().enumerate() {
                    if items[..i].contains(a) {
                        errors.push(format!("{at}: duplicate set item {a}"));
                    }
                }
            }
            for (i, item) in items.iter().enumerate() {
                validate(&schema["items"], item, &format!("{path}[{i}]"), errors);
            }
        }
        Some("string") => {
            let Some(s) = value.as_str() else {
                errors.push(format!("{at}: expected string, got {value}"));
                return;
            };
            if let Some(p) = schema["pattern"].as_str() {
                check_pattern(p, s, at, errors);
            }
            if let Some(max) = schema["maxLength"].as_u64()
                && s.chars().count() as u64 > max
            {
                errors.push(format!("{at}: longer than {max}"));
            }
            if let Some(min) = schema["minLength"].as_u64()
                && (s.chars().count() as u64) < min
            {
                errors.push(format!("{at}: shorter than {min}"));
            }
        }
        Some("integer") => {
            let Some(n) = value.as_i64() else {
                errors.push(format!("{at}: expected integer, got {value}"));
                return;
            };
            if let Some(min) = schema["minimum"].as_f64()
                && (n as f64) < min
            {
                errors.push(format!("{at}: below {min}"));
            }
            if let Some(max) = schema["maximum"].as_f64()
                && (n as f64) > max
            {
                errors.push(format!("{at}: above {max}"));
            }
        }
        Some("boolean") => {
            if !value.is_boolean() {
                errors.push(format!("{at}: expected boolean, got {value}"));
            }
        }
        other => errors.push(format!("{at}: schema type {other:?} not handled")),
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(value)
    {
        errors.push(format!("{at}: {value} not in {allowed:?}"));
    }
}

fn check_pattern(pattern: &str, s: &str, at: &str, errors: &mut Vec<String>) {
    let re = regex::Regex::new(pattern).unwrap_or_else(|e| panic!("pattern {pattern}: {e}"));
    if !re.is_match(s) {
        errors.push(format!("{at}: {s:?} does not match {pattern}"));
    }
}
