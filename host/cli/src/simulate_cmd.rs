//! `joinery simulate` and `joinery sim serve`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use joinery_simulate::scenario::QUICKSTART;
use joinery_simulate::{Scenario, Simulation, SimulationOptions, run_scenario};

use crate::cli::SimulateArgs;

/// Runs a scenario and prints its timeline and summary; exit code 0 when it passed.
pub async fn simulate(args: SimulateArgs) -> Result<ExitCode> {
    let scenario = match &args.scenario {
        Some(path) => {
            let text = std::fs::read_to_string(path).with_context(|| format!("cannot read scenario {}", path.display()))?;
            Scenario::parse(&text, &path.display().to_string())?
        }
        None => Scenario::parse(QUICKSTART, "built-in quickstart")?,
    };
    if !(args.speed.is_finite() && args.speed > 0.0) {
        anyhow::bail!("--speed must be a positive number, got {}", args.speed);
    }
    if !args.quiet {
        println!("scenario {}: {}", scenario.name, scenario.description.trim());
    }
    let report = run_scenario(&scenario, args.speed, !args.quiet).await?;
    print!("{}", report.summary());
    if let Some(path) = &args.report {
        let json = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, json + "\n").with_context(|| format!("cannot write report {}", path.display()))?;
    }
    Ok(if report.passed() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Serves the emulated cluster until Ctrl-C.
pub async fn serve(kubeconfig_out: Option<PathBuf>, speed: f64, with_host: bool) -> Result<ExitCode> {
    let sim = Simulation::start(SimulationOptions { speed, start_controller: with_host, ..Default::default() }).await?;
    println!("emulated API server: {}", sim.api.url());
    println!("simulated cloud:     {}", sim.cloud.url());
    if let Some(path) = &kubeconfig_out {
        sim.api.write_kubeconfig(path).with_context(|| format!("cannot write kubeconfig {}", path.display()))?;
        println!("kubeconfig written to {} (kubectl --kubeconfig {} get nodes)", path.display(), path.display());
    }
    println!("press Ctrl-C to stop");
    tokio::signal::ctrl_c().await.context("waiting for Ctrl-C")?;
    sim.shutdown().await;
    Ok(ExitCode::SUCCESS)
}
