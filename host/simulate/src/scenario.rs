//! The scenario file: what to run, what to change over time, and what must hold.
//! It stays one file (a little over 1,000 lines) because it is the one schema of that file,
//! read top to bottom like the YAML below.
//!
//! ```yaml
//! name: quickstart
//! description: …
//! cloud:                       # optional
//!   provider: simcloud         # simcloud (default), exoscale, clevercloud or clusterapi
//!   bootDelay: 30s             # simulated (not with clevercloud or clusterapi: see their blocks)
//!   catalog: {…}             # simcloud only; default: the kwok-like catalog
//!   exoscale: {…}              # exoscale only: the fake Exoscale API's contents and faults
//!   clevercloud: {…}           # clevercloud only: the fake CKE's quota, delays and faults
//!   clusterapi: {…}            # clusterapi only: the management cluster's objects, delays and faults
//! settings: {BATCH_IDLE_DURATION: 1s}   # optional controller env settings
//! timeout: 30m                 # simulated; the whole scenario
//! manifests: [ … ]             # applied at start
//! steps:
//!   - name: scale down
//!     at: 60s                  # optional: not before this simulated time
//!     apply: [ … ]             # optional
//!     delete: [{apiVersion: apps/v1, kind: Deployment, namespace: default, name: inflate}]
//!     scale: {namespace: default, name: inflate, replicas: 0}
//!     wait: 60s                # optional: let time pass
//!     waitFor: {nodes: 0}      # optional: block until this holds…
//!     timeout: 10m             # …at most this long (default 15m)
//!     expect: {podsRunning: 0} # optional: must hold after the wait
//!     cordon: {labelSelector: …} # optional: cordon (uncordon: the same) nodes
//!     fault: {quota: 3}        # optional, simcloud only: the cloud's faults from now on
//!     nodeFault: {labelSelector: …, count: 1, fault: notReady, hardware: false}
//!                              # optional: make nodes unhealthy (NodeFaultSpec)
//! expect: {podsRunning: 0}     # must hold at the end
//! trace: day.yaml              # optional: a workload trace played first (crate::trace)
//! snapshot: cluster.yaml       # optional: the cluster's starting state (crate::snapshot)
//! sampleEvery: 5s              # optional: how often the run samples the cluster
//! ```

use std::time::Duration;

use joinery_api::duration::parse_go_duration;
use joinery_emulator::clevercloud::nodegroups::{CkeSettings, DelayRange, Usage};
use joinery_emulator::clevercloud::pricing::{PricingFailure, PricingFakeOptions};
use joinery_emulator::cloud::Catalog;
use joinery_emulator::clusterapi::{CapiSettings, DeletePolicy};
use serde::{Deserialize, Serialize};

/// The built-in quickstart scenario (`examples/scenarios/quickstart.yaml`).
pub const QUICKSTART: &str = include_str!("../../../examples/scenarios/quickstart.yaml");

/// A scenario that cannot be used; the message names the field.
#[derive(Debug, thiserror::Error)]
#[error("scenario {origin}: {message}")]
pub struct ScenarioError {
    /// Where the scenario came from (file name or `built-in quickstart`).
    pub origin: String,
    /// What is wrong, naming the field.
    pub message: String,
}

/// A parsed scenario.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    /// Short name.
    #[serde(default)]
    pub name: String,
    /// What the scenario shows.
    #[serde(default)]
    pub description: String,
    /// The simulated cloud.
    #[serde(default)]
    pub cloud: CloudSpec,
    /// Controller settings by upstream env-var name (e.g. `BATCH_IDLE_DURATION: 1s`).
    #[serde(default)]
    pub settings: std::collections::BTreeMap<String, String>,
    /// The simulated time the scenario starts at (RFC 3339, e.g. `2026-03-02T08:50:00Z`), so
    /// that cron windows of disruption budgets open at known moments; default: now.
    #[serde(default)]
    pub start_at: Option<String>,
    /// Simulated time limit for the whole scenario (Go duration; default 30m).
    #[serde(default)]
    pub timeout: Option<String>,
    /// Secrets the host can read (`name: {key: value}`), granted to every renderer — e.g. a
    /// join token for a renderer's `tokenSecret: name/key` parameter.
    #[serde(default)]
    pub secrets: std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>,
    /// Objects applied at start.
    #[serde(default)]
    pub manifests: Vec<serde_json::Value>,
    /// Timed and conditional steps, run in order.
    #[serde(default)]
    pub steps: Vec<Step>,
    /// What must hold at the end.
    #[serde(default)]
    pub expect: Option<Expectations>,
    /// A workload trace (a file, relative to the scenario's) played from the start, before
    /// the steps (see [`crate::trace`]).
    #[serde(default)]
    pub trace: Option<String>,
    /// A cluster snapshot (a file, relative to the scenario's: `kubectl get -o yaml` output,
    /// as `joinery schedule` reads) written into the cluster before the host starts (see
    /// [`crate::snapshot`]).
    #[serde(default)]
    pub snapshot: Option<String>,
    /// The snapshot, read and checked by [`Scenario::load_with`].
    #[serde(skip)]
    pub loaded_snapshot: Option<std::sync::Arc<crate::snapshot::ClusterSnapshot>>,
    /// How often the run samples the cluster (simulated Go duration; default 500ms). A
    /// day-long trace samples less often.
    #[serde(default)]
    pub sample_every: Option<String>,
}

/// The cloud providers a scenario can run.
pub const PROVIDERS: [&str; 4] = ["simcloud", "exoscale", "clevercloud", "clusterapi"];

/// The simulated cloud's settings.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CloudSpec {
    /// Which cloud runs: `simcloud` (the default), `exoscale` (the fake Exoscale API and
    /// the `exoscale` plugin), `clevercloud` (the fake CKE NodeGroup API and pricing
    /// endpoints, the `clevercloud` and `clevercloud-pricing` plugins) or `clusterapi` (a
    /// fake Cluster API management cluster and the `clusterapi` plugin).
    #[serde(default)]
    pub provider: Option<String>,
    /// Simulated boot time of an instance (Go duration; default 30s).
    #[serde(default)]
    pub boot_delay: Option<String>,
    /// The fake Exoscale API's contents and faults (`provider: exoscale` only).
    #[serde(default)]
    pub exoscale: Option<ExoscaleSpec>,
    /// The fake CKE's quota, delays and faults (`provider: clevercloud` only).
    #[serde(default)]
    pub clevercloud: Option<CleverCloudSpec>,
    /// The fake Cluster API management cluster's objects, delays and faults (`provider:
    /// clusterapi` only).
    #[serde(default)]
    pub clusterapi: Option<ClusterApiSpec>,
    /// Replaces the simulated cloud's default catalog (the instance-type catalog file format
    /// of `joinery_core::catalog`).
    #[serde(default)]
    pub catalog: Option<Catalog>,
    /// Faults injected from the start.
    #[serde(default)]
    pub faults: Option<FaultSpec>,
}

impl CloudSpec {
    /// The provider's name (`simcloud` unless set).
    pub fn provider(&self) -> &str {
        self.provider.as_deref().unwrap_or("simcloud")
    }
}

/// What the fake Exoscale API holds at start, and the faults it injects.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExoscaleSpec {
    /// Zones served; default `ch-gva-2`, `de-fra-1`, `at-vie-1`.
    #[serde(default)]
    pub zones: Option<Vec<String>>,
    /// Replaces the default instance types (Exoscale's `standard` family and a few others).
    #[serde(default)]
    pub instance_types: Option<Vec<ExoInstanceTypeSpec>>,
    /// Private templates added to the public defaults (two Ubuntu 24.04 builds, one Debian 12).
    #[serde(default)]
    pub templates: Vec<ExoTemplateSpec>,
    /// Security group names.
    #[serde(default)]
    pub security_groups: Vec<String>,
    /// Private networks.
    #[serde(default)]
    pub private_networks: Vec<ExoNetworkSpec>,
    /// Anti-affinity group names.
    #[serde(default)]
    pub anti_affinity_groups: Vec<String>,
    /// Members an anti-affinity group can hold (one per host); default 8.
    #[serde(default)]
    pub anti_affinity_ceiling: Option<usize>,
    /// SSH key names.
    #[serde(default)]
    pub ssh_keys: Vec<String>,
    /// Instances that exist before the scenario starts (e.g. orphans for garbage collection).
    #[serde(default)]
    pub instances: Vec<ExoSeedInstanceSpec>,
    /// Faults injected from the start.
    #[serde(default)]
    pub faults: Option<ExoFaultSpec>,
}

/// An instance type of the fake Exoscale API.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExoInstanceTypeSpec {
    /// Family, e.g. `standard`.
    pub family: String,
    /// Size, e.g. `medium`.
    pub size: String,
    /// vCPUs.
    pub cpus: u32,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// GPUs (default 0).
    #[serde(default)]
    pub gpus: u32,
    /// Whether the organisation may launch it (default true).
    #[serde(default)]
    pub authorized: Option<bool>,
    /// Zones it is offered in (default every zone).
    #[serde(default)]
    pub zones: Option<Vec<String>>,
}

/// A private template added in some zones.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExoTemplateSpec {
    /// Name.
    pub name: String,
    /// Build (default `1`).
    #[serde(default)]
    pub build: Option<String>,
    /// Size in GiB (default 10).
    #[serde(default)]
    pub size_gib: Option<u64>,
    /// Zones (default every zone).
    #[serde(default)]
    pub zones: Option<Vec<String>>,
}

/// A private network in one zone.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExoNetworkSpec {
    /// Zone.
    pub zone: String,
    /// Name.
    pub name: String,
    /// Exoscale labels.
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
}

/// An instance that exists before the scenario starts.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExoSeedInstanceSpec {
    /// Zone.
    pub zone: String,
    /// `<family>.<size>` (default `standard.small`).
    #[serde(default)]
    pub instance_type: Option<String>,
    /// Whether it carries this cluster's `karpenter-sh_managed-by` label (as an instance a
    /// previous controller launched would).
    #[serde(default)]
    pub managed: bool,
    /// Other Exoscale labels.
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
}

/// Faults of the fake Exoscale API (see `joinery_emulator::exoscale::ExoFaults`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExoFaultSpec {
    /// Fraction (0–1) of calls answered 500.
    #[serde(default)]
    pub error_rate: Option<f64>,
    /// Fraction (0–1) of calls answered 429 with `Retry-After`.
    #[serde(default)]
    pub throttle_rate: Option<f64>,
    /// The `Retry-After` of throttled calls (Go duration; default 1s).
    #[serde(default)]
    pub retry_after: Option<String>,
    /// The next N creates make the instance, then their operation fails.
    #[serde(default)]
    pub fail_after_create: Option<u32>,
    /// The next N private-network attachments fail.
    #[serde(default)]
    pub fail_attach: Option<u32>,
    /// Most instances the organisation may have.
    #[serde(default)]
    pub instance_quota: Option<usize>,
    /// Offerings out of capacity (`instanceType` and `zone`, each may be `*`).
    #[serde(default)]
    pub insufficient_capacity: Vec<OfferingSpec>,
    /// Error bodies as RFC 9457 problem details instead of `{"message"}`.
    #[serde(default)]
    pub problem_details: bool,
}

/// The fake Clever Cloud Kubernetes Engine (`provider: clevercloud`): its NodeGroup
/// operator's quota, delays and faults, and its pricing endpoints. Every field is optional;
/// durations are Go durations of simulated time. See `joinery_emulator::clevercloud`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CleverCloudSpec {
    /// The organisation's quota (default 40 vCPU, 40 GB), control plane included.
    #[serde(default)]
    pub quota: Option<UsageSpec>,
    /// What the control plane uses of the quota (default 24 vCPU, 24 GB).
    #[serde(default)]
    pub control_plane: Option<UsageSpec>,
    /// From a NodeGroup's creation to its acceptance (default 1s).
    #[serde(default)]
    pub acceptance_delay: Option<String>,
    /// From a NodeGroup's creation to its quota refusal showing (default 1s–3s).
    #[serde(default)]
    pub rejection_delay: Option<DelaySpec>,
    /// From acceptance to the node registering (default 26s–60s).
    #[serde(default)]
    pub boot_delay: Option<DelaySpec>,
    /// From deletion to the machine terminating (default 30s–40s).
    #[serde(default)]
    pub teardown_delay: Option<DelaySpec>,
    /// A refused NodeGroup keeps holding its quota this long after its deletion (default:
    /// not at all).
    #[serde(default)]
    pub reservation_leak: Option<String>,
    /// NodeGroups deleted upstream soon after they were accepted: a list of names, or the
    /// chance (0–1) that any accepted group is (default none).
    #[serde(default)]
    pub vanish: Option<VanishSpec>,
    /// From acceptance to a vanishing group's deletion (default 3s).
    #[serde(default)]
    pub vanish_after: Option<String>,
    /// Seed of the fake's random draws (delays, vanishing).
    #[serde(default)]
    pub seed: Option<u64>,
    /// The pricing endpoints.
    #[serde(default)]
    pub pricing: Option<CleverPricingSpec>,
}

/// An amount of quota.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UsageSpec {
    /// vCPUs (default: the default's).
    #[serde(default)]
    pub vcpu: Option<u32>,
    /// RAM in GB (default: the default's).
    #[serde(default, rename = "memoryGB")]
    pub memory_gb: Option<f64>,
}

/// A delay: one duration (`45s`), or drawn uniformly from a range (`{min: 26s, max: 60s}`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum DelaySpec {
    /// Always this long.
    Fixed(String),
    /// Uniformly between two durations.
    Range(DelayRangeSpec),
}

/// The bounds of a [`DelaySpec::Range`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DelayRangeSpec {
    /// Shortest.
    pub min: String,
    /// Longest.
    pub max: String,
}

/// Which accepted NodeGroups vanish: these names, or each with this probability.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum VanishSpec {
    /// NodeGroups of these names.
    Names(Vec<String>),
    /// Any accepted NodeGroup, with this chance (0–1).
    Probability(f64),
}

/// The fake pricing endpoints' rates and failure mode.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CleverPricingSpec {
    /// EUR per vCPU-hour (default Clever Cloud's, 0.00277777777).
    #[serde(default)]
    pub vcpu_rate: Option<f64>,
    /// EUR per GB-hour of RAM (default Clever Cloud's, 0.00555555555).
    #[serde(default, rename = "ramRatePerGB")]
    pub ram_rate_per_gb: Option<f64>,
    /// How the endpoints misbehave: `none` (default), `serverError`, `malformedJson`,
    /// `wrongCurrency`, `wrongUnit`, `tieredPlans` or `hugeBody`.
    #[serde(default)]
    pub failure: Option<String>,
}

impl CleverCloudSpec {
    /// The fake's settings with the defaults for what the block leaves out, and the pricing
    /// fake's options; errors name the field (under `cloud.clevercloud`).
    pub fn settings(
        &self,
        origin: &str,
    ) -> Result<(CkeSettings, PricingFakeOptions), ScenarioError> {
        let err = |field: &str, message: String| ScenarioError {
            origin: origin.to_string(),
            message: format!("cloud.clevercloud.{field}: {message}"),
        };
        let defaults = CkeSettings::default();
        let usage = |spec: &Option<UsageSpec>,
                     field: &str,
                     default: Usage|
         -> Result<Usage, ScenarioError> {
            let Some(spec) = spec else { return Ok(default) };
            let memory_gb = spec.memory_gb.unwrap_or(default.memory_gb);
            if !memory_gb.is_finite() || memory_gb < 0.0 {
                return Err(err(
                    &format!("{field}.memoryGB"),
                    format!("{memory_gb} is not a non-negative number of GB"),
                ));
            }
            Ok(Usage::new(spec.vcpu.unwrap_or(default.vcpu), memory_gb))
        };
        let duration = |value: &Option<String>, field: &str, default: Duration| {
            duration_field(
                value.as_deref(),
                &format!("cloud.clevercloud.{field}"),
                default,
                origin,
            )
        };
        let delay = |spec: &Option<DelaySpec>,
                     field: &str,
                     default: DelayRange|
         -> Result<DelayRange, ScenarioError> {
            match spec {
                None => Ok(default),
                Some(DelaySpec::Fixed(d)) => Ok(DelayRange::fixed(duration(
                    &Some(d.clone()),
                    field,
                    Duration::ZERO,
                )?)),
                Some(DelaySpec::Range(r)) => {
                    let min = duration(
                        &Some(r.min.clone()),
                        &format!("{field}.min"),
                        Duration::ZERO,
                    )?;
                    let max = duration(
                        &Some(r.max.clone()),
                        &format!("{field}.max"),
                        Duration::ZERO,
                    )?;
                    if max < min {
                        return Err(err(
                            &format!("{field}.max"),
                            format!("{} is shorter than min {}", r.max, r.min),
                        ));
                    }
                    Ok(DelayRange { min, max })
                }
            }
        };
        let (vanish_names, vanish_probability) = match &self.vanish {
            None => (Default::default(), 0.0),
            Some(VanishSpec::Names(names)) => (names.iter().cloned().collect(), 0.0),
            Some(VanishSpec::Probability(p)) if (0.0..=1.0).contains(p) => (Default::default(), *p),
            Some(VanishSpec::Probability(p)) => {
                return Err(err(
                    "vanish",
                    format!(
                        "{p} is not a probability between 0 and 1 (or give a list of NodeGroup names)"
                    ),
                ));
            }
        };
        let settings = CkeSettings {
            quota: usage(&self.quota, "quota", defaults.quota)?,
            control_plane: usage(&self.control_plane, "controlPlane", defaults.control_plane)?,
            acceptance_delay: duration(
                &self.acceptance_delay,
                "acceptanceDelay",
                defaults.acceptance_delay,
            )?,
            rejection_delay: delay(
                &self.rejection_delay,
                "rejectionDelay",
                defaults.rejection_delay,
            )?,
            boot_delay: delay(&self.boot_delay, "bootDelay", defaults.boot_delay)?,
            teardown_delay: delay(
                &self.teardown_delay,
                "teardownDelay",
                defaults.teardown_delay,
            )?,
            reservation_leak: self
                .reservation_leak
                .as_ref()
                .map(|_| duration(&self.reservation_leak, "reservationLeak", Duration::ZERO))
                .transpose()?,
            vanish_names,
            vanish_probability,
            vanish_after: duration(&self.vanish_after, "vanishAfter", defaults.vanish_after)?,
            seed: self.seed.unwrap_or(defaults.seed),
            ..defaults
        };
        let mut pricing = PricingFakeOptions::default();
        if let Some(p) = &self.pricing {
            for (field, rate, target) in [
                ("pricing.vcpuRate", p.vcpu_rate, &mut pricing.vcpu_rate),
                (
                    "pricing.ramRatePerGB",
                    p.ram_rate_per_gb,
                    &mut pricing.ram_rate_per_gb,
                ),
            ] {
                if let Some(rate) = rate {
                    if !rate.is_finite() || rate <= 0.0 {
                        return Err(err(field, format!("{rate} is not a positive price")));
                    }
                    *target = rate;
                }
            }
            if let Some(failure) = &p.failure {
                pricing.failure = serde_json::from_value::<PricingFailure>(serde_json::Value::String(failure.clone())).map_err(|_| {
                    err(
                        "pricing.failure",
                        format!("unknown failure {failure:?}; use none, serverError, malformedJson, wrongCurrency, wrongUnit, tieredPlans or hugeBody"),
                    )
                })?;
            }
        }
        Ok((settings, pricing))
    }
}

/// The fake Cluster API management cluster (`provider: clusterapi`): what it holds at start
/// and how its controllers behave. Every field is optional; durations are Go durations of
/// simulated time, a delay one duration or `{min, max}`. See `joinery_emulator::clusterapi`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterApiSpec {
    /// The `clusterName` the `clusterapi` plugin is configured with (default: the host's
    /// cluster name); the MachineDeployments' `spec.clusterName` should match it.
    #[serde(default)]
    pub cluster_name: Option<String>,
    /// Objects applied to the management cluster at start (MachineDeployments, typically
    /// with `replicas: 0`, the `node.cluster.x-k8s.io/karpenter-member: ""` label and the
    /// `capacity.cluster-autoscaler.kubernetes.io/*` annotations).
    #[serde(default)]
    pub manifests: Vec<serde_json::Value>,
    /// From a Machine's creation to its providerID (default 10s–20s).
    #[serde(default)]
    pub provision_delay: Option<DelaySpec>,
    /// From the providerID to the Node registering (default 40s–60s).
    #[serde(default)]
    pub boot_delay: Option<DelaySpec>,
    /// From a Machine's deletion to its machine terminating (default 10s–20s).
    #[serde(default)]
    pub teardown_delay: Option<DelaySpec>,
    /// The delete policy of MachineDeployments that name none: `Random` (default), `Oldest`
    /// or `Newest`.
    #[serde(default)]
    pub delete_policy: Option<String>,
    /// Machines that never get a providerID: Machine-name prefixes or MachineDeployment
    /// names, or the chance (0–1) that any Machine does not (default none).
    #[serde(default)]
    pub never_provision: Option<NeverProvisionSpec>,
    /// How long after its creation a never-provisioned Machine gets `failureReason` and
    /// `failureMessage` (default: never).
    #[serde(default)]
    pub fail_after: Option<String>,
    /// Taints every Node registers with besides its MachineDeployment's, as `key=value:Effect`
    /// or `key:Effect` (default `[karpenter.sh/unregistered:NoExecute]`; `[]` for none).
    #[serde(default)]
    pub registration_taints: Option<Vec<String>>,
    /// Seed of the fake's random draws (names, delays, never-provisioned Machines).
    #[serde(default)]
    pub seed: Option<u64>,
}

/// Which Machines never get a providerID: these prefixes or MD names, or each with a chance.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
pub enum NeverProvisionSpec {
    /// Machine-name prefixes or MachineDeployment names.
    Names(Vec<String>),
    /// Any Machine, with this chance (0–1).
    Probability(f64),
}

/// A delay field: one duration, or a range whose max is not below its min; errors name
/// `field` (a full path such as `cloud.clusterapi.bootDelay`).
fn delay_range(
    spec: &Option<DelaySpec>,
    field: &str,
    default: DelayRange,
    origin: &str,
) -> Result<DelayRange, ScenarioError> {
    match spec {
        None => Ok(default),
        Some(DelaySpec::Fixed(d)) => Ok(DelayRange::fixed(duration_field(
            Some(d),
            field,
            Duration::ZERO,
            origin,
        )?)),
        Some(DelaySpec::Range(r)) => {
            let min = duration_field(
                Some(&r.min),
                &format!("{field}.min"),
                Duration::ZERO,
                origin,
            )?;
            let max = duration_field(
                Some(&r.max),
                &format!("{field}.max"),
                Duration::ZERO,
                origin,
            )?;
            if max < min {
                return Err(ScenarioError {
                    origin: origin.to_string(),
                    message: format!("{field}.max: {} is shorter than min {}", r.max, r.min),
                });
            }
            Ok(DelayRange { min, max })
        }
    }
}

impl ClusterApiSpec {
    /// The fake's settings with the defaults for what the block leaves out; errors name the
    /// field (under `cloud.clusterapi`), the manifests included.
    pub fn settings(&self, origin: &str) -> Result<CapiSettings, ScenarioError> {
        let err = |field: &str, message: String| ScenarioError {
            origin: origin.to_string(),
            message: format!("cloud.clusterapi.{field}: {message}"),
        };
        for (i, m) in self.manifests.iter().enumerate() {
            check_manifest(m, &format!("cloud.clusterapi.manifests[{i}]"), origin)?;
        }
        if self.cluster_name.as_deref().is_some_and(str::is_empty) {
            return Err(err("clusterName", "must not be empty".into()));
        }
        let defaults = CapiSettings::default();
        let delay = |spec: &Option<DelaySpec>, field: &str, default: DelayRange| {
            delay_range(spec, &format!("cloud.clusterapi.{field}"), default, origin)
        };
        let delete_policy = match &self.delete_policy {
            None => defaults.delete_policy,
            Some(text) => DeletePolicy::parse(text).ok_or_else(|| {
                err(
                    "deletePolicy",
                    format!("unknown policy {text:?}; use Random, Oldest or Newest"),
                )
            })?,
        };
        let (never_provision, never_provision_probability) = match &self.never_provision {
            None => (Default::default(), 0.0),
            Some(NeverProvisionSpec::Names(names)) => {
                if let Some(i) = names.iter().position(|n| n.is_empty()) {
                    return Err(err(
                        &format!("neverProvision[{i}]"),
                        "must not be empty (it would match every Machine)".into(),
                    ));
                }
                (names.iter().cloned().collect(), 0.0)
            }
            Some(NeverProvisionSpec::Probability(p)) if (0.0..=1.0).contains(p) => {
                (Default::default(), *p)
            }
            Some(NeverProvisionSpec::Probability(p)) => {
                return Err(err(
                    "neverProvision",
                    format!(
                        "{p} is not a probability between 0 and 1 (or give a list of Machine-name prefixes or MachineDeployment names)"
                    ),
                ));
            }
        };
        let fail_after = self
            .fail_after
            .as_ref()
            .map(|d| {
                duration_field(
                    Some(d),
                    "cloud.clusterapi.failAfter",
                    Duration::ZERO,
                    origin,
                )
            })
            .transpose()?;
        let registration_taints = match &self.registration_taints {
            None => defaults.registration_taints.clone(),
            Some(texts) => texts
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    joinery_emulator::clusterapi::parse_taint(t)
                        .map_err(|e| err(&format!("registrationTaints[{i}]"), e))
                })
                .collect::<Result<_, _>>()?,
        };
        Ok(CapiSettings {
            provision_delay: delay(
                &self.provision_delay,
                "provisionDelay",
                defaults.provision_delay,
            )?,
            boot_delay: delay(&self.boot_delay, "bootDelay", defaults.boot_delay)?,
            teardown_delay: delay(
                &self.teardown_delay,
                "teardownDelay",
                defaults.teardown_delay,
            )?,
            delete_policy,
            never_provision,
            never_provision_probability,
            fail_after,
            registration_taints,
            seed: self.seed.unwrap_or(defaults.seed),
            ..defaults
        })
    }
}

/// Faults the simulated cloud injects (see `joinery_emulator::cloud::CloudFaults`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultSpec {
    /// Offerings that are out of capacity (each field may be `*`).
    #[serde(default)]
    pub insufficient_capacity: Vec<OfferingSpec>,
    /// Most instances alive at once.
    #[serde(default)]
    pub quota: Option<usize>,
    /// The next N creates make the instance, then answer 500.
    #[serde(default)]
    pub fail_after_create: Option<u32>,
}

/// An offering; any field may be `*`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OfferingSpec {
    /// Instance type.
    #[serde(default = "any")]
    pub instance_type: String,
    /// Zone.
    #[serde(default = "any")]
    pub zone: String,
    /// Capacity type.
    #[serde(default = "any")]
    pub capacity_type: String,
}

fn any() -> String {
    "*".into()
}

/// One step.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Step {
    /// Label used in the timeline and in failures.
    #[serde(default)]
    pub name: Option<String>,
    /// Do not start before this simulated time (since the scenario started).
    #[serde(default)]
    pub at: Option<String>,
    /// Objects to create or update.
    #[serde(default)]
    pub apply: Vec<serde_json::Value>,
    /// Objects to delete.
    #[serde(default)]
    pub delete: Vec<ObjectRef>,
    /// A Deployment to scale.
    #[serde(default)]
    pub scale: Option<Scale>,
    /// Let this much simulated time pass after the step's actions (before `waitFor`).
    #[serde(default)]
    pub wait: Option<String>,
    /// Block until these hold.
    #[serde(default)]
    pub wait_for: Option<Expectations>,
    /// Limit of the wait (Go duration; default 15m).
    #[serde(default)]
    pub timeout: Option<String>,
    /// Checked after the wait.
    #[serde(default)]
    pub expect: Option<Expectations>,
    /// Nodes to cordon (`spec.unschedulable: true`).
    #[serde(default)]
    pub cordon: Option<NodeTarget>,
    /// Nodes to uncordon.
    #[serde(default)]
    pub uncordon: Option<NodeTarget>,
    /// The simulated cloud's faults from now on, replacing those before (simcloud only).
    #[serde(default)]
    pub fault: Option<FaultSpec>,
    /// Nodes to make unhealthy (any cloud).
    #[serde(default)]
    pub node_fault: Option<NodeFaultSpec>,
}

/// Nodes the physics makes unhealthy: the first `count` (by name) of those named or matching
/// a label selector.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeFaultSpec {
    /// A node's name; or give `labelSelector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Label selector (e.g. `topology.kubernetes.io/zone=test-zone-a`), instead of a name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
    /// At most this many of the matching nodes, by name (default: all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<usize>,
    /// `notReady` (Ready=False), `unknown` (Ready=Unknown), `kubeletDies` (the kubelet stops;
    /// Ready=Unknown after the node monitor grace period), `memoryPressure`, `diskPressure`,
    /// `pidPressure` or `networkUnavailable` (that condition True).
    pub fault: String,
    /// The fault survives a reboot of the machine (default false: a reboot clears it).
    #[serde(default)]
    pub hardware: bool,
}

impl NodeFaultSpec {
    /// The physics' fault, or what the field accepts.
    pub fn fault(&self) -> Result<joinery_emulator::physics::NodeFault, String> {
        use joinery_emulator::physics::NodeFault;
        Ok(match self.fault.as_str() {
            "notReady" => NodeFault::NotReady,
            "unknown" => NodeFault::Unknown,
            "kubeletDies" => NodeFault::KubeletDies,
            "memoryPressure" => NodeFault::Condition("MemoryPressure".into()),
            "diskPressure" => NodeFault::Condition("DiskPressure".into()),
            "pidPressure" => NodeFault::Condition("PIDPressure".into()),
            "networkUnavailable" => NodeFault::Condition("NetworkUnavailable".into()),
            other => {
                return Err(format!(
                    "unknown fault {other:?}; use notReady, unknown, kubeletDies, memoryPressure, diskPressure, pidPressure or networkUnavailable"
                ));
            }
        })
    }
}

/// Nodes named, or matching a label selector.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeTarget {
    /// A node's name; or give `labelSelector`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Label selector (e.g. `karpenter.sh/nodepool=default`), instead of a name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
}

/// An object to delete.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ObjectRef {
    /// e.g. `apps/v1`.
    pub api_version: String,
    /// e.g. `Deployment`.
    pub kind: String,
    /// Namespace (namespaced kinds; default `default`).
    #[serde(default)]
    pub namespace: Option<String>,
    /// Name; or give `labelSelector` to delete every match.
    #[serde(default)]
    pub name: Option<String>,
    /// Label selector (e.g. `karpenter.sh/nodepool=default`), instead of a name.
    #[serde(default)]
    pub label_selector: Option<String>,
}

/// A Deployment scale change.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scale {
    /// Namespace (default `default`).
    #[serde(default)]
    pub namespace: Option<String>,
    /// Deployment name.
    pub name: String,
    /// New replica count.
    pub replicas: i32,
}

/// Conditions on the cluster and the run so far. Every field set must hold.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Expectations {
    /// Exactly this many workload (non-DaemonSet) pods Running.
    #[serde(default)]
    pub pods_running: Option<usize>,
    /// Exactly this many workload pods not Running.
    #[serde(default)]
    pub pods_pending: Option<usize>,
    /// Exactly this many workload pods the scheduler marked `PodScheduled=False` with reason
    /// `Unschedulable`: the pods Karpenter acts on. Waiting for it (rather than for
    /// `podsPending`) before a NodePool arrives lets one provisioning batch see them all.
    #[serde(default)]
    pub pods_unschedulable: Option<usize>,
    /// Every workload pod Running (and at least one exists).
    #[serde(default)]
    pub all_pods_running: Option<bool>,
    /// Every workload pod became Running no later than this (Go duration of simulated time
    /// since the scenario started; the report's `timings.allPodsRunningSeconds`): the
    /// time-to-running of a scale-out.
    #[serde(default)]
    pub all_pods_running_within: Option<String>,
    /// Exactly this many Nodes.
    #[serde(default)]
    pub nodes: Option<usize>,
    /// At most this many Nodes.
    #[serde(default)]
    pub nodes_at_most: Option<usize>,
    /// Exactly this many NodeClaims exist (deleted ones whose finalizer is done are gone).
    #[serde(default)]
    pub node_claims: Option<usize>,
    /// The peak Node count so far is at most this.
    #[serde(default)]
    pub peak_nodes_at_most: Option<usize>,
    /// At most this many NodeClaims created so far.
    #[serde(default)]
    pub node_claims_created_at_most: Option<usize>,
    /// At least this many NodeClaims created so far (a replacement happened).
    #[serde(default)]
    pub node_claims_created_at_least: Option<usize>,
    /// Live nodes span at least this many zones.
    #[serde(default)]
    pub zones_at_least: Option<usize>,
    /// Every instance launched so far has one of these types.
    #[serde(default)]
    pub instance_types: Option<Vec<String>>,
    /// The hourly price of the live instances is at most this.
    #[serde(default)]
    pub cost_per_hour_at_most: Option<f64>,
    /// Exactly this many instances exist in the cloud now (not being deleted), whether or not
    /// a NodeClaim owns them: a leak shows here.
    #[serde(default)]
    pub cloud_instances: Option<usize>,
    /// Events with each of these reasons were recorded so far, on any object (e.g.
    /// `NodeGroupQuotaExceeded`, `InsufficientCapacityError`).
    #[serde(default)]
    pub event_reasons: Option<Vec<String>>,
    /// CapacityBuffers' conditions now: `namespace/name` → condition type → status (`True`,
    /// `False`), e.g. `{default/spare: {LimitedByQuotas: "True"}}`.
    #[serde(default)]
    pub capacity_buffer_conditions:
        Option<std::collections::BTreeMap<String, std::collections::BTreeMap<String, String>>>,
}

/// Parses a Go duration field, naming it on error.
pub fn duration_field(
    value: Option<&str>,
    field: &str,
    default: Duration,
    origin: &str,
) -> Result<Duration, ScenarioError> {
    match value {
        None => Ok(default),
        Some(v) => parse_go_duration(v).map_err(|e| ScenarioError {
            origin: origin.to_string(),
            message: format!("{field}: {v:?} is not a duration ({e}); use e.g. 30s, 10m"),
        }),
    }
}

impl Scenario {
    /// Parses and checks a scenario; errors name the field.
    pub fn parse(text: &str, origin: &str) -> Result<Scenario, ScenarioError> {
        let scenario: Scenario = serde_norway::from_str(text).map_err(|e| ScenarioError {
            origin: origin.to_string(),
            message: match e.location() {
                Some(l) => format!("line {}, column {}: {e}", l.line(), l.column()),
                None => e.to_string(),
            },
        })?;
        scenario.check(origin)?;
        Ok(scenario)
    }

    fn check(&self, origin: &str) -> Result<(), ScenarioError> {
        let err = |message: String| ScenarioError {
            origin: origin.to_string(),
            message,
        };
        self.start_at().map_err(|e| err(e.message))?;
        let provider = self.cloud.provider();
        if !PROVIDERS.contains(&provider) {
            return Err(err(format!(
                "cloud.provider: unknown provider {provider:?}; use one of {}",
                PROVIDERS.join(", ")
            )));
        }
        if provider != "simcloud" {
            for (field, set) in [
                ("cloud.catalog", self.cloud.catalog.is_some()),
                ("cloud.faults", self.cloud.faults.is_some()),
            ] {
                if set {
                    return Err(err(format!(
                        "{field}: only for provider simcloud; with {provider} use cloud.{provider}"
                    )));
                }
            }
        }
        if provider != "exoscale" && self.cloud.exoscale.is_some() {
            return Err(err(
                "cloud.exoscale: only for provider exoscale; set cloud.provider: exoscale".into(),
            ));
        }
        if provider != "clevercloud" && self.cloud.clevercloud.is_some() {
            return Err(err(
                "cloud.clevercloud: only for provider clevercloud; set cloud.provider: clevercloud"
                    .into(),
            ));
        }
        if provider == "clevercloud" && self.cloud.boot_delay.is_some() {
            return Err(err(
                "cloud.bootDelay: not for provider clevercloud; use cloud.clevercloud.bootDelay"
                    .into(),
            ));
        }
        if let Some(spec) = &self.cloud.clevercloud {
            spec.settings(origin)?;
        }
        if provider != "clusterapi" && self.cloud.clusterapi.is_some() {
            return Err(err(
                "cloud.clusterapi: only for provider clusterapi; set cloud.provider: clusterapi"
                    .into(),
            ));
        }
        if provider == "clusterapi" && self.cloud.boot_delay.is_some() {
            return Err(err(
                "cloud.bootDelay: not for provider clusterapi; use cloud.clusterapi.bootDelay"
                    .into(),
            ));
        }
        if let Some(spec) = &self.cloud.clusterapi {
            spec.settings(origin)?;
        }
        if let Some(f) = self.cloud.exoscale.as_ref().and_then(|e| e.faults.as_ref()) {
            duration_field(
                f.retry_after.as_deref(),
                "cloud.exoscale.faults.retryAfter",
                Duration::ZERO,
                origin,
            )?;
            for (field, rate) in [
                ("errorRate", f.error_rate),
                ("throttleRate", f.throttle_rate),
            ] {
                if rate.is_some_and(|r| !(0.0..=1.0).contains(&r)) {
                    return Err(err(format!(
                        "cloud.exoscale.faults.{field}: must be between 0 and 1"
                    )));
                }
            }
        }
        duration_field(self.timeout.as_deref(), "timeout", Duration::ZERO, origin)?;
        if duration_field(
            self.sample_every.as_deref(),
            "sampleEvery",
            Duration::from_millis(500),
            origin,
        )?
        .is_zero()
        {
            return Err(err("sampleEvery: must be longer than zero".into()));
        }
        duration_field(
            self.cloud.boot_delay.as_deref(),
            "cloud.bootDelay",
            Duration::ZERO,
            origin,
        )?;
        for (i, m) in self.manifests.iter().enumerate() {
            check_manifest(m, &format!("manifests[{i}]"), origin)?;
        }
        if let Some(expect) = &self.expect {
            duration_field(
                expect.all_pods_running_within.as_deref(),
                "expect.allPodsRunningWithin",
                Duration::ZERO,
                origin,
            )?;
        }
        for (i, s) in self.steps.iter().enumerate() {
            duration_field(
                s.at.as_deref(),
                &format!("steps[{i}].at"),
                Duration::ZERO,
                origin,
            )?;
            for (field, expect) in [("expect", &s.expect), ("waitFor", &s.wait_for)] {
                if let Some(expect) = expect {
                    let name = format!("steps[{i}].{field}.allPodsRunningWithin");
                    duration_field(
                        expect.all_pods_running_within.as_deref(),
                        &name,
                        Duration::ZERO,
                        origin,
                    )?;
                }
            }
            duration_field(
                s.timeout.as_deref(),
                &format!("steps[{i}].timeout"),
                Duration::ZERO,
                origin,
            )?;
            duration_field(
                s.wait.as_deref(),
                &format!("steps[{i}].wait"),
                Duration::ZERO,
                origin,
            )?;
            for (j, m) in s.apply.iter().enumerate() {
                check_manifest(m, &format!("steps[{i}].apply[{j}]"), origin)?;
            }
            for (j, d) in s.delete.iter().enumerate() {
                if d.name.is_some() == d.label_selector.is_some() {
                    return Err(ScenarioError {
                        origin: origin.to_string(),
                        message: format!(
                            "steps[{i}].delete[{j}]: give exactly one of name and labelSelector"
                        ),
                    });
                }
            }
            if let Some(f) = &s.node_fault {
                let err = |message: String| ScenarioError {
                    origin: origin.to_string(),
                    message: format!("steps[{i}].nodeFault: {message}"),
                };
                if f.name.is_some() == f.label_selector.is_some() {
                    return Err(err("give exactly one of name and labelSelector".into()));
                }
                f.fault().map_err(|m| err(format!("fault: {m}")))?;
            }
            for (field, target) in [("cordon", &s.cordon), ("uncordon", &s.uncordon)] {
                if target
                    .as_ref()
                    .is_some_and(|t| t.name.is_some() == t.label_selector.is_some())
                {
                    return Err(err(format!(
                        "steps[{i}].{field}: give exactly one of name and labelSelector"
                    )));
                }
            }
            if s.fault.is_some() && provider != "simcloud" {
                return Err(err(format!(
                    "steps[{i}].fault: only for provider simcloud; with {provider} use cloud.{provider}"
                )));
            }
        }
        Ok(())
    }

    /// `startAt` as a time; the error names the field.
    pub fn start_at(&self) -> Result<Option<std::time::SystemTime>, ScenarioError> {
        let Some(text) = &self.start_at else {
            return Ok(None);
        };
        let at: k8s_openapi::jiff::Timestamp = text.parse().map_err(|e| ScenarioError {
            origin: self.name.clone(),
            message: format!(
                "startAt: {text:?} is not an RFC 3339 time such as 2026-03-02T08:50:00Z: {e}"
            ),
        })?;
        Ok(Some(std::time::SystemTime::from(at)))
    }

    /// Whether an expectation (of a step or the final one) names event reasons, so the
    /// run must record them.
    pub fn expects_events(&self) -> bool {
        self.steps
            .iter()
            .filter_map(|s| s.expect.as_ref())
            .chain(self.expect.as_ref())
            .any(|e| e.event_reasons.is_some())
    }

    /// Whether the run must watch CapacityBuffers: a manifest or step applies one, or an
    /// expectation names their conditions.
    pub fn watches_buffers(&self) -> bool {
        let applies = |m: &serde_json::Value| m["kind"] == "CapacityBuffer";
        self.manifests.iter().any(applies)
            || self.steps.iter().flat_map(|s| &s.apply).any(applies)
            || self
                .steps
                .iter()
                .filter_map(|s| s.expect.as_ref().or(s.wait_for.as_ref()))
                .chain(self.expect.as_ref())
                .any(|e| e.capacity_buffer_conditions.is_some())
    }

    /// How often the run samples the cluster (default 500 ms).
    pub fn sample_every(&self) -> Duration {
        duration_field(
            self.sample_every.as_deref(),
            "sampleEvery",
            Duration::from_millis(500),
            "",
        )
        .unwrap_or(Duration::from_millis(500))
    }

    /// The scenario's simulated time limit (default 30 minutes).
    pub fn timeout(&self) -> Duration {
        duration_field(
            self.timeout.as_deref(),
            "timeout",
            Duration::from_secs(1800),
            "",
        )
        .unwrap_or(Duration::from_secs(1800))
    }
}

fn check_manifest(m: &serde_json::Value, field: &str, origin: &str) -> Result<(), ScenarioError> {
    let err = |message: String| ScenarioError {
        origin: origin.to_string(),
        message,
    };
    if !m.is_object() {
        return Err(err(format!("{field}: must be a Kubernetes object (a map)")));
    }
    for key in ["apiVersion", "kind"] {
        if m.get(key)
            .and_then(|v| v.as_str())
            .is_none_or(str::is_empty)
        {
            return Err(err(format!("{field}.{key}: missing")));
        }
    }
    if m.pointer("/metadata/name")
        .and_then(|v| v.as_str())
        .is_none_or(str::is_empty)
    {
        return Err(err(format!("{field}.metadata.name: missing")));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
