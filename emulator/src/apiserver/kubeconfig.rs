//! Kubeconfig documents pointing at the emulated server.

use serde_json::json;

/// Name used for the cluster, user and context entries.
const ENTRY_NAME: &str = "joinery-sim";

/// A kubeconfig (YAML) for a server at `url` over plain HTTP, without credentials,
/// with `default` as the context namespace.
pub fn kubeconfig_yaml(url: &str) -> String {
    let document = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": ENTRY_NAME, "cluster": {"server": url}}],
        "users": [{"name": ENTRY_NAME, "user": {}}],
        "contexts": [{"name": ENTRY_NAME, "context": {"cluster": ENTRY_NAME, "user": ENTRY_NAME, "namespace": "default"}}],
        "current-context": ENTRY_NAME,
        "preferences": {},
    });
    serde_norway::to_string(&document).expect("a JSON document always renders as YAML")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubeconfig_names_the_server() {
        let yaml = kubeconfig_yaml("http://127.0.0.1:1234");
        let parsed: serde_json::Value = serde_norway::from_str(&yaml).unwrap();
        assert_eq!(
            parsed["clusters"][0]["cluster"]["server"],
            "http://127.0.0.1:1234"
        );
        assert_eq!(parsed["current-context"], "joinery-sim");
    }
}
