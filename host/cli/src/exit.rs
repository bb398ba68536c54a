//! The exit codes of every command, one convention for scripts:
//!
//! | code | meaning |
//! |---|---|
//! | 0 | done; for a check (`simulate`, `schedule --fail-on-pending`, `plugins inspect`), it passed |
//! | 1 | the command ran and the check failed: a scenario's expectation, a pod that stays pending, a plugin that does not load |
//! | 2 | usage error: an unknown flag or command, a missing or malformed argument (nothing was done) |
//! | 3 | runtime error: an input that cannot be read or parsed, a cluster that cannot be reached, a plugin that failed; the message says what to fix |

use std::process::ExitCode;

/// The check the command ran failed (its report says why).
pub const CHECK_FAILED: ExitCode = ExitCode::FAILURE;

/// The command line was wrong; nothing was done.
pub fn usage() -> ExitCode {
    ExitCode::from(2)
}

/// The command could not do its job (the printed error says why and what to do).
pub fn error() -> ExitCode {
    ExitCode::from(3)
}

/// The text of a command's error for the terminal: its chain of contexts joined by `: `, with
/// a refusal of the API server reduced to what it said (`pods "web" not found (404
/// NotFound)`) instead of the client's dump of the whole `Status` object.
pub fn describe(error: &anyhow::Error) -> String {
    let mut parts = Vec::new();
    for cause in error.chain() {
        if let Some(kube::Error::Api(status)) = cause.downcast_ref::<kube::Error>() {
            parts.push(format!(
                "{} ({} {})",
                status.message, status.code, status.reason
            ));
            break;
        }
        parts.push(cause.to_string());
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_api_refusal_is_described_by_its_message() {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 404, "reason": "NotFound",
            "message": "pods \"missing\" not found",
            "details": {"name": "missing", "kind": "pods"}
        }))
        .unwrap();
        let error = anyhow::Error::new(kube::Error::Api(Box::new(status)))
            .context("cannot read pod default/missing");
        assert_eq!(
            describe(&error),
            "cannot read pod default/missing: pods \"missing\" not found (404 NotFound)"
        );
    }
}
