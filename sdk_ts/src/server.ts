// Serving runners as agentrunner.v1.RunnerService over gRPC (HTTP/2, connect-node's gRPC protocol),
// with grpc.health.v1 and a graceful drain on SIGTERM/SIGINT.
import * as http2 from "node:http2";
import { readFileSync } from "node:fs";
import type { AddressInfo } from "node:net";
import { create } from "@bufbuild/protobuf";
import { Code, ConnectError, type ConnectRouter, type HandlerContext } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { RunnerService, type RunRequest, type RunResponse, RunResponseSchema } from "./gen/agentrunner/v1/runner_service_pb.js";
import type { RunnerManifest } from "./gen/agentrunner/v1/manifest_pb.js";
import type { RunResult } from "./gen/agentrunner/v1/result_pb.js";
import { Health, HealthCheckResponse_ServingStatus as Serving } from "./gen/grpc/health/v1/health_pb.js";
import { runControl } from "./control.js";
import { AgentRunnerError } from "./errors.js";
import { type HostTls, HostTransports } from "./host.js";
import { log } from "./log.js";
import { connect, RuntimeRefused } from "./connect.js";
import { takeRuntimeKey } from "./runtimekey.js";
import { checkManifest, type ManifestInit } from "./manifest.js";
import { Execution, type Run, type Runner } from "./run.js";

/** Stdout line once serving: `AGENTRUNNER_LISTENING host:port`. */
export const READY_PREFIX = "AGENTRUNNER_LISTENING";
const MAX_MESSAGE = 16 << 20;

/** A runner from a manifest (labels may be plain strings) and an async generator function. */
export function defineRunner(spec: { manifest: ManifestInit | RunnerManifest; run: (run: Run) => AsyncIterable<RunResult> }): Runner {
  return { manifest: checkManifest(spec.manifest), run: spec.run };
}

export interface ServeOptions {
  host?: string;
  /** 0 picks a free port. */
  port?: number;
  /** PEM files: serve TLS. */
  tlsCert?: string;
  tlsKey?: string;
  /** How long in-flight runs may go on after a shutdown request (default 5000 ms). */
  graceMs?: number;
  /** TLS towards the host's ProxyService (default: AGENTRUNNER_HOST_* variables). */
  hostTls?: HostTls;
}

export interface RunnerServer {
  readonly address: string;
  readonly port: number;
  /** Refuses new runs, lets running ones end for graceMs, ends the rest with run.failed cancelled. */
  close(graceMs?: number): Promise<void>;
}

class RunnerServiceImpl {
  readonly active = new Set<Execution>();
  draining = false;
  constructor(readonly runners: Runner[], readonly hosts: HostTransports) {}

  find(id: string, name: string): Runner | undefined {
    const found = this.runners.find((r) => (id ? id === r.manifest.id || id === r.manifest.name : name === r.manifest.name));
    return found ?? (!id && !name && this.runners.length === 1 ? this.runners[0] : undefined);
  }

  routes(router: ConnectRouter): void {
    router.service(RunnerService, {
      listRunners: () => ({ runners: this.runners.map((r) => r.manifest) }),
      describeRunner: (req) => {
        const runner = req.runnerId ? this.find(req.runnerId, "") : undefined;
        if (!runner) throw new AgentRunnerError("NOT_FOUND", `no runner '${req.runnerId}' is served here`).toConnectError();
        return { runner: runner.manifest };
      },
      run: (req, ctx) => this.run(req, ctx),
    });
    const serving = new Set(["", RunnerService.typeName]);
    const status = (service: string) => (serving.has(service) && !this.draining ? Serving.SERVING : Serving.NOT_SERVING);
    router.service(Health, {
      check: (req) => {
        if (!serving.has(req.service)) throw new ConnectError(`unknown service ${req.service}`, Code.NotFound);
        return { status: status(req.service) };
      },
      async *watch(req, ctx) {
        yield { status: serving.has(req.service) ? status(req.service) : Serving.SERVICE_UNKNOWN };
        await new Promise((resolve) => ctx.signal.addEventListener("abort", resolve, { once: true }));
      },
      list: () => ({ statuses: Object.fromEntries([...serving].map((s) => [s, { status: status(s) }])) }),
    });
  }

  async *run(req: RunRequest, ctx: HandlerContext): AsyncGenerator<RunResponse> {
    if (this.draining) throw new AgentRunnerError("RUNNER_UNAVAILABLE", "the runner server is shutting down").toConnectError();
    const runner = this.find(req.runnerId, req.runnerName);
    if (!runner) throw new AgentRunnerError("NOT_FOUND", `no runner '${req.runnerId || req.runnerName}' here`).toConnectError();
    if (!req.context?.runId) {
      throw new AgentRunnerError("INVALID_ARGUMENT", "context.run_id is required", { metadata: { field: "context.run_id" } }).toConnectError();
    }
    const transport = req.hostApiEndpoint ? this.hosts.get(req.hostApiEndpoint) : undefined;
    const exec = new Execution(runner, req, ctx.signal, transport);
    this.active.add(exec);
    try {
      for await (const result of exec.results(transport ? (e) => runControl(e, transport) : undefined)) {
        yield create(RunResponseSchema, { result });
      }
    } finally {
      this.active.delete(exec);
    }
  }
}

/** Starts serving; resolves once listening. */
export async function startServer(runners: Runner[], options: ServeOptions = {}): Promise<RunnerServer> {
  if (runners.length === 0) throw new TypeError("serve at least one runner");
  const ids = runners.map((r) => r.manifest.id);
  if (new Set(ids).size !== ids.length) throw new TypeError(`runner ids must be unique, got ${ids.join(", ")}`);
  const impl = new RunnerServiceImpl(runners, new HostTransports(options.hostTls));
  const handler = connectNodeAdapter({
    grpc: true, grpcWeb: false, connect: false, readMaxBytes: MAX_MESSAGE, writeMaxBytes: MAX_MESSAGE,
    routes: (router) => impl.routes(router),
  });
  const server = options.tlsCert || options.tlsKey
    ? http2.createSecureServer({ cert: readFileSync(options.tlsCert!), key: readFileSync(options.tlsKey!) }, handler)
    : http2.createServer(handler);
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on("session", (session: http2.ServerHttp2Session) => {
    sessions.add(session);
    session.once("close", () => sessions.delete(session));
  });
  const host = options.host ?? "127.0.0.1";
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port ?? 0, host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  log("info", "runner server listening", { address: `${host}:${port}`, runners: runners.map((r) => r.manifest.id) });
  return {
    address: `${host}:${port}`,
    port,
    async close(graceMs = 5000) {
      impl.draining = true;
      const settled = (limit: number) => new Promise<void>((resolve) => {
        const started = Date.now();
        const tick = setInterval(() => {
          if (impl.active.size === 0 || Date.now() - started >= limit) clearInterval(tick), resolve();
        }, 20);
      });
      await settled(graceMs);
      for (const exec of impl.active) exec.stopWith("cancelled", "the runner server is shutting down");
      await settled(1000);
      impl.hosts.close();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const session of sessions) session.close(); // GOAWAY: clients stop using the connection
        setTimeout(() => {
          for (const session of sessions) session.destroy();
          resolve();
        }, 1000).unref();
      });
    },
  };
}

/** Serves until SIGTERM/SIGINT, printing the ready line on stdout, then drains. */
export async function serve(runners: Runner[], options: ServeOptions = {}): Promise<void> {
  const server = await startServer(runners, options);
  process.stdout.write(`${READY_PREFIX} ${server.address}\n`);
  await new Promise<void>((resolve) => {
    process.once("SIGTERM", resolve);
    process.once("SIGINT", resolve);
  });
  log("info", "shutting down", { grace_ms: options.graceMs ?? 5000 });
  await server.close(options.graceMs);
}

/**
 * `node runner.js [--host H] [--port N] [--tls-cert F --tls-key F] [--grace-ms N]`: serve and exit on error.
 * With `--connect HOST:PORT` it is a runtime instead: it dials the host (no listening port; `--runtime-id`,
 * `--label k=v` (repeat), `--slots N`, `--detect claude,codex`, the key from AGENTRUNNER_RUNTIME_KEY or _KEY_FILE) and
 * exits 2 when the host refuses it.
 */
export function main(runners: Runner[], argv = process.argv.slice(2)): void {
  const opt = (name: string) => {
    const i = argv.indexOf(`--${name}`);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  if (opt("connect")) {
    connectMain(runners, opt("connect")!, argv, opt);
    return;
  }
  const port = Number(opt("port") ?? 0);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    process.stderr.write(`agentrunner: --port must be 0..65535, got ${opt("port")}\n`);
    process.exit(2);
  }
  serve(runners, {
    host: opt("host"), port, tlsCert: opt("tls-cert"), tlsKey: opt("tls-key"),
    graceMs: opt("grace-ms") ? Number(opt("grace-ms")) : undefined,
  }).then(
    () => process.exit(0),
    (err: unknown) => {
      process.stderr.write(`agentrunner: ${err instanceof Error ? err.message : String(err)}\n`);
      process.exit(1);
    },
  );
}

function connectMain(runners: Runner[], address: string, argv: string[], opt: (name: string) => string | undefined): void {
  const labels: Record<string, string> = {};
  argv.forEach((arg, i) => {
    if (arg !== "--label") return;
    const [key, ...rest] = (argv[i + 1] ?? "").split("=");
    if (!key || rest.length === 0) {
      process.stderr.write(`agentrunner: --label ${argv[i + 1]}: expected key=value\n`);
      process.exit(2);
    }
    labels[key] = rest.join("=");
  });
  const stop = new AbortController();
  process.once("SIGTERM", () => stop.abort());
  process.once("SIGINT", () => stop.abort());
  const detect = opt("detect");
  let key: string;
  try {
    key = takeRuntimeKey(); // (out of process.env: nothing the runners start inherits it)
  } catch (err) {
    process.stderr.write(`error: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  }
  connect(runners, address, {
    runtimeId: opt("runtime-id"), labels, key, slots: opt("slots") ? Number(opt("slots")) : undefined,
    graceMs: opt("grace-ms") ? Number(opt("grace-ms")) : undefined,
    detect: detect === undefined ? undefined : detect.split(",").map((d) => d.trim()).filter(Boolean),
  }, stop.signal).then(
    () => process.exit(0),
    (err: unknown) => {
      process.stderr.write(`error: ${err instanceof Error ? err.message : String(err)}\n`);
      process.exit(err instanceof RuntimeRefused ? 2 : 1);
    },
  );
}
