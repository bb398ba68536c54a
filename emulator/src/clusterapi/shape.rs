//! What the Node of a Machine looks like: the labels Cluster API propagates from a Machine,
//! and the scale-from-zero annotations (`capacity.cluster-autoscaler.kubernetes.io/…`) of its
//! MachineDeployment, which the fake treats as the truth about the machine.

use std::collections::BTreeMap;

use joinery_core::resources::Unit;
use joinery_core::taints::{Taint, TaintEffect};
use serde_json::Value;

use super::{CAPACITY_ANNOTATION_PREFIX, PRICE_ANNOTATION};

/// Whether Cluster API propagates a Machine label of this key to its Node: keys in the
/// `node-role.kubernetes.io` domain, in `node-restriction.kubernetes.io` or one of its
/// subdomains, and in `node.cluster.x-k8s.io` or one of its subdomains.
pub fn is_propagated_label(key: &str) -> bool {
    let Some((domain, _)) = key.split_once('/') else {
        return false;
    };
    domain == "node-role.kubernetes.io"
        || domain == "node-restriction.kubernetes.io"
        || domain.ends_with(".node-restriction.kubernetes.io")
        || domain == "node.cluster.x-k8s.io"
        || domain.ends_with(".node.cluster.x-k8s.io")
}

/// Parses the `labels` annotation: `k1=v1,k2=v2` (blanks around items ignored, an empty
/// text is no label). The error names the item that is not `key=value`.
pub fn parse_labels(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut labels = BTreeMap::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let Some((key, value)) = item.split_once('=') else {
            return Err(format!("{item:?} is not key=value"));
        };
        if key.trim().is_empty() {
            return Err(format!("{item:?} has an empty key"));
        }
        labels.insert(key.trim().to_string(), value.trim().to_string());
    }
    Ok(labels)
}

fn effect(text: &str) -> Option<TaintEffect> {
    match text {
        "NoSchedule" => Some(TaintEffect::NoSchedule),
        "PreferNoSchedule" => Some(TaintEffect::PreferNoSchedule),
        "NoExecute" => Some(TaintEffect::NoExecute),
        _ => None,
    }
}

/// Parses one taint written `key=value:Effect` or `key:Effect`.
pub fn parse_taint(item: &str) -> Result<Taint, String> {
    let item = item.trim();
    let Some((rest, effect_text)) = item.rsplit_once(':') else {
        return Err(format!("{item:?} is not key=value:Effect"));
    };
    let effect = effect(effect_text.trim()).ok_or_else(|| {
        format!(
            "{item:?}: unknown effect {effect_text:?} (NoSchedule, PreferNoSchedule or NoExecute)"
        )
    })?;
    let (key, value) = rest.split_once('=').unwrap_or((rest, ""));
    if key.trim().is_empty() {
        return Err(format!("{item:?} has an empty key"));
    }
    Ok(Taint::new(key.trim(), value.trim(), effect))
}

/// Parses the `taints` annotation: `k1=v1:NoSchedule,k2:NoExecute`.
pub fn parse_taints(text: &str) -> Result<Vec<Taint>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .map(parse_taint)
        .collect()
}

/// A taint of a Machine template's `spec.taints` (`{key, value?, effect}`), if well formed.
pub(crate) fn template_taint(taint: &Value) -> Option<Taint> {
    let key = taint
        .get("key")
        .and_then(Value::as_str)
        .filter(|k| !k.is_empty())?;
    let effect = effect(taint.get("effect").and_then(Value::as_str)?)?;
    Some(Taint::new(
        key,
        taint
            .get("value")
            .and_then(Value::as_str)
            .unwrap_or_default(),
        effect,
    ))
}

/// The Node a Machine's machine registers, as far as the fake decides it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeShape {
    /// Labels: the Machine's propagated labels, overridden by the `labels` annotation's.
    pub labels: BTreeMap<String, String>,
    /// Taints: the `taints` annotation's, then the template's `spec.taints` not already
    /// there (same key and effect: the annotation wins), then the registration taints.
    pub taints: Vec<Taint>,
    /// Capacity (= allocatable) in Kubernetes quantities: `cpu`, `memory`,
    /// `ephemeral-storage`, `pods`, and the GPU resource when both GPU annotations are set.
    pub capacity: BTreeMap<String, String>,
    /// Price per hour, from [`PRICE_ANNOTATION`] (0 without it).
    pub price_per_hour: f64,
    /// Annotations that could not be used, each with why (the machine boots anyway).
    pub problems: Vec<String>,
}

/// Works out the Node of a Machine from its MachineDeployment's `annotations`, the Machine's
/// `labels`, its template's `spec.taints` and the fake's registration taints. Capacity that is
/// missing or malformed falls back to `defaults` (`cpu`, `memory`, `ephemeral-storage`,
/// `pods`); a malformed `labels`, `taints` or price annotation is ignored. Each fallback is
/// listed in [`NodeShape::problems`].
pub fn node_shape(
    annotations: &BTreeMap<String, String>,
    machine_labels: &BTreeMap<String, String>,
    template_taints: &[Value],
    registration_taints: &[Taint],
    defaults: &BTreeMap<String, String>,
) -> NodeShape {
    let annotation = |name: &str| {
        annotations
            .get(&format!("{CAPACITY_ANNOTATION_PREFIX}{name}"))
            .map(|v| v.trim().to_string())
    };
    let mut shape = NodeShape {
        labels: machine_labels
            .iter()
            .filter(|(k, _)| is_propagated_label(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        ..NodeShape::default()
    };
    if let Some(text) = annotation("labels") {
        match parse_labels(&text) {
            Ok(labels) => shape.labels.extend(labels),
            Err(e) => shape
                .problems
                .push(format!("{CAPACITY_ANNOTATION_PREFIX}labels: {e}")),
        }
    }
    if let Some(text) = annotation("taints") {
        match parse_taints(&text) {
            Ok(taints) => shape.taints = taints,
            Err(e) => shape
                .problems
                .push(format!("{CAPACITY_ANNOTATION_PREFIX}taints: {e}")),
        }
    }
    for taint in template_taints
        .iter()
        .filter_map(template_taint)
        .chain(registration_taints.iter().cloned())
    {
        if !shape.taints.iter().any(|t| t.matches(&taint)) {
            shape.taints.push(taint);
        }
    }
    let mut quantity = |resource: &str, annotation_name: &str| {
        let value = annotation(annotation_name);
        let parsed = value
            .as_deref()
            .map(|v| Unit::of(resource).parse(v).map(|_| v.to_string()));
        match parsed {
            Some(Ok(v)) => Some(v),
            Some(Err(e)) => {
                shape.problems.push(format!(
                    "{CAPACITY_ANNOTATION_PREFIX}{annotation_name}: {e}"
                ));
                None
            }
            None => None,
        }
    };
    let mut capacity = BTreeMap::new();
    for (resource, name) in [
        ("cpu", "cpu"),
        ("memory", "memory"),
        ("ephemeral-storage", "ephemeral-disk"),
        ("pods", "maxPods"),
    ] {
        if let Some(value) = quantity(resource, name).or_else(|| defaults.get(resource).cloned()) {
            capacity.insert(resource.to_string(), value);
        }
    }
    let gpu_count = quantity("nvidia.com/gpu", "gpu-count");
    let gpu_type = annotation("gpu-type").filter(|t| !t.is_empty());
    if let (Some(count), Some(resource)) = (gpu_count, gpu_type) {
        capacity.insert(resource, count);
    }
    shape.capacity = capacity;
    if let Some(text) = annotations.get(PRICE_ANNOTATION) {
        match text.trim().parse::<f64>() {
            Ok(price) if price.is_finite() && price >= 0.0 => shape.price_per_hour = price,
            _ => shape.problems.push(format!(
                "{PRICE_ANNOTATION}: {text:?} is not a non-negative number"
            )),
        }
    }
    shape
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn propagated_label_domains() {
        for key in [
            "node-role.kubernetes.io/worker",
            "node-restriction.kubernetes.io/x",
            "a.node-restriction.kubernetes.io/x",
            "node.cluster.x-k8s.io/karpenter-member",
            "b.node.cluster.x-k8s.io/y",
        ] {
            assert!(is_propagated_label(key), "{key}");
        }
        for key in [
            "kubernetes.io/arch",
            "x.node-role.kubernetes.io/y",
            "cluster.x-k8s.io/cluster-name",
            "team",
            "node.kubernetes.io/instance-type",
        ] {
            assert!(!is_propagated_label(key), "{key}");
        }
    }

    #[test]
    fn annotations_give_labels_taints_capacity_and_price() {
        let annotations = map(&[
            ("capacity.cluster-autoscaler.kubernetes.io/cpu", "2"),
            ("capacity.cluster-autoscaler.kubernetes.io/memory", "4G"),
            ("capacity.cluster-autoscaler.kubernetes.io/maxPods", "110"),
            ("capacity.cluster-autoscaler.kubernetes.io/gpu-count", "1"),
            (
                "capacity.cluster-autoscaler.kubernetes.io/gpu-type",
                "nvidia.com/gpu",
            ),
            (
                "capacity.cluster-autoscaler.kubernetes.io/labels",
                "kubernetes.io/arch=amd64, node.kubernetes.io/instance-type=c3-4,node-role.kubernetes.io/worker=over",
            ),
            (
                "capacity.cluster-autoscaler.kubernetes.io/taints",
                "gpu=yes:NoSchedule,dedicated:NoExecute",
            ),
            ("cluster.x-k8s.io/machine-current-price", "0.0475"),
        ]);
        let labels = map(&[
            ("node-role.kubernetes.io/worker", ""),
            ("team", "blue"),
            ("node.cluster.x-k8s.io/karpenter-member", ""),
        ]);
        let template = vec![
            serde_json::json!({"key": "gpu", "value": "other", "effect": "NoSchedule"}),
            serde_json::json!({"key": "t", "effect": "PreferNoSchedule"}),
        ];
        let defaults = map(&[
            ("cpu", "1"),
            ("memory", "1Gi"),
            ("ephemeral-storage", "20Gi"),
            ("pods", "110"),
        ]);
        let shape = node_shape(
            &annotations,
            &labels,
            &template,
            &[Taint::unregistered()],
            &defaults,
        );
        assert!(shape.problems.is_empty(), "{:?}", shape.problems);
        assert_eq!(
            shape.labels,
            map(&[
                ("kubernetes.io/arch", "amd64"),
                ("node-role.kubernetes.io/worker", "over"),
                ("node.cluster.x-k8s.io/karpenter-member", ""),
                ("node.kubernetes.io/instance-type", "c3-4"),
            ])
        );
        let taints: Vec<String> = shape.taints.iter().map(ToString::to_string).collect();
        assert_eq!(
            taints,
            [
                "gpu=yes:NoSchedule",
                "dedicated:NoExecute",
                "t:PreferNoSchedule",
                "karpenter.sh/unregistered:NoExecute"
            ]
        );
        assert_eq!(
            shape.capacity,
            map(&[
                ("cpu", "2"),
                ("memory", "4G"),
                ("ephemeral-storage", "20Gi"),
                ("pods", "110"),
                ("nvidia.com/gpu", "1")
            ])
        );
        assert_eq!(shape.price_per_hour, 0.0475);
    }

    #[test]
    fn malformed_annotations_fall_back_and_are_reported() {
        let annotations = map(&[
            ("capacity.cluster-autoscaler.kubernetes.io/cpu", "two"),
            (
                "capacity.cluster-autoscaler.kubernetes.io/labels",
                "novalue",
            ),
            (
                "capacity.cluster-autoscaler.kubernetes.io/taints",
                "a=b:Sometimes",
            ),
            ("capacity.cluster-autoscaler.kubernetes.io/gpu-count", "1"),
            ("cluster.x-k8s.io/machine-current-price", "cheap"),
        ]);
        let defaults = map(&[("cpu", "1"), ("memory", "1Gi")]);
        let shape = node_shape(&annotations, &BTreeMap::new(), &[], &[], &defaults);
        assert_eq!(
            shape.capacity, defaults,
            "a GPU count without a type adds nothing"
        );
        assert_eq!(shape.problems.len(), 4, "{:?}", shape.problems);
        assert!(shape.problems.iter().any(|p| p.contains("/cpu")));
        assert!(shape.labels.is_empty() && shape.taints.is_empty() && shape.price_per_hour == 0.0);
        assert!(
            parse_taint("k=v:NoExecute").is_ok()
                && parse_taint("=v:NoExecute").is_err()
                && parse_labels("a=1,,b=").unwrap().len() == 2
        );
    }
}
