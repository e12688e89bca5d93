/**
 * Reason codes (shared.reasons, shared.reason_registry, shared.errors): the registry, the
 * failure the core raises, and the helpers that keep a reason a code and a detail fit to show.
 */

import { EXIT_CODES, REASONS } from "./generated";
import type { Status } from "./status";

export { scrubbedDetail } from "./pytext";

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
