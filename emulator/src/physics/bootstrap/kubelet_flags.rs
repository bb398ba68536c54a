//! A kubelet command line anywhere in the script (also inside a here-document or a systemd
//! unit's `ExecStart=`), the format for the verbatim `template` renderer:
//! `--node-labels=k=v,…`, `--register-with-taints=k=v:Effect,…`, `--provider-id=…`,
//! `--hostname-override=…`, `--max-pods=…` (also as `--flag value`). Command substitutions
//! in it (`$(…)`, backquotes) print the instance ID; other variables are expanded from
//! assignments earlier in the script, else to nothing. kubeadm's join ends here too, with
//! the flags kubeadm builds.

use std::collections::{BTreeMap, HashMap};

use super::shell::{Shell, assignment, logical_lines};
use super::{Bootstrap, BootstrapError, Format, parse_label, parse_max_pods, parse_taint};

/// Flags of the kubelet that take a value (so `--flag value` can be read).
const VALUE_FLAGS: [&str; 5] = [
    "node-labels",
    "register-with-taints",
    "provider-id",
    "hostname-override",
    "max-pods",
];

/// Whether `word` runs the kubelet: its last path component is `kubelet` (also after a
/// systemd `ExecStart=`).
fn is_kubelet(word: &str) -> bool {
    word.rsplit(['/', '=']).next() == Some("kubelet")
}

/// The first kubelet command line in the script, if any.
pub(super) fn parse_kubelet_flags(
    script: &str,
    instance_id: &str,
) -> Option<Result<Bootstrap, BootstrapError>> {
    let mut shell = Shell::new(instance_id);
    for line in logical_lines(script) {
        for command in shell.commands(&line) {
            if !command.iter().any(|w| is_kubelet(w)) {
                shell.assign(&command);
                continue;
            }
            // Skip what may precede the program: list dashes, wrappers, environment settings.
            let program = command.iter().position(|w| {
                !matches!(w.as_str(), "-" | "exec" | "sudo" | "nohup" | "env")
                    && (is_kubelet(w) || assignment(w).is_none())
            });
            match program {
                Some(at) if is_kubelet(&command[at]) => {
                    return Some(kubelet_flags(&command[at + 1..], instance_id));
                }
                _ => {
                    shell.assign(&command);
                }
            }
        }
    }
    None
}

pub(super) fn kubelet_flags(
    arguments: &[String],
    instance_id: &str,
) -> Result<Bootstrap, BootstrapError> {
    let mut flags: HashMap<&str, String> = HashMap::new();
    let mut index = 0;
    while index < arguments.len() {
        if let Some(flag) = arguments[index].strip_prefix("--") {
            match flag.split_once('=') {
                Some((name, value)) => {
                    flags.insert(name, value.to_string());
                }
                None if VALUE_FLAGS.contains(&flag) => {
                    if let Some(value) = arguments.get(index + 1).filter(|v| !v.starts_with("--")) {
                        flags.insert(flag, value.clone());
                        index += 1;
                    }
                }
                None => {}
            }
        }
        index += 1;
    }
    let mut labels = BTreeMap::new();
    for label in flags
        .get("node-labels")
        .into_iter()
        .flat_map(|l| l.split(','))
        .filter(|l| !l.trim().is_empty())
    {
        let (key, value) = parse_label(label)?;
        labels.insert(key, value);
    }
    let taints = flags
        .get("register-with-taints")
        .into_iter()
        .flat_map(|t| t.split(','))
        .filter(|t| !t.trim().is_empty())
        .map(parse_taint)
        .collect::<Result<Vec<_>, _>>()?;
    let node_name = flags
        .get("hostname-override")
        .map(|h| h.trim().to_lowercase())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| instance_id.to_string());
    let max_pods = flags
        .get("max-pods")
        .map(|v| parse_max_pods(v))
        .transpose()?;
    let provider_id = flags.get("provider-id").filter(|p| !p.is_empty()).cloned();
    Ok(Bootstrap {
        format: Format::KubeletFlags,
        node_name,
        labels,
        taints,
        provider_id,
        max_pods,
    })
}
