//! The subset of kubectl's JSONPath that CRD printer columns use: dotted fields (with `\.`
//! escaping a dot inside a key, as in `.metadata.labels.node\.kubernetes\.io/instance-type`),
//! bracketed keys (`['a.b']`), array indexes (`[0]`, `[-1]`), every element (`[*]`) and
//! equality filters (`[?(@.type=="Ready")]`, also `!=` and paths inside the filter). An
//! optional `{…}` wrapper is accepted.

use serde_json::Value;

/// One step of a parsed path.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    /// A map key.
    Field(String),
    /// An array index; negative counts from the end.
    Index(i64),
    /// Every element of an array (or every value of a map).
    All,
    /// The array elements whose field at `path` equals (or, with `equal: false`, differs
    /// from) `value`.
    Filter {
        path: Vec<Step>,
        equal: bool,
        value: Value,
    },
}

/// A parsed JSONPath expression.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct JsonPath {
    steps: Vec<Step>,
}

impl JsonPath {
    /// Parses an expression such as `.status.conditions[?(@.type=="Ready")].status`.
    pub(crate) fn parse(text: &str) -> Result<Self, String> {
        let trimmed = text.trim();
        let inner = trimmed
            .strip_prefix('{')
            .and_then(|t| t.strip_suffix('}'))
            .unwrap_or(trimmed)
            .trim();
        let inner = inner.strip_prefix('$').unwrap_or(inner);
        let chars: Vec<char> = inner.chars().collect();
        let (steps, end) = parse_steps(&chars, 0, false)?;
        if end != chars.len() {
            return Err(format!("unexpected {:?} in JSONPath {text:?}", chars[end]));
        }
        Ok(Self { steps })
    }

    /// Every value the path selects in `root`, in document order.
    pub(crate) fn find<'a>(&self, root: &'a Value) -> Vec<&'a Value> {
        evaluate(&self.steps, root)
    }

    /// The first value the path selects, if any.
    pub(crate) fn first<'a>(&self, root: &'a Value) -> Option<&'a Value> {
        self.find(root).into_iter().next()
    }
}

/// Parses steps from `start`; inside a filter (`in_filter`) parsing stops before a comparison
/// operator or the closing parenthesis.
fn parse_steps(
    chars: &[char],
    start: usize,
    in_filter: bool,
) -> Result<(Vec<Step>, usize), String> {
    let mut steps = Vec::new();
    let mut at = start;
    while at < chars.len() {
        match chars[at] {
            '.' => {
                at += 1;
                let mut key = String::new();
                while at < chars.len() {
                    let c = chars[at];
                    if c == '\\' && at + 1 < chars.len() {
                        key.push(chars[at + 1]);
                        at += 2;
                        continue;
                    }
                    if c == '.'
                        || c == '['
                        || (in_filter && matches!(c, '=' | '!' | ')' | ' ' | '<' | '>'))
                    {
                        break;
                    }
                    key.push(c);
                    at += 1;
                }
                if key.is_empty() {
                    // `..` (recursive descent) and a trailing dot are outside the subset.
                    if at < chars.len() && chars[at] == '.' {
                        return Err("recursive descent (..) is not supported".into());
                    }
                    continue;
                }
                if key == "*" {
                    steps.push(Step::All);
                } else {
                    steps.push(Step::Field(key));
                }
            }
            '[' => {
                let close = find_closing_bracket(chars, at)?;
                let body: String = chars[at + 1..close].iter().collect();
                steps.push(parse_bracket(body.trim())?);
                at = close + 1;
            }
            c if in_filter && matches!(c, '=' | '!' | ')' | ' ' | '<' | '>') => break,
            c => return Err(format!("unexpected {c:?}")),
        }
    }
    Ok((steps, at))
}

/// The index of the `]` closing the `[` at `open`, skipping quoted text and nested brackets.
fn find_closing_bracket(chars: &[char], open: usize) -> Result<usize, String> {
    let mut depth = 0;
    let mut quote: Option<char> = None;
    for (index, &c) in chars.iter().enumerate().skip(open) {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '\'' | '"' => quote = Some(c),
                '[' => depth += 1,
                ']' => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(index);
                    }
                }
                _ => {}
            },
        }
    }
    Err("unclosed [".into())
}

fn unquote(text: &str) -> Option<&str> {
    let text = text.trim();
    for quote in ['"', '\''] {
        if let Some(inner) = text.strip_prefix(quote).and_then(|t| t.strip_suffix(quote)) {
            return Some(inner);
        }
    }
    None
}

fn parse_bracket(body: &str) -> Result<Step, String> {
    if body == "*" {
        return Ok(Step::All);
    }
    if let Some(key) = unquote(body) {
        return Ok(Step::Field(key.to_string()));
    }
    if let Ok(index) = body.parse::<i64>() {
        return Ok(Step::Index(index));
    }
    let filter = body
        .strip_prefix("?(")
        .and_then(|f| f.strip_suffix(')'))
        .ok_or_else(|| format!("unsupported JSONPath bracket [{body}]"))?
        .trim();
    let chars: Vec<char> = filter
        .strip_prefix('@')
        .ok_or_else(|| format!("a filter must start with @: {filter:?}"))?
        .chars()
        .collect();
    let (path, end) = parse_steps(&chars, 0, true)?;
    let rest: String = chars[end..].iter().collect();
    let rest = rest.trim();
    let (equal, operand) = if let Some(operand) = rest.strip_prefix("==") {
        (true, operand)
    } else if let Some(operand) = rest.strip_prefix("!=") {
        (false, operand)
    } else {
        return Err(format!(
            "unsupported filter {filter:?}: only == and != comparisons are supported"
        ));
    };
    let operand = operand.trim();
    let value = match unquote(operand) {
        Some(text) => Value::String(text.to_string()),
        None => serde_json::from_str(operand)
            .map_err(|_| format!("unsupported filter operand {operand:?}"))?,
    };
    Ok(Step::Filter { path, equal, value })
}

fn evaluate<'a>(steps: &[Step], root: &'a Value) -> Vec<&'a Value> {
    let mut current = vec![root];
    for step in steps {
        let mut next = Vec::new();
        for value in current {
            match step {
                Step::Field(key) => next.extend(value.get(key.as_str())),
                Step::Index(index) => {
                    if let Some(items) = value.as_array() {
                        let position = if *index < 0 {
                            items.len() as i64 + index
                        } else {
                            *index
                        };
                        if position >= 0 {
                            next.extend(items.get(position as usize));
                        }
                    }
                }
                Step::All => match value {
                    Value::Array(items) => next.extend(items.iter()),
                    Value::Object(map) => next.extend(map.values()),
                    _ => {}
                },
                Step::Filter {
                    path,
                    equal,
                    value: expected,
                } => {
                    for item in value.as_array().into_iter().flatten() {
                        let found = evaluate(path, item);
                        let matches = found
                            .first()
                            .is_some_and(|actual| loosely_equal(actual, expected));
                        if matches == *equal && (!found.is_empty() || !*equal) {
                            next.push(item);
                        }
                    }
                }
            }
        }
        current = next;
    }
    current
}

/// Compares as JSONPath filters do: numbers by value, anything else against a string by its
/// text.
fn loosely_equal(actual: &Value, expected: &Value) -> bool {
    match (actual, expected) {
        (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
        (Value::String(a), Value::String(b)) => a == b,
        (Value::Bool(a), Value::String(b)) | (Value::String(b), Value::Bool(a)) => {
            a.to_string() == *b
        }
        (a, b) => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object() -> Value {
        json!({
            "metadata": {"labels": {"node.kubernetes.io/instance-type": "c3-8", "app": "web"}},
            "spec": {"items": [{"name": "a", "size": 1}, {"name": "b", "size": 2}]},
            "status": {"conditions": [
                {"type": "Launched", "status": "True"},
                {"type": "Ready", "status": "False", "reason": "NotYet"}
            ]}
        })
    }

    fn first(path: &str) -> Option<Value> {
        JsonPath::parse(path).unwrap().first(&object()).cloned()
    }

    #[test]
    fn dotted_indexed_and_filtered_paths() {
        assert_eq!(first(".metadata.labels.app"), Some(json!("web")));
        assert_eq!(first("{.spec.items[1].name}"), Some(json!("b")));
        assert_eq!(first(".spec.items[-1].size"), Some(json!(2)));
        assert_eq!(
            first(r#".status.conditions[?(@.type=="Ready")].status"#),
            Some(json!("False"))
        );
        assert_eq!(
            first(".status.conditions[?(@.type=='Ready')].reason"),
            Some(json!("NotYet"))
        );
        assert_eq!(
            first(r#".status.conditions[?(@.type!="Ready")].type"#),
            Some(json!("Launched"))
        );
        assert_eq!(first(".spec.items[?(@.size==2)].name"), Some(json!("b")));
        assert_eq!(first(".spec.items[*].name"), Some(json!("a")));
        assert_eq!(first(".status.missing"), None);
        assert_eq!(first(".spec.items[5].name"), None);
    }

    #[test]
    fn escaped_dots_and_bracketed_keys_address_label_keys() {
        assert_eq!(
            first(r".metadata.labels.node\.kubernetes\.io/instance-type"),
            Some(json!("c3-8"))
        );
        assert_eq!(
            first(".metadata.labels['node.kubernetes.io/instance-type']"),
            Some(json!("c3-8"))
        );
    }

    #[test]
    fn unsupported_syntax_is_an_error() {
        assert!(JsonPath::parse("..name").is_err());
        assert!(JsonPath::parse(".a[?(@.x>1)]").is_err());
        assert!(JsonPath::parse(".a[0").is_err());
    }
}
