//! Joinery's emulated cluster.
//!
//! At its heart is the Kubernetes API server emulator ([`apiserver`]): an in-memory object
//! store with one global resourceVersion and a bounded change history, served over plain HTTP
//! on loopback so that the real `kube` client, watchers, reflectors and `kubectl` talk to it
//! unchanged. Around it, [`physics`] runs what a real cluster has around Karpenter (scheduler,
//! workload controllers, kubelets), [`cloud`] the simulated cloud whose instances the kubelets
//! boot and [`exoscale`] a fake of the Exoscale API. The three fakes share one loopback HTTP
//! loop (`http_server.rs`) and one fault-injection core (`faults.rs`). [`clevercloud`] fakes
//! Clever Cloud's NodeGroup API inside the cluster, and [`clusterapi`] a Cluster API
//! management cluster (a second API server with MachineDeployment, MachineSet and Machine
//! controllers whose machines register as Nodes in the workload cluster).
//!
//! ```no_run
//! # async fn demo() -> Result<(), joinery_emulator::SimError> {
//! use joinery_emulator::{ApiServer, ApiServerOptions};
//! let server = ApiServer::start(ApiServerOptions::default()).await?;
//! let client = server.client()?;
//! let kubeconfig = server.kubeconfig_yaml();
//! # let _ = (client, kubeconfig);
//! server.shutdown().await;
//! # Ok(()) }
//! ```

pub mod apiserver;
pub mod bench;
pub mod clevercloud;
pub mod cloud;
pub mod clusterapi;
mod error;
pub mod exoscale;
mod fake_operator;
mod faults;
mod http_server;
pub mod network;
pub mod physics;
pub mod preload;
mod random;

pub use apiserver::{
    ApiFaults, ApiServer, ApiServerOptions, ApiVerb, ShutdownHandle, kubeconfig_yaml,
    plain_http_client,
};
pub use error::{ApiError, SimError};
pub use physics::{Physics, PhysicsOptions};

/// Helpers of the crate's unit tests.
#[cfg(test)]
pub(crate) mod test_support {
    use std::future::Future;
    use std::time::Duration;

    /// How long (real time) a test waits for the emulated clusters to get somewhere.
    const PATIENCE: Duration = Duration::from_secs(20);

    /// Polls `probe` until it yields a value, failing the test (naming `what`) after
    /// [`PATIENCE`].
    pub(crate) async fn eventually<T, F, Fut>(what: &str, mut probe: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        let deadline = tokio::time::Instant::now() + PATIENCE;
        loop {
            if let Some(value) = probe().await {
                return value;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "timed out waiting for {what}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
