//! `joinery run`: the controller for a real cluster, with `/metrics` and health probes on
//! upstream's ports (`METRICS_PORT` 8080, `HEALTH_PROBE_PORT` 8081).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use anyhow::{Context, Result};
use joinery_controller::leader::{Elector, LeaderElectionConfig, TermEnd, default_identity, lead};
use joinery_controller::{Controller, ControllerOptions, Settings};
use joinery_core::clock::Clock;
use joinery_core::lease::LeaseTimings;
use joinery_runtime::services::{HostServices, KubeClusters, KubeSecrets};
use tokio::net::TcpListener;

use super::Execute;
use crate::endpoints::{EndpointLimits, serve};

/// How long the loops get to finish their step after SIGTERM before they are aborted. With the
/// Lease's release (bounded by its renew deadline, 10 s) a stop takes at most 25 s, within the
/// chart's default `terminationGracePeriodSeconds` of 30.
const LOOPS_STOP_BUDGET: std::time::Duration = std::time::Duration::from_secs(15);
use crate::plugin_options::PluginOptions;

/// Turns transparent huge pages off for this process. The allocator asks for them on its
/// arenas, and a 2 MiB page stays resident while any 4 KiB of it is used: on a cluster of
/// 5,000 nodes and 50,000 pods that held 20 to 28 MiB more (docs/operations.md). The
/// controller's caches are read far less often than they are kept, so the TLB misses this
/// saves are not worth that memory.
fn without_transparent_huge_pages() {
    #[cfg(target_os = "linux")]
    if let Err(error) = rustix::thread::disable_transparent_huge_pages(true) {
        tracing::debug!(%error, "cannot turn transparent huge pages off; the controller may hold more memory than it uses");
    }
}

/// `joinery run …`
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Where the cluster is.
    #[command(flatten)]
    pub kube: crate::kube_options::KubeOptions,
    /// Where the management cluster (Cluster API objects) is, if any.
    #[command(flatten)]
    pub management: crate::management::ManagementOptions,
    /// Plugin loading options.
    #[command(flatten)]
    pub plugins: PluginOptions,
}

impl Execute for RunArgs {
    async fn execute(self) -> Result<std::process::ExitCode> {
        run(self).await
    }

    /// Upstream's `LOG_LEVEL` (`debug`, `info` or `error`; default `info`). An invalid value
    /// falls back to `info` here and then stops the start, naming the variable.
    fn default_log_level(&self) -> String {
        crate::logging::log_level_env_filter()
    }
}

/// Runs the controllers until SIGINT/SIGTERM.
async fn run(args: RunArgs) -> Result<std::process::ExitCode> {
    without_transparent_huge_pages();
    // kube's TLS stack needs a process-wide crypto provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let settings = Settings::from_env().context("invalid settings")?;
    // The management cluster, if the operator named one: plugins granted `cluster: management`
    // reach it; the controller's own watches and writes stay on the workload cluster.
    let management_source =
        crate::management::resolve(&args.management, |name| std::env::var(name).ok())?;
    let config = args.kube.config().await?;
    let mut settings = settings;
    if settings.cluster_endpoint.is_empty() {
        settings.cluster_endpoint = config.cluster_url.to_string();
    }
    let api_server = config.cluster_url.to_string();
    let client = joinery_controller::api_client::client(config)
        .context("cannot build the Kubernetes client")?;
    let management = match management_source {
        None => None,
        Some(source) => {
            let config = source.config().await?;
            let url = config.cluster_url.to_string();
            let client = joinery_controller::api_client::client(config).with_context(|| {
                format!("cannot build the management cluster's Kubernetes client (from {source})")
            })?;
            Some((source, url, client))
        }
    };
    let workload_only = KubeClusters::default().with("workload", client.clone());
    let clusters = match &management {
        Some((source, url, management)) => {
            tracing::info!(workload = %api_server, management = %url, from = %source, "plugins can reach the workload and management clusters");
            workload_only.with("management", management.clone())
        }
        None => {
            tracing::info!(workload = %api_server, "plugins can reach the workload cluster only (no management cluster: pass --management-kubeconfig to add one)");
            workload_only.without("management", crate::management::NOT_CONFIGURED)
        }
    };
    // Plugins' secrets (and renderers' granted secrets) are read from the controller's own
    // namespace unless a name carries `namespace/`; the `workload` cluster is this one.
    let namespace = settings.system_namespace.clone();
    let secrets: Arc<dyn joinery_runtime::services::SecretStore> =
        Arc::new(KubeSecrets::new(client.clone(), &namespace));
    // Plugins' outgoing HTTPS: system trust store, the operator's CA bundle and proxies.
    let egress = joinery_runtime::egress::EgressConfig::from_env()
        .map_err(|e| anyhow::anyhow!("invalid egress setting: {e}"))?;
    let services = HostServices {
        secrets: secrets.clone(),
        kube: Arc::new(clusters),
        egress: Arc::new(joinery_runtime::egress::Egress::new(&egress)),
        ..HostServices::default()
    };
    let registry = crate::plugin_options::open_registry(&args.plugins, services)?;
    for problem in registry.grant_problems() {
        tracing::warn!("{problem}");
    }
    let _watch = registry.watch(std::time::Duration::from_secs(10));
    let ready = Arc::new(AtomicBool::new(false));
    let metrics_port = settings.metrics_port;
    let health_port = settings.health_probe_port;
    let metrics_listener = TcpListener::bind(("0.0.0.0", metrics_port))
        .await
        .with_context(|| format!("cannot listen on METRICS_PORT {metrics_port}"))?;
    let health_listener = TcpListener::bind(("0.0.0.0", health_port))
        .await
        .with_context(|| format!("cannot listen on HEALTH_PROBE_PORT {health_port}"))?;
    let health_ready = ready.clone();
    tokio::spawn(serve(
        health_listener,
        EndpointLimits::default(),
        move |path| match path {
            "/healthz" => Some((200, "ok".to_string())),
            "/readyz" => Some(if health_ready.load(Ordering::Relaxed) {
                (200, "ok".into())
            } else {
                (503, "caches not synced".into())
            }),
            _ => None,
        },
    ));
    // A follower serves an empty /metrics until it leads (it has no loops to report on).
    let leading: Arc<OnceLock<Arc<joinery_controller::Context>>> = Arc::new(OnceLock::new());
    let metrics_context = leading.clone();
    tokio::spawn(serve(
        metrics_listener,
        EndpointLimits::default(),
        move |path| {
            (path == "/metrics").then(|| {
                (
                    200,
                    metrics_context
                        .get()
                        .map(|c| c.metrics.render())
                        .unwrap_or_default(),
                )
            })
        },
    ));
    tracing::info!(metrics_port, health_port, "starting controllers");
    // Fail at once, naming the server, rather than retry a Lease on an unreachable API.
    client
        .apiserver_version()
        .await
        .with_context(|| format!("cannot reach the Kubernetes API server at {api_server}; check --kubeconfig (or the in-cluster service account) and the network"))?;
    if let Some((source, url, management)) = &management {
        management
            .apiserver_version()
            .await
            .with_context(|| format!("cannot reach the management cluster's API server at {url}; check {source} and the network"))?;
    }
    let clock = Arc::new(Clock::real());
    // One SIGTERM/SIGINT listener for the whole life of the process, so that a signal arriving
    // while the loops start is not missed.
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    let leadership = if settings.disable_leader_election {
        None
    } else {
        let config = LeaderElectionConfig {
            namespace: if settings.leader_election_namespace.is_empty() {
                namespace.clone()
            } else {
                settings.leader_election_namespace.clone()
            },
            name: settings.leader_election_name.clone(),
            identity: default_identity(),
            timings: LeaseTimings::default(),
        };
        // A follower is ready: it is healthy and takes over when the leader goes.
        ready.store(true, Ordering::Relaxed);
        tracing::info!(controller = "leaderelection", lease = %config.name, namespace = %config.namespace, identity = %config.identity, "waiting to lead");
        let elector = Elector::new(client.clone(), clock.clone(), config);
        tokio::select! {
            leadership = elector.acquire() => Some(leadership),
            _ = &mut shutdown => return Ok(std::process::ExitCode::SUCCESS),
        }
    };
    let mut controller = Controller::start(ControllerOptions {
        client,
        registry,
        clock,
        settings,
        secrets,
    })
    .await?;
    ready.store(true, Ordering::Relaxed);
    let _ = leading.set(controller.context().clone());
    let Some(leadership) = leadership else {
        shutdown.await;
        tracing::info!("shutting down");
        controller.stop_within(LOOPS_STOP_BUDGET).await;
        return Ok(std::process::ExitCode::SUCCESS);
    };
    match lead(controller, leadership, shutdown, LOOPS_STOP_BUDGET).await {
        TermEnd::Stopped { .. } => Ok(std::process::ExitCode::SUCCESS),
        // Another replica may be acting already: the loops were stopped at once, as upstream
        // does; the pod restarts as a follower.
        TermEnd::Lost => anyhow::bail!(
            "lost the leader-election Lease; stopping so that only the new leader acts"
        ),
    }
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = tokio::signal::ctrl_c().await;
}
