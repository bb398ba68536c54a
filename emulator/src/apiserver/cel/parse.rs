//! The syntax tree ([`Expr`] and its parts) and the recursive-descent parser that builds it from
//! the tokens of [`super::lex`], expanding `has()` and the comprehension macros as it goes.

use super::lex::{RESERVED, Token};
use super::{CelError, syntax};

/// How deeply expressions may nest (each parenthesis, operator in a chain, member access or
/// macro counts); deeper input is a syntax error rather than a stack overflow.
const MAX_DEPTH: usize = 128;

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
    pub(super) fn symbol(self) -> &'static str {
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

pub(super) struct Parser {
    pub(super) tokens: Vec<(Token, usize)>,
    pub(super) position: usize,
    pub(super) depth: usize,
}

impl Parser {
    /// The current token; the token list always ends with `End`, which is never stepped past.
    pub(super) fn peek(&self) -> &Token {
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

    pub(super) fn unexpected(&self) -> CelError {
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
    pub(super) fn parse_expr(&mut self) -> Result<Expr, CelError> {
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
