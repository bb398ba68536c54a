//! The integration tests of `host/runtime`, one test binary: each file below is a module, so the
//! tests link once instead of once per file (what most of a clean test build's time went to).
//! Run one file's tests with `cargo test --workspace --test runtime <module>::`.

mod capabilities;
mod clevercloud_pricing;
mod common;
mod egress;
mod exoscale;
mod faults;
mod js_renderer;
mod shipped_and_reload;
mod simcloud;
mod versions;
