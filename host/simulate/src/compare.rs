//! What-if comparisons: one scenario (and its trace) run under several variants of its
//! configuration, in virtual time with one seed, summed up in one table.
//!
//! ```yaml
//! variants:
//!   - name: when-empty
//!     description: only empty nodes are consolidated     # optional
//!     set:                                               # per manifest, dotted paths
//!       NodePool/default:
//!         spec.disruption.consolidationPolicy: WhenEmpty
//!         spec.disruption.consolidateAfter: 10m
//!     settings: {BATCH_IDLE_DURATION: 2s}                # optional controller settings
//! ```
//!
//! A target is `Kind/name` of one of the scenario's manifests. A path must exist in the
//! kind's schema (the CRDs of NodePool, NodeOverlay and the NodeClasses; for other kinds,
//! every segment but the last must already be in the manifest), so a misspelt field is an
//! error naming the file, the line and the field, not a variant that silently equals the
//! baseline. The scenario as written runs first, as `baseline`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::report::Report;
use crate::scenario::{Scenario, ScenarioError};
use crate::trace::Source;

/// A variants file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Variants {
    /// The variants, in the order of the table.
    pub variants: Vec<Variant>,
    /// The file and where each variant starts in it (for errors).
    #[serde(skip)]
    source: Source,
}

/// One configuration to compare.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Variant {
    /// Its name in the table.
    pub name: String,
    /// What it changes, in words.
    #[serde(default)]
    pub description: String,
    /// Values to set: `Kind/name` of a scenario manifest → dotted path → value.
    #[serde(default)]
    pub set: BTreeMap<String, BTreeMap<String, Value>>,
    /// Controller settings added to (or replacing) the scenario's.
    #[serde(default)]
    pub settings: BTreeMap<String, String>,
}

impl Variants {
    /// Parses a variants file; errors name `origin`, the line and the field.
    pub fn parse(text: &str, origin: &str) -> Result<Variants, ScenarioError> {
        let mut variants: Variants = serde_norway::from_str(text).map_err(|e| ScenarioError {
            origin: origin.to_string(),
            message: match e.location() {
                Some(l) => format!("line {}, column {}: {e}", l.line(), l.column()),
                None => e.to_string(),
            },
        })?;
        variants.source = Source::new(text, origin, "variants");
        let mut names = std::collections::BTreeSet::new();
        for (i, v) in variants.variants.iter().enumerate() {
            if v.name.is_empty() || v.name == "baseline" || !names.insert(v.name.clone()) {
                return Err(variants.error(
                    i,
                    format!(
                        "name: {:?} must be set, unique and not \"baseline\" (the scenario as written)",
                        v.name
                    ),
                ));
            }
        }
        if variants.variants.is_empty() {
            return Err(ScenarioError {
                origin: origin.to_string(),
                message: "variants: give at least one variant to compare with the baseline".into(),
            });
        }
        Ok(variants)
    }

    fn error(&self, index: usize, message: String) -> ScenarioError {
        self.source
            .error(format!("{}.{message}", self.source.item(index)))
    }

    /// The scenario under each variant, after the baseline (the scenario as written).
    pub fn scenarios(&self, baseline: &Scenario) -> Result<Vec<(String, Scenario)>, ScenarioError> {
        let mut out = vec![("baseline".to_string(), baseline.clone())];
        for (i, variant) in self.variants.iter().enumerate() {
            let mut scenario = baseline.clone();
            for (target, paths) in &variant.set {
                let (kind, name) = target.split_once('/').ok_or_else(|| {
                    self.error(
                        i,
                        format!("set.{target}: a target is Kind/name, e.g. NodePool/default"),
                    )
                })?;
                let manifest = scenario
                    .manifests
                    .iter_mut()
                    .find(|m| {
                        m.get("kind").and_then(Value::as_str) == Some(kind)
                            && m.pointer("/metadata/name").and_then(Value::as_str) == Some(name)
                    })
                    .ok_or_else(|| {
                        self.error(
                            i,
                            format!("set.{target}: the scenario's manifests have no {kind} named {name:?}"),
                        )
                    })?;
                let schema = schema_of(kind);
                for (path, value) in paths {
                    let segments: Vec<&str> = path.split('.').collect();
                    if segments.iter().any(|s| s.is_empty()) {
                        return Err(
                            self.error(i, format!("set.{target}.{path}: empty path segment"))
                        );
                    }
                    check_path(kind, schema.as_ref(), manifest, &segments)
                        .map_err(|why| self.error(i, format!("set.{target}.{path}: {why}")))?;
                    set(manifest, &segments, value.clone())
                        .map_err(|why| self.error(i, format!("set.{target}.{path}: {why}")))?;
                }
            }
            scenario
                .settings
                .extend(variant.settings.iter().map(|(k, v)| (k.clone(), v.clone())));
            scenario.name = format!("{} [{}]", baseline.name, variant.name);
            out.push((variant.name.clone(), scenario));
        }
        Ok(out)
    }
}

/// The schema of `kind`'s custom resource, if Joinery knows it.
fn schema_of(kind: &str) -> Option<Value> {
    let mut crds: Vec<Value> = joinery_api::crds()
        .into_iter()
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect();
    crds.extend(
        crate::simulation::NODECLASS_CRDS
            .iter()
            .filter_map(|(_, text)| serde_norway::from_str::<Value>(text).ok()),
    );
    let crd = crds
        .into_iter()
        .find(|c| c.pointer("/spec/names/kind").and_then(Value::as_str) == Some(kind))?;
    let versions = crd.pointer("/spec/versions")?.as_array()?;
    let version = versions
        .iter()
        .find(|v| v.get("storage") == Some(&Value::Bool(true)))
        .or(versions.first())?;
    version.pointer("/schema/openAPIV3Schema").cloned()
}

/// Whether `segments` name a field of `kind` (in its `schema`, or for kinds without one, under
/// a parent the manifest already has).
fn check_path(
    kind: &str,
    schema: Option<&Value>,
    manifest: &Value,
    segments: &[&str],
) -> Result<(), String> {
    let Some(schema) = schema else {
        let parent = segments[..segments.len() - 1]
            .iter()
            .try_fold(manifest, |at, s| at.get(*s));
        return match parent {
            Some(v) if v.is_object() => Ok(()),
            _ => Err(format!(
                "{} is not in the manifest (for a {kind}, every segment but the last must be)",
                segments[..segments.len() - 1].join(".")
            )),
        };
    };
    let mut at = schema;
    for (depth, segment) in segments.iter().enumerate() {
        if at.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
            && at.get("properties").is_none()
        {
            return Ok(());
        }
        let next = at
            .get("properties")
            .and_then(|p| p.get(*segment))
            .or_else(|| at.get("additionalProperties").filter(|a| a.is_object()))
            .or_else(|| segment.parse::<usize>().ok().and_then(|_| at.get("items")));
        match next {
            Some(next) => at = next,
            None => {
                let known: Vec<&String> = at
                    .get("properties")
                    .and_then(Value::as_object)
                    .map(|p| p.keys().collect())
                    .unwrap_or_default();
                return Err(format!(
                    "{kind} has no field {:?} at {}{}",
                    segment,
                    if depth == 0 {
                        "the top".to_string()
                    } else {
                        segments[..depth].join(".")
                    },
                    if known.is_empty() {
                        String::new()
                    } else {
                        format!(
                            " (its fields: {})",
                            known
                                .iter()
                                .map(|k| k.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    }
                ));
            }
        }
    }
    Ok(())
}

/// Sets `value` at `segments` in `object`, making the maps on the way.
fn set(object: &mut Value, segments: &[&str], value: Value) -> Result<(), String> {
    let (last, parents) = segments.split_last().expect("paths are not empty");
    let mut at = object;
    for segment in parents {
        at = match at {
            Value::Array(items) => {
                let index: usize = segment
                    .parse()
                    .map_err(|_| format!("{segment:?} is not an index of a list"))?;
                items
                    .get_mut(index)
                    .ok_or_else(|| format!("the list has no item {index}"))?
            }
            Value::Object(map) => map
                .entry(segment.to_string())
                .or_insert_with(|| Value::Object(Default::default())),
            _ => return Err(format!("{segment:?} is under a value that is not a map")),
        };
    }
    match at {
        Value::Object(map) => {
            map.insert(last.to_string(), value);
            Ok(())
        }
        Value::Array(items) => {
            let index: usize = last
                .parse()
                .map_err(|_| format!("{last:?} is not an index of a list"))?;
            *items
                .get_mut(index)
                .ok_or_else(|| format!("the list has no item {index}"))? = value;
            Ok(())
        }
        _ => Err(format!("{last:?} is under a value that is not a map")),
    }
}

/// One variant's line of the table (`--report`'s `rows[]`; keep the names stable).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// The variant (`baseline` for the scenario as written).
    pub variant: String,
    /// Whether its expectations held.
    pub passed: bool,
    /// What did not hold.
    pub failures: Vec<String>,
    /// The cost of the instances over the run: the hourly cost integrated over time.
    pub total_cost: f64,
    /// The hourly cost's median over time.
    pub cost_per_hour_p50: f64,
    /// The hourly cost's highest.
    pub cost_per_hour_max: f64,
    /// Most nodes at once.
    pub peak_nodes: usize,
    /// NodeClaims launched.
    pub node_claims_launched: usize,
    /// Pods evicted.
    pub pod_evictions: u64,
    /// Evictions per pod seen.
    pub disruptions_per_pod: f64,
    /// Seconds pods waited to run: median, 95th percentile, longest.
    pub pending_p50_seconds: f64,
    /// See `pendingP50Seconds`.
    pub pending_p95_seconds: f64,
    /// See `pendingP50Seconds`.
    pub pending_max_seconds: f64,
    /// Simulated seconds the run took.
    pub simulated_seconds: f64,
    /// What the CapacityBuffers cost per hour at the end (the report's
    /// `totals.bufferCostPerHourAtEnd`).
    pub buffer_cost_per_hour_at_end: f64,
}

impl Row {
    /// The figures of one variant's report.
    pub fn of(variant: &str, report: &Report) -> Row {
        let (total_cost, p50, max) = cost_over_time(report);
        Row {
            variant: variant.to_string(),
            passed: report.passed(),
            failures: report.failures.clone(),
            total_cost,
            cost_per_hour_p50: p50,
            cost_per_hour_max: max,
            peak_nodes: report.totals.peak_nodes,
            node_claims_launched: report.totals.nodes_launched,
            pod_evictions: report.workload.pod_evictions,
            disruptions_per_pod: report.workload.disruptions_per_pod,
            pending_p50_seconds: report.workload.pending_p50_seconds,
            pending_p95_seconds: report.workload.pending_p95_seconds,
            pending_max_seconds: report.workload.pending_max_seconds,
            simulated_seconds: report.simulated_seconds,
            buffer_cost_per_hour_at_end: report.totals.buffer_cost_per_hour_at_end,
        }
    }
}

/// The cost over a report's run from its samples (each holds until the next, the last until
/// the end): the total, the time-weighted median hourly cost, and the highest.
pub fn cost_over_time(report: &Report) -> (f64, f64, f64) {
    let samples = &report.samples;
    let end = report.simulated_seconds;
    let mut spans: Vec<(f64, f64)> = samples
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let until = samples.get(i + 1).map_or(end, |n| n.at).max(s.at);
            (s.cost_per_hour, until - s.at)
        })
        .collect();
    let total = spans.iter().map(|(cost, secs)| cost * secs / 3600.0).sum();
    let max = spans.iter().map(|(cost, _)| *cost).fold(0.0, f64::max);
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    let half = spans.iter().map(|(_, secs)| secs).sum::<f64>() / 2.0;
    let mut seen = 0.0;
    let mut p50 = 0.0;
    for (cost, secs) in &spans {
        seen += secs;
        p50 = *cost;
        if seen >= half {
            break;
        }
    }
    (total, p50, max)
}

/// A comparison: its table and every variant's report.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Comparison {
    /// The scenario compared.
    pub scenario: String,
    /// The seed every run used.
    pub seed: u64,
    /// One row per variant, the baseline first.
    pub rows: Vec<Row>,
    /// Each variant's full report, by variant.
    pub reports: BTreeMap<String, Report>,
}

impl Comparison {
    /// The table as printed.
    pub fn table(&self) -> String {
        let mut out = format!(
            "comparison of scenario {} (virtual time, seed {}):\n",
            self.scenario, self.seed
        );
        // The buffers' column only when some variant has CapacityBuffers.
        let buffers = self.reports.values().any(|r| !r.buffers.is_empty());
        let buffer_column = |text: String| if buffers { text } else { String::new() };
        out.push_str(&format!(
            "{:<22} {:>10} {:>9} {:>9}{} {:>5} {:>8} {:>9} {:>23} {:>7}\n",
            "variant",
            "cost",
            "$/h p50",
            "$/h max",
            buffer_column(format!(" {:>10}", "buffer $/h")),
            "peak",
            "claims",
            "evictions",
            "pending p50/p95/max s",
            "result"
        ));
        for r in &self.rows {
            out.push_str(&format!(
                "{:<22} {:>10.4} {:>9.4} {:>9.4}{} {:>5} {:>8} {:>5} {:>3.2} {:>23} {:>7}\n",
                r.variant,
                r.total_cost,
                r.cost_per_hour_p50,
                r.cost_per_hour_max,
                buffer_column(format!(" {:>10.4}", r.buffer_cost_per_hour_at_end)),
                r.peak_nodes,
                r.node_claims_launched,
                r.pod_evictions,
                r.disruptions_per_pod,
                format!(
                    "{:.0}/{:.0}/{:.0}",
                    r.pending_p50_seconds, r.pending_p95_seconds, r.pending_max_seconds
                ),
                if r.passed { "pass" } else { "FAIL" }
            ));
        }
        out
    }
}

/// Runs `baseline` and each of `variants` in virtual time with `seed`, one after the other.
pub fn run(
    baseline: &Scenario,
    variants: &Variants,
    seed: u64,
) -> Result<Comparison, crate::SimulateError> {
    let mut rows = Vec::new();
    let mut reports = BTreeMap::new();
    for (name, scenario) in variants.scenarios(baseline)? {
        let report = crate::run_scenario_virtual(
            &scenario,
            crate::RunOptions {
                seed,
                ..Default::default()
            },
        )?;
        rows.push(Row::of(&name, &report));
        reports.insert(name, report);
    }
    Ok(Comparison {
        scenario: baseline.name.clone(),
        seed,
        rows,
        reports,
    })
}

#[cfg(test)]
mod tests;
