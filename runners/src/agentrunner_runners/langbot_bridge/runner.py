"""One plugin runner as an SDK `Runner`: the run's context in, the plugin's results out.

The SDK's engine runs it like any runner (numbering, timestamps, the config checked against the
translated schema, tool calls closed, the control stream when the plugin declares `interrupt` or
`steering`, the deadline 100 ms early). `run` registers the run (so the plugin's API calls can use its
token), sends the translated `RunnerContext` to the runtime, and yields each translated result:

- the plugin's terminal result ends the run (the runtime's end frame is read first, so the action is
  complete and needs no cancellation);
- a stream that ends without one (the runtime stopped a cancelled plugin) is `run.failed`
  `langbot.no_terminal` (retryable);
- the runtime dying mid-run is `run.failed` `langbot.runtime_crashed` (retryable); the runtime refusing
  the run is `langbot.runtime_error`;
- a cancel or the deadline cancels this generator: the runtime gets `__cancel_action`, which stops the
  plugin's task; the engine ends the run `cancelled` / `deadline_exceeded`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING, Any, ClassVar

from agentrunner import Runner, results
from agentrunner.context import RunContext
from agentrunner.failures import FailureKind
from agentrunner.protocol import is_terminal
from agentrunner.v1 import manifest_pb2, result_pb2
from agentrunner_runners.langbot_bridge.context import runner_context
from agentrunner_runners.langbot_bridge.kinds import ComponentKind
from agentrunner_runners.langbot_bridge.peer import ActionError, PeerClosed
from agentrunner_runners.langbot_bridge.results import ResultTranslator
from agentrunner_runners.langbot_bridge.runs import BridgedRun
from agentrunner_runners.langbot_bridge.runtime import RuntimeUnavailable

if TYPE_CHECKING:
    from agentrunner_runners.langbot_bridge.bridge import Bridge

#: how long the runtime's end frame may lag the plugin's terminal result before it is not waited for
END_FRAME_WAIT = 1.0


class PluginRunner(Runner):
    """Base of the per-runner classes `make_runner` builds (one class per plugin runner: the SDK keys
    manifests by class)."""

    bridge: ClassVar[Bridge]
    kind: ClassVar[ComponentKind]
    plugin_author: ClassVar[str]
    plugin_name: ClassVar[str]
    runner_name: ClassVar[str]

    async def run(self, ctx: RunContext) -> AsyncIterator[result_pb2.RunResult]:
        cls = type(self)
        owner = BridgedRun(ctx, f"{cls.plugin_author}/{cls.plugin_name}", cls.get_manifest().id)
        cls.bridge.runs.add(owner)
        try:
            stream = cls.bridge.runtime.run(
                cls.kind, cls.plugin_author, cls.plugin_name, cls.runner_name, runner_context(ctx, cls.kind)
            )
            async for result in _translated(stream):
                yield result
                if is_terminal(result):
                    return
            yield results.failed(
                "langbot.no_terminal",
                "the plugin runtime ended the run without a result",
                retryable=True,
                kind=FailureKind.NO_RESULT,
            )
        except (PeerClosed, RuntimeUnavailable) as exc:
            yield results.failed(
                "langbot.runtime_crashed", str(exc), retryable=True, kind=FailureKind.PROCESS_FAILED
            )
        except ActionError as exc:
            yield results.failed(
                "langbot.runtime_error", exc.message[:1000], retryable=exc.busy, kind=FailureKind.API_ERROR
            )
        finally:
            cls.bridge.runs.remove(ctx.run_id)


async def _translated(stream: AsyncGenerator[dict[str, Any], None]) -> AsyncIterator[result_pb2.RunResult]:
    """The translated results; on the terminal one, the runtime's end frame is read before it is yielded."""
    translator = ResultTranslator()
    try:
        async for envelope in stream:
            result = translator.translate(envelope)
            if result is None:
                continue
            if is_terminal(result):
                with contextlib.suppress(TimeoutError, StopAsyncIteration, ActionError, PeerClosed):
                    async with asyncio.timeout(END_FRAME_WAIT):
                        async for _ in stream:
                            pass
            yield result
            if is_terminal(result):
                return
    finally:
        await stream.aclose()


def make_runner(
    bridge: Bridge, kind: ComponentKind, entry: dict[str, Any], manifest: manifest_pb2.RunnerManifest
) -> type[PluginRunner]:
    """A `PluginRunner` class for one discovery entry."""
    name = "PluginRunner_" + "".join(ch if ch.isalnum() else "_" for ch in manifest.id)
    attrs: dict[str, Any] = {
        "manifest": manifest,
        "bridge": bridge,
        "kind": kind,
        "plugin_author": str(entry.get("plugin_author") or ""),
        "plugin_name": str(entry.get("plugin_name") or ""),
        "runner_name": str(entry.get("runner_name") or manifest.name),
        "__module__": __name__,
    }
    return type(name, (PluginRunner,), attrs)
