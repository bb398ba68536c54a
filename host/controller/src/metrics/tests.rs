use std::collections::{BTreeMap, BTreeSet};
use std::sync::RwLock;

use super::*;

fn s(text: &str) -> String {
    text.to_string()
}

#[test]
fn metrics_render_in_the_prometheus_text_format_with_escaped_labels() {
    let m = Metrics::default();
    let created = series::ReasonNodePool {
        reason: s("provisioned"),
        nodepool: s("a\"b"),
    };
    m.nodeclaims_created.inc(&created);
    m.nodeclaims_created.inc(&created);
    assert_eq!(m.nodeclaims_created.get(&created), 2);
    let text = m.render();
    assert!(
        text.contains("# TYPE karpenter_nodeclaims_created_total counter"),
        "{text}"
    );
    assert!(
        text.contains(
            "karpenter_nodeclaims_created_total{reason=\"provisioned\",nodepool=\"a\\\"b\"} 2"
        ),
        "{text}"
    );
    let allowed = series::NodePoolReason {
        nodepool: s("p"),
        reason: s("Empty"),
    };
    m.nodepools_allowed_disruptions.set(&allowed, 3.0);
    m.nodepools_allowed_disruptions.set(&allowed, 1.0);
    let text = m.render();
    assert!(
        text.contains("# TYPE karpenter_nodepools_allowed_disruptions gauge"),
        "{text}"
    );
    assert!(
        text.contains("karpenter_nodepools_allowed_disruptions{nodepool=\"p\",reason=\"Empty\"} 1"),
        "{text}"
    );
    assert!(text.contains("karpenter_build_info{version=\""), "{text}");
    assert!(
        text.contains("\nkarpenter_cluster_state_synced 0.0\n"),
        "an unlabelled gauge has no braces, and is there before it is first set: {text}"
    );
    assert!(
        !text.contains(".."),
        "help texts end with one period: {text}"
    );
}

#[test]
fn histograms_use_upstreams_duration_buckets() {
    let m = Metrics::default();
    m.cloudprovider_duration.observe(
        &series::CloudCall {
            controller: s("c"),
            method: s("create"),
            provider: s("p"),
        },
        0.3,
    );
    let text = m.render();
    assert!(
        text.contains("# TYPE karpenter_cloudprovider_duration_seconds histogram"),
        "{text}"
    );
    assert!(text.contains("karpenter_cloudprovider_duration_seconds_bucket{controller=\"c\",method=\"create\",provider=\"p\",le=\"0.25\"} 0"), "{text}");
    assert!(text.contains("karpenter_cloudprovider_duration_seconds_bucket{controller=\"c\",method=\"create\",provider=\"p\",le=\"0.5\"} 1"), "{text}");
    assert!(text.contains("karpenter_cloudprovider_duration_seconds_count{controller=\"c\",method=\"create\",provider=\"p\"} 1"), "{text}");
}

#[test]
fn replacing_a_gauge_drops_series_no_longer_listed() {
    let m = Metrics::default();
    let pool = |name: &str| series::NodePoolResource {
        nodepool: s(name),
        resource_type: s("cpu"),
    };
    m.nodepools_usage
        .replace([(pool("a"), 1.0), (pool("b"), 1.0)]);
    m.nodepools_usage.replace([(pool("b"), 1.0)]);
    assert_eq!(m.nodepools_usage.get(&pool("a")), None);
    assert_eq!(m.nodepools_usage.get(&pool("b")), Some(1.0));
}

#[test]
fn a_scrape_time_gauge_is_computed_from_its_source_at_each_scrape() {
    let m = Metrics::default();
    let text = m.render();
    assert!(
        text.contains("# TYPE karpenter_pods_state gauge"),
        "declared before a source is set: {text}"
    );
    assert!(!text.contains("karpenter_pods_state{"), "{text}");
    let pods = Arc::new(RwLock::new(vec!["a", "b\"x"]));
    let source = pods.clone();
    m.pods_state.compute_on_scrape(Box::new(move |sink| {
        for name in source.read().unwrap().iter() {
            let labels = series::PodState {
                name,
                ready: "true",
                ..Default::default()
            };
            sink(&labels, 1.0);
        }
    }));
    let text = m.render();
    let a = "karpenter_pods_state{name=\"a\",namespace=\"\",owner=\"\",node=\"\",scheduled=\"\",nodepool=\"\",zone=\"\",arch=\"\",capacity_type=\"\",instance_type=\"\",phase=\"\",ready=\"true\",managed=\"\"} 1";
    assert!(text.contains(a), "{text}");
    assert!(text.contains("{name=\"b\\\"x\",namespace"), "{text}");
    let pod = |name| series::PodState {
        name,
        ready: "true",
        ..Default::default()
    };
    assert_eq!(m.pods_state.get(&pod("a")), Some(1.0));
    pods.write().unwrap().retain(|p| *p != "a");
    assert_eq!(
        m.pods_state.get(&pod("a")),
        None,
        "a gone pod's series goes at the next scrape"
    );
    assert!(!m.render().contains("name=\"a\""));
}

/// Sets one series of every family.
fn touch_every_family(m: &Metrics) {
    let nodepool = || series::NodePool { nodepool: s("p") };
    let disrupted = || series::Disruption {
        reason: s("empty"),
        nodepool: s("p"),
        capacity_type: s("spot"),
        consolidation_policy: s("when_empty"),
        termination_mode: s("graceful"),
    };
    let zone = || series::NodePoolZone {
        nodepool: s("p"),
        zone: s("z"),
    };
    let plugin = || series::PluginMethod {
        plugin: s("fake"),
        method: s("create"),
    };
    let call = || series::CloudCall {
        controller: s("c"),
        method: s("create"),
        provider: s("fake"),
    };
    let resource = || series::NodePoolResource {
        nodepool: s("p"),
        resource_type: s("cpu"),
    };
    m.nodeclaims_created.inc(&series::ReasonNodePool {
        reason: s("provisioned"),
        nodepool: s("p"),
    });
    m.nodeclaims_terminated.inc(&series::NodePoolCapacityZone {
        nodepool: s("p"),
        capacity_type: s("spot"),
        zone: s("z"),
    });
    m.nodeclaims_disrupted.inc(&disrupted());
    m.nodes_created.inc(&zone());
    m.nodes_terminated.inc(&zone());
    m.nodes_drained.inc(&nodepool());
    m.eviction_requests.inc(&series::Code { code: s("200") });
    m.pods_disruption_initiated.add(&disrupted(), 3);
    m.cloudprovider_errors.inc(&series::CloudError {
        controller: s("c"),
        method: s("create"),
        provider: s("fake"),
        error: s("retryable"),
    });
    m.instances_garbage_collected.inc(&series::Provider {
        provider: s("fake"),
    });
    m.voluntary_disruption_decisions.inc(&series::Decision {
        decision: s("delete"),
        reason: s("empty"),
        consolidation_type: s("empty"),
    });
    m.voluntary_disruption_failed_validations
        .inc(&series::ConsolidationType {
            consolidation_type: s("single"),
        });
    m.voluntary_disruption_queue_failures
        .inc(&series::DecisionReason {
            decision: s("replace"),
            reason: s("drifted"),
        });
    m.voluntary_disruption_eligible_nodes
        .set(&series::Reason { reason: s("empty") }, 2.0);
    m.nodepools_allowed_disruptions.set(
        &series::NodePoolReason {
            nodepool: s("p"),
            reason: s("Empty"),
        },
        1.0,
    );
    m.cluster_state_node_count.set(3.0);
    m.cluster_state_synced.set(1.0);
    m.nodepools_usage.replace([(resource(), 4.0)]);
    m.nodepools_limit.replace([(resource(), 8.0)]);
    m.pods_state.compute_on_scrape(Box::new(|sink| {
        sink(
            &series::PodState {
                name: "p-0",
                ..Default::default()
            },
            1.0,
        );
        sink(
            &series::PodState {
                name: "p-1",
                node: "n",
                scheduled: "true",
                ..Default::default()
            },
            1.0,
        );
    }));
    m.pods_startup_duration.observe(1.0);
    m.scheduler_scheduling_duration.observe(
        &series::Controller {
            controller: s("provisioner"),
        },
        0.1,
    );
    m.scheduler_queue_depth.set(
        &series::SchedulingQueue {
            controller: s("provisioner"),
            scheduling_id: s("1"),
        },
        5.0,
    );
    m.nodeclaims_termination_duration.observe(&nodepool(), 1.0);
    m.nodes_termination_duration.observe(&nodepool(), 1.0);
    m.cloudprovider_duration.observe(&call(), 0.2);
    m.voluntary_disruption_decision_evaluation_duration.observe(
        &series::Evaluation {
            reason: s("underutilized"),
            consolidation_type: s("single"),
        },
        0.01,
    );
    m.plugin_calls.inc(&plugin());
    m.plugin_errors.inc(&series::PluginError {
        plugin: s("fake"),
        method: s("create"),
        class: s("trap"),
    });
    m.plugin_call_duration.observe(&plugin(), 0.01);
    m.plugin_memory.set(&plugin(), 1024.0);
    m.plugin_memory_limit.set(&plugin(), 65536.0);
    m.reconcile_error("lifecycle", &crate::ControllerError::Invalid(s("bad")));
    m.nodeclaims_instance_termination_duration
        .observe(&nodepool(), 2.0);
    m.computed
        .nodes_on_scrape(Box::new(|| vec![node_row("n-1")]));
    m.computed
        .conditions_on_scrape(Box::new(|| vec![condition_row("c-1", "Ready")]));
    m.status_condition_transitions
        .inc(&series::ConditionTransition {
            type_: s("Ready"),
            status: s("True"),
            reason: s("Ready"),
            group: s("karpenter.sh"),
            kind: s("NodeClaim"),
        });
    m.status_condition_transition_seconds.observe(
        &series::ConditionDuration {
            type_: s("Ready"),
            status: s("Unknown"),
            group: s("karpenter.sh"),
            kind: s("NodeClaim"),
        },
        3.0,
    );
}

/// A node's row with some allocatable, pod and daemon requests.
fn node_row(name: &str) -> computed::NodeRow {
    computed::NodeRow {
        labels: computed::NodeLabels {
            nodepool: s("p"),
            node_name: s(name),
            managed: s("true"),
            ..Default::default()
        },
        allocatable: vec![(s("cpu"), 4.0), (s("memory"), 8e9)],
        pod_requests: vec![(s("cpu"), 1.5)],
        daemon_requests: vec![(s("cpu"), 0.25)],
    }
}

/// A condition's row.
fn condition_row(name: &str, type_: &str) -> computed::ConditionRow {
    computed::ConditionRow {
        labels: computed::ConditionLabels {
            name: s(name),
            type_: s(type_),
            status: s("True"),
            reason: s(type_),
            group: s("karpenter.sh"),
            kind: s("NodeClaim"),
            ..Default::default()
        },
        seconds: 12.5,
    }
}

/// A sample line's metric name and label names (without a histogram's `le`).
fn sample(line: &str) -> (String, BTreeSet<String>) {
    let Some((name, rest)) = line.split_once('{') else {
        let name = line.split_whitespace().next().unwrap_or_default();
        return (name.to_string(), BTreeSet::new());
    };
    let mut keys = BTreeSet::new();
    let mut chars = rest.chars();
    let mut key = String::new();
    while let Some(c) = chars.next() {
        match c {
            '}' => break,
            ',' => {}
            '=' => {
                assert_eq!(chars.next(), Some('"'), "{line}");
                while let Some(v) = chars.next() {
                    match v {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
                if key != "le" {
                    keys.insert(std::mem::take(&mut key));
                }
                key.clear();
            }
            c => key.push(c),
        }
    }
    (name.to_string(), keys)
}

#[test]
fn every_family_is_declared_once_and_its_samples_carry_one_label_set() {
    let m = Metrics::default();
    touch_every_family(&m);
    let text = m.render();
    // Family (as declared by `# TYPE`) → the label sets of its samples.
    let mut families: BTreeMap<String, BTreeSet<BTreeSet<String>>> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(declared) = line.strip_prefix("# TYPE ") {
            let (name, kind) = declared.split_once(' ').expect("name and kind");
            assert_eq!(
                kind == "counter",
                name.ends_with("_total"),
                "{name}: counters and only counters end in _total"
            );
            assert!(
                families.insert(name.to_string(), BTreeSet::new()).is_none(),
                "{name} declared twice"
            );
            current = Some(name.to_string());
        } else if let Some(help) = line.strip_prefix("# HELP ") {
            assert!(!help.ends_with(".."), "the client adds the period: {help}");
        } else if !line.starts_with('#') && !line.is_empty() {
            let family = current.clone().expect("a sample follows its # TYPE");
            let (name, keys) = sample(line);
            assert!(
                name == family
                    || ["_bucket", "_sum", "_count"]
                        .iter()
                        .any(|suffix| name == format!("{family}{suffix}")),
                "{name} under {family}"
            );
            families.get_mut(&family).expect("declared").insert(keys);
        }
    }
    let before = families.len();
    assert!(before >= 41, "every family is registered: {families:?}");
    let empty: Vec<_> = families
        .iter()
        .filter(|(_, sets)| sets.is_empty())
        .map(|(name, _)| name)
        .collect();
    assert!(
        empty.is_empty(),
        "touch_every_family writes a series of every family: {empty:?}"
    );
    for (family, label_sets) in &families {
        assert_eq!(
            label_sets.len(),
            1,
            "{family}: every sample carries one and the same label set: {label_sets:?}"
        );
    }
    let labels_of = |family: &str| families[family].first().cloned().unwrap_or_default();
    let upstream = |names: &[&str]| -> BTreeSet<String> { names.iter().map(|n| s(n)).collect() };
    let disruption = upstream(&[
        "reason",
        "nodepool",
        "capacity_type",
        "consolidation_policy",
        "termination_mode",
    ]);
    assert_eq!(
        labels_of("karpenter_pods_disruption_initiated_total"),
        disruption,
        "upstream's labels"
    );
    assert_eq!(
        labels_of("karpenter_nodeclaims_disrupted_total"),
        disruption,
        "the same as karpenter_pods_disruption_initiated_total"
    );
    let node = [
        "nodepool",
        "zone",
        "region",
        "instance_type",
        "arch",
        "os",
        "capacity_type",
        "windows_build",
        "node_name",
        "phase",
        "managed",
        "resource_type",
    ];
    for family in [
        "karpenter_nodes_allocatable",
        "karpenter_nodes_total_pod_requests",
        "karpenter_nodes_total_daemon_requests",
    ] {
        assert_eq!(labels_of(family), upstream(&node), "{family}");
    }
    let condition = [
        "namespace",
        "name",
        "type",
        "status",
        "reason",
        "group",
        "kind",
    ];
    for family in [
        "operator_status_condition_count",
        "operator_status_condition_current_status_seconds",
    ] {
        assert_eq!(labels_of(family), upstream(&condition), "{family}");
    }
    assert_eq!(
        labels_of("operator_status_condition_transitions_total"),
        upstream(&["type", "status", "reason", "group", "kind"])
    );
    assert_eq!(
        labels_of("operator_status_condition_transition_seconds"),
        upstream(&["type", "status", "group", "kind"])
    );
    assert_eq!(
        labels_of("karpenter_nodeclaims_instance_termination_duration_seconds"),
        upstream(&["nodepool"])
    );
    assert_eq!(
        families["joinery_controller_reconcile_errors_total"]
            .first()
            .cloned()
            .unwrap_or_default(),
        ["controller", "error"].map(String::from).into()
    );
}

#[test]
fn the_label_set_check_sees_a_family_written_with_two_label_sets() {
    // Rendered by hand as an untyped family would be: the check must notice.
    let (_, one) = sample("x_total{reason=\"a\\\"}\"} 1");
    let (_, two) = sample("x_total{reason=\"a\",nodepool=\"p\"} 1");
    assert_eq!(one, BTreeSet::from([s("reason")]));
    assert_ne!(one, two);
    let (name, none) = sample("karpenter_cluster_state_synced 1");
    assert_eq!(name, "karpenter_cluster_state_synced");
    assert!(none.is_empty());
    let (_, bucket) = sample("h_bucket{controller=\"c\",le=\"0.5\"} 1");
    assert_eq!(bucket, BTreeSet::from([s("controller")]));
}

#[test]
fn node_gauges_are_computed_at_each_scrape_so_a_gone_node_has_no_series() {
    let m = Metrics::default();
    let nodes = Arc::new(RwLock::new(vec!["n-1", "n-2"]));
    let source = nodes.clone();
    m.computed.nodes_on_scrape(Box::new(move || {
        source.read().unwrap().iter().map(|n| node_row(n)).collect()
    }));
    let text = m.render();
    let allocatable = "karpenter_nodes_allocatable{nodepool=\"p\",zone=\"\",region=\"\",instance_type=\"\",arch=\"\",os=\"\",capacity_type=\"\",windows_build=\"\",node_name=\"n-1\",phase=\"\",managed=\"true\",resource_type=\"cpu\"} 4.0";
    assert!(text.contains(allocatable), "{text}");
    assert!(
        text.contains("karpenter_nodes_total_pod_requests{") && text.contains("} 1.5\n"),
        "{text}"
    );
    assert!(
        text.contains("karpenter_nodes_total_daemon_requests{") && text.contains("} 0.25\n"),
        "{text}"
    );
    assert_eq!(text.matches("node_name=\"n-2\"").count(), 4, "{text}");
    nodes.write().unwrap().retain(|n| *n != "n-2");
    let text = m.render();
    assert!(
        !text.contains("node_name=\"n-2\""),
        "a gone node's series go at the next scrape: {text}"
    );
    assert!(text.contains("node_name=\"n-1\""), "{text}");
}

#[test]
fn condition_gauges_count_each_condition_and_its_age() {
    let m = Metrics::default();
    m.computed.conditions_on_scrape(Box::new(|| {
        vec![condition_row("a", "Launched"), condition_row("a", "Ready")]
    }));
    let text = m.render();
    assert!(text.contains("operator_status_condition_count{namespace=\"\",name=\"a\",type=\"Ready\",status=\"True\",reason=\"Ready\",group=\"karpenter.sh\",kind=\"NodeClaim\"} 1"), "{text}");
    assert!(text.contains("operator_status_condition_current_status_seconds{namespace=\"\",name=\"a\",type=\"Launched\",status=\"True\",reason=\"Launched\",group=\"karpenter.sh\",kind=\"NodeClaim\"} 12.5"), "{text}");
}

#[test]
fn a_delete_answered_not_found_is_not_a_plugin_error() {
    use joinery_runtime::services::{CallObserver, CallRecord};
    let m = Metrics::default();
    let call = |method, error| CallRecord {
        plugin: "cloud",
        method,
        duration: std::time::Duration::from_millis(1),
        error,
        peak_memory_bytes: 0,
        memory_limit_bytes: 64 << 20,
    };
    m.plugin_call(&call("delete", Some("not_found")));
    m.plugin_call(&call("get", Some("not_found")));
    m.plugin_call(&call("delete", Some("retryable")));
    let errors = |method: &str, class: &str| {
        m.plugin_errors.get(&series::PluginError {
            plugin: s("cloud"),
            method: s(method),
            class: s(class),
        })
    };
    assert_eq!(
        errors("delete", "not_found"),
        0,
        "the instance is gone, as asked"
    );
    assert_eq!(errors("get", "not_found"), 1);
    assert_eq!(errors("delete", "retryable"), 1);
    let calls = m.plugin_calls.get(&series::PluginMethod {
        plugin: s("cloud"),
        method: s("delete"),
    });
    assert_eq!(calls, 2, "the call is still counted");
}
