//! `joinery simulate`: run a scenario (from a cluster snapshot, if given) against the emulated cluster and simulated cloud with
//! the real host and plugins, print its timeline and summary, and pass or fail on it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use joinery_simulate::compare::{self, Variants};
use joinery_simulate::{RunOptions, Scenario, run_scenario_virtual, run_scenario_with};

use super::Execute;

/// `joinery simulate …`
#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// Scenario file (YAML). Without it, the built-in quickstart runs.
    pub scenario: Option<PathBuf>,
    /// Play this workload trace (YAML, see docs/simulate.md) from the start, before the
    /// scenario's steps; it replaces the scenario's own `trace:`.
    #[arg(long, value_name = "FILE.yaml")]
    pub trace: Option<PathBuf>,
    /// Start from this cluster snapshot (`kubectl get -o yaml` output, as `joinery schedule`
    /// reads; see docs/simulate.md): its Nodes, pods, workloads and Karpenter objects are
    /// the cluster before the host starts; it replaces the scenario's own `snapshot:`.
    #[arg(long, value_name = "FILE.yaml")]
    pub snapshot: Option<PathBuf>,
    /// Run the scenario as written (`baseline`) and under each variant of this file (YAML,
    /// see docs/simulate.md), in virtual time with one seed, and print one table;
    /// `--report` then writes the comparison, `--plot` draws the variants overlaid.
    #[arg(long, value_name = "VARIANTS.yaml", conflicts_with = "realtime")]
    pub compare: Option<PathBuf>,
    /// Write the JSON report here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Draw nodes by instance type, pods pending and running, and the hourly cost over
    /// simulated time into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Run in real time × `--speed` on loopback TCP, with the lag meter, instead of in
    /// virtual time (the default: the clock jumps ahead whenever the simulation is idle, and
    /// the same scenario and seed give the same report on every run).
    #[arg(long)]
    pub realtime: bool,
    /// With `--realtime`: simulated seconds per real second [default: 20].
    #[arg(long, requires = "realtime", allow_negative_numbers = true, value_parser = crate::value_parsers::speed)]
    pub speed: Option<f64>,
    /// Seed of the simulation's generators (generated names and uids).
    #[arg(long, default_value_t = joinery_simulate::DEFAULT_SEED)]
    pub seed: u64,
    /// Do not print the timeline as it happens (the summary is still printed).
    #[arg(long)]
    pub quiet: bool,
    /// Exoscale scenarios: write every exchange with the fake Exoscale API here, one JSON
    /// object per line (what the conformance test in `conformance/exoscale/` checks).
    #[arg(long, value_name = "FILE.jsonl")]
    pub exoscale_journal: Option<PathBuf>,
    /// Load the plugin directory DIR (or every plugin directory in it), as `joinery run
    /// --plugin-dir` does, beside the built-in plugins: a renderer you are writing, say.
    /// Repeatable.
    #[arg(long = "plugin-dir", value_name = "DIR")]
    pub plugin_dirs: Vec<PathBuf>,
}

impl SimulateArgs {
    /// `--compare`: runs every variant, prints the table, writes the comparison and plot.
    async fn compare(&self, scenario: Scenario, path: &std::path::Path) -> Result<ExitCode> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read variants {}", path.display()))?;
        let variants = Variants::parse(&text, &path.display().to_string())?;
        // Checked before anything runs.
        variants.scenarios(&scenario)?;
        let seed = self.seed;
        let comparison =
            tokio::task::spawn_blocking(move || compare::run(&scenario, &variants, seed))
                .await
                .context("the comparison stopped abnormally")??;
        print!("{}", comparison.table());
        if let Some(report) = &self.report {
            let json = serde_json::to_string_pretty(&comparison)?;
            std::fs::write(report, json + "\n")
                .with_context(|| format!("cannot write report {}", report.display()))?;
        }
        if let Some(plot) = &self.plot {
            let svg = joinery_simulate::plot::compare_svg(&comparison)?;
            std::fs::write(plot, svg)
                .with_context(|| format!("cannot write plot {}", plot.display()))?;
        }
        Ok(ExitCode::SUCCESS)
    }
}

impl Execute for SimulateArgs {
    /// Runs a scenario and prints its timeline and summary; exit code 0 when it passed.
    async fn execute(self) -> Result<ExitCode> {
        let scenario = Scenario::load_with(
            self.scenario.as_deref(),
            self.trace.as_deref(),
            self.snapshot.as_deref(),
        )?;
        let speed = self.speed.unwrap_or(joinery_simulate::DEFAULT_SPEED);
        if !self.quiet {
            println!(
                "scenario {}: {}",
                scenario.name,
                scenario.description.trim()
            );
        }
        if self.exoscale_journal.is_some() && scenario.cloud.provider() != "exoscale" {
            anyhow::bail!(
                "--exoscale-journal needs a scenario whose cloud.provider is exoscale; {} uses {}",
                scenario.name,
                scenario.cloud.provider()
            );
        }
        if let Some(path) = &self.compare {
            return self.compare(scenario, path).await;
        }
        let run = RunOptions {
            virtual_time: !self.realtime,
            speed,
            seed: self.seed,
            echo: !self.quiet,
            exoscale_journal: self.exoscale_journal.clone(),
            plugin_dirs: self.plugin_dirs.clone(),
        };
        let report = if self.realtime {
            run_scenario_with(&scenario, run).await?
        } else {
            tokio::task::spawn_blocking(move || run_scenario_virtual(&scenario, run))
                .await
                .context("the virtual-time run stopped abnormally")??
        };
        print!("{}", report.summary());
        if let Some(path) = &self.report {
            let json = serde_json::to_string_pretty(&report)?;
            std::fs::write(path, json + "\n")
                .with_context(|| format!("cannot write report {}", path.display()))?;
        }
        if let Some(path) = &self.plot {
            let svg = joinery_simulate::plot::svg(&report)?;
            std::fs::write(path, svg)
                .with_context(|| format!("cannot write plot {}", path.display()))?;
        }
        Ok(if report.passed() {
            ExitCode::SUCCESS
        } else {
            crate::exit::CHECK_FAILED
        })
    }

    /// The timeline and summary are the output: only warnings are logged.
    fn default_log_level(&self) -> String {
        "warn".to_string()
    }
}
