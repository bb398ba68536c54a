//! The handlers that do more than read the world: operation polls, the instance list with its
//! label filter, instance create, update and delete, and private-network attach and detach;
//! with the checks of their request bodies.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use serde_json::{Map, Value, json};

use super::Failure;
use super::json::{instance_json, operation_json};
use super::state::{Completion, ExoState};
use crate::cloud::model::CloudEvent;
use crate::exoscale::model::{ExoInstance, ExoInstanceState, GIB, Lease, OperationState};

/// Largest accepted `user-data` (base64 characters).
pub(crate) const MAX_USER_DATA: usize = 32_768;
/// Root disk bounds in GiB.
pub(crate) const DISK_RANGE: std::ops::RangeInclusive<u64> = 10..=51_200;

pub(super) fn poll_operation(state: &ExoState, id: &str) -> Result<Value, Failure> {
    let mut world = state.world();
    let Some((operation, _)) = world.operations.get_mut(id) else {
        return Err(Failure::not_found("operation", id));
    };
    if operation.state == OperationState::Pending {
        if operation.polls >= state.operation_polls {
            world.finish(id);
        } else {
            operation.polls += 1;
        }
    }
    Ok(operation_json(&world.operations[id].0))
}

pub(super) fn list_instances(
    state: &ExoState,
    zone: &str,
    labels: Option<&str>,
) -> Result<Value, Failure> {
    let mut filters = Vec::new();
    for pair in labels
        .unwrap_or_default()
        .split(' ')
        .filter(|p| !p.is_empty())
    {
        match pair.split_once('=') {
            Some((k, v)) if !k.is_empty() => filters.push((k, v)),
            _ => {
                return Err(Failure::bad_request(format!(
                    "labels: {pair:?} is not key=value"
                )));
            }
        }
    }
    let world = state.world();
    let instances: Vec<Value> = world
        .instances
        .values()
        .filter(|i| i.zone == zone)
        .filter(|i| {
            filters
                .iter()
                .all(|(k, v)| i.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|i| instance_json(&world, i, false))
        .collect();
    Ok(json!({"instances": instances}))
}

/// Checks a label map against Exoscale's documented limits: values start with a
/// non-digit, use only letters, digits and `* + ! - _ ?`, at most 128 characters; keys (the
/// key grammar is not documented; the fake is conservative) are 1–128 characters without `/`.
pub fn check_labels(labels: &BTreeMap<String, String>) -> Result<(), String> {
    for (key, value) in labels {
        if key.is_empty()
            || key.len() > 128
            || key.contains('/')
            || key.chars().any(char::is_whitespace)
        {
            return Err(format!(
                "label key {key:?} is invalid: 1-128 characters, no '/' or spaces"
            ));
        }
        let bad_char = value
            .chars()
            .any(|c| !(c.is_ascii_alphanumeric() || "*+!-_?".contains(c)));
        if value.len() > 128 || bad_char || value.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(format!(
                "label {key}: value {value:?} is invalid: it must not start with a digit, may only contain letters, digits and * + ! - _ ?, at most 128 characters"
            ));
        }
    }
    Ok(())
}

fn string_map(value: Option<&Value>, field: &str) -> Result<BTreeMap<String, String>, Failure> {
    match value {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok((k.clone(), s.clone())),
                _ => Err(Failure::bad_request(format!(
                    "{field}.{k} must be a string"
                ))),
            })
            .collect(),
        Some(_) => Err(Failure::bad_request(format!(
            "{field} must be an object of strings"
        ))),
    }
}

/// The `id`s of a list of `{"id": …}` references.
fn id_list(object: &Map<String, Value>, field: &str, key: &str) -> Result<Vec<String>, Failure> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.get(key)
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .ok_or_else(|| {
                        Failure::bad_request(format!("{field}: every item needs a string {key:?}"))
                    })
            })
            .collect(),
        Some(_) => Err(Failure::bad_request(format!("{field} must be an array"))),
    }
}

fn reference(
    object: &Map<String, Value>,
    field: &str,
    key: &str,
) -> Result<Option<String>, Failure> {
    match object.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(item) => item
            .get(key)
            .and_then(Value::as_str)
            .map(|s| Some(s.to_string()))
            .ok_or_else(|| {
                Failure::bad_request(format!("{field} must be an object with a string {key:?}"))
            }),
    }
}

fn parse_object(body: &[u8]) -> Result<Map<String, Value>, Failure> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(_) => Err(Failure::bad_request("the body must be a JSON object")),
        Err(e) => Err(Failure::bad_request(format!(
            "the body is not valid JSON: {e}"
        ))),
    }
}

pub(super) fn create_instance(
    state: &Arc<ExoState>,
    zone: &str,
    body: &[u8],
) -> Result<Value, Failure> {
    let object = parse_object(body)?;
    let type_id = reference(&object, "instance-type", "id")?
        .ok_or_else(|| Failure::bad_request("instance-type is required"))?;
    let template_id = reference(&object, "template", "id")?
        .ok_or_else(|| Failure::bad_request("template is required"))?;
    let disk_size = object
        .get("disk-size")
        .and_then(Value::as_u64)
        .ok_or_else(|| Failure::bad_request("disk-size is required (GiB)"))?;
    if !DISK_RANGE.contains(&disk_size) {
        return Err(Failure::bad_request(format!(
            "disk-size {disk_size} is out of range 10-51200"
        )));
    }
    let name = match object.get("name") {
        None | Some(Value::Null) => None,
        Some(Value::String(n)) if (1..=255).contains(&n.len()) => Some(n.clone()),
        Some(_) => {
            return Err(Failure::bad_request(
                "name must be a string of 1-255 characters",
            ));
        }
    };
    let labels = string_map(object.get("labels"), "labels")?;
    check_labels(&labels).map_err(Failure::bad_request)?;
    let user_data = match object.get("user-data") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => {
            if text.is_empty() || text.len() > MAX_USER_DATA {
                return Err(Failure::bad_request(format!(
                    "user-data must be 1-{MAX_USER_DATA} characters of base64"
                )));
            }
            if base64::engine::general_purpose::STANDARD
                .decode(text)
                .is_err()
            {
                return Err(Failure::bad_request("user-data is not valid base64"));
            }
            Some(text.clone())
        }
        Some(_) => return Err(Failure::bad_request("user-data must be a base64 string")),
    };
    let public_ip_assignment = match object.get("public-ip-assignment").and_then(Value::as_str) {
        None => "inet4".to_string(),
        Some(v @ ("inet4" | "dual" | "none")) => v.to_string(),
        Some(other) => {
            return Err(Failure::bad_request(format!(
                "public-ip-assignment {other:?} is not one of inet4, dual, none"
            )));
        }
    };
    let security_groups = id_list(&object, "security-groups", "id")?;
    let anti_affinity_groups = id_list(&object, "anti-affinity-groups", "id")?;
    let mut ssh_keys = id_list(&object, "ssh-keys", "name")?;
    if let Some(key) = reference(&object, "ssh-key", "name")? {
        ssh_keys.insert(0, key);
    }

    let now = state.clock.now();
    let mut world = state.world();
    let kind = world
        .type_by_id(&type_id)
        .cloned()
        .ok_or_else(|| Failure::not_found("instance type", &type_id))?;
    let type_name = kind.name();
    if !kind.authorized {
        return Err(Failure::new(
            403,
            format!(
                "instance type {type_name} is not authorized for this organization; ask support to enable it"
            ),
        ));
    }
    if !kind.zones.iter().any(|z| z == zone) {
        return Err(Failure::bad_request(format!(
            "instance type {type_name} is not available in zone {zone}"
        )));
    }
    let template = world
        .templates
        .iter()
        .find(|t| t.id == template_id && t.zone == zone)
        .cloned()
        .ok_or_else(|| Failure::not_found("template", &template_id))?;
    let minimum = template.size.div_ceil(GIB);
    if disk_size < minimum {
        return Err(Failure::bad_request(format!(
            "disk-size {disk_size} is smaller than template {} ({minimum} GiB)",
            template.name
        )));
    }
    for id in &security_groups {
        if !world.security_groups.iter().any(|g| g.id == *id) {
            return Err(Failure::not_found("security group", id));
        }
    }
    for key in &ssh_keys {
        if !world.ssh_keys.iter().any(|k| k.name == *key) {
            return Err(Failure::not_found("SSH key", key));
        }
    }
    for id in &anti_affinity_groups {
        let group = world
            .anti_affinity_groups
            .iter()
            .find(|g| g.id == *id)
            .ok_or_else(|| Failure::not_found("anti-affinity group", id))?;
        if group.instances.len() >= state.anti_affinity_ceiling {
            return Err(Failure::bad_request(format!(
                "anti-affinity group {} cannot take another instance: its {} members already occupy every available host",
                group.name,
                group.instances.len()
            )));
        }
    }
    if let Some(limit) = state.faults.instance_quota() {
        let used = world
            .instances
            .values()
            .filter(|i| i.state != ExoInstanceState::Destroying)
            .count();
        if used >= limit {
            return Err(Failure::new(
                403,
                format!(
                    "quota exceeded for resource instance: {used} of {limit} in use; request a quota increase"
                ),
            ));
        }
    }

    let id = world.uuid();
    if state.faults.lacks_capacity(&type_name, zone) {
        let message = format!(
            "insufficient capacity to deploy an instance of type {type_name} in zone {zone}, try again later"
        );
        return Ok(world.operation(
            zone,
            "create-instance",
            Some(&id),
            now,
            Completion::Fail {
                reason: "unavailable".into(),
                message,
            },
        ));
    }
    let address = world.next_address();
    let instance = ExoInstance {
        id: id.clone(),
        zone: zone.to_string(),
        name: name.unwrap_or_else(|| format!("vm-{}", &id[..8])),
        state: ExoInstanceState::Starting,
        created_at: now,
        labels,
        instance_type_id: kind.id.clone(),
        instance_type: type_name,
        template_id: template.id,
        disk_size,
        user_data,
        security_groups,
        anti_affinity_groups: anti_affinity_groups.clone(),
        private_networks: Vec::new(),
        ssh_keys,
        public_ip: (public_ip_assignment != "none")
            .then(|| format!("194.182.{}.{}", (address >> 8) & 0xff, address & 0xff)),
        ipv6_address: (public_ip_assignment == "dual")
            .then(|| format!("2a04:c43:e00:{:x}::{:x}", address >> 16, address & 0xffff)),
        public_ip_assignment,
        mac_address: format!(
            "06:00:00:{:02x}:{:02x}:{:02x}",
            (address >> 16) & 0xff,
            (address >> 8) & 0xff,
            address & 0xff
        ),
    };
    for group in world
        .anti_affinity_groups
        .iter_mut()
        .filter(|g| anti_affinity_groups.contains(&g.id))
    {
        group.instances.push(id.clone());
    }
    let event = state.sim_instance(&world, &instance, true);
    world.instances.insert(id.clone(), instance);
    world.created += 1;
    let completion = if state.faults.take_fail_after_create() {
        Completion::FailInstance {
            instance: id.clone(),
            reason: "fault".into(),
            message: "the instance could not be started (injected fault)".into(),
        }
    } else {
        Completion::Succeed
    };
    let body = world.operation(zone, "create-instance", Some(&id), now, completion);
    drop(world);
    tracing::info!(%id, instance_type = %event.instance_type, %zone, "fake Exoscale API created an instance");
    state.publish(CloudEvent::Launched(event));
    Ok(body)
}

pub(super) fn update_instance(
    state: &ExoState,
    zone: &str,
    id: &str,
    body: &[u8],
) -> Result<Value, Failure> {
    let object = parse_object(body)?;
    let labels = match object.get("labels") {
        Some(value) => {
            let labels = string_map(Some(value), "labels")?;
            check_labels(&labels).map_err(Failure::bad_request)?;
            Some(labels)
        }
        None => None,
    };
    let name = match object.get("name") {
        None => None,
        Some(Value::String(n)) if (1..=255).contains(&n.len()) => Some(n.clone()),
        Some(_) => {
            return Err(Failure::bad_request(
                "name must be a string of 1-255 characters",
            ));
        }
    };
    let now = state.clock.now();
    let mut world = state.world();
    let instance = world
        .instances
        .get_mut(id)
        .filter(|i| i.zone == zone)
        .ok_or_else(|| Failure::not_found("instance", id))?;
    if let Some(labels) = labels {
        // The map is replaced as a whole, never merged.
        instance.labels = labels;
    }
    if let Some(name) = name {
        instance.name = name;
    }
    Ok(world.operation(zone, "update-instance", Some(id), now, Completion::Succeed))
}

/// `PUT /instance/{id}:reboot`: a running instance restarts in place (an operation that
/// succeeds at once); the physics restarts its kubelet unless the machine has a hardware
/// fault. Any other state is refused, as the real API refuses rebooting a stopped instance.
pub(super) fn reboot_instance(state: &ExoState, zone: &str, id: &str) -> Result<Value, Failure> {
    let now = state.clock.now();
    let mut world = state.world();
    let Some(instance) = world.instances.get(id).filter(|i| i.zone == zone) else {
        return Err(Failure::not_found("instance", id));
    };
    if instance.state != ExoInstanceState::Running {
        return Err(Failure::bad_request(format!(
            "instance {id} is {}; only a running instance can be rebooted",
            instance.state.as_str()
        )));
    }
    let snapshot = instance.clone();
    let event = state.sim_instance(&world, &snapshot, true);
    let body = world.operation(zone, "reboot-instance", Some(id), now, Completion::Succeed);
    drop(world);
    tracing::info!(%id, %zone, "fake Exoscale API is rebooting an instance");
    state.publish(CloudEvent::Rebooted(event));
    Ok(body)
}

pub(super) fn delete_instance(state: &ExoState, zone: &str, id: &str) -> Result<Value, Failure> {
    let now = state.clock.now();
    let mut world = state.world();
    let Some(instance) = world.instances.get_mut(id).filter(|i| i.zone == zone) else {
        return Err(Failure::not_found("instance", id));
    };
    let first = instance.state != ExoInstanceState::Destroying;
    instance.state = ExoInstanceState::Destroying;
    let snapshot = instance.clone();
    let event = first.then(|| state.sim_instance(&world, &snapshot, false));
    let body = world.operation(
        zone,
        "delete-instance",
        Some(id),
        now,
        Completion::RemoveInstance(id.to_string()),
    );
    drop(world);
    if let Some(instance) = event {
        tracing::info!(%id, %zone, "fake Exoscale API is destroying an instance");
        state.publish(CloudEvent::Terminated { instance, at: now });
    }
    Ok(body)
}

pub(super) fn attach(
    state: &ExoState,
    zone: &str,
    network_id: &str,
    attach: bool,
    body: &[u8],
) -> Result<Value, Failure> {
    let object = parse_object(body)?;
    let instance_id = reference(&object, "instance", "id")?
        .ok_or_else(|| Failure::bad_request("instance is required"))?;
    let now = state.clock.now();
    let mut world = state.world();
    if !world
        .private_networks
        .iter()
        .any(|n| n.id == network_id && n.zone == zone)
    {
        return Err(Failure::not_found("private network", network_id));
    }
    let Some(instance) = world.instances.get(&instance_id).filter(|i| i.zone == zone) else {
        return Err(Failure::not_found("instance", &instance_id));
    };
    let attached = instance.private_networks.iter().any(|n| n == network_id);
    let command = if attach {
        "attach-instance-to-private-network"
    } else {
        "detach-instance-from-private-network"
    };
    match (attach, attached) {
        (true, true) => {
            return Err(Failure::bad_request(format!(
                "instance {instance_id} is already attached to private network {network_id}"
            )));
        }
        (false, false) => {
            return Err(Failure::bad_request(format!(
                "instance {instance_id} is not attached to private network {network_id}"
            )));
        }
        _ => {}
    }
    if attach && state.faults.take_fail_attach() {
        let message = format!(
            "could not attach instance {instance_id} to private network {network_id} (injected fault)"
        );
        return Ok(world.operation(
            zone,
            command,
            Some(network_id),
            now,
            Completion::Fail {
                reason: "unavailable".into(),
                message,
            },
        ));
    }
    let lease_number = world.next_address();
    let network = world
        .private_networks
        .iter_mut()
        .find(|n| n.id == network_id)
        .expect("checked above");
    if attach {
        let ip = object
            .get("ip")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| format!("10.0.0.{}", 20 + lease_number % 200));
        network.leases.push(Lease {
            instance_id: instance_id.clone(),
            ip,
        });
    } else {
        network.leases.retain(|l| l.instance_id != instance_id);
    }
    let instance = world
        .instances
        .get_mut(&instance_id)
        .expect("checked above");
    if attach {
        instance.private_networks.push(network_id.to_string());
    } else {
        instance.private_networks.retain(|n| n != network_id);
    }
    Ok(world.operation(zone, command, Some(network_id), now, Completion::Succeed))
}
