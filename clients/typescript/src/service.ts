/**
 * The `replywire.v1.ReplyStream` client, from the repository's .proto loaded at run time
 * (@grpc/proto-loader), with one change to what grpc-js does by default: a message that does
 * not parse as a `Chunk` is handed over as `{invalid}` rather than failing the call with
 * INTERNAL, so the session ends it `invalid_transport_message` as the Python consumer does.
 */

import { existsSync } from "node:fs";
import { resolve } from "node:path";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import type { OpenRequestMessage } from "./request";

/** The repository's .proto, from dist/ (or dist-test/src/) of clients/typescript. */
export function defaultProtoPath(): string {
  const override = process.env.REPLYWIRE_PROTO;
  if (override) return override;
  for (const up of ["../../..", "../../../.."]) {
    const candidate = resolve(__dirname, up, "protos/shared/pb/replywire.proto");
    if (existsSync(candidate)) return candidate;
  }
  return resolve(__dirname, "../../../protos/shared/pb/replywire.proto");
}

export interface ChunkMessage {
  readonly data: Buffer;
  /** Set (to why) when the message was not a Chunk. */
  readonly invalid?: string;
}

export interface CancelRequestMessage {
  stream_id: string;
}

export interface ReplyStreamClient extends grpc.Client {
  Open(
    request: OpenRequestMessage,
    metadata: grpc.Metadata,
    options: grpc.CallOptions,
  ): grpc.ClientReadableStream<ChunkMessage>;
  Cancel(
    request: CancelRequestMessage,
    metadata: grpc.Metadata,
    options: grpc.CallOptions,
    callback: (error: grpc.ServiceError | null, reply?: { cancelled: boolean }) => void,
  ): grpc.ClientUnaryCall;
}

type ClientConstructor = new (
  target: string,
  credentials: grpc.ChannelCredentials,
  options?: grpc.ChannelOptions,
) => ReplyStreamClient;

const constructors = new Map<string, ClientConstructor>();

function isMethodDefinition(value: unknown): value is protoLoader.MethodDefinition<object, object> {
  return typeof value === "object" && value !== null && "responseDeserialize" in value;
}

function clientConstructor(protoPath: string): ClientConstructor {
  const known = constructors.get(protoPath);
  if (known !== undefined) return known;
  const definition = protoLoader.loadSync(protoPath, {
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: false,
  });
  const service = definition["replywire.v1.ReplyStream"];
  if (service === undefined || isMethodDefinition(service) || !("Open" in service)) {
    throw new Error(`${protoPath} has no service replywire.v1.ReplyStream`);
  }
  const open = service.Open;
  const cancel = service.Cancel;
  if (!isMethodDefinition(open) || !isMethodDefinition(cancel)) {
    throw new Error(`${protoPath}: ReplyStream lacks Open or Cancel`);
  }
  const deserializeChunk = open.responseDeserialize;
  const safeOpen = {
    ...open,
    responseDeserialize: (bytes: Buffer): ChunkMessage => {
      try {
        const message = deserializeChunk(bytes) as { data?: unknown };
        return { data: Buffer.isBuffer(message.data) ? message.data : Buffer.alloc(0) };
      } catch (error) {
        return { data: Buffer.alloc(0), invalid: error instanceof Error ? error.message : String(error) };
      }
    },
  };
  // grpc-js types a generic client's methods loosely (an index signature); the casts give
  // this one service's two methods their types, which the .proto fixes.
  const made = grpc.makeGenericClientConstructor(
    { Open: safeOpen, Cancel: cancel } as unknown as grpc.ServiceDefinition,
    "ReplyStream",
  ) as unknown as ClientConstructor;
  constructors.set(protoPath, made);
  return made;
}

export function makeReplyStreamClient(
  protoPath: string,
  target: string,
  credentials: grpc.ChannelCredentials,
  options: grpc.ChannelOptions,
): ReplyStreamClient {
  const Client = clientConstructor(protoPath);
  return new Client(target, credentials, options);
}
