//! A fake of the Exoscale v2 compute API on loopback, for the `exoscale` cloud plugin's tests
//! and for simulations whose cloud is Exoscale.
//!
//! ```no_run
//! # async fn demo() -> Result<(), joinery_emulator::SimError> {
//! use joinery_emulator::exoscale::{ExoFake, ExoFakeOptions};
//! let fake = ExoFake::start(ExoFakeOptions::default()).await?;
//! let sg = fake.add_security_group("k8s-nodes");
//! println!("point the plugin at {} (grant {})", fake.endpoint_template(), fake.url());
//! # let _ = sg;
//! fake.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # Zones
//!
//! The real API has one host per zone (`https://api-<zone>.exoscale.com/v2`). The fake serves
//! every zone from one loopback address and tells them apart **by path**: the base URL of
//! zone `z` is `http://127.0.0.1:<port>/z/v2` ([`ExoFake::endpoint_template`] gives
//! `http://127.0.0.1:<port>/{zone}/v2`, the form the plugin's `endpoint` setting takes). A
//! request to `/v2/…` carrying `Host: api-<zone>.exoscale.com` is routed by its host instead,
//! for clients that can set it. `GET /v2/zone` lists the zones with their fake endpoints.
//!
//! What is zonal: instances, templates (IDs differ per zone), private networks and
//! operations. Organisation-wide (same objects at every zone): instance types (each lists the
//! `zones` it is offered in), security groups, anti-affinity groups and SSH keys.
//!
//! # Authentication
//!
//! Every request must carry `Authorization: EXO2-HMAC-SHA256 credential=<key>[,signed-query-args=<a;b>],expires=<unix>,signature=<base64>`,
//! signed over five lines joined by `\n`: `<METHOD> <path>` with the request path exactly as sent
//! (so with the fake's zone prefix, and always including `/v2`), the raw body, the decoded
//! values of the single-valued query parameters in name order, an empty header segment
//! and the expiry. `GET /v2/zone` is public, as on the real API (Exoscale's own client sends
//! it unsigned); every other call needs the header. A missing or malformed header is `401`; an unknown key, a wrong signature,
//! unsigned query parameters or an `expires` in the past is `403`. Expiry is checked against
//! the real wall clock (plugins sign with it), not the simulated one. The real API's answer
//! to a bad signature is not documented; these statuses are the fake's choice.
//!
//! # Calls (all under `/v2`)
//!
//! | call | answer |
//! |---|---|
//! | `GET /zone` | `{"zones": [{name, api-endpoint, sos-endpoint}]}` |
//! | `GET /operation/{id}` | the operation; it answers `pending` to the first [`ExoFakeOptions::operation_polls`] polls, then its final state; an operation nobody polls ends after [`ExoFakeOptions::operation_deadline`] (simulated) |
//! | `GET /instance-type[/{id}]` | `{"instance-types": […]}`: `id`, `family`, `size`, `cpus`, `gpus`, `memory` (bytes), `authorized`, `zones` |
//! | `GET /template[?visibility=public\|private&family=…]`, `GET /template/{id}` | the zone's templates of that visibility (public when not given): `id`, `name`, `build`, `version`, `size` (bytes), `visibility`, `zones`, `created-at`, … |
//! | `GET /security-group[?visibility=…][/{id}]` | `{"security-groups": […]}` (all visibilities unless filtered) |
//! | `GET /private-network[/{id}]` | the zone's networks with `labels` and `leases` |
//! | `PUT /private-network/{id}:attach` / `:detach` | body `{"instance": {"id"}, "ip"?}`; an operation (reference: the network) |
//! | `GET /anti-affinity-group[/{id}]` | groups with their member `instances` |
//! | `GET /ssh-key[/{name}]` | `{name, fingerprint}` |
//! | `GET /quota` | `{"quotas": [{"resource": "instance", usage, limit}]}` (`-1`: unlimited) |
//! | `POST /instance` | creates at once in state `starting` and returns the operation (`reference.id` = the instance) |
//! | `GET /instance[?labels=k=v k2=v2]` | the zone's instances whose labels match every pair; list items omit `anti-affinity-groups` |
//! | `GET /instance/{id}` | the instance (with `anti-affinity-groups` and `user-data`) |
//! | `PUT /instance/{id}` | `name`, `labels` (the map is replaced, never merged); an operation |
//! | `DELETE /instance/{id}` | state `destroying` at once; `404` once the operation ends |
//!
//! Create validates like the API documents: `instance-type` (known, offered in the zone,
//! `authorized`, else `403`), `template` (in this zone), `disk-size` 10–51200 GiB and at least
//! the template's size, `name` 1–255 characters, `user-data` base64 of at most 32768
//! characters, labels (see [`check_labels`]), `security-groups`, `anti-affinity-groups`,
//! `ssh-key`/`ssh-keys` all existing, `public-ip-assignment` `inet4|dual|none`. Instances
//! go `starting` → `running` after [`ExoFakeOptions::boot_delay`] (simulated).
//!
//! # Errors and faults
//!
//! Error bodies are `{"message": "…"}` or RFC 9457 problem details, as
//! [`ExoFaults::set_error_shape`] chooses; `429` is always `{"error", "retry_after"}` plus a
//! `Retry-After` header. Refusals the real API's wording is not known for are the fake's own
//! (marked so in `docs/exoscale.md`):
//!
//! - quota ([`ExoFaults::set_instance_quota`]): `403` "quota exceeded for resource instance…";
//! - a full anti-affinity group (more members than [`ExoFakeOptions::anti_affinity_ceiling`],
//!   8 by default like Exoscale's documented limit): `400` "anti-affinity group … cannot take
//!   another instance…";
//! - no capacity ([`ExoFaults::insufficient_capacity`]): the create's operation fails with
//!   reason `unavailable`, and no instance remains;
//! - a create whose operation fails after the instance exists ([`ExoFaults::fail_after_create`]):
//!   reason `fault`, the instance stays in state `error` until deleted;
//! - attachments that fail ([`ExoFaults::fail_attach`]), `5xx` rates per call and throttling.
//!
//! # Events
//!
//! [`ExoFake::subscribe`] delivers the simulated cloud's [`CloudEvent`]s, so the cluster
//! physics boots Exoscale instances like simulated ones: `Launched` when an instance is
//! created (provider ID `exoscale://<uuid>`, the decoded userData, capacity from its type
//! and disk, allocatable minus [`ExoFakeOptions::overhead`]) and `Terminated` when it is
//! deleted. A kubelet bootstrap that asks the metadata service for `instance-id` gets the UUID.

mod api;
pub mod catalog;
pub mod faults;
pub mod judges;
pub mod model;
mod signature;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use joinery_core::clock::Clock;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use crate::SimError;
use crate::cloud::catalog::OverheadSpec;
use crate::cloud::model::{CloudEvent, SimInstance};
use crate::network::Network;
use api::{ExoState, World};

pub use api::check_labels;
pub use catalog::{
    DEBIAN_12, UBUNTU_2404, default_instance_types, default_templates, default_zones, stable_uuid,
};
pub use faults::{ErrorShape, ExoFaults, ExoVerb};
pub use model::{
    ExoAntiAffinityGroup, ExoInstance, ExoInstanceState, ExoInstanceType, ExoOperation,
    ExoPrivateNetwork, ExoSecurityGroup, ExoSshKey, ExoTemplate, GIB, Lease, OperationState,
    PROVIDER_ID_PREFIX, Visibility,
};
pub use signature::SCHEME;

/// How many events a slow subscriber may fall behind before it misses some.
const EVENT_BUFFER: usize = 4096;

/// The API key of [`ExoFakeOptions::default`].
pub const DEFAULT_API_KEY: &str = "EXO0123456789abcdef01234567";
/// The API secret of [`ExoFakeOptions::default`].
pub const DEFAULT_API_SECRET: &str = "fake-exoscale-secret-do-not-use";

/// Settings of a fake Exoscale API.
#[derive(Debug, Clone)]
pub struct ExoFakeOptions {
    /// Zones served; default `ch-gva-2`, `de-fra-1`, `at-vie-1`.
    pub zones: Vec<String>,
    /// Instance types; default [`default_instance_types`] of the zones.
    pub instance_types: Vec<ExoInstanceType>,
    /// Templates; default [`default_templates`] of the zones.
    pub templates: Vec<ExoTemplate>,
    /// Accepted API keys and their secrets; default [`DEFAULT_API_KEY`] / [`DEFAULT_API_SECRET`].
    pub credentials: BTreeMap<String, String>,
    /// The shared clock; default real time.
    pub clock: Arc<Clock>,
    /// Simulated time from `starting` to `running`; default 30 s.
    pub boot_delay: Duration,
    /// How many polls an operation answers `pending` before its final state; default 1.
    pub operation_polls: u32,
    /// Simulated time after which an operation nobody polled ends anyway; default 10 s.
    pub operation_deadline: Duration,
    /// Members an anti-affinity group can hold (one per available host); default 8.
    pub anti_affinity_ceiling: usize,
    /// Reservations subtracted from capacity for the allocatable the simulated kubelet
    /// reports; default the `exoscale` plugin's defaults (kube-reserved 200m CPU, 300Mi memory,
    /// 1Gi storage; system-reserved 100m, 100Mi, 3Gi; eviction 100Mi memory).
    pub overhead: OverheadSpec,
    /// Fault settings; keep a clone to change them while the fake runs.
    pub faults: ExoFaults,
    /// Seed of the generated UUIDs.
    pub seed: u64,
    /// Address to listen on; default an ephemeral port on 127.0.0.1.
    pub bind_address: SocketAddr,
    /// The network to listen on (loopback TCP by default; see [`crate::network`]).
    pub network: Network,
    /// Write every exchange to this file (created or truncated at start), one JSON object
    /// per line: `method`, `path` (as sent, zone prefix included), `query`, `requestBody`,
    /// `status`, `contentType`, `responseBody` (bodies parsed as JSON, else `null`). The
    /// conformance test (`conformance/exoscale/`) validates them against Exoscale's OpenAPI
    /// document. Default: no journal.
    pub journal: Option<PathBuf>,
}

/// The overhead the `exoscale` plugin assumes when a NodeClass sets no kubelet reservations.
pub fn default_overhead() -> OverheadSpec {
    let map = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    OverheadSpec {
        kube_reserved: map(&[
            ("cpu", "200m"),
            ("memory", "300Mi"),
            ("ephemeral-storage", "1Gi"),
        ]),
        system_reserved: map(&[
            ("cpu", "100m"),
            ("memory", "100Mi"),
            ("ephemeral-storage", "3Gi"),
        ]),
        eviction_threshold: map(&[("memory", "100Mi")]),
    }
}

impl Default for ExoFakeOptions {
    fn default() -> Self {
        let zones = default_zones();
        ExoFakeOptions {
            instance_types: default_instance_types(&zones),
            templates: default_templates(&zones),
            zones,
            credentials: [(DEFAULT_API_KEY.to_string(), DEFAULT_API_SECRET.to_string())].into(),
            clock: Arc::new(Clock::real()),
            boot_delay: Duration::from_secs(30),
            operation_polls: 1,
            operation_deadline: Duration::from_secs(10),
            anti_affinity_ceiling: 8,
            overhead: default_overhead(),
            faults: ExoFaults::default(),
            seed: 0x0E80_5CA1,
            bind_address: SocketAddr::from(([127, 0, 0, 1], 0)),
            network: Network::tcp(),
            journal: None,
        }
    }
}

/// A running fake Exoscale API. Dropping it stops the server.
pub struct ExoFake {
    address: SocketAddr,
    url: String,
    state: Arc<ExoState>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl ExoFake {
    /// Checks the options, binds the listener and starts serving in the background.
    pub async fn start(options: ExoFakeOptions) -> Result<ExoFake, SimError> {
        if options.zones.is_empty() {
            return Err(SimError::InvalidCatalog(
                "the fake Exoscale API needs at least one zone".into(),
            ));
        }
        for t in &options.templates {
            if !options.zones.contains(&t.zone) {
                return Err(SimError::InvalidCatalog(format!(
                    "template {} is in unknown zone {}",
                    t.id, t.zone
                )));
            }
        }
        let journal = match &options.journal {
            Some(path) => Some(Mutex::new(std::fs::File::create(path).map_err(
                |source| SimError::Write {
                    what: format!("the fake Exoscale API's journal {}", path.display()),
                    source,
                },
            )?)),
            None => None,
        };
        let listener = options
            .network
            .bind(options.bind_address)
            .await
            .map_err(SimError::Bind)?;
        let address = listener.local_addr().map_err(SimError::Bind)?;
        let url = format!("http://{address}");
        let (stop, stopped) = watch::channel(false);
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        let world = World {
            instance_types: options.instance_types,
            templates: options.templates,
            rng: options.seed,
            ..World::default()
        };
        let state = Arc::new(ExoState {
            zones: options.zones,
            credentials: options.credentials,
            clock: options.clock,
            boot_delay: options.boot_delay,
            operation_polls: options.operation_polls,
            operation_deadline: options.operation_deadline,
            anti_affinity_ceiling: options.anti_affinity_ceiling,
            overhead: options.overhead,
            faults: options.faults,
            world: Mutex::new(world),
            events,
            base_url: url.clone(),
            journal,
        });
        let task = tokio::spawn(api::serve(listener, state.clone(), stopped));
        tracing::info!(%url, zones = ?state.zones, "fake Exoscale API listening");
        Ok(ExoFake {
            address,
            url,
            state,
            stop,
            task: Some(task),
        })
    }

    /// The base URL, e.g. `http://127.0.0.1:41234` (grant exactly this to the plugin).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The socket address the fake listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// `http://127.0.0.1:<port>/{zone}/v2`: the per-zone endpoint pattern for the plugin's
    /// `endpoint` setting.
    pub fn endpoint_template(&self) -> String {
        format!("{}/{{zone}}/v2", self.url)
    }

    /// The base URL of one zone, e.g. `http://127.0.0.1:41234/de-fra-1/v2`.
    pub fn zone_endpoint(&self, zone: &str) -> String {
        format!("{}/{zone}/v2", self.url)
    }

    /// The zones served.
    pub fn zones(&self) -> &[String] {
        &self.state.zones
    }

    /// A receiver of every [`CloudEvent`] from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<CloudEvent> {
        self.state.events.subscribe()
    }

    /// Simulated time from launch to `running` (and the kubelet booting).
    pub fn boot_delay(&self) -> Duration {
        self.state.boot_delay
    }

    /// The fault settings; changes apply to the next call.
    pub fn faults(&self) -> &ExoFaults {
        &self.state.faults
    }

    /// The clock the fake keeps time with.
    pub fn clock(&self) -> &Arc<Clock> {
        &self.state.clock
    }

    /// Every instance (all zones, including ones being destroyed), ordered by ID.
    pub fn instances(&self) -> Vec<ExoInstance> {
        self.state.world().instances.values().cloned().collect()
    }

    /// One instance.
    pub fn instance(&self, id: &str) -> Option<ExoInstance> {
        self.state.world().instances.get(id).cloned()
    }

    /// An instance as the cluster physics sees it.
    pub fn sim_instance(&self, id: &str) -> Option<SimInstance> {
        let world = self.state.world();
        world
            .instances
            .get(id)
            .map(|i| self.state.sim_instance(&world, i, true))
    }

    /// Every operation so far, ordered by ID.
    pub fn operations(&self) -> Vec<ExoOperation> {
        self.state
            .world()
            .operations
            .values()
            .map(|(op, _)| op.clone())
            .collect()
    }

    /// The instance types.
    pub fn instance_types(&self) -> Vec<ExoInstanceType> {
        self.state.world().instance_types.clone()
    }

    /// The templates of every zone.
    pub fn templates(&self) -> Vec<ExoTemplate> {
        self.state.world().templates.clone()
    }

    /// The security groups.
    pub fn security_groups(&self) -> Vec<ExoSecurityGroup> {
        self.state.world().security_groups.clone()
    }

    /// The private networks of every zone.
    pub fn private_networks(&self) -> Vec<ExoPrivateNetwork> {
        self.state.world().private_networks.clone()
    }

    /// The anti-affinity groups.
    pub fn anti_affinity_groups(&self) -> Vec<ExoAntiAffinityGroup> {
        self.state.world().anti_affinity_groups.clone()
    }

    /// Adds a private security group; returns its ID.
    pub fn add_security_group(&self, name: &str) -> String {
        self.add_security_group_with(name, Visibility::Private)
    }

    /// Adds a security group of the given visibility; returns its ID.
    pub fn add_security_group_with(&self, name: &str, visibility: Visibility) -> String {
        let mut world = self.state.world();
        let id = world.uuid();
        world.security_groups.push(ExoSecurityGroup {
            id: id.clone(),
            name: name.into(),
            description: String::new(),
            visibility,
        });
        id
    }

    /// Adds a private network in `zone` with Exoscale labels; returns its ID.
    pub fn add_private_network(&self, zone: &str, name: &str, labels: &[(&str, &str)]) -> String {
        let mut world = self.state.world();
        let id = world.uuid();
        let labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        world.private_networks.push(ExoPrivateNetwork {
            id: id.clone(),
            zone: zone.into(),
            name: name.into(),
            description: String::new(),
            labels,
            leases: Vec::new(),
        });
        id
    }

    /// Adds an anti-affinity group; returns its ID.
    pub fn add_anti_affinity_group(&self, name: &str) -> String {
        let mut world = self.state.world();
        let id = world.uuid();
        world.anti_affinity_groups.push(ExoAntiAffinityGroup {
            id: id.clone(),
            name: name.into(),
            description: String::new(),
            instances: Vec::new(),
        });
        id
    }

    /// Adds an SSH key.
    pub fn add_ssh_key(&self, name: &str) {
        let fingerprint = stable_uuid(&format!("ssh-key/{name}")).replace('-', "");
        let fingerprint = fingerprint
            .as_bytes()
            .chunks(2)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .collect::<Vec<_>>()
            .join(":");
        self.state.world().ssh_keys.push(ExoSshKey {
            name: name.into(),
            fingerprint,
        });
    }

    /// Adds a template (e.g. a private one, or a newer build); returns its ID. `created_at`
    /// defaults to now (simulated) when empty, and `id` is generated when empty.
    pub fn add_template(&self, mut template: ExoTemplate) -> String {
        let mut world = self.state.world();
        if template.id.is_empty() {
            template.id = world.uuid();
        }
        if template.created_at.is_empty() {
            template.created_at = joinery_core::time::rfc3339(self.state.clock.now());
        }
        let id = template.id.clone();
        world.templates.push(template);
        id
    }

    /// Adds a running instance as if someone had created it earlier (e.g. an orphan a
    /// previous controller left behind): of type `instance_type` (`<family>.<size>`) in
    /// `zone`, with the zone's first template, a 10 GiB disk, no userData and these labels.
    /// It is announced like any other instance. Returns its ID.
    pub fn add_instance(
        &self,
        zone: &str,
        instance_type: &str,
        labels: &[(&str, &str)],
    ) -> Result<String, SimError> {
        let labels: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        check_labels(&labels).map_err(SimError::InvalidCatalog)?;
        let now = self.state.clock.now();
        let mut world = self.state.world();
        if !self.state.zones.iter().any(|z| z == zone) {
            return Err(SimError::InvalidCatalog(format!(
                "instance in unknown zone {zone}"
            )));
        }
        let kind = world
            .instance_types
            .iter()
            .find(|t| t.name() == instance_type)
            .cloned()
            .ok_or_else(|| {
                SimError::InvalidCatalog(format!("unknown instance type {instance_type}"))
            })?;
        let template = world
            .templates
            .iter()
            .find(|t| t.zone == zone)
            .map(|t| t.id.clone())
            .ok_or_else(|| SimError::InvalidCatalog(format!("zone {zone} has no template")))?;
        let id = world.uuid();
        let address = world.next_address();
        let instance = ExoInstance {
            id: id.clone(),
            zone: zone.to_string(),
            name: format!("vm-{}", &id[..8]),
            state: ExoInstanceState::Running,
            created_at: now,
            labels,
            instance_type_id: kind.id.clone(),
            instance_type: kind.name(),
            template_id: template,
            disk_size: 10,
            user_data: None,
            security_groups: Vec::new(),
            anti_affinity_groups: Vec::new(),
            private_networks: Vec::new(),
            ssh_keys: Vec::new(),
            public_ip_assignment: "inet4".into(),
            public_ip: Some(format!(
                "194.182.{}.{}",
                (address >> 8) & 0xff,
                address & 0xff
            )),
            ipv6_address: None,
            mac_address: format!(
                "06:00:00:{:02x}:{:02x}:{:02x}",
                (address >> 16) & 0xff,
                (address >> 8) & 0xff,
                address & 0xff
            ),
        };
        let event = self.state.sim_instance(&world, &instance, true);
        world.instances.insert(id.clone(), instance);
        world.created += 1;
        drop(world);
        self.state.publish(CloudEvent::Launched(event));
        Ok(id)
    }

    /// Every instance as the cluster physics sees it; instances being destroyed are
    /// `Terminated`.
    pub fn sim_instances(&self) -> Vec<SimInstance> {
        let world = self.state.world();
        world
            .instances
            .values()
            .map(|i| {
                self.state
                    .sim_instance(&world, i, i.state != ExoInstanceState::Destroying)
            })
            .collect()
    }

    /// How many instances were ever created (including deleted ones and failed creates
    /// that made an instance).
    pub fn created_count(&self) -> usize {
        self.state.world().created
    }

    /// Stops the server and waits for the accept loop to finish.
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for ExoFake {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}
