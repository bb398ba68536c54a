//! The integration tests of `host/simulate`, one test binary: each file below is a module, so the
//! tests link once instead of once per file (what most of a clean test build's time went to).
//! Run one file's tests with `cargo test --workspace --test simulate <module>::`.

mod budgets;
mod examples;
mod exoscale;
mod expiration;
mod failover;
mod hardening;
mod learned;
mod logs;
mod metrics;
mod overlays_volumes;
mod preload;
mod restart;
mod status;
mod writes;
