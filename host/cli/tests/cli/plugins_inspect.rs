//! `joinery plugins inspect --grants`: what the plugin runs under, as the runtime applies it.

use crate::support::joinery;

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

/// The exoscale plugin asks for `https://api-*.exoscale.com` and one secret. A grant of the
/// broader `https://*.exoscale.com`, an unrelated host, an extraHttp address and two secrets
/// leaves it the narrower pattern, the extraHttp address and the one secret both name.
#[test]
fn inspect_with_grants_prints_the_effective_capabilities() {
    let dir = tempfile::tempdir().unwrap();
    let grants = dir.path().join("grants.yaml");
    std::fs::write(
        &grants,
        "plugins:\n  exoscale:\n    http: [\"https://*.exoscale.com\", \"https://example.org\"]\n    extraHttp: [\"http://127.0.0.1:40001\"]\n    secrets: [exoscale-credentials, other]\n  k3s:\n    secrets: [k3s-join]\n",
    )
    .unwrap();
    let grants = grants.to_str().unwrap();
    let (ok, out, err) = joinery(&["plugins", "inspect", "exoscale", "--grants", grants]);
    assert!(ok, "{err}");
    let effective = out
        .split("effective under the grants")
        .nth(1)
        .unwrap_or_else(|| panic!("no effective section: {out}"));
    assert!(
        effective
            .contains("http:       https://api-*.exoscale.com, http://127.0.0.1:40001 (extraHttp)")
            && effective.contains("secrets:    exoscale-credentials\n"),
        "{out}"
    );
    let (ok, out, err) = joinery(&["plugins", "inspect", "k3s", "--grants", grants, "--json"]);
    assert!(ok, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // A renderer requests nothing; the secrets granted to it reach it whole.
    assert_eq!(
        v["effectiveCapabilities"]["secrets"],
        serde_json::json!(["k3s-join"]),
        "{v}"
    );
}
