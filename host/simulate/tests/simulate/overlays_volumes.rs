//! The running controller applies NodeOverlays only with the `NodeOverlay` feature gate on,
//! and places pods with volumes where their volumes are.

use std::time::{Duration, Instant};

use futures::StreamExt;
use joinery_api::NodeClaim;
use joinery_controller::Settings;
use joinery_emulator::cloud::Catalog;
use joinery_simulate::{Simulation, SimulationOptions};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

/// The objects of the overlay test: a pool over c3-4 (2 vCPU) and c3-8 (4 vCPU), an overlay
/// adding an extended resource to c3-8, and a pod asking 1 vCPU and that resource.
fn overlay_manifests() -> Vec<serde_json::Value> {
    vec![
        json!({"apiVersion": "sim.joinery.dev/v1alpha1", "kind": "SimNodeClass", "metadata": {"name": "default"},
               "spec": {"userDataRenderer": {"name": "k3s", "parameters": {"token": "t", "providerIDCommand": "cat /id"}}}}),
        json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": "c3-8-widgets"},
               "spec": {"requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c3-8"]}],
                        "capacity": {"example.com/widget": "1"}}}),
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
               "spec": {"template": {"spec": {"nodeClassRef": {"group": "sim.joinery.dev", "kind": "SimNodeClass", "name": "default"},
                        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}}}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "widget-user", "namespace": "default"},
               "spec": {"containers": [{"name": "main", "image": "pause",
                        "resources": {"requests": {"cpu": "1", "example.com/widget": "1"}, "limits": {"example.com/widget": "1"}}}]}}),
    ]
}

/// The first NodeClaim created within `simulated` time, with the given `FEATURE_GATES`.
async fn first_claim(feature_gates: &str, simulated: Duration) -> Option<NodeClaim> {
    let settings =
        Settings::from_lookup(|k| (k == "FEATURE_GATES").then(|| feature_gates.to_string()))
            .unwrap();
    let catalog: Catalog = serde_norway::from_str(
        "zones: [nova]\ninstanceTypes:\n  - {name: c3-4, cpu: 2, memory: 4Gi}\n  - {name: c3-8, cpu: 4, memory: 8Gi}\n",
    )
    .unwrap();
    let sim = Simulation::start(SimulationOptions {
        virtual_time: true,
        settings,
        catalog,
        ..Default::default()
    })
    .await
    .unwrap();
    // Watch before anything can be created: the cloud refuses the launch (it has no widgets),
    // so the claim is short-lived.
    let claims = watcher(
        Api::<NodeClaim>::all(sim.client.clone()),
        watcher::Config::default(),
    )
    .applied_objects();
    futures::pin_mut!(claims);
    for m in overlay_manifests() {
        sim.apply(&m).await.unwrap();
    }
    let first = tokio::time::timeout(sim.clock.to_real(simulated), claims.next())
        .await
        .ok()
        .flatten()
        .map(Result::unwrap);
    sim.shutdown().await;
    first
}

#[tokio::test(start_paused = true)]
async fn a_capacity_overlay_changes_the_requested_type_only_with_the_gate_on() {
    // Gate off (upstream's default): the overlay is ignored; no type has the resource.
    let off = first_claim("NodeOverlay=false", Duration::from_secs(90)).await;
    assert!(off.is_none(), "no NodeClaim without the gate: {off:?}");
    // Gate on: the overlay gives c3-8 the resource, so the claim asks for c3-8 only (the
    // cloud would otherwise launch the cheaper c3-4) and says an overlay was applied.
    let on = first_claim("NodeOverlay=true", Duration::from_secs(300))
        .await
        .expect("a NodeClaim with the gate on");
    let types: Vec<String> = on
        .spec
        .requirements
        .iter()
        .filter(|r| r.key == "node.kubernetes.io/instance-type")
        .flat_map(|r| r.values.clone().unwrap_or_default())
        .collect();
    assert_eq!(types, ["c3-8"]);
    let annotations = on.metadata.annotations.unwrap_or_default();
    assert_eq!(
        annotations
            .get("karpenter.sh/capacity-overlay-applied")
            .map(String::as_str),
        Some("true"),
        "{annotations:?}"
    );
}

#[test]
fn an_invalid_feature_gate_value_is_a_settings_error() {
    let e =
        Settings::from_lookup(|k| (k == "FEATURE_GATES").then(|| "NodeOverlay=maybe".to_string()))
            .unwrap_err();
    assert!(e.to_string().contains("FEATURE_GATES"), "{e}");
}

#[tokio::test(start_paused = true)]
async fn a_pod_with_a_zonal_volume_gets_a_node_in_the_volumes_zone() {
    let sim = Simulation::start(SimulationOptions {
        virtual_time: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let manifests = [
        json!({"apiVersion": "sim.joinery.dev/v1alpha1", "kind": "SimNodeClass", "metadata": {"name": "default"},
               "spec": {"userDataRenderer": {"name": "k3s", "parameters": {"token": "t", "providerIDCommand": "cat /id"}}}}),
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
               "spec": {"template": {"spec": {"nodeClassRef": {"group": "sim.joinery.dev", "kind": "SimNodeClass", "name": "default"},
                        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}}}}),
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "data-pv"},
               "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                        "csi": {"driver": "example.com/csi", "volumeHandle": "vol-1"},
                        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["test-zone-c"]}]}]}}}}),
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data", "namespace": "default"},
               "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}, "volumeName": "data-pv"}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "db", "namespace": "default"},
               "spec": {"containers": [{"name": "main", "image": "pause", "resources": {"requests": {"cpu": "1"}}}],
                        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}}),
    ];
    for m in &manifests {
        sim.apply(m).await.unwrap();
    }
    let nodes: Api<Node> = Api::all(sim.client.clone());
    let deadline = Instant::now() + sim.clock.to_real(Duration::from_secs(600));
    let zones = loop {
        let list = nodes.list(&ListParams::default()).await.unwrap().items;
        if !list.is_empty() {
            break list
                .iter()
                .map(|n| {
                    n.metadata
                        .labels
                        .clone()
                        .unwrap_or_default()
                        .get("topology.kubernetes.io/zone")
                        .cloned()
                        .unwrap_or_default()
                })
                .collect::<Vec<_>>();
        }
        assert!(
            Instant::now() < deadline,
            "no node was launched for the pod with a volume"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // Four zones are offered; only the volume's zone would let the pod start.
    assert_eq!(zones, ["test-zone-c"]);
    sim.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn overlays_get_validation_conditions_and_equal_weight_price_overlays_conflict() {
    let settings =
        Settings::from_lookup(|k| (k == "FEATURE_GATES").then(|| "NodeOverlay=true".to_string()))
            .unwrap();
    let sim = Simulation::start(SimulationOptions {
        virtual_time: true,
        settings,
        ..Default::default()
    })
    .await
    .unwrap();
    let overlay = |name: &str, weight: i32, price: &str, types: &[&str]| {
        json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": name},
               "spec": {"weight": weight, "price": price,
                        "requirements": [{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types}]}})
    };
    // `cheap` and `pricey` can both set the price of c3-8 at weight 5; `heavy` outranks them.
    for m in [
        overlay("cheap", 5, "0.1", &["c3-4", "c3-8"]),
        overlay("pricey", 5, "9", &["c3-8"]),
        overlay("heavy", 7, "1", &["c3-8"]),
    ] {
        sim.apply(&m).await.unwrap();
    }
    let overlays: Api<joinery_api::NodeOverlay> = Api::all(sim.client.clone());
    let deadline = Instant::now() + sim.clock.to_real(Duration::from_secs(900));
    let validation = |o: &joinery_api::NodeOverlay, type_: &str| {
        o.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == type_).cloned())
    };
    let by_name = loop {
        let list = overlays.list(&ListParams::default()).await.unwrap().items;
        if list
            .iter()
            .all(|o| validation(o, "ValidationSucceeded").is_some())
        {
            break list;
        }
        assert!(
            Instant::now() < deadline,
            "the overlays never got a ValidationSucceeded condition: {list:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    for o in &by_name {
        let name = o.metadata.name.as_deref().unwrap();
        let validated = validation(o, "ValidationSucceeded").unwrap();
        let ready = validation(o, "Ready").expect("a Ready condition");
        let expected = if name == "heavy" {
            ("True", "ValidationSucceeded")
        } else {
            ("False", "Conflict")
        };
        assert_eq!(
            (
                format!("{:?}", validated.status).as_str(),
                validated.reason.as_str()
            ),
            expected,
            "{name}: {validated:?}"
        );
        assert_eq!(
            ready.status, validated.status,
            "{name}: Ready follows ValidationSucceeded"
        );
    }
    sim.shutdown().await;
}
