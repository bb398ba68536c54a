//! CRD names, scope, versions, subresources and printer columns against upstream.

use crate::common;

use common::crd_pairs;
use joinery_api::{CapacityBuffer, NodeClaim, NodeOverlay, NodePool};
use kube::{CustomResourceExt, Resource};

#[test]
fn names_and_scope_match_upstream() {
    for pair in crd_pairs() {
        let (u, o) = (&pair.upstream, &pair.ours);
        assert_eq!(
            o["metadata"]["name"], u["metadata"]["name"],
            "{}",
            pair.file
        );
        assert_eq!(o["spec"]["group"], u["spec"]["group"], "{}", pair.file);
        assert_eq!(o["spec"]["scope"], u["spec"]["scope"], "{}", pair.file);
        // kind, listKind, plural, singular, shortNames, categories.
        assert_eq!(o["spec"]["names"], u["spec"]["names"], "{}", pair.file);
    }
}

#[test]
fn versions_and_subresources_match_upstream() {
    for pair in crd_pairs() {
        let (u, o) = (
            &pair.upstream["spec"]["versions"],
            &pair.ours["spec"]["versions"],
        );
        assert_eq!(o.as_array().map(Vec::len), Some(1), "{}", pair.file);
        for key in ["name", "served", "storage", "subresources"] {
            assert_eq!(o[0][key], u[0][key], "{}: {key}", pair.file);
        }
    }
}

#[test]
fn printer_columns_match_upstream() {
    for pair in crd_pairs() {
        let key = "additionalPrinterColumns";
        assert_eq!(
            pair.ours["spec"]["versions"][0][key], pair.upstream["spec"]["versions"][0][key],
            "{}",
            pair.file
        );
    }
}

#[test]
fn resource_metadata_is_consistent() {
    assert_eq!(NodePool::api_version(&()), "karpenter.sh/v1");
    assert_eq!(NodePool::plural(&()), "nodepools");
    assert_eq!(NodeClaim::api_version(&()), "karpenter.sh/v1");
    assert_eq!(NodeClaim::kind(&()), "NodeClaim");
    assert_eq!(NodeOverlay::api_version(&()), "karpenter.sh/v1alpha1");
    assert_eq!(NodeOverlay::shortnames(), &["overlays"]);
    assert_eq!(NodeOverlay::crd_name(), "nodeoverlays.karpenter.sh");
    assert_eq!(
        CapacityBuffer::api_version(&()),
        "autoscaling.x-k8s.io/v1beta1"
    );
    assert_eq!(CapacityBuffer::shortnames(), &["cb"]);
    assert_eq!(
        std::any::type_name::<<CapacityBuffer as Resource>::Scope>(),
        std::any::type_name::<k8s_openapi::NamespaceResourceScope>()
    );
    // Cluster-scoped: kube derives no namespace scope.
    assert_eq!(
        std::any::type_name::<<NodePool as Resource>::Scope>(),
        std::any::type_name::<k8s_openapi::ClusterResourceScope>()
    );
}
