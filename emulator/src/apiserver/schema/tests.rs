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
