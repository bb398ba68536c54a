//! Server-side printing: the `meta.k8s.io` `Table` a client such as `kubectl get` asks for with
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`. Built-in types get the columns the
//! real server prints; custom resources get their CRD's `additionalPrinterColumns` (or Age
//! when it declares none); anything else gets Name and Age.

use std::time::SystemTime;

use serde_json::{Map, Value, json};

use crate::apiserver::jsonpath::JsonPath;
use crate::apiserver::resources::ResourceKind;

/// What a Table row carries besides its cells (the `includeObject` query parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IncludeObject {
    /// No object.
    None,
    /// A `PartialObjectMetadata` (the default): kubectl reads namespaces and labels from it.
    Metadata,
    /// The whole object.
    Object,
}

/// A request for Table output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TableRequest {
    /// `meta.k8s.io/v1` or `meta.k8s.io/v1beta1`, as the client offered.
    pub(crate) api_version: &'static str,
    /// What each row carries.
    pub(crate) include: IncludeObject,
}

impl TableRequest {
    /// Reads the `Accept` header (and the `includeObject` parameter): Table output when one of
    /// the offered media types is `application/json;as=Table;g=meta.k8s.io`.
    pub(crate) fn from_request(accept: &str, include_object: Option<&str>) -> Option<Self> {
        let api_version = accept.split(',').find_map(|offer| {
            let mut parts = offer.split(';').map(str::trim);
            let media = parts.next().unwrap_or_default();
            if media != "application/json" && media != "*/*" && !media.is_empty() {
                return None;
            }
            let (mut as_table, mut group, mut version) = (false, None, None);
            for parameter in parts {
                match parameter.split_once('=') {
                    Some(("as", "Table")) => as_table = true,
                    Some(("g", g)) => group = Some(g),
                    Some(("v", v)) => version = Some(v),
                    _ => {}
                }
            }
            match (as_table, group, version) {
                (true, Some("meta.k8s.io"), Some("v1")) => Some("meta.k8s.io/v1"),
                (true, Some("meta.k8s.io"), Some("v1beta1")) => Some("meta.k8s.io/v1beta1"),
                _ => None,
            }
        })?;
        let include = match include_object {
            Some("None") => IncludeObject::None,
            Some("Object") => IncludeObject::Object,
            _ => IncludeObject::Metadata,
        };
        Some(Self {
            api_version,
            include,
        })
    }
}

/// Where a column's cells come from.
#[derive(Clone)]
enum Source {
    /// `metadata.name`.
    Name,
    /// The age of `metadata.creationTimestamp`.
    Age,
    /// A function of the object and the current time.
    Computed(fn(&Value, SystemTime) -> Value),
    /// A CRD printer column: a JSONPath and the column's declared type.
    Path(Option<JsonPath>),
}

/// One column of a Table.
#[derive(Clone)]
struct Column {
    name: String,
    column_type: String,
    format: String,
    description: String,
    priority: i64,
    source: Source,
}

impl Column {
    fn new(name: &str, column_type: &str, description: &str, source: Source) -> Self {
        Column {
            name: name.to_string(),
            column_type: column_type.to_string(),
            format: String::new(),
            description: description.to_string(),
            priority: 0,
            source,
        }
    }

    fn computed(
        name: &str,
        column_type: &str,
        description: &str,
        cell: fn(&Value, SystemTime) -> Value,
    ) -> Self {
        Self::new(name, column_type, description, Source::Computed(cell))
    }

    /// Shown only with `-o wide`.
    fn wide(mut self) -> Self {
        self.priority = 1;
        self
    }

    fn definition(&self) -> Value {
        json!({
            "name": self.name,
            "type": self.column_type,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        })
    }

    fn cell(&self, object: &Value, now: SystemTime) -> Value {
        match &self.source {
            Source::Name => object
                .pointer("/metadata/name")
                .cloned()
                .unwrap_or(Value::String(String::new())),
            Source::Age => Value::String(age(object.pointer("/metadata/creationTimestamp"), now)),
            Source::Computed(cell) => cell(object, now),
            Source::Path(path) => match path.as_ref().and_then(|p| p.first(object)) {
                Some(value) => typed_cell(&self.column_type, value, now),
                None => Value::Null,
            },
        }
    }
}

fn name_column() -> Column {
    let mut column = Column::new(
        "Name",
        "string",
        "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically.",
        Source::Name,
    );
    column.format = "name".into();
    column
}

fn age_column() -> Column {
    Column::new(
        "Age",
        "string",
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
        Source::Age,
    )
}

/// The columns a type is printed with.
#[derive(Clone)]
pub(crate) struct Printer {
    columns: Vec<Column>,
}

impl Printer {
    /// The printer for a built-in type, or for a custom resource given its CRD (the stored
    /// CustomResourceDefinition object).
    pub(crate) fn for_kind(kind: &ResourceKind, crd: Option<&Value>) -> Self {
        if kind.crd_name.is_some() {
            return Self::for_custom_resource(&kind.version, crd);
        }
        Printer {
            columns: builtin_columns(&kind.group, &kind.plural),
        }
    }

    fn for_custom_resource(version: &str, crd: Option<&Value>) -> Self {
        let declared = crd
            .and_then(|crd| crd.pointer("/spec/versions"))
            .and_then(Value::as_array)
            .and_then(|versions| {
                versions
                    .iter()
                    .find(|v| v["name"].as_str() == Some(version))
            })
            .and_then(|v| v.get("additionalPrinterColumns"))
            .and_then(Value::as_array)
            .filter(|columns| !columns.is_empty());
        let mut columns = vec![name_column()];
        match declared {
            Some(declared) => {
                for definition in declared {
                    let text = |field: &str| {
                        definition
                            .get(field)
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string()
                    };
                    let path = JsonPath::parse(&text("jsonPath")).ok();
                    columns.push(Column {
                        name: text("name"),
                        column_type: text("type"),
                        format: text("format"),
                        description: text("description"),
                        priority: definition
                            .get("priority")
                            .and_then(Value::as_i64)
                            .unwrap_or(0),
                        source: Source::Path(path),
                    });
                }
            }
            None => columns.push(age_column()),
        }
        Printer { columns }
    }

    /// The `columnDefinitions` of a Table.
    fn definitions(&self) -> Vec<Value> {
        self.columns.iter().map(Column::definition).collect()
    }

    /// One row for an object.
    fn row(&self, object: &Value, request: TableRequest, now: SystemTime) -> Value {
        let cells: Vec<Value> = self.columns.iter().map(|c| c.cell(object, now)).collect();
        let mut row = json!({"cells": cells});
        match request.include {
            IncludeObject::None => {}
            IncludeObject::Metadata => {
                row["object"] = json!({
                    "kind": "PartialObjectMetadata",
                    "apiVersion": request.api_version,
                    "metadata": object.get("metadata").cloned().unwrap_or_else(|| json!({})),
                });
            }
            IncludeObject::Object => row["object"] = object.clone(),
        }
        row
    }

    /// A Table of `objects`; `list_metadata` (resourceVersion, continue, remainingItemCount)
    /// is copied from the list the objects came from.
    pub(crate) fn table(
        &self,
        request: TableRequest,
        objects: &[Value],
        list_metadata: Value,
        now: SystemTime,
    ) -> Value {
        let rows: Vec<Value> = objects
            .iter()
            .map(|object| self.row(object, request, now))
            .collect();
        json!({
            "kind": "Table",
            "apiVersion": request.api_version,
            "metadata": list_metadata,
            "columnDefinitions": self.definitions(),
            "rows": rows,
        })
    }
}

/// The columns of a built-in type: Name first (except for Events, whose name is a wide
/// column at the end), then the type's own columns, or Age for types without a printer.
fn builtin_columns(group: &str, plural: &str) -> Vec<Column> {
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
fn own_columns(group: &str, plural: &str) -> Vec<Column> {
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

fn containers_column() -> Column {
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

fn images_column() -> Column {
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

fn selector_column() -> Column {
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

fn template_containers(object: &Value) -> Vec<&Value> {
    object
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .collect()
}

fn event_columns(events_v1: bool) -> Vec<Column> {
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

fn event_object(reference: Option<&Value>) -> String {
    let reference = reference.unwrap_or(&Value::Null);
    format!(
        "{}/{}",
        text(reference.get("kind")).to_lowercase(),
        text(reference.get("name"))
    )
}

fn event_count(event: &Value, events_v1: bool) -> i64 {
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

fn event_first_seen(event: &Value, now: SystemTime, events_v1: bool) -> String {
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

fn event_last_seen(event: &Value, now: SystemTime, events_v1: bool) -> String {
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

fn event_source(event: &Value, events_v1: bool) -> String {
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

fn pod_containers(pod: &Value, field: &str) -> Vec<Value> {
    pod.pointer(&format!("/spec/{field}"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

fn container_statuses(pod: &Value, field: &str) -> Vec<Value> {
    pod.pointer(&format!("/status/{field}"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// Init containers with `restartPolicy: Always` (sidecars) count as regular containers.
fn is_sidecar(init_container: &Value) -> bool {
    init_container.get("restartPolicy").and_then(Value::as_str) == Some("Always")
}

fn pod_ready(pod: &Value, _now: SystemTime) -> Value {
    let sidecars: Vec<String> = pod_containers(pod, "initContainers")
        .iter()
        .filter(|c| is_sidecar(c))
        .map(|c| text(c.get("name")))
        .collect();
    let total = pod_containers(pod, "containers").len() + sidecars.len();
    let running_and_ready = |status: &Value| {
        status.get("ready").and_then(Value::as_bool) == Some(true)
            && status.pointer("/state/running").is_some()
    };
    let ready = container_statuses(pod, "containerStatuses")
        .iter()
        .filter(|s| running_and_ready(s))
        .count()
        + container_statuses(pod, "initContainerStatuses")
            .iter()
            .filter(|s| sidecars.contains(&text(s.get("name"))) && running_and_ready(s))
            .count();
    Value::String(format!("{ready}/{total}"))
}

fn pod_restarts(pod: &Value, now: SystemTime) -> Value {
    let statuses: Vec<Value> = container_statuses(pod, "initContainerStatuses")
        .into_iter()
        .chain(container_statuses(pod, "containerStatuses"))
        .collect();
    let restarts: i64 = statuses
        .iter()
        .filter_map(|s| s.get("restartCount").and_then(Value::as_i64))
        .sum();
    let last_restart = statuses
        .iter()
        .filter_map(|s| parse_timestamp(s.pointer("/lastState/terminated/finishedAt")))
        .max();
    Value::String(match last_restart {
        Some(at) if restarts > 0 => format!("{restarts} ({} ago)", human_duration(since(at, now))),
        _ => restarts.to_string(),
    })
}

fn pod_readiness_gates(pod: &Value, _now: SystemTime) -> Value {
    let gates: Vec<String> = pod
        .pointer("/spec/readinessGates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|g| text(g.get("conditionType")))
        .collect();
    if gates.is_empty() {
        return Value::String("<none>".into());
    }
    let conditions = pod
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let passing = gates
        .iter()
        .filter(|gate| {
            conditions
                .iter()
                .any(|c| text(c.get("type")) == **gate && text(c.get("status")) == "True")
        })
        .count();
    Value::String(format!("{passing}/{}", gates.len()))
}

/// The STATUS column of `kubectl get pods`: the phase, refined by init progress, container
/// waiting and termination reasons, and deletion.
pub(crate) fn pod_status(pod: &Value) -> String {
    let status = pod.get("status").unwrap_or(&Value::Null);
    // A real server gives every new pod the Pending phase; the emulator stores pods as sent.
    let mut reason = text(status.get("phase")).if_empty("Pending");
    let status_reason = text(status.get("reason"));
    if !status_reason.is_empty() {
        reason = status_reason.clone();
    }
    let gated = status
        .get("conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| {
            text(c.get("type")) == "PodScheduled" && text(c.get("reason")) == "SchedulingGated"
        });
    if gated {
        reason = "SchedulingGated".into();
    }
    let init_containers = pod_containers(pod, "initContainers");
    let mut initializing = false;
    for (index, container) in container_statuses(pod, "initContainerStatuses")
        .iter()
        .enumerate()
    {
        let terminated = container.pointer("/state/terminated");
        let waiting_reason = text(container.pointer("/state/waiting/reason"));
        let sidecar = init_containers.get(index).is_some_and(is_sidecar);
        if terminated.is_some_and(|t| t.get("exitCode").and_then(Value::as_i64) == Some(0)) {
            continue;
        }
        if sidecar && container.get("started").and_then(Value::as_bool) == Some(true) {
            continue;
        }
        if let Some(terminated) = terminated {
            let terminated_reason = text(terminated.get("reason"));
            reason = if !terminated_reason.is_empty() {
                format!("Init:{terminated_reason}")
            } else if let Some(signal) = terminated
                .get("signal")
                .and_then(Value::as_i64)
                .filter(|s| *s != 0)
            {
                format!("Init:Signal:{signal}")
            } else {
                format!(
                    "Init:ExitCode:{}",
                    terminated
                        .get("exitCode")
                        .and_then(Value::as_i64)
                        .unwrap_or(0)
                )
            };
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            reason = format!("Init:{waiting_reason}");
        } else {
            reason = format!("Init:{index}/{}", init_containers.len());
        }
        initializing = true;
        break;
    }
    if !initializing {
        let mut has_running = false;
        for container in container_statuses(pod, "containerStatuses").iter().rev() {
            let waiting_reason = text(container.pointer("/state/waiting/reason"));
            if !waiting_reason.is_empty() {
                reason = waiting_reason;
            } else if let Some(terminated) = container.pointer("/state/terminated") {
                let terminated_reason = text(terminated.get("reason"));
                reason = if !terminated_reason.is_empty() {
                    terminated_reason
                } else if let Some(signal) = terminated
                    .get("signal")
                    .and_then(Value::as_i64)
                    .filter(|s| *s != 0)
                {
                    format!("Signal:{signal}")
                } else {
                    format!(
                        "ExitCode:{}",
                        terminated
                            .get("exitCode")
                            .and_then(Value::as_i64)
                            .unwrap_or(0)
                    )
                };
            } else if container.get("ready").and_then(Value::as_bool) == Some(true)
                && container.pointer("/state/running").is_some()
            {
                has_running = true;
            }
        }
        if reason == "Completed" && has_running {
            let ready = status
                .get("conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|c| text(c.get("type")) == "Ready" && text(c.get("status")) == "True");
            reason = if ready {
                "Running".into()
            } else {
                "NotReady".into()
            };
        }
    }
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        reason = if status_reason == "NodeLost" {
            "Unknown".into()
        } else {
            "Terminating".into()
        };
    }
    reason
}

fn node_status(node: &Value, _now: SystemTime) -> Value {
    let conditions = node
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut status = match conditions.iter().find(|c| text(c.get("type")) == "Ready") {
        Some(ready) if text(ready.get("status")) == "True" => "Ready".to_string(),
        Some(_) => "NotReady".to_string(),
        None => "Unknown".to_string(),
    };
    if node.pointer("/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        status.push_str(",SchedulingDisabled");
    }
    Value::String(status)
}

fn node_roles(node: &Value, _now: SystemTime) -> Value {
    let mut roles: Vec<String> = Vec::new();
    for (key, value) in node
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        if let Some(role) = key.strip_prefix("node-role.kubernetes.io/") {
            if !role.is_empty() {
                roles.push(role.to_string());
            }
        } else if key == "kubernetes.io/role"
            && let Some(role) = value.as_str().filter(|r| !r.is_empty())
        {
            roles.push(role.to_string());
        }
    }
    roles.sort();
    roles.dedup();
    Value::String(if roles.is_empty() {
        "<none>".into()
    } else {
        roles.join(",")
    })
}

fn node_address(node: &Value, address_type: &str) -> Value {
    let address = node
        .pointer("/status/addresses")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|a| text(a.get("type")) == address_type)
        .map(|a| text(a.get("address")));
    Value::String(address.unwrap_or_else(|| "<none>".into()))
}

fn service_external_ips(service: &Value, _now: SystemTime) -> Value {
    let mut ips: Vec<String> = service
        .pointer("/spec/externalIPs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|ip| text(Some(ip)))
        .collect();
    let service_type = text(service.pointer("/spec/type"));
    if service_type == "LoadBalancer" {
        for ingress in service
            .pointer("/status/loadBalancer/ingress")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let address = text(ingress.get("ip")).if_empty(&text(ingress.get("hostname")));
            if !address.is_empty() {
                ips.push(address);
            }
        }
        if ips.is_empty() {
            return Value::String("<pending>".into());
        }
    } else if service_type == "ExternalName" {
        return Value::String(text(service.pointer("/spec/externalName")));
    }
    Value::String(if ips.is_empty() {
        "<none>".into()
    } else {
        ips.join(",")
    })
}

fn service_ports(service: &Value, _now: SystemTime) -> Value {
    let ports: Vec<String> = service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|port| {
            let protocol = text(port.get("protocol")).if_empty("TCP");
            let number = port.get("port").map(|p| text(Some(p))).unwrap_or_default();
            match port.get("nodePort").and_then(Value::as_i64) {
                Some(node_port) => format!("{number}:{node_port}/{protocol}"),
                None => format!("{number}/{protocol}"),
            }
        })
        .collect();
    Value::String(if ports.is_empty() {
        "<none>".into()
    } else {
        ports.join(",")
    })
}

/// A map of labels (`nodeSelector`, a Service's `selector`) as `k=v,…`, or `<none>`.
fn map_as_selector(map: Option<&Value>) -> String {
    let mut pairs: Vec<String> = map
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", text(Some(v))))
        .collect();
    pairs.sort();
    if pairs.is_empty() {
        "<none>".into()
    } else {
        pairs.join(",")
    }
}

/// A `metav1.LabelSelector` in the query syntax (`app=web,tier in (a,b)`), requirements
/// sorted by key as the real server writes them; empty for no or an empty selector.
pub(crate) fn label_selector_string(selector: Option<&Value>) -> String {
    let Some(selector) = selector else {
        return String::new();
    };
    let mut requirements: Vec<(String, String)> = Vec::new();
    for (key, value) in selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        requirements.push((key.clone(), format!("{key}={}", text(Some(value)))));
    }
    for expression in selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = text(expression.get("key"));
        let mut values: Vec<String> = expression
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|v| text(Some(v)))
            .collect();
        values.sort();
        let rendered = match text(expression.get("operator")).as_str() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.clone(),
            "DoesNotExist" => format!("!{key}"),
            other => format!("{key} {other} ({})", values.join(",")),
        };
        requirements.push((key, rendered));
    }
    requirements.sort();
    requirements
        .into_iter()
        .map(|(_, r)| r)
        .collect::<Vec<_>>()
        .join(",")
}

fn entries(map: Option<&Value>) -> usize {
    map.and_then(Value::as_object).map_or(0, Map::len)
}

fn int(value: Option<&Value>) -> i64 {
    value.and_then(Value::as_i64).unwrap_or(0)
}

fn int_or_string(value: Option<&Value>) -> String {
    match value {
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) => s.clone(),
        _ => "N/A".into(),
    }
}

/// A scalar as text; empty for absent or null.
fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::Bool(b)) => b.to_string(),
        Some(other) => other.to_string(),
    }
}

fn text_or_none(value: Option<&Value>) -> Value {
    Value::String(text(value).if_empty("<none>"))
}

fn unknown_if_empty(value: Option<&Value>) -> Value {
    Value::String(text(value).if_empty("<unknown>"))
}

trait IfEmpty {
    fn if_empty(self, fallback: &str) -> String;
}

impl IfEmpty for String {
    fn if_empty(self, fallback: &str) -> String {
        if self.is_empty() {
            fallback.to_string()
        } else {
            self
        }
    }
}

/// A CRD printer column cell for a value found at its JSONPath, by the column's type.
fn typed_cell(column_type: &str, value: &Value, now: SystemTime) -> Value {
    match column_type {
        "integer" => match value {
            Value::Number(n) => n
                .as_i64()
                .or_else(|| n.as_f64().map(|f| f as i64))
                .map_or(Value::Null, |i| json!(i)),
            _ => Value::Null,
        },
        "number" => match value {
            Value::Number(_) => value.clone(),
            _ => Value::Null,
        },
        "boolean" => match value {
            Value::Bool(_) => value.clone(),
            _ => Value::Null,
        },
        "date" => match value {
            Value::String(_) => match parse_timestamp(Some(value)) {
                Some(at) => Value::String(human_duration(since(at, now))),
                None => Value::String("<invalid>".into()),
            },
            _ => Value::Null,
        },
        _ => match value {
            Value::String(s) => Value::String(s.clone()),
            Value::Null => Value::Null,
            Value::Number(_) | Value::Bool(_) => Value::String(value.to_string()),
            other => Value::String(other.to_string()),
        },
    }
}

/// How long ago a timestamp was, as `kubectl` prints ages; `<unknown>` without one.
fn age(timestamp: Option<&Value>, now: SystemTime) -> String {
    match parse_timestamp(timestamp) {
        Some(at) => human_duration(since(at, now)),
        None => "<unknown>".into(),
    }
}

/// Signed seconds from `at` to `now` (negative when `at` is in the future).
fn since(at: SystemTime, now: SystemTime) -> i64 {
    match now.duration_since(at) {
        Ok(elapsed) => elapsed.as_secs() as i64,
        Err(ahead) => -(ahead.duration().as_secs_f64().ceil() as i64),
    }
}

/// A duration in the compact style of `kubectl get` (`45s`, `3m20s`, `5h12m`, `2d3h`, `400d`,
/// `2y10d`): the finer unit is dropped as the duration grows. Up to a second in the future
/// reads as `0s` (clock skew); further is `<invalid>`.
pub(crate) fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 120 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let rest = seconds % 60;
        return if rest == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{rest}s")
        };
    }
    if minutes < 180 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let rest = minutes % 60;
        return if rest == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{rest}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        let rest = hours % 24;
        return if rest == 0 {
            format!("{days}d")
        } else {
            format!("{days}d{rest}h")
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    let years = days / 365;
    if hours < 24 * 365 * 8 {
        let rest = days % 365;
        return if rest == 0 {
            format!("{years}y")
        } else {
            format!("{years}y{rest}d")
        };
    }
    format!("{years}y")
}

/// Parses an RFC 3339 timestamp (`2024-02-29T12:00:00Z`, with optional fractional seconds and
/// a `Z` or `±hh:mm` offset).
pub(crate) fn parse_timestamp(value: Option<&Value>) -> Option<SystemTime> {
    joinery_core::time::parse_rfc3339(value?.as_str()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn at(text: &str) -> SystemTime {
        parse_timestamp(Some(&json!(text))).unwrap()
    }

    #[test]
    fn timestamps_parse_with_fractions_and_offsets() {
        assert_eq!(at("1970-01-01T00:00:00Z"), UNIX_EPOCH);
        assert_eq!(
            at("2024-02-29T12:00:00Z"),
            UNIX_EPOCH + Duration::from_secs(19_782 * 86_400 + 12 * 3600)
        );
        assert_eq!(at("2024-02-29T14:00:00+02:00"), at("2024-02-29T12:00:00Z"));
        assert_eq!(
            at("2024-02-29T12:00:00.500000Z"),
            at("2024-02-29T12:00:00Z") + Duration::from_millis(500)
        );
        assert!(parse_timestamp(Some(&json!("yesterday"))).is_none());
    }

    #[test]
    fn durations_read_like_kubectl_ages() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (45, "45s"),
            (119, "119s"),
            (200, "3m20s"),
            (300, "5m"),
            (45 * 60, "45m"),
            (5 * 3600 + 12 * 60, "5h12m"),
            (30 * 3600, "30h"),
            (51 * 3600, "2d3h"),
            (400 * 86_400, "400d"),
            (740 * 86_400, "2y10d"),
            (3650 * 86_400, "10y"),
        ];
        for (seconds, expected) in cases {
            assert_eq!(human_duration(seconds), expected, "{seconds}s");
        }
    }

    #[test]
    fn pod_status_follows_containers_and_deletion() {
        let pod = json!({"status": {"phase": "Running", "containerStatuses": [
            {"name": "a", "ready": false, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
        ]}});
        assert_eq!(pod_status(&pod), "CrashLoopBackOff");
        let pod = json!({"spec": {"initContainers": [{"name": "i"}, {"name": "j"}]}, "status": {"phase": "Pending", "initContainerStatuses": [
            {"name": "i", "state": {"terminated": {"exitCode": 0}}},
            {"name": "j", "state": {"running": {}}}
        ]}});
        assert_eq!(pod_status(&pod), "Init:1/2");
        let pod = json!({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}, "status": {"phase": "Running"}});
        assert_eq!(pod_status(&pod), "Terminating");
        assert_eq!(
            pod_status(&json!({"status": {"phase": "Pending"}})),
            "Pending"
        );
    }

    #[test]
    fn selectors_render_sorted_in_query_syntax() {
        let selector = json!({"matchLabels": {"tier": "web", "app": "shop"}, "matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["b", "a"]},
            {"key": "gpu", "operator": "DoesNotExist"}
        ]});
        assert_eq!(
            label_selector_string(Some(&selector)),
            "app=shop,!gpu,tier=web,zone in (a,b)"
        );
    }

    #[test]
    fn accept_header_selects_the_table_version() {
        let request = TableRequest::from_request(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
            None,
        )
        .unwrap();
        assert_eq!(request.api_version, "meta.k8s.io/v1");
        assert_eq!(request.include, IncludeObject::Metadata);
        assert!(TableRequest::from_request("application/json", None).is_none());
        let beta = TableRequest::from_request(
            "application/json;as=Table;v=v1beta1;g=meta.k8s.io",
            Some("Object"),
        )
        .unwrap();
        assert_eq!(
            (beta.api_version, beta.include),
            ("meta.k8s.io/v1beta1", IncludeObject::Object)
        );
    }

    #[test]
    fn custom_resource_columns_follow_the_crd() {
        let crd = json!({"spec": {"versions": [{"name": "v1", "additionalPrinterColumns": [
            {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
            {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
            {"name": "Zone", "type": "string", "priority": 1, "jsonPath": ".metadata.labels.topology\\.kubernetes\\.io/zone"}
        ]}]}});
        let kind = ResourceKind {
            group: "example.com".into(),
            version: "v1".into(),
            plural: "widgets".into(),
            singular: "widget".into(),
            kind: "Widget".into(),
            list_kind: "WidgetList".into(),
            namespaced: true,
            short_names: vec![],
            categories: vec![],
            has_status: true,
            extra_subresources: vec![],
            schema: None,
            crd_name: Some("widgets.example.com".into()),
        };
        let printer = Printer::for_kind(&kind, Some(&crd));
        let object = json!({
            "metadata": {"name": "w", "labels": {"topology.kubernetes.io/zone": "z1"}},
            "spec": {"size": 3},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}
        });
        let request = TableRequest {
            api_version: "meta.k8s.io/v1",
            include: IncludeObject::None,
        };
        let table = printer.table(request, &[object], json!({}), SystemTime::now());
        let names: Vec<&str> = table["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Name", "Ready", "Size", "Zone"]);
        assert_eq!(table["rows"][0]["cells"], json!(["w", "True", 3, "z1"]));
        assert!(table["rows"][0].get("object").is_none());
        let default = Printer::for_kind(&kind, None);
        assert_eq!(
            default.definitions().len(),
            2,
            "Name and Age when the CRD declares no columns"
        );
    }
}
