/**
 * The result document (shared/result.py): one value, one JSON form, the Python consumer's
 * keys in its order. The lab's keys first (`status` to `events`), then ours; `integrity`,
 * `detail`, `transport`, `stream_id`, `flow`, `kind`, `first_output`, `turn`, `call` and
 * `notes` are left out (not null) where they mean nothing (`kind` and `first_output`: for a
 * grounded reply; `turn` and `notes`: but for a chat reply; `call`: but for a refused call).
 * Written as Python's `json.dumps(indent=2, ensure_ascii=False)` writes it.
 */

import type { FrameKind } from "./frames";
import { dumpJson, type JsonObject, type JsonValue } from "./json";
import type { Status } from "./status";

export type Event =
  | { readonly kind: "provisional_content"; readonly sequence: number; readonly characters: number }
  | { readonly kind: "local_terminal"; readonly status: FrameKind; readonly sequence: number }
  | {
      readonly kind: "validated_answer";
      readonly answer: JsonObject;
      readonly citations: readonly JsonObject[];
    }
  | { readonly kind: "validated_text"; readonly characters: number }
  | {
      readonly kind: "validated_turn";
      readonly characters: number;
      readonly toolCalls: number;
      readonly finishReason: string;
    }
  | { readonly kind: "part_received"; readonly sequence: number; readonly part: FrameKind }
  | { readonly kind: "duplicate_dropped"; readonly sequence: number }
  | { readonly kind: "transport_error"; readonly reason: string }
  | { readonly kind: "consumer_abort"; readonly reason: string };

export interface Stats {
  readonly bytesReceived: number;
  readonly transportFragments: number;
  readonly applicationFrames: number;
  readonly reconnects: number;
  readonly discardedBytes: number;
}

export const NO_STATS: Stats = {
  bytesReceived: 0,
  transportFragments: 0,
  applicationFrames: 0,
  reconnects: 0,
  discardedBytes: 0,
};

/** How a gRPC stream was read: the queue, the window and the pauses. */
export interface Flow {
  readonly mode: string;
  readonly queueSize: number;
  readonly windowBytes: number;
  readonly readsPaused: number;
  readonly pausedMs: number;
}

export interface StreamResult {
  readonly status: Status;
  /** A registered code, or null for complete. */
  readonly reason: string | null;
  readonly acceptedAnswer: JsonObject | null;
  readonly citations: readonly JsonObject[];
  readonly provisionalContent: string;
  readonly localTerminal: FrameKind | null;
  readonly stats: Stats;
  readonly events: readonly Event[];
  readonly caseId: JsonValue;
  readonly requestSha256: JsonValue;
  readonly bindingSha256: string | null;
  readonly wireFormat: string;
  readonly integrity: string | null;
  readonly detail: string | null;
  readonly transport: JsonObject | null;
  readonly streamId: string | null;
  readonly flow: Flow | null;
  /** A reply of a kind other than grounded: the kind, and whether any content frame came. */
  readonly kind: string | null;
  readonly firstOutput: boolean | null;
  /** A chat reply judged by a core: the turn as assembled (raw arguments), whatever the status. */
  readonly turn?: JsonObject | null;
  /** The call a tool_call_* reason refused: `{"index", "id", "name"}`. */
  readonly call?: JsonObject | null;
  /** A chat reply judged by a core: its notes (`usage_total_mismatch`), `[]` for none. */
  readonly notes?: readonly string[] | null;
}

const int = (value: number): bigint => BigInt(value);

function eventObject(event: Event): JsonObject {
  switch (event.kind) {
    case "provisional_content":
      return new Map<string, JsonValue>([
        ["kind", event.kind],
        ["sequence", int(event.sequence)],
        ["characters_received", int(event.characters)],
      ]);
    case "local_terminal":
      return new Map<string, JsonValue>([
        ["kind", event.kind],
        ["status", event.status],
        ["sequence", int(event.sequence)],
      ]);
    case "validated_answer":
      return new Map<string, JsonValue>([
        ["kind", event.kind],
        ["status", event.answer.get("status") ?? null],
        ["source_ids", event.answer.get("source_ids") ?? null],
        ["answer", event.answer],
        ["citations", [...event.citations]],
      ]);
    case "validated_text":
      return new Map<string, JsonValue>([
        ["kind", event.kind],
        ["characters", int(event.characters)],
      ]);
    case "validated_turn":
      return new Map<string, JsonValue>([
        ["kind", event.kind],
        ["characters", int(event.characters)],
        ["tool_calls", int(event.toolCalls)],
        ["finish_reason", event.finishReason],
      ]);
    case "part_received":
      return new Map<string, JsonValue>([
        ["kind", event.kind],
        ["sequence", int(event.sequence)],
        ["part", event.part],
      ]);
    case "duplicate_dropped":
      return new Map<string, JsonValue>([
        ["kind", event.kind],
        ["sequence", int(event.sequence)],
      ]);
    default:
      return new Map<string, JsonValue>([
        ["kind", event.kind],
        ["reason", event.reason],
      ]);
  }
}

export function statsObject(stats: Stats): JsonObject {
  return new Map<string, JsonValue>([
    ["bytes_received", int(stats.bytesReceived)],
    ["transport_fragments", int(stats.transportFragments)],
    ["application_frames", int(stats.applicationFrames)],
    ["reconnects", int(stats.reconnects)],
    ["discarded_bytes", int(stats.discardedBytes)],
  ]);
}

function flowObject(flow: Flow): JsonObject {
  return new Map<string, JsonValue>([
    ["mode", flow.mode],
    ["queue_size", int(flow.queueSize)],
    ["window_bytes", int(flow.windowBytes)],
    ["reads_paused", int(flow.readsPaused)],
    ["paused_ms", flow.pausedMs], // a float, as Python's round(..., 3)
  ]);
}

/** The document, as `StreamResult.to_dict()` makes it. */
export function resultDocument(result: StreamResult): JsonObject {
  const document = new Map<string, JsonValue>([
    ["status", result.status],
    ["reason", result.reason],
    ["accepted_answer", result.acceptedAnswer],
    ["citations", [...result.citations]],
    ["provisional_content", result.provisionalContent],
    ["local_terminal", result.localTerminal],
    ["stats", statsObject(result.stats)],
    ["events", result.events.map(eventObject)],
    ["case_id", result.caseId],
    ["request_sha256", result.requestSha256],
    ["binding_sha256", result.bindingSha256],
    ["wire_format", result.wireFormat],
  ]);
  const optional: Array<[string, JsonValue]> = [
    ["integrity", result.integrity],
    ["detail", result.detail],
    ["transport", result.transport],
    ["stream_id", result.streamId],
    ["flow", result.flow === null ? null : flowObject(result.flow)],
    ["kind", result.kind],
    ["first_output", result.firstOutput],
    ["turn", result.turn ?? null],
    ["call", result.call ?? null],
    ["notes", result.notes === undefined || result.notes === null ? null : [...result.notes]],
  ];
  for (const [key, value] of optional) if (value !== null) document.set(key, value);
  return document;
}

/** The document as every consumer command prints it (`StreamResult.to_json()`). */
export function resultJson(result: StreamResult): string {
  return `${dumpJson(resultDocument(result), { indent: 2 })}\n`;
}
