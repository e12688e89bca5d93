/**
 * A chat reply's turn as its content frames assemble it (docs/protocol.md#chat-rules,
 * #chat-frames, #chat-digest): the chat frame rules, in the document's order, for each
 * content frame that passed the sequence, binding and count checks; the turn they build
 * (text, thoughts, calls, signatures, usage, finish reason); the content limit over all of
 * it; and the chat content digest over every applied frame's record.
 *
 * The core (src/core.ts) hands it the frames of a reply whose binding is of kind `chat`;
 * the reply's validation and the result's chat keys are src/chat-reply.ts.
 */

import { createHash, type Hash } from "node:crypto";
import { canonicalJson } from "./digest";
import { CHAT_FIELDS, type Frame } from "./frames";
import { isInt, type JsonObject, type JsonValue } from "./json";
import { ProtocolFailure } from "./reasons";
import { codePoints, isWellFormed } from "./utf8";

/** The tool-call limit's default: calls begun in one turn (docs/protocol.md#limits). */
export const DEFAULT_MAX_TOOL_CALLS = 128;
/** The longest finish reason, in code points. */
export const MAX_FINISH_CHARS = 64;
/** The largest usage count: 2^64 - 1. */
const MAX_COUNT = (1n << 64n) - 1n;

/** A call as its fragments built it: `arguments` the raw text, concatenated. */
export interface ToolCall {
  readonly index: number;
  readonly id: string;
  readonly name: string;
  arguments: string;
  signed: boolean;
}

/** A signature kept with its part: a call's `index`, or the text's (thoughts') length `at`. */
export interface Signature {
  readonly part: "text" | "thought" | "tool_call";
  readonly index: number | null;
  readonly at: number | null;
  readonly value: string;
}

export interface ChatLimits {
  readonly max_content_chars: number;
  readonly max_tool_calls: number;
}

/** A string that is not empty and holds no lone surrogate, or null. */
function text(value: JsonValue | undefined): string | null {
  return typeof value === "string" && value !== "" && isWellFormed(value) ? value : null;
}

/** A string with no lone surrogate (the empty one included), or null. */
function anyText(value: JsonValue | undefined): string | null {
  return typeof value === "string" && isWellFormed(value) ? value : null;
}

export class ChatTurn {
  private readonly textParts: string[] = [];
  private readonly thoughtParts: string[] = [];
  /** The text's and the thoughts' lengths in code points. */
  textChars = 0;
  private thoughtChars = 0;
  /** Code points of text, thoughts, every call's arguments and every signature's value. */
  private contentChars = 0;
  readonly calls: ToolCall[] = [];
  readonly signatures: Signature[] = [];
  usage: JsonObject | null = null;
  finishReason: string | null = null;
  /** Content frames applied, of the six kinds. */
  frames = 0;
  private readonly hash: Hash = createHash("sha256");

  constructor(private readonly limits: ChatLimits) {}

  get text(): string {
    return this.textParts.join("");
  }

  get thoughts(): string {
    return this.thoughtParts.join("");
  }

  /** The chat content digest of the frames applied so far (docs/protocol.md#chat-digest). */
  digest(): string {
    return this.hash.copy().digest("hex");
  }

  /**
   * Apply one content frame (a `content_delta` or a chat frame) that passed the frame
   * checks before it: `frame_after_finish`, then the kind's own rules; then it is applied
   * (appended, kept, replaced) and hashed, and the content limit judged after it, as for
   * a delta. Throws `ProtocolFailure` with the first rule that fails.
   */
  apply(frame: Frame): void {
    if (this.finishReason !== null && frame.kind !== "usage") {
      throw new ProtocolFailure("frame_after_finish", frame.kind);
    }
    const part = frame.part ?? new Map<string, JsonValue>();
    let added = 0;
    switch (frame.kind) {
      case "content_delta":
        added = this.applyText(frame.text);
        break;
      case "tool_call":
        added = this.applyToolCall(part);
        break;
      case "thought":
        added = this.applyThought(part);
        break;
      case "signature":
        added = this.applySignature(part);
        break;
      case "usage":
        this.applyUsage(part);
        break;
      case "finish":
        this.applyFinish(part);
        break;
      default:
        throw new Error(`not a content frame: ${frame.kind}`);
    }
    this.frames += 1;
    this.hash.update(canonicalJson(record(frame)));
    this.hash.update("\n");
    this.contentChars += added;
    if (this.contentChars > this.limits.max_content_chars) {
      throw new ProtocolFailure("content_limit", `${this.contentChars} characters`);
    }
  }

  private applyText(value: JsonValue | undefined): number {
    const delta = text(value);
    if (delta === null) throw new ProtocolFailure("invalid_content_delta", "empty or not text");
    const length = codePoints(delta);
    this.textParts.push(delta);
    this.textChars += length;
    return length;
  }

  private applyToolCall(part: ReadonlyMap<string, JsonValue>): number {
    const fail = (why: string): ProtocolFailure => new ProtocolFailure("invalid_tool_call", why);
    const index = part.get("index");
    const begun = BigInt(this.calls.length);
    if (!isInt(index) || index < 0n || index > begun) throw fail("index");
    const id = anyText(part.get("id"));
    const name = anyText(part.get("name"));
    const fragment = anyText(part.get("arguments"));
    if (id === null || name === null || fragment === null) throw fail("not text");
    if (index === begun) {
      if (name === "") throw fail("a new call without a name");
      if (this.calls.length >= this.limits.max_tool_calls) {
        throw new ProtocolFailure("tool_call_limit", `${this.calls.length + 1} calls`);
      }
      this.calls.push({ index: this.calls.length, id, name, arguments: fragment, signed: false });
      return codePoints(fragment);
    }
    const call = this.calls[Number(index)] as ToolCall;
    if ((id !== "" && id !== call.id) || (name !== "" && name !== call.name)) {
      throw fail("another id or name");
    }
    if (fragment === "") throw fail("empty arguments");
    call.arguments += fragment;
    return codePoints(fragment);
  }

  private applyThought(part: ReadonlyMap<string, JsonValue>): number {
    const delta = text(part.get("text"));
    if (delta === null) throw new ProtocolFailure("invalid_thought", "empty or not text");
    const length = codePoints(delta);
    this.thoughtParts.push(delta);
    this.thoughtChars += length;
    return length;
  }

  private applySignature(part: ReadonlyMap<string, JsonValue>): number {
    const fail = (why: string): ProtocolFailure => new ProtocolFailure("invalid_signature", why);
    const of = part.get("part");
    if (of !== "text" && of !== "thought" && of !== "tool_call") throw fail("part");
    const value = text(part.get("value"));
    if (value === null) throw fail("empty or not text");
    const index = part.get("index");
    if (!isInt(index)) throw fail("index");
    if (of === "tool_call") {
      const call = index < BigInt(this.calls.length) ? this.calls[Number(index)] : undefined;
      if (call === undefined || call.signed) throw fail("a call not begun or already signed");
      call.signed = true;
      this.signatures.push({ part: of, index: call.index, at: null, value });
    } else {
      if (index !== 0n) throw fail("index");
      const at = of === "text" ? this.textChars : this.thoughtChars;
      this.signatures.push({ part: of, index: null, at, value });
    }
    return codePoints(value);
  }

  private applyUsage(part: ReadonlyMap<string, JsonValue>): void {
    const usage = new Map<string, JsonValue>();
    for (const name of CHAT_FIELDS.usage) {
      const count = part.get(name);
      if (!isInt(count) || count < 0n || count > MAX_COUNT) {
        throw new ProtocolFailure("invalid_usage", name);
      }
      usage.set(name, count);
    }
    this.usage = usage; // cumulative: the last report replaces the one before
  }

  private applyFinish(part: ReadonlyMap<string, JsonValue>): void {
    const reason = text(part.get("reason"));
    if (reason === null || codePoints(reason) > MAX_FINISH_CHARS) {
      throw new ProtocolFailure("invalid_finish", "not 1-64 code points of text");
    }
    this.finishReason = reason;
  }
}

/** A frame's digest record (docs/protocol.md#chat-digest): its NDJSON object without
 * `sequence` and `binding_sha256`, whatever the wire; hashed as canonical JSON and a LF. */
export function record(frame: Frame): JsonObject {
  const entries = new Map<string, JsonValue>([["kind", frame.kind]]);
  if (frame.kind === "content_delta") {
    entries.set("text", frame.text ?? null);
  } else {
    for (const [name, value] of frame.part ?? []) entries.set(name, value);
  }
  return entries;
}
