//! The clouds a simulation runs on besides the simulated one (the fakes of Exoscale, Clever
//! Cloud's Kubernetes Engine and a Cluster API management cluster, one module each: their
//! set-up and what their plugins are granted), the plugin registry with those grants, and
//! the cloud's side of a run's report.

mod clevercloud;
mod clusterapi;
mod exoscale;
mod hands_on;

use std::sync::Arc;

use joinery_emulator::exoscale::ExoFake;
use joinery_runtime::engine::{EngineOptions, PluginEngine};
use joinery_runtime::grants::Grants;
use joinery_runtime::plugin::LoadContext;
use joinery_runtime::registry::PluginRegistry;
use joinery_runtime::services::HostServices;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject};

use crate::error::SimulateError;
use crate::report;
use crate::simulation::{NODECLASS_CRDS, Simulation};

pub(crate) use clevercloud::{CLEVERCLOUD_KUBERNETES, start_clevercloud};
pub use clevercloud::{CleverCloud, CleverCloudGrant};
pub(crate) use clusterapi::{CLUSTERAPI_KUBERNETES, start_clusterapi};
pub use clusterapi::{ClusterApi, ClusterApiGrant};
pub use exoscale::{EXOSCALE_SECRET, ExoscaleGrant};
pub(crate) use exoscale::{seed_exoscale, start_exoscale};
pub use hands_on::{HANDS_ON_NAMESPACE, HandsOn};

/// How the plugins reach the simulated world: the network its servers listen on, and in
/// virtual time the simulation's clock (see
/// [`HostServices::virtual_clock`](joinery_runtime::services::HostServices::virtual_clock)).
#[derive(Clone, Default)]
pub struct PluginLink {
    /// Where the fakes listen (the plugins' outgoing requests are dialled on it).
    pub network: joinery_emulator::network::Network,
    /// The simulation's clock, in virtual time.
    pub virtual_clock: Option<Arc<joinery_core::clock::Clock>>,
    /// Where renderers' promises of what a node registers with go (the physics' table), so
    /// that a renderer of a format the kubelets do not read can be simulated.
    pub declared_boots: joinery_emulator::physics::DeclaredBoots,
    /// Directories of plugins loaded beside the built-in ones.
    pub plugin_dirs: Vec<std::path::PathBuf>,
}

/// Hands renderers' promises to the simulated kubelets.
struct DeclaredBootSink(joinery_emulator::physics::DeclaredBoots);

impl joinery_runtime::services::RegistrationSink for DeclaredBootSink {
    fn declared(&self, user_data: &str, promise: &joinery_runtime::contract::NodeRegistration) {
        self.0.declare(user_data, declared_boot(promise));
    }
}

/// A renderer's promise in the simulator's terms (taints as `key[=value]:Effect`).
pub fn declared_boot(
    promise: &joinery_runtime::contract::NodeRegistration,
) -> joinery_emulator::physics::DeclaredBoot {
    joinery_emulator::physics::DeclaredBoot {
        node_name: promise.node_name.clone(),
        labels: promise
            .labels
            .iter()
            .map(|kv| (kv.key.clone(), kv.value.clone()))
            .collect(),
        taints: promise
            .taints
            .iter()
            .map(|t| match &t.value {
                Some(value) if !value.is_empty() => format!("{}={value}:{}", t.key, t.effect),
                _ => format!("{}:{}", t.key, t.effect),
            })
            .collect(),
        provider_id_prefix: promise.provider_id_prefix.clone(),
    }
}

/// Dials a plugin's outgoing connection on the simulation's in-process network.
struct NetworkDialer(joinery_emulator::network::Network);

impl joinery_runtime::egress::Dialer for NetworkDialer {
    fn dial(
        &self,
        to: std::net::SocketAddr,
    ) -> Option<std::io::Result<Box<dyn joinery_runtime::egress::Stream>>> {
        self.0
            .dial(to)
            .map(|pipe| pipe.map(|pipe| Box::new(pipe) as Box<dyn joinery_runtime::egress::Stream>))
    }
}

/// The renderers the simulation grants its secrets to.
const RENDERERS: [&str; 4] = ["template", "k3s", "rke2", "kubeadm"];

/// Loads the built-in plugins with grants that let `simcloud` reach exactly `cloud_url`, and
/// every renderer read the `secrets` named (compiled once per digest into the directory
/// [`joinery_runtime::engine::PLUGIN_CACHE_ENV`] names, when it is set). With `exoscale`, the
/// `exoscale` plugin is also granted the fake's loopback address (under `extraHttp`, as an
/// operator would point it elsewhere: its manifest names only Exoscale's real hosts) and the
/// credentials secret [`EXOSCALE_SECRET`].
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
        &PluginLink::default(),
    )
}

/// [`simulation_registry`], and with `clevercloud` the grants of a Clever Cloud simulation:
/// the `clevercloud` plugin may use NodeGroups (get, list, create, delete: what it asks for)
/// and create Events in the workload cluster, reached through `workload`, with config
/// `{clusterName, acceptancePollMillis: 50, quotaBackoffSeconds}` (it reads a new NodeGroup
/// every 50 ms of real time, since CKE's simulated second passes in a fraction of one; the
/// backoff is the grant's [`CleverCloudGrant::quota_backoff_seconds`]); the
/// `clevercloud-pricing` plugin may reach the pricing fake (its loopback address granted under
/// `extraHttp`: its manifest names only Clever Cloud's real API), with config
/// `{endpoint: <the fake's URL>}`. With `clusterapi`, the `clusterapi` plugin may get, list,
/// patch and delete MachineDeployments, MachineSets and Machines in the `management`
/// cluster, with config `{clusterName, pollMillis: 50}` (it polls for its Machine in real
/// time: every 50 ms keeps a launch from taking simulated minutes); the host's Kubernetes
/// import then reaches the `management` and `workload` clusters through the grant's clients.
/// Grants for a plugin that is not built in are harmless. `link` says how plugins reach the
/// fakes and which clock they read.
#[expect(
    clippy::too_many_arguments,
    reason = "one argument per cloud the simulation may run, each optional"
)]
pub fn simulation_registry_with(
    cloud_url: &str,
    cluster_name: &str,
    secrets: &[String],
    store: Arc<dyn joinery_runtime::services::SecretStore>,
    exoscale: Option<&ExoscaleGrant>,
    clevercloud: Option<&CleverCloudGrant>,
    clusterapi: Option<&ClusterApiGrant>,
    link: &PluginLink,
) -> Result<Arc<PluginRegistry>, SimulateError> {
    let mut grants_yaml = format!(
        "plugins:\n  simcloud:\n    http: [{url:?}]\n    config: {{endpoint: {url:?}, clusterName: {cluster_name:?}}}\n",
        url = cloud_url
    );
    let builtins = joinery_builtin_plugins::builtin_manifests();
    if let Some(grant) = exoscale {
        grants_yaml.push_str(&format!(
            "  exoscale:\n    extraHttp: [{url:?}]\n    secrets: [{EXOSCALE_SECRET}]\n    config: {{endpoint: {endpoint:?}, zone: {zone:?}, clusterName: {cluster_name:?}, operationTimeoutSeconds: 20}}\n",
            url = grant.url,
            endpoint = grant.endpoint,
            zone = grant.zone,
        ));
    }
    if let Some(grant) = clevercloud {
        grants_yaml.push_str(&format!(
            "  clevercloud:\n    kubernetes: {CLEVERCLOUD_KUBERNETES}\n    config: {{clusterName: {cluster_name:?}, acceptancePollMillis: {poll}, quotaBackoffSeconds: {backoff}}}\n  clevercloud-pricing:\n    extraHttp: [{url:?}]\n    config: {{endpoint: {url:?}}}\n",
            url = grant.pricing_url,
            backoff = grant.quota_backoff_seconds,
            poll = grant.poll_millis,
        ));
    }
    if let Some(grant) = clusterapi {
        grants_yaml.push_str(&format!(
            "  clusterapi:\n    kubernetes: {CLUSTERAPI_KUBERNETES}\n    config: {{clusterName: {name:?}, pollMillis: {poll}}}\n",
            name = grant.cluster_name,
            poll = grant.poll_millis,
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
        virtual_clock: link.virtual_clock.clone(),
        registrations: Some(Arc::new(DeclaredBootSink(link.declared_boots.clone()))),
        ..HostServices::default()
    };
    if link.network.is_in_process() {
        services.egress = Arc::new(
            joinery_runtime::egress::Egress::default()
                .with_dialer(Arc::new(NetworkDialer(link.network.clone()))),
        );
    }
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
    let registry = PluginRegistry::load(cx, link.plugin_dirs.clone(), builtins)
        .map_err(|e| SimulateError::Plugins(e.to_string()))?;
    Ok(Arc::new(registry))
}

/// The cloud's instances at the end of a run.
pub(crate) fn cloud_report(sim: &Simulation, provider: &str) -> report::CloudReport {
    use joinery_emulator::cloud::InstanceState;
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
pub(crate) async fn node_class_report(sim: &Simulation) -> Vec<report::NodeClassReport> {
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
