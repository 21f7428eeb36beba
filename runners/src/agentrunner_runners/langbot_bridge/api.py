"""A plugin's API calls, forwarded to the host's ProxyService with the run's token.

The runtime relays every call a plugin's runner makes through `ctx.api` / `ctx.*` to its host, which the
bridge plays. `ApiRouter.handle` finds the open run the call names, checks the calling plugin owns it
(`runs.py`), and makes the matching ProxyService call through the run's `HostApi` (run token, run id,
traceparent, the run's deadline): the host's authorization snapshot, audit and limits apply exactly as
for a native runner. The bridge pre-checks nothing itself, so every refusal is the host's, audited.

Errors are answered in the runtime's own shape: `code: 1` with a message `"<REASON>: <message>"` (the
0.7.x runtime passes only the message on to the plugin, whose SDK raises `AgentAPIException` with code
`host.action_error`), and the structured error (`{code, message, retryable, details}`, this protocol's
spec code and reason) in `data.error` for peers that keep it. Calls this protocol does not offer (Box,
embeddings, vector stores, parsers, query variables, the admin control plane, anything outside a run)
get the same shape with reason `NOT_IMPLEMENTED`, at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import structlog

from agentrunner.errors import AgentRunnerError
from agentrunner_runners.langbot_bridge import calls
from agentrunner_runners.langbot_bridge.peer import ReplyError
from agentrunner_runners.langbot_bridge.runs import BridgedRun, RunTable

log = structlog.get_logger("agentrunner_runners.langbot_bridge.api")

Answer = dict[str, Any] | AsyncIterator[dict[str, Any]]
Call = Callable[[BridgedRun, dict[str, Any]], Awaitable[Answer]]
Settings = Callable[[str, str], dict[str, Any]]

#: the runtime's action name -> the forwarding call (`calls.py`)
ACTIONS: dict[str, Call] = {
    "count_tokens": calls.count_tokens,
    "invoke_llm": calls.invoke_llm,
    "invoke_llm_stream": calls.invoke_llm_stream,
    "invoke_rerank": calls.invoke_rerank,
    "get_tool_detail": calls.get_tool_detail,
    "call_tool": calls.call_tool,
    "retrieve_knowledge_base": calls.retrieve_knowledge,
    "get_prompt": calls.get_prompt,
    "history_page": calls.history_page,
    "history_search": calls.history_search,
    "event_get": calls.event_get,
    "event_page": calls.event_page,
    "steering_pull": calls.steering_pull,
    "state_get": calls.state_get,
    "state_set": calls.state_set,
    "state_delete": calls.state_delete,
    "state_list": calls.state_list,
    "set_binary_storage": calls.storage_set,
    "get_binary_storage": calls.storage_get,
    "get_binary_storage_keys": calls.storage_keys,
    "delete_binary_storage": calls.storage_delete,
    "run_get": calls.run_get,
    "run_list": calls.run_list,
    "run_events_page": calls.run_events_page,
    "run_cancel": calls.run_cancel,
    "run_append_result": calls.run_append_result,
    "run_finalize": calls.run_finalize,
    "reply_stream": calls.reply_stream,
    "call_platform_api": calls.call_platform_api,
}
VERSION = "agentrunner-langbot-bridge/0.1"


def not_offered(action: str, why: str) -> ReplyError:
    message = f"NOT_IMPLEMENTED: {action} {why}"
    return ReplyError(
        message,
        {"code": "not_implemented", "message": message, "retryable": False, "details": {"action": action}},
    )


def host_error(exc: AgentRunnerError) -> ReplyError:
    """A host refusal in the runtime's error shape (reason first in the message, structured in data)."""
    message = f"{exc.reason}: {exc.message}"
    details: dict[str, Any] = {"reason": exc.reason, **exc.metadata}
    if exc.retry_delay is not None:
        details["retry_delay_ms"] = int(exc.retry_delay * 1000)
    return ReplyError(
        message,
        {"code": exc.spec_code, "message": exc.message, "retryable": exc.retryable, "details": details},
    )


def _invalid(action: str, exc: Exception) -> ReplyError:
    message = f"INVALID_ARGUMENT: {action}: {exc}"[:500]
    return ReplyError(
        message, {"code": "invalid_argument", "message": message, "retryable": False, "details": {}}
    )


async def _typed_errors(action: str, items: AsyncIterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
    """A streamed answer whose host error mid-stream ends it in the runtime's error shape."""
    try:
        async for item in items:
            yield item
    except AgentRunnerError as exc:
        raise host_error(exc) from None
    except (ValueError, TypeError, KeyError) as exc:
        raise _invalid(action, exc) from None
    finally:
        closer = getattr(items, "aclose", None)
        if closer is not None:
            await closer()


def _refused(message: str, code: str = "unauthorized") -> ReplyError:
    return ReplyError(
        f"UNAUTHORIZED: {message}", {"code": code, "message": message, "retryable": False, "details": {}}
    )


class ApiRouter:
    """Serves what the runtime asks of its host: plugin settings, and plugins' API calls."""

    def __init__(self, runs: RunTable, settings: Settings) -> None:
        self._runs = runs
        self._settings = settings

    async def handle(self, action: str, data: dict[str, Any], context: dict[str, Any] | None) -> Answer:
        if action == "get_plugin_settings":
            return self._settings(str(data.get("plugin_author") or ""), str(data.get("plugin_name") or ""))
        if action == "get_langbot_version":
            return {"version": VERSION}
        call = ACTIONS.get(action)
        if call is None:
            raise not_offered(action, "is not offered by this host (see the bridge's documented limits)")
        run = self._open_run(action, data, context)
        try:
            answer = await call(run, data)
        except AgentRunnerError as exc:
            raise host_error(exc) from None
        except (ValueError, TypeError, KeyError) as exc:
            raise _invalid(action, exc) from None
        return answer if isinstance(answer, dict) else _typed_errors(action, answer)

    def _open_run(
        self, action: str, data: Mapping[str, Any], context: Mapping[str, Any] | None
    ) -> BridgedRun:
        run_id = data.get("run_id")
        if not isinstance(run_id, str) or not run_id:
            raise not_offered(action, "outside a run is not offered by this host (only Runner runs are)")
        run = self._runs.get(run_id)
        if run is None:
            raise _refused(f"run {run_id[:64]!r} is not open on this bridge", "unauthorized")
        caller = self._runs.plugin_of((context or {}).get("installation_uuid"))
        if caller != run.plugin_id:
            log.warning(
                "langbot.run_id_refused", action=action, run_id=run_id, caller=caller, owner=run.plugin_id
            )
            raise _refused(f"run {run_id[:64]!r} belongs to another plugin")
        return run
