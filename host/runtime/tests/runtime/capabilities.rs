//! Deny by default: each gated host import is refused with an empty grant (and the refusal
//! names the line to add), and works once both the manifest and the grants allow it.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use common::{class, hostile};
use joinery_core::instance_type::InstanceType;
use joinery_runtime::CallError;
use joinery_runtime::contract::CloudError;
use joinery_runtime::services::{
    HostServices, KubeBackend, KubeCallError, KubeTarget, PatchType, StaticSecrets,
};
use serde_json::json;

const NO_GRANTS: &str = "plugins: {}\n";

fn observed(types: &[InstanceType]) -> String {
    types[0]
        .requirements()
        .get("hostile.joinery.dev/result")
        .map(|r| r.values().iter().cloned().collect::<Vec<_>>().join(","))
        .unwrap_or_default()
}

fn internal_message(err: CallError) -> String {
    match err {
        CallError::Cloud {
            error: CloudError::Internal(m),
            ..
        } => m,
        other => panic!("expected the plugin to report the import's error, got {other:?}"),
    }
}

/// A one-route HTTP server on loopback that counts connections.
async fn http_server() -> (u16, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                break;
            };
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let _ = socket.read(&mut buf).await;
                let _ = socket
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
    (port, hits)
}

#[tokio::test]
async fn http_is_denied_without_a_grant_and_no_connection_is_made() {
    let (port, hits) = http_server().await;
    let plugin = hostile(NO_GRANTS, Default::default());
    let url = format!("http://127.0.0.1:{port}/x");
    let err = plugin
        .get_instance_types(&class(json!({"mode": "http", "url": url})))
        .await
        .unwrap_err();
    let message = internal_message(err).to_lowercase();
    assert!(message.contains("denied"), "{message}");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "a denied request must not connect"
    );
}

#[tokio::test]
async fn http_works_to_an_exactly_granted_loopback_address() {
    let (port, hits) = http_server().await;
    let plugin = hostile(
        "plugins:\n  hostile:\n    http: [\"http://127.0.0.1:*\"]\n",
        Default::default(),
    );
    let url = format!("http://127.0.0.1:{port}/x");
    let types = plugin
        .get_instance_types(&class(json!({"mode": "http", "url": url})))
        .await
        .unwrap();
    assert_eq!(observed(&types), "http-200");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn http_to_a_granted_name_resolving_to_loopback_is_denied() {
    let (port, hits) = http_server().await;
    // Both sides allow the *name* localhost; it resolves to a loopback address, which only an
    // exact address grant may reach.
    let mut manifest = common::hostile_manifest();
    manifest
        .capabilities
        .http
        .push(joinery_runtime::grants::HttpPattern::parse("http://localhost:*").unwrap());
    let plugin = common::hostile_with(
        manifest,
        "plugins:\n  hostile:\n    http: [\"http://localhost:*\"]\n",
        Default::default(),
    );
    let url = format!("http://localhost:{port}/x");
    let err = plugin
        .get_instance_types(&class(json!({"mode": "http", "url": url})))
        .await
        .unwrap_err();
    assert!(internal_message(err).to_lowercase().contains("denied"));
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

/// A Kubernetes backend that answers every get with a fixed object and counts calls.
#[derive(Default)]
struct FakeKube {
    calls: AtomicUsize,
}

#[async_trait]
impl KubeBackend for FakeKube {
    async fn get(&self, target: &KubeTarget, name: &str) -> Result<String, KubeCallError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(
            json!({"kind": "ConfigMap", "metadata": {"name": name, "namespace": target.namespace}})
                .to_string(),
        )
    }
    async fn list(&self, _: &KubeTarget, _: Option<&str>) -> Result<String, KubeCallError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(json!({"items": []}).to_string())
    }
    async fn create(&self, _: &KubeTarget, _: &str) -> Result<String, KubeCallError> {
        Err(KubeCallError::Invalid("not in this test".into()))
    }
    async fn patch(
        &self,
        _: &KubeTarget,
        _: &str,
        _: PatchType,
        _: &str,
    ) -> Result<String, KubeCallError> {
        Err(KubeCallError::Invalid("not in this test".into()))
    }
    async fn delete(&self, _: &KubeTarget, _: &str) -> Result<(), KubeCallError> {
        Err(KubeCallError::Invalid("not in this test".into()))
    }
}

fn with_kube(kube: Arc<FakeKube>) -> HostServices {
    HostServices {
        kube,
        ..Default::default()
    }
}

#[tokio::test]
async fn kubernetes_is_denied_without_a_grant() {
    let kube = Arc::new(FakeKube::default());
    let plugin = hostile(NO_GRANTS, with_kube(kube.clone()));
    let err = plugin
        .get_instance_types(&class(json!({"mode": "kube"})))
        .await
        .unwrap_err();
    let message = internal_message(err);
    assert!(message.starts_with("denied"), "{message}");
    assert!(
        message.contains("resources: [configmaps]") && message.contains("grants file"),
        "{message}"
    );
    assert_eq!(
        kube.calls.load(Ordering::SeqCst),
        0,
        "a denied call must not reach the cluster"
    );
}

#[tokio::test]
async fn kubernetes_works_when_granted_and_only_for_the_granted_verb() {
    let kube = Arc::new(FakeKube::default());
    let grants = "plugins:\n  hostile:\n    kubernetes:\n      - {group: \"\", resources: [configmaps], verbs: [get]}\n";
    let plugin = hostile(grants, with_kube(kube.clone()));
    plugin
        .get_instance_types(&class(json!({"mode": "kube"})))
        .await
        .unwrap();
    assert_eq!(kube.calls.load(Ordering::SeqCst), 1);
    let err = plugin
        .get_instance_types(&class(json!({"mode": "kube", "verb": "list"})))
        .await
        .unwrap_err();
    assert!(internal_message(err).contains("verbs: [list]"));
    assert_eq!(kube.calls.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn secrets_are_denied_without_a_grant_and_readable_with_one() {
    let secrets = StaticSecrets::default().with("test-secret", &[("user", b"u"), ("key", b"k")]);
    let services = HostServices {
        secrets: Arc::new(secrets),
        ..Default::default()
    };
    let denied = hostile(NO_GRANTS, services.clone());
    let err = denied
        .get_instance_types(&class(json!({"mode": "secret"})))
        .await
        .unwrap_err();
    let message = internal_message(err);
    assert!(
        message.starts_with("denied") && message.contains("plugins.hostile.secrets"),
        "{message}"
    );

    let granted = hostile(
        "plugins:\n  hostile:\n    secrets: [test-secret]\n",
        services,
    );
    let types = granted
        .get_instance_types(&class(json!({"mode": "secret"})))
        .await
        .unwrap();
    assert_eq!(observed(&types), "secret-2-keys");
    let err = granted
        .get_instance_types(&class(json!({"mode": "secret", "secret": "other"})))
        .await
        .unwrap_err();
    assert!(internal_message(err).starts_with("denied"));
}

#[tokio::test]
async fn cache_config_and_log_are_always_available() {
    let plugin = hostile(
        "plugins:\n  hostile:\n    config: {mode: cache}\n",
        Default::default(),
    );
    // The mode comes from the operator's config this time: the config import works.
    plugin
        .get_instance_types(&class(json!({})))
        .await
        .expect("cache round trip");
    plugin
        .get_instance_types(&class(json!({"mode": "log", "count": 500})))
        .await
        .expect("logging (even too much) never fails a call");
}

/// A plugin granted only `get configmaps` in one namespace tries to reach other objects by
/// smuggling path characters into each part of its call. Every attempt is refused before
/// the cluster is touched, with an error naming the part.
#[tokio::test]
async fn kubernetes_path_injection_is_refused_in_every_part() {
    let kube = Arc::new(FakeKube::default());
    let grants = "plugins:\n  hostile:\n    kubernetes:\n      - {group: \"\", resources: [configmaps], verbs: [get], namespaces: [kube-system]}\n";
    let plugin = hostile(grants, with_kube(kube.clone()));
    // The granted call itself works, so the refusals below are about the injected values.
    plugin
        .get_instance_types(&class(json!({"mode": "kube"})))
        .await
        .unwrap();
    assert_eq!(kube.calls.load(Ordering::SeqCst), 1);
    let payloads = [
        "v1/namespaces/joinery/secrets/creds?",
        "..",
        "x/../../secrets",
        "x?watch=true",
        "x#frag",
        "x%2F..%2Fsecrets",
        "x/y",
    ];
    for payload in payloads {
        for field in ["version", "name", "namespace", "resource", "group"] {
            let mut spec = json!({"mode": "kube"});
            spec[field] = json!(payload);
            let err = plugin.get_instance_types(&class(spec)).await.unwrap_err();
            let message = internal_message(err);
            assert!(
                message.starts_with("invalid"),
                "{field} = {payload:?}: {message}"
            );
            assert!(
                message.contains(&format!("kubernetes {field} ")),
                "{field} = {payload:?}: {message}"
            );
        }
    }
    assert_eq!(
        kube.calls.load(Ordering::SeqCst),
        1,
        "no injected call may reach the cluster"
    );
    // The plugin is still healthy afterwards.
    plugin
        .get_instance_types(&class(json!({"mode": "kube"})))
        .await
        .unwrap();
}

/// A plugin that puts the secret values it was given into its error, its panic message
/// (stderr) and its logs: what reaches the caller (and from there Events and conditions)
/// carries `[redacted]` instead.
#[tokio::test]
async fn secret_values_never_leave_in_errors_or_stderr() {
    const TOKEN: &str = "K10a7c9e1f0::server:hunter2hunter2";
    let secrets = StaticSecrets::default().with(
        "test-secret",
        &[("token", TOKEN.as_bytes()), ("pin", b"12")],
    );
    let services = HostServices {
        secrets: Arc::new(secrets),
        ..Default::default()
    };
    let plugin = hostile(
        "plugins:\n  hostile:\n    secrets: [test-secret]\n",
        services,
    );
    let err = plugin
        .get_instance_types(&class(json!({"mode": "leak"})))
        .await
        .unwrap_err();
    let shown = err.to_string();
    assert!(
        !shown.contains(TOKEN) && !shown.contains("hunter2"),
        "{shown}"
    );
    assert!(shown.contains("[redacted]"), "{shown}");
    let err = plugin
        .get_instance_types(&class(json!({"mode": "leak", "leakBy": "trap"})))
        .await
        .unwrap_err();
    assert!(matches!(err, CallError::Trap { .. }), "{err:?}");
    let shown = err.to_string();
    assert!(
        !shown.contains("hunter2") && shown.contains("[redacted]"),
        "{shown}"
    );
    // A later call that repeats the value (say, from the cache) is scrubbed too.
    let err = plugin
        .get_instance_types(&class(json!({"mode": "leak"})))
        .await
        .unwrap_err();
    assert!(!err.to_string().contains("hunter2"));
}

/// Everything the host logs while this test binary runs, for tests that check what the host
/// says about a plugin (each looks for values of its own).
fn host_logs() -> String {
    use std::sync::{Mutex, OnceLock};
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    #[derive(Clone)]
    struct Capture(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Capture {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let logs = LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let capture = Capture(logs.clone());
        let _ = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || capture.clone())
            .try_init();
        logs
    });
    String::from_utf8_lossy(&logs.lock().unwrap()).into_owned()
}

/// A secret value the plugin was given, put in an HTTP host name it has no grant for and in
/// a Kubernetes object name the host refuses: the host's own warnings about both quote the
/// plugin's input, and are scrubbed as the plugin's words are.
#[tokio::test]
async fn the_hosts_warnings_about_a_plugins_requests_are_scrubbed() {
    host_logs();
    // Valid in a host name, not in an object name (the underscore).
    const VALUE: &str = "hostname_secret_4242";
    let secrets = StaticSecrets::default().with("test-secret", &[("token", VALUE.as_bytes())]);
    let services = HostServices {
        secrets: Arc::new(secrets),
        ..Default::default()
    };
    let plugin = hostile(
        "plugins:\n  hostile:\n    secrets: [test-secret]\n    kubernetes:\n      - {group: \"\", resources: [configmaps], verbs: [get], namespaces: [kube-system]}\n",
        services,
    );
    plugin
        .get_instance_types(&class(json!({"mode": "leak", "leakBy": "requests"})))
        .await
        .unwrap();
    let logs = host_logs();
    assert!(
        logs.contains("outgoing request denied") && logs.contains("[redacted].example.com"),
        "the denial is logged, scrubbed: {logs}"
    );
    assert!(
        logs.contains("kubernetes call refused") && logs.contains("[redacted]"),
        "the refusal is logged, scrubbed: {logs}"
    );
    assert!(!logs.contains(VALUE), "{logs}");
}

/// 500 denied requests in one call: the host's warnings about them count toward the call's
/// log cap (200 lines), like the plugin's own lines.
#[tokio::test]
async fn denied_request_warnings_count_toward_the_log_cap() {
    host_logs();
    let plugin = hostile("plugins:\n  hostile: {}\n", Default::default());
    let _ = plugin
        .get_instance_types(&class(
            json!({"mode": "http", "url": "http://flood-marker-77.example.com/", "count": 500}),
        ))
        .await;
    let logs = host_logs();
    let denials = logs
        .lines()
        .filter(|l| l.contains("outgoing request denied") && l.contains("flood-marker-77"))
        .count();
    assert_eq!(denials, 200, "the cap holds the host's warnings too");
    assert!(logs.contains("plugin logs too much"), "{logs}");
}

/// Components of most non-Rust toolchains import `wasi:filesystem` and `wasi:sockets`; they
/// load, and those imports reach nothing: no directory is preopened, and TCP, UDP and name
/// lookups are refused — even for a plugin granted HTTP to the very address it tries.
#[tokio::test]
async fn filesystem_and_sockets_are_linked_but_reach_nothing() {
    let (port, hits) = http_server().await;
    let plugin = hostile(
        "plugins:\n  hostile:\n    http: [\"http://127.0.0.1:*\"]\n",
        Default::default(),
    );
    let imports = plugin.imports();
    assert!(
        imports.iter().any(|i| i.starts_with("wasi:filesystem/")),
        "{imports:?}"
    );
    assert!(
        imports.iter().any(|i| i.starts_with("wasi:sockets/")),
        "{imports:?}"
    );
    let existing = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let types = plugin
        .get_instance_types(&class(json!({"mode": "fs", "path": existing})))
        .await
        .unwrap();
    assert_eq!(observed(&types), "fs-denied");
    assert!(
        !std::path::Path::new("escape.txt").exists(),
        "nothing was written"
    );
    let types = plugin
        .get_instance_types(&class(
            json!({"mode": "socket", "url": format!("127.0.0.1:{port}")}),
        ))
        .await
        .unwrap();
    assert_eq!(observed(&types), "socket-denied");
    assert_eq!(
        hits.load(Ordering::SeqCst),
        0,
        "no connection reached the listener"
    );
}
