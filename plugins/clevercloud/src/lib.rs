//! # clevercloud — Clever Cloud Kubernetes Engine (CKE) as a Joinery cloud
//!
//! CKE has no machine API: a cluster grows through `NodeGroup` custom resources
//! (`nodegroups.api.clever-cloud.com`) served by the cluster itself. This plugin launches one
//! NodeGroup per NodeClaim, named like the claim, with `nodeCount: 1`, through the host's
//! Kubernetes import — no HTTP, no secret.
//!
//! - **create**: picks the cheapest catalog flavor the claim allows and fits, creates the
//!   NodeGroup (node labels filtered for CKE, the registration taint, managed labels, the
//!   NodeClass hash, an owner reference to the NodeClaim), then follows CKE's answer for up to
//!   `acceptanceTimeoutSeconds`: `Synced` → launched; a quota refusal → the group is deleted,
//!   a `NodeGroupQuotaExceeded` event goes on the NodeClaim, a fail-fast backoff is armed for
//!   that flavor and every larger one, and the launch fails as insufficient capacity for them
//!   (so the host re-plans at once, with smaller flavors if they fit); a group that
//!   vanishes meanwhile → `NodeGroupVanished`, backoff, insufficient capacity; no verdict in
//!   time → `NodeGroupAcceptanceTimeout` and the launch is assumed to proceed (the
//!   registration timeout is the backstop). The host runs creates one at a time
//!   (`limits.maxConcurrentCreates: 1`): bursts of refused creations leak CKE reservations.
//! - **get / list**: only groups labelled managed for this cluster; a terminating group is
//!   reported not-found, so Karpenter releases the Node's finalizer while CKE's own finalizer
//!   removes the Node.
//! - **delete**: deletes a managed group; an unknown, unmanaged or already terminating group
//!   is not-found (the host's contract: not-found once the instance is gone); any real
//!   deletion clears the quota backoff.
//! - **drift**: `NodeClassDrifted` when the group's hash annotation differs from the current
//!   CleverNodeClass spec's.
//! - CKE leaves `spec.providerID` empty: the manifest's `providerIDFromNodeLabel` has the host
//!   write `clevercloud://<nodegroup>` onto the Node CKE labels with that NodeGroup.
//!
//! Configuration (JSON; every field optional except `clusterName`):
//!
//! | field | default | meaning |
//! |---|---|---|
//! | `clusterName` | — | the cluster tag on managed groups (`joinery.dev/cluster`) |
//! | `zone` | `par` | the zone (and region) of every offering |
//! | `acceptanceTimeoutSeconds` | `15` | how long a create follows CKE's answer |
//! | `acceptancePollMillis` | `1000` | how often it reads the group meanwhile |
//! | `quotaBackoffSeconds` | `60` | how long creates fail fast after a quota refusal |
//! | `eventNamespace` | `default` | where events about (cluster-scoped) NodeClaims go |
//! | `flavors` | `[]` | overlay: `{name, cpu?, memoryKi?, priceHourly?}`; a new flavor needs all three |

pub mod flavors;
pub mod nodegroup;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use joinery_plugin_sdk::cloud::{
    CLUSTER_LABEL, CloudError, CloudProvider, Condition, CreateRequest, Instance, InstanceState,
    InstanceType, KeyValue, NodeClaim, NodeClass, NodeClassResolution, OfferingRef, RepairPolicy,
    repair_policy,
};
use joinery_plugin_sdk::kube::{self, KubeError, ResourceRef};
use joinery_plugin_sdk::quantity::parse_milli;
use joinery_plugin_sdk::{cache, log};
use serde::Deserialize;
use serde_json::json;

use flavors::{Flavor, FlavorOverlay, ON_DEMAND};
use nodegroup::{Acceptance, Desired, NodeGroup};

/// Scheme of this cloud's provider IDs.
pub const PROVIDER_ID_PREFIX: &str = "clevercloud://";
/// Cache key of the fail-fast quota backoff (a [`Backoff`] as JSON).
const BACKOFF_KEY: &str = "quota-backoff";
/// Drift reason when the NodeClass changed since launch.
pub const NODECLASS_DRIFTED: &str = "NodeClassDrifted";

/// The plugin's configuration.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct Config {
    /// The cluster tag on managed groups.
    pub cluster_name: String,
    /// Zone of every offering.
    pub zone: String,
    /// How long a create follows CKE's answer, in seconds.
    pub acceptance_timeout_seconds: u64,
    /// How often a create reads the group meanwhile, in milliseconds.
    pub acceptance_poll_millis: u64,
    /// How long creates fail fast after a quota refusal, in seconds.
    pub quota_backoff_seconds: u32,
    /// Namespace of the events about NodeClaims.
    pub event_namespace: String,
    /// Flavor overlay.
    pub flavors: Vec<FlavorOverlay>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            cluster_name: String::new(),
            zone: "par".into(),
            acceptance_timeout_seconds: 15,
            acceptance_poll_millis: 1000,
            quota_backoff_seconds: 60,
            event_namespace: "default".into(),
            flavors: Vec::new(),
        }
    }
}

impl Config {
    /// The configuration, checked; errors say which field to fix.
    pub fn load() -> Result<Config, CloudError> {
        let config: Config = joinery_plugin_sdk::config()
            .map_err(|e| CloudError::invalid(format!("clevercloud configuration: {e}")))?;
        if config.cluster_name.is_empty() {
            return Err(CloudError::invalid(
                "clevercloud configuration: clusterName is required (the tag of this cluster's NodeGroups)",
            ));
        }
        if config.acceptance_poll_millis == 0 {
            return Err(CloudError::invalid(
                "clevercloud configuration: acceptancePollMillis must be positive",
            ));
        }
        Ok(config)
    }

    /// The flavor catalog with the overlay.
    pub fn catalog(&self) -> Result<Vec<Flavor>, CloudError> {
        flavors::catalog(&self.flavors)
            .map_err(|e| CloudError::invalid(format!("clevercloud configuration: {e}")))
    }
}

/// The CleverNodeClass spec.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct ClassSpec {
    /// Labels every node of the class carries (on top of the NodePool's).
    pub labels: BTreeMap<String, String>,
}

/// The NodeGroup name in a provider ID.
pub fn group_name(provider_id: &str) -> Result<&str, CloudError> {
    provider_id
        .strip_prefix(PROVIDER_ID_PREFIX)
        .filter(|n| {
            !n.is_empty()
                && n.len() <= 253
                && n.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        })
        .ok_or_else(|| {
            CloudError::invalid(format!(
                "clevercloud: {provider_id:?} is not a clevercloud://<nodegroup> provider ID"
            ))
        })
}

/// A failed Kubernetes call, classified as the SDK does for every cloud plugin, with what
/// was being done in front of the message.
fn kube_error(what: &str, e: impl Into<kube::Error>) -> CloudError {
    CloudError::from(e.into()).context(&format!("clevercloud: {what}"))
}

/// Reads one NodeGroup; `Ok(None)` when it does not exist.
fn read_group(name: &str) -> Result<Option<NodeGroup>, CloudError> {
    match kube::get_json::<NodeGroup>(&nodegroup::collection(), name) {
        Ok(group) => Ok(Some(group)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(kube_error(&format!("reading NodeGroup {name}"), e)),
    }
}

/// The flavor for a claim: the cheapest (smallest) catalog flavor whose labels satisfy the
/// claim's requirements on those labels and whose allocatable holds the claim's requests.
pub fn choose_flavor<'a>(
    catalog: &'a [Flavor],
    claim: &NodeClaim,
    zone: &str,
) -> Option<&'a Flavor> {
    let price = |f: &Flavor| f.price_hourly.unwrap_or_else(|| seed_price(f));
    let mut fitting: Vec<&Flavor> = catalog
        .iter()
        // Only the keys a flavor describes: the claim's other requirements (its NodePool,
        // template labels…) are about the node, not the flavor.
        .filter(|f| {
            f.labels(zone)
                .iter()
                .all(|(key, value)| claim.allows(key, value))
        })
        .filter(|f| {
            claim.resource_requests.iter().all(|r| {
                match (parse_milli(&r.quantity), f.allocatable_milli(&r.name)) {
                    (Some(0), _) => true,
                    (Some(wanted), Some(have)) => wanted <= have,
                    _ => false,
                }
            })
        })
        .collect();
    fitting.sort_by(|a, b| price(a).total_cmp(&price(b)).then(a.cpu.cmp(&b.cpu)));
    fitting.first().copied()
}

/// The list price CKE charges for a flavor, by its formula (vCPU and nominal GB rates),
/// used only to order flavors when the operator pinned no price.
fn seed_price(f: &Flavor) -> f64 {
    let nominal_gb = (f.memory_ki as f64 * 1024.0 / 1e9).round();
    f.cpu as f64 * 0.002_777_777_77 + nominal_gb * 0.005_555_555_55
}

/// Node labels for the group: the NodeClass's, then the claim's, without what CKE refuses.
pub fn node_labels(class: &ClassSpec, claim: &NodeClaim) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let all = class
        .labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .chain(
            claim
                .labels
                .iter()
                .map(|kv| (kv.key.as_str(), kv.value.as_str())),
        );
    for (key, value) in all {
        match nodegroup::label_problem(key, value) {
            None => {
                labels.insert(key.to_string(), value.to_string());
            }
            Some(problem) if !key.contains("kubernetes.io/") => {
                log::warn(format!(
                    "clevercloud: label {key}={value:?} left off the NodeGroup ({problem}); Karpenter still sets it on the Node"
                ));
            }
            Some(_) => {}
        }
    }
    labels
}

fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// Puts a Warning event on the NodeClaim (best effort: a refused event is only logged).
fn claim_event(config: &Config, claim: &NodeClaim, reason: &str, message: &str) {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let now = now_rfc3339();
    let event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": format!("{}.{nanos:x}", claim.name), "namespace": config.event_namespace},
        "involvedObject": {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": claim.name, "uid": claim.uid},
        "reason": reason,
        "message": message,
        "type": "Warning",
        "source": {"component": "joinery-clevercloud"},
        "reportingComponent": "joinery-clevercloud",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    });
    let events = ResourceRef::core("events").namespace(config.event_namespace.clone());
    if let Err(e) = kube::create(&events, &event.to_string()) {
        log::warn(format!(
            "clevercloud: could not record event {reason} on NodeClaim {}: {}",
            claim.name,
            e.describe()
        ));
    }
}

/// The fail-fast backoff after a quota refusal. The organisation's quota counts vCPUs and
/// memory, so a flavor at least as large in both as the refused one cannot fit either: those
/// fail fast (and are reported unavailable), while a smaller flavor may still be tried.
#[derive(Clone, Debug, PartialEq, serde::Serialize, Deserialize)]
struct Backoff {
    /// CKE's message.
    message: String,
    /// vCPUs of the refused flavor.
    cpu: u64,
    /// Memory of the refused flavor, KiB.
    memory_ki: u64,
}

impl Backoff {
    /// Stores the backoff for `quotaBackoffSeconds`.
    fn arm(config: &Config, refused: &Flavor, message: &str) -> Backoff {
        let backoff = Backoff {
            message: message.to_string(),
            cpu: refused.cpu,
            memory_ki: refused.memory_ki,
        };
        cache::set_json(BACKOFF_KEY, &backoff, config.quota_backoff_seconds);
        backoff
    }

    /// Whether `flavor` is at least as large as the refused one.
    fn covers(&self, flavor: &Flavor) -> bool {
        flavor.cpu >= self.cpu && flavor.memory_ki >= self.memory_ki
    }

    /// The offerings the refusal rules out: the refused flavor and every larger one.
    fn offerings(&self, catalog: &[Flavor], zone: &str) -> Vec<OfferingRef> {
        catalog
            .iter()
            .filter(|f| self.covers(f))
            .map(|f| OfferingRef {
                instance_type: f.name.clone(),
                zone: zone.to_string(),
                capacity_type: ON_DEMAND.into(),
            })
            .collect()
    }
}

/// The host's view of a NodeGroup.
pub fn to_instance(group: &NodeGroup, catalog: &[Flavor], zone: &str) -> Instance {
    let flavor = catalog.iter().find(|f| f.name == group.spec.flavor);
    let mut labels: Vec<KeyValue> = match flavor {
        Some(f) => f
            .labels(zone)
            .into_iter()
            .filter(|(k, _)| k != flavors::INSTANCE_TYPE_LABEL)
            .map(|(k, v)| KeyValue::new(k, v))
            .collect(),
        None => Vec::new(),
    };
    if let Some(cluster) = group.metadata.labels.get(CLUSTER_LABEL) {
        labels.push(KeyValue::new(CLUSTER_LABEL, cluster.clone()));
    }
    Instance {
        provider_id: format!("{PROVIDER_ID_PREFIX}{}", group.metadata.name),
        instance_type: group.spec.flavor.clone(),
        zone: zone.to_string(),
        capacity_type: ON_DEMAND.into(),
        image_id: None,
        labels,
        capacity: flavor.map(Flavor::capacity).unwrap_or_default(),
        allocatable: Vec::new(),
        state: if group.is_terminating() {
            InstanceState::Terminating
        } else if group.is_ready() {
            InstanceState::Running
        } else {
            InstanceState::Pending
        },
        node_claim: group
            .metadata
            .labels
            .get(nodegroup::NODECLAIM_LABEL)
            .cloned(),
        created_at: group.metadata.creation_timestamp.clone(),
    }
}

/// Reads a group this plugin manages for this cluster; unknown, unmanaged and terminating
/// groups are not-found (the last so Karpenter lets go of the Node while CKE removes it).
fn managed_group(config: &Config, provider_id: &str) -> Result<NodeGroup, CloudError> {
    let name = group_name(provider_id)?;
    match read_group(name)? {
        Some(group) if group.is_managed_by(&config.cluster_name) && !group.is_terminating() => {
            Ok(group)
        }
        Some(group) if group.is_terminating() => Err(CloudError::NotFound(format!(
            "clevercloud: NodeGroup {name} is being deleted"
        ))),
        Some(_) => Err(CloudError::NotFound(format!(
            "clevercloud: NodeGroup {name} is not managed by Joinery for cluster {}",
            config.cluster_name
        ))),
        None => Err(CloudError::NotFound(format!(
            "clevercloud: NodeGroup {name} not found"
        ))),
    }
}

/// How a create's wait for CKE's verdict ended.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Synced.
    Accepted(NodeGroup),
    /// Refused for quota, with CKE's message.
    QuotaExceeded(String),
    /// Seen, then gone before a verdict (the platform reclaimed it).
    Vanished,
    /// No verdict within the acceptance timeout.
    TimedOut(NodeGroup),
}

/// Follows a new group until CKE decides, for at most the acceptance timeout.
pub fn await_verdict(
    config: &Config,
    name: &str,
    created: NodeGroup,
) -> Result<Verdict, CloudError> {
    let poll = Duration::from_millis(config.acceptance_poll_millis);
    let polls = (config.acceptance_timeout_seconds * 1000)
        .div_ceil(config.acceptance_poll_millis)
        .max(1);
    let mut last = created;
    for _ in 0..polls {
        match last.acceptance() {
            Acceptance::Accepted => return Ok(Verdict::Accepted(last)),
            Acceptance::QuotaExceeded(message) => return Ok(Verdict::QuotaExceeded(message)),
            Acceptance::Pending => {}
        }
        joinery_plugin_sdk::pause(poll);
        match read_group(name)? {
            Some(group) if !group.is_terminating() => last = group,
            _ => return Ok(Verdict::Vanished),
        }
    }
    match last.acceptance() {
        Acceptance::Accepted => Ok(Verdict::Accepted(last)),
        Acceptance::QuotaExceeded(message) => Ok(Verdict::QuotaExceeded(message)),
        Acceptance::Pending => Ok(Verdict::TimedOut(last)),
    }
}

/// The Clever Cloud provider.
pub struct Clever;

impl CloudProvider for Clever {
    fn resolve_node_class(node_class: NodeClass) -> Result<NodeClassResolution, CloudError> {
        let config = Config::load()?;
        let spec: ClassSpec = node_class.spec_as()?;
        let mut conditions = Vec::new();
        let refused: Vec<String> = spec
            .labels
            .iter()
            .filter_map(|(k, v)| nodegroup::label_problem(k, v).map(|p| format!("{k}: {p}")))
            .collect();
        conditions.push(if refused.is_empty() {
            Condition::new(
                "LabelsValid",
                true,
                "Valid",
                "every label can go on a NodeGroup",
            )
        } else {
            Condition::new(
                "LabelsValid",
                false,
                "LabelRefused",
                format!("CKE refuses these labels: {}", refused.join("; ")),
            )
        });
        // Probes that CKE serves NodeGroups (and that the plugin may list them).
        let probe = format!("{}={}", nodegroup::NODECLAIM_LABEL, "probe.joinery.dev");
        conditions.push(match kube::list(&nodegroup::collection(), Some(&probe)) {
            Ok(_) => Condition::new("NodeGroupsServed", true, "Served", "nodegroups.api.clever-cloud.com is served"),
            Err(e) => Condition::new(
                "NodeGroupsServed",
                false,
                "NodeGroupsUnavailable",
                format!("cannot list nodegroups.api.clever-cloud.com ({}); is this a CKE cluster, and is the plugin granted nodegroups?", e.describe()),
            ),
        });
        let _ = config.catalog()?;
        Ok(NodeClassResolution {
            conditions,
            status: json!({"zone": config.zone}).to_string(),
        })
    }

    fn get_instance_types(node_class: NodeClass) -> Result<Vec<InstanceType>, CloudError> {
        let config = Config::load()?;
        let _: ClassSpec = node_class.spec_as()?;
        Ok(config
            .catalog()?
            .iter()
            .map(|f| f.instance_type(&config.zone))
            .collect())
    }

    fn create(request: CreateRequest) -> Result<Instance, CloudError> {
        let config = Config::load()?;
        let catalog = config.catalog()?;
        let claim = &request.claim;
        let spec: ClassSpec = request.node_class.spec_as()?;
        let flavor = choose_flavor(&catalog, claim, &config.zone).ok_or_else(|| {
            CloudError::insufficient_capacity(
                format!(
                    "clevercloud: no flavor fits NodeClaim {}'s requirements and requests",
                    claim.name
                ),
                Vec::new(),
            )
        })?;
        if let Some(backoff) = cache::get_json::<Backoff>(BACKOFF_KEY).filter(|b| b.covers(flavor))
        {
            // Fail fast without another event: the refusal was reported when it happened.
            return Err(CloudError::insufficient_capacity(
                format!(
                    "clevercloud: {} not tried during the quota backoff after a recent refusal: {}",
                    flavor.name, backoff.message
                ),
                backoff.offerings(&catalog, &config.zone),
            ));
        }
        let desired = Desired {
            name: &claim.name,
            claim_uid: &claim.uid,
            node_pool: &claim.node_pool,
            node_class: &request.node_class.name,
            class_hash: nodegroup::spec_hash(&request.node_class.spec),
            cluster: &config.cluster_name,
            flavor: &flavor.name,
            labels: node_labels(&spec, claim),
        };
        let collection = nodegroup::collection();
        let created: NodeGroup = match kube::create(&collection, &desired.object().to_string()) {
            Ok(body) => serde_json::from_str(&body).map_err(|e| {
                CloudError::internal(format!("clevercloud: created NodeGroup: {e}"))
            })?,
            Err(KubeError::Conflict(_)) => match read_group(&claim.name)? {
                // A retried create: the group is this claim's.
                Some(group)
                    if group.is_managed_by(&config.cluster_name)
                        && group.is_owned_by_claim(&claim.uid) =>
                {
                    group
                }
                Some(_) => {
                    return Err(CloudError::invalid(format!(
                        "clevercloud: a NodeGroup named {} exists and is not this NodeClaim's; delete or rename it",
                        claim.name
                    )));
                }
                None => {
                    return Err(CloudError::retryable(
                        format!(
                            "clevercloud: NodeGroup {} was being replaced; retry",
                            claim.name
                        ),
                        None,
                    ));
                }
            },
            Err(e) => return Err(kube_error(&format!("creating NodeGroup {}", claim.name), e)),
        };
        match await_verdict(&config, &claim.name, created)? {
            Verdict::Accepted(group) => Ok(to_instance(&group, &catalog, &config.zone)),
            Verdict::QuotaExceeded(message) => {
                if let Err(e) = kube::delete(&collection, &claim.name)
                    && !matches!(e, KubeError::NotFound(_))
                {
                    log::warn(format!(
                        "clevercloud: refused NodeGroup {} could not be deleted: {}",
                        claim.name,
                        e.describe()
                    ));
                }
                let backoff = Backoff::arm(&config, flavor, &message);
                claim_event(&config, claim, "NodeGroupQuotaExceeded", &message);
                Err(CloudError::insufficient_capacity(
                    format!("clevercloud: NodeGroup {} refused: {message}", claim.name),
                    backoff.offerings(&catalog, &config.zone),
                ))
            }
            Verdict::Vanished => {
                let message = format!(
                    "NodeGroup {} disappeared before CKE accepted it (reclaimed near the quota limit)",
                    claim.name
                );
                let backoff = Backoff::arm(&config, flavor, &message);
                claim_event(&config, claim, "NodeGroupVanished", &message);
                Err(CloudError::insufficient_capacity(
                    format!("clevercloud: {message}"),
                    backoff.offerings(&catalog, &config.zone),
                ))
            }
            Verdict::TimedOut(group) => {
                let message = format!(
                    "CKE did not accept NodeGroup {} within {} s; assuming it proceeds (the registration timeout applies)",
                    claim.name, config.acceptance_timeout_seconds
                );
                claim_event(&config, claim, "NodeGroupAcceptanceTimeout", &message);
                log::info(format!("clevercloud: {message}"));
                Ok(to_instance(&group, &catalog, &config.zone))
            }
        }
    }

    fn get(provider_id: String) -> Result<Instance, CloudError> {
        let config = Config::load()?;
        let group = managed_group(&config, &provider_id)?;
        Ok(to_instance(&group, &config.catalog()?, &config.zone))
    }

    fn list() -> Result<Vec<Instance>, CloudError> {
        let config = Config::load()?;
        let catalog = config.catalog()?;
        let selector = format!(
            "{}=true,{}={}",
            nodegroup::MANAGED_LABEL,
            CLUSTER_LABEL,
            config.cluster_name
        );
        let groups: Vec<NodeGroup> = kube::list_items(&nodegroup::collection(), Some(&selector))
            .map_err(|e| kube_error("listing NodeGroups", e))?;
        let mut out = Vec::new();
        for group in groups
            .iter()
            .filter(|g| g.is_managed_by(&config.cluster_name) && !g.is_terminating())
        {
            if group.spec.node_count != 1 {
                log::warn(format!(
                    "clevercloud: managed NodeGroup {} has nodeCount {} (resized outside Joinery); left as is",
                    group.metadata.name, group.spec.node_count
                ));
            }
            out.push(to_instance(group, &catalog, &config.zone));
        }
        Ok(out)
    }

    /// Clever Cloud's provider policy: `Ready` `False` or `Unknown` for 10 minutes. CKE
    /// cannot reboot a node through its NodeGroups, so repair replaces.
    fn repair_policies() -> Result<Option<Vec<RepairPolicy>>, CloudError> {
        let ten_minutes = Duration::from_secs(600);
        Ok(Some(vec![
            repair_policy("Ready", "False", ten_minutes),
            repair_policy("Ready", "Unknown", ten_minutes),
        ]))
    }

    fn delete(provider_id: String) -> Result<(), CloudError> {
        let config = Config::load()?;
        let name = group_name(&provider_id)?;
        let group = match read_group(name)? {
            Some(group) if group.is_managed_by(&config.cluster_name) => group,
            Some(_) => {
                return Err(CloudError::NotFound(format!(
                    "clevercloud: NodeGroup {name} is not managed by Joinery for cluster {}",
                    config.cluster_name
                )));
            }
            None => {
                return Err(CloudError::NotFound(format!(
                    "clevercloud: NodeGroup {name} not found"
                )));
            }
        };
        if group.is_terminating() {
            // Gone as far as Karpenter is concerned (as `get` says): CKE's own finalizer
            // removes the Node, which waits for Karpenter to let go of it.
            return Err(CloudError::NotFound(format!(
                "clevercloud: NodeGroup {name} is being deleted"
            )));
        }
        match kube::delete(&nodegroup::collection(), name) {
            Ok(()) => {
                // Capacity came back: creations may try again at once.
                cache::remove(BACKOFF_KEY);
                Ok(())
            }
            Err(KubeError::NotFound(m)) => Err(CloudError::NotFound(format!(
                "clevercloud: NodeGroup {name}: {m}"
            ))),
            Err(e) => Err(kube_error(&format!("deleting NodeGroup {name}"), e)),
        }
    }

    fn is_drifted(claim: NodeClaim, node_class: NodeClass) -> Result<Option<String>, CloudError> {
        let config = Config::load()?;
        let Some(provider_id) = claim.provider_id.as_deref() else {
            return Ok(None);
        };
        let group = match managed_group(&config, provider_id) {
            Ok(group) => group,
            Err(CloudError::NotFound(_)) => return Ok(None),
            Err(e) => return Err(e),
        };
        let current = nodegroup::spec_hash(&node_class.spec);
        Ok(
            match group.metadata.annotations.get(nodegroup::HASH_ANNOTATION) {
                Some(hash) if *hash != current => Some(NODECLASS_DRIFTED.to_string()),
                _ => None,
            },
        )
    }
}

joinery_plugin_sdk::export_cloud_provider!(Clever);
