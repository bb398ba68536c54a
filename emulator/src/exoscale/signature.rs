//! Verification of `EXO2-HMAC-SHA256` request signatures.
//!
//! The signed text is five lines joined by `\n` (no trailing newline):
//!
//! 1. `<METHOD> <path>`: the request path exactly as received (escaped, without the query);
//! 2. the raw body;
//! 3. the decoded values of the query parameters that occur exactly once, concatenated in
//!    ascending order of their names (the header's `signed-query-args` must list exactly
//!    those names, in that order);
//! 4. signed header values (always empty);
//! 5. the `expires` timestamp (UNIX seconds).
//!
//! The signature is the standard, padded base64 of HMAC-SHA256 keyed with the API secret.

use std::collections::BTreeMap;

use base64::Engine as _;
use sha2::{Digest, Sha256};

/// The `Authorization` scheme.
pub const SCHEME: &str = "EXO2-HMAC-SHA256";

/// HMAC-SHA256 (RFC 2104) of `data` under `key`.
pub(crate) fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    if key.len() > block.len() {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(block.map(|b| b ^ 0x36));
    inner.update(data);
    let mut outer = Sha256::new();
    outer.update(block.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// The parsed `Authorization` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Credentials {
    pub(crate) key: String,
    pub(crate) signed_query_args: Vec<String>,
    pub(crate) expires: u64,
    pub(crate) signature: String,
}

/// Why a request is not authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AuthFailure {
    /// No usable `Authorization` header (401).
    Missing(String),
    /// Unknown key, wrong signature, or expired (403).
    Rejected(String),
}

/// Parses `EXO2-HMAC-SHA256 credential=…[,signed-query-args=…],expires=…,signature=…`.
pub(crate) fn parse_header(header: Option<&str>) -> Result<Credentials, AuthFailure> {
    let header =
        header.ok_or_else(|| AuthFailure::Missing("missing Authorization header".into()))?;
    let rest = header
        .strip_prefix(SCHEME)
        .and_then(|r| r.strip_prefix(' '))
        .ok_or_else(|| {
            AuthFailure::Missing(format!(
                "unsupported authorization scheme; expected {SCHEME}"
            ))
        })?;
    let mut pragmas = BTreeMap::new();
    for pragma in rest.split(',') {
        let (name, value) = pragma.split_once('=').ok_or_else(|| {
            AuthFailure::Missing(format!("malformed authorization pragma {pragma:?}"))
        })?;
        if pragmas
            .insert(name.to_string(), value.to_string())
            .is_some()
        {
            return Err(AuthFailure::Missing(format!(
                "authorization pragma {name} is repeated"
            )));
        }
    }
    let take = |name: &str| {
        pragmas
            .get(name)
            .cloned()
            .ok_or_else(|| AuthFailure::Missing(format!("authorization lacks {name}")))
    };
    let expires = take("expires")?;
    let expires = expires.parse().map_err(|_| {
        AuthFailure::Missing(format!("expires {expires:?} is not a UNIX timestamp"))
    })?;
    let signed_query_args = match pragmas.get("signed-query-args") {
        Some(list) => list.split(';').map(str::to_string).collect(),
        None => Vec::new(),
    };
    Ok(Credentials {
        key: take("credential")?,
        signed_query_args,
        expires,
        signature: take("signature")?,
    })
}

/// The query parameters as (name, decoded value) pairs, in request order.
pub(crate) fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (
                crate::http_server::percent_decode(name),
                crate::http_server::percent_decode(value),
            )
        })
        .collect()
}

/// The names of parameters occurring exactly once, sorted, with their concatenated values.
fn single_valued(pairs: &[(String, String)]) -> (Vec<String>, String) {
    let mut counts: BTreeMap<&str, (usize, &str)> = BTreeMap::new();
    for (name, value) in pairs {
        let entry = counts.entry(name).or_insert((0, value));
        entry.0 += 1;
    }
    let singles: Vec<(&str, &str)> = counts
        .into_iter()
        .filter(|(_, (n, _))| *n == 1)
        .map(|(k, (_, v))| (k, v))
        .collect();
    let names = singles.iter().map(|(k, _)| k.to_string()).collect();
    let values = singles.iter().map(|(_, v)| *v).collect();
    (names, values)
}

/// The exact bytes the client must have signed.
pub(crate) fn message(
    method: &str,
    path: &str,
    body: &[u8],
    query_values: &str,
    expires: u64,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(path.len() + body.len() + query_values.len() + 32);
    out.extend_from_slice(method.to_ascii_uppercase().as_bytes());
    out.push(b' ');
    out.extend_from_slice(path.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(body);
    out.push(b'\n');
    out.extend_from_slice(query_values.as_bytes());
    out.push(b'\n');
    out.push(b'\n');
    out.extend_from_slice(expires.to_string().as_bytes());
    out
}

/// What one request presents for verification.
pub(crate) struct Presented<'a> {
    pub(crate) method: &'a str,
    pub(crate) path: &'a str,
    pub(crate) query: &'a str,
    pub(crate) body: &'a [u8],
    pub(crate) authorization: Option<&'a str>,
}

/// Checks the request's signature against `secret_of(key)` and the expiry against `now`
/// (UNIX seconds). Returns the API key on success.
pub(crate) fn verify(
    request: &Presented<'_>,
    now: u64,
    secret_of: impl Fn(&str) -> Option<String>,
) -> Result<String, AuthFailure> {
    let credentials = parse_header(request.authorization)?;
    let Some(secret) = secret_of(&credentials.key) else {
        return Err(AuthFailure::Rejected(format!(
            "unknown API key {}",
            credentials.key
        )));
    };
    if credentials.expires <= now {
        return Err(AuthFailure::Rejected(format!(
            "request signature expired at {} (now {now})",
            credentials.expires
        )));
    }
    let (names, values) = single_valued(&query_pairs(request.query));
    if names != credentials.signed_query_args
        && !(names.is_empty() && credentials.signed_query_args == [""])
    {
        return Err(AuthFailure::Rejected(format!(
            "signed-query-args {:?} does not list the single-valued query parameters {names:?} in order",
            credentials.signed_query_args.join(";")
        )));
    }
    let expected = hmac_sha256(
        secret.as_bytes(),
        &message(
            request.method,
            request.path,
            request.body,
            &values,
            credentials.expires,
        ),
    );
    let presented = base64::engine::general_purpose::STANDARD
        .decode(credentials.signature.as_bytes())
        .map_err(|_| AuthFailure::Rejected("the signature is not base64".into()))?;
    // Compare without an early exit.
    let same = presented.len() == expected.len()
        && presented
            .iter()
            .zip(expected)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    if !same {
        return Err(AuthFailure::Rejected("invalid request signature".into()));
    }
    Ok(credentials.key)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            hex::encode(mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn the_signed_text_has_five_lines() {
        let text = message("get", "/v2/instance", b"", "a=b", 1_700_000_600);
        assert_eq!(
            String::from_utf8(text).unwrap(),
            "GET /v2/instance\n\na=b\n\n1700000600"
        );
    }

    #[test]
    fn verifies_and_rejects() {
        let secret = "s3cr3t";
        let text = message("GET", "/v2/instance", b"", "a=b", 2_000);
        let signature = b64(&hmac_sha256(secret.as_bytes(), &text));
        let header = format!(
            "{SCHEME} credential=EXOabc,signed-query-args=labels,expires=2000,signature={signature}"
        );
        let request = Presented {
            method: "GET",
            path: "/v2/instance",
            query: "labels=a%3Db",
            body: b"",
            authorization: Some(&header),
        };
        let secrets = |key: &str| (key == "EXOabc").then(|| secret.to_string());
        assert_eq!(verify(&request, 1_000, secrets), Ok("EXOabc".to_string()));
        assert!(
            matches!(verify(&request, 2_000, secrets), Err(AuthFailure::Rejected(m)) if m.contains("expired"))
        );
        let tampered = Presented {
            query: "labels=a%3Dc",
            ..request
        };
        assert!(matches!(
            verify(&tampered, 1_000, secrets),
            Err(AuthFailure::Rejected(_))
        ));
        let unsigned = Presented {
            query: "labels=a%3Db&x=1",
            ..tampered
        };
        assert!(
            matches!(verify(&unsigned, 1_000, secrets), Err(AuthFailure::Rejected(m)) if m.contains("signed-query-args"))
        );
        let anonymous = Presented {
            authorization: None,
            ..unsigned
        };
        assert!(matches!(
            verify(&anonymous, 1_000, secrets),
            Err(AuthFailure::Missing(_))
        ));
    }

    #[test]
    fn repeated_parameters_are_not_signed() {
        let (names, values) = single_valued(&query_pairs("b=2&a=1&c=x&c=y"));
        assert_eq!(names, ["a", "b"]);
        assert_eq!(values, "12");
    }
}
