//! The fake Cluster API against two emulated API servers over loopback — a management
//! cluster with the CRDs and the controllers, a workload cluster with the physics — driven
//! through `kube::Client`s with a fast clock.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use joinery_core::clock::Clock;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::*;
use crate::test_support::eventually;
use crate::{ApiServer, ApiServerOptions, Physics, PhysicsOptions};

const SPEED: f64 = 100.0;
const NAMESPACE: &str = "default";

struct Fake {
    _management: ApiServer,
    _workload: ApiServer,
    management: Client,
    workload: Client,
    controllers: CapiControllers,
    _physics: Physics,
}

impl Fake {
    fn api(&self, kind: Kind) -> Api<DynamicObject> {
        Api::namespaced_with(self.management.clone(), NAMESPACE, &kind.api_resource())
    }

    fn nodes(&self) -> Api<Node> {
        Api::all(self.workload.clone())
    }

    async fn list(&self, kind: Kind) -> Vec<DynamicObject> {
        let mut items = self
            .api(kind)
            .list(&Default::default())
            .await
            .unwrap()
            .items;
        items.sort_by_key(|o| o.metadata.name.clone());
        items
    }

    async fn create(&self, object: Value) -> DynamicObject {
        let kind = match object["kind"].as_str().unwrap() {
            "MachineDeployment" => Kind::MachineDeployment,
            "MachineSet" => Kind::MachineSet,
            _ => Kind::Machine,
        };
        // Posted to the endpoint of the object's own version, as kubectl does (the API server
        // refuses a body whose apiVersion is not the endpoint's).
        let mut resource = kind.api_resource();
        let api_version = object["apiVersion"].as_str().unwrap().to_string();
        resource.version = api_version.rsplit('/').next().unwrap().to_string();
        resource.api_version = api_version;
        Api::<DynamicObject>::namespaced_with(self.management.clone(), NAMESPACE, &resource)
            .create(
                &PostParams::default(),
                &serde_json::from_value(object).unwrap(),
            )
            .await
            .unwrap()
    }

    async fn scale(&self, md: &str, replicas: i64) {
        self.api(Kind::MachineDeployment)
            .patch_scale(
                md,
                &PatchParams::default(),
                &Patch::Merge(&json!({"spec": {"replicas": replicas}})),
            )
            .await
            .unwrap();
    }

    /// Waits until the MachineDeployment's Machines are `count`, all in `phase`.
    async fn machines_in(&self, md: &str, count: usize, phase: &str) -> Vec<DynamicObject> {
        eventually(&format!("{count} Machines of {md} {phase}"), || async {
            let machines: Vec<DynamicObject> = self
                .list(Kind::Machine)
                .await
                .into_iter()
                .filter(|m| {
                    m.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(DEPLOYMENT_NAME_LABEL))
                        .map(String::as_str)
                        == Some(md)
                })
                .collect();
            (machines.len() == count
                && machines
                    .iter()
                    .all(|m| m.data.pointer("/status/phase") == Some(&json!(phase))))
            .then_some(machines)
        })
        .await
    }

    async fn ready_node(&self, name: &str) -> Node {
        let nodes = self.nodes();
        eventually(&format!("node {name} ready"), || {
            let nodes = nodes.clone();
            async move {
                nodes
                    .get(name)
                    .await
                    .ok()
                    .filter(crate::physics::node_is_ready)
            }
        })
        .await
    }

    async fn gone(&self, kind: Kind, name: &str) {
        let api = self.api(kind);
        eventually(&format!("{} {name} gone", kind.kind()), || {
            let api = api.clone();
            async move {
                matches!(api.get(name).await, Err(kube::Error::Api(s)) if s.code == 404)
                    .then_some(())
            }
        })
        .await
    }

    async fn node_gone(&self, name: &str) {
        let nodes = self.nodes();
        eventually(&format!("node {name} gone"), || {
            let nodes = nodes.clone();
            async move { nodes.get_opt(name).await.unwrap().is_none().then_some(()) }
        })
        .await
    }
}

async fn fake(configure: impl FnOnce(&mut CapiSettings)) -> Fake {
    let clock = Arc::new(Clock::with_speed(SPEED));
    let start = || {
        ApiServer::start(ApiServerOptions {
            clock: clock.clone(),
            ..Default::default()
        })
    };
    let (management, workload) = (start().await.unwrap(), start().await.unwrap());
    let (management_client, workload_client) =
        (management.client().unwrap(), workload.client().unwrap());
    install_crds(&management_client).await.unwrap();
    let mut options = CapiOptions::new(
        management_client.clone(),
        workload_client.clone(),
        clock.clone(),
    );
    options.settings.provision_delay = DelayRange::fixed(Duration::from_secs(3));
    options.settings.boot_delay = DelayRange::fixed(Duration::from_secs(5));
    options.settings.teardown_delay = DelayRange::fixed(Duration::from_secs(2));
    configure(&mut options.settings);
    let controllers = CapiControllers::start(options);
    let physics = Physics::start(
        PhysicsOptions::new(workload_client.clone(), clock)
            .with_cloud(controllers.subscribe(), Duration::from_secs(30)),
    );
    Fake {
        _management: management,
        _workload: workload,
        management: management_client,
        workload: workload_client,
        controllers,
        _physics: physics,
    }
}

/// A MachineDeployment like the blog post's (v1beta1 shape), with capacity annotations.
fn deployment(name: &str, replicas: i64) -> Value {
    json!({
        "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineDeployment",
        "metadata": {
            "name": name, "namespace": NAMESPACE,
            "labels": {KARPENTER_MEMBER_LABEL: ""},
            "annotations": {
                "capacity.cluster-autoscaler.kubernetes.io/cpu": "2",
                "capacity.cluster-autoscaler.kubernetes.io/memory": "4G",
                "capacity.cluster-autoscaler.kubernetes.io/ephemeral-disk": "50Gi",
                "capacity.cluster-autoscaler.kubernetes.io/maxPods": "58",
                "capacity.cluster-autoscaler.kubernetes.io/labels": "kubernetes.io/arch=amd64,topology.kubernetes.io/zone=nova,node.kubernetes.io/instance-type=c3-4,karpenter.sh/capacity-type=on-demand",
                "capacity.cluster-autoscaler.kubernetes.io/taints": "dedicated=capi:NoSchedule",
                PRICE_ANNOTATION: "0.0475",
            },
        },
        "spec": {
            "clusterName": "capi-ovh",
            "replicas": replicas,
            "template": {
                "metadata": {"labels": {"node-role.kubernetes.io/worker": "", "team": "blue"}},
                "spec": {
                    "clusterName": "capi-ovh",
                    "version": "v1.33.1",
                    "bootstrap": {"configRef": {"apiVersion": "bootstrap.cluster.x-k8s.io/v1beta1", "kind": "KubeadmConfigTemplate", "name": name}},
                    "infrastructureRef": {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachineTemplate", "name": name},
                },
            },
        },
    })
}

fn labels(object: &DynamicObject) -> BTreeMap<String, String> {
    object.metadata.labels.clone().unwrap_or_default()
}

fn annotation<'a>(node: &'a Node, key: &str) -> Option<&'a str> {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

#[test]
fn the_crds_serve_both_versions_with_status_and_scale() {
    for (kind, crd) in Kind::ALL.into_iter().zip(crds()) {
        let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition = serde_json::from_value(crd).unwrap();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some(format!("{}.cluster.x-k8s.io", kind.plural()).as_str())
        );
        assert_eq!(crd.spec.scope, "Namespaced");
        let versions: Vec<(&str, bool)> = crd
            .spec
            .versions
            .iter()
            .map(|v| (v.name.as_str(), v.storage))
            .collect();
        assert_eq!(versions, [("v1beta1", true), ("v1beta2", false)]);
        for version in &crd.spec.versions {
            let subresources = version.subresources.as_ref().unwrap();
            assert!(subresources.status.is_some());
            match subresources.scale.as_ref() {
                Some(scale) => {
                    assert_ne!(kind, Kind::Machine);
                    assert_eq!(
                        (
                            scale.spec_replicas_path.as_str(),
                            scale.status_replicas_path.as_str(),
                            scale.label_selector_path.as_deref()
                        ),
                        (
                            ".spec.replicas",
                            ".status.replicas",
                            Some(".status.selector")
                        )
                    );
                }
                None => assert_eq!(kind, Kind::Machine),
            }
        }
    }
}

#[tokio::test]
async fn scaling_up_makes_a_machine_set_machines_providers_ids_and_nodes() {
    let fake = fake(|_| {}).await;
    let md = fake.create(deployment("capi-ovh-c3-4", 0)).await;
    // The MachineSet comes at once, with no Machine.
    let sets = eventually("the MachineSet", || async {
        Some(fake.list(Kind::MachineSet).await).filter(|s| s.len() == 1)
    })
    .await;
    let ms = &sets[0];
    let ms_name = ms.metadata.name.clone().unwrap();
    assert!(
        ms_name.starts_with("capi-ovh-c3-4-") && ms_name.len() == "capi-ovh-c3-4-".len() + 5,
        "{ms_name}"
    );
    let owner = &ms.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.uid.as_str(),
            owner.controller
        ),
        (
            "MachineDeployment",
            "capi-ovh-c3-4",
            md.metadata.uid.as_deref().unwrap(),
            Some(true)
        )
    );
    let ms_labels = labels(ms);
    assert_eq!(
        ms_labels.get(DEPLOYMENT_NAME_LABEL).map(String::as_str),
        Some("capi-ovh-c3-4")
    );
    assert!(
        ms_labels
            .get(TEMPLATE_HASH_LABEL)
            .is_some_and(|h| h.parse::<u32>().is_ok()),
        "{ms_labels:?}"
    );
    assert_eq!(ms.data.pointer("/spec/replicas"), Some(&json!(0)));

    // Scale through the /scale subresource, as the cluster autoscaler does.
    fake.scale("capi-ovh-c3-4", 2).await;
    let machines = fake.machines_in("capi-ovh-c3-4", 2, "Running").await;
    for machine in &machines {
        let name = machine.metadata.name.clone().unwrap();
        assert!(name.starts_with(&format!("{ms_name}-")), "{name}");
        let machine_labels = labels(machine);
        for (key, value) in [
            (CLUSTER_NAME_LABEL, "capi-ovh"),
            (DEPLOYMENT_NAME_LABEL, "capi-ovh-c3-4"),
            (SET_NAME_LABEL, ms_name.as_str()),
            ("node-role.kubernetes.io/worker", ""),
            ("team", "blue"),
            (TEMPLATE_HASH_LABEL, ms_labels[TEMPLATE_HASH_LABEL].as_str()),
        ] {
            assert_eq!(
                machine_labels.get(key).map(String::as_str),
                Some(value),
                "label {key}: {machine_labels:?}"
            );
        }
        let owner = &machine.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.controller),
            ("MachineSet", ms_name.as_str(), Some(true))
        );
        assert!(
            machine
                .metadata
                .finalizers
                .iter()
                .flatten()
                .any(|f| f == FINALIZER)
        );
        assert_eq!(
            machine.data.pointer("/spec/clusterName"),
            Some(&json!("capi-ovh"))
        );
        assert_eq!(
            machine.data.pointer("/spec/infrastructureRef/kind"),
            Some(&json!("OpenStackMachine"))
        );
        assert_eq!(
            machine.data.pointer("/spec/infrastructureRef/name"),
            Some(&json!(name))
        );
        assert_eq!(
            machine.data.pointer("/spec/bootstrap/configRef/kind"),
            Some(&json!("KubeadmConfig"))
        );
        let provider = provider_id(NAMESPACE, &name);
        assert_eq!(
            machine.data.pointer("/spec/providerID"),
            Some(&json!(provider))
        );
        assert_eq!(provider, format!("clusterapi-sim:///default/{name}"));

        // The Node: named after the Machine, with its providerID, labels, taints and capacity.
        let node = fake.ready_node(&name).await;
        assert_eq!(
            node.spec.as_ref().and_then(|s| s.provider_id.as_deref()),
            Some(provider.as_str())
        );
        assert_eq!(
            machine.data.pointer("/status/nodeRef/kind"),
            Some(&json!("Node"))
        );
        assert_eq!(
            machine.data.pointer("/status/nodeRef/name"),
            Some(&json!(name))
        );
        assert_eq!(
            machine.data.pointer("/status/nodeRef/uid"),
            Some(&json!(node.metadata.uid))
        );
        let node_labels = node.metadata.labels.clone().unwrap_or_default();
        for (key, value) in [
            ("node-role.kubernetes.io/worker", ""),
            ("kubernetes.io/arch", "amd64"),
            ("kubernetes.io/os", "linux"),
            ("kubernetes.io/hostname", name.as_str()),
            ("node.kubernetes.io/instance-type", "c3-4"),
            ("topology.kubernetes.io/zone", "nova"),
            ("karpenter.sh/capacity-type", "on-demand"),
        ] {
            assert_eq!(
                node_labels.get(key).map(String::as_str),
                Some(value),
                "node label {key}: {node_labels:?}"
            );
        }
        assert!(
            !node_labels.contains_key("team"),
            "only propagated labels reach the Node"
        );
        let taints: Vec<String> = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
            .iter()
            .map(|t| {
                format!(
                    "{}={}:{}",
                    t.key,
                    t.value.clone().unwrap_or_default(),
                    t.effect
                )
            })
            .collect();
        assert_eq!(
            taints,
            [
                "dedicated=capi:NoSchedule",
                "karpenter.sh/unregistered=:NoExecute"
            ]
        );
        let status = node.status.clone().unwrap();
        let quantity = |key: &str| {
            status
                .capacity
                .as_ref()
                .and_then(|c| c.get(key))
                .map(|q| q.0.clone())
                .unwrap_or_default()
        };
        assert_eq!(
            (
                quantity("cpu"),
                quantity("memory"),
                quantity("ephemeral-storage"),
                quantity("pods")
            ),
            ("2".into(), "4G".into(), "50Gi".into(), "58".into())
        );
        assert_eq!(
            status.allocatable, status.capacity,
            "allocatable is the annotated capacity"
        );

        // The Node annotated as Cluster API does.
        let nodes = fake.nodes();
        let node = eventually("the Node's annotations", || {
            let nodes = nodes.clone();
            let name = name.clone();
            async move {
                nodes
                    .get(&name)
                    .await
                    .ok()
                    .filter(|n| annotation(n, MACHINE_ANNOTATION).is_some())
            }
        })
        .await;
        assert_eq!(annotation(&node, MACHINE_ANNOTATION), Some(name.as_str()));
        assert_eq!(annotation(&node, CLUSTER_NAME_ANNOTATION), Some("capi-ovh"));
        assert_eq!(
            annotation(&node, CLUSTER_NAMESPACE_ANNOTATION),
            Some(NAMESPACE)
        );
        assert_eq!(annotation(&node, OWNER_KIND_ANNOTATION), Some("MachineSet"));
        assert_eq!(
            annotation(&node, OWNER_NAME_ANNOTATION),
            Some(ms_name.as_str())
        );
        assert_eq!(
            annotation(&node, LABELS_FROM_MACHINE_ANNOTATION),
            Some("node-role.kubernetes.io/worker")
        );
    }

    // A label Karpenter's provider adds to a Machine is propagated to its Node.
    let claimed = machines[0].metadata.name.clone().unwrap();
    let patch = json!({"metadata": {"labels": {KARPENTER_MEMBER_LABEL: ""}}});
    fake.api(Kind::Machine)
        .patch(&claimed, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    let nodes = fake.nodes();
    eventually("the karpenter-member label on the Node", || {
        let nodes = nodes.clone();
        let claimed = claimed.clone();
        async move {
            nodes.get(&claimed).await.ok().filter(|n| {
                n.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key(KARPENTER_MEMBER_LABEL))
            })
        }
    })
    .await;

    // The MachineDeployment's status and its Scale.
    let deployments = fake.api(Kind::MachineDeployment);
    let md = eventually("the MachineDeployment Running", || {
        let deployments = deployments.clone();
        async move {
            deployments
                .get("capi-ovh-c3-4")
                .await
                .ok()
                .filter(|d| d.data.pointer("/status/phase") == Some(&json!("Running")))
        }
    })
    .await;
    let status = &md.data["status"];
    assert_eq!(
        (
            status["replicas"].as_i64(),
            status["readyReplicas"].as_i64(),
            status["availableReplicas"].as_i64(),
            status["unavailableReplicas"].as_i64()
        ),
        (Some(2), Some(2), Some(2), Some(0))
    );
    assert_eq!(
        status["selector"],
        "cluster.x-k8s.io/cluster-name=capi-ovh,cluster.x-k8s.io/deployment-name=capi-ovh-c3-4"
    );
    let scale = deployments.get_scale("capi-ovh-c3-4").await.unwrap();
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(2));
    let scale_status = scale.status.unwrap();
    assert_eq!(
        (scale_status.replicas, scale_status.selector.as_deref()),
        (2, status["selector"].as_str())
    );

    let counters = fake.controllers.counters();
    assert_eq!(
        (
            counters.machine_sets_created,
            counters.machines_created,
            counters.machines_provisioned,
            counters.machines_running
        ),
        (1, 2, 2, 2)
    );
    let instances = fake.controllers.instances();
    assert_eq!(instances.len(), 2);
    assert!(
        instances.iter().all(|i| i.instance_type == "c3-4"
            && i.zone == "nova"
            && i.price_per_hour == 0.0475
            && i.state == InstanceState::Running),
        "{instances:?}"
    );
    let infos = fake.controllers.machines();
    assert!(
        infos.iter().all(|m| m.phase == "Running"
            && m.deployment.as_deref() == Some("capi-ovh-c3-4")
            && m.node.as_ref() == Some(&m.name)),
        "{infos:?}"
    );

    // Settled: resyncs write nothing more.
    let version = fake._management.resource_version();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        fake._management.resource_version(),
        version,
        "the controllers keep writing in a steady state"
    );
}

#[tokio::test]
async fn scale_down_deletes_exactly_the_annotated_machine() {
    let fake = fake(|_| {}).await;
    // The blog post's v1beta2 shape: selector matchLabels null, references by apiGroup.
    let md = json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "MachineDeployment",
        "metadata": {"name": "capi-ovh-karpenter", "namespace": NAMESPACE, "labels": {KARPENTER_MEMBER_LABEL: ""}},
        "spec": {
            "clusterName": "capi-ovh", "replicas": 2, "selector": {"matchLabels": null},
            "template": {"spec": {
                "clusterName": "capi-ovh", "version": "v1.36.1",
                "bootstrap": {"configRef": {"apiGroup": "bootstrap.cluster.x-k8s.io", "kind": "KubeadmConfigTemplate", "name": "capi-ovh-karpenter"}},
                "infrastructureRef": {"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "OpenStackMachineTemplate", "name": "capi-ovh-karpenter"},
            }},
        },
    });
    fake.create(md).await;
    let machines = fake.machines_in("capi-ovh-karpenter", 2, "Running").await;
    // Mark the Machine that sorts last: name order alone would pick the other one.
    let (keep, doomed) = (
        machines[0].metadata.name.clone().unwrap(),
        machines[1].metadata.name.clone().unwrap(),
    );
    assert!(keep < doomed);
    for name in [&keep, &doomed] {
        fake.ready_node(name).await;
    }
    // Karpenter holds the doomed Node until it has drained it.
    let hold = json!({"metadata": {"finalizers": ["karpenter.sh/termination"]}});
    fake.nodes()
        .patch(&doomed, &PatchParams::default(), &Patch::Merge(&hold))
        .await
        .unwrap();
    let mark = json!({"metadata": {"annotations": {DELETE_MACHINE_ANNOTATION: "2026-05-01 10:00:00 +0000 UTC"}}});
    fake.api(Kind::Machine)
        .patch(&doomed, &PatchParams::default(), &Patch::Merge(&mark))
        .await
        .unwrap();
    // Karpenter's provider writes the whole object back with one replica less, reading it
    // again when the controllers' status writes got in between (409 Conflict).
    let deployments = fake.api(Kind::MachineDeployment);
    eventually("the MachineDeployment scaled to one replica", || {
        let deployments = deployments.clone();
        async move {
            let mut current = deployments.get("capi-ovh-karpenter").await.unwrap();
            current.data["spec"]["replicas"] = json!(1);
            deployments
                .replace("capi-ovh-karpenter", &PostParams::default(), &current)
                .await
                .ok()
        }
    })
    .await;

    let machines_api = fake.api(Kind::Machine);
    let deleting = eventually("the marked Machine Deleting", || {
        let machines_api = machines_api.clone();
        let doomed = doomed.clone();
        async move {
            machines_api
                .get(&doomed)
                .await
                .ok()
                .filter(|m| m.data.pointer("/status/phase") == Some(&json!("Deleting")))
        }
    })
    .await;
    assert!(deleting.metadata.deletion_timestamp.is_some());
    fake.gone(Kind::Machine, &doomed).await;
    // The Machine went once its machine was gone and its Node marked for deletion; the Node
    // waits for Karpenter.
    let held = fake.nodes().get(&doomed).await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    fake.nodes()
        .patch(
            &doomed,
            &PatchParams::default(),
            &Patch::Merge(&json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    fake.node_gone(&doomed).await;
    let left = fake.machines_in("capi-ovh-karpenter", 1, "Running").await;
    assert_eq!(left[0].metadata.name.as_deref(), Some(keep.as_str()));
    assert!(fake.nodes().get_opt(&keep).await.unwrap().is_some());
    assert_eq!(fake.controllers.counters().machines_deleted, 1);
    let terminated: Vec<String> = fake
        .controllers
        .instances()
        .into_iter()
        .filter(|i| i.state == InstanceState::Terminated)
        .map(|i| i.tags["machine"].clone())
        .collect();
    assert_eq!(terminated, [doomed]);
    let ms = fake.list(Kind::MachineSet).await;
    assert_eq!(ms[0].data.pointer("/spec/replicas"), Some(&json!(1)));
}

#[tokio::test]
async fn an_unhealthy_machine_goes_before_a_healthy_one() {
    let fake = fake(|_| {}).await;
    fake.create(deployment("web", 1)).await;
    let first = fake.machines_in("web", 1, "Running").await[0]
        .metadata
        .name
        .clone()
        .unwrap();
    fake.ready_node(&first).await;
    // Its Node turns NotReady: NodeHealthy=False makes the Machine unhealthy.
    let nodes = fake.nodes();
    let node = nodes.get(&first).await.unwrap();
    let mut conditions = node.status.and_then(|s| s.conditions).unwrap_or_default();
    for c in conditions.iter_mut().filter(|c| c.type_ == "Ready") {
        c.status = "False".into();
        c.reason = Some("KubeletNotReady".into());
    }
    nodes
        .patch_status(
            &first,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"conditions": conditions}})),
        )
        .await
        .unwrap();
    let machines_api = fake.api(Kind::Machine);
    eventually("NodeHealthy=False", || {
        let machines_api = machines_api.clone();
        let first = first.clone();
        async move {
            machines_api
                .get(&first)
                .await
                .ok()
                .filter(|m| !is_healthy(m))
        }
    })
    .await;

    fake.scale("web", 2).await;
    let both = eventually("a healthy second Machine", || async {
        let machines = fake.list(Kind::Machine).await;
        (machines.len() == 2 && machines.iter().filter(|m| is_healthy(m)).count() == 1)
            .then_some(machines)
    })
    .await;
    let second = both
        .iter()
        .find(|m| is_healthy(m))
        .unwrap()
        .metadata
        .name
        .clone()
        .unwrap();
    fake.scale("web", 1).await;
    fake.gone(Kind::Machine, &first).await;
    fake.node_gone(&first).await;
    assert!(
        machines_api
            .get(&second)
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_none()
    );
}

#[tokio::test]
async fn a_stale_resource_version_is_refused_with_409() {
    let fake = fake(|_| {}).await;
    let md = fake.create(deployment("md", 0)).await;
    let stale = md.metadata.resource_version.clone().unwrap();
    let api = fake.api(Kind::MachineDeployment);
    api.patch(
        "md",
        &PatchParams::default(),
        &Patch::Merge(&json!({"metadata": {"labels": {"x": "1"}}})),
    )
    .await
    .unwrap();
    let conflict = |result: Result<DynamicObject, kube::Error>| match result {
        Err(kube::Error::Api(status)) => status.code == 409,
        _ => false,
    };
    let patch = json!({"metadata": {"resourceVersion": stale}, "spec": {"replicas": 3}});
    assert!(
        conflict(
            api.patch("md", &PatchParams::default(), &Patch::Merge(&patch))
                .await
        ),
        "a merge patch with a stale resourceVersion"
    );
    let mut old = md.clone();
    old.data["spec"]["replicas"] = json!(3);
    assert!(
        conflict(api.replace("md", &PostParams::default(), &old).await),
        "an update with a stale resourceVersion"
    );
    assert_eq!(
        api.get("md").await.unwrap().data.pointer("/spec/replicas"),
        Some(&json!(0)),
        "neither write landed"
    );
    // Without a resourceVersion, the patch is applied.
    api.patch(
        "md",
        &PatchParams::default(),
        &Patch::Merge(&json!({"spec": {"replicas": 1}})),
    )
    .await
    .unwrap();
    fake.machines_in("md", 1, "Running").await;
}

#[tokio::test]
async fn a_machine_that_never_provisions_stays_provisioning_then_fails() {
    let fake = fake(|s| {
        s.never_provision.insert("stuck".to_string());
        s.fail_after = Some(Duration::from_secs(20));
    })
    .await;
    fake.create(deployment("stuck", 1)).await;
    let machine = fake.machines_in("stuck", 1, "Provisioning").await.remove(0);
    let name = machine.metadata.name.clone().unwrap();
    assert!(machine.data.pointer("/spec/providerID").is_none());
    assert!(machine.data.pointer("/status/failureReason").is_none());
    assert_eq!(
        machine.data.pointer("/status/bootstrapReady"),
        Some(&json!(true))
    );
    let failed = fake.machines_in("stuck", 1, "Failed").await.remove(0);
    assert_eq!(
        failed.data.pointer("/status/failureReason"),
        Some(&json!(FAILURE_REASON))
    );
    assert!(
        failed
            .data
            .pointer("/status/failureMessage")
            .and_then(Value::as_str)
            .is_some_and(|m| m.contains("OpenStackMachine/")),
        "{failed:?}"
    );
    assert!(failed.data.pointer("/spec/providerID").is_none());
    assert!(fake.nodes().get_opt(&name).await.unwrap().is_none());
    assert!(!is_healthy(&failed));
    let counters = fake.controllers.counters();
    assert_eq!(
        (
            counters.machines_created,
            counters.machines_provisioned,
            counters.machines_failed
        ),
        (1, 0, 1)
    );

    // Scaled away, it goes without a machine to tear down.
    fake.scale("stuck", 0).await;
    fake.gone(Kind::Machine, &name).await;
    assert!(fake.controllers.instances().is_empty());
}

#[tokio::test]
async fn deleting_a_deployment_takes_its_machines_and_nodes_with_it() {
    let fake = fake(|_| {}).await;
    fake.create(deployment("short-lived", 1)).await;
    let name = fake.machines_in("short-lived", 1, "Running").await[0]
        .metadata
        .name
        .clone()
        .unwrap();
    fake.ready_node(&name).await;
    fake.api(Kind::MachineDeployment)
        .delete("short-lived", &DeleteParams::background())
        .await
        .unwrap();
    fake.gone(Kind::Machine, &name).await;
    fake.node_gone(&name).await;
    eventually("the MachineSet collected", || async {
        fake.list(Kind::MachineSet).await.is_empty().then_some(())
    })
    .await;
}
