//! Cluster physics: the components that make the emulated cluster behave like a real one
//! around Karpenter.
//!
//! Every part is a tokio task that talks to the API server only through a `kube::Client`
//! (watches, creates, patches, the `binding` subresource), the way the real component would:
//!
//! - the **scheduler** stand-in (`scheduler.rs`) binds pending pods to feasible nodes, or marks
//!   them `PodScheduled=False` with reason `Unschedulable` — what makes Karpenter act;
//! - the **workload controllers** (`workloads.rs`) turn Deployments into ReplicaSets into Pods
//!   and run one pod of every DaemonSet on each matching node;
//! - the **batch controllers** (`batch.rs`) run Jobs' pods to completion and create Jobs on
//!   CronJobs' schedules;
//! - the **kubelets** (`kubelet/`) boot the instances the simulated cloud launches: after the
//!   boot delay they run the instance's bootstrap (its userData), register a Node if they
//!   understand it (a managed platform's machine brings its ready-made registration instead),
//!   run the pods bound to it and finish the ones being deleted; when the cloud
//!   terminates the instance, its Node and pods go away. A scenario can make a node unhealthy
//!   ([`Physics::fault`]: `Ready` `False` or `Unknown`, a pressure condition, a dead kubelet);
//!   a reboot through the cloud's API clears the fault unless it is a hardware one.
//!
//! All durations are simulated: the physics sleeps `clock.to_real(d)` and writes timestamps
//! from the shared [`Clock`]. The scheduler and the controllers write at a simulated pace
//! ([`PhysicsOptions::write_rate`]), and every component records how late it acts on the
//! scaled clock in a [`LagMeter`] ([`Physics::lag`]), with a probe of the runtime itself.

mod batch;
mod bootstrap;
pub use bootstrap::{BootCheck, DeclaredBoot, DeclaredBoots, boot_check, boot_check_declared};
pub(crate) mod cache;
mod kubelet;
pub use kubelet::{ExistingNode, INSTANCE_ANNOTATION, NodeFault};
pub mod lag;
mod scheduler;
mod workloads;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::{Stream, StreamExt};
use joinery_core::clock::Clock;
use joinery_core::resources::{InitContainer, PodLevelRequests, PodResourceSpec, Resources};
use joinery_core::taints::{Taint, TaintEffect, Toleration, TolerationOperator};
use k8s_openapi::api::core::v1::{
    Event, EventSource, Node, ObjectReference, Pod, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta, OwnerReference, Time,
};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::cloud::CloudEvent;
pub use lag::{LagMeter, LagSeries, LagSnapshot};

/// The scheduler name pods get when they do not name one.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

/// Why a physics component could not do something; logged, never fatal for the component.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PhysicsError {
    /// A request to the API server failed.
    #[error("API request failed: {0}")]
    Kube(#[from] kube::Error),
}

/// Settings of the cluster physics.
///
/// Every duration is in *simulated* time (see [`Clock`]).
pub struct PhysicsOptions {
    /// Client of the API server the physics acts on.
    pub client: kube::Client,
    /// The shared clock: sleeps last `clock.to_real(d)`, timestamps come from `clock.now()`.
    pub clock: Arc<Clock>,
    /// Events of the simulated cloud: a kubelet boots for every launched instance and stops
    /// when it is terminated. Without it no kubelet ever runs (no Node appears on its own).
    pub cloud_events: Option<broadcast::Receiver<CloudEvent>>,
    /// How long a launched instance takes to boot before its kubelet runs the bootstrap.
    pub boot_delay: Duration,
    /// How long after registration a Node turns `Ready`.
    pub node_ready_delay: Duration,
    /// How long after binding a pod's containers are running and ready.
    pub pod_start_delay: Duration,
    /// How often the scheduler and the controllers re-check everything even without changes.
    pub resync_interval: Duration,
    /// The `topology.kubernetes.io/region` label of nodes whose instance has none.
    pub region: String,
    /// Writes per simulated second the scheduler (bindings and status) and the workload
    /// controllers (pod creations and deletions, status) each make at most, as the
    /// client-side rate limit of the real components (kube-scheduler's and
    /// kube-controller-manager's `--kube-api-qps`).
    pub write_rate: f64,
    /// Renderers' promises of what a node registers with, for userData in a format the
    /// kubelets do not read (see [`DeclaredBoots`]); empty unless the host side fills it.
    pub declared_boots: DeclaredBoots,
    /// Nodes already in the cluster (a cluster snapshot's), each carrying its kubelet's ID
    /// ([`ExistingNode::kubelet_id`]) in [`INSTANCE_ANNOTATION`]: a kubelet takes over each
    /// at once and runs the pods bound to it.
    pub existing_nodes: Vec<ExistingNode>,
}

/// Writes per simulated second of the scheduler and of the workload controllers, unless set.
pub const DEFAULT_WRITE_RATE: f64 = 100.0;

/// How many writes a component may make at once above its rate (client-go's `Burst`).
pub(crate) const WRITE_BURST: u32 = 20;

impl PhysicsOptions {
    /// Options with the defaults: no cloud events, boot delay 30 s, node ready 2 s after
    /// registration, pods running 1 s after binding, resync every 10 s, region `sim-region-1`,
    /// [`DEFAULT_WRITE_RATE`] writes per simulated second.
    pub fn new(client: kube::Client, clock: Arc<Clock>) -> Self {
        Self {
            client,
            clock,
            cloud_events: None,
            boot_delay: Duration::from_secs(30),
            node_ready_delay: Duration::from_secs(2),
            pod_start_delay: Duration::from_secs(1),
            resync_interval: Duration::from_secs(10),
            region: "sim-region-1".to_string(),
            write_rate: DEFAULT_WRITE_RATE,
            declared_boots: DeclaredBoots::default(),
            existing_nodes: Vec::new(),
        }
    }

    /// Subscribes the kubelets to a cloud's events, booting instances after `boot_delay`
    /// (for the simulated cloud: `cloud.subscribe()` and `cloud.boot_delay()`).
    pub fn with_cloud(
        mut self,
        events: broadcast::Receiver<CloudEvent>,
        boot_delay: Duration,
    ) -> Self {
        self.cloud_events = Some(events);
        self.boot_delay = boot_delay;
        self
    }
}

impl std::fmt::Debug for PhysicsOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PhysicsOptions")
            .field("clock", &self.clock)
            .field("cloud_events", &self.cloud_events.is_some())
            .field("boot_delay", &self.boot_delay)
            .field("node_ready_delay", &self.node_ready_delay)
            .field("pod_start_delay", &self.pod_start_delay)
            .field("resync_interval", &self.resync_interval)
            .field("region", &self.region)
            .field("write_rate", &self.write_rate)
            .field("existing_nodes", &self.existing_nodes.len())
            .finish_non_exhaustive()
    }
}

/// What every component shares.
pub(crate) struct PhysicsContext {
    pub(crate) client: kube::Client,
    pub(crate) clock: Arc<Clock>,
    pub(crate) boot_delay: Duration,
    pub(crate) node_ready_delay: Duration,
    pub(crate) pod_start_delay: Duration,
    pub(crate) resync_interval: Duration,
    pub(crate) region: String,
    pub(crate) write_rate: f64,
    pub(crate) lag: Arc<LagMeter>,
    pub(crate) declared_boots: DeclaredBoots,
}

impl PhysicsContext {
    /// Sleeps for a simulated duration.
    pub(crate) async fn sleep(&self, simulated: Duration) {
        tokio::time::sleep(self.clock.to_real(simulated)).await;
    }

    /// The real time left until a simulated point in time (zero if it has passed).
    pub(crate) fn real_until(&self, at: SystemTime) -> Duration {
        at.duration_since(self.clock.now())
            .map(|d| self.clock.to_real(d))
            .unwrap_or_default()
    }

    /// The real duration of the resync interval (at least a millisecond).
    pub(crate) fn real_resync(&self) -> Duration {
        self.clock
            .to_real(self.resync_interval)
            .max(Duration::from_millis(1))
    }

    /// A write pace at this physics' write rate.
    pub(crate) fn pace(&self) -> lag::Pace {
        lag::Pace::new(self.write_rate, WRITE_BURST)
    }

    /// Records, as `what`, how late a pass started after the change that asked for it
    /// (`fired`, real time).
    pub(crate) fn record_pass(&self, what: &'static str, fired: tokio::time::Instant) {
        self.lag
            .record(what, self.clock.to_simulated(fired.elapsed()));
    }

    /// The clock's time now, as a Kubernetes timestamp.
    pub(crate) fn now(&self) -> Time {
        time_at(self.clock.now())
    }

    /// Records a `Warning` Event from a kubelet on machine `host` about `involved`, in the
    /// `default` namespace as kubelets do for node events (best effort: failures are logged).
    pub(crate) async fn record_kubelet_warning(
        &self,
        involved: ObjectReference,
        reason: &str,
        message: String,
        host: &str,
    ) {
        const COMPONENT: &str = "kubelet";
        const NAMESPACE: &str = "default";
        let now = self.now();
        let prefix = involved.name.clone().unwrap_or_else(|| "event".to_string());
        let event = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{prefix}.")),
                namespace: Some(NAMESPACE.to_string()),
                ..Default::default()
            },
            involved_object: involved,
            reason: Some(reason.to_string()),
            message: Some(message),
            type_: Some("Warning".to_string()),
            count: Some(1),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            source: Some(EventSource {
                component: Some(COMPONENT.to_string()),
                host: Some(host.to_string()),
            }),
            reporting_component: Some(COMPONENT.to_string()),
            reporting_instance: Some(host.to_string()),
            ..Default::default()
        };
        let events: Api<Event> = Api::namespaced(self.client.clone(), NAMESPACE);
        if let Err(error) = events.create(&PostParams::default(), &event).await {
            tracing::debug!(%error, reason, "could not record an event");
        }
    }
}

/// A simulated point in time as a Kubernetes timestamp.
pub(crate) fn time_at(at: SystemTime) -> Time {
    Time(Timestamp::try_from(at).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// A Kubernetes timestamp as a point in time.
pub(crate) fn system_time(time: &Time) -> SystemTime {
    SystemTime::from(time.0)
}

/// The running cluster physics. Dropping it stops every component.
pub struct Physics {
    tasks: Vec<JoinHandle<()>>,
    lag: Arc<LagMeter>,
    faults: mpsc::UnboundedSender<kubelet::FaultRequest>,
}

impl Physics {
    /// Starts the scheduler, the workload and batch controllers, the kubelet manager and the clock
    /// probe as tokio tasks (call from within a tokio runtime).
    pub fn start(options: PhysicsOptions) -> Physics {
        let PhysicsOptions {
            client,
            clock,
            cloud_events,
            boot_delay,
            node_ready_delay,
            pod_start_delay,
            resync_interval,
            region,
            write_rate,
            declared_boots,
            existing_nodes,
        } = options;
        let lag = Arc::new(LagMeter::new());
        let (faults, fault_requests) = mpsc::unbounded_channel();
        let shared = Arc::new(PhysicsContext {
            client,
            clock: clock.clone(),
            boot_delay,
            node_ready_delay,
            pod_start_delay,
            resync_interval,
            region,
            write_rate,
            lag: lag.clone(),
            declared_boots,
        });
        let tasks = vec![
            tokio::spawn(scheduler::run(shared.clone())),
            tokio::spawn(workloads::run_deployments(shared.clone())),
            tokio::spawn(workloads::run_daemonsets(shared.clone())),
            tokio::spawn(batch::run(shared.clone())),
            tokio::spawn(kubelet::run(
                shared,
                cloud_events,
                fault_requests,
                existing_nodes,
            )),
            tokio::spawn(lag::probe(clock, lag.clone())),
        ];
        tracing::info!("cluster physics started");
        Physics { tasks, lag, faults }
    }

    /// Makes the Node `node` unhealthy (see [`NodeFault`]). A `hardware` fault survives a
    /// reboot of the machine through its cloud's API; any other is cleared by one (the kubelet
    /// starts afresh and reports the Node `Ready`). Errors say why the fault could not be put
    /// on the node (no such Node, or one no simulated kubelet registered).
    pub async fn fault(&self, node: &str, fault: NodeFault, hardware: bool) -> Result<(), String> {
        let (done, answer) = oneshot::channel();
        self.faults
            .send(kubelet::FaultRequest {
                node: node.to_string(),
                fault,
                hardware,
                done,
            })
            .map_err(|_| "the physics is stopped".to_string())?;
        answer
            .await
            .map_err(|_| "the physics is stopped".to_string())?
    }

    /// How late the physics and the runtime it shares with the host have acted on the scaled
    /// clock so far (see [`LagMeter`]).
    pub fn lag(&self) -> &Arc<LagMeter> {
        &self.lag
    }

    /// Stops every component (kubelets included) and waits for them to end.
    pub async fn shutdown(mut self) {
        for task in &self.tasks {
            task.abort();
        }
        for task in self.tasks.drain(..) {
            let _ = task.await;
        }
        tracing::info!("cluster physics stopped");
    }
}

impl Drop for Physics {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl std::fmt::Debug for Physics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Physics")
            .field("components", &self.tasks.len())
            .finish()
    }
}

/// A watch of `api` as a stream of events that never ends: errors are logged and retried with
/// kube's default backoff.
pub(crate) fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = watcher::Event<K>> + Send + Unpin + 'static
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher(api, config)
        .default_backoff()
        .filter_map(|result| async move {
            match result {
                Ok(event) => Some(event),
                Err(error) => {
                    tracing::debug!(%error, "watch failed; retrying");
                    None
                }
            }
        })
        .boxed()
}

/// The HTTP status code of an API error answer, if the error is one.
pub(crate) fn api_code(error: &kube::Error) -> Option<u16> {
    match error {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// Coalesces change notifications into passes: a pass is due shortly after the first change
/// since the previous one, so a burst of watch events leads to one pass.
pub(crate) struct Trigger {
    /// When the pending pass is due, and when the change that asked for it came.
    due: Option<(tokio::time::Instant, tokio::time::Instant)>,
    settle: Duration,
}

impl Trigger {
    /// How long a burst of changes may take to settle before a pass starts (real time)...
    const SETTLE: Duration = Duration::from_millis(5);
    /// ...and at most (simulated), so that high speed-ups do not make every reaction late.
    const SETTLE_SIMULATED: Duration = Duration::from_millis(50);

    /// A trigger with a pass due at once, settling for a few real milliseconds.
    pub(crate) fn new() -> Self {
        let now = tokio::time::Instant::now();
        Self {
            due: Some((now, now)),
            settle: Self::SETTLE,
        }
    }

    /// [`Trigger::new`], settling for no more than a few simulated tens of milliseconds on
    /// `clock`.
    pub(crate) fn scaled(clock: &Clock) -> Self {
        Self {
            settle: clock.to_real(Self::SETTLE_SIMULATED).min(Self::SETTLE),
            ..Self::new()
        }
    }

    /// Something changed: make a pass due, unless one already is.
    pub(crate) fn fire(&mut self) {
        if self.due.is_none() {
            let now = tokio::time::Instant::now();
            self.due = Some((now + self.settle, now));
        }
    }

    /// Waits until a pass is due (forever if none is), then clears it; returns when the change
    /// that asked for it came (real time).
    pub(crate) async fn due(&mut self) -> tokio::time::Instant {
        match self.due {
            Some((at, fired)) => {
                tokio::time::sleep_until(at).await;
                self.due = None;
                fired
            }
            None => std::future::pending().await,
        }
    }
}

/// Whether a label selector matches a label set. `None` matches nothing, an empty selector
/// everything (as for pod affinity terms and topology spread constraints).
pub(crate) fn selector_matches(
    selector: Option<&LabelSelector>,
    labels: &BTreeMap<String, String>,
) -> bool {
    let Some(selector) = selector else {
        return false;
    };
    let match_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    match_labels
        && selector
            .match_expressions
            .iter()
            .flatten()
            .all(|expression| {
                let value = labels.get(&expression.key);
                let values = expression.values.as_deref().unwrap_or_default();
                match expression.operator.as_str() {
                    "In" => value.is_some_and(|v| values.contains(v)),
                    "NotIn" => value.is_none_or(|v| !values.contains(v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    _ => false,
                }
            })
}

/// The labels of an object (empty if none).
pub(crate) fn labels_of(meta: &ObjectMeta) -> BTreeMap<String, String> {
    meta.labels.clone().unwrap_or_default()
}

/// The annotation setting how long a pod that runs to completion (`restartPolicy` `Never` or
/// `OnFailure`, as a Job's pods) runs before its containers exit: a Go duration such as `30s`
/// or `1m30s`. Without it such a pod runs for [`DEFAULT_RUN_TIME`]. Pods that restart their
/// containers (`restartPolicy` `Always`, the default) run until deleted, annotated or not.
pub const RUN_FOR_ANNOTATION: &str = "sim.joinery.dev/run-for";

/// The annotation setting the exit code of a pod's containers when it finishes (default 0):
/// 0 ends the pod `Succeeded`, anything else `Failed`.
pub const EXIT_CODE_ANNOTATION: &str = "sim.joinery.dev/exit-code";

/// How long a pod that runs to completion runs without a [`RUN_FOR_ANNOTATION`].
pub const DEFAULT_RUN_TIME: Duration = Duration::from_secs(10);

/// How long a pod runs before its containers exit (see [`RUN_FOR_ANNOTATION`]); `None` for a
/// pod that restarts its containers and so runs until deleted. An annotation that does not
/// parse counts as absent.
pub(crate) fn run_time(pod: &Pod) -> Option<Duration> {
    let restart_policy = pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref());
    if !matches!(restart_policy, Some("Never" | "OnFailure")) {
        return None;
    }
    let annotation = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(RUN_FOR_ANNOTATION));
    Some(
        annotation
            .and_then(|text| parse_duration(text))
            .unwrap_or(DEFAULT_RUN_TIME),
    )
}

/// The exit code of a pod's containers when it finishes (see [`EXIT_CODE_ANNOTATION`]).
pub(crate) fn exit_code(pod: &Pod) -> i32 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(EXIT_CODE_ANNOTATION))
        .and_then(|code| code.trim().parse().ok())
        .unwrap_or(0)
}

/// A Go duration (`90s`, `1m30s`, `1.5h`, `500ms`), not negative.
pub(crate) fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    if text == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = text;
    let mut total = 0.0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .filter(|&end| end > 0)?;
        let value: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += value * seconds;
        rest = &rest[unit_end..];
    }
    Some(Duration::from_secs_f64(total))
}

/// Whether a pod has finished (`Succeeded` or `Failed`).
pub(crate) fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Whether a pod is being deleted.
pub(crate) fn is_deleting(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

/// Whether a pod's `Ready` condition is `True`.
pub(crate) fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

/// Whether a node's `Ready` condition is `True`.
pub(crate) fn node_is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

/// The node a pod is bound to, if any.
pub(crate) fn node_name_of(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// An object's namespace and name (empty when unset).
pub(crate) fn name_of(meta: &ObjectMeta) -> (String, String) {
    (
        meta.namespace.clone().unwrap_or_default(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// A controller owner reference to `owner`.
pub(crate) fn controller_reference<K: kube::Resource<DynamicType = ()>>(
    owner: &K,
) -> OwnerReference {
    OwnerReference {
        api_version: K::api_version(&()).to_string(),
        kind: K::kind(&()).to_string(),
        name: owner.meta().name.clone().unwrap_or_default(),
        uid: owner.meta().uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Deletes a pod (with its grace period, or at once when `force`), recording it in `pods`; a
/// pod already gone counts as deleted.
pub(crate) async fn delete_pod(
    shared: &PhysicsContext,
    pods: &mut cache::Cache<Pod>,
    pod: &Pod,
    force: bool,
) -> Result<(), PhysicsError> {
    let (namespace, name) = name_of(&pod.metadata);
    let api: Api<Pod> = Api::namespaced(shared.client.clone(), &namespace);
    let mut params = DeleteParams::default();
    if force {
        params.grace_period_seconds = Some(0);
    }
    match api.delete(&name, &params).await {
        Ok(either) => {
            match either.left() {
                Some(object) => pods.deleted(object, force),
                None => pods.forget(&namespace, &name),
            }
            tracing::debug!(pod = %name, %namespace, "pod deleted");
            Ok(())
        }
        Err(error) if api_code(&error) == Some(404) => {
            pods.forget(&namespace, &name);
            Ok(())
        }
        Err(error) => Err(error.into()),
    }
}

/// The uid of the object's controller (the owner reference with `controller: true`).
pub(crate) fn controller_uid(meta: &ObjectMeta) -> Option<&str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
}

/// A resource list (`{"cpu": "500m"}`) as a resource vector; amounts that do not parse are
/// skipped with a debug log.
pub(crate) fn resources_of(list: Option<&BTreeMap<String, Quantity>>) -> Resources {
    let mut out = Resources::new();
    for (name, quantity) in list.into_iter().flatten() {
        if let Err(error) = out.set_quantity(name, &quantity.0) {
            tracing::debug!(resource = %name, %error, "ignoring an unparsable quantity");
        }
    }
    out
}

/// What a container asks for: its requests (the emulator's admission already defaulted a
/// request from a limit that stood alone, as the real API server does).
fn container_requests(resources: Option<&ResourceRequirements>) -> Resources {
    resources_of(resources.and_then(|r| r.requests.as_ref()))
}

/// What a pod asks of a node, computed by joinery-core (init containers, sidecars, pod-level
/// requests, overhead, and one pod slot).
pub(crate) fn pod_requests(pod: &Pod) -> Resources {
    let Some(spec) = pod.spec.as_ref() else {
        return Resources::new().with(joinery_core::resources::PODS, 1);
    };
    let pod_level = container_requests(spec.resources.as_ref());
    let pod_requests = spec.resources.as_ref().and_then(|r| r.requests.as_ref());
    let has = |name: &str| pod_requests.is_some_and(|r| r.contains_key(name));
    let spec_data = PodResourceSpec {
        containers: spec
            .containers
            .iter()
            .map(|c| container_requests(c.resources.as_ref()))
            .collect(),
        init_containers: spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| InitContainer {
                requests: container_requests(c.resources.as_ref()),
                restartable: c.restart_policy.as_deref() == Some("Always"),
            })
            .collect(),
        overhead: resources_of(spec.overhead.as_ref()),
        pod_level: PodLevelRequests {
            cpu_millis: has("cpu").then_some(pod_level.cpu_millis),
            memory_bytes: has("memory").then_some(pod_level.memory_bytes),
        },
    };
    spec_data.requests()
}

/// A Kubernetes taint in joinery-core's form (`None` for an unknown effect).
pub(crate) fn core_taint(taint: &k8s_openapi::api::core::v1::Taint) -> Option<Taint> {
    let effect = match taint.effect.as_str() {
        "NoSchedule" => TaintEffect::NoSchedule,
        "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
        "NoExecute" => TaintEffect::NoExecute,
        _ => return None,
    };
    Some(Taint::new(
        taint.key.clone(),
        taint.value.clone().unwrap_or_default(),
        effect,
    ))
}

/// A Kubernetes toleration in joinery-core's form.
pub(crate) fn core_toleration(toleration: &k8s_openapi::api::core::v1::Toleration) -> Toleration {
    let effect = match toleration.effect.as_deref() {
        Some("NoSchedule") => Some(TaintEffect::NoSchedule),
        Some("PreferNoSchedule") => Some(TaintEffect::PreferNoSchedule),
        Some("NoExecute") => Some(TaintEffect::NoExecute),
        _ => None,
    };
    Toleration {
        key: toleration.key.clone().unwrap_or_default(),
        operator: if toleration.operator.as_deref() == Some("Exists") {
            TolerationOperator::Exists
        } else {
            TolerationOperator::Equal
        },
        value: toleration.value.clone().unwrap_or_default(),
        effect,
        toleration_seconds: toleration.toleration_seconds,
    }
}

/// The pod's tolerations in joinery-core's form.
pub(crate) fn pod_tolerations(pod: &Pod) -> Vec<Toleration> {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .into_iter()
        .flatten()
        .map(core_toleration)
        .collect()
}

/// The taints that decide where pods may go: the node's own `NoSchedule` and `NoExecute`
/// taints, plus `node.kubernetes.io/not-ready:NoSchedule` while the node is not `Ready` and
/// does not carry that taint already (what the node lifecycle controller would add).
pub(crate) fn scheduling_taints(node: &Node) -> Vec<Taint> {
    let mut taints: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter_map(core_taint)
        .filter(|t| t.effect != TaintEffect::PreferNoSchedule)
        .collect();
    let not_ready = joinery_core::labels::NOT_READY_TAINT_KEY;
    if !node_is_ready(node) && !taints.iter().any(|t| t.key == not_ready) {
        taints.push(Taint::without_value(not_ready, TaintEffect::NoSchedule));
    }
    taints
}

/// A reference to an object, for events.
pub(crate) fn object_reference(
    kind: &str,
    api_version: &str,
    name: &str,
    namespace: Option<&str>,
    uid: Option<&str>,
) -> ObjectReference {
    ObjectReference {
        kind: Some(kind.to_string()),
        api_version: Some(api_version.to_string()),
        name: Some(name.to_string()),
        namespace: namespace.map(String::from),
        uid: uid.map(String::from),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod as the emulator stores it (after admission's defaulting).
    fn pod(spec: serde_json::Value) -> Pod {
        let mut object = serde_json::json!({"metadata": {"name": "p"}, "spec": spec});
        crate::apiserver::admission::default_pod(&mut object);
        serde_json::from_value(object).unwrap()
    }

    #[test]
    fn pod_requests_count_admitted_limits_sidecars_and_overhead() {
        let p = pod(serde_json::json!({
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "500m"}, "limits": {"memory": "1Gi"}}},
                {"name": "b", "resources": {"limits": {"cpu": "250m"}}},
            ],
            "initContainers": [
                {"name": "init", "resources": {"requests": {"cpu": "2"}}},
                {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
            ],
            "overhead": {"cpu": "10m"},
        }));
        let requests = pod_requests(&p);
        // Regular phase 850m (750m + sidecar 100m) is below the init container's 2 CPU.
        assert_eq!(requests.cpu_millis, 2010);
        assert_eq!(requests.memory_bytes, 1 << 30);
        assert_eq!(requests.pods, 1);
    }

    #[test]
    fn pods_that_run_to_completion_have_a_run_time() {
        let pod = |restart: &str, annotations: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p", "annotations": annotations},
                "spec": {"restartPolicy": restart, "containers": []},
            }))
            .unwrap()
        };
        let annotated = serde_json::json!({RUN_FOR_ANNOTATION: "1m30s", EXIT_CODE_ANNOTATION: "3"});
        assert_eq!(
            run_time(&pod("Never", annotated.clone())),
            Some(Duration::from_secs(90))
        );
        assert_eq!(exit_code(&pod("Never", annotated.clone())), 3);
        assert_eq!(
            run_time(&pod("OnFailure", serde_json::json!({}))),
            Some(DEFAULT_RUN_TIME)
        );
        assert_eq!(run_time(&pod("Always", annotated)), None);
        assert_eq!(parse_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("ten"), None);
        assert_eq!(parse_duration("5"), None);
    }

    #[test]
    fn label_selectors() {
        let labels: BTreeMap<String, String> = [("app".to_string(), "web".to_string())].into();
        let selector: LabelSelector = serde_json::from_value(serde_json::json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}],
        }))
        .unwrap();
        assert!(selector_matches(Some(&selector), &labels));
        assert!(selector_matches(Some(&LabelSelector::default()), &labels));
        assert!(!selector_matches(None, &labels));
    }
}
