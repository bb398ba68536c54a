//! Cell readers for the built-in printers' computed columns: pod readiness, restarts and
//! status, node status and roles, service addresses and ports, and the small value helpers
//! they share.

use super::*;

pub(super) fn pod_containers(pod: &Value, field: &str) -> Vec<Value> {
    pod.pointer(&format!("/spec/{field}"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

pub(super) fn container_statuses(pod: &Value, field: &str) -> Vec<Value> {
    pod.pointer(&format!("/status/{field}"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Init containers with `restartPolicy: Always` (sidecars) count as regular containers.
pub(super) fn is_sidecar(init_container: &Value) -> bool {
    init_container.get("restartPolicy").and_then(Value::as_str) == Some("Always")
}

pub(super) fn pod_ready(pod: &Value, _now: SystemTime) -> Value {
    let sidecars: Vec<String> = pod_containers(pod, "initContainers")
        .iter()
        .filter(|c| is_sidecar(c))
        .map(|c| text(c.get("name")))
        .collect();
    let total = pod_containers(pod, "containers").len() + sidecars.len();
    let running_and_ready = |status: &Value| {
        status.get("ready").and_then(Value::as_bool) == Some(true)
            && status.pointer("/state/running").is_some()
    };
    let ready = container_statuses(pod, "containerStatuses")
        .iter()
        .filter(|s| running_and_ready(s))
        .count()
        + container_statuses(pod, "initContainerStatuses")
            .iter()
            .filter(|s| sidecars.contains(&text(s.get("name"))) && running_and_ready(s))
            .count();
    Value::String(format!("{ready}/{total}"))
}

pub(super) fn pod_restarts(pod: &Value, now: SystemTime) -> Value {
    let statuses: Vec<Value> = container_statuses(pod, "initContainerStatuses")
        .into_iter()
        .chain(container_statuses(pod, "containerStatuses"))
        .collect();
    let restarts: i64 = statuses
        .iter()
        .filter_map(|s| s.get("restartCount").and_then(Value::as_i64))
        .sum();
    let last_restart = statuses
        .iter()
        .filter_map(|s| parse_timestamp(s.pointer("/lastState/terminated/finishedAt")))
        .max();
    Value::String(match last_restart {
        Some(at) if restarts > 0 => format!("{restarts} ({} ago)", human_duration(since(at, now))),
        _ => restarts.to_string(),
    })
}

pub(super) fn pod_readiness_gates(pod: &Value, _now: SystemTime) -> Value {
    let gates: Vec<String> = pod
        .pointer("/spec/readinessGates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|g| text(g.get("conditionType")))
        .collect();
    if gates.is_empty() {
        return Value::String("<none>".into());
    }
    let conditions = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let passing = gates
        .iter()
        .filter(|gate| {
            conditions
                .iter()
                .any(|c| text(c.get("type")) == **gate && text(c.get("status")) == "True")
        })
        .count();
    Value::String(format!("{passing}/{}", gates.len()))
}

/// The STATUS column of `kubectl get pods`: the phase, refined by init progress, container
/// waiting and termination reasons, and deletion.
pub(crate) fn pod_status(pod: &Value) -> String {
    let status = pod.get("status").unwrap_or(&Value::Null);
    // A real server gives every new pod the Pending phase; the emulator stores pods as sent.
    let mut reason = text(status.get("phase")).if_empty("Pending");
    let status_reason = text(status.get("reason"));
    if !status_reason.is_empty() {
        reason = status_reason.clone();
    }
    let gated = status
        .get("conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| {
            text(c.get("type")) == "PodScheduled" && text(c.get("reason")) == "SchedulingGated"
        });
    if gated {
        reason = "SchedulingGated".into();
    }
    let init_containers = pod_containers(pod, "initContainers");
    let mut initializing = false;
    for (index, container) in container_statuses(pod, "initContainerStatuses")
        .iter()
        .enumerate()
    {
        let terminated = container.pointer("/state/terminated");
        let waiting_reason = text(container.pointer("/state/waiting/reason"));
        let sidecar = init_containers.get(index).is_some_and(is_sidecar);
        if terminated.is_some_and(|t| t.get("exitCode").and_then(Value::as_i64) == Some(0)) {
            continue;
        }
        if sidecar && container.get("started").and_then(Value::as_bool) == Some(true) {
            continue;
        }
        if let Some(terminated) = terminated {
            let terminated_reason = text(terminated.get("reason"));
            reason = if !terminated_reason.is_empty() {
                format!("Init:{terminated_reason}")
            } else if let Some(signal) = terminated
                .get("signal")
                .and_then(Value::as_i64)
                .filter(|s| *s != 0)
            {
                format!("Init:Signal:{signal}")
            } else {
                format!(
                    "Init:ExitCode:{}",
                    terminated
                        .get("exitCode")
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                )
            };
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            reason = format!("Init:{waiting_reason}");
        } else {
            reason = format!("Init:{index}/{}", init_containers.len());
        }
        initializing = true;
        break;
    }
    if !initializing {
        let mut has_running = false;
        for container in container_statuses(pod, "containerStatuses").iter().rev() {
            let waiting_reason = text(container.pointer("/state/waiting/reason"));
            if !waiting_reason.is_empty() {
                reason = waiting_reason;
            } else if let Some(terminated) = container.pointer("/state/terminated") {
                let terminated_reason = text(terminated.get("reason"));
                reason = if !terminated_reason.is_empty() {
                    terminated_reason
                } else if let Some(signal) = terminated
                    .get("signal")
                    .and_then(Value::as_i64)
                    .filter(|s| *s != 0)
                {
                    format!("Signal:{signal}")
                } else {
                    format!(
                        "ExitCode:{}",
                        terminated
                            .get("exitCode")
                            .and_then(Value::as_i64)
                            .unwrap_or(0)
                    )
                };
            } else if container.get("ready").and_then(Value::as_bool) == Some(true)
                && container.pointer("/state/running").is_some()
            {
                has_running = true;
            }
        }
        if reason == "Completed" && has_running {
            let ready = status
                .get("conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|c| text(c.get("type")) == "Ready" && text(c.get("status")) == "True");
            reason = if ready {
                "Running".into()
            } else {
                "NotReady".into()
            };
        }
    }
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        reason = if status_reason == "NodeLost" {
            "Unknown".into()
        } else {
            "Terminating".into()
        };
    }
    reason
}

pub(super) fn node_status(node: &Value, _now: SystemTime) -> Value {
    let conditions = node
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut status = match conditions.iter().find(|c| text(c.get("type")) == "Ready") {
        Some(ready) if text(ready.get("status")) == "True" => "Ready".to_string(),
        Some(_) => "NotReady".to_string(),
        None => "Unknown".to_string(),
    };
    if node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push_str(",SchedulingDisabled");
    }
    Value::String(status)
}

pub(super) fn node_roles(node: &Value, _now: SystemTime) -> Value {
    let mut roles: Vec<String> = Vec::new();
    for (key, value) in node
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        if let Some(role) = key.strip_prefix("node-role.kubernetes.io/") {
            if !role.is_empty() {
                roles.push(role.to_string());
            }
        } else if key == "kubernetes.io/role"
            && let Some(role) = value.as_str().filter(|r| !r.is_empty())
        {
            roles.push(role.to_string());
        }
    }
    roles.sort();
    roles.dedup();
    Value::String(if roles.is_empty() {
        "<none>".into()
    } else {
        roles.join(",")
    })
}

pub(super) fn node_address(node: &Value, address_type: &str) -> Value {
    let address = node
        .pointer("/status/addresses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|a| text(a.get("type")) == address_type)
        .map(|a| text(a.get("address")));
    Value::String(address.unwrap_or_else(|| "<none>".into()))
}

pub(super) fn service_external_ips(service: &Value, _now: SystemTime) -> Value {
    let mut ips: Vec<String> = service
        .pointer("/spec/externalIPs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|ip| text(Some(ip)))
        .collect();
    let service_type = text(service.pointer("/spec/type"));
    if service_type == "LoadBalancer" {
        for ingress in service
            .pointer("/status/loadBalancer/ingress")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let address = text(ingress.get("ip")).if_empty(&text(ingress.get("hostname")));
            if !address.is_empty() {
                ips.push(address);
            }
        }
        if ips.is_empty() {
            return Value::String("<pending>".into());
        }
    } else if service_type == "ExternalName" {
        return Value::String(text(service.pointer("/spec/externalName")));
    }
    Value::String(if ips.is_empty() {
        "<none>".into()
    } else {
        ips.join(",")
    })
}

pub(super) fn service_ports(service: &Value, _now: SystemTime) -> Value {
    let ports: Vec<String> = service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|port| {
            let protocol = text(port.get("protocol")).if_empty("TCP");
            let number = port.get("port").map(|p| text(Some(p))).unwrap_or_default();
            match port.get("nodePort").and_then(Value::as_i64) {
                Some(node_port) => format!("{number}:{node_port}/{protocol}"),
                None => format!("{number}/{protocol}"),
            }
        })
        .collect();
    Value::String(if ports.is_empty() {
        "<none>".into()
    } else {
        ports.join(",")
    })
}

/// A map of labels (`nodeSelector`, a Service's `selector`) as `k=v,…`, or `<none>`.
pub(super) fn map_as_selector(map: Option<&Value>) -> String {
    let mut pairs: Vec<String> = map
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", text(Some(v))))
        .collect();
    pairs.sort();
    if pairs.is_empty() {
        "<none>".into()
    } else {
        pairs.join(",")
    }
}

/// A `metav1.LabelSelector` in the query syntax (`app=web,tier in (a,b)`), requirements
/// sorted by key as the real server writes them; empty for no or an empty selector.
pub(crate) fn label_selector_string(selector: Option<&Value>) -> String {
    let Some(selector) = selector else {
        return String::new();
    };
    let mut requirements: Vec<(String, String)> = Vec::new();
    for (key, value) in selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        requirements.push((key.clone(), format!("{key}={}", text(Some(value)))));
    }
    for expression in selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = text(expression.get("key"));
        let mut values: Vec<String> = expression
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|v| text(Some(v)))
            .collect();
        values.sort();
        let rendered = match text(expression.get("operator")).as_str() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.clone(),
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other} ({})", values.join(",")),
        };
        requirements.push((key, rendered));
    }
    requirements.sort();
    requirements
        .into_iter()
        .map(|(_, r)| r)
        .collect::<Vec<_>>()
        .join(",")
}

pub(super) fn entries(map: Option<&Value>) -> usize {
    map.and_then(Value::as_object).map_or(0, Map::len)
}

pub(super) fn int(value: Option<&Value>) -> i64 {
    value.and_then(Value::as_i64).unwrap_or(0)
}

pub(super) fn int_or_string(value: Option<&Value>) -> String {
    match value {
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) => s.clone(),
        _ => "N/A".into(),
    }
}

/// A scalar as text; empty for absent or null.
pub(super) fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(other) => other.to_string(),
    }
}

pub(super) fn text_or_none(value: Option<&Value>) -> Value {
    Value::String(text(value).if_empty("<none>"))
}

pub(super) fn unknown_if_empty(value: Option<&Value>) -> Value {
    Value::String(text(value).if_empty("<unknown>"))
}

pub(super) trait IfEmpty {
    fn if_empty(self, fallback: &str) -> String;
}

impl IfEmpty for String {
    fn if_empty(self, fallback: &str) -> String {
        if self.is_empty() {
            fallback.to_string()
        } else {
            self
        }
    }
}
