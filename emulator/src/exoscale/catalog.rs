//! The fake's default contents: zones, instance types and public templates.
//!
//! Instance types follow Exoscale's published shapes (vCPU and memory per size of the
//! `standard` family, plus a few `cpu`, `memory` and GPU types). `gpu3.small` is listed but
//! not authorized, as an account that has not asked for GPU access sees it. Templates: two
//! builds of `Linux Ubuntu 24.04 LTS 64-bit` and one of `Linux Debian 12 (Bookworm) 64-bit` in
//! every zone, each with its own ID per zone.
//!
//! IDs derived here are stable (a hash of the object's name and zone), so tests and scenarios
//! can refer to them across runs.

use sha2::{Digest, Sha256};

use super::model::{ExoInstanceType, ExoTemplate, GIB, Visibility};

/// The zones a default fake serves.
pub fn default_zones() -> Vec<String> {
    ["ch-gva-2", "de-fra-1", "at-vie-1"]
        .map(String::from)
        .to_vec()
}

/// Formats 16 bytes as a version-4-shaped UUID.
pub(crate) fn format_uuid(mut bytes: [u8; 16]) -> String {
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex = hex::encode(bytes);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// A stable UUID derived from `seed`.
pub fn stable_uuid(seed: &str) -> String {
    let digest = Sha256::digest(seed.as_bytes());
    let mut bytes = [0u8; 16];
    bytes.copy_from_slice(&digest[..16]);
    format_uuid(bytes)
}

const MIB: u64 = 1 << 20;

/// `(family, size, vCPUs, memory in MiB, GPUs, authorized)`.
const TYPES: &[(&str, &str, u32, u64, u32, bool)] = &[
    ("standard", "micro", 1, 512, 0, true),
    ("standard", "tiny", 1, 1024, 0, true),
    ("standard", "small", 2, 2048, 0, true),
    ("standard", "medium", 2, 4096, 0, true),
    ("standard", "large", 4, 8192, 0, true),
    ("standard", "extra-large", 4, 16_384, 0, true),
    ("standard", "huge", 8, 32_768, 0, true),
    ("standard", "mega", 12, 65_536, 0, true),
    ("standard", "titan", 16, 131_072, 0, true),
    ("standard", "jumbo", 24, 230_400, 0, true),
    ("cpu", "extra-large", 16, 16_384, 0, true),
    ("memory", "extra-large", 4, 32_768, 0, true),
    ("gpua30", "small", 12, 57_344, 1, true),
    ("gpu3", "small", 12, 57_344, 1, false),
];

/// The default instance types, offered in `zones` (GPU types only in the first zone).
pub fn default_instance_types(zones: &[String]) -> Vec<ExoInstanceType> {
    TYPES
        .iter()
        .map(|&(family, size, cpus, memory_mib, gpus, authorized)| {
            let offered = if gpus > 0 {
                zones.iter().take(1).cloned().collect()
            } else {
                zones.to_vec()
            };
            ExoInstanceType {
                id: stable_uuid(&format!("instance-type/{family}.{size}")),
                family: family.to_string(),
                size: size.to_string(),
                cpus,
                gpus,
                memory: memory_mib * MIB,
                authorized,
                zones: offered,
            }
        })
        .collect()
}

/// The name of the default Ubuntu templates.
pub const UBUNTU_2404: &str = "Linux Ubuntu 24.04 LTS 64-bit";
/// The name of the default Debian template.
pub const DEBIAN_12: &str = "Linux Debian 12 (Bookworm) 64-bit";

/// The default public templates of every zone: two Ubuntu builds (the newer one created
/// `2026-03-02`) and one Debian build.
pub fn default_templates(zones: &[String]) -> Vec<ExoTemplate> {
    let builds = [
        (
            UBUNTU_2404,
            "ubuntu",
            "2026-01-10-a",
            "24.04",
            "2026-01-10T08:00:00Z",
            "ubuntu",
        ),
        (
            UBUNTU_2404,
            "ubuntu",
            "2026-03-02-a",
            "24.04",
            "2026-03-02T08:00:00Z",
            "ubuntu",
        ),
        (
            DEBIAN_12,
            "debian",
            "2026-02-01-a",
            "12",
            "2026-02-01T08:00:00Z",
            "debian",
        ),
    ];
    zones
        .iter()
        .flat_map(|zone| {
            builds
                .iter()
                .map(
                    move |&(name, family, build, version, created_at, user)| ExoTemplate {
                        id: stable_uuid(&format!("template/{zone}/{name}/{build}")),
                        zone: zone.clone(),
                        name: name.to_string(),
                        visibility: Visibility::Public,
                        build: build.to_string(),
                        version: version.to_string(),
                        size: 10 * GIB,
                        created_at: created_at.to_string(),
                        family: family.to_string(),
                        default_user: user.to_string(),
                    },
                )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_uuid_shaped() {
        let a = stable_uuid("x");
        assert_eq!(a, stable_uuid("x"));
        assert_ne!(a, stable_uuid("y"));
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        let zones = default_zones();
        let templates = default_templates(&zones);
        assert_eq!(templates.len(), 9);
        assert_ne!(
            templates[0].id, templates[3].id,
            "template IDs differ per zone"
        );
        let types = default_instance_types(&zones);
        let gpu = types.iter().find(|t| t.name() == "gpua30.small").unwrap();
        assert_eq!(gpu.zones, ["ch-gva-2"]);
        assert!(
            !types
                .iter()
                .find(|t| t.name() == "gpu3.small")
                .unwrap()
                .authorized
        );
    }
}
