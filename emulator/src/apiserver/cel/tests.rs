//! Tests of the CEL interpreter, through its public API and the tokenizer.

use serde_json::{Value, json};

use super::time::{format_duration, format_timestamp};
use super::value::describe_key;
use super::*;

/// Evaluates `source` with `self` bound to `value`.
fn eval_with(source: &str, value: &Value) -> Result<Value, CelError> {
    let program = Program::parse(source)?;
    program
        .evaluate(&[("self", Val::from_json(value))])
        .map(|v| to_json(&v))
}

fn eval(source: &str) -> Result<Value, CelError> {
    eval_with(source, &Value::Null)
}

fn to_json(value: &Val<'_>) -> Value {
    match value {
        Val::Null => Value::Null,
        Val::Bool(b) => json!(b),
        Val::Int(i) => json!(i),
        Val::Uint(u) => json!(u),
        Val::Double(d) => json!(d),
        Val::String(s) => json!(s),
        Val::Duration(d) => json!(format_duration(*d)),
        Val::Timestamp(t) => json!(format_timestamp(*t)),
        Val::Type(t) => json!(format!("type:{t}")),
        Val::List(items) => Value::Array(items.iter().map(to_json).collect()),
        Val::Map(entries) => Value::Object(
            entries
                .iter()
                .map(|(k, v)| (describe_key(k), to_json(v)))
                .collect(),
        ),
        Val::Json(v) => (*v).clone(),
    }
}

fn truthy(source: &str, value: &Value) -> bool {
    match eval_with(source, value) {
        Ok(Value::Bool(b)) => b,
        other => panic!("{source}: expected a bool, got {other:?}"),
    }
}

fn syntax_error(source: &str) -> String {
    match Program::parse(source) {
        Err(e @ CelError::Syntax { .. }) => e.to_string(),
        other => panic!("{source}: expected a syntax error, got {other:?}"),
    }
}

#[test]
fn tokenizer_reads_literals_operators_and_strings() {
    let tokens: Vec<Token> = tokenize(r#"a.b >= 0x1F && 'x\n' != "y" || 3u < 2.5e1 // comment"#)
        .unwrap()
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    assert_eq!(
        tokens,
        vec![
            Token::Ident("a".into()),
            Token::Punct("."),
            Token::Ident("b".into()),
            Token::Punct(">="),
            Token::Int(31),
            Token::Punct("&&"),
            Token::Str("x\n".into()),
            Token::Punct("!="),
            Token::Str("y".into()),
            Token::Punct("||"),
            Token::Uint(3),
            Token::Punct("<"),
            Token::Double(25.0),
            Token::End,
        ]
    );
    assert_eq!(
        eval(r"r'a\nb'").unwrap(),
        json!("a\\nb"),
        "raw strings keep backslashes"
    );
    assert_eq!(
        eval(r#"'''it's "quoted"'''"#).unwrap(),
        json!("it's \"quoted\"")
    );
    assert_eq!(eval(r"'\x41\u00e9\101'").unwrap(), json!("Aé\u{41}"));
    assert_eq!(eval(".5 + 1.0").unwrap(), json!(1.5));
}

#[test]
fn parser_builds_the_tree_with_cel_precedence() {
    let program = Program::parse("a || b && !c == d ? e.f[0] : g(h, 1 + 2 * 3)").unwrap();
    let ident = |n: &str| Box::new(Expr::Ident(n.into()));
    let int = |i: i64| Expr::Literal(Literal::Int(i));
    assert_eq!(
        program.expr(),
        &Expr::Conditional(
            Box::new(Expr::Or(
                ident("a"),
                Box::new(Expr::And(
                    ident("b"),
                    Box::new(Expr::Binary(
                        BinaryOp::Equal,
                        Box::new(Expr::Unary(UnaryOp::Not, ident("c"))),
                        ident("d")
                    ))
                ))
            )),
            Box::new(Expr::Index(
                Box::new(Expr::Select(ident("e"), "f".into())),
                Box::new(int(0))
            )),
            Box::new(Expr::Call {
                target: None,
                function: "g".into(),
                args: vec![
                    Expr::Ident("h".into()),
                    Expr::Binary(
                        BinaryOp::Add,
                        Box::new(int(1)),
                        Box::new(Expr::Binary(
                            BinaryOp::Multiply,
                            Box::new(int(2)),
                            Box::new(int(3))
                        ))
                    ),
                ],
            }),
        )
    );
}

#[test]
fn parser_expands_macros() {
    let program = Program::parse("self.all(x, has(x.minValues))").unwrap();
    assert_eq!(
        program.expr(),
        &Expr::Comprehension {
            kind: Macro::All,
            range: Box::new(Expr::Ident("self".into())),
            variable: "x".into(),
            filter: None,
            body: Box::new(Expr::Has(
                Box::new(Expr::Ident("x".into())),
                "minValues".into()
            )),
        }
    );
    assert!(
        Program::parse("has(self.replicas) == has(oldSelf.replicas)")
            .unwrap()
            .references("oldSelf")
    );
    assert!(
        !Program::parse("self.all(x, x != 'a')")
            .unwrap()
            .references("oldSelf")
    );
}

#[test]
fn syntax_errors_are_reported_with_their_column() {
    assert_eq!(
        syntax_error("self =="),
        "syntax error at column 8: unexpected end of expression"
    );
    assert!(syntax_error("self = 1").contains("unexpected character '='"));
    assert!(syntax_error("'unterminated").contains("unterminated string literal"));
    assert!(syntax_error("has(self)").contains("invalid argument to has() macro"));
    assert!(syntax_error("self.all(1, true)").contains("must be a variable name"));
    assert!(syntax_error("self.all(x)").contains("takes 2 arguments"));
    assert!(syntax_error("(1 + 2").contains("expected ')'"));
    assert!(syntax_error("1 2").contains("unexpected '2'"));
    assert!(syntax_error("self.?x").contains("expected a field or method name"));
    assert!(syntax_error("b'bytes'").contains("bytes literals are not supported"));
    assert!(syntax_error("9223372036854775808").contains("out of range"));
    assert!(syntax_error("if").contains("reserved identifier"));
    assert!(syntax_error(r"'\q'").contains("invalid escape sequence"));
    assert!(
        syntax_error(&format!("{}1{}", "(".repeat(500), ")".repeat(500)))
            .contains("nests more than")
    );
    assert!(syntax_error(&vec!["1"; 2000].join(" + ")).contains("nests more than"));
    assert_eq!(eval("-9223372036854775808").unwrap(), json!(i64::MIN));
}

#[test]
fn literals_arithmetic_and_comparisons() {
    assert_eq!(eval("1 + 2 * 3 - 4 / 2 % 3").unwrap(), json!(5));
    assert_eq!(eval("7u / 2u").unwrap(), json!(3));
    assert_eq!(eval("1.5 * 2.0").unwrap(), json!(3.0));
    assert_eq!(eval("'ab' + \"cd\"").unwrap(), json!("abcd"));
    assert_eq!(eval("[1, 2] + [3]").unwrap(), json!([1, 2, 3]));
    assert_eq!(
        eval("{'a': 1, 'b': [true, null]}").unwrap(),
        json!({"a": 1, "b": [true, null]})
    );
    assert_eq!(eval("-(2 - 5)").unwrap(), json!(3));
    for truth in [
        "1 < 2",
        "2 <= 2",
        "'abc' < 'abd'",
        "false < true",
        "3 > 2.5",
        "2 == 2.0",
        "1u == 1",
        "2.5 >= 2",
        "1 != 'a'",
        "[1, 'a'] == [1.0, 'a']",
        "{'a': 1} == {'a': 1u}",
    ] {
        assert_eq!(eval(truth).unwrap(), json!(true), "{truth}");
    }
    for falsehood in [
        "2 < 1",
        "1 == 'a'",
        "null == 0",
        "[1] == [1, 2]",
        "{'a': 1} == {'b': 1}",
    ] {
        assert_eq!(eval(falsehood).unwrap(), json!(false), "{falsehood}");
    }
}

#[test]
fn arithmetic_and_comparison_errors() {
    assert_eq!(
        eval("1 / 0").unwrap_err(),
        CelError::Eval("division by zero".into())
    );
    assert_eq!(
        eval("1 % 0").unwrap_err(),
        CelError::Eval("modulus by zero".into())
    );
    assert_eq!(
        eval("9223372036854775807 + 1").unwrap_err(),
        CelError::Eval("integer overflow".into())
    );
    assert!(
        matches!(eval("1 + 1.0"), Err(CelError::NoSuchOverload(_))),
        "CEL does not mix int and double in arithmetic"
    );
    assert!(matches!(eval("1 < 'a'"), Err(CelError::NoSuchOverload(_))));
    assert!(matches!(eval("!1"), Err(CelError::NoSuchOverload(_))));
    assert!(matches!(
        eval("1 ? 2 : 3"),
        Err(CelError::NoSuchOverload(_))
    ));
}

#[test]
fn field_selection_has_and_indexing() {
    let object = json!({"spec": {"replicas": 2, "limits": {"nodes": "3"}, "list": ["a", "b"], "ephemeral-storage": "1Gi"}});
    assert_eq!(eval_with("self.spec.replicas", &object).unwrap(), json!(2));
    assert_eq!(eval_with("self.spec.list[1]", &object).unwrap(), json!("b"));
    assert_eq!(
        eval_with("self.spec['limits']['nodes']", &object).unwrap(),
        json!("3")
    );
    assert_eq!(
        eval_with("self.spec.ephemeral__dash__storage", &object).unwrap(),
        json!("1Gi")
    );
    assert!(truthy("has(self.spec.replicas)", &object));
    assert!(!truthy("has(self.spec.weight)", &object));
    assert!(truthy(
        "has(self.spec.limits.nodes) && !has(self.spec.limits.cpu)",
        &object
    ));
    assert_eq!(
        eval_with("self.spec.weight", &object).unwrap_err(),
        CelError::NoSuchKey("weight".into())
    );
    assert_eq!(
        eval_with("self.spec.list[2]", &object).unwrap_err(),
        CelError::IndexOutOfBounds(2)
    );
    assert_eq!(
        eval_with("self.spec.limits['cpu']", &object).unwrap_err(),
        CelError::NoSuchKey("cpu".into())
    );
    assert!(matches!(
        eval_with("has(self.spec.replicas.x)", &object),
        Err(CelError::NoSuchOverload(_))
    ));
    assert_eq!(
        eval_with("other", &object).unwrap_err(),
        CelError::UndeclaredReference("other".into())
    );
}

#[test]
fn in_operator_on_lists_and_maps() {
    assert!(truthy("self in ['a', 'b']", &json!("b")));
    assert!(!truthy("self in ['a', 'b']", &json!("c")));
    assert!(truthy("'nodes' in self", &json!({"nodes": "1"})));
    assert!(!truthy("'cpu' in self", &json!({"nodes": "1"})));
    assert!(truthy("2 in [1.0, 2.0]", &Value::Null));
    assert!(matches!(
        eval("1 in 'abc'"),
        Err(CelError::NoSuchOverload(_))
    ));
}

#[test]
fn size_as_function_and_method() {
    assert_eq!(
        eval_with("size(self)", &json!("héllo")).unwrap(),
        json!(5),
        "characters, not bytes"
    );
    assert_eq!(
        eval_with("self.size()", &json!([1, 2, 3])).unwrap(),
        json!(3)
    );
    assert_eq!(
        eval_with("size(self) <= 1", &json!({"a": 1, "b": 2})).unwrap(),
        json!(false)
    );
    assert!(matches!(eval("size(1)"), Err(CelError::NoSuchOverload(_))));
}

#[test]
fn conversions() {
    assert_eq!(eval("int('42')").unwrap(), json!(42));
    assert_eq!(eval("int('-7')").unwrap(), json!(-7));
    assert_eq!(eval("int(3.9)").unwrap(), json!(3));
    assert_eq!(
        eval("int('abc')").unwrap_err(),
        CelError::Eval("strconv.ParseInt: parsing \"abc\": invalid syntax".into())
    );
    assert_eq!(
        eval("int('99999999999999999999')").unwrap_err().to_string(),
        "strconv.ParseInt: parsing \"99999999999999999999\": value out of range"
    );
    assert_eq!(eval("uint('5')").unwrap(), json!(5));
    assert!(eval("uint(-1)").is_err());
    assert_eq!(eval("double('1.5')").unwrap(), json!(1.5));
    assert_eq!(eval("string(12) + string(true)").unwrap(), json!("12true"));
    assert_eq!(eval("bool('true') && !bool('0')").unwrap(), json!(true));
    assert_eq!(
        eval("type(1) == int && type('a') == string && type([]) != map").unwrap(),
        json!(true)
    );
    assert_eq!(eval("dyn(1) == 1").unwrap(), json!(true));
}

#[test]
fn string_functions_and_regexes() {
    let key = json!("karpenter.sh/nodepool");
    assert_eq!(
        eval_with(r#"self.find("^([^/]+)")"#, &key).unwrap(),
        json!("karpenter.sh")
    );
    assert_eq!(
        eval_with(r#"self.find("^[0-9]+$")"#, &key).unwrap(),
        json!(""),
        "no match is the empty string"
    );
    assert!(truthy(
        r#"self.find("^([^/]+)").endsWith("karpenter.sh")"#,
        &key
    ));
    assert!(truthy(
        "self.startsWith('karpenter') && self.contains('.sh/')",
        &key
    ));
    assert!(truthy(
        "self.matches('^[a-z.]+/[a-z]+$') && matches(self, 'pool$')",
        &key
    ));
    assert_eq!(
        eval_with("self.findAll('[a-z]+')", &json!("ab-cd-ef")).unwrap(),
        json!(["ab", "cd", "ef"])
    );
    assert_eq!(
        eval_with("self.findAll('[a-z]+', 2)", &json!("ab-cd-ef")).unwrap(),
        json!(["ab", "cd"])
    );
    assert_eq!(
        eval_with("self.split('/')", &key).unwrap(),
        json!(["karpenter.sh", "nodepool"])
    );
    assert_eq!(
        eval_with("self.split('.', 1)", &key).unwrap(),
        json!(["karpenter.sh/nodepool"])
    );
    assert_eq!(
        eval_with("self.lowerAscii() + self.upperAscii()", &json!("Ab")).unwrap(),
        json!("abAB")
    );
    assert_eq!(
        eval_with("self.trim()", &json!("  x ")).unwrap(),
        json!("x")
    );
    assert_eq!(
        eval_with("self.replace('a', 'o')", &json!("banana")).unwrap(),
        json!("bonono")
    );
    assert_eq!(
        eval_with("self.replace('a', 'o', 1)", &json!("banana")).unwrap(),
        json!("bonana")
    );
    assert_eq!(
        eval_with(
            "self.indexOf('an') + self.lastIndexOf('an')",
            &json!("banana")
        )
        .unwrap(),
        json!(1 + 3)
    );
    assert_eq!(
        eval_with("self.indexOf('x')", &json!("banana")).unwrap(),
        json!(-1)
    );
    assert_eq!(
        eval_with("self.substring(1, 3) + self.charAt(0)", &json!("héllo")).unwrap(),
        json!("élh")
    );
    assert_eq!(
        eval_with("self.substring(9)", &json!("abc"))
            .unwrap_err()
            .to_string(),
        "index out of range: 9"
    );
    assert_eq!(eval("['a', 'b'].join('-')").unwrap(), json!("a-b"));
    assert!(
        eval_with("self.matches('(')", &key)
            .unwrap_err()
            .to_string()
            .starts_with("given regex is invalid")
    );
}

#[test]
fn list_functions() {
    assert_eq!(
        eval("[1, 2, 2].isSorted() && ![2, 1].isSorted()").unwrap(),
        json!(true)
    );
    assert_eq!(eval("[1, 2, 3].sum()").unwrap(), json!(6));
    assert_eq!(eval("[3, 1, 2].min() + [3, 1, 2].max()").unwrap(), json!(4));
    assert_eq!(
        eval("['a', 'b', 'a'].indexOf('a') + ['a', 'b', 'a'].lastIndexOf('a')").unwrap(),
        json!(2)
    );
    assert!(eval("[].min()").is_err());
}

#[test]
fn ternary_and_logic_short_circuit_absorb_errors() {
    assert_eq!(eval("true ? 1 : 2").unwrap(), json!(1));
    assert_eq!(eval("false ? 1 : true ? 2 : 3").unwrap(), json!(2));
    // The unchosen branch is not evaluated.
    assert_eq!(eval("true ? 1 : 1 / 0").unwrap(), json!(1));
    // false && error, error && false, true || error, error || true: decided.
    for decided in [
        "!(false && 1 / 0 == 1)",
        "!(1 / 0 == 1 && false)",
        "true || 1 / 0 == 1",
        "1 / 0 == 1 || true",
    ] {
        assert_eq!(eval(decided).unwrap(), json!(true), "{decided}");
    }
    // Otherwise the error surfaces.
    for undecided in [
        "true && 1 / 0 == 1",
        "false || 1 / 0 == 1",
        "1 / 0 == 1 && true",
    ] {
        assert_eq!(
            eval(undecided).unwrap_err(),
            CelError::Eval("division by zero".into()),
            "{undecided}"
        );
    }
    assert!(matches!(
        eval("1 && true"),
        Err(CelError::NoSuchOverload(_))
    ));
}

#[test]
fn comprehensions_over_lists_and_map_keys() {
    let list = json!([{"operator": "In", "values": ["a"]}, {"operator": "Exists", "values": []}]);
    assert!(truthy(
        "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
        &list
    ));
    assert!(truthy("self.exists(x, x.operator == 'Exists')", &list));
    assert!(truthy("self.exists_one(x, x.values.size() == 0)", &list));
    assert_eq!(
        eval_with("self.map(x, x.operator)", &list).unwrap(),
        json!(["In", "Exists"])
    );
    assert_eq!(
        eval_with("self.map(x, x.values.size() > 0, x.operator)", &list).unwrap(),
        json!(["In"])
    );
    assert_eq!(
        eval_with("self.filter(x, x.operator != 'In').size()", &list).unwrap(),
        json!(1)
    );
    let labels = json!({"team": "a", "karpenter.sh/nodepool": "b"});
    assert!(!truthy(
        r#"self.all(x, x != "karpenter.sh/nodepool")"#,
        &labels
    ));
    assert!(truthy("self.exists(k, k == 'team')", &labels));
    assert!(truthy(
        "[].all(x, false) && ![].exists(x, true)",
        &Value::Null
    ));
    // The variable is unbound again afterwards, even when the body failed.
    assert!(matches!(
        eval("([1].all(x, 1 / 0 == 1) || true) ? x : 0"),
        Err(CelError::UndeclaredReference(_))
    ));
    // Nested comprehensions shadow and restore.
    assert!(truthy(
        "[[1, 2], [3]].all(x, x.all(x, x > 0))",
        &Value::Null
    ));
}

#[test]
fn all_and_exists_absorb_errors_like_the_logic_operators() {
    let values = json!(["1", "x", "-1"]);
    // One false decides `all` even though another element fails to convert.
    assert!(!truthy("self.all(v, int(v) >= 0)", &values));
    assert!(truthy("self.exists(v, int(v) < 0)", &values));
    let errors = json!(["1", "x"]);
    assert_eq!(
        eval_with("self.all(v, int(v) >= 0)", &errors)
            .unwrap_err()
            .to_string(),
        "strconv.ParseInt: parsing \"x\": invalid syntax"
    );
    assert!(eval_with("self.exists_one(v, int(v) >= 0)", &errors).is_err());
}

#[test]
fn the_karpenter_rules_behave_as_on_a_real_cluster() {
    let domain = r#"self in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || !self.find("^([^/]+)").endsWith("karpenter.sh")"#;
    assert!(truthy(domain, &json!("karpenter.sh/capacity-type")));
    assert!(truthy(domain, &json!("topology.kubernetes.io/zone")));
    assert!(truthy(domain, &json!("team")));
    assert!(!truthy(domain, &json!("karpenter.sh/other")));
    assert!(!truthy(domain, &json!("sub.karpenter.sh/other")));

    let numeric = "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)";
    assert!(truthy(
        numeric,
        &json!([{"operator": "Gt", "values": ["3"]}, {"operator": "In", "values": ["x", "y"]}])
    ));
    assert!(
        !truthy(numeric, &json!([{"operator": "Gt", "values": ["3", "4"]}])),
        "two values: false && (not evaluated)"
    );
    assert!(!truthy(
        numeric,
        &json!([{"operator": "Lt", "values": ["-1"]}])
    ));
    assert!(
        eval_with(numeric, &json!([{"operator": "Gt", "values": ["abc"]}])).is_err(),
        "unparseable: an error"
    );

    let min_values = "self.all(x, (x.operator == 'In' && has(x.minValues)) ? x.values.size() >= x.minValues : true)";
    assert!(truthy(
        min_values,
        &json!([{"operator": "In", "values": ["a", "b"], "minValues": 2}])
    ));
    assert!(!truthy(
        min_values,
        &json!([{"operator": "In", "values": ["a"], "minValues": 2}])
    ));
    assert!(truthy(
        min_values,
        &json!([{"operator": "Exists", "minValues": 2}])
    ));

    let static_pool = "!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || (size(self.limits) == 1 && 'nodes' in self.limits))";
    assert!(truthy(
        static_pool,
        &json!({"replicas": 2, "limits": {"nodes": "4"}})
    ));
    assert!(!truthy(
        static_pool,
        &json!({"replicas": 2, "limits": {"cpu": "4"}})
    ));
    assert!(truthy(static_pool, &json!({"limits": {"cpu": "4"}})));

    assert!(!truthy(
        "self.all(x, !(x in ['cpu', 'memory', 'ephemeral-storage', 'pods']))",
        &json!({"memory": "1Gi"})
    ));
    assert!(truthy(
        "self.all(x, has(x.schedule) == has(x.duration))",
        &json!([{"nodes": "10%"}, {"schedule": "@daily", "duration": "1h"}])
    ));
    assert!(!truthy(
        "self.all(x, has(x.schedule) == has(x.duration))",
        &json!([{"schedule": "@daily"}])
    ));
    assert!(truthy("self != ''", &json!("x")));

    let transition = Program::parse("self == oldSelf").unwrap();
    let (old, new) = (json!({"a": [1, {"b": "c"}]}), json!({"a": [1, {"b": "c"}]}));
    let same = transition
        .evaluate(&[
            ("self", Val::from_json(&new)),
            ("oldSelf", Val::from_json(&old)),
        ])
        .unwrap();
    assert!(matches!(same, Val::Bool(true)));
    let changed = json!({"a": [1, {"b": "d"}]});
    let different = transition
        .evaluate(&[
            ("self", Val::from_json(&changed)),
            ("oldSelf", Val::from_json(&old)),
        ])
        .unwrap();
    assert!(matches!(different, Val::Bool(false)));
}

#[test]
fn durations_and_timestamps() {
    assert!(truthy("duration(self) <= duration('1h')", &json!("59m30s")));
    assert!(truthy(
        "duration('1.5h') == duration('90m') && duration('1h') > duration('-1s')",
        &Value::Null
    ));
    assert_eq!(eval("string(duration('1m30.5s'))").unwrap(), json!("90.5s"));
    assert_eq!(
        eval("duration('2h45m').getHours() * 100 + duration('2h45m').getMinutes()").unwrap(),
        json!(200 + 165)
    );
    assert_eq!(
        eval("duration('1x')").unwrap_err().to_string(),
        "time: unknown unit \"x\" in duration \"1x\""
    );
    assert_eq!(
        eval("duration('10')").unwrap_err().to_string(),
        "time: missing unit in duration \"10\""
    );
    assert_eq!(
        eval("duration('')").unwrap_err().to_string(),
        "time: invalid duration \"\""
    );
    assert!(truthy(
        "timestamp('2024-03-01T00:00:00Z') - timestamp('2024-02-28T00:00:00Z') == duration('48h')",
        &Value::Null
    ));
    assert_eq!(
        eval("string(timestamp('2024-01-02T03:04:05.25+01:00'))").unwrap(),
        json!("2024-01-02T02:04:05.25Z")
    );
    assert_eq!(
        eval("string(timestamp('1969-12-31T23:59:59Z') + duration('2s'))").unwrap(),
        json!("1970-01-01T00:00:01Z")
    );
    assert!(eval("timestamp('2023-02-29T00:00:00Z')").is_err());
    assert!(eval("timestamp('yesterday')").is_err());
}

#[test]
fn unknown_functions_and_overloads_are_clear_errors() {
    assert_eq!(
        eval("frobnicate(1)").unwrap_err(),
        CelError::UnknownFunction("frobnicate".into())
    );
    assert_eq!(
        eval("'a'.reverse()").unwrap_err().to_string(),
        "undeclared reference to 'reverse': unknown function"
    );
    assert_eq!(
        eval("'a'.startsWith(1)").unwrap_err().to_string(),
        "no such overload: .startsWith(string, int)"
    );
    assert_eq!(
        eval("int([])").unwrap_err().to_string(),
        "no such overload: int(list)"
    );
}

#[test]
fn evaluation_stops_at_the_cost_limit() {
    let numbers: Vec<i64> = (0..700).collect();
    assert_eq!(
        eval_with(
            "self.all(x, self.all(y, self.all(z, x + y + z >= 0)))",
            &json!(numbers)
        ),
        Err(CelError::CostLimitExceeded)
    );
    // Neither `||` nor `all` absorbs the cost error, as they absorb others.
    assert_eq!(
        eval_with(
            "self.all(x, self.all(y, self.all(z, x + y + z >= 0))) || true",
            &json!(numbers)
        ),
        Err(CelError::CostLimitExceeded)
    );
    // The same rule on a small list costs little, and says what it cost.
    let small = json!([1, 2, 3]);
    let program = Program::parse("self.all(x, self.all(y, x + y >= 0))").unwrap();
    let (result, cost) = program.evaluate_metered(&[("self", Val::from_json(&small))], 100);
    assert!(matches!(result, Ok(Val::Bool(true))), "{result:?}");
    assert!(cost > 9 && cost < 100, "{cost}");
    assert_eq!(
        program
            .evaluate_metered(&[("self", Val::from_json(&small))], 10)
            .0
            .unwrap_err(),
        CelError::CostLimitExceeded
    );
}

#[test]
fn built_strings_and_lists_are_capped() {
    let text = "a".repeat(20_000);
    let error = eval_with("self.replace('a', self + self).size() > 0", &json!(text));
    assert_eq!(
        error,
        Err(CelError::SizeLimitExceeded(
            "the rule builds a string of 800000000 bytes, over the limit of 1048576".to_string()
        ))
    );
    let big = "b".repeat(600_000);
    assert!(matches!(
        eval_with("size(self + self) > 0", &json!(big)),
        Err(CelError::SizeLimitExceeded(_))
    ));
    assert!(matches!(
        eval_with("[self, self].join('-') != ''", &json!(big)),
        Err(CelError::SizeLimitExceeded(_))
    ));
    let items: Vec<i64> = (0..150_000).collect();
    assert!(matches!(
        eval_with("size(self + self) > 0", &json!(items)),
        Err(CelError::SizeLimitExceeded(_))
    ));
    // Under the caps, building works.
    assert_eq!(
        eval_with("self.replace('a', 'bb')", &json!("aXa")).unwrap(),
        json!("bbXbb")
    );
    assert_eq!(
        eval_with("self.replace('a', 'bb', 1)", &json!("aXa")).unwrap(),
        json!("bbXa")
    );
    assert_eq!(
        eval_with("self.replace('', '-')", &json!("ab")).unwrap(),
        json!("-a-b-")
    );
}

#[test]
fn string_searches_are_linear_and_count_characters() {
    assert_eq!(eval("'héllo'.indexOf('l')").unwrap(), json!(2));
    assert_eq!(eval("'héllo'.indexOf('l', 3)").unwrap(), json!(3));
    assert_eq!(eval("'héllo'.indexOf('')").unwrap(), json!(0));
    assert_eq!(eval("'héllo'.indexOf('', 2)").unwrap(), json!(2));
    assert_eq!(eval("'héllo'.indexOf('x')").unwrap(), json!(-1));
    assert_eq!(eval("'héllo'.lastIndexOf('l')").unwrap(), json!(3));
    assert_eq!(eval("'héllo'.lastIndexOf('l', 2)").unwrap(), json!(2));
    assert_eq!(eval("'héllo'.lastIndexOf('é', 1)").unwrap(), json!(1));
    assert_eq!(eval("'héllo'.lastIndexOf('é', 0)").unwrap(), json!(-1));
    assert_eq!(eval("'héllo'.lastIndexOf('')").unwrap(), json!(5));
    assert_eq!(eval("'héllo'.lastIndexOf('llo', 2)").unwrap(), json!(2));
    // A long needle in a long text: Rust's substring search, not a quadratic scan.
    let text = format!("{}b", "a".repeat(1 << 19));
    let needle = format!("{}b", "a".repeat(1 << 18));
    let value = json!({"text": text, "needle": needle});
    assert_eq!(
        eval_with("self.text.indexOf(self.needle)", &value).unwrap(),
        json!(1 << 18)
    );
}

#[test]
fn hostile_input_never_panics() {
    for source in [
        "",
        "(",
        ")",
        "[",
        "{",
        "{1:",
        "'",
        "\"\"\"",
        "a.",
        "a[",
        "a[1",
        ".",
        "?",
        "1 ?",
        "1 ? 2",
        "0x",
        "1e",
        "1.",
        "\\",
        "'\\u12'",
        "'\\U0011FFFF'",
        "has(",
        "x.all(",
        "€",
    ] {
        let _ = Program::parse(source).and_then(|p| p.evaluate(&[]));
    }
    for source in [
        "size(self) + self[0] + self.x",
        "self.all(x, x)",
        "self.map(x, x / 0)",
        "int(self)",
        "self.substring(-1)",
        "self.charAt(99)",
        "self.split('', 3)",
        "self.indexOf('', 99)",
        "self.lastIndexOf('x', -1)",
    ] {
        for value in [
            json!(null),
            json!("héllo"),
            json!([1, "a"]),
            json!({"x": 1}),
            json!(1.5),
            json!(u64::MAX),
        ] {
            let _ = eval_with(source, &value);
        }
    }
    assert_eq!(
        eval_with("self.split('', 3)", &json!("héllo")).unwrap(),
        json!(["h", "é", "llo"])
    );
    assert!(
        eval("{'a': 1, 'a': 2}").is_err(),
        "repeated map keys are an error"
    );
}
