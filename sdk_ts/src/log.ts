// One-line JSON logs on stderr (stdout carries only the ready line).
export function log(level: "debug" | "info" | "warn" | "error", event: string, fields: Record<string, unknown> = {}): void {
  if (level === "debug" && !process.env.AGENTRUNNER_DEBUG) return;
  process.stderr.write(JSON.stringify({ level, event, time: new Date().toISOString(), ...fields }) + "\n");
}
