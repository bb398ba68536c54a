//! The MachineDeployment controller: one MachineSet per MachineDeployment, kept at the
//! deployment's replicas, template and delete policy, and the deployment's status.

use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Map, Value, json};

use super::{Controllers, desired_replicas, name_of, named_policy, namespace_of, selector_text};
use crate::clusterapi::{
    CLUSTER_NAME_LABEL, DEPLOYMENT_NAME_LABEL, GROUP, Kind, Ledger, STORAGE_VERSION,
    TEMPLATE_HASH_LABEL,
};
use crate::physics::{api_code, controller_uid};

/// 32-bit FNV-1a of a text, in decimal (the template hash label's value).
fn template_hash(template: &Value) -> String {
    let text = serde_json::to_string(template).unwrap_or_default();
    let hash = text.bytes().fold(0x811c_9dc5u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    hash.to_string()
}

impl Controllers {
    /// The MachineSets a MachineDeployment controls, oldest first.
    fn sets_of(&self, md: &DynamicObject) -> Vec<DynamicObject> {
        let uid = md.metadata.uid.as_deref();
        let mut sets: Vec<DynamicObject> = self
            .sets
            .iter()
            .filter(|ms| {
                controller_uid(&ms.metadata).is_some() && controller_uid(&ms.metadata) == uid
            })
            .cloned()
            .collect();
        sets.sort_by_key(|ms| {
            (
                ms.metadata.creation_timestamp.as_ref().map(|t| t.0),
                ms.metadata.name.clone(),
            )
        });
        sets
    }

    /// The MachineDeployment's selector as matchLabels: its own, or (when it has none) the
    /// cluster-name and deployment-name labels Cluster API's webhook defaults it to.
    fn deployment_selector(md: &DynamicObject) -> Value {
        let match_labels = md
            .data
            .pointer("/spec/selector/matchLabels")
            .and_then(Value::as_object)
            .filter(|m| !m.is_empty())
            .cloned();
        let expressions = md
            .data
            .pointer("/spec/selector/matchExpressions")
            .filter(|e| e.as_array().is_some_and(|a| !a.is_empty()))
            .cloned();
        let match_labels = match_labels.unwrap_or_else(|| {
            let cluster = md
                .data
                .pointer("/spec/clusterName")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let mut defaults = Map::new();
            defaults.insert(CLUSTER_NAME_LABEL.into(), json!(cluster));
            defaults.insert(DEPLOYMENT_NAME_LABEL.into(), json!(name_of(md)));
            defaults
        });
        let mut selector = json!({"matchLabels": match_labels});
        if let Some(expressions) = expressions {
            selector["matchExpressions"] = expressions;
        }
        selector
    }

    /// The MachineSet spec a MachineDeployment wants, with the template hash `hash`.
    fn set_spec(&self, md: &DynamicObject, hash: &str) -> Value {
        let cluster = md
            .data
            .pointer("/spec/clusterName")
            .cloned()
            .unwrap_or(json!(""));
        let mut selector = Self::deployment_selector(md);
        selector["matchLabels"][TEMPLATE_HASH_LABEL] = json!(hash);
        let mut template = md
            .data
            .pointer("/spec/template")
            .cloned()
            .filter(Value::is_object)
            .unwrap_or_else(|| json!({}));
        if !template.get("metadata").is_some_and(Value::is_object) {
            template["metadata"] = json!({});
        }
        let mut labels = template["metadata"]
            .get("labels")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for (key, value) in selector["matchLabels"].as_object().into_iter().flatten() {
            labels.insert(key.clone(), value.clone());
        }
        labels.insert(DEPLOYMENT_NAME_LABEL.into(), json!(name_of(md)));
        labels.insert(CLUSTER_NAME_LABEL.into(), cluster.clone());
        labels.insert(TEMPLATE_HASH_LABEL.into(), json!(hash));
        template["metadata"]["labels"] = Value::Object(labels);
        let mut spec = json!({"clusterName": cluster, "replicas": desired_replicas(md), "selector": selector, "template": template});
        if let Some(policy) = named_policy(md) {
            spec["deletePolicy"] = json!(policy.as_str());
        }
        if let Some(min_ready) = md.data.pointer("/spec/minReadySeconds") {
            spec["minReadySeconds"] = min_ready.clone();
        }
        spec
    }

    pub(super) async fn reconcile_deployment(
        &mut self,
        md: &DynamicObject,
    ) -> Result<(), kube::Error> {
        let namespace = namespace_of(md);
        let name = name_of(md);
        let paused = md.data.pointer("/spec/paused").and_then(Value::as_bool) == Some(true);
        let mut sets = self.sets_of(md);
        if md.metadata.deletion_timestamp.is_none() && !paused {
            match sets.first().cloned() {
                None => {
                    let hash =
                        template_hash(md.data.pointer("/spec/template").unwrap_or(&Value::Null));
                    let set_name = self.fresh_name(&name, &namespace, |s, namespace, name| {
                        s.sets.get(namespace, name).is_some()
                    });
                    let spec = self.set_spec(md, &hash);
                    let labels = spec
                        .pointer("/template/metadata/labels")
                        .cloned()
                        .unwrap_or_else(|| json!({}));
                    let object = json!({
                        "apiVersion": format!("{GROUP}/{STORAGE_VERSION}"), "kind": "MachineSet",
                        "metadata": {
                            "name": set_name, "namespace": namespace, "labels": labels,
                            "ownerReferences": [{
                                "apiVersion": format!("{GROUP}/{STORAGE_VERSION}"), "kind": "MachineDeployment", "name": name,
                                "uid": md.metadata.uid, "controller": true, "blockOwnerDeletion": true,
                            }],
                        },
                        "spec": spec,
                    });
                    let object: DynamicObject =
                        serde_json::from_value(object).map_err(kube::Error::SerdeError)?;
                    let created = self
                        .api(Kind::MachineSet, &namespace)
                        .create(&PostParams::default(), &object)
                        .await?;
                    tracing::info!(machinedeployment = %name, machineset = %set_name, %namespace, "MachineSet created");
                    Ledger::bump(&self.ledger.machine_sets_created);
                    self.sets.upsert(created.clone());
                    sets.push(created);
                }
                Some(current) => {
                    let hash = current
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(TEMPLATE_HASH_LABEL))
                        .cloned()
                        .unwrap_or_default();
                    let wanted = self.set_spec(md, &hash);
                    let mut updated = current.clone();
                    for field in ["replicas", "template", "deletePolicy", "minReadySeconds"] {
                        match wanted.get(field) {
                            Some(value) => updated.data["spec"][field] = value.clone(),
                            None => {
                                if let Some(spec) =
                                    updated.data.get_mut("spec").and_then(Value::as_object_mut)
                                {
                                    spec.remove(field);
                                }
                            }
                        }
                    }
                    if updated.data != current.data {
                        let set_name = name_of(&current);
                        match self
                            .api(Kind::MachineSet, &namespace)
                            .replace(&set_name, &PostParams::default(), &updated)
                            .await
                        {
                            Ok(written) => {
                                tracing::debug!(machineset = %set_name, replicas = ?wanted.get("replicas"), "MachineSet follows its MachineDeployment");
                                self.sets.upsert(written.clone());
                                sets[0] = written;
                            }
                            Err(error) if matches!(api_code(&error), Some(404 | 409)) => {}
                            Err(error) => return Err(error),
                        }
                    }
                    // Older MachineSets (none unless made by hand) wind down.
                    for old in sets.iter_mut().skip(1) {
                        if desired_replicas(old) != 0 {
                            let patch = json!({"spec": {"replicas": 0}});
                            if let Ok(written) = self
                                .api(Kind::MachineSet, &namespace)
                                .patch(
                                    &name_of(old),
                                    &PatchParams::default(),
                                    &Patch::Merge(&patch),
                                )
                                .await
                            {
                                self.sets.upsert(written.clone());
                                *old = written;
                            }
                        }
                    }
                }
            }
        }
        // Status, from the Machines of every MachineSet it controls.
        let desired = desired_replicas(md);
        let min_ready = md
            .data
            .pointer("/spec/minReadySeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let (mut replicas, mut ready, mut available) = (0usize, 0usize, 0usize);
        let mut updated_replicas = 0usize;
        for (index, ms) in sets.iter().enumerate() {
            let machines = self.machines_of(ms);
            replicas += machines.len();
            if index == 0 {
                updated_replicas = machines.len();
            }
            for machine in &machines {
                let (r, a) = self.readiness(machine, min_ready);
                ready += usize::from(r);
                available += usize::from(a);
            }
        }
        let phase = match desired.cmp(&ready) {
            std::cmp::Ordering::Equal => "Running",
            std::cmp::Ordering::Greater => "ScalingUp",
            std::cmp::Ordering::Less => "ScalingDown",
        };
        let selector = selector_text(Some(&Self::deployment_selector(md)));
        let mut status = Map::new();
        status.insert(
            "observedGeneration".into(),
            json!(md.metadata.generation.unwrap_or(1)),
        );
        status.insert("selector".into(), json!(selector));
        status.insert("replicas".into(), json!(replicas));
        status.insert("updatedReplicas".into(), json!(updated_replicas));
        status.insert("readyReplicas".into(), json!(ready));
        status.insert("availableReplicas".into(), json!(available));
        status.insert(
            "unavailableReplicas".into(),
            json!(desired.saturating_sub(available)),
        );
        status.insert("phase".into(), json!(phase));
        self.write_status(Kind::MachineDeployment, md, status).await
    }
}
