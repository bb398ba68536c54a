//! The fast way to read a snapshot: every YAML document read once.
//!
//! The careful reader ([`Snapshot::parse_two_passes`]) reads each document twice — once for
//! its `apiVersion` and `kind`, once as the type they name — so that it can route any
//! document, whatever the order of its keys, and word every error. Documents written by
//! `kubectl get -o yaml` (and nearly all hand-written ones) put `apiVersion` and `kind` before
//! every other key, so their type is known by the time the rest arrives: this reader then
//! hands the rest of the mapping straight to the typed deserializer (with the two keys
//! replayed in front), and the text is tokenized once.
//!
//! It gives up — [`read`] returns `None` — at the first document it cannot take that way or
//! at the first error of any kind, and the caller reads the whole text with the careful
//! reader, which is the one that words errors. What this reader accepts, the careful one
//! reads to the same [`Snapshot`] (tested on every fixture).

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::value::{MapAccessDeserializer, StringDeserializer};
use serde::de::{
    self, DeserializeSeed, Deserializer, IgnoredAny, IntoDeserializer, MapAccess, SeqAccess,
    Visitor,
};

use super::{Kind, KindSeed, Object, Origin, Snapshot};

/// Reads `text` in one pass, or `None` when the careful reader must (see the module docs).
pub(super) fn read(text: &str) -> Option<Snapshot> {
    let mut snapshot = Snapshot::default();
    let mut seen: BTreeMap<String, Origin> = BTreeMap::new();
    for (i, doc) in serde_norway::Deserializer::from_str(text).enumerate() {
        let document = i + 1;
        match DocumentSeed.deserialize(doc).ok()? {
            Document::Empty => {}
            Document::Single(item) => {
                let (kind, object, typed) = item;
                snapshot
                    .add(
                        Origin {
                            document,
                            item: None,
                        },
                        &kind,
                        &object,
                        typed,
                        &mut seen,
                    )
                    .ok()?;
            }
            Document::List(items) => {
                for (j, item) in items.into_iter().enumerate() {
                    let Some((kind, object, typed)) = item else {
                        continue;
                    };
                    snapshot
                        .add(
                            Origin {
                                document,
                                item: Some(j),
                            },
                            &kind,
                            &object,
                            typed,
                            &mut seen,
                        )
                        .ok()?;
                }
            }
        }
    }
    Some(snapshot)
}

/// One object: its kind, its description (`Kind namespace/name`) and its typed value.
type Item = (Kind, String, Object);

/// What one document holds.
enum Document {
    Empty,
    Single(Item),
    /// A `*List`: its items, `None` for a null one.
    List(Vec<Option<Item>>),
}

/// Why this reader gives up; never shown (the careful reader words the real error).
fn give_up<E: de::Error>() -> E {
    E::custom("read with the careful reader")
}

struct DocumentSeed;

impl<'de> DeserializeSeed<'de> for DocumentSeed {
    type Value = Document;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Document, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for DocumentSeed {
    type Value = Document;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_none<E: de::Error>(self) -> Result<Document, E> {
        Ok(Document::Empty)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Document, E> {
        Ok(Document::Empty)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Document, D::Error> {
        d.deserialize_map(ObjectVisitor { top_level: true })
    }
}

/// Reads one mapping: an object, or (at the top level) a `*List` of them.
struct ObjectVisitor {
    top_level: bool,
}

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = Document;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Document, A::Error> {
        let mut api_version: Option<String> = None;
        let mut kind: Option<String> = None;
        let mut items: Option<Vec<Option<Item>>> = None;
        let is_list = |kind: &Option<String>| kind.as_deref().is_some_and(|k| k.ends_with("List"));
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "apiVersion" if api_version.is_none() => api_version = Some(map.next_value()?),
                "kind" if kind.is_none() => kind = Some(map.next_value()?),
                "items"
                    if self.top_level && items.is_none() && (kind.is_none() || is_list(&kind)) =>
                {
                    items = Some(map.next_value_seed(ItemsSeed)?);
                }
                _ if is_list(&kind) && self.top_level => {
                    map.next_value::<IgnoredAny>()?;
                }
                _ => {
                    let (Some(api_version), Some(kind)) = (api_version, kind) else {
                        return Err(give_up());
                    };
                    if items.is_some() {
                        return Err(give_up());
                    }
                    return typed_rest(api_version, kind, key, map).map(Document::Single);
                }
            }
        }
        match items {
            Some(items)
                if is_list(&kind) && api_version.as_deref().is_some_and(|v| !v.is_empty()) =>
            {
                Ok(Document::List(items))
            }
            _ => Err(give_up()),
        }
    }
}

/// Reads the rest of an object's mapping as the type of `kind`, `key` being the first key
/// after `apiVersion` and `kind` (its value still unread).
fn typed_rest<'de, A: MapAccess<'de>>(
    api_version: String,
    kind: String,
    key: String,
    map: A,
) -> Result<Item, A::Error> {
    if api_version.is_empty() || kind.is_empty() {
        return Err(give_up());
    }
    let parsed = Kind::of(&api_version, &kind).map_err(|_| give_up::<A::Error>())?;
    let replay = Replay {
        front: VecDeque::from([
            ("apiVersion".to_string(), api_version),
            ("kind".to_string(), kind.clone()),
        ]),
        value: None,
        held_key: Some(key),
        map,
    };
    let typed = KindSeed(Some(&parsed)).deserialize(MapAccessDeserializer::new(replay))?;
    let description = match name_and_namespace(&typed) {
        None => kind,
        Some((name, namespace)) => {
            let name = name.unwrap_or("");
            if name.is_empty() {
                return Err(give_up());
            }
            parsed.describe(&kind, namespace, name)
        }
    };
    Ok((parsed, description, typed))
}

/// The name and namespace of a typed object (`None` for an ignored one).
fn name_and_namespace(object: &Object) -> Option<(Option<&str>, Option<&str>)> {
    let meta: &ObjectMeta = match object {
        Object::Pod(o) => {
            return Some((o.metadata.name.as_deref(), o.metadata.namespace.as_deref()));
        }
        Object::Node(o) => return Some((o.metadata.name.as_deref(), None)),
        Object::NodePool(o) => &o.metadata,
        Object::NodeClaim(o) => &o.metadata,
        Object::DaemonSet(o) => &o.metadata,
        Object::ReplicaSet(o) => &o.metadata,
        Object::Deployment(o) => &o.metadata,
        Object::StatefulSet(o) => &o.metadata,
        Object::Service(o) => &o.metadata,
        Object::PodDisruptionBudget(o) => &o.metadata,
        Object::PersistentVolume(o) => &o.metadata,
        Object::PersistentVolumeClaim(o) => &o.metadata,
        Object::StorageClass(o) => &o.metadata,
        Object::CSINode(o) => &o.metadata,
        Object::Namespace(o) => &o.metadata,
        Object::NodeOverlay(o) => &o.metadata,
        Object::CapacityBuffer(o) => &o.metadata,
        Object::PodTemplate(o) => &o.metadata,
        Object::Ignored => return None,
    };
    Some((meta.name.as_deref(), meta.namespace.as_deref()))
}

/// A mapping's entries with some already-read ones put back in front: the `apiVersion` and
/// `kind` read to route it, then the key that came after them (whose value is still in
/// `map`), then the rest of `map`.
struct Replay<A> {
    front: VecDeque<(String, String)>,
    /// The value of the front entry whose key was just handed out.
    value: Option<String>,
    held_key: Option<String>,
    map: A,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for Replay<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        if let Some((key, value)) = self.front.pop_front() {
            self.value = Some(value);
            return seed
                .deserialize(IntoDeserializer::<A::Error>::into_deserializer(key))
                .map(Some);
        }
        if let Some(key) = self.held_key.take() {
            return seed
                .deserialize(IntoDeserializer::<A::Error>::into_deserializer(key))
                .map(Some);
        }
        self.map.next_key_seed(seed)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        match self.value.take() {
            Some(value) => seed.deserialize(StringDeserializer::<A::Error>::new(value)),
            None => self.map.next_value_seed(seed),
        }
    }
}

/// A `*List`'s `items`, each read as an object.
struct ItemsSeed;

impl<'de> DeserializeSeed<'de> for ItemsSeed {
    type Value = Vec<Option<Item>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for ItemsSeed {
    type Value = Vec<Option<Item>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of Kubernetes objects")
    }

    fn visit_seq<S: SeqAccess<'de>>(self, mut seq: S) -> Result<Self::Value, S::Error> {
        let mut out = Vec::new();
        while let Some(item) = seq.next_element_seed(ItemSeed)? {
            out.push(item);
        }
        Ok(out)
    }
}

/// One item of a `*List` (`None` for a null item).
struct ItemSeed;

impl<'de> DeserializeSeed<'de> for ItemSeed {
    type Value = Option<Item>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for ItemSeed {
    type Value = Option<Item>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes object")
    }

    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        match d.deserialize_map(ObjectVisitor { top_level: false })? {
            Document::Single(item) => Ok(Some(item)),
            _ => Err(give_up()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every snapshot fixture of `joinery schedule`'s tests.
    fn fixtures() -> Vec<(String, String)> {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../cli/tests/fixtures/schedule");
        let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .map(|p| {
                (
                    p.file_name().unwrap().to_string_lossy().into_owned(),
                    std::fs::read_to_string(&p).unwrap(),
                )
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn both_readers_read_every_fixture_alike() {
        let mut one_pass = 0;
        for (name, text) in fixtures() {
            let careful = Snapshot::parse_two_passes(&text);
            match read(&text) {
                Some(fast) => {
                    assert_eq!(Ok(&fast), careful.as_ref(), "{name}: the readers disagree");
                    one_pass += 1;
                }
                None => assert!(
                    careful.is_err() || text.trim().is_empty(),
                    "{name}: read twice though it reads fine"
                ),
            }
        }
        assert!(
            one_pass >= 15,
            "only {one_pass} fixtures were read in one pass"
        );
    }

    #[test]
    fn kubectl_list_order_is_read_in_one_pass_and_other_orders_fall_back() {
        let kubectl = "apiVersion: v1\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a}\n  spec: {containers: [{name: c}]}\n- null\nkind: List\nmetadata: {resourceVersion: \"\"}\n";
        let fast = read(kubectl).expect("kubectl's key order is read in one pass");
        assert_eq!(fast.pods.len(), 1);
        assert_eq!(
            fast.pods[0].object.metadata.namespace.as_deref(),
            Some("default")
        );
        assert_eq!(Ok(fast), Snapshot::parse_two_passes(kubectl));

        let kind_last = "metadata: {name: a, namespace: shop}\nspec: {containers: [{name: c, resources: {requests: {cpu: 1}}}]}\napiVersion: v1\nkind: Pod\n";
        assert!(read(kind_last).is_none());
        let parsed = Snapshot::parse(kind_last).expect("the careful reader takes any key order");
        assert_eq!(parsed.pods[0].object.metadata.name.as_deref(), Some("a"));
    }

    #[test]
    fn errors_are_worded_by_the_careful_reader() {
        let garbled = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: 7}\n";
        assert!(read(garbled).is_none());
        let message = Snapshot::parse(garbled).unwrap_err().to_string();
        assert!(
            message.contains("document 1")
                && message.contains("Pod default/a")
                && message.contains("spec.containers"),
            "{message}"
        );
    }
}
