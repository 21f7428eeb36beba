// One address for a fleet of host replicas (the Python SDK's agentrunner.fleet, for the TS kit).
//
// A host address may be one host:port (used as it is), several comma-separated (h1:50443,h2:50443)
// or a dns:///name:port target whose name resolves to several addresses (a headless service). For the
// last two, FleetTransport spreads calls round robin over the replicas, skipping one whose gRPC health
// service says it is not serving (draining, stopped) or that refused a connection within the last
// second; each call (a stream too) stays on the replica it started on. Every ProxyService call works on
// any replica, so the kit's host channel takes such an address as it is. A runtime's session is
// different: its ClaimRun streams belong to the replica holding its Connect stream, so each session
// dials one replica (resolveReplicas), and the next session the next one.
import { lookup } from "node:dns/promises";
import { isIP } from "node:net";
import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { Health, HealthCheckResponse_ServingStatus as Serving } from "./gen/grpc/health/v1/health_pb.js";

/** An address list the kit cannot use (an entry without a port, a name that does not resolve). */
export class FleetAddressError extends Error {}

/** Whether `address` names several replicas (a comma-separated list or a dns: target). */
export function isFleetAddress(address: string): boolean {
  return address.includes(",") || address.trim().startsWith("dns:");
}

function splitEntry(entry: string): [string, string] {
  const e = entry.trim();
  const m = /^\[([^\]]+)\]:(\d+)$/.exec(e) ?? /^([^:\[\]]+):(\d+)$/.exec(e);
  if (!m) throw new FleetAddressError(`'${e}' is not host:port (in a comma-separated list of replicas)`);
  return [m[1], m[2]];
}

/** One replica: the host:port to dial, and the name TLS checks when the target is a resolved address. */
export interface Replica {
  target: string;
  servername?: string;
}

const join = (ip: string, port: string) => (isIP(ip) === 6 ? `[${ip}]:${port}` : `${ip}:${port}`);

/** The replicas `address` names now: a list's entries as written, a dns:/// name's addresses. */
export async function resolveReplicas(address: string): Promise<Replica[]> {
  address = address.trim();
  if (!isFleetAddress(address)) return [{ target: address }];
  if (!address.startsWith("dns:")) {
    return address.split(",").filter((e) => e.trim()).map((e) => ({ target: join(...splitEntry(e)) }));
  }
  const [host, port] = splitEntry(address.slice(address.lastIndexOf("/") + 1));
  let found: { address: string }[];
  try {
    found = isIP(host) ? [{ address: host }] : await lookup(host, { all: true });
  } catch (err) {
    throw new FleetAddressError(`replica address ${host}:${port} does not resolve: ${(err as Error).message}`);
  }
  return [...new Set(found.map((f) => f.address))].map((ip) => ({ target: join(ip, port), servername: host }));
}

interface Member {
  transport: Transport;
  close: () => void;
  serving: boolean;
  downUntil: number;
}

type AnyCall = (...args: unknown[]) => Promise<unknown>;

/** A Transport over every replica of a fleet address: round robin over the healthy ones. */
export class FleetTransport implements Transport {
  private members?: Promise<Member[]>;
  private next = 0;
  private readonly stopped = new AbortController();

  constructor(
    private readonly address: string,
    private readonly make: (replica: Replica) => { transport: Transport; close: () => void },
  ) {}

  readonly unary = ((...args: unknown[]) => this.call("unary", args)) as Transport["unary"];
  readonly stream = ((...args: unknown[]) => this.call("stream", args)) as Transport["stream"];

  private async call(kind: "unary" | "stream", args: unknown[]): Promise<unknown> {
    const member = await this.pick();
    try {
      return await (member.transport[kind] as AnyCall)(...args);
    } catch (err) {
      if (ConnectError.from(err).code === Code.Unavailable) member.downUntil = Date.now() + 1000;
      throw err;
    }
  }

  private async pick(): Promise<Member> {
    this.members ??= resolveReplicas(this.address).then((replicas) => replicas.map((r) => this.watch(r)));
    const members = await this.members;
    const now = Date.now();
    for (let i = 0; i < members.length; i++) {
      const m = members[this.next++ % members.length];
      if (m.serving && m.downUntil <= now) return m;
    }
    return members[this.next++ % members.length]; // (none looks healthy: try one anyway)
  }

  /** The replica's member, kept up to date by a gRPC health Watch (re-opened a second after it breaks). */
  private watch(replica: Replica): Member {
    const member: Member = { ...this.make(replica), serving: true, downUntil: 0 };
    const health = createClient(Health, member.transport);
    const signal = this.stopped.signal;
    void (async () => {
      while (!signal.aborted) {
        try {
          for await (const res of health.watch({ service: "" }, { signal })) member.serving = res.status === Serving.SERVING;
        } catch (err) {
          // (a host without the health service counts as serving, as gRPC's clients count it)
          member.serving = ConnectError.from(err).code === Code.Unimplemented;
        }
        if (!signal.aborted) await new Promise((resolve) => setTimeout(resolve, 1000).unref());
      }
    })();
    return member;
  }

  close(): void {
    this.stopped.abort();
    void this.members?.then((members) => members.forEach((m) => m.close()), () => undefined);
  }
}
