//! Label, annotation, taint and finalizer names shared with upstream Karpenter, and the rules
//! about which label keys users may constrain.
//!
//! The names are part of the compatibility contract: nodes, NodeClaims and pods written by
//! Joinery must look exactly like those written by upstream Karpenter.

use std::collections::BTreeSet;

/// The API group of Karpenter's own resources, and the restricted label domain.
pub const KARPENTER_GROUP: &str = "karpenter.sh";

// --- labels written or read by the core -------------------------------------------------------

/// Name of the NodePool that owns a NodeClaim/Node.
pub const NODEPOOL_LABEL: &str = "karpenter.sh/nodepool";
/// Capacity type of the node: [`CAPACITY_TYPE_ON_DEMAND`], [`CAPACITY_TYPE_SPOT`] or
/// [`CAPACITY_TYPE_RESERVED`].
pub const CAPACITY_TYPE_LABEL: &str = "karpenter.sh/capacity-type";
/// Set to `"true"` on a Node when it is registered.
pub const REGISTERED_LABEL: &str = "karpenter.sh/registered";
/// Set to `"true"` on a Node when it is initialized.
pub const INITIALIZED_LABEL: &str = "karpenter.sh/initialized";
/// `"true"` on a Node stops registration from copying NodeClaim taints onto it.
pub const DO_NOT_SYNC_TAINTS_LABEL: &str = "karpenter.sh/do-not-sync-taints";
/// Zone of the node.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// Region of the node.
pub const REGION_LABEL: &str = "topology.kubernetes.io/region";
/// Instance type name of the node.
pub const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";
/// CPU architecture of the node ([`ARCH_AMD64`], [`ARCH_ARM64`]).
pub const ARCH_LABEL: &str = "kubernetes.io/arch";
/// Operating system of the node.
pub const OS_LABEL: &str = "kubernetes.io/os";
/// Windows build of a Windows node.
pub const WINDOWS_BUILD_LABEL: &str = "node.kubernetes.io/windows-build";
/// Host name of the node; never settable through requirements or template labels.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// Added (with value [`EXCLUDE_FROM_LOAD_BALANCERS_VALUE`]) when a node starts terminating.
pub const EXCLUDE_FROM_LOAD_BALANCERS_LABEL: &str =
    "node.kubernetes.io/exclude-from-external-load-balancers";
/// Value of [`EXCLUDE_FROM_LOAD_BALANCERS_LABEL`] set by the termination flow.
pub const EXCLUDE_FROM_LOAD_BALANCERS_VALUE: &str = "karpenter";

/// Capacity type value: regular on-demand capacity.
pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
/// Capacity type value: interruptible spot capacity.
pub const CAPACITY_TYPE_SPOT: &str = "spot";
/// Capacity type value: capacity reservations.
pub const CAPACITY_TYPE_RESERVED: &str = "reserved";
/// All known capacity types.
pub const CAPACITY_TYPES: [&str; 3] = [
    CAPACITY_TYPE_ON_DEMAND,
    CAPACITY_TYPE_SPOT,
    CAPACITY_TYPE_RESERVED,
];
/// Architecture value for x86-64.
pub const ARCH_AMD64: &str = "amd64";
/// Architecture value for 64-bit ARM.
pub const ARCH_ARM64: &str = "arm64";

// --- taints, finalizer ------------------------------------------------------------------------

/// Taint key (effect NoExecute, no value) a node carries from boot until it is registered.
pub const UNREGISTERED_TAINT_KEY: &str = "karpenter.sh/unregistered";
/// Taint key (effect NoSchedule, no value) put on nodes being disrupted or terminated.
pub const DISRUPTED_TAINT_KEY: &str = "karpenter.sh/disrupted";
/// Finalizer on NodeClaims and Nodes guarding instance cleanup.
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";
/// Taint key set by the node lifecycle controller while a node is not ready.
pub const NOT_READY_TAINT_KEY: &str = "node.kubernetes.io/not-ready";
/// Taint key set by the node lifecycle controller while a node is unreachable.
pub const UNREACHABLE_TAINT_KEY: &str = "node.kubernetes.io/unreachable";
/// Taint key set until the cloud controller manager initialized the node.
pub const CLOUD_UNINITIALIZED_TAINT_KEY: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// Any taint key with this prefix is a readiness gate, ignored while a node initializes.
pub const READINESS_TAINT_PREFIX: &str = "readiness.k8s.io/";

/// Joinery's NodePool annotation asking for a minimum saving before consolidation acts on the
/// pool's nodes: a percentage of what the candidates cost (`"10%"`) or an amount per hour
/// (`"0.05"`). Beyond upstream; absent, consolidation acts on any saving.
pub const CONSOLIDATION_MIN_SAVING_ANNOTATION: &str = "joinery.dev/consolidation-min-saving";

/// Joinery's veto of node repair, `"true"` on a Node or its NodePool: the node is left as it
/// is however long it stays unhealthy (for debugging a sick node). Beyond upstream.
pub const DO_NOT_REPAIR_ANNOTATION: &str = "joinery.dev/do-not-repair";
/// Joinery's NodePool annotation: the share of the pool's nodes that may be unhealthy before
/// repair stops (a percentage, `"20%"`, upstream's fixed value and the default).
pub const REPAIR_MAX_UNHEALTHY_ANNOTATION: &str = "joinery.dev/repair-max-unhealthy";
/// Joinery's NodePool annotation overriding the cloud's repair tolerations for the pool's
/// nodes: one duration for every policy (`"3m"`) or per condition type
/// (`"Ready=3m,MemoryPressure=1m"`).
pub const REPAIR_TOLERATION_ANNOTATION: &str = "joinery.dev/repair-toleration";
/// Joinery's NodePool annotation, `"true"`: repair reboots an unhealthy node once (when its
/// cloud plugin can) and waits the toleration again before replacing it.
pub const REPAIR_REBOOT_FIRST_ANNOTATION: &str = "joinery.dev/repair-reboot-first";
/// When repair rebooted a NodeClaim's instance (RFC 3339), written by the node-health
/// controller on the NodeClaim and removed once its node is healthy again.
pub const REPAIR_REBOOTED_AT_ANNOTATION: &str = "joinery.dev/repair-rebooted-at";

/// Joinery's label naming the cluster an instance was launched for (read back from the
/// cloud's tags); garbage collection reaps only instances carrying this cluster's name.
pub const CLUSTER_LABEL: &str = "joinery.dev/cluster";

// --- annotations ------------------------------------------------------------------------------

/// Blocks voluntary disruption: `"true"` on pods and nodes, or a duration on pods.
pub const DO_NOT_DISRUPT_ANNOTATION: &str = "karpenter.sh/do-not-disrupt";
/// Hash of a NodePool's template, stamped on the pool and its NodeClaims.
pub const NODEPOOL_HASH_ANNOTATION: &str = "karpenter.sh/nodepool-hash";
/// Version of the hashing scheme behind [`NODEPOOL_HASH_ANNOTATION`].
pub const NODEPOOL_HASH_VERSION_ANNOTATION: &str = "karpenter.sh/nodepool-hash-version";
/// Current value of [`NODEPOOL_HASH_VERSION_ANNOTATION`].
pub const NODEPOOL_HASH_VERSION: &str = "v3";
/// RFC 3339 deadline after which a terminating NodeClaim's pods are deleted forcibly.
pub const NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION: &str =
    "karpenter.sh/nodeclaim-termination-timestamp";
/// `"true"` when a NodeClaim's minValues were relaxed (BestEffort policy).
pub const NODECLAIM_MIN_VALUES_RELAXED_ANNOTATION: &str =
    "karpenter.sh/nodeclaim-min-values-relaxed";
/// Comma-separated DRA drivers a NodeClaim waits for before initialization.
pub const REQUESTED_DRA_DRIVERS_ANNOTATION: &str = "karpenter.sh/requested-dra-drivers";
/// `"true"` on NodeClaims whose instance type price came from a NodeOverlay.
pub const PRICE_OVERLAY_APPLIED_ANNOTATION: &str = "karpenter.sh/price-overlay-applied";
/// `"true"` on NodeClaims whose instance type capacity came from a NodeOverlay.
pub const CAPACITY_OVERLAY_APPLIED_ANNOTATION: &str = "karpenter.sh/capacity-overlay-applied";
/// `"true"` on virtual pods standing in for a CapacityBuffer.
pub const CAPACITY_BUFFER_FAKE_POD_ANNOTATION: &str = "karpenter.sh/capacity-buffer-fake-pod";
/// Name of the CapacityBuffer a virtual pod belongs to.
pub const CAPACITY_BUFFER_NAME_ANNOTATION: &str = "karpenter.sh/capacity-buffer-name";
/// Namespace of the CapacityBuffer a virtual pod belongs to.
pub const CAPACITY_BUFFER_NAMESPACE_ANNOTATION: &str = "karpenter.sh/capacity-buffer-namespace";
/// Legacy key used by API conversion.
pub const COMPATIBILITY_PROVIDER_ANNOTATION: &str = "compatibility.karpenter.sh/provider";
/// Kubernetes' pod deletion cost, honoured when ranking disruption candidates.
pub const POD_DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";

// --- well-known and restricted label keys -----------------------------------------------------

/// Label keys that pods and NodePools may constrain without declaring them: instance types
/// are expected to define them (possibly with an empty set).
pub const WELL_KNOWN_LABELS: [&str; 8] = [
    NODEPOOL_LABEL,
    ZONE_LABEL,
    REGION_LABEL,
    INSTANCE_TYPE_LABEL,
    ARCH_LABEL,
    OS_LABEL,
    CAPACITY_TYPE_LABEL,
    WINDOWS_BUILD_LABEL,
];

/// Label keys every offering's requirements must carry (one value each).
pub const OFFERING_LABELS: [&str; 2] = [ZONE_LABEL, CAPACITY_TYPE_LABEL];

/// Label keys that can never be set through requirements or template labels.
pub const RESTRICTED_LABELS: [&str; 1] = [HOSTNAME_LABEL];

/// Deprecated label keys and the key each is rewritten to.
pub const LABEL_ALIASES: [(&str, &str); 5] = [
    ("failure-domain.beta.kubernetes.io/zone", ZONE_LABEL),
    ("failure-domain.beta.kubernetes.io/region", REGION_LABEL),
    ("beta.kubernetes.io/arch", ARCH_LABEL),
    ("beta.kubernetes.io/os", OS_LABEL),
    ("beta.kubernetes.io/instance-type", INSTANCE_TYPE_LABEL),
];

/// Rewrites a deprecated label key to its current name; other keys are returned unchanged.
pub fn normalize_label_key(key: &str) -> &str {
    LABEL_ALIASES
        .iter()
        .find(|(alias, _)| *alias == key)
        .map_or(key, |(_, current)| current)
}

/// The domain (prefix before `/`) of a label key; empty for unprefixed keys.
pub fn label_domain(key: &str) -> &str {
    key.split_once('/').map_or("", |(domain, _)| domain)
}

/// Whether `key` is one of upstream's [`WELL_KNOWN_LABELS`].
pub fn is_well_known_label(key: &str) -> bool {
    WELL_KNOWN_LABELS.contains(&key)
}

/// Whether a taint key is one the node lifecycle sets and clears on its own, ignored while a
/// managed node is still initializing.
pub fn is_known_ephemeral_taint_key(key: &str) -> bool {
    matches!(
        key,
        NOT_READY_TAINT_KEY
            | UNREACHABLE_TAINT_KEY
            | CLOUD_UNINITIALIZED_TAINT_KEY
            | UNREGISTERED_TAINT_KEY
    ) || key.starts_with(READINESS_TAINT_PREFIX)
}

/// Why a label key may not be used in requirements or template labels.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestrictedLabelError {
    /// The key is restricted by name.
    #[error("label {0:?} is restricted")]
    RestrictedKey(String),
    /// The key lives in a restricted domain and is not well-known.
    #[error("label {key:?} uses restricted label domain {domain:?}")]
    RestrictedDomain {
        /// The offending key.
        key: String,
        /// The restricted domain it falls under.
        domain: String,
    },
}

/// Which label keys are well-known and which are restricted, extensible by cloud plugins
/// (a provider adds its own well-known keys and restricts its own domain).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelPolicy {
    well_known: BTreeSet<String>,
    restricted_domains: BTreeSet<String>,
    restricted_keys: BTreeSet<String>,
}

impl Default for LabelPolicy {
    /// Upstream's sets: [`WELL_KNOWN_LABELS`], domain `karpenter.sh`, [`RESTRICTED_LABELS`].
    fn default() -> Self {
        LabelPolicy {
            well_known: WELL_KNOWN_LABELS.iter().map(|s| (*s).to_owned()).collect(),
            restricted_domains: BTreeSet::from([KARPENTER_GROUP.to_owned()]),
            restricted_keys: RESTRICTED_LABELS.iter().map(|s| (*s).to_owned()).collect(),
        }
    }
}

impl LabelPolicy {
    /// Adds a well-known key (e.g. a provider's instance-family label).
    pub fn with_well_known(mut self, key: impl Into<String>) -> Self {
        self.well_known.insert(key.into());
        self
    }

    /// Restricts a label domain and its subdomains (e.g. a provider's own domain).
    pub fn with_restricted_domain(mut self, domain: impl Into<String>) -> Self {
        self.restricted_domains.insert(domain.into());
        self
    }

    /// The well-known keys.
    pub fn well_known(&self) -> &BTreeSet<String> {
        &self.well_known
    }

    /// Whether the key is well-known.
    pub fn is_well_known(&self, key: &str) -> bool {
        self.well_known.contains(key)
    }

    /// Checks that a (normalized) key may be used in requirements or template labels:
    /// restricted keys never; keys whose domain ends with a restricted domain only if they
    /// are well-known (so `karpenter.sh/capacity-type` passes, `karpenter.sh/foo` does not).
    pub fn check(&self, key: &str) -> Result<(), RestrictedLabelError> {
        if self.restricted_keys.contains(key) {
            return Err(RestrictedLabelError::RestrictedKey(key.to_owned()));
        }
        if self.is_well_known(key) {
            return Ok(());
        }
        let domain = label_domain(key);
        if let Some(restricted) = self
            .restricted_domains
            .iter()
            .find(|restricted| domain.ends_with(restricted.as_str()))
        {
            return Err(RestrictedLabelError::RestrictedDomain {
                key: key.to_owned(),
                domain: restricted.clone(),
            });
        }
        Ok(())
    }

    /// Whether [`check`](Self::check) rejects the key.
    pub fn is_restricted(&self, key: &str) -> bool {
        self.check(key).is_err()
    }
}

/// Whether upstream's default policy rejects the key (see [`LabelPolicy::check`]).
pub fn is_restricted_label(key: &str) -> bool {
    // Hot path for the common cases, same answer as `LabelPolicy::default().is_restricted`.
    if key == HOSTNAME_LABEL {
        return true;
    }
    if is_well_known_label(key) {
        return false;
    }
    label_domain(key).ends_with(KARPENTER_GROUP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_upstream_names() {
        assert_eq!(NODEPOOL_LABEL, "karpenter.sh/nodepool");
        assert_eq!(CAPACITY_TYPE_LABEL, "karpenter.sh/capacity-type");
        assert_eq!(UNREGISTERED_TAINT_KEY, "karpenter.sh/unregistered");
        assert_eq!(DISRUPTED_TAINT_KEY, "karpenter.sh/disrupted");
        assert_eq!(TERMINATION_FINALIZER, "karpenter.sh/termination");
        assert_eq!(DO_NOT_DISRUPT_ANNOTATION, "karpenter.sh/do-not-disrupt");
        assert_eq!(NODEPOOL_HASH_ANNOTATION, "karpenter.sh/nodepool-hash");
        assert_eq!(CAPACITY_TYPES, ["on-demand", "spot", "reserved"]);
        assert_eq!(WELL_KNOWN_LABELS.len(), 8);
    }

    #[test]
    fn normalizes_aliases() {
        assert_eq!(
            normalize_label_key("failure-domain.beta.kubernetes.io/zone"),
            ZONE_LABEL
        );
        assert_eq!(
            normalize_label_key("failure-domain.beta.kubernetes.io/region"),
            REGION_LABEL
        );
        assert_eq!(normalize_label_key("beta.kubernetes.io/arch"), ARCH_LABEL);
        assert_eq!(normalize_label_key("beta.kubernetes.io/os"), OS_LABEL);
        assert_eq!(
            normalize_label_key("beta.kubernetes.io/instance-type"),
            INSTANCE_TYPE_LABEL
        );
        assert_eq!(normalize_label_key("example.com/team"), "example.com/team");
        assert_eq!(normalize_label_key(ZONE_LABEL), ZONE_LABEL);
    }

    #[test]
    fn restricted_labels() {
        assert!(is_restricted_label("kubernetes.io/hostname"));
        assert!(is_restricted_label("karpenter.sh/registered"));
        assert!(is_restricted_label("karpenter.sh/anything"));
        assert!(is_restricted_label("sub.karpenter.sh/x"));
        assert!(!is_restricted_label("karpenter.sh/capacity-type"));
        assert!(!is_restricted_label("karpenter.sh/nodepool"));
        assert!(!is_restricted_label("topology.kubernetes.io/zone"));
        assert!(!is_restricted_label("example.com/team"));
        assert!(!is_restricted_label("team"));
        assert!(!is_restricted_label("kubernetes.io/arch"));
    }

    #[test]
    fn policy_matches_fast_path_and_extends() {
        let default = LabelPolicy::default();
        for key in [
            "kubernetes.io/hostname",
            "karpenter.sh/x",
            "karpenter.sh/nodepool",
            "a.b/c",
            "x",
            "node.kubernetes.io/instance-type",
        ] {
            assert_eq!(
                default.is_restricted(key),
                is_restricted_label(key),
                "{key}"
            );
        }
        assert_eq!(
            default.check("karpenter.sh/x"),
            Err(RestrictedLabelError::RestrictedDomain {
                key: "karpenter.sh/x".into(),
                domain: "karpenter.sh".into()
            })
        );
        assert!(
            default
                .check("kubernetes.io/hostname")
                .unwrap_err()
                .to_string()
                .contains("kubernetes.io/hostname")
        );

        let kwok = LabelPolicy::default()
            .with_restricted_domain("karpenter.kwok.sh")
            .with_well_known("karpenter.kwok.sh/instance-size");
        assert!(kwok.is_restricted("karpenter.kwok.sh/other"));
        assert!(!kwok.is_restricted("karpenter.kwok.sh/instance-size"));
        assert!(kwok.is_well_known("karpenter.kwok.sh/instance-size"));
        assert!(!default.is_well_known("karpenter.kwok.sh/instance-size"));
    }

    #[test]
    fn ephemeral_taints() {
        assert!(is_known_ephemeral_taint_key("node.kubernetes.io/not-ready"));
        assert!(is_known_ephemeral_taint_key("readiness.k8s.io/network"));
        assert!(is_known_ephemeral_taint_key(UNREGISTERED_TAINT_KEY));
        assert!(!is_known_ephemeral_taint_key(DISRUPTED_TAINT_KEY));
        assert_eq!(label_domain("a.io/b"), "a.io");
        assert_eq!(label_domain("plain"), "");
    }
}
