//! The in-memory object store: every object of every resource type, one global
//! resourceVersion, and a bounded history of change events that watches are served from.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::{BuildHasher, Hasher};
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use joinery_core::clock::Clock;
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

use crate::disruption;
use crate::error::ApiError;
use crate::resources::{CRD_GROUP, CRD_PLURAL, ResourceKind, builtin_kinds, compare_version_priority, kinds_from_crd};
use crate::schema;
use crate::selectors::{FieldSelector, LabelSelector};

/// Storage key: (group, plural, namespace or empty, name). All versions of a resource share storage.
type ObjectKey = (String, String, String, String);

/// Kind of change recorded in the event history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// The object was created.
    Added,
    /// The object changed.
    Modified,
    /// The object was removed.
    Deleted,
}

impl EventType {
    /// The watch event name, e.g. `ADDED`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change in the history.
#[derive(Debug)]
pub struct StoredEvent {
    /// The resourceVersion this change produced.
    pub resource_version: u64,
    /// API group of the changed object.
    pub group: String,
    /// Plural resource name of the changed object.
    pub plural: String,
    /// Namespace (empty for cluster-scoped objects).
    pub namespace: String,
    /// What happened.
    pub event_type: EventType,
    /// The object after the change (for deletions: its last state).
    pub object: Value,
    /// The object before the change, if it existed.
    pub previous: Option<Value>,
}

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

/// The watch history no longer covers the requested version.
#[derive(Debug, Clone, Copy)]
pub struct HistoryExpired {
    /// The oldest version a watch can still start from.
    pub oldest_watchable: u64,
}

struct State {
    objects: BTreeMap<ObjectKey, Value>,
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
}

/// The shared object store.
pub struct Store {
    state: Mutex<State>,
    changed: Notify,
    clock: Arc<Clock>,
}

static ID_COUNTER: AtomicU64 = AtomicU64::new(0);

fn random_u64() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(ID_COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.write_u128(SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or_default());
    hasher.finish()
}

fn new_uid() -> String {
    let high = random_u64();
    let low = random_u64();
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

fn random_name_suffix() -> String {
    // The alphabet Kubernetes uses for generated names (no vowels, no confusable characters).
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut bits = random_u64();
    (0..5)
        .map(|_| {
            let c = ALPHABET[(bits % ALPHABET.len() as u64) as usize] as char;
            bits /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

/// The current (real) time as an RFC 3339 timestamp with second precision, as Kubernetes
/// writes it. The store itself writes [`Store::now_timestamp`], which follows its clock.
pub fn now_timestamp() -> String {
    format_timestamp(SystemTime::now())
}

/// A point in time as an RFC 3339 timestamp with second precision (`2024-02-29T12:00:00Z`).
pub fn format_timestamp(at: SystemTime) -> String {
    let seconds = at.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default() as i64;
    let (year, month, day) = civil_date(seconds.div_euclid(86_400));
    let of_day = seconds.rem_euclid(86_400);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", of_day / 3600, of_day % 3600 / 60, of_day % 60)
}

/// Converts days since 1970-01-01 to a (year, month, day) in the proleptic Gregorian calendar.
fn civil_date(days_since_epoch: i64) -> (i64, u32, u32) {
    let shifted = days_since_epoch + 719_468; // days since 0000-03-01
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153; // March = 0
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Checks a name against the DNS-subdomain rule most kinds use; returns the problem, if any.
fn invalid_object_name(name: &str) -> Option<String> {
    let valid_characters = name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
    let alphanumeric = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if name.len() > 253 || !valid_characters || !alphanumeric(name.chars().next()) || !alphanumeric(name.chars().last()) {
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
    object["metadata"].as_object_mut().expect("metadata was just made an object")
}

fn metadata_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata").and_then(|m| m.get(field)).and_then(Value::as_str)
}

/// The uids an object's `metadata.ownerReferences` point at.
fn owner_uids(object: &Value) -> impl Iterator<Item = &str> {
    object.pointer("/metadata/ownerReferences").and_then(Value::as_array).into_iter().flatten().filter_map(|r| r["uid"].as_str())
}

fn has_finalizers(object: &Value) -> bool {
    object.pointer("/metadata/finalizers").and_then(Value::as_array).is_some_and(|f| !f.is_empty())
}

/// A `Status` object reporting success.
fn success_status(code: u16) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": code})
}

/// Sets `apiVersion` and `kind` to the version the client asked through.
fn with_type(kind: &ResourceKind, object: &Value) -> Value {
    let mut object = object.clone();
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
    Some((value["rv"].as_u64()?, value["ns"].as_str()?.to_string(), value["name"].as_str()?.to_string()))
}

impl State {
    /// The store clock's current time as a Kubernetes timestamp.
    fn now(&self) -> String {
        format_timestamp(self.clock.now())
    }

    fn commit(&mut self, key: ObjectKey, mut object: Value, event_type: EventType, previous: Option<Value>) -> Value {
        self.resource_version += 1;
        let resource_version = self.resource_version;
        metadata_mut(&mut object).insert("resourceVersion".into(), Value::String(resource_version.to_string()));
        if (key.0.is_empty() && key.1 == "pods") || (key.0 == "policy" && key.1 == "poddisruptionbudgets") {
            self.stale_budgets.insert(key.2.clone());
        }
        self.index_owners(&key, (event_type != EventType::Deleted).then_some(&object));
        if event_type == EventType::Deleted {
            self.objects.remove(&key);
            if let Some(uid) = metadata_str(&object, "uid") {
                self.live_uids.remove(uid);
                self.removed_uids.push(uid.to_string());
            }
        } else {
            if let Some(uid) = metadata_str(&object, "uid") {
                self.live_uids.insert(uid.to_string());
            }
            self.objects.insert(key.clone(), object.clone());
        }
        let (group, plural, namespace, _) = key;
        self.history.push_back(Arc::new(StoredEvent {
            resource_version,
            group,
            plural,
            namespace,
            event_type,
            object: object.clone(),
            previous,
        }));
        self.trim_history();
        object
    }

    /// Keeps the owner-uid → dependents index in step with the object at `key` becoming `next`
    /// (`None`: removed). Called before the object map changes.
    fn index_owners(&mut self, key: &ObjectKey, next: Option<&Value>) {
        let before: BTreeSet<String> = self.objects.get(key).map(|o| owner_uids(o).map(String::from).collect()).unwrap_or_default();
        let after: BTreeSet<String> = next.map(|o| owner_uids(o).map(String::from).collect()).unwrap_or_default();
        for uid in before.difference(&after) {
            if let Some(dependents) = self.dependents.get_mut(uid) {
                dependents.remove(key);
                if dependents.is_empty() {
                    self.dependents.remove(uid);
                }
            }
        }
        for uid in after.difference(&before) {
            self.dependents.entry(uid.clone()).or_default().insert(key.clone());
        }
        if !after.is_empty() && after != before {
            // New owner references may already dangle; let the collector check them.
            self.gc_candidates.push(key.clone());
        }
    }

    fn trim_history(&mut self) {
        while self.history.len() > self.window.max(1) {
            if let Some(evicted) = self.history.pop_front() {
                self.oldest_watchable = evicted.resource_version;
            }
        }
    }

    fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceKind>> {
        self.all_kinds().find(|k| k.group == group && k.version == version && k.plural == plural).cloned()
    }

    fn all_kinds(&self) -> impl Iterator<Item = &Arc<ResourceKind>> {
        self.builtins.iter().chain(self.crd_kinds.values().flatten())
    }

    /// Prunes, defaults and validates a custom resource against its schema (`old`: the stored
    /// object on an update, for transition rules and ratcheting); for CRDs, checks the declared
    /// names and fills in the status the real server reports.
    fn prepare(&self, kind: &ResourceKind, object: &mut Value, old: Option<&Value>) -> Result<(), ApiError> {
        let name = metadata_str(object, "name").unwrap_or_default().to_string();
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
            let declared = kinds_from_crd(object).map_err(|problems| ApiError::invalid(&kind.group, &kind.kind, &name, &problems))?;
            let storage_versions: Vec<Value> = object["spec"]["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|v| v["storage"].as_bool() == Some(true))
                .filter_map(|v| v.get("name").cloned())
                .collect();
            let now = self.now();
            let existing_conditions = object.pointer("/status/conditions").and_then(Value::as_array).cloned().unwrap_or_default();
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
        let Some(name) = metadata_str(object, "name").map(String::from) else { return };
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
                    if let Some(previous) = self.objects.get(&key).cloned() {
                        self.commit(key, previous.clone(), EventType::Deleted, Some(previous));
                    }
                }
            }
            tracing::debug!(crd = %name, "custom resource type removed");
        } else if let Ok(kinds) = kinds_from_crd(object) {
            tracing::debug!(crd = %name, versions = kinds.len(), "custom resource type served");
            self.crd_kinds.insert(name, kinds.into_iter().map(Arc::new).collect());
        }
    }

    /// The stored objects of one type in one namespace (empty for cluster-scoped types).
    fn objects_in<'a>(&'a self, group: &'a str, plural: &'a str, namespace: &'a str) -> impl Iterator<Item = (&'a ObjectKey, &'a Value)> {
        self.objects
            .range((group.to_string(), plural.to_string(), namespace.to_string(), String::new())..)
            .take_while(move |((g, p, n, _), _)| g == group && p == plural && n == namespace)
    }

    /// Deletes the object at `key` as a DELETE request would: preconditions, the orphan
    /// propagation policy, then finalizers (deletionTimestamp only) or removal.
    fn delete_key(&mut self, kind: &ResourceKind, key: ObjectKey, options: &Value) -> Result<Value, ApiError> {
        let name = key.3.clone();
        let Some(current) = self.objects.get(&key).cloned() else {
            return Err(ApiError::not_found(&kind.group, &kind.plural, &name));
        };
        if let Some(uid) = options.pointer("/preconditions/uid").and_then(Value::as_str)
            && Some(uid) != metadata_str(&current, "uid")
        {
            return Err(ApiError::conflict(&kind.group, &kind.plural, &name, "Precondition failed: UID does not match"));
        }
        if let Some(version) = options.pointer("/preconditions/resourceVersion").and_then(Value::as_str)
            && Some(version) != metadata_str(&current, "resourceVersion")
        {
            return Err(ApiError::conflict(&kind.group, &kind.plural, &name, "Precondition failed: ResourceVersion does not match"));
        }
        let orphan = options.get("propagationPolicy").and_then(Value::as_str) == Some("Orphan")
            || options.get("orphanDependents").and_then(Value::as_bool) == Some(true);
        if orphan && let Some(uid) = metadata_str(&current, "uid") {
            self.orphan_dependents(uid);
        }
        let grace = self.grace_period(&key, &current, options);
        if grace > 0 {
            // A pod on a node is only marked: its kubelet stops it and removes it (with a zero
            // grace period) once the grace period is over. A shorter grace period shortens it.
            let remaining = current.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64);
            if current.pointer("/metadata/deletionTimestamp").is_some() && remaining.is_some_and(|r| r <= grace) {
                return Ok(current);
            }
            let mut next = current.clone();
            let deadline = self.clock.now() + Duration::from_secs(grace as u64);
            let metadata = metadata_mut(&mut next);
            metadata.insert("deletionTimestamp".into(), Value::String(format_timestamp(deadline)));
            metadata.insert("deletionGracePeriodSeconds".into(), json!(grace));
            return Ok(self.commit(key, next, EventType::Modified, Some(current)));
        }
        if has_finalizers(&current) {
            let marked = current.pointer("/metadata/deletionTimestamp").is_some();
            if marked && current.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(0) == 0 {
                return Ok(current);
            }
            let mut next = current.clone();
            let now = self.now();
            let metadata = metadata_mut(&mut next);
            if !marked {
                metadata.insert("deletionTimestamp".into(), Value::String(now));
            }
            metadata.insert("deletionGracePeriodSeconds".into(), json!(0));
            Ok(self.commit(key, next, EventType::Modified, Some(current)))
        } else {
            let stored = self.commit(key, current.clone(), EventType::Deleted, Some(current));
            self.after_crd_write(kind, &stored, true);
            Ok(stored)
        }
    }

    /// The grace period (seconds) a DELETE of the object at `key` waits for: zero except for a
    /// pod bound to a node that has not finished, as on the real server — then the
    /// DeleteOptions' `gracePeriodSeconds`, else the pod's `terminationGracePeriodSeconds`,
    /// else 30.
    fn grace_period(&self, key: &ObjectKey, current: &Value, options: &Value) -> i64 {
        let is_pod = key.0.is_empty() && key.1 == "pods";
        if !self.pod_grace_periods || !is_pod {
            return 0;
        }
        let bound = current.pointer("/spec/nodeName").and_then(Value::as_str).is_some_and(|n| !n.is_empty());
        let finished = matches!(current.pointer("/status/phase").and_then(Value::as_str), Some("Succeeded" | "Failed"));
        if !bound || finished {
            return 0;
        }
        options
            .get("gracePeriodSeconds")
            .and_then(Value::as_i64)
            .or_else(|| current.pointer("/spec/terminationGracePeriodSeconds").and_then(Value::as_i64))
            .unwrap_or(30)
            .max(0)
    }

    /// Removes the owner references pointing at `owner_uid` from every object.
    fn orphan_dependents(&mut self, owner_uid: &str) {
        let dependents: Vec<ObjectKey> = self.dependents.get(owner_uid).into_iter().flatten().cloned().collect();
        for key in dependents {
            let Some(current) = self.objects.get(&key).cloned() else { continue };
            let mut next = current.clone();
            let metadata = metadata_mut(&mut next);
            let kept: Vec<Value> = metadata
                .get("ownerReferences")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter(|reference| reference["uid"].as_str() != Some(owner_uid))
                .cloned()
                .collect();
            if kept.is_empty() {
                metadata.remove("ownerReferences");
            } else {
                metadata.insert("ownerReferences".into(), Value::Array(kept));
            }
            self.commit(key, next, EventType::Modified, Some(current));
        }
    }

    /// Housekeeping after a write, under the same lock: garbage collection of dependents whose
    /// owners are all gone, then PodDisruptionBudget status.
    fn settle(&mut self) {
        self.collect_garbage();
        self.refresh_budgets();
    }

    /// Deletes (respecting finalizers) every object whose owner references all name objects
    /// that no longer exist: dependents of the objects removed since the last run, and objects
    /// whose owner references changed (they may have been created with dangling ones).
    fn collect_garbage(&mut self) {
        loop {
            if let Some(removed) = self.removed_uids.pop() {
                let dependents: Vec<ObjectKey> = self.dependents.get(&removed).into_iter().flatten().cloned().collect();
                for key in dependents {
                    self.collect_if_orphaned(key);
                }
            } else if let Some(key) = self.gc_candidates.pop() {
                self.collect_if_orphaned(key);
            } else {
                break;
            }
        }
    }

    /// Deletes the object at `key` if it has owner references and none of them names a stored object.
    fn collect_if_orphaned(&mut self, key: ObjectKey) {
        let Some(current) = self.objects.get(&key) else { return };
        let keep = {
            let mut owners = owner_uids(current).peekable();
            owners.peek().is_none()
                || owners.any(|uid| self.live_uids.contains(uid))
                || current.pointer("/metadata/deletionTimestamp").is_some()
        };
        if keep {
            return;
        }
        tracing::debug!(plural = %key.1, namespace = %key.2, name = %key.3, "garbage-collecting a dependent whose owners are gone");
        let kind = self.all_kinds().find(|k| k.group == key.0 && k.plural == key.1).cloned();
        if let Some(kind) = kind {
            let _ = self.delete_key(&kind, key, &Value::Null);
        }
    }

    /// Recomputes the status of the PodDisruptionBudgets in namespaces where pods or budgets changed.
    fn refresh_budgets(&mut self) {
        let namespaces = std::mem::take(&mut self.stale_budgets);
        let now = self.now();
        for namespace in namespaces {
            let updates: Vec<(ObjectKey, Value, Value)> = self
                .objects_in("policy", "poddisruptionbudgets", &namespace)
                .filter_map(|(key, budget)| {
                    let pods = self.objects_in("", "pods", &namespace).map(|(_, pod)| pod);
                    let status = disruption::status(budget, disruption::figures(budget, pods), &now);
                    (budget.get("status") != Some(&status)).then(|| {
                        let mut next = budget.clone();
                        next["status"] = status;
                        (key.clone(), next, budget.clone())
                    })
                })
                .collect();
            for (key, next, previous) in updates {
                self.commit(key, next, EventType::Modified, Some(previous));
            }
        }
        // The status writes above only touched budgets whose figures are now current.
        self.stale_budgets.clear();
    }
}

impl Store {
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
        };
        let store = Self { state: Mutex::new(state), changed: Notify::new(), clock };
        let namespaces = store.lookup("", "v1", "namespaces").expect("namespaces are built in");
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
            store.create(&namespaces, None, namespace).expect("standard namespaces are valid");
        }
        store
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The clock the store's timestamps come from.
    pub fn clock(&self) -> &Arc<Clock> {
        &self.clock
    }

    /// The store clock's current time as a Kubernetes timestamp.
    pub fn now_timestamp(&self) -> String {
        format_timestamp(self.clock.now())
    }

    /// A notification that fires after the next write.
    pub fn changed(&self) -> &Notify {
        &self.changed
    }

    /// The resource type served at group/version/plural, if any.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceKind>> {
        self.lock().lookup(group, version, plural)
    }

    /// All resource types served at a group/version.
    pub fn kinds_at(&self, group: &str, version: &str) -> Vec<Arc<ResourceKind>> {
        self.lock().all_kinds().filter(|k| k.group == group && k.version == version).cloned().collect()
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

    /// Changes how many events are retained for watches (older ones are dropped at once).
    pub fn set_window(&self, window: usize) {
        let mut state = self.lock();
        state.window = window;
        state.trim_history();
    }

    /// Forgets the whole event history, as an etcd compaction would: any watch or continue
    /// token older than the current version now gets `410 Gone`.
    pub fn compact(&self) {
        let mut state = self.lock();
        state.history.clear();
        state.oldest_watchable = state.resource_version;
    }

    fn key(kind: &ResourceKind, namespace: Option<&str>, name: &str) -> ObjectKey {
        let namespace = if kind.namespaced { namespace.unwrap_or_default() } else { "" };
        (kind.group.clone(), kind.plural.clone(), namespace.to_string(), name.to_string())
    }

    /// Creates an object; the namespace comes from the path for namespaced kinds.
    pub fn create(&self, kind: &ResourceKind, namespace: Option<&str>, body: Value) -> Result<Value, ApiError> {
        if !body.is_object() {
            return Err(ApiError::bad_request("the request body must be a JSON object"));
        }
        let mut object = with_type(kind, &body);
        let metadata = metadata_mut(&mut object);
        let body_namespace = metadata.get("namespace").and_then(Value::as_str).filter(|n| !n.is_empty()).map(String::from);
        if kind.namespaced {
            let namespace = match (namespace, body_namespace) {
                (Some(path), Some(body)) if path != body => {
                    return Err(ApiError::bad_request(format!(
                        "the namespace of the provided object ({body}) does not match the namespace sent on the request ({path})"
                    )));
                }
                (Some(path), _) => path.to_string(),
                (None, Some(body)) => body,
                (None, None) => return Err(ApiError::bad_request("a namespace is required to create this resource")),
            };
            metadata.insert("namespace".into(), Value::String(namespace));
        } else {
            metadata.remove("namespace");
        }
        let explicit_name = metadata.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()).map(String::from);
        let generate_name = metadata.get("generateName").and_then(Value::as_str).filter(|n| !n.is_empty()).map(String::from);
        if explicit_name.is_none() && generate_name.is_none() {
            return Err(ApiError::invalid(
                &kind.group,
                &kind.kind,
                "",
                &[("metadata.name".into(), "Required value: name or generateName is required".into())],
            ));
        }
        metadata.insert("uid".into(), Value::String(new_uid()));
        metadata.insert("creationTimestamp".into(), Value::String(self.now_timestamp()));
        metadata.insert("generation".into(), json!(1));
        for transient in ["resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"] {
            metadata.remove(transient);
        }
        if kind.crd_name.is_some() && kind.has_status {
            // Status of a custom resource with a status subresource is only written through it.
            if let Some(map) = object.as_object_mut() {
                map.remove("status");
            }
        }
        if kind.group.is_empty() && kind.plural == "namespaces" && object.pointer("/status/phase").is_none() {
            object["status"] = json!({"phase": "Active"});
        }

        let mut state = self.lock();
        let name = match explicit_name {
            Some(name) => name,
            None => {
                let prefix = generate_name.unwrap_or_default();
                let mut candidate = format!("{prefix}{}", random_name_suffix());
                let mut attempts = 0;
                while state.objects.contains_key(&Self::key(kind, metadata_str(&object, "namespace"), &candidate)) {
                    attempts += 1;
                    if attempts > 16 {
                        return Err(ApiError::already_exists(&kind.group, &kind.plural, &candidate));
                    }
                    candidate = format!("{prefix}{}", random_name_suffix());
                }
                candidate
            }
        };
        if let Some(problem) = invalid_object_name(&name) {
            return Err(ApiError::invalid(&kind.group, &kind.kind, &name, &[("metadata.name".into(), problem)]));
        }
        metadata_mut(&mut object).insert("name".into(), Value::String(name.clone()));
        if kind.namespaced {
            let namespace = metadata_str(&object, "namespace").unwrap_or_default().to_string();
            let namespace_key = (String::new(), "namespaces".to_string(), String::new(), namespace.clone());
            if !state.objects.contains_key(&namespace_key) {
                return Err(ApiError::not_found("", "namespaces", &namespace));
            }
        }
        let key = Self::key(kind, metadata_str(&object, "namespace"), &name);
        if state.objects.contains_key(&key) {
            return Err(ApiError::already_exists(&kind.group, &kind.plural, &name));
        }
        state.prepare(kind, &mut object, None)?;
        let stored = state.commit(key, object, EventType::Added, None);
        state.after_crd_write(kind, &stored, false);
        state.settle();
        drop(state);
        self.changed.notify_waiters();
        Ok(with_type(kind, &stored))
    }

    /// Reads one object.
    pub fn get(&self, kind: &ResourceKind, namespace: Option<&str>, name: &str) -> Result<Value, ApiError> {
        let state = self.lock();
        state
            .objects
            .get(&Self::key(kind, namespace, name))
            .map(|object| with_type(kind, object))
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
        let Some(current) = state.objects.get(&key).cloned() else {
            return Err(ApiError::not_found(&kind.group, &kind.plural, name));
        };
        let wanted = desired(&with_type(kind, &current))?;
        if !wanted.is_object() {
            return Err(ApiError::bad_request("the request body must be a JSON object"));
        }
        if let Some(body_name) = metadata_str(&wanted, "name").filter(|n| !n.is_empty())
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        if kind.namespaced
            && let Some(body_namespace) = metadata_str(&wanted, "namespace").filter(|n| !n.is_empty())
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
            return Err(ApiError::conflict(&kind.group, &kind.plural, name, "Precondition failed: UID in object meta does not match"));
        }

        let mut next = match target {
            WriteTarget::Main => {
                let mut next = with_type(kind, &wanted);
                let old_metadata = current.get("metadata").and_then(Value::as_object).cloned().unwrap_or_default();
                let metadata = metadata_mut(&mut next);
                for kept in ["name", "namespace", "uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation"] {
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
                let mut next = with_type(kind, &current);
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
            state.prepare(kind, &mut next, Some(&with_type(kind, &current)))?;
        }
        if generation_relevant(kind, &next) != generation_relevant(kind, &current) {
            let generation = current.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0) + 1;
            metadata_mut(&mut next).insert("generation".into(), json!(generation));
        }
        metadata_mut(&mut next).insert("resourceVersion".into(), Value::String(current_version.to_string()));
        if same_ignoring_version(&next, &with_type(kind, &current)) {
            return Ok(with_type(kind, &current));
        }
        // An object marked for deletion goes once no finalizer holds it, unless it is a pod
        // still within its grace period (its kubelet removes it).
        let finished = next.pointer("/metadata/deletionTimestamp").is_some()
            && !has_finalizers(&next)
            && next.pointer("/metadata/deletionGracePeriodSeconds").and_then(Value::as_i64).unwrap_or(0) == 0;
        let event_type = if finished { EventType::Deleted } else { EventType::Modified };
        let stored = state.commit(key, next, event_type, Some(current));
        state.after_crd_write(kind, &stored, finished);
        state.settle();
        drop(state);
        self.changed.notify_waiters();
        Ok(with_type(kind, &stored))
    }

    /// Deletes an object: with finalizers it only gets a deletionTimestamp; otherwise it is removed
    /// and its dependents are garbage-collected. `options` is a DeleteOptions body: preconditions
    /// are honoured, `propagationPolicy: Orphan` (or `orphanDependents`) strips the owner
    /// references to the object from its dependents instead; `Foreground` acts as `Background`.
    pub fn delete(&self, kind: &ResourceKind, namespace: Option<&str>, name: &str, options: &Value) -> Result<Value, ApiError> {
        let mut state = self.lock();
        let stored = state.delete_key(kind, Self::key(kind, namespace, name), options)?;
        state.settle();
        drop(state);
        self.changed.notify_waiters();
        Ok(with_type(kind, &stored))
    }

    /// The `pods/binding` subresource: assigns a pod to the node a v1 `Binding` targets (sets
    /// `spec.nodeName` and a `PodScheduled=True` condition). 409 when the pod is already bound or
    /// being deleted, 404 when it does not exist.
    pub fn bind(&self, pods: &ResourceKind, namespace: &str, name: &str, binding: &Value) -> Result<Value, ApiError> {
        let node = binding.pointer("/target/name").and_then(Value::as_str).filter(|n| !n.is_empty()).ok_or_else(|| {
            ApiError::invalid("", "Binding", name, &[("target.name".into(), "Required value".into())])
        })?;
        if let Some(body_name) = metadata_str(binding, "name").filter(|n| !n.is_empty())
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "the name of the binding ({body_name}) does not match the pod name on the URL ({name})"
            )));
        }
        let mut state = self.lock();
        let key = Self::key(pods, Some(namespace), name);
        let Some(current) = state.objects.get(&key).cloned() else {
            return Err(ApiError::not_found("", "pods", name));
        };
        let conflict = |why: String| ApiError::conflict("", "pods/binding", name, &why);
        if let Some(uid) = metadata_str(binding, "uid").filter(|u| !u.is_empty())
            && Some(uid) != metadata_str(&current, "uid")
        {
            return Err(conflict("Precondition failed: UID in object meta does not match".into()));
        }
        if current.pointer("/metadata/deletionTimestamp").is_some() {
            return Err(conflict(format!("pod {name} is being deleted, cannot be assigned to a host")));
        }
        if let Some(bound) = current.pointer("/spec/nodeName").and_then(Value::as_str).filter(|n| !n.is_empty()) {
            return Err(conflict(format!("pod {name} is already assigned to node \"{bound}\"")));
        }
        let mut next = current.clone();
        if !next.get("spec").is_some_and(Value::is_object) {
            next["spec"] = json!({});
        }
        next["spec"]["nodeName"] = Value::String(node.to_string());
        let generation = current.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0) + 1;
        metadata_mut(&mut next).insert("generation".into(), json!(generation));
        if !next.get("status").is_some_and(Value::is_object) {
            next["status"] = json!({});
        }
        let mut conditions: Vec<Value> = next["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["type"] != "PodScheduled")
            .cloned()
            .collect();
        conditions.push(json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": state.now()}));
        next["status"]["conditions"] = Value::Array(conditions);
        state.commit(key, next, EventType::Modified, Some(current));
        state.settle();
        drop(state);
        self.changed.notify_waiters();
        Ok(success_status(201))
    }

    /// The `pods/eviction` subresource: deletes a pod (respecting finalizers) unless the
    /// PodDisruptionBudget covering it forbids the disruption (429). A pod that is not `Running`
    /// or is already being deleted is evicted without consulting budgets; an unhealthy running
    /// pod may be evicted while its budget is satisfied (or always, with
    /// `unhealthyPodEvictionPolicy: AlwaysAllow`). More than one covering budget is a 500, as
    /// on the real server.
    pub fn evict(&self, pods: &ResourceKind, namespace: &str, name: &str, eviction: &Value) -> Result<Value, ApiError> {
        if let Some(body_name) = metadata_str(eviction, "name").filter(|n| !n.is_empty())
            && body_name != name
        {
            return Err(ApiError::bad_request(format!(
                "name in URL does not match name in Eviction object ({body_name} vs {name})"
            )));
        }
        let mut state = self.lock();
        let key = Self::key(pods, Some(namespace), name);
        let Some(pod) = state.objects.get(&key).cloned() else {
            return Err(ApiError::not_found("", "pods", name));
        };
        let consult_budgets = pod.pointer("/status/phase").and_then(Value::as_str) == Some("Running")
            && pod.pointer("/metadata/deletionTimestamp").is_none();
        if consult_budgets {
            let labels = pod.pointer("/metadata/labels").and_then(Value::as_object);
            let budgets: Vec<&Value> = state
                .objects_in("policy", "poddisruptionbudgets", namespace)
                .map(|(_, budget)| budget)
                .filter(|budget| disruption::selector_matches(budget.pointer("/spec/selector"), labels))
                .collect();
            if budgets.len() > 1 {
                return Err(ApiError::internal(
                    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
                ));
            }
            if let Some(budget) = budgets.first() {
                let figures = disruption::figures(budget, state.objects_in("", "pods", namespace).map(|(_, p)| p));
                let allowed = if disruption::pod_is_healthy(&pod) {
                    figures.disruptions_allowed > 0
                } else {
                    budget.pointer("/spec/unhealthyPodEvictionPolicy").and_then(Value::as_str) == Some("AlwaysAllow")
                        || figures.current_healthy >= figures.desired_healthy
                };
                if !allowed {
                    let budget_name = metadata_str(budget, "name").unwrap_or_default();
                    let cause = format!(
                        "The disruption budget {budget_name} needs {} healthy pods and has {} currently",
                        figures.desired_healthy, figures.current_healthy
                    );
                    return Err(ApiError::too_many_requests(
                        format!("Cannot evict pod as it would violate the pod's disruption budget. {cause}"),
                        &[("DisruptionBudget", cause.clone())],
                    ));
                }
            }
        }
        let options = eviction.get("deleteOptions").cloned().unwrap_or(Value::Null);
        state.delete_key(pods, key, &options)?;
        state.settle();
        drop(state);
        self.changed.notify_waiters();
        Ok(success_status(201))
    }

    /// Deletes every object of a type (in a namespace) matching the selectors; `delete_options`
    /// (a DeleteOptions body) applies to each object as in [`Store::delete`].
    pub fn delete_collection(
        &self,
        kind: &ResourceKind,
        namespace: Option<&str>,
        options: &ListOptions,
        delete_options: &Value,
    ) -> Result<Value, ApiError> {
        let selected = self.list(kind, namespace, &ListOptions { limit: None, continue_token: None, ..options.clone() })?;
        let mut deleted = Vec::new();
        for item in selected["items"].as_array().into_iter().flatten() {
            let name = metadata_str(item, "name").unwrap_or_default();
            match self.delete(kind, metadata_str(item, "namespace").or(namespace), name, delete_options) {
                Ok(object) => deleted.push(object),
                Err(error) if error.code == 404 => {}
                Err(error) => return Err(error),
            }
        }
        Ok(json!({
            "kind": kind.list_kind,
            "apiVersion": kind.api_version(),
            "metadata": {"resourceVersion": self.resource_version().to_string()},
            "items": deleted,
        }))
    }

    /// Lists objects of a type, across namespaces when `namespace` is `None`.
    pub fn list(&self, kind: &ResourceKind, namespace: Option<&str>, options: &ListOptions) -> Result<Value, ApiError> {
        let state = self.lock();
        let namespace = if kind.namespaced { namespace } else { None };
        if options.resource_version_match.as_deref() == Some("Exact") {
            let requested: u64 = options
                .resource_version
                .as_deref()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| ApiError::bad_request("resourceVersionMatch=Exact requires a numeric resourceVersion"))?;
            if requested != state.resource_version {
                // Only the latest state is kept, so an exact older snapshot cannot be served.
                return Err(ApiError::gone(format!(
                    "too old resource version: {requested} ({})",
                    state.resource_version
                )));
            }
        }
        let (list_version, start) = match options.continue_token.as_deref().filter(|t| !t.is_empty()) {
            Some(token) => {
                let (version, token_namespace, token_name) =
                    decode_continue(token).ok_or_else(|| ApiError::bad_request("invalid continue token"))?;
                if version < state.oldest_watchable {
                    return Err(ApiError::gone(
                        "The provided continue parameter is too old to display a consistent list result. \
                         You can start a new list without the continue parameter.",
                    ));
                }
                let key = (kind.group.clone(), kind.plural.clone(), token_namespace, token_name);
                (version, Bound::Excluded(key))
            }
            None => {
                let key = (kind.group.clone(), kind.plural.clone(), namespace.unwrap_or_default().to_string(), String::new());
                (state.resource_version, Bound::Included(key))
            }
        };
        let matching = state
            .objects
            .range((start, Bound::Unbounded))
            .take_while(|((group, plural, object_namespace, _), _)| {
                *group == kind.group && *plural == kind.plural && namespace.is_none_or(|n| n == object_namespace)
            })
            .filter(|(_, object)| options.labels.matches_object(object) && options.fields.matches(object));
        let mut items = Vec::new();
        let mut remaining = 0u64;
        let limit = options.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
        // Only the returned objects are copied; the rest of a page is only counted.
        for (_, object) in matching {
            if items.len() < limit {
                items.push(with_type(kind, object));
            } else {
                remaining += 1;
            }
        }
        let mut metadata = json!({"resourceVersion": list_version.to_string()});
        if remaining > 0
            && let Some(last) = items.last()
        {
            let token = encode_continue(
                list_version,
                metadata_str(last, "namespace").unwrap_or_default(),
                metadata_str(last, "name").unwrap_or_default(),
            );
            metadata["continue"] = Value::String(token);
            metadata["remainingItemCount"] = json!(remaining);
        }
        Ok(json!({"kind": kind.list_kind, "apiVersion": kind.api_version(), "metadata": metadata, "items": items}))
    }

    /// The objects a watch without a starting version begins with, and the version it continues from.
    pub fn watch_snapshot(&self, kind: &ResourceKind, namespace: Option<&str>) -> (Vec<Value>, u64) {
        let state = self.lock();
        let namespace = if kind.namespaced { namespace } else { None };
        let objects = state
            .objects
            .range((kind.group.clone(), kind.plural.clone(), namespace.unwrap_or_default().to_string(), String::new())..)
            .take_while(|((group, plural, object_namespace, _), _)| {
                *group == kind.group && *plural == kind.plural && namespace.is_none_or(|n| n == object_namespace)
            })
            .map(|(_, object)| with_type(kind, object))
            .collect();
        (objects, state.resource_version)
    }

    /// Events of a type (in a namespace) newer than `since`, plus the current version; fails when
    /// the history no longer reaches back to `since`.
    pub fn events_since(
        &self,
        kind: &ResourceKind,
        namespace: Option<&str>,
        since: u64,
    ) -> Result<(Vec<Arc<StoredEvent>>, u64), HistoryExpired> {
        let state = self.lock();
        if since < state.oldest_watchable {
            return Err(HistoryExpired { oldest_watchable: state.oldest_watchable });
        }
        let namespace = if kind.namespaced { namespace } else { None };
        let first = state.history.partition_point(|event| event.resource_version <= since);
        let events = state
            .history
            .range(first..)
            .filter(|event| {
                event.group == kind.group && event.plural == kind.plural && namespace.is_none_or(|n| n == event.namespace)
            })
            .cloned()
            .collect();
        Ok((events, state.resource_version))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_date_matches_known_days() {
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(19_782), (2024, 2, 29));
        assert_eq!(civil_date(20_786), (2026, 11, 29));
    }

    #[test]
    fn uids_are_distinct_and_uuid_shaped() {
        let a = new_uid();
        let b = new_uid();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
    }

    #[test]
    fn bound_pods_wait_for_their_grace_period_on_the_store_clock() {
        let clock = Arc::new(Clock::with_speed(1000.0));
        let store = Store::with_clock(100, clock.clone(), true);
        let pods = store.lookup("", "v1", "pods").unwrap();
        let pod = |name: &str, node: Option<&str>| {
            json!({"metadata": {"name": name}, "spec": {"nodeName": node, "terminationGracePeriodSeconds": 120, "containers": []}})
        };
        store.create(&pods, Some("default"), pod("unbound", None)).unwrap();
        store.create(&pods, Some("default"), pod("bound", Some("n1"))).unwrap();
        store.delete(&pods, Some("default"), "unbound", &Value::Null).unwrap();
        assert!(store.get(&pods, Some("default"), "unbound").is_err(), "unbound pods go at once");

        store.delete(&pods, Some("default"), "bound", &Value::Null).unwrap();
        let marked = store.get(&pods, Some("default"), "bound").unwrap();
        assert_eq!(marked["metadata"]["deletionGracePeriodSeconds"], 120);
        let deadline = marked["metadata"]["deletionTimestamp"].as_str().unwrap().to_string();
        let expected = format_timestamp(clock.now() + Duration::from_secs(120));
        assert!(deadline.as_str() <= expected.as_str() && deadline.len() == expected.len(), "{deadline} vs {expected}");
        // Status writes do not finish a pod within its grace period; a zero grace period does.
        store
            .update(&pods, Some("default"), "bound", WriteTarget::Main, |current| {
                let mut next = current.clone();
                next["status"] = json!({"phase": "Running"});
                Ok(next)
            })
            .unwrap();
        assert!(store.get(&pods, Some("default"), "bound").is_ok());
        store.delete(&pods, Some("default"), "bound", &json!({"gracePeriodSeconds": 0})).unwrap();
        assert!(store.get(&pods, Some("default"), "bound").is_err());
    }

    #[test]
    fn history_window_expires_old_versions() {
        let store = Store::new(3);
        let configmaps = store.lookup("", "v1", "configmaps").unwrap();
        let start = store.resource_version();
        for i in 0..5 {
            store.create(&configmaps, Some("default"), json!({"metadata": {"name": format!("c{i}")}})).unwrap();
        }
        assert!(store.events_since(&configmaps, Some("default"), start).is_err());
        let (events, _) = store.events_since(&configmaps, Some("default"), start + 3).unwrap();
        assert_eq!(events.len(), 2);
    }
}
