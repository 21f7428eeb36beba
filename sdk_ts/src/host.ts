// The run-scoped client of the host's ProxyService: every call carries the run token, the run id and
// a W3C traceparent of the run's trace; its timeout is min(per-call default, remaining run time);
// failures are AgentRunnerErrors; after the run ended, calls fail locally.
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import type { DescMethod } from "@bufbuild/protobuf";
import { type CallOptions, type Client, createClient, type Transport } from "@connectrpc/connect";
import { createGrpcTransport, Http2SessionManager } from "@connectrpc/connect-node";
import { ProxyService } from "./gen/agentrunner/v1/proxy_service_pb.js";
import { AgentRunnerError } from "./errors.js";
import { FleetTransport, isFleetAddress, type Replica } from "./fleet.js";

export const RUN_TOKEN_HEADER = "x-agentrunner-run-token";
export const RUN_ID_HEADER = "x-agentrunner-run-id";

/** Per-call default timeouts (ms) by method name, clipped by the run's remaining time; others 15 s. */
export const DEFAULT_TIMEOUTS_MS: Record<string, number> = {
  InvokeModel: 120_000, StreamModel: 120_000, RerankDocuments: 30_000, CountTokens: 30_000,
  GetToolDetail: 15_000, CallTool: 60_000, ListKnowledgeBases: 15_000, RetrieveKnowledge: 30_000,
  GetPrompt: 15_000, ListHistory: 30_000, SearchHistory: 30_000, GetEvent: 15_000, ListEvents: 30_000,
  GetArtifactMetadata: 15_000, ReadArtifact: 30_000, DownloadArtifact: 120_000, PullSteering: 10_000,
  RequestPlatformAction: 60_000, SendReply: 30_000, SendMessage: 60_000,
};
const DEFAULT_TIMEOUT_MS = 15_000;

export type HostClient = Client<typeof ProxyService>;

/** TLS towards the host (the same AGENTRUNNER_HOST_* variables as the Python and Go kits). */
export interface HostTls {
  caFile?: string;
  certFile?: string;
  keyFile?: string;
  serverName?: string;
}

export function hostTlsFromEnv(env = process.env): HostTls | undefined {
  const tls = {
    caFile: env.AGENTRUNNER_HOST_CA_FILE, certFile: env.AGENTRUNNER_HOST_CERT_FILE,
    keyFile: env.AGENTRUNNER_HOST_KEY_FILE, serverName: env.AGENTRUNNER_HOST_SERVER_NAME,
  };
  return Object.values(tls).some(Boolean) ? tls : undefined;
}

/** A W3C traceparent for a new span of the trace, or undefined without a valid trace id. */
export function traceparent(traceId: string): string | undefined {
  const tid = traceId.toLowerCase();
  if (!/^[0-9a-f]{32}$/.test(tid) || /^0+$/.test(tid)) return undefined;
  return `00-${tid}-${randomBytes(8).toString("hex")}-01`;
}

/** An HTTP/2 session and its gRPC transport to one host address (TLS when `tls` is given). */
export function hostTransport(
  target: string, tls: HostTls | undefined, session: { pingIntervalMs: number; pingTimeoutMs?: number }, servername?: string,
): { transport: Transport; close: () => void } {
  const baseUrl = `${tls ? "https" : "http"}://${target.replace(/^dns:\/\/\//, "")}`;
  const nodeOptions = tls
    ? {
        ca: tls.caFile ? readFileSync(tls.caFile) : undefined,
        cert: tls.certFile ? readFileSync(tls.certFile) : undefined,
        key: tls.keyFile ? readFileSync(tls.keyFile) : undefined,
        servername: tls.serverName ?? servername,
      }
    : undefined;
  const manager = new Http2SessionManager(baseUrl, session, nodeOptions);
  return { transport: createGrpcTransport({ baseUrl, sessionManager: manager, nodeOptions }), close: () => manager.abort() };
}

/** One transport per host endpoint for the whole process; an endpoint naming several replicas of a
 * fleet (`h1:p,h2:p`, `dns:///name:p`) gets one that balances round robin over them (fleet.ts). */
export class HostTransports {
  private readonly transports = new Map<string, { transport: Transport; close: () => void }>();
  constructor(private readonly tls: HostTls | undefined = hostTlsFromEnv()) {}

  get(endpoint: string): Transport {
    const known = this.transports.get(endpoint);
    if (known) return known.transport;
    const one = (replica: Replica) => hostTransport(replica.target, this.tls, { pingIntervalMs: 60_000 }, replica.servername);
    let made: { transport: Transport; close: () => void };
    if (isFleetAddress(endpoint)) {
      const fleet = new FleetTransport(endpoint, one);
      made = { transport: fleet, close: () => fleet.close() };
    } else {
      made = one({ target: endpoint });
    }
    this.transports.set(endpoint, made);
    return made.transport;
  }

  close(): void {
    for (const { close } of this.transports.values()) close();
    this.transports.clear();
  }
}

export interface RunBinding {
  runId: string;
  runToken: string;
  traceId: string;
  /** The run deadline (epoch ms), when there is one. */
  deadline: () => number | undefined;
  ended: () => boolean;
  /** Aborted when the run ends: in-flight calls are cancelled. */
  signal: AbortSignal;
}

/** Call options every host call of the run gets (headers, timeout, signal); throws when it cannot go out. */
export function callOptions(method: string, run: RunBinding, given: CallOptions = {}): CallOptions {
  if (run.ended()) throw new AgentRunnerError("FAILED_PRECONDITION", `${method}: the run has ended`);
  let timeoutMs = given.timeoutMs ?? DEFAULT_TIMEOUTS_MS[method] ?? DEFAULT_TIMEOUT_MS;
  const deadline = run.deadline();
  if (deadline !== undefined) {
    const left = deadline - Date.now();
    if (left <= 0) throw new AgentRunnerError("DEADLINE_EXCEEDED", `the run deadline passed before ${method}`);
    timeoutMs = Math.min(timeoutMs, left);
  }
  const headers = new Headers(given.headers);
  headers.set(RUN_TOKEN_HEADER, run.runToken);
  headers.set(RUN_ID_HEADER, run.runId);
  const tp = traceparent(run.traceId);
  if (tp) headers.set("traceparent", tp);
  const signal = given.signal ? AbortSignal.any([given.signal, run.signal]) : run.signal;
  return { ...given, timeoutMs: Math.max(1, Math.floor(timeoutMs)), headers, signal };
}

async function* streaming(items: AsyncIterable<unknown>): AsyncIterable<unknown> {
  try {
    yield* items;
  } catch (err) {
    throw AgentRunnerError.from(err);
  }
}

/** The typed ProxyService client of one run (`run.host`). */
export function hostClient(transport: Transport | undefined, run: RunBinding): HostClient {
  const noEndpoint = new AgentRunnerError("UNAUTHORIZED", "the host gave this run no API endpoint");
  const raw = transport ? (createClient(ProxyService, transport) as unknown as Record<string, Function>) : undefined;
  const out: Record<string, unknown> = {};
  for (const method of ProxyService.methods as readonly DescMethod[]) {
    const name = method.localName;
    if (method.methodKind === "unary") {
      out[name] = async (request: unknown, options?: CallOptions) => {
        if (!raw) throw noEndpoint;
        const opts = callOptions(method.name, run, options);
        try {
          return await raw[name](request, opts);
        } catch (err) {
          throw AgentRunnerError.from(err);
        }
      };
    } else {
      out[name] = (request: unknown, options?: CallOptions) => {
        if (!raw) throw noEndpoint;
        return streaming(raw[name](request, callOptions(method.name, run, options)));
      };
    }
  }
  return out as unknown as HostClient;
}
