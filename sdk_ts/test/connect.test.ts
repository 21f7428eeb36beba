// Connect mode's pieces that need no host: the reconnect backoff and the harness login parsers.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { backoffDelayMs, checkKeyTransport, runtimeKeyFromEnv, takeRuntimeKey, v1 } from "../src/index.js";
import { claudeLogin, codexLogin } from "../src/detect.js";

test("the reconnect backoff is capped exponential with jitter", () => {
  const seen = new Set<number>();
  for (let attempt = 0; attempt < 12; attempt++) {
    const step = Math.min(5000, 100 * 2 ** attempt);
    for (let i = 0; i < 50; i++) {
      const d = backoffDelayMs(attempt, 100, 5000);
      assert.ok(d >= step / 2 && d <= step, `attempt ${attempt}: ${d}`);
      seen.add(d);
    }
  }
  assert.ok(seen.size > 100, "jittered");
});

test("login statuses name no secret", () => {
  assert.deepEqual(codexLogin("WARNING: x\nAPI key configured - sk-test-***ghijk\n", 0), [v1.HarnessLoginStatus.LOGGED_IN, "API key configured"]);
  assert.equal(codexLogin("Not logged in\n", 1)[0], v1.HarnessLoginStatus.LOGGED_OUT);
  const [status, detail] = claudeLogin('{"loggedIn": true, "authMethod": "oauth", "email": "a@b.c"}');
  assert.equal(status, v1.HarnessLoginStatus.LOGGED_IN);
  assert.equal(detail, "logged in, auth method oauth");
  assert.equal(claudeLogin("nope")[0], v1.HarnessLoginStatus.UNKNOWN);
});

test("the runtime key comes from the environment or its file, and leaves the environment once taken", () => {
  const dir = mkdtempSync(join(tmpdir(), "rtkey-"));
  const file = join(dir, "runtime.key");
  writeFileSync(file, "arr_from-the-file\n");
  const env: NodeJS.ProcessEnv = { AGENTRUNNER_RUNTIME_KEY_FILE: file, OTHER: "x" };
  assert.equal(takeRuntimeKey(env), "arr_from-the-file");
  assert.deepEqual(env, { OTHER: "x" });
  assert.equal(runtimeKeyFromEnv({ AGENTRUNNER_RUNTIME_KEY: " arr_env " }), "arr_env");
  assert.throws(() => runtimeKeyFromEnv({ AGENTRUNNER_RUNTIME_KEY: "a", AGENTRUNNER_RUNTIME_KEY_FILE: file }), /keep one/);
});

test("a key goes over plaintext only to loopback", () => {
  for (const [address, ok] of [["127.0.0.1:5", true], ["localhost:5", true], ["[::1]:5", true],
    ["192.0.2.1:5", false], ["host.example.com:5", false]] as const) {
    const check = () => checkKeyTransport(address, "arr_k", false, {});
    if (ok) assert.doesNotThrow(check, address);
    else assert.throws(check, /not a loopback address/, address);
    assert.doesNotThrow(() => checkKeyTransport(address, "arr_k", true, {}));
  }
  assert.doesNotThrow(() => checkKeyTransport("192.0.2.1:5", "arr_k", false, { AGENTRUNNER_HOST_ALLOW_PLAINTEXT: "1" }));
});
