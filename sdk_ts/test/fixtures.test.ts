// The language-neutral fixtures (tests/fixtures/) decode strictly with the generated TypeScript
// contract and re-encode to the same JSON, exactly as tests/contract/test_fixtures.py checks for Python.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { fromBinary, fromJson, toBinary, toJson, type JsonValue } from "@bufbuild/protobuf";
import {
  InlineMode,
  RunContextSchema,
  RunResultSchema,
} from "../src/gen/agentrunner/v1/index.js";

// dist/test/ -> repository root
const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const fixtures = join(root, "tests", "fixtures");

function load(kind: string): [string, JsonValue][] {
  const dir = join(fixtures, kind);
  const names = readdirSync(dir).filter((n) => n.endsWith(".json")).sort();
  assert.ok(names.length > 0, `no fixtures in ${dir}`);
  return names.map((n) => [n.slice(0, -5), JSON.parse(readFileSync(join(dir, n), "utf8")) as JsonValue]);
}

const camel = (snake: string) => snake.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());

test("one result fixture per payload member", () => {
  const members = RunResultSchema.oneofs.find((o) => o.name === "payload")!.fields.map((f) => f.name);
  assert.deepEqual(load("results").map(([stem]) => stem).sort(), [...members].sort());
});

for (const [stem, data] of load("results")) {
  test(`result fixture ${stem}`, () => {
    const result = fromJson(RunResultSchema, data); // strict: unknown fields throw
    assert.equal(result.payload.case, camel(stem));
    assert.ok(result.runId && result.sequence >= 1n);
    assert.deepEqual(toJson(RunResultSchema, result), data, "fixture is not in canonical proto JSON");
    assert.deepEqual(fromBinary(RunResultSchema, toBinary(RunResultSchema, result)), result);
  });
}

for (const [stem, data] of load("contexts")) {
  test(`context fixture ${stem}`, () => {
    const ctx = fromJson(RunContextSchema, data);
    assert.ok(ctx.runId && ctx.event?.eventId && ctx.event?.eventType);
    assert.equal(ctx.runtime?.protocolVersion, "1");
    assert.equal(ctx.context?.inlinePolicy?.mode, InlineMode.CURRENT_EVENT);
    assert.deepEqual(toJson(RunContextSchema, ctx), data, "fixture is not in canonical proto JSON");
    assert.deepEqual(fromBinary(RunContextSchema, toBinary(RunContextSchema, ctx)), ctx);
  });
}
