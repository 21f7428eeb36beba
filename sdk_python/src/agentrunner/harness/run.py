"""The stages every local harness run shares, and the per-session turn lock.

`prepare_workspace` (in one call, registered on the run's exit stack): the workspace root checked
against the allowlist, retention swept, the conversation's workspace opened and marked in use, its
path stored in state (`external.working_directory`) when it changed, attachments imported, the LangBot
MCP bridge started (its token added to the redactor), `agent-context.json` / `LANGBOT_CONTEXT.md` and
the skills written.

`session_lock(key)`: turns on one external session (a Claude session, a Codex thread) run one at a
time in this process; a harness that cannot run two turns of one session at once takes it around each
turn, keyed by a stable external session key.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
import weakref
from collections.abc import AsyncIterator, Sequence
from typing import Any

from agentrunner import results
from agentrunner.context import RunContext
from agentrunner.harness.external_tools import ExternalTools
from agentrunner.harness.files import import_attachments
from agentrunner.harness.mcp_bridge import McpBridge
from agentrunner.harness.projection import context_document, write_context, write_skills
from agentrunner.harness.redact import Redactor
from agentrunner.harness.workspace import (
    WORKING_DIRECTORY_KEY,
    RetentionPolicy,
    Workspace,
    check_root,
    open_workspace,
    sweep,
)
from agentrunner.v1 import result_pb2

RETENTION = RetentionPolicy()


@dataclasses.dataclass(slots=True)
class Prepared:
    """What `prepare_workspace` set up for the run."""

    workspace: Workspace
    bridge: McpBridge | None
    attachments: list[dict[str, Any]]
    #: results to emit before anything else (the working directory's `state.updated`)
    results: list[result_pb2.RunResult]


async def prepare_workspace(
    ctx: RunContext,
    stack: contextlib.AsyncExitStack,
    *,
    root: str,
    harness: str,
    redactor: Redactor,
    enable_mcp: bool = True,
    state_keys: Sequence[str] = (),
    skills_dir: str = "",
    retention: RetentionPolicy = RETENTION,
) -> Prepared:
    """Workspace, attachments, MCP bridge and context files of a local harness run (module docstring)."""
    chosen = check_root(root or None)
    sweep(chosen, retention)
    stored = str(ctx.state.conversation.get(WORKING_DIRECTORY_KEY) or "")
    workspace = open_workspace(
        chosen, conversation_id=ctx.conversation.conversation_id, run_id=ctx.run_id, stored=stored
    )
    stack.enter_context(workspace.in_use())
    out: list[result_pb2.RunResult] = []
    if ctx.conversation.conversation_id and stored != str(workspace.directory):
        out.append(results.state("conversation", WORKING_DIRECTORY_KEY, str(workspace.directory)))
    attachments = await import_attachments(ctx, workspace)
    bridge = None
    if enable_mcp and ctx.api.available:
        bridge = await stack.enter_async_context(McpBridge(ctx, tools=ExternalTools(ctx)))
        redactor.add(bridge.token)
    document = context_document(
        ctx,
        workspace.directory,
        attachments=attachments,
        state_keys=[*state_keys, WORKING_DIRECTORY_KEY],
        mcp_tools=bridge.tool_names if bridge else [],
        harness=harness,
    )
    write_context(workspace, document)
    if skills_dir:
        write_skills(workspace, ctx, skills_dir)
    return Prepared(workspace, bridge, attachments, out)


def turn_deadline(ctx: RunContext, budget_end: float, margin: float = 0.5) -> float:
    """A monotonic deadline: the runner's own budget end, or the run deadline minus `margin` if sooner."""
    remaining = ctx.remaining()
    if remaining is not None:
        budget_end = min(budget_end, time.monotonic() + remaining - margin)
    return budget_end


_LOCKS: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()


@contextlib.asynccontextmanager
async def session_lock(key: str) -> AsyncIterator[None]:
    """Serialises turns on one external session key in this process."""
    lock = _LOCKS.get(key)
    if lock is None:
        lock = _LOCKS[key] = asyncio.Lock()
    async with lock:
        yield
