//! Virtual time: a simulation whose clock moves only when every part of it waits.
//!
//! The whole simulation — the emulated API server, the physics, the fakes of the clouds, the
//! host's controllers and its wasm plugins — runs as tasks of one single-threaded tokio
//! runtime whose clock is paused. When no task can make progress, tokio moves the clock
//! straight to the next timer (a batch window closing, a boot delay ending, a controller's
//! next poll) instead of sleeping; so a simulated hour takes as long as the work done in it.
//! Nothing waits on the kernel: the servers listen on an in-process network (see
//! [`joinery_emulator::network`]), so "every task waits" really means the world is idle, and the
//! order in which tasks run depends only on what they did, never on how fast the machine is.
//! With the same scenario and seed, two runs make the same decisions and write the same
//! report.
//!
//! The host's code paths are those of production: the controllers sleep with tokio's timers
//! and read the shared [`Clock`], which here is driven by the runtime's paused clock.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, UNIX_EPOCH};

use joinery_core::clock::Clock;

use crate::simulation::VIRTUAL_START_UNIX_SECONDS;

/// A clock driven by the current runtime's clock (paused in virtual time), starting at
/// [`VIRTUAL_START_UNIX_SECONDS`] (a scenario's `startAt` rebases it). Call it inside the
/// runtime that drives the simulation.
pub fn clock() -> Clock {
    let origin = tokio::time::Instant::now();
    Clock::driven(
        UNIX_EPOCH + Duration::from_secs(VIRTUAL_START_UNIX_SECONDS),
        Arc::new(move || tokio::time::Instant::now().saturating_duration_since(origin)),
    )
}

/// How long the runtime of a virtual-time run may wait, in real time, for something outside
/// it (a blocking task, a thread, real I/O) before the run is stopped as stalled.
pub const STALL_LIMIT: Duration = Duration::from_secs(120);

/// Why a virtual-time run did not finish.
#[derive(Debug, thiserror::Error)]
pub enum VirtualTimeError {
    /// The runtime could not be built or its thread started.
    #[error("cannot start the virtual-time runtime: {0}")]
    Start(#[from] std::io::Error),
    /// The simulation waited on something outside it for longer than the limit.
    #[error(
        "the simulation waited {waited:?} of real time for something outside it (a blocking \
         task, a thread or real I/O) while its clock stood still; in virtual time every \
         component must wait on the executor's timers or on the in-process network, never on \
         the system clock (see docs/simulate.md, \"Virtual time\")"
    )]
    Stalled {
        /// How long it had waited when it was stopped.
        waited: Duration,
    },
}

/// Runs `work` in virtual time and returns its output: on a runtime of its own (one thread,
/// the clock paused) on a thread of its own, so it may be called from inside another
/// runtime. A panic in `work` is resumed on the caller's thread. A run whose runtime waits
/// more than [`STALL_LIMIT`] of real time on something outside the simulation is stopped.
pub fn run<W, F, T>(work: W) -> Result<T, VirtualTimeError>
where
    W: FnOnce() -> F + Send + 'static,
    F: Future<Output = T>,
    T: Send + 'static,
{
    run_with_stall_limit(STALL_LIMIT, work)
}

/// [`run`] with another stall limit.
pub fn run_with_stall_limit<W, F, T>(limit: Duration, work: W) -> Result<T, VirtualTimeError>
where
    W: FnOnce() -> F + Send + 'static,
    F: Future<Output = T>,
    T: Send + 'static,
{
    // When the runtime's thread parked (nanoseconds since `epoch`, plus one), 0 while it runs.
    // Parking to let the paused clock jump ahead returns at once; a park that lasts means the
    // runtime waits for a wake-up from outside.
    let epoch = Instant::now();
    let parked_at = Arc::new(AtomicU64::new(0));
    let (on_park, on_unpark) = (parked_at.clone(), parked_at.clone());
    let thread = std::thread::Builder::new()
        .name("joinery-virtual-time".into())
        .spawn(move || -> Result<T, VirtualTimeError> {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .on_thread_park(move || {
                    let since = u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
                    on_park.store(since.saturating_add(1), Ordering::Relaxed);
                })
                .on_thread_unpark(move || on_unpark.store(0, Ordering::Relaxed))
                .build()?;
            let stalled = Arc::new(tokio::sync::Notify::new());
            let watchdog = {
                let stalled = stalled.clone();
                let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
                let finished = done.clone();
                let thread = std::thread::Builder::new()
                    .name("joinery-virtual-time-watchdog".into())
                    .spawn(move || {
                        while !finished.load(Ordering::Relaxed) {
                            std::thread::sleep(Duration::from_millis(20).min(limit));
                            let since = parked_at.load(Ordering::Relaxed);
                            if since == 0 {
                                continue;
                            }
                            let parked = epoch + Duration::from_nanos(since - 1);
                            let waited = parked.elapsed();
                            if waited > limit {
                                stalled.notify_one();
                                return Some(waited);
                            }
                        }
                        None
                    })?;
                (done, thread)
            };
            let outcome = runtime.block_on(async {
                tokio::select! {
                    biased;
                    out = work() => Some(out),
                    _ = stalled.notified() => None,
                }
            });
            watchdog.0.store(true, Ordering::Relaxed);
            let waited = watchdog.1.join().ok().flatten();
            match outcome {
                Some(out) => Ok(out),
                None => {
                    // What it waited for may never come: do not wait for it on shutdown.
                    runtime.shutdown_background();
                    Err(VirtualTimeError::Stalled {
                        waited: waited.unwrap_or(limit),
                    })
                }
            }
        })?;
    match thread.join() {
        Ok(result) => result,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_jumps_over_an_idle_hour_at_once() {
        let (slept, wall) = run(|| async {
            let clock = clock();
            let wall = Instant::now();
            tokio::time::sleep(Duration::from_secs(3600)).await;
            (clock.elapsed(), wall.elapsed())
        })
        .unwrap();
        assert_eq!(slept, Duration::from_secs(3600));
        // Not a timing assertion: an hour of real sleep would not end this test at all.
        assert!(wall < Duration::from_secs(3600), "{wall:?}");
    }

    #[test]
    fn a_run_waiting_on_something_outside_it_is_stopped_as_stalled() {
        let (release, wait) = std::sync::mpsc::channel::<()>();
        let outcome = run_with_stall_limit(Duration::from_millis(200), move || async move {
            // A component that waits for a thread (here: forever) instead of a timer.
            let _ = tokio::task::spawn_blocking(move || wait.recv()).await;
        });
        drop(release);
        match outcome {
            Err(VirtualTimeError::Stalled { waited }) => {
                assert!(waited >= Duration::from_millis(200), "{waited:?}")
            }
            other => panic!("not stopped as stalled: {other:?}"),
        }
    }
}
