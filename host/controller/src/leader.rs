//! Leader election: of the host's replicas, only the holder of one `coordination.k8s.io/v1`
//! Lease runs the control loops; the others wait, ready, to take over.
//!
//! The decisions (take, renew, wait, release) are [`joinery_core::lease`]'s; this module reads
//! the Lease and writes what the core decides. Every write is guarded: a create fails with 409
//! if another replica created the Lease first, and an update carries the resourceVersion it
//! read, so that of two replicas racing for a lapsed Lease exactly one wins.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use joinery_core::clock::Clock;
use joinery_core::lease::{LeaseRecord, LeaseStep, LeaseTimings, Observation, next_step, released};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::Api;
use kube::api::PostParams;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::Controller;

/// Which Lease the replicas compete for, and as whom this one competes.
#[derive(Debug, Clone)]
pub struct LeaderElectionConfig {
    /// The Lease's namespace (`LEADER_ELECTION_NAMESPACE`, else the controller's own).
    pub namespace: String,
    /// The Lease's name (`LEADER_ELECTION_NAME`).
    pub name: String,
    /// This replica's identity, unique among the replicas (written as `holderIdentity`).
    pub identity: String,
    /// Lease duration, renew deadline and retry period.
    pub timings: LeaseTimings,
}

/// An identity unique to this process: the pod's name (or the host name) and a random
/// suffix, as client-go builds it.
pub fn default_identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "joinery".into());
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    format!("{host}_{:08x}", nanos ^ std::process::id().rotate_left(16))
}

/// Competes for the Lease on behalf of one replica.
pub struct Elector {
    api: Api<Lease>,
    clock: Arc<Clock>,
    config: LeaderElectionConfig,
    observed: Option<Observation>,
}

impl Elector {
    /// An elector for `config`'s Lease through `client`, on `clock`.
    pub fn new(client: kube::Client, clock: Arc<Clock>, config: LeaderElectionConfig) -> Elector {
        Elector {
            api: Api::namespaced(client, &config.namespace),
            clock,
            config,
            observed: None,
        }
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.config.identity
    }

    /// Waits until this replica holds the Lease. API errors (including a lost race, 409) are
    /// logged and retried every retry period; an attempt that gets no answer within the renew
    /// deadline counts as failed. The wait ends only with leadership.
    pub async fn acquire(mut self) -> Leadership {
        let mut waiting_for: Option<String> = None;
        let timings = self.config.timings;
        let acquired_at = loop {
            let attempt_at = self.clock.now();
            let attempt = tokio::time::timeout(
                self.clock.to_real(timings.renew_deadline),
                self.try_acquire_or_renew(),
            );
            match attempt.await {
                Ok(Ok(None)) => break attempt_at,
                Ok(Ok(Some(holder))) => {
                    if waiting_for.as_deref() != Some(holder.as_str()) {
                        tracing::info!(controller = "leaderelection", lease = %self.config.name, %holder, identity = %self.config.identity, "another replica leads; standing by");
                        waiting_for = Some(holder);
                    }
                }
                Ok(Err(error)) => tracing::warn!(
                    controller = "leaderelection",
                    lease = %self.config.name,
                    namespace = %self.config.namespace,
                    error = %describe(&error),
                    "cannot read or write the leader-election Lease; retrying (the namespace must exist and the controller may get, create and update this Lease there)"
                ),
                Err(_) => tracing::warn!(
                    controller = "leaderelection",
                    lease = %self.config.name,
                    deadline = ?timings.renew_deadline,
                    "the API server did not answer for the leader-election Lease within the renew deadline; retrying"
                ),
            }
            tokio::time::sleep(self.clock.to_real(timings.retry_period)).await;
        };
        tracing::info!(controller = "leaderelection", lease = %self.config.name, identity = %self.config.identity, "acquired the leader-election Lease");
        Leadership::start(self, acquired_at)
    }

    /// One round: read the Lease and write what the core decides. `Ok(None)`: this replica
    /// holds it now; `Ok(Some(holder))`: another replica does.
    async fn try_acquire_or_renew(&mut self) -> Result<Option<String>, kube::Error> {
        let now = self.clock.now();
        let current = self.api.get_opt(&self.config.name).await?;
        self.observed = current
            .as_ref()
            .map(|lease| Observation::refresh(self.observed.as_ref(), record_of(lease), now));
        match next_step(
            self.observed.as_ref(),
            &self.config.identity,
            now,
            &self.config.timings,
        ) {
            LeaseStep::Wait { holder, .. } => Ok(Some(holder)),
            LeaseStep::Create(record) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.config.name.clone()),
                        namespace: Some(self.config.namespace.clone()),
                        ..Default::default()
                    },
                    spec: Some(spec_of(&record)),
                };
                let created = self.api.create(&PostParams::default(), &lease).await?;
                self.observed = Some(Observation {
                    record: record_of(&created),
                    since: now,
                });
                Ok(None)
            }
            LeaseStep::Update(record) => {
                let mut lease = current.expect("an update follows a read that found the Lease");
                lease.spec = Some(spec_of(&record));
                // `replace` sends the resourceVersion read above: a concurrent writer makes it 409.
                let written = self
                    .api
                    .replace(&self.config.name, &PostParams::default(), &lease)
                    .await?;
                self.observed = Some(Observation {
                    record: record_of(&written),
                    since: now,
                });
                Ok(None)
            }
        }
    }
}

/// Held leadership: a task renews the Lease every retry period. [`Leadership::lost`] resolves
/// when the Lease was not renewed within the renew deadline of the last renewal (or another
/// replica took it): the replica must then stop acting at once, as upstream's controllers exit.
///
/// The deadline is kept on its own timer, as client-go keeps it: a renewal that never gets an
/// answer (an API server or proxy that accepts and stays silent) ends leadership when the
/// deadline passes, not when the connection finally breaks. The renew deadline is shorter than
/// the lease duration, and a follower counts the lease duration from when it saw the last
/// renewal, which is after this replica started it; so this replica has stopped leading before
/// any follower can take the Lease.
pub struct Leadership {
    lost: watch::Receiver<bool>,
    renewal: JoinHandle<Elector>,
    stop: watch::Sender<bool>,
    clock: Arc<Clock>,
    timings: LeaseTimings,
}

impl Leadership {
    /// Starts renewing a Lease whose last successful write was started at `renewed_at`.
    fn start(mut elector: Elector, renewed_at: SystemTime) -> Leadership {
        let (lost_tx, lost) = watch::channel(false);
        let (stop, mut stopped) = watch::channel(false);
        let clock = elector.clock.clone();
        let timings = elector.config.timings;
        let renewal = tokio::spawn(async move {
            let mut renewed_at = renewed_at;
            loop {
                // The next attempt comes after a retry period, or at the deadline if that is
                // sooner (after failed attempts): an attempt with no time left is lost at once.
                let deadline = renewed_at + timings.renew_deadline;
                let pause = deadline
                    .duration_since(elector.clock.now())
                    .unwrap_or_default()
                    .min(timings.retry_period);
                tokio::select! {
                    biased;
                    _ = stopped.changed() => return elector,
                    _ = tokio::time::sleep(elector.clock.to_real(pause)) => {}
                }
                let attempt_at = elector.clock.now();
                let left = deadline.duration_since(attempt_at).unwrap_or_default();
                let attempt = tokio::time::timeout(
                    elector.clock.to_real(left),
                    elector.try_acquire_or_renew(),
                );
                let outcome = tokio::select! {
                    biased;
                    _ = stopped.changed() => None,
                    outcome = attempt => Some(outcome),
                };
                let Some(outcome) = outcome else {
                    return elector;
                };
                let name = &elector.config.name;
                match outcome {
                    Ok(Ok(None)) => renewed_at = attempt_at,
                    Ok(Ok(Some(holder))) => {
                        tracing::error!(controller = "leaderelection", lease = %name, %holder, "another replica took the leader-election Lease");
                        let _ = lost_tx.send(true);
                        return elector;
                    }
                    Ok(Err(error)) => {
                        let failing_for = elector
                            .clock
                            .now()
                            .duration_since(renewed_at)
                            .unwrap_or_default();
                        tracing::warn!(controller = "leaderelection", lease = %name, error = %describe(&error), ?failing_for, "cannot renew the leader-election Lease");
                        if elector.clock.now() >= deadline {
                            tracing::error!(controller = "leaderelection", lease = %name, "leader-election Lease not renewed within the renew deadline; leadership lost");
                            let _ = lost_tx.send(true);
                            return elector;
                        }
                    }
                    Err(_) => {
                        tracing::error!(controller = "leaderelection", lease = %name, renew_deadline = ?timings.renew_deadline, "the API server did not answer the Lease renewal within the renew deadline; leadership lost");
                        let _ = lost_tx.send(true);
                        return elector;
                    }
                }
            }
        });
        Leadership {
            lost,
            renewal,
            stop,
            clock,
            timings,
        }
    }

    /// Resolves when leadership is lost.
    pub async fn lost(&mut self) {
        let _ = self.lost.wait_for(|lost| *lost).await;
    }

    /// Stops renewing and hands the Lease back (no holder), so that a follower takes over at
    /// once. Call after the control loops have stopped. Bounded by the renew deadline: when
    /// the API server does not answer, the Lease is left to lapse.
    pub async fn release(self) {
        let _ = self.stop.send(true);
        let Ok(elector) = self.renewal.await else {
            return;
        };
        if *self.lost.borrow() {
            return;
        }
        let name = elector.config.name.clone();
        let bound = self.clock.to_real(self.timings.renew_deadline);
        match tokio::time::timeout(bound, hand_back(&elector)).await {
            Ok(Ok(true)) => {
                tracing::info!(controller = "leaderelection", lease = %name, "released the leader-election Lease")
            }
            Ok(Ok(false)) => {}
            Ok(Err(error)) => {
                tracing::warn!(controller = "leaderelection", lease = %name, error = %describe(&error), "cannot release the leader-election Lease; a follower takes over when it lapses")
            }
            Err(_) => {
                tracing::warn!(controller = "leaderelection", lease = %name, "the API server did not answer the Lease release within the renew deadline; a follower takes over when it lapses")
            }
        }
    }

    /// Stops renewing without releasing, as a crash would (for failover tests).
    pub fn abandon(self) {
        self.renewal.abort();
    }
}

/// How a leader's term ended (see [`lead`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TermEnd {
    /// Asked to stop: the loops stopped (`loops_in_time`; if false, the budget ran out and the
    /// rest were aborted), then the Lease was handed back, or left to lapse if the API server
    /// did not answer.
    Stopped {
        /// Whether every loop finished its step within the budget.
        loops_in_time: bool,
    },
    /// Leadership was lost (another replica took the Lease, or it was not renewed within the
    /// renew deadline): the loops were aborted at once, since another replica may be acting.
    Lost,
}

/// Runs a leader's term: `controller`'s loops act until `shutdown` resolves or leadership is
/// lost. On shutdown the loops get `loops_budget` (simulated time, on the Lease's clock) to
/// finish their step, then the Lease is handed back within the renew deadline, so a stop takes
/// at most their sum; a loss meanwhile aborts the loops at once.
pub async fn lead(
    mut controller: Controller,
    mut leadership: Leadership,
    shutdown: impl Future<Output = ()>,
    loops_budget: Duration,
) -> TermEnd {
    tokio::select! {
        biased;
        _ = leadership.lost() => {
            controller.abort();
            return TermEnd::Lost;
        }
        _ = shutdown => {}
    }
    tracing::info!("shutting down");
    let loops_in_time = {
        let stopping = controller.stop_within(leadership.clock.to_real(loops_budget));
        tokio::select! {
            biased;
            in_time = stopping => Some(in_time),
            _ = leadership.lost() => None,
        }
    };
    let Some(loops_in_time) = loops_in_time else {
        controller.abort();
        return TermEnd::Lost;
    };
    leadership.release().await;
    TermEnd::Stopped { loops_in_time }
}

/// Writes the Lease without a holder if this replica still holds it; `Ok(false)` if it does
/// not (or the Lease is gone).
async fn hand_back(elector: &Elector) -> Result<bool, kube::Error> {
    let Some(mut lease) = elector.api.get_opt(&elector.config.name).await? else {
        return Ok(false);
    };
    let record = record_of(&lease);
    if record.holder() != Some(elector.config.identity.as_str()) {
        return Ok(false);
    }
    lease.spec = Some(spec_of(&released(&record, elector.clock.now())));
    elector
        .api
        .replace(&elector.config.name, &PostParams::default(), &lease)
        .await?;
    Ok(true)
}

/// An API error in one line (status code and message), other errors as they print.
fn describe(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!("{} {}", status.code, status.message),
        other => other.to_string(),
    }
}

fn micro_time(at: SystemTime) -> MicroTime {
    MicroTime(crate::util::k8s_time(at).0)
}

fn system_time(at: &MicroTime) -> SystemTime {
    crate::util::system_time(&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at.0))
}

/// The election fields of a Lease.
fn record_of(lease: &Lease) -> LeaseRecord {
    let Some(spec) = lease.spec.as_ref() else {
        return LeaseRecord::default();
    };
    LeaseRecord {
        holder: spec.holder_identity.clone(),
        lease_duration: spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .map(Duration::from_secs),
        acquire_time: spec.acquire_time.as_ref().map(system_time),
        renew_time: spec.renew_time.as_ref().map(system_time),
        transitions: spec.lease_transitions.unwrap_or(0),
    }
}

fn spec_of(record: &LeaseRecord) -> LeaseSpec {
    LeaseSpec {
        holder_identity: record.holder.clone(),
        lease_duration_seconds: record
            .lease_duration
            .map(|d| i32::try_from(d.as_secs()).unwrap_or(i32::MAX)),
        acquire_time: record.acquire_time.map(micro_time),
        renew_time: record.renew_time.map(micro_time),
        lease_transitions: Some(record.transitions),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_round_trips_through_its_spec() {
        let at = UNIX_EPOCH + Duration::from_micros(1_764_000_000_123_456);
        let record = LeaseRecord {
            holder: Some("a_1".into()),
            lease_duration: Some(Duration::from_secs(15)),
            acquire_time: Some(at),
            renew_time: Some(at + Duration::from_secs(2)),
            transitions: 7,
        };
        let lease = Lease {
            metadata: ObjectMeta::default(),
            spec: Some(spec_of(&record)),
        };
        assert_eq!(record_of(&lease), record);
        let json = serde_json::to_value(&lease).unwrap();
        assert_eq!(json["spec"]["holderIdentity"], "a_1");
        assert_eq!(json["spec"]["leaseDurationSeconds"], 15);
        assert!(
            json["spec"]["renewTime"]
                .as_str()
                .unwrap()
                .ends_with(".123456Z"),
            "{json}"
        );
    }

    #[test]
    fn identities_differ_between_electors_of_one_host() {
        let a = default_identity();
        std::thread::sleep(Duration::from_millis(2));
        assert_ne!(a, default_identity());
    }
}
