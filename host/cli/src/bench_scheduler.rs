//! `joinery bench scheduler`: the provisioning scheduler on upstream's benchmark shape
//! (the `incrementing` fake-it-N catalogue and upstream's pod mix), timed over several runs.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::Result;
use joinery_core::scheduling::{Placement, benchmark_input, cost_lower_bound, schedule};

/// Upstream's published times (seconds) for its benchmark with 400 instance types, by pod
/// count (kubernetes-sigs/karpenter PR #1938, measured on an Apple-silicon laptop).
const UPSTREAM_SECONDS_400_TYPES: [(usize, f64); 5] = [(1000, 0.89), (2000, 1.6), (5000, 5.1), (10000, 12.1), (20000, 35.7)];

/// Runs the benchmark and prints medians (and the cost against its lower bound).
pub fn scheduler(pods: usize, types: usize, runs: usize, json: bool) -> Result<ExitCode> {
    let input = benchmark_input(pods, types);
    let runs = runs.max(1);
    let mut durations = Vec::with_capacity(runs);
    let mut result = None;
    for _ in 0..runs {
        let started = Instant::now();
        let r = schedule(&input);
        durations.push(started.elapsed().as_secs_f64());
        result = Some(r);
    }
    let result = result.expect("at least one run");
    durations.sort_by(f64::total_cmp);
    let median = durations[durations.len() / 2];
    let placed = result.placements.iter().filter(|p| !matches!(p.placement, Placement::Unschedulable { .. })).count();
    let cost: f64 = result.new_claims.iter().filter_map(|c| c.launch_price).sum();
    let bound = cost_lower_bound(&input);
    let pods_per_second = pods as f64 / median;
    let upstream = (types == 400).then(|| UPSTREAM_SECONDS_400_TYPES.iter().find(|(n, _)| *n == pods).map(|(_, s)| *s)).flatten();
    let upstream_ratio = upstream.map(|s| s / median);
    if json {
        println!(
            "{}",
            serde_json::json!({
                "pods": pods, "instanceTypes": types, "runs": runs,
                "medianSeconds": median, "podsPerSecond": pods_per_second,
                "placedPods": placed, "newNodeClaims": result.new_claims.len(),
                "costPerHour": cost, "costLowerBound": bound,
                "costToBoundRatio": if bound > 0.0 { cost / bound } else { f64::NAN },
                "upstreamSeconds": upstream,
                "speedupVsUpstream": upstream_ratio,
            })
        );
    } else {
        println!("scheduler: {pods} pods over {types} instance types, {runs} runs");
        println!("  median {:.1} ms ({:.0} pods/s)", median * 1000.0, pods_per_second);
        println!("  placed {placed} pods on {} new NodeClaims", result.new_claims.len());
        println!("  cost {cost:.3}/h, lower bound {bound:.3}/h (ratio {:.2})", if bound > 0.0 { cost / bound } else { f64::NAN });
        if let (Some(s), Some(r)) = (upstream, upstream_ratio) {
            println!("  upstream's published time for this shape is {s} s (different machine): {r:.1}x faster");
        }
    }
    Ok(ExitCode::SUCCESS)
}
