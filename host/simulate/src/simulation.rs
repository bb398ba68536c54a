//! The [`Simulation`]: starting the emulated cluster, its cloud (the simulated one or a fake
//! of a real one, see [`crate::clouds`]), the physics and the host; applying, deleting and
//! scaling objects in it; stopping it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use joinery_controller::{Controller, ControllerOptions, Settings};
use joinery_core::clock::Clock;
use joinery_emulator::cloud::{Catalog, SimCloud, SimCloudOptions, SimInstance};
use joinery_emulator::exoscale::ExoFake;
use joinery_emulator::network::Network;
use joinery_emulator::physics::{Physics, PhysicsOptions};
use joinery_emulator::{ApiServer, ApiServerOptions};
use joinery_runtime::registry::PluginRegistry;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::{self, Scope};
use serde_json::json;

use crate::clouds::{
    CleverCloud, CleverCloudGrant, ClusterApi, ClusterApiGrant, EXOSCALE_SECRET, ExoscaleGrant,
    PluginLink, seed_exoscale, simulation_registry_with, start_clevercloud, start_clusterapi,
    start_exoscale,
};
use crate::error::{SimulateError, kube_err};
use crate::expectations::judge_lag;
use crate::report;
use crate::scenario::{self, CleverCloudSpec, ClusterApiSpec, ExoscaleSpec};

/// The NodeClass CRDs of the built-in cloud plugins, applied to every simulated cluster.
pub const NODECLASS_CRDS: [(&str, &str); 4] = [
    (
        "simcloud",
        include_str!("../../../plugins/simcloud/nodeclass-crd.yaml"),
    ),
    (
        "exoscale",
        include_str!("../../../plugins/exoscale/nodeclass-crd.yaml"),
    ),
    (
        "clevercloud",
        include_str!("../../../plugins/clevercloud/nodeclass-crd.yaml"),
    ),
    (
        "clusterapi",
        include_str!("../../../plugins/clusterapi/nodeclass-crd.yaml"),
    ),
];

/// Default speed-up of simulated time over real time (in real time, `--realtime`).
pub const DEFAULT_SPEED: f64 = 20.0;

/// Where a virtual-time simulation's clock starts when its scenario sets no `startAt`:
/// 2026-01-01T00:00:00Z (a fixed moment, so that two runs write the same timestamps).
pub const VIRTUAL_START_UNIX_SECONDS: u64 = 1_767_225_600;

/// The seed of a simulation's generators when none is given.
pub const DEFAULT_SEED: u64 = 1;

/// Options of a simulation.
#[derive(Debug, Clone)]
pub struct SimulationOptions {
    /// Run in virtual time (see [`crate::virtual_time`]): the clock moves only when every
    /// part of the simulation waits, and jumps to the next timer; the API server, the clouds
    /// and the plugins talk over an in-process network. The simulation must then be started
    /// on a paused single-threaded runtime ([`crate::virtual_time::run`] makes one).
    /// Otherwise it runs in real time × `speed`, on loopback TCP.
    pub virtual_time: bool,
    /// Simulated seconds per real second, in real time (ignored in virtual time).
    pub speed: f64,
    /// The seed of the emulated API server's generated names and uids.
    pub seed: u64,
    /// The cloud's catalog.
    pub catalog: Catalog,
    /// Simulated instance boot time.
    pub boot_delay: Duration,
    /// Controller settings.
    pub settings: Settings,
    /// Whether to start the host (tests of the cluster alone leave it out).
    pub start_controller: bool,
    /// Faults the cloud injects from the start.
    pub faults: Option<scenario::FaultSpec>,
    /// Secrets (`name` → key → value), granted to every renderer.
    pub secrets: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
    /// Run the fake Exoscale API with these contents, and grant the `exoscale` plugin its
    /// loopback address, instead of launching on the simulated cloud (which still runs, idle).
    pub exoscale: Option<ExoscaleSpec>,
    /// Write every exchange with the fake Exoscale API to this file (JSON lines; see
    /// [`ExoFakeOptions::journal`](joinery_emulator::exoscale::ExoFakeOptions::journal)).
    pub exoscale_journal: Option<PathBuf>,
    /// Directories of plugins loaded beside the built-in ones (a renderer under test, say),
    /// as `joinery run --plugin-dir` loads them.
    pub plugin_dirs: Vec<PathBuf>,
    /// Run the fake Clever Cloud Kubernetes Engine with these settings — the NodeGroup CRD
    /// and its operator in the emulated cluster, the pricing endpoints on loopback — and
    /// grant the `clevercloud` and `clevercloud-pricing` plugins, instead of launching on
    /// the simulated cloud (which still runs, idle).
    pub clevercloud: Option<CleverCloudSpec>,
    /// Run a fake Cluster API management cluster with these contents and settings — a second
    /// emulated API server with the `cluster.x-k8s.io` CRDs and the MachineDeployment,
    /// MachineSet and Machine controllers, whose machines register as Nodes in the emulated
    /// (workload) cluster — and grant the `clusterapi` plugin both clusters, instead of
    /// launching on the simulated cloud (which still runs, idle).
    pub clusterapi: Option<ClusterApiSpec>,
    /// A static cluster written into the API server before the physics starts (so that its
    /// workload controllers find every ReplicaSet with its pods already there).
    pub preload: Option<joinery_emulator::preload::Preload>,
    /// A cluster snapshot written into the API server before the physics and the host start
    /// (see [`crate::snapshot`]): its Karpenter nodes adopted by the simulated cloud, a
    /// kubelet taking over each of its Nodes.
    pub snapshot: Option<Arc<crate::snapshot::ClusterSnapshot>>,
    /// Create the karpenter.sh CRDs and [`NODECLASS_CRDS`] at start (default); without them
    /// (`joinery sim serve --without-crds`) whoever uses the cluster installs them, e.g. with
    /// `helm install joinery-crd charts/joinery-crd`.
    pub install_crds: bool,
}

impl Default for SimulationOptions {
    fn default() -> Self {
        SimulationOptions {
            virtual_time: false,
            speed: DEFAULT_SPEED,
            seed: DEFAULT_SEED,
            catalog: Catalog::default(),
            boot_delay: Duration::from_secs(30),
            settings: Settings::default(),
            start_controller: true,
            faults: None,
            secrets: Default::default(),
            exoscale: None,
            exoscale_journal: None,
            clevercloud: None,
            clusterapi: None,
            preload: None,
            snapshot: None,
            install_crds: true,
            plugin_dirs: Vec::new(),
        }
    }
}

/// A running simulated cluster with its cloud, physics and (optionally) the host.
pub struct Simulation {
    /// The shared clock.
    pub clock: Arc<Clock>,
    /// The network the emulated world's servers listen on (in-process in virtual time).
    pub network: Network,
    /// The emulated API server.
    pub api: ApiServer,
    /// The simulated cloud.
    pub cloud: SimCloud,
    /// The fake Exoscale API, when the scenario's provider is `exoscale` (the simulated
    /// cloud then stays idle).
    pub exoscale: Option<ExoFake>,
    /// The fake Clever Cloud Kubernetes Engine, when the scenario's provider is
    /// `clevercloud` (the simulated cloud then stays idle).
    pub clevercloud: Option<CleverCloud>,
    /// The fake Cluster API management cluster, when the scenario's provider is
    /// `clusterapi` (the simulated cloud then stays idle).
    pub clusterapi: Option<ClusterApi>,
    /// The physics (scheduler, workload controllers, kubelets).
    pub physics: Option<Physics>,
    /// The host's controllers.
    pub controller: Option<Controller>,
    /// The plugins the host runs.
    pub registry: Arc<PluginRegistry>,
    /// Controller settings.
    pub settings: Settings,
    /// Client of the emulated API server.
    pub client: kube::Client,
    /// The secrets the host reads.
    pub secrets: Arc<dyn joinery_runtime::services::SecretStore>,
    /// What writing the cluster snapshot left out or changed on purpose (for the timeline).
    pub snapshot_notes: Vec<String>,
}

impl Simulation {
    /// Starts the emulated cluster (with the karpenter.sh CRDs and [`NODECLASS_CRDS`], unless
    /// [`SimulationOptions::install_crds`] is off), the
    /// simulated cloud and the fake of a real one the options ask for, the physics and, if
    /// asked, the host.
    pub async fn start(options: SimulationOptions) -> Result<Simulation, SimulateError> {
        let (clock, network) = if options.virtual_time {
            (
                Arc::new(crate::virtual_time::clock()),
                Network::in_process(),
            )
        } else {
            (Arc::new(Clock::with_speed(options.speed)), Network::tcp())
        };
        let api = ApiServer::start(ApiServerOptions {
            clock: clock.clone(),
            network: network.clone(),
            seed: Some(options.seed),
            ..Default::default()
        })
        .await?;
        let client = api.client()?;
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let mut all = joinery_api::crds();
        for (plugin, text) in NODECLASS_CRDS {
            let crd: CustomResourceDefinition = serde_norway::from_str(text)
                .map_err(|e| SimulateError::Plugins(format!("{plugin} NodeClass CRD: {e}")))?;
            all.push(crd);
        }
        for crd in all.into_iter().filter(|_| options.install_crds) {
            let name = crd.metadata.name.clone().unwrap_or_default();
            crds.create(&PostParams::default(), &crd)
                .await
                .map_err(kube_err(format!("creating CRD {name}")))?;
        }
        if let Some(shape) = options.preload {
            joinery_emulator::preload::preload(api.store(), shape)
                .await
                .map_err(|e| SimulateError::Preload(e.message))?;
        }
        let cloud = SimCloud::start(SimCloudOptions {
            catalog: options.catalog,
            boot_delay: options.boot_delay,
            clock: clock.clone(),
            network: network.clone(),
            ..Default::default()
        })
        .await?;
        if let Some(f) = &options.faults {
            inject_faults(&cloud, f);
        }
        let mut settings = options.settings;
        if settings.cluster_endpoint.is_empty() {
            settings.cluster_endpoint = api.url().to_string();
        }
        // The controller's own namespace, as an installation has it (it keeps its
        // learned-capacity ConfigMap there).
        let namespace = k8s_openapi::api::core::v1::Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(settings.system_namespace.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        match kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => {
                return Err(kube_err(format!(
                    "creating Namespace {}",
                    settings.system_namespace
                ))(e));
            }
        }
        let exoscale = match &options.exoscale {
            Some(spec) => Some(
                start_exoscale(
                    spec,
                    clock.clone(),
                    options.boot_delay,
                    options.exoscale_journal.clone(),
                    &network,
                )
                .await?,
            ),
            None => None,
        };
        let clevercloud = match &options.clevercloud {
            Some(spec) => Some(start_clevercloud(spec, &client, clock.clone(), &network).await?),
            None => None,
        };
        let clusterapi = match &options.clusterapi {
            Some(spec) => Some(
                start_clusterapi(
                    spec,
                    &client,
                    clock.clone(),
                    &settings.cluster_name,
                    &network,
                )
                .await?,
            ),
            None => None,
        };
        let events = match (&exoscale, &clevercloud, &clusterapi) {
            (Some(fake), _, _) => (fake.subscribe(), fake.boot_delay()),
            // Each machine brings its own boot delay.
            (None, Some(cke), _) => (cke.operator.subscribe(), options.boot_delay),
            (None, None, Some(capi)) => (capi.controllers.subscribe(), options.boot_delay),
            (None, None, None) => (cloud.subscribe(), cloud.boot_delay()),
        };
        // The snapshot goes in before the physics starts, so that its controllers find every
        // workload with its pods, and its kubelets every Node.
        let (existing_nodes, snapshot_notes) = match &options.snapshot {
            Some(snapshot) => {
                let seeded = snapshot.seed(api.store(), &cloud, &settings.cluster_name)?;
                (seeded.existing_nodes, seeded.notes)
            }
            None => (Vec::new(), Vec::new()),
        };
        let declared_boots = joinery_emulator::physics::DeclaredBoots::default();
        let physics = Physics::start(PhysicsOptions {
            declared_boots: declared_boots.clone(),
            existing_nodes,
            ..PhysicsOptions::new(client.clone(), clock.clone()).with_cloud(events.0, events.1)
        });
        // The management cluster's objects go in once the kubelets listen for its machines.
        if let (Some(capi), Some(spec)) = (&clusterapi, &options.clusterapi) {
            for object in &spec.manifests {
                apply_to(&capi.client, object).await?;
            }
        }
        let mut grant = None;
        if let (Some(fake), Some(spec)) = (&exoscale, &options.exoscale) {
            seed_exoscale(fake, spec, &settings.cluster_name)?;
            grant = Some(ExoscaleGrant {
                url: fake.url().to_string(),
                endpoint: fake.endpoint_template(),
                zone: fake.zones()[0].clone(),
            });
        }
        let mut store = joinery_runtime::services::StaticSecrets::default();
        if grant.is_some() {
            store = store.with(
                EXOSCALE_SECRET,
                &[
                    (
                        "api-key",
                        joinery_emulator::exoscale::DEFAULT_API_KEY.as_bytes(),
                    ),
                    (
                        "api-secret",
                        joinery_emulator::exoscale::DEFAULT_API_SECRET.as_bytes(),
                    ),
                ],
            );
        }
        for (name, entries) in &options.secrets {
            let entries: Vec<(&str, &[u8])> = entries
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_bytes()))
                .collect();
            store = store.with(name, &entries);
        }
        let secrets: Arc<dyn joinery_runtime::services::SecretStore> = Arc::new(store);
        let names: Vec<String> = options.secrets.keys().cloned().collect();
        // The fake CKE and Cluster API plugins poll in the plugin's time: every 50 ms of real
        // time keeps a launch short at high speed-ups; a simulated second in virtual time.
        let plugin_poll_millis = if clock.is_driven() { 1000 } else { 50 };
        let cke_grant = clevercloud.as_ref().map(|cke| CleverCloudGrant {
            pricing_url: cke.pricing.url().to_string(),
            workload: Some(client.clone()),
            quota_backoff_seconds: (60.0 / clock.speed().max(1.0)).round().max(1.0) as u32,
            poll_millis: plugin_poll_millis,
        });
        let capi_grant = clusterapi.as_ref().map(|capi| ClusterApiGrant {
            cluster_name: capi.cluster_name.clone(),
            management: Some(capi.client.clone()),
            workload: Some(client.clone()),
            poll_millis: plugin_poll_millis,
        });
        let link = PluginLink {
            network: network.clone(),
            virtual_clock: clock.is_driven().then(|| clock.clone()),
            declared_boots,
            plugin_dirs: options.plugin_dirs.clone(),
        };
        let registry = simulation_registry_with(
            cloud.url(),
            &settings.cluster_name,
            &names,
            secrets.clone(),
            grant.as_ref(),
            cke_grant.as_ref(),
            capi_grant.as_ref(),
            &link,
        )?;
        let mut sim = Simulation {
            clock,
            network,
            api,
            cloud,
            exoscale,
            clevercloud,
            clusterapi,
            physics: Some(physics),
            controller: None,
            registry,
            settings,
            client,
            secrets,
            snapshot_notes,
        };
        if options.start_controller {
            sim.start_controller().await?;
        }
        Ok(sim)
    }

    /// The instances of the cloud the scenario runs (the fake Exoscale API's, the fake
    /// CKE's machines, the fake Cluster API's machines, else the simulated cloud's), as the
    /// physics sees them. Exoscale publishes no prices, so its instances carry the price the
    /// host gave their offering (its pricing plugin's); so do CKE's and Cluster API's machines
    /// once the host knows a price for their offering (until then, CKE's flavor list price,
    /// or the MachineDeployment's `cluster.x-k8s.io/machine-current-price` annotation).
    pub fn cloud_instances(&self) -> Vec<SimInstance> {
        let mut instances = match (&self.exoscale, &self.clevercloud, &self.clusterapi) {
            (Some(fake), _, _) => fake.sim_instances(),
            (None, Some(cke), _) => cke.operator.instances(),
            (None, None, Some(capi)) => capi.controllers.instances(),
            (None, None, None) => return self.cloud.instances(),
        };
        if let Some(controller) = &self.controller {
            let prices = controller.context().cloud.known_prices();
            for x in &mut instances {
                if let Some(price) = prices.get(&(
                    x.instance_type.clone(),
                    x.zone.clone(),
                    x.capacity_type.clone(),
                )) {
                    x.price_per_hour = *price;
                }
            }
        }
        instances
    }

    /// How late the physics and the runtime have acted on the scaled clock (see
    /// [`joinery_emulator::physics::LagMeter`]); `None` once the physics is stopped.
    pub fn lag(&self) -> Option<&Arc<joinery_emulator::physics::LagMeter>> {
        self.physics.as_ref().map(Physics::lag)
    }

    /// The lag so far, judged against [`LAG_TOLERANCE_SECONDS`](crate::LAG_TOLERANCE_SECONDS).
    pub fn lag_report(&self) -> report::LagReport {
        judge_lag(
            self.lag().map(|l| l.snapshot()).unwrap_or_default(),
            self.clock.speed(),
        )
    }

    /// Starts the host (again, after [`Simulation::crash_controller`]).
    pub async fn start_controller(&mut self) -> Result<(), SimulateError> {
        self.controller = Some(Controller::start(self.controller_options()).await?);
        Ok(())
    }

    /// The options the host starts with: this simulation's client, plugins, clock, settings
    /// and secrets (a test starts more replicas of the host with them).
    pub fn controller_options(&self) -> ControllerOptions {
        ControllerOptions {
            client: self.client.clone(),
            registry: self.registry.clone(),
            clock: self.clock.clone(),
            settings: self.settings.clone(),
            secrets: self.secrets.clone(),
        }
    }

    /// Kills the host at once, as a crash would.
    pub fn crash_controller(&mut self) {
        if let Some(c) = self.controller.take() {
            c.abort();
        }
    }

    /// Creates or updates an object given as JSON (any kind the server serves).
    pub async fn apply(&self, object: &serde_json::Value) -> Result<(), SimulateError> {
        apply_to(&self.client, object).await
    }

    /// Deletes an object, or every object matching a label selector (missing objects are
    /// fine). Returns how many deletions were requested.
    pub async fn delete(&self, r: &scenario::ObjectRef) -> Result<usize, SimulateError> {
        let object = json!({"apiVersion": r.api_version, "kind": r.kind,
                            "metadata": {"name": r.name.clone().unwrap_or_else(|| "-".into()), "namespace": r.namespace}});
        let (api, name, what) = dynamic_api(&self.client, &object).await?;
        let names = match &r.label_selector {
            None => vec![name],
            Some(selector) => api
                .list(&kube::api::ListParams::default().labels(selector))
                .await
                .map_err(kube_err(format!("listing {} with {selector}", r.kind)))?
                .items
                .into_iter()
                .filter_map(|o| o.metadata.name)
                .collect(),
        };
        for name in &names {
            match api.delete(name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(kube_err(format!("deleting {what}"))(e)),
            }
        }
        Ok(names.len())
    }

    /// Replaces the simulated cloud's faults with `f`'s (a trace's `fault` event).
    pub fn set_faults(&self, f: &scenario::FaultSpec) {
        self.cloud.faults().clear();
        inject_faults(&self.cloud, f);
    }

    /// Cordons (`unschedulable`) or uncordons the nodes `target` names; returns how many.
    pub async fn cordon(
        &self,
        target: &scenario::NodeTarget,
        unschedulable: bool,
    ) -> Result<usize, SimulateError> {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.client.clone());
        let names: Vec<String> = match (&target.name, &target.label_selector) {
            (Some(name), _) => vec![name.clone()],
            (None, selector) => nodes
                .list(&kube::api::ListParams::default().labels(selector.as_deref().unwrap_or("")))
                .await
                .map_err(kube_err("listing nodes to cordon"))?
                .items
                .into_iter()
                .filter_map(|n| n.metadata.name)
                .collect(),
        };
        for name in &names {
            let patch = json!({"spec": {"unschedulable": unschedulable}});
            match nodes
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {}
                // A node that went away meanwhile is not an error of the trace.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(kube_err(format!("cordoning node {name}"))(e)),
            }
        }
        Ok(names.len())
    }

    /// Makes the nodes `spec` names unhealthy (see [`joinery_emulator::physics::Physics::fault`]);
    /// returns their names.
    pub async fn node_fault(
        &self,
        spec: &scenario::NodeFaultSpec,
    ) -> Result<Vec<String>, SimulateError> {
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(self.client.clone());
        let mut names: Vec<String> = match (&spec.name, &spec.label_selector) {
            (Some(name), _) => vec![name.clone()],
            (None, selector) => nodes
                .list(&kube::api::ListParams::default().labels(selector.as_deref().unwrap_or("")))
                .await
                .map_err(kube_err("listing nodes to make unhealthy"))?
                .items
                .into_iter()
                .filter_map(|n| n.metadata.name)
                .collect(),
        };
        names.sort();
        names.truncate(spec.count.unwrap_or(usize::MAX));
        let fault = spec.fault().map_err(SimulateError::Step)?;
        let physics = self
            .physics
            .as_ref()
            .ok_or_else(|| SimulateError::Step("the physics is stopped".into()))?;
        for name in &names {
            physics
                .fault(name, fault.clone(), spec.hardware)
                .await
                .map_err(SimulateError::Step)?;
        }
        Ok(names)
    }

    /// Scales a Deployment.
    pub async fn scale(&self, s: &scenario::Scale) -> Result<(), SimulateError> {
        let namespace = s.namespace.clone().unwrap_or_else(|| "default".into());
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), &namespace);
        api.patch(
            &s.name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"replicas": s.replicas}})),
        )
        .await
        .map_err(kube_err(format!(
            "scaling Deployment {namespace}/{}",
            s.name
        )))?;
        Ok(())
    }

    /// Stops everything.
    pub async fn shutdown(mut self) {
        if let Some(c) = self.controller.take() {
            c.shutdown().await;
        }
        if let Some(p) = self.physics.take() {
            p.shutdown().await;
        }
        self.cloud.shutdown().await;
        if let Some(fake) = self.exoscale.take() {
            fake.shutdown().await;
        }
        if let Some(cke) = self.clevercloud.take() {
            cke.operator.shutdown().await;
            cke.pricing.shutdown().await;
        }
        if let Some(capi) = self.clusterapi.take() {
            capi.controllers.shutdown().await;
            capi.management.shutdown().await;
        }
        self.api.shutdown().await;
    }
}

/// Makes the simulated cloud inject `f`'s faults.
fn inject_faults(cloud: &SimCloud, f: &scenario::FaultSpec) {
    for o in &f.insufficient_capacity {
        cloud
            .faults()
            .insufficient_capacity(joinery_emulator::cloud::OfferingKey::new(
                &o.instance_type,
                &o.zone,
                &o.capacity_type,
            ));
    }
    cloud.faults().set_quota(f.quota);
    if let Some(n) = f.fail_after_create {
        cloud.faults().fail_after_create(n);
    }
}

/// Creates or updates an object given as JSON in the cluster of `client` (any kind it
/// serves; an existing object is merge-patched).
async fn apply_to(client: &kube::Client, object: &serde_json::Value) -> Result<(), SimulateError> {
    let (api, name, what) = dynamic_api(client, object).await?;
    let obj: DynamicObject = serde_json::from_value(object.clone())
        .map_err(|e| SimulateError::Plugins(format!("{what}: {e}")))?;
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let mut patch = object.clone();
            if let Some(m) = patch.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                m.remove("resourceVersion");
            }
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(kube_err(format!("updating {what}")))?;
            Ok(())
        }
        Err(e) => Err(kube_err(format!("creating {what}"))(e)),
    }
}

/// The dynamic API of an object's kind (found by discovery), its name, and `<kind> <name>`.
async fn dynamic_api(
    client: &kube::Client,
    object: &serde_json::Value,
) -> Result<(Api<DynamicObject>, String, String), SimulateError> {
    let api_version = object
        .get("apiVersion")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    let kind = object
        .get("kind")
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    let name = object
        .pointer("/metadata/name")
        .and_then(|v| v.as_str())
        .unwrap_or_default()
        .to_string();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let what = format!("{kind} {name}");
    let (resource, caps) = discovery::pinned_kind(client, &gvk)
        .await
        .map_err(kube_err(format!(
            "{what}: unknown kind {api_version}/{kind}"
        )))?;
    let api = match caps.scope {
        Scope::Cluster => Api::all_with(client.clone(), &resource),
        Scope::Namespaced => {
            let ns = object
                .pointer("/metadata/namespace")
                .and_then(|v| v.as_str())
                .unwrap_or("default");
            Api::namespaced_with(client.clone(), ns, &resource)
        }
    };
    Ok((api, name, what))
}
