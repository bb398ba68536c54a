//! The WIT versions this host speaks, one module each (the way Zed keeps one module per
//! extension API version).
//!
//! Each module holds the bindings wasmtime generates for its version and the conversions
//! between them and the version-independent [`crate::contract`] types. Nothing outside the
//! runtime sees a generated type. Supporting a new WIT version means adding a module here
//! (bindings plus conversions) and teaching [`crate::plugin`] to instantiate it; the
//! controllers do not change.

pub mod v0_1;
