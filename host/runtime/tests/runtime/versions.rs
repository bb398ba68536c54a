//! Contract versions side by side: a plugin built against WIT 0.1 (`legacy-v0-1`, compiled
//! straight from `wit/v0.1`, no SDK) and one built against 0.2 (`hostile`, through the SDK)
//! load through the same linker and both work; the 0.1 plugin gets the host's answers for
//! the functions 0.1 does not have.

use crate::common;

use joinery_runtime::CallError;
use joinery_runtime::contract::{CloudError, RepairPolicy};
use joinery_runtime::error::LoadError;
use joinery_runtime::grants::Grants;
use joinery_runtime::manifest::PluginManifest;
use joinery_runtime::plugin::{LoadContext, LoadedPlugin, PluginBytes, PluginSource};
use joinery_runtime::services::HostServices;

fn legacy_manifest() -> PluginManifest {
    let text =
        std::fs::read_to_string(common::repo().join("plugins/testing/legacy-v0-1/plugin.yaml"))
            .unwrap();
    PluginManifest::parse(&text, "legacy-v0-1").unwrap()
}

fn load(
    cx: &LoadContext,
    manifest: PluginManifest,
    wasm: &[u8],
) -> Result<LoadedPlugin, LoadError> {
    LoadedPlugin::load(
        cx,
        PluginBytes {
            manifest,
            source: PluginSource::Builtin,
            wasm,
            compiled: None,
        },
    )
}

#[tokio::test]
async fn a_0_1_plugin_runs_unchanged_next_to_a_0_2_plugin() {
    let grants = Grants::parse("{}", "test grants").unwrap();
    let cx = LoadContext::new(common::engine(), grants, HostServices::default()).unwrap();
    let legacy = load(
        &cx,
        legacy_manifest(),
        &common::wasm("joinery_plugin_legacy_v0_1.wasm"),
    )
    .unwrap();
    let current = load(&cx, common::hostile_manifest(), common::hostile_wasm()).unwrap();
    assert_eq!(legacy.wit_version(), "0.1.0");
    assert_eq!(current.wit_version(), "0.2.0");

    // The 0.1 plugin's own functions work as they always did.
    let class = common::class(serde_json::json!({}));
    let types = legacy.get_instance_types(&class).await.unwrap();
    let names: Vec<&str> = types.iter().map(|t| t.name()).collect();
    assert_eq!(names, ["legacy-1"]);
    assert!(matches!(
        legacy.get("legacy://x").await,
        Err(CallError::Cloud {
            error: CloudError::NotFound(_),
            ..
        })
    ));
    // What 0.1 lacks, the host answers: no policies of its own, no reboot.
    assert_eq!(legacy.repair_policies().await.unwrap(), None);
    match legacy.reboot("legacy://x").await {
        Err(CallError::Cloud {
            op: "reboot",
            error: CloudError::Unsupported(m),
            ..
        }) => {
            assert!(m.contains("0.1"), "{m}")
        }
        other => panic!("a 0.1 plugin cannot reboot, got {other:?}"),
    }

    // The 0.2 plugin answers them itself.
    assert_eq!(
        current.repair_policies().await.unwrap(),
        Some(vec![RepairPolicy {
            condition_type: "Ready".into(),
            condition_status: "False".into(),
            toleration_seconds: 42,
        }])
    );
    current.reboot("hostile://i-1").await.unwrap();
    assert!(matches!(
        current.reboot("elsewhere://i-1").await,
        Err(CallError::Cloud {
            error: CloudError::NotFound(_),
            ..
        })
    ));
    let types = current.get_instance_types(&class).await.unwrap();
    assert_eq!(types[0].name(), "ok-1");
}

/// A manifest that claims the other version names the one the component was built against.
#[tokio::test]
async fn a_manifest_naming_the_wrong_version_is_refused_with_the_right_one() {
    let grants = Grants::parse("{}", "test grants").unwrap();
    let cx = LoadContext::new(common::engine(), grants, HostServices::default()).unwrap();
    let mut manifest = legacy_manifest();
    manifest.wit = "0.2.0".into();
    let error = load(
        &cx,
        manifest,
        &common::wasm("joinery_plugin_legacy_v0_1.wasm"),
    )
    .unwrap_err()
    .to_string();
    assert!(error.contains("wit: 0.1.0"), "{error}");
    let mut manifest = common::hostile_manifest();
    manifest.wit = "0.1.0".into();
    let error = load(&cx, manifest, common::hostile_wasm())
        .unwrap_err()
        .to_string();
    assert!(error.contains("wit: 0.2.0"), "{error}");
}
