//! The WIT versions this host speaks, one module each (the way Zed keeps one module per
//! extension API version).
//!
//! Each module holds the bindings wasmtime generates for its version and the conversions
//! between them and the version-independent [`crate::contract`] types. Nothing outside the
//! runtime sees a generated type. Supporting a new WIT version means adding a module here
//! (bindings plus conversions) and teaching [`crate::plugin`] to instantiate it; the
//! controllers do not change.

/// The conversions between one WIT version's generated records (the cloud-provider,
/// renderer and pricing interfaces, imported as `w`, `wr` and `wp` at the call site) and the
/// [`crate::contract`] types. The generated records have the same shape in every version, so
/// one text serves them all; `extra_errors` adds the `cloud-error` cases a version has beyond
/// 0.1. The `types` interface is shared as is (see `v0_2`).
macro_rules! record_conversions {
    (extra_errors: { $($extra_error:tt)* }) => {
        impl From<&c::NodeClass> for w::NodeClass {
            fn from(n: &c::NodeClass) -> Self {
                w::NodeClass {
                    name: n.name.clone(),
                    uid: n.uid.clone(),
                    generation: n.generation,
                    spec: n.spec.clone(),
                    status: n.status.clone(),
                }
            }
        }

        impl From<w::NodeClassResolution> for c::NodeClassResolution {
            fn from(r: w::NodeClassResolution) -> Self {
                c::NodeClassResolution {
                    conditions: list(r.conditions),
                    status: r.status,
                }
            }
        }

        impl From<&c::NodeClaim> for w::NodeClaim {
            fn from(n: &c::NodeClaim) -> Self {
                w::NodeClaim {
                    name: n.name.clone(),
                    uid: n.uid.clone(),
                    node_pool: n.node_pool.clone(),
                    labels: list_ref(&n.labels),
                    annotations: list_ref(&n.annotations),
                    taints: list_ref(&n.taints),
                    startup_taints: list_ref(&n.startup_taints),
                    requirements: list_ref(&n.requirements),
                    resource_requests: list_ref(&n.resource_requests),
                    provider_id: n.provider_id.clone(),
                }
            }
        }

        impl From<w::InstanceType> for c::InstanceType {
            fn from(t: w::InstanceType) -> Self {
                c::InstanceType {
                    name: t.name,
                    requirements: list(t.requirements),
                    capacity: list(t.capacity),
                    overhead: c::Overhead {
                        kube_reserved: list(t.overhead.kube_reserved),
                        system_reserved: list(t.overhead.system_reserved),
                        eviction_threshold: list(t.overhead.eviction_threshold),
                    },
                    offerings: t
                        .offerings
                        .into_iter()
                        .map(|o| c::Offering {
                            zone: o.zone,
                            capacity_type: o.capacity_type,
                            price: o.price,
                            available: o.available,
                        })
                        .collect(),
                }
            }
        }

        impl From<&c::CreateRequest> for w::CreateRequest {
            fn from(r: &c::CreateRequest) -> Self {
                w::CreateRequest {
                    claim: (&r.claim).into(),
                    node_class: (&r.node_class).into(),
                    user_data: r.user_data.clone(),
                }
            }
        }

        impl From<w::InstanceState> for c::InstanceState {
            fn from(s: w::InstanceState) -> Self {
                match s {
                    w::InstanceState::Pending => c::InstanceState::Pending,
                    w::InstanceState::Running => c::InstanceState::Running,
                    w::InstanceState::Terminating => c::InstanceState::Terminating,
                    w::InstanceState::Terminated => c::InstanceState::Terminated,
                }
            }
        }

        impl From<w::Instance> for c::Instance {
            fn from(i: w::Instance) -> Self {
                c::Instance {
                    provider_id: i.provider_id,
                    instance_type: i.instance_type,
                    zone: i.zone,
                    capacity_type: i.capacity_type,
                    image_id: i.image_id,
                    labels: list(i.labels),
                    capacity: list(i.capacity),
                    allocatable: list(i.allocatable),
                    state: i.state.into(),
                    node_claim: i.node_claim,
                    created_at: i.created_at,
                }
            }
        }

        impl From<w::CloudError> for c::CloudError {
            fn from(e: w::CloudError) -> Self {
                match e {
                    w::CloudError::NotFound(m) => c::CloudError::NotFound(m),
                    w::CloudError::InsufficientCapacity(i) => {
                        c::CloudError::InsufficientCapacity(c::InsufficientCapacity {
                            message: i.message,
                            offerings: i
                                .offerings
                                .into_iter()
                                .map(|o| c::OfferingRef {
                                    instance_type: o.instance_type,
                                    zone: o.zone,
                                    capacity_type: o.capacity_type,
                                })
                                .collect(),
                        })
                    }
                    w::CloudError::NodeClassNotReady(m) => c::CloudError::NodeClassNotReady(m),
                    w::CloudError::QuotaExceeded(m) => c::CloudError::QuotaExceeded(m),
                    w::CloudError::Retryable(r) => c::CloudError::Retryable(c::Retryable {
                        message: r.message,
                        retry_after_ms: r.retry_after_ms,
                    }),
                    w::CloudError::Invalid(m) => c::CloudError::Invalid(m),
                    w::CloudError::Internal(m) => c::CloudError::Internal(m),
                    $($extra_error)*
                }
            }
        }

        impl From<&c::RenderContext> for wr::RenderContext {
            fn from(r: &c::RenderContext) -> Self {
                wr::RenderContext {
                    node_claim: r.node_claim.clone(),
                    node_pool: r.node_pool.clone(),
                    labels: list_ref(&r.labels),
                    taints: list_ref(&r.taints),
                    startup_taints: list_ref(&r.startup_taints),
                    kubelet: r.kubelet.clone(),
                    instance_type: r.instance_type.clone(),
                    zone: r.zone.clone(),
                    capacity_type: r.capacity_type.clone(),
                    cluster_name: r.cluster_name.clone(),
                    cluster_endpoint: r.cluster_endpoint.clone(),
                    provider_id_prefix: r.provider_id_prefix.clone(),
                    user_data: r.user_data.clone(),
                    parameters: list_ref(&r.parameters),
                    secrets: list_ref(&r.secrets),
                    resource_requests: list_ref(&r.resource_requests),
                }
            }
        }

        impl From<wr::RenderError> for c::RenderError {
            fn from(e: wr::RenderError) -> Self {
                match e {
                    wr::RenderError::InvalidParameter(m) => c::RenderError::InvalidParameter(m),
                    wr::RenderError::MissingSecret(m) => c::RenderError::MissingSecret(m),
                    wr::RenderError::InvalidTemplate(m) => c::RenderError::InvalidTemplate(m),
                }
            }
        }

        impl From<&c::PriceRequest> for wp::PriceRequest {
            fn from(r: &c::PriceRequest) -> Self {
                wp::PriceRequest {
                    instance_type: r.instance_type.clone(),
                    zone: r.zone.clone(),
                    capacity_type: r.capacity_type.clone(),
                    cpu_millis: r.cpu_millis,
                    memory_bytes: r.memory_bytes,
                    gpu_count: r.gpu_count,
                    known_price: r.known_price,
                    labels: list_ref(&r.labels),
                }
            }
        }
        by_from!(
            w::NodeClassResolution => c::NodeClassResolution,
            w::InstanceType => c::InstanceType,
            w::Instance => c::Instance,
        );
    };
}

/// A value a plugin returned, converted to its [`crate::contract`] form. Unlike `Into`,
/// the target is fixed by the wire type, so one generic call site (`cloud_call!`) converts
/// the answers of every WIT version without type annotations.
pub(crate) trait IntoContract {
    /// The contract type.
    type Contract;
    /// Converts.
    fn into_contract(self) -> Self::Contract;
}

/// `IntoContract` for types that already are what the contract uses.
macro_rules! as_is {
    ($($t:ty),*) => {
        $(impl IntoContract for $t {
            type Contract = $t;
            fn into_contract(self) -> $t {
                self
            }
        })*
    };
}
as_is!((), String);

impl<T: IntoContract> IntoContract for Vec<T> {
    type Contract = Vec<T::Contract>;
    fn into_contract(self) -> Self::Contract {
        self.into_iter().map(T::into_contract).collect()
    }
}

impl<T: IntoContract> IntoContract for Option<T> {
    type Contract = Option<T::Contract>;
    fn into_contract(self) -> Self::Contract {
        self.map(T::into_contract)
    }
}

/// `IntoContract` through the wire type's `From` conversion: `by_from!(w::Instance => c::Instance)`.
macro_rules! by_from {
    ($($wire:ty => $contract:ty),* $(,)?) => {
        $(impl $crate::wit::IntoContract for $wire {
            type Contract = $contract;
            fn into_contract(self) -> $contract {
                self.into()
            }
        })*
    };
}

/// `list(items)`: converts every item (`From`).
pub(crate) fn list<A, B: From<A>>(items: impl IntoIterator<Item = A>) -> Vec<B> {
    items.into_iter().map(B::from).collect()
}

/// `list_ref(items)`: converts every borrowed item (`From<&A>`).
pub(crate) fn list_ref<'a, A: 'a, B: From<&'a A>>(items: &'a [A]) -> Vec<B> {
    items.iter().map(B::from).collect()
}

pub mod v0_1;
pub mod v0_2;
