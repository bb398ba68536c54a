//! CapacityBuffers (`CapacityBuffer` feature gate): the provisioner adds each ready buffer's
//! virtual pods to every pass ([`joinery_core::buffers`]), disruption counts them, and this
//! module reads the buffers from the caches and writes their status after each pass:
//! `replicas`, `podTemplateRef`, `podTemplateGeneration`, `provisioningStrategy` and the
//! `ReadyForProvisioning`, `Provisioning` and `LimitedByQuotas` conditions. A buffer the CRD's
//! validation should have refused (both references, a negative count) is
//! `ReadyForProvisioning=False` with the field in the message, and gets a warning event.

use std::collections::BTreeMap;
use std::sync::Arc;

use joinery_adapter::buffers::{BufferSources, BufferState, Resolution, resolve_all};
use joinery_api::capacitybuffer::{
    CONDITION_LIMITED_BY_QUOTAS, CONDITION_PROVISIONING, CONDITION_READY_FOR_PROVISIONING,
};
use joinery_api::{CapacityBuffer, Condition, ConditionStatus};
use joinery_core::buffers::{self, BufferOutcome, ConditionDecision};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::PodTemplate;
use kube::api::Api;
use serde_json::{Value, json};

use crate::events::Involved;
use crate::state::{BufferStores, Ordered};
use crate::util::{self, condition};
use crate::{Context, ControllerError, writes};

/// The buffers and the objects they refer to, read from the caches at once.
#[derive(Default)]
pub struct BufferObjects {
    buffers: Vec<Arc<CapacityBuffer>>,
    pod_templates: Vec<Arc<PodTemplate>>,
    deployments: Vec<Arc<Deployment>>,
    stateful_sets: Vec<Arc<StatefulSet>>,
    replica_sets: Vec<Arc<ReplicaSet>>,
}

impl BufferObjects {
    /// Reads the caches (nothing without the `CapacityBuffer` gate or the CRD).
    pub fn read(stores: Option<&BufferStores>) -> BufferObjects {
        let Some(s) = stores else {
            return BufferObjects::default();
        };
        BufferObjects {
            buffers: s.capacity_buffers.ordered(),
            pod_templates: s.pod_templates.ordered(),
            deployments: s.deployments.ordered(),
            stateful_sets: s.stateful_sets.ordered(),
            replica_sets: s.replica_sets.ordered(),
        }
    }

    /// Whether there is any buffer.
    pub fn is_empty(&self) -> bool {
        self.buffers.is_empty()
    }

    /// The objects by reference, to resolve the buffers from.
    pub fn refs(&self) -> BufferRefs<'_> {
        fn refs<T>(v: &[Arc<T>]) -> Vec<&T> {
            v.iter().map(|b| b.as_ref()).collect()
        }
        BufferRefs {
            buffers: refs(&self.buffers),
            pod_templates: refs(&self.pod_templates),
            deployments: refs(&self.deployments),
            stateful_sets: refs(&self.stateful_sets),
            replica_sets: refs(&self.replica_sets),
        }
    }
}

/// [`BufferObjects`] by reference.
pub struct BufferRefs<'a> {
    buffers: Vec<&'a CapacityBuffer>,
    pod_templates: Vec<&'a PodTemplate>,
    deployments: Vec<&'a Deployment>,
    stateful_sets: Vec<&'a StatefulSet>,
    replica_sets: Vec<&'a ReplicaSet>,
}

impl<'a> BufferRefs<'a> {
    /// Every buffer (not being deleted), resolved.
    pub fn states(&self) -> Vec<BufferState<'a>> {
        let sources = BufferSources {
            pod_templates: &self.pod_templates,
            deployments: &self.deployments,
            stateful_sets: &self.stateful_sets,
            replica_sets: &self.replica_sets,
        };
        resolve_all(&self.buffers, &sources)
    }
}

/// The status a buffer gets, computed without I/O: the fields and the three conditions (a
/// condition left `None` is not touched).
#[derive(Debug, Clone, PartialEq)]
pub struct BufferStatus {
    /// `status.replicas`, `podTemplateRef`, `podTemplateGeneration`, `provisioningStrategy`
    /// (JSON `null` removes a field).
    pub fields: serde_json::Map<String, Value>,
    /// `ReadyForProvisioning`: status, reason, message.
    pub ready: ConditionDecision,
    /// `Provisioning`.
    pub provisioning: Option<ConditionDecision>,
    /// `LimitedByQuotas`.
    pub limited: Option<ConditionDecision>,
}

/// What a buffer's status should say after a pass whose outcome for it is `outcome` (`None`
/// when its chunks were not scheduled in this pass).
pub fn status_of(state: &BufferState<'_>, outcome: Option<&BufferOutcome>) -> BufferStatus {
    let mut fields = serde_json::Map::new();
    fields.insert(
        "provisioningStrategy".into(),
        json!(state.buffer.spec.effective_strategy()),
    );
    let (ready, chunks) = match &state.resolution {
        Resolution::Ready(r) => {
            fields.insert("replicas".into(), json!(r.chunks));
            match &r.pod_template {
                Some((name, generation)) => {
                    fields.insert("podTemplateRef".into(), json!({ "name": name }));
                    fields.insert("podTemplateGeneration".into(), json!(generation));
                }
                None => {
                    fields.insert("podTemplateRef".into(), Value::Null);
                    fields.insert("podTemplateGeneration".into(), Value::Null);
                }
            }
            (
                ConditionDecision {
                    status: true,
                    reason: buffers::REASON_RESOLVED,
                    message: "the chunk's pod template was resolved".into(),
                },
                r.chunks,
            )
        }
        Resolution::NotReady { reason, message } => (
            ConditionDecision {
                status: false,
                reason,
                message: message.clone(),
            },
            0,
        ),
    };
    let provisioning = buffers::provisioning_condition(ready.status, chunks, outcome);
    let limited = if ready.status && chunks > 0 {
        buffers::limited_by_quotas_condition(outcome)
    } else {
        None
    };
    BufferStatus {
        fields,
        ready,
        provisioning,
        limited,
    }
}

fn as_condition(
    ctx: &Context,
    type_: &str,
    d: &ConditionDecision,
    generation: Option<i64>,
) -> Condition {
    let status = if d.status {
        ConditionStatus::True
    } else {
        ConditionStatus::False
    };
    let mut c = condition(ctx, type_, status, d.reason, d.message.clone());
    c.observed_generation = generation;
    c
}

/// Writes every buffer's status after a pass (`outcomes` by buffer key; `None` when no
/// scheduling ran), and warns once per transition about a buffer that cannot be resolved. A
/// status that cannot be written is logged and counted, never fatal to the pass: provisioning
/// goes on whatever the buffers' status says.
pub async fn write_status(
    ctx: &Context,
    states: &[BufferState<'_>],
    outcomes: Option<&BTreeMap<String, BufferOutcome>>,
) {
    for state in states {
        if let Err(e) = write_one(ctx, state, outcomes).await {
            tracing::warn!(buffer = %state.key(), error = %e, "writing the CapacityBuffer's status failed; will retry on the next pass");
            ctx.metrics.reconcile_error("capacitybuffer", &e);
        }
    }
}

async fn write_one(
    ctx: &Context,
    state: &BufferState<'_>,
    outcomes: Option<&BTreeMap<String, BufferOutcome>>,
) -> Result<(), ControllerError> {
    {
        let status = status_of(state, outcomes.and_then(|o| o.get(&state.key())));
        let generation = state.buffer.metadata.generation;
        let mut conditions = vec![as_condition(
            ctx,
            CONDITION_READY_FOR_PROVISIONING,
            &status.ready,
            generation,
        )];
        conditions.extend(
            status
                .provisioning
                .as_ref()
                .map(|d| as_condition(ctx, CONDITION_PROVISIONING, d, generation)),
        );
        conditions.extend(
            status
                .limited
                .as_ref()
                .map(|d| as_condition(ctx, CONDITION_LIMITED_BY_QUOTAS, d, generation)),
        );
        let was = state
            .buffer
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.type_ == CONDITION_READY_FOR_PROVISIONING)
            })
            .map(|c| (c.status, c.reason.clone(), c.message.clone()));
        let api: Api<CapacityBuffer> = Api::namespaced(ctx.client.clone(), &state.namespace);
        let written = writes::patch_guarded(&api, state.buffer, writes::Part::Status, |current| {
            let mut conds = current
                .status
                .as_ref()
                .and_then(|s| s.conditions.clone())
                .unwrap_or_default();
            let mut changed = false;
            for c in &conditions {
                changed |= joinery_api::condition::set_condition(&mut conds, c.clone());
            }
            let current_status = current
                .status
                .as_ref()
                .map(|s| serde_json::to_value(s).unwrap_or_default())
                .unwrap_or_default();
            for (k, v) in &status.fields {
                let now = current_status.get(k).unwrap_or(&Value::Null);
                changed |= now != v;
            }
            changed.then(|| {
                let mut body = status.fields.clone();
                body.insert("conditions".into(), json!(conds));
                json!({ "status": body })
            })
        })
        .await;
        match written {
            Ok(_) => {}
            Err(e) if util::is_not_found(&e) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        let now = (
            if status.ready.status {
                ConditionStatus::True
            } else {
                ConditionStatus::False
            },
            status.ready.reason.to_string(),
            status.ready.message.clone(),
        );
        if !status.ready.status && was.as_ref() != Some(&now) {
            ctx.events
                .warning(
                    &Involved::of(state.buffer),
                    status.ready.reason,
                    &format!(
                        "CapacityBuffer is not ready for provisioning: {}",
                        status.ready.message
                    ),
                )
                .await;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use joinery_adapter::buffers::resolve;
    use serde_json::json;

    use super::*;

    fn buffer(spec: Value) -> CapacityBuffer {
        serde_json::from_value(json!({"apiVersion": "autoscaling.x-k8s.io/v1beta1",
            "kind": "CapacityBuffer", "metadata": {"name": "spare", "namespace": "shop"},
            "spec": spec}))
        .unwrap()
    }

    fn state(b: &CapacityBuffer, sources: &BufferSources<'_>) -> BufferState<'static> {
        let b: &'static CapacityBuffer = Box::leak(Box::new(b.clone()));
        BufferState {
            buffer: b,
            namespace: "shop".into(),
            name: "spare".into(),
            resolution: resolve(b, sources),
        }
    }

    #[test]
    fn a_buffer_with_both_references_is_not_ready_and_touches_nothing_else() {
        let b = buffer(json!({"podTemplateRef": {"name": "t"},
            "scalableRef": {"kind": "Deployment", "name": "web"}, "replicas": 1}));
        let s = status_of(&state(&b, &BufferSources::default()), None);
        assert!(!s.ready.status);
        assert_eq!(s.ready.reason, "ResolutionFailed");
        assert!(
            s.ready
                .message
                .contains("spec.podTemplateRef and spec.scalableRef")
        );
        assert_eq!(
            s.provisioning.map(|p| p.reason),
            Some("NotReadyForProvisioning")
        );
        assert_eq!(s.limited, None);
        assert!(!s.fields.contains_key("replicas"));
    }

    #[test]
    fn a_ready_buffer_reports_its_chunks_and_template() {
        let t: PodTemplate = serde_json::from_value(json!({"metadata": {"name": "t",
            "namespace": "shop", "generation": 2}, "template": {"spec": {"containers": [
            {"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}))
        .unwrap();
        let templates = [&t];
        let sources = BufferSources {
            pod_templates: &templates,
            ..Default::default()
        };
        let b = buffer(json!({"podTemplateRef": {"name": "t"}, "replicas": 2}));
        let st = state(&b, &sources);
        let outcome = BufferOutcome {
            chunks: 2,
            on_nodes: [("n1".to_string(), 2)].into(),
            ..Default::default()
        };
        let s = status_of(&st, Some(&outcome));
        assert_eq!(s.fields["replicas"], json!(2));
        assert_eq!(s.fields["podTemplateRef"], json!({"name": "t"}));
        assert_eq!(s.fields["podTemplateGeneration"], json!(2));
        assert_eq!(
            s.fields["provisioningStrategy"],
            json!("buffer.x-k8s.io/active-capacity")
        );
        assert_eq!(s.ready.reason, "Resolved");
        assert_eq!(
            s.provisioning.map(|p| p.reason),
            Some("FitsExistingCapacity")
        );
        assert_eq!(s.limited.map(|l| l.reason), Some("WithinLimits"));
    }
}
