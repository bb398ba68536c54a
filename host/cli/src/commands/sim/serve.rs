//! `joinery sim serve`: serve the emulated cluster (and optionally the host against it) until
//! Ctrl-C.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use joinery_simulate::scenario::{CleverCloudSpec, DelaySpec, ExoNetworkSpec};
use joinery_simulate::{ClusterApiSpec, ExoscaleSpec, Simulation, SimulationOptions};

use crate::commands::Execute;

/// `joinery sim serve …`
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Write a kubeconfig for the emulated API server here.
    #[arg(long)]
    pub kubeconfig_out: Option<PathBuf>,
    /// Simulated seconds per real second (more than 0, at most 1000).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true, value_parser = crate::value_parsers::speed)]
    pub speed: f64,
    /// How long a simulated cloud instance takes to boot and register as a node, in simulated
    /// time (a Go duration such as `30s`, `1m30s` or `0s`).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = boot_delay)]
    pub boot_delay: std::time::Duration,
    /// Also run the host (the Joinery controllers) against it.
    #[arg(long)]
    pub with_host: bool,
    /// The cloud next to the cluster: `simulated` (the generic simulated cloud), `exoscale`
    /// (also serve the fake Exoscale API, and print its URL and a test API key and secret),
    /// `clevercloud` (also run a fake Clever Cloud Kubernetes Engine and its pricing API) or
    /// `clusterapi` (also serve a fake Cluster API management cluster, and print its URL).
    #[arg(long, value_enum, default_value_t = Cloud::Simulated)]
    pub cloud: Cloud,
    /// With `--cloud exoscale`: write every exchange with the fake Exoscale API here, one
    /// JSON object per line.
    #[arg(long, value_name = "FILE.jsonl")]
    pub exoscale_journal: Option<PathBuf>,
    /// With `--cloud clusterapi`: write a kubeconfig for the management cluster here.
    #[arg(long, value_name = "FILE")]
    pub management_kubeconfig_out: Option<PathBuf>,
    /// Write a grants file for `joinery run --grants` beside this emulator here: it lets the
    /// built-in cloud plugin (`simcloud`, `exoscale` or `clevercloud`) reach this emulator's
    /// cloud, as they ship. The Secrets it names are created in the emulated
    /// cluster (namespace `joinery`).
    #[arg(long, value_name = "FILE")]
    pub grants_out: Option<PathBuf>,
    /// Write a NodeClass and a NodePool that launch in this emulator's cloud here (for
    /// `kubectl apply -f`), to go with `--grants-out`.
    #[arg(long, value_name = "FILE")]
    pub nodeclass_out: Option<PathBuf>,
    /// Before serving, load this many static nodes: a node group no autoscaler manages
    /// (tainted `joinery.dev/static=true:NoSchedule`, 16 vCPU / 64 GiB, Ready), to see how
    /// what runs against the cluster copes with its size.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub preload_nodes: usize,
    /// Before serving, load this many Running pods (owned by ReplicaSets, tolerating the
    /// static taint) bound round-robin to the `--preload-nodes` nodes.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub preload_pods: usize,
    /// Do not install the karpenter.sh and NodeClass CRDs: leave them to `helm install
    /// joinery-crd charts/joinery-crd` (which refuses CRDs it did not create). Not with
    /// `--with-host`, whose controllers need them.
    #[arg(long)]
    pub without_crds: bool,
}

fn boot_delay(text: &str) -> Result<std::time::Duration, String> {
    joinery_api::duration::parse_go_duration(text)
        .map_err(|e| format!("{e} (write a Go duration such as 30s or 1m30s)"))
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
    let zones = joinery_emulator::exoscale::default_zones();
    ExoscaleSpec {
        security_groups: vec![SECURITY_GROUP.into()],
        anti_affinity_groups: vec![ANTI_AFFINITY_GROUP.into()],
        ssh_keys: SSH_KEYS.map(String::from).to_vec(),
        private_networks: zones
            .into_iter()
            .map(|zone| ExoNetworkSpec {
                zone,
                name: PRIVATE_NETWORK.into(),
                ..Default::default()
            })
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
    /// A fake Clever Cloud Kubernetes Engine as well: the NodeGroup CRD and CKE's operator
    /// in the emulated cluster (a NodeGroup's Node boots after `--boot-delay`), and the
    /// pricing API.
    Clevercloud,
    /// A fake Cluster API management cluster as well: a second emulated API server with the
    /// `cluster.x-k8s.io` CRDs and controllers, whose Machines boot as nodes of the emulated
    /// cluster.
    Clusterapi,
}

impl Execute for ServeArgs {
    /// Serves the emulated cluster until Ctrl-C.
    async fn execute(self) -> Result<ExitCode> {
        let Self {
            kubeconfig_out,
            speed,
            boot_delay,
            with_host,
            cloud,
            exoscale_journal,
            management_kubeconfig_out,
            preload_nodes,
            preload_pods,
            grants_out,
            nodeclass_out,
            without_crds,
        } = self;
        if without_crds && with_host {
            anyhow::bail!(
                "--without-crds cannot go with --with-host: the host's controllers wait for the CRDs, and the emulator would only be ready once they are installed"
            );
        }
        if preload_pods > 0 && preload_nodes == 0 {
            anyhow::bail!(
                "--preload-pods needs --preload-nodes: the pods are bound to the preloaded nodes"
            );
        }
        if exoscale_journal.is_some() && cloud != Cloud::Exoscale {
            anyhow::bail!("--exoscale-journal needs --cloud exoscale");
        }
        if (grants_out.is_some() || nodeclass_out.is_some()) && cloud == Cloud::Clusterapi {
            anyhow::bail!(
                "--grants-out and --nodeclass-out are for --cloud simulated, exoscale or clevercloud; with clusterapi, follow docs/clusterapi.md"
            );
        }
        if management_kubeconfig_out.is_some() && cloud != Cloud::Clusterapi {
            anyhow::bail!("--management-kubeconfig-out needs --cloud clusterapi");
        }
        let exoscale = (cloud == Cloud::Exoscale).then(exoscale_world);
        let clusterapi = (cloud == Cloud::Clusterapi).then(ClusterApiSpec::default);
        let clevercloud = (cloud == Cloud::Clevercloud).then(|| CleverCloudSpec {
            boot_delay: Some(DelaySpec::Fixed(format!("{}ms", boot_delay.as_millis()))),
            ..Default::default()
        });
        // The static cluster goes in before the physics starts: its ReplicaSet controller
        // must not see a ReplicaSet before its pods (it would create more).
        let preload = (preload_nodes > 0)
            .then(|| joinery_emulator::preload::Preload::new(preload_nodes, preload_pods));
        let options = SimulationOptions {
            speed,
            boot_delay,
            start_controller: with_host,
            exoscale,
            exoscale_journal,
            clusterapi,
            clevercloud,
            preload,
            install_crds: !without_crds,
            ..Default::default()
        };
        let started = std::time::Instant::now();
        let sim = Simulation::start(options).await?;
        if preload.is_some() {
            println!(
                "preloaded:           {preload_nodes} static nodes, {preload_pods} running pods (emulator ready in {:.1} s)",
                started.elapsed().as_secs_f64()
            );
        }
        println!("emulated API server: {}", sim.api.url());
        println!("simulated cloud:     {}", sim.cloud.url());
        if let Some(fake) = &sim.exoscale {
            println!("fake Exoscale API:   {}", fake.url());
            println!(
                "  zone endpoints:    {} (zones {})",
                fake.endpoint_template(),
                fake.zones().join(", ")
            );
            println!(
                "  API key:           {}",
                joinery_emulator::exoscale::DEFAULT_API_KEY
            );
            println!(
                "  API secret:        {}",
                joinery_emulator::exoscale::DEFAULT_API_SECRET
            );
            println!(
                "  seeded:            security group {SECURITY_GROUP}, anti-affinity group {ANTI_AFFINITY_GROUP}, SSH keys {}, private network {PRIVATE_NETWORK} in every zone",
                SSH_KEYS.join(", ")
            );
        }
        if let Some(cke) = &sim.clevercloud {
            println!(
                "fake Clever Cloud:   NodeGroups (api.clever-cloud.com/v1) in the emulated cluster, turned into Nodes by CKE's operator"
            );
            println!("  pricing API:       {}", cke.pricing.url());
        }
        if let Some(capi) = &sim.clusterapi {
            println!(
                "management cluster:  {} (Cluster API MachineDeployments, MachineSets, Machines)",
                capi.management.url()
            );
            if let Some(path) = &management_kubeconfig_out {
                capi.management
                    .write_kubeconfig(path)
                    .with_context(|| format!("cannot write kubeconfig {}", path.display()))?;
                println!(
                    "management kubeconfig written to {} (kubectl --kubeconfig {} get machinedeployments -A)",
                    path.display(),
                    path.display()
                );
            }
        }
        if grants_out.is_some() || nodeclass_out.is_some() {
            let hands_on = joinery_simulate::HandsOn::for_simulation(&sim);
            hands_on
                .create_secrets(&sim)
                .await
                .context("cannot create the Secrets the grants name")?;
            let names: Vec<String> = hands_on
                .secrets
                .iter()
                .map(|(namespace, name, _)| format!("{namespace}/{name}"))
                .collect();
            println!("secrets created:     {}", names.join(", "));
            for (path, text, what) in [
                (&grants_out, &hands_on.grants, "grants"),
                (
                    &nodeclass_out,
                    &hands_on.manifests,
                    "NodeClass and NodePool",
                ),
            ] {
                if let Some(path) = path {
                    std::fs::write(path, text)
                        .with_context(|| format!("cannot write {}", path.display()))?;
                    println!("{what} written to {}", path.display());
                }
            }
        }
        if let Some(path) = &kubeconfig_out {
            sim.api
                .write_kubeconfig(path)
                .with_context(|| format!("cannot write kubeconfig {}", path.display()))?;
            println!(
                "kubeconfig written to {} (kubectl --kubeconfig {} get nodes)",
                path.display(),
                path.display()
            );
        }
        println!("press Ctrl-C to stop");
        tokio::signal::ctrl_c()
            .await
            .context("waiting for Ctrl-C")?;
        sim.shutdown().await;
        Ok(ExitCode::SUCCESS)
    }
}
