/**
 * Reason codes (shared.errors): the registry, the failure the core raises, and the helpers
 * that keep a reason a code and a detail fit to show.
 */

import { CUT_MARK, EXIT_CODES, MAX_DETAIL_CHARS, NOT_PRINTABLE, REASONS } from "./generated";
import type { Status } from "./status";
import { codePointsOf } from "./utf8";

/** Every registered code and its status. */
export const REASON_STATUS: ReadonlyMap<string, Status> = new Map(REASONS);

/** The registered code `text` is, or null (any other text, or not text at all). */
export function registered(text: unknown): string | null {
  return typeof text === "string" && REASON_STATUS.has(text) ? text : null;
}

/** The status a registered code carries. */
export function statusOf(code: string): Status {
  const status = REASON_STATUS.get(code);
  if (status === undefined) throw new Error(`not a registered reason code: ${code}`);
  return status;
}

export function exitCode(status: Status): number {
  return EXIT_CODES[status];
}

/** The consumer refused the bytes or frames it was given (shared.errors.ProtocolFailure). */
export class ProtocolFailure extends Error {
  constructor(
    readonly reason: string,
    readonly detail: string = "",
  ) {
    super(detail ? `${reason}: ${detail}` : reason);
    this.name = "ProtocolFailure";
    statusOf(reason); // a failure always names a registered code
  }
}

function isPrintable(code: number): boolean {
  // Binary search of the [first, last] pairs of NOT_PRINTABLE.
  let low = 0;
  let high = NOT_PRINTABLE.length / 2 - 1;
  while (low <= high) {
    const middle = (low + high) >> 1;
    const first = NOT_PRINTABLE[2 * middle] ?? 0;
    const last = NOT_PRINTABLE[2 * middle + 1] ?? 0;
    if (code < first) high = middle - 1;
    else if (code > last) low = middle + 1;
    else return false;
  }
  return true;
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
 * shared.errors.scrubbed_detail: every character that is not printable (Python's
 * `str.isprintable()`) shown escaped as Python's `unicode_escape` writes it, at most `limit`
 * characters (code points), cut with `…` at the end, never inside an escape.
 */
export function scrubbedDetail(text: string, limit: number = MAX_DETAIL_CHARS): string {
  const points = [...codePointsOf(text)];
  if (points.length <= limit && points.every(isPrintable)) return text;
  const pieces: string[] = [];
  let size = 0;
  for (const code of points.slice(0, limit + 1)) {
    const piece = isPrintable(code) ? String.fromCodePoint(code) : escaped(code);
    pieces.push(piece);
    size += piece === String.fromCodePoint(code) ? 1 : piece.length;
    if (size > limit) break;
  }
  if (size <= limit) return pieces.join("");
  while (pieces.length > 0 && size + 1 > limit) {
    const piece = pieces.pop() ?? "";
    size -= [...piece].length;
  }
  return pieces.join("") + CUT_MARK;
}
