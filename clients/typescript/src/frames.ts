/**
 * The application frame as a decoder gives it (shared/frames.py): fields keep the types the
 * wire gave them, so a wrongly typed field gets the same reason on every wire (the core
 * checks types in the lab's order: sequence, binding, then content).
 */

import type { JsonValue } from "./json";
import { ProtocolFailure } from "./reasons";

/** The five chat frames (docs/protocol.md#chat-frames): a chat reply's parts. */
export type ChatKind = "tool_call" | "thought" | "signature" | "usage" | "finish";

export type FrameKind = "content_delta" | "done" | "error" | "cancel" | ChatKind;

/** The lab's four kinds, the only ones `ndjson-lab` knows. */
export const LAB_FRAME_KINDS: readonly FrameKind[] = ["content_delta", "done", "error", "cancel"];

/** Each chat frame's own fields, in the protocol's order: the NDJSON keys after `sequence`,
 * `kind` and `binding_sha256`, and the `lp` message's field numbers 1..n. */
export const CHAT_FIELDS: Readonly<Record<ChatKind, readonly string[]>> = {
  tool_call: ["index", "id", "name", "arguments"],
  thought: ["text"],
  signature: ["part", "index", "value"],
  usage: [
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "thoughts_tokens",
    "tool_use_prompt_tokens",
    "total_tokens",
  ],
  finish: ["reason"],
};

/** The chat fields that are integers (a `uint64` on `lp`); the others are strings. */
export const CHAT_INTEGER_FIELDS: ReadonlySet<string> = new Set([
  "index",
  ...CHAT_FIELDS.usage,
]);

export const CHAT_KINDS = Object.keys(CHAT_FIELDS) as readonly ChatKind[];

export const FRAME_KINDS: readonly FrameKind[] = [...LAB_FRAME_KINDS, ...CHAT_KINDS];

export function isChatKind(kind: FrameKind): kind is ChatKind {
  return (CHAT_KINDS as readonly FrameKind[]).includes(kind);
}

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
  /** A chat frame only: its own fields (CHAT_FIELDS), each as the wire gave it. */
  readonly part?: ReadonlyMap<string, JsonValue>;
}

/** done's `content_sha256`: exactly 64 lowercase hexadecimal characters. */
const CONTENT_SHA256 = /^[0-9a-f]{64}$/;

/**
 * done's claim as a wire gave it, or `invalid_frame_schema` (shared.frames.checked_done_digest):
 * `contentSha256` is exactly 64 lowercase hex characters (an empty or absent one, which
 * proto3 cannot tell apart, is refused here, not compared) and `contentFrames` a
 * non-negative integer. Part of the frame's shape, as its keys are: checked when the frame
 * is parsed, before its sequence and binding.
 */
export function checkedDoneDigest(contentSha256: JsonValue, contentFrames: JsonValue): DoneDigest {
  if (typeof contentSha256 !== "string" || !CONTENT_SHA256.test(contentSha256)) {
    throw new ProtocolFailure("invalid_frame_schema", "done's content_sha256 is not hex");
  }
  if (typeof contentFrames !== "bigint" || contentFrames < 0n) {
    throw new ProtocolFailure("invalid_frame_schema", "done's content_frames");
  }
  return { contentSha256, contentFrames };
}
