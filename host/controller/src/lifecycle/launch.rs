//! Launching a NodeClaim: render its userData, create the instance through the cloud
//! plugin (finding the one an earlier attempt made first), and what a failed launch does
//! (conditions, events, unavailable offerings, backoff).

use super::*;

/// Launches a claim: the instance this process already launched, else one an earlier create
/// left (found by tag), else a new `create` — unless that call is backing off.
pub(super) async fn launch(
    ctx: &Context,
    claim: &NodeClaim,
    create_backing_off: bool,
) -> Result<(), ControllerError> {
    let name = claim.metadata.name.clone().unwrap_or_default();
    let uid = claim.metadata.uid.clone().unwrap_or_default();
    let key = class_key(claim);
    let involved = Involved::of(claim);
    let Some(class) = ctx.state.node_class(&key, &claim.spec.node_class_ref.name) else {
        return Ok(());
    };
    let plugin = ctx.cloud.plugin_for(&key.group, &key.kind)?;
    let cached = ctx.inflight.launched(&uid);
    let instance = match cached {
        Some(instance) => instance,
        None => {
            // A previous life of this process (or a failed call) may have created the instance.
            let adopted = if ctx.inflight.may_have_launched(claim) {
                find_instance_of(ctx, &plugin, claim).await?
            } else {
                None
            };
            match adopted {
                Some(instance) => {
                    tracing::info!(nodeclaim = %name, provider_id = %instance.provider_id, "adopted an instance launched earlier");
                    instance
                }
                None => {
                    if create_backing_off {
                        return Ok(());
                    }
                    let call = CloudCall::new(plugin.name(), "create", &uid);
                    let platform_bootstrap = plugin
                        .manifest()
                        .node_class
                        .as_ref()
                        .is_some_and(|n| n.bootstrap == NodeBootstrap::Platform);
                    let rendered = if platform_bootstrap {
                        Ok(String::new())
                    } else {
                        render_user_data(ctx, claim, &class).await
                    };
                    let user_data = match rendered {
                        Ok(text) => text,
                        Err(e) => {
                            let message = util::truncate(&e.to_string(), 300);
                            // Backs off like a failed create: the claim is retried later, not
                            // re-rendered on every pass.
                            let failed: Result<(), CallError> = Err(match e {
                                ControllerError::Plugin(call_error) => call_error,
                                other => CallError::Host {
                                    plugin: plugin.name().to_string(),
                                    op: "create",
                                    message: other.to_string(),
                                },
                            });
                            ctx.cloud_outcome(CONTROLLER, &call, &failed);
                            ctx.events
                                .warning(&involved, "LaunchFailed", &message)
                                .await;
                            return write_status(
                                ctx,
                                claim,
                                vec![condition(
                                    ctx,
                                    LAUNCHED,
                                    ConditionStatus::Unknown,
                                    "LaunchFailed",
                                    message,
                                )],
                                json!({}),
                            )
                            .await;
                        }
                    };
                    let request = contract::CreateRequest {
                        claim: plugin_node_claim(claim),
                        node_class: plugin_node_class(&class),
                        user_data,
                    };
                    ctx.inflight.record_create_attempt(&uid);
                    let started = std::time::Instant::now();
                    let result = plugin.create(&request).await;
                    ctx.cloud_call_took(CONTROLLER, &call, started);
                    let retry_in = ctx.cloud_outcome(CONTROLLER, &call, &result);
                    match result {
                        Ok(instance) => instance,
                        Err(e) => {
                            return launch_failed(ctx, claim, e, retry_in.unwrap_or_default())
                                .await;
                        }
                    }
                }
            }
        }
    };
    let mut instance = instance;
    if instance.allocatable.is_empty() {
        // "Compute it from the instance type": capacity minus the type's overhead, so the
        // claim counts as in-flight capacity before its Node registers.
        if let Ok(types) = ctx.cloud.instance_types(&class).await
            && let Some(t) = types.iter().find(|t| t.name() == instance.instance_type)
        {
            instance.allocatable = t
                .allocatable()
                .to_quantities()
                .into_iter()
                .map(|(name, quantity)| contract::Resource { name, quantity })
                .collect();
        }
    }
    ctx.inflight.record_launched(&uid, instance.clone());
    // Labels the cloud decided (instance type, zone, capacity type, provider labels); the
    // claim's own labels win.
    let current = claim.metadata.labels.clone().unwrap_or_default();
    let mut add = serde_json::Map::new();
    let mut cloud_labels: Vec<(String, String)> = instance
        .labels
        .iter()
        .map(|kv| (kv.key.clone(), kv.value.clone()))
        .collect();
    cloud_labels.push((
        labels::INSTANCE_TYPE_LABEL.into(),
        instance.instance_type.clone(),
    ));
    cloud_labels.push((labels::ZONE_LABEL.into(), instance.zone.clone()));
    cloud_labels.push((
        labels::CAPACITY_TYPE_LABEL.into(),
        instance.capacity_type.clone(),
    ));
    for (k, v) in cloud_labels {
        if !current.contains_key(&k) && !v.is_empty() {
            add.insert(k, json!(v));
        }
    }
    if !add.is_empty() {
        merge_patch(&claims(ctx), &name, json!({"metadata": {"labels": add}})).await?;
    }
    let list = |items: &[contract::Resource]| {
        items
            .iter()
            .map(|r| (r.name.clone(), json!(r.quantity)))
            .collect::<serde_json::Map<String, serde_json::Value>>()
    };
    let extra = json!({
        "providerID": instance.provider_id,
        "imageID": instance.image_id,
        "capacity": list(&instance.capacity),
        "allocatable": list(&instance.allocatable),
    });
    write_status(
        ctx,
        claim,
        vec![condition(
            ctx,
            LAUNCHED,
            ConditionStatus::True,
            "Launched",
            "",
        )],
        extra,
    )
    .await?;
    tracing::info!(nodeclaim = %name, provider_id = %instance.provider_id, instance_type = %instance.instance_type,
        zone = %instance.zone, capacity_type = %instance.capacity_type, "launched nodeclaim");
    ctx.events
        .normal(
            &involved,
            "Launched",
            &format!("Launched {} in {}", instance.instance_type, instance.zone),
        )
        .await;
    Ok(())
}

/// The live instance a claim's create may have launched, found by the claim name its tags
/// carry (for a create whose result never reached status). The `list` call backs off per
/// claim like every cloud call.
pub(super) async fn find_instance_of(
    ctx: &Context,
    plugin: &joinery_runtime::plugin::LoadedPlugin,
    claim: &NodeClaim,
) -> Result<Option<contract::Instance>, ControllerError> {
    let name = claim.metadata.name.clone().unwrap_or_default();
    let call = CloudCall::new(
        plugin.name(),
        "list",
        &claim.metadata.uid.clone().unwrap_or_default(),
    );
    let instances = ctx.call_cloud(CONTROLLER, &call, plugin.list()).await??;
    Ok(instances.into_iter().find(|i| {
        i.node_claim.as_deref() == Some(name.as_str())
            && i.state != contract::InstanceState::Terminated
    }))
}

async fn launch_failed(
    ctx: &Context,
    claim: &NodeClaim,
    error: CallError,
    retry_in: Duration,
) -> Result<(), ControllerError> {
    let name = claim.metadata.name.clone().unwrap_or_default();
    let involved = Involved::of(claim);
    let message = util::truncate(&error.to_string(), 300);
    match &error {
        CallError::Cloud {
            error: CloudError::InsufficientCapacity(ice),
            ..
        } => {
            for o in &ice.offerings {
                ctx.cloud.mark_unavailable((
                    o.instance_type.clone(),
                    o.zone.clone(),
                    o.capacity_type.clone(),
                ));
            }
            if ice.offerings.is_empty() {
                // "All offerings of the request": every type the claim allows, in the zones and
                // capacity types it allows (`*` where it does not restrict them).
                for offering in claim_offerings(claim) {
                    ctx.cloud.mark_unavailable(offering);
                }
            }
            tracing::info!(nodeclaim = %name, %message, "insufficient capacity; deleting the NodeClaim so its pods are provisioned again");
            ctx.events
                .warning(
                    &involved,
                    "InsufficientCapacityError",
                    &format!("NodeClaim {name} event: {message}"),
                )
                .await;
            ctx.inflight
                .forget_create_attempt(&claim.metadata.uid.clone().unwrap_or_default());
            delete_claim(ctx, &name).await
        }
        CallError::Cloud {
            error: CloudError::NodeClassNotReady(m),
            ..
        } => {
            ctx.events.warning(&involved, "NodeClassNotReady", m).await;
            write_status(
                ctx,
                claim,
                vec![condition(
                    ctx,
                    LAUNCHED,
                    ConditionStatus::Unknown,
                    "NodeClassNotReady",
                    message,
                )],
                json!({}),
            )
            .await
        }
        _ => {
            tracing::warn!(nodeclaim = %name, %message, retry_in_ms = retry_in.as_millis() as u64, "launch failed; will retry");
            ctx.events
                .warning(&involved, "LaunchFailed", &message)
                .await;
            write_status(
                ctx,
                claim,
                vec![condition(
                    ctx,
                    LAUNCHED,
                    ConditionStatus::Unknown,
                    "LaunchFailed",
                    message,
                )],
                json!({}),
            )
            .await
        }
    }
}

/// The offerings a NodeClaim allows, from its instance-type, zone and capacity-type
/// requirements (`*` for a key it does not restrict with `In`).
fn claim_offerings(claim: &NodeClaim) -> Vec<crate::cloud::OfferingKey> {
    let values = |key: &str| -> Vec<String> {
        claim
            .spec
            .requirements
            .iter()
            .find(|r| r.key == key && r.operator == joinery_api::requirements::Operator::In)
            .and_then(|r| r.values.clone())
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| vec!["*".to_string()])
    };
    let (types, zones, capacity_types) = (
        values(labels::INSTANCE_TYPE_LABEL),
        values(labels::ZONE_LABEL),
        values(labels::CAPACITY_TYPE_LABEL),
    );
    let mut out = Vec::new();
    for t in types.iter().filter(|t| *t != "*") {
        for z in &zones {
            for c in &capacity_types {
                out.push((t.clone(), z.clone(), c.clone()));
            }
        }
    }
    out
}

async fn render_user_data(
    ctx: &Context,
    claim: &NodeClaim,
    class: &kube::api::DynamicObject,
) -> Result<String, ControllerError> {
    let class_name = class.metadata.name.clone().unwrap_or_default();
    let object = serde_json::to_value(&class.data).unwrap_or_default();
    let bootstrap = NodeClassBootstrap::from_object(&object, &class_name)
        .map_err(|e| ControllerError::Invalid(e.to_string()))?;
    let (group, kind) = group_kind(class);
    let cluster = ClusterInfo {
        name: ctx.settings.cluster_name.clone(),
        endpoint: ctx.settings.cluster_endpoint.clone(),
        provider_id_prefix: ctx.cloud.provider_id_prefix(&group, &kind),
    };
    let renderer = bootstrap
        .renderer
        .clone()
        .unwrap_or_else(|| DEFAULT_RENDERER.to_string());
    let plugin = ctx
        .cloud
        .registry()
        .current()
        .require(&renderer, PluginKind::UserdataRenderer)?;
    // Secrets the operator granted to this renderer reach it through the context, as
    // `secret-name/key` entries (a join token, say).
    let mut secrets = Vec::new();
    let mut unreadable = Vec::new();
    for name in &plugin.capabilities().grant().secrets {
        match ctx.secrets.get(name).await {
            Ok(entries) => {
                for (key, value) in entries {
                    match String::from_utf8(value) {
                        Ok(value) => secrets.push(joinery_runtime::contract::KeyValue {
                            key: format!("{name}/{key}"),
                            value,
                        }),
                        Err(_) => {
                            tracing::warn!(secret = %name, %key, renderer = %renderer, "secret value is not UTF-8; not passed to the renderer")
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!(secret = %name, renderer = %renderer, error = %e, "cannot read a secret granted to the renderer");
                unreadable.push(e.to_string());
            }
        }
    }
    let context = render_context(claim, &bootstrap, &cluster, secrets);
    match plugin.render(&context).await {
        Ok(text) => Ok(text),
        Err(mut e) => {
            // The renderer can only say the secret did not reach it; the host knows why.
            if let joinery_runtime::CallError::Render {
                error: joinery_runtime::contract::RenderError::MissingSecret(message),
                ..
            } = &mut e
                && !unreadable.is_empty()
            {
                message.push_str(&format!(
                    "; it is granted to renderer {renderer}, but: {}",
                    unreadable.join("; ")
                ));
            }
            Err(e.into())
        }
    }
}
