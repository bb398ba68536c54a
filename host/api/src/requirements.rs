//! Sub-types shared by several kinds: scheduling requirements, NodeClass references and
//! resource lists.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A map from resource name (`cpu`, `memory`, `nodes`, `nvidia.com/gpu`, ...) to quantity.
pub type ResourceList = BTreeMap<String, Quantity>;

/// Relationship between a requirement's key and its values.
///
/// The first six are the Kubernetes node-selector operators; `Gte` and `Lte` are Karpenter
/// extensions (inclusive integer comparisons).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Operator {
    /// The label value is one of `values`.
    In,
    /// The label value is none of `values` (or the label is absent).
    NotIn,
    /// The label is present (`values` must be empty).
    Exists,
    /// The label is absent (`values` must be empty).
    DoesNotExist,
    /// The label value, as an integer, is greater than the single value.
    Gt,
    /// The label value, as an integer, is less than the single value.
    Lt,
    /// The label value, as an integer, is greater than or equal to the single value.
    Gte,
    /// The label value, as an integer, is less than or equal to the single value.
    Lte,
}

impl Operator {
    /// The wire form of the operator.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::In => "In",
            Self::NotIn => "NotIn",
            Self::Exists => "Exists",
            Self::DoesNotExist => "DoesNotExist",
            Self::Gt => "Gt",
            Self::Lt => "Lt",
            Self::Gte => "Gte",
            Self::Lte => "Lte",
        }
    }

    /// Whether the operator compares a single integer value (`Gt`, `Lt`, `Gte`, `Lte`).
    pub fn is_numeric(self) -> bool {
        matches!(self, Self::Gt | Self::Lt | Self::Gte | Self::Lte)
    }
}

impl std::fmt::Display for Operator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A node selector requirement with an optional minimum number of distinct values
/// (NodePool and NodeClaim `requirements`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirementWithMinValues {
    /// Label key the requirement constrains.
    #[schemars(extend(
        "maxLength" = 316,
        "pattern" = crate::patterns::QUALIFIED_NAME,
        "x-kubernetes-validations" = crate::schema::requirement_key_rules()
    ))]
    pub key: String,
    /// How the key relates to `values`.
    pub operator: Operator,
    /// Values for `In`/`NotIn` (non-empty), a single integer for `Gt`/`Lt`/`Gte`/`Lte`, and
    /// nothing for `Exists`/`DoesNotExist`.
    //
    // `maxLength`/`pattern` sit on the array itself, exactly where upstream's generated CRD has
    // them (so the API server accepts the same objects; it ignores string keywords on arrays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "atomic",
        "maxLength" = 63,
        "pattern" = crate::patterns::LABEL_VALUE
    ))]
    pub values: Option<Vec<String>>,
    /// Alpha: the minimum number of distinct values of this key the instance types chosen for a
    /// launch must span (1..=50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::schema::min_values")]
    pub min_values: Option<i64>,
}

impl NodeSelectorRequirementWithMinValues {
    /// A requirement without `minValues`.
    pub fn new(key: impl Into<String>, operator: Operator, values: Vec<String>) -> Self {
        Self {
            key: key.into(),
            operator,
            values: if values.is_empty() {
                None
            } else {
                Some(values)
            },
            min_values: None,
        }
    }

    /// The values (empty when absent).
    pub fn values(&self) -> &[String] {
        self.values.as_deref().unwrap_or_default()
    }
}

/// A node selector requirement used by NodeOverlay (no `minValues`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSelectorRequirement {
    /// Label key the requirement constrains.
    #[schemars(extend(
        "maxLength" = 316,
        "pattern" = crate::patterns::QUALIFIED_NAME,
        "x-kubernetes-validations" = crate::schema::requirement_key_rules()
    ))]
    pub key: String,
    /// How the key relates to `values`.
    pub operator: Operator,
    /// Values for `In`/`NotIn` (non-empty), a single integer for `Gt`/`Lt`/`Gte`/`Lte`, and
    /// nothing for `Exists`/`DoesNotExist`.
    //
    // `maxLength`/`pattern` sit on the array itself, exactly where upstream's generated CRD has
    // them (so the API server accepts the same objects; it ignores string keywords on arrays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "atomic",
        "maxLength" = 63,
        "pattern" = crate::patterns::LABEL_VALUE
    ))]
    pub values: Option<Vec<String>>,
}

impl NodeSelectorRequirement {
    /// A requirement with the given values.
    pub fn new(key: impl Into<String>, operator: Operator, values: Vec<String>) -> Self {
        Self {
            key: key.into(),
            operator,
            values: if values.is_empty() {
                None
            } else {
                Some(values)
            },
        }
    }

    /// The values (empty when absent).
    pub fn values(&self) -> &[String] {
        self.values.as_deref().unwrap_or_default()
    }
}

/// Reference to the provider-specific NodeClass object (e.g. `karpenter.kwok.sh/KWOKNodeClass`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassReference {
    /// Kind of the NodeClass.
    #[schemars(extend("x-kubernetes-validations" = crate::schema::not_empty_rule("kind")))]
    pub kind: String,
    /// Name of the NodeClass object.
    #[schemars(extend("x-kubernetes-validations" = crate::schema::not_empty_rule("name")))]
    pub name: String,
    /// API group of the NodeClass (no version).
    #[schemars(extend(
        "pattern" = crate::patterns::NODE_CLASS_GROUP,
        "x-kubernetes-validations" = crate::schema::not_empty_rule("group")
    ))]
    pub group: String,
}

impl NodeClassReference {
    /// Builds a reference.
    pub fn new(group: impl Into<String>, kind: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            kind: kind.into(),
            name: name.into(),
        }
    }

    /// The label core puts on NodeClaims and Nodes to record their NodeClass:
    /// `<group>/<lowercase kind>` (e.g. `karpenter.kwok.sh/kwoknodeclass`).
    pub fn label_key(&self) -> String {
        format!("{}/{}", self.group, self.kind.to_lowercase())
    }
}
