//! Taints and tolerations with Kubernetes matching rules.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::labels::{DISRUPTED_TAINT_KEY, UNREGISTERED_TAINT_KEY};

/// What a taint does to pods that do not tolerate it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TaintEffect {
    /// New pods are not scheduled onto the node.
    NoSchedule,
    /// The scheduler avoids the node if it can.
    PreferNoSchedule,
    /// New pods are not scheduled and running pods are evicted.
    NoExecute,
}

impl TaintEffect {
    /// The Kubernetes spelling (`NoSchedule`, `PreferNoSchedule`, `NoExecute`).
    pub fn as_str(self) -> &'static str {
        match self {
            TaintEffect::NoSchedule => "NoSchedule",
            TaintEffect::PreferNoSchedule => "PreferNoSchedule",
            TaintEffect::NoExecute => "NoExecute",
        }
    }
}

impl fmt::Display for TaintEffect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A node taint. An empty `value` means the taint has no value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Taint {
    /// Taint key.
    pub key: String,
    /// Taint value; empty when absent.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// Taint effect.
    pub effect: TaintEffect,
}

impl Taint {
    /// A taint with a value.
    pub fn new(key: impl Into<String>, value: impl Into<String>, effect: TaintEffect) -> Self {
        Taint {
            key: key.into(),
            value: value.into(),
            effect,
        }
    }

    /// A taint without a value.
    pub fn without_value(key: impl Into<String>, effect: TaintEffect) -> Self {
        Taint::new(key, "", effect)
    }

    /// `karpenter.sh/unregistered:NoExecute`, carried by nodes until registration.
    pub fn unregistered() -> Self {
        Taint::without_value(UNREGISTERED_TAINT_KEY, TaintEffect::NoExecute)
    }

    /// `karpenter.sh/disrupted:NoSchedule`, put on nodes being disrupted or terminated.
    pub fn disrupted() -> Self {
        Taint::without_value(DISRUPTED_TAINT_KEY, TaintEffect::NoSchedule)
    }

    /// Whether two taints are "the same taint" for Kubernetes: same key and effect (the
    /// value does not matter).
    pub fn matches(&self, other: &Taint) -> bool {
        self.key == other.key && self.effect == other.effect
    }
}

impl fmt::Display for Taint {
    /// `key=value:Effect`, or `key:Effect` without value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{}", self.key, self.effect)
        } else {
            write!(f, "{}={}:{}", self.key, self.value, self.effect)
        }
    }
}

/// How a toleration compares against a taint.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TolerationOperator {
    /// Key and value must be equal (the Kubernetes default).
    #[default]
    Equal,
    /// Any value (and, with an empty key, any key).
    Exists,
}

/// A pod toleration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Toleration {
    /// Taint key to match; empty matches every key (with [`TolerationOperator::Exists`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    /// Comparison operator.
    #[serde(default)]
    pub operator: TolerationOperator,
    /// Value compared with [`TolerationOperator::Equal`].
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// Effect to match; `None` matches every effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,
    /// For NoExecute: how long the pod stays bound after the taint appears.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub toleration_seconds: Option<i64>,
}

impl Toleration {
    /// Tolerates taints with `key` (any value) and, if given, `effect`.
    pub fn exists(key: impl Into<String>, effect: Option<TaintEffect>) -> Self {
        Toleration {
            key: key.into(),
            operator: TolerationOperator::Exists,
            effect,
            ..Default::default()
        }
    }

    /// Tolerates taints with `key=value` and, if given, `effect`.
    pub fn equal(
        key: impl Into<String>,
        value: impl Into<String>,
        effect: Option<TaintEffect>,
    ) -> Self {
        Toleration {
            key: key.into(),
            operator: TolerationOperator::Equal,
            value: value.into(),
            effect,
            toleration_seconds: None,
        }
    }

    /// Tolerates every taint (empty key, `Exists`, any effect).
    pub fn everything() -> Self {
        Toleration::exists("", None)
    }

    /// Kubernetes' matching rule: the effect must match unless the toleration's is empty,
    /// the key must match unless the toleration's is empty, then `Exists` accepts any value
    /// and `Equal` needs equal values.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if self.effect.is_some_and(|e| e != taint.effect) {
            return false;
        }
        if !self.key.is_empty() && self.key != taint.key {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => true,
            TolerationOperator::Equal => self.value == taint.value,
        }
    }
}

/// Taints that a set of tolerations does not tolerate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("did not tolerate taint {}", list(.0))]
pub struct UntoleratedTaints(pub Vec<Taint>);

fn list(taints: &[Taint]) -> String {
    taints
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether any of `tolerations` tolerates `taint`.
pub fn tolerated_by(taint: &Taint, tolerations: &[Toleration]) -> bool {
    tolerations.iter().any(|t| t.tolerates(taint))
}

/// Checks that every taint (whatever its effect, PreferNoSchedule included) is tolerated;
/// the error lists all that are not.
pub fn tolerates_all(
    tolerations: &[Toleration],
    taints: &[Taint],
) -> Result<(), UntoleratedTaints> {
    // Fast path without allocation.
    if taints.iter().all(|t| tolerated_by(t, tolerations)) {
        return Ok(());
    }
    Err(UntoleratedTaints(
        taints
            .iter()
            .filter(|t| !tolerated_by(t, tolerations))
            .cloned()
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaintEffect::*;

    #[test]
    fn empty_key_exists_tolerates_everything() {
        let t = Toleration::everything();
        for taint in [
            Taint::new("a", "b", NoSchedule),
            Taint::without_value("c", NoExecute),
            Taint::new("d", "e", PreferNoSchedule),
        ] {
            assert!(t.tolerates(&taint), "{taint}");
        }
        // Empty key but a fixed effect only tolerates that effect.
        let t = Toleration::exists("", Some(NoExecute));
        assert!(t.tolerates(&Taint::new("a", "b", NoExecute)));
        assert!(!t.tolerates(&Taint::new("a", "b", NoSchedule)));
    }

    #[test]
    fn equal_needs_matching_value() {
        let t = Toleration::equal("dedicated", "gpu", Some(NoSchedule));
        assert!(t.tolerates(&Taint::new("dedicated", "gpu", NoSchedule)));
        assert!(!t.tolerates(&Taint::new("dedicated", "cpu", NoSchedule)));
        assert!(!t.tolerates(&Taint::new("other", "gpu", NoSchedule)));
        assert!(!t.tolerates(&Taint::new("dedicated", "gpu", NoExecute)));
        // Equal with empty value matches a taint without value.
        assert!(Toleration::equal("k", "", None).tolerates(&Taint::without_value("k", NoSchedule)));
    }

    #[test]
    fn exists_ignores_value_and_empty_effect_matches_all() {
        let t = Toleration::exists("dedicated", None);
        assert!(t.tolerates(&Taint::new("dedicated", "x", NoSchedule)));
        assert!(t.tolerates(&Taint::new("dedicated", "y", NoExecute)));
        assert!(t.tolerates(&Taint::without_value("dedicated", PreferNoSchedule)));
        assert!(!t.tolerates(&Taint::without_value("other", NoSchedule)));
    }

    #[test]
    fn tolerates_all_names_untolerated_taints() {
        let taints = vec![
            Taint::new("a", "1", NoSchedule),
            Taint::without_value("b", PreferNoSchedule),
            Taint::new("c", "3", NoExecute),
        ];
        let tolerations = vec![Toleration::exists("a", None)];
        let err = tolerates_all(&tolerations, &taints).unwrap_err();
        assert_eq!(err.0, vec![taints[1].clone(), taints[2].clone()]);
        assert_eq!(
            err.to_string(),
            "did not tolerate taint b:PreferNoSchedule, c=3:NoExecute"
        );
        assert!(tolerates_all(&[Toleration::everything()], &taints).is_ok());
        assert!(tolerates_all(&[], &[]).is_ok());
    }

    #[test]
    fn well_known_taints_and_matching() {
        assert_eq!(
            Taint::unregistered().to_string(),
            "karpenter.sh/unregistered:NoExecute"
        );
        assert_eq!(
            Taint::disrupted().to_string(),
            "karpenter.sh/disrupted:NoSchedule"
        );
        assert!(Taint::new("k", "a", NoSchedule).matches(&Taint::new("k", "b", NoSchedule)));
        assert!(!Taint::new("k", "a", NoSchedule).matches(&Taint::new("k", "a", NoExecute)));
    }

    #[test]
    fn serde_uses_kubernetes_shape() {
        let t: Toleration = serde_json::from_str(
            r#"{"key":"k","operator":"Exists","effect":"NoExecute","tolerationSeconds":30}"#,
        )
        .unwrap();
        assert_eq!(t.operator, TolerationOperator::Exists);
        assert_eq!(t.toleration_seconds, Some(30));
        assert_eq!(t.effect, Some(NoExecute));
        let d: Toleration = serde_json::from_str(r#"{"key":"k","value":"v"}"#).unwrap();
        assert_eq!(d.operator, TolerationOperator::Equal);
        let taint: Taint = serde_json::from_str(r#"{"key":"k","effect":"NoSchedule"}"#).unwrap();
        assert_eq!(taint, Taint::without_value("k", NoSchedule));
        assert_eq!(
            serde_json::to_string(&taint).unwrap(),
            r#"{"key":"k","effect":"NoSchedule"}"#
        );
    }
}
