//! The evaluator: walks an [`Expr`] over [`Val`]s with the variables in scope, applying the
//! operators and macros, and the cost meter every step of it charges (see the module
//! documentation of [`super`] for what costs what).

use std::borrow::Cow;
use std::cell::Cell;
use std::cmp::Ordering;

use serde_json::Value;

use super::functions::call;
use super::parse::{BinaryOp, Expr, Literal, Macro, UnaryOp};
use super::value::{Val, describe_key, equal, field, no_overload, numeric_cmp};
use super::{CelError, MAX_LIST_LENGTH, MAX_STRING_BYTES};

thread_local! {
    /// The cost spent so far by the evaluation running on this thread.
    pub(super) static COST: Cell<u64> = const { Cell::new(0) };
}

/// Adds `units` to the running evaluation's cost.
pub(super) fn charge(units: u64) {
    COST.with(|cost| cost.set(cost.get().saturating_add(units)));
}

/// Charges for reading or building `bytes` bytes of string: one unit per ten, as cel-go does.
pub(super) fn charge_bytes(bytes: usize) {
    charge((bytes as u64).div_ceil(10));
}

/// The cost spent so far by the evaluation running on this thread.
pub(super) fn spent() -> u64 {
    COST.with(Cell::get)
}

/// Refuses a string of `bytes` bytes, which an expression is about to build, when it is over
/// [`MAX_STRING_BYTES`]; otherwise charges for building it.
pub(super) fn check_string_size(bytes: usize) -> Result<(), CelError> {
    if bytes > MAX_STRING_BYTES {
        return Err(CelError::SizeLimitExceeded(format!(
            "the rule builds a string of {bytes} bytes, over the limit of {MAX_STRING_BYTES}"
        )));
    }
    charge_bytes(bytes);
    Ok(())
}

/// Refuses a list of `length` elements, which an expression is about to build, when it is
/// over [`MAX_LIST_LENGTH`]; otherwise charges for building it.
pub(super) fn check_list_size(length: usize) -> Result<(), CelError> {
    if length > MAX_LIST_LENGTH {
        return Err(CelError::SizeLimitExceeded(format!(
            "the rule builds a list of {length} elements, over the limit of {MAX_LIST_LENGTH}"
        )));
    }
    charge(length as u64);
    Ok(())
}

/// Checks a value a function or operator built against the size limits, charging for it.
fn check_built<'a>(value: Val<'a>) -> Result<Val<'a>, CelError> {
    match &value {
        Val::String(Cow::Owned(text)) => check_string_size(text.len())?,
        Val::List(items) => check_list_size(items.len())?,
        _ => {}
    }
    Ok(value)
}

/// What copying a value costs: its owned strings' bytes and its built lists' and maps'
/// elements (values of the input document are borrowed, so free to copy).
pub(super) fn copy_cost(value: &Val<'_>) -> u64 {
    match value {
        Val::String(Cow::Owned(text)) => (text.len() as u64).div_ceil(10),
        Val::List(items) => items.iter().fold(items.len() as u64, |total, item| {
            total.saturating_add(copy_cost(item))
        }),
        Val::Map(entries) => entries.iter().fold(entries.len() as u64, |total, (k, v)| {
            total
                .saturating_add(copy_cost(k))
                .saturating_add(copy_cost(v))
        }),
        _ => 0,
    }
}

pub(super) struct Evaluator<'a> {
    /// Variables in scope, innermost last.
    pub(super) locals: Vec<(String, Val<'a>)>,
    /// The most the evaluation may cost.
    pub(super) limit: u64,
}

impl<'a> Evaluator<'a> {
    pub(super) fn eval(&mut self, expr: &Expr) -> Result<Val<'a>, CelError> {
        charge(1);
        if spent() > self.limit {
            return Err(CelError::CostLimitExceeded);
        }
        match expr {
            Expr::Literal(literal) => Ok(match literal {
                Literal::Null => Val::Null,
                Literal::Bool(b) => Val::Bool(*b),
                Literal::Int(i) => Val::Int(*i),
                Literal::Uint(u) => Val::Uint(*u),
                Literal::Double(d) => Val::Double(*d),
                Literal::String(s) => {
                    charge_bytes(s.len());
                    Val::String(Cow::Owned(s.clone()))
                }
            }),
            Expr::Ident(name) => self.resolve(name),
            Expr::Select(operand, name) => {
                let target = self.eval(operand)?;
                field(&target, name)?.ok_or_else(|| CelError::NoSuchKey(name.clone()))
            }
            Expr::Has(operand, name) => {
                let target = self.eval(operand)?;
                field(&target, name).map(|found| Val::Bool(found.is_some()))
            }
            Expr::Index(operand, index) => {
                let target = self.eval(operand)?;
                let index = self.eval(index)?;
                index_value(target, &index)
            }
            Expr::Call {
                target,
                function,
                args,
            } => {
                let mut values = Vec::with_capacity(args.len() + 1);
                if let Some(target) = target {
                    values.push(self.eval(target)?);
                }
                for arg in args {
                    values.push(self.eval(arg)?);
                }
                call(function, target.is_some(), values).and_then(check_built)
            }
            Expr::List(items) => items
                .iter()
                .map(|item| self.eval(item))
                .collect::<Result<Vec<_>, _>>()
                .map(Val::List),
            Expr::Map(entries) => {
                let mut built: Vec<(Val<'a>, Val<'a>)> = Vec::with_capacity(entries.len());
                for (key, value) in entries {
                    let key = self.eval(key)?;
                    if !matches!(
                        key,
                        Val::String(_) | Val::Int(_) | Val::Uint(_) | Val::Bool(_)
                    ) {
                        return Err(CelError::Eval(format!(
                            "unsupported key type: {}",
                            key.type_name()
                        )));
                    }
                    if built.iter().any(|(k, _)| equal(k, &key)) {
                        return Err(CelError::Eval(format!(
                            "Failed with repeated key: {}",
                            describe_key(&key)
                        )));
                    }
                    let value = self.eval(value)?;
                    built.push((key, value));
                }
                Ok(Val::Map(built))
            }
            Expr::Unary(op, operand) => {
                let value = self.eval(operand)?;
                match (op, &value) {
                    (UnaryOp::Not, Val::Bool(b)) => Ok(Val::Bool(!b)),
                    (UnaryOp::Negate, Val::Int(i)) => i
                        .checked_neg()
                        .map(Val::Int)
                        .ok_or_else(|| CelError::Eval("integer overflow".into())),
                    (UnaryOp::Negate, Val::Double(d)) => Ok(Val::Double(-d)),
                    (UnaryOp::Negate, Val::Duration(d)) => Ok(Val::Duration(-d)),
                    (UnaryOp::Not, _) => Err(no_overload("!_", &[&value])),
                    (UnaryOp::Negate, _) => Err(no_overload("-_", &[&value])),
                }
            }
            Expr::Binary(op, left, right) => {
                let left = self.eval(left)?;
                let right = self.eval(right)?;
                binary(*op, left, right)
            }
            Expr::And(left, right) => self.logic(left, right, false),
            Expr::Or(left, right) => self.logic(left, right, true),
            Expr::Conditional(condition, then, otherwise) => match self.eval(condition)? {
                Val::Bool(true) => self.eval(then),
                Val::Bool(false) => self.eval(otherwise),
                other => Err(no_overload("_?_:_", &[&other])),
            },
            Expr::Comprehension {
                kind,
                range,
                variable,
                filter,
                body,
            } => self.comprehension(*kind, range, variable, filter.as_deref(), body),
        }
    }

    fn resolve(&self, name: &str) -> Result<Val<'a>, CelError> {
        if let Some((_, value)) = self.locals.iter().rev().find(|(local, _)| local == name) {
            charge(copy_cost(value));
            return Ok(value.clone());
        }
        let type_name = match name {
            "int" => "int",
            "uint" => "uint",
            "double" => "double",
            "bool" => "bool",
            "string" => "string",
            "bytes" => "bytes",
            "list" => "list",
            "map" => "map",
            "null_type" => "null_type",
            "type" => "type",
            _ => return Err(CelError::UndeclaredReference(name.to_string())),
        };
        Ok(Val::Type(type_name))
    }

    /// `&&` (`decisive` false) and `||` (`decisive` true): the decisive value on either side
    /// wins even over an error on the other, as CEL's commutative logic operators do.
    fn logic(&mut self, left: &Expr, right: &Expr, decisive: bool) -> Result<Val<'a>, CelError> {
        let left = self.eval(left);
        match &left {
            Ok(Val::Bool(b)) if *b == decisive => return Ok(Val::Bool(decisive)),
            Err(e) if e.is_limit() => return left,
            _ => {}
        }
        let right = self.eval(right);
        match &right {
            Ok(Val::Bool(b)) if *b == decisive => return Ok(Val::Bool(decisive)),
            Err(e) if e.is_limit() => return right,
            _ => {}
        }
        let operator = if decisive { "_||_" } else { "_&&_" };
        match (left, right) {
            (Ok(Val::Bool(_)), Ok(Val::Bool(_))) => Ok(Val::Bool(!decisive)),
            (Err(error), _) | (_, Err(error)) => Err(error),
            (Ok(left), Ok(right)) => Err(no_overload(operator, &[&left, &right])),
        }
    }

    /// Evaluates `expr` with `name` bound to `value`, unbinding it whatever the outcome.
    fn with_local(&mut self, name: &str, value: Val<'a>, expr: &Expr) -> Result<Val<'a>, CelError> {
        self.locals.push((name.to_string(), value));
        let result = self.eval(expr);
        self.locals.pop();
        result
    }

    fn predicate(
        &mut self,
        name: &str,
        value: Val<'a>,
        expr: &Expr,
        macro_name: &str,
    ) -> Result<bool, CelError> {
        match self.with_local(name, value, expr)? {
            Val::Bool(b) => Ok(b),
            other => Err(no_overload(macro_name, &[&other])),
        }
    }

    fn comprehension(
        &mut self,
        kind: Macro,
        range: &Expr,
        variable: &str,
        filter: Option<&Expr>,
        body: &Expr,
    ) -> Result<Val<'a>, CelError> {
        let range = self.eval(range)?;
        let elements = match (range.items(), range.entries()) {
            (Some(items), _) => items,
            (None, Some(entries)) => entries.into_iter().map(|(key, _)| key).collect(),
            (None, None) => return Err(no_overload("comprehension", &[&range])),
        };
        match kind {
            Macro::All | Macro::Exists => {
                // all: false wins over errors; exists: true does.
                let decisive = kind == Macro::Exists;
                let mut error = None;
                for element in elements {
                    match self.predicate(
                        variable,
                        element,
                        body,
                        if decisive { "exists" } else { "all" },
                    ) {
                        Ok(b) if b == decisive => return Ok(Val::Bool(decisive)),
                        Ok(_) => {}
                        Err(e) if e.is_limit() => return Err(e),
                        Err(e) => {
                            error.get_or_insert(e);
                        }
                    }
                }
                match error {
                    Some(e) => Err(e),
                    None => Ok(Val::Bool(!decisive)),
                }
            }
            Macro::ExistsOne => {
                let mut count = 0;
                for element in elements {
                    if self.predicate(variable, element, body, "exists_one")? {
                        count += 1;
                    }
                }
                Ok(Val::Bool(count == 1))
            }
            Macro::Filter => {
                let mut kept = Vec::new();
                for element in elements {
                    if self.predicate(variable, element.clone(), body, "filter")? {
                        kept.push(element);
                    }
                }
                check_list_size(kept.len())?;
                Ok(Val::List(kept))
            }
            Macro::Map => {
                let mut mapped = Vec::new();
                for element in elements {
                    if let Some(filter) = filter
                        && !self.predicate(variable, element.clone(), filter, "map")?
                    {
                        continue;
                    }
                    mapped.push(self.with_local(variable, element, body)?);
                    if mapped.len() > MAX_LIST_LENGTH {
                        check_list_size(mapped.len())?;
                    }
                }
                check_list_size(mapped.len())?;
                Ok(Val::List(mapped))
            }
        }
    }
}

/// `target[index]` on a list or a map.
fn index_value<'a>(target: Val<'a>, index: &Val<'a>) -> Result<Val<'a>, CelError> {
    if target.list_len().is_some() {
        let position = match index {
            Val::Int(i) => *i,
            Val::Uint(u) => i64::try_from(*u).unwrap_or(i64::MAX),
            Val::Double(d) if d.fract() == 0.0 && d.abs() < 9.2e18 => *d as i64,
            other => return Err(no_overload("_[_]", &[&target, other])),
        };
        let found = usize::try_from(position).ok().and_then(|p| match target {
            Val::List(mut items) if p < items.len() => Some(items.swap_remove(p)),
            Val::Json(Value::Array(items)) => items.get(p).map(Val::from_json),
            _ => None,
        });
        return found.ok_or(CelError::IndexOutOfBounds(position));
    }
    if target.is_map() {
        return target
            .lookup(index)?
            .ok_or_else(|| CelError::NoSuchKey(describe_key(index)));
    }
    Err(no_overload("_[_]", &[&target, index]))
}

fn binary<'a>(op: BinaryOp, left: Val<'a>, right: Val<'a>) -> Result<Val<'a>, CelError> {
    match op {
        BinaryOp::Equal => Ok(Val::Bool(equal(&left, &right))),
        BinaryOp::NotEqual => Ok(Val::Bool(!equal(&left, &right))),
        BinaryOp::In => {
            if let Some(items) = right.items() {
                return Ok(Val::Bool(items.iter().any(|item| equal(item, &left))));
            }
            if right.is_map() {
                return Ok(Val::Bool(right.lookup(&left)?.is_some()));
            }
            Err(no_overload("@in", &[&left, &right]))
        }
        BinaryOp::Less | BinaryOp::LessOrEqual | BinaryOp::Greater | BinaryOp::GreaterOrEqual => {
            let ordering = compare(&left, &right)
                .ok_or_else(|| no_overload(&format!("_{}_", op.symbol()), &[&left, &right]))?;
            // NaN compares false with everything.
            Ok(Val::Bool(ordering.is_some_and(|o| match op {
                BinaryOp::Less => o == Ordering::Less,
                BinaryOp::LessOrEqual => o != Ordering::Greater,
                BinaryOp::Greater => o == Ordering::Greater,
                _ => o != Ordering::Less,
            })))
        }
        BinaryOp::Add
        | BinaryOp::Subtract
        | BinaryOp::Multiply
        | BinaryOp::Divide
        | BinaryOp::Modulo => arithmetic(op, left, right),
    }
}

/// The order of two comparable values: `None` when the types do not compare, `Some(None)` when
/// they do but are unordered (NaN).
pub(super) fn compare(left: &Val<'_>, right: &Val<'_>) -> Option<Option<Ordering>> {
    if left.is_number() && right.is_number() {
        return Some(numeric_cmp(left, right));
    }
    match (left, right) {
        (Val::String(a), Val::String(b)) => {
            charge_bytes(a.len().min(b.len()));
            Some(Some(a.cmp(b)))
        }
        (Val::Bool(a), Val::Bool(b)) => Some(Some(a.cmp(b))),
        (Val::Duration(a), Val::Duration(b)) | (Val::Timestamp(a), Val::Timestamp(b)) => {
            Some(Some(a.cmp(b)))
        }
        _ => None,
    }
}

pub(super) fn arithmetic<'a>(
    op: BinaryOp,
    left: Val<'a>,
    right: Val<'a>,
) -> Result<Val<'a>, CelError> {
    use BinaryOp::{Add, Divide, Modulo, Multiply, Subtract};
    let overflow = || CelError::Eval("integer overflow".to_string());
    let unsigned_overflow = || CelError::Eval("unsigned integer overflow".to_string());
    match (op, &left, &right) {
        (Divide, Val::Int(_), Val::Int(0)) | (Divide, Val::Uint(_), Val::Uint(0)) => {
            Err(CelError::Eval("division by zero".into()))
        }
        (Modulo, Val::Int(_), Val::Int(0)) | (Modulo, Val::Uint(_), Val::Uint(0)) => {
            Err(CelError::Eval("modulus by zero".into()))
        }
        (_, Val::Int(a), Val::Int(b)) if op != Modulo || *b != -1 => {
            let result = match op {
                Add => a.checked_add(*b),
                Subtract => a.checked_sub(*b),
                Multiply => a.checked_mul(*b),
                Divide => a.checked_div(*b),
                _ => a.checked_rem(*b),
            };
            result.map(Val::Int).ok_or_else(overflow)
        }
        (Modulo, Val::Int(_), Val::Int(_)) => Ok(Val::Int(0)),
        (_, Val::Uint(a), Val::Uint(b)) => {
            let result = match op {
                Add => a.checked_add(*b),
                Subtract => a.checked_sub(*b),
                Multiply => a.checked_mul(*b),
                Divide => a.checked_div(*b),
                _ => a.checked_rem(*b),
            };
            result.map(Val::Uint).ok_or_else(unsigned_overflow)
        }
        (Add, Val::Double(a), Val::Double(b)) => Ok(Val::Double(a + b)),
        (Subtract, Val::Double(a), Val::Double(b)) => Ok(Val::Double(a - b)),
        (Multiply, Val::Double(a), Val::Double(b)) => Ok(Val::Double(a * b)),
        (Divide, Val::Double(a), Val::Double(b)) => Ok(Val::Double(a / b)),
        (Add, Val::String(a), Val::String(b)) => {
            check_string_size(a.len().saturating_add(b.len()))?;
            Ok(Val::String(Cow::Owned(format!("{a}{b}"))))
        }
        (Add, Val::Duration(a), Val::Duration(b)) => Ok(Val::Duration(a + b)),
        (Subtract, Val::Duration(a), Val::Duration(b)) => Ok(Val::Duration(a - b)),
        (Add, Val::Timestamp(t), Val::Duration(d)) | (Add, Val::Duration(d), Val::Timestamp(t)) => {
            Ok(Val::Timestamp(t + d))
        }
        (Subtract, Val::Timestamp(t), Val::Duration(d)) => Ok(Val::Timestamp(t - d)),
        (Subtract, Val::Timestamp(a), Val::Timestamp(b)) => Ok(Val::Duration(a - b)),
        _ => match (op, left.list_len(), right.list_len()) {
            (Add, Some(a), Some(b)) => {
                check_list_size(a.saturating_add(b))?;
                let (Some(mut a), Some(b)) = (left.items(), right.items()) else {
                    unreachable!("both operands are lists");
                };
                a.extend(b);
                Ok(Val::List(a))
            }
            _ => Err(no_overload(&format!("_{}_", op.symbol()), &[&left, &right])),
        },
    }
}
