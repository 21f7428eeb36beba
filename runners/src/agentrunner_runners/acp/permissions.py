"""Answers to `session/request_permission`, decided by the config `permissions`.

| policy | answer |
| --- | --- |
| `workspace` (default) | allow once: a LangBot bridge tool (the host authorizes each call against the run's grants), a `read` / `search` / `think` call, an `edit` / `delete` / `move` whose locations all lie inside the workspace; reject once: everything else (commands, fetches, anything outside the workspace or without locations) |
| `allow` | allow once (a machine dedicated to the bot) |
| `reject` | reject once, except the LangBot bridge tools |
| `ask` | the user decides through the host's structured interactions (a confirmation; the answer comes back on the run's steering channel); nobody answering in `approval-timeout` is a rejection |

The answer picks the agent's own option of the decided kind (`allow_once`, else `allow_always`;
`reject_once`, else `reject_always`); an agent that offers none of the kind gets the `cancelled`
outcome, which every agent reads as "not allowed". A cancelled run answers every open request
`cancelled` (ACP: the client MUST).
"""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from acp import schema

#: asks the user: title, description -> True (allow), False (reject), None (no answer)
Ask = Callable[[str, str], Awaitable[bool | None]]

READ_KINDS = frozenset({"read", "search", "think"})
EDIT_KINDS = frozenset({"edit", "delete", "move"})


def inside(workspace: Path, path: str) -> bool:
    """Whether `path` (absolute, or relative to the workspace) resolves inside the workspace."""
    if not path:
        return False
    root = Path(os.path.realpath(workspace))
    target = Path(os.path.realpath(root / path))
    return target == root or root in target.parents


def tool_name(call: schema.ToolCallUpdate) -> str:
    """The agent's own name of the tool (`_meta.claudeCode.toolName` and the like), else the title."""
    meta = call.field_meta or {}
    for value in meta.values():
        if isinstance(value, dict) and isinstance(value.get("toolName"), str):
            return str(value["toolName"])
    return call.title or "tool"


def is_langbot_tool(call: schema.ToolCallUpdate, names: Sequence[str]) -> bool:
    """Whether the call is one of the LangBot bridge's tools (named in its title, tool name or input)."""
    if not names:
        return False
    text = " ".join([tool_name(call), call.title or "", json.dumps(call.raw_input, default=str)[:2000]])
    return any(name in text for name in names)


def describe(call: schema.ToolCallUpdate) -> tuple[str, str]:
    """A title and a description of the call for the user."""
    title = f"The agent asks to use {tool_name(call)}"
    parts = [call.title or ""]
    if call.locations:
        parts.append("paths: " + ", ".join(loc.path for loc in call.locations))
    if call.raw_input is not None:
        parts.append("input: " + json.dumps(call.raw_input, ensure_ascii=False, default=str)[:1500])
    return title, "\n\n".join(p for p in parts if p)


def pick(options: Sequence[schema.PermissionOption], allow: bool) -> schema.RequestPermissionResponse:
    """The agent's option of the decided kind, else the `cancelled` outcome."""
    kinds = ("allow_once", "allow_always") if allow else ("reject_once", "reject_always")
    for kind in kinds:
        for option in options:
            if option.kind == kind:
                return schema.RequestPermissionResponse(
                    outcome=schema.AllowedOutcome(outcome="selected", option_id=option.option_id)
                )
    return cancelled()


def cancelled() -> schema.RequestPermissionResponse:
    return schema.RequestPermissionResponse(outcome=schema.DeniedOutcome(outcome="cancelled"))


class Permissions:
    """Decides one run's permission requests (module docstring)."""

    def __init__(
        self, policy: str, workspace: Path | None, langbot_tools: Sequence[str], ask: Ask | None = None
    ) -> None:
        self.policy = policy
        self.workspace = workspace
        self.langbot_tools = list(langbot_tools)
        self.ask = ask
        #: (tool name, allowed) per request, in order
        self.decisions: list[tuple[str, bool]] = []

    def _in_workspace(self, call: schema.ToolCallUpdate) -> bool:
        if self.workspace is None or not call.locations:
            return False
        return all(inside(self.workspace, loc.path) for loc in call.locations)

    async def allowed(self, call: schema.ToolCallUpdate) -> bool:
        """The policy's decision for `call`."""
        if self.policy == "allow" or is_langbot_tool(call, self.langbot_tools):
            return True
        if self.policy == "ask" and self.ask is not None:
            return bool(await self.ask(*describe(call)))
        if self.policy != "workspace":
            return False
        kind = call.kind or ""
        if kind in READ_KINDS:
            return not call.locations or self._in_workspace(call)
        return kind in EDIT_KINDS and self._in_workspace(call)

    async def answer(
        self, call: schema.ToolCallUpdate, options: Sequence[schema.PermissionOption]
    ) -> schema.RequestPermissionResponse:
        allowed = False
        try:
            allowed = await self.allowed(call)
        finally:
            self.decisions.append((tool_name(call), allowed))
        return pick(options, allowed)


def summary(decisions: Sequence[tuple[str, bool]]) -> dict[str, Any]:
    return {"allowed": [n for n, ok in decisions if ok], "rejected": [n for n, ok in decisions if not ok]}
