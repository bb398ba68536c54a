//! Joinery's controllers: the thin, I/O-doing layer around the pure core
//! (`joinery-core`) and the plugin runtime (`joinery-runtime`).
//!
//! Data flows one way: watches fill [`state::ClusterState`]; each loop reads a snapshot,
//! asks the core what to do, acts through the Kubernetes API or a cloud plugin, and writes
//! status. The loops are:
//!
//! - [`provisioner`]: batches unschedulable pods, runs the core scheduler, creates NodeClaims;
//! - [`lifecycle`]: launches NodeClaims through the cloud plugin (userData rendered by the
//!   NodeClass's renderer), registers and initializes their Nodes, and finalizes deleted claims;
//! - [`termination`]: drains Nodes being deleted (eviction honouring PDBs) and deletes their instances;
//! - [`disruption`]: emptiness, drift, consolidation and expiration, decided by the core's
//!   disruption methods within the NodePool budgets;
//! - [`repair`]: node repair (gate `NodeRepair`): reboots or replaces nodes whose conditions
//!   the cloud's repair policies call unhealthy, within the unhealthy ceiling;
//! - [`nodeclass`]: resolves NodeClasses through their plugin and writes their status conditions;
//! - [`nodepool`]: NodePool status (resources, node count, readiness conditions);
//! - [`observability`]: gauges of the cluster state (node count, NodePool usage, pods);
//! - [`gc`]: garbage collection: instances tagged for this cluster that no NodeClaim owns
//!   (after a grace period), and registered NodeClaims whose instance is gone.
//!
//! [`leader`] elects one replica on a Lease; only the leader starts these loops.
//!
//! All durations are read from a shared [`joinery_core::clock::Clock`], so a simulation can
//! run faster than real time with Karpenter's timings unchanged in simulated seconds.

pub mod api_client;
pub mod bootstrap;
pub mod buffers;
pub mod cloud;
pub mod disruption;
pub mod events;
pub mod gc;
pub mod inflight;
pub mod leader;
pub mod lean_cache;
pub mod learned;
pub mod lifecycle;
pub mod metrics;
pub mod mirror;
pub mod nodeclass;
pub mod nodeoverlay;
pub mod nodepool;
pub mod observability;
pub mod provisioner;
pub mod repair;
pub mod settings;
pub mod state;
pub mod static_pools;
pub mod termination;
mod util;
pub mod writes;

use std::sync::Arc;
use std::time::Duration;

use joinery_core::clock::Clock;
use joinery_runtime::registry::PluginRegistry;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use cloud::CloudCall;
pub use settings::Settings;

/// Errors of the controllers. Each says what to check.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// A watch never delivered its initial list.
    #[error(
        "the {0} cache never synced; check that the API server serves this resource and that the controller may list and watch it"
    )]
    NotSynced(String),
    /// A Kubernetes API call failed.
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A plugin call failed.
    #[error(transparent)]
    Plugin(#[from] joinery_runtime::CallError),
    /// A plugin returned data the host cannot use.
    #[error("plugin {plugin} returned invalid data: {message}")]
    PluginOutput {
        /// Plugin name.
        plugin: String,
        /// What is wrong.
        message: String,
    },
    /// No loaded cloud plugin serves a NodeClass kind.
    #[error(
        "no loaded cloud plugin serves NodeClass kind {kind} in group {group}; load a plugin whose plugin.yaml declares this nodeClass"
    )]
    NoCloudPlugin {
        /// API group.
        group: String,
        /// Kind.
        kind: String,
    },
    /// A cloud call is backing off after failures (or the cloud's `Retry-After`).
    #[error("plugin {plugin}: {method} is backing off for {wait:?} after failed calls")]
    BackingOff {
        /// Plugin name.
        plugin: String,
        /// The WIT method.
        method: &'static str,
        /// How long until it may be called again.
        wait: Duration,
    },
    /// An object the controllers read is malformed; the message names the object and field.
    #[error("{0}")]
    Invalid(String),
}

impl ControllerError {
    /// The error's kind, for the `error` label of `joinery_controller_reconcile_errors_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ControllerError::NotSynced(_) => "not_synced",
            ControllerError::Kube(_) => "kube",
            ControllerError::Plugin(_) => "plugin",
            ControllerError::PluginOutput { .. } => "plugin_output",
            ControllerError::NoCloudPlugin { .. } => "no_cloud_plugin",
            ControllerError::BackingOff { .. } => "backing_off",
            ControllerError::Invalid(_) => "invalid",
        }
    }
}

/// Everything the controllers need.
#[derive(Clone)]
pub struct ControllerOptions {
    /// Client of the cluster being managed.
    pub client: kube::Client,
    /// Loaded plugins (cloud, renderers, pricing).
    pub registry: Arc<PluginRegistry>,
    /// The clock all durations are measured with.
    pub clock: Arc<Clock>,
    /// Settings (env vars with upstream's names).
    pub settings: Settings,
    /// Where the secrets granted to renderers are read (a join token, say).
    pub secrets: Arc<dyn joinery_runtime::services::SecretStore>,
}

/// Shared context of the controller loops.
pub struct Context {
    /// Kubernetes client.
    pub client: kube::Client,
    /// Cluster caches.
    pub state: state::ClusterState,
    /// Cloud plugin access.
    pub cloud: cloud::Cloud,
    /// Clock.
    pub clock: Arc<Clock>,
    /// Settings.
    pub settings: Settings,
    /// Kubernetes Events.
    pub events: events::EventRecorder,
    /// Secrets granted to renderers.
    pub secrets: Arc<dyn joinery_runtime::services::SecretStore>,
    /// What this process has in flight that the cluster may not show yet (claims just
    /// created, create attempts, launch results): the one memory the loops share.
    pub inflight: inflight::InFlight,
    /// Backoff of cloud calls: per method and object after a failure (never earlier than
    /// the cloud's `Retry-After`), and per plugin while its cloud asked every caller to wait.
    pub cloud_backoff: cloud::CloudBackoff,
    /// Prometheus counters.
    pub metrics: Arc<metrics::Metrics>,
}

impl Context {
    /// How long `call` must still wait: its own backoff, or its plugin's while the cloud
    /// asked every caller to wait (`Retry-After` on a throttled call). `None`: go.
    pub fn cloud_wait(&self, call: &CloudCall) -> Option<Duration> {
        self.cloud_backoff.wait(call, self.clock.now())
    }

    /// Makes the cloud call `request` through the backoff: `Err(BackingOff)` without calling
    /// while `call` (or its plugin) must wait, else the call's own result, recorded with
    /// [`Context::cloud_outcome`]. `request` is not started unless the call goes ahead.
    pub async fn call_cloud<T>(
        &self,
        controller: &'static str,
        call: &CloudCall,
        request: impl Future<Output = Result<T, joinery_runtime::CallError>>,
    ) -> Result<Result<T, joinery_runtime::CallError>, ControllerError> {
        if let Some(wait) = self.cloud_wait(call) {
            return Err(ControllerError::BackingOff {
                plugin: call.plugin.clone(),
                method: call.method,
                wait,
            });
        }
        let started = std::time::Instant::now();
        let result = request.await;
        self.cloud_call_took(controller, call, started);
        self.cloud_outcome(controller, call, &result);
        Ok(result)
    }

    /// Records a cloud call's duration (since `started`) in
    /// `karpenter_cloudprovider_duration_seconds`.
    pub fn cloud_call_took(
        &self,
        controller: &'static str,
        call: &CloudCall,
        started: std::time::Instant,
    ) {
        self.metrics.cloudprovider_duration.observe(
            &metrics::series::CloudCall {
                controller: controller.into(),
                method: call.method.into(),
                provider: call.plugin.clone(),
            },
            started.elapsed().as_secs_f64(),
        );
    }

    /// Records how a cloud call ended (see [`cloud::CloudBackoff::record`]) and counts a
    /// failure in `karpenter_cloudprovider_errors_total`. Returns the wait before the call
    /// may be retried, if it failed.
    pub fn cloud_outcome<T>(
        &self,
        controller: &'static str,
        call: &CloudCall,
        result: &Result<T, joinery_runtime::CallError>,
    ) -> Option<Duration> {
        let wait = self.cloud_backoff.record(call, self.clock.now(), result)?;
        if let Err(error) = result {
            self.metrics
                .cloudprovider_errors
                .inc(&metrics::series::CloudError {
                    controller: controller.into(),
                    method: call.method.into(),
                    provider: call.plugin.clone(),
                    error: error.metric_label().into(),
                });
            tracing::debug!(controller, plugin = %call.plugin, method = call.method, object = %call.object,
                retry_in_ms = wait.as_millis() as u64, error = %error, "cloud call failed; backing off");
        }
        Some(wait)
    }

    /// Sleeps for a simulated duration.
    pub async fn sleep(&self, simulated: Duration) {
        tokio::time::sleep(self.clock.to_real(simulated)).await;
    }
}

/// The kinds the controllers cannot start without: their caches would never sync.
const REQUIRED_KINDS: [(&str, &str, &str); 2] = [
    ("karpenter.sh", "v1", "NodePool"),
    ("karpenter.sh", "v1", "NodeClaim"),
];

/// How often (simulated) the controllers look again for CRDs that are not installed yet.
const CRD_POLL: Duration = Duration::from_secs(5);

/// Waits until the API server serves the karpenter.sh kinds ([`REQUIRED_KINDS`]), saying once
/// (a warning) what is missing and how to install it, and once (info) when it is there: a
/// controller started before its CRDs (`helm install joinery` before `joinery-crd`, or
/// against `joinery sim serve --without-crds`) waits for them instead of hanging on caches
/// that never sync.
async fn wait_for_crds(client: &kube::Client, clock: &Clock) {
    let mut warned = false;
    loop {
        let mut missing = Vec::new();
        for (group, version, kind) in REQUIRED_KINDS {
            let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
            if let Err(error) = kube::discovery::pinned_kind(client, &gvk).await {
                missing.push(format!("{kind}.{group}/{version} ({error})"));
            }
        }
        if missing.is_empty() {
            if warned {
                tracing::info!("the karpenter.sh CRDs are installed; starting the controllers");
            }
            return;
        }
        if !warned {
            tracing::warn!(missing = %missing.join(", "),
                "the karpenter.sh CRDs are not installed; waiting for them (install them with `helm install joinery-crd charts/joinery-crd` or `joinery crds | kubectl apply -f -`)");
            warned = true;
        }
        tokio::time::sleep(clock.to_real(CRD_POLL)).await;
    }
}

/// The running controllers.
pub struct Controller {
    context: Arc<Context>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
    _state_tasks: state::StateTasks,
}

impl Controller {
    /// Starts the caches, waits for them to sync, then starts every loop.
    pub async fn start(options: ControllerOptions) -> Result<Controller, ControllerError> {
        let kinds: Vec<(state::NodeClassKey, String)> = options
            .registry
            .current()
            .iter()
            .filter_map(|p| p.manifest().node_class.clone())
            .map(|n| {
                (
                    state::NodeClassKey {
                        group: n.group,
                        kind: n.kind,
                    },
                    n.version,
                )
            })
            .collect();
        wait_for_crds(&options.client, &options.clock).await;
        let (state, state_tasks) = state::ClusterState::start(
            options.client.clone(),
            &kinds,
            options.settings.feature_gates.node_overlay,
            !options.settings.default_spread.is_empty(),
            options.settings.feature_gates.capacity_buffer,
        )
        .await?;
        let metrics = Arc::new(metrics::Metrics::new());
        options.registry.observe_calls(metrics.clone());
        metrics
            .pods_state
            .compute_on_scrape(observability::pods_state_source(&state));
        metrics
            .computed
            .nodes_on_scrape(observability::node_rows_source(&state));
        metrics
            .computed
            .conditions_on_scrape(observability::condition_rows_source(
                &state,
                options.clock.clone(),
            ));
        let context = Arc::new(Context {
            events: events::EventRecorder::new(options.client.clone(), options.clock.clone()),
            secrets: options.secrets.clone(),
            client: options.client,
            state,
            cloud: cloud::Cloud::new(options.registry, options.clock.clone()),
            clock: options.clock.clone(),
            settings: options.settings,
            inflight: inflight::InFlight::new(options.clock.now()),
            cloud_backoff: cloud::CloudBackoff::new(lifecycle::CLOUD_BACKOFF),
            metrics,
        });
        learned::restore(&context).await;
        let (stop, stopped) = watch::channel(false);
        let tasks = vec![
            tokio::spawn(nodeclass::run(context.clone(), stopped.clone())),
            tokio::spawn(nodepool::run(context.clone(), stopped.clone())),
            tokio::spawn(nodeoverlay::run(context.clone(), stopped.clone())),
            tokio::spawn(provisioner::run(context.clone(), stopped.clone())),
            tokio::spawn(lifecycle::run(context.clone(), stopped.clone())),
            tokio::spawn(termination::run(context.clone(), stopped.clone())),
            tokio::spawn(disruption::run(context.clone(), stopped.clone())),
            tokio::spawn(static_pools::run(context.clone(), stopped.clone())),
            tokio::spawn(repair::run(context.clone(), stopped.clone())),
            tokio::spawn(gc::run(context.clone(), stopped.clone())),
            tokio::spawn(observability::run(context.clone(), stopped.clone())),
            tokio::spawn(learned::run(context.clone(), stopped.clone())),
        ];
        tracing::info!("controllers started");
        Ok(Controller {
            context,
            stop,
            tasks,
            _state_tasks: state_tasks,
        })
    }

    /// The shared context (state caches, cloud access), e.g. for reports.
    pub fn context(&self) -> &Arc<Context> {
        &self.context
    }

    /// Stops every loop and waits for them to finish their current step.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }

    /// Stops every loop, as [`Controller::shutdown`] does, but waits at most `budget` (real
    /// time) for them to finish their current step; the loops still running then are aborted.
    /// Returns whether all of them finished in time.
    pub async fn stop_within(&mut self, budget: std::time::Duration) -> bool {
        let _ = self.stop.send(true);
        let finishing = async {
            while let Some(task) = self.tasks.last_mut() {
                let _ = task.await;
                self.tasks.pop();
            }
        };
        let in_time = tokio::time::timeout(budget, finishing).await.is_ok();
        for task in self.tasks.drain(..) {
            task.abort();
        }
        in_time
    }

    /// Stops every loop at once, as a crash would (for restart tests).
    pub fn abort(self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}
