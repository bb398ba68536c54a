//! The requirement algebra: what label values a node may (or must not) have.
//!
//! A [`Requirement`] is the set of values a label key may take: a finite set (`In`), the
//! complement of a finite set (`NotIn`, `Exists`), or nothing (`DoesNotExist`), optionally
//! narrowed by inclusive integer bounds (`Gt`/`Lt`/`Gte`/`Lte`). Requirements of pods, NodePools,
//! instance types and offerings are combined by intersection. [`Requirements`] keeps one
//! requirement per key and answers the two scheduling questions: are these compatible
//! ([`Requirements::compatible`]) and do shared keys overlap ([`Requirements::intersects`]).
//!
//! Semantics follow upstream Karpenter so that the same pods land on the same shapes.
//!
//! It stays one file (a little over 1,000 lines): the operators, the one-key set algebra and the
//! per-key map are one algebra whose cases are read side by side.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::labels::{is_restricted_label, normalize_label_key};

/// A node-selector operator (Kubernetes' six plus Karpenter's `Gte`/`Lte`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Operator {
    /// The label has one of the values.
    In,
    /// The label is absent or has none of the values.
    NotIn,
    /// The label is present, any value.
    Exists,
    /// The label is absent.
    DoesNotExist,
    /// The label is an integer greater than the value.
    Gt,
    /// The label is an integer less than the value.
    Lt,
    /// The label is an integer greater than or equal to the value.
    Gte,
    /// The label is an integer less than or equal to the value.
    Lte,
}

impl Operator {
    /// The Kubernetes spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
            Operator::Gt => "Gt",
            Operator::Lt => "Lt",
            Operator::Gte => "Gte",
            Operator::Lte => "Lte",
        }
    }

    /// Whether the operator takes a single integer value.
    pub fn is_bound(self) -> bool {
        matches!(
            self,
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte
        )
    }
}

impl fmt::Display for Operator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Operator {
    type Err = RequirementError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            "Gt" => Operator::Gt,
            "Lt" => Operator::Lt,
            "Gte" => Operator::Gte,
            "Lte" => Operator::Lte,
            _ => return Err(RequirementError::UnknownOperator(s.to_owned())),
        })
    }
}

/// A requirement could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequirementError {
    /// Not one of the eight operators.
    #[error("unknown operator {0:?}")]
    UnknownOperator(String),
    /// A bound operator without exactly one integer value (or one that overflows).
    #[error("requirement {key:?} {operator} needs a single integer value, got {values:?}")]
    InvalidBound {
        /// Label key.
        key: String,
        /// The bound operator.
        operator: Operator,
        /// The values given.
        values: Vec<String>,
    },
}

/// The wire form of a requirement: a NodeSelectorRequirement with Karpenter's `minValues`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirement {
    /// Label key.
    pub key: String,
    /// Operator.
    pub operator: Operator,
    /// Values (none for Exists/DoesNotExist, one for bounds).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    /// Minimum number of distinct values to keep across candidate instance types.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_values: Option<usize>,
}

impl NodeSelectorRequirement {
    /// A requirement without minValues.
    pub fn new<I, S>(key: impl Into<String>, operator: Operator, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        NodeSelectorRequirement {
            key: key.into(),
            operator,
            values: values.into_iter().map(Into::into).collect(),
            min_values: None,
        }
    }
}

/// The set of values a label key may take.
///
/// Represented as a finite `values` set, or — when `complement` is set — everything except
/// `values`; plus optional inclusive integer bounds that only ever constrain complement sets
/// (a finite set is filtered by the bounds at intersection time, which drops them).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Requirement {
    key: String,
    complement: bool,
    /// Shared: a NodeClaim's hundreds of instance-type names are one set however many claims
    /// and copies hold it; changed copy-on-write.
    values: Arc<BTreeSet<String>>,
    gte: Option<i64>,
    lte: Option<i64>,
    min_values: Option<usize>,
}

fn within(value: &str, gte: Option<i64>, lte: Option<i64>) -> bool {
    if gte.is_none() && lte.is_none() {
        return true;
    }
    match value.parse::<i64>() {
        Ok(n) => gte.is_none_or(|g| n >= g) && lte.is_none_or(|l| n <= l),
        Err(_) => false,
    }
}

fn max_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

fn min_opt<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

impl Requirement {
    /// Builds a requirement from the node-selector triple. The key is normalized (deprecated
    /// aliases rewritten). `Gt n` becomes "≥ n+1" and `Lt n` "≤ n−1"; bound operators need a
    /// single integer value.
    pub fn new<I, S>(
        key: impl Into<String>,
        operator: Operator,
        values: I,
    ) -> Result<Self, RequirementError>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut key: String = key.into();
        let normalized = normalize_label_key(&key);
        if normalized != key {
            key = normalized.to_owned();
        }
        let values = values.into_iter().map(Into::into);
        let mut r = Requirement {
            key,
            complement: true,
            values: Arc::default(),
            gte: None,
            lte: None,
            min_values: None,
        };
        match operator {
            Operator::In => {
                r.complement = false;
                r.values = Arc::new(values.collect());
            }
            Operator::NotIn => r.values = Arc::new(values.collect()),
            Operator::Exists => {}
            Operator::DoesNotExist => r.complement = false,
            Operator::Gt | Operator::Lt | Operator::Gte | Operator::Lte => {
                let values: Vec<String> = values.collect();
                let parsed = match values.as_slice() {
                    [one] => one.parse::<i64>().ok(),
                    _ => None,
                };
                let bound = parsed.and_then(|n| match operator {
                    Operator::Gt => n.checked_add(1),
                    Operator::Lt => n.checked_sub(1),
                    _ => Some(n),
                });
                let Some(bound) = bound else {
                    return Err(RequirementError::InvalidBound {
                        key: r.key,
                        operator,
                        values,
                    });
                };
                if matches!(operator, Operator::Gt | Operator::Gte) {
                    r.gte = Some(bound);
                } else {
                    r.lte = Some(bound);
                }
            }
        }
        Ok(r)
    }

    /// Builds a requirement from its wire form (including minValues).
    pub fn from_node_selector(nsr: &NodeSelectorRequirement) -> Result<Self, RequirementError> {
        Ok(Requirement::new(
            nsr.key.as_str(),
            nsr.operator,
            nsr.values.iter().map(String::as_str),
        )?
        .with_min_values(nsr.min_values))
    }

    /// `key In [values]`.
    pub fn in_values<I, S>(key: impl Into<String>, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Requirement::new(key, Operator::In, values).expect("In never fails")
    }

    /// `key NotIn [values]`.
    pub fn not_in<I, S>(key: impl Into<String>, values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Requirement::new(key, Operator::NotIn, values).expect("NotIn never fails")
    }

    /// `key Exists`.
    pub fn exists(key: impl Into<String>) -> Self {
        Requirement::new(key, Operator::Exists, None::<String>).expect("Exists never fails")
    }

    /// `key DoesNotExist`.
    pub fn does_not_exist(key: impl Into<String>) -> Self {
        Requirement::new(key, Operator::DoesNotExist, None::<String>)
            .expect("DoesNotExist never fails")
    }

    /// `key Gte n`: an integer value of at least `n`.
    pub fn at_least(key: impl Into<String>, n: i64) -> Self {
        let mut r = Requirement::exists(key);
        r.gte = Some(n);
        r
    }

    /// `key Lte n`: an integer value of at most `n`.
    pub fn at_most(key: impl Into<String>, n: i64) -> Self {
        let mut r = Requirement::exists(key);
        r.lte = Some(n);
        r
    }

    /// Sets minValues.
    pub fn with_min_values(mut self, min_values: Option<usize>) -> Self {
        self.min_values = min_values;
        self
    }

    /// The (normalized) label key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The listed values: the allowed ones for a finite set, the excluded ones for a
    /// complement set.
    pub fn values(&self) -> &BTreeSet<String> {
        &self.values
    }

    /// Whether the set is "everything except [`values`](Self::values)".
    pub fn is_complement(&self) -> bool {
        self.complement
    }

    /// Inclusive lower integer bound, if any.
    pub fn gte(&self) -> Option<i64> {
        self.gte
    }

    /// Inclusive upper integer bound, if any.
    pub fn lte(&self) -> Option<i64> {
        self.lte
    }

    /// minValues, if any.
    pub fn min_values(&self) -> Option<usize> {
        self.min_values
    }

    /// The operator that best describes the set (bounds aside): `In` (non-empty finite),
    /// `DoesNotExist` (empty finite), `NotIn` (complement with exclusions), `Exists`.
    pub fn operator(&self) -> Operator {
        match (self.complement, self.values.is_empty()) {
            (true, true) => Operator::Exists,
            (true, false) => Operator::NotIn,
            (false, true) => Operator::DoesNotExist,
            (false, false) => Operator::In,
        }
    }

    /// Whether a node without the label satisfies the requirement: operator `NotIn` or
    /// `DoesNotExist`, and no integer bound (a bound needs a value to compare).
    pub fn accepts_absent(&self) -> bool {
        self.gte.is_none()
            && self.lte.is_none()
            && matches!(self.operator(), Operator::NotIn | Operator::DoesNotExist)
    }

    /// Number of admitted values; `None` when unbounded (any complement set: integer bounds
    /// still admit infinitely many spellings such as `"05"`).
    pub fn len(&self) -> Option<usize> {
        if self.complement {
            None
        } else {
            Some(self.values.len())
        }
    }

    /// Whether no value is admitted.
    pub fn is_empty(&self) -> bool {
        if self.complement {
            matches!((self.gte, self.lte), (Some(g), Some(l)) if g > l)
        } else {
            self.values.is_empty()
        }
    }

    /// Whether this is `In` exactly one value (no bounds), like a label.
    fn is_single_value(&self) -> bool {
        !self.complement && self.values.len() == 1 && self.gte.is_none() && self.lte.is_none()
    }

    /// Whether `value` is admitted.
    pub fn has(&self, value: &str) -> bool {
        if self.complement {
            !self.values.contains(value) && within(value, self.gte, self.lte)
        } else {
            self.values.contains(value) && within(value, self.gte, self.lte)
        }
    }

    /// A deterministic admitted value: the smallest value of a finite set, otherwise the
    /// integer closest to zero (upwards first) that the bounds admit and that is not
    /// excluded. `None` when empty, or when the bounds admit only excluded integers (then
    /// only non-canonical spellings such as `"05"` would remain).
    pub fn any(&self) -> Option<String> {
        if !self.complement {
            return self
                .values
                .iter()
                .find(|v| within(v, self.gte, self.lte))
                .cloned();
        }
        let lo = self.gte.unwrap_or(i64::MIN);
        let hi = self.lte.unwrap_or(i64::MAX);
        if lo > hi {
            return None;
        }
        let start = 0i64.clamp(lo, hi);
        // At most `values.len()` candidates are excluded, so both walks are short.
        let up = (start..=hi).take(self.values.len() + 1);
        let down = (lo..start).rev().take(self.values.len() + 1);
        up.chain(down)
            .map(|n| n.to_string())
            .find(|s| !self.values.contains(s))
    }

    /// Intersects `other` into `self` (keys are assumed equal). Complement ∧ complement
    /// unions the exclusions; finite sets are intersected/differenced and filtered by the
    /// combined bounds, which are then dropped; crossing bounds give the empty set; minValues
    /// is the larger one.
    pub fn intersect_with(&mut self, other: &Requirement) {
        debug_assert_eq!(self.key, other.key, "intersecting different keys");
        let gte = max_opt(self.gte, other.gte);
        let lte = min_opt(self.lte, other.lte);
        self.min_values = max_opt(self.min_values, other.min_values);
        if let (Some(g), Some(l)) = (gte, lte)
            && g > l
        {
            self.complement = false;
            self.values = Arc::default();
            self.gte = None;
            self.lte = None;
            return;
        }
        // Each case changes the shared set only when the result differs from what is held.
        match (self.complement, other.complement) {
            (true, true) => {
                if other.values.iter().any(|v| !self.values.contains(v)) {
                    Arc::make_mut(&mut self.values).extend(other.values.iter().cloned());
                }
            }
            (true, false) => {
                if other.values.iter().any(|v| self.values.contains(v)) {
                    let excluded = std::mem::take(&mut self.values);
                    self.values = Arc::new(
                        other
                            .values
                            .iter()
                            .filter(|v| !excluded.contains(*v))
                            .cloned()
                            .collect(),
                    );
                } else {
                    self.values = other.values.clone();
                }
            }
            (false, true) => {
                if self.values.iter().any(|v| other.values.contains(v)) {
                    Arc::make_mut(&mut self.values).retain(|v| !other.values.contains(v));
                }
            }
            (false, false) => {
                if self.values.iter().any(|v| !other.values.contains(v)) {
                    Arc::make_mut(&mut self.values).retain(|v| other.values.contains(v));
                }
            }
        }
        self.complement = self.complement && other.complement;
        if (gte.is_some() || lte.is_some()) && self.values.iter().any(|v| !within(v, gte, lte)) {
            Arc::make_mut(&mut self.values).retain(|v| within(v, gte, lte));
        }
        if self.complement {
            self.gte = gte;
            self.lte = lte;
        } else {
            self.gte = None;
            self.lte = None;
        }
    }

    /// The intersection of two requirements on the same key (see
    /// [`intersect_with`](Self::intersect_with)).
    pub fn intersection(&self, other: &Requirement) -> Requirement {
        let mut out = self.clone();
        out.intersect_with(other);
        out
    }

    /// Whether the intersection is non-empty, without building it.
    pub fn overlaps(&self, other: &Requirement) -> bool {
        let gte = max_opt(self.gte, other.gte);
        let lte = min_opt(self.lte, other.lte);
        if let (Some(g), Some(l)) = (gte, lte)
            && g > l
        {
            return false;
        }
        match (self.complement, other.complement) {
            (true, true) => true,
            (true, false) => other
                .values
                .iter()
                .any(|v| !self.values.contains(v) && within(v, gte, lte)),
            (false, true) => self
                .values
                .iter()
                .any(|v| !other.values.contains(v) && within(v, gte, lte)),
            (false, false) => {
                let (small, large) = if self.values.len() <= other.values.len() {
                    (&self.values, &other.values)
                } else {
                    (&other.values, &self.values)
                };
                small
                    .iter()
                    .any(|v| large.contains(v) && within(v, gte, lte))
            }
        }
    }

    /// The wire form. Usually one entry; a complement set with bounds gives one entry per
    /// bound (`Gte`/`Lte`) plus a `NotIn` for remaining exclusions, all on the same key (node
    /// selector requirements are ANDed, so reading them back yields the same requirement).
    pub fn to_node_selector(&self) -> Vec<NodeSelectorRequirement> {
        let entry = |operator, values: Vec<String>| NodeSelectorRequirement {
            key: self.key.clone(),
            operator,
            values,
            min_values: self.min_values,
        };
        let listed = || self.values.iter().cloned().collect::<Vec<_>>();
        if !self.complement {
            return vec![if self.values.is_empty() {
                entry(Operator::DoesNotExist, vec![])
            } else {
                entry(Operator::In, listed())
            }];
        }
        let mut out = Vec::new();
        if let Some(g) = self.gte {
            out.push(entry(Operator::Gte, vec![g.to_string()]));
        }
        if let Some(l) = self.lte {
            out.push(entry(Operator::Lte, vec![l.to_string()]));
        }
        if !self.values.is_empty() {
            out.push(entry(Operator::NotIn, listed()));
        }
        if out.is_empty() {
            out.push(entry(Operator::Exists, vec![]));
        }
        out
    }
}

impl fmt::Display for Requirement {
    /// `key In [a, b]`, `key Exists >= 3`, `key NotIn [x] minValues 2`; at most five values are
    /// listed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.key, self.operator())?;
        if !self.values.is_empty() {
            f.write_str(" [")?;
            for (i, v) in self.values.iter().take(5).enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                f.write_str(v)?;
            }
            if self.values.len() > 5 {
                write!(f, " and {} others", self.values.len() - 5)?;
            }
            f.write_str("]")?;
        }
        if let Some(g) = self.gte {
            write!(f, " >= {g}")?;
        }
        if let Some(l) = self.lte {
            write!(f, " <= {l}")?;
        }
        if let Some(m) = self.min_values {
            write!(f, " minValues {m}")?;
        }
        Ok(())
    }
}

/// A set of label keys, e.g. the well-known labels that may be left undefined.
pub trait KeySet {
    /// Whether `key` is in the set.
    fn contains_key(&self, key: &str) -> bool;
    /// The keys, for suggestions in error messages.
    fn keys(&self) -> impl Iterator<Item = &str>;
}

impl KeySet for [&str] {
    fn contains_key(&self, key: &str) -> bool {
        self.contains(&key)
    }
    fn keys(&self) -> impl Iterator<Item = &str> {
        self.iter().copied()
    }
}

impl<const N: usize> KeySet for [&str; N] {
    fn contains_key(&self, key: &str) -> bool {
        self.contains(&key)
    }
    fn keys(&self) -> impl Iterator<Item = &str> {
        self.iter().copied()
    }
}

impl KeySet for [String] {
    fn contains_key(&self, key: &str) -> bool {
        self.iter().any(|k| k == key)
    }
    fn keys(&self) -> impl Iterator<Item = &str> {
        self.iter().map(String::as_str)
    }
}

impl KeySet for BTreeSet<String> {
    fn contains_key(&self, key: &str) -> bool {
        self.contains(key)
    }
    fn keys(&self) -> impl Iterator<Item = &str> {
        self.iter().map(String::as_str)
    }
}

impl KeySet for HashSet<String> {
    fn contains_key(&self, key: &str) -> bool {
        self.contains(key)
    }
    fn keys(&self) -> impl Iterator<Item = &str> {
        self.iter().map(String::as_str)
    }
}

impl KeySet for crate::labels::LabelPolicy {
    fn contains_key(&self, key: &str) -> bool {
        self.is_well_known(key)
    }
    fn keys(&self) -> impl Iterator<Item = &str> {
        self.well_known().iter().map(String::as_str)
    }
}

/// No key may be undefined (strict compatibility).
pub const NO_KEYS: [&str; 0] = [];

/// One reason two sets of requirements are incompatible.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Incompatibility {
    /// `other` constrains a key that `self` does not define and that may not be undefined.
    #[error("label {key:?} does not have known values{}", hint_suffix(.hint))]
    UndefinedKey {
        /// The key.
        key: String,
        /// A similar known key, likely meant instead.
        hint: Option<String>,
    },
    /// A shared key whose requirements do not overlap.
    #[error("key {key}, {incoming} not in {existing}")]
    NoOverlap {
        /// The key.
        key: String,
        /// The incoming (`other`) requirement, rendered.
        incoming: String,
        /// The existing (`self`) requirement, rendered.
        existing: String,
    },
}

fn hint_suffix(hint: &Option<String>) -> String {
    hint.as_ref()
        .map(|h| format!(" (typo of {h:?}?)"))
        .unwrap_or_default()
}

/// Requirements are incompatible; lists every reason found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", join(.0))]
pub struct IncompatibleRequirements(pub Vec<Incompatibility>);

fn join(reasons: &[Incompatibility]) -> String {
    reasons
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl IncompatibleRequirements {
    /// The keys involved, in order.
    pub fn keys(&self) -> Vec<&str> {
        self.0
            .iter()
            .map(|r| match r {
                Incompatibility::UndefinedKey { key, .. }
                | Incompatibility::NoOverlap { key, .. } => key.as_str(),
            })
            .collect()
    }
}

/// Levenshtein distance, for typo hints only (error path).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

fn looks_like(key: &str, candidate: &str) -> bool {
    if key.is_empty() || candidate.is_empty() || key == candidate {
        return false;
    }
    candidate.contains(key)
        || key.contains(candidate)
        || edit_distance(key, candidate) <= (candidate.len() / 5).max(1)
}

/// Requirements keyed by label key, at most one per key (adding intersects).
///
/// Kept as a vector sorted by key: small, cache-friendly, cheap to clone, and shared keys of
/// two collections are found by a linear merge.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Requirements {
    items: Vec<Requirement>,
}

impl Requirements {
    /// No requirements (everything allowed).
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds from wire-form requirements, intersecting repeated keys.
    pub fn from_node_selector<'a, I>(items: I) -> Result<Self, RequirementError>
    where
        I: IntoIterator<Item = &'a NodeSelectorRequirement>,
    {
        let mut out = Requirements::new();
        for nsr in items {
            out.add(Requirement::from_node_selector(nsr)?);
        }
        Ok(out)
    }

    /// Builds `key In [value]` for every label.
    pub fn from_labels<I, K, V>(labels: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        labels
            .into_iter()
            .map(|(k, v)| Requirement::in_values(k, [v]))
            .collect()
    }

    fn index(&self, key: &str) -> Result<usize, usize> {
        self.items.binary_search_by(|r| r.key.as_str().cmp(key))
    }

    /// Adds a requirement, intersecting it with an existing one on the same key.
    pub fn add(&mut self, requirement: Requirement) {
        match self.index(&requirement.key) {
            Ok(i) => self.items[i].intersect_with(&requirement),
            Err(i) => self.items.insert(i, requirement),
        }
    }

    /// Adds (intersects) every requirement of `other`.
    pub fn add_all(&mut self, other: &Requirements) {
        for r in &other.items {
            match self.index(&r.key) {
                Ok(i) => self.items[i].intersect_with(r),
                Err(i) => self.items.insert(i, r.clone()),
            }
        }
    }

    /// The key-wise intersection of both collections.
    pub fn intersection(&self, other: &Requirements) -> Requirements {
        let mut out = self.clone();
        out.add_all(other);
        out
    }

    /// The requirement on `key`, if defined.
    pub fn get(&self, key: &str) -> Option<&Requirement> {
        self.index(key).ok().map(|i| &self.items[i])
    }

    /// The requirement on `key`, or `key Exists` when undefined.
    pub fn get_or_exists(&self, key: &str) -> Requirement {
        self.get(key)
            .cloned()
            .unwrap_or_else(|| Requirement::exists(key))
    }

    /// Whether `key` is defined.
    pub fn has(&self, key: &str) -> bool {
        self.index(key).is_ok()
    }

    /// Removes and returns the requirement on `key`.
    pub fn remove(&mut self, key: &str) -> Option<Requirement> {
        self.index(key).ok().map(|i| self.items.remove(i))
    }

    /// Defined keys, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.items.iter().map(|r| r.key.as_str())
    }

    /// Requirements sorted by key.
    pub fn iter(&self) -> std::slice::Iter<'_, Requirement> {
        self.items.iter()
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether no key is defined.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Whether any requirement carries minValues.
    pub fn has_min_values(&self) -> bool {
        self.items.iter().any(|r| r.min_values.is_some())
    }

    /// Walks the compatibility rules, handing each failure (built lazily, so the boolean
    /// callers never allocate) to `sink`; stops early when the sink returns `false`.
    fn check<K: KeySet + ?Sized>(
        &self,
        other: &Requirements,
        allow_undefined: &K,
        mut sink: impl FnMut(&dyn Fn() -> Incompatibility) -> bool,
    ) {
        // 1. Keys `other` constrains must be defined here, unless allowed to be undefined or
        //    the constraint accepts an absent label.
        for incoming in &other.items {
            if self.has(&incoming.key)
                || incoming.accepts_absent()
                || allow_undefined.contains_key(&incoming.key)
            {
                continue;
            }
            let reason = || Incompatibility::UndefinedKey {
                key: incoming.key.clone(),
                hint: allow_undefined
                    .keys()
                    .chain(self.keys())
                    .find(|c| looks_like(&incoming.key, c))
                    .map(str::to_owned),
            };
            if !sink(&reason) {
                return;
            }
        }
        // 2. Shared keys must overlap.
        self.check_overlap(other, sink);
    }

    fn check_overlap(
        &self,
        other: &Requirements,
        mut sink: impl FnMut(&dyn Fn() -> Incompatibility) -> bool,
    ) {
        let (mut a, mut b) = (self.items.iter().peekable(), other.items.iter().peekable());
        while let (Some(existing), Some(incoming)) = (a.peek(), b.peek()) {
            match existing.key.cmp(&incoming.key) {
                Ordering::Less => {
                    a.next();
                }
                Ordering::Greater => {
                    b.next();
                }
                Ordering::Equal => {
                    let (existing, incoming) =
                        (a.next().expect("peeked"), b.next().expect("peeked"));
                    if existing.overlaps(incoming)
                        || (incoming.accepts_absent() && existing.accepts_absent())
                    {
                        continue;
                    }
                    let reason = || Incompatibility::NoOverlap {
                        key: existing.key.clone(),
                        incoming: incoming.to_string(),
                        existing: existing.to_string(),
                    };
                    if !sink(&reason) {
                        return;
                    }
                }
            }
        }
    }

    /// Whether `other` (e.g. a pod's requirements) can be met by `self` (e.g. a NodePool's or
    /// instance type's): every key `other` constrains must be defined by `self`, unless it is
    /// in `allow_undefined` or `other` only says `NotIn`/`DoesNotExist` about it; and every
    /// shared key must [intersect](Self::intersects).
    pub fn compatible<K: KeySet + ?Sized>(
        &self,
        other: &Requirements,
        allow_undefined: &K,
    ) -> Result<(), IncompatibleRequirements> {
        let mut reasons = Vec::new();
        self.check(other, allow_undefined, |r| {
            reasons.push(r());
            true
        });
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(IncompatibleRequirements(reasons))
        }
    }

    /// [`compatible`](Self::compatible) as a boolean; stops at the first failure and
    /// allocates nothing.
    pub fn is_compatible<K: KeySet + ?Sized>(
        &self,
        other: &Requirements,
        allow_undefined: &K,
    ) -> bool {
        if other.items.iter().all(Requirement::is_single_value) {
            // Labels (`In` one value each, e.g. an offering's zone and capacity type): a
            // direct lookup per key gives the same answer as the general walk below.
            return other.items.iter().all(|incoming| {
                let value = incoming.values.first().expect("single value");
                match self.get(&incoming.key) {
                    Some(existing) => existing.has(value),
                    None => allow_undefined.contains_key(&incoming.key),
                }
            });
        }
        let mut ok = true;
        self.check(other, allow_undefined, |_| {
            ok = false;
            false
        });
        ok
    }

    /// Every key defined on both sides must admit a common value, except where both sides
    /// are `NotIn`/`DoesNotExist` (a node without the label satisfies both). Keys defined on
    /// one side only are fine.
    pub fn intersects(&self, other: &Requirements) -> Result<(), IncompatibleRequirements> {
        let mut reasons = Vec::new();
        self.check_overlap(other, |r| {
            reasons.push(r());
            true
        });
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(IncompatibleRequirements(reasons))
        }
    }

    /// [`intersects`](Self::intersects) as a boolean, without allocation.
    pub fn is_intersecting(&self, other: &Requirements) -> bool {
        let mut ok = true;
        self.check_overlap(other, |_| {
            ok = false;
            false
        });
        ok
    }

    /// Labels implied by the requirements, as upstream gives a new node: every key with a value
    /// that satisfies its requirement ([`Requirement::any`]: the one value of a single-valued
    /// `In`, the smallest of a larger `In`, an integer for `NotIn`, `Exists`, `Gt` and `Lt`),
    /// except keys no value satisfies (`DoesNotExist`) and restricted keys such as
    /// `kubernetes.io/hostname`.
    pub fn labels(&self) -> BTreeMap<String, String> {
        self.items
            .iter()
            .filter(|r| !is_restricted_label(&r.key))
            .filter_map(|r| Some((r.key.clone(), r.any()?)))
            .collect()
    }

    /// The wire form, sorted by key (see [`Requirement::to_node_selector`]).
    pub fn to_node_selector(&self) -> Vec<NodeSelectorRequirement> {
        self.items
            .iter()
            .flat_map(Requirement::to_node_selector)
            .collect()
    }
}

impl FromIterator<Requirement> for Requirements {
    fn from_iter<I: IntoIterator<Item = Requirement>>(iter: I) -> Self {
        let mut out = Requirements::new();
        for r in iter {
            out.add(r);
        }
        out
    }
}

impl Extend<Requirement> for Requirements {
    fn extend<I: IntoIterator<Item = Requirement>>(&mut self, iter: I) {
        for r in iter {
            self.add(r);
        }
    }
}

impl<'a> IntoIterator for &'a Requirements {
    type Item = &'a Requirement;
    type IntoIter = std::slice::Iter<'a, Requirement>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

impl fmt::Display for Requirements {
    /// Requirements joined with `, `.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.items.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}
