//! NodeClaims as the core sees them: the template a NodePool contributes to scheduling, the
//! spec the scheduler hands to a cloud plugin, and the instance the plugin reports back.

use std::borrow::Borrow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::instance_type::{InstanceType, MinValuesError, truncate};
use crate::labels::{
    CAPACITY_TYPE_LABEL, HOSTNAME_LABEL, INSTANCE_TYPE_LABEL, NODEPOOL_LABEL, is_restricted_label,
};
use crate::requirements::{KeySet, Requirement, Requirements};
use crate::resources::Resources;
use crate::taints::Taint;

/// Most instance types a NodeClaim lists (cheapest first); more are cut off.
pub const MAX_INSTANCE_TYPES: usize = 600;

/// Reference to a provider NodeClass object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct NodeClassRef {
    /// API group of the NodeClass kind.
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Object name.
    pub name: String,
}

impl NodeClassRef {
    /// The label marking nodes of this NodeClass kind: `<group>/<lowercase kind>`, whose value
    /// is the NodeClass name.
    pub fn label_key(&self) -> String {
        format!("{}/{}", self.group, self.kind.to_lowercase())
    }
}

/// What one NodePool contributes to a scheduling run: the shape of every NodeClaim it may
/// create.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeClaimTemplate {
    /// Owning NodePool.
    pub nodepool: String,
    /// NodePool weight (higher is tried first).
    pub weight: i32,
    /// NodeClass of the pool.
    pub node_class_ref: NodeClassRef,
    /// Combined requirements: pool requirements ∩ template labels (as `In`) ∩
    /// `karpenter.sh/nodepool In [pool]` ∩ NodeClass label.
    pub requirements: Requirements,
    /// Template labels.
    pub labels: BTreeMap<String, String>,
    /// Template annotations.
    pub annotations: BTreeMap<String, String>,
    /// Taints pods must tolerate.
    pub taints: Vec<Taint>,
    /// Taints present at startup only; pods need not tolerate them.
    pub startup_taints: Vec<Taint>,
}

impl NodeClaimTemplate {
    /// A template for `nodepool`, combining the pool's requirements with its template labels,
    /// the nodepool label and the NodeClass label. Taints, annotations and weight start empty.
    pub fn new(
        nodepool: impl Into<String>,
        node_class_ref: NodeClassRef,
        pool_requirements: &Requirements,
        labels: BTreeMap<String, String>,
    ) -> Self {
        let nodepool = nodepool.into();
        let mut requirements = pool_requirements.clone();
        requirements.add_all(&Requirements::from_labels(
            labels.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        ));
        requirements.add(Requirement::in_values(NODEPOOL_LABEL, [nodepool.as_str()]));
        requirements.add(Requirement::in_values(
            node_class_ref.label_key(),
            [node_class_ref.name.as_str()],
        ));
        NodeClaimTemplate {
            nodepool,
            weight: 0,
            node_class_ref,
            requirements,
            labels,
            annotations: BTreeMap::new(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
        }
    }

    /// Turns a scheduling result into the spec to launch.
    ///
    /// `requirements` are the claim's narrowed requirements, `requests` the summed pod (and
    /// daemon) requests, `instance_types` the types that still fit. The types are ordered by
    /// price and cut to [`MAX_INSTANCE_TYPES`]; the requirements lose the hostname key and gain
    /// `instance-type In [kept types]` and `capacity-type In [types with an available
    /// compatible offering]`; labels are the template labels, the nodepool and NodeClass
    /// labels, and every single-valued custom (not well-known, not restricted) requirement key.
    /// Fails when the kept types do not satisfy minValues.
    pub fn to_spec<T, K>(
        &self,
        requirements: &Requirements,
        requests: &Resources,
        instance_types: &[T],
        well_known: &K,
    ) -> Result<NodeClaimSpec, MinValuesError>
    where
        T: Borrow<InstanceType>,
        K: KeySet + ?Sized,
    {
        let mut types: Vec<&InstanceType> = instance_types.iter().map(Borrow::borrow).collect();
        let mut requirements = requirements.clone();
        requirements.remove(HOSTNAME_LABEL);
        truncate(&mut types, &requirements, well_known, MAX_INSTANCE_TYPES)?;

        let names: Vec<String> = types.iter().map(|t| t.name().to_owned()).collect();
        let capacity_types: BTreeSet<String> = types
            .iter()
            .flat_map(|t| {
                t.offerings()
                    .available_compatible(&requirements, well_known)
            })
            .map(|o| o.capacity_type().to_owned())
            .collect();
        requirements.add(Requirement::in_values(
            INSTANCE_TYPE_LABEL,
            names.iter().map(String::as_str),
        ));
        if !capacity_types.is_empty() {
            requirements.add(Requirement::in_values(CAPACITY_TYPE_LABEL, capacity_types));
        }

        let mut labels = self.labels.clone();
        labels.insert(NODEPOOL_LABEL.to_owned(), self.nodepool.clone());
        labels.insert(
            self.node_class_ref.label_key(),
            self.node_class_ref.name.clone(),
        );
        for (key, value) in requirements.labels() {
            if !well_known.contains_key(&key) && !is_restricted_label(&key) {
                labels.entry(key).or_insert(value);
            }
        }

        Ok(NodeClaimSpec {
            nodepool: self.nodepool.clone(),
            node_class_ref: self.node_class_ref.clone(),
            requirements,
            requests: requests.clone(),
            taints: self.taints.clone(),
            startup_taints: self.startup_taints.clone(),
            labels,
            annotations: self.annotations.clone(),
            instance_types: names.into(),
        })
    }
}

/// A NodeClaim ready to launch.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeClaimSpec {
    /// Owning NodePool.
    pub nodepool: String,
    /// NodeClass to launch with.
    pub node_class_ref: NodeClassRef,
    /// Requirements the launched node must satisfy (instance type and capacity type included).
    pub requirements: Requirements,
    /// Resources the claim was sized for.
    pub requests: Resources,
    /// Taints.
    pub taints: Vec<Taint>,
    /// Startup taints.
    pub startup_taints: Vec<Taint>,
    /// Labels for the NodeClaim and its Node.
    pub labels: BTreeMap<String, String>,
    /// Annotations for the NodeClaim.
    pub annotations: BTreeMap<String, String>,
    /// Candidate instance type names, cheapest first, at most [`MAX_INSTANCE_TYPES`]. Shared:
    /// claims with the same options share one list.
    pub instance_types: std::sync::Arc<[String]>,
}

/// Lifecycle state of a cloud instance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum InstanceState {
    /// Being created or booting.
    Pending,
    /// Running.
    Running,
    /// Being stopped or deleted.
    ShuttingDown,
    /// Gone.
    Terminated,
    /// The cloud did not say.
    #[default]
    Unknown,
}

impl fmt::Display for InstanceState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InstanceState::Pending => "Pending",
            InstanceState::Running => "Running",
            InstanceState::ShuttingDown => "ShuttingDown",
            InstanceState::Terminated => "Terminated",
            InstanceState::Unknown => "Unknown",
        })
    }
}

/// A cloud instance as a plugin reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Instance {
    /// Provider ID (`<scheme>://…`), matching `Node.spec.providerID`.
    pub provider_id: String,
    /// Instance type name.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// Capacity type.
    pub capacity_type: String,
    /// Lifecycle state.
    pub state: InstanceState,
    /// Name of the NodeClaim it was launched for, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_claim: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instance_type::{Offering, Overhead};
    use crate::labels::{WELL_KNOWN_LABELS, ZONE_LABEL};

    fn class() -> NodeClassRef {
        NodeClassRef {
            group: "karpenter.kwok.sh".into(),
            kind: "KWOKNodeClass".into(),
            name: "default".into(),
        }
    }

    fn itype(name: &str, price: f64, capacity_type: &str) -> InstanceType {
        let reqs = [Requirement::in_values(INSTANCE_TYPE_LABEL, [name])]
            .into_iter()
            .collect();
        InstanceType::new(
            name,
            reqs,
            Resources::new(),
            Overhead::default(),
            vec![Offering::new("a", capacity_type, Some(price), true)],
        )
    }

    #[test]
    fn template_requirements_combine_pool_labels_and_nodeclass() {
        let pool: Requirements = [Requirement::in_values(ZONE_LABEL, ["a", "b"])]
            .into_iter()
            .collect();
        let labels = BTreeMap::from([("team".to_owned(), "red".to_owned())]);
        let t = NodeClaimTemplate::new("general", class(), &pool, labels);
        assert_eq!(class().label_key(), "karpenter.kwok.sh/kwoknodeclass");
        assert!(t.requirements.get(NODEPOOL_LABEL).unwrap().has("general"));
        assert!(t.requirements.get("team").unwrap().has("red"));
        assert!(
            t.requirements
                .get("karpenter.kwok.sh/kwoknodeclass")
                .unwrap()
                .has("default")
        );
        assert_eq!(t.requirements.get(ZONE_LABEL).unwrap().values().len(), 2);
    }

    #[test]
    fn to_spec_orders_caps_and_labels() {
        let pool: Requirements = [
            Requirement::in_values("example.com/tier", ["gold"]),
            Requirement::in_values(ZONE_LABEL, ["a"]),
        ]
        .into_iter()
        .collect();
        let mut t = NodeClaimTemplate::new("general", class(), &pool, BTreeMap::new());
        t.taints.push(Taint::new(
            "dedicated",
            "x",
            crate::taints::TaintEffect::NoSchedule,
        ));
        let mut claim = t.requirements.clone();
        claim.add(Requirement::in_values(
            HOSTNAME_LABEL,
            ["hostname-placeholder-0001"],
        ));
        let types: Vec<InstanceType> = (0..700)
            .map(|i| {
                itype(
                    &format!("t{i:04}"),
                    1000.0 - i as f64,
                    if i % 2 == 0 { "spot" } else { "on-demand" },
                )
            })
            .collect();
        let requests = Resources::new().with("cpu", 1500);
        let spec = t
            .to_spec(&claim, &requests, &types, &WELL_KNOWN_LABELS)
            .unwrap();
        assert_eq!(spec.instance_types.len(), MAX_INSTANCE_TYPES);
        assert_eq!(spec.instance_types[0], "t0699", "cheapest first");
        assert!(!spec.requirements.has(HOSTNAME_LABEL));
        let it_req = spec.requirements.get(INSTANCE_TYPE_LABEL).unwrap();
        assert_eq!(it_req.values().len(), MAX_INSTANCE_TYPES);
        assert!(!it_req.has("t0000"), "most expensive ones cut off");
        let ct = spec.requirements.get(CAPACITY_TYPE_LABEL).unwrap();
        assert!(ct.has("spot") && ct.has("on-demand") && !ct.has("reserved"));
        assert_eq!(
            spec.labels.get("example.com/tier").map(String::as_str),
            Some("gold")
        );
        assert_eq!(
            spec.labels.get(NODEPOOL_LABEL).map(String::as_str),
            Some("general")
        );
        assert!(
            !spec.labels.contains_key(ZONE_LABEL),
            "well-known keys are left to the provider"
        );
        assert_eq!(spec.requests.cpu_millis, 1500);
        assert_eq!(spec.taints.len(), 1);
    }

    #[test]
    fn to_spec_fails_on_unmet_min_values() {
        let mut t = NodeClaimTemplate::new("p", class(), &Requirements::new(), BTreeMap::new());
        t.requirements
            .add(Requirement::exists(INSTANCE_TYPE_LABEL).with_min_values(Some(3)));
        let types = vec![itype("a", 1.0, "spot"), itype("b", 2.0, "spot")];
        let err = t
            .to_spec(
                &t.requirements,
                &Resources::new(),
                &types,
                &WELL_KNOWN_LABELS,
            )
            .unwrap_err();
        assert_eq!(err.unmet.get(INSTANCE_TYPE_LABEL), Some(&(2, 3)));
    }

    #[test]
    fn instance_serde_shape() {
        let i = Instance {
            provider_id: "kwok://n1".into(),
            instance_type: "m".into(),
            zone: "a".into(),
            capacity_type: "spot".into(),
            state: InstanceState::Running,
            node_claim: Some("general-abc".into()),
        };
        let json = serde_json::to_value(&i).unwrap();
        assert_eq!(json["providerId"], "kwok://n1");
        assert_eq!(json["nodeClaim"], "general-abc");
        assert_eq!(json["state"], "Running");
        assert_eq!(InstanceState::default(), InstanceState::Unknown);
    }
}
