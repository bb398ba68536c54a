//! `joinery simulate`: one process runs the emulated Kubernetes API, the cluster physics,
//! the simulated cloud (or a fake of a real one: Exoscale, Clever Cloud, a Cluster API
//! management cluster) and the real host with its real wasm plugins, applies a scenario, and
//! reports what happened.
//!
//! [`Simulation::start`] brings the pieces up (also used by tests that need a whole cluster);
//! [`run_scenario`] drives a [`Scenario`] to its end and returns a [`Report`].

pub mod observer;
pub mod plot;
pub mod report;
pub mod scenario;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use joinery_controller::{Controller, ControllerOptions, Settings};
use joinery_core::clock::Clock;
use joinery_runtime::engine::{EngineOptions, PluginEngine};
use joinery_runtime::grants::Grants;
use joinery_runtime::plugin::LoadContext;
use joinery_runtime::registry::PluginRegistry;
use joinery_runtime::services::HostServices;
use joinery_sim::clevercloud::nodegroups::{NodeGroupOperator, NodeGroupOperatorOptions};
use joinery_sim::clevercloud::pricing::PricingFake;
use joinery_sim::cloud::{Catalog, SimCloud, SimCloudOptions, SimInstance};
use joinery_sim::clusterapi::{CapiControllers, CapiOptions};
use joinery_sim::exoscale::{ExoFake, ExoFakeOptions};
use joinery_sim::physics::{Physics, PhysicsOptions};
use joinery_sim::{ApiServer, ApiServerOptions};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::{self, Scope};
use serde_json::json;

pub use observer::{Observation, Observer};
pub use report::Report;
pub use scenario::{
    CleverCloudSpec, ClusterApiSpec, ExoscaleSpec, Expectations, Scenario, ScenarioError,
};

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

/// Default speed-up of simulated time over real time.
pub const DEFAULT_SPEED: f64 = 20.0;

/// What can go wrong while setting up or running a simulation.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    /// The scenario is invalid.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// An emulator component failed to start.
    #[error("emulated cluster: {0}")]
    Sim(#[from] joinery_sim::SimError),
    /// The plugins could not be loaded.
    #[error("plugins: {0}")]
    Plugins(String),
    /// The static cluster could not be written into the emulated API server.
    #[error("cannot preload the static cluster: {0}")]
    Preload(String),
    /// The controllers failed to start.
    #[error("controller: {0}")]
    Controller(#[from] joinery_controller::ControllerError),
    /// A Kubernetes API call failed; `what` names the object.
    #[error("{what}: {source}")]
    Kube {
        /// The object or action.
        what: String,
        /// The API error.
        source: kube::Error,
    },
}

/// Options of a simulation.
#[derive(Debug, Clone)]
pub struct SimulationOptions {
    /// Simulated seconds per real second.
    pub speed: f64,
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
    /// [`ExoFakeOptions::journal`]).
    pub exoscale_journal: Option<PathBuf>,
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
    pub preload: Option<joinery_sim::preload::Preload>,
}

impl Default for SimulationOptions {
    fn default() -> Self {
        SimulationOptions {
            speed: DEFAULT_SPEED,
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
        }
    }
}

/// A running simulated cluster with its cloud, physics and (optionally) the host.
pub struct Simulation {
    /// The shared clock.
    pub clock: Arc<Clock>,
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
}

/// The renderers the simulation grants its secrets to.
const RENDERERS: [&str; 4] = ["template", "k3s", "rke2", "kubeadm"];

/// The secret the `exoscale` plugin reads its API key from in a simulation.
pub const EXOSCALE_SECRET: &str = "exoscale-credentials";

/// Where the `exoscale` plugin finds the fake Exoscale API.
#[derive(Debug, Clone)]
pub struct ExoscaleGrant {
    /// The fake's base URL (`http://127.0.0.1:<port>`): the only address granted.
    pub url: String,
    /// The per-zone endpoint pattern (`http://127.0.0.1:<port>/{zone}/v2`).
    pub endpoint: String,
    /// The cluster's zone.
    pub zone: String,
}

/// The fake Clever Cloud Kubernetes Engine of a simulation.
pub struct CleverCloud {
    /// The NodeGroup operator (its machines are the cloud's instances).
    pub operator: NodeGroupOperator,
    /// The pricing endpoints.
    pub pricing: PricingFake,
}

impl std::fmt::Debug for CleverCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CleverCloud")
            .field("operator", &self.operator)
            .field("pricing", &self.pricing.url())
            .finish()
    }
}

/// The fake Cluster API management cluster of a simulation.
pub struct ClusterApi {
    /// The management cluster's emulated API server (the CRDs and the scenario's
    /// `cloud.clusterapi.manifests` are there).
    pub management: ApiServer,
    /// Client of the management cluster.
    pub client: kube::Client,
    /// The MachineDeployment, MachineSet and Machine controllers (their machines are the
    /// cloud's instances).
    pub controllers: CapiControllers,
    /// The `clusterName` the `clusterapi` plugin is configured with.
    pub cluster_name: String,
}

impl std::fmt::Debug for ClusterApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterApi")
            .field("management", &self.management.url())
            .field("controllers", &self.controllers)
            .finish_non_exhaustive()
    }
}

/// What the `clusterapi` plugin is granted in a simulation.
#[derive(Clone)]
pub struct ClusterApiGrant {
    /// Its `clusterName` setting.
    pub cluster_name: String,
    /// The management cluster (`management` in its grants), where the MachineDeployments live.
    pub management: Option<kube::Client>,
    /// The emulated cluster the host manages (`workload` in its grants).
    pub workload: Option<kube::Client>,
}

/// The Kubernetes access the `clusterapi` plugin is granted in a simulation: the Cluster API
/// objects of the management cluster.
const CLUSTERAPI_KUBERNETES: &str = "[{cluster: management, group: cluster.x-k8s.io, resources: [machinedeployments, machinesets, machines], verbs: [get, list, patch, delete]}]";

/// What the `clevercloud` plugins are granted in a simulation.
#[derive(Clone)]
pub struct CleverCloudGrant {
    /// The pricing fake's base URL (`http://127.0.0.1:<port>`): the only address granted to
    /// `clevercloud-pricing`, and its `endpoint` setting.
    pub pricing_url: String,
    /// The emulated cluster, reached by the plugins' Kubernetes import (the `workload`
    /// cluster of their grants): where the NodeGroups live.
    pub workload: Option<kube::Client>,
    /// The plugin's `quotaBackoffSeconds`: its cache counts real seconds, so a simulation
    /// at speed `s` grants 60 / `s` (at least 1) to keep CKE's one simulated minute.
    pub quota_backoff_seconds: u32,
}

/// The Kubernetes access the `clevercloud` plugin is granted in a simulation: NodeGroups,
/// and Events (for its quota warnings on NodeClaims).
const CLEVERCLOUD_KUBERNETES: &str = "[{cluster: workload, group: api.clever-cloud.com, resources: [nodegroups], verbs: [get, list, create, delete]}, {cluster: workload, group: \"\", resources: [events], verbs: [create]}]";

/// Loads the built-in plugins with grants that let `simcloud` reach exactly `cloud_url`, and
/// every renderer read the `secrets` named (compiled once per digest into the directory
/// [`joinery_runtime::engine::PLUGIN_CACHE_ENV`] names, when it is set). With `exoscale`, the `exoscale` plugin is also
/// granted the fake's loopback address (added to its requested `http`, which names only
/// Exoscale's real hosts) and the credentials secret [`EXOSCALE_SECRET`].
pub fn simulation_registry(
    cloud_url: &str,
    cluster_name: &str,
    secrets: &[String],
    store: Arc<dyn joinery_runtime::services::SecretStore>,
    exoscale: Option<&ExoscaleGrant>,
) -> Result<Arc<PluginRegistry>, SimulateError> {
    simulation_registry_with(
        cloud_url,
        cluster_name,
        secrets,
        store,
        exoscale,
        None,
        None,
    )
}

/// [`simulation_registry`], and with `clevercloud` the grants of a Clever Cloud simulation:
/// the `clevercloud` plugin may use NodeGroups (get, list, create, delete: what it asks for)
/// and create Events in the workload cluster, reached through `workload`, and reads a new
/// NodeGroup every 50 ms (real time: CKE's simulated second passes in a fraction of one), with config `{clusterName}`; the
/// `clevercloud-pricing` plugin may reach the pricing fake (its loopback address added to the
/// plugin's requested `http`, which names only Clever Cloud's real API), with config
/// `{endpoint: <the fake's URL>}`. With `clusterapi`, the `clusterapi` plugin may get, list,
/// patch and delete MachineDeployments, MachineSets and Machines in the `management`
/// cluster, with config `{clusterName, pollMillis: 50}` (it polls for its Machine in real
/// time: 50 ms keeps a launch from taking simulated minutes); the host's Kubernetes import then reaches the
/// `management` and `workload` clusters through the grant's clients. Grants for a plugin
/// that is not built in are harmless.
pub fn simulation_registry_with(
    cloud_url: &str,
    cluster_name: &str,
    secrets: &[String],
    store: Arc<dyn joinery_runtime::services::SecretStore>,
    exoscale: Option<&ExoscaleGrant>,
    clevercloud: Option<&CleverCloudGrant>,
    clusterapi: Option<&ClusterApiGrant>,
) -> Result<Arc<PluginRegistry>, SimulateError> {
    let mut grants_yaml = format!(
        "plugins:\n  simcloud:\n    http: [{url:?}]\n    config: {{endpoint: {url:?}, clusterName: {cluster_name:?}}}\n",
        url = cloud_url
    );
    let mut builtins = joinery_builtin_plugins::builtin_manifests();
    if let Some(grant) = exoscale {
        grants_yaml.push_str(&format!(
            "  exoscale:\n    http: [{url:?}]\n    secrets: [{EXOSCALE_SECRET}]\n    config: {{endpoint: {endpoint:?}, zone: {zone:?}, clusterName: {cluster_name:?}, operationTimeoutSeconds: 20}}\n",
            url = grant.url,
            endpoint = grant.endpoint,
            zone = grant.zone,
        ));
        let loopback = joinery_runtime::grants::HttpPattern::parse("http://127.0.0.1:*")
            .map_err(|e| SimulateError::Plugins(e.to_string()))?;
        for (manifest, _) in builtins.iter_mut().filter(|(m, _)| m.name == "exoscale") {
            manifest.capabilities.http.push(loopback.clone());
        }
    }
    if let Some(grant) = clevercloud {
        grants_yaml.push_str(&format!(
            "  clevercloud:\n    kubernetes: {CLEVERCLOUD_KUBERNETES}\n    config: {{clusterName: {cluster_name:?}, acceptancePollMillis: 50, quotaBackoffSeconds: {backoff}}}\n  clevercloud-pricing:\n    http: [{url:?}]\n    config: {{endpoint: {url:?}}}\n",
            url = grant.pricing_url,
            backoff = grant.quota_backoff_seconds,
        ));
        let loopback = joinery_runtime::grants::HttpPattern::parse("http://127.0.0.1:*")
            .map_err(|e| SimulateError::Plugins(e.to_string()))?;
        for (manifest, _) in builtins
            .iter_mut()
            .filter(|(m, _)| m.name == "clevercloud-pricing")
        {
            manifest.capabilities.http.push(loopback.clone());
        }
    }
    if let Some(grant) = clusterapi {
        grants_yaml.push_str(&format!(
            "  clusterapi:\n    kubernetes: {CLUSTERAPI_KUBERNETES}\n    config: {{clusterName: {name:?}, pollMillis: 50}}\n",
            name = grant.cluster_name,
        ));
    }
    if !secrets.is_empty() {
        for renderer in RENDERERS {
            grants_yaml.push_str(&format!("  {renderer}:\n    secrets: {secrets:?}\n"));
        }
    }
    let grants = Grants::parse(&grants_yaml, "simulation grants")
        .map_err(|e| SimulateError::Plugins(e.to_string()))?;
    let engine = PluginEngine::new(&EngineOptions {
        cache_dir: EngineOptions::cache_dir_from_env(),
        ..Default::default()
    })
    .map_err(SimulateError::Plugins)?;
    let mut services = HostServices {
        secrets: store,
        ..HostServices::default()
    };
    let workload = clevercloud
        .and_then(|g| g.workload.clone())
        .or_else(|| clusterapi.and_then(|g| g.workload.clone()));
    let management = clusterapi.and_then(|g| g.management.clone());
    if workload.is_some() || management.is_some() {
        let mut clusters = joinery_runtime::services::KubeClusters::default();
        if let Some(workload) = workload {
            clusters = clusters.with("workload", workload);
        }
        if let Some(management) = management {
            clusters = clusters.with("management", management);
        }
        services.kube = Arc::new(clusters);
    }
    let cx = LoadContext::new(engine, grants, services).map_err(SimulateError::Plugins)?;
    let registry = PluginRegistry::load(cx, Vec::new(), builtins)
        .map_err(|e| SimulateError::Plugins(e.to_string()))?;
    Ok(Arc::new(registry))
}

fn kube_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> SimulateError {
    let what = what.into();
    move |source| SimulateError::Kube { what, source }
}

impl Simulation {
    /// Starts the emulated cluster (with the karpenter.sh and simcloud CRDs), the simulated
    /// cloud, the physics and, if asked, the host.
    pub async fn start(options: SimulationOptions) -> Result<Simulation, SimulateError> {
        let clock = Arc::new(Clock::with_speed(options.speed));
        let api = ApiServer::start(ApiServerOptions {
            clock: clock.clone(),
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
        for crd in all {
            let name = crd.metadata.name.clone().unwrap_or_default();
            crds.create(&PostParams::default(), &crd)
                .await
                .map_err(kube_err(format!("creating CRD {name}")))?;
        }
        if let Some(shape) = options.preload {
            joinery_sim::preload::preload(api.store(), shape)
                .await
                .map_err(|e| SimulateError::Preload(e.message))?;
        }
        let cloud = SimCloud::start(SimCloudOptions {
            catalog: options.catalog,
            boot_delay: options.boot_delay,
            clock: clock.clone(),
            ..Default::default()
        })
        .await?;
        if let Some(f) = &options.faults {
            for o in &f.insufficient_capacity {
                cloud
                    .faults()
                    .insufficient_capacity(joinery_sim::cloud::OfferingKey::new(
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
                )
                .await?,
            ),
            None => None,
        };
        let clevercloud = match &options.clevercloud {
            Some(spec) => Some(start_clevercloud(spec, &client, clock.clone()).await?),
            None => None,
        };
        let clusterapi = match &options.clusterapi {
            Some(spec) => {
                Some(start_clusterapi(spec, &client, clock.clone(), &settings.cluster_name).await?)
            }
            None => None,
        };
        let events = match (&exoscale, &clevercloud, &clusterapi) {
            (Some(fake), _, _) => (fake.subscribe(), fake.boot_delay()),
            // Each machine brings its own boot delay.
            (None, Some(cke), _) => (cke.operator.subscribe(), options.boot_delay),
            (None, None, Some(capi)) => (capi.controllers.subscribe(), options.boot_delay),
            (None, None, None) => (cloud.subscribe(), cloud.boot_delay()),
        };
        let physics = Physics::start(
            PhysicsOptions::new(client.clone(), clock.clone()).with_cloud(events.0, events.1),
        );
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
                    ("api-key", joinery_sim::exoscale::DEFAULT_API_KEY.as_bytes()),
                    (
                        "api-secret",
                        joinery_sim::exoscale::DEFAULT_API_SECRET.as_bytes(),
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
        let cke_grant = clevercloud.as_ref().map(|cke| CleverCloudGrant {
            pricing_url: cke.pricing.url().to_string(),
            workload: Some(client.clone()),
            quota_backoff_seconds: (60.0 / options.speed.max(1.0)).round().max(1.0) as u32,
        });
        let capi_grant = clusterapi.as_ref().map(|capi| ClusterApiGrant {
            cluster_name: capi.cluster_name.clone(),
            management: Some(capi.client.clone()),
            workload: Some(client.clone()),
        });
        let registry = simulation_registry_with(
            cloud.url(),
            &settings.cluster_name,
            &names,
            secrets.clone(),
            grant.as_ref(),
            cke_grant.as_ref(),
            capi_grant.as_ref(),
        )?;
        let mut sim = Simulation {
            clock,
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
    /// [`joinery_sim::physics::LagMeter`]); `None` once the physics is stopped.
    pub fn lag(&self) -> Option<&Arc<joinery_sim::physics::LagMeter>> {
        self.physics.as_ref().map(Physics::lag)
    }

    /// The lag so far, judged against [`LAG_TOLERANCE_SECONDS`].
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

const MIB: u64 = 1 << 20;

/// Starts the fake Exoscale API with a scenario's zones, instance types, templates and faults.
async fn start_exoscale(
    spec: &ExoscaleSpec,
    clock: Arc<Clock>,
    boot_delay: Duration,
    journal: Option<PathBuf>,
) -> Result<ExoFake, SimulateError> {
    use joinery_sim::exoscale::{
        ErrorShape, ExoInstanceType, ExoTemplate, GIB, Visibility, default_instance_types,
        default_templates, stable_uuid,
    };
    let defaults = ExoFakeOptions::default();
    let zones = spec
        .zones
        .clone()
        .filter(|z| !z.is_empty())
        .unwrap_or(defaults.zones.clone());
    let instance_types = match &spec.instance_types {
        None => default_instance_types(&zones),
        Some(types) => types
            .iter()
            .map(|t| ExoInstanceType {
                id: stable_uuid(&format!("instance-type/{}.{}", t.family, t.size)),
                family: t.family.clone(),
                size: t.size.clone(),
                cpus: t.cpus,
                gpus: t.gpus,
                memory: t.memory_mib * MIB,
                authorized: t.authorized.unwrap_or(true),
                zones: t.zones.clone().unwrap_or_else(|| zones.clone()),
            })
            .collect(),
    };
    let mut templates = default_templates(&zones);
    for t in &spec.templates {
        for zone in t.zones.clone().unwrap_or_else(|| zones.clone()) {
            let build = t.build.clone().unwrap_or_else(|| "1".into());
            templates.push(ExoTemplate {
                id: stable_uuid(&format!("template/{zone}/{}/{build}", t.name)),
                zone,
                name: t.name.clone(),
                visibility: Visibility::Private,
                build,
                version: String::new(),
                size: t.size_gib.unwrap_or(10) * GIB,
                created_at: "2026-01-01T00:00:00Z".into(),
                family: "other".into(),
                default_user: "root".into(),
            });
        }
    }
    let faults = joinery_sim::exoscale::ExoFaults::default();
    if let Some(f) = &spec.faults {
        let retry_after = scenario::duration_field(
            f.retry_after.as_deref(),
            "cloud.exoscale.faults.retryAfter",
            Duration::from_secs(1),
            "scenario",
        )?;
        if let Some(rate) = f.error_rate {
            faults.set_default_error_rate(rate);
        }
        faults.set_throttle_rate(f.throttle_rate.unwrap_or(0.0), retry_after);
        if let Some(n) = f.fail_after_create {
            faults.fail_after_create(n);
        }
        if let Some(n) = f.fail_attach {
            faults.fail_attach(n);
        }
        faults.set_instance_quota(f.instance_quota);
        for o in &f.insufficient_capacity {
            faults.insufficient_capacity(&o.instance_type, &o.zone);
        }
        if f.problem_details {
            faults.set_error_shape(ErrorShape::Problem);
        }
    }
    let options = ExoFakeOptions {
        zones,
        instance_types,
        templates,
        clock,
        boot_delay,
        anti_affinity_ceiling: spec
            .anti_affinity_ceiling
            .unwrap_or(defaults.anti_affinity_ceiling),
        // The plugin waits in real time between polls; operations that end on their first
        // poll keep a create from taking tens of simulated seconds at high speed-ups.
        operation_polls: 0,
        faults,
        journal,
        ..defaults
    };
    Ok(ExoFake::start(options).await?)
}

/// Installs the NodeGroup CRD, starts the fake CKE operator on the simulation's client and
/// clock, and the pricing endpoints, with a scenario's settings.
async fn start_clevercloud(
    spec: &CleverCloudSpec,
    client: &kube::Client,
    clock: Arc<Clock>,
) -> Result<CleverCloud, SimulateError> {
    let (settings, pricing) = spec.settings("scenario")?;
    joinery_sim::clevercloud::nodegroups::install_crd(client)
        .await
        .map_err(kube_err(format!(
            "creating CRD {}",
            joinery_sim::clevercloud::nodegroups::CRD_NAME
        )))?;
    let operator = NodeGroupOperator::start(NodeGroupOperatorOptions {
        client: client.clone(),
        clock,
        settings,
    });
    let pricing = PricingFake::start(pricing).await?;
    Ok(CleverCloud { operator, pricing })
}

/// Starts the management cluster's API server on the simulation's clock, installs the
/// Cluster API CRDs there and starts the controllers with a scenario's settings (the
/// scenario's management manifests are applied later, once the physics listens).
async fn start_clusterapi(
    spec: &ClusterApiSpec,
    workload: &kube::Client,
    clock: Arc<Clock>,
    host_cluster_name: &str,
) -> Result<ClusterApi, SimulateError> {
    let settings = spec.settings("scenario")?;
    let management = ApiServer::start(ApiServerOptions {
        clock: clock.clone(),
        ..Default::default()
    })
    .await?;
    let client = management.client()?;
    joinery_sim::clusterapi::install_crds(&client)
        .await
        .map_err(kube_err(
            "creating the Cluster API CRDs in the management cluster",
        ))?;
    let controllers = CapiControllers::start(CapiOptions {
        management: client.clone(),
        workload: workload.clone(),
        clock,
        settings,
    });
    let cluster_name = spec
        .cluster_name
        .clone()
        .unwrap_or_else(|| host_cluster_name.to_string());
    tracing::info!(url = %management.url(), "fake Cluster API management cluster started");
    Ok(ClusterApi {
        management,
        client,
        controllers,
        cluster_name,
    })
}

/// Adds a scenario's security groups, networks, groups, keys and pre-existing instances.
fn seed_exoscale(
    fake: &ExoFake,
    spec: &ExoscaleSpec,
    cluster_name: &str,
) -> Result<(), SimulateError> {
    for name in &spec.security_groups {
        fake.add_security_group(name);
    }
    for n in &spec.private_networks {
        let labels: Vec<(&str, &str)> = n
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        fake.add_private_network(&n.zone, &n.name, &labels);
    }
    for name in &spec.anti_affinity_groups {
        fake.add_anti_affinity_group(name);
    }
    for name in &spec.ssh_keys {
        fake.add_ssh_key(name);
    }
    for (i, seed) in spec.instances.iter().enumerate() {
        let mut labels: Vec<(&str, &str)> = seed
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        if seed.managed {
            labels.push(("karpenter-sh_managed-by", cluster_name));
        }
        let kind = seed.instance_type.as_deref().unwrap_or("standard.small");
        fake.add_instance(&seed.zone, kind, &labels).map_err(|e| {
            SimulateError::Scenario(ScenarioError {
                origin: "scenario".into(),
                message: format!("cloud.exoscale.instances[{i}]: {e}"),
            })
        })?;
    }
    Ok(())
}

/// The cloud's instances at the end of a run.
fn cloud_report(sim: &Simulation, provider: &str) -> report::CloudReport {
    use joinery_sim::cloud::InstanceState;
    let instances: Vec<report::CloudInstance> = sim
        .cloud_instances()
        .into_iter()
        .filter(|i| provider == "exoscale" || i.state != InstanceState::Terminated)
        .map(|i| report::CloudInstance {
            provider_id: i.provider_id,
            instance_type: i.instance_type,
            zone: i.zone,
            state: match i.state {
                InstanceState::Pending => "pending",
                InstanceState::Running => "running",
                _ => "terminated",
            }
            .into(),
            tags: i.tags,
        })
        .collect();
    let counters = sim.clevercloud.as_ref().map(|cke| cke.operator.counters());
    let capi = sim
        .clusterapi
        .as_ref()
        .map(|capi| (capi.controllers.counters(), capi.controllers.machines()));
    report::CloudReport {
        provider: provider.to_string(),
        instances_created: sim
            .exoscale
            .as_ref()
            .map(ExoFake::created_count)
            .or(counters.map(|c| c.machines as usize))
            .or(capi.as_ref().map(|(c, _)| c.machines_provisioned as usize)),
        instances_at_end: instances.iter().filter(|i| i.state != "terminated").count(),
        instances,
        node_groups: counters.map(|c| report::NodeGroupTotals {
            accepted: c.accepted,
            rejected: c.rejected,
            vanished: c.vanished,
        }),
        machines: capi.as_ref().map(|(_, machines)| {
            machines
                .iter()
                .map(|m| report::MachineReport {
                    namespace: m.namespace.clone(),
                    name: m.name.clone(),
                    machine_deployment: m.deployment.clone(),
                    provider_id: m.provider_id.clone(),
                    phase: m.phase.clone(),
                    node: m.node.clone(),
                })
                .collect()
        }),
        machine_totals: capi.as_ref().map(|(c, machines)| report::MachineTotals {
            created: c.machines_created,
            provisioned: c.machines_provisioned,
            running: c.machines_running,
            failed: c.machines_failed,
            deleted: c.machines_deleted,
            at_end: machines.len(),
        }),
    }
}

/// Every NodeClass of the NodeClass CRDs installed, with its conditions.
async fn node_class_report(sim: &Simulation) -> Vec<report::NodeClassReport> {
    let mut out = Vec::new();
    for (_, text) in NODECLASS_CRDS {
        let Ok(crd) = serde_norway::from_str::<CustomResourceDefinition>(text) else {
            continue;
        };
        let Some(version) = crd.spec.versions.first() else {
            continue;
        };
        let gvk =
            kube::api::GroupVersionKind::gvk(&crd.spec.group, &version.name, &crd.spec.names.kind);
        let resource = kube::api::ApiResource::from_gvk(&gvk);
        let api: Api<DynamicObject> = Api::all_with(sim.client.clone(), &resource);
        let Ok(list) = api.list(&kube::api::ListParams::default()).await else {
            continue;
        };
        for object in list.items {
            let conditions: Vec<report::ConditionReport> = object
                .data
                .pointer("/status/conditions")
                .and_then(|c| c.as_array())
                .into_iter()
                .flatten()
                .map(|c| {
                    let field = |k: &str| {
                        c.get(k)
                            .and_then(|v| v.as_str())
                            .unwrap_or_default()
                            .to_string()
                    };
                    report::ConditionReport {
                        type_: field("type"),
                        status: field("status"),
                        reason: field("reason"),
                        message: field("message"),
                    }
                })
                .collect();
            out.push(report::NodeClassReport {
                kind: crd.spec.names.kind.clone(),
                name: object.metadata.name.clone().unwrap_or_default(),
                ready: conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True"),
                conditions,
            });
        }
    }
    out
}

/// Checks expectations against an observation; each failure names the expectation.
pub fn unmet(expect: &Expectations, seen: &Observation) -> Vec<String> {
    let mut out = Vec::new();
    let mut check = |ok: bool, text: String| {
        if !ok {
            out.push(text);
        }
    };
    if let Some(n) = expect.pods_running {
        check(
            seen.pods.running == n,
            format!("podsRunning: wanted {n}, saw {}", seen.pods.running),
        );
    }
    if let Some(n) = expect.pods_pending {
        check(
            seen.pods.pending == n,
            format!("podsPending: wanted {n}, saw {}", seen.pods.pending),
        );
    }
    if let Some(n) = expect.pods_unschedulable {
        check(
            seen.pods.unschedulable == n,
            format!(
                "podsUnschedulable: wanted {n}, saw {}",
                seen.pods.unschedulable
            ),
        );
    }
    if expect.all_pods_running == Some(true) {
        check(
            seen.pods.total > 0 && seen.pods.pending == 0,
            format!(
                "allPodsRunning: {} of {} running",
                seen.pods.running, seen.pods.total
            ),
        );
    }
    if let Some(text) = &expect.all_pods_running_within {
        // Checked when the scenario was parsed.
        let within = joinery_api::duration::parse_go_duration(text)
            .unwrap_or_default()
            .as_secs_f64();
        let all_running = seen.pods.total > 0 && seen.pods.pending == 0;
        match seen.all_pods_running.filter(|_| all_running) {
            Some(at) => check(
                at <= within,
                format!(
                    "allPodsRunningWithin: wanted every pod running by {within:.0} s, they were at {at:.1} s"
                ),
            ),
            None => check(
                false,
                format!(
                    "allPodsRunningWithin: wanted every pod running by {within:.0} s; {} of {} running at {:.1} s",
                    seen.pods.running, seen.pods.total, seen.at
                ),
            ),
        }
    }
    if let Some(n) = expect.nodes {
        check(
            seen.nodes == n,
            format!("nodes: wanted {n}, saw {}", seen.nodes),
        );
    }
    if let Some(n) = expect.node_claims {
        check(
            seen.node_claims == n,
            format!("nodeClaims: wanted {n}, saw {}", seen.node_claims),
        );
    }
    if let Some(n) = expect.nodes_at_most {
        check(
            seen.nodes <= n,
            format!("nodesAtMost: wanted ≤ {n}, saw {}", seen.nodes),
        );
    }
    if let Some(n) = expect.peak_nodes_at_most {
        check(
            seen.peak_nodes <= n,
            format!(
                "peakNodesAtMost: wanted ≤ {n}, peak was {}",
                seen.peak_nodes
            ),
        );
    }
    if let Some(n) = expect.node_claims_created_at_most {
        check(
            seen.claims.len() <= n,
            format!(
                "nodeClaimsCreatedAtMost: wanted ≤ {n}, saw {}",
                seen.claims.len()
            ),
        );
    }
    if let Some(n) = expect.node_claims_created_at_least {
        check(
            seen.claims.len() >= n,
            format!(
                "nodeClaimsCreatedAtLeast: wanted ≥ {n}, saw {}",
                seen.claims.len()
            ),
        );
    }
    if let Some(n) = expect.zones_at_least {
        let zones = seen.live_zones();
        check(
            zones.len() >= n,
            format!("zonesAtLeast: wanted ≥ {n}, live nodes are in {zones:?}"),
        );
    }
    if let Some(types) = &expect.instance_types {
        let used = seen.instance_types();
        let bad: Vec<&String> = used.iter().filter(|t| !types.contains(t)).collect();
        check(
            bad.is_empty(),
            format!("instanceTypes: wanted only {types:?}, launched {used:?}"),
        );
    }
    if let Some(n) = expect.cloud_instances {
        check(
            seen.cloud_instances == n,
            format!(
                "cloudInstances: wanted {n}, the cloud has {}",
                seen.cloud_instances
            ),
        );
    }
    if let Some(reasons) = &expect.event_reasons {
        let missing: Vec<&String> = reasons
            .iter()
            .filter(|r| !seen.event_reasons.contains(*r))
            .collect();
        check(
            missing.is_empty(),
            format!("eventReasons: no Event with reason {missing:?} was recorded"),
        );
    }
    if let Some(max) = expect.cost_per_hour_at_most {
        check(
            seen.cost_per_hour <= max + 1e-9,
            format!(
                "costPerHourAtMost: wanted ≤ {max}, cost is {:.4}/h",
                seen.cost_per_hour
            ),
        );
    }
    out
}

/// How often the observer samples the cluster (simulated).
const SAMPLE_EVERY: Duration = Duration::from_millis(500);

/// How late (simulated seconds, 95th percentile of every lag series) a run may act on its
/// clock and still count as honouring its speed: Karpenter's default batch idle window is
/// one second, the physics' pod start one second and node readiness two. Beyond it the run
/// warns.
pub const LAG_TOLERANCE_SECONDS: f64 = 1.0;

/// Beyond this lag (simulated seconds, 95th percentile of a series) a run is refused: it
/// fails, naming the speed and the lag, with a speed to use instead. Five seconds late, batch
/// windows, pod starts and node readiness all happen at other moments than a real cluster's.
pub const LAG_REFUSAL_SECONDS: f64 = 5.0;

/// Fewer samples than this do not make a percentile worth judging.
const LAG_MIN_SAMPLES: u64 = 20;

/// Judges lag series against [`LAG_TOLERANCE_SECONDS`] and [`LAG_REFUSAL_SECONDS`].
pub fn judge_lag(snapshot: joinery_sim::physics::LagSnapshot, speed: f64) -> report::LagReport {
    let judged = || {
        snapshot
            .series
            .iter()
            .filter(|s| s.count >= LAG_MIN_SAMPLES)
    };
    let worst = judged().max_by(|a, b| a.p95_seconds.total_cmp(&b.p95_seconds));
    let p95 = worst.map_or(0.0, |s| s.p95_seconds);
    report::LagReport {
        speed,
        tolerance_seconds: LAG_TOLERANCE_SECONDS,
        refusal_seconds: LAG_REFUSAL_SECONDS,
        honoured: p95 <= LAG_TOLERANCE_SECONDS,
        refused: p95 > LAG_REFUSAL_SECONDS,
        worst: worst.map(|s| s.name.clone()),
        series: snapshot.series.clone(),
    }
}

/// How [`run_scenario_with`] runs a scenario.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Simulated seconds per real second.
    pub speed: f64,
    /// Print the timeline as it happens.
    pub echo: bool,
    /// See [`SimulationOptions::exoscale_journal`] (Exoscale scenarios only).
    pub exoscale_journal: Option<PathBuf>,
}

/// Runs a scenario to its end. `echo` prints the timeline as it happens.
pub async fn run_scenario(
    scenario: &Scenario,
    speed: f64,
    echo: bool,
) -> Result<Report, SimulateError> {
    run_scenario_with(
        scenario,
        RunOptions {
            speed,
            echo,
            exoscale_journal: None,
        },
    )
    .await
}

/// [`run_scenario`] with every option.
pub async fn run_scenario_with(
    scenario: &Scenario,
    run: RunOptions,
) -> Result<Report, SimulateError> {
    let RunOptions {
        speed,
        echo,
        exoscale_journal,
    } = run;
    let origin = scenario.name.clone();
    let settings = Settings::from_lookup(|k| {
        scenario
            .settings
            .get(k)
            .cloned()
            .or_else(|| std::env::var(k).ok())
    })
    .map_err(|e| ScenarioError {
        origin: origin.clone(),
        message: format!("settings: {e}"),
    })?;
    let boot_delay = scenario::duration_field(
        scenario.cloud.boot_delay.as_deref(),
        "cloud.bootDelay",
        Duration::from_secs(30),
        &origin,
    )?;
    let options = SimulationOptions {
        speed,
        catalog: scenario.cloud.catalog.clone().unwrap_or_default(),
        boot_delay,
        settings,
        // Started below, once the clock reads `startAt`.
        start_controller: false,
        faults: scenario.cloud.faults.clone(),
        secrets: scenario.secrets.clone(),
        exoscale: (scenario.cloud.provider() == "exoscale")
            .then(|| scenario.cloud.exoscale.clone().unwrap_or_default()),
        exoscale_journal,
        clevercloud: (scenario.cloud.provider() == "clevercloud")
            .then(|| scenario.cloud.clevercloud.clone().unwrap_or_default()),
        clusterapi: (scenario.cloud.provider() == "clusterapi")
            .then(|| scenario.cloud.clusterapi.clone().unwrap_or_default()),
        preload: None,
    };
    let wall = std::time::Instant::now();
    let start_at = scenario.start_at()?;
    let mut sim = Simulation::start(options).await?;
    if let Some(at) = start_at {
        // The scenario's timeline starts now: it reads `startAt` here. Before the host starts:
        // a controller that read the clock before a rebase into the past would wait for the
        // time it read to come again (the disruption loop polled once and never again).
        sim.clock.rebase(at);
    }
    sim.start_controller().await?;
    let mut observer = Observer::new(sim.client.clone(), sim.clock.clone(), echo);
    if scenario.expects_events() {
        observer.record_events();
    }
    // Setting up (compiling the plugins, creating the CRDs) is not the scenario's lag.
    if let Some(lag) = sim.lag() {
        lag.reset();
    }
    let mut failures = Vec::new();
    let deadline = scenario.timeout();
    let result = drive(&sim, scenario, &mut observer, &mut failures, deadline).await;
    let _ = observer.sample(|| sim.cloud_instances()).await;
    if let Err(e) = result {
        failures.push(e.to_string());
    }
    if let Some(expect) = &scenario.expect {
        for f in unmet(expect, observer.observation()) {
            failures.push(format!("final expectation {f}"));
        }
    }
    let lag = sim.lag_report();
    if let Some(refusal) = lag.refusal() {
        failures.push(refusal);
    }
    let pending = observer.pending_pods().await.unwrap_or_default();
    let mut report = Report::new(
        scenario,
        observer.observation(),
        pending,
        &observer.timeline,
        failures,
        observer.now(),
        wall.elapsed().as_secs_f64(),
    );
    report.lag = lag;
    report.cloud = cloud_report(&sim, scenario.cloud.provider());
    report.node_classes = node_class_report(&sim).await;
    // Its watches end first, so the API server's shutdown does not cut them mid-stream.
    drop(observer);
    sim.shutdown().await;
    Ok(report)
}

async fn drive(
    sim: &Simulation,
    scenario: &Scenario,
    observer: &mut Observer,
    failures: &mut Vec<String>,
    deadline: Duration,
) -> Result<(), SimulateError> {
    let origin = scenario.name.clone();
    for m in &scenario.manifests {
        sim.apply(m).await?;
    }
    observer.note(format!("applied {} manifests", scenario.manifests.len()));
    for (i, step) in scenario.steps.iter().enumerate() {
        let label = step.name.clone().unwrap_or_else(|| format!("steps[{i}]"));
        if let Some(at) = &step.at {
            let at = scenario::duration_field(
                Some(at),
                &format!("steps[{i}].at"),
                Duration::ZERO,
                &origin,
            )?;
            while observer.now() < at.as_secs_f64() {
                sample_pause(sim, observer).await;
            }
        }
        for m in &step.apply {
            sim.apply(m).await?;
        }
        for r in &step.delete {
            let count = sim.delete(r).await?;
            let target = r
                .name
                .clone()
                .or_else(|| r.label_selector.clone().map(|s| format!("[{s}]")))
                .unwrap_or_default();
            observer.note(format!("{label}: deleted {count} {} {target}", r.kind));
        }
        if let Some(s) = &step.scale {
            sim.scale(s).await?;
            observer.note(format!("{label}: scaled {} to {}", s.name, s.replicas));
        } else {
            observer.note(format!("{label}: started"));
        }
        if let Some(wait) = &step.wait {
            let wait = scenario::duration_field(
                Some(wait),
                &format!("steps[{i}].wait"),
                Duration::ZERO,
                &origin,
            )?;
            let until = observer.now() + wait.as_secs_f64();
            while observer.now() < until {
                sample_pause(sim, observer).await;
            }
        }
        if let Some(wait) = &step.wait_for {
            let limit = scenario::duration_field(
                step.timeout.as_deref(),
                &format!("steps[{i}].timeout"),
                Duration::from_secs(900),
                &origin,
            )?;
            let started = observer.now();
            loop {
                sample_pause(sim, observer).await;
                let left = unmet(wait, observer.observation());
                if left.is_empty() {
                    observer.note(format!("{label}: reached"));
                    break;
                }
                let now = observer.now();
                if now - started > limit.as_secs_f64() || now > deadline.as_secs_f64() {
                    failures.push(format!(
                        "{label}: waitFor not reached within {}s: {}",
                        limit.as_secs(),
                        left.join("; ")
                    ));
                    return Ok(());
                }
            }
        }
        if let Some(expect) = &step.expect {
            for f in unmet(expect, observer.observation()) {
                failures.push(format!("{label}: expectation {f}"));
            }
        }
    }
    Ok(())
}

async fn sample_pause(sim: &Simulation, observer: &mut Observer) {
    tokio::time::sleep(sim.clock.to_real(SAMPLE_EVERY)).await;
    if let Err(e) = observer.sample(|| sim.cloud_instances()).await {
        tracing::warn!(error = %e, "sampling the cluster failed");
    }
    if !observer.lag_noted {
        let lag = sim.lag_report();
        if !lag.honoured {
            observer.lag_noted = true;
            let worst = lag
                .worst
                .as_deref()
                .and_then(|w| lag.series.iter().find(|s| s.name == w));
            if let Some(worst) = worst {
                observer.note(format!(
                    "WARNING: falling behind the clock ({} p95 {:.2} s > {} s): --speed {} is too fast for this machine",
                    worst.name, worst.p95_seconds, lag.tolerance_seconds, lag.speed
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use joinery_runtime::grants::{KubeAccess, Verb};

    fn series(name: &str, count: u64, p95: f64) -> joinery_sim::physics::LagSeries {
        joinery_sim::physics::LagSeries {
            name: name.into(),
            count,
            mean_seconds: p95 / 2.0,
            p50_seconds: p95 / 2.0,
            p95_seconds: p95,
            p99_seconds: p95,
            max_seconds: p95 * 2.0,
        }
    }

    #[test]
    fn lag_is_judged_by_the_worst_95th_percentile_warned_then_refused() {
        let snapshot = |p95: f64| joinery_sim::physics::LagSnapshot {
            series: vec![
                series("clock", 500, 0.05),
                series("scheduler", 300, p95),
                series("kubelets", 3, 50.0),
            ],
        };
        // Too few samples to judge: the kubelets' series does not count.
        let fine = judge_lag(snapshot(0.4), 20.0);
        assert!(fine.honoured && !fine.refused, "{fine:?}");
        assert_eq!(
            (fine.refusal(), fine.warning(), fine.suggested_speed()),
            (None, None, None)
        );
        let late = judge_lag(snapshot(2.0), 20.0);
        assert!(!late.honoured && !late.refused);
        assert_eq!(late.worst.as_deref(), Some("scheduler"));
        assert_eq!(late.suggested_speed(), Some(10.0));
        let warning = late.warning().unwrap();
        assert!(
            warning.contains("--speed 20")
                && warning.contains("scheduler p95 2.00 s")
                && warning.contains("--speed 10 or lower"),
            "{warning}"
        );
        assert!(late.refusal().is_none());
        let hopeless = judge_lag(snapshot(24.0), 60.0);
        assert!(hopeless.refused);
        let refusal = hopeless.refusal().unwrap();
        assert!(
            refusal.starts_with("speed: refused, --speed 60")
                && refusal.contains("--speed 20 or lower"),
            "{refusal}"
        );
        assert!(hopeless.warning().is_none());
        assert!(
            hopeless.line().contains("speed 60 refused"),
            "{}",
            hopeless.line()
        );
    }

    #[test]
    fn time_to_running_is_checked_against_when_every_pod_ran() {
        let expect = Expectations {
            all_pods_running_within: Some("2m".into()),
            ..Default::default()
        };
        let mut seen = Observation {
            at: 90.0,
            pods: observer::PodCounts {
                total: 10,
                running: 4,
                pending: 6,
                unschedulable: 6,
            },
            ..Default::default()
        };
        let unmet_now = unmet(&expect, &seen);
        assert!(
            unmet_now.len() == 1 && unmet_now[0].contains("4 of 10 running"),
            "{unmet_now:?}"
        );
        seen.pods = observer::PodCounts {
            total: 10,
            running: 10,
            pending: 0,
            unschedulable: 0,
        };
        seen.all_pods_running = Some(118.0);
        assert!(unmet(&expect, &seen).is_empty());
        seen.all_pods_running = Some(121.5);
        assert!(unmet(&expect, &seen)[0].contains("they were at 121.5 s"));
        assert!(
            Scenario::parse("expect: {allPodsRunningWithin: soon}\n", "x.yaml")
                .unwrap_err()
                .to_string()
                .contains("expect.allPodsRunningWithin")
        );
    }

    #[test]
    fn unschedulable_pods_are_counted_apart_from_pending_ones() {
        let expect = Expectations {
            pods_unschedulable: Some(6),
            ..Default::default()
        };
        let mut seen = Observation {
            pods: observer::PodCounts {
                total: 6,
                running: 0,
                pending: 6,
                unschedulable: 3,
            },
            ..Default::default()
        };
        assert_eq!(
            unmet(&expect, &seen),
            vec!["podsUnschedulable: wanted 6, saw 3".to_string()]
        );
        seen.pods.unschedulable = 6;
        assert!(unmet(&expect, &seen).is_empty());
        let parsed = Scenario::parse(
            "steps:\n  - name: marked\n    waitFor: {podsUnschedulable: 2}\n",
            "x.yaml",
        )
        .unwrap();
        assert_eq!(
            parsed.steps[0]
                .wait_for
                .as_ref()
                .and_then(|w| w.pods_unschedulable),
            Some(2)
        );
    }

    #[test]
    fn event_reason_expectations_name_the_missing_reasons() {
        let expect = Expectations {
            event_reasons: Some(vec!["NodeGroupQuotaExceeded".into(), "Nominated".into()]),
            ..Default::default()
        };
        let mut seen = Observation::default();
        seen.event_reasons.insert("Nominated".into());
        let unmet_now = unmet(&expect, &seen);
        assert_eq!(unmet_now.len(), 1);
        assert!(
            unmet_now[0].contains("NodeGroupQuotaExceeded")
                && !unmet_now[0].contains("Nominated\""),
            "{unmet_now:?}"
        );
        seen.event_reasons.insert("NodeGroupQuotaExceeded".into());
        assert!(unmet(&expect, &seen).is_empty());
        let scenario = Scenario::parse(
            "steps:\n  - name: s\n    wait: 1s\n    expect: {eventReasons: [X]}\n",
            "x.yaml",
        )
        .unwrap();
        assert!(scenario.expects_events());
        assert!(
            !Scenario::parse("expect: {nodes: 0}\n", "x.yaml")
                .unwrap()
                .expects_events()
        );
    }

    #[test]
    fn a_clevercloud_simulation_grants_both_plugins_what_they_need() {
        let store: Arc<dyn joinery_runtime::services::SecretStore> =
            Arc::new(joinery_runtime::services::StaticSecrets::default());
        let grant = CleverCloudGrant {
            pricing_url: "http://127.0.0.1:41000".into(),
            workload: None,
            quota_backoff_seconds: 3,
        };
        let registry = simulation_registry_with(
            "http://127.0.0.1:40000",
            "sim",
            &[],
            store.clone(),
            None,
            Some(&grant),
            None,
        )
        .unwrap();
        let set = registry.current();
        {
            let cloud = set
                .get("clevercloud")
                .expect("the clevercloud plugin is built in");
            let caps = cloud.capabilities();
            assert_eq!(
                caps.grant().config,
                Some(
                    json!({"clusterName": "sim", "acceptancePollMillis": 50, "quotaBackoffSeconds": 3})
                )
            );
            // What the plugin asks for (the effective capability is the intersection).
            for verb in [Verb::Get, Verb::List, Verb::Create, Verb::Delete] {
                let access = KubeAccess {
                    cluster: "workload",
                    group: "api.clever-cloud.com",
                    resource: "nodegroups",
                    namespace: None,
                    verb,
                };
                assert!(
                    caps.check_kube(&access).is_ok(),
                    "{verb:?}: {:?}",
                    caps.check_kube(&access)
                );
            }
            let events = KubeAccess {
                cluster: "workload",
                group: "",
                resource: "events",
                namespace: Some("default"),
                verb: Verb::Create,
            };
            assert!(
                caps.check_kube(&events).is_ok(),
                "{:?}",
                caps.check_kube(&events)
            );
        }
        {
            let pricing = set
                .get("clevercloud-pricing")
                .expect("the clevercloud-pricing plugin is built in");
            let caps = pricing.capabilities();
            assert_eq!(
                caps.grant().config,
                Some(json!({"endpoint": "http://127.0.0.1:41000"}))
            );
            assert!(caps.check_http("http", "127.0.0.1", 41000).is_ok());
            assert!(
                caps.check_http("http", "127.0.0.1", 40000).is_err(),
                "only the pricing fake"
            );
        }
        // Without the grant, nothing of the kind.
        let registry =
            simulation_registry("http://127.0.0.1:40000", "sim", &[], store, None).unwrap();
        if let Some(pricing) = registry.current().get("clevercloud-pricing") {
            assert!(
                pricing
                    .capabilities()
                    .check_http("http", "127.0.0.1", 41000)
                    .is_err()
            );
        }
    }

    #[tokio::test]
    async fn a_clevercloud_simulation_runs_the_fake_cke_and_reports_its_machines() {
        let spec: CleverCloudSpec = serde_norway::from_str("{bootDelay: 5s}").unwrap();
        let options = SimulationOptions {
            speed: 50.0,
            start_controller: false,
            clevercloud: Some(spec),
            ..Default::default()
        };
        let sim = Simulation::start(options).await.unwrap();
        let groups: Api<DynamicObject> = Api::all_with(
            sim.client.clone(),
            &joinery_sim::clevercloud::nodegroups::api_resource(),
        );
        let group = json!({"apiVersion": "api.clever-cloud.com/v1", "kind": "NodeGroup", "metadata": {"name": "ng-1"}, "spec": {"flavor": "S", "nodeCount": 1}});
        groups
            .create(
                &PostParams::default(),
                &serde_json::from_value(group).unwrap(),
            )
            .await
            .unwrap();
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(sim.client.clone());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while nodes.get_opt("ng-1-node0").await.unwrap().is_none() {
            assert!(tokio::time::Instant::now() < deadline, "no node registered");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let instances = sim.cloud_instances();
        assert_eq!(instances.len(), 1);
        assert_eq!(
            (
                instances[0].instance_type.as_str(),
                instances[0].zone.as_str()
            ),
            ("S", "par")
        );
        let report = cloud_report(&sim, "clevercloud");
        assert_eq!(
            (report.instances_created, report.instances_at_end),
            (Some(1), 1)
        );
        assert_eq!(report.instances[0].provider_id, "clevercloud://ng-1");
        assert_eq!(
            report.node_groups,
            Some(report::NodeGroupTotals {
                accepted: 1,
                rejected: 0,
                vanished: 0
            })
        );
        let response = http_get(&format!(
            "{}/v4/billing/price-system?zone_id=par",
            sim.clevercloud.as_ref().unwrap().pricing.url()
        ))
        .await;
        assert!(response.contains("\"currency\":\"EUR\""), "{response}");
        sim.shutdown().await;
    }

    #[test]
    fn a_clusterapi_simulation_grants_the_plugin_the_management_cluster() {
        let store: Arc<dyn joinery_runtime::services::SecretStore> =
            Arc::new(joinery_runtime::services::StaticSecrets::default());
        let grant = ClusterApiGrant {
            cluster_name: "capi-ovh".into(),
            management: None,
            workload: None,
        };
        let registry = simulation_registry_with(
            "http://127.0.0.1:40000",
            "sim",
            &[],
            store,
            None,
            None,
            Some(&grant),
        )
        .unwrap();
        // The plugin may not be built in yet: the grant is then harmless.
        if let Some(plugin) = registry.current().get("clusterapi") {
            let caps = plugin.capabilities();
            assert_eq!(
                caps.grant().config,
                Some(json!({"clusterName": "capi-ovh", "pollMillis": 50}))
            );
            for verb in [Verb::Get, Verb::List, Verb::Patch] {
                let access = KubeAccess {
                    cluster: "management",
                    group: "cluster.x-k8s.io",
                    resource: "machinedeployments",
                    namespace: Some("default"),
                    verb,
                };
                assert!(
                    caps.check_kube(&access).is_ok(),
                    "{verb:?}: {:?}",
                    caps.check_kube(&access)
                );
            }
            let workload = KubeAccess {
                cluster: "workload",
                group: "cluster.x-k8s.io",
                resource: "machinedeployments",
                namespace: Some("default"),
                verb: Verb::Get,
            };
            assert!(
                caps.check_kube(&workload).is_err(),
                "the Cluster API objects are in the management cluster only"
            );
        }
        let grants = Grants::parse(
            &format!("plugins:\n  clusterapi:\n    kubernetes: {CLUSTERAPI_KUBERNETES}\n"),
            "test",
        )
        .unwrap();
        assert!(format!("{grants:?}").contains("machinesets"), "{grants:?}");
    }

    #[tokio::test]
    async fn a_clusterapi_simulation_runs_the_management_cluster_and_reports_its_machines() {
        let spec: ClusterApiSpec = serde_norway::from_str(
            r#"
clusterName: capi-ovh
provisionDelay: 2s
bootDelay: 5s
teardownDelay: 1s
manifests:
  - apiVersion: cluster.x-k8s.io/v1beta1
    kind: MachineDeployment
    metadata:
      name: capi-ovh-c3-4
      labels: {node.cluster.x-k8s.io/karpenter-member: ""}
      annotations:
        capacity.cluster-autoscaler.kubernetes.io/cpu: "2"
        capacity.cluster-autoscaler.kubernetes.io/memory: 4G
        capacity.cluster-autoscaler.kubernetes.io/labels: node.kubernetes.io/instance-type=c3-4,topology.kubernetes.io/zone=nova
        cluster.x-k8s.io/machine-current-price: "0.05"
    spec:
      clusterName: capi-ovh
      replicas: 1
      template:
        spec:
          clusterName: capi-ovh
          bootstrap: {dataSecretName: bootstrap}
          infrastructureRef: {apiVersion: infrastructure.cluster.x-k8s.io/v1beta1, kind: OpenStackMachineTemplate, name: c3-4}
"#,
        )
        .unwrap();
        let options = SimulationOptions {
            speed: 50.0,
            start_controller: false,
            clusterapi: Some(spec),
            ..Default::default()
        };
        let sim = Simulation::start(options).await.unwrap();
        let capi = sim.clusterapi.as_ref().unwrap();
        assert_eq!(capi.cluster_name, "capi-ovh");
        assert_ne!(capi.management.url(), sim.api.url(), "a second API server");
        let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(sim.client.clone());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let node = loop {
            let list = nodes.list(&Default::default()).await.unwrap().items;
            if let Some(node) = list.into_iter().find(|n| {
                n.spec
                    .as_ref()
                    .and_then(|s| s.provider_id.as_deref())
                    .is_some_and(|p| p.starts_with("clusterapi-sim:///"))
            }) {
                break node;
            }
            assert!(tokio::time::Instant::now() < deadline, "no node registered");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let name = node.metadata.name.clone().unwrap();
        let machines: Api<DynamicObject> = Api::namespaced_with(
            capi.client.clone(),
            "default",
            &joinery_sim::clusterapi::Kind::Machine.api_resource(),
        );
        assert!(
            machines.get(&name).await.is_ok(),
            "the Node is named after its Machine"
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        let report = loop {
            let report = cloud_report(&sim, "clusterapi");
            if report
                .machines
                .as_ref()
                .is_some_and(|m| m.len() == 1 && m[0].phase == "Running")
            {
                break report;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the Machine never showed Running: {:?}",
                report.machines
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let machine = &report.machines.as_ref().unwrap()[0];
        assert_eq!(machine.machine_deployment.as_deref(), Some("capi-ovh-c3-4"));
        assert_eq!(
            machine.provider_id.as_deref(),
            Some(format!("clusterapi-sim:///default/{name}").as_str())
        );
        assert_eq!(machine.node.as_deref(), Some(name.as_str()));
        assert_eq!(
            (report.instances_created, report.instances_at_end),
            (Some(1), 1)
        );
        assert_eq!(
            (
                report.instances[0].instance_type.as_str(),
                report.instances[0].zone.as_str()
            ),
            ("c3-4", "nova")
        );
        let totals = report.machine_totals.unwrap();
        assert_eq!(
            (
                totals.created,
                totals.provisioned,
                totals.running,
                totals.at_end
            ),
            (1, 1, 1, 1)
        );
        assert_eq!(sim.cloud_instances()[0].price_per_hour, 0.05);
        sim.shutdown().await;
    }

    /// The real `clusterapi` plugin against the fake management cluster: a pending pod gets a
    /// Machine of a MachineDeployment that fits, its Node joins, the pod runs;
    /// once the pod is gone the node is consolidated away and exactly that Machine deleted.
    #[tokio::test]
    async fn the_clusterapi_plugin_scales_the_fake_management_cluster_up_and_down() {
        let md = |name: &str, cpu: &str, memory: &str, price: &str| {
            json!({
                "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineDeployment",
                "metadata": {"name": name, "namespace": "default", "labels": {"node.cluster.x-k8s.io/karpenter-member": ""}, "annotations": {
                    "capacity.cluster-autoscaler.kubernetes.io/cpu": cpu,
                    "capacity.cluster-autoscaler.kubernetes.io/memory": memory,
                    "capacity.cluster-autoscaler.kubernetes.io/labels": format!("kubernetes.io/arch=amd64,topology.kubernetes.io/zone=nova,node.kubernetes.io/instance-type={name},karpenter.sh/capacity-type=on-demand"),
                    "cluster.x-k8s.io/machine-current-price": price,
                }},
                "spec": {"clusterName": "capi-ovh", "replicas": 0, "template": {"spec": {
                    "clusterName": "capi-ovh", "bootstrap": {"dataSecretName": "join"},
                    "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachineTemplate", "name": name},
                }}},
            })
        };
        let spec = ClusterApiSpec {
            manifests: vec![
                md("c3-4", "2", "4G", "0.05"),
                md("c3-8", "4", "8G", "0.1"),
                md("c3-16", "8", "16G", "0.2"),
            ],
            provision_delay: Some(scenario::DelaySpec::Fixed("5s".into())),
            boot_delay: Some(scenario::DelaySpec::Fixed("20s".into())),
            teardown_delay: Some(scenario::DelaySpec::Fixed("5s".into())),
            ..Default::default()
        };
        let options = SimulationOptions {
            speed: 20.0,
            start_controller: false,
            clusterapi: Some(spec),
            ..Default::default()
        };
        let mut sim = Simulation::start(options).await.unwrap();
        assert!(
            sim.registry.current().get("clusterapi").is_some(),
            "the clusterapi plugin is built in"
        );
        sim.start_controller().await.unwrap();
        for manifest in [
            json!({"apiVersion": "karpenter.cluster.x-k8s.io/v1alpha1", "kind": "ClusterAPINodeClass", "metadata": {"name": "default"}, "spec": {}}),
            json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"}, "spec": {
                "template": {"spec": {"nodeClassRef": {"group": "karpenter.cluster.x-k8s.io", "kind": "ClusterAPINodeClass", "name": "default"}, "requirements": [], "expireAfter": "Never"}},
                "disruption": {"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "0s"},
            }}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "three-cpus", "namespace": "default"}, "spec": {
                "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "3", "memory": "256Mi"}}}],
            }}),
        ] {
            sim.apply(&manifest).await.unwrap();
        }
        let capi = sim.clusterapi.as_ref().unwrap();
        let machines: Api<DynamicObject> = Api::namespaced_with(
            capi.client.clone(),
            "default",
            &joinery_sim::clusterapi::Kind::Machine.api_resource(),
        );
        let pods: Api<k8s_openapi::api::core::v1::Pod> =
            Api::namespaced(sim.client.clone(), "default");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let node_name = loop {
            let pod = pods.get("three-cpus").await.unwrap();
            if pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
                break pod.spec.and_then(|s| s.node_name).unwrap();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the pod never ran; machines: {:?}",
                capi.controllers.machines()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        let machine = machines
            .get(&node_name)
            .await
            .expect("the pod's node is a Machine");
        // The cheapest type that fits (priced by annotation), not the first by name (c3-16).
        let deployment = machine
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(joinery_sim::clusterapi::DEPLOYMENT_NAME_LABEL))
            .cloned()
            .unwrap_or_default();
        assert_eq!(deployment, "c3-8", "the cheapest type that fits 3 CPUs");
        assert!(
            machine
                .metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key(joinery_sim::clusterapi::KARPENTER_MEMBER_LABEL)),
            "claimed"
        );

        pods.delete("three-cpus", &DeleteParams::background())
            .await
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
        loop {
            let left = machines
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .len();
            let nodes = Api::<k8s_openapi::api::core::v1::Node>::all(sim.client.clone())
                .list(&Default::default())
                .await
                .unwrap()
                .items
                .len();
            if left == 0 && nodes == 0 {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "scale-down never finished: {left} machines, {nodes} nodes; {:?}",
                capi.controllers.machines()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mds: Api<DynamicObject> = Api::namespaced_with(
            capi.client.clone(),
            "default",
            &joinery_sim::clusterapi::Kind::MachineDeployment.api_resource(),
        );
        assert_eq!(
            mds.get(&deployment)
                .await
                .unwrap()
                .data
                .pointer("/spec/replicas"),
            Some(&json!(0))
        );
        let totals = capi.controllers.counters();
        assert_eq!((totals.machines_created, totals.machines_deleted), (1, 1));
        sim.shutdown().await;
    }

    /// A GET over plain HTTP/1.1 on loopback, returning the body.
    async fn http_get(url: &str) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let rest = url.strip_prefix("http://").unwrap();
        let (host, path) = rest.split_once('/').unwrap();
        let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
        stream
            .write_all(
                format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n")
                    .as_bytes(),
            )
            .await
            .unwrap();
        let mut text = String::new();
        stream.read_to_string(&mut text).await.unwrap();
        text
    }
}
