use super::*;
use joinery_core::labels::{CAPACITY_TYPE_LABEL, HOSTNAME_LABEL, ZONE_LABEL};
use joinery_core::scheduling::{Placement, schedule};

const CATALOG: &str = r#"
- name: small
  cpu: 2
  memory: 4Gi
  overhead: {kubeReserved: {cpu: 100m, memory: 10Mi}}
  offerings:
    - {zone: zone-a, capacityType: on-demand, price: 0.1}
    - {zone: zone-b, capacityType: spot, price: 0.03}
- name: large
  cpu: 8
  memory: 32Gi
  arch: [amd64, arm64]
  labels: {example.com/family: big}
  offerings:
    - {zone: zone-a, capacityType: on-demand, price: 0.4}
"#;

const POOL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {name: default}
spec:
  template:
    spec:
      nodeClassRef: {group: example.com, kind: ExampleNodeClass, name: default}
      requirements: []
"#;

fn catalog() -> Vec<InstanceType> {
    read_catalog(CATALOG).unwrap().0
}

fn assemble(text: &str) -> Assembly {
    Snapshot::parse(text)
        .unwrap()
        .assemble(&catalog(), LabelPolicy::default())
        .unwrap()
}

#[test]
fn documents_and_lists_are_typed_and_counted() {
    let text = format!(
        "{POOL}---\napiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {{name: a}}\n  spec: {{containers: [{{name: c, resources: {{requests: {{cpu: 1}}}}}}]}}\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {{name: cm}}\n---\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: shop}}\nspec: {{selector: {{}}, template: {{}}}}\n"
    );
    let s = Snapshot::parse(&text).unwrap();
    assert_eq!(s.node_pools.len(), 1);
    assert_eq!(s.pods.len(), 1);
    assert_eq!(
        s.pods[0].origin,
        Origin {
            document: 2,
            item: Some(0)
        }
    );
    assert_eq!(
        s.pods[0].object.metadata.namespace.as_deref(),
        Some("default"),
        "namespace defaults"
    );
    assert_eq!(s.deployments.len(), 1);
    assert_eq!(s.unknown.get("v1/ConfigMap"), Some(&1));
    let a = s.assemble(&catalog(), LabelPolicy::default()).unwrap();
    assert_eq!(a.input.pods.len(), 1);
    assert_eq!(
        a.input.pods[0].requests.cpu_millis, 1000,
        "`cpu: 1` reads as the quantity 1"
    );
    assert!(
        a.notes.iter().any(|n| n.contains("1 Deployment")),
        "{:?}",
        a.notes
    );
    assert!(
        a.notes.iter().any(|n| n.contains("1 v1/ConfigMap")),
        "{:?}",
        a.notes
    );
}

#[test]
fn a_type_error_names_document_object_field_and_line() {
    let text = format!(
        "{POOL}---\napiVersion: v1\nkind: Pod\nmetadata: {{name: web, namespace: shop}}\nspec:\n  containers:\n  - name: c\n    resources:\n      requests: [1, 2]\n"
    );
    let e = Snapshot::parse(&text).unwrap_err().to_string();
    assert!(
        e.starts_with(
            "document 2 (Pod shop/web): spec.containers[0].resources.requests: invalid type"
        ),
        "{e}"
    );
    assert!(e.contains("line"), "{e}");
}

#[test]
fn list_item_errors_name_the_item() {
    let text = "kind: List\napiVersion: v1\nitems:\n- {apiVersion: v1, kind: Node, metadata: {name: n1}}\n- {apiVersion: v1, kind: Node, metadata: {name: n2}, spec: {taints: {}}}\n";
    let e = Snapshot::parse(text).unwrap_err().to_string();
    assert!(
        e.starts_with("document 1 (Node n2): items[1].spec.taints: invalid type"),
        "{e}"
    );
}

#[test]
fn missing_kind_name_and_bad_versions_are_refused() {
    let e = Snapshot::parse("apiVersion: v1\nmetadata: {name: x}\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("document 1") && e.contains("kind: missing"),
        "{e}"
    );
    let e = Snapshot::parse("apiVersion: v1\nkind: Pod\nspec: {containers: []}\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("metadata.name: missing"), "{e}");
    let e =
        Snapshot::parse("apiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata: {name: p}\n")
            .unwrap_err()
            .to_string();
    assert!(
        e.contains("(NodePool p)") && e.contains("joinery reads karpenter.sh/v1"),
        "{e}"
    );
    let e = Snapshot::parse("- a\n- b\n").unwrap_err().to_string();
    assert!(e.contains("expected a Kubernetes object"), "{e}");
    let e = Snapshot::parse("a: [\n").unwrap_err().to_string();
    assert!(e.starts_with("document 1:"), "{e}");
}

#[test]
fn the_same_object_twice_is_an_error() {
    let text = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: n1}\n";
    let e = Snapshot::parse(text).unwrap_err().to_string();
    assert!(
        e.contains("document 2 (Node n1): listed twice (first in document 1)"),
        "{e}"
    );
}

#[test]
fn bad_quantities_are_errors_naming_the_pod_and_container() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: web, resources: {requests: {cpu: lots}}}]}\n";
    let s = Snapshot::parse(text).unwrap();
    let e = s
        .assemble(&[], LabelPolicy::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("document 1 (Pod default/p): spec.containers[web].resources.requests"),
        "{e}"
    );
}

#[test]
fn pod_states_follow_the_controller_except_for_status_less_pods() {
    let pod = |v: serde_json::Value| -> LeanPod { serde_json::from_value(v).unwrap() };
    let base = serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": []}});
    assert_eq!(pod_state(&pod(base.clone())), PodState::Pending);
    let mut bound = base.clone();
    bound["spec"]["nodeName"] = "n1".into();
    assert_eq!(pod_state(&pod(bound)), PodState::Bound);
    let mut done = base.clone();
    done["status"] = serde_json::json!({"phase": "Succeeded"});
    assert_eq!(pod_state(&pod(done)), PodState::Terminal);
    let mut gated = base.clone();
    gated["spec"]["schedulingGates"] = serde_json::json!([{"name": "g"}]);
    assert!(matches!(pod_state(&pod(gated)), PodState::LeftOut(_)));
    let mut unschedulable = base.clone();
    unschedulable["status"] = serde_json::json!({"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]});
    assert_eq!(pod_state(&pod(unschedulable)), PodState::Pending);
    let mut nominated = base.clone();
    nominated["status"] = serde_json::json!({"nominatedNodeName": "n2"});
    assert_eq!(
        pod_state(&pod(nominated)),
        PodState::LeftOut("nominated to node n2".into())
    );
    let mut daemon = base;
    daemon["metadata"]["ownerReferences"] = serde_json::json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u"}]);
    assert!(matches!(pod_state(&pod(daemon)), PodState::LeftOut(_)));
}

#[test]
fn bound_pods_nodes_and_daemonsets_become_cluster_state() {
    let text = format!(
        "{POOL}---
apiVersion: v1
kind: Node
metadata: {{name: n1, labels: {{topology.kubernetes.io/zone: zone-a}}}}
status: {{allocatable: {{cpu: '4', memory: 8Gi, pods: '10'}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: running, namespace: shop}}
spec: {{nodeName: n1, containers: [{{name: c, resources: {{requests: {{cpu: '3'}}}}}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: small, namespace: shop}}
spec: {{containers: [{{name: c, resources: {{requests: {{cpu: 500m}}}}}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: big, namespace: shop}}
spec: {{containers: [{{name: c, resources: {{requests: {{cpu: '1'}}}}}}]}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: agent, namespace: kube-system}}
spec:
  selector: {{}}
  template: {{spec: {{containers: [{{name: a, resources: {{requests: {{cpu: 200m}}}}}}]}}}}
"
    );
    let a = assemble(&text);
    assert_eq!(a.input.nodes.len(), 1);
    assert_eq!(a.input.nodes[0].requested.cpu_millis, 3000);
    assert_eq!(a.input.daemons.len(), 1);
    assert_eq!(a.pods.len(), 2);
    let result = schedule(&a.input);
    // 4 CPU − 3 bound − 0.2 daemon reserved: 0.5 fits, then 1 does not.
    assert_eq!(
        result.placement("shop", "small"),
        Some(&Placement::Existing { node: "n1".into() })
    );
    assert_eq!(
        result.placement("shop", "big"),
        Some(&Placement::NewClaim { index: 0 })
    );
}

#[test]
fn active_and_terminating_statefulset_pods_of_a_deleting_node_are_scheduled_again() {
    let pod = |name: &str, owner: &str, extra: &str| {
        format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: shop, ownerReferences: [{{apiVersion: apps/v1, kind: {owner}, name: o, uid: u}}]{extra}}}\nspec: {{nodeName: old, containers: [{{name: c, resources: {{requests: {{cpu: '1'}}}}}}]}}\n"
        )
    };
    let mut text = format!(
        "{POOL}---\napiVersion: v1\nkind: Node\nmetadata: {{name: old, deletionTimestamp: '2026-01-01T00:00:00Z', finalizers: [karpenter.sh/termination], labels: {{karpenter.sh/nodepool: default}}}}\nstatus: {{allocatable: {{cpu: '4', pods: '10'}}}}\n"
    );
    text += &pod("web", "ReplicaSet", "");
    text += &pod(
        "db-0",
        "StatefulSet",
        ", deletionTimestamp: '2026-01-01T00:00:10Z'",
    );
    text += &pod(
        "leaving",
        "ReplicaSet",
        ", deletionTimestamp: '2026-01-01T00:00:10Z'",
    );
    text += &pod("agent", "DaemonSet", "");
    let a = assemble(&text);
    let batch: Vec<String> = a.pods.iter().map(|p| p.key.to_string()).collect();
    assert_eq!(batch, ["shop/web", "shop/db-0"], "{:?}", a.notes);
    assert!(
        a.notes
            .iter()
            .any(|n| n.contains("2 pod(s) of deleting nodes are scheduled again")),
        "{:?}",
        a.notes
    );
    assert!(
        !a.input.nodes.iter().any(|n| n.schedulable),
        "the deleting node takes nothing"
    );
    // Not deleting: the same pods stay where they are.
    let a = assemble(&text.replace("deletionTimestamp: '2026-01-01T00:00:00Z', ", ""));
    assert!(a.pods.is_empty(), "{:?}", a.pods);
}

#[test]
fn match_fields_pods_are_refused_with_the_controllers_reason() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: []\n  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchFields: [{key: metadata.name, operator: In, values: [n]}]}]}}}\n";
    let a = assemble(text);
    assert!(a.input.pods.is_empty());
    assert!(
        matches!(&a.pods[0].status, BatchStatus::Refused(r) if r.contains("matchFields")),
        "{:?}",
        a.pods
    );
}

#[test]
fn nodepool_limits_count_claims_and_bad_limits_name_the_pool() {
    let text = format!(
        "{POOL}  limits: {{cpu: '10'}}\n---\napiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata: {{name: c1, labels: {{karpenter.sh/nodepool: default}}}}\nspec:\n  nodeClassRef: {{group: example.com, kind: ExampleNodeClass, name: default}}\n  requirements: []\nstatus: {{capacity: {{cpu: '8'}}}}\n"
    );
    let a = assemble(&text);
    let limits = a.input.nodepools[0].limits.as_ref().unwrap();
    assert_eq!(limits.usage.cpu_millis, 8000);
    assert_eq!(limits.usage.get("nodes"), 1);
    let bad = format!("{POOL}  limits: {{cpu: lots}}\n");
    let e = Snapshot::parse(&bad)
        .unwrap()
        .assemble(&[], LabelPolicy::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("document 1 (NodePool default): spec.limits"),
        "{e}"
    );
}

#[test]
fn static_and_deleting_pools_are_left_out_with_a_note() {
    let text = format!("{POOL}  replicas: 2\n");
    let a = assemble(&text);
    assert!(a.input.nodepools.is_empty());
    assert!(
        a.notes.iter().any(|n| n.contains("static")),
        "{:?}",
        a.notes
    );
}

#[test]
fn a_nodepool_that_is_not_ready_is_left_out_and_one_without_conditions_is_kept() {
    let status = |ready: &str| {
        format!(
            "{POOL}status:\n  conditions:\n    - {{type: Ready, status: \"{ready}\", reason: NodeClassNotReady, message: class broken, lastTransitionTime: \"2026-01-01T00:00:00Z\"}}\n"
        )
    };
    let a = assemble(&status("False"));
    assert!(a.input.nodepools.is_empty());
    assert!(
        a.notes
            .iter()
            .any(|n| n.contains("NodePool default is not Ready (NodeClassNotReady: class broken)")),
        "{:?}",
        a.notes
    );
    assert_eq!(assemble(&status("True")).input.nodepools.len(), 1);
    assert_eq!(
        assemble(POOL).input.nodepools.len(),
        1,
        "never reconciled: kept"
    );
}

#[test]
fn volume_requirements_come_from_bound_volumes_and_storage_classes() {
    let text = "apiVersion: v1
kind: PersistentVolume
metadata: {name: local-1}
spec:
  local: {path: /mnt/disk}
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: kubernetes.io/hostname, operator: In, values: [node-1]}
            - {key: topology.kubernetes.io/zone, operator: In, values: [zone-a]}
        - matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [zone-b]}]
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: local, namespace: db}
spec: {volumeName: local-1}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: fast}
provisioner: example.com/csi
allowedTopologies: [{matchLabelExpressions: [{key: topology.kubernetes.io/zone, values: [zone-a, zone-c]}]}]
---
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: db}
spec:
  containers: []
  volumes:
    - {name: data, persistentVolumeClaim: {claimName: local}}
    - {name: tmp, ephemeral: {volumeClaimTemplate: {spec: {storageClassName: fast}}}}
    - {name: cfg, configMap: {name: cfg}}
";
    let s = Snapshot::parse(text).unwrap();
    let reqs = s.volume_requirements(&s.pods[0].object).unwrap();
    // Each PV term is an alternative, intersected with the StorageClass's topology; the
    // scheduler tries them in order (the second admits no zone and can never be used).
    assert_eq!(reqs.len(), 2);
    let r = &reqs[0];
    assert!(
        !r.has(HOSTNAME_LABEL),
        "a local volume's hostname is dropped"
    );
    let zone = r.get(ZONE_LABEL).unwrap();
    assert!(
        zone.has("zone-a") && !zone.has("zone-b") && !zone.has("zone-c"),
        "first PV term ∩ StorageClass: {zone:?}"
    );
    assert!(
        reqs[1].get(ZONE_LABEL).unwrap().values().is_empty(),
        "zone-b ∩ (zone-a, zone-c)"
    );
    let mut missing = s.pods[0].object.clone();
    missing.spec.as_mut().unwrap().volumes.as_mut().unwrap()[0]
        .persistent_volume_claim
        .as_mut()
        .unwrap()
        .claim_name = "gone".into();
    assert_eq!(
        s.volume_requirements(&missing).unwrap_err(),
        "PersistentVolumeClaim db/gone (volume data) is not in the snapshot"
    );
}

#[test]
fn offering_requirements_name_the_zones_and_capacity_types_sold() {
    let c = catalog();
    let small = &c[0];
    let zones = small.requirements().get(ZONE_LABEL).unwrap();
    assert!(zones.has("zone-a") && zones.has("zone-b") && !zones.has("zone-c"));
    let cts = small.requirements().get(CAPACITY_TYPE_LABEL).unwrap();
    assert!(cts.has("on-demand") && cts.has("spot"));
    let again = small.clone().with_offering_requirements();
    assert_eq!(&again, small, "idempotent");
}

#[test]
fn catalog_entries_become_instance_types() {
    let c = catalog();
    assert_eq!(c.len(), 2);
    let small = &c[0];
    assert_eq!(small.capacity().pods, 110, "pods default to 110");
    assert_eq!(small.allocatable().cpu_millis, 1900);
    assert_eq!(small.offerings().len(), 2);
    assert!(
        small
            .requirements()
            .get("node.kubernetes.io/instance-type")
            .unwrap()
            .has("small")
    );
    let large = &c[1];
    assert!(
        large
            .requirements()
            .get("kubernetes.io/arch")
            .unwrap()
            .has("arm64")
    );
    assert!(
        large
            .requirements()
            .get("example.com/family")
            .unwrap()
            .has("big")
    );
}

#[test]
fn catalog_object_form_adds_well_known_labels() {
    let text = format!(
        "wellKnownLabels: [size]\ninstanceTypes:\n{}",
        CATALOG
            .lines()
            .map(|l| format!("  {l}\n"))
            .collect::<String>()
    );
    let (types, policy) = read_catalog(&text).unwrap();
    assert!(policy.is_well_known("size"));
    assert_eq!(types.len(), 2);
}

#[test]
fn catalog_errors_name_the_entry_and_field() {
    let e = read_catalog("- {name: a, cpu: 1, memory: lots, offerings: []}\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("catalog: instanceTypes[0] (a).memory: \"lots\" is not a quantity"),
        "{e}"
    );
    let e = read_catalog(
        "- {name: a, cpu: 1, memory: 1Gi, offerings: [{zone: z, capacityType: ondemand}]}\n",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("[0] (a).offerings[0].capacityType"), "{e}");
    let e = read_catalog("- {name: a, cpu: 1, memory: 1Gi, offering: []}\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown field `offering`"), "{e}");
    let e = read_catalog("- {name: a, cpu: 1, memory: 1Gi, offerings: []}\n- {name: a, cpu: 1, memory: 1Gi, offerings: []}\n").unwrap_err().to_string();
    assert!(e.contains("[1] (a).name: listed twice"), "{e}");
}
