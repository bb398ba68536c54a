//! `joinery bench simulate`: whole scenarios in virtual time — simulated seconds, wall
//! seconds, the speed-up, peak memory and how much happened (the emulated API server's
//! writes). Each scenario runs in a fresh child process, so that its peak memory is its own.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use joinery_simulate::{RunOptions, Scenario, run_scenario_virtual};
use serde::{Deserialize, Serialize};

use crate::commands::Execute;

/// The scenarios measured by default: name and text.
const BUILT_IN: [(&str, &str); 3] = [
    ("quickstart", joinery_simulate::scenario::QUICKSTART),
    (
        "scale-out-1000-pods",
        include_str!("../../../../../examples/scenarios/scale-out-1000-pods.yaml"),
    ),
    (
        "scale-out-2000-pods",
        include_str!("../../../../../examples/scenarios/scale-out-2000-pods.yaml"),
    ),
];

/// `joinery bench simulate …`
#[derive(Debug, clap::Args)]
pub struct SimulateBenchArgs {
    /// Scenario files to measure (default: the quickstart and the 1,000- and 2,000-pod
    /// scale-outs, built in).
    pub scenarios: Vec<PathBuf>,
    /// Measured runs of each scenario (the median wall time is reported).
    #[arg(long, default_value_t = 1)]
    pub runs: usize,
    /// Print JSON: `{"rows": [{"scenario", "simulatedSeconds", "wallSeconds", "speedup",
    /// "peakRssMiB", "events", "passed"}]}`.
    #[arg(long)]
    pub json: bool,
    /// Internal: measure one scenario (a built-in name or a file) in this process and print
    /// its row as JSON.
    #[arg(long, hide = true)]
    pub child: Option<String>,
}

/// One row (the `--json` output's `rows[]`; keep the names stable).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Row {
    scenario: String,
    /// Simulated seconds the scenario ran.
    simulated_seconds: f64,
    /// Median wall time of a run (start-up included).
    wall_seconds: f64,
    /// Simulated seconds per wall second.
    speedup: f64,
    /// The child process's peak resident memory.
    #[serde(rename = "peakRssMiB")]
    peak_rss_mib: Option<f64>,
    /// Writes the emulated API server took.
    events: u64,
    /// Whether the scenario's expectations held.
    passed: bool,
}

impl Execute for SimulateBenchArgs {
    async fn execute(self) -> Result<ExitCode> {
        if let Some(which) = &self.child {
            let scenario = load(which)?;
            let runs = self.runs.max(1);
            let row = tokio::task::spawn_blocking(move || measure(&scenario, runs))
                .await
                .context("the measured run stopped abnormally")??;
            println!("{}", serde_json::to_string(&row)?);
            return Ok(ExitCode::SUCCESS);
        }
        let targets: Vec<String> = if self.scenarios.is_empty() {
            BUILT_IN.iter().map(|(name, _)| name.to_string()).collect()
        } else {
            self.scenarios
                .iter()
                .map(|p| p.display().to_string())
                .collect()
        };
        // A bad file is reported before anything runs.
        for target in &targets {
            load(target)?;
        }
        if !self.json {
            println!(
                "simulate benchmark: whole scenarios in virtual time, median of {} run(s), one process per row",
                self.runs.max(1)
            );
            println!(
                "{:<28} {:>10} {:>9} {:>9} {:>9} {:>9} {:>6}",
                "scenario", "simulated", "wall", "speed-up", "peak MiB", "events", "result"
            );
        }
        let mut rows = Vec::new();
        for target in targets {
            let runs = self.runs.max(1).to_string();
            let row: Row = super::child_row(
                &["bench", "simulate", "--runs", &runs, "--child", &target],
                &target,
            )?;
            if !self.json {
                println!(
                    "{:<28} {:>9.0}s {:>8.2}s {:>8.0}x {:>9} {:>9} {:>6}",
                    row.scenario,
                    row.simulated_seconds,
                    row.wall_seconds,
                    row.speedup,
                    row.peak_rss_mib
                        .map_or("-".to_string(), |m| format!("{m:.0}")),
                    row.events,
                    if row.passed { "pass" } else { "FAIL" },
                );
            }
            rows.push(row);
        }
        if self.json {
            println!(
                "{}",
                serde_json::to_string_pretty(&serde_json::json!({ "rows": rows }))?
            );
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// A built-in scenario by name, or a scenario file.
fn load(which: &str) -> Result<Scenario> {
    if let Some((name, text)) = BUILT_IN.iter().find(|(name, _)| *name == which) {
        return Ok(Scenario::parse(text, &format!("built-in {name}"))?);
    }
    let path = std::path::Path::new(which);
    if !path.exists() {
        bail!(
            "no scenario {which}: not a file, nor a built-in one ({})",
            BUILT_IN.map(|(name, _)| name).join(", ")
        );
    }
    // A file's `trace:` is played too.
    Ok(Scenario::load(Some(path), None)?)
}

fn measure(scenario: &Scenario, runs: usize) -> Result<Row> {
    let mut walls = Vec::new();
    let mut last = None;
    for _ in 0..runs {
        let report = run_scenario_virtual(
            scenario,
            RunOptions {
                seed: joinery_simulate::DEFAULT_SEED,
                ..Default::default()
            },
        )?;
        walls.push(report.wall_seconds);
        last = Some(report);
    }
    let report = last.context("no run was made")?;
    walls.sort_by(f64::total_cmp);
    let wall = walls[walls.len() / 2];
    Ok(Row {
        scenario: scenario.name.clone(),
        simulated_seconds: report.simulated_seconds,
        wall_seconds: wall,
        speedup: report.simulated_seconds / wall.max(1e-9),
        peak_rss_mib: joinery_emulator::bench::proc_status_kib("VmHWM")
            .map(|kib| kib as f64 / 1024.0),
        events: report.api_writes,
        passed: report.passed(),
    })
}
