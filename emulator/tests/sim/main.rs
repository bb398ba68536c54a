//! The integration tests of `sim`, one test binary: each file below is a module, so the
//! tests link once instead of once per file (what most of a clean test build's time went to).
//! Run one file's tests with `cargo test --workspace --test sim <module>::`.

mod cloud;
mod conformance;
mod exoscale;
mod kubectl;
mod limits;
mod physics;
