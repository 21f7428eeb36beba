// One run of one runner: the `Run` a runner sees, and the execution that enforces the stream grammar.
import { create, type JsonObject } from "@bufbuild/protobuf";
import { timestampDate, timestampNow } from "@bufbuild/protobuf/wkt";
import type { Transport } from "@connectrpc/connect";
import { StateScope } from "./gen/agentrunner/v1/common_pb.js";
import type { RunContext } from "./gen/agentrunner/v1/context_pb.js";
import type { RunnerManifest } from "./gen/agentrunner/v1/manifest_pb.js";
import type { SteeringInput } from "./gen/agentrunner/v1/proxy_service_pb.js";
import { type RunResult, RunResultSchema } from "./gen/agentrunner/v1/result_pb.js";
import type { RunRequest } from "./gen/agentrunner/v1/runner_service_pb.js";
import { ConfigInvalidError, validateConfig } from "./config.js";
import { AgentRunnerError } from "./errors.js";
import { type HostClient, hostClient } from "./host.js";
import { log } from "./log.js";
import { AsyncQueue } from "./queue.js";
import { completed, failed, isTerminal, RunFailure, toolCompleted } from "./results.js";

/** The kit ends a run this long before deadline_at so its run.failed still reaches the host. */
export const DEADLINE_MARGIN_MS = 100;
/** Grace after a cancel signal that names none. */
export const DEFAULT_CANCEL_GRACE_MS = 1000;

/** What a runner author implements: a manifest and an async generator of results. */
export interface Runner {
  readonly manifest: RunnerManifest;
  run(run: Run): AsyncIterable<RunResult>;
}

interface Stop {
  code: string;
  message: string;
  retryable: boolean;
}

const SCOPES: Record<number, keyof NonNullable<RunContext["state"]>> = {
  [StateScope.CONVERSATION]: "conversation", [StateScope.ACTOR]: "actor", [StateScope.SUBJECT]: "subject",
  [StateScope.RUNNER]: "runner", [StateScope.BINDING]: "binding", [StateScope.WORKSPACE]: "workspace",
};

/** The run as its runner sees it: context, config, host API, control signals and side results. */
export class Run {
  readonly host: HostClient;
  readonly config: JsonObject;
  /** Aborted when the run must stop: the host cancelled, a cancel's grace ended, the deadline, shutdown. */
  readonly signal: AbortSignal;
  /** Resolves with the reason when the host asks the run to stop (before the grace ends). */
  readonly cancellation: Promise<string>;
  deadline: number | undefined;
  cancelReason: string | undefined;
  private readonly steeringQueue = new AsyncQueue<SteeringInput>(64);

  constructor(readonly context: RunContext, config: JsonObject, private readonly exec: Execution) {
    this.config = config;
    this.signal = exec.abort.signal;
    this.host = exec.host;
    this.deadline = context.runtime?.deadlineAt ? timestampDate(context.runtime.deadlineAt).getTime() : undefined;
    this.cancellation = new Promise((resolve) => (exec.resolveCancel = resolve));
  }

  get runId(): string {
    return this.context.runId;
  }

  /** The input's text. */
  get text(): string {
    return this.context.input?.text ?? "";
  }

  /** The host's snapshot of one state scope at run start. */
  state(scope: StateScope): JsonObject {
    const name = SCOPES[scope];
    return (name && (this.context.state?.[name] as JsonObject | undefined)) || {};
  }

  /** Steering inputs the host pushes on the Control stream (manifest: steering). */
  steering(): AsyncIterable<SteeringInput> {
    return this.steeringQueue;
  }

  /** Adds a non-terminal result from outside the generator (a log line, a tool result), in order. */
  emit(result: RunResult): void {
    if (isTerminal(result)) throw new TypeError("yield the terminal result from run() instead of emitting it");
    this.exec.side(result);
  }

  /** @internal */
  pushSteering(item: SteeringInput): void {
    void this.steeringQueue.push(item);
  }
}

/** Runs one RunRequest; iterate results() once. */
export class Execution {
  readonly abort = new AbortController();
  readonly host: HostClient;
  resolveCancel: (reason: string) => void = () => {};
  run: Run | undefined;
  private seq = 0;
  private ended = false;
  private stop: Stop | undefined;
  private readonly openTools = new Map<string, string>();
  private readonly queue = new AsyncQueue<RunResult>(32);
  private readonly timers: NodeJS.Timeout[] = [];
  private wake: () => void = () => {};

  constructor(
    readonly runner: Runner,
    readonly request: RunRequest,
    private readonly callSignal: AbortSignal,
    transport: Transport | undefined,
  ) {
    const ctx = request.context!;
    this.host = hostClient(transport, {
      runId: ctx.runId, runToken: request.runToken, traceId: ctx.runtime?.traceId ?? "",
      deadline: () => this.run?.deadline, ended: () => this.ended, signal: this.abort.signal,
    });
  }

  /** The last sequence number sent (for heartbeats). */
  get sequence(): bigint {
    return BigInt(this.seq);
  }

  /** Ends the run now with run.failed(code) (cancel after grace, deadline, shutdown). */
  stopWith(code: string, message: string, retryable = false): void {
    if (this.stop || this.ended) return;
    this.stop = { code, message, retryable };
    this.abort.abort(new AgentRunnerError(code === "deadline_exceeded" ? "DEADLINE_EXCEEDED" : "RUNTIME_ERROR", message));
    this.wake();
  }

  onCancel(reason: string, graceMs: number | undefined): void {
    if (!this.run || this.run.cancelReason !== undefined) return;
    this.run.cancelReason = reason;
    this.resolveCancel(reason);
    const message = reason ? `cancelled by the host: ${reason}` : "cancelled by the host";
    this.timers.push(setTimeout(() => this.stopWith("cancelled", message), graceMs ?? DEFAULT_CANCEL_GRACE_MS));
  }

  /** Moves the run deadline (welcome, DeadlineSignal) and re-arms the deadline timer. */
  setDeadline(at: number): void {
    if (!this.run) return;
    this.run.deadline = at;
    this.timers.push(setTimeout(() => {
      if (this.run?.deadline === at) this.stopWith("deadline_exceeded", "the run deadline passed", true);
    }, Math.max(0, at - Date.now() - DEADLINE_MARGIN_MS)));
  }

  side(result: RunResult): void {
    if (this.ended) throw new AgentRunnerError("FAILED_PRECONDITION", "the run has ended; no more results can be added");
    void this.queue.push(result);
  }

  private seal(result: RunResult): RunResult {
    const r = create(RunResultSchema, result);
    r.runId = this.request.context!.runId;
    r.sequence = BigInt(++this.seq);
    r.timestamp ??= timestampNow();
    if (r.payload.case === "toolCallStarted") this.openTools.set(r.payload.value.toolCallId, r.payload.value.toolName);
    if (r.payload.case === "toolCallCompleted") this.openTools.delete(r.payload.value.toolCallId);
    if (r.payload.case === undefined) log("warn", "runner emitted a result type this kit does not know", { run_id: r.runId });
    return r;
  }

  private *terminal(result: RunResult): Generator<RunResult> {
    for (const [id, name] of this.openTools) {
      const closer = toolCompleted(id, name);
      if (closer.payload.case === "toolCallCompleted") {
        closer.payload.value.errorCode = "runner.incomplete";
        closer.payload.value.errorMessage = "the run ended before the tool call completed";
      }
      yield this.seal(closer);
    }
    this.ended = true;
    yield this.seal(result);
  }

  private prepare(): RunResult | undefined {
    const ctx = this.request.context!;
    let config: JsonObject;
    try {
      config = validateConfig(this.runner.manifest.configSchema, ctx.config);
    } catch (err) {
      if (!(err instanceof ConfigInvalidError)) throw err;
      return failed("runner.config_invalid", err.message, { details: { field: err.field } });
    }
    this.run = new Run(ctx, config, this);
    if (this.run.deadline !== undefined && this.run.deadline - Date.now() <= DEADLINE_MARGIN_MS) {
      return failed("deadline_exceeded", "the run deadline passed before it started", { retryable: true });
    }
    return undefined;
  }

  private produce(run: Run): void {
    void (async () => {
      try {
        for await (const item of this.runner.run(run)) {
          if (this.ended || this.abort.signal.aborted) break;
          await this.queue.push(item);
          if (isTerminal(item)) break;
        }
        this.queue.close();
      } catch (err) {
        this.queue.close(err ?? new Error("runner threw"));
      }
    })();
  }

  /** The results, ending with exactly one terminal result (nothing once the host cancelled the call). */
  async *results(onControl?: (exec: Execution) => Promise<void>): AsyncGenerator<RunResult> {
    const early = this.prepare();
    if (early || !this.run) {
      yield* this.terminal(early!);
      return;
    }
    const run = this.run;
    const hostGone = () => this.stopWith("cancelled", "the host cancelled the run call");
    this.callSignal.addEventListener("abort", hostGone, { once: true });
    if (run.deadline !== undefined) this.setDeadline(run.deadline);
    const caps = this.runner.manifest.capabilities;
    const control = (caps?.interrupt || caps?.steering) && this.request.hostApiEndpoint && onControl ? onControl(this) : undefined;
    this.produce(run);
    const stopped = new Promise<void>((resolve) => (this.wake = resolve));
    try {
      for (;;) {
        const next = await Promise.race([this.queue.next(), stopped.then(() => undefined)]);
        if (next === undefined || next.done) break;
        if (isTerminal(next.value)) {
          yield* this.terminal(next.value);
          return;
        }
        yield this.seal(next.value);
      }
      if (this.callSignal.aborted) return;
      yield* this.terminal(this.final());
    } finally {
      this.ended = true;
      this.callSignal.removeEventListener("abort", hostGone);
      for (const t of this.timers) clearTimeout(t);
      if (!this.abort.signal.aborted) this.abort.abort(new AgentRunnerError("FAILED_PRECONDITION", "the run has ended"));
      this.queue.close();
      await control?.catch(() => undefined);
    }
  }

  private final(): RunResult {
    if (this.stop) return failed(this.stop.code, this.stop.message, { retryable: this.stop.retryable });
    const err = this.queue.failure;
    if (err === undefined) return completed();
    if (err instanceof RunFailure) return failed(err.code, err.message, { retryable: err.retryable, details: err.details });
    if (err instanceof AgentRunnerError) {
      return failed(err.specCode, err.message, { retryable: err.retryable, details: { reason: err.reason } });
    }
    log("error", "runner threw", { run_id: this.request.context!.runId, error: String(err), stack: (err as Error)?.stack });
    const text = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
    return failed("runner.exception", text.length > 500 ? text.slice(0, 499) + "…" : text);
  }
}
