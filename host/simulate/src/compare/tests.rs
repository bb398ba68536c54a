use super::*;
use crate::observer::Sample;

const SCENARIO: &str = r#"
name: base
manifests:
  - apiVersion: karpenter.sh/v1
    kind: NodePool
    metadata: {name: default}
    spec:
      template:
        spec:
          nodeClassRef: {group: sim.joinery.dev, kind: SimNodeClass, name: default}
          requirements: []
      disruption: {consolidationPolicy: WhenEmptyOrUnderutilized, consolidateAfter: 1m}
  - {apiVersion: apps/v1, kind: Deployment, metadata: {name: web, namespace: default}, spec: {replicas: 1}}
"#;

fn baseline() -> Scenario {
    Scenario::parse(SCENARIO, "base.yaml").unwrap()
}

#[test]
fn each_variant_sets_its_paths_on_a_copy_of_the_scenario() {
    let text = "variants:\n  - name: empty-only\n    set:\n      NodePool/default:\n        spec.disruption.consolidationPolicy: WhenEmpty\n        spec.template.metadata.labels.team: a\n    settings: {BATCH_IDLE_DURATION: 2s}\n";
    let variants = Variants::parse(text, "v.yaml").unwrap();
    let scenarios = variants.scenarios(&baseline()).unwrap();
    assert_eq!(scenarios.len(), 2);
    assert_eq!(scenarios[0].0, "baseline");
    let pool = |s: &Scenario| s.manifests[0].clone();
    assert_eq!(
        pool(&scenarios[0].1)["spec"]["disruption"]["consolidationPolicy"],
        "WhenEmptyOrUnderutilized"
    );
    let changed = pool(&scenarios[1].1);
    assert_eq!(
        changed["spec"]["disruption"]["consolidationPolicy"],
        "WhenEmpty"
    );
    assert_eq!(changed["spec"]["disruption"]["consolidateAfter"], "1m");
    assert_eq!(
        changed["spec"]["template"]["metadata"]["labels"]["team"],
        "a"
    );
    assert_eq!(scenarios[1].1.settings["BATCH_IDLE_DURATION"], "2s");
}

#[test]
fn an_unknown_path_or_target_is_refused_naming_the_line_and_the_field() {
    let cases = [
        (
            "variants:\n  - name: a\n    set: {NodePool/default: {spec.disruption.consolidatAfter: 10m}}\n",
            "v.yaml: line 2, variants[0].set.NodePool/default.spec.disruption.consolidatAfter: NodePool has no field \"consolidatAfter\" at spec.disruption",
        ),
        (
            "variants:\n  - name: a\n    set: {NodePool/other: {spec.weight: 3}}\n",
            "line 2, variants[0].set.NodePool/other: the scenario's manifests have no NodePool named \"other\"",
        ),
        (
            "variants:\n  - name: a\n    set: {Deployment/web: {spec.strategy.type: Recreate}}\n",
            "line 2, variants[0].set.Deployment/web.spec.strategy.type: spec.strategy is not in the manifest",
        ),
        (
            "variants:\n  - name: baseline\n",
            "line 2, variants[0].name: \"baseline\" must be set, unique",
        ),
        (
            "variants:\n  - nmae: a\n",
            "line 2, column 5: variants[0]: unknown field `nmae`",
        ),
    ];
    for (text, wanted) in cases {
        let error = Variants::parse(text, "v.yaml")
            .and_then(|v| v.scenarios(&baseline()))
            .unwrap_err()
            .to_string();
        assert!(error.contains(wanted), "{error}\n  wanted: {wanted}");
    }
}

fn report(samples: &[(f64, f64)], end: f64) -> Report {
    let scenario = baseline();
    let mut report = Report::new(
        &scenario,
        &Default::default(),
        Vec::new(),
        &[],
        Vec::new(),
        end,
        0.0,
    );
    report.samples = samples
        .iter()
        .map(|(at, cost)| Sample {
            at: *at,
            cost_per_hour: *cost,
            ..Default::default()
        })
        .collect();
    report
}

#[test]
fn the_cost_is_integrated_over_time_and_its_median_weighted_by_time() {
    // 1/h for an hour, 4/h for half an hour, 0 for the last half hour.
    let r = report(&[(0.0, 1.0), (3600.0, 4.0), (5400.0, 0.0)], 7200.0);
    let (total, p50, max) = cost_over_time(&r);
    assert!((total - 3.0).abs() < 1e-9, "{total}");
    assert_eq!(max, 4.0);
    assert_eq!(p50, 1.0, "half of the two hours is at 1/h or less");
}
