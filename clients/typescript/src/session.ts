/**
 * One consumer stream over gRPC (consumer/session.py and consumer/reader.py, on grpc-js).
 *
 * The call's messages are applied to the core as they arrive. With a simulated per-chunk
 * delay (`processDelayMs`) they go through a queue of `queueSize` chunks instead; when it is
 * full the call is paused: grpc-js then stops asking its HTTP/2 stream for data, Node stops
 * consuming it and returning window, and the producer's writes block once the window
 * (`windowBytes / 2` announced, as the Python consumer announces) is spent. A paused stream
 * holds at most the queue, the window, and what `boundStreamBuffers()` leaves to Node and
 * grpc-js (a DATA frame, a message).
 *
 * Time is bounded twice: an overall deadline (`deadline_exceeded`) and an idle timeout (no
 * chunk that long while reading; not while paused: `idle_timeout`); either cancels the call
 * and ends `incomplete`, the partial content kept.
 *
 * A transport failure a resume may repair (the call ended UNAVAILABLE with details that are
 * not a reason code, or `producer_shutdown`, `connection_aged_out`,
 * `controlled_transport_abort`) is resumed, up to `resumeAttempts` times, on a new channel,
 * with `resume_after` = the last sequence applied, after a capped exponential backoff with
 * jitter, within the deadline. Never after a verdict of the core (invalid data, a
 * terminal), a refusal, a deadline or the idle timeout.
 *
 * A refusal (a gRPC status whose details are a registered code, before any chunk, on the
 * first attempt) is that reason with its own status; any other failure of the call is
 * `error` / `transport_io_error` (or the reply's named ending) with the gRPC code and
 * details. An interrupt (Ctrl-C, SIGTERM) sends `Cancel` (bounded by 2 s) and ends
 * `incomplete` / `consumer_cancelled`.
 */

import { setDefaultHighWaterMark } from "node:stream";
import * as grpc from "@grpc/grpc-js";
import type { ReplyConsumer } from "./core";
import { type JsonObject, type JsonValue } from "./json";
import { ProtocolFailure, registered, scrubbedDetail, statusOf } from "./reasons";
import { REPLY_ENDINGS, RESUMABLE_REASONS } from "./generated";
import type { OpenRequestMessage } from "./request";
import { NO_STATS, type Flow, type StreamResult } from "./result";
import { callMetadata, channelCredentials, channelOptions, type Security } from "./security";
import { makeReplyStreamClient, type ChunkMessage, type ReplyStreamClient } from "./service";

/**
 * Bound what Node buffers behind a paused call: grpc-js pauses its HTTP/2 stream, but Node
 * keeps reading into that stream's buffer (and returning window to the producer) until the
 * buffer reaches its high-water mark, 16 KiB by default: 2,000 one-byte chunks past the
 * window. With a mark of one byte (and one message in grpc-js's object-mode stream) Node
 * stops reading, and stops returning window, at the first DATA frame the paused call does not
 * take. Process-wide (the streams made after it): the CLI calls it once at start.
 */
export function boundStreamBuffers(): void {
  setDefaultHighWaterMark(false, 1);
  setDefaultHighWaterMark(true, 1);
}

/** How long a deliberate stop waits for the producer to confirm `Cancel`. */
const CANCEL_TIMEOUT_S = 2;
/** Trailing metadata of a refusal the result keeps. */
const PASSED_METADATA = ["retry-delay", "provider-http-status"];

export interface StreamOptions {
  readonly target: string;
  readonly queueSize: number;
  readonly processDelayMs: number;
  readonly windowBytes: number;
  readonly maxMessageBytes: number;
  readonly deadlineS: number | null;
  readonly idleTimeoutS: number | null;
  readonly resumeAttempts: number;
  readonly resumeBackoffS: number;
  readonly resumeBackoffMaxS: number;
  readonly keepaliveS: number;
  readonly keepaliveTimeoutS: number;
  readonly security: Security;
  readonly protoPath: string;
}

/** How one call ended, when the core has no verdict of its own yet (reader.StreamEnded). */
interface StreamEnded {
  readonly kind: "ended";
  /** null: the call ended OK. */
  readonly code: grpc.status | null;
  readonly details: string;
  readonly idle: boolean;
  readonly metadata: ReadonlyArray<readonly [string, string]>;
  /** The reader could not go on: a named reason. */
  readonly broken: string | null;
}

type Outcome = { readonly kind: "result"; readonly result: StreamResult } | StreamEnded;

function ended(fields: Partial<Omit<StreamEnded, "kind">>): StreamEnded {
  return { kind: "ended", code: null, details: "", idle: false, metadata: [], broken: null, ...fields };
}

/** A transport failure a resume may repair. */
function resumable(end: StreamEnded): boolean {
  if (end.code !== grpc.status.UNAVAILABLE || end.broken !== null) return false;
  const named = registered(end.details);
  return named === null || RESUMABLE_REASONS.has(named);
}

/** grpc-js's own answer to a stream its peer's HTTP/2 refused unprocessed (REFUSED_STREAM),
 * as the Python consumer reads C-core's "RST_STREAM ... error code 7". */
function refusedByHttp2(end: StreamEnded): boolean {
  return end.code === grpc.status.UNAVAILABLE && end.details === "Stream refused by server";
}

/** gRPC's own CANCELLED before the producer's servicer saw the call (its --max-pending). */
function droppedByGrpc(end: StreamEnded): boolean {
  return end.code === grpc.status.CANCELLED && end.details === "CANCELLED";
}

function sleep(ms: number, signal: AbortSignal | null): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted) {
      resolve(true);
      return;
    }
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve(true);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve(false);
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** Capped exponential backoff with jitter (half to all of it) before resume `attempt`. */
function backoffMs(options: StreamOptions, attempt: number): number {
  const capped = Math.min(options.resumeBackoffMaxS, options.resumeBackoffS * 2 ** (attempt - 1));
  return capped * (0.5 + Math.random() * 0.5) * 1000;
}

export class StreamSession {
  private attempt = 0;
  private pauses = 0;
  private pausedMs = 0;
  private current: grpc.ClientReadableStream<ChunkMessage> | null = null;

  constructor(
    private request: OpenRequestMessage,
    readonly consumer: ReplyConsumer,
    readonly options: StreamOptions,
  ) {}

  private client(): ReplyStreamClient {
    const options = this.options;
    const channelOptionsValue: grpc.ChannelOptions = {
      ...channelOptions(options.security),
      // The stream window: half announced, as the Python consumer's (lookahead_bytes).
      "grpc-node.flow_control_window": Math.floor(options.windowBytes / 2),
      "grpc.max_receive_message_length": options.maxMessageBytes,
      "grpc.max_send_message_length": options.maxMessageBytes,
      // A paid or partial stream is never retried behind our back: the resumes are ours.
      "grpc.enable_retries": 0,
      // Each channel its own connection: a resume must not share the broken one's.
      "grpc.use_local_subchannel_pool": 1,
      // Several producers in one target: round_robin among the connected ones.
      "grpc.service_config": JSON.stringify({ loadBalancingConfig: [{ round_robin: {} }] }),
      "grpc.keepalive_time_ms": Math.round(options.keepaliveS * 1000),
      "grpc.keepalive_timeout_ms": Math.round(options.keepaliveTimeoutS * 1000),
      "grpc.keepalive_permit_without_calls": 1,
    };
    return makeReplyStreamClient(
      options.protoPath,
      options.target,
      channelCredentials(options.security, options.target),
      channelOptionsValue,
    );
  }

  /** The stream, resumed as often as allowed; its result (with the stream id and flow). */
  async run(stop: AbortSignal | null = null): Promise<StreamResult> {
    const options = this.options;
    const endsAt = options.deadlineS === null ? null : Date.now() + options.deadlineS * 1000;
    let result: StreamResult;
    for (;;) {
      const remaining = endsAt === null ? null : Math.max(endsAt - Date.now(), 0);
      const outcome = await this.deliver(stop, remaining);
      if (outcome.kind === "result") {
        result = outcome.result;
        break;
      }
      if (this.attempt >= options.resumeAttempts || this.consumer.finished) {
        result = this.ended(outcome);
        break;
      }
      this.attempt += 1;
      const resumeAfter = this.consumer.resume();
      const wait = backoffMs(options, this.attempt);
      this.request = { ...this.request, resume_after: String(resumeAfter) };
      if (endsAt !== null && Date.now() + wait >= endsAt) {
        result = this.consumer.abort("deadline_exceeded");
        break;
      }
      if (await sleep(wait, stop)) {
        const client = this.client();
        try {
          await this.cancelGeneration(client);
        } finally {
          client.close();
        }
        result = this.consumer.abort("consumer_cancelled");
        break;
      }
    }
    const flow: Flow = {
      mode: "stream",
      queueSize: options.queueSize,
      windowBytes: options.windowBytes,
      readsPaused: this.pauses,
      pausedMs: Math.round(this.pausedMs * 1000) / 1000,
    };
    return { ...result, streamId: this.request.stream_id, flow };
  }

  /** One channel, one call: the result, or how a resumable failure ended it. */
  private async deliver(stop: AbortSignal | null, remainingMs: number | null): Promise<Outcome> {
    const client = this.client();
    try {
      return await this.callOnce(client, stop, remainingMs);
    } finally {
      client.close();
    }
  }

  private callOnce(
    client: ReplyStreamClient,
    stop: AbortSignal | null,
    remainingMs: number | null,
  ): Promise<Outcome> {
    const options = this.options;
    const consumer = this.consumer;
    const direct = options.processDelayMs === 0;
    return new Promise<Outcome>((resolve) => {
      // A gRPC deadline backs up our own (ours fires first and says why).
      const callOptions: grpc.CallOptions = {};
      if (remainingMs !== null) callOptions.deadline = new Date(Date.now() + remainingMs + 5000);
      const call = client.Open(this.request, callMetadata(options.security, options.target), callOptions);
      this.current = call;
      const queue: Buffer[] = [];
      let status: grpc.StatusObject | null = null;
      let settled = false;
      let processing = false;
      let paused = false;
      let pausedAt = 0;
      let idleTimer: NodeJS.Timeout | null = null;
      let deadlineTimer: NodeJS.Timeout | null = null;

      const clearTimers = (): void => {
        if (idleTimer !== null) clearTimeout(idleTimer);
        if (deadlineTimer !== null) clearTimeout(deadlineTimer);
        idleTimer = null;
        deadlineTimer = null;
        stop?.removeEventListener("abort", onStop);
      };
      const settle = (outcome: Outcome): void => {
        if (settled) return;
        settled = true;
        clearTimers();
        if (paused) this.pausedMs += Date.now() - pausedAt;
        call.cancel(); // nothing after a verdict is read (a no-op once the call ended)
        resolve(outcome);
      };
      const verdict = (): void => settle({ kind: "result", result: consumer.result() });
      const armIdle = (): void => {
        if (idleTimer !== null) clearTimeout(idleTimer);
        idleTimer = null;
        if (options.idleTimeoutS === null || paused || settled) return;
        idleTimer = setTimeout(() => settle(this.judge(ended({ idle: true }))), options.idleTimeoutS * 1000);
      };
      const apply = (data: Buffer): boolean => {
        try {
          consumer.receiveData(data);
          return true;
        } catch (error) {
          if (error instanceof ProtocolFailure) return false;
          throw error;
        }
      };
      const maybeConclude = (): void => {
        if (settled || status === null || processing || queue.length > 0 || call.readableLength > 0) {
          return;
        }
        const end = ended({
          code: status.code === grpc.status.OK ? null : status.code,
          details: status.details ?? "",
          metadata: trailing(status.metadata),
        });
        settle(this.judge(end));
      };
      const pump = async (): Promise<void> => {
        if (processing) return;
        processing = true;
        while (!settled && queue.length > 0) {
          const data = queue.shift() as Buffer;
          if (paused && queue.length < options.queueSize) {
            paused = false;
            this.pausedMs += Date.now() - pausedAt;
            call.resume();
            armIdle();
          }
          if (!apply(data)) {
            processing = false;
            verdict();
            return;
          }
          await sleep(options.processDelayMs, null);
        }
        processing = false;
        maybeConclude();
      };
      const onStop = (): void => {
        // Ctrl-C mid-call: stop applying (the end that the Cancel brings must not end the
        // stream first), send Cancel, then cancel the call: consumer_cancelled.
        if (settled) return;
        settled = true;
        clearTimers();
        void this.cancelGeneration(client).then(() => {
          call.cancel();
          resolve({
            kind: "result",
            result: consumer.finished ? consumer.result() : consumer.abort("consumer_cancelled"),
          });
        });
      };

      call.on("data", (message: ChunkMessage) => {
        if (settled) return;
        if (message.invalid !== undefined) {
          settle(this.judge(ended({ broken: "invalid_transport_message", details: message.invalid })));
          return;
        }
        armIdle();
        if (direct) {
          if (!apply(message.data)) verdict();
          else maybeConclude();
          return;
        }
        queue.push(message.data);
        if (queue.length >= options.queueSize && !paused) {
          paused = true;
          pausedAt = Date.now();
          this.pauses += 1;
          call.pause();
          armIdle(); // a paused reader is not waiting: no idle timeout
        }
        void pump();
      });
      call.on("error", () => {
        // The status event carries the same; listening here keeps it from being thrown.
      });
      call.on("status", (value: grpc.StatusObject) => {
        status = value;
        maybeConclude();
      });
      call.on("end", () => maybeConclude());

      if (stop !== null) {
        if (stop.aborted) {
          queueMicrotask(onStop);
        } else stop.addEventListener("abort", onStop, { once: true });
      }
      if (remainingMs !== null) {
        deadlineTimer = setTimeout(
          () => settle({ kind: "result", result: consumer.abort("deadline_exceeded") }),
          remainingMs,
        );
      }
      armIdle();
    });
  }

  /** A deliberate stop: ask the producer to stop generating this reply (bounded). */
  private cancelGeneration(client: ReplyStreamClient): Promise<void> {
    return new Promise((resolve) => {
      const deadline = new Date(Date.now() + CANCEL_TIMEOUT_S * 1000);
      client.Cancel(
        { stream_id: this.request.stream_id },
        callMetadata(this.options.security, this.options.target),
        { deadline },
        () => resolve(),
      );
    });
  }

  /** How the call ended: the verdict, or (resumable) the ending for the resume loop. */
  private judge(end: StreamEnded): Outcome {
    return resumable(end) ? end : { kind: "result", result: this.ended(end) };
  }

  private ended(end: StreamEnded): StreamResult {
    const consumer = this.consumer;
    if (end.broken !== null) {
      const detail = new Map<string, JsonValue>([["message", scrubbedDetail(end.details)]]);
      return consumer.transportError(detail, end.broken);
    }
    if (end.idle) return consumer.abort("idle_timeout");
    if (end.code === null) return consumer.endOfStream();
    if (end.code === grpc.status.DEADLINE_EXCEEDED) return consumer.abort("deadline_exceeded");
    // The peer's text: kept scrubbed and bounded, never raw (a reason only if a code).
    const transport: JsonObject = new Map<string, JsonValue>([
      ["grpc_code", grpc.status[end.code] ?? String(end.code)],
      ["grpc_details", scrubbedDetail(end.details)],
    ]);
    for (const [key, value] of end.metadata) {
      if (PASSED_METADATA.includes(key)) transport.set(key, scrubbedDetail(value));
    }
    const nothingReceived = consumer.stats.transportFragments === 0;
    const named = registered(end.details);
    if (nothingReceived && this.attempt === 0 && named !== null) return this.notStreamed(named, transport);
    if (nothingReceived && droppedByGrpc(end)) return this.notStreamed("producer_overloaded", transport);
    if (nothingReceived && refusedByHttp2(end)) return this.notStreamed("stream_limit", transport);
    const reason = named !== null && REPLY_ENDINGS.has(named) ? named : "transport_io_error";
    return consumer.transportError(transport, reason);
  }

  /** The producer's answer instead of a stream: its reason, with its own status. */
  private notStreamed(reason: string, transport: JsonObject): StreamResult {
    const consumer = this.consumer;
    return {
      status: statusOf(reason),
      reason,
      acceptedAnswer: null,
      citations: [],
      provisionalContent: "",
      localTerminal: null,
      stats: NO_STATS,
      events: [],
      caseId: this.request.case_id,
      requestSha256: consumer.binding.get("request_sha256") ?? null,
      bindingSha256: consumer.bindingSha256,
      wireFormat: consumer.wire,
      integrity: null,
      detail: `producer answered ${String(transport.get("grpc_code"))}`,
      transport,
      streamId: null,
      flow: null,
      kind: null,
      firstOutput: null,
    };
  }

  /** Cancel the call in flight (a stop from outside). */
  cancel(): void {
    this.current?.cancel();
  }
}

function trailing(metadata: grpc.Metadata | undefined): Array<[string, string]> {
  const pairs: Array<[string, string]> = [];
  if (metadata === undefined) return pairs;
  for (const [key, values] of Object.entries(metadata.getMap())) {
    pairs.push([key, typeof values === "string" ? values : values.toString("utf8")]);
  }
  return pairs;
}
