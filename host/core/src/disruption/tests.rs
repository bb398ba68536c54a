//! The disruption methods on small clusters built with the fixture.

use std::time::Duration;

use super::fixture::{Builder, FixturePod, instance_type};
use super::*;

fn pods(prefix: &str, cpus: &[u64]) -> Vec<FixturePod> {
    cpus.iter()
        .enumerate()
        .map(|(i, c)| FixturePod::new(format!("{prefix}-{i}"), *c))
        .collect()
}

/// Small 2-CPU nodes at 0.10, 4-CPU at 0.19, 8-CPU at 0.36 (on-demand; spot 40 %).
fn catalog() -> Builder {
    Builder::new(vec![
        instance_type("c-2", 2, 0.10),
        instance_type("c-4", 4, 0.19),
        instance_type("c-8", 8, 0.36),
    ])
}

fn command(snapshot: &Snapshot) -> Option<Command> {
    decide(snapshot).pop().and_then(|o| o.command)
}

#[test]
fn emptiness_deletes_every_empty_consolidatable_node_within_the_budget_priciest_first() {
    let mut b = catalog();
    b.node("big-empty", "c-8", "on-demand", "zone-a", &[]);
    b.node("small-empty", "c-2", "on-demand", "zone-a", &[]);
    b.node("busy", "c-2", "on-demand", "zone-a", &pods("busy", &[1500]));
    b.node("fresh-empty", "c-2", "on-demand", "zone-a", &[])
        .consolidatable = false;
    b.pool().budgets = vec![Budget {
        nodes: "1".into(),
        reasons: None,
        schedule: None,
        duration: None,
    }];
    let snapshot = b.build();
    let outcome = evaluate(&snapshot, Method::Emptiness);
    let cmd = outcome.command.expect("a command");
    assert_eq!(
        cmd.candidates,
        ["big-empty"],
        "one node allowed: the priciest"
    );
    assert_eq!(cmd.decision(), Decision::Delete);
    assert!((cmd.saving_per_hour - 0.36).abs() < 1e-9);
    let blocked: Vec<&str> = outcome.blocked.iter().map(|(c, _)| c.as_str()).collect();
    assert_eq!(
        blocked,
        ["fresh-empty", "small-empty"],
        "{:?}",
        outcome.blocked
    );
    assert!(
        matches!(
            outcome.blocked[1].1,
            Blocker::Budget {
                reason: Reason::Empty,
                ..
            }
        ),
        "{:?}",
        outcome.blocked
    );
}

#[test]
fn pods_that_fit_elsewhere_make_a_delete_and_the_pass_stops_at_the_first_command() {
    let mut b = catalog();
    b.node("a", "c-4", "on-demand", "zone-a", &pods("a", &[1000]));
    b.node("b", "c-4", "on-demand", "zone-a", &pods("b", &[1000, 1000]));
    let snapshot = b.build();
    let outcomes = decide(&snapshot);
    let methods: Vec<Method> = outcomes.iter().map(|o| o.method).collect();
    assert_eq!(
        methods,
        [
            Method::Emptiness,
            Method::StaticDrift,
            Method::Drift,
            Method::MultiNodeConsolidation
        ]
    );
    let cmd = outcomes
        .last()
        .unwrap()
        .command
        .clone()
        .expect("multi-node decides");
    assert_eq!(cmd.decision(), Decision::Replace);
    assert_eq!(
        cmd.candidates,
        ["a", "b"],
        "both replaced by one cheaper node, the emptier first"
    );
    assert_eq!(
        &*cmd.replacements[0].spec.instance_types,
        ["c-4", "c-8"],
        "spot options cheaper than one c-4 on demand"
    );
}

#[test]
fn single_node_consolidation_deletes_a_node_whose_pods_fit_on_another() {
    let mut b = catalog();
    b.node("a", "c-4", "on-demand", "zone-a", &pods("a", &[500]));
    b.node("b", "c-8", "on-demand", "zone-a", &pods("b", &[6000]));
    let snapshot = b.build();
    let single = evaluate(&snapshot, Method::SingleNodeConsolidation);
    let cmd = single.command.expect("a command");
    assert_eq!(
        cmd.candidates,
        ["b"],
        "the pricier per disruption goes first, and b's pods fit... "
    );
}

#[test]
fn a_lone_oversized_node_is_replaced_by_the_cheapest_type_that_holds_its_pods() {
    let mut b = catalog();
    b.node("big", "c-8", "on-demand", "zone-a", &pods("p", &[500, 500]));
    let snapshot = b.build();
    let cmd = command(&snapshot).expect("a replace");
    assert_eq!(
        cmd.method,
        Method::SingleNodeConsolidation,
        "multi-node needs two candidates"
    );
    assert_eq!(cmd.decision(), Decision::Replace);
    let claim = &cmd.replacements[0];
    assert_eq!(
        &*claim.spec.instance_types,
        ["c-2", "c-4", "c-8"],
        "every cheaper option, cheapest first (c-8 on spot too)"
    );
    let ct = claim
        .spec
        .requirements
        .get(crate::labels::CAPACITY_TYPE_LABEL)
        .unwrap();
    assert!(
        ct.has("spot") && !ct.has("on-demand"),
        "priced as spot, pinned to spot: {ct}"
    );
    assert!(
        (cmd.saving_per_hour - (0.36 - 0.04)).abs() < 1e-9,
        "{}",
        cmd.saving_per_hour
    );
}

#[test]
fn no_cheaper_replacement_leaves_the_node_and_says_why() {
    let mut b = catalog();
    b.node("small", "c-2", "on-demand", "zone-a", &pods("p", &[1500]));
    b.pool();
    let mut snapshot = b.build();
    // Only on-demand: no spot to price against.
    snapshot.scheduling.nodepools[0].template.requirements.add(
        crate::requirements::Requirement::in_values(
            crate::labels::CAPACITY_TYPE_LABEL,
            ["on-demand"],
        ),
    );
    let single = evaluate(&snapshot, Method::SingleNodeConsolidation);
    assert!(single.command.is_none());
    assert_eq!(single.rejected.len(), 1);
    assert!(
        matches!(single.rejected[0].1, Rejection::NoCheaper),
        "{:?}",
        single.rejected
    );
}

#[test]
fn spot_nodes_are_not_replaced_by_spot_unless_the_gate_is_on() {
    let mut b = catalog();
    b.node("big", "c-8", "spot", "zone-a", &pods("p", &[500]));
    let mut snapshot = b.build();
    let single = evaluate(&snapshot, Method::SingleNodeConsolidation);
    assert!(single.command.is_none());
    assert!(
        matches!(single.rejected[0].1, Rejection::SpotToSpotDisabled),
        "{:?}",
        single.rejected
    );
    snapshot.options.spot_to_spot = true;
    let single = evaluate(&snapshot, Method::SingleNodeConsolidation);
    assert!(
        single.command.is_none(),
        "single-node spot-to-spot needs 15 cheaper options"
    );
    assert!(
        matches!(
            single.rejected[0].1,
            Rejection::TooFewSpotOptions { options } if options < 15
        ),
        "{:?}",
        single.rejected
    );
}

#[test]
fn do_not_disrupt_pods_and_pdbs_block_consolidation_but_not_drift_with_a_grace_period() {
    let mut b = catalog();
    let c = b.node("a", "c-8", "on-demand", "zone-a", &pods("p", &[500]));
    c.pod_blockers =
        vec!["pod \"default/p-0\" has \"karpenter.sh/do-not-disrupt\" annotation".into()];
    c.drifted = Some(Drifted {
        reason: "NodePoolDrifted".into(),
        since: std::time::SystemTime::UNIX_EPOCH,
    });
    let mut snapshot = b.build();
    let single = evaluate(&snapshot, Method::SingleNodeConsolidation);
    assert!(single.command.is_none());
    assert!(
        matches!(&single.blocked[0].1, Blocker::Pod(why) if why.contains("do-not-disrupt")),
        "{:?}",
        single.blocked
    );
    assert!(
        evaluate(&snapshot, Method::Drift).command.is_none(),
        "no terminationGracePeriod: drift is blocked too"
    );
    snapshot.candidates[0].termination_grace_period = true;
    let drift = evaluate(&snapshot, Method::Drift)
        .command
        .expect("drift overrides with a grace period");
    assert_eq!(drift.decision(), Decision::Replace);
    assert!(
        evaluate(&snapshot, Method::SingleNodeConsolidation)
            .command
            .is_none(),
        "consolidation never overrides"
    );
}

#[test]
fn node_annotation_nomination_and_state_block_every_method() {
    for (expected, adjust) in [
        (
            Blocker::DoNotDisrupt,
            (|c: &mut Candidate| c.do_not_disrupt = true) as fn(&mut Candidate),
        ),
        (Blocker::Nominated, |c| c.nominated = true),
        (Blocker::NotInitialized, |c| c.initialized = false),
        (Blocker::MarkedForDeletion, |c| c.deleting = true),
        (Blocker::AlreadyDisrupting, |c| c.disrupting = true),
    ] {
        let mut b = catalog();
        adjust(b.node("e", "c-2", "on-demand", "zone-a", &[]));
        let snapshot = b.build();
        let outcome = evaluate(&snapshot, Method::Emptiness);
        assert!(outcome.command.is_none(), "{expected:?}");
        assert_eq!(outcome.blocked[0].1, expected, "{:?}", outcome.blocked);
    }
}

#[test]
fn consolidation_respects_policy_consolidate_after_and_budgets() {
    let build = |adjust: fn(&mut Builder)| {
        let mut b = catalog();
        b.node("big", "c-8", "on-demand", "zone-a", &pods("p", &[500]));
        adjust(&mut b);
        evaluate(&b.build(), Method::SingleNodeConsolidation)
    };
    assert!(build(|_| {}).command.is_some());
    let when_empty = build(|b| b.pool().policy = ConsolidationPolicy::WhenEmpty);
    assert!(when_empty.command.is_none() && when_empty.blocked[0].1 == Blocker::WhenEmptyPolicy);
    let never = build(|b| b.pool().consolidate_after = None);
    assert!(never.command.is_none() && never.blocked[0].1 == Blocker::ConsolidateAfterNever);
    let waiting = build(|b| b.snapshot().candidates[0].consolidatable = false);
    assert!(waiting.command.is_none() && waiting.blocked[0].1 == Blocker::NotConsolidatableYet);
    let zero = build(|b| {
        b.pool().budgets = vec![Budget {
            nodes: "0".into(),
            reasons: Some(vec![Reason::Underutilized]),
            schedule: None,
            duration: None,
        }]
    });
    assert!(
        zero.command.is_none()
            && zero.blocked[0].1
                == Blocker::Budget {
                    pool: "default".into(),
                    reason: Reason::Underutilized
                },
        "{:?}",
        zero.blocked
    );
    let other_reason = build(|b| {
        b.pool().budgets = vec![Budget {
            nodes: "0".into(),
            reasons: Some(vec![Reason::Empty]),
            schedule: None,
            duration: None,
        }]
    });
    assert!(
        other_reason.command.is_some(),
        "an Empty budget does not limit consolidation"
    );
}

#[test]
fn multi_node_consolidation_takes_the_longest_prefix_that_fits() {
    let mut b = catalog();
    // Four on-demand 4-CPU nodes at 0.9 CPU each: three can go onto the fourth. Replacing all
    // four with one c-4 is ruled out: it is the candidates' own type.
    for name in ["n1", "n2", "n3", "n4"] {
        b.node(name, "c-4", "on-demand", "zone-a", &pods(name, &[900]));
    }
    let mut snapshot = b.build();
    snapshot.scheduling.nodepools[0].template.requirements.add(
        crate::requirements::Requirement::in_values(
            crate::labels::CAPACITY_TYPE_LABEL,
            ["on-demand"],
        ),
    );
    // Upstream's search alone (the swaps after it find nothing better here).
    let improved = evaluate(&snapshot, Method::MultiNodeConsolidation).command;
    snapshot.options.multi_node_improvement = 0;
    let outcome = evaluate(&snapshot, Method::MultiNodeConsolidation);
    let cmd = outcome.command.expect("a command");
    assert_eq!(improved.as_ref(), Some(&cmd));
    assert_eq!(cmd.decision(), Decision::Delete);
    assert_eq!(cmd.candidates.len(), 3, "{:?}", cmd);
    assert!(
        outcome.simulations >= 2 && outcome.simulations <= 3,
        "binary search: {}",
        outcome.simulations
    );
    assert!((cmd.saving_per_hour - 3.0 * 0.19).abs() < 1e-9);
}

#[test]
fn multi_node_never_replaces_with_a_type_as_expensive_as_one_of_the_candidates() {
    let mut b = catalog();
    // Two 8-CPU nodes with 3 CPUs each: one c-8 replacement would be cheaper than both, but it
    // is the candidates' own type: deleting one of them is the better move (filterOutSameInstanceType).
    b.node("x", "c-8", "on-demand", "zone-a", &pods("x", &[3000]));
    b.node("y", "c-8", "on-demand", "zone-a", &pods("y", &[3000]));
    let mut snapshot = b.build();
    snapshot.scheduling.nodepools[0].template.requirements.add(
        crate::requirements::Requirement::in_values(
            crate::labels::CAPACITY_TYPE_LABEL,
            ["on-demand"],
        ),
    );
    let multi = evaluate(&snapshot, Method::MultiNodeConsolidation);
    assert!(multi.command.is_none(), "{multi:?}");
    let cmd = command(&snapshot).expect("single-node deletes one");
    assert_eq!(
        (cmd.method, cmd.decision()),
        (Method::SingleNodeConsolidation, Decision::Delete),
        "{cmd:?}"
    );
    assert_eq!(cmd.candidates.len(), 1);
}

#[test]
fn a_minimum_saving_keeps_small_improvements_from_draining_nodes() {
    let mut b = catalog();
    b.node("big", "c-8", "on-demand", "zone-a", &pods("p", &[500]));
    b.pool().min_saving = Some(candidate::MinSaving::Ratio(0.95));
    let snapshot = b.build();
    let single = evaluate(&snapshot, Method::SingleNodeConsolidation);
    assert!(single.command.is_none(), "0.32 of 0.36 is below 95 %");
    assert!(
        matches!(
            single.rejected[0].1,
            Rejection::BelowMinimumSaving {
                minimum: candidate::MinSaving::Ratio(0.95),
                ..
            }
        ),
        "{:?}",
        single.rejected
    );
    assert_eq!(
        candidate::MinSaving::parse("10%"),
        Some(candidate::MinSaving::Ratio(0.1))
    );
    assert_eq!(
        candidate::MinSaving::parse("0.05"),
        Some(candidate::MinSaving::PerHour(0.05))
    );
    assert_eq!(candidate::MinSaving::parse("cheap"), None);
}

#[test]
fn pods_must_not_land_on_uninitialized_nodes() {
    let mut b = catalog();
    b.node("a", "c-8", "on-demand", "zone-a", &pods("a", &[500]));
    let target = b.node(
        "launching",
        "c-8",
        "on-demand",
        "zone-a",
        &pods("l", &[500]),
    );
    target.initialized = false;
    let mut snapshot = b.build();
    snapshot.scheduling.nodes[1].in_flight = true;
    // With on-demand only, a replacement is possible (c-2 is cheaper), so forbid it: c-8 only.
    snapshot.scheduling.nodepools[0]
        .instance_types
        .retain(|t| t.name() == "c-8");
    let single = evaluate(&snapshot, Method::SingleNodeConsolidation);
    assert!(single.command.is_none());
    assert!(
        matches!(&single.rejected[0].1, Rejection::UninitializedNode { node, .. } if node == "launching"),
        "{:?}",
        single.rejected
    );
}

#[test]
fn drift_replaces_empty_nodes_first_then_the_longest_drifted() {
    let t = |s| std::time::SystemTime::UNIX_EPOCH + Duration::from_secs(s);
    let mut b = catalog();
    b.node("old", "c-4", "on-demand", "zone-a", &pods("o", &[3000]))
        .drifted = Some(Drifted {
        reason: "NodePoolDrifted".into(),
        since: t(10),
    });
    b.node("older", "c-4", "on-demand", "zone-a", &pods("r", &[3000]))
        .drifted = Some(Drifted {
        reason: "NodePoolDrifted".into(),
        since: t(5),
    });
    let snapshot = b.clone().build();
    let cmd = evaluate(&snapshot, Method::Drift).command.expect("drift");
    assert_eq!(cmd.candidates, ["older"]);
    assert_eq!(
        cmd.decision(),
        Decision::Replace,
        "3 CPUs do not fit on the other node"
    );
    b.node("empty", "c-4", "on-demand", "zone-a", &[]).drifted = Some(Drifted {
        reason: "RequirementsDrifted".into(),
        since: t(20),
    });
    let cmd = evaluate(&b.build(), Method::Drift).command.expect("drift");
    assert_eq!(cmd.candidates, ["empty"]);
    assert_eq!(cmd.decision(), Decision::Delete);
}

#[test]
fn validation_rejects_a_command_whose_world_changed() {
    let mut b = catalog();
    b.node("big", "c-8", "on-demand", "zone-a", &pods("p", &[500]));
    let snapshot = b.clone().build();
    let cmd = command(&snapshot).expect("a replace");
    assert_eq!(validate(&snapshot, &cmd).as_ref(), Ok(&cmd));
    let mut nominated = snapshot.clone();
    nominated.candidates[0].nominated = true;
    assert!(
        validate(&nominated, &cmd)
            .unwrap_err()
            .contains("nominated")
    );
    let mut roomier = b.clone();
    roomier
        .node("new", "c-8", "on-demand", "zone-b", &[])
        .consolidatable = false;
    let changed = validate(&roomier.build(), &cmd).unwrap_err();
    assert!(
        changed.contains("decision changed from replace to delete"),
        "{changed}"
    );
    let mut empty_cmd_world = catalog();
    empty_cmd_world.node("e1", "c-2", "on-demand", "zone-a", &[]);
    empty_cmd_world.node("e2", "c-2", "on-demand", "zone-a", &[]);
    let world = empty_cmd_world.build();
    let emptiness = evaluate(&world, Method::Emptiness).command.unwrap();
    let mut later = world.clone();
    later.candidates[0].disruption_cost = 2.0;
    assert_eq!(
        validate(&later, &emptiness).unwrap().candidates,
        ["e2"],
        "emptiness keeps what is still empty"
    );
}

#[test]
fn explain_names_budgets_and_every_methods_verdict() {
    let mut b = catalog();
    b.node("big", "c-8", "on-demand", "zone-a", &pods("p", &[500]));
    let lines = explain(&b.build(), "big").expect("known node");
    let text = lines.join("\n");
    assert!(text.contains("emptiness: no: node is not empty"), "{text}");
    assert!(text.contains("drift: no: node has not drifted"), "{text}");
    assert!(
        text.contains("single-node-consolidation: yes: underutilized: replace big with one c-2"),
        "{text}"
    );
    assert!(
        text.contains("budget for Underutilized: unlimited"),
        "{text}"
    );
}

#[test]
fn the_benchmark_cluster_consolidates_something() {
    let snapshot = fixture::consolidation_cluster(60);
    assert_eq!(snapshot.candidates.len(), 60);
    let outcomes: Vec<MethodOutcome> = Method::ALL
        .iter()
        .map(|m| evaluate(&snapshot, *m))
        .collect();
    let multi = outcomes[3]
        .command
        .as_ref()
        .expect("a third of the capacity is removable");
    assert_eq!(outcomes[3].method, Method::MultiNodeConsolidation);
    assert!(
        multi.candidates.len() >= 2 && multi.saving_per_hour > 0.0,
        "{multi:?}"
    );
}

#[test]
fn a_balanced_pool_refuses_moves_that_disrupt_more_than_they_save() {
    // Ten busy nodes; the candidate saves little relative to the pool (a c-8 replaced by spot
    // c-2 saves 0.32 of a 3.6 pool) and moves many pods relative to the pool's disruption cost.
    let mut b = catalog();
    for i in 0..9 {
        b.node(
            &format!("busy-{i}"),
            "c-8",
            "on-demand",
            "zone-a",
            &pods(&format!("b{i}"), &[7000]),
        )
        .consolidatable = false;
    }
    b.node(
        "heavy",
        "c-8",
        "on-demand",
        "zone-a",
        &pods("h", &[100; 30]),
    );
    b.pool().policy = ConsolidationPolicy::Balanced;
    let snapshot = b.build();
    let single = evaluate(&snapshot, Method::SingleNodeConsolidation);
    let heavy = single
        .rejected
        .iter()
        .find(|(c, _)| c == "heavy")
        .expect("heavy was tried");
    assert!(
        matches!(&heavy.1, Rejection::UnbalancedMove { pool, .. } if pool == "default"),
        "{heavy:?}"
    );
    let mut relaxed = snapshot.clone();
    relaxed.pools.get_mut("default").unwrap().policy =
        ConsolidationPolicy::WhenEmptyOrUnderutilized;
    assert!(
        evaluate(&relaxed, Method::SingleNodeConsolidation)
            .command
            .is_some()
    );
}

#[test]
fn expiration_deletes_every_expired_node_regardless_of_budgets_and_blockers() {
    let mut b = catalog();
    let now = b.snapshot().now();
    let old = b.node("old", "c-2", "on-demand", "zone-a", &pods("o", &[500]));
    old.expires_at = Some(now - Duration::from_secs(1));
    old.pod_blockers = vec!["pdb prevents pod evictions".into()];
    b.node("young", "c-2", "on-demand", "zone-a", &[])
        .expires_at = Some(now + Duration::from_secs(60));
    b.node("never", "c-2", "on-demand", "zone-a", &[]);
    b.pool().budgets = vec![Budget {
        nodes: "0".into(),
        reasons: None,
        schedule: None,
        duration: None,
    }];
    let snapshot = b.build();
    let outcome = evaluate(&snapshot, Method::Expiration);
    let cmd = outcome.command.expect("expired");
    assert_eq!(
        (cmd.candidates.as_slice(), cmd.decision(), cmd.reason()),
        (&["old".to_string()][..], Decision::Delete, Reason::Expired)
    );
    assert!(
        outcome.blocked.is_empty(),
        "nodes that did not expire are not blocked: {:?}",
        outcome.blocked
    );
    assert!(
        !decide(&snapshot)
            .iter()
            .any(|o| o.method == Method::Expiration),
        "the disruption loop leaves expiration to the lifecycle"
    );
    let text = explain(&snapshot, "old").unwrap().join("\n");
    assert!(text.contains("expiration: yes"), "{text}");
}

#[test]
fn consolidation_is_skipped_while_pending_pods_need_several_new_nodes() {
    let mut b = catalog();
    b.node("a", "c-8", "on-demand", "zone-a", &pods("a", &[500]));
    b.node("b", "c-8", "on-demand", "zone-a", &pods("b", &[500]));
    for i in 0..3 {
        b.pending(FixturePod::new(format!("big-{i}"), 7600));
    }
    let snapshot = b.clone().build();
    for method in [
        Method::MultiNodeConsolidation,
        Method::SingleNodeConsolidation,
    ] {
        let outcome = evaluate(&snapshot, method);
        assert!(outcome.command.is_none());
        assert_eq!(
            outcome.simulations, 1,
            "one baseline simulation, no candidate's"
        );
        assert!(
            outcome
                .skipped
                .as_deref()
                .unwrap_or_default()
                .contains("need 3 new nodes"),
            "{:?}",
            outcome.skipped
        );
    }
    let mut one = catalog();
    one.node("a", "c-8", "on-demand", "zone-a", &pods("a", &[500]));
    one.node("b", "c-8", "on-demand", "zone-a", &pods("b", &[500]));
    one.pending(FixturePod::new("small", 500));
    let outcome = evaluate(&one.build(), Method::SingleNodeConsolidation);
    assert!(
        outcome.skipped.is_none(),
        "a pending pod that fits does not stop it: {outcome:?}"
    );
    assert_eq!(
        outcome.blocked,
        [("a".to_string(), Blocker::Nominated)],
        "the pod would go to a"
    );
    assert_eq!(outcome.command.expect("b can go").candidates, ["b"]);
}

#[test]
fn static_drift_replaces_drifted_nodes_of_static_pools_within_the_budget_and_drift_leaves_them() {
    let t = std::time::SystemTime::UNIX_EPOCH;
    let mut b = catalog();
    for name in ["s1", "s2", "s3"] {
        b.node(name, "c-2", "on-demand", "zone-a", &pods(name, &[500]))
            .drifted = Some(Drifted {
            reason: "NodePoolDrifted".into(),
            since: t,
        });
    }
    let template = b.snapshot().scheduling.nodepools[0].template.clone();
    let pool = b.pool();
    pool.is_static = true;
    pool.template = Some(template);
    pool.budgets = vec![Budget {
        nodes: "50%".into(),
        reasons: None,
        schedule: None,
        duration: None,
    }];
    let snapshot = b.build();
    let outcome = evaluate(&snapshot, Method::StaticDrift);
    let cmd = outcome.command.expect("static drift");
    assert_eq!(
        cmd.candidates,
        ["s1", "s2"],
        "50 % of 3 nodes rounds up to 2"
    );
    assert_eq!(cmd.replacements.len(), 2);
    assert!(
        cmd.replacements[0].spec.instance_types.is_empty(),
        "no instance types injected: the plugin chooses"
    );
    assert_eq!(
        outcome.blocked,
        [(
            "s3".to_string(),
            Blocker::Budget {
                pool: "default".into(),
                reason: Reason::Drifted
            }
        )]
    );
    assert!(
        evaluate(&snapshot, Method::Drift).command.is_none(),
        "drift leaves static pools to static drift"
    );
    assert!(
        evaluate(&snapshot, Method::SingleNodeConsolidation)
            .command
            .is_none(),
        "static pools are never consolidated"
    );
    assert_eq!(validate(&snapshot, &cmd).as_ref(), Ok(&cmd));
}

#[test]
fn the_full_fleet_consolidates_nothing_after_simulating_every_candidate() {
    let snapshot = fixture::consolidation_fleet(fixture::Fleet::Full, 30);
    let outcomes: Vec<MethodOutcome> = Method::ALL
        .iter()
        .map(|m| evaluate(&snapshot, *m))
        .collect();
    assert!(outcomes.iter().all(|o| o.command.is_none()), "{outcomes:?}");
    let single = &outcomes[4];
    assert_eq!(single.method, Method::SingleNodeConsolidation);
    assert_eq!(
        single.rejected.len(),
        30,
        "every candidate simulated and rejected"
    );
}

#[test]
fn the_mixed_fleet_removes_its_light_tenth() {
    let snapshot = fixture::consolidation_fleet(fixture::Fleet::Mixed, 50);
    let outcomes: Vec<MethodOutcome> = Method::ALL
        .iter()
        .map(|m| evaluate(&snapshot, *m))
        .collect();
    let command = outcomes
        .iter()
        .find_map(|o| o.command.as_ref())
        .expect("the light nodes can go");
    // The five light nodes go first (least disruptive); whatever else joins them, the
    // command saves at least their price.
    let light: Vec<String> = (0..5).map(|i| format!("node-{:05}", i * 10 + 9)).collect();
    assert_eq!(command.candidates[..5], light[..], "{command:?}");
    assert!(command.saving_per_hour >= 5.0 * 0.20 - 1e-9, "{command:?}");
}

/// Snapshots on which the pools-only simulation of pods that fit nowhere else applies to some
/// candidates and not to others.
fn shortcut_fixtures() -> Vec<(&'static str, Snapshot)> {
    let full = || fixture::consolidation_fleet(fixture::Fleet::Full, 12);
    let mut spot_allowed = full();
    spot_allowed.scheduling.nodepools[0].template.requirements =
        crate::requirements::Requirements::new();
    let mut spot_to_spot = spot_allowed.clone();
    for c in spot_to_spot.candidates.iter_mut().step_by(2) {
        c.capacity_type = "spot".into();
    }
    spot_to_spot.options.spot_to_spot = true;
    let mut spot_to_spot_off = spot_to_spot.clone();
    spot_to_spot_off.options.spot_to_spot = false;
    // Pods bigger than any free room, and bigger together than the largest type: two new
    // nodes, or none at all.
    let mut oversized = Builder::new(vec![
        instance_type("c-4", 4, 0.19),
        instance_type("c-16", 16, 0.68),
    ]);
    oversized.node(
        "big-1",
        "c-16",
        "on-demand",
        "zone-a",
        &[FixturePod::new("a", 9000), FixturePod::new("b", 9000)],
    );
    oversized.node(
        "big-2",
        "c-16",
        "on-demand",
        "zone-b",
        &[FixturePod::new("c", 40_000)],
    );
    oversized.node(
        "full",
        "c-4",
        "on-demand",
        "zone-c",
        &[FixturePod::new("d", 3900)],
    );
    let mut pending = full();
    pending
        .scheduling
        .pods
        .push(FixturePod::new("waiting", 1500).pending());
    let mut anti = full();
    if let Some(b) = anti.context.bound_pods.first_mut() {
        b.anti_affinity
            .push(crate::scheduling::PodAffinityTerm::new(
                "kubernetes.io/hostname",
                Default::default(),
            ));
    }
    vec![
        ("alike", alike()),
        ("full", full()),
        (
            "mixed",
            fixture::consolidation_fleet(fixture::Fleet::Mixed, 20),
        ),
        ("easy", fixture::consolidation_cluster(30)),
        ("spot allowed", spot_allowed),
        ("spot to spot", spot_to_spot),
        ("spot to spot off", spot_to_spot_off),
        ("oversized", oversized.build()),
        ("pending", pending),
        ("bound anti-affinity", anti),
    ]
}

/// A full cluster whose nodes carry pods of a few shapes, listed and created in different
/// orders, under a CPU limit that leaves room for one 4-CPU node: 8-CPU nodes of two 3-CPU
/// pods (labelled `a` and `b`) and a 1.5-CPU one, which fit nowhere (one new node takes one
/// 3-CPU pod, the limit stops the rest), and 4-CPU nodes of a 2-CPU and a 1.5-CPU pod, which
/// fit one new 4-CPU node (no cheaper than theirs).
fn alike() -> Snapshot {
    let mut b = Builder::new(vec![
        instance_type("c-4", 4, 0.19),
        instance_type("c-8", 8, 0.30),
    ]);
    // On-demand only: a spot replacement would be cheaper than anything.
    b.snapshot().scheduling.nodepools[0]
        .template
        .requirements
        .add(crate::requirements::Requirement::in_values(
            crate::labels::CAPACITY_TYPE_LABEL,
            ["on-demand"],
        ));
    let labelled = |name: String, cpu: u64, app: &str| FixturePod {
        app: Some(app.into()),
        ..FixturePod::new(name, cpu)
    };
    for i in 0..6 {
        let mut pods = vec![
            labelled(format!("big-{i}-a"), 3000, "a"),
            labelled(format!("big-{i}-b"), 3000, "b"),
            FixturePod::new(format!("big-{i}-c"), 1500),
        ];
        // Listed in a different order on every other node.
        if i % 2 == 1 {
            pods.reverse();
        }
        b.node(&format!("big-{i}"), "c-8", "on-demand", "zone-a", &pods);
    }
    for i in 0..4 {
        let mut pods = pods(&format!("small-{i}"), &[2000, 1500]);
        if i % 2 == 1 {
            pods.reverse();
        }
        b.node(&format!("small-{i}"), "c-4", "on-demand", "zone-b", &pods);
    }
    let mut snapshot = b.build();
    // Pod `a` older than `b` on nodes 0, 1, 4 and 5 (`a` first in the queue), younger on
    // nodes 2 and 3: two queue orders of the same shapes.
    for c in snapshot.candidates.iter_mut() {
        let flip = c.node == "big-2" || c.node == "big-3";
        for p in &mut c.pods {
            let app_a = p.labels.get("app").is_some_and(|a| a == "a");
            p.created = if app_a == flip { 20 } else { 10 };
        }
    }
    let capacity: u64 = snapshot
        .scheduling
        .nodes
        .iter()
        .map(|n| n.allocatable.cpu_millis)
        .sum();
    snapshot.scheduling.nodepools[0].limits = Some(crate::scheduling::NodePoolLimits::new(
        BTreeMap::from([("cpu".to_string(), capacity + 4000)]),
        crate::resources::Resources::new().with("cpu", capacity),
    ));
    snapshot
}

#[test]
fn candidates_alike_get_the_outcome_of_their_own_simulation() {
    let snapshot = alike();
    let mut fast = simulate::Simulator::new(&snapshot);
    let mut full = simulate::Simulator::new(&snapshot);
    full.shortcut = false;
    let (mut rejected, mut replaced) = (0, 0);
    for candidate in &snapshot.candidates {
        let answer = fast.consolidate(&[candidate]).map(|s| s.new_claims);
        let simulated = full.consolidate(&[candidate]).map(|s| s.new_claims);
        assert_eq!(answer, simulated, "{}", candidate.node);
        match answer {
            Err(Rejection::Unschedulable { .. }) => rejected += 1,
            Ok(claims) if claims.len() == 1 && claims[0].pods.len() == 2 => replaced += 1,
            other => panic!("{}: {other:?}", candidate.node),
        }
    }
    assert_eq!((rejected, replaced), (6, 4));
    // Every candidate took the pools-only simulation; three shape sequences were simulated
    // (the big nodes in two queue orders, the small nodes), the rest answered from them.
    assert_eq!((fast.shortcuts, fast.reused), (10, 7));
    assert_eq!(full.shortcuts, 0);
    // The evaluator counts them the same way: single-node consolidation tries every
    // candidate (none is cheaper to replace).
    let mut evaluator = methods::Evaluator::new(&snapshot);
    let outcome = evaluator.evaluate(Method::SingleNodeConsolidation);
    assert_eq!(outcome.command, None);
    assert_eq!(
        evaluator.simulations(),
        methods::Simulations {
            total: 10,
            pools_only: 10,
            reused: 7
        }
    );
}

#[test]
fn one_evaluator_for_every_method_decides_as_a_fresh_one_per_method() {
    for (name, snapshot) in shortcut_fixtures() {
        let mut shared = methods::Evaluator::new(&snapshot);
        // Every method in turn, each twice (a method must leave the simulator as it found it).
        // The pending pods' baseline simulation runs once, for the first method that needs it.
        for method in Method::ALL.into_iter().chain(Method::ALL) {
            let fresh = evaluate(&snapshot, method);
            let outcome = shared.evaluate(method);
            assert!(
                outcome.simulations <= fresh.simulations,
                "{name}, {method:?}"
            );
            let simulations = fresh.simulations;
            assert_eq!(
                MethodOutcome {
                    simulations,
                    ..outcome
                },
                fresh,
                "{name}, {method:?}"
            );
        }
    }
}

#[test]
fn the_pools_only_simulation_decides_exactly_as_the_full_one() {
    let mut used = std::collections::BTreeMap::new();
    for (name, snapshot) in shortcut_fixtures() {
        for method in Method::ALL {
            let (fast, shortcuts) = methods::evaluate_with(&snapshot, method, true);
            let (slow, none) = methods::evaluate_with(&snapshot, method, false);
            assert_eq!(none, 0);
            assert_eq!(fast, slow, "{name}, {method:?}");
            *used.entry(name).or_insert(0) += shortcuts;
        }
    }
    // It applies where nothing fits elsewhere, and only there.
    for name in [
        "full",
        "spot allowed",
        "spot to spot",
        "spot to spot off",
        "oversized",
    ] {
        assert!(used[name] > 0, "{name}: {used:?}");
    }
    for name in ["pending", "bound anti-affinity"] {
        assert_eq!(used[name], 0, "{name}: {used:?}");
    }
}

/// A candidate whose 1-CPU pod fits beside another node's pods, that other node's pods having
/// changed `recent`ly (within the pool's 10-minute consolidateAfter) or not.
fn destination(recent: bool) -> Snapshot {
    let mut b = catalog();
    b.pool().consolidate_after = Some(Duration::from_secs(600));
    b.node("light", "c-4", "on-demand", "zone-a", &pods("l", &[1000]));
    let busy = b.node("busy", "c-8", "on-demand", "zone-a", &pods("b", &[4000]));
    busy.consolidatable = !recent;
    // Not a candidate itself, only a destination.
    busy.do_not_disrupt = true;
    b.build()
}

#[test]
fn consolidation_moves_no_pod_onto_a_node_within_its_consolidate_after() {
    let single = |snapshot: &Snapshot| evaluate(snapshot, Method::SingleNodeConsolidation);
    // The busy node settled long ago: the light node's pod moves there, the light node goes.
    let settled = single(&destination(false));
    let command = settled.command.expect("a delete");
    assert_eq!(command.candidates, ["light"]);
    assert!(command.replacements.is_empty(), "{command:?}");
    // Its pods changed a minute ago: it receives nothing, so the light node could only be
    // replaced by a cheaper one (a c-2 spot at 0.04 instead of 0.19).
    let recent = single(&destination(true));
    let command = recent.command.expect("a replace");
    assert_eq!(command.candidates, ["light"]);
    assert_eq!(command.replacements.len(), 1, "{command:?}");
    // With no cheaper type, nothing at all.
    let mut expensive = destination(true);
    for t in &mut expensive.scheduling.nodepools[0].instance_types {
        for o in t.offerings_mut().0.iter_mut() {
            o.set_price(Some(1.0));
        }
    }
    expensive.candidates[0].price = Some(0.19);
    let nothing = single(&expensive);
    assert!(nothing.command.is_none(), "{nothing:?}");
    assert!(
        nothing.rejected.iter().any(|(claim, _)| claim == "light"),
        "{nothing:?}"
    );
}

#[test]
fn drift_and_pending_pods_still_use_a_node_within_its_consolidate_after() {
    let mut snapshot = destination(true);
    snapshot.candidates[0].drifted = Some(Drifted {
        reason: "NodePoolDrifted".into(),
        since: snapshot.now() - Duration::from_secs(60),
    });
    let drift = evaluate(&snapshot, Method::Drift);
    let command = drift.command.expect("drift deletes");
    assert!(command.replacements.is_empty(), "{command:?}");
    // A pending pod that fits only on the busy node still goes there.
    let mut pending = destination(true);
    pending
        .scheduling
        .pods
        .push(fixture::FixturePod::new("waiting", 3500).pending());
    let mut sim = super::simulate::Simulator::new(&pending);
    assert!(sim.baseline().receiving.contains("busy"));
    assert_eq!(sim.baseline().new_claims, 0);
}

/// On seeded random fleets (seven candidates of four sizes with one to three pods each, and a
/// node that is not a candidate with some room), the improved multi-node search never saves
/// less than upstream's prefix search nor disrupts more pods, and often saves more.
#[test]
fn multi_node_swaps_save_more_than_the_prefix_without_disrupting_more_pods() {
    let mut state = 0x1234_5678_9abc_def0_u64;
    let mut next = |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    let types = [
        ("c-1", 1u64, 0.06),
        ("c-2", 2, 0.10),
        ("c-4", 4, 0.19),
        ("c-8", 8, 0.36),
    ];
    let (mut decided, mut better, mut gained, mut saved) = (0, 0, 0.0, 0.0);
    for f in 0..200 {
        let mut b = Builder::new(
            types
                .iter()
                .map(|(n, c, p)| instance_type(n, *c, *p))
                .collect(),
        );
        let room = 1 + next(6);
        let dest: Vec<FixturePod> = (0..(8 - room))
            .map(|i| FixturePod::new(format!("d{f}-{i}"), 1000))
            .collect();
        b.node("dest", "c-8", "on-demand", "zone-a", &dest)
            .consolidatable = false;
        for i in 0..7 {
            let (t, cpus, _) = types[next(4) as usize];
            let count = 1 + next(3);
            let size = (cpus * 1000 / (count + 1)).max(100);
            let pods: Vec<FixturePod> = (0..count)
                .map(|j| FixturePod::new(format!("n{i}-{j}"), 100 + next(size)))
                .collect();
            b.node(&format!("n{i}"), t, "on-demand", "zone-a", &pods);
        }
        let mut snapshot = b.build();
        snapshot.scheduling.nodepools[0].template.requirements.add(
            crate::requirements::Requirement::in_values(
                crate::labels::CAPACITY_TYPE_LABEL,
                ["on-demand"],
            ),
        );
        let mut upstream = snapshot.clone();
        upstream.options.multi_node_improvement = 0;
        let Some(floor) = evaluate(&upstream, Method::MultiNodeConsolidation).command else {
            continue;
        };
        let improved = evaluate(&snapshot, Method::MultiNodeConsolidation);
        let command = improved.command.expect("never worse than upstream's");
        let moved = |c: &Command| -> usize {
            c.candidates
                .iter()
                .map(|n| {
                    snapshot
                        .candidates
                        .iter()
                        .find(|x| &x.claim == n)
                        .unwrap()
                        .pods
                        .len()
                })
                .sum()
        };
        assert!(moved(&command) <= moved(&floor), "{floor:?}\n{command:?}");
        assert!(command.saving_per_hour >= floor.saving_per_hour - 1e-9);
        decided += 1;
        saved += floor.saving_per_hour;
        if command.saving_per_hour > floor.saving_per_hour + 1e-9 {
            better += 1;
            gained += command.saving_per_hour - floor.saving_per_hour;
        }
    }
    eprintln!(
        "{decided} fleets with a multi-node command; {better} improved, +{gained:.3}/h over upstream's {saved:.3}/h"
    );
    assert!(
        decided > 150 && better >= decided / 10,
        "{better} of {decided}"
    );
}

#[test]
fn a_node_holding_a_capacity_buffer_is_not_empty_but_still_drifts() {
    let buffer = |b: &mut Builder| {
        let shape = FixturePod::new("shape", 1500).pending();
        b.snapshot()
            .scheduling
            .pods
            .extend(crate::buffers::virtual_pods("default", "spare", 1, &shape));
    };
    let mut b = catalog();
    b.node("held", "c-2", "on-demand", "zone-a", &[]);
    b.node("idle", "c-2", "on-demand", "zone-a", &[]);
    buffer(&mut b);
    let snapshot = b.build();
    let outcome = evaluate(&snapshot, Method::Emptiness);
    assert_eq!(
        outcome
            .command
            .expect("the other empty node goes")
            .candidates,
        ["idle"]
    );
    assert_eq!(
        outcome.blocked,
        [("held".to_string(), Blocker::CapacityBuffer)],
        "the buffer's chunk lands on the first node that fits"
    );

    // The buffer's node is not nominated: drift replaces it (its chunk goes elsewhere).
    let mut b = catalog();
    b.node("held", "c-2", "on-demand", "zone-a", &[]).drifted = Some(Drifted {
        reason: "NodePoolDrifted".into(),
        since: std::time::SystemTime::UNIX_EPOCH,
    });
    buffer(&mut b);
    let outcome = evaluate(&b.build(), Method::Drift);
    assert!(outcome.blocked.is_empty(), "{:?}", outcome.blocked);
    assert_eq!(outcome.command.expect("drift acts").candidates, ["held"]);

    // Without the buffer, both empty nodes go.
    let mut b = catalog();
    b.node("held", "c-2", "on-demand", "zone-a", &[]);
    b.node("idle", "c-2", "on-demand", "zone-a", &[]);
    let outcome = evaluate(&b.build(), Method::Emptiness);
    assert_eq!(outcome.command.expect("both").candidates.len(), 2);
}
