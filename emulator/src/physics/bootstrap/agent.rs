//! What k3s and RKE2 agents share: a `config.yaml` with k3s's keys (`node-name`,
//! `node-label`, `node-taint`, `kubelet-arg` with `provider-id=…` and `max-pods=…`), written
//! by the renderer's here-document and appended to by later lines. Each distribution is an
//! [`Agent`] naming its file, here-document marker and provider ID scheme.

use std::collections::BTreeMap;

use serde_norway::Value;

use super::shell::{logical_lines, written_file};
use super::{Bootstrap, BootstrapError, Format, parse_label, parse_max_pods, parse_taint};

/// A distribution whose agent reads a `config.yaml` with k3s's keys (k3s and RKE2).
pub(super) struct Agent {
    /// The format reported when its script is recognised.
    pub(super) format: Format,
    /// Its name in error messages.
    pub(super) name: &'static str,
    /// The configuration file.
    pub(super) path: &'static str,
    /// The renderer's here-document delimiter.
    pub(super) marker: &'static str,
    /// The provider ID scheme of the agent's built-in cloud provider (`<scheme>://<node name>`).
    pub(super) scheme: &'static str,
}

/// The k3s or RKE2 renderer's agent script, if this is one.
pub(super) fn parse_agent(
    script: &str,
    instance_id: &str,
    agent: &Agent,
) -> Option<Result<Bootstrap, BootstrapError>> {
    let lines = logical_lines(script);
    let written = written_file(&lines, agent.path, agent.marker, instance_id)?;
    Some(written.and_then(|(config, _)| agent_config(&config, instance_id, agent)))
}

/// An agent configuration value that may be a string or a list of strings.
fn strings(value: Option<&Value>, agent: &Agent) -> Result<Vec<String>, BootstrapError> {
    let invalid = |problem: String| BootstrapError::Config(agent.name, problem);
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Sequence(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.clone()),
                other => Err(invalid(format!("expected strings, found {other:?}"))),
            })
            .collect(),
        Some(other) => Err(invalid(format!(
            "expected a string or a list, found {other:?}"
        ))),
    }
}

fn agent_config(
    config: &str,
    instance_id: &str,
    agent: &Agent,
) -> Result<Bootstrap, BootstrapError> {
    let invalid = |problem: String| BootstrapError::Config(agent.name, problem);
    let document: Value = serde_norway::from_str(config).map_err(|e| invalid(e.to_string()))?;
    let map = match &document {
        Value::Mapping(map) => map.clone(),
        Value::Null => Default::default(),
        _ => return Err(invalid("the configuration is not a YAML mapping".into())),
    };
    let field = |name: &str| map.get(Value::String(name.to_string()));
    let node_name = match field("node-name") {
        Some(Value::String(name)) if !name.trim().is_empty() => name.trim().to_string(),
        _ => instance_id.to_string(),
    };
    let mut labels = BTreeMap::new();
    for label in strings(field("node-label"), agent)? {
        let (key, value) = parse_label(&label)?;
        labels.insert(key, value);
    }
    let taints = strings(field("node-taint"), agent)?
        .iter()
        .map(|t| parse_taint(t))
        .collect::<Result<Vec<_>, _>>()?;
    let mut provider_id = None;
    let mut max_pods = None;
    for argument in strings(field("kubelet-arg"), agent)? {
        let argument = argument.trim_start_matches('-');
        match argument.split_once('=') {
            Some(("provider-id", value)) => provider_id = Some(value.to_string()),
            Some(("max-pods", value)) => max_pods = Some(parse_max_pods(value)?),
            _ => {}
        }
    }
    let provider_id = provider_id
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| format!("{}://{node_name}", agent.scheme));
    Ok(Bootstrap {
        format: agent.format,
        node_name,
        labels,
        taints,
        provider_id: Some(provider_id),
        max_pods,
    })
}
