//! WIT v0.1 (package `joinery:plugin@0.1.0`): the generated host bindings and their
//! conversions to and from the [`crate::contract`] types.
//!
//! One bindings module per world. The cloud-provider world imports every host interface, so
//! the renderer and pricing worlds reuse its import bindings (`with`), and the host
//! implements each import once.

#![allow(missing_docs)]

use crate::contract as c;

/// The `cloud-provider-plugin` world (and the shared host imports).
pub mod cloud {
    wasmtime::component::bindgen!({
        world: "joinery:plugin/cloud-provider-plugin@0.1.0",
        path: "../../wit/v0.1",
        imports: { default: async },
        exports: { default: async },
        with: {
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
    });
}

/// The `userdata-renderer-plugin` world.
pub mod renderer {
    wasmtime::component::bindgen!({
        world: "joinery:plugin/userdata-renderer-plugin@0.1.0",
        path: "../../wit/v0.1",
        imports: { default: async },
        exports: { default: async },
        with: {
            "joinery:plugin/log": super::cloud::joinery::plugin::log,
            "joinery:plugin/config": super::cloud::joinery::plugin::config,
            "joinery:plugin/types": super::cloud::joinery::plugin::types,
        },
    });
}

/// The `pricing-plugin` world.
pub mod pricing {
    wasmtime::component::bindgen!({
        world: "joinery:plugin/pricing-plugin@0.1.0",
        path: "../../wit/v0.1",
        imports: { default: async },
        exports: { default: async },
        with: {
            "joinery:plugin/log": super::cloud::joinery::plugin::log,
            "joinery:plugin/config": super::cloud::joinery::plugin::config,
            "joinery:plugin/cache": super::cloud::joinery::plugin::cache,
            "joinery:plugin/types": super::cloud::joinery::plugin::types,
            "wasi:http": wasmtime_wasi_http::p2::bindings::http,
            "wasi:io": wasmtime_wasi::p2::bindings::io,
            "wasi:clocks": wasmtime_wasi::p2::bindings::clocks,
        },
    });
}

use cloud::exports::joinery::plugin::cloud_provider as w;
use cloud::joinery::plugin::types as wt;
use pricing::exports::joinery::plugin::pricing as wp;
use renderer::exports::joinery::plugin::renderer as wr;

fn list<A, B: From<A>>(items: impl IntoIterator<Item = A>) -> Vec<B> {
    items.into_iter().map(B::from).collect()
}

fn list_ref<'a, A: 'a, B: From<&'a A>>(items: &'a [A]) -> Vec<B> {
    items.iter().map(B::from).collect()
}

impl From<&c::KeyValue> for wt::KeyValue {
    fn from(v: &c::KeyValue) -> Self {
        wt::KeyValue {
            key: v.key.clone(),
            value: v.value.clone(),
        }
    }
}

impl From<wt::KeyValue> for c::KeyValue {
    fn from(v: wt::KeyValue) -> Self {
        c::KeyValue {
            key: v.key,
            value: v.value,
        }
    }
}

impl From<&c::Resource> for wt::Resource {
    fn from(r: &c::Resource) -> Self {
        wt::Resource {
            name: r.name.clone(),
            quantity: r.quantity.clone(),
        }
    }
}

impl From<wt::Resource> for c::Resource {
    fn from(r: wt::Resource) -> Self {
        c::Resource {
            name: r.name,
            quantity: r.quantity,
        }
    }
}

impl From<&c::Taint> for wt::Taint {
    fn from(t: &c::Taint) -> Self {
        wt::Taint {
            key: t.key.clone(),
            value: t.value.clone(),
            effect: t.effect.clone(),
        }
    }
}

impl From<c::Operator> for wt::Operator {
    fn from(op: c::Operator) -> Self {
        match op {
            c::Operator::In => wt::Operator::In,
            c::Operator::NotIn => wt::Operator::NotIn,
            c::Operator::Exists => wt::Operator::Exists,
            c::Operator::DoesNotExist => wt::Operator::DoesNotExist,
            c::Operator::Gt => wt::Operator::Gt,
            c::Operator::Lt => wt::Operator::Lt,
            c::Operator::Gte => wt::Operator::Gte,
            c::Operator::Lte => wt::Operator::Lte,
        }
    }
}

impl From<wt::Operator> for c::Operator {
    fn from(op: wt::Operator) -> Self {
        match op {
            wt::Operator::In => c::Operator::In,
            wt::Operator::NotIn => c::Operator::NotIn,
            wt::Operator::Exists => c::Operator::Exists,
            wt::Operator::DoesNotExist => c::Operator::DoesNotExist,
            wt::Operator::Gt => c::Operator::Gt,
            wt::Operator::Lt => c::Operator::Lt,
            wt::Operator::Gte => c::Operator::Gte,
            wt::Operator::Lte => c::Operator::Lte,
        }
    }
}

impl From<&c::Requirement> for wt::Requirement {
    fn from(r: &c::Requirement) -> Self {
        wt::Requirement {
            key: r.key.clone(),
            operator: r.operator.into(),
            values: r.values.clone(),
            min_values: r.min_values,
        }
    }
}

impl From<wt::Requirement> for c::Requirement {
    fn from(r: wt::Requirement) -> Self {
        c::Requirement {
            key: r.key,
            operator: r.operator.into(),
            values: r.values,
            min_values: r.min_values,
        }
    }
}

impl From<wt::Condition> for c::Condition {
    fn from(v: wt::Condition) -> Self {
        c::Condition {
            type_: v.type_,
            status: v.status,
            reason: v.reason,
            message: v.message,
        }
    }
}

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
