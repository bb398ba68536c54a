//! `joinery crds`: print the karpenter.sh CRDs as YAML.

use std::process::ExitCode;

use anyhow::Result;

use super::Execute;

/// `joinery crds` (no arguments).
#[derive(Debug, clap::Args)]
pub struct CrdsArgs {}

impl Execute for CrdsArgs {
    async fn execute(self) -> Result<ExitCode> {
        print!("{}", joinery_api::crds_yaml());
        Ok(ExitCode::SUCCESS)
    }
}
