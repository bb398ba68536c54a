//! The integration tests of `host/cli`, one test binary: each file below is a module, so the
//! tests link once instead of once per file (what most of a clean test build's time went to).
//! Run one file's tests with `cargo test --workspace --test cli <module>::`.

mod cli;
mod custom_renderer;
mod disrupt;
mod exoscale_conformance;
mod explain_capacity;
mod hands_on;
mod helm;
mod helm_install;
mod management;
mod plugin_failures;
mod plugins_inspect;
mod plugins_new;
mod plugins_package;
mod prometheus;
mod run;
mod schedule;
mod sim_kubectl;
mod simulate;
mod support;
