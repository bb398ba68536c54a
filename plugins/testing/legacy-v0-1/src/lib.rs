//! # legacy-v0-1 — a cloud-provider plugin of the first contract version
//!
//! **Test-only; never shipped.** Built straight from the repository's `wit/v0.1` with
//! `wit-bindgen` (not the SDK, which follows the newest version), it stands for every
//! plugin compiled before WIT 0.2: the runtime's tests load it next to 0.2 plugins and
//! check that it works unchanged and gets the host's answers for what 0.1 lacks (no repair
//! policies of its own, no reboot).
//!
//! It serves one instance type, `legacy-1` (2 CPUs, 4 GiB, zone `zone-a`, on-demand at
//! 0.05 per hour); `resolve-node-class` accepts any NodeClass; `create`, `get` and
//! `delete` answer `not-found`, `list` an empty list.

/// The bindings of the 0.1 `cloud-provider-plugin` world.
#[allow(missing_docs, unsafe_code)]
mod bindings {
    wit_bindgen::generate!({
        world: "cloud-provider-plugin",
        path: "../../../wit/v0.1",
        generate_all,
    });
}

use bindings::exports::joinery::plugin::cloud_provider::{
    CloudError, CreateRequest, Guest, Instance, InstanceType, NodeClaim, NodeClass,
    NodeClassResolution, Offering, Overhead,
};
use bindings::joinery::plugin::types::{Operator, Requirement, Resource};

/// The plugin.
struct Legacy;

fn resource(name: &str, quantity: &str) -> Resource {
    Resource {
        name: name.to_string(),
        quantity: quantity.to_string(),
    }
}

impl Guest for Legacy {
    fn resolve_node_class(_: NodeClass) -> Result<NodeClassResolution, CloudError> {
        Ok(NodeClassResolution {
            conditions: Vec::new(),
            status: "{}".to_string(),
        })
    }

    fn get_instance_types(_: NodeClass) -> Result<Vec<InstanceType>, CloudError> {
        Ok(vec![InstanceType {
            name: "legacy-1".to_string(),
            requirements: vec![Requirement {
                key: "kubernetes.io/arch".to_string(),
                operator: Operator::In,
                values: vec!["amd64".to_string()],
                min_values: None,
            }],
            capacity: vec![
                resource("cpu", "2"),
                resource("memory", "4Gi"),
                resource("pods", "110"),
            ],
            overhead: Overhead {
                kube_reserved: Vec::new(),
                system_reserved: Vec::new(),
                eviction_threshold: Vec::new(),
            },
            offerings: vec![Offering {
                zone: "zone-a".to_string(),
                capacity_type: "on-demand".to_string(),
                price: Some(0.05),
                available: true,
            }],
        }])
    }

    fn create(request: CreateRequest) -> Result<Instance, CloudError> {
        Err(CloudError::NotFound(format!(
            "legacy-v0-1 launches nothing ({})",
            request.claim.name
        )))
    }

    fn get(provider_id: String) -> Result<Instance, CloudError> {
        Err(CloudError::NotFound(provider_id))
    }

    fn list() -> Result<Vec<Instance>, CloudError> {
        Ok(Vec::new())
    }

    fn delete(provider_id: String) -> Result<(), CloudError> {
        Err(CloudError::NotFound(provider_id))
    }

    fn reconcile_instance(_: NodeClaim, _: NodeClass) -> Result<(), CloudError> {
        Ok(())
    }

    fn is_drifted(_: NodeClaim, _: NodeClass) -> Result<Option<String>, CloudError> {
        Ok(None)
    }
}

/// The component's exports (the generated export glue is `unsafe` code). Only on wasm32, as
/// the SDK does it: their names are not valid native symbols, so the native test build of the
/// plugins workspace could not link this crate.
#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code)]
mod export {
    use super::Legacy;
    crate::bindings::export!(Legacy with_types_in crate::bindings);
}
