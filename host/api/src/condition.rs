//! Status conditions shared by NodePool, NodeClaim and NodeOverlay, plus the well-known
//! condition types and reasons.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Status of a [`Condition`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// It is not (yet) known whether the condition holds.
    Unknown,
}

impl ConditionStatus {
    /// The wire form (`"True"`, `"False"`, `"Unknown"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }
}

impl std::fmt::Display for ConditionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of `status.conditions`: the state of one aspect of the object.
///
/// `reason` and `message` are always written (as upstream does); when read, a missing one
/// becomes the empty string.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::schema::strict_condition)]
pub struct Condition {
    /// Condition type, CamelCase or `domain/CamelCase` (e.g. `Ready`, `Launched`).
    #[serde(rename = "type")]
    #[schemars(extend("maxLength" = 316, "pattern" = crate::patterns::CONDITION_TYPE))]
    pub type_: String,
    /// Whether the condition holds: `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    /// The `.metadata.generation` the condition was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
    /// When `status` last changed.
    pub last_transition_time: Time,
    /// Machine-readable CamelCase reason for the last transition.
    #[serde(default)]
    #[schemars(extend(
        "minLength" = 1,
        "maxLength" = 1024,
        "pattern" = crate::patterns::CONDITION_REASON
    ))]
    pub reason: String,
    /// Human-readable details about the last transition (may be empty).
    #[serde(default)]
    #[schemars(extend("maxLength" = 32768))]
    pub message: String,
}

impl Condition {
    /// Builds a condition without an observed generation.
    pub fn new(
        type_: impl Into<String>,
        status: ConditionStatus,
        reason: impl Into<String>,
        message: impl Into<String>,
        last_transition_time: Time,
    ) -> Self {
        Self {
            type_: type_.into(),
            status,
            observed_generation: None,
            last_transition_time,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// Whether `status` is `True`.
    pub fn is_true(&self) -> bool {
        self.status == ConditionStatus::True
    }

    /// Whether `status` is `False`.
    pub fn is_false(&self) -> bool {
        self.status == ConditionStatus::False
    }

    /// Whether `status` is `Unknown`.
    pub fn is_unknown(&self) -> bool {
        self.status == ConditionStatus::Unknown
    }
}

/// Finds the condition of the given type.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Inserts or updates a condition (matched by type) and reports whether anything changed.
///
/// Like upstream, `lastTransitionTime` only moves when `status` changes: updating only the
/// reason, message or observed generation keeps the previous transition time.
pub fn set_condition(conditions: &mut Vec<Condition>, condition: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == condition.type_) {
        None => {
            conditions.push(condition);
            true
        }
        Some(existing) => {
            let mut next = condition;
            if existing.status == next.status {
                next.last_transition_time = existing.last_transition_time.clone();
            }
            if *existing == next {
                false
            } else {
                *existing = next;
                true
            }
        }
    }
}

/// Removes the condition of the given type and reports whether one was present.
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

/// Access to an object's `status.conditions`, with convenience look-ups.
pub trait HasConditions {
    /// The current conditions (empty when the status has none).
    fn conditions(&self) -> &[Condition];

    /// The conditions list, created empty if absent.
    fn conditions_mut(&mut self) -> &mut Vec<Condition>;

    /// The condition of the given type.
    fn condition(&self, type_: &str) -> Option<&Condition> {
        find_condition(self.conditions(), type_)
    }

    /// Whether the condition of the given type exists and is `True`.
    fn is_condition_true(&self, type_: &str) -> bool {
        self.condition(type_).is_some_and(Condition::is_true)
    }

    /// Inserts or updates a condition; see [`set_condition`].
    fn set_condition(&mut self, condition: Condition) -> bool {
        set_condition(self.conditions_mut(), condition)
    }

    /// Removes a condition; see [`remove_condition`].
    fn remove_condition(&mut self, type_: &str) -> bool {
        remove_condition(self.conditions_mut(), type_)
    }
}

/// Condition type strings (`status.conditions[].type`).
pub mod types {
    /// Root condition of every kind; derived from the kind's other conditions.
    pub const READY: &str = "Ready";

    // NodeClaim.
    /// NodeClaim: the cloud provider created the instance.
    pub const LAUNCHED: &str = "Launched";
    /// NodeClaim: a Node with the NodeClaim's provider ID joined the cluster.
    pub const REGISTERED: &str = "Registered";
    /// NodeClaim: the Node is ready, startup taints are gone and resources are registered.
    pub const INITIALIZED: &str = "Initialized";
    /// NodeClaim: consolidation is enabled and `consolidateAfter` elapsed since the last pod event.
    pub const CONSOLIDATABLE: &str = "Consolidatable";
    /// NodeClaim: the NodeClaim no longer matches its NodePool/NodeClass (reason = drift reason).
    pub const DRIFTED: &str = "Drifted";
    /// NodeClaim: the Node was drained during termination.
    pub const DRAINED: &str = "Drained";
    /// NodeClaim: volumes attached to the Node are detached during termination.
    pub const VOLUMES_DETACHED: &str = "VolumesDetached";
    /// NodeClaim: the cloud provider was asked to delete the instance.
    pub const INSTANCE_TERMINATING: &str = "InstanceTerminating";
    /// NodeClaim: the Node's observed capacity matches what the instance type promised.
    pub const CONSISTENT_STATE_FOUND: &str = "ConsistentStateFound";
    /// NodeClaim: a disruption command is in flight (reason = `Underutilized|Empty|Drifted`).
    pub const DISRUPTION_REASON: &str = "DisruptionReason";

    // NodePool / NodeOverlay.
    /// NodePool/NodeOverlay: runtime validation of the spec passed.
    pub const VALIDATION_SUCCEEDED: &str = "ValidationSucceeded";
    /// NodePool: the referenced NodeClass exists and is Ready.
    pub const NODE_CLASS_READY: &str = "NodeClassReady";
    /// NodePool: recent launches/registrations mostly succeeded (informational).
    pub const NODE_REGISTRATION_HEALTHY: &str = "NodeRegistrationHealthy";

    /// Conditions that make up a NodeClaim's `Ready`.
    pub const NODE_CLAIM_READY_DEPENDENTS: &[&str] = &[LAUNCHED, REGISTERED, INITIALIZED];
    /// Conditions that make up a NodePool's `Ready`.
    pub const NODE_POOL_READY_DEPENDENTS: &[&str] = &[VALIDATION_SUCCEEDED, NODE_CLASS_READY];
    /// Conditions that make up a NodeOverlay's `Ready`.
    pub const NODE_OVERLAY_READY_DEPENDENTS: &[&str] = &[VALIDATION_SUCCEEDED];
}

/// Condition reason strings (`status.conditions[].reason`) used by upstream core.
pub mod reasons {
    /// Launched=Unknown: the create call failed.
    pub const LAUNCH_FAILED: &str = "LaunchFailed";
    /// Registered/Initialized=Unknown: no Node with the provider ID exists yet.
    pub const NODE_NOT_FOUND: &str = "NodeNotFound";
    /// Registered=Unknown: registration hooks have not all passed.
    pub const REGISTRATION_HOOK_PENDING: &str = "RegistrationHookPending";
    /// Registered=False: several Nodes share the provider ID.
    pub const MULTIPLE_NODES_FOUND: &str = "MultipleNodesFound";
    /// Initialized=Unknown: the Node is not Ready.
    pub const NODE_NOT_READY: &str = "NodeNotReady";
    /// Initialized=Unknown: startup taints are still on the Node.
    pub const STARTUP_TAINTS_EXIST: &str = "StartupTaintsExist";
    /// Initialized=Unknown: known ephemeral taints are still on the Node.
    pub const KNOWN_EPHEMERAL_TAINTS_EXIST: &str = "KnownEphemeralTaintsExist";
    /// Initialized=Unknown: a requested extended resource is not registered yet.
    pub const RESOURCE_NOT_REGISTERED: &str = "ResourceNotRegistered";
    /// Initialized=Unknown: expected DRA drivers have not published resource pools.
    pub const DRA_DRIVER_POOLS_NOT_PUBLISHED: &str = "DRADriverPoolsNotPublished";
    /// Drifted=True: the NodePool's template hash changed.
    pub const NODE_POOL_DRIFTED: &str = "NodePoolDrifted";
    /// Drifted=True: the NodeClaim no longer satisfies the NodePool's requirements.
    pub const REQUIREMENTS_DRIFTED: &str = "RequirementsDrifted";
    /// Drifted=True: the NodeClaim's instance type is no longer offered.
    pub const INSTANCE_TYPE_NOT_FOUND: &str = "InstanceTypeNotFound";
    /// Drained=Unknown: draining is in progress.
    pub const DRAINING: &str = "Draining";
    /// VolumesDetached=Unknown: waiting for volume attachments to go away.
    pub const AWAITING_VOLUME_DETACHMENT: &str = "AwaitingVolumeDetachment";
    /// VolumesDetached=False: the termination grace period ran out first.
    pub const TERMINATION_GRACE_PERIOD_ELAPSED: &str = "TerminationGracePeriodElapsed";
    /// ConsistentStateFound=False: the Node's capacity is inconsistent with its instance type.
    pub const CONSISTENCY_CHECK_FAILED: &str = "ConsistencyCheckFailed";
    /// ValidationSucceeded=False on a NodePool.
    pub const NODE_POOL_VALIDATION_FAILED: &str = "NodePoolValidationFailed";
    /// NodeClassReady=False: the referenced NodeClass does not exist.
    pub const NODE_CLASS_NOT_FOUND: &str = "NodeClassNotFound";
    /// NodeClassReady=False: the referenced NodeClass is being deleted.
    pub const NODE_CLASS_TERMINATING: &str = "NodeClassTerminating";
    /// NodeClassReady=Unknown: the NodeClass has no Ready condition yet.
    pub const NODE_CLASS_READINESS_UNKNOWN: &str = "NodeClassReadinessUnknown";
    /// NodeRegistrationHealthy=False without a launch failure to copy.
    pub const REGISTRATION_FAILED: &str = "RegistrationFailed";
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64) -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(secs).expect("valid timestamp"))
    }

    #[test]
    fn set_condition_keeps_transition_time_unless_status_changes() {
        let mut conds = Vec::new();
        assert!(set_condition(
            &mut conds,
            Condition::new(types::READY, ConditionStatus::False, "NotReady", "", at(10))
        ));
        // Same status, new reason: updated, transition time kept.
        assert!(set_condition(
            &mut conds,
            Condition::new(
                types::READY,
                ConditionStatus::False,
                "StillNotReady",
                "x",
                at(20)
            )
        ));
        assert_eq!(conds[0].last_transition_time, at(10));
        assert_eq!(conds[0].reason, "StillNotReady");
        // Identical: no change.
        assert!(!set_condition(
            &mut conds,
            Condition::new(
                types::READY,
                ConditionStatus::False,
                "StillNotReady",
                "x",
                at(30)
            )
        ));
        // Status flips: transition time moves.
        assert!(set_condition(
            &mut conds,
            Condition::new(types::READY, ConditionStatus::True, "Ready", "", at(40))
        ));
        assert_eq!(conds[0].last_transition_time, at(40));
        assert!(find_condition(&conds, types::READY).is_some_and(Condition::is_true));
        assert!(remove_condition(&mut conds, types::READY));
        assert!(!remove_condition(&mut conds, types::READY));
    }

    #[test]
    fn condition_wire_format() {
        let c: Condition = serde_json::from_value(serde_json::json!({
            "type": "Drifted",
            "status": "Unknown",
            "lastTransitionTime": "2025-01-01T00:00:00Z",
        }))
        .expect("reason and message may be absent");
        assert_eq!(c.reason, "");
        let back = serde_json::to_value(&c).expect("serializes");
        assert_eq!(back["reason"], "");
        assert_eq!(back["message"], "");
        assert!(back.get("observedGeneration").is_none());
        assert_eq!(back["lastTransitionTime"], "2025-01-01T00:00:00Z");
    }
}
