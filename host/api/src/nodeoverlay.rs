//! `karpenter.sh/v1alpha1` NodeOverlay.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::condition::{Condition, HasConditions};
use crate::requirements::{NodeSelectorRequirement, ResourceList};

/// Desired state of a NodeOverlay: an adjustment to the price or extended resources of the
/// instance types matching its requirements, applied before scheduling simulations.
// kube's `printcolumn(...)` entries repeat `type_ = "..."`, which clippy mistakes for
// duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1alpha1",
    kind = "NodeOverlay",
    plural = "nodeoverlays",
    singular = "nodeoverlay",
    shortname = "overlays",
    status = "NodeOverlayStatus",
    category = "karpenter",
    derive = "PartialEq",
    doc = "A NodeOverlay: a price or capacity adjustment for the instance types matching its requirements.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].status"#
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "Weight",
        type_ = "integer",
        json_path = ".spec.weight",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = crate::schema::overlay_spec_rules()))]
pub struct NodeOverlaySpec {
    /// Which instance types (by well-known or NodePool template labels) the overlay applies
    /// to; at most 100.
    #[schemars(extend(
        "maxItems" = 100,
        "x-kubernetes-list-type" = "atomic",
        "x-kubernetes-validations" = crate::schema::overlay_requirements_rules()
    ))]
    pub requirements: Vec<NodeSelectorRequirement>,
    /// Absolute price replacing the matching offerings' price (decimal string). Exclusive with
    /// `priceAdjustment`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::OVERLAY_PRICE))]
    pub price: Option<String>,
    /// Change applied to the matching offerings' price: a signed amount (`-0.5`, `+1.2`) or a
    /// percentage (`+10%`, `-15%`); the result never drops below zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("pattern" = crate::patterns::OVERLAY_PRICE_ADJUSTMENT))]
    pub price_adjustment: Option<String>,
    /// Extended resources added to the matching instance types (standard resources such as
    /// cpu and memory cannot be changed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("x-kubernetes-validations" = crate::schema::overlay_capacity_rules()))]
    pub capacity: Option<ResourceList>,
    /// Precedence among overlays, 1..=10000 (higher wins; absent means 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub weight: Option<i32>,
}

/// Observed state of a NodeOverlay.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeOverlayStatus {
    /// Readiness signals (`ValidationSucceeded`, `Ready`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend(
        "x-kubernetes-list-type" = "map",
        "x-kubernetes-list-map-keys" = ["type"]
    ))]
    pub conditions: Option<Vec<Condition>>,
}

impl HasConditions for NodeOverlayStatus {
    fn conditions(&self) -> &[Condition] {
        self.conditions.as_deref().unwrap_or_default()
    }

    fn conditions_mut(&mut self) -> &mut Vec<Condition> {
        self.conditions.get_or_insert_with(Vec::new)
    }
}
