use super::*;
use joinery_core::disruption::{QueueStep, RollbackReason};

/// Records what a pass did; `finish` fails for the commands named in `failing`.
#[derive(Default)]
struct Recorded {
    failing: Vec<&'static str>,
    done: Vec<String>,
}

impl QueueEffects<&'static str> for Recorded {
    async fn finish(&mut self, command: &&'static str) -> Result<(), ControllerError> {
        if self.failing.contains(command) {
            return Err(ControllerError::NotSynced(format!("delete of {command}")));
        }
        self.done.push(format!("finish {command}"));
        Ok(())
    }

    async fn roll_back(&mut self, command: &&'static str, why: RollbackReason) {
        self.done.push(format!("roll back {command}: {why}"));
    }

    async fn wait(&mut self, command: &&'static str) {
        self.done.push(format!("wait {command}"));
    }
}

#[tokio::test]
async fn a_pass_that_fails_a_delete_still_drops_what_it_settled() {
    let mut queue = vec!["a", "b", "c", "d", "e"];
    let steps = [
        QueueStep::Finish,
        QueueStep::RollBack(RollbackReason::TimedOut),
        QueueStep::Wait,
        QueueStep::Finish,
        QueueStep::Finish,
    ];
    let mut effects = Recorded {
        failing: vec!["d"],
        ..Default::default()
    };
    let (settled, failure) = queue_pass(&queue, &steps, &mut effects).await;
    assert!(failure.is_some());
    assert_eq!(
        effects.done,
        [
            "finish a",
            "roll back b: replacements did not initialize in time",
            "wait c"
        ]
    );
    disruption::drop_settled(&mut queue, &settled);
    // a and b are not handled again; d (failed) and e (not reached) are retried.
    assert_eq!(queue, ["c", "d", "e"]);
}

#[tokio::test]
async fn a_pass_without_failure_settles_every_ready_or_failed_command() {
    let mut queue = vec!["a", "b", "c"];
    let steps = [
        QueueStep::Wait,
        QueueStep::Finish,
        QueueStep::RollBack(RollbackReason::ReplacementVanished),
    ];
    let (settled, failure) = queue_pass(&queue, &steps, &mut Recorded::default()).await;
    assert!(failure.is_none());
    disruption::drop_settled(&mut queue, &settled);
    assert_eq!(queue, ["a"]);
}
