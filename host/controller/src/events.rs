//! Kubernetes Events (`v1/Event`) with upstream's reasons, de-duplicated over a window.
//!
//! Publishing does not wait for the API server: events are handed to a writer task (started
//! with the first one) that creates them in order, as client-go's event broadcaster does, so
//! a provisioning pass that nominates thousands of pods is not held up by as many requests.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use joinery_core::clock::Clock;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference, Pod};
use kube::api::{Api, PostParams};
use tokio::sync::mpsc;

use crate::util::k8s_time;

/// Upstream's event de-duplication window.
pub const DEDUP_WINDOW: Duration = Duration::from_secs(120);

/// The `source.component` of Joinery's events (upstream's, so dashboards keep working).
pub const COMPONENT: &str = "karpenter";

/// How long upstream drops repeats of `Unconsolidatable` on one object, whatever their message.
pub const UNCONSOLIDATABLE_DEDUP_WINDOW: Duration = Duration::from_secs(15 * 60);

/// An event's identity for de-duplication: (object UID, reason, message), the message
/// `None` for events de-duplicated by object and reason alone (upstream's `DedupeValues` of
/// the object's UID).
type EventKey = (String, String, Option<String>);

/// Publishes Events, dropping repeats of the same (object, reason, message) within [`DEDUP_WINDOW`].
pub struct EventRecorder {
    client: kube::Client,
    clock: Arc<Clock>,
    /// When each event identity was last published, and for how long repeats are dropped.
    recent: Mutex<Recent>,
    /// The writer task's queue (namespace, event); it ends once the recorder is dropped and
    /// the queue is written.
    queue: OnceLock<mpsc::UnboundedSender<(String, Event)>>,
}

/// The identities of recently published events, and how large the table may grow before the
/// expired ones are dropped (looked for only then, not on every event: a disruption pass
/// publishes one event per candidate).
#[derive(Default)]
struct Recent {
    published: HashMap<EventKey, (SystemTime, Duration)>,
    prune_above: usize,
}

impl Recent {
    /// Whether an event of identity `key` is published at `now` (none of that identity was
    /// within its window); if so, repeats are dropped for `window` from now.
    fn admit(&mut self, key: EventKey, now: SystemTime, window: Duration) -> bool {
        let live = |(at, kept): &(SystemTime, Duration)| {
            now.duration_since(*at).unwrap_or_default() < *kept
        };
        if self.published.get(&key).is_some_and(live) {
            return false;
        }
        if self.published.len() >= self.prune_above {
            self.published.retain(|_, entry| live(entry));
            self.prune_above = (2 * self.published.len()).max(64);
        }
        self.published.insert(key, (now, window));
        true
    }
}

/// The object an Event is about.
#[derive(Debug, Clone)]
pub struct Involved {
    /// `apiVersion`.
    pub api_version: String,
    /// `kind`.
    pub kind: String,
    /// Namespace (empty for cluster-scoped objects).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID.
    pub uid: String,
}

impl Involved {
    /// The involved object of a typed resource.
    pub fn of<K: kube::Resource<DynamicType = ()>>(object: &K) -> Involved {
        let meta = object.meta();
        Involved::named(
            &K::api_version(&()),
            &K::kind(&()),
            meta.namespace.as_deref(),
            meta.name.as_deref(),
            meta.uid.as_deref(),
        )
    }

    /// The involved object of a dynamically typed object (a NodeClass of a plugin's kind).
    pub fn dynamic(object: &kube::api::DynamicObject) -> Involved {
        let (api_version, kind) = object
            .types
            .as_ref()
            .map(|t| (t.api_version.as_str(), t.kind.as_str()))
            .unwrap_or_default();
        let meta = &object.metadata;
        Involved::named(
            api_version,
            kind,
            meta.namespace.as_deref(),
            meta.name.as_deref(),
            meta.uid.as_deref(),
        )
    }

    /// The involved object of a cached pod.
    pub fn pod(pod: &joinery_adapter::lean::LeanPod) -> Involved {
        use k8s_openapi::Resource;
        let meta = &pod.metadata;
        Involved::named(
            Pod::API_VERSION,
            Pod::KIND,
            meta.namespace.as_deref(),
            meta.name.as_deref(),
            meta.uid.as_deref(),
        )
    }

    /// The involved object of a cached Node.
    pub fn node(node: &joinery_adapter::lean::LeanNode) -> Involved {
        use k8s_openapi::Resource;
        use k8s_openapi::api::core::v1::Node;
        Involved::named(
            Node::API_VERSION,
            Node::KIND,
            None,
            node.metadata.name.as_deref(),
            node.metadata.uid.as_deref(),
        )
    }

    fn named(
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: Option<&str>,
        uid: Option<&str>,
    ) -> Involved {
        Involved {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            namespace: namespace.unwrap_or_default().to_string(),
            name: name.unwrap_or_default().to_string(),
            uid: uid.unwrap_or_default().to_string(),
        }
    }
}

impl EventRecorder {
    /// A recorder writing through `client`, stamping times from `clock`.
    pub fn new(client: kube::Client, clock: Arc<Clock>) -> EventRecorder {
        EventRecorder {
            client,
            clock,
            recent: Mutex::default(),
            queue: OnceLock::new(),
        }
    }

    /// The writer task's queue, starting the task the first time (from within the runtime).
    fn queue(&self) -> &mpsc::UnboundedSender<(String, Event)> {
        self.queue.get_or_init(|| {
            let (sender, mut receiver) = mpsc::unbounded_channel::<(String, Event)>();
            let client = self.client.clone();
            tokio::spawn(async move {
                while let Some((namespace, event)) = receiver.recv().await {
                    if let Err(e) = Api::<Event>::namespaced(client.clone(), &namespace).create(&PostParams::default(), &event).await {
                        tracing::debug!(error = %e, reason = event.reason.as_deref().unwrap_or_default(), "could not publish event");
                    }
                }
            });
            sender
        })
    }

    /// Publishes a `Normal` event.
    pub async fn normal(&self, on: &Involved, reason: &str, message: &str) {
        self.publish(on, "Normal", reason, message).await;
    }

    /// Publishes a `Warning` event.
    pub async fn warning(&self, on: &Involved, reason: &str, message: &str) {
        self.publish(on, "Warning", reason, message).await;
    }

    /// Publishes a `Normal` event, dropping any event of the same reason on the same object
    /// within `window`, whatever its message (upstream's events de-duplicated by the
    /// object's UID, such as `DisruptionBlocked` and `Unconsolidatable`, whose message
    /// changes with each pass's findings).
    pub async fn normal_per_object(
        &self,
        on: &Involved,
        reason: &str,
        message: &str,
        window: Duration,
    ) {
        self.publish_keyed(on, "Normal", reason, message, window, false)
            .await;
    }

    /// Publishes a `Warning` event, dropping repeats within `window` instead of
    /// [`DEDUP_WINDOW`] (upstream's `NodeRepairBlocked` is de-duplicated over 15 minutes).
    pub async fn warning_within(
        &self,
        on: &Involved,
        reason: &str,
        message: &str,
        window: Duration,
    ) {
        let window = window.max(DEDUP_WINDOW);
        self.publish_keyed(on, "Warning", reason, message, window, true)
            .await;
    }

    async fn publish(&self, on: &Involved, type_: &str, reason: &str, message: &str) {
        self.publish_keyed(on, type_, reason, message, DEDUP_WINDOW, true)
            .await;
    }

    /// Publishes unless an event of the same identity (with the message when `by_message`)
    /// was published within its window.
    async fn publish_keyed(
        &self,
        on: &Involved,
        type_: &str,
        reason: &str,
        message: &str,
        window: Duration,
        by_message: bool,
    ) {
        let now = self.clock.now();
        let key = (
            on.uid.clone(),
            reason.to_string(),
            by_message.then(|| message.to_string()),
        );
        let admitted = self
            .recent
            .lock()
            .expect("event de-dup lock")
            .admit(key, now, window);
        if !admitted {
            return;
        }
        let namespace = if on.namespace.is_empty() {
            "default".to_string()
        } else {
            on.namespace.clone()
        };
        let event = Event {
            metadata: kube::api::ObjectMeta {
                generate_name: Some(format!("{}.", on.name)),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: Some(on.api_version.clone()),
                kind: Some(on.kind.clone()),
                name: Some(on.name.clone()),
                namespace: (!on.namespace.is_empty()).then(|| on.namespace.clone()),
                uid: Some(on.uid.clone()),
                ..Default::default()
            },
            reason: Some(reason.to_string()),
            message: Some(message.to_string()),
            type_: Some(type_.to_string()),
            count: Some(1),
            first_timestamp: Some(k8s_time(now)),
            last_timestamp: Some(k8s_time(now)),
            source: Some(EventSource {
                component: Some(COMPONENT.to_string()),
                host: None,
            }),
            reporting_component: Some(COMPONENT.to_string()),
            ..Default::default()
        };
        if self.queue().send((namespace, event)).is_err() {
            tracing::debug!(reason, "could not publish event: the writer stopped");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_are_dropped_within_their_window_by_message_or_by_object() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let at = |seconds: u64| start + Duration::from_secs(seconds);
        let key = |uid: &str, message: Option<&str>| {
            (
                uid.to_string(),
                "Unconsolidatable".to_string(),
                message.map(str::to_string),
            )
        };
        let mut recent = Recent::default();
        let window = UNCONSOLIDATABLE_DEDUP_WINDOW;
        // By object: a new message on the same object is a repeat; another object is not.
        assert!(recent.admit(key("n1", None), at(0), window));
        assert!(!recent.admit(key("n1", None), at(60), window));
        assert!(recent.admit(key("n2", None), at(60), window));
        assert!(recent.admit(key("n1", None), at(15 * 60), window));
        // By message: each message is its own identity.
        assert!(recent.admit(key("n3", Some("a")), at(0), DEDUP_WINDOW));
        assert!(recent.admit(key("n3", Some("b")), at(1), DEDUP_WINDOW));
        assert!(!recent.admit(key("n3", Some("a")), at(119), DEDUP_WINDOW));
        assert!(recent.admit(key("n3", Some("a")), at(120), DEDUP_WINDOW));
        // Expired identities are dropped once the table grows, live ones kept.
        for i in 0..200 {
            recent.admit(key(&format!("old{i}"), None), at(0), DEDUP_WINDOW);
        }
        for i in 0..100 {
            recent.admit(key(&format!("late{i}"), None), at(10_000), window);
        }
        assert!(recent.published.len() < 150, "{}", recent.published.len());
        assert!(!recent.admit(key("late0", None), at(10_001), window));
        assert!(recent.admit(key("old0", None), at(10_001), window));
    }
}
