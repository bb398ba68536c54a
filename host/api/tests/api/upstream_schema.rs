//! Our generated CRD schemas against upstream Karpenter's (tests/fixtures/upstream).

use crate::common;

use common::crd_pairs;
use joinery_api::{property_paths, schema_at};
use serde_json::Value;

/// Every path of a schema, including the root (`""`).
fn all_paths(schema: &Value) -> Vec<String> {
    std::iter::once(String::new())
        .chain(property_paths(schema))
        .collect()
}

fn show(path: &str) -> &str {
    if path.is_empty() { "<root>" } else { path }
}

#[test]
fn every_upstream_property_path_exists() {
    let mut missing = Vec::new();
    let mut checked = 0;
    for pair in crd_pairs() {
        for path in property_paths(pair.upstream_schema()) {
            checked += 1;
            if schema_at(pair.our_schema(), &path).is_none() {
                missing.push(format!("{}: {path}", pair.file));
            }
        }
    }
    assert!(checked >= 130, "suspiciously few upstream paths: {checked}");
    assert!(
        missing.is_empty(),
        "{} upstream property paths missing from our schemas:\n  {}",
        missing.len(),
        missing.join("\n  ")
    );
}

#[test]
fn no_property_paths_beyond_upstream() {
    let mut extra = Vec::new();
    for pair in crd_pairs() {
        for path in property_paths(pair.our_schema()) {
            if schema_at(pair.upstream_schema(), &path).is_none() {
                extra.push(format!("{}: {path}", pair.file));
            }
        }
    }
    assert!(
        extra.is_empty(),
        "property paths in our schemas that upstream does not have:\n  {}",
        extra.join("\n  ")
    );
}

#[test]
fn upstream_defaults_are_equal() {
    let mut problems = Vec::new();
    let mut defaults = 0;
    for pair in crd_pairs() {
        for path in all_paths(pair.upstream_schema()) {
            let upstream = &schema_at(pair.upstream_schema(), &path).expect("own path")["default"];
            let ours = schema_at(pair.our_schema(), &path).map(|s| &s["default"]);
            if !upstream.is_null() {
                defaults += 1;
            }
            if ours != Some(upstream) {
                problems.push(format!(
                    "{}: {}: upstream default {upstream}, ours {}",
                    pair.file,
                    show(&path),
                    ours.map_or("<path missing>".to_owned(), Value::to_string),
                ));
            }
        }
    }
    assert_eq!(
        defaults, 9,
        "upstream has 9 defaults (nodepools 7, nodeclaims 1, capacitybuffers 1)"
    );
    assert!(
        problems.is_empty(),
        "default mismatches:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn upstream_cel_rules_present_at_same_path() {
    let mut problems = Vec::new();
    let mut rules = 0;
    for pair in crd_pairs() {
        for path in all_paths(pair.upstream_schema()) {
            let upstream = schema_at(pair.upstream_schema(), &path).expect("own path");
            let Some(upstream_rules) = upstream["x-kubernetes-validations"].as_array() else {
                continue;
            };
            let ours = schema_at(pair.our_schema(), &path)
                .and_then(|s| s["x-kubernetes-validations"].as_array().cloned())
                .unwrap_or_default();
            for rule in upstream_rules {
                rules += 1;
                let text = &rule["rule"];
                match ours.iter().find(|r| r["rule"] == *text) {
                    None => problems.push(format!(
                        "{}: {}: missing rule {text}",
                        pair.file,
                        show(&path)
                    )),
                    Some(r) if r["message"] != rule["message"] => problems.push(format!(
                        "{}: {}: rule {text} has message {}, upstream {}",
                        pair.file,
                        show(&path),
                        r["message"],
                        rule["message"]
                    )),
                    Some(_) => {}
                }
            }
            if ours.len() != upstream_rules.len() {
                problems.push(format!(
                    "{}: {}: {} rules, upstream {}",
                    pair.file,
                    show(&path),
                    ours.len(),
                    upstream_rules.len()
                ));
            }
        }
        // And no rules where upstream has none.
        for path in all_paths(pair.our_schema()) {
            let ours = schema_at(pair.our_schema(), &path).expect("own path");
            let upstream = schema_at(pair.upstream_schema(), &path);
            if ours.get("x-kubernetes-validations").is_some()
                && upstream
                    .and_then(|u| u.get("x-kubernetes-validations"))
                    .is_none()
            {
                problems.push(format!(
                    "{}: {}: rules where upstream has none",
                    pair.file,
                    show(&path)
                ));
            }
        }
    }
    assert!(rules >= 30, "suspiciously few upstream rules: {rules}");
    assert!(
        problems.is_empty(),
        "CEL rule mismatches:\n  {}",
        problems.join("\n  ")
    );
}

/// Schema keywords (everything but descriptions and sub-schemas) that must match upstream.
const VALIDATION_KEYWORDS: &[&str] = &[
    "type",
    "format",
    "enum",
    "pattern",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "maxProperties",
    "anyOf",
    "default",
    "nullable",
    "x-kubernetes-list-type",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
];

#[test]
fn validation_keywords_match_upstream() {
    let mut problems = Vec::new();
    for pair in crd_pairs() {
        for path in all_paths(pair.upstream_schema()) {
            let upstream = schema_at(pair.upstream_schema(), &path).expect("own path");
            let Some(ours) = schema_at(pair.our_schema(), &path) else {
                continue; // reported by every_upstream_property_path_exists
            };
            for key in VALIDATION_KEYWORDS {
                if upstream.get(key) != ours.get(key) {
                    problems.push(format!(
                        "{}: {}: {key}: upstream {}, ours {}",
                        pair.file,
                        show(&path),
                        upstream
                            .get(key)
                            .map_or("<absent>".into(), Value::to_string),
                        ours.get(key).map_or("<absent>".into(), Value::to_string),
                    ));
                }
            }
            // `required` is a set.
            let set = |v: &Value| {
                let mut names: Vec<String> = v["required"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter_map(|s| s.as_str().map(str::to_owned))
                            .collect()
                    })
                    .unwrap_or_default();
                names.sort();
                names
            };
            if set(upstream) != set(ours) {
                problems.push(format!(
                    "{}: {}: required: upstream {:?}, ours {:?}",
                    pair.file,
                    show(&path),
                    set(upstream),
                    set(ours)
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "keyword mismatches:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn schemas_are_structural() {
    const FORBIDDEN: &[&str] = &[
        "$ref",
        "$schema",
        "definitions",
        "$defs",
        "oneOf",
        "allOf",
        "not",
        "title",
        "nullable",
        "const",
        "uniqueItems",
        "additionalItems",
        "patternProperties",
        "dependencies",
    ];
    let mut problems = Vec::new();
    for pair in crd_pairs() {
        for path in all_paths(pair.our_schema()) {
            let node = schema_at(pair.our_schema(), &path).expect("own path");
            for key in FORBIDDEN {
                if node.get(key).is_some() {
                    problems.push(format!("{}: {}: has {key}", pair.file, show(&path)));
                }
            }
            let int_or_string = node["x-kubernetes-int-or-string"] == Value::Bool(true);
            if node.get("type").is_none() && !int_or_string {
                problems.push(format!("{}: {}: no type", pair.file, show(&path)));
            }
            if int_or_string && node.get("type").is_some() {
                problems.push(format!(
                    "{}: {}: int-or-string with a type",
                    pair.file,
                    show(&path)
                ));
            }
            if let Some(any_of) = node.get("anyOf").and_then(Value::as_array) {
                // Only the int-or-string form is allowed, and it may not carry sub-structure.
                let ok = int_or_string
                    && any_of.iter().all(|s| {
                        s.as_object()
                            .is_some_and(|o| o.len() == 1 && o.contains_key("type"))
                    });
                if !ok {
                    problems.push(format!("{}: {}: unexpected anyOf", pair.file, show(&path)));
                }
            }
        }
    }
    assert!(
        problems.is_empty(),
        "non-structural schema parts:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn crds_yaml_round_trips_to_crds() {
    let yaml = joinery_api::crds_yaml();
    assert!(yaml.starts_with("---\n"));
    let docs: Vec<Value> = serde_norway::Deserializer::from_str(&yaml)
        .map(|doc| {
            let mut v = <Value as serde::Deserialize>::deserialize(doc).expect("valid YAML doc");
            common::normalize_numbers(&mut v);
            v
        })
        .collect();
    let ours: Vec<Value> = joinery_api::crds()
        .iter()
        .map(|crd| {
            let mut v = serde_json::to_value(crd).expect("serializes");
            common::normalize_numbers(&mut v);
            v
        })
        .collect();
    assert_eq!(docs, ours);
    assert!(
        !yaml.contains(": 1.0\n"),
        "integral bounds should print as integers"
    );
    // Every document parses back into a typed CRD.
    for doc in docs {
        let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
            serde_json::from_value(doc).expect("typed CRD");
        assert!(
            ["karpenter.sh", "autoscaling.x-k8s.io"].contains(&crd.spec.group.as_str()),
            "{}",
            crd.spec.group
        );
    }
}
