//! What a simulated kubelet understands of an instance's userData: the bootstrap that decides
//! the Node it registers (name, labels, taints, provider ID, pod capacity).
//!
//! Two formats are understood:
//!
//! - **k3s agent scripts** as the `k3s` renderer writes them: the YAML between
//!   `cat > /etc/rancher/k3s/config.yaml <<'JOINERY_K3S_CONFIG'` and the line
//!   `JOINERY_K3S_CONFIG` is the agent configuration (`node-name`, `node-label`, `node-taint`,
//!   `kubelet-arg` with `provider-id=…` and `max-pods=…`). Lines after it that append to the
//!   file (`printf … >> /etc/rancher/k3s/config.yaml`, `echo … >> …`) are emulated, with
//!   shell variables assigned earlier in the script; a variable assigned from a command
//!   substitution (`ID="$(…)"`) holds the instance ID, since such commands ask the machine's
//!   metadata for it. Without a provider ID, k3s registers with `k3s://<node name>`.
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

/// Where the k3s agent reads its configuration.
const K3S_CONFIG_PATH: &str = "/etc/rancher/k3s/config.yaml";
/// The here-document delimiter the k3s renderer writes the configuration with.
const K3S_CONFIG_MARKER: &str = "JOINERY_K3S_CONFIG";

/// Which bootstrap format was recognised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// The k3s renderer's agent script.
    K3s,
    /// A kubelet command line.
    KubeletFlags,
}

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
    /// Neither format was found.
    #[error("the userData is neither a k3s agent script from the k3s renderer nor a script that runs the kubelet")]
    NotUnderstood,
    /// The k3s configuration here-document never ends.
    #[error("the k3s configuration here-document is not closed by a `{K3S_CONFIG_MARKER}` line")]
    UnterminatedK3sConfig,
    /// The k3s configuration is not the expected YAML.
    #[error("the k3s configuration is not valid: {0}")]
    K3sConfig(String),
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
    if let Some(result) = parse_k3s(user_data, instance_id) {
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

/// The k3s renderer's agent script, if this is one.
fn parse_k3s(script: &str, instance_id: &str) -> Option<Result<Bootstrap, BootstrapError>> {
    let lines = logical_lines(script);
    let start_line = format!("cat > {K3S_CONFIG_PATH} <<'{K3S_CONFIG_MARKER}'");
    let start = lines.iter().position(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") == start_line)?;
    let Some(length) = lines[start + 1..].iter().position(|l| l.trim_end() == K3S_CONFIG_MARKER) else {
        return Some(Err(BootstrapError::UnterminatedK3sConfig));
    };
    let end = start + 1 + length;
    let mut config: String = lines[start + 1..end].iter().map(|l| format!("{l}\n")).collect();
    // Emulate the rest of the script that touches the configuration (the provider-ID step).
    let mut shell = Shell::new(instance_id);
    for line in lines[..start].iter().chain(&lines[end + 1..]) {
        for command in shell.commands(line) {
            if shell.assign(&command) {
                continue;
            }
            let Some(redirect) = command.iter().position(|w| w == ">>") else { continue };
            if command.get(redirect + 1).map(String::as_str) != Some(K3S_CONFIG_PATH) {
                continue;
            }
            let arguments = &command[1..redirect];
            match command[0].as_str() {
                "printf" if !arguments.is_empty() => config.push_str(&printf(&arguments[0], &arguments[1..])),
                "echo" => {
                    config.push_str(&arguments.join(" "));
                    config.push('\n');
                }
                _ => {}
            }
        }
    }
    Some(k3s_config(&config, instance_id))
}

/// A k3s configuration value that may be a string or a list of strings.
fn strings(value: Option<&Value>) -> Result<Vec<String>, BootstrapError> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s.clone()]),
        Some(Value::Sequence(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(s.clone()),
                other => Err(BootstrapError::K3sConfig(format!("expected strings, found {other:?}"))),
            })
            .collect(),
        Some(other) => Err(BootstrapError::K3sConfig(format!("expected a string or a list, found {other:?}"))),
    }
}

fn k3s_config(config: &str, instance_id: &str) -> Result<Bootstrap, BootstrapError> {
    let document: Value = serde_yaml::from_str(config).map_err(|e| BootstrapError::K3sConfig(e.to_string()))?;
    let map = match &document {
        Value::Mapping(map) => map.clone(),
        Value::Null => Default::default(),
        _ => return Err(BootstrapError::K3sConfig("the configuration is not a YAML mapping".into())),
    };
    let field = |name: &str| map.get(Value::String(name.to_string()));
    let node_name = match field("node-name") {
        Some(Value::String(name)) if !name.trim().is_empty() => name.trim().to_string(),
        _ => instance_id.to_string(),
    };
    let mut labels = BTreeMap::new();
    for label in strings(field("node-label"))? {
        let (key, value) = parse_label(&label)?;
        labels.insert(key, value);
    }
    let taints = strings(field("node-taint"))?.iter().map(|t| parse_taint(t)).collect::<Result<Vec<_>, _>>()?;
    let mut provider_id = None;
    let mut max_pods = None;
    for argument in strings(field("kubelet-arg"))? {
        let argument = argument.trim_start_matches('-');
        match argument.split_once('=') {
            Some(("provider-id", value)) => provider_id = Some(value.to_string()),
            Some(("max-pods", value)) => max_pods = Some(parse_max_pods(value)?),
            _ => {}
        }
    }
    let provider_id = provider_id.filter(|p| !p.is_empty()).unwrap_or_else(|| format!("k3s://{node_name}"));
    Ok(Bootstrap { format: Format::K3s, node_name, labels, taints, provider_id: Some(provider_id), max_pods })
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
        assert_eq!(parse(&unterminated, "i-1"), Err(BootstrapError::UnterminatedK3sConfig));
        let bad_taint = K3S_SCRIPT.replace("dedicated=gpu:NoSchedule", "dedicated=gpu:Sometimes");
        assert!(matches!(parse(&bad_taint, "i-1"), Err(BootstrapError::Taint(_))));
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
