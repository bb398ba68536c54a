// Character classes and string operations with Rust's meaning.
//
// JavaScript's own `trim()`, `\s` and `<` do not agree with Rust's `str::trim`,
// `char::is_whitespace`, `char::is_control` and `Ord for str`, and the renderer must behave
// exactly like the Rust one. The differences are small (JavaScript trims U+FEFF but not
// U+0085; `<` compares UTF-16 code units, not code points) but they would show in output.

/** Unicode White_Space, which is what Rust's `char::is_whitespace` tests. */
export function isWhitespace(c) {
  const n = c.codePointAt(0);
  return (
    (n >= 0x09 && n <= 0x0d) ||
    n === 0x20 ||
    n === 0x85 ||
    n === 0xa0 ||
    n === 0x1680 ||
    (n >= 0x2000 && n <= 0x200a) ||
    n === 0x2028 ||
    n === 0x2029 ||
    n === 0x202f ||
    n === 0x205f ||
    n === 0x3000
  );
}

/** General category Cc (C0 controls, DEL, C1 controls): Rust's `char::is_control`. */
export function isControl(c) {
  const n = c.codePointAt(0);
  return n <= 0x1f || (n >= 0x7f && n <= 0x9f);
}

/** Whether `text` has a whitespace character anywhere. */
export function hasWhitespace(text) {
  for (const c of text) {
    if (isWhitespace(c)) return true;
  }
  return false;
}

/** Rust's `str::trim`: drops leading and trailing White_Space characters. */
export function trim(text) {
  const chars = Array.from(text);
  let start = 0;
  let end = chars.length;
  while (start < end && isWhitespace(chars[start])) start++;
  while (end > start && isWhitespace(chars[end - 1])) end--;
  return chars.slice(start, end).join('');
}

/** Rust's `str::split_whitespace`: the non-empty runs between White_Space characters. */
export function splitWhitespace(text) {
  const words = [];
  let word = '';
  for (const c of text) {
    if (isWhitespace(c)) {
      if (word !== '') words.push(word);
      word = '';
    } else {
      word += c;
    }
  }
  if (word !== '') words.push(word);
  return words;
}

/**
 * Orders strings by code point, as Rust orders `str` (UTF-8 byte order is code point order).
 * UTF-16 code units sort surrogates (U+D800–DFFF) before U+E000–FFFF; a supplementary
 * character comes after both in code point order, so the two ranges swap places here.
 */
export function compareCodePoints(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) {
    let x = a.charCodeAt(i);
    let y = b.charCodeAt(i);
    if (x !== y) {
      if (x >= 0xd800 && y >= 0xd800) {
        x = x >= 0xe000 ? x - 0x800 : x + 0x2000;
        y = y >= 0xe000 ? y - 0x800 : y + 0x2000;
      }
      return x - y;
    }
  }
  return a.length - b.length;
}
