use super::*;
use std::time::{Duration, UNIX_EPOCH};

fn at(text: &str) -> SystemTime {
    parse_timestamp(Some(&json!(text))).unwrap()
}

#[test]
fn timestamps_parse_with_fractions_and_offsets() {
    assert_eq!(at("1970-01-01T00:00:00Z"), UNIX_EPOCH);
    assert_eq!(
        at("2024-02-29T12:00:00Z"),
        UNIX_EPOCH + Duration::from_secs(19_782 * 86_400 + 12 * 3600)
    );
    assert_eq!(at("2024-02-29T14:00:00+02:00"), at("2024-02-29T12:00:00Z"));
    assert_eq!(
        at("2024-02-29T12:00:00.500000Z"),
        at("2024-02-29T12:00:00Z") + Duration::from_millis(500)
    );
    assert!(parse_timestamp(Some(&json!("yesterday"))).is_none());
}

#[test]
fn durations_read_like_kubectl_ages() {
    let cases = [
        (-5, "<invalid>"),
        (-1, "0s"),
        (45, "45s"),
        (119, "119s"),
        (200, "3m20s"),
        (300, "5m"),
        (45 * 60, "45m"),
        (5 * 3600 + 12 * 60, "5h12m"),
        (30 * 3600, "30h"),
        (51 * 3600, "2d3h"),
        (400 * 86_400, "400d"),
        (740 * 86_400, "2y10d"),
        (3650 * 86_400, "10y"),
    ];
    for (seconds, expected) in cases {
        assert_eq!(human_duration(seconds), expected, "{seconds}s");
    }
}

#[test]
fn pod_status_follows_containers_and_deletion() {
    let pod = json!({"status": {"phase": "Running", "containerStatuses": [
        {"name": "a", "ready": false, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
    ]}});
    assert_eq!(pod_status(&pod), "CrashLoopBackOff");
    let pod = json!({"spec": {"initContainers": [{"name": "i"}, {"name": "j"}]}, "status": {"phase": "Pending", "initContainerStatuses": [
        {"name": "i", "state": {"terminated": {"exitCode": 0}}},
        {"name": "j", "state": {"running": {}}}
    ]}});
    assert_eq!(pod_status(&pod), "Init:1/2");
    let pod = json!({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}, "status": {"phase": "Running"}});
    assert_eq!(pod_status(&pod), "Terminating");
    assert_eq!(
        pod_status(&json!({"status": {"phase": "Pending"}})),
        "Pending"
    );
}

#[test]
fn selectors_render_sorted_in_query_syntax() {
    let selector = json!({"matchLabels": {"tier": "web", "app": "shop"}, "matchExpressions": [
        {"key": "zone", "operator": "In", "values": ["b", "a"]},
        {"key": "gpu", "operator": "DoesNotExist"}
    ]});
    assert_eq!(
        label_selector_string(Some(&selector)),
        "app=shop,!gpu,tier=web,zone in (a,b)"
    );
}

#[test]
fn accept_header_selects_the_table_version() {
    let request = TableRequest::from_request(
        "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        None,
    )
    .unwrap();
    assert_eq!(request.api_version, "meta.k8s.io/v1");
    assert_eq!(request.include, IncludeObject::Metadata);
    assert!(TableRequest::from_request("application/json", None).is_none());
    let beta = TableRequest::from_request(
        "application/json;as=Table;v=v1beta1;g=meta.k8s.io",
        Some("Object"),
    )
    .unwrap();
    assert_eq!(
        (beta.api_version, beta.include),
        ("meta.k8s.io/v1beta1", IncludeObject::Object)
    );
}

#[test]
fn custom_resource_columns_follow_the_crd() {
    let crd = json!({"spec": {"versions": [{"name": "v1", "additionalPrinterColumns": [
        {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
        {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
        {"name": "Zone", "type": "string", "priority": 1, "jsonPath": ".metadata.labels.topology\\.kubernetes\\.io/zone"}
    ]}]}});
    let kind = ResourceKind {
        group: "example.com".into(),
        version: "v1".into(),
        plural: "widgets".into(),
        singular: "widget".into(),
        kind: "Widget".into(),
        list_kind: "WidgetList".into(),
        namespaced: true,
        short_names: vec![],
        categories: vec![],
        has_status: true,
        extra_subresources: vec![],
        schema: None,
        crd_name: Some("widgets.example.com".into()),
    };
    let printer = Printer::for_kind(&kind, Some(&crd));
    let object = json!({
        "metadata": {"name": "w", "labels": {"topology.kubernetes.io/zone": "z1"}},
        "spec": {"size": 3},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    });
    let request = TableRequest {
        api_version: "meta.k8s.io/v1",
        include: IncludeObject::None,
    };
    let table = printer.table(request, &[object], json!({}), SystemTime::now());
    let names: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Name", "Ready", "Size", "Zone"]);
    assert_eq!(table["rows"][0]["cells"], json!(["w", "True", 3, "z1"]));
    assert!(table["rows"][0].get("object").is_none());
    let default = Printer::for_kind(&kind, None);
    assert_eq!(
        default.definitions().len(),
        2,
        "Name and Age when the CRD declares no columns"
    );
}
