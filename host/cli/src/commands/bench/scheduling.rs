//! `joinery bench scheduling`: the provisioning scheduler on the exact pod sets upstream
//! Karpenter's scheduling benchmark solves (`host/core/benches/workloads`, exported from
//! upstream's generator seeded at 42), beside upstream's own results on a 2-core machine.
//!
//! Each workload runs in a fresh child process (`--workload NAME --child`), as upstream's
//! figures were taken, so that the peak resident memory reported is that workload's alone.

use std::io::Read;
use std::process::{Command, ExitCode};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use joinery_core::scheduling::{
    Placement, PreferencePolicy, SchedulingContext, WorkloadPod, cost_lower_bound,
    schedule_with_context, workload_input,
};
use serde::{Deserialize, Serialize};

use crate::commands::Execute;

/// `joinery bench scheduling …`
#[derive(Debug, clap::Args)]
pub struct SchedulingArgs {
    /// Run only these workloads (repeatable; default: all rows).
    #[arg(long = "workload", value_name = "NAME")]
    pub workloads: Vec<String>,
    /// Minimum measured runs per workload; small workloads repeat until about a second has
    /// been measured, as Go benchmarks do (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Internal: run one workload in this process and print its row as JSON.
    #[arg(long, hide = true)]
    pub child: bool,
}

impl Execute for SchedulingArgs {
    async fn execute(self) -> Result<ExitCode> {
        scheduling(&self.workloads, self.runs, self.json, self.child)
    }
}

/// One benchmark row: a workload file, the preference policy, and upstream's result for it.
struct Workload {
    /// Row name (`--workload`).
    name: &'static str,
    /// The gzip-compressed JSON pod list.
    data: &'static [u8],
    /// Whether preferences are respected.
    policy: PreferencePolicy,
    /// Upstream's median time in seconds on a 2-core x86-64 machine.
    upstream_seconds: f64,
    /// Upstream's node count.
    upstream_nodes: usize,
    /// Upstream's peak RSS in MB, where published.
    upstream_rss_mb: Option<f64>,
}

macro_rules! workload_file {
    ($file:literal) => {
        include_bytes!(concat!("../../../../core/benches/workloads/", $file))
    };
}

/// Upstream's rows (`host/core/benches/workloads/README.md`).
const WORKLOADS: &[Workload] = &[
    row(
        "diverse-1",
        workload_file!("diverse_1.json.gz"),
        PreferencePolicy::Respect,
        f64::NAN,
        1,
        None,
    ),
    row(
        "diverse-50",
        workload_file!("diverse_50.json.gz"),
        PreferencePolicy::Respect,
        0.158,
        10,
        None,
    ),
    row(
        "diverse-100",
        workload_file!("diverse_100.json.gz"),
        PreferencePolicy::Respect,
        0.425,
        20,
        None,
    ),
    row(
        "diverse-500",
        workload_file!("diverse_500.json.gz"),
        PreferencePolicy::Respect,
        3.26,
        100,
        None,
    ),
    row(
        "diverse-1000",
        workload_file!("diverse_1000.json.gz"),
        PreferencePolicy::Respect,
        6.30,
        200,
        None,
    ),
    row(
        "diverse-2000",
        workload_file!("diverse_2000.json.gz"),
        PreferencePolicy::Respect,
        13.2,
        400,
        None,
    ),
    row(
        "diverse-5000",
        workload_file!("diverse_5000.json.gz"),
        PreferencePolicy::Respect,
        41.6,
        1000,
        None,
    ),
    row(
        "diverse-10000",
        workload_file!("diverse_10000.json.gz"),
        PreferencePolicy::Respect,
        86.0,
        2000,
        None,
    ),
    row(
        "diverse-20000",
        workload_file!("diverse_20000.json.gz"),
        PreferencePolicy::Respect,
        199.0,
        4000,
        Some(538.0),
    ),
    row(
        "respect-preferences-4000",
        workload_file!("preference_4000.json.gz"),
        PreferencePolicy::Respect,
        169.5,
        4000,
        None,
    ),
    row(
        "ignore-preferences-4000",
        workload_file!("preference_4000.json.gz"),
        PreferencePolicy::Ignore,
        2.75,
        21,
        None,
    ),
];

const fn row(
    name: &'static str,
    data: &'static [u8],
    policy: PreferencePolicy,
    upstream_seconds: f64,
    upstream_nodes: usize,
    upstream_rss_mb: Option<f64>,
) -> Workload {
    Workload {
        name,
        data,
        policy,
        upstream_seconds,
        upstream_nodes,
        upstream_rss_mb,
    }
}

/// The measurements of one row (the `--json` output's `rows[]`; keep the names stable).
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RowReport {
    workload: String,
    pods: usize,
    runs: usize,
    median_seconds: f64,
    pods_per_second: f64,
    placed_pods: usize,
    nodes: usize,
    cost_per_hour: f64,
    cost_lower_bound: f64,
    #[serde(rename = "peakRssMiB")]
    peak_rss_mib: Option<f64>,
    upstream_seconds: Option<f64>,
    upstream_pods_per_second: Option<f64>,
    upstream_nodes: usize,
    upstream_peak_rss_mb: Option<f64>,
    speedup: Option<f64>,
}

/// Names of the rows, in order.
fn workload_names() -> Vec<&'static str> {
    WORKLOADS.iter().map(|w| w.name).collect()
}

fn decode(workload: &Workload) -> Result<Vec<WorkloadPod>> {
    let mut json = String::new();
    flate2::read::GzDecoder::new(workload.data)
        .read_to_string(&mut json)
        .with_context(|| format!("workload {}: not gzip-compressed JSON", workload.name))?;
    serde_json::from_str(&json)
        .with_context(|| format!("workload {}: not a list of workload pods", workload.name))
}

/// Runs one workload in this process and measures it.
fn measure(workload: &Workload, runs: usize) -> Result<RowReport> {
    let input = workload_input(&decode(workload)?)
        .with_context(|| format!("workload {}", workload.name))?;
    let context = SchedulingContext {
        preference_policy: workload.policy,
        ..Default::default()
    };
    // Like Go's testing.B, which upstream's figures come from: repeat until about a second has
    // been measured (at least `runs` times), so that small workloads are timed warm.
    let runs = runs.max(1);
    let mut durations = Vec::with_capacity(runs);
    let mut result = None;
    let mut measured = 0.0;
    while durations.len() < runs || (measured < 1.0 && durations.len() < 1000) {
        // The previous result is dropped first, so the peak memory is one pass's.
        drop(result.take());
        let started = Instant::now();
        let r = schedule_with_context(&input, &context, None);
        let elapsed = started.elapsed().as_secs_f64();
        durations.push(elapsed);
        measured += elapsed;
        result = Some(r);
    }
    let runs = durations.len();
    let result = result.expect("at least one run");
    durations.sort_by(f64::total_cmp);
    let median = durations[durations.len() / 2];
    let pods = input.pods.len();
    let upstream_seconds = workload
        .upstream_seconds
        .is_finite()
        .then_some(workload.upstream_seconds);
    Ok(RowReport {
        workload: workload.name.to_owned(),
        pods,
        runs,
        median_seconds: median,
        pods_per_second: pods as f64 / median,
        placed_pods: result
            .placements
            .iter()
            .filter(|p| !matches!(p.placement, Placement::Unschedulable { .. }))
            .count(),
        nodes: result.new_claims.len(),
        cost_per_hour: result
            .new_claims
            .iter()
            .filter_map(|c| c.launch_price)
            .sum(),
        cost_lower_bound: cost_lower_bound(&input),
        peak_rss_mib: joinery_emulator::bench::proc_status_kib("VmHWM")
            .map(|kib| kib as f64 / 1024.0),
        upstream_seconds,
        upstream_pods_per_second: upstream_seconds.map(|s| pods as f64 / s),
        upstream_nodes: workload.upstream_nodes,
        upstream_peak_rss_mb: workload.upstream_rss_mb,
        speedup: upstream_seconds.map(|s| s / median),
    })
}

/// Runs the selected workloads (all when `selected` is empty), each in a fresh child process
/// unless `child` is set (then exactly one workload runs here and its row is printed as JSON).
fn scheduling(selected: &[String], runs: usize, json: bool, child: bool) -> Result<ExitCode> {
    for name in selected {
        if !WORKLOADS.iter().any(|w| w.name == name) {
            bail!(
                "unknown workload {name:?}; choose from: {}",
                workload_names().join(", ")
            );
        }
    }
    let chosen: Vec<&Workload> = WORKLOADS
        .iter()
        .filter(|w| selected.is_empty() || selected.iter().any(|s| s == w.name))
        .collect();
    if child {
        let [workload] = chosen.as_slice() else {
            bail!("--child runs exactly one --workload")
        };
        println!("{}", serde_json::to_string(&measure(workload, runs)?)?);
        return Ok(ExitCode::SUCCESS);
    }
    let exe = std::env::current_exe()
        .context("cannot find the joinery executable to run each workload in")?;
    let mut rows = Vec::new();
    if !json {
        println!(
            "scheduling benchmark: upstream's workloads, 400 instance types, median of at least {runs} run(s) and about 1 s of runs, one process per row"
        );
        println!(
            "{:<26} {:>6} {:>10} {:>9} {:>6} {:>9} {:>9} {:>9} | {:>9} {:>7} {:>6} {:>8}",
            "workload",
            "pods",
            "median",
            "pods/s",
            "nodes",
            "cost/h",
            "bound/h",
            "peak MiB",
            "upstream",
            "pods/s",
            "nodes",
            "speedup"
        );
    }
    for workload in chosen {
        let output = Command::new(&exe)
            .args([
                "bench",
                "scheduling",
                "--child",
                "--runs",
                &runs.to_string(),
                "--workload",
                workload.name,
            ])
            .output()
            .with_context(|| format!("cannot run the {} workload", workload.name))?;
        if !output.status.success() {
            bail!(
                "workload {} failed: {}",
                workload.name,
                String::from_utf8_lossy(&output.stderr)
            );
        }
        let report: RowReport = serde_json::from_slice(&output.stdout)
            .with_context(|| format!("workload {}: unreadable child output", workload.name))?;
        if !json {
            let opt = |v: Option<f64>, digits: usize| {
                v.map_or("-".to_owned(), |v| format!("{v:.digits$}"))
            };
            println!(
                "{:<26} {:>6} {:>8.1}ms {:>9.0} {:>6} {:>9.2} {:>9.2} {:>9} | {:>8}s {:>7} {:>6} {:>7}x",
                report.workload,
                report.pods,
                report.median_seconds * 1000.0,
                report.pods_per_second,
                report.nodes,
                report.cost_per_hour,
                report.cost_lower_bound,
                opt(report.peak_rss_mib, 0),
                opt(report.upstream_seconds, 3),
                opt(report.upstream_pods_per_second, 0),
                report.upstream_nodes,
                opt(report.speedup, 0),
            );
        }
        rows.push(report);
    }
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "rows": rows }))?
        );
    }
    Ok(ExitCode::SUCCESS)
}
