//! `joinery sim serve`: serve the emulated cluster (and optionally the host against it) until
//! Ctrl-C.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use joinery_simulate::scenario::ExoNetworkSpec;
use joinery_simulate::{ExoscaleSpec, Simulation, SimulationOptions};

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
    /// The cloud next to the cluster: `simulated` (the generic simulated cloud) or `exoscale`
    /// (also serve the fake Exoscale API, and print its URL and a test API key and secret).
    #[arg(long, value_enum, default_value_t = Cloud::Simulated)]
    pub cloud: Cloud,
    /// With `--cloud exoscale`: write every exchange with the fake Exoscale API here, one
    /// JSON object per line.
    #[arg(long, value_name = "FILE.jsonl")]
    pub exoscale_journal: Option<PathBuf>,
}

/// What `--cloud exoscale` creates in the fake Exoscale API, so a NodeClass or a client has
/// something to refer to (the fake has no calls that create these).
const SECURITY_GROUP: &str = "k8s-nodes";
const ANTI_AFFINITY_GROUP: &str = "k8s-spread";
const SSH_KEYS: [&str; 2] = ["ops", "ci"];
const PRIVATE_NETWORK: &str = "k8s-internal";

/// The fake Exoscale API's contents under `joinery sim serve --cloud exoscale`: the default
/// zones, instance types and templates, plus the objects named above.
fn exoscale_world() -> ExoscaleSpec {
    let zones = joinery_sim::exoscale::default_zones();
    ExoscaleSpec {
        security_groups: vec![SECURITY_GROUP.into()],
        anti_affinity_groups: vec![ANTI_AFFINITY_GROUP.into()],
        ssh_keys: SSH_KEYS.map(String::from).to_vec(),
        private_networks: zones
            .into_iter()
            .map(|zone| ExoNetworkSpec { zone, name: PRIVATE_NETWORK.into(), ..Default::default() })
            .collect(),
        ..Default::default()
    }
}

/// The clouds `joinery sim serve` can serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Cloud {
    /// The generic simulated cloud only.
    Simulated,
    /// The fake Exoscale API as well (its instances boot as nodes of the emulated cluster).
    Exoscale,
}

impl Execute for ServeArgs {
    /// Serves the emulated cluster until Ctrl-C.
    async fn execute(self) -> Result<ExitCode> {
        let Self { kubeconfig_out, speed, with_host, cloud, exoscale_journal } = self;
        if exoscale_journal.is_some() && cloud != Cloud::Exoscale {
            anyhow::bail!("--exoscale-journal needs --cloud exoscale");
        }
        let exoscale = (cloud == Cloud::Exoscale).then(exoscale_world);
        let options = SimulationOptions { speed, start_controller: with_host, exoscale, exoscale_journal, ..Default::default() };
        let sim = Simulation::start(options).await?;
        println!("emulated API server: {}", sim.api.url());
        println!("simulated cloud:     {}", sim.cloud.url());
        if let Some(fake) = &sim.exoscale {
            println!("fake Exoscale API:   {}", fake.url());
            println!("  zone endpoints:    {} (zones {})", fake.endpoint_template(), fake.zones().join(", "));
            println!("  API key:           {}", joinery_sim::exoscale::DEFAULT_API_KEY);
            println!("  API secret:        {}", joinery_sim::exoscale::DEFAULT_API_SECRET);
            println!(
                "  seeded:            security group {SECURITY_GROUP}, anti-affinity group {ANTI_AFFINITY_GROUP}, SSH keys {}, private network {PRIVATE_NETWORK} in every zone",
                SSH_KEYS.join(", ")
            );
        }
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
