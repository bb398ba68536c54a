//! The fake Clever Cloud Kubernetes Engine: the NodeGroup CRD and its operator in the
//! emulated cluster, the pricing endpoints, and what the `clevercloud` plugins are granted.

use std::sync::Arc;

use joinery_core::clock::Clock;
use joinery_emulator::clevercloud::nodegroups::{NodeGroupOperator, NodeGroupOperatorOptions};
use joinery_emulator::clevercloud::pricing::PricingFake;

use crate::error::{SimulateError, kube_err};
use crate::scenario::CleverCloudSpec;

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
    /// The plugin's `acceptancePollMillis`: how often it reads a new NodeGroup (50 in real
    /// time, where a simulated second passes in a fraction of one; 1,000 in virtual time).
    pub poll_millis: u32,
}

/// The Kubernetes access the `clevercloud` plugin is granted in a simulation: NodeGroups,
/// and Events (for its quota warnings on NodeClaims).
pub(crate) const CLEVERCLOUD_KUBERNETES: &str = "[{cluster: workload, group: api.clever-cloud.com, resources: [nodegroups], verbs: [get, list, create, delete]}, {cluster: workload, group: \"\", resources: [events], verbs: [create]}]";

/// Installs the NodeGroup CRD, starts the fake CKE operator on the simulation's client and
/// clock, and the pricing endpoints, with a scenario's settings.
pub(crate) async fn start_clevercloud(
    spec: &CleverCloudSpec,
    client: &kube::Client,
    clock: Arc<Clock>,
    network: &joinery_emulator::network::Network,
) -> Result<CleverCloud, SimulateError> {
    let (settings, mut pricing) = spec.settings("scenario")?;
    pricing.network = network.clone();
    joinery_emulator::clevercloud::nodegroups::install_crd(client)
        .await
        .map_err(kube_err(format!(
            "creating CRD {}",
            joinery_emulator::clevercloud::nodegroups::CRD_NAME
        )))?;
    let operator = NodeGroupOperator::start(NodeGroupOperatorOptions {
        client: client.clone(),
        clock,
        settings,
    });
    let pricing = PricingFake::start(pricing).await?;
    Ok(CleverCloud { operator, pricing })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use joinery_runtime::grants::{KubeAccess, Verb};
    use kube::api::{Api, DynamicObject, PostParams};
    use serde_json::json;

    use super::super::{cloud_report, simulation_registry, simulation_registry_with};
    use crate::report;
    use crate::simulation::{Simulation, SimulationOptions};

    #[test]
    fn a_clevercloud_simulation_grants_both_plugins_what_they_need() {
        let store: Arc<dyn joinery_runtime::services::SecretStore> =
            Arc::new(joinery_runtime::services::StaticSecrets::default());
        let grant = CleverCloudGrant {
            pricing_url: "http://127.0.0.1:41000".into(),
            workload: None,
            quota_backoff_seconds: 3,
            poll_millis: 50,
        };
        let registry = simulation_registry_with(
            "http://127.0.0.1:40000",
            "sim",
            &[],
            store.clone(),
            None,
            Some(&grant),
            None,
            &Default::default(),
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
            &joinery_emulator::clevercloud::nodegroups::api_resource(),
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
