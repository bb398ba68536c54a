//! The Exoscale examples (`examples/exoscale/*.yaml`) are valid against the CRDs a cluster
//! serves: every document is created with strict field validation on the emulated API
//! server, which checks the ExoscaleNodeClass and NodePool schemas (types, enums, required
//! fields, patterns and bounds, and the CEL rules) and refuses unknown fields.

use std::path::{Path, PathBuf};

use joinery_simulate::{Simulation, SimulationOptions};
use kube::api::{GroupVersionKind, PostParams};
use kube::discovery;

fn examples() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/exoscale");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn documents(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap();
    text.split("\n---\n")
        .map(|doc| serde_norway::from_str::<serde_json::Value>(doc).unwrap())
        .collect()
}

/// Creates an object with `fieldValidation=Strict`.
async fn create_strict(sim: &Simulation, object: &serde_json::Value) -> Result<(), kube::Error> {
    let api_version = object["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, object["kind"].as_str().unwrap());
    let (resource, _) = discovery::pinned_kind(&sim.client, &gvk).await?;
    // Both kinds are cluster-scoped.
    let prefix = if resource.group.is_empty() {
        "/api".to_string()
    } else {
        format!("/apis/{}", resource.group)
    };
    let url = format!("{prefix}/{}/{}", resource.version, resource.plural);
    let body = serde_json::to_vec(object).unwrap();
    let mut request = kube::core::Request::new(url)
        .create(&PostParams::default(), body)
        .map_err(kube::Error::BuildRequest)?;
    let uri = request.uri().to_string();
    let separator = if uri.contains('?') { '&' } else { '?' };
    *request.uri_mut() = format!("{uri}{separator}fieldValidation=Strict")
        .parse()
        .unwrap();
    sim.client
        .request::<serde_json::Value>(request)
        .await
        .map(|_| ())
}

#[tokio::test(start_paused = true)]
async fn the_exoscale_examples_are_valid_against_the_crds() {
    let files = examples();
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().to_string())
        .collect();
    assert_eq!(
        names,
        ["k3s.yaml", "kubeadm.yaml", "rke2.yaml"],
        "an example for each distribution"
    );
    let sim = Simulation::start(SimulationOptions {
        start_controller: false,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut renderers = Vec::new();
    for file in &files {
        let docs = documents(file);
        let kinds: Vec<&str> = docs.iter().map(|d| d["kind"].as_str().unwrap()).collect();
        assert_eq!(
            kinds,
            ["ExoscaleNodeClass", "NodePool"],
            "{}",
            file.display()
        );
        assert_eq!(
            docs[1]["spec"]["template"]["spec"]["nodeClassRef"]["name"],
            docs[0]["metadata"]["name"],
            "the pool uses the class"
        );
        renderers.push(
            docs[0]["spec"]["userDataRenderer"]["name"]
                .as_str()
                .unwrap()
                .to_string(),
        );
        for doc in &docs {
            if let Err(e) = create_strict(&sim, doc).await {
                panic!("{} {}: {e}", file.display(), doc["kind"]);
            }
        }
    }
    assert_eq!(renderers, ["k3s", "kubeadm", "rke2"]);

    // The check has teeth: an unknown field, and both template fields at once, are refused.
    let mut class = documents(&files[0])[0].clone();
    class["metadata"]["name"] = "typo".into();
    class["spec"]["securityGroupSelectorTerm"] = serde_json::json!([{"name": "x"}]);
    assert!(
        create_strict(&sim, &class).await.is_err(),
        "an unknown field is refused"
    );
    let mut class = documents(&files[0])[0].clone();
    class["metadata"]["name"] = "wrong-type".into();
    class["spec"]["diskSize"] = "fifty".into();
    assert!(
        create_strict(&sim, &class).await.is_err(),
        "a field of the wrong type is refused"
    );
    sim.shutdown().await;
}
