//! DaemonSet overhead: which daemon pods would land on a node, and what they reserve.

use std::collections::BTreeMap;

use crate::instance_type::InstanceType;
use crate::requirements::{KeySet, NO_KEYS, Requirements};
use crate::resources::Resources;
use crate::taints::{Taint, TaintEffect, Toleration};

use super::constraints::HostPort;
use super::types::DaemonPod;

/// The requirement sets a pod may be placed with: the node selector alone, or the node
/// selector intersected with each required node-affinity term, in term order.
pub(crate) fn alternatives(
    node_selector: &BTreeMap<String, String>,
    terms: &[Requirements],
) -> Vec<Requirements> {
    let base =
        Requirements::from_labels(node_selector.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    if terms.is_empty() {
        return vec![base];
    }
    terms.iter().map(|term| base.intersection(term)).collect()
}

/// Whether every taint is tolerated; with `prefer_no_schedule_tolerated`, PreferNoSchedule
/// taints are tolerated regardless (what upstream's added toleration does).
pub(crate) fn tolerates(
    tolerations: &[Toleration],
    taints: &[Taint],
    prefer_no_schedule_tolerated: bool,
) -> bool {
    taints
        .iter()
        .all(|t| tolerated(tolerations, t, prefer_no_schedule_tolerated))
}

/// Whether one taint is tolerated (see [`tolerates`]).
pub(crate) fn tolerated(
    tolerations: &[Toleration],
    taint: &Taint,
    prefer_no_schedule_tolerated: bool,
) -> bool {
    (prefer_no_schedule_tolerated && taint.effect == TaintEffect::PreferNoSchedule)
        || tolerations.iter().any(|t| t.tolerates(taint))
}

/// A daemon pod with its placement alternatives precomputed.
#[derive(Debug, Clone)]
pub(crate) struct Daemon<'a> {
    pod: &'a DaemonPod,
    alternatives: Vec<Requirements>,
}

impl<'a> Daemon<'a> {
    /// Prepares a daemon pod.
    pub(crate) fn new(pod: &'a DaemonPod) -> Self {
        Daemon {
            pod,
            alternatives: alternatives(&pod.node_selector, &pod.required_affinity),
        }
    }

    /// Whether the daemon would run on a node created from a pool with `taints` and
    /// `requirements` (upstream's template check: PreferNoSchedule taints do not repel
    /// daemons; some affinity term must be compatible, undefined well-known keys allowed),
    /// and, when `instance_type` is given, whose labels also intersect that type's.
    pub(crate) fn runs_on_new<K: KeySet + ?Sized>(
        &self,
        taints: &[Taint],
        requirements: &Requirements,
        well_known: &K,
        instance_type: Option<&InstanceType>,
    ) -> bool {
        if !tolerates(&self.pod.tolerations, taints, true) {
            return false;
        }
        self.alternatives.iter().any(|alt| {
            requirements.is_compatible(alt, well_known)
                && instance_type.is_none_or(|t| t.requirements().is_intersecting(alt))
        })
    }

    /// Whether the daemon would run on an existing node with these taints and labels
    /// (upstream: taints tolerated as they are, the first affinity alternative strictly
    /// compatible with the node's labels).
    pub(crate) fn runs_on_existing(&self, taints: &[Taint], requirements: &Requirements) -> bool {
        tolerates(&self.pod.tolerations, taints, false)
            && self
                .alternatives
                .first()
                .is_some_and(|alt| requirements.is_compatible(alt, &NO_KEYS))
    }

    /// The daemon pod's requests.
    pub(crate) fn requests(&self) -> &Resources {
        &self.pod.requests
    }

    /// The host ports the daemon pod binds.
    pub(crate) fn host_ports(&self) -> &[HostPort] {
        &self.pod.host_ports
    }
}
