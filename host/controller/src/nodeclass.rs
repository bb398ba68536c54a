//! NodeClass status: each NodeClass is resolved by the cloud plugin serving its kind and the
//! result written as status conditions (`Ready` plus one per selector the plugin reports).
//! NodePools whose NodeClass is not Ready do not launch.

use crate::state::Ordered;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;
use tokio::sync::watch;

use crate::cloud::plugin_node_class;
use crate::util::{self, k8s_time};
use crate::writes;
use crate::{Context, ControllerError};

/// How often a NodeClass is resolved again although it did not change.
pub const RESOLVE_INTERVAL: Duration = Duration::from_secs(60);

/// Runs the NodeClass status loop.
pub async fn run(ctx: Arc<Context>, stopped: watch::Receiver<bool>) {
    let resolved: Arc<Mutex<Resolved>> = Arc::default();
    util::run_loop(
        ctx,
        stopped,
        "nodeclass.status",
        Duration::from_secs(5),
        move |ctx| {
            let resolved = resolved.clone();
            async move { step(ctx, resolved).await }
        },
    )
    .await;
}

/// Whether a NodeClass has been resolved at least once (its status has a `Ready` condition).
pub fn is_resolved(class: &DynamicObject) -> bool {
    class
        .data
        .pointer("/status/conditions")
        .and_then(|c| c.as_array())
        .into_iter()
        .flatten()
        .any(|c| c.get("type").and_then(|t| t.as_str()) == Some("Ready"))
}

/// Whether a NodeClass object has `Ready=True` in its status.
pub fn is_ready(class: &DynamicObject) -> bool {
    class
        .data
        .pointer("/status/conditions")
        .and_then(|c| c.as_array())
        .into_iter()
        .flatten()
        .any(|c| {
            c.get("type").and_then(|t| t.as_str()) == Some("Ready")
                && c.get("status").and_then(|s| s.as_str()) == Some("True")
        })
}

/// When each NodeClass (UID, generation) was last resolved, and the plugin reload error
/// those resolutions saw: a new one (or its end) makes every class due again, so that
/// [`PLUGINS_RELOADED_CONDITION`] follows the reloads.
#[derive(Default)]
struct Resolved {
    at: HashMap<(String, i64), SystemTime>,
    reload_error: Option<String>,
}

async fn step(ctx: Arc<Context>, resolved: Arc<Mutex<Resolved>>) -> Result<(), ControllerError> {
    let now = ctx.clock.now();
    {
        let reload_error = ctx.cloud.registry().last_error();
        let mut resolved = resolved.lock().expect("resolve times lock");
        if resolved.reload_error != reload_error {
            resolved.at.clear();
            resolved.reload_error = reload_error;
        }
    }
    for (key, store) in &ctx.state.node_classes {
        for class in store.ordered() {
            if class.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let id = (
                class.metadata.uid.clone().unwrap_or_default(),
                class.metadata.generation.unwrap_or_default(),
            );
            let due = resolved
                .lock()
                .expect("resolve times lock")
                .at
                .get(&id)
                .is_none_or(|at| crate::util::due(*at, now, RESOLVE_INTERVAL));
            if !due {
                continue;
            }
            let plugin = ctx.cloud.plugin_for(&key.group, &key.kind)?;
            let problem = host_problem(&ctx, &plugin, &class);
            if let Some((reason, message)) = &problem {
                report_host_problem(&ctx, &class, reason, message).await;
            }
            // A failed resolve is retried soon, but never faster than its backoff allows
            // (nor while the plugin's cloud asked every caller to wait).
            let call = crate::CloudCall::new(
                plugin.name(),
                "resolve-node-class",
                class.metadata.uid.as_deref().unwrap_or(""),
            );
            let result = match problem {
                // The plugin is not asked: the class cannot work whatever it answers.
                Some((reason, message)) => Err(Unresolved::Host(reason, message)),
                None => match ctx
                    .call_cloud(
                        "nodeclass",
                        &call,
                        plugin.resolve_node_class(&plugin_node_class(&class)),
                    )
                    .await
                {
                    Ok(result) => result.map_err(Unresolved::Call),
                    Err(_) => continue,
                },
            };
            let mut retry_soon = false;
            let (mut conditions, status) = match result {
                Ok(resolution) => {
                    let status: serde_json::Value =
                        serde_json::from_str(&resolution.status).unwrap_or_else(|_| json!({}));
                    let mut conditions: Vec<(String, String, String, String)> = resolution
                        .conditions
                        .iter()
                        .map(|c| {
                            (
                                c.type_.clone(),
                                c.status.clone(),
                                c.reason.clone(),
                                c.message.clone(),
                            )
                        })
                        .collect();
                    if !conditions.iter().any(|c| c.0 == "Ready") {
                        let all_true = conditions.iter().all(|c| c.1 == "True");
                        conditions.push(if all_true {
                            ("Ready".into(), "True".into(), "Ready".into(), String::new())
                        } else {
                            (
                                "Ready".into(),
                                "False".into(),
                                "NotReady".into(),
                                "a NodeClass condition is not True".into(),
                            )
                        });
                    }
                    (conditions, status)
                }
                Err(Unresolved::Host(reason, message)) => (
                    vec![(
                        "Ready".into(),
                        "False".into(),
                        reason.into(),
                        util::truncate(&message, 1000),
                    )],
                    json!({}),
                ),
                Err(Unresolved::Call(e)) => {
                    // A transient cloud error (429, 5xx) says nothing about the class: keep
                    // the conditions of a class resolved before, and try again soon.
                    let transient = matches!(
                        &e,
                        joinery_runtime::CallError::Cloud {
                            error: joinery_runtime::contract::CloudError::Retryable(_),
                            ..
                        }
                    );
                    if transient && is_resolved(&class) {
                        tracing::info!(nodeclass = class.metadata.name.as_deref().unwrap_or(""), error = %e, "resolving the NodeClass failed transiently; keeping its status");
                        continue;
                    }
                    if transient {
                        retry_soon = true;
                    }
                    (
                        vec![(
                            "Ready".into(),
                            "False".into(),
                            "ResolutionFailed".into(),
                            util::truncate(&e.to_string(), 1000),
                        )],
                        json!({}),
                    )
                }
            };
            // Added after `Ready` is settled: a failed reload does not stop the class working.
            if let Some(message) = reload_failures(&ctx, &plugin, &class) {
                conditions.push((
                    PLUGINS_RELOADED_CONDITION.into(),
                    "False".into(),
                    RELOAD_FAILED_REASON.into(),
                    util::truncate(&message, 1000),
                ));
            }
            // The plugin's conditions, keeping each one's transition time while its status holds.
            let new_status = |current: &DynamicObject| {
                let previous: Vec<serde_json::Value> = current
                    .data
                    .pointer("/status/conditions")
                    .and_then(|c| c.as_array())
                    .cloned()
                    .unwrap_or_default();
                let conditions: Vec<serde_json::Value> = conditions
                    .iter()
                    .map(|(type_, status, reason, message)| {
                        let same = previous.iter().find(|p| p.get("type").and_then(|t| t.as_str()) == Some(type_.as_str()));
                        let transition = match same {
                            Some(p) if p.get("status").and_then(|s| s.as_str()) == Some(status.as_str()) => {
                                p.get("lastTransitionTime").cloned().unwrap_or_else(|| json!(k8s_time(now)))
                            }
                            _ => json!(k8s_time(now)),
                        };
                        json!({"type": type_, "status": status, "reason": reason, "message": message,
                               "lastTransitionTime": transition, "observedGeneration": id.1})
                    })
                    .collect();
                let mut new_status = if status.is_object() {
                    status.clone()
                } else {
                    json!({})
                };
                new_status["conditions"] = json!(conditions);
                Some(json!({"status": new_status}))
            };
            let (group, version) = class
                .types
                .as_ref()
                .map(|t| {
                    t.api_version
                        .rsplit_once('/')
                        .map(|(g, v)| (g.to_string(), v.to_string()))
                        .unwrap_or_default()
                })
                .unwrap_or_default();
            let resource =
                ApiResource::from_gvk(&GroupVersionKind::gvk(&group, &version, &key.kind));
            let api: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &resource);
            let name = class.metadata.name.clone().unwrap_or_default();
            writes::patch_guarded(&api, &class, writes::Part::Status, new_status).await?;
            if !retry_soon {
                resolved
                    .lock()
                    .expect("resolve times lock")
                    .at
                    .insert(id, now);
            }
            tracing::debug!(nodeclass = %name, "resolved nodeclass");
        }
    }
    Ok(())
}

/// Why a NodeClass was not resolved this time.
enum Unresolved {
    /// The host found it cannot work, before asking the plugin: the `Ready` reason and why.
    Host(&'static str, String),
    /// The plugin's resolve call failed.
    Call(joinery_runtime::CallError),
}

/// The `Ready` reason of a NodeClass whose cloud plugin is granted nothing it asks for.
pub const NOT_GRANTED_REASON: &str = "CapabilitiesNotGranted";

/// The `Ready` reason of a NodeClass whose `userDataRenderer` names no loaded renderer.
pub const RENDERER_NOT_FOUND_REASON: &str = "RendererNotFound";

/// The condition a NodeClass carries while the last reload of a plugin it uses (its cloud
/// plugin or its renderer) failed: `False`, reason [`RELOAD_FAILED_REASON`], the error in the
/// message. It does not count towards `Ready` (the previous version of the plugin keeps
/// serving) and goes away with the next successful reload.
pub const PLUGINS_RELOADED_CONDITION: &str = "PluginsReloaded";

/// The reason of [`PLUGINS_RELOADED_CONDITION`].
pub const RELOAD_FAILED_REASON: &str = "ReloadFailed";

/// The renderer `class` names (`spec.userDataRenderer.name`, else the default).
fn renderer_of(class: &DynamicObject) -> Option<String> {
    let name = class.metadata.name.as_deref().unwrap_or_default();
    let object = serde_json::to_value(&class.data).unwrap_or_default();
    Some(
        crate::bootstrap::NodeClassBootstrap::from_object(&object, name)
            .ok()?
            .renderer
            .unwrap_or_else(|| crate::bootstrap::DEFAULT_RENDERER.to_string()),
    )
}

/// Why the last reload failed, for each plugin `class` uses that it failed on.
fn reload_failures(
    ctx: &Context,
    plugin: &joinery_runtime::plugin::LoadedPlugin,
    class: &DynamicObject,
) -> Option<String> {
    let registry = ctx.cloud.registry();
    let mut failures: Vec<String> = registry
        .reload_failure_for(plugin.name())
        .into_iter()
        .collect();
    if let Some(renderer) = renderer_of(class)
        && renderer != plugin.name()
    {
        failures.extend(registry.reload_failure_for(&renderer));
    }
    // One failure naming no plugin applies to both: say it once.
    failures.dedup_by(|a, b| a.split_once("): ").map(|x| x.1) == b.split_once("): ").map(|x| x.1));
    (!failures.is_empty()).then(|| failures.join("; "))
}

/// What keeps `class` from working that the host sees without the plugin: its cloud plugin
/// granted nothing it asks for, or a renderer that no loaded plugin provides.
fn host_problem(
    ctx: &Context,
    plugin: &joinery_runtime::plugin::LoadedPlugin,
    class: &DynamicObject,
) -> Option<(&'static str, String)> {
    if let Some(message) = ctx.cloud.registry().not_granted(plugin) {
        return Some((NOT_GRANTED_REASON, message));
    }
    let renderer = renderer_of(class)?;
    let set = ctx.cloud.registry().current();
    let renderers: Vec<&str> = set
        .iter()
        .filter(|p| p.kind() == joinery_runtime::manifest::PluginKind::UserdataRenderer)
        .map(|p| p.name())
        .collect();
    (!renderers.contains(&renderer.as_str())).then(|| {
        (
            RENDERER_NOT_FOUND_REASON,
            format!(
                "userDataRenderer.name {renderer:?}: no loaded plugin renders userData under that name; the loaded renderers are {}",
                renderers.join(", ")
            ),
        )
    })
}

/// A warning event on the class and one log line, when its `Ready` condition does not say
/// this already (the loop runs often; the operator hears of it once per change).
async fn report_host_problem(ctx: &Context, class: &DynamicObject, reason: &str, message: &str) {
    let already = class
        .data
        .pointer("/status/conditions")
        .and_then(|c| c.as_array())
        .into_iter()
        .flatten()
        .any(|c| {
            c.get("type").and_then(|t| t.as_str()) == Some("Ready")
                && c.get("reason").and_then(|r| r.as_str()) == Some(reason)
                && c.get("message").and_then(|m| m.as_str())
                    == Some(util::truncate(message, 1000).as_str())
        });
    if already {
        return;
    }
    let name = class.metadata.name.as_deref().unwrap_or_default();
    let kind = class
        .types
        .as_ref()
        .map(|t| t.kind.as_str())
        .unwrap_or("NodeClass");
    tracing::warn!(nodeclass = %name, "{kind} {name} is not Ready: {message}");
    ctx.events
        .warning(&crate::events::Involved::dynamic(class), reason, message)
        .await;
}
