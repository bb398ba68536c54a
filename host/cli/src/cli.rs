//! Command-line interface: argument types and dispatch.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand, ValueEnum};

/// Log output format.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Joinery: a Karpenter-compatible node autoscaler whose cloud backends, bootstrap
/// renderers and pricing functions are WebAssembly plugins.
#[derive(Debug, Parser)]
#[command(name = "joinery", version, about, propagate_version = true)]
pub struct Cli {
    /// Log format.
    #[arg(long, global = true, env = "JOINERY_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inspect, list and package plugins.
    #[command(subcommand)]
    Plugins(PluginsCommand),
    /// Render userData for a NodeClaim with a renderer plugin, as a launch would.
    Render(RenderArgs),
    /// Print the karpenter.sh CRDs (NodePool, NodeClaim, NodeOverlay) as YAML.
    Crds,
    /// Run benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Run a scenario (default: the built-in quickstart) against the emulated cluster and
    /// simulated cloud with the real host and plugins; exit 0 when its expectations hold.
    Simulate(SimulateArgs),
    /// The emulated cluster on its own.
    #[command(subcommand)]
    Sim(SimCommand),
    /// Explain why an object is where it is.
    #[command(subcommand)]
    Explain(ExplainCommand),
    /// Run the controllers against a real cluster (in-cluster config or --kubeconfig).
    /// Settings come from upstream's env vars (BATCH_IDLE_DURATION, METRICS_PORT, …).
    Run(RunArgs),
    /// Dry-run one provisioning pass over a cluster snapshot (multi-document YAML) and print
    /// where each pending pod would go and which NodeClaims would be created. Launches nothing.
    Schedule(ScheduleArgs),
}

/// `joinery schedule …`
#[derive(Debug, clap::Args)]
pub struct ScheduleArgs {
    /// The snapshot: multi-document YAML of NodePools, NodeClaims, Nodes, Pods, DaemonSets, …
    /// (`kubectl get -o yaml` output works, `kind: List` included).
    pub snapshot: PathBuf,
    /// Instance-type catalogue file (YAML or JSON); see examples/catalogs/.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["plugin", "node_class"], required_unless_present = "plugin")]
    pub catalog: Option<PathBuf>,
    /// Cloud plugin (built-in or from --plugin-dir) to ask for instance types instead.
    #[arg(long, value_name = "NAME", requires = "node_class")]
    pub plugin: Option<String>,
    /// NodeClass YAML passed to the plugin's get-instance-types (with --plugin).
    #[arg(long, value_name = "FILE", requires = "plugin")]
    pub node_class: Option<PathBuf>,
    /// Whether preferences (preferred affinities, ScheduleAnyway spreads) are respected then
    /// relaxed, or ignored (upstream's PREFERENCE_POLICY).
    #[arg(long, value_enum, ignore_case = true, default_value = "Respect")]
    pub preference_policy: PreferencePolicyArg,
    /// Whether NodePool minValues are strict or best effort (upstream's MIN_VALUES_POLICY).
    #[arg(long, value_enum, ignore_case = true, default_value = "Strict")]
    pub min_values_policy: MinValuesPolicyArg,
    /// Scheduler config with cluster-wide default spread constraints (upstream's
    /// `SCHEDULER_CONFIG`): `{podTopologySpread: {defaultConstraints: [...]}}`, given to pending
    /// pods without spread constraints, selectors deduced from Services, ReplicaSets and
    /// StatefulSets.
    #[arg(long, value_name = "FILE")]
    pub scheduler_config: Option<PathBuf>,
    /// Print JSON instead of the human-readable report.
    #[arg(long)]
    pub json: bool,
    /// Plugin loading options (with --plugin).
    #[command(flatten)]
    pub plugins: PluginOptions,
}

/// `--preference-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PreferencePolicyArg {
    /// Treat preferences as required, relaxing them one at a time when a pod does not fit.
    #[value(name = "Respect")]
    Respect,
    /// Leave preferences out.
    #[value(name = "Ignore")]
    Ignore,
}

/// `--min-values-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MinValuesPolicyArg {
    /// A NodeClaim that cannot keep minValues distinct values is not created.
    #[value(name = "Strict")]
    Strict,
    /// minValues is relaxed to what the remaining instance types allow.
    #[value(name = "BestEffort")]
    BestEffort,
}

/// `joinery explain …`
#[derive(Debug, Subcommand)]
pub enum ExplainCommand {
    /// Why a pod is pending (the blocking constraint and the NodePools tried), or where it runs.
    Pod {
        /// `NAMESPACE/NAME`.
        pod: String,
        /// Kubeconfig (a cluster, or `joinery sim serve --kubeconfig-out`'s file).
        #[arg(long, env = "KUBECONFIG")]
        kubeconfig: Option<PathBuf>,
    },
}

/// `joinery run …`
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Kubeconfig file; default: in-cluster config, then the usual kubeconfig lookup.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Plugin loading options.
    #[command(flatten)]
    pub plugins: PluginOptions,
}

/// `joinery simulate …`
#[derive(Debug, clap::Args)]
pub struct SimulateArgs {
    /// Scenario file (YAML). Without it, the built-in quickstart runs.
    pub scenario: Option<PathBuf>,
    /// Write the JSON report here.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Simulated seconds per real second.
    #[arg(long, default_value_t = joinery_simulate::DEFAULT_SPEED)]
    pub speed: f64,
    /// Do not print the timeline as it happens (the summary is still printed).
    #[arg(long)]
    pub quiet: bool,
}

/// `joinery sim …`
#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Serve the emulated cluster (API server, physics, simulated cloud) until interrupted.
    Serve {
        /// Write a kubeconfig for the emulated API server here.
        #[arg(long)]
        kubeconfig_out: Option<PathBuf>,
        /// Simulated seconds per real second.
        #[arg(long, default_value_t = 1.0)]
        speed: f64,
        /// Also run the host (the Joinery controllers) against it.
        #[arg(long)]
        with_host: bool,
    },
}

/// Options shared by commands that load plugins.
#[derive(Debug, Clone, clap::Args)]
pub struct PluginOptions {
    /// Plugin directories (a plugin directory, or a parent of several). Repeatable.
    #[arg(long = "plugin-dir", env = "JOINERY_PLUGIN_DIRS", value_delimiter = ',')]
    pub plugin_dirs: Vec<PathBuf>,
    /// Operator grants file (YAML). Without it, plugins get no capabilities.
    #[arg(long, env = "JOINERY_GRANTS")]
    pub grants: Option<PathBuf>,
    /// Directory for compiled plugins (speeds up start-up). Unset: no cache.
    #[arg(long, env = "JOINERY_PLUGIN_CACHE_DIR")]
    pub plugin_cache_dir: Option<PathBuf>,
}

/// `joinery plugins …`
#[derive(Debug, Subcommand)]
pub enum PluginsCommand {
    /// Show a plugin's manifest, WIT version, imports/exports, capabilities, size, digest and whether it loads.
    Inspect {
        /// A plugin directory, a component file (.wasm / .wasm.gz), or the name of a built-in plugin.
        path: String,
        /// Grants file to evaluate the plugin against.
        #[arg(long)]
        grants: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List the built-in plugins and those found in plugin directories.
    List {
        /// Plugin loading options.
        #[command(flatten)]
        options: PluginOptions,
    },
    /// Write a plugin directory (plugin.yaml with sha256, and the component) ready for a ConfigMap.
    Package {
        /// The plugin's source plugin.yaml.
        #[arg(long)]
        manifest: PathBuf,
        /// The built component.
        #[arg(long)]
        wasm: PathBuf,
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// Store the component gzipped (plugin.wasm.gz).
        #[arg(long)]
        gzip: bool,
    },
}

/// `joinery render …`
#[derive(Debug, clap::Args)]
pub struct RenderArgs {
    /// Renderer: a built-in or loaded plugin name, or a plugin directory. Defaults to the
    /// NodeClass's `spec.userDataRenderer.name`, else `template`.
    #[arg(long)]
    pub renderer: Option<String>,
    /// NodeClaim YAML (karpenter.sh/v1).
    #[arg(long)]
    pub claim: PathBuf,
    /// NodeClass YAML (any kind: `spec.userData`, `spec.userDataRenderer`, `spec.kubelet` are read).
    #[arg(long)]
    pub class: PathBuf,
    /// Renderer parameter overriding the NodeClass's (`key=value`). Repeatable.
    #[arg(long = "param", value_parser = parse_key_value)]
    pub params: Vec<(String, String)>,
    /// Secret value handed to the renderer (`secret/key=value`). Repeatable.
    #[arg(long = "secret", value_parser = parse_key_value)]
    pub secrets: Vec<(String, String)>,
    /// Cluster name.
    #[arg(long, env = "CLUSTER_NAME", default_value = "joinery")]
    pub cluster_name: String,
    /// API server endpoint.
    #[arg(long, env = "CLUSTER_ENDPOINT", default_value = "https://127.0.0.1:6443")]
    pub cluster_endpoint: String,
    /// Provider ID prefix the node registers with (e.g. `exoscale://`).
    #[arg(long, default_value = "")]
    pub provider_id_prefix: String,
    /// Plugin loading options.
    #[command(flatten)]
    pub options: PluginOptions,
}

/// `joinery bench …`
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Median cost of instantiate + call for the template renderer and a 400-offering pricing batch.
    Plugins {
        /// Measured calls per benchmark.
        #[arg(long, default_value_t = 2000)]
        iterations: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// The provisioning scheduler on upstream Karpenter's benchmark workloads (the exact pod
    /// sets upstream solves): per row pods/s, nodes, cost and its lower bound, peak memory,
    /// and upstream's result beside them.
    #[command(alias = "scheduler")]
    Scheduling {
        /// Run only these workloads (repeatable; default: all rows).
        #[arg(long = "workload", value_name = "NAME")]
        workloads: Vec<String>,
        /// Minimum measured runs per workload; small workloads repeat until about a second has
        /// been measured, as Go benchmarks do (the median is reported).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Internal: run one workload in this process and print its row as JSON.
        #[arg(long, hide = true)]
        child: bool,
    },
    /// The emulated API server holding a large cluster with a pod watch open: list latency
    /// over HTTP (medians of several runs) and memory.
    Sim {
        /// Nodes to load.
        #[arg(long, default_value_t = 5000)]
        nodes: usize,
        /// Pods to load.
        #[arg(long, default_value_t = 50000)]
        pods: usize,
        /// Measured runs of each list.
        #[arg(long, default_value_t = 5)]
        runs: usize,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

fn parse_key_value(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .ok_or_else(|| format!("expected key=value, got {s:?}"))
}

/// Sets up `tracing` (respects `RUST_LOG`; default `info`, `warn` for `simulate` and
/// `schedule`, whose reports are the output).
pub fn init_tracing(format: LogFormat, command: &Command) {
    let default = if matches!(command, Command::Simulate(_) | Command::Schedule(_)) { "warn" } else { "info" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| default.into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Runs a parsed command.
pub async fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Plugins(PluginsCommand::Inspect { path, grants, json }) => crate::plugins_cmd::inspect(&path, grants.as_deref(), json),
        Command::Plugins(PluginsCommand::List { options }) => crate::plugins_cmd::list(&options),
        Command::Plugins(PluginsCommand::Package { manifest, wasm, out, gzip }) => {
            crate::plugins_cmd::package(&manifest, &wasm, &out, gzip)
        }
        Command::Render(args) => crate::userdata::render_command(args).await,
        Command::Crds => {
            print!("{}", joinery_api::crds_yaml());
            Ok(ExitCode::SUCCESS)
        }
        Command::Bench(BenchCommand::Plugins { iterations, json }) => crate::bench::plugins(iterations, json).await,
        Command::Bench(BenchCommand::Scheduling { workloads, runs, json, child }) => {
            crate::bench_scheduling::scheduling(&workloads, runs, json, child)
        }
        Command::Bench(BenchCommand::Sim { nodes, pods, runs, json }) => crate::bench::sim(nodes, pods, runs, json).await,
        Command::Simulate(args) => crate::simulate_cmd::simulate(args).await,
        Command::Run(args) => crate::run_cmd::run(args).await,
        Command::Explain(ExplainCommand::Pod { pod, kubeconfig }) => crate::explain_cmd::explain_pod(&pod, kubeconfig).await,
        Command::Schedule(args) => crate::schedule_cmd::schedule(args).await,
        Command::Sim(SimCommand::Serve { kubeconfig_out, speed, with_host }) => {
            crate::simulate_cmd::serve(kubeconfig_out, speed, with_host).await
        }
    }
}
