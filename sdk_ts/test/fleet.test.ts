// One address for a fleet (fleet.ts): the host transport balances round robin over several replicas and
// skips one whose health says it is not serving; a runtime's sessions take turns on the replicas.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { createClient } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { Health, HealthCheckResponse_ServingStatus as Serving } from "../src/gen/grpc/health/v1/health_pb.js";
import { FleetAddressError, resolveReplicas } from "../src/fleet.js";
import { HostTransports } from "../src/host.js";
import { checkKeyTransport } from "../src/index.js";

interface Replica {
  port: number;
  calls: number;
  status: Serving;
  close: () => void;
}

/** A gRPC server with only the health service: Check counts its calls, Watch follows `status`. */
async function replica(): Promise<Replica> {
  const r: Replica = { port: 0, calls: 0, status: Serving.SERVING, close: () => undefined };
  const handler = connectNodeAdapter({
    routes: (router) =>
      router.service(Health, {
        check: () => (r.calls++, { status: r.status }),
        async *watch(_req, ctx) {
          let last: Serving | undefined;
          while (!ctx.signal.aborted) {
            if (r.status !== last) yield { status: (last = r.status) };
            await new Promise((resolve) => setTimeout(resolve, 20));
          }
        },
        list: () => ({ statuses: {} }),
      }),
  });
  const server = http2.createServer(handler);
  const sessions = new Set<http2.ServerHttp2Session>();
  server.on("session", (s) => (sessions.add(s), s.on("close", () => sessions.delete(s))));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  r.port = (server.address() as AddressInfo).port;
  r.close = () => (sessions.forEach((s) => s.destroy()), server.close());
  return r;
}

async function checks(client: ReturnType<typeof createClient<typeof Health>>, n: number) {
  for (let i = 0; i < n; i++) await client.check({ service: "" }, { timeoutMs: 10_000 });
}

test("the host transport balances round robin over a fleet and skips a draining replica", async () => {
  const [a, b, c] = [await replica(), await replica(), await replica()];
  const hosts = new HostTransports(undefined);
  try {
    // (one entry by name; the list is what a host advertises as host_api_endpoint)
    const client = createClient(Health, hosts.get(`127.0.0.1:${a.port}, 127.0.0.1:${b.port},localhost:${c.port}`));
    await checks(client, 30);
    assert.deepEqual([a.calls, b.calls, c.calls], [10, 10, 10]);
    // a replica reporting NOT_SERVING (draining) gets no new call once its health watch has said so
    b.status = Serving.NOT_SERVING;
    const deadline = Date.now() + 10_000;
    for (let before = -1; before !== b.calls; ) {
      assert.ok(Date.now() < deadline, "the draining replica still gets calls after 10 s");
      before = b.calls;
      await checks(client, 6);
    }
    const [aBefore, bBefore, cBefore] = [a.calls, b.calls, c.calls];
    await checks(client, 20);
    assert.deepEqual([a.calls - aBefore, b.calls - bBefore, c.calls - cBefore], [10, 0, 10]);
  } finally {
    hosts.close();
    [a, b, c].forEach((r) => r.close());
  }
});

test("a dns target and a list name their replicas; a bad list is one clear error", async () => {
  assert.deepEqual(await resolveReplicas(" 10.0.0.1:1, [::1]:2,"), [{ target: "10.0.0.1:1" }, { target: "[::1]:2" }]);
  assert.deepEqual(await resolveReplicas("10.0.0.1:5"), [{ target: "10.0.0.1:5" }]);
  const named = await resolveReplicas("dns:///localhost:7");
  assert.ok(named.length >= 1 && named.every((r) => r.servername === "localhost" && r.target.endsWith(":7")), JSON.stringify(named));
  await assert.rejects(resolveReplicas("10.0.0.1:1,10.0.0.2"), (e) => e instanceof FleetAddressError && /'10.0.0.2' is not host:port/.test(e.message));
  await assert.rejects(resolveReplicas("dns:///no-such-host.invalid:5"), /does not resolve/);
  assert.doesNotThrow(() => checkKeyTransport("127.0.0.1:1,localhost:2", "arr_k", false, {}));
  assert.throws(() => checkKeyTransport("127.0.0.1:1,192.0.2.1:2", "arr_k", false, {}), /loopback/);
});
