//! The pod side of a simulated kubelet: it starts the pods bound to its node, finishes the
//! ones that run to completion and removes the ones being deleted, at the kubelet's pace.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::{ACTION_RETRY, force_delete};
use crate::physics::cache::Cache;
use crate::physics::lag::{Pace, paced};
use crate::physics::{
    PhysicsContext, PhysicsError, api_code, exit_code, is_deleting, is_terminal, run_time,
    system_time, watch,
};

/// Something a kubelet does at a given time.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Action {
    /// Report the pod's containers running.
    Start {
        namespace: String,
        name: String,
        uid: String,
    },
    /// Report the pod's containers exited (a pod that runs to completion).
    Finish {
        namespace: String,
        name: String,
        uid: String,
    },
    /// Remove the pod whose grace period is over.
    Remove {
        namespace: String,
        name: String,
        uid: String,
    },
}

/// The pod side of a kubelet.
pub(super) struct PodRunner {
    shared: Arc<PhysicsContext>,
    node: String,
    host_ip: String,
    pod_range: Ipv4Addr,
    next_ip: u32,
    pods: Cache<Pod>,
    /// uids with a start planned or done.
    starting: HashSet<String>,
    /// uids with a removal planned.
    removing: HashSet<String>,
    /// uids with an end planned (pods that run to completion).
    finishing: HashSet<String>,
    timers: BinaryHeap<Reverse<(Instant, u64, Action)>>,
    sequence: u64,
    /// The kubelet's own write pace.
    pace: Pace,
}

/// Writes per simulated second of each kubelet, and its bursts (the kubelet's `kubeAPIQPS`
/// and `kubeAPIBurst` defaults).
const KUBELET_WRITE_RATE: f64 = 50.0;
const KUBELET_WRITE_BURST: u32 = 100;

/// The request an [`Action`] makes, ready to run.
type Request = BoxFuture<'static, (Action, Result<Option<Pod>, PhysicsError>)>;

impl PodRunner {
    /// The pod runner of the kubelet on `node`, whose machine has the address `host_ip` and
    /// gives its pods addresses from the /24 starting at `pod_range`.
    pub(super) fn new(
        shared: Arc<PhysicsContext>,
        node: String,
        host_ip: String,
        pod_range: Ipv4Addr,
    ) -> Self {
        PodRunner {
            shared,
            node,
            host_ip,
            pod_range,
            next_ip: 2,
            pods: Cache::new(),
            starting: HashSet::new(),
            removing: HashSet::new(),
            finishing: HashSet::new(),
            timers: BinaryHeap::new(),
            sequence: 0,
            pace: Pace::new(KUBELET_WRITE_RATE, KUBELET_WRITE_BURST),
        }
    }

    pub(super) async fn run(&mut self) {
        let config = watcher::Config::default().fields(&format!("spec.nodeName={}", self.node));
        let mut events = watch(Api::<Pod>::all(self.shared.client.clone()), config);
        loop {
            let next = self.timers.peek().map(|Reverse((at, _, _))| *at);
            tokio::select! {
                biased;
                Some(event) = events.next() => {
                    self.pods.apply(event);
                    if self.pods.is_synced() {
                        self.plan();
                    }
                }
                _ = tokio::time::sleep_until(next.unwrap_or_else(Instant::now)), if next.is_some() => {
                    let mut requests = Vec::new();
                    while let Some(Reverse((at, _, _))) = self.timers.peek() {
                        if *at > Instant::now() {
                            break;
                        }
                        let Some(Reverse((_, _, action))) = self.timers.pop() else { break };
                        requests.extend(self.request(action));
                    }
                    // Every pod due now is started (or removed) at the kubelet's pace, a few
                    // at once, as its pod workers would.
                    let shared = self.shared.clone();
                    for (action, result) in paced(&shared.clock, &mut self.pace, &shared.lag, "kubelets", requests).await {
                        if let Err(error) = self.done(&action, result) {
                            // A real kubelet syncs its pods again on its next pass.
                            tracing::warn!(node = %self.node, %error, "kubelet action failed; retrying");
                            self.schedule(self.shared.clock.to_real(ACTION_RETRY), action);
                        }
                    }
                    // Pods that just started and run to completion get their end planned.
                    self.plan();
                }
            }
        }
    }

    fn schedule(&mut self, after: Duration, action: Action) {
        self.sequence += 1;
        self.timers
            .push(Reverse((Instant::now() + after, self.sequence, action)));
    }

    /// Plans starts for new pods, ends for running pods that run to completion, and removals
    /// for pods being deleted.
    fn plan(&mut self) {
        let mut starts = Vec::new();
        let mut removals = Vec::new();
        let mut ends = Vec::new();
        let mut present = HashSet::new();
        for pod in self.pods.iter() {
            let Some(uid) = pod.metadata.uid.clone() else {
                continue;
            };
            present.insert(uid.clone());
            let namespace = pod.metadata.namespace.clone().unwrap_or_default();
            let name = pod.metadata.name.clone().unwrap_or_default();
            if is_deleting(pod) {
                if !self.removing.contains(&uid) {
                    let at = pod
                        .metadata
                        .deletion_timestamp
                        .as_ref()
                        .map(system_time)
                        .unwrap_or_else(|| self.shared.clock.now());
                    removals.push((
                        self.shared.real_until(at),
                        Action::Remove {
                            namespace,
                            name,
                            uid,
                        },
                    ));
                }
            } else if !is_terminal(pod) {
                let running =
                    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
                if running {
                    self.starting.insert(uid.clone());
                    if let Some(run_for) = run_time(pod)
                        && !self.finishing.contains(&uid)
                    {
                        let started = pod
                            .status
                            .as_ref()
                            .and_then(|s| s.start_time.as_ref())
                            .map(system_time)
                            .unwrap_or_else(|| self.shared.clock.now());
                        ends.push((
                            self.shared.real_until(started + run_for),
                            Action::Finish {
                                namespace,
                                name,
                                uid,
                            },
                        ));
                    }
                } else if !self.starting.contains(&uid) {
                    starts.push(Action::Start {
                        namespace,
                        name,
                        uid,
                    });
                }
            }
        }
        for (after, action) in ends {
            if let Action::Finish { uid, .. } = &action {
                self.finishing.insert(uid.clone());
            }
            self.schedule(after, action);
        }
        for (after, action) in removals {
            if let Action::Remove { uid, .. } = &action {
                self.removing.insert(uid.clone());
            }
            self.schedule(after, action);
        }
        let delay = self.shared.clock.to_real(self.shared.pod_start_delay);
        for action in starts {
            if let Action::Start { uid, .. } = &action {
                self.starting.insert(uid.clone());
            }
            self.schedule(delay, action);
        }
        self.starting.retain(|uid| present.contains(uid));
        self.removing.retain(|uid| present.contains(uid));
        self.finishing.retain(|uid| present.contains(uid));
    }

    /// The request an action makes; `None` when there is nothing left to do (the pod went, or
    /// is being deleted before it started).
    fn request(&mut self, action: Action) -> Option<Request> {
        let (namespace, name, uid) = match &action {
            Action::Start {
                namespace,
                name,
                uid,
            }
            | Action::Finish {
                namespace,
                name,
                uid,
            }
            | Action::Remove {
                namespace,
                name,
                uid,
            } => (namespace, name, uid),
        };
        let pod = self
            .pods
            .get(namespace, name)
            .filter(|p| p.metadata.uid.as_deref() == Some(uid.as_str()))
            .cloned()?;
        let shared = self.shared.clone();
        // Starting and finishing a pod are both one status patch; only the status differs.
        let status = match action {
            Action::Start { .. } => {
                if is_deleting(&pod) {
                    return None;
                }
                self.running_status(&pod)
            }
            Action::Finish { .. } => {
                if is_deleting(&pod) || is_terminal(&pod) {
                    return None;
                }
                self.finished_status(&pod)
            }
            Action::Remove { .. } => {
                return Some(
                    async move {
                        let result = force_delete(&shared, &pod).await;
                        (action, result)
                    }
                    .boxed(),
                );
            }
        };
        Some(
            async move {
                let (namespace, name) = (
                    pod.metadata.namespace.clone().unwrap_or_default(),
                    pod.metadata.name.clone().unwrap_or_default(),
                );
                let api: Api<Pod> = Api::namespaced(shared.client.clone(), &namespace);
                let result = match api
                    .patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(&json!({"status": status})),
                    )
                    .await
                {
                    Ok(updated) => Ok(Some(updated)),
                    Err(error) if api_code(&error) == Some(404) => Ok(None),
                    Err(error) => Err(error.into()),
                };
                (action, result)
            }
            .boxed(),
        )
    }

    /// Takes in what an action's request answered.
    fn done(
        &mut self,
        action: &Action,
        result: Result<Option<Pod>, PhysicsError>,
    ) -> Result<(), PhysicsError> {
        let answer = result?;
        match action {
            Action::Start {
                namespace, name, ..
            } => {
                if let Some(updated) = answer {
                    tracing::debug!(pod = %name, %namespace, node = %self.node, "pod running");
                    self.pods.upsert(updated);
                }
            }
            Action::Finish {
                namespace, name, ..
            } => {
                if let Some(updated) = answer {
                    tracing::debug!(pod = %name, %namespace, node = %self.node, "pod finished");
                    self.pods.upsert(updated);
                }
            }
            Action::Remove {
                namespace, name, ..
            } => match answer {
                Some(object) => self.pods.deleted(object, true),
                None => self.pods.forget(namespace, name),
            },
        }
        Ok(())
    }

    /// The status of a pod whose containers have exited: `Succeeded` with exit code 0 (reason
    /// `Completed`), else `Failed` (reason `Error`), no longer ready.
    fn finished_status(&self, pod: &Pod) -> Value {
        let spec = pod.spec.clone().unwrap_or_default();
        let now = serde_json::to_value(self.shared.now()).unwrap_or(Value::Null);
        let started = pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .and_then(|t| serde_json::to_value(t).ok())
            .unwrap_or_else(|| now.clone());
        let code = exit_code(pod);
        let (phase, reason) = if code == 0 {
            ("Succeeded", "Completed")
        } else {
            ("Failed", "Error")
        };
        let containers: Vec<Value> = spec
            .containers
            .iter()
            .map(|c| {
                json!({
                    "name": c.name, "image": c.image.clone().unwrap_or_default(), "imageID": "",
                    "containerID": container_id(pod, &c.name), "ready": false, "started": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": code, "reason": reason, "startedAt": started, "finishedAt": now, "containerID": container_id(pod, &c.name)}},
                })
            })
            .collect();
        let not_ready = |kind: &str| json!({"type": kind, "status": "False", "reason": "PodCompleted", "lastProbeTime": null, "lastTransitionTime": now});
        let mut conditions: Vec<Value> = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .filter(|c| {
                !matches!(
                    c.type_.as_str(),
                    "PodReadyToStartContainers" | "Ready" | "ContainersReady"
                )
            })
            .filter_map(|c| serde_json::to_value(c).ok())
            .collect();
        conditions.extend([
            json!({"type": "PodReadyToStartContainers", "status": "False", "lastProbeTime": null, "lastTransitionTime": now}),
            not_ready("Ready"),
            not_ready("ContainersReady"),
        ]);
        json!({
            "phase": phase,
            "conditions": conditions,
            "containerStatuses": containers,
        })
    }

    /// The status of the pod with its containers running and ready.
    fn running_status(&mut self, pod: &Pod) -> Value {
        let spec = pod.spec.clone().unwrap_or_default();
        let now = serde_json::to_value(self.shared.now()).unwrap_or(Value::Null);
        let pod_ip = if spec.host_network == Some(true) {
            self.host_ip.clone()
        } else {
            let offset = self.next_ip;
            self.next_ip = if self.next_ip >= 254 {
                2
            } else {
                self.next_ip + 1
            };
            Ipv4Addr::from(u32::from(self.pod_range) + offset).to_string()
        };
        let scheduled_since = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| {
                c.iter()
                    .find(|c| c.type_ == "PodScheduled" && c.status == "True")
            })
            .and_then(|c| c.last_transition_time.as_ref())
            .and_then(|t| serde_json::to_value(t).ok())
            .unwrap_or_else(|| now.clone());
        let condition = |kind: &str, since: &Value| json!({"type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": since});
        let container_id = |container: &str| container_id(pod, container);
        let containers: Vec<Value> = spec
            .containers
            .iter()
            .map(|c| {
                json!({
                    "name": c.name, "image": c.image.clone().unwrap_or_default(), "imageID": "",
                    "containerID": container_id(&c.name), "ready": true, "started": true, "restartCount": 0,
                    "state": {"running": {"startedAt": now}},
                })
            })
            .collect();
        let init_containers: Vec<Value> = spec
            .init_containers
            .iter()
            .flatten()
            .map(|c| {
                let sidecar = c.restart_policy.as_deref() == Some("Always");
                let state = if sidecar {
                    json!({"running": {"startedAt": now}})
                } else {
                    json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": now, "finishedAt": now, "containerID": container_id(&c.name)}})
                };
                json!({
                    "name": c.name, "image": c.image.clone().unwrap_or_default(), "imageID": "",
                    "containerID": container_id(&c.name), "ready": sidecar, "started": sidecar, "restartCount": 0, "state": state,
                })
            })
            .collect();
        let mut conditions: Vec<Value> = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .filter(|c| {
                !matches!(
                    c.type_.as_str(),
                    "PodReadyToStartContainers"
                        | "Initialized"
                        | "Ready"
                        | "ContainersReady"
                        | "PodScheduled"
                )
            })
            .filter_map(|c| serde_json::to_value(c).ok())
            .collect();
        conditions.extend([
            condition("PodReadyToStartContainers", &now),
            condition("Initialized", &now),
            condition("Ready", &now),
            condition("ContainersReady", &now),
            condition("PodScheduled", &scheduled_since),
        ]);
        let mut status = json!({
            "phase": "Running",
            "conditions": conditions,
            "hostIP": self.host_ip,
            "hostIPs": [{"ip": self.host_ip}],
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": now,
            "containerStatuses": containers,
        });
        if !init_containers.is_empty() {
            status["initContainerStatuses"] = Value::Array(init_containers);
        }
        status
    }
}

/// A stable made-up ID of a pod's container.
fn container_id(pod: &Pod, container: &str) -> String {
    format!(
        "containerd://{:016x}",
        fnv(&format!(
            "{}/{container}",
            pod.metadata.uid.as_deref().unwrap_or_default()
        ))
    )
}

/// FNV-1a, for stable made-up container IDs.
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
