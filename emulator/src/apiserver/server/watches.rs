//! Watches: the filter and settings of a watch request, its event lines and bookmarks, and
//! the task that streams a resource's changes to the client.

use super::*;
use futures::FutureExt;

/// What a watch stream filters on.
pub(super) struct WatchFilter {
    name: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl WatchFilter {
    pub(super) fn matches(&self, object: &StoredObject) -> bool {
        self.name
            .as_deref()
            .is_none_or(|name| object.name() == name)
            && object.matches(&self.labels, &self.fields)
    }

    /// The event a client of this filter sees, if any: objects moving into or out of the
    /// selection appear as ADDED or DELETED.
    pub(super) fn translate<'e>(
        &self,
        event: &'e StoredEvent,
    ) -> Option<(&'static str, &'e StoredObject)> {
        let object = &*event.object;
        let now = self.matches(object);
        let before = event
            .previous
            .as_ref()
            .is_some_and(|previous| self.matches(previous));
        let event_type = match event.event_type {
            EventType::Added if now => EventType::Added,
            EventType::Modified if now && before => EventType::Modified,
            EventType::Modified if now => EventType::Added,
            EventType::Modified if before => EventType::Deleted,
            EventType::Deleted if now => EventType::Deleted,
            _ => return None,
        };
        Some((event_type.as_str(), object))
    }
}

impl WatchSettings {
    /// The watch line of an object event: the stored text with the type spliced in, or the
    /// object printed as a Table when asked.
    pub(super) fn object_line(
        &self,
        store: &Store,
        kind: &ResourceKind,
        event_type: &str,
        object: &StoredObject,
    ) -> Bytes {
        match &self.table {
            Some((request, printer)) => {
                let object = object.to_value(kind);
                let metadata = json!({"resourceVersion": object.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null)});
                let table = printer.table(
                    *request,
                    std::slice::from_ref(&object),
                    metadata,
                    store.clock().now(),
                );
                watch_line(event_type, &table)
            }
            None => {
                let prefix = type_prefix(kind);
                let mut line = watch_line_start(event_type, object.json_len(&prefix) + 3);
                object.write_json(&prefix, &mut line);
                line.extend_from_slice(b"}\n");
                Bytes::from(line)
            }
        }
    }
}

/// The start of a watch line, `{"type":…,"object":`, with room for `capacity` more bytes.
pub(super) fn watch_line_start(event_type: &str, capacity: usize) -> Vec<u8> {
    let mut line = Vec::with_capacity(32 + capacity);
    line.extend_from_slice(b"{\"type\":");
    let _ = serde_json::to_writer(&mut line, event_type);
    line.extend_from_slice(b",\"object\":");
    line
}

pub(super) fn watch_line(event_type: &str, object: &Value) -> Bytes {
    // Written by hand rather than through `json!`, which would copy the object first.
    let mut line = watch_line_start(event_type, 256);
    let _ = serde_json::to_writer(&mut line, object);
    line.extend_from_slice(b"}\n");
    Bytes::from(line)
}

pub(super) fn start_watch(
    shared: &Arc<ServerState>,
    kind: Arc<ResourceKind>,
    namespace: Option<&str>,
    name: Option<String>,
    call: &Call<'_>,
) -> Result<HttpResponse, ApiError> {
    let options = call.list_options()?;
    let filter = WatchFilter {
        name,
        labels: options.labels,
        fields: options.fields,
    };
    let start_from = match options.resource_version.as_deref() {
        None | Some("0") => None,
        Some(text) => Some(
            text.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {text:?}")))?,
        ),
    };
    let table = call
        .table_request()
        .map(|request| (request, printer_for(&shared.store, &kind)));
    let settings = WatchSettings {
        table,
        bookmarks: call.flag("allowWatchBookmarks"),
        initial_events: call.flag("sendInitialEvents"),
        timeout: call
            .query
            .get("timeoutSeconds")
            .and_then(|t| t.parse().ok())
            .map(Duration::from_secs)
            .unwrap_or(Duration::from_secs(1800)),
    };
    let (sender, receiver) = mpsc::channel(256);
    let shared = shared.clone();
    let namespace = namespace.map(String::from);
    tokio::spawn(async move {
        run_watch(
            shared, kind, namespace, filter, start_from, settings, sender,
        )
        .await;
    });
    Ok(Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .body(ResponseBody::Streaming(receiver))
        .expect("static response parts are valid"))
}

pub(super) struct WatchSettings {
    /// Events carry one-row Tables instead of objects (`kubectl get -w`).
    table: Option<(TableRequest, Printer)>,
    bookmarks: bool,
    initial_events: bool,
    timeout: Duration,
}

pub(super) fn bookmark(kind: &ResourceKind, version: u64, initial_events_end: bool) -> Value {
    let mut metadata = json!({"resourceVersion": version.to_string()});
    if initial_events_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    json!({"kind": kind.kind, "apiVersion": kind.api_version(), "metadata": metadata})
}

pub(super) async fn run_watch(
    shared: Arc<ServerState>,
    kind: Arc<ResourceKind>,
    namespace: Option<String>,
    filter: WatchFilter,
    start_from: Option<u64>,
    settings: WatchSettings,
    sender: mpsc::Sender<Bytes>,
) {
    let store = &shared.store;
    let namespace = namespace.as_deref();
    let mut paused = shared.watches_paused.subscribe();
    tokio::select! {
        biased;
        waited = paused.wait_for(|paused| !*paused) => if waited.is_err() { return },
        _ = sender.closed() => return,
    }
    let mut epoch = shared.watch_epoch.subscribe();
    epoch.borrow_and_update();
    let deadline = Instant::now() + settings.timeout;
    let mut last_seen = match start_from {
        Some(version) => version,
        None => {
            let (objects, version) = store.watch_snapshot(&kind, namespace);
            for object in objects.iter().filter(|o| filter.matches(o)) {
                if sender
                    .send(settings.object_line(store, &kind, "ADDED", object))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            if settings.initial_events && settings.bookmarks {
                let _ = sender
                    .send(watch_line("BOOKMARK", &bookmark(&kind, version, true)))
                    .await;
            }
            version
        }
    };
    let mut next_bookmark = Instant::now() + shared.bookmark_interval;
    let topic = store.subscribe(Topic::of_watch(
        &kind.group,
        &kind.plural,
        filter.fields.term(NODE_FIELD, true),
    ));
    loop {
        let notified = topic.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        match store.events_since(&kind, namespace, last_seen) {
            Err(expired) => {
                shared.expired_watches.fetch_add(1, Ordering::Relaxed);
                let status = ApiError::gone(format!(
                    "too old resource version: {last_seen} ({})",
                    expired.oldest_watchable
                ));
                tracing::debug!(resource = %kind.plural, last_seen, "watch expired");
                let _ = sender.send(watch_line("ERROR", &status.to_status())).await;
                return;
            }
            Ok((events, current)) => {
                for event in &events {
                    if let Some((event_type, object)) = filter.translate(event)
                        && sender
                            .send(settings.object_line(store, &kind, event_type, object))
                            .await
                            .is_err()
                    {
                        return;
                    }
                }
                last_seen = last_seen.max(current);
            }
        }
        tokio::select! {
            biased;
            _ = &mut notified => {}
            _ = tokio::time::sleep_until(deadline) => return,
            _ = tokio::time::sleep_until(next_bookmark), if settings.bookmarks => {
                // Not notified since the last read of the history (checked after reading the
                // current version): nothing this watch selects was written up to it, so the
                // bookmark carries it and the next read starts there (a watch whose objects
                // stay quiet never falls out of the event window).
                let current = store.resource_version();
                if notified.as_mut().now_or_never().is_none() {
                    last_seen = last_seen.max(current);
                }
                if sender.send(watch_line("BOOKMARK", &bookmark(&kind, last_seen, false))).await.is_err() {
                    return;
                }
                next_bookmark = Instant::now() + shared.bookmark_interval;
            }
            _ = epoch.changed() => return,
            _ = sender.closed() => return,
        }
    }
}
