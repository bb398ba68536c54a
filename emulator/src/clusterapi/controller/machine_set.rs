//! The MachineSet controller: creates Machines up to the set's replicas, deletes the surplus by
//! Cluster API's deletion priorities, and keeps the set's status.

use std::collections::BTreeMap;

use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams};
use serde_json::{Map, Value, json};

use super::{
    Controllers, desired_replicas, labels_of, name_of, named_policy, namespace_of, selector_text,
};
use crate::clusterapi::priority::machines_to_delete;
use crate::clusterapi::{
    CLUSTER_NAME_LABEL, DEPLOYMENT_NAME_LABEL, FINALIZER, GROUP, Kind, Ledger, SET_NAME_LABEL,
    STORAGE_VERSION,
};
use crate::physics::{api_code, controller_uid};

fn string_map(value: Option<&Value>) -> BTreeMap<String, String> {
    value
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
        .collect()
}

/// A per-Machine object reference made from a template reference: kind without `Template`,
/// named after the Machine, in its namespace.
fn instance_ref(template_ref: &Value, name: &str, namespace: &str) -> Value {
    let mut reference = template_ref.as_object().cloned().unwrap_or_default();
    if let Some(kind) = reference.get("kind").and_then(Value::as_str) {
        let kind = kind.strip_suffix("Template").unwrap_or(kind).to_string();
        reference.insert("kind".into(), json!(kind));
    }
    reference.insert("name".into(), json!(name));
    if reference.contains_key("apiVersion") || !reference.contains_key("apiGroup") {
        reference.insert("namespace".into(), json!(namespace));
    }
    Value::Object(reference)
}

impl Controllers {
    /// The Machines a MachineSet controls.
    pub(super) fn machines_of(&self, ms: &DynamicObject) -> Vec<DynamicObject> {
        let uid = ms.metadata.uid.as_deref();
        self.machines
            .iter()
            .filter(|m| controller_uid(&m.metadata).is_some() && controller_uid(&m.metadata) == uid)
            .cloned()
            .collect()
    }

    pub(super) async fn reconcile_set(&mut self, ms: &DynamicObject) -> Result<(), kube::Error> {
        let namespace = namespace_of(ms);
        let name = name_of(ms);
        let machines = self.machines_of(ms);
        let desired = desired_replicas(ms);
        if ms.metadata.deletion_timestamp.is_none() {
            if machines.len() < desired {
                for _ in machines.len()..desired {
                    self.create_machine(ms).await?;
                }
            } else if machines.len() - desired
                > machines
                    .iter()
                    .filter(|m| m.metadata.deletion_timestamp.is_some())
                    .count()
            {
                // A Machine not yet being deleted must go (those being deleted count, and go
                // first). Choose from the Machines as the API server has them now, not as the
                // watch has delivered them so far: whoever lowers the replicas may have annotated
                // a Machine with delete-machine just before, and that mark must decide which one
                // goes.
                let uid = ms.metadata.uid.as_deref();
                let machines: Vec<DynamicObject> = self
                    .api(Kind::Machine, &namespace)
                    .list(&ListParams::default())
                    .await?
                    .items
                    .into_iter()
                    .filter(|m| {
                        controller_uid(&m.metadata).is_some() && controller_uid(&m.metadata) == uid
                    })
                    .collect();
                let policy = named_policy(ms).unwrap_or(self.settings.delete_policy);
                let surplus = machines.len().saturating_sub(desired);
                let picked: Vec<DynamicObject> =
                    machines_to_delete(&machines, surplus, policy, self.clock.now())
                        .into_iter()
                        .cloned()
                        .collect();
                for machine in picked
                    .iter()
                    .filter(|m| m.metadata.deletion_timestamp.is_none())
                {
                    let machine_name = name_of(machine);
                    match self
                        .api(Kind::Machine, &namespace)
                        .delete(&machine_name, &DeleteParams::background())
                        .await
                    {
                        Ok(either) => {
                            tracing::info!(machineset = %name, machine = %machine_name, policy = policy.as_str(), "Machine deleted on scale-down");
                            match either.left() {
                                Some(object) => self.machines.upsert(object),
                                None => {
                                    self.machines
                                        .forget(&namespace_of(machine), &name_of(machine));
                                }
                            }
                        }
                        Err(error) if api_code(&error) == Some(404) => {}
                        Err(error) => return Err(error),
                    }
                }
            }
        }
        let machines = self.machines_of(ms);
        let min_ready = ms
            .data
            .pointer("/spec/minReadySeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let template_labels = string_map(ms.data.pointer("/spec/template/metadata/labels"));
        let (mut ready, mut available) = (0usize, 0usize);
        for machine in &machines {
            let (r, a) = self.readiness(machine, min_ready);
            ready += usize::from(r);
            available += usize::from(a);
        }
        let fully_labeled = machines
            .iter()
            .filter(|m| {
                template_labels
                    .iter()
                    .all(|(k, v)| labels_of(m).get(k) == Some(v))
            })
            .count();
        let selector = selector_text(ms.data.pointer("/spec/selector"));
        let mut status = Map::new();
        status.insert(
            "observedGeneration".into(),
            json!(ms.metadata.generation.unwrap_or(1)),
        );
        status.insert("selector".into(), json!(selector));
        status.insert("replicas".into(), json!(machines.len()));
        status.insert("fullyLabeledReplicas".into(), json!(fully_labeled));
        status.insert("readyReplicas".into(), json!(ready));
        status.insert("availableReplicas".into(), json!(available));
        self.write_status(Kind::MachineSet, ms, status).await
    }

    /// Creates one Machine of a MachineSet.
    async fn create_machine(&mut self, ms: &DynamicObject) -> Result<(), kube::Error> {
        let namespace = namespace_of(ms);
        let set_name = name_of(ms);
        let name = self.fresh_name(&set_name, &namespace, |s, namespace, name| {
            s.machines.get(namespace, name).is_some()
        });
        let template = ms
            .data
            .pointer("/spec/template")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let cluster = ms
            .data
            .pointer("/spec/clusterName")
            .cloned()
            .unwrap_or(json!(""));
        let mut labels = template
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        labels.insert(CLUSTER_NAME_LABEL.into(), cluster.clone());
        labels.insert(SET_NAME_LABEL.into(), json!(set_name));
        if let Some(deployment) = ms
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(DEPLOYMENT_NAME_LABEL))
        {
            labels.insert(DEPLOYMENT_NAME_LABEL.into(), json!(deployment));
        }
        let annotations = template
            .pointer("/metadata/annotations")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let mut spec = template
            .get("spec")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        spec.remove("providerID");
        spec.insert("clusterName".into(), cluster);
        let infrastructure = spec.get("infrastructureRef").cloned().unwrap_or_else(|| {
            json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "SimMachineTemplate"})
        });
        spec.insert(
            "infrastructureRef".into(),
            instance_ref(&infrastructure, &name, &namespace),
        );
        let mut bootstrap = spec
            .get("bootstrap")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        if let Some(config) = bootstrap.get("configRef").cloned() {
            bootstrap.insert("configRef".into(), instance_ref(&config, &name, &namespace));
        }
        bootstrap.insert("dataSecretName".into(), json!(name));
        spec.insert("bootstrap".into(), Value::Object(bootstrap));
        let object = json!({
            "apiVersion": format!("{GROUP}/{STORAGE_VERSION}"), "kind": "Machine",
            "metadata": {
                "name": name, "namespace": namespace, "labels": labels, "annotations": annotations, "finalizers": [FINALIZER],
                "ownerReferences": [{
                    "apiVersion": format!("{GROUP}/{STORAGE_VERSION}"), "kind": "MachineSet", "name": set_name,
                    "uid": ms.metadata.uid, "controller": true, "blockOwnerDeletion": true,
                }],
            },
            "spec": spec,
        });
        let object: DynamicObject =
            serde_json::from_value(object).map_err(kube::Error::SerdeError)?;
        let created = self
            .api(Kind::Machine, &namespace)
            .create(&PostParams::default(), &object)
            .await?;
        tracing::info!(machineset = %set_name, machine = %name, %namespace, "Machine created");
        Ledger::bump(&self.ledger.machines_created);
        self.machines.upsert(created);
        Ok(())
    }
}
