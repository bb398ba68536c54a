//! `joinery simulate`: one process runs the emulated Kubernetes API, the cluster physics,
//! the simulated cloud (or a fake of a real one: Exoscale, Clever Cloud, a Cluster API
//! management cluster) and the real host with its real wasm plugins, applies a scenario, and
//! reports what happened.
//!
//! [`Simulation::start`] brings the pieces up (also used by tests that need a whole cluster);
//! [`run_scenario`] drives a [`Scenario`] to its end and returns a [`Report`].
//!
//! The modules: `simulation` (the [`Simulation`] and its options), `clouds` (the fakes of
//! real clouds, one module each, and the plugin registry with their grants), `expectations`
//! ([`unmet`], [`judge_lag`]), `run` ([`run_scenario`]), `error`, and the public [`scenario`],
//! [`observer`], [`report`] and [`plot`], [`trace`] (workload traces and their generators),
//! [`snapshot`] (a cluster snapshot as the starting state) and [`virtual_time`] (how a simulation runs
//! faster than real time and the same on every run). Everything the crate offers is re-exported here.

mod buffers;
pub mod clock_discipline;
mod clouds;
pub mod compare;
mod error;
mod expectations;
pub mod observer;
pub mod plot;
pub mod report;
mod run;
pub mod scenario;
mod simulation;
pub mod snapshot;
pub mod trace;
pub mod virtual_time;

pub use clouds::{
    CleverCloud, CleverCloudGrant, ClusterApi, ClusterApiGrant, EXOSCALE_SECRET, ExoscaleGrant,
    HANDS_ON_NAMESPACE, HandsOn, PluginLink, declared_boot, simulation_registry,
    simulation_registry_with,
};
pub use error::SimulateError;
pub use expectations::{LAG_REFUSAL_SECONDS, LAG_TOLERANCE_SECONDS, judge_lag, unmet};
pub use observer::{Observation, Observer};
pub use report::Report;
pub use run::{RunOptions, run_scenario, run_scenario_virtual, run_scenario_with};
pub use scenario::{
    CleverCloudSpec, ClusterApiSpec, ExoscaleSpec, Expectations, NodeTarget, Scenario,
    ScenarioError,
};
pub use simulation::{
    DEFAULT_SEED, DEFAULT_SPEED, NODECLASS_CRDS, Simulation, SimulationOptions,
    VIRTUAL_START_UNIX_SECONDS,
};
pub use snapshot::ClusterSnapshot;
