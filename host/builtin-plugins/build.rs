//! Builds the guest workspace (`plugins/`) for `wasm32-wasip2`, once, so this crate can embed
//! the shipped plugins and the runtime's tests can load the test-only ones (`hostile`).
//!
//! The nested cargo gets its own target directory (`target/plugins`, or
//! `JOINERY_PLUGINS_TARGET_DIR`): it must not wait on the lock of the build running this
//! script. `./dev test` runs the plugins' native unit tests in that same directory, so guest
//! builds stay out of the host's target directory.

use std::env;
use std::path::PathBuf;
use std::process::Command;

const SOURCES: &[&str] = &[
    "Cargo.toml",
    "Cargo.lock",
    "sdk",
    "template",
    "k3s",
    "rke2",
    "kubeadm",
    "synthetic-pricing",
    "clevercloud-pricing",
    "simcloud",
    "exoscale",
    "clevercloud",
    "clusterapi",
    "testing",
];

fn main() {
    let manifest_dir =
        PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let repo = manifest_dir.join("../..");
    let plugins = repo.join("plugins");
    for source in SOURCES {
        println!("cargo:rerun-if-changed={}", plugins.join(source).display());
    }
    println!("cargo:rerun-if-changed={}", repo.join("wit").display());
    // The example renderer built with the guest workspace (its tests load it).
    println!(
        "cargo:rerun-if-changed={}",
        repo.join("examples/plugins/talos").display()
    );
    println!("cargo:rerun-if-env-changed=JOINERY_PLUGINS_TARGET_DIR");

    // A relative JOINERY_PLUGINS_TARGET_DIR is taken from the repository root, as `./dev` does.
    let target_dir = env::var_os("JOINERY_PLUGINS_TARGET_DIR")
        .map(|dir| repo.join(dir))
        .unwrap_or_else(|| repo.join("target").join("plugins"));
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(&plugins)
        .args([
            "build",
            "--release",
            "--workspace",
            "--target",
            "wasm32-wasip2",
            "--target-dir",
        ])
        .arg(&target_dir);
    // Do not leak the host build's settings into the guest build.
    for (key, _) in env::vars_os() {
        let key = key.to_string_lossy().to_string();
        if key.starts_with("CARGO_FEATURE_")
            || key.starts_with("CARGO_CFG_")
            || key.starts_with("CARGO_PKG_")
            || key.starts_with("CARGO_MANIFEST_")
            || matches!(
                key.as_str(),
                "RUSTFLAGS"
                    | "CARGO_ENCODED_RUSTFLAGS"
                    | "CARGO_TARGET_DIR"
                    | "CARGO_BUILD_TARGET"
                    | "TARGET"
                    | "HOST"
                    | "OUT_DIR"
                    | "OPT_LEVEL"
                    | "PROFILE"
                    | "DEBUG"
                    | "RUSTC_WORKSPACE_WRAPPER"
                    | "CARGO_PRIMARY_PACKAGE"
            )
        {
            command.env_remove(key);
        }
    }
    let status = command
        .status()
        .expect("cannot run cargo to build the wasm plugins");
    if !status.success() {
        panic!(
            "building the wasm plugins in plugins/ failed (see the output above). If the error says the \
             wasm32-wasip2 target is missing, run: rustup target add wasm32-wasip2"
        );
    }
    let out = target_dir.join("wasm32-wasip2").join("release");
    println!("cargo:rustc-env=JOINERY_PLUGIN_WASM_DIR={}", out.display());
}
