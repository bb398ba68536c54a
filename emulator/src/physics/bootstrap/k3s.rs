//! k3s agent scripts as the `k3s` renderer writes them: the YAML between
//! `cat > /etc/rancher/k3s/config.yaml <<'JOINERY_K3S_CONFIG'` and the line
//! `JOINERY_K3S_CONFIG` is the agent configuration (read by [`super::agent`]). Lines after it
//! that append to the file (`printf … >> /etc/rancher/k3s/config.yaml`, `echo … >> …`) are
//! emulated, with shell variables assigned earlier in the script; a variable assigned from a
//! command substitution (`ID="$(…)"`) holds the instance ID, since such commands ask the
//! machine's metadata for it. Without a provider ID, k3s registers with `k3s://<node name>`.

use super::agent::{Agent, parse_agent};
use super::{Bootstrap, BootstrapError, Format};

/// The k3s agent.
const K3S: Agent = Agent {
    format: Format::K3s,
    name: "k3s",
    path: "/etc/rancher/k3s/config.yaml",
    marker: "JOINERY_K3S_CONFIG",
    scheme: "k3s",
};

/// The k3s renderer's agent script, if this is one.
pub(super) fn parse(script: &str, instance_id: &str) -> Option<Result<Bootstrap, BootstrapError>> {
    parse_agent(script, instance_id, &K3S)
}
