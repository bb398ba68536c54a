//! The Cluster API objects the plugin reads and writes (`cluster.x-k8s.io/v1beta1`), and how
//! a MachineDeployment becomes an instance type: the labels CAPI propagates, the
//! cluster-autoscaler capacity annotations, the price and maximum-size annotations.

use std::collections::BTreeMap;

use joinery_plugin_sdk::kube::ResourceRef;
use joinery_plugin_sdk::quantity::parse_milli;
use serde::Deserialize;

/// API group of Cluster API.
pub const GROUP: &str = "cluster.x-k8s.io";
/// API version used.
pub const VERSION: &str = "v1beta1";
/// The management cluster's name in grants.
pub const MANAGEMENT: &str = "management";
/// The label that makes a MachineDeployment usable by Karpenter (value must be empty), and
/// that marks a Machine as claimed by a NodeClaim.
pub const MEMBER_LABEL: &str = "node.cluster.x-k8s.io/karpenter-member";
/// The Machine label naming its MachineDeployment.
pub const DEPLOYMENT_LABEL: &str = "cluster.x-k8s.io/deployment-name";
/// The Machine annotation that makes CAPI delete exactly this Machine on scale-down.
pub const DELETE_MACHINE_ANNOTATION: &str = "cluster.x-k8s.io/delete-machine";
/// The label naming the NodeClaim a claimed Machine belongs to (the resume key).
pub const NODECLAIM_LABEL: &str = "joinery.dev/nodeclaim";
/// The annotation holding the UID of that NodeClaim.
pub const NODECLAIM_UID_ANNOTATION: &str = "joinery.dev/nodeclaim-uid";
/// Prefix of the cluster-autoscaler capacity annotations.
pub const CAPACITY_PREFIX: &str = "capacity.cluster-autoscaler.kubernetes.io/";
/// A MachineDeployment's hourly price (the annotation proposed upstream).
pub const PRICE_ANNOTATION: &str = "cluster.x-k8s.io/machine-current-price";
/// A MachineDeployment's largest replica count.
pub const MAX_SIZE_ANNOTATION: &str = "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size";
/// The instance-type label.
pub const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";
/// The zone label.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// A collection in the management cluster, across namespaces.
pub fn collection(resource: &str) -> ResourceRef {
    ResourceRef::new(GROUP, VERSION, resource).in_cluster(MANAGEMENT)
}

/// Object metadata fields read.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct Metadata {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// The version a conflict-safe write names.
    pub resource_version: String,
    /// Creation time.
    pub creation_timestamp: Option<String>,
    /// Set while the object is being deleted.
    pub deletion_timestamp: Option<String>,
}

/// A MachineDeployment.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct MachineDeployment {
    /// Metadata.
    pub metadata: Metadata,
    /// Spec.
    pub spec: DeploymentSpec,
}

/// The MachineDeployment spec fields read.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct DeploymentSpec {
    /// Wanted Machines.
    pub replicas: Option<i64>,
    /// The Machine template.
    pub template: Template,
}

/// A Machine template.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Template {
    /// Its metadata (labels propagate to the Nodes).
    pub metadata: TemplateMetadata,
}

/// A template's metadata.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct TemplateMetadata {
    /// Labels.
    pub labels: BTreeMap<String, String>,
}

/// A Machine.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Machine {
    /// Metadata.
    pub metadata: Metadata,
    /// Spec.
    pub spec: MachineSpec,
    /// Status.
    pub status: MachineStatus,
}

/// The Machine spec fields read.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct MachineSpec {
    /// Set by the infrastructure provider once the machine exists.
    #[serde(rename = "providerID")]
    pub provider_id: Option<String>,
}

/// The Machine status fields read.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct MachineStatus {
    /// `Pending`, `Provisioning`, `Provisioned`, `Running`, `Deleting`, `Failed`…
    pub phase: Option<String>,
    /// Why provisioning failed, if it did (short form).
    pub failure_reason: Option<String>,
    /// Why provisioning failed, if it did.
    pub failure_message: Option<String>,
}

impl Machine {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.metadata.namespace, self.metadata.name)
    }

    /// The provider ID, when set.
    pub fn provider_id(&self) -> Option<&str> {
        self.spec.provider_id.as_deref().filter(|p| !p.is_empty())
    }

    /// Its MachineDeployment's name.
    pub fn deployment(&self) -> Option<&str> {
        self.metadata
            .labels
            .get(DEPLOYMENT_LABEL)
            .map(String::as_str)
    }

    /// Whether it is being deleted or marked for deletion.
    pub fn is_leaving(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
            || self
                .metadata
                .annotations
                .contains_key(DELETE_MACHINE_ANNOTATION)
    }

    /// CAPI's verdict that the machine cannot be provisioned (`failureReason`/`failureMessage`
    /// set, or phase `Failed`), as `reason: message`.
    pub fn failure(&self) -> Option<String> {
        let status = &self.status;
        if status.failure_reason.is_none()
            && status.failure_message.is_none()
            && status.phase.as_deref() != Some("Failed")
        {
            return None;
        }
        let reason = status
            .failure_reason
            .clone()
            .unwrap_or_else(|| "Failed".into());
        Some(match &status.failure_message {
            Some(message) => format!("{reason}: {message}"),
            None => reason,
        })
    }

    /// Whether a NodeClaim has it.
    pub fn is_claimed(&self) -> bool {
        self.metadata.labels.contains_key(MEMBER_LABEL)
    }
}

/// Whether CAPI propagates a template label to the Node: keys under `node-role.kubernetes.io`,
/// and under `node-restriction.kubernetes.io` or `node.cluster.x-k8s.io` and their subdomains.
pub fn is_propagated(key: &str) -> bool {
    let Some((domain, _)) = key.split_once('/') else {
        return false;
    };
    let under = |root: &str| domain == root || domain.ends_with(&format!(".{root}"));
    domain == "node-role.kubernetes.io"
        || under("node-restriction.kubernetes.io")
        || under("node.cluster.x-k8s.io")
}

/// What a MachineDeployment offers, read from its labels and annotations.
#[derive(Clone, Debug, PartialEq)]
pub struct Offer {
    /// The MachineDeployment, as read.
    pub source: MachineDeployment,
    /// `namespace/name` of the MachineDeployment.
    pub deployment: String,
    /// The instance type's name: the `node.kubernetes.io/instance-type` label, else the
    /// MachineDeployment's name.
    pub name: String,
    /// Node labels (propagated template labels, overridden by the capacity annotation's).
    pub labels: BTreeMap<String, String>,
    /// Capacity as (resource, quantity).
    pub capacity: Vec<(String, String)>,
    /// Allocatable, thousandths of a unit, by resource (no overhead is known: capacity).
    pub allocatable: BTreeMap<String, u64>,
    /// Hourly price from the annotation, if any.
    pub price: Option<f64>,
    /// Whether another Machine may be added (replicas below the maximum size).
    pub available: bool,
}

/// Reads a MachineDeployment; the error names the annotation to fix.
pub fn offer(md: &MachineDeployment) -> Result<Offer, String> {
    let annotations = &md.metadata.annotations;
    let capacity_annotation = |key: &str| {
        annotations
            .get(&format!("{CAPACITY_PREFIX}{key}"))
            .map(|v| v.trim())
    };
    let mut labels: BTreeMap<String, String> = md
        .spec
        .template
        .metadata
        .labels
        .iter()
        .filter(|(k, _)| is_propagated(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if let Some(list) = capacity_annotation("labels").filter(|l| !l.is_empty()) {
        for pair in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| format!("{CAPACITY_PREFIX}labels: {pair:?} is not key=value"))?;
            labels.insert(k.trim().to_string(), v.trim().to_string());
        }
    }
    let mut capacity = Vec::new();
    let mut allocatable = BTreeMap::new();
    let mut quantity = |annotation: &str, resource: &str, required: bool| -> Result<(), String> {
        match capacity_annotation(annotation) {
            Some(value) => {
                let milli = parse_milli(value).ok_or_else(|| {
                    format!("{CAPACITY_PREFIX}{annotation}: {value:?} is not a quantity")
                })?;
                capacity.push((resource.to_string(), value.to_string()));
                allocatable.insert(resource.to_string(), milli);
                Ok(())
            }
            None if required => Err(format!(
                "{CAPACITY_PREFIX}{annotation} is missing (cpu and memory are required to scale from zero)"
            )),
            None => Ok(()),
        }
    };
    quantity("cpu", "cpu", true)?;
    quantity("memory", "memory", true)?;
    quantity("ephemeral-disk", "ephemeral-storage", false)?;
    let pods = match capacity_annotation("maxPods") {
        Some(v) => v
            .parse::<u64>()
            .map_err(|_| format!("{CAPACITY_PREFIX}maxPods: {v:?} is not a whole number"))?,
        None => 110,
    };
    capacity.push(("pods".into(), pods.to_string()));
    allocatable.insert("pods".into(), pods * 1000);
    match (
        capacity_annotation("gpu-count"),
        capacity_annotation("gpu-type"),
    ) {
        (None, _) => {}
        (Some(count), Some(kind)) if !kind.is_empty() => {
            let n = count.parse::<u64>().map_err(|_| {
                format!("{CAPACITY_PREFIX}gpu-count: {count:?} is not a whole number")
            })?;
            capacity.push((kind.to_string(), n.to_string()));
            allocatable.insert(kind.to_string(), n * 1000);
        }
        (Some(_), _) => {
            return Err(format!(
                "{CAPACITY_PREFIX}gpu-count needs {CAPACITY_PREFIX}gpu-type (the resource name, e.g. nvidia.com/gpu)"
            ));
        }
    }
    let price = match annotations.get(PRICE_ANNOTATION).map(|v| v.trim()) {
        None => None,
        Some(v) => Some(
            v.parse::<f64>()
                .ok()
                .filter(|p| p.is_finite() && *p >= 0.0)
                .ok_or_else(|| format!("{PRICE_ANNOTATION}: {v:?} is not a price"))?,
        ),
    };
    // Unparsable or absent maximum: no limit (as upstream).
    let max = annotations
        .get(MAX_SIZE_ANNOTATION)
        .and_then(|v| v.trim().parse::<i64>().ok());
    let available = max.is_none_or(|m| md.spec.replicas.unwrap_or(0) < m);
    let name = labels
        .get(INSTANCE_TYPE_LABEL)
        .cloned()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| md.metadata.name.clone());
    Ok(Offer {
        source: md.clone(),
        deployment: format!("{}/{}", md.metadata.namespace, md.metadata.name),
        name,
        labels,
        capacity,
        allocatable,
        price,
        available,
    })
}

/// A Kubernetes label selector (`matchLabels`, `matchExpressions`), as a NodeClass spells it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct LabelSelector {
    /// Exact matches.
    pub match_labels: BTreeMap<String, String>,
    /// Expressions.
    pub match_expressions: Vec<SelectorRequirement>,
}

/// One selector expression.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SelectorRequirement {
    /// Label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// Values (`In`, `NotIn`).
    pub values: Vec<String>,
}

impl LabelSelector {
    /// Whether `labels` match, with Kubernetes semantics (an empty selector matches all).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> Result<bool, String> {
        if !self
            .match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
        {
            return Ok(false);
        }
        for e in &self.match_expressions {
            let value = labels.get(&e.key);
            let ok = match e.operator.as_str() {
                "In" => value.is_some_and(|v| e.values.contains(v)),
                "NotIn" => !value.is_some_and(|v| e.values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                other => {
                    return Err(format!(
                        "matchExpressions: operator {other:?} is not In, NotIn, Exists or DoesNotExist"
                    ));
                }
            };
            if !ok {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The server-side selector string for `matchLabels` and the member label (the
    /// expressions are checked client-side by [`LabelSelector::matches`]).
    pub fn server_side(&self) -> String {
        let mut parts = vec![format!("{MEMBER_LABEL}=")];
        parts.extend(self.match_labels.iter().map(|(k, v)| format!("{k}={v}")));
        parts.join(",")
    }
}

/// Whether a MachineDeployment is usable: the member label with an empty value, and the
/// NodeClass's selector.
pub fn selected(md: &MachineDeployment, selector: &LabelSelector) -> Result<bool, String> {
    if md.metadata.labels.get(MEMBER_LABEL).map(String::as_str) != Some("") {
        return Ok(false);
    }
    selector.matches(&md.metadata.labels)
}
