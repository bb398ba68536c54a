//! The host's side of the cloud: finds the plugin serving a NodeClass, caches its instance
//! types, remembers offerings that just ran out of capacity, and fills unknown prices from
//! the pricing plugin (never from name order).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use joinery_core::backoff::{BackoffPolicy, BackoffTable};
use joinery_core::clock::Clock;
use joinery_core::instance_type::InstanceType;
use joinery_runtime::CallError;
use joinery_runtime::contract;
use joinery_runtime::plugin::LoadedPlugin;
use joinery_runtime::registry::PluginRegistry;
use kube::api::DynamicObject;

use crate::ControllerError;

/// The pricing plugin used for offerings whose cloud publishes no price, unless the cloud
/// plugin's manifest or the operator's grant names another
/// ([`joinery_runtime::registry::pricing_plugin_name`]).
pub const FALLBACK_PRICING_PLUGIN: &str = joinery_runtime::manifest::DEFAULT_PRICING_PLUGIN;

/// How long a fetched instance-type list is reused for a NodeClass generation.
pub const INSTANCE_TYPE_TTL: Duration = Duration::from_secs(5 * 60);

/// How long an offering that failed with insufficient capacity is treated as unavailable
/// (upstream's unavailable-offerings cache: 3 minutes).
pub const UNAVAILABLE_OFFERING_TTL: Duration = Duration::from_secs(3 * 60);

/// An offering: instance type, zone and capacity type.
pub type OfferingKey = (String, String, String);

/// Instance types fetched for a NodeClass (UID, generation), with when they were fetched.
type InstanceTypeCache = HashMap<(String, i64), (SystemTime, Arc<Vec<InstanceType>>)>;

/// The last answer built from a cached list while no offering was marked unavailable: the
/// list it was built from (by identity), the learned capacity's version it applied
/// ([`LearnedStore::version`](crate::learned::LearnedStore::version)) and the types with
/// their offering requirements and learned capacity, shared. The NodePool status,
/// provisioning and disruption loops ask for the same list many times between fetches;
/// rebuilding (then copying) every type each time was a tenth of a long simulation.
type PreparedCache = HashMap<(String, i64), (Arc<Vec<InstanceType>>, u64, Arc<Vec<InstanceType>>)>;

/// Access to the cloud plugins with caching.
pub struct Cloud {
    registry: Arc<PluginRegistry>,
    clock: Arc<Clock>,
    instance_types: Mutex<InstanceTypeCache>,
    /// See [`PreparedCache`].
    prepared: Mutex<PreparedCache>,
    unavailable: Mutex<BTreeMap<OfferingKey, SystemTime>>,
    /// Instance-type capacity learned from the nodes that joined; [`Cloud::instance_types`]
    /// puts it in place of the plugins' estimates.
    pub learned: crate::learned::LearnedStore,
}

impl Cloud {
    /// Cloud access over the plugins of `registry`.
    pub fn new(registry: Arc<PluginRegistry>, clock: Arc<Clock>) -> Cloud {
        Cloud {
            registry,
            clock,
            instance_types: Mutex::default(),
            prepared: Mutex::default(),
            unavailable: Mutex::default(),
            learned: Default::default(),
        }
    }

    /// The plugin registry.
    pub fn registry(&self) -> &Arc<PluginRegistry> {
        &self.registry
    }

    /// The cloud plugin serving NodeClasses of `group`/`kind`.
    pub fn plugin_for(
        &self,
        group: &str,
        kind: &str,
    ) -> Result<Arc<LoadedPlugin>, ControllerError> {
        self.registry
            .current()
            .cloud_for(group, kind)
            .cloned()
            .ok_or_else(|| ControllerError::NoCloudPlugin {
                group: group.to_string(),
                kind: kind.to_string(),
            })
    }

    /// The provider-ID prefix the plugin of `group`/`kind` declares (empty if none).
    pub fn provider_id_prefix(&self, group: &str, kind: &str) -> String {
        self.plugin_for(group, kind)
            .ok()
            .and_then(|p| {
                p.manifest()
                    .node_class
                    .as_ref()
                    .and_then(|n| n.provider_id_prefix.clone())
            })
            .unwrap_or_default()
    }

    /// Marks an offering as out of capacity for [`UNAVAILABLE_OFFERING_TTL`].
    pub fn mark_unavailable(&self, offering: OfferingKey) {
        let until = self.clock.now() + UNAVAILABLE_OFFERING_TTL;
        self.unavailable
            .lock()
            .expect("unavailable offerings lock")
            .insert(offering, until);
    }

    /// Whether any offering is marked unavailable at `now`.
    pub(crate) fn any_unavailable(&self, now: SystemTime) -> bool {
        self.unavailable
            .lock()
            .expect("unavailable offerings lock")
            .values()
            .any(|until| *until > now)
    }

    /// Whether an offering is marked out of capacity; a mark may use `*` for its zone or
    /// capacity type (a failure that concerned every zone of a type).
    pub fn is_unavailable(&self, key: &OfferingKey, now: SystemTime) -> bool {
        let marks = self.unavailable.lock().expect("unavailable offerings lock");
        let any = "*".to_string();
        let (name, zone, capacity_type) = key;
        [
            (zone, capacity_type),
            (&any, capacity_type),
            (zone, &any),
            (&any, &any),
        ]
        .into_iter()
        .any(|(z, c)| {
            marks
                .get(&(name.clone(), z.clone(), c.clone()))
                .is_some_and(|until| *until > now)
        })
    }

    /// The instance types a NodeClass offers, in core form, with recent insufficient-capacity
    /// offerings marked unavailable and unknown prices filled by the pricing plugin.
    pub async fn instance_types(
        &self,
        class: &DynamicObject,
    ) -> Result<Arc<Vec<InstanceType>>, ControllerError> {
        let (group, kind) = group_kind(class);
        let uid = class.metadata.uid.clone().unwrap_or_default();
        let generation = class.metadata.generation.unwrap_or_default();
        let now = self.clock.now();
        let cached = {
            let cache = self
                .instance_types
                .lock()
                .expect("instance type cache lock");
            cache
                .get(&(uid.clone(), generation))
                .filter(|(at, _)| now.duration_since(*at).unwrap_or_default() < INSTANCE_TYPE_TTL)
                .map(|(_, types)| types.clone())
        };
        let types = match cached {
            Some(types) => types,
            None => {
                let plugin = self.plugin_for(&group, &kind)?;
                let mut types = plugin.get_instance_types(&plugin_node_class(class)).await?;
                self.fill_unknown_prices(&plugin, &mut types).await;
                let types = Arc::new(types);
                self.instance_types
                    .lock()
                    .expect("instance type cache lock")
                    .insert((uid.clone(), generation), (now, types.clone()));
                types
            }
        };
        let name = class.metadata.name.as_deref().unwrap_or_default();
        let learned_key = crate::learned::node_class_key(&group, &kind, name);
        // Learned capacity changes capacity and overhead, the offering requirements come from
        // the offerings alone: the two can be applied in either order.
        if !self.any_unavailable(now) {
            let key = (uid, generation);
            let learned = self.learned.version();
            let prepared = {
                let cache = self.prepared.lock().expect("prepared instance types lock");
                cache
                    .get(&key)
                    .filter(|(source, version, _)| {
                        Arc::ptr_eq(source, &types) && *version == learned
                    })
                    .map(|(_, _, prepared)| prepared.clone())
            };
            if let Some(prepared) = prepared {
                return Ok(prepared);
            }
            let with_requirements = types
                .iter()
                .cloned()
                .map(InstanceType::with_offering_requirements)
                .collect();
            let prepared = Arc::new(self.learned.apply(&learned_key, with_requirements));
            self.prepared
                .lock()
                .expect("prepared instance types lock")
                .insert(key, (types.clone(), learned, prepared.clone()));
            return Ok(prepared);
        }
        let mut out = (*types).clone();
        for t in &mut out {
            let name = t.name().to_string();
            for o in t.offerings_mut().0.iter_mut() {
                if self.is_unavailable(
                    &(
                        name.clone(),
                        o.zone().to_string(),
                        o.capacity_type().to_string(),
                    ),
                    now,
                ) {
                    o.set_available(false);
                }
            }
        }
        let out = self.learned.apply(&learned_key, out);
        Ok(Arc::new(
            out.into_iter()
                .map(InstanceType::with_offering_requirements)
                .collect(),
        ))
    }

    /// The prices the host knows (the cloud's, or the pricing plugin's where the cloud gave
    /// none) of every offering of the cached instance types; where NodeClasses disagree, the
    /// most recently fetched wins. Offerings without a price are left out.
    pub fn known_prices(&self) -> HashMap<OfferingKey, f64> {
        let cache = self
            .instance_types
            .lock()
            .expect("instance type cache lock");
        let mut entries: Vec<&(SystemTime, Arc<Vec<InstanceType>>)> = cache.values().collect();
        entries.sort_by_key(|(at, _)| *at);
        let mut prices = HashMap::new();
        for t in entries.iter().flat_map(|(_, types)| types.iter()) {
            for o in &t.offerings().0 {
                if let Some(price) = o.price() {
                    prices.insert(
                        (
                            t.name().to_string(),
                            o.zone().to_string(),
                            o.capacity_type().to_string(),
                        ),
                        price,
                    );
                }
            }
        }
        prices
    }

    /// Prices the offerings `cloud` left unpriced with its pricing plugin (the operator's
    /// choice, the one its manifest names, or [`FALLBACK_PRICING_PLUGIN`]). When that plugin
    /// is missing or fails, prices stay unknown (the scheduler then orders by size).
    async fn fill_unknown_prices(&self, cloud: &LoadedPlugin, types: &mut [InstanceType]) {
        let mut requests = Vec::new();
        let mut slots = Vec::new();
        for (ti, t) in types.iter().enumerate() {
            let labels = price_labels(t);
            for (oi, o) in t.offerings().0.iter().enumerate() {
                if o.price().is_none() {
                    requests.push(contract::PriceRequest {
                        instance_type: t.name().to_string(),
                        zone: o.zone().to_string(),
                        capacity_type: o.capacity_type().to_string(),
                        cpu_millis: t.capacity().cpu_millis,
                        memory_bytes: t.capacity().memory_bytes,
                        gpu_count: t.capacity().get("nvidia.com/gpu") as u32,
                        known_price: None,
                        labels: labels.clone(),
                    });
                    slots.push((ti, oi));
                }
            }
        }
        if requests.is_empty() {
            return;
        }
        let plugin = match self.registry.current().pricing_for(cloud) {
            Ok(plugin) => plugin,
            Err(e) => {
                tracing::warn!(cloud = cloud.name(), error = %e, "{} offerings have no price and their pricing plugin is not loaded", requests.len());
                return;
            }
        };
        match plugin.price(&requests).await {
            Ok(prices) => {
                for ((ti, oi), price) in slots.into_iter().zip(prices) {
                    types[ti].offerings_mut().0[oi].set_price(price);
                }
            }
            Err(e) => {
                tracing::warn!(cloud = cloud.name(), pricing = plugin.name(), error = %e, "pricing failed; unpriced offerings stay unknown")
            }
        }
    }
}

/// The labels a pricing plugin receives for an instance type: every requirement of the type
/// with exactly one allowed value (`In` a single value), such as its name, family, size,
/// architecture or the cloud's own flavor label.
pub fn price_labels(t: &InstanceType) -> Vec<contract::KeyValue> {
    t.requirements()
        .iter()
        .filter(|r| {
            r.operator() == joinery_core::requirements::Operator::In && r.values().len() == 1
        })
        .filter_map(|r| {
            Some(contract::KeyValue {
                key: r.key().to_string(),
                value: r.values().iter().next()?.clone(),
            })
        })
        .collect()
}

/// What a cloud call is about, for its backoff: the plugin, the method (`create`, `delete`,
/// `get`, `list`, `reconcile-instance`…) and the object (a NodeClaim UID, a provider ID;
/// empty for plugin-wide calls such as garbage collection's `list`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CloudCall {
    /// Plugin name.
    pub plugin: String,
    /// WIT method, or `*` for the plugin-wide `Retry-After` key.
    pub method: &'static str,
    /// The object the call is for.
    pub object: String,
}

impl CloudCall {
    /// A call of `method` for `object` through `plugin`.
    pub fn new(plugin: &str, method: &'static str, object: &str) -> CloudCall {
        CloudCall {
            plugin: plugin.to_string(),
            method,
            object: object.to_string(),
        }
    }

    fn plugin_wide(&self) -> CloudCall {
        CloudCall {
            plugin: self.plugin.clone(),
            method: "*",
            object: String::new(),
        }
    }
}

/// Backoff of cloud calls, shared by every loop: per call after failures, per plugin while
/// its cloud asked every caller to wait.
pub struct CloudBackoff {
    table: Mutex<BackoffTable<CloudCall>>,
}

impl CloudBackoff {
    /// Empty backoff with `policy`.
    pub fn new(policy: BackoffPolicy) -> CloudBackoff {
        CloudBackoff {
            table: Mutex::new(BackoffTable::new(policy)),
        }
    }

    /// How long `call` must still wait at `now`: the longer of its own wait and its plugin's.
    pub fn wait(&self, call: &CloudCall, now: SystemTime) -> Option<Duration> {
        let table = self.table.lock().expect("cloud backoff lock");
        table
            .wait(call, now)
            .max(table.wait(&call.plugin_wide(), now))
    }

    /// Records how a call ended at `now`. Success — or `not-found`, which is an answer —
    /// forgets the call's backoff; any other error backs it off (the cloud's `Retry-After`
    /// when longer), and a `Retry-After` also holds every call of the plugin for that long.
    /// Returns the wait before the call may be retried, if it failed.
    pub fn record<T>(
        &self,
        call: &CloudCall,
        now: SystemTime,
        result: &Result<T, CallError>,
    ) -> Option<Duration> {
        let mut table = self.table.lock().expect("cloud backoff lock");
        table.forget_idle(now, Duration::from_secs(3600));
        let error = match result {
            Ok(_)
            | Err(CallError::Cloud {
                error: contract::CloudError::NotFound(_),
                ..
            }) => {
                table.succeed(call);
                return None;
            }
            Err(e) => e,
        };
        let retry_after = match error {
            CallError::Cloud {
                error: contract::CloudError::Retryable(r),
                ..
            } => r.retry_after_ms.map(Duration::from_millis),
            _ => None,
        };
        if let Some(wait) = retry_after {
            table.fail(call.plugin_wide(), now, Some(wait));
        }
        Some(table.fail(call.clone(), now, retry_after))
    }
}

/// The API group and kind of a NodeClass object.
pub fn group_kind(class: &DynamicObject) -> (String, String) {
    let types = class.types.clone().unwrap_or_default();
    let group = types
        .api_version
        .rsplit_once('/')
        .map(|(g, _)| g.to_string())
        .unwrap_or_default();
    (group, types.kind)
}

/// A NodeClass object in the form cloud plugins receive.
pub fn plugin_node_class(class: &DynamicObject) -> contract::NodeClass {
    contract::NodeClass {
        name: class.metadata.name.clone().unwrap_or_default(),
        uid: class.metadata.uid.clone().unwrap_or_default(),
        generation: class.metadata.generation.unwrap_or_default().max(0) as u64,
        spec: class
            .data
            .get("spec")
            .cloned()
            .unwrap_or_else(|| serde_json::json!({}))
            .to_string(),
        status: class
            .data
            .get("status")
            .cloned()
            .unwrap_or_else(|| serde_json::json!({}))
            .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: BackoffPolicy = BackoffPolicy {
        base: Duration::from_secs(1),
        max: Duration::from_secs(30),
    };

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + seconds)
    }

    fn cloud_error(error: contract::CloudError) -> Result<(), CallError> {
        Err(CallError::Cloud {
            plugin: "p".into(),
            op: "create",
            error,
        })
    }

    #[test]
    fn failed_calls_back_off_per_object_and_success_forgets() {
        let backoff = CloudBackoff::new(POLICY);
        let a = CloudCall::new("p", "delete", "claim-a");
        let b = CloudCall::new("p", "delete", "claim-b");
        let internal = cloud_error(contract::CloudError::Internal("boom".into()));
        assert_eq!(
            backoff.record(&a, at(0), &internal),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            backoff.record(&a, at(1), &internal),
            Some(Duration::from_secs(2))
        );
        assert_eq!(backoff.wait(&a, at(2)), Some(Duration::from_secs(1)));
        assert_eq!(
            backoff.wait(&b, at(2)),
            None,
            "another object is not held back"
        );
        assert_eq!(backoff.wait(&a, at(3)), None);
        assert_eq!(backoff.record(&a, at(3), &Ok(())), None);
        assert_eq!(
            backoff.record(&a, at(3), &internal),
            Some(Duration::from_secs(1)),
            "success forgot the failures"
        );
        // not-found is an answer, not a failure.
        assert_eq!(
            backoff.record(
                &b,
                at(3),
                &cloud_error(contract::CloudError::NotFound("gone".into()))
            ),
            None
        );
        // A timed-out call backs off like any failure.
        let timeout: Result<(), CallError> = Err(CallError::Timeout {
            plugin: "p".into(),
            op: "delete",
            limit_ms: 10,
        });
        assert!(backoff.record(&b, at(3), &timeout).is_some());
    }

    #[test]
    fn pricing_labels_are_the_single_valued_requirements_of_the_type() {
        use joinery_core::requirements::{Requirement, Requirements};
        let mut requirements = Requirements::new();
        requirements.add(Requirement::in_values(
            "node.kubernetes.io/instance-type",
            ["M"],
        ));
        requirements.add(Requirement::in_values("clever-cloud.com/flavor", ["M"]));
        requirements.add(Requirement::in_values(
            "topology.kubernetes.io/zone",
            ["par", "rbx"],
        ));
        requirements.add(Requirement::exists("example.com/any"));
        requirements.add(Requirement::not_in("example.com/not", ["x"]));
        let t = InstanceType::new(
            "M",
            requirements,
            Default::default(),
            Default::default(),
            Vec::new(),
        );
        let mut labels: Vec<(String, String)> = price_labels(&t)
            .into_iter()
            .map(|kv| (kv.key, kv.value))
            .collect();
        labels.sort();
        assert_eq!(
            labels,
            [
                ("clever-cloud.com/flavor".to_string(), "M".to_string()),
                ("node.kubernetes.io/instance-type".into(), "M".into())
            ]
        );
    }

    #[test]
    fn a_retry_after_holds_every_call_of_the_plugin() {
        let backoff = CloudBackoff::new(POLICY);
        let throttled = cloud_error(contract::CloudError::Retryable(contract::Retryable {
            message: "429".into(),
            retry_after_ms: Some(45_000),
        }));
        let create = CloudCall::new("p", "create", "claim-a");
        assert_eq!(
            backoff.record(&create, at(0), &throttled),
            Some(Duration::from_secs(45))
        );
        let other = CloudCall::new("p", "list", "");
        assert_eq!(
            backoff.wait(&other, at(10)),
            Some(Duration::from_secs(35)),
            "every call of the plugin waits"
        );
        assert_eq!(
            backoff.wait(&CloudCall::new("q", "list", ""), at(10)),
            None,
            "other plugins do not"
        );
        assert_eq!(backoff.wait(&other, at(45)), None);
    }
}
