//! What a simulated kubelet understands of an instance's userData: the bootstrap that decides
//! the Node it registers (name, labels, taints, provider ID, pod capacity).
//!
//! Four formats are understood, tried in this order, one file each:
//!
//! - [`k3s`]: k3s agent scripts as the `k3s` renderer writes them;
//! - [`rke2`]: RKE2 agent scripts as the `rke2` renderer writes them (k3s and RKE2 read the
//!   same `config.yaml` keys, in [`agent`]);
//! - [`kubeadm`]: kubeadm join scripts as the `kubeadm` renderer writes them;
//! - [`kubelet_flags`]: a kubelet command line anywhere in the script, the format for the
//!   verbatim `template` renderer.
//!
//! [`shell`] is the bit of a POSIX shell the script formats are read with. Any other format
//! boots only by its renderer's promise (WIT 0.2 `registration`, kept in [`DeclaredBoots`]):
//! the node registers as promised. Without a promise the kubelet registers no Node.

mod agent;
mod k3s;
mod kubeadm;
mod kubelet_flags;
mod rke2;
mod shell;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use joinery_core::taints::{Taint, TaintEffect};

use kubeadm::KUBEADM_CONFIG_PATH;

/// Which bootstrap format was recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// The k3s renderer's agent script.
    K3s,
    /// The rke2 renderer's agent script.
    Rke2,
    /// The kubeadm renderer's join script.
    Kubeadm,
    /// A kubelet command line.
    KubeletFlags,
    /// No userData: a managed platform's ready-made registration
    /// ([`crate::cloud::model::NodeRegistration`]).
    Platform,
    /// A format the simulator does not read, booted by its renderer's promise.
    Declared,
}

/// What a renderer promised a node booted from one userData registers with (the
/// simulator's side of WIT 0.2 `registration`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeclaredBoot {
    /// The node's name; `None` means the instance's hostname (its ID).
    pub node_name: Option<String>,
    /// Labels the node registers with.
    pub labels: BTreeMap<String, String>,
    /// Taints the node registers with, as `key[=value]:Effect`.
    pub taints: Vec<String>,
    /// The provider ID is this prefix followed by the instance ID; `None` when none is set.
    pub provider_id_prefix: Option<String>,
}

/// The renderers' promises, keyed by the exact userData they were made for. The host side
/// of a simulation declares one whenever a renderer that makes promises renders; a kubelet
/// whose userData is in no format it reads boots by the promise made for that text.
#[derive(Debug, Clone, Default)]
pub struct DeclaredBoots(Arc<Mutex<HashMap<String, DeclaredBoot>>>);

impl DeclaredBoots {
    /// Records the promise made for `user_data` (replacing an earlier one for the same text).
    pub fn declare(&self, user_data: &str, boot: DeclaredBoot) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(user_data.to_string(), boot);
    }

    /// The promise made for `user_data`, if any.
    pub fn get(&self, user_data: &str) -> Option<DeclaredBoot> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(user_data)
            .cloned()
    }
}

/// The Node a bootstrap registers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Bootstrap {
    /// The recognised format.
    pub(crate) format: Format,
    /// The Node's name.
    pub(crate) node_name: String,
    /// Labels the node registers with.
    pub(crate) labels: BTreeMap<String, String>,
    /// Taints the node registers with.
    pub(crate) taints: Vec<Taint>,
    /// `spec.providerID`, if the bootstrap sets one.
    pub(crate) provider_id: Option<String>,
    /// The kubelet's `max-pods`, if set.
    pub(crate) max_pods: Option<u64>,
}

/// Why a bootstrap could not be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BootstrapError {
    /// No format was found.
    #[error(
        "the userData is neither a k3s, RKE2 or kubeadm script from the renderer of that name nor a script that runs the kubelet, and its renderer made no promise of what the node registers with (WIT 0.2 `registration`)"
    )]
    NotUnderstood,
    /// A configuration here-document never ends (the delimiter is named).
    #[error("the configuration here-document is not closed by a `{0}` line")]
    UnterminatedConfig(&'static str),
    /// A configuration is not what its distribution expects (distribution, problem).
    #[error("the {0} configuration is not valid: {1}")]
    Config(&'static str, String),
    /// The kubeadm script writes a JoinConfiguration but never joins with it.
    #[error(
        "the script writes {KUBEADM_CONFIG_PATH} but never runs `kubeadm join --config {KUBEADM_CONFIG_PATH}`"
    )]
    KubeadmNotJoined,
    /// A node label is not `key=value`.
    #[error("invalid node label `{0}`: expected key=value")]
    Label(String),
    /// A taint is not `key[=value]:Effect`.
    #[error("invalid node taint `{0}`: expected key[=value]:NoSchedule|PreferNoSchedule|NoExecute")]
    Taint(String),
    /// `max-pods` is not a number.
    #[error("invalid max-pods `{0}`: expected a non-negative integer")]
    MaxPods(String),
}

/// What a simulated instance booted with some userData registers as: the check
/// `joinery render --boot` prints, by the very parser the simulated kubelets run.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BootCheck {
    /// The bootstrap recognised: `k3s`, `rke2`, `kubeadm`, `kubelet` (a script that runs
    /// the kubelet with flags) or `declared` (a format booted by its renderer's promise).
    pub format: &'static str,
    /// The Node's name.
    pub node_name: String,
    /// Labels the node registers with.
    pub labels: BTreeMap<String, String>,
    /// Taints the node registers with (`key[=value]:Effect`).
    pub taints: Vec<String>,
    /// `spec.providerID`, when the bootstrap sets one.
    pub provider_id: Option<String>,
    /// The kubelet's `max-pods`, when set.
    pub max_pods: Option<u64>,
}

/// Boots `user_data` as the simulated kubelet of instance `instance_id` would (the instance's
/// hostname and metadata ID): what registers, or why nothing would.
pub fn boot_check(user_data: &str, instance_id: &str) -> Result<BootCheck, String> {
    boot_check_declared(user_data, instance_id, None)
}

/// [`boot_check`] with the renderer's promise for `user_data`, used when the userData is in
/// no format the simulator reads (as a simulated kubelet would).
pub fn boot_check_declared(
    user_data: &str,
    instance_id: &str,
    declared: Option<&DeclaredBoot>,
) -> Result<BootCheck, String> {
    let boot = parse(user_data, instance_id, declared).map_err(|e| e.to_string())?;
    Ok(BootCheck {
        format: match boot.format {
            Format::K3s => "k3s",
            Format::Rke2 => "rke2",
            Format::Kubeadm => "kubeadm",
            Format::KubeletFlags => "kubelet",
            Format::Platform => "platform",
            Format::Declared => "declared",
        },
        node_name: boot.node_name,
        labels: boot.labels,
        taints: boot
            .taints
            .iter()
            .map(|t| {
                if t.value.is_empty() {
                    format!("{}:{}", t.key, t.effect)
                } else {
                    format!("{}={}:{}", t.key, t.value, t.effect)
                }
            })
            .collect(),
        provider_id: boot.provider_id,
        max_pods: boot.max_pods,
    })
}

/// A parser of one bootstrap format: `None` when the userData is not in its format.
type BootstrapFormat = fn(&str, &str) -> Option<Result<Bootstrap, BootstrapError>>;

/// Runs the bootstrap of instance `instance_id` (whose hostname is its ID): by the first
/// format that reads the userData, else by its renderer's promise `declared`.
pub(crate) fn parse(
    user_data: &str,
    instance_id: &str,
    declared: Option<&DeclaredBoot>,
) -> Result<Bootstrap, BootstrapError> {
    let formats: [BootstrapFormat; 4] = [
        k3s::parse,
        rke2::parse,
        kubeadm::parse_kubeadm,
        kubelet_flags::parse_kubelet_flags,
    ];
    for format in formats {
        if let Some(result) = format(user_data, instance_id) {
            return result;
        }
    }
    match declared {
        Some(promise) => Ok(Bootstrap {
            format: Format::Declared,
            node_name: promise
                .node_name
                .clone()
                .unwrap_or_else(|| instance_id.to_string()),
            labels: promise.labels.clone(),
            taints: promise
                .taints
                .iter()
                .map(|t| parse_taint(t))
                .collect::<Result<_, _>>()?,
            provider_id: promise
                .provider_id_prefix
                .as_ref()
                .map(|prefix| format!("{prefix}{instance_id}")),
            max_pods: None,
        }),
        None => Err(BootstrapError::NotUnderstood),
    }
}

pub(super) fn parse_label(label: &str) -> Result<(String, String), BootstrapError> {
    match label.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_string(), value.trim().to_string()))
        }
        _ => Err(BootstrapError::Label(label.to_string())),
    }
}

pub(super) fn parse_taint(taint: &str) -> Result<Taint, BootstrapError> {
    let invalid = || BootstrapError::Taint(taint.to_string());
    let (rest, effect) = taint.trim().rsplit_once(':').ok_or_else(invalid)?;
    let effect = match effect {
        "NoSchedule" => TaintEffect::NoSchedule,
        "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
        "NoExecute" => TaintEffect::NoExecute,
        _ => return Err(invalid()),
    };
    let (key, value) = rest.split_once('=').unwrap_or((rest, ""));
    if key.is_empty() {
        return Err(invalid());
    }
    Ok(Taint::new(key, value, effect))
}

pub(super) fn parse_max_pods(value: &str) -> Result<u64, BootstrapError> {
    value
        .trim()
        .parse()
        .map_err(|_| BootstrapError::MaxPods(value.to_string()))
}
