//! Strategic merge patches for built-in types, as `kubectl apply`, `cordon` and friends send
//! them. Maps merge as in a JSON merge patch; lists merge according to the field's patch
//! strategy: lists of objects with a merge key (containers by `name`, container ports by
//! `containerPort`, conditions by `type`, …) merge element by element, `finalizers` merge as a
//! set, and every other list is replaced. The directives `$patch` (`replace`, `delete`,
//! `merge`), `$retainKeys`, `$setElementOrder/<list>` and `$deleteFromPrimitiveList/<list>` are
//! honoured. The strategies come from a table of the well-known fields rather than from the
//! types' OpenAPI schemas.

use serde_json::{Map, Value};

/// How a list field is patched.
#[derive(Debug, Clone, PartialEq)]
enum ListStrategy {
    /// The patch's list replaces the current one.
    Replace,
    /// Elements are objects identified by this key; matching elements merge.
    MergeByKey(&'static str),
    /// A list of scalars merged as a set (current order kept, new values appended).
    MergeScalars,
}

/// The strategy of list `field` inside an object reached through `parents` (the field names
/// from the root, list indexes omitted). `sample` (the patch's elements) tells container
/// ports (`containerPort`) from service ports (`port`).
fn list_strategy(parents: &[String], field: &str, sample: &[Value]) -> ListStrategy {
    let parent = parents.last().map(String::as_str).unwrap_or_default();
    let in_container = matches!(
        parent,
        "containers" | "initContainers" | "ephemeralContainers"
    );
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "volumes"
        | "imagePullSecrets"
        | "resourceClaims" => ListStrategy::MergeByKey("name"),
        "env" if in_container => ListStrategy::MergeByKey("name"),
        "volumeMounts" if in_container => ListStrategy::MergeByKey("mountPath"),
        "volumeDevices" if in_container => ListStrategy::MergeByKey("devicePath"),
        "resizePolicy" if in_container => ListStrategy::MergeByKey("resourceName"),
        "ports" => {
            let container_style = in_container
                || sample
                    .iter()
                    .any(|item| item.get("containerPort").is_some());
            if container_style {
                ListStrategy::MergeByKey("containerPort")
            } else {
                ListStrategy::MergeByKey("port")
            }
        }
        "conditions" => ListStrategy::MergeByKey("type"),
        "addresses" if parent == "status" => ListStrategy::MergeByKey("type"),
        "ownerReferences" => ListStrategy::MergeByKey("uid"),
        "hostAliases" => ListStrategy::MergeByKey("ip"),
        "topologySpreadConstraints" => ListStrategy::MergeByKey("topologyKey"),
        "secrets" if parents.is_empty() => ListStrategy::MergeByKey("name"),
        "finalizers" => ListStrategy::MergeScalars,
        _ => ListStrategy::Replace,
    }
}

/// Applies `patch` to `target` in place. Fails on a malformed directive.
pub(crate) fn apply(target: &mut Value, patch: &Value) -> Result<(), String> {
    merge_object(target, patch, &mut Vec::new())
}

fn merge_object(
    target: &mut Value,
    patch: &Value,
    parents: &mut Vec<String>,
) -> Result<(), String> {
    let Some(patch_map) = patch.as_object() else {
        *target = patch.clone();
        return Ok(());
    };
    match patch_map.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            *target = strip_directives(patch);
            return Ok(());
        }
        Some("delete") => {
            *target = Value::Object(Map::new());
            return Ok(());
        }
        Some("merge") | None => {}
        Some(other) => return Err(format!("unknown patch directive $patch: {other}")),
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let mut orders: Vec<(&str, &Value)> = Vec::new();
    for (key, value) in patch_map {
        if key == "$patch" || key == "$retainKeys" {
            continue;
        }
        if let Some(field) = key.strip_prefix("$setElementOrder/") {
            orders.push((field, value));
            continue;
        }
        if let Some(field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            let doomed = value.as_array().cloned().unwrap_or_default();
            if let Some(Value::Array(items)) = target.get_mut(field) {
                items.retain(|item| !doomed.contains(item));
            }
            continue;
        }
        if key.starts_with('$') {
            return Err(format!("unknown patch directive {key}"));
        }
        let map = target.as_object_mut().expect("target was made an object");
        match value {
            Value::Null => {
                map.remove(key);
            }
            Value::Object(_) => {
                let deletes_child = value.get("$patch").and_then(Value::as_str) == Some("delete");
                if deletes_child {
                    map.remove(key);
                    continue;
                }
                let child = map
                    .entry(key.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                parents.push(key.clone());
                let result = merge_object(child, value, parents);
                parents.pop();
                result?;
            }
            Value::Array(items) => {
                let strategy = list_strategy(parents, key, items);
                let current = map.remove(key);
                parents.push(key.clone());
                let merged = merge_list(current, items, &strategy, parents);
                parents.pop();
                map.insert(key.clone(), merged?);
            }
            scalar => {
                map.insert(key.clone(), scalar.clone());
            }
        }
    }
    for (field, order) in orders {
        reorder(target, field, order, parents);
    }
    if let Some(retained) = patch_map.get("$retainKeys") {
        let keep: Vec<&str> = retained
            .as_array()
            .ok_or("$retainKeys must be a list")?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        if let Some(map) = target.as_object_mut() {
            map.retain(|key, _| keep.contains(&key.as_str()));
        }
    }
    Ok(())
}

fn merge_list(
    current: Option<Value>,
    items: &[Value],
    strategy: &ListStrategy,
    parents: &mut Vec<String>,
) -> Result<Value, String> {
    let replaces = items
        .iter()
        .any(|item| item.get("$patch").and_then(Value::as_str) == Some("replace"));
    let mut current = match current {
        Some(Value::Array(current)) if !replaces => current,
        _ => Vec::new(),
    };
    match strategy {
        ListStrategy::Replace => {
            return Ok(Value::Array(
                items
                    .iter()
                    .filter(|i| !is_directive_only(i))
                    .map(strip_directives)
                    .collect(),
            ));
        }
        ListStrategy::MergeScalars => {
            for item in items {
                if !current.contains(item) {
                    current.push(item.clone());
                }
            }
        }
        ListStrategy::MergeByKey(merge_key) => {
            for item in items {
                if is_directive_only(item) {
                    continue;
                }
                let Some(key_value) = item.get(*merge_key) else {
                    return Err(format!(
                        "a list element is missing its merge key {merge_key:?}"
                    ));
                };
                let position = current
                    .iter()
                    .position(|existing| existing.get(*merge_key) == Some(key_value));
                let deletes = item.get("$patch").and_then(Value::as_str) == Some("delete");
                match (position, deletes) {
                    (Some(index), true) => {
                        current.remove(index);
                    }
                    (None, true) => {}
                    (Some(index), false) => merge_object(&mut current[index], item, parents)?,
                    (None, false) => {
                        let mut added = Value::Object(Map::new());
                        merge_object(&mut added, item, parents)?;
                        current.push(added);
                    }
                }
            }
        }
    }
    Ok(Value::Array(current))
}

/// An element such as `{"$patch": "replace"}` that only carries a list directive.
fn is_directive_only(item: &Value) -> bool {
    item.as_object()
        .is_some_and(|map| !map.is_empty() && map.keys().all(|key| key.starts_with('$')))
}

/// Puts the elements of list `field` in the order `order` names them (by merge key, or by value
/// for scalars); elements the order does not name keep their relative order at the end.
fn reorder(target: &mut Value, field: &str, order: &Value, parents: &[String]) {
    let Some(order) = order.as_array() else {
        return;
    };
    let Some(Value::Array(items)) = target.get_mut(field) else {
        return;
    };
    let key = match list_strategy(parents, field, order) {
        ListStrategy::MergeByKey(key) => Some(key),
        _ => None,
    };
    let identity = |item: &Value| -> Value {
        match key {
            Some(key) => item.get(key).cloned().unwrap_or(Value::Null),
            None => item.clone(),
        }
    };
    let rank = |item: &Value| -> usize {
        let id = identity(item);
        order
            .iter()
            .position(|wanted| identity(wanted) == id)
            .unwrap_or(usize::MAX)
    };
    items.sort_by_key(|item| rank(item));
}

/// A patch value without directive keys, at any depth.
fn strip_directives(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, _)| !key.starts_with('$'))
                .map(|(key, child)| (key.clone(), strip_directives(child)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(
            items
                .iter()
                .filter(|i| !is_directive_only(i))
                .map(strip_directives)
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patched(mut target: Value, patch: Value) -> Value {
        apply(&mut target, &patch).unwrap();
        target
    }

    #[test]
    fn containers_merge_by_name_and_keep_unmentioned_fields() {
        let deployment = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "app:1", "ports": [{"containerPort": 80, "name": "http"}], "env": [{"name": "A", "value": "1"}]},
            {"name": "sidecar", "image": "side:1"}
        ]}}}});
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "app"}, {"name": "sidecar"}],
            "containers": [{"name": "app", "image": "app:2", "env": [{"name": "B", "value": "2"}]}]
        }}}});
        let result = patched(deployment, patch);
        let containers = &result["spec"]["template"]["spec"]["containers"];
        assert_eq!(containers[0]["image"], "app:2");
        assert_eq!(containers[0]["ports"][0]["containerPort"], 80);
        assert_eq!(
            containers[0]["env"],
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}])
        );
        assert_eq!(containers[1]["name"], "sidecar");
    }

    #[test]
    fn delete_and_replace_directives() {
        let pod = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}], "tolerations": [{"key": "x"}]}, "metadata": {"finalizers": ["f1"]}});
        let result = patched(
            pod,
            json!({
                "spec": {"containers": [{"name": "a", "$patch": "delete"}], "tolerations": [{"key": "y"}]},
                "metadata": {"finalizers": ["f2"], "$deleteFromPrimitiveList/finalizers": ["f1"]}
            }),
        );
        assert_eq!(result["spec"]["containers"], json!([{"name": "b"}]));
        assert_eq!(
            result["spec"]["tolerations"],
            json!([{"key": "y"}]),
            "lists without a strategy are replaced"
        );
        assert_eq!(result["metadata"]["finalizers"], json!(["f2"]));
        let replaced = patched(
            json!({"spec": {"containers": [{"name": "a"}]}}),
            json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "z"}]}}),
        );
        assert_eq!(replaced["spec"]["containers"], json!([{"name": "z"}]));
        let map_replaced = patched(
            json!({"spec": {"selector": {"a": "1", "b": "2"}}}),
            json!({"spec": {"selector": {"$patch": "replace", "c": "3"}}}),
        );
        assert_eq!(map_replaced["spec"]["selector"], json!({"c": "3"}));
    }

    #[test]
    fn nulls_remove_fields_and_retain_keys_prunes() {
        let node = json!({"spec": {"unschedulable": true, "podCIDR": "10.0.0.0/24"}});
        assert_eq!(
            patched(node, json!({"spec": {"unschedulable": null}})),
            json!({"spec": {"podCIDR": "10.0.0.0/24"}})
        );
        let strategy = json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
        let result = patched(
            strategy,
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
        );
        assert_eq!(result, json!({"spec": {"strategy": {"type": "Recreate"}}}));
    }

    #[test]
    fn service_ports_merge_by_port() {
        let service = json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]}});
        let result = patched(
            service,
            json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}),
        );
        assert_eq!(
            result["spec"]["ports"],
            json!([{"port": 80, "targetPort": 9090}, {"port": 443}])
        );
    }
}
