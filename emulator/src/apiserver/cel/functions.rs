//! The function library: CEL's standard functions and Kubernetes' extensions (strings, regular
//! expressions, lists, conversions, duration getters), dispatched by name and argument types.

use std::borrow::Cow;
use std::cmp::Ordering;

use regex::Regex;
use serde_json::Value;

use super::eval::{arithmetic, charge_bytes, check_string_size, compare};
use super::parse::BinaryOp;
use super::time::{
    NANOS_PER_SECOND, format_duration, format_timestamp, parse_duration, parse_timestamp,
};
use super::value::{Val, equal, no_overload};
use super::{CelError, regex};

/// Every function the evaluator knows; calling anything else is [`CelError::UnknownFunction`].
const FUNCTIONS: &[&str] = &[
    "size",
    "int",
    "uint",
    "double",
    "string",
    "bool",
    "dyn",
    "type",
    "duration",
    "timestamp",
    "matches",
    "contains",
    "startsWith",
    "endsWith",
    "find",
    "findAll",
    "lowerAscii",
    "upperAscii",
    "trim",
    "split",
    "replace",
    "indexOf",
    "lastIndexOf",
    "substring",
    "charAt",
    "join",
    "isSorted",
    "sum",
    "min",
    "max",
    "getHours",
    "getMinutes",
    "getSeconds",
    "getMilliseconds",
];

fn string_val<'a>(text: impl Into<String>) -> Val<'a> {
    Val::String(Cow::Owned(text.into()))
}

/// Calls `function` with `values` (the receiver first, for a method call).
pub(super) fn call<'a>(
    function: &str,
    is_method: bool,
    values: Vec<Val<'a>>,
) -> Result<Val<'a>, CelError> {
    if !FUNCTIONS.contains(&function) {
        return Err(CelError::UnknownFunction(function.to_string()));
    }
    let mismatch = || {
        let refs: Vec<&Val<'_>> = values.iter().collect();
        let name = if is_method {
            format!(".{function}")
        } else {
            function.to_string()
        };
        no_overload(&name, &refs)
    };
    // Reading a string argument costs its length (cel-go charges string functions by size).
    for value in &values {
        if let Val::String(text) = value {
            charge_bytes(text.len());
        }
    }
    use Val::String as Str;
    let result = match (function, is_method, values.as_slice()) {
        ("size", _, [value]) => size(value),
        ("int", false, [value]) => to_int(value),
        ("uint", false, [value]) => to_uint(value),
        ("double", false, [value]) => to_double(value),
        ("string", false, [value]) => to_string(value),
        ("bool", false, [value]) => to_bool(value),
        ("dyn", false, [value]) => Some(Ok(value.clone())),
        ("type", false, [value]) => Some(Ok(Val::Type(value.type_name()))),
        ("duration", false, [Str(text)]) => Some(parse_duration(text).map(Val::Duration)),
        ("duration", false, [Val::Duration(d)]) => Some(Ok(Val::Duration(*d))),
        ("timestamp", false, [Str(text)]) => Some(parse_timestamp(text).map(Val::Timestamp)),
        ("timestamp", false, [Val::Timestamp(t)]) => Some(Ok(Val::Timestamp(*t))),
        ("matches", _, [Str(text), Str(pattern)]) => {
            Some(compiled(pattern).map(|re| Val::Bool(re.is_match(text))))
        }
        ("contains", true, [Str(text), Str(part)]) => Some(Ok(Val::Bool(text.contains(&**part)))),
        ("startsWith", true, [Str(text), Str(prefix)]) => {
            Some(Ok(Val::Bool(text.starts_with(&**prefix))))
        }
        ("endsWith", true, [Str(text), Str(suffix)]) => {
            Some(Ok(Val::Bool(text.ends_with(&**suffix))))
        }
        ("find", true, [Str(text), Str(pattern)]) => Some(
            compiled(pattern)
                .map(|re| string_val(re.find(text).map(|m| m.as_str()).unwrap_or_default())),
        ),
        ("findAll", true, [Str(text), Str(pattern)]) => Some(find_all(text, pattern, -1)),
        ("findAll", true, [Str(text), Str(pattern), Val::Int(limit)]) => {
            Some(find_all(text, pattern, *limit))
        }
        ("lowerAscii", true, [Str(text)]) => Some(Ok(string_val(text.to_ascii_lowercase()))),
        ("upperAscii", true, [Str(text)]) => Some(Ok(string_val(text.to_ascii_uppercase()))),
        ("trim", true, [Str(text)]) => Some(Ok(string_val(text.trim()))),
        ("split", true, [Str(text), Str(separator)]) => Some(Ok(split(text, separator, -1))),
        ("split", true, [Str(text), Str(separator), Val::Int(limit)]) => {
            Some(Ok(split(text, separator, *limit)))
        }
        ("replace", true, [Str(text), Str(from), Str(to)]) => Some(replace(text, from, to, -1)),
        ("replace", true, [Str(text), Str(from), Str(to), Val::Int(limit)]) => {
            Some(replace(text, from, to, *limit))
        }
        ("indexOf", true, [Str(text), Str(part)]) => Some(string_index_of(text, part, 0)),
        ("indexOf", true, [Str(text), Str(part), Val::Int(start)]) => {
            Some(string_index_of(text, part, *start))
        }
        ("lastIndexOf", true, [Str(text), Str(part)]) => {
            Some(string_last_index_of(text, part, None))
        }
        ("lastIndexOf", true, [Str(text), Str(part), Val::Int(end)]) => {
            Some(string_last_index_of(text, part, Some(*end)))
        }
        ("substring", true, [Str(text), Val::Int(start)]) => Some(substring(text, *start, None)),
        ("substring", true, [Str(text), Val::Int(start), Val::Int(end)]) => {
            Some(substring(text, *start, Some(*end)))
        }
        ("charAt", true, [Str(text), Val::Int(index)]) => Some(char_at(text, *index)),
        ("indexOf", true, [list, value]) => list.items().map(|items| {
            Ok(Val::Int(
                items
                    .iter()
                    .position(|i| equal(i, value))
                    .map_or(-1, |p| p as i64),
            ))
        }),
        ("lastIndexOf", true, [list, value]) => list.items().map(|items| {
            Ok(Val::Int(
                items
                    .iter()
                    .rposition(|i| equal(i, value))
                    .map_or(-1, |p| p as i64),
            ))
        }),
        ("join", true, [list]) => list.items().map(|items| join(&items, "")),
        ("join", true, [list, Str(separator)]) => list.items().map(|items| join(&items, separator)),
        ("isSorted", true, [list]) => list.items().map(|items| is_sorted(&items)),
        ("sum", true, [list]) => list.items().map(sum),
        ("min", true, [list]) => list.items().map(|items| extreme(items, Ordering::Less)),
        ("max", true, [list]) => list.items().map(|items| extreme(items, Ordering::Greater)),
        ("getHours", true, [Val::Duration(d)]) => Some(duration_part(*d, 3600 * NANOS_PER_SECOND)),
        ("getMinutes", true, [Val::Duration(d)]) => Some(duration_part(*d, 60 * NANOS_PER_SECOND)),
        ("getSeconds", true, [Val::Duration(d)]) => Some(duration_part(*d, NANOS_PER_SECOND)),
        ("getMilliseconds", true, [Val::Duration(d)]) => Some(duration_part(*d, 1_000_000)),
        _ => None,
    };
    result.unwrap_or_else(|| Err(mismatch()))
}

fn compiled(pattern: &str) -> Result<Regex, CelError> {
    regex(pattern).map_err(|e| CelError::Eval(format!("given regex is invalid: {e}")))
}

fn size<'a>(value: &Val<'a>) -> Option<Result<Val<'a>, CelError>> {
    let length = match value {
        Val::String(text) => text.chars().count(),
        Val::Map(entries) => entries.len(),
        Val::Json(Value::Object(map)) => map.len(),
        other => other.list_len()?,
    };
    Some(Ok(Val::Int(i64::try_from(length).unwrap_or(i64::MAX))))
}

fn range_error<'a>() -> Result<Val<'a>, CelError> {
    Err(CelError::Eval("range error converting value".to_string()))
}

fn to_int<'a>(value: &Val<'a>) -> Option<Result<Val<'a>, CelError>> {
    Some(match value {
        Val::Int(i) => Ok(Val::Int(*i)),
        Val::Uint(u) => i64::try_from(*u).map(Val::Int).or_else(|_| range_error()),
        Val::Double(d)
            if d.is_finite() && *d > -9.223_372_036_854_776e18 && *d < 9.223_372_036_854_776e18 =>
        {
            Ok(Val::Int(*d as i64))
        }
        Val::Double(_) => range_error(),
        Val::String(text) => text.parse::<i64>().map(Val::Int).map_err(|e| {
            let reason = if matches!(
                e.kind(),
                std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow
            ) {
                "value out of range"
            } else {
                "invalid syntax"
            };
            CelError::Eval(format!(
                "strconv.ParseInt: parsing {}: {reason}",
                go_quote(text)
            ))
        }),
        Val::Timestamp(t) => Ok(Val::Int(
            i64::try_from(t.div_euclid(NANOS_PER_SECOND)).unwrap_or(i64::MAX),
        )),
        Val::Duration(d) => Ok(Val::Int(i64::try_from(*d).unwrap_or(i64::MAX))),
        _ => return None,
    })
}

fn to_uint<'a>(value: &Val<'a>) -> Option<Result<Val<'a>, CelError>> {
    Some(match value {
        Val::Uint(u) => Ok(Val::Uint(*u)),
        Val::Int(i) => u64::try_from(*i).map(Val::Uint).or_else(|_| range_error()),
        Val::Double(d) if d.is_finite() && *d > -1.0 && *d < 1.844_674_407_370_955_2e19 => {
            Ok(Val::Uint(*d as u64))
        }
        Val::Double(_) => range_error(),
        Val::String(text) => text.parse::<u64>().map(Val::Uint).map_err(|e| {
            let reason = if matches!(e.kind(), std::num::IntErrorKind::PosOverflow) {
                "value out of range"
            } else {
                "invalid syntax"
            };
            CelError::Eval(format!(
                "strconv.ParseUint: parsing {}: {reason}",
                go_quote(text)
            ))
        }),
        _ => return None,
    })
}

fn to_double<'a>(value: &Val<'a>) -> Option<Result<Val<'a>, CelError>> {
    Some(match value {
        Val::Double(d) => Ok(Val::Double(*d)),
        Val::Int(i) => Ok(Val::Double(*i as f64)),
        Val::Uint(u) => Ok(Val::Double(*u as f64)),
        Val::String(text) => text.parse::<f64>().map(Val::Double).map_err(|_| {
            CelError::Eval(format!(
                "strconv.ParseFloat: parsing {}: invalid syntax",
                go_quote(text)
            ))
        }),
        _ => return None,
    })
}

fn to_string<'a>(value: &Val<'a>) -> Option<Result<Val<'a>, CelError>> {
    Some(Ok(match value {
        Val::String(text) => Val::String(text.clone()),
        Val::Int(i) => string_val(i.to_string()),
        Val::Uint(u) => string_val(u.to_string()),
        Val::Double(d) => string_val(d.to_string()),
        Val::Bool(b) => string_val(b.to_string()),
        Val::Duration(d) => string_val(format_duration(*d)),
        Val::Timestamp(t) => string_val(format_timestamp(*t)),
        Val::Type(name) => string_val(*name),
        _ => return None,
    }))
}

fn to_bool<'a>(value: &Val<'a>) -> Option<Result<Val<'a>, CelError>> {
    Some(match value {
        Val::Bool(b) => Ok(Val::Bool(*b)),
        Val::String(text) => match &**text {
            "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(Val::Bool(true)),
            "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(Val::Bool(false)),
            other => Err(CelError::Eval(format!(
                "strconv.ParseBool: parsing {}: invalid syntax",
                go_quote(other)
            ))),
        },
        _ => return None,
    })
}

/// A string quoted as Go's `%q` quotes it (close enough: JSON string syntax).
pub(super) fn go_quote(text: &str) -> String {
    Value::String(text.to_string()).to_string()
}

fn find_all<'a>(text: &str, pattern: &str, limit: i64) -> Result<Val<'a>, CelError> {
    let re = compiled(pattern)?;
    let take = usize::try_from(limit).unwrap_or(usize::MAX);
    Ok(Val::List(
        re.find_iter(text)
            .take(take)
            .map(|m| string_val(m.as_str()))
            .collect(),
    ))
}

/// Go's `strings.SplitN`: a negative limit splits everywhere, zero yields nothing, an empty
/// separator splits between characters.
fn split<'a>(text: &str, separator: &str, limit: i64) -> Val<'a> {
    if limit == 0 {
        return Val::List(Vec::new());
    }
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let parts: Vec<Val<'a>> = if separator.is_empty() {
        let chars: Vec<char> = text.chars().collect();
        let mut parts: Vec<Val<'a>> = Vec::new();
        for (i, c) in chars.iter().enumerate() {
            if parts.len() + 1 == limit {
                parts.push(string_val(chars[i..].iter().collect::<String>()));
                break;
            }
            parts.push(string_val(c.to_string()));
        }
        parts
    } else {
        text.splitn(limit, separator).map(string_val).collect()
    };
    Val::List(parts)
}

fn char_offset(text: &str, index: i64) -> Result<usize, CelError> {
    let count = text.chars().count();
    usize::try_from(index)
        .ok()
        .filter(|&i| i <= count)
        .ok_or_else(|| CelError::Eval(format!("index out of range: {index}")))
}

/// The byte offset of the `chars`-th character of `text` (its length past the end).
fn byte_offset(text: &str, chars: usize) -> usize {
    text.char_indices()
        .nth(chars)
        .map_or(text.len(), |(at, _)| at)
}

/// The character index of the byte offset `at` of `text`.
fn char_index(text: &str, at: usize) -> i64 {
    text[..at].chars().count() as i64
}

// Both searches are linear (Rust's substring search), whatever the lengths.
fn string_index_of<'a>(text: &str, part: &str, start: i64) -> Result<Val<'a>, CelError> {
    let start = byte_offset(text, char_offset(text, start)?);
    let found = text[start..].find(part).map(|at| start + at);
    Ok(Val::Int(found.map_or(-1, |at| char_index(text, at))))
}

fn string_last_index_of<'a>(text: &str, part: &str, end: Option<i64>) -> Result<Val<'a>, CelError> {
    let last = match end {
        Some(end) => byte_offset(text, char_offset(text, end)?),
        None => text.len(),
    };
    // An occurrence starting at or before `last` ends at or before `last + part.len()`, on a
    // character boundary.
    let mut until = last.saturating_add(part.len()).min(text.len());
    while !text.is_char_boundary(until) {
        until -= 1;
    }
    let found = text[..until].rfind(part).filter(|&at| at <= last);
    Ok(Val::Int(found.map_or(-1, |at| char_index(text, at))))
}

fn substring<'a>(text: &str, start: i64, end: Option<i64>) -> Result<Val<'a>, CelError> {
    let from = char_offset(text, start)?;
    let to = match end {
        Some(end) => char_offset(text, end)?,
        None => text.chars().count(),
    };
    if from > to {
        return Err(CelError::Eval(format!(
            "invalid substring range. start: {start}, end: {}",
            end.unwrap_or_default()
        )));
    }
    Ok(string_val(
        text.chars().skip(from).take(to - from).collect::<String>(),
    ))
}

fn char_at<'a>(text: &str, index: i64) -> Result<Val<'a>, CelError> {
    let at = char_offset(text, index)?;
    Ok(string_val(
        text.chars().nth(at).map(String::from).unwrap_or_default(),
    ))
}

fn join<'a>(items: &[Val<'a>], separator: &str) -> Result<Val<'a>, CelError> {
    let mut parts = Vec::with_capacity(items.len());
    let mut length = separator
        .len()
        .saturating_mul(items.len().saturating_sub(1));
    for item in items {
        match item {
            Val::String(text) => {
                length = length.saturating_add(text.len());
                parts.push(&**text);
            }
            other => return Err(no_overload(".join", &[other])),
        }
    }
    check_string_size(length)?;
    Ok(string_val(parts.join(separator)))
}

/// `text.replace(from, to, limit)`: the first `limit` occurrences (all when negative),
/// refused before it is built when the result would be over
/// [`MAX_STRING_BYTES`](super::MAX_STRING_BYTES).
fn replace<'a>(text: &str, from: &str, to: &str, limit: i64) -> Result<Val<'a>, CelError> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let occurrences = text.matches(from).take(limit).count();
    let length = (text.len() - occurrences * from.len())
        .saturating_add(occurrences.saturating_mul(to.len()));
    check_string_size(length)?;
    Ok(string_val(text.replacen(from, to, limit)))
}

fn is_sorted<'a>(items: &[Val<'a>]) -> Result<Val<'a>, CelError> {
    for pair in items.windows(2) {
        match compare(&pair[0], &pair[1]) {
            Some(Some(Ordering::Greater)) => return Ok(Val::Bool(false)),
            Some(_) => {}
            None => return Err(no_overload(".isSorted", &[&pair[0], &pair[1]])),
        }
    }
    Ok(Val::Bool(true))
}

fn sum<'a>(items: Vec<Val<'a>>) -> Result<Val<'a>, CelError> {
    let mut total = match items.first() {
        Some(Val::Double(_)) => Val::Double(0.0),
        Some(Val::Uint(_)) => Val::Uint(0),
        Some(Val::Duration(_)) => Val::Duration(0),
        _ => Val::Int(0),
    };
    for item in items {
        total = arithmetic(BinaryOp::Add, total, item)?;
    }
    Ok(total)
}

fn extreme<'a>(items: Vec<Val<'a>>, wanted: Ordering) -> Result<Val<'a>, CelError> {
    let mut items = items.into_iter();
    let Some(mut best) = items.next() else {
        return Err(CelError::Eval(format!(
            "{}() called on an empty list",
            if wanted == Ordering::Less {
                "min"
            } else {
                "max"
            }
        )));
    };
    for item in items {
        match compare(&item, &best) {
            Some(Some(o)) if o == wanted => best = item,
            Some(_) => {}
            None => {
                return Err(no_overload(
                    if wanted == Ordering::Less {
                        ".min"
                    } else {
                        ".max"
                    },
                    &[&item, &best],
                ));
            }
        }
    }
    Ok(best)
}

fn duration_part<'a>(nanos: i128, unit: i128) -> Result<Val<'a>, CelError> {
    i64::try_from(nanos / unit)
        .map(Val::Int)
        .or_else(|_| range_error())
}
