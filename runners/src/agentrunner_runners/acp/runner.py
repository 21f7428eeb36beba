"""The official ACP runner (`plugin:langbot/acp-agent/default`): any agent that speaks the Agent Client
Protocol (JSON-RPC 2.0 over stdio) behind the host.

One `AcpRun` per run (the SDK's `HarnessRun`): `prepare` (workspace, attachments, the LangBot MCP
bridge, context files; over ssh only the remote directory), then one turn per message (the first, then
steering follow-ups), each turn = take the conversation's lock → read the stored session id again →
`AcpTurn` (one agent process: initialize, session, prompt, updates) → `conclude` (the answer once,
with the outbox files, this turn's usage and cost; or the mapped failure). Everything started for the
run is stopped or removed when the run ends, however it ends.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import structlog
from acp import schema

from agentrunner import results
from agentrunner.context import RunContext
from agentrunner.errors import AgentRunnerError
from agentrunner.failures import FailureKind
from agentrunner.harness import (
    McpBridge,
    ProcessSpec,
    Redactor,
    Workspace,
    directory_name,
    export_outbox,
    harness_env,
    session_lock,
)
from agentrunner.harness.run import prepare_workspace, turn_deadline
from agentrunner.harness.turns import HarnessRun, HarnessRunner, failure_result
from agentrunner.harness.workspace import WORKING_DIRECTORY_KEY
from agentrunner.v1 import result_pb2
from agentrunner_runners.acp import remote
from agentrunner_runners.acp.config import AcpConfig
from agentrunner_runners.acp.failures import failed, stop_failure
from agentrunner_runners.acp.turn import AcpTurn

log = structlog.get_logger("agentrunner_runners.acp")

SESSION_KEY = "external.acp_session_id"
#: the session's cumulative cost as the agent last reported it: {session_id, amount, currency}
COST_KEY = "external.acp_cost_total"


class AcpRun(HarnessRun):
    prefix = "acp"
    session_key = SESSION_KEY

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.config: AcpConfig = ctx.config
        self.label = self.config.label
        self.remote = self.config.location == "remote-ssh"
        self.redactor = Redactor([ctx.api.run_token])
        self.redactor.add_env(self.config.env)
        self.redactor.add_mcp_servers(self.config.mcp_servers)
        self.workspace: Workspace | None = None
        self.bridge: McpBridge | None = None
        self.remote_dir = ""
        self.attachments: list[dict[str, Any]] = []
        self.session_id = ""
        #: the stored `external.acp_cost_total` (read with the session id at each turn)
        self.cost_total: Any = None
        prefixes = self.config.preset.env_prefixes
        allow = [name for name in os.environ if prefixes and name.startswith(prefixes)]
        self.env = harness_env(self.config.env, allow=allow)
        self.redactor.add_env(self.env)
        self.started = time.monotonic()

    # -- stages ---------------------------------------------------------------------------------------

    async def prepare(self, stack: contextlib.AsyncExitStack) -> list[result_pb2.RunResult]:
        ctx, config = self.ctx, self.config
        if not self.remote:
            prepared = await prepare_workspace(
                ctx,
                stack,
                root=config.workspace,
                harness="acp",
                redactor=self.redactor,
                enable_mcp=config.enable_langbot_mcp,
                state_keys=[SESSION_KEY],
            )
            self.workspace, self.bridge = prepared.workspace, prepared.bridge
            self.attachments = prepared.attachments
            return prepared.results
        # remote-ssh: the workspace is on the other machine; the loopback bridge is not reachable there
        self.remote_dir = remote.remote_directory(
            config, directory_name(ctx.conversation.conversation_id, ctx.run_id)
        )
        self.attachments = [
            {"name": a.name, "mime_type": a.mime_type, "uri": a.uri}
            if a.uri and not a.sha256
            else {"name": a.name or a.artifact_id, "note": "not sent: the agent runs over ssh"}
            for a in ctx.input.attachments
        ]
        stored = str(ctx.state.conversation.get(WORKING_DIRECTORY_KEY) or "")
        if ctx.conversation.conversation_id and stored != self.remote_dir:
            return [results.state("conversation", WORKING_DIRECTORY_KEY, self.remote_dir)]
        return []

    def spec(self) -> ProcessSpec:
        """The agent's process: the command in the workspace, or ssh running it remotely."""
        if self.remote:
            script = remote.script(self.remote_dir, self.config.argv)
            return ProcessSpec(
                argv=remote.ssh_args(self.config, script), cwd=Path.home(), env=harness_env({}), stdin=None
            )
        assert self.workspace is not None
        return ProcessSpec(argv=self.config.argv, cwd=self.workspace.directory, env=self.env, stdin=None)

    def remote_env(self) -> dict[str, str]:
        """What the remote script exports: the preset's variables and `env-json` (not PATH, HOME...)."""
        prefixes = self.config.preset.env_prefixes
        return {
            k: v for k, v in self.env.items() if k in self.config.env or (prefixes and k.startswith(prefixes))
        }

    def deadline(self) -> float:
        return turn_deadline(self.ctx, self.started + self.config.timeout)

    # -- one turn -------------------------------------------------------------------------------------

    async def run_turn(self, prompt: str, index: int) -> AsyncIterator[result_pb2.RunResult]:
        key = f"acp:{self.ctx.conversation.conversation_id or self.ctx.run_id}"
        async with session_lock(key):
            await self._refresh()
            attachments, self.attachments = self.attachments, []
            turn = AcpTurn(self, prompt, attachments)
            async for result in turn.results():
                yield result
            for result in await self.conclude(turn):
                yield result

    async def _refresh(self) -> None:
        """The stored session id: from the run's snapshot, read again from the host when it can be (a
        run that waited for the lock sees what the previous run stored)."""
        if not self.config.reuse_session:
            return
        state = self.ctx.state.conversation
        stored = state.get(SESSION_KEY)
        self.cost_total = state.get(COST_KEY)
        if self.ctx.api.available and self.ctx.conversation.conversation_id:
            try:
                stored = await self.ctx.api.get_state("conversation", SESSION_KEY) or stored
                self.cost_total = await self.ctx.api.get_state("conversation", COST_KEY) or self.cost_total
            except AgentRunnerError as exc:
                log.info("acp.state_read_failed", reason=exc.reason)
        if not self.session_id:
            self.session_id = str(stored or "")

    # -- the outcome ----------------------------------------------------------------------------------

    def _cost(self, cost: schema.Cost | None) -> tuple[dict[str, Any], list[result_pb2.RunResult]]:
        """This turn's cost (the session's reported total minus the stored one) and its `state.updated`."""
        if cost is None:
            return {}, []
        stored = self.cost_total
        turn = cost.amount
        if (
            isinstance(stored, dict)
            and stored.get("session_id") == self.session_id
            and stored.get("currency") == cost.currency
            and isinstance(stored.get("amount"), int | float)
            and cost.amount >= stored["amount"]
        ):
            turn = cost.amount - float(stored["amount"])
        self.cost_total = {"session_id": self.session_id, "amount": cost.amount, "currency": cost.currency}
        key = "cost_usd" if cost.currency.upper() == "USD" else "cost"
        extra: dict[str, Any] = {
            key: round(turn, 8),
            "session_cost": cost.amount,
            "cost_currency": cost.currency,
        }
        out = [results.state("conversation", COST_KEY, self.cost_total)] if self.config.reuse_session else []
        return extra, out

    def usage(self, turn: AcpTurn, response: schema.PromptResponse) -> tuple[Any, list[result_pb2.RunResult]]:
        extra, out = self._cost(turn.stream.cost)
        if turn.stream.context is not None:
            extra["context_used"], extra["context_size"] = turn.stream.context
        reported = response.usage
        if reported is None:
            return (results.usage(**extra) if extra else None), out
        for name in ("thought_tokens", "cached_read_tokens", "cached_write_tokens"):
            value = getattr(reported, name)
            if value is not None:
                extra[name] = value
        return results.usage(
            reported.input_tokens, reported.output_tokens, reported.total_tokens, **extra
        ), out

    async def conclude(self, turn: AcpTurn) -> list[result_pb2.RunResult]:
        """The answer (once, with the outbox files) and the turn's `run.completed`, or its failure."""
        response = turn.response
        assert response is not None
        usage, out = self.usage(turn, response)
        out += [self.redactor.result(r) for r in turn.stream.finish()]
        metadata = {
            "session_id": self.session_id,
            "stop_reason": response.stop_reason,
            "provider": self.config.provider,
        }
        if turn.init is not None and turn.init.agent_info is not None:
            metadata["agent"] = f"{turn.init.agent_info.name} {turn.init.agent_info.version}"
        failure = stop_failure(response.stop_reason, self.label)
        answer = turn.stream.answer
        if failure is None and (answer is None or not answer.text.strip()):
            failure = failed(
                "empty_response", f"{self.label} finished without an answer", FailureKind.EMPTY_RESPONSE
            )
        if failure is not None:
            failure.usage = usage
            out += [self.redactor.result(r) for r in turn.stream.abandon()]
            return [*out, failure_result(failure)]
        assert answer is not None
        artifacts = await export_outbox(self.ctx, self.workspace) if self.workspace is not None else []
        message = results.message(
            self.redactor(answer.text), message_id=answer.message_id, artifacts=artifacts
        )
        return [*out, message, results.completed(usage=usage, metadata=metadata)]


class AcpRunner(HarnessRunner):
    """Drives an ACP agent for each message; see README.md."""

    config_model = AcpConfig
    run_class = AcpRun
