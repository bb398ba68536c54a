//! Realistic objects deserialize into our types and serialize back to the same JSON, and are
//! valid under upstream's schemas.

use crate::common;

use std::time::Duration as StdDuration;

use common::{crd_pairs, read_fixture, schema_of, validate, yaml_value};
use joinery_api::{
    ConsolidationPolicy, DisruptionReason, HasConditions, NodeClaim, NodeOverlay, NodePool,
    Operator, condition::types,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// Parses a fixture into `T` (through YAML directly and through a JSON value) and checks that
/// serializing gives back exactly the fixture's JSON value.
fn round_trip<T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug>(rel: &str) -> T {
    let text = read_fixture(rel);
    let original = yaml_value(&text);
    let from_yaml: T = serde_norway::from_str(&text).unwrap_or_else(|e| panic!("{rel}: {e}"));
    let from_value: T =
        serde_json::from_value(original.clone()).unwrap_or_else(|e| panic!("{rel}: {e}"));
    assert_eq!(
        from_yaml, from_value,
        "{rel}: YAML and JSON parsing disagree"
    );
    let back = serde_json::to_value(&from_yaml).expect("serializes");
    assert_eq!(
        back,
        original,
        "{rel}: re-serialized object differs\n--- original\n{}\n--- ours\n{}",
        serde_json::to_string_pretty(&original).unwrap(),
        serde_json::to_string_pretty(&back).unwrap()
    );
    // A second pass is stable too.
    let again: T = serde_json::from_value(back).expect("re-parses");
    assert_eq!(again, from_yaml, "{rel}: second pass differs");
    from_yaml
}

/// Validates a fixture against upstream's schema for its kind.
fn assert_valid_upstream(rel: &str, upstream_file: &str) {
    let object = yaml_value(&read_fixture(rel));
    let pair = crd_pairs()
        .into_iter()
        .find(|p| p.file == upstream_file)
        .expect("known CRD");
    for (which, schema) in [
        ("upstream", schema_of(&pair.upstream)),
        ("ours", schema_of(&pair.ours)),
    ] {
        let mut errors = Vec::new();
        validate(schema, &object, "", &mut errors);
        assert!(
            errors.is_empty(),
            "{rel} invalid under {which} schema:\n  {}",
            errors.join("\n  ")
        );
    }
}

#[test]
fn nodepool_full_round_trips() {
    let np: NodePool = round_trip("objects/nodepool-full.yaml");
    assert_valid_upstream("objects/nodepool-full.yaml", "karpenter.sh_nodepools.yaml");

    let tmpl = &np.spec.template.spec;
    assert_eq!(tmpl.requirements.len(), 9);
    assert_eq!(tmpl.requirements[1].min_values, Some(3));
    assert_eq!(tmpl.requirements[2].operator, Operator::Gte);
    assert_eq!(tmpl.requirements[3].operator, Operator::Lte);
    assert_eq!(tmpl.requirements[8].values, Some(vec![]));
    assert_eq!(tmpl.requirements[7].values, None);
    assert_eq!(
        tmpl.expire_after.as_ref().and_then(|d| d.duration()),
        Some(StdDuration::from_secs(720 * 3600))
    );
    assert_eq!(
        tmpl.termination_grace_period.as_ref().map(|d| d.duration()),
        Some(StdDuration::from_secs(48 * 3600))
    );

    let disruption = np.spec.disruption.as_ref().expect("disruption");
    assert_eq!(
        disruption.consolidate_after.as_ref().map(|d| d.as_str()),
        Some("1m30s")
    );
    let budgets = disruption.budgets.as_ref().expect("budgets");
    assert_eq!(budgets[1].schedule.as_deref(), Some("0 9 * * mon-fri"));
    assert_eq!(
        budgets[1].duration.as_ref().map(|d| d.duration()),
        Some(StdDuration::from_secs(8 * 3600))
    );
    assert!(budgets[1].applies_to(DisruptionReason::Empty));
    assert!(!budgets[1].applies_to(DisruptionReason::Drifted));
    assert!(budgets[0].applies_to(DisruptionReason::Drifted));
    assert_eq!(
        budgets[2].duration.as_ref().map(|d| d.as_str()),
        Some("1h30m")
    );

    let status = np.status.as_ref().expect("status");
    assert_eq!(status.nodes, Some(3));
    assert!(status.is_condition_true(types::READY));
    assert!(!status.is_condition_true(types::NODE_REGISTRATION_HEALTHY));
}

#[test]
fn nodepool_static_never_round_trips() {
    let np: NodePool = round_trip("objects/nodepool-static-never.yaml");
    assert_valid_upstream(
        "objects/nodepool-static-never.yaml",
        "karpenter.sh_nodepools.yaml",
    );
    assert!(np.spec.is_static());
    let disruption = np.spec.disruption.as_ref().expect("disruption");
    assert!(
        disruption
            .consolidate_after
            .as_ref()
            .is_some_and(|d| d.is_never())
    );
    assert_eq!(
        disruption.consolidation_policy,
        Some(ConsolidationPolicy::WhenEmpty)
    );
    let expire = np
        .spec
        .template
        .spec
        .expire_after
        .as_ref()
        .expect("expireAfter");
    assert!(expire.is_never());
    assert_eq!(expire.as_str(), "Never");
}

#[test]
fn nodepool_minimal_round_trips_and_defaults_apply_client_side() {
    let np: NodePool = round_trip("objects/nodepool-minimal.yaml");
    assert_valid_upstream(
        "objects/nodepool-minimal.yaml",
        "karpenter.sh_nodepools.yaml",
    );
    assert!(np.spec.disruption.is_none());
    assert!(np.status.is_none());
    let effective = np.spec.effective_disruption();
    assert_eq!(
        effective.consolidate_after.as_ref().map(|d| d.as_str()),
        Some("0s")
    );
    assert_eq!(
        effective.consolidation_policy,
        Some(ConsolidationPolicy::WhenEmptyOrUnderutilized)
    );
    let budgets = effective.budgets.expect("default budget");
    assert_eq!(budgets.len(), 1);
    assert_eq!(budgets[0].nodes, "10%");
    assert_eq!(
        budgets[0].nodes_value().map(|n| n.allowed(15)),
        Some(2),
        "10% of 15 rounds up to 2"
    );
    assert_eq!(
        np.spec.template.spec.effective_expire_after().as_str(),
        "720h"
    );
}

#[test]
fn nodeclaim_round_trips() {
    let nc: NodeClaim = round_trip("objects/nodeclaim.yaml");
    assert_valid_upstream("objects/nodeclaim.yaml", "karpenter.sh_nodeclaims.yaml");
    let status = nc.status.as_ref().expect("status");
    assert_eq!(
        status.provider_id.as_deref(),
        Some("kwok://general-purpose-x7k2p")
    );
    assert_eq!(status.image_id.as_deref(), Some("kwok-image-2025.03"));
    assert!(status.last_pod_event_time.is_some());
    for t in types::NODE_CLAIM_READY_DEPENDENTS {
        assert!(status.is_condition_true(t), "{t}");
    }
    let drifted = status.condition(types::DRIFTED).expect("Drifted");
    assert!(drifted.is_unknown());
    assert_eq!(drifted.reason, "");
    assert_eq!(
        nc.spec
            .termination_grace_period
            .as_ref()
            .map(|d| d.duration()),
        Some(StdDuration::from_secs(9000))
    );
    assert_eq!(
        nc.spec.node_class_ref.label_key(),
        "karpenter.kwok.sh/kwoknodeclass"
    );
}

#[test]
fn nodeoverlays_round_trip() {
    let adj: NodeOverlay = round_trip("objects/nodeoverlay-adjustment.yaml");
    assert_valid_upstream(
        "objects/nodeoverlay-adjustment.yaml",
        "karpenter.sh_nodeoverlays.yaml",
    );
    assert_eq!(adj.spec.price_adjustment.as_deref(), Some("-15%"));
    assert_eq!(adj.spec.weight, Some(20));
    assert!(
        adj.spec
            .capacity
            .as_ref()
            .is_some_and(|c| c.contains_key("hugepages-2Mi"))
    );

    let price: NodeOverlay = round_trip("objects/nodeoverlay-price.yaml");
    assert_valid_upstream(
        "objects/nodeoverlay-price.yaml",
        "karpenter.sh_nodeoverlays.yaml",
    );
    assert_eq!(price.spec.price.as_deref(), Some("0.125"));
    assert!(price.status.is_none());
}

#[test]
fn capacitybuffer_round_trips() {
    use joinery_api::{CapacityBuffer, HasConditions};
    let cb: CapacityBuffer = round_trip("objects/capacitybuffer.yaml");
    assert_valid_upstream(
        "objects/capacitybuffer.yaml",
        "autoscaling.x-k8s.io_capacitybuffers.yaml",
    );
    assert_eq!(cb.spec.percentage, Some(20));
    assert_eq!(cb.spec.replicas, Some(1));
    let scalable = cb.spec.scalable_ref.as_ref().expect("scalableRef");
    assert_eq!(
        (scalable.api_group.as_str(), scalable.kind.as_str()),
        ("apps", "Deployment")
    );
    let status = cb.status.as_ref().expect("status");
    assert_eq!(status.replicas, Some(2));
    assert!(status.is_condition_true("ReadyForProvisioning"));
}

#[test]
fn objects_built_in_code_are_schema_valid() {
    use joinery_api::{
        Budget, Disruption, NillableDuration, NodeClaimTemplate, NodeClaimTemplateSpec,
        NodeClassReference, NodePoolSpec, NodeSelectorRequirementWithMinValues,
    };
    let mut np = NodePool::new(
        "built",
        NodePoolSpec {
            template: NodeClaimTemplate {
                metadata: None,
                spec: NodeClaimTemplateSpec {
                    taints: None,
                    startup_taints: None,
                    requirements: vec![NodeSelectorRequirementWithMinValues::new(
                        "kubernetes.io/arch",
                        Operator::In,
                        vec!["amd64".into()],
                    )],
                    node_class_ref: NodeClassReference::new(
                        "karpenter.kwok.sh",
                        "KWOKNodeClass",
                        "default",
                    ),
                    expire_after: Some(NillableDuration::from_std(StdDuration::from_secs(3600))),
                    termination_grace_period: None,
                },
            },
            disruption: Some(Disruption {
                consolidate_after: Some(NillableDuration::never()),
                consolidation_policy: Some(ConsolidationPolicy::Balanced),
                budgets: Some(vec![Budget::default()]),
            }),
            limits: None,
            weight: Some(10),
            replicas: None,
        },
    );
    np.status = None;
    let value = serde_json::to_value(&np).expect("serializes");
    assert_eq!(value["apiVersion"], "karpenter.sh/v1");
    assert_eq!(value["kind"], "NodePool");
    assert_eq!(value["spec"]["template"]["spec"]["expireAfter"], "1h0m0s");
    assert!(
        value["spec"].get("limits").is_none(),
        "None fields are omitted"
    );
    let pair = crd_pairs()
        .into_iter()
        .find(|p| p.file == "karpenter.sh_nodepools.yaml")
        .unwrap();
    let mut errors = Vec::new();
    validate(schema_of(&pair.upstream), &value, "", &mut errors);
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
fn invalid_durations_are_rejected() {
    let text = read_fixture("objects/nodepool-minimal.yaml").replace(
        "    spec:\n      nodeClassRef",
        "    spec:\n      expireAfter: forever\n      nodeClassRef",
    );
    let err = serde_norway::from_str::<NodePool>(&text).expect_err("bad duration");
    assert!(err.to_string().contains("forever"), "{err}");
    // The fixture edit itself is well-formed: with a valid value it parses.
    let ok = text.replace("forever", "90m");
    let np: NodePool = serde_norway::from_str(&ok).expect("valid");
    assert_eq!(
        np.spec
            .template
            .spec
            .expire_after
            .and_then(|d| d.duration()),
        Some(StdDuration::from_secs(5400))
    );
    let _: Value = yaml_value(&ok);
}
