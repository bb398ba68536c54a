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
    /// logged and retried every retry period; the wait ends only with leadership.
    pub async fn acquire(mut self) -> Leadership {
        let mut waiting_for: Option<String> = None;
        loop {
            match self.try_acquire_or_renew().await {
                Ok(None) => break,
                Ok(Some(holder)) => {
                    if waiting_for.as_deref() != Some(holder.as_str()) {
                        tracing::info!(controller = "leaderelection", lease = %self.config.name, %holder, identity = %self.config.identity, "another replica leads; standing by");
                        waiting_for = Some(holder);
                    }
                }
                Err(error) => tracing::warn!(
                    controller = "leaderelection",
                    lease = %self.config.name,
                    namespace = %self.config.namespace,
                    error = %describe(&error),
                    "cannot read or write the leader-election Lease; retrying (the namespace must exist and the controller may get, create and update this Lease there)"
                ),
            }
            tokio::time::sleep(self.clock.to_real(self.config.timings.retry_period)).await;
        }
        tracing::info!(controller = "leaderelection", lease = %self.config.name, identity = %self.config.identity, "acquired the leader-election Lease");
        Leadership::start(self)
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
/// when a renewal has failed for the whole renew deadline (or another replica took the Lease):
/// the replica must then stop acting at once, as upstream's controllers exit.
pub struct Leadership {
    lost: watch::Receiver<bool>,
    renewal: JoinHandle<Elector>,
    stop: watch::Sender<bool>,
}

impl Leadership {
    fn start(mut elector: Elector) -> Leadership {
        let (lost_tx, lost) = watch::channel(false);
        let (stop, mut stopped) = watch::channel(false);
        let renewal = tokio::spawn(async move {
            let timings = elector.config.timings;
            let mut last_renewal = elector.clock.now();
            loop {
                tokio::select! {
                    _ = stopped.changed() => return elector,
                    _ = tokio::time::sleep(elector.clock.to_real(timings.retry_period)) => {}
                }
                match elector.try_acquire_or_renew().await {
                    Ok(None) => last_renewal = elector.clock.now(),
                    Ok(Some(holder)) => {
                        tracing::error!(controller = "leaderelection", lease = %elector.config.name, %holder, "another replica took the leader-election Lease");
                        let _ = lost_tx.send(true);
                        return elector;
                    }
                    Err(error) => {
                        let failing_for = elector
                            .clock
                            .now()
                            .duration_since(last_renewal)
                            .unwrap_or_default();
                        tracing::warn!(controller = "leaderelection", lease = %elector.config.name, error = %describe(&error), ?failing_for, "cannot renew the leader-election Lease");
                        if failing_for >= timings.renew_deadline {
                            tracing::error!(controller = "leaderelection", lease = %elector.config.name, "leader-election Lease not renewed within the renew deadline; leadership lost");
                            let _ = lost_tx.send(true);
                            return elector;
                        }
                    }
                }
            }
        });
        Leadership {
            lost,
            renewal,
            stop,
        }
    }

    /// Resolves when leadership is lost.
    pub async fn lost(&mut self) {
        let _ = self.lost.wait_for(|lost| *lost).await;
    }

    /// Stops renewing and hands the Lease back (no holder), so that a follower takes over at
    /// once. Call after the control loops have stopped.
    pub async fn release(self) {
        let _ = self.stop.send(true);
        let Ok(elector) = self.renewal.await else {
            return;
        };
        if *self.lost.borrow() {
            return;
        }
        let Ok(Some(mut lease)) = elector.api.get_opt(&elector.config.name).await else {
            return;
        };
        let record = record_of(&lease);
        if record.holder() != Some(elector.config.identity.as_str()) {
            return;
        }
        lease.spec = Some(spec_of(&released(&record, elector.clock.now())));
        match elector
            .api
            .replace(&elector.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => {
                tracing::info!(controller = "leaderelection", lease = %elector.config.name, "released the leader-election Lease")
            }
            Err(error) => {
                tracing::warn!(controller = "leaderelection", lease = %elector.config.name, %error, "cannot release the leader-election Lease; a follower takes over when it lapses")
            }
        }
    }

    /// Stops renewing without releasing, as a crash would (for failover tests).
    pub fn abandon(self) {
        self.renewal.abort();
    }
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
