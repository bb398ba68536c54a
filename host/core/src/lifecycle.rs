//! The NodeClaim lifecycle as a state machine: from a view of a claim, the Nodes that carry
//! its provider ID and the clock, the one next action — add the finalizer, launch, register,
//! initialize, time out, expire, or a step of finalization.
//!
//! The lifecycle controller gathers a [`ClaimView`] and [`NodeView`]s from the cluster, asks
//! [`next_action`] (or [`next_finalization_step`] for a claim being deleted), and carries the
//! answer out; every rule (upstream's order of checks, the launch and registration timeouts,
//! `expireAfter`, the initialization blockers with upstream's reasons, cloud-call backoff) is
//! here and tested with plain values.

use std::time::{Duration, SystemTime};

use crate::labels;
use crate::taints::{Taint, TaintEffect};

/// What the state machine needs to know about a NodeClaim.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClaimView {
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// It carries `karpenter.sh/termination`.
    pub has_finalizer: bool,
    /// `metadata.creationTimestamp` (`None`: treat as just created).
    pub created: Option<SystemTime>,
    /// Its `expireAfter` (`None`: `Never`).
    pub expire_after: Option<Duration>,
    /// `Launched` is `True`.
    pub launched: bool,
    /// When `Launched` last changed (the registration timeout runs from there).
    pub launched_at: Option<SystemTime>,
    /// `Registered` is `True`.
    pub registered: bool,
    /// `Initialized` is `True`.
    pub initialized: bool,
    /// `status.providerID`.
    pub provider_id: Option<String>,
    /// Its NodeClass exists.
    pub node_class_found: bool,
    /// How long cloud-call backoff still holds the claim's `create`, if it does.
    pub create_backoff: Option<Duration>,
    /// Its startup taints.
    pub startup_taints: Vec<Taint>,
    /// Resources its pods requested with a non-zero quantity.
    pub requested_resources: Vec<String>,
}

/// What the state machine needs to know about a Node carrying the claim's provider ID.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeView {
    /// Node name.
    pub name: String,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// Its `Ready` condition is `True`.
    pub ready: bool,
    /// Its taints.
    pub taints: Vec<Taint>,
    /// Resources it reports a non-zero allocatable quantity of.
    pub allocatable_resources: Vec<String>,
}

/// Upstream's liveness timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// A claim not launched this long after creation is deleted.
    pub launch: Duration,
    /// A launched claim without a Node this long after launch is deleted.
    pub registration: Duration,
}

/// Why registration or initialization is not done yet: the condition's reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// Condition reason (upstream's spelling).
    pub reason: &'static str,
    /// Condition message.
    pub message: String,
}

impl Waiting {
    fn new(reason: &'static str, message: impl Into<String>) -> Waiting {
        Waiting {
            reason,
            message: message.into(),
        }
    }
}

/// The next thing to do for a NodeClaim that is not being deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Add the `karpenter.sh/termination` finalizer.
    AddFinalizer,
    /// It outlived its `expireAfter`: delete it (forceful disruption, reason `expired`).
    Expire,
    /// Not launched within the launch timeout: delete it (`LaunchTimeout`).
    LaunchTimedOut,
    /// Its NodeClass does not exist: `Launched` stays `Unknown` (`NodeClassNotFound`).
    NodeClassMissing,
    /// A failed `create` is backing off for this long.
    LaunchBackingOff(Duration),
    /// Launch it (adopting an instance an earlier create left, else `create`).
    Launch,
    /// No Node registered within the registration timeout: delete it (`RegistrationTimeout`).
    RegistrationTimedOut,
    /// `Registered` stays as it is, for this reason (`NodeNotFound`, `MultipleNodesFound`).
    AwaitRegistration {
        /// The condition status to write: `Unknown` while waiting, `False` for a conflict.
        conflict: bool,
        /// Reason and message.
        waiting: Waiting,
    },
    /// Nothing to do now: its Node is being deleted before registration finished, or its
    /// status lacks a provider ID.
    Idle,
    /// Sync the claim onto this Node (labels, taints, finalizer, owner) and mark `Registered`.
    Register {
        /// The Node.
        node: String,
    },
    /// `Initialized` stays `Unknown` for this reason.
    AwaitInitialization(Waiting),
    /// Label the Node initialized and mark `Initialized`.
    Initialize {
        /// The Node.
        node: String,
    },
    /// Fully up: keep the instance reconciled with its NodeClass.
    ReconcileInstance,
}

/// When a claim expires: creation plus `expireAfter`.
pub fn expires_at(claim: &ClaimView) -> Option<SystemTime> {
    Some(claim.created? + claim.expire_after?)
}

/// The next action for a claim that is not being deleted, in upstream's order: finalizer,
/// expiration, launch (with its timeout), registration (with its timeout), initialization,
/// then instance reconciliation. `nodes` are the Nodes carrying the claim's provider ID.
pub fn next_action(
    claim: &ClaimView,
    nodes: &[NodeView],
    now: SystemTime,
    timeouts: Timeouts,
) -> Action {
    if !claim.has_finalizer {
        return Action::AddFinalizer;
    }
    if expires_at(claim).is_some_and(|at| now >= at) {
        return Action::Expire;
    }
    let since = |at: Option<SystemTime>| {
        at.and_then(|at| now.duration_since(at).ok())
            .unwrap_or_default()
    };
    if !claim.launched {
        if since(claim.created) > timeouts.launch {
            return Action::LaunchTimedOut;
        }
        if !claim.node_class_found {
            return Action::NodeClassMissing;
        }
        return match claim.create_backoff {
            Some(wait) => Action::LaunchBackingOff(wait),
            None => Action::Launch,
        };
    }
    if !claim.registered {
        let Some(provider_id) = &claim.provider_id else {
            return Action::Idle;
        };
        return match nodes {
            [] if since(claim.launched_at) > timeouts.registration => Action::RegistrationTimedOut,
            [] => Action::AwaitRegistration {
                conflict: false,
                waiting: Waiting::new(
                    "NodeNotFound",
                    format!("Node not registered with provider ID {provider_id}"),
                ),
            },
            [node] if node.deleting => Action::Idle,
            [node] => Action::Register {
                node: node.name.clone(),
            },
            many => Action::AwaitRegistration {
                conflict: true,
                waiting: Waiting::new(
                    "MultipleNodesFound",
                    format!("{} nodes have provider ID {provider_id}", many.len()),
                ),
            },
        };
    }
    if !claim.initialized {
        return match initialization_blocker(claim, nodes.first()) {
            Some(waiting) => Action::AwaitInitialization(waiting),
            None => Action::Initialize {
                node: nodes[0].name.clone(),
            },
        };
    }
    Action::ReconcileInstance
}

/// Whether a taint only exists while a node starts (upstream's known ephemeral taints:
/// not-ready, unreachable `NoSchedule`, the cloud provider's uninitialized taint, Karpenter's
/// unregistered taint and the `readiness.k8s.io/` family).
pub fn is_ephemeral_taint(taint: &Taint) -> bool {
    taint.key == labels::NOT_READY_TAINT_KEY
        || (taint.key == labels::UNREACHABLE_TAINT_KEY && taint.effect == TaintEffect::NoSchedule)
        || taint.key == labels::CLOUD_UNINITIALIZED_TAINT_KEY
        || taint.key == labels::UNREGISTERED_TAINT_KEY
        || taint.key.starts_with(labels::READINESS_TAINT_PREFIX)
}

/// What still keeps a registered claim from being initialized, in upstream's order: no
/// Node, Node not Ready, a startup taint, a known ephemeral taint, a requested resource the
/// Node does not advertise. `None`: initialize it.
pub fn initialization_blocker(claim: &ClaimView, node: Option<&NodeView>) -> Option<Waiting> {
    let Some(node) = node else {
        return Some(Waiting::new("NodeNotFound", ""));
    };
    if !node.ready {
        return Some(Waiting::new("NodeNotReady", "Node is not Ready"));
    }
    let on_node = |t: &Taint| {
        node.taints
            .iter()
            .any(|n| n.key == t.key && n.effect == t.effect)
    };
    if let Some(t) = claim.startup_taints.iter().find(|t| on_node(t)) {
        return Some(Waiting::new(
            "StartupTaintsExist",
            format!(
                "StartupTaint \"{}:{}\" still exists",
                t.key,
                t.effect.as_str()
            ),
        ));
    }
    if let Some(t) = node.taints.iter().find(|t| is_ephemeral_taint(t)) {
        return Some(Waiting::new(
            "KnownEphemeralTaintsExist",
            format!(
                "KnownEphemeralTaint \"{}:{}\" still exists",
                t.key,
                t.effect.as_str()
            ),
        ));
    }
    if let Some(resource) = claim
        .requested_resources
        .iter()
        .find(|r| !node.allocatable_resources.contains(r))
    {
        return Some(Waiting::new(
            "ResourceNotRegistered",
            format!("Resource \"{resource}\" was requested but not registered"),
        ));
    }
    None
}

/// What finalization knows about a deleted claim.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Finalization {
    /// It still carries `karpenter.sh/termination`.
    pub has_finalizer: bool,
    /// `karpenter.sh/nodeclaim-termination-timestamp` is set, or no deadline applies.
    pub deadline_stamped: bool,
    /// The instance's provider ID, from status or from this process's launch record.
    pub provider_id: Option<String>,
    /// No provider ID is known but a create may have run (an earlier life of the host, or a
    /// create whose answer was lost): the instance must be looked up by its tags first.
    pub may_have_launched: bool,
    /// Whether the instance was looked up by tag already (so `provider_id: None` is final).
    pub looked_up: bool,
    /// The Nodes carrying the provider ID.
    pub nodes: Vec<NodeView>,
}

/// The next step of finalizing a deleted claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinalizationStep {
    /// Someone else's finalizer holds it; nothing for us to do.
    Done,
    /// Write the termination deadline annotation first.
    StampDeadline,
    /// Find the instance a create may have launched (list the cloud's instances by tag).
    LookUpInstance,
    /// Delete these Nodes (those not already being deleted) and wait for them to go: the
    /// termination controller drains them.
    DeleteNodes(Vec<String>),
    /// Wait for Nodes already being deleted.
    AwaitNodes,
    /// Delete the instance; finalization waits until the cloud answers not-found.
    DeleteInstance(String),
    /// Remove the finalizer: nothing is left in the cloud.
    RemoveFinalizer,
}

/// The next finalization step: deadline annotation, instance lookup when a create may have
/// run unseen, Nodes first, then the instance until the cloud says it is gone, then the
/// finalizer.
pub fn next_finalization_step(f: &Finalization) -> FinalizationStep {
    if !f.has_finalizer {
        return FinalizationStep::Done;
    }
    if !f.deadline_stamped {
        return FinalizationStep::StampDeadline;
    }
    let Some(provider_id) = &f.provider_id else {
        if f.may_have_launched && !f.looked_up {
            return FinalizationStep::LookUpInstance;
        }
        return FinalizationStep::RemoveFinalizer;
    };
    if !f.nodes.is_empty() {
        let live: Vec<String> = f
            .nodes
            .iter()
            .filter(|n| !n.deleting)
            .map(|n| n.name.clone())
            .collect();
        return if live.is_empty() {
            FinalizationStep::AwaitNodes
        } else {
            FinalizationStep::DeleteNodes(live)
        };
    }
    FinalizationStep::DeleteInstance(provider_id.clone())
}

/// A Node as seen when looking for the one a platform registered without a provider ID.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UnidentifiedNode<'a> {
    /// Node name.
    pub name: &'a str,
    /// The value of the plugin's identifying label (`providerIDFromNodeLabel`), if set.
    pub label_value: Option<&'a str>,
    /// `spec.providerID` is set (such a Node is never touched).
    pub has_provider_id: bool,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
}

/// For clouds that register Nodes without a provider ID but label them with the instance's
/// name: the Node that must receive `provider_id` — the only live Node without a provider ID
/// whose label value is `provider_id` with `prefix` removed. `None` when the provider ID does
/// not start with `prefix`, or when no Node, or more than one, matches (never a guess).
pub fn node_to_identify<'a>(
    provider_id: &str,
    prefix: &str,
    nodes: impl IntoIterator<Item = UnidentifiedNode<'a>>,
) -> Option<&'a str> {
    let wanted = provider_id
        .strip_prefix(prefix)
        .filter(|rest| !rest.is_empty() && !prefix.is_empty())?;
    let mut matching = nodes
        .into_iter()
        .filter(|n| !n.has_provider_id && !n.deleting && n.label_value == Some(wanted));
    let first = matching.next()?;
    matching.next().is_none().then_some(first.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUTS: Timeouts = Timeouts {
        launch: Duration::from_secs(300),
        registration: Duration::from_secs(900),
    };

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + seconds)
    }

    fn fresh() -> ClaimView {
        ClaimView {
            has_finalizer: true,
            created: Some(at(0)),
            expire_after: Some(Duration::from_secs(720 * 3600)),
            node_class_found: true,
            ..ClaimView::default()
        }
    }

    fn launched() -> ClaimView {
        ClaimView {
            launched: true,
            launched_at: Some(at(10)),
            provider_id: Some("sim://i-1".into()),
            ..fresh()
        }
    }

    fn registered() -> ClaimView {
        ClaimView {
            registered: true,
            ..launched()
        }
    }

    fn node(name: &str) -> NodeView {
        NodeView {
            name: name.into(),
            ready: true,
            ..NodeView::default()
        }
    }

    fn taint(key: &str, effect: TaintEffect) -> Taint {
        Taint::new(key, "", effect)
    }

    #[test]
    fn a_new_claim_gets_its_finalizer_then_launches() {
        let claim = ClaimView {
            has_finalizer: false,
            ..fresh()
        };
        assert_eq!(
            next_action(&claim, &[], at(1), TIMEOUTS),
            Action::AddFinalizer
        );
        assert_eq!(next_action(&fresh(), &[], at(1), TIMEOUTS), Action::Launch);
    }

    #[test]
    fn launch_waits_for_backoff_and_the_node_class_and_times_out() {
        let backing_off = ClaimView {
            create_backoff: Some(Duration::from_secs(4)),
            ..fresh()
        };
        assert_eq!(
            next_action(&backing_off, &[], at(1), TIMEOUTS),
            Action::LaunchBackingOff(Duration::from_secs(4))
        );
        let no_class = ClaimView {
            node_class_found: false,
            ..fresh()
        };
        assert_eq!(
            next_action(&no_class, &[], at(1), TIMEOUTS),
            Action::NodeClassMissing
        );
        assert_eq!(
            next_action(&fresh(), &[], at(300), TIMEOUTS),
            Action::Launch,
            "exactly the timeout is not past it"
        );
        assert_eq!(
            next_action(&fresh(), &[], at(301), TIMEOUTS),
            Action::LaunchTimedOut
        );
        assert_eq!(
            next_action(&no_class, &[], at(301), TIMEOUTS),
            Action::LaunchTimedOut,
            "the timeout wins over a missing class"
        );
    }

    #[test]
    fn expiration_comes_before_everything_but_the_finalizer() {
        let short = ClaimView {
            expire_after: Some(Duration::from_secs(60)),
            ..registered()
        };
        assert_eq!(
            next_action(&short, &[node("n")], at(59), TIMEOUTS),
            Action::Initialize { node: "n".into() }
        );
        assert_eq!(
            next_action(&short, &[node("n")], at(60), TIMEOUTS),
            Action::Expire
        );
        let never = ClaimView {
            expire_after: None,
            ..registered()
        };
        assert_eq!(expires_at(&never), None);
        assert_eq!(
            next_action(&never, &[node("n")], at(10_000_000), TIMEOUTS),
            Action::Initialize { node: "n".into() }
        );
        assert_eq!(expires_at(&short), Some(at(60)));
    }

    #[test]
    fn registration_waits_for_one_node_and_times_out_from_launch() {
        let claim = launched();
        match next_action(&claim, &[], at(100), TIMEOUTS) {
            Action::AwaitRegistration {
                conflict: false,
                waiting,
            } => {
                assert_eq!(waiting.reason, "NodeNotFound");
                assert!(waiting.message.contains("sim://i-1"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            next_action(&claim, &[], at(910), TIMEOUTS),
            next_action(&claim, &[], at(100), TIMEOUTS),
            "900 s after launch"
        );
        assert_eq!(
            next_action(&claim, &[], at(911), TIMEOUTS),
            Action::RegistrationTimedOut
        );
        assert_eq!(
            next_action(&claim, &[node("a")], at(911), TIMEOUTS),
            Action::Register { node: "a".into() }
        );
        match next_action(&claim, &[node("a"), node("b")], at(20), TIMEOUTS) {
            Action::AwaitRegistration {
                conflict: true,
                waiting,
            } => assert_eq!(waiting.reason, "MultipleNodesFound"),
            other => panic!("{other:?}"),
        }
        let deleting = NodeView {
            deleting: true,
            ..node("a")
        };
        assert_eq!(
            next_action(&claim, &[deleting], at(20), TIMEOUTS),
            Action::Idle
        );
        let no_provider_id = ClaimView {
            provider_id: None,
            ..launched()
        };
        assert_eq!(
            next_action(&no_provider_id, &[], at(2_000), TIMEOUTS),
            Action::Idle
        );
    }

    #[test]
    fn initialization_blockers_in_upstream_order() {
        let mut claim = registered();
        claim.startup_taints = vec![taint("example.com/startup", TaintEffect::NoSchedule)];
        claim.requested_resources = vec!["nvidia.com/gpu".into()];
        let reason = |n: Option<&NodeView>| initialization_blocker(&claim, n).map(|w| w.reason);
        assert_eq!(reason(None), Some("NodeNotFound"));
        let mut n = NodeView {
            ready: false,
            taints: vec![
                taint("example.com/startup", TaintEffect::NoSchedule),
                taint(labels::NOT_READY_TAINT_KEY, TaintEffect::NoExecute),
            ],
            ..node("n")
        };
        assert_eq!(reason(Some(&n)), Some("NodeNotReady"));
        n.ready = true;
        assert_eq!(reason(Some(&n)), Some("StartupTaintsExist"));
        assert_eq!(
            initialization_blocker(&claim, Some(&n)).unwrap().message,
            "StartupTaint \"example.com/startup:NoSchedule\" still exists"
        );
        n.taints.remove(0);
        assert_eq!(reason(Some(&n)), Some("KnownEphemeralTaintsExist"));
        n.taints.clear();
        assert_eq!(reason(Some(&n)), Some("ResourceNotRegistered"));
        n.allocatable_resources = vec!["nvidia.com/gpu".into()];
        assert_eq!(reason(Some(&n)), None);
        assert_eq!(
            next_action(&claim, &[n], at(20), TIMEOUTS),
            Action::Initialize { node: "n".into() }
        );
    }

    #[test]
    fn a_startup_taint_with_another_effect_does_not_block() {
        let mut claim = registered();
        claim.startup_taints = vec![taint("example.com/startup", TaintEffect::NoSchedule)];
        let n = NodeView {
            taints: vec![taint("example.com/startup", TaintEffect::NoExecute)],
            ..node("n")
        };
        assert_eq!(initialization_blocker(&claim, Some(&n)), None);
    }

    #[test]
    fn ephemeral_taints_are_upstreams() {
        assert!(is_ephemeral_taint(&taint(
            labels::NOT_READY_TAINT_KEY,
            TaintEffect::NoExecute
        )));
        assert!(is_ephemeral_taint(&taint(
            labels::UNREACHABLE_TAINT_KEY,
            TaintEffect::NoSchedule
        )));
        assert!(!is_ephemeral_taint(&taint(
            labels::UNREACHABLE_TAINT_KEY,
            TaintEffect::NoExecute
        )));
        assert!(is_ephemeral_taint(&taint(
            labels::CLOUD_UNINITIALIZED_TAINT_KEY,
            TaintEffect::NoSchedule
        )));
        assert!(is_ephemeral_taint(&taint(
            labels::UNREGISTERED_TAINT_KEY,
            TaintEffect::NoExecute
        )));
        assert!(is_ephemeral_taint(&taint(
            "readiness.k8s.io/network",
            TaintEffect::NoSchedule
        )));
        assert!(!is_ephemeral_taint(&taint(
            "example.com/dedicated",
            TaintEffect::NoSchedule
        )));
    }

    #[test]
    fn a_ready_claim_reconciles_its_instance() {
        let claim = ClaimView {
            initialized: true,
            ..registered()
        };
        assert_eq!(
            next_action(&claim, &[node("n")], at(20), TIMEOUTS),
            Action::ReconcileInstance
        );
    }

    #[test]
    fn finalization_goes_deadline_nodes_instance_finalizer() {
        let mut f = Finalization {
            has_finalizer: true,
            provider_id: Some("sim://i-1".into()),
            nodes: vec![node("n")],
            ..Finalization::default()
        };
        assert_eq!(next_finalization_step(&f), FinalizationStep::StampDeadline);
        f.deadline_stamped = true;
        assert_eq!(
            next_finalization_step(&f),
            FinalizationStep::DeleteNodes(vec!["n".into()])
        );
        f.nodes[0].deleting = true;
        assert_eq!(next_finalization_step(&f), FinalizationStep::AwaitNodes);
        f.nodes.clear();
        assert_eq!(
            next_finalization_step(&f),
            FinalizationStep::DeleteInstance("sim://i-1".into())
        );
        f.has_finalizer = false;
        assert_eq!(next_finalization_step(&f), FinalizationStep::Done);
    }

    #[test]
    fn an_unseen_create_is_looked_up_before_the_finalizer_goes() {
        let mut f = Finalization {
            has_finalizer: true,
            deadline_stamped: true,
            may_have_launched: true,
            ..Finalization::default()
        };
        assert_eq!(next_finalization_step(&f), FinalizationStep::LookUpInstance);
        f.looked_up = true;
        assert_eq!(
            next_finalization_step(&f),
            FinalizationStep::RemoveFinalizer,
            "nothing was found"
        );
        f.may_have_launched = false;
        f.looked_up = false;
        assert_eq!(
            next_finalization_step(&f),
            FinalizationStep::RemoveFinalizer,
            "never launched"
        );
    }

    #[test]
    fn a_node_registered_without_provider_id_is_identified_by_its_label_only_when_unambiguous() {
        let node = |name, value, has_provider_id, deleting| UnidentifiedNode {
            name,
            label_value: value,
            has_provider_id,
            deleting,
        };
        let pid = "clevercloud://ng-a";
        let prefix = "clevercloud://";
        assert_eq!(
            node_to_identify(
                pid,
                prefix,
                [
                    node("ng-b-node0", Some("ng-b"), false, false),
                    node("ng-a-node0", Some("ng-a"), false, false)
                ]
            ),
            Some("ng-a-node0")
        );
        // A Node that already has a provider ID, or is going away, is never rewritten.
        assert_eq!(
            node_to_identify(pid, prefix, [node("ng-a-node0", Some("ng-a"), true, false)]),
            None
        );
        assert_eq!(
            node_to_identify(pid, prefix, [node("ng-a-node0", Some("ng-a"), false, true)]),
            None
        );
        // Two candidates: no guess.
        assert_eq!(
            node_to_identify(
                pid,
                prefix,
                [
                    node("x", Some("ng-a"), false, false),
                    node("y", Some("ng-a"), false, false)
                ]
            ),
            None
        );
        // A provider ID of another scheme, or an empty prefix or name, identifies nothing.
        assert_eq!(
            node_to_identify(
                "sim://ng-a",
                prefix,
                [node("ng-a-node0", Some("ng-a"), false, false)]
            ),
            None
        );
        assert_eq!(
            node_to_identify(pid, "", [node("ng-a-node0", Some(pid), false, false)]),
            None
        );
        assert_eq!(
            node_to_identify(prefix, prefix, [node("n", Some(""), false, false)]),
            None
        );
        assert_eq!(
            node_to_identify(pid, prefix, [node("ng-a-node0", None, false, false)]),
            None
        );
    }
}
