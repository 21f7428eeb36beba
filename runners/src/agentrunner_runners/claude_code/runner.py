"""The official claude-code runner (`plugin:langbot/claude-code-agent/default`).

One `ClaudeCodeRun` per run, in stages: `prepare` (input check, workspace, attachments, MCP bridge,
context files), then one `turn` per message (the first, then steering follow-ups, through the SDK's
`steered_turns`), each `turn` = session choice → `attempt` (the Claude Code process, its stream-json
translated as it arrives) → `conclude` (the answer once, with the outbox files, or the mapped failure).
Everything started for the run (process group, MCP bridge, MCP config file) is stopped or removed when
the run ends, however it ends.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import structlog

from agentrunner import results
from agentrunner.context import RunContext
from agentrunner.failures import FailureKind, RunnerFailure
from agentrunner.harness import (
    HarnessProcess,
    McpBridge,
    ProcessSpec,
    Redactor,
    Workspace,
    context_document,
    directory_name,
    export_outbox,
    harness_env,
)
from agentrunner.harness.projection import CONTEXT_JSON, CONTEXT_MD, context_markdown
from agentrunner.harness.run import prepare_workspace, turn_deadline
from agentrunner.harness.turns import HarnessRun, HarnessRunner, json_records, wait_exit
from agentrunner.harness.workspace import WORKING_DIRECTORY_KEY
from agentrunner.v1 import result_pb2
from agentrunner_runners.claude_code import invocation, outcome
from agentrunner_runners.claude_code.config import ClaudeCodeConfig
from agentrunner_runners.claude_code.environment import PREFIXES, KeyHelper, api_key, claude_env
from agentrunner_runners.claude_code.outcome import TOTALS_KEY, Totals, failed
from agentrunner_runners.claude_code.stream import ClaudeStream

log = structlog.get_logger("agentrunner_runners.claude_code")

SESSION_KEY = "external.claude_code_session_id"
SKILLS_DIR = ".claude/skills"


class ClaudeCodeRun(HarnessRun):
    prefix = "claude_code"
    label = "Claude Code"

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.config: ClaudeCodeConfig = ctx.config
        self.remote = self.config.location == "remote-ssh"
        self.redactor = Redactor([ctx.api.run_token])
        self.redactor.add_env(self.config.env)
        self.workspace: Workspace | None = None
        self.remote_dir = ""
        self.bridge: McpBridge | None = None
        self.files: dict[str, bytes] = {}  # remote: what the bundle writes
        self.session_id = (
            str(ctx.state.conversation.get(SESSION_KEY) or "") if self.config.reuse_session else ""
        )
        self.totals = (
            Totals.stored(ctx.state.conversation.get(TOTALS_KEY)) if self.config.reuse_session else None
        )
        # Claude Code's environment without its key (see environment.py); the key reaches it through
        # an apiKeyHelper settings file (local runs)
        self.env, self.credentials = claude_env(self.config.env)
        self.redactor.add_env(self.env)
        self.redactor.add(*self.credentials.values())
        self.key_helper: KeyHelper | None = None
        self.fallback_used = False
        self.started = time.monotonic()

    # -- stages ---------------------------------------------------------------------------------------

    async def prepare(self, stack: contextlib.AsyncExitStack) -> list[result_pb2.RunResult]:
        """Workspace, attachments, MCP bridge and context files; returns results to emit first."""
        ctx, config = self.ctx, self.config
        self.redactor.add_mcp_servers(config.mcp_servers)
        stack.callback(self._remove_mcp_config)
        if not self.remote:
            prepared = await prepare_workspace(
                ctx,
                stack,
                root=config.workspace,
                harness="claude-code",
                redactor=self.redactor,
                enable_mcp=config.enable_langbot_mcp,
                state_keys=[SESSION_KEY],
                skills_dir=SKILLS_DIR,
            )
            self.workspace, self.bridge = prepared.workspace, prepared.bridge
            if key := api_key(self.credentials):
                self.key_helper = stack.enter_context(KeyHelper(key))
            return prepared.results
        # remote-ssh: the workspace is on the other machine; its files travel in the stdin bundle
        stored = str(ctx.state.conversation.get(WORKING_DIRECTORY_KEY) or "")
        self.remote_dir = invocation.remote_directory(
            config, directory_name(ctx.conversation.conversation_id, ctx.run_id)
        )
        document = context_document(
            ctx, self.remote_dir, state_keys=[SESSION_KEY, WORKING_DIRECTORY_KEY], harness="claude-code"
        )
        self.files[CONTEXT_JSON] = json.dumps(document, ensure_ascii=False, indent=2).encode()
        self.files[CONTEXT_MD] = context_markdown(document).encode()
        if ctx.conversation.conversation_id and stored != self.remote_dir:
            return [results.state("conversation", WORKING_DIRECTORY_KEY, self.remote_dir)]
        return []

    # -- one turn -------------------------------------------------------------------------------------

    async def run_turn(self, prompt: str, index: int) -> AsyncIterator[result_pb2.RunResult]:
        """One Claude Code turn (a `RunnerFailure` ends it with its `run.failed`, after any streamed
        message that will not be completed is closed)."""
        fresh = not self.session_id
        if fresh:
            self.session_id = str(uuid.uuid4())
            if self.config.reuse_session:
                yield results.state("conversation", SESSION_KEY, self.session_id)
        stream = self._stream()
        try:
            try:
                async for result in self.attempt(
                    prompt, invocation.Session(self.session_id, not fresh), stream
                ):
                    yield result
            except _ResumeRejected:
                async for result in self._fresh_session():
                    yield result
                fresh, stream = True, self._stream()
                async for result in self.attempt(prompt, invocation.Session(self.session_id, False), stream):
                    yield result
            reported = stream.session_id
            if reported and reported != self.session_id:
                self.session_id = reported
                if self.config.reuse_session:
                    yield results.state("conversation", SESSION_KEY, reported)
            cost = self._account(stream, fresh)
            if self.config.reuse_session and self.totals is not None and self.totals.values:
                yield results.state("conversation", TOTALS_KEY, self.totals.to_state())
            for result in await self.conclude(stream, cost):
                yield result
        except RunnerFailure:
            for result in stream.close_unfinished():
                yield result
            raise

    async def _fresh_session(self) -> AsyncIterator[result_pb2.RunResult]:
        log.warning("claude_code.resume_rejected", session_id=self.session_id)
        await self.ctx.log(
            f"Claude Code could not resume session {self.session_id}; starting a new one", "warning"
        )
        self.session_id = str(uuid.uuid4())
        if self.config.reuse_session:
            yield results.state("conversation", SESSION_KEY, self.session_id)

    def _stream(self) -> ClaudeStream:
        return ClaudeStream(streaming=self.config.streaming, redactor=self.redactor)

    def _account(self, stream: ClaudeStream, fresh: bool) -> dict[str, float]:
        """The run's cost out of the session's totals (`outcome.run_cost`); keeps the new totals."""
        if stream.result is None:
            return {}
        cost, self.totals = outcome.run_cost(stream.result, self.totals, self.session_id, fresh=fresh)
        return cost

    def _deadline(self) -> float:
        return turn_deadline(self.ctx, self.started + self.config.timeout)

    async def attempt(
        self, prompt: str, session: invocation.Session, stream: ClaudeStream
    ) -> AsyncIterator[result_pb2.RunResult]:
        """Runs Claude Code once and yields its translated results; records the outcome in `stream`."""
        spec = self._spec(prompt, session)
        async with HarnessProcess(spec, redactor=self.redactor, prefix="claude_code") as proc:
            deadline = self._deadline()
            lines = json_records(
                proc,
                self.ctx,
                deadline=deadline,
                prefix="claude_code",
                label="Claude Code",
                budget=self.config.timeout,
            )
            async for line in lines:
                for result in stream.feed(line):
                    yield result
                if stream.auth_failure is not None:
                    raise outcome.auth_failure(stream.auth_failure)  # stops Claude Code's retries now
            code = await wait_exit(proc, deadline=deadline, prefix="claude_code", label="Claude Code")
            stderr = proc.stderr_excerpt()
        if (
            session.resume
            and code != 0
            and not self.fallback_used
            and not stream.saw_output
            and outcome.resume_rejected(stream.result, stderr)
        ):
            self.fallback_used = True
            raise _ResumeRejected()
        if stream.result is None and code != 0:
            raise failed(
                "process_failed",
                f"Claude Code exited with status {code}" + (f": {stderr}" if stderr else ""),
                FailureKind.PROCESS_FAILED,
                exit_code=code,
            )
        if stream.result is None:
            raise failed(
                "no_result",
                "Claude Code ended without its result line",
                FailureKind.NO_RESULT,
                exit_code=code,
            )

    def _spec(self, prompt: str, session: invocation.Session) -> ProcessSpec:
        config = self.config
        langbot = self._langbot_server()
        document = invocation.mcp_config(config.mcp_servers, langbot)
        mcp_name = f".langbot/mcp-{self.ctx.run_id}.json"
        allowed = (
            invocation.langbot_rules(self.bridge.tool_names) if langbot is not None and self.bridge else []
        )
        if self.remote:
            files = dict(self.files)
            if document is not None:
                files[mcp_name] = invocation.dumps(document)
            argv = invocation.claude_args(
                config, session, mcp_config_path=mcp_name if document else None, allowed=allowed
            )
            script = invocation.remote_script(self.remote_dir, argv, cleanup=[mcp_name] if document else [])
            # the remote machine's own PATH, HOME, ... stay; Claude's variables and the key travel
            remote_env = {
                **{k: v for k, v in self.env.items() if k in config.env or k.startswith(PREFIXES)},
                **self.credentials,
            }
            bundle = invocation.remote_bundle(files, remote_env, private=[mcp_name])
            return ProcessSpec(
                argv=invocation.ssh_args(config, script),
                cwd=_home(),
                env=harness_env({}),
                stdin=bundle + prompt.encode(),
            )
        assert self.workspace is not None
        path = None
        if document is not None:
            path = str(self.workspace.write_text(mcp_name, json.dumps(document), mode=0o600))
        argv = invocation.claude_args(
            config,
            session,
            mcp_config_path=path,
            allowed=allowed,
            settings_path=self.key_helper.settings if self.key_helper else None,
        )
        return ProcessSpec(argv=argv, cwd=self.workspace.directory, env=dict(self.env), stdin=prompt.encode())

    def _langbot_server(self) -> dict[str, Any] | None:
        if self.bridge is None or self.remote:
            return None  # over ssh the loopback bridge is not reachable (see README)
        if self.config.mcp_bridge_transport == "stdio":
            return self.bridge.stdio_server_config()
        return self.bridge.http_server_config()

    def _remove_mcp_config(self) -> None:
        if self.workspace is not None:
            self.workspace.path(f".langbot/mcp-{self.ctx.run_id}.json").unlink(missing_ok=True)

    # -- the outcome ----------------------------------------------------------------------------------

    async def conclude(self, stream: ClaudeStream, cost: dict[str, float]) -> list[result_pb2.RunResult]:
        """The answer (once, with the outbox files) and the turn's `run.completed`, or its failure."""
        result = stream.result or {}
        usage = stream.usage(cost)
        metadata = (
            {"session_id": self.session_id, "model": stream.model}
            if stream.model
            else {"session_id": self.session_id}
        )
        raw = result.get("result")
        text = raw if isinstance(raw, str) else ""
        subtype = str(result.get("subtype") or "")
        if subtype == "error_max_turns":
            raise self._with_usage(
                failed(
                    "max_turns",
                    f"Claude Code stopped at its turn limit ({self.config.max_turns})",
                    FailureKind.MAX_TURNS,
                ),
                usage,
            )
        if result.get("is_error") or subtype.startswith("error"):
            message = self.redactor(
                text or "; ".join(str(e) for e in result.get("errors") or []) or subtype or "error"
            )
            raise self._with_usage(outcome.classify(result, message), usage)
        if not text.strip():
            raise self._with_usage(
                failed(
                    "empty_response", "Claude Code finished without an answer", FailureKind.EMPTY_RESPONSE
                ),
                usage,
            )
        artifacts = await export_outbox(self.ctx, self.workspace) if self.workspace is not None else []
        answer_id = stream.answer_message_id(text)
        closed = stream.close_unfinished(keep=answer_id)
        answer = results.message(text, message_id=answer_id, artifacts=artifacts)
        return [*closed, answer, results.completed(usage=usage, metadata=metadata)]

    @staticmethod
    def _with_usage(failure: RunnerFailure, usage: Any) -> RunnerFailure:
        failure.usage = usage
        return failure


class _ResumeRejected(Exception):
    """Claude Code refused `--resume` for the stored session."""


def _home() -> Any:
    from pathlib import Path

    return Path.home()


class ClaudeCodeRunner(HarnessRunner):
    """Runs Claude Code in print mode for each message; see README.md."""

    config_model = ClaudeCodeConfig
    run_class = ClaudeCodeRun
