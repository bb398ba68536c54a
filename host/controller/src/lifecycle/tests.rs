use super::*;

fn claim(created: &str, expire_after: Option<&str>) -> NodeClaim {
    let mut spec =
        json!({"nodeClassRef": {"group": "g", "kind": "K", "name": "n"}, "requirements": []});
    if let Some(e) = expire_after {
        spec["expireAfter"] = json!(e);
    }
    serde_json::from_value(
        json!({"metadata": {"name": "c", "creationTimestamp": created}, "spec": spec}),
    )
    .unwrap()
}

fn at(rfc3339: &str) -> std::time::SystemTime {
    system_time(&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        rfc3339.parse().unwrap(),
    ))
}

#[test]
fn a_claim_expires_at_creation_plus_expire_after() {
    assert_eq!(
        expires_at(&claim("2026-01-01T00:00:00Z", Some("90m"))),
        Some(at("2026-01-01T01:30:00Z"))
    );
    assert_eq!(
        expires_at(&claim("2026-01-01T00:00:00Z", None)),
        Some(at("2026-01-31T00:00:00Z")),
        "720h by default"
    );
    assert_eq!(
        expires_at(&claim("2026-01-01T00:00:00Z", Some("Never"))),
        None
    );
}
