//! Virtual time: a simulation whose clock moves only when every part of it waits.
//!
//! The whole simulation — the emulated API server, the physics, the fakes of the clouds, the
//! host's controllers and its wasm plugins — runs as tasks of one single-threaded tokio
//! runtime whose clock is paused. When no task can make progress, tokio moves the clock
//! straight to the next timer (a batch window closing, a boot delay ending, a controller's
//! next poll) instead of sleeping; so a simulated hour takes as long as the work done in it.
//! Nothing waits on the kernel: the servers listen on an in-process network (see
//! [`joinery_sim::network`]), so "every task waits" really means the world is idle, and the
//! order in which tasks run depends only on what they did, never on how fast the machine is.
//! With the same scenario and seed, two runs make the same decisions and write the same
//! report.
//!
//! The host's code paths are those of production: the controllers sleep with tokio's timers
//! and read the shared [`Clock`], which here is driven by the runtime's paused clock.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

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

/// Runs `work` in virtual time and returns its output: on a runtime of its own (one thread,
/// the clock paused) on a thread of its own, so it may be called from inside another
/// runtime. A panic in `work` is resumed on the caller's thread.
pub fn run<W, F, T>(work: W) -> std::io::Result<T>
where
    W: FnOnce() -> F + Send + 'static,
    F: Future<Output = T>,
    T: Send + 'static,
{
    let thread = std::thread::Builder::new()
        .name("joinery-virtual-time".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()?;
            Ok(runtime.block_on(work()))
        })?;
    match thread.join() {
        Ok(result) => result,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}
