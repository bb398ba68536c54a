//! What a simulated kubelet understands of an instance's userData: the bootstrap that decides
//! the Node it registers (name, labels, taints, provider ID, pod capacity).
//!
//! Four formats are understood, tried in this order:
//!
//! - **k3s agent scripts** as the `k3s` renderer writes them: the YAML between
//!   `cat > /etc/rancher/k3s/config.yaml <<'JOINERY_K3S_CONFIG'` and the line
//!   `JOINERY_K3S_CONFIG` is the agent configuration (`node-name`, `node-label`, `node-taint`,
//!   `kubelet-arg` with `provider-id=…` and `max-pods=…`). Lines after it that append to the
//!   file (`printf … >> /etc/rancher/k3s/config.yaml`, `echo … >> …`) are emulated, with
//!   shell variables assigned earlier in the script; a variable assigned from a command
//!   substitution (`ID="$(…)"`) holds the instance ID, since such commands ask the machine's
//!   metadata for it. Without a provider ID, k3s registers with `k3s://<node name>`.
//! - **RKE2 agent scripts** as the `rke2` renderer writes them: the same keys, in the
//!   here-document `cat > /etc/rancher/rke2/config.yaml <<'JOINERY_RKE2_CONFIG'`, appends
//!   emulated the same way. Without a provider ID, RKE2 registers with `rke2://<node name>`.
//! - **kubeadm join scripts** as the `kubeadm` renderer writes them: the JoinConfiguration
//!   (`kubeadm.k8s.io/v1beta4`, or `v1beta3`) in the here-document
//!   `cat > /etc/joinery/kubeadm-join.yaml <<'JOINERY_KUBEADM_CONFIG'`, appends emulated, and a
//!   later `kubeadm join --config /etc/joinery/kubeadm-join.yaml`. Like kubeadm, discovery
//!   needs a bootstrap token with `caCertHashes` (or `unsafeSkipCAVerification: true`) or a
//!   discovery file. The kubelet then runs with the flags kubeadm gives it:
//!   `--hostname-override` from `nodeRegistration.name`, `--register-with-taints` from
//!   `nodeRegistration.taints`, then `kubeletExtraArgs` (a list of `name`/`value` in v1beta4,
//!   a map in v1beta3), which win. No provider ID unless `provider-id` is among them.
//! - **a kubelet command line** anywhere in the script (also inside a here-document or a
//!   systemd unit's `ExecStart=`), the format for the verbatim `template` renderer:
//!   `--node-labels=k=v,…`, `--register-with-taints=k=v:Effect,…`, `--provider-id=…`,
//!   `--hostname-override=…`, `--max-pods=…` (also as `--flag value`). Command substitutions
//!   in it (`$(…)`, backquotes) print the instance ID; other variables are expanded from
//!   assignments earlier in the script, else to nothing.
//!
//! Anything else is not understood: the kubelet registers no Node.

use std::collections::{BTreeMap, HashMap};

use joinery_core::taints::{Taint, TaintEffect};
use serde_yaml::Value;

/// Where the kubeadm renderer writes the JoinConfiguration.
const KUBEADM_CONFIG_PATH: &str = "/etc/joinery/kubeadm-join.yaml";
/// The here-document delimiter the kubeadm renderer writes the JoinConfiguration with.
const KUBEADM_CONFIG_MARKER: &str = "JOINERY_KUBEADM_CONFIG";
/// The kubeadm configuration versions a JoinConfiguration may have.
const KUBEADM_API_VERSIONS: [&str; 2] = ["kubeadm.k8s.io/v1beta3", "kubeadm.k8s.io/v1beta4"];

/// Which bootstrap format was recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// The k3s renderer's agent script.
    K3s,
    /// The rke2 renderer's agent script.
    Rke2,
    /// The kubeadm renderer's join script.
    Kubeadm,
    /// A kubelet command line.
    KubeletFlags,
}

/// A distribution whose agent reads a `config.yaml` with k3s's keys (k3s and RKE2).
struct Agent {
    /// The format reported when its script is recognised.
    format: Format,
    /// Its name in error messages.
    name: &'static str,
    /// The configuration file.
    path: &'static str,
    /// The renderer's here-document delimiter.
    marker: &'static str,
    /// The provider ID scheme of the agent's built-in cloud provider (`<scheme>://<node name>`).
    scheme: &'static str,
}

/// The k3s agent.
const K3S: Agent = Agent {
    format: Format::K3s,
    name: "k3s",
    path: "/etc/rancher/k3s/config.yaml",
    marker: "JOINERY_K3S_CONFIG",
    scheme: "k3s",
};

/// The RKE2 agent.
const RKE2: Agent = Agent {
    format: Format::Rke2,
    name: "RKE2",
    path: "/etc/rancher/rke2/config.yaml",
    marker: "JOINERY_RKE2_CONFIG",
    scheme: "rke2",
};

/// The Node a bootstrap registers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Bootstrap {
    /// The recognised format.
    pub(crate) format: Format,
    /// The Node's name.
    pub(crate) node_name: String,
    /// Labels the node registers with.
    pub(crate) labels: BTreeMap<String, String>,
    /// Taints the node registers with.
    pub(crate) taints: Vec<Taint>,
    /// `spec.providerID`, if the bootstrap sets one.
    pub(crate) provider_id: Option<String>,
    /// The kubelet's `max-pods`, if set.
    pub(crate) max_pods: Option<u64>,
}

/// Why a bootstrap could not be run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum BootstrapError {
    /// No format was found.
    #[error(
        "the userData is neither a k3s, RKE2 or kubeadm script from the renderer of that name nor a script that runs the kubelet"
    )]
    NotUnderstood,
    /// A configuration here-document never ends (the delimiter is named).
    #[error("the configuration here-document is not closed by a `{0}` line")]
    UnterminatedConfig(&'static str),
    /// A configuration is not what its distribution expects (distribution, problem).
    #[error("the {0} configuration is not valid: {1}")]
    Config(&'static str, String),
    /// The kubeadm script writes a JoinConfiguration but never joins with it.
    #[error("the script writes {KUBEADM_CONFIG_PATH} but never runs `kubeadm join --config {KUBEADM_CONFIG_PATH}`")]
    KubeadmNotJoined,
    /// A node label is not `key=value`.
    #[error("invalid node label `{0}`: expected key=value")]
    Label(String),
    /// A taint is not `key[=value]:Effect`.
    #[error("invalid node taint `{0}`: expected key[=value]:NoSchedule|PreferNoSchedule|NoExecute")]
    Taint(String),
    /// `max-pods` is not a number.
    #[error("invalid max-pods `{0}`: expected a non-negative integer")]
    MaxPods(String),
}

/// Runs the bootstrap of instance `instance_id` (whose hostname is its ID).
pub(crate) fn parse(user_data: &str, instance_id: &str) -> Result<Bootstrap, BootstrapError> {
    for agent in [&K3S, &RKE2] {
        if let Some(result) = parse_agent(user_data, instance_id, agent) {
            return result;
        }
    }
    if let Some(result) = parse_kubeadm(user_data, instance_id) {
        return result;
    }
    if let Some(result) = parse_kubelet_flags(user_data, instance_id) {
        return result;
    }
    Err(BootstrapError::NotUnderstood)
}

/// One token of a shell line.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// A word after quote removal and expansion.
    Word(String),
    /// `;`, `&`, `|`, `&&`, `||`: the end of a simple command.
    Separator,
}

/// Just enough of a shell to read bootstrap scripts: quoting, variables, and command
/// substitutions, which print the instance ID.
struct Shell<'a> {
    variables: HashMap<String, String>,
    instance_id: &'a str,
}

impl<'a> Shell<'a> {
    fn new(instance_id: &'a str) -> Self {
        Self { variables: HashMap::new(), instance_id }
    }

    fn variable(&self, name: &str) -> String {
        self.variables.get(name).cloned().unwrap_or_default()
    }

    /// Expands a `$…` at `chars[*at]` (which is `$`) into `out`.
    fn expand(&self, chars: &[char], at: &mut usize, out: &mut String) {
        let start = *at + 1;
        match chars.get(start) {
            Some('(') => {
                // Command substitution: skip to the matching parenthesis.
                let mut depth = 0usize;
                let mut index = start;
                let mut quote: Option<char> = None;
                while index < chars.len() {
                    let c = chars[index];
                    match quote {
                        Some(q) if c == q => quote = None,
                        Some(_) => {}
                        None if c == '\'' || c == '"' => quote = Some(c),
                        None if c == '(' => depth += 1,
                        None if c == ')' => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        None => {}
                    }
                    index += 1;
                }
                out.push_str(self.instance_id);
                *at = index;
            }
            Some('{') => {
                let end = chars[start..].iter().position(|c| *c == '}').map(|p| start + p).unwrap_or(chars.len());
                let inner: String = chars[start + 1..end.min(chars.len())].iter().collect();
                let name: String = inner.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
                out.push_str(&self.variable(&name));
                *at = end;
            }
            Some(c) if c.is_ascii_alphabetic() || *c == '_' => {
                let mut end = start;
                while end < chars.len() && (chars[end].is_ascii_alphanumeric() || chars[end] == '_') {
                    end += 1;
                }
                let name: String = chars[start..end].iter().collect();
                out.push_str(&self.variable(&name));
                *at = end - 1;
            }
            _ => out.push('$'),
        }
    }

    /// Splits a line into words and separators, removing quotes and expanding variables and
    /// command substitutions. A `#` starting a word begins a comment.
    fn tokens(&self, line: &str) -> Vec<Token> {
        let chars: Vec<char> = line.chars().collect();
        let mut tokens = Vec::new();
        let mut word = String::new();
        let mut in_word = false;
        let mut index = 0;
        let finish = |word: &mut String, in_word: &mut bool, tokens: &mut Vec<Token>| {
            if *in_word {
                tokens.push(Token::Word(std::mem::take(word)));
                *in_word = false;
            }
        };
        while index < chars.len() {
            let c = chars[index];
            match c {
                ' ' | '\t' | '\r' => finish(&mut word, &mut in_word, &mut tokens),
                '#' if !in_word => break,
                ';' | '&' | '|' => {
                    finish(&mut word, &mut in_word, &mut tokens);
                    if chars.get(index + 1) == Some(&c) {
                        index += 1;
                    }
                    tokens.push(Token::Separator);
                }
                '>' | '<' => {
                    finish(&mut word, &mut in_word, &mut tokens);
                    let mut operator = c.to_string();
                    if chars.get(index + 1) == Some(&c) {
                        operator.push(c);
                        index += 1;
                    }
                    tokens.push(Token::Word(operator));
                }
                '\'' => {
                    in_word = true;
                    index += 1;
                    while index < chars.len() && chars[index] != '\'' {
                        word.push(chars[index]);
                        index += 1;
                    }
                }
                '"' => {
                    in_word = true;
                    index += 1;
                    while index < chars.len() && chars[index] != '"' {
                        match chars[index] {
                            '\\' if matches!(chars.get(index + 1), Some('"' | '\\' | '$' | '`')) => {
                                word.push(chars[index + 1]);
                                index += 1;
                            }
                            '$' => self.expand(&chars, &mut index, &mut word),
                            '`' => {
                                index += 1;
                                while index < chars.len() && chars[index] != '`' {
                                    index += 1;
                                }
                                word.push_str(self.instance_id);
                            }
                            other => word.push(other),
                        }
                        index += 1;
                    }
                }
                '\\' => {
                    in_word = true;
                    if let Some(next) = chars.get(index + 1) {
                        word.push(*next);
                        index += 1;
                    }
                }
                '$' => {
                    in_word = true;
                    self.expand(&chars, &mut index, &mut word);
                }
                '`' => {
                    in_word = true;
                    index += 1;
                    while index < chars.len() && chars[index] != '`' {
                        index += 1;
                    }
                    word.push_str(self.instance_id);
                }
                other => {
                    in_word = true;
                    word.push(other);
                }
            }
            index += 1;
        }
        finish(&mut word, &mut in_word, &mut tokens);
        tokens
    }

    /// The simple commands of a line (each a list of words).
    fn commands(&self, line: &str) -> Vec<Vec<String>> {
        let mut commands = vec![Vec::new()];
        for token in self.tokens(line) {
            match token {
                Token::Word(word) => commands.last_mut().expect("never empty").push(word),
                Token::Separator => commands.push(Vec::new()),
            }
        }
        commands.retain(|c| !c.is_empty());
        commands
    }

    /// Records `NAME=value` (or `export NAME=value …`) assignments; returns whether the
    /// command was only assignments.
    fn assign(&mut self, command: &[String]) -> bool {
        let words = match command.first().map(String::as_str) {
            Some("export" | "readonly" | "local") => &command[1..],
            _ => command,
        };
        if words.is_empty() || !words.iter().all(|w| assignment(w).is_some()) {
            return false;
        }
        for word in words {
            if let Some((name, value)) = assignment(word) {
                self.variables.insert(name.to_string(), value.to_string());
            }
        }
        true
    }
}

/// `NAME=value` split, if the word is an assignment.
fn assignment(word: &str) -> Option<(&str, &str)> {
    let (name, value) = word.split_once('=')?;
    let valid = name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid.then_some((name, value))
}

/// Joins lines continued with a trailing backslash.
fn logical_lines(script: &str) -> Vec<String> {
    script.replace("\\\r\n", " ").replace("\\\n", " ").lines().map(String::from).collect()
}

/// POSIX `printf` with `%s`, `%d`, `%%` and the common backslash escapes; the format is
/// reused while arguments remain.
fn printf(format: &str, arguments: &[String]) -> String {
    let mut out = String::new();
    let mut remaining = arguments.iter();
    loop {
        let mut consumed = false;
        let mut chars = format.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some('\\') => out.push('\\'),
                    Some('"') => out.push('"'),
                    Some(other) => {
                        out.push('\\');
                        out.push(other);
                    }
                    None => out.push('\\'),
                },
                '%' => match chars.next() {
                    Some('%') => out.push('%'),
                    Some('s' | 'd') => {
                        consumed = true;
                        out.push_str(remaining.next().map(String::as_str).unwrap_or_default());
                    }
                    Some(other) => {
                        out.push('%');
                        out.push(other);
                    }
                    None => out.push('%'),
                },
                other => out.push(other),
            }
        }
        if !consumed || remaining.len() == 0 {
            return out;
        }
    }
}

/// The file a script writes with the quoted here-document `cat > PATH <<'MARKER'`, plus what
/// later lines append to it (`printf … >> PATH`, `echo … >> PATH`, emulated with the
/// script's variables), and the index of the delimiter line; `None` without such a
/// here-document.
fn written_file(
    lines: &[String],
    path: &str,
    marker: &'static str,
    instance_id: &str,
) -> Option<Result<(String, usize), BootstrapError>> {
    let start_line = format!("cat > {path} <<'{marker}'");
    let start = lines.iter().position(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") == start_line)?;
    let Some(length) = lines[start + 1..].iter().position(|l| l.trim_end() == marker) else {
        return Some(Err(BootstrapError::UnterminatedConfig(marker)));
    };
    let end = start + 1 + length;
    let mut file: String = lines[start + 1..end].iter().map(|l| format!("{l}\n")).collect();
    // Emulate the rest of the script that touches the file (the provider-ID step).
    let mut shell = Shell::new(instance_id);
    for line in lines[..start].iter().chain(&lines[end + 1..]) {
        for command in shell.commands(line) {
            if shell.assign(&command) {
                continue;
            }
            let Some(redirect) = command.iter().position(|w| w == ">>") else { continue };
            if command.get(redirect + 1).map(String::as_str) != Some(path) {
                continue;
            }
            let arguments = &command[1..redirect];
            match command[0].as_str() {
                "printf" if !arguments.is_empty() => file.push_str(&printf(&arguments[0], &arguments[1..])),
                "echo" => {
                    file.push_str(&arguments.join(" "));
                    file.push('\n');
                }
                _ => {}
            }
        }
    }
    Some(Ok((file, end)))
}

/// The k3s or RKE2 renderer's agent script, if this is one.
fn parse_agent(script: &str, instance_id: &str, agent: &Agent) -> Option<Result<Bootstrap, BootstrapError>> {
    let lines = logical_lines(script);
    let written = written_file(&lines, agent.path, agent.marker, instance_id)?;
    Some(written.and_then(|(config, _)| agent_config(&config, instance_id, agent)))
}

/// An agent configuration value that may be a string or a list of strings.
fn strings(value: Option<&Value>, agent: &Agent) -> Result<Vec<String>, BootstrapError> {
    let invalid = |problem: String| BootstrapError::Config(agent.name, problem);
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Sequence(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.clone()),
                other => Err(invalid(format!("expected strings, found {other:?}"))),
            })
            .collect(),
        Some(other) => Err(invalid(format!("expected a string or a list, found {other:?}"))),
    }
}

fn agent_config(config: &str, instance_id: &str, agent: &Agent) -> Result<Bootstrap, BootstrapError> {
    let invalid = |problem: String| BootstrapError::Config(agent.name, problem);
    let document: Value = serde_yaml::from_str(config).map_err(|e| invalid(e.to_string()))?;
    let map = match &document {
        Value::Mapping(map) => map.clone(),
        Value::Null => Default::default(),
        _ => return Err(invalid("the configuration is not a YAML mapping".into())),
    };
    let field = |name: &str| map.get(Value::String(name.to_string()));
    let node_name = match field("node-name") {
        Some(Value::String(name)) if !name.trim().is_empty() => name.trim().to_string(),
        _ => instance_id.to_string(),
    };
    let mut labels = BTreeMap::new();
    for label in strings(field("node-label"), agent)? {
        let (key, value) = parse_label(&label)?;
        labels.insert(key, value);
    }
    let taints = strings(field("node-taint"), agent)?.iter().map(|t| parse_taint(t)).collect::<Result<Vec<_>, _>>()?;
    let mut provider_id = None;
    let mut max_pods = None;
    for argument in strings(field("kubelet-arg"), agent)? {
        let argument = argument.trim_start_matches('-');
        match argument.split_once('=') {
            Some(("provider-id", value)) => provider_id = Some(value.to_string()),
            Some(("max-pods", value)) => max_pods = Some(parse_max_pods(value)?),
            _ => {}
        }
    }
    let provider_id = provider_id.filter(|p| !p.is_empty()).unwrap_or_else(|| format!("{}://{node_name}", agent.scheme));
    Ok(Bootstrap { format: agent.format, node_name, labels, taints, provider_id: Some(provider_id), max_pods })
}

/// The kubeadm renderer's join script, if this is one.
fn parse_kubeadm(script: &str, instance_id: &str) -> Option<Result<Bootstrap, BootstrapError>> {
    let lines = logical_lines(script);
    let (config, end) = match written_file(&lines, KUBEADM_CONFIG_PATH, KUBEADM_CONFIG_MARKER, instance_id)? {
        Ok(written) => written,
        Err(error) => return Some(Err(error)),
    };
    if !runs_kubeadm_join(&lines[end + 1..], instance_id) {
        return Some(Err(BootstrapError::KubeadmNotJoined));
    }
    Some(kubeadm_config(&config, instance_id))
}

/// Whether a command in `lines` runs `kubeadm join … --config <the renderer's file>` (also
/// behind `sudo`, `exec`, `env` or variable assignments).
fn runs_kubeadm_join(lines: &[String], instance_id: &str) -> bool {
    let shell = Shell::new(instance_id);
    lines.iter().flat_map(|line| shell.commands(line)).any(|command| {
        let program = command
            .iter()
            .position(|w| !matches!(w.as_str(), "sudo" | "exec" | "env" | "nohup") && assignment(w).is_none());
        let Some(at) = program.filter(|at| command[*at].rsplit('/').next() == Some("kubeadm")) else {
            return false;
        };
        let arguments = &command[at + 1..];
        arguments.first().map(String::as_str) == Some("join")
            && arguments.iter().enumerate().any(|(i, word)| {
                word.strip_prefix("--config=") == Some(KUBEADM_CONFIG_PATH)
                    || (word == "--config" && arguments.get(i + 1).map(String::as_str) == Some(KUBEADM_CONFIG_PATH))
            })
    })
}

/// The string at `path` (mapping keys) in a YAML document, if it is one.
fn yaml_string<'a>(document: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(document, |value, key| value.get(*key))?.as_str()
}

/// Runs kubeadm's part of a join: checks the JoinConfiguration the way kubeadm would, then
/// builds the kubelet's flags the way kubeadm does and reads them like a kubelet.
fn kubeadm_config(config: &str, instance_id: &str) -> Result<Bootstrap, BootstrapError> {
    let invalid = |problem: String| BootstrapError::Config("kubeadm", problem);
    let document: Value = serde_yaml::from_str(config).map_err(|e| invalid(e.to_string()))?;
    let api_version = yaml_string(&document, &["apiVersion"]).unwrap_or_default();
    if !KUBEADM_API_VERSIONS.contains(&api_version) {
        return Err(invalid(format!("apiVersion `{api_version}` is not one of {}", KUBEADM_API_VERSIONS.join(", "))));
    }
    if yaml_string(&document, &["kind"]) != Some("JoinConfiguration") {
        return Err(invalid("kind is not JoinConfiguration".into()));
    }
    let discovery = document.get("discovery").cloned().unwrap_or(Value::Null);
    if let Some(token) = discovery.get("bootstrapToken") {
        if yaml_string(token, &["token"]).is_none_or(|t| t.trim().is_empty()) {
            return Err(invalid("discovery.bootstrapToken has no token".into()));
        }
        let pinned = token.get("caCertHashes").and_then(Value::as_sequence).is_some_and(|h| !h.is_empty());
        let unsafe_skip = token.get("unsafeSkipCAVerification").and_then(Value::as_bool) == Some(true);
        if !pinned && !unsafe_skip {
            return Err(invalid(
                "discovery.bootstrapToken has neither caCertHashes nor unsafeSkipCAVerification: true".into(),
            ));
        }
    } else if yaml_string(&discovery, &["file", "kubeConfigPath"]).is_none() {
        return Err(invalid("discovery has neither bootstrapToken nor file".into()));
    }
    let registration = document.get("nodeRegistration").cloned().unwrap_or(Value::Null);

    // The flags kubeadm writes for the kubelet, then the extra arguments, which override them.
    let mut flags = Vec::new();
    if let Some(name) = yaml_string(&registration, &["name"]).map(str::trim).filter(|n| !n.is_empty()) {
        flags.push(format!("--hostname-override={name}"));
    }
    if let Some(taints) = registration.get("taints").and_then(Value::as_sequence).filter(|t| !t.is_empty()) {
        let specs: Vec<String> = taints
            .iter()
            .map(|taint| {
                let key = yaml_string(taint, &["key"]).unwrap_or_default();
                let effect = yaml_string(taint, &["effect"]).unwrap_or_default();
                match yaml_string(taint, &["value"]).filter(|v| !v.is_empty()) {
                    Some(value) => format!("{key}={value}:{effect}"),
                    None => format!("{key}:{effect}"),
                }
            })
            .collect();
        flags.push(format!("--register-with-taints={}", specs.join(",")));
    }
    let extra = registration.get("kubeletExtraArgs").cloned().unwrap_or(Value::Null);
    let v1beta4 = api_version.ends_with("v1beta4");
    match (&extra, v1beta4) {
        (Value::Null, _) => {}
        (Value::Sequence(items), true) => {
            for item in items {
                match (yaml_string(item, &["name"]), item.get("value")) {
                    (Some(name), Some(Value::String(value))) => flags.push(format!("--{name}={value}")),
                    _ => return Err(invalid(format!("kubeletExtraArgs item {item:?} is not a name and a string value"))),
                }
            }
        }
        (Value::Mapping(map), false) => {
            for (name, value) in map {
                match (name, value) {
                    (Value::String(name), Value::String(value)) => flags.push(format!("--{name}={value}")),
                    _ => return Err(invalid(format!("kubeletExtraArgs entry {name:?} is not a string value"))),
                }
            }
        }
        _ if v1beta4 => return Err(invalid("kubeletExtraArgs must be a list of name/value in v1beta4".into())),
        _ => return Err(invalid("kubeletExtraArgs must be a map of strings in v1beta3".into())),
    }
    let mut bootstrap = kubelet_flags(&flags, instance_id)?;
    bootstrap.format = Format::Kubeadm;
    Ok(bootstrap)
}

fn parse_label(label: &str) -> Result<(String, String), BootstrapError> {
    match label.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => Ok((key.trim().to_string(), value.trim().to_string())),
        _ => Err(BootstrapError::Label(label.to_string())),
    }
}

fn parse_taint(taint: &str) -> Result<Taint, BootstrapError> {
    let invalid = || BootstrapError::Taint(taint.to_string());
    let (rest, effect) = taint.trim().rsplit_once(':').ok_or_else(invalid)?;
    let effect = match effect {
        "NoSchedule" => TaintEffect::NoSchedule,
        "PreferNoSchedule" => TaintEffect::PreferNoSchedule,
        "NoExecute" => TaintEffect::NoExecute,
        _ => return Err(invalid()),
    };
    let (key, value) = rest.split_once('=').unwrap_or((rest, ""));
    if key.is_empty() {
        return Err(invalid());
    }
    Ok(Taint::new(key, value, effect))
}

fn parse_max_pods(value: &str) -> Result<u64, BootstrapError> {
    value.trim().parse().map_err(|_| BootstrapError::MaxPods(value.to_string()))
}

/// Flags of the kubelet that take a value (so `--flag value` can be read).
const VALUE_FLAGS: [&str; 5] = ["node-labels", "register-with-taints", "provider-id", "hostname-override", "max-pods"];

/// Whether `word` runs the kubelet: its last path component is `kubelet` (also after a
/// systemd `ExecStart=`).
fn is_kubelet(word: &str) -> bool {
    word.rsplit(['/', '=']).next() == Some("kubelet")
}

/// The first kubelet command line in the script, if any.
fn parse_kubelet_flags(script: &str, instance_id: &str) -> Option<Result<Bootstrap, BootstrapError>> {
    let mut shell = Shell::new(instance_id);
    for line in logical_lines(script) {
        for command in shell.commands(&line) {
            if !command.iter().any(|w| is_kubelet(w)) {
                shell.assign(&command);
                continue;
            }
            // Skip what may precede the program: list dashes, wrappers, environment settings.
            let program = command.iter().position(|w| {
                !matches!(w.as_str(), "-" | "exec" | "sudo" | "nohup" | "env") && (is_kubelet(w) || assignment(w).is_none())
            });
            match program {
                Some(at) if is_kubelet(&command[at]) => return Some(kubelet_flags(&command[at + 1..], instance_id)),
                _ => {
                    shell.assign(&command);
                }
            }
        }
    }
    None
}

fn kubelet_flags(arguments: &[String], instance_id: &str) -> Result<Bootstrap, BootstrapError> {
    let mut flags: HashMap<&str, String> = HashMap::new();
    let mut index = 0;
    while index < arguments.len() {
        if let Some(flag) = arguments[index].strip_prefix("--") {
            match flag.split_once('=') {
                Some((name, value)) => {
                    flags.insert(name, value.to_string());
                }
                None if VALUE_FLAGS.contains(&flag) => {
                    if let Some(value) = arguments.get(index + 1).filter(|v| !v.starts_with("--")) {
                        flags.insert(flag, value.clone());
                        index += 1;
                    }
                }
                None => {}
            }
        }
        index += 1;
    }
    let mut labels = BTreeMap::new();
    for label in flags.get("node-labels").into_iter().flat_map(|l| l.split(',')).filter(|l| !l.trim().is_empty()) {
        let (key, value) = parse_label(label)?;
        labels.insert(key, value);
    }
    let taints = flags
        .get("register-with-taints")
        .into_iter()
        .flat_map(|t| t.split(','))
        .filter(|t| !t.trim().is_empty())
        .map(parse_taint)
        .collect::<Result<Vec<_>, _>>()?;
    let node_name = flags
        .get("hostname-override")
        .map(|h| h.trim().to_lowercase())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| instance_id.to_string());
    let max_pods = flags.get("max-pods").map(|v| parse_max_pods(v)).transpose()?;
    let provider_id = flags.get("provider-id").filter(|p| !p.is_empty()).cloned();
    Ok(Bootstrap { format: Format::KubeletFlags, node_name, labels, taints, provider_id, max_pods })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The k3s renderer's output for a NodeClaim with a provider-ID command (format copied from
    /// the renderer's documented, stable output).
    const K3S_SCRIPT: &str = r#"#!/bin/sh
# Joinery: join NodeClaim default-abc12 (NodePool default) to k3s as an agent. Generated, do not edit.
set -eu
umask 077
mkdir -p /etc/rancher/k3s
cat > /etc/rancher/k3s/config.yaml <<'JOINERY_K3S_CONFIG'
server: "https://10.0.0.1:6443"
token: "K10secret::server:abc"
node-name: "default-abc12"
node-label:
  - "karpenter.sh/nodepool=default"
  - "q=it's \"x\""
node-taint:
  - "dedicated=gpu:NoSchedule"
  - "karpenter.sh/unregistered:NoExecute"
kubelet-arg:
  - "max-pods=58"
JOINERY_K3S_CONFIG
# The kubelet registers with provider ID <prefix><instance id>.
JOINERY_INSTANCE_ID="$(sh -c 'curl -s http://169.254.169.254/latest/meta-data/instance-id' | tr -d '[:space:]')"
case "$JOINERY_INSTANCE_ID" in
  ''|*[!A-Za-z0-9._:/-]*)
    echo "joinery: providerIDCommand printed no usable instance ID: '$JOINERY_INSTANCE_ID'" >&2
    exit 1 ;;
esac
printf '  - "provider-id=%s%s"\n' 'simcloud://' "$JOINERY_INSTANCE_ID" >> /etc/rancher/k3s/config.yaml
chmod 600 /etc/rancher/k3s/config.yaml
JOINERY_INSTALLER="$(mktemp)"
if command -v curl >/dev/null 2>&1; then
  curl -sfL 'https://get.k3s.io' -o "$JOINERY_INSTALLER"
else
  wget -qO "$JOINERY_INSTALLER" 'https://get.k3s.io'
fi
sh "$JOINERY_INSTALLER" agent
"#;

    #[test]
    fn k3s_script_with_the_provider_id_step() {
        let bootstrap = parse(K3S_SCRIPT, "i-0000002a").unwrap();
        assert_eq!(bootstrap.format, Format::K3s);
        assert_eq!(bootstrap.node_name, "default-abc12");
        assert_eq!(bootstrap.provider_id.as_deref(), Some("simcloud://i-0000002a"));
        assert_eq!(bootstrap.max_pods, Some(58));
        assert_eq!(bootstrap.labels["karpenter.sh/nodepool"], "default");
        assert_eq!(bootstrap.labels["q"], "it's \"x\"");
        assert_eq!(
            bootstrap.taints,
            vec![
                Taint::new("dedicated", "gpu", TaintEffect::NoSchedule),
                Taint::without_value("karpenter.sh/unregistered", TaintEffect::NoExecute)
            ]
        );
    }

    #[test]
    fn k3s_without_a_provider_id_registers_with_the_k3s_scheme() {
        let script = K3S_SCRIPT.replace("printf '  - \"provider-id", "# printf '  - \"provider-id");
        let bootstrap = parse(&script, "i-1").unwrap();
        assert_eq!(bootstrap.provider_id.as_deref(), Some("k3s://default-abc12"));
        let unnamed = script.replace("node-name: \"default-abc12\"\n", "");
        assert_eq!(parse(&unnamed, "i-1").unwrap().node_name, "i-1");
    }

    #[test]
    fn k3s_errors_are_reported() {
        let unterminated = K3S_SCRIPT.replace("JOINERY_K3S_CONFIG\n#", "#");
        assert_eq!(parse(&unterminated, "i-1"), Err(BootstrapError::UnterminatedConfig("JOINERY_K3S_CONFIG")));
        let bad_taint = K3S_SCRIPT.replace("dedicated=gpu:NoSchedule", "dedicated=gpu:Sometimes");
        assert!(matches!(parse(&bad_taint, "i-1"), Err(BootstrapError::Taint(_))));
    }

    /// The rke2 renderer's output (`joinery render`, copied verbatim) for a NodeClaim with a
    /// provider-ID command on the simulated cloud.
    const RKE2_SCRIPT: &str = r#"#!/bin/sh
# Joinery: join NodeClaim default-abc12 (NodePool default) to RKE2 as an agent. Generated, do not edit.
set -eu
umask 077
mkdir -p /etc/rancher/rke2
cat > /etc/rancher/rke2/config.yaml <<'JOINERY_RKE2_CONFIG'
server: "https://10.0.0.1:9345"
token: "K10secret::server:abc"
node-name: "default-abc12"
node-label:
  - "karpenter.sh/nodepool=default"
  - "q=it's \"x\""
node-taint:
  - "dedicated=gpu:NoSchedule"
  - "karpenter.sh/unregistered:NoExecute"
kubelet-arg:
  - "max-pods=58"
JOINERY_RKE2_CONFIG
# Provider ID: the cloud's prefix followed by the instance ID that providerIDCommand prints.
JOINERY_INSTANCE_ID="$(sh -c 'cat /var/lib/simcloud/instance-id' | tr -d '[:space:]')"
case "$JOINERY_INSTANCE_ID" in
  ''|*[!A-Za-z0-9._:/-]*)
    echo "joinery: providerIDCommand printed no usable instance ID: '$JOINERY_INSTANCE_ID'" >&2
    exit 1 ;;
esac
printf '  - "provider-id=%s%s"\n' 'simcloud://' "$JOINERY_INSTANCE_ID" >> /etc/rancher/rke2/config.yaml
chmod 600 /etc/rancher/rke2/config.yaml
JOINERY_INSTALLER="$(mktemp)"
if command -v curl >/dev/null 2>&1; then
  curl -sfL 'https://get.rke2.io' -o "$JOINERY_INSTALLER"
else
  wget -qO "$JOINERY_INSTALLER" 'https://get.rke2.io'
fi
INSTALL_RKE2_TYPE=agent sh "$JOINERY_INSTALLER"
rm -f "$JOINERY_INSTALLER"
systemctl enable --now rke2-agent.service
"#;

    /// The kubeadm renderer's output (`joinery render`, copied verbatim), v1beta4.
    const KUBEADM_SCRIPT: &str = r#"#!/bin/sh
# Joinery: join NodeClaim default-abc12 (NodePool default) with kubeadm. Generated, do not edit.
set -eu
umask 077
mkdir -p /etc/joinery
cat > /etc/joinery/kubeadm-join.yaml <<'JOINERY_KUBEADM_CONFIG'
apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: "10.0.0.1:6443"
    token: "abcdef.0123456789abcdef"
    caCertHashes:
      - "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
nodeRegistration:
  name: "default-abc12"
  kubeletExtraArgs:
    - name: "node-labels"
      value: "karpenter.sh/nodepool=default,q=it's \"x\""
    - name: "register-with-taints"
      value: "dedicated=gpu:NoSchedule,karpenter.sh/unregistered:NoExecute"
    - name: "max-pods"
      value: "58"
JOINERY_KUBEADM_CONFIG
# Provider ID: the cloud's prefix followed by the instance ID that providerIDCommand prints.
JOINERY_INSTANCE_ID="$(sh -c 'cat /var/lib/simcloud/instance-id' | tr -d '[:space:]')"
case "$JOINERY_INSTANCE_ID" in
  ''|*[!A-Za-z0-9._:/-]*)
    echo "joinery: providerIDCommand printed no usable instance ID: '$JOINERY_INSTANCE_ID'" >&2
    exit 1 ;;
esac
printf '    - name: "provider-id"\n      value: "%s%s"\n' 'simcloud://' "$JOINERY_INSTANCE_ID" >> /etc/joinery/kubeadm-join.yaml
chmod 600 /etc/joinery/kubeadm-join.yaml
systemctl enable kubelet.service
kubeadm join --config /etc/joinery/kubeadm-join.yaml
"#;

    /// The kubeadm renderer's output with `configAPIVersion: v1beta3` (copied verbatim).
    const KUBEADM_V1BETA3_SCRIPT: &str = r#"#!/bin/sh
# Joinery: join NodeClaim default-abc12 (NodePool default) with kubeadm. Generated, do not edit.
set -eu
umask 077
mkdir -p /etc/joinery
cat > /etc/joinery/kubeadm-join.yaml <<'JOINERY_KUBEADM_CONFIG'
apiVersion: kubeadm.k8s.io/v1beta3
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: "10.0.0.1:6443"
    token: "abcdef.0123456789abcdef"
    caCertHashes:
      - "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
nodeRegistration:
  name: "default-abc12"
  kubeletExtraArgs:
    node-labels: "karpenter.sh/nodepool=default,q=it's \"x\""
    register-with-taints: "dedicated=gpu:NoSchedule,karpenter.sh/unregistered:NoExecute"
    max-pods: "58"
JOINERY_KUBEADM_CONFIG
# Provider ID: the cloud's prefix followed by the instance ID that providerIDCommand prints.
JOINERY_INSTANCE_ID="$(sh -c 'cat /var/lib/simcloud/instance-id' | tr -d '[:space:]')"
case "$JOINERY_INSTANCE_ID" in
  ''|*[!A-Za-z0-9._:/-]*)
    echo "joinery: providerIDCommand printed no usable instance ID: '$JOINERY_INSTANCE_ID'" >&2
    exit 1 ;;
esac
printf '    provider-id: "%s%s"\n' 'simcloud://' "$JOINERY_INSTANCE_ID" >> /etc/joinery/kubeadm-join.yaml
chmod 600 /etc/joinery/kubeadm-join.yaml
systemctl enable kubelet.service
kubeadm join --config /etc/joinery/kubeadm-join.yaml
"#;

    fn expected_taints() -> Vec<Taint> {
        vec![
            Taint::new("dedicated", "gpu", TaintEffect::NoSchedule),
            Taint::without_value("karpenter.sh/unregistered", TaintEffect::NoExecute),
        ]
    }

    #[test]
    fn rke2_script_with_the_provider_id_step() {
        let bootstrap = parse(RKE2_SCRIPT, "i-0000002a").unwrap();
        assert_eq!(bootstrap.format, Format::Rke2);
        assert_eq!(bootstrap.node_name, "default-abc12");
        assert_eq!(bootstrap.provider_id.as_deref(), Some("simcloud://i-0000002a"));
        assert_eq!(bootstrap.max_pods, Some(58));
        assert_eq!(bootstrap.labels["karpenter.sh/nodepool"], "default");
        assert_eq!(bootstrap.labels["q"], "it's \"x\"");
        assert_eq!(bootstrap.taints, expected_taints());
    }

    #[test]
    fn rke2_without_a_provider_id_registers_with_the_rke2_scheme() {
        let script = RKE2_SCRIPT.replace("printf '  - \"provider-id", "# printf '  - \"provider-id");
        let bootstrap = parse(&script, "i-1").unwrap();
        assert_eq!(bootstrap.provider_id.as_deref(), Some("rke2://default-abc12"));
        assert_eq!(bootstrap.max_pods, Some(58));
    }

    #[test]
    fn rke2_errors_are_reported() {
        let unterminated = RKE2_SCRIPT.replace("JOINERY_RKE2_CONFIG\n#", "#");
        assert_eq!(parse(&unterminated, "i-1"), Err(BootstrapError::UnterminatedConfig("JOINERY_RKE2_CONFIG")));
        let bad_label = RKE2_SCRIPT.replace("\"karpenter.sh/nodepool=default\"", "\"karpenter.sh/nodepool\"");
        assert!(matches!(parse(&bad_label, "i-1"), Err(BootstrapError::Label(_))));
        let not_yaml = RKE2_SCRIPT.replace("node-taint:\n", "node-taint: [\n");
        assert!(matches!(parse(&not_yaml, "i-1"), Err(BootstrapError::Config("RKE2", _))));
    }

    #[test]
    fn kubeadm_script_with_the_provider_id_step() {
        for script in [KUBEADM_SCRIPT, KUBEADM_V1BETA3_SCRIPT] {
            let bootstrap = parse(script, "i-0000002a").unwrap();
            assert_eq!(bootstrap.format, Format::Kubeadm);
            assert_eq!(bootstrap.node_name, "default-abc12");
            assert_eq!(bootstrap.provider_id.as_deref(), Some("simcloud://i-0000002a"));
            assert_eq!(bootstrap.max_pods, Some(58));
            assert_eq!(bootstrap.labels.len(), 2);
            assert_eq!(bootstrap.labels["q"], "it's \"x\"");
            assert_eq!(bootstrap.taints, expected_taints());
        }
    }

    #[test]
    fn kubeadm_flags_the_way_kubeadm_builds_them() {
        // Without the provider-ID step: no provider ID (no cloud controller in the picture).
        let script = KUBEADM_SCRIPT.replace("printf '    - name", "# printf '    - name");
        assert_eq!(parse(&script, "i-1").unwrap().provider_id, None);
        // Without nodeRegistration.name the node is named after the machine.
        let unnamed = KUBEADM_SCRIPT.replace("  name: \"default-abc12\"\n", "");
        assert_eq!(parse(&unnamed, "i-1").unwrap().node_name, "i-1");
        // nodeRegistration.taints count when kubeletExtraArgs has no register-with-taints.
        let taint_arg =
            "    - name: \"register-with-taints\"\n      value: \"dedicated=gpu:NoSchedule,karpenter.sh/unregistered:NoExecute\"\n";
        let structured = KUBEADM_SCRIPT.replace(taint_arg, "");
        let structured = structured.replace(
            "  kubeletExtraArgs:\n",
            "  taints:\n    - {key: dedicated, value: gpu, effect: NoSchedule}\n    \
             - {key: karpenter.sh/unregistered, effect: NoExecute}\n  kubeletExtraArgs:\n",
        );
        assert_eq!(parse(&structured, "i-1").unwrap().taints, expected_taints());
    }

    #[test]
    fn kubeadm_refuses_what_kubeadm_refuses() {
        let config_error = |script: &str| matches!(parse(script, "i-1"), Err(BootstrapError::Config("kubeadm", _)));
        let never_joins = KUBEADM_SCRIPT.replace("kubeadm join --config", "echo kubeadm join --config");
        assert_eq!(parse(&never_joins, "i-1"), Err(BootstrapError::KubeadmNotJoined));
        let other_file = KUBEADM_SCRIPT.replace("join --config /etc/joinery/kubeadm-join.yaml", "join --config /tmp/x.yaml");
        assert_eq!(parse(&other_file, "i-1"), Err(BootstrapError::KubeadmNotJoined));
        let equals = KUBEADM_SCRIPT.replace("join --config /etc", "join --config=/etc");
        assert!(parse(&equals, "i-1").is_ok());
        let hashes = "    caCertHashes:\n      - \"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\"\n";
        let unpinned = KUBEADM_SCRIPT.replace(hashes, "");
        assert!(config_error(&unpinned), "token discovery without a CA hash");
        let skipped = unpinned.replace("    token:", "    unsafeSkipCAVerification: true\n    token:");
        assert!(parse(&skipped, "i-1").is_ok());
        assert!(config_error(&KUBEADM_SCRIPT.replace("kubeadm.k8s.io/v1beta4", "kubeadm.k8s.io/v1beta2")));
        assert!(config_error(&KUBEADM_SCRIPT.replace("kind: JoinConfiguration", "kind: InitConfiguration")));
        // The extra arguments' shape must match the version.
        assert!(config_error(&KUBEADM_SCRIPT.replace("kubeadm.k8s.io/v1beta4", "kubeadm.k8s.io/v1beta3")));
        assert!(config_error(&KUBEADM_V1BETA3_SCRIPT.replace("kubeadm.k8s.io/v1beta3", "kubeadm.k8s.io/v1beta4")));
        let unterminated = KUBEADM_SCRIPT.replace("JOINERY_KUBEADM_CONFIG\n#", "#");
        assert_eq!(parse(&unterminated, "i-1"), Err(BootstrapError::UnterminatedConfig("JOINERY_KUBEADM_CONFIG")));
    }

    #[test]
    fn a_script_for_another_path_is_not_understood() {
        let elsewhere = RKE2_SCRIPT.replace("/etc/rancher/rke2/config.yaml <<", "/etc/rancher/other/config.yaml <<");
        assert_eq!(parse(&elsewhere, "i-1"), Err(BootstrapError::NotUnderstood));
    }

    #[test]
    fn kubelet_command_lines() {
        let script = "#!/bin/bash\nset -e\nINSTANCE=\"$(curl -s http://169.254.169.254/id)\"\n\
            /usr/bin/kubelet --kubeconfig=/etc/kubernetes/kubelet.conf \\\n  --node-labels=karpenter.sh/nodepool=default,team=a \\\n  \
            --register-with-taints=karpenter.sh/unregistered:NoExecute,gpu=true:NoSchedule \\\n  \
            --provider-id=simcloud://$INSTANCE --hostname-override My-Node --max-pods=20 &\n";
        let bootstrap = parse(script, "i-7").unwrap();
        assert_eq!(bootstrap.format, Format::KubeletFlags);
        assert_eq!(bootstrap.node_name, "my-node");
        assert_eq!(bootstrap.provider_id.as_deref(), Some("simcloud://i-7"));
        assert_eq!(bootstrap.max_pods, Some(20));
        assert_eq!(bootstrap.labels.len(), 2);
        assert_eq!(bootstrap.taints.len(), 2);

        let unit = "write_files:\n- path: /etc/systemd/system/kubelet.service\n  content: |\n    [Service]\n    \
            ExecStart=/usr/bin/kubelet --provider-id=simcloud://$(cat /run/instance-id) --node-labels=a=b\n";
        let bootstrap = parse(unit, "i-8").unwrap();
        assert_eq!((bootstrap.node_name.as_str(), bootstrap.provider_id.as_deref()), ("i-8", Some("simcloud://i-8")));
    }

    #[test]
    fn other_scripts_are_not_understood() {
        assert_eq!(parse("#!/bin/sh\necho hello\nsystemctl restart kubelet\n", "i-1"), Err(BootstrapError::NotUnderstood));
        assert_eq!(parse("", "i-1"), Err(BootstrapError::NotUnderstood));
    }

    #[test]
    fn printf_reuses_the_format_and_expands_escapes() {
        assert_eq!(printf("%s=%s\\n", &["a".into(), "1".into(), "b".into(), "2".into()]), "a=1\nb=2\n");
        assert_eq!(printf("100%%\\t", &[]), "100%\t");
    }
}
