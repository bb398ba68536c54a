//! The orchestration queue's step: what becomes of a queued disruption command on each pass,
//! decided from plain facts about its replacements (as `lifecycle::next_action` decides a
//! NodeClaim's next step). The controller gathers the facts and acts on the answer.

use std::fmt;
use std::time::{Duration, SystemTime};

/// What a pass knows about one queued command's replacements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueuedCommand {
    /// When the command was queued (its replacements were created).
    pub started: SystemTime,
    /// Every replacement NodeClaim is Initialized.
    pub replacements_initialized: bool,
    /// A replacement the cluster had is gone or being deleted (one created but not yet seen
    /// by the cache does not count).
    pub replacement_vanished: bool,
}

/// Why a queued command is abandoned and its candidates released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RollbackReason {
    /// A replacement NodeClaim vanished before it initialized.
    ReplacementVanished,
    /// The replacements did not all initialize within the command timeout.
    TimedOut,
}

impl fmt::Display for RollbackReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RollbackReason::ReplacementVanished => "a replacement NodeClaim vanished",
            RollbackReason::TimedOut => "replacements did not initialize in time",
        })
    }
}

/// What to do with a queued command now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueStep {
    /// The replacements are ready: delete the candidates and drop the command.
    Finish,
    /// Release the candidates (untaint them) and drop the command.
    RollBack(RollbackReason),
    /// Keep waiting for the replacements.
    Wait,
}

/// The command timeout of the orchestration queue: 80 ms per queued command, clamped to
/// 10 min – 1 h (upstream's rule for waiting on replacements to initialize).
pub fn command_timeout(queued: usize) -> Duration {
    (Duration::from_millis(80) * u32::try_from(queued).unwrap_or(u32::MAX))
        .clamp(Duration::from_secs(600), Duration::from_secs(3600))
}

/// The step for `command` at `now`, with `queued` commands in the queue. Ready replacements
/// win over a timeout that ran out in the same pass; a vanished replacement rolls back at once.
pub fn next_queue_step(command: &QueuedCommand, queued: usize, now: SystemTime) -> QueueStep {
    if command.replacements_initialized {
        QueueStep::Finish
    } else if command.replacement_vanished {
        QueueStep::RollBack(RollbackReason::ReplacementVanished)
    } else if now.duration_since(command.started).unwrap_or_default() >= command_timeout(queued) {
        QueueStep::RollBack(RollbackReason::TimedOut)
    } else {
        QueueStep::Wait
    }
}

/// Removes the commands at `settled` (indices into `queue`, in any order, each at most once)
/// and keeps the others in their order. The controller calls it after every pass, also one
/// that stopped on an error, so that a command finished or rolled back is never handled twice.
pub fn drop_settled<T>(queue: &mut Vec<T>, settled: &[usize]) {
    let mut index = 0;
    queue.retain(|_| {
        let keep = !settled.contains(&index);
        index += 1;
        keep
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: SystemTime = SystemTime::UNIX_EPOCH;

    fn command(initialized: bool, vanished: bool) -> QueuedCommand {
        QueuedCommand {
            started: T0,
            replacements_initialized: initialized,
            replacement_vanished: vanished,
        }
    }

    #[test]
    fn the_command_timeout_is_clamped_between_ten_minutes_and_an_hour() {
        assert_eq!(command_timeout(1), Duration::from_secs(600));
        assert_eq!(command_timeout(100_000), Duration::from_secs(3600));
        assert_eq!(command_timeout(10_000), Duration::from_secs(800));
    }

    #[test]
    fn a_command_waits_finishes_or_rolls_back() {
        let minute = T0 + Duration::from_secs(60);
        let late = T0 + Duration::from_secs(600);
        assert_eq!(
            next_queue_step(&command(false, false), 1, minute),
            QueueStep::Wait
        );
        assert_eq!(
            next_queue_step(&command(true, false), 1, minute),
            QueueStep::Finish
        );
        assert_eq!(
            next_queue_step(&command(false, true), 1, minute),
            QueueStep::RollBack(RollbackReason::ReplacementVanished)
        );
        assert_eq!(
            next_queue_step(&command(false, false), 1, late),
            QueueStep::RollBack(RollbackReason::TimedOut)
        );
        // Ready as the timeout runs out: finished, not rolled back.
        assert_eq!(
            next_queue_step(&command(true, false), 1, late),
            QueueStep::Finish
        );
        // With 10,000 commands queued the timeout is 800 s.
        assert_eq!(
            next_queue_step(&command(false, false), 10_000, late),
            QueueStep::Wait
        );
    }

    #[test]
    fn settled_commands_are_dropped_and_the_rest_keep_their_order() {
        let mut queue = vec!["a", "b", "c", "d"];
        drop_settled(&mut queue, &[2, 0]);
        assert_eq!(queue, ["b", "d"]);
        drop_settled(&mut queue, &[]);
        assert_eq!(queue, ["b", "d"]);
    }
}
