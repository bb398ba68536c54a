//! The organisation quota of the fake CKE: vCPUs and RAM counted from the flavors' nominal
//! sizes, the control plane included, and the message a refusal carries.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::Flavor;

/// An amount of the two quota resources: vCPUs and nominal RAM in GB (10⁹ bytes, as Clever
/// Cloud prices and counts it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// vCPUs.
    pub vcpu: u32,
    /// RAM in GB.
    #[serde(rename = "memoryGB")]
    pub memory_gb: f64,
}

impl Usage {
    /// An amount of vCPUs and GB.
    pub fn new(vcpu: u32, memory_gb: f64) -> Usage {
        Usage { vcpu, memory_gb }
    }

    /// What `count` nodes of a flavor count for.
    pub fn of(flavor: &Flavor, count: u32) -> Usage {
        Usage {
            vcpu: flavor.vcpu * count,
            memory_gb: f64::from(flavor.memory_gb * count),
        }
    }

    /// Both amounts added.
    pub fn plus(self, other: Usage) -> Usage {
        Usage {
            vcpu: self.vcpu.saturating_add(other.vcpu),
            memory_gb: self.memory_gb + other.memory_gb,
        }
    }
}

/// A demand the organisation's quota refuses: the first resource it exceeds, RAM before
/// vCPU. Its `Display` is the message the NodeGroup's status carries, exactly:
///
/// - RAM: `Quota exceeded: RAM max: limit = 40.0 GB | actual = 48.0 GB` (one decimal);
/// - vCPU: `Quota exceeded: vCPU max: limit = 40 | actual = 48`;
///
/// where `actual` is what the organisation would use with the demand granted.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum QuotaExceeded {
    /// RAM (GB) would exceed the limit.
    Memory {
        /// The organisation's limit.
        limit: f64,
        /// Usage with the demand granted.
        actual: f64,
    },
    /// vCPUs would exceed the limit.
    Vcpu {
        /// The organisation's limit.
        limit: u32,
        /// Usage with the demand granted.
        actual: u32,
    },
}

impl fmt::Display for QuotaExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuotaExceeded::Memory { limit, actual } => write!(
                f,
                "Quota exceeded: RAM max: limit = {limit:.1} GB | actual = {actual:.1} GB"
            ),
            QuotaExceeded::Vcpu { limit, actual } => write!(
                f,
                "Quota exceeded: vCPU max: limit = {limit} | actual = {actual}"
            ),
        }
    }
}

/// Whether `demand` fits under `limit` on top of `used`.
pub fn check(limit: Usage, used: Usage, demand: Usage) -> Result<(), QuotaExceeded> {
    let after = used.plus(demand);
    // A hair of tolerance so that fractional GB limits compare as written.
    if after.memory_gb > limit.memory_gb + 1e-9 {
        return Err(QuotaExceeded::Memory {
            limit: limit.memory_gb,
            actual: after.memory_gb,
        });
    }
    if after.vcpu > limit.vcpu {
        return Err(QuotaExceeded::Vcpu {
            limit: limit.vcpu,
            actual: after.vcpu,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::flavor;
    use super::*;

    #[test]
    fn nominal_sizes_count_and_ram_is_reported_first() {
        let limit = Usage::new(40, 40.0);
        let control_plane = Usage::new(24, 24.0);
        let l = flavor("L").unwrap();
        let refused = check(limit, control_plane, Usage::of(l, 1)).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "Quota exceeded: RAM max: limit = 40.0 GB | actual = 48.0 GB"
        );
        let m = flavor("M").unwrap();
        assert!(
            check(limit, control_plane, Usage::of(m, 1)).is_ok(),
            "24 + 16 GB fits exactly"
        );
        let xs = flavor("XS").unwrap();
        let refused = check(Usage::new(28, 100.0), control_plane, Usage::of(xs, 1)).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "Quota exceeded: vCPU max: limit = 28 | actual = 30"
        );
        assert_eq!(Usage::of(flavor("2XS").unwrap(), 3), Usage::new(12, 12.0));
    }
}
