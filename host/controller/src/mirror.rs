//! What every cache of ours does with a watch: apply its events to a table, keeping a relist
//! aside until it is complete and swapping it in then, and the task that drives a watch.
//!
//! The [lean caches](crate::lean_cache) (pods and Nodes) and the
//! [provisionable set](crate::state::ProvisionablePods) differ only in what their table is
//! and how an object goes into it and out of it ([`MirrorTable`]); [`Relist`] is the one place
//! where a list is kept aside and swapped in. The other kinds are `kube`'s reflectors, which do
//! the same inside `kube`; [`spawn_watch`] drives both kinds of watch.

use std::ops::DerefMut;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use futures::{Stream, StreamExt};
use kube::runtime::watcher;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// A table a watch keeps current: how an object of the watch goes into it and out of it.
pub trait MirrorTable<O>: Default {
    /// What storing needs beside the table (e.g. the hasher shared by the reader).
    type Context: ?Sized;
    /// Takes in `object`, listed or changed.
    fn upsert(&mut self, context: &Self::Context, object: &O);
    /// Forgets `object`, deleted.
    fn remove(&mut self, context: &Self::Context, object: &O);
}

/// The table a relist is filling beside the current one, until the list is complete.
#[derive(Debug)]
pub struct Relist<T>(Option<T>);

impl<T> Default for Relist<T> {
    fn default() -> Self {
        Relist(None)
    }
}

impl<T> Relist<T> {
    /// Applies one event of the watch: a listed object goes into the table being listed, which
    /// replaces the one `current` gives when the list is complete; a change goes into the
    /// current table. `current` is called only for the events that write it (so a lock is
    /// taken only then). Returns whether a list was completed.
    pub fn apply<O, G>(
        &mut self,
        event: &watcher::Event<O>,
        context: &T::Context,
        current: impl FnOnce() -> G,
    ) -> bool
    where
        T: MirrorTable<O>,
        G: DerefMut<Target = T>,
    {
        match event {
            watcher::Event::Init => self.0 = Some(T::default()),
            watcher::Event::InitApply(object) => self
                .0
                .get_or_insert_with(T::default)
                .upsert(context, object),
            watcher::Event::InitDone => {
                let listed = self.0.take().unwrap_or_default();
                *current() = listed;
                return true;
            }
            watcher::Event::Apply(object) => current().upsert(context, object),
            watcher::Event::Delete(object) => current().remove(context, object),
        }
        false
    }
}

/// The "something changed" signal of the caches: it wakes every loop waiting on it and counts
/// the changes, so a loop can tell in constant time that no cache changed since it last looked.
#[derive(Debug, Default)]
pub struct Changes {
    notify: Notify,
    generation: AtomicU64,
}

impl Changes {
    /// Counts a change and wakes every waiting loop.
    pub fn notify(&self) {
        self.generation.fetch_add(1, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Resolves at the next change (see [`Notify::notified`]).
    pub fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.notify.notified()
    }

    /// How many changes there have been: equal numbers mean no cache changed in between.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }
}

/// What a periodic loop remembers of its last round that left nothing to do: the caches'
/// change count ([`Changes::generation`]) then, and the moment (if any) from which time alone
/// may give it work. While both hold, a round would find the same and is skipped.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Unchanged(Option<(u64, Option<SystemTime>)>);

impl Unchanged {
    /// Whether the last round's findings still hold: no cache changed since (`generation` is
    /// the current count) and `now` is before its deadline.
    pub(crate) fn holds(&self, generation: u64, now: SystemTime) -> bool {
        self.0.is_some_and(|(seen, until)| {
            seen == generation && until.is_none_or(|until| now < until)
        })
    }

    /// Remembers a round that left nothing to do (`settled`) as of `generation`, holding
    /// until `until`; forgets it otherwise.
    pub(crate) fn record(&mut self, settled: bool, generation: u64, until: Option<SystemTime>) {
        self.0 = settled.then_some((generation, until));
    }
}

/// Drives one watch until it ends: each event is handed to `on_event` and then every loop is
/// woken through `changed`; a failed watch (it retries with backoff) is logged under `kind`.
pub fn spawn_watch<K: Send + 'static>(
    stream: impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    kind: String,
    mut on_event: impl FnMut(watcher::Event<K>) + Send + 'static,
    changed: Arc<Changes>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(event) => {
                    on_event(event);
                    changed.notify();
                }
                Err(e) => {
                    tracing::warn!(kind = %kind, error = %e, "watch failed; retrying with backoff")
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_unchanged_round_holds_until_a_change_or_its_deadline() {
        let at = |seconds: u64| SystemTime::UNIX_EPOCH + Duration::from_secs(seconds);
        let mut last = Unchanged::default();
        assert!(!last.holds(0, at(0)), "nothing recorded yet");
        last.record(true, 7, Some(at(100)));
        assert!(last.holds(7, at(99)));
        assert!(!last.holds(8, at(99)), "a cache changed");
        assert!(!last.holds(7, at(100)), "the deadline came");
        last.record(true, 7, None);
        assert!(last.holds(7, at(1_000_000)), "no deadline");
        last.record(false, 7, None);
        assert!(
            !last.holds(7, at(0)),
            "a round that left work is not remembered"
        );
    }
}
