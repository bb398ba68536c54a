//! The fake Exoscale API: its start-up with a scenario's zones, instance types, templates
//! and faults, its seeding, and where the `exoscale` plugin is granted to find it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use joinery_core::clock::Clock;
use joinery_emulator::exoscale::{ExoFake, ExoFakeOptions};

use crate::error::SimulateError;
use crate::scenario::{self, ExoscaleSpec, ScenarioError};

/// The secret the `exoscale` plugin reads its API key from in a simulation.
pub const EXOSCALE_SECRET: &str = "exoscale-credentials";

/// Where the `exoscale` plugin finds the fake Exoscale API.
#[derive(Debug, Clone)]
pub struct ExoscaleGrant {
    /// The fake's base URL (`http://127.0.0.1:<port>`): the only address granted.
    pub url: String,
    /// The per-zone endpoint pattern (`http://127.0.0.1:<port>/{zone}/v2`).
    pub endpoint: String,
    /// The cluster's zone.
    pub zone: String,
}

const MIB: u64 = 1 << 20;

/// Starts the fake Exoscale API with a scenario's zones, instance types, templates and faults.
pub(crate) async fn start_exoscale(
    spec: &ExoscaleSpec,
    clock: Arc<Clock>,
    boot_delay: Duration,
    journal: Option<PathBuf>,
    network: &joinery_emulator::network::Network,
) -> Result<ExoFake, SimulateError> {
    use joinery_emulator::exoscale::{
        ErrorShape, ExoInstanceType, ExoTemplate, GIB, Visibility, default_instance_types,
        default_templates, stable_uuid,
    };
    let defaults = ExoFakeOptions::default();
    let zones = spec
        .zones
        .clone()
        .filter(|z| !z.is_empty())
        .unwrap_or(defaults.zones.clone());
    let instance_types = match &spec.instance_types {
        None => default_instance_types(&zones),
        Some(types) => types
            .iter()
            .map(|t| ExoInstanceType {
                id: stable_uuid(&format!("instance-type/{}.{}", t.family, t.size)),
                family: t.family.clone(),
                size: t.size.clone(),
                cpus: t.cpus,
                gpus: t.gpus,
                memory: t.memory_mib * MIB,
                authorized: t.authorized.unwrap_or(true),
                zones: t.zones.clone().unwrap_or_else(|| zones.clone()),
            })
            .collect(),
    };
    let mut templates = default_templates(&zones);
    for t in &spec.templates {
        for zone in t.zones.clone().unwrap_or_else(|| zones.clone()) {
            let build = t.build.clone().unwrap_or_else(|| "1".into());
            templates.push(ExoTemplate {
                id: stable_uuid(&format!("template/{zone}/{}/{build}", t.name)),
                zone,
                name: t.name.clone(),
                visibility: Visibility::Private,
                build,
                version: String::new(),
                size: t.size_gib.unwrap_or(10) * GIB,
                created_at: "2026-01-01T00:00:00Z".into(),
                family: "other".into(),
                default_user: "root".into(),
            });
        }
    }
    let faults = joinery_emulator::exoscale::ExoFaults::default();
    if let Some(f) = &spec.faults {
        let retry_after = scenario::duration_field(
            f.retry_after.as_deref(),
            "cloud.exoscale.faults.retryAfter",
            Duration::from_secs(1),
            "scenario",
        )?;
        if let Some(rate) = f.error_rate {
            faults.set_default_error_rate(rate);
        }
        faults.set_throttle_rate(f.throttle_rate.unwrap_or(0.0), retry_after);
        if let Some(n) = f.fail_after_create {
            faults.fail_after_create(n);
        }
        if let Some(n) = f.fail_attach {
            faults.fail_attach(n);
        }
        faults.set_instance_quota(f.instance_quota);
        for o in &f.insufficient_capacity {
            faults.insufficient_capacity(&o.instance_type, &o.zone);
        }
        if f.problem_details {
            faults.set_error_shape(ErrorShape::Problem);
        }
    }
    let options = ExoFakeOptions {
        zones,
        instance_types,
        templates,
        clock,
        boot_delay,
        anti_affinity_ceiling: spec
            .anti_affinity_ceiling
            .unwrap_or(defaults.anti_affinity_ceiling),
        // The plugin waits in real time between polls; operations that end on their first
        // poll keep a create from taking tens of simulated seconds at high speed-ups.
        operation_polls: 0,
        faults,
        journal,
        network: network.clone(),
        ..defaults
    };
    Ok(ExoFake::start(options).await?)
}

/// Adds a scenario's security groups, networks, groups, keys and pre-existing instances.
pub(crate) fn seed_exoscale(
    fake: &ExoFake,
    spec: &ExoscaleSpec,
    cluster_name: &str,
) -> Result<(), SimulateError> {
    for name in &spec.security_groups {
        fake.add_security_group(name);
    }
    for n in &spec.private_networks {
        let labels: Vec<(&str, &str)> = n
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        fake.add_private_network(&n.zone, &n.name, &labels);
    }
    for name in &spec.anti_affinity_groups {
        fake.add_anti_affinity_group(name);
    }
    for name in &spec.ssh_keys {
        fake.add_ssh_key(name);
    }
    for (i, seed) in spec.instances.iter().enumerate() {
        let mut labels: Vec<(&str, &str)> = seed
            .labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        if seed.managed {
            labels.push(("karpenter-sh_managed-by", cluster_name));
        }
        let kind = seed.instance_type.as_deref().unwrap_or("standard.small");
        fake.add_instance(&seed.zone, kind, &labels).map_err(|e| {
            SimulateError::Scenario(ScenarioError {
                origin: "scenario".into(),
                message: format!("cloud.exoscale.instances[{i}]: {e}"),
            })
        })?;
    }
    Ok(())
}
