//! `joinery plugins inspect --grants`: what the plugin runs under, as the runtime applies it.

use std::process::Command;

use crate::support::repo;

fn joinery(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_joinery"))
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// The template renderer asks for 16 MiB, 1000 ms and 8 concurrent calls. A grant lowering
/// memory and concurrency lowers them; a grant raising the timeout leaves the manifest's (a
/// grant only caps). Inspect prints the limits in force, not the manifest's.
#[test]
fn inspect_with_grants_prints_the_effective_limits() {
    let dir = tempfile::tempdir().unwrap();
    let grants = dir.path().join("grants.yaml");
    std::fs::write(
        &grants,
        "plugins:\n  template:\n    limits: {memoryMiB: 8, timeoutMs: 5000, maxConcurrency: 2}\n",
    )
    .unwrap();
    let grants = grants.to_str().unwrap();

    let (ok, out, err) = joinery(&["plugins", "inspect", "template", "--grants", grants]);
    assert!(ok, "{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("limits:"))
        .unwrap_or_else(|| panic!("no limits line in {out}"));
    assert!(
        line.contains("memory 8 MiB, timeout 1000 ms, concurrency 2"),
        "{line}"
    );

    let (ok, out, err) = joinery(&[
        "plugins", "inspect", "template", "--grants", grants, "--json",
    ]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["effectiveLimits"],
        serde_json::json!({"memoryMiB": 8, "timeoutMs": 1000, "maxConcurrency": 2}),
        "{v}"
    );
    assert_eq!(
        v["manifest"]["limits"]["memoryMiB"], 16,
        "the manifest's own"
    );

    // Without grants the limits in force are the manifest's.
    let (ok, out, err) = joinery(&["plugins", "inspect", "template"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("limits:     memory 16 MiB, timeout 1000 ms, concurrency 8"),
        "{out}"
    );
}
