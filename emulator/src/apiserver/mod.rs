//! The Kubernetes API server emulator: an in-memory object store with one global
//! resourceVersion and a bounded change history, served over plain HTTP on loopback so that
//! the real `kube` client, watchers, reflectors and `kubectl` talk to it unchanged. This file
//! holds [`ApiServer`], the handle that starts, inspects and stops one.
//!
//! Its files:
//!
//! - [`store`]: the objects, their resourceVersions and history, deletion and garbage
//!   collection, and the binding and eviction subresources (`store/` splits these by concern);
//! - `server.rs`: the HTTP front end — routing, discovery, verbs, patches, watch streams —
//!   and [`ApiFaults`], the server's fault-injection hooks;
//! - `admission.rs`: defaulting the real API server applies to built-in kinds on create
//!   (a Pod's requests from its limits);
//! - [`resources`]: the served resource types (built-in and from CRDs) and discovery documents;
//! - [`schema`]: structural-schema pruning, defaulting and validation of custom resources;
//! - [`cel`]: the CEL interpreter behind `x-kubernetes-validations` rules (`cel/` splits it
//!   into tokenizer, parser, values, evaluator with its cost meter, and function library);
//! - [`selectors`]: label and field selectors;
//! - `strategic.rs`: strategic merge patch;
//! - `scale.rs`: the `scale` subresource;
//! - `disruption.rs`: PodDisruptionBudget arithmetic used by eviction and budget status;
//! - `table.rs`: server-side printing as `Table` (what `kubectl get` shows), with `jsonpath.rs`
//!   for custom printer columns;
//! - `openapi.rs`: the OpenAPI v3 documents `kubectl` reads;
//! - `kubeconfig.rs`: the kubeconfig pointing clients at the server.

pub(crate) mod admission;
pub mod cel;
mod disruption;
mod jsonpath;
mod kubeconfig;
mod openapi;
mod protobuf;
pub mod resources;
mod scale;
pub mod schema;
pub mod selectors;
mod server;
pub mod store;
mod strategic;
mod table;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use joinery_core::clock::Clock;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use kubeconfig::kubeconfig_yaml;
pub use server::{ApiFaults, ApiVerb};

use crate::error::SimError;
use crate::network::Network;
use server::ServerState;
use store::Store;

/// Builds a `kube::Client` for a plain-HTTP server (such as the emulator) from a kube config,
/// without any TLS stack.
///
/// `kube::Client::try_from(config)` works too, but it always prepares a rustls connector and
/// therefore needs a process-wide rustls `CryptoProvider` to be installed first.
pub fn plain_http_client(config: &kube::Config) -> Result<kube::Client, SimError> {
    plain_http_client_on(config, &Network::tcp())
}

/// [`plain_http_client`] over `network`: on an in-process network the client dials the
/// server's pipe (see [`crate::network`]).
pub fn plain_http_client_on(
    config: &kube::Config,
    network: &Network,
) -> Result<kube::Client, SimError> {
    use kube::client::ConfigExt;
    let connector = network.connector();
    // Idle pooled connections expire on the runtime's clock, not the system's: in virtual
    // time, whether a request reuses a connection must not depend on the machine's speed.
    let http_client =
        hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
            .pool_timer(hyper_util::rt::TokioTimer::new())
            .build::<_, kube::client::Body>(connector);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .layer(config.extra_headers_layer()?)
        .service(http_client);
    Ok(kube::Client::new(service, config.default_namespace.clone()))
}

/// Settings of an emulated API server.
#[derive(Debug, Clone)]
pub struct ApiServerOptions {
    /// Address to listen on; the default is an ephemeral port on 127.0.0.1.
    pub bind_address: SocketAddr,
    /// How many change events are retained for watches; a watch or continue token older than
    /// this window gets `410 Gone`. Tests make it small to force expiry.
    pub event_window: usize,
    /// How often a watch that asked for bookmarks receives one (default: a minute, as
    /// kube-apiserver's watch cache sends them).
    pub bookmark_interval: Duration,
    /// The clock every timestamp the server writes comes from (creation and deletion
    /// timestamps, condition transition times, managedFields times). Share it with the
    /// physics and the host to run a scenario faster than real time.
    pub clock: Arc<Clock>,
    /// Whether deleting a pod bound to a node waits for its grace period, as on a real
    /// server: the pod gets a `deletionTimestamp` of now plus the grace period and stays
    /// (Terminating) until its kubelet removes it with a zero grace period. Unbound and
    /// finished pods are always removed at once. Default `true`; without a kubelet (no
    /// physics) bound pods then stay Terminating, as on a real cluster whose node is gone.
    pub pod_grace_periods: bool,
    /// The network to listen on: loopback TCP by default, in-process pipes for a simulation
    /// in virtual time (then only clients from [`ApiServer::client`] can reach it).
    pub network: Network,
    /// Seed of the generator of uids and generated names (`None`: random), see
    /// [`Store::seed`](store::Store::seed).
    pub seed: Option<u64>,
}

impl Default for ApiServerOptions {
    fn default() -> Self {
        Self {
            bind_address: SocketAddr::from(([127, 0, 0, 1], 0)),
            event_window: 10_000,
            bookmark_interval: Duration::from_secs(60),
            clock: Arc::new(Clock::real()),
            pod_grace_periods: true,
            network: Network::tcp(),
            seed: None,
        }
    }
}

/// A cloneable handle that stops a running server.
#[derive(Debug, Clone)]
pub struct ShutdownHandle {
    stop: watch::Sender<bool>,
}

impl ShutdownHandle {
    /// Stops accepting connections and closes open ones (including watch streams).
    pub fn shutdown(&self) {
        self.stop.send_replace(true);
    }
}

/// A running emulated Kubernetes API server. Dropping it stops the server.
pub struct ApiServer {
    address: SocketAddr,
    network: Network,
    url: String,
    shared: Arc<ServerState>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl ApiServer {
    /// Binds the listener and starts serving in the background.
    pub async fn start(options: ApiServerOptions) -> Result<Self, SimError> {
        let listener = options
            .network
            .bind(options.bind_address)
            .await
            .map_err(SimError::Bind)?;
        let address = listener.local_addr().map_err(SimError::Bind)?;
        let url = format!("http://{address}");
        let shared = Arc::new(ServerState {
            store: Store::with_clock(
                options.event_window,
                options.clock.clone(),
                options.pod_grace_periods,
            ),
            bookmark_interval: options.bookmark_interval,
            watch_epoch: watch::Sender::new(0),
            watches_paused: watch::Sender::new(false),
            expired_watches: AtomicU64::new(0),
            faults: server::ApiFaults::default(),
        });
        if let Some(seed) = options.seed {
            shared.store.seed(seed);
        }
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(server::serve(listener, shared.clone(), stopped));
        tracing::info!(%url, "emulated API server listening");
        Ok(Self {
            address,
            network: options.network,
            url,
            shared,
            stop,
            task: Some(task),
        })
    }

    /// The base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The socket address the server listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// A kubeconfig (YAML) pointing at this server over plain HTTP, namespace `default`.
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig_yaml(&self.url)
    }

    /// Writes the kubeconfig to a file.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), SimError> {
        std::fs::write(path, self.kubeconfig_yaml()).map_err(|source| SimError::Write {
            what: format!("kubeconfig {}", path.display()),
            source,
        })
    }

    /// A `kube::Client` for this server with `default` as its namespace, speaking plain HTTP
    /// (see [`plain_http_client`]).
    pub fn client(&self) -> Result<kube::Client, SimError> {
        plain_http_client_on(&self.client_config()?, &self.network)
    }

    /// Like [`ApiServer::client`], but every request carries `User-Agent: user_agent`, so that
    /// [`ApiFaults::hang_client`] can single this client out (one replica of the host, say).
    pub fn client_as(&self, user_agent: &str) -> Result<kube::Client, SimError> {
        let mut config = self.client_config()?;
        let agent = http::HeaderValue::from_str(user_agent)
            .map_err(|_| SimError::InvalidUserAgent(user_agent.to_string()))?;
        config.headers.push((http::header::USER_AGENT, agent));
        plain_http_client_on(&config, &self.network)
    }

    fn client_config(&self) -> Result<kube::Config, SimError> {
        let uri: http::Uri = self
            .url
            .parse()
            .map_err(|_| SimError::InvalidUrl(self.url.clone()))?;
        let mut config = kube::Config::new(uri);
        config.default_namespace = "default".to_string();
        Ok(config)
    }

    /// The latest resourceVersion the store has handed out.
    pub fn resource_version(&self) -> u64 {
        self.shared.store.resource_version()
    }

    /// Direct access to the object store (for physics and test setup without HTTP).
    pub fn store(&self) -> &Store {
        &self.shared.store
    }

    /// Changes the number of retained watch events; older history is dropped immediately.
    pub fn set_event_window(&self, events: usize) {
        self.shared.store.set_window(events);
    }

    /// Drops the whole event history (like an etcd compaction).
    pub fn compact_history(&self) {
        self.shared.store.compact();
    }

    /// Ends every open watch stream; clients see the stream close and reconnect.
    pub fn disconnect_watches(&self) {
        self.shared.watch_epoch.send_modify(|epoch| *epoch += 1);
    }

    /// Makes new watch requests wait (before reading history) until [`ApiServer::resume_watches`].
    pub fn pause_watches(&self) {
        self.shared.watches_paused.send_replace(true);
    }

    /// Lets waiting and new watch requests proceed.
    pub fn resume_watches(&self) {
        self.shared.watches_paused.send_replace(false);
    }

    /// The fault-injection hooks (error rates, latency, throttling); changes apply to the
    /// next request.
    pub fn faults(&self) -> &ApiFaults {
        &self.shared.faults
    }

    /// How many watch requests were answered with `410 Gone` so far.
    pub fn expired_watch_count(&self) -> u64 {
        self.shared.expired_watches.load(Ordering::Relaxed)
    }

    /// A handle that can stop the server from elsewhere.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle {
            stop: self.stop.clone(),
        }
    }

    /// Stops the server and waits for the accept loop to finish.
    pub async fn shutdown(mut self) {
        self.stop.send_replace(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop.send_replace(true);
    }
}
