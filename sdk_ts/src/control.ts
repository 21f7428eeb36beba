// The run's Control stream: hello first, an ack for every signal (written before the signal acts),
// heartbeats at the welcome's interval, then cancel, steering and deadline signals. A host without the
// stream (UNIMPLEMENTED) is fine: the run goes on without it.
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { durationMs, timestampDate } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError, createClient, type Transport } from "@connectrpc/connect";
import { type ControlRequest, ControlRequestSchema, ProxyService } from "./gen/agentrunner/v1/proxy_service_pb.js";
import { RUN_ID_HEADER, RUN_TOKEN_HEADER, traceparent } from "./host.js";
import { log } from "./log.js";
import { AsyncQueue } from "./queue.js";
import type { Execution } from "./run.js";

export const DEFAULT_HEARTBEAT_MS = 10_000;

export async function runControl(exec: Execution, transport: Transport): Promise<void> {
  const run = exec.run!;
  const caps = exec.runner.manifest.capabilities;
  const accepts = ["deadline", ...(caps?.interrupt ? ["cancel"] : []), ...(caps?.steering ? ["steering"] : [])];
  const out = new AsyncQueue<ControlRequest>();
  type Init = Exclude<MessageInitShape<typeof ControlRequestSchema>, ControlRequest>["message"];
  const send = (message: Init) => void out.push(create(ControlRequestSchema, { message }));
  const headers = new Headers({ [RUN_TOKEN_HEADER]: exec.request.runToken, [RUN_ID_HEADER]: run.runId });
  const tp = traceparent(run.context.runtime?.traceId ?? "");
  if (tp) headers.set("traceparent", tp);
  // The stream may outlive the run deadline a little: the last ack and run.failed come late.
  const timeoutMs = run.deadline === undefined ? undefined : Math.max(1, run.deadline - Date.now() + 5000);
  let beat: NodeJS.Timeout | undefined;
  send({ case: "hello", value: { runId: run.runId, runToken: exec.request.runToken, accepts } });
  try {
    const client = createClient(ProxyService, transport);
    for await (const msg of client.control(out, { headers, signal: exec.abort.signal, timeoutMs })) {
      const signal = msg.signal;
      if (signal.case === "welcome") {
        if (signal.value.deadlineAt) exec.setDeadline(timestampDate(signal.value.deadlineAt).getTime());
        const every = signal.value.heartbeatInterval ? Math.max(durationMs(signal.value.heartbeatInterval), 50) : DEFAULT_HEARTBEAT_MS;
        beat ??= setInterval(() => send({ case: "heartbeat", value: { lastSequence: exec.sequence } }), every);
        continue;
      }
      let accepted = true;
      let detail = "";
      if (signal.case === "steering" && !caps?.steering) [accepted, detail] = [false, "runner does not accept steering"];
      else if (signal.case !== "cancel" && signal.case !== "steering" && signal.case !== "deadline") [accepted, detail] = [false, "unknown signal"];
      if (msg.signalId) send({ case: "ack", value: { signalId: msg.signalId, accepted, detail } });
      if (!accepted) continue;
      if (signal.case === "cancel") {
        exec.onCancel(signal.value.reason, signal.value.gracePeriod ? Math.max(durationMs(signal.value.gracePeriod), 0) : undefined);
      } else if (signal.case === "steering") {
        run.pushSteering(signal.value);
      } else if (signal.case === "deadline" && signal.value.deadlineAt) {
        exec.setDeadline(timestampDate(signal.value.deadlineAt).getTime());
      }
    }
  } catch (err) {
    const code = ConnectError.from(err).code;
    if (exec.abort.signal.aborted || code === Code.Canceled) return;
    if (code === Code.Unimplemented) log("info", "host has no control stream; continuing without it", { run_id: run.runId });
    else log("warn", "control stream ended", { run_id: run.runId, code: Code[code], error: ConnectError.from(err).rawMessage });
  } finally {
    if (beat) clearInterval(beat);
    out.close();
  }
}
