//! A reader of the `Debug` text of `k8s-pb` messages.
//!
//! prost generates no reflection, but its derived `Debug` writes every field of a message
//! under its Rust name, in a small and regular grammar: `Name { field: value, … }` for a
//! message, `Some(…)`/`None` for optional fields, `"…"` for strings (Rust escapes), numbers,
//! `true`/`false`, `[…]` for repeated fields and bytes (bytes as a list of numbers), `{k: v, …}`
//! for maps. Reading that text back gives the decoded message as a tree that one generic
//! conversion turns into the object's JSON (see [`super::to_json`]), for every kind at once.

/// One value of the `Debug` text.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Node {
    /// A message: its type name and its fields in declaration order.
    Message(String, Vec<(String, Node)>),
    /// `Some(…)`.
    Some(Box<Node>),
    /// `None`.
    None,
    /// A string.
    Text(String),
    /// A number, as written.
    Number(String),
    /// `true` or `false`.
    Bool(bool),
    /// A repeated field (or bytes).
    List(Vec<Node>),
    /// A map field.
    Map(Vec<(Node, Node)>),
}

/// Reads the `Debug` text of a message; the error says where the text stopped making sense.
pub(super) fn parse(text: &str) -> Result<Node, String> {
    let mut reader = Reader {
        text: text.as_bytes(),
        at: 0,
    };
    let node = reader.value()?;
    reader.skip_spaces();
    if reader.at != reader.text.len() {
        return Err(reader.error("trailing text"));
    }
    Ok(node)
}

struct Reader<'a> {
    text: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn error(&self, what: &str) -> String {
        format!("{what} at byte {} of the decoded message", self.at)
    }

    fn skip_spaces(&mut self) {
        while self.text.get(self.at).is_some_and(u8::is_ascii_whitespace) {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_spaces();
        self.text.get(self.at).copied()
    }

    fn expect(&mut self, byte: u8) -> Result<(), String> {
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(self.error(&format!("expected {:?}", byte as char)))
        }
    }

    /// Reads `item` separated by commas until `close` (a trailing comma is allowed).
    fn items<T>(
        &mut self,
        close: u8,
        mut item: impl FnMut(&mut Self) -> Result<T, String>,
    ) -> Result<Vec<T>, String> {
        let mut items = Vec::new();
        loop {
            if self.peek() == Some(close) {
                self.at += 1;
                return Ok(items);
            }
            items.push(item(self)?);
            match self.peek() {
                Some(b',') => self.at += 1,
                Some(byte) if byte == close => {}
                _ => return Err(self.error(&format!("expected ',' or {:?}", close as char))),
            }
        }
    }

    fn identifier(&mut self) -> Result<String, String> {
        self.skip_spaces();
        let start = self.at;
        while self
            .text
            .get(self.at)
            .is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'#'))
        {
            self.at += 1;
        }
        if start == self.at {
            return Err(self.error("expected a name"));
        }
        Ok(String::from_utf8_lossy(&self.text[start..self.at]).into_owned())
    }

    fn value(&mut self) -> Result<Node, String> {
        match self.peek() {
            None => Err(self.error("unexpected end")),
            Some(b'"') => self.string().map(Node::Text),
            Some(b'[') => {
                self.at += 1;
                self.items(b']', Self::value).map(Node::List)
            }
            Some(b'{') => {
                self.at += 1;
                self.items(b'}', |reader| {
                    let key = reader.value()?;
                    reader.expect(b':')?;
                    Ok((key, reader.value()?))
                })
                .map(Node::Map)
            }
            Some(byte) if byte == b'-' || byte.is_ascii_digit() => Ok(self.number()),
            Some(_) => {
                let name = self.identifier()?;
                match name.as_str() {
                    "None" => Ok(Node::None),
                    "true" => Ok(Node::Bool(true)),
                    "false" => Ok(Node::Bool(false)),
                    "NaN" | "inf" => Ok(Node::Number(name)),
                    "Some" => {
                        self.expect(b'(')?;
                        let inner = self.value()?;
                        self.expect(b')')?;
                        Ok(Node::Some(Box::new(inner)))
                    }
                    _ if self.peek() == Some(b'{') => {
                        self.at += 1;
                        let fields = self.items(b'}', |reader| {
                            let field = reader.identifier()?;
                            reader.expect(b':')?;
                            Ok((field, reader.value()?))
                        })?;
                        Ok(Node::Message(name, fields))
                    }
                    // A message without fields prints as its bare name.
                    _ => Ok(Node::Message(name, Vec::new())),
                }
            }
        }
    }

    fn number(&mut self) -> Node {
        let start = self.at;
        while self
            .text
            .get(self.at)
            .is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.'))
        {
            self.at += 1;
        }
        Node::Number(String::from_utf8_lossy(&self.text[start..self.at]).into_owned())
    }

    /// A string in Rust's `Debug` form: `\"`, `\\`, `\'`, `\n`, `\r`, `\t`, `\0` and `\u{…}`.
    fn string(&mut self) -> Result<String, String> {
        self.at += 1;
        let mut out = Vec::new();
        loop {
            let Some(&byte) = self.text.get(self.at) else {
                return Err(self.error("unterminated string"));
            };
            self.at += 1;
            match byte {
                b'"' => break,
                b'\\' => {
                    let Some(&escape) = self.text.get(self.at) else {
                        return Err(self.error("unterminated escape"));
                    };
                    self.at += 1;
                    match escape {
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'0' => out.push(0),
                        b'u' => {
                            self.expect(b'{')?;
                            let start = self.at;
                            while self.text.get(self.at).is_some_and(u8::is_ascii_hexdigit) {
                                self.at += 1;
                            }
                            let digits = String::from_utf8_lossy(&self.text[start..self.at]);
                            let character = u32::from_str_radix(&digits, 16)
                                .ok()
                                .and_then(char::from_u32)
                                .ok_or_else(|| self.error("invalid \\u escape"))?;
                            self.expect(b'}')?;
                            let mut buffer = [0; 4];
                            out.extend_from_slice(character.encode_utf8(&mut buffer).as_bytes());
                        }
                        other => out.push(other),
                    }
                }
                other => out.push(other),
            }
        }
        String::from_utf8(out).map_err(|_| self.error("invalid UTF-8 in a string"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_debug_writes() {
        #[derive(Debug)]
        #[allow(dead_code)]
        struct Inner {
            r#type: Option<String>,
            bytes: Option<Vec<u8>>,
        }
        #[derive(Debug)]
        #[allow(dead_code)]
        struct Outer {
            name: Option<String>,
            count: Option<i64>,
            ratio: f64,
            ok: Option<bool>,
            inner: Vec<Inner>,
            labels: std::collections::BTreeMap<String, String>,
            nothing: Option<Inner>,
        }
        let outer = Outer {
            name: Some("a \"quoted\"\n\\ name ✓ \u{1}".into()),
            count: Some(-3),
            ratio: 1e-7,
            ok: Some(true),
            inner: vec![Inner {
                r#type: Some("x".into()),
                bytes: Some(vec![1, 255]),
            }],
            labels: [("k".to_string(), "v".to_string())].into(),
            nothing: None,
        };
        let node = parse(&format!("{outer:?}")).unwrap();
        let Node::Message(name, fields) = node else {
            panic!("not a message")
        };
        assert_eq!(name, "Outer");
        let field = |name: &str| fields.iter().find(|(f, _)| f == name).unwrap().1.clone();
        assert_eq!(
            field("name"),
            Node::Some(Box::new(Node::Text("a \"quoted\"\n\\ name ✓ \u{1}".into())))
        );
        assert_eq!(
            field("count"),
            Node::Some(Box::new(Node::Number("-3".into())))
        );
        assert_eq!(field("ratio"), Node::Number("1e-7".into()));
        assert_eq!(field("ok"), Node::Some(Box::new(Node::Bool(true))));
        assert_eq!(field("nothing"), Node::None);
        assert_eq!(
            field("labels"),
            Node::Map(vec![(Node::Text("k".into()), Node::Text("v".into()))])
        );
        let Node::List(inner) = field("inner") else {
            panic!("not a list")
        };
        assert_eq!(
            inner[0],
            Node::Message(
                "Inner".into(),
                vec![
                    (
                        // std's derive drops the `r#` (prost's keeps it).
                        "type".into(),
                        Node::Some(Box::new(Node::Text("x".into())))
                    ),
                    (
                        "bytes".into(),
                        Node::Some(Box::new(Node::List(vec![
                            Node::Number("1".into()),
                            Node::Number("255".into())
                        ])))
                    ),
                ]
            )
        );
        assert!(parse("Outer { name: ").is_err());
    }
}
