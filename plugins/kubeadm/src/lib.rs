//! # kubeadm — join the node with `kubeadm join` and a JoinConfiguration
//!
//! Renders a POSIX `sh` script that (optionally) installs kubelet and kubeadm, writes a
//! kubeadm `JoinConfiguration` to `/etc/joinery/kubeadm-join.yaml`, enables the kubelet
//! service and runs `kubeadm join --config /etc/joinery/kubeadm-join.yaml`. The node
//! discovers the cluster with a bootstrap token and pins the cluster CA by its public-key
//! hash, the way `kubeadm join --token … --discovery-token-ca-cert-hash …` does.
//!
//! The machine image must bring what kubeadm expects of a node: a container runtime
//! (containerd or CRI-O) on its default socket, swap off, and the usual kernel settings.
//! Without the `packages` parameter it must also have kubelet and kubeadm installed.
//!
//! ## Parameters (`userDataRenderer.parameters` on the NodeClass)
//!
//! | name | meaning |
//! |---|---|
//! | `token` | the bootstrap token (`abcdef.0123456789abcdef`), inline (anyone who can read the NodeClass can read it) |
//! | `tokenSecret` | `secret-name/key` of a secret granted to this renderer that holds the bootstrap token; preferred. Exactly one of `token` and `tokenSecret` must be set. |
//! | `caCertHash` | required: the cluster CA's public-key hash, `sha256:<64 hex digits>` (what `kubeadm token create --print-join-command` prints); several separated by commas |
//! | `apiServerEndpoint` | `host:port` of the API server used for discovery. Default: the cluster endpoint's host and port (443 when it has none) |
//! | `configAPIVersion` | `v1beta4` (default, kubeadm ≥ 1.31) or `v1beta3` (older kubeadm) |
//! | `providerIDCommand` | a shell command printing this instance's ID; when the cloud has a provider ID prefix, the kubelet gets `provider-id=<prefix><id>` |
//! | `packages` | `apt` or `dnf`: first install kubelet and kubeadm from the Kubernetes package repository `pkgs.k8s.io` for `kubernetesVersion`; `none` (default): they are already on the image |
//! | `kubernetesVersion` | with `packages`, required: `v1.33` (newest patch of that minor release) or `v1.33.2` (exactly that one) |
//!
//! An unknown parameter name is an error, so a misspelt parameter does not go unnoticed.
//!
//! ## Output format (stable: the simulated kubelet reads it)
//!
//! The configuration is written with a quoted here-document, so the shell expands nothing
//! inside it. The lines between `cat > /etc/joinery/kubeadm-join.yaml <<'JOINERY_KUBEADM_CONFIG'`
//! and the line `JOINERY_KUBEADM_CONFIG` are the YAML file, in this order:
//!
//! ```yaml
//! apiVersion: kubeadm.k8s.io/v1beta4
//! kind: JoinConfiguration
//! discovery:
//!   bootstrapToken:
//!     apiServerEndpoint: "10.0.0.1:6443"
//!     token: "abcdef.0123456789abcdef"
//!     caCertHashes:
//!       - "sha256:<64 hex digits>"
//! nodeRegistration:
//!   name: "default-abc12"
//!   kubeletExtraArgs:
//!     - name: "node-labels"
//!       value: "karpenter.sh/nodepool=default"
//!     - name: "register-with-taints"
//!       value: "karpenter.sh/unregistered:NoExecute"
//!     - name: "max-pods"
//!       value: "110"
//! ```
//!
//! - every value is a YAML double-quoted string on one line (`"` and `\` escaped with a
//!   backslash, control and line-separator characters as `\uXXXX`), so no value can end the
//!   here-document early or change the YAML's structure;
//! - `nodeRegistration.name` is the NodeClaim name (kubeadm passes it to the kubelet as
//!   `--hostname-override`);
//! - `kubeletExtraArgs` (v1beta4: a list of `name`/`value` items) holds, in this order:
//!   `node-labels` (`k=v,…` sorted by key; left out when there is no label),
//!   `register-with-taints` (the NodeClaim's taints, then its startup taints, and always
//!   `karpenter.sh/unregistered:NoExecute`), then the NodeClass `kubelet` settings as
//!   kubelet flags (see [`joinery_plugin_sdk::bootstrap::kubelet_flags`]). A label or
//!   taint containing a `,` is refused, since the kubelet splits these lists on commas;
//! - with `configAPIVersion: v1beta3`, `kubeletExtraArgs` is a map instead
//!   (`    node-labels: "…"`);
//! - `kubeletExtraArgs` is the last key of the file, so the provider-ID step can append
//!   `    - name: "provider-id"` / `      value: "<prefix><instance id>"` (v1beta3:
//!   `    provider-id: "<prefix><instance id>"`) at boot with `printf … >> <file>`.
//!
//! The provider-ID step (only with `providerIDCommand` and a non-empty prefix) runs the
//! command, keeps its output without whitespace in `JOINERY_INSTANCE_ID`, and stops the
//! script if that is empty or has characters outside `A-Z a-z 0-9 . _ : / -`. Values used
//! on a shell command line are single-quoted, an embedded `'` written as `'\''`.

use joinery_plugin_sdk::bootstrap::{
    self, Endpoint, TokenErrors, shell_quote, yaml_escape, yaml_quote,
};
use joinery_plugin_sdk::renderer::{RenderContext, RenderError, Renderer};

/// The directory of the join configuration.
pub const CONFIG_DIR: &str = "/etc/joinery";
/// The join configuration file.
pub const CONFIG_PATH: &str = "/etc/joinery/kubeadm-join.yaml";
/// The here-document delimiter around the configuration.
pub const CONFIG_MARKER: &str = "JOINERY_KUBEADM_CONFIG";
/// The API group and the versions of the kubeadm configuration this renderer writes.
pub const API_GROUP: &str = "kubeadm.k8s.io";
/// The configuration version used when `configAPIVersion` is not set.
pub const DEFAULT_API_VERSION: ApiVersion = ApiVersion::V1beta4;
/// The Kubernetes package repository the `packages` step uses.
pub const PACKAGE_REPOSITORY: &str = "https://pkgs.k8s.io/core:/stable:";

/// Every parameter this renderer accepts.
pub const PARAMETERS: &[&str] = &[
    "token",
    "tokenSecret",
    "caCertHash",
    "apiServerEndpoint",
    "configAPIVersion",
    bootstrap::PROVIDER_ID_COMMAND,
    "packages",
    "kubernetesVersion",
];

/// What the bootstrap token errors say (see [`bootstrap::join_token`]).
const TOKEN_ERRORS: TokenErrors = TokenErrors::new(
    "the kubeadm renderer needs a bootstrap token: set the parameter tokenSecret to `secret-name/key` \
     of a secret granted to this renderer (or, visible to every reader of the NodeClass, the parameter \
     token); `kubeadm token create` makes one",
    "the kubeadm bootstrap token `{reference}` (parameter tokenSecret) did not reach the renderer: \
     grant the secret `{name}` to the kubeadm renderer in the grants file and make sure it has \
     a non-empty key `{key}`",
);

/// The kubeadm configuration API version to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiVersion {
    /// `kubeadm.k8s.io/v1beta3`: `kubeletExtraArgs` is a map (kubeadm 1.22 to 1.30, still read later).
    V1beta3,
    /// `kubeadm.k8s.io/v1beta4`: `kubeletExtraArgs` is a list of `name`/`value` (kubeadm ≥ 1.31).
    V1beta4,
}

impl ApiVersion {
    /// The version part, `v1beta3` or `v1beta4`.
    pub fn name(self) -> &'static str {
        match self {
            ApiVersion::V1beta3 => "v1beta3",
            ApiVersion::V1beta4 => "v1beta4",
        }
    }
}

/// Where kubelet and kubeadm come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Packages {
    /// Already on the image.
    Preinstalled,
    /// From pkgs.k8s.io with apt, for this release.
    Apt(Release),
    /// From pkgs.k8s.io with dnf, for this release.
    Dnf(Release),
}

/// A Kubernetes release named by `kubernetesVersion`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// `major.minor`, e.g. `1.33` (selects the package repository).
    pub minor: String,
    /// The full `major.minor.patch` when a patch release was named.
    pub exact: Option<String>,
}

/// The kubeadm renderer.
pub struct Kubeadm;

impl Renderer for Kubeadm {
    fn render(ctx: RenderContext) -> Result<String, RenderError> {
        render_script(&ctx)
    }
}

joinery_plugin_sdk::export_renderer!(Kubeadm);

fn invalid(message: impl Into<String>) -> RenderError {
    RenderError::InvalidParameter(message.into())
}

/// The API server endpoint (`host:port`) for discovery: the `apiServerEndpoint` parameter,
/// else the cluster endpoint's host and port (443 for https without a port, 80 for http).
pub fn api_server_endpoint(ctx: &RenderContext) -> Result<String, RenderError> {
    if let Some(value) = ctx.non_empty_parameter("apiServerEndpoint") {
        return match Endpoint::parse_authority(value) {
            Some(Endpoint { port: Some(_), .. }) => Ok(value.to_string()),
            _ => Err(invalid(format!(
                "parameter apiServerEndpoint `{value}` must be host:port without a scheme, e.g. 10.0.0.1:6443"
            ))),
        };
    }
    let endpoint = ctx.cluster_endpoint.trim();
    if endpoint.is_empty() {
        return Err(invalid(
            "the cluster endpoint is unknown: set the parameter apiServerEndpoint (host:port)",
        ));
    }
    let Some(Endpoint { scheme, host, port }) = Endpoint::parse(endpoint) else {
        return Err(invalid(format!(
            "no host:port can be read from the cluster endpoint `{endpoint}`: set the parameter apiServerEndpoint"
        )));
    };
    let http = scheme.is_some_and(|s| s.eq_ignore_ascii_case("http"));
    let port = port.unwrap_or(if http { 80 } else { 443 });
    Ok(format!("{host}:{port}"))
}

/// Whether `token` has the bootstrap token form `[a-z0-9]{6}.[a-z0-9]{16}`.
pub fn is_bootstrap_token(token: &str) -> bool {
    let allowed = |part: &str, length: usize| {
        part.len() == length
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    token
        .split_once('.')
        .is_some_and(|(id, secret)| allowed(id, 6) && allowed(secret, 16))
}

/// The bootstrap token: the `token` parameter, or the granted secret `tokenSecret` names.
/// A malformed token is refused without repeating it.
pub fn bootstrap_token(ctx: &RenderContext) -> Result<String, RenderError> {
    let token = bootstrap::join_token(ctx, "token", "tokenSecret", &TOKEN_ERRORS)?;
    if !is_bootstrap_token(token.value) {
        let origin = match token.secret {
            None => "the parameter token".to_string(),
            Some(reference) => format!("the secret `{reference}`"),
        };
        return Err(invalid(format!(
            "the bootstrap token in {origin} is not of the form [a-z0-9]{{6}}.[a-z0-9]{{16}} \
             (e.g. abcdef.0123456789abcdef)"
        )));
    }
    Ok(token.value.to_string())
}

/// The CA public-key hashes of `caCertHash`: each `sha256:` and 64 hexadecimal digits.
pub fn ca_cert_hashes(ctx: &RenderContext) -> Result<Vec<String>, RenderError> {
    let Some(value) = ctx.non_empty_parameter("caCertHash") else {
        return Err(invalid(
            "the kubeadm renderer needs the parameter caCertHash, the cluster CA's public-key hash \
             `sha256:<hex>` (printed by `kubeadm token create --print-join-command`)",
        ));
    };
    value
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(|hash| {
            let digest = hash.strip_prefix("sha256:").unwrap_or_default();
            if digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()) {
                Ok(hash.to_string())
            } else {
                Err(invalid(format!(
                    "parameter caCertHash: `{hash}` is not `sha256:` followed by 64 hexadecimal digits"
                )))
            }
        })
        .collect()
}

/// The configuration version from `configAPIVersion` (`v1beta4` when unset; a
/// `kubeadm.k8s.io/` prefix is allowed).
pub fn api_version(ctx: &RenderContext) -> Result<ApiVersion, RenderError> {
    let Some(value) = ctx.non_empty_parameter("configAPIVersion") else {
        return Ok(DEFAULT_API_VERSION);
    };
    match value.strip_prefix("kubeadm.k8s.io/").unwrap_or(value) {
        "v1beta4" => Ok(ApiVersion::V1beta4),
        "v1beta3" => Ok(ApiVersion::V1beta3),
        _ => Err(invalid(format!(
            "parameter configAPIVersion `{value}` must be v1beta4 or v1beta3"
        ))),
    }
}

/// `kubernetesVersion` as a release: `v1.33`, `1.33`, `v1.33.2` or `1.33.2`.
fn release(value: &str) -> Result<Release, RenderError> {
    let numbers: Vec<&str> = value
        .strip_prefix('v')
        .unwrap_or(value)
        .split('.')
        .collect();
    let numeric = numbers
        .iter()
        .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    if !numeric || !(2..=3).contains(&numbers.len()) {
        return Err(invalid(format!(
            "parameter kubernetesVersion `{value}` must be a release like v1.33 or v1.33.2"
        )));
    }
    Ok(Release {
        minor: numbers[..2].join("."),
        exact: (numbers.len() == 3).then(|| numbers.join(".")),
    })
}

/// The `packages` and `kubernetesVersion` parameters.
pub fn packages(ctx: &RenderContext) -> Result<Packages, RenderError> {
    let version = ctx.non_empty_parameter("kubernetesVersion");
    match (
        ctx.non_empty_parameter("packages").unwrap_or("none"),
        version,
    ) {
        ("none", None) => Ok(Packages::Preinstalled),
        ("none", Some(_)) => Err(invalid(
            "parameter kubernetesVersion only chooses what the packages step installs: set packages to apt or dnf \
             too, or remove it",
        )),
        ("apt" | "dnf", None) => Err(invalid(
            "parameter packages needs kubernetesVersion (e.g. v1.33) to choose the package repository",
        )),
        ("apt", Some(v)) => Ok(Packages::Apt(release(v)?)),
        ("dnf", Some(v)) => Ok(Packages::Dnf(release(v)?)),
        (other, _) => Err(invalid(format!(
            "parameter packages `{other}` must be apt, dnf or none"
        ))),
    }
}

/// A label or taint for a comma-separated kubelet flag: it may not contain a comma.
fn list_entry(what: &str, text: String) -> Result<String, RenderError> {
    if text.contains(',') {
        return Err(invalid(format!(
            "the {what} `{text}` contains a comma, which the kubelet would read as a separator"
        )));
    }
    Ok(text)
}

/// The kubelet arguments, in output order: node-labels, register-with-taints, then the
/// NodeClass kubelet settings.
pub fn kubelet_extra_args(ctx: &RenderContext) -> Result<Vec<(&'static str, String)>, RenderError> {
    let mut args = Vec::new();
    let labels = ctx
        .sorted_labels()
        .into_iter()
        .map(|(key, value)| list_entry("label", format!("{key}={value}")))
        .collect::<Result<Vec<_>, _>>()?;
    if !labels.is_empty() {
        args.push(("node-labels", labels.join(",")));
    }
    let taints = ctx
        .node_taints()
        .iter()
        .map(|taint| list_entry("taint", taint.to_spec()))
        .collect::<Result<Vec<_>, _>>()?;
    args.push(("register-with-taints", taints.join(",")));
    args.extend(bootstrap::kubelet_flags(ctx)?);
    Ok(args)
}

/// The shell lines installing kubelet and kubeadm, if asked for.
fn package_step(packages: &Packages) -> Vec<String> {
    let (manager, release) = match packages {
        Packages::Preinstalled => return Vec::new(),
        Packages::Apt(release) => ("apt", release),
        Packages::Dnf(release) => ("dnf", release),
    };
    let repository = format!("{PACKAGE_REPOSITORY}/v{}", release.minor);
    let mut lines = vec![
        format!(
            "# Install kubelet and kubeadm {} from {repository} (parameter packages: {manager}).",
            release.exact.as_deref().unwrap_or(&release.minor)
        ),
        // Package managers read their keys and lists as other users: keep them world-readable.
        "umask 022".to_string(),
    ];
    if manager == "apt" {
        let keyring = "/etc/apt/keyrings/kubernetes-apt-keyring.gpg";
        let pin = |name: &str| match &release.exact {
            Some(exact) => format!("{name}={}", shell_quote(&format!("{exact}-*"))),
            None => name.to_string(),
        };
        lines.extend([
            "export DEBIAN_FRONTEND=noninteractive".to_string(),
            "apt-get update".to_string(),
            "apt-get install -y ca-certificates curl gpg".to_string(),
            "mkdir -p /etc/apt/keyrings".to_string(),
            format!(
                "curl -fsSL {} | gpg --dearmor --yes -o {keyring}",
                shell_quote(&format!("{repository}/deb/Release.key"))
            ),
            format!(
                "echo {} > /etc/apt/sources.list.d/kubernetes.list",
                shell_quote(&format!("deb [signed-by={keyring}] {repository}/deb/ /"))
            ),
            "apt-get update".to_string(),
            format!("apt-get install -y {} {}", pin("kubelet"), pin("kubeadm")),
            "apt-mark hold kubelet kubeadm".to_string(),
        ]);
    } else {
        let pin = |name: &str| match &release.exact {
            Some(exact) => format!("{name}-{exact}"),
            None => name.to_string(),
        };
        lines.extend([
            "cat > /etc/yum.repos.d/kubernetes.repo <<'JOINERY_KUBERNETES_REPO'".to_string(),
            "[kubernetes]".to_string(),
            "name=Kubernetes".to_string(),
            format!("baseurl={repository}/rpm/"),
            "enabled=1".to_string(),
            "gpgcheck=1".to_string(),
            format!("gpgkey={repository}/rpm/repodata/repomd.xml.key"),
            // Nothing upgrades them by accident; the install below lifts the exclusion.
            "exclude=kubelet kubeadm kubectl cri-tools kubernetes-cni".to_string(),
            "JOINERY_KUBERNETES_REPO".to_string(),
            format!(
                "dnf install -y --disableexcludes=kubernetes {} {}",
                pin("kubelet"),
                pin("kubeadm")
            ),
        ]);
    }
    lines
}

/// Renders the whole script.
pub fn render_script(ctx: &RenderContext) -> Result<String, RenderError> {
    bootstrap::check_parameter_names(ctx, "kubeadm", PARAMETERS)?;
    let version = api_version(ctx)?;
    let endpoint = api_server_endpoint(ctx)?;
    let token = bootstrap_token(ctx)?;
    let hashes = ca_cert_hashes(ctx)?;
    let packages = packages(ctx)?;
    let extra_args = kubelet_extra_args(ctx)?;
    let provider_id_command = bootstrap::provider_id_command(ctx, "kubeadm");

    let mut out = String::with_capacity(2048);
    let mut line = |text: &str| {
        out.push_str(text);
        out.push('\n');
    };
    line(&bootstrap::script_header(ctx, "with kubeadm"));
    for step in package_step(&packages) {
        line(&step);
    }
    line("umask 077");
    line(&format!("mkdir -p {CONFIG_DIR}"));

    // The configuration, in a quoted here-document: the shell expands nothing in it.
    line(&format!("cat > {CONFIG_PATH} <<'{CONFIG_MARKER}'"));
    line(&format!("apiVersion: {API_GROUP}/{}", version.name()));
    line("kind: JoinConfiguration");
    line("discovery:");
    line("  bootstrapToken:");
    line(&format!("    apiServerEndpoint: {}", yaml_quote(&endpoint)));
    line(&format!("    token: {}", yaml_quote(&token)));
    line("    caCertHashes:");
    for hash in &hashes {
        line(&format!("      - {}", yaml_quote(hash)));
    }
    line("nodeRegistration:");
    line(&format!("  name: {}", yaml_quote(&ctx.node_claim)));
    // The last key of the file: the provider-ID step appends to it.
    line("  kubeletExtraArgs:");
    for (name, value) in &extra_args {
        match version {
            ApiVersion::V1beta4 => {
                line(&format!("    - name: {}", yaml_quote(name)));
                line(&format!("      value: {}", yaml_quote(value)));
            }
            ApiVersion::V1beta3 => line(&format!("    {name}: {}", yaml_quote(value))),
        }
    }
    line(CONFIG_MARKER);

    if let Some(command) = provider_id_command {
        line(
            "# Provider ID: the cloud's prefix followed by the instance ID that providerIDCommand prints.",
        );
        line(&bootstrap::read_instance_id(command));
        // The prefix goes into a YAML string: escaped for YAML, then quoted for the shell.
        let prefix = shell_quote(&yaml_escape(&ctx.provider_id_prefix));
        let format = match version {
            ApiVersion::V1beta4 => "'    - name: \"provider-id\"\\n      value: \"%s%s\"\\n'",
            ApiVersion::V1beta3 => "'    provider-id: \"%s%s\"\\n'",
        };
        line(&format!(
            "printf {format} {prefix} \"$JOINERY_INSTANCE_ID\" >> {CONFIG_PATH}"
        ));
    }
    line(&format!("chmod 600 {CONFIG_PATH}"));
    line("systemctl enable kubelet.service");
    line(&format!("kubeadm join --config {CONFIG_PATH}"));
    Ok(out)
}

#[cfg(test)]
mod tests;
