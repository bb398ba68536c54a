//! Requirement algebra against the upstream rules (compatibility, intersection, bounds).

use joinery_core::labels::{
    ARCH_LABEL, CAPACITY_TYPE_LABEL, HOSTNAME_LABEL, INSTANCE_TYPE_LABEL, LabelPolicy,
    NODEPOOL_LABEL, WELL_KNOWN_LABELS, ZONE_LABEL,
};
use joinery_core::requirements::{
    Incompatibility, NO_KEYS, NodeSelectorRequirement, Operator, Requirement, RequirementError,
    Requirements,
};

fn req(key: &str, op: Operator, values: &[&str]) -> Requirement {
    Requirement::new(key, op, values.iter().copied()).unwrap()
}

fn reqs(items: Vec<Requirement>) -> Requirements {
    items.into_iter().collect()
}

/// A spread of requirements on one key, used for exhaustive pairwise checks.
fn zoo(key: &str) -> Vec<Requirement> {
    use Operator::*;
    vec![
        req(key, In, &["1", "5", "10", "x"]),
        req(key, In, &["5"]),
        req(key, In, &["y"]),
        req(key, NotIn, &["5", "x"]),
        req(key, NotIn, &["1"]),
        req(key, Exists, &[]),
        req(key, DoesNotExist, &[]),
        req(key, Gt, &["4"]),
        req(key, Lt, &["5"]),
        req(key, Gte, &["5"]),
        req(key, Lte, &["5"]),
        req(key, Gt, &["10"]),
        req(key, In, &[]),
    ]
}

// ---------------------------------------------------------------------------------------------
// Construction

#[test]
fn in_is_a_finite_set() {
    let r = req("k", Operator::In, &["a", "b"]);
    assert!(r.has("a") && r.has("b") && !r.has("c"));
    assert_eq!(r.operator(), Operator::In);
    assert!(!r.is_complement());
    assert_eq!(r.len(), Some(2));
}

#[test]
fn not_in_is_a_complement_set() {
    let r = req("k", Operator::NotIn, &["a"]);
    assert!(!r.has("a"));
    assert!(r.has("b"));
    assert!(r.is_complement());
    assert_eq!(r.operator(), Operator::NotIn);
    assert_eq!(r.len(), None);
}

#[test]
fn exists_and_does_not_exist() {
    let e = req("k", Operator::Exists, &[]);
    assert!(e.has("anything") && e.has(""));
    assert_eq!(e.operator(), Operator::Exists);
    assert!(!e.is_empty());
    let d = req("k", Operator::DoesNotExist, &[]);
    assert!(!d.has("anything"));
    assert_eq!(d.operator(), Operator::DoesNotExist);
    assert!(d.is_empty());
    // Values given to Exists/DoesNotExist are ignored.
    assert_eq!(req("k", Operator::Exists, &["a"]), e);
}

#[test]
fn gt_becomes_inclusive_lower_bound() {
    let r = req("k", Operator::Gt, &["5"]);
    assert_eq!(r.gte(), Some(6));
    assert_eq!(r.lte(), None);
    assert!(!r.has("5"));
    assert!(r.has("6") && r.has("1000"));
    assert!(!r.has("abc"), "non-integers never satisfy a bound");
    assert!(
        r.has("+7") && r.has("07"),
        "integers are compared numerically"
    );
    assert_eq!(r.operator(), Operator::Exists);
}

#[test]
fn lt_becomes_inclusive_upper_bound() {
    let r = req("k", Operator::Lt, &["5"]);
    assert_eq!(r.lte(), Some(4));
    assert!(r.has("4") && r.has("-3"));
    assert!(!r.has("5"));
}

#[test]
fn gte_and_lte_are_direct() {
    let g = req("k", Operator::Gte, &["5"]);
    assert_eq!(g.gte(), Some(5));
    assert!(g.has("5") && !g.has("4"));
    let l = req("k", Operator::Lte, &["5"]);
    assert_eq!(l.lte(), Some(5));
    assert!(l.has("5") && !l.has("6"));
    assert_eq!(Requirement::at_least("k", 5), g);
    assert_eq!(Requirement::at_most("k", 5), l);
}

#[test]
fn bound_operators_need_one_integer() {
    for (op, values) in [
        (Operator::Gt, vec!["a"]),
        (Operator::Lt, vec![]),
        (Operator::Gte, vec!["1", "2"]),
        (Operator::Lte, vec!["1.5"]),
        (Operator::Gt, vec!["9223372036854775807"]),
        (Operator::Lt, vec!["-9223372036854775808"]),
    ] {
        let err = Requirement::new("k", op, values.clone()).unwrap_err();
        assert!(
            matches!(err, RequirementError::InvalidBound { ref key, operator, .. } if key == "k" && operator == op),
            "{op} {values:?}"
        );
    }
    let msg = Requirement::new("cpu", Operator::Gt, ["many"])
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("\"cpu\"") && msg.contains("Gt") && msg.contains("many"),
        "{msg}"
    );
}

#[test]
fn keys_are_normalized() {
    let r = req("beta.kubernetes.io/arch", Operator::In, &["amd64"]);
    assert_eq!(r.key(), ARCH_LABEL);
    let merged = reqs(vec![
        req(
            "failure-domain.beta.kubernetes.io/zone",
            Operator::In,
            &["a", "b"],
        ),
        req(ZONE_LABEL, Operator::In, &["b", "c"]),
    ]);
    assert_eq!(merged.len(), 1);
    let zone = merged.get(ZONE_LABEL).unwrap();
    assert!(zone.has("b") && !zone.has("a") && !zone.has("c"));
}

#[test]
fn operator_parse_display_and_serde() {
    for op in [
        "In",
        "NotIn",
        "Exists",
        "DoesNotExist",
        "Gt",
        "Lt",
        "Gte",
        "Lte",
    ] {
        let parsed: Operator = op.parse().unwrap();
        assert_eq!(parsed.to_string(), op);
        assert_eq!(serde_json::to_string(&parsed).unwrap(), format!("\"{op}\""));
    }
    assert_eq!(
        "Equals".parse::<Operator>(),
        Err(RequirementError::UnknownOperator("Equals".into()))
    );
    assert!(Operator::Gte.is_bound() && !Operator::In.is_bound());
}

// ---------------------------------------------------------------------------------------------
// Intersection

#[test]
fn in_intersect_in() {
    let r = req("k", Operator::In, &["a", "b", "c"]).intersection(&req(
        "k",
        Operator::In,
        &["b", "c", "d"],
    ));
    assert_eq!(
        r.values().iter().map(String::as_str).collect::<Vec<_>>(),
        ["b", "c"]
    );
    assert!(!r.is_complement());
    let disjoint = req("k", Operator::In, &["a"]).intersection(&req("k", Operator::In, &["b"]));
    assert!(disjoint.is_empty());
    assert_eq!(disjoint.operator(), Operator::DoesNotExist);
}

#[test]
fn in_intersect_not_in_both_orders() {
    let a = req("k", Operator::In, &["a", "b"]);
    let n = req("k", Operator::NotIn, &["b", "z"]);
    for r in [a.intersection(&n), n.intersection(&a)] {
        assert_eq!(r.operator(), Operator::In);
        assert!(r.has("a") && !r.has("b") && !r.has("z"));
        assert_eq!(r.len(), Some(1));
    }
}

#[test]
fn not_in_intersect_not_in_unions_exclusions() {
    let r = req("k", Operator::NotIn, &["a"]).intersection(&req("k", Operator::NotIn, &["b"]));
    assert!(r.is_complement());
    assert!(!r.has("a") && !r.has("b") && r.has("c"));
    assert_eq!(r.operator(), Operator::NotIn);
    assert_eq!(r.values().len(), 2);
}

#[test]
fn exists_intersect_does_not_exist_is_empty() {
    let e = req("k", Operator::Exists, &[]);
    let d = req("k", Operator::DoesNotExist, &[]);
    for r in [e.intersection(&d), d.intersection(&e)] {
        assert!(r.is_empty());
        assert_eq!(r.operator(), Operator::DoesNotExist);
    }
    assert!(!e.overlaps(&d) && !d.overlaps(&e));
}

#[test]
fn exists_is_the_identity() {
    let e = req("k", Operator::Exists, &[]);
    for r in zoo("k") {
        assert_eq!(e.intersection(&r), r.clone(), "Exists ∩ {r}");
    }
}

#[test]
fn gt_lt_window() {
    let r = req("k", Operator::Gt, &["2"]).intersection(&req("k", Operator::Lt, &["6"]));
    assert_eq!((r.gte(), r.lte()), (Some(3), Some(5)));
    assert!(r.is_complement());
    assert!(!r.has("2") && r.has("3") && r.has("5") && !r.has("6"));
    assert!(!r.is_empty());
}

#[test]
fn crossing_bounds_are_empty() {
    let r = req("k", Operator::Gt, &["5"]).intersection(&req("k", Operator::Lt, &["3"]));
    assert!(r.is_empty());
    assert_eq!(r.operator(), Operator::DoesNotExist);
    assert_eq!((r.gte(), r.lte()), (None, None));
    // Gt 4 (≥5) and Lt 5 (≤4) cross by one.
    assert!(
        req("k", Operator::Gt, &["4"])
            .intersection(&req("k", Operator::Lt, &["5"]))
            .is_empty()
    );
    assert!(!req("k", Operator::Gt, &["4"]).overlaps(&req("k", Operator::Lt, &["5"])));
    // Gte 5 and Lte 5 leave exactly 5.
    let five = req("k", Operator::Gte, &["5"]).intersection(&req("k", Operator::Lte, &["5"]));
    assert!(!five.is_empty());
    assert!(five.has("5") && !five.has("4") && !five.has("6"));
    assert!(
        req("k", Operator::Gte, &["5"])
            .intersection(&req("k", Operator::Lte, &["4"]))
            .is_empty()
    );
}

#[test]
fn tighter_bounds_win() {
    let r = req("k", Operator::Gt, &["2"])
        .intersection(&req("k", Operator::Gte, &["5"]))
        .intersection(&req("k", Operator::Lt, &["100"]))
        .intersection(&req("k", Operator::Lte, &["50"]));
    assert_eq!((r.gte(), r.lte()), (Some(5), Some(50)));
}

#[test]
fn bounds_filter_concrete_sets_and_are_dropped() {
    let values = req("k", Operator::In, &["1", "5", "10", "abc"]);
    for r in [
        values.intersection(&req("k", Operator::Gt, &["3"])),
        req("k", Operator::Gt, &["3"]).intersection(&values),
    ] {
        assert!(!r.is_complement());
        assert_eq!(
            r.values().iter().map(String::as_str).collect::<Vec<_>>(),
            ["10", "5"]
        );
        assert_eq!(
            (r.gte(), r.lte()),
            (None, None),
            "concrete sets carry no bounds"
        );
    }
    let none_left = values.intersection(&req("k", Operator::Gt, &["20"]));
    assert!(none_left.is_empty());
}

#[test]
fn bounds_prune_exclusions_of_complement_sets() {
    let r =
        req("k", Operator::NotIn, &["abc", "1", "7"]).intersection(&req("k", Operator::Gt, &["3"]));
    assert!(r.is_complement());
    assert_eq!(r.gte(), Some(4));
    assert_eq!(
        r.values().iter().map(String::as_str).collect::<Vec<_>>(),
        ["7"],
        "out-of-range exclusions are implied by the bound"
    );
    assert!(r.has("4") && !r.has("7") && !r.has("1"));
    assert_eq!(r.operator(), Operator::NotIn);
}

#[test]
fn min_values_take_the_maximum() {
    let a = req("k", Operator::In, &["a", "b", "c"]).with_min_values(Some(2));
    let b = req("k", Operator::Exists, &[]).with_min_values(Some(3));
    let none = req("k", Operator::Exists, &[]);
    assert_eq!(a.intersection(&b).min_values(), Some(3));
    assert_eq!(b.intersection(&a).min_values(), Some(3));
    assert_eq!(a.intersection(&none).min_values(), Some(2));
    assert_eq!(none.intersection(&a).min_values(), Some(2));
    assert_eq!(none.intersection(&none).min_values(), None);
    // minValues survives even an empty result.
    let crossed = req("k", Operator::Gt, &["5"])
        .with_min_values(Some(4))
        .intersection(&req("k", Operator::Lt, &["1"]));
    assert_eq!(crossed.min_values(), Some(4));
}

#[test]
fn overlaps_agrees_with_intersection() {
    let all = zoo("k");
    for a in &all {
        for b in &all {
            assert_eq!(a.overlaps(b), !a.intersection(b).is_empty(), "{a} ∩ {b}");
            assert_eq!(a.overlaps(b), b.overlaps(a), "symmetry {a} / {b}");
        }
    }
}

#[test]
fn intersection_admits_exactly_what_both_admit() {
    let probes = [
        "", "x", "y", "0", "1", "4", "5", "6", "10", "11", "-1", "05",
    ];
    for a in &zoo("k") {
        for b in &zoo("k") {
            let r = a.intersection(b);
            for p in probes {
                assert_eq!(r.has(p), a.has(p) && b.has(p), "{a} ∩ {b} on {p:?}");
            }
        }
    }
}

#[test]
fn any_is_deterministic_and_admitted() {
    assert_eq!(
        req("k", Operator::In, &["b", "a"]).any().as_deref(),
        Some("a")
    );
    assert_eq!(req("k", Operator::Exists, &[]).any().as_deref(), Some("0"));
    assert_eq!(
        req("k", Operator::NotIn, &["0", "1"]).any().as_deref(),
        Some("2")
    );
    assert_eq!(
        req("k", Operator::Gte, &["10"]).any().as_deref(),
        Some("10")
    );
    assert_eq!(req("k", Operator::Lt, &["-4"]).any().as_deref(), Some("-5"));
    let r = req("k", Operator::Gte, &["3"])
        .intersection(&req("k", Operator::Lte, &["4"]))
        .intersection(&req("k", Operator::NotIn, &["4"]));
    assert_eq!(r.any().as_deref(), Some("3"));
    assert_eq!(req("k", Operator::DoesNotExist, &[]).any(), None);
    for r in zoo("k") {
        if let Some(v) = r.any() {
            assert!(r.has(&v), "{r} any() = {v}");
        }
    }
}

#[test]
fn display_lists_operator_values_bounds_and_min_values() {
    assert_eq!(
        req("k", Operator::In, &["b", "a"]).to_string(),
        "k In [a, b]"
    );
    assert_eq!(req("k", Operator::Exists, &[]).to_string(), "k Exists");
    assert_eq!(req("k", Operator::Gt, &["3"]).to_string(), "k Exists >= 4");
    assert_eq!(
        req("k", Operator::NotIn, &["x"])
            .with_min_values(Some(2))
            .to_string(),
        "k NotIn [x] minValues 2"
    );
    let many: Vec<String> = (0..8).map(|i| format!("v{i}")).collect();
    let s = Requirement::in_values("k", many).to_string();
    assert_eq!(s, "k In [v0, v1, v2, v3, v4 and 3 others]");
}

// ---------------------------------------------------------------------------------------------
// Wire form

#[test]
fn node_selector_round_trip() {
    let mut samples = zoo("k");
    samples.push(
        req("k", Operator::NotIn, &["9", "x"])
            .intersection(&req("k", Operator::Gt, &["3"]))
            .intersection(&req("k", Operator::Lte, &["20"])),
    );
    samples.push(req("k", Operator::In, &["a", "b"]).with_min_values(Some(2)));
    samples.push(req("k", Operator::Gte, &["2"]).with_min_values(Some(1)));
    for r in samples {
        let wire = r.to_node_selector();
        let back = Requirements::from_node_selector(&wire).unwrap();
        assert_eq!(back.get("k"), Some(&r), "{r} -> {wire:?}");
    }
}

#[test]
fn node_selector_shapes() {
    let r = req("k", Operator::Gt, &["3"]).intersection(&req("k", Operator::NotIn, &["7"]));
    let wire = r.to_node_selector();
    assert_eq!(wire.len(), 2);
    assert_eq!(
        wire[0],
        NodeSelectorRequirement::new("k", Operator::Gte, ["4"])
    );
    assert_eq!(
        wire[1],
        NodeSelectorRequirement::new("k", Operator::NotIn, ["7"])
    );
    let dne = req("k", Operator::In, &[]).to_node_selector();
    assert_eq!(
        dne,
        vec![NodeSelectorRequirement::new(
            "k",
            Operator::DoesNotExist,
            Vec::<String>::new()
        )]
    );
}

#[test]
fn node_selector_serde_uses_min_values_camel_case() {
    let json = r#"[{"key":"node.kubernetes.io/instance-type","operator":"In","values":["a","b"],"minValues":2},{"key":"zz.example.com/k","operator":"Exists"}]"#;
    let wire: Vec<NodeSelectorRequirement> = serde_json::from_str(json).unwrap();
    assert_eq!(wire[0].min_values, Some(2));
    assert!(wire[1].values.is_empty());
    let r = Requirements::from_node_selector(&wire).unwrap();
    assert_eq!(r.get(INSTANCE_TYPE_LABEL).unwrap().min_values(), Some(2));
    assert_eq!(serde_json::to_string(&r.to_node_selector()).unwrap(), json);
}

#[test]
fn from_node_selector_intersects_repeated_keys_and_rejects_bad_bounds() {
    let wire = vec![
        NodeSelectorRequirement::new("k", Operator::Gt, ["1"]),
        NodeSelectorRequirement::new("k", Operator::Lt, ["4"]),
    ];
    let r = Requirements::from_node_selector(&wire).unwrap();
    let k = r.get("k").unwrap();
    assert!(k.has("2") && k.has("3") && !k.has("4") && !k.has("1"));
    let bad = vec![NodeSelectorRequirement::new("k", Operator::Gt, ["x"])];
    assert!(Requirements::from_node_selector(&bad).is_err());
}

// ---------------------------------------------------------------------------------------------
// Requirements collection

#[test]
fn add_intersects_and_keeps_keys_sorted() {
    let mut r = Requirements::new();
    r.add(req("z", Operator::In, &["1", "2"]));
    r.add(req("a", Operator::Exists, &[]));
    r.add(req("z", Operator::NotIn, &["1"]));
    assert_eq!(r.keys().collect::<Vec<_>>(), ["a", "z"]);
    assert_eq!(
        r.get("z").unwrap().values().iter().collect::<Vec<_>>(),
        ["2"]
    );
    assert!(r.has("a") && !r.has("b"));
    assert_eq!(r.get_or_exists("b").operator(), Operator::Exists);
    assert!(r.remove("a").is_some());
    assert_eq!(r.len(), 1);
    assert!(!r.is_empty());
}

#[test]
fn intersection_of_collections() {
    let a = reqs(vec![
        req("x", Operator::In, &["1", "2"]),
        req("y", Operator::Exists, &[]),
    ]);
    let b = reqs(vec![
        req("x", Operator::In, &["2", "3"]),
        req("z", Operator::DoesNotExist, &[]),
    ]);
    let r = a.intersection(&b);
    assert_eq!(r.keys().collect::<Vec<_>>(), ["x", "y", "z"]);
    assert_eq!(r.get("x").unwrap().len(), Some(1));
    assert!(r.get("z").unwrap().is_empty());
}

#[test]
fn well_known_keys_may_be_undefined() {
    let pool = reqs(vec![req(NODEPOOL_LABEL, Operator::In, &["default"])]);
    let pod = reqs(vec![
        req(ZONE_LABEL, Operator::In, &["a"]),
        req(ARCH_LABEL, Operator::In, &["arm64"]),
    ]);
    assert!(pool.compatible(&pod, &WELL_KNOWN_LABELS).is_ok());
    assert!(pool.is_compatible(&pod, &WELL_KNOWN_LABELS));
    // Strictly (no undefined keys allowed) the same pod is rejected.
    let err = pool.compatible(&pod, &NO_KEYS).unwrap_err();
    assert_eq!(err.keys(), [ARCH_LABEL, ZONE_LABEL]);
    assert!(!pool.is_compatible(&pod, &NO_KEYS));
}

#[test]
fn custom_keys_must_be_declared() {
    let pool = reqs(vec![req(NODEPOOL_LABEL, Operator::In, &["default"])]);
    let pod = reqs(vec![req("team", Operator::In, &["red"])]);
    let err = pool.compatible(&pod, &WELL_KNOWN_LABELS).unwrap_err();
    assert_eq!(
        err.0,
        vec![Incompatibility::UndefinedKey {
            key: "team".into(),
            hint: None
        }]
    );
    assert_eq!(err.to_string(), "label \"team\" does not have known values");
    // Declared through a template label: compatible.
    let labelled = pool.intersection(&Requirements::from_labels([("team", "red")]));
    assert!(labelled.compatible(&pod, &WELL_KNOWN_LABELS).is_ok());
    // Declared with other values: the key is known but does not intersect.
    let blue = pool.intersection(&Requirements::from_labels([("team", "blue")]));
    let err = blue.compatible(&pod, &WELL_KNOWN_LABELS).unwrap_err();
    assert_eq!(
        err.to_string(),
        "key team, team In [red] not in team In [blue]"
    );
}

#[test]
fn undefined_keys_pass_with_not_in_and_does_not_exist() {
    let pool = Requirements::new();
    for pod_req in [
        req("team", Operator::NotIn, &["red"]),
        req("team", Operator::DoesNotExist, &[]),
    ] {
        let pod = reqs(vec![pod_req.clone()]);
        assert!(pool.compatible(&pod, &NO_KEYS).is_ok(), "{pod_req}");
    }
    for pod_req in [
        req("team", Operator::Exists, &[]),
        req("team", Operator::In, &["red"]),
        req("gen", Operator::Gt, &["3"]),
        req("gen", Operator::Gte, &["3"]).intersection(&req("gen", Operator::NotIn, &["5"])),
    ] {
        let pod = reqs(vec![pod_req.clone()]);
        assert!(pool.compatible(&pod, &NO_KEYS).is_err(), "{pod_req}");
    }
}

#[test]
fn does_not_exist_on_nodepool_label_is_compatible_only_when_undefined() {
    // Pods that refuse Karpenter nodes: the template always defines the nodepool key.
    let template = reqs(vec![req(NODEPOOL_LABEL, Operator::In, &["default"])]);
    let pod = reqs(vec![req(NODEPOOL_LABEL, Operator::DoesNotExist, &[])]);
    assert!(template.compatible(&pod, &WELL_KNOWN_LABELS).is_err());
    assert!(Requirements::new().compatible(&pod, &NO_KEYS).is_ok());
}

#[test]
fn intersects_exempts_only_both_sides_absent_accepting() {
    let cases = [
        // (existing, incoming, intersects?)
        (
            req("k", Operator::NotIn, &["a"]),
            req("k", Operator::DoesNotExist, &[]),
            true,
        ),
        (
            req("k", Operator::DoesNotExist, &[]),
            req("k", Operator::NotIn, &["a"]),
            true,
        ),
        (
            req("k", Operator::DoesNotExist, &[]),
            req("k", Operator::DoesNotExist, &[]),
            true,
        ),
        (
            req("k", Operator::In, &["a"]),
            req("k", Operator::NotIn, &["a"]),
            false,
        ),
        (
            req("k", Operator::NotIn, &["a"]),
            req("k", Operator::In, &["a"]),
            false,
        ),
        (
            req("k", Operator::Exists, &[]),
            req("k", Operator::DoesNotExist, &[]),
            false,
        ),
        (
            req("k", Operator::DoesNotExist, &[]),
            req("k", Operator::Exists, &[]),
            false,
        ),
        (
            req("k", Operator::DoesNotExist, &[]),
            req("k", Operator::In, &["a"]),
            false,
        ),
        (
            req("k", Operator::In, &["1"]),
            req("k", Operator::Gt, &["1"]),
            false,
        ),
        (
            req("k", Operator::In, &["2"]),
            req("k", Operator::Gt, &["1"]),
            true,
        ),
        (
            req("k", Operator::Gt, &["5"]),
            req("k", Operator::Lt, &["3"]),
            false,
        ),
        (
            req("k", Operator::NotIn, &["a"]),
            req("k", Operator::NotIn, &["b"]),
            true,
        ),
    ];
    for (existing, incoming, expected) in cases {
        let a = reqs(vec![existing.clone()]);
        let b = reqs(vec![incoming.clone()]);
        assert_eq!(
            a.intersects(&b).is_ok(),
            expected,
            "{existing} vs {incoming}"
        );
        assert_eq!(
            a.is_intersecting(&b),
            expected,
            "{existing} vs {incoming} (bool)"
        );
    }
}

#[test]
fn intersects_ignores_keys_defined_on_one_side() {
    let a = reqs(vec![
        req("x", Operator::In, &["1"]),
        req("only-a", Operator::DoesNotExist, &[]),
    ]);
    let b = reqs(vec![
        req("x", Operator::In, &["1", "2"]),
        req("only-b", Operator::In, &["q"]),
    ]);
    assert!(a.intersects(&b).is_ok());
    assert!(b.intersects(&a).is_ok());
}

#[test]
fn instance_type_does_not_exist_blocks_pods_requiring_the_key() {
    let instance = reqs(vec![
        req(INSTANCE_TYPE_LABEL, Operator::In, &["m5.large"]),
        req("example.com/gpu", Operator::DoesNotExist, &[]),
    ]);
    let pod = reqs(vec![req("example.com/gpu", Operator::Exists, &[])]);
    assert!(instance.compatible(&pod, &WELL_KNOWN_LABELS).is_err());
    let pod_without = reqs(vec![req("example.com/gpu", Operator::NotIn, &["a100"])]);
    assert!(
        instance
            .compatible(&pod_without, &WELL_KNOWN_LABELS)
            .is_ok()
    );
}

#[test]
fn compatible_reports_every_reason() {
    let pool = reqs(vec![
        req(ZONE_LABEL, Operator::In, &["a"]),
        req(ARCH_LABEL, Operator::In, &["amd64"]),
    ]);
    let pod = reqs(vec![
        req(ZONE_LABEL, Operator::In, &["b"]),
        req(ARCH_LABEL, Operator::In, &["arm64"]),
        req("team", Operator::In, &["red"]),
    ]);
    let err = pool.compatible(&pod, &WELL_KNOWN_LABELS).unwrap_err();
    assert_eq!(err.0.len(), 3);
    assert_eq!(err.keys(), ["team", ARCH_LABEL, ZONE_LABEL]);
    let text = err.to_string();
    assert!(
        text.contains("label \"team\" does not have known values"),
        "{text}"
    );
    assert!(text.contains("key topology.kubernetes.io/zone, topology.kubernetes.io/zone In [b] not in topology.kubernetes.io/zone In [a]"), "{text}");
}

#[test]
fn typo_hints_name_a_similar_key() {
    let pool = reqs(vec![req("example.com/team", Operator::In, &["red"])]);
    let pod = reqs(vec![req("kubernetes.io/archh", Operator::In, &["arm64"])]);
    let err = pool.compatible(&pod, &WELL_KNOWN_LABELS).unwrap_err();
    assert_eq!(
        err.0[0],
        Incompatibility::UndefinedKey {
            key: "kubernetes.io/archh".into(),
            hint: Some(ARCH_LABEL.into())
        }
    );
    assert!(
        err.to_string()
            .ends_with("(typo of \"kubernetes.io/arch\"?)")
    );
    let pod = reqs(vec![req("example.com/teams", Operator::In, &["red"])]);
    let err = pool.compatible(&pod, &WELL_KNOWN_LABELS).unwrap_err();
    assert!(
        matches!(&err.0[0], Incompatibility::UndefinedKey { hint: Some(h), .. } if h == "example.com/team")
    );
    let pod = reqs(vec![req("totally-different", Operator::In, &["x"])]);
    let err = pool.compatible(&pod, &WELL_KNOWN_LABELS).unwrap_err();
    assert!(matches!(
        &err.0[0],
        Incompatibility::UndefinedKey { hint: None, .. }
    ));
}

#[test]
fn boolean_and_detailed_checks_agree() {
    let keysets: [&[&str]; 2] = [&NO_KEYS, &WELL_KNOWN_LABELS];
    let mut sides: Vec<Requirements> = vec![Requirements::new()];
    for a in zoo("k").into_iter().step_by(2) {
        sides.push(reqs(vec![a.clone()]));
        sides.push(reqs(vec![a, req(ZONE_LABEL, Operator::In, &["a"])]));
    }
    for a in &sides {
        for b in &sides {
            for keys in keysets {
                assert_eq!(
                    a.is_compatible(b, keys),
                    a.compatible(b, keys).is_ok(),
                    "{a} / {b}"
                );
            }
            assert_eq!(a.is_intersecting(b), a.intersects(b).is_ok());
        }
    }
}

#[test]
fn label_policy_extends_allowed_undefined_keys() {
    let policy = LabelPolicy::default().with_well_known("karpenter.kwok.sh/instance-size");
    let pod = reqs(vec![req(
        "karpenter.kwok.sh/instance-size",
        Operator::In,
        &["large"],
    )]);
    assert!(Requirements::new().is_compatible(&pod, &policy));
    assert!(!Requirements::new().is_compatible(&pod, &WELL_KNOWN_LABELS));
}

#[test]
fn every_satisfiable_unrestricted_key_becomes_a_label() {
    let r = reqs(vec![
        req(NODEPOOL_LABEL, Operator::In, &["default"]),
        req(ZONE_LABEL, Operator::In, &["a", "b"]),
        req("team", Operator::In, &["red"]),
        req("gen", Operator::Gt, &["3"]),
        req("exclude", Operator::NotIn, &["x"]),
        req(HOSTNAME_LABEL, Operator::In, &["placeholder"]),
        req("karpenter.sh/registered", Operator::In, &["true"]),
        req(CAPACITY_TYPE_LABEL, Operator::In, &["spot"]),
    ]);
    let labels = r.labels();
    assert_eq!(
        labels.into_iter().collect::<Vec<_>>(),
        vec![
            ("exclude".to_owned(), "0".to_owned()),
            ("gen".to_owned(), "4".to_owned()),
            (CAPACITY_TYPE_LABEL.to_owned(), "spot".to_owned()),
            (NODEPOOL_LABEL.to_owned(), "default".to_owned()),
            ("team".to_owned(), "red".to_owned()),
            (ZONE_LABEL.to_owned(), "a".to_owned()),
        ]
    );
}

#[test]
fn requirements_display_and_wire_order() {
    let r = reqs(vec![
        req("b", Operator::Exists, &[]),
        req("a", Operator::In, &["1"]),
    ]);
    assert_eq!(r.to_string(), "a In [1], b Exists");
    let wire = r.to_node_selector();
    assert_eq!(
        wire.iter().map(|w| w.key.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert!(!r.has_min_values());
    let mut m = r.clone();
    m.add(req("a", Operator::In, &["1"]).with_min_values(Some(1)));
    assert!(m.has_min_values());
}
