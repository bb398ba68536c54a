//! Driving a [`Scenario`] to its end: the simulation started at the scenario's `startAt`, its
//! manifests and steps applied, the cluster sampled, the expectations checked, the report
//! written.

use std::path::PathBuf;
use std::time::Duration;

use joinery_controller::Settings;

use crate::clouds::{cloud_report, node_class_report};
use crate::error::SimulateError;
use crate::expectations::unmet;
use crate::observer::Observer;
use crate::report::Report;
use crate::scenario::{self, Scenario, ScenarioError};
use crate::simulation::{Simulation, SimulationOptions};

/// How [`run_scenario_with`] runs a scenario.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Run in virtual time (see [`crate::virtual_time`]; [`run_scenario_virtual`] sets it).
    pub virtual_time: bool,
    /// Simulated seconds per real second, in real time.
    pub speed: f64,
    /// The seed of the simulation's generators (see [`SimulationOptions::seed`]).
    pub seed: u64,
    /// Print the timeline as it happens.
    pub echo: bool,
    /// See [`SimulationOptions::exoscale_journal`] (Exoscale scenarios only).
    pub exoscale_journal: Option<PathBuf>,
    /// See [`SimulationOptions::plugin_dirs`].
    pub plugin_dirs: Vec<PathBuf>,
}

/// Runs a scenario to its end. `echo` prints the timeline as it happens.
pub async fn run_scenario(
    scenario: &Scenario,
    speed: f64,
    echo: bool,
) -> Result<Report, SimulateError> {
    run_scenario_with(
        scenario,
        RunOptions {
            virtual_time: false,
            speed,
            seed: crate::DEFAULT_SEED,
            echo,
            exoscale_journal: None,
            plugin_dirs: Vec::new(),
        },
    )
    .await
}

/// Runs a scenario to its end in virtual time (see [`crate::virtual_time`]), with `run`'s
/// seed, echo and journal, on a runtime of its own: blocks the calling thread until the
/// scenario ends. Same scenario and seed, same report (but for `wallSeconds`).
pub fn run_scenario_virtual(scenario: &Scenario, run: RunOptions) -> Result<Report, SimulateError> {
    let scenario = scenario.clone();
    let run = RunOptions {
        virtual_time: true,
        ..run
    };
    crate::virtual_time::run(move || async move { run_scenario_with(&scenario, run).await })?
}

/// [`run_scenario`] with every option.
pub async fn run_scenario_with(
    scenario: &Scenario,
    run: RunOptions,
) -> Result<Report, SimulateError> {
    let RunOptions {
        virtual_time,
        speed,
        seed,
        echo,
        exoscale_journal,
        plugin_dirs,
    } = run;
    let origin = scenario.name.clone();
    let settings = Settings::from_lookup(|k| {
        scenario
            .settings
            .get(k)
            .cloned()
            .or_else(|| std::env::var(k).ok())
    })
    .map_err(|e| ScenarioError {
        origin: origin.clone(),
        message: format!("settings: {e}"),
    })?;
    let boot_delay = scenario::duration_field(
        scenario.cloud.boot_delay.as_deref(),
        "cloud.bootDelay",
        Duration::from_secs(30),
        &origin,
    )?;
    let options = SimulationOptions {
        virtual_time,
        speed,
        seed,
        catalog: scenario.cloud.catalog.clone().unwrap_or_default(),
        boot_delay,
        settings,
        // Started below, once the clock reads `startAt`.
        start_controller: false,
        faults: scenario.cloud.faults.clone(),
        secrets: scenario.secrets.clone(),
        exoscale: (scenario.cloud.provider() == "exoscale")
            .then(|| scenario.cloud.exoscale.clone().unwrap_or_default()),
        exoscale_journal,
        clevercloud: (scenario.cloud.provider() == "clevercloud")
            .then(|| scenario.cloud.clevercloud.clone().unwrap_or_default()),
        clusterapi: (scenario.cloud.provider() == "clusterapi")
            .then(|| scenario.cloud.clusterapi.clone().unwrap_or_default()),
        preload: None,
        snapshot: snapshot(scenario)?,
        install_crds: true,
        plugin_dirs,
    };
    let wall = std::time::Instant::now();
    let start_at = scenario.start_at()?;
    let mut sim = Simulation::start(options).await?;
    if let Some(at) = start_at {
        // The scenario's timeline starts now: it reads `startAt` here. Before the host starts:
        // a controller that read the clock before a rebase into the past would wait for the
        // time it read to come again (the disruption loop polled once and never again).
        sim.clock.rebase(at);
    }
    sim.start_controller().await?;
    let mut observer = Observer::new(sim.client.clone(), sim.clock.clone(), echo);
    if let Some(snapshot) = &scenario.snapshot {
        observer.note(format!("snapshot {snapshot}: the cluster's starting state"));
        for note in &sim.snapshot_notes {
            observer.note(format!("snapshot: {note}"));
        }
    }
    if let Some(snapshot) = &scenario.loaded_snapshot {
        observer.adopted_claims(snapshot.claims());
    }
    if scenario.expects_events() {
        observer.record_events();
    }
    if scenario.watches_buffers() {
        observer.record_buffers();
    }
    // Setting up (compiling the plugins, creating the CRDs) is not the scenario's lag.
    if let Some(lag) = sim.lag() {
        lag.reset();
    }
    let mut failures = Vec::new();
    let deadline = scenario.timeout();
    let result = drive(&sim, scenario, &mut observer, &mut failures, deadline).await;
    let _ = observer.sample(|| sim.cloud_instances()).await;
    if let Err(e) = result {
        failures.push(e.to_string());
    }
    if let Some(expect) = &scenario.expect {
        for f in unmet(expect, observer.observation()) {
            failures.push(format!("final expectation {f}"));
        }
    }
    if virtual_time {
        let objects = sim.api.store().every_object();
        // The cluster was set up before a scenario's `startAt` moved the clock.
        let set_up = std::time::UNIX_EPOCH
            + Duration::from_secs(crate::simulation::VIRTUAL_START_UNIX_SECONDS);
        let start = (sim.clock.now() - sim.clock.elapsed()).min(set_up);
        if let Some(leak) =
            crate::clock_discipline::outside_the_run(&objects, start, sim.clock.now())
        {
            failures.push(leak);
        }
    }
    let lag = sim.lag_report();
    if let Some(refusal) = lag.refusal() {
        failures.push(refusal);
    }
    let pending = observer.pending_pods().await.unwrap_or_default();
    let mut report = Report::new(
        scenario,
        observer.observation(),
        pending,
        &observer.timeline,
        failures,
        observer.now(),
        wall.elapsed().as_secs_f64(),
    );
    report.lag = lag;
    report.api_writes = sim.api.resource_version();
    report.workload = crate::report::WorkloadReport::of(
        observer.observation(),
        sim.api.store().evictions(),
        observer.now(),
    );
    report.time = if virtual_time { "virtual" } else { "realtime" }.into();
    report.seed = seed;
    report.cloud = cloud_report(&sim, scenario.cloud.provider());
    report.node_classes = node_class_report(&sim).await;
    report.buffers = crate::buffers::buffer_report(&sim, observer.observation()).await;
    report.totals.buffer_cost_per_hour_at_end = report
        .buffers
        .iter()
        .map(|b| b.cost_per_hour)
        .fold(0.0, |a, b| a + b);
    // Its watches end first, so the API server's shutdown does not cut them mid-stream.
    drop(observer);
    sim.shutdown().await;
    Ok(report)
}

/// The scenario's snapshot, read by [`Scenario::load_with`]; a scenario that names one it did
/// not read (parsed alone, with [`Scenario::parse`]) is refused.
fn snapshot(
    scenario: &Scenario,
) -> Result<Option<std::sync::Arc<crate::snapshot::ClusterSnapshot>>, ScenarioError> {
    match (&scenario.snapshot, &scenario.loaded_snapshot) {
        (Some(file), None) => Err(ScenarioError {
            origin: scenario.name.clone(),
            message: format!(
                "snapshot: {file} was not read; load the scenario from its file (Scenario::load_with) to read it"
            ),
        }),
        (_, loaded) => Ok(loaded.clone()),
    }
}

async fn drive(
    sim: &Simulation,
    scenario: &Scenario,
    observer: &mut Observer,
    failures: &mut Vec<String>,
    deadline: Duration,
) -> Result<(), SimulateError> {
    let origin = scenario.name.clone();
    for m in &scenario.manifests {
        sim.apply(m).await?;
    }
    observer.note(format!("applied {} manifests", scenario.manifests.len()));
    for (i, step) in scenario.steps.iter().enumerate() {
        let label = step.name.clone().unwrap_or_else(|| format!("steps[{i}]"));
        if let Some(at) = &step.at {
            let at = scenario::duration_field(
                Some(at),
                &format!("steps[{i}].at"),
                Duration::ZERO,
                &origin,
            )?;
            while observer.now() < at.as_secs_f64() {
                sample_pause(sim, observer, scenario.sample_every()).await;
            }
        }
        for m in &step.apply {
            sim.apply(m).await?;
        }
        for r in &step.delete {
            let count = sim.delete(r).await?;
            let target = r
                .name
                .clone()
                .or_else(|| r.label_selector.clone().map(|s| format!("[{s}]")))
                .unwrap_or_default();
            observer.note(format!("{label}: deleted {count} {} {target}", r.kind));
        }
        for (target, unschedulable) in [(&step.cordon, true), (&step.uncordon, false)] {
            if let Some(target) = target {
                let count = sim.cordon(target, unschedulable).await?;
                let verb = if unschedulable {
                    "cordoned"
                } else {
                    "uncordoned"
                };
                observer.note(format!("{label}: {verb} {count} node(s)"));
            }
        }
        if let Some(faults) = &step.fault {
            sim.set_faults(faults);
            observer.note(format!("{label}: cloud faults changed"));
        }
        if let Some(f) = &step.node_fault {
            let nodes = sim.node_fault(f).await?;
            let hardware = if f.hardware { " (hardware)" } else { "" };
            observer.note(format!(
                "{label}: {}{hardware} on {}",
                f.fault,
                if nodes.is_empty() {
                    "no node".to_string()
                } else {
                    nodes.join(", ")
                }
            ));
        }
        if let Some(s) = &step.scale {
            sim.scale(s).await?;
            observer.note(format!("{label}: scaled {} to {}", s.name, s.replicas));
        } else if step.cordon.is_none()
            && step.uncordon.is_none()
            && step.fault.is_none()
            && step.node_fault.is_none()
        {
            observer.note(format!("{label}: started"));
        }
        if let Some(wait) = &step.wait {
            let wait = scenario::duration_field(
                Some(wait),
                &format!("steps[{i}].wait"),
                Duration::ZERO,
                &origin,
            )?;
            let until = observer.now() + wait.as_secs_f64();
            while observer.now() < until {
                sample_pause(sim, observer, scenario.sample_every()).await;
            }
        }
        if let Some(wait) = &step.wait_for {
            let limit = scenario::duration_field(
                step.timeout.as_deref(),
                &format!("steps[{i}].timeout"),
                Duration::from_secs(900),
                &origin,
            )?;
            let started = observer.now();
            loop {
                sample_pause(sim, observer, scenario.sample_every()).await;
                let left = unmet(wait, observer.observation());
                if left.is_empty() {
                    observer.note(format!("{label}: reached"));
                    break;
                }
                let now = observer.now();
                if now - started > limit.as_secs_f64() || now > deadline.as_secs_f64() {
                    failures.push(format!(
                        "{label}: waitFor not reached within {}s: {}",
                        limit.as_secs(),
                        left.join("; ")
                    ));
                    return Ok(());
                }
            }
        }
        if let Some(expect) = &step.expect {
            for f in unmet(expect, observer.observation()) {
                failures.push(format!("{label}: expectation {f}"));
            }
        }
    }
    Ok(())
}

async fn sample_pause(sim: &Simulation, observer: &mut Observer, every: Duration) {
    tokio::time::sleep(sim.clock.to_real(every)).await;
    if let Err(e) = observer.sample(|| sim.cloud_instances()).await {
        tracing::warn!(error = %e, "sampling the cluster failed");
    }
    if !observer.lag_noted {
        let lag = sim.lag_report();
        if !lag.honoured {
            observer.lag_noted = true;
            let worst = lag
                .worst
                .as_deref()
                .and_then(|w| lag.series.iter().find(|s| s.name == w));
            if let Some(worst) = worst {
                observer.note(format!(
                    "WARNING: falling behind the clock ({} p95 {:.2} s > {} s): --speed {} is too fast for this machine",
                    worst.name, worst.p95_seconds, lag.tolerance_seconds, lag.speed
                ));
            }
        }
    }
}
