//! The `exoscale` plugin through the real runtime, against the fake Exoscale API
//! (`joinery_emulator::exoscale::ExoFake`): signed requests over the host's gated outgoing HTTP,
//! credentials from a granted secret, operations followed, networks attached after launch.

use crate::common;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use common::engine;
use joinery_emulator::cloud::CloudEvent;
use joinery_emulator::exoscale::{
    DEFAULT_API_KEY, DEFAULT_API_SECRET, ExoFake, ExoFakeOptions, ExoInstanceState, ExoTemplate,
    OperationState, Visibility,
};
use joinery_runtime::CallError;
use joinery_runtime::contract::{
    CloudError, CreateRequest, InstanceState, NodeClaim, NodeClass, Operator, Requirement, Resource,
};
use joinery_runtime::grants::{Grants, HttpPattern};
use joinery_runtime::manifest::PluginManifest;
use joinery_runtime::plugin::{LoadContext, LoadedPlugin, PluginBytes, PluginSource};
use joinery_runtime::services::{HostServices, StaticSecrets};
use serde_json::{Value, json};

const SECRET: &str = "exoscale-credentials";

fn services(secret: &str) -> HostServices {
    let secrets = StaticSecrets::default().with(
        SECRET,
        &[
            ("api-key", DEFAULT_API_KEY.as_bytes()),
            ("api-secret", secret.as_bytes()),
        ],
    );
    HostServices {
        secrets: Arc::new(secrets),
        ..HostServices::default()
    }
}

/// The plugin's manifest (from `plugins/exoscale/plugin.yaml`) and component (built by this
/// crate's build script), loaded the way a plugin directory is.
fn parts() -> (PluginManifest, &'static [u8]) {
    static WASM: OnceLock<Vec<u8>> = OnceLock::new();
    let text =
        std::fs::read_to_string(common::repo().join("plugins/exoscale/plugin.yaml")).unwrap();
    (
        PluginManifest::parse(&text, "exoscale").unwrap(),
        WASM.get_or_init(|| common::wasm("joinery_plugin_exoscale.wasm")),
    )
}

/// Loads the plugin, granted exactly the fake's loopback address and the secret.
///
/// The shipped `plugin.yaml` asks only for `https://api-*.exoscale.com`; a test (like a
/// simulation) adds the loopback pattern to the request, and the grant names the exact address.
fn load(fake: &ExoFake, grant_http: bool, services: HostServices) -> Arc<LoadedPlugin> {
    let (mut manifest, wasm) = parts();
    manifest
        .capabilities
        .http
        .push(HttpPattern::parse("http://127.0.0.1:*").unwrap());
    let http = if grant_http {
        format!("[\"{}\"]", fake.url())
    } else {
        "[]".to_string()
    };
    let grants = format!(
        "plugins:\n  exoscale:\n    http: {http}\n    secrets: [{SECRET}]\n    config: {{endpoint: \"{}\", zone: ch-gva-2, clusterName: test, operationTimeoutSeconds: 20}}\n",
        fake.endpoint_template()
    );
    let cx = LoadContext::new(
        engine(),
        Grants::parse(&grants, "test grants").unwrap(),
        services,
    )
    .unwrap();
    Arc::new(
        LoadedPlugin::load(
            &cx,
            PluginBytes {
                manifest,
                source: PluginSource::Builtin,
                wasm,
                compiled: None,
            },
        )
        .unwrap(),
    )
}

#[test]
fn the_component_fits_the_size_budget_and_the_manifest_asks_only_for_exoscale() {
    let (manifest, wasm) = parts();
    assert!(
        wasm.len() <= 512 * 1024,
        "exoscale is {} bytes, over the 512 KiB budget",
        wasm.len()
    );
    let node_class = manifest
        .node_class
        .expect("a cloud provider serves a NodeClass");
    assert_eq!(
        (node_class.group.as_str(), node_class.kind.as_str()),
        ("karpenter.k8s.exoscale", "ExoscaleNodeClass")
    );
    assert_eq!(
        node_class.provider_id_prefix.as_deref(),
        Some("exoscale://")
    );
    let http: Vec<&str> = manifest
        .capabilities
        .http
        .iter()
        .map(HttpPattern::as_str)
        .collect();
    assert_eq!(http, ["https://api-*.exoscale.com"]);
    assert_eq!(manifest.capabilities.secrets, [SECRET]);
}

fn plugin(fake: &ExoFake) -> Arc<LoadedPlugin> {
    load(fake, true, services(DEFAULT_API_SECRET))
}

/// Options whose operations finish on their first poll.
fn fast() -> ExoFakeOptions {
    ExoFakeOptions {
        operation_polls: 0,
        ..ExoFakeOptions::default()
    }
}

/// A fake with a security group, an anti-affinity group, an SSH key and a private network
/// `k8s-internal` (`env=prod`, plus one with `env=dev`) in two zones.
async fn start(options: ExoFakeOptions) -> ExoFake {
    let fake = ExoFake::start(options).await.unwrap();
    fake.add_security_group("k8s-nodes");
    fake.add_anti_affinity_group("spread");
    fake.add_ssh_key("ops");
    for zone in ["ch-gva-2", "de-fra-1"] {
        fake.add_private_network(zone, "k8s-internal", &[("env", "prod")]);
        fake.add_private_network(zone, "k8s-internal", &[("env", "dev")]);
    }
    fake
}

fn spec() -> Value {
    json!({
        "zones": ["ch-gva-2", "de-fra-1"],
        "templateSelectorTerms": [{"name": "Linux Ubuntu 24.04 LTS 64-bit"}],
        "diskSize": 20,
        "securityGroupSelectorTerms": [{"name": "k8s-nodes"}],
        "privateNetworkSelectorTerms": [{"name": "k8s-internal", "labels": {"env": "prod"}}],
        "antiAffinityGroupSelectorTerms": [{"name": "spread"}],
        "sshKey": "ops",
        "labels": {"team": "platform"},
        "namePrefix": "jn-",
        "userDataRenderer": {"name": "k3s"},
    })
}

fn class(spec: &Value) -> NodeClass {
    NodeClass {
        name: "default".into(),
        uid: "uid-class".into(),
        generation: 1,
        spec: spec.to_string(),
        status: "{}".into(),
    }
}

fn claim(name: &str, zone: &str, types: &[&str]) -> NodeClaim {
    let requirement = |key: &str, values: &[&str]| Requirement {
        key: key.into(),
        operator: Operator::In,
        values: values.iter().map(|v| v.to_string()).collect(),
        min_values: None,
    };
    NodeClaim {
        name: name.into(),
        uid: format!("uid-{name}"),
        node_pool: "general".into(),
        labels: vec![],
        annotations: vec![],
        taints: vec![],
        startup_taints: vec![],
        requirements: vec![
            requirement("node.kubernetes.io/instance-type", types),
            requirement("topology.kubernetes.io/zone", &[zone]),
            requirement("karpenter.sh/capacity-type", &["on-demand"]),
        ],
        resource_requests: vec![Resource {
            name: "cpu".into(),
            quantity: "500m".into(),
        }],
        provider_id: None,
    }
}

fn request(claim: NodeClaim, spec: &Value) -> CreateRequest {
    CreateRequest {
        claim,
        node_class: class(spec),
        user_data: "#!/bin/sh\necho joined\n".into(),
    }
}

fn cloud_error(result: Result<impl std::fmt::Debug, CallError>) -> CloudError {
    match result {
        Err(CallError::Cloud { error, .. }) => error,
        other => panic!("expected a classified cloud error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resolve_names_the_failing_term_and_lists_authorized_types() {
    let fake = start(fast()).await;
    let plugin = plugin(&fake);

    let resolved = plugin.resolve_node_class(&class(&spec())).await.unwrap();
    for condition in &resolved.conditions {
        assert_eq!(condition.status, "True", "{condition:?}");
    }
    let status: Value = serde_json::from_str(&resolved.status).unwrap();
    let newest = fake
        .templates()
        .into_iter()
        .filter(|t| t.zone == "de-fra-1" && t.name == "Linux Ubuntu 24.04 LTS 64-bit")
        .max_by(|a, b| a.created_at.cmp(&b.created_at))
        .unwrap();
    assert_eq!(
        status["templates"]["de-fra-1"]["id"],
        newest.id.as_str(),
        "the newest build of the zone"
    );
    assert_eq!(status["securityGroups"].as_array().unwrap().len(), 1);
    let prod = |zone: &str| {
        fake.private_networks()
            .into_iter()
            .find(|n| n.zone == zone && n.labels["env"] == "prod")
            .unwrap()
            .id
    };
    assert_eq!(
        status["privateNetworks"]["ch-gva-2"],
        json!([prod("ch-gva-2")])
    );
    assert_eq!(
        status["privateNetworks"]["de-fra-1"],
        json!([prod("de-fra-1")])
    );

    let mut broken = spec();
    broken["securityGroupSelectorTerms"] = json!([{"name": "k8s-nodes"}, {"name": "k8s-missing"}]);
    let resolved = plugin.resolve_node_class(&class(&broken)).await.unwrap();
    let sg = resolved
        .conditions
        .iter()
        .find(|c| c.type_ == "SecurityGroupsReady")
        .unwrap();
    assert_eq!(sg.status, "False");
    assert!(
        sg.message
            .contains(r#"securityGroupSelectorTerms[1] {name: "k8s-missing"}"#),
        "{}",
        sg.message
    );
    match cloud_error(
        plugin
            .create(&request(
                claim("general-nope", "de-fra-1", &["standard.small"]),
                &broken,
            ))
            .await,
    ) {
        CloudError::NodeClassNotReady(message) => {
            assert!(message.contains("k8s-missing"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(
        fake.instances().is_empty(),
        "a class that is not ready launches nothing"
    );

    // A private template only exists where it was registered.
    fake.add_template(ExoTemplate {
        id: String::new(),
        zone: "ch-gva-2".into(),
        name: "k3s-golden".into(),
        visibility: Visibility::Private,
        build: "1".into(),
        version: "1".into(),
        size: 30 << 30,
        created_at: String::new(),
        family: "ubuntu".into(),
        default_user: "ubuntu".into(),
    });
    let mut golden = spec();
    golden["templateSelectorTerms"] = json!([{"name": "k3s-golden", "visibility": "private"}]);
    let resolved = plugin.resolve_node_class(&class(&golden)).await.unwrap();
    let template = resolved
        .conditions
        .iter()
        .find(|c| c.type_ == "TemplateReady")
        .unwrap();
    assert_eq!(template.status, "False");
    assert!(
        template.message.contains("in zone de-fra-1")
            && template
                .message
                .contains("smaller than template k3s-golden"),
        "{}",
        template.message
    );

    let types = plugin.get_instance_types(&class(&spec())).await.unwrap();
    let names: Vec<&str> = types.iter().map(|t| t.name()).collect();
    assert!(
        names.contains(&"standard.medium") && names.contains(&"gpua30.small"),
        "{names:?}"
    );
    assert!(!names.contains(&"gpu3.small"), "not authorized");
    let gpu = types.iter().find(|t| t.name() == "gpua30.small").unwrap();
    assert_eq!(
        gpu.offerings()
            .0
            .iter()
            .map(|o| o.zone())
            .collect::<Vec<_>>(),
        ["ch-gva-2"]
    );
    assert_eq!(gpu.capacity().get("nvidia.com/gpu"), 1);
    assert!(
        gpu.offerings()
            .0
            .iter()
            .all(|o| o.price().is_none() && o.capacity_type() == "on-demand")
    );
    let medium = types
        .iter()
        .find(|t| t.name() == "standard.medium")
        .unwrap();
    let label = |key: &str| {
        medium
            .requirements()
            .get(key)
            .map(|r| r.values().iter().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    assert_eq!(label("karpenter.k8s.exoscale/instance-memory"), ["4096"]);
    assert_eq!(label("karpenter.k8s.exoscale/instance-cpu"), ["2"]);
    assert_eq!(
        medium.capacity().get("ephemeral-storage"),
        20 * 1024 * 1024 * 1024
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_follows_the_operation_attaches_networks_and_labels_the_instance() {
    let fake = start(ExoFakeOptions {
        operation_polls: 1,
        ..ExoFakeOptions::default()
    })
    .await;
    let mut events = fake.subscribe();
    let plugin = plugin(&fake);

    let instance = plugin
        .create(&request(
            claim(
                "general-abcde",
                "de-fra-1",
                &["standard.small", "standard.medium"],
            ),
            &spec(),
        ))
        .await
        .unwrap();
    let id = instance
        .provider_id
        .strip_prefix("exoscale://")
        .expect("exoscale:// provider ID")
        .to_string();
    assert_eq!(
        (instance.zone.as_str(), instance.instance_type.as_str()),
        ("de-fra-1", "standard.small")
    );
    assert_eq!(instance.capacity_type, "on-demand");
    assert_eq!(instance.node_claim.as_deref(), Some("general-abcde"));
    assert_eq!(instance.state, InstanceState::Pending);

    let made = fake.instance(&id).expect("the fake knows the instance");
    assert_eq!(made.name, "jn-general-abcde");
    assert_eq!(made.disk_size, 20);
    assert_eq!(made.labels["karpenter-sh_nodeclaim"], "general-abcde");
    assert_eq!(made.labels["karpenter-sh_nodepool"], "general");
    assert_eq!(made.labels["karpenter-sh_managed-by"], "test");
    assert_eq!(made.labels["karpenter-k8s-exoscale_nodeclass"], "default");
    assert!(made.labels["karpenter-k8s-exoscale_nodeclass-hash"].starts_with('h'));
    assert_eq!(made.labels["team"], "platform");
    assert_eq!(made.ssh_keys, ["ops"]);
    assert_eq!(made.security_groups, [fake.security_groups()[0].id.clone()]);
    assert_eq!(
        made.anti_affinity_groups,
        [fake.anti_affinity_groups()[0].id.clone()]
    );
    let prod = fake
        .private_networks()
        .into_iter()
        .find(|n| n.zone == "de-fra-1" && n.labels["env"] == "prod")
        .unwrap();
    assert_eq!(
        made.private_networks,
        std::slice::from_ref(&prod.id),
        "attached after launch"
    );
    assert_eq!(prod.leases[0].instance_id, id);
    let ops = fake.operations();
    assert!(
        ops.iter().all(|op| op.state == OperationState::Success),
        "every operation was followed: {ops:?}"
    );
    assert!(
        ops.iter()
            .any(|op| op.command == "create-instance" && op.polls == 1),
        "{ops:?}"
    );

    let CloudEvent::Launched(launched) = events.recv().await.unwrap() else {
        panic!("expected a launch")
    };
    assert_eq!(launched.provider_id, instance.provider_id);
    assert_eq!(
        launched.user_data, "#!/bin/sh\necho joined\n",
        "userData reaches the instance verbatim"
    );

    // A retry of the same claim returns the same instance.
    let again = plugin
        .create(&request(
            claim("general-abcde", "de-fra-1", &["standard.small"]),
            &spec(),
        ))
        .await
        .unwrap();
    assert_eq!(again.provider_id, instance.provider_id);
    assert_eq!(fake.instances().len(), 1);

    let listed = plugin.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].provider_id, instance.provider_id);
    let launched_claim = NodeClaim {
        provider_id: Some(instance.provider_id.clone()),
        ..claim("general-abcde", "de-fra-1", &[])
    };
    assert_eq!(
        plugin
            .is_drifted(&launched_claim, &class(&spec()))
            .await
            .unwrap(),
        None
    );
    let mut resized = spec();
    resized["diskSize"] = json!(40);
    assert_eq!(
        plugin
            .is_drifted(&launched_claim, &class(&resized))
            .await
            .unwrap()
            .as_deref(),
        Some("NodeClassDrift")
    );
    let mut moved = spec();
    moved["zones"] = json!(["ch-gva-2"]);
    assert_eq!(
        plugin
            .is_drifted(&launched_claim, &class(&moved))
            .await
            .unwrap()
            .as_deref(),
        Some("ZoneRemoved")
    );

    // Drift of what the class resolves to, read from its (current) status.
    let resolution = plugin.resolve_node_class(&class(&spec())).await.unwrap();
    let resolved: Value = serde_json::from_str(&resolution.status).unwrap();
    let with_status = |status: &Value| NodeClass {
        status: status.to_string(),
        ..class(&spec())
    };
    assert_eq!(
        plugin
            .is_drifted(&launched_claim, &with_status(&resolved))
            .await
            .unwrap(),
        None
    );
    let mut rebuilt = resolved.clone();
    rebuilt["templates"]["de-fra-1"]["id"] = json!("a-newer-build");
    assert_eq!(
        plugin
            .is_drifted(&launched_claim, &with_status(&rebuilt))
            .await
            .unwrap()
            .as_deref(),
        Some("TemplateDrift")
    );
    let mut regrouped = resolved.clone();
    regrouped["securityGroups"] = json!(["another-group"]);
    assert_eq!(
        plugin
            .is_drifted(&launched_claim, &with_status(&regrouped))
            .await
            .unwrap()
            .as_deref(),
        Some("SecurityGroupDrift")
    );
    let mut renetworked = resolved.clone();
    renetworked["privateNetworks"]["de-fra-1"] = json!(["another-network"]);
    assert_eq!(
        plugin
            .is_drifted(&launched_claim, &with_status(&renetworked))
            .await
            .unwrap()
            .as_deref(),
        Some("PrivateNetworkDrift")
    );
    let mut ungrouped = resolved.clone();
    ungrouped["antiAffinityGroups"] = json!([]);
    assert_eq!(
        plugin
            .is_drifted(&launched_claim, &with_status(&ungrouped))
            .await
            .unwrap()
            .as_deref(),
        Some("AntiAffinityGroupDrift")
    );

    // Labels are reconciled in place: same instance, new labels, managed ones kept.
    let mut relabelled = spec();
    relabelled["labels"] = json!({"team": "data", "cost.center/id": "c42"});
    assert_eq!(
        plugin
            .is_drifted(&launched_claim, &class(&relabelled))
            .await
            .unwrap(),
        None,
        "labels are not drift"
    );
    let updates_before = fake
        .operations()
        .iter()
        .filter(|op| op.command == "update-instance")
        .count();
    plugin
        .reconcile_instance(&launched_claim, &class(&relabelled))
        .await
        .unwrap();
    let updated = fake.instance(&id).unwrap();
    assert_eq!(updated.labels["team"], "data");
    assert_eq!(updated.labels["cost-center_id"], "c42");
    assert_eq!(updated.labels["karpenter-sh_nodeclaim"], "general-abcde");
    assert_eq!(
        updated.labels["karpenter-k8s-exoscale_nodeclass-hash"],
        made.labels["karpenter-k8s-exoscale_nodeclass-hash"]
    );
    assert_eq!(fake.instances().len(), 1, "never a replacement");
    plugin
        .reconcile_instance(&launched_claim, &class(&relabelled))
        .await
        .unwrap();
    let updates = fake
        .operations()
        .iter()
        .filter(|op| op.command == "update-instance")
        .count();
    assert_eq!(
        updates,
        updates_before + 1,
        "a second call with nothing to change sends nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_and_delete_find_the_zone_after_a_restart() {
    let fake = start(ExoFakeOptions {
        operation_deadline: Duration::from_secs(2),
        ..fast()
    })
    .await;
    let first = plugin(&fake);
    let made = first
        .create(&request(
            claim("general-fra", "de-fra-1", &["standard.medium"]),
            &spec(),
        ))
        .await
        .unwrap();

    // A fresh host: no cached zone, so the plugin searches.
    let restarted = plugin(&fake);
    let got = restarted.get(&made.provider_id).await.unwrap();
    assert_eq!(
        (got.zone.as_str(), got.instance_type.as_str()),
        ("de-fra-1", "standard.medium")
    );
    assert!(
        got.labels
            .iter()
            .any(|kv| kv.key == "topology.kubernetes.io/region" && kv.value == "de-fra-1")
    );

    restarted.delete(&made.provider_id).await.unwrap();
    let id = made.provider_id.strip_prefix("exoscale://").unwrap();
    assert_eq!(
        fake.instance(id).unwrap().state,
        ExoInstanceState::Destroying
    );
    assert_eq!(
        restarted.get(&made.provider_id).await.unwrap().state,
        InstanceState::Terminating
    );
    // Nobody polls the delete operation; the fake ends it after its deadline, and the instance is gone.
    tokio::time::sleep(Duration::from_millis(2200)).await;
    assert!(matches!(
        cloud_error(restarted.get(&made.provider_id).await),
        CloudError::NotFound(_)
    ));
    assert!(matches!(
        cloud_error(restarted.delete(&made.provider_id).await),
        CloudError::NotFound(_)
    ));
    assert!(matches!(
        cloud_error(
            restarted
                .get("exoscale://00000000-0000-4000-8000-000000000000")
                .await
        ),
        CloudError::NotFound(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capacity_quota_and_ceilings_map_to_karpenter_errors() {
    let fake = start(ExoFakeOptions {
        anti_affinity_ceiling: 1,
        ..fast()
    })
    .await;
    let plugin = plugin(&fake);

    fake.faults()
        .insufficient_capacity("standard.large", "de-fra-1");
    match cloud_error(
        plugin
            .create(&request(
                claim("general-ice", "de-fra-1", &["standard.large"]),
                &spec(),
            ))
            .await,
    ) {
        CloudError::InsufficientCapacity(ic) => {
            assert_eq!(ic.offerings.len(), 1);
            assert_eq!(
                (
                    ic.offerings[0].instance_type.as_str(),
                    ic.offerings[0].zone.as_str()
                ),
                ("standard.large", "de-fra-1")
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(fake.instances().is_empty());

    fake.faults().set_instance_quota(Some(0));
    assert!(matches!(
        cloud_error(
            plugin
                .create(&request(
                    claim("general-quota", "de-fra-1", &["standard.small"]),
                    &spec()
                ))
                .await
        ),
        CloudError::QuotaExceeded(_)
    ));
    fake.faults().set_instance_quota(None);

    // The anti-affinity group holds one instance here: the second launch is out of capacity.
    plugin
        .create(&request(
            claim("general-aag1", "ch-gva-2", &["standard.small"]),
            &spec(),
        ))
        .await
        .unwrap();
    assert!(matches!(
        cloud_error(
            plugin
                .create(&request(
                    claim("general-aag2", "ch-gva-2", &["standard.small"]),
                    &spec()
                ))
                .await
        ),
        CloudError::InsufficientCapacity(_)
    ));

    // Reads are retried twice (after Retry-After, at most 2 s); a third 429 reaches the host.
    fake.faults().throttle_next(3, Duration::from_secs(1));
    match cloud_error(
        plugin
            .create(&request(
                claim("general-slow", "ch-gva-2", &["standard.small"]),
                &spec(),
            ))
            .await,
    ) {
        CloudError::Retryable(r) => assert_eq!(r.retry_after_ms, Some(1000)),
        other => panic!("{other:?}"),
    }
    assert_eq!(fake.instances().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_that_fails_after_the_instance_exists_leaves_nothing() {
    let fake = start(fast()).await;
    let plugin = plugin(&fake);

    fake.faults().fail_after_create(1);
    match cloud_error(
        plugin
            .create(&request(
                claim("general-lost", "de-fra-1", &["standard.small"]),
                &spec(),
            ))
            .await,
    ) {
        CloudError::Retryable(r) => assert!(r.message.contains("fault"), "{}", r.message),
        other => panic!("{other:?}"),
    }
    assert!(
        fake.instances().is_empty(),
        "the instance was deleted: {:?}",
        fake.instances()
    );

    fake.faults().fail_attach(1);
    match cloud_error(
        plugin
            .create(&request(
                claim("general-net", "de-fra-1", &["standard.small"]),
                &spec(),
            ))
            .await,
    ) {
        CloudError::Retryable(r) => assert!(
            r.message.contains("attaching private network"),
            "{}",
            r.message
        ),
        other => panic!("{other:?}"),
    }
    // A transient attach failure keeps the instance (it carries the claim's labels)...
    let kept = fake.instances();
    assert_eq!(kept.len(), 1, "the instance is kept for the retry");
    assert!(kept[0].private_networks.is_empty());

    // ...and the retry attaches its network instead of launching another.
    let made = plugin
        .create(&request(
            claim("general-net", "de-fra-1", &["standard.small"]),
            &spec(),
        ))
        .await
        .unwrap();
    assert_eq!(fake.instances().len(), 1);
    assert_eq!(
        made.provider_id.strip_prefix("exoscale://").unwrap(),
        kept[0].id,
        "the same instance"
    );
    assert_eq!(
        fake.instances()[0].private_networks.len(),
        1,
        "attached on the retry"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_and_destinations_must_be_granted() {
    let fake = start(fast()).await;
    let ungranted = load(&fake, false, services(DEFAULT_API_SECRET));
    match cloud_error(ungranted.list().await) {
        CloudError::Invalid(message) => assert!(message.contains("HttpRequestDenied"), "{message}"),
        other => panic!("{other:?}"),
    }
    let wrong_secret = load(&fake, true, services("not-the-secret"));
    match cloud_error(wrong_secret.list().await) {
        CloudError::Invalid(message) => assert!(
            message.contains("403") && message.contains("signature"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    let no_secret = load(&fake, true, HostServices::default());
    match cloud_error(no_secret.list().await) {
        CloudError::Invalid(message) => assert!(message.contains(SECRET), "{message}"),
        other => panic!("{other:?}"),
    }
}

/// Exoscale's official Python client drives the fake through a whole instance lifecycle, then
/// leaves one instance labelled as the plugin labels its own and one that is not: the plugin
/// sees the first exactly as one it launched and refuses the second. Every exchange (the
/// plugin's and the client's) is judged against Exoscale's OpenAPI document.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_client_and_the_plugin_agree_on_instances() {
    use joinery_emulator::exoscale::judges::Judges;
    let Some(judges) = Judges::for_test(
        &common::repo(),
        "the_official_client_and_the_plugin_agree_on_instances",
    ) else {
        return;
    };
    let journal = tempfile::NamedTempFile::new().unwrap();
    let fake = start(ExoFakeOptions {
        operation_polls: 1,
        journal: Some(journal.path().to_path_buf()),
        ..ExoFakeOptions::default()
    })
    .await;
    let plugin = plugin(&fake);

    let own = plugin
        .create(&request(
            claim("general-plugin", "de-fra-1", &["standard.small"]),
            &spec(),
        ))
        .await
        .unwrap();
    let own_id = own
        .provider_id
        .strip_prefix("exoscale://")
        .unwrap()
        .to_string();
    let mut labels = serde_json::to_value(&fake.instance(&own_id).unwrap().labels).unwrap();
    labels["karpenter-sh_nodeclaim"] = json!("general-client");

    let fake_url = fake.url().to_string();
    let driven = tokio::task::spawn_blocking(move || {
        judges
            .drive_client(
                &fake_url,
                "de-fra-1",
                DEFAULT_API_KEY,
                DEFAULT_API_SECRET,
                &labels,
            )
            .map(|d| (d, judges))
    })
    .await
    .unwrap();
    let (driven, judges) = driven.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(driven["steps"].as_array().unwrap().len(), 11, "{driven}");
    let managed = format!("exoscale://{}", driven["managed"].as_str().unwrap());
    let unmanaged = format!("exoscale://{}", driven["unmanaged"].as_str().unwrap());

    // The client-made managed instance looks exactly like the plugin's own, claim aside.
    let theirs = plugin.get(&managed).await.unwrap();
    let ours = plugin.get(&own.provider_id).await.unwrap();
    assert_eq!(theirs.node_claim.as_deref(), Some("general-client"));
    assert_eq!(
        (
            &theirs.instance_type,
            &theirs.zone,
            &theirs.capacity_type,
            &theirs.labels,
            &theirs.state,
            &theirs.image_id
        ),
        (
            &ours.instance_type,
            &ours.zone,
            &ours.capacity_type,
            &ours.labels,
            &ours.state,
            &ours.image_id
        )
    );
    let mut their_capacity = theirs.capacity.clone();
    let mut our_capacity = ours.capacity.clone();
    their_capacity.sort_by(|a, b| a.name.cmp(&b.name));
    our_capacity.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(
        their_capacity, our_capacity,
        "same type and disk, same capacity"
    );
    let listed: Vec<String> = plugin
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.provider_id)
        .collect();
    assert!(
        listed.contains(&managed) && listed.contains(&own.provider_id),
        "{listed:?}"
    );
    assert!(
        !listed.contains(&unmanaged),
        "an unmanaged instance is never listed: {listed:?}"
    );

    // The unmanaged one is not the plugin's to read or delete.
    match cloud_error(plugin.get(&unmanaged).await) {
        CloudError::NotFound(message) => {
            assert!(message.contains("not managed by cluster test"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    match cloud_error(plugin.delete(&unmanaged).await) {
        CloudError::NotFound(_) => {}
        other => panic!("{other:?}"),
    }
    let id = unmanaged.strip_prefix("exoscale://").unwrap();
    assert!(
        fake.instance(id)
            .is_some_and(|i| i.state != ExoInstanceState::Destroying),
        "the unmanaged instance is untouched"
    );
    plugin.delete(&managed).await.unwrap();

    let verdict = judges
        .check_journals(&[journal.path().to_path_buf()])
        .unwrap();
    assert!(verdict.violations.is_empty(), "{:#?}", verdict.violations);
    for op in [
        "create-instance",
        "get-operation",
        "update-instance",
        "attach-instance-to-private-network",
        "delete-instance",
        "list-instances",
    ] {
        assert!(
            verdict.operations.get(op).is_some_and(|n| *n > 0),
            "{op} never judged: {:?}",
            verdict.operations
        );
    }
}
