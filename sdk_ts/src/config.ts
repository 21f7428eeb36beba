// Validation of RunContext.config against the manifest's config_schema, before the run starts.
import { toJson, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { ConfigFieldType, type ConfigField } from "./gen/agentrunner/v1/manifest_pb.js";

/** A config value that does not match the schema; `field` names it. */
export class ConfigInvalidError extends Error {
  override name = "ConfigInvalidError";
  constructor(readonly field: string, problem: string) {
    super(`config field '${field}': ${problem}`);
  }
}

const T = ConfigFieldType;
const STRINGS = new Set([T.STRING, T.TEXT, T.SECRET, T.SELECT, T.LLM_MODEL_SELECTOR, T.RERANK_MODEL_SELECTOR]);
const STRING_LISTS = new Set([T.STRING_LIST, T.KNOWLEDGE_BASE_MULTI_SELECTOR]);
const isStringList = (v: JsonValue) => Array.isArray(v) && v.every((x) => typeof x === "string");
const kind = (v: JsonValue) => (v === null ? "null" : Array.isArray(v) ? "list" : typeof v);

function check(field: ConfigField, value: JsonValue): JsonValue {
  const bad = (problem: string) => new ConfigInvalidError(field.name, problem);
  const t = field.type;
  if (STRINGS.has(t)) {
    if (typeof value !== "string") throw bad(`expected a string, got ${kind(value)}`);
    const options = field.options.map((o) => o.name);
    if (t === T.SELECT && options.length && !options.includes(value)) throw bad(`'${value}' is not one of ${options.join(", ")}`);
    if (field.pattern && !new RegExp(field.pattern, "u").test(value)) {
      throw bad(`${t === T.SECRET ? "the value" : `'${value}'`} does not match the pattern ${field.pattern}`);
    }
  } else if (t === T.INTEGER) {
    if (typeof value !== "number" || !Number.isInteger(value)) throw bad(`expected an integer, got ${JSON.stringify(value)}`);
  } else if (t === T.NUMBER) {
    if (typeof value !== "number") throw bad(`expected a number, got ${kind(value)}`);
  } else if (t === T.BOOLEAN) {
    if (typeof value !== "boolean") throw bad(`expected a boolean, got ${kind(value)}`);
  } else if (STRING_LISTS.has(t)) {
    if (!isStringList(value)) throw bad("expected a list of strings");
  } else if (t === T.PROMPT_EDITOR) {
    const ok = Array.isArray(value) && value.every((m) => m !== null && typeof m === "object" && !Array.isArray(m) && typeof m.role === "string");
    if (!ok) throw bad("expected a list of {role, content} messages");
  } else if (t === T.MODEL_FALLBACK_SELECTOR) {
    const ok = typeof value === "string" || isStringList(value) ||
      (value !== null && typeof value === "object" && !Array.isArray(value) && (value.primary === undefined || typeof value.primary === "string"));
    if (!ok) throw bad("expected a model id, a list of ids or {primary, fallbacks}");
  }
  return value;
}

/** The config with defaults applied and declared types enforced; throws ConfigInvalidError. */
export function validateConfig(schema: readonly ConfigField[], config: JsonObject | undefined): JsonObject {
  const values: JsonObject = { ...(config ?? {}) };
  for (const field of schema) {
    const value = values[field.name];
    if (value === undefined || value === null) {
      const fallback = field.defaultValue ? toJson(ValueSchema, field.defaultValue) : null;
      if (fallback !== null) {
        values[field.name] = check(field, fallback);
        continue;
      }
      if (field.required) throw new ConfigInvalidError(field.name, `is required (${T[field.type].toLowerCase().replace(/_/g, "-")})`);
      delete values[field.name];
      continue;
    }
    values[field.name] = check(field, value);
  }
  return values;
}
