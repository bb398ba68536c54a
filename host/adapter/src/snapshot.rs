//! Cluster snapshots for a dry-run provisioning pass (`joinery schedule`).
//!
//! A snapshot is a multi-document YAML stream of Kubernetes objects, as `kubectl get -o yaml`
//! prints them (a `kind: List` with `items` is unpacked) or as written by hand. [`Snapshot::parse`]
//! reads it into typed objects; [`Snapshot::assemble`] turns them into the scheduler's
//! [`SchedulingInput`](joinery_core::scheduling::SchedulingInput) with the one assembly the provisioner uses
//! ([`convert`]): bound pods and Nodes become cluster state, launched NodeClaims without a
//! Node become in-flight capacity, pending pods become the batch, DaemonSets the per-node
//! overhead, NodePools the templates (limits counted against their NodeClaims).
//!
//! The instance types come from outside the snapshot: a catalog file ([`read_catalog`])
//! or a cloud plugin.
//!
//! Everything here is pure and deterministic. Errors name the document (1-based, in stream
//! order), the object's kind and name, and the field; YAML errors also carry the line.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::fmt;

use joinery_api::{NodeClaim, NodeOverlay, NodePool};
use joinery_core::catalog::Catalog;
use joinery_core::instance_type::InstanceType;
use joinery_core::labels::LabelPolicy;
use joinery_core::requirements::Requirements;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Namespace, PersistentVolume, PersistentVolumeClaim, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use crate::assemble::{ClusterObjects, PoolOffer, ProblemObject, Source};
use crate::convert;
use crate::lean::{LeanNode, LeanPod};
pub use crate::pods::{PodState, pod_state};
use crate::volumes::VolumeIndex;

mod one_pass;

/// Why a snapshot or a catalog cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// A snapshot document is not YAML, not an object, of an unsupported version, or does not
    /// fit its kind's schema; or an object's content cannot be converted.
    #[error("document {document}{}: {message}", object.as_ref().map(|o| format!(" ({o})")).unwrap_or_default())]
    Document {
        /// 1-based position of the document in the stream.
        document: usize,
        /// `Kind namespace/name` (or `Kind name`) when known; for a `List`, the item's.
        object: Option<String>,
        /// What is wrong, starting with the field path when there is one.
        message: String,
    },
    /// The instance-type catalog is invalid.
    #[error("catalog: {0}")]
    Catalog(String),
}

/// Where an object was found in the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Origin {
    /// 1-based position of the document in the stream.
    pub document: usize,
    /// Index in the document's `items` when the document is a `List`.
    pub item: Option<usize>,
}

impl fmt::Display for Origin {
    /// `document 3` or `document 3, items[7]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "document {}", self.document)?;
        if let Some(item) = self.item {
            write!(f, ", items[{item}]")?;
        }
        Ok(())
    }
}

/// An object of the snapshot with where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Located<T> {
    /// Where the object was found.
    pub origin: Origin,
    /// The object.
    pub object: T,
}

impl<T> Borrow<T> for Located<T> {
    fn borrow(&self) -> &T {
        &self.object
    }
}

/// The typed objects of a snapshot, each list in stream order.
///
/// Kinds the scheduler does not use yet are kept (validated) so later versions can; kinds
/// joinery does not know at all are only counted.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    /// `karpenter.sh/v1` NodePools.
    pub node_pools: Vec<Located<NodePool>>,
    /// `karpenter.sh/v1` NodeClaims.
    pub node_claims: Vec<Located<NodeClaim>>,
    /// Nodes.
    pub nodes: Vec<Located<LeanNode>>,
    /// Pods, bound and pending.
    pub pods: Vec<Located<LeanPod>>,
    /// DaemonSets.
    pub daemon_sets: Vec<Located<DaemonSet>>,
    /// ReplicaSets.
    pub replica_sets: Vec<Located<ReplicaSet>>,
    /// Deployments.
    pub deployments: Vec<Located<Deployment>>,
    /// StatefulSets.
    pub stateful_sets: Vec<Located<StatefulSet>>,
    /// Services.
    pub services: Vec<Located<Service>>,
    /// PodDisruptionBudgets.
    pub pod_disruption_budgets: Vec<Located<PodDisruptionBudget>>,
    /// PersistentVolumes.
    pub persistent_volumes: Vec<Located<PersistentVolume>>,
    /// PersistentVolumeClaims.
    pub persistent_volume_claims: Vec<Located<PersistentVolumeClaim>>,
    /// StorageClasses.
    pub storage_classes: Vec<Located<StorageClass>>,
    /// CSINodes (the CSI attach limits of existing nodes).
    pub csi_nodes: Vec<Located<CSINode>>,
    /// Namespaces.
    pub namespaces: Vec<Located<Namespace>>,
    /// `karpenter.sh/v1alpha1` NodeOverlays.
    pub node_overlays: Vec<Located<NodeOverlay>>,
    /// `autoscaling.x-k8s.io/v1beta1` CapacityBuffers.
    pub capacity_buffers: Vec<Located<joinery_api::CapacityBuffer>>,
    /// PodTemplates (the chunks of `podTemplateRef` buffers).
    pub pod_templates: Vec<Located<k8s_openapi::api::core::v1::PodTemplate>>,
    /// Objects of kinds joinery does not know, counted by `apiVersion/kind`.
    pub unknown: BTreeMap<String, usize>,
}

pub use crate::assemble::{Assembly, BatchPod, BatchStatus};

/// The kinds a snapshot may hold.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    NodePool,
    NodeClaim,
    Node,
    Pod,
    DaemonSet,
    ReplicaSet,
    Deployment,
    StatefulSet,
    Service,
    PodDisruptionBudget,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
    CSINode,
    Namespace,
    NodeOverlay,
    CapacityBuffer,
    PodTemplate,
    Unknown(String),
}

/// The Karpenter kinds, with the only `apiVersion` joinery reads for each.
const KARPENTER_VERSIONS: [(&str, &str); 3] = [
    ("NodePool", "karpenter.sh/v1"),
    ("NodeClaim", "karpenter.sh/v1"),
    ("NodeOverlay", "karpenter.sh/v1alpha1"),
];

impl Kind {
    /// The kind of an object from its `apiVersion` and `kind`; Karpenter kinds of another
    /// version are refused.
    fn of(api_version: &str, kind: &str) -> Result<Kind, String> {
        if let Some((_, wanted)) = KARPENTER_VERSIONS.iter().find(|(k, _)| *k == kind)
            && api_version.starts_with("karpenter.sh/")
            && api_version != *wanted
        {
            return Err(format!(
                "apiVersion: {kind} {api_version} is not supported; joinery reads {wanted}"
            ));
        }
        let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
        Ok(match (group, kind) {
            ("karpenter.sh", "NodePool") => Kind::NodePool,
            ("karpenter.sh", "NodeClaim") => Kind::NodeClaim,
            ("karpenter.sh", "NodeOverlay") => Kind::NodeOverlay,
            ("autoscaling.x-k8s.io", "CapacityBuffer") => Kind::CapacityBuffer,
            ("", "PodTemplate") => Kind::PodTemplate,
            ("", "Node") => Kind::Node,
            ("", "Pod") => Kind::Pod,
            ("", "Service") => Kind::Service,
            ("", "PersistentVolume") => Kind::PersistentVolume,
            ("", "PersistentVolumeClaim") => Kind::PersistentVolumeClaim,
            ("", "Namespace") => Kind::Namespace,
            ("apps", "DaemonSet") => Kind::DaemonSet,
            ("apps", "ReplicaSet") => Kind::ReplicaSet,
            ("apps", "Deployment") => Kind::Deployment,
            ("apps", "StatefulSet") => Kind::StatefulSet,
            ("policy", "PodDisruptionBudget") => Kind::PodDisruptionBudget,
            ("storage.k8s.io", "StorageClass") => Kind::StorageClass,
            ("storage.k8s.io", "CSINode") => Kind::CSINode,
            _ => Kind::Unknown(format!("{api_version}/{kind}")),
        })
    }

    /// Whether objects of this kind live in a namespace.
    /// How errors and duplicate checks name an object of this kind: `Kind namespace/name`
    /// for namespaced kinds (namespace `default` when it has none), else `Kind name`; `kind`
    /// is the kind as written.
    fn describe(&self, kind: &str, namespace: Option<&str>, name: &str) -> String {
        if self.namespaced() {
            format!("{kind} {}/{name}", namespace.unwrap_or("default"))
        } else {
            format!("{kind} {name}")
        }
    }

    fn namespaced(&self) -> bool {
        matches!(
            self,
            Kind::Pod
                | Kind::DaemonSet
                | Kind::ReplicaSet
                | Kind::Deployment
                | Kind::CapacityBuffer
                | Kind::PodTemplate
                | Kind::StatefulSet
                | Kind::Service
                | Kind::PodDisruptionBudget
                | Kind::PersistentVolumeClaim
        )
    }
}

/// What the first pass reads of every document: enough to route it.
#[derive(Debug, Default, Deserialize)]
struct Head {
    #[serde(default, rename = "apiVersion")]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    metadata: Option<HeadMeta>,
    #[serde(default)]
    items: Option<Vec<Option<Head>>>,
}

#[derive(Debug, Default, Deserialize)]
struct HeadMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
}

impl Head {
    fn name(&self) -> &str {
        self.metadata
            .as_ref()
            .and_then(|m| m.name.as_deref())
            .unwrap_or("")
    }

    fn namespace(&self) -> Option<&str> {
        self.metadata.as_ref().and_then(|m| m.namespace.as_deref())
    }

    /// `Kind namespace/name` (namespace `default` when a namespaced object has none).
    fn describe(&self, kind: &Kind) -> String {
        kind.describe(
            self.kind.as_deref().unwrap_or("object"),
            self.namespace(),
            self.name(),
        )
    }

    fn is_list(&self) -> bool {
        self.items.is_some() && self.kind.as_deref().is_some_and(|k| k.ends_with("List"))
    }
}

/// A typed object of any kind.
enum Object {
    NodePool(Box<NodePool>),
    NodeClaim(Box<NodeClaim>),
    Node(Box<LeanNode>),
    Pod(Box<LeanPod>),
    DaemonSet(Box<DaemonSet>),
    ReplicaSet(Box<ReplicaSet>),
    Deployment(Box<Deployment>),
    StatefulSet(Box<StatefulSet>),
    Service(Box<Service>),
    PodDisruptionBudget(Box<PodDisruptionBudget>),
    PersistentVolume(Box<PersistentVolume>),
    PersistentVolumeClaim(Box<PersistentVolumeClaim>),
    StorageClass(Box<StorageClass>),
    CSINode(Box<CSINode>),
    Namespace(Box<Namespace>),
    NodeOverlay(Box<NodeOverlay>),
    CapacityBuffer(Box<joinery_api::CapacityBuffer>),
    PodTemplate(Box<k8s_openapi::api::core::v1::PodTemplate>),
    Ignored,
}

/// Deserializes one object as the type of its kind.
struct KindSeed<'a>(Option<&'a Kind>);

impl<'de> DeserializeSeed<'de> for KindSeed<'_> {
    type Value = Object;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Object, D::Error> {
        macro_rules! typed {
            ($variant:ident) => {
                Deserialize::deserialize(d).map(|o| Object::$variant(Box::new(o)))
            };
        }
        match self.0 {
            Some(Kind::NodePool) => typed!(NodePool),
            Some(Kind::NodeClaim) => typed!(NodeClaim),
            Some(Kind::Node) => typed!(Node),
            Some(Kind::Pod) => typed!(Pod),
            Some(Kind::DaemonSet) => typed!(DaemonSet),
            Some(Kind::ReplicaSet) => typed!(ReplicaSet),
            Some(Kind::Deployment) => typed!(Deployment),
            Some(Kind::StatefulSet) => typed!(StatefulSet),
            Some(Kind::Service) => typed!(Service),
            Some(Kind::PodDisruptionBudget) => typed!(PodDisruptionBudget),
            Some(Kind::PersistentVolume) => typed!(PersistentVolume),
            Some(Kind::PersistentVolumeClaim) => typed!(PersistentVolumeClaim),
            Some(Kind::StorageClass) => typed!(StorageClass),
            Some(Kind::CSINode) => typed!(CSINode),
            Some(Kind::Namespace) => typed!(Namespace),
            Some(Kind::NodeOverlay) => typed!(NodeOverlay),
            Some(Kind::CapacityBuffer) => typed!(CapacityBuffer),
            Some(Kind::PodTemplate) => typed!(PodTemplate),
            Some(Kind::Unknown(_)) | None => IgnoredAny::deserialize(d).map(|_| Object::Ignored),
        }
    }
}

/// Deserializes a `List` document: each of its `items` as the type of its kind.
struct ListSeed<'a>(&'a [Option<Kind>]);

impl<'de> DeserializeSeed<'de> for ListSeed<'_> {
    type Value = Vec<Object>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<Object>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ListSeed<'_> {
    type Value = Vec<Object>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a List with items")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<Object>, A::Error> {
        let mut out = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == "items" {
                out = map.next_value_seed(ItemsSeed(self.0))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(out)
    }
}

struct ItemsSeed<'a>(&'a [Option<Kind>]);

impl<'de> DeserializeSeed<'de> for ItemsSeed<'_> {
    type Value = Vec<Object>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Vec<Object>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ItemsSeed<'_> {
    type Value = Vec<Object>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of Kubernetes objects")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<Object>, A::Error> {
        let mut out = Vec::with_capacity(self.0.len());
        while let Some(object) =
            seq.next_element_seed(KindSeed(self.0.get(out.len()).and_then(Option::as_ref)))?
        {
            out.push(object);
        }
        Ok(out)
    }
}

/// The routing of one document, from the first pass.
enum Route {
    /// Empty document.
    Empty,
    /// One object.
    Single { kind: Kind, object: String },
    /// A `List`: each item's kind (`None` for a null item) and description.
    List { items: Vec<Option<(Kind, String)>> },
}

fn doc_error(document: usize, object: Option<String>, message: impl Into<String>) -> SnapshotError {
    SnapshotError::Document {
        document,
        object,
        message: message.into(),
    }
}

/// Routes one parsed head; the error names the field.
fn route(document: usize, head: Option<Head>) -> Result<Route, SnapshotError> {
    let Some(head) = head else {
        return Ok(Route::Empty);
    };
    let kind_of = |h: &Head, at: &str| -> Result<(Kind, String), SnapshotError> {
        let Some(kind) = h.kind.as_deref().filter(|k| !k.is_empty()) else {
            let name = h.name();
            let object = (!name.is_empty()).then(|| format!("object {name}"));
            return Err(doc_error(
                document,
                object,
                format!("{at}kind: missing; every object needs apiVersion and kind"),
            ));
        };
        let Some(api_version) = h.api_version.as_deref().filter(|v| !v.is_empty()) else {
            return Err(doc_error(
                document,
                Some(format!("{kind} {}", h.name())),
                format!("{at}apiVersion: missing; every object needs apiVersion and kind"),
            ));
        };
        let parsed = Kind::of(api_version, kind).map_err(|e| {
            doc_error(
                document,
                Some(format!("{kind} {}", h.name())),
                format!("{at}{e}"),
            )
        })?;
        if !matches!(parsed, Kind::Unknown(_)) && h.name().is_empty() {
            return Err(doc_error(
                document,
                Some(kind.to_string()),
                format!("{at}metadata.name: missing"),
            ));
        }
        let object = h.describe(&parsed);
        Ok((parsed, object))
    };
    if head.is_list() {
        let mut items = Vec::new();
        for (i, item) in head.items.iter().flatten().enumerate() {
            items.push(match item {
                None => None,
                Some(h) => Some(kind_of(h, &format!("items[{i}]."))?),
            });
        }
        return Ok(Route::List { items });
    }
    let (kind, object) = kind_of(&head, "")?;
    Ok(Route::Single { kind, object })
}

/// The field path serde_norway puts in front of its messages, if any (`spec.containers[0]: …`).
fn message_of(e: &serde_norway::Error) -> String {
    e.to_string()
}

/// For a `List` error, the item index from a message starting with `items[N]`.
fn item_of(message: &str) -> Option<usize> {
    let rest = message.strip_prefix("items[")?;
    rest[..rest.find(']')?].parse().ok()
}

impl Snapshot {
    /// Reads a snapshot: every YAML document is an object (or a `*List` with `items`), typed by
    /// its `apiVersion` and `kind`. Empty documents are skipped. Objects of unknown kinds are
    /// counted in [`unknown`](Self::unknown). Namespaced objects without a namespace get
    /// `default`, as the API server would. The same object listed twice is an error.
    ///
    /// Documents whose `apiVersion` and `kind` come before their other keys (as `kubectl`
    /// writes them) are read in one pass; any other text, and any text with an error, is read
    /// again by the careful two-pass reader, which words the error.
    pub fn parse(text: &str) -> Result<Snapshot, SnapshotError> {
        match one_pass::read(text) {
            Some(snapshot) => Ok(snapshot),
            None => Self::parse_two_passes(text),
        }
    }

    /// Reads a snapshot in two passes over each document: its `apiVersion` and `kind` first
    /// (any key order), then the object as that type.
    fn parse_two_passes(text: &str) -> Result<Snapshot, SnapshotError> {
        // First pass: what each document is.
        let mut routes = Vec::new();
        for (i, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
            let document = i + 1;
            let head = Option::<Head>::deserialize(doc).map_err(|e| {
                let message = message_of(&e);
                let hint = if message.contains("expected struct Head") {
                    "expected a Kubernetes object (a mapping with apiVersion, kind and metadata)"
                        .to_string()
                } else {
                    message
                };
                doc_error(document, None, hint)
            })?;
            routes.push(route(document, head)?);
        }
        // Second pass: typed objects, straight from the YAML so that plain scalars read as the
        // strings Kubernetes expects (`cpu: 1`) and errors carry the field path and line.
        let mut snapshot = Snapshot::default();
        let mut seen: BTreeMap<String, Origin> = BTreeMap::new();
        for ((i, doc), route) in serde_norway::Deserializer::from_str(text)
            .enumerate()
            .zip(&routes)
        {
            let document = i + 1;
            match route {
                Route::Empty => {}
                Route::Single { kind, object } => {
                    let typed = KindSeed(Some(kind))
                        .deserialize(doc)
                        .map_err(|e| doc_error(document, Some(object.clone()), message_of(&e)))?;
                    let origin = Origin {
                        document,
                        item: None,
                    };
                    snapshot.add(origin, kind, object, typed, &mut seen)?;
                }
                Route::List { items } => {
                    let kinds: Vec<Option<Kind>> = items
                        .iter()
                        .map(|i| i.as_ref().map(|(k, _)| k.clone()))
                        .collect();
                    let typed = ListSeed(&kinds).deserialize(doc).map_err(|e| {
                        let message = message_of(&e);
                        let object = item_of(&message)
                            .and_then(|j| items.get(j))
                            .and_then(|i| i.as_ref())
                            .map(|(_, o)| o.clone());
                        doc_error(document, object, message)
                    })?;
                    for (j, (object, item)) in typed.into_iter().zip(items).enumerate() {
                        let Some((kind, description)) = item else {
                            continue;
                        };
                        snapshot.add(
                            Origin {
                                document,
                                item: Some(j),
                            },
                            kind,
                            description,
                            object,
                            &mut seen,
                        )?;
                    }
                }
            }
        }
        Ok(snapshot)
    }

    fn add(
        &mut self,
        origin: Origin,
        kind: &Kind,
        object: &str,
        typed: Object,
        seen: &mut BTreeMap<String, Origin>,
    ) -> Result<(), SnapshotError> {
        if let Kind::Unknown(name) = kind {
            *self.unknown.entry(name.clone()).or_default() += 1;
            return Ok(());
        }
        if let Some(first) = seen.insert(object.to_string(), origin) {
            return Err(doc_error(
                origin.document,
                Some(object.to_string()),
                format!("listed twice (first in {first})"),
            ));
        }
        macro_rules! push {
            ($list:ident, $o:expr) => {{
                let mut o = *$o;
                if kind.namespaced() && o.metadata.namespace.as_deref().is_none_or(str::is_empty) {
                    o.metadata.namespace = Some("default".into());
                }
                self.$list.push(Located { origin, object: o });
            }};
        }
        match typed {
            Object::NodePool(o) => push!(node_pools, o),
            Object::NodeClaim(o) => push!(node_claims, o),
            // Nodes are cluster-scoped.
            Object::Node(o) => self.nodes.push(Located { origin, object: *o }),
            Object::Pod(o) => push!(pods, o),
            Object::DaemonSet(o) => push!(daemon_sets, o),
            Object::ReplicaSet(o) => push!(replica_sets, o),
            Object::Deployment(o) => push!(deployments, o),
            Object::StatefulSet(o) => push!(stateful_sets, o),
            Object::Service(o) => push!(services, o),
            Object::PodDisruptionBudget(o) => push!(pod_disruption_budgets, o),
            Object::PersistentVolume(o) => push!(persistent_volumes, o),
            Object::PersistentVolumeClaim(o) => push!(persistent_volume_claims, o),
            Object::StorageClass(o) => push!(storage_classes, o),
            Object::CSINode(o) => push!(csi_nodes, o),
            Object::Namespace(o) => push!(namespaces, o),
            Object::NodeOverlay(o) => push!(node_overlays, o),
            Object::CapacityBuffer(o) => push!(capacity_buffers, o),
            Object::PodTemplate(o) => push!(pod_templates, o),
            Object::Ignored => {}
        }
        Ok(())
    }

    /// The snapshot's CapacityBuffers, resolved against its PodTemplates and workloads.
    pub fn buffer_states(&self) -> Vec<crate::buffers::BufferState<'_>> {
        fn objects<T>(list: &[Located<T>]) -> Vec<&T> {
            list.iter().map(|l| &l.object).collect()
        }
        let buffers = objects(&self.capacity_buffers);
        let pod_templates = objects(&self.pod_templates);
        let deployments = objects(&self.deployments);
        let stateful_sets = objects(&self.stateful_sets);
        let replica_sets = objects(&self.replica_sets);
        let sources = crate::buffers::BufferSources {
            pod_templates: &pod_templates,
            deployments: &deployments,
            stateful_sets: &stateful_sets,
            replica_sets: &replica_sets,
        };
        crate::buffers::resolve_all(&buffers, &sources)
    }

    /// Builds the scheduler's input with [`crate::assemble::assemble`] (the one assembly the
    /// provisioner uses too), giving every NodePool `instance_types` and using `label_policy`.
    ///
    /// - Pending pods (see [`pod_state`]) are the batch, in snapshot order; a pod the
    ///   controller cannot convert (e.g. `matchFields`) is [`BatchStatus::Refused`]. Pods that
    ///   are neither bound nor provisionable (gated, nominated, DaemonSet or mirror pods, being
    ///   deleted) are left out with a note.
    /// - Nodes, launched NodeClaims and bound pods become [`ExistingNode`](joinery_core::scheduling::ExistingNode)s
    ///   ([`convert::existing_nodes`]).
    /// - NodePools being deleted and static NodePools are left out with a note, as the
    ///   controller does; the others become templates ([`crate::template::node_claim_template`]) with their
    ///   limits ([`convert::nodepool_limits`]). NodePool readiness and the NodeClass are not
    ///   checked: every pool gets `instance_types`.
    ///
    /// Errors (with the document and object named): a quantity that does not parse in any
    /// pod, DaemonSet or NodePool limit, an invalid NodePool requirement.
    pub fn assemble(
        &self,
        instance_types: &[InstanceType],
        label_policy: LabelPolicy,
    ) -> Result<Assembly, SnapshotError> {
        let mut notes = Vec::new();
        let describe = |kind: &str, namespace: Option<&str>, name: Option<&str>| match namespace {
            Some(ns) => format!("{kind} {ns}/{}", name.unwrap_or("")),
            None => format!("{kind} {}", name.unwrap_or("")),
        };

        // Pods: the batch, and a check of every live pod's requests. The batch also holds the
        // pods that must leave a deleting node (as upstream's provisioner adds them).
        let deleting = crate::drain::deleting_node_names(
            self.nodes.iter().map(|l| &l.object),
            self.node_claims.iter().map(|l| &l.object),
        );
        let mut pending = Vec::new();
        let mut left_out = Vec::new();
        let mut moving = Vec::new();
        for located in &self.pods {
            let pod = &located.object;
            let state = pod_state(pod);
            if matches!(state, PodState::Terminal) {
                continue;
            }
            let object = describe(
                "Pod",
                pod.metadata.namespace.as_deref(),
                pod.metadata.name.as_deref(),
            );
            let spec = pod.spec.clone().unwrap_or_default();
            convert::pod_requests(&spec)
                .map_err(|e| doc_error(located.origin.document, Some(object.clone()), e))?;
            match state {
                PodState::Bound
                    if spec
                        .node_name
                        .as_deref()
                        .is_some_and(|n| deleting.contains(n))
                        && crate::drain::is_reschedulable(pod) =>
                {
                    moving.push(object);
                    pending.push(pod);
                }
                PodState::Terminal | PodState::Bound => {}
                PodState::LeftOut(why) => {
                    let key = pod.key();
                    left_out.push(format!("{key} ({why})"));
                }
                PodState::Pending => pending.push(pod),
            }
        }
        if !moving.is_empty() {
            notes.push(format!(
                "{} pod(s) of deleting nodes are scheduled again, as the controller does: {}",
                moving.len(),
                abbreviate(&moving, 10)
            ));
        }
        if !left_out.is_empty() {
            notes.push(format!(
                "{} pod(s) without a node are not provisioned for, as the controller would not: {}",
                left_out.len(),
                abbreviate(&left_out, 10)
            ));
        }

        let mut overlays = Vec::new();
        for located in &self.node_overlays {
            let overlay = convert::overlay(&located.object)
                .map_err(|e| doc_error(located.origin.document, None, e))?;
            overlays.push(overlay);
        }
        for (a, b) in joinery_core::overlay::conflicts(&overlays) {
            notes.push(format!(
                "NodeOverlays {a} and {b} have the same weight and can match the same instance types; {a} wins (upstream marks both ValidationSucceeded=False)"
            ));
        }

        let mut pools: Vec<&Located<NodePool>> = Vec::new();
        let mut sorted: Vec<&Located<NodePool>> = self.node_pools.iter().collect();
        sorted.sort_by(|a, b| a.object.metadata.name.cmp(&b.object.metadata.name));
        for located in sorted {
            let pool = &located.object;
            let name = pool.metadata.name.clone().unwrap_or_default();
            if pool.metadata.deletion_timestamp.is_some() {
                notes.push(format!(
                    "NodePool {name} is being deleted; left out, as the controller does"
                ));
            } else if pool.spec.is_static() {
                notes.push(format!("NodePool {name} is static (spec.replicas); static pools do not provision for pods"));
            } else if let Some(why) = crate::template::not_ready(pool) {
                notes.push(format!("{why}; left out, as the controller does"));
            } else {
                pools.push(located);
            }
        }
        let offers: Vec<PoolOffer<'_>> = pools
            .iter()
            .map(|l| PoolOffer {
                pool: &l.object,
                instance_types,
            })
            .collect();
        let objects = self.objects();
        let mut assembly = crate::assemble::assemble(
            &objects,
            &pending,
            &offers,
            &overlays,
            label_policy,
            Source::Snapshot,
        );
        if let Some(problem) = assembly.problems.first() {
            let (document, object) = match problem.object {
                ProblemObject::DaemonSet(i) => {
                    let located = &self.daemon_sets[i];
                    (
                        located.origin.document,
                        describe(
                            "DaemonSet",
                            located.object.metadata.namespace.as_deref(),
                            located.object.metadata.name.as_deref(),
                        ),
                    )
                }
                ProblemObject::NodePool(i) => {
                    let located = pools[i];
                    (
                        located.origin.document,
                        format!(
                            "NodePool {}",
                            located.object.metadata.name.as_deref().unwrap_or("")
                        ),
                    )
                }
            };
            let message = problem
                .message
                .strip_prefix(&format!("{object}: "))
                .map(str::to_string)
                .unwrap_or_else(|| problem.message.clone());
            return Err(doc_error(document, Some(object), message));
        }

        // Services, ReplicaSets and StatefulSets serve default spread constraints (the caller
        // decides whether a scheduler config asks for them).
        let unused: Vec<String> = [
            ("Deployment", self.deployments.len()),
            ("PodDisruptionBudget", self.pod_disruption_budgets.len()),
        ]
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(kind, n)| format!("{n} {kind}"))
        .collect();
        if !unused.is_empty() {
            notes.push(format!(
                "read but not used by the scheduler yet: {}",
                unused.join(", ")
            ));
        }
        if !self.unknown.is_empty() {
            let kinds: Vec<String> = self
                .unknown
                .iter()
                .map(|(k, n)| format!("{n} {k}"))
                .collect();
            notes.push(format!(
                "kinds joinery does not read, ignored: {}",
                kinds.join(", ")
            ));
        }
        assembly.notes = notes;
        Ok(assembly)
    }

    /// The snapshot's objects, lent to [`crate::assemble::assemble`].
    pub fn objects(&self) -> ClusterObjects<'_> {
        fn refs<T>(list: &[Located<T>]) -> Vec<&T> {
            list.iter().map(|l| &l.object).collect()
        }
        ClusterObjects {
            nodes: refs(&self.nodes),
            node_claims: refs(&self.node_claims),
            pods: refs(&self.pods),
            daemon_sets: refs(&self.daemon_sets),
            persistent_volumes: refs(&self.persistent_volumes),
            persistent_volume_claims: refs(&self.persistent_volume_claims),
            storage_classes: refs(&self.storage_classes),
            csi_nodes: refs(&self.csi_nodes),
            namespaces: refs(&self.namespaces),
        }
    }
}

impl Snapshot {
    /// Where a pending pod's volumes can be attached, as upstream's volume topology computes
    /// it: for each PersistentVolumeClaim (or generic ephemeral volume) of the pod, the first
    /// node-affinity term of its bound PersistentVolume (hostname requirements dropped for
    /// local and hostPath volumes, which a new node cannot keep), or, for a claim not bound
    /// yet, the first `allowedTopologies` term of its StorageClass. All of them hold at once,
    /// so the result is one requirement set (empty list when unconstrained). A claim, volume
    /// or StorageClass missing from the snapshot refuses the pod, as upstream's validation
    /// does. (Indexes the snapshot's volumes on every call; [`assemble`](Self::assemble)
    /// indexes them once.)
    pub fn volume_requirements(&self, pod: &LeanPod) -> Result<Vec<Requirements>, String> {
        self.volume_index()
            .requirements(pod)
            .map_err(|e| e.missing_from("the snapshot"))
    }

    /// The snapshot's claims, volumes and StorageClasses by name.
    fn volume_index(&self) -> VolumeIndex<'_> {
        VolumeIndex::new(
            &self.persistent_volumes,
            &self.persistent_volume_claims,
            &self.storage_classes,
        )
    }
}

/// The first `max` items joined by `", "`, then `and N more`: a long list of names in an
/// error or a note.
pub fn abbreviate<S: AsRef<str>>(items: &[S], max: usize) -> String {
    let mut s = items
        .iter()
        .take(max)
        .map(AsRef::as_ref)
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > max {
        s.push_str(&format!(" and {} more", items.len() - max));
    }
    s
}

// ---------------------------------------------------------------------------------------------
// Instance-type catalogs.

/// Reads an instance-type catalog file (YAML or JSON, the format of [`joinery_core::catalog`])
/// into the instance types a cloud plugin would return and the label policy (upstream's, plus
/// the catalog's `wellKnownLabels`). Errors name the entry and field.
pub fn read_catalog(text: &str) -> Result<(Vec<InstanceType>, LabelPolicy), SnapshotError> {
    let catalog: Catalog =
        serde_norway::from_str(text).map_err(|e| SnapshotError::Catalog(e.to_string()))?;
    let types = catalog
        .instance_types()
        .map_err(|e| SnapshotError::Catalog(e.to_string()))?;
    Ok((types, catalog.label_policy()))
}

#[cfg(test)]
mod tests;
