"""What a run result writes besides its ledger row, on a caller's sync connection (`apply_sync`).

Every write path of results shares these effects, each written once, here: the event-log entry
(every kind but `message.delta`; tool results as `tool`, `action.requested` as `action`, `run.failed`
as `error` telemetry) and the assistant transcript item (`message.completed`; `run.completed.message`
unless the run wrote one). `FactStores` runs them on the writer's connection (`Database.run_write`) or,
for a batch with an effect only an async store writes (`artifact.created`, `state.updated`), on its
session's connection.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.engine import Connection

from agentrunner.protocol import result_type
from agentrunner.results import is_answer
from agentrunner.v1 import common_pb2, result_pb2
from agentrunner_host.ports import AuthorizationSnapshot
from agentrunner_host.store.common import message_to_json, struct_to_dict
from agentrunner_host.store.events import append_sync as append_event_sync
from agentrunner_host.store.events import log_values
from agentrunner_host.store.state import scope_name
from agentrunner_host.store.transcript import append_sync as append_transcript_sync
from agentrunner_host.store.transcript import has_assistant_item_sync

#: result kinds whose effects are all in `apply_sync`, so they can be written on the writer's connection
#: (`run_write`); the others need a session (`FactStores._apply`)
SYNC_KINDS = frozenset(
    {
        "message_delta",
        "message_completed",
        "run_completed",
        "run_failed",
        "tool_call_started",
        "tool_call_completed",
        "action_requested",
    }
)
RESULT_KINDS = {
    "tool_call_started": "tool",
    "tool_call_completed": "tool",
    "action_requested": "action",
    "run_failed": "error",
}


def apply_sync(conn: Connection, snapshot: AuthorizationSnapshot, result: result_pb2.RunResult) -> None:
    """The effects of a result besides its ledger row that every write path shares, each written
    once, here: the event log entry (every kind but `message.delta`) and the assistant transcript
    item (`message.completed`; `run.completed.message` unless the run wrote one). Runs on the
    writer's connection (`run_write`) and, through `FactStores._apply`, on a session's."""
    kind = result.WhichOneof("payload")
    if kind == "message_delta":
        return
    append_event_sync(conn, log_values(**_log_fields(snapshot, result)))
    if kind == "message_completed":
        _assistant_sync(conn, snapshot, result.message_completed.message)
    elif kind == "run_completed" and result.run_completed.HasField("message"):
        if not has_assistant_item_sync(conn, snapshot.run_id):
            _assistant_sync(conn, snapshot, result.run_completed.message)


def _assistant_sync(
    conn: Connection, snapshot: AuthorizationSnapshot, message: common_pb2.AssistantMessage
) -> None:
    if not snapshot.conversation_id:
        return
    if not (message.content or message.contents or message.artifacts) or not is_answer(message):
        return  # reasoning and progress stay in the run ledger only
    append_transcript_sync(
        conn,
        conversation_id=snapshot.conversation_id,
        thread_id=snapshot.thread_id,
        role="assistant",
        content=message.content,
        contents=list(message.contents),
        artifacts=list(message.artifacts),
        event_id=snapshot.event_id,
        run_id=snapshot.run_id,
        metadata={"message_id": message.message_id} if message.message_id else None,
    )


def _log_fields(snapshot: AuthorizationSnapshot, result: result_pb2.RunResult) -> dict[str, Any]:
    kind = result.WhichOneof("payload")
    return {
        "kind": RESULT_KINDS.get(kind or "", "result"),
        "event_type": result_type(result) or kind or "",
        "record_id": f"{snapshot.run_id}:{result.sequence}",
        "conversation_id": snapshot.conversation_id,
        "thread_id": snapshot.thread_id,
        "run_id": snapshot.run_id,
        "runner_id": snapshot.runner_id,
        "bot_id": snapshot.bot_id,
        "workspace_id": snapshot.workspace_id,
        "source": "runner",
        "summary": _summary(result),
        "data": _telemetry(result),
    }


def _summary(result: result_pb2.RunResult) -> str:
    kind = result.WhichOneof("payload")
    if kind == "message_completed":
        return result.message_completed.message.content
    if kind == "run_completed":
        return result.run_completed.message.content or result.run_completed.finish_reason
    if kind == "run_failed":
        return f"{result.run_failed.code}: {result.run_failed.message}"
    if kind == "tool_call_started":
        return result.tool_call_started.tool_name
    if kind == "tool_call_completed":
        done = result.tool_call_completed
        return f"{done.tool_name} {'failed: ' + done.error_code if done.error_code else 'ok'}"
    if kind == "action_requested":
        return result.action_requested.action
    if kind == "artifact_created":
        return result.artifact_created.artifact.name or result.artifact_created.artifact.mime_type
    if kind == "state_updated":
        return f"{scope_name(result.state_updated.scope) if result.state_updated.scope else '?'}:{result.state_updated.key}"
    return ""


def _telemetry(result: result_pb2.RunResult) -> dict[str, Any]:
    """Small structured data for the log; bodies and state values are not copied."""
    kind = result.WhichOneof("payload")
    data: dict[str, Any] = {"sequence": result.sequence}
    if kind == "tool_call_started":
        data.update(
            tool_call_id=result.tool_call_started.tool_call_id, tool_name=result.tool_call_started.tool_name
        )
        if result.tool_call_started.HasField("parameters"):
            data["parameters"] = struct_to_dict(result.tool_call_started.parameters)
    elif kind == "tool_call_completed":
        done = result.tool_call_completed
        data.update(
            tool_call_id=done.tool_call_id,
            tool_name=done.tool_name,
            error_code=done.error_code,
            error_message=done.error_message,
        )
        if done.HasField("result_preview"):
            data["result_preview"] = struct_to_dict(done.result_preview)
    elif kind == "action_requested":
        data.update(message_to_json(result.action_requested))
    elif kind == "run_failed":
        data.update(code=result.run_failed.code, retryable=result.run_failed.retryable)
    elif kind == "run_completed":
        data["finish_reason"] = result.run_completed.finish_reason
    elif kind == "state_updated":
        data.update(scope=result.state_updated.scope, key=result.state_updated.key)
    elif kind == "artifact_created":
        ref = result.artifact_created.artifact
        data.update(name=ref.name, mime_type=ref.mime_type, size_bytes=len(result.artifact_created.content))
    if result.HasField("usage"):
        data["usage"] = message_to_json(result.usage)
    return data
