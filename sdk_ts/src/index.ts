// @langbot/agentrunner: the TypeScript runner kit of the LangBot AgentRunner Protocol v1 over gRPC.
export * as results from "./results.js";
export { RESULT_TYPES, RunFailure, isTerminal, newId, resultType } from "./results.js";
export { AgentRunnerError, DOMAIN, REASONS, type Reason } from "./errors.js";
export { ConfigInvalidError, validateConfig } from "./config.js";
export { checkManifest, PROTOCOL_VERSION, RUNNER_ID_PATTERN, type ManifestInit } from "./manifest.js";
export { checkInteraction, INTERACTION_LIMITS } from "./interactions.js";
export { DEFAULT_TIMEOUTS_MS, type HostClient, type HostTls, RUN_ID_HEADER, RUN_TOKEN_HEADER, traceparent } from "./host.js";
export { DEADLINE_MARGIN_MS, Run, type Runner } from "./run.js";
export { defineRunner, main, READY_PREFIX, type RunnerServer, serve, type ServeOptions, startServer } from "./server.js";
export { backoffDelayMs, connect, CONNECTED_PREFIX, type ConnectOptions, RuntimeRefused } from "./connect.js";
export { checkKeyTransport, runtimeKeyFromEnv, takeRuntimeKey } from "./runtimekey.js";
export { detectHarnesses } from "./detect.js";
export { VERSION } from "./version.js";
export * as v1 from "./gen/agentrunner/v1/index.js";
