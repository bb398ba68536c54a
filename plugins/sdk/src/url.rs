//! Building URLs: percent-encoding of path segments and query parameters.

/// Percent-encodes `text` for use as one URL path segment or one query key or value: every
/// byte except the unreserved characters of RFC 3986 (`A-Z a-z 0-9 - . _ ~`) becomes `%XX`
/// (upper-case hex), so `/`, `?`, `&`, `=`, spaces and non-ASCII text cannot change the URL's
/// structure.
pub fn percent_encode(text: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push('%');
            out.push(HEX[usize::from(byte >> 4)] as char);
            out.push(HEX[usize::from(byte & 0xF)] as char);
        }
    }
    out
}

/// A query string (without the leading `?`) from key/value pairs, each percent-encoded with
/// [`percent_encode`], in the given order; a key may repeat.
pub fn query_string(pairs: &[(&str, &str)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}={}", percent_encode(k), percent_encode(v)))
        .collect();
    parts.join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreserved_characters_stay() {
        assert_eq!(percent_encode("AZaz09-._~"), "AZaz09-._~");
        assert_eq!(percent_encode(""), "");
    }

    #[test]
    fn everything_else_is_encoded() {
        assert_eq!(
            percent_encode("karpenter-sh_managed-by=demo a"),
            "karpenter-sh_managed-by%3Ddemo%20a"
        );
        assert_eq!(percent_encode("a/b?c&d#e+f%"), "a%2Fb%3Fc%26d%23e%2Bf%25");
        assert_eq!(percent_encode("zürich"), "z%C3%BCrich");
        assert_eq!(percent_encode("\n"), "%0A");
    }

    #[test]
    fn query_strings_encode_keys_and_values() {
        assert_eq!(query_string(&[]), "");
        assert_eq!(
            query_string(&[("tag", "a=b"), ("tag", "c d")]),
            "tag=a%3Db&tag=c%20d"
        );
        assert_eq!(query_string(&[("k&", "v")]), "k%26=v");
    }
}
