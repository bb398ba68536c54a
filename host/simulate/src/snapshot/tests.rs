use std::sync::Arc;

use joinery_core::clock::Clock;
use joinery_emulator::apiserver::store::Store;
use joinery_emulator::cloud::{Catalog, SimCloud, SimCloudOptions};
use joinery_emulator::network::Network;
use joinery_emulator::physics::INSTANCE_ANNOTATION;

use super::*;

/// The shipped example snapshot.
const SHOP: &str = include_str!("../../../../examples/snapshots/shop.yaml");

fn parse(text: &str) -> Result<ClusterSnapshot, String> {
    ClusterSnapshot::parse(text, "cluster.yaml", "simcloud").map_err(|e| e.to_string())
}

fn error(text: &str) -> String {
    parse(text).expect_err("the snapshot is refused")
}

const NODE: &str = "apiVersion: v1\nkind: Node\nmetadata: {name: n1, labels: {kubernetes.io/hostname: n1}}\nstatus: {allocatable: {cpu: 4, memory: 8Gi, pods: 110}}\n";

#[test]
fn the_example_is_read_with_a_role_for_every_node_and_claim() {
    let snapshot = parse(SHOP).unwrap();
    let roles = |f: fn(&Role) -> bool| -> Vec<String> {
        snapshot
            .objects
            .iter()
            .filter(|e| f(&e.role))
            .map(|e| e.name.clone())
            .collect()
    };
    assert_eq!(
        roles(|r| matches!(r, Role::StaticNode { .. })),
        ["system-1", "system-2"]
    );
    assert_eq!(
        roles(|r| matches!(r, Role::AdoptedNode { .. })),
        ["default-7xk2p", "default-q9m4t"]
    );
    assert_eq!(snapshot.claims(), ["default-7xk2p", "default-q9m4t"]);
    // Owners before what they own, Nodes before their pods.
    let kinds: Vec<&str> = snapshot.objects.iter().map(|e| e.kind.as_str()).collect();
    let first = |kind: &str| kinds.iter().position(|k| *k == kind).unwrap();
    let last = |kind: &str| kinds.iter().rposition(|k| *k == kind).unwrap();
    assert_eq!(first("Namespace"), 0);
    assert!(last("Deployment") < first("ReplicaSet"));
    assert!(last("NodePool") < first("NodeClaim"));
    assert!(last("NodeClaim") < first("Node"));
    assert!(last("Node") < first("Pod"));
    assert_eq!(kinds.last(), Some(&"Pod"));
    assert!(
        snapshot
            .notes
            .iter()
            .any(|n| n.contains("not written") && n.contains("1 Event")),
        "{:?}",
        snapshot.notes
    );
}

/// A store with the CRDs of a simulation, and a simulated cloud with `catalog`, both on one
/// clock.
async fn cluster(catalog: Catalog) -> (Store, SimCloud) {
    let clock = Arc::new(Clock::real());
    let store = Store::with_clock(1000, clock.clone(), true);
    let crds = store
        .lookup("apiextensions.k8s.io", "v1", "customresourcedefinitions")
        .unwrap();
    let mut all: Vec<Value> = joinery_api::crds()
        .into_iter()
        .map(|c| serde_json::to_value(c).unwrap())
        .collect();
    for (_, text) in crate::simulation::NODECLASS_CRDS {
        all.push(serde_norway::from_str(text).unwrap());
    }
    for crd in all {
        store.create(&crds, None, crd).unwrap();
    }
    let cloud = SimCloud::start(SimCloudOptions {
        catalog,
        clock,
        network: Network::in_process(),
        ..Default::default()
    })
    .await
    .unwrap();
    (store, cloud)
}

fn c3_catalog() -> Catalog {
    serde_norway::from_str(
        "zones: [nova]\ninstanceTypes:\n  - {name: c3-8, cpu: 4, memory: 8Gi, offerings: [{zone: nova, capacityType: on-demand, price: 0.108}]}\n",
    )
    .unwrap()
}

fn get(store: &Store, group: &str, plural: &str, namespace: Option<&str>, name: &str) -> Value {
    let kind = store
        .kinds_at(group, "v1")
        .into_iter()
        .find(|k| k.plural == plural)
        .unwrap();
    store.get(&kind, namespace, name).unwrap()
}

#[tokio::test]
async fn seeding_adopts_karpenter_nodes_keeps_pods_running_and_points_owners_at_new_uids() {
    let (store, cloud) = cluster(c3_catalog()).await;
    let snapshot = parse(SHOP).unwrap();
    let seeded = snapshot.seed(&store, &cloud, "shop-cluster").unwrap();

    // Two adopted instances, tagged as the simcloud plugin tags its own.
    let instances = cloud.instances();
    assert_eq!(instances.len(), 2);
    let first = &instances[0];
    assert_eq!(first.tags[TAG_NODECLAIM], "default-7xk2p");
    assert_eq!(first.tags[TAG_NODEPOOL], "default");
    assert_eq!(first.tags[TAG_CLUSTER], "shop-cluster");
    assert_eq!(first.instance_type, "c3-8");
    assert_eq!(first.price_per_hour, 0.108);

    // The claim and its Node carry the instance's provider ID; the Node its kubelet's ID.
    let claim = get(&store, "karpenter.sh", "nodeclaims", None, "default-7xk2p");
    assert_eq!(claim["status"]["providerID"], first.provider_id.as_str());
    let conditions: Vec<&str> = claim["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] == "True")
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        conditions,
        ["Launched", "Registered", "Initialized", "Ready"]
    );
    let node = get(&store, "", "nodes", None, "default-7xk2p");
    assert_eq!(node["spec"]["providerID"], first.provider_id.as_str());
    assert_eq!(
        node["metadata"]["annotations"][INSTANCE_ANNOTATION],
        first.id.as_str()
    );
    // The Node's owner reference names the claim's new uid.
    assert_eq!(
        node["metadata"]["ownerReferences"][0]["uid"],
        claim["metadata"]["uid"]
    );
    let system = get(&store, "", "nodes", None, "system-1");
    assert_eq!(
        system["metadata"]["annotations"][INSTANCE_ANNOTATION],
        "node/system-1"
    );
    assert_eq!(system["spec"]["taints"][0]["key"], "dedicated");
    let ready = system["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "Ready" && c["status"] == "True");
    assert!(ready, "{system}");
    let kubelets: Vec<String> = seeded
        .existing_nodes
        .iter()
        .map(ExistingNode::kubelet_id)
        .collect();
    assert_eq!(
        kubelets,
        ["node/system-1", "node/system-2", "i-00000001", "i-00000002"]
    );

    // Running pods stay running on their node, with its address; pending ones are pending.
    let web = get(&store, "", "pods", Some("shop"), "web-6d8f7b9c5-m5t6h");
    assert_eq!(web["status"]["phase"], "Running");
    assert_eq!(web["status"]["hostIP"], "10.0.2.22");
    let replica_set = get(&store, "apps", "replicasets", Some("shop"), "web-6d8f7b9c5");
    assert_eq!(
        web["metadata"]["ownerReferences"][0]["uid"],
        replica_set["metadata"]["uid"]
    );
    let reports = get(&store, "", "pods", Some("shop"), "reports-58c9d7f6b4-k2m7p");
    assert_eq!(reports["status"]["phase"], "Pending");
    assert!(reports["status"].get("conditions").is_none(), "{reports}");

    // Server-set fields and workload status are gone; no date of the snapshot is left.
    let deployment = get(&store, "apps", "deployments", Some("shop"), "web");
    assert!(
        deployment
            .get("status")
            .is_none_or(|s| s.get("replicas").is_none())
    );
    assert!(
        deployment["metadata"]["annotations"]
            .get(LAST_APPLIED)
            .is_none()
    );
    let dated = store
        .every_object()
        .into_iter()
        .find(|(_, o)| o.to_string().contains("2025-11"));
    assert!(dated.is_none(), "a date of the snapshot is left: {dated:?}");
    assert!(
        seeded
            .notes
            .iter()
            .any(|n| n.starts_with("adopted Node default-7xk2p (NodeClaim default-7xk2p, c3-8 in nova) as instance i-00000001")),
        "{:?}",
        seeded.notes
    );
    cloud.shutdown().await;
}

#[tokio::test]
async fn a_karpenter_node_the_catalog_cannot_hold_is_refused_by_name() {
    let catalog: Catalog = serde_norway::from_str(
        "zones: [nova]\ninstanceTypes:\n  - {name: c3-4, cpu: 2, memory: 4Gi}\n",
    )
    .unwrap();
    let (store, cloud) = cluster(catalog).await;
    let e = parse(SHOP)
        .unwrap()
        .seed(&store, &cloud, "c")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("scenario cluster.yaml: document 1, items[6] (Node default-7xk2p): the simulated cloud cannot adopt this Karpenter node (NodeClaim default-7xk2p): instance type \"c3-8\" is not in the simulated cloud's catalog (it has c3-4); add it under cloud.catalog.instanceTypes"), "{e}");
    cloud.shutdown().await;
}

#[test]
fn text_that_is_not_yaml_is_refused_with_its_line() {
    let e = error("apiVersion: v1\nkind: Pod\nmetadata: {name: p\n");
    assert!(e.starts_with("scenario cluster.yaml: document 1"), "{e}");
    assert!(e.contains("line"), "{e}");
}

#[test]
fn a_kind_the_emulated_cluster_does_not_serve_is_refused_by_name() {
    let e = error(&format!(
        "{NODE}---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {{name: default}}\n"
    ));
    assert_eq!(
        e,
        "scenario cluster.yaml: document 2 (EC2NodeClass default): kind: karpenter.k8s.aws/v1 EC2NodeClass is not served by the emulated cluster (it serves the built-in kinds, the karpenter.sh kinds, CapacityBuffers and the NodeClasses of the built-in cloud plugins); leave it out of the snapshot"
    );
}

#[test]
fn a_pod_bound_to_a_node_the_snapshot_lacks_is_refused() {
    let e = error(&format!(
        "{NODE}---\napiVersion: v1\nkind: List\nitems:\n  - {{apiVersion: v1, kind: Pod, metadata: {{name: p, namespace: shop}}, spec: {{nodeName: ghost, containers: [{{name: c}}]}}}}\n"
    ));
    assert_eq!(
        e,
        "scenario cluster.yaml: document 2, items[0] (Pod shop/p): spec.nodeName: the pod is bound to Node ghost, which is not in the snapshot; add the Node (kubectl get nodes -o yaml) or leave the pod out"
    );
}

#[test]
fn the_same_object_twice_is_refused() {
    // A kind the schedule reader does not type: the simulator's own check.
    let map = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: shop}\ndata: {a: 1}\n";
    let e = error(&format!("{map}---\n{map}"));
    assert_eq!(
        e,
        "scenario cluster.yaml: document 2 (ConfigMap shop/settings): listed twice (first as document 1 (ConfigMap shop/settings)); keep one of them"
    );
    // A kind it does: its error, naming the document.
    let e = error(&format!("{NODE}---\n{NODE}"));
    assert!(
        e.contains("document 2") && e.contains("listed twice"),
        "{e}"
    );
}

#[test]
fn karpenter_nodes_need_the_simulated_cloud_and_their_labels() {
    let claim = "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {name: c1, labels: {karpenter.sh/nodepool: default}}\nspec: {nodeClassRef: {group: sim.joinery.dev, kind: SimNodeClass, name: default}, requirements: []}\nstatus: {nodeName: n1, providerID: 'aws:///i-1'}\n";
    let text = format!("{NODE}---\n{claim}");
    let e = ClusterSnapshot::parse(&text, "cluster.yaml", "exoscale")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("the Karpenter nodes n1 (with NodeClaims) can be adopted only by the simulated cloud, and this scenario's cloud.provider is exoscale"),
        "{e}"
    );
    let e = error(&text);
    assert_eq!(
        e,
        "scenario cluster.yaml: document 1 (Node n1): metadata.labels.node.kubernetes.io/instance-type: missing (on the Node and on its NodeClaim c1); the simulated cloud adopts a Karpenter node by its instance type and zone"
    );
}

#[test]
fn deleting_nodes_are_refused_and_deleting_pods_left_out() {
    let e = error(
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1, deletionTimestamp: '2025-11-20T10:00:00Z'}\n",
    );
    assert!(
        e.contains("(Node n1): metadata.deletionTimestamp: the Node is being deleted"),
        "{e}"
    );
    let snapshot = parse(&format!(
        "{NODE}---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p, deletionTimestamp: '2025-11-20T10:00:00Z'}}\nspec: {{nodeName: n1, containers: [{{name: c}}]}}\n"
    ))
    .unwrap();
    assert!(snapshot.objects.iter().all(|e| e.kind != "Pod"));
    assert!(
        snapshot
            .notes
            .iter()
            .any(|n| n == "Pod default/p is being deleted: left out")
    );
}

#[test]
fn claims_without_a_node_are_left_out_and_missing_namespaces_added() {
    let snapshot = parse(&format!(
        "{NODE}---\napiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {{name: launching}}\nspec: {{nodeClassRef: {{group: sim.joinery.dev, kind: SimNodeClass, name: default}}, requirements: []}}\n---\napiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: shop}}\nspec: {{containers: [{{name: c}}]}}\n"
    ))
    .unwrap();
    assert!(snapshot.claims().is_empty());
    assert_eq!(snapshot.objects[0].kind, "Namespace");
    assert_eq!(snapshot.objects[0].name, "shop");
    let notes = snapshot.notes.join("\n");
    assert!(
        notes.contains("NodeClaim launching has no Node in the snapshot"),
        "{notes}"
    );
    assert!(
        notes.contains("namespaces the snapshot uses but lacks, created: shop"),
        "{notes}"
    );
}
