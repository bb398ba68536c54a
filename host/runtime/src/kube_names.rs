//! Validation of the parts of a plugin's Kubernetes call that end up in a request path.
//!
//! The grant check compares cluster, group, resource, verb and namespace as strings; the
//! backend then joins group, version, resource, namespace and name into a URL path. A part
//! holding `/`, `..`, `?`, `#` or `%2F` would make that path address something the grant
//! never allowed (another namespace's Secrets, a subresource, a query). So every part is
//! checked against the Kubernetes grammar for what it names *before* the grant check, and a
//! call with any other value is refused: nothing a plugin sends can change the shape of the
//! path.

/// Why one part of a Kubernetes call is not acceptable: which field, its value and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "kubernetes {field} {value:?} is not valid: {rule}; the host refuses it so the request path cannot be changed"
)]
pub struct InvalidPart {
    /// The field of `resource-ref` (or `name`) that was refused.
    pub field: &'static str,
    /// The value as the plugin sent it.
    pub value: String,
    /// The grammar it had to follow.
    pub rule: &'static str,
}

/// The parts of one Kubernetes call, as the plugin sent them.
#[derive(Debug, Clone, Copy)]
pub struct CallParts<'a> {
    /// Cluster name (`workload` or a management cluster).
    pub cluster: &'a str,
    /// API group, `""` for core.
    pub group: &'a str,
    /// API version.
    pub version: &'a str,
    /// Plural resource.
    pub resource: &'a str,
    /// Namespace, if any.
    pub namespace: Option<&'a str>,
    /// Object name, for calls that address one object.
    pub name: Option<&'a str>,
}

/// Checks every part; the first bad one is reported.
pub fn check(parts: &CallParts<'_>) -> Result<(), InvalidPart> {
    part(
        "cluster",
        parts.cluster,
        is_dns_label,
        "a DNS label (lowercase letters, digits and '-', at most 63)",
    )?;
    if !parts.group.is_empty() {
        part(
            "group",
            parts.group,
            is_dns_subdomain,
            "empty (core) or a DNS subdomain such as apps or cluster.x-k8s.io",
        )?;
    }
    part(
        "version",
        parts.version,
        is_dns1035_label,
        "an API version such as v1 or v1beta2 (a lowercase DNS label starting with a letter)",
    )?;
    part(
        "resource",
        parts.resource,
        is_dns_label,
        "a plural resource name such as configmaps (a lowercase DNS label)",
    )?;
    if let Some(namespace) = parts.namespace {
        part(
            "namespace",
            namespace,
            is_dns_label,
            "a namespace name (a lowercase DNS label)",
        )?;
    }
    if let Some(name) = parts.name {
        part(
            "name",
            name,
            is_object_name,
            "an object name: at most 253 of letters, digits and - . _ : @, and not . or ..",
        )?;
    }
    Ok(())
}

/// Checks a secret reference (`name` or `namespace/name`) before it reaches the cluster.
pub fn check_secret_ref(reference: &str) -> Result<(), InvalidPart> {
    let (namespace, name) = match reference.split_once('/') {
        Some((ns, name)) => (Some(ns), name),
        None => (None, reference),
    };
    if let Some(namespace) = namespace {
        part(
            "secret namespace",
            namespace,
            is_dns_label,
            "a namespace name (a lowercase DNS label)",
        )?;
    }
    part(
        "secret name",
        name,
        is_dns_subdomain,
        "a Secret name (a lowercase DNS subdomain)",
    )
}

fn part(
    field: &'static str,
    value: &str,
    valid: fn(&str) -> bool,
    rule: &'static str,
) -> Result<(), InvalidPart> {
    if valid(value) {
        Ok(())
    } else {
        Err(InvalidPart {
            field,
            value: value.to_string(),
            rule,
        })
    }
}

fn alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

/// RFC 1123 label: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63.
fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && alnum(b[0])
        && alnum(b[b.len() - 1])
        && b.iter().all(|&c| alnum(c) || c == b'-')
}

/// RFC 1035 label: an RFC 1123 label that starts with a letter.
fn is_dns1035_label(s: &str) -> bool {
    is_dns_label(s) && s.as_bytes()[0].is_ascii_lowercase()
}

/// RFC 1123 subdomain: dot-separated labels, at most 253.
fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// What the API server accepts as a path segment, narrowed to characters real object names
/// use (RBAC names carry `:`, some generated names `@`/`_`).
fn is_object_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b':' | b'@'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok_parts() -> CallParts<'static> {
        CallParts {
            cluster: "workload",
            group: "",
            version: "v1",
            resource: "configmaps",
            namespace: Some("joinery"),
            name: Some("settings"),
        }
    }

    #[test]
    fn ordinary_calls_pass() {
        assert!(check(&ok_parts()).is_ok());
        let capi = CallParts {
            group: "cluster.x-k8s.io",
            version: "v1beta1",
            resource: "machinedeployments",
            name: Some("md-0"),
            ..ok_parts()
        };
        assert!(check(&capi).is_ok());
        let rbac = CallParts {
            name: Some("system:controller:node-controller"),
            namespace: None,
            ..ok_parts()
        };
        assert!(check(&rbac).is_ok());
        assert!(
            check(&CallParts {
                name: None,
                namespace: None,
                ..ok_parts()
            })
            .is_ok()
        );
    }

    #[test]
    fn every_injection_shape_is_refused_naming_the_field() {
        let hostile = [
            "v1/namespaces/joinery/secrets/creds?",
            "..",
            ".",
            "a/b",
            "a?b",
            "a#b",
            "a%2Fb",
            "a b",
            "a\nb",
            "",
        ];
        for bad in hostile {
            let cases: [(&str, CallParts<'_>); 5] = [
                (
                    "version",
                    CallParts {
                        version: bad,
                        ..ok_parts()
                    },
                ),
                (
                    "name",
                    CallParts {
                        name: Some(bad),
                        ..ok_parts()
                    },
                ),
                (
                    "namespace",
                    CallParts {
                        namespace: Some(bad),
                        ..ok_parts()
                    },
                ),
                (
                    "resource",
                    CallParts {
                        resource: bad,
                        ..ok_parts()
                    },
                ),
                (
                    "cluster",
                    CallParts {
                        cluster: bad,
                        ..ok_parts()
                    },
                ),
            ];
            for (field, parts) in cases {
                let err = check(&parts).expect_err(&format!("{field} = {bad:?} must be refused"));
                assert_eq!(err.field, field);
                assert!(err.to_string().contains(field), "{err}");
            }
            if !bad.is_empty() {
                let err = check(&CallParts {
                    group: bad,
                    ..ok_parts()
                })
                .expect_err(&format!("group = {bad:?}"));
                assert_eq!(err.field, "group");
            }
        }
    }

    #[test]
    fn versions_start_with_a_letter_and_names_stay_short() {
        assert!(
            check(&CallParts {
                version: "1",
                ..ok_parts()
            })
            .is_err()
        );
        assert!(
            check(&CallParts {
                version: "V1",
                ..ok_parts()
            })
            .is_err()
        );
        let long = "a".repeat(254);
        assert!(
            check(&CallParts {
                name: Some(&long),
                ..ok_parts()
            })
            .is_err()
        );
    }

    #[test]
    fn secret_references_are_checked_per_segment() {
        assert!(check_secret_ref("exoscale-credentials").is_ok());
        assert!(check_secret_ref("joinery/exoscale-credentials").is_ok());
        for bad in ["a/b/c", "../x", "x?", "ns/", "/x", "x%2Fy"] {
            assert!(check_secret_ref(bad).is_err(), "{bad:?} must be refused");
        }
    }
}
