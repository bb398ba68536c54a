//! Resolving a NodeClass against the API: zones, templates per zone, security groups,
//! private networks per zone, anti-affinity groups, the SSH key and the instance-type
//! allow-list, each with its own status condition.
//!
//! Selector terms are ORed and the fields within one term ANDed. A term that matches nothing
//! fails its condition, naming the term: a node launched without the security group it was
//! meant to have is a firewall hole, not a degraded launch.

use std::collections::BTreeMap;

use joinery_plugin_sdk::cloud::Condition;
use serde::{Deserialize, Serialize};

use crate::api::{Api, ApiError, InstanceType, Named, ZoneList};
use crate::spec::{self, Spec, Term};

/// Whether `object` satisfies every field the term sets.
pub fn term_matches(term: &Term, object: &Named) -> bool {
    term.id.as_ref().is_none_or(|id| *id == object.id)
        && term.name.as_ref().is_none_or(|name| *name == object.name)
        && term
            .labels
            .iter()
            .all(|(k, v)| object.labels.get(k) == Some(v))
        && term
            .visibility
            .as_ref()
            .is_none_or(|v| object.visibility.as_ref() == Some(v))
}

/// The IDs the terms select (in the objects' order, each once), or the indices of the terms
/// that match nothing.
pub fn select(terms: &[Term], objects: &[Named]) -> Result<Vec<String>, Vec<usize>> {
    let unmatched: Vec<usize> = terms
        .iter()
        .enumerate()
        .filter(|(_, t)| !objects.iter().any(|o| term_matches(t, o)))
        .map(|(i, _)| i)
        .collect();
    if !unmatched.is_empty() {
        return Err(unmatched);
    }
    Ok(objects
        .iter()
        .filter(|o| terms.iter().any(|t| term_matches(t, o)))
        .map(|o| o.id.clone())
        .collect())
}

/// The newest of the templates the terms select: latest `created-at`, then highest build.
pub fn newest_template<'a>(
    terms: &[Term],
    templates: &'a [Named],
) -> Result<&'a Named, Vec<usize>> {
    let ids = select(terms, templates)?;
    templates
        .iter()
        .filter(|t| ids.contains(&t.id))
        .max_by(|a, b| {
            (a.created_at.as_deref(), a.build.as_deref())
                .cmp(&(b.created_at.as_deref(), b.build.as_deref()))
        })
        .ok_or_else(Vec::new)
}

fn describe_unmatched(
    field: &str,
    terms: &[Term],
    unmatched: &[usize],
    zone: Option<&str>,
) -> String {
    let list: Vec<String> = unmatched
        .iter()
        .map(|i| format!("{field}[{i}] {}", terms[*i].describe()))
        .collect();
    let place = zone.map(|z| format!(" in zone {z}")).unwrap_or_default();
    format!("{} matches nothing{place}", list.join(" and "))
}

/// A template chosen for one zone.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct ResolvedTemplate {
    /// Template ID in that zone.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its build, if known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub build: Option<String>,
    /// Its size in GiB (rounded up).
    pub size_gib: u64,
}

/// What resolution stores under the NodeClass status and `create` uses.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct Resolved {
    /// [`spec::resolution_hash`] of the spec this was resolved for.
    pub spec_hash: String,
    /// Zones the class launches in.
    pub zones: Vec<String>,
    /// Template per zone.
    pub templates: BTreeMap<String, ResolvedTemplate>,
    /// Security group IDs.
    pub security_groups: Vec<String>,
    /// Private network IDs per zone.
    pub private_networks: BTreeMap<String, Vec<String>>,
    /// Anti-affinity group IDs.
    pub anti_affinity_groups: Vec<String>,
    /// The SSH key names (`sshKey` and `sshKeys`, each once).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ssh_keys: Vec<String>,
}

/// The outcome of a resolution: the status to store and one condition per check.
pub struct Resolution {
    /// Resolved values.
    pub resolved: Resolved,
    /// Conditions (`SpecValid`, `ZonesReady`, `TemplateReady`, …).
    pub conditions: Vec<Condition>,
}

impl Resolution {
    /// Whether every condition is `True`.
    pub fn ready(&self) -> bool {
        self.conditions.iter().all(|c| c.status == "True")
    }

    /// The messages of the failed conditions.
    pub fn failures(&self) -> String {
        self.conditions
            .iter()
            .filter(|c| c.status != "True")
            .map(|c| format!("{}: {}", c.type_, c.message))
            .collect::<Vec<_>>()
            .join("; ")
    }
}

fn ok(kind: &str, reason: &str, message: String) -> Condition {
    Condition::new(kind, true, reason, message)
}

fn failed(kind: &str, reason: &str, message: String) -> Condition {
    Condition::new(kind, false, reason, message)
}

/// Lists `path` in `zone` and returns the items under `key`.
fn list(
    api: &Api,
    zone: &str,
    path: &str,
    key: &str,
    query: &[(&str, &str)],
) -> Result<Vec<Named>, ApiError> {
    let mut value: serde_json::Value = api.get(zone, path, query)?;
    let items = value
        .get_mut(key)
        .map(serde_json::Value::take)
        .unwrap_or_default();
    serde_json::from_value(items).map_err(|e| ApiError::Decode(format!("GET {path}: {e}")))
}

/// The zones the API knows.
pub fn api_zones(api: &Api, home: &str) -> Result<Vec<String>, ApiError> {
    let list: ZoneList = api.get(home, "/zone", &[])?;
    Ok(list.zones.into_iter().map(|z| z.name).collect())
}

/// The instance types the API lists, as JSON (the `instance-types` array).
pub fn instance_types_json(api: &Api, home: &str) -> Result<serde_json::Value, ApiError> {
    let mut value: serde_json::Value = api.get(home, "/instance-type", &[])?;
    Ok(value
        .get_mut("instance-types")
        .map(serde_json::Value::take)
        .unwrap_or_default())
}

/// Decodes the `instance-types` array.
pub fn decode_types(value: serde_json::Value) -> Result<Vec<InstanceType>, ApiError> {
    serde_json::from_value(value).map_err(|e| ApiError::Decode(format!("GET /instance-type: {e}")))
}

/// Resolves the class. API failures that are not about the class itself (5xx, throttling,
/// refused credentials) are returned as errors, not conditions.
pub fn resolve(
    api: &Api,
    home: &str,
    spec_json: &str,
    spec: &Spec,
    default_zone: Option<&str>,
) -> Result<Resolution, ApiError> {
    let mut conditions = Vec::new();
    let mut resolved = Resolved {
        spec_hash: spec::resolution_hash(spec_json),
        ..Resolved::default()
    };

    let problems = spec.problems();
    conditions.push(if problems.is_empty() {
        ok("SpecValid", "Valid", "the spec is valid".into())
    } else {
        failed("SpecValid", "InvalidSpec", problems.join("; "))
    });

    // Zones.
    let known = api_zones(api, home)?;
    let wanted = spec.effective_zones(default_zone);
    let unknown: Vec<&String> = wanted.iter().filter(|z| !known.contains(z)).collect();
    conditions.push(if wanted.is_empty() {
        failed(
            "ZonesReady",
            "NoZones",
            "no zone: set spec.zones or the plugin's `zone` configuration".into(),
        )
    } else if !unknown.is_empty() {
        let names: Vec<&str> = unknown.iter().map(|z| z.as_str()).collect();
        failed(
            "ZonesReady",
            "ZonesNotFound",
            format!(
                "unknown zone(s) {}; Exoscale offers {}",
                names.join(", "),
                known.join(", ")
            ),
        )
    } else {
        ok(
            "ZonesReady",
            "Resolved",
            format!("launching in {}", wanted.join(", ")),
        )
    });
    let zones: Vec<String> = wanted.into_iter().filter(|z| known.contains(z)).collect();
    resolved.zones = zones.clone();

    // Templates, per zone.
    let mut template_problems = Vec::new();
    for zone in &zones {
        let choice = if let Some(id) = &spec.template_id {
            match api.get::<Named>(
                zone,
                &format!("/template/{}", joinery_plugin_sdk::url::percent_encode(id)),
                &[],
            ) {
                Ok(t) => Some(t),
                Err(e) if e.is_not_found() => {
                    template_problems.push(format!(
                        "templateID {id} does not exist in zone {zone} (template IDs are zone-scoped; use templateSelectorTerms to span zones)"
                    ));
                    None
                }
                Err(e) => return Err(e),
            }
        } else if !spec.template_selector_terms.is_empty() {
            let terms = &spec.template_selector_terms;
            let mut templates = Vec::new();
            for visibility in ["public", "private"] {
                if terms
                    .iter()
                    .any(|t| t.visibility.as_deref().is_none_or(|v| v == visibility))
                {
                    let mut found = list(
                        api,
                        zone,
                        "/template",
                        "templates",
                        &[("visibility", visibility)],
                    )?;
                    for t in &mut found {
                        t.visibility.get_or_insert_with(|| visibility.to_string());
                    }
                    templates.extend(found);
                }
            }
            match newest_template(terms, &templates) {
                Ok(t) => Some(t.clone()),
                Err(unmatched) => {
                    template_problems.push(describe_unmatched(
                        "templateSelectorTerms",
                        terms,
                        &unmatched,
                        Some(zone),
                    ));
                    None
                }
            }
        } else {
            None
        };
        if let Some(template) = choice {
            let size_gib = template.size.unwrap_or(0).div_ceil(1 << 30);
            if let Some(disk) = spec.disk_size
                && disk < size_gib
            {
                template_problems.push(format!("diskSize {disk} GiB is smaller than template {} ({size_gib} GiB) in zone {zone}", template.name));
            }
            resolved.templates.insert(
                zone.clone(),
                ResolvedTemplate {
                    id: template.id,
                    name: template.name,
                    build: template.build,
                    size_gib,
                },
            );
        }
    }
    conditions.push(
        if spec.template_id.is_none() && spec.template_selector_terms.is_empty() {
            failed(
                "TemplateReady",
                "NoTemplate",
                "set templateID or templateSelectorTerms".into(),
            )
        } else if template_problems.is_empty() {
            let chosen: Vec<String> = resolved
                .templates
                .iter()
                .map(|(z, t)| format!("{z}: {} ({})", t.id, t.build.as_deref().unwrap_or("?")))
                .collect();
            ok(
                "TemplateReady",
                "Resolved",
                format!("templates {}", chosen.join(", ")),
            )
        } else {
            failed(
                "TemplateReady",
                "TemplateNotFound",
                template_problems.join("; "),
            )
        },
    );

    // Security groups and anti-affinity groups are organisation-wide.
    let groups = [
        (
            "SecurityGroupsReady",
            "securityGroupSelectorTerms",
            "/security-group",
            "security-groups",
            &spec.security_group_selector_terms,
        ),
        (
            "AntiAffinityGroupsReady",
            "antiAffinityGroupSelectorTerms",
            "/anti-affinity-group",
            "anti-affinity-groups",
            &spec.anti_affinity_group_selector_terms,
        ),
    ];
    for (kind, field, path, key, terms) in groups {
        if terms.is_empty() {
            conditions.push(ok(kind, "NoneRequested", format!("no {field}")));
            continue;
        }
        let objects = list(api, home, path, key, &[])?;
        match select(terms, &objects) {
            Ok(ids) => {
                conditions.push(ok(kind, "Resolved", format!("{} selected", ids.join(", "))));
                if kind == "SecurityGroupsReady" {
                    resolved.security_groups = ids;
                } else {
                    resolved.anti_affinity_groups = ids;
                }
            }
            Err(unmatched) => conditions.push(failed(
                kind,
                "SelectorMatchesNothing",
                describe_unmatched(field, terms, &unmatched, None),
            )),
        }
    }

    // Private networks are zonal: every term must match in every zone.
    let terms = &spec.private_network_selector_terms;
    if terms.is_empty() {
        conditions.push(ok(
            "PrivateNetworksReady",
            "NoneRequested",
            "no privateNetworkSelectorTerms".into(),
        ));
    } else {
        let mut problems = Vec::new();
        for zone in &zones {
            let networks = list(api, zone, "/private-network", "private-networks", &[])?;
            match select(terms, &networks) {
                Ok(ids) => {
                    resolved.private_networks.insert(zone.clone(), ids);
                }
                Err(unmatched) => problems.push(describe_unmatched(
                    "privateNetworkSelectorTerms",
                    terms,
                    &unmatched,
                    Some(zone),
                )),
            }
        }
        conditions.push(if problems.is_empty() {
            let chosen: Vec<String> = resolved
                .private_networks
                .iter()
                .map(|(z, ids)| format!("{z}: {}", ids.join(", ")))
                .collect();
            ok("PrivateNetworksReady", "Resolved", chosen.join("; "))
        } else {
            failed(
                "PrivateNetworksReady",
                "SelectorMatchesNothing",
                problems.join("; "),
            )
        });
    }

    // SSH keys.
    let names = spec.ssh_key_names();
    if names.is_empty() {
        conditions.push(ok("SSHKeyReady", "NoneRequested", "no sshKeys".into()));
    } else {
        let mut missing = Vec::new();
        for name in &names {
            match api.get::<Named>(
                home,
                &format!("/ssh-key/{}", joinery_plugin_sdk::url::percent_encode(name)),
                &[],
            ) {
                Ok(_) => resolved.ssh_keys.push(name.clone()),
                Err(e) if e.is_not_found() => missing.push(format!("{name:?}")),
                Err(e) => return Err(e),
            }
        }
        conditions.push(if missing.is_empty() {
            ok(
                "SSHKeyReady",
                "Resolved",
                format!("SSH keys {}", names.join(", ")),
            )
        } else {
            failed(
                "SSHKeyReady",
                "SSHKeyNotFound",
                format!("SSH key {} does not exist", missing.join(", ")),
            )
        });
    }

    // Instance-type allow-list.
    if spec.instance_types.is_empty() {
        conditions.push(ok(
            "InstanceTypesReady",
            "AllAuthorized",
            "every authorized instance type".into(),
        ));
    } else {
        let types = decode_types(instance_types_json(api, home)?)?;
        let usable = |name: &String| {
            types.iter().any(|t| {
                t.name() == *name
                    && t.authorized != Some(false)
                    && t.zones.iter().any(|z| zones.contains(z))
            })
        };
        let unusable: Vec<&str> = spec
            .instance_types
            .iter()
            .filter(|n| !usable(n))
            .map(String::as_str)
            .collect();
        conditions.push(if unusable.len() == spec.instance_types.len() {
            failed(
                "InstanceTypesReady",
                "NoUsableInstanceType",
                format!(
                    "none of instanceTypes is known, authorized and offered in the zones: {}",
                    unusable.join(", ")
                ),
            )
        } else if unusable.is_empty() {
            ok(
                "InstanceTypesReady",
                "Resolved",
                format!("{} instance types allowed", spec.instance_types.len()),
            )
        } else {
            ok(
                "InstanceTypesReady",
                "SomeUnusable",
                format!(
                    "ignored (unknown, not authorized or not offered): {}",
                    unusable.join(", ")
                ),
            )
        });
    }

    Ok(Resolution {
        resolved,
        conditions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(id: &str, name: &str, labels: &[(&str, &str)]) -> Named {
        Named {
            id: id.into(),
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Named::default()
        }
    }

    fn term(json: &str) -> Term {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn terms_are_ored_and_fields_anded() {
        let networks = [
            named("n1", "k8s", &[("env", "prod")]),
            named("n2", "k8s", &[("env", "dev")]),
            named("n3", "storage", &[("env", "prod")]),
        ];
        assert_eq!(
            select(
                &[term(r#"{"name": "k8s", "labels": {"env": "prod"}}"#)],
                &networks
            ),
            Ok(vec!["n1".into()])
        );
        assert_eq!(
            select(&[term(r#"{"labels": {"env": "prod"}}"#)], &networks),
            Ok(vec!["n1".into(), "n3".into()])
        );
        assert_eq!(
            select(
                &[term(r#"{"id": "n2"}"#), term(r#"{"name": "storage"}"#)],
                &networks
            ),
            Ok(vec!["n2".into(), "n3".into()])
        );
        assert_eq!(
            select(
                &[
                    term(r#"{"id": "n2"}"#),
                    term(r#"{"name": "nope"}"#),
                    term(r#"{"id": "n9"}"#)
                ],
                &networks
            ),
            Err(vec![1, 2])
        );
        assert_eq!(
            select(&[term(r#"{"name": "k8s", "id": "n3"}"#)], &networks),
            Err(vec![0])
        );
        let message = describe_unmatched(
            "securityGroupSelectorTerms",
            &[term(r#"{"name": "nope"}"#)],
            &[0],
            None,
        );
        assert_eq!(
            message,
            r#"securityGroupSelectorTerms[0] {name: "nope"} matches nothing"#
        );
    }

    #[test]
    fn the_newest_matching_build_wins() {
        let template = |id: &str, name: &str, visibility: &str, created: &str, build: &str| Named {
            visibility: Some(visibility.into()),
            created_at: Some(created.into()),
            build: Some(build.into()),
            ..named(id, name, &[])
        };
        let templates = [
            template("old", "Ubuntu", "public", "2026-01-10T08:00:00Z", "a"),
            template("new", "Ubuntu", "public", "2026-03-02T08:00:00Z", "b"),
            template("mine", "Ubuntu", "private", "2026-04-01T08:00:00Z", "c"),
            template("tie", "Debian", "public", "2026-03-02T08:00:00Z", "z"),
        ];
        assert_eq!(
            newest_template(
                &[term(r#"{"name": "Ubuntu", "visibility": "public"}"#)],
                &templates
            )
            .unwrap()
            .id,
            "new"
        );
        assert_eq!(
            newest_template(&[term(r#"{"name": "Ubuntu"}"#)], &templates)
                .unwrap()
                .id,
            "mine"
        );
        let either = [
            term(r#"{"name": "Ubuntu", "visibility": "public"}"#),
            term(r#"{"name": "Debian"}"#),
        ];
        assert_eq!(
            newest_template(&either, &templates).unwrap().id,
            "tie",
            "same date: the higher build wins"
        );
        assert_eq!(
            newest_template(&[term(r#"{"name": "Arch"}"#)], &templates).unwrap_err(),
            vec![0]
        );
    }
}
