//! The cluster physics against the real emulator over loopback: scheduler, workload
//! controllers and kubelets, driven through `kube::Api` like Karpenter would see them. Cloud
//! events come from a test-owned broadcast channel; the clock runs 50 times faster than real
//! time.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use joinery_core::clock::Clock;
use joinery_emulator::cloud::{CloudEvent, InstanceState, SimInstance};
use joinery_emulator::physics::{ExistingNode, NodeFault};
use joinery_emulator::{ApiServer, ApiServerOptions, Physics, PhysicsOptions};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::sync::broadcast;

const SPEED: f64 = 50.0;
/// How long (real time) a test waits for the cluster to get somewhere.
const PATIENCE: Duration = Duration::from_secs(20);

struct Cluster {
    _server: ApiServer,
    client: Client,
    clock: Arc<Clock>,
    cloud: broadcast::Sender<CloudEvent>,
    physics: Physics,
}

async fn cluster() -> Cluster {
    let (server, client, clock) = server_alone().await;
    with_physics(server, client, clock, Vec::new())
}

/// Polls `probe` until it yields a value, failing the test after [`PATIENCE`].
async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

fn instance(id: &str, user_data: &str) -> SimInstance {
    let strings = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>()
    };
    SimInstance {
        id: id.to_string(),
        provider_id: format!("simcloud://{id}"),
        instance_type: "c-4x-amd64-linux".into(),
        zone: "test-zone-a".into(),
        capacity_type: "on-demand".into(),
        user_data: user_data.to_string(),
        tags: BTreeMap::new(),
        capacity: strings(&[
            ("cpu", "4"),
            ("memory", "8Gi"),
            ("pods", "110"),
            ("ephemeral-storage", "20Gi"),
        ]),
        allocatable: strings(&[
            ("cpu", "3900m"),
            ("memory", "7Gi"),
            ("pods", "110"),
            ("ephemeral-storage", "18Gi"),
        ]),
        labels: strings(&[
            ("kubernetes.io/arch", "amd64"),
            ("kubernetes.io/os", "linux"),
        ]),
        price_per_hour: 0.1,
        state: InstanceState::Pending,
        created_at: "2026-01-01T00:00:00Z".into(),
    }
}

/// userData exactly as the k3s renderer writes it for NodeClaim `default-abc12` of NodePool
/// `default`, with the provider-ID step for the `simcloud://` prefix.
const K3S_USER_DATA: &str = r#"#!/bin/sh
# Joinery: join NodeClaim default-abc12 (NodePool default) to k3s as an agent. Generated, do not edit.
set -eu
umask 077
mkdir -p /etc/rancher/k3s
cat > /etc/rancher/k3s/config.yaml <<'JOINERY_K3S_CONFIG'
server: "https://10.0.0.1:6443"
token: "K10secret::server:abc"
node-name: "default-abc12"
node-label:
  - "karpenter.sh/nodepool=default"
  - "team=checkout"
node-taint:
  - "karpenter.sh/unregistered:NoExecute"
kubelet-arg:
  - "max-pods=58"
JOINERY_K3S_CONFIG
# The kubelet registers with provider ID <prefix><instance id>.
JOINERY_INSTANCE_ID="$(sh -c 'curl -s http://169.254.169.254/latest/meta-data/instance-id' | tr -d '[:space:]')"
case "$JOINERY_INSTANCE_ID" in
  ''|*[!A-Za-z0-9._:/-]*)
    echo "joinery: providerIDCommand printed no usable instance ID: '$JOINERY_INSTANCE_ID'" >&2
    exit 1 ;;
esac
printf '  - "provider-id=%s%s"\n' 'simcloud://' "$JOINERY_INSTANCE_ID" >> /etc/rancher/k3s/config.yaml
chmod 600 /etc/rancher/k3s/config.yaml
JOINERY_INSTALLER="$(mktemp)"
if command -v curl >/dev/null 2>&1; then
  curl -sfL 'https://get.k3s.io' -o "$JOINERY_INSTALLER"
else
  wget -qO "$JOINERY_INSTALLER" 'https://get.k3s.io'
fi
sh "$JOINERY_INSTALLER" agent
"#;

/// userData for the verbatim `template` renderer: a kubelet command line.
fn kubelet_user_data(node: &str, extra: &str) -> String {
    format!(
        "#!/bin/bash\nset -euo pipefail\nINSTANCE_ID=\"$(curl -s http://169.254.169.254/latest/meta-data/instance-id)\"\n\
         exec /usr/bin/kubelet --kubeconfig=/etc/kubernetes/kubelet.conf \\\n  --hostname-override={node} \\\n  \
         --provider-id=simcloud://$INSTANCE_ID \\\n  --node-labels=karpenter.sh/nodepool=flags,team=payments {extra}\n"
    )
}

fn deployment(name: &str, replicas: i32, cpu: &str, extra_spec: Value) -> Deployment {
    let mut pod_spec = json!({
        "terminationGracePeriodSeconds": 30,
        "containers": [{"name": "app", "image": "registry.example/app:1", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}],
    });
    if let (Some(spec), Some(extra)) = (pod_spec.as_object_mut(), extra_spec.as_object()) {
        spec.extend(extra.clone());
    }
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec},
        },
    }))
    .unwrap()
}

fn pod(name: &str, labels: Value, cpu: &str, extra_spec: Value) -> Pod {
    let mut spec = json!({"containers": [{"name": "app", "image": "registry.example/app:1", "resources": {"requests": {"cpu": cpu}}}]});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        spec.extend(extra.clone());
    }
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "spec": spec}))
        .unwrap()
}

/// A Node created directly (no kubelet behind it): Ready unless `ready` is false.
async fn node(client: &Client, name: &str, cpu: &str, labels: Value, spec: Value, ready: bool) {
    let mut all_labels = json!({"kubernetes.io/hostname": name});
    if let (Some(target), Some(extra)) = (all_labels.as_object_mut(), labels.as_object()) {
        target.extend(extra.clone());
    }
    let conditions = if ready {
        json!([{"type": "Ready", "status": "True"}])
    } else {
        json!([])
    };
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": all_labels},
        "spec": spec,
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}, "conditions": conditions},
    }))
    .unwrap();
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
}

fn scheduled_condition(pod: &Pod) -> Option<(String, String, String)> {
    let condition = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled")?;
    Some((
        condition.status.clone(),
        condition.reason.clone().unwrap_or_default(),
        condition.message.clone().unwrap_or_default(),
    ))
}

/// Waits until the scheduler marks the pod unschedulable with a message `accept` accepts (the
/// watches of pods and nodes are independent, so a first verdict may predate the latest nodes).
async fn unschedulable_where(pods: &Api<Pod>, name: &str, accept: impl Fn(&str) -> bool) -> String {
    let mut last = None;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Ok(pod) = pods.get(name).await
            && let Some((status, reason, message)) = scheduled_condition(&pod)
            && status == "False"
            && reason == "Unschedulable"
        {
            if accept(&message) {
                return message;
            }
            last = Some(message);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "pod {name} never got the expected verdict; last: {last:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits until the pod is unschedulable with exactly this message.
async fn assert_unschedulable(pods: &Api<Pod>, name: &str, expected: &str) {
    unschedulable_where(pods, name, |message| message == expected).await;
}

/// Waits until the pod is bound and returns its node.
async fn bound_node(pods: &Api<Pod>, name: &str) -> String {
    eventually(&format!("pod {name} to be bound"), || async {
        pods.get(name).await.ok()?.spec?.node_name
    })
    .await
}

fn is_running_and_ready(pod: &Pod) -> bool {
    let status = pod.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn app_pods(pods: &Api<Pod>, app: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap()
        .items
}

#[tokio::test]
async fn unschedulable_deployment_runs_once_a_k3s_node_registers_and_karpenter_lifts_the_taint() {
    let cluster = cluster().await;
    let deployments: Api<Deployment> = Api::default_namespaced(cluster.client.clone());
    let pods: Api<Pod> = Api::default_namespaced(cluster.client.clone());
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    deployments
        .create(
            &PostParams::default(),
            &deployment("web", 10, "100m", json!({})),
        )
        .await
        .unwrap();

    // No nodes: every pod is marked the way Karpenter acts on.
    let pending = eventually("10 unschedulable pods", || async {
        let all = app_pods(&pods, "web").await;
        let unschedulable: Vec<_> = all
            .iter()
            .filter(|p| {
                scheduled_condition(p).is_some_and(|(status, reason, _)| {
                    status == "False" && reason == "Unschedulable"
                })
            })
            .cloned()
            .collect();
        (all.len() == 10 && unschedulable.len() == 10).then_some(unschedulable)
    })
    .await;
    assert_eq!(
        scheduled_condition(&pending[0]).unwrap().2,
        "no nodes available to schedule pods"
    );
    for pod in &pending {
        let owner = &pod.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(owner.kind, "ReplicaSet");
        assert!(
            owner.name.starts_with("web-")
                && pod
                    .metadata
                    .name
                    .as_ref()
                    .unwrap()
                    .starts_with(&format!("{}-", owner.name))
        );
        assert!(
            pod.metadata
                .labels
                .as_ref()
                .unwrap()
                .contains_key("pod-template-hash")
        );
    }

    // The cloud launches an instance with k3s-rendered userData; after the boot delay its kubelet registers.
    cluster
        .cloud
        .send(CloudEvent::Launched(instance("i-00000001", K3S_USER_DATA)))
        .unwrap();
    let node = eventually("node default-abc12", || async {
        nodes.get("default-abc12").await.ok()
    })
    .await;
    let labels = node.metadata.labels.clone().unwrap();
    for (key, value) in [
        ("karpenter.sh/nodepool", "default"),
        ("team", "checkout"),
        ("kubernetes.io/hostname", "default-abc12"),
        ("kubernetes.io/arch", "amd64"),
        ("kubernetes.io/os", "linux"),
        ("node.kubernetes.io/instance-type", "c-4x-amd64-linux"),
        ("topology.kubernetes.io/zone", "test-zone-a"),
        ("topology.kubernetes.io/region", "sim-region-1"),
    ] {
        assert_eq!(
            labels.get(key).map(String::as_str),
            Some(value),
            "label {key}"
        );
    }
    let spec = node.spec.clone().unwrap();
    assert_eq!(spec.provider_id.as_deref(), Some("simcloud://i-00000001"));
    let taints = spec.taints.unwrap();
    assert_eq!(taints.len(), 1);
    assert_eq!(
        (taints[0].key.as_str(), taints[0].effect.as_str()),
        ("karpenter.sh/unregistered", "NoExecute")
    );
    let status = node.status.clone().unwrap();
    assert_eq!(
        status.allocatable.as_ref().unwrap()["pods"].0,
        "58",
        "max-pods overrides the instance's pod count"
    );
    assert_eq!(status.allocatable.as_ref().unwrap()["cpu"].0, "3900m");
    assert_eq!(status.capacity.as_ref().unwrap()["cpu"].0, "4");
    assert!(status.node_info.unwrap().kubelet_version.contains("k3s"));

    // Ready shortly after registration, but still unregistered: nothing lands on it.
    eventually("the node to turn Ready", || async {
        let node = nodes.get("default-abc12").await.ok()?;
        node.status?
            .conditions?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
            .then_some(())
    })
    .await;
    let name = pending[0].metadata.name.clone().unwrap();
    eventually("the message to name the unregistered taint", || async {
        let pod = pods.get(&name).await.ok()?;
        (scheduled_condition(&pod)?.2 == "0/1 nodes are available: 1 node(s) had untolerated taint {karpenter.sh/unregistered: }.")
            .then_some(())
    })
    .await;

    // Karpenter registers the node: it lifts the taint and labels it; then the pods run.
    let registration = json!({"metadata": {"labels": {"karpenter.sh/registered": "true"}}, "spec": {"taints": []}});
    nodes
        .patch(
            "default-abc12",
            &PatchParams::default(),
            &Patch::Merge(&registration),
        )
        .await
        .unwrap();
    let running = eventually("10 running pods", || async {
        let all = app_pods(&pods, "web").await;
        (all.len() == 10 && all.iter().all(is_running_and_ready)).then_some(all)
    })
    .await;
    for pod in &running {
        assert_eq!(
            pod.spec.as_ref().unwrap().node_name.as_deref(),
            Some("default-abc12")
        );
        let status = pod.status.as_ref().unwrap();
        assert!(status.pod_ip.is_some() && status.host_ip.is_some() && status.start_time.is_some());
        assert!(status.container_statuses.as_ref().unwrap()[0].ready);
        assert_eq!(scheduled_condition(pod).unwrap().0, "True");
    }
    eventually(
        "the deployment status to count 10 ready replicas",
        || async {
            let status = deployments.get("web").await.ok()?.status?;
            (status.ready_replicas == Some(10)
                && status.available_replicas == Some(10)
                && status.replicas == Some(10))
            .then_some(())
        },
    )
    .await;
    cluster.physics.shutdown().await;
}

#[tokio::test]
async fn kubelet_command_line_bootstrap_registers_the_node_it_describes() {
    let cluster = cluster().await;
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let user_data = kubelet_user_data(
        "Flags-Node",
        "--register-with-taints=karpenter.sh/unregistered:NoExecute,gpu=true:NoSchedule --max-pods 20",
    );
    cluster
        .cloud
        .send(CloudEvent::Launched(instance("i-00000002", &user_data)))
        .unwrap();
    let node = eventually("node flags-node", || async {
        nodes.get("flags-node").await.ok()
    })
    .await;
    let labels = node.metadata.labels.unwrap();
    assert_eq!(labels["karpenter.sh/nodepool"], "flags");
    assert_eq!(labels["team"], "payments");
    assert_eq!(labels["kubernetes.io/hostname"], "flags-node");
    let spec = node.spec.unwrap();
    assert_eq!(spec.provider_id.as_deref(), Some("simcloud://i-00000002"));
    let taints: Vec<String> = spec
        .taints
        .unwrap()
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
        vec![
            "karpenter.sh/unregistered=:NoExecute",
            "gpu=true:NoSchedule"
        ]
    );
    assert_eq!(node.status.unwrap().allocatable.unwrap()["pods"].0, "20");

    // Without a provider ID the node registers with none: Karpenter would never match it.
    let no_id = "#!/bin/sh\n/usr/bin/kubelet --node-labels=karpenter.sh/nodepool=flags\n";
    cluster
        .cloud
        .send(CloudEvent::Launched(instance("i-00000003", no_id)))
        .unwrap();
    let node = eventually("node i-00000003", || async {
        nodes.get("i-00000003").await.ok()
    })
    .await;
    assert_eq!(node.spec.unwrap().provider_id, None);
}

#[tokio::test]
async fn unknown_user_data_registers_no_node_and_records_a_warning() {
    let cluster = cluster().await;
    let events: Api<Event> = Api::default_namespaced(cluster.client.clone());
    cluster
        .cloud
        .send(CloudEvent::Launched(instance(
            "i-0000000f",
            "#!/bin/sh\necho 'hello from a broken renderer'\n",
        )))
        .unwrap();
    let warning = eventually("a BootstrapFailed event", || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("BootstrapFailed"))
    })
    .await;
    assert_eq!(warning.type_.as_deref(), Some("Warning"));
    assert!(
        warning.message.as_deref().unwrap().contains("i-0000000f"),
        "{:?}",
        warning.message
    );
    assert_eq!(warning.involved_object.name.as_deref(), Some("i-0000000f"));
    assert!(warning.first_timestamp.is_some());
    // The event is written when the kubelet gave up; give it a moment more to be sure.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        Api::<Node>::all(cluster.client.clone())
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}

#[tokio::test]
async fn scheduler_honours_taints_selectors_cordons_and_readiness() {
    let cluster = cluster().await;
    let client = &cluster.client;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    node(
        client,
        "gpu",
        "4",
        json!({"accelerator": "gpu"}),
        json!({"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}),
        true,
    )
    .await;
    node(client, "ssd", "4", json!({"disk": "ssd"}), json!({}), true).await;
    node(client, "plain", "4", json!({}), json!({}), true).await;
    node(
        client,
        "cordoned",
        "4",
        json!({"disk": "ssd"}),
        json!({"unschedulable": true}),
        true,
    )
    .await;
    node(
        client,
        "booting",
        "4",
        json!({"disk": "ssd"}),
        json!({}),
        false,
    )
    .await;

    pods.create(
        &PostParams::default(),
        &pod(
            "wants-ssd",
            json!({}),
            "100m",
            json!({"nodeSelector": {"disk": "ssd"}}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(bound_node(&pods, "wants-ssd").await, "ssd");

    let gpu = json!({
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "accelerator", "operator": "In", "values": ["tpu"]}]},
            {"matchExpressions": [{"key": "accelerator", "operator": "Exists"}]},
        ]}}},
    });
    pods.create(
        &PostParams::default(),
        &pod("wants-gpu", json!({}), "100m", gpu),
    )
    .await
    .unwrap();
    assert_eq!(bound_node(&pods, "wants-gpu").await, "gpu");

    pods.create(
        &PostParams::default(),
        &pod(
            "wants-nvme",
            json!({}),
            "100m",
            json!({"nodeSelector": {"disk": "nvme"}}),
        ),
    )
    .await
    .unwrap();
    assert_unschedulable(
        &pods,
        "wants-nvme",
        "0/5 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, \
         1 node(s) had untolerated taint {node.kubernetes.io/not-ready: }, \
         1 node(s) were unschedulable, 2 node(s) didn't match Pod's node affinity/selector.",
    )
    .await;

    // The node turns Ready: the scheduler retries and an ssd pod may use it.
    let ready = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    Api::<Node>::all(client.clone())
        .patch_status("booting", &PatchParams::default(), &Patch::Merge(&ready))
        .await
        .unwrap();
    pods.create(
        &PostParams::default(),
        &pod(
            "second-ssd",
            json!({}),
            "100m",
            json!({"nodeSelector": {"disk": "ssd"}}),
        ),
    )
    .await
    .unwrap();
    let chosen = bound_node(&pods, "second-ssd").await;
    assert!(chosen == "ssd" || chosen == "booting", "{chosen}");
}

#[tokio::test]
async fn insufficient_resources_are_explained_and_bin_packing_prefers_the_fuller_node() {
    let cluster = cluster().await;
    let client = &cluster.client;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let tainted =
        json!({"taints": [{"key": "dedicated", "value": "batch", "effect": "NoExecute"}]});
    node(client, "small", "1", json!({}), json!({}), true).await;
    node(client, "tainted-1", "8", json!({}), tainted.clone(), true).await;
    node(client, "tainted-2", "8", json!({}), tainted, true).await;
    pods.create(
        &PostParams::default(),
        &pod("big", json!({}), "2", json!({})),
    )
    .await
    .unwrap();
    assert_unschedulable(&pods, "big", "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had untolerated taint {dedicated: batch}.").await;

    // Two roomy nodes: the pod lands on one, and the next pod that fits both joins it there.
    node(client, "roomy-a", "4", json!({}), json!({}), true).await;
    node(client, "roomy-b", "4", json!({}), json!({}), true).await;
    let first = bound_node(&pods, "big").await;
    pods.create(
        &PostParams::default(),
        &pod("follower", json!({}), "1500m", json!({})),
    )
    .await
    .unwrap();
    assert_eq!(
        bound_node(&pods, "follower").await,
        first,
        "bin packing keeps filling the busier node"
    );
    // Pods count too: a node full of pods is "Too many pods".
    node(
        client,
        "tiny",
        "8",
        json!({"size": "tiny"}),
        json!({}),
        true,
    )
    .await;
    let tiny_pods = json!({"status": {"allocatable": {"cpu": "8", "memory": "8Gi", "pods": "0"}}});
    Api::<Node>::all(client.clone())
        .patch_status("tiny", &PatchParams::default(), &Patch::Merge(&tiny_pods))
        .await
        .unwrap();
    pods.create(
        &PostParams::default(),
        &pod(
            "on-tiny",
            json!({}),
            "100m",
            json!({"nodeSelector": {"size": "tiny"}}),
        ),
    )
    .await
    .unwrap();
    unschedulable_where(&pods, "on-tiny", |message| {
        message.contains("1 Too many pods")
    })
    .await;
}

#[tokio::test]
async fn anti_affinity_host_ports_and_topology_spread_limit_placement() {
    let cluster = cluster().await;
    let client = &cluster.client;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    node(
        client,
        "a1",
        "8",
        json!({"topology.kubernetes.io/zone": "a"}),
        json!({}),
        true,
    )
    .await;
    node(
        client,
        "b1",
        "8",
        json!({"topology.kubernetes.io/zone": "b"}),
        json!({}),
        true,
    )
    .await;

    // Required anti-affinity by hostname: one per node, the third has nowhere to go.
    let anti = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"},
    ]}}});
    for name in ["db-1", "db-2", "db-3"] {
        pods.create(
            &PostParams::default(),
            &pod(name, json!({"app": "db"}), "100m", anti.clone()),
        )
        .await
        .unwrap();
    }
    let mut hosts = vec![
        bound_node(&pods, "db-1").await,
        bound_node(&pods, "db-2").await,
    ];
    hosts.sort();
    assert_eq!(hosts, vec!["a1", "b1"]);
    assert_unschedulable(
        &pods,
        "db-3",
        "0/2 nodes are available: 2 node(s) didn't match pod anti-affinity rules.",
    )
    .await;

    // An existing pod's anti-affinity keeps others away from it too.
    let with_db = pod("not-near-db", json!({"app": "db"}), "100m", json!({}));
    pods.create(&PostParams::default(), &with_db).await.unwrap();
    assert_unschedulable(
        &pods,
        "not-near-db",
        "0/2 nodes are available: 2 node(s) didn't satisfy existing pods anti-affinity rules.",
    )
    .await;

    // Required affinity: follow the pods it names into their zone.
    let near = json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "topology.kubernetes.io/zone"},
    ]}}});
    pods.create(
        &PostParams::default(),
        &pod("near-db", json!({"app": "cache"}), "100m", near),
    )
    .await
    .unwrap();
    let near_node = bound_node(&pods, "near-db").await;
    assert!(near_node == "a1" || near_node == "b1");

    // Host ports: the second pod asking for the same port and protocol cannot share the node.
    let port = |host_ip: &str| {
        json!({"nodeSelector": {"topology.kubernetes.io/zone": "a"}, "containers": [{"name": "app", "image": "registry.example/app:1",
            "ports": [{"containerPort": 80, "hostPort": 8080, "hostIP": host_ip}]}]})
    };
    pods.create(
        &PostParams::default(),
        &pod("port-1", json!({}), "100m", port("")),
    )
    .await
    .unwrap();
    assert_eq!(bound_node(&pods, "port-1").await, "a1");
    pods.create(
        &PostParams::default(),
        &pod("port-2", json!({}), "100m", port("10.0.0.7")),
    )
    .await
    .unwrap();
    assert_unschedulable(
        &pods,
        "port-2",
        "0/2 nodes are available: 1 node(s) didn't have free ports for the requested pod ports, \
         1 node(s) didn't match Pod's node affinity/selector.",
    )
    .await;

    // Topology spread (DoNotSchedule, maxSkew 1 over zones): bin packing alone would stack them.
    let spread = json!({"topologySpreadConstraints": [{
        "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "spread"}},
    }]});
    for index in 0..4 {
        let name = format!("spread-{index}");
        pods.create(
            &PostParams::default(),
            &pod(&name, json!({"app": "spread"}), "100m", spread.clone()),
        )
        .await
        .unwrap();
        bound_node(&pods, &name).await;
    }
    let placed = app_pods(&pods, "spread").await;
    let in_a = placed
        .iter()
        .filter(|p| p.spec.as_ref().unwrap().node_name.as_deref() == Some("a1"))
        .count();
    assert_eq!((placed.len(), in_a), (4, 2), "two per zone");
    // A spread over a key no node has is unsatisfiable.
    let missing = json!({"topologySpreadConstraints": [{
        "maxSkew": 1, "topologyKey": "rack", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "rack"}},
    }]});
    pods.create(
        &PostParams::default(),
        &pod("rack-0", json!({"app": "rack"}), "100m", missing),
    )
    .await
    .unwrap();
    assert_unschedulable(&pods, "rack-0", "0/2 nodes are available: 2 node(s) didn't match pod topology spread constraints (missing required label).").await;
}

#[tokio::test]
async fn deployments_scale_down_unscheduled_pods_first_and_replace_evicted_ones() {
    let cluster = cluster().await;
    let deployments: Api<Deployment> = Api::default_namespaced(cluster.client.clone());
    let pods: Api<Pod> = Api::default_namespaced(cluster.client.clone());
    cluster
        .cloud
        .send(CloudEvent::Launched(instance(
            "i-00000010",
            &kubelet_user_data("worker", ""),
        )))
        .unwrap();
    // 3900m allocatable: three 1200m pods fit, five do not.
    let slow_to_stop = json!({"terminationGracePeriodSeconds": 60});
    deployments
        .create(
            &PostParams::default(),
            &deployment("api", 5, "1200m", slow_to_stop),
        )
        .await
        .unwrap();
    let running = eventually("3 running and 2 unschedulable pods", || async {
        let all = app_pods(&pods, "api").await;
        let running: Vec<String> = all
            .iter()
            .filter(|p| is_running_and_ready(p))
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        let unschedulable = all
            .iter()
            .filter(|p| scheduled_condition(p).is_some_and(|c| c.1 == "Unschedulable"))
            .count();
        (all.len() == 5 && running.len() == 3 && unschedulable == 2).then_some(running)
    })
    .await;

    // Scaling down to 3 removes the two pods that never ran.
    deployments
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    eventually("the unscheduled pods to go", || async {
        let mut names: Vec<String> = app_pods(&pods, "api")
            .await
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect();
        names.sort();
        let mut expected = running.clone();
        expected.sort();
        (names == expected).then_some(())
    })
    .await;

    // Scaling to 1 deletes two running pods gracefully: Terminating first, gone after the grace period.
    deployments
        .patch(
            "api",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    let terminating = eventually("two terminating pods", || async {
        let all = app_pods(&pods, "api").await;
        let terminating: Vec<Pod> = all
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_some())
            .collect();
        (terminating.len() == 2).then_some(terminating)
    })
    .await;
    assert_eq!(
        terminating[0].metadata.deletion_grace_period_seconds,
        Some(60)
    );
    eventually("one pod left and the status to follow", || async {
        let all = app_pods(&pods, "api").await;
        let status = deployments.get("api").await.ok()?.status?;
        (all.len() == 1 && status.replicas == Some(1) && status.ready_replicas == Some(1))
            .then_some(())
    })
    .await;

    // An evicted pod is replaced.
    let survivor = app_pods(&pods, "api")
        .await
        .remove(0)
        .metadata
        .name
        .unwrap();
    pods.evict(&survivor, &EvictParams::default())
        .await
        .unwrap();
    eventually("a replacement pod running", || async {
        let all = app_pods(&pods, "api").await;
        all.iter()
            .any(|p| {
                p.metadata.name.as_deref() != Some(survivor.as_str()) && is_running_and_ready(p)
            })
            .then_some(())
    })
    .await;
    eventually(
        "the evicted pod to be removed after its grace period",
        || async { pods.get(&survivor).await.is_err().then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn daemonsets_run_one_pod_per_matching_node() {
    let cluster = cluster().await;
    let client = &cluster.client;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let daemon_sets: Api<DaemonSet> = Api::default_namespaced(client.clone());
    node(client, "n1", "4", json!({}), json!({}), true).await;
    node(client, "n2", "4", json!({"role": "edge"}), json!({}), true).await;
    node(
        client,
        "n3",
        "4",
        json!({}),
        json!({"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]}),
        true,
    )
    .await;
    let daemon_set = |name: &str, pod_spec: Value| -> DaemonSet {
        let mut spec =
            json!({"containers": [{"name": "agent", "image": "registry.example/agent:1"}]});
        spec.as_object_mut()
            .unwrap()
            .extend(pod_spec.as_object().unwrap().clone());
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": name}}, "template": {"metadata": {"labels": {"app": name}}, "spec": spec}},
        }))
        .unwrap()
    };
    daemon_sets
        .create(&PostParams::default(), &daemon_set("logs", json!({})))
        .await
        .unwrap();
    daemon_sets
        .create(
            &PostParams::default(),
            &daemon_set("edge", json!({"nodeSelector": {"role": "edge"}})),
        )
        .await
        .unwrap();

    let on_nodes = |app: &'static str| {
        let pods = pods.clone();
        async move {
            let mut nodes: Vec<String> = app_pods(&pods, app)
                .await
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter_map(|p| p.spec?.node_name)
                .collect();
            nodes.sort();
            nodes
        }
    };
    eventually("logs on n1 and n2, not on the tainted n3", || async {
        (on_nodes("logs").await == ["n1", "n2"]).then_some(())
    })
    .await;
    eventually("edge on n2 only", || async {
        (on_nodes("edge").await == ["n2"]).then_some(())
    })
    .await;
    let logs_pod = app_pods(&pods, "logs").await.remove(0);
    let tolerations = logs_pod.spec.unwrap().tolerations.unwrap();
    assert!(
        tolerations
            .iter()
            .any(|t| t.key.as_deref() == Some("node.kubernetes.io/unschedulable"))
    );
    assert_eq!(
        logs_pod.metadata.owner_references.unwrap()[0].kind,
        "DaemonSet"
    );
    eventually("daemonset status", || async {
        let status = daemon_sets.get("logs").await.ok()?.status?;
        (status.desired_number_scheduled == 2 && status.current_number_scheduled == 2).then_some(())
    })
    .await;

    // A new node gets its pod; a node that goes takes its pod with it.
    node(client, "n4", "4", json!({}), json!({}), true).await;
    eventually("logs on n4 too", || async {
        (on_nodes("logs").await == ["n1", "n2", "n4"]).then_some(())
    })
    .await;
    nodes.delete("n1", &DeleteParams::default()).await.unwrap();
    eventually("logs off n1", || async {
        let all = app_pods(&pods, "logs").await;
        let nodes: Vec<String> = all.into_iter().filter_map(|p| p.spec?.node_name).collect();
        (!nodes.iter().any(|n| n == "n1") && nodes.len() == 2).then_some(())
    })
    .await;
    // A NoExecute taint the pods do not tolerate evicts them.
    let taint = json!({"spec": {"taints": [{"key": "maintenance", "effect": "NoExecute"}]}});
    nodes
        .patch("n4", &PatchParams::default(), &Patch::Merge(&taint))
        .await
        .unwrap();
    eventually("logs off n4", || async {
        (on_nodes("logs").await == ["n2"]).then_some(())
    })
    .await;
}

#[tokio::test]
async fn terminated_instance_takes_its_node_and_pods_with_it() {
    let cluster = cluster().await;
    let deployments: Api<Deployment> = Api::default_namespaced(cluster.client.clone());
    let pods: Api<Pod> = Api::default_namespaced(cluster.client.clone());
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let machine = instance("i-00000020", &kubelet_user_data("doomed", ""));
    cluster
        .cloud
        .send(CloudEvent::Launched(machine.clone()))
        .unwrap();
    deployments
        .create(
            &PostParams::default(),
            &deployment("svc", 2, "100m", json!({})),
        )
        .await
        .unwrap();
    eventually("2 running pods on the node", || async {
        let all = app_pods(&pods, "svc").await;
        (all.len() == 2 && all.iter().all(is_running_and_ready)).then_some(())
    })
    .await;
    let old: Vec<String> = app_pods(&pods, "svc")
        .await
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();

    cluster
        .cloud
        .send(CloudEvent::Terminated {
            instance: machine,
            at: cluster.clock.now(),
        })
        .unwrap();
    eventually("the node to be gone", || async {
        nodes.get("doomed").await.is_err().then_some(())
    })
    .await;
    eventually(
        "its pods gone and replaced by unschedulable ones",
        || async {
            let all = app_pods(&pods, "svc").await;
            let gone = old
                .iter()
                .all(|name| all.iter().all(|p| p.metadata.name.as_ref() != Some(name)));
            let pending = all
                .iter()
                .filter(|p| scheduled_condition(p).is_some_and(|c| c.1 == "Unschedulable"))
                .count();
            (gone && pending == 2).then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn pods_bound_to_a_node_that_does_not_exist_are_collected_across_list_pages() {
    let cluster = cluster().await;
    let pods: Api<Pod> = Api::default_namespaced(cluster.client.clone());
    node(&cluster.client, "here", "4", json!({}), json!({}), true).await;
    let bound = |name: String, node: &str| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}})).unwrap()
    };
    // More orphans than the pod GC reads in one page.
    for i in 0..520 {
        pods.create(
            &PostParams::default(),
            &bound(format!("orphan-{i:03}"), "vanished"),
        )
        .await
        .unwrap();
    }
    pods.create(&PostParams::default(), &bound("kept".into(), "here"))
        .await
        .unwrap();
    eventually("every pod of the missing node collected", || async {
        let left = pods
            .list(&ListParams::default().fields("spec.nodeName=vanished"))
            .await
            .unwrap()
            .items
            .len();
        (left == 0).then_some(())
    })
    .await;
    assert!(
        pods.get("kept").await.is_ok(),
        "a pod on an existing node stays"
    );
}

#[tokio::test]
async fn timestamps_follow_the_fast_clock() {
    let cluster = cluster().await;
    let config_maps: Api<ConfigMap> = Api::default_namespaced(cluster.client.clone());
    let created = |name: &'static str| {
        let config_maps = config_maps.clone();
        async move {
            let object: ConfigMap =
                serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
            config_maps
                .create(&PostParams::default(), &object)
                .await
                .unwrap()
                .metadata
                .creation_timestamp
                .unwrap()
                .0
        }
    };
    let real_start = std::time::Instant::now();
    let first = created("first").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = created("second").await;
    let real = real_start.elapsed().as_secs_f64();
    let simulated = (second - first).get_seconds() as f64;
    // 300 ms real are 15 s simulated at 50×; timestamps have one-second precision.
    assert!(
        simulated >= 13.0 && simulated <= real * SPEED + 1.0,
        "{simulated} simulated seconds in {real} real seconds"
    );
    let now = Timestamp::try_from(cluster.clock.now()).unwrap();
    assert!(
        (now - second).get_seconds().abs() <= 2,
        "creation times come from the shared clock"
    );

    // Deletion with a grace period: the deadline is simulated now plus the grace period.
    let client = &cluster.client;
    node(client, "timekeeper", "4", json!({}), json!({}), true).await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    pods.create(
        &PostParams::default(),
        &pod(
            "slow",
            json!({}),
            "100m",
            json!({"terminationGracePeriodSeconds": 3600}),
        ),
    )
    .await
    .unwrap();
    bound_node(&pods, "slow").await;
    let bound = pods.get("slow").await.unwrap();
    let scheduled_at = bound
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "PodScheduled")
        .unwrap();
    let since = scheduled_at.last_transition_time.unwrap().0;
    assert!(
        (Timestamp::try_from(cluster.clock.now()).unwrap() - since)
            .get_seconds()
            .abs()
            <= 5
    );
    pods.delete("slow", &DeleteParams::default()).await.unwrap();
    let marked = pods.get("slow").await.unwrap();
    let deadline = marked.metadata.deletion_timestamp.unwrap().0;
    let expected =
        Timestamp::try_from(cluster.clock.now()).unwrap() + std::time::Duration::from_secs(3600);
    assert!(
        (deadline - expected).get_seconds().abs() <= 2,
        "deadline {deadline} vs {expected}"
    );
}

/// A cluster whose nodes and pods exist before the physics starts (a cluster snapshot's):
/// a static node `static-a` with a Running pod and a bound pod not started yet, and `adopted`,
/// the Node of instance `i-000000aa`. Returns the cluster, with the physics taking both over.
async fn cluster_with_existing_nodes() -> Cluster {
    let (server, client, clock) = server_alone().await;
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    for (name, id) in [("static-a", "node/static-a"), ("adopted", "i-000000aa")] {
        nodes
            .create(&PostParams::default(), &annotated_node(name, id))
            .await
            .unwrap();
    }
    let bound = |name: &str, node: &str, status: Value| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": "old"}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]},
            "status": status,
        }))
        .unwrap()
    };
    let running = json!({"phase": "Running", "podIP": "10.9.9.9",
        "conditions": [{"type": "Ready", "status": "True"}]});
    for pod in [
        bound("was-running", "static-a", running.clone()),
        bound("not-started", "static-a", json!({})),
        bound("on-adopted", "adopted", running),
    ] {
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
    let mut adopted = instance("i-000000aa", "");
    adopted.state = InstanceState::Running;
    let existing = vec![
        ExistingNode {
            node: "static-a".into(),
            instance: None,
            address: Some("10.1.2.3".parse().unwrap()),
        },
        ExistingNode {
            node: "adopted".into(),
            instance: Some(adopted),
            address: None,
        },
    ];
    assert_eq!(existing[0].kubelet_id(), "node/static-a");
    assert_eq!(existing[1].kubelet_id(), "i-000000aa");
    with_physics(server, client, clock, existing)
}

/// A Ready Node of 4 CPUs whose kubelet goes by `id`, as a snapshot's node is written.
fn annotated_node(name: &str, id: &str) -> Node {
    let ready = json!([{"type": "Ready", "status": "True", "reason": "KubeletReady"}]);
    serde_json::from_value::<Node>(json!({
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name},
                     "annotations": {joinery_emulator::physics::INSTANCE_ANNOTATION: id}},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}, "conditions": ready},
    }))
    .unwrap()
}

/// An API server on the test clock, without physics yet.
async fn server_alone() -> (ApiServer, Client, Arc<Clock>) {
    let clock = Arc::new(Clock::with_speed(SPEED));
    let server = ApiServer::start(ApiServerOptions {
        clock: clock.clone(),
        ..Default::default()
    })
    .await
    .expect("server starts");
    let client = server.client().expect("client builds");
    (server, client, clock)
}

/// Starts the physics on a server whose objects are written, its kubelets taking over
/// `existing`.
fn with_physics(
    server: ApiServer,
    client: Client,
    clock: Arc<Clock>,
    existing: Vec<ExistingNode>,
) -> Cluster {
    let (cloud, events) = broadcast::channel(64);
    let physics = Physics::start(PhysicsOptions {
        existing_nodes: existing,
        ..PhysicsOptions::new(client.clone(), clock.clone())
            .with_cloud(events, Duration::from_secs(5))
    });
    Cluster {
        _server: server,
        client,
        clock,
        cloud,
        physics,
    }
}

#[tokio::test]
async fn existing_nodes_are_taken_over_their_pods_run_and_an_adopted_machine_can_go() {
    let cluster = cluster_with_existing_nodes().await;
    let pods: Api<Pod> = Api::default_namespaced(cluster.client.clone());
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    eventually("the bound pod started on the static node", || async {
        let pod = pods.get("not-started").await.ok()?;
        is_running_and_ready(&pod).then_some(pod)
    })
    .await;
    let started = pods.get("not-started").await.unwrap();
    assert_eq!(
        started.status.as_ref().and_then(|s| s.host_ip.as_deref()),
        Some("10.1.2.3"),
        "the node's own address is its pods' hostIP"
    );
    // A pod that was running already is left as it was (its IP kept).
    let kept = pods.get("was-running").await.unwrap();
    assert_eq!(
        kept.status.as_ref().and_then(|s| s.pod_ip.as_deref()),
        Some("10.9.9.9")
    );
    // The static node's kubelet answers faults like a launched machine's.
    cluster
        .physics
        .fault("static-a", NodeFault::NotReady, false)
        .await
        .expect("the taken-over kubelet takes a fault");
    // Terminating the adopted machine takes its Node and pods with it.
    let mut machine = instance("i-000000aa", "");
    machine.state = InstanceState::Terminated;
    cluster
        .cloud
        .send(CloudEvent::Terminated {
            instance: machine,
            at: cluster.clock.now(),
        })
        .unwrap();
    eventually("the adopted node and its pod gone", || async {
        (nodes.get("adopted").await.is_err() && pods.get("on-adopted").await.is_err()).then_some(())
    })
    .await;
    assert!(nodes.get("static-a").await.is_ok(), "the static node stays");
}

#[tokio::test]
async fn a_deployment_keeps_a_replica_set_of_its_template_whatever_its_name() {
    // Both are written before the workload controllers start, as a snapshot's are.
    let (server, client, clock) = server_alone().await;
    Api::<Node>::all(client.clone())
        .create(&PostParams::default(), &annotated_node("big", "node/big"))
        .await
        .unwrap();
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    let replica_sets: Api<k8s_openapi::api::apps::v1::ReplicaSet> =
        Api::default_namespaced(client.clone());
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let created = deployments
        .create(
            &PostParams::default(),
            &deployment("web", 2, "100m", json!({})),
        )
        .await
        .unwrap();
    // A ReplicaSet named the way the real controller names it (another hash), with the
    // Deployment's template and the `pod-template-hash` label, as a snapshot holds it.
    let mut template = serde_json::to_value(&created.spec.as_ref().unwrap().template).unwrap();
    template["metadata"]["labels"]["pod-template-hash"] = json!("7c9d4f8b5");
    let replica_set = json!({
        "metadata": {"name": "web-7c9d4f8b5", "labels": {"app": "web", "pod-template-hash": "7c9d4f8b5"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                          "uid": created.metadata.uid, "controller": true}]},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web", "pod-template-hash": "7c9d4f8b5"}},
                 "template": template},
    });
    replica_sets
        .create(
            &PostParams::default(),
            &serde_json::from_value(replica_set).unwrap(),
        )
        .await
        .unwrap();
    let big = ExistingNode {
        node: "big".into(),
        instance: None,
        address: None,
    };
    let cluster = with_physics(server, client, clock, vec![big]);
    eventually("two running pods", || async {
        let all = app_pods(&pods, "web").await;
        (all.len() == 2 && all.iter().all(is_running_and_ready)).then_some(())
    })
    .await;
    // Several resyncs later, still the one ReplicaSet, at two replicas.
    tokio::time::sleep(cluster.clock.to_real(Duration::from_secs(30))).await;
    let names: Vec<(String, Option<i32>)> = replica_sets
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|r| (r.metadata.name.unwrap(), r.spec.and_then(|s| s.replicas)))
        .collect();
    assert_eq!(names, [("web-7c9d4f8b5".to_string(), Some(2))]);
}
