//! The host under bad days, end to end on the simulated cluster: a kubelet that dies in
//! the middle of a drain, a PodDisruptionBudget that never allows an eviction, and a cloud
//! create that hangs while other claims must still be finalized. Each test checks that
//! nothing leaks: no live instance without a claim, no claim or Node left behind.

use std::time::Duration;

use joinery_api::NodeClaim;
use joinery_emulator::cloud::InstanceState;
use joinery_simulate::{Simulation, SimulationOptions};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::{Value, json};

async fn start() -> Simulation {
    Simulation::start(SimulationOptions {
        virtual_time: true,
        ..Default::default()
    })
    .await
    .unwrap()
}

async fn apply_pool(sim: &Simulation, termination_grace_period: Option<&str>) {
    let mut template_spec = json!({
        "nodeClassRef": {"group": "sim.joinery.dev", "kind": "SimNodeClass", "name": "default"},
        "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}],
    });
    if let Some(tgp) = termination_grace_period {
        template_spec["terminationGracePeriod"] = json!(tgp);
    }
    for manifest in [
        json!({"apiVersion": "sim.joinery.dev/v1alpha1", "kind": "SimNodeClass", "metadata": {"name": "default"},
               "spec": {"userDataRenderer": {"name": "k3s", "parameters": {"token": "t", "providerIDCommand": "cat /id"}}}}),
        json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
               "spec": {"template": {"spec": template_spec}}}),
    ] {
        sim.apply(&manifest).await.expect("apply");
    }
}

fn pod(name: &str, labels: Value, extra_spec: Value) -> Value {
    let mut spec = json!({"containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        spec.extend(extra.clone());
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default", "labels": labels}, "spec": spec})
}

/// Waits until `done` holds, polling every 50 ms (of simulated time, in virtual time).
async fn eventually<F, Fut>(what: &str, limit: Duration, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for: {what}");
}

async fn pod_running(sim: &Simulation, name: &str) -> bool {
    let pods: Api<Pod> = Api::namespaced(sim.client.clone(), "default");
    pods.get(name)
        .await
        .is_ok_and(|p| p.status.and_then(|s| s.phase).as_deref() == Some("Running"))
}

async fn claims(sim: &Simulation) -> Vec<NodeClaim> {
    Api::<NodeClaim>::all(sim.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

async fn nodes(sim: &Simulation) -> Vec<Node> {
    Api::<Node>::all(sim.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

fn live_instances(sim: &Simulation) -> usize {
    sim.cloud
        .instances()
        .into_iter()
        .filter(|i| i.state != InstanceState::Terminated)
        .count()
}

/// The claim whose node runs `pod`.
async fn claim_of_pod(sim: &Simulation, pod: &str) -> NodeClaim {
    let node = Api::<Pod>::namespaced(sim.client.clone(), "default")
        .get(pod)
        .await
        .unwrap()
        .spec
        .unwrap()
        .node_name
        .unwrap();
    claims(sim)
        .await
        .into_iter()
        .find(|c| c.status.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str()))
        .unwrap()
}

async fn delete_claim(sim: &Simulation, name: &str) {
    Api::<NodeClaim>::all(sim.client.clone())
        .delete(name, &DeleteParams::background())
        .await
        .unwrap();
}

async fn assert_all_gone(sim: &Simulation, limit: Duration) {
    eventually(
        "every claim, node and live instance gone",
        limit,
        || async {
            claims(sim).await.is_empty() && nodes(sim).await.is_empty() && live_instances(sim) == 0
        },
    )
    .await;
}

/// The pool and one running pod `web`: its NodeClaim and the simulated instance under it.
async fn one_running_pod(sim: &Simulation) -> (NodeClaim, joinery_emulator::cloud::SimInstance) {
    apply_pool(sim, None).await;
    sim.apply(&pod("web", json!({"app": "web"}), json!({})))
        .await
        .unwrap();
    eventually("the pod runs", Duration::from_secs(60), || {
        pod_running(sim, "web")
    })
    .await;
    let claim = claim_of_pod(sim, "web").await;
    let provider_id = claim
        .status
        .as_ref()
        .and_then(|s| s.provider_id.clone())
        .unwrap();
    let instance = sim
        .cloud
        .instances()
        .into_iter()
        .find(|i| i.provider_id == provider_id)
        .unwrap();
    (claim, instance)
}

/// The machine hangs while its node drains: the evicted pod is never confirmed deleted. A
/// minute past its deletion time it stops holding the drain, so the instance is deleted and
/// every finalizer completes (before, the drain waited forever).
#[tokio::test(start_paused = true)]
async fn a_node_whose_kubelet_dies_mid_drain_is_still_terminated() {
    let sim = start().await;
    let (claim, instance) = one_running_pod(&sim).await;
    assert!(sim.cloud.hang(&instance.id), "the instance hangs");
    delete_claim(&sim, claim.metadata.name.as_deref().unwrap()).await;
    assert_all_gone(&sim, Duration::from_secs(90)).await;
    sim.shutdown().await;
}

/// A PodDisruptionBudget that never allows an eviction, and a pod marked do-not-disrupt: the
/// NodeClaim's terminationGracePeriod ends the wait. The pods are deleted (budgets and
/// do-not-disrupt bypassed) so they get their grace period before the deadline, and the
/// claim carries upstream's termination-timestamp annotation.
#[tokio::test(start_paused = true)]
async fn termination_grace_period_overrides_budgets_and_do_not_disrupt() {
    let sim = start().await;
    apply_pool(&sim, Some("90s")).await;
    sim.apply(&pod("guarded", json!({"app": "guarded"}), json!({})))
        .await
        .unwrap();
    let mut precious = pod("precious", json!({"app": "precious"}), json!({}));
    precious["metadata"]["annotations"] = json!({"karpenter.sh/do-not-disrupt": "true"});
    sim.apply(&precious).await.unwrap();
    sim.apply(&json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "never", "namespace": "default"},
                      "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "guarded"}}}}))
        .await
        .unwrap();
    eventually("both pods run", Duration::from_secs(60), || async {
        pod_running(&sim, "guarded").await && pod_running(&sim, "precious").await
    })
    .await;
    let claim = claim_of_pod(&sim, "guarded").await;
    let name = claim.metadata.name.clone().unwrap();
    delete_claim(&sim, &name).await;
    eventually(
        "the claim carries its termination deadline",
        Duration::from_secs(20),
        || async {
            claims(&sim).await.iter().any(|c| {
                c.metadata.name.as_deref() == Some(name.as_str())
                    && c.metadata.annotations.as_ref().is_some_and(|a| {
                        a.contains_key("karpenter.sh/nodeclaim-termination-timestamp")
                    })
            })
        },
    )
    .await;
    // 90 s simulated is 4.5 s real; the drain must not finish long before the deadline.
    tokio::time::sleep(sim.clock.to_real(Duration::from_secs(30))).await;
    assert!(
        claims(&sim)
            .await
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some(name.as_str())),
        "the budget holds at first"
    );
    eventually(
        "the claim says it is draining",
        Duration::from_secs(30),
        || async {
            claims(&sim)
                .await
                .iter()
                .filter(|c| c.metadata.name.as_deref() == Some(name.as_str()))
                .any(|c| {
                    c.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .into_iter()
                        .flatten()
                        .any(|c| {
                            c.type_ == "Drained"
                                && format!("{:?}", c.status) == "Unknown"
                                && c.reason == "Draining"
                        })
                })
        },
    )
    .await;
    // The pods are gone, so their replacements (none here: bare pods) do not keep a node.
    let pods: Api<Pod> = Api::namespaced(sim.client.clone(), "default");
    eventually(
        "the node is gone and the pods were deleted",
        Duration::from_secs(60),
        || async {
            nodes(&sim).await.is_empty()
                && pods.get_opt("guarded").await.unwrap().is_none()
                && pods.get_opt("precious").await.unwrap().is_none()
        },
    )
    .await;
    sim.shutdown().await;
}

/// One NodeClaim's create hangs in the cloud (its answer held back until the plugin's call
/// deadline), while another claim is deleted: the deletion completes without waiting for
/// the hung create, because each claim is reconciled on its own.
#[tokio::test(start_paused = true)]
async fn a_hung_create_does_not_delay_another_claims_finalization() {
    let sim = start().await;
    apply_pool(&sim, None).await;
    // Evicted at once: the first claim's finalization takes a few simulated seconds, well
    // inside the hung create's 60 s call deadline.
    sim.apply(&pod(
        "first",
        json!({"app": "first"}),
        json!({"terminationGracePeriodSeconds": 0}),
    ))
    .await
    .unwrap();
    eventually("the first pod runs", Duration::from_secs(60), || {
        pod_running(&sim, "first")
    })
    .await;
    let first = claim_of_pod(&sim, "first").await;
    // Every create from now on hangs until released.
    sim.cloud.faults().hold_create_answers();
    let apart = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "first"}}, "topologyKey": "kubernetes.io/hostname"}]}}});
    sim.apply(&pod("second", json!({"app": "second"}), apart))
        .await
        .unwrap();
    eventually(
        "a second claim is launching",
        Duration::from_secs(30),
        || async { claims(&sim).await.len() == 2 },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await; // the create is in flight
    // The first pod is evicted by the drain; it keeps the second off the first node until the
    // node is tainted.
    let first_name = first.metadata.name.clone().unwrap();
    delete_claim(&sim, &first_name).await;
    eventually(
        "the first claim is finalized",
        Duration::from_secs(60),
        || async {
            !claims(&sim)
                .await
                .iter()
                .any(|c| c.metadata.name.as_deref() == Some(first_name.as_str()))
        },
    )
    .await;
    // ...while the second claim's first create still hangs: a loop that waited for it would
    // have seen that call time out (a LaunchFailed event) before finishing the first claim,
    // which takes more than one pass.
    let second = claims(&sim).await.remove(0).metadata.name.unwrap();
    let events = Api::<k8s_openapi::api::core::v1::Event>::all(sim.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items;
    let gave_up = events.iter().any(|e| {
        e.reason.as_deref() == Some("LaunchFailed")
            && e.involved_object.name.as_deref() == Some(second.as_str())
    });
    assert!(
        !gave_up,
        "the first claim was finalized only after the hung create gave up"
    );
    sim.cloud.faults().release_create_answers();
    eventually("the second pod runs", Duration::from_secs(120), || {
        pod_running(&sim, "second")
    })
    .await;
    assert_eq!(
        live_instances(&sim),
        1,
        "exactly one live instance: the second claim's"
    );
    assert_eq!(claims(&sim).await.len(), 1);
    sim.shutdown().await;
}

fn deployment(name: &str, replicas: u32) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
           "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                                 "spec": {"terminationGracePeriodSeconds": 5,
                                          "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]}}}})
}

async fn running_pods(sim: &Simulation) -> usize {
    let pods: Api<Pod> = Api::namespaced(sim.client.clone(), "default");
    pods.list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count()
        })
        .unwrap_or(0)
}

/// The host is killed while a PodDisruptionBudget holds a drain; a new host picks the drain
/// up where the cluster says it is, and once the budget is lifted the node goes, the pods
/// run elsewhere, and nothing leaks.
#[tokio::test(start_paused = true)]
async fn host_killed_mid_drain_finishes_the_drain_after_restart() {
    let mut sim = start().await;
    apply_pool(&sim, None).await;
    sim.apply(&deployment("web", 2)).await.unwrap();
    sim.apply(&json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web", "namespace": "default"},
                      "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}))
        .await
        .unwrap();
    eventually("two pods run", Duration::from_secs(60), || async {
        running_pods(&sim).await == 2
    })
    .await;
    let old = nodes(&sim).await;
    assert_eq!(old.len(), 1);
    let old_node = old[0].metadata.name.clone().unwrap();
    Api::<Node>::all(sim.client.clone())
        .delete(&old_node, &DeleteParams::background())
        .await
        .unwrap();
    // The drain is held by the budget: let it try for a while, then kill the host.
    tokio::time::sleep(sim.clock.to_real(Duration::from_secs(20))).await;
    assert!(
        nodes(&sim)
            .await
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(old_node.as_str())),
        "the budget holds the drain"
    );
    sim.crash_controller();
    sim.start_controller().await.unwrap();
    Api::<k8s_openapi::api::policy::v1::PodDisruptionBudget>::namespaced(
        sim.client.clone(),
        "default",
    )
    .delete("web", &DeleteParams::default())
    .await
    .unwrap();
    eventually(
        "the old node is gone and both pods run on new nodes",
        Duration::from_secs(120),
        || async {
            let nodes = nodes(&sim).await;
            !nodes.is_empty()
                && nodes
                    .iter()
                    .all(|n| n.metadata.name.as_deref() != Some(old_node.as_str()))
                && running_pods(&sim).await == 2
        },
    )
    .await;
    // The replacements may come as one node or two (the two pods may be evicted in one drain
    // pass or in two, each pass scheduling what it evicted): either way every node has its
    // claim and its instance, and no instance is left over.
    eventually(
        "a claim and a live instance per node, and no more",
        Duration::from_secs(30),
        || async {
            let nodes = nodes(&sim).await.len();
            (1..=2).contains(&nodes)
                && claims(&sim).await.len() == nodes
                && live_instances(&sim) == nodes
        },
    )
    .await;
    sim.shutdown().await;
}

/// The API server fails a share of writes with 500, throttles bursts with 429 and
/// `Retry-After`, and expires every watch (410 Gone on reconnect) while the controllers run:
/// pods still get nodes, and scaling back to zero still removes every node, claim and
/// instance.
#[tokio::test(start_paused = true)]
async fn controllers_converge_through_api_errors_throttling_and_expired_watches() {
    use joinery_emulator::ApiVerb;
    let sim = start().await;
    apply_pool(&sim, None).await;
    let faults = sim.api.faults();
    for verb in [
        ApiVerb::Create,
        ApiVerb::Patch,
        ApiVerb::Update,
        ApiVerb::Delete,
    ] {
        faults.set_error_rate(verb, 0.1);
    }
    faults.throttle_next(30, Duration::from_secs(1));
    let web = deployment("web", 3);
    eventually(
        "the deployment is created",
        Duration::from_secs(20),
        || async { sim.apply(&web).await.is_ok() },
    )
    .await;
    // Cut every watch and hold reconnections while the cluster moves on, then forget the
    // history: every watch comes back to 410 Gone and must relist.
    tokio::time::sleep(Duration::from_millis(500)).await;
    sim.api.pause_watches();
    sim.api.disconnect_watches();
    tokio::time::sleep(Duration::from_millis(300)).await;
    sim.api.compact_history();
    sim.api.resume_watches();
    eventually("three pods run", Duration::from_secs(120), || async {
        running_pods(&sim).await == 3
    })
    .await;
    assert!(
        sim.api.expired_watch_count() >= 1,
        "watches were told 410 Gone"
    );
    // Scale to zero with the faults still on.
    let scale = json!({"spec": {"replicas": 0}});
    eventually(
        "the deployment is scaled to zero",
        Duration::from_secs(20),
        || async {
            Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(sim.client.clone(), "default")
                .patch(
                    "web",
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&scale),
                )
                .await
                .is_ok()
        },
    )
    .await;
    assert_all_gone(&sim, Duration::from_secs(120)).await;
    sim.shutdown().await;
}

/// A disruption interrupted between tainting the node and deleting its claim (the host
/// died) leaves `karpenter.sh/disrupted` on a node nobody is deleting; the restarted host
/// removes it, so the node takes pods again instead of staying cordoned forever.
#[tokio::test(start_paused = true)]
async fn host_killed_mid_disruption_releases_the_abandoned_taint_on_restart() {
    let mut sim = start().await;
    apply_pool(&sim, None).await;
    // Keep the node: it has a workload, so emptiness never picks it.
    sim.apply(&pod("web", json!({"app": "web"}), json!({})))
        .await
        .unwrap();
    eventually("the pod runs", Duration::from_secs(60), || {
        pod_running(&sim, "web")
    })
    .await;
    sim.crash_controller();
    // What the dead host left: the taint, and the claim's DisruptionReason condition.
    let node = nodes(&sim).await.remove(0);
    let node_name = node.metadata.name.clone().unwrap();
    let mut taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    taints.push(k8s_openapi::api::core::v1::Taint {
        key: "karpenter.sh/disrupted".into(),
        effect: "NoSchedule".into(),
        value: None,
        time_added: None,
    });
    Api::<Node>::all(sim.client.clone())
        .patch(
            &node_name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&json!({"spec": {"taints": taints}})),
        )
        .await
        .unwrap();
    sim.start_controller().await.unwrap();
    eventually(
        "the abandoned taint is removed",
        Duration::from_secs(30),
        || async {
            let node = Api::<Node>::all(sim.client.clone())
                .get(&node_name)
                .await
                .unwrap();
            !node
                .spec
                .and_then(|s| s.taints)
                .unwrap_or_default()
                .iter()
                .any(|t| t.key == "karpenter.sh/disrupted")
        },
    )
    .await;
    assert!(pod_running(&sim, "web").await);
    assert_eq!((claims(&sim).await.len(), live_instances(&sim)), (1, 1));
    sim.shutdown().await;
}

/// Emptiness decides to delete an empty node, but the API server fails the NodeClaim's
/// delete: the candidate is released (untainted, no longer "being disrupted") so that a later
/// pass deletes it once the API recovers. Before, it stayed marked as being disrupted and no
/// pass ever picked it again.
#[tokio::test(start_paused = true)]
async fn a_failed_delete_of_an_empty_nodes_claim_is_retried_by_a_later_pass() {
    use joinery_emulator::ApiVerb;
    let sim = start().await;
    apply_pool(&sim, None).await;
    // Thirty seconds of emptiness before consolidation: time to turn the fault on.
    let pool = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"template": {"spec": {
                    "nodeClassRef": {"group": "sim.joinery.dev", "kind": "SimNodeClass", "name": "default"},
                    "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}]}},
                 "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"}}});
    sim.apply(&pool).await.unwrap();
    sim.apply(&pod(
        "web",
        json!({"app": "web"}),
        json!({"terminationGracePeriodSeconds": 0}),
    ))
    .await
    .unwrap();
    eventually("the pod runs", Duration::from_secs(60), || {
        pod_running(&sim, "web")
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(sim.client.clone(), "default");
    pods.delete("web", &DeleteParams::default()).await.unwrap();
    eventually("the pod is gone", Duration::from_secs(30), || async {
        pods.get_opt("web").await.unwrap().is_none()
    })
    .await;
    sim.api.faults().set_error_rate(ApiVerb::Delete, 1.0);
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::all(sim.client.clone());
    eventually(
        "emptiness tried to delete the claim",
        Duration::from_secs(30),
        || async {
            events
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .any(|e| e.reason.as_deref() == Some("DisruptionTerminating"))
        },
    )
    .await;
    assert_eq!(claims(&sim).await.len(), 1, "the delete failed");
    sim.api.faults().set_error_rate(ApiVerb::Delete, 0.0);
    assert_all_gone(&sim, Duration::from_secs(60)).await;
    sim.shutdown().await;
}

/// The cloud's listing leaves out an instance that still exists (an eventually consistent
/// list) while its Node is not Ready: garbage collection asks for the instance itself before
/// deleting the NodeClaim, finds it, and keeps the claim. Before the fix, one listing that
/// missed the instance was enough to delete the claim and drain its node.
#[tokio::test(start_paused = true)]
async fn a_claim_missing_from_one_listing_is_kept_while_its_instance_exists() {
    let sim = start().await;
    let (claim, instance) = one_running_pod(&sim).await;
    let name = claim.metadata.name.clone().unwrap();
    sim.cloud.faults().hide_from_list(&instance.id);
    // The kubelet stops: after the node monitor grace period the Node is no longer Ready.
    assert!(sim.cloud.hang(&instance.id), "the instance hangs");
    eventually("the node is not Ready", Duration::from_secs(60), || async {
        nodes(&sim).await.iter().all(|node| {
            !node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
    })
    .await;
    // Two garbage-collection rounds (every 120 simulated seconds) and then some.
    tokio::time::sleep(sim.clock.to_real(Duration::from_secs(300))).await;
    assert!(
        claims(&sim)
            .await
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some(name.as_str())
                && c.metadata.deletion_timestamp.is_none()),
        "the claim of an instance that exists is kept"
    );
    assert_eq!(live_instances(&sim), 1);
    sim.shutdown().await;
}
