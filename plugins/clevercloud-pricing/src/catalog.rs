//! The flavors this plugin prices, the default rates and the price formula.

use joinery_plugin_sdk::pricing::round_to;
use serde::{Deserialize, Serialize};

/// Default price of one vCPU for one hour, in EUR.
pub const DEFAULT_VCPU_RATE: f64 = 0.002_777_777_77;
/// Default price of one GB (10⁹ bytes) of nominal memory for one hour, in EUR.
pub const DEFAULT_RAM_RATE_PER_GB: f64 = 0.005_555_555_55;
/// Decimal places of a published price.
pub const PRICE_DECIMALS: u32 = 4;

/// One Clever Cloud Kubernetes flavor: its size as the price list counts it.
#[derive(Clone, Debug, PartialEq)]
pub struct Flavor {
    /// Flavor name, also the instance type name (`2XS`, `XS`, …).
    pub name: String,
    /// vCPUs.
    pub cpu: f64,
    /// Nominal memory in GB (the price basis; the kernel sees a little less).
    pub memory_gb: f64,
    /// A price the operator pinned (EUR/hour), used whatever the rates say.
    pub pinned_price: Option<f64>,
}

/// The built-in flavors: name, vCPUs, nominal GB and the published EUR/hour price.
pub const SEED: &[(&str, f64, f64, f64)] = &[
    ("2XS", 4.0, 4.0, 0.0333),
    ("XS", 6.0, 8.0, 0.0611),
    ("S", 8.0, 12.0, 0.0889),
    ("M", 10.0, 16.0, 0.1167),
    ("L", 12.0, 24.0, 0.1667),
    ("XL", 16.0, 32.0, 0.2222),
];

/// The built-in flavors, without pinned prices (their table prices follow from the formula
/// with the default rates).
pub fn seed_flavors() -> Vec<Flavor> {
    SEED.iter()
        .map(|(name, cpu, memory_gb, _)| Flavor {
            name: (*name).to_string(),
            cpu: *cpu,
            memory_gb: *memory_gb,
            pinned_price: None,
        })
        .collect()
}

/// Per-unit prices, EUR/hour.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rates {
    /// Per vCPU.
    pub vcpu: f64,
    /// Per GB of nominal memory.
    pub ram_per_gb: f64,
}

impl Rates {
    /// The built-in rates, which reproduce the built-in table.
    pub const DEFAULT: Rates = Rates {
        vcpu: DEFAULT_VCPU_RATE,
        ram_per_gb: DEFAULT_RAM_RATE_PER_GB,
    };

    /// `cpu × vcpu + nominalGB × ram_per_gb`, rounded to 4 decimals.
    pub fn price(&self, flavor: &Flavor) -> f64 {
        round_to(
            flavor.cpu * self.vcpu + flavor.memory_gb * self.ram_per_gb,
            PRICE_DECIMALS,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_formula_with_the_default_rates_reproduces_the_table() {
        for (flavor, (name, _, _, table_price)) in seed_flavors().iter().zip(SEED) {
            assert_eq!(&flavor.name, name);
            assert_eq!(Rates::DEFAULT.price(flavor), *table_price, "{name}");
        }
    }

    #[test]
    fn prices_rise_with_size() {
        let prices: Vec<f64> = seed_flavors()
            .iter()
            .map(|f| Rates::DEFAULT.price(f))
            .collect();
        assert!(prices.windows(2).all(|w| w[0] < w[1]), "{prices:?}");
    }

    #[test]
    fn other_rates_scale_the_formula() {
        let doubled = Rates {
            vcpu: 2.0 * DEFAULT_VCPU_RATE,
            ram_per_gb: 2.0 * DEFAULT_RAM_RATE_PER_GB,
        };
        let m = &seed_flavors()[3];
        assert_eq!(doubled.price(m), 0.2333);
        let cpu_only = Rates {
            vcpu: 0.01,
            ram_per_gb: 0.0,
        };
        assert_eq!(cpu_only.price(m), 0.1);
    }
}
