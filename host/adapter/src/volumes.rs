//! Volumes as the scheduler sees them, from PersistentVolumeClaims, the PersistentVolumes
//! they are bound to, StorageClasses and CSINodes: volume topology (where a pending pod's
//! volumes let a new node be) and CSI attachments (which volumes a pod needs attached, and how
//! many each node's drivers can take).
//!
//! Used by the provisioner (over the cluster caches) and by `joinery schedule` (over a
//! snapshot's objects), so both compute the same
//! [`PendingPod::volume_requirements`](joinery_core::scheduling::PendingPod::volume_requirements)
//! and [`PendingPod::volumes`](joinery_core::scheduling::PendingPod::volumes).

use std::borrow::Borrow;
use std::collections::BTreeMap;

use joinery_core::labels::HOSTNAME_LABEL;
use joinery_core::requirements::{Operator, Requirement, Requirements};
use joinery_core::scheduling::{AttachedVolume, BoundPod, ExistingNode};
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Volume};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::convert;
use crate::lean::LeanPod;

/// Why a pod's volume topology cannot be computed. Missing objects are told apart so the
/// caller can say where it looked ([`VolumeError::missing_from`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VolumeError {
    /// A `persistentVolumeClaim` volume names a claim that does not exist (yet): the pod cannot
    /// be scheduled until it does.
    #[error("PersistentVolumeClaim {namespace}/{claim} (volume {volume}) does not exist")]
    MissingClaim {
        /// The pod's namespace.
        namespace: String,
        /// The claim's name.
        claim: String,
        /// The pod's volume naming it.
        volume: String,
    },
    /// A claim is bound (`spec.volumeName`) to a PersistentVolume that does not exist.
    #[error(
        "PersistentVolume {persistent_volume} (bound to PersistentVolumeClaim {namespace}/{claim}) does not exist"
    )]
    MissingVolume {
        /// The PersistentVolume's name.
        persistent_volume: String,
        /// The claim's namespace.
        namespace: String,
        /// The claim's name.
        claim: String,
    },
    /// An unbound claim (or an ephemeral volume) names a StorageClass that does not exist.
    #[error("StorageClass {class} (volume {volume}) does not exist")]
    MissingStorageClass {
        /// The StorageClass's name.
        class: String,
        /// The pod's volume.
        volume: String,
    },
    /// A PersistentVolume's node affinity cannot be read; the message names the field.
    #[error("{0}")]
    Invalid(String),
}

impl VolumeError {
    /// The message with a missing object said to be missing from `place` (e.g. `the
    /// snapshot`): `PersistentVolumeClaim db/data (volume data) is not in the snapshot`.
    pub fn missing_from(&self, place: &str) -> String {
        let text = self.to_string();
        match text.strip_suffix(" does not exist") {
            Some(subject) if !matches!(self, VolumeError::Invalid(_)) => {
                format!("{subject} is not in {place}")
            }
            _ => text,
        }
    }
}

/// PersistentVolumeClaims, PersistentVolumes and StorageClasses by name, borrowed from the
/// lists they were built from.
pub struct VolumeIndex<'a> {
    claims: BTreeMap<(&'a str, &'a str), &'a PersistentVolumeClaim>,
    volumes: BTreeMap<&'a str, &'a PersistentVolume>,
    classes: BTreeMap<&'a str, &'a StorageClass>,
}

fn name(meta: &ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or("")
}

/// The claim a pod's volume reads, with — for a generic ephemeral volume, whose claim is named
/// after the pod and the volume — the StorageClass its template names (`Some(None)` when it
/// names none); `None` for a volume without a claim.
fn volume_claim(pod_name: &str, volume: &Volume) -> Option<(String, Option<Option<String>>)> {
    if let Some(pvc) = &volume.persistent_volume_claim {
        Some((pvc.claim_name.clone(), None))
    } else {
        let ephemeral = volume.ephemeral.as_ref()?;
        let class = ephemeral
            .volume_claim_template
            .as_ref()
            .and_then(|t| t.spec.storage_class_name.clone());
        Some((format!("{pod_name}-{}", volume.name), Some(class)))
    }
}

impl<'a> VolumeIndex<'a> {
    /// Indexes the objects (any list of values, references, `Arc`s…). A claim without a
    /// namespace is filed under the empty namespace.
    pub fn new<V, C, S>(volumes: &'a [V], claims: &'a [C], classes: &'a [S]) -> VolumeIndex<'a>
    where
        V: Borrow<PersistentVolume>,
        C: Borrow<PersistentVolumeClaim>,
        S: Borrow<StorageClass>,
    {
        VolumeIndex {
            claims: claims
                .iter()
                .map(|c| {
                    let c: &PersistentVolumeClaim = c.borrow();
                    (
                        (
                            c.metadata.namespace.as_deref().unwrap_or(""),
                            name(&c.metadata),
                        ),
                        c,
                    )
                })
                .collect(),
            volumes: volumes
                .iter()
                .map(|v| (name(&v.borrow().metadata), v.borrow()))
                .collect(),
            classes: classes
                .iter()
                .map(|s| (name(&s.borrow().metadata), s.borrow()))
                .collect(),
        }
    }

    /// Where a pending pod's volumes can be attached, as upstream's volume topology computes
    /// it: for each PersistentVolumeClaim (or generic ephemeral volume) of the pod, the
    /// node-affinity terms of its bound PersistentVolume (hostname requirements dropped for
    /// local and hostPath volumes, which a new node cannot keep), or, for a claim not bound
    /// yet, the `allowedTopologies` terms of its StorageClass. A volume's terms are
    /// alternatives (any one will do); every volume must hold at once. The result lists the
    /// combinations as alternatives, in term order (at most [`MAX_ALTERNATIVES`]; an empty
    /// list when unconstrained). A claim, volume or StorageClass that does not exist is an
    /// error, as upstream's validation refuses such a pod. A generic ephemeral volume whose
    /// claim does not exist yet is read from its template's StorageClass.
    pub fn requirements(&self, pod: &LeanPod) -> Result<Vec<Requirements>, VolumeError> {
        let namespace = pod
            .metadata
            .namespace
            .as_deref()
            .unwrap_or_default()
            .to_string();
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let mut combinations: Vec<Requirements> = Vec::new();
        for volume in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            let Some((claim_name, ephemeral_class)) = volume_claim(&pod_name, volume) else {
                continue;
            };
            let claim = self
                .claims
                .get(&(namespace.as_str(), claim_name.as_str()))
                .copied();
            let terms: Vec<Vec<Requirement>> = match (claim, ephemeral_class) {
                (None, None) => {
                    return Err(VolumeError::MissingClaim {
                        namespace,
                        claim: claim_name,
                        volume: volume.name.clone(),
                    });
                }
                (None, Some(class)) => self.storage_class_terms(class.as_deref(), &volume.name)?,
                (Some(claim), _) => {
                    let spec = claim.spec.clone().unwrap_or_default();
                    match spec.volume_name.as_deref().filter(|v| !v.is_empty()) {
                        Some(pv_name) => {
                            self.persistent_volume_terms(pv_name, &namespace, &claim_name)?
                        }
                        None => self.storage_class_terms(
                            spec.storage_class_name.as_deref(),
                            &volume.name,
                        )?,
                    }
                }
            };
            // No term, or a term that asks nothing: the volume attaches anywhere.
            if terms.is_empty() || terms.iter().any(Vec::is_empty) {
                continue;
            }
            let base = if combinations.is_empty() {
                vec![Requirements::new()]
            } else {
                combinations
            };
            combinations = base
                .iter()
                .flat_map(|so_far| {
                    terms.iter().map(move |term| {
                        let mut next = so_far.clone();
                        for r in term {
                            next.add(r.clone());
                        }
                        next
                    })
                })
                .take(MAX_ALTERNATIVES)
                .collect();
        }
        Ok(combinations)
    }

    fn persistent_volume_terms(
        &self,
        pv_name: &str,
        namespace: &str,
        claim: &str,
    ) -> Result<Vec<Vec<Requirement>>, VolumeError> {
        let Some(pv) = self.volumes.get(pv_name) else {
            return Err(VolumeError::MissingVolume {
                persistent_volume: pv_name.to_string(),
                namespace: namespace.to_string(),
                claim: claim.to_string(),
            });
        };
        let spec = pv.spec.clone().unwrap_or_default();
        let node_local = spec.local.is_some() || spec.host_path.is_some();
        let terms = spec
            .node_affinity
            .and_then(|a| a.required)
            .map(|r| r.node_selector_terms)
            .unwrap_or_default();
        let mut out = Vec::new();
        for (i, term) in terms.into_iter().enumerate() {
            let mut requirements = Vec::new();
            for (j, e) in term
                .match_expressions
                .unwrap_or_default()
                .into_iter()
                .enumerate()
            {
                if node_local && e.key == HOSTNAME_LABEL {
                    continue;
                }
                let at = format!(
                    "PersistentVolume {pv_name}: spec.nodeAffinity.required.nodeSelectorTerms[{i}].matchExpressions[{j}]"
                );
                let op: Operator = e
                    .operator
                    .parse()
                    .map_err(|err| VolumeError::Invalid(format!("{at}.operator: {err}")))?;
                requirements.push(
                    Requirement::new(e.key.clone(), op, e.values.unwrap_or_default())
                        .map_err(|err| VolumeError::Invalid(format!("{at}: {err}")))?,
                );
            }
            out.push(requirements);
        }
        Ok(out)
    }

    fn storage_class_terms(
        &self,
        class: Option<&str>,
        volume: &str,
    ) -> Result<Vec<Vec<Requirement>>, VolumeError> {
        let Some(class) = class.filter(|c| !c.is_empty()) else {
            return Ok(Vec::new());
        };
        let Some(sc) = self.classes.get(class) else {
            return Err(VolumeError::MissingStorageClass {
                class: class.to_string(),
                volume: volume.to_string(),
            });
        };
        Ok(sc
            .allowed_topologies
            .iter()
            .flatten()
            .map(|t| {
                t.match_label_expressions
                    .iter()
                    .flatten()
                    .map(|e| Requirement::in_values(e.key.clone(), e.values.iter().cloned()))
                    .collect()
            })
            .collect())
    }

    /// The CSI volumes a pod needs attached, each identified by its PersistentVolumeClaim
    /// (`namespace/name`, as upstream counts them): the driver is the bound
    /// PersistentVolume's `csi.driver`, or for a claim not bound yet (or a generic ephemeral
    /// volume whose claim does not exist yet) its StorageClass's provisioner. Volumes whose
    /// driver cannot be told (no claim, no class, not CSI) are left out.
    pub fn attachments(&self, pod: &LeanPod) -> Vec<AttachedVolume> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("");
        let pod_name = pod.metadata.name.as_deref().unwrap_or("");
        let mut out = Vec::new();
        for volume in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            let Some((claim_name, ephemeral_class)) = volume_claim(pod_name, volume) else {
                continue;
            };
            let template_class = ephemeral_class.flatten();
            let driver = match self.claims.get(&(namespace, claim_name.as_str())) {
                Some(claim) => {
                    let spec = claim.spec.as_ref();
                    match spec
                        .and_then(|s| s.volume_name.as_deref())
                        .filter(|v| !v.is_empty())
                    {
                        Some(pv) => self
                            .volumes
                            .get(pv)
                            .and_then(|pv| pv.spec.as_ref()?.csi.as_ref())
                            .map(|csi| csi.driver.clone()),
                        None => {
                            self.provisioner(spec.and_then(|s| s.storage_class_name.as_deref()))
                        }
                    }
                }
                None => self.provisioner(template_class.as_deref()),
            };
            if let Some(driver) = driver {
                out.push(AttachedVolume::new(
                    driver,
                    format!("{namespace}/{claim_name}"),
                ));
            }
        }
        out
    }

    fn provisioner(&self, class: Option<&str>) -> Option<String> {
        self.classes
            .get(class.filter(|c| !c.is_empty())?)
            .map(|sc| sc.provisioner.clone())
    }

    /// The bound, non-terminal pods in core form ([`convert::bound_pod`]) with the CSI
    /// volumes they hold on their nodes.
    pub fn bound_pods<P: Borrow<LeanPod>>(&self, pods: &[P]) -> Vec<BoundPod> {
        pods.iter()
            .filter_map(|p| {
                let mut bound = convert::bound_pod(p.borrow())?;
                bound.volumes = self.attachments(p.borrow());
                Some(bound)
            })
            .collect()
    }
}

/// Each node's CSI attach limits (its CSINode's `spec.drivers[].allocatable.count`), by node
/// name; drivers without a count are unlimited and left out.
fn attach_limits<C: Borrow<CSINode>>(csi_nodes: &[C]) -> BTreeMap<String, BTreeMap<String, u32>> {
    csi_nodes
        .iter()
        .map(Borrow::borrow)
        .map(|n| {
            let limits = n
                .spec
                .drivers
                .iter()
                .filter_map(|d| {
                    Some((
                        d.name.clone(),
                        u32::try_from(d.allocatable.as_ref()?.count?).ok()?,
                    ))
                })
                .collect();
            (name(&n.metadata).to_string(), limits)
        })
        .collect()
}

/// Gives existing nodes the CSI attach limits of their CSINode (same name as the node):
/// `spec.drivers[].allocatable.count` per driver; drivers without a count are unlimited.
pub fn apply_attach_limits<C: Borrow<CSINode>>(nodes: &mut [ExistingNode], csi_nodes: &[C]) {
    let limits = attach_limits(csi_nodes);
    for node in nodes {
        if let Some(l) = limits.get(&node.name) {
            node.volume_limits = l.clone();
        }
    }
}

/// At most this many volume alternatives are kept for a pod (the combinations of its volumes'
/// terms, in order).
pub const MAX_ALTERNATIVES: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;
    use joinery_core::labels::ZONE_LABEL;
    use serde_json::json;
    use std::sync::Arc;

    fn of<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
        serde_json::from_value(v).unwrap()
    }

    fn zone_pv(name: &str, zone: &str) -> PersistentVolume {
        of(
            json!({"metadata": {"name": name}, "spec": {"csi": {"driver": "example.com/csi", "volumeHandle": name},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": [zone]}]}]}}}}),
        )
    }

    fn claim(namespace: &str, name: &str, spec: serde_json::Value) -> PersistentVolumeClaim {
        of(json!({"metadata": {"name": name, "namespace": namespace}, "spec": spec}))
    }

    fn pod_with(volumes: serde_json::Value) -> LeanPod {
        of(
            json!({"metadata": {"name": "p", "namespace": "db"}, "spec": {"containers": [], "volumes": volumes}}),
        )
    }

    fn zones(reqs: &[Requirements]) -> Vec<String> {
        assert_eq!(reqs.len(), 1, "{reqs:?}");
        let zone = reqs[0].get(ZONE_LABEL).unwrap();
        ["zone-a", "zone-b", "zone-c"]
            .iter()
            .filter(|z| zone.has(z))
            .map(|z| z.to_string())
            .collect()
    }

    #[test]
    fn attachments_name_the_driver_and_the_claim() {
        let pvs = [zone_pv("pv-1", "zone-b")];
        let pvcs = [
            claim("db", "data", json!({"volumeName": "pv-1"})),
            claim("db", "new", json!({"storageClassName": "fast"})),
        ];
        let classes: [StorageClass; 1] = [of(
            json!({"metadata": {"name": "fast"}, "provisioner": "ebs.csi.aws.com"}),
        )];
        let index = VolumeIndex::new(&pvs, &pvcs, &classes);
        let pod = pod_with(json!([
            {"name": "a", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "b", "persistentVolumeClaim": {"claimName": "new"}},
            {"name": "c", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "fast"}}}},
            {"name": "d", "emptyDir": {}}
        ]));
        assert_eq!(
            index.attachments(&pod),
            [
                AttachedVolume::new("example.com/csi", "db/data"),
                AttachedVolume::new("ebs.csi.aws.com", "db/new"),
                AttachedVolume::new("ebs.csi.aws.com", "db/p-c"),
            ]
        );
        let csi: CSINode = of(json!({"metadata": {"name": "n1"}, "spec": {"drivers": [
            {"name": "ebs.csi.aws.com", "nodeID": "i-1", "allocatable": {"count": 25}},
            {"name": "example.com/csi", "nodeID": "i-1"}]}}));
        let limits = attach_limits(&[csi]);
        assert_eq!(
            limits["n1"],
            BTreeMap::from([("ebs.csi.aws.com".to_owned(), 25)]),
            "a driver without a count is unlimited"
        );
    }

    #[test]
    fn a_bound_claim_takes_its_volumes_node_affinity() {
        let pvs = vec![Arc::new(zone_pv("pv-1", "zone-b"))];
        let pvcs = vec![Arc::new(claim("db", "data", json!({"volumeName": "pv-1"})))];
        let index = VolumeIndex::new(&pvs, &pvcs, &[] as &[StorageClass]);
        let reqs = index
            .requirements(&pod_with(
                json!([{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]),
            ))
            .unwrap();
        assert_eq!(zones(&reqs), ["zone-b"]);
    }

    #[test]
    fn an_unbound_claim_takes_its_storage_class_topology() {
        let sc: StorageClass = of(
            json!({"metadata": {"name": "fast"}, "provisioner": "example.com/csi",
            "allowedTopologies": [{"matchLabelExpressions": [{"key": ZONE_LABEL, "values": ["zone-a", "zone-c"]}]}]}),
        );
        let pvcs = [claim("db", "data", json!({"storageClassName": "fast"}))];
        let classes = [sc];
        let index = VolumeIndex::new(&[] as &[PersistentVolume], &pvcs, &classes);
        let reqs = index
            .requirements(&pod_with(
                json!([{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]),
            ))
            .unwrap();
        assert_eq!(zones(&reqs), ["zone-a", "zone-c"]);
        // Without topology the class constrains nothing.
        let plain: StorageClass =
            of(json!({"metadata": {"name": "fast"}, "provisioner": "example.com/csi"}));
        let classes = [plain];
        let index = VolumeIndex::new(&[] as &[PersistentVolume], &pvcs, &classes);
        assert!(
            index
                .requirements(&pod_with(
                    json!([{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}])
                ))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn each_term_is_an_alternative_and_every_volume_must_hold() {
        // A volume reachable from zone-a or zone-b (two terms), and a class topology allowing
        // zone-b or zone-c on another key's term: the alternatives are the combinations.
        let pv: PersistentVolume = of(
            json!({"metadata": {"name": "pv-1"}, "spec": {"csi": {"driver": "d", "volumeHandle": "h"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": ["zone-a"]}]},
                {"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": ["zone-b"]}]}]}}}}),
        );
        let sc: StorageClass = of(json!({"metadata": {"name": "fast"}, "provisioner": "d",
            "allowedTopologies": [
                {"matchLabelExpressions": [{"key": "rack", "values": ["r1"]}]},
                {"matchLabelExpressions": [{"key": "rack", "values": ["r2"]}]}]}));
        let pvs = [pv];
        let pvcs = [
            claim("db", "data", json!({"volumeName": "pv-1"})),
            claim("db", "scratch", json!({"storageClassName": "fast"})),
        ];
        let classes = [sc];
        let index = VolumeIndex::new(&pvs, &pvcs, &classes);
        let pod = pod_with(json!([
            {"name": "d", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "s", "persistentVolumeClaim": {"claimName": "scratch"}}]));
        let alternatives = index.requirements(&pod).unwrap();
        let described: Vec<(String, String)> = alternatives
            .iter()
            .map(|r| {
                let one = |key: &str| r.get(key).unwrap().values().iter().next().unwrap().clone();
                (one(ZONE_LABEL), one("rack"))
            })
            .collect();
        let expected = [
            ("zone-a", "r1"),
            ("zone-a", "r2"),
            ("zone-b", "r1"),
            ("zone-b", "r2"),
        ];
        assert_eq!(
            described,
            expected.map(|(z, r)| (z.to_owned(), r.to_owned()))
        );
    }

    #[test]
    fn pods_without_claims_are_unconstrained() {
        let index = VolumeIndex::new(
            &[] as &[PersistentVolume],
            &[] as &[PersistentVolumeClaim],
            &[] as &[StorageClass],
        );
        let pod = pod_with(
            json!([{"name": "cfg", "configMap": {"name": "cfg"}}, {"name": "tmp", "emptyDir": {}}]),
        );
        assert_eq!(
            index.requirements(&pod).unwrap(),
            Vec::<Requirements>::new()
        );
    }

    #[test]
    fn missing_objects_are_named() {
        let none_pv: &[PersistentVolume] = &[];
        let none_sc: &[StorageClass] = &[];
        let index = VolumeIndex::new(none_pv, &[] as &[PersistentVolumeClaim], none_sc);
        let e = index
            .requirements(&pod_with(
                json!([{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]),
            ))
            .unwrap_err();
        assert_eq!(
            e,
            VolumeError::MissingClaim {
                namespace: "db".into(),
                claim: "data".into(),
                volume: "d".into()
            }
        );
        assert_eq!(
            e.to_string(),
            "PersistentVolumeClaim db/data (volume d) does not exist"
        );
        assert_eq!(
            e.missing_from("the snapshot"),
            "PersistentVolumeClaim db/data (volume d) is not in the snapshot"
        );

        let pvcs = [claim("db", "data", json!({"volumeName": "gone"}))];
        let index = VolumeIndex::new(none_pv, &pvcs, none_sc);
        let e = index
            .requirements(&pod_with(
                json!([{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]),
            ))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "PersistentVolume gone (bound to PersistentVolumeClaim db/data) does not exist"
        );

        let index = VolumeIndex::new(none_pv, &[] as &[PersistentVolumeClaim], none_sc);
        let e = index
            .requirements(&pod_with(json!([{"name": "tmp", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "slow"}}}}])))
            .unwrap_err();
        assert_eq!(
            e,
            VolumeError::MissingStorageClass {
                class: "slow".into(),
                volume: "tmp".into()
            }
        );
    }

    #[test]
    fn an_invalid_operator_is_not_reported_as_missing() {
        let pv: PersistentVolume = of(
            json!({"metadata": {"name": "pv-1"}, "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": ZONE_LABEL, "operator": "Near", "values": ["zone-a"]}]}]}}}}),
        );
        let pvcs = [claim("db", "data", json!({"volumeName": "pv-1"}))];
        let pvs = [pv];
        let index = VolumeIndex::new(&pvs, &pvcs, &[] as &[StorageClass]);
        let e = index
            .requirements(&pod_with(
                json!([{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]),
            ))
            .unwrap_err();
        assert!(matches!(e, VolumeError::Invalid(_)), "{e:?}");
        assert!(
            e.missing_from("the snapshot")
                .contains("matchExpressions[0].operator"),
            "{e}"
        );
    }
}
