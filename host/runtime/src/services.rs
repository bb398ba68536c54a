//! Host services behind the gated imports: secrets, Kubernetes and the per-plugin cache.
//!
//! The plugin-facing imports only check grants and translate errors; the real work goes
//! through these traits so controllers, the simulator and tests can plug in their own.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// The executor's clock: under a simulation's virtual time, entries expire in simulated time.
use tokio::time::Instant;

use crate::contract;

use async_trait::async_trait;

/// Why a secret lookup failed (after the grant check passed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretLookupError {
    /// No such secret: `namespace/name` where the store looked (just `name` for a store
    /// without namespaces).
    #[error(
        "Secret {0} not found (a grant's bare Secret name is read from the controller's namespace, SYSTEM_NAMESPACE; create it there, or grant `namespace/name`)"
    )]
    NotFound(String),
    /// The store could not be reached.
    #[error("secret store unavailable: {0}")]
    Unavailable(String),
}

/// Where granted secrets come from.
#[async_trait]
pub trait SecretStore: Send + Sync {
    /// Returns every key of the secret `name` with decoded bytes.
    async fn get(&self, name: &str) -> Result<BTreeMap<String, Vec<u8>>, SecretLookupError>;
}

/// An in-memory secret store (simulator, tests, or secrets mounted as files and read at start).
#[derive(Debug, Default, Clone)]
pub struct StaticSecrets {
    secrets: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
}

impl StaticSecrets {
    /// Adds (or replaces) a secret.
    pub fn with(mut self, name: &str, entries: &[(&str, &[u8])]) -> Self {
        self.secrets.insert(
            name.to_string(),
            entries
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_vec()))
                .collect(),
        );
        self
    }
}

#[async_trait]
impl SecretStore for StaticSecrets {
    async fn get(&self, name: &str) -> Result<BTreeMap<String, Vec<u8>>, SecretLookupError> {
        self.secrets
            .get(name)
            .cloned()
            .ok_or_else(|| SecretLookupError::NotFound(name.to_string()))
    }
}

/// Reads secrets from Kubernetes (`namespace/name`, or `name` in the default namespace).
#[derive(Clone)]
pub struct KubeSecrets {
    client: kube::Client,
    namespace: String,
}

impl KubeSecrets {
    /// Secrets in `namespace` unless a name carries its own `namespace/` prefix.
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        KubeSecrets {
            client,
            namespace: namespace.to_string(),
        }
    }
}

#[async_trait]
impl SecretStore for KubeSecrets {
    async fn get(&self, name: &str) -> Result<BTreeMap<String, Vec<u8>>, SecretLookupError> {
        crate::kube_names::check_secret_ref(name)
            .map_err(|e| SecretLookupError::Unavailable(e.to_string()))?;
        let (ns, short) = name.split_once('/').unwrap_or((&self.namespace, name));
        let api: kube::Api<k8s_openapi::api::core::v1::Secret> =
            kube::Api::namespaced(self.client.clone(), ns);
        match api.get_opt(short).await {
            Ok(Some(secret)) => {
                let mut out: BTreeMap<String, Vec<u8>> = secret
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect();
                for (k, v) in secret.string_data.unwrap_or_default() {
                    out.insert(k, v.into_bytes());
                }
                Ok(out)
            }
            Ok(None) => Err(SecretLookupError::NotFound(format!("{ns}/{short}"))),
            Err(e) => Err(SecretLookupError::Unavailable(e.to_string())),
        }
    }
}

/// The collection a Kubernetes call addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeTarget {
    /// `workload` or a management cluster name.
    pub cluster: String,
    /// API group (`""` for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Plural resource.
    pub resource: String,
    /// Namespace, if any.
    pub namespace: Option<String>,
}

impl KubeTarget {
    /// The parts of a call on this collection (and object `name`) that go into the request
    /// path, for [`crate::kube_names::check`].
    pub fn parts<'a>(&'a self, name: Option<&'a str>) -> crate::kube_names::CallParts<'a> {
        crate::kube_names::CallParts {
            cluster: &self.cluster,
            group: &self.group,
            version: &self.version,
            resource: &self.resource,
            namespace: self.namespace.as_deref(),
            name,
        }
    }
}

/// How a patch body is interpreted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// JSON merge patch.
    Merge,
    /// JSON patch.
    Json,
    /// Server-side apply.
    Apply,
}

/// Why a Kubernetes call failed (after the grant check passed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeCallError {
    /// 404.
    #[error("not found: {0}")]
    NotFound(String),
    /// 409.
    #[error("conflict: {0}")]
    Conflict(String),
    /// 400/422.
    #[error("invalid: {0}")]
    Invalid(String),
    /// Anything else.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

/// Kubernetes access for plugins, JSON in and out.
#[async_trait]
pub trait KubeBackend: Send + Sync {
    /// Gets one object.
    async fn get(&self, target: &KubeTarget, name: &str) -> Result<String, KubeCallError>;
    /// Lists objects.
    async fn list(
        &self,
        target: &KubeTarget,
        label_selector: Option<&str>,
    ) -> Result<String, KubeCallError>;
    /// Creates an object.
    async fn create(&self, target: &KubeTarget, body: &str) -> Result<String, KubeCallError>;
    /// Patches an object.
    async fn patch(
        &self,
        target: &KubeTarget,
        name: &str,
        kind: PatchType,
        body: &str,
    ) -> Result<String, KubeCallError>;
    /// Deletes an object.
    async fn delete(&self, target: &KubeTarget, name: &str) -> Result<(), KubeCallError>;
}

/// A backend with no cluster: every call fails as unavailable.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoKube;

#[async_trait]
impl KubeBackend for NoKube {
    async fn get(&self, _: &KubeTarget, _: &str) -> Result<String, KubeCallError> {
        Err(no_cluster())
    }
    async fn list(&self, _: &KubeTarget, _: Option<&str>) -> Result<String, KubeCallError> {
        Err(no_cluster())
    }
    async fn create(&self, _: &KubeTarget, _: &str) -> Result<String, KubeCallError> {
        Err(no_cluster())
    }
    async fn patch(
        &self,
        _: &KubeTarget,
        _: &str,
        _: PatchType,
        _: &str,
    ) -> Result<String, KubeCallError> {
        Err(no_cluster())
    }
    async fn delete(&self, _: &KubeTarget, _: &str) -> Result<(), KubeCallError> {
        Err(no_cluster())
    }
}

fn no_cluster() -> KubeCallError {
    KubeCallError::Unavailable(
        "no Kubernetes cluster is configured for plugins in this process".into(),
    )
}

/// Kubernetes access through kube-rs clients, one per cluster name.
///
/// Each call goes to the client of the cluster its target names (the grant check has already
/// matched the rule's `cluster` to it); a call to a cluster this host has no client for fails
/// as unavailable, with the reason given to [`KubeClusters::without`] when there is one.
#[derive(Clone, Default)]
pub struct KubeClusters {
    clusters: BTreeMap<String, kube::Client>,
    /// Clusters known to be absent, with what the operator should do to add them.
    absent: BTreeMap<String, String>,
}

impl KubeClusters {
    /// Adds a cluster under `name` (`workload` for the cluster Joinery manages, `management`
    /// for the one holding Cluster API objects).
    pub fn with(mut self, name: &str, client: kube::Client) -> Self {
        self.absent.remove(name);
        self.clusters.insert(name.to_string(), client);
        self
    }

    /// Records that this host has no client for cluster `name`, and `how` to give it one: the
    /// error of a call to that cluster says it (e.g. which flag to pass).
    pub fn without(mut self, name: &str, how: &str) -> Self {
        if !self.clusters.contains_key(name) {
            self.absent.insert(name.to_string(), how.to_string());
        }
        self
    }

    /// The names of the clusters calls can reach, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.clusters.keys().map(String::as_str).collect()
    }

    /// The client for `cluster`, or why there is none.
    fn client(&self, cluster: &str) -> Result<kube::Client, KubeCallError> {
        if let Some(client) = self.clusters.get(cluster) {
            return Ok(client.clone());
        }
        let reachable = if self.clusters.is_empty() {
            "none".to_string()
        } else {
            self.names().join(", ")
        };
        Err(KubeCallError::Unavailable(match self.absent.get(cluster) {
            Some(how) => format!(
                "no {cluster:?} cluster is configured on this host (clusters plugins can reach: {reachable}); {how}"
            ),
            None => format!(
                "no cluster named {cluster:?} is configured on this host (clusters plugins can reach: {reachable})"
            ),
        }))
    }

    /// The dynamic API for `target`. The parts are checked again here (the plugin-facing
    /// import checks them first), so no caller can hand this backend a path-changing value.
    fn api(
        &self,
        target: &KubeTarget,
        name: Option<&str>,
    ) -> Result<kube::Api<kube::core::DynamicObject>, KubeCallError> {
        crate::kube_names::check(&target.parts(name))
            .map_err(|e| KubeCallError::Invalid(e.to_string()))?;
        let client = self.client(&target.cluster)?;
        let api_version = if target.group.is_empty() {
            target.version.clone()
        } else {
            format!("{}/{}", target.group, target.version)
        };
        let resource = kube::discovery::ApiResource {
            group: target.group.clone(),
            version: target.version.clone(),
            api_version,
            kind: String::new(),
            plural: target.resource.clone(),
        };
        Ok(match &target.namespace {
            Some(ns) => kube::Api::namespaced_with(client, ns, &resource),
            None => kube::Api::all_with(client, &resource),
        })
    }
}

fn kube_error(e: kube::Error) -> KubeCallError {
    match &e {
        kube::Error::Api(status) => match status.code {
            404 => KubeCallError::NotFound(status.message.clone()),
            409 => KubeCallError::Conflict(status.message.clone()),
            400 | 422 => KubeCallError::Invalid(status.message.clone()),
            _ => KubeCallError::Unavailable(e.to_string()),
        },
        _ => KubeCallError::Unavailable(e.to_string()),
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, KubeCallError> {
    serde_json::to_string(value).map_err(|e| KubeCallError::Unavailable(e.to_string()))
}

#[async_trait]
impl KubeBackend for KubeClusters {
    async fn get(&self, target: &KubeTarget, name: &str) -> Result<String, KubeCallError> {
        to_json(
            &self
                .api(target, Some(name))?
                .get(name)
                .await
                .map_err(kube_error)?,
        )
    }
    async fn list(
        &self,
        target: &KubeTarget,
        label_selector: Option<&str>,
    ) -> Result<String, KubeCallError> {
        let mut params = kube::api::ListParams::default();
        if let Some(selector) = label_selector {
            params = params.labels(selector);
        }
        to_json(
            &self
                .api(target, None)?
                .list(&params)
                .await
                .map_err(kube_error)?,
        )
    }
    async fn create(&self, target: &KubeTarget, body: &str) -> Result<String, KubeCallError> {
        let object: kube::core::DynamicObject = serde_json::from_str(body)
            .map_err(|e| KubeCallError::Invalid(format!("body is not an object: {e}")))?;
        to_json(
            &self
                .api(target, None)?
                .create(&kube::api::PostParams::default(), &object)
                .await
                .map_err(kube_error)?,
        )
    }
    async fn patch(
        &self,
        target: &KubeTarget,
        name: &str,
        kind: PatchType,
        body: &str,
    ) -> Result<String, KubeCallError> {
        let value: serde_json::Value = serde_json::from_str(body)
            .map_err(|e| KubeCallError::Invalid(format!("patch body is not JSON: {e}")))?;
        let api = self.api(target, Some(name))?;
        let result = match kind {
            PatchType::Merge => {
                api.patch(
                    name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(value),
                )
                .await
            }
            PatchType::Apply => {
                api.patch(
                    name,
                    &kube::api::PatchParams::apply("joinery-plugin").force(),
                    &kube::api::Patch::Apply(value),
                )
                .await
            }
            PatchType::Json => {
                let patch: json_patch::Patch = serde_json::from_value(value)
                    .map_err(|e| KubeCallError::Invalid(format!("not a JSON patch: {e}")))?;
                api.patch(
                    name,
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::<()>::Json(patch),
                )
                .await
            }
        };
        to_json(&result.map_err(kube_error)?)
    }
    async fn delete(&self, target: &KubeTarget, name: &str) -> Result<(), KubeCallError> {
        self.api(target, Some(name))?
            .delete(name, &kube::api::DeleteParams::background())
            .await
            .map_err(kube_error)
            .map(|_| ())
    }
}

/// Entries one plugin may keep in the cache.
pub const CACHE_MAX_ENTRIES: usize = 1024;
/// Bytes (keys and values) one plugin may keep in the cache.
pub const CACHE_MAX_BYTES_PER_PLUGIN: usize = 8 * 1024 * 1024;
/// Largest value the cache keeps, in bytes.
pub const CACHE_MAX_VALUE: usize = 256 * 1024;
/// Longest key, in bytes.
pub const CACHE_MAX_KEY: usize = 1024;
/// Longest time-to-live, in seconds.
pub const CACHE_MAX_TTL_SECONDS: u32 = 24 * 3600;

/// One plugin's part of the cache, with its own budget.
#[derive(Debug, Default)]
struct PluginEntries {
    entries: HashMap<String, (Vec<u8>, Instant)>,
    bytes: usize,
}

impl PluginEntries {
    fn remove(&mut self, key: &str) {
        if let Some((value, _)) = self.entries.remove(key) {
            self.bytes -= key.len() + value.len();
        }
    }

    /// Drops expired entries, then the ones closest to expiry, until `extra` more bytes and
    /// one more entry fit the budget.
    fn make_room(&mut self, extra: usize, now: Instant) {
        let fits = |e: &PluginEntries| {
            e.entries.len() < CACHE_MAX_ENTRIES && e.bytes + extra <= CACHE_MAX_BYTES_PER_PLUGIN
        };
        if fits(self) {
            return;
        }
        let expired: Vec<String> = self
            .entries
            .iter()
            .filter(|(_, (_, e))| *e <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in expired {
            self.remove(&key);
        }
        if fits(self) {
            return;
        }
        let mut by_expiry: Vec<(Instant, String)> = self
            .entries
            .iter()
            .map(|(k, (_, e))| (*e, k.clone()))
            .collect();
        by_expiry.sort();
        for (_, key) in by_expiry {
            if fits(self) {
                break;
            }
            self.remove(&key);
        }
    }
}

/// The key/value cache behind the `cache` import. Each plugin has its own namespace and its
/// own budget ([`CACHE_MAX_ENTRIES`], [`CACHE_MAX_BYTES_PER_PLUGIN`]): a plugin that fills
/// its part evicts only its own entries, never another plugin's.
#[derive(Debug, Default)]
pub struct PluginCache {
    plugins: Mutex<HashMap<String, PluginEntries>>,
}

impl PluginCache {
    /// Reads a live entry.
    pub fn get(&self, plugin: &str, key: &str) -> Option<Vec<u8>> {
        let mut plugins = self.plugins.lock().unwrap_or_else(|p| p.into_inner());
        let part = plugins.get_mut(plugin)?;
        match part.entries.get(key) {
            Some((value, expiry)) if *expiry > Instant::now() => Some(value.clone()),
            Some(_) => {
                part.remove(key);
                None
            }
            None => None,
        }
    }

    /// Stores an entry; values over [`CACHE_MAX_VALUE`] or keys over [`CACHE_MAX_KEY`] are
    /// refused (returns false).
    pub fn set(&self, plugin: &str, key: &str, value: Vec<u8>, ttl_seconds: u32) -> bool {
        if value.len() > CACHE_MAX_VALUE || key.len() > CACHE_MAX_KEY {
            return false;
        }
        let now = Instant::now();
        let expiry = now + Duration::from_secs(u64::from(ttl_seconds.min(CACHE_MAX_TTL_SECONDS)));
        let mut plugins = self.plugins.lock().unwrap_or_else(|p| p.into_inner());
        let part = plugins.entry(plugin.to_string()).or_default();
        part.remove(key);
        part.make_room(key.len() + value.len(), now);
        part.bytes += key.len() + value.len();
        part.entries.insert(key.to_string(), (value, expiry));
        true
    }

    /// Removes an entry.
    pub fn remove(&self, plugin: &str, key: &str) {
        if let Some(part) = self
            .plugins
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(plugin)
        {
            part.remove(key);
        }
    }

    /// Entries and bytes a plugin holds (expired entries included until they are dropped).
    pub fn usage(&self, plugin: &str) -> (usize, usize) {
        self.plugins
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(plugin)
            .map_or((0, 0), |p| (p.entries.len(), p.bytes))
    }
}

/// The services every plugin call can reach (through its grants).
#[derive(Clone)]
pub struct HostServices {
    /// Secret source.
    pub secrets: Arc<dyn SecretStore>,
    /// Kubernetes access.
    pub kube: Arc<dyn KubeBackend>,
    /// The shared cache.
    pub cache: Arc<PluginCache>,
    /// How plugins' outgoing HTTP(S) leaves the host (trust roots, proxy).
    pub egress: Arc<crate::egress::Egress>,
    /// Who hears of every plugin call (the controller's metrics), once set.
    pub observers: CallObservers,
    /// Set when the host runs in a simulation's virtual time: plugins then read the wall
    /// and monotonic clocks from it, and a running guest does not yield to the executor on
    /// epoch ticks (those come in real time, so where it yields would depend on how fast
    /// the machine is; its CPU deadline still holds, in real time). `None` in production.
    pub virtual_clock: Option<Arc<joinery_core::clock::Clock>>,
    /// Set in a simulation: after every successful render by a renderer that can say what
    /// the node will register with (WIT 0.2 `registration`), the host asks it and hands the
    /// promise here, so that the simulated kubelet can boot a userData format it does not
    /// read. `None` in production, where no extra call is made.
    pub registrations: Option<Arc<dyn RegistrationSink>>,
}

/// Hears renderers' promises of what a node booted from some userData registers with (see
/// [`HostServices::registrations`]).
pub trait RegistrationSink: Send + Sync {
    /// `user_data` was just rendered; a node booted from it registers as `registration`.
    fn declared(&self, user_data: &str, registration: &contract::NodeRegistration);
}

/// One finished plugin call, as observers hear of it.
#[derive(Debug, Clone)]
pub struct CallRecord<'a> {
    /// The plugin's name.
    pub plugin: &'a str,
    /// The WIT function called (`create`, `render`, `instance-types`, …).
    pub method: &'static str,
    /// How long the call took, waiting for a concurrency slot included.
    pub duration: std::time::Duration,
    /// The error's class ([`crate::CallError::class`]) when the call failed.
    pub error: Option<&'static str>,
    /// The largest linear memory the call grew to, in bytes.
    pub peak_memory_bytes: usize,
    /// The plugin's memory limit (`limits.memoryMiB`), in bytes.
    pub memory_limit_bytes: usize,
}

/// Hears of every plugin call (implemented by the controller's metrics).
pub trait CallObserver: Send + Sync {
    /// Called once per finished call.
    fn plugin_call(&self, call: &CallRecord<'_>);

    /// Called when a hot reload brings a new or changed plugin (`result` `success`), or
    /// first fails on one (`failure`; a reload that keeps failing the same way is told once).
    fn plugin_reload(&self, _plugin: &str, _result: &str) {}
}

/// The observer slot the plugins of one registry share: set once the observer exists (the
/// controller's metrics are made after the plugins are loaded).
#[derive(Clone, Default)]
pub struct CallObservers(Arc<std::sync::RwLock<Option<Arc<dyn CallObserver>>>>);

impl std::fmt::Debug for CallObservers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CallObservers")
    }
}

impl CallObservers {
    /// Makes `observer` hear of every later call.
    pub fn set(&self, observer: Arc<dyn CallObserver>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Some(observer);
    }

    /// Tells the observer, if any, of a reload's outcome for one plugin.
    pub fn notify_reload(&self, plugin: &str, result: &str) {
        let observer = self.0.read().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(observer) = observer {
            observer.plugin_reload(plugin, result);
        }
    }

    /// Tells the observer, if any, of a finished call.
    pub fn notify(&self, call: &CallRecord<'_>) {
        let observer = self.0.read().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(observer) = observer {
            observer.plugin_call(call);
        }
    }
}

impl Default for HostServices {
    fn default() -> Self {
        HostServices {
            secrets: Arc::new(StaticSecrets::default()),
            kube: Arc::new(NoKube),
            cache: Arc::new(PluginCache::default()),
            egress: Arc::new(crate::egress::Egress::default()),
            observers: CallObservers::default(),
            virtual_clock: None,
            registrations: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_is_namespaced_per_plugin_and_expires() {
        let cache = PluginCache::default();
        assert!(cache.set("a", "k", b"v".to_vec(), 60));
        assert_eq!(cache.get("a", "k"), Some(b"v".to_vec()));
        assert_eq!(cache.get("b", "k"), None);
        assert!(cache.set("a", "gone", b"v".to_vec(), 0));
        assert_eq!(cache.get("a", "gone"), None);
        cache.remove("a", "k");
        assert_eq!(cache.get("a", "k"), None);
        assert!(!cache.set("a", "big", vec![0; CACHE_MAX_VALUE + 1], 60));
    }

    #[test]
    fn cache_stays_bounded_per_plugin() {
        let cache = PluginCache::default();
        for i in 0..CACHE_MAX_ENTRIES + 10 {
            cache.set("a", &i.to_string(), vec![1], 60);
        }
        assert!(cache.usage("a").0 <= CACHE_MAX_ENTRIES);
        // Bytes are bounded too: 64 values of 256 KiB would be 16 MiB.
        for i in 0..64 {
            assert!(cache.set("big", &i.to_string(), vec![0; CACHE_MAX_VALUE], 60));
        }
        assert!(
            cache.usage("big").1 <= CACHE_MAX_BYTES_PER_PLUGIN,
            "{:?}",
            cache.usage("big")
        );
        assert_eq!(
            cache.get("big", "63"),
            Some(vec![0; CACHE_MAX_VALUE]),
            "the newest entry is kept"
        );
    }

    #[test]
    fn one_plugin_cannot_evict_another() {
        let cache = PluginCache::default();
        assert!(cache.set("quiet", "token", b"kept".to_vec(), 3600));
        for i in 0..CACHE_MAX_ENTRIES * 3 {
            cache.set("noisy", &i.to_string(), vec![7; 4096], 60);
        }
        assert_eq!(cache.get("quiet", "token"), Some(b"kept".to_vec()));
    }

    /// A fake API server on loopback (a plain thread, one request per connection) answering
    /// every request with the ConfigMap `kube-system/x` whose data names `cluster`; returns its
    /// URL and the request lines it received.
    fn fake_api_server(cluster: &'static str) -> (String, Arc<Mutex<Vec<String>>>) {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut buf = vec![0u8; 16 * 1024];
                let n = stream.read(&mut buf).unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]);
                record
                    .lock()
                    .unwrap()
                    .push(request.lines().next().unwrap_or_default().to_string());
                let body = serde_json::json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "x", "namespace": "kube-system"},
                    "data": {"cluster": cluster},
                })
                .to_string();
                let response = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes());
            }
        });
        (url, seen)
    }

    fn client(url: &str) -> kube::Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap()
    }

    fn configmap_x(cluster: &str) -> KubeTarget {
        KubeTarget {
            cluster: cluster.into(),
            group: String::new(),
            version: "v1".into(),
            resource: "configmaps".into(),
            namespace: Some("kube-system".into()),
        }
    }

    #[tokio::test]
    async fn each_call_goes_to_the_cluster_its_target_names() {
        let (workload_url, workload_seen) = fake_api_server("workload");
        let (management_url, management_seen) = fake_api_server("management");
        let clusters = KubeClusters::default()
            .with("workload", client(&workload_url))
            .with("management", client(&management_url));
        assert_eq!(clusters.names(), ["management", "workload"]);
        let from = |json: String| {
            serde_json::from_str::<serde_json::Value>(&json).unwrap()["data"]["cluster"]
                .as_str()
                .unwrap()
                .to_string()
        };
        assert_eq!(
            from(clusters.get(&configmap_x("management"), "x").await.unwrap()),
            "management"
        );
        assert_eq!(
            from(clusters.get(&configmap_x("workload"), "x").await.unwrap()),
            "workload"
        );
        assert_eq!(
            from(clusters.get(&configmap_x("management"), "x").await.unwrap()),
            "management"
        );
        let path = "GET /api/v1/namespaces/kube-system/configmaps/x HTTP/1.1";
        assert_eq!(*management_seen.lock().unwrap(), [path, path]);
        assert_eq!(*workload_seen.lock().unwrap(), [path]);
    }

    #[tokio::test]
    async fn a_call_to_a_cluster_without_a_client_says_how_to_add_it() {
        // The workload client is never called here, so no server needs to listen on its port.
        let clusters = KubeClusters::default()
            .with("workload", client("http://127.0.0.1:9"))
            .without(
                "management",
                "start joinery run with --management-kubeconfig FILE",
            );
        let Err(KubeCallError::Unavailable(message)) =
            clusters.get(&configmap_x("management"), "x").await
        else {
            panic!("a call to an absent cluster must fail as unavailable");
        };
        assert!(
            message.contains("\"management\"") && message.contains("--management-kubeconfig"),
            "{message}"
        );
        assert!(message.contains("can reach: workload"), "{message}");
        let Err(KubeCallError::Unavailable(message)) =
            clusters.delete(&configmap_x("elsewhere"), "x").await
        else {
            panic!("a call to an unknown cluster must fail as unavailable");
        };
        assert!(
            message.contains("no cluster named \"elsewhere\""),
            "{message}"
        );
        // Adding the cluster afterwards removes the hint.
        let (url, _) = fake_api_server("management");
        let clusters = clusters.with("management", client(&url));
        assert!(clusters.get(&configmap_x("management"), "x").await.is_ok());
    }

    #[test]
    fn replacing_an_entry_keeps_the_byte_count_exact() {
        let cache = PluginCache::default();
        cache.set("a", "k", vec![0; 100], 60);
        cache.set("a", "k", vec![0; 10], 60);
        assert_eq!(cache.usage("a"), (1, 11));
        cache.remove("a", "k");
        assert_eq!(cache.usage("a"), (0, 0));
    }
}
