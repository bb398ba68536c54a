use serde_json::json;

use super::*;

fn pool(annotations: serde_json::Value) -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": "gpu", "annotations": annotations},
        "spec": {"template": {"spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []}}}
    }))
    .unwrap()
}

#[test]
fn a_pool_without_annotations_has_upstreams_settings() {
    let (settings, problems) = pool_settings(&pool(json!({})));
    assert_eq!(settings, PoolRepair::default());
    assert_eq!(settings.percent(), 20);
    assert!(problems.is_empty());
}

#[test]
fn the_repair_annotations_are_read() {
    let (settings, problems) = pool_settings(&pool(json!({
        "joinery.dev/repair-max-unhealthy": "50%",
        "joinery.dev/repair-toleration": "Ready=2m, MemoryPressure=30s",
        "joinery.dev/repair-reboot-first": "true",
        "joinery.dev/do-not-repair": "false",
    })));
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(settings.max_unhealthy_percent, Some(50));
    assert_eq!(settings.toleration, None);
    assert_eq!(
        settings.tolerations,
        BTreeMap::from([
            ("MemoryPressure".to_string(), Duration::from_secs(30)),
            ("Ready".to_string(), Duration::from_secs(120)),
        ])
    );
    assert!(settings.reboot_first && !settings.do_not_repair);
    let (settings, _) = pool_settings(&pool(json!({"joinery.dev/repair-toleration": "90s"})));
    assert_eq!(settings.toleration, Some(Duration::from_secs(90)));
}

#[test]
fn a_bad_value_is_refused_with_the_pool_annotation_and_value_named() {
    let (settings, problems) = pool_settings(&pool(json!({
        "joinery.dev/repair-max-unhealthy": "half",
        "joinery.dev/repair-toleration": "soon",
        "joinery.dev/do-not-repair": "yes",
    })));
    assert_eq!(settings, PoolRepair::default(), "every default applies");
    assert_eq!(problems.len(), 3);
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert!(
        text.iter().any(|t| {
            t.starts_with(
        "NodePool gpu: annotation joinery.dev/repair-max-unhealthy: \"half\" is not a percentage"
    )
        }),
        "{text:?}"
    );
    assert!(
        text.iter().any(|t| t.starts_with(
            "NodePool gpu: annotation joinery.dev/repair-toleration: \"soon\" is not a duration"
        )),
        "{text:?}"
    );
    assert!(
        text.iter()
            .any(|t| t.contains("joinery.dev/do-not-repair: \"yes\" is not \"true\" or \"false\"")),
        "{text:?}"
    );
    assert!(
        text.iter()
            .all(|t| t.ends_with("the default applies until it is fixed"))
    );
    for bad in ["120%", "-1%", "20", "Ready=", "=5m", "Ready=5x"] {
        let key = if bad.contains('=') {
            "joinery.dev/repair-toleration"
        } else {
            "joinery.dev/repair-max-unhealthy"
        };
        let (_, problems) = pool_settings(&pool(json!({key: bad})));
        assert_eq!(problems.len(), 1, "{bad:?} must be refused");
    }
}

#[test]
fn nodes_and_claims_become_the_cores_inputs() {
    let node: LeanNode = serde_json::from_value(json!({
        "metadata": {"name": "n1", "labels": {"karpenter.sh/nodepool": "gpu"},
                     "annotations": {"joinery.dev/do-not-repair": "true"}},
        "spec": {"providerID": "sim://i-1"},
        "status": {"conditions": [{"type": "Ready", "status": "Unknown", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    }))
    .unwrap();
    let claim: NodeClaim = serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "c1", "labels": {"karpenter.sh/nodepool": "gpu"},
                     "annotations": {"joinery.dev/repair-rebooted-at": "2026-01-01T00:10:00Z",
                                     "karpenter.sh/nodeclaim-termination-timestamp": "garbage"}},
        "spec": {"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []},
        "status": {"providerID": "sim://i-1"}
    }))
    .unwrap();
    let twin = claim.clone();
    let by_pid = claims_by_provider_id([&claim, &twin]);
    assert!(
        by_pid.is_empty(),
        "a provider ID two claims share finds no claim"
    );
    let by_pid = claims_by_provider_id([&claim]);
    let found = by_pid.get(node.provider_id().unwrap()).unwrap();
    let repair = repair_node(
        &node,
        Some(repair_claim(found, true)),
        joinery_core::repair::default_policies().into(),
    );
    assert_eq!(repair.pool_label.as_deref(), Some("gpu"));
    assert!(repair.do_not_repair);
    assert_eq!(repair.conditions[0].status, "Unknown");
    let claim = repair.claim.unwrap();
    assert_eq!(claim.pool.as_deref(), Some("gpu"));
    assert!(claim.rebooted_at.is_some());
    assert_eq!(
        claim.termination_timestamp, None,
        "an unreadable timestamp is no timestamp"
    );
}
