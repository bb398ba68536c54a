//! Condition types of a NodeClaim, upstream's exact strings.

/// The cloud created the instance.
pub const LAUNCHED: &str = "Launched";
/// A Node with the claim's provider ID joined and was synced.
pub const REGISTERED: &str = "Registered";
/// The Node is Ready with startup and ephemeral taints gone.
pub const INITIALIZED: &str = "Initialized";
/// Launched ∧ Registered ∧ Initialized.
pub const READY: &str = "Ready";
/// The node may be consolidated (consolidateAfter elapsed).
pub const CONSOLIDATABLE: &str = "Consolidatable";
/// The claim no longer matches its NodePool or NodeClass (reason says how).
pub const DRIFTED: &str = "Drifted";
/// A disruption command is in flight.
pub const DISRUPTION_REASON: &str = "DisruptionReason";
/// The cloud accepted the instance's deletion.
pub const INSTANCE_TERMINATING: &str = "InstanceTerminating";
/// The node's pods were drained.
pub const DRAINED: &str = "Drained";
