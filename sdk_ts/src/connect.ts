// Connect mode: serve runners by dialing the host (a runtime: no listening port). One session at a time
// (RuntimeService.Connect: hello, welcome, heartbeats, drain), one ClaimRun stream per free slot on
// which the host places a run; the run is executed exactly as a dialed Run (the same Execution), with
// host_api_endpoint replaced by the address dialed. A dropped session stops its runs and reconnects
// with capped exponential backoff and jitter; a refusal that waiting cannot fix throws RuntimeRefused.
import { hostname, arch, platform, release } from "node:os";
import { clone, create } from "@bufbuild/protobuf";
import { Code, ConnectError, createClient } from "@connectrpc/connect";
import { RunRequestSchema, RunResponseSchema } from "./gen/agentrunner/v1/runner_service_pb.js";
import {
  type ClaimedRun, type ClaimRunRequest, ClaimRunRequestSchema, type ClaimRunResponse, type ConnectRequest,
  ConnectRequestSchema, RuntimeService,
} from "./gen/agentrunner/v1/runtime_service_pb.js";
import { runControl } from "./control.js";
import { detectHarnesses } from "./detect.js";
import { resolveReplicas } from "./fleet.js";
import { type HostTls, HostTransports, hostTlsFromEnv, hostTransport } from "./host.js";
import { checkKeyTransport, runtimeKeyFromEnv } from "./runtimekey.js";
import { log } from "./log.js";
import { AsyncQueue } from "./queue.js";
import { VERSION } from "./version.js";
import { Execution, type Runner } from "./run.js";
import * as results from "./results.js";

/** Stdout line each time the host accepts the runtime: `AGENTRUNNER_RUNTIME_CONNECTED <runtime id> <connection id>`. */
export const CONNECTED_PREFIX = "AGENTRUNNER_RUNTIME_CONNECTED";
const FATAL = new Set([Code.Unauthenticated, Code.PermissionDenied, Code.InvalidArgument]);

export interface ConnectOptions {
  /** The runtime's id on the host (default: the hostname). */
  runtimeId?: string;
  labels?: Record<string, string>;
  /** Runs executed at once at most (default 4). */
  slots?: number;
  /** The runtime key (default: AGENTRUNNER_RUNTIME_KEY or the file AGENTRUNNER_RUNTIME_KEY_FILE names). */
  key?: string;
  /** TLS towards the host (default: AGENTRUNNER_HOST_* variables). */
  hostTls?: HostTls;
  /** How long open runs may go on when stopping (default 5000 ms). */
  graceMs?: number;
  backoffInitialMs?: number;
  backoffMaxMs?: number;
  /** Harness CLIs to look for on PATH (default claude, codex). */
  detect?: string[];
}

/** The host refused the runtime for a reason waiting cannot fix. */
export class RuntimeRefused extends Error {}

/** Capped exponential backoff with jitter before reconnect attempt `attempt` (from 0): half fixed, half random. */
export function backoffDelayMs(attempt: number, initialMs: number, maxMs: number): number {
  const step = Math.min(maxMs, initialMs * 2 ** attempt);
  return step / 2 + Math.random() * (step / 2);
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => (clearTimeout(timer), resolve()), { once: true });
  });

class Runtime {
  readonly active = new Set<Execution>();
  readonly instanceId = `inst_${Math.random().toString(16).slice(2)}${Date.now().toString(16)}`;
  drained = false;
  leaving = false;
  connections = 0;
  sessions = 0;
  readonly hosts: HostTransports;
  readonly headers: Record<string, string>;
  capabilities: Awaited<ReturnType<typeof detectHarnesses>> = [];

  constructor(readonly runners: Runner[], readonly address: string, readonly options: Required<Omit<ConnectOptions, "hostTls" | "key">> & { hostTls?: HostTls; key: string }) {
    this.hosts = new HostTransports(options.hostTls);
    this.headers = options.key ? { authorization: `Bearer ${options.key}` } : {};
  }

  find(id: string, name: string): Runner | undefined {
    return this.runners.find((r) => (id ? id === r.manifest.id || id === r.manifest.name : name === r.manifest.name));
  }

  /** This session's transport: to one replica of a fleet address, the next one each session (fleet.ts). */
  async transport() {
    const replicas = await resolveReplicas(this.address);
    const replica = replicas[this.sessions++ % replicas.length];
    return hostTransport(replica.target, this.options.hostTls, { pingIntervalMs: 15_000, pingTimeoutMs: 5_000 }, replica.servername);
  }

  hello(): ConnectRequest {
    const o = this.options;
    return create(ConnectRequestSchema, { message: { case: "hello", value: {
      runtimeId: o.runtimeId, instanceId: this.instanceId,
      machine: { hostname: hostname(), os: platform(), arch: arch(), osRelease: release() },
      sdk: { language: "typescript", version: VERSION }, labels: o.labels, slots: o.slots,
      runners: this.runners.map((r) => r.manifest), capabilities: this.capabilities,
    } } });
  }

  /** One session: register, then heartbeats, slots and the host's signals until it ends. */
  async session(stop: AbortSignal): Promise<void> {
    const { close, transport } = await this.transport();
    const client = createClient(RuntimeService, transport);
    const ended = new AbortController();
    const outgoing = new AsyncQueue<ConnectRequest>();
    const timers: NodeJS.Timeout[] = [];
    const slots: Promise<void>[] = [];
    try {
      await outgoing.push(this.hello());
      const responses = client.connect(outgoing, { headers: this.headers, signal: ended.signal })[Symbol.asyncIterator]();
      let first;
      try {
        first = await responses.next();
      } catch (err) {
        const e = ConnectError.from(err);
        if (FATAL.has(e.code)) throw new RuntimeRefused(`the host refused this runtime: ${Code[e.code]}: ${e.rawMessage}`);
        throw e;
      }
      if (first.done || first.value.message.case !== "welcome") return;
      const welcome = first.value.message.value;
      this.drained = welcome.drained;
      this.connections++;
      log("info", "runtime connected", { runtime_id: this.options.runtimeId, connection: welcome.connectionId });
      process.stdout.write(`${CONNECTED_PREFIX} ${this.options.runtimeId} ${welcome.connectionId}\n`);
      const interval = welcome.heartbeatInterval ? Number(welcome.heartbeatInterval.seconds) * 1000 + welcome.heartbeatInterval.nanos / 1e6 : 2000;
      const beat = () => void outgoing.push(create(ConnectRequestSchema, { message: { case: "heartbeat", value: {
        freeSlots: Math.max(0, this.options.slots - this.active.size),
        activeRunIds: [...this.active].map((e) => e.request.context?.runId ?? ""),
      } } }));
      beat();
      timers.push(setInterval(beat, Math.max(50, interval)));
      for (let i = 0; i < this.options.slots; i++) slots.push(this.slot(client, welcome.connectionId, ended.signal));
      const onStop = () => {
        void this.leave(outgoing);
      };
      stop.addEventListener("abort", onStop, { once: true });
      try {
        for (;;) {
          const next = await responses.next();
          if (next.done) break;
          if (next.value.message.case === "drain") {
            this.drained = next.value.message.value.drained;
            log("info", "runtime drain", { drained: this.drained, reason: next.value.message.value.reason });
          }
        }
      } catch (err) {
        log("warn", "runtime session ended", { error: ConnectError.from(err).message });
      } finally {
        stop.removeEventListener("abort", onStop);
      }
    } finally {
      for (const t of timers) clearInterval(t);
      ended.abort();
      outgoing.close();
      await Promise.allSettled(slots);
      close();
    }
  }

  /** Graceful stop: tell the host (no new runs), let open runs end for graceMs, stop the rest. */
  async leave(outgoing: AsyncQueue<ConnectRequest>): Promise<void> {
    this.leaving = true;
    await outgoing.push(create(ConnectRequestSchema, { message: { case: "drain", value: { reason: "the runtime is shutting down" } } }));
    const started = Date.now();
    while (this.active.size > 0 && Date.now() - started < this.options.graceMs) await sleep(20);
    for (const exec of this.active) exec.stopWith("cancelled", "the runtime is shutting down");
    const again = Date.now();
    while (this.active.size > 0 && Date.now() - again < 1000) await sleep(20);
    outgoing.close();
  }

  async slot(client: ReturnType<typeof createClient<typeof RuntimeService>>, connectionId: string, signal: AbortSignal): Promise<void> {
    while (!signal.aborted && !this.leaving) {
      if (this.drained) {
        await sleep(50, signal);
        continue;
      }
      const out = new AsyncQueue<ClaimRunRequest>();
      await out.push(create(ClaimRunRequestSchema, { message: { case: "ready", value: { connectionId } } }));
      const responses = client.claimRun(out, { headers: this.headers, signal })[Symbol.asyncIterator]();
      let first: IteratorResult<ClaimRunResponse>;
      try {
        first = await responses.next();
      } catch (err) {
        out.close();
        const code = ConnectError.from(err).code;
        if (code === Code.FailedPrecondition || code === Code.Unauthenticated || signal.aborted) return;
        await sleep(200, signal);
        continue;
      }
      if (first.done || first.value.message.case !== "run") {
        out.close();
        await sleep(50, signal); // (the host gave the slot back)
        continue;
      }
      await this.execute(first.value.message.value, out, responses);
    }
  }

  /** One claimed run, as Server.Run executes a dialed one; the host ending the stream stops it at once. */
  async execute(claimed: ClaimedRun, out: AsyncQueue<ClaimRunRequest>, responses: AsyncIterator<ClaimRunResponse>): Promise<void> {
    const req = clone(RunRequestSchema, claimed.request!);
    req.hostApiEndpoint = this.address;
    const hostEnded = new AbortController();
    const watcher = (async () => {
      try {
        while (!(await responses.next()).done);
      } catch {
        // (cancelled, deadline, connection lost)
      }
      hostEnded.abort();
    })();
    const send = (result: ReturnType<typeof results.completed>) =>
      out.push(create(ClaimRunRequestSchema, { message: { case: "response", value: create(RunResponseSchema, { result }) } }));
    const runner = this.find(req.runnerId, req.runnerName);
    if (!runner || !req.context?.runId) {
      const failed = results.failed("runner.unavailable", `this runtime serves no runner '${req.runnerId}'`, { retryable: true });
      failed.runId = req.context?.runId ?? "";
      failed.sequence = 1n;
      await send(failed);
    } else {
      const transport = this.hosts.get(this.address);
      const exec = new Execution(runner, req, hostEnded.signal, transport);
      this.active.add(exec);
      try {
        for await (const result of exec.results((e) => runControl(e, transport))) await send(result);
      } finally {
        this.active.delete(exec);
      }
    }
    out.close();
    await Promise.race([watcher, sleep(5000)]);
  }
}

/** Serves the runners by dialing the host at `address` until `stop` aborts (then drains); reconnects with backoff. */
export async function connect(runners: Runner[], address: string, options: ConnectOptions = {}, stop: AbortSignal = new AbortController().signal): Promise<void> {
  const key = options.key ?? runtimeKeyFromEnv();
  const hostTls = options.hostTls ?? hostTlsFromEnv();
  checkKeyTransport(address, key, hostTls !== undefined);
  const runtime = new Runtime(runners, address, {
    runtimeId: options.runtimeId ?? hostname(), labels: options.labels ?? {}, slots: options.slots ?? 4,
    key, hostTls,
    graceMs: options.graceMs ?? 5000, backoffInitialMs: options.backoffInitialMs ?? 100,
    backoffMaxMs: options.backoffMaxMs ?? 5000, detect: options.detect ?? ["claude", "codex"],
  });
  runtime.capabilities = await detectHarnesses(runtime.options.detect);
  let attempt = 0;
  while (!stop.aborted && !runtime.leaving) {
    const welcomed = runtime.connections;
    try {
      await runtime.session(stop);
    } catch (err) {
      if (err instanceof RuntimeRefused) throw err;
      log("warn", "runtime connection failed", { error: err instanceof Error ? err.message : String(err) });
    }
    if (stop.aborted || runtime.leaving) break;
    if (runtime.connections > welcomed) attempt = 0; // (the host had accepted this session: retry quickly again)
    const delay = backoffDelayMs(attempt++, runtime.options.backoffInitialMs, runtime.options.backoffMaxMs);
    log("info", "runtime reconnecting", { in_ms: Math.round(delay) });
    await sleep(delay, stop);
  }
  runtime.hosts.close();
}
