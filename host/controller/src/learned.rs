//! Capacity learned from real nodes (`joinery_core::learned`), kept up to date and kept across
//! restarts: every [`INTERVAL`] (simulated) the initialized nodes of each (NodeClass, instance
//! type) are observed; what changed is written to the ConfigMap [`CONFIGMAP`] in the
//! controller's namespace (key [`KEY`], JSON), which a new leader reads ([`restore`]) before its
//! loops start. Every user of instance types (provisioning, disruption, a launched claim's
//! allocatable) gets it through `Cloud::instance_types`, which calls [`LearnedStore::apply`].

use crate::state::Ordered;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use joinery_adapter::conditions::INITIALIZED;
use joinery_adapter::convert::resource_list;
use joinery_api::HasConditions;
use joinery_core::instance_type::InstanceType;
use joinery_core::labels::{INSTANCE_TYPE_LABEL, NODEPOOL_LABEL};
use joinery_core::learned::{LearnedCapacity, NodeReport};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use tokio::sync::watch;

use crate::{Context, ControllerError};

/// The ConfigMap that keeps what was learned.
pub const CONFIGMAP: &str = "joinery-learned-capacity";
/// Its data key (a JSON object: NodeClass `group/kind/name` → instance type → learned values).
pub const KEY: &str = "learned.json";
/// How often the nodes are observed (simulated time).
const INTERVAL: Duration = Duration::from_secs(30);

/// What was learned, shared by the loops.
#[derive(Debug, Default)]
pub struct LearnedStore {
    learned: Mutex<LearnedCapacity>,
    /// Counts the changes of `learned` (see [`LearnedStore::version`]).
    version: AtomicU64,
}

impl LearnedStore {
    /// `types` of the NodeClass `group/kind/name` with learned capacity in place of the
    /// estimate (see [`LearnedCapacity::apply`]).
    pub fn apply(&self, node_class: &str, types: Vec<InstanceType>) -> Vec<InstanceType> {
        self.learned
            .lock()
            .expect("learned capacity lock")
            .apply(node_class, types)
    }

    /// A number that changes whenever what was learned changes: an answer of
    /// [`apply`](Self::apply) stays right while it is the same.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// A copy of everything learned.
    pub fn snapshot(&self) -> LearnedCapacity {
        self.learned.lock().expect("learned capacity lock").clone()
    }

    /// Records the nodes' reports and drops what expired, at `now`; a copy to save if
    /// anything changed.
    fn observe(&self, reports: &[NodeReport], now: SystemTime) -> Option<LearnedCapacity> {
        let mut learned = self.learned.lock().expect("learned capacity lock");
        let changed = learned.observe(reports, now);
        let expired = learned.expire(now);
        for (class, kind) in &expired {
            tracing::info!(node_class = %class, instance_type = %kind, ttl = ?joinery_core::learned::LEARNED_TTL, "learned capacity expired (no node confirmed it); the plugin's estimate is used again");
        }
        let changed = changed || !expired.is_empty();
        if changed {
            self.version.fetch_add(1, Ordering::AcqRel);
        }
        changed.then(|| learned.clone())
    }

    fn restore(&self, saved: LearnedCapacity) {
        *self.learned.lock().expect("learned capacity lock") = saved;
        self.version.fetch_add(1, Ordering::AcqRel);
    }
}

/// The key a NodeClass's learned capacity is kept under: `group/kind/name`.
pub fn node_class_key(group: &str, kind: &str, name: &str) -> String {
    format!("{group}/{kind}/{name}")
}

/// Reads what an earlier leader learned from the ConfigMap (before the loops start, so the
/// first provisioning pass already uses it).
pub(crate) async fn restore(ctx: &Context) {
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.settings.system_namespace);
    match api.get_opt(CONFIGMAP).await {
        Ok(Some(cm)) => match cm
            .data
            .as_ref()
            .and_then(|d| d.get(KEY))
            .map(|text| serde_json::from_str::<LearnedCapacity>(text))
        {
            Some(Ok(saved)) => {
                let (saved, rejected) = saved.validated(ctx.clock.now());
                for entry in &rejected {
                    tracing::warn!(configmap = CONFIGMAP, node_class = %entry.node_class, instance_type = %entry.instance_type, reason = %entry.reason, "a learned-capacity entry is not a kubelet's report and is ignored (it is dropped at the next save; `joinery explain capacity` lists it)");
                }
                tracing::info!(
                    configmap = CONFIGMAP,
                    types = saved.iter().count(),
                    "learned capacity restored"
                );
                ctx.cloud.learned.restore(saved);
            }
            Some(Err(error)) => {
                tracing::warn!(configmap = CONFIGMAP, %error, "learned capacity unreadable; starting from the plugins' estimates")
            }
            None => {}
        },
        Ok(None) => {}
        Err(error) => {
            tracing::warn!(configmap = CONFIGMAP, %error, "cannot read the learned capacity; starting from the plugins' estimates")
        }
    }
}

/// Observes the nodes until stopped, saving what changed.
pub(crate) async fn run(ctx: Arc<Context>, mut stopped: watch::Receiver<bool>) {
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ctx.settings.system_namespace);
    let mut unsaved = false;
    // A failed save is retried at every observation; only the first failure of a run of them
    // is a warning (an install without the Role's ConfigMap rules would repeat it forever).
    let mut failing = false;
    loop {
        if let Some(learned) = ctx.cloud.learned.observe(&reports(&ctx), ctx.clock.now()) {
            for (class, kind, l) in learned.iter() {
                tracing::debug!(node_class = class, instance_type = kind, allocatable = ?l.allocatable, nodes = l.nodes, "capacity learned");
            }
            unsaved = true;
        }
        if unsaved {
            unsaved = !save(&ctx, &api, &ctx.cloud.learned.snapshot(), &mut failing).await;
        }
        tokio::select! {
            biased;
            _ = stopped.changed() => return,
            _ = tokio::time::sleep(ctx.clock.to_real(INTERVAL)) => {}
        }
    }
}

/// What the initialized managed nodes report, with their NodeClaim's NodeClass.
fn reports(ctx: &Context) -> Vec<NodeReport> {
    let claims = ctx.state.node_claims.ordered();
    let by_provider_id: BTreeMap<&str, _> = claims
        .iter()
        .filter_map(|c| Some((c.status.as_ref()?.provider_id.as_deref()?, c.as_ref())))
        .collect();
    let mut out = Vec::new();
    for node in ctx.state.nodes.state() {
        let (Some(kind), true) = (
            node.label(INSTANCE_TYPE_LABEL),
            node.label(NODEPOOL_LABEL).is_some(),
        ) else {
            continue;
        };
        let Some(claim) = node.provider_id().and_then(|pid| by_provider_id.get(pid)) else {
            continue;
        };
        if !claim.is_condition_true(INITIALIZED) || node.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let status = node.status.as_ref();
        let (Ok(capacity), Ok(allocatable)) = (
            resource_list(
                "status.capacity",
                status.and_then(|s| s.capacity.as_deref()),
            ),
            resource_list("status.allocatable", node.allocatable()),
        ) else {
            continue;
        };
        let class = &claim.spec.node_class_ref;
        out.push(NodeReport {
            node_class: node_class_key(&class.group, &class.kind, &class.name),
            instance_type: kind.to_string(),
            capacity,
            allocatable,
        });
    }
    out
}

/// Writes the ConfigMap (server-side apply); whether it was written. `failing` says whether the
/// previous attempt failed too (then the failure is not warned about again).
async fn save(
    ctx: &Context,
    api: &Api<ConfigMap>,
    learned: &LearnedCapacity,
    failing: &mut bool,
) -> bool {
    let Ok(json) = serde_json::to_string(learned) else {
        return false;
    };
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(CONFIGMAP.into()),
            ..Default::default()
        },
        data: Some([(KEY.to_string(), json)].into()),
        ..Default::default()
    };
    match api
        .patch(
            CONFIGMAP,
            &PatchParams::apply("joinery").force(),
            &Patch::Apply(&cm),
        )
        .await
    {
        Ok(_) => {
            *failing = false;
            true
        }
        Err(error) => {
            if !*failing {
                tracing::warn!(configmap = CONFIGMAP, %error, "cannot save the learned capacity (it is still used); retrying at every observation");
            }
            ctx.metrics
                .reconcile_error("learned.capacity", &ControllerError::Kube(error));
            *failing = true;
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use joinery_core::resources::Resources;

    fn report(cpu_millis: u64) -> NodeReport {
        let resources = Resources::new()
            .with("cpu", cpu_millis)
            .with("memory", 1 << 34)
            .with("pods", 110);
        NodeReport {
            node_class: "sim.joinery.dev/SimNodeClass/default".into(),
            instance_type: "g-4".into(),
            capacity: resources.clone(),
            allocatable: resources,
        }
    }

    #[test]
    fn the_version_changes_with_what_was_learned_and_only_then() {
        let store = LearnedStore::default();
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let v0 = store.version();
        assert!(store.observe(&[report(3900)], start).is_some());
        let v1 = store.version();
        assert_ne!(v1, v0, "a first report is learned");
        assert!(store.observe(&[report(3900)], start).is_none());
        assert_eq!(store.version(), v1, "the same report again changes nothing");
        assert!(store.observe(&[report(3800)], start).is_some());
        assert_ne!(store.version(), v1, "a smaller node is learned");
        let v2 = store.version();
        store.restore(LearnedCapacity::default());
        assert_ne!(store.version(), v2, "a restored copy replaces everything");
    }
}
