//! Helpers shared by the generated `joinery:plugin/types` records of every world.
//!
//! Each world's bindings carry their own copy of the shared records (`key-value`, `taint`,
//! `resource`, `requirement`, `condition`); `common_type_impls!` gives every copy the same
//! convenience methods.

/// The taint key every new node carries until Joinery registers it.
pub const REGISTRATION_TAINT_KEY: &str = "karpenter.sh/unregistered";

/// The label every instance a cloud plugin reports (`get`, `list`, `create`) carries with
/// the cluster tag it was launched with. Garbage collection deletes only instances whose
/// label equals the host's cluster name (`CLUSTER_NAME`): an instance without it is never
/// reaped, whatever `list` returned.
#[cfg_attr(not(feature = "cloud"), allow(dead_code))]
pub const CLUSTER_LABEL: &str = "joinery.dev/cluster";

/// The effect of the registration taint.
pub const REGISTRATION_TAINT_EFFECT: &str = "NoExecute";

/// Adds constructors and formatting helpers to the shared records. Invoke it in a module
/// where `KeyValue`, `Taint`, `Resource`, `Requirement`, `Operator` and `Condition` are in scope.
#[allow(unused_macros)]
macro_rules! common_type_impls {
    () => {
        impl KeyValue {
            /// Builds a key/value pair.
            pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
                KeyValue {
                    key: key.into(),
                    value: value.into(),
                }
            }
        }

        impl Resource {
            /// Builds a named quantity, e.g. `Resource::new("memory", "8Gi")`.
            pub fn new(name: impl Into<String>, quantity: impl Into<String>) -> Self {
                Resource {
                    name: name.into(),
                    quantity: quantity.into(),
                }
            }
        }

        impl Taint {
            /// Builds a taint; `value` is `None` for a taint without value.
            pub fn new(
                key: impl Into<String>,
                value: Option<&str>,
                effect: impl Into<String>,
            ) -> Self {
                Taint {
                    key: key.into(),
                    value: value.map(str::to_string),
                    effect: effect.into(),
                }
            }

            /// The registration taint `karpenter.sh/unregistered:NoExecute`.
            pub fn registration() -> Self {
                Taint::new(
                    $crate::common::REGISTRATION_TAINT_KEY,
                    None,
                    $crate::common::REGISTRATION_TAINT_EFFECT,
                )
            }

            /// Whether this is the registration taint (matched by key).
            pub fn is_registration(&self) -> bool {
                self.key == $crate::common::REGISTRATION_TAINT_KEY
            }

            /// Formats the taint the way kubelet's `--register-with-taints` and k3s's
            /// `--node-taint` expect it: `key=value:Effect`, or `key:Effect` without value.
            pub fn to_spec(&self) -> String {
                match &self.value {
                    Some(v) => format!("{}={}:{}", self.key, v, self.effect),
                    None => format!("{}:{}", self.key, self.effect),
                }
            }
        }

        impl Requirement {
            /// Builds a requirement without `minValues`.
            pub fn new(key: impl Into<String>, operator: Operator, values: &[&str]) -> Self {
                Requirement {
                    key: key.into(),
                    operator,
                    values: values.iter().map(|v| v.to_string()).collect(),
                    min_values: None,
                }
            }

            /// Shorthand for an `In` requirement.
            pub fn is_in(key: impl Into<String>, values: &[&str]) -> Self {
                Requirement::new(key, Operator::In, values)
            }
        }

        impl Condition {
            /// Builds a condition.
            pub fn new(
                type_: impl Into<String>,
                status: bool,
                reason: impl Into<String>,
                message: impl Into<String>,
            ) -> Self {
                Condition {
                    type_: type_.into(),
                    status: if status { "True" } else { "False" }.to_string(),
                    reason: reason.into(),
                    message: message.into(),
                }
            }
        }

        /// Orders taints for a node: the taints, then the startup taints, then the
        /// registration taint if neither list has it; a later taint with the same key and
        /// effect as an earlier one is dropped (the API server rejects such duplicates).
        pub fn node_taints(taints: &[Taint], startup_taints: &[Taint]) -> Vec<Taint> {
            let mut out: Vec<Taint> = Vec::with_capacity(taints.len() + startup_taints.len() + 1);
            for t in taints.iter().chain(startup_taints) {
                if !out.iter().any(|o| o.key == t.key && o.effect == t.effect) {
                    out.push(t.clone());
                }
            }
            if !out.iter().any(Taint::is_registration) {
                out.push(Taint::registration());
            }
            out
        }

        /// Sorts labels by key; when a key appears more than once the last value wins.
        pub fn sorted_labels(labels: &[KeyValue]) -> Vec<(&str, &str)> {
            let mut map = std::collections::BTreeMap::new();
            for kv in labels {
                map.insert(kv.key.as_str(), kv.value.as_str());
            }
            map.into_iter().collect()
        }

        $crate::requirements::requirement_impls!();

        /// Finds the value of `key` in a key/value list (the last one when repeated).
        pub fn lookup<'a>(list: &'a [KeyValue], key: &str) -> Option<&'a str> {
            list.iter()
                .rev()
                .find(|kv| kv.key == key)
                .map(|kv| kv.value.as_str())
        }
    };
}

#[allow(unused_imports)]
pub(crate) use common_type_impls;
