//! The JSON bodies the fake answers with, shaped as Exoscale's API definition shapes them.

use serde_json::{Value, json};

use super::state::World;
use crate::exoscale::model::{
    ExoAntiAffinityGroup, ExoInstance, ExoInstanceType, ExoOperation, ExoPrivateNetwork,
    ExoSecurityGroup, ExoTemplate, Visibility,
};

pub(super) fn operation_json(operation: &ExoOperation) -> Value {
    let mut body = json!({"id": operation.id, "state": operation.state.as_str()});
    if let Some(reason) = &operation.reason {
        body["reason"] = json!(reason);
    }
    if let Some(message) = &operation.message {
        body["message"] = json!(message);
    }
    if let Some(reference) = &operation.reference_id {
        let kind = if operation.command.contains("private-network") {
            "private-network"
        } else {
            "instance"
        };
        body["reference"] = json!({"id": reference, "link": format!("/v2/{kind}/{reference}"), "command": operation.command});
    }
    body
}

/// An instance type. `gpus` is left out when zero: Exoscale's API definition says it is
/// greater than zero whenever present.
pub(super) fn instance_type_json(t: &ExoInstanceType) -> Value {
    let mut body = json!({
        "id": t.id, "family": t.family, "size": t.size, "cpus": t.cpus,
        "memory": t.memory, "authorized": t.authorized, "zones": t.zones,
    });
    if t.gpus > 0 {
        body["gpus"] = json!(t.gpus);
    }
    body
}

pub(super) fn template_json(t: &ExoTemplate) -> Value {
    json!({
        "id": t.id, "name": t.name, "description": "", "family": t.family, "build": t.build, "version": t.version,
        "size": t.size, "visibility": t.visibility.as_str(), "zones": [t.zone], "created-at": t.created_at,
        "default-user": t.default_user, "ssh-key-enabled": true, "password-enabled": false, "boot-mode": "uefi",
        "maintainer": if t.visibility == Visibility::Public { "Exoscale" } else { "" },
    })
}

pub(super) fn security_group_json(g: &ExoSecurityGroup) -> Value {
    // No `visibility` field (the definition has none; it is only a filter of the list) and no
    // `rules` (write-only in the definition).
    json!({"id": g.id, "name": g.name, "description": g.description})
}

pub(super) fn private_network_json(n: &ExoPrivateNetwork) -> Value {
    json!({
        "id": n.id, "name": n.name, "description": n.description, "labels": n.labels,
        "start-ip": "10.0.0.20", "end-ip": "10.0.0.250", "netmask": "255.255.255.0",
        "leases": n.leases.iter().map(|l| json!({"ip": l.ip, "instance-id": l.instance_id})).collect::<Vec<_>>(),
    })
}

pub(super) fn anti_affinity_json(g: &ExoAntiAffinityGroup) -> Value {
    json!({
        "id": g.id, "name": g.name, "description": g.description,
        "instances": g.instances.iter().map(|i| json!({"id": i})).collect::<Vec<_>>(),
    })
}

/// An instance; list items (`full` false) omit `disk-size`, `anti-affinity-groups` and
/// `user-data`, as the API definition's list schema does.
pub(super) fn instance_json(world: &World, i: &ExoInstance, full: bool) -> Value {
    let kind = world
        .type_by_id(&i.instance_type_id)
        .map(instance_type_json)
        .unwrap_or_else(|| json!({"id": i.instance_type_id}));
    let mut body = json!({
        "id": i.id, "name": i.name, "state": i.state.as_str(), "created-at": joinery_core::time::rfc3339(i.created_at),
        "labels": i.labels, "instance-type": kind, "template": {"id": i.template_id},
        "public-ip-assignment": i.public_ip_assignment, "mac-address": i.mac_address,
        "security-groups": i.security_groups.iter().map(|id| json!({"id": id})).collect::<Vec<_>>(),
        "private-networks": i.private_networks.iter().map(|id| json!({"id": id, "mac-address": i.mac_address})).collect::<Vec<_>>(),
        "ssh-keys": i.ssh_keys.iter().map(|n| json!({"name": n})).collect::<Vec<_>>(),
    });
    if let Some(first) = i.ssh_keys.first() {
        body["ssh-key"] = json!({"name": first});
    }
    if let Some(ip) = &i.public_ip {
        body["public-ip"] = json!(ip);
    }
    if let Some(ip) = &i.ipv6_address {
        body["ipv6-address"] = json!(ip);
    }
    if full {
        body["disk-size"] = json!(i.disk_size);
        body["anti-affinity-groups"] = json!(
            i.anti_affinity_groups
                .iter()
                .map(|id| json!({"id": id}))
                .collect::<Vec<_>>()
        );
        if let Some(user_data) = &i.user_data {
            body["user-data"] = json!(user_data);
        }
    }
    body
}
