"""The parts of a harness turn every CLI harness runner shares (claude-code, codex).

- `HarnessRunner`: the runner class of a harness: `run_class(ctx).results()` per run, the manifest in
  `manifest.yaml` next to the runner's module.
- `HarnessRun`: one object per run with the stages `prepare` → `turn` per message (the first, then
  steering follow-ups through `steered_turns`); an empty message is `<prefix>.empty_input` (an
  interaction answer that arrives after the turn that asked ended is acknowledged instead); a
  `RunnerFailure` raised inside a turn becomes its `run.failed` (with the usage it carries); the
  terminal result goes out after everything the run started is stopped and removed.
- `json_records`: a harness process's stdout as parsed JSON objects, until it closes stdout; the run
  deadline becomes `<prefix>.timeout` (retryable), a cancel becomes `cancelled`. Non-JSON records and
  JSON that is not an object are skipped with a warning, never a failure.
- `wait_exit`: the exit status once stdout ended, bounded by the same deadline.
- `mcp_servers`: the shared `mcp-servers-json` value (`[{name, ...}]` or `{name: {...}}`) validated to
  `{name: server}`, the name `langbot` reserved for the per-run bridge.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import structlog

from agentrunner import results
from agentrunner.context import RunContext
from agentrunner.failures import FailureKind, RunnerFailure
from agentrunner.harness.process import HarnessCancelled, HarnessProcess, HarnessTimeout
from agentrunner.harness.steering import steered_turns
from agentrunner.protocol import is_terminal
from agentrunner.runner import Runner
from agentrunner.v1 import result_pb2

log = structlog.get_logger("agentrunner.harness.turns")

_SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: the per-run LangBot MCP bridge's server name in every harness's MCP config
LANGBOT_SERVER = "langbot"


def harness_failure(
    prefix: str, code: str, message: str, kind: FailureKind, *, retryable: bool = False, **details: Any
) -> RunnerFailure:
    """`RunnerFailure("<prefix>.<code>", ...)` with `details` (none when empty)."""
    return RunnerFailure(f"{prefix}.{code}", message, kind=kind, retryable=retryable, details=details or None)


def failure_result(failure: RunnerFailure) -> result_pb2.RunResult:
    """The `run.failed` of a `RunnerFailure` (code, kind, retryable, details and usage kept)."""
    return results.failed(
        failure.code,
        failure.message,
        kind=failure.kind,
        retryable=failure.retryable,
        details=failure.details,
        usage=failure.usage,
    )


class HarnessRun:
    """Base of a harness runner's per-run object; subclasses implement `prepare` and `run_turn`."""

    #: failure code prefix (`claude_code`, `codex`) and the harness's name in messages
    prefix = "harness"
    label = "the harness"

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx

    async def results(self) -> AsyncIterator[result_pb2.RunResult]:
        """The run's results: the prepared harness's turns for the input, each ending in its terminal result;
        a `RunnerFailure` ends the run as `run.failed` with its code."""
        prompt = self.ctx.input.to_text().strip()
        if not prompt and not self.ctx.input.attachments and self.ctx.input.interaction is not None:
            # the answer to a question a turn asked (`agentrunner.harness.asking`) that came after that
            # turn ended: the host started a run for it; nothing is waiting for it any more
            yield results.message(
                f"That answer came after the {self.label} turn that asked for it had ended; nothing was done with it."
            )
            yield results.completed()
            return
        if not prompt and not self.ctx.input.attachments:
            yield results.failed(
                f"{self.prefix}.empty_input",
                f"the message has no text for {self.label}",
                kind=FailureKind.INPUT_INVALID,
            )
            return
        terminal: result_pb2.RunResult | None = None
        async with contextlib.AsyncExitStack() as stack:
            try:
                prepared = await self.prepare(stack)
            except RunnerFailure as failure:
                terminal = failure_result(failure)
            else:
                for result in prepared:
                    yield result
                first = prompt or "Please look at the attached files (see LANGBOT_CONTEXT.md)."
                async for result in steered_turns(self.ctx, first, self.turn):
                    if is_terminal(result):
                        terminal = result
                        break
                    yield result
        # the terminal result goes out after everything of the run is stopped and removed: the SDK
        # closes the stream (and the runner's task) at the terminal result
        if terminal is not None:
            yield terminal

    async def prepare(self, stack: contextlib.AsyncExitStack) -> list[result_pb2.RunResult]:
        """Sets up the run (workspace, bridge, ...) on `stack`; returns results to emit first. A
        `RunnerFailure` raised here is the run's `run.failed` (after `stack` is closed)."""
        raise NotImplementedError

    async def turn(self, prompt: str, index: int) -> AsyncIterator[result_pb2.RunResult]:
        """One turn; a `RunnerFailure` ends it with its `run.failed`."""
        try:
            async for result in self.run_turn(prompt, index):
                yield result
        except RunnerFailure as failure:
            yield failure_result(failure)

    def run_turn(self, prompt: str, index: int) -> AsyncIterator[result_pb2.RunResult]:
        """Yields the turn's results, ending with its terminal result (or raises `RunnerFailure`)."""
        raise NotImplementedError


class HarnessRunner(Runner):
    """A harness runner: each run is one `run_class` object (a `HarnessRun`)."""

    manifest_file = "manifest.yaml"
    run_class: ClassVar[type[HarnessRun]]

    async def run(self, ctx: RunContext) -> AsyncIterator[result_pb2.RunResult]:
        """One run: a fresh `run_class` object for this context, whose results are the run's."""
        async for result in self.run_class(ctx).results():
            yield result


def parse_json_record(record: bytes, *, event: str = "harness") -> dict[str, Any] | None:
    """One stdout record as a JSON object, or None (blank, non-JSON or non-object: logged)."""
    if not record.strip():
        return None
    try:
        line = json.loads(record)
    except ValueError:
        log.warning(f"{event}.non_json_line", length=len(record))
        return None
    if not isinstance(line, dict):
        log.warning(f"{event}.non_object_line")
        return None
    return line


def _timeout(prefix: str, message: str) -> RunnerFailure:
    return RunnerFailure(f"{prefix}.timeout", message, kind=FailureKind.TIMEOUT, retryable=True)


async def json_records(
    proc: HarnessProcess,
    ctx: RunContext,
    *,
    deadline: float,
    prefix: str,
    label: str,
    budget: float,
) -> AsyncIterator[dict[str, Any]]:
    """The harness's stdout as JSON objects until it closes stdout (module docstring)."""
    while True:
        try:
            record = await proc.next_record(deadline=deadline, cancelled=ctx.cancelled)
        except HarnessTimeout:
            raise _timeout(prefix, f"{label} did not finish within {budget:g} s") from None
        except HarnessCancelled:
            reason = ctx.cancel_reason or "the run was cancelled"
            raise RunnerFailure("cancelled", f"cancelled: {reason}", kind=FailureKind.CANCELLED) from None
        if record is None:
            return
        line = parse_json_record(record, event=prefix)
        if line is not None:
            yield line


async def wait_exit(proc: HarnessProcess, *, deadline: float, prefix: str, label: str) -> int:
    """The exit status after stdout ended; a harness that keeps running is `<prefix>.timeout`."""
    try:
        return await asyncio.wait_for(proc.wait(), max(deadline - time.monotonic(), 1.0))
    except TimeoutError:
        raise _timeout(prefix, f"{label} did not exit after its output ended") from None


def mcp_servers(value: Any) -> dict[str, dict[str, Any]]:
    """Extra MCP servers from `[{name, type, url, headers, command, args, env}]` or `{name: {...}}`
    (Claude Code's `mcpServers` shape; a JSON text is parsed) to `{name: entry}`."""
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else {}
    if value in (None, "", [], {}):
        return {}
    items: list[tuple[str, Any]]
    if isinstance(value, dict):
        items = list((value.get("mcpServers") or value).items())
    elif isinstance(value, list):
        items = [(str(v.get("name", "")) if isinstance(v, dict) else "", v) for v in value]
    else:
        raise ValueError("expected a list of MCP servers or a {name: server} object")
    out: dict[str, dict[str, Any]] = {}
    for name, entry in items:
        if not isinstance(entry, dict):
            raise ValueError(f"MCP server {name!r} must be an object")
        if not _SERVER_NAME.match(name) or name == LANGBOT_SERVER:
            raise ValueError(f"MCP server name {name!r} is invalid or reserved")
        server = {k: v for k, v in entry.items() if k != "name"}
        if not (server.get("url") or server.get("command")):
            raise ValueError(f"MCP server {name!r} needs a url or a command")
        out[name] = server
    return out


def env_names(value: dict[str, str]) -> dict[str, str]:
    """`env-json` checked: every key a valid environment variable name."""
    for key in value:
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            raise ValueError(f"{key!r} is not an environment variable name")
    return value
