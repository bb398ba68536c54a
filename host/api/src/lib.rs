//! Karpenter API types (`karpenter.sh`): NodePool and NodeClaim (`v1`) and NodeOverlay
//! (`v1alpha1`), SIG Autoscaling's CapacityBuffer (`autoscaling.x-k8s.io/v1beta1`), plus the
//! CustomResourceDefinitions generated from them.
//!
//! The types follow upstream's JSON shape exactly: optional fields are `Option`s that are left
//! out when `None`, and duration fields keep their original text, so an object read from the API
//! server and written back is unchanged. Server-side defaults (e.g. `expireAfter: 720h`) live in
//! the CRD schema; `effective_*` helpers apply them client-side.
//!
//! [`crds`] / [`crds_yaml`] build the four CRDs from these types (kube's `CustomResource`
//! derive plus schema attributes), matching upstream's schemas: defaults, enums, patterns,
//! bounds, list/map markers and CEL validation rules.
//!
//! Well-known label, taint, annotation and finalizer names live in the pure core
//! (`joinery_core::labels`), shared by every layer.

pub mod capacitybuffer;
pub mod condition;
pub mod duration;
pub mod nodeclaim;
pub mod nodeoverlay;
pub mod nodepool;
pub mod patterns;
pub mod requirements;
mod schema;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

pub use capacitybuffer::{
    CapacityBuffer, CapacityBufferSpec, CapacityBufferStatus, LocalObjectRef, ScalableRef,
};
pub use condition::{Condition, ConditionStatus, HasConditions};
pub use duration::{Duration, DurationError, NillableDuration};
pub use nodeclaim::{NodeClaim, NodeClaimResources, NodeClaimSpec, NodeClaimStatus};
pub use nodeoverlay::{NodeOverlay, NodeOverlaySpec, NodeOverlayStatus};
pub use nodepool::{
    Budget, BudgetNodes, ConsolidationPolicy, Disruption, DisruptionReason, NodeClaimTemplate,
    NodeClaimTemplateMetadata, NodeClaimTemplateSpec, NodePool, NodePoolSpec, NodePoolStatus,
};
pub use requirements::{
    NodeClassReference, NodeSelectorRequirement, NodeSelectorRequirementWithMinValues, Operator,
    ResourceList,
};
pub use schema::{property_paths, schema_at};

/// The four CRDs (`karpenter.sh` NodePools, NodeClaims, NodeOverlays and
/// `autoscaling.x-k8s.io` CapacityBuffers), generated from the types in this crate.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        schema::finalize_crd(NodePool::crd()),
        schema::finalize_crd(NodeClaim::crd()),
        schema::finalize_crd(NodeOverlay::crd()),
        schema::finalize_crd(CapacityBuffer::crd()),
    ]
}

/// [`crds`] as one multi-document YAML stream (each document starts with `---`).
pub fn crds_yaml() -> String {
    crds()
        .iter()
        .map(|crd| {
            let mut value = serde_json::to_value(crd).expect("CRD serializes");
            schema::integral_floats_to_ints(&mut value);
            format!(
                "---\n{}",
                serde_norway::to_string(&value).expect("CRD serializes to YAML")
            )
        })
        .collect()
}
