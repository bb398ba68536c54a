//! `joinery explain capacity`: the instance-type capacity the controller learned from the
//! nodes that joined (the ConfigMap `joinery-learned-capacity` in its namespace), which it
//! uses in place of the cloud plugin's estimate (see docs/operations.md).

use std::process::ExitCode;

use anyhow::{Context, Result};
use joinery_controller::learned::{CONFIGMAP, KEY};
use joinery_core::learned::LearnedCapacity;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

use crate::commands::Execute;

/// `joinery explain capacity …`
#[derive(Debug, clap::Args)]
pub struct CapacityArgs {
    /// The controller's namespace (its `SYSTEM_NAMESPACE`).
    #[arg(long, short = 'n', default_value = "joinery")]
    pub namespace: String,
    /// Where the cluster is (a real one, or `joinery sim serve --kubeconfig-out`'s file).
    #[command(flatten)]
    pub kube: crate::kube_options::KubeOptions,
    /// Print JSON: NodeClass (`group/kind/name`) → instance type → `capacity`, `allocatable`,
    /// `nodes`.
    #[arg(long)]
    pub json: bool,
}

impl Execute for CapacityArgs {
    async fn execute(self) -> Result<ExitCode> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = joinery_controller::api_client::client(self.kube.config().await?)
            .context("cannot build the Kubernetes client")?;
        let cm = Api::<ConfigMap>::namespaced(client, &self.namespace)
            .get_opt(CONFIGMAP)
            .await
            .with_context(|| format!("cannot read ConfigMap {}/{CONFIGMAP}", self.namespace))?;
        let learned = match cm
            .as_ref()
            .and_then(|c| c.data.as_ref())
            .and_then(|d| d.get(KEY))
        {
            Some(text) => serde_json::from_str::<LearnedCapacity>(text).with_context(|| {
                format!(
                    "ConfigMap {}/{CONFIGMAP}: {KEY} is not learned capacity",
                    self.namespace
                )
            })?,
            None => LearnedCapacity::default(),
        };
        if self.json {
            println!("{}", serde_json::to_string_pretty(&learned)?);
            return Ok(ExitCode::SUCCESS);
        }
        let now = std::time::SystemTime::now();
        let (usable, rejected) = learned.validated(now);
        if usable.is_empty() && rejected.is_empty() {
            println!(
                "Nothing learned yet (no ConfigMap {}/{CONFIGMAP}, or no initialized node): every instance type uses its plugin's estimate.",
                self.namespace
            );
            return Ok(ExitCode::SUCCESS);
        }
        println!("Learned from initialized nodes (used in place of the plugins' estimates):");
        let show = |m: &std::collections::BTreeMap<String, String>| {
            m.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let now_seconds = now
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        use joinery_core::text_table::{Align, TextTable};
        let mut table = TextTable::new(&[
            ("NODECLASS", Align::Left),
            ("INSTANCE TYPE", Align::Left),
            ("NODES", Align::Right),
            ("LAST SEEN", Align::Right),
            ("CAPACITY", Align::Left),
            ("ALLOCATABLE", Align::Left),
        ]);
        for (class, kind, l) in usable.iter() {
            table.row(vec![
                class.to_string(),
                kind.to_string(),
                l.nodes.to_string(),
                age(now_seconds.saturating_sub(l.observed_at)),
                show(&l.capacity),
                show(&l.allocatable),
            ]);
        }
        print!("{}", table.render());
        let (low, high) = joinery_core::learned::BAND;
        println!(
            "Each value is used within {low}–{high}× of its plugin's estimate; an entry expires {} after a node last confirmed it.",
            age(joinery_core::learned::LEARNED_TTL.as_secs())
        );
        if !rejected.is_empty() {
            println!(
                "Ignored (not a kubelet's report; the controller drops them at its next save):"
            );
            for entry in &rejected {
                println!("  {entry}");
            }
        }
        Ok(ExitCode::SUCCESS)
    }

    /// The answer is the output: only warnings are logged.
    fn default_log_level(&self) -> String {
        "warn".to_string()
    }
}

/// A duration as kubectl prints ages: `45s`, `12m`, `5h`, `3d`.
fn age(seconds: u64) -> String {
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}
