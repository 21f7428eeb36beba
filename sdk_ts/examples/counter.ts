// The TypeScript example runner: it streams its reply, reads the conversation's history through the
// host API and keeps a per-conversation turn counter in host-owned state.
//
//   npm run build && node dist/examples/counter.js --port 50072
import { create } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { AgentRunnerError, defineRunner, main, newId, results, v1 } from "../src/index.js";

const TURNS_KEY = "counter.turns";

export const counter = defineRunner({
  manifest: {
    id: "plugin:example/ts-counter/default",
    label: "TypeScript counter",
    description: "Streams an echo, reads history, counts the conversation's turns.",
    capabilities: { streaming: true, interrupt: true, steering: true, statefulSession: true },
    permissions: { history: [v1.HistoryOperation.PAGE], state: [v1.StateScope.CONVERSATION] },
    contextPolicy: { supportsHistoryPull: true },
    configSchema: [{
      name: "prefix", type: v1.ConfigFieldType.STRING, label: { translations: { en_US: "Reply prefix" } },
      defaultValue: create(ValueSchema, { kind: { case: "stringValue", value: "echo: " } }),
    }],
  },
  async *run(run) {
    const reply = `${run.config.prefix}${run.text}`;
    // History is pulled, never inlined. A failed pull is reported in the metadata, not fatal.
    let history = "history unavailable";
    if (run.context.context?.availableApis?.historyPage) {
      try {
        const page = await run.host.listHistory({ limit: 50 });
        history = `${page.items.length} earlier items`;
      } catch (err) {
        history = `history error: ${AgentRunnerError.from(err).reason}`;
      }
    }
    const turn = Number(run.state(v1.StateScope.CONVERSATION)[TURNS_KEY] ?? 0) + 1;
    const messageId = newId("msg");
    if (run.context.delivery?.supportsStreaming) {
      for (const word of reply.split(/(?<= )/)) yield results.delta(word, { messageId });
    }
    yield results.state(v1.StateScope.CONVERSATION, TURNS_KEY, turn);
    yield results.completed(reply, { messageId, metadata: { turn, history } });
  },
});

main([counter]);
