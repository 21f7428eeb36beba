"""Context projection: what a harness needs to know about the run, as files in its workspace.

- `agent-context.json` (schema `langbot.agent_runner.external_harness_context.v1`): the event, the input
  (with the workspace paths of imported attachments), conversation, actor, the authorized resources, the
  available host APIs (and the LangBot MCP bridge's tools), state pointers and the workspace layout;
- `LANGBOT_CONTEXT.md`: the same for a model to read;
- skills from `resources.skills` as `<skills_dir>/<name>/SKILL.md`, read-only.

Nothing secret is written: no run token, no bridge token, no config values.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from google.protobuf import json_format

from agentrunner.context import RunContext
from agentrunner.harness.workspace import Workspace

SCHEMA = "langbot.agent_runner.external_harness_context.v1"
CONTEXT_JSON = "agent-context.json"
CONTEXT_MD = "LANGBOT_CONTEXT.md"
_SKILL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def _dict(message: Any) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def context_document(
    ctx: RunContext,
    workspace_dir: str | os.PathLike[str],
    *,
    attachments: Sequence[Mapping[str, Any]] = (),
    state_keys: Sequence[str] = (),
    mcp_tools: Sequence[str] = (),
    harness: str = "",
) -> dict[str, Any]:
    """The `agent-context.json` document (`workspace_dir`: the harness's working directory, as it sees it)."""
    raw = ctx.raw
    apis = {name: value for name, value in _dict(raw.context.available_apis).items() if value}
    resources = raw.resources
    state = {
        scope: {k: v for k, v in getattr(ctx.state, scope).items() if k in state_keys}
        for scope in ("conversation", "actor", "subject", "runner")
    }
    return {
        "schema": SCHEMA,
        "harness": harness,
        "run_id": ctx.run_id,
        "event": {
            "event_id": raw.event.event_id,
            "event_type": raw.event.event_type,
            "event_time": _dict(raw.event).get("event_time", ""),
            "source": raw.event.source,
        },
        "input": {"text": ctx.input.to_text(), "attachments": list(attachments)},
        "conversation": _dict(raw.conversation),
        "actor": {k: v for k, v in _dict(raw.actor).items() if k != "metadata"},
        "resources": {
            "models": [m.model_id for m in resources.models],
            "tools": [{"name": t.tool_name, "description": t.description} for t in resources.tools],
            "knowledge_bases": [{"kb_id": k.kb_id, "name": k.kb_name} for k in resources.knowledge_bases],
            "skills": [s.skill_name for s in resources.skills],
        },
        "available_apis": apis,
        "mcp": {"server": "langbot", "tools": list(mcp_tools)} if mcp_tools else None,
        "state": {scope: values for scope, values in state.items() if values},
        "workspace": {"root": os.fspath(workspace_dir), "inputs": "inputs/", "outbox": "outbox/"},
        "runtime": {
            "deadline_at": _dict(raw.runtime).get("deadline_at", ""),
            "trace_id": raw.runtime.trace_id,
            "locale": raw.runtime.locale,
            "timezone": raw.runtime.timezone,
        },
    }


def context_markdown(document: Mapping[str, Any]) -> str:
    """`LANGBOT_CONTEXT.md`: the context document as instructions a model reads."""
    lines = [
        "# LangBot run context",
        "",
        "You are answering a message that reached LangBot. This directory is your workspace for this",
        "conversation; it persists between turns.",
        "",
        f"- Event: `{document['event']['event_type']}` (id `{document['event']['event_id']}`)",
    ]
    conversation = document.get("conversation") or {}
    if conversation.get("conversation_id"):
        lines.append(f"- Conversation: `{conversation['conversation_id']}`")
    actor = document.get("actor") or {}
    if actor.get("actor_id"):
        name = actor.get("actor_name") or actor["actor_id"]
        lines.append(f"- From: {name} ({actor.get('actor_type', 'user')})")
    attachments = document["input"]["attachments"]
    if attachments:
        lines += ["", "## Attached files", ""]
        # a URL attachment or one that was not downloaded has no path: listed by its URL or name
        lines += [
            f"- `{a.get('path') or a.get('uri') or a.get('name') or a.get('artifact_id')}` "
            f"({a.get('mime_type') or 'unknown type'}, {a.get('size_bytes', 0)} bytes)"
            + (f": {a['note']}" if a.get("note") else "")
            for a in attachments
        ]
    lines += [
        "",
        "## Sending files back",
        "",
        "Files you write to `outbox/` are sent to the user as attachments after your answer.",
    ]
    mcp = document.get("mcp")
    if mcp:
        lines += ["", "## LangBot tools", "", "The MCP server `langbot` offers:", ""]
        lines += [f"- `{name}`" for name in mcp["tools"]]
    tools = document["resources"]["tools"]
    if tools:
        lines += ["", "Host tools you may call through `langbot_call_tool`:", ""]
        lines += [f"- `{t['name']}`: {t['description']}" for t in tools]
    kbs = document["resources"]["knowledge_bases"]
    if kbs:
        lines += ["", "Knowledge bases (`langbot_retrieve_knowledge`):", ""]
        lines += [f"- `{k['kb_id']}`: {k['name']}" for k in kbs]
    lines.append("")
    return "\n".join(lines)


def write_context(workspace: Workspace, document: Mapping[str, Any]) -> None:
    """Writes `agent-context.json` and `LANGBOT_CONTEXT.md` into the workspace (replacing old ones)."""
    workspace.write_text(CONTEXT_JSON, json.dumps(document, ensure_ascii=False, indent=2) + "\n")
    workspace.write_text(CONTEXT_MD, context_markdown(document))


def write_skills(workspace: Workspace, ctx: RunContext, skills_dir: str) -> list[str]:
    """Each authorized skill as `<skills_dir>/<name>/SKILL.md`, read-only; returns the names written.

    Skills of earlier runs that this run does not grant are removed, so a harness never sees a skill the
    binding no longer authorizes.
    """
    base = workspace.path(skills_dir)
    written: list[str] = []
    wanted = {s.skill_name: s for s in ctx.resources.skills if _SKILL_NAME.match(s.skill_name)}
    if base.is_dir() and not base.is_symlink():
        for old in base.iterdir():
            if old.name not in wanted and old.is_dir() and (old / ".langbot-skill").exists():
                _make_writable(old)
                _remove_tree(old)
    for name, skill in wanted.items():
        directory = base / name
        if directory.is_symlink():
            directory.unlink()
        if directory.exists():
            _make_writable(directory)
        directory.mkdir(parents=True, exist_ok=True)
        description = (skill.description or skill.display_name or name).replace("\n", " ")
        body = (
            f"---\nname: {name}\ndescription: {json.dumps(description, ensure_ascii=False)}\n---\n\n"
            f"# {skill.display_name or name}\n\n{skill.description}\n"
        )
        rel = f"{skills_dir}/{name}"
        workspace.write_text(f"{rel}/SKILL.md", body, mode=0o444)
        workspace.write_text(f"{rel}/.langbot-skill", "written by LangBot; read-only\n", mode=0o444)
        os.chmod(directory, 0o555)
        written.append(name)
    return written


def _make_writable(directory: Path) -> None:
    with contextlib.suppress(OSError):
        os.chmod(directory, stat.S_IRWXU)
        for child in directory.iterdir():
            if not child.is_symlink():
                os.chmod(child, stat.S_IRUSR | stat.S_IWUSR | (stat.S_IXUSR if child.is_dir() else 0))


def _remove_tree(directory: Path) -> None:
    import shutil

    shutil.rmtree(directory, ignore_errors=True)
