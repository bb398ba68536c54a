//! Conversions between Kubernetes objects and the pure core's plain data. Errors name the
//! object and the field.

use std::borrow::Borrow;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use joinery_api::{HasConditions, NodeClaim, NodePool};
use joinery_core::requirements::{Operator, Requirement, Requirements};
use joinery_core::resources::{InitContainer, PodLevelRequests, PodResourceSpec, Resources};
use joinery_core::scheduling::{
    BoundPod, DaemonPod, ExistingNode, HostPort, LabelSelector, LabelSelectorRequirement,
    NodeInclusionPolicy, NodePoolLimits, PendingPod, PodAffinityTerm, PreferredSchedulingTerm,
    SelectorOperator, TopologySpreadConstraint, WeightedPodAffinityTerm, WhenUnsatisfiable,
};
use joinery_core::taints::{Taint, TaintEffect, Toleration, TolerationOperator};
use k8s_openapi::api::core::v1::{self as corev1};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::conditions::{INITIALIZED, LAUNCHED};
use crate::lean::{LeanContainer, LeanNode, LeanPod, LeanPodSpec, LeanResources};
use crate::pods::{is_daemon_pod, is_terminal};
use joinery_core::lifecycle::is_ephemeral_taint;

/// The value of label `key` on an object, if it has one.
pub fn label<'m>(
    meta: &'m k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'m str> {
    meta.labels.as_ref()?.get(key).map(String::as_str)
}

/// Parses a taint effect.
pub fn taint_effect(effect: &str) -> Option<TaintEffect> {
    match effect {
        "NoSchedule" => Some(TaintEffect::NoSchedule),
        "PreferNoSchedule" => Some(TaintEffect::PreferNoSchedule),
        "NoExecute" => Some(TaintEffect::NoExecute),
        _ => None,
    }
}

/// A Kubernetes taint in core form (`None` for an unknown effect).
pub fn taint(t: &corev1::Taint) -> Option<Taint> {
    Some(Taint::new(
        t.key.clone(),
        t.value.clone().unwrap_or_default(),
        taint_effect(&t.effect)?,
    ))
}

/// A core taint in Kubernetes form.
pub fn taint_to_k8s(t: &Taint) -> corev1::Taint {
    corev1::Taint {
        key: t.key.clone(),
        value: (!t.value.is_empty()).then(|| t.value.clone()),
        effect: t.effect.as_str().to_string(),
        time_added: None,
    }
}

/// Kubernetes taints in core form (unknown effects are dropped).
pub fn taints(items: Option<&Vec<corev1::Taint>>) -> Vec<Taint> {
    items.into_iter().flatten().filter_map(taint).collect()
}

/// A Kubernetes toleration in core form.
pub fn toleration(t: &corev1::Toleration) -> Toleration {
    Toleration {
        key: t.key.clone().unwrap_or_default(),
        operator: if t.operator.as_deref() == Some("Exists") {
            TolerationOperator::Exists
        } else {
            TolerationOperator::Equal
        },
        value: t.value.clone().unwrap_or_default(),
        effect: t.effect.as_deref().and_then(taint_effect),
        toleration_seconds: t.toleration_seconds,
    }
}

fn resources_of(
    what: &str,
    requests: Option<&BTreeMap<String, Quantity>>,
) -> Result<Resources, String> {
    Resources::from_quantities(
        requests
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), v.0.as_str())),
    )
    .map_err(|e| format!("{what}: {e}"))
}

/// A container's requests, a limit standing in for each resource it limits but does not
/// request (as the API server defaults them, and as upstream counts a pod it reads before
/// defaulting). Errors name the field.
fn container_requests(path: &str, resources: Option<&LeanResources>) -> Result<Resources, String> {
    let requests = resources.and_then(|r| r.requests.as_ref());
    let requested = |k: &String| requests.is_some_and(|r| r.contains_key(k));
    let limits_only = || {
        resources
            .and_then(|r| r.limits.as_ref())
            .into_iter()
            .flatten()
            .filter(|(k, _)| !requested(k))
    };
    let items = requests.into_iter().flatten().chain(limits_only());
    Resources::from_quantities(items.map(|(k, v)| (k.as_str(), v.0.as_str()))).map_err(|e| {
        let which = if limits_only().next().is_some() {
            "requests (or .limits)"
        } else {
            "requests"
        };
        format!("{path}.resources.{which}: {e}")
    })
}

/// Requests by container list (see `CONTAINER_REQUESTS`).
type RememberedRequests = HashMap<usize, (Arc<Vec<LeanContainer>>, Result<Resources, String>)>;

/// How many container lists [`pod_requests`] remembers the requests of, per thread.
const REMEMBERED_CONTAINER_LISTS: usize = 512;

thread_local! {
    /// The requests of pods with nothing but containers, by their shared container list
    /// ([`Interned`](crate::lean::Interned), so the pods of one workload share it): kept with
    /// the list itself, so its address is not reused while remembered. Every disruption pass
    /// reads the requests of every pod; parsing their quantities again each time was a few
    /// percent of a day-long simulation.
    static CONTAINER_REQUESTS: RefCell<RememberedRequests> = RefCell::default();
}

/// What a pod spec asks of a node (init containers, sidecars, overhead, pod-level requests,
/// one pod slot; limits where requests are missing). Errors name the container.
pub fn pod_requests(spec: &LeanPodSpec) -> Result<Resources, String> {
    if spec.init_containers.is_some() || spec.overhead.is_some() || spec.resources.is_some() {
        return compute_pod_requests(spec);
    }
    let list = spec.containers.as_arc();
    let key = Arc::as_ptr(list) as usize;
    if let Some(known) = CONTAINER_REQUESTS.with_borrow(|m| m.get(&key).map(|(_, r)| r.clone())) {
        return known;
    }
    let requests = compute_pod_requests(spec);
    CONTAINER_REQUESTS.with_borrow_mut(|m| {
        if m.len() >= REMEMBERED_CONTAINER_LISTS {
            m.clear();
        }
        m.insert(key, (list.clone(), requests.clone()));
    });
    requests
}

fn compute_pod_requests(spec: &LeanPodSpec) -> Result<Resources, String> {
    let mut containers = Vec::new();
    for c in &spec.containers {
        containers.push(container_requests(
            &format!("spec.containers[{}]", c.name),
            c.resources.as_ref(),
        )?);
    }
    let mut init_containers = Vec::new();
    for c in spec.init_containers.iter().flatten() {
        init_containers.push(InitContainer {
            requests: container_requests(
                &format!("spec.initContainers[{}]", c.name),
                c.resources.as_ref(),
            )?,
            restartable: c.restart_policy.as_deref() == Some("Always"),
        });
    }
    let overhead = resources_of("spec.overhead", spec.overhead.as_deref())?;
    let pod_level = spec.resources.as_ref().and_then(|r| r.requests.as_ref());
    let pod_level = PodLevelRequests {
        cpu_millis: pod_level
            .and_then(|r| r.get("cpu"))
            .map(|q| joinery_core::resources::parse_milli(&q.0))
            .transpose()
            .map_err(|e| format!("spec.resources.requests.cpu: {e}"))?,
        memory_bytes: pod_level
            .and_then(|r| r.get("memory"))
            .map(|q| joinery_core::resources::parse_value(&q.0))
            .transpose()
            .map_err(|e| format!("spec.resources.requests.memory: {e}"))?,
    };
    Ok(PodResourceSpec {
        containers,
        init_containers,
        overhead,
        pod_level,
    }
    .requests())
}

/// Required node-affinity terms of a pod spec as OR-ed requirement sets. `matchFields` is
/// refused, as upstream does.
pub fn required_affinity(spec: &LeanPodSpec) -> Result<Vec<Requirements>, String> {
    let Some(terms) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
    else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (i, term) in terms.node_selector_terms.iter().enumerate() {
        if term.match_fields.as_ref().is_some_and(|f| !f.is_empty()) {
            return Err(format!(
                "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[{i}].matchFields is not supported"
            ));
        }
        let mut reqs = Requirements::new();
        for (j, e) in term.match_expressions.iter().flatten().enumerate() {
            let Some(op) = node_selector_operator(&e.operator) else {
                return Err(format!(
                    "spec.affinity.nodeAffinity…nodeSelectorTerms[{i}].matchExpressions[{j}].operator {:?} is not a node selector operator",
                    e.operator
                ));
            };
            let r = Requirement::new(e.key.clone(), op, e.values.clone().unwrap_or_default())
                .map_err(|err| format!("spec.affinity.nodeAffinity…nodeSelectorTerms[{i}].matchExpressions[{j}]: {err}"))?;
            reqs.add(r);
        }
        out.push(reqs);
    }
    Ok(out)
}

/// A pending pod in core form; the error names the pod and field.
pub fn pending_pod(pod: &LeanPod) -> Result<PendingPod, String> {
    let key = pod.key();
    let ctx = |e: String| format!("Pod {key}: {e}");
    let spec = pod.spec.clone().unwrap_or_default();
    Ok(PendingPod {
        key: key.clone(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        created: pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second())
            .unwrap_or_default(),
        priority: spec.priority.unwrap_or_default(),
        requests: pod_requests(&spec).map_err(ctx)?,
        node_selector: spec.node_selector.as_deref().cloned().unwrap_or_default(),
        required_affinity: required_affinity(&spec).map_err(ctx)?,
        tolerations: spec.tolerations.iter().flatten().map(toleration).collect(),
        labels: pod.metadata.labels.as_deref().cloned().unwrap_or_default(),
        preferred_affinity: preferred_affinity(&spec).map_err(ctx)?,
        topology_spread: topology_spread(&spec).map_err(ctx)?,
        pod_affinity: pod_affinity_terms(&spec, false).map_err(ctx)?,
        preferred_pod_affinity: preferred_pod_affinity_terms(&spec, false).map_err(ctx)?,
        pod_anti_affinity: pod_affinity_terms(&spec, true).map_err(ctx)?,
        preferred_pod_anti_affinity: preferred_pod_affinity_terms(&spec, true).map_err(ctx)?,
        host_ports: host_ports(&spec),
        volume_requirements: Vec::new(),
        volumes: Vec::new(),
        moved_by_consolidation: false,
        capacity_buffer: None,
    })
}

/// A DaemonSet's pod as the scheduler counts it: the spec of its representative pod
/// ([`representative_daemon_pods`]) when one exists, else its template; in both cases the
/// template's required node affinity.
pub fn daemon_pod(
    ds: &k8s_openapi::api::apps::v1::DaemonSet,
    representative: Option<&LeanPod>,
) -> Result<DaemonPod, String> {
    let name = format!(
        "{}/{}",
        ds.metadata.namespace.clone().unwrap_or_default(),
        ds.metadata.name.clone().unwrap_or_default()
    );
    let template = ds
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .map(LeanPodSpec::from)
        .unwrap_or_default();
    let template_affinity =
        required_affinity(&template).map_err(|e| format!("DaemonSet {name}: spec.template.{e}"))?;
    // A running pod tells what its DaemonSet really asks (admission may have changed requests,
    // the DaemonSet controller adds tolerations); its node affinity pins it to its own node, so
    // the template's says where the next one runs.
    let (spec, origin) = match representative.and_then(|p| p.spec.clone().map(|s| (p, s))) {
        Some((pod, spec)) => (
            spec,
            format!(
                "its pod {}: ",
                pod.metadata.name.as_deref().unwrap_or_default()
            ),
        ),
        None => (template, "spec.template.".to_string()),
    };
    let ctx = |e: String| format!("DaemonSet {name}: {origin}{e}");
    Ok(DaemonPod {
        requests: pod_requests(&spec).map_err(&ctx)?,
        node_selector: spec.node_selector.as_deref().cloned().unwrap_or_default(),
        required_affinity: template_affinity,
        tolerations: spec.tolerations.iter().flatten().map(toleration).collect(),
        host_ports: host_ports(&spec),
        name,
    })
}

/// Each DaemonSet's newest pod (what upstream takes as its representative pod), by the
/// DaemonSet's UID (a pod's controller owner reference names it): one pass over the pods.
pub fn representative_daemon_pods<'a>(pods: &[&'a LeanPod]) -> BTreeMap<&'a str, &'a LeanPod> {
    let newest = |p: &LeanPod| {
        (
            p.metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_second()),
            p.metadata.name.clone(),
        )
    };
    let mut out: BTreeMap<&'a str, &'a LeanPod> = BTreeMap::new();
    for &pod in pods {
        let Some(owner) = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true) && o.kind == "DaemonSet")
        else {
            continue;
        };
        out.entry(owner.uid.as_str())
            .and_modify(|kept| {
                if newest(pod) > newest(kept) {
                    *kept = pod
                }
            })
            .or_insert(pod);
    }
    out
}

/// A label selector in core form; an unknown operator is an error naming `path`.
pub fn label_selector(
    selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
    path: &str,
) -> Result<LabelSelector, String> {
    let mut out = LabelSelector {
        match_labels: selector.match_labels.clone().unwrap_or_default(),
        ..Default::default()
    };
    for (i, e) in selector.match_expressions.iter().flatten().enumerate() {
        let operator = match e.operator.as_str() {
            "In" => SelectorOperator::In,
            "NotIn" => SelectorOperator::NotIn,
            "Exists" => SelectorOperator::Exists,
            "DoesNotExist" => SelectorOperator::DoesNotExist,
            other => {
                return Err(format!(
                    "{path}.matchExpressions[{i}].operator {other:?} is not a label selector operator"
                ));
            }
        };
        out.match_expressions.push(LabelSelectorRequirement::new(
            e.key.clone(),
            operator,
            e.values.clone().unwrap_or_default(),
        ));
    }
    Ok(out)
}

fn inclusion_policy(policy: Option<&str>) -> Option<NodeInclusionPolicy> {
    match policy {
        Some("Honor") => Some(NodeInclusionPolicy::Honor),
        Some("Ignore") => Some(NodeInclusionPolicy::Ignore),
        _ => None,
    }
}

/// `spec.topologySpreadConstraints` in core form.
pub fn topology_spread(spec: &LeanPodSpec) -> Result<Vec<TopologySpreadConstraint>, String> {
    let mut out = Vec::new();
    for (i, c) in spec
        .topology_spread_constraints
        .iter()
        .flatten()
        .enumerate()
    {
        let path = format!("spec.topologySpreadConstraints[{i}]");
        out.push(TopologySpreadConstraint {
            max_skew: u32::try_from(c.max_skew).unwrap_or(0),
            topology_key: c.topology_key.clone(),
            when_unsatisfiable: if c.when_unsatisfiable == "ScheduleAnyway" {
                WhenUnsatisfiable::ScheduleAnyway
            } else {
                WhenUnsatisfiable::DoNotSchedule
            },
            label_selector: c
                .label_selector
                .as_ref()
                .map(|s| label_selector(s, &format!("{path}.labelSelector")))
                .transpose()?,
            min_domains: c.min_domains.and_then(|m| u32::try_from(m).ok()),
            node_affinity_policy: inclusion_policy(c.node_affinity_policy.as_deref()),
            node_taints_policy: inclusion_policy(c.node_taints_policy.as_deref()),
            match_label_keys: c.match_label_keys.clone().unwrap_or_default(),
        });
    }
    Ok(out)
}

/// One pod (anti-)affinity term in core form. Its `namespaceSelector` is kept for the core,
/// which matches it against the Namespaces of [`namespace_labels`].
fn pod_affinity_term(
    term: &corev1::PodAffinityTerm,
    path: &str,
) -> Result<PodAffinityTerm, String> {
    Ok(PodAffinityTerm {
        label_selector: term
            .label_selector
            .as_ref()
            .map(|s| label_selector(s, &format!("{path}.labelSelector")))
            .transpose()?,
        topology_key: term.topology_key.clone(),
        namespaces: term.namespaces.clone().unwrap_or_default(),
        namespace_selector: term
            .namespace_selector
            .as_ref()
            .map(|s| label_selector(s, &format!("{path}.namespaceSelector")))
            .transpose()?,
    })
}

/// The labels of Namespace objects by name, for affinity terms' `namespaceSelector`.
pub fn namespace_labels<N: Borrow<corev1::Namespace>>(
    namespaces: &[N],
) -> BTreeMap<String, BTreeMap<String, String>> {
    namespaces
        .iter()
        .filter_map(|n| {
            let meta = &n.borrow().metadata;
            Some((meta.name.clone()?, meta.labels.clone().unwrap_or_default()))
        })
        .collect()
}

fn affinity_path(anti: bool) -> &'static str {
    if anti {
        "spec.affinity.podAntiAffinity"
    } else {
        "spec.affinity.podAffinity"
    }
}

/// Required pod affinity (`anti` false) or anti-affinity (`anti` true) terms of a pod spec.
pub fn pod_affinity_terms(spec: &LeanPodSpec, anti: bool) -> Result<Vec<PodAffinityTerm>, String> {
    let affinity = spec.affinity.as_ref();
    let terms = if anti {
        affinity
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
    } else {
        affinity
            .and_then(|a| a.pod_affinity.as_ref())
            .and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
    };
    let path = affinity_path(anti);
    terms
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, t)| {
            pod_affinity_term(
                t,
                &format!("{path}.requiredDuringSchedulingIgnoredDuringExecution[{i}]"),
            )
        })
        .collect()
}

/// Preferred pod affinity (`anti` false) or anti-affinity (`anti` true) terms with weights.
pub fn preferred_pod_affinity_terms(
    spec: &LeanPodSpec,
    anti: bool,
) -> Result<Vec<WeightedPodAffinityTerm>, String> {
    let affinity = spec.affinity.as_ref();
    let terms = if anti {
        affinity
            .and_then(|a| a.pod_anti_affinity.as_ref())
            .and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })
    } else {
        affinity
            .and_then(|a| a.pod_affinity.as_ref())
            .and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })
    };
    let path = affinity_path(anti);
    terms
        .into_iter()
        .flatten()
        .enumerate()
        .map(|(i, w)| {
            let path = format!(
                "{path}.preferredDuringSchedulingIgnoredDuringExecution[{i}].podAffinityTerm"
            );
            Ok(WeightedPodAffinityTerm {
                weight: w.weight,
                term: pod_affinity_term(&w.pod_affinity_term, &path)?,
            })
        })
        .collect()
}

/// Preferred node-affinity terms of a pod spec with their weights (`matchFields` is refused,
/// as for required terms).
pub fn preferred_affinity(spec: &LeanPodSpec) -> Result<Vec<PreferredSchedulingTerm>, String> {
    let Some(terms) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
    else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (i, term) in terms.iter().enumerate() {
        let path = format!(
            "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference"
        );
        if term
            .preference
            .match_fields
            .as_ref()
            .is_some_and(|f| !f.is_empty())
        {
            return Err(format!("{path}.matchFields is not supported"));
        }
        let mut preference = Requirements::new();
        for (j, e) in term
            .preference
            .match_expressions
            .iter()
            .flatten()
            .enumerate()
        {
            let Some(op) = node_selector_operator(&e.operator) else {
                return Err(format!(
                    "{path}.matchExpressions[{j}].operator {:?} is not a node selector operator",
                    e.operator
                ));
            };
            let r = Requirement::new(e.key.clone(), op, e.values.clone().unwrap_or_default())
                .map_err(|err| format!("{path}.matchExpressions[{j}]: {err}"))?;
            preference.add(r);
        }
        out.push(PreferredSchedulingTerm {
            weight: term.weight,
            preference,
        });
    }
    Ok(out)
}

/// The operator of a pod's node selector requirement: Kubernetes' six (Karpenter's `Gte` and
/// `Lte` belong to NodePools, not pods).
fn node_selector_operator(name: &str) -> Option<Operator> {
    name.parse()
        .ok()
        .filter(|op| !matches!(op, Operator::Gte | Operator::Lte))
}

/// Host ports bound by the regular containers of a pod spec (what upstream tracks).
pub fn host_ports(spec: &LeanPodSpec) -> Vec<HostPort> {
    spec.containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = u16::try_from(p.host_port?).ok().filter(|&port| port != 0)?;
            Some(HostPort {
                port,
                protocol: p.protocol.clone().unwrap_or_default(),
                host_ip: p.host_ip.clone().unwrap_or_default(),
            })
        })
        .collect()
}

/// A pod bound to a node in core form (`None` when it is not bound or is terminal): its
/// labels, required anti-affinity terms and host ports. Anti-affinity terms that do not
/// convert are left out. Its CSI volumes need the volume objects: see
/// [`VolumeIndex::bound_pods`](crate::volumes::VolumeIndex::bound_pods). Its labels are the
/// map the pod itself holds, [shared](crate::lean::Interned) with the pods stating the same.
pub fn bound_pod(pod: &LeanPod) -> Option<BoundPod> {
    static NO_LABELS: std::sync::LazyLock<std::sync::Arc<BTreeMap<String, String>>> =
        std::sync::LazyLock::new(Default::default);
    let spec = pod.spec.as_ref()?;
    let node = spec.node_name.as_deref()?.to_string();
    if is_terminal(pod) {
        return None;
    }
    let anti_affinity = spec
        .affinity
        .as_ref()
        .and_then(|a| a.pod_anti_affinity.as_ref())
        .and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        .into_iter()
        .flatten()
        .filter_map(|t| pod_affinity_term(t, "spec.affinity.podAntiAffinity").ok())
        .collect();
    Some(BoundPod {
        key: pod.key(),
        node,
        labels: pod
            .metadata
            .labels
            .as_ref()
            .map_or_else(|| NO_LABELS.clone(), |labels| labels.as_arc().clone()),
        anti_affinity,
        host_ports: host_ports(spec),
        volumes: Vec::new(),
        terminating: pod.metadata.deletion_timestamp.is_some(),
    })
}

/// Resources from a Kubernetes resource list; the error names `what`.
pub fn resource_list(
    what: &str,
    list: Option<&BTreeMap<String, Quantity>>,
) -> Result<Resources, String> {
    resources_of(what, list)
}

/// A core resource vector as a Kubernetes resource list.
pub fn to_resource_list(resources: &Resources) -> BTreeMap<String, Quantity> {
    resources
        .to_quantities()
        .into_iter()
        .map(|(k, v)| (k, Quantity(v)))
        .collect()
}

/// The cluster's Nodes and in-flight NodeClaims in the core's form, from plain lists of
/// objects (any order; `Arc`s or owned objects).
///
/// Every Node becomes an [`ExistingNode`] carrying the requests of the non-terminal pods bound
/// to it (DaemonSet pods also counted apart). A Node whose NodeClaim (matched by provider ID)
/// is not `Initialized` is in flight: its startup and ephemeral taints are dropped and the
/// claim's taints apply. Deleting, cordoned and disrupted Nodes are unschedulable. A NodeClaim
/// that is `Launched` but whose Node has not registered yet becomes an in-flight node described
/// by its requirements, labels and `status.allocatable`. Unparsable requests or allocatables
/// count as empty, as in the controller.
pub fn existing_nodes<N, C, P>(nodes: &[N], claims: &[C], pods: &[P]) -> Vec<ExistingNode>
where
    N: Borrow<LeanNode>,
    C: Borrow<NodeClaim>,
    P: Borrow<LeanPod>,
{
    let mut requested: BTreeMap<String, (Resources, Resources)> = BTreeMap::new();
    for pod in pods.iter().map(Borrow::borrow) {
        let Some(spec) = pod.spec.as_ref() else {
            continue;
        };
        let Some(node) = spec.node_name.as_deref() else {
            continue;
        };
        if is_terminal(pod) {
            continue;
        }
        let Ok(r) = pod_requests(spec) else { continue };
        let entry = requested.entry(node.to_string()).or_default();
        entry.0 += &r;
        if is_daemon_pod(pod) {
            entry.1 += &r;
        }
    }
    // First claim per provider ID, in list order (what a linear search would find).
    let mut claim_by_provider_id: BTreeMap<&str, &NodeClaim> = BTreeMap::new();
    for claim in claims.iter().map(Borrow::borrow) {
        if let Some(pid) = claim.status.as_ref().and_then(|s| s.provider_id.as_deref()) {
            claim_by_provider_id.entry(pid).or_insert(claim);
        }
    }
    let mut out = Vec::new();
    let mut nodes_seen = BTreeSet::new();
    for node in nodes.iter().map(Borrow::borrow) {
        let name = node.name().to_string();
        let provider_id = node.provider_id().unwrap_or_default().to_string();
        let claim = claim_by_provider_id.get(provider_id.as_str()).copied();
        nodes_seen.insert(provider_id);
        let initialized = claim
            .map(|c| c.is_condition_true(INITIALIZED))
            .unwrap_or(true);
        let mut node_taints = taints(node.spec.as_ref().and_then(|s| s.taints.as_deref()));
        if let Some(claim) = claim
            && !initialized
        {
            // Uninitialized managed nodes: their startup and ephemeral taints are temporary.
            let startup = taints(claim.spec.startup_taints.as_ref());
            node_taints.retain(|t| !startup.contains(t) && !is_ephemeral_taint(t));
            for t in taints(claim.spec.taints.as_ref()) {
                if !node_taints.contains(&t) {
                    node_taints.push(t);
                }
            }
        }
        let deleting = node.metadata.deletion_timestamp.is_some()
            || claim.is_some_and(|c| c.metadata.deletion_timestamp.is_some());
        let cordoned = node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false);
        let disrupted = node_taints
            .iter()
            .any(|t| t.key == joinery_core::labels::DISRUPTED_TAINT_KEY);
        let mut allocatable =
            resource_list("status.allocatable", node.allocatable()).unwrap_or_default();
        if let Some(claim) = claim
            && !initialized
        {
            // A kubelet that has just started reports extended resources (GPUs…) as zero until
            // their device plugin registers: until the node is initialized, what its NodeClaim
            // expects stands in for every zero (as upstream's state node does).
            let expected = resource_list(
                "status.allocatable",
                claim.status.as_ref().and_then(|s| s.allocatable.as_ref()),
            )
            .unwrap_or_default();
            for (resource, amount) in expected.iter() {
                if allocatable.get(resource) == 0 {
                    allocatable.set(resource, amount);
                }
            }
        }
        let (req, daemon) = requested.remove(&name).unwrap_or_default();
        out.push(ExistingNode {
            requirements: Requirements::from_labels(
                node.metadata.labels.iter().flat_map(|l| l.iter()),
            ),
            nodepool: node
                .label(joinery_core::labels::NODEPOOL_LABEL)
                .map(String::from),
            taints: node_taints,
            allocatable,
            requested: req,
            daemon_requested: daemon,
            in_flight: !initialized,
            schedulable: !deleting && !cordoned && !disrupted,
            name,
            ..Default::default()
        });
    }
    // Launched claims whose Node has not registered yet.
    for claim in claims.iter().map(Borrow::borrow) {
        let Some(status) = &claim.status else {
            continue;
        };
        let Some(pid) = &status.provider_id else {
            continue;
        };
        if nodes_seen.contains(pid)
            || claim.metadata.deletion_timestamp.is_some()
            || !claim.is_condition_true(LAUNCHED)
        {
            continue;
        }
        let mut requirements = Requirements::new();
        for r in &claim.spec.requirements {
            if let Ok(req) = Requirement::new(
                r.key.clone(),
                r.operator,
                r.values.clone().unwrap_or_default(),
            ) {
                requirements.add(req);
            }
        }
        let claim_labels = claim.metadata.labels.clone().unwrap_or_default();
        requirements.add_all(&Requirements::from_labels(
            claim_labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        ));
        out.push(ExistingNode {
            name: claim.metadata.name.clone().unwrap_or_default(),
            nodepool: claim_labels
                .get(joinery_core::labels::NODEPOOL_LABEL)
                .cloned(),
            requirements,
            taints: taints(claim.spec.taints.as_ref()),
            allocatable: resource_list("status.allocatable", status.allocatable.as_ref())
                .unwrap_or_default(),
            requested: Resources::new(),
            daemon_requested: Resources::new(),
            in_flight: true,
            schedulable: true,
            ..Default::default()
        });
    }
    out
}

/// A NodePool's limits in the core's form (`None` when the pool sets no `spec.limits`):
/// usage is the summed `status.capacity` of the NodeClaims labelled with the pool plus their
/// number as `nodes`. The error names the pool and the limit that is not a quantity.
pub fn nodepool_limits<C: Borrow<NodeClaim>>(
    pool: &NodePool,
    claims: &[C],
) -> Result<Option<NodePoolLimits>, String> {
    let Some(limits) = pool.spec.limits.as_ref() else {
        return Ok(None);
    };
    let name = pool.metadata.name.clone().unwrap_or_default();
    let mut usage = Resources::new();
    let mut count = 0u64;
    for c in claims.iter().map(Borrow::borrow) {
        if label(&c.metadata, joinery_core::labels::NODEPOOL_LABEL) != Some(name.as_str()) {
            continue;
        }
        count += 1;
        if let Ok(cap) = resource_list(
            "status.capacity",
            c.status.as_ref().and_then(|s| s.capacity.as_ref()),
        ) {
            usage += &cap;
        }
    }
    usage.set("nodes", count);
    NodePoolLimits::from_quantities(limits.iter().map(|(k, v)| (k.clone(), v.0.clone())), usage)
        .map(Some)
        .map_err(|e| format!("NodePool {name}: spec.limits: {e}"))
}

/// A NodeOverlay in the core's form; errors name the overlay and field.
pub fn overlay(o: &joinery_api::NodeOverlay) -> Result<joinery_core::overlay::Overlay, String> {
    let name = o.metadata.name.clone().unwrap_or_default();
    let fail = |message: String| format!("NodeOverlay {name}: {message}");
    let mut requirements = Requirements::new();
    for (i, r) in o.spec.requirements.iter().enumerate() {
        let req = Requirement::new(
            r.key.clone(),
            r.operator,
            r.values.clone().unwrap_or_default(),
        )
        .map_err(|e| fail(format!("spec.requirements[{i}]: {e}")))?;
        requirements.add(req);
    }
    let price = joinery_core::overlay::PriceChange::parse(
        o.spec.price.as_deref(),
        o.spec.price_adjustment.as_deref(),
    )
    .map_err(fail)?;
    let capacity = resource_list("spec.capacity", o.spec.capacity.as_ref()).map_err(fail)?;
    let overlay = joinery_core::overlay::Overlay {
        name: name.clone(),
        weight: o.spec.weight.unwrap_or(0),
        requirements,
        price,
        capacity,
    };
    overlay.validate().map_err(|e| e.to_string())?;
    Ok(overlay)
}

/// A Kubernetes timestamp as a `SystemTime` (times before the epoch become the epoch).
pub fn system_time(
    t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> std::time::SystemTime {
    joinery_core::time::system_time(t.0).max(std::time::UNIX_EPOCH)
}

#[cfg(test)]
mod tests;
