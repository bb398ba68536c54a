use super::*;

fn widget_crd() -> Value {
    let version = |name: &str, storage: bool| {
        json!({"name": name, "served": true, "storage": storage,
               "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}})
    };
    json!({
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [version("v1beta1", true), version("v1beta2", false)],
        },
    })
}

fn list_all(
    store: &Store,
    kind: &ResourceKind,
    namespace: Option<&str>,
    options: ListOptions,
) -> Vec<Arc<StoredObject>> {
    let mut options = options;
    let mut items = Vec::new();
    loop {
        let page = store.list(kind, namespace, &options).unwrap();
        items.extend(page.items.iter().cloned());
        match page.continue_token {
            Some(token) => options.continue_token = Some(token),
            None => return items,
        }
    }
}

#[test]
fn objects_come_back_typed_as_the_version_they_are_read_through() {
    let store = Store::new(100);
    let crds = store.lookup(CRD_GROUP, "v1", CRD_PLURAL).unwrap();
    store.create(&crds, None, widget_crd()).unwrap();
    let (old, new) = (
        store.lookup("example.com", "v1beta1", "widgets").unwrap(),
        store.lookup("example.com", "v1beta2", "widgets").unwrap(),
    );
    let created = store
        .create(
            &old,
            Some("default"),
            json!({"metadata": {"name": "w"}, "spec": {"size": 3}}),
        )
        .unwrap();
    assert_eq!(created["apiVersion"], "example.com/v1beta1");

    let read = store.get(&new, Some("default"), "w").unwrap();
    assert_eq!(
        (read["apiVersion"].as_str(), read["kind"].as_str()),
        (Some("example.com/v1beta2"), Some("Widget"))
    );
    let mut expected = created.clone();
    expected["apiVersion"] = json!("example.com/v1beta2");
    assert_eq!(read, expected);

    let list: Value = serde_json::from_slice(
        &store
            .list(&new, None, &ListOptions::default())
            .unwrap()
            .to_json(&new),
    )
    .unwrap();
    assert_eq!(
        (list["apiVersion"].as_str(), list["kind"].as_str()),
        (Some("example.com/v1beta2"), Some("WidgetList"))
    );
    assert_eq!(list["items"], json!([expected]));
    let (snapshot, _) = store.watch_snapshot(&old, None);
    let watched: Value = serde_json::from_slice(&snapshot[0].json_for(&old)).unwrap();
    assert_eq!(watched, created);
}

#[test]
fn list_bytes_parse_back_to_the_objects_as_written() {
    let store = Store::new(100);
    let pods = store.lookup("", "v1", "pods").unwrap();
    let mut written = Vec::new();
    for (index, namespace) in ["default", "kube-system", "default"].iter().enumerate() {
        let pod = json!({
            "metadata": {"name": format!("p{index}"), "labels": {"app": "web", "n": index.to_string()}},
            "spec": {"nodeName": format!("n{index}"), "containers": [{"name": "c", "image": "i", "resources": {}}]},
            "status": {"phase": "Running", "podIP": null},
        });
        written.push(store.create(&pods, Some(namespace), pod).unwrap());
    }
    // Key order: namespace, then name.
    written.sort_by_key(|pod| {
        (
            pod["metadata"]["namespace"].as_str().map(String::from),
            pod["metadata"]["name"].as_str().map(String::from),
        )
    });
    let list = store.list(&pods, None, &ListOptions::default()).unwrap();
    let parsed: Value = serde_json::from_slice(&list.to_json(&pods)).unwrap();
    let expected = json!({
        "apiVersion": "v1", "kind": "PodList", "items": written,
        "metadata": {"resourceVersion": store.resource_version().to_string()},
    });
    assert_eq!(parsed, expected);
    assert_eq!(list.to_value(&pods), expected);
    let empty: Value = serde_json::from_slice(
        &store
            .list(&pods, Some("kube-public"), &ListOptions::default())
            .unwrap()
            .to_json(&pods),
    )
    .unwrap();
    assert_eq!(empty["items"], json!([]));
}

#[test]
fn the_history_shares_the_stored_objects() {
    let store = Store::new(100);
    let configmaps = store.lookup("", "v1", "configmaps").unwrap();
    let start = store.resource_version();
    store
        .create(
            &configmaps,
            Some("default"),
            json!({"metadata": {"name": "c"}, "data": {"k": "1"}}),
        )
        .unwrap();
    store
        .update(
            &configmaps,
            Some("default"),
            "c",
            WriteTarget::Main,
            |current| {
                let mut next = current.clone();
                next["data"]["k"] = json!("2");
                Ok(next)
            },
        )
        .unwrap();
    let (events, _) = store
        .events_since(&configmaps, Some("default"), start)
        .unwrap();
    let [added, modified] = events.as_slice() else {
        panic!("two events expected, got {}", events.len())
    };
    assert!(added.previous.is_none());
    assert!(
        Arc::ptr_eq(modified.previous.as_ref().unwrap(), &added.object),
        "the replaced object is not copied"
    );
    let current = store.get_stored(&configmaps, Some("default"), "c").unwrap();
    assert!(
        Arc::ptr_eq(&current, &modified.object),
        "the map and the history hold one object"
    );
    let (snapshot, _) = store.watch_snapshot(&configmaps, Some("default"));
    assert!(Arc::ptr_eq(&snapshot[0], &current));
    assert_eq!(current.resource_version(), modified.resource_version);
    store
        .delete(&configmaps, Some("default"), "c", &Value::Null)
        .unwrap();
    let (events, _) = store
        .events_since(&configmaps, Some("default"), modified.resource_version)
        .unwrap();
    assert!(Arc::ptr_eq(events[0].previous.as_ref().unwrap(), &current));
}

#[test]
fn pages_count_what_remains_and_selected_lists_do_not() {
    let store = Store::new(1000);
    let configmaps = store.lookup("", "v1", "configmaps").unwrap();
    let namespaces = store.lookup("", "v1", "namespaces").unwrap();
    for namespace in ["a", "b", "c"] {
        store
            .create(&namespaces, None, json!({"metadata": {"name": namespace}}))
            .unwrap();
        for index in 0..4 {
            let labels = json!({"even": (index % 2 == 0).to_string()});
            store
                .create(
                    &configmaps,
                    Some(namespace),
                    json!({"metadata": {"name": format!("m{index}"), "labels": labels}}),
                )
                .unwrap();
        }
    }
    for (namespace, total) in [(None, 12), (Some("b"), 4)] {
        let mut options = ListOptions {
            limit: Some(3),
            ..Default::default()
        };
        let mut seen = 0;
        loop {
            let page = store.list(&configmaps, namespace, &options).unwrap();
            seen += page.items.len();
            assert_eq!(
                page.remaining_item_count,
                Some((total - seen) as u64).filter(|r| *r > 0),
                "{namespace:?} after {seen}"
            );
            match page.continue_token {
                Some(token) => options.continue_token = Some(token),
                None => break,
            }
        }
        assert_eq!(seen, total);
    }
    let selected = ListOptions {
        limit: Some(2),
        labels: LabelSelector::parse("even=true").unwrap(),
        ..Default::default()
    };
    let first = store.list(&configmaps, None, &selected).unwrap();
    assert!(first.continue_token.is_some() && first.remaining_item_count.is_none());
    assert_eq!(list_all(&store, &configmaps, None, selected).len(), 6);
    // The last matching page says nothing is left.
    let last = store
        .list(
            &configmaps,
            Some("c"),
            &ListOptions {
                limit: Some(2),
                labels: LabelSelector::parse("even=true").unwrap(),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!((last.items.len(), last.continue_token), (2, None));
}

#[test]
fn pods_selected_by_node_match_a_full_scan() {
    let store = Store::new(1000);
    let pods = store.lookup("", "v1", "pods").unwrap();
    for index in 0..24 {
        let namespace = ["default", "kube-system"][index % 2];
        let node = (index % 3 != 0).then(|| format!("n{}", index % 4));
        let pod = json!({"metadata": {"name": format!("p{index:02}")}, "spec": {"nodeName": node, "containers": []}});
        store.create(&pods, Some(namespace), pod).unwrap();
    }
    // Move pods between nodes and delete some, so that the index has to follow.
    for index in [1, 2, 5] {
        store
            .update(
                &pods,
                Some(["default", "kube-system"][index % 2]),
                &format!("p{index:02}"),
                WriteTarget::Main,
                |current| {
                    let mut next = current.clone();
                    next["spec"]["nodeName"] = json!("n9");
                    Ok(next)
                },
            )
            .unwrap();
    }
    store
        .delete(
            &pods,
            Some("default"),
            "p04",
            &json!({"gracePeriodSeconds": 0}),
        )
        .unwrap();
    store
        .delete(
            &pods,
            Some("kube-system"),
            "p07",
            &json!({"gracePeriodSeconds": 0}),
        )
        .unwrap();
    let everything = list_all(&store, &pods, None, ListOptions::default());
    for node in ["n1", "n2", "n3", "n9", "n0", "none"] {
        for namespace in [None, Some("default")] {
            for selector in [
                format!("spec.nodeName={node}"),
                format!("spec.nodeName=={node},metadata.name!=p10"),
                // Bound to none of these nodes (the pod GC's orphan search).
                format!("spec.nodeName!=,spec.nodeName!={node},spec.nodeName!=n3"),
                format!("spec.nodeName!=,spec.nodeName!={node},metadata.name!=p10"),
                format!("spec.nodeName!={node}"),
            ] {
                let fields = FieldSelector::parse(&selector).unwrap();
                let scanned: Vec<&str> = everything
                    .iter()
                    .filter(|p| {
                        namespace.is_none_or(|n| p.namespace() == n)
                            && fields.matches(&p.to_untyped_value())
                    })
                    .map(|p| p.name())
                    .collect();
                for limit in [None, Some(1), Some(2)] {
                    let options = ListOptions {
                        fields: fields.clone(),
                        limit,
                        ..Default::default()
                    };
                    let listed = list_all(&store, &pods, namespace, options);
                    assert_eq!(
                        listed.iter().map(|p| p.name()).collect::<Vec<_>>(),
                        scanned,
                        "{selector} in {namespace:?}, limit {limit:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn uids_are_distinct_and_uuid_shaped() {
    let mut ids = 7;
    let a = new_uid(&mut ids);
    let b = new_uid(&mut ids);
    assert_ne!(a, b);
    assert_eq!(a.len(), 36);
    assert_eq!(&a[14..15], "4");
}

#[test]
fn a_pod_write_wakes_the_watches_of_its_nodes_and_of_all_pods_only() {
    use futures::FutureExt;
    let store = Store::new(100);
    let pods = store.lookup("", "v1", "pods").unwrap();
    let nodes = store.lookup("", "v1", "nodes").unwrap();
    let topic =
        |resource: &str, node: Option<&str>| store.subscribe(Topic::of_watch("", resource, node));
    let (all_pods, on_a, on_b, unscheduled, all_nodes) = (
        topic("pods", None),
        topic("pods", Some("a")),
        topic("pods", Some("b")),
        topic("pods", Some("")),
        topic("nodes", None),
    );
    let woken = |write: &dyn Fn()| {
        let waits = [&all_pods, &on_a, &on_b, &unscheduled, &all_nodes].map(|n| {
            let mut wait = Box::pin(n.notified());
            wait.as_mut().enable();
            wait
        });
        write();
        waits.map(|w| w.now_or_never().is_some())
    };
    // A pod created unscheduled: the cluster-wide pod watches and the unscheduled ones.
    let create = || {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": []}});
        store.create(&pods, Some("default"), pod).unwrap();
    };
    assert_eq!(woken(&create), [true, false, false, true, false]);
    // Moved to node a: its watches, and the unscheduled ones it left.
    let (store_ref, pods_ref) = (&store, &pods);
    let move_to = |node: &'static str| {
        move || {
            store_ref
                .update(
                    pods_ref,
                    Some("default"),
                    "p",
                    WriteTarget::Main,
                    |current| {
                        let mut next = current.clone();
                        next["spec"]["nodeName"] = json!(node);
                        Ok(next)
                    },
                )
                .unwrap();
        }
    };
    assert_eq!(woken(&move_to("a")), [true, true, false, true, false]);
    // From a to b: both nodes' watches (it leaves one selection, enters the other).
    assert_eq!(woken(&move_to("b")), [true, true, true, false, false]);
    // Deleted: the node it was on.
    let delete = || {
        store
            .delete(&pods, Some("default"), "p", &json!({}))
            .unwrap();
    };
    assert_eq!(woken(&delete), [true, false, true, false, false]);
    // A node write wakes node watches only; pod topics are not narrowed for other kinds.
    let create_node = || {
        store
            .create(&nodes, None, json!({"metadata": {"name": "a"}}))
            .unwrap();
    };
    assert_eq!(woken(&create_node), [false, false, false, false, true]);
    assert_eq!(
        Topic::of_watch("", "nodes", Some("a")),
        Topic::of_watch("", "nodes", None)
    );
}
