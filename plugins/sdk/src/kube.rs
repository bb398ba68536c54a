//! Kubernetes objects as JSON (`joinery:plugin/kubernetes`), for the cloud world.
//!
//! Every call names its target collection with a [`ResourceRef`]: the cluster (`workload`
//! or a granted management cluster), API group, version, plural resource and namespace.
//! The host only lets through what the operator granted (cluster, group, resource, verb);
//! anything else fails with [`KubeError::Denied`] naming the grant line to add.
//!
//! ```ignore
//! use joinery_plugin_sdk::kube::{self, ResourceRef};
//!
//! let cms = ResourceRef::core("configmaps").namespace("kube-system");
//! let cm: serde_json::Value = kube::get_json(&cms, "cluster-info")?;
//! ```

pub use crate::bindings::cloud::joinery::plugin::kubernetes::{KubeError, PatchKind, ResourceRef};

use serde::Serialize;
use serde::de::DeserializeOwned;
use std::fmt;

/// The cluster Joinery runs for.
pub const WORKLOAD_CLUSTER: &str = "workload";

impl ResourceRef {
    /// A collection in the workload cluster: `group` (empty for core), `version`, plural
    /// `resource`, cluster-scoped (or across namespaces) until [`ResourceRef::namespace`].
    pub fn new(
        group: impl Into<String>,
        version: impl Into<String>,
        resource: impl Into<String>,
    ) -> Self {
        ResourceRef {
            cluster: WORKLOAD_CLUSTER.to_string(),
            group: group.into(),
            version: version.into(),
            resource: resource.into(),
            namespace: None,
        }
    }

    /// A core-group (`v1`) collection in the workload cluster, e.g. `configmaps`.
    pub fn core(resource: impl Into<String>) -> Self {
        ResourceRef::new("", "v1", resource)
    }

    /// Addresses `namespace`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// Addresses another (granted) cluster, e.g. a management cluster.
    pub fn in_cluster(mut self, cluster: impl Into<String>) -> Self {
        self.cluster = cluster.into();
        self
    }
}

impl KubeError {
    /// The short kind of the error: `denied`, `not-found`, `conflict`, `invalid` or `unavailable`.
    pub fn kind(&self) -> &'static str {
        match self {
            KubeError::Denied(_) => "denied",
            KubeError::NotFound(_) => "not-found",
            KubeError::Conflict(_) => "conflict",
            KubeError::Invalid(_) => "invalid",
            KubeError::Unavailable(_) => "unavailable",
        }
    }

    /// The host's message, verbatim.
    pub fn message(&self) -> &str {
        match self {
            KubeError::Denied(m)
            | KubeError::NotFound(m)
            | KubeError::Conflict(m)
            | KubeError::Invalid(m)
            | KubeError::Unavailable(m) => m,
        }
    }

    /// `kind: message`, e.g. `denied: kubernetes get on configmaps is not granted …`.
    pub fn describe(&self) -> String {
        format!("{}: {}", self.kind(), self.message())
    }
}

/// One Kubernetes call, as the fake host sees it in native tests.
#[derive(Clone, Debug, PartialEq)]
pub enum KubeCall {
    /// `get`.
    Get {
        /// Collection.
        target: ResourceRef,
        /// Object name.
        name: String,
    },
    /// `list`.
    List {
        /// Collection.
        target: ResourceRef,
        /// Label selector, if any.
        label_selector: Option<String>,
    },
    /// `create`.
    Create {
        /// Collection.
        target: ResourceRef,
        /// Object JSON.
        body: String,
    },
    /// `patch`.
    Patch {
        /// Collection.
        target: ResourceRef,
        /// Object name.
        name: String,
        /// How `body` is interpreted.
        kind: PatchKind,
        /// Patch body.
        body: String,
    },
    /// `delete`.
    Delete {
        /// Collection.
        target: ResourceRef,
        /// Object name.
        name: String,
    },
}

/// Why a typed Kubernetes helper failed.
#[derive(Clone, Debug, PartialEq)]
pub enum Error {
    /// The host or the API server refused or failed the call.
    Api(KubeError),
    /// The object could not be encoded or decoded as the expected JSON.
    Json(String),
}

impl Error {
    /// Whether the object does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::Api(KubeError::NotFound(_)))
    }
}

impl From<KubeError> for Error {
    fn from(e: KubeError) -> Self {
        Error::Api(e)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Api(e) => f.write_str(&e.describe()),
            Error::Json(m) => write!(f, "unexpected JSON: {m}"),
        }
    }
}

impl std::error::Error for Error {}

/// Reads one object; returns its JSON.
pub fn get(target: &ResourceRef, name: &str) -> Result<String, KubeError> {
    crate::sys::kube(KubeCall::Get {
        target: target.clone(),
        name: name.to_string(),
    })
}

/// Lists objects, optionally filtered by a label selector; returns the list's JSON.
pub fn list(target: &ResourceRef, label_selector: Option<&str>) -> Result<String, KubeError> {
    crate::sys::kube(KubeCall::List {
        target: target.clone(),
        label_selector: label_selector.map(str::to_string),
    })
}

/// Creates an object from JSON; returns the created object's JSON.
pub fn create(target: &ResourceRef, body: &str) -> Result<String, KubeError> {
    crate::sys::kube(KubeCall::Create {
        target: target.clone(),
        body: body.to_string(),
    })
}

/// Patches one object; returns the patched object's JSON.
pub fn patch(
    target: &ResourceRef,
    name: &str,
    kind: PatchKind,
    body: &str,
) -> Result<String, KubeError> {
    crate::sys::kube(KubeCall::Patch {
        target: target.clone(),
        name: name.to_string(),
        kind,
        body: body.to_string(),
    })
}

/// Deletes one object (background propagation).
pub fn delete(target: &ResourceRef, name: &str) -> Result<(), KubeError> {
    crate::sys::kube(KubeCall::Delete {
        target: target.clone(),
        name: name.to_string(),
    })
    .map(|_| ())
}

fn decode<T: DeserializeOwned>(json: &str) -> Result<T, Error> {
    serde_json::from_str(json).map_err(|e| Error::Json(e.to_string()))
}

fn encode<B: Serialize + ?Sized>(body: &B) -> Result<String, Error> {
    serde_json::to_string(body).map_err(|e| Error::Json(e.to_string()))
}

/// Reads one object and decodes it into `T` (e.g. `serde_json::Value` or your own struct).
pub fn get_json<T: DeserializeOwned>(target: &ResourceRef, name: &str) -> Result<T, Error> {
    decode(&get(target, name)?)
}

/// Lists objects and decodes the list's `items` into `T`s.
pub fn list_items<T: DeserializeOwned>(
    target: &ResourceRef,
    label_selector: Option<&str>,
) -> Result<Vec<T>, Error> {
    #[derive(serde::Deserialize)]
    struct List<T> {
        #[serde(default = "Vec::new")]
        items: Vec<T>,
    }
    let list: List<T> = decode(&list(target, label_selector)?)?;
    Ok(list.items)
}

/// Creates an object from `body` and decodes the created object into `T`.
pub fn create_json<B: Serialize + ?Sized, T: DeserializeOwned>(
    target: &ResourceRef,
    body: &B,
) -> Result<T, Error> {
    decode(&create(target, &encode(body)?)?)
}

/// Patches an object with `body` and decodes the patched object into `T`.
pub fn patch_json<B: Serialize + ?Sized, T: DeserializeOwned>(
    target: &ResourceRef,
    name: &str,
    kind: PatchKind,
    body: &B,
) -> Result<T, Error> {
    decode(&patch(target, name, kind, &encode(body)?)?)
}
