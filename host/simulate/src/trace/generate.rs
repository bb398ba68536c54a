//! Generated traces: the shapes capacity planning asks about, for one Deployment.
//!
//! - `diurnal`: a day of traffic on a daily curve — the replicas follow a cosine between
//!   `min` (12 hours from the peak) and `max` (at `peakAt` each day), sampled every `step`;
//! - `spike`: a flash crowd — `min`, then `max` at `at` for `hold`, then `min` again;
//! - `batch`: a nightly batch window — `min` (default 0), then `max` at `at` (a time of
//!   day) for `hold`, every day of the trace;
//! - `ramp`: `min` to `max` in equal steps over the whole trace (a launch, a migration);
//! - `jobs`: nightly batch Jobs — at `at` (a time of day) every day, a Job of `max` pods
//!   (parallelism and completions) that each run for `hold` and succeed; the emulated
//!   cluster's Job controller runs them to completion.
//!
//! Every trace but `jobs` first creates the Deployment (`pause` containers requesting `cpu`
//! and `memory`) with `min` replicas, so it runs against any scenario with a NodePool.

use std::time::Duration;

use serde_json::json;

use super::{Trace, TraceEvent};
use crate::scenario::Scale;

/// A day.
const DAY: Duration = Duration::from_secs(24 * 3600);

/// The shapes `joinery trace generate` knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A daily curve.
    Diurnal,
    /// A flash crowd.
    Spike,
    /// A nightly batch window.
    Batch,
    /// A steady climb.
    Ramp,
    /// Nightly batch Jobs.
    Jobs,
}

impl Shape {
    /// Every shape with its name.
    pub const ALL: [(&'static str, Shape); 5] = [
        ("diurnal", Shape::Diurnal),
        ("spike", Shape::Spike),
        ("batch", Shape::Batch),
        ("ramp", Shape::Ramp),
        ("jobs", Shape::Jobs),
    ];

    /// The shape called `name`; the error lists the shapes.
    pub fn parse(name: &str) -> Result<Shape, String> {
        Shape::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| *s)
            .ok_or_else(|| {
                format!(
                    "unknown trace shape {name:?}; use one of {}",
                    Shape::ALL.map(|(n, _)| n).join(", ")
                )
            })
    }

    fn name(self) -> &'static str {
        Shape::ALL
            .iter()
            .find(|(_, s)| *s == self)
            .map_or("?", |(n, _)| n)
    }
}

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenerateOptions {
    /// The shape.
    pub shape: Shape,
    /// The Deployment the trace creates and scales (for `jobs`: the Jobs' name prefix).
    pub deployment: String,
    /// Its namespace.
    pub namespace: String,
    /// Fewest replicas.
    pub min: u32,
    /// Most replicas.
    pub max: u32,
    /// How long the trace lasts.
    pub duration: Duration,
    /// How often a curve (diurnal, ramp) is sampled.
    pub step: Duration,
    /// Diurnal: the time of day of the peak.
    pub peak_at: Duration,
    /// Spike: when it starts; batch and jobs: the time of day its window opens.
    pub at: Duration,
    /// Spike and batch: how long the high level holds; jobs: how long each pod runs.
    pub hold: Duration,
    /// CPU each replica requests (a Kubernetes quantity).
    pub cpu: String,
    /// Memory each replica requests.
    pub memory: String,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            shape: Shape::Diurnal,
            deployment: "web".into(),
            namespace: "default".into(),
            min: 2,
            max: 20,
            duration: DAY,
            step: Duration::from_secs(15 * 60),
            peak_at: Duration::from_secs(14 * 3600),
            at: Duration::from_secs(3600),
            hold: Duration::from_secs(30 * 60),
            cpu: "500m".into(),
            memory: "512Mi".into(),
        }
    }
}

/// The trace `options` describe; the error names the option that makes no sense.
pub fn generate(options: &GenerateOptions) -> Result<Trace, String> {
    let o = options;
    if o.min > o.max {
        return Err(format!("--min {} is more than --max {}", o.min, o.max));
    }
    if o.duration.is_zero() {
        return Err("--duration must be longer than zero".into());
    }
    if o.step.is_zero() {
        return Err("--step must be longer than zero".into());
    }
    if matches!(o.shape, Shape::Batch | Shape::Jobs) && o.at >= DAY {
        return Err(format!(
            "--at is a time of day for {}: less than 24h",
            o.shape.name()
        ));
    }
    if o.shape == Shape::Jobs {
        return jobs(o);
    }
    let mut levels: Vec<(Duration, u32)> = Vec::new();
    let mut push = |at: Duration, replicas: u32| {
        if at <= o.duration && levels.last().is_none_or(|(_, last)| *last != replicas) {
            levels.push((at, replicas));
        }
    };
    push(Duration::ZERO, o.min);
    match o.shape {
        Shape::Diurnal => {
            let span = f64::from(o.max - o.min);
            let mut at = o.step;
            while at <= o.duration {
                let from_peak = (at.as_secs_f64() - o.peak_at.as_secs_f64()) / DAY.as_secs_f64();
                let level = (1.0 + (std::f64::consts::TAU * from_peak).cos()) / 2.0;
                push(at, o.min + (span * level).round() as u32);
                at += o.step;
            }
        }
        Shape::Spike => {
            push(o.at, o.max);
            push(o.at + o.hold, o.min);
        }
        Shape::Batch => {
            let mut day = Duration::ZERO;
            while day < o.duration {
                push(day + o.at, o.max);
                push(day + o.at + o.hold, o.min);
                day += DAY;
            }
        }
        // Generated apart, above.
        Shape::Jobs => {}
        Shape::Ramp => {
            let steps = (o.duration.as_secs_f64() / o.step.as_secs_f64())
                .floor()
                .max(1.0);
            let mut at = o.step;
            while at <= o.duration {
                let done = (at.as_secs_f64() / o.step.as_secs_f64()) / steps;
                push(
                    at,
                    o.min + (f64::from(o.max - o.min) * done.min(1.0)).round() as u32,
                );
                at += o.step;
            }
        }
    }
    let scale = |replicas: u32| Scale {
        namespace: Some(o.namespace.clone()),
        name: o.deployment.clone(),
        replicas: i32::try_from(replicas).unwrap_or(i32::MAX),
    };
    let mut events: Vec<TraceEvent> = levels
        .iter()
        .map(|(at, replicas)| TraceEvent {
            at: seconds(*at),
            scale: Some(scale(*replicas)),
            ..Default::default()
        })
        .collect();
    // The first event creates the Deployment with its first level.
    if let Some(first) = events.first_mut() {
        first.scale = None;
        first.name = Some(format!("trace: create {}", o.deployment));
        first.apply = vec![deployment(o)];
    }
    Ok(Trace {
        name: format!("{}-{}", o.shape.name(), o.deployment),
        description: format!(
            "{} trace of Deployment {}/{}: {} to {} replicas of {} CPU and {} memory over {}",
            o.shape.name(),
            o.namespace,
            o.deployment,
            o.min,
            o.max,
            o.cpu,
            o.memory,
            seconds(o.duration)
        ),
        duration: Some(seconds(o.duration)),
        events,
        ..Default::default()
    })
}

/// The `jobs` trace: one Job a day, `<name>-day-<n>`, of `max` pods running `hold` each.
fn jobs(o: &GenerateOptions) -> Result<Trace, String> {
    if o.max == 0 {
        return Err("--max must be at least 1 for jobs: the pods of each nightly Job".into());
    }
    if o.hold.is_zero() {
        return Err("--hold must be longer than zero for jobs: how long each pod runs".into());
    }
    let mut events = Vec::new();
    let mut day = Duration::ZERO;
    let mut number = 1;
    while day + o.at <= o.duration {
        let name = format!("{}-day-{number}", o.deployment);
        events.push(TraceEvent {
            at: seconds(day + o.at),
            name: Some(format!("trace: start Job {name}")),
            apply: vec![job(o, &name)],
            ..Default::default()
        });
        day += DAY;
        number += 1;
    }
    if events.is_empty() {
        return Err(format!(
            "no Job starts within --duration {}: make --at earlier than the duration",
            seconds(o.duration)
        ));
    }
    Ok(Trace {
        name: format!("jobs-{}", o.deployment),
        description: format!(
            "jobs trace: every day at {}, a Job {}/{}-day-N of {} pods of {} CPU and {} memory, each running {}, over {}",
            seconds(o.at),
            o.namespace,
            o.deployment,
            o.max,
            o.cpu,
            o.memory,
            seconds(o.hold),
            seconds(o.duration)
        ),
        duration: Some(seconds(o.duration)),
        events,
        ..Default::default()
    })
}

/// One nightly Job: `max` pods at once, each running `hold` (the simulated kubelets read
/// `sim.joinery.dev/run-for`) and succeeding.
fn job(o: &GenerateOptions, name: &str) -> serde_json::Value {
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": o.namespace},
        "spec": {
            "parallelism": o.max,
            "completions": o.max,
            "backoffLimit": 0,
            "template": {
                "metadata": {
                    "labels": {"app": o.deployment},
                    "annotations": {joinery_emulator::physics::RUN_FOR_ANNOTATION: seconds(o.hold)}
                },
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "work",
                        "image": "registry.k8s.io/pause:3.9",
                        "resources": {"requests": {"cpu": o.cpu, "memory": o.memory}}
                    }]
                }
            }
        }
    })
}

/// A duration as whole seconds (`900s`), which every reader parses.
fn seconds(d: Duration) -> String {
    format!("{}s", d.as_secs())
}

/// The Deployment a generated trace creates.
fn deployment(o: &GenerateOptions) -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": o.deployment, "namespace": o.namespace},
        "spec": {
            "replicas": o.min,
            "selector": {"matchLabels": {"app": o.deployment}},
            "template": {
                "metadata": {"labels": {"app": o.deployment}},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{
                        "name": "app",
                        "image": "registry.k8s.io/pause:3.9",
                        "resources": {"requests": {"cpu": o.cpu, "memory": o.memory}}
                    }]
                }
            }
        }
    })
}
