export * from "./gen/agentrunner/v1/index.js";
