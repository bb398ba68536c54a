//! The grants: parsing, matching and the effective capabilities.

use super::*;

fn caps(requested: &str, granted: &str) -> Capabilities {
    let manifest = PluginManifest::parse(
        &format!(
            "name: p\nversion: 0.1.0\nkind: cloud-provider\nwit: 0.1.0\nnodeClass: {{group: g, version: v1, kind: K}}\ncapabilities:\n{requested}"
        ),
        "p",
    )
    .unwrap();
    let grants = Grants::parse(&format!("plugins:\n  p:\n{granted}"), "grants").unwrap();
    grants.capabilities_for(&manifest)
}

#[test]
fn http_patterns_parse_and_match() {
    let p = HttpPattern::parse("https://api-*.exoscale.com").unwrap();
    assert!(p.matches("https", "api-ch-gva-2.exoscale.com", 443));
    assert!(!p.matches("https", "api-ch-gva-2.exoscale.com", 8443));
    assert!(!p.matches("http", "api-ch-gva-2.exoscale.com", 443));
    assert!(!p.matches("https", "evil.com", 443));
    let any_port = HttpPattern::parse("http://127.0.0.1:*").unwrap();
    assert!(any_port.matches("http", "127.0.0.1", 31234));
    assert_eq!(any_port.literal_ip(), Some("127.0.0.1".parse().unwrap()));
}

/// A host name longer than DNS allows is refused as invalid before any pattern is tried:
/// `http://*.*.example.com:*` against a 60 KB name once took 28 s of a runtime thread.
#[test]
fn overlong_host_names_are_refused_before_matching() {
    let c = caps(
        "  http: [\"http://*.*.example.com:*\"]\n",
        "    http: [\"http://*.*.example.com:*\"]\n",
    );
    let long = format!("{}.example.com", "a.".repeat(30_000));
    let e = c.check_http("http", &long, 80).unwrap_err();
    assert!(
        e.0.contains("invalid host name") && e.0.contains("253"),
        "{}",
        &e.0[..e.0.len().min(300)]
    );
    assert!(
        e.0.len() < 1000,
        "the refusal does not repeat the whole name"
    );
    let label = format!("{}.b.example.com", "a".repeat(64));
    let e = c.check_http("http", &label, 80).unwrap_err();
    assert!(
        e.0.contains("invalid host name") && e.0.contains("63"),
        "{e}"
    );
    // The longest valid names still match.
    let longest = format!("{}.b.example.com", "a".repeat(63));
    assert!(c.check_http("http", &longest, 80).is_ok());
    let p = HttpPattern::parse("http://*.*.example.com:*").unwrap();
    assert!(!p.matches("http", &long, 80));
}

/// The matcher itself is linear: many wildcards against a long text that almost matches
/// answer (no backtracking), whatever the host-name limits.
#[test]
fn wildcard_matching_does_not_backtrack() {
    let text = "a".repeat(100_000);
    assert!(!glob("*a*a*a*a*a*a*a*a*b", &text));
    assert!(glob("*a*a*a*a*a*a*a*a*", &text));
    assert!(!glob("*.*.example.com", &"a.".repeat(50_000)));
}

/// The linear matcher answers exactly as the old backtracking one on every short
/// pattern and text over a small alphabet.
#[test]
fn wildcard_matching_agrees_with_the_reference_matcher() {
    fn reference(pattern: &str, text: &str) -> bool {
        let Some((head, tail)) = pattern.split_once('*') else {
            return pattern == text;
        };
        let Some(rest) = text.strip_prefix(head) else {
            return false;
        };
        (0..=rest.len()).any(|i| reference(tail, &rest[i..]))
    }
    fn all(alphabet: &[char], max: usize) -> Vec<String> {
        let mut out = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..max {
            last = last
                .iter()
                .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                .collect();
            out.extend(last.iter().cloned());
        }
        out
    }
    let patterns = all(&['a', '.', '*'], 5);
    let texts = all(&['a', 'b', '.'], 6);
    for p in &patterns {
        for t in &texts {
            assert_eq!(glob(p, t), reference(p, t), "{p:?} against {t:?}");
        }
    }
    // The shipped shapes.
    let p = HttpPattern::parse("https://api-*.exoscale.com").unwrap();
    assert!(p.matches("https", "api-ch-gva-2.exoscale.com", 443));
    assert!(p.matches("https", "api-.exoscale.com", 443));
    assert!(!p.matches("https", "api-ch-gva-2.exoscale.com.evil", 443));
    let p = HttpPattern::parse("https://*.example.com").unwrap();
    assert!(p.matches("https", "a.b.example.com", 443));
    assert!(p.matches("https", "A.Example.COM", 443));
    assert!(!p.matches("https", "example.com", 443));
}

#[test]
fn bare_wildcards_and_paths_are_rejected_with_syntax_help() {
    assert!(
        HttpPattern::parse("https://*")
            .unwrap_err()
            .contains("only a wildcard")
    );
    assert!(
        HttpPattern::parse("https://a.com/path")
            .unwrap_err()
            .contains("scheme://host")
    );
    assert!(
        HttpPattern::parse("ftp://a.com")
            .unwrap_err()
            .contains("scheme")
    );
    assert!(
        HttpPattern::parse("a.com")
            .unwrap_err()
            .contains("expected")
    );
}

#[test]
fn http_needs_both_grant_and_request() {
    let both = caps(
        "  http: [\"https://a.com\"]\n",
        "    http: [\"https://a.com\"]\n",
    );
    assert!(both.check_http("https", "a.com", 443).is_ok());
    let not_granted = caps("  http: [\"https://a.com\"]\n", "    http: []\n");
    let e = not_granted.check_http("https", "a.com", 443).unwrap_err();
    assert!(e.0.contains("plugins.p.http in the grants file"), "{e}");
    let not_requested = caps("  http: []\n", "    http: [\"https://a.com\"]\n");
    let e = not_requested.check_http("https", "a.com", 443).unwrap_err();
    assert!(e.0.contains("plugin.yaml"), "{e}");
}

#[test]
fn resolved_special_addresses_are_refused_unless_granted_exactly() {
    let c = caps(
        "  http: [\"https://a.com\", \"http://127.0.0.1:*\"]\n",
        "    http: [\"https://a.com\", \"http://127.0.0.1:*\"]\n",
    );
    let by_name = c.check_http("https", "a.com", 443).unwrap().clone();
    for ip in [
        "169.254.169.254",
        "127.0.0.1",
        "::1",
        "::ffff:169.254.169.254",
        "0.0.0.0",
        "0.1.2.3",
        "fe80::1",
        // NAT64, 6to4 and IPv4-compatible forms of loopback and the metadata address
        "64:ff9b::a9fe:a9fe",
        "64:ff9b::7f00:1",
        "2002:a9fe:a9fe::1",
        "2002:7f00:1::",
        "::169.254.169.254",
        "::127.0.0.1",
        "64:ff9b:1::1",
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",
        "240.0.0.1",
        "198.18.0.1",
    ] {
        assert!(
            c.check_resolved_ip(&by_name, ip.parse().unwrap(), "a.com")
                .is_err(),
            "{ip} should be refused"
        );
    }
    assert!(
        c.check_resolved_ip(&by_name, "10.0.0.1".parse().unwrap(), "a.com")
            .unwrap_err()
            .0
            .contains("privateNetworks")
    );
    assert!(
        c.check_resolved_ip(&by_name, "8.8.8.8".parse().unwrap(), "a.com")
            .is_ok()
    );
    // Wrapped private addresses need privateNetworks like the plain ones.
    for ip in [
        "64:ff9b::a00:1",
        "2002:a00:1::1",
        "::10.0.0.1",
        "fd00::1",
        "fec0::1",
    ] {
        assert!(
            c.check_resolved_ip(&by_name, ip.parse().unwrap(), "a.com")
                .unwrap_err()
                .0
                .contains("privateNetworks"),
            "{ip}"
        );
    }
    // Public addresses in the same wrappers pass.
    for ip in ["64:ff9b::808:808", "2002:808:808::1", "2a00:1450::1"] {
        assert!(
            c.check_resolved_ip(&by_name, ip.parse().unwrap(), "a.com")
                .is_ok(),
            "{ip}"
        );
    }
    let by_ip = c.check_http("http", "127.0.0.1", 8080).unwrap().clone();
    assert!(
        c.check_resolved_ip(&by_ip, "127.0.0.1".parse().unwrap(), "127.0.0.1")
            .is_ok()
    );
}

#[test]
fn kube_rules_check_cluster_group_resource_verb_namespace() {
    let rule = "  kubernetes: [{group: \"\", resources: [configmaps], verbs: [get, list], namespaces: [kube-system]}]\n";
    let c = caps(rule, &format!("  {rule}"));
    let mut access = KubeAccess {
        cluster: "workload",
        group: "",
        resource: "configmaps",
        namespace: Some("kube-system"),
        verb: Verb::Get,
    };
    assert!(c.check_kube(&access).is_ok());
    access.verb = Verb::Delete;
    let e = c.check_kube(&access).unwrap_err();
    assert!(
        e.0.contains("verbs: [delete]") && e.0.contains("grants file"),
        "{e}"
    );
    access.verb = Verb::Get;
    access.namespace = Some("default");
    assert!(c.check_kube(&access).is_err());
    access.namespace = Some("kube-system");
    access.cluster = "management";
    assert!(c.check_kube(&access).is_err());
}

#[test]
fn a_management_rule_allows_calls_to_the_management_cluster_only() {
    let rule = "  kubernetes: [{cluster: management, group: cluster.x-k8s.io, resources: [machinedeployments], verbs: [get, patch], namespaces: [capi]}]\n";
    let c = caps(rule, &format!("  {rule}"));
    assert_eq!(c.grant().kubernetes[0].cluster, "management");
    let mut access = KubeAccess {
        cluster: "management",
        group: "cluster.x-k8s.io",
        resource: "machinedeployments",
        namespace: Some("capi"),
        verb: Verb::Patch,
    };
    assert!(c.check_kube(&access).is_ok());
    // The same call on the workload cluster is another grant, and the refusal names it.
    access.cluster = "workload";
    let e = c.check_kube(&access).unwrap_err();
    assert!(e.0.contains("{cluster: workload, group: \"cluster.x-k8s.io\", resources: [machinedeployments], verbs: [patch], namespaces: [capi]}"), "{e}");
    // A rule without `cluster` is a workload rule: it does not reach the management cluster.
    let c = caps(
        "  kubernetes: [{group: \"\", resources: [configmaps], verbs: [get]}]\n",
        "    kubernetes: [{group: \"\", resources: [configmaps], verbs: [get]}]\n",
    );
    let access = KubeAccess {
        cluster: "management",
        group: "",
        resource: "configmaps",
        namespace: Some("kube-system"),
        verb: Verb::Get,
    };
    assert!(
        c.check_kube(&access)
            .unwrap_err()
            .0
            .contains("{cluster: management,")
    );
    assert!(
        c.check_kube(&KubeAccess {
            cluster: "workload",
            ..access
        })
        .is_ok()
    );
}

#[test]
fn secrets_need_both_sides() {
    let c = caps("  secrets: [creds]\n", "    secrets: [creds]\n");
    assert!(c.check_secret("creds").is_ok());
    assert!(
        c.check_secret("other")
            .unwrap_err()
            .0
            .contains("plugins.p.secrets")
    );
    assert!(Capabilities::deny_all("p").check_secret("creds").is_err());
}

#[test]
fn a_grant_may_name_the_pricing_plugin_of_a_cloud_plugin() {
    let grants = Grants::parse("plugins:\n  exoscale:\n    pricing: my-prices\n", "g").unwrap();
    assert_eq!(
        grants.plugins["exoscale"].pricing.as_deref(),
        Some("my-prices")
    );
    let err = Grants::parse("plugins:\n  exoscale:\n    pricing: \"a b\"\n", "g").unwrap_err();
    assert!(
        err.to_string().contains("plugins.exoscale.pricing"),
        "{err}"
    );
}

#[test]
fn grant_limits_cap_only_the_fields_they_set() {
    use crate::manifest::Limits;
    let manifest = Limits {
        memory_mib: 64,
        timeout_ms: 60_000,
        max_concurrency: 4,
        max_concurrent_creates: None,
    };
    let grants = Grants::parse("plugins:\n  p:\n    limits: {memoryMiB: 32}\n", "g").unwrap();
    let caps = grants.plugins["p"].limits.unwrap();
    assert_eq!(
        manifest.capped_by(&caps),
        Limits {
            memory_mib: 32,
            timeout_ms: 60_000,
            max_concurrency: 4,
            max_concurrent_creates: None
        }
    );
    let grants = Grants::parse(
        "plugins:\n  p:\n    limits: {timeoutMs: 90000, maxConcurrency: 2}\n",
        "g",
    )
    .unwrap();
    let caps = grants.plugins["p"].limits.unwrap();
    assert_eq!(
        manifest.capped_by(&caps),
        Limits {
            memory_mib: 64,
            timeout_ms: 60_000,
            max_concurrency: 2,
            max_concurrent_creates: None
        }
    );
}

#[test]
fn grant_limits_are_validated_naming_the_field() {
    for (line, field) in [
        ("{maxConcurrency: 0}", "plugins.p.limits.maxConcurrency"),
        ("{timeoutMs: 0}", "plugins.p.limits.timeoutMs"),
        ("{timeoutMs: 999999999}", "plugins.p.limits.timeoutMs"),
        ("{memoryMiB: 0}", "plugins.p.limits.memoryMiB"),
    ] {
        let e = Grants::parse(
            &format!("plugins:\n  p:\n    limits: {line}\n"),
            "grants.yaml",
        )
        .unwrap_err();
        assert!(
            e.to_string().contains(field) && e.to_string().contains("grants.yaml"),
            "{line}: {e}"
        );
    }
}

#[test]
fn unknown_grant_fields_are_rejected() {
    let e = Grants::parse("plugins:\n  p:\n    htp: []\n", "grants.yaml").unwrap_err();
    assert!(
        e.to_string().contains("htp") && e.to_string().contains("grants.yaml"),
        "{e}"
    );
}

#[test]
fn effective_capabilities_are_the_narrower_of_request_and_grant() {
    let caps = caps(
        "  http: [\"https://api-*.exoscale.com\", \"https://a.com\"]\n  secrets: [s1, s2]\n  kubernetes: [{group: g, resources: [things], verbs: [get, list]}]\n",
        "    http: [\"https://*.exoscale.com\", \"https://b.com\"]\n    extraHttp: [\"http://127.0.0.1:4000\"]\n    secrets: [s2, s3]\n    kubernetes: [{group: g, resources: [\"*\"], verbs: [get, delete], namespaces: [ns]}]\n",
    );
    let e = caps.effective();
    assert_eq!(
        e.http,
        [
            "https://api-*.exoscale.com",
            "http://127.0.0.1:4000 (extraHttp)"
        ]
    );
    assert_eq!(e.secrets, ["s2"]);
    assert_eq!(e.kubernetes.len(), 1);
    let rule = &e.kubernetes[0];
    assert_eq!(
        (&rule.resources[..], &rule.verbs[..], &rule.namespaces[..]),
        (
            &["things".to_string()][..],
            &[Verb::Get][..],
            &["ns".to_string()][..]
        )
    );
    assert!(!e.clock);
}

#[test]
fn extra_http_points_a_plugin_elsewhere_without_its_manifest() {
    let fake = caps(
        "  http: [\"https://api-*.exoscale.com\"]\n",
        "    extraHttp: [\"http://127.0.0.1:40123\"]\n",
    );
    assert!(fake.any_http());
    assert!(fake.check_http("http", "127.0.0.1", 40123).is_ok());
    // Only what the operator named: not another port, and not the real API either.
    assert!(fake.check_http("http", "127.0.0.1", 40124).is_err());
    assert!(
        fake.check_http("https", "api-ch-gva-2.exoscale.com", 443)
            .is_err()
    );
    // The refusal of a granted but unrequested address names extraHttp as the way out.
    let plain = caps("  http: []\n", "    http: [\"http://127.0.0.1:40123\"]\n");
    let e = plain.check_http("http", "127.0.0.1", 40123).unwrap_err();
    assert!(e.0.contains("plugins.p.extraHttp"), "{e}");
}

#[test]
fn a_plugin_granted_nothing_it_asked_for_is_named_with_the_misspelt_entry() {
    let manifest = PluginManifest::parse(
        "name: simcloud\nversion: 0.1.0\nkind: cloud-provider\nwit: 0.1.0\nnodeClass: {group: g, version: v1, kind: K}\ncapabilities:\n  http: [\"http://127.0.0.1:*\"]\n",
        "simcloud",
    )
    .unwrap();
    let typo = Grants::parse(
        "plugins:\n  simcloudd:\n    http: [\"http://127.0.0.1:4000\"]\n",
        "g.yaml",
    )
    .unwrap();
    let loaded = ["simcloud", "k3s"];
    assert_eq!(
        typo.unknown_plugins(&loaded),
        vec![("simcloudd".to_string(), Some("simcloud".to_string()))]
    );
    let message = typo
        .not_granted_message(&typo.capabilities_for(&manifest), &loaded)
        .unwrap();
    assert!(
        message.contains("plugin simcloud requests http [http://127.0.0.1:*]")
            && message.contains("add a plugins.simcloud entry")
            && message
                .contains("plugins.simcloudd names no loaded plugin (did you mean simcloud?)"),
        "{message}"
    );
    let none = Grants::default();
    let message = none
        .not_granted_message(&none.capabilities_for(&manifest), &loaded)
        .unwrap();
    assert!(
        message.contains("no grants were given") && message.contains("--grants"),
        "{message}"
    );
    let right = Grants::parse(
        "plugins:\n  simcloud:\n    http: [\"http://127.0.0.1:4000\"]\n",
        "g.yaml",
    )
    .unwrap();
    assert_eq!(
        right.not_granted_message(&right.capabilities_for(&manifest), &loaded),
        None
    );
    assert!(right.unknown_plugins(&loaded).is_empty());
    assert_eq!(
        typo.unknown_plugins(&["k3s"]),
        vec![("simcloudd".to_string(), None)]
    );
}
