//! Workload traces: what happens to a cluster over time, apart from the cluster itself.
//!
//! A trace is a YAML file of timed events — scale a Deployment, apply or delete manifests,
//! cordon or uncordon nodes, change the simulated cloud's faults — that a scenario plays from
//! its start (`trace: FILE` in the scenario, or `joinery simulate --trace FILE`), before its
//! own steps. `joinery trace generate` writes the shapes capacity planning asks about (see
//! [`generate`]).
//!
//! ```yaml
//! name: a-day-of-web
//! description: …
//! duration: 24h                # optional: the trace lasts this long after its start
//! events:
//!   - at: 0s                   # simulated time since the scenario started; in order
//!     scale: {name: web, replicas: 4}          # namespace: default unless given
//!   - at: 2h
//!     apply: [ {apiVersion: apps/v1, kind: Deployment, …} ]
//!   - at: 3h
//!     delete: [{apiVersion: apps/v1, kind: Deployment, name: batch}]
//!   - at: 4h
//!     cordon: {labelSelector: topology.kubernetes.io/zone=test-zone-a}
//!   - at: 5h
//!     uncordon: {name: default-x7k2p}
//!   - at: 6h
//!     fault: {insufficientCapacity: [{instanceType: c-16x-amd64-linux}]}   # simcloud only
//! ```
//!
//! Errors name the file, the line of the event and the field: an event that scales a
//! Deployment neither the scenario nor an earlier event creates, times out of order, negative
//! replicas, an unknown field.

pub mod generate;

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::scenario::{
    FaultSpec, NodeTarget, ObjectRef, Scale, Scenario, ScenarioError, Step, duration_field,
};

/// A parsed, checked trace.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Trace {
    /// Short name.
    #[serde(default)]
    pub name: String,
    /// What the trace represents.
    #[serde(default)]
    pub description: String,
    /// How long the trace lasts from the scenario's start (Go duration); default: until its
    /// last event.
    #[serde(default)]
    pub duration: Option<String>,
    /// The events, in time order.
    #[serde(default)]
    pub events: Vec<TraceEvent>,
    /// Where each event starts in its file, and the file's name (for errors).
    #[serde(skip)]
    source: Source,
}

/// Where the items of a parsed file's top-level list (a trace's `events`, a variants file's
/// `variants`) came from: the file and the line each item starts on, for errors.
#[derive(Debug, Clone, Default)]
pub(crate) struct Source {
    origin: String,
    list: &'static str,
    lines: Vec<usize>,
}

impl Source {
    /// The items of the top-level list `list` of `text`, read from `origin`.
    pub(crate) fn new(text: &str, origin: &str, list: &'static str) -> Source {
        Source {
            origin: origin.to_string(),
            list,
            lines: item_lines(text, list),
        }
    }

    /// `line N, LIST[i]` (or `LIST[i]` when the line is not known).
    pub(crate) fn item(&self, i: usize) -> String {
        match self.lines.get(i) {
            Some(line) => format!("line {line}, {}[{i}]", self.list),
            None => format!("{}[{i}]", self.list),
        }
    }

    /// An error of this file.
    pub(crate) fn error(&self, message: String) -> ScenarioError {
        ScenarioError {
            origin: self.origin.clone(),
            message,
        }
    }
}

/// One event of a trace: at a simulated time, one or more changes.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TraceEvent {
    /// Simulated time since the scenario started (Go duration).
    pub at: String,
    /// Label in the timeline (default: what the event does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A Deployment to scale.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale: Option<Scale>,
    /// Objects to create or update.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub apply: Vec<serde_json::Value>,
    /// Objects to delete.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delete: Vec<ObjectRef>,
    /// Nodes to cordon (`spec.unschedulable: true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cordon: Option<NodeTarget>,
    /// Nodes to uncordon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncordon: Option<NodeTarget>,
    /// The simulated cloud's faults from now on (replacing the previous ones).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<FaultSpec>,
}

impl Trace {
    /// Parses a trace; errors name `origin` (the file), the line and the field.
    pub fn parse(text: &str, origin: &str) -> Result<Trace, ScenarioError> {
        let mut trace: Trace = serde_norway::from_str(text).map_err(|e| ScenarioError {
            origin: origin.to_string(),
            message: match e.location() {
                Some(l) => format!("line {}, column {}: {e}", l.line(), l.column()),
                None => e.to_string(),
            },
        })?;
        trace.source = Source::new(text, origin, "events");
        let at_line = |i: usize| trace.source.item(i);
        let err = |message: String| trace.source.error(message);
        let mut previous = Duration::ZERO;
        for (i, event) in trace.events.iter().enumerate() {
            let at = duration_field(
                Some(&event.at),
                &format!("{}.at", at_line(i)),
                Duration::ZERO,
                origin,
            )?;
            if at < previous {
                return Err(err(format!(
                    "{}.at: {} comes before the previous event's {}s; a trace's events must be in time order",
                    at_line(i),
                    event.at,
                    previous.as_secs_f64()
                )));
            }
            previous = at;
            let does_something = event.scale.is_some()
                || !event.apply.is_empty()
                || !event.delete.is_empty()
                || event.cordon.is_some()
                || event.uncordon.is_some()
                || event.fault.is_some();
            if !does_something {
                return Err(err(format!(
                    "{}: does nothing; give scale, apply, delete, cordon, uncordon or fault",
                    at_line(i)
                )));
            }
            if let Some(scale) = &event.scale
                && scale.replicas < 0
            {
                return Err(err(format!(
                    "{}.scale.replicas: {} is negative; a Deployment has 0 replicas or more",
                    at_line(i),
                    scale.replicas
                )));
            }
            for (field, target) in [("cordon", &event.cordon), ("uncordon", &event.uncordon)] {
                if let Some(target) = target
                    && target.name.is_some() == target.label_selector.is_some()
                {
                    return Err(err(format!(
                        "{}.{field}: give exactly one of name and labelSelector",
                        at_line(i)
                    )));
                }
            }
            for (j, d) in event.delete.iter().enumerate() {
                if d.name.is_some() == d.label_selector.is_some() {
                    return Err(err(format!(
                        "{}.delete[{j}]: give exactly one of name and labelSelector",
                        at_line(i)
                    )));
                }
            }
        }
        if let Some(duration) = &trace.duration {
            let duration = duration_field(Some(duration), "duration", Duration::ZERO, origin)?;
            if duration < previous {
                return Err(err(format!(
                    "duration: {}s ends before the last event ({}s)",
                    duration.as_secs_f64(),
                    previous.as_secs_f64()
                )));
            }
        }
        Ok(trace)
    }

    /// How long the trace lasts from the scenario's start.
    pub fn length(&self) -> Duration {
        let last = self
            .events
            .last()
            .and_then(|e| duration_field(Some(&e.at), "at", Duration::ZERO, "").ok())
            .unwrap_or_default();
        self.duration
            .as_deref()
            .and_then(|d| duration_field(Some(d), "duration", Duration::ZERO, "").ok())
            .unwrap_or(last)
            .max(last)
    }

    /// Checks that every Deployment the trace scales is created by the scenario's manifests
    /// or steps, or by an earlier event, and that faults go to the simulated cloud; errors
    /// name the trace's file, the event's line and the field.
    pub fn check_against(&self, scenario: &Scenario) -> Result<(), ScenarioError> {
        let at_line = |i: usize| self.source.item(i);
        let err = |message: String| self.source.error(message);
        let mut deployments: BTreeSet<(String, String)> = scenario
            .manifests
            .iter()
            .chain(scenario.steps.iter().flat_map(|s| s.apply.iter()))
            .filter_map(deployment_key)
            .collect();
        for (i, event) in self.events.iter().enumerate() {
            deployments.extend(event.apply.iter().filter_map(deployment_key));
            if let Some(scale) = &event.scale {
                let key = (
                    scale.namespace.clone().unwrap_or_else(|| "default".into()),
                    scale.name.clone(),
                );
                if !deployments.contains(&key) {
                    let known: Vec<String> = deployments
                        .iter()
                        .map(|(ns, n)| format!("{ns}/{n}"))
                        .collect();
                    return Err(err(format!(
                        "{}.scale: Deployment {}/{} is created neither by the scenario nor by an earlier event (Deployments it knows: {})",
                        at_line(i),
                        key.0,
                        key.1,
                        if known.is_empty() {
                            "none".to_string()
                        } else {
                            known.join(", ")
                        }
                    )));
                }
            }
            if event.fault.is_some() && scenario.cloud.provider() != "simcloud" {
                return Err(err(format!(
                    "{}.fault: only the simulated cloud (provider simcloud) takes faults from a trace; this scenario runs {}",
                    at_line(i),
                    scenario.cloud.provider()
                )));
            }
            for (j, m) in event.apply.iter().enumerate() {
                if !m.is_object() || m.get("kind").and_then(|k| k.as_str()).is_none() {
                    return Err(err(format!(
                        "{}.apply[{j}]: must be a Kubernetes object with apiVersion and kind",
                        at_line(i)
                    )));
                }
            }
        }
        Ok(())
    }

    /// The trace's events as scenario steps (each waits for its time), then, with a
    /// `duration`, a last step that waits until the trace ends.
    pub fn steps(&self) -> Vec<Step> {
        let label = |event: &TraceEvent| {
            event.name.clone().unwrap_or_else(|| {
                let mut what = Vec::new();
                if let Some(s) = &event.scale {
                    what.push(format!("scale {} to {}", s.name, s.replicas));
                }
                if !event.apply.is_empty() {
                    what.push(format!("apply {}", event.apply.len()));
                }
                if !event.delete.is_empty() {
                    what.push(format!("delete {}", event.delete.len()));
                }
                if event.cordon.is_some() {
                    what.push("cordon".into());
                }
                if event.uncordon.is_some() {
                    what.push("uncordon".into());
                }
                if event.fault.is_some() {
                    what.push("faults".into());
                }
                format!("trace: {}", what.join(", "))
            })
        };
        let mut steps: Vec<Step> = self
            .events
            .iter()
            .map(|event| Step {
                name: Some(label(event)),
                at: Some(event.at.clone()),
                apply: event.apply.clone(),
                delete: event.delete.clone(),
                scale: event.scale.clone(),
                cordon: event.cordon.clone(),
                uncordon: event.uncordon.clone(),
                fault: event.fault.clone(),
                ..Default::default()
            })
            .collect();
        if let Some(duration) = &self.duration {
            steps.push(Step {
                name: Some("trace: end".into()),
                at: Some(duration.clone()),
                ..Default::default()
            });
        }
        steps
    }
}

impl Scenario {
    /// Reads a scenario file (the built-in quickstart without one) and the trace it names
    /// (`trace:`, relative to the scenario's file) or `trace` (which replaces the scenario's
    /// own), checked together.
    pub fn load(
        path: Option<&std::path::Path>,
        trace: Option<&std::path::Path>,
    ) -> Result<Scenario, ScenarioError> {
        Self::load_with(path, trace, None)
    }

    /// [`Scenario::load`], and the cluster snapshot the scenario names (`snapshot:`,
    /// relative to its file) or `snapshot` (which replaces the scenario's own), read and
    /// checked (see [`crate::snapshot`]).
    pub fn load_with(
        path: Option<&std::path::Path>,
        trace: Option<&std::path::Path>,
        snapshot: Option<&std::path::Path>,
    ) -> Result<Scenario, ScenarioError> {
        let mut scenario = Self::load_scenario_and_trace(path, trace, snapshot.is_some())?;
        let named = scenario.snapshot.as_deref().map(|file| {
            path.and_then(std::path::Path::parent)
                .unwrap_or(std::path::Path::new("."))
                .join(file)
        });
        if let Some(file) = snapshot.map(std::path::Path::to_path_buf).or(named) {
            let origin = file.display().to_string();
            let text = std::fs::read_to_string(&file).map_err(|e| ScenarioError {
                origin: origin.clone(),
                message: format!("cannot read it: {e}"),
            })?;
            let parsed =
                crate::snapshot::ClusterSnapshot::parse(&text, &origin, scenario.cloud.provider())?;
            scenario.snapshot = Some(origin);
            scenario.loaded_snapshot = Some(std::sync::Arc::new(parsed));
        }
        Ok(scenario)
    }

    fn load_scenario_and_trace(
        path: Option<&std::path::Path>,
        trace: Option<&std::path::Path>,
        snapshot_given: bool,
    ) -> Result<Scenario, ScenarioError> {
        let unreadable = |what: &std::path::Path, e: std::io::Error| ScenarioError {
            origin: what.display().to_string(),
            message: format!("cannot read it: {e}"),
        };
        let scenario = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| unreadable(path, e))?;
                let scenario = Scenario::parse(&text, &path.display().to_string())?;
                let starts_from_a_snapshot = snapshot_given || scenario.snapshot.is_some();
                if scenario.manifests.is_empty()
                    && scenario.steps.is_empty()
                    && !starts_from_a_snapshot
                {
                    return Err(ScenarioError {
                        origin: path.display().to_string(),
                        message: "nothing to simulate: the scenario has no manifests and no \
                                  steps (an empty file?); write at least a NodePool, its \
                                  NodeClass and a workload under manifests:, as the files of \
                                  examples/scenarios/ do"
                            .into(),
                    });
                }
                scenario
            }
            None => Scenario::parse(crate::scenario::QUICKSTART, "built-in quickstart")?,
        };
        let named = scenario.trace.as_deref().map(|file| {
            path.and_then(std::path::Path::parent)
                .unwrap_or(std::path::Path::new("."))
                .join(file)
        });
        let Some(file) = trace.map(std::path::Path::to_path_buf).or(named) else {
            return Ok(scenario);
        };
        let text = std::fs::read_to_string(&file).map_err(|e| unreadable(&file, e))?;
        let parsed = Trace::parse(&text, &file.display().to_string())?;
        scenario.with_trace(&parsed)
    }

    /// This scenario with `trace` played from its start, before its own steps; the trace is
    /// checked against the scenario first (errors name its file and the event's line). The
    /// scenario's timeout grows to the trace's length plus 30 minutes when it would end
    /// before.
    pub fn with_trace(mut self, trace: &Trace) -> Result<Scenario, ScenarioError> {
        trace.check_against(&self)?;
        let mut steps = trace.steps();
        steps.append(&mut self.steps);
        self.steps = steps;
        let needed = trace.length() + Duration::from_secs(1800);
        if self.timeout() < needed {
            self.timeout = Some(format!("{}s", needed.as_secs()));
        }
        Ok(self)
    }
}

/// `(namespace, name)` of a Deployment manifest.
fn deployment_key(m: &serde_json::Value) -> Option<(String, String)> {
    (m.get("kind")?.as_str()? == "Deployment").then(|| {
        (
            m.pointer("/metadata/namespace")
                .and_then(|v| v.as_str())
                .unwrap_or("default")
                .to_string(),
            m.pointer("/metadata/name")
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_string(),
        )
    })
}

/// The (1-based) lines where the items of the block sequence under the top-level key `key`
/// start, in order; empty when the sequence is written another way (`key: [ … ]`).
pub(crate) fn item_lines(text: &str, key: &str) -> Vec<usize> {
    let mut lines = Vec::new();
    let mut inside = false;
    let mut indent = None;
    for (number, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if !inside {
            if line.starts_with(&format!("{key}:")) {
                inside = true;
            }
            continue;
        }
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let depth = line.len() - trimmed.len();
        if depth == 0 && !trimmed.starts_with('-') {
            break;
        }
        if trimmed.starts_with("- ") || trimmed == "-" {
            match indent {
                None => {
                    indent = Some(depth);
                    lines.push(number + 1);
                }
                Some(d) if d == depth => lines.push(number + 1),
                _ => {}
            }
        }
    }
    lines
}

#[cfg(test)]
mod tests;
