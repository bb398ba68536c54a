//! The fault-injection core the three fakes share (the API server's `ApiFaults`, the
//! simulated cloud's `CloudFaults` and the fake Exoscale API's `ExoFaults`).
//!
//! Each fake names its own calls with a verb type `V` and keeps its own extra faults in a
//! state type `E` (capacity shortages, quotas, lost answers…); this module owns what they have
//! in common: a seeded random sequence, per-verb error rates with a default, per-verb latency
//! with a default, throttling of the next N calls or of a random fraction of them, one-shot
//! countdowns, wildcard matching, and the decision taken before each call. What an injected
//! throttle or failure looks like on the wire stays with each fake, behind [`InjectedAnswer`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use joinery_core::clock::Clock;

/// What a fake does with one call before handling it (see [`Faults::before_call`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Injected {
    /// Handle the call normally.
    Proceed,
    /// Answer 429 with this `Retry-After`.
    Throttle(Duration),
    /// Answer 500.
    Fail,
}

impl Injected {
    /// The fake's own answer for an injected throttle or failure; `None` to proceed.
    pub(crate) fn answer<V, A: InjectedAnswer<V>>(self, verb: V) -> Option<A> {
        match self {
            Injected::Proceed => None,
            Injected::Throttle(retry_after) => Some(A::throttled(retry_after_seconds(retry_after))),
            Injected::Fail => Some(A::failed(verb)),
        }
    }
}

/// How a fake answers an injected fault: its 429 and 500 responses (or error values).
pub(crate) trait InjectedAnswer<V> {
    /// The answer to a throttled call, with its `Retry-After` in whole seconds.
    fn throttled(retry_after_seconds: u64) -> Self;
    /// The answer to a call of `verb` that an error rate made fail.
    fn failed(verb: V) -> Self;
}

/// A `Retry-After` in whole seconds: rounded up, at least 1.
pub(crate) fn retry_after_seconds(wait: Duration) -> u64 {
    (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1)
}

/// A probability as given by a caller, made safe: clamped to 0..=1, 0 when not a number.
pub(crate) fn clamp_rate(rate: f64) -> f64 {
    if rate.is_finite() {
        rate.clamp(0.0, 1.0)
    } else {
        0.0
    }
}

/// Whether a fault's `pattern` (a value or `*`) covers `value`.
pub(crate) fn wildcard_matches(pattern: &str, value: &str) -> bool {
    pattern == "*" || pattern == value
}

/// A number of upcoming events to fault (e.g. "the next 2 creates fail").
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Countdown(u32);

impl Countdown {
    /// Faults the next `events` events (replacing what was pending).
    pub(crate) fn set(&mut self, events: u32) {
        self.0 = events;
    }

    /// Consumes one pending event; `true` if there was one.
    pub(crate) fn take(&mut self) -> bool {
        let pending = self.0 > 0;
        self.0 = self.0.saturating_sub(1);
        pending
    }
}

/// The request rules every fake supports.
#[derive(Debug)]
pub(crate) struct Rules<V> {
    rng: u64,
    error_rates: BTreeMap<V, f64>,
    default_error_rate: f64,
    latency: BTreeMap<V, Duration>,
    default_latency: Duration,
    throttled: Countdown,
    throttle_rate: f64,
    retry_after: Duration,
}

impl<V: Ord + Copy> Rules<V> {
    fn new(seed: u64) -> Self {
        Rules {
            rng: seed,
            error_rates: BTreeMap::new(),
            default_error_rate: 0.0,
            latency: BTreeMap::new(),
            default_latency: Duration::ZERO,
            throttled: Countdown::default(),
            throttle_rate: 0.0,
            retry_after: Duration::from_secs(1),
        }
    }

    /// Makes a fraction `rate` of the calls of `verb` fail.
    pub(crate) fn set_error_rate(&mut self, verb: V, rate: f64) {
        self.error_rates.insert(verb, clamp_rate(rate));
    }

    /// Makes a fraction `rate` of the calls of every verb without a rate of its own fail.
    pub(crate) fn set_default_error_rate(&mut self, rate: f64) {
        self.default_error_rate = clamp_rate(rate);
    }

    /// Delays every call of `verb` by `latency`.
    pub(crate) fn set_latency(&mut self, verb: V, latency: Duration) {
        self.latency.insert(verb, latency);
    }

    /// Delays every call whose verb has no latency of its own by `latency`.
    pub(crate) fn set_default_latency(&mut self, latency: Duration) {
        self.default_latency = latency;
    }

    /// Throttles the next `calls` calls with this `Retry-After`.
    pub(crate) fn throttle_next(&mut self, calls: u32, retry_after: Duration) {
        self.throttled.set(calls);
        self.retry_after = retry_after;
    }

    /// Throttles a fraction `rate` of all calls with this `Retry-After`.
    pub(crate) fn set_throttle_rate(&mut self, rate: f64, retry_after: Duration) {
        self.throttle_rate = clamp_rate(rate);
        self.retry_after = retry_after;
    }

    /// The latency a call of `verb` gets.
    pub(crate) fn latency(&self, verb: V) -> Duration {
        self.latency
            .get(&verb)
            .copied()
            .unwrap_or(self.default_latency)
    }

    /// Decides one call: pending throttles first, then the throttle rate, then the error
    /// rate. A random number is drawn only for a rate above zero, so adding a fault of one
    /// kind does not shift the sequence another kind sees when it is off.
    fn decide(&mut self, verb: V) -> Injected {
        if self.throttled.take() {
            return Injected::Throttle(self.retry_after);
        }
        if self.throttle_rate > 0.0 && crate::random::next_unit(&mut self.rng) < self.throttle_rate
        {
            return Injected::Throttle(self.retry_after);
        }
        let rate = self
            .error_rates
            .get(&verb)
            .copied()
            .unwrap_or(self.default_error_rate);
        if rate > 0.0 && crate::random::next_unit(&mut self.rng) < rate {
            return Injected::Fail;
        }
        Injected::Proceed
    }
}

/// Everything one fake injects: the shared [`Rules`] and its own extras.
#[derive(Debug)]
pub(crate) struct FaultState<V, E> {
    /// The request rules.
    pub(crate) rules: Rules<V>,
    /// The fake's own faults.
    pub(crate) extra: E,
}

/// A fake's fault settings behind a lock. Clones share the settings, so a test keeps one
/// and changes it while the fake runs. Nothing is injected by default.
#[derive(Debug)]
pub(crate) struct Faults<V, E> {
    inner: Arc<Mutex<FaultState<V, E>>>,
}

impl<V, E> Clone for Faults<V, E> {
    fn clone(&self) -> Self {
        Faults {
            inner: self.inner.clone(),
        }
    }
}

impl<V: Ord + Copy, E: Default> Faults<V, E> {
    /// No faults; random decisions seeded with `seed`.
    pub(crate) fn with_seed(seed: u64) -> Self {
        Faults {
            inner: Arc::new(Mutex::new(FaultState {
                rules: Rules::new(seed),
                extra: E::default(),
            })),
        }
    }

    /// The settings, for reading or changing them.
    pub(crate) fn lock(&self) -> MutexGuard<'_, FaultState<V, E>> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Restarts the random sequence from `seed`.
    pub(crate) fn reseed(&self, seed: u64) {
        self.lock().rules.rng = seed;
    }

    /// Removes every fault; the random sequence continues where it was.
    pub(crate) fn clear(&self) {
        let mut state = self.lock();
        let rng = state.rules.rng;
        *state = FaultState {
            rules: Rules::new(rng),
            extra: E::default(),
        };
    }

    /// Decides whether a call of `verb` is throttled, fails or proceeds.
    pub(crate) fn before_call(&self, verb: V) -> Injected {
        self.lock().rules.decide(verb)
    }

    /// Waits out the latency of a call of `verb` (simulated time on `clock`), then returns
    /// the fake's answer to an injected fault, if any.
    pub(crate) async fn delay_and_decide<A: InjectedAnswer<V>>(
        &self,
        verb: V,
        clock: &Clock,
    ) -> Option<A> {
        let latency = self.lock().rules.latency(verb);
        if !latency.is_zero() {
            tokio::time::sleep(clock.to_real(latency)).await;
        }
        self.before_call(verb).answer(verb)
    }
}

/// Writes a fake's public setters for the shared request rules: each named method takes the
/// listed arguments and hands them to the [`Rules`] method after `=>`. The fake keeps its
/// fault state in a field named `faults` (a [`Faults`]).
macro_rules! rule_setters {
    ($fake:ty { $( $(#[$doc:meta])* $name:ident => $rule:ident($($arg:ident: $ty:ty),*); )* }) => {
        impl $fake {
            $(
                $(#[$doc])*
                pub fn $name(&self, $($arg: $ty),*) {
                    self.faults.lock().rules.$rule($($arg),*);
                }
            )*
        }
    };
}
pub(crate) use rule_setters;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_throttles_come_before_rates_and_count_down() {
        let faults: Faults<u8, ()> = Faults::with_seed(1);
        faults.lock().rules.set_error_rate(0, 1.0);
        faults
            .lock()
            .rules
            .throttle_next(1, Duration::from_millis(1500));
        assert_eq!(
            faults.before_call(0),
            Injected::Throttle(Duration::from_millis(1500))
        );
        assert_eq!(faults.before_call(0), Injected::Fail);
        assert_eq!(faults.before_call(1), Injected::Proceed);
        assert_eq!(retry_after_seconds(Duration::from_millis(1500)), 2);
        assert_eq!(retry_after_seconds(Duration::ZERO), 1);
        faults.clear();
        assert_eq!(faults.before_call(0), Injected::Proceed);
    }

    #[test]
    fn the_same_seed_gives_the_same_failures() {
        let failures = |seed: u64| -> Vec<bool> {
            let faults: Faults<u8, ()> = Faults::with_seed(seed);
            faults.lock().rules.set_default_error_rate(0.5);
            std::iter::repeat_with(|| faults.before_call(7) == Injected::Fail)
                .take(64)
                .collect()
        };
        let first = failures(7);
        assert_eq!(first, failures(7));
        let count = first.iter().filter(|failed| **failed).count();
        assert!(count > 15 && count < 49, "{count} of 64");
    }
}
