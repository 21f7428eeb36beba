// Connect mode's pieces that need no host: the reconnect backoff and the harness login parsers.
import { test } from "node:test";
import assert from "node:assert/strict";
import { backoffDelayMs, v1 } from "../src/index.js";
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
