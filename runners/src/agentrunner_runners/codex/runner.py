"""The official codex runner (`plugin:langbot/codex-agent/default`).

One `CodexRun` per run (the SDK's `HarnessRun`): `prepare` (the workspace root checked against what
the sandbox lets every conversation write, workspace, attachments, MCP bridge, context files, the
user's `config.toml` checked), then one turn per message (the first, then steering follow-ups), each
turn = take the conversation's lock → write the conversation's `CODEX_HOME` (removed `config.toml`
when the turn ends) → read the thread id and usage total again →
the transport's attempt (`app-server`: `AppServerTurn`, JSON-RPC over stdio; `exec`: `attempt`, one
`codex exec --json` process, its JSONL translated as it arrives) → `conclude` (the answer once, with
the outbox files, this turn's usage; or the mapped failure). Everything started for the run is stopped
or removed when the run ends, however it ends.
"""

from __future__ import annotations

import contextlib
import functools
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import structlog

from agentrunner import results
from agentrunner.context import RunContext
from agentrunner.errors import AgentRunnerError
from agentrunner.failures import FailureKind, RunnerFailure
from agentrunner.harness import (
    HarnessProcess,
    McpBridge,
    ProcessSpec,
    Redactor,
    Workspace,
    check_root,
    export_outbox,
    harness_env,
    refuse_shared_root,
    secret_names,
    session_lock,
)
from agentrunner.harness.run import prepare_workspace, turn_deadline
from agentrunner.harness.turns import (
    LANGBOT_SERVER,
    HarnessRun,
    HarnessRunner,
    failure_result,
    harness_failure,
    json_records,
    wait_exit,
)
from agentrunner.v1 import result_pb2
from agentrunner_runners.codex import invocation
from agentrunner_runners.codex.app_server import AppServerTurn
from agentrunner_runners.codex.app_stream import CodexAppStream
from agentrunner_runners.codex.config import CodexConfig
from agentrunner_runners.codex.exec_stream import CodexExecStream, Usage, parse_usage_state
from agentrunner_runners.codex.failures import classify

log = structlog.get_logger("agentrunner_runners.codex")

SESSION_KEY = "external.codex_session_id"
USAGE_KEY = "external.codex_usage_total"
#: skills are kept in the workspace; the per-run CODEX_HOME links `skills/` to it
SKILLS_DIR = ".codex/skills"
_RESUME_REJECTED = re.compile(
    r"no (saved )?(session|rollout|conversation|thread)|(session|thread|rollout|conversation)\b.*not found",
    re.I,
)


_failed = functools.partial(harness_failure, "codex")


class _ResumeRejected(Exception):
    """Codex refused to resume the stored thread."""


class CodexRun(HarnessRun):
    prefix = "codex"
    label = "Codex"
    session_key = SESSION_KEY

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.config: CodexConfig = ctx.config
        self.redactor = Redactor([ctx.api.run_token])
        self.redactor.add_env(self.config.env)
        self.workspace: Workspace | None = None
        self.bridge: McpBridge | None = None
        self.home: Path | None = None
        self.env: dict[str, str] = {}
        self.source = Path()
        self.thread_id = ""
        self.images: list[str] = []
        self.total: tuple[str, Usage] | None = None
        self.started = time.monotonic()

    # -- stages ---------------------------------------------------------------------------------------

    async def prepare(self, stack: contextlib.AsyncExitStack) -> list[result_pb2.RunResult]:
        ctx, config = self.ctx, self.config
        self.redactor.add_mcp_servers(config.mcp_servers)
        source = self.source = invocation.source_home(config)
        try:
            _, user = invocation.user_config(source)
        except invocation.HomeConflict as exc:
            raise self._home_failure(exc) from None
        defaults = invocation.default_tables([])
        self._check_root(user, defaults)
        prepared = await prepare_workspace(
            ctx,
            stack,
            root=config.workspace,
            harness="codex",
            redactor=self.redactor,
            enable_mcp=config.enable_langbot_mcp,
            state_keys=[SESSION_KEY],
            skills_dir=SKILLS_DIR,
        )
        self.workspace, self.bridge = prepared.workspace, prepared.bridge
        # image attachments go to the first turn as `localImage` input (app-server)
        self.images = [
            str(self.workspace.path(a["path"]))
            for a in prepared.attachments
            if a.get("path") and str(a.get("mime_type") or "").startswith("image/")
        ]
        self.workspace.path(invocation.TMP_DIR).mkdir(mode=0o700, exist_ok=True)
        self.home = self.workspace.path(invocation.HOME_DIR)
        self.env = self.codex_env()
        try:  # refused now, before any turn; the home itself is written by each turn (`_write_home`)
            invocation.check_config(source, self._servers())
        except invocation.HomeConflict as exc:
            raise self._home_failure(exc) from None
        return prepared.results

    def _write_home(self) -> None:
        """The conversation's `CODEX_HOME` for this run's turn: written while the turn holds the
        conversation's lock (another run of the conversation has its own bridge), removed after it."""
        assert self.home is not None and self.workspace is not None
        try:
            invocation.make_home(
                self.home,
                self.source,
                self._servers(),
                skills=self.workspace.path(SKILLS_DIR),
                defaults=invocation.default_tables(secret_names(self.env)),
            )
        except (invocation.HomeConflict, OSError) as exc:
            raise self._home_failure(exc) from None

    def _home_failure(self, exc: Exception) -> RunnerFailure:
        return _failed(
            "config_invalid",
            self.redactor(f"the codex home cannot be prepared: {exc}"),
            FailureKind.CONFIG_INVALID,
        )

    def _check_root(self, user: dict[str, Any], defaults: dict[str, dict[str, Any]]) -> None:
        """Refuses a workspace root inside a directory the `workspace-write` sandbox lets every
        conversation's commands write (`/tmp` unless `exclude_slash_tmp`, `$TMPDIR` unless
        `exclude_tmpdir_env_var`): one conversation could write into another's `outbox/`."""
        config = self.config
        if config.sandbox != "workspace-write":
            return
        shared = []
        overrides = config.config_overrides
        if not invocation.effective("sandbox_workspace_write.exclude_slash_tmp", overrides, user, defaults):
            shared.append(("/tmp", "exclude_slash_tmp"))
        tmpdir = config.env.get("TMPDIR")  # the runner's own TMPDIR for Codex lies in the workspace
        if tmpdir and not invocation.effective(
            "sandbox_workspace_write.exclude_tmpdir_env_var", overrides, user, defaults
        ):
            shared.append((tmpdir, "exclude_tmpdir_env_var"))
        for directory, setting in shared:
            refuse_shared_root(
                check_root(config.workspace or None),
                Path(directory),
                f"Codex's workspace-write sandbox lets every conversation write there "
                f"(sandbox_workspace_write.{setting} is off)",
            )

    def _servers(self) -> dict[str, dict[str, Any]]:
        servers = dict(self.config.mcp_servers)
        if self.bridge is not None:
            if self.config.mcp_bridge_transport == "stdio":
                # the proxy's URL and token reach it from Codex's environment (`env_vars`), not the file
                stdio = self.bridge.stdio_server_config()
                server = {
                    "command": stdio["command"],
                    "args": stdio["args"],
                    "env_vars": sorted(stdio["env"]),
                }
            else:  # auto, http: ready in well under a second, before Codex starts its turn
                server = {"url": self.bridge.url, "bearer_token_env_var": invocation.MCP_TOKEN_ENV}
            # the host authorizes every call against the run's grants: Codex need not ask anyone
            servers[LANGBOT_SERVER] = {**server, "default_tools_approval_mode": "approve"}
        return servers

    # -- one turn -------------------------------------------------------------------------------------

    async def run_turn(self, prompt: str, index: int) -> AsyncIterator[result_pb2.RunResult]:
        assert self.home is not None
        key = f"codex:{self.ctx.conversation.conversation_id or self.ctx.run_id}"
        async with session_lock(key):
            self._write_home()
            try:
                async for result in self._locked_turn(prompt):
                    yield result
            finally:
                invocation.remove_config(self.home)

    async def _locked_turn(self, prompt: str) -> AsyncIterator[result_pb2.RunResult]:
        """The turn, holding the conversation's lock: the transport's attempt, then `conclude`."""
        await self._refresh()
        if self.config.transport == "app-server":
            app = CodexAppStream()
            async for result in AppServerTurn(self, prompt, app).results():
                yield result
            for result in await self.conclude(app):
                yield result
            return
        stream = CodexExecStream()
        try:
            async for result in self.attempt(prompt, self.thread_id, stream):
                yield result
        except _ResumeRejected:
            log.warning("codex.resume_rejected", thread_id=self.thread_id)
            await self.ctx.log(
                f"Codex could not resume thread {self.thread_id}; starting a new one", "warning"
            )
            self.thread_id = ""
            stream = CodexExecStream()
            async for result in self.attempt(prompt, "", stream):
                yield result
        for result in await self.conclude(stream):
            yield result

    async def _refresh(self) -> None:
        """The conversation's thread id and usage total: from the run's snapshot, read again from the
        host when it can be (a run that waited for the lock sees what the previous run stored)."""
        state = self.ctx.state.conversation
        thread, total = state.get(SESSION_KEY), state.get(USAGE_KEY)
        if self.ctx.api.available and self.ctx.conversation.conversation_id:
            try:
                thread = await self.ctx.api.get_state("conversation", SESSION_KEY) or thread
                total = await self.ctx.api.get_state("conversation", USAGE_KEY) or total
            except AgentRunnerError as exc:
                log.info("codex.state_read_failed", reason=exc.reason)
        if not self.config.reuse_session:
            thread = ""
        if not self.thread_id:
            self.thread_id = str(thread or "")
        self.total = parse_usage_state(total)

    def deadline(self) -> float:
        return turn_deadline(self.ctx, self.started + self.config.timeout)

    def codex_env(self) -> dict[str, str]:
        """Codex's environment: the toolkit's allowlist, Codex's own variables, `TMPDIR` in the workspace,
        `env-json`, the conversation's `CODEX_HOME` (and the bridge token for the HTTP bridge); their
        values are redacted. The commands the model runs get it without the secrets (`config.toml`)."""
        assert self.home is not None and self.workspace is not None
        tmpdir = str(self.workspace.path(invocation.TMP_DIR))
        extra = {"TMPDIR": tmpdir, **self.config.env, "CODEX_HOME": str(self.home)}
        if self.bridge is not None:
            extra[invocation.MCP_TOKEN_ENV] = self.bridge.token
            if self.config.mcp_bridge_transport == "stdio":
                extra.update(self.bridge.stdio_server_config()["env"])
        env = harness_env(extra, allow=invocation.CODEX_ENV_ALLOW)
        self.redactor.add_env({k: v for k, v in env.items() if k in invocation.CODEX_ENV_ALLOW})
        return env

    async def attempt(
        self, prompt: str, thread_id: str, stream: CodexExecStream
    ) -> AsyncIterator[result_pb2.RunResult]:
        """Runs `codex exec` once and yields its translated results; records the outcome in `stream`."""
        assert self.workspace is not None and self.home is not None
        argv = invocation.codex_args(self.config, self.workspace.directory, thread_id)
        spec = ProcessSpec(argv=argv, cwd=self.workspace.directory, env=self.env, stdin=prompt.encode())
        deadline = self.deadline()
        async with HarnessProcess(spec, redactor=self.redactor, prefix="codex") as proc:
            events = json_records(
                proc, self.ctx, deadline=deadline, prefix="codex", label="Codex", budget=self.config.timeout
            )
            async for event in events:
                for result in stream.feed(event):
                    yield self.redactor.result(result)
                if stream.fatal is not None:  # no retry can help: stop now, not after Codex's reconnects
                    raise self.classify(stream.fatal, self.turn_failed(stream.fatal))
                if stream.thread_id and stream.thread_id != self.thread_id:
                    if self.thread_id:
                        log.info("codex.new_thread", stored=self.thread_id, reported=stream.thread_id)
                    self.thread_id = stream.thread_id
                    if self.config.reuse_session:
                        yield results.state("conversation", SESSION_KEY, stream.thread_id)
            code = await wait_exit(proc, deadline=deadline, prefix="codex", label="Codex")
            stderr = proc.stderr_excerpt()
        if stream.completed or stream.failed is not None:
            return
        if code != 0:
            if thread_id and not stream.thread_id and _RESUME_REJECTED.search(stderr):
                raise _ResumeRejected()
            detail = stream.error or stderr
            raise self.classify(
                f"Codex exited with status {code}" + (f": {detail}" if detail else ""),
                _failed(
                    "process_failed",
                    f"Codex exited with status {code}" + (f": {detail}" if detail else ""),
                    FailureKind.PROCESS_FAILED,
                    exit_code=code,
                ),
            )
        if stream.error is not None:
            raise self.classify(
                stream.error,
                _failed(
                    "stream_error", f"Codex reported an error: {stream.error}", FailureKind.STREAM_ERROR_EVENT
                ),
            )
        raise _failed(
            "no_result", "Codex ended without completing its turn", FailureKind.NO_RESULT, exit_code=code
        )

    def classify(self, message: str, default: RunnerFailure, info: Any = None) -> RunnerFailure:
        """`default`, unless Codex's `message` / `codexErrorInfo` say what went wrong (`failures.py`)."""
        default.message = self.redactor(default.message)
        return classify(self.redactor(message), default, info)

    def turn_failed(self, message: str) -> RunnerFailure:
        return _failed(
            "turn_failed", self.redactor(f"the Codex turn failed: {message}"), FailureKind.TURN_FAILED
        )

    # -- the outcome ----------------------------------------------------------------------------------

    def _turn_usage(self, stream: CodexExecStream) -> tuple[Any, list[result_pb2.RunResult]]:
        """This turn's usage (the reported total minus the stored one on the same thread) and the
        `state.updated` of the new total."""
        if stream.usage is None:
            return None, []
        reported, turn = stream.usage, stream.usage
        if self.total is not None and self.total[0] == self.thread_id and reported.covers(self.total[1]):
            turn = reported.minus(self.total[1])
        self.total = (self.thread_id, reported)
        stored = results.state("conversation", USAGE_KEY, {"thread_id": self.thread_id, **reported.as_dict()})
        return turn.to_proto(), [stored]

    async def conclude(self, stream: CodexExecStream) -> list[result_pb2.RunResult]:
        usage, out = self._turn_usage(stream)
        metadata = {"thread_id": self.thread_id, "session_id": self.thread_id}
        if isinstance(stream, CodexAppStream) and stream.interrupted:
            failure = _failed("interrupted", "Codex interrupted the turn", FailureKind.INTERRUPTED)
            failure.usage = usage
            return [*out, failure_result(failure)]
        if stream.failed is not None:
            info = getattr(stream, "failure_info", None)
            failure = self.classify(stream.failed, self.turn_failed(stream.failed), info)
            failure.usage = usage
            return [*out, failure_result(failure)]
        answer = stream.answer
        if answer is None:
            failure = _failed(
                "empty_response", "Codex finished without an answer", FailureKind.EMPTY_RESPONSE
            )
            failure.usage = usage
            return [*out, failure_result(failure)]
        artifacts = await export_outbox(self.ctx, self.workspace) if self.workspace is not None else []
        message = results.message(answer[1], message_id=answer[0], artifacts=artifacts)
        return [*out, message, results.completed(usage=usage, metadata=metadata)]


class CodexRunner(HarnessRunner):
    """Runs `codex exec --json` for each message; see README.md."""

    config_model = CodexConfig
    run_class = CodexRun
