// Builders for the result types (PROTOCOL_V1 §7 plus run.log and interaction.requested). The kit
// fills run_id, sequence and timestamp when a result is streamed.
import { create, fromJson, type JsonObject, type JsonValue, type MessageInitShape } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { randomBytes } from "node:crypto";
import type { InteractionRequest, StateScope } from "./gen/agentrunner/v1/common_pb.js";
import type { Timestamp } from "@bufbuild/protobuf/wkt";
import type { UsageSchema } from "./gen/agentrunner/v1/common_pb.js";
import { type RunResult, RunResultSchema, type RunLogLevel } from "./gen/agentrunner/v1/result_pb.js";
import { AgentRunnerError } from "./errors.js";

export type { RunResult };
/** Optional envelope fields of a result (run_id, sequence and timestamp are the kit's). */
export interface Envelope {
  usage?: MessageInitShape<typeof UsageSchema>;
  metadata?: JsonObject;
  timestamp?: Timestamp;
}

/** `RunResult.payload` case -> spec type string (PROTOCOL_V1 §7.3). */
export const RESULT_TYPES = {
  messageDelta: "message.delta",
  messageCompleted: "message.completed",
  toolCallStarted: "tool.call.started",
  toolCallCompleted: "tool.call.completed",
  artifactCreated: "artifact.created",
  stateUpdated: "state.updated",
  actionRequested: "action.requested",
  runCompleted: "run.completed",
  runFailed: "run.failed",
  runLog: "run.log",
  interactionRequested: "interaction.requested",
} as const;

/** The spec type of a result, or undefined for a payload this reader does not know (ignore it). */
export function resultType(result: RunResult): string | undefined {
  const kind = result.payload.case;
  return kind === undefined ? undefined : RESULT_TYPES[kind];
}

export function isTerminal(result: RunResult): boolean {
  return result.payload.case === "runCompleted" || result.payload.case === "runFailed";
}

/** A fresh opaque id such as `msg_3f2a9c0d1e4b5a6f`. */
export function newId(prefix = "call"): string {
  return `${prefix}_${randomBytes(8).toString("hex")}`;
}

type Payload = Exclude<MessageInitShape<typeof RunResultSchema>, RunResult>["payload"];

function result(payload: Payload, envelope: Envelope = {}): RunResult {
  return create(RunResultSchema, { ...envelope, payload });
}

/** message.delta: `text` is the increment since the previous delta of the same message. */
export function delta(text: string, opts: { messageId?: string; cumulativeText?: string } & Envelope = {}): RunResult {
  const { messageId = "", cumulativeText, ...envelope } = opts;
  return result({ case: "messageDelta", value: { text, messageId, cumulativeText } }, envelope);
}

/** message.completed: one complete assistant message (a run may send several). */
export function message(content: string, opts: { messageId?: string } & Envelope = {}): RunResult {
  const { messageId = "", ...envelope } = opts;
  return result({ case: "messageCompleted", value: { message: { content, messageId } } }, envelope);
}

/** tool.call.started; pair it with toolCompleted of the same id. */
export function toolStarted(toolCallId: string, toolName: string, parameters: JsonObject = {}): RunResult {
  if (!toolCallId || !toolName) throw new TypeError("toolStarted needs a toolCallId and a toolName");
  return result({ case: "toolCallStarted", value: { toolCallId, toolName, parameters } });
}

/** tool.call.completed; an error fills error_code (spec code of an AgentRunnerError) and message. */
export function toolCompleted(toolCallId: string, toolName: string, preview: JsonObject = {}, error?: unknown): RunResult {
  let errorCode = "";
  let errorMessage = "";
  if (error !== undefined) {
    const e = error instanceof AgentRunnerError ? error : undefined;
    errorCode = e?.specCode ?? "runtime_error";
    errorMessage = error instanceof Error ? error.message : String(error);
  }
  return result({ case: "toolCallCompleted", value: { toolCallId, toolName, resultPreview: preview, errorCode, errorMessage } });
}

/** state.updated: asks the host to write host-owned state (`null` deletes the key). */
export function state(scope: StateScope, key: string, value: JsonValue): RunResult {
  if (!scope) throw new TypeError("state scope must be set");
  if (key.length < 1 || key.length > 256) throw new TypeError("state key must have 1..256 characters");
  return result({ case: "stateUpdated", value: { scope, key, value: fromJson(ValueSchema, value) } });
}

/** run.log: a log line kept in the run ledger. */
export function log(level: RunLogLevel, text: string, fields?: JsonObject): RunResult {
  return result({ case: "runLog", value: { level, text, fields } });
}

/** interaction.requested around a request (check it first with checkInteraction). */
export function interaction(request: InteractionRequest): RunResult {
  return result({ case: "interactionRequested", value: { interaction: request } });
}

/** run.completed (terminal), with the final message when `content` is given. */
export function completed(content?: string, opts: { messageId?: string; finishReason?: string } & Envelope = {}): RunResult {
  const { messageId = "", finishReason = "stop", ...envelope } = opts;
  const msg = content === undefined ? undefined : { content, messageId };
  return result({ case: "runCompleted", value: { finishReason, message: msg } }, envelope);
}

/** run.failed (terminal): `code` like `runner.error`; the message must not hold a stack trace. */
export function failed(code: string, message: string, opts: { retryable?: boolean; details?: JsonObject } & Envelope = {}): RunResult {
  if (!code) throw new TypeError("failed needs a code");
  const { retryable = false, details, ...envelope } = opts;
  return result({ case: "runFailed", value: { code, message, retryable, details } }, envelope);
}

/** Thrown (or returned by a runner's generator as its error) to end the run with its own code. */
export class RunFailure extends Error {
  override name = "RunFailure";
  constructor(readonly code: string, message: string, readonly retryable = false, readonly details?: JsonObject) {
    super(message);
  }
}
