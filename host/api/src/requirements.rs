//! Sub-types shared by several kinds: scheduling requirements, NodeClass references and
//! resource lists.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A map from resource name (`cpu`, `memory`, `nodes`, `nvidia.com/gpu`, ...) to quantity.
pub type ResourceList = BTreeMap<String, Quantity>;

/// Relationship between a requirement's key and its values: the core's operator (the six
/// Kubernetes node-selector operators plus Karpenter's inclusive `Gte`/`Lte`), one type from
/// the CRDs to the scheduler. Its CRD schema is `schema::operator`.
pub use joinery_core::requirements::Operator;

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
    #[schemars(schema_with = "crate::schema::operator")]
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
    #[schemars(schema_with = "crate::schema::operator")]
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
