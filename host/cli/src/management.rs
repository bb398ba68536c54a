//! The management cluster: the cluster that holds the Cluster API objects (Machines,
//! MachineDeployments) when they do not live in the cluster Joinery scales. `joinery run`
//! builds a second Kubernetes client for it and registers it as the cluster `management`,
//! which plugins reach only through grants naming `cluster: management`.
//!
//! It is named by a kubeconfig file (`--management-kubeconfig`, or upstream's
//! `--cluster-api-kubeconfig` / `CLUSTER_API_KUBECONFIG`), or by upstream's variables
//! `CLUSTER_API_URL` + `CLUSTER_API_TOKEN`, with `CLUSTER_API_CERTIFICATE_AUTHORITY_DATA`
//! (base64 of the CA's PEM certificates) or `CLUSTER_API_SKIP_TLS_VERIFY`. A kubeconfig wins
//! over the variables. With neither, there is no management cluster.

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// The flag naming the management cluster's kubeconfig.
pub const FLAG: &str = "--management-kubeconfig";
/// Upstream's variable holding the management cluster's API server URL.
pub const URL_ENV: &str = "CLUSTER_API_URL";
/// Upstream's variable holding the bearer token for the management cluster.
pub const TOKEN_ENV: &str = "CLUSTER_API_TOKEN";
/// Upstream's variable holding the management cluster's CA certificates (base64 of PEM).
pub const CA_ENV: &str = "CLUSTER_API_CERTIFICATE_AUTHORITY_DATA";
/// Upstream's variable turning off the verification of the management cluster's certificate.
pub const SKIP_TLS_ENV: &str = "CLUSTER_API_SKIP_TLS_VERIFY";

/// What a plugin granted `cluster: management` is told when `joinery run` has none.
pub const NOT_CONFIGURED: &str = "joinery run was started without a management cluster: pass --management-kubeconfig FILE \
     (or set CLUSTER_API_URL and CLUSTER_API_TOKEN) to give plugins one";

/// Options naming the management cluster.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ManagementOptions {
    /// Kubeconfig of the management cluster (the one holding the Cluster API objects), used with
    /// its current context; plugins granted `cluster: management` reach it. Also accepted as
    /// upstream's `--cluster-api-kubeconfig`. Without it, upstream's `CLUSTER_API_URL` +
    /// `CLUSTER_API_TOKEN` (+ `CLUSTER_API_CERTIFICATE_AUTHORITY_DATA` or
    /// `CLUSTER_API_SKIP_TLS_VERIFY`) name it; with neither, plugins reach only the workload cluster.
    #[arg(
        long = "management-kubeconfig",
        visible_alias = "cluster-api-kubeconfig",
        env = "CLUSTER_API_KUBECONFIG",
        value_name = "FILE"
    )]
    pub management_kubeconfig: Option<PathBuf>,
}

/// Where the management cluster is, as the operator named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManagementSource {
    /// A kubeconfig file.
    Kubeconfig(PathBuf),
    /// Upstream's variables, checked.
    Env {
        /// The API server URL.
        url: String,
        /// The bearer token.
        token: String,
        /// The CA certificates, PEM.
        ca_pem: Option<Vec<u8>>,
        /// Whether the server's certificate goes unverified.
        skip_tls_verify: bool,
    },
}

impl std::fmt::Display for ManagementSource {
    /// Where the operator set it, for messages.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ManagementSource::Kubeconfig(path) => write!(f, "{FLAG} {}", path.display()),
            ManagementSource::Env { .. } => write!(f, "{URL_ENV} and {TOKEN_ENV}"),
        }
    }
}

/// Reads the options and upstream's variables (through `env`, which returns a variable's
/// value): the management cluster the operator named, if any. Contradictory or incomplete
/// settings are errors naming the flag or variable and what to fix.
pub fn resolve(
    options: &ManagementOptions,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Option<ManagementSource>> {
    let var = |name: &str| {
        env(name)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let (url, token, ca, skip) = (var(URL_ENV), var(TOKEN_ENV), var(CA_ENV), var(SKIP_TLS_ENV));
    if let Some(path) = options
        .management_kubeconfig
        .as_ref()
        .filter(|p| !p.as_os_str().is_empty())
    {
        let ignored: Vec<&str> = [
            (URL_ENV, &url),
            (TOKEN_ENV, &token),
            (CA_ENV, &ca),
            (SKIP_TLS_ENV, &skip),
        ]
        .iter()
        .filter(|(_, v)| v.is_some())
        .map(|(n, _)| *n)
        .collect();
        if !ignored.is_empty() {
            tracing::warn!(ignored = %ignored.join(", "), "{FLAG} names the management cluster; the CLUSTER_API_* variables are ignored");
        }
        return Ok(Some(ManagementSource::Kubeconfig(path.clone())));
    }
    let Some(url) = url else {
        for (name, value) in [(TOKEN_ENV, &token), (CA_ENV, &ca)] {
            if value.is_some() {
                bail!(
                    "{name} is set but {URL_ENV} is not: set {URL_ENV} to the management cluster's API server (https://host:port), or name it with {FLAG} FILE instead"
                );
            }
        }
        return Ok(None);
    };
    let host = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .unwrap_or_default();
    if host.is_empty() || host.starts_with(['/', ':']) || host.contains(char::is_whitespace) {
        bail!(
            "{URL_ENV} {url:?} is not an API server URL; expected the management cluster's API server, https://host[:port]"
        );
    }
    let Some(token) = token else {
        bail!(
            "{URL_ENV} is set but {TOKEN_ENV} is not: set {TOKEN_ENV} to a bearer token for the management cluster (e.g. a ServiceAccount token allowed on the Cluster API objects), or name the cluster with {FLAG} FILE instead"
        );
    };
    let skip_tls_verify = match skip.as_deref() {
        None => false,
        // Go's strconv.ParseBool, which upstream reads it with.
        Some("1" | "t" | "T" | "true" | "TRUE" | "True") => true,
        Some("0" | "f" | "F" | "false" | "FALSE" | "False") => false,
        Some(other) => bail!("{SKIP_TLS_ENV} {other:?} is not a boolean; use true or false"),
    };
    let ca_pem = ca.map(|ca| ca_certificates(&ca)).transpose()?;
    if ca_pem.is_some() && skip_tls_verify {
        bail!(
            "{CA_ENV} and {SKIP_TLS_ENV}=true contradict each other (a CA to verify with, and no verification): unset one of them"
        );
    }
    if skip_tls_verify {
        tracing::warn!(
            "{SKIP_TLS_ENV} is true: the management cluster's certificate is not verified"
        );
    }
    Ok(Some(ManagementSource::Env {
        url,
        token,
        ca_pem,
        skip_tls_verify,
    }))
}

/// The PEM certificates `CLUSTER_API_CERTIFICATE_AUTHORITY_DATA` holds: base64 of PEM, as in a
/// kubeconfig's `certificate-authority-data` (line breaks allowed), or the PEM text itself.
fn ca_certificates(value: &str) -> Result<Vec<u8>> {
    let pem = if value.starts_with("-----BEGIN") {
        value.as_bytes().to_vec()
    } else {
        let compact: String = value.chars().filter(|c| !c.is_whitespace()).collect();
        // k8s-openapi's ByteString reads standard base64, as the API's `[]byte` fields are written.
        let bytes: k8s_openapi::ByteString = serde_json::from_value(serde_json::Value::String(compact))
            .map_err(|e| anyhow::anyhow!("{CA_ENV} is not valid base64 ({e}); it holds the CA's PEM certificates base64-encoded, e.g. `base64 -w0 ca.crt`"))?;
        bytes.0
    };
    if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
        bail!(
            "{CA_ENV} holds no PEM certificate (no \"-----BEGIN CERTIFICATE-----\" line once decoded); it holds the CA's PEM certificates base64-encoded, e.g. `base64 -w0 ca.crt`"
        );
    }
    Ok(pem)
}

impl ManagementSource {
    /// The client configuration for the management cluster.
    pub async fn config(&self) -> Result<kube::Config> {
        let options = KubeConfigOptions::default();
        match self {
            ManagementSource::Kubeconfig(path) => {
                let file = Kubeconfig::read_from(path)
                    .with_context(|| format!("cannot read the management cluster's kubeconfig {} ({FLAG}); check the path and that it is a kubeconfig", path.display()))?;
                kube::Config::from_custom_kubeconfig(file, &options)
                    .await
                    .with_context(|| format!("the management cluster's kubeconfig {} ({FLAG}) is not usable; check its current-context, cluster and user", path.display()))
            }
            ManagementSource::Env {
                url,
                token,
                ca_pem,
                skip_tls_verify,
            } => {
                let mut cluster = serde_json::json!({"server": url});
                if let Some(pem) = ca_pem {
                    cluster["certificate-authority-data"] =
                        serde_json::to_value(k8s_openapi::ByteString(pem.clone()))?;
                }
                if *skip_tls_verify {
                    cluster["insecure-skip-tls-verify"] = serde_json::Value::Bool(true);
                }
                let document = serde_json::json!({
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "management", "cluster": cluster}],
                    "users": [{"name": "management", "user": {"token": token}}],
                    "contexts": [{"name": "management", "context": {"cluster": "management", "user": "management"}}],
                    "current-context": "management",
                });
                let file: Kubeconfig = serde_json::from_value(document).context(
                    "cannot assemble a client configuration from the CLUSTER_API_* variables",
                )?;
                kube::Config::from_custom_kubeconfig(file, &options)
                    .await
                    .with_context(|| format!("{URL_ENV}, {TOKEN_ENV} and {CA_ENV} do not make a usable client configuration; check {URL_ENV} (https://host[:port]) and {CA_ENV}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// A PEM certificate block kube can parse (the DER inside is not a real certificate; the
    /// configuration only decodes it).
    const PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIBAAAAAAAAAAAA\n-----END CERTIFICATE-----\n";

    fn base64_of(bytes: &[u8]) -> String {
        serde_json::to_value(k8s_openapi::ByteString(bytes.to_vec()))
            .unwrap()
            .as_str()
            .unwrap()
            .to_string()
    }

    fn resolve_with(flag: Option<&str>, vars: &[(&str, &str)]) -> Result<Option<ManagementSource>> {
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let options = ManagementOptions {
            management_kubeconfig: flag.map(PathBuf::from),
        };
        resolve(&options, |name| vars.get(name).cloned())
    }

    fn error(flag: Option<&str>, vars: &[(&str, &str)]) -> String {
        format!("{:#}", resolve_with(flag, vars).expect_err("refused"))
    }

    #[test]
    fn nothing_set_means_no_management_cluster() {
        assert_eq!(resolve_with(None, &[]).unwrap(), None);
        // Empty values (as a chart renders an unset value) count as unset.
        assert_eq!(
            resolve_with(Some(""), &[(URL_ENV, ""), (TOKEN_ENV, " ")]).unwrap(),
            None
        );
        // The TLS switch alone names no cluster.
        assert_eq!(
            resolve_with(None, &[(SKIP_TLS_ENV, "false")]).unwrap(),
            None
        );
    }

    #[test]
    fn the_kubeconfig_wins_over_the_variables() {
        let source = resolve_with(
            Some("/etc/mgmt/kubeconfig"),
            &[(URL_ENV, "https://elsewhere:6443"), (TOKEN_ENV, "t")],
        )
        .unwrap();
        assert_eq!(
            source,
            Some(ManagementSource::Kubeconfig("/etc/mgmt/kubeconfig".into()))
        );
        assert_eq!(
            source.unwrap().to_string(),
            "--management-kubeconfig /etc/mgmt/kubeconfig"
        );
    }

    #[test]
    fn url_and_token_name_the_cluster() {
        let source = resolve_with(
            None,
            &[
                (URL_ENV, " https://capi.example:6443 "),
                (TOKEN_ENV, "secret-token"),
            ],
        )
        .unwrap();
        assert_eq!(
            source,
            Some(ManagementSource::Env {
                url: "https://capi.example:6443".into(),
                token: "secret-token".into(),
                ca_pem: None,
                skip_tls_verify: false
            })
        );
        let with_ca = resolve_with(
            None,
            &[
                (URL_ENV, "https://capi.example"),
                (TOKEN_ENV, "t"),
                (CA_ENV, &base64_of(PEM.as_bytes())),
            ],
        )
        .unwrap();
        let Some(ManagementSource::Env {
            ca_pem: Some(pem), ..
        }) = with_ca
        else {
            panic!("{with_ca:?}")
        };
        assert_eq!(pem, PEM.as_bytes());
        // Wrapped base64 (`base64` without -w0) and the PEM text itself are accepted too.
        let wrapped = base64_of(PEM.as_bytes())
            .as_bytes()
            .chunks(20)
            .map(|c| String::from_utf8_lossy(c).to_string())
            .collect::<Vec<_>>()
            .join("\n");
        for ca in [wrapped.as_str(), PEM] {
            let source = resolve_with(
                None,
                &[
                    (URL_ENV, "https://capi.example"),
                    (TOKEN_ENV, "t"),
                    (CA_ENV, ca),
                ],
            )
            .unwrap();
            assert!(
                matches!(
                    source,
                    Some(ManagementSource::Env {
                        ca_pem: Some(_),
                        ..
                    })
                ),
                "{ca}"
            );
        }
        for (value, skip) in [
            ("true", true),
            ("1", true),
            ("True", true),
            ("false", false),
            ("0", false),
        ] {
            let source = resolve_with(
                None,
                &[
                    (URL_ENV, "https://capi.example"),
                    (TOKEN_ENV, "t"),
                    (SKIP_TLS_ENV, value),
                ],
            )
            .unwrap();
            assert!(
                matches!(source, Some(ManagementSource::Env { skip_tls_verify, .. }) if skip_tls_verify == skip),
                "{value}"
            );
        }
    }

    #[test]
    fn incomplete_or_contradictory_variables_are_refused_naming_them() {
        let e = error(None, &[(URL_ENV, "https://capi.example:6443")]);
        assert!(
            e.contains("CLUSTER_API_TOKEN is not") && e.contains(FLAG),
            "{e}"
        );
        let e = error(None, &[(TOKEN_ENV, "t")]);
        assert!(
            e.contains("CLUSTER_API_TOKEN is set but CLUSTER_API_URL is not"),
            "{e}"
        );
        let e = error(None, &[(CA_ENV, "abc")]);
        assert!(
            e.contains("CLUSTER_API_CERTIFICATE_AUTHORITY_DATA is set but CLUSTER_API_URL is not"),
            "{e}"
        );
        let e = error(None, &[(URL_ENV, "capi.example:6443"), (TOKEN_ENV, "t")]);
        assert!(
            e.contains("CLUSTER_API_URL") && e.contains("https://host"),
            "{e}"
        );
        let e = error(None, &[(URL_ENV, "ftp://capi.example"), (TOKEN_ENV, "t")]);
        assert!(e.contains("CLUSTER_API_URL"), "{e}");
        let e = error(
            None,
            &[
                (URL_ENV, "https://capi.example"),
                (TOKEN_ENV, "t"),
                (CA_ENV, "not base64!"),
            ],
        );
        assert!(
            e.contains("CLUSTER_API_CERTIFICATE_AUTHORITY_DATA is not valid base64")
                && e.contains("base64 -w0"),
            "{e}"
        );
        let e = error(
            None,
            &[
                (URL_ENV, "https://capi.example"),
                (TOKEN_ENV, "t"),
                (CA_ENV, &base64_of(b"hello")),
            ],
        );
        assert!(
            e.contains("CLUSTER_API_CERTIFICATE_AUTHORITY_DATA holds no PEM certificate"),
            "{e}"
        );
        let e = error(
            None,
            &[
                (URL_ENV, "https://capi.example"),
                (TOKEN_ENV, "t"),
                (SKIP_TLS_ENV, "yes"),
            ],
        );
        assert!(
            e.contains("CLUSTER_API_SKIP_TLS_VERIFY \"yes\" is not a boolean"),
            "{e}"
        );
        let e = error(
            None,
            &[
                (URL_ENV, "https://capi.example"),
                (TOKEN_ENV, "t"),
                (SKIP_TLS_ENV, "true"),
                (CA_ENV, PEM),
            ],
        );
        assert!(e.contains("contradict"), "{e}");
    }

    #[tokio::test]
    async fn the_variables_become_a_client_configuration() {
        let source = ManagementSource::Env {
            url: "https://capi.example:6443".into(),
            token: "t".into(),
            ca_pem: Some(PEM.as_bytes().to_vec()),
            skip_tls_verify: false,
        };
        let config = source.config().await.unwrap();
        assert_eq!(config.cluster_url.to_string(), "https://capi.example:6443/");
        assert_eq!(config.root_cert.as_ref().map(Vec::len), Some(1));
        assert!(!config.accept_invalid_certs);
        assert!(config.auth_info.token.is_some());
        let source = ManagementSource::Env {
            url: "https://10.0.0.1".into(),
            token: "t".into(),
            ca_pem: None,
            skip_tls_verify: true,
        };
        let config = source.config().await.unwrap();
        assert!(config.accept_invalid_certs && config.root_cert.is_none());
    }

    #[tokio::test]
    async fn an_unreadable_kubeconfig_is_named_with_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let e = format!(
            "{:#}",
            ManagementSource::Kubeconfig(missing.clone())
                .config()
                .await
                .unwrap_err()
        );
        assert!(
            e.contains(&missing.display().to_string()) && e.contains(FLAG),
            "{e}"
        );
        let garbage = dir.path().join("garbage");
        std::fs::write(&garbage, "clusters: 12\n").unwrap();
        let e = format!(
            "{:#}",
            ManagementSource::Kubeconfig(garbage)
                .config()
                .await
                .unwrap_err()
        );
        assert!(e.contains(FLAG), "{e}");
        let no_context = dir.path().join("no-context");
        std::fs::write(
            &no_context,
            "apiVersion: v1\nkind: Config\nclusters: []\nusers: []\ncontexts: []\n",
        )
        .unwrap();
        let e = format!(
            "{:#}",
            ManagementSource::Kubeconfig(no_context)
                .config()
                .await
                .unwrap_err()
        );
        assert!(e.contains("current-context") && e.contains(FLAG), "{e}");
    }
}
