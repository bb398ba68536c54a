//! `joinery explain pod NS/NAME`: why a pod is where it is, or why it is still pending —
//! from the pod's status and the events Joinery (and the scheduler) published about it.

use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, ListParams};

use crate::commands::Execute;

/// `joinery explain pod …`
#[derive(Debug, clap::Args)]
pub struct PodArgs {
    /// `NAMESPACE/NAME`, or `NAME` in the kubeconfig context's namespace (`default` when the
    /// context names none), as kubectl reads it.
    pub pod: String,
    /// Where the cluster is (a real one, or `joinery sim serve --kubeconfig-out`'s file).
    #[command(flatten)]
    pub kube: crate::kube_options::KubeOptions,
    /// Print JSON: `namespace`, `name`, `phase`, `node` and `explanation` (the lines).
    #[arg(long)]
    pub json: bool,
}

impl Execute for PodArgs {
    async fn execute(self) -> Result<ExitCode> {
        explain_pod(&self.pod, &self.kube, self.json).await
    }
}

/// Prints the explanation for one pod.
async fn explain_pod(
    target: &str,
    kube_options: &crate::kube_options::KubeOptions,
    json: bool,
) -> Result<ExitCode> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = kube_options.config().await?;
    let (namespace, name) = match target.split_once('/') {
        Some((namespace, name)) => (namespace.to_string(), name),
        None => (config.default_namespace.clone(), target),
    };
    if namespace.is_empty() || name.is_empty() || name.contains('/') {
        bail!("expected NAMESPACE/NAME or NAME, got {target:?}");
    }
    let namespace = namespace.as_str();
    let client = joinery_controller::api_client::client(config)
        .context("cannot build the Kubernetes client")?;
    let pod = Api::<Pod>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .with_context(|| format!("cannot read pod {namespace}/{name}"))?;
    let events = Api::<Event>::namespaced(client, namespace)
        .list(&ListParams::default().fields(&format!("involvedObject.name={name}")))
        .await
        .context("cannot list the pod's events")?;
    let text = explain(&pod, &events.items);
    if json {
        let value = serde_json::json!({
            "namespace": namespace,
            "name": name,
            "phase": pod.status.as_ref().and_then(|s| s.phase.clone()),
            "node": pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            "explanation": text.lines().collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        print!("{text}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The explanation text for a pod and its events (newest relevant events last).
pub fn explain(pod: &Pod, events: &[Event]) -> String {
    let name = format!(
        "{}/{}",
        pod.metadata.namespace.clone().unwrap_or_default(),
        pod.metadata.name.clone().unwrap_or_default()
    );
    let mut out = String::new();
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Unknown".into());
    match pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
        Some(node) => out.push_str(&format!(
            "pod {name} is bound to node {node} (phase {phase})\n"
        )),
        None => {
            out.push_str(&format!("pod {name} is not scheduled (phase {phase})\n"));
            let scheduled = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .find(|c| c.type_ == "PodScheduled");
            if let Some(c) = scheduled {
                out.push_str(&format!(
                    "  kube-scheduler: PodScheduled={} {}: {}\n",
                    c.status,
                    c.reason.clone().unwrap_or_default(),
                    c.message.clone().unwrap_or_default()
                ));
            }
        }
    }
    let mut relevant: Vec<&Event> = events
        .iter()
        .filter(|e| {
            matches!(
                e.reason.as_deref(),
                Some("FailedScheduling" | "Nominated" | "Evicted" | "FailedDraining")
            )
        })
        .collect();
    relevant.sort_by_key(|e| {
        e.last_timestamp
            .as_ref()
            .map(|t| t.0)
            .or(e.event_time.as_ref().map(|t| t.0))
    });
    if relevant.is_empty() {
        out.push_str("  no provisioning events for this pod\n");
    }
    for e in relevant {
        let source = e
            .source
            .as_ref()
            .and_then(|s| s.component.clone())
            .or(e.reporting_component.clone())
            .unwrap_or_default();
        out.push_str(&format!(
            "  {source} {}: {}\n",
            e.reason.clone().unwrap_or_default(),
            e.message.clone().unwrap_or_default()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pending_pod_shows_the_scheduler_verdict_and_joinery_reason() {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": []},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/1 nodes are available: 1 Insufficient cpu."}]}}))
        .unwrap();
        let event: Event = serde_json::from_value(json!({"metadata": {"name": "e"}, "involvedObject": {"name": "p"},
            "reason": "FailedScheduling", "message": "Failed to schedule pod, incompatible with nodepool \"default\"",
            "source": {"component": "karpenter"}, "lastTimestamp": "2026-01-01T00:00:00Z"}))
        .unwrap();
        let text = explain(&pod, &[event]);
        assert!(text.contains("not scheduled"), "{text}");
        assert!(text.contains("Insufficient cpu"), "{text}");
        assert!(text.contains("karpenter FailedScheduling: Failed to schedule pod, incompatible with nodepool \"default\""), "{text}");
    }

    #[test]
    fn bound_pod_names_its_node() {
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [], "nodeName": "n1"}, "status": {"phase": "Running"}}))
        .unwrap();
        assert!(explain(&pod, &[]).contains("bound to node n1 (phase Running)"));
    }
}
