//! Just enough of a POSIX shell to read bootstrap scripts the way they would run: logical
//! lines, quoting, variables, command substitutions (which print the instance ID), `printf`,
//! and files written with a quoted here-document and appended to afterwards. Every format
//! that lives in a script uses it.

use std::collections::HashMap;

use super::BootstrapError;

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
pub(super) struct Shell<'a> {
    variables: HashMap<String, String>,
    instance_id: &'a str,
}

impl<'a> Shell<'a> {
    pub(super) fn new(instance_id: &'a str) -> Self {
        Self {
            variables: HashMap::new(),
            instance_id,
        }
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
                let end = chars[start..]
                    .iter()
                    .position(|c| *c == '}')
                    .map(|p| start + p)
                    .unwrap_or(chars.len());
                let inner: String = chars[start + 1..end.min(chars.len())].iter().collect();
                let name: String = inner
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                out.push_str(&self.variable(&name));
                *at = end;
            }
            Some(c) if c.is_ascii_alphabetic() || *c == '_' => {
                let mut end = start;
                while end < chars.len() && (chars[end].is_ascii_alphanumeric() || chars[end] == '_')
                {
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
                            '\\' if matches!(
                                chars.get(index + 1),
                                Some('"' | '\\' | '$' | '`')
                            ) =>
                            {
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
    pub(super) fn commands(&self, line: &str) -> Vec<Vec<String>> {
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
    pub(super) fn assign(&mut self, command: &[String]) -> bool {
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
pub(super) fn assignment(word: &str) -> Option<(&str, &str)> {
    let (name, value) = word.split_once('=')?;
    let valid = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    valid.then_some((name, value))
}

/// Joins lines continued with a trailing backslash.
pub(super) fn logical_lines(script: &str) -> Vec<String> {
    script
        .replace("\\\r\n", " ")
        .replace("\\\n", " ")
        .lines()
        .map(String::from)
        .collect()
}

/// POSIX `printf` with `%s`, `%d`, `%%` and the common backslash escapes; the format is
/// reused while arguments remain.
pub(super) fn printf(format: &str, arguments: &[String]) -> String {
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
pub(super) fn written_file(
    lines: &[String],
    path: &str,
    marker: &'static str,
    instance_id: &str,
) -> Option<Result<(String, usize), BootstrapError>> {
    let start_line = format!("cat > {path} <<'{marker}'");
    let start = lines
        .iter()
        .position(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") == start_line)?;
    let Some(length) = lines[start + 1..]
        .iter()
        .position(|l| l.trim_end() == marker)
    else {
        return Some(Err(BootstrapError::UnterminatedConfig(marker)));
    };
    let end = start + 1 + length;
    let mut file: String = lines[start + 1..end]
        .iter()
        .map(|l| format!("{l}\n"))
        .collect();
    // Emulate the rest of the script that touches the file (the provider-ID step).
    let mut shell = Shell::new(instance_id);
    for line in lines[..start].iter().chain(&lines[end + 1..]) {
        for command in shell.commands(line) {
            if shell.assign(&command) {
                continue;
            }
            let Some(redirect) = command.iter().position(|w| w == ">>") else {
                continue;
            };
            if command.get(redirect + 1).map(String::as_str) != Some(path) {
                continue;
            }
            let arguments = &command[1..redirect];
            match command[0].as_str() {
                "printf" if !arguments.is_empty() => {
                    file.push_str(&printf(&arguments[0], &arguments[1..]))
                }
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
