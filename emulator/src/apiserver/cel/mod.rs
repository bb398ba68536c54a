//! A small evaluator for the Common Expression Language (CEL), as the API server runs it for the
//! `x-kubernetes-validations` rules of custom resources: a tokenizer, a recursive-descent parser
//! to an [`Expr`] tree, and an evaluator over `serde_json::Value` documents.
//!
//! It covers the CEL that CRD validation rules are written in: literals (ints, uints, doubles,
//! single-, double- and triple-quoted and raw strings, lists, maps), field selection and
//! `has()`, indexing, `in`, arithmetic, comparisons (also across int, uint and double), `!`,
//! `&&`/`||` with CEL's error-absorbing short-circuit, `?:`, the `all`, `exists`, `exists_one`,
//! `map` and `filter` macros over lists and map keys, the standard functions (`size`, `int`,
//! `uint`, `double`, `string`, `bool`, `type`, `dyn`, `duration`, `timestamp`, `matches`,
//! `contains`, `startsWith`, `endsWith`) and Kubernetes' extensions (`find`, `findAll`,
//! `lowerAscii`, `upperAscii`, `trim`, `split`, `replace`, `indexOf`, `lastIndexOf`,
//! `substring`, `charAt`, `join`, `isSorted`, `sum`, `min`, `max`, duration getters). Anything
//! else is a [`CelError`], never a panic. There is no static type checking (the API server
//! does that when the CRD is written).
//!
//! Evaluation is metered as cel-go meters it at run time: every evaluation step, comprehension
//! iteration, list element or map entry walked or copied, and every ten bytes of a string read
//! or built cost one unit, and an evaluation that spends more than its limit
//! ([`PER_CALL_LIMIT`], the API server's) stops with [`CelError::CostLimitExceeded`]. Strings
//! and lists an expression builds are capped ([`MAX_STRING_BYTES`], [`MAX_LIST_LENGTH`]);
//! building a bigger one is [`CelError::SizeLimitExceeded`]. So no rule can stall the emulated
//! API server or exhaust its memory.
//!
//! Its files:
//!
//! - `mod.rs` (this file): the public API — [`Program`] (parse once, evaluate many times),
//!   [`compile`] and [`regex`] with their process-wide caches, [`CelError`] and the limits;
//! - `lex.rs`: the tokenizer (literals, escapes, punctuation, reserved words);
//! - `parse.rs`: the syntax tree ([`Expr`] and its parts) and the recursive-descent parser,
//!   which expands `has()` and the comprehension macros;
//! - `value.rs`: [`Val`], the values expressions compute with over a borrowed JSON document,
//!   [`equal`] and numeric order across int, uint and double, and field selection;
//! - `eval.rs`: the evaluator (operators, `&&`/`||`, macros) and the cost meter it charges;
//! - `functions.rs`: the function library, dispatched by name and argument types;
//! - `time.rs`: durations and timestamps, parsed and printed as Go and CEL do;
//! - `tests.rs`: the tests, through the public API and the tokenizer.

mod eval;
mod functions;
mod lex;
mod parse;
#[cfg(test)]
mod tests;
mod time;
mod value;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use regex::Regex;

pub use parse::{BinaryOp, Expr, Literal, Macro, UnaryOp};
pub use value::{Val, equal};

use eval::{COST, Evaluator, spent};
use lex::{Token, tokenize};
use parse::Parser;

/// How many compiled programs and regular expressions the process-wide caches keep before they
/// start over.
const CACHE_LIMIT: usize = 1024;

/// The most one evaluation of an expression may cost, in cost units (see the module
/// documentation): the API server's per-call limit for validation rules (`PerCallLimit`).
pub const PER_CALL_LIMIT: u64 = 1_000_000;

/// The longest string, in bytes, an expression may build (1 MiB).
pub const MAX_STRING_BYTES: usize = 1 << 20;

/// The most elements a list an expression builds may have.
pub const MAX_LIST_LENGTH: usize = 1 << 18;

/// Why a CEL expression could not be parsed or evaluated. The evaluation errors are worded as
/// cel-go words them, since the API server copies them into its messages.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CelError {
    /// The expression is not valid CEL, or uses syntax this evaluator does not support.
    #[error("syntax error at column {column}: {message}")]
    Syntax {
        /// 1-based position (in characters) of the offending token.
        column: usize,
        /// What is wrong there.
        message: String,
    },
    /// No overload of an operator or function takes these argument types.
    #[error("no such overload: {0}")]
    NoSuchOverload(String),
    /// A map has no entry under the key, or an object no such field.
    #[error("no such key: {0}")]
    NoSuchKey(String),
    /// A list index outside the list.
    #[error("index out of bounds: {0}")]
    IndexOutOfBounds(i64),
    /// An identifier that is neither a variable in scope nor a type name.
    #[error("undeclared reference to '{0}'")]
    UndeclaredReference(String),
    /// A function (or method) this evaluator does not know.
    #[error("undeclared reference to '{0}': unknown function")]
    UnknownFunction(String),
    /// Any other failure at evaluation time: a conversion, an overflow, a division by zero, a
    /// bad regular expression.
    #[error("{0}")]
    Eval(String),
    /// The evaluation cost more than its limit ([`PER_CALL_LIMIT`]) and was stopped; worded as
    /// cel-go words it.
    #[error("operation cancelled: actual cost limit exceeded")]
    CostLimitExceeded,
    /// The expression would build a string or list over [`MAX_STRING_BYTES`] or
    /// [`MAX_LIST_LENGTH`]; says which and how big.
    #[error("operation cancelled: actual cost limit exceeded: {0}")]
    SizeLimitExceeded(String),
}

impl CelError {
    /// Whether the evaluation was stopped for spending too much (cost or size): an error no
    /// `&&`, `||`, `all` or `exists` absorbs.
    pub fn is_limit(&self) -> bool {
        matches!(
            self,
            CelError::CostLimitExceeded | CelError::SizeLimitExceeded(_)
        )
    }
}

fn syntax(column: usize, message: impl Into<String>) -> CelError {
    CelError::Syntax {
        column,
        message: message.into(),
    }
}

/// A parsed expression, ready to be evaluated any number of times.
#[derive(Debug, Clone, PartialEq)]
pub struct Program {
    source: String,
    expr: Expr,
}

impl Program {
    /// Parses `source`.
    pub fn parse(source: &str) -> Result<Program, CelError> {
        let mut parser = Parser {
            tokens: tokenize(source)?,
            position: 0,
            depth: 0,
        };
        let expr = parser.parse_expr()?;
        if parser.peek() != &Token::End {
            return Err(parser.unexpected());
        }
        Ok(Program {
            source: source.to_string(),
            expr,
        })
    }

    /// The text the program was parsed from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The syntax tree.
    pub fn expr(&self) -> &Expr {
        &self.expr
    }

    /// Whether the identifier `name` occurs in the program.
    pub fn references(&self, name: &str) -> bool {
        self.expr.references(name)
    }

    /// Evaluates the program with the given variables in scope, within [`PER_CALL_LIMIT`].
    pub fn evaluate<'a>(&self, variables: &[(&str, Val<'a>)]) -> Result<Val<'a>, CelError> {
        self.evaluate_metered(variables, PER_CALL_LIMIT).0
    }

    /// Evaluates the program with the given variables in scope, stopping with
    /// [`CelError::CostLimitExceeded`] once it has cost more than `limit`; also returns what
    /// the evaluation cost.
    pub fn evaluate_metered<'a>(
        &self,
        variables: &[(&str, Val<'a>)],
        limit: u64,
    ) -> (Result<Val<'a>, CelError>, u64) {
        COST.with(|cost| cost.set(0));
        let mut evaluator = Evaluator {
            locals: variables
                .iter()
                .map(|(name, value)| (name.to_string(), value.clone().flat()))
                .collect(),
            limit,
        };
        let result = evaluator.eval(&self.expr);
        let cost = spent();
        COST.with(|cost| cost.set(0));
        match result {
            Ok(_) if cost > limit => (Err(CelError::CostLimitExceeded), cost),
            result => (result, cost),
        }
    }
}

/// Parses `source`, or returns the program already parsed from the same text (validation
/// rules are evaluated on every write; parsing them once is enough).
pub fn compile(source: &str) -> Result<Arc<Program>, CelError> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Program>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(program) = lock(cache).get(source) {
        return Ok(program.clone());
    }
    let program = Arc::new(Program::parse(source)?);
    let mut programs = lock(cache);
    if programs.len() >= CACHE_LIMIT {
        programs.clear();
    }
    programs.insert(source.to_string(), program.clone());
    Ok(program)
}

/// Compiles a regular expression (RE2 syntax, as Go's `regexp` and so the API server use),
/// caching it for the next call with the same pattern. Used for CEL's `matches`/`find` and for
/// the schema's `pattern`.
pub fn regex(pattern: &str) -> Result<Regex, regex::Error> {
    static CACHE: OnceLock<Mutex<HashMap<String, Regex>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(found) = lock(cache).get(pattern) {
        return Ok(found.clone());
    }
    let compiled = Regex::new(pattern)?;
    let mut compiled_patterns = lock(cache);
    if compiled_patterns.len() >= CACHE_LIMIT {
        compiled_patterns.clear();
    }
    compiled_patterns.insert(pattern.to_string(), compiled.clone());
    Ok(compiled)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
