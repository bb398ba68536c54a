//! kubeadm join scripts as the `kubeadm` renderer writes them: the JoinConfiguration
//! (`kubeadm.k8s.io/v1beta4`, or `v1beta3`) in the here-document
//! `cat > /etc/joinery/kubeadm-join.yaml <<'JOINERY_KUBEADM_CONFIG'`, appends emulated, and a
//! later `kubeadm join --config /etc/joinery/kubeadm-join.yaml`. Like kubeadm, discovery
//! needs a bootstrap token with `caCertHashes` (or `unsafeSkipCAVerification: true`) or a
//! discovery file. The kubelet then runs with the flags kubeadm gives it:
//! `--hostname-override` from `nodeRegistration.name`, `--register-with-taints` from
//! `nodeRegistration.taints`, then `kubeletExtraArgs` (a list of `name`/`value` in v1beta4,
//! a map in v1beta3), which win. No provider ID unless `provider-id` is among them.

use serde_norway::Value;

use super::kubelet_flags::kubelet_flags;
use super::shell::{Shell, assignment, logical_lines, written_file};
use super::{Bootstrap, BootstrapError, Format};

/// Where the kubeadm renderer writes the JoinConfiguration.
pub(super) const KUBEADM_CONFIG_PATH: &str = "/etc/joinery/kubeadm-join.yaml";
/// The here-document delimiter the kubeadm renderer writes the JoinConfiguration with.
const KUBEADM_CONFIG_MARKER: &str = "JOINERY_KUBEADM_CONFIG";
/// The kubeadm configuration versions a JoinConfiguration may have.
const KUBEADM_API_VERSIONS: [&str; 2] = ["kubeadm.k8s.io/v1beta3", "kubeadm.k8s.io/v1beta4"];

/// The kubeadm renderer's join script, if this is one.
pub(super) fn parse_kubeadm(
    script: &str,
    instance_id: &str,
) -> Option<Result<Bootstrap, BootstrapError>> {
    let lines = logical_lines(script);
    let (config, end) = match written_file(
        &lines,
        KUBEADM_CONFIG_PATH,
        KUBEADM_CONFIG_MARKER,
        instance_id,
    )? {
        Ok(written) => written,
        Err(error) => return Some(Err(error)),
    };
    if !runs_kubeadm_join(&lines[end + 1..], instance_id) {
        return Some(Err(BootstrapError::KubeadmNotJoined));
    }
    Some(kubeadm_config(&config, instance_id))
}

/// Whether a command in `lines` runs `kubeadm join … --config <the renderer's file>` (also
/// behind `sudo`, `exec`, `env` or variable assignments).
fn runs_kubeadm_join(lines: &[String], instance_id: &str) -> bool {
    let shell = Shell::new(instance_id);
    lines
        .iter()
        .flat_map(|line| shell.commands(line))
        .any(|command| {
            let program = command.iter().position(|w| {
                !matches!(w.as_str(), "sudo" | "exec" | "env" | "nohup") && assignment(w).is_none()
            });
            let Some(at) = program.filter(|at| command[*at].rsplit('/').next() == Some("kubeadm"))
            else {
                return false;
            };
            let arguments = &command[at + 1..];
            arguments.first().map(String::as_str) == Some("join")
                && arguments.iter().enumerate().any(|(i, word)| {
                    word.strip_prefix("--config=") == Some(KUBEADM_CONFIG_PATH)
                        || (word == "--config"
                            && arguments.get(i + 1).map(String::as_str)
                                == Some(KUBEADM_CONFIG_PATH))
                })
        })
}

/// The string at `path` (mapping keys) in a YAML document, if it is one.
fn yaml_string<'a>(document: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter()
        .try_fold(document, |value, key| value.get(*key))?
        .as_str()
}

/// Runs kubeadm's part of a join: checks the JoinConfiguration the way kubeadm would, then
/// builds the kubelet's flags the way kubeadm does and reads them like a kubelet.
pub(super) fn kubeadm_config(config: &str, instance_id: &str) -> Result<Bootstrap, BootstrapError> {
    let invalid = |problem: String| BootstrapError::Config("kubeadm", problem);
    let document: Value = serde_norway::from_str(config).map_err(|e| invalid(e.to_string()))?;
    let api_version = yaml_string(&document, &["apiVersion"]).unwrap_or_default();
    if !KUBEADM_API_VERSIONS.contains(&api_version) {
        return Err(invalid(format!(
            "apiVersion `{api_version}` is not one of {}",
            KUBEADM_API_VERSIONS.join(", ")
        )));
    }
    if yaml_string(&document, &["kind"]) != Some("JoinConfiguration") {
        return Err(invalid("kind is not JoinConfiguration".into()));
    }
    let discovery = document.get("discovery").cloned().unwrap_or(Value::Null);
    if let Some(token) = discovery.get("bootstrapToken") {
        if yaml_string(token, &["token"]).is_none_or(|t| t.trim().is_empty()) {
            return Err(invalid("discovery.bootstrapToken has no token".into()));
        }
        let pinned = token
            .get("caCertHashes")
            .and_then(Value::as_sequence)
            .is_some_and(|h| !h.is_empty());
        let unsafe_skip = token
            .get("unsafeSkipCAVerification")
            .and_then(Value::as_bool)
            == Some(true);
        if !pinned && !unsafe_skip {
            return Err(invalid(
                "discovery.bootstrapToken has neither caCertHashes nor unsafeSkipCAVerification: true".into(),
            ));
        }
    } else if yaml_string(&discovery, &["file", "kubeConfigPath"]).is_none() {
        return Err(invalid(
            "discovery has neither bootstrapToken nor file".into(),
        ));
    }
    let registration = document
        .get("nodeRegistration")
        .cloned()
        .unwrap_or(Value::Null);

    // The flags kubeadm writes for the kubelet, then the extra arguments, which override them.
    let mut flags = Vec::new();
    if let Some(name) = yaml_string(&registration, &["name"])
        .map(str::trim)
        .filter(|n| !n.is_empty())
    {
        flags.push(format!("--hostname-override={name}"));
    }
    if let Some(taints) = registration
        .get("taints")
        .and_then(Value::as_sequence)
        .filter(|t| !t.is_empty())
    {
        let specs: Vec<String> = taints
            .iter()
            .map(|taint| {
                let key = yaml_string(taint, &["key"]).unwrap_or_default();
                let effect = yaml_string(taint, &["effect"]).unwrap_or_default();
                match yaml_string(taint, &["value"]).filter(|v| !v.is_empty()) {
                    Some(value) => format!("{key}={value}:{effect}"),
                    None => format!("{key}:{effect}"),
                }
            })
            .collect();
        flags.push(format!("--register-with-taints={}", specs.join(",")));
    }
    let extra = registration
        .get("kubeletExtraArgs")
        .cloned()
        .unwrap_or(Value::Null);
    let v1beta4 = api_version.ends_with("v1beta4");
    match (&extra, v1beta4) {
        (Value::Null, _) => {}
        (Value::Sequence(items), true) => {
            for item in items {
                match (yaml_string(item, &["name"]), item.get("value")) {
                    (Some(name), Some(Value::String(value))) => {
                        flags.push(format!("--{name}={value}"))
                    }
                    _ => {
                        return Err(invalid(format!(
                            "kubeletExtraArgs item {item:?} is not a name and a string value"
                        )));
                    }
                }
            }
        }
        (Value::Mapping(map), false) => {
            for (name, value) in map {
                match (name, value) {
                    (Value::String(name), Value::String(value)) => {
                        flags.push(format!("--{name}={value}"))
                    }
                    _ => {
                        return Err(invalid(format!(
                            "kubeletExtraArgs entry {name:?} is not a string value"
                        )));
                    }
                }
            }
        }
        _ if v1beta4 => {
            return Err(invalid(
                "kubeletExtraArgs must be a list of name/value in v1beta4".into(),
            ));
        }
        _ => {
            return Err(invalid(
                "kubeletExtraArgs must be a map of strings in v1beta3".into(),
            ));
        }
    }
    let mut bootstrap = kubelet_flags(&flags, instance_id)?;
    bootstrap.format = Format::Kubeadm;
    Ok(bootstrap)
}
