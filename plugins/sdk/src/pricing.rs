//! Pricing functions (world `pricing-plugin`, feature `pricing`).
//!
//! Implement [`Pricing`] and export it with [`export_pricing!`](crate::export_pricing). The
//! host asks a pricing plugin for every offering whose cloud plugin reported no price
//! (and, depending on the plugin, for all of them).

use std::marker::PhantomData;

pub use crate::bindings::pricing::exports::joinery::plugin::pricing::PriceRequest;
pub use crate::bindings::pricing::joinery::plugin::types::{
    Condition, KeyValue, Operator, Requirement, Resource, Taint,
};
pub use crate::common::{REGISTRATION_TAINT_EFFECT, REGISTRATION_TAINT_KEY};

crate::common::common_type_impls!();

/// Bytes in a GiB.
pub const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// A pricing function.
pub trait Pricing {
    /// Prices a batch. Return exactly one entry per request, in order; `None` keeps a price
    /// unknown. An `Err` fails the whole batch.
    fn price(requests: Vec<PriceRequest>) -> Result<Vec<Option<f64>>, String>;
}

impl PriceRequest {
    /// A request for `instance_type` with `cpu_millis` and `memory_bytes`, on-demand, no
    /// zone, no GPU, no known price, no labels (handy in tests).
    pub fn new(instance_type: impl Into<String>, cpu_millis: u64, memory_bytes: u64) -> Self {
        PriceRequest {
            instance_type: instance_type.into(),
            zone: String::new(),
            capacity_type: "on-demand".to_string(),
            cpu_millis,
            memory_bytes,
            gpu_count: 0,
            known_price: None,
            labels: Vec::new(),
        }
    }

    /// vCPUs as a float (`cpu_millis / 1000`).
    pub fn vcpus(&self) -> f64 {
        self.cpu_millis as f64 / 1000.0
    }

    /// Memory in GiB as a float.
    pub fn memory_gib(&self) -> f64 {
        self.memory_bytes as f64 / GIB
    }

    /// The instance type label `key`, if present.
    pub fn label(&self, key: &str) -> Option<&str> {
        lookup(&self.labels, key)
    }
}

/// Adapts a [`Pricing`] impl to the generated export trait and checks the batch length;
/// used by [`export_pricing!`](crate::export_pricing).
#[doc(hidden)]
pub struct PricingExport<T>(PhantomData<T>);

impl<T: Pricing> crate::bindings::pricing::exports::joinery::plugin::pricing::Guest
    for PricingExport<T>
{
    fn price(requests: Vec<PriceRequest>) -> Result<Vec<Option<f64>>, String> {
        let n = requests.len();
        let prices = T::price(requests)?;
        if prices.len() != n {
            return Err(format!(
                "pricing plugin bug: returned {} prices for {} requests",
                prices.len(),
                n
            ));
        }
        Ok(prices)
    }
}

/// Exports a type implementing [`pricing::Pricing`](crate::pricing::Pricing) as the
/// component's `joinery:plugin/pricing` interface. Invoke it once, at the crate root.
#[macro_export]
macro_rules! export_pricing {
    ($ty:ty) => {
        const _: () = {
            // Checked on every target, so `cargo test` catches a type that does not implement the trait.
            #[allow(dead_code)]
            fn __joinery_check_impl() {
                let _ = <$ty as $crate::pricing::Pricing>::price;
            }
            // The component exports exist only on wasm32: their names are not valid native symbols.
            #[cfg(target_arch = "wasm32")]
            type __JoineryPricingExport = $crate::pricing::PricingExport<$ty>;
            #[cfg(target_arch = "wasm32")]
            $crate::bindings::pricing::__joinery_export_pricing_world!(
                __JoineryPricingExport with_types_in $crate::bindings::pricing
            );
        };
    };
}
