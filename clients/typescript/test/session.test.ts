/**
 * The gRPC edge against a fake producer on loopback (grpc-js, in this process): a clean
 * stream, a refusal, a resume after a broken call, a message that is not a Chunk, the idle
 * timeout, the deadline, a named reply ending, an interrupt; and the CLI's exit codes.
 */

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { resolve } from "node:path";
import { after, before, test } from "node:test";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import { ReplyConsumer } from "../src/core";
import { sha256Hex } from "../src/digest";
import { isObject, LENIENT, parseJson, type JsonObject } from "../src/json";
import { registered, statusOf } from "../src/reasons";
import { openRequest, type ReplyRequest } from "../src/request";
import { resultDocument, type StreamResult } from "../src/result";
import { defaultProtoPath } from "../src/service";
import { StreamSession, type StreamOptions } from "../src/session";
import type { WireFormat } from "../src/wire/base";
import { FIXTURES, fixture, plain } from "./helpers";

interface Transmission {
  readonly chunks: readonly string[];
  readonly document: Record<string, unknown>;
}
const TRANSMISSIONS = fixture<Record<string, Transmission>>("transmissions.json");
const BINDING_FILE = resolve(FIXTURES, "bindings/replace-file.json");
const BINDING = parseJson(JSON.stringify(fixture<unknown>("bindings/replace-file.json")), LENIENT);
if (!isObject(BINDING)) throw new Error("the binding fixture is not an object");

interface Opened {
  readonly request: { stream_id: string; resume_after: string; wire_format: string; kind: string };
  readonly call: grpc.ServerWritableStream<unknown, Buffer>;
}
type Script = (opened: Opened) => void;

/** How the fake producer answers each Open, in turn; the Cancels it was sent. */
const scripts: Script[] = [];
const opens: Opened[] = [];
const cancels: string[] = [];
let server: grpc.Server;
let target = "";

function chunk(data: Buffer): Buffer {
  // Chunk { bytes data = 1; }: tag 0x0a, a varint length, the bytes.
  const length: number[] = [];
  let size = data.length;
  do {
    length.push((size & 0x7f) | (size > 0x7f ? 0x80 : 0));
    size >>>= 7;
  } while (size > 0);
  return Buffer.concat([Buffer.from([0x0a, ...length]), data]);
}

function chunksOf(wire: WireFormat): Buffer[] {
  return (TRANSMISSIONS[wire]?.chunks ?? []).map((text) => Buffer.from(text, "base64"));
}

function send(call: grpc.ServerWritableStream<unknown, Buffer>, chunks: readonly Buffer[]): void {
  for (const data of chunks) call.write(chunk(data));
}

function fail(call: grpc.ServerWritableStream<unknown, Buffer>, code: grpc.status, details: string): void {
  call.emit("error", { code, details, metadata: new grpc.Metadata() });
}

before(async () => {
  const definition = protoLoader.loadSync(defaultProtoPath(), { keepCase: true, longs: String, enums: String, defaults: true });
  const service = definition["replywire.v1.ReplyStream"] as protoLoader.ServiceDefinition;
  server = new grpc.Server();
  const open = service.Open as protoLoader.MethodDefinition<object, object>;
  const cancel = service.Cancel as protoLoader.MethodDefinition<object, object>;
  server.addService(
    {
      Open: { ...open, responseSerialize: (bytes: Buffer) => bytes },
      Cancel: cancel,
    } as unknown as grpc.ServiceDefinition,
    {
      Open: (call: grpc.ServerWritableStream<Opened["request"], Buffer>) => {
        const opened = { request: call.request, call };
        opens.push(opened);
        const script = scripts.shift();
        if (script === undefined) fail(call, grpc.status.INTERNAL, "no script");
        else script(opened);
      },
      Cancel: (
        call: grpc.ServerUnaryCall<{ stream_id: string }, unknown>,
        callback: grpc.sendUnaryData<{ cancelled: boolean }>,
      ) => {
        cancels.push(call.request.stream_id);
        callback(null, { cancelled: true });
      },
    },
  );
  target = await new Promise<string>((resolvePort, reject) => {
    server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (error, port) => {
      if (error) reject(error);
      else resolvePort(`127.0.0.1:${port}`);
    });
  });
});

after(() => {
  server.forceShutdown();
});

function options(overrides: Partial<StreamOptions> = {}): StreamOptions {
  return {
    target,
    queueSize: 8,
    processDelayMs: 0,
    windowBytes: 65536,
    maxMessageBytes: 4 << 20,
    deadlineS: 30,
    idleTimeoutS: 30,
    resumeAttempts: 3,
    resumeBackoffS: 0.01,
    resumeBackoffMaxS: 0.02,
    keepaliveS: 10,
    keepaliveTimeoutS: 5,
    security: { tls: false, ca: null, cert: null, key: null, serverName: null, token: null, tokenFrom: "" },
    protoPath: defaultProtoPath(),
    ...overrides,
  };
}

async function stream(
  wire: WireFormat,
  streamScripts: Script[],
  overrides: Partial<StreamOptions> = {},
  stop: AbortSignal | null = null,
  binding: JsonObject = BINDING as JsonObject,
): Promise<StreamResult> {
  scripts.length = 0;
  opens.length = 0;
  scripts.push(...streamScripts);
  const request: ReplyRequest = {
    caseId: String(binding.get("case_id")),
    binding,
    wire,
    plan: { mode: "frame" },
    fault: null,
    streamId: `s-${Math.random().toString(16).slice(2)}`,
    chunkIntervalMs: 0,
  };
  const sent = openRequest(request);
  const consumer = new ReplyConsumer(request.binding, { wire, bindingSha256: sha256Hex(sent.binding_json) });
  return new StreamSession(sent, consumer, options(overrides)).run(stop);
}

/** The document without what only a stream over gRPC has. */
function judged(result: StreamResult): Record<string, unknown> {
  const document = plain(resultDocument(result)) as Record<string, unknown>;
  delete document.stream_id;
  delete document.flow;
  return document;
}

test("a clean stream gives the Python consumer's document, on every wire", async () => {
  for (const wire of ["lp", "ndjson", "ndjson-lab"] as const) {
    const result = await stream(wire, [({ call }) => { send(call, chunksOf(wire)); call.end(); }]);
    assert.deepStrictEqual(judged(result), TRANSMISSIONS[wire]?.document);
    assert.equal(result.flow?.queueSize, 8);
    assert.equal(opens[0]?.request.resume_after, "0");
  }
});

test("a text binding's stream asks for a text reply and gives the Python core's document", async () => {
  interface TextCase { readonly chunks: readonly string[]; readonly document: Record<string, unknown> }
  const text = fixture<{ binding: unknown; cases: Array<TextCase & { id: string }> }>("text_kind.json");
  const binding = parseJson(JSON.stringify(text.binding), LENIENT) as JsonObject;
  for (const wire of ["lp", "ndjson"] as const) {
    const entry = text.cases.find((candidate) => candidate.id === `text/3/${wire}/1,2,7,3,11`);
    assert.ok(entry);
    const chunks = entry.chunks.map((chunk) => Buffer.from(chunk, "base64"));
    const result = await stream(wire, [({ call }) => { send(call, chunks); call.end(); }], {}, null, binding);
    assert.equal(opens[0]?.request.kind, "REPLY_KIND_TEXT");
    assert.deepStrictEqual(judged(result), entry.document);
  }
  // A producer whose source serves no text: refused, and (as in Python) the refusal names no kind.
  const refused = await stream("lp", [({ call }) => fail(call, grpc.status.FAILED_PRECONDITION, "kind_unsupported")], {}, null, binding);
  assert.deepStrictEqual([refused.status, refused.reason, refused.kind], ["refused", "kind_unsupported", null]);
  const grounded = await stream("lp", [({ call }) => { send(call, chunksOf("lp")); call.end(); }]);
  assert.equal(opens[0]?.request.kind, "REPLY_KIND_GROUNDED");
  assert.equal(grounded.kind, null);
});

test("a refusal before any chunk is refused with the producer's code", async () => {
  const result = await stream("lp", [({ call }) => fail(call, grpc.status.FAILED_PRECONDITION, "request_binding_mismatch")]);
  assert.equal(result.status, "refused");
  assert.equal(result.reason, "request_binding_mismatch");
  assert.equal(result.detail, "producer answered FAILED_PRECONDITION");
  assert.deepStrictEqual(plain(result.transport ?? new Map()), {
    grpc_code: "FAILED_PRECONDITION",
    grpc_details: "request_binding_mismatch",
  });
  assert.equal(result.integrity, null);
});

test("a refusal with a code this consumer does not know is error / transport_io_error, its details kept", async () => {
  // Any text that is not a code of src/generated.ts: never a crash, never a guessed status.
  for (const details of ["a_code_from_a_newer_producer", "no such code\u0007"]) {
    assert.equal(registered(details), null);
    const result = await stream("lp", [({ call }) => fail(call, grpc.status.INVALID_ARGUMENT, details)]);
    assert.deepStrictEqual([result.status, result.reason, opens.length], ["error", "transport_io_error", 1], details);
    assert.deepStrictEqual(plain(result.transport ?? new Map()), {
      grpc_code: "INVALID_ARGUMENT",
      grpc_details: details.replace("\u0007", "\\x07"),
    });
    assert.equal(result.stats.applicationFrames, 0);
  }
});

test("the producer's newer refusals: refused with their code once make_tables.py has them, else as unknown", async () => {
  for (const details of ["binding_not_canonical", "fault_parameter_out_of_range"]) {
    const result = await stream("lp", [({ call }) => fail(call, grpc.status.INVALID_ARGUMENT, details)]);
    const expected = registered(details) === null ? ["error", "transport_io_error"] : [statusOf(details), details];
    assert.deepStrictEqual([result.status, result.reason], expected, details);
  }
});

test("a broken call is resumed after the last frame applied, and completes", async () => {
  const chunks = chunksOf("lp");
  const result = await stream("lp", [
    ({ call }) => {
      send(call, chunks.slice(0, 4));
      setTimeout(() => fail(call, grpc.status.UNAVAILABLE, "connection reset"), 50);
    },
    ({ call, request }) => {
      send(call, chunks.slice(Number(request.resume_after)));
      call.end();
    },
  ]);
  assert.equal(result.status, "complete");
  assert.equal(result.stats.reconnects, 1);
  assert.deepStrictEqual(opens.map((opened) => opened.request.resume_after), ["0", "4"]);
  assert.equal(opens[0]?.request.stream_id, opens[1]?.request.stream_id);
});

test("without resumes a broken call is error / transport_io_error with the gRPC status", async () => {
  const result = await stream("lp", [({ call }) => { send(call, chunksOf("lp").slice(0, 2)); setTimeout(() => fail(call, grpc.status.UNAVAILABLE, "gone\n"), 50); }], { resumeAttempts: 0 });
  assert.deepStrictEqual([result.status, result.reason], ["error", "transport_io_error"]);
  assert.deepStrictEqual(plain(result.transport ?? new Map()), { grpc_code: "UNAVAILABLE", grpc_details: "gone\\n" });
});

test("a reply's named ending is not resumed; producer_shutdown is", async () => {
  const lost = await stream("lp", [({ call }) => { send(call, chunksOf("lp").slice(0, 2)); setTimeout(() => fail(call, grpc.status.UNAVAILABLE, "generator_lost"), 50); }]);
  assert.deepStrictEqual([lost.status, lost.reason, opens.length], ["error", "generator_lost", 1]);
  const behind = await stream("lp", [({ call }) => { send(call, chunksOf("lp").slice(0, 2)); setTimeout(() => fail(call, grpc.status.UNAVAILABLE, "reply_log_behind"), 50); }]);
  assert.deepStrictEqual([behind.status, behind.reason, opens.length], ["error", "reply_log_behind", 1]);
  const chunks = chunksOf("lp");
  const shutdown = await stream("lp", [
    ({ call }) => { send(call, chunks.slice(0, 2)); setTimeout(() => fail(call, grpc.status.UNAVAILABLE, "producer_shutdown"), 50); },
    ({ call, request }) => { send(call, chunks.slice(Number(request.resume_after))); call.end(); },
  ]);
  assert.deepStrictEqual([shutdown.status, shutdown.stats.reconnects], ["complete", 1]);
});

test("invalid data ends the stream invalid and is never resumed", async () => {
  const chunks = chunksOf("lp");
  const result = await stream("lp", [({ call }) => { send(call, [chunks[1] ?? Buffer.alloc(0)]); }]);
  assert.deepStrictEqual([result.status, result.reason, opens.length], ["invalid", "invalid_sequence", 1]);
});

test("a message that is not a Chunk is error / invalid_transport_message", async () => {
  const result = await stream("lp", [({ call }) => { call.write(Buffer.from([0x0f])); }]);
  assert.deepStrictEqual([result.status, result.reason], ["error", "invalid_transport_message"]);
});

test("silence past the idle timeout is incomplete / idle_timeout, the content kept", async () => {
  const result = await stream("lp", [({ call }) => send(call, chunksOf("lp").slice(0, 3))], { idleTimeoutS: 0.3 });
  assert.deepStrictEqual([result.status, result.reason, result.stats.applicationFrames], ["incomplete", "idle_timeout", 3]);
  assert.ok(result.provisionalContent.length > 0);
});

test("the overall deadline is incomplete / deadline_exceeded", async () => {
  const result = await stream("ndjson", [({ call }) => send(call, chunksOf("ndjson").slice(0, 2))], { deadlineS: 0.3 });
  assert.deepStrictEqual([result.status, result.reason], ["incomplete", "deadline_exceeded"]);
});

test("a slow core pauses the call and counts the pauses", async () => {
  const result = await stream("lp", [({ call }) => { send(call, chunksOf("lp")); call.end(); }], { processDelayMs: 5, queueSize: 1 });
  assert.equal(result.status, "complete");
  assert.ok((result.flow?.readsPaused ?? 0) > 0);
});

test("an interrupt sends Cancel with the stream id and ends consumer_cancelled", async () => {
  cancels.length = 0;
  const stop = new AbortController();
  const running = stream("lp", [({ call }) => { send(call, chunksOf("lp").slice(0, 2)); setTimeout(() => stop.abort(), 100); }], {}, stop.signal);
  const result = await running;
  assert.deepStrictEqual([result.status, result.reason], ["incomplete", "consumer_cancelled"]);
  assert.deepStrictEqual(cancels, [opens[0]?.request.stream_id]);
});

function cli(args: readonly string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolveRun) => {
    const child = spawn(process.execPath, [resolve(__dirname, "../src/cli.js"), ...args]);
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (data: Buffer) => (stdout += data.toString()));
    child.stderr.on("data", (data: Buffer) => (stderr += data.toString()));
    child.on("close", (code) => resolveRun({ code, stdout, stderr }));
  });
}

test("the CLI exits by status: 0 complete, 7 refused, 2 a usage error", async () => {
  scripts.length = 0;
  scripts.push(({ call }) => { send(call, chunksOf("lp")); call.end(); });
  const complete = await cli(["stream", "--target", target, "--binding", BINDING_FILE, "--case", "replace-file"]);
  assert.equal(complete.code, 0, complete.stderr);
  assert.equal((JSON.parse(complete.stdout) as { status: string }).status, "complete");
  scripts.push(({ call }) => fail(call, grpc.status.INVALID_ARGUMENT, "invalid_request"));
  const refused = await cli(["stream", "--target", target, "--binding", BINDING_FILE, "--case", "replace-file"]);
  assert.equal(refused.code, 7);
  for (const args of [
    ["stream", "--case", "x"],
    ["stream", "--binding", BINDING_FILE, "--case", "x", "--wire", "xml"],
    ["stream", "--binding", BINDING_FILE, "--case", "x", "--chunks", "0"],
    ["stream", "--binding", BINDING_FILE, "--case", "x", "--deadline-s", "0"],
    ["stream", "--binding", BINDING_FILE, "--case", "x", "--target", "10.9.8.7:1", "--auth-token-file", BINDING_FILE],
    ["stream", "--binding", resolve(FIXTURES, "core.json"), "--case", "x"],
    ["replay", "--binding", BINDING_FILE, "--case", "x"],
  ]) {
    const run = await cli(args);
    assert.equal(run.code, 2, `${args.join(" ")}: ${run.stderr}`);
    assert.match(run.stderr, /^consumer: /);
  }
});
