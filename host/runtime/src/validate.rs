//! The host never trusts plugin output unchecked: quantities must parse, prices must be
//! finite and non-negative, names and zones must be present.

use joinery_core::resources::Quantity;

use crate::contract::{Instance, InstanceType, Resource};
use crate::error::CallError;

const CAPACITY_TYPES: &[&str] = &["on-demand", "spot", "reserved"];

fn resources(field: &str, list: &[Resource]) -> Result<(), String> {
    for r in list {
        if r.name.is_empty() {
            return Err(format!("{field}: a resource has an empty name"));
        }
        let q = Quantity::parse(&r.quantity).map_err(|e| {
            format!(
                "{field}.{}: {:?} is not a quantity ({e})",
                r.name, r.quantity
            )
        })?;
        if q.is_negative() {
            return Err(format!("{field}.{}: {:?} is negative", r.name, r.quantity));
        }
    }
    Ok(())
}

/// Checks `get-instance-types` output.
pub fn instance_types(plugin: &str, types: &[InstanceType]) -> Result<(), CallError> {
    let bad = |message: String| CallError::InvalidOutput {
        plugin: plugin.to_string(),
        op: "get-instance-types",
        message,
    };
    for (i, it) in types.iter().enumerate() {
        let at = if it.name.is_empty() {
            format!("instanceTypes[{i}]")
        } else {
            format!("instanceTypes[{}]", it.name)
        };
        if it.name.is_empty() {
            return Err(bad(format!("{at}: empty name")));
        }
        resources(&format!("{at}.capacity"), &it.capacity).map_err(bad)?;
        resources(
            &format!("{at}.overhead.kubeReserved"),
            &it.overhead.kube_reserved,
        )
        .map_err(bad)?;
        resources(
            &format!("{at}.overhead.systemReserved"),
            &it.overhead.system_reserved,
        )
        .map_err(bad)?;
        resources(
            &format!("{at}.overhead.evictionThreshold"),
            &it.overhead.eviction_threshold,
        )
        .map_err(bad)?;
        for (j, o) in it.offerings.iter().enumerate() {
            if o.zone.is_empty() {
                return Err(bad(format!("{at}.offerings[{j}]: empty zone")));
            }
            if !CAPACITY_TYPES.contains(&o.capacity_type.as_str()) {
                return Err(bad(format!(
                    "{at}.offerings[{j}].capacityType {:?}: expected one of {CAPACITY_TYPES:?}",
                    o.capacity_type
                )));
            }
            if let Some(p) = o.price
                && (!p.is_finite() || p < 0.0)
            {
                return Err(bad(format!(
                    "{at}.offerings[{j}].price {p}: must be a finite, non-negative number"
                )));
            }
        }
    }
    Ok(())
}

/// Checks an instance returned by `create`, `get` or `list`.
pub fn instance(plugin: &str, op: &'static str, instance: &Instance) -> Result<(), CallError> {
    let bad = |message: String| CallError::InvalidOutput {
        plugin: plugin.to_string(),
        op,
        message,
    };
    if instance.provider_id.is_empty() || !instance.provider_id.contains("://") {
        return Err(bad(format!(
            "providerID {:?}: expected <provider>://<id>",
            instance.provider_id
        )));
    }
    let at = format!("instance[{}]", instance.provider_id);
    resources(&format!("{at}.capacity"), &instance.capacity).map_err(bad)?;
    resources(&format!("{at}.allocatable"), &instance.allocatable).map_err(bad)?;
    Ok(())
}
