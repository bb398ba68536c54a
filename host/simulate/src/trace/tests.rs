use super::generate::{GenerateOptions, Shape, generate};
use super::*;

const SCENARIO: &str = r#"
name: base
manifests:
  - {apiVersion: apps/v1, kind: Deployment, metadata: {name: web, namespace: default}, spec: {replicas: 0}}
"#;

fn scenario() -> Scenario {
    Scenario::parse(SCENARIO, "base.yaml").unwrap()
}

#[test]
fn a_trace_becomes_timed_steps_played_before_the_scenarios_own() {
    let text = "name: t\nduration: 2h\nevents:\n  - at: 0s\n    scale: {name: web, replicas: 3}\n  - at: 30m\n    cordon: {labelSelector: zone=a}\n    fault: {quota: 2}\n";
    let trace = Trace::parse(text, "t.yaml").unwrap();
    assert_eq!(trace.length(), Duration::from_secs(7200));
    let scenario = scenario().with_trace(&trace).unwrap();
    let steps = &scenario.steps;
    assert_eq!(steps.len(), 3, "two events and the trace's end");
    assert_eq!(steps[0].at.as_deref(), Some("0s"));
    assert_eq!(steps[0].scale.as_ref().map(|s| s.replicas), Some(3));
    assert_eq!(steps[0].name.as_deref(), Some("trace: scale web to 3"));
    assert!(steps[1].cordon.is_some() && steps[1].fault.is_some());
    assert_eq!(steps[2].at.as_deref(), Some("2h"));
    assert!(
        scenario.timeout() >= Duration::from_secs(7200 + 1800),
        "the timeout covers the trace"
    );
}

#[test]
fn errors_name_the_file_the_line_and_the_field() {
    let cases = [
        (
            "events:\n  - at: 1h\n    scale: {name: web, replicas: 1}\n  - at: 30m\n    scale: {name: web, replicas: 2}\n",
            "t.yaml: line 4, events[1].at: 30m comes before the previous event's 3600s",
        ),
        (
            "events:\n  - at: 0s\n    scale: {name: web, replicas: -3}\n",
            "line 2, events[0].scale.replicas: -3 is negative",
        ),
        (
            "events:\n  - at: soon\n    scale: {name: web, replicas: 1}\n",
            "line 2, events[0].at: \"soon\" is not a duration",
        ),
        (
            "events:\n  - at: 0s\n    scael: {name: web, replicas: 1}\n",
            "line 3, column 5: events[0]: unknown field `scael`",
        ),
        ("events:\n  - at: 0s\n", "line 2, events[0]: does nothing"),
    ];
    for (text, wanted) in cases {
        let error = Trace::parse(text, "t.yaml").unwrap_err().to_string();
        assert!(error.contains(wanted), "{error}\n  wanted: {wanted}");
    }
}

#[test]
fn scaling_a_deployment_nobody_creates_is_refused_with_the_ones_known() {
    let text = "events:\n  - at: 0s\n    scale: {name: web, replicas: 1}\n  - at: 1m\n    scale: {name: api, replicas: 1}\n";
    let trace = Trace::parse(text, "t.yaml").unwrap();
    let error = scenario().with_trace(&trace).unwrap_err().to_string();
    assert!(
        error.contains("line 4, events[1].scale: Deployment default/api is created neither by the scenario nor by an earlier event (Deployments it knows: default/web)"),
        "{error}"
    );
}

#[test]
fn faults_in_a_trace_need_the_simulated_cloud() {
    let text = "events:\n  - at: 0s\n    fault: {quota: 1}\n";
    let trace = Trace::parse(text, "t.yaml").unwrap();
    let mut exoscale = scenario();
    exoscale.cloud.provider = Some("exoscale".into());
    let error = exoscale.with_trace(&trace).unwrap_err().to_string();
    assert!(
        error.contains("events[0].fault: only the simulated cloud"),
        "{error}"
    );
}

#[test]
fn a_diurnal_trace_peaks_at_its_peak_hour_and_is_lowest_twelve_hours_away() {
    let trace = generate(&GenerateOptions {
        shape: Shape::Diurnal,
        min: 2,
        max: 30,
        ..Default::default()
    })
    .unwrap();
    assert_eq!(trace.duration.as_deref(), Some("86400s"));
    let level_at = |hours: u64| {
        trace
            .events
            .iter()
            .take_while(|e| {
                duration_field(Some(&e.at), "at", Duration::ZERO, "").unwrap()
                    <= Duration::from_secs(hours * 3600)
            })
            .filter_map(|e| e.scale.as_ref().map(|s| s.replicas))
            .last()
    };
    assert_eq!(level_at(14), Some(30), "the default peak is at 14:00");
    assert_eq!(level_at(2), Some(2), "lowest at 02:00");
    assert!(
        trace.events[0].apply.len() == 1,
        "the first event creates the Deployment"
    );
    // What it writes reads back as a valid trace that a scenario without a Deployment takes.
    let text = serde_norway::to_string(&trace).unwrap();
    let again = Trace::parse(&text, "generated").unwrap();
    let empty = Scenario::parse("name: empty\n", "empty").unwrap();
    empty.with_trace(&again).unwrap();
}

#[test]
fn a_batch_trace_opens_its_window_every_day() {
    let trace = generate(&GenerateOptions {
        shape: Shape::Batch,
        min: 0,
        max: 50,
        duration: Duration::from_secs(2 * 86400),
        at: Duration::from_secs(2 * 3600),
        hold: Duration::from_secs(3600),
        ..Default::default()
    })
    .unwrap();
    let ats: Vec<(&str, Option<i32>)> = trace
        .events
        .iter()
        .map(|e| (e.at.as_str(), e.scale.as_ref().map(|s| s.replicas)))
        .collect();
    assert_eq!(
        ats,
        [
            ("0s", None),
            ("7200s", Some(50)),
            ("10800s", Some(0)),
            ("93600s", Some(50)),
            ("97200s", Some(0)),
        ]
    );
}

#[test]
fn nonsense_options_are_refused_naming_the_option() {
    let error = generate(&GenerateOptions {
        min: 9,
        max: 3,
        ..Default::default()
    })
    .unwrap_err();
    assert!(error.contains("--min 9 is more than --max 3"), "{error}");
    assert!(
        Shape::parse("sawtooth")
            .unwrap_err()
            .contains("diurnal, spike, batch, ramp")
    );
}

#[test]
fn item_lines_finds_each_event_of_a_block_sequence() {
    let text = "name: x\nevents:\n  # first\n  - at: 0s\n    scale: {name: a, replicas: 1}\n  - at: 1s\n    apply:\n      - {kind: X}\nduration: 1h\n";
    assert_eq!(item_lines(text, "events"), vec![4, 6]);
    assert!(item_lines("events: [{at: 0s}]\n", "events").is_empty());
}

#[test]
fn an_empty_scenario_file_is_an_error_naming_it() {
    let dir = std::env::temp_dir().join(format!("joinery-empty-scenario-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("empty.yaml");
    for text in ["", "# only a comment\n", "name: nothing\n"] {
        std::fs::write(&path, text).unwrap();
        let e = Scenario::load(Some(&path), None).unwrap_err();
        assert_eq!(e.origin, path.display().to_string());
        assert!(e.message.contains("nothing to simulate"), "{e}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_jobs_shape_starts_one_job_a_day_whose_pods_run_for_the_hold() {
    let trace = generate(&GenerateOptions {
        shape: Shape::Jobs,
        deployment: "etl".into(),
        max: 12,
        at: Duration::from_secs(2 * 3600),
        hold: Duration::from_secs(40 * 60),
        duration: Duration::from_secs(2 * 24 * 3600),
        ..Default::default()
    })
    .unwrap();
    let starts: Vec<(&str, &str)> = trace
        .events
        .iter()
        .map(|e| {
            (
                e.at.as_str(),
                e.apply[0]["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(starts, [("7200s", "etl-day-1"), ("93600s", "etl-day-2")]);
    let job = &trace.events[0].apply[0];
    assert_eq!(job["kind"], "Job");
    assert_eq!(job["spec"]["parallelism"], 12);
    assert_eq!(job["spec"]["completions"], 12);
    assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never");
    assert_eq!(
        job["spec"]["template"]["metadata"]["annotations"]
            [joinery_emulator::physics::RUN_FOR_ANNOTATION],
        "2400s"
    );
    // Nonsense is refused, naming the option.
    let none = generate(&GenerateOptions {
        shape: Shape::Jobs,
        max: 0,
        ..Default::default()
    })
    .unwrap_err();
    assert!(none.contains("--max"), "{none}");
    let late = generate(&GenerateOptions {
        shape: Shape::Jobs,
        at: Duration::from_secs(2 * 3600),
        duration: Duration::from_secs(3600),
        ..Default::default()
    })
    .unwrap_err();
    assert!(late.contains("--at"), "{late}");
}

#[test]
fn a_snapshot_is_read_relative_to_the_scenario_and_the_flag_replaces_it() {
    let dir =
        std::env::temp_dir().join(format!("joinery-snapshot-scenario-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("snapshots")).unwrap();
    let node = |name: &str| format!("apiVersion: v1\nkind: Node\nmetadata: {{name: {name}}}\n");
    std::fs::write(dir.join("snapshots/a.yaml"), node("from-the-scenario")).unwrap();
    std::fs::write(
        dir.join("b.yaml"),
        format!("{}---\n{}", node("x"), node("y")),
    )
    .unwrap();
    // A scenario with only a snapshot is something to simulate.
    let path = dir.join("scenario.yaml");
    std::fs::write(&path, "name: s\nsnapshot: snapshots/a.yaml\n").unwrap();
    let scenario = Scenario::load(Some(&path), None).unwrap();
    let snapshot = scenario.loaded_snapshot.expect("read with the scenario");
    assert_eq!(
        snapshot.origin,
        dir.join("snapshots/a.yaml").display().to_string()
    );
    assert_eq!(snapshot.len(), 1);
    let given = dir.join("b.yaml");
    let scenario = Scenario::load_with(Some(&path), None, Some(&given)).unwrap();
    assert_eq!(
        scenario.snapshot.as_deref(),
        Some(given.display().to_string().as_str())
    );
    assert_eq!(scenario.loaded_snapshot.unwrap().len(), 2);
    // A missing file is named.
    std::fs::write(&path, "name: s\nsnapshot: nowhere.yaml\n").unwrap();
    let e = Scenario::load(Some(&path), None).unwrap_err();
    assert_eq!(e.origin, dir.join("nowhere.yaml").display().to_string());
    assert!(e.message.starts_with("cannot read it"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}
