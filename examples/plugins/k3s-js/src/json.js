// JSON as the Rust renderers read it (serde_json 1.0, without its optional features).
//
// The NodeClass `kubelet` settings arrive as JSON text. `JSON.parse` would accept the same
// documents, but it would not say the same things: the Rust renderer reports syntax errors
// in serde_json's words ("expected `,` or `}` at line 1 column 9", columns counted in bytes),
// tells `110` (an integer) from `110.0` (a float), keeps integers up to 2^64 - 1 exactly and
// prints floats as serde_json does (`1.0`, `1e+21`). So this module follows serde_json's
// parser step by step, on the UTF-8 bytes of the text.
//
// A parsed value is one of:
//   { kind: 'null' }
//   { kind: 'bool', value: true | false }
//   { kind: 'number', number: 'unsigned' | 'negative' | 'float', value: BigInt | Number }
//   { kind: 'string', value: '…' }
//   { kind: 'array', items: [value, …] }
//   { kind: 'object', entries: Map<string, value> }   (a repeated key keeps its last value)

/** A syntax error, with serde_json's message ("… at line L column C"). */
export class JsonError extends Error {}

const U64_MAX = 2n ** 64n - 1n;
const I32_MAX = 2 ** 31 - 1;
const I32_MIN = -(2 ** 31);

// serde_json scales floats by these powers of ten (its table holds 1e0 through 1e308).
const POW10 = Array.from({ length: 309 }, (_, i) => Number(`1e${i}`));

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

const isDigit = (b) => b >= 0x30 && b <= 0x39;

/** The value of one hexadecimal digit, or -1. */
function hexValue(b) {
  if (isDigit(b)) return b - 0x30;
  if (b >= 0x61 && b <= 0x66) return b - 0x61 + 10;
  if (b >= 0x41 && b <= 0x46) return b - 0x41 + 10;
  return -1;
}

class Parser {
  constructor(text) {
    this.bytes = new TextEncoder().encode(text);
    this.index = 0;
    this.remainingDepth = 128;
    // ignoreBOM: a string may begin with U+FEFF, which is a character here, not a byte order mark.
    this.decoder = new TextDecoder('utf-8', { ignoreBOM: true });
  }

  // --- reading bytes (`null` is the end of the input) ---

  peek() {
    return this.index < this.bytes.length ? this.bytes[this.index] : null;
  }

  peekOrNul() {
    return this.peek() ?? 0;
  }

  next() {
    return this.index < this.bytes.length ? this.bytes[this.index++] : null;
  }

  eat() {
    this.index++;
  }

  // --- errors: `error` points at the byte just read, `peekError` at the one peeked ---

  at(index, message) {
    const before = this.bytes.subarray(0, index);
    const startOfLine = before.lastIndexOf(0x0a) + 1;
    let line = 1;
    for (let i = 0; i < startOfLine; i++) {
      if (before[i] === 0x0a) line++;
    }
    return new JsonError(`${message} at line ${line} column ${index - startOfLine}`);
  }

  error(message) {
    return this.at(this.index, message);
  }

  peekError(message) {
    return this.at(Math.min(this.bytes.length, this.index + 1), message);
  }

  /** Skips JSON whitespace; returns the next byte without consuming it. */
  whitespace() {
    // The hot loops read the bytes directly: the engine interprets this code, and a method
    // call per byte would cost more than the rest of the loop.
    const { bytes } = this;
    let i = this.index;
    while (i < bytes.length) {
      const b = bytes[i];
      if (b !== 0x20 && b !== 0x0a && b !== 0x09 && b !== 0x0d) break;
      i++;
    }
    this.index = i;
    return this.peek();
  }

  // --- values ---

  document() {
    const value = this.value();
    if (this.whitespace() !== null) throw this.peekError('trailing characters');
    return value;
  }

  value() {
    const b = this.whitespace();
    if (b === null) throw this.peekError('EOF while parsing a value');
    switch (b) {
      case 0x6e: // n
        this.eat();
        this.ident('ull');
        return { kind: 'null' };
      case 0x74: // t
        this.eat();
        this.ident('rue');
        return { kind: 'bool', value: true };
      case 0x66: // f
        this.eat();
        this.ident('alse');
        return { kind: 'bool', value: false };
      case 0x2d: // -
        this.eat();
        return this.integer(false);
      case QUOTE:
        this.eat();
        return { kind: 'string', value: this.string() };
      case 0x5b: // [
        this.enter();
        this.eat();
        return this.leave({ kind: 'array', items: this.arrayItems() });
      case 0x7b: // {
        this.enter();
        this.eat();
        return this.leave({ kind: 'object', entries: this.objectEntries() });
      default:
        if (isDigit(b)) return this.integer(true);
        throw this.peekError('expected value');
    }
  }

  enter() {
    this.remainingDepth -= 1;
    if (this.remainingDepth === 0) throw this.peekError('recursion limit exceeded');
  }

  leave(value) {
    this.remainingDepth += 1;
    this.eat(); // the closing bracket, which the loop stopped at
    return value;
  }

  ident(rest) {
    for (const expected of rest) {
      const b = this.next();
      if (b === null) throw this.error('EOF while parsing a value');
      if (b !== expected.charCodeAt(0)) throw this.error('expected ident');
    }
  }

  arrayItems() {
    const items = [];
    for (let first = true; ; first = false) {
      const b = this.whitespace();
      if (b === null) throw this.peekError('EOF while parsing a list');
      if (b === 0x5d) return items; // ]
      if (!first) {
        if (b !== 0x2c) throw this.peekError('expected `,` or `]`');
        this.eat();
        const after = this.whitespace();
        if (after === 0x5d) throw this.peekError('trailing comma');
        if (after === null) throw this.peekError('EOF while parsing a value');
      }
      items.push(this.value());
    }
  }

  objectEntries() {
    const entries = new Map();
    for (let first = true; ; first = false) {
      const b = this.whitespace();
      if (b === null) throw this.peekError('EOF while parsing an object');
      if (b === 0x7d) return entries; // }
      if (first) {
        if (b !== QUOTE) throw this.peekError('key must be a string');
      } else {
        if (b !== 0x2c) throw this.peekError('expected `,` or `}`');
        this.eat();
        const after = this.whitespace();
        if (after === 0x7d) throw this.peekError('trailing comma');
        if (after === null) throw this.peekError('EOF while parsing a value');
        if (after !== QUOTE) throw this.peekError('key must be a string');
      }
      this.eat(); // the key's opening quote
      const key = this.string();
      const colon = this.whitespace();
      if (colon === null) throw this.peekError('EOF while parsing an object');
      if (colon !== 0x3a) throw this.peekError('expected `:`');
      this.eat();
      entries.delete(key); // a repeated key keeps its last value
      entries.set(key, this.value());
    }
  }

  // --- strings ---

  /** The rest of a string whose opening quote was read. */
  string() {
    let text = '';
    let start = this.index;
    const piece = () => this.decoder.decode(this.bytes.subarray(start, this.index));
    const { bytes } = this;
    for (;;) {
      let i = this.index;
      while (i < bytes.length) {
        const c = bytes[i];
        if (c === QUOTE || c === BACKSLASH || c < 0x20) break;
        i++;
      }
      this.index = i;
      const b = this.peek();
      if (b === null) throw this.error('EOF while parsing a string');
      if (b === QUOTE) {
        text += piece();
        this.eat();
        return text;
      }
      if (b === BACKSLASH) {
        text += piece();
        this.eat();
        text += this.escape();
        start = this.index;
      } else {
        this.eat();
        throw this.error('control character (\\u0000-\\u001F) found while parsing a string');
      }
    }
  }

  escape() {
    const b = this.next();
    if (b === null) throw this.error('EOF while parsing a string');
    switch (b) {
      case QUOTE:
        return '"';
      case BACKSLASH:
        return '\\';
      case 0x2f:
        return '/';
      case 0x62:
        return '\b';
      case 0x66:
        return '\f';
      case 0x6e:
        return '\n';
      case 0x72:
        return '\r';
      case 0x74:
        return '\t';
      case 0x75:
        return this.unicodeEscape();
      default:
        throw this.error('invalid escape');
    }
  }

  hexEscape() {
    if (this.bytes.length - this.index < 4) {
      this.index = this.bytes.length;
      throw this.error('EOF while parsing a string');
    }
    const digits = Array.from(this.bytes.subarray(this.index, this.index + 4), hexValue);
    this.index += 4;
    if (digits.some((d) => d < 0)) throw this.error('invalid escape');
    return digits.reduce((n, d) => n * 16 + d, 0);
  }

  /** `\uXXXX`, or a surrogate pair `\uD83D\uDE00`; a lone surrogate is an error. */
  unicodeEscape() {
    const high = this.hexEscape();
    if (high >= 0xdc00 && high <= 0xdfff) throw this.error('lone leading surrogate in hex escape');
    if (high < 0xd800 || high > 0xdbff) return String.fromCharCode(high);
    for (const expected of [BACKSLASH, 0x75]) {
      const b = this.peek();
      if (b === null) throw this.error('EOF while parsing a string');
      this.eat();
      if (b !== expected) throw this.error('unexpected end of hex escape');
    }
    const low = this.hexEscape();
    if (low < 0xdc00 || low > 0xdfff) throw this.error('lone leading surrogate in hex escape');
    return String.fromCharCode(high, low);
  }

  // --- numbers ---

  /** A number whose sign was read: an integer while it fits, else a float. */
  integer(positive) {
    const first = this.next();
    if (first === null) throw this.error('EOF while parsing a value');
    if (first === 0x30) {
      // There can be only one leading 0.
      if (isDigit(this.peekOrNul())) throw this.peekError('invalid number');
      return this.afterInteger(positive, 0n);
    }
    if (!isDigit(first)) throw this.error('invalid number');
    let significand = BigInt(first - 0x30);
    for (;;) {
      const b = this.peekOrNul();
      if (!isDigit(b)) return this.afterInteger(positive, significand);
      const grown = significand * 10n + BigInt(b - 0x30);
      if (grown > U64_MAX) return float(this.longInteger(positive, significand));
      this.eat();
      significand = grown;
    }
  }

  afterInteger(positive, significand) {
    const b = this.peekOrNul();
    if (b === 0x2e) return float(this.decimal(positive, significand, 0));
    if (b === 0x65 || b === 0x45) return float(this.exponent(positive, significand, 0));
    if (positive) return { kind: 'number', number: 'unsigned', value: significand };
    // -0 and integers below -2^63 become floats.
    if (significand === 0n || significand > 2n ** 63n) return float(-Number(significand));
    return { kind: 'number', number: 'negative', value: -significand };
  }

  /** Digits past 2^64 - 1: each one scales the value by ten. */
  longInteger(positive, significand) {
    let exponent = 0;
    for (;;) {
      const b = this.peekOrNul();
      if (isDigit(b)) {
        this.eat();
        exponent += 1;
      } else if (b === 0x2e) {
        return this.decimal(positive, significand, exponent);
      } else if (b === 0x65 || b === 0x45) {
        return this.exponent(positive, significand, exponent);
      } else {
        return this.fromParts(positive, significand, exponent);
      }
    }
  }

  decimal(positive, significand, exponentBefore) {
    this.eat(); // .
    let exponentAfter = 0;
    for (;;) {
      const b = this.peekOrNul();
      if (!isDigit(b)) break;
      const grown = significand * 10n + BigInt(b - 0x30);
      if (grown > U64_MAX) {
        // Further digits cannot change the significand: skip them.
        while (isDigit(this.peekOrNul())) this.eat();
        const exponent = exponentBefore + exponentAfter;
        const e = this.peekOrNul();
        if (e === 0x65 || e === 0x45) return this.exponent(positive, significand, exponent);
        return this.fromParts(positive, significand, exponent);
      }
      this.eat();
      significand = grown;
      exponentAfter -= 1;
    }
    if (exponentAfter === 0) {
      if (this.peek() === null) throw this.peekError('EOF while parsing a value');
      throw this.peekError('invalid number');
    }
    const exponent = exponentBefore + exponentAfter;
    const b = this.peekOrNul();
    if (b === 0x65 || b === 0x45) return this.exponent(positive, significand, exponent);
    return this.fromParts(positive, significand, exponent);
  }

  exponent(positive, significand, startingExponent) {
    this.eat(); // e or E
    let positiveExponent = true;
    const sign = this.peekOrNul();
    if (sign === 0x2b) {
      this.eat();
    } else if (sign === 0x2d) {
      this.eat();
      positiveExponent = false;
    }
    const first = this.next();
    if (first === null) throw this.error('EOF while parsing a value');
    if (!isDigit(first)) throw this.error('invalid number');
    let exponent = first - 0x30;
    while (isDigit(this.peekOrNul())) {
      const digit = this.next() - 0x30;
      if (exponent * 10 + digit > I32_MAX) {
        // A huge exponent: zero or an underflow to zero, else out of range.
        if (significand !== 0n && positiveExponent) throw this.error('number out of range');
        while (isDigit(this.peekOrNul())) this.eat();
        return positive ? 0 : -0;
      }
      exponent = exponent * 10 + digit;
    }
    const total = positiveExponent ? startingExponent + exponent : startingExponent - exponent;
    return this.fromParts(positive, significand, Math.min(I32_MAX, Math.max(I32_MIN, total)));
  }

  /** significand × 10^exponent the way serde_json computes it (not always the nearest float). */
  fromParts(positive, significand, exponent) {
    let f = Number(significand);
    for (;;) {
      const power = exponent === I32_MIN ? undefined : POW10[Math.abs(exponent)];
      if (power !== undefined) {
        if (exponent >= 0) {
          f *= power;
          if (!Number.isFinite(f)) throw this.error('number out of range');
        } else {
          f /= power;
        }
        break;
      }
      if (f === 0) break;
      if (exponent >= 0) throw this.error('number out of range');
      f /= 1e308;
      exponent += 308;
    }
    return positive ? f : -f;
  }
}

function float(value) {
  return { kind: 'number', number: 'float', value };
}

/** Parses a JSON document; throws a `JsonError` with serde_json's message. */
export function parseJson(text) {
  return new Parser(text).document();
}

/**
 * A number as serde_json prints it: integers exactly; floats in the shortest form that
 * reads back the same, positional with `.0` for decimal exponents -5 through 15
 * (`1.0`, `0.0001`, `1000000000000000.0`) and scientific beyond (`1e+16`, `1.5e-7`).
 */
export function numberText(number) {
  if (number.number !== 'float') return number.value.toString();
  const f = number.value;
  const sign = f < 0 || Object.is(f, -0) ? '-' : '';
  if (f === 0) return `${sign}0.0`;
  // JavaScript also prints the shortest round-tripping digits; take them from its text.
  const [, whole, fraction = '', exp = '0'] = /^(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/.exec(String(Math.abs(f)));
  const all = whole + fraction;
  const leadingZeros = all.length - all.replace(/^0+/, '').length;
  const digits = all.slice(leadingZeros).replace(/0+$/, '');
  const e = whole.length + Number(exp) - leadingZeros - 1; // f = d.ddd × 10^e
  if (e >= -5 && e <= 15) {
    if (digits.length - 1 <= e) return `${sign}${digits}${'0'.repeat(e + 1 - digits.length)}.0`;
    if (e >= 0) return `${sign}${digits.slice(0, e + 1)}.${digits.slice(e + 1)}`;
    return `${sign}0.${'0'.repeat(-e - 1)}${digits}`;
  }
  const mantissa = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
  return `${sign}${mantissa}e${e < 0 ? '-' : '+'}${Math.abs(e)}`;
}
