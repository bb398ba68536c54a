//! `/metrics` after a simulated scale-up and scale-down: upstream's metric set (and
//! `joinery_plugin_*`) is there, in a format a Prometheus parser accepts, with values that
//! follow what happened.

use std::time::Duration;

use joinery_simulate::{Simulation, SimulationOptions};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams};

use super::restart::{apply_basics, wait_pod_running};

fn scrape(sim: &Simulation) -> prometheus_parse::Scrape {
    let text = sim
        .controller
        .as_ref()
        .expect("the host runs")
        .context()
        .metrics
        .render();
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("the exposition parses")
}

/// The value of the first sample of `name` whose labels include `labels`.
fn value(scrape: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .find(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match &s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => *v,
            prometheus_parse::Value::Histogram(buckets) => {
                buckets.iter().map(|b| b.count).fold(0.0, f64::max)
            }
            prometheus_parse::Value::Summary(_) => f64::NAN,
        })
}

/// How many observations a histogram series of `base` with `labels` holds.
fn count(scrape: &prometheus_parse::Scrape, base: &str, labels: &[(&str, &str)]) -> f64 {
    value(scrape, &format!("{base}_count"), labels)
        .or_else(|| value(scrape, base, labels))
        .unwrap_or(0.0)
}

async fn until(
    sim: &Simulation,
    limit: Duration,
    what: &str,
    check: impl Fn(&prometheus_parse::Scrape) -> bool,
) -> prometheus_parse::Scrape {
    let deadline = std::time::Instant::now() + sim.clock.to_real(limit);
    loop {
        let scrape = scrape(sim);
        if check(&scrape) {
            return scrape;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what} never showed in /metrics"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn metrics_follow_a_scale_up_and_down() {
    let sim = Simulation::start(SimulationOptions {
        virtual_time: true,
        ..Default::default()
    })
    .await
    .unwrap();
    apply_basics(&sim).await;
    assert!(
        wait_pod_running(&sim, Duration::from_secs(600)).await,
        "the pod ends Running"
    );
    let up = until(
        &sim,
        Duration::from_secs(60),
        "the running pod's state",
        |s| {
            value(
                s,
                "karpenter_pods_state",
                &[("name", "web"), ("phase", "Running"), ("managed", "true")],
            ) == Some(1.0)
                && value(s, "karpenter_cluster_state_node_count", &[]) == Some(1.0)
        },
    )
    .await;
    assert_eq!(value(&up, "karpenter_build_info", &[]), Some(1.0));
    assert_eq!(value(&up, "karpenter_cluster_state_synced", &[]), Some(1.0));
    assert_eq!(
        value(
            &up,
            "karpenter_nodeclaims_created_total",
            &[("reason", "provisioned"), ("nodepool", "default")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &up,
            "karpenter_nodes_created_total",
            &[("nodepool", "default")]
        ),
        Some(1.0)
    );
    let cpu = value(
        &up,
        "karpenter_nodepools_usage",
        &[("nodepool", "default"), ("resource_type", "cpu")],
    )
    .expect("pool usage");
    assert!(cpu >= 1.0, "one node's cores at least: {cpu}");
    let pod_state = up
        .samples
        .iter()
        .find(|s| s.metric == "karpenter_pods_state" && s.labels.get("name") == Some("web"))
        .unwrap();
    for label in [
        "namespace",
        "owner",
        "node",
        "nodepool",
        "zone",
        "capacity_type",
        "instance_type",
        "ready",
        "scheduled",
    ] {
        assert!(
            pod_state.labels.get(label).is_some(),
            "karpenter_pods_state lacks {label}"
        );
    }
    assert_eq!(pod_state.labels.get("nodepool"), Some("default"));
    // Histograms: the scheduling pass, the cloud's create, the pod's startup.
    assert!(
        count(
            &up,
            "karpenter_scheduler_scheduling_duration_seconds",
            &[("controller", "provisioner")]
        ) >= 1.0
    );
    assert!(
        count(
            &up,
            "karpenter_cloudprovider_duration_seconds",
            &[("method", "create")]
        ) >= 1.0
    );
    let startup = value(&up, "karpenter_pods_startup_duration_seconds_sum", &[])
        .expect("a startup was observed");
    assert!(
        startup >= 30.0,
        "the node booted for 30 simulated seconds before the pod started: {startup}"
    );
    // Every plugin call is counted, timed and its memory recorded.
    let create = [("method", "create")];
    assert!(
        value(&up, "joinery_plugin_calls_total", &create).unwrap_or(0.0) >= 1.0,
        "{:?}",
        up.samples
            .iter()
            .filter(|s| s.metric.starts_with("joinery_plugin"))
            .collect::<Vec<_>>()
    );
    assert!(count(&up, "joinery_plugin_call_duration_seconds", &create) >= 1.0);
    assert!(value(&up, "joinery_plugin_memory_bytes", &create).unwrap_or(0.0) > 0.0);
    let renders = up
        .samples
        .iter()
        .filter(|s| {
            s.metric == "joinery_plugin_calls_total" && s.labels.get("method") == Some("render")
        })
        .count();
    assert!(renders >= 1, "the renderer's calls are counted too");

    Api::<Pod>::namespaced(sim.client.clone(), "default")
        .delete("web", &DeleteParams::default())
        .await
        .unwrap();
    let down = until(
        &sim,
        Duration::from_secs(900),
        "the node's termination",
        |s| {
            value(
                s,
                "karpenter_nodeclaims_terminated_total",
                &[("nodepool", "default")],
            ) == Some(1.0)
        },
    )
    .await;
    assert_eq!(
        value(
            &down,
            "karpenter_nodeclaims_disrupted_total",
            &[("reason", "empty"), ("nodepool", "default")]
        ),
        Some(1.0)
    );
    assert!(
        count(
            &down,
            "karpenter_nodeclaims_termination_duration_seconds",
            &[("nodepool", "default")]
        ) >= 1.0
    );
    assert!(
        count(
            &down,
            "karpenter_voluntary_disruption_decision_evaluation_duration_seconds",
            &[("consolidation_type", "empty")]
        ) >= 1.0
    );
    let gone = until(
        &sim,
        Duration::from_secs(60),
        "the pod's state going away",
        |s| value(s, "karpenter_cluster_state_node_count", &[]) == Some(0.0),
    )
    .await;
    assert!(
        value(&gone, "karpenter_pods_state", &[("name", "web")]).is_none(),
        "a deleted pod's series goes"
    );
    let _ = Api::<Pod>::namespaced(sim.client.clone(), "default")
        .list(&ListParams::default())
        .await;
    sim.shutdown().await;
}
