//! One clock for the whole process: the host, the emulated API server and the cluster
//! physics all read simulated time from a shared [`Clock`], so Karpenter's durations (batch
//! windows, `consolidateAfter`, TTLs) keep their meaning in *simulated* seconds while a
//! scenario runs many times faster than real time.
//!
//! The clock only reads the system's monotonic and wall clocks; sleeping is left to the
//! caller (`tokio::time::sleep(clock.to_real(d))`), so this module stays free of any runtime.

use std::time::{Duration, Instant, SystemTime};

/// A clock that runs `speed` times faster than real time, starting at the wall-clock time
/// it was created. With `speed == 1.0` it is the real clock.
#[derive(Debug, Clone)]
pub struct Clock {
    speed: f64,
    origin_instant: Instant,
    origin_wall: SystemTime,
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
        let speed = if speed.is_finite() && speed > 0.0 { speed } else { 1.0 };
        Clock { speed, origin_instant: Instant::now(), origin_wall: SystemTime::now() }
    }

    /// How many simulated seconds pass per real second.
    pub fn speed(&self) -> f64 {
        self.speed
    }

    /// Simulated time elapsed since the clock was created.
    pub fn elapsed(&self) -> Duration {
        self.origin_instant.elapsed().mul_f64(self.speed)
    }

    /// The simulated wall-clock time now.
    pub fn now(&self) -> SystemTime {
        self.origin_wall + self.elapsed()
    }

    /// The real duration that lasts `simulated` on this clock (what to pass to a real sleep).
    pub fn to_real(&self, simulated: Duration) -> Duration {
        simulated.div_f64(self.speed)
    }

    /// The simulated duration that lasts `real` on this clock.
    pub fn to_simulated(&self, real: Duration) -> Duration {
        real.mul_f64(self.speed)
    }

    /// Simulated seconds since the clock was created, as a float (for reports).
    pub fn seconds(&self) -> f64 {
        self.elapsed().as_secs_f64()
    }

    /// Simulated seconds between the clock's origin and `at` (negative if before it).
    pub fn seconds_at(&self, at: SystemTime) -> f64 {
        match at.duration_since(self.origin_wall) {
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
        assert_eq!(clock.to_real(Duration::from_secs(10)), Duration::from_millis(500));
        assert_eq!(clock.to_simulated(Duration::from_millis(500)), Duration::from_secs(10));
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
        assert!(clock.elapsed() >= Duration::from_secs(5), "{:?}", clock.elapsed());
        assert!(clock.seconds_at(clock.now()) >= 5.0);
    }
}
