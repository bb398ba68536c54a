//! The Helm charts (`charts/joinery`, `charts/joinery-crd`) and the `Dockerfile`, checked with
//! the real Helm: `helm lint --strict`, `helm template` over a matrix of values with assertions
//! on the rendered objects, every rendered object validated against the Kubernetes API types
//! (k8s-openapi, a field the API does not know is an error), the schema's refusal of typos,
//! the CRD chart's sync with `joinery crds`, the chart README's sync with `values.yaml`.
//!
//! Helm comes from `$JOINERY_HELM`, else `target/tools/helm`, which `.ci/install-helm` installs.
//! Without either, the tests that need Helm print a notice and pass; `.ci/run` installs Helm
//! and sets `JOINERY_HELM`, so in CI a missing Helm fails them instead.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::repo;
use serde::Deserialize;
use serde_json::Value;

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("cannot read {path}: {e}"))
}

/// The Helm binary, or `None` after printing why the calling test is skipped. A `JOINERY_HELM`
/// that names no file is an error, not a skip (`.ci/run` sets it, so CI never skips).
pub(crate) fn helm(test: &str) -> Option<PathBuf> {
    if let Some(named) = std::env::var_os("JOINERY_HELM") {
        let named = PathBuf::from(named);
        assert!(
            named.is_file(),
            "JOINERY_HELM={} is not a file; run .ci/install-helm",
            named.display()
        );
        return Some(named);
    }
    let installed = repo().join("target/tools/helm");
    if installed.is_file() {
        return Some(installed);
    }
    println!(
        "NOTICE: no Helm at {} (run .ci/install-helm, or set JOINERY_HELM); skipping {test}",
        installed.display()
    );
    None
}

/// Helm's home directories for this test process.
fn helm_home() -> PathBuf {
    std::env::temp_dir().join(format!("joinery-helm-test-{}", std::process::id()))
}

/// Runs helm; returns (success, stdout, stderr).
pub(crate) fn run_helm(helm: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(helm)
        .args(args)
        .current_dir(repo())
        // Keep Helm away from the user's configuration, caches and repositories (and from
        // another test run's: one directory per test process).
        .env("HELM_CACHE_HOME", helm_home().join("cache"))
        .env("HELM_CONFIG_HOME", helm_home().join("config"))
        .env("HELM_DATA_HOME", helm_home().join("data"))
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Parses a multi-document YAML stream into JSON values, skipping empty documents.
fn documents(text: &str) -> Vec<Value> {
    serde_norway::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).expect("rendered YAML parses"))
        .filter(|v| !v.is_null())
        .collect()
}

/// `helm template` of `charts/joinery` with `values` (a YAML document, may be empty) written to
/// a file and passed with `-f`, plus `extra` arguments; the rendered objects.
fn template(helm: &Path, values: &str, extra: &[&str]) -> Result<Vec<Value>, String> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("values.yaml");
    std::fs::write(
        &file,
        if values.trim().is_empty() {
            "{}\n"
        } else {
            values
        },
    )
    .unwrap();
    let file = file.to_str().unwrap().to_string();
    let mut args = vec![
        "template",
        "joinery",
        "charts/joinery",
        "--namespace",
        "joinery",
        "-f",
        &file,
    ];
    args.extend(extra);
    let (ok, out, err) = run_helm(helm, &args);
    if ok { Ok(documents(&out)) } else { Err(err) }
}

fn render(helm: &Path, values: &str) -> Vec<Value> {
    template(helm, values, &[])
        .unwrap_or_else(|err| panic!("helm template failed:\n{err}\nvalues:\n{values}"))
}

fn find<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

fn one<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found = find(objects, kind);
    assert_eq!(found.len(), 1, "expected one {kind}, found {}", found.len());
    found[0]
}

fn container(objects: &[Value]) -> &Value {
    &one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
}

fn env(objects: &[Value]) -> BTreeMap<String, Value> {
    container(objects)["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e.get("value")
                    .cloned()
                    .unwrap_or_else(|| e["valueFrom"].clone()),
            )
        })
        .collect()
}

fn env_value(objects: &[Value], name: &str) -> Option<String> {
    env(objects)
        .get(name)
        .and_then(|v| v.as_str().map(String::from))
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Every rendered object, validated against the API's types, runs every chart test through this.
fn check_objects(objects: &[Value]) {
    for object in objects {
        if let Err(problem) = validate_against_api_types(object) {
            panic!(
                "{} {}: {problem}\n{}",
                object["kind"],
                object["metadata"]["name"],
                serde_norway::to_string(object).unwrap()
            );
        }
        let labels = &object["metadata"]["labels"];
        assert_eq!(
            labels["app.kubernetes.io/managed-by"], "Helm",
            "{}",
            object["kind"]
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Validation against the Kubernetes API types

/// Deserializes `object` into its k8s-openapi type and serializes it back: a field name the API
/// does not have (misspelled or misplaced) is dropped on the way, a wrong type fails to parse;
/// either way the object differs from what was rendered.
fn validate_against_api_types(object: &Value) -> Result<(), String> {
    use k8s_openapi::api::{apps, core, policy, rbac};
    fn round_trip<T: serde::de::DeserializeOwned + serde::Serialize>(
        object: &Value,
    ) -> Result<Value, String> {
        let typed: T = serde_json::from_value(object.clone())
            .map_err(|e| format!("not a valid object of its kind: {e}"))?;
        Ok(serde_json::to_value(typed).unwrap())
    }
    let back = match (object["apiVersion"].as_str().unwrap_or_default(), object["kind"].as_str().unwrap_or_default()) {
        ("apps/v1", "Deployment") => round_trip::<apps::v1::Deployment>(object)?,
        ("v1", "Service") => round_trip::<core::v1::Service>(object)?,
        ("v1", "ServiceAccount") => round_trip::<core::v1::ServiceAccount>(object)?,
        ("v1", "ConfigMap") => round_trip::<core::v1::ConfigMap>(object)?,
        ("policy/v1", "PodDisruptionBudget") => round_trip::<policy::v1::PodDisruptionBudget>(object)?,
        ("networking.k8s.io/v1", "NetworkPolicy") => round_trip::<k8s_openapi::api::networking::v1::NetworkPolicy>(object)?,
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => round_trip::<rbac::v1::ClusterRole>(object)?,
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => round_trip::<rbac::v1::ClusterRoleBinding>(object)?,
        ("rbac.authorization.k8s.io/v1", "Role") => round_trip::<rbac::v1::Role>(object)?,
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => round_trip::<rbac::v1::RoleBinding>(object)?,
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
            round_trip::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(object)?
        }
        // Not Kubernetes types: the Prometheus Operator's CRDs, checked field by field below.
        ("monitoring.coreos.com/v1", "ServiceMonitor") => return check_service_monitor(object),
        ("monitoring.coreos.com/v1", "PrometheusRule") => return check_prometheus_rule(object),
        (api_version, kind) => return Err(format!("unexpected kind {api_version}/{kind}: add it to validate_against_api_types")),
    };
    match first_difference(&without_nulls(object), &back, "") {
        None => Ok(()),
        Some(path) => Err(format!("the API has no field (or another type) at {path}")),
    }
}

fn check_service_monitor(object: &Value) -> Result<(), String> {
    let allowed_spec = ["endpoints", "selector", "namespaceSelector", "jobLabel"];
    let spec = object["spec"].as_object().ok_or("no spec")?;
    if let Some(key) = spec.keys().find(|k| !allowed_spec.contains(&k.as_str())) {
        return Err(format!("ServiceMonitor spec has an unexpected field {key}"));
    }
    let endpoints = spec["endpoints"]
        .as_array()
        .ok_or("spec.endpoints is not a list")?;
    if endpoints.iter().any(|e| !e["port"].is_string()) {
        return Err("each endpoint needs a port name".into());
    }
    Ok(())
}

/// The PrometheusRule's spec: rule groups, each named, of rules that are either alerts or
/// recordings with an expression, and no field the CRD does not have.
fn check_prometheus_rule(object: &Value) -> Result<(), String> {
    let spec = object["spec"].as_object().ok_or("no spec")?;
    if let Some(key) = spec.keys().find(|k| k.as_str() != "groups") {
        return Err(format!("PrometheusRule spec has an unexpected field {key}"));
    }
    let groups = spec["groups"]
        .as_array()
        .ok_or("spec.groups is not a list")?;
    for group in groups {
        let group = group.as_object().ok_or("a group is not an object")?;
        let allowed = [
            "name",
            "interval",
            "rules",
            "limit",
            "partial_response_strategy",
        ];
        if let Some(key) = group.keys().find(|k| !allowed.contains(&k.as_str())) {
            return Err(format!("a rule group has an unexpected field {key}"));
        }
        if !group["name"].is_string() {
            return Err("a rule group has no name".into());
        }
        for rule in group["rules"]
            .as_array()
            .ok_or("a group has no rules list")?
        {
            let rule = rule.as_object().ok_or("a rule is not an object")?;
            let allowed = [
                "alert",
                "record",
                "expr",
                "for",
                "keep_firing_for",
                "labels",
                "annotations",
            ];
            if let Some(key) = rule.keys().find(|k| !allowed.contains(&k.as_str())) {
                return Err(format!("a rule has an unexpected field {key}"));
            }
            if rule.contains_key("alert") == rule.contains_key("record")
                || !rule["expr"].is_string()
            {
                return Err(format!(
                    "a rule is neither an alert nor a recording with an expr: {rule:?}"
                ));
            }
        }
    }
    Ok(())
}

fn without_nulls(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

/// The path of the first place `a` (rendered) and `b` (round-tripped) differ.
fn first_difference(a: &Value, b: &Value, path: &str) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (key, value) in x {
                let here = format!("{path}.{key}");
                match y.get(key) {
                    None => return Some(here),
                    Some(other) => {
                        if let Some(p) = first_difference(value, other, &here) {
                            return Some(p);
                        }
                    }
                }
            }
            y.keys()
                .find(|k| !x.contains_key(*k))
                .map(|k| format!("{path}.{k} (added)"))
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_difference(p, q, &format!("{path}[{i}]"))),
        // 1 and 1.0 are the same number (the API types hold some integers as floats).
        (Value::Number(x), Value::Number(y)) if x.as_f64() == y.as_f64() => None,
        _ if a == b => None,
        _ => Some(format!("{path} ({a} became {b})")),
    }
}

#[test]
fn the_api_type_check_catches_a_misspelled_field() {
    let mut deployment = serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "i", "volumeMounts": [{"name": "v", "mountPath": "/p"}]}]}}}
    });
    assert_eq!(validate_against_api_types(&deployment), Ok(()));
    deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"][0]["subpath"] =
        "x".into();
    let problem = validate_against_api_types(&deployment).unwrap_err();
    assert!(problem.contains("volumeMounts[0].subpath"), "{problem}");
    deployment["spec"]["replicas"] = "two".into();
    assert!(
        validate_against_api_types(&deployment)
            .unwrap_err()
            .contains("not a valid object")
    );
}

// ---------------------------------------------------------------------------------------------
// The charts, linted and rendered

#[test]
fn both_charts_pass_helm_lint_strict() {
    let Some(helm) = helm("both_charts_pass_helm_lint_strict") else {
        return;
    };
    for chart in ["charts/joinery", "charts/joinery-crd"] {
        let (ok, out, err) = run_helm(&helm, &["lint", "--strict", chart]);
        assert!(ok, "helm lint --strict {chart} failed:\n{out}\n{err}");
        assert!(out.contains("0 chart(s) failed"), "{out}");
    }
}

#[test]
fn lint_passes_for_every_values_case_of_the_matrix() {
    let Some(helm) = helm("lint_passes_for_every_values_case_of_the_matrix") else {
        return;
    };
    for (name, values) in MATRIX {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("values.yaml");
        std::fs::write(&file, values).unwrap();
        let (ok, out, err) = run_helm(
            &helm,
            &[
                "lint",
                "--strict",
                "charts/joinery",
                "-f",
                file.to_str().unwrap(),
            ],
        );
        assert!(
            ok,
            "helm lint --strict with the {name} values failed:\n{out}\n{err}"
        );
    }
}

/// The values matrix: each case is rendered, validated against the API types and linted.
const MATRIX: [(&str, &str); 8] = [
    ("defaults", ""),
    ("two plugin ConfigMaps", PLUGINS),
    (
        "ServiceMonitor on",
        "serviceMonitor:\n  enabled: true\n  additionalLabels: {release: prometheus}\n  endpointConfig: {interval: 15s}\n",
    ),
    ("two replicas", "replicas: 2\n"),
    ("custom settings", CUSTOM_SETTINGS),
    ("grants", GRANTS),
    (
        "NetworkPolicy on",
        "networkPolicy:\n  enabled: true\n  metricsFrom:\n    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}\n",
    ),
    ("dashboards and alerts on", MONITORING),
];

const MONITORING: &str = r#"
grafanaDashboards:
  enabled: true
  label: grafana_dashboard
  labelValue: "yes"
  namespace: monitoring
  annotations: {grafana_folder: Joinery}
prometheusRule:
  enabled: true
  additionalLabels: {release: prometheus}
"#;

const PLUGINS: &str = r#"
plugins:
  - configMap: joinery-plugin-acme-cloud
  - configMap: joinery-plugin.my-renderer
rbac:
  nodeClasses:
    - {group: karpenter.k8s.acme, resource: acmenodeclasses}
"#;

const CUSTOM_SETTINGS: &str = r#"
logLevel: debug
logFormat: text
settings:
  batchIdleDuration: 500ms
  batchMaxDuration: 3s
  preferencePolicy: Ignore
  minValuesPolicy: BestEffort
  schedulerConfig:
    podTopologySpread:
      defaultConstraints:
        - {maxSkew: 3, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}
  clusterName: prod-eu
  clusterEndpoint: https://api.prod-eu.example.com:6443
  featureGates:
    nodeOverlay: true
    reservedCapacity: false
metrics:
  port: 9090
healthProbe:
  port: 9091
egress:
  httpsProxy: http://proxy.internal:3128
  noProxy: .svc,10.0.0.0/8
  caBundle: {configMap: corp-ca}
extraEnv:
  - {name: RUST_BACKTRACE, value: "1"}
"#;

const GRANTS: &str = r#"
grants:
  plugins:
    exoscale:
      http: ["https://api-*.exoscale.com"]
      secrets: [exoscale-credentials]
      config: {zone: ch-gva-2, clusterName: prod}
      limits: {timeoutMs: 30000}
    k3s:
      secrets: [k3s/token, k3s/ca]
    inventory:
      kubernetes:
        - {group: "", resources: [configmaps], verbs: [get, list], namespaces: [inventory]}
        - {group: "", resources: [nodes], verbs: [get]}
"#;

#[test]
fn every_case_of_the_matrix_renders_objects_the_api_accepts() {
    let Some(helm) = helm("every_case_of_the_matrix_renders_objects_the_api_accepts") else {
        return;
    };
    for (name, values) in MATRIX {
        let objects = render(&helm, values);
        assert!(!objects.is_empty(), "{name}");
        check_objects(&objects);
        // Never a subPath: a ConfigMap mounted with one is not updated in the pod.
        let mounts = &container(&objects)["volumeMounts"];
        assert!(
            mounts
                .as_array()
                .unwrap()
                .iter()
                .all(|m| m.get("subPath").is_none()),
            "{name}: {mounts}"
        );
    }
}

#[test]
fn defaults_give_spread_replicas_a_budget_least_privilege_and_a_locked_down_pod() {
    let Some(helm) =
        helm("defaults_give_spread_replicas_a_budget_least_privilege_and_a_locked_down_pod")
    else {
        return;
    };
    let objects = render(&helm, "");
    let kinds: BTreeSet<&str> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    let expected = [
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
    ];
    assert_eq!(
        kinds,
        expected.into_iter().collect(),
        "no ServiceMonitor unless asked"
    );

    let deployment = one(&objects, "Deployment");
    assert_eq!(
        deployment["spec"]["replicas"], 2,
        "two replicas elect a leader"
    );
    let pod = &deployment["spec"]["template"]["spec"];
    let selector = &deployment["spec"]["selector"]["matchLabels"];
    assert!(!selector.as_object().unwrap().is_empty());
    for (k, v) in selector.as_object().unwrap() {
        assert_eq!(
            &deployment["spec"]["template"]["metadata"]["labels"][k], v,
            "the selector selects the pods"
        );
    }
    // Never on a node Joinery manages.
    let terms = &pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"];
    assert_eq!(
        terms[0]["matchExpressions"][0],
        serde_json::json!({"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"})
    );
    // Two replicas never share a host, and spread over zones; both select the pods themselves.
    let anti =
        &pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0];
    assert_eq!(anti["topologyKey"], "kubernetes.io/hostname");
    assert_eq!(&anti["labelSelector"]["matchLabels"], selector);
    let spread = &pod["topologySpreadConstraints"][0];
    assert_eq!(spread["topologyKey"], "topology.kubernetes.io/zone");
    assert_eq!(&spread["labelSelector"]["matchLabels"], selector);
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    // Locked down.
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let c = container(&objects);
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(
        c["securityContext"]["capabilities"]["drop"],
        serde_json::json!(["ALL"])
    );
    assert!(
        c["resources"]["requests"]["cpu"].is_string()
            && c["resources"]["limits"]["memory"].is_string()
    );
    // Probes on the health port, metrics on the metrics port, as `joinery run` serves them.
    let ports: BTreeMap<String, i64> = c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().into(),
                p["containerPort"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ports,
        BTreeMap::from([("http-metrics".into(), 8080), ("http-probes".into(), 8081)])
    );
    assert_eq!(
        c["livenessProbe"]["httpGet"],
        serde_json::json!({"path": "/healthz", "port": "http-probes"})
    );
    assert_eq!(
        c["readinessProbe"]["httpGet"],
        serde_json::json!({"path": "/readyz", "port": "http-probes"})
    );
    assert_eq!(env_value(&objects, "METRICS_PORT").as_deref(), Some("8080"));
    assert_eq!(
        env_value(&objects, "HEALTH_PROBE_PORT").as_deref(),
        Some("8081")
    );
    // JSON logs by default, at info.
    assert_eq!(
        env_value(&objects, "JOINERY_LOG_FORMAT").as_deref(),
        Some("json")
    );
    assert_eq!(env_value(&objects, "LOG_LEVEL").as_deref(), Some("info"));
    assert_eq!(
        env_value(&objects, "DISABLE_LEADER_ELECTION").as_deref(),
        Some("false"),
        "the replicas elect a leader"
    );
    assert_eq!(
        env(&objects)["SYSTEM_NAMESPACE"]["fieldRef"]["fieldPath"],
        "metadata.namespace"
    );
    // No plugin directories without plugins; the grants file is always there (empty grants).
    assert!(env_value(&objects, "JOINERY_PLUGIN_DIRS").is_none());
    let grants = one(&objects, "ConfigMap");
    let grants_text = grants["data"]["grants.yaml"].as_str().unwrap();
    joinery_runtime::grants::Grants::parse(grants_text, "the chart's grants").unwrap();
    let grants_path = env_value(&objects, "JOINERY_GRANTS").unwrap();
    assert!(
        mount_of(&objects, &grants_path).is_some(),
        "{grants_path} is mounted"
    );

    // The metrics Service selects the pods on the metrics port.
    let service = one(&objects, "Service");
    assert_eq!(&service["spec"]["selector"], selector);
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http-metrics");

    // The budget lets one pod go at a time.
    let pdb = one(&objects, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    assert_eq!(&pdb["spec"]["selector"]["matchLabels"], selector);

    // Least privilege: no wildcard, no secrets cluster-wide, writes only where the host writes.
    let cluster_role = one(&objects, "ClusterRole");
    let rules = cluster_role["rules"].as_array().unwrap();
    for rule in rules {
        assert!(
            !strings(&rule["verbs"]).contains(&"*".to_string())
                && !strings(&rule["resources"]).contains(&"*".to_string()),
            "{rule}"
        );
        assert!(
            !strings(&rule["resources"])
                .iter()
                .any(|r| r == "secrets" || r == "configmaps"),
            "{rule}"
        );
    }
    let allows = |group: &str, resource: &str, verb: &str| {
        rules.iter().any(|r| {
            strings(&r["apiGroups"]).iter().any(|g| g == group)
                && strings(&r["resources"]).iter().any(|x| x == resource)
                && strings(&r["verbs"]).iter().any(|v| v == verb)
        })
    };
    for (group, resource) in [
        ("", "pods"),
        ("", "nodes"),
        ("karpenter.sh", "nodepools"),
        ("karpenter.sh", "nodeclaims"),
        ("apps", "daemonsets"),
        ("policy", "poddisruptionbudgets"),
        ("storage.k8s.io", "csinodes"),
        ("karpenter.k8s.exoscale", "exoscalenodeclasses"),
    ] {
        assert!(
            allows(group, resource, "list") && allows(group, resource, "watch"),
            "{group}/{resource}"
        );
    }
    for (group, resource, verb) in [
        ("karpenter.sh", "nodeclaims", "create"),
        ("karpenter.sh", "nodeclaims", "patch"),
        ("karpenter.sh", "nodeclaims", "delete"),
        ("karpenter.sh", "nodeclaims/status", "patch"),
        ("karpenter.sh", "nodepools/status", "patch"),
        ("", "nodes", "patch"),
        ("", "nodes", "delete"),
        ("", "pods/eviction", "create"),
        ("", "pods", "delete"),
        ("", "events", "create"),
        (
            "karpenter.k8s.exoscale",
            "exoscalenodeclasses/status",
            "patch",
        ),
    ] {
        assert!(allows(group, resource, verb), "{verb} {group}/{resource}");
    }
    assert!(
        !allows("karpenter.sh", "nodepools", "patch") && !allows("", "pods", "patch"),
        "no writes the host does not make"
    );
    assert!(
        !allows("karpenter.sh", "nodeoverlays", "list"),
        "NodeOverlays only with the gate"
    );
    assert!(
        !allows("", "services", "list"),
        "Services only with SCHEDULER_CONFIG"
    );
    let binding = one(&objects, "ClusterRoleBinding");
    assert_eq!(binding["roleRef"]["name"], cluster_role["metadata"]["name"]);
    let service_account = one(&objects, "ServiceAccount");
    assert_eq!(
        binding["subjects"][0]["name"],
        service_account["metadata"]["name"]
    );
    assert_eq!(
        pod["serviceAccountName"],
        service_account["metadata"]["name"]
    );

    // The leader-election Lease: a namespaced Role, updates only of the Lease the replicas use.
    let role = one(&objects, "Role");
    assert_eq!(role["metadata"]["namespace"], "joinery");
    let lease_rules: Vec<&Value> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| strings(&r["resources"]) == ["leases"])
        .collect();
    assert!(
        lease_rules
            .iter()
            .all(|r| strings(&r["apiGroups"]) == ["coordination.k8s.io"])
    );
    assert!(
        lease_rules
            .iter()
            .any(|r| strings(&r["verbs"]).contains(&"create".to_string()))
    );
    let lease_name = env_value(&objects, "LEADER_ELECTION_NAME").unwrap();
    assert!(
        lease_rules
            .iter()
            .any(|r| strings(&r["verbs"]).contains(&"update".to_string())
                && strings(&r["resourceNames"]) == [lease_name.clone()])
    );
    // The learned-capacity ConfigMap: created, then read and patched by name only.
    let config_map_rules: Vec<&Value> = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| strings(&r["resources"]) == ["configmaps"])
        .collect();
    assert!(
        config_map_rules
            .iter()
            .any(|r| strings(&r["verbs"]) == ["create"] && r.get("resourceNames").is_none())
    );
    assert!(
        config_map_rules
            .iter()
            .any(|r| strings(&r["verbs"]) == ["get", "patch"]
                && strings(&r["resourceNames"]) == ["joinery-learned-capacity"])
    );
    assert_eq!(
        config_map_rules.len(),
        2,
        "nothing else of ConfigMaps: {config_map_rules:?}"
    );
    let role_binding = one(&objects, "RoleBinding");
    assert_eq!(role_binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(
        role_binding["subjects"][0]["name"],
        service_account["metadata"]["name"]
    );
}

/// The volume mount containing `path`, if any.
fn mount_of(objects: &[Value], path: &str) -> Option<Value> {
    container(objects)["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| path.starts_with(m["mountPath"].as_str().unwrap()))
        .cloned()
}

#[test]
fn plugin_config_maps_are_mounted_whole_as_plugin_directories() {
    let Some(helm) = helm("plugin_config_maps_are_mounted_whole_as_plugin_directories") else {
        return;
    };
    let objects = render(&helm, PLUGINS);
    let pod = &one(&objects, "Deployment")["spec"]["template"]["spec"];
    let dirs: Vec<String> = env_value(&objects, "JOINERY_PLUGIN_DIRS")
        .unwrap()
        .split(',')
        .map(String::from)
        .collect();
    assert_eq!(
        dirs,
        [
            "/etc/joinery/plugins/joinery-plugin-acme-cloud",
            "/etc/joinery/plugins/joinery-plugin.my-renderer"
        ]
    );
    for (dir, config_map) in dirs
        .iter()
        .zip(["joinery-plugin-acme-cloud", "joinery-plugin.my-renderer"])
    {
        let mount = mount_of(&objects, dir).unwrap();
        assert_eq!(mount["mountPath"].as_str(), Some(dir.as_str()));
        assert!(
            mount.get("subPath").is_none() && mount.get("subPathExpr").is_none(),
            "{mount}"
        );
        assert_eq!(mount["readOnly"], true);
        let volume = pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == mount["name"])
            .unwrap();
        assert_eq!(volume["configMap"]["name"], config_map, "{volume}");
    }
    // A plugin's NodeClass kind is readable and its status writable.
    let rules = one(&objects, "ClusterRole")["rules"]
        .as_array()
        .unwrap()
        .clone();
    assert!(
        rules
            .iter()
            .any(|r| strings(&r["apiGroups"]) == ["karpenter.k8s.acme"]
                && strings(&r["resources"]) == ["acmenodeclasses"]
                && strings(&r["verbs"]).contains(&"watch".into()))
    );
    assert!(
        rules
            .iter()
            .any(|r| strings(&r["resources"]) == ["acmenodeclasses/status"]
                && strings(&r["verbs"]) == ["patch"])
    );
}

/// The init container compiles the same plugins the controller loads, into the same cache:
/// the same plugin settings and mounts, the same image and lock-down; `precompilePlugins:
/// false` removes it.
#[test]
fn an_init_container_compiles_the_plugins_the_controller_loads() {
    let Some(helm) = helm("an_init_container_compiles_the_plugins_the_controller_loads") else {
        return;
    };
    let objects = render(&helm, PLUGINS);
    let pod = &one(&objects, "Deployment")["spec"]["template"]["spec"];
    let inits = pod["initContainers"].as_array().expect("an init container");
    assert_eq!(inits.len(), 1);
    let (init, controller) = (&inits[0], container(&objects));
    assert_eq!(init["name"], "compile-plugins");
    assert_eq!(strings(&init["args"]), ["plugins", "compile"]);
    for field in ["image", "command", "securityContext", "volumeMounts"] {
        assert_eq!(init[field], controller[field], "{field}");
    }
    let plugin_env = |c: &Value| -> Vec<Value> {
        c["env"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"].as_str().unwrap().starts_with("JOINERY_"))
            .cloned()
            .collect()
    };
    assert_eq!(plugin_env(init), plugin_env(controller));
    assert!(
        plugin_env(init)
            .iter()
            .any(|e| e["name"] == "JOINERY_PLUGIN_DIRS"),
        "{init}"
    );

    let objects = render(&helm, &format!("{PLUGINS}\nprecompilePlugins: false\n"));
    assert!(
        one(&objects, "Deployment")["spec"]["template"]["spec"]
            .get("initContainers")
            .is_none()
    );
}

#[test]
fn service_monitor_scrapes_the_metrics_service() {
    let Some(helm) = helm("service_monitor_scrapes_the_metrics_service") else {
        return;
    };
    let objects = render(&helm, MATRIX[2].1);
    let monitor = one(&objects, "ServiceMonitor");
    let service = one(&objects, "Service");
    for (k, v) in monitor["spec"]["selector"]["matchLabels"]
        .as_object()
        .unwrap()
    {
        assert_eq!(
            &service["metadata"]["labels"][k], v,
            "the ServiceMonitor selects the Service"
        );
    }
    let endpoint = &monitor["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], service["spec"]["ports"][0]["name"]);
    assert_eq!(endpoint["path"], "/metrics");
    assert_eq!(endpoint["interval"], "15s");
    assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus");
    assert_eq!(
        strings(&monitor["spec"]["namespaceSelector"]["matchNames"]),
        ["joinery"]
    );
}

/// The dashboards' ConfigMaps among rendered objects.
fn dashboard_config_maps(objects: &[Value]) -> Vec<&Value> {
    find(objects, "ConfigMap")
        .into_iter()
        .filter(|c| {
            c["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.contains("-dashboard-"))
        })
        .collect()
}

#[test]
fn dashboards_and_alerts_are_off_by_default_and_ship_the_chart_files_when_on() {
    let Some(helm) =
        helm("dashboards_and_alerts_are_off_by_default_and_ship_the_chart_files_when_on")
    else {
        return;
    };
    let defaults = render(&helm, "");
    assert!(find(&defaults, "PrometheusRule").is_empty());
    assert!(dashboard_config_maps(&defaults).is_empty());

    let objects = render(&helm, MONITORING);
    check_objects(&objects);
    let maps = dashboard_config_maps(&objects);
    let mut names: Vec<&str> = maps
        .iter()
        .map(|m| m["metadata"]["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "joinery-dashboard-capacity",
            "joinery-dashboard-disruption",
            "joinery-dashboard-plugins"
        ]
    );
    for map in &maps {
        let meta = &map["metadata"];
        assert_eq!(meta["namespace"], "monitoring", "the namespace asked for");
        assert_eq!(
            meta["labels"]["grafana_dashboard"], "yes",
            "the sidecar's label"
        );
        assert_eq!(meta["annotations"]["grafana_folder"], "Joinery");
        let data = map["data"].as_object().unwrap();
        assert_eq!(data.len(), 1, "one dashboard per ConfigMap");
        let (key, text) = data.iter().next().unwrap();
        let file = key.strip_prefix("joinery-").expect("joinery-NAME.json");
        let shipped: Value = serde_json::from_str(text.as_str().unwrap()).unwrap();
        let source: Value =
            serde_json::from_str(&read(&format!("charts/joinery/files/dashboards/{file}")))
                .unwrap();
        assert_eq!(shipped, source, "{key} is the chart's file, unchanged");
    }
    let rule = one(&objects, "PrometheusRule");
    assert_eq!(rule["metadata"]["namespace"], "joinery");
    assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
    let file: Value =
        serde_norway::from_str(&read("charts/joinery/files/prometheus-rules.yaml")).unwrap();
    assert_eq!(
        rule["spec"], file,
        "the PrometheusRule holds the rule file promtool tests"
    );
    let alerts: Vec<&str> = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["alert"].as_str())
        .collect();
    assert!(alerts.len() >= 5, "{alerts:?}");
    let description = rule["spec"]["groups"][0]["rules"][0]["annotations"]["description"]
        .as_str()
        .unwrap();
    assert!(
        description.contains("{{ $labels.plugin }}"),
        "Helm leaves Prometheus's templates alone: {description}"
    );
}

#[test]
fn network_policy_admits_the_probes_and_only_the_named_scrapers() {
    let Some(helm) = helm("network_policy_admits_the_probes_and_only_the_named_scrapers") else {
        return;
    };
    assert!(
        find(&render(&helm, ""), "NetworkPolicy").is_empty(),
        "off by default"
    );
    let objects = render(&helm, MATRIX[6].1);
    let policy = one(&objects, "NetworkPolicy");
    let deployment = one(&objects, "Deployment");
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(strings(&policy["spec"]["policyTypes"]), ["Ingress"]);
    let ingress = policy["spec"]["ingress"].as_array().unwrap();
    assert_eq!(ingress.len(), 2);
    // The health port from anywhere, the metrics port from the monitoring namespace only.
    assert!(ingress[0].get("from").is_none());
    assert_eq!(ingress[0]["ports"][0]["port"], 8081);
    assert_eq!(
        ingress[1]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "monitoring"
    );
    assert_eq!(ingress[1]["ports"][0]["port"], 8080);
}

#[test]
fn two_replicas_are_allowed() {
    let Some(helm) = helm("two_replicas_are_allowed") else {
        return;
    };
    let objects = render(&helm, MATRIX[3].1);
    assert_eq!(one(&objects, "Deployment")["spec"]["replicas"], 2);
    assert_eq!(
        one(&objects, "PodDisruptionBudget")["spec"]["maxUnavailable"],
        1,
        "one replica at a time may be drained"
    );
}

/// The environment variables `host/controller/src/settings.rs` reads.
fn settings_env_names() -> BTreeSet<String> {
    let source = read("host/controller/src/settings.rs");
    let body =
        &source[source.find("pub fn from_lookup").unwrap()..source.find("#[cfg(test)]").unwrap()];
    let mut names = BTreeSet::new();
    for call in ["lookup(\"", "duration(\"", "port(\""] {
        for (at, _) in body.match_indices(call) {
            let rest = &body[at + call.len()..];
            names.insert(rest[..rest.find('"').unwrap()].to_string());
        }
    }
    names
}

#[test]
fn every_setting_is_a_value_passed_in_its_environment_variable() {
    let Some(helm) = helm("every_setting_is_a_value_passed_in_its_environment_variable") else {
        return;
    };
    let names = settings_env_names();
    assert!(
        names.len() >= 11 && names.contains("BATCH_IDLE_DURATION") && names.contains("LOG_LEVEL"),
        "{names:?}"
    );
    let objects = render(&helm, CUSTOM_SETTINGS);
    let env = env(&objects);
    let missing: Vec<&String> = names.iter().filter(|n| !env.contains_key(*n)).collect();
    assert!(
        missing.is_empty(),
        "settings read by the host but not set by the chart: {missing:?}"
    );
    let expected = [
        ("BATCH_IDLE_DURATION", "500ms"),
        ("BATCH_MAX_DURATION", "3s"),
        ("PREFERENCE_POLICY", "Ignore"),
        ("MIN_VALUES_POLICY", "BestEffort"),
        ("CLUSTER_NAME", "prod-eu"),
        ("CLUSTER_ENDPOINT", "https://api.prod-eu.example.com:6443"),
        ("METRICS_PORT", "9090"),
        ("HEALTH_PROBE_PORT", "9091"),
        ("LOG_LEVEL", "debug"),
        ("JOINERY_LOG_FORMAT", "text"),
        (
            "FEATURE_GATES",
            "NodeRepair=false,ReservedCapacity=false,SpotToSpotConsolidation=false,NodeOverlay=true,StaticCapacity=false,CapacityBuffer=false",
        ),
        ("HTTPS_PROXY", "http://proxy.internal:3128"),
        ("NO_PROXY", ".svc,10.0.0.0/8"),
        ("JOINERY_EGRESS_CA_BUNDLE", "/etc/joinery/egress-ca/ca.crt"),
        ("RUST_BACKTRACE", "1"),
    ];
    for (name, value) in expected {
        assert_eq!(env_value(&objects, name).as_deref(), Some(value), "{name}");
    }
    // The whole environment, read by the host's own parser.
    let lookup: BTreeMap<String, String> = env
        .iter()
        .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
        .collect();
    let settings =
        joinery_controller::Settings::from_lookup(|name| lookup.get(name).cloned()).unwrap();
    assert_eq!(
        settings.batch_idle_duration,
        std::time::Duration::from_millis(500)
    );
    assert_eq!(
        settings.default_spread.len(),
        1,
        "SCHEDULER_CONFIG reaches the host as JSON it parses"
    );
    assert_eq!(settings.metrics_port, 9090);
    assert!(settings.feature_gates.node_overlay && !settings.feature_gates.reserved_capacity);
    let defaults: BTreeMap<String, String> = self::env(&render(&helm, ""))
        .into_iter()
        .filter_map(|(k, v)| v.as_str().map(|v| (k, v.to_string())))
        .collect();
    assert_eq!(
        joinery_controller::Settings::from_lookup(|name| defaults.get(name).cloned()).unwrap(),
        joinery_controller::Settings::from_lookup(|_| None).unwrap(),
        "the chart's defaults are the host's (upstream's) defaults"
    );
    // The CA bundle is mounted where the variable points.
    assert!(mount_of(&objects, "/etc/joinery/egress-ca/ca.crt").is_some());
    // The gates and SCHEDULER_CONFIG widen the ClusterRole by what they make the host watch.
    let rules = one(&objects, "ClusterRole")["rules"]
        .as_array()
        .unwrap()
        .clone();
    let has = |resource: &str| {
        rules
            .iter()
            .any(|r| strings(&r["resources"]).iter().any(|x| x == resource))
    };
    assert!(
        has("nodeoverlays")
            && has("nodeoverlays/status")
            && has("services")
            && has("replicasets")
            && has("statefulsets")
            && has("replicationcontrollers")
    );

    // Every variable the chart sets is one the host reads (a misspelled name would be ignored).
    let mut sources = String::new();
    for dir in [
        "host/cli/src",
        "host/cli/src/commands",
        "host/controller/src",
        "host/runtime/src",
    ] {
        for entry in std::fs::read_dir(repo().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "rs") {
                sources.push_str(&std::fs::read_to_string(path).unwrap());
            }
        }
    }
    // RUST_BACKTRACE is read by the standard library, not by Joinery's sources.
    let not_read_yet = ["RUST_BACKTRACE"];
    for name in env.keys() {
        assert!(
            sources.contains(&format!("\"{name}\"")) || not_read_yet.contains(&name.as_str()),
            "the chart sets {name}, which the host never reads"
        );
    }
}

#[test]
fn grants_become_the_grants_file_and_the_rbac_they_need() {
    let Some(helm) = helm("grants_become_the_grants_file_and_the_rbac_they_need") else {
        return;
    };
    let objects = render(&helm, GRANTS);
    let text = one(&objects, "ConfigMap")["data"]["grants.yaml"]
        .as_str()
        .unwrap()
        .to_string();
    let grants = joinery_runtime::grants::Grants::parse(&text, "the chart's grants").unwrap();
    assert_eq!(
        grants.plugins.keys().collect::<Vec<_>>(),
        ["exoscale", "inventory", "k3s"]
    );
    assert_eq!(
        grants.plugins["exoscale"].config.as_ref().unwrap()["zone"],
        "ch-gva-2"
    );
    // Secrets: by name, in the release namespace or the one the name carries.
    let roles = find(&objects, "Role");
    let role_in = |ns: &str| {
        *roles
            .iter()
            .find(|r| r["metadata"]["namespace"] == ns)
            .unwrap_or_else(|| panic!("no Role in {ns}"))
    };
    let secret_rule = |role: &Value| {
        role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| strings(&r["resources"]) == ["secrets"])
            .cloned()
            .unwrap()
    };
    let own = secret_rule(role_in("joinery"));
    assert_eq!(strings(&own["resourceNames"]), ["exoscale-credentials"]);
    assert_eq!(strings(&own["verbs"]), ["get"]);
    assert_eq!(
        strings(&secret_rule(role_in("k3s"))["resourceNames"]),
        ["ca", "token"]
    );
    // Kubernetes access of the workload cluster: namespaced where the grant says so.
    let inventory = role_in("inventory");
    assert!(
        inventory["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| strings(&r["resources"]) == ["configmaps"]
                && strings(&r["verbs"]) == ["get", "list"])
    );
    let cluster_rules = one(&objects, "ClusterRole")["rules"]
        .as_array()
        .unwrap()
        .clone();
    assert!(
        cluster_rules
            .iter()
            .any(|r| strings(&r["resources"]) == ["nodes"] && strings(&r["verbs"]) == ["get"])
    );
    assert!(
        !cluster_rules
            .iter()
            .any(|r| strings(&r["resources"]).contains(&"configmaps".into())),
        "namespaced grants stay namespaced"
    );
    // Each Role is bound to the controller's ServiceAccount.
    for binding in find(&objects, "RoleBinding") {
        assert!(roles.iter().any(|r| r["metadata"]["namespace"]
            == binding["metadata"]["namespace"]
            && r["metadata"]["name"] == binding["roleRef"]["name"]));
        assert_eq!(binding["subjects"][0]["namespace"], "joinery");
    }
    // A changed grants file rolls the pods (the host reads it at start).
    let checksum = |objects: &[Value]| {
        one(objects, "Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/grants"]
            .clone()
    };
    assert_ne!(checksum(&objects), checksum(&render(&helm, "")));
}

#[test]
fn the_schema_refuses_typos_and_bad_values() {
    let Some(helm) = helm("the_schema_refuses_typos_and_bad_values") else {
        return;
    };
    for (values, says) in [
        ("typo: 1\n", "typo"),
        ("replica: 3\n", "replica"),
        (
            "settings:\n  batchIdleDurations: 2s\n",
            "batchIdleDurations",
        ),
        (
            "settings:\n  batchIdleDuration: soon\n",
            "batchIdleDuration",
        ),
        (
            "settings:\n  featureGates:\n    nodeOverlays: true\n",
            "nodeOverlays",
        ),
        ("logLevel: trace\n", "logLevel"),
        ("logFormat: yaml\n", "logFormat"),
        ("plugins:\n  - configMap: a\n    subPath: x\n", "subPath"),
        ("plugins:\n  - name: a\n", "configMap"),
        (
            "grants:\n  plugins:\n    k3s:\n      secret: [token]\n",
            "secret",
        ),
        (
            "grants:\n  plugins:\n    k3s:\n      kubernetes: [{group: '', resources: [pods], verbs: [watch]}]\n",
            "verbs",
        ),
        ("metrics:\n  port: 0\n", "port"),
        ("grafanaDashboards:\n  enable: true\n", "enable"),
        ("prometheusRule:\n  enabled: yes please\n", "enabled"),
    ] {
        match template(&helm, values, &[]) {
            Ok(_) => panic!("values accepted but should not be:\n{values}"),
            Err(err) => assert!(err.contains(says), "the error names {says}:\n{err}"),
        }
    }
    let err = template(&helm, "", &["--set", "typo=1"]).unwrap_err();
    assert!(
        err.contains("Additional property typo is not allowed"),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// The CRD chart

/// Regenerates the CRD chart's templates; what the sync test tells to run.
const REGENERATE_CRDS: &str = "cargo run -p joinery -- crds --out-dir charts/joinery-crd/templates";

#[test]
fn crd_chart_templates_are_what_joinery_crds_generates() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_joinery"))
        .args(["crds", "--out-dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listing = |dir: &Path| -> BTreeMap<String, String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
            .map(|p| {
                (
                    p.file_name().unwrap().to_string_lossy().to_string(),
                    std::fs::read_to_string(&p).unwrap(),
                )
            })
            .collect()
    };
    let generated = listing(dir.path());
    let checked_in = listing(&repo().join("charts/joinery-crd/templates"));
    let names = |m: &BTreeMap<String, String>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&checked_in),
        names(&generated),
        "charts/joinery-crd/templates holds other CRDs than `joinery crds` generates: delete its *.yaml and run `{REGENERATE_CRDS}`"
    );
    for (name, text) in &generated {
        assert!(
            checked_in[name] == *text,
            "charts/joinery-crd/templates/{name} is stale (the API types or a plugin's nodeclass-crd.yaml changed): run `{REGENERATE_CRDS}`"
        );
    }
    // The files are the documents `joinery crds` prints, plus Helm's keep annotation.
    let printed = Command::new(env!("CARGO_BIN_EXE_joinery"))
        .arg("crds")
        .output()
        .unwrap();
    let printed = documents(&String::from_utf8_lossy(&printed.stdout));
    assert_eq!(printed.len(), generated.len());
    for crd in printed {
        let name = crd["metadata"]["name"].as_str().unwrap();
        let mut file = documents(&generated[&format!("{name}.yaml")]).remove(0);
        assert_eq!(
            file["metadata"]["annotations"]["helm.sh/resource-policy"], "keep",
            "{name}"
        );
        file["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("annotations");
        assert_eq!(file, crd, "{name}");
    }
}

#[test]
fn crd_chart_renders_every_crd_for_the_api() {
    let Some(helm) = helm("crd_chart_renders_every_crd_for_the_api") else {
        return;
    };
    let (ok, out, err) = run_helm(&helm, &["template", "joinery-crd", "charts/joinery-crd"]);
    assert!(ok, "{err}");
    let crds = documents(&out);
    let names: BTreeSet<&str> = crds
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap())
        .collect();
    let expected = [
        "capacitybuffers.autoscaling.x-k8s.io",
        "clevernodeclasses.karpenter.clever-cloud.com",
        "clusterapinodeclasses.karpenter.cluster.x-k8s.io",
        "exoscalenodeclasses.karpenter.k8s.exoscale",
        "nodeclaims.karpenter.sh",
        "nodeoverlays.karpenter.sh",
        "nodepools.karpenter.sh",
        "simnodeclasses.sim.joinery.dev",
    ];
    assert_eq!(names, expected.into_iter().collect());
    for crd in &crds {
        validate_against_api_types(crd)
            .unwrap_or_else(|p| panic!("{}: {p}", crd["metadata"]["name"]));
    }
}

// ---------------------------------------------------------------------------------------------
// The Dockerfile

/// The Dockerfile's stages: (FROM line, instructions), comments and continuations folded.
fn dockerfile_stages() -> Vec<(String, Vec<String>)> {
    let text = read("Dockerfile");
    let mut instructions = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        current.push_str(line.trim_end_matches('\\'));
        current.push(' ');
        if !line.ends_with('\\') {
            instructions.push(current.trim().to_string());
            current.clear();
        }
    }
    let mut stages: Vec<(String, Vec<String>)> = Vec::new();
    for instruction in instructions {
        if instruction.starts_with("FROM ") {
            stages.push((instruction, Vec::new()));
        } else {
            stages
                .last_mut()
                .expect("the Dockerfile starts with FROM")
                .1
                .push(instruction);
        }
    }
    stages
}

#[test]
fn dockerfile_builds_the_release_binary_and_ships_it_non_root_where_the_chart_runs_it() {
    let stages = dockerfile_stages();
    assert!(
        stages.len() >= 2,
        "multi-stage: a builder and a small final image"
    );
    let (builder_from, builder) = &stages[0];
    assert!(
        builder_from.contains("rust:") && builder_from.contains(" AS builder"),
        "{builder_from}"
    );
    let builder = builder.join("\n");
    assert!(
        builder.contains("rustup target add wasm32-wasip2"),
        "the plugins are built for wasm32-wasip2"
    );
    assert!(
        builder.contains("cargo build --release") && builder.contains("-p joinery"),
        "{builder}"
    );
    assert!(
        builder.contains("--locked"),
        "the build uses Cargo.lock as it is"
    );
    let toolchain = read("rust-toolchain.toml");
    let version = toolchain
        .lines()
        .find_map(|l| l.strip_prefix("channel = "))
        .unwrap()
        .trim_matches('"');
    assert!(
        builder_from.contains(&format!("rust:{version}")),
        "the builder's Rust is rust-toolchain.toml's {version}: {builder_from}"
    );

    let (final_from, final_stage) = stages.last().unwrap();
    assert!(
        final_from.contains("gcr.io/distroless/cc-debian12:nonroot"),
        "distroless with libc and libgcc (the binary links both): {final_from}"
    );
    assert!(
        builder_from.contains("bookworm"),
        "built on Debian 12, like the final image, so glibc matches"
    );
    let user: Vec<&String> = final_stage
        .iter()
        .filter(|i| i.starts_with("USER "))
        .collect();
    assert_eq!(user.len(), 1);
    assert!(
        user[0].starts_with("USER nonroot") || user[0].starts_with("USER 65532"),
        "{}",
        user[0]
    );

    // The chart runs the binary the final stage copies, with the cache directory the image sets.
    let Some(helm) =
        helm("dockerfile_builds_the_release_binary_and_ships_it_non_root_where_the_chart_runs_it")
    else {
        return;
    };
    let objects = render(&helm, "");
    let binary = container(&objects)["command"][0]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        final_stage
            .iter()
            .any(|i| i.starts_with("COPY --from=builder") && i.ends_with(&format!(" {binary}"))),
        "the final stage copies the binary to {binary}"
    );
    assert!(
        final_stage
            .iter()
            .any(|i| i == &format!("ENTRYPOINT [\"{binary}\"]"))
    );
    let cache = env_value(&objects, "JOINERY_PLUGIN_CACHE_DIR").unwrap();
    assert!(
        final_stage.contains(&format!("ENV JOINERY_PLUGIN_CACHE_DIR={cache}")),
        "the image's cache directory is the chart's {cache}"
    );
    assert!(
        final_stage
            .iter()
            .any(|i| i == "ENV MIMALLOC_PURGE_DELAY=0"),
        "freed pages go back to the system at once (docs/operations.md)"
    );
    assert!(
        final_stage
            .iter()
            .any(|i| i.starts_with("COPY --from=builder --chown=65532:65532")
                && i.ends_with(&format!(" {cache}"))),
        "writable by nonroot without a volume too"
    );
    let mount = mount_of(&objects, &cache).unwrap();
    assert_eq!(mount["mountPath"], cache.as_str());
    let volume = one(&objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .cloned()
        .unwrap();
    assert!(
        volume.get("emptyDir").is_some(),
        "the cache is an emptyDir: {volume}"
    );

    let ignore = read(".dockerignore");
    assert!(
        ignore.lines().any(|l| l.trim() == "target/")
            && ignore.lines().any(|l| l.trim() == ".git/"),
        "the build context leaves out build output and .git"
    );
}

// ---------------------------------------------------------------------------------------------
// The chart README, generated from values.yaml

const README_BEGIN: &str = "<!-- BEGIN VALUES: generated from values.yaml by the chart tests (helm::chart_readme_lists_every_value), do not edit -->";
const README_END: &str = "<!-- END VALUES -->";

/// One row of the values table: the dotted key, its type and default from values.yaml, and the
/// text of its `# --` comment.
struct ValueRow {
    key: String,
    kind: &'static str,
    default: String,
    description: String,
}

/// Reads the `# -- description` comments of values.yaml (continued by the `#` lines right
/// after it) and the key each one documents.
fn value_rows(text: &str) -> Vec<ValueRow> {
    let values: serde_norway::Value = serde_norway::from_str(text).unwrap();
    let mut rows = Vec::new();
    let mut pending: Option<String> = None;
    let mut stack: Vec<(usize, String)> = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if let Some(rest) = trimmed.strip_prefix("# --") {
            pending = Some(rest.trim().to_string());
            continue;
        }
        if let Some(rest) = trimmed.strip_prefix('#') {
            if let Some(text) = pending.as_mut() {
                text.push(' ');
                text.push_str(rest.trim());
            }
            continue;
        }
        if trimmed.is_empty() {
            pending = None;
            continue;
        }
        if trimmed.starts_with("- ") {
            continue;
        }
        let Some((key, _)) = trimmed.split_once(':') else {
            continue;
        };
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        stack.push((indent, key.trim().to_string()));
        if let Some(description) = pending.take() {
            let path: Vec<&str> = stack.iter().map(|(_, k)| k.as_str()).collect();
            let mut value = &values;
            for k in &path {
                value = &value[*k];
            }
            let kind = match value {
                serde_norway::Value::Bool(_) => "bool",
                serde_norway::Value::Number(n) if n.is_i64() || n.is_u64() => "int",
                serde_norway::Value::Number(_) => "float",
                serde_norway::Value::String(_) => "string",
                serde_norway::Value::Sequence(_) => "list",
                serde_norway::Value::Mapping(_) => "object",
                _ => "null",
            };
            let default = serde_json::to_string(&serde_json::to_value(value).unwrap()).unwrap();
            rows.push(ValueRow {
                key: path.join("."),
                kind,
                default,
                description,
            });
        }
    }
    rows
}

fn values_table(text: &str) -> String {
    let mut out = String::from("| key | type | default | description |\n|---|---|---|---|\n");
    for row in value_rows(text) {
        let cell = |s: &str| s.replace('|', "\\|");
        out.push_str(&format!(
            "| `{}` | {} | `{}` | {} |\n",
            row.key,
            row.kind,
            cell(&row.default),
            cell(&row.description)
        ));
    }
    out
}

#[test]
fn chart_readme_lists_every_value() {
    let values = read("charts/joinery/values.yaml");
    let rows = value_rows(&values);
    // Every top-level value is documented, itself or through its keys, and in the schema.
    let parsed: serde_norway::Mapping = serde_norway::from_str(&values).unwrap();
    let schema: Value = serde_json::from_str(&read("charts/joinery/values.schema.json")).unwrap();
    assert_eq!(schema["additionalProperties"], false);
    for key in parsed.keys() {
        let key = key.as_str().unwrap();
        assert!(
            rows.iter()
                .any(|r| r.key == key || r.key.starts_with(&format!("{key}."))),
            "values.yaml: `{key}` has no `# --` comment"
        );
        assert!(
            schema["properties"].get(key).is_some(),
            "values.schema.json does not list `{key}`"
        );
    }
    assert_eq!(
        schema["properties"].as_object().unwrap().len(),
        parsed.len(),
        "values.schema.json lists keys values.yaml does not have"
    );

    let path = repo().join("charts/joinery/README.md");
    let readme = std::fs::read_to_string(&path).unwrap();
    let (Some(begin), Some(end)) = (readme.find(README_BEGIN), readme.find(README_END)) else {
        panic!("charts/joinery/README.md lost its markers:\n{README_BEGIN}\n{README_END}");
    };
    let fresh = format!(
        "{}{README_BEGIN}\n\n{}\n{}",
        &readme[..begin],
        values_table(&values),
        &readme[end..]
    );
    if fresh != readme {
        if std::env::var_os("JOINERY_UPDATE_CHART_README").is_some() {
            std::fs::write(&path, &fresh).unwrap();
        } else {
            panic!(
                "charts/joinery/README.md does not match values.yaml; regenerate it with\n  JOINERY_UPDATE_CHART_README=1 cargo test --workspace --test cli helm::chart_readme"
            );
        }
    }
}
