// What a runtime reports about the harness CLIs of its machine, as the Python kit does: whether `claude`
// and `codex` are on PATH, their versions (`--version`) and login status (`claude auth status --json`,
// `codex login status`). No key, token or account name leaves the machine.
import { execFile } from "node:child_process";
import { access, constants } from "node:fs/promises";
import { delimiter, join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { type HarnessCapability, HarnessCapabilitySchema, HarnessLoginStatus } from "./gen/agentrunner/v1/runtime_pb.js";

const VERSION = /\d+\.\d+(?:\.\d+)?(?:[-+.][0-9A-Za-z.]+)?/;
const safe = (text: string) => text.replace(/[^A-Za-z0-9_ .()-]/g, "").slice(0, 80);

async function which(name: string): Promise<string | undefined> {
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    const path = join(dir, name);
    try {
      await access(path, constants.X_OK);
      return path;
    } catch {
      // not here
    }
  }
  return undefined;
}

function run(path: string, args: string[]): Promise<{ code: number; text: string }> {
  return new Promise((resolve) => {
    execFile(path, args, { timeout: 20_000 }, (err, stdout, stderr) => {
      const code = err ? (typeof err.code === "number" ? err.code : -1) : 0;
      resolve({ code, text: `${stdout}${stderr}` });
    });
  });
}

export function claudeLogin(text: string): [HarnessLoginStatus, string] {
  const start = text.indexOf("{");
  let status: { loggedIn?: unknown; authMethod?: unknown; apiKeySource?: unknown } | undefined;
  try {
    status = start >= 0 ? JSON.parse(text.slice(start)) : undefined;
  } catch {
    status = undefined;
  }
  if (!status || typeof status.loggedIn !== "boolean") return [HarnessLoginStatus.UNKNOWN, "`claude auth status` gave no status"];
  if (!status.loggedIn) return [HarnessLoginStatus.LOGGED_OUT, "not logged in (`claude auth login` or ANTHROPIC_API_KEY)"];
  const source = status.apiKeySource ? ` from ${safe(String(status.apiKeySource))}` : "";
  return [HarnessLoginStatus.LOGGED_IN, `logged in, auth method ${safe(String(status.authMethod ?? "unknown"))}${source}`];
}

export function codexLogin(text: string, code: number): [HarnessLoginStatus, string] {
  const lines = text.split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("WARNING"));
  if (lines.join(" ").toLowerCase().includes("not logged in")) return [HarnessLoginStatus.LOGGED_OUT, "not logged in (`codex login`)"];
  if (code === 0 && lines.length > 0) {
    const first = lines.find((l) => /log|key/i.test(l)) ?? lines[0];
    return [HarnessLoginStatus.LOGGED_IN, safe(first.split(" - ")[0].split(":")[0])];
  }
  return [HarnessLoginStatus.UNKNOWN, "`codex login status` failed"];
}

async function detect(name: string): Promise<HarnessCapability> {
  const path = await which(name);
  const capability = create(HarnessCapabilitySchema, { name, present: !!path, path: path ?? "" });
  if (!path) return capability;
  const [version, status] = await Promise.all([
    run(path, ["--version"]),
    name === "claude" ? run(path, ["auth", "status", "--json"]) : name === "codex" ? run(path, ["login", "status"]) : undefined,
  ]);
  capability.version = version.code === 0 ? (VERSION.exec(version.text)?.[0] ?? "") : "";
  if (name === "claude" && status) [capability.loginStatus, capability.loginDetail] = claudeLogin(status.text);
  else if (name === "codex" && status) [capability.loginStatus, capability.loginDetail] = codexLogin(status.text, status.code);
  else capability.loginStatus = HarnessLoginStatus.UNKNOWN;
  return capability;
}

/** Presence, version and login status of each harness CLI, concurrently, in order. */
export function detectHarnesses(names: string[]): Promise<HarnessCapability[]> {
  return Promise.all(names.map(detect));
}
