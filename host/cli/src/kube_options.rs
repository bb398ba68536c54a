//! Where a command finds its cluster: kubeconfig files (several merged, as kubectl merges
//! `KUBECONFIG=a:b`) and the context to use.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// Kubeconfig options shared by the commands that talk to a cluster.
#[derive(Debug, Clone, clap::Args)]
pub struct KubeOptions {
    /// Kubeconfig file; repeat it, or list several in `KUBECONFIG` separated by `:`, to merge
    /// them as kubectl does (the first file to set a value wins; missing files in a list are
    /// skipped). Default: the in-cluster configuration, then `~/.kube/config`.
    #[arg(long, env = "KUBECONFIG", value_delimiter = ':')]
    pub kubeconfig: Vec<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long)]
    pub context: Option<String>,
}

impl KubeOptions {
    /// The client configuration these options select.
    pub async fn config(&self) -> Result<kube::Config> {
        let options = KubeConfigOptions {
            context: self.context.clone(),
            ..Default::default()
        };
        let paths: Vec<&PathBuf> = self
            .kubeconfig
            .iter()
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        if paths.is_empty() {
            return match &self.context {
                Some(_) => kube::Config::from_kubeconfig(&options)
                    .await
                    .context("cannot use the default kubeconfig with --context"),
                None => kube::Config::infer()
                    .await
                    .context("no in-cluster config and no kubeconfig; pass --kubeconfig"),
            };
        }
        let mut merged: Option<Kubeconfig> = None;
        for path in &paths {
            if paths.len() > 1 && !path.exists() {
                continue;
            }
            let file = Kubeconfig::read_from(path)
                .with_context(|| format!("cannot read kubeconfig {}", path.display()))?;
            merged = Some(match merged {
                None => file,
                Some(first) => first
                    .merge(file)
                    .with_context(|| format!("cannot merge kubeconfig {}", path.display()))?,
            });
        }
        let Some(kubeconfig) = merged else {
            bail!(
                "none of the kubeconfig files exists: {}",
                paths
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        };
        kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .context("the kubeconfig is not usable (check its current context or --context)")
    }
}
