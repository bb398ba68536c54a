//! One clock for the whole process: the host, the emulated API server and the cluster
//! physics all read simulated time from a shared [`Clock`], so Karpenter's durations (batch
//! windows, `consolidateAfter`, TTLs) keep their meaning in *simulated* seconds while a
//! scenario runs many times faster than real time.
//!
//! A clock either reads the system's monotonic clock, scaled by a speed factor (real time,
//! or real time × `--speed`), or is *driven*: its elapsed time comes from a function its
//! owner supplies — the simulator's virtual time, read from a paused executor clock (see
//! docs/simulate.md). Sleeping is left to the caller (`tokio::time::sleep(clock.to_real(d))`),
//! so this module stays free of any runtime.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Reads how much time has passed since a driven clock started.
pub type ElapsedSource = Arc<dyn Fn() -> Duration + Send + Sync>;

/// Where a clock's elapsed time comes from.
#[derive(Clone)]
enum Source {
    /// The system's monotonic clock since `origin`, times `speed`.
    Scaled { speed: f64, origin: Instant },
    /// A function the clock's owner supplies.
    Driven(ElapsedSource),
}

/// A clock that runs `speed` times faster than real time, starting at the wall-clock time
/// it was created (with `speed == 1.0` it is the real clock), or a driven clock whose time
/// only moves when its source says so ([`Clock::driven`]).
pub struct Clock {
    source: Source,
    /// The simulated wall-clock time at elapsed zero, in nanoseconds since the Unix epoch
    /// (moved by [`Clock::rebase`]).
    origin_wall: AtomicI64,
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Clock")
            .field("driven", &self.is_driven())
            .field("speed", &self.speed())
            .field("now", &self.now())
            .finish()
    }
}

impl Clone for Clock {
    fn clone(&self) -> Self {
        Clock {
            source: self.source.clone(),
            origin_wall: AtomicI64::new(self.origin_wall.load(Ordering::Relaxed)),
        }
    }
}

fn to_nanos(at: SystemTime) -> i64 {
    match at.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_nanos()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_nanos()).unwrap_or(i64::MAX),
    }
}

fn from_nanos(nanos: i64) -> SystemTime {
    if nanos >= 0 {
        UNIX_EPOCH + Duration::from_nanos(nanos as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(nanos.unsigned_abs())
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::real()
    }
}

impl Clock {
    /// The real clock (speed 1).
    pub fn real() -> Clock {
        Clock::with_speed(1.0)
    }

    /// A clock running `speed` times faster than real time. Speeds that are not finite or not
    /// positive are treated as 1.
    pub fn with_speed(speed: f64) -> Clock {
        let speed = if speed.is_finite() && speed > 0.0 {
            speed
        } else {
            1.0
        };
        Clock {
            source: Source::Scaled {
                speed,
                origin: Instant::now(),
            },
            origin_wall: AtomicI64::new(to_nanos(SystemTime::now())),
        }
    }

    /// A clock that reads `start` plus whatever `elapsed` returns, and nothing of the system's
    /// clocks: the simulator's virtual time, where `elapsed` reads a paused executor clock
    /// that moves only when every part of the simulation waits. Its speed is 1 (durations
    /// are passed to the executor's sleeps as they are).
    pub fn driven(start: SystemTime, elapsed: ElapsedSource) -> Clock {
        Clock {
            source: Source::Driven(elapsed),
            origin_wall: AtomicI64::new(to_nanos(start)),
        }
    }

    /// Whether this clock is driven ([`Clock::driven`]) rather than read from the system.
    pub fn is_driven(&self) -> bool {
        matches!(self.source, Source::Driven(_))
    }

    /// Moves the simulated wall-clock time so that it reads `now` at this instant (elapsed
    /// time and durations are unchanged). A simulation calls it once, after setting up and
    /// before its scenario starts, so that cron windows open at known moments.
    pub fn rebase(&self, now: SystemTime) {
        self.origin_wall.store(
            to_nanos(now) - to_nanos(from_nanos(0) + self.elapsed()),
            Ordering::Relaxed,
        );
    }

    fn origin_wall(&self) -> SystemTime {
        from_nanos(self.origin_wall.load(Ordering::Relaxed))
    }

    /// How many simulated seconds pass per real second.
    pub fn speed(&self) -> f64 {
        match &self.source {
            Source::Scaled { speed, .. } => *speed,
            Source::Driven(_) => 1.0,
        }
    }

    /// Simulated time elapsed since the clock was created.
    pub fn elapsed(&self) -> Duration {
        match &self.source {
            Source::Scaled { speed, origin } => origin.elapsed().mul_f64(*speed),
            Source::Driven(elapsed) => elapsed(),
        }
    }

    /// The simulated wall-clock time now.
    pub fn now(&self) -> SystemTime {
        self.origin_wall() + self.elapsed()
    }

    /// The real duration that lasts `simulated` on this clock (what to pass to a real sleep).
    pub fn to_real(&self, simulated: Duration) -> Duration {
        simulated.div_f64(self.speed())
    }

    /// The simulated duration that lasts `real` on this clock.
    pub fn to_simulated(&self, real: Duration) -> Duration {
        real.mul_f64(self.speed())
    }

    /// Simulated seconds since the clock was created, as a float (for reports).
    pub fn seconds(&self) -> f64 {
        self.elapsed().as_secs_f64()
    }

    /// Simulated seconds between the clock's origin and `at` (negative if before it).
    pub fn seconds_at(&self, at: SystemTime) -> f64 {
        match at.duration_since(self.origin_wall()) {
            Ok(d) => d.as_secs_f64(),
            Err(e) => -e.duration().as_secs_f64(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_clock_converts_durations_both_ways() {
        let clock = Clock::with_speed(20.0);
        assert_eq!(
            clock.to_real(Duration::from_secs(10)),
            Duration::from_millis(500)
        );
        assert_eq!(
            clock.to_simulated(Duration::from_millis(500)),
            Duration::from_secs(10)
        );
    }

    #[test]
    fn nonsense_speed_falls_back_to_real_time() {
        assert_eq!(Clock::with_speed(0.0).speed(), 1.0);
        assert_eq!(Clock::with_speed(f64::NAN).speed(), 1.0);
        assert_eq!(Clock::with_speed(-3.0).speed(), 1.0);
    }

    #[test]
    fn simulated_time_runs_faster_than_real_time() {
        let clock = Clock::with_speed(1000.0);
        std::thread::sleep(Duration::from_millis(5));
        assert!(
            clock.elapsed() >= Duration::from_secs(5),
            "{:?}",
            clock.elapsed()
        );
        assert!(clock.seconds_at(clock.now()) >= 5.0);
    }
}

#[cfg(test)]
mod driven_tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn a_driven_clock_moves_only_with_its_source() {
        let ticks = Arc::new(AtomicU64::new(0));
        let source = ticks.clone();
        let start = UNIX_EPOCH + Duration::from_secs(1_767_225_600);
        let clock = Clock::driven(
            start,
            Arc::new(move || Duration::from_secs(source.load(Ordering::Relaxed))),
        );
        assert!(clock.is_driven());
        assert_eq!(clock.now(), start);
        assert_eq!(clock.speed(), 1.0);
        ticks.store(90, Ordering::Relaxed);
        assert_eq!(clock.now(), start + Duration::from_secs(90));
        assert_eq!(clock.seconds(), 90.0);
        assert_eq!(clock.clone().elapsed(), Duration::from_secs(90));
        assert_eq!(
            clock.to_real(Duration::from_secs(7)),
            Duration::from_secs(7)
        );
    }
}

#[cfg(test)]
mod rebase_tests {
    use super::*;

    #[test]
    fn rebase_moves_the_wall_time_and_keeps_elapsed_time() {
        let clock = Clock::with_speed(1000.0);
        let at = UNIX_EPOCH + Duration::from_secs(1_772_470_200);
        clock.rebase(at);
        let now = clock.now();
        assert!(
            now >= at && now.duration_since(at).unwrap() < Duration::from_secs(60),
            "{now:?}"
        );
        let copy = clock.clone();
        assert!(copy.now() >= now, "a clone keeps the rebased origin");
        clock.rebase(UNIX_EPOCH - Duration::from_secs(10));
        assert!(
            clock.now() < UNIX_EPOCH + Duration::from_secs(60),
            "times before the epoch work too"
        );
    }
}
