//! The fake Cluster API management cluster: a second emulated API server with the Cluster API
//! CRDs and controllers, and what the `clusterapi` plugin is granted.

use std::sync::Arc;

use joinery_core::clock::Clock;
use joinery_emulator::clusterapi::{CapiControllers, CapiOptions};
use joinery_emulator::{ApiServer, ApiServerOptions};

use crate::error::{SimulateError, kube_err};
use crate::scenario::ClusterApiSpec;

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
    /// The plugin's `pollMillis`: how often it reads its Machine (50 in real time, 1,000 in
    /// virtual time).
    pub poll_millis: u32,
}

/// The Kubernetes access the `clusterapi` plugin is granted in a simulation: the Cluster API
/// objects of the management cluster.
pub(crate) const CLUSTERAPI_KUBERNETES: &str = "[{cluster: management, group: cluster.x-k8s.io, resources: [machinedeployments, machinesets, machines], verbs: [get, list, patch, delete]}]";

/// Starts the management cluster's API server on the simulation's clock, installs the
/// Cluster API CRDs there and starts the controllers with a scenario's settings (the
/// scenario's management manifests are applied later, once the physics listens).
pub(crate) async fn start_clusterapi(
    spec: &ClusterApiSpec,
    workload: &kube::Client,
    clock: Arc<Clock>,
    host_cluster_name: &str,
    network: &joinery_emulator::network::Network,
) -> Result<ClusterApi, SimulateError> {
    let settings = spec.settings("scenario")?;
    let management = ApiServer::start(ApiServerOptions {
        clock: clock.clone(),
        network: network.clone(),
        ..Default::default()
    })
    .await?;
    let client = management.client()?;
    joinery_emulator::clusterapi::install_crds(&client)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use joinery_runtime::grants::{Grants, KubeAccess, Verb};
    use kube::api::{Api, DeleteParams, DynamicObject};
    use serde_json::json;

    use super::super::{cloud_report, simulation_registry_with};
    use crate::scenario;
    use crate::simulation::{Simulation, SimulationOptions};

    #[test]
    fn a_clusterapi_simulation_grants_the_plugin_the_management_cluster() {
        let store: Arc<dyn joinery_runtime::services::SecretStore> =
            Arc::new(joinery_runtime::services::StaticSecrets::default());
        let grant = ClusterApiGrant {
            cluster_name: "capi-ovh".into(),
            management: None,
            workload: None,
            poll_millis: 50,
        };
        let registry = simulation_registry_with(
            "http://127.0.0.1:40000",
            "sim",
            &[],
            store,
            None,
            None,
            Some(&grant),
            &Default::default(),
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
            &joinery_emulator::clusterapi::Kind::Machine.api_resource(),
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
            &joinery_emulator::clusterapi::Kind::Machine.api_resource(),
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
            .and_then(|l| l.get(joinery_emulator::clusterapi::DEPLOYMENT_NAME_LABEL))
            .cloned()
            .unwrap_or_default();
        assert_eq!(deployment, "c3-8", "the cheapest type that fits 3 CPUs");
        assert!(
            machine.metadata.labels.as_ref().is_some_and(
                |l| l.contains_key(joinery_emulator::clusterapi::KARPENTER_MEMBER_LABEL)
            ),
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
            &joinery_emulator::clusterapi::Kind::MachineDeployment.api_resource(),
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
}
