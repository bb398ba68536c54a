//! Who a write wakes. Each watch waits on one [`Topic`]: every write of its resource, or, for
//! a pod watch selecting one node (`spec.nodeName=…`, as every kubelet's is), only the writes
//! of pods on that node before or after the write. A write wakes the watches of its topics
//! alone, so a pod bound to one node wakes that node's kubelet and the cluster-wide pod
//! watches, not the kubelets of every other node.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::{State, Store, StoredObject};

/// What a watch waits on (see the module's documentation).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Topic {
    group: String,
    plural: String,
    /// For pods: the node named by `spec.nodeName` (empty while unscheduled).
    node: Option<String>,
}

/// The field a pod watch may narrow its topic by.
pub const NODE_FIELD: &str = "spec.nodeName";

fn is_pods(group: &str, plural: &str) -> bool {
    group.is_empty() && plural == "pods"
}

impl Topic {
    /// The topic of a watch of `group`/`plural` whose field selector requires `node` (the
    /// value its `spec.nodeName=` term asks for, if any); only pod watches are narrowed.
    pub fn of_watch(group: &str, plural: &str, node: Option<&str>) -> Topic {
        Topic {
            group: group.to_string(),
            plural: plural.to_string(),
            node: node.filter(|_| is_pods(group, plural)).map(str::to_string),
        }
    }
}

/// The notification of each topic some watch waits on (the topics written under the state
/// lock are collected in `State::touched` until [`Store::publish`]).
#[derive(Default)]
pub(super) struct Topics {
    waiting: Mutex<HashMap<Topic, Arc<Notify>>>,
}

/// How many topics may be kept before those no watch waits on are dropped.
const PRUNE_ABOVE: usize = 256;

impl State {
    /// Records the topics of a write of `object` (and of the version it replaced).
    pub(super) fn touch(
        &mut self,
        group: &str,
        plural: &str,
        object: &StoredObject,
        previous: Option<&StoredObject>,
    ) {
        let mut add = |node: Option<String>| {
            let topic = Topic {
                group: group.to_string(),
                plural: plural.to_string(),
                node,
            };
            self.touched.insert(topic);
        };
        add(None);
        if is_pods(group, plural) {
            add(Some(object.field(NODE_FIELD).into_owned()));
            if let Some(previous) = previous {
                add(Some(previous.field(NODE_FIELD).into_owned()));
            }
        }
    }
}

impl Store {
    /// The notification a watch of `topic` waits on; it fires after each write of the topic.
    pub fn subscribe(&self, topic: Topic) -> Arc<Notify> {
        let mut waiting = self.topics.waiting.lock().expect("topics lock");
        if waiting.len() > PRUNE_ABOVE {
            waiting.retain(|_, notify| Arc::strong_count(notify) > 1);
        }
        waiting.entry(topic).or_default().clone()
    }

    /// Releases the state lock, then wakes the watches of every topic written under it.
    pub(super) fn publish(&self, mut state: std::sync::MutexGuard<'_, State>) {
        let touched: HashSet<Topic> = std::mem::take(&mut state.touched);
        drop(state);
        let waiting = self.topics.waiting.lock().expect("topics lock");
        for topic in &touched {
            if let Some(notify) = waiting.get(topic) {
                notify.notify_waiters();
            }
        }
    }
}
