"""The reference runner plus one input, for the secured-host suite: `file:<text>` uploads `<text>` as an
artifact (`note.txt`) and completes with it, so `artifacts get` has a file a runner attached."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, ClassVar

from agentrunner import RunContext, results
from agentrunner.v1 import result_pb2
from agentrunner_runners.reference import ReferenceRunner

RUNNER_ID = "plugin:test/secured/default"


class FilesRunner(ReferenceRunner):
    manifest: ClassVar[dict[str, Any]] = {
        "id": RUNNER_ID,
        "label": "Secured-host test runner",
        "capabilities": ["streaming", "interrupt", "stateful_session", "interactions"],
        "permissions": {"history": ["page"], "state": ["conversation"], "artifacts": ["write"]},
        "context_policy": {"supports_history_pull": True},
    }

    async def run(self, ctx: RunContext) -> AsyncIterator[result_pb2.RunResult]:
        text = ctx.input.to_text().strip()
        if text.startswith("file:"):
            ref = await ctx.api.upload_artifact(text[5:].encode(), name="note.txt", mime_type="text/plain")
            yield results.completed("here is the file", artifacts=[ref])
            return
        async for result in super().run(ctx):
            yield result
