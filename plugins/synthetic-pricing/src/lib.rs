//! # synthetic-pricing — a linear price model
//!
//! `price = cpuRate × vCPU + memoryRate × GiB + gpuRate × GPUs`, multiplied by `spotFactor`
//! for `spot` offerings (`on-demand` and `reserved` pay the full price).
//!
//! Configuration (JSON, every field optional):
//!
//! | field | default | meaning |
//! |---|---|---|
//! | `cpuRate` | `0.025` | price per vCPU-hour |
//! | `memoryRate` | `0.001` | price per GiB-hour |
//! | `gpuRate` | `0.5` | price per GPU-hour |
//! | `spotFactor` | `0.7` | multiplier for spot offerings |
//! | `overrides` | `{}` | `{instanceTypeName: price}`: the on-demand price of that type (spot still gets `spotFactor`) |
//! | `preferKnownPrices` | `true` | a request that carries a known price gets it back unchanged |
//!
//! Precedence per request: known price (when `preferKnownPrices`), then override, then the
//! formula. Because the model is linear in resources, the cheapest type that fits a set of
//! pods is also the one that wastes the least.

use joinery_plugin_sdk::pricing::{PriceRequest, Pricing};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The plugin's configuration.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// Price per vCPU-hour.
    pub cpu_rate: f64,
    /// Price per GiB-hour of memory.
    pub memory_rate: f64,
    /// Price per GPU-hour.
    pub gpu_rate: f64,
    /// Multiplier applied to spot offerings.
    pub spot_factor: f64,
    /// On-demand price per instance type name.
    pub overrides: BTreeMap<String, f64>,
    /// Return a request's known price unchanged.
    pub prefer_known_prices: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            cpu_rate: 0.025,
            memory_rate: 0.001,
            gpu_rate: 0.5,
            spot_factor: 0.7,
            overrides: BTreeMap::new(),
            prefer_known_prices: true,
        }
    }
}

impl Config {
    /// Rejects negative or non-finite rates and overrides.
    pub fn validate(&self) -> Result<(), String> {
        let rates = [
            ("cpuRate", self.cpu_rate),
            ("memoryRate", self.memory_rate),
            ("gpuRate", self.gpu_rate),
            ("spotFactor", self.spot_factor),
        ];
        for (name, v) in rates {
            if !v.is_finite() || v < 0.0 {
                return Err(format!(
                    "invalid configuration: {name} must be a non-negative number, got {v}"
                ));
            }
        }
        for (name, v) in &self.overrides {
            if !v.is_finite() || *v < 0.0 {
                return Err(format!(
                    "invalid configuration: overrides.{name} must be a non-negative number, got {v}"
                ));
            }
        }
        Ok(())
    }

    /// Prices one request.
    pub fn price(&self, r: &PriceRequest) -> Option<f64> {
        if let Some(known) = r.known_price.filter(|_| self.prefer_known_prices) {
            return Some(known);
        }
        let on_demand = match self.overrides.get(&r.instance_type) {
            Some(p) => *p,
            None => {
                self.cpu_rate * r.vcpus()
                    + self.memory_rate * r.memory_gib()
                    + self.gpu_rate * f64::from(r.gpu_count)
            }
        };
        let price = if r.capacity_type == "spot" {
            on_demand * self.spot_factor
        } else {
            on_demand
        };
        price.is_finite().then_some(price)
    }
}

/// The synthetic pricing function.
pub struct SyntheticPricing;

impl SyntheticPricing {
    /// Prices a batch with an explicit configuration.
    pub fn price_with(
        config: &Config,
        requests: &[PriceRequest],
    ) -> Result<Vec<Option<f64>>, String> {
        config.validate()?;
        Ok(requests.iter().map(|r| config.price(r)).collect())
    }
}

impl Pricing for SyntheticPricing {
    fn price(requests: Vec<PriceRequest>) -> Result<Vec<Option<f64>>, String> {
        let config: Config = joinery_plugin_sdk::config()?;
        Self::price_with(&config, &requests)
    }
}

joinery_plugin_sdk::export_pricing!(SyntheticPricing);

#[cfg(test)]
mod tests {
    use super::*;
    use joinery_plugin_sdk::testing::{self, FakeHost};

    const GIB: u64 = 1 << 30;

    fn req(name: &str, vcpu: u64, gib: u64) -> PriceRequest {
        PriceRequest::new(name, vcpu * 1000, gib * GIB)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    #[test]
    fn linear_prices_rank_types_by_size() {
        let prices = SyntheticPricing::price(vec![
            req("c3-4", 2, 4),
            req("c3-8", 4, 8),
            req("c3-16", 8, 16),
        ])
        .unwrap();
        let p: Vec<f64> = prices.into_iter().map(Option::unwrap).collect();
        assert!(p[0] < p[1] && p[1] < p[2], "{p:?}");
        assert!(close(p[0], 0.025 * 2.0 + 0.001 * 4.0));
        assert!(close(p[2], 0.025 * 8.0 + 0.001 * 16.0));
        // Linear: twice the resources cost exactly twice as much.
        assert!(close(p[1], 2.0 * p[0]) && close(p[2], 2.0 * p[1]));
    }

    #[test]
    fn spot_gpu_and_config() {
        let _host = testing::install(FakeHost::new().with_config(
            r#"{"cpuRate": 0.1, "memoryRate": 0.01, "gpuRate": 1.0, "spotFactor": 0.5}"#,
        ));
        let mut gpu = req("g1", 4, 16);
        gpu.gpu_count = 2;
        let mut spot = req("c3-4", 2, 4);
        spot.capacity_type = "spot".into();
        let p = SyntheticPricing::price(vec![gpu, spot]).unwrap();
        assert!(close(p[0].unwrap(), 0.4 + 0.16 + 2.0));
        assert!(close(p[1].unwrap(), (0.2 + 0.04) * 0.5));
    }

    #[test]
    fn overrides_and_known_prices() {
        let _host =
            testing::install(FakeHost::new().with_config(r#"{"overrides": {"c3-8": 1.5}}"#));
        let mut known = req("c3-4", 2, 4);
        known.known_price = Some(9.99);
        let mut spot_override = req("c3-8", 4, 8);
        spot_override.capacity_type = "spot".into();
        let p =
            SyntheticPricing::price(vec![known.clone(), req("c3-8", 4, 8), spot_override]).unwrap();
        assert_eq!(p[0], Some(9.99));
        assert_eq!(p[1], Some(1.5));
        assert!(close(p[2].unwrap(), 1.5 * 0.7));

        // With preferKnownPrices off, the known price is recomputed.
        let _host =
            testing::install(FakeHost::new().with_config(r#"{"preferKnownPrices": false}"#));
        let p = SyntheticPricing::price(vec![known]).unwrap();
        assert!(close(p[0].unwrap(), 0.054));
    }

    #[test]
    fn one_output_per_request() {
        assert_eq!(
            SyntheticPricing::price(vec![]).unwrap(),
            Vec::<Option<f64>>::new()
        );
        let many: Vec<PriceRequest> = (0..600)
            .map(|i| req(&format!("t{i}"), 1 + i % 7, 2))
            .collect();
        let p = SyntheticPricing::price(many).unwrap();
        assert_eq!(p.len(), 600);
        assert!(p.iter().all(Option::is_some));
        // Duplicate requests each get an answer.
        assert_eq!(
            SyntheticPricing::price(vec![req("a", 1, 1), req("a", 1, 1)])
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn bad_config_is_an_error() {
        for cfg in [
            r#"{"cpuRate": -1}"#,
            r#"{"cpuRate": "cheap"}"#,
            r#"{"cpuRat": 1}"#,
            r#"{"overrides": {"x": -2}}"#,
        ] {
            let _host = testing::install(FakeHost::new().with_config(cfg));
            let err = SyntheticPricing::price(vec![req("a", 1, 1)]).unwrap_err();
            assert!(err.contains("configuration"), "{cfg}: {err}");
        }
    }
}
