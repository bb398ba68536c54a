//! Server-side printing: the `meta.k8s.io` `Table` a client such as `kubectl get` asks for with
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io`. Built-in types get the columns the
//! real server prints; custom resources get their CRD's `additionalPrinterColumns` (or Age
//! when it declares none); anything else gets Name and Age.

use std::time::SystemTime;

use serde_json::{Map, Value, json};

use crate::apiserver::jsonpath::JsonPath;
use crate::apiserver::resources::ResourceKind;

mod cells;
mod columns;

use cells::*;
pub(crate) use cells::{label_selector_string, pod_status};
use columns::*;

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
mod tests;
