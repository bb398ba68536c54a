use super::*;

const MIN: u64 = 60;

fn t(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
}

fn policy(type_: &str, status: &str, secs: u64) -> RepairPolicy {
    RepairPolicy {
        condition_type: type_.into(),
        condition_status: status.into(),
        toleration_seconds: secs,
    }
}

fn cond(type_: &str, status: &str, since: u64) -> NodeCondition {
    NodeCondition {
        type_: type_.into(),
        status: status.into(),
        since: Some(t(since)),
    }
}

/// A managed node of `pool` (node label and claim label alike) with the default policies.
fn node(name: &str, pool: &str, conditions: Vec<NodeCondition>) -> RepairNode {
    RepairNode {
        name: name.into(),
        pool_label: Some(pool.into()),
        conditions,
        policies: default_policies().into(),
        claim: Some(RepairClaim {
            name: format!("{name}-claim"),
            pool: Some(pool.into()),
            can_reboot: true,
            ..RepairClaim::default()
        }),
        do_not_repair: false,
    }
}

fn healthy(name: &str, pool: &str) -> RepairNode {
    node(name, pool, vec![cond("Ready", "True", 0)])
}

fn sick(name: &str, pool: &str, since: u64) -> RepairNode {
    node(name, pool, vec![cond("Ready", "False", since)])
}

fn decide_at(
    nodes: &[RepairNode],
    pools: &BTreeMap<String, PoolRepair>,
    now: u64,
) -> Vec<Decision> {
    decide(&Input {
        nodes,
        pools,
        now: t(now),
    })
}

fn verdict_of<'a>(decisions: &'a [Decision], node: &str) -> &'a Verdict {
    &decisions
        .iter()
        .find(|d| d.node == node)
        .expect("a decision")
        .verdict
}

fn no_pools() -> BTreeMap<String, PoolRepair> {
    BTreeMap::new()
}

#[test]
fn the_default_policies_are_ready_false_and_unknown_for_ten_minutes() {
    let policies = default_policies();
    assert_eq!(policies.len(), 2);
    assert!(
        policies
            .iter()
            .all(|p| p.condition_type == "Ready" && p.toleration_seconds == 600)
    );
    assert_eq!(policies[0].condition_status, "False");
    assert_eq!(policies[1].condition_status, "Unknown");
}

#[test]
fn a_node_is_replaced_once_its_condition_outlasts_the_toleration() {
    let nodes = [
        sick("a", "p", 0),
        healthy("b", "p"),
        healthy("c", "p"),
        healthy("d", "p"),
        healthy("e", "p"),
    ];
    let before = decide_at(&nodes, &no_pools(), 10 * MIN - 1);
    assert_eq!(
        verdict_of(&before, "a"),
        &Verdict::Waiting {
            unhealthy: Unhealthy {
                condition_type: "Ready".into(),
                status: "False".into(),
                since: t(0),
                toleration: Duration::from_secs(600),
                toleration_from: TolerationSource::Cloud,
                due: t(600),
            },
            until: t(600),
            rebooted_at: None,
        }
    );
    let at = decide_at(&nodes, &no_pools(), 10 * MIN);
    assert!(matches!(
        verdict_of(&at, "a"),
        Verdict::Replace {
            stamp: true,
            delete: true,
            rebooted_at: None,
            ..
        }
    ));
    assert_eq!(
        verdict_of(&at, "b"),
        &Verdict::Healthy {
            clear_reboot_record: false
        }
    );
}

#[test]
fn a_condition_that_matches_no_policy_or_status_is_healthy() {
    let other_type = node("a", "p", vec![cond("FakeHealthyNode", "False", 0)]);
    let other_status = node("b", "p", vec![cond("Ready", "True", 0)]);
    let no_condition = node("c", "p", vec![]);
    let decisions = decide_at(
        &[other_type, other_status, no_condition],
        &no_pools(),
        60 * MIN,
    );
    assert!(
        decisions
            .iter()
            .all(|d| matches!(d.verdict, Verdict::Healthy { .. }))
    );
}

#[test]
fn the_policy_due_first_wins_and_the_first_on_a_tie() {
    let mut n = node(
        "a",
        "p",
        vec![cond("Ready", "False", 0), cond("Valid", "False", 0)],
    );
    n.policies = vec![
        policy("Ready", "False", 60 * MIN),
        policy("Valid", "False", 30 * MIN),
    ]
    .into();
    let d = decide_at(std::slice::from_ref(&n), &no_pools(), 27 * MIN);
    match verdict_of(&d, "a") {
        Verdict::Waiting {
            unhealthy, until, ..
        } => {
            assert_eq!(unhealthy.condition_type, "Valid");
            assert_eq!(*until, t(30 * MIN));
        }
        other => panic!("expected waiting, got {other:?}"),
    }
    n.policies = vec![
        policy("Ready", "False", 30 * MIN),
        policy("Valid", "False", 30 * MIN),
    ]
    .into();
    let d = decide_at(std::slice::from_ref(&n), &no_pools(), 0);
    assert_eq!(
        verdict_of(&d, "a").unhealthy().unwrap().condition_type,
        "Ready"
    );
}

#[test]
fn only_the_first_condition_of_a_type_counts() {
    let n = node(
        "a",
        "p",
        vec![cond("Ready", "True", 0), cond("Ready", "False", 0)],
    );
    let d = decide_at(&[n], &no_pools(), 60 * MIN);
    assert!(matches!(verdict_of(&d, "a"), Verdict::Healthy { .. }));
}

#[test]
fn a_condition_without_a_transition_time_is_due_at_once() {
    let mut n = sick("a", "p", 0);
    n.conditions[0].since = None;
    let d = decide_at(&[n], &no_pools(), 0);
    assert!(matches!(verdict_of(&d, "a"), Verdict::Replace { .. }));
}

#[test]
fn the_ceiling_is_twenty_percent_of_the_pool_rounded_up() {
    assert_eq!(allowed_unhealthy(3, 20), 1);
    assert_eq!(allowed_unhealthy(10, 20), 2);
    assert_eq!(allowed_unhealthy(11, 20), 3);
    assert_eq!(allowed_unhealthy(0, 20), 0);
    assert_eq!(allowed_unhealthy(5, 0), 0);

    // One of three: 33 %, but 20 % of 3 rounds up to 1.
    let nodes = [sick("a", "p", 0), healthy("b", "p"), healthy("c", "p")];
    let d = decide_at(&nodes, &no_pools(), 60 * MIN);
    assert!(matches!(verdict_of(&d, "a"), Verdict::Replace { .. }));

    // Three of ten: more than 2.
    let mut nodes: Vec<RepairNode> = (0..10).map(|i| healthy(&format!("n{i}"), "p")).collect();
    for n in nodes.iter_mut().take(3) {
        n.conditions = vec![cond("Ready", "False", 0)];
    }
    let d = decide_at(&nodes, &no_pools(), 60 * MIN);
    for name in ["n0", "n1", "n2"] {
        match verdict_of(&d, name) {
            Verdict::Blocked { ceiling, .. } => assert_eq!(
                ceiling,
                &Ceiling {
                    scope: Scope::NodePool("p".into()),
                    unhealthy: 3,
                    total: 10,
                    percent: 20,
                    allowed: 2,
                }
            ),
            other => panic!("{name}: expected blocked, got {other:?}"),
        }
    }
    // Two of ten: both go.
    nodes[2].conditions = vec![cond("Ready", "True", 0)];
    let d = decide_at(&nodes, &no_pools(), 60 * MIN);
    assert!(matches!(verdict_of(&d, "n0"), Verdict::Replace { .. }));
    assert!(matches!(verdict_of(&d, "n1"), Verdict::Replace { .. }));
}

#[test]
fn nodes_count_toward_the_ceiling_before_their_toleration_is_over() {
    // n1 just turned NotReady: not due, but it counts, so n0 (due) is held back with 2 of 5.
    let nodes = [
        sick("n0", "p", 0),
        sick("n1", "p", 59 * MIN),
        healthy("n2", "p"),
        healthy("n3", "p"),
        healthy("n4", "p"),
    ];
    let d = decide_at(&nodes, &no_pools(), 60 * MIN);
    assert!(matches!(verdict_of(&d, "n0"), Verdict::Blocked { .. }));
    assert!(matches!(verdict_of(&d, "n1"), Verdict::Waiting { .. }));
}

#[test]
fn the_pool_is_counted_by_node_label_and_other_pools_do_not_count() {
    let mut nodes = vec![sick("a", "p", 0), healthy("b", "p"), healthy("c", "p")];
    // Two sick nodes of another pool do not hold back pool p's.
    nodes.push(sick("x", "q", 0));
    nodes.push(sick("y", "q", 0));
    let d = decide_at(&nodes, &no_pools(), 60 * MIN);
    assert!(matches!(verdict_of(&d, "a"), Verdict::Replace { .. }));
    assert!(matches!(verdict_of(&d, "x"), Verdict::Blocked { .. }));
}

#[test]
fn a_standalone_claim_is_held_to_the_cluster_including_unmanaged_nodes() {
    let mut standalone = sick("s", "p", 0);
    standalone.pool_label = None;
    standalone.claim.as_mut().unwrap().pool = None;
    let mut unmanaged: Vec<RepairNode> = (0..4)
        .map(|i| {
            let mut n = healthy(&format!("u{i}"), "p");
            n.pool_label = None;
            n.claim = None;
            n
        })
        .collect();
    // 1 of 5 unhealthy: allowed (1).
    let mut nodes = vec![standalone.clone()];
    nodes.extend(unmanaged.iter().cloned());
    let d = decide_at(&nodes, &no_pools(), 60 * MIN);
    assert_eq!(d.len(), 1, "unmanaged nodes get no decision");
    assert!(matches!(verdict_of(&d, "s"), Verdict::Replace { .. }));
    // An unmanaged node goes NotReady too: 2 of 5.
    unmanaged[0].conditions = vec![cond("Ready", "Unknown", 0)];
    let mut nodes = vec![standalone];
    nodes.extend(unmanaged);
    let d = decide_at(&nodes, &no_pools(), 60 * MIN);
    match verdict_of(&d, "s") {
        Verdict::Blocked { ceiling, .. } => {
            assert_eq!(ceiling.scope, Scope::Cluster);
            assert_eq!(
                (ceiling.unhealthy, ceiling.total, ceiling.allowed),
                (2, 5, 1)
            );
        }
        other => panic!("expected blocked, got {other:?}"),
    }
}

#[test]
fn budgets_and_do_not_disrupt_are_not_inputs_but_the_veto_is() {
    let mut nodes = vec![sick("a", "p", 0), healthy("b", "p"), healthy("c", "p")];
    nodes[0].do_not_repair = true;
    let d = decide_at(&nodes, &no_pools(), 5 * MIN);
    assert!(
        matches!(verdict_of(&d, "a"), Verdict::Vetoed { by: Veto::Node, .. }),
        "the veto holds before the toleration is over too"
    );
    nodes[0].do_not_repair = false;
    let pools = BTreeMap::from([(
        "p".to_string(),
        PoolRepair {
            do_not_repair: true,
            ..PoolRepair::default()
        },
    )]);
    let d = decide_at(&nodes, &pools, 60 * MIN);
    assert_eq!(
        verdict_of(&d, "a").to_string(),
        format!(
            "unhealthy, Ready=False since {} (toleration 10m, from the cloud's policy), due at {}; not repaired: joinery.dev/do-not-repair is set on its NodePool p",
            rfc3339(t(0)),
            rfc3339(t(600))
        )
    );
}

#[test]
fn the_pool_overrides_the_ceiling_and_the_tolerations() {
    let nodes = [
        sick("a", "p", 0),
        sick("b", "p", 0),
        healthy("c", "p"),
        healthy("d", "p"),
    ];
    let mut pools = BTreeMap::from([(
        "p".to_string(),
        PoolRepair {
            max_unhealthy_percent: Some(50),
            ..PoolRepair::default()
        },
    )]);
    let d = decide_at(&nodes, &pools, 60 * MIN);
    assert!(
        matches!(verdict_of(&d, "a"), Verdict::Replace { .. }),
        "2 of 4 within 50 %"
    );
    pools.get_mut("p").unwrap().max_unhealthy_percent = Some(0);
    let d = decide_at(&nodes, &pools, 60 * MIN);
    assert!(
        matches!(verdict_of(&d, "a"), Verdict::Blocked { .. }),
        "0 % stops every repair"
    );

    // A GPU pool replaces after 2 minutes; a per-type toleration wins over the pool-wide one.
    let pools = BTreeMap::from([(
        "p".to_string(),
        PoolRepair {
            toleration: Some(Duration::from_secs(5 * MIN)),
            tolerations: BTreeMap::from([("Ready".to_string(), Duration::from_secs(2 * MIN))]),
            ..PoolRepair::default()
        },
    )]);
    let nodes = [
        sick("a", "p", 0),
        healthy("c", "p"),
        healthy("d", "p"),
        healthy("e", "p"),
        healthy("f", "p"),
    ];
    let d = decide_at(&nodes, &pools, 2 * MIN);
    match verdict_of(&d, "a") {
        Verdict::Replace { unhealthy, .. } => {
            assert_eq!(unhealthy.toleration, Duration::from_secs(2 * MIN));
            assert_eq!(unhealthy.toleration_from, TolerationSource::NodePool);
        }
        other => panic!("expected replace, got {other:?}"),
    }
}

#[test]
fn reboot_first_reboots_once_then_waits_the_toleration_again_then_replaces() {
    let pools = BTreeMap::from([(
        "p".to_string(),
        PoolRepair {
            reboot_first: true,
            ..PoolRepair::default()
        },
    )]);
    let mut nodes = vec![sick("a", "p", 0), healthy("b", "p"), healthy("c", "p")];
    let d = decide_at(&nodes, &pools, 10 * MIN);
    assert!(matches!(verdict_of(&d, "a"), Verdict::Reboot { .. }));

    nodes[0].claim.as_mut().unwrap().rebooted_at = Some(t(10 * MIN));
    let d = decide_at(&nodes, &pools, 19 * MIN);
    assert!(matches!(
        verdict_of(&d, "a"),
        Verdict::Waiting { until, rebooted_at: Some(_), .. } if *until == t(20 * MIN)
    ));
    let d = decide_at(&nodes, &pools, 20 * MIN);
    assert!(matches!(
        verdict_of(&d, "a"),
        Verdict::Replace {
            rebooted_at: Some(_),
            delete: true,
            ..
        }
    ));

    // Recovered after the reboot: the record may go.
    nodes[0].conditions = vec![cond("Ready", "True", 12 * MIN)];
    let d = decide_at(&nodes, &pools, 20 * MIN);
    assert_eq!(
        verdict_of(&d, "a"),
        &Verdict::Healthy {
            clear_reboot_record: true
        }
    );
}

#[test]
fn without_reboot_first_or_a_cloud_that_reboots_repair_replaces() {
    let nodes = [sick("a", "p", 0), healthy("b", "p"), healthy("c", "p")];
    let d = decide_at(&nodes, &no_pools(), 10 * MIN);
    assert!(
        matches!(verdict_of(&d, "a"), Verdict::Replace { .. }),
        "reboot is opt-in"
    );
    let pools = BTreeMap::from([(
        "p".to_string(),
        PoolRepair {
            reboot_first: true,
            ..PoolRepair::default()
        },
    )]);
    let mut nodes = nodes.to_vec();
    nodes[0].claim.as_mut().unwrap().can_reboot = false;
    let d = decide_at(&nodes, &pools, 10 * MIN);
    assert!(matches!(
        verdict_of(&d, "a"),
        Verdict::Replace {
            rebooted_at: None,
            ..
        }
    ));
}

#[test]
fn the_termination_timestamp_is_stamped_now_unless_already_past() {
    let mut nodes = vec![sick("a", "p", 0), healthy("b", "p"), healthy("c", "p")];
    // A deadline in the future (a terminationGracePeriod) is overridden.
    nodes[0].claim.as_mut().unwrap().termination_timestamp = Some(t(120 * MIN));
    let d = decide_at(&nodes, &no_pools(), 60 * MIN);
    assert!(matches!(
        verdict_of(&d, "a"),
        Verdict::Replace { stamp: true, .. }
    ));
    // One already past stays.
    nodes[0].claim.as_mut().unwrap().termination_timestamp = Some(t(57 * MIN));
    let d = decide_at(&nodes, &no_pools(), 60 * MIN);
    assert!(matches!(
        verdict_of(&d, "a"),
        Verdict::Replace { stamp: false, .. }
    ));
    // A claim being deleted is stamped, not deleted again, and never rebooted.
    let claim = nodes[0].claim.as_mut().unwrap();
    claim.termination_timestamp = None;
    claim.deleting = true;
    let pools = BTreeMap::from([(
        "p".to_string(),
        PoolRepair {
            reboot_first: true,
            ..PoolRepair::default()
        },
    )]);
    let d = decide_at(&nodes, &pools, 60 * MIN);
    assert!(matches!(
        verdict_of(&d, "a"),
        Verdict::Replace {
            stamp: true,
            delete: false,
            ..
        }
    ));
}

#[test]
fn decisions_come_earliest_due_first_then_by_name() {
    let nodes = [
        healthy("a", "p"),
        sick("z", "p", 0),
        sick("m", "p", 3 * MIN),
        sick("b", "p", 0),
        healthy("c", "p"),
    ];
    let d = decide_at(&nodes, &no_pools(), 0);
    let order: Vec<&str> = d.iter().map(|d| d.node.as_str()).collect();
    assert_eq!(order, ["b", "z", "m", "a", "c"]);
}

#[test]
fn decide_node_finds_a_node_by_node_or_claim_name() {
    let nodes = [sick("a", "p", 0), healthy("b", "p")];
    let pools = no_pools();
    let input = Input {
        nodes: &nodes,
        pools: &pools,
        now: t(0),
    };
    assert_eq!(decide_node(&input, "a").unwrap().claim, "a-claim");
    assert_eq!(decide_node(&input, "b-claim").unwrap().node, "b");
    assert!(decide_node(&input, "nope").is_none());
}

#[test]
fn verdicts_read_as_sentences() {
    let nodes = [sick("a", "p", 0), healthy("b", "p"), healthy("c", "p")];
    let d = decide_at(&nodes, &no_pools(), 5 * MIN);
    assert_eq!(
        verdict_of(&d, "a").to_string(),
        format!(
            "unhealthy, Ready=False since {} (toleration 10m, from the cloud's policy); repair acts at {} unless it recovers",
            rfc3339(t(0)),
            rfc3339(t(600))
        )
    );
    let ceiling = Ceiling {
        scope: Scope::NodePool("gpu".into()),
        unhealthy: 3,
        total: 10,
        percent: 20,
        allowed: 2,
    };
    assert_eq!(
        ceiling.to_string(),
        "3 of 10 nodes of NodePool gpu are unhealthy; repair acts while at most 20% (2) are"
    );
    assert_eq!(human(Duration::from_secs(5400)), "1h30m");
    assert_eq!(human(Duration::from_secs(45)), "45s");
}

#[test]
fn condition_types_are_labelled_in_upstreams_snake_case() {
    for (type_, label) in [
        ("Ready", "ready"),
        ("MemoryPressure", "memory_pressure"),
        ("PIDPressure", "pid_pressure"),
        ("NetworkUnavailable", "network_unavailable"),
        ("BadNode", "bad_node"),
        ("GPU2Healthy", "gpu2_healthy"),
    ] {
        assert_eq!(metric_condition(type_), label, "{type_}");
    }
}
