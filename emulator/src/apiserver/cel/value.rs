//! CEL values ([`Val`]): how a JSON document is seen from CEL, CEL equality and numeric order
//! across int, uint and double, and field selection (with Kubernetes' escaped property names).

use std::borrow::Cow;
use std::cmp::Ordering;

use serde_json::Value;

use super::CelError;
use super::eval::{charge, charge_bytes, copy_cost};
use super::lex::RESERVED;

/// A CEL value. Arrays and objects of the input document stay borrowed ([`Val::Json`]) and are
/// converted element by element as the expression reaches into them.
#[derive(Debug, Clone)]
pub enum Val<'a> {
    /// `null`.
    Null,
    /// A boolean.
    Bool(bool),
    /// A signed 64-bit integer.
    Int(i64),
    /// An unsigned 64-bit integer.
    Uint(u64),
    /// A double.
    Double(f64),
    /// A string.
    String(Cow<'a, str>),
    /// A `google.protobuf.Duration`, in nanoseconds.
    Duration(i128),
    /// A `google.protobuf.Timestamp`, in nanoseconds since the Unix epoch.
    Timestamp(i128),
    /// A type, as `type(x)` returns and type names (`int`, `string`...) denote.
    Type(&'static str),
    /// A list built by the expression.
    List(Vec<Val<'a>>),
    /// A map built by the expression (entries in insertion order, keys unique).
    Map(Vec<(Val<'a>, Val<'a>)>),
    /// An array (a list) or object (a map with string keys) of the input document.
    Json(&'a Value),
}

impl<'a> Val<'a> {
    /// The CEL value of a JSON value: numbers become ints when integral and in range, uints
    /// beyond `i64::MAX`, doubles otherwise.
    pub fn from_json(value: &'a Value) -> Val<'a> {
        match value {
            Value::Null => Val::Null,
            Value::Bool(b) => Val::Bool(*b),
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Val::Int(i)
                } else if let Some(u) = n.as_u64() {
                    Val::Uint(u)
                } else {
                    Val::Double(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Value::String(s) => Val::String(Cow::Borrowed(s)),
            Value::Array(_) | Value::Object(_) => Val::Json(value),
        }
    }

    /// A [`Val::Json`] holding a scalar becomes that scalar.
    pub(super) fn flat(self) -> Val<'a> {
        match self {
            Val::Json(value) => Val::from_json(value),
            other => other,
        }
    }

    /// The CEL name of the value's type (`int`, `string`, `list`, `map`...).
    pub fn type_name(&self) -> &'static str {
        match self {
            Val::Null => "null_type",
            Val::Bool(_) => "bool",
            Val::Int(_) => "int",
            Val::Uint(_) => "uint",
            Val::Double(_) => "double",
            Val::String(_) => "string",
            Val::Duration(_) => "google.protobuf.Duration",
            Val::Timestamp(_) => "google.protobuf.Timestamp",
            Val::Type(_) => "type",
            Val::List(_) => "list",
            Val::Map(_) => "map",
            Val::Json(value) => match value {
                Value::Array(_) => "list",
                Value::Object(_) => "map",
                scalar => Val::from_json(scalar).type_name(),
            },
        }
    }

    /// The elements, when the value is a list.
    pub(super) fn items(&self) -> Option<Vec<Val<'a>>> {
        match self {
            Val::List(items) => {
                charge(copy_cost(self));
                Some(items.clone())
            }
            Val::Json(Value::Array(items)) => {
                charge(items.len() as u64);
                Some(items.iter().map(Val::from_json).collect())
            }
            _ => None,
        }
    }

    /// The number of elements, when the value is a list (without copying them).
    pub(super) fn list_len(&self) -> Option<usize> {
        match self {
            Val::List(items) => Some(items.len()),
            Val::Json(Value::Array(items)) => Some(items.len()),
            _ => None,
        }
    }

    /// The entries, when the value is a map.
    pub(super) fn entries(&self) -> Option<Vec<(Val<'a>, Val<'a>)>> {
        match self {
            Val::Map(entries) => {
                charge(copy_cost(self));
                Some(entries.clone())
            }
            Val::Json(Value::Object(map)) => Some({
                charge(map.len() as u64);

                map.iter()
                    .map(|(k, v)| (Val::String(Cow::Borrowed(k.as_str())), Val::from_json(v)))
                    .collect()
            }),
            _ => None,
        }
    }

    /// Whether the value is a map (without building its entries).
    pub(super) fn is_map(&self) -> bool {
        matches!(self, Val::Map(_) | Val::Json(Value::Object(_)))
    }

    pub(super) fn is_number(&self) -> bool {
        matches!(self, Val::Int(_) | Val::Uint(_) | Val::Double(_))
    }

    /// The value under `key`, when the value is a map; `Err` when it is not a map.
    pub(super) fn lookup(&self, key: &Val<'a>) -> Result<Option<Val<'a>>, CelError> {
        match self {
            Val::Json(Value::Object(map)) => Ok(match key {
                Val::String(name) => map.get(&**name).map(Val::from_json),
                _ => None,
            }),
            Val::Map(entries) => Ok({
                charge(entries.len() as u64);
                entries
                    .iter()
                    .find(|(k, _)| equal(k, key))
                    .map(|(_, v)| v.clone())
            }),
            _ => Err(CelError::NoSuchOverload(format!(
                "{}[{}]",
                self.type_name(),
                key.type_name()
            ))),
        }
    }
}

/// CEL equality: numbers compare by value across int, uint and double; values of different
/// types are unequal (never an error); lists and maps compare element by element.
pub fn equal(left: &Val<'_>, right: &Val<'_>) -> bool {
    charge(1);
    if left.is_number() && right.is_number() {
        return numeric_cmp(left, right) == Some(Ordering::Equal);
    }
    match (left, right) {
        (Val::Null, Val::Null) => true,
        (Val::Bool(a), Val::Bool(b)) => a == b,
        (Val::String(a), Val::String(b)) => {
            charge_bytes(a.len().min(b.len()));
            a == b
        }
        (Val::Duration(a), Val::Duration(b)) | (Val::Timestamp(a), Val::Timestamp(b)) => a == b,
        (Val::Type(a), Val::Type(b)) => a == b,
        (Val::Json(a), Val::Json(b)) if std::ptr::eq(*a, *b) => true,
        _ => {
            if let (Some(a), Some(b)) = (left.items(), right.items()) {
                return a.len() == b.len() && a.iter().zip(&b).all(|(x, y)| equal(x, y));
            }
            if left.is_map() && right.is_map() {
                // Looked up by key: a document's objects are indexed, so this is not quadratic.
                let (Some(a), Some(b)) = (left.entries(), right.entries()) else {
                    return false;
                };
                return a.len() == b.len()
                    && a.iter().all(|(key, value)| {
                        right
                            .lookup(key)
                            .ok()
                            .flatten()
                            .is_some_and(|other| equal(value, &other))
                    });
            }
            false
        }
    }
}

/// Orders two numbers of any numeric types; `None` when a NaN is involved or either is not a
/// number.
pub(super) fn numeric_cmp(left: &Val<'_>, right: &Val<'_>) -> Option<Ordering> {
    let as_wide = |v: &Val<'_>| match v {
        Val::Int(i) => Some(i128::from(*i)),
        Val::Uint(u) => Some(i128::from(*u)),
        _ => None,
    };
    match (left, right) {
        (Val::Double(a), Val::Double(b)) => a.partial_cmp(b),
        (Val::Double(a), other) => as_wide(other)
            .and_then(|b| cmp_wide_double(b, *a))
            .map(Ordering::reverse),
        (other, Val::Double(b)) => as_wide(other).and_then(|a| cmp_wide_double(a, *b)),
        (a, b) => Some(as_wide(a)?.cmp(&as_wide(b)?)),
    }
}

/// Compares an integer with a double, exactly where the double has no fraction.
fn cmp_wide_double(integer: i128, double: f64) -> Option<Ordering> {
    if double.is_nan() {
        return None;
    }
    if double >= 1e30 {
        return Some(Ordering::Less);
    }
    if double <= -1e30 {
        return Some(Ordering::Greater);
    }
    let truncated = double.trunc();
    // |truncated| < 1e30 fits an i128.
    let whole = truncated as i128;
    match integer.cmp(&whole) {
        Ordering::Equal if double > truncated => Some(Ordering::Less),
        Ordering::Equal if double < truncated => Some(Ordering::Greater),
        other => Some(other),
    }
}

pub(super) fn no_overload(function: &str, args: &[&Val<'_>]) -> CelError {
    let types: Vec<&str> = args.iter().map(|a| a.type_name()).collect();
    CelError::NoSuchOverload(format!("{function}({})", types.join(", ")))
}

pub(super) fn describe_key(key: &Val<'_>) -> String {
    match key {
        Val::String(s) => s.to_string(),
        Val::Int(i) => i.to_string(),
        Val::Uint(u) => u.to_string(),
        Val::Bool(b) => b.to_string(),
        other => other.type_name().to_string(),
    }
}

/// Kubernetes escapes property names that are not CEL identifiers: `__dash__` for `-`,
/// `__dot__` for `.`, `__slash__` for `/`, `__underscores__` for `__`, and `__{keyword}__` for
/// reserved words.
fn unescape_field(name: &str) -> Option<String> {
    if !name.contains("__") {
        return None;
    }
    if let Some(keyword) = name.strip_prefix("__").and_then(|n| n.strip_suffix("__"))
        && (RESERVED.contains(&keyword) || matches!(keyword, "true" | "false" | "null"))
    {
        return Some(keyword.to_string());
    }
    let mut out = String::new();
    let mut rest = name;
    while !rest.is_empty() {
        let replaced = [
            ("__underscores__", "__"),
            ("__dash__", "-"),
            ("__dot__", "."),
            ("__slash__", "/"),
        ]
        .iter()
        .find(|(escaped, _)| rest.starts_with(*escaped));
        match replaced {
            Some((escaped, plain)) => {
                out.push_str(plain);
                rest = &rest[escaped.len()..];
            }
            None => {
                let mut chars = rest.chars();
                if let Some(c) = chars.next() {
                    out.push(c);
                }
                rest = chars.as_str();
            }
        }
    }
    Some(out)
}

/// The field `name` of a map value: `Ok(None)` when absent, `Err` when the value is no map.
pub(super) fn field<'a>(target: &Val<'a>, name: &str) -> Result<Option<Val<'a>>, CelError> {
    let key = Val::String(Cow::Owned(name.to_string()));
    if !target.is_map() {
        return Err(CelError::NoSuchOverload(format!(
            "field selection '.{name}' on {}",
            target.type_name()
        )));
    }
    if let Some(found) = target.lookup(&key)? {
        return Ok(Some(found));
    }
    match unescape_field(name) {
        Some(unescaped) => target.lookup(&Val::String(Cow::Owned(unescaped))),
        None => Ok(None),
    }
}
