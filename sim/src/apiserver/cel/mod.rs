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

use std::borrow::Cow;
use std::cell::Cell;
use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use joinery_core::clock::{civil_from_days, days_from_civil};
use regex::Regex;
use serde_json::Value;

/// How deeply expressions may nest (each parenthesis, operator in a chain, member access or
/// macro counts); deeper input is a syntax error rather than a stack overflow.
const MAX_DEPTH: usize = 128;

/// How many compiled programs and regular expressions the process-wide caches keep before they
/// start over.
const CACHE_LIMIT: usize = 1024;

const NANOS_PER_SECOND: i128 = 1_000_000_000;

/// The most one evaluation of an expression may cost, in cost units (see the module
/// documentation): the API server's per-call limit for validation rules (`PerCallLimit`).
pub const PER_CALL_LIMIT: u64 = 1_000_000;

/// The longest string, in bytes, an expression may build (1 MiB).
pub const MAX_STRING_BYTES: usize = 1 << 20;

/// The most elements a list an expression builds may have.
pub const MAX_LIST_LENGTH: usize = 1 << 18;

thread_local! {
    /// The cost spent so far by the evaluation running on this thread.
    static COST: Cell<u64> = const { Cell::new(0) };
}

/// Adds `units` to the running evaluation's cost.
fn charge(units: u64) {
    COST.with(|cost| cost.set(cost.get().saturating_add(units)));
}

/// Charges for reading or building `bytes` bytes of string: one unit per ten, as cel-go does.
fn charge_bytes(bytes: usize) {
    charge((bytes as u64).div_ceil(10));
}

/// The cost spent so far by the evaluation running on this thread.
fn spent() -> u64 {
    COST.with(Cell::get)
}

/// Refuses a string of `bytes` bytes, which an expression is about to build, when it is over
/// [`MAX_STRING_BYTES`]; otherwise charges for building it.
fn check_string_size(bytes: usize) -> Result<(), CelError> {
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
fn check_list_size(length: usize) -> Result<(), CelError> {
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
fn copy_cost(value: &Val<'_>) -> u64 {
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

/// How an infix operator joins its two operands.
#[derive(Clone, Copy)]
enum Join {
    Or,
    And,
    Binary(BinaryOp),
}

impl Join {
    fn apply(self, left: Expr, right: Expr) -> Expr {
        let (left, right) = (Box::new(left), Box::new(right));
        match self {
            Join::Or => Expr::Or(left, right),
            Join::And => Expr::And(left, right),
            Join::Binary(op) => Expr::Binary(op, left, right),
        }
    }
}

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

// ---------------------------------------------------------------------------------------------
// Syntax tree
// ---------------------------------------------------------------------------------------------

/// A literal constant.
#[derive(Debug, Clone, PartialEq)]
pub enum Literal {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// A signed 64-bit integer (`42`, `-7`, `0x1F`).
    Int(i64),
    /// An unsigned 64-bit integer (`42u`).
    Uint(u64),
    /// A double (`1.5`, `2e3`, `.5`).
    Double(f64),
    /// A string, escapes already decoded.
    String(String),
}

/// A prefix operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnaryOp {
    /// `!`: logical negation.
    Not,
    /// `-`: arithmetic negation.
    Negate,
}

/// An infix operator other than `&&` and `||` (which have their own nodes, being lazy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    /// `+`
    Add,
    /// `-`
    Subtract,
    /// `*`
    Multiply,
    /// `/`
    Divide,
    /// `%`
    Modulo,
    /// `==`
    Equal,
    /// `!=`
    NotEqual,
    /// `<`
    Less,
    /// `<=`
    LessOrEqual,
    /// `>`
    Greater,
    /// `>=`
    GreaterOrEqual,
    /// `in`: list membership or map key presence.
    In,
}

impl BinaryOp {
    fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Subtract => "-",
            BinaryOp::Multiply => "*",
            BinaryOp::Divide => "/",
            BinaryOp::Modulo => "%",
            BinaryOp::Equal => "==",
            BinaryOp::NotEqual => "!=",
            BinaryOp::Less => "<",
            BinaryOp::LessOrEqual => "<=",
            BinaryOp::Greater => ">",
            BinaryOp::GreaterOrEqual => ">=",
            BinaryOp::In => "in",
        }
    }
}

/// A comprehension macro: `range.all(x, p)` and its siblings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Macro {
    /// `all(x, p)`: `p` holds for every element.
    All,
    /// `exists(x, p)`: `p` holds for some element.
    Exists,
    /// `exists_one(x, p)`: `p` holds for exactly one element.
    ExistsOne,
    /// `map(x, t)` or `map(x, p, t)`: the elements transformed (those satisfying `p`).
    Map,
    /// `filter(x, p)`: the elements satisfying `p`.
    Filter,
}

/// A parsed CEL expression.
#[derive(Debug, Clone, PartialEq)]
pub enum Expr {
    /// A constant.
    Literal(Literal),
    /// A variable (`self`, `oldSelf`, a macro variable) or a type name (`int`, `string`...).
    Ident(String),
    /// Field selection: `operand.field`.
    Select(Box<Expr>, String),
    /// The `has(operand.field)` macro: whether the field is present.
    Has(Box<Expr>, String),
    /// Indexing: `operand[index]`.
    Index(Box<Expr>, Box<Expr>),
    /// A function call, `f(args)`, or a method call, `target.f(args)`.
    Call {
        /// The receiver of a method call; `None` for a global call.
        target: Option<Box<Expr>>,
        /// The function name.
        function: String,
        /// The arguments.
        args: Vec<Expr>,
    },
    /// A list literal.
    List(Vec<Expr>),
    /// A map literal, entries in source order.
    Map(Vec<(Expr, Expr)>),
    /// A prefix operator applied to an operand.
    Unary(UnaryOp, Box<Expr>),
    /// An infix operator applied to two operands.
    Binary(BinaryOp, Box<Expr>, Box<Expr>),
    /// `left && right`.
    And(Box<Expr>, Box<Expr>),
    /// `left || right`.
    Or(Box<Expr>, Box<Expr>),
    /// `condition ? then : otherwise`.
    Conditional(Box<Expr>, Box<Expr>, Box<Expr>),
    /// A comprehension macro over the elements (or map keys) of `range`.
    Comprehension {
        /// Which macro.
        kind: Macro,
        /// The list or map iterated over.
        range: Box<Expr>,
        /// The name each element is bound to.
        variable: String,
        /// The predicate of the three-argument `map(x, p, t)`; `None` otherwise.
        filter: Option<Box<Expr>>,
        /// The predicate (or, for `map`, the transform).
        body: Box<Expr>,
    },
}

impl Expr {
    /// Whether the identifier `name` occurs anywhere in the expression (`oldSelf` makes a
    /// validation rule a transition rule).
    pub fn references(&self, name: &str) -> bool {
        match self {
            Expr::Literal(_) => false,
            Expr::Ident(ident) => ident == name,
            Expr::Select(operand, _) | Expr::Has(operand, _) | Expr::Unary(_, operand) => {
                operand.references(name)
            }
            Expr::Index(left, right)
            | Expr::Binary(_, left, right)
            | Expr::And(left, right)
            | Expr::Or(left, right) => left.references(name) || right.references(name),
            Expr::Call { target, args, .. } => {
                target.as_ref().is_some_and(|t| t.references(name))
                    || args.iter().any(|a| a.references(name))
            }
            Expr::List(items) => items.iter().any(|i| i.references(name)),
            Expr::Map(entries) => entries
                .iter()
                .any(|(k, v)| k.references(name) || v.references(name)),
            Expr::Conditional(c, t, e) => {
                c.references(name) || t.references(name) || e.references(name)
            }
            Expr::Comprehension {
                range,
                filter,
                body,
                ..
            } => {
                range.references(name)
                    || filter.as_ref().is_some_and(|f| f.references(name))
                    || body.references(name)
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tokenizer
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Int(u64),
    Uint(u64),
    Double(f64),
    Str(String),
    Punct(&'static str),
    End,
}

/// Longest first, so that `==` is not read as two tokens.
const PUNCTUATION: &[&str] = &[
    "==", "!=", "<=", ">=", "&&", "||", "+", "-", "*", "/", "%", "!", "<", ">", "?", ":", ".", ",",
    "[", "]", "(", ")", "{", "}",
];

/// Words CEL reserves: they may not name variables or functions.
const RESERVED: &[&str] = &[
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "in",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

/// The source as tokens with their 1-based columns; always ends with [`Token::End`].
fn tokenize(source: &str) -> Result<Vec<(Token, usize)>, CelError> {
    let chars: Vec<char> = source.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while let Some(&c) = chars.get(i) {
        let column = i + 1;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c == '/' && chars.get(i + 1) == Some(&'/') {
            while chars.get(i).is_some_and(|&c| c != '\n') {
                i += 1;
            }
            continue;
        }
        if c.is_ascii_digit() || (c == '.' && chars.get(i + 1).is_some_and(char::is_ascii_digit)) {
            let (token, next) = lex_number(&chars, i)?;
            tokens.push((token, column));
            i = next;
            continue;
        }
        if c == '_' || c.is_ascii_alphabetic() {
            let start = i;
            while chars
                .get(i)
                .is_some_and(|&c| c == '_' || c.is_ascii_alphanumeric())
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            if matches!(chars.get(i), Some('"' | '\'')) {
                match word.to_ascii_lowercase().as_str() {
                    "r" => {
                        let (text, next) = lex_string(&chars, i, true)?;
                        tokens.push((Token::Str(text), column));
                        i = next;
                        continue;
                    }
                    "b" | "rb" | "br" => {
                        return Err(syntax(column, "bytes literals are not supported"));
                    }
                    _ => {}
                }
            }
            tokens.push((Token::Ident(word), column));
            continue;
        }
        if c == '"' || c == '\'' {
            let (text, next) = lex_string(&chars, i, false)?;
            tokens.push((Token::Str(text), column));
            i = next;
            continue;
        }
        let ahead: String = chars[i..(i + 2).min(chars.len())].iter().collect();
        match PUNCTUATION.iter().find(|p| ahead.starts_with(**p)) {
            Some(punct) => {
                tokens.push((Token::Punct(punct), column));
                i += punct.len();
            }
            None => return Err(syntax(column, format!("unexpected character '{c}'"))),
        }
    }
    tokens.push((Token::End, chars.len() + 1));
    Ok(tokens)
}

fn lex_number(chars: &[char], start: usize) -> Result<(Token, usize), CelError> {
    let column = start + 1;
    let digits_from = |mut i: usize, radix: u32| {
        while chars.get(i).is_some_and(|c| c.is_digit(radix)) {
            i += 1;
        }
        i
    };
    if chars.get(start) == Some(&'0') && matches!(chars.get(start + 1), Some('x' | 'X')) {
        let end = digits_from(start + 2, 16);
        let digits: String = chars[start + 2..end].iter().collect();
        let value = u64::from_str_radix(&digits, 16)
            .map_err(|_| syntax(column, "invalid hexadecimal literal"))?;
        return Ok(unsigned_suffix(chars, end, value));
    }
    let mut i = digits_from(start, 10);
    let mut is_double = false;
    if chars.get(i) == Some(&'.') && chars.get(i + 1).is_some_and(char::is_ascii_digit) {
        is_double = true;
        i = digits_from(i + 1, 10);
    }
    if matches!(chars.get(i), Some('e' | 'E')) {
        let mut j = i + 1;
        if matches!(chars.get(j), Some('+' | '-')) {
            j += 1;
        }
        if chars.get(j).is_some_and(char::is_ascii_digit) {
            is_double = true;
            i = digits_from(j, 10);
        }
    }
    let text: String = chars[start..i].iter().collect();
    if is_double {
        let value: f64 = text
            .parse()
            .map_err(|_| syntax(column, format!("invalid number '{text}'")))?;
        return Ok((Token::Double(value), i));
    }
    let value: u64 = text
        .parse()
        .map_err(|_| syntax(column, format!("integer literal '{text}' is out of range")))?;
    Ok(unsigned_suffix(chars, i, value))
}

fn unsigned_suffix(chars: &[char], i: usize, value: u64) -> (Token, usize) {
    if matches!(chars.get(i), Some('u' | 'U')) {
        (Token::Uint(value), i + 1)
    } else {
        (Token::Int(value), i)
    }
}

/// A string literal starting at the quote `chars[start]`; returns its text and the index after
/// the closing quote.
fn lex_string(chars: &[char], start: usize, raw: bool) -> Result<(String, usize), CelError> {
    let column = start + 1;
    let quote = chars[start];
    let triple = chars.get(start + 1) == Some(&quote) && chars.get(start + 2) == Some(&quote);
    let mut i = start + if triple { 3 } else { 1 };
    let mut text = String::new();
    loop {
        let Some(&c) = chars.get(i) else {
            return Err(syntax(column, "unterminated string literal"));
        };
        if c == quote
            && (!triple || (chars.get(i + 1) == Some(&quote) && chars.get(i + 2) == Some(&quote)))
        {
            return Ok((text, i + if triple { 3 } else { 1 }));
        }
        if !triple && (c == '\n' || c == '\r') {
            return Err(syntax(column, "unterminated string literal"));
        }
        if c == '\\' && !raw {
            let (decoded, next) = lex_escape(chars, i)?;
            text.push(decoded);
            i = next;
        } else {
            text.push(c);
            i += 1;
        }
    }
}

/// The escape sequence at `chars[start]` (a backslash).
fn lex_escape(chars: &[char], start: usize) -> Result<(char, usize), CelError> {
    let column = start + 1;
    let Some(&kind) = chars.get(start + 1) else {
        return Err(syntax(column, "unterminated string literal"));
    };
    let simple = match kind {
        'a' => Some('\u{7}'),
        'b' => Some('\u{8}'),
        'f' => Some('\u{c}'),
        'n' => Some('\n'),
        'r' => Some('\r'),
        't' => Some('\t'),
        'v' => Some('\u{b}'),
        '\\' | '\'' | '"' | '`' | '?' => Some(kind),
        _ => None,
    };
    if let Some(decoded) = simple {
        return Ok((decoded, start + 2));
    }
    let (from, radix, len) = match kind {
        'x' | 'X' => (start + 2, 16, 2),
        'u' => (start + 2, 16, 4),
        'U' => (start + 2, 16, 8),
        '0'..='3' => (start + 1, 8, 3),
        _ => {
            return Err(syntax(
                column,
                format!("invalid escape sequence '\\{kind}'"),
            ));
        }
    };
    let digits = chars
        .get(from..from + len)
        .filter(|d| d.iter().all(|c| c.is_digit(radix)));
    let code = digits
        .and_then(|d| u32::from_str_radix(&d.iter().collect::<String>(), radix).ok())
        .and_then(char::from_u32)
        .ok_or_else(|| syntax(column, format!("invalid escape sequence '\\{kind}'")))?;
    Ok((code, from + len))
}

// ---------------------------------------------------------------------------------------------
// Parser
// ---------------------------------------------------------------------------------------------

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

struct Parser {
    tokens: Vec<(Token, usize)>,
    position: usize,
    depth: usize,
}

impl Parser {
    /// The current token; the token list always ends with `End`, which is never stepped past.
    fn peek(&self) -> &Token {
        &self.tokens[self.position].0
    }

    fn column(&self) -> usize {
        self.tokens[self.position].1
    }

    fn advance(&mut self) {
        if self.position + 1 < self.tokens.len() {
            self.position += 1;
        }
    }

    fn eat(&mut self, punct: &str) -> bool {
        if matches!(self.peek(), Token::Punct(p) if *p == punct) {
            self.advance();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, punct: &str) -> Result<(), CelError> {
        if self.eat(punct) {
            Ok(())
        } else {
            Err(syntax(
                self.column(),
                format!("expected '{punct}', found {}", self.describe()),
            ))
        }
    }

    fn describe(&self) -> String {
        match self.peek() {
            Token::Ident(name) => format!("'{name}'"),
            Token::Int(n) | Token::Uint(n) => format!("'{n}'"),
            Token::Double(d) => format!("'{d}'"),
            Token::Str(s) => format!("string {s:?}"),
            Token::Punct(p) => format!("'{p}'"),
            Token::End => "end of expression".to_string(),
        }
    }

    fn unexpected(&self) -> CelError {
        syntax(self.column(), format!("unexpected {}", self.describe()))
    }

    /// One level deeper; returns the depth to restore when the level is done.
    fn deeper(&mut self) -> Result<usize, CelError> {
        let saved = self.depth;
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(syntax(
                self.column(),
                format!("expression nests more than {MAX_DEPTH} levels deep"),
            ));
        }
        Ok(saved)
    }

    /// `Expr = Or ["?" Or ":" Expr]`
    fn parse_expr(&mut self) -> Result<Expr, CelError> {
        let saved = self.deeper()?;
        let condition = self.parse_or()?;
        let expr = if self.eat("?") {
            let then = self.parse_or()?;
            self.expect(":")?;
            let otherwise = self.parse_expr()?;
            Expr::Conditional(Box::new(condition), Box::new(then), Box::new(otherwise))
        } else {
            condition
        };
        self.depth = saved;
        Ok(expr)
    }

    /// `Or = And {"||" And}`
    fn parse_or(&mut self) -> Result<Expr, CelError> {
        self.parse_left_associative(Self::parse_and, |token| match token {
            Token::Punct("||") => Some(Join::Or),
            _ => None,
        })
    }

    /// `And = Relation {"&&" Relation}`
    fn parse_and(&mut self) -> Result<Expr, CelError> {
        self.parse_left_associative(Self::parse_relation, |token| match token {
            Token::Punct("&&") => Some(Join::And),
            _ => None,
        })
    }

    /// `Relation = Addition {("<" | "<=" | ">" | ">=" | "==" | "!=" | "in") Addition}`
    fn parse_relation(&mut self) -> Result<Expr, CelError> {
        self.parse_left_associative(Self::parse_addition, |token| match token {
            Token::Punct("==") => Some(Join::Binary(BinaryOp::Equal)),
            Token::Punct("!=") => Some(Join::Binary(BinaryOp::NotEqual)),
            Token::Punct("<") => Some(Join::Binary(BinaryOp::Less)),
            Token::Punct("<=") => Some(Join::Binary(BinaryOp::LessOrEqual)),
            Token::Punct(">") => Some(Join::Binary(BinaryOp::Greater)),
            Token::Punct(">=") => Some(Join::Binary(BinaryOp::GreaterOrEqual)),
            Token::Ident(word) if word == "in" => Some(Join::Binary(BinaryOp::In)),
            _ => None,
        })
    }

    /// `Addition = Multiplication {("+" | "-") Multiplication}`
    fn parse_addition(&mut self) -> Result<Expr, CelError> {
        self.parse_left_associative(Self::parse_multiplication, |token| match token {
            Token::Punct("+") => Some(Join::Binary(BinaryOp::Add)),
            Token::Punct("-") => Some(Join::Binary(BinaryOp::Subtract)),
            _ => None,
        })
    }

    /// `Multiplication = Unary {("*" | "/" | "%") Unary}`
    fn parse_multiplication(&mut self) -> Result<Expr, CelError> {
        self.parse_left_associative(Self::parse_unary, |token| match token {
            Token::Punct("*") => Some(Join::Binary(BinaryOp::Multiply)),
            Token::Punct("/") => Some(Join::Binary(BinaryOp::Divide)),
            Token::Punct("%") => Some(Join::Binary(BinaryOp::Modulo)),
            _ => None,
        })
    }

    /// One level of left-associative operators: `Operand {op Operand}`, where `combine_with`
    /// says which tokens are this level's operators and how each joins its operands.
    fn parse_left_associative(
        &mut self,
        operand: fn(&mut Self) -> Result<Expr, CelError>,
        combine_with: fn(&Token) -> Option<Join>,
    ) -> Result<Expr, CelError> {
        let saved = self.depth;
        let mut left = operand(self)?;
        while let Some(join) = combine_with(self.peek()) {
            self.advance();
            self.deeper()?;
            let right = operand(self)?;
            left = join.apply(left, right);
        }
        self.depth = saved;
        Ok(left)
    }

    /// `Unary = Member | "!" Unary | "-" Unary` (a `-` before an integer literal makes a
    /// negative literal, so that `-9223372036854775808` is representable).
    fn parse_unary(&mut self) -> Result<Expr, CelError> {
        let saved = self.depth;
        let expr = if self.eat("!") {
            self.deeper()?;
            Expr::Unary(UnaryOp::Not, Box::new(self.parse_unary()?))
        } else if self.eat("-") {
            self.deeper()?;
            if let Token::Int(magnitude) = *self.peek() {
                let column = self.column();
                self.advance();
                let value = i64::try_from(-i128::from(magnitude))
                    .map_err(|_| syntax(column, "integer literal is out of range"))?;
                self.parse_member_suffix(Expr::Literal(Literal::Int(value)))?
            } else {
                Expr::Unary(UnaryOp::Negate, Box::new(self.parse_unary()?))
            }
        } else {
            let primary = self.parse_primary()?;
            self.parse_member_suffix(primary)?
        };
        self.depth = saved;
        Ok(expr)
    }

    /// `Member = Primary {"." IDENT ["(" Args ")"] | "[" Expr "]"}`
    fn parse_member_suffix(&mut self, mut expr: Expr) -> Result<Expr, CelError> {
        let saved = self.depth;
        loop {
            if self.eat(".") {
                self.deeper()?;
                let column = self.column();
                let Token::Ident(name) = self.peek().clone() else {
                    return Err(syntax(
                        column,
                        format!(
                            "expected a field or method name after '.', found {}",
                            self.describe()
                        ),
                    ));
                };
                self.advance();
                expr = if self.eat("(") {
                    let args = self.parse_args()?;
                    method_or_macro(expr, name, args, column)?
                } else {
                    Expr::Select(Box::new(expr), name)
                };
            } else if self.eat("[") {
                self.deeper()?;
                let index = self.parse_expr()?;
                self.expect("]")?;
                expr = Expr::Index(Box::new(expr), Box::new(index));
            } else {
                break;
            }
        }
        self.depth = saved;
        Ok(expr)
    }

    /// Literals, identifiers, global calls, `( Expr )`, list and map literals.
    fn parse_primary(&mut self) -> Result<Expr, CelError> {
        let column = self.column();
        let token = self.peek().clone();
        match token {
            Token::Int(n) => {
                self.advance();
                let value = i64::try_from(n).map_err(|_| {
                    syntax(column, format!("integer literal '{n}' is out of range"))
                })?;
                Ok(Expr::Literal(Literal::Int(value)))
            }
            Token::Uint(n) => {
                self.advance();
                Ok(Expr::Literal(Literal::Uint(n)))
            }
            Token::Double(d) => {
                self.advance();
                Ok(Expr::Literal(Literal::Double(d)))
            }
            Token::Str(text) => {
                self.advance();
                Ok(Expr::Literal(Literal::String(text)))
            }
            Token::Ident(name) => {
                self.advance();
                match name.as_str() {
                    "true" => Ok(Expr::Literal(Literal::Bool(true))),
                    "false" => Ok(Expr::Literal(Literal::Bool(false))),
                    "null" => Ok(Expr::Literal(Literal::Null)),
                    _ => self.parse_identifier(name, column),
                }
            }
            Token::Punct(".") => {
                // A leading dot names an identifier in the root scope: `.self`.
                self.advance();
                let column = self.column();
                let Token::Ident(name) = self.peek().clone() else {
                    return Err(syntax(
                        column,
                        format!(
                            "expected an identifier after '.', found {}",
                            self.describe()
                        ),
                    ));
                };
                self.advance();
                self.parse_identifier(name, column)
            }
            Token::Punct("(") => {
                self.advance();
                let inner = self.parse_expr()?;
                self.expect(")")?;
                Ok(inner)
            }
            Token::Punct("[") => {
                self.advance();
                let mut items = Vec::new();
                while !self.eat("]") {
                    items.push(self.parse_expr()?);
                    if !self.eat(",") {
                        self.expect("]")?;
                        break;
                    }
                }
                Ok(Expr::List(items))
            }
            Token::Punct("{") => {
                self.advance();
                let mut entries = Vec::new();
                while !self.eat("}") {
                    let key = self.parse_expr()?;
                    self.expect(":")?;
                    let value = self.parse_expr()?;
                    entries.push((key, value));
                    if !self.eat(",") {
                        self.expect("}")?;
                        break;
                    }
                }
                Ok(Expr::Map(entries))
            }
            Token::Punct(_) | Token::End => Err(self.unexpected()),
        }
    }

    /// An identifier, or a global call when `(` follows.
    fn parse_identifier(&mut self, name: String, column: usize) -> Result<Expr, CelError> {
        if RESERVED.contains(&name.as_str()) {
            return Err(syntax(column, format!("reserved identifier '{name}'")));
        }
        if !self.eat("(") {
            return Ok(Expr::Ident(name));
        }
        let mut args = self.parse_args()?;
        if name == "has" {
            return match (args.pop(), args.is_empty()) {
                (Some(Expr::Select(operand, field)), true) => Ok(Expr::Has(operand, field)),
                _ => Err(syntax(
                    column,
                    "invalid argument to has() macro: expected a field selection such as has(self.field)",
                )),
            };
        }
        Ok(Expr::Call {
            target: None,
            function: name,
            args,
        })
    }

    /// Call arguments after the opening parenthesis, through the closing one.
    fn parse_args(&mut self) -> Result<Vec<Expr>, CelError> {
        let mut args = Vec::new();
        if self.eat(")") {
            return Ok(args);
        }
        loop {
            args.push(self.parse_expr()?);
            if self.eat(")") {
                return Ok(args);
            }
            self.expect(",")?;
        }
    }
}

/// `target.name(args)`: a comprehension macro, or a method call.
fn method_or_macro(
    target: Expr,
    name: String,
    args: Vec<Expr>,
    column: usize,
) -> Result<Expr, CelError> {
    let kind = match name.as_str() {
        "all" => Macro::All,
        "exists" => Macro::Exists,
        "exists_one" => Macro::ExistsOne,
        "map" => Macro::Map,
        "filter" => Macro::Filter,
        _ => {
            return Ok(Expr::Call {
                target: Some(Box::new(target)),
                function: name,
                args,
            });
        }
    };
    let arity_fits = args.len() == 2 || (kind == Macro::Map && args.len() == 3);
    if !arity_fits {
        let expected = if kind == Macro::Map { "2 or 3" } else { "2" };
        return Err(syntax(
            column,
            format!("{name}() takes {expected} arguments, got {}", args.len()),
        ));
    }
    let mut args = args.into_iter();
    let variable = match args.next() {
        Some(Expr::Ident(variable)) => variable,
        _ => {
            return Err(syntax(
                column,
                format!("the first argument of {name}() must be a variable name"),
            ));
        }
    };
    let mut rest: Vec<Expr> = args.collect();
    let body = rest
        .pop()
        .ok_or_else(|| syntax(column, format!("{name}() needs a predicate")))?;
    let filter = rest.pop().map(Box::new);
    Ok(Expr::Comprehension {
        kind,
        range: Box::new(target),
        variable,
        filter,
        body: Box::new(body),
    })
}

// ---------------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------------

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
    fn flat(self) -> Val<'a> {
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
    fn items(&self) -> Option<Vec<Val<'a>>> {
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
    fn list_len(&self) -> Option<usize> {
        match self {
            Val::List(items) => Some(items.len()),
            Val::Json(Value::Array(items)) => Some(items.len()),
            _ => None,
        }
    }

    /// The entries, when the value is a map.
    fn entries(&self) -> Option<Vec<(Val<'a>, Val<'a>)>> {
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
    fn is_map(&self) -> bool {
        matches!(self, Val::Map(_) | Val::Json(Value::Object(_)))
    }

    fn is_number(&self) -> bool {
        matches!(self, Val::Int(_) | Val::Uint(_) | Val::Double(_))
    }

    /// The value under `key`, when the value is a map; `Err` when it is not a map.
    fn lookup(&self, key: &Val<'a>) -> Result<Option<Val<'a>>, CelError> {
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
fn numeric_cmp(left: &Val<'_>, right: &Val<'_>) -> Option<Ordering> {
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

fn no_overload(function: &str, args: &[&Val<'_>]) -> CelError {
    let types: Vec<&str> = args.iter().map(|a| a.type_name()).collect();
    CelError::NoSuchOverload(format!("{function}({})", types.join(", ")))
}

fn describe_key(key: &Val<'_>) -> String {
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
fn field<'a>(target: &Val<'a>, name: &str) -> Result<Option<Val<'a>>, CelError> {
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

// ---------------------------------------------------------------------------------------------
// Evaluator
// ---------------------------------------------------------------------------------------------

struct Evaluator<'a> {
    /// Variables in scope, innermost last.
    locals: Vec<(String, Val<'a>)>,
    /// The most the evaluation may cost.
    limit: u64,
}

impl<'a> Evaluator<'a> {
    fn eval(&mut self, expr: &Expr) -> Result<Val<'a>, CelError> {
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
fn compare(left: &Val<'_>, right: &Val<'_>) -> Option<Option<Ordering>> {
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

fn arithmetic<'a>(op: BinaryOp, left: Val<'a>, right: Val<'a>) -> Result<Val<'a>, CelError> {
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

// ---------------------------------------------------------------------------------------------
// Functions
// ---------------------------------------------------------------------------------------------

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
fn call<'a>(function: &str, is_method: bool, values: Vec<Val<'a>>) -> Result<Val<'a>, CelError> {
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
fn go_quote(text: &str) -> String {
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
/// refused before it is built when the result would be over [`MAX_STRING_BYTES`].
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

// ---------------------------------------------------------------------------------------------
// Durations and timestamps
// ---------------------------------------------------------------------------------------------

/// Parses a duration as Go's `time.ParseDuration` does (`1h30m`, `-1.5s`, `300ms`, `0`).
fn parse_duration(text: &str) -> Result<i128, CelError> {
    let invalid = || CelError::Eval(format!("time: invalid duration {}", go_quote(text)));
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: i128 = 0;
    while !rest.is_empty() {
        let whole_len = rest.bytes().take_while(u8::is_ascii_digit).count();
        let (whole, after) = rest.split_at(whole_len);
        rest = after;
        let mut fraction = "";
        if let Some(after_dot) = rest.strip_prefix('.') {
            let fraction_len = after_dot.bytes().take_while(u8::is_ascii_digit).count();
            fraction = &after_dot[..fraction_len];
            rest = &after_dot[fraction_len..];
        }
        if whole.is_empty() && fraction.is_empty() {
            return Err(invalid());
        }
        let unit_len = rest
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (unit, after) = rest.split_at(unit_len);
        rest = after;
        let scale: i128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => NANOS_PER_SECOND,
            "m" => 60 * NANOS_PER_SECOND,
            "h" => 3600 * NANOS_PER_SECOND,
            "" => {
                return Err(CelError::Eval(format!(
                    "time: missing unit in duration {}",
                    go_quote(text)
                )));
            }
            other => {
                return Err(CelError::Eval(format!(
                    "time: unknown unit {} in duration {}",
                    go_quote(other),
                    go_quote(text)
                )));
            }
        };
        let whole: i128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| invalid())?
        };
        let mut value = whole.checked_mul(scale).ok_or_else(invalid)?;
        if !fraction.is_empty() {
            let digits = &fraction[..fraction.len().min(18)];
            let numerator: i128 = digits.parse().map_err(|_| invalid())?;
            value += numerator * scale / 10_i128.pow(digits.len() as u32);
        }
        total = total.checked_add(value).ok_or_else(invalid)?;
        if total > i128::from(i64::MAX) {
            return Err(invalid());
        }
    }
    Ok(if negative { -total } else { total })
}

/// A duration as CEL prints it: seconds with the needed fraction, `"90s"`, `"1.5s"`.
fn format_duration(nanos: i128) -> String {
    let sign = if nanos < 0 { "-" } else { "" };
    let magnitude = nanos.abs();
    let (seconds, fraction) = (magnitude / NANOS_PER_SECOND, magnitude % NANOS_PER_SECOND);
    if fraction == 0 {
        format!("{sign}{seconds}s")
    } else {
        let digits = format!("{fraction:09}");
        format!("{sign}{seconds}.{}s", digits.trim_end_matches('0'))
    }
}

/// Parses an RFC 3339 timestamp (`2024-01-02T03:04:05Z`, `...05.5+01:00`).
fn parse_timestamp(text: &str) -> Result<i128, CelError> {
    let invalid = || CelError::Eval(format!("invalid timestamp {}", go_quote(text)));
    let number = |from: usize, to: usize| -> Result<i64, CelError> {
        text.get(from..to)
            .filter(|d| d.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|d| d.parse().ok())
            .ok_or_else(invalid)
    };
    let separator =
        |at: usize, allowed: &[u8]| text.as_bytes().get(at).is_some_and(|b| allowed.contains(b));
    if !(separator(4, b"-")
        && separator(7, b"-")
        && separator(10, b"Tt")
        && separator(13, b":")
        && separator(16, b":"))
    {
        return Err(invalid());
    }
    let (year, month, day) = (number(0, 4)?, number(5, 7)?, number(8, 10)?);
    let (hour, minute, second) = (number(11, 13)?, number(14, 16)?, number(17, 19)?);
    let mut at = 19;
    let mut nanos: i128 = 0;
    if separator(at, b".") {
        let digits = text
            .get(at + 1..)
            .unwrap_or_default()
            .bytes()
            .take_while(u8::is_ascii_digit)
            .count();
        if digits == 0 {
            return Err(invalid());
        }
        let kept = digits.min(9);
        nanos = i128::from(number(at + 1, at + 1 + kept)?) * 10_i128.pow(9 - kept as u32);
        at += 1 + digits;
    }
    let offset_seconds = match text.get(at..) {
        Some("Z" | "z") => 0,
        Some(zone)
            if zone.len() == 6
                && (zone.starts_with('+') || zone.starts_with('-'))
                && separator(at + 3, b":") =>
        {
            let magnitude = number(at + 1, at + 3)? * 3600 + number(at + 4, at + 6)? * 60;
            if zone.starts_with('-') {
                -magnitude
            } else {
                magnitude
            }
        }
        _ => return Err(invalid()),
    };
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return Err(invalid()),
    };
    if day < 1 || day > days_in_month || hour > 23 || minute > 59 || second > 59 {
        return Err(invalid());
    }
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second
        - offset_seconds;
    Ok(i128::from(seconds) * NANOS_PER_SECOND + nanos)
}

/// An RFC 3339 timestamp in UTC, with the fraction of a second when there is one.
fn format_timestamp(nanos: i128) -> String {
    let seconds = nanos.div_euclid(NANOS_PER_SECOND);
    let fraction = nanos.rem_euclid(NANOS_PER_SECOND);
    let days = i64::try_from(seconds.div_euclid(86_400)).unwrap_or_default();
    let of_day = seconds.rem_euclid(86_400);
    let (year, month, day) = civil_from_days(days);
    let fraction = if fraction == 0 {
        String::new()
    } else {
        format!(".{}", format!("{fraction:09}").trim_end_matches('0'))
    };
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}{fraction}Z",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Evaluates `source` with `self` bound to `value`.
    fn eval_with(source: &str, value: &Value) -> Result<Value, CelError> {
        let program = Program::parse(source)?;
        program
            .evaluate(&[("self", Val::from_json(value))])
            .map(|v| to_json(&v))
    }

    fn eval(source: &str) -> Result<Value, CelError> {
        eval_with(source, &Value::Null)
    }

    fn to_json(value: &Val<'_>) -> Value {
        match value {
            Val::Null => Value::Null,
            Val::Bool(b) => json!(b),
            Val::Int(i) => json!(i),
            Val::Uint(u) => json!(u),
            Val::Double(d) => json!(d),
            Val::String(s) => json!(s),
            Val::Duration(d) => json!(format_duration(*d)),
            Val::Timestamp(t) => json!(format_timestamp(*t)),
            Val::Type(t) => json!(format!("type:{t}")),
            Val::List(items) => Value::Array(items.iter().map(to_json).collect()),
            Val::Map(entries) => Value::Object(
                entries
                    .iter()
                    .map(|(k, v)| (describe_key(k), to_json(v)))
                    .collect(),
            ),
            Val::Json(v) => (*v).clone(),
        }
    }

    fn truthy(source: &str, value: &Value) -> bool {
        match eval_with(source, value) {
            Ok(Value::Bool(b)) => b,
            other => panic!("{source}: expected a bool, got {other:?}"),
        }
    }

    fn syntax_error(source: &str) -> String {
        match Program::parse(source) {
            Err(e @ CelError::Syntax { .. }) => e.to_string(),
            other => panic!("{source}: expected a syntax error, got {other:?}"),
        }
    }

    #[test]
    fn tokenizer_reads_literals_operators_and_strings() {
        let tokens: Vec<Token> =
            tokenize(r#"a.b >= 0x1F && 'x\n' != "y" || 3u < 2.5e1 // comment"#)
                .unwrap()
                .into_iter()
                .map(|(t, _)| t)
                .collect();
        assert_eq!(
            tokens,
            vec![
                Token::Ident("a".into()),
                Token::Punct("."),
                Token::Ident("b".into()),
                Token::Punct(">="),
                Token::Int(31),
                Token::Punct("&&"),
                Token::Str("x\n".into()),
                Token::Punct("!="),
                Token::Str("y".into()),
                Token::Punct("||"),
                Token::Uint(3),
                Token::Punct("<"),
                Token::Double(25.0),
                Token::End,
            ]
        );
        assert_eq!(
            eval(r"r'a\nb'").unwrap(),
            json!("a\\nb"),
            "raw strings keep backslashes"
        );
        assert_eq!(
            eval(r#"'''it's "quoted"'''"#).unwrap(),
            json!("it's \"quoted\"")
        );
        assert_eq!(eval(r"'\x41\u00e9\101'").unwrap(), json!("Aé\u{41}"));
        assert_eq!(eval(".5 + 1.0").unwrap(), json!(1.5));
    }

    #[test]
    fn parser_builds_the_tree_with_cel_precedence() {
        let program = Program::parse("a || b && !c == d ? e.f[0] : g(h, 1 + 2 * 3)").unwrap();
        let ident = |n: &str| Box::new(Expr::Ident(n.into()));
        let int = |i: i64| Expr::Literal(Literal::Int(i));
        assert_eq!(
            program.expr(),
            &Expr::Conditional(
                Box::new(Expr::Or(
                    ident("a"),
                    Box::new(Expr::And(
                        ident("b"),
                        Box::new(Expr::Binary(
                            BinaryOp::Equal,
                            Box::new(Expr::Unary(UnaryOp::Not, ident("c"))),
                            ident("d")
                        ))
                    ))
                )),
                Box::new(Expr::Index(
                    Box::new(Expr::Select(ident("e"), "f".into())),
                    Box::new(int(0))
                )),
                Box::new(Expr::Call {
                    target: None,
                    function: "g".into(),
                    args: vec![
                        Expr::Ident("h".into()),
                        Expr::Binary(
                            BinaryOp::Add,
                            Box::new(int(1)),
                            Box::new(Expr::Binary(
                                BinaryOp::Multiply,
                                Box::new(int(2)),
                                Box::new(int(3))
                            ))
                        ),
                    ],
                }),
            )
        );
    }

    #[test]
    fn parser_expands_macros() {
        let program = Program::parse("self.all(x, has(x.minValues))").unwrap();
        assert_eq!(
            program.expr(),
            &Expr::Comprehension {
                kind: Macro::All,
                range: Box::new(Expr::Ident("self".into())),
                variable: "x".into(),
                filter: None,
                body: Box::new(Expr::Has(
                    Box::new(Expr::Ident("x".into())),
                    "minValues".into()
                )),
            }
        );
        assert!(
            Program::parse("has(self.replicas) == has(oldSelf.replicas)")
                .unwrap()
                .references("oldSelf")
        );
        assert!(
            !Program::parse("self.all(x, x != 'a')")
                .unwrap()
                .references("oldSelf")
        );
    }

    #[test]
    fn syntax_errors_are_reported_with_their_column() {
        assert_eq!(
            syntax_error("self =="),
            "syntax error at column 8: unexpected end of expression"
        );
        assert!(syntax_error("self = 1").contains("unexpected character '='"));
        assert!(syntax_error("'unterminated").contains("unterminated string literal"));
        assert!(syntax_error("has(self)").contains("invalid argument to has() macro"));
        assert!(syntax_error("self.all(1, true)").contains("must be a variable name"));
        assert!(syntax_error("self.all(x)").contains("takes 2 arguments"));
        assert!(syntax_error("(1 + 2").contains("expected ')'"));
        assert!(syntax_error("1 2").contains("unexpected '2'"));
        assert!(syntax_error("self.?x").contains("expected a field or method name"));
        assert!(syntax_error("b'bytes'").contains("bytes literals are not supported"));
        assert!(syntax_error("9223372036854775808").contains("out of range"));
        assert!(syntax_error("if").contains("reserved identifier"));
        assert!(syntax_error(r"'\q'").contains("invalid escape sequence"));
        assert!(
            syntax_error(&format!("{}1{}", "(".repeat(500), ")".repeat(500)))
                .contains("nests more than")
        );
        assert!(syntax_error(&vec!["1"; 2000].join(" + ")).contains("nests more than"));
        assert_eq!(eval("-9223372036854775808").unwrap(), json!(i64::MIN));
    }

    #[test]
    fn literals_arithmetic_and_comparisons() {
        assert_eq!(eval("1 + 2 * 3 - 4 / 2 % 3").unwrap(), json!(5));
        assert_eq!(eval("7u / 2u").unwrap(), json!(3));
        assert_eq!(eval("1.5 * 2.0").unwrap(), json!(3.0));
        assert_eq!(eval("'ab' + \"cd\"").unwrap(), json!("abcd"));
        assert_eq!(eval("[1, 2] + [3]").unwrap(), json!([1, 2, 3]));
        assert_eq!(
            eval("{'a': 1, 'b': [true, null]}").unwrap(),
            json!({"a": 1, "b": [true, null]})
        );
        assert_eq!(eval("-(2 - 5)").unwrap(), json!(3));
        for truth in [
            "1 < 2",
            "2 <= 2",
            "'abc' < 'abd'",
            "false < true",
            "3 > 2.5",
            "2 == 2.0",
            "1u == 1",
            "2.5 >= 2",
            "1 != 'a'",
            "[1, 'a'] == [1.0, 'a']",
            "{'a': 1} == {'a': 1u}",
        ] {
            assert_eq!(eval(truth).unwrap(), json!(true), "{truth}");
        }
        for falsehood in [
            "2 < 1",
            "1 == 'a'",
            "null == 0",
            "[1] == [1, 2]",
            "{'a': 1} == {'b': 1}",
        ] {
            assert_eq!(eval(falsehood).unwrap(), json!(false), "{falsehood}");
        }
    }

    #[test]
    fn arithmetic_and_comparison_errors() {
        assert_eq!(
            eval("1 / 0").unwrap_err(),
            CelError::Eval("division by zero".into())
        );
        assert_eq!(
            eval("1 % 0").unwrap_err(),
            CelError::Eval("modulus by zero".into())
        );
        assert_eq!(
            eval("9223372036854775807 + 1").unwrap_err(),
            CelError::Eval("integer overflow".into())
        );
        assert!(
            matches!(eval("1 + 1.0"), Err(CelError::NoSuchOverload(_))),
            "CEL does not mix int and double in arithmetic"
        );
        assert!(matches!(eval("1 < 'a'"), Err(CelError::NoSuchOverload(_))));
        assert!(matches!(eval("!1"), Err(CelError::NoSuchOverload(_))));
        assert!(matches!(
            eval("1 ? 2 : 3"),
            Err(CelError::NoSuchOverload(_))
        ));
    }

    #[test]
    fn field_selection_has_and_indexing() {
        let object = json!({"spec": {"replicas": 2, "limits": {"nodes": "3"}, "list": ["a", "b"], "ephemeral-storage": "1Gi"}});
        assert_eq!(eval_with("self.spec.replicas", &object).unwrap(), json!(2));
        assert_eq!(eval_with("self.spec.list[1]", &object).unwrap(), json!("b"));
        assert_eq!(
            eval_with("self.spec['limits']['nodes']", &object).unwrap(),
            json!("3")
        );
        assert_eq!(
            eval_with("self.spec.ephemeral__dash__storage", &object).unwrap(),
            json!("1Gi")
        );
        assert!(truthy("has(self.spec.replicas)", &object));
        assert!(!truthy("has(self.spec.weight)", &object));
        assert!(truthy(
            "has(self.spec.limits.nodes) && !has(self.spec.limits.cpu)",
            &object
        ));
        assert_eq!(
            eval_with("self.spec.weight", &object).unwrap_err(),
            CelError::NoSuchKey("weight".into())
        );
        assert_eq!(
            eval_with("self.spec.list[2]", &object).unwrap_err(),
            CelError::IndexOutOfBounds(2)
        );
        assert_eq!(
            eval_with("self.spec.limits['cpu']", &object).unwrap_err(),
            CelError::NoSuchKey("cpu".into())
        );
        assert!(matches!(
            eval_with("has(self.spec.replicas.x)", &object),
            Err(CelError::NoSuchOverload(_))
        ));
        assert_eq!(
            eval_with("other", &object).unwrap_err(),
            CelError::UndeclaredReference("other".into())
        );
    }

    #[test]
    fn in_operator_on_lists_and_maps() {
        assert!(truthy("self in ['a', 'b']", &json!("b")));
        assert!(!truthy("self in ['a', 'b']", &json!("c")));
        assert!(truthy("'nodes' in self", &json!({"nodes": "1"})));
        assert!(!truthy("'cpu' in self", &json!({"nodes": "1"})));
        assert!(truthy("2 in [1.0, 2.0]", &Value::Null));
        assert!(matches!(
            eval("1 in 'abc'"),
            Err(CelError::NoSuchOverload(_))
        ));
    }

    #[test]
    fn size_as_function_and_method() {
        assert_eq!(
            eval_with("size(self)", &json!("héllo")).unwrap(),
            json!(5),
            "characters, not bytes"
        );
        assert_eq!(
            eval_with("self.size()", &json!([1, 2, 3])).unwrap(),
            json!(3)
        );
        assert_eq!(
            eval_with("size(self) <= 1", &json!({"a": 1, "b": 2})).unwrap(),
            json!(false)
        );
        assert!(matches!(eval("size(1)"), Err(CelError::NoSuchOverload(_))));
    }

    #[test]
    fn conversions() {
        assert_eq!(eval("int('42')").unwrap(), json!(42));
        assert_eq!(eval("int('-7')").unwrap(), json!(-7));
        assert_eq!(eval("int(3.9)").unwrap(), json!(3));
        assert_eq!(
            eval("int('abc')").unwrap_err(),
            CelError::Eval("strconv.ParseInt: parsing \"abc\": invalid syntax".into())
        );
        assert_eq!(
            eval("int('99999999999999999999')").unwrap_err().to_string(),
            "strconv.ParseInt: parsing \"99999999999999999999\": value out of range"
        );
        assert_eq!(eval("uint('5')").unwrap(), json!(5));
        assert!(eval("uint(-1)").is_err());
        assert_eq!(eval("double('1.5')").unwrap(), json!(1.5));
        assert_eq!(eval("string(12) + string(true)").unwrap(), json!("12true"));
        assert_eq!(eval("bool('true') && !bool('0')").unwrap(), json!(true));
        assert_eq!(
            eval("type(1) == int && type('a') == string && type([]) != map").unwrap(),
            json!(true)
        );
        assert_eq!(eval("dyn(1) == 1").unwrap(), json!(true));
    }

    #[test]
    fn string_functions_and_regexes() {
        let key = json!("karpenter.sh/nodepool");
        assert_eq!(
            eval_with(r#"self.find("^([^/]+)")"#, &key).unwrap(),
            json!("karpenter.sh")
        );
        assert_eq!(
            eval_with(r#"self.find("^[0-9]+$")"#, &key).unwrap(),
            json!(""),
            "no match is the empty string"
        );
        assert!(truthy(
            r#"self.find("^([^/]+)").endsWith("karpenter.sh")"#,
            &key
        ));
        assert!(truthy(
            "self.startsWith('karpenter') && self.contains('.sh/')",
            &key
        ));
        assert!(truthy(
            "self.matches('^[a-z.]+/[a-z]+$') && matches(self, 'pool$')",
            &key
        ));
        assert_eq!(
            eval_with("self.findAll('[a-z]+')", &json!("ab-cd-ef")).unwrap(),
            json!(["ab", "cd", "ef"])
        );
        assert_eq!(
            eval_with("self.findAll('[a-z]+', 2)", &json!("ab-cd-ef")).unwrap(),
            json!(["ab", "cd"])
        );
        assert_eq!(
            eval_with("self.split('/')", &key).unwrap(),
            json!(["karpenter.sh", "nodepool"])
        );
        assert_eq!(
            eval_with("self.split('.', 1)", &key).unwrap(),
            json!(["karpenter.sh/nodepool"])
        );
        assert_eq!(
            eval_with("self.lowerAscii() + self.upperAscii()", &json!("Ab")).unwrap(),
            json!("abAB")
        );
        assert_eq!(
            eval_with("self.trim()", &json!("  x ")).unwrap(),
            json!("x")
        );
        assert_eq!(
            eval_with("self.replace('a', 'o')", &json!("banana")).unwrap(),
            json!("bonono")
        );
        assert_eq!(
            eval_with("self.replace('a', 'o', 1)", &json!("banana")).unwrap(),
            json!("bonana")
        );
        assert_eq!(
            eval_with(
                "self.indexOf('an') + self.lastIndexOf('an')",
                &json!("banana")
            )
            .unwrap(),
            json!(1 + 3)
        );
        assert_eq!(
            eval_with("self.indexOf('x')", &json!("banana")).unwrap(),
            json!(-1)
        );
        assert_eq!(
            eval_with("self.substring(1, 3) + self.charAt(0)", &json!("héllo")).unwrap(),
            json!("élh")
        );
        assert_eq!(
            eval_with("self.substring(9)", &json!("abc"))
                .unwrap_err()
                .to_string(),
            "index out of range: 9"
        );
        assert_eq!(eval("['a', 'b'].join('-')").unwrap(), json!("a-b"));
        assert!(
            eval_with("self.matches('(')", &key)
                .unwrap_err()
                .to_string()
                .starts_with("given regex is invalid")
        );
    }

    #[test]
    fn list_functions() {
        assert_eq!(
            eval("[1, 2, 2].isSorted() && ![2, 1].isSorted()").unwrap(),
            json!(true)
        );
        assert_eq!(eval("[1, 2, 3].sum()").unwrap(), json!(6));
        assert_eq!(eval("[3, 1, 2].min() + [3, 1, 2].max()").unwrap(), json!(4));
        assert_eq!(
            eval("['a', 'b', 'a'].indexOf('a') + ['a', 'b', 'a'].lastIndexOf('a')").unwrap(),
            json!(2)
        );
        assert!(eval("[].min()").is_err());
    }

    #[test]
    fn ternary_and_logic_short_circuit_absorb_errors() {
        assert_eq!(eval("true ? 1 : 2").unwrap(), json!(1));
        assert_eq!(eval("false ? 1 : true ? 2 : 3").unwrap(), json!(2));
        // The unchosen branch is not evaluated.
        assert_eq!(eval("true ? 1 : 1 / 0").unwrap(), json!(1));
        // false && error, error && false, true || error, error || true: decided.
        for decided in [
            "!(false && 1 / 0 == 1)",
            "!(1 / 0 == 1 && false)",
            "true || 1 / 0 == 1",
            "1 / 0 == 1 || true",
        ] {
            assert_eq!(eval(decided).unwrap(), json!(true), "{decided}");
        }
        // Otherwise the error surfaces.
        for undecided in [
            "true && 1 / 0 == 1",
            "false || 1 / 0 == 1",
            "1 / 0 == 1 && true",
        ] {
            assert_eq!(
                eval(undecided).unwrap_err(),
                CelError::Eval("division by zero".into()),
                "{undecided}"
            );
        }
        assert!(matches!(
            eval("1 && true"),
            Err(CelError::NoSuchOverload(_))
        ));
    }

    #[test]
    fn comprehensions_over_lists_and_map_keys() {
        let list =
            json!([{"operator": "In", "values": ["a"]}, {"operator": "Exists", "values": []}]);
        assert!(truthy(
            "self.all(x, x.operator == 'In' ? x.values.size() != 0 : true)",
            &list
        ));
        assert!(truthy("self.exists(x, x.operator == 'Exists')", &list));
        assert!(truthy("self.exists_one(x, x.values.size() == 0)", &list));
        assert_eq!(
            eval_with("self.map(x, x.operator)", &list).unwrap(),
            json!(["In", "Exists"])
        );
        assert_eq!(
            eval_with("self.map(x, x.values.size() > 0, x.operator)", &list).unwrap(),
            json!(["In"])
        );
        assert_eq!(
            eval_with("self.filter(x, x.operator != 'In').size()", &list).unwrap(),
            json!(1)
        );
        let labels = json!({"team": "a", "karpenter.sh/nodepool": "b"});
        assert!(!truthy(
            r#"self.all(x, x != "karpenter.sh/nodepool")"#,
            &labels
        ));
        assert!(truthy("self.exists(k, k == 'team')", &labels));
        assert!(truthy(
            "[].all(x, false) && ![].exists(x, true)",
            &Value::Null
        ));
        // The variable is unbound again afterwards, even when the body failed.
        assert!(matches!(
            eval("([1].all(x, 1 / 0 == 1) || true) ? x : 0"),
            Err(CelError::UndeclaredReference(_))
        ));
        // Nested comprehensions shadow and restore.
        assert!(truthy(
            "[[1, 2], [3]].all(x, x.all(x, x > 0))",
            &Value::Null
        ));
    }

    #[test]
    fn all_and_exists_absorb_errors_like_the_logic_operators() {
        let values = json!(["1", "x", "-1"]);
        // One false decides `all` even though another element fails to convert.
        assert!(!truthy("self.all(v, int(v) >= 0)", &values));
        assert!(truthy("self.exists(v, int(v) < 0)", &values));
        let errors = json!(["1", "x"]);
        assert_eq!(
            eval_with("self.all(v, int(v) >= 0)", &errors)
                .unwrap_err()
                .to_string(),
            "strconv.ParseInt: parsing \"x\": invalid syntax"
        );
        assert!(eval_with("self.exists_one(v, int(v) >= 0)", &errors).is_err());
    }

    #[test]
    fn the_karpenter_rules_behave_as_on_a_real_cluster() {
        let domain = r#"self in ["karpenter.sh/capacity-type", "karpenter.sh/nodepool"] || !self.find("^([^/]+)").endsWith("karpenter.sh")"#;
        assert!(truthy(domain, &json!("karpenter.sh/capacity-type")));
        assert!(truthy(domain, &json!("topology.kubernetes.io/zone")));
        assert!(truthy(domain, &json!("team")));
        assert!(!truthy(domain, &json!("karpenter.sh/other")));
        assert!(!truthy(domain, &json!("sub.karpenter.sh/other")));

        let numeric = "self.all(x, (x.operator == 'Gt' || x.operator == 'Lt' || x.operator == 'Gte' || x.operator == 'Lte') ? (x.values.size() == 1 && int(x.values[0]) >= 0) : true)";
        assert!(truthy(
            numeric,
            &json!([{"operator": "Gt", "values": ["3"]}, {"operator": "In", "values": ["x", "y"]}])
        ));
        assert!(
            !truthy(numeric, &json!([{"operator": "Gt", "values": ["3", "4"]}])),
            "two values: false && (not evaluated)"
        );
        assert!(!truthy(
            numeric,
            &json!([{"operator": "Lt", "values": ["-1"]}])
        ));
        assert!(
            eval_with(numeric, &json!([{"operator": "Gt", "values": ["abc"]}])).is_err(),
            "unparseable: an error"
        );

        let min_values = "self.all(x, (x.operator == 'In' && has(x.minValues)) ? x.values.size() >= x.minValues : true)";
        assert!(truthy(
            min_values,
            &json!([{"operator": "In", "values": ["a", "b"], "minValues": 2}])
        ));
        assert!(!truthy(
            min_values,
            &json!([{"operator": "In", "values": ["a"], "minValues": 2}])
        ));
        assert!(truthy(
            min_values,
            &json!([{"operator": "Exists", "minValues": 2}])
        ));

        let static_pool = "!has(self.replicas) || (!has(self.limits) || size(self.limits) == 0 || (size(self.limits) == 1 && 'nodes' in self.limits))";
        assert!(truthy(
            static_pool,
            &json!({"replicas": 2, "limits": {"nodes": "4"}})
        ));
        assert!(!truthy(
            static_pool,
            &json!({"replicas": 2, "limits": {"cpu": "4"}})
        ));
        assert!(truthy(static_pool, &json!({"limits": {"cpu": "4"}})));

        assert!(!truthy(
            "self.all(x, !(x in ['cpu', 'memory', 'ephemeral-storage', 'pods']))",
            &json!({"memory": "1Gi"})
        ));
        assert!(truthy(
            "self.all(x, has(x.schedule) == has(x.duration))",
            &json!([{"nodes": "10%"}, {"schedule": "@daily", "duration": "1h"}])
        ));
        assert!(!truthy(
            "self.all(x, has(x.schedule) == has(x.duration))",
            &json!([{"schedule": "@daily"}])
        ));
        assert!(truthy("self != ''", &json!("x")));

        let transition = Program::parse("self == oldSelf").unwrap();
        let (old, new) = (json!({"a": [1, {"b": "c"}]}), json!({"a": [1, {"b": "c"}]}));
        let same = transition
            .evaluate(&[
                ("self", Val::from_json(&new)),
                ("oldSelf", Val::from_json(&old)),
            ])
            .unwrap();
        assert!(matches!(same, Val::Bool(true)));
        let changed = json!({"a": [1, {"b": "d"}]});
        let different = transition
            .evaluate(&[
                ("self", Val::from_json(&changed)),
                ("oldSelf", Val::from_json(&old)),
            ])
            .unwrap();
        assert!(matches!(different, Val::Bool(false)));
    }

    #[test]
    fn durations_and_timestamps() {
        assert!(truthy("duration(self) <= duration('1h')", &json!("59m30s")));
        assert!(truthy(
            "duration('1.5h') == duration('90m') && duration('1h') > duration('-1s')",
            &Value::Null
        ));
        assert_eq!(eval("string(duration('1m30.5s'))").unwrap(), json!("90.5s"));
        assert_eq!(
            eval("duration('2h45m').getHours() * 100 + duration('2h45m').getMinutes()").unwrap(),
            json!(200 + 165)
        );
        assert_eq!(
            eval("duration('1x')").unwrap_err().to_string(),
            "time: unknown unit \"x\" in duration \"1x\""
        );
        assert_eq!(
            eval("duration('10')").unwrap_err().to_string(),
            "time: missing unit in duration \"10\""
        );
        assert_eq!(
            eval("duration('')").unwrap_err().to_string(),
            "time: invalid duration \"\""
        );
        assert!(truthy(
            "timestamp('2024-03-01T00:00:00Z') - timestamp('2024-02-28T00:00:00Z') == duration('48h')",
            &Value::Null
        ));
        assert_eq!(
            eval("string(timestamp('2024-01-02T03:04:05.25+01:00'))").unwrap(),
            json!("2024-01-02T02:04:05.25Z")
        );
        assert_eq!(
            eval("string(timestamp('1969-12-31T23:59:59Z') + duration('2s'))").unwrap(),
            json!("1970-01-01T00:00:01Z")
        );
        assert!(eval("timestamp('2023-02-29T00:00:00Z')").is_err());
        assert!(eval("timestamp('yesterday')").is_err());
    }

    #[test]
    fn unknown_functions_and_overloads_are_clear_errors() {
        assert_eq!(
            eval("frobnicate(1)").unwrap_err(),
            CelError::UnknownFunction("frobnicate".into())
        );
        assert_eq!(
            eval("'a'.reverse()").unwrap_err().to_string(),
            "undeclared reference to 'reverse': unknown function"
        );
        assert_eq!(
            eval("'a'.startsWith(1)").unwrap_err().to_string(),
            "no such overload: .startsWith(string, int)"
        );
        assert_eq!(
            eval("int([])").unwrap_err().to_string(),
            "no such overload: int(list)"
        );
    }

    #[test]
    fn evaluation_stops_at_the_cost_limit() {
        let numbers: Vec<i64> = (0..700).collect();
        assert_eq!(
            eval_with(
                "self.all(x, self.all(y, self.all(z, x + y + z >= 0)))",
                &json!(numbers)
            ),
            Err(CelError::CostLimitExceeded)
        );
        // Neither `||` nor `all` absorbs the cost error, as they absorb others.
        assert_eq!(
            eval_with(
                "self.all(x, self.all(y, self.all(z, x + y + z >= 0))) || true",
                &json!(numbers)
            ),
            Err(CelError::CostLimitExceeded)
        );
        // The same rule on a small list costs little, and says what it cost.
        let small = json!([1, 2, 3]);
        let program = Program::parse("self.all(x, self.all(y, x + y >= 0))").unwrap();
        let (result, cost) = program.evaluate_metered(&[("self", Val::from_json(&small))], 100);
        assert!(matches!(result, Ok(Val::Bool(true))), "{result:?}");
        assert!(cost > 9 && cost < 100, "{cost}");
        assert_eq!(
            program
                .evaluate_metered(&[("self", Val::from_json(&small))], 10)
                .0
                .unwrap_err(),
            CelError::CostLimitExceeded
        );
    }

    #[test]
    fn built_strings_and_lists_are_capped() {
        let text = "a".repeat(20_000);
        let error = eval_with("self.replace('a', self + self).size() > 0", &json!(text));
        assert_eq!(
            error,
            Err(CelError::SizeLimitExceeded(
                "the rule builds a string of 800000000 bytes, over the limit of 1048576"
                    .to_string()
            ))
        );
        let big = "b".repeat(600_000);
        assert!(matches!(
            eval_with("size(self + self) > 0", &json!(big)),
            Err(CelError::SizeLimitExceeded(_))
        ));
        assert!(matches!(
            eval_with("[self, self].join('-') != ''", &json!(big)),
            Err(CelError::SizeLimitExceeded(_))
        ));
        let items: Vec<i64> = (0..150_000).collect();
        assert!(matches!(
            eval_with("size(self + self) > 0", &json!(items)),
            Err(CelError::SizeLimitExceeded(_))
        ));
        // Under the caps, building works.
        assert_eq!(
            eval_with("self.replace('a', 'bb')", &json!("aXa")).unwrap(),
            json!("bbXbb")
        );
        assert_eq!(
            eval_with("self.replace('a', 'bb', 1)", &json!("aXa")).unwrap(),
            json!("bbXa")
        );
        assert_eq!(
            eval_with("self.replace('', '-')", &json!("ab")).unwrap(),
            json!("-a-b-")
        );
    }

    #[test]
    fn string_searches_are_linear_and_count_characters() {
        assert_eq!(eval("'héllo'.indexOf('l')").unwrap(), json!(2));
        assert_eq!(eval("'héllo'.indexOf('l', 3)").unwrap(), json!(3));
        assert_eq!(eval("'héllo'.indexOf('')").unwrap(), json!(0));
        assert_eq!(eval("'héllo'.indexOf('', 2)").unwrap(), json!(2));
        assert_eq!(eval("'héllo'.indexOf('x')").unwrap(), json!(-1));
        assert_eq!(eval("'héllo'.lastIndexOf('l')").unwrap(), json!(3));
        assert_eq!(eval("'héllo'.lastIndexOf('l', 2)").unwrap(), json!(2));
        assert_eq!(eval("'héllo'.lastIndexOf('é', 1)").unwrap(), json!(1));
        assert_eq!(eval("'héllo'.lastIndexOf('é', 0)").unwrap(), json!(-1));
        assert_eq!(eval("'héllo'.lastIndexOf('')").unwrap(), json!(5));
        assert_eq!(eval("'héllo'.lastIndexOf('llo', 2)").unwrap(), json!(2));
        // A long needle in a long text: Rust's substring search, not a quadratic scan.
        let text = format!("{}b", "a".repeat(1 << 19));
        let needle = format!("{}b", "a".repeat(1 << 18));
        let value = json!({"text": text, "needle": needle});
        assert_eq!(
            eval_with("self.text.indexOf(self.needle)", &value).unwrap(),
            json!(1 << 18)
        );
    }

    #[test]
    fn hostile_input_never_panics() {
        for source in [
            "",
            "(",
            ")",
            "[",
            "{",
            "{1:",
            "'",
            "\"\"\"",
            "a.",
            "a[",
            "a[1",
            ".",
            "?",
            "1 ?",
            "1 ? 2",
            "0x",
            "1e",
            "1.",
            "\\",
            "'\\u12'",
            "'\\U0011FFFF'",
            "has(",
            "x.all(",
            "€",
        ] {
            let _ = Program::parse(source).and_then(|p| p.evaluate(&[]));
        }
        for source in [
            "size(self) + self[0] + self.x",
            "self.all(x, x)",
            "self.map(x, x / 0)",
            "int(self)",
            "self.substring(-1)",
            "self.charAt(99)",
            "self.split('', 3)",
            "self.indexOf('', 99)",
            "self.lastIndexOf('x', -1)",
        ] {
            for value in [
                json!(null),
                json!("héllo"),
                json!([1, "a"]),
                json!({"x": 1}),
                json!(1.5),
                json!(u64::MAX),
            ] {
                let _ = eval_with(source, &value);
            }
        }
        assert_eq!(
            eval_with("self.split('', 3)", &json!("héllo")).unwrap(),
            json!(["h", "é", "llo"])
        );
        assert!(
            eval("{'a': 1, 'a': 2}").is_err(),
            "repeated map keys are an error"
        );
    }
}
