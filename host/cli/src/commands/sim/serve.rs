//! `joinery sim serve`: serve the emulated cluster (and optionally the host against it) until
//! Ctrl-C.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use joinery_simulate::{Simulation, SimulationOptions};

use crate::commands::Execute;

/// `joinery sim serve …`
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Write a kubeconfig for the emulated API server here.
    #[arg(long)]
    pub kubeconfig_out: Option<PathBuf>,
    /// Simulated seconds per real second.
    #[arg(long, default_value_t = 1.0)]
    pub speed: f64,
    /// Also run the host (the Joinery controllers) against it.
    #[arg(long)]
    pub with_host: bool,
}

impl Execute for ServeArgs {
    /// Serves the emulated cluster until Ctrl-C.
    async fn execute(self) -> Result<ExitCode> {
        let Self { kubeconfig_out, speed, with_host } = self;
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
}
