//! The in-memory object store: every object of every resource type under one global
//! resourceVersion. This file holds the store itself, its locked state, object metadata
//! helpers (uids, generated names, timestamps) and the create / get / update / list verbs;
//! the rest lives beside it:
//!
//! - `history`: the bounded change history watches are served from (events, the window,
//!   compaction, watch snapshots);
//! - `gc`: deletion — preconditions, grace periods, finalizers, orphaning and the
//!   ownerReference garbage collector;
//! - `subresources`: the write paths that are not plain object writes — `pods/binding`,
//!   `pods/eviction` and the PodDisruptionBudget status the eviction checks;
//! - `object`: [`StoredObject`], the form objects are kept in.
//!
//! This file stays one (a little over 1,000 lines) because the four verbs and the metadata
//! helpers share the locked state and one commit path; splitting them would only spread it.
//!
//! How objects are kept: each version of an object is serialized once, when it is committed,
//! into an immutable [`StoredObject`] — its JSON text without `apiVersion` and `kind` (spliced
//! in on output from the version the client asked through) and a small index extracted at the
//! same time: name, namespace, uid, resourceVersion, string labels, owner uids, a deletion flag,
//! pod health for PodDisruptionBudgets, and the values of the fields that field selectors hit
//! in practice (`spec.nodeName`, `status.phase`, `spec.unschedulable`; other paths parse the
//! text). The object map and the watch history share it as an `Arc`, so an event costs no copy.
//! Writes parse the current text into a `serde_json::Value`, compute the next object as a
//! `Value` and commit a new `StoredObject`. Reads filter on the index, collect `Arc`s under the
//! lock and write responses after releasing it by concatenating the stored texts
//! ([`ObjectList::to_json`], watch lines likewise); only Table output parses items. Beside the
//! map, the state counts objects per (group, plural, namespace), so a page's
//! `remainingItemCount` walks at most the rest of one namespace, and indexes bound pods by node,
//! so `fieldSelector=spec.nodeName=…` (each kubelet's list) looks only at that node's pods.

mod gc;
mod history;
mod object;
mod subresources;
mod topics;

pub use history::{EventType, HistoryExpired, StoredEvent};
pub use object::{StoredObject, type_prefix};

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use joinery_core::clock::Clock;
use serde_json::{Map, Value, json};

use gc::has_finalizers;
pub use topics::{NODE_FIELD, Topic};

use crate::apiserver::resources::{
    CRD_GROUP, CRD_PLURAL, ResourceKind, builtin_kinds, compare_version_priority, kinds_from_crd,
};
use crate::apiserver::schema;
use crate::apiserver::selectors::{FieldSelector, LabelSelector};
use crate::error::ApiError;

/// Storage key: (group, plural, namespace or empty, name). All versions of a resource share storage.
type ObjectKey = (String, String, String, String);

/// The (namespace, name) of the pods bound to one node, in key order.
type PodsOfNode = BTreeSet<(Box<str>, Box<str>)>;

/// Which part of an object a write may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteTarget {
    /// The main resource: everything except status (when a status subresource exists).
    Main,
    /// The `status` subresource: only status.
    Status,
}

/// Options of a list request.
#[derive(Debug, Clone, Default)]
pub struct ListOptions {
    /// Label selector to filter by.
    pub labels: LabelSelector,
    /// Field selector to filter by.
    pub fields: FieldSelector,
    /// Maximum number of items to return (chunking).
    pub limit: Option<usize>,
    /// Continue token from a previous chunk.
    pub continue_token: Option<String>,
    /// Requested resourceVersion.
    pub resource_version: Option<String>,
    /// How to interpret `resource_version` (`Exact`, `NotOlderThan`).
    pub resource_version_match: Option<String>,
}

struct State {
    objects: BTreeMap<ObjectKey, Arc<StoredObject>>,
    /// How many objects are stored per (group, plural, namespace), for `remainingItemCount`.
    counts: BTreeMap<(String, String, String), usize>,
    /// The (namespace, name) of the pods bound to each node, for `fieldSelector=spec.nodeName=…`.
    pods_by_node: HashMap<Box<str>, PodsOfNode>,
    resource_version: u64,
    history: VecDeque<Arc<StoredEvent>>,
    oldest_watchable: u64,
    window: usize,
    builtins: Vec<Arc<ResourceKind>>,
    crd_kinds: BTreeMap<String, Vec<Arc<ResourceKind>>>,
    /// uids of objects removed since the garbage collector last ran.
    removed_uids: Vec<String>,
    /// Namespaces whose PodDisruptionBudget status may be out of date.
    stale_budgets: BTreeSet<String>,
    /// Objects whose owner references changed since the garbage collector last ran.
    gc_candidates: Vec<ObjectKey>,
    /// uids of the stored objects.
    live_uids: HashSet<String>,
    /// For each owner uid, the objects whose ownerReferences name it.
    dependents: HashMap<String, BTreeSet<ObjectKey>>,
    /// Where timestamps come from.
    clock: Arc<Clock>,
    /// Whether deleting a bound pod waits for its grace period (see [`Store::with_clock`]).
    pod_grace_periods: bool,
    /// The watch topics written since the last [`Store::publish`].
    touched: HashSet<Topic>,
}

/// The shared object store.
pub struct Store {
    state: Mutex<State>,
    /// What the watches wait on.
    topics: topics::Topics,
    clock: Arc<Clock>,
    /// The generator of uids and generated names (see [`Store::seed`]).
    ids: Mutex<u64>,
    /// Pods evicted through the eviction subresource so far.
    evictions: AtomicU64,
}

static ID_COUNTER: AtomicU64 = AtomicU64::new(0);

fn random_u64() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(ID_COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    hasher.finish()
}

fn new_uid(ids: &mut u64) -> String {
    let high = crate::random::next_u64(ids);
    let low = crate::random::next_u64(ids);
    // Shaped like a version-4 UUID.
    let high = (high & 0xffff_ffff_ffff_0fff) | 0x0000_0000_0000_4000;
    let low = (low & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        high >> 32,
        (high >> 16) & 0xffff,
        high & 0xffff,
        low >> 48,
        low & 0xffff_ffff_ffff
    )
}

fn random_name_suffix(ids: &mut u64) -> String {
    // The alphabet Kubernetes uses for generated names (no vowels, no confusable characters).
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut bits = crate::random::next_u64(ids);
    (0..5)
        .map(|_| {
            let c = ALPHABET[(bits % ALPHABET.len() as u64) as usize] as char;
            bits /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

/// Checks a name against the DNS-subdomain rule most kinds use; returns the problem, if any.
fn invalid_object_name(name: &str) -> Option<String> {
    let valid_characters = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    let alphanumeric =
        |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if name.len() > 253
        || !valid_characters
        || !alphanumeric(name.chars().next())
        || !alphanumeric(name.chars().last())
    {
        return Some(format!(
            "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, \
             '-' or '.', and must start and end with an alphanumeric character"
        ));
    }
    None
}

fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.get("metadata").is_some_and(Value::is_object) {
        object["metadata"] = json!({});
    }
    object["metadata"]
        .as_object_mut()
        .expect("metadata was just made an object")
}

fn metadata_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object
        .get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
}

/// Sets `apiVersion` and `kind` to the version the client asked through.
fn with_type(kind: &ResourceKind, object: &Value) -> Value {
    into_typed(kind, object.clone())
}

/// [`with_type`] of an object the caller owns.
fn into_typed(kind: &ResourceKind, mut object: Value) -> Value {
    if let Some(map) = object.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(kind.api_version()));
        map.insert("kind".into(), Value::String(kind.kind.clone()));
    }
    object
}

/// The parts of an object whose change bumps `metadata.generation`.
fn generation_relevant(kind: &ResourceKind, object: &Value) -> Value {
    let mut copy = object.clone();
    if let Some(map) = copy.as_object_mut() {
        map.remove("metadata");
        map.remove("apiVersion");
        map.remove("kind");
        if kind.has_status {
            map.remove("status");
        }
    }
    copy
}

fn same_ignoring_version(a: &Value, b: &Value) -> bool {
    let strip = |value: &Value| {
        let mut copy = value.clone();
        if let Some(meta) = copy.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
        }
        copy
    };
    strip(a) == strip(b)
}

fn encode_continue(resource_version: u64, namespace: &str, name: &str) -> String {
    hex::encode(json!({"rv": resource_version, "ns": namespace, "name": name}).to_string())
}

fn decode_continue(token: &str) -> Option<(u64, String, String)> {
    let bytes = hex::decode(token).ok()?;
    let value: Value = serde_json::from_slice(&bytes).ok()?;
    Some((
        value["rv"].as_u64()?,
        value["ns"].as_str()?.to_string(),
        value["name"].as_str()?.to_string(),
    ))
}

impl State {
    /// The store clock's current time as a Kubernetes timestamp.
    fn now(&self) -> String {
        joinery_core::time::rfc3339(self.clock.now())
    }

    fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceKind>> {
        self.all_kinds()
            .find(|k| k.group == group && k.version == version && k.plural == plural)
            .cloned()
    }

    fn all_kinds(&self) -> impl Iterator<Item = &Arc<ResourceKind>> {
        self.builtins
            .iter()
            .chain(self.crd_kinds.values().flatten())
    }

    /// Prunes, defaults and validates a custom resource against its schema (`old`: the stored
    /// object on an update, for transition rules and ratcheting); for CRDs, checks the declared
    /// names and fills in the status the real server reports.
    fn prepare(
        &self,
        kind: &ResourceKind,
        object: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let name = metadata_str(object, "name").unwrap_or_default().to_string();
        super::resources::check_builtin_fields(kind, object)?;
        if let Some(schema_root) = &kind.schema {
            schema::prune_unknown_fields(schema_root, object);
            schema::apply_defaults(schema_root, object);
            let mut problems = Vec::new();
            schema::validate_update(schema_root, object, old, "", &mut problems);
            if !problems.is_empty() {
                return Err(ApiError::invalid(&kind.group, &kind.kind, &name, &problems));
            }
        }
        if kind.group == CRD_GROUP && kind.plural == CRD_PLURAL {
            let declared = kinds_from_crd(object)
                .map_err(|problems| ApiError::invalid(&kind.group, &kind.kind, &name, &problems))?;
            let storage_versions: Vec<Value> = object["spec"]["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|v| v["storage"].as_bool() == Some(true))
                .filter_map(|v| v.get("name").cloned())
                .collect();
            let now = self.now();
            let existing_conditions = object
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            let condition = |kind: &str, reason: &str| {
                // Keep the original transition time so re-applying an unchanged CRD is a no-op.
                let since = existing_conditions
                    .iter()
                    .find(|c| c["type"] == kind && c["status"] == "True")
                    .and_then(|c| c.get("lastTransitionTime").cloned())
                    .unwrap_or_else(|| Value::String(now.clone()));
                json!({"type": kind, "status": "True", "reason": reason, "message": "", "lastTransitionTime": since})
            };
            debug_assert!(declared.iter().all(|k| !k.plural.is_empty()));
            object["status"] = json!({
                "acceptedNames": object["spec"]["names"].clone(),
                "conditions": [condition("NamesAccepted", "NoConflicts"), condition("Established", "InitialNamesAccepted")],
                "storedVersions": storage_versions,
            });
        }
        Ok(())
    }

    /// Keeps the CRD-declared resource table in step with a CRD write.
    fn after_crd_write(&mut self, kind: &ResourceKind, object: &Value, removed: bool) {
        if !(kind.group == CRD_GROUP && kind.plural == CRD_PLURAL) {
            return;
        }
        let Some(name) = metadata_str(object, "name").map(String::from) else {
            return;
        };
        if removed {
            if let Some(old) = self.crd_kinds.remove(&name)
                && let Some(first) = old.first()
            {
                let (group, plural) = (first.group.clone(), first.plural.clone());
                let doomed: Vec<ObjectKey> = self
                    .objects
                    .range((group.clone(), plural.clone(), String::new(), String::new())..)
                    .take_while(|((g, p, _, _), _)| *g == group && *p == plural)
                    .map(|(key, _)| key.clone())
                    .collect();
                for key in doomed {
                    if let Some(previous) = self.objects.get(&key).map(|o| o.to_untyped_value()) {
                        self.commit(key, previous, EventType::Deleted);
                    }
                }
            }
            tracing::debug!(crd = %name, "custom resource type removed");
        } else if let Ok(kinds) = kinds_from_crd(object) {
            tracing::debug!(crd = %name, versions = kinds.len(), "custom resource type served");
            self.crd_kinds
                .insert(name, kinds.into_iter().map(Arc::new).collect());
        }
    }

    /// The stored objects of one type in one namespace (empty for cluster-scoped types).
    fn objects_in<'a>(
        &'a self,
        group: &'a str,
        plural: &'a str,
        namespace: &'a str,
    ) -> impl Iterator<Item = (&'a ObjectKey, &'a Arc<StoredObject>)> {
        self.objects
            .range(
                (
                    group.to_string(),
                    plural.to_string(),
                    namespace.to_string(),
                    String::new(),
                )..,
            )
            .take_while(move |((g, p, n, _), _)| g == group && p == plural && n == namespace)
    }
}

impl Store {
    /// How many pods were evicted (the eviction subresource accepted) so far.
    pub fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    /// Every stored object, of every kind, as `(group/plural, object)` (without `apiVersion`
    /// and `kind`), in key order: for checks over the whole cluster, such as the simulator's
    /// clock discipline (every timestamp within the simulated run).
    pub fn every_object(&self) -> Vec<(String, Value)> {
        self.lock()
            .objects
            .iter()
            .map(|((group, plural, _, _), object)| {
                (format!("{group}/{plural}"), object.to_untyped_value())
            })
            .collect()
    }

    /// Restarts the generator of uids and generated names (`generateName`) from `seed`: the
    /// same seed and the same requests in the same order give the same uids and names. A
    /// new store draws its seed from the process's randomness.
    pub fn seed(&self, seed: u64) {
        *self.ids() = seed;
    }

    fn ids(&self) -> std::sync::MutexGuard<'_, u64> {
        self.ids.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A store holding the built-in types and the standard namespaces, retaining at most
    /// `window` events for watches.
    pub fn new(window: usize) -> Self {
        Self::with_clock(window, Arc::new(Clock::real()), true)
    }

    /// A store like [`Store::new`] whose timestamps (creation, deletion, conditions) come from
    /// `clock`. With `pod_grace_periods`, deleting a pod bound to a node only sets its
    /// `deletionTimestamp` (now plus the grace period) until a kubelet removes it with a zero
    /// grace period; without, pods are removed at once.
    pub fn with_clock(window: usize, clock: Arc<Clock>, pod_grace_periods: bool) -> Self {
        let state = State {
            objects: BTreeMap::new(),
            counts: BTreeMap::new(),
            pods_by_node: HashMap::new(),
            resource_version: 0,
            history: VecDeque::new(),
            oldest_watchable: 0,
            window,
            builtins: builtin_kinds().into_iter().map(Arc::new).collect(),
            crd_kinds: BTreeMap::new(),
            removed_uids: Vec::new(),
            stale_budgets: BTreeSet::new(),
            gc_candidates: Vec::new(),
            live_uids: HashSet::new(),
            dependents: HashMap::new(),
            clock: clock.clone(),
            pod_grace_periods,
            touched: HashSet::new(),
        };
        let store = Self {
            state: Mutex::new(state),
            topics: Default::default(),
            clock,
            ids: Mutex::new(random_u64()),
            evictions: AtomicU64::new(0),
        };
        let namespaces = store
            .lookup("", "v1", "namespaces")
            .expect("namespaces are built in");
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let namespace =
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
            store
                .create(&namespaces, None, namespace)
                .expect("standard namespaces are valid");
        }
        store
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The clock the store's timestamps come from.
    pub fn clock(&self) -> &Arc<Clock> {
        &self.clock
    }

    /// The store clock's current time as a Kubernetes timestamp.
    pub fn now_timestamp(&self) -> String {
        joinery_core::time::rfc3339(self.clock.now())
    }

    /// The resource type served at group/version/plural, if any.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceKind>> {
        self.lock().lookup(group, version, plural)
    }

    /// All resource types served at a group/version.
    pub fn kinds_at(&self, group: &str, version: &str) -> Vec<Arc<ResourceKind>> {
        self.lock()
            .all_kinds()
            .filter(|k| k.group == group && k.version == version)
            .cloned()
            .collect()
    }

    /// Non-core API groups with their versions ordered by priority, built-ins first.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let state = self.lock();
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for kind in state.all_kinds().filter(|k| !k.group.is_empty()) {
            match groups.iter_mut().find(|(g, _)| *g == kind.group) {
                Some((_, versions)) => {
                    if !versions.contains(&kind.version) {
                        versions.push(kind.version.clone());
                    }
                }
                None => groups.push((kind.group.clone(), vec![kind.version.clone()])),
            }
        }
        for (_, versions) in &mut groups {
            versions.sort_by(|a, b| compare_version_priority(a, b));
        }
        groups
    }

    /// The latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().resource_version
    }

    fn key(kind: &ResourceKind, namespace: Option<&str>, name: &str) -> ObjectKey {
        let namespace = if kind.namespaced {
            namespace.unwrap_or_default()
        } else {
            ""
        };
        (
            kind.group.clone(),
            kind.plural.clone(),
            namespace.to_string(),
            name.to_string(),
        )
    }

    /// Creates an object; the namespace comes from the path for namespaced kinds.
    pub fn create(
        &self,
        kind: &ResourceKind,
        namespace: Option<&str>,
        body: Value,
    ) -> Result<Value, ApiError> {
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        let mut object = with_type(kind, &body);
        let metadata = metadata_mut(&mut object);
        let body_namespace = metadata
            .get("namespace")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(String::from);
        if kind.namespaced {
            let namespace = match (namespace, body_namespace) {
                (Some(path), Some(body)) if path != body => {
                    return Err(ApiError::bad_request(format!(
                        "the namespace of the provided object ({body}) does not match the namespace sent on the request ({path})"
                    )));
                }
                (Some(path), _) => path.to_string(),
                (None, Some(body)) => body,
                (None, None) => {
                    return Err(ApiError::bad_request(
                        "a namespace is required to create this resource",
                    ));
                }
            };
            metadata.insert("namespace".into(), Value::String(namespace));
        } else {
            metadata.remove("namespace");
        }
        let explicit_name = metadata
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(String::from);
        let generate_name = metadata
            .get("generateName")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(String::from);
        if explicit_name.is_none() && generate_name.is_none() {
            return Err(ApiError::invalid(
                &kind.group,
                &kind.kind,
                "",
                &[(
                    "metadata.name".into(),
                    "Required value: name or generateName is required".into(),
                )],
            ));
        }
        metadata.insert("uid".into(), Value::String(new_uid(&mut self.ids())));
        metadata.insert(
            "creationTimestamp".into(),
            Value::String(self.now_timestamp()),
        );
        metadata.insert("generation".into(), json!(1));
        for transient in [
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
        ] {
            metadata.remove(transient);
        }
        if kind.crd_name.is_some() && kind.has_status {
            // Status of a custom resource with a status subresource is only written through it.
            if let Some(map) = object.as_object_mut() {
                map.remove("status");
            }
        }
        if kind.group.is_empty() && kind.plural == "pods" {
            super::admission::default_pod(&mut object);
            super::admission::pending_phase(&mut object);
        }
        if kind.group.is_empty()
            && kind.plural == "namespaces"
            && object.pointer("/status/phase").is_none()
        {
            object["status"] = json!({"phase": "Active"});
        }

        let mut state = self.lock();
        let name = match explicit_name {
            Some(name) => name,
            None => {
                let prefix = generate_name.unwrap_or_default();
                let mut candidate = format!("{prefix}{}", random_name_suffix(&mut self.ids()));
                let mut attempts = 0;
                while state.objects.contains_key(&Self::key(
                    kind,
                    metadata_str(&object, "namespace"),
                    &candidate,
                )) {
                    attempts += 1;
                    if attempts > 16 {
                        return Err(ApiError::already_exists(
                            &kind.group,
                            &kind.plural,
                            &candidate,
                        ));
                    }
                    candidate = format!("{prefix}{}", random_name_suffix(&mut self.ids()));
                }
                candidate
            }
        };
        if let Some(problem) = invalid_object_name(&name) {
            return Err(ApiError::invalid(
                &kind.group,
                &kind.kind,
                &name,
                &[("metadata.name".into(), problem)],
            ));
        }
        metadata_mut(&mut object).insert("name".into(), Value::String(name.clone()));
        if kind.group == "batch" && kind.crd_name.is_none() {
            match kind.plural.as_str() {
                "jobs" => super::admission::default_job(&mut object),
                "cronjobs" => super::admission::default_cronjob(&mut object),
                _ => {}
            }
        }
        if kind.namespaced {
            let namespace = metadata_str(&object, "namespace")
                .unwrap_or_default()
                .to_string();
            let namespace_key = (
                String::new(),
                "namespaces".to_string(),
                String::new(),
                namespace.clone(),
            );
            if !state.objects.contains_key(&namespace_key) {
                return Err(ApiError::not_found("", "namespaces", &namespace));
            }
        }
        let key = Self::key(kind, metadata_str(&object, "namespace"), &name);
        if state.objects.contains_key(&key) {
            return Err(ApiError::already_exists(&kind.group, &kind.plural, &name));
        }
        state.prepare(kind, &mut object, None)?;
        let stored = state.commit(key, object, EventType::Added);
        state.after_crd_write(kind, &stored, false);
        state.settle();
        self.publish(state);
        Ok(into_typed(kind, stored))
    }

    /// Reads one object.
    pub fn get(
        &self,
        kind: &ResourceKind,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, ApiError> {
        Ok(self.get_stored(kind, namespace, name)?.to_value(kind))
    }

    /// Reads one object in its stored form (shared, not copied).
    pub fn get_stored(
        &self,
        kind: &ResourceKind,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Arc<StoredObject>, ApiError> {
        let state = self.lock();
        state
            .objects
            .get(&Self::key(kind, namespace, name))
            .cloned()
            .ok_or_else(|| ApiError::not_found(&kind.group, &kind.plural, name))
    }

    /// Replaces an object (or its status) with what `desired` computes from the current state.
    /// A non-empty `metadata.resourceVersion` in the result must match the stored one.
    pub fn update(
        &self,
        kind: &ResourceKind,
        namespace: Option<&str>,
        name: &str,
        target: WriteTarget,
        desired: impl FnOnce(&Value) -> Result<Value, ApiError>,
    ) -> Result<Value, ApiError> {
        let mut state = self.lock();
        let key = Self::key(kind, namespace, name);
        let Some(current) = state.objects.get(&key).map(|o| o.to_value(kind)) else {
            return Err(ApiError::not_found(&kind.group, &kind.plural, name));
        };
        let wanted = desired(&current)?;
        if !wanted.is_object() {
            return Err(ApiError::bad_request(
                "the request body must be a JSON object",
            ));
        }
        if let Some(body_name) = metadata_str(&wanted, "name").filter(|n| !n.is_empty())
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if kind.namespaced
            && let Some(body_namespace) =
                metadata_str(&wanted, "namespace").filter(|n| !n.is_empty())
            && Some(body_namespace) != metadata_str(&current, "namespace")
        {
            return Err(ApiError::bad_request(format!(
                "the namespace of the object ({body_namespace}) does not match the namespace on the URL"
            )));
        }
        let current_version = metadata_str(&current, "resourceVersion").unwrap_or_default();
        if let Some(requested) = metadata_str(&wanted, "resourceVersion").filter(|v| !v.is_empty())
            && requested != current_version
        {
            return Err(ApiError::conflict(
                &kind.group,
                &kind.plural,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        if let Some(uid) = metadata_str(&wanted, "uid").filter(|u| !u.is_empty())
            && Some(uid) != metadata_str(&current, "uid")
        {
            return Err(ApiError::conflict(
                &kind.group,
                &kind.plural,
                name,
                "Precondition failed: UID in object meta does not match",
            ));
        }

        let mut next = match target {
            WriteTarget::Main => {
                let mut next = with_type(kind, &wanted);
                let old_metadata = current
                    .get("metadata")
                    .and_then(Value::as_object)
                    .cloned()
                    .unwrap_or_default();
                let metadata = metadata_mut(&mut next);
                for kept in [
                    "name",
                    "namespace",
                    "uid",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "generation",
                ] {
                    match old_metadata.get(kept) {
                        Some(value) => metadata.insert(kept.into(), value.clone()),
                        None => metadata.remove(kept),
                    };
                }
                if kind.has_status
                    && let Some(map) = next.as_object_mut()
                {
                    match current.get("status") {
                        Some(status) => map.insert("status".into(), status.clone()),
                        None => map.remove("status"),
                    };
                }
                next
            }
            WriteTarget::Status => {
                let mut next = current.clone();
                if let Some(map) = next.as_object_mut() {
                    match wanted.get("status") {
                        Some(status) => map.insert("status".into(), status.clone()),
                        None => map.remove("status"),
                    };
                }
                next
            }
        };
        if kind.group == CRD_GROUP && kind.plural == CRD_PLURAL && target == WriteTarget::Status {
            // The CRD's status is owned by the server; accept the write but keep it consistent.
        } else {
            state.prepare(kind, &mut next, Some(&current))?;
        }
        if generation_relevant(kind, &next) != generation_relevant(kind, &current) {
            let generation = current
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                + 1;
            metadata_mut(&mut next).insert("generation".into(), json!(generation));
        }
        metadata_mut(&mut next).insert(
            "resourceVersion".into(),
            Value::String(current_version.to_string()),
        );
        if same_ignoring_version(&next, &current) {
            return Ok(current);
        }
        // An object marked for deletion goes once no finalizer holds it, unless it is a pod
        // still within its grace period (its kubelet removes it).
        let finished = next.pointer("/metadata/deletionTimestamp").is_some()
            && !has_finalizers(&next)
            && next
                .pointer("/metadata/deletionGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(0)
                == 0;
        let event_type = if finished {
            EventType::Deleted
        } else {
            EventType::Modified
        };
        let stored = state.commit(key, next, event_type);
        state.after_crd_write(kind, &stored, finished);
        state.settle();
        self.publish(state);
        Ok(into_typed(kind, stored))
    }

    /// Lists objects of a type, across namespaces when `namespace` is `None`. Only the
    /// returned objects' handles are collected under the lock; nothing is copied or serialized
    /// there ([`ObjectList::to_json`] writes the response afterwards).
    pub fn list(
        &self,
        kind: &ResourceKind,
        namespace: Option<&str>,
        options: &ListOptions,
    ) -> Result<ObjectList, ApiError> {
        let state = self.lock();
        let namespace = if kind.namespaced { namespace } else { None };
        if options.resource_version_match.as_deref() == Some("Exact") {
            let requested: u64 = options
                .resource_version
                .as_deref()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| {
                    ApiError::bad_request(
                        "resourceVersionMatch=Exact requires a numeric resourceVersion",
                    )
                })?;
            if requested != state.resource_version {
                // Only the latest state is kept, so an exact older snapshot cannot be served.
                return Err(ApiError::gone(format!(
                    "too old resource version: {requested} ({})",
                    state.resource_version
                )));
            }
        }
        let (list_version, start) = match options
            .continue_token
            .as_deref()
            .filter(|t| !t.is_empty())
        {
            Some(token) => {
                let (version, token_namespace, token_name) = decode_continue(token)
                    .ok_or_else(|| ApiError::bad_request("invalid continue token"))?;
                if version < state.oldest_watchable {
                    return Err(ApiError::gone(
                        "The provided continue parameter is too old to display a consistent list result. \
                         You can start a new list without the continue parameter.",
                    ));
                }
                let key = (
                    kind.group.clone(),
                    kind.plural.clone(),
                    token_namespace,
                    token_name,
                );
                (version, Bound::Excluded(key))
            }
            None => {
                let key = (
                    kind.group.clone(),
                    kind.plural.clone(),
                    namespace.unwrap_or_default().to_string(),
                    String::new(),
                );
                (state.resource_version, Bound::Included(key))
            }
        };
        let in_scope = |(group, plural, object_namespace, _): &ObjectKey| {
            *group == kind.group
                && *plural == kind.plural
                && namespace.is_none_or(|n| n == object_namespace)
        };
        // The index holds bound pods only; `spec.nodeName=` (unbound pods) walks the type.
        let node = options
            .fields
            .term("spec.nodeName", true)
            .filter(|node| !node.is_empty() && kind.group.is_empty() && kind.plural == "pods");
        // `spec.nodeName!=,spec.nodeName!=a,…` (bound pods on none of these nodes: the pod GC
        // looking for orphans) walks the index's other nodes only.
        let other_nodes = options.fields.excluded("spec.nodeName").filter(|excluded| {
            node.is_none()
                && excluded.contains("")
                && kind.group.is_empty()
                && kind.plural == "pods"
        });
        let candidates: Box<dyn Iterator<Item = (&ObjectKey, &Arc<StoredObject>)>> =
            match (node, other_nodes) {
                // Pods selected by node: only that node's pods are looked at, in key order.
                (Some(node), _) => Box::new(
                    state
                        .pods_on_node(node, &start)
                        .filter(|(key, _)| in_scope(key)),
                ),
                (None, Some(excluded)) => {
                    let mut pods: Vec<_> = state
                        .pods_by_node
                        .keys()
                        .filter(|node| !excluded.contains(&***node))
                        .flat_map(|node| state.pods_on_node(node, &start))
                        .filter(|(key, _)| in_scope(key))
                        .collect();
                    pods.sort_unstable_by(|a, b| a.0.cmp(b.0));
                    Box::new(pods.into_iter())
                }
                (None, None) => Box::new(
                    state
                        .objects
                        .range((start, Bound::Unbounded))
                        .take_while(|(key, _)| in_scope(key)),
                ),
            };
        let mut matching =
            candidates.filter(|(_, object)| object.matches(&options.labels, &options.fields));
        let limit = options.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        let mut items = Vec::new();
        let mut last_key = None;
        for (key, object) in matching.by_ref().take(limit) {
            items.push(object.clone());
            last_key = Some(key);
        }
        let more = matching.next().is_some();
        let mut list = ObjectList {
            resource_version: list_version,
            continue_token: None,
            remaining_item_count: None,
            items,
        };
        if more && let Some(last_key) = last_key {
            list.continue_token = Some(encode_continue(list_version, &last_key.2, &last_key.3));
            // As on the real server, a selected list does not say how much is left.
            if options.labels.is_empty() && options.fields.is_empty() {
                list.remaining_item_count =
                    Some(state.count_after(last_key, namespace.is_none()) as u64);
            }
        }
        Ok(list)
    }
}

/// One list response (or one page of it): the objects, shared with the store, and the list's
/// metadata.
#[derive(Debug, Clone)]
pub struct ObjectList {
    /// The resourceVersion the list (all its pages) was served at.
    pub resource_version: u64,
    /// The token of the next page, when there is one.
    pub continue_token: Option<String>,
    /// How many objects the next pages hold; only for lists without selectors.
    pub remaining_item_count: Option<u64>,
    /// The objects, in key order.
    pub items: Vec<Arc<StoredObject>>,
}

impl ObjectList {
    /// The list's `metadata`.
    pub fn metadata(&self) -> Value {
        let mut metadata = json!({"resourceVersion": self.resource_version.to_string()});
        if let Some(token) = &self.continue_token {
            metadata["continue"] = Value::String(token.clone());
        }
        if let Some(remaining) = self.remaining_item_count {
            metadata["remainingItemCount"] = json!(remaining);
        }
        metadata
    }

    /// The list as served through `kind` (e.g. `PodList`), written by concatenating the
    /// stored texts with their `apiVersion` and `kind` spliced in; members in the order
    /// serde_json writes them (`apiVersion`, `items`, `kind`, `metadata`).
    pub fn to_json(&self, kind: &ResourceKind) -> Vec<u8> {
        let prefix = type_prefix(kind);
        let items_len: usize = self
            .items
            .iter()
            .map(|item| item.json_len(&prefix) + 1)
            .sum();
        let mut out = Vec::with_capacity(items_len + 256);
        out.extend_from_slice(b"{\"apiVersion\":");
        let _ = serde_json::to_writer(&mut out, &kind.api_version());
        out.extend_from_slice(b",\"items\":[");
        for (index, item) in self.items.iter().enumerate() {
            if index > 0 {
                out.push(b',');
            }
            item.write_json(&prefix, &mut out);
        }
        out.extend_from_slice(b"],\"kind\":");
        let _ = serde_json::to_writer(&mut out, &kind.list_kind);
        out.extend_from_slice(b",\"metadata\":");
        let _ = serde_json::to_writer(&mut out, &self.metadata());
        out.push(b'}');
        out
    }

    /// The list as a JSON value (each item parsed from its text).
    pub fn to_value(&self, kind: &ResourceKind) -> Value {
        let items: Vec<Value> = self.items.iter().map(|item| item.to_value(kind)).collect();
        json!({"kind": kind.list_kind, "apiVersion": kind.api_version(), "metadata": self.metadata(), "items": items})
    }
}

impl State {
    /// The pods bound to `node` after `start`, in key order.
    fn pods_on_node<'a>(
        &'a self,
        node: &str,
        start: &Bound<ObjectKey>,
    ) -> impl Iterator<Item = (&'a ObjectKey, &'a Arc<StoredObject>)> + 'a {
        let from = match start {
            Bound::Excluded((_, _, namespace, name)) => {
                Bound::Excluded((Box::from(namespace.as_str()), Box::from(name.as_str())))
            }
            Bound::Included((_, _, namespace, name)) => {
                Bound::Included((Box::from(namespace.as_str()), Box::from(name.as_str())))
            }
            Bound::Unbounded => Bound::Unbounded,
        };
        self.pods_by_node
            .get(node)
            .into_iter()
            .flat_map(move |pods| pods.range((from.clone(), Bound::Unbounded)))
            .filter_map(|(namespace, name)| {
                let key = (
                    String::new(),
                    "pods".to_string(),
                    namespace.to_string(),
                    name.to_string(),
                );
                self.objects.get_key_value(&key)
            })
    }

    /// How many objects of `after`'s type follow it: in its namespace, and with `all_namespaces`
    /// in the namespaces after it too (from the per-namespace counts, without walking them).
    fn count_after(&self, after: &ObjectKey, all_namespaces: bool) -> usize {
        let (group, plural, namespace, _) = after;
        let in_namespace = self
            .objects
            .range((Bound::Excluded(after.clone()), Bound::Unbounded))
            .take_while(|((g, p, n, _), _)| g == group && p == plural && n == namespace)
            .count();
        let later_namespaces: usize = if all_namespaces {
            self.counts
                .range((
                    Bound::Excluded((group.clone(), plural.clone(), namespace.clone())),
                    Bound::Unbounded,
                ))
                .take_while(|((g, p, _), _)| g == group && p == plural)
                .map(|(_, count)| count)
                .sum()
        } else {
            0
        };
        in_namespace + later_namespaces
    }

    /// Keeps the per-namespace counts and the pods-by-node index in step with the object at
    /// `key` changing from `before` to `after` (`None`: absent).
    fn reindex(
        &mut self,
        key: &ObjectKey,
        before: Option<&StoredObject>,
        after: Option<&StoredObject>,
    ) {
        let (group, plural, namespace, name) = key;
        match (before.is_some(), after.is_some()) {
            (false, true) => {
                *self
                    .counts
                    .entry((group.clone(), plural.clone(), namespace.clone()))
                    .or_default() += 1
            }
            (true, false) => {
                let count_key = (group.clone(), plural.clone(), namespace.clone());
                if let Some(count) = self.counts.get_mut(&count_key) {
                    *count -= 1;
                    if *count == 0 {
                        self.counts.remove(&count_key);
                    }
                }
            }
            _ => {}
        }
        if !(group.is_empty() && plural == "pods") {
            return;
        }
        let node_of = |object: Option<&StoredObject>| {
            object
                .map(|o| o.field("spec.nodeName").into_owned())
                .filter(|n| !n.is_empty())
        };
        let (old_node, new_node) = (node_of(before), node_of(after));
        if old_node == new_node {
            return;
        }
        let entry = (Box::from(namespace.as_str()), Box::from(name.as_str()));
        if let Some(node) = old_node
            && let Some(pods) = self.pods_by_node.get_mut(node.as_str())
        {
            pods.remove(&entry);
            if pods.is_empty() {
                self.pods_by_node.remove(node.as_str());
            }
        }
        if let Some(node) = new_node {
            self.pods_by_node
                .entry(node.into_boxed_str())
                .or_default()
                .insert(entry);
        }
    }
}

#[cfg(test)]
mod tests;
