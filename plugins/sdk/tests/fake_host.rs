//! Exercises the host helpers against the native fake host.

#![cfg(all(feature = "renderer", feature = "pricing", feature = "cloud"))]

use joinery_plugin_sdk::log::Level;
use joinery_plugin_sdk::testing::{self, FakeHost};
use joinery_plugin_sdk::{cache, http, kube, log, secrets};

#[derive(serde::Deserialize, Debug, PartialEq)]
#[serde(default, rename_all = "camelCase")]
struct Cfg {
    endpoint: String,
    retries: u32,
}

impl Default for Cfg {
    fn default() -> Self {
        Cfg {
            endpoint: "https://default".into(),
            retries: 3,
        }
    }
}

#[test]
fn config_defaults_parses_and_reports_errors() {
    assert_eq!(joinery_plugin_sdk::config::<Cfg>().unwrap(), Cfg::default());
    let _host =
        testing::install(FakeHost::new().with_config(r#"{"endpoint": "https://x", "retries": 1}"#));
    assert_eq!(
        joinery_plugin_sdk::config::<Cfg>().unwrap(),
        Cfg {
            endpoint: "https://x".into(),
            retries: 1
        }
    );
    let _host = testing::install(FakeHost::new().with_config(""));
    assert_eq!(joinery_plugin_sdk::config_json(), "{}");
    let _host = testing::install(FakeHost::new().with_config(r#"{"retries": "many"}"#));
    let err = joinery_plugin_sdk::config::<Cfg>().unwrap_err();
    assert!(err.starts_with("invalid plugin configuration:"), "{err}");
}

#[test]
fn logs_are_recorded_and_reset() {
    {
        let _host = testing::install(FakeHost::new());
        log::info("one");
        log::error(String::from("two"));
        assert_eq!(
            testing::logs(),
            vec![
                (Level::Info, "one".to_string()),
                (Level::Error, "two".to_string())
            ]
        );
    }
    assert!(testing::logs().is_empty(), "the guard resets the host");
}

#[test]
fn cache_round_trips() {
    let _host = testing::install(FakeHost::new().with_cache("pre", b"filled".to_vec()));
    assert_eq!(cache::get("pre").as_deref(), Some(b"filled".as_slice()));
    cache::set_json("k", &vec![1, 2, 3], 60);
    assert_eq!(cache::get_json::<Vec<u32>>("k"), Some(vec![1, 2, 3]));
    assert_eq!(
        cache::get_json::<String>("k"),
        None,
        "undecodable is a miss"
    );
    cache::remove("k");
    assert_eq!(cache::get("k"), None);
}

#[test]
fn secrets_helpers() {
    let _host = testing::install(FakeHost::new().with_secret("creds", &[("api-key", "abc\n")]));
    assert_eq!(secrets::get_string("creds", "api-key").unwrap(), "abc");
    let err = secrets::get_string("creds", "nope").unwrap_err();
    assert!(
        err.contains("no key `nope`") && err.contains("api-key"),
        "{err}"
    );
    let err = secrets::get("other").unwrap_err();
    assert_eq!(err.kind(), "denied");
    assert!(err.describe().starts_with("denied: "));
}

#[test]
fn kube_helpers() {
    let _host = testing::install(FakeHost::new().with_kube(|call| match call {
        kube::KubeCall::List {
            target,
            label_selector,
        } => {
            assert_eq!(target.resource, "configmaps");
            assert_eq!(label_selector.as_deref(), Some("a=b"));
            Ok(r#"{"items": [{"metadata": {"name": "x"}}, {"metadata": {"name": "y"}}]}"#.into())
        }
        kube::KubeCall::Get { name, .. } => {
            Err(kube::KubeError::NotFound(format!("{name} not found")))
        }
        other => panic!("unexpected {other:?}"),
    }));
    let cms = kube::ResourceRef::core("configmaps").namespace("default");
    let items: Vec<serde_json::Value> = kube::list_items(&cms, Some("a=b")).unwrap();
    assert_eq!(items.len(), 2);
    let err = kube::get_json::<serde_json::Value>(&cms, "z").unwrap_err();
    assert!(err.is_not_found());
    assert_eq!(err.to_string(), "not-found: z not found");
    let cloud_err: joinery_plugin_sdk::cloud::CloudError = err.into();
    assert!(matches!(
        cloud_err,
        joinery_plugin_sdk::cloud::CloudError::NotFound(_)
    ));
}

#[test]
fn http_through_the_fake_host() {
    let _host = testing::install(FakeHost::new().with_http(|req| {
        assert_eq!(req.method, "POST");
        assert_eq!(req.header_value("content-type"), Some("application/json"));
        log::debug("handler may log");
        let body: serde_json::Value = serde_json::from_slice(&req.body).unwrap();
        Ok(http::Response::new(
            200,
            serde_json::to_vec(&body["n"]).unwrap(),
        ))
    }));
    let n: u32 = http::send_json(
        "POST",
        "https://api.example.com/echo",
        &[],
        &serde_json::json!({"n": 7}),
    )
    .unwrap();
    assert_eq!(n, 7);
    assert_eq!(testing::logs().len(), 1);
    assert!(matches!(
        http::Request::get("not a url").send(),
        Err(http::Error::InvalidRequest(_))
    ));
}

#[test]
fn http_errors_map_to_cloud_errors() {
    use joinery_plugin_sdk::cloud::CloudError;
    let denied: CloudError = http::Error::Transport("HttpRequestDenied".into()).into();
    assert!(matches!(denied, CloudError::Invalid(m) if m.contains("HttpRequestDenied")));
    let refused: CloudError = http::Error::Transport("ConnectionRefused".into()).into();
    assert!(matches!(refused, CloudError::Retryable(_)));
    let throttled: CloudError = http::Error::Status {
        status: 429,
        body: String::new(),
        retry_after_ms: Some(2000),
    }
    .into();
    assert!(matches!(throttled, CloudError::Retryable(r) if r.retry_after_ms == Some(2000)));
}

#[test]
fn renderer_context_helpers() {
    use joinery_plugin_sdk::renderer::{KeyValue, RenderContext, Taint};
    let mut c = RenderContext::for_claim("n");
    c.labels = vec![
        KeyValue::new("b", "1"),
        KeyValue::new("a", "2"),
        KeyValue::new("b", "3"),
    ];
    c.taints = vec![
        Taint::new("x", Some("1"), "NoSchedule"),
        Taint::new("x", Some("2"), "NoSchedule"),
    ];
    c.startup_taints = vec![Taint::new("y", None, "NoExecute")];
    c.secrets = vec![KeyValue::new("s/k", "v")];
    assert_eq!(c.sorted_labels(), vec![("a", "2"), ("b", "3")]);
    let specs: Vec<String> = c.node_taints().iter().map(Taint::to_spec).collect();
    assert_eq!(
        specs,
        [
            "x=1:NoSchedule",
            "y:NoExecute",
            "karpenter.sh/unregistered:NoExecute"
        ]
    );
    assert_eq!(c.secret("s/k"), Some("v"));
    assert!(c.kubelet_settings().unwrap().is_empty());
}

#[test]
fn pricing_export_checks_the_batch_length() {
    use joinery_plugin_sdk::bindings::pricing::exports::joinery::plugin::pricing::Guest;
    use joinery_plugin_sdk::pricing::{PriceRequest, Pricing, PricingExport};

    struct Short;
    impl Pricing for Short {
        fn price(_: Vec<PriceRequest>) -> Result<Vec<Option<f64>>, String> {
            Ok(vec![Some(1.0)])
        }
    }
    let reqs = vec![
        PriceRequest::new("a", 1000, 1 << 30),
        PriceRequest::new("b", 2000, 1 << 31),
    ];
    let err = <PricingExport<Short> as Guest>::price(reqs).unwrap_err();
    assert!(err.contains("returned 1 prices for 2 requests"), "{err}");
}

#[test]
fn cloud_defaults_say_not_implemented() {
    use joinery_plugin_sdk::cloud::{CloudError, CloudProvider, InstanceType, NodeClass};
    struct Minimal;
    impl CloudProvider for Minimal {
        fn get_instance_types(_: NodeClass) -> Result<Vec<InstanceType>, CloudError> {
            Ok(Vec::new())
        }
    }
    assert_eq!(
        Minimal::list().unwrap_err(),
        CloudError::Internal("not implemented: list".into())
    );
    assert!(Minimal::resolve_node_class(NodeClass::new("x", "{}")).is_ok());
}
