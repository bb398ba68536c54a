//! The tokenizer: CEL source text to [`Token`]s with their columns, decoding number and string
//! literals (with their escapes) on the way.

use super::{CelError, syntax};

#[derive(Debug, Clone, PartialEq)]
pub(super) enum Token {
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
pub(super) const RESERVED: &[&str] = &[
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
pub(super) fn tokenize(source: &str) -> Result<Vec<(Token, usize)>, CelError> {
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
