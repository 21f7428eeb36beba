// The runtime key comes from the environment only (never a flag: a process list would show it):
// AGENTRUNNER_RUNTIME_KEY, or the file AGENTRUNNER_RUNTIME_KEY_FILE names (a container secret). The
// --connect mode takes it out of process.env once read (nothing the runners start inherits it), and a key
// goes over plaintext only to a loopback host unless AGENTRUNNER_HOST_ALLOW_PLAINTEXT=1.
import { readFileSync } from "node:fs";
import { isIP } from "node:net";

const KEY_ENV = "AGENTRUNNER_RUNTIME_KEY";
const KEY_FILE_ENV = "AGENTRUNNER_RUNTIME_KEY_FILE";

/** The key from AGENTRUNNER_RUNTIME_KEY_FILE or AGENTRUNNER_RUNTIME_KEY ("" when neither is set); both set throws. */
export function runtimeKeyFromEnv(env: NodeJS.ProcessEnv = process.env): string {
  const file = (env[KEY_FILE_ENV] ?? "").trim();
  const key = (env[KEY_ENV] ?? "").trim();
  if (file && key) throw new Error(`both ${KEY_ENV} and ${KEY_FILE_ENV} are set: keep one`);
  if (!file) return key;
  let text: string;
  try {
    text = readFileSync(file, "utf8").trim();
  } catch (err) {
    throw new Error(`cannot read the runtime key file ${file}: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
  }
  if (!text) throw new Error(`the runtime key from ${KEY_FILE_ENV} (${file}) is empty`);
  return text;
}

/** `runtimeKeyFromEnv`, then both variables deleted from `env`. */
export function takeRuntimeKey(env: NodeJS.ProcessEnv = process.env): string {
  try {
    return runtimeKeyFromEnv(env);
  } finally {
    delete env[KEY_ENV];
    delete env[KEY_FILE_ENV];
  }
}

export function isLoopbackTarget(address: string): boolean {
  // (a fleet's replicas: loopback when every one is)
  if (address.includes(",")) return address.split(",").filter((e) => e.trim()).every((e) => isLoopbackTarget(e.trim()));
  if (address.startsWith("unix:")) return true;
  let host = address.replace(/^dns:\/\/\//, "");
  const bracket = /^\[([^\]]+)\](?::\d+)?$/.exec(host);
  if (bracket) host = bracket[1]!;
  else if (host.split(":").length === 2) host = host.split(":")[0]!;
  if (host === "localhost") return true;
  if (isIP(host) === 4) return host.startsWith("127.");
  return isIP(host) === 6 && (host === "::1" || host === "0:0:0:0:0:0:0:1");
}

/** Throws when a key would go over plaintext to a host off loopback (unless AGENTRUNNER_HOST_ALLOW_PLAINTEXT=1). */
export function checkKeyTransport(address: string, key: string, tls: boolean, env: NodeJS.ProcessEnv = process.env): void {
  if (!key || tls || isLoopbackTarget(address) || (env.AGENTRUNNER_HOST_ALLOW_PLAINTEXT ?? "").trim() === "1") return;
  throw new Error(`${address} is not a loopback address and the connection has no TLS: the runtime key would cross `
    + "the network in clear (set AGENTRUNNER_HOST_CA_FILE, or AGENTRUNNER_HOST_ALLOW_PLAINTEXT=1 when a proxy "
    + "in front of the host terminates TLS)");
}
