// Structured interaction limits (the host enforces the same): checking first turns a dropped result
// into an error where the request is built.
import { toBinary } from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import {
  InteractionFieldType,
  InteractionKind,
  type InteractionRequest,
  InteractionRequestSchema,
} from "./gen/agentrunner/v1/common_pb.js";
import { AgentRunnerError } from "./errors.js";

export const INTERACTION_LIMITS = { fields: 50, actions: 20, options: 100, bytes: 256 * 1024, ttlMs: 24 * 3600 * 1000 };

const invalid = (field: string, message: string) => new AgentRunnerError("INVALID_ARGUMENT", message, { metadata: { field } });

function length(value: string, field: string, lo: number, hi: number): void {
  const n = [...value].length;
  if (n < lo || n > hi) throw invalid(field, `${field} must have ${lo}..${hi} characters (got ${n})`);
}

function unique(ids: string[], what: string): void {
  const dup = ids.find((id, i) => ids.indexOf(id) !== i);
  if (dup !== undefined) throw invalid(what, `${what} id '${dup}' is used twice`);
}

const CHOICE = [InteractionFieldType.SELECT, InteractionFieldType.MULTISELECT];

/** Throws an AgentRunnerError (INVALID_ARGUMENT naming the field, or PAYLOAD_TOO_LARGE). */
export function checkInteraction(req: InteractionRequest, now = new Date()): void {
  const L = INTERACTION_LIMITS;
  length(req.interactionId, "interaction_id", 1, 255);
  length(req.title, "title", 1, 1000);
  length(req.description, "description", 0, 10000);
  length(req.fallbackText, "fallback_text", 1, 20000);
  if (req.fields.length > L.fields) throw invalid("fields", `an interaction has at most ${L.fields} fields (got ${req.fields.length})`);
  if (req.actions.length > L.actions) throw invalid("actions", `an interaction has at most ${L.actions} actions (got ${req.actions.length})`);
  req.fields.forEach((f, i) => {
    const where = `fields[${i}]`;
    length(f.id, `${where}.id`, 1, 128);
    length(f.label, `${where}.label`, 1, 512);
    if (f.type === InteractionFieldType.UNSPECIFIED) throw invalid(`${where}.type`, `${where} ('${f.id}') has no type`);
    if (f.options.length > L.options) throw invalid(`${where}.options`, `${where} has ${f.options.length} options; at most ${L.options}`);
    if (CHOICE.includes(f.type) && f.options.length === 0) throw invalid(where, `${where} ('${f.id}') is a select field without options`);
    f.options.forEach((o, j) => {
      length(o.value, `${where}.options[${j}].value`, 1, 512);
      length(o.label, `${where}.options[${j}].label`, 1, 512);
    });
    unique(f.options.map((o) => o.value), `${where}.option`);
  });
  unique(req.fields.map((f) => f.id), "field");
  req.actions.forEach((a, i) => {
    length(a.id, `actions[${i}].id`, 1, 128);
    length(a.label, `actions[${i}].label`, 1, 512);
  });
  unique(req.actions.map((a) => a.id), "action");
  if (req.kind === InteractionKind.CONFIRMATION && req.actions.length === 0) throw invalid("actions", "a confirmation needs at least one action");
  if (req.kind === InteractionKind.CHOICE && req.actions.length === 0 && !req.fields.some((f) => CHOICE.includes(f.type))) {
    throw invalid("actions", "a choice needs actions or a select field");
  }
  if (req.expiresAt) {
    const left = timestampDate(req.expiresAt).getTime() - now.getTime();
    if (left <= 0) throw invalid("expires_at", "expires_at is in the past");
    if (left > L.ttlMs) throw invalid("expires_at", "expires_at is more than 24 hours ahead");
  }
  const size = toBinary(InteractionRequestSchema, req).length;
  if (size > L.bytes) throw new AgentRunnerError("PAYLOAD_TOO_LARGE", `the interaction is ${size} bytes serialized; at most ${L.bytes}`);
}
