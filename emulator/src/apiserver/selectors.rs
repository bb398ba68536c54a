//! Label and field selectors as the API server parses them from list and watch query strings.

use std::borrow::Cow;

use serde_json::{Map, Value};

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq)]
pub enum LabelRequirement {
    /// `key=value` or `key==value`.
    Equals(String, String),
    /// `key!=value` (also matches when the key is absent).
    NotEquals(String, String),
    /// `key in (a,b)`.
    In(String, Vec<String>),
    /// `key notin (a,b)` (also matches when the key is absent).
    NotIn(String, Vec<String>),
    /// `key`: the label is present.
    Exists(String),
    /// `!key`: the label is absent.
    DoesNotExist(String),
}

/// A parsed label selector: all requirements must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    /// The requirements, combined with AND.
    pub requirements: Vec<LabelRequirement>,
}

fn split_top_level_commas(text: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (index, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(&text[start..index]);
                start = index + 1;
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

fn checked_key(key: &str, term: &str) -> Result<String, String> {
    let key = key.trim();
    if key.is_empty() || key.contains(char::is_whitespace) || key.contains(['=', '!', '(', ')']) {
        return Err(format!("invalid label selector term {term:?}"));
    }
    Ok(key.to_string())
}

impl LabelSelector {
    /// Parses the `labelSelector` query syntax (`=`, `==`, `!=`, `in`, `notin`, `key`, `!key`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        if text.trim().is_empty() {
            return Ok(Self::default());
        }
        for term in split_top_level_commas(text) {
            let term = term.trim();
            if term.is_empty() {
                return Err(format!("empty term in label selector {text:?}"));
            }
            if let Some(open) = term.find('(') {
                let close = term
                    .rfind(')')
                    .filter(|close| *close > open && term[close + 1..].trim().is_empty());
                let Some(close) = close else {
                    return Err(format!("unbalanced parentheses in {term:?}"));
                };
                let head: Vec<&str> = term[..open].split_whitespace().collect();
                let values: Vec<String> = term[open + 1..close]
                    .split(',')
                    .map(|v| v.trim().to_string())
                    .filter(|v| !v.is_empty())
                    .collect();
                match head.as_slice() {
                    [key, "in"] => {
                        requirements.push(LabelRequirement::In(checked_key(key, term)?, values))
                    }
                    [key, "notin"] => {
                        requirements.push(LabelRequirement::NotIn(checked_key(key, term)?, values))
                    }
                    _ => {
                        return Err(format!(
                            "expected `key in (...)` or `key notin (...)`, got {term:?}"
                        ));
                    }
                }
            } else if let Some(key) = term.strip_prefix('!') {
                requirements.push(LabelRequirement::DoesNotExist(checked_key(key, term)?));
            } else if let Some((key, value)) = term.split_once("!=") {
                requirements.push(LabelRequirement::NotEquals(
                    checked_key(key, term)?,
                    value.trim().to_string(),
                ));
            } else if let Some((key, value)) = term.split_once("==") {
                requirements.push(LabelRequirement::Equals(
                    checked_key(key, term)?,
                    value.trim().to_string(),
                ));
            } else if let Some((key, value)) = term.split_once('=') {
                requirements.push(LabelRequirement::Equals(
                    checked_key(key, term)?,
                    value.trim().to_string(),
                ));
            } else {
                requirements.push(LabelRequirement::Exists(checked_key(term, term)?));
            }
        }
        Ok(Self { requirements })
    }

    /// Whether an object's labels satisfy every requirement.
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        self.matches_by(|key| labels.and_then(|l| l.get(key)).and_then(Value::as_str))
    }

    /// Whether every requirement holds for the labels `label` looks up (`None`: the object
    /// has no such label, or its value is not a string).
    pub fn matches_by<'a>(&self, label: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.requirements
            .iter()
            .all(|requirement| match requirement {
                LabelRequirement::Equals(key, value) => label(key) == Some(value.as_str()),
                LabelRequirement::NotEquals(key, value) => label(key) != Some(value.as_str()),
                LabelRequirement::In(key, values) => {
                    label(key).is_some_and(|v| values.iter().any(|x| x == v))
                }
                LabelRequirement::NotIn(key, values) => {
                    !label(key).is_some_and(|v| values.iter().any(|x| x == v))
                }
                LabelRequirement::Exists(key) => label(key).is_some(),
                LabelRequirement::DoesNotExist(key) => label(key).is_none(),
            })
    }

    /// Whether the selector has no requirements (it selects everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object (its `metadata.labels`) satisfies the selector.
    pub fn matches_object(&self, object: &Value) -> bool {
        self.matches(
            object
                .pointer("/metadata/labels")
                .and_then(Value::as_object),
        )
    }
}

/// One field selector term: a dotted path compared for (in)equality.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldRequirement {
    /// Dotted field path, e.g. `spec.nodeName`.
    pub path: String,
    /// `true` for `=`/`==`, `false` for `!=`.
    pub equal: bool,
    /// Value compared against the field's string form.
    pub value: String,
}

/// A parsed field selector: all terms must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector {
    /// The terms, combined with AND.
    pub requirements: Vec<FieldRequirement>,
    /// The same terms by path, so that each field is read once per object and a long list of
    /// `!=` terms on one path (the pod GC names every node) costs one set lookup.
    by_path: Vec<PathTerms>,
}

/// The terms of a field selector on one path.
#[derive(Debug, Clone, Default, PartialEq)]
struct PathTerms {
    path: String,
    /// Values the field must equal.
    equal: Vec<String>,
    /// Values the field must not equal.
    excluded: std::collections::HashSet<String>,
}

/// Fields whose absence reads as `false` rather than the empty string (boolean fields).
const BOOLEAN_FIELDS: [&str; 1] = ["spec.unschedulable"];

impl FieldSelector {
    /// Parses the `fieldSelector` query syntax (`=`, `==`, `!=` over dotted paths).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (path, equal, value) = if let Some((p, v)) = term.split_once("!=") {
                (p, false, v)
            } else if let Some((p, v)) = term.split_once("==") {
                (p, true, v)
            } else if let Some((p, v)) = term.split_once('=') {
                (p, true, v)
            } else {
                return Err(format!(
                    "invalid field selector term {term:?}: expected field=value or field!=value"
                ));
            };
            let path = path.trim();
            if path.is_empty() {
                return Err(format!("invalid field selector term {term:?}"));
            }
            requirements.push(FieldRequirement {
                path: path.to_string(),
                equal,
                value: value.trim().to_string(),
            });
        }
        let mut by_path: Vec<PathTerms> = Vec::new();
        for requirement in &requirements {
            let at = match by_path.iter().position(|t| t.path == requirement.path) {
                Some(at) => at,
                None => {
                    by_path.push(PathTerms {
                        path: requirement.path.clone(),
                        ..PathTerms::default()
                    });
                    by_path.len() - 1
                }
            };
            let terms = &mut by_path[at];
            if requirement.equal {
                terms.equal.push(requirement.value.clone());
            } else {
                terms.excluded.insert(requirement.value.clone());
            }
        }
        Ok(Self {
            requirements,
            by_path,
        })
    }

    /// Whether the object satisfies every term.
    pub fn matches(&self, object: &Value) -> bool {
        self.matches_by(|path| Cow::Owned(field_as_string(object, path)))
    }

    /// Whether every term holds for the field values `field` gives (the string form
    /// [`field_as_string`] defines, by dotted path).
    pub fn matches_by<'a>(&self, mut field: impl FnMut(&str) -> Cow<'a, str>) -> bool {
        self.by_path.iter().all(|terms| {
            let value = field(&terms.path);
            terms.equal.iter().all(|wanted| *value == **wanted)
                && !terms.excluded.contains(value.as_ref())
        })
    }

    /// The value of the selector's first term on `path` (an equality when `equal`, else an
    /// inequality), if it has one.
    pub fn term(&self, path: &str, equal: bool) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.path == path && r.equal == equal)
            .map(|r| r.value.as_str())
    }

    /// The values the field at `path` must not equal (`None` when no `!=` term names it).
    pub fn excluded(&self, path: &str) -> Option<&std::collections::HashSet<String>> {
        self.by_path
            .iter()
            .find(|terms| terms.path == path && !terms.excluded.is_empty())
            .map(|terms| &terms.excluded)
    }

    /// Whether the selector has no terms (it selects everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

/// The string form of the field at a dotted `path`, as field selectors compare it: strings as
/// they are, numbers and booleans printed, `null` empty; a missing field reads as
/// [`absent_field_value`].
pub fn field_as_string(object: &Value, path: &str) -> String {
    field_value(object, path).unwrap_or_else(|| absent_field_value(path).to_string())
}

/// The string form of the field at a dotted `path` (see [`field_as_string`]), or `None` when
/// the object has no such field.
pub fn field_value(object: &Value, path: &str) -> Option<String> {
    let mut current = object;
    for segment in path.split('.') {
        current = current.get(segment)?;
    }
    Some(match current {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::Null => String::new(),
        other => other.to_string(),
    })
}

/// What a missing field at `path` reads as: `false` for boolean fields, else the empty string.
pub fn absent_field_value(path: &str) -> &'static str {
    if BOOLEAN_FIELDS.contains(&path) {
        "false"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(value: Value) -> Value {
        json!({"metadata": {"labels": value}})
    }

    #[test]
    fn label_selector_operators() {
        let object = labels(json!({"app": "web", "tier": "front"}));
        let matches = |text: &str| LabelSelector::parse(text).unwrap().matches_object(&object);
        assert!(matches("app=web"));
        assert!(matches("app==web,tier"));
        assert!(!matches("app!=web"));
        assert!(matches("zone!=a"));
        assert!(matches("app in (db, web)"));
        assert!(!matches("app notin (db,web)"));
        assert!(matches("zone notin (a)"));
        assert!(matches("!zone"));
        assert!(!matches("!app"));
        assert!(matches("app in (web),tier in (front, back),!zone"));
        assert!(LabelSelector::parse("app in (web").is_err());
        assert!(LabelSelector::parse("app,,tier").is_err());
    }

    #[test]
    fn field_selector_reads_paths_and_booleans() {
        let node = json!({"metadata": {"name": "n1"}, "spec": {}});
        assert!(
            FieldSelector::parse("spec.unschedulable=false")
                .unwrap()
                .matches(&node)
        );
        assert!(
            FieldSelector::parse("metadata.name=n1")
                .unwrap()
                .matches(&node)
        );
        assert!(
            !FieldSelector::parse("metadata.name!=n1")
                .unwrap()
                .matches(&node)
        );
        let pod = json!({"spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        assert!(
            FieldSelector::parse("spec.nodeName=n1,status.phase!=Pending")
                .unwrap()
                .matches(&pod)
        );
        assert!(FieldSelector::parse("nonsense").is_err());
    }

    #[test]
    fn field_selector_terms_on_one_path_all_hold() {
        let on = |node: &str| json!({"spec": {"nodeName": node}});
        let orphans =
            FieldSelector::parse("spec.nodeName!=,spec.nodeName!=a,spec.nodeName!=b").unwrap();
        assert!(!orphans.matches(&on("")), "unbound");
        assert!(!orphans.matches(&on("a")));
        assert!(!orphans.matches(&on("b")));
        assert!(orphans.matches(&on("c")), "bound to a node not named");
        let both = FieldSelector::parse("spec.nodeName=a,spec.nodeName=b").unwrap();
        assert!(
            !both.matches(&on("a")),
            "two equalities on one path: neither value"
        );
        let narrowed = FieldSelector::parse("spec.nodeName=a,spec.nodeName!=b").unwrap();
        assert!(narrowed.matches(&on("a")));
        assert!(!narrowed.matches(&on("b")));
    }
}
