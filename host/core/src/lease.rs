//! Leader election on a `coordination.k8s.io/v1` Lease, as decisions on plain values.
//!
//! Replicas of the host compete for one Lease; only its holder runs the control loops. The
//! rules are client-go's (which upstream Karpenter uses through controller-runtime):
//!
//! - A Lease with no holder, or whose holder has not renewed it for `leaseDurationSeconds`,
//!   may be taken. Expiry is measured from the moment *this replica observed* the record last
//!   change, on its own clock, never from the `renewTime` another replica wrote: clocks of
//!   different machines need not agree.
//! - The holder renews every [`LeaseTimings::retry_period`]; if it cannot renew for
//!   [`LeaseTimings::renew_deadline`], it has lost the lease and must stop acting.
//! - A holder that stops cleanly releases the Lease (empty holder), so that a follower takes
//!   over at once rather than after the lease duration.
//!
//! The controller does the reading and writing (every write carries the resourceVersion it
//! read, so two replicas can never both win); this module only says what to write.

use std::time::{Duration, SystemTime};

/// Upstream's (controller-runtime's) lease timings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTimings {
    /// How long a Lease stays held without renewal (`leaseDurationSeconds`; 15 s).
    pub lease_duration: Duration,
    /// How long the holder keeps trying to renew before it gives up leadership (10 s).
    pub renew_deadline: Duration,
    /// The pause between attempts, of the holder to renew and of followers to acquire (2 s).
    pub retry_period: Duration,
}

impl Default for LeaseTimings {
    fn default() -> Self {
        LeaseTimings {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// The fields of a Lease's spec that election reads and writes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaseRecord {
    /// `holderIdentity`; `None` (or empty) when nobody holds it.
    pub holder: Option<String>,
    /// `leaseDurationSeconds` as written by the holder.
    pub lease_duration: Option<Duration>,
    /// `acquireTime`: when the current holder took it.
    pub acquire_time: Option<SystemTime>,
    /// `renewTime`: when the holder last renewed it.
    pub renew_time: Option<SystemTime>,
    /// `leaseTransitions`: how many times the holder changed.
    pub transitions: i32,
}

impl LeaseRecord {
    /// The holder's identity, if the Lease is held.
    pub fn holder(&self) -> Option<&str> {
        self.holder.as_deref().filter(|h| !h.is_empty())
    }
}

/// What a replica saw of the Lease on its last read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// The record as read.
    pub record: LeaseRecord,
    /// When (on this replica's clock) the record was first seen in this exact state: expiry
    /// counts from here.
    pub since: SystemTime,
}

impl Observation {
    /// Updates the observation with a fresh read at `now`: the timestamp moves only when the
    /// record changed (a renewal changes `renewTime`).
    pub fn refresh(
        previous: Option<&Observation>,
        record: LeaseRecord,
        now: SystemTime,
    ) -> Observation {
        match previous {
            Some(p) if p.record == record => p.clone(),
            _ => Observation { record, since: now },
        }
    }
}

/// What a replica should do with the Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseStep {
    /// No Lease exists: create it, held by this replica.
    Create(LeaseRecord),
    /// Write this record (guarded by the resourceVersion read): a takeover of a free or
    /// expired Lease, or this holder's renewal.
    Update(LeaseRecord),
    /// Another replica holds the Lease; try again after a retry period. `expires` is when the
    /// hold lapses if it is not renewed meanwhile.
    Wait {
        /// The current holder.
        holder: String,
        /// When the hold lapses without renewal (on this replica's clock).
        expires: SystemTime,
    },
}

/// Decides the next write for replica `me` at `now`, given what it observed (`None`: the
/// Lease does not exist).
pub fn next_step(
    observed: Option<&Observation>,
    me: &str,
    now: SystemTime,
    timings: &LeaseTimings,
) -> LeaseStep {
    let held_by_me = |record: &LeaseRecord| LeaseRecord {
        holder: Some(me.to_string()),
        lease_duration: Some(timings.lease_duration),
        acquire_time: Some(now),
        renew_time: Some(now),
        transitions: record.transitions,
    };
    let Some(observed) = observed else {
        return LeaseStep::Create(held_by_me(&LeaseRecord::default()));
    };
    let record = &observed.record;
    match record.holder() {
        Some(holder) if holder == me => LeaseStep::Update(LeaseRecord {
            acquire_time: record.acquire_time.or(Some(now)),
            ..held_by_me(record)
        }),
        Some(holder) => {
            let duration = record.lease_duration.unwrap_or(timings.lease_duration);
            let expires = observed.since + duration;
            if now < expires {
                LeaseStep::Wait {
                    holder: holder.to_string(),
                    expires,
                }
            } else {
                LeaseStep::Update(LeaseRecord {
                    transitions: record.transitions + 1,
                    ..held_by_me(record)
                })
            }
        }
        None => LeaseStep::Update(LeaseRecord {
            transitions: record.transitions + 1,
            ..held_by_me(record)
        }),
    }
}

/// The record a holder writes when it stops cleanly: no holder, so the next replica takes
/// over without waiting for expiry.
pub fn released(record: &LeaseRecord, now: SystemTime) -> LeaseRecord {
    LeaseRecord {
        holder: None,
        lease_duration: Some(Duration::from_secs(1)),
        acquire_time: None,
        renew_time: Some(now),
        transitions: record.transitions,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
    }

    fn held(holder: &str, renewed: u64) -> LeaseRecord {
        LeaseRecord {
            holder: Some(holder.into()),
            lease_duration: Some(Duration::from_secs(15)),
            acquire_time: Some(at(0)),
            renew_time: Some(at(renewed)),
            transitions: 3,
        }
    }

    #[test]
    fn a_missing_lease_is_created_held_by_me() {
        let step = next_step(None, "a", at(5), &LeaseTimings::default());
        let LeaseStep::Create(record) = step else {
            panic!("{step:?}")
        };
        assert_eq!(record.holder(), Some("a"));
        assert_eq!(
            (record.acquire_time, record.renew_time),
            (Some(at(5)), Some(at(5)))
        );
        assert_eq!(record.lease_duration, Some(Duration::from_secs(15)));
        assert_eq!(record.transitions, 0);
    }

    #[test]
    fn another_holder_is_waited_for_until_the_lease_lapses_from_my_observation() {
        let timings = LeaseTimings::default();
        // The record says it was renewed long ago (another machine's clock), but this replica
        // first saw it at 100: expiry counts from 100.
        let seen = Observation {
            record: held("b", 0),
            since: at(100),
        };
        assert_eq!(
            next_step(Some(&seen), "a", at(114), &timings),
            LeaseStep::Wait {
                holder: "b".into(),
                expires: at(115)
            }
        );
        let LeaseStep::Update(taken) = next_step(Some(&seen), "a", at(115), &timings) else {
            panic!()
        };
        assert_eq!(taken.holder(), Some("a"));
        assert_eq!(taken.transitions, 4, "a change of holder is a transition");
        assert_eq!(taken.acquire_time, Some(at(115)));
    }

    #[test]
    fn a_renewal_seen_by_the_follower_restarts_its_expiry() {
        let first = Observation::refresh(None, held("b", 0), at(100));
        let same = Observation::refresh(Some(&first), held("b", 0), at(110));
        assert_eq!(
            same.since,
            at(100),
            "an unchanged record keeps its first sighting"
        );
        let renewed = Observation::refresh(Some(&same), held("b", 12), at(112));
        assert_eq!(renewed.since, at(112));
        assert!(matches!(
            next_step(Some(&renewed), "a", at(120), &LeaseTimings::default()),
            LeaseStep::Wait { .. }
        ));
    }

    #[test]
    fn my_own_lease_is_renewed_keeping_its_acquire_time_and_transitions() {
        let mine = Observation {
            record: held("a", 10),
            since: at(10),
        };
        let LeaseStep::Update(renewed) =
            next_step(Some(&mine), "a", at(12), &LeaseTimings::default())
        else {
            panic!()
        };
        assert_eq!(renewed.holder(), Some("a"));
        assert_eq!(renewed.acquire_time, Some(at(0)));
        assert_eq!(renewed.renew_time, Some(at(12)));
        assert_eq!(renewed.transitions, 3);
    }

    #[test]
    fn a_released_lease_is_taken_at_once() {
        let free = Observation {
            record: released(&held("b", 10), at(11)),
            since: at(11),
        };
        assert_eq!(free.record.holder(), None);
        let LeaseStep::Update(taken) =
            next_step(Some(&free), "a", at(11), &LeaseTimings::default())
        else {
            panic!()
        };
        assert_eq!(taken.holder(), Some("a"));
        assert_eq!(taken.transitions, 4);
        // An empty string is no holder either (what other clients write).
        let empty = Observation {
            record: LeaseRecord {
                holder: Some(String::new()),
                ..held("x", 0)
            },
            since: at(0),
        };
        assert!(matches!(
            next_step(Some(&empty), "a", at(1), &LeaseTimings::default()),
            LeaseStep::Update(_)
        ));
    }

    #[test]
    fn the_holders_own_lease_duration_decides_expiry() {
        let long = Observation {
            record: LeaseRecord {
                lease_duration: Some(Duration::from_secs(60)),
                ..held("b", 0)
            },
            since: at(0),
        };
        assert!(matches!(
            next_step(Some(&long), "a", at(30), &LeaseTimings::default()),
            LeaseStep::Wait { .. }
        ));
        assert!(matches!(
            next_step(Some(&long), "a", at(60), &LeaseTimings::default()),
            LeaseStep::Update(_)
        ));
    }
}
