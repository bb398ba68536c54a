//! What `joinery sim serve` hands an operator who runs the host beside it (`joinery run` or
//! the Helm chart) with the built-in plugins as they ship: a grants file that lets the cloud
//! plugin reach this emulator's fake cloud, the Secrets that grants file names (created in
//! the emulated cluster), and a NodeClass with a NodePool that launch there.
//!
//! Nothing here widens what a plugin may do beyond what an operator could write by hand: the
//! simulated cloud's address is one the `simcloud` manifest requests (`http://127.0.0.1:*`),
//! and the fake Exoscale API and Clever Cloud's fake price list are granted under
//! `extraHttp`, the grants file's way to point a plugin at another endpoint without
//! rebuilding it.

use std::collections::BTreeMap;

use serde_json::json;

use crate::error::SimulateError;
use crate::simulation::Simulation;

/// The namespace `joinery run` reads granted Secrets from by default (`SYSTEM_NAMESPACE`).
pub const HANDS_ON_NAMESPACE: &str = "joinery";

/// The join token the hands-on NodeClasses hand the k3s renderer (the simulated kubelets
/// accept any).
const JOIN_TOKEN: &str = "K10hands-on-token";

/// A grants file, the Secrets it names and the manifests that go with them.
#[derive(Debug, Clone)]
pub struct HandsOn {
    /// The grants file (YAML), for `joinery run --grants`.
    pub grants: String,
    /// A NodeClass and a NodePool (YAML, two documents), for `kubectl apply -f`.
    pub manifests: String,
    /// Secrets `(namespace, name, data)` the grants name; `joinery sim serve` creates them.
    pub secrets: Vec<(String, String, BTreeMap<String, String>)>,
}

impl HandsOn {
    /// The hands-on set for the cloud `sim` serves: the fake Exoscale API or Clever Cloud
    /// when one runs, else the simulated cloud.
    pub fn for_simulation(sim: &Simulation) -> HandsOn {
        if let Some(fake) = &sim.exoscale {
            return exoscale(fake);
        }
        if let Some(cke) = &sim.clevercloud {
            return clevercloud(cke.pricing.url());
        }
        simulated(sim.cloud.url())
    }

    /// Creates the Secrets (and their namespace) in the emulated cluster.
    pub async fn create_secrets(&self, sim: &Simulation) -> Result<(), SimulateError> {
        let namespaces: std::collections::BTreeSet<&str> =
            self.secrets.iter().map(|s| s.0.as_str()).collect();
        for namespace in namespaces {
            sim.apply(
                &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
            )
            .await?;
        }
        for (namespace, name, data) in &self.secrets {
            sim.apply(&json!({"apiVersion": "v1", "kind": "Secret",
                              "metadata": {"name": name, "namespace": namespace},
                              "stringData": data}))
                .await?;
        }
        Ok(())
    }
}

fn join_secret() -> (String, String, BTreeMap<String, String>) {
    (
        HANDS_ON_NAMESPACE.into(),
        "k3s-join".into(),
        BTreeMap::from([("token".into(), JOIN_TOKEN.into())]),
    )
}

/// A NodePool of `class` (group, kind), on-demand, emptied 30 s after its pods go.
fn node_pool(group: &str, kind: &str) -> String {
    format!(
        "apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      nodeClassRef: {{group: {group}, kind: {kind}, name: default}}
      requirements:
        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 30s
"
    )
}

fn simulated(cloud_url: &str) -> HandsOn {
    let grants = format!(
        "# Grants for `joinery run` beside `joinery sim serve` (the built-in plugins, unchanged).
plugins:
  simcloud:
    http: [{cloud_url:?}]
    config: {{endpoint: {cloud_url:?}, clusterName: joinery}}
  k3s:
    secrets: [k3s-join]
"
    );
    let manifests = format!(
        "apiVersion: sim.joinery.dev/v1alpha1
kind: SimNodeClass
metadata:
  name: default
spec:
  userDataRenderer:
    name: k3s
    parameters:
      tokenSecret: k3s-join/token
      providerIDCommand: cat /var/lib/simcloud/instance-id
---
{}",
        node_pool("sim.joinery.dev", "SimNodeClass")
    );
    HandsOn {
        grants,
        manifests,
        secrets: vec![join_secret()],
    }
}

fn exoscale(fake: &joinery_emulator::exoscale::ExoFake) -> HandsOn {
    let url = fake.url();
    let endpoint = fake.endpoint_template();
    let zones = fake.zones();
    let zone = zones.first().cloned().unwrap_or_default();
    let grants = format!(
        "# Grants for `joinery run` beside `joinery sim serve --cloud exoscale` (the built-in
# plugins, unchanged). The fake Exoscale API is granted under extraHttp: the exoscale
# plugin's manifest asks only for Exoscale's real hosts, and the operator points it here.
plugins:
  exoscale:
    extraHttp: [{url:?}]
    secrets: [{secret}]
    config: {{endpoint: {endpoint:?}, zone: {zone}, clusterName: joinery}}
  k3s:
    secrets: [k3s-join]
",
        secret = super::EXOSCALE_SECRET,
    );
    let manifests = format!(
        "apiVersion: karpenter.k8s.exoscale/v1alpha1
kind: ExoscaleNodeClass
metadata:
  name: default
spec:
  zones: [{zone}]
  templateSelectorTerms:
    - name: Linux Ubuntu 24.04 LTS 64-bit
  diskSize: 50
  securityGroupSelectorTerms:
    - name: k8s-nodes
  userDataRenderer:
    name: k3s
    parameters:
      tokenSecret: k3s-join/token
      providerIDCommand: curl -s http://169.254.169.254/latest/meta-data/instance-id
---
{}",
        node_pool("karpenter.k8s.exoscale", "ExoscaleNodeClass")
    );
    let credentials = (
        HANDS_ON_NAMESPACE.to_string(),
        super::EXOSCALE_SECRET.to_string(),
        BTreeMap::from([
            (
                "api-key".to_string(),
                joinery_emulator::exoscale::DEFAULT_API_KEY.to_string(),
            ),
            (
                "api-secret".to_string(),
                joinery_emulator::exoscale::DEFAULT_API_SECRET.to_string(),
            ),
        ]),
    );
    HandsOn {
        grants,
        manifests,
        secrets: vec![credentials, join_secret()],
    }
}

fn clevercloud(pricing_url: &str) -> HandsOn {
    let grants = format!(
        "# Grants for `joinery run` beside `joinery sim serve --cloud clevercloud` (the built-in
# plugins, unchanged): clevercloud manages NodeGroups in this cluster, and
# clevercloud-pricing reads the fake price list, granted under extraHttp (its manifest asks
# only for Clever Cloud's real API).
plugins:
  clevercloud:
    kubernetes: {kubernetes}
    config: {{clusterName: joinery}}
  clevercloud-pricing:
    extraHttp: [{pricing_url:?}]
    config: {{endpoint: {pricing_url:?}}}
",
        kubernetes = super::CLEVERCLOUD_KUBERNETES,
    );
    let manifests = format!(
        "apiVersion: karpenter.clever-cloud.com/v1alpha1
kind: CleverNodeClass
metadata:
  name: default
spec: {{}}
---
{}",
        node_pool("karpenter.clever-cloud.com", "CleverNodeClass")
    );
    HandsOn {
        grants,
        manifests,
        secrets: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use joinery_runtime::grants::Grants;

    #[test]
    fn the_simulated_clouds_grants_parse_and_reach_only_the_cloud() {
        let set = simulated("http://127.0.0.1:40002");
        let grants = Grants::parse(&set.grants, "hands-on").unwrap();
        let simcloud = joinery_builtin_plugins::builtin_manifests()
            .into_iter()
            .find(|(m, _)| m.name == "simcloud")
            .unwrap()
            .0;
        let caps = grants.capabilities_for(&simcloud);
        assert!(caps.check_http("http", "127.0.0.1", 40002).is_ok());
        assert!(caps.check_http("http", "127.0.0.1", 40003).is_err());
        let docs: Vec<serde_json::Value> = set
            .manifests
            .split("\n---\n")
            .map(|d| serde_norway::from_str(d).unwrap())
            .collect();
        assert_eq!(docs[0]["kind"], "SimNodeClass");
        assert_eq!(
            docs[1]["spec"]["template"]["spec"]["nodeClassRef"]["kind"],
            "SimNodeClass"
        );
    }
}
