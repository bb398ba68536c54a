//! Renders scheduling failures the way upstream Karpenter prints them, so that events and
//! logs read the same to users (and to tools that parse them).

use crate::labels::{HOSTNAME_LABEL, INITIALIZED_LABEL, REGISTERED_LABEL};
use crate::requirements::{Incompatibility, IncompatibleRequirements, Requirement, Requirements};
use crate::resources::Resources;
use crate::taints::Taint;

/// Keys that exist only inside the simulation and are never shown or launched.
pub(crate) const SIMULATION_ONLY_KEYS: [&str; 3] =
    [HOSTNAME_LABEL, REGISTERED_LABEL, INITIALIZED_LABEL];

/// A resource list as upstream prints it: a JSON object with names sorted and quantity
/// strings as values, zero amounts omitted (`{"cpu":"1500m","pods":"2"}`, `{}` when empty).
pub(crate) fn resources(r: &Resources) -> String {
    let body: Vec<String> = r
        .to_quantities()
        .into_iter()
        .map(|(k, v)| format!("{k:?}:{v:?}"))
        .collect();
    format!("{{{}}}", body.join(","))
}

/// One requirement: `key Op [v1 v2 …]` with at most five values then `and N others`;
/// `Exists`/`DoesNotExist` without values; integer bounds as exclusive `>n` / `<n`; then
/// `minValues m`.
pub(crate) fn requirement(r: &Requirement) -> String {
    use crate::requirements::Operator;
    let op = r.operator();
    let mut s = match op {
        Operator::Exists | Operator::DoesNotExist => format!("{} {op}", r.key()),
        _ => {
            let mut shown: Vec<String> = r.values().iter().take(5).cloned().collect();
            if r.values().len() > 5 {
                shown.push(format!("and {} others", r.values().len() - 5));
            }
            format!("{} {op} [{}]", r.key(), shown.join(" "))
        }
    };
    if let Some(g) = r.gte() {
        s.push_str(&format!(" >{}", i128::from(g) - 1));
    }
    if let Some(l) = r.lte() {
        s.push_str(&format!(" <{}", i128::from(l) + 1));
    }
    if let Some(m) = r.min_values() {
        s.push_str(&format!(" minValues {m}"));
    }
    s
}

/// A requirement set: each requirement rendered, sorted, joined by `", "`; simulation-only
/// keys (hostname placeholder, registered, initialized) are left out.
pub(crate) fn requirements(reqs: &Requirements) -> String {
    let mut parts: Vec<String> = reqs
        .iter()
        .filter(|r| !SIMULATION_ONLY_KEYS.contains(&r.key()))
        .map(requirement)
        .collect();
    parts.sort();
    parts.join(", ")
}

/// `incompatible requirements, …` for a pod whose requirements `pod` do not fit `node`'s.
pub(crate) fn incompatible(
    node: &Requirements,
    pod: &Requirements,
    err: &IncompatibleRequirements,
) -> String {
    format!(
        "incompatible requirements, {}",
        incompatibility(node, pod, err)
    )
}

/// Why `pod` (any incoming requirements) does not fit `node`: one clause per key, joined by
/// `"; "` (`key k, k In [x] not in k In [y]`, `label "k" does not have known values`).
pub(crate) fn incompatibility(
    node: &Requirements,
    pod: &Requirements,
    err: &IncompatibleRequirements,
) -> String {
    let reasons: Vec<String> = err
        .0
        .iter()
        .map(|reason| match reason {
            Incompatibility::NoOverlap { key, .. } => match (pod.get(key), node.get(key)) {
                (Some(incoming), Some(existing)) => format!(
                    "key {key}, {} not in {}",
                    requirement(incoming),
                    requirement(existing)
                ),
                _ => reason.to_string(),
            },
            Incompatibility::UndefinedKey { .. } => reason.to_string(),
        })
        .collect();
    reasons.join("; ")
}

/// `did not tolerate taint k=v:Effect`, one clause per taint, joined by `"; "`.
pub(crate) fn untolerated(taints: &[&Taint]) -> String {
    taints
        .iter()
        .map(|t| format!("did not tolerate taint {t}"))
        .collect::<Vec<_>>()
        .join("; ")
}
