// The runner kit over real gRPC: the stream grammar, failures as results, config validation, host
// call etiquette and error decoding, cancel signals and the deadline.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { create, type JsonObject } from "@bufbuild/protobuf";
import { durationFromMs, timestampFromMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type HandlerContext } from "@connectrpc/connect";
import { connectNodeAdapter, createGrpcTransport } from "@connectrpc/connect-node";
import {
  AgentRunnerError, checkInteraction, defineRunner, resultType, results, RunFailure, startServer, v1, validateConfig,
} from "../src/index.js";
import type { Run } from "../src/run.js";

const manifest = {
  id: "plugin:test/engine/default",
  label: "engine test",
  capabilities: { streaming: true, interrupt: true },
  configSchema: [{ name: "prefix", type: v1.ConfigFieldType.STRING, defaultValue: { kind: { case: "stringValue" as const, value: "> " } } }],
};

type RunFn = (run: Run) => AsyncIterable<v1.RunResult>;

async function listen(routes: Parameters<typeof connectNodeAdapter>[0]["routes"]): Promise<{ endpoint: string; close: () => void }> {
  const server = http2.createServer(connectNodeAdapter({ grpc: true, connect: false, grpcWeb: false, routes }));
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on("session", (s) => sessions.add(s));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const close = () => {
    server.close();
    for (const s of sessions) s.destroy();
  };
  return { endpoint: `127.0.0.1:${(server.address() as AddressInfo).port}`, close };
}

async function runOnce(fn: RunFn, opts: { endpoint?: string; deadlineMs?: number; config?: JsonObject } = {}) {
  const server = await startServer([defineRunner({ manifest, run: fn })]);
  const client = createClient(v1.RunnerService, createGrpcTransport({ baseUrl: `http://${server.address}` }));
  const context = create(v1.RunContextSchema, {
    runId: "run-1",
    input: { text: "hi" },
    config: opts.config,
    context: { availableApis: { historyPage: true } },
    runtime: { traceId: "0af7651916cd43dd8448eb211c80319c", deadlineAt: timestampFromMs(Date.now() + (opts.deadlineMs ?? 10_000)) },
  });
  const out: v1.RunResult[] = [];
  let error: unknown;
  try {
    for await (const r of client.run({ runnerId: manifest.id, context, runToken: "tok-1", hostApiEndpoint: opts.endpoint ?? "" })) {
      out.push(r.result!);
    }
  } catch (err) {
    error = err;
  } finally {
    await server.close(100);
  }
  return { results: out, error, types: out.map(resultType) };
}

function grammar(results: v1.RunResult[]): void {
  results.forEach((r, i) => {
    assert.equal(r.sequence, BigInt(i + 1));
    assert.equal(r.runId, "run-1");
    assert.ok(r.timestamp);
  });
  assert.ok(["runCompleted", "runFailed"].includes(results.at(-1)!.payload.case ?? ""), "a terminal result comes last");
}

const failure = (results: v1.RunResult[]) => {
  const last = results.at(-1)!;
  return last.payload.case === "runFailed" ? last.payload.value : undefined;
};

test("the grammar is enforced: numbering, one terminal, open tool calls closed, nothing after the end", async () => {
  const { results: got, error, types } = await runOnce(async function* (run) {
    yield results.delta(`${run.config.prefix}${run.text}`);
    yield results.toolStarted("call-1", "search", { q: "x" });
    yield results.completed("done");
    yield results.delta("after the end");
  });
  assert.equal(error, undefined);
  grammar(got);
  assert.deepEqual(types, ["message.delta", "tool.call.started", "tool.call.completed", "run.completed"]);
  assert.equal(got[0].payload.value && "text" in got[0].payload.value ? got[0].payload.value.text : "", "> hi");
  const closer = got[2].payload.case === "toolCallCompleted" ? got[2].payload.value : undefined;
  assert.equal(closer?.errorCode, "runner.incomplete");
});

test("failures end the stream with run.failed, never a gRPC error", async () => {
  const cases: [string, RunFn, string | undefined][] = [
    ["returns", async function* () {}, undefined],
    ["throws", async function* () { throw new Error("boom"); }, "runner.exception"],
    ["RunFailure", async function* () { throw new RunFailure("runner.error", "controlled"); }, "runner.error"],
    ["host error", async function* () { throw new AgentRunnerError("UNAUTHORIZED", "no"); }, "unauthorized"],
  ];
  for (const [name, fn, code] of cases) {
    const { results: got, error } = await runOnce(fn);
    assert.equal(error, undefined, name);
    grammar(got);
    assert.equal(failure(got)?.code, code, name);
    assert.ok(!failure(got)?.message.includes("    at "), `${name}: no stack trace reaches the host`);
  }
});

test("config is validated against the schema before run()", async () => {
  let called = false;
  const { results: got } = await runOnce(async function* () { called = true; }, { config: { prefix: 5 } });
  assert.equal(called, false);
  assert.equal(failure(got)?.code, "runner.config_invalid");
  assert.equal(failure(got)?.details?.field, "prefix");
  assert.throws(() => validateConfig(manifest.configSchema.map((f) => create(v1.ConfigFieldSchema, { ...f, required: true, defaultValue: undefined })), {}), /is required/);
  // a field's pattern: the same rule as the Python and Go kits and the host's config check
  const id = create(v1.ConfigFieldSchema, { name: "id", type: v1.ConfigFieldType.STRING, pattern: "^[A-Za-z0-9_.-]+$" });
  assert.deepEqual(validateConfig([id], { id: "flow-1.v2" }), { id: "flow-1.v2" });
  assert.throws(() => validateConfig([id], { id: "a/b" }), /'a\/b' does not match the pattern/);
});

test("host calls carry token, run id, traceparent and a bounded deadline; errors decode ErrorInfo and RetryInfo", async () => {
  const seen: { headers: Headers; timeoutMs?: number }[] = [];
  const host = await listen((router) => router.service(v1.ProxyService, {
    listHistory(_req, ctx: HandlerContext) {
      seen.push({ headers: ctx.requestHeader, timeoutMs: ctx.timeoutMs() });
      if (seen.length === 1) return { items: [{ content: "earlier" }] };
      throw new AgentRunnerError("RATE_LIMITED", "slow down", { retryDelayMs: 2000 }).toConnectError();
    },
  }));
  let decoded: AgentRunnerError | undefined;
  const { results: got } = await runOnce(async function* (run) {
    const page = await run.host.listHistory({});
    yield results.delta(page.items[0].content);
    try {
      await run.host.listHistory({});
    } catch (err) {
      decoded = AgentRunnerError.from(err);
      throw err;
    }
  }, { endpoint: host.endpoint, deadlineMs: 3000 });
  host.close();
  assert.equal(seen.length, 2);
  assert.equal(seen[0].headers.get("x-agentrunner-run-token"), "tok-1");
  assert.equal(seen[0].headers.get("x-agentrunner-run-id"), "run-1");
  assert.match(seen[0].headers.get("traceparent") ?? "", /^00-0af7651916cd43dd8448eb211c80319c-[0-9a-f]{16}-01$/);
  assert.ok(seen[0].timeoutMs !== undefined && seen[0].timeoutMs <= 3000, `deadline ${seen[0].timeoutMs}`);
  assert.equal(decoded?.reason, "RATE_LIMITED");
  assert.equal(decoded?.retryDelayMs, 2000);
  assert.equal(failure(got)?.code, "rate_limited");
  assert.equal(failure(got)?.retryable, true);
});

test("a cancel signal is acknowledged and ends the run with run.failed cancelled after its grace", async () => {
  const acks: v1.ControlAck[] = [];
  let hello: v1.ControlHello | undefined;
  const host = await listen((router) => router.service(v1.ProxyService, {
    async *control(requests) {
      const it = requests[Symbol.asyncIterator]();
      hello = (await it.next()).value?.message.value as v1.ControlHello;
      yield { signal: { case: "welcome", value: { heartbeatInterval: durationFromMs(50) } } };
      yield { signalId: "sig-1", signal: { case: "cancel", value: { reason: "user left", gracePeriod: durationFromMs(100) } } };
      for (;;) {
        const next = await it.next();
        if (next.done) return;
        if (next.value.message.case === "ack") acks.push(next.value.message.value);
      }
    },
  }));
  let reason = "";
  const started = Date.now();
  const { results: got } = await runOnce(async function* (run) {
    reason = await run.cancellation;
    await new Promise((resolve) => run.signal.addEventListener("abort", resolve)); // ignores the signal
  }, { endpoint: host.endpoint });
  host.close();
  grammar(got);
  assert.equal(failure(got)?.code, "cancelled");
  assert.match(failure(got)?.message ?? "", /user left/);
  assert.ok(Date.now() - started < 2000);
  assert.equal(reason, "user left");
  assert.equal(hello?.runId, "run-1");
  assert.equal(hello?.runToken, "tok-1");
  assert.deepEqual(acks.map((a) => [a.signalId, a.accepted]), [["sig-1", true]]);
});

test("the run ends with run.failed deadline_exceeded before its deadline", async () => {
  const deadline = Date.now() + 400;
  const { results: got, error } = await runOnce(async function* (run) {
    await new Promise((resolve) => run.signal.addEventListener("abort", resolve));
    yield results.completed("too late");
  }, { deadlineMs: 400 });
  assert.equal(error, undefined);
  grammar(got);
  assert.equal(failure(got)?.code, "deadline_exceeded");
  assert.ok(Number(got.at(-1)!.timestamp!.seconds) * 1000 <= deadline);
});

test("unknown runners and run ids are typed errors with one ErrorInfo", async () => {
  const server = await startServer([defineRunner({ manifest, run: async function* () {} })]);
  const client = createClient(v1.RunnerService, createGrpcTransport({ baseUrl: `http://${server.address}` }));
  await assert.rejects(client.describeRunner({ runnerId: "plugin:x/y/z" }), (err: unknown) => {
    const e = AgentRunnerError.from(err);
    return e.code === Code.NotFound && e.reason === "NOT_FOUND" && ConnectError.from(err).findDetails(v1.RunnerManifestSchema).length === 0;
  });
  await server.close(100);
});

test("interaction limits", () => {
  const ok = create(v1.InteractionRequestSchema, {
    interactionId: "i1", title: "Deploy?", fallbackText: "reply yes or no", kind: v1.InteractionKind.CONFIRMATION,
    actions: [{ id: "yes", label: "Yes" }],
  });
  checkInteraction(ok);
  const tooMany = create(v1.InteractionRequestSchema, {
    interactionId: "i2", title: "t", fallbackText: "f",
    fields: Array.from({ length: 51 }, (_, i) => ({ id: `f${i}`, label: "l", type: v1.InteractionFieldType.TEXT })),
  });
  assert.throws(() => checkInteraction(tooMany), (e: unknown) => e instanceof AgentRunnerError && e.metadata.field === "fields");
  const late = create(v1.InteractionRequestSchema, { ...ok, interactionId: "i3", expiresAt: timestampFromMs(Date.now() + 25 * 3600e3) });
  assert.throws(() => checkInteraction(late), /24 hours/);
});
