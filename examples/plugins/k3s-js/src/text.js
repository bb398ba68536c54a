// Character classes and string operations with Rust's meaning.
//
// JavaScript's own `trim()`, `\s` and `<` do not agree with Rust's `str::trim`,
// `char::is_whitespace` and `Ord for str`, and the renderer must behave exactly like the Rust
// one. The differences are small (JavaScript trims U+FEFF but not U+0085; `<` compares UTF-16
// code units, not code points) but they would show in the output.
//
// Everything here is a regular expression or a native string method: in the component the
// engine interprets JavaScript (there is no JIT in WebAssembly), while regular expressions and
// string methods run as compiled code, many times faster than a loop over characters.

// Unicode White_Space, the set Rust's `char::is_whitespace` tests (all of it in the BMP).
const WHITESPACE = '\\t-\\r \\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000';
const HAS_WHITESPACE = new RegExp(`[${WHITESPACE}]`);
const EDGE_WHITESPACE = new RegExp(`^[${WHITESPACE}]+|[${WHITESPACE}]+$`, 'g');
const WHITESPACE_RUN = new RegExp(`[${WHITESPACE}]+`);

/** Whether `text` has a whitespace character anywhere. */
export function hasWhitespace(text) {
  return HAS_WHITESPACE.test(text);
}

/** Rust's `str::trim`: drops leading and trailing White_Space characters. */
export function trim(text) {
  return text.replace(EDGE_WHITESPACE, '');
}

/** Rust's `str::split_whitespace`: the non-empty runs between White_Space characters. */
export function splitWhitespace(text) {
  return text.split(WHITESPACE_RUN).filter((word) => word !== '');
}

/** General category Cc (C0 controls, DEL, C1 controls), the set of Rust's `char::is_control`. */
export const CONTROL = '\\x00-\\x1f\\x7f-\\x9f';

// Code units from U+D800 up: surrogates, then U+E000–FFFF.
const HIGH_UNITS = /[\ud800-\uffff]/;
const HIGH_UNITS_ALL = /[\ud800-\uffff]/g;

/**
 * A key whose UTF-16 order (JavaScript's `<` and default sort) is the code point order of
 * `text`, which is how Rust orders `str` (UTF-8 byte order is code point order). UTF-16 sorts
 * surrogates (U+D800–DFFF, the halves of every character past U+FFFF) before U+E000–FFFF,
 * code point order after; the key swaps the two ranges, one to one.
 */
function codePointKey(text) {
  return text.replace(HIGH_UNITS_ALL, (unit) => {
    const u = unit.charCodeAt(0);
    return String.fromCharCode(u >= 0xe000 ? u - 0x800 : u + 0x2000);
  });
}

/** Distinct strings in code point order, as Rust sorts them. */
export function sortByCodePoints(strings) {
  // Without units from U+D800 up, UTF-16 order is code point order: sort natively.
  if (!HIGH_UNITS.test(strings.join(''))) return [...strings].sort();
  const byKey = new Map(strings.map((text) => [codePointKey(text), text]));
  return [...byKey.keys()].sort().map((key) => byKey.get(key));
}
