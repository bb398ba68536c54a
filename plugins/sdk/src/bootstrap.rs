//! Building blocks for renderers that write a POSIX `sh` bootstrap script (feature `renderer`).
//!
//! The built-in k3s, rke2 and kubeadm renderers share this shape: a script that writes a
//! YAML file through a quoted here-document, optionally appends the kubelet's provider ID at
//! boot, and runs an installer or `kubeadm join`. This module holds what they have in common,
//! so that every renderer quotes, parses and reports errors the same way:
//!
//! | need | helpers |
//! |---|---|
//! | quoting | [`shell_quote`], [`yaml_quote`], [`yaml_escape`], [`comment_safe`] |
//! | parameters | [`check_parameter_names`], [`join_token`] (inline token or granted secret) |
//! | the cluster endpoint | [`Endpoint::parse`], [`Endpoint::parse_authority`] |
//! | kubelet settings | [`kubelet_flags`], [`kubelet_args`] (see the table below) |
//! | script pieces | [`script_header`], [`provider_id_command`], [`read_instance_id`], [`fetch_installer`] |
//!
//! ```ignore
//! use joinery_plugin_sdk::bootstrap::{self, TokenErrors};
//!
//! const PARAMETERS: &[&str] = &["token", "tokenSecret"];
//! const TOKEN_ERRORS: TokenErrors = TokenErrors::new(
//!     "the demo renderer needs a join token: set the parameter tokenSecret to `secret-name/key`",
//!     "the join token `{reference}` did not reach the renderer: grant the secret `{name}` to it",
//! );
//!
//! bootstrap::check_parameter_names(&ctx, "demo", PARAMETERS)?;
//! let token = bootstrap::join_token(&ctx, "token", "tokenSecret", &TOKEN_ERRORS)?;
//! let line = format!("token: {}", bootstrap::yaml_quote(token.value));
//! ```
//!
//! ## Kubelet settings
//!
//! [`kubelet_flags`] maps the NodeClass `kubelet` settings (Karpenter's field names) to
//! kubelet command-line flags:
//!
//! | NodeClass field | kubelet flag | value |
//! |---|---|---|
//! | `maxPods` | `max-pods` | integer |
//! | `podsPerCore` | `pods-per-core` | integer |
//! | `kubeReserved` | `kube-reserved` | `name=quantity,…`, sorted |
//! | `systemReserved` | `system-reserved` | `name=quantity,…`, sorted |
//! | `evictionHard` | `eviction-hard` | `signal<threshold,…`, sorted |
//! | `evictionSoft` | `eviction-soft` | `signal<threshold,…`, sorted |
//! | `evictionSoftGracePeriod` | `eviction-soft-grace-period` | `signal=duration,…`, sorted |
//! | `evictionMaxPodGracePeriod` | `eviction-max-pod-grace-period` | integer (seconds) |
//! | `imageGCHighThresholdPercent` | `image-gc-high-threshold` | integer |
//! | `imageGCLowThresholdPercent` | `image-gc-low-threshold` | integer |
//! | `cpuCFSQuota` | `cpu-cfs-quota` | `true`/`false` |
//! | `clusterDNS` | `cluster-dns` | `ip,…` in the given order |
//!
//! Flags come in the table's order. `null` values and empty maps or lists are skipped; other
//! fields are logged and ignored (the cloud plugin may still use them for allocatable).
//! A `,` inside a map entry or list item is refused, since the kubelet splits on it.

use crate::log;
use crate::renderer::{RenderContext, RenderError};
use serde_json::Value;

/// The parameter that names a shell command printing the instance ID
/// (see [`provider_id_command`]).
pub const PROVIDER_ID_COMMAND: &str = "providerIDCommand";

fn invalid(message: String) -> RenderError {
    RenderError::InvalidParameter(message)
}

// ---------------------------------------------------------------------------------------
// Quoting
// ---------------------------------------------------------------------------------------

/// Single-quotes `text` for a POSIX shell; an embedded `'` becomes `'\''` (close the
/// quotes, an escaped quote, reopen them). The shell expands nothing inside the result.
///
/// `shell_quote("it's")` is `'it'\''s'`; `shell_quote("")` is `''`.
pub fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

/// Writes `text` as a double-quoted YAML scalar that stays on one line (see [`yaml_escape`]).
///
/// No value quoted this way can end a here-document early or change the YAML's structure.
pub fn yaml_quote(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    push_yaml_escaped(&mut quoted, text);
    quoted.push('"');
    quoted
}

/// The inside of [`yaml_quote`], without the surrounding quotes: `"` and `\` get a
/// backslash; C0/C1 control characters, DEL, U+2028/U+2029 and the byte-order mark are
/// written as `\uXXXX`. Use it for a piece of a double-quoted YAML string written at boot
/// (e.g. the provider ID prefix in a `printf` format).
pub fn yaml_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    push_yaml_escaped(&mut escaped, text);
    escaped
}

fn push_yaml_escaped(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            _ if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}') => {
                out.push_str(&format!("\\u{:04X}", u32::from(c)));
            }
            _ => out.push(c),
        }
    }
}

/// Replaces control characters with `?`, so that a name fits in a shell comment line.
pub fn comment_safe(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

// ---------------------------------------------------------------------------------------
// Parameters
// ---------------------------------------------------------------------------------------

/// Refuses a parameter whose name is not in `accepted`, so that a misspelt parameter does
/// not go unnoticed. The error names the unknown parameter and lists the accepted ones:
/// ``the k3s renderer has no parameter `serverUrl`; it accepts: serverURL, token, …``.
pub fn check_parameter_names(
    ctx: &RenderContext,
    renderer: &str,
    accepted: &[&str],
) -> Result<(), RenderError> {
    match ctx
        .parameters
        .iter()
        .find(|p| !accepted.contains(&p.key.as_str()))
    {
        Some(unknown) => Err(invalid(format!(
            "the {renderer} renderer has no parameter `{}`; it accepts: {}",
            unknown.key,
            accepted.join(", ")
        ))),
        None => Ok(()),
    }
}

/// A join token found by [`join_token`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JoinToken<'a> {
    /// The token, without surrounding whitespace (secrets often end with a newline).
    pub value: &'a str,
    /// The `secret-name/key` it was read from; `None` when it was given inline.
    pub secret: Option<&'a str>,
}

/// The error messages of [`join_token`], in a renderer's own words.
///
/// In each text, `{inline}` and `{secret}` stand for the two parameters' names,
/// `{reference}` for the secret parameter's value (`secret-name/key`), and `{name}` and
/// `{key}` for its two parts (these three are empty in the messages where they do not apply).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenErrors<'a> {
    /// Both parameters are set (an invalid-parameter error).
    pub both: &'a str,
    /// Neither parameter is set: say what the token is and how to provide it (an
    /// invalid-parameter error).
    pub neither: &'a str,
    /// The secret parameter is not `secret-name/key` (an invalid-parameter error).
    pub malformed: &'a str,
    /// The secret was not granted to the renderer, lacks the key, or is blank (a
    /// missing-secret error): say how to grant it.
    pub not_granted: &'a str,
}

impl<'a> TokenErrors<'a> {
    /// The messages `neither` and `not_granted`, with the SDK's wording for the other two:
    /// ``set either the parameter {inline} or {secret}, not both`` and
    /// ``parameter {secret} `{reference}` must have the form `secret-name/key` ``.
    pub const fn new(neither: &'a str, not_granted: &'a str) -> Self {
        TokenErrors {
            both: "set either the parameter {inline} or {secret}, not both",
            neither,
            malformed: "parameter {secret} `{reference}` must have the form `secret-name/key`",
            not_granted,
        }
    }
}

/// The join token: the parameter `inline_param` (visible to anyone who can read the
/// NodeClass), or the granted secret that the parameter `secret_param` names as
/// `secret-name/key` (preferred). Exactly one of the two must be set; a blank parameter
/// counts as unset. The secret's value is trimmed and may not be blank.
///
/// Errors use the texts of `errors`: [`RenderError::InvalidParameter`] when both or neither
/// parameter is set or the reference is malformed, [`RenderError::MissingSecret`] when the
/// secret did not arrive in the render context.
pub fn join_token<'c>(
    ctx: &'c RenderContext,
    inline_param: &str,
    secret_param: &str,
    errors: &TokenErrors<'_>,
) -> Result<JoinToken<'c>, RenderError> {
    let fill = |template: &str, reference: &str, name: &str, key: &str| {
        fill(
            template,
            &[
                ("inline", inline_param),
                ("secret", secret_param),
                ("reference", reference),
                ("name", name),
                ("key", key),
            ],
        )
    };
    let reference = match (
        ctx.non_empty_parameter(inline_param),
        ctx.non_empty_parameter(secret_param),
    ) {
        (Some(_), Some(_)) => return Err(invalid(fill(errors.both, "", "", ""))),
        (None, None) => return Err(invalid(fill(errors.neither, "", "", ""))),
        (Some(value), None) => {
            return Ok(JoinToken {
                value,
                secret: None,
            });
        }
        (None, Some(reference)) => reference,
    };
    let Some((name, key)) = reference
        .rsplit_once('/')
        .filter(|(n, k)| !n.is_empty() && !k.is_empty())
    else {
        return Err(invalid(fill(errors.malformed, reference, "", "")));
    };
    match ctx.secret(reference).map(str::trim) {
        Some(value) if !value.is_empty() => Ok(JoinToken {
            value,
            secret: Some(reference),
        }),
        _ => Err(RenderError::MissingSecret(fill(
            errors.not_granted,
            reference,
            name,
            key,
        ))),
    }
}

/// Replaces each `{name}` of `values` in `template` in one pass (a replaced value is not
/// searched again); any other `{` stays as it is.
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut pieces = template.split('{');
    let mut out = String::from(pieces.next().unwrap_or_default());
    for piece in pieces {
        let hit = values
            .iter()
            .find_map(|(name, value)| Some((value, piece.strip_prefix(name)?.strip_prefix('}')?)));
        match hit {
            Some((value, rest)) => {
                out.push_str(value);
                out.push_str(rest);
            }
            None => {
                out.push('{');
                out.push_str(piece);
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// The cluster endpoint
// ---------------------------------------------------------------------------------------

/// A URL-like endpoint (`https://host:port/path`, `host:port` or `host`) split into its
/// parts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint<'a> {
    /// The scheme before `://` as written (e.g. `https`); `None` when there is none.
    pub scheme: Option<&'a str>,
    /// The host name or address; an IPv6 literal keeps its brackets (`[fd00::1]`).
    pub host: &'a str,
    /// The port, when the endpoint names one.
    pub port: Option<u16>,
}

impl<'a> Endpoint<'a> {
    /// Parses an endpoint such as the render context's `cluster_endpoint`: surrounding
    /// whitespace, a path, query or fragment and user information (`user@`) are dropped.
    ///
    /// `None` when no usable host is found (empty, containing whitespace, `[]`), when an
    /// IPv6 literal is not in brackets, or when the port is not a number from 1 to 65535.
    pub fn parse(endpoint: &'a str) -> Option<Self> {
        let endpoint = endpoint.trim();
        let (scheme, rest) = match endpoint.split_once("://") {
            Some((scheme, rest)) => (Some(scheme), rest),
            None => (None, endpoint),
        };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let authority = authority
            .rsplit_once('@')
            .map_or(authority, |(_, host)| host);
        Some(Endpoint {
            scheme,
            ..Self::parse_authority(authority)?
        })
    }

    /// Parses exactly `host` or `host:port` (an IPv6 host in brackets, `[fd00::1]:6443`),
    /// with nothing around it: no scheme, no path. `None` when malformed, as for
    /// [`Endpoint::parse`]. The scheme of the result is `None`.
    pub fn parse_authority(authority: &'a str) -> Option<Self> {
        let (host, port) = if authority.starts_with('[') {
            let close = authority.find(']')?;
            let port = match &authority[close + 1..] {
                "" => None,
                rest => Some(rest.strip_prefix(':')?),
            };
            (&authority[..=close], port)
        } else {
            match authority.split_once(':') {
                // More than one colon without brackets is not a host and a port.
                Some((_, port)) if port.contains(':') => return None,
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        let port = match port {
            None => None,
            Some(digits) => Some(digits.parse::<u16>().ok().filter(|p| *p != 0)?),
        };
        let usable = !host.is_empty() && host != "[]" && !host.contains(char::is_whitespace);
        usable.then_some(Endpoint {
            scheme: None,
            host,
            port,
        })
    }
}

// ---------------------------------------------------------------------------------------
// Kubelet settings
// ---------------------------------------------------------------------------------------

/// How a NodeClass field's JSON becomes the flag value.
#[derive(Clone, Copy)]
enum Shape {
    /// A non-negative integer.
    Count,
    /// `true` or `false`.
    Switch,
    /// An object joined as `key<separator>value,…`, sorted by key.
    Pairs(char),
    /// A list joined with `,`.
    List,
}

/// NodeClass field, kubelet flag, shape: in output order.
const KUBELET_MAPPING: &[(&str, &str, Shape)] = &[
    ("maxPods", "max-pods", Shape::Count),
    ("podsPerCore", "pods-per-core", Shape::Count),
    ("kubeReserved", "kube-reserved", Shape::Pairs('=')),
    ("systemReserved", "system-reserved", Shape::Pairs('=')),
    ("evictionHard", "eviction-hard", Shape::Pairs('<')),
    ("evictionSoft", "eviction-soft", Shape::Pairs('<')),
    (
        "evictionSoftGracePeriod",
        "eviction-soft-grace-period",
        Shape::Pairs('='),
    ),
    (
        "evictionMaxPodGracePeriod",
        "eviction-max-pod-grace-period",
        Shape::Count,
    ),
    (
        "imageGCHighThresholdPercent",
        "image-gc-high-threshold",
        Shape::Count,
    ),
    (
        "imageGCLowThresholdPercent",
        "image-gc-low-threshold",
        Shape::Count,
    ),
    ("cpuCFSQuota", "cpu-cfs-quota", Shape::Switch),
    ("clusterDNS", "cluster-dns", Shape::List),
];

/// What a JSON value is, for error messages.
fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_u64() => "an integer",
        Value::Number(_) => "a negative or fractional number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn wrong(field: &str, expected: &str, value: &Value) -> RenderError {
    invalid(format!(
        "kubelet.{field} must be {expected}, not {}",
        describe(value)
    ))
}

/// A scalar inside a map or list: a string or a number, without `,`.
fn item(field: &str, value: &Value) -> Result<String, RenderError> {
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        other => return Err(wrong(field, "made of strings", other)),
    };
    if text.contains(',') {
        return Err(invalid(format!(
            "kubelet.{field}: `{text}` contains a comma, which would split it in two"
        )));
    }
    Ok(text)
}

/// One field's flag value; `None` when there is nothing to pass.
fn flag_value(field: &str, shape: Shape, value: &Value) -> Result<Option<String>, RenderError> {
    let text = match (shape, value) {
        (_, Value::Null) => return Ok(None),
        (Shape::Count, Value::Number(n)) if n.is_u64() => n.to_string(),
        (Shape::Count, other) => return Err(wrong(field, "a non-negative integer", other)),
        (Shape::Switch, Value::Bool(b)) => b.to_string(),
        (Shape::Switch, other) => return Err(wrong(field, "true or false", other)),
        (Shape::Pairs(separator), Value::Object(map)) => {
            let mut pairs = Vec::with_capacity(map.len());
            for (key, value) in map {
                let key = item(field, &Value::String(key.clone()))?;
                pairs.push(format!("{key}{separator}{}", item(field, value)?));
            }
            pairs.sort();
            pairs.join(",")
        }
        (Shape::Pairs(_), other) => return Err(wrong(field, "an object", other)),
        (Shape::List, Value::Array(items)) => items
            .iter()
            .map(|v| item(field, v))
            .collect::<Result<Vec<_>, _>>()?
            .join(","),
        (Shape::List, other) => return Err(wrong(field, "a list", other)),
    };
    Ok((!text.is_empty()).then_some(text))
}

/// The kubelet flags (name without `--`, value) for the NodeClass `kubelet` settings, in
/// the order of the [module's table](self#kubelet-settings).
///
/// Fields without a flag are logged (warning) and ignored. A value of the wrong type, or a
/// `,` inside a map entry or list item, is an invalid-parameter error naming the field.
pub fn kubelet_flags(ctx: &RenderContext) -> Result<Vec<(&'static str, String)>, RenderError> {
    let settings = ctx.kubelet_settings()?;
    let mut flags = Vec::new();
    for (field, flag, shape) in KUBELET_MAPPING {
        if let Some(value) = settings.get(*field)
            && let Some(text) = flag_value(field, *shape, value)?
        {
            flags.push((*flag, text));
        }
    }
    let unmapped: Vec<&str> = settings
        .keys()
        .map(String::as_str)
        .filter(|key| !KUBELET_MAPPING.iter().any(|(field, _, _)| field == key))
        .collect();
    if !unmapped.is_empty() {
        log::warn(format!(
            "kubelet settings without a kubelet flag are ignored by this renderer: {}",
            unmapped.join(", ")
        ));
    }
    Ok(flags)
}

/// [`kubelet_flags`] as `name=value` arguments (e.g. `max-pods=110`), the form of a k3s or
/// RKE2 `kubelet-arg` list.
pub fn kubelet_args(ctx: &RenderContext) -> Result<Vec<String>, RenderError> {
    Ok(kubelet_flags(ctx)?
        .into_iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect())
}

// ---------------------------------------------------------------------------------------
// Script pieces
// ---------------------------------------------------------------------------------------

/// The first lines of a bootstrap script (without the final newline): the `#!/bin/sh`
/// line, a comment naming the NodeClaim and its NodePool (see [`comment_safe`]) and what the
/// script does (`how`, e.g. `to k3s as an agent`), and `set -eu`.
pub fn script_header(ctx: &RenderContext, how: &str) -> String {
    format!(
        "#!/bin/sh\n# Joinery: join NodeClaim {} (NodePool {}) {how}. Generated, do not edit.\nset -eu",
        comment_safe(&ctx.node_claim),
        comment_safe(&ctx.node_pool)
    )
}

/// The parameter [`PROVIDER_ID_COMMAND`] when the cloud has a provider ID prefix (the
/// kubelet's provider ID is then `<prefix><instance id>`). When the parameter is set but
/// the prefix is empty, the command is not used and an info line says so.
pub fn provider_id_command<'c>(ctx: &'c RenderContext, renderer: &str) -> Option<&'c str> {
    let command = ctx.non_empty_parameter(PROVIDER_ID_COMMAND)?;
    if ctx.provider_id_prefix.is_empty() {
        log::info(format!(
            "{renderer} renderer: {PROVIDER_ID_COMMAND} is not used: the cloud has no provider ID prefix"
        ));
        return None;
    }
    Some(command)
}

/// Shell lines (without the final newline) that run `command` with `sh -c`, keep its
/// output without whitespace in `$JOINERY_INSTANCE_ID`, and stop the script when that is
/// empty or has characters outside `A-Z a-z 0-9 . _ : / -` (so it is safe inside a
/// double-quoted YAML string).
pub fn read_instance_id(command: &str) -> String {
    format!(
        "JOINERY_INSTANCE_ID=\"$(sh -c {} | tr -d '[:space:]')\"\n\
         case \"$JOINERY_INSTANCE_ID\" in\n  ''|*[!A-Za-z0-9._:/-]*)\n    \
         echo \"joinery: {PROVIDER_ID_COMMAND} printed no usable instance ID: '$JOINERY_INSTANCE_ID'\" >&2\n    \
         exit 1 ;;\nesac",
        shell_quote(command)
    )
}

/// Shell lines (without the final newline) that download `url` into a new temporary file
/// named by `$JOINERY_INSTALLER`, with `curl`, or `wget` where there is no `curl`.
pub fn fetch_installer(url: &str) -> String {
    let url = shell_quote(url);
    format!(
        "JOINERY_INSTALLER=\"$(mktemp)\"\nif command -v curl >/dev/null 2>&1; then\n  \
         curl -sfL {url} -o \"$JOINERY_INSTALLER\"\nelse\n  wget -qO \"$JOINERY_INSTALLER\" {url}\nfi"
    )
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::renderer::KeyValue;
    use crate::testing::{self, FakeHost};

    fn context(parameters: &[(&str, &str)], secrets: &[(&str, &str)]) -> RenderContext {
        let mut ctx = RenderContext::for_claim("default-abc12");
        ctx.parameters = parameters
            .iter()
            .map(|(k, v)| KeyValue::new(*k, *v))
            .collect();
        ctx.secrets = secrets.iter().map(|(k, v)| KeyValue::new(*k, *v)).collect();
        ctx
    }

    /// Runs `sh` with `args`; `None` when this machine has no `sh`.
    fn sh(args: &[&str]) -> Option<std::process::Output> {
        std::process::Command::new("sh").args(args).output().ok()
    }

    #[test]
    fn shell_quote_edge_cases() {
        for (text, quoted) in [
            ("plain", "'plain'"),
            ("", "''"),
            ("it's", "'it'\\''s'"),
            ("''", "''\\'''\\'''"),
            ("$(x) `y` \"z\" \\ *", "'$(x) `y` \"z\" \\ *'"),
            ("a\nb", "'a\nb'"),
        ] {
            assert_eq!(shell_quote(text), quoted, "{text:?}");
        }
    }

    #[test]
    fn quoted_text_survives_sh() {
        for text in ["it's", "''", "$(reboot) `x` \"y\" \\z", "a\nb", "é ☃", ""] {
            let Some(out) = sh(&["-c", &format!("printf %s {}", shell_quote(text))]) else {
                return;
            };
            assert_eq!(String::from_utf8_lossy(&out.stdout), text);
        }
    }

    #[test]
    fn yaml_quote_edge_cases() {
        for (text, quoted) in [
            ("", "\"\""),
            ("plain: text #", "\"plain: text #\""),
            ("a\"b\\c", "\"a\\\"b\\\\c\""),
            ("it's", "\"it's\""),
            (
                "\0\t\r\n\u{1f}\u{7f}\u{80}\u{85}\u{9f}\u{2028}\u{2029}\u{feff}",
                "\"\\u0000\\u0009\\u000D\\u000A\\u001F\\u007F\\u0080\\u0085\\u009F\\u2028\\u2029\\uFEFF\"",
            ),
            // Printable non-ASCII stays as it is.
            ("é\u{a0}☃😀", "\"é\u{a0}☃😀\""),
        ] {
            assert_eq!(yaml_quote(text), quoted, "{text:?}");
        }
        assert_eq!(yaml_escape("we'ird\"://\n"), "we'ird\\\"://\\u000A");
    }

    #[test]
    fn comment_safe_replaces_control_characters() {
        assert_eq!(comment_safe("pool\n`x`\t\u{85}é"), "pool?`x`??é");
    }

    #[test]
    fn unknown_parameter_names() {
        let accepted = &["token", "tokenSecret"];
        let ctx = context(&[("token", "x"), ("tokenSecret", "")], &[]);
        assert!(check_parameter_names(&ctx, "demo", accepted).is_ok());
        let ctx = context(&[("token", "x"), ("tokensecret", "a/b")], &[]);
        match check_parameter_names(&ctx, "demo", accepted) {
            Err(RenderError::InvalidParameter(message)) => assert_eq!(
                message,
                "the demo renderer has no parameter `tokensecret`; it accepts: token, tokenSecret"
            ),
            other => panic!("{other:?}"),
        }
    }

    const ERRORS: TokenErrors = TokenErrors::new(
        "demo needs {inline} or {secret}",
        "`{reference}` missing: grant `{name}` with key `{key}`",
    );

    fn token_error(ctx: &RenderContext) -> RenderError {
        join_token(ctx, "token", "tokenSecret", &ERRORS).unwrap_err()
    }

    #[test]
    fn join_token_inline_or_from_a_secret() {
        let ctx = context(&[("token", " abc \n")], &[]);
        assert_eq!(
            join_token(&ctx, "token", "tokenSecret", &ERRORS).unwrap(),
            JoinToken {
                value: "abc",
                secret: None
            }
        );
        let ctx = context(
            &[("token", " "), ("tokenSecret", "join/token")],
            &[("join/token", "K10::x\n")],
        );
        assert_eq!(
            join_token(&ctx, "token", "tokenSecret", &ERRORS).unwrap(),
            JoinToken {
                value: "K10::x",
                secret: Some("join/token")
            }
        );
        // The key is what follows the last slash.
        let ctx = context(&[("tokenSecret", "a/b/c")], &[("a/b/c", "t")]);
        assert_eq!(
            join_token(&ctx, "token", "tokenSecret", &ERRORS)
                .unwrap()
                .value,
            "t"
        );
    }

    #[test]
    fn join_token_errors() {
        let both = context(&[("token", "a"), ("tokenSecret", "s/k")], &[]);
        assert_eq!(
            token_error(&both),
            RenderError::InvalidParameter(
                "set either the parameter token or tokenSecret, not both".into()
            )
        );
        assert_eq!(
            token_error(&context(&[("token", "  ")], &[])),
            RenderError::InvalidParameter("demo needs token or tokenSecret".into())
        );
        for bad in ["no-key", "/key", "name/"] {
            assert_eq!(
                token_error(&context(&[("tokenSecret", bad)], &[])),
                RenderError::InvalidParameter(format!(
                    "parameter tokenSecret `{bad}` must have the form `secret-name/key`"
                ))
            );
        }
        let missing = RenderError::MissingSecret(
            "`join/token` missing: grant `join` with key `token`".into(),
        );
        let reference = [("tokenSecret", "join/token")];
        assert_eq!(token_error(&context(&reference, &[])), missing);
        assert_eq!(
            token_error(&context(&reference, &[("join/other", "t")])),
            missing
        );
        assert_eq!(
            token_error(&context(&reference, &[("join/token", " \n")])),
            missing
        );
    }

    #[test]
    fn token_error_texts_are_the_renderers_own() {
        let errors = TokenErrors {
            both: "only one of {inline}/{secret}",
            ..ERRORS
        };
        let ctx = context(&[("pass", "a"), ("passRef", "s/k")], &[]);
        assert_eq!(
            join_token(&ctx, "pass", "passRef", &errors).unwrap_err(),
            RenderError::InvalidParameter("only one of pass/passRef".into())
        );
        // A value that looks like a placeholder is not filled in again.
        let ctx = context(&[("tokenSecret", "{key}/{name}")], &[]);
        assert_eq!(
            token_error(&ctx),
            RenderError::MissingSecret(
                "`{key}/{name}` missing: grant `{key}` with key `{name}`".into()
            )
        );
        assert_eq!(fill("{a} {b} {{a}} {", &[("a", "1")]), "1 {b} {1} {");
    }

    #[test]
    fn endpoints() {
        let parsed = |e| Endpoint::parse(e).map(|e| (e.scheme, e.host, e.port));
        assert_eq!(
            parsed("https://10.0.0.1:6443"),
            Some((Some("https"), "10.0.0.1", Some(6443)))
        );
        assert_eq!(
            parsed(" https://user:pw@k8s.example.com/base/?x#y "),
            Some((Some("https"), "k8s.example.com", None))
        );
        assert_eq!(
            parsed("k8s.example.com:6443"),
            Some((None, "k8s.example.com", Some(6443)))
        );
        assert_eq!(
            parsed("http://127.0.0.1:38211/"),
            Some((Some("http"), "127.0.0.1", Some(38211)))
        );
        assert_eq!(
            parsed("https://[fd00::1]:6443"),
            Some((Some("https"), "[fd00::1]", Some(6443)))
        );
        assert_eq!(parsed("[fd00::1]"), Some((None, "[fd00::1]", None)));
        for bad in [
            "",
            "  ",
            "https://",
            "https:///path",
            "fd00::1",
            "https://[]:6443",
            "https://[fd00::1",
            "https://[fd00::1]6443",
            "https://k8s:http",
            "https://k8s:",
            "https://k8s:0",
            "https://k8s:70000",
            "https://k8s:-1",
            "https://a b:6443",
        ] {
            assert_eq!(Endpoint::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn authorities() {
        assert_eq!(
            Endpoint::parse_authority("k8s-api.internal:6443"),
            Some(Endpoint {
                scheme: None,
                host: "k8s-api.internal",
                port: Some(6443)
            })
        );
        assert_eq!(
            Endpoint::parse_authority("[fd00::1]").map(|e| e.port),
            Some(None)
        );
        for bad in [
            "https://k8s-api.internal:6443",
            "k8s api:6443",
            "k8s:6443/path",
            " k8s:6443",
        ] {
            assert_eq!(Endpoint::parse_authority(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn kubelet_settings() {
        let _host = testing::install(FakeHost::new());
        let mut ctx = context(&[], &[]);
        ctx.kubelet = r#"{
            "clusterDNS": ["10.43.0.10", "10.43.0.11"],
            "evictionHard": {"nodefs.available": "10%", "memory.available": "500Mi"},
            "evictionSoft": {},
            "kubeReserved": {"memory": "256Mi", "cpu": 1},
            "maxPods": 58,
            "cpuCFSQuota": false,
            "podsPerCore": null,
            "somethingNew": 1
        }"#
        .into();
        assert_eq!(
            kubelet_args(&ctx).unwrap(),
            [
                "max-pods=58",
                "kube-reserved=cpu=1,memory=256Mi",
                "eviction-hard=memory.available<500Mi,nodefs.available<10%",
                "cpu-cfs-quota=false",
                "cluster-dns=10.43.0.10,10.43.0.11",
            ]
        );
        assert!(
            testing::logs()
                .iter()
                .any(|(level, line)| *level == log::Level::Warn && line.contains("somethingNew"))
        );
        for (bad, needle) in [
            (
                r#"{"maxPods": 1.5}"#,
                "kubelet.maxPods must be a non-negative integer",
            ),
            (
                r#"{"cpuCFSQuota": 1}"#,
                "kubelet.cpuCFSQuota must be true or false",
            ),
            (
                r#"{"clusterDNS": [true]}"#,
                "kubelet.clusterDNS must be made of strings",
            ),
            (r#"{"evictionHard": {"a,b": "1"}}"#, "comma"),
        ] {
            ctx.kubelet = bad.into();
            let err = kubelet_flags(&ctx).unwrap_err();
            assert!(err.message().contains(needle), "{bad}: {err:?}");
        }
    }

    #[test]
    fn script_header_names_the_claim() {
        let mut ctx = context(&[], &[]);
        ctx.node_pool = "pool\n$(reboot)".into();
        assert_eq!(
            script_header(&ctx, "to demo"),
            "#!/bin/sh\n# Joinery: join NodeClaim default-abc12 (NodePool pool?$(reboot)) to demo. \
             Generated, do not edit.\nset -eu"
        );
    }

    #[test]
    fn provider_id_command_needs_a_prefix() {
        let _host = testing::install(FakeHost::new());
        let mut ctx = context(&[(PROVIDER_ID_COMMAND, " cat /id ")], &[]);
        assert_eq!(provider_id_command(&ctx, "demo"), None);
        assert!(
            testing::logs()
                .iter()
                .any(|(_, line)| line.starts_with("demo renderer: providerIDCommand"))
        );
        ctx.provider_id_prefix = "sim://".into();
        assert_eq!(provider_id_command(&ctx, "demo"), Some("cat /id"));
    }

    #[test]
    fn script_pieces_run_in_sh() {
        let script = format!(
            "{}\nprintf '%s' \"$JOINERY_INSTANCE_ID\"",
            read_instance_id("printf ' i-1/a \\n'")
        );
        let Some(out) = sh(&["-c", &script]) else {
            return;
        };
        assert!(out.status.success(), "{script}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "i-1/a");
        let out = sh(&["-c", &read_instance_id("echo 'i-1;reboot'")]).unwrap();
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("no usable instance ID"));
        let fetch = fetch_installer("https://get.example/it's");
        assert!(
            fetch.contains("curl -sfL 'https://get.example/it'\\''s' -o"),
            "{fetch}"
        );
        assert!(
            sh(&["-n", "-c", &fetch]).unwrap().status.success(),
            "{fetch}"
        );
    }
}
