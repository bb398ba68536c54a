//! Cloud backends (world `cloud-provider-plugin`, feature `cloud`): the Karpenter
//! CloudProvider contract.
//!
//! Implement [`CloudProvider`] and export it with
//! [`export_cloud_provider!`](crate::export_cloud_provider). Every call is stateless: keep
//! what must survive between calls in the [`cache`](crate::cache) or on the instances
//! themselves (tags).

use std::marker::PhantomData;

pub use crate::bindings::cloud::exports::joinery::plugin::cloud_provider::{
    CloudError, CreateRequest, Instance, InstanceState, InstanceType, InsufficientCapacity,
    NodeClaim, NodeClass, NodeClassResolution, Offering, OfferingRef, Overhead, RepairPolicy,
    Retryable,
};
pub use crate::bindings::cloud::joinery::plugin::types::{
    Condition, KeyValue, Operator, Requirement, Resource, Taint,
};
pub use crate::common::{CLUSTER_LABEL, REGISTRATION_TAINT_EFFECT, REGISTRATION_TAINT_KEY};

crate::common::common_type_impls!();

/// A cloud backend. Only [`CloudProvider::get_instance_types`] is required; the other
/// functions have defaults:
///
/// - `resolve_node_class`: accepts the NodeClass as is (no conditions, status `{}`);
/// - `is_drifted`: never drifted;
/// - `reconcile_instance`: nothing to reconcile (success);
/// - `create`, `get`, `list`, `delete`: fail with `internal("not implemented: …")`.
pub trait CloudProvider {
    /// Validates a NodeClass and resolves its selectors against the cloud.
    fn resolve_node_class(node_class: NodeClass) -> Result<NodeClassResolution, CloudError> {
        let _ = node_class;
        Ok(NodeClassResolution {
            conditions: Vec::new(),
            status: "{}".to_string(),
        })
    }

    /// Lists every instance type the NodeClass can launch, including types with no
    /// available offering.
    fn get_instance_types(node_class: NodeClass) -> Result<Vec<InstanceType>, CloudError>;

    /// Launches one instance for the claim; idempotent per claim UID.
    fn create(request: CreateRequest) -> Result<Instance, CloudError> {
        let _ = request;
        Err(CloudError::not_implemented("create"))
    }

    /// Returns the instance with this provider ID, or `not-found`.
    fn get(provider_id: String) -> Result<Instance, CloudError> {
        let _ = provider_id;
        Err(CloudError::not_implemented("get"))
    }

    /// Lists all instances this plugin launched for this cluster.
    fn list() -> Result<Vec<Instance>, CloudError> {
        Err(CloudError::not_implemented("list"))
    }

    /// Starts deleting the instance; returns `not-found` once it is gone.
    fn delete(provider_id: String) -> Result<(), CloudError> {
        let _ = provider_id;
        Err(CloudError::not_implemented("delete"))
    }

    /// Returns the drift reason, or `None` when the instance has not drifted.
    fn is_drifted(claim: NodeClaim, node_class: NodeClass) -> Result<Option<String>, CloudError> {
        let _ = (claim, node_class);
        Ok(None)
    }

    /// Updates the running instance in place after its NodeClass changed (cloud labels,
    /// say); idempotent. The default has nothing to reconcile.
    fn reconcile_instance(claim: NodeClaim, node_class: NodeClass) -> Result<(), CloudError> {
        let _ = (claim, node_class);
        Ok(())
    }

    /// The node conditions that mean this cloud's nodes are unhealthy (node repair).
    /// The default, `None`, leaves the choice to the host (its defaults: `Ready` `False` or
    /// `Unknown` for 10 minutes); `Some(vec![])` turns node repair off for this cloud.
    fn repair_policies() -> Result<Option<Vec<RepairPolicy>>, CloudError> {
        Ok(None)
    }

    /// Reboots the instance in place (the first step of a repair when the operator enables
    /// reboot-first). The default answers `unsupported`: the host then replaces the node.
    fn reboot(provider_id: String) -> Result<(), CloudError> {
        let _ = provider_id;
        Err(CloudError::Unsupported(
            "this cloud plugin cannot reboot an instance".to_string(),
        ))
    }
}

/// A repair policy: nodes whose `condition_type` condition has held `condition_status` for
/// longer than `toleration` are repaired (see `repair-policies` in the WIT).
pub fn repair_policy(
    condition_type: &str,
    condition_status: &str,
    toleration: std::time::Duration,
) -> RepairPolicy {
    RepairPolicy {
        condition_type: condition_type.to_string(),
        condition_status: condition_status.to_string(),
        toleration_seconds: toleration.as_secs(),
    }
}

impl CloudError {
    /// `internal(message)`: a bug or unexpected state inside the plugin.
    pub fn internal(message: impl Into<String>) -> Self {
        CloudError::Internal(message.into())
    }

    /// `internal("not implemented: <what>")`.
    pub fn not_implemented(what: &str) -> Self {
        CloudError::Internal(format!("not implemented: {what}"))
    }

    /// `invalid(message)`: the request will not succeed when retried.
    pub fn invalid(message: impl Into<String>) -> Self {
        CloudError::Invalid(message.into())
    }

    /// `retryable(message, retry_after_ms)`: a transient failure.
    pub fn retryable(message: impl Into<String>, retry_after_ms: Option<u64>) -> Self {
        CloudError::Retryable(Retryable {
            message: message.into(),
            retry_after_ms,
        })
    }

    /// `insufficient-capacity` for `offerings` (empty: all offerings of the request).
    pub fn insufficient_capacity(message: impl Into<String>, offerings: Vec<OfferingRef>) -> Self {
        CloudError::InsufficientCapacity(InsufficientCapacity {
            message: message.into(),
            offerings,
        })
    }

    /// The same error with `context` in front of its message (`"<context>: <message>"`),
    /// e.g. `err.context("clusterapi: listing Machines")`.
    pub fn context(self, context: &str) -> Self {
        let with = |m: String| format!("{context}: {m}");
        match self {
            CloudError::NotFound(m) => CloudError::NotFound(with(m)),
            CloudError::NodeClassNotReady(m) => CloudError::NodeClassNotReady(with(m)),
            CloudError::QuotaExceeded(m) => CloudError::QuotaExceeded(with(m)),
            CloudError::Invalid(m) => CloudError::Invalid(with(m)),
            CloudError::Internal(m) => CloudError::Internal(with(m)),
            CloudError::Unsupported(m) => CloudError::Unsupported(with(m)),
            CloudError::InsufficientCapacity(ic) => {
                CloudError::InsufficientCapacity(InsufficientCapacity {
                    message: with(ic.message),
                    offerings: ic.offerings,
                })
            }
            CloudError::Retryable(r) => CloudError::Retryable(Retryable {
                message: with(r.message),
                retry_after_ms: r.retry_after_ms,
            }),
        }
    }

    /// The message, without the variant.
    pub fn message(&self) -> &str {
        match self {
            CloudError::NotFound(m)
            | CloudError::NodeClassNotReady(m)
            | CloudError::QuotaExceeded(m)
            | CloudError::Invalid(m)
            | CloudError::Internal(m)
            | CloudError::Unsupported(m) => m,
            CloudError::InsufficientCapacity(ic) => &ic.message,
            CloudError::Retryable(r) => &r.message,
        }
    }
}

/// HTTP failures map onto Karpenter's error classes: refusals are `invalid` (retrying
/// will not help until the operator grants the host), transport failures, 429 and 5xx are
/// `retryable`, 404 is `not-found`, other statuses `invalid`, undecodable bodies `internal`.
impl From<crate::http::Error> for CloudError {
    fn from(e: crate::http::Error) -> Self {
        use crate::http::Error as H;
        match &e {
            H::Transport(_) if e.is_denied() => CloudError::Invalid(e.to_string()),
            H::Transport(_) => CloudError::retryable(e.to_string(), None),
            H::Status { status: 404, .. } => CloudError::NotFound(e.to_string()),
            H::Status {
                status,
                retry_after_ms,
                ..
            } if *status == 429 || *status >= 500 => {
                CloudError::retryable(e.to_string(), *retry_after_ms)
            }
            H::Status { .. } | H::InvalidRequest(_) => CloudError::Invalid(e.to_string()),
            H::Decode(_) => CloudError::Internal(e.to_string()),
        }
    }
}

/// Kubernetes failures: `not-found` stays `not-found`, `unavailable` and `conflict` are
/// retryable, the rest `invalid` (denied, rejected) or `internal` (bad JSON).
impl From<crate::kube::Error> for CloudError {
    fn from(e: crate::kube::Error) -> Self {
        use crate::kube::{Error as K, KubeError as E};
        let text = e.to_string();
        match e {
            K::Api(E::NotFound(_)) => CloudError::NotFound(text),
            K::Api(E::Unavailable(_) | E::Conflict(_)) => CloudError::retryable(text, None),
            K::Api(E::Denied(_) | E::Invalid(_)) => CloudError::Invalid(text),
            K::Json(_) => CloudError::Internal(text),
        }
    }
}

/// Secret failures: `unavailable` is retryable, `denied` and `not-found` are `invalid`
/// (the operator must grant or create the secret).
impl From<crate::secrets::SecretError> for CloudError {
    fn from(e: crate::secrets::SecretError) -> Self {
        let text = format!("secret {}", e.describe());
        match e {
            crate::secrets::SecretError::Unavailable(_) => CloudError::retryable(text, None),
            _ => CloudError::Invalid(text),
        }
    }
}

impl NodeClass {
    /// Decodes the NodeClass `spec` JSON into `T`; the error is `invalid`.
    pub fn spec_as<T: serde::de::DeserializeOwned>(&self) -> Result<T, CloudError> {
        serde_json::from_str(&self.spec).map_err(|e| {
            CloudError::Invalid(format!("NodeClass {} has an invalid spec: {e}", self.name))
        })
    }

    /// Decodes the NodeClass `status` JSON into `T` (`{}` when unset); the error is `internal`.
    pub fn status_as<T: serde::de::DeserializeOwned>(&self) -> Result<T, CloudError> {
        let raw = if self.status.trim().is_empty() {
            "{}"
        } else {
            &self.status
        };
        serde_json::from_str(raw).map_err(|e| {
            CloudError::Internal(format!(
                "NodeClass {} has an unexpected status: {e}",
                self.name
            ))
        })
    }

    /// A NodeClass named `name` with `spec` JSON, generation 1, empty status (handy in tests).
    pub fn new(name: impl Into<String>, spec: impl Into<String>) -> Self {
        NodeClass {
            name: name.into(),
            uid: String::new(),
            generation: 1,
            spec: spec.into(),
            status: "{}".to_string(),
        }
    }
}

impl NodeClaim {
    /// The value of label `key`, if set.
    pub fn label(&self, key: &str) -> Option<&str> {
        lookup(&self.labels, key)
    }

    /// The value of annotation `key`, if set.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        lookup(&self.annotations, key)
    }

    /// The values of label `key` the claim's requirements list and allow (empty when no `In`
    /// requirement names `key`); see [`crate::requirements::allowed_values`].
    pub fn allowed_values(&self, key: &str) -> Vec<&str> {
        crate::requirements::allowed_values(&self.requirements, key).unwrap_or_default()
    }

    /// Whether label `key` with `value` satisfies every requirement of the claim on `key`.
    pub fn allows(&self, key: &str, value: &str) -> bool {
        crate::requirements::allows(&self.requirements, key, value)
    }
}

/// Adapts a [`CloudProvider`] to the generated export trait; used by
/// [`export_cloud_provider!`](crate::export_cloud_provider).
#[doc(hidden)]
pub struct CloudProviderExport<T>(PhantomData<T>);

impl<T: CloudProvider> crate::bindings::cloud::exports::joinery::plugin::cloud_provider::Guest
    for CloudProviderExport<T>
{
    fn resolve_node_class(node_class: NodeClass) -> Result<NodeClassResolution, CloudError> {
        T::resolve_node_class(node_class)
    }
    fn get_instance_types(node_class: NodeClass) -> Result<Vec<InstanceType>, CloudError> {
        T::get_instance_types(node_class)
    }
    fn create(request: CreateRequest) -> Result<Instance, CloudError> {
        T::create(request)
    }
    fn get(provider_id: String) -> Result<Instance, CloudError> {
        T::get(provider_id)
    }
    fn list() -> Result<Vec<Instance>, CloudError> {
        T::list()
    }
    fn delete(provider_id: String) -> Result<(), CloudError> {
        T::delete(provider_id)
    }
    fn is_drifted(claim: NodeClaim, node_class: NodeClass) -> Result<Option<String>, CloudError> {
        T::is_drifted(claim, node_class)
    }
    fn reconcile_instance(claim: NodeClaim, node_class: NodeClass) -> Result<(), CloudError> {
        T::reconcile_instance(claim, node_class)
    }
    fn repair_policies() -> Result<Option<Vec<RepairPolicy>>, CloudError> {
        T::repair_policies()
    }
    fn reboot(provider_id: String) -> Result<(), CloudError> {
        T::reboot(provider_id)
    }
}

/// Exports a type implementing [`cloud::CloudProvider`](crate::cloud::CloudProvider) as the
/// component's `joinery:plugin/cloud-provider` interface. Invoke it once, at the crate root.
#[macro_export]
macro_rules! export_cloud_provider {
    ($ty:ty) => {
        const _: () = {
            // Checked on every target, so `cargo test` catches a type that does not implement the trait.
            #[allow(dead_code)]
            fn __joinery_check_impl() {
                let _ = <$ty as $crate::cloud::CloudProvider>::get_instance_types;
            }
            // The component exports exist only on wasm32: their names are not valid native symbols.
            #[cfg(target_arch = "wasm32")]
            type __JoineryCloudExport = $crate::cloud::CloudProviderExport<$ty>;
            #[cfg(target_arch = "wasm32")]
            $crate::bindings::cloud::__joinery_export_cloud_world!(
                __JoineryCloudExport with_types_in $crate::bindings::cloud
            );
        };
    };
}

#[cfg(test)]
mod context_tests {
    use super::*;

    #[test]
    fn context_prefixes_the_message_and_keeps_the_class_and_details() {
        let e = CloudError::retryable("busy", Some(500)).context("acme: listing");
        assert!(
            matches!(&e, CloudError::Retryable(r) if r.message == "acme: listing: busy" && r.retry_after_ms == Some(500))
        );
        let offering = OfferingRef {
            instance_type: "t".into(),
            zone: "z".into(),
            capacity_type: "on-demand".into(),
        };
        let e = CloudError::insufficient_capacity("full", vec![offering.clone()]).context("acme");
        assert!(
            matches!(&e, CloudError::InsufficientCapacity(i) if i.message == "acme: full" && i.offerings == vec![offering.clone()])
        );
        assert_eq!(
            CloudError::NotFound("gone".into())
                .context("acme")
                .message(),
            "acme: gone"
        );
        assert!(matches!(
            CloudError::invalid("bad").context("acme"),
            CloudError::Invalid(_)
        ));
    }
}
