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
