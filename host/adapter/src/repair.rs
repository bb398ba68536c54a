//! Node repair's inputs from cluster objects: a NodePool's repair annotations (checked, each
//! bad value named), and Nodes with their NodeClaims as the core's [`RepairNode`]s. The
//! decision is [`joinery_core::repair::decide`]; the controller and `joinery explain node`
//! both build its input here.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use joinery_api::duration::parse_go_duration;
use joinery_api::{NodeClaim, NodePool};
use joinery_core::contract::RepairPolicy;
use joinery_core::labels;
use joinery_core::repair::{NodeCondition, PoolRepair, RepairClaim, RepairNode};
use joinery_core::time::parse_rfc3339;

use crate::convert::system_time;
use crate::lean::LeanNode;

/// A repair annotation whose value Joinery refuses; the default applies instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotationProblem {
    /// The object's kind (`NodePool` or `Node`).
    pub kind: &'static str,
    /// The object's name.
    pub object: String,
    /// The annotation.
    pub annotation: &'static str,
    /// Its value.
    pub value: String,
    /// What a valid value looks like.
    pub expected: String,
}

impl fmt::Display for AnnotationProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: annotation {}: {:?} is not {}; the default applies until it is fixed",
            self.kind, self.object, self.annotation, self.value, self.expected
        )
    }
}

/// Reads a `"true"`/`"false"` annotation.
fn flag(
    kind: &'static str,
    object: &str,
    annotations: &BTreeMap<String, String>,
    annotation: &'static str,
    problems: &mut Vec<AnnotationProblem>,
) -> bool {
    match annotations.get(annotation).map(String::as_str) {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            problems.push(AnnotationProblem {
                kind,
                object: object.to_string(),
                annotation,
                value: other.to_string(),
                expected: "\"true\" or \"false\"".into(),
            });
            false
        }
    }
}

/// A percentage from 0 % to 100 %, written `"20%"`.
fn percent(text: &str) -> Option<u32> {
    let number = text.trim().strip_suffix('%')?.trim();
    let value: u32 = number.parse().ok()?;
    (value <= 100).then_some(value)
}

/// `"3m"` (every policy) or `"Ready=3m,MemoryPressure=1m"` (per condition type).
fn tolerations(text: &str) -> Result<(Option<Duration>, BTreeMap<String, Duration>), String> {
    let text = text.trim();
    if !text.contains('=') {
        return parse_go_duration(text)
            .map(|d| (Some(d), BTreeMap::new()))
            .map_err(|e| e.to_string());
    }
    let mut per_type = BTreeMap::new();
    for part in text.split(',') {
        let (type_, duration) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?} is not TYPE=DURATION"))?;
        let type_ = type_.trim();
        if type_.is_empty() {
            return Err(format!("{part:?} names no condition type"));
        }
        let duration = parse_go_duration(duration.trim()).map_err(|e| e.to_string())?;
        per_type.insert(type_.to_string(), duration);
    }
    Ok((None, per_type))
}

/// A NodePool's repair settings from its annotations, and every value refused (each then
/// takes its default: upstream's behaviour).
pub fn pool_settings(pool: &NodePool) -> (PoolRepair, Vec<AnnotationProblem>) {
    let name = pool.metadata.name.clone().unwrap_or_default();
    let empty = BTreeMap::new();
    let annotations = pool.metadata.annotations.as_ref().unwrap_or(&empty);
    let mut problems = Vec::new();
    let mut settings = PoolRepair {
        reboot_first: flag(
            "NodePool",
            &name,
            annotations,
            labels::REPAIR_REBOOT_FIRST_ANNOTATION,
            &mut problems,
        ),
        do_not_repair: flag(
            "NodePool",
            &name,
            annotations,
            labels::DO_NOT_REPAIR_ANNOTATION,
            &mut problems,
        ),
        ..PoolRepair::default()
    };
    if let Some(text) = annotations.get(labels::REPAIR_MAX_UNHEALTHY_ANNOTATION) {
        match percent(text) {
            Some(p) => settings.max_unhealthy_percent = Some(p),
            None => problems.push(AnnotationProblem {
                kind: "NodePool",
                object: name.clone(),
                annotation: labels::REPAIR_MAX_UNHEALTHY_ANNOTATION,
                value: text.clone(),
                expected: "a percentage from 0% to 100% such as \"20%\"".into(),
            }),
        }
    }
    if let Some(text) = annotations.get(labels::REPAIR_TOLERATION_ANNOTATION) {
        match tolerations(text) {
            Ok((all, per_type)) => {
                settings.toleration = all;
                settings.tolerations = per_type;
            }
            Err(why) => problems.push(AnnotationProblem {
                kind: "NodePool",
                object: name.clone(),
                annotation: labels::REPAIR_TOLERATION_ANNOTATION,
                value: text.clone(),
                expected: format!(
                    "a duration such as \"5m\" or per condition type such as \"Ready=5m,MemoryPressure=2m\" ({why})"
                ),
            }),
        }
    }
    (settings, problems)
}

/// Every NodePool's repair settings by name, and every refused annotation.
pub fn pools_settings<'a>(
    pools: impl IntoIterator<Item = &'a NodePool>,
) -> (BTreeMap<String, PoolRepair>, Vec<AnnotationProblem>) {
    let mut settings = BTreeMap::new();
    let mut problems = Vec::new();
    for pool in pools {
        let (s, p) = pool_settings(pool);
        settings.insert(pool.metadata.name.clone().unwrap_or_default(), s);
        problems.extend(p);
    }
    (settings, problems)
}

/// Whether a Node carries `joinery.dev/do-not-repair: "true"` (any other value than
/// `"true"`/`"false"` is refused and reported).
pub fn node_vetoed(node: &LeanNode) -> (bool, Option<AnnotationProblem>) {
    let value = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(labels::DO_NOT_REPAIR_ANNOTATION));
    match value {
        None | Some("false") => (false, None),
        Some("true") => (true, None),
        Some(other) => (
            false,
            Some(AnnotationProblem {
                kind: "Node",
                object: node.name().to_string(),
                annotation: labels::DO_NOT_REPAIR_ANNOTATION,
                value: other.to_string(),
                expected: "\"true\" or \"false\"".into(),
            }),
        ),
    }
}

/// A NodeClaim as repair reads it. `can_reboot`: its cloud plugin has not answered
/// `unsupported` to a reboot.
pub fn repair_claim(claim: &NodeClaim, can_reboot: bool) -> RepairClaim {
    let annotation = |key: &str| {
        claim
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(key))
            .and_then(|v| parse_rfc3339(v))
    };
    RepairClaim {
        name: claim.metadata.name.clone().unwrap_or_default(),
        pool: crate::convert::label(&claim.metadata, labels::NODEPOOL_LABEL).map(str::to_owned),
        deleting: claim.metadata.deletion_timestamp.is_some(),
        termination_timestamp: annotation(labels::NODECLAIM_TERMINATION_TIMESTAMP_ANNOTATION),
        rebooted_at: annotation(labels::REPAIR_REBOOTED_AT_ANNOTATION),
        can_reboot,
    }
}

/// A Node as repair reads it, with the NodeClaim owning it (`None`: unmanaged) and the
/// policies of its cloud.
pub fn repair_node(
    node: &LeanNode,
    claim: Option<RepairClaim>,
    policies: Arc<[RepairPolicy]>,
) -> RepairNode {
    let conditions = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .map(|cs| {
            cs.iter()
                .map(|c| NodeCondition {
                    type_: c.type_.to_string(),
                    status: c.status.to_string(),
                    since: c.last_transition_time.as_ref().map(system_time),
                })
                .collect()
        })
        .unwrap_or_default();
    RepairNode {
        name: node.name().to_string(),
        pool_label: node.label(labels::NODEPOOL_LABEL).map(str::to_string),
        conditions,
        policies,
        claim,
        do_not_repair: node_vetoed(node).0,
    }
}

/// The NodeClaims by provider ID, for finding a Node's claim as upstream does; a provider ID
/// two claims share is left out (upstream ignores such a node).
pub fn claims_by_provider_id<'a>(
    claims: impl IntoIterator<Item = &'a NodeClaim>,
) -> HashMap<String, &'a NodeClaim> {
    let mut found: HashMap<String, Option<&NodeClaim>> = HashMap::new();
    for claim in claims {
        let Some(pid) = claim.status.as_ref().and_then(|s| s.provider_id.clone()) else {
            continue;
        };
        found
            .entry(pid)
            .and_modify(|c| *c = None)
            .or_insert(Some(claim));
    }
    found
        .into_iter()
        .filter_map(|(pid, c)| c.map(|c| (pid, c)))
        .collect()
}

#[cfg(test)]
mod tests;
