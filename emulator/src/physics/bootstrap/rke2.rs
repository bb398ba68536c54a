//! RKE2 agent scripts as the `rke2` renderer writes them: the same keys as k3s (read by
//! [`super::agent`]), in the here-document
//! `cat > /etc/rancher/rke2/config.yaml <<'JOINERY_RKE2_CONFIG'`, appends emulated the same
//! way. Without a provider ID, RKE2 registers with `rke2://<node name>`.

use super::agent::{Agent, parse_agent};
use super::{Bootstrap, BootstrapError, Format};

/// The RKE2 agent.
const RKE2: Agent = Agent {
    format: Format::Rke2,
    name: "RKE2",
    path: "/etc/rancher/rke2/config.yaml",
    marker: "JOINERY_RKE2_CONFIG",
    scheme: "rke2",
};

/// The RKE2 renderer's agent script, if this is one.
pub(super) fn parse(script: &str, instance_id: &str) -> Option<Result<Bootstrap, BootstrapError>> {
    parse_agent(script, instance_id, &RKE2)
}
