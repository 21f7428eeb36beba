"""Answers to the requests `codex app-server` sends the client, decided by the config `approvals`.

Every server request gets exactly one answer, never later than `approval-timeout` (then: decline):

| request | answer |
| --- | --- |
| `item/commandExecution/requestApproval`, `execCommandApproval` (v1) | `{decision}` |
| `item/fileChange/requestApproval`, `applyPatchApproval` (v1) | `{decision}` |
| `item/permissions/requestApproval` | `{permissions}`: the granted subset |
| `mcpServer/elicitation/request` | `{action, content}` |
| `item/tool/requestUserInput` | `{answers}` (none: the runner has nobody to ask inside a turn) |
| `item/tool/call` (dynamic tools; the runner registers none) | `{contentItems, success: false}` |
| anything else | JSON-RPC error -32601 |

`approvals`: `workspace` (default) accepts a file change whose paths all lie inside the workspace and
declines commands (an approval request means Codex wants to run a command outside its sandbox or one
its policy does not trust; nobody can tell what it would write) and everything else; `decline`
declines everything; `accept` accepts everything (a machine dedicated to the bot); `ask` asks the
user through the host's structured interactions (a confirmation; its answer comes back on the run's
steering channel) and declines when nobody answers in time.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from agentrunner_runners.codex.jsonrpc import METHOD_NOT_FOUND, Incoming, RpcConnection

#: asks the user (`ask`): title, description → True (approve), False (decline), None (no answer)
Ask = Callable[[str, str], Awaitable[bool | None]]

COMMAND = ("item/commandExecution/requestApproval", "execCommandApproval")
FILE_CHANGE = ("item/fileChange/requestApproval", "applyPatchApproval")
_LEGACY = frozenset({"execCommandApproval", "applyPatchApproval"})


def inside(workspace: Path, path: str, cwd: str = "") -> bool:
    """Whether `path` (relative to `cwd`, else the workspace) resolves inside the workspace."""
    if not path:
        return False
    base = Path(cwd) if cwd else workspace
    target = Path(os.path.realpath(base / path))
    root = Path(os.path.realpath(workspace))
    return target == root or root in target.parents


def _changes_inside(workspace: Path, params: dict[str, Any]) -> bool:
    """A file-change request stays in the workspace: its item's paths (kept from `item/started`, or
    v1 `changes`) and any `grantRoot` resolve inside it."""
    paths = list(params.get("_paths") or [])
    changes = params.get("changes")
    if isinstance(changes, dict):  # v1 applyPatchApproval: {path: change}
        paths += list(changes)
    elif isinstance(changes, list):
        paths += [str(c.get("path") or "") for c in changes if isinstance(c, dict)]
    grant = params.get("grantRoot")
    if grant:
        paths.append(str(grant))
    cwd = str(params.get("cwd") or "")
    return bool(paths) and all(inside(workspace, p, cwd) for p in paths)


def _describe(request: Incoming) -> tuple[str, str]:
    p = request.params
    reason = str(p.get("reason") or "")
    if request.method in COMMAND:
        command = p.get("command")
        text = " ".join(map(str, command)) if isinstance(command, list) else str(command or "")
        return (
            "Codex asks to run a command",
            f"`{text}`\n\nin {p.get('cwd') or 'the workspace'}. {reason}".strip(),
        )
    if request.method in FILE_CHANGE:
        paths = ", ".join(map(str, p.get("_paths") or [])) or "files"
        return "Codex asks to change files", f"{paths}. {reason}".strip()
    if request.method == "item/permissions/requestApproval":
        return "Codex asks for more permissions", f"{p.get('permissions')}. {reason}".strip()
    return "An MCP server asks for approval", str(p.get("message") or p.get("serverName") or "")


class Approvals:
    """Answers one app-server's requests for a run (module docstring)."""

    def __init__(self, policy: str, workspace: Path, ask: Ask | None = None) -> None:
        self.policy = policy
        self.workspace = workspace
        self.ask = ask
        #: item id -> paths of a `fileChange` item seen in `item/started` (its approval names only the id)
        self.paths: dict[str, list[str]] = {}
        self.decisions: list[tuple[str, bool]] = []

    def saw_item(self, item: dict[str, Any]) -> None:
        if item.get("type") == "fileChange" and isinstance(item.get("changes"), list):
            self.paths[str(item.get("id"))] = [
                str(c.get("path") or "") for c in item["changes"] if isinstance(c, dict)
            ]

    async def _allowed(self, request: Incoming) -> bool:
        """The decision for an approval-like request under the policy."""
        if self.policy == "accept":
            return True
        if self.policy == "ask" and self.ask is not None:
            return bool(await self.ask(*_describe(request)))
        if self.policy == "workspace" and request.method in FILE_CHANGE:
            return _changes_inside(self.workspace, request.params)
        return False

    async def answer(self, conn: RpcConnection, request: Incoming) -> None:
        """Sends the one answer to `request` (declining if deciding fails or is cancelled)."""
        assert request.id is not None
        rid: int | str = request.id
        method, params = request.method, dict(request.params)
        if method in FILE_CHANGE:
            params["_paths"] = self.paths.get(str(params.get("itemId") or params.get("callId") or ""), [])
        request = Incoming(method, params, rid)
        if method in COMMAND or method in FILE_CHANGE:
            allowed = False
            try:
                allowed = await self._allowed(request)
            finally:
                self.decisions.append((method, allowed))
                if method in _LEGACY:
                    await conn.respond(rid, {"decision": "approved" if allowed else "denied"})
                else:
                    await conn.respond(rid, {"decision": "accept" if allowed else "decline"})
            return
        if method == "item/permissions/requestApproval":
            allowed = False
            try:
                allowed = await self._allowed(request)
            finally:
                self.decisions.append((method, allowed))
                granted = params.get("permissions") if allowed else {}
                await conn.respond(rid, {"permissions": granted if isinstance(granted, dict) else {}})
            return
        if method == "mcpServer/elicitation/request":
            allowed = False
            try:
                # only a tool-call approval can be accepted without content to fill in
                meta = params.get("_meta") or params.get("meta") or {}
                approval = isinstance(meta, dict) and meta.get("codex_approval_kind") == "mcp_tool_call"
                allowed = approval and await self._allowed(request)
            finally:
                self.decisions.append((method, allowed))
                await conn.respond(
                    rid,
                    {"action": "accept" if allowed else "decline", "content": {} if allowed else None},
                )
            return
        if method == "item/tool/requestUserInput":
            await conn.respond(rid, {"answers": {}})
            return
        if method == "item/tool/call":
            await conn.respond(
                rid,
                {"contentItems": [{"type": "inputText", "text": "no such tool"}], "success": False},
            )
            return
        await conn.respond_error(rid, METHOD_NOT_FOUND, f"method not found: {method}")
