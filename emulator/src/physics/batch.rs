//! Batch controllers: Jobs and CronJobs (`batch/v1`).
//!
//! The **Job controller** runs a Job's pods to completion: it creates pods from the template
//! (`generateName: <job>-`, a controller owner reference to the Job, the Job's labels) until
//! `parallelism` of them are active (not finished, not being deleted), never more than the
//! completions still missing, and counts the pods that end `Succeeded` and `Failed` (the
//! kubelets end them, see [`super::RUN_FOR_ANNOTATION`]). A Job with `completions` is
//! complete once that many pods succeeded; one without (a work queue) once one pod succeeded
//! and no other is active (no new pod starts after the first success). More failed pods than
//! `backoffLimit` fail it (`BackoffLimitExceeded`) and its active pods are deleted; a
//! suspended Job has its active pods deleted and creates none. Status: `active`, `ready`,
//! `terminating`, `succeeded`, `failed`, `startTime`, `completionTime` and the conditions
//! `SuccessCriteriaMet` and `Complete`, `FailureTarget` and `Failed`, `Suspended`.
//!
//! The **CronJob controller** creates, at each time its `schedule` fires on the simulated
//! clock (UTC), a Job `<cronjob>-<minutes since the epoch>` from its `jobTemplate`, owned by
//! it and annotated `batch.kubernetes.io/cronjob-scheduled-timestamp`; only the latest missed
//! time is run, and not at all once `startingDeadlineSeconds` has passed. `concurrencyPolicy`
//! `Forbid` waits while a Job of it is active, `Replace` deletes the active ones first. It keeps
//! `successfulJobsHistoryLimit` (3) succeeded and `failedJobsHistoryLimit` (1) failed Jobs,
//! deleting older ones (their pods go with them, by the API server's garbage collection).
//! Status: `active`, `lastScheduleTime`, `lastSuccessfulTime`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use joinery_core::cron::Schedule;
use k8s_openapi::api::batch::v1::{CronJob, CronJobStatus, Job, JobCondition, JobSpec, JobStatus};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

use super::cache::Cache;
use super::{
    PhysicsContext, PhysicsError, Trigger, api_code, controller_reference, controller_uid,
    delete_pod, is_deleting, is_ready, is_terminal, name_of, system_time, time_at, watch,
};
use crate::apiserver::admission::{JOB_CONTROLLER_UID_LABEL, JOB_NAME_LABEL};

/// The lag series the batch controllers record into (shared with the workload controllers).
const LAG_SERIES: &str = "workloads";

/// The annotation a CronJob's Job carries: the time it was scheduled for.
pub(crate) const SCHEDULED_TIMESTAMP_ANNOTATION: &str =
    "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// How far ahead the CronJob controller looks for a schedule's next time.
const SCHEDULE_HORIZON: Duration = Duration::from_secs(400 * 24 * 3600);

/// Runs the Job and CronJob controllers until the task is aborted.
pub(crate) async fn run(shared: Arc<PhysicsContext>) {
    let client = shared.client.clone();
    let mut job_events = watch(Api::<Job>::all(client.clone()), watcher::Config::default());
    let mut cronjob_events = watch(
        Api::<CronJob>::all(client.clone()),
        watcher::Config::default(),
    );
    // Pods are watched only while a Job exists (as for DaemonSets).
    let mut pod_events = None;
    let mut resync = tokio::time::interval(shared.real_resync());
    let mut trigger = Trigger::scaled(&shared.clock);
    let mut controller = Batch {
        shared,
        jobs: Cache::new(),
        cronjobs: Cache::new(),
        pods: Cache::new(),
    };
    loop {
        let wanted = controller.jobs.iter().next().is_some();
        if wanted != pod_events.is_some() && controller.jobs.is_synced() {
            pod_events =
                wanted.then(|| watch(Api::<Pod>::all(client.clone()), watcher::Config::default()));
            controller.pods = Cache::new();
        }
        let pods_synced = pod_events.is_none() || controller.pods.is_synced();
        let synced = controller.jobs.is_synced() && controller.cronjobs.is_synced() && pods_synced;
        let next_pod = async {
            match pod_events.as_mut() {
                Some(events) => events.next().await,
                None => std::future::pending().await,
            }
        };
        let next_run = controller.next_run();
        let until_next_run = controller
            .shared
            .real_until(next_run.unwrap_or(SystemTime::UNIX_EPOCH));
        tokio::select! {
            biased;
            Some(event) = job_events.next() => {
                controller.jobs.apply(event);
                trigger.fire();
            }
            Some(event) = cronjob_events.next() => {
                controller.cronjobs.apply(event);
                trigger.fire();
            }
            Some(event) = next_pod => {
                controller.pods.apply(event);
                trigger.fire();
            }
            _ = resync.tick() => trigger.fire(),
            _ = tokio::time::sleep(until_next_run), if next_run.is_some() => trigger.fire(),
            fired = trigger.due(), if synced => {
                controller.shared.record_pass(LAG_SERIES, fired);
                controller.pass().await;
            }
        }
    }
}

struct Batch {
    shared: Arc<PhysicsContext>,
    jobs: Cache<Job>,
    cronjobs: Cache<CronJob>,
    pods: Cache<Pod>,
}

/// Whether a condition of `kind` is `True`.
fn holds(conditions: Option<&Vec<JobCondition>>, kind: &str) -> bool {
    conditions
        .into_iter()
        .flatten()
        .any(|c| c.type_ == kind && c.status == "True")
}

/// How a finished Job ended: `Some(true)` complete, `Some(false)` failed, `None` not finished.
fn finished(job: &Job) -> Option<bool> {
    let conditions = job.status.as_ref().and_then(|s| s.conditions.as_ref());
    if holds(conditions, "Complete") {
        Some(true)
    } else if holds(conditions, "Failed") {
        Some(false)
    } else {
        None
    }
}

/// What a Job pass decided the Job's outcome is.
enum Outcome {
    Complete,
    Failed,
}

impl Batch {
    async fn pass(&mut self) {
        let cronjobs: Vec<CronJob> = self
            .cronjobs
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .cloned()
            .collect();
        for cronjob in &cronjobs {
            if let Err(error) = self.sync_cronjob(cronjob).await {
                tracing::warn!(cronjob = %cronjob.metadata.name.as_deref().unwrap_or_default(), %error, "cronjob sync failed");
            }
        }
        let jobs: Vec<Job> = self
            .jobs
            .iter()
            .filter(|j| j.metadata.deletion_timestamp.is_none())
            .cloned()
            .collect();
        for job in &jobs {
            if let Err(error) = self.sync_job(job).await {
                tracing::warn!(job = %job.metadata.name.as_deref().unwrap_or_default(), %error, "job sync failed");
            }
        }
    }

    /// The earliest time a CronJob that is not suspended fires next, after now.
    fn next_run(&self) -> Option<SystemTime> {
        let now = self.shared.clock.now();
        self.cronjobs
            .iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none())
            .filter_map(|cronjob| {
                let spec = cronjob.spec.as_ref()?;
                if spec.suspend == Some(true) {
                    return None;
                }
                Schedule::parse(&spec.schedule)
                    .ok()?
                    .next_after(now, now + SCHEDULE_HORIZON)
            })
            .min()
    }

    async fn sync_job(&mut self, job: &Job) -> Result<(), PhysicsError> {
        let (Some(spec), Some(uid)) = (job.spec.as_ref(), job.metadata.uid.as_deref()) else {
            return Ok(());
        };
        let (namespace, name) = name_of(&job.metadata);
        let mut pods: Vec<Pod> = self
            .pods
            .iter()
            .filter(|p| controller_uid(&p.metadata) == Some(uid))
            .cloned()
            .collect();
        pods.sort_by(|a, b| {
            (&a.metadata.creation_timestamp, &a.metadata.name)
                .cmp(&(&b.metadata.creation_timestamp, &b.metadata.name))
        });
        let phase_count = |phase: &str| {
            pods.iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(phase))
                .count() as i32
        };
        let previous = job.status.clone().unwrap_or_default();
        // Pods are not tracked with finalizers: a count never goes down when a finished pod is
        // removed.
        let succeeded = previous
            .succeeded
            .unwrap_or(0)
            .max(phase_count("Succeeded"));
        let failed = previous.failed.unwrap_or(0).max(phase_count("Failed"));
        let mut active: Vec<Pod> = pods
            .iter()
            .filter(|p| !is_terminal(p) && !is_deleting(p))
            .cloned()
            .collect();
        let terminating = pods
            .iter()
            .filter(|p| !is_terminal(p) && is_deleting(p))
            .count() as i32;
        let suspended = spec.suspend == Some(true);
        let parallelism = spec.parallelism.unwrap_or(1).max(0) as usize;
        let outcome = match finished(job) {
            Some(true) => Some(Outcome::Complete),
            Some(false) => Some(Outcome::Failed),
            None if failed > spec.backoff_limit.unwrap_or(6) => Some(Outcome::Failed),
            None => match spec.completions {
                Some(completions) if succeeded >= completions => Some(Outcome::Complete),
                None if succeeded >= 1 && active.is_empty() => Some(Outcome::Complete),
                _ => None,
            },
        };
        let wanted = if outcome.is_some() || suspended {
            0
        } else {
            match spec.completions {
                Some(completions) => parallelism.min((completions - succeeded).max(0) as usize),
                // A work queue starts no pod after the first success.
                None if succeeded >= 1 => active.len(),
                None => parallelism,
            }
        };
        // Surplus pods go newest first.
        while active.len() > wanted {
            let Some(pod) = active.pop() else { break };
            delete_pod(&self.shared, &mut self.pods, &pod, false).await?;
        }
        if active.len() < wanted
            && let Some(pod) = job_pod(job, spec)
        {
            for _ in active.len()..wanted {
                let api: Api<Pod> = Api::namespaced(self.shared.client.clone(), &namespace);
                let created = api.create(&PostParams::default(), &pod).await?;
                tracing::debug!(job = %name, pod = %created.metadata.name.as_deref().unwrap_or_default(), "job pod created");
                self.pods.upsert(created.clone());
                active.push(created);
            }
        }
        let now = self.shared.now();
        let was_suspended = holds(previous.conditions.as_ref(), "Suspended");
        let mut conditions = previous.conditions.clone().unwrap_or_default();
        let mut set = |kind: &str, status: bool, reason: &str, message: &str| {
            let status = if status { "True" } else { "False" };
            match conditions.iter_mut().find(|c| c.type_ == kind) {
                Some(existing) if existing.status == status => {}
                Some(existing) => {
                    existing.status = status.into();
                    existing.reason = Some(reason.into());
                    existing.message = Some(message.into());
                    existing.last_probe_time = Some(now.clone());
                    existing.last_transition_time = Some(now.clone());
                }
                None => conditions.push(JobCondition {
                    type_: kind.into(),
                    status: status.into(),
                    reason: Some(reason.into()),
                    message: Some(message.into()),
                    last_probe_time: Some(now.clone()),
                    last_transition_time: Some(now.clone()),
                }),
            }
        };
        let mut completion_time = previous.completion_time.clone();
        match outcome {
            Some(Outcome::Complete) => {
                let message = "Reached expected number of succeeded pods";
                set("SuccessCriteriaMet", true, "CompletionsReached", message);
                set("Complete", true, "CompletionsReached", message);
                completion_time.get_or_insert_with(|| now.clone());
            }
            Some(Outcome::Failed) => {
                let message = "Job has reached the specified backoff limit";
                set("FailureTarget", true, "BackoffLimitExceeded", message);
                set("Failed", true, "BackoffLimitExceeded", message);
            }
            None if suspended => set("Suspended", true, "JobSuspended", "Job suspended"),
            None if was_suspended => set("Suspended", false, "JobResumed", "Job resumed"),
            None => {}
        }
        let start_time = previous
            .start_time
            .clone()
            .or_else(|| (!suspended).then(|| now.clone()));
        let status = JobStatus {
            active: Some(active.len() as i32).filter(|&n| n > 0),
            ready: Some(active.iter().filter(|p| is_ready(p)).count() as i32),
            terminating: Some(terminating),
            succeeded: Some(succeeded).filter(|&n| n > 0),
            failed: Some(failed).filter(|&n| n > 0),
            start_time,
            completion_time,
            conditions: (!conditions.is_empty()).then_some(conditions),
            ..previous.clone()
        };
        if job.status.as_ref() == Some(&status) {
            return Ok(());
        }
        let mut patch = json!({"status": status});
        // A merge patch removes what it sets to null: `active` goes once no pod runs.
        if status.active.is_none() {
            patch["status"]["active"] = serde_json::Value::Null;
        }
        let api: Api<Job> = Api::namespaced(self.shared.client.clone(), &namespace);
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(updated) => {
                self.jobs.upsert(updated);
                Ok(())
            }
            Err(error) if api_code(&error) == Some(404) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    async fn sync_cronjob(&mut self, cronjob: &CronJob) -> Result<(), PhysicsError> {
        let (Some(spec), Some(uid)) = (cronjob.spec.as_ref(), cronjob.metadata.uid.as_deref())
        else {
            return Ok(());
        };
        let (namespace, name) = name_of(&cronjob.metadata);
        let schedule = match Schedule::parse(&spec.schedule) {
            Ok(schedule) => schedule,
            Err(error) => {
                tracing::debug!(cronjob = %name, %error, "cronjob schedule does not parse");
                return Ok(());
            }
        };
        let jobs_api: Api<Job> = Api::namespaced(self.shared.client.clone(), &namespace);
        let owned = |jobs: &Cache<Job>| -> Vec<Job> {
            jobs.iter()
                .filter(|j| controller_uid(&j.metadata) == Some(uid))
                .cloned()
                .collect()
        };
        let previous = cronjob.status.clone().unwrap_or_default();
        let mut last_schedule = previous.last_schedule_time.clone();
        let now = self.shared.clock.now();
        if spec.suspend != Some(true) {
            let since = last_schedule
                .as_ref()
                .or(cronjob.metadata.creation_timestamp.as_ref())
                .map(system_time)
                .unwrap_or(now);
            let due = schedule
                .last_at_or_before(now)
                .filter(|&at| at > since)
                .filter(|&at| {
                    spec.starting_deadline_seconds.is_none_or(|deadline| {
                        now.duration_since(at).unwrap_or_default()
                            <= Duration::from_secs(deadline.max(0) as u64)
                    })
                });
            if let Some(at) = due {
                let active: Vec<Job> = owned(&self.jobs)
                    .into_iter()
                    .filter(|j| finished(j).is_none() && j.metadata.deletion_timestamp.is_none())
                    .collect();
                let policy = spec.concurrency_policy.as_deref().unwrap_or("Allow");
                if policy == "Forbid" && !active.is_empty() {
                    tracing::debug!(cronjob = %name, "a job is still active and the policy is Forbid; waiting");
                } else {
                    if policy == "Replace" {
                        for job in &active {
                            self.delete_job(&jobs_api, job).await?;
                        }
                    }
                    let job = scheduled_job(cronjob, at);
                    match jobs_api.create(&PostParams::default(), &job).await {
                        Ok(created) => {
                            tracing::debug!(cronjob = %name, job = %created.metadata.name.as_deref().unwrap_or_default(), "cronjob created a job");
                            self.jobs.upsert(created);
                        }
                        Err(error) if api_code(&error) == Some(409) => {}
                        Err(error) => return Err(error.into()),
                    }
                    last_schedule = Some(time_at(at));
                }
            }
        }
        // History: the newest finished Jobs within the limits stay.
        let mut jobs = owned(&self.jobs);
        jobs.sort_by(|a, b| {
            let started = |j: &Job| {
                j.status
                    .as_ref()
                    .and_then(|s| s.start_time.clone())
                    .or_else(|| j.metadata.creation_timestamp.clone())
            };
            (started(a), &a.metadata.name).cmp(&(started(b), &b.metadata.name))
        });
        for (succeeded, limit) in [
            (true, spec.successful_jobs_history_limit.unwrap_or(3)),
            (false, spec.failed_jobs_history_limit.unwrap_or(1)),
        ] {
            let done: Vec<&Job> = jobs
                .iter()
                .filter(|j| {
                    finished(j) == Some(succeeded) && j.metadata.deletion_timestamp.is_none()
                })
                .collect();
            let surplus = done.len().saturating_sub(limit.max(0) as usize);
            for job in &done[..surplus] {
                self.delete_job(&jobs_api, job).await?;
            }
        }
        let remaining = owned(&self.jobs);
        let mut active: Vec<ObjectReference> = remaining
            .iter()
            .filter(|j| finished(j).is_none() && j.metadata.deletion_timestamp.is_none())
            .map(|j| ObjectReference {
                api_version: Some("batch/v1".into()),
                kind: Some("Job".into()),
                name: j.metadata.name.clone(),
                namespace: j.metadata.namespace.clone(),
                uid: j.metadata.uid.clone(),
                resource_version: j.metadata.resource_version.clone(),
                ..Default::default()
            })
            .collect();
        active.sort_by(|a, b| a.name.cmp(&b.name));
        let last_successful = remaining
            .iter()
            .filter(|j| finished(j) == Some(true))
            .filter_map(|j| j.status.as_ref().and_then(|s| s.completion_time.clone()))
            .chain(previous.last_successful_time.clone())
            .max_by_key(|t: &Time| t.0);
        let status = CronJobStatus {
            active: (!active.is_empty()).then_some(active),
            last_schedule_time: last_schedule,
            last_successful_time: last_successful,
        };
        if cronjob.status.as_ref() == Some(&status) {
            return Ok(());
        }
        let mut patch = json!({"status": status});
        if status.active.is_none() {
            patch["status"]["active"] = serde_json::Value::Null;
        }
        let api: Api<CronJob> = Api::namespaced(self.shared.client.clone(), &namespace);
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(updated) => {
                self.cronjobs.upsert(updated);
                Ok(())
            }
            Err(error) if api_code(&error) == Some(404) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// Deletes a Job with background propagation (its pods go with it).
    async fn delete_job(&mut self, api: &Api<Job>, job: &Job) -> Result<(), PhysicsError> {
        let (namespace, name) = name_of(&job.metadata);
        match api.delete(&name, &DeleteParams::background()).await {
            Ok(answer) => {
                tracing::debug!(job = %name, "job deleted");
                match answer.left() {
                    Some(object) => self.jobs.deleted(object, false),
                    None => self.jobs.forget(&namespace, &name),
                }
                Ok(())
            }
            Err(error) if api_code(&error) == Some(404) => {
                self.jobs.forget(&namespace, &name);
                Ok(())
            }
            Err(error) => Err(error.into()),
        }
    }
}

/// A pod of a Job, from its template, owned by it.
fn job_pod(job: &Job, spec: &JobSpec) -> Option<Pod> {
    let (namespace, name) = name_of(&job.metadata);
    let template_meta = spec.template.metadata.clone().unwrap_or_default();
    let mut labels: BTreeMap<String, String> = template_meta.labels.unwrap_or_default();
    let uid = job.metadata.uid.clone()?;
    for (label, value) in [
        (JOB_CONTROLLER_UID_LABEL, &uid),
        (JOB_NAME_LABEL, &name),
        ("controller-uid", &uid),
        ("job-name", &name),
    ] {
        labels
            .entry(label.to_string())
            .or_insert_with(|| value.clone());
    }
    Some(Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{name}-")),
            namespace: Some(namespace),
            labels: Some(labels),
            annotations: template_meta.annotations,
            owner_references: Some(vec![controller_reference(job)]),
            ..Default::default()
        },
        spec: spec.template.spec.clone(),
        status: None,
    })
}

/// The Job a CronJob runs for the time `at`.
fn scheduled_job(cronjob: &CronJob, at: SystemTime) -> Job {
    let (namespace, name) = name_of(&cronjob.metadata);
    let template = cronjob
        .spec
        .as_ref()
        .map(|s| s.job_template.clone())
        .unwrap_or_default();
    let template_meta = template.metadata.unwrap_or_default();
    let minutes = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
        / 60;
    let mut annotations = template_meta.annotations.unwrap_or_default();
    annotations.insert(
        SCHEDULED_TIMESTAMP_ANNOTATION.to_string(),
        json!(time_at(at)).as_str().unwrap_or_default().to_string(),
    );
    Job {
        metadata: ObjectMeta {
            name: Some(format!("{name}-{minutes}")),
            namespace: Some(namespace),
            labels: template_meta.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![controller_reference(cronjob)]),
            ..Default::default()
        },
        spec: template.spec,
        status: None,
    }
}

#[cfg(test)]
mod tests;
