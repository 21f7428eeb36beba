"""A runner for `test_runtime_key.py`: it answers with what a process it starts sees of the runtime key
(the names of the `AGENTRUNNER_RUNTIME_KEY*` variables in the child's environment, and whether the key's
value is anywhere in it), read from the child's own `env` output."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from agentrunner import Runner, results

ENV_ID = "plugin:test/env/default"


class EnvRunner(Runner):
    manifest: ClassVar[dict[str, Any]] = {"id": ENV_ID, "label": "Env", "description": "Reports its env."}

    async def run(self, ctx: Any) -> AsyncIterator[Any]:
        proc = await asyncio.create_subprocess_exec("env", stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate()
        names = sorted(
            line.split("=", 1)[0]
            for line in out.decode().splitlines()
            if line.startswith("AGENTRUNNER_RUNTIME")
        )
        secret = ctx.input.text  # the test sends the key's value to look for
        leaked = secret in out.decode() or any(secret in v for v in os.environ.values())
        yield results.completed(f"names={','.join(names) or '-'} leaked={leaked}")
