/**
 * The consumer core's states and their transitions (docs/protocol.md#states; the
 * reference's table is in shared/consumer_core.py): the only path to `complete` is a done
 * terminal, a clean end of input, then the reply's validation. src/core.ts fires them.
 */

export type ConsumerState =
  | "streaming"
  | "terminal_received"
  | "validating"
  | "complete"
  | "incomplete"
  | "cancelled"
  | "error"
  | "invalid";

export type Input =
  | "terminal_frame"
  | "protocol_failure"
  | "end_without_terminal"
  | "end_after_done"
  | "end_after_cancel"
  | "end_after_error"
  | "transport_error"
  | "local_abort"
  | "reply_accepted"
  | "reply_rejected";

/** Every legal (state, input) pair: a missing pair is a bug, not a verdict. */
export const TRANSITIONS: ReadonlyMap<string, ConsumerState> = new Map<string, ConsumerState>([
  ["streaming/terminal_frame", "terminal_received"],
  ["streaming/protocol_failure", "invalid"],
  ["streaming/end_without_terminal", "incomplete"],
  ["streaming/transport_error", "error"],
  ["streaming/local_abort", "incomplete"],
  ["terminal_received/protocol_failure", "invalid"],
  ["terminal_received/end_after_done", "validating"],
  ["terminal_received/end_after_cancel", "cancelled"],
  ["terminal_received/end_after_error", "error"],
  ["terminal_received/transport_error", "error"],
  ["terminal_received/local_abort", "incomplete"],
  ["validating/reply_accepted", "complete"],
  ["validating/reply_rejected", "invalid"],
]);

export const FINAL_STATES: ReadonlySet<ConsumerState> = new Set<ConsumerState>([
  "complete",
  "incomplete",
  "cancelled",
  "error",
  "invalid",
]);
