//! The columns kubectl prints for each built-in type, by API group and resource, and the
//! Events printer's own cell readers.

use super::*;

/// The columns of a built-in type: Name first (except for Events, whose name is a wide
/// column at the end), then the type's own columns, or Age for types without a printer.
pub(super) fn builtin_columns(group: &str, plural: &str) -> Vec<Column> {
    if matches!(
        (group, plural),
        ("", "events") | ("events.k8s.io", "events")
    ) {
        return event_columns(group == "events.k8s.io");
    }
    let mut columns = vec![name_column()];
    columns.extend(own_columns(group, plural));
    columns
}

/// The columns after Name of a built-in type.
pub(super) fn own_columns(group: &str, plural: &str) -> Vec<Column> {
    let age = age_column;
    match (group, plural) {
        ("", "pods") => vec![
            Column::computed(
                "Ready",
                "string",
                "The aggregate readiness state of this pod for accepting traffic.",
                pod_ready,
            ),
            Column::computed(
                "Status",
                "string",
                "The aggregate status of the containers in this pod.",
                |pod, _| Value::String(pod_status(pod)),
            ),
            Column::computed(
                "Restarts",
                "string",
                "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
                pod_restarts,
            ),
            age(),
            Column::computed(
                "IP",
                "string",
                "The IP address assigned to the pod.",
                |pod, _| text_or_none(pod.pointer("/status/podIP")),
            )
            .wide(),
            Column::computed(
                "Node",
                "string",
                "The name of the node the pod is assigned to.",
                |pod, _| text_or_none(pod.pointer("/spec/nodeName")),
            )
            .wide(),
            Column::computed(
                "Nominated Node",
                "string",
                "The name of the node the pod is nominated to run on.",
                |pod, _| text_or_none(pod.pointer("/status/nominatedNodeName")),
            )
            .wide(),
            Column::computed(
                "Readiness Gates",
                "string",
                "The readiness gates of the pod and how many of them pass.",
                pod_readiness_gates,
            )
            .wide(),
        ],
        ("", "nodes") => vec![
            Column::computed("Status", "string", "The status of the node.", node_status),
            Column::computed("Roles", "string", "The roles of the node.", node_roles),
            age(),
            Column::computed(
                "Version",
                "string",
                "Kubelet Version reported by the node.",
                |node, _| Value::String(text(node.pointer("/status/nodeInfo/kubeletVersion"))),
            ),
            Column::computed(
                "Internal-IP",
                "string",
                "The node's internal IP address.",
                |node, _| node_address(node, "InternalIP"),
            )
            .wide(),
            Column::computed(
                "External-IP",
                "string",
                "The node's external IP address.",
                |node, _| node_address(node, "ExternalIP"),
            )
            .wide(),
            Column::computed(
                "OS-Image",
                "string",
                "OS Image reported by the node.",
                |node, _| unknown_if_empty(node.pointer("/status/nodeInfo/osImage")),
            )
            .wide(),
            Column::computed(
                "Kernel-Version",
                "string",
                "Kernel Version reported by the node.",
                |node, _| unknown_if_empty(node.pointer("/status/nodeInfo/kernelVersion")),
            )
            .wide(),
            Column::computed(
                "Container-Runtime",
                "string",
                "Container Runtime Version reported by the node.",
                |node, _| {
                    unknown_if_empty(node.pointer("/status/nodeInfo/containerRuntimeVersion"))
                },
            )
            .wide(),
        ],
        ("", "namespaces") => vec![
            Column::computed(
                "Status",
                "string",
                "The status of the namespace.",
                |ns, _| Value::String(text(ns.pointer("/status/phase"))),
            ),
            age(),
        ],
        ("", "configmaps") => vec![
            Column::computed(
                "Data",
                "integer",
                "The number of entries in the ConfigMap.",
                |cm, _| json!(entries(cm.get("data")) + entries(cm.get("binaryData"))),
            ),
            age(),
        ],
        ("", "secrets") => vec![
            Column::computed("Type", "string", "The type of the secret.", |secret, _| {
                Value::String(text(secret.get("type")))
            }),
            Column::computed(
                "Data",
                "integer",
                "The number of entries in the Secret.",
                |secret, _| json!(entries(secret.get("data")) + entries(secret.get("stringData"))),
            ),
            age(),
        ],
        ("", "services") => vec![
            Column::computed("Type", "string", "The type of the service.", |svc, _| {
                Value::String(text(svc.pointer("/spec/type")).if_empty("ClusterIP"))
            }),
            Column::computed(
                "Cluster-IP",
                "string",
                "The cluster IP of the service.",
                |svc, _| text_or_none(svc.pointer("/spec/clusterIP")),
            ),
            Column::computed(
                "External-IP",
                "string",
                "The external IPs of the service.",
                service_external_ips,
            ),
            Column::computed(
                "Port(s)",
                "string",
                "The ports of the service.",
                service_ports,
            ),
            age(),
            Column::computed(
                "Selector",
                "string",
                "The selector of the service.",
                |svc, _| Value::String(map_as_selector(svc.pointer("/spec/selector"))),
            )
            .wide(),
        ],
        ("apps", "deployments") => vec![
            Column::computed(
                "Ready",
                "string",
                "Number of the pod with ready state.",
                |d, _| {
                    Value::String(format!(
                        "{}/{}",
                        int(d.pointer("/status/readyReplicas")),
                        int(d.pointer("/spec/replicas"))
                    ))
                },
            ),
            Column::computed(
                "Up-to-date",
                "integer",
                "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
                |d, _| json!(int(d.pointer("/status/updatedReplicas"))),
            ),
            Column::computed(
                "Available",
                "integer",
                "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
                |d, _| json!(int(d.pointer("/status/availableReplicas"))),
            ),
            age(),
            containers_column(),
            images_column(),
            selector_column(),
        ],
        ("apps", "replicasets") => vec![
            Column::computed("Desired", "integer", "Number of desired pods.", |rs, _| {
                json!(int(rs.pointer("/spec/replicas")))
            }),
            Column::computed(
                "Current",
                "integer",
                "Number of actual replicas.",
                |rs, _| json!(int(rs.pointer("/status/replicas"))),
            ),
            Column::computed("Ready", "integer", "Number of ready replicas.", |rs, _| {
                json!(int(rs.pointer("/status/readyReplicas")))
            }),
            age(),
            containers_column(),
            images_column(),
            selector_column(),
        ],
        ("apps", "daemonsets") => vec![
            Column::computed(
                "Desired",
                "integer",
                "The total number of nodes that should be running the daemon pod.",
                |ds, _| json!(int(ds.pointer("/status/desiredNumberScheduled"))),
            ),
            Column::computed(
                "Current",
                "integer",
                "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod.",
                |ds, _| json!(int(ds.pointer("/status/currentNumberScheduled"))),
            ),
            Column::computed(
                "Ready",
                "integer",
                "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready.",
                |ds, _| json!(int(ds.pointer("/status/numberReady"))),
            ),
            Column::computed(
                "Up-to-date",
                "integer",
                "The total number of nodes that are running updated daemon pod.",
                |ds, _| json!(int(ds.pointer("/status/updatedNumberScheduled"))),
            ),
            Column::computed(
                "Available",
                "integer",
                "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available.",
                |ds, _| json!(int(ds.pointer("/status/numberAvailable"))),
            ),
            Column::computed(
                "Node Selector",
                "string",
                "NodeSelector is a selector which must be true for the pod to fit on a node.",
                |ds, _| {
                    Value::String(map_as_selector(
                        ds.pointer("/spec/template/spec/nodeSelector"),
                    ))
                },
            ),
            age(),
            containers_column(),
            images_column(),
            selector_column(),
        ],
        ("batch", "jobs") => vec![
            Column::computed("Status", "string", "Status of the job.", |job, _| {
                Value::String(job_status(job))
            }),
            Column::computed(
                "Completions",
                "string",
                "The completed job pods out of those it needs.",
                |job, _| Value::String(job_completions(job)),
            ),
            Column::computed(
                "Duration",
                "string",
                "Time the job took to complete (or has been running).",
                job_duration,
            ),
            age(),
            containers_column(),
            images_column(),
            selector_column(),
        ],
        ("batch", "cronjobs") => vec![
            Column::computed(
                "Schedule",
                "string",
                "The schedule in Cron format.",
                |cronjob, _| Value::String(text(cronjob.pointer("/spec/schedule"))),
            ),
            Column::computed(
                "Timezone",
                "string",
                "The time zone of the schedule.",
                |cronjob, _| {
                    Value::String(text(cronjob.pointer("/spec/timeZone")).if_empty("<none>"))
                },
            ),
            Column::computed(
                "Suspend",
                "boolean",
                "Whether later runs are suspended.",
                |cronjob, _| {
                    let suspended = cronjob
                        .pointer("/spec/suspend")
                        .and_then(Value::as_bool)
                        .unwrap_or(false);
                    Value::String(if suspended { "True" } else { "False" }.into())
                },
            ),
            Column::computed(
                "Active",
                "integer",
                "The number of jobs running.",
                |cronjob, _| {
                    json!(
                        cronjob
                            .pointer("/status/active")
                            .and_then(Value::as_array)
                            .map_or(0, Vec::len)
                    )
                },
            ),
            Column::computed(
                "Last Schedule",
                "date",
                "When the cron job last created a job.",
                |cronjob, now| match parse_timestamp(cronjob.pointer("/status/lastScheduleTime")) {
                    Some(at) => Value::String(human_duration(since(at, now))),
                    None => Value::String("<none>".into()),
                },
            ),
            age(),
            Column::computed(
                "Containers",
                "string",
                "Names of each container in the template.",
                |cronjob, _| Value::String(cronjob_containers(cronjob, "name")),
            )
            .wide(),
            Column::computed(
                "Images",
                "string",
                "Images referenced by each container in the template.",
                |cronjob, _| Value::String(cronjob_containers(cronjob, "image")),
            )
            .wide(),
            Column::computed(
                "Selector",
                "string",
                "Label selector for the jobs' pods.",
                |cronjob, _| {
                    Value::String(
                        label_selector_string(cronjob.pointer("/spec/jobTemplate/spec/selector"))
                            .if_empty("<none>"),
                    )
                },
            )
            .wide(),
        ],
        ("policy", "poddisruptionbudgets") => vec![
            Column::computed(
                "Min Available",
                "string",
                "The minimum number of pods that must be available.",
                |pdb, _| Value::String(int_or_string(pdb.pointer("/spec/minAvailable"))),
            ),
            Column::computed(
                "Max Unavailable",
                "string",
                "The maximum number of pods that may be unavailable.",
                |pdb, _| Value::String(int_or_string(pdb.pointer("/spec/maxUnavailable"))),
            ),
            Column::computed(
                "Allowed Disruptions",
                "integer",
                "Calculated number of pods that may be disrupted at this time.",
                |pdb, _| json!(int(pdb.pointer("/status/disruptionsAllowed"))),
            ),
            age(),
        ],
        ("coordination.k8s.io", "leases") => vec![
            Column::computed(
                "Holder",
                "string",
                "The holder of the lease.",
                |lease, _| Value::String(text(lease.pointer("/spec/holderIdentity"))),
            ),
            age(),
        ],
        ("storage.k8s.io", "storageclasses") => vec![
            Column::computed(
                "Provisioner",
                "string",
                "The provisioner of the storage class.",
                |sc, _| Value::String(text(sc.get("provisioner"))),
            ),
            Column::computed(
                "ReclaimPolicy",
                "string",
                "What happens to a volume when released from its claim.",
                |sc, _| Value::String(text(sc.get("reclaimPolicy")).if_empty("Delete")),
            ),
            Column::computed(
                "VolumeBindingMode",
                "string",
                "When volumes are bound and provisioned.",
                |sc, _| Value::String(text(sc.get("volumeBindingMode")).if_empty("Immediate")),
            ),
            Column::computed(
                "AllowVolumeExpansion",
                "string",
                "Whether the storage class allows volume expansion.",
                |sc, _| {
                    Value::String(
                        sc.get("allowVolumeExpansion")
                            .and_then(Value::as_bool)
                            .unwrap_or(false)
                            .to_string(),
                    )
                },
            ),
            age(),
        ],
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            vec![Column::computed(
                "Created At",
                "date",
                "The time the CustomResourceDefinition was created.",
                |crd, _| {
                    crd.pointer("/metadata/creationTimestamp")
                        .cloned()
                        .unwrap_or(Value::Null)
                },
            )]
        }
        _ => vec![age()],
    }
}

pub(super) fn containers_column() -> Column {
    Column::computed(
        "Containers",
        "string",
        "Names of each container in the template.",
        |object, _| {
            Value::String(
                template_containers(object)
                    .iter()
                    .map(|c| text(c.get("name")))
                    .collect::<Vec<_>>()
                    .join(","),
            )
        },
    )
    .wide()
}

pub(super) fn images_column() -> Column {
    Column::computed(
        "Images",
        "string",
        "Images referenced by each container in the template.",
        |object, _| {
            Value::String(
                template_containers(object)
                    .iter()
                    .map(|c| text(c.get("image")))
                    .collect::<Vec<_>>()
                    .join(","),
            )
        },
    )
    .wide()
}

pub(super) fn selector_column() -> Column {
    Column::computed(
        "Selector",
        "string",
        "Label selector for pods.",
        |object, _| {
            let selector = label_selector_string(object.pointer("/spec/selector"));
            Value::String(if selector.is_empty() {
                "<none>".into()
            } else {
                selector
            })
        },
    )
    .wide()
}

/// Whether a condition of `object` of type `kind` is `True`.
fn condition_holds(object: &Value, kind: &str) -> bool {
    object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| c.get("type") == Some(&json!(kind)) && c.get("status") == Some(&json!("True")))
}

/// A Job's STATUS as kubectl prints it: `Terminating`, else its first finished or notable
/// condition, else `Running`.
pub(super) fn job_status(job: &Value) -> String {
    if job.pointer("/metadata/deletionTimestamp").is_some() {
        return "Terminating".into();
    }
    for kind in [
        "Complete",
        "Failed",
        "Suspended",
        "FailureTarget",
        "SuccessCriteriaMet",
    ] {
        if condition_holds(job, kind) {
            return kind.into();
        }
    }
    "Running".into()
}

/// A Job's COMPLETIONS: `succeeded/completions`, or for a Job without completions
/// `succeeded/1` (`succeeded/1 of parallelism` when several pods run at once).
pub(super) fn job_completions(job: &Value) -> String {
    let succeeded = int(job.pointer("/status/succeeded"));
    match job.pointer("/spec/completions").and_then(Value::as_i64) {
        Some(completions) => format!("{succeeded}/{completions}"),
        None => match int(job.pointer("/spec/parallelism")) {
            parallelism if parallelism > 1 => format!("{succeeded}/1 of {parallelism}"),
            _ => format!("{succeeded}/1"),
        },
    }
}

/// A Job's DURATION: from its start to its completion, or to now while it runs; empty before
/// it starts.
fn job_duration(job: &Value, now: SystemTime) -> Value {
    let Some(start) = parse_timestamp(job.pointer("/status/startTime")) else {
        return Value::String(String::new());
    };
    let end = parse_timestamp(job.pointer("/status/completionTime")).unwrap_or(now);
    Value::String(human_duration(since(start, end)))
}

/// `field` of each container of a CronJob's job template, comma-separated.
fn cronjob_containers(cronjob: &Value, field: &str) -> String {
    cronjob
        .pointer("/spec/jobTemplate/spec/template/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|c| text(c.get(field)))
        .collect::<Vec<_>>()
        .join(",")
}

pub(super) fn template_containers(object: &Value) -> Vec<&Value> {
    object
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect()
}

pub(super) fn event_columns(events_v1: bool) -> Vec<Column> {
    let (last_seen, message, source, first_seen, count): (
        fn(&Value, SystemTime) -> Value,
        _,
        _,
        _,
        _,
    ) = if events_v1 {
        (
            |event, now| Value::String(event_last_seen(event, now, true)),
            Column::computed(
                "Message",
                "string",
                "A human-readable description of the status of this operation.",
                |event, _| Value::String(text(event.get("note"))),
            ),
            Column::computed(
                "Source",
                "string",
                "The component reporting this event.",
                |event, _| Value::String(event_source(event, true)),
            ),
            Column::computed(
                "First Seen",
                "string",
                "The first time at which the event was first recorded.",
                |event, now| Value::String(event_first_seen(event, now, true)),
            ),
            Column::computed(
                "Count",
                "string",
                "The number of times this event has occurred.",
                |event, _| Value::String(event_count(event, true).to_string()),
            ),
        )
    } else {
        (
            |event, now| Value::String(event_last_seen(event, now, false)),
            Column::computed(
                "Message",
                "string",
                "A human-readable description of the status of this operation.",
                |event, _| Value::String(text(event.get("message"))),
            ),
            Column::computed(
                "Source",
                "string",
                "The component reporting this event.",
                |event, _| Value::String(event_source(event, false)),
            ),
            Column::computed(
                "First Seen",
                "string",
                "The first time at which the event was first recorded.",
                |event, now| Value::String(event_first_seen(event, now, false)),
            ),
            Column::computed(
                "Count",
                "string",
                "The number of times this event has occurred.",
                |event, _| Value::String(event_count(event, false).to_string()),
            ),
        )
    };
    let involved: fn(&Value, SystemTime) -> Value = if events_v1 {
        |event, _| Value::String(event_object(event.get("regarding")))
    } else {
        |event, _| Value::String(event_object(event.get("involvedObject")))
    };
    let subobject: fn(&Value, SystemTime) -> Value = if events_v1 {
        |event, _| Value::String(text(event.pointer("/regarding/fieldPath")))
    } else {
        |event, _| Value::String(text(event.pointer("/involvedObject/fieldPath")))
    };
    let mut name = name_column();
    name.priority = 1;
    vec![
        Column::computed(
            "Last Seen",
            "string",
            "The time at which the most recent occurrence of this event was recorded.",
            last_seen,
        ),
        Column::computed(
            "Type",
            "string",
            "Type of this event (Normal, Warning), new types could be added in the future.",
            |event, _| Value::String(text(event.get("type"))),
        ),
        Column::computed(
            "Reason",
            "string",
            "This should be a short, machine understandable string that gives the reason for the transition into the object's current status.",
            |event, _| Value::String(text(event.get("reason"))),
        ),
        Column::computed(
            "Object",
            "string",
            "The object that this event is about.",
            involved,
        ),
        Column::computed(
            "Subobject",
            "string",
            "The subobject (a field path) that this event is about.",
            subobject,
        )
        .wide(),
        source.wide(),
        message,
        first_seen.wide(),
        count.wide(),
        name,
    ]
}

pub(super) fn event_object(reference: Option<&Value>) -> String {
    let reference = reference.unwrap_or(&Value::Null);
    format!(
        "{}/{}",
        text(reference.get("kind")).to_lowercase(),
        text(reference.get("name"))
    )
}

pub(super) fn event_count(event: &Value, events_v1: bool) -> i64 {
    if let Some(count) = event.pointer("/series/count").and_then(Value::as_i64) {
        return count;
    }
    let field = if events_v1 {
        "deprecatedCount"
    } else {
        "count"
    };
    event.get(field).and_then(Value::as_i64).unwrap_or(1).max(1)
}

pub(super) fn event_first_seen(event: &Value, now: SystemTime, events_v1: bool) -> String {
    let first = if events_v1 {
        "deprecatedFirstTimestamp"
    } else {
        "firstTimestamp"
    };
    match parse_timestamp(event.get(first)).or_else(|| parse_timestamp(event.get("eventTime"))) {
        Some(at) => human_duration(since(at, now)),
        None => "<unknown>".into(),
    }
}

pub(super) fn event_last_seen(event: &Value, now: SystemTime, events_v1: bool) -> String {
    let last = if events_v1 {
        "deprecatedLastTimestamp"
    } else {
        "lastTimestamp"
    };
    let first_seen = event_first_seen(event, now, events_v1);
    let last_seen = match parse_timestamp(event.pointer("/series/lastObservedTime"))
        .or_else(|| parse_timestamp(event.get(last)))
    {
        Some(at) => human_duration(since(at, now)),
        None => first_seen.clone(),
    };
    let count = event_count(event, events_v1);
    if count > 1 {
        format!("{last_seen} (x{count} over {first_seen})")
    } else {
        last_seen
    }
}

pub(super) fn event_source(event: &Value, events_v1: bool) -> String {
    let (component, host) = if events_v1 {
        (
            text(event.pointer("/deprecatedSource/component")),
            text(event.pointer("/deprecatedSource/host")),
        )
    } else {
        (
            text(event.pointer("/source/component")),
            text(event.pointer("/source/host")),
        )
    };
    let (component, host) = if component.is_empty() {
        (
            text(event.get("reportingController")),
            text(event.get("reportingInstance")),
        )
    } else {
        (component, host)
    };
    if host.is_empty() {
        component
    } else {
        format!("{component}, {host}")
    }
}
