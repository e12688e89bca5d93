/**
 * `node dist/cli.js stream ...`: open `replywire.v1.ReplyStream/Open` on a producer, judge
 * the reply with the core, write the result document (to `--result` and to stdout) and exit
 * by its status: 0 complete, 3 incomplete, 4 cancelled, 5 error, 6 invalid, 7 refused, 2 a
 * usage or configuration error.
 */

import { randomUUID } from "node:crypto";
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { DEFAULT_LIMITS, type Limits, ReplyConsumer } from "./core";
import { sha256Hex } from "./digest";
import { EXIT_USAGE } from "./generated";
import { declaredTools } from "./chat-reply";
import { buildTextBinding, kindOf, MAX_ECHO_CHARS } from "./kinds";
import type { JsonObject } from "./json";
import { exitCode } from "./reasons";
import { BindingError } from "./reply";
import {
  checkFault,
  FAULT_KINDS,
  type Fault,
  type FaultKind,
  loadBinding,
  openRequest,
  parseChunkPlan,
  type ReplyRequest,
} from "./request";
import { resultJson } from "./result";
import { checkSecurity, ConfigurationError, loadSecurity } from "./security";
import { defaultProtoPath } from "./service";
import { boundStreamBuffers, StreamSession, type StreamOptions } from "./session";
import { isWireFormat } from "./wire/base";

const USAGE = `usage: node dist/cli.js stream (--binding FILE --case CASE_ID | --text T) [options]

Open a stream from a replywire producer over gRPC, prove it frame by frame, validate the
reply against the binding, print the result document. Exit codes: 0 complete,
3 incomplete, 4 cancelled, 5 error, 6 invalid, 7 refused, 2 usage or configuration error.

  --target HOST:PORT          the producer, or gRPC's target syntax (default 127.0.0.1:50051)
  --binding FILE              the request binding (JSON object; at most 64 KiB, 16 levels)
  --case CASE_ID              the case id the binding is for
  --text T                    ask for a text reply (docs/protocol.md#kinds): the message T, which
                              the development text source streams back and a model answers
                              (its own text binding and case: no --binding, no --case)
  --wire lp|ndjson|ndjson-lab the frame wire (default lp)
  --chunks frame|whole|N|a,b,c  how the producer cuts the wire into chunks (default frame)
  --stream-id ID              joins both sides' traces (default: a random one)
  --resume-attempts N         resumes after a transport failure (default 3; 0: none)
  --resume-backoff-s S        the first wait before a resume, doubled up to 2 s (default 0.25)
  --deadline-s S              overall deadline (default 300)
  --idle-timeout-s S          longest wait for one chunk (default 120)
  --result PATH               also write the result document here
  --tls                       TLS with the system's roots
  --tls-ca FILE               TLS trusting this CA alone
  --tls-cert FILE --tls-key FILE  mutual TLS: this consumer's certificate and key
  --tls-server-name NAME      the name the producer's certificate must carry
  --auth-token-file FILE      the bearer token (or ${"$"}REPLYWIRE_AUTH_TOKEN): over TLS, or in
                              plaintext only to a loopback address literal or a Unix socket
  --fault KIND                a controlled fault (the producer needs --allow-faults):
                              ${FAULT_KINDS.join(", ")}
  --fault-frame K --fault-bytes N --stall-ms MS   the fault's frame, bytes, stall
  --chunk-interval-ms MS      ask the producer to pause between chunks (default 0)
  --queue-size N              chunks waiting for the core before reads pause (default 8)
  --process-delay-ms MS       simulated work per chunk (default 0: applied as read)
  --window-bytes N            what a paused stream may hold in the transport (default 65536)
  --keepalive-s S --keepalive-timeout-s S   gRPC keepalive (default 10 and 5)
  --max-stream-bytes N --max-frame-bytes N --max-content-chars N --max-frames N
                              the core's limits (defaults: the lab's)
  --max-tool-calls N          tool calls begun in one chat turn (default 128)
  --ignore-duplicates         drop an exact replay of an applied frame instead of refusing it
  --proto FILE                the .proto (default: the repository's)
`;

const OPTIONS = {
  target: { type: "string", default: "127.0.0.1:50051" },
  binding: { type: "string" },
  case: { type: "string" },
  text: { type: "string" },
  wire: { type: "string", default: "lp" },
  chunks: { type: "string", default: "frame" },
  "stream-id": { type: "string" },
  "resume-attempts": { type: "string", default: "3" },
  "resume-backoff-s": { type: "string", default: "0.25" },
  "deadline-s": { type: "string", default: "300" },
  "idle-timeout-s": { type: "string", default: "120" },
  result: { type: "string" },
  tls: { type: "boolean", default: false },
  "tls-ca": { type: "string" },
  "tls-cert": { type: "string" },
  "tls-key": { type: "string" },
  "tls-server-name": { type: "string" },
  "auth-token-file": { type: "string" },
  fault: { type: "string" },
  "fault-frame": { type: "string" },
  "fault-bytes": { type: "string" },
  "stall-ms": { type: "string" },
  "chunk-interval-ms": { type: "string", default: "0" },
  "queue-size": { type: "string", default: "8" },
  "process-delay-ms": { type: "string", default: "0" },
  "window-bytes": { type: "string", default: "65536" },
  "keepalive-s": { type: "string", default: "10" },
  "keepalive-timeout-s": { type: "string", default: "5" },
  "max-stream-bytes": { type: "string", default: String(DEFAULT_LIMITS.max_stream_bytes) },
  "max-frame-bytes": { type: "string", default: String(DEFAULT_LIMITS.max_frame_bytes) },
  "max-content-chars": { type: "string", default: String(DEFAULT_LIMITS.max_content_chars) },
  "max-frames": { type: "string", default: String(DEFAULT_LIMITS.max_frames) },
  "max-tool-calls": { type: "string", default: String(DEFAULT_LIMITS.max_tool_calls) },
  "ignore-duplicates": { type: "boolean", default: false },
  proto: { type: "string" },
  help: { type: "boolean", short: "h", default: false },
} as const;

/** A whole number, at least `minimum` (runtime/flags.py Count). */
function count(flag: string, text: string, minimum = 1): number {
  if (!/^\s*[+-]?[0-9]+\s*$/.test(text)) throw new ConfigurationError(`--${flag}: not a whole number: '${text}'`);
  const value = Number(text.trim());
  if (!Number.isSafeInteger(value)) throw new ConfigurationError(`--${flag}: too large: ${text}`);
  if (value < minimum) throw new ConfigurationError(`--${flag}: must be at least ${minimum}: ${value}`);
  return value;
}

/** A finite number of seconds, more than 0 (or at least `minimum`). */
function seconds(flag: string, text: string, minimum: number | null = null): number {
  const value = Number(text);
  if (text.trim() === "" || !Number.isFinite(value)) {
    throw new ConfigurationError(`--${flag}: not a number of seconds: '${text}'`);
  }
  if (minimum === null ? value <= 0 : value < minimum) {
    throw new ConfigurationError(`--${flag}: must be ${minimum === null ? "more than 0" : `at least ${minimum}`}: ${value}`);
  }
  return value;
}

interface Command {
  readonly request: ReplyRequest;
  readonly options: StreamOptions;
  readonly limits: Limits;
  readonly ignoreDuplicates: boolean;
  readonly resultPath: string | null;
}

function optional(value: string | undefined): string | null {
  return value === undefined ? null : value;
}

/** `--text T`: its own text binding (a usage error with --binding or --case, or past the bound). */
function textBinding(text: string, values: { binding?: string; case?: string }): JsonObject {
  if (values.binding !== undefined || values.case !== undefined) {
    throw new ConfigurationError("--text binds its own case: drop --binding and --case");
  }
  if ([...text].length > MAX_ECHO_CHARS) {
    throw new ConfigurationError(`--text is over ${MAX_ECHO_CHARS} code points`);
  }
  return buildTextBinding(text);
}

/** Every flag checked before anything runs: a bad one is a usage error (exit 2). */
export function parseCommand(argv: readonly string[]): Command | "help" {
  let parsed;
  try {
    parsed = parseArgs({ args: [...argv], options: OPTIONS, allowPositionals: true, strict: true });
  } catch (error) {
    throw new ConfigurationError((error as Error).message);
  }
  const { values, positionals } = parsed;
  if (values.help) return "help";
  if (positionals.length !== 1 || positionals[0] !== "stream") {
    throw new ConfigurationError("the one command is: stream");
  }
  const asked = values.text === undefined ? null : textBinding(values.text, values);
  if (asked === null && values.binding === undefined) {
    throw new ConfigurationError("--binding FILE (or --text T) is required");
  }
  if (asked === null && values.case === undefined) {
    throw new ConfigurationError("--case CASE_ID is required");
  }
  const wire = values.wire;
  if (!isWireFormat(wire)) throw new ConfigurationError(`--wire: lp, ndjson or ndjson-lab, not '${wire}'`);
  let fault: Fault | null = null;
  if (values.fault !== undefined) {
    if (!(FAULT_KINDS as readonly string[]).includes(values.fault)) {
      throw new ConfigurationError(`--fault: one of ${FAULT_KINDS.join(", ")}`);
    }
    if (values["stall-ms"] !== undefined && values.fault !== "stall") {
      throw new ConfigurationError("--stall-ms needs --fault stall");
    }
    const numberOrNull = (flag: "fault-frame" | "fault-bytes" | "stall-ms"): number | null => {
      const text = values[flag];
      return text === undefined ? null : count(flag, text);
    };
    fault = checkFault({
      kind: values.fault as FaultKind,
      targetFrame: numberOrNull("fault-frame"),
      byteCount: numberOrNull("fault-bytes"),
      stallMs: numberOrNull("stall-ms"),
    });
  } else if (values["fault-frame"] !== undefined || values["fault-bytes"] !== undefined) {
    throw new ConfigurationError("--fault-frame and --fault-bytes need --fault");
  } else if (values["stall-ms"] !== undefined) {
    throw new ConfigurationError("--stall-ms needs --fault stall");
  }
  const limits: Limits = {
    max_stream_bytes: count("max-stream-bytes", values["max-stream-bytes"]),
    max_frame_bytes: count("max-frame-bytes", values["max-frame-bytes"]),
    max_content_chars: count("max-content-chars", values["max-content-chars"]),
    max_frames: count("max-frames", values["max-frames"]),
    max_reason_chars: DEFAULT_LIMITS.max_reason_chars,
    max_tool_calls: count("max-tool-calls", values["max-tool-calls"]),
  };
  const security = loadSecurity({
    tls: values.tls,
    tlsCa: optional(values["tls-ca"]),
    tlsCert: optional(values["tls-cert"]),
    tlsKey: optional(values["tls-key"]),
    tlsServerName: optional(values["tls-server-name"]),
    authTokenFile: optional(values["auth-token-file"]),
  });
  const target = values.target;
  checkSecurity(security, target);
  const backoff = seconds("resume-backoff-s", values["resume-backoff-s"]);
  const options: StreamOptions = {
    target,
    queueSize: count("queue-size", values["queue-size"]),
    processDelayMs: count("process-delay-ms", values["process-delay-ms"], 0),
    windowBytes: count("window-bytes", values["window-bytes"], 1024),
    maxMessageBytes: 4 << 20,
    deadlineS: seconds("deadline-s", values["deadline-s"]),
    idleTimeoutS: seconds("idle-timeout-s", values["idle-timeout-s"]),
    resumeAttempts: count("resume-attempts", values["resume-attempts"], 0),
    resumeBackoffS: backoff,
    resumeBackoffMaxS: Math.max(backoff, 2),
    keepaliveS: seconds("keepalive-s", values["keepalive-s"], 1),
    keepaliveTimeoutS: seconds("keepalive-timeout-s", values["keepalive-timeout-s"]),
    security,
    protoPath: values.proto ?? defaultProtoPath(),
  };
  const request: ReplyRequest = {
    caseId: asked === null ? (values.case as string) : (asked.get("case_id") as string),
    binding: asked ?? loadBinding(values.binding as string),
    wire,
    plan: parseChunkPlan(values.chunks),
    fault,
    streamId: values["stream-id"] ?? randomUUID().replace(/-/g, ""),
    chunkIntervalMs: count("chunk-interval-ms", values["chunk-interval-ms"], 0),
  };
  try {
    // A kind that is no kind, or a chat binding whose tools no validator compiles: a usage
    // error, as in Python.
    if (kindOf(request.binding) === "chat") declaredTools(request.binding);
  } catch (error) {
    if (error instanceof BindingError) throw new ConfigurationError(error.message);
    throw error;
  }
  return {
    request,
    options,
    limits,
    ignoreDuplicates: values["ignore-duplicates"],
    resultPath: optional(values.result),
  };
}

export async function main(argv: readonly string[]): Promise<number> {
  let command: Command | "help";
  try {
    command = parseCommand(argv);
  } catch (error) {
    if (!(error instanceof ConfigurationError)) throw error;
    process.stderr.write(`consumer: ${error.message}\n`);
    return EXIT_USAGE;
  }
  if (command === "help") {
    process.stdout.write(USAGE);
    return 0;
  }
  boundStreamBuffers();
  // grpc-js sets TLS's server name to an IP literal target, which Node deprecates (DEP0123)
  // on every connection: noise beside a result document.
  process.noDeprecation = true;
  const sent = openRequest(command.request);
  const consumer = new ReplyConsumer(command.request.binding, {
    wire: command.request.wire,
    limits: command.limits,
    ignoreDuplicates: command.ignoreDuplicates,
    bindingSha256: sha256Hex(sent.binding_json),
  });
  const session = new StreamSession(sent, consumer, command.options);
  const interrupt = new AbortController();
  const onSignal = (): void => interrupt.abort();
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  try {
    const result = await session.run(interrupt.signal);
    const text = resultJson(result);
    if (command.resultPath !== null) writeFileSync(command.resultPath, text, "utf8");
    process.stdout.write(text);
    return exitCode(result.status);
  } finally {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  }
}

if (require.main === module) {
  main(process.argv.slice(2)).then(
    (code) => {
      process.exitCode = code;
    },
    (error: unknown) => {
      process.stderr.write(`consumer: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
      process.exitCode = EXIT_USAGE;
    },
  );
}
