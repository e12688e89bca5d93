/**
 * The application frame as a decoder gives it (shared/frames.py): fields keep the types the
 * wire gave them, so a wrongly typed field gets the same reason on every wire (the core
 * checks types in the lab's order: sequence, binding, then content).
 */

import type { JsonValue } from "./json";

export type FrameKind = "content_delta" | "done" | "error" | "cancel";

export const FRAME_KINDS: readonly FrameKind[] = ["content_delta", "done", "error", "cancel"];

/** done's end-of-stream claim (every wire but ndjson-lab, where it is absent). */
export interface DoneDigest {
  readonly contentSha256: string;
  readonly contentFrames: bigint;
}

export interface Frame {
  /** An int (bigint) when well formed; anything on NDJSON. */
  readonly sequence: JsonValue;
  readonly kind: FrameKind;
  readonly bindingSha256: JsonValue;
  /** content_delta only. */
  readonly text?: JsonValue;
  /** error / cancel only. */
  readonly reason?: JsonValue;
  /** done only, where the wire carries it. */
  readonly doneDigest?: DoneDigest | null;
}
