//! Cluster-wide default topology spread constraints (upstream's `SCHEDULER_CONFIG` /
//! `--scheduler-config`, mirroring kube-scheduler's `podTopologySpread.defaultConstraints`).
//!
//! A pod that declares no `topologySpreadConstraints` gets the default ones, with a selector
//! deduced the way kube-scheduler deduces it: the selectors of the Services selecting the pod
//! and of the ReplicaSet, ReplicationController or StatefulSet controlling it, merged. A pod
//! that nothing selects keeps no default constraint (an empty selector would count every pod).

use std::collections::BTreeMap;

use joinery_core::scheduling::{
    LabelSelector, PendingPod, TopologySpreadConstraint, WhenUnsatisfiable,
};
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{ReplicationController, Service};
use serde::Deserialize;

use crate::convert;
use crate::lean::LeanPod;

/// A scheduler configuration that cannot be used; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("scheduler config: {0}")]
pub struct SchedulerConfigError(pub String);

/// One default constraint: a spread without a selector.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DefaultConstraint {
    /// `maxSkew` (≥ 1).
    pub max_skew: i32,
    /// `topologyKey`.
    pub topology_key: String,
    /// `whenUnsatisfiable`: `DoNotSchedule` or `ScheduleAnyway`.
    pub when_unsatisfiable: String,
    /// Not allowed in defaults (kube-scheduler refuses it too); present only to be refused.
    #[serde(default)]
    pub label_selector: Option<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodTopologySpread {
    #[serde(default)]
    default_constraints: Vec<DefaultConstraint>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SchedulerConfig {
    #[serde(default)]
    pod_topology_spread: PodTopologySpread,
}

/// Parses a scheduler configuration (YAML or JSON): `{podTopologySpread: {defaultConstraints:
/// [{maxSkew, topologyKey, whenUnsatisfiable}]}}`. Errors name the constraint and field.
pub fn parse_scheduler_config(text: &str) -> Result<Vec<DefaultConstraint>, SchedulerConfigError> {
    let config: SchedulerConfig =
        serde_norway::from_str(text).map_err(|e| SchedulerConfigError(e.to_string()))?;
    let constraints = config.pod_topology_spread.default_constraints;
    for (i, c) in constraints.iter().enumerate() {
        let path = format!("podTopologySpread.defaultConstraints[{i}]");
        if c.max_skew < 1 {
            return Err(SchedulerConfigError(format!(
                "{path}.maxSkew: {} must be at least 1",
                c.max_skew
            )));
        }
        if c.topology_key.is_empty() {
            return Err(SchedulerConfigError(format!(
                "{path}.topologyKey: must not be empty"
            )));
        }
        if !matches!(
            c.when_unsatisfiable.as_str(),
            "DoNotSchedule" | "ScheduleAnyway"
        ) {
            return Err(SchedulerConfigError(format!(
                "{path}.whenUnsatisfiable: {:?} is not DoNotSchedule or ScheduleAnyway",
                c.when_unsatisfiable
            )));
        }
        if c.label_selector.is_some() {
            return Err(SchedulerConfigError(format!(
                "{path}.labelSelector: default constraints take no selector (it is deduced per pod)"
            )));
        }
    }
    Ok(constraints)
}

/// The objects a pod's default selector is deduced from.
#[derive(Debug, Clone, Copy, Default)]
pub struct SelectorSources<'a> {
    /// Services (any namespace; only the pod's own count).
    pub services: &'a [&'a Service],
    /// ReplicationControllers.
    pub replication_controllers: &'a [&'a ReplicationController],
    /// ReplicaSets.
    pub replica_sets: &'a [&'a ReplicaSet],
    /// StatefulSets.
    pub stateful_sets: &'a [&'a StatefulSet],
}

fn merge(into: &mut LabelSelector, labels: &BTreeMap<String, String>) {
    for (k, v) in labels {
        into.match_labels.insert(k.clone(), v.clone());
    }
}

/// kube-scheduler's default selector for `pod`: the union of the selectors of the Services in
/// its namespace that select it and of its controlling ReplicationController, ReplicaSet or
/// StatefulSet. `None` when nothing selects it.
pub fn default_selector(pod: &LeanPod, sources: SelectorSources<'_>) -> Option<LabelSelector> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    let mut selector = LabelSelector::default();
    let mut found = false;
    for service in sources.services {
        if service.metadata.namespace.as_deref().unwrap_or_default() != namespace {
            continue;
        }
        let Some(wanted) = service
            .spec
            .as_ref()
            .and_then(|s| s.selector.as_ref())
            .filter(|s| !s.is_empty())
        else {
            continue;
        };
        if wanted.iter().all(|(k, v)| labels.get(k) == Some(v)) {
            merge(&mut selector, wanted);
            found = true;
        }
    }
    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true));
    if let Some(owner) = owner {
        let same = |meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            meta.namespace.as_deref().unwrap_or_default() == namespace
                && meta.name.as_deref() == Some(owner.name.as_str())
        };
        let mut owner_selector =
            |s: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>| {
                if let Some(s) = s.and_then(|s| convert::label_selector(s, "spec.selector").ok()) {
                    merge(&mut selector, &s.match_labels);
                    selector.match_expressions.extend(s.match_expressions);
                    found = true;
                }
            };
        match owner.kind.as_str() {
            "ReplicaSet" => {
                if let Some(rs) = sources.replica_sets.iter().find(|r| same(&r.metadata)) {
                    owner_selector(rs.spec.as_ref().map(|s| &s.selector));
                }
            }
            "StatefulSet" => {
                if let Some(ss) = sources.stateful_sets.iter().find(|s| same(&s.metadata)) {
                    owner_selector(ss.spec.as_ref().map(|s| &s.selector));
                }
            }
            "ReplicationController" => {
                if let Some(rc) = sources
                    .replication_controllers
                    .iter()
                    .find(|r| same(&r.metadata))
                    && let Some(wanted) = rc
                        .spec
                        .as_ref()
                        .and_then(|s| s.selector.as_ref())
                        .filter(|s| !s.is_empty())
                {
                    merge(&mut selector, wanted);
                    found = true;
                }
            }
            _ => {}
        }
    }
    found.then_some(selector)
}

/// Gives `pod` the default constraints with `selector` if it declares no spread of its own.
/// Returns whether it did.
pub fn apply_defaults(
    pod: &mut PendingPod,
    defaults: &[DefaultConstraint],
    selector: Option<LabelSelector>,
) -> bool {
    let Some(selector) = selector else {
        return false;
    };
    if defaults.is_empty() || !pod.topology_spread.is_empty() {
        return false;
    }
    pod.topology_spread = defaults
        .iter()
        .map(|d| {
            let mut c = TopologySpreadConstraint::new(
                d.topology_key.clone(),
                d.max_skew as u32,
                selector.clone(),
            );
            if d.when_unsatisfiable == "ScheduleAnyway" {
                c.when_unsatisfiable = WhenUnsatisfiable::ScheduleAnyway;
            }
            c
        })
        .collect();
    true
}

/// Gives every pod of a batch that declares no spread `defaults`, with the selector deduced
/// from `sources` for its Pod object (`object` finds it by key). Returns how many got them.
pub fn apply_to_batch<'o>(
    pods: &mut [PendingPod],
    defaults: &[DefaultConstraint],
    sources: SelectorSources<'_>,
    object: impl Fn(&PendingPod) -> Option<&'o LeanPod>,
) -> usize {
    let mut applied = 0;
    for pod in pods.iter_mut() {
        if let Some(found) = object(pod)
            && apply_defaults(pod, defaults, default_selector(found, sources))
        {
            applied += 1;
        }
    }
    applied
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        LabelSelector as K8sSelector, ObjectMeta, OwnerReference,
    };

    fn pod(labels: &[(&str, &str)], owner: Option<(&str, &str)>) -> LeanPod {
        LeanPod {
            metadata: crate::lean::PodMeta {
                name: Some("web-1".into()),
                namespace: Some("shop".into()),
                labels: Some(crate::lean::Interned::new(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                )),
                owner_references: owner.map(|(kind, name)| {
                    crate::lean::Interned::new(vec![OwnerReference {
                        kind: kind.into(),
                        name: name.into(),
                        controller: Some(true),
                        ..Default::default()
                    }])
                }),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn service(namespace: &str, selector: &[(&str, &str)]) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("svc".into()),
                namespace: Some(namespace.into()),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::core::v1::ServiceSpec {
                selector: Some(
                    selector
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn replica_set(name: &str, labels: &[(&str, &str)]) -> ReplicaSet {
        ReplicaSet {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("shop".into()),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::apps::v1::ReplicaSetSpec {
                selector: K8sSelector {
                    match_labels: Some(
                        labels
                            .iter()
                            .map(|(k, v)| (k.to_string(), v.to_string()))
                            .collect(),
                    ),
                    ..Default::default()
                },
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn config_parses_and_refuses_selectors_and_bad_values() {
        let ok = "podTopologySpread:\n  defaultConstraints:\n  - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}\n";
        let parsed = parse_scheduler_config(ok).unwrap();
        assert_eq!(parsed.len(), 1);
        assert_eq!(parsed[0].topology_key, "topology.kubernetes.io/zone");
        let with_selector = "podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: k, whenUnsatisfiable: DoNotSchedule, labelSelector: {}}]}";
        assert!(
            parse_scheduler_config(with_selector)
                .unwrap_err()
                .to_string()
                .contains("defaultConstraints[0].labelSelector")
        );
        let skew = "podTopologySpread: {defaultConstraints: [{maxSkew: 0, topologyKey: k, whenUnsatisfiable: DoNotSchedule}]}";
        assert!(
            parse_scheduler_config(skew)
                .unwrap_err()
                .to_string()
                .contains("defaultConstraints[0].maxSkew")
        );
        let when = "podTopologySpread: {defaultConstraints: [{maxSkew: 1, topologyKey: k, whenUnsatisfiable: Sometimes}]}";
        assert!(
            parse_scheduler_config(when)
                .unwrap_err()
                .to_string()
                .contains("whenUnsatisfiable")
        );
        assert!(parse_scheduler_config("{}").unwrap().is_empty());
    }

    #[test]
    fn selector_merges_services_and_the_controlling_replica_set() {
        let p = pod(
            &[
                ("app", "web"),
                ("tier", "front"),
                ("pod-template-hash", "abc"),
            ],
            Some(("ReplicaSet", "web-abc")),
        );
        let svc = service("shop", &[("app", "web")]);
        let elsewhere = service("other", &[("tier", "front")]);
        let unrelated = service("shop", &[("app", "db")]);
        let rs = replica_set("web-abc", &[("app", "web"), ("pod-template-hash", "abc")]);
        let sources = SelectorSources {
            services: &[&svc, &elsewhere, &unrelated],
            replica_sets: &[&rs],
            ..Default::default()
        };
        let s = default_selector(&p, sources).unwrap();
        assert_eq!(
            s.match_labels,
            BTreeMap::from([
                ("app".to_owned(), "web".to_owned()),
                ("pod-template-hash".to_owned(), "abc".to_owned())
            ])
        );
        assert!(
            default_selector(&pod(&[("app", "lonely")], None), sources).is_none(),
            "nothing selects it"
        );
    }

    #[test]
    fn defaults_apply_only_to_pods_without_their_own_spread() {
        let defaults = parse_scheduler_config(
            "podTopologySpread: {defaultConstraints: [{maxSkew: 2, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway}]}",
        )
        .unwrap();
        let selector = LabelSelector::from_labels([("app", "web")]);
        let mut bare = PendingPod::default();
        assert!(apply_defaults(&mut bare, &defaults, Some(selector.clone())));
        assert_eq!(bare.topology_spread.len(), 1);
        assert_eq!(bare.topology_spread[0].max_skew, 2);
        assert_eq!(
            bare.topology_spread[0].when_unsatisfiable,
            WhenUnsatisfiable::ScheduleAnyway
        );
        let mut own = PendingPod {
            topology_spread: vec![TopologySpreadConstraint::new("zone", 1, selector.clone())],
            ..Default::default()
        };
        assert!(!apply_defaults(&mut own, &defaults, Some(selector)));
        assert_eq!(own.topology_spread[0].topology_key, "zone");
        assert!(!apply_defaults(&mut PendingPod::default(), &defaults, None));
    }
}
