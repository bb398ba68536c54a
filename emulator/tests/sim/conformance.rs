//! Conformance suite for the emulated API server. Every test drives the emulator through the
//! same `kube` client the host uses and names the behaviour it checks.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use joinery_emulator::{ApiServer, ApiServerOptions};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Binding, ConfigMap, Namespace, Node, Pod, Secret};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, EvictParams, GroupVersionKind, ListParams,
    Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::Status;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, Discovery};
use serde_json::json;

async fn start_with(options: ApiServerOptions) -> (ApiServer, Client) {
    let server = ApiServer::start(options).await.expect("server starts");
    let client = server.client().expect("client builds");
    (server, client)
}

async fn start() -> (ApiServer, Client) {
    start_with(ApiServerOptions::default()).await
}

fn api_status<T: std::fmt::Debug>(result: Result<T, kube::Error>) -> Box<Status> {
    match result {
        Err(kube::Error::Api(status)) => status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn config_map(name: &str, labels: &[(&str, &str)]) -> ConfigMap {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "data": {"key": "value"},
    }))
    .unwrap()
}

fn names<K: kube::Resource>(items: &[K]) -> Vec<String> {
    items
        .iter()
        .map(|item| item.meta().name.clone().unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn discovery_serves_builtin_groups_kinds_and_subresources() {
    let (_server, client) = start().await;
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    for (group, version, kind) in [
        ("", "v1", "Pod"),
        ("", "v1", "Node"),
        ("apps", "v1", "Deployment"),
        ("coordination.k8s.io", "v1", "Lease"),
        ("policy", "v1", "PodDisruptionBudget"),
        ("storage.k8s.io", "v1", "StorageClass"),
        ("events.k8s.io", "v1", "Event"),
        ("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
    ] {
        let gvk = GroupVersionKind::gvk(group, version, kind);
        assert!(
            discovery.resolve_gvk(&gvk).is_some(),
            "{kind} missing from discovery"
        );
    }
    let (pods, capabilities) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("", "v1", "Pod"))
        .unwrap();
    assert_eq!(pods.plural, "pods");
    assert_eq!(capabilities.scope, kube::discovery::Scope::Namespaced);
    let (_, node_capabilities) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("", "v1", "Node"))
        .unwrap();
    assert_eq!(node_capabilities.scope, kube::discovery::Scope::Cluster);

    let core = client.list_core_api_resources("v1").await.unwrap();
    let core_names: Vec<&str> = core.resources.iter().map(|r| r.name.as_str()).collect();
    for expected in [
        "pods/status",
        "pods/eviction",
        "pods/binding",
        "nodes/status",
    ] {
        assert!(
            core_names.contains(&expected),
            "{expected} missing from /api/v1"
        );
    }
    let eviction = core
        .resources
        .iter()
        .find(|r| r.name == "pods/eviction")
        .unwrap();
    assert_eq!(eviction.kind, "Eviction");
    assert_eq!(eviction.group.as_deref(), Some("policy"));
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.major, "1");
}

#[tokio::test]
async fn configmap_create_get_update_list_delete_round_trip() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let created = api
        .create(&PostParams::default(), &config_map("settings", &[]))
        .await
        .unwrap();
    let meta = &created.metadata;
    assert_eq!(meta.namespace.as_deref(), Some("default"));
    assert!(meta.uid.as_ref().is_some_and(|uid| uid.len() == 36));
    assert!(meta.creation_timestamp.is_some());
    let first_version: u64 = meta.resource_version.as_ref().unwrap().parse().unwrap();

    let mut fetched = api.get("settings").await.unwrap();
    assert_eq!(fetched.data.as_ref().unwrap()["key"], "value");
    fetched
        .data
        .as_mut()
        .unwrap()
        .insert("key".into(), "changed".into());
    let replaced = api
        .replace("settings", &PostParams::default(), &fetched)
        .await
        .unwrap();
    let second_version: u64 = replaced
        .metadata
        .resource_version
        .as_ref()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        second_version > first_version,
        "resourceVersion must increase"
    );
    assert_eq!(replaced.metadata.uid, created.metadata.uid);
    assert_eq!(
        api.get("settings").await.unwrap().data.unwrap()["key"],
        "changed"
    );

    let listed = api.list(&ListParams::default()).await.unwrap();
    assert_eq!(names(&listed.items), vec!["settings"]);
    let list_version: u64 = listed.metadata.resource_version.unwrap().parse().unwrap();
    assert!(list_version >= second_version);

    api.delete("settings", &DeleteParams::default())
        .await
        .unwrap();
    let status = api_status(api.get("settings").await);
    assert_eq!(status.code, 404);
    assert_eq!(status.reason, "NotFound");
}

#[tokio::test]
async fn generate_name_produces_distinct_prefixed_names() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let template: ConfigMap =
        serde_json::from_value(json!({"metadata": {"generateName": "job-"}})).unwrap();
    let a = api.create(&PostParams::default(), &template).await.unwrap();
    let b = api.create(&PostParams::default(), &template).await.unwrap();
    let (a, b) = (a.metadata.name.unwrap(), b.metadata.name.unwrap());
    assert!(a.starts_with("job-") && a.len() == "job-".len() + 5, "{a}");
    assert_ne!(a, b);
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        2
    );
}

#[tokio::test]
async fn create_of_existing_name_is_409_already_exists() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    api.create(&PostParams::default(), &config_map("once", &[]))
        .await
        .unwrap();
    let status = api_status(
        api.create(&PostParams::default(), &config_map("once", &[]))
            .await,
    );
    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "AlreadyExists");
    assert!(status.message.contains("once"));
}

#[tokio::test]
async fn update_with_stale_resource_version_is_409_conflict() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let original = api
        .create(&PostParams::default(), &config_map("contended", &[]))
        .await
        .unwrap();
    let mut first_writer = original.clone();
    first_writer.data = Some(BTreeMap::from([("key".into(), "first".into())]));
    api.replace("contended", &PostParams::default(), &first_writer)
        .await
        .unwrap();
    let mut second_writer = original;
    second_writer.data = Some(BTreeMap::from([("key".into(), "second".into())]));
    let status = api_status(
        api.replace("contended", &PostParams::default(), &second_writer)
            .await,
    );
    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "Conflict");
    assert_eq!(
        api.get("contended").await.unwrap().data.unwrap()["key"],
        "first"
    );
}

#[tokio::test]
async fn generation_bumps_on_spec_changes_but_not_status_or_metadata() {
    let (_server, client) = start().await;
    let api: Api<Deployment> = Api::default_namespaced(client);
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
        }
    }))
    .unwrap();
    let created = api
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    assert_eq!(created.metadata.generation, Some(1));

    let status_patch = Patch::Merge(json!({"status": {"replicas": 1, "readyReplicas": 1}}));
    let after_status = api
        .patch_status("web", &PatchParams::default(), &status_patch)
        .await
        .unwrap();
    assert_eq!(after_status.metadata.generation, Some(1));
    assert_eq!(after_status.status.unwrap().ready_replicas, Some(1));

    let label_patch = Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}}));
    let after_labels = api
        .patch("web", &PatchParams::default(), &label_patch)
        .await
        .unwrap();
    assert_eq!(after_labels.metadata.generation, Some(1));

    let spec_patch = Patch::Merge(json!({"spec": {"replicas": 3}}));
    let after_spec = api
        .patch("web", &PatchParams::default(), &spec_patch)
        .await
        .unwrap();
    assert_eq!(after_spec.metadata.generation, Some(2));
    assert_eq!(after_spec.spec.unwrap().replicas, Some(3));
}

#[tokio::test]
async fn label_selectors_support_every_operator() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    for (name, labels) in [
        ("a", vec![("app", "web"), ("tier", "front")]),
        ("b", vec![("app", "db"), ("tier", "back")]),
        ("c", vec![("app", "cache")]),
        ("d", vec![]),
    ] {
        api.create(&PostParams::default(), &config_map(name, &labels))
            .await
            .unwrap();
    }
    let select = |selector: &'static str| {
        let api = api.clone();
        async move {
            names(
                &api.list(&ListParams::default().labels(selector))
                    .await
                    .unwrap()
                    .items,
            )
        }
    };
    assert_eq!(select("app=web").await, vec!["a"]);
    assert_eq!(select("app==db").await, vec!["b"]);
    assert_eq!(select("app!=web").await, vec!["b", "c", "d"]);
    assert_eq!(select("app in (web,cache)").await, vec!["a", "c"]);
    assert_eq!(select("app notin (web,cache)").await, vec!["b", "d"]);
    assert_eq!(select("tier").await, vec!["a", "b"]);
    assert_eq!(select("!tier").await, vec!["c", "d"]);
    assert_eq!(select("app,!tier").await, vec!["c"]);
    let status = api_status(api.list(&ListParams::default().labels("app in (web")).await);
    assert_eq!(status.code, 400);
    assert_eq!(status.reason, "BadRequest");
}

#[tokio::test]
async fn field_selectors_filter_by_name_namespace_node_phase_and_unschedulable() {
    let (_server, client) = start().await;
    let pods: Api<Pod> = Api::all(client.clone());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "other"}})).unwrap(),
        )
        .await
        .unwrap();
    for (namespace, name, node, phase) in [
        ("default", "p1", Some("n1"), "Running"),
        ("default", "p2", None, "Pending"),
        ("other", "p3", Some("n1"), "Running"),
    ] {
        let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let mut pod = json!({"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i"}]}, "status": {"phase": phase}});
        if let Some(node) = node {
            pod["spec"]["nodeName"] = json!(node);
        }
        api.create(
            &PostParams::default(),
            &serde_json::from_value(pod).unwrap(),
        )
        .await
        .unwrap();
    }
    let select = |selector: &'static str| {
        let pods = pods.clone();
        async move {
            names(
                &pods
                    .list(&ListParams::default().fields(selector))
                    .await
                    .unwrap()
                    .items,
            )
        }
    };
    assert_eq!(select("spec.nodeName=n1").await, vec!["p1", "p3"]);
    assert_eq!(select("spec.nodeName=").await, vec!["p2"]);
    assert_eq!(select("status.phase!=Running").await, vec!["p2"]);
    assert_eq!(select("metadata.namespace=other").await, vec!["p3"]);
    assert_eq!(
        select("metadata.name=p1,metadata.namespace=default").await,
        vec!["p1"]
    );

    let nodes: Api<Node> = Api::all(client);
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "open"}})).unwrap(),
        )
        .await
        .unwrap();
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": "cordoned"}, "spec": {"unschedulable": true}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    let schedulable = nodes
        .list(&ListParams::default().fields("spec.unschedulable=false"))
        .await
        .unwrap();
    assert_eq!(names(&schedulable.items), vec!["open"]);
    let cordoned = nodes
        .list(&ListParams::default().fields("spec.unschedulable==true"))
        .await
        .unwrap();
    assert_eq!(names(&cordoned.items), vec!["cordoned"]);
}

#[tokio::test]
async fn list_chunking_with_limit_and_continue_returns_every_item_once() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    for i in 0..7 {
        api.create(
            &PostParams::default(),
            &config_map(&format!("item-{i}"), &[]),
        )
        .await
        .unwrap();
    }
    let mut seen = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    let mut first_page_version = None;
    loop {
        let mut params = ListParams::default().limit(3);
        if let Some(token) = &token {
            params = params.continue_token(token);
        }
        let page = api.list(&params).await.unwrap();
        pages += 1;
        assert!(page.items.len() <= 3);
        first_page_version.get_or_insert(page.metadata.resource_version.clone());
        assert_eq!(
            page.metadata.resource_version,
            *first_page_version.as_ref().unwrap(),
            "pages share one version"
        );
        if pages == 1 {
            assert_eq!(page.metadata.remaining_item_count, Some(4));
        }
        seen.extend(names(&page.items));
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            break;
        }
    }
    assert_eq!(pages, 3);
    let expected: Vec<String> = (0..7).map(|i| format!("item-{i}")).collect();
    assert_eq!(seen, expected);
}

#[tokio::test]
async fn merge_patch_and_json_patch_apply_and_a_failed_test_op_is_rejected() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    api.create(
        &PostParams::default(),
        &config_map("patched", &[("keep", "yes")]),
    )
    .await
    .unwrap();

    let merge = Patch::Merge(
        json!({"metadata": {"labels": {"added": "1", "keep": null}}, "data": {"extra": "x"}}),
    );
    let merged = api
        .patch("patched", &PatchParams::default(), &merge)
        .await
        .unwrap();
    let labels = merged.metadata.labels.unwrap();
    assert_eq!(labels.get("added").map(String::as_str), Some("1"));
    assert!(!labels.contains_key("keep"));
    assert_eq!(merged.data.as_ref().unwrap()["key"], "value");
    assert_eq!(merged.data.as_ref().unwrap()["extra"], "x");

    let operations: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/key", "value": "value"},
        {"op": "replace", "path": "/data/key", "value": "replaced"},
        {"op": "remove", "path": "/data/extra"}
    ]))
    .unwrap();
    let patched = api
        .patch(
            "patched",
            &PatchParams::default(),
            &Patch::Json::<()>(operations),
        )
        .await
        .unwrap();
    let data = patched.data.unwrap();
    assert_eq!(data["key"], "replaced");
    assert!(!data.contains_key("extra"));

    let failing: json_patch::Patch =
        serde_json::from_value(json!([{"op": "test", "path": "/data/key", "value": "wrong"}]))
            .unwrap();
    let status = api_status(
        api.patch(
            "patched",
            &PatchParams::default(),
            &Patch::Json::<()>(failing),
        )
        .await,
    );
    assert_eq!(status.code, 422);
    assert_eq!(
        api.get("patched").await.unwrap().data.unwrap()["key"],
        "replaced"
    );

    let stale =
        Patch::Merge(json!({"metadata": {"resourceVersion": "1"}, "data": {"key": "late"}}));
    assert_eq!(
        api_status(api.patch("patched", &PatchParams::default(), &stale).await).code,
        409
    );
}

#[tokio::test]
async fn server_side_apply_creates_then_merges_and_records_the_manager() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let params = PatchParams::apply("joinery-test");
    let applied = api
        .patch("applied", &params, &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"a": "1"}})))
        .await
        .unwrap();
    assert_eq!(applied.data.unwrap()["a"], "1");
    let reapplied = api
        .patch("applied", &params, &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"b": "2"}})))
        .await
        .unwrap();
    assert_eq!(reapplied.data.as_ref().unwrap()["b"], "2");
    let managers: Vec<String> = reapplied
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, vec!["joinery-test"]);
}

#[tokio::test]
async fn status_subresource_ignores_spec_and_main_resource_ignores_status() {
    let (_server, client) = start().await;
    let api: Api<Pod> = Api::default_namespaced(client);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "worker"},
        "spec": {"containers": [{"name": "c", "image": "original"}]},
        "status": {"phase": "Pending"}
    }))
    .unwrap();
    api.create(&PostParams::default(), &pod).await.unwrap();

    let through_status = Patch::Merge(json!({
        "spec": {"containers": [{"name": "c", "image": "sneaky"}]},
        "status": {"phase": "Running"}
    }));
    let updated = api
        .patch_status("worker", &PatchParams::default(), &through_status)
        .await
        .unwrap();
    assert_eq!(
        updated.status.as_ref().unwrap().phase.as_deref(),
        Some("Running")
    );
    assert_eq!(
        updated.spec.as_ref().unwrap().containers[0]
            .image
            .as_deref(),
        Some("original")
    );

    let through_main = Patch::Merge(
        json!({"status": {"phase": "Failed"}, "metadata": {"labels": {"seen": "yes"}}}),
    );
    let updated = api
        .patch("worker", &PatchParams::default(), &through_main)
        .await
        .unwrap();
    assert_eq!(updated.status.unwrap().phase.as_deref(), Some("Running"));
    assert_eq!(updated.metadata.labels.unwrap()["seen"], "yes");
}

#[tokio::test]
async fn finalizers_hold_a_deleted_object_until_they_are_removed() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let mut guarded = config_map("guarded", &[]);
    guarded.metadata.finalizers = Some(vec!["joinery.sh/test".into()]);
    api.create(&PostParams::default(), &guarded).await.unwrap();

    api.delete("guarded", &DeleteParams::background())
        .await
        .unwrap();
    let terminating = api.get("guarded").await.unwrap();
    assert!(
        terminating.metadata.deletion_timestamp.is_some(),
        "deletionTimestamp must be set"
    );
    assert_eq!(
        terminating.metadata.finalizers.as_deref(),
        Some(&["joinery.sh/test".to_string()][..])
    );

    let release = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    api.patch("guarded", &PatchParams::default(), &release)
        .await
        .unwrap();
    let status = api_status(api.get("guarded").await);
    assert_eq!(status.code, 404);
}

fn widget_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.joinery.sh"},
        "spec": {
            "group": "example.joinery.sh",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList", "shortNames": ["wd"]},
            "versions": [{
                "name": "v1",
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["size"],
                            "properties": {
                                "size": {"type": "integer"},
                                "color": {"type": "string", "default": "blue", "enum": ["blue", "red"]},
                                "limits": {"type": "object", "default": {}, "properties": {"cpu": {"type": "string", "default": "1"}}}
                            }
                        },
                        "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
                    }
                }}
            }]
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn crd_is_served_with_defaults_applied_and_invalid_objects_rejected() {
    let (_server, client) = start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let created = crds
        .create(&PostParams::default(), &widget_crd())
        .await
        .unwrap();
    let conditions = created.status.unwrap().conditions.unwrap_or_default();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True")
    );

    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let gvk = GroupVersionKind::gvk("example.joinery.sh", "v1", "Widget");
    let (resource, capabilities) = discovery
        .resolve_gvk(&gvk)
        .expect("Widget is discoverable once its CRD exists");
    assert_eq!(resource.plural, "widgets");
    assert_eq!(capabilities.scope, kube::discovery::Scope::Namespaced);

    let widgets: Api<DynamicObject> = Api::default_namespaced_with(client.clone(), &resource);
    let widget = DynamicObject::new("small", &resource)
        .data(json!({"spec": {"size": 2, "undeclared": true}}));
    let stored = widgets
        .create(&PostParams::default(), &widget)
        .await
        .unwrap();
    assert!(
        stored.data["spec"].get("undeclared").is_none(),
        "undeclared fields are pruned"
    );
    assert_eq!(stored.data["spec"]["color"], "blue");
    assert_eq!(stored.data["spec"]["limits"]["cpu"], "1");
    assert_eq!(stored.data["spec"]["size"], 2);

    let bad = DynamicObject::new("bad", &resource).data(json!({"spec": {"color": "green"}}));
    let status = api_status(widgets.create(&PostParams::default(), &bad).await);
    assert_eq!(status.code, 422);
    assert_eq!(status.reason, "Invalid");
    assert!(status.message.contains("spec.size"), "{}", status.message);
    assert!(status.message.contains("spec.color"), "{}", status.message);

    let resource_for_status = ApiResource::from_gvk_with_plural(&gvk, "widgets");
    let widgets: Api<DynamicObject> =
        Api::default_namespaced_with(client.clone(), &resource_for_status);
    let ready = widgets
        .patch_status(
            "small",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"ready": true}})),
        )
        .await
        .unwrap();
    assert_eq!(ready.data["status"]["ready"], true);

    crds.delete("widgets.example.joinery.sh", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(api_status(widgets.get("small").await).code, 404);
}

#[tokio::test]
async fn watch_streams_added_modified_deleted_in_version_order() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let start_version = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let stream = api
        .watch(&WatchParams::default().timeout(10), &start_version)
        .await
        .unwrap();
    let mut stream = stream.boxed();

    api.create(&PostParams::default(), &config_map("watched", &[]))
        .await
        .unwrap();
    api.create(&PostParams::default(), &config_map("ignored", &[]))
        .await
        .unwrap();
    api.patch(
        "watched",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"key": "v2"}})),
    )
    .await
    .unwrap();
    api.delete("watched", &DeleteParams::default())
        .await
        .unwrap();

    let mut seen = Vec::new();
    while seen.len() < 4 {
        let event = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let (kind, object) = match event {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            WatchEvent::Deleted(o) => ("DELETED", o),
            other => panic!("unexpected event {other:?}"),
        };
        let version: u64 = object
            .metadata
            .resource_version
            .clone()
            .unwrap()
            .parse()
            .unwrap();
        seen.push((kind, object.metadata.name.unwrap(), version));
    }
    let kinds: Vec<(&str, &str)> = seen.iter().map(|(k, n, _)| (*k, n.as_str())).collect();
    assert_eq!(
        kinds,
        vec![
            ("ADDED", "watched"),
            ("ADDED", "ignored"),
            ("MODIFIED", "watched"),
            ("DELETED", "watched")
        ]
    );
    assert!(
        seen.windows(2).all(|pair| pair[0].2 < pair[1].2),
        "versions must increase: {seen:?}"
    );
}

async fn next_event<K>(
    stream: &mut futures::stream::BoxStream<'static, Result<WatchEvent<K>, kube::Error>>,
) -> WatchEvent<K> {
    tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn watch_with_label_selector_sees_objects_enter_and_leave_the_selection() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let start_version = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = api
        .watch(
            &WatchParams::default().labels("team=a").timeout(10),
            &start_version,
        )
        .await
        .unwrap()
        .boxed();
    api.create(
        &PostParams::default(),
        &config_map("mover", &[("team", "b")]),
    )
    .await
    .unwrap();
    api.patch(
        "mover",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "a"}}})),
    )
    .await
    .unwrap();
    api.patch(
        "mover",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"team": "c"}}})),
    )
    .await
    .unwrap();
    assert!(
        matches!(next_event(&mut stream).await, WatchEvent::Added(_)),
        "moving into the selection reads as ADDED"
    );
    assert!(
        matches!(next_event(&mut stream).await, WatchEvent::Deleted(_)),
        "moving out of the selection reads as DELETED"
    );
}

/// The ConfigMaps' current version and a watch from it that asks for bookmarks, ending after
/// `timeout` seconds.
async fn watch_with_bookmarks(
    api: &Api<ConfigMap>,
    timeout: u32,
) -> (
    String,
    futures::stream::BoxStream<'static, kube::Result<WatchEvent<ConfigMap>>>,
) {
    let version = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let stream = api
        .watch(
            &WatchParams {
                bookmarks: true,
                ..WatchParams::default()
            }
            .timeout(timeout),
            &version,
        )
        .await
        .unwrap()
        .boxed();
    (version, stream)
}

#[tokio::test]
async fn watch_sends_bookmarks_when_asked() {
    let options = ApiServerOptions {
        bookmark_interval: Duration::from_millis(100),
        ..Default::default()
    };
    let (_server, client) = start_with(options).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let (version, mut stream) = watch_with_bookmarks(&api, 10).await;
    let event = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    match event {
        WatchEvent::Bookmark(bookmark) => assert_eq!(bookmark.metadata.resource_version, version),
        other => panic!("expected a bookmark, got {other:?}"),
    }
}

#[tokio::test]
async fn a_quiet_watch_with_bookmarks_never_falls_out_of_the_event_window() {
    let options = ApiServerOptions {
        event_window: 3,
        bookmark_interval: Duration::from_millis(100),
        ..Default::default()
    };
    let (_server, client) = start_with(options).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let (_, mut stream) = watch_with_bookmarks(&api, 30).await;
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(10), stream.try_next())
            .await
            .expect("an event within 10 s")
            .unwrap()
            .unwrap()
    };
    assert!(
        matches!(next().await, WatchEvent::Bookmark(_)),
        "the watch runs"
    );
    // Writes of another kind push the watch's last version out of the event window.
    let secrets: Api<Secret> = Api::default_namespaced(client);
    let mut last = 0;
    for i in 0..5 {
        let secret: Secret =
            serde_json::from_value(json!({"metadata": {"name": format!("s{i}")}})).unwrap();
        let created = secrets
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        last = created.metadata.resource_version.unwrap().parse().unwrap();
    }
    // A later bookmark carries the current version: nothing the watch selects was written.
    loop {
        match next().await {
            WatchEvent::Bookmark(b)
                if b.metadata.resource_version.parse::<u64>().unwrap() >= last =>
            {
                break;
            }
            WatchEvent::Bookmark(_) => {}
            other => panic!("expected a bookmark, got {other:?}"),
        }
    }
    api.create(&PostParams::default(), &config_map("after", &[]))
        .await
        .unwrap();
    loop {
        match next().await {
            WatchEvent::Added(cm) => {
                assert_eq!(cm.metadata.name.as_deref(), Some("after"));
                break;
            }
            WatchEvent::Bookmark(_) => {}
            other => panic!("expected the new ConfigMap, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn watch_from_a_version_older_than_the_window_gets_410_gone() {
    let options = ApiServerOptions {
        event_window: 3,
        ..Default::default()
    };
    let (server, client) = start_with(options).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let old_version = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    for i in 0..5 {
        api.create(
            &PostParams::default(),
            &config_map(&format!("churn-{i}"), &[]),
        )
        .await
        .unwrap();
    }
    let mut stream = api
        .watch(&WatchParams::default().timeout(10), &old_version)
        .await
        .unwrap()
        .boxed();
    let event = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    match event {
        WatchEvent::Error(status) => {
            assert_eq!(status.code, 410);
            assert_eq!(status.reason, "Expired");
        }
        other => panic!("expected a 410 error event, got {other:?}"),
    }
    assert_eq!(server.expired_watch_count(), 1);

    let exact = ListParams {
        resource_version: Some(old_version),
        ..ListParams::default()
    }
    .matching(kube::api::VersionMatch::Exact);
    assert_eq!(api_status(api.list(&exact).await).code, 410);
}

#[tokio::test]
async fn reflector_survives_a_forced_410_gone_and_relists() {
    let options = ApiServerOptions {
        event_window: 4,
        ..Default::default()
    };
    let (server, client) = start_with(options).await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    api.create(&PostParams::default(), &config_map("before", &[]))
        .await
        .unwrap();

    let (reader, writer) = reflector::store::<ConfigMap>();
    let (errors_tx, mut errors_rx) = tokio::sync::mpsc::unbounded_channel();
    let stream = reflector(writer, watcher(api.clone(), watcher::Config::default()))
        .default_backoff()
        .filter_map(move |event| {
            let errors_tx = errors_tx.clone();
            async move {
                match &event {
                    Err(error) => {
                        let _ = errors_tx.send(error.to_string());
                    }
                    Ok(watcher::Event::Init) => {
                        let _ = errors_tx.send("(re)list started".to_string());
                    }
                    Ok(_) => {}
                }
                event.ok()
            }
        });
    let task = tokio::spawn(async move { stream.for_each(|_| async {}).await });
    tokio::time::timeout(Duration::from_secs(10), reader.wait_until_ready())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reader.state().len(), 1);

    // Cut the watch and hold reconnections while more than the window's worth of changes happen,
    // so the reflector's last version falls out of the history.
    server.pause_watches();
    server.disconnect_watches();
    for i in 0..10 {
        api.create(
            &PostParams::default(),
            &config_map(&format!("after-{i}"), &[]),
        )
        .await
        .unwrap();
    }
    api.delete("before", &DeleteParams::default())
        .await
        .unwrap();
    server.resume_watches();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut cached = names(
            &reader
                .state()
                .iter()
                .map(|c| (**c).clone())
                .collect::<Vec<_>>(),
        );
        cached.sort();
        if cached.len() == 10 && !cached.contains(&"before".to_string()) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "reflector never caught up: {cached:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        server.expired_watch_count() >= 1,
        "the reconnecting watch must have been told 410 Gone"
    );
    let mut observed = Vec::new();
    while let Ok(entry) = errors_rx.try_recv() {
        observed.push(entry);
    }
    let gone_at = observed
        .iter()
        .position(|e| e.contains("410") || e.to_lowercase().contains("too old"))
        .unwrap_or_else(|| panic!("the watcher never surfaced the 410: {observed:?}"));
    assert_eq!(observed[0], "(re)list started", "{observed:?}");
    assert!(
        observed[gone_at..].iter().any(|e| e == "(re)list started"),
        "the watcher must re-list after the 410: {observed:?}"
    );
    task.abort();
}

#[tokio::test]
async fn errors_use_the_status_shape_with_the_right_codes() {
    let (server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let missing = api_status(api.get("absent").await);
    assert_eq!((missing.code, missing.reason.as_str()), (404, "NotFound"));
    assert_eq!(
        missing.details.as_ref().map(|d| d.name.as_str()),
        Some("absent")
    );
    let unnamed: ConfigMap = serde_json::from_value(json!({"metadata": {}})).unwrap();
    let invalid = api_status(api.create(&PostParams::default(), &unnamed).await);
    assert_eq!((invalid.code, invalid.reason.as_str()), (422, "Invalid"));

    let request = http::Request::builder()
        .method("POST")
        .uri("/api/v1/namespaces/default/configmaps/whatever")
        .body(Vec::new())
        .unwrap();
    let not_allowed = api_status(client.request_text(request).await);
    assert_eq!(
        (not_allowed.code, not_allowed.reason.as_str()),
        (405, "MethodNotAllowed")
    );
    let request = http::Request::builder()
        .method("GET")
        .uri("/api/v1/namespaces/default/pods/p/eviction")
        .body(Vec::new())
        .unwrap();
    assert_eq!(api_status(client.request_text(request).await).code, 405);
    drop(server);
}

#[tokio::test]
async fn kubeconfig_file_yields_a_working_client() {
    let (server, _) = start().await;
    let directory = tempfile::tempdir().unwrap();
    let path = directory.path().join("kubeconfig");
    server.write_kubeconfig(&path).unwrap();
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(config.default_namespace, "default");
    let client = joinery_emulator::plain_http_client(&config).unwrap();
    let namespaces: Api<Namespace> = Api::all(client);
    let listed = names(&namespaces.list(&ListParams::default()).await.unwrap().items);
    assert!(
        listed.contains(&"default".to_string()) && listed.contains(&"kube-system".to_string()),
        "{listed:?}"
    );
    let handle = server.shutdown_handle();
    handle.shutdown();
    server.shutdown().await;
}

#[tokio::test]
async fn watch_without_a_version_starts_with_synthetic_added_events() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    for name in ["existing-a", "existing-b"] {
        api.create(&PostParams::default(), &config_map(name, &[]))
            .await
            .unwrap();
    }
    let mut stream = api
        .watch(&WatchParams::default().timeout(10), "0")
        .await
        .unwrap()
        .boxed();
    let mut initial = Vec::new();
    for _ in 0..2 {
        match next_event(&mut stream).await {
            WatchEvent::Added(object) => initial.push(object.metadata.name.unwrap()),
            other => panic!("expected ADDED, got {other:?}"),
        }
    }
    assert_eq!(initial, vec!["existing-a", "existing-b"]);
    api.create(&PostParams::default(), &config_map("later", &[]))
        .await
        .unwrap();
    match next_event(&mut stream).await {
        WatchEvent::Added(object) => assert_eq!(object.metadata.name.as_deref(), Some("later")),
        other => panic!("expected ADDED for the new object, got {other:?}"),
    }
}

#[tokio::test]
async fn delete_collection_removes_only_selected_objects() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    for (name, labels) in [
        ("x1", vec![("batch", "x")]),
        ("x2", vec![("batch", "x")]),
        ("y1", vec![("batch", "y")]),
    ] {
        api.create(&PostParams::default(), &config_map(name, &labels))
            .await
            .unwrap();
    }
    api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("batch=x"),
    )
    .await
    .unwrap();
    assert_eq!(
        names(&api.list(&ListParams::default()).await.unwrap().items),
        vec!["y1"]
    );
}

#[tokio::test]
async fn create_in_a_missing_namespace_is_404_and_bad_names_are_422() {
    let (_server, client) = start().await;
    let missing: Api<ConfigMap> = Api::namespaced(client.clone(), "nowhere");
    let status = api_status(
        missing
            .create(&PostParams::default(), &config_map("c", &[]))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
    assert!(
        status.message.contains("namespaces \"nowhere\""),
        "{}",
        status.message
    );

    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let status = api_status(
        api.create(&PostParams::default(), &config_map("Not_Valid", &[]))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
}

#[tokio::test]
async fn unchanged_writes_do_not_bump_the_resource_version() {
    let (server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let created = api
        .create(&PostParams::default(), &config_map("steady", &[]))
        .await
        .unwrap();
    let replaced = api
        .replace("steady", &PostParams::default(), &created)
        .await
        .unwrap();
    assert_eq!(
        replaced.metadata.resource_version,
        created.metadata.resource_version
    );

    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let crd = crds
        .create(&PostParams::default(), &widget_crd())
        .await
        .unwrap();
    let before = server.resource_version();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let again = crds
        .replace("widgets.example.joinery.sh", &PostParams::default(), &crd)
        .await
        .unwrap();
    assert_eq!(
        again.metadata.resource_version,
        crd.metadata.resource_version
    );
    assert_eq!(server.resource_version(), before);
}

#[tokio::test]
async fn concurrent_read_modify_write_with_conflict_retries_loses_no_update() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let mut counter = config_map("counter", &[]);
    counter.data = Some(BTreeMap::from([("count".into(), "0".into())]));
    api.create(&PostParams::default(), &counter).await.unwrap();
    let mut writers = Vec::new();
    for _ in 0..8 {
        let api = api.clone();
        writers.push(tokio::spawn(async move {
            let mut conflicts = 0u32;
            loop {
                let mut current = api.get("counter").await.unwrap();
                let data = current.data.get_or_insert_default();
                let count: u32 = data["count"].parse().unwrap();
                data.insert("count".into(), (count + 1).to_string());
                match api
                    .replace("counter", &PostParams::default(), &current)
                    .await
                {
                    Ok(_) => return conflicts,
                    Err(kube::Error::Api(status)) if status.code == 409 => conflicts += 1,
                    Err(other) => panic!("unexpected error {other}"),
                }
            }
        }));
    }
    for writer in writers {
        writer.await.unwrap();
    }
    assert_eq!(
        api.get("counter").await.unwrap().data.unwrap()["count"],
        "8"
    );
}

#[tokio::test]
async fn streaming_list_watcher_receives_initial_events_then_changes() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    for name in ["s1", "s2"] {
        api.create(&PostParams::default(), &config_map(name, &[]))
            .await
            .unwrap();
    }
    let config = watcher::Config::default().streaming_lists();
    let mut events = watcher(api.clone(), config).boxed();
    let mut initial = Vec::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(5), events.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        match event {
            watcher::Event::Init => {}
            watcher::Event::InitApply(object) => initial.push(object.metadata.name.unwrap()),
            watcher::Event::InitDone => break,
            other => panic!("unexpected event before InitDone: {other:?}"),
        }
    }
    assert_eq!(initial, vec!["s1", "s2"]);
    api.create(&PostParams::default(), &config_map("s3", &[]))
        .await
        .unwrap();
    let event = tokio::time::timeout(Duration::from_secs(5), events.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    match event {
        watcher::Event::Apply(object) => assert_eq!(object.metadata.name.as_deref(), Some("s3")),
        other => panic!("expected the new object, got {other:?}"),
    }
}

fn pod(name: &str, labels: &[(&str, &str)]) -> Pod {
    let labels: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}]},
    }))
    .unwrap()
}

/// Creates a pod and reports it Running, with its Ready condition as given.
async fn running_pod(api: &Api<Pod>, name: &str, labels: &[(&str, &str)], ready: bool) {
    api.create(&PostParams::default(), &pod(name, labels))
        .await
        .unwrap();
    let status = json!({"status": {"phase": "Running", "conditions": [
        {"type": "Ready", "status": if ready { "True" } else { "False" }},
    ]}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

fn binding(pod_name: &str, node: &str) -> Binding {
    serde_json::from_value(json!({
        "metadata": {"name": pod_name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }))
    .unwrap()
}

#[tokio::test]
async fn pod_binding_sets_node_name_once_and_rejects_rebinding_and_missing_pods() {
    let (_server, client) = start().await;
    let pods: Api<Pod> = Api::default_namespaced(client);
    pods.create(&PostParams::default(), &pod("web", &[]))
        .await
        .unwrap();

    let status: Status = pods
        .create_subresource(
            "binding",
            "web",
            &PostParams::default(),
            &binding("web", "node-a"),
        )
        .await
        .unwrap();
    assert_eq!(status.code, 201);
    let bound = pods.get("web").await.unwrap();
    assert_eq!(bound.spec.unwrap().node_name.as_deref(), Some("node-a"));
    let conditions = bound.status.unwrap().conditions.unwrap();
    assert!(
        conditions
            .iter()
            .any(|c| c.type_ == "PodScheduled" && c.status == "True")
    );

    let again = pods
        .create_subresource::<_, Status>(
            "binding",
            "web",
            &PostParams::default(),
            &binding("web", "node-b"),
        )
        .await;
    let status = api_status(again);
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert!(
        status
            .message
            .contains("already assigned to node \"node-a\""),
        "{}",
        status.message
    );
    assert_eq!(
        pods.get("web")
            .await
            .unwrap()
            .spec
            .unwrap()
            .node_name
            .as_deref(),
        Some("node-a")
    );

    let missing = pods
        .create_subresource::<_, Status>(
            "binding",
            "ghost",
            &PostParams::default(),
            &binding("ghost", "node-a"),
        )
        .await;
    assert_eq!(api_status(missing).code, 404);
}

fn budget(name: &str, spec: serde_json::Value) -> PodDisruptionBudget {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

#[tokio::test]
async fn eviction_is_blocked_with_429_when_the_disruption_budget_allows_none() {
    let (_server, client) = start().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let budgets: Api<PodDisruptionBudget> = Api::default_namespaced(client);
    for name in ["web-1", "web-2", "web-3"] {
        running_pod(&pods, name, &[("app", "web")], true).await;
    }
    running_pod(&pods, "other", &[("app", "other")], true).await;
    budgets
        .create(
            &PostParams::default(),
            &budget(
                "web-pdb",
                json!({"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}),
            ),
        )
        .await
        .unwrap();
    let status = budgets.get("web-pdb").await.unwrap().status.unwrap();
    assert_eq!(
        (
            status.expected_pods,
            status.current_healthy,
            status.desired_healthy,
            status.disruptions_allowed
        ),
        (3, 3, 2, 1)
    );

    let evicted = pods.evict("web-1", &EvictParams::default()).await.unwrap();
    assert_eq!(evicted.code, 201);
    assert_eq!(api_status(pods.get("web-1").await).code, 404);
    let status = budgets.get("web-pdb").await.unwrap().status.unwrap();
    assert_eq!(
        (
            status.expected_pods,
            status.current_healthy,
            status.disruptions_allowed
        ),
        (2, 2, 0)
    );
    let condition = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "DisruptionAllowed")
        .unwrap();
    assert_eq!(
        (condition.status.as_str(), condition.reason.as_str()),
        ("False", "InsufficientPods")
    );

    let blocked = api_status(pods.evict("web-2", &EvictParams::default()).await);
    assert_eq!(
        (blocked.code, blocked.reason.as_str()),
        (429, "TooManyRequests")
    );
    assert!(
        blocked
            .message
            .starts_with("Cannot evict pod as it would violate the pod's disruption budget.")
    );
    assert!(blocked.message.contains("web-pdb"), "{}", blocked.message);
    assert!(
        pods.get("web-2").await.is_ok(),
        "a blocked eviction must not delete the pod"
    );

    // Pods no budget covers are evicted freely; missing pods are 404.
    pods.evict("other", &EvictParams::default()).await.unwrap();
    assert_eq!(api_status(pods.get("other").await).code, 404);
    assert_eq!(
        api_status(pods.evict("ghost", &EvictParams::default()).await).code,
        404
    );

    // A new healthy pod raises the allowance again.
    running_pod(&pods, "web-4", &[("app", "web")], true).await;
    assert_eq!(
        budgets
            .get("web-pdb")
            .await
            .unwrap()
            .status
            .unwrap()
            .disruptions_allowed,
        1
    );
    pods.evict("web-2", &EvictParams::default()).await.unwrap();
}

#[tokio::test]
async fn eviction_budgets_with_percentages_unready_pods_and_finalizers() {
    let (_server, client) = start().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let budgets: Api<PodDisruptionBudget> = Api::default_namespaced(client);
    for name in ["db-1", "db-2", "db-3", "db-4"] {
        running_pod(&pods, name, &[("app", "db")], true).await;
    }
    running_pod(&pods, "db-5", &[("app", "db")], false).await;
    let selector =
        json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["db"]}]});
    // maxUnavailable 25% of 5 pods rounds up to 2: desiredHealthy 3, 4 healthy, 1 disruption allowed.
    budgets
        .create(
            &PostParams::default(),
            &budget(
                "db-pdb",
                json!({"maxUnavailable": "25%", "selector": selector}),
            ),
        )
        .await
        .unwrap();
    let status = budgets.get("db-pdb").await.unwrap().status.unwrap();
    assert_eq!(
        (
            status.expected_pods,
            status.current_healthy,
            status.desired_healthy,
            status.disruptions_allowed
        ),
        (5, 4, 3, 1)
    );

    // The unready pod may go while the budget is satisfied, and it does not use up the allowance.
    pods.evict("db-5", &EvictParams::default()).await.unwrap();
    // A pod with a finalizer is only marked for deletion; it stops counting towards the budget.
    pods.patch(
        "db-1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold"]}})),
    )
    .await
    .unwrap();
    pods.evict("db-1", &EvictParams::default()).await.unwrap();
    let held = pods.get("db-1").await.unwrap();
    assert!(held.metadata.deletion_timestamp.is_some());
    let status = budgets.get("db-pdb").await.unwrap().status.unwrap();
    // 25% of the 3 remaining pods rounds up to 1.
    assert_eq!(
        (
            status.expected_pods,
            status.current_healthy,
            status.desired_healthy,
            status.disruptions_allowed
        ),
        (3, 3, 2, 1)
    );
    // Once a pod turns unready, no healthy pod may go.
    let unready = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
    pods.patch_status("db-2", &PatchParams::default(), &Patch::Merge(&unready))
        .await
        .unwrap();
    assert_eq!(
        budgets
            .get("db-pdb")
            .await
            .unwrap()
            .status
            .unwrap()
            .disruptions_allowed,
        0
    );
    let blocked = api_status(pods.evict("db-3", &EvictParams::default()).await);
    assert_eq!(
        (blocked.code, blocked.reason.as_str()),
        (429, "TooManyRequests")
    );
    assert!(
        blocked
            .message
            .contains("db-pdb needs 2 healthy pods and has 2 currently"),
        "{}",
        blocked.message
    );
}

fn owned_config_map(name: &str, owners: &[&ConfigMap], finalizers: &[&str]) -> ConfigMap {
    let references: Vec<serde_json::Value> = owners
        .iter()
        .map(|owner| {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "name": owner.metadata.name, "uid": owner.metadata.uid})
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": references, "finalizers": finalizers},
        "data": {"key": "value"},
    }))
    .unwrap()
}

#[tokio::test]
async fn garbage_collector_deletes_dependents_whose_owners_are_all_gone() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let pp = PostParams::default();
    let owner = api.create(&pp, &config_map("owner", &[])).await.unwrap();
    let other = api
        .create(&pp, &config_map("other-owner", &[]))
        .await
        .unwrap();
    api.create(&pp, &owned_config_map("child", &[&owner], &[]))
        .await
        .unwrap();
    let child = api.get("child").await.unwrap();
    api.create(&pp, &owned_config_map("grandchild", &[&child], &[]))
        .await
        .unwrap();
    api.create(
        &pp,
        &owned_config_map("held-child", &[&owner], &["example.com/hold"]),
    )
    .await
    .unwrap();
    api.create(
        &pp,
        &owned_config_map("shared-child", &[&owner, &other], &[]),
    )
    .await
    .unwrap();

    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    assert_eq!(api_status(api.get("child").await).code, 404);
    assert_eq!(
        api_status(api.get("grandchild").await).code,
        404,
        "collection cascades"
    );
    let held = api.get("held-child").await.unwrap();
    assert!(
        held.metadata.deletion_timestamp.is_some(),
        "a dependent's finalizers are respected"
    );
    assert!(
        api.get("shared-child").await.is_ok(),
        "a dependent with a live owner stays"
    );

    api.delete("other-owner", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(api_status(api.get("shared-child").await).code, 404);
    let release = json!({"metadata": {"finalizers": null}});
    api.patch(
        "held-child",
        &PatchParams::default(),
        &Patch::Merge(&release),
    )
    .await
    .unwrap();
    assert_eq!(api_status(api.get("held-child").await).code, 404);
}

#[tokio::test]
async fn garbage_collector_waits_for_an_owner_held_by_a_finalizer() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let pp = PostParams::default();
    let mut owner = config_map("owner", &[]);
    owner.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    let owner = api.create(&pp, &owner).await.unwrap();
    api.create(&pp, &owned_config_map("child", &[&owner], &[]))
        .await
        .unwrap();
    api.delete("owner", &DeleteParams::default()).await.unwrap();
    assert!(
        api.get("child").await.is_ok(),
        "the owner still exists while its finalizer holds it"
    );
    api.patch(
        "owner",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert_eq!(api_status(api.get("child").await).code, 404);
}

#[tokio::test]
async fn orphan_propagation_strips_owner_references_and_keeps_dependents() {
    let (_server, client) = start().await;
    let deployments: Api<Deployment> = Api::default_namespaced(client.clone());
    let replica_sets: Api<ReplicaSet> = Api::default_namespaced(client.clone());
    let pp = PostParams::default();
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}]}},
        },
    }))
    .unwrap();
    let replica_set = |name: &str, owner: &Deployment| -> ReplicaSet {
        serde_json::from_value(json!({
            "metadata": {"name": name, "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "Deployment", "name": owner.metadata.name,
                "uid": owner.metadata.uid, "controller": true, "blockOwnerDeletion": true,
            }]},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": deployment_template()},
        }))
        .unwrap()
    };

    let first = deployments.create(&pp, &deployment).await.unwrap();
    replica_sets
        .create(&pp, &replica_set("web-1", &first))
        .await
        .unwrap();
    deployments
        .delete("web", &DeleteParams::orphan())
        .await
        .unwrap();
    let orphaned = replica_sets.get("web-1").await.unwrap();
    assert!(
        orphaned
            .metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );

    let second = deployments.create(&pp, &deployment).await.unwrap();
    replica_sets
        .create(&pp, &replica_set("web-2", &second))
        .await
        .unwrap();
    deployments
        .delete("web", &DeleteParams::background())
        .await
        .unwrap();
    assert_eq!(api_status(replica_sets.get("web-2").await).code, 404);
    assert!(
        replica_sets.get("web-1").await.is_ok(),
        "the orphaned ReplicaSet is no longer collected"
    );
}

fn deployment_template() -> serde_json::Value {
    json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "main", "image": "registry.example/app:1"}]}})
}

#[tokio::test]
async fn garbage_collector_deletes_objects_created_with_dangling_owner_references() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let pp = PostParams::default();
    let owner = api.create(&pp, &config_map("owner", &[])).await.unwrap();
    api.delete("owner", &DeleteParams::default()).await.unwrap();
    api.create(&pp, &owned_config_map("late-child", &[&owner], &[]))
        .await
        .unwrap();
    assert_eq!(api_status(api.get("late-child").await).code, 404);
}

#[tokio::test]
async fn eviction_skips_budgets_for_pending_pods_and_refuses_pods_with_two_budgets() {
    let (_server, client) = start().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let budgets: Api<PodDisruptionBudget> = Api::default_namespaced(client);
    running_pod(&pods, "api-1", &[("app", "api")], true).await;
    pods.create(
        &PostParams::default(),
        &pod("api-pending", &[("app", "api")]),
    )
    .await
    .unwrap();
    let selector = json!({"matchLabels": {"app": "api"}});
    budgets
        .create(
            &PostParams::default(),
            &budget(
                "api-all",
                json!({"maxUnavailable": 0, "selector": selector}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(
        budgets
            .get("api-all")
            .await
            .unwrap()
            .status
            .unwrap()
            .disruptions_allowed,
        0
    );

    // A pod that is not running is evicted without consulting the budget.
    pods.evict("api-pending", &EvictParams::default())
        .await
        .unwrap();
    assert_eq!(api_status(pods.get("api-pending").await).code, 404);
    assert_eq!(
        api_status(pods.evict("api-1", &EvictParams::default()).await).code,
        429
    );

    budgets
        .create(
            &PostParams::default(),
            &budget("api-everything", json!({"selector": {}})),
        )
        .await
        .unwrap();
    let refused = api_status(pods.evict("api-1", &EvictParams::default()).await);
    assert_eq!(refused.code, 500);
    assert!(
        refused
            .message
            .contains("more than one PodDisruptionBudget"),
        "{}",
        refused.message
    );
}

#[tokio::test]
async fn delete_collection_with_orphan_propagation_keeps_dependents() {
    let (_server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    let pp = PostParams::default();
    let owner = api
        .create(&pp, &config_map("owner", &[("batch", "x")]))
        .await
        .unwrap();
    api.create(&pp, &owned_config_map("child", &[&owner], &[]))
        .await
        .unwrap();
    api.delete_collection(
        &DeleteParams::orphan(),
        &ListParams::default().labels("batch=x"),
    )
    .await
    .unwrap();
    assert_eq!(api_status(api.get("owner").await).code, 404);
    let child = api.get("child").await.unwrap();
    assert!(
        child
            .metadata
            .owner_references
            .unwrap_or_default()
            .is_empty()
    );
}

#[tokio::test]
async fn watchers_see_budget_status_follow_pod_readiness() {
    let (_server, client) = start().await;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let budgets: Api<PodDisruptionBudget> = Api::default_namespaced(client);
    running_pod(&pods, "web-1", &[("app", "web")], true).await;
    budgets
        .create(
            &PostParams::default(),
            &budget(
                "web-pdb",
                json!({"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}),
            ),
        )
        .await
        .unwrap();
    let mut stream = watcher(budgets.clone(), watcher::Config::default())
        .applied_objects()
        .boxed();
    let allowed = |b: &PodDisruptionBudget| b.status.as_ref().map(|s| s.disruptions_allowed);
    let first = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(allowed(&first), Some(0));
    running_pod(&pods, "web-2", &[("app", "web")], true).await;
    let seen = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(budget) = stream.try_next().await.unwrap() {
            if allowed(&budget) == Some(1) {
                return budget;
            }
        }
        panic!("watch ended");
    })
    .await
    .expect("the budget status update is streamed");
    assert_eq!(seen.status.unwrap().current_healthy, 2);
}

#[tokio::test]
async fn injected_error_rate_answers_500_status_for_that_verb_only() {
    let (server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    api.create(&PostParams::default(), &config_map("flaky", &[]))
        .await
        .unwrap();
    server
        .faults()
        .set_error_rate(joinery_emulator::ApiVerb::Get, 1.0);
    let status = api_status(api.get("flaky").await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (500, "InternalError")
    );
    assert!(status.message.contains("injected"), "{}", status.message);
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        1,
        "lists are unaffected"
    );
    server
        .faults()
        .set_error_rate(joinery_emulator::ApiVerb::Get, 0.5);
    let mut failures = 0;
    for _ in 0..40 {
        if api.get("flaky").await.is_err() {
            failures += 1;
        }
    }
    assert!((8..=32).contains(&failures), "about half fail: {failures}");
    server.faults().clear();
    api.get("flaky").await.expect("no faults after clear");
}

#[tokio::test]
async fn injected_latency_delays_resource_requests_but_not_discovery() {
    let (server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client.clone());
    server.faults().set_latency(Duration::from_millis(150));
    let started = std::time::Instant::now();
    api.list(&ListParams::default()).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(140),
        "{:?}",
        started.elapsed()
    );
    let started = std::time::Instant::now();
    client.apiserver_version().await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(140),
        "discovery is not delayed"
    );
}

#[tokio::test]
async fn injected_throttling_answers_429_with_retry_after_then_recovers() {
    let (server, client) = start().await;
    let api: Api<ConfigMap> = Api::default_namespaced(client);
    server
        .faults()
        .throttle_next(2, Duration::from_millis(1500));
    let status = api_status(api.get("any").await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (429, "TooManyRequests")
    );
    assert_eq!(status.details.map(|d| d.retry_after_seconds), Some(2));

    // The header, as a raw client sees it.
    use http_body_util::BodyExt;
    let raw = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build_http::<http_body_util::Empty<bytes::Bytes>>();
    let uri: http::Uri = format!("{}/api/v1/namespaces/default/configmaps", server.url())
        .parse()
        .unwrap();
    let response = raw.get(uri.clone()).await.unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "2");
    let _ = response.into_body().collect().await;

    assert_eq!(
        raw.get(uri).await.unwrap().status(),
        200,
        "only the next two requests are throttled"
    );
    assert_eq!(api_status(api.get("any").await).code, 404);
}

/// The karpenter.sh CRDs: the ones Joinery serves, or upstream Karpenter's verbatim copies.
fn karpenter_crds(upstream: bool) -> Vec<CustomResourceDefinition> {
    if !upstream {
        return joinery_api::crds();
    }
    [
        include_str!("../../../host/api/tests/fixtures/upstream/karpenter.sh_nodepools.yaml"),
        include_str!("../../../host/api/tests/fixtures/upstream/karpenter.sh_nodeclaims.yaml"),
        include_str!("../../../host/api/tests/fixtures/upstream/karpenter.sh_nodeoverlays.yaml"),
    ]
    .iter()
    .map(|text| serde_norway::from_str(text).expect("upstream CRD parses"))
    .collect()
}

/// Installs the karpenter.sh CRDs the way a cluster gets them: created through the API.
async fn install_karpenter_crds(client: &Client, upstream: bool) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in karpenter_crds(upstream) {
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("CRD is created");
    }
}

/// The cluster-scoped API of a karpenter.sh kind.
fn karpenter_api(client: &Client, version: &str, kind: &str) -> Api<DynamicObject> {
    let plural = format!("{}s", kind.to_lowercase());
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("karpenter.sh", version, kind),
        &plural,
    );
    Api::all_with(client.clone(), &resource)
}

fn dynamic(object: serde_json::Value) -> DynamicObject {
    serde_json::from_value(object).expect("a Kubernetes object")
}

/// A NodePool a real API server accepts.
fn valid_node_pool(name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {"team": "web"}},
                "spec": {
                    "nodeClassRef": {"group": "sim.joinery.dev", "kind": "SimNodeClass", "name": "default"},
                    "requirements": [
                        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                        {"key": "example.com/cpu", "operator": "Gt", "values": ["2"]}
                    ],
                    "expireAfter": "720h"
                }
            },
            "disruption": {"consolidateAfter": "30s", "budgets": [{"nodes": "10%"}, {"nodes": "0", "schedule": "@daily", "duration": "10m"}]},
            "limits": {"cpu": "100"}
        }
    })
}

/// NodePools a real API server refuses, each with the one problem it reports.
fn invalid_node_pools() -> Vec<(&'static str, serde_json::Value, &'static str)> {
    let with = |pointer: &str, value: serde_json::Value| {
        let mut pool = valid_node_pool("x");
        *pool
            .pointer_mut(pointer)
            .expect("the field exists in the valid pool") = value;
        pool
    };
    let requirement = |key: &str, operator: &str, values: serde_json::Value| {
        with(
            "/spec/template/spec/requirements",
            json!([{"key": key, "operator": operator, "values": values}]),
        )
    };
    vec![
        (
            "in-without-values",
            requirement("topology.kubernetes.io/zone", "In", json!([])),
            "spec.template.spec.requirements: Invalid value: \"array\": requirements with operator 'In' must have a value defined",
        ),
        (
            "gt-with-two-values",
            requirement("example.com/cpu", "Gt", json!(["2", "4"])),
            "spec.template.spec.requirements: Invalid value: \"array\": requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single \
             positive integer value",
        ),
        (
            "gt-not-an-integer",
            requirement("example.com/cpu", "Gt", json!(["two"])),
            "spec.template.spec.requirements: Invalid value: \"array\": strconv.ParseInt: parsing \"two\": invalid syntax evaluating rule: \
             requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
        ),
        (
            "lt-negative",
            requirement("example.com/cpu", "Lt", json!(["-1"])),
            "spec.template.spec.requirements: Invalid value: \"array\": requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single \
             positive integer value",
        ),
        (
            "requires-the-nodepool-label",
            requirement("karpenter.sh/nodepool", "In", json!(["other"])),
            "spec.template.spec.requirements[0].key: Invalid value: \"string\": label \"karpenter.sh/nodepool\" is restricted",
        ),
        (
            "requires-the-hostname",
            requirement("kubernetes.io/hostname", "In", json!(["node-a"])),
            "spec.template.spec.requirements[0].key: Invalid value: \"string\": label \"kubernetes.io/hostname\" is restricted",
        ),
        (
            "requires-a-karpenter-label",
            requirement("karpenter.sh/custom", "Exists", json!([])),
            "spec.template.spec.requirements[0].key: Invalid value: \"string\": label domain \"karpenter.sh\" is restricted",
        ),
        (
            "labels-the-nodepool",
            with(
                "/spec/template/metadata/labels",
                json!({"karpenter.sh/nodepool": "other"}),
            ),
            "spec.template.metadata.labels: Invalid value: \"object\": label \"karpenter.sh/nodepool\" is restricted",
        ),
        (
            "schedule-without-duration",
            with(
                "/spec/disruption/budgets",
                json!([{"nodes": "1", "schedule": "@daily"}]),
            ),
            "spec.disruption.budgets: Invalid value: \"array\": 'schedule' must be set with 'duration'",
        ),
        (
            "expire-after-in-days",
            with("/spec/template/spec/expireAfter", json!("30d")),
            "spec.template.spec.expireAfter: Invalid value: \"30d\": spec.template.spec.expireAfter in body should match \
             '^(([0-9]+(s|m|h))+|Never)$'",
        ),
        (
            "consolidate-after-in-words",
            with("/spec/disruption/consolidateAfter", json!("soon")),
            "spec.disruption.consolidateAfter: Invalid value: \"soon\": spec.disruption.consolidateAfter in body should match \
             '^(([0-9]+(s|m|h))+|Never)$'",
        ),
    ]
}

async fn refused_node_pools_are_refused_as_on_a_real_cluster(upstream: bool) {
    let (_server, client) = start().await;
    install_karpenter_crds(&client, upstream).await;
    let pools = karpenter_api(&client, "v1", "NodePool");
    pools
        .create(&PostParams::default(), &dynamic(valid_node_pool("valid")))
        .await
        .expect("the valid pool is accepted");
    for (name, mut pool, expected) in invalid_node_pools() {
        pool["metadata"]["name"] = name.into();
        let status = api_status(pools.create(&PostParams::default(), &dynamic(pool)).await);
        assert_eq!(
            (status.code, status.reason.as_str()),
            (422, "Invalid"),
            "{name}: {}",
            status.message
        );
        assert_eq!(
            status.message,
            format!("NodePool.karpenter.sh \"{name}\" is invalid: {expected}"),
            "{name} (upstream CRDs: {upstream})"
        );
        assert_eq!(
            api_status(pools.get(name).await).code,
            404,
            "{name} was not stored"
        );
    }
}

#[tokio::test]
async fn node_pools_a_real_api_server_refuses_are_refused_with_its_messages() {
    refused_node_pools_are_refused_as_on_a_real_cluster(false).await;
}

#[tokio::test]
async fn node_pools_are_validated_against_the_upstream_karpenter_crds_too() {
    refused_node_pools_are_refused_as_on_a_real_cluster(true).await;
}

#[tokio::test]
async fn every_problem_of_a_node_pool_is_reported_and_type_errors_skip_the_rules() {
    let (_server, client) = start().await;
    install_karpenter_crds(&client, false).await;
    let pools = karpenter_api(&client, "v1", "NodePool");
    let mut pool = valid_node_pool("many-problems");
    pool["spec"]["template"]["spec"]["expireAfter"] = "forever".into();
    pool["spec"]["template"]["spec"]["requirements"] =
        json!([{"key": "kubernetes.io/hostname", "operator": "In", "values": []}]);
    let status = api_status(
        pools
            .create(&PostParams::default(), &dynamic(pool.clone()))
            .await,
    );
    assert_eq!(status.code, 422);
    for expected in [
        "spec.template.spec.expireAfter: Invalid value: \"forever\"",
        "spec.template.spec.requirements: Invalid value: \"array\": requirements with operator 'In' must have a value defined",
        "spec.template.spec.requirements[0].key: Invalid value: \"string\": label \"kubernetes.io/hostname\" is restricted",
    ] {
        assert!(
            status.message.contains(expected),
            "missing {expected:?} in {}",
            status.message
        );
    }
    let causes = status
        .details
        .as_ref()
        .map(|d| d.causes.len())
        .unwrap_or_default();
    assert_eq!(causes, 3, "{:?}", status.details);

    // A wrong type is a blocking problem: the CEL rules are not evaluated.
    pool["spec"]["template"]["spec"]["expireAfter"] = "720h".into();
    pool["spec"]["weight"] = "heavy".into();
    let status = api_status(pools.create(&PostParams::default(), &dynamic(pool)).await);
    assert!(
        status
            .message
            .contains("spec.weight: Invalid value: \"heavy\": must be of type integer"),
        "{}",
        status.message
    );
    assert!(
        status
            .message
            .contains("some validation rules were not checked because the object was invalid"),
        "{}",
        status.message
    );
    assert!(!status.message.contains("restricted"), "{}", status.message);
}

#[tokio::test]
async fn node_claim_spec_is_immutable_and_node_pool_transition_rules_apply_on_update() {
    let (_server, client) = start().await;
    install_karpenter_crds(&client, false).await;
    let claims = karpenter_api(&client, "v1", "NodeClaim");
    let claim = json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "default-abcde", "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {
            "nodeClassRef": {"group": "sim.joinery.dev", "kind": "SimNodeClass", "name": "default"},
            "requirements": [
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]},
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c1.large"]}
            ]
        }
    });
    let created = claims
        .create(&PostParams::default(), &dynamic(claim))
        .await
        .expect("a valid NodeClaim is accepted");

    let mut changed = created.clone();
    changed.data["spec"]["requirements"][1]["values"] = json!(["c1.xlarge"]);
    let status = api_status(
        claims
            .replace("default-abcde", &PostParams::default(), &changed)
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        "NodeClaim.karpenter.sh \"default-abcde\" is invalid: spec: Invalid value: \"object\": spec is immutable"
    );
    let patch = Patch::Merge(json!({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}));
    assert_eq!(
        api_status(
            claims
                .patch("default-abcde", &PatchParams::default(), &patch)
                .await
        )
        .code,
        422,
        "a patch is an update too"
    );

    let mut relabelled = created.clone();
    relabelled
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("team".into(), "web".into());
    let updated = claims
        .replace("default-abcde", &PostParams::default(), &relabelled)
        .await
        .expect("a metadata change is accepted");
    assert_eq!(updated.metadata.labels.unwrap()["team"], "web");
    let status_patch = Patch::Merge(json!({"status": {"providerID": "simcloud://i-1"}}));
    claims
        .patch_status("default-abcde", &PatchParams::default(), &status_patch)
        .await
        .expect("a status update is accepted");

    let pools = karpenter_api(&client, "v1", "NodePool");
    pools
        .create(&PostParams::default(), &dynamic(valid_node_pool("default")))
        .await
        .unwrap();
    let kind_change = Patch::Merge(
        json!({"spec": {"template": {"spec": {"nodeClassRef": {"kind": "OtherNodeClass"}}}}}),
    );
    let status = api_status(
        pools
            .patch("default", &PatchParams::default(), &kind_change)
            .await,
    );
    assert!(
        status.message.ends_with("spec.template.spec.nodeClassRef: Invalid value: \"object\": nodeClassRef.kind is immutable"),
        "{}",
        status.message
    );
    let to_static = Patch::Merge(json!({"spec": {"replicas": 3, "limits": null}}));
    let status = api_status(
        pools
            .patch("default", &PatchParams::default(), &to_static)
            .await,
    );
    assert!(
        status.message.ends_with(
            "spec: Invalid value: \"object\": Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) provisioning modes"
        ),
        "{}",
        status.message
    );
    // A static pool may be created, and then keeps its replicas.
    let mut static_pool = valid_node_pool("static");
    static_pool["spec"]["replicas"] = 2.into();
    static_pool["spec"]["limits"] = json!({"nodes": "5"});
    pools
        .create(&PostParams::default(), &dynamic(static_pool))
        .await
        .expect("a static pool is accepted");
    let scaled = pools
        .patch(
            "static",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .unwrap();
    assert_eq!(scaled.data["spec"]["replicas"], 4);
    let name_change =
        Patch::Merge(json!({"spec": {"template": {"spec": {"nodeClassRef": {"name": "other"}}}}}));
    pools
        .patch("static", &PatchParams::default(), &name_change)
        .await
        .expect("nodeClassRef.name may change");
}

/// Every karpenter.sh object in `value` (a document, or the objects nested in a scenario).
fn karpenter_objects(value: &serde_json::Value, found: &mut Vec<serde_json::Value>) {
    match value {
        serde_json::Value::Object(map) => {
            if map
                .get("apiVersion")
                .and_then(|v| v.as_str())
                .is_some_and(|v| v.starts_with("karpenter.sh/"))
                && map.contains_key("kind")
                // An owner reference names a kind too, but is no object.
                && map.contains_key("metadata")
            {
                found.push(value.clone());
            } else {
                map.values().for_each(|v| karpenter_objects(v, found));
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| karpenter_objects(v, found)),
        _ => {}
    }
}

fn yaml_files(dir: &std::path::Path, files: &mut Vec<std::path::PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            yaml_files(&path, files);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            files.push(path);
        }
    }
}

#[tokio::test]
async fn every_shipped_karpenter_example_is_accepted() {
    let (_server, client) = start().await;
    install_karpenter_crds(&client, false).await;
    let mut files = Vec::new();
    yaml_files(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples"),
        &mut files,
    );
    let mut kinds = BTreeMap::<String, usize>::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let mut objects = Vec::new();
        for document in serde_norway::Deserializer::from_str(&text) {
            let value: serde_json::Value = serde::Deserialize::deserialize(document)
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
            karpenter_objects(&value, &mut objects);
        }
        for object in objects {
            let kind = object["kind"].as_str().unwrap().to_string();
            let version = object["apiVersion"]
                .as_str()
                .unwrap()
                .trim_start_matches("karpenter.sh/")
                .to_string();
            let name = object["metadata"]["name"].as_str().unwrap().to_string();
            let api = karpenter_api(&client, &version, &kind);
            if let Err(e) = api.create(&PostParams::default(), &dynamic(object)).await {
                panic!("{} {kind}/{name} is refused: {e}", file.display());
            }
            api.delete(&name, &DeleteParams::default()).await.unwrap();
            *kinds.entry(kind).or_default() += 1;
        }
    }
    assert!(
        kinds.get("NodePool").copied().unwrap_or_default() >= 20,
        "{kinds:?}"
    );
    assert!(kinds.contains_key("NodeClaim"), "{kinds:?}");
}

/// Every `x-kubernetes-validations` rule text under `schema`.
fn rules_in(schema: &serde_json::Value, found: &mut Vec<String>) {
    match schema {
        serde_json::Value::Object(map) => {
            if let Some(rules) = map
                .get("x-kubernetes-validations")
                .and_then(|r| r.as_array())
            {
                found.extend(
                    rules
                        .iter()
                        .filter_map(|r| r["rule"].as_str())
                        .map(String::from),
                );
            }
            map.values().for_each(|v| rules_in(v, found));
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| rules_in(v, found)),
        _ => {}
    }
}

#[test]
fn every_rule_of_the_served_and_upstream_karpenter_crds_parses() {
    for upstream in [false, true] {
        let mut rules = Vec::new();
        for crd in karpenter_crds(upstream) {
            rules_in(&serde_json::to_value(&crd).unwrap(), &mut rules);
        }
        assert!(rules.len() >= 25, "{rules:?}");
        for rule in &rules {
            if let Err(e) = joinery_emulator::apiserver::cel::Program::parse(rule) {
                panic!("{rule} (upstream CRDs: {upstream}): {e}");
            }
        }
    }
}

#[tokio::test]
async fn node_overlays_a_real_api_server_refuses_are_refused() {
    let (_server, client) = start().await;
    install_karpenter_crds(&client, false).await;
    let overlays = karpenter_api(&client, "v1alpha1", "NodeOverlay");
    let overlay = |name: &str, spec: serde_json::Value| {
        dynamic(
            json!({"apiVersion": "karpenter.sh/v1alpha1", "kind": "NodeOverlay", "metadata": {"name": name}, "spec": spec}),
        )
    };
    let requirements = json!([{"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["c1.large"]}]);
    let valid = overlay(
        "valid",
        json!({"requirements": requirements, "priceAdjustment": "-10%", "capacity": {"example.com/gpu": "1"}}),
    );
    overlays
        .create(&PostParams::default(), &valid)
        .await
        .expect("a valid overlay is accepted");
    for (name, spec, expected) in [
        (
            "both-prices",
            json!({"requirements": requirements, "price": "1.5", "priceAdjustment": "+1"}),
            "spec: Invalid value: \"object\": cannot set both 'price' and 'priceAdjustment'",
        ),
        (
            "standard-capacity",
            json!({"requirements": requirements, "capacity": {"memory": "1Gi"}}),
            "spec.capacity: Invalid value: \"object\": invalid resource restricted",
        ),
        (
            "not-in-nothing",
            json!({"requirements": [{"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": []}]}),
            "spec.requirements: Invalid value: \"array\": requirements with operator 'NotIn' must have a value defined",
        ),
        (
            "price-in-words",
            json!({"requirements": requirements, "price": "cheap"}),
            "spec.price: Invalid value: \"cheap\": spec.price in body should match '^\\d+(\\.\\d+)?$'",
        ),
        (
            "too-heavy",
            json!({"requirements": requirements, "weight": 10001}),
            "spec.weight: Invalid value: 10001: spec.weight in body should be less than or equal to 10000",
        ),
    ] {
        let status = api_status(
            overlays
                .create(&PostParams::default(), &overlay(name, spec))
                .await,
        );
        assert_eq!(status.code, 422, "{name}: {}", status.message);
        assert_eq!(
            status.message,
            format!("NodeOverlay.karpenter.sh \"{name}\" is invalid: {expected}"),
            "{name}"
        );
    }
}

/// CapacityBuffers the API server refuses, with its messages (the CRD's bounds and CEL
/// rules), and one it accepts, defaulted.
#[tokio::test]
async fn capacity_buffers_with_both_references_or_a_negative_count_are_refused() {
    let (_server, client) = start().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = joinery_api::crds()
        .into_iter()
        .find(|c| c.spec.group == "autoscaling.x-k8s.io")
        .expect("the CapacityBuffer CRD");
    crds.create(&PostParams::default(), &crd)
        .await
        .expect("CRD is created");
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("autoscaling.x-k8s.io", "v1beta1", "CapacityBuffer"),
        "capacitybuffers",
    );
    let buffers: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
    let buffer = |name: &str, spec: serde_json::Value| {
        dynamic(
            json!({"apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}),
        )
    };
    let created = buffers
        .create(
            &PostParams::default(),
            &buffer(
                "valid",
                json!({"scalableRef": {"apiGroup": "apps", "kind": "Deployment", "name": "web"}, "percentage": 20}),
            ),
        )
        .await
        .expect("a valid buffer is accepted");
    assert_eq!(
        created.data["spec"]["provisioningStrategy"], "buffer.x-k8s.io/active-capacity",
        "the strategy is defaulted"
    );
    for (name, spec, expected) in [
        (
            "both-refs",
            json!({"podTemplateRef": {"name": "t"}, "scalableRef": {"kind": "Deployment", "name": "web"}, "replicas": 1}),
            "spec: Invalid value: \"object\": You must define either PodTemplateRef or ScalableRef, but not both",
        ),
        (
            "negative-replicas",
            json!({"podTemplateRef": {"name": "t"}, "replicas": -1}),
            "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
        ),
        (
            "template-without-count",
            json!({"podTemplateRef": {"name": "t"}}),
            "spec: Invalid value: \"object\": If podTemplateRef is set, replicas or limits must also be set",
        ),
    ] {
        let status = api_status(
            buffers
                .create(&PostParams::default(), &buffer(name, spec))
                .await,
        );
        assert_eq!(
            (status.code, status.reason.as_str()),
            (422, "Invalid"),
            "{name}: {}",
            status.message
        );
        assert_eq!(
            status.message,
            format!("CapacityBuffer.autoscaling.x-k8s.io \"{name}\" is invalid: {expected}"),
            "{name}"
        );
    }
}
