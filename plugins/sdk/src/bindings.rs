//! The raw bindings `wit-bindgen` generates from the WIT package `joinery:plugin@0.2.0`,
//! one module per world, each behind its cargo feature.
//!
//! Prefer the friendly paths ([`crate::renderer`], [`crate::pricing`], [`crate::cloud`]) and
//! the helpers; reach in here only for something the SDK does not wrap (for example the
//! full `wasi:http` API).
//!
//! Each world is generated with `pub_export_macro`, which makes `wit-bindgen` describe the
//! world's *imports* in one custom section (always linked, pruned to the imports the code
//! really calls) and its *exports* in a second section that only the export macro emits.
//! Enabling several world features at once (which cargo does when a workspace builds plugins
//! of different kinds together) therefore never adds exports or unused imports to a component.

/// Bindings of the `userdata-renderer-plugin` world.
#[cfg(feature = "renderer")]
#[allow(missing_docs, unsafe_code, unused_qualifications)]
pub mod renderer {
    wit_bindgen::generate!({
        world: "userdata-renderer-plugin",
        path: "wit/v0.2",
        pub_export_macro: true,
        export_macro_name: "__joinery_export_renderer_world",
        default_bindings_module: "joinery_plugin_sdk::bindings::renderer",
        additional_derives: [PartialEq],
    });
}

/// Bindings of the `pricing-plugin` world, including the `wasi:http` client interfaces.
#[cfg(feature = "pricing")]
#[allow(missing_docs, unsafe_code, unused_qualifications)]
pub mod pricing {
    wit_bindgen::generate!({
        world: "pricing-plugin",
        path: "wit/v0.2",
        pub_export_macro: true,
        export_macro_name: "__joinery_export_pricing_world",
        default_bindings_module: "joinery_plugin_sdk::bindings::pricing",
        additional_derives: [PartialEq],
        additional_derives_ignore: ["stream-error"],
        generate_all,
    });
}

/// Bindings of the `cloud-provider-plugin` world, including the `wasi:http` client interfaces.
#[cfg(feature = "cloud")]
#[allow(missing_docs, unsafe_code, unused_qualifications)]
pub mod cloud {
    wit_bindgen::generate!({
        world: "cloud-provider-plugin",
        path: "wit/v0.2",
        pub_export_macro: true,
        export_macro_name: "__joinery_export_cloud_world",
        default_bindings_module: "joinery_plugin_sdk::bindings::cloud",
        additional_derives: [PartialEq],
        additional_derives_ignore: ["stream-error"],
        generate_all,
    });
}
