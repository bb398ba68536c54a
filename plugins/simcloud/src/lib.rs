//! # simcloud — the cloud-provider plugin for Joinery's simulated cloud
//!
//! Drives the HTTP API of `joinery_emulator::cloud::SimCloud` (zones, instance types, instances)
//! through the host's outgoing HTTP, and implements the Karpenter CloudProvider contract on
//! top of it. It is built into the joinery binary so `joinery simulate` needs no plugin
//! directory.
//!
//! ## Configuration (from the operator's grants: `plugins.simcloud.config`)
//!
//! | key | meaning |
//! |---|---|
//! | `endpoint` | required: the cloud's base URL, e.g. `http://127.0.0.1:41234` (grant exactly that address under `http`) |
//! | `clusterName` | default `joinery`: tags every instance with `joinery.dev/cluster=<clusterName>`; `list` only returns instances with this tag |
//!
//! ## NodeClass (`sim.joinery.dev/v1alpha1` `SimNodeClass`, spec)
//!
//! | field | meaning |
//! |---|---|
//! | `zones` | optional subset of the cloud's zones; an unknown zone makes the `ZonesReady` condition `False` |
//! | `instanceTypes` | optional allow-list of instance type names |
//! | `tags` | extra tags put on every instance (the cluster and claim tags win on conflict) |
//! | `userData`, `userDataRenderer`, `kubelet` | used by the host to render userData; accepted and ignored here |
//!
//! ## Calls
//!
//! - `resolve-node-class`: `GET /v1/zones`; one condition `ZonesReady`, status `{"zones": [...]}`
//!   (the zones the class will launch in).
//! - `get-instance-types`: `GET /v1/instance-types`, restricted to the allowed types and zones.
//! - `create`: returns the instance already tagged with the claim if there is one (the claim
//!   name is unique per cluster), else posts every fitting offering cheapest first (the cloud
//!   launches the first with capacity). `409` → `insufficient-capacity`, `403` →
//!   `quota-exceeded`, `429`/`5xx` → `retryable` (with `Retry-After`), `400` → `invalid`.
//! - `get`, `list`, `delete`: `404` and terminated instances are `not-found`.
//! - `is-drifted`: `ZoneNotAllowed` or `InstanceTypeNotAllowed` when the NodeClass no longer
//!   allows the instance's zone or type.

pub mod select;

use std::collections::BTreeMap;

use joinery_plugin_sdk::cloud::{
    CLUSTER_LABEL, CloudError, CloudProvider, Condition, CreateRequest, Instance, InstanceState,
    InstanceType, KeyValue, NodeClaim, NodeClass, NodeClassResolution, Offering, OfferingRef,
    Overhead, RepairPolicy, Requirement, Resource, repair_policy,
};
use joinery_plugin_sdk::{http, url};
use serde::{Deserialize, Serialize};

use select::{Candidate, CatalogType, ClassFilter, ZONE_LABEL};

/// Tag naming the NodeClaim an instance was launched for.
pub const TAG_NODECLAIM: &str = "karpenter.sh/nodeclaim";
/// Tag naming the NodePool of that claim.
pub const TAG_NODEPOOL: &str = "karpenter.sh/nodepool";
/// Tag naming the cluster (`clusterName`).
pub const TAG_CLUSTER: &str = "joinery.dev/cluster";
/// Provider-ID scheme of simulated instances.
pub const PROVIDER_ID_PREFIX: &str = "simcloud://";
/// Per-request timeout.
const TIMEOUT_MS: u64 = 10_000;

/// The plugin's configuration.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Config {
    /// The cloud's base URL.
    pub endpoint: Option<String>,
    /// Cluster name for the cluster tag; default `joinery`.
    pub cluster_name: Option<String>,
}

impl Config {
    /// Reads the configuration; a missing `endpoint` is an `invalid` error saying what to set.
    pub fn load() -> Result<Config, CloudError> {
        let config: Config = joinery_plugin_sdk::config().map_err(CloudError::invalid)?;
        match config.endpoint.as_deref().map(str::trim) {
            Some(e) if !e.is_empty() => Ok(config),
            _ => Err(CloudError::invalid(
                "simcloud: the configuration has no `endpoint`; set plugins.simcloud.config.endpoint in the grants \
                 file to the simulated cloud's URL (e.g. http://127.0.0.1:41234) and grant that address under http",
            )),
        }
    }

    fn url(&self, path: &str) -> String {
        let base = self
            .endpoint
            .as_deref()
            .unwrap_or_default()
            .trim()
            .trim_end_matches('/');
        format!("{base}{path}")
    }

    /// The cluster name (default `joinery`).
    pub fn cluster(&self) -> &str {
        self.cluster_name
            .as_deref()
            .filter(|c| !c.is_empty())
            .unwrap_or("joinery")
    }
}

/// The `SimNodeClass` spec fields this plugin reads; the rest is accepted and ignored.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Spec {
    /// Zones to launch in (`None`: all).
    pub zones: Option<Vec<String>>,
    /// Instance types allowed (`None`: all).
    pub instance_types: Option<Vec<String>>,
    /// Extra instance tags.
    pub tags: BTreeMap<String, String>,
}

impl Spec {
    fn filter(&self) -> ClassFilter<'_> {
        ClassFilter {
            zones: self.zones.as_deref(),
            instance_types: self.instance_types.as_deref(),
        }
    }
}

/// An instance as the cloud returns it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct ApiInstance {
    id: String,
    provider_id: String,
    instance_type: String,
    zone: String,
    capacity_type: String,
    tags: BTreeMap<String, String>,
    capacity: BTreeMap<String, String>,
    allocatable: BTreeMap<String, String>,
    labels: BTreeMap<String, String>,
    state: String,
    created_at: Option<String>,
    previous_state: Option<String>,
}

impl ApiInstance {
    fn terminated(&self) -> bool {
        self.state == "terminated"
    }
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct ZoneList {
    zones: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct TypeList {
    instance_types: Vec<CatalogType>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct InstanceList {
    instances: Vec<ApiInstance>,
}

/// The body of `POST /v1/instances`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LaunchBody<'a> {
    candidates: &'a [Candidate],
    user_data: &'a str,
    tags: &'a BTreeMap<String, String>,
}

/// What `resolve-node-class` stores under the NodeClass status.
#[derive(Serialize)]
struct ResolvedStatus<'a> {
    zones: &'a [String],
}

/// The error body of the cloud.
#[derive(Deserialize, Default)]
#[serde(default)]
struct ApiFailure {
    reason: String,
    message: String,
    offerings: Vec<Candidate>,
}

/// Turns a non-2xx answer into the error class Karpenter reacts to.
fn classify(response: &http::Response) -> CloudError {
    let failure: ApiFailure = serde_json::from_slice(&response.body).unwrap_or_default();
    let message = if failure.message.is_empty() {
        format!("simcloud: HTTP status {}", response.status)
    } else {
        format!("simcloud: {}", failure.message)
    };
    match response.status {
        409 => CloudError::insufficient_capacity(
            message,
            failure
                .offerings
                .into_iter()
                .map(|c| OfferingRef {
                    instance_type: c.instance_type,
                    zone: c.zone,
                    capacity_type: c.capacity_type,
                })
                .collect(),
        ),
        403 if failure.reason == "QuotaExceeded" => CloudError::QuotaExceeded(message),
        404 => CloudError::NotFound(message),
        429 | 500.. => CloudError::retryable(message, response.retry_after_ms()),
        _ => CloudError::invalid(message),
    }
}

/// Sends a request and decodes a 2xx JSON answer; other statuses are classified.
fn call<T: serde::de::DeserializeOwned>(request: http::Request) -> Result<T, CloudError> {
    let mut request = request.header("accept", "application/json");
    request.timeout_ms = Some(TIMEOUT_MS);
    let response = request.send()?;
    if !response.is_success() {
        return Err(classify(&response));
    }
    Ok(response.json()?)
}

fn tag_query(tags: &[(&str, &str)]) -> String {
    let values: Vec<String> = tags.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let pairs: Vec<(&str, &str)> = values.iter().map(|v| ("tag", v.as_str())).collect();
    format!("/v1/instances?{}", url::query_string(&pairs))
}

fn resources(map: &BTreeMap<String, String>) -> Vec<Resource> {
    map.iter()
        .map(|(k, v)| Resource::new(k.clone(), v.clone()))
        .collect()
}

fn to_instance(api: ApiInstance) -> Instance {
    let state = match api.state.as_str() {
        "running" => InstanceState::Running,
        "terminated" => InstanceState::Terminated,
        _ => InstanceState::Pending,
    };
    Instance {
        provider_id: if api.provider_id.is_empty() {
            format!("{PROVIDER_ID_PREFIX}{}", api.id)
        } else {
            api.provider_id
        },
        instance_type: api.instance_type,
        zone: api.zone,
        capacity_type: api.capacity_type,
        image_id: None,
        labels: api
            .labels
            .into_iter()
            .map(|(k, v)| KeyValue::new(k, v))
            .chain(
                api.tags
                    .get(TAG_CLUSTER)
                    .map(|c| KeyValue::new(CLUSTER_LABEL, c.clone())),
            )
            .collect(),
        capacity: resources(&api.capacity),
        allocatable: resources(&api.allocatable),
        state,
        node_claim: api.tags.get(TAG_NODECLAIM).cloned(),
        created_at: api.created_at,
    }
}

fn instance_id(provider_id: &str) -> Result<&str, CloudError> {
    provider_id
        .strip_prefix(PROVIDER_ID_PREFIX)
        .filter(|id| !id.is_empty() && !id.contains('/'))
        .ok_or_else(|| {
            CloudError::invalid(format!(
                "simcloud: `{provider_id}` is not a simcloud:// provider ID"
            ))
        })
}

fn fetch_types(config: &Config) -> Result<Vec<CatalogType>, CloudError> {
    let list: TypeList = call(http::Request::get(config.url("/v1/instance-types")))?;
    Ok(list.instance_types)
}

fn fetch_instance(config: &Config, provider_id: &str) -> Result<ApiInstance, CloudError> {
    let id = instance_id(provider_id)?;
    let instance: ApiInstance = call(http::Request::get(
        config.url(&format!("/v1/instances/{}", url::percent_encode(id))),
    ))?;
    if instance.terminated() {
        return Err(CloudError::NotFound(format!(
            "simcloud: instance {id} is terminated"
        )));
    }
    Ok(instance)
}

fn to_instance_type(it: CatalogType, class: ClassFilter<'_>) -> InstanceType {
    let requirements = it
        .labels
        .iter()
        .map(|(k, v)| Requirement::is_in(k.clone(), &[v.as_str()]))
        .collect();
    let offerings = it
        .offerings
        .iter()
        .filter(|o| class.allows_zone(&o.zone))
        .map(|o| Offering {
            zone: o.zone.clone(),
            capacity_type: o.capacity_type.clone(),
            price: Some(o.price),
            available: o.available,
        })
        .collect();
    InstanceType {
        name: it.name,
        requirements,
        capacity: resources(&it.capacity),
        overhead: Overhead {
            kube_reserved: resources(&it.overhead.kube_reserved),
            system_reserved: resources(&it.overhead.system_reserved),
            eviction_threshold: resources(&it.overhead.eviction_threshold),
        },
        offerings,
    }
}

/// The plugin.
pub struct SimCloud;

impl CloudProvider for SimCloud {
    fn resolve_node_class(node_class: NodeClass) -> Result<NodeClassResolution, CloudError> {
        let config = Config::load()?;
        let spec: Spec = node_class.spec_as()?;
        let known: ZoneList = call(http::Request::get(config.url("/v1/zones")))?;
        let wanted = spec.zones.clone().unwrap_or_else(|| known.zones.clone());
        let (resolved, unknown): (Vec<String>, Vec<String>) =
            wanted.into_iter().partition(|z| known.zones.contains(z));
        let condition = if !unknown.is_empty() {
            Condition::new(
                "ZonesReady",
                false,
                "ZonesNotFound",
                format!(
                    "zone(s) {} are not offered by the simulated cloud; it offers {}",
                    unknown.join(", "),
                    known.zones.join(", ")
                ),
            )
        } else if resolved.is_empty() {
            Condition::new(
                "ZonesReady",
                false,
                "NoZones",
                "spec.zones is empty: list at least one zone or omit the field",
            )
        } else {
            Condition::new(
                "ZonesReady",
                true,
                "ZonesResolved",
                format!("launching in {}", resolved.join(", ")),
            )
        };
        Ok(NodeClassResolution {
            conditions: vec![condition],
            status: serde_json::to_string(&ResolvedStatus { zones: &resolved })
                .map_err(|e| CloudError::internal(e.to_string()))?,
        })
    }

    fn get_instance_types(node_class: NodeClass) -> Result<Vec<InstanceType>, CloudError> {
        let config = Config::load()?;
        let spec: Spec = node_class.spec_as()?;
        let class = spec.filter();
        Ok(fetch_types(&config)?
            .into_iter()
            .filter(|it| {
                class.allows_type(&it.name)
                    && it.offerings.iter().any(|o| class.allows_zone(&o.zone))
            })
            .map(|it| to_instance_type(it, class))
            .collect())
    }

    fn create(request: CreateRequest) -> Result<Instance, CloudError> {
        let config = Config::load()?;
        let spec: Spec = request.node_class.spec_as()?;
        let claim = &request.claim;
        let cluster = config.cluster();

        // A previous attempt may have launched the instance and lost the answer.
        let query = tag_query(&[(TAG_CLUSTER, cluster), (TAG_NODECLAIM, &claim.name)]);
        let existing: InstanceList = call(http::Request::get(config.url(&query)))?;
        if let Some(found) = existing.instances.into_iter().find(|i| !i.terminated()) {
            joinery_plugin_sdk::log::info(format!(
                "simcloud: claim {} already has instance {}",
                claim.name, found.id
            ));
            return Ok(to_instance(found));
        }

        let catalog = fetch_types(&config)?;
        let candidates = select::candidates(
            &catalog,
            spec.filter(),
            &claim.requirements,
            &claim.resource_requests,
        );
        if candidates.is_empty() {
            return Err(CloudError::insufficient_capacity(
                format!(
                    "simcloud: no available offering of NodeClass {} satisfies the requirements and requests of claim {}",
                    request.node_class.name, claim.name
                ),
                Vec::new(),
            ));
        }

        let mut tags = spec.tags.clone();
        tags.insert(TAG_NODECLAIM.to_string(), claim.name.clone());
        tags.insert(TAG_NODEPOOL.to_string(), claim.node_pool.clone());
        tags.insert(TAG_CLUSTER.to_string(), cluster.to_string());
        let body = LaunchBody {
            candidates: &candidates,
            user_data: &request.user_data,
            tags: &tags,
        };
        let post = http::Request::post(config.url("/v1/instances")).json(&body)?;
        let launched: ApiInstance = call(post)?;
        joinery_plugin_sdk::log::info(format!(
            "simcloud: launched {} ({} {} {}) for claim {}",
            launched.id, launched.instance_type, launched.zone, launched.capacity_type, claim.name
        ));
        Ok(to_instance(launched))
    }

    fn get(provider_id: String) -> Result<Instance, CloudError> {
        let config = Config::load()?;
        Ok(to_instance(fetch_instance(&config, &provider_id)?))
    }

    fn list() -> Result<Vec<Instance>, CloudError> {
        let config = Config::load()?;
        let list: InstanceList = call(http::Request::get(
            config.url(&tag_query(&[(TAG_CLUSTER, config.cluster())])),
        ))?;
        Ok(list
            .instances
            .into_iter()
            .filter(|i| !i.terminated())
            .map(to_instance)
            .collect())
    }

    fn delete(provider_id: String) -> Result<(), CloudError> {
        let config = Config::load()?;
        let id = instance_id(&provider_id)?;
        let answer: ApiInstance = call(http::Request::delete(
            config.url(&format!("/v1/instances/{}", url::percent_encode(id))),
        ))?;
        match answer.previous_state.as_deref() {
            Some("terminated") => Err(CloudError::NotFound(format!(
                "simcloud: instance {id} is already terminated"
            ))),
            _ => Ok(()),
        }
    }

    /// kwok's policy, upstream's reference: `Ready` `False` or `Unknown` for 10 minutes.
    fn repair_policies() -> Result<Option<Vec<RepairPolicy>>, CloudError> {
        let ten_minutes = std::time::Duration::from_secs(600);
        Ok(Some(vec![
            repair_policy("Ready", "False", ten_minutes),
            repair_policy("Ready", "Unknown", ten_minutes),
        ]))
    }

    /// `POST /v1/instances/{id}/reboot`.
    fn reboot(provider_id: String) -> Result<(), CloudError> {
        let config = Config::load()?;
        let id = instance_id(&provider_id)?;
        let _: ApiInstance = call(http::Request::post(
            config.url(&format!("/v1/instances/{}/reboot", url::percent_encode(id))),
        ))?;
        Ok(())
    }

    fn is_drifted(claim: NodeClaim, node_class: NodeClass) -> Result<Option<String>, CloudError> {
        let spec: Spec = node_class.spec_as()?;
        let class = spec.filter();
        let (mut zone, mut instance_type) = (
            claim.label(ZONE_LABEL).map(String::from),
            claim
                .label("node.kubernetes.io/instance-type")
                .map(String::from),
        );
        if zone.is_none() || instance_type.is_none() {
            let Some(provider_id) = claim.provider_id.as_deref() else {
                return Ok(None);
            };
            let instance = fetch_instance(&Config::load()?, provider_id)?;
            zone = Some(instance.zone);
            instance_type = Some(instance.instance_type);
        }
        if zone.as_deref().is_some_and(|z| !class.allows_zone(z)) {
            return Ok(Some("ZoneNotAllowed".to_string()));
        }
        if instance_type
            .as_deref()
            .is_some_and(|t| !class.allows_type(t))
        {
            return Ok(Some("InstanceTypeNotAllowed".to_string()));
        }
        Ok(None)
    }
}

joinery_plugin_sdk::export_cloud_provider!(SimCloud);

#[cfg(test)]
mod tests;
