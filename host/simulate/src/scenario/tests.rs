use super::*;

#[test]
fn the_quickstart_parses() {
    let s = Scenario::parse(QUICKSTART, "quickstart").unwrap();
    assert_eq!(s.name, "quickstart");
    assert!(s.manifests.len() >= 3);
    assert!(!s.steps.is_empty());
}

#[test]
fn errors_name_the_field() {
    let e = Scenario::parse("steps:\n  - at: soon\n", "x.yaml").unwrap_err();
    assert!(e.to_string().contains("steps[0].at"), "{e}");
    let e = Scenario::parse("manifests:\n  - kind: Pod\n", "x.yaml").unwrap_err();
    assert!(e.to_string().contains("manifests[0].apiVersion"), "{e}");
    let e = Scenario::parse("expect: {podsRuning: 3}\n", "x.yaml").unwrap_err();
    assert!(e.to_string().contains("podsRuning"), "{e}");
}

#[test]
fn the_cloud_provider_is_checked() {
    assert_eq!(
        Scenario::parse("name: x\n", "x.yaml")
            .unwrap()
            .cloud
            .provider(),
        "simcloud"
    );
    let s = Scenario::parse(
        "cloud: {provider: exoscale, exoscale: {zones: [ch-gva-2]}}\n",
        "x.yaml",
    )
    .unwrap();
    assert_eq!(s.cloud.provider(), "exoscale");
    let e = Scenario::parse("cloud: {provider: aws}\n", "x.yaml").unwrap_err();
    assert!(
        e.to_string().contains("cloud.provider") && e.to_string().contains("\"aws\""),
        "{e}"
    );
    let e = Scenario::parse("cloud: {exoscale: {}}\n", "x.yaml").unwrap_err();
    assert!(e.to_string().contains("cloud.exoscale"), "{e}");
    let e = Scenario::parse("cloud: {provider: exoscale, catalog: {}}\n", "x.yaml").unwrap_err();
    assert!(e.to_string().contains("cloud.catalog"), "{e}");
    let e = Scenario::parse(
        "cloud: {provider: exoscale, exoscale: {faults: {errorRate: 2}}}\n",
        "x.yaml",
    )
    .unwrap_err();
    assert!(e.to_string().contains("errorRate"), "{e}");
    let e = Scenario::parse(
        "cloud: {provider: exoscale, exoscale: {faults: {retryAfter: soon}}}\n",
        "x.yaml",
    )
    .unwrap_err();
    assert!(e.to_string().contains("retryAfter"), "{e}");
}

#[test]
fn the_clevercloud_block_is_parsed_with_defaults_and_checked() {
    let s = Scenario::parse("cloud: {provider: clevercloud}\n", "x.yaml").unwrap();
    assert_eq!(s.cloud.provider(), "clevercloud");
    let (settings, pricing) = CleverCloudSpec::default().settings("x").unwrap();
    assert_eq!(settings, CkeSettings::default());
    assert_eq!(pricing, PricingFakeOptions::default());

    let text = r#"
cloud:
  provider: clevercloud
  clevercloud:
    quota: {vcpu: 80, memoryGB: 96.5}
    controlPlane: {memoryGB: 12}
    acceptanceDelay: 2s
    rejectionDelay: 1s
    bootDelay: {min: 20s, max: 40s}
    teardownDelay: 35s
    reservationLeak: 5m
    vanish: [default-abc12]
    vanishAfter: 4s
    seed: 7
    pricing: {vcpuRate: 0.003, ramRatePerGB: 0.006, failure: wrongCurrency}
"#;
    let s = Scenario::parse(text, "x.yaml").unwrap();
    let (settings, pricing) = s.cloud.clevercloud.as_ref().unwrap().settings("x").unwrap();
    assert_eq!(settings.quota, Usage::new(80, 96.5));
    assert_eq!(
        settings.control_plane,
        Usage::new(24, 12.0),
        "a field left out keeps its default"
    );
    assert_eq!(settings.acceptance_delay, Duration::from_secs(2));
    assert_eq!(
        settings.rejection_delay,
        DelayRange::fixed(Duration::from_secs(1))
    );
    assert_eq!(settings.boot_delay, DelayRange::seconds(20, 40));
    assert_eq!(
        settings.teardown_delay,
        DelayRange::fixed(Duration::from_secs(35))
    );
    assert_eq!(settings.reservation_leak, Some(Duration::from_secs(300)));
    assert!(settings.vanish_names.contains("default-abc12") && settings.vanish_probability == 0.0);
    assert_eq!(
        (settings.vanish_after, settings.seed),
        (Duration::from_secs(4), 7)
    );
    assert_eq!(
        (pricing.vcpu_rate, pricing.ram_rate_per_gb, pricing.failure),
        (0.003, 0.006, PricingFailure::WrongCurrency)
    );
    let s = Scenario::parse(
        "cloud: {provider: clevercloud, clevercloud: {vanish: 0.25}}\n",
        "x.yaml",
    )
    .unwrap();
    assert_eq!(
        s.cloud
            .clevercloud
            .unwrap()
            .settings("x")
            .unwrap()
            .0
            .vanish_probability,
        0.25
    );

    for (text, field) in [
        ("cloud: {clevercloud: {}}", "cloud.clevercloud"),
        (
            "cloud: {provider: exoscale, clevercloud: {}}",
            "cloud.clevercloud",
        ),
        (
            "cloud: {provider: clevercloud, exoscale: {}}",
            "cloud.exoscale",
        ),
        (
            "cloud: {provider: clevercloud, catalog: {}}",
            "cloud.catalog",
        ),
        (
            "cloud: {provider: clevercloud, bootDelay: 30s}",
            "cloud.clevercloud.bootDelay",
        ),
        (
            "cloud: {provider: clevercloud, clevercloud: {bootDelay: soon}}",
            "cloud.clevercloud.bootDelay",
        ),
        (
            "cloud: {provider: clevercloud, clevercloud: {bootDelay: {min: 60s, max: 20s}}}",
            "cloud.clevercloud.bootDelay.max",
        ),
        (
            "cloud: {provider: clevercloud, clevercloud: {teardownDelay: {min: 1s, max: later}}}",
            "cloud.clevercloud.teardownDelay.max",
        ),
        (
            "cloud: {provider: clevercloud, clevercloud: {reservationLeak: forever}}",
            "cloud.clevercloud.reservationLeak",
        ),
        (
            "cloud: {provider: clevercloud, clevercloud: {vanish: 1.5}}",
            "cloud.clevercloud.vanish",
        ),
        (
            "cloud: {provider: clevercloud, clevercloud: {quota: {memoryGB: -1}}}",
            "cloud.clevercloud.quota.memoryGB",
        ),
        (
            "cloud: {provider: clevercloud, clevercloud: {pricing: {vcpuRate: 0}}}",
            "cloud.clevercloud.pricing.vcpuRate",
        ),
        (
            "cloud: {provider: clevercloud, clevercloud: {pricing: {failure: teapot}}}",
            "cloud.clevercloud.pricing.failure",
        ),
        (
            "cloud: {provider: clevercloud, clevercloud: {quotas: {}}}",
            "quotas",
        ),
    ] {
        let e = Scenario::parse(&format!("{text}\n"), "x.yaml").unwrap_err();
        assert!(e.to_string().contains(field), "{text}: {e}");
    }
}

#[test]
fn the_clusterapi_block_is_parsed_with_defaults_and_checked() {
    let s = Scenario::parse("cloud: {provider: clusterapi}\n", "x.yaml").unwrap();
    assert_eq!(s.cloud.provider(), "clusterapi");
    assert_eq!(
        ClusterApiSpec::default().settings("x").unwrap(),
        CapiSettings::default()
    );

    let text = r#"
cloud:
  provider: clusterapi
  clusterapi:
    clusterName: capi-ovh
    manifests:
      - apiVersion: cluster.x-k8s.io/v1beta1
        kind: MachineDeployment
        metadata: {name: c3-4, labels: {node.cluster.x-k8s.io/karpenter-member: ""}}
        spec: {clusterName: capi-ovh, replicas: 0}
    provisionDelay: 5s
    bootDelay: {min: 20s, max: 40s}
    teardownDelay: 3s
    deletePolicy: Oldest
    neverProvision: [c3-16]
    failAfter: 2m
    registrationTaints: ["karpenter.sh/unregistered:NoExecute", "x=y:NoSchedule"]
    seed: 7
"#;
    let s = Scenario::parse(text, "x.yaml").unwrap();
    let spec = s.cloud.clusterapi.as_ref().unwrap();
    assert_eq!(
        (spec.cluster_name.as_deref(), spec.manifests.len()),
        (Some("capi-ovh"), 1)
    );
    let settings = spec.settings("x").unwrap();
    assert_eq!(
        settings.provision_delay,
        DelayRange::fixed(Duration::from_secs(5))
    );
    assert_eq!(settings.boot_delay, DelayRange::seconds(20, 40));
    assert_eq!(
        settings.teardown_delay,
        DelayRange::fixed(Duration::from_secs(3))
    );
    assert_eq!(settings.delete_policy, DeletePolicy::Oldest);
    assert!(
        settings.never_provision.contains("c3-16") && settings.never_provision_probability == 0.0
    );
    assert_eq!(
        (settings.fail_after, settings.seed),
        (Some(Duration::from_secs(120)), 7)
    );
    assert_eq!(
        settings
            .registration_taints
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["karpenter.sh/unregistered:NoExecute", "x=y:NoSchedule"]
    );
    let s = Scenario::parse("cloud: {provider: clusterapi, clusterapi: {neverProvision: 0.25, registrationTaints: []}}\n", "x.yaml").unwrap();
    let settings = s.cloud.clusterapi.unwrap().settings("x").unwrap();
    assert_eq!(settings.never_provision_probability, 0.25);
    assert!(settings.registration_taints.is_empty());

    for (text, field) in [
        ("cloud: {clusterapi: {}}", "cloud.clusterapi"),
        (
            "cloud: {provider: clevercloud, clusterapi: {}}",
            "cloud.clusterapi",
        ),
        (
            "cloud: {provider: clusterapi, bootDelay: 30s}",
            "cloud.clusterapi.bootDelay",
        ),
        (
            "cloud: {provider: clusterapi, catalog: {}}",
            "cloud.catalog",
        ),
        (
            "cloud: {provider: clusterapi, clusterapi: {bootDelay: soon}}",
            "cloud.clusterapi.bootDelay",
        ),
        (
            "cloud: {provider: clusterapi, clusterapi: {provisionDelay: {min: 9s, max: 1s}}}",
            "cloud.clusterapi.provisionDelay.max",
        ),
        (
            "cloud: {provider: clusterapi, clusterapi: {teardownDelay: {min: 1s, max: later}}}",
            "cloud.clusterapi.teardownDelay.max",
        ),
        (
            "cloud: {provider: clusterapi, clusterapi: {deletePolicy: Cheapest}}",
            "cloud.clusterapi.deletePolicy",
        ),
        (
            "cloud: {provider: clusterapi, clusterapi: {neverProvision: 2}}",
            "cloud.clusterapi.neverProvision",
        ),
        (
            "cloud: {provider: clusterapi, clusterapi: {neverProvision: [a, \"\"]}}",
            "cloud.clusterapi.neverProvision[1]",
        ),
        (
            "cloud: {provider: clusterapi, clusterapi: {failAfter: eventually}}",
            "cloud.clusterapi.failAfter",
        ),
        (
            "cloud: {provider: clusterapi, clusterapi: {registrationTaints: [\"a=b:Sometimes\"]}}",
            "cloud.clusterapi.registrationTaints[0]",
        ),
        (
            "cloud: {provider: clusterapi, clusterapi: {clusterName: \"\"}}",
            "cloud.clusterapi.clusterName",
        ),
        (
            "cloud: {provider: clusterapi, clusterapi: {manifests: [{kind: MachineDeployment}]}}",
            "cloud.clusterapi.manifests[0].apiVersion",
        ),
        (
            "cloud: {provider: clusterapi, clusterapi: {manifests: [{apiVersion: v1, kind: Namespace, metadata: {}}]}}",
            "cloud.clusterapi.manifests[0].metadata.name",
        ),
        (
            "cloud: {provider: clusterapi, clusterapi: {machineDeployments: []}}",
            "machineDeployments",
        ),
    ] {
        let e = Scenario::parse(&format!("{text}\n"), "x.yaml").unwrap_err();
        assert!(e.to_string().contains(field), "{text}: {e}");
    }
}
