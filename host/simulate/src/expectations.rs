//! Judging a run: a scenario's expectations against what was observed, and how late the run
//! acted on its clock.

use crate::observer::Observation;
use crate::report;
use crate::scenario::Expectations;

/// Checks expectations against an observation; each failure names the expectation.
pub fn unmet(expect: &Expectations, seen: &Observation) -> Vec<String> {
    let mut out = Vec::new();
    let mut check = |ok: bool, text: String| {
        if !ok {
            out.push(text);
        }
    };
    if let Some(n) = expect.pods_running {
        check(
            seen.pods.running == n,
            format!("podsRunning: wanted {n}, saw {}", seen.pods.running),
        );
    }
    if let Some(n) = expect.pods_pending {
        check(
            seen.pods.pending == n,
            format!("podsPending: wanted {n}, saw {}", seen.pods.pending),
        );
    }
    if let Some(n) = expect.pods_unschedulable {
        check(
            seen.pods.unschedulable == n,
            format!(
                "podsUnschedulable: wanted {n}, saw {}",
                seen.pods.unschedulable
            ),
        );
    }
    if expect.all_pods_running == Some(true) {
        check(
            seen.pods.total > 0 && seen.pods.pending == 0,
            format!(
                "allPodsRunning: {} of {} running",
                seen.pods.running, seen.pods.total
            ),
        );
    }
    if let Some(text) = &expect.all_pods_running_within {
        // Checked when the scenario was parsed.
        let within = joinery_api::duration::parse_go_duration(text)
            .unwrap_or_default()
            .as_secs_f64();
        let all_running = seen.pods.total > 0 && seen.pods.pending == 0;
        match seen.all_pods_running.filter(|_| all_running) {
            Some(at) => check(
                at <= within,
                format!(
                    "allPodsRunningWithin: wanted every pod running by {within:.0} s, they were at {at:.1} s"
                ),
            ),
            None => check(
                false,
                format!(
                    "allPodsRunningWithin: wanted every pod running by {within:.0} s; {} of {} running at {:.1} s",
                    seen.pods.running, seen.pods.total, seen.at
                ),
            ),
        }
    }
    if let Some(n) = expect.nodes {
        check(
            seen.nodes == n,
            format!("nodes: wanted {n}, saw {}", seen.nodes),
        );
    }
    if let Some(n) = expect.node_claims {
        check(
            seen.node_claims == n,
            format!("nodeClaims: wanted {n}, saw {}", seen.node_claims),
        );
    }
    if let Some(n) = expect.nodes_at_most {
        check(
            seen.nodes <= n,
            format!("nodesAtMost: wanted ≤ {n}, saw {}", seen.nodes),
        );
    }
    if let Some(n) = expect.peak_nodes_at_most {
        check(
            seen.peak_nodes <= n,
            format!(
                "peakNodesAtMost: wanted ≤ {n}, peak was {}",
                seen.peak_nodes
            ),
        );
    }
    if let Some(n) = expect.node_claims_created_at_most {
        check(
            seen.claims_created() <= n,
            format!(
                "nodeClaimsCreatedAtMost: wanted ≤ {n}, saw {}",
                seen.claims_created()
            ),
        );
    }
    if let Some(n) = expect.node_claims_created_at_least {
        check(
            seen.claims_created() >= n,
            format!(
                "nodeClaimsCreatedAtLeast: wanted ≥ {n}, saw {}",
                seen.claims_created()
            ),
        );
    }
    if let Some(n) = expect.zones_at_least {
        let zones = seen.live_zones();
        check(
            zones.len() >= n,
            format!("zonesAtLeast: wanted ≥ {n}, live nodes are in {zones:?}"),
        );
    }
    if let Some(types) = &expect.instance_types {
        let used = seen.instance_types();
        let bad: Vec<&String> = used.iter().filter(|t| !types.contains(t)).collect();
        check(
            bad.is_empty(),
            format!("instanceTypes: wanted only {types:?}, launched {used:?}"),
        );
    }
    if let Some(n) = expect.cloud_instances {
        check(
            seen.cloud_instances == n,
            format!(
                "cloudInstances: wanted {n}, the cloud has {}",
                seen.cloud_instances
            ),
        );
    }
    if let Some(buffers) = &expect.capacity_buffer_conditions {
        for (buffer, conditions) in buffers {
            for (type_, wanted) in conditions {
                let saw = seen
                    .buffer_conditions
                    .get(buffer)
                    .and_then(|c| c.get(type_));
                check(
                    saw.is_some_and(|(status, _)| status == wanted),
                    format!(
                        "capacityBufferConditions: {buffer} {type_}: wanted {wanted}, saw {}",
                        saw.map_or("none".to_string(), |(status, reason)| format!(
                            "{status} ({reason})"
                        ))
                    ),
                );
            }
        }
    }
    if let Some(reasons) = &expect.event_reasons {
        let missing: Vec<&String> = reasons
            .iter()
            .filter(|r| !seen.event_reasons.contains(*r))
            .collect();
        check(
            missing.is_empty(),
            format!("eventReasons: no Event with reason {missing:?} was recorded"),
        );
    }
    if let Some(max) = expect.cost_per_hour_at_most {
        check(
            seen.cost_per_hour <= max + 1e-9,
            format!(
                "costPerHourAtMost: wanted ≤ {max}, cost is {:.4}/h",
                seen.cost_per_hour
            ),
        );
    }
    out
}

/// How late (simulated seconds, 95th percentile of every lag series) a run may act on its
/// clock and still count as honouring its speed: Karpenter's default batch idle window is
/// one second, the physics' pod start one second and node readiness two. Beyond it the run
/// warns.
pub const LAG_TOLERANCE_SECONDS: f64 = 1.0;

/// Beyond this lag (simulated seconds, 95th percentile of a series) a run is refused: it
/// fails, naming the speed and the lag, with a speed to use instead. Five seconds late, batch
/// windows, pod starts and node readiness all happen at other moments than a real cluster's.
pub const LAG_REFUSAL_SECONDS: f64 = 5.0;

/// Fewer samples than this do not make a percentile worth judging.
const LAG_MIN_SAMPLES: u64 = 20;

/// Judges lag series against [`LAG_TOLERANCE_SECONDS`] and [`LAG_REFUSAL_SECONDS`].
pub fn judge_lag(
    snapshot: joinery_emulator::physics::LagSnapshot,
    speed: f64,
) -> report::LagReport {
    let judged = || {
        snapshot
            .series
            .iter()
            .filter(|s| s.count >= LAG_MIN_SAMPLES)
    };
    let worst = judged().max_by(|a, b| a.p95_seconds.total_cmp(&b.p95_seconds));
    let p95 = worst.map_or(0.0, |s| s.p95_seconds);
    report::LagReport {
        speed,
        tolerance_seconds: LAG_TOLERANCE_SECONDS,
        refusal_seconds: LAG_REFUSAL_SECONDS,
        honoured: p95 <= LAG_TOLERANCE_SECONDS,
        refused: p95 > LAG_REFUSAL_SECONDS,
        worst: worst.map(|s| s.name.clone()),
        series: snapshot.series.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observer;
    use crate::scenario::Scenario;

    fn series(name: &str, count: u64, p95: f64) -> joinery_emulator::physics::LagSeries {
        joinery_emulator::physics::LagSeries {
            name: name.into(),
            count,
            mean_seconds: p95 / 2.0,
            p50_seconds: p95 / 2.0,
            p95_seconds: p95,
            p99_seconds: p95,
            max_seconds: p95 * 2.0,
        }
    }

    #[test]
    fn lag_is_judged_by_the_worst_95th_percentile_warned_then_refused() {
        let snapshot = |p95: f64| joinery_emulator::physics::LagSnapshot {
            series: vec![
                series("clock", 500, 0.05),
                series("scheduler", 300, p95),
                series("kubelets", 3, 50.0),
            ],
        };
        // Too few samples to judge: the kubelets' series does not count.
        let fine = judge_lag(snapshot(0.4), 20.0);
        assert!(fine.honoured && !fine.refused, "{fine:?}");
        assert_eq!(
            (fine.refusal(), fine.warning(), fine.suggested_speed()),
            (None, None, None)
        );
        let late = judge_lag(snapshot(2.0), 20.0);
        assert!(!late.honoured && !late.refused);
        assert_eq!(late.worst.as_deref(), Some("scheduler"));
        assert_eq!(late.suggested_speed(), Some(10.0));
        let warning = late.warning().unwrap();
        assert!(
            warning.contains("--speed 20")
                && warning.contains("scheduler p95 2.00 s")
                && warning.contains("--speed 10 or lower"),
            "{warning}"
        );
        assert!(late.refusal().is_none());
        let hopeless = judge_lag(snapshot(24.0), 60.0);
        assert!(hopeless.refused);
        let refusal = hopeless.refusal().unwrap();
        assert!(
            refusal.starts_with("speed: refused, --speed 60")
                && refusal.contains("--speed 20 or lower"),
            "{refusal}"
        );
        assert!(hopeless.warning().is_none());
        assert!(
            hopeless.line().contains("speed 60 refused"),
            "{}",
            hopeless.line()
        );
    }

    #[test]
    fn time_to_running_is_checked_against_when_every_pod_ran() {
        let expect = Expectations {
            all_pods_running_within: Some("2m".into()),
            ..Default::default()
        };
        let mut seen = Observation {
            at: 90.0,
            pods: observer::PodCounts {
                total: 10,
                running: 4,
                pending: 6,
                unschedulable: 6,
            },
            ..Default::default()
        };
        let unmet_now = unmet(&expect, &seen);
        assert!(
            unmet_now.len() == 1 && unmet_now[0].contains("4 of 10 running"),
            "{unmet_now:?}"
        );
        seen.pods = observer::PodCounts {
            total: 10,
            running: 10,
            pending: 0,
            unschedulable: 0,
        };
        seen.all_pods_running = Some(118.0);
        assert!(unmet(&expect, &seen).is_empty());
        seen.all_pods_running = Some(121.5);
        assert!(unmet(&expect, &seen)[0].contains("they were at 121.5 s"));
        assert!(
            Scenario::parse("expect: {allPodsRunningWithin: soon}\n", "x.yaml")
                .unwrap_err()
                .to_string()
                .contains("expect.allPodsRunningWithin")
        );
    }

    #[test]
    fn unschedulable_pods_are_counted_apart_from_pending_ones() {
        let expect = Expectations {
            pods_unschedulable: Some(6),
            ..Default::default()
        };
        let mut seen = Observation {
            pods: observer::PodCounts {
                total: 6,
                running: 0,
                pending: 6,
                unschedulable: 3,
            },
            ..Default::default()
        };
        assert_eq!(
            unmet(&expect, &seen),
            vec!["podsUnschedulable: wanted 6, saw 3".to_string()]
        );
        seen.pods.unschedulable = 6;
        assert!(unmet(&expect, &seen).is_empty());
        let parsed = Scenario::parse(
            "steps:\n  - name: marked\n    waitFor: {podsUnschedulable: 2}\n",
            "x.yaml",
        )
        .unwrap();
        assert_eq!(
            parsed.steps[0]
                .wait_for
                .as_ref()
                .and_then(|w| w.pods_unschedulable),
            Some(2)
        );
    }

    #[test]
    fn event_reason_expectations_name_the_missing_reasons() {
        let expect = Expectations {
            event_reasons: Some(vec!["NodeGroupQuotaExceeded".into(), "Nominated".into()]),
            ..Default::default()
        };
        let mut seen = Observation::default();
        seen.event_reasons.insert("Nominated".into());
        let unmet_now = unmet(&expect, &seen);
        assert_eq!(unmet_now.len(), 1);
        assert!(
            unmet_now[0].contains("NodeGroupQuotaExceeded")
                && !unmet_now[0].contains("Nominated\""),
            "{unmet_now:?}"
        );
        seen.event_reasons.insert("NodeGroupQuotaExceeded".into());
        assert!(unmet(&expect, &seen).is_empty());
        let scenario = Scenario::parse(
            "steps:\n  - name: s\n    wait: 1s\n    expect: {eventReasons: [X]}\n",
            "x.yaml",
        )
        .unwrap();
        assert!(scenario.expects_events());
        assert!(
            !Scenario::parse("expect: {nodes: 0}\n", "x.yaml")
                .unwrap()
                .expects_events()
        );
    }
}
