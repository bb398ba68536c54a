//! `joinery schedule`: one dry-run provisioning pass of the real scheduler over a cluster
//! snapshot. Nothing is launched; the decision is printed (text or `--json`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::ValueEnum;
use joinery_adapter::convert;
use joinery_adapter::snapshot::{Assembly, BatchStatus, Snapshot};
use joinery_core::instance_type::InstanceType;
use joinery_core::labels::{CAPACITY_TYPE_LABEL, ZONE_LABEL};
use joinery_core::scheduling::{
    self, MinValuesPolicy, NewNodeClaim, Placement, PreferencePolicy, SchedulingResult,
};
use serde::Serialize;

use super::Execute;
use crate::snapshot_input::{InstanceTypeArgs, read, read_snapshot};
use joinery_adapter::spread;

/// `joinery schedule …`
#[derive(Debug, clap::Args)]
pub struct ScheduleArgs {
    /// The snapshot: multi-document YAML of NodePools, NodeClaims, Nodes, Pods, DaemonSets, …
    /// (`kubectl get -o yaml` output works, `kind: List` included).
    pub snapshot: PathBuf,
    /// Where the instance types come from (--catalog, or --plugin with --node-class).
    #[command(flatten)]
    pub instance_types: InstanceTypeArgs,
    /// Whether preferences (preferred affinities, ScheduleAnyway spreads) are respected then
    /// relaxed, or ignored (upstream's PREFERENCE_POLICY).
    #[arg(long, value_enum, ignore_case = true, default_value = "Respect")]
    pub preference_policy: PreferencePolicyArg,
    /// Whether NodePool minValues are strict or best effort (upstream's MIN_VALUES_POLICY).
    #[arg(long, value_enum, ignore_case = true, default_value = "Strict")]
    pub min_values_policy: MinValuesPolicyArg,
    /// Scheduler config with cluster-wide default spread constraints (upstream's
    /// `SCHEDULER_CONFIG`): `{podTopologySpread: {defaultConstraints: [...]}}`, given to pending
    /// pods without spread constraints, selectors deduced from Services, ReplicaSets and
    /// StatefulSets.
    #[arg(long, value_name = "FILE")]
    pub scheduler_config: Option<PathBuf>,
    /// Print JSON instead of the human-readable report.
    #[arg(long)]
    pub json: bool,
    /// Exit with 1 (a failed check) when a pending pod fits neither an existing node nor a
    /// new NodeClaim; the report is printed either way.
    #[arg(long)]
    pub fail_on_pending: bool,
}

/// `--preference-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PreferencePolicyArg {
    /// Treat preferences as required, relaxing them one at a time when a pod does not fit.
    #[value(name = "Respect")]
    Respect,
    /// Leave preferences out.
    #[value(name = "Ignore")]
    Ignore,
}

/// `--min-values-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MinValuesPolicyArg {
    /// A NodeClaim that cannot keep minValues distinct values is not created.
    #[value(name = "Strict")]
    Strict,
    /// minValues is relaxed to what the remaining instance types allow.
    #[value(name = "BestEffort")]
    BestEffort,
}

impl Execute for ScheduleArgs {
    async fn execute(self) -> Result<ExitCode> {
        schedule(self).await
    }

    /// The decision is the output: only warnings are logged.
    fn default_log_level(&self) -> String {
        "warn".to_string()
    }
}

/// Gives the pending pods without spread constraints of their own the scheduler config's
/// default constraints, with the selector deduced from the snapshot's Services, ReplicaSets
/// and StatefulSets. Returns how many pods got them.
fn apply_default_spread(
    snapshot: &Snapshot,
    pods: &mut [scheduling::PendingPod],
    defaults: &[spread::DefaultConstraint],
) -> usize {
    let services: Vec<_> = snapshot.services.iter().map(|l| &l.object).collect();
    let replica_sets: Vec<_> = snapshot.replica_sets.iter().map(|l| &l.object).collect();
    let stateful_sets: Vec<_> = snapshot.stateful_sets.iter().map(|l| &l.object).collect();
    let sources = spread::SelectorSources {
        services: &services,
        replica_sets: &replica_sets,
        stateful_sets: &stateful_sets,
        ..Default::default()
    };
    let by_key: std::collections::HashMap<(&str, &str), &joinery_adapter::lean::LeanPod> = snapshot
        .pods
        .iter()
        .map(|l| {
            let meta = &l.object.metadata;
            (
                (
                    meta.namespace.as_deref().unwrap_or_default(),
                    meta.name.as_deref().unwrap_or_default(),
                ),
                &l.object,
            )
        })
        .collect();
    spread::apply_to_batch(pods, defaults, sources, |pod| {
        by_key
            .get(&(pod.key.namespace.as_str(), pod.key.name.as_str()))
            .copied()
    })
}

/// How many instance types the text report names per NodeClaim.
const SHOWN_INSTANCE_TYPES: usize = 5;

/// Runs `joinery schedule`: reads the snapshot and the instance types, runs one pass, prints
/// the decision, and writes notes (what was left out or not modelled) to stderr. Exit code 0
/// whenever the pass ran, whether or not every pod found a place.
async fn schedule(args: ScheduleArgs) -> Result<ExitCode> {
    let snapshot = read_snapshot(&args.snapshot)?;
    let (instance_types, label_policy) = args.instance_types.load().await?;
    let mut assembly = snapshot
        .assemble(&instance_types, label_policy)
        .with_context(|| format!("snapshot {}", args.snapshot.display()))?;
    let mut notes = assembly.notes.clone();
    if let Some(path) = &args.scheduler_config {
        let defaults = spread::parse_scheduler_config(&read(path, "scheduler config")?)
            .with_context(|| format!("{}", path.display()))?;
        let applied = apply_default_spread(&snapshot, &mut assembly.input.pods, &defaults);
        notes.push(format!(
            "default topology spread constraints from {} given to {applied} pending pod(s)",
            path.display()
        ));
    } else if !(snapshot.services.is_empty()
        && snapshot.replica_sets.is_empty()
        && snapshot.stateful_sets.is_empty())
    {
        notes.push("Services, ReplicaSets and StatefulSets select pods for default spread constraints, which only --scheduler-config asks for; not used".into());
    }
    // The pass and the report need only the assembled input: give the objects' memory back
    // before the pass allocates its own (the text's went when it was parsed).
    drop(snapshot);
    let mut context = assembly.context.clone();
    context.preference_policy = match args.preference_policy {
        PreferencePolicyArg::Respect => PreferencePolicy::Respect,
        PreferencePolicyArg::Ignore => PreferencePolicy::Ignore,
    };
    context.min_values_policy = match args.min_values_policy {
        MinValuesPolicyArg::Strict => MinValuesPolicy::Strict,
        MinValuesPolicyArg::BestEffort => MinValuesPolicy::BestEffort,
    };

    let started = Instant::now();
    let result = scheduling::schedule_with_context(&assembly.input, &context, None);
    let duration_seconds = started.elapsed().as_secs_f64();
    for pool in &result.nodepools_without_instance_types {
        notes.push(format!(
            "NodePool {pool}: its requirements leave no instance type with an available offering"
        ));
    }

    let report = Report::new(&assembly, &result, duration_seconds);
    crate::snapshot_input::print_report(args.json, &report, |out| {
        write_text(out, &report, &assembly, &result, &instance_types)
    })?;
    for note in notes {
        eprintln!("note: {note}");
    }
    let stuck = report
        .pods
        .iter()
        .filter(|p| matches!(p.placement, PlacementEntry::None { .. }))
        .count();
    if args.fail_on_pending && stuck > 0 {
        eprintln!("{stuck} pod(s) would stay pending (--fail-on-pending)");
        return Ok(crate::exit::CHECK_FAILED);
    }
    Ok(ExitCode::SUCCESS)
}

/// The `--json` document. Field names are a stable interface.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    /// One entry per pending pod, in snapshot order.
    pods: Vec<PodEntry>,
    /// The NodeClaims the pass would create.
    new_node_claims: Vec<ClaimEntry>,
    /// Wall-clock time of the scheduling pass itself (the only non-deterministic field).
    duration_seconds: f64,
}

#[derive(Debug, Serialize)]
struct PodEntry {
    namespace: String,
    name: String,
    placement: PlacementEntry,
}

#[derive(Debug, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
enum PlacementEntry {
    Existing { node: String },
    New { claim: usize },
    None { reason: String },
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ClaimEntry {
    index: usize,
    node_pool: String,
    requirements: Vec<RequirementEntry>,
    instance_types: Vec<String>,
    requests: BTreeMap<String, String>,
    labels: BTreeMap<String, String>,
    taints: Vec<k8s_openapi::api::core::v1::Taint>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct RequirementEntry {
    key: String,
    operator: String,
    values: Vec<String>,
    min_values: Option<usize>,
}

impl Report {
    fn new(assembly: &Assembly, result: &SchedulingResult, duration_seconds: f64) -> Report {
        let pods = assembly
            .pods
            .iter()
            .map(|pod| {
                let placement = match &pod.status {
                    BatchStatus::Refused(reason) => PlacementEntry::None {
                        reason: reason.clone(),
                    },
                    BatchStatus::Scheduled(i) => match &result.placements[*i].placement {
                        Placement::Existing { node } => {
                            PlacementEntry::Existing { node: node.clone() }
                        }
                        Placement::NewClaim { index } => PlacementEntry::New { claim: *index },
                        Placement::Unschedulable { reason } => PlacementEntry::None {
                            reason: reason.clone(),
                        },
                    },
                };
                PodEntry {
                    namespace: pod.key.namespace.clone(),
                    name: pod.key.name.clone(),
                    placement,
                }
            })
            .collect();
        let new_node_claims = result
            .new_claims
            .iter()
            .enumerate()
            .map(|(index, claim)| claim_entry(index, claim))
            .collect();
        Report {
            pods,
            new_node_claims,
            duration_seconds,
        }
    }
}

fn claim_entry(index: usize, claim: &NewNodeClaim) -> ClaimEntry {
    let spec = &claim.spec;
    ClaimEntry {
        index,
        node_pool: spec.nodepool.clone(),
        requirements: spec
            .requirements
            .to_node_selector()
            .into_iter()
            .map(|r| RequirementEntry {
                key: r.key,
                operator: r.operator.to_string(),
                values: r.values,
                min_values: r.min_values,
            })
            .collect(),
        instance_types: spec.instance_types.to_vec(),
        requests: spec.requests.to_quantities(),
        labels: spec.labels.clone(),
        taints: spec.taints.iter().map(convert::taint_to_k8s).collect(),
    }
}

/// The human-readable report: one line per pod, then the NodeClaims, then a summary.
fn write_text(
    out: &mut impl Write,
    report: &Report,
    assembly: &Assembly,
    result: &SchedulingResult,
    instance_types: &[InstanceType],
) -> Result<()> {
    let in_flight: BTreeSet<&str> = assembly
        .input
        .nodes
        .iter()
        .filter(|n| n.in_flight)
        .map(|n| n.name.as_str())
        .collect();
    let width = report
        .pods
        .iter()
        .map(|p| p.namespace.len() + p.name.len() + 1)
        .max()
        .unwrap_or(0)
        .min(60);
    let (mut on_nodes, mut on_claims, mut nowhere) = (0, 0, 0);
    writeln!(out, "Pods ({}):", report.pods.len())?;
    for pod in &report.pods {
        let key = format!("{}/{}", pod.namespace, pod.name);
        match &pod.placement {
            PlacementEntry::Existing { node } => {
                on_nodes += 1;
                let what = if in_flight.contains(node.as_str()) {
                    "in-flight node"
                } else {
                    "existing node"
                };
                writeln!(
                    out,
                    "  {key:<width$}  -> {what} {node} (it has room, compatible labels and tolerated taints)"
                )?;
            }
            PlacementEntry::New { claim } => {
                on_claims += 1;
                let pool = &result.new_claims[*claim].spec.nodepool;
                writeln!(
                    out,
                    "  {key:<width$}  -> new NodeClaim #{claim} of NodePool {pool} (no existing or in-flight node could take it)"
                )?;
            }
            PlacementEntry::None { reason } => {
                nowhere += 1;
                writeln!(out, "  {key:<width$}  -- not schedulable: {reason}")?;
            }
        }
    }

    let by_name: HashMap<&str, &InstanceType> =
        instance_types.iter().map(|t| (t.name(), t)).collect();
    let policy = &assembly.input.label_policy;
    let all_zones: BTreeSet<&str> = instance_types
        .iter()
        .flat_map(|t| t.offerings().iter().map(|o| o.zone()))
        .collect();
    writeln!(out)?;
    writeln!(out, "NodeClaims to create ({}):", result.new_claims.len())?;
    for (index, claim) in result.new_claims.iter().enumerate() {
        let spec = &claim.spec;
        let price = claim
            .launch_price
            .map(|p| format!(", from {p:.4}/h"))
            .unwrap_or_default();
        writeln!(
            out,
            "  #{index} NodePool {}: {} pod(s){price}",
            spec.nodepool,
            claim.pods.len()
        )?;
        let shown: Vec<String> = spec
            .instance_types
            .iter()
            .take(SHOWN_INSTANCE_TYPES)
            .map(|name| {
                let price = by_name
                    .get(name.as_str())
                    .and_then(|t| t.cheapest_price(&spec.requirements, policy));
                match price {
                    Some(p) => format!("{name} ({p:.4}/h)"),
                    None => name.clone(),
                }
            })
            .collect();
        let more = spec
            .instance_types
            .len()
            .saturating_sub(SHOWN_INSTANCE_TYPES);
        let more = if more > 0 {
            format!(", and {more} more")
        } else {
            String::new()
        };
        writeln!(
            out,
            "      instance types ({}, cheapest first): {}{more}",
            spec.instance_types.len(),
            shown.join(", ")
        )?;
        // Zones with an available compatible offering; stop once every zone the claim allows
        // is found.
        let allowed = all_zones
            .iter()
            .filter(|z| spec.requirements.get(ZONE_LABEL).is_none_or(|r| r.has(z)))
            .count();
        let mut zones = BTreeSet::new();
        for name in spec.instance_types.iter() {
            if zones.len() == allowed {
                break;
            }
            if let Some(t) = by_name.get(name.as_str()) {
                zones.extend(
                    t.offerings()
                        .available_compatible(&spec.requirements, policy)
                        .map(|o| o.zone().to_string()),
                );
            }
        }
        if zones.is_empty()
            && let Some(r) = spec.requirements.get(ZONE_LABEL)
        {
            zones.extend(r.values().iter().cloned());
        }
        writeln!(out, "      zones: {}", list_or_any(zones))?;
        let capacity_types: BTreeSet<String> = spec
            .requirements
            .get(CAPACITY_TYPE_LABEL)
            .map(|r| r.values().clone())
            .unwrap_or_default();
        writeln!(out, "      capacity types: {}", list_or_any(capacity_types))?;
        writeln!(
            out,
            "      requests: {} (DaemonSet overhead {})",
            spec.requests, claim.daemon_overhead
        )?;
        if !spec.taints.is_empty() {
            let taints: Vec<String> = spec.taints.iter().map(ToString::to_string).collect();
            writeln!(out, "      taints: {}", taints.join(", "))?;
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "{} pod(s): {on_nodes} on existing nodes, {on_claims} on {} new NodeClaim(s), {nowhere} not schedulable; pass took {:.3}s",
        report.pods.len(),
        result.new_claims.len(),
        report.duration_seconds
    )?;
    if !result.new_claims.is_empty() {
        let priced: Vec<f64> = result
            .new_claims
            .iter()
            .filter_map(|c| c.launch_price)
            .collect();
        let unpriced = result.new_claims.len() - priced.len();
        let unpriced = if unpriced > 0 {
            format!(", {unpriced} NodeClaim(s) without a known price")
        } else {
            String::new()
        };
        writeln!(
            out,
            "estimated cost of the new NodeClaims: {:.4}/h (cheapest instance type of each){unpriced}",
            priced.iter().sum::<f64>()
        )?;
    }
    Ok(())
}

fn list_or_any(items: BTreeSet<String>) -> String {
    if items.is_empty() {
        "any".into()
    } else {
        items.into_iter().collect::<Vec<_>>().join(", ")
    }
}
