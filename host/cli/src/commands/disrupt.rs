//! `joinery disrupt`: one dry-run disruption pass over a cluster snapshot, decided by the same
//! functions the disruption controller calls ([`joinery_core::disruption`], fed through
//! [`joinery_adapter::disruption::snapshot`]). Nothing is tainted, launched or deleted; the
//! decision is printed (text or `--json`).
//!
//! A snapshot is a moment without a controller: nothing is nominated for pending pods and no
//! command is in flight; `Consolidatable` is worked out at `--at` from the claims'
//! `Initialized` time and `lastPodEventTime`, as the controller keeps it; `Drifted` is read
//! from the claims' conditions as they are. The 15 s validation is not waited for.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use anyhow::{Context, Result, anyhow};
use joinery_adapter::assemble::{PoolOffer, Source};
use joinery_adapter::conditions::INITIALIZED;
use joinery_adapter::convert::{self, system_time};
use joinery_adapter::disruption::{DisruptionObjects, Marks, consolidate_after};
use joinery_adapter::snapshot::Snapshot as Objects;
use joinery_api::{HasConditions, NodeClaim};
use joinery_controller::settings::FeatureGates;
use joinery_core::disruption::{
    self, Blocker, Command, Decision, Method, MethodOutcome, Options, Reason,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::Execute;
use crate::snapshot_input::{InstanceTypeArgs, read_snapshot};

/// The budget reasons reported per NodePool (expiration has no budget).
const BUDGET_REASONS: [Reason; 3] = [Reason::Empty, Reason::Drifted, Reason::Underutilized];

/// How many replacement instance types the text report names.
const SHOWN_INSTANCE_TYPES: usize = 5;

/// How many candidates the text report names per command (the JSON lists them all).
const SHOWN_NODES: usize = 10;

/// `joinery disrupt …`
#[derive(Debug, clap::Args)]
pub struct DisruptArgs {
    /// The snapshot and the moment of the pass.
    #[command(flatten)]
    pub pass: PassArgs,
    /// Report what every method would decide on its own (expiration, emptiness, drift,
    /// multi-node and single-node consolidation), not only the command the controller would
    /// start next.
    #[arg(long)]
    pub all: bool,
    /// Print JSON instead of the human-readable report.
    #[arg(long)]
    pub json: bool,
}

/// What a disruption pass over a snapshot reads (shared with `joinery explain node`).
#[derive(Debug, clap::Args)]
pub struct PassArgs {
    /// The snapshot: multi-document YAML of NodePools, NodeClaims (with status), Nodes, Pods,
    /// PodDisruptionBudgets, DaemonSets, … (`kubectl get -o yaml` output works, `kind: List`
    /// included).
    pub snapshot: PathBuf,
    /// Where the instance types come from (--catalog, or --plugin with --node-class).
    #[command(flatten)]
    pub instance_types: InstanceTypeArgs,
    /// The moment the pass runs, RFC 3339 (`2026-03-02T12:00:00Z`): consolidateAfter, cron
    /// budgets and expireAfter are evaluated then. Default: the latest timestamp in the
    /// snapshot (creation, deletion and condition transition times, lastPodEventTime).
    #[arg(long, value_name = "RFC3339", value_parser = parse_time)]
    pub at: Option<SystemTime>,
    /// Upstream's feature gates, as `joinery run` reads them from FEATURE_GATES
    /// (`SpotToSpotConsolidation=true` lets consolidation replace spot nodes with spot nodes).
    #[arg(long, value_name = "GATES", value_parser = FeatureGates::parse)]
    pub feature_gates: Option<FeatureGates>,
}

fn parse_time(text: &str) -> Result<SystemTime, String> {
    let t: Timestamp = text.parse().map_err(|e| {
        format!("{text:?} is not an RFC 3339 time such as 2026-03-02T12:00:00Z: {e}")
    })?;
    Ok(system_time(&Time(t)))
}

/// A disruption snapshot built from a file, with what the reader should know about it.
pub struct Pass {
    /// What the core decides on.
    pub snapshot: disruption::Snapshot,
    /// Where the moment of the pass comes from (`--at`, or the snapshot's latest timestamp).
    pub now_from: &'static str,
    /// Notes for stderr: what was left out or not modelled.
    pub notes: Vec<String>,
    /// The CapacityBuffers that take part (with the gate, or when asked for).
    pub buffers: Vec<BufferSummary>,
}

/// A CapacityBuffer of a snapshot, resolved.
pub struct BufferSummary {
    /// `namespace/name`.
    pub key: String,
    /// Its chunk shape and count, or why it is not ready.
    pub resolution: joinery_adapter::buffers::Resolution,
}

impl PassArgs {
    /// Reads the snapshot and the instance types and builds the core's snapshot the way the
    /// disruption controller gathers its own. Errors name the document and field.
    pub async fn load(&self) -> Result<Pass> {
        self.load_with(false).await
    }

    /// [`load`](Self::load); with `buffers`, the snapshot's CapacityBuffers take part whatever
    /// the feature gates say (`joinery explain buffers`).
    pub async fn load_with(&self, buffers: bool) -> Result<Pass> {
        let objects = read_snapshot(&self.snapshot)?;
        let (instance_types, label_policy) = self.instance_types.load().await?;
        // The provisioning assembly checks every object the way `joinery schedule` does, so a
        // quantity or requirement that does not convert is an error naming its document.
        let assembly = objects
            .assemble(&instance_types, label_policy.clone())
            .with_context(|| format!("snapshot {}", self.snapshot.display()))?;
        let mut notes: Vec<String> = assembly
            .notes
            .into_iter()
            .filter(|n| !n.starts_with("read but not used by the scheduler"))
            .collect();
        let (now, now_from) = match self.at.or_else(|| latest_timestamp(&objects)) {
            Some(now) if self.at.is_some() => (now, "--at"),
            Some(now) => (now, "the latest timestamp in the snapshot"),
            None => {
                notes.push("the snapshot holds no timestamp and --at is not given: the pass runs at the current time".into());
                (SystemTime::now(), "the current time")
            }
        };
        let overlays = objects
            .node_overlays
            .iter()
            .map(|l| {
                convert::overlay(&l.object)
                    .map_err(|e| anyhow!("snapshot {}: {}: {e}", self.snapshot.display(), l.origin))
            })
            .collect::<Result<Vec<_>>>()?;
        let mut offered: Vec<_> = objects
            .node_pools
            .iter()
            .map(|l| &l.object)
            .filter(|p| p.metadata.deletion_timestamp.is_none() && !p.spec.is_static())
            .collect();
        offered.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let pdbs: Vec<Arc<PodDisruptionBudget>> = objects
            .pod_disruption_budgets
            .iter()
            .map(|l| Arc::new(l.object.clone()))
            .collect();
        let cluster = objects.objects();
        let pending = joinery_adapter::disruption::pending_pods(&cluster, &pdbs);
        let waiting = pending.len();
        let gates = self.feature_gates.unwrap_or_default();
        let buffer_states = objects.buffer_states();
        let with_buffers = buffers || gates.capacity_buffer;
        let virtual_pods = if with_buffers {
            joinery_adapter::buffers::virtual_pods(&buffer_states)
        } else {
            if !buffer_states.is_empty() {
                notes.push("CapacityBuffers are left out: they act only with --feature-gates CapacityBuffer=true, as in the controller".into());
            }
            Vec::new()
        };
        let buffers: Vec<BufferSummary> = if with_buffers {
            buffer_states
                .iter()
                .map(|b| BufferSummary {
                    key: b.key(),
                    resolution: b.resolution.clone(),
                })
                .collect()
        } else {
            Vec::new()
        };
        let disruption_objects = DisruptionObjects {
            cluster,
            pdbs: &pdbs,
            node_pools: objects.node_pools.iter().map(|l| &l.object).collect(),
            offers: offered
                .iter()
                .map(|pool| PoolOffer {
                    pool,
                    instance_types: &instance_types,
                })
                .collect(),
            overlays: &overlays,
            pending,
            virtual_pods,
        };
        let nominated = |_: &str| false;
        let disrupting = BTreeSet::new();
        let marks = Marks {
            now,
            nominated: &nominated,
            disrupting: &disrupting,
            source: Source::Snapshot,
        };
        let options = Options {
            spot_to_spot: gates.spot_to_spot_consolidation,
            ..Options::default()
        };
        let (mut snapshot, problems, messages) =
            joinery_adapter::disruption::snapshot(&disruption_objects, &marks, options);
        snapshot.scheduling.label_policy = label_policy;
        notes.extend(problems.into_iter().map(|p| p.message));
        notes.extend(messages);
        refresh_consolidatable(&mut snapshot, &objects, now);
        if waiting > 0 {
            notes.push(format!(
                "{waiting} pod(s) wait for capacity: the nodes they would land on count as nominated (the snapshot holds no nominations of earlier passes)"
            ));
        }
        if !gates.static_capacity && snapshot.pools.values().any(|p| p.is_static) {
            snapshot.pools.values_mut().for_each(|p| p.template = None);
            notes.push("static NodePools (spec.replicas) are managed only with --feature-gates StaticCapacity=true, as in the controller".into());
        }
        Ok(Pass {
            snapshot,
            now_from,
            notes,
            buffers,
        })
    }
}

/// Each candidate's `Consolidatable` at `now`, as the controller keeps the condition: true
/// once the pool's `consolidateAfter` has passed since the later of the claim's initialization
/// and its last pod event (false for `Never`).
fn refresh_consolidatable(snapshot: &mut disruption::Snapshot, objects: &Objects, now: SystemTime) {
    let claims: BTreeMap<&str, &NodeClaim> = objects
        .node_claims
        .iter()
        .filter_map(|l| l.object.metadata.name.as_deref().map(|n| (n, &l.object)))
        .collect();
    let pools: BTreeMap<&str, _> = objects
        .node_pools
        .iter()
        .filter_map(|l| l.object.metadata.name.as_deref().map(|n| (n, &l.object)))
        .collect();
    for c in &mut snapshot.candidates {
        let (Some(claim), Some(pool)) = (claims.get(c.claim.as_str()), pools.get(c.pool.as_str()))
        else {
            continue;
        };
        let initialized_at = claim
            .condition(INITIALIZED)
            .filter(|c| c.is_true())
            .map(|c| system_time(&c.last_transition_time));
        if initialized_at.is_none() {
            continue;
        }
        let last_pod_event = claim
            .status
            .as_ref()
            .and_then(|s| s.last_pod_event_time.as_ref())
            .map(system_time);
        c.consolidatable = disruption::consolidatable(
            consolidate_after(pool),
            initialized_at,
            last_pod_event,
            now,
        )
        .unwrap_or(false);
    }
}

/// The latest time the snapshot records: creation and deletion timestamps, condition
/// transition times, and NodeClaims' `lastPodEventTime`.
fn latest_timestamp(objects: &Objects) -> Option<SystemTime> {
    fn meta(m: &ObjectMeta) -> impl Iterator<Item = &Time> {
        m.creation_timestamp
            .iter()
            .chain(m.deletion_timestamp.iter())
    }
    let mut times: Vec<&Time> = Vec::new();
    for l in &objects.node_pools {
        times.extend(meta(&l.object.metadata));
    }
    for l in &objects.node_claims {
        times.extend(meta(&l.object.metadata));
        times.extend(
            l.object
                .conditions()
                .iter()
                .map(|c| &c.last_transition_time),
        );
        times.extend(
            l.object
                .status
                .as_ref()
                .and_then(|s| s.last_pod_event_time.as_ref()),
        );
    }
    for l in &objects.nodes {
        let m = &l.object.metadata;
        times.extend(
            m.creation_timestamp
                .iter()
                .chain(m.deletion_timestamp.iter()),
        );
        let conditions = l
            .object
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref());
        times.extend(
            conditions
                .into_iter()
                .flatten()
                .filter_map(|c| c.last_transition_time.as_ref()),
        );
    }
    for l in &objects.pods {
        let m = &l.object.metadata;
        times.extend(
            m.creation_timestamp
                .iter()
                .chain(m.deletion_timestamp.iter()),
        );
        let conditions = l.object.status.as_ref().and_then(|s| s.conditions.as_ref());
        times.extend(
            conditions
                .into_iter()
                .flatten()
                .filter_map(|c| c.last_transition_time.as_ref()),
        );
    }
    for l in &objects.pod_disruption_budgets {
        times.extend(meta(&l.object.metadata));
    }
    times.into_iter().map(system_time).max()
}

impl Execute for DisruptArgs {
    async fn execute(self) -> Result<ExitCode> {
        disrupt(self).await
    }

    /// The decision is the output: only warnings are logged.
    fn default_log_level(&self) -> String {
        "warn".to_string()
    }
}

/// Runs `joinery disrupt`: builds the snapshot, asks the core, prints the decision, and writes
/// notes to stderr. Exit code 0 whenever the pass ran, whether or not it found a command.
async fn disrupt(args: DisruptArgs) -> Result<ExitCode> {
    let pass = args.pass.load().await?;
    let snapshot = &pass.snapshot;
    let started = Instant::now();
    let expiration = disruption::evaluate(snapshot, Method::Expiration);
    let outcomes: Vec<MethodOutcome> = if args.all {
        Method::ALL
            .iter()
            .map(|m| disruption::evaluate(snapshot, *m))
            .collect()
    } else {
        disruption::decide(snapshot)
    };
    let duration_seconds = started.elapsed().as_secs_f64();
    let outcomes: Vec<MethodOutcome> = std::iter::once(expiration).chain(outcomes).collect();

    let report = Report::new(snapshot, &outcomes, duration_seconds);
    crate::snapshot_input::print_report(args.json, &report, |out| {
        write_text(out, &pass, &outcomes, &report, args.all)
    })?;
    for note in &pass.notes {
        eprintln!("note: {note}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The `--json` document. Field names are a stable interface.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct Report {
    /// Expiration's command first (forceful, outside the loop), then the loop's next command
    /// (or, with `--all`, every method's own).
    commands: Vec<CommandEntry>,
    /// Nodes a method would apply to but may not disrupt, with the rule that keeps them.
    blocked: Vec<BlockedEntry>,
    /// Each NodePool's allowance per budget reason at the moment of the pass.
    budgets: Vec<BudgetEntry>,
    /// Wall-clock time of the decision itself (the only non-deterministic field).
    duration_seconds: f64,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct CommandEntry {
    method: &'static str,
    decision: &'static str,
    reason: &'static str,
    /// Node names.
    candidates: Vec<String>,
    replacements: Vec<ReplacementEntry>,
    /// `null` when a candidate's or a replacement's price is unknown.
    saving_per_hour: Option<f64>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ReplacementEntry {
    node_pool: String,
    instance_types: Vec<String>,
    requirements: Vec<RequirementEntry>,
}

/// A Kubernetes `NodeSelectorRequirement` (with Karpenter's `minValues` when set).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct RequirementEntry {
    key: String,
    operator: String,
    values: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_values: Option<usize>,
}

#[derive(Debug, Serialize)]
struct BlockedEntry {
    node: String,
    reason: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct BudgetEntry {
    node_pool: String,
    reason: &'static str,
    /// Nodes that may start disrupting now, at most the pool's node count (a pool without a
    /// budget for the reason allows all of its nodes).
    allowed: u64,
}

/// Rounds a price to 6 decimals, so sums print without floating-point noise.
fn round(price: f64) -> f64 {
    (price * 1e6).round() / 1e6
}

fn node_name(snapshot: &disruption::Snapshot, claim: &str) -> String {
    snapshot
        .candidate(claim)
        .map_or_else(|| claim.to_string(), |c| c.node.clone())
}

/// What the command saves per hour; `None` when a price it depends on is unknown.
fn saving(snapshot: &disruption::Snapshot, command: &Command) -> Option<f64> {
    let priced = command
        .candidates
        .iter()
        .all(|name| snapshot.candidate(name).is_some_and(|c| c.price.is_some()))
        && command
            .replacements
            .iter()
            .all(|r| r.launch_price.is_some());
    priced.then(|| round(command.saving_per_hour))
}

impl Report {
    fn new(
        snapshot: &disruption::Snapshot,
        outcomes: &[MethodOutcome],
        duration_seconds: f64,
    ) -> Report {
        let commands = outcomes
            .iter()
            .filter_map(|o| o.command.as_ref())
            .map(|command| CommandEntry {
                method: command.method.as_str(),
                decision: command.decision().as_str(),
                reason: command.reason().as_str(),
                candidates: command
                    .candidates
                    .iter()
                    .map(|c| node_name(snapshot, c))
                    .collect(),
                replacements: command
                    .replacements
                    .iter()
                    .map(|r| ReplacementEntry {
                        node_pool: r.spec.nodepool.clone(),
                        instance_types: r.spec.instance_types.to_vec(),
                        requirements: r
                            .spec
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
                    })
                    .collect(),
                saving_per_hour: saving(snapshot, command),
            })
            .collect();
        let blocked = blocked(snapshot, outcomes)
            .into_iter()
            .map(|((node, reason), _)| BlockedEntry {
                node,
                reason: reason.to_string(),
            })
            .collect();
        let budgets = snapshot
            .pools
            .iter()
            .flat_map(|(name, pool)| {
                BUDGET_REASONS.into_iter().map(move |reason| BudgetEntry {
                    node_pool: name.clone(),
                    reason: reason.as_str(),
                    allowed: snapshot.allowance(name, reason).allowed.min(pool.nodes),
                })
            })
            .collect();
        Report {
            commands,
            blocked,
            budgets,
            duration_seconds,
        }
    }
}

/// The blocked nodes of every outcome, once per node and reason (in method order), with the
/// methods each applies to.
fn blocked(
    snapshot: &disruption::Snapshot,
    outcomes: &[MethodOutcome],
) -> Vec<((String, Blocker), Vec<Method>)> {
    let mut out: Vec<((String, Blocker), Vec<Method>)> = Vec::new();
    for outcome in outcomes {
        for (claim, reason) in &outcome.blocked {
            let key = (node_name(snapshot, claim), reason.clone());
            match out.iter_mut().find(|(k, _)| *k == key) {
                Some((_, methods)) => methods.push(outcome.method),
                None => out.push((key, vec![outcome.method])),
            }
        }
    }
    out
}

fn methods(list: &[Method]) -> String {
    list.iter()
        .map(|m| m.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn nodes_phrase(nodes: &[String]) -> String {
    match nodes {
        [one] => format!("node {one}"),
        many if many.len() > SHOWN_NODES => format!(
            "{} nodes: {} and {} more",
            many.len(),
            many[..SHOWN_NODES].join(", "),
            many.len() - SHOWN_NODES
        ),
        many => format!("nodes {}", many.join(", ")),
    }
}

/// Sentences about nodes, in order: one per node, except that more than [`SHOWN_NODES`]
/// nodes with the same sentence (a budget, typically) share one.
fn grouped(lines: impl Iterator<Item = (String, String)>) -> Vec<(Vec<String>, String)> {
    let lines: Vec<(String, String)> = lines.collect();
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, rest) in &lines {
        *count.entry(rest.as_str()).or_default() += 1;
    }
    let mut out: Vec<(Vec<String>, String)> = Vec::new();
    for (node, rest) in &lines {
        if count[rest.as_str()] > SHOWN_NODES
            && let Some((nodes, _)) = out.iter_mut().find(|(_, r)| r == rest)
        {
            nodes.push(node.clone());
            continue;
        }
        out.push((vec![node.clone()], rest.clone()));
    }
    out
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// One sentence for a command.
fn sentence(command: &Command, entry: &CommandEntry) -> String {
    let saving = match entry.saving_per_hour {
        Some(s) if s < 0.0 => format!("costing {:.4}/h more", -s),
        Some(s) => format!("saving {s:.4}/h"),
        None => "saving an unknown amount (a price is not known)".to_string(),
    };
    let why = match command.reason() {
        Reason::Empty => "empty",
        Reason::Drifted => "drifted",
        Reason::Underutilized => "underutilized",
        Reason::Expired => "expired",
    };
    let nodes = nodes_phrase(&entry.candidates);
    match command.decision() {
        Decision::Delete => {
            let rest = match command.reason() {
                Reason::Expired => "without replacement or budget, as expiration is forceful",
                Reason::Empty => "as no pod needs to move",
                _ if entry.candidates.len() == 1 => "as its pods fit on the remaining nodes",
                _ => "as their pods fit on the remaining nodes",
            };
            format!(
                "{} would delete {nodes} ({why}), {rest}, {saving}.",
                command.method.as_str()
            )
        }
        Decision::Replace => {
            let replacements: Vec<String> = command
                .replacements
                .iter()
                .map(|r| {
                    let shown: Vec<&str> = r
                        .spec
                        .instance_types
                        .iter()
                        .take(SHOWN_INSTANCE_TYPES)
                        .map(String::as_str)
                        .collect();
                    let more = r
                        .spec
                        .instance_types
                        .len()
                        .saturating_sub(SHOWN_INSTANCE_TYPES);
                    let more = if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    };
                    let price = r
                        .launch_price
                        .map(|p| format!(" from {p:.4}/h"))
                        .unwrap_or_default();
                    format!(
                        "one NodeClaim of NodePool {} ({}{more}, cheapest first{price})",
                        r.spec.nodepool,
                        shown.join(", ")
                    )
                })
                .collect();
            format!(
                "{} would replace {nodes} ({why}) with {}, {saving}.",
                command.method.as_str(),
                replacements.join(" and ")
            )
        }
    }
}

/// The human-readable report.
fn write_text(
    out: &mut impl Write,
    pass: &Pass,
    outcomes: &[MethodOutcome],
    report: &Report,
    all: bool,
) -> Result<()> {
    let snapshot = &pass.snapshot;
    writeln!(
        out,
        "Disruption pass at {} ({}): {} managed node(s) in {} NodePool(s).",
        joinery_core::time::rfc3339(snapshot.now()),
        pass.now_from,
        snapshot.candidates.len(),
        snapshot.pools.len()
    )?;
    let mut entries = report.commands.iter();
    writeln!(out)?;
    writeln!(
        out,
        "{}",
        if all {
            "What each method would decide on its own:"
        } else {
            "Commands:"
        }
    )?;
    let mut any = false;
    for outcome in outcomes {
        match &outcome.command {
            Some(command) => {
                let entry = entries.next().expect("one entry per command");
                any = true;
                writeln!(out, "  {}", sentence(command, entry))?;
                if command.candidates.len() <= SHOWN_NODES {
                    writeln!(out, "      ({})", command.explanation)?;
                }
            }
            None if all => writeln!(out, "  {} would do nothing.", outcome.method.as_str())?,
            None => {}
        }
    }
    if !any {
        writeln!(
            out,
            "  Nothing to do: no node is expired, and no method found a node it may delete or replace."
        )?;
    } else if !all && outcomes.iter().skip(1).all(|o| o.command.is_none()) {
        writeln!(
            out,
            "  The disruption loop itself would start nothing (only expiration, which is forceful, acts)."
        )?;
    }
    let blocked = blocked(snapshot, outcomes);
    if !blocked.is_empty() {
        writeln!(out)?;
        writeln!(out, "Blocked:")?;
        let lines = blocked.into_iter().map(|((node, reason), by)| {
            (
                node,
                format!("may not be disrupted by {}: {reason}.", methods(&by)),
            )
        });
        for (nodes, rest) in grouped(lines) {
            writeln!(out, "  {} {rest}", capitalized(&nodes_phrase(&nodes)))?;
        }
    }
    let rejected = outcomes.iter().flat_map(|o| {
        o.rejected.iter().map(move |(claim, why)| {
            (
                node_name(snapshot, claim),
                format!(
                    "was considered by {} but not disrupted: {why}.",
                    o.method.as_str()
                ),
            )
        })
    });
    let rejected = grouped(rejected);
    if !rejected.is_empty() {
        writeln!(out)?;
        writeln!(out, "Considered, not disrupted:")?;
        for (nodes, rest) in rejected {
            writeln!(out, "  {} {rest}", capitalized(&nodes_phrase(&nodes)))?;
        }
    }
    writeln!(out)?;
    writeln!(out, "Budgets (nodes that may start disrupting now):")?;
    for (name, pool) in &snapshot.pools {
        let per_reason: Vec<String> = report
            .budgets
            .iter()
            .filter(|b| &b.node_pool == name)
            .map(|b| format!("{} {}", b.reason, b.allowed))
            .collect();
        writeln!(
            out,
            "  NodePool {name} ({} node(s)): {}",
            pool.nodes,
            per_reason.join(", ")
        )?;
        let invalid: BTreeSet<String> = BUDGET_REASONS
            .iter()
            .flat_map(|r| snapshot.allowance(name, *r).invalid)
            .collect();
        for problem in invalid {
            writeln!(out, "      an invalid budget allows nothing: {problem}")?;
        }
    }
    writeln!(out)?;
    let simulations: usize = outcomes.iter().map(|o| o.simulations).sum();
    writeln!(
        out,
        "Decided in {:.3}s ({simulations} scheduling simulation(s)); nothing was changed.",
        report.duration_seconds
    )?;
    Ok(())
}
