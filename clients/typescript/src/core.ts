/**
 * The consumer core (shared/consumer_core.py): the one place that decides whether a reply
 * is accepted. Sans-IO: the edge hands it transport chunks with `receiveData()`, then says
 * how the input ended with exactly one of `endOfStream()`, `transportError()` or `abort()`;
 * each returns the result.
 *
 * A wire decoder splits the bytes into raw frames, the codec parses each, and the core
 * checks them in the lab's order: nothing after the terminal; frame shape (the codec); the
 * next sequence number; the binding hash; the frame count; then the content (non-empty
 * text, encodable, within the content limit: the delta that passes the limit is appended
 * first, so it is in `provisional_content`) or the terminal (a reason for error / cancel;
 * on the digest wires, done's claim against the content applied). The first failure moves
 * the machine to `invalid`; nothing after it is interpreted.
 *
 * An answer is accepted only on the path streaming -> terminal_received (done) ->
 * validating -> complete: a done terminal, a clean end of input with no partial frame or
 * character, and the reply's validation by the binding's kind (src/kinds.ts): a grounded
 * reply against the bound context, a text reply as it came (the empty text included), a
 * chat reply's turn (src/chat.ts, src/chat-reply.ts) by its finish and its calls.
 */

import { ChatTurn, DEFAULT_MAX_TOOL_CALLS } from "./chat";
import { CallFailure, declaredTools, notesOf, turnDocument, validateTurn } from "./chat-reply";
import { digest } from "./digest";
import { isChatKind, type FrameKind, type Frame } from "./frames";
import { DEFAULT_LIMITS as LAB_LIMITS } from "./generated";
import { isInt, type JsonObject, type JsonValue } from "./json";
import { kindOf, type ReplyKind } from "./kinds";
import { FINAL_STATES, TRANSITIONS, type ConsumerState, type Input } from "./core-states";
import { ProtocolFailure, registered, scrubbedDetail } from "./reasons";
import { validateReply } from "./reply";
import type { Event, StreamResult, Stats } from "./result";
import type { Status } from "./status";
import { codePoints, encodeUtf8, isWellFormed } from "./utf8";
import { createHash, type Hash } from "node:crypto";
import { integrityOf, type FrameDecoder, type WireCodec, type WireFormat } from "./wire/base";
import { LENGTH_PREFIXED, LENGTH_PREFIXED_CHAT } from "./wire/lp";
import { ndjsonCodec } from "./wire/ndjson";

/**
 * The deepest nesting of arrays and objects the reference's JSON parser reads in a frame or
 * a reply. CPython's parser recurses per level and its recursion limit (1000) counts the
 * Python frames already on the stack, so the reference's bound depends on how deep it is
 * called: these are the bounds with the core called from a shallow script (a test runner's
 * stack is deeper, and its bound lower). Deeper nesting is `invalid_frame_json` /
 * `invalid_answer_json`. See the README's list of rules read from code.
 */
export const MAX_FRAME_JSON_DEPTH = 991;
export const MAX_REPLY_JSON_DEPTH = 992;

export interface Limits {
  readonly max_stream_bytes: number;
  readonly max_frame_bytes: number;
  readonly max_content_chars: number;
  readonly max_frames: number;
  readonly max_reason_chars: number;
  /** Tool calls begun in one chat turn (docs/protocol.md#limits). */
  readonly max_tool_calls: number;
}

export const LIMIT_NAMES: ReadonlyArray<keyof Limits> = [
  "max_stream_bytes",
  "max_frame_bytes",
  "max_content_chars",
  "max_frames",
  "max_reason_chars",
  "max_tool_calls",
];

/** The lab's limits (src/generated.ts) and the chat kind's tool-call limit. */
export const DEFAULT_LIMITS: Limits = { ...LAB_LIMITS, max_tool_calls: DEFAULT_MAX_TOOL_CALLS };

export type { ConsumerState };

const END_AFTER: Readonly<Record<"cancel" | "error", Input>> = {
  cancel: "end_after_cancel",
  error: "end_after_error",
};
const UNREGISTERED: Readonly<Record<"cancel" | "error", string>> = {
  cancel: "unregistered_cancel_terminal",
  error: "unregistered_error_terminal",
};

/** The wire's codec; on `lp`, a chat reply's `Frame` has the chat frames' fields 7-11. */
export function codecFor(wire: WireFormat, kind: ReplyKind = "grounded"): WireCodec {
  if (wire !== "lp") return ndjsonCodec(wire, MAX_FRAME_JSON_DEPTH);
  return kind === "chat" ? LENGTH_PREFIXED_CHAT : LENGTH_PREFIXED;
}

export interface ConsumerOptions {
  readonly wire?: WireFormat;
  readonly limits?: Partial<Limits>;
  readonly ignoreDuplicates?: boolean;
  /** The binding's digest when the caller has it (the SHA-256 of the canonical bytes sent). */
  readonly bindingSha256?: string;
}

export class ReplyConsumer {
  readonly binding: JsonObject;
  /** What the reply must be (src/kinds.ts): from the binding, which names it. */
  readonly kind: ReplyKind;
  readonly bindingSha256: string;
  readonly wire: WireFormat;
  readonly limits: Limits;
  readonly ignoreDuplicates: boolean;

  private readonly codec: WireCodec;
  private decoder: FrameDecoder;
  private stateValue: ConsumerState = "streaming";
  private reasonValue: string | null = null;
  private detailValue: string | null = null;
  /** Set by the first of endOfStream / transportError / abort: no input after it. */
  private inputEnded = false;
  private bytes = 0;
  private fragments = 0;
  private reconnects = 0;
  private discarded = 0;
  /** Frames counted (the lab counts the one a limit refuses). */
  private frames = 0;
  /** Under the duplicate policy: SHA-256 of each applied frame's bytes, by sequence - 1. */
  private readonly applied: string[] = [];
  private readonly parts: string[] = [];
  private characters = 0;
  private contentFrames = 0;
  private readonly contentHash: Hash = createHash("sha256");
  private terminal: FrameKind | null = null;
  private terminalReason: string | null = null;
  private accepted: JsonObject | null = null;
  /** A chat reply's turn and its declared tools (null for the other kinds). */
  private readonly chat: ChatTurn | null = null;
  private readonly tools: ReturnType<typeof declaredTools> = new Map();
  /** The call a chat reply's validation refused. */
  private call: JsonObject | null = null;
  private citations: JsonObject[] = [];
  private readonly events: Event[] = [];
  transport: JsonObject | null = null;

  constructor(binding: JsonObject, options: ConsumerOptions = {}) {
    this.binding = binding;
    this.kind = kindOf(binding);
    this.bindingSha256 = options.bindingSha256 ?? digest(binding);
    this.wire = options.wire ?? "lp";
    this.limits = { ...DEFAULT_LIMITS, ...options.limits };
    for (const name of LIMIT_NAMES) {
      const value = this.limits[name];
      if (!Number.isInteger(value) || value < 1) {
        throw new RangeError(`${name} must be a positive integer, not ${value}`);
      }
    }
    this.ignoreDuplicates = options.ignoreDuplicates ?? false;
    if (this.kind === "chat") {
      this.chat = new ChatTurn(this.limits);
      this.tools = declaredTools(binding);
    }
    this.codec = codecFor(this.wire, this.kind);
    this.decoder = this.codec.decoder(this.limits.max_frame_bytes);
  }

  // --- state ---------------------------------------------------------------------------

  get state(): ConsumerState {
    return this.stateValue;
  }

  /** True once the machine has reached a final state. */
  get finished(): boolean {
    return FINAL_STATES.has(this.stateValue);
  }

  get provisionalContent(): string {
    return this.chat === null ? this.parts.join("") : this.chat.text;
  }

  get stats(): Stats {
    return {
      bytesReceived: this.bytes,
      transportFragments: this.fragments,
      applicationFrames: this.frames,
      reconnects: this.reconnects,
      discardedBytes: this.discarded,
    };
  }

  private fire(input: Input, reason: string | null = null, detail: string | null = null): void {
    const next = TRANSITIONS.get(`${this.stateValue}/${input}`);
    if (next === undefined) throw new Error(`no transition from ${this.stateValue} on ${input}`);
    this.stateValue = next;
    this.reasonValue = reason;
    this.detailValue = detail;
  }

  /** Record the first failure, move to invalid, and return the failure to throw. */
  private fail(failure: ProtocolFailure): ProtocolFailure {
    this.fire("protocol_failure", failure.reason);
    return failure;
  }

  // --- input ---------------------------------------------------------------------------

  /** Take one transport chunk. Throws `ProtocolFailure` on the first bad byte or frame. */
  receiveData(data: Uint8Array): void {
    if (this.inputEnded) throw new ProtocolFailure("consumer_already_finished");
    if (this.finished) throw new ProtocolFailure(this.reasonValue ?? "consumer_already_finished");
    this.bytes += data.length;
    this.fragments += 1;
    if (this.bytes > this.limits.max_stream_bytes) {
      throw this.fail(new ProtocolFailure("stream_byte_limit", `${this.bytes} bytes`));
    }
    try {
      this.decoder.receiveData(data);
      for (let payload = this.decoder.nextEvent(); payload !== null; payload = this.decoder.nextEvent()) {
        this.apply(payload);
      }
    } catch (error) {
      if (error instanceof ProtocolFailure && !this.finished) throw this.fail(error);
      throw error;
    }
  }

  private apply(payload: Buffer): void {
    if (this.terminal !== null) throw new ProtocolFailure("frame_after_terminal");
    const frame = this.codec.parseFrame(payload);
    if (!this.admit(frame, payload)) {
      this.events.push({ kind: "duplicate_dropped", sequence: Number(frame.sequence) });
      return;
    }
    const sequence = this.frames;
    if (frame.kind === "done" || frame.kind === "error" || frame.kind === "cancel") {
      this.applyTerminal(frame, sequence);
      return;
    }
    if (this.chat !== null) {
      this.chat.apply(frame);
      this.events.push(
        frame.kind === "content_delta"
          ? { kind: "provisional_content", sequence, characters: this.chat.textChars }
          : { kind: "part_received", sequence, part: frame.kind },
      );
      return;
    }
    if (isChatKind(frame.kind)) throw new ProtocolFailure("part_outside_chat", frame.kind);
    const text = frame.text;
    if (typeof text !== "string" || text === "") {
      throw new ProtocolFailure("invalid_content_delta", "empty or not text");
    }
    if (!isWellFormed(text)) throw new ProtocolFailure("invalid_content_delta", "not UTF-8");
    this.parts.push(text);
    this.characters += codePoints(text);
    this.contentFrames += 1;
    this.contentHash.update(encodeUtf8(text));
    if (this.characters > this.limits.max_content_chars) {
      throw new ProtocolFailure("content_limit", `${this.characters} characters`);
    }
    this.events.push({ kind: "provisional_content", sequence, characters: this.characters });
  }

  /** The frame checks in the lab's order: the next sequence number (or, under the duplicate
   * policy, an exact replay: false), the binding hash, the frame count. */
  private admit(frame: Frame, payload: Buffer): boolean {
    const sequence = frame.sequence;
    if (!isInt(sequence) || sequence !== BigInt(this.frames + 1)) {
      if (this.isDuplicate(sequence, payload)) return false;
      throw new ProtocolFailure("invalid_sequence", `expected ${this.frames + 1}`);
    }
    if (frame.bindingSha256 !== this.bindingSha256) {
      throw new ProtocolFailure("frame_request_mismatch", `sequence ${sequence}`);
    }
    this.frames += 1;
    if (this.frames > this.limits.max_frames) {
      throw new ProtocolFailure("frame_count_limit", `${this.frames} frames`);
    }
    if (this.ignoreDuplicates) this.applied.push(payloadDigest(payload));
    return true;
  }

  private isDuplicate(sequence: JsonValue, payload: Buffer): boolean {
    if (!this.ignoreDuplicates || !isInt(sequence)) return false;
    if (sequence < 1n || sequence > BigInt(this.frames)) return false;
    if (this.applied[Number(sequence) - 1] !== payloadDigest(payload)) {
      throw new ProtocolFailure("conflicting_duplicate", `sequence ${sequence}`);
    }
    return true;
  }

  /** Content frames applied: deltas, or in a chat reply the six kinds. */
  private get appliedFrames(): number {
    return this.chat === null ? this.contentFrames : this.chat.frames;
  }

  private applyTerminal(frame: Frame, sequence: number): void {
    if (frame.kind !== "done") {
      const reason = frame.reason;
      if (
        typeof reason !== "string" ||
        reason === "" ||
        codePoints(reason) > this.limits.max_reason_chars
      ) {
        throw new ProtocolFailure("invalid_terminal_reason");
      }
      if (!isWellFormed(reason)) throw new ProtocolFailure("invalid_terminal_reason", "not UTF-8");
    } else if (integrityOf(this.wire) === "sha256") {
      // Required, not merely checked when present.
      const claimed = frame.doneDigest;
      if (claimed === undefined || claimed === null) {
        throw new ProtocolFailure("invalid_frame_schema", "done without its content digest");
      }
      const applied = this.appliedFrames;
      const sha256 = this.chat === null ? this.contentHash.copy().digest("hex") : this.chat.digest();
      if (claimed.contentFrames !== BigInt(applied) || claimed.contentSha256 !== sha256) {
        throw new ProtocolFailure(
          "content_digest_mismatch",
          `done claims ${claimed.contentFrames} frames, ${applied} applied`,
        );
      }
    }
    this.terminal = frame.kind;
    this.terminalReason = typeof frame.reason === "string" ? frame.reason : null;
    this.events.push({ kind: "local_terminal", status: frame.kind, sequence });
    this.fire("terminal_frame");
  }

  /**
   * The transport broke and input resumes at a frame boundary on a new connection: drop the
   * bytes of the frame begun on the broken one (counted in `discarded_bytes`) and return the
   * last sequence applied, after which the producer resumes. Only before the input ended and
   * while no verdict is in.
   */
  resume(): number {
    if (this.inputEnded || this.finished) {
      throw new ProtocolFailure("consumer_already_finished", "resume after the end");
    }
    this.discarded += this.decoder.pending;
    this.reconnects += 1;
    this.decoder = this.codec.decoder(this.limits.max_frame_bytes);
    return this.frames;
  }

  // --- how the input ended ---------------------------------------------------------------

  /** Mark the input as ended; false when the verdict is already in (invalid). */
  private beginFinish(): boolean {
    if (this.inputEnded) throw new ProtocolFailure("consumer_already_finished");
    this.inputEnded = true;
    return !this.finished;
  }

  /** The input ended cleanly. */
  endOfStream(): StreamResult {
    if (!this.beginFinish()) return this.result();
    try {
      this.decoder.endOfInput();
    } catch (error) {
      if (!(error instanceof ProtocolFailure)) throw error;
      this.fail(error);
      return this.result();
    }
    if (this.terminal === null) {
      this.fire("end_without_terminal", "missing_terminal");
    } else if (this.terminal === "cancel" || this.terminal === "error") {
      this.endAfterStop(this.terminal);
    } else {
      this.fire("end_after_done");
      this.validate();
    }
    return this.result();
  }

  /** After a cancel or error terminal: its reason when that is a registered code (whatever
   * status the code carries elsewhere), else the code that says it was not one, with the
   * terminal's text, scrubbed, as the detail. */
  private endAfterStop(kind: "cancel" | "error"): void {
    const text = this.terminalReason ?? "";
    const code = registered(text);
    if (code !== null) this.fire(END_AFTER[kind], code);
    else this.fire(END_AFTER[kind], UNREGISTERED[kind], scrubbedDetail(text));
  }

  private validate(): void {
    if (this.kind === "text") {
      // Each delta was checked as it came (non-empty, no lone surrogate): the text, the
      // empty text included, is the reply.
      this.accepted = new Map<string, JsonValue>([["text", this.provisionalContent]]);
      this.events.push({ kind: "validated_text", characters: this.characters });
      this.fire("reply_accepted");
      return;
    }
    if (this.chat !== null) {
      this.validateChat(this.chat);
      return;
    }
    try {
      const { answer, citations } = validateReply(
        this.provisionalContent,
        this.binding,
        MAX_REPLY_JSON_DEPTH,
      );
      this.accepted = answer;
      this.citations = citations;
      this.events.push({ kind: "validated_answer", answer, citations });
      this.fire("reply_accepted");
    } catch (error) {
      if (!(error instanceof ProtocolFailure)) throw error;
      this.fire("reply_rejected", error.reason);
    }
  }

  private validateChat(turn: ChatTurn): void {
    try {
      this.accepted = validateTurn(turn, this.tools, MAX_REPLY_JSON_DEPTH);
    } catch (error) {
      if (!(error instanceof ProtocolFailure)) throw error;
      if (error instanceof CallFailure) this.call = error.call;
      this.fire("reply_rejected", error.reason);
      return;
    }
    this.events.push({
      kind: "validated_turn",
      characters: turn.textChars,
      toolCalls: turn.calls.length,
      finishReason: turn.finishReason ?? "",
    });
    this.fire("reply_accepted");
  }

  /** The transport broke (`reason` says how when more is known than "it broke"); `detail`
   * (e.g. the gRPC status) is kept in the result. */
  transportError(detail: JsonObject | null = null, reason = "transport_io_error"): StreamResult {
    if (!this.beginFinish()) return this.result();
    this.transport = detail !== null && detail.size > 0 ? detail : null;
    this.events.push({ kind: "transport_error", reason });
    this.fire("transport_error", reason);
    return this.result();
  }

  /** We stopped reading (deadline, idle timeout, interrupt): incomplete, content kept. */
  abort(reason: string): StreamResult {
    if (!this.beginFinish()) return this.result();
    this.events.push({ kind: "consumer_abort", reason });
    this.fire("local_abort", reason);
    return this.result();
  }

  // --- the verdict -----------------------------------------------------------------------

  get status(): Status {
    if (!this.finished) throw new Error(`no verdict yet in state ${this.stateValue}`);
    return this.stateValue as Status;
  }

  result(): StreamResult {
    return {
      status: this.status,
      reason: this.reasonValue,
      acceptedAnswer: this.accepted,
      citations: this.citations,
      provisionalContent: this.provisionalContent,
      localTerminal: this.terminal,
      stats: this.stats,
      events: [...this.events],
      caseId: this.binding.get("case_id") ?? null,
      requestSha256: this.binding.get("request_sha256") ?? null,
      bindingSha256: this.bindingSha256,
      wireFormat: this.wire,
      integrity: integrityOf(this.wire),
      detail: this.detailValue,
      transport: this.transport,
      streamId: null,
      flow: null,
      kind: this.kind === "grounded" ? null : this.kind,
      firstOutput: this.kind === "grounded" ? null : this.appliedFrames > 0,
      turn: this.chat === null ? null : turnDocument(this.chat),
      call: this.call,
      notes: this.chat === null ? null : notesOf(this.chat),
    };
  }
}

function payloadDigest(payload: Buffer): string {
  return createHash("sha256").update(payload).digest("hex");
}

