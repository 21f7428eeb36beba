"""Opening the turn's ACP session: `session/resume` or `session/load` of the stored id when the agent
advertises it (resume first: it does not replay), else `session/new`; the MCP servers handed to the
agent; the session mode the runner's permission policy needs.

`session/load` replays the whole history as `session/update`s before it answers: the client drops
them (`AcpClient.replaying`), they were earlier turns' output. A stored session the agent refuses is
logged and replaced by a new one.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from acp import RequestError, schema

from agentrunner.harness import McpBridge
from agentrunner.harness.mcp_bridge import TOKEN_ENV, URL_ENV
from agentrunner.harness.turns import LANGBOT_SERVER
from agentrunner_runners.acp.config import AcpConfig

log = structlog.get_logger("agentrunner_runners.acp")

McpServer = schema.HttpMcpServer | schema.SseMcpServer | schema.McpServerStdio
Rpc = Callable[[str, Awaitable[Any]], Awaitable[Any]]


def _headers(value: Any) -> list[schema.HttpHeader]:
    if isinstance(value, dict):
        return [schema.HttpHeader(name=str(k), value=str(v)) for k, v in value.items()]
    return []


def mcp_servers(
    config: AcpConfig, bridge: McpBridge | None, caps: schema.McpCapabilities | None
) -> tuple[list[McpServer], list[str]]:
    """The servers for `session/new` / `resume` / `load`, and warnings about those left out."""
    caps = caps or schema.McpCapabilities()
    servers: list[McpServer] = []
    warnings: list[str] = []
    for name, entry in config.mcp_servers.items():
        if entry.get("url"):
            kind = str(entry.get("type") or "http")
            if kind == "sse" and caps.sse:
                servers.append(
                    schema.SseMcpServer(
                        type="sse", name=name, url=entry["url"], headers=_headers(entry.get("headers"))
                    )
                )
            elif kind != "sse" and caps.http:
                servers.append(
                    schema.HttpMcpServer(
                        type="http", name=name, url=entry["url"], headers=_headers(entry.get("headers"))
                    )
                )
            else:
                warnings.append(f"MCP server {name!r} left out: the agent does not accept {kind} MCP servers")
            continue
        env = entry.get("env") if isinstance(entry.get("env"), dict) else {}
        servers.append(
            schema.McpServerStdio(
                name=name,
                command=str(entry["command"]),
                args=[str(a) for a in entry.get("args") or []],
                env=[schema.EnvVariable(name=str(k), value=str(v)) for k, v in (env or {}).items()],
            )
        )
    if bridge is not None:
        servers.append(_bridge(config, bridge, caps))
    return servers, warnings


def _bridge(config: AcpConfig, bridge: McpBridge, caps: schema.McpCapabilities) -> McpServer:
    """The LangBot bridge: HTTP (its token in a header, not in any environment) when the agent takes
    HTTP servers, else the stdio proxy (URL and token in the proxy's environment)."""
    transport = config.mcp_bridge_transport
    if transport == "http" or (transport == "auto" and caps.http):
        return schema.HttpMcpServer(
            type="http",
            name=LANGBOT_SERVER,
            url=bridge.url,
            headers=[schema.HttpHeader(name="Authorization", value=f"Bearer {bridge.token}")],
        )
    return schema.McpServerStdio(
        name=LANGBOT_SERVER,
        command=sys.executable,
        args=["-m", "agentrunner.harness.mcp_proxy"],
        env=[
            schema.EnvVariable(name=URL_ENV, value=bridge.url),
            schema.EnvVariable(name=TOKEN_ENV, value=bridge.token),
        ],
    )


def resume_method(caps: schema.AgentCapabilities | None) -> str:
    """`resume`, `load` or "" (the agent can do neither)."""
    if caps is None:
        return ""
    if caps.session_capabilities is not None and caps.session_capabilities.resume is not None:
        return "resume"
    return "load" if caps.load_session else ""


def modes_of(response: Any) -> schema.SessionModeState | None:
    modes = getattr(response, "modes", None)
    return modes if isinstance(modes, schema.SessionModeState) else None


def mode_warning(wanted: str, modes: schema.SessionModeState | None) -> str:
    """Why `wanted` cannot be set ("" when it can or need not be)."""
    if not wanted or (modes is not None and modes.current_mode_id == wanted):
        return ""
    if modes is None:
        return f"the agent offers no session modes; session mode {wanted!r} not set"
    ids = [m.id for m in modes.available_modes]
    if wanted not in ids:
        return f"the agent offers no session mode {wanted!r} (it offers {', '.join(ids) or 'none'}); not set"
    return ""


def rejected_message(method: str, session_id: str, exc: RequestError) -> str:
    return f"the agent could not {method} session {session_id} ({str(exc)[:200]}); starting a new one"
