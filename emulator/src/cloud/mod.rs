//! The simulated cloud: an HTTP API on loopback that the `simcloud` plugin drives through the
//! host's outgoing HTTP, and whose instances the cluster physics boots into Nodes.
//!
//! ```no_run
//! # async fn demo() -> Result<(), joinery_emulator::SimError> {
//! use joinery_emulator::cloud::{SimCloud, SimCloudOptions};
//! let cloud = SimCloud::start(SimCloudOptions::default()).await?;
//! let mut events = cloud.subscribe();
//! println!("grant the simcloud plugin {}", cloud.url());
//! # let _ = events.try_recv();
//! cloud.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! Time is the shared simulated [`Clock`]: timestamps, the boot delay, the retention of
//! terminated instances and injected latency are all simulated durations.
//!
//! # HTTP API
//!
//! JSON over HTTP/1.1 on `127.0.0.1:<random port>`, no authentication. Every error body is
//! `{"reason": "...", "message": "..."}` plus the fields noted below.
//!
//! | call | answer |
//! |---|---|
//! | `GET /v1/zones` | `200 {"zones": ["test-zone-a", …]}` |
//! | `GET /v1/instance-types` | `200 {"zones": […], "instanceTypes": [InstanceTypeInfo…]}`: each type's `name`, `capacity`, `overhead` (`kubeReserved`, `systemReserved`, `evictionThreshold`), `allocatable`, `labels` and `offerings` (`zone`, `capacityType`, `price`, `available`) |
//! | `POST /v1/instances` | body `{"candidates": [{"instanceType", "zone", "capacityType"}…], "userData": "…", "tags": {…}}`; launches the **first** candidate whose offering exists, is available and has capacity (like AWS CreateFleet with a prioritized list); `201` + the instance |
//! | `GET /v1/instances/{id}` | `200` + the instance; `404` if unknown or forgotten |
//! | `GET /v1/instances?tag=KEY=VALUE` | `200 {"instances": […]}`; `tag` may repeat (all must match); without it, every remembered instance |
//! | `DELETE /v1/instances/{id}` | `200` + the instance (now `terminated`) with `"previousState"`; idempotent: deleting a terminated or long-forgotten instance is `200` with `"previousState": "terminated"`; `404` only for IDs never handed out |
//! | `POST /v1/instances/{id}/reboot` | restarts the machine in place: `200` + the instance; `404` for an unknown ID, `409` for a terminated one. The physics restarts the machine's kubelet (its Node turns `Ready` again after the boot) unless it has a hardware fault |
//!
//! An instance is the JSON form of [`SimInstance`]: `id` (`i-` + 8 hex digits, never
//! reused), `providerId` (`simcloud://<id>`), `instanceType`, `zone`, `capacityType`,
//! `userData`, `tags`, `capacity`, `allocatable`, `labels`, `pricePerHour`, `state`
//! (`pending` → `running` after the boot delay → `terminated`) and `createdAt` (RFC 3339).
//! Terminated instances stay listed for [`SimCloudOptions::terminated_retention`] (five
//! simulated minutes by default).
//!
//! Create errors:
//! - `400 InvalidRequest` with `"field"` naming the bad field (`candidates`,
//!   `candidates[2].zone`, `userData`, `tags.team`, …), for malformed bodies, unknown instance
//!   types, zones or capacity types;
//! - `403 QuotaExceeded` when the live-instance quota is reached;
//! - `409 InsufficientCapacity` with `"offerings"` (the candidates, as sent) when none can
//!   be launched.
//!
//! Any call may also get an injected fault ([`CloudFaults`]): `429 Throttled` with a
//! `Retry-After` header (whole simulated seconds), `500 InternalError`, or added latency. A
//! create with "fail after create" launches, tags and announces the instance but answers
//! `500`, like a lost response.
//!
//! # Events
//!
//! [`SimCloud::subscribe`] delivers [`CloudEvent::Launched`] when an instance is created
//! (state `pending`; the physics boots its kubelet [`SimCloud::boot_delay`] later) and
//! [`CloudEvent::Terminated`] when a live instance is deleted.

mod api;
pub mod catalog;
pub mod faults;
pub mod model;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use joinery_core::clock::Clock;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use crate::SimError;
use crate::network::Network;
use api::{CloudState, InstanceTable};

pub use catalog::{Catalog, InstanceTypeInfo, OfferingInfo, OverheadSpec, ServedCatalog};
pub use faults::{CloudFaults, CloudVerb, OfferingKey};
pub use model::{CloudEvent, InstanceState, PROVIDER_ID_PREFIX, SimInstance};

/// How many events a slow subscriber may fall behind before it misses some.
const EVENT_BUFFER: usize = 4096;

/// Settings of a simulated cloud.
#[derive(Debug, Clone)]
pub struct SimCloudOptions {
    /// What the cloud can launch; default: the kwok-like catalog.
    pub catalog: Catalog,
    /// Simulated time from launch to `running` (and to the kubelet booting); default 30 s.
    pub boot_delay: Duration,
    /// The shared clock; default: real time.
    pub clock: Arc<Clock>,
    /// Fault settings; keep a clone to change them while the cloud runs.
    pub faults: CloudFaults,
    /// How long terminated instances stay listed (simulated); default 5 minutes.
    pub terminated_retention: Duration,
    /// Address to listen on; default an ephemeral port on 127.0.0.1.
    pub bind_address: SocketAddr,
    /// The network to listen on (loopback TCP by default; see [`crate::network`]).
    pub network: Network,
}

impl Default for SimCloudOptions {
    fn default() -> Self {
        SimCloudOptions {
            catalog: Catalog::default(),
            boot_delay: Duration::from_secs(30),
            clock: Arc::new(Clock::real()),
            faults: CloudFaults::default(),
            terminated_retention: Duration::from_secs(300),
            bind_address: SocketAddr::from(([127, 0, 0, 1], 0)),
            network: Network::tcp(),
        }
    }
}

/// A machine that runs before the cloud starts, to take in as an instance
/// ([`SimCloud::adopt`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Adoption {
    /// Its instance type: a name of the catalog.
    pub instance_type: String,
    /// Its zone: a zone where the catalog offers the type.
    pub zone: String,
    /// `on-demand` or `spot`.
    pub capacity_type: String,
    /// The instance's tags (the `simcloud` plugin finds a NodeClaim's instance by them).
    pub tags: std::collections::BTreeMap<String, String>,
}

/// A running simulated cloud. Dropping it stops the server.
pub struct SimCloud {
    address: SocketAddr,
    url: String,
    catalog: Catalog,
    state: Arc<CloudState>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl SimCloud {
    /// Checks the catalog, binds the listener and starts serving in the background.
    pub async fn start(options: SimCloudOptions) -> Result<SimCloud, SimError> {
        let catalog::ServedCatalog { zones, types } =
            catalog::serve(&options.catalog).map_err(SimError::InvalidCatalog)?;
        let by_name: HashMap<String, usize> = types
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.clone(), i))
            .collect();
        let listener = options
            .network
            .bind(options.bind_address)
            .await
            .map_err(SimError::Bind)?;
        let address = listener.local_addr().map_err(SimError::Bind)?;
        let url = format!("http://{address}");
        let (stop, stopped) = watch::channel(false);
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        let state = Arc::new(CloudState {
            types,
            by_name,
            zones,
            clock: options.clock,
            boot_delay: options.boot_delay,
            retention: options.terminated_retention,
            faults: options.faults,
            table: Mutex::new(InstanceTable::default()),
            events,
            stopped: stopped.clone(),
        });
        let task = tokio::spawn(api::serve(listener, state.clone(), stopped));
        tracing::info!(%url, instance_types = state.types.len(), "simulated cloud listening");
        Ok(SimCloud {
            address,
            url,
            catalog: options.catalog,
            state,
            stop,
            task: Some(task),
        })
    }

    /// The base URL, e.g. `http://127.0.0.1:41234` (grant exactly this to the plugin).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The socket address the cloud listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// A receiver of every [`CloudEvent`] from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<CloudEvent> {
        self.state.events.subscribe()
    }

    /// Every instance the cloud remembers, live or recently terminated, ordered by ID.
    pub fn instances(&self) -> Vec<SimInstance> {
        self.state.instances()
    }

    /// One remembered instance.
    pub fn instance(&self, id: &str) -> Option<SimInstance> {
        self.state.instance(id)
    }

    /// The catalog the cloud was started with.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The resolved instance types (capacity, labels, priced offerings).
    pub fn instance_types(&self) -> &[InstanceTypeInfo] {
        &self.state.types
    }

    /// Takes in a machine that was already running (a Karpenter node of a cluster snapshot)
    /// as a `running` instance with a new ID and the catalog's capacity, labels and price for
    /// its offering; no [`CloudEvent`] is sent (the caller hands it to the physics, whose
    /// kubelet takes over its existing Node). The error names what the catalog lacks: the
    /// instance type, or an offering in that zone and capacity type.
    pub fn adopt(&self, machine: &Adoption) -> Result<SimInstance, String> {
        api::adopt(&self.state, machine)
    }

    /// Makes a live instance hang: its kubelet stops for good (see [`CloudEvent::Hung`]).
    /// Returns whether the instance exists.
    pub fn hang(&self, id: &str) -> bool {
        match self.state.instance(id) {
            Some(instance) if instance.state != InstanceState::Terminated => {
                let _ = self.state.events.send(CloudEvent::Hung(instance));
                true
            }
            _ => false,
        }
    }

    /// The fault settings; changes take effect on the next call.
    pub fn faults(&self) -> &CloudFaults {
        &self.state.faults
    }

    /// Simulated time from launch to boot.
    pub fn boot_delay(&self) -> Duration {
        self.state.boot_delay
    }

    /// The clock the cloud keeps time with.
    pub fn clock(&self) -> &Arc<Clock> {
        &self.state.clock
    }

    /// Stops the server (and pending boots) and waits for the accept loop to finish.
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for SimCloud {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}
