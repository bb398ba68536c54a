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
    Sim(#[from] joinery_emulator::SimError),
    /// The plugins could not be loaded.
    #[error("plugins: {0}")]
    Plugins(String),
    /// The static cluster could not be written into the emulated API server.
    #[error("cannot preload the static cluster: {0}")]
    Preload(String),
    /// The controllers failed to start.
    #[error("controller: {0}")]
    Controller(#[from] joinery_controller::ControllerError),
    /// A virtual-time run could not start, or stalled.
    #[error(transparent)]
    VirtualTime(#[from] crate::virtual_time::VirtualTimeError),
    /// A scenario step could not be carried out (a node fault on a node the physics does not
    /// run); the message names the node.
    #[error("{0}")]
    Step(String),
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
