/**
 * TLS and the bearer token (consumer/security.py's rule, on grpc-js).
 *
 * - `--tls-ca FILE`: TLS trusting that CA alone; `--tls`: TLS with Node's default roots;
 *   `--tls-cert` / `--tls-key`: a client certificate (mutual TLS); `--tls-server-name`: the
 *   name the producer's certificate must carry.
 * - `--auth-token-file FILE` (the token alone), else `REPLYWIRE_AUTH_TOKEN`: the bearer token,
 *   up to 512 visible ASCII characters.
 *
 * How the token travels, by the Python consumer's rule (never in clear to a host that is not
 * this one):
 * - over TLS: as gRPC call credentials (`authorization: Bearer TOKEN`) composed with the
 *   channel's, on every call (Open, each resume, Cancel);
 * - over plaintext to a loopback address literal (127.0.0.0/8, ::1, `ipv4:`/`ipv6:` lists of
 *   them) or a Unix socket: as the call's metadata. Python uses gRPC's local credentials
 *   there, which check at every connection that the peer is on this host; grpc-js has no
 *   local credentials and cannot compose call credentials with a plaintext channel, so this
 *   consumer sends the token in plaintext only where the target's text alone proves the
 *   peer local: the name `localhost` (which Python accepts and then verifies) is refused;
 * - over plaintext to anything else: refused before any connection (a usage error). There
 *   is no `--insecure` here.
 */

import { readFileSync } from "node:fs";
import { isIP } from "node:net";
import * as grpc from "@grpc/grpc-js";
import { pyStrip } from "./pytext";

export const TOKEN_ENV = "REPLYWIRE_AUTH_TOKEN";
const MAX_TOKEN_CHARS = 512;
const MAX_ROOTS_BYTES = 16 << 20;
const PEM_CERTIFICATE = "-----BEGIN CERTIFICATE-----";

/** A command that cannot start with its flags or files (exit 2). */
export class ConfigurationError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ConfigurationError";
  }
}

export type Locality = "unix" | "loopback" | "remote";

function loopbackLiteral(host: string): boolean {
  const kind = isIP(host);
  if (kind === 4) return host.split(".")[0] === "127";
  if (kind === 6) {
    const expanded = host.toLowerCase();
    return expanded === "::1" || /^(0{1,4}:){7}0{0,3}1$/.test(expanded) || expanded === "0:0:0:0:0:0:0:1";
  }
  return false;
}

/** The host of `HOST`, `HOST:PORT`, `[V6]` or `[V6]:PORT` (a bare IPv6 address has no port). */
function hostOf(address: string): string {
  if (address.startsWith("[")) {
    const end = address.indexOf("]");
    const after = address.slice(end + 1);
    if (end < 0 || (after !== "" && !after.startsWith(":"))) return "";
    return address.slice(1, end);
  }
  if ((address.match(/:/g) ?? []).length > 1) return address;
  return address.split(":")[0] ?? "";
}

function uriPath(rest: string): string | null {
  if (!rest.startsWith("//")) return rest;
  const slash = rest.indexOf("/", 2);
  const authority = slash < 0 ? rest.slice(2) : rest.slice(2, slash);
  return authority ? null : slash < 0 ? "" : rest.slice(slash + 1);
}

/**
 * Whether every address of a gRPC target is on this host, judged from its text alone (no
 * name looked up); consumer/security.py's `target_locality`, except that the name
 * `localhost` is not local here (nothing checks where it resolves).
 */
export function targetLocality(target: string): Locality {
  const colon = target.indexOf(":");
  const scheme = colon < 0 ? "" : target.slice(0, colon);
  const rest = colon < 0 ? "" : target.slice(colon + 1);
  if (colon >= 0 && (scheme === "unix" || scheme === "unix-abstract")) return "unix";
  if (colon >= 0 && (scheme === "ipv4" || scheme === "ipv6")) {
    const path = uriPath(rest);
    if (path === null || !path.split(",").every((address) => loopbackLiteral(hostOf(address)))) {
      return "remote";
    }
    return "loopback";
  }
  if (colon >= 0 && scheme === "dns") {
    const path = uriPath(rest);
    return path !== null && loopbackLiteral(hostOf(path)) ? "loopback" : "remote";
  }
  return loopbackLiteral(hostOf(target)) ? "loopback" : "remote";
}

export interface SecurityFlags {
  readonly tls: boolean;
  readonly tlsCa: string | null;
  readonly tlsCert: string | null;
  readonly tlsKey: string | null;
  readonly tlsServerName: string | null;
  readonly authTokenFile: string | null;
}

export interface Security {
  readonly tls: boolean;
  readonly ca: Buffer | null;
  readonly cert: Buffer | null;
  readonly key: Buffer | null;
  readonly serverName: string | null;
  readonly token: string | null;
  readonly tokenFrom: string;
}

function readFile(path: string, flag: string): Buffer {
  try {
    return readFileSync(path);
  } catch (error) {
    throw new ConfigurationError(`cannot read ${flag} ${path}: ${(error as Error).message}`);
  }
}

function readToken(path: string | null): { token: string | null; from: string } {
  let raw: string;
  let from: string;
  if (path !== null) {
    const bytes = readFile(path, "--auth-token-file");
    try {
      raw = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    } catch {
      throw new ConfigurationError("--auth-token-file is not UTF-8");
    }
    from = "--auth-token-file";
  } else {
    raw = process.env[TOKEN_ENV] ?? "";
    from = TOKEN_ENV;
  }
  const token = pyStrip(raw);
  if (token === "") return { token: null, from };
  // Python: len <= 512, str.isascii() and str.isprintable(): space to tilde.
  if (token.length > MAX_TOKEN_CHARS || !/^[\x20-\x7e]+$/.test(token)) {
    throw new ConfigurationError("the auth token must be up to 512 visible ASCII characters");
  }
  return { token, from };
}

/** Read the files once, before anything runs; a bad combination is a usage error. */
export function loadSecurity(flags: SecurityFlags): Security {
  if ((flags.tlsCert === null) !== (flags.tlsKey === null)) {
    throw new ConfigurationError("--tls-cert and --tls-key go together");
  }
  const tls = flags.tls || flags.tlsCa !== null;
  if (!tls && (flags.tlsCert !== null || flags.tlsServerName !== null)) {
    throw new ConfigurationError("--tls-cert, --tls-key and --tls-server-name need --tls or --tls-ca");
  }
  let ca: Buffer | null = null;
  if (flags.tlsCa !== null) {
    ca = readFile(flags.tlsCa, "--tls-ca");
    if (ca.length > MAX_ROOTS_BYTES || !ca.includes(PEM_CERTIFICATE)) {
      throw new ConfigurationError(`--tls-ca ${flags.tlsCa} holds no PEM certificate (or is over 16 MiB)`);
    }
  }
  const { token, from } = readToken(flags.authTokenFile);
  return {
    tls,
    ca,
    cert: flags.tlsCert === null ? null : readFile(flags.tlsCert, "--tls-cert"),
    key: flags.tlsKey === null ? null : readFile(flags.tlsKey, "--tls-key"),
    serverName: flags.tlsServerName,
    token,
    tokenFrom: from,
  };
}

/** Refuse (before any connection) a token that would go in clear to a host not this one. */
export function checkSecurity(security: Security, target: string): void {
  if (security.token === null || security.tls || targetLocality(target) !== "remote") return;
  const unset = security.tokenFrom === TOKEN_ENV ? `, unset ${TOKEN_ENV}` : "";
  throw new ConfigurationError(
    `refusing to send the token from ${security.tokenFrom} in clear to ${target} (not a ` +
      `loopback address literal or a Unix socket): give --tls or --tls-ca${unset}`,
  );
}

/** The channel's credentials: TLS (with the token's call credentials composed in), or
 * plaintext (the token, if any, then goes as each call's metadata: `callMetadata`). */
export function channelCredentials(security: Security, target: string): grpc.ChannelCredentials {
  checkSecurity(security, target);
  if (!security.tls) return grpc.credentials.createInsecure();
  const channel = grpc.credentials.createSsl(security.ca, security.key, security.cert);
  if (security.token === null) return channel;
  const token = security.token;
  const call = grpc.credentials.createFromMetadataGenerator((_params, callback) => {
    const metadata = new grpc.Metadata();
    metadata.set("authorization", `Bearer ${token}`);
    callback(null, metadata);
  });
  return grpc.credentials.combineChannelCredentials(channel, call);
}

/** The token as the call's own metadata: only on a plaintext channel to a local target. */
export function callMetadata(security: Security, target: string): grpc.Metadata {
  const metadata = new grpc.Metadata();
  if (security.token !== null && !security.tls && targetLocality(target) !== "remote") {
    metadata.set("authorization", `Bearer ${security.token}`);
  }
  return metadata;
}

export function channelOptions(security: Security): Record<string, string> {
  if (security.serverName === null) return {};
  return {
    "grpc.ssl_target_name_override": security.serverName,
    "grpc.default_authority": security.serverName,
  };
}
