//! # clusterapi — Cluster API MachineDeployments as a Joinery cloud
//!
//! Karpenter runs against the workload cluster; the Cluster API objects live in a management
//! cluster, which the host reaches as cluster `management` (`joinery run
//! --management-kubeconfig`). Every MachineDeployment labelled
//! `node.cluster.x-k8s.io/karpenter-member: ""` and selected by the `ClusterAPINodeClass`'s
//! `scalableResourceSelector` is one instance type, described by the cluster-autoscaler
//! capacity annotations and the labels CAPI propagates to its Nodes.
//!
//! - **Prices**: a MachineDeployment's `cluster.x-k8s.io/machine-current-price` annotation
//!   where present; otherwise none, and the host asks the pricing plugin (by default
//!   `synthetic-pricing`, linear in vCPU and memory, so the cheapest type that fits is the one
//!   that wastes least). Upstream's provider prices everything 0 and picks by name.
//! - **create**: resumes a Machine already claimed for the NodeClaim (label
//!   `joinery.dev/nodeclaim`), so a restart between raising replicas and claiming never adds
//!   a Machine. Otherwise it picks the first type the claim allows (the host lists them
//!   cheapest first) that fits and is available, raises its MachineDeployment only by the
//!   Machines missing (unclaimed ones are used first), and claims one unclaimed Machine with
//!   the `karpenter-member` label. Writes name the `resourceVersion` they read, so a
//!   concurrent change is a conflict, retried on fresh objects. The host runs creates one at
//!   a time (`maxConcurrentCreates: 1`). Until the Machine has its provider ID, create answers
//!   retryable and the next attempt resumes.
//! - **delete**: annotates exactly that Machine with `cluster.x-k8s.io/delete-machine`, then
//!   lowers its MachineDeployment's replicas, so CAPI removes that Machine and no other
//!   (the annotation is removed again if the scale-down fails). A Machine being deleted is
//!   not-found.
//! - **get / list**: claimed Machines of this cluster (`joinery.dev/cluster`); one without
//!   a provider ID yet is listed as `clusterapi-pending://<namespace>/<name>`, so a claim that
//!   times out before its Machine provisions still returns the replica on deletion.
//! - **drift**: `MachineDeploymentDrifted` when the Machine's MachineDeployment is no longer
//!   selected by the NodeClass (or is gone).
//!
//! Configuration (JSON):
//!
//! | field | default | meaning |
//! |---|---|---|
//! | `clusterName` | — (required) | the tag on claimed Machines (`joinery.dev/cluster`); get/list/delete/GC see only these |
//! | `zone` | `default` | the zone of MachineDeployments without a `topology.kubernetes.io/zone` label |
//! | `claimTimeoutSeconds` | `30` | how long a create waits for a Machine to claim and for its provider ID |
//! | `pollMillis` | `1000` | how often it looks meanwhile |
//! | `namespace` | — | the one namespace of the CAPI objects (a namespaced Role then suffices); unset: all namespaces |
//!
//! Node repair: the plugin names no repair policies, so the host's defaults apply (`Ready`
//! `False` or `Unknown` for 10 minutes), and it cannot reboot (repair replaces the Machine).
//! A management cluster whose MachineHealthChecks already remediate these Machines should
//! leave the `NodeRepair` gate off, so that two controllers do not replace the same node.

pub mod capi;

#[cfg(test)]
mod tests;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use joinery_plugin_sdk::cloud::{
    CLUSTER_LABEL, CloudError, CloudProvider, Condition, CreateRequest, Instance, InstanceState,
    InstanceType, KeyValue, NodeClaim, NodeClass, NodeClassResolution, Offering, OfferingRef,
    Overhead, Requirement, Resource,
};
use joinery_plugin_sdk::kube::{self, KubeError, PatchKind};
use joinery_plugin_sdk::log;
use joinery_plugin_sdk::quantity::parse_milli;
use serde::Deserialize;
use serde_json::json;

use capi::{LabelSelector, Machine, MachineDeployment, Offer};

/// The scheme of a claimed Machine that has no provider ID yet.
pub const PENDING_PREFIX: &str = "clusterapi-pending://";
/// Drift reason when the Machine's MachineDeployment is no longer selected.
pub const DEPLOYMENT_DRIFTED: &str = "MachineDeploymentDrifted";
/// How many times a write is retried after a conflict.
const CONFLICT_RETRIES: usize = 3;

/// The plugin's configuration.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The tag on claimed Machines.
    pub cluster_name: String,
    /// Zone of MachineDeployments without a zone label.
    pub zone: String,
    /// How long a create waits for a Machine and its provider ID, in seconds.
    pub claim_timeout_seconds: u64,
    /// How often it looks, in milliseconds.
    pub poll_millis: u64,
    /// The one namespace of the CAPI objects, when they are in one: then a namespaced Role
    /// is enough on the management cluster. Unset: listed across namespaces.
    pub namespace: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            cluster_name: String::new(),
            zone: "default".into(),
            claim_timeout_seconds: 30,
            poll_millis: 1000,
            namespace: None,
        }
    }
}

impl Config {
    /// The configuration, checked; errors say which field to fix.
    pub fn load() -> Result<Config, CloudError> {
        let config: Config = joinery_plugin_sdk::config()
            .map_err(|e| CloudError::invalid(format!("clusterapi configuration: {e}")))?;
        if config.cluster_name.is_empty() {
            return Err(CloudError::invalid(
                "clusterapi configuration: clusterName is required (the tag of this cluster's Machines)",
            ));
        }
        if config.poll_millis == 0 || config.zone.is_empty() {
            return Err(CloudError::invalid(
                "clusterapi configuration: pollMillis must be positive and zone not empty",
            ));
        }
        Ok(config)
    }

    fn polls(&self) -> u64 {
        (self.claim_timeout_seconds * 1000)
            .div_ceil(self.poll_millis)
            .max(1)
    }
}

/// The `ClusterAPINodeClass` spec.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct ClassSpec {
    /// Which karpenter-member MachineDeployments the class may scale.
    pub scalable_resource_selector: LabelSelector,
}

/// A failed Kubernetes call, classified as the SDK does for every cloud plugin, with what
/// was being done in front of the message.
fn kube_error(what: &str, e: impl Into<kube::Error>) -> CloudError {
    CloudError::from(e.into()).context(&format!("clusterapi: {what}"))
}

/// A collection in the management cluster: in the configured namespace, else across all.
fn scope(config: &Config, resource: &str) -> kube::ResourceRef {
    match &config.namespace {
        Some(namespace) => capi::collection(resource).namespace(namespace.clone()),
        None => capi::collection(resource),
    }
}

fn deployments(config: &Config) -> Result<Vec<MachineDeployment>, CloudError> {
    kube::list_items(
        &scope(config, "machinedeployments"),
        Some(&format!("{}=", capi::MEMBER_LABEL)),
    )
    .map_err(|e| kube_error("listing MachineDeployments in the management cluster", e))
}

fn machines(config: &Config, selector: &str) -> Result<Vec<Machine>, CloudError> {
    kube::list_items(&scope(config, "machines"), Some(selector))
        .map_err(|e| kube_error("listing Machines", e))
}

/// The NodeClass's MachineDeployments as instance types, and what kept some out.
#[derive(Clone, Debug, Default)]
pub struct Offers {
    /// One per usable MachineDeployment, in namespace/name order.
    pub kept: Vec<Offer>,
    /// Why others were left out (malformed annotations, a name two of them share), each
    /// naming the object.
    pub problems: Vec<String>,
}

/// Reads the MachineDeployments the NodeClass selects.
pub fn offers(spec: &ClassSpec, all: &[MachineDeployment]) -> Result<Offers, CloudError> {
    let mut out = Offers::default();
    let mut sorted: Vec<&MachineDeployment> = all.iter().collect();
    sorted.sort_by(|a, b| {
        (&a.metadata.namespace, &a.metadata.name).cmp(&(&b.metadata.namespace, &b.metadata.name))
    });
    for md in sorted {
        let key = format!("{}/{}", md.metadata.namespace, md.metadata.name);
        match capi::selected(md, &spec.scalable_resource_selector) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                return Err(CloudError::invalid(format!(
                    "ClusterAPINodeClass scalableResourceSelector: {e}"
                )));
            }
        }
        match capi::offer(md) {
            Ok(offer) if out.kept.iter().any(|o| o.name == offer.name) => out
                .problems
                .push(format!("MachineDeployment {key}: instance type {:?} is already offered by another MachineDeployment; left out", offer.name)),
            Ok(offer) => out.kept.push(offer),
            Err(e) => out.problems.push(format!("MachineDeployment {key}: {e}")),
        }
    }
    Ok(out)
}

fn load_offers(config: &Config, class: &NodeClass) -> Result<Offers, CloudError> {
    let spec: ClassSpec = class.spec_as()?;
    offers(&spec, &deployments(config)?)
}

fn zone_of(offer: &Offer, config: &Config) -> String {
    offer
        .labels
        .get(capi::ZONE_LABEL)
        .cloned()
        .filter(|z| !z.is_empty())
        .unwrap_or_else(|| config.zone.clone())
}

/// The instance type of an offer.
pub fn instance_type(offer: &Offer, config: &Config) -> InstanceType {
    let requirements = offer
        .labels
        .iter()
        .filter(|(k, _)| {
            *k != capi::INSTANCE_TYPE_LABEL
                && *k != capi::ZONE_LABEL
                && *k != "karpenter.sh/capacity-type"
        })
        .map(|(k, v)| Requirement::is_in(k.clone(), &[v.as_str()]))
        .collect();
    InstanceType {
        name: offer.name.clone(),
        requirements,
        capacity: offer
            .capacity
            .iter()
            .map(|(k, v)| Resource::new(k.clone(), v.clone()))
            .collect(),
        overhead: Overhead {
            kube_reserved: Vec::new(),
            system_reserved: Vec::new(),
            eviction_threshold: Vec::new(),
        },
        offerings: vec![Offering {
            zone: zone_of(offer, config),
            capacity_type: "on-demand".into(),
            price: offer.price,
            available: offer.available,
        }],
    }
}

/// The MachineDeployment for a claim: in the order of the claim's instance-type requirement
/// (cheapest first, as the host sends it; name order when it has none), the first whose
/// labels the claim allows, whose capacity holds its requests and that may grow.
pub fn choose<'a>(offers: &'a [Offer], claim: &NodeClaim, config: &Config) -> Option<&'a Offer> {
    let order = claim.allowed_values(capi::INSTANCE_TYPE_LABEL);
    let rank = |o: &Offer| {
        order
            .iter()
            .position(|n| *n == o.name)
            .unwrap_or(usize::MAX)
    };
    let mut fitting: Vec<&Offer> = offers
        .iter()
        .filter(|o| o.available)
        .filter(|o| {
            let zone = zone_of(o, config);
            o.labels.iter().all(|(k, v)| claim.allows(k, v))
                && claim.allows(capi::INSTANCE_TYPE_LABEL, &o.name)
                && claim.allows(capi::ZONE_LABEL, &zone)
                && claim.allows("karpenter.sh/capacity-type", "on-demand")
        })
        .filter(|o| {
            claim.resource_requests.iter().all(|r| {
                match (parse_milli(&r.quantity), o.allocatable.get(&r.name)) {
                    (Some(0), _) => true,
                    (Some(wanted), Some(have)) => wanted <= *have,
                    _ => false,
                }
            })
        })
        .collect();
    fitting.sort_by(|a, b| rank(a).cmp(&rank(b)).then(a.name.cmp(&b.name)));
    fitting.first().copied()
}

/// The provider ID the host knows a claimed Machine by.
pub fn provider_id_of(machine: &Machine) -> String {
    match machine.provider_id() {
        Some(id) => id.to_string(),
        None => format!("{PENDING_PREFIX}{}", machine.key()),
    }
}

/// The host's view of a claimed Machine.
pub fn to_instance(machine: &Machine, offer: Option<&Offer>, config: &Config) -> Instance {
    let mut labels: Vec<KeyValue> = offer
        .map(|o| {
            o.labels
                .iter()
                .filter(|(k, _)| *k != capi::INSTANCE_TYPE_LABEL)
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    if let Some(cluster) = machine.metadata.labels.get(CLUSTER_LABEL) {
        labels.push(KeyValue::new(CLUSTER_LABEL, cluster.clone()));
    }
    let state = if machine.metadata.deletion_timestamp.is_some() {
        InstanceState::Terminating
    } else {
        match machine.status.phase.as_deref() {
            Some("Running") => InstanceState::Running,
            Some("Deleting") => InstanceState::Terminating,
            Some("Deleted") => InstanceState::Terminated,
            _ => InstanceState::Pending,
        }
    };
    Instance {
        provider_id: provider_id_of(machine),
        instance_type: offer
            .map(|o| o.name.clone())
            .unwrap_or_else(|| machine.deployment().unwrap_or_default().to_string()),
        zone: offer
            .map(|o| zone_of(o, config))
            .unwrap_or_else(|| config.zone.clone()),
        capacity_type: "on-demand".into(),
        image_id: None,
        labels,
        capacity: offer
            .map(|o| {
                o.capacity
                    .iter()
                    .map(|(k, v)| Resource::new(k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default(),
        allocatable: Vec::new(),
        state,
        node_claim: machine.metadata.labels.get(capi::NODECLAIM_LABEL).cloned(),
        created_at: machine.metadata.creation_timestamp.clone(),
    }
}

/// The offer of a Machine's MachineDeployment, if it still has one.
fn offer_of(machine: &Machine, all: &[MachineDeployment]) -> Option<Offer> {
    let md = all.iter().find(|m| {
        m.metadata.namespace == machine.metadata.namespace
            && Some(m.metadata.name.as_str()) == machine.deployment()
    })?;
    capi::offer(md).ok()
}

/// The claimed Machines of this cluster.
fn claimed(config: &Config) -> Result<Vec<Machine>, CloudError> {
    let selector = format!(
        "{},{}={}",
        capi::MEMBER_LABEL,
        CLUSTER_LABEL,
        config.cluster_name
    );
    Ok(machines(config, &selector)?
        .into_iter()
        .filter(|m| {
            m.is_claimed() && m.metadata.labels.get(CLUSTER_LABEL) == Some(&config.cluster_name)
        })
        .collect())
}

/// The claimed Machine of this cluster with this provider ID.
fn find(config: &Config, provider_id: &str) -> Result<Machine, CloudError> {
    claimed(config)?
        .into_iter()
        .find(|m| provider_id_of(m) == provider_id)
        .ok_or_else(|| {
            CloudError::NotFound(format!(
                "clusterapi: no Machine of cluster {} has provider ID {provider_id}",
                config.cluster_name
            ))
        })
}

/// Merge-patches an object, naming the `resourceVersion` it was read at (a conflict if it
/// changed since).
fn patch_at<T: serde::de::DeserializeOwned>(
    resource: &str,
    namespace: &str,
    name: &str,
    version: &str,
    mut body: serde_json::Value,
) -> Result<T, KubeError> {
    body["metadata"]["resourceVersion"] = json!(version);
    let target = capi::collection(resource).namespace(namespace.to_string());
    let text = kube::patch(&target, name, PatchKind::Merge, &body.to_string())?;
    serde_json::from_str(&text)
        .map_err(|e| KubeError::Invalid(format!("patched {resource} {namespace}/{name}: {e}")))
}

/// Changes a MachineDeployment's replicas by `delta` (floor 0), re-reading it after a conflict.
fn scale(md: &MachineDeployment, delta: i64) -> Result<i64, CloudError> {
    let (namespace, name) = (&md.metadata.namespace, &md.metadata.name);
    let mut current = md.clone();
    for attempt in 0..=CONFLICT_RETRIES {
        let replicas = (current.spec.replicas.unwrap_or(0) + delta).max(0);
        match patch_at::<MachineDeployment>(
            "machinedeployments",
            namespace,
            name,
            &current.metadata.resource_version,
            json!({"spec": {"replicas": replicas}}),
        ) {
            Ok(_) => return Ok(replicas),
            Err(KubeError::Conflict(_)) if attempt < CONFLICT_RETRIES => {
                let target = capi::collection("machinedeployments").namespace(namespace.clone());
                current = kube::get_json(&target, name).map_err(|e| {
                    kube_error(&format!("reading MachineDeployment {namespace}/{name}"), e)
                })?;
            }
            Err(e) => {
                return Err(kube_error(
                    &format!("scaling MachineDeployment {namespace}/{name}"),
                    e,
                ));
            }
        }
    }
    unreachable!("the last attempt returns")
}

/// The Machines of a MachineDeployment that nobody claimed and that stay.
fn unclaimed(config: &Config, md: &MachineDeployment) -> Result<Vec<Machine>, CloudError> {
    let selector = format!("{}={}", capi::DEPLOYMENT_LABEL, md.metadata.name);
    let mut out: Vec<Machine> = machines(config, &selector)?
        .into_iter()
        .filter(|m| {
            m.metadata.namespace == md.metadata.namespace && !m.is_claimed() && !m.is_leaving()
        })
        .collect();
    // Provisioned ones first (a node sooner), then by name.
    out.sort_by(|a, b| {
        a.provider_id()
            .is_none()
            .cmp(&b.provider_id().is_none())
            .then(a.metadata.name.cmp(&b.metadata.name))
    });
    Ok(out)
}

/// Claims one Machine for the claim; `Ok(None)` when another writer took it first.
fn claim_machine(
    machine: &Machine,
    claim: &NodeClaim,
    config: &Config,
) -> Result<Option<Machine>, CloudError> {
    let body = json!({"metadata": {
        "labels": {capi::MEMBER_LABEL: "", capi::NODECLAIM_LABEL: claim.name, CLUSTER_LABEL: config.cluster_name},
        "annotations": {capi::NODECLAIM_UID_ANNOTATION: claim.uid},
    }});
    match patch_at::<Machine>(
        "machines",
        &machine.metadata.namespace,
        &machine.metadata.name,
        &machine.metadata.resource_version,
        body,
    ) {
        Ok(m) => Ok(Some(m)),
        Err(KubeError::Conflict(_)) => Ok(None),
        Err(e) => Err(kube_error(
            &format!("claiming Machine {}", machine.key()),
            e,
        )),
    }
}

/// The Machine already claimed for this NodeClaim, if any (the resume path).
fn claimed_for(config: &Config, claim: &NodeClaim) -> Result<Option<Machine>, CloudError> {
    let selector = format!("{}={}", capi::NODECLAIM_LABEL, claim.name);
    Ok(machines(config, &selector)?.into_iter().find(|m| {
        m.metadata.deletion_timestamp.is_none()
            && m.metadata
                .annotations
                .get(capi::NODECLAIM_UID_ANNOTATION)
                .is_none_or(|uid| *uid == claim.uid)
    }))
}

/// Waits for a claimed Machine's provider ID. A Machine CAPI gave up on (`failureReason`) is
/// released (its replica returned) and fails the launch as insufficient capacity for its
/// instance type, so the host marks that offering unavailable and plans with another type —
/// as cluster-autoscaler backs off a node group whose machines fail.
fn provisioned(
    machine: Machine,
    offer: Option<&Offer>,
    config: &Config,
) -> Result<Machine, CloudError> {
    let mut current = machine;
    for _ in 0..config.polls() {
        if current.provider_id().is_some() {
            return Ok(current);
        }
        if let Some(failure) = current.failure() {
            // Give the replica back now: the host forgets a launch that failed this way.
            if let Err(e) = release(&current) {
                log::warn(format!(
                    "clusterapi: failed Machine {} not released ({}); garbage collection will",
                    current.key(),
                    e.message()
                ));
            }
            let offering = match offer {
                Some(o) => OfferingRef {
                    instance_type: o.name.clone(),
                    zone: zone_of(o, config),
                    capacity_type: "on-demand".into(),
                },
                None => OfferingRef {
                    instance_type: current.deployment().unwrap_or_default().into(),
                    zone: "*".into(),
                    capacity_type: "on-demand".into(),
                },
            };
            return Err(CloudError::insufficient_capacity(
                format!(
                    "clusterapi: Machine {} failed to provision ({failure})",
                    current.key()
                ),
                vec![offering],
            ));
        }
        joinery_plugin_sdk::pause(Duration::from_millis(config.poll_millis));
        let target = capi::collection("machines").namespace(current.metadata.namespace.clone());
        current = kube::get_json(&target, &current.metadata.name)
            .map_err(|e| kube_error(&format!("reading Machine {}", current.key()), e))?;
    }
    if current.provider_id().is_some() {
        return Ok(current);
    }
    let why = current
        .status
        .failure_message
        .clone()
        .map(|m| format!(" (CAPI: {m})"))
        .unwrap_or_default();
    Err(CloudError::retryable(
        format!(
            "clusterapi: Machine {} is claimed but has no provider ID yet{why}; the next attempt resumes with it",
            current.key()
        ),
        Some(config.poll_millis.max(1000)),
    ))
}

/// Removes exactly this Machine: marks it with `cluster.x-k8s.io/delete-machine`, then lowers
/// its MachineDeployment's replicas (conflict-safe), so CAPI deletes it and no other; the mark
/// is taken back if the scale-down fails.
fn release(machine: &Machine) -> Result<(), CloudError> {
    let Some(deployment) = machine.deployment().map(str::to_string) else {
        return Err(CloudError::invalid(format!(
            "clusterapi: Machine {} has no {} label; delete it by hand",
            machine.key(),
            capi::DEPLOYMENT_LABEL
        )));
    };
    let namespace = machine.metadata.namespace.clone();
    let marked: Machine = patch_at(
        "machines",
        &namespace,
        &machine.metadata.name,
        &machine.metadata.resource_version,
        json!({"metadata": {"annotations": {capi::DELETE_MACHINE_ANNOTATION: now_text()}}}),
    )
    .map_err(|e| {
        kube_error(
            &format!("marking Machine {} for deletion", machine.key()),
            e,
        )
    })?;
    let target = capi::collection("machinedeployments").namespace(namespace.clone());
    let md: MachineDeployment = kube::get_json(&target, &deployment).map_err(|e| {
        kube_error(
            &format!("reading MachineDeployment {namespace}/{deployment}"),
            e,
        )
    })?;
    if let Err(e) = scale(&md, -1) {
        // Unmark it, so that CAPI does not pick it at some later scale-down.
        let unmark = json!({"metadata": {"annotations": {capi::DELETE_MACHINE_ANNOTATION: null}}});
        if let Err(undo) = patch_at::<Machine>(
            "machines",
            &namespace,
            &marked.metadata.name,
            &marked.metadata.resource_version,
            unmark,
        ) {
            log::warn(format!(
                "clusterapi: could not unmark Machine {}: {}",
                marked.key(),
                undo.describe()
            ));
        }
        return Err(e);
    }
    log::info(format!(
        "clusterapi: Machine {} marked and MachineDeployment {namespace}/{deployment} lowered",
        machine.key()
    ));
    Ok(())
}

fn now_text() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format!("{secs}")
}

/// The Cluster API provider.
pub struct ClusterApi;

impl CloudProvider for ClusterApi {
    fn resolve_node_class(node_class: NodeClass) -> Result<NodeClassResolution, CloudError> {
        let config = Config::load()?;
        let spec: ClassSpec = node_class.spec_as()?;
        let all = match deployments(&config) {
            Ok(all) => all,
            Err(e) => {
                let condition = Condition::new(
                    "MachineDeploymentsReady",
                    false,
                    "ManagementClusterUnreachable",
                    format!(
                        "{} (is the management cluster configured with --management-kubeconfig and granted?)",
                        e.message()
                    ),
                );
                return Ok(NodeClassResolution {
                    conditions: vec![condition],
                    status: "{}".into(),
                });
            }
        };
        let Offers { kept, problems } = offers(&spec, &all)?;
        let mut conditions = vec![if kept.is_empty() {
            Condition::new(
                "MachineDeploymentsReady",
                false,
                "NoMachineDeployment",
                "no MachineDeployment labelled node.cluster.x-k8s.io/karpenter-member=\"\" matches scalableResourceSelector with valid capacity annotations",
            )
        } else {
            Condition::new(
                "MachineDeploymentsReady",
                true,
                "Found",
                format!("{} MachineDeployments", kept.len()),
            )
        }];
        conditions.push(if problems.is_empty() {
            Condition::new("CapacityAnnotationsValid", true, "Valid", "")
        } else {
            Condition::new(
                "CapacityAnnotationsValid",
                false,
                "InvalidAnnotations",
                problems.join("; "),
            )
        });
        let names: Vec<String> = kept
            .iter()
            .map(|o| format!("{}={}", o.name, o.deployment))
            .collect();
        Ok(NodeClassResolution {
            conditions,
            status: json!({"machineDeployments": names}).to_string(),
        })
    }

    fn get_instance_types(node_class: NodeClass) -> Result<Vec<InstanceType>, CloudError> {
        let config = Config::load()?;
        let Offers { kept, problems } = load_offers(&config, &node_class)?;
        for problem in problems {
            log::warn(format!("clusterapi: {problem}"));
        }
        Ok(kept.iter().map(|o| instance_type(o, &config)).collect())
    }

    fn create(request: CreateRequest) -> Result<Instance, CloudError> {
        let config = Config::load()?;
        let claim = &request.claim;
        let kept = load_offers(&config, &request.node_class)?.kept;
        let all: Vec<MachineDeployment> = kept.iter().map(|o| o.source.clone()).collect();
        if let Some(machine) = claimed_for(&config, claim)? {
            log::info(format!(
                "clusterapi: NodeClaim {} resumes with Machine {}",
                claim.name,
                machine.key()
            ));
            let offer = offer_of(&machine, &all);
            let machine = provisioned(machine, offer.as_ref(), &config)?;
            return Ok(to_instance(&machine, offer.as_ref(), &config));
        }
        let offer = choose(&kept, claim, &config).ok_or_else(|| {
            CloudError::insufficient_capacity(
                format!(
                    "clusterapi: no MachineDeployment fits NodeClaim {} and may grow",
                    claim.name
                ),
                Vec::new(),
            )
        })?;
        let md = &offer.source;
        let md_key = offer.deployment.clone();
        for _ in 0..=CONFLICT_RETRIES {
            let mut free = unclaimed(&config, md)?;
            if free.is_empty() {
                let replicas = scale(md, 1)?;
                log::info(format!(
                    "clusterapi: MachineDeployment {md_key} raised to {replicas} for NodeClaim {}",
                    claim.name
                ));
                for _ in 0..config.polls() {
                    joinery_plugin_sdk::pause(Duration::from_millis(config.poll_millis));
                    free = unclaimed(&config, md)?;
                    if !free.is_empty() {
                        break;
                    }
                }
            }
            if free.is_empty() {
                // The replica stays: the next attempt finds its Machine unclaimed and uses it.
                return Err(CloudError::retryable(
                    format!(
                        "clusterapi: MachineDeployment {md_key} was raised but no Machine appeared within {} s",
                        config.claim_timeout_seconds
                    ),
                    None,
                ));
            }
            for candidate in &free {
                if let Some(machine) = claim_machine(candidate, claim, &config)? {
                    log::info(format!(
                        "clusterapi: NodeClaim {} claimed Machine {}",
                        claim.name,
                        machine.key()
                    ));
                    let machine = provisioned(machine, Some(offer), &config)?;
                    return Ok(to_instance(&machine, Some(offer), &config));
                }
            }
        }
        Err(CloudError::retryable(
            format!(
                "clusterapi: every unclaimed Machine of {md_key} changed while claiming; retry"
            ),
            None,
        ))
    }

    fn get(provider_id: String) -> Result<Instance, CloudError> {
        let config = Config::load()?;
        let machine = find(&config, &provider_id)?;
        if machine.metadata.deletion_timestamp.is_some() {
            return Err(CloudError::NotFound(format!(
                "clusterapi: Machine {} is being deleted",
                machine.key()
            )));
        }
        let all = deployments(&config)?;
        Ok(to_instance(
            &machine,
            offer_of(&machine, &all).as_ref(),
            &config,
        ))
    }

    fn list() -> Result<Vec<Instance>, CloudError> {
        let config = Config::load()?;
        let all = deployments(&config)?;
        Ok(claimed(&config)?
            .iter()
            .filter(|m| m.metadata.deletion_timestamp.is_none())
            .map(|m| to_instance(m, offer_of(m, &all).as_ref(), &config))
            .collect())
    }

    fn delete(provider_id: String) -> Result<(), CloudError> {
        let config = Config::load()?;
        let machine = find(&config, &provider_id)?;
        if machine.is_leaving() {
            // CAPI is removing exactly this Machine: gone as far as the host is concerned.
            return Err(CloudError::NotFound(format!(
                "clusterapi: Machine {} is being deleted",
                machine.key()
            )));
        }
        release(&machine)
    }

    fn is_drifted(claim: NodeClaim, node_class: NodeClass) -> Result<Option<String>, CloudError> {
        let config = Config::load()?;
        let Some(provider_id) = claim.provider_id.as_deref() else {
            return Ok(None);
        };
        let machine = match find(&config, provider_id) {
            Ok(m) => m,
            Err(CloudError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let kept = load_offers(&config, &node_class)?.kept;
        let selected = kept.iter().map(|o| &o.source).any(|md| {
            md.metadata.namespace == machine.metadata.namespace
                && Some(md.metadata.name.as_str()) == machine.deployment()
        });
        Ok((!selected).then(|| DEPLOYMENT_DRIFTED.to_string()))
    }
}

joinery_plugin_sdk::export_cloud_provider!(ClusterApi);
