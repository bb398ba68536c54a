//! # exoscale — the cloud-provider plugin for Exoscale
//!
//! Serves `ExoscaleNodeClass` (`karpenter.k8s.exoscale/v1alpha1`): launches one Exoscale
//! compute instance per NodeClaim through the v2 API, signing every request with
//! `EXO2-HMAC-SHA256`, following the asynchronous operations it starts, and attaching
//! private networks after launch. See `docs/exoscale.md` for the operator's view.
//!
//! ## Configuration (`plugins.exoscale.config` in the grants file)
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `credentialsSecret` | `exoscale-credentials` | the granted secret holding `api-key` and `api-secret` |
//! | `zone` | — | the cluster's zone: the default of `spec.zones`, and where zone-independent calls go (`ch-gva-2` if unset) |
//! | `endpoint` | `https://api-{zone}.exoscale.com/v2` | per-zone base URL; `{zone}` is replaced (tests point it at the fake API) |
//! | `clusterName` | `joinery` | written to every instance as label `karpenter-sh_managed-by`; `list` returns only those |
//! | `operationTimeoutSeconds` | `40` | how long one call follows operations before answering `retryable` |
//!
//! ## Calls
//!
//! - `resolve-node-class`: one condition per check (`SpecValid`, `ZonesReady`, `TemplateReady`,
//!   `SecurityGroupsReady`, `PrivateNetworksReady`, `AntiAffinityGroupsReady`, `SSHKeyReady`,
//!   `InstanceTypesReady`); the status holds the resolved IDs ([`resolve::Resolved`]).
//! - `get-instance-types`: authorized types of the allow-list, offered in the class's zones,
//!   on-demand, price unknown (Exoscale publishes no price API; the host's pricing plugin
//!   fills it in).
//! - `create`: returns the instance already labelled with the claim if a previous attempt made
//!   one; else picks a type and zone, `POST /instance`, follows the operation, attaches the
//!   private networks, and deletes the instance again if any step after its creation fails.
//! - `get`, `delete`: the provider ID `exoscale://<uuid>` has no zone, so the zone is looked up
//!   (and cached) across the API's zones. An instance without this cluster's
//!   `karpenter-sh_managed-by` label is answered as not found: never adopted, never deleted.
//! - `list`: instances labelled with this cluster, in every zone.
//! - `is-drifted`: `ZoneRemoved` when the instance's zone left the class, `NodeClassDrift`
//!   when the spec hash recorded on the instance differs from the class's, then
//!   `TemplateDrift`, `SecurityGroupDrift`, `PrivateNetworkDrift` or
//!   `AntiAffinityGroupDrift` when what the class
//!   resolves to now (its status) differs from what the instance has.
//! - `reconcile-instance`: puts the class's current `labels` on the instance in place (the
//!   managed labels stay), without replacing it.

pub mod api;
pub mod labels;
pub mod resolve;
pub mod sign;
pub mod spec;
pub mod types;

use std::time::Duration;

use joinery_plugin_sdk::cloud::{
    CLUSTER_LABEL, CloudError, CloudProvider, CreateRequest, Instance, InstanceState, InstanceType,
    KeyValue, NodeClaim, NodeClass, NodeClassResolution, OfferingRef, RepairPolicy, repair_policy,
};
use joinery_plugin_sdk::{cache, log, secrets};
use serde::Deserialize;
use serde_json::{Value, json};

use api::{Api, ApiError, ApiInstance};
use joinery_plugin_sdk::url::percent_encode;
use resolve::{Resolution, Resolved};
use spec::Spec;

/// The provider-ID scheme.
pub const PROVIDER_ID_PREFIX: &str = "exoscale://";
/// The default name of the credentials secret.
pub const DEFAULT_SECRET: &str = "exoscale-credentials";
/// Zone of zone-independent calls when none is configured.
pub const FALLBACK_ZONE: &str = "ch-gva-2";
/// How long the zone of an instance is remembered.
const INSTANCE_ZONE_TTL: u32 = 30 * 24 * 3600;
/// How long the API's zone list and instance types are remembered.
const CATALOG_TTL: u32 = 300;
/// Largest `user-data` Exoscale accepts (base64 characters).
const MAX_USER_DATA: usize = 32_768;

/// The plugin's configuration.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Config {
    /// The granted secret with `api-key` and `api-secret`.
    pub credentials_secret: Option<String>,
    /// The cluster's zone.
    pub zone: Option<String>,
    /// Per-zone endpoint pattern.
    pub endpoint: Option<String>,
    /// The cluster name written on instances.
    pub cluster_name: Option<String>,
    /// Budget for following operations within one call.
    pub operation_timeout_seconds: Option<u64>,
}

impl Config {
    /// The cluster name (default `joinery`).
    pub fn cluster(&self) -> &str {
        self.cluster_name
            .as_deref()
            .filter(|c| !c.is_empty())
            .unwrap_or("joinery")
    }

    /// Where zone-independent calls go.
    pub fn home(&self) -> &str {
        self.zone
            .as_deref()
            .filter(|z| !z.is_empty())
            .unwrap_or(FALLBACK_ZONE)
    }
}

/// Configuration and a signed client, loaded at the start of every call.
pub struct Ctx {
    /// The configuration.
    pub config: Config,
    /// The client.
    pub api: Api,
}

impl Ctx {
    /// Reads the configuration and the credentials; errors say what to fix.
    pub fn load() -> Result<Ctx, CloudError> {
        let config: Config = joinery_plugin_sdk::config().map_err(CloudError::invalid)?;
        if !labels::valid_value(config.cluster()) {
            return Err(CloudError::invalid(format!(
                "exoscale: clusterName {:?} cannot be an Exoscale label value: start with a letter, use letters, digits, - and _",
                config.cluster()
            )));
        }
        let name = config
            .credentials_secret
            .clone()
            .unwrap_or_else(|| DEFAULT_SECRET.to_string());
        let secret = secrets::get(&name).map_err(CloudError::from)?;
        let read = |key: &str| {
            secret.get_str(key).filter(|v| !v.is_empty()).map(str::to_string).ok_or_else(|| {
                CloudError::invalid(format!("exoscale: secret {name:?} has no {key:?}; it needs the keys api-key and api-secret"))
            })
        };
        let (key, secret_value) = (read("api-key")?, read("api-secret")?);
        let endpoint = config
            .endpoint
            .clone()
            .filter(|e| !e.trim().is_empty())
            .unwrap_or_else(|| api::DEFAULT_ENDPOINT.to_string());
        let budget =
            Duration::from_secs(config.operation_timeout_seconds.unwrap_or(40).clamp(1, 110));
        Ok(Ctx {
            api: Api::new(key, secret_value, endpoint, budget),
            config,
        })
    }

    /// The zones the API serves (cached).
    fn api_zones(&self) -> Result<Vec<String>, CloudError> {
        let key = format!("zones/{}", self.api.base("{zone}"));
        if let Some(zones) = cache::get_json::<Vec<String>>(&key) {
            return Ok(zones);
        }
        let zones =
            resolve::api_zones(&self.api, self.config.home()).map_err(|e| e.into_cloud(None))?;
        cache::set_json(&key, &zones, CATALOG_TTL);
        Ok(zones)
    }

    /// The API's instance types (cached).
    fn instance_types(&self) -> Result<Vec<api::InstanceType>, CloudError> {
        let key = format!("instance-types/{}", self.api.base("{zone}"));
        let raw = match cache::get_json::<Value>(&key) {
            Some(raw) => raw,
            None => {
                let raw = resolve::instance_types_json(&self.api, self.config.home())
                    .map_err(|e| e.into_cloud(None))?;
                cache::set_json(&key, &raw, CATALOG_TTL);
                raw
            }
        };
        resolve::decode_types(raw).map_err(|e| e.into_cloud(None))
    }

    /// Resolves the class live.
    fn resolve(&self, class: &NodeClass, spec: &Spec) -> Result<Resolution, CloudError> {
        resolve::resolve(
            &self.api,
            self.config.home(),
            &class.spec,
            spec,
            self.config.zone.as_deref(),
        )
        .map_err(|e| e.into_cloud(None))
    }

    /// The resolved values for `create`: the class's status when it was resolved for this
    /// very spec and is complete, else a live resolution, which must be ready.
    fn resolved(&self, class: &NodeClass, spec: &Spec) -> Result<Resolved, CloudError> {
        if let Ok(status) = class.status_as::<Resolved>()
            && status.spec_hash == spec::resolution_hash(&class.spec)
            && !status.zones.is_empty()
            && status.zones.iter().all(|z| {
                status.templates.contains_key(z)
                    && (spec.private_network_selector_terms.is_empty()
                        || status.private_networks.contains_key(z))
            })
            && (spec.security_group_selector_terms.is_empty() || !status.security_groups.is_empty())
            && (spec.anti_affinity_group_selector_terms.is_empty()
                || !status.anti_affinity_groups.is_empty())
        {
            return Ok(status);
        }
        let resolution = self.resolve(class, spec)?;
        if !resolution.ready() {
            return Err(CloudError::NodeClassNotReady(format!(
                "ExoscaleNodeClass {} is not ready: {}",
                class.name,
                resolution.failures()
            )));
        }
        Ok(resolution.resolved)
    }

    /// Finds the zone of an instance: the cached one, else every zone the API serves.
    fn find(&self, id: &str) -> Result<(String, ApiInstance), CloudError> {
        let key = format!("zone/{id}");
        let cached = cache::get(&key).and_then(|z| String::from_utf8(z).ok());
        let path = format!("/instance/{}", percent_encode(id));
        if let Some(zone) = &cached {
            match self.api.get::<ApiInstance>(zone, &path, &[]) {
                Ok(instance) => return Ok((zone.clone(), instance)),
                Err(e) if e.is_not_found() => cache::remove(&key),
                Err(e) => return Err(e.into_cloud(None)),
            }
        }
        let mut zones = self.api_zones()?;
        // The home zone first: most instances live there.
        zones.sort_by_key(|z| z.as_str() != self.config.home());
        for zone in zones
            .iter()
            .filter(|z| cached.as_deref() != Some(z.as_str()))
        {
            match self.api.get::<ApiInstance>(zone, &path, &[]) {
                Ok(instance) => {
                    cache::set(&key, zone.as_bytes(), INSTANCE_ZONE_TTL);
                    return Ok((zone.clone(), instance));
                }
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e.into_cloud(None)),
            }
        }
        Err(CloudError::NotFound(format!(
            "exoscale: instance {id} exists in none of the zones {}",
            zones.join(", ")
        )))
    }

    /// [`Ctx::find`], for an instance this cluster manages: one without this cluster's
    /// `karpenter-sh_managed-by` label (made by hand, by another tool or by another cluster)
    /// is answered as not found, so the host never adopts, changes or deletes it.
    fn find_managed(&self, id: &str) -> Result<(String, ApiInstance), CloudError> {
        let (zone, instance) = self.find(id)?;
        let cluster = self.config.cluster();
        match instance
            .labels
            .get(&labels::flatten_key(labels::MANAGED_BY))
        {
            Some(owner) if owner == cluster => Ok((zone, instance)),
            owner => Err(CloudError::NotFound(format!(
                "exoscale: instance {id} in {zone} is not managed by cluster {cluster} (its {} label is {}); Joinery leaves it alone",
                labels::flatten_key(labels::MANAGED_BY),
                owner.map_or_else(|| "missing".to_string(), |o| format!("{o:?}"))
            ))),
        }
    }

    /// Deletes an instance that must not survive a failed create, and waits a little for it.
    fn discard(&self, zone: &str, id: &str, why: &str) {
        log::warn(format!("exoscale: deleting instance {id} in {zone}: {why}"));
        match self.api.start(
            zone,
            "DELETE",
            &format!("/instance/{}", percent_encode(id)),
            None,
        ) {
            Ok(operation) => {
                if let Err(e) = self.api.wait(zone, operation) {
                    log::warn(format!(
                        "exoscale: deleting instance {id} has not finished: {}",
                        e.into_cloud(None).message()
                    ));
                }
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => log::error(format!(
                "exoscale: could not delete instance {id} in {zone}; it may leak: {}",
                e.into_cloud(None).message()
            )),
        }
        cache::remove(&format!("zone/{id}"));
    }

    /// Attaches the networks the instance still lacks. The error is `retryable` (a failed
    /// attachment says nothing about the offering's capacity) unless the API reports an
    /// exhausted quota or refuses the request outright; see [`Ctx::attach_or_discard`].
    fn attach_networks(
        &self,
        zone: &str,
        instance: &ApiInstance,
        networks: &[String],
    ) -> Result<(), CloudError> {
        for network in networks
            .iter()
            .filter(|n| !instance.private_networks.iter().any(|p| p.id == **n))
        {
            let body = json!({"instance": {"id": instance.id}});
            let attached = self
                .api
                .start(
                    zone,
                    "PUT",
                    &format!("/private-network/{}:attach", percent_encode(network)),
                    Some(&body),
                )
                .and_then(|operation| self.api.wait(zone, operation));
            if let Err(e) = attached {
                let text = format!(
                    "exoscale: attaching private network {network} to instance {} failed",
                    instance.id
                );
                return Err(match e.into_cloud(None) {
                    CloudError::InsufficientCapacity(ic) => {
                        CloudError::retryable(format!("{text}: {}", ic.message), None)
                    }
                    CloudError::Retryable(r) => {
                        CloudError::retryable(format!("{text}: {}", r.message), r.retry_after_ms)
                    }
                    CloudError::QuotaExceeded(m) => {
                        CloudError::QuotaExceeded(format!("{text}: {m}"))
                    }
                    other => CloudError::invalid(format!("{text}: {}", other.message())),
                });
            }
            log::debug(format!(
                "exoscale: attached private network {network} to {}",
                instance.id
            ));
        }
        Ok(())
    }

    /// Attaches the instance's networks. A `retryable` failure keeps the instance: it carries
    /// the claim's labels, so the host's next create finds it ([`Exoscale::existing`]) and
    /// attaches again, instead of paying for a second launch (should the claim go away
    /// instead, garbage collection reaps the instance). Any other failure deletes it.
    fn attach_or_discard(
        &self,
        zone: &str,
        instance: &ApiInstance,
        networks: &[String],
    ) -> Result<(), CloudError> {
        let Err(e) = self.attach_networks(zone, instance, networks) else {
            return Ok(());
        };
        if matches!(e, CloudError::Retryable(_)) {
            log::warn(format!(
                "exoscale: keeping instance {} in {zone}; the next attempt attaches its networks again",
                instance.id
            ));
        } else {
            self.discard(zone, &instance.id, "attaching its private networks failed");
        }
        Err(e)
    }
}

/// The instance ID of a provider ID.
pub fn instance_id(provider_id: &str) -> Result<&str, CloudError> {
    provider_id
        .strip_prefix(PROVIDER_ID_PREFIX)
        .filter(|id| {
            !id.is_empty()
                && id.len() <= 64
                && id.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
        })
        .ok_or_else(|| {
            CloudError::invalid(format!(
                "exoscale: {provider_id:?} is not an exoscale://<uuid> provider ID"
            ))
        })
}

/// The host's view of an instance.
pub fn to_instance(zone: &str, api: &ApiInstance, max_pods: u64) -> Instance {
    let kind = &api.instance_type;
    let mut node_labels = types::type_labels(kind);
    node_labels.remove(types::TYPE_LABEL);
    node_labels.insert(types::REGION_LABEL.to_string(), zone.to_string());
    if let Some(cluster) = api.labels.get(&labels::flatten_key(labels::MANAGED_BY)) {
        node_labels.insert(CLUSTER_LABEL.to_string(), cluster.clone());
    }
    let state = match api.state.as_str() {
        "running" | "migrating" => InstanceState::Running,
        "stopping" | "stopped" | "destroying" | "expunging" => InstanceState::Terminating,
        "destroyed" => InstanceState::Terminated,
        _ => InstanceState::Pending,
    };
    Instance {
        provider_id: format!("{PROVIDER_ID_PREFIX}{}", api.id),
        instance_type: kind.name(),
        zone: zone.to_string(),
        capacity_type: types::ON_DEMAND.to_string(),
        image_id: Some(api.template.id.clone()).filter(|t| !t.is_empty()),
        labels: node_labels
            .into_iter()
            .map(|(k, v)| KeyValue::new(k, v))
            .collect(),
        capacity: types::capacity(kind, api.disk_size, max_pods),
        allocatable: Vec::new(),
        state,
        node_claim: api
            .labels
            .get(&labels::flatten_key(labels::NODECLAIM))
            .cloned(),
        created_at: api.created_at.clone(),
    }
}

fn max_pods(spec: &Spec) -> u64 {
    spec.kubelet
        .as_ref()
        .and_then(|k| k.max_pods)
        .unwrap_or(110)
}

/// Drift of what the class resolves to, against the class's status when that is current:
/// `TemplateDrift` (the zone's template is now another build or image), `SecurityGroupDrift`
/// (the instance's groups differ from the resolved ones), `PrivateNetworkDrift` (a resolved
/// network of its zone is not attached), `AntiAffinityGroupDrift` (its anti-affinity groups,
/// which Exoscale sets only at creation, differ from the resolved ones; checked only when the
/// API said which they are).
pub fn resolved_drift(
    class: &NodeClass,
    zone: &str,
    instance: &ApiInstance,
) -> Option<&'static str> {
    let status = class
        .status_as::<Resolved>()
        .ok()
        .filter(|s| s.spec_hash == spec::resolution_hash(&class.spec))?;
    if status
        .templates
        .get(zone)
        .is_some_and(|t| !instance.template.id.is_empty() && t.id != instance.template.id)
    {
        return Some("TemplateDrift");
    }
    let mut have: Vec<&str> = instance
        .security_groups
        .iter()
        .map(|g| g.id.as_str())
        .collect();
    let mut want: Vec<&str> = status.security_groups.iter().map(String::as_str).collect();
    have.sort_unstable();
    want.sort_unstable();
    if have != want {
        return Some("SecurityGroupDrift");
    }
    let networks = status
        .private_networks
        .get(zone)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if networks
        .iter()
        .any(|n| !instance.private_networks.iter().any(|p| p.id == *n))
    {
        return Some("PrivateNetworkDrift");
    }
    if let Some(groups) = &instance.anti_affinity_groups {
        let mut have: Vec<&str> = groups.iter().map(|g| g.id.as_str()).collect();
        let mut want: Vec<&str> = status
            .anti_affinity_groups
            .iter()
            .map(String::as_str)
            .collect();
        have.sort_unstable();
        want.sort_unstable();
        if have != want {
            return Some("AntiAffinityGroupDrift");
        }
    }
    None
}

/// The plugin.
pub struct Exoscale;

impl Exoscale {
    /// Looks for the instance a previous attempt launched for this claim. One in state
    /// `error` (its create failed after it existed) is deleted and forgotten.
    fn existing(
        ctx: &Ctx,
        zones: &[String],
        claim: &NodeClaim,
    ) -> Result<Option<(String, ApiInstance)>, CloudError> {
        #[derive(Deserialize, Default)]
        #[serde(default)]
        struct List {
            instances: Vec<ApiInstance>,
        }
        let filter = labels::filter(&[
            (labels::MANAGED_BY, ctx.config.cluster()),
            (labels::NODECLAIM, &claim.name),
        ]);
        for zone in zones {
            let list: List = ctx
                .api
                .get(zone, "/instance", &[("labels", &filter)])
                .map_err(|e| e.into_cloud(None))?;
            for instance in list.instances {
                match instance.state.as_str() {
                    "error" => ctx.discard(
                        zone,
                        &instance.id,
                        "an earlier create of this claim failed after making it",
                    ),
                    "destroying" | "destroyed" | "expunging" => {}
                    _ => return Ok(Some((zone.clone(), instance))),
                }
            }
        }
        Ok(None)
    }
}

impl CloudProvider for Exoscale {
    fn resolve_node_class(node_class: NodeClass) -> Result<NodeClassResolution, CloudError> {
        let ctx = Ctx::load()?;
        let spec: Spec = node_class.spec_as()?;
        let resolution = ctx.resolve(&node_class, &spec)?;
        let status = serde_json::to_string(&resolution.resolved)
            .map_err(|e| CloudError::internal(e.to_string()))?;
        Ok(NodeClassResolution {
            conditions: resolution.conditions,
            status,
        })
    }

    fn get_instance_types(node_class: NodeClass) -> Result<Vec<InstanceType>, CloudError> {
        let ctx = Ctx::load()?;
        let spec: Spec = node_class.spec_as()?;
        let zones = spec.effective_zones(ctx.config.zone.as_deref());
        Ok(ctx
            .instance_types()?
            .iter()
            .filter(|t| types::allowed(t, &spec) && t.zones.iter().any(|z| zones.contains(z)))
            .map(|t| types::to_instance_type(t, &spec, &zones))
            .collect())
    }

    fn create(request: CreateRequest) -> Result<Instance, CloudError> {
        let ctx = Ctx::load()?;
        let class = &request.node_class;
        let claim = &request.claim;
        let spec: Spec = class.spec_as()?;
        let problems = spec.problems();
        if !problems.is_empty() {
            return Err(CloudError::NodeClassNotReady(format!(
                "ExoscaleNodeClass {} is invalid: {}",
                class.name,
                problems.join("; ")
            )));
        }
        let resolved = ctx.resolved(class, &spec)?;
        let pods = max_pods(&spec);
        let no_networks = Vec::new();

        // A previous attempt may have launched the instance and lost the answer.
        if let Some((zone, instance)) = Self::existing(&ctx, &resolved.zones, claim)? {
            log::info(format!(
                "exoscale: claim {} already has instance {} in {zone}",
                claim.name, instance.id
            ));
            cache::set(
                &format!("zone/{}", instance.id),
                zone.as_bytes(),
                INSTANCE_ZONE_TTL,
            );
            let networks = resolved.private_networks.get(&zone).unwrap_or(&no_networks);
            ctx.attach_or_discard(&zone, &instance, networks)?;
            return Ok(to_instance(&zone, &instance, pods));
        }

        let catalog = ctx.instance_types()?;
        let Some((kind, zone)) = types::pick(&catalog, &spec, &resolved.zones, claim) else {
            return Err(CloudError::insufficient_capacity(
                format!(
                    "exoscale: no authorized instance type of ExoscaleNodeClass {} in zones {} satisfies the requirements and requests of claim {}",
                    class.name,
                    resolved.zones.join(", "),
                    claim.name
                ),
                Vec::new(),
            ));
        };
        let offering = OfferingRef {
            instance_type: kind.name(),
            zone: zone.clone(),
            capacity_type: types::ON_DEMAND.into(),
        };
        let template = resolved.templates.get(&zone).ok_or_else(|| {
            CloudError::NodeClassNotReady(format!("no template resolved for zone {zone}"))
        })?;

        let hash = spec::drift_hash(&class.spec);
        let managed = [
            (labels::MANAGED_BY, ctx.config.cluster()),
            (labels::NODECLAIM, claim.name.as_str()),
            (labels::NODEPOOL, claim.node_pool.as_str()),
            (labels::NODECLASS, class.name.as_str()),
            (labels::NODECLASS_HASH, hash.as_str()),
        ];
        let mut body = json!({
            "name": format!("{}{}", spec.name_prefix.as_deref().unwrap_or_default(), claim.name),
            "instance-type": {"id": kind.id},
            "template": {"id": template.id},
            "disk-size": spec.disk_size.unwrap_or(spec::DISK_MIN),
            "labels": labels::instance_labels(&spec.labels, &managed),
            "public-ip-assignment": spec.public_ip(),
        });
        if !request.user_data.is_empty() {
            let encoded = sign::base64(request.user_data.as_bytes());
            if encoded.len() > MAX_USER_DATA {
                return Err(CloudError::invalid(format!(
                    "exoscale: the rendered userData is {} characters of base64; Exoscale accepts at most {MAX_USER_DATA}",
                    encoded.len()
                )));
            }
            body["user-data"] = Value::String(encoded);
        }
        let refs = |ids: &[String]| Value::Array(ids.iter().map(|id| json!({"id": id})).collect());
        if !resolved.security_groups.is_empty() {
            body["security-groups"] = refs(&resolved.security_groups);
        }
        if !resolved.anti_affinity_groups.is_empty() {
            body["anti-affinity-groups"] = refs(&resolved.anti_affinity_groups);
        }
        if !resolved.ssh_keys.is_empty() {
            body["ssh-keys"] = Value::Array(
                resolved
                    .ssh_keys
                    .iter()
                    .map(|name| json!({"name": name}))
                    .collect(),
            );
        }

        let operation = ctx
            .api
            .start(&zone, "POST", "/instance", Some(&body))
            .map_err(|e| e.into_cloud(Some(offering.clone())))?;
        let id = operation
            .reference
            .as_ref()
            .map(|r| r.id.clone())
            .unwrap_or_default();
        if !id.is_empty() {
            cache::set(&format!("zone/{id}"), zone.as_bytes(), INSTANCE_ZONE_TTL);
        }
        log::info(format!(
            "exoscale: creating {} ({} in {zone}) for claim {}",
            if id.is_empty() { "?" } else { &id },
            kind.name(),
            claim.name
        ));
        match ctx.api.wait(&zone, operation) {
            Ok(_) => {}
            // Still pending: the next call finds the instance by its labels and carries on.
            Err(e @ ApiError::Timeout(_)) => return Err(e.into_cloud(None)),
            Err(e) if e.is_transient() => return Err(e.into_cloud(None)),
            Err(e) => {
                if !id.is_empty() {
                    ctx.discard(&zone, &id, "its create operation failed");
                }
                return Err(e.into_cloud(Some(offering)));
            }
        }
        let path = format!("/instance/{}", percent_encode(&id));
        let instance: ApiInstance = ctx
            .api
            .get(&zone, &path, &[])
            .map_err(|e| e.into_cloud(None))?;
        let networks = resolved.private_networks.get(&zone).unwrap_or(&no_networks);
        ctx.attach_or_discard(&zone, &instance, networks)?;
        let instance = if networks.is_empty() {
            instance
        } else {
            ctx.api
                .get(&zone, &path, &[])
                .map_err(|e| e.into_cloud(None))?
        };
        Ok(to_instance(&zone, &instance, pods))
    }

    fn get(provider_id: String) -> Result<Instance, CloudError> {
        let ctx = Ctx::load()?;
        let (zone, instance) = ctx.find_managed(instance_id(&provider_id)?)?;
        Ok(to_instance(&zone, &instance, 110))
    }

    fn list() -> Result<Vec<Instance>, CloudError> {
        #[derive(Deserialize, Default)]
        #[serde(default)]
        struct List {
            instances: Vec<ApiInstance>,
        }
        let ctx = Ctx::load()?;
        let filter = labels::filter(&[(labels::MANAGED_BY, ctx.config.cluster())]);
        let mut out = Vec::new();
        for zone in ctx.api_zones()? {
            let list: List = ctx
                .api
                .get(&zone, "/instance", &[("labels", &filter)])
                .map_err(|e| e.into_cloud(None))?;
            out.extend(list.instances.iter().map(|i| to_instance(&zone, i, 110)));
        }
        Ok(out)
    }

    fn delete(provider_id: String) -> Result<(), CloudError> {
        let ctx = Ctx::load()?;
        let id = instance_id(&provider_id)?;
        let (zone, instance) = ctx.find_managed(id)?;
        if matches!(
            instance.state.as_str(),
            "destroying" | "destroyed" | "expunging"
        ) {
            return Ok(());
        }
        match ctx.api.start(
            &zone,
            "DELETE",
            &format!("/instance/{}", percent_encode(id)),
            None,
        ) {
            Ok(_) => {
                log::info(format!("exoscale: deleting instance {id} in {zone}"));
                Ok(())
            }
            Err(e) => Err(e.into_cloud(None)),
        }
    }

    /// The Exoscale provider's policies: `Ready` `False`/`Unknown` for 15 minutes, disk,
    /// memory and PID pressure for 10, an unavailable network for 5.
    fn repair_policies() -> Result<Option<Vec<RepairPolicy>>, CloudError> {
        const POLICIES: [(&str, &str, u64); 6] = [
            ("Ready", "False", 15),
            ("Ready", "Unknown", 15),
            ("DiskPressure", "True", 10),
            ("MemoryPressure", "True", 10),
            ("PIDPressure", "True", 10),
            ("NetworkUnavailable", "True", 5),
        ];
        Ok(Some(
            POLICIES
                .iter()
                .map(|(t, s, minutes)| repair_policy(t, s, Duration::from_secs(minutes * 60)))
                .collect(),
        ))
    }

    /// `PUT /instance/{id}:reboot` (the API refuses an instance that is not running); the
    /// reboot runs on as an operation, not waited for.
    fn reboot(provider_id: String) -> Result<(), CloudError> {
        let ctx = Ctx::load()?;
        let id = instance_id(&provider_id)?;
        let (zone, _) = ctx.find_managed(id)?;
        ctx.api
            .start(
                &zone,
                "PUT",
                &format!("/instance/{}:reboot", percent_encode(id)),
                None,
            )
            .map_err(|e| e.into_cloud(None))?;
        Ok(())
    }

    fn is_drifted(claim: NodeClaim, node_class: NodeClass) -> Result<Option<String>, CloudError> {
        let Some(provider_id) = claim.provider_id.as_deref() else {
            return Ok(None);
        };
        let spec: Spec = node_class.spec_as()?;
        let ctx = Ctx::load()?;
        let (zone, instance) = ctx.find_managed(instance_id(provider_id)?)?;
        if !spec
            .effective_zones(ctx.config.zone.as_deref())
            .contains(&zone)
        {
            return Ok(Some("ZoneRemoved".to_string()));
        }
        let recorded = instance
            .labels
            .get(&labels::flatten_key(labels::NODECLASS_HASH));
        if recorded.is_some_and(|h| *h != spec::drift_hash(&node_class.spec)) {
            return Ok(Some("NodeClassDrift".to_string()));
        }
        Ok(resolved_drift(&node_class, &zone, &instance).map(str::to_string))
    }

    fn reconcile_instance(claim: NodeClaim, node_class: NodeClass) -> Result<(), CloudError> {
        let Some(provider_id) = claim.provider_id.as_deref() else {
            return Ok(());
        };
        let spec: Spec = node_class.spec_as()?;
        let ctx = Ctx::load()?;
        let id = instance_id(provider_id)?;
        let (zone, instance) = ctx.find_managed(id)?;
        if matches!(
            instance.state.as_str(),
            "destroying" | "destroyed" | "expunging"
        ) {
            return Ok(());
        }
        let wanted = labels::reconciled_labels(&instance.labels, &spec.labels);
        if wanted == instance.labels {
            return Ok(());
        }
        // `PUT /instance/{id}` replaces the label map: send all of it.
        let operation = ctx.api.start(
            &zone,
            "PUT",
            &format!("/instance/{}", percent_encode(id)),
            Some(&json!({"labels": wanted})),
        );
        ctx.api
            .wait(&zone, operation.map_err(|e| e.into_cloud(None))?)
            .map_err(|e| e.into_cloud(None))?;
        log::info(format!(
            "exoscale: updated the labels of instance {id} for claim {}",
            claim.name
        ));
        Ok(())
    }
}

joinery_plugin_sdk::export_cloud_provider!(Exoscale);

#[cfg(test)]
mod tests;
