//! Matching Karpenter node selector requirements against labels.
//!
//! The operators behave as in Karpenter:
//!
//! | operator | absent label | present label `v` |
//! |---|---|---|
//! | `In` | no | `v` is one of the values |
//! | `NotIn` | yes | `v` is none of the values |
//! | `Exists` | no | yes |
//! | `DoesNotExist` | yes | no |
//! | `Gt`, `Lt`, `Gte`, `Lte` | no | `v` and the first value are integers and compare so |
//!
//! A label or bound that is not an integer never satisfies `Gt`, `Lt`, `Gte` or `Lte`.
//!
//! Every world's generated `Requirement` implements [`LabelRequirement`], and every world's
//! `KeyValue` list implements [`Labels`], so the functions here work with the WIT records of
//! whichever world a plugin implements, as well as with a `BTreeMap` or `HashMap` of labels:
//!
//! ```ignore
//! use joinery_plugin_sdk::requirements::{self, LabelRequirement};
//!
//! let ok = requirements::requirements_match(&claim.requirements, &type_labels);
//! let zone_ok = requirements::allows(&claim.requirements, "topology.kubernetes.io/zone", "ch-gva-2");
//! let zones: Option<Vec<&str>> = requirements::allowed_values(&claim.requirements, "topology.kubernetes.io/zone");
//! let one = claim.requirements[0].accepts(Some("amd64"));
//! ```

use std::collections::{BTreeMap, HashMap};

/// A node selector operator, the same for every world (the WIT `operator` enum).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// The label value is one of the values.
    In,
    /// The label is absent or its value is none of the values.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
    /// The label value is an integer greater than the first value.
    Gt,
    /// The label value is an integer less than the first value.
    Lt,
    /// The label value is an integer greater than or equal to the first value.
    Gte,
    /// The label value is an integer less than or equal to the first value.
    Lte,
}

/// A requirement on one label key: implemented by every world's `Requirement` record.
pub trait LabelRequirement {
    /// The label key.
    fn label_key(&self) -> &str;
    /// The operator.
    fn op(&self) -> Op;
    /// The operator's values (one integer for the comparisons, none for `Exists` and
    /// `DoesNotExist`).
    fn label_values(&self) -> &[String];

    /// Whether a label value satisfies this requirement (`None`: the label is absent).
    fn accepts(&self, value: Option<&str>) -> bool {
        value_satisfies(self.op(), self.label_values(), value)
    }
}

/// Something that has labels by key: a map, or a world's `KeyValue` list (the last entry of
/// a repeated key wins).
pub trait Labels {
    /// The value of label `key`, if present.
    fn label(&self, key: &str) -> Option<&str>;
}

impl Labels for BTreeMap<String, String> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl<S: std::hash::BuildHasher> Labels for HashMap<String, String, S> {
    fn label(&self, key: &str) -> Option<&str> {
        self.get(key).map(String::as_str)
    }
}

impl Labels for [(&str, &str)] {
    fn label(&self, key: &str) -> Option<&str> {
        self.iter().rev().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
}

/// Whether `value` (`None`: the label is absent) satisfies `op` with `values`.
pub fn value_satisfies(op: Op, values: &[String], value: Option<&str>) -> bool {
    let listed = |v: &str| values.iter().any(|x| x == v);
    let integer = |v: &str| v.trim().parse::<i64>().ok();
    let compare = |check: fn(i64, i64) -> bool| {
        let left = value.and_then(integer);
        let right = values.first().and_then(|v| integer(v));
        matches!((left, right), (Some(l), Some(r)) if check(l, r))
    };
    match op {
        Op::In => value.is_some_and(listed),
        Op::NotIn => !value.is_some_and(listed),
        Op::Exists => value.is_some(),
        Op::DoesNotExist => value.is_none(),
        Op::Gt => compare(|l, r| l > r),
        Op::Lt => compare(|l, r| l < r),
        Op::Gte => compare(|l, r| l >= r),
        Op::Lte => compare(|l, r| l <= r),
    }
}

/// Whether the labels satisfy every requirement.
pub fn requirements_match<R: LabelRequirement, L: Labels + ?Sized>(
    requirements: &[R],
    labels: &L,
) -> bool {
    requirements
        .iter()
        .all(|r| r.accepts(labels.label(r.label_key())))
}

/// Whether a label `key` with `value` satisfies every requirement on `key` (requirements on
/// other keys are ignored; with none on `key`, any value is allowed).
pub fn allows<R: LabelRequirement>(requirements: &[R], key: &str, value: &str) -> bool {
    requirements
        .iter()
        .filter(|r| r.label_key() == key)
        .all(|r| r.accepts(Some(value)))
}

/// The values of label `key` that the requirements allow, when they list them: the values of
/// the `In` requirements on `key` (in the order of the first) that every requirement on `key`
/// accepts. `None` when no `In` requirement names `key`: the requirements then do not
/// enumerate the allowed values (check a candidate with [`allows`]).
pub fn allowed_values<'a, R: LabelRequirement>(
    requirements: &'a [R],
    key: &str,
) -> Option<Vec<&'a str>> {
    let first = requirements
        .iter()
        .find(|r| r.label_key() == key && r.op() == Op::In)?;
    let mut out: Vec<&str> = Vec::new();
    for value in first.label_values() {
        if !out.contains(&value.as_str()) && allows(requirements, key, value) {
            out.push(value);
        }
    }
    Some(out)
}

/// Implements [`LabelRequirement`] and [`Labels`] for one world's records. Invoke it where
/// `Requirement`, `Operator` and `KeyValue` are in scope.
#[allow(unused_macros)]
macro_rules! requirement_impls {
    () => {
        impl $crate::requirements::LabelRequirement for Requirement {
            fn label_key(&self) -> &str {
                &self.key
            }
            fn op(&self) -> $crate::requirements::Op {
                use $crate::requirements::Op;
                match self.operator {
                    Operator::In => Op::In,
                    Operator::NotIn => Op::NotIn,
                    Operator::Exists => Op::Exists,
                    Operator::DoesNotExist => Op::DoesNotExist,
                    Operator::Gt => Op::Gt,
                    Operator::Lt => Op::Lt,
                    Operator::Gte => Op::Gte,
                    Operator::Lte => Op::Lte,
                }
            }
            fn label_values(&self) -> &[String] {
                &self.values
            }
        }

        impl $crate::requirements::Labels for [KeyValue] {
            fn label(&self, key: &str) -> Option<&str> {
                lookup(self, key)
            }
        }

        impl $crate::requirements::Labels for Vec<KeyValue> {
            fn label(&self, key: &str) -> Option<&str> {
                lookup(self, key)
            }
        }
    };
}

#[allow(unused_imports)]
pub(crate) use requirement_impls;

#[cfg(test)]
mod tests {
    use super::*;

    struct Req(&'static str, Op, Vec<String>);

    impl LabelRequirement for Req {
        fn label_key(&self) -> &str {
            self.0
        }
        fn op(&self) -> Op {
            self.1
        }
        fn label_values(&self) -> &[String] {
            &self.2
        }
    }

    fn req(key: &'static str, op: Op, values: &[&str]) -> Req {
        Req(key, op, values.iter().map(|v| v.to_string()).collect())
    }

    #[test]
    fn in_needs_a_listed_value() {
        let r = req("k", Op::In, &["2", "4"]);
        assert!(r.accepts(Some("4")));
        assert!(!r.accepts(Some("3")));
        assert!(!r.accepts(None), "an absent label is not in any set");
        assert!(!req("k", Op::In, &[]).accepts(Some("4")));
    }

    #[test]
    fn not_in_accepts_an_absent_label() {
        let r = req("k", Op::NotIn, &["2"]);
        assert!(r.accepts(Some("4")));
        assert!(!r.accepts(Some("2")));
        assert!(r.accepts(None));
    }

    #[test]
    fn exists_and_does_not_exist() {
        assert!(req("k", Op::Exists, &[]).accepts(Some("")));
        assert!(!req("k", Op::Exists, &[]).accepts(None));
        assert!(req("k", Op::DoesNotExist, &[]).accepts(None));
        assert!(!req("k", Op::DoesNotExist, &[]).accepts(Some("x")));
    }

    #[test]
    fn gt_and_lt_are_strict_integer_comparisons() {
        assert!(req("k", Op::Gt, &["3"]).accepts(Some("4")));
        assert!(!req("k", Op::Gt, &["4"]).accepts(Some("4")));
        assert!(req("k", Op::Gt, &["-2"]).accepts(Some(" -1 ")));
        assert!(req("k", Op::Lt, &["5"]).accepts(Some("4")));
        assert!(!req("k", Op::Lt, &["4"]).accepts(Some("4")));
    }

    #[test]
    fn gte_and_lte_include_the_bound() {
        assert!(req("k", Op::Gte, &["4"]).accepts(Some("4")));
        assert!(req("k", Op::Gte, &["4"]).accepts(Some("5")));
        assert!(!req("k", Op::Gte, &["4"]).accepts(Some("3")));
        assert!(req("k", Op::Lte, &["4"]).accepts(Some("4")));
        assert!(req("k", Op::Lte, &["4"]).accepts(Some("3")));
        assert!(!req("k", Op::Lte, &["4"]).accepts(Some("5")));
    }

    #[test]
    fn comparisons_need_integers_on_both_sides() {
        for op in [Op::Gt, Op::Lt, Op::Gte, Op::Lte] {
            assert!(!req("k", op, &["4"]).accepts(None), "{op:?}: absent label");
            assert!(
                !req("k", op, &["4"]).accepts(Some("4.0")),
                "{op:?}: not an integer"
            );
            assert!(
                !req("k", op, &["4"]).accepts(Some("large")),
                "{op:?}: not a number"
            );
            assert!(
                !req("k", op, &["x"]).accepts(Some("4")),
                "{op:?}: bound not an integer"
            );
            assert!(!req("k", op, &[]).accepts(Some("4")), "{op:?}: no bound");
        }
    }

    #[test]
    fn every_requirement_must_hold() {
        let labels: BTreeMap<String, String> = [("arch", "amd64"), ("cpu", "8")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let ok = [
            req("arch", Op::In, &["amd64", "arm64"]),
            req("cpu", Op::Gte, &["4"]),
            req("gpu", Op::DoesNotExist, &[]),
        ];
        assert!(requirements_match(&ok, &labels));
        assert!(
            requirements_match::<Req, _>(&[], &labels),
            "no requirement: anything goes"
        );
        let too_small = [req("arch", Op::In, &["amd64"]), req("cpu", Op::Gt, &["8"])];
        assert!(!requirements_match(&too_small, &labels));
        let pairs: &[(&str, &str)] = &[("arch", "arm64"), ("arch", "amd64")];
        assert!(
            requirements_match(&ok[..1], pairs),
            "the last value of a repeated key wins"
        );
    }

    #[test]
    fn allowed_values_intersects_the_requirements_on_the_key() {
        let reqs = [
            req("zone", Op::In, &["a", "b", "c", "a"]),
            req("zone", Op::NotIn, &["b"]),
            req("zone", Op::In, &["c", "a", "d"]),
            req("arch", Op::In, &["amd64"]),
        ];
        assert_eq!(allowed_values(&reqs, "zone"), Some(vec!["a", "c"]));
        assert_eq!(allowed_values(&reqs, "arch"), Some(vec!["amd64"]));
        assert_eq!(
            allowed_values(&reqs, "type"),
            None,
            "nothing lists the values"
        );
        assert_eq!(
            allowed_values(&[req("zone", Op::NotIn, &["a"])], "zone"),
            None
        );
        assert!(allows(&reqs, "zone", "a"));
        assert!(!allows(&reqs, "zone", "b"));
        assert!(!allows(&reqs, "zone", "d"));
        assert!(
            allows(&reqs, "type", "anything"),
            "no requirement on the key"
        );
    }
}
