//! What can go wrong while setting up or running a simulation.

use crate::scenario::ScenarioError;

/// What can go wrong while setting up or running a simulation.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    /// The scenario is invalid.
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    /// An emulator component failed to start.
    #[error("emulated cluster: {0}")]
    Sim(#[from] joinery_sim::SimError),
    /// The plugins could not be loaded.
    #[error("plugins: {0}")]
    Plugins(String),
    /// The static cluster could not be written into the emulated API server.
    #[error("cannot preload the static cluster: {0}")]
    Preload(String),
    /// The controllers failed to start.
    #[error("controller: {0}")]
    Controller(#[from] joinery_controller::ControllerError),
    /// The runtime of a virtual-time run could not be started.
    #[error("cannot start the virtual-time runtime: {0}")]
    Runtime(std::io::Error),
    /// A Kubernetes API call failed; `what` names the object.
    #[error("{what}: {source}")]
    Kube {
        /// The object or action.
        what: String,
        /// The API error.
        source: kube::Error,
    },
}

pub(crate) fn kube_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> SimulateError {
    let what = what.into();
    move |source| SimulateError::Kube { what, source }
}
