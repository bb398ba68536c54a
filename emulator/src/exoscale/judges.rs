//! Exoscale's own API definition and client as judges of the fake and of the `exoscale`
//! plugin, for tests. The judges are the Python scripts in `conformance/exoscale/` run with
//! the official `exoscale` package and `openapi-core`, installed into a virtualenv by
//! `.ci/install-exoscale-judges` (nothing of them is copied into the repository).
//!
//! Which Python: `$JOINERY_EXOSCALE_PYTHON` (an error if it names no file: CI sets it, so CI
//! never skips), else `target/tools/exoscale-venv/bin/python` under the repository, else none
//! (the calling test prints a notice and passes).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_json::Value;

/// The environment variable naming the judges' Python.
pub const PYTHON_ENV: &str = "JOINERY_EXOSCALE_PYTHON";

/// A Python with the judges' packages, and the scripts.
#[derive(Debug, Clone)]
pub struct Judges {
    python: PathBuf,
    scripts: PathBuf,
}

/// What `check_journal.py --json` found.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// Exchanges per operation id.
    pub operations: BTreeMap<String, u64>,
    /// `"<operation id> <status>"` answers the definition does not describe (not judged).
    pub undocumented_statuses: BTreeMap<String, u64>,
    /// Every problem: `at` (journal:line), `operationId`, `problem`.
    pub violations: Vec<Value>,
}

impl Judges {
    /// The judges of the repository at `repo`; `Ok(None)` when they are not installed and
    /// [`PYTHON_ENV`] is unset.
    pub fn find(repo: &Path) -> Result<Option<Judges>, String> {
        let scripts = repo.join("conformance/exoscale");
        if let Some(named) = std::env::var_os(PYTHON_ENV) {
            let python = PathBuf::from(named);
            if !python.is_file() {
                return Err(format!(
                    "{PYTHON_ENV}={} is not a file; run .ci/install-exoscale-judges",
                    python.display()
                ));
            }
            return Ok(Some(Judges { python, scripts }));
        }
        let python = repo.join("target/tools/exoscale-venv/bin/python");
        Ok(python.is_file().then_some(Judges { python, scripts }))
    }

    /// [`Judges::find`] for a test: `None` after printing a notice that `what` is skipped when
    /// they are not installed; a [`PYTHON_ENV`] naming no file panics (CI must not skip).
    pub fn for_test(repo: &Path, what: &str) -> Option<Judges> {
        let judges = Judges::find(repo).unwrap_or_else(|e| panic!("{e}"));
        if judges.is_none() {
            println!(
                "NOTICE: the Exoscale judges are not installed (run .ci/install-exoscale-judges); skipping {what}"
            );
        }
        judges
    }

    /// Runs `check_journal.py` on journals written by [`super::ExoFakeOptions::journal`].
    pub fn check_journals(&self, journals: &[PathBuf]) -> Result<Verdict, String> {
        let out = Command::new(&self.python)
            .arg(self.scripts.join("check_journal.py"))
            .arg("--json")
            .args(journals)
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.python.display()))?;
        serde_json::from_slice(&out.stdout).map_err(|e| {
            format!(
                "check_journal.py printed no verdict ({e}); stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
    }

    /// Runs `drive_client.py` against a fake at `url` (see the script for what it does) and
    /// returns the JSON object it prints: `zone`, `managed`, `unmanaged` instance IDs, `steps`.
    pub fn drive_client(
        &self,
        url: &str,
        zone: &str,
        key: &str,
        secret: &str,
        managed_labels: &Value,
    ) -> Result<Value, String> {
        let out = Command::new(&self.python)
            .arg(self.scripts.join("drive_client.py"))
            .args([
                "--url", url, "--zone", zone, "--key", key, "--secret", secret,
            ])
            .arg("--managed-labels")
            .arg(managed_labels.to_string())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.python.display()))?;
        if !out.status.success() {
            return Err(format!(
                "drive_client.py failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        serde_json::from_slice(&out.stdout).map_err(|e| {
            format!(
                "drive_client.py printed {:?}: {e}",
                String::from_utf8_lossy(&out.stdout)
            )
        })
    }
}
