/**
 * JSON as the Python reference reads and writes it (its `json` module), not as `JSON.parse`
 * and `JSON.stringify` do:
 *
 * - an integer and a float stay apart (`1` is an int, `1.0` and `1e2` are floats): the core
 *   refuses a sequence number or a done's frame count that is not an int, so `JSON.parse`'s
 *   one number type would accept `"sequence": 1.0`. Ints are `bigint` (any size, as
 *   Python's), floats are `number`;
 * - objects are `Map`s: keys keep their order (an integer-like key is not moved first) and a
 *   key `__proto__` is a key like any other;
 * - strict mode (the reference's `strict_json`): a duplicate key or `NaN` / `Infinity` is an
 *   error; lenient mode (`json.loads`) keeps the last of equal keys at the first one's place
 *   and reads those constants as floats;
 * - an int of more than 4300 digits is an error (CPython's limit on int-from-string);
 * - nesting deeper than `maxDepth` is an error, an object counting one level more than an
 *   array (CPython's recursion limit: see `core.ts`);
 * - writing: Python's `json.dumps` byte for byte (`ensure_ascii=False`): its string escapes,
 *   `repr()` of a float (`1.0`, `1e+16`), `sort_keys` in code point order, `indent=2`.
 */

export type JsonValue = null | boolean | string | bigint | number | JsonValue[] | JsonObject;
export type JsonObject = Map<string, JsonValue>;

export class JsonError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "JsonError";
  }
}

export interface ParseOptions {
  /** `refuse` (strict_json) or `last` (json.loads: the last value, at the first key's place). */
  readonly duplicateKeys: "refuse" | "last";
  /** Whether `NaN`, `Infinity` and `-Infinity` are read (as json.loads does) or refused. */
  readonly constants: boolean;
  /** Arrays and objects nested deeper than this are an error (null: no bound of ours). */
  readonly maxDepth: number | null;
}

export const STRICT: ParseOptions = { duplicateKeys: "refuse", constants: false, maxDepth: null };
export const LENIENT: ParseOptions = { duplicateKeys: "last", constants: true, maxDepth: null };

/** CPython's `sys.int_info.default_max_str_digits`. */
export const MAX_INT_DIGITS = 4300;

const WS_SPACE = 0x20;
const WS_TAB = 0x09;
const WS_LF = 0x0a;
const WS_CR = 0x0d;

function isWhitespace(code: number): boolean {
  return code === WS_SPACE || code === WS_TAB || code === WS_LF || code === WS_CR;
}

function isDigit(code: number): boolean {
  return code >= 0x30 && code <= 0x39;
}

function hexValue(code: number): number {
  if (code >= 0x30 && code <= 0x39) return code - 0x30;
  if (code >= 0x61 && code <= 0x66) return code - 0x61 + 10;
  if (code >= 0x41 && code <= 0x46) return code - 0x41 + 10;
  return -1;
}

class Parser {
  private pos = 0;
  private depth = 0;

  constructor(
    private readonly text: string,
    private readonly options: ParseOptions,
  ) {}

  parseDocument(): JsonValue {
    this.skipWhitespace();
    const value = this.parseValue();
    this.skipWhitespace();
    if (this.pos !== this.text.length) throw new JsonError(`extra data at ${this.pos}`);
    return value;
  }

  private skipWhitespace(): void {
    const text = this.text;
    while (this.pos < text.length && isWhitespace(text.charCodeAt(this.pos))) this.pos++;
  }

  private fail(what: string): never {
    throw new JsonError(`${what} at ${this.pos}`);
  }

  private parseValue(): JsonValue {
    const text = this.text;
    if (this.pos >= text.length) this.fail("expecting value");
    const code = text.charCodeAt(this.pos);
    switch (code) {
      case 0x22: // "
        return this.parseString();
      case 0x7b: // {
        return this.parseObject();
      case 0x5b: // [
        return this.parseArray();
      case 0x6e: // n
        return this.literal("null", null);
      case 0x74: // t
        return this.literal("true", true);
      case 0x66: // f
        return this.literal("false", false);
      case 0x4e: // N
        return this.constant("NaN", Number.NaN);
      case 0x49: // I
        return this.constant("Infinity", Number.POSITIVE_INFINITY);
      default:
        if (code === 0x2d && text.startsWith("-Infinity", this.pos)) {
          return this.constant("-Infinity", Number.NEGATIVE_INFINITY);
        }
        if (code === 0x2d || isDigit(code)) return this.parseNumber();
        return this.fail("expecting value");
    }
  }

  private literal<T extends JsonValue>(word: string, value: T): T {
    if (!this.text.startsWith(word, this.pos)) this.fail("expecting value");
    this.pos += word.length;
    return value;
  }

  private constant(word: string, value: number): number {
    if (!this.text.startsWith(word, this.pos)) this.fail("expecting value");
    if (!this.options.constants) this.fail("invalid_json_constant");
    this.pos += word.length;
    return value;
  }

  private parseNumber(): bigint | number {
    const text = this.text;
    const start = this.pos;
    let pos = start;
    if (text.charCodeAt(pos) === 0x2d) pos++;
    const intStart = pos;
    if (pos < text.length && text.charCodeAt(pos) === 0x30) {
      pos++;
    } else if (pos < text.length && isDigit(text.charCodeAt(pos))) {
      while (pos < text.length && isDigit(text.charCodeAt(pos))) pos++;
    } else {
      this.fail("expecting value");
    }
    const intDigits = pos - intStart;
    let isFloat = false;
    if (pos + 1 < text.length && text.charCodeAt(pos) === 0x2e && isDigit(text.charCodeAt(pos + 1))) {
      isFloat = true;
      pos += 2;
      while (pos < text.length && isDigit(text.charCodeAt(pos))) pos++;
    }
    if (pos < text.length && (text.charCodeAt(pos) | 0x20) === 0x65) {
      // An exponent only with digits; else the number ends before the `e` (as CPython).
      let after = pos + 1;
      const sign = text.charCodeAt(after);
      if (sign === 0x2b || sign === 0x2d) after++;
      if (after < text.length && isDigit(text.charCodeAt(after))) {
        while (after < text.length && isDigit(text.charCodeAt(after))) after++;
        isFloat = true;
        pos = after;
      }
    }
    this.pos = pos;
    const lexeme = text.slice(start, pos);
    if (isFloat) return Number(lexeme);
    if (intDigits > MAX_INT_DIGITS) this.fail("int over 4300 digits");
    return BigInt(lexeme);
  }

  private parseString(): string {
    const text = this.text;
    this.pos++; // the opening quote
    let out = "";
    let runStart = this.pos;
    for (;;) {
      if (this.pos >= text.length) this.fail("unterminated string");
      const code = text.charCodeAt(this.pos);
      if (code === 0x22) {
        out += text.slice(runStart, this.pos);
        this.pos++;
        return out;
      }
      if (code < 0x20) this.fail("invalid control character");
      if (code !== 0x5c) {
        this.pos++;
        continue;
      }
      out += text.slice(runStart, this.pos);
      this.pos++;
      if (this.pos >= text.length) this.fail("unterminated string");
      const escape = text.charCodeAt(this.pos);
      this.pos++;
      switch (escape) {
        case 0x22:
          out += '"';
          break;
        case 0x5c:
          out += "\\";
          break;
        case 0x2f:
          out += "/";
          break;
        case 0x62:
          out += "\b";
          break;
        case 0x66:
          out += "\f";
          break;
        case 0x6e:
          out += "\n";
          break;
        case 0x72:
          out += "\r";
          break;
        case 0x74:
          out += "\t";
          break;
        case 0x75: {
          // Python joins an escaped high surrogate and an escaped low one into one code
          // point; as UTF-16 that is the same two code units, so each escape is one unit.
          if (this.pos + 4 > text.length) this.fail("invalid \\uXXXX escape");
          let unit = 0;
          for (let i = 0; i < 4; i++) {
            const digit = hexValue(text.charCodeAt(this.pos + i));
            if (digit < 0) this.fail("invalid \\uXXXX escape");
            unit = unit * 16 + digit;
          }
          this.pos += 4;
          out += String.fromCharCode(unit);
          break;
        }
        default:
          this.pos--;
          this.fail("invalid \\escape");
      }
      runStart = this.pos;
    }
  }

  /** One level deeper; an object costs one level more (CPython calls the strict parser's
   * duplicate-key hook, a Python function, from inside it). */
  private enter(extra: number): void {
    this.depth++;
    const max = this.options.maxDepth;
    if (max !== null && this.depth + extra > max) this.fail("nested too deep");
  }

  private parseArray(): JsonValue[] {
    this.enter(0);
    const text = this.text;
    this.pos++;
    const items: JsonValue[] = [];
    this.skipWhitespace();
    if (text.charCodeAt(this.pos) === 0x5d) {
      this.pos++;
      this.depth--;
      return items;
    }
    for (;;) {
      this.skipWhitespace();
      items.push(this.parseValue());
      this.skipWhitespace();
      const code = text.charCodeAt(this.pos);
      if (code === 0x5d) {
        this.pos++;
        this.depth--;
        return items;
      }
      if (code !== 0x2c) this.fail("expecting ',' delimiter");
      this.pos++;
    }
  }

  private parseObject(): JsonObject {
    this.enter(1);
    const text = this.text;
    this.pos++;
    const object: JsonObject = new Map();
    this.skipWhitespace();
    if (text.charCodeAt(this.pos) === 0x7d) {
      this.pos++;
      this.depth--;
      return object;
    }
    for (;;) {
      this.skipWhitespace();
      if (text.charCodeAt(this.pos) !== 0x22) this.fail("expecting property name");
      const key = this.parseString();
      this.skipWhitespace();
      if (text.charCodeAt(this.pos) !== 0x3a) this.fail("expecting ':' delimiter");
      this.pos++;
      this.skipWhitespace();
      const value = this.parseValue();
      if (object.has(key) && this.options.duplicateKeys === "refuse") {
        this.fail("duplicate_json_key");
      }
      object.set(key, value);
      this.skipWhitespace();
      const code = text.charCodeAt(this.pos);
      if (code === 0x7d) {
        this.pos++;
        this.depth--;
        return object;
      }
      if (code !== 0x2c) this.fail("expecting ',' delimiter");
      this.pos++;
    }
  }
}

/** Parse `text` as one JSON document (whitespace around it allowed: space, tab, LF, CR). */
export function parseJson(text: string, options: ParseOptions = STRICT): JsonValue {
  try {
    return new Parser(text, options).parseDocument();
  } catch (error) {
    if (error instanceof RangeError) throw new JsonError("nested too deep for this stack");
    throw error;
  }
}

// --- predicates --------------------------------------------------------------------------

export function isObject(value: JsonValue | undefined): value is JsonObject {
  return value instanceof Map;
}

/** A Python int (`type(x) is int`: not a bool, not a float). */
export function isInt(value: JsonValue | undefined): value is bigint {
  return typeof value === "bigint";
}

// --- writing -----------------------------------------------------------------------------

/** Python's `json.dumps` string escapes with `ensure_ascii=False` (a lone surrogate, which
 * Python would write raw and then fail to encode, is written `\udXXX`). */
export function quoteString(value: string): string {
  let out = '"';
  let runStart = 0;
  for (let i = 0; i < value.length; i++) {
    const code = value.charCodeAt(i);
    let escaped: string | null = null;
    if (code === 0x22) escaped = '\\"';
    else if (code === 0x5c) escaped = "\\\\";
    else if (code < 0x20) {
      if (code === 0x0a) escaped = "\\n";
      else if (code === 0x0d) escaped = "\\r";
      else if (code === 0x09) escaped = "\\t";
      else if (code === 0x08) escaped = "\\b";
      else if (code === 0x0c) escaped = "\\f";
      else escaped = `\\u${code.toString(16).padStart(4, "0")}`;
    } else if (code >= 0xd800 && code <= 0xdfff) {
      const next = i + 1 < value.length ? value.charCodeAt(i + 1) : 0;
      if (code <= 0xdbff && next >= 0xdc00 && next <= 0xdfff) {
        i++; // a pair: written as it is
        continue;
      }
      escaped = `\\u${code.toString(16)}`;
    }
    if (escaped !== null) {
      out += value.slice(runStart, i) + escaped;
      runStart = i + 1;
    }
  }
  return out + value.slice(runStart) + '"';
}

/** Python's `repr(float)` (the shortest repr that round-trips; exponent form when the
 * decimal point would sit more than 16 places right or 4 places left), as `json.dumps`
 * writes a float; NaN and the infinities as json.dumps writes them. */
export function pythonFloatRepr(value: number): string {
  if (Number.isNaN(value)) return "NaN";
  if (value === Number.POSITIVE_INFINITY) return "Infinity";
  if (value === Number.NEGATIVE_INFINITY) return "-Infinity";
  if (value === 0) return Object.is(value, -0) ? "-0.0" : "0.0";
  const sign = value < 0 ? "-" : "";
  const [mantissa, exponentText] = Math.abs(value).toExponential().split("e");
  const digits = (mantissa ?? "").replace(".", "");
  const exponent = Number(exponentText);
  const point = exponent + 1; // digits are 0.DIGITS * 10**point
  if (point <= -4 || point > 16) {
    const rest = digits.length > 1 ? `.${digits.slice(1)}` : "";
    const magnitude = String(Math.abs(exponent)).padStart(2, "0");
    return `${sign}${digits[0]}${rest}e${exponent < 0 ? "-" : "+"}${magnitude}`;
  }
  if (point <= 0) return `${sign}0.${"0".repeat(-point)}${digits}`;
  if (point >= digits.length) return `${sign}${digits}${"0".repeat(point - digits.length)}.0`;
  return `${sign}${digits.slice(0, point)}.${digits.slice(point)}`;
}

/** Compare two strings by code point (Python's order), not by UTF-16 code unit. */
export function compareCodePoints(a: string, b: string): number {
  const length = Math.min(a.length, b.length);
  for (let i = 0; i < length; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x === y) continue;
    // Below the surrogates, and between them and the rest, units order as code points do;
    // a surrogate (part of an astral code point) sorts above U+E000-U+FFFF.
    const xs = x >= 0xd800 && x <= 0xdfff;
    const ys = y >= 0xd800 && y <= 0xdfff;
    if (xs === ys) return x - y;
    if (xs) return y >= 0xe000 ? 1 : x - y;
    return x >= 0xe000 ? -1 : x - y;
  }
  return a.length - b.length;
}

export interface DumpOptions {
  /** `sort_keys=True`. */
  readonly sortKeys?: boolean;
  /** `indent=N` (then `": "` between key and value, `","` then a new line between items). */
  readonly indent?: number;
}

/** Python's `json.dumps(value, ensure_ascii=False, ...)`: compact (`separators=(",", ":")`)
 * without `indent`, its default layout with it. */
export function dumpJson(value: JsonValue, options: DumpOptions = {}): string {
  const parts: string[] = [];
  write(value, options, 0, parts);
  return parts.join("");
}

function write(value: JsonValue, options: DumpOptions, level: number, parts: string[]): void {
  if (value === null) parts.push("null");
  else if (value === true) parts.push("true");
  else if (value === false) parts.push("false");
  else if (typeof value === "string") parts.push(quoteString(value));
  else if (typeof value === "bigint") parts.push(value.toString());
  else if (typeof value === "number") parts.push(pythonFloatRepr(value));
  else if (Array.isArray(value)) writeItems(value, options, level, parts, "[", "]");
  else writeObject(value, options, level, parts);
}

function writeItems(
  items: readonly JsonValue[],
  options: DumpOptions,
  level: number,
  parts: string[],
  open: string,
  close: string,
): void {
  if (items.length === 0) {
    parts.push(open + close);
    return;
  }
  const indent = options.indent;
  parts.push(open);
  const inner = indent === undefined ? "" : `\n${" ".repeat(indent * (level + 1))}`;
  items.forEach((item, index) => {
    parts.push(index === 0 ? inner : `,${inner}`);
    write(item, options, level + 1, parts);
  });
  if (indent !== undefined) parts.push(`\n${" ".repeat(indent * level)}`);
  parts.push(close);
}

function writeObject(object: JsonObject, options: DumpOptions, level: number, parts: string[]): void {
  if (object.size === 0) {
    parts.push("{}");
    return;
  }
  let keys = [...object.keys()];
  if (options.sortKeys) keys = keys.sort(compareCodePoints);
  const indent = options.indent;
  const separator = indent === undefined ? ":" : ": ";
  const inner = indent === undefined ? "" : `\n${" ".repeat(indent * (level + 1))}`;
  parts.push("{");
  keys.forEach((key, index) => {
    parts.push(index === 0 ? inner : `,${inner}`);
    parts.push(quoteString(key), separator);
    write(object.get(key) ?? null, options, level + 1, parts);
  });
  if (indent !== undefined) parts.push(`\n${" ".repeat(indent * level)}`);
  parts.push("}");
}

/** Build a JSON object from entries in order (a helper for documents written here). */
export function jsonObject(entries: ReadonlyArray<readonly [string, JsonValue]>): JsonObject {
  return new Map(entries);
}
