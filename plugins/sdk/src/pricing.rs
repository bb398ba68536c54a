//! Pricing functions (world `pricing-plugin`, feature `pricing`).
//!
//! Implement [`Pricing`] and export it with [`export_pricing!`](crate::export_pricing). The
//! host asks a pricing plugin for every offering whose cloud plugin reported no price: the
//! plugin the cloud plugin's manifest names under `pricing` (or the operator's override),
//! `synthetic-pricing` otherwise.
//!
//! # Table and live-API pricing plugins
//!
//! Both have the same shape:
//!
//! 1. a **seed table** compiled in (sizes and prices, or rates a formula turns into prices),
//!    which an operator may overlay from the configuration;
//! 2. for a live plugin, a fetch that reads the provider's price list over granted HTTP and
//!    **validates** it (currency, units, plausible rates against the seed, body size), kept
//!    by a [`Refresher`](crate::refresh::Refresher): the last good copy lives in the cache,
//!    is refreshed on a jittered schedule, and survives any failure;
//! 3. `price`: the live data when there is some, else the seed table; `None` for what the
//!    plugin does not know.
//!
//! [`check_rate`] and [`round_to`] cover the usual validation and rounding.

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

/// Rounds `value` to `decimals` decimal places (half away from zero), as price lists
/// publish prices.
pub fn round_to(value: f64, decimals: u32) -> f64 {
    let scale = 10f64.powi(decimals.min(15) as i32);
    (value * scale).round() / scale
}

/// Checks a rate read from a price list: a finite number above zero and within `factor`×
/// of `reference` (the rate the plugin ships with) either way. Returns the rate, or an
/// error naming `what`, the value and the accepted range.
///
/// ```
/// # use joinery_plugin_sdk::pricing::check_rate;
/// assert!(check_rate("vcpu", 0.003, 0.0028, 10.0).is_ok());
/// assert!(check_rate("vcpu", 0.5, 0.0028, 10.0).is_err());
/// ```
pub fn check_rate(what: &str, value: f64, reference: f64, factor: f64) -> Result<f64, String> {
    if !value.is_finite() || value <= 0.0 {
        return Err(format!("{what} price {value} is not a positive number"));
    }
    let (low, high) = (reference / factor, reference * factor);
    // A hair of tolerance, so exactly `factor`× passes despite float rounding.
    if value < low * (1.0 - 1e-9) || value > high * (1.0 + 1e-9) {
        return Err(format!(
            "{what} price {value} is not within {factor}x of the expected {reference} (accepted {low}..={high})"
        ));
    }
    Ok(value)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_and_rate_checks() {
        assert_eq!(round_to(0.033_333_333_2, 4), 0.0333);
        assert_eq!(round_to(0.116_666_666_5, 4), 0.1167);
        assert_eq!(round_to(2.5, 0), 3.0);
        assert_eq!(check_rate("ram", 0.0055, 0.0055, 10.0), Ok(0.0055));
        assert!(
            check_rate("ram", 0.055, 0.0055, 10.0).is_ok(),
            "exactly 10x is within"
        );
        assert!(check_rate("ram", 0.000_55, 0.0055, 10.0).is_ok());
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 0.0551, 0.000_54] {
            let e = check_rate("ram", bad, 0.0055, 10.0).unwrap_err();
            assert!(e.starts_with("ram price"), "{e}");
        }
    }
}
