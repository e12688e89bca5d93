/**
 * Text as Python's `str` methods judge it, from the tables of the Python reference's Unicode
 * database (src/generated.ts): `isprintable()`, `isspace()` / `strip()`, and
 * shared.errors.scrubbed_detail built on them.
 */

import { CUT_MARK, MAX_DETAIL_CHARS, NOT_PRINTABLE, SPACES } from "./generated";
import { codePointsOf } from "./utf8";

/** Whether `code` is in one of the [first, last] pairs of a flat, sorted table. */
function inRanges(table: readonly number[], code: number): boolean {
  let low = 0;
  let high = table.length / 2 - 1;
  while (low <= high) {
    const middle = (low + high) >> 1;
    const first = table[2 * middle] ?? 0;
    const last = table[2 * middle + 1] ?? 0;
    if (code < first) high = middle - 1;
    else if (code > last) low = middle + 1;
    else return true;
  }
  return false;
}

/** Python's `chr(code).isprintable()`. */
export function isPrintable(code: number): boolean {
  return !inRanges(NOT_PRINTABLE, code);
}

/** Python's `chr(code).isspace()`. */
export function isSpace(code: number): boolean {
  return inRanges(SPACES, code);
}

/** Python's `text.strip()`. */
export function pyStrip(text: string): string {
  const points = [...codePointsOf(text)];
  let start = 0;
  let end = points.length;
  while (start < end && isSpace(points[start] ?? 0)) start++;
  while (end > start && isSpace(points[end - 1] ?? 0)) end--;
  return String.fromCodePoint(...points.slice(start, end));
}

/** Whether Python's `text.strip()` leaves anything. */
export function hasNonSpace(text: string): boolean {
  for (const code of codePointsOf(text)) if (!isSpace(code)) return true;
  return false;
}

/** Python's `chr(code).encode("unicode_escape")` for a character that is not printable. */
function escaped(code: number): string {
  if (code === 0x09) return "\\t";
  if (code === 0x0a) return "\\n";
  if (code === 0x0d) return "\\r";
  if (code < 0x100) return `\\x${code.toString(16).padStart(2, "0")}`;
  if (code < 0x10000) return `\\u${code.toString(16).padStart(4, "0")}`;
  return `\\U${code.toString(16).padStart(8, "0")}`;
}

/**
 * shared.errors.scrubbed_detail: every character that is not printable shown escaped as
 * Python's `unicode_escape` writes it (`\n`, `\x1b`, `\u202e`), never raw; at most `limit`
 * characters (code points), cut to fit with `…` at the end, never inside an escape.
 * Idempotent.
 */
export function scrubbedDetail(text: string, limit: number = MAX_DETAIL_CHARS): string {
  const points = [...codePointsOf(text)];
  if (points.length <= limit && points.every(isPrintable)) return text;
  const pieces: string[] = [];
  const sizes: number[] = [];
  let size = 0;
  for (const code of points.slice(0, limit + 1)) {
    const printable = isPrintable(code);
    const piece = printable ? String.fromCodePoint(code) : escaped(code);
    pieces.push(piece);
    sizes.push(printable ? 1 : piece.length);
    size += printable ? 1 : piece.length;
    if (size > limit) break;
  }
  if (size <= limit) return pieces.join("");
  while (pieces.length > 0 && size + CUT_MARK.length > limit) {
    pieces.pop();
    size -= sizes.pop() ?? 0;
  }
  return pieces.join("") + CUT_MARK;
}
