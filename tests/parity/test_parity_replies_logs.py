"""Replies, streamed replies, run logs and tool results through the real host (issue 8 phase 2).

Host in process on port 0, the SDK runner as its own process, real gRPC both ways; the transcript is
read back through the runner's own `ListHistory` call."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.protobuf import json_format

from agentrunner.v1 import common_pb2, result_pb2
from tests.parity.support import Host, finished, kinds, replies_of, results_of

pytestmark = pytest.mark.asyncio(loop_scope="module")


def report(updates: list[Any]) -> dict[str, Any]:
    for r in results_of(updates):
        if r.HasField("run_completed"):
            return json_format.MessageToDict(r.metadata).get("report", {})
    raise AssertionError(kinds(updates))


async def history(host: Host, conversation: str) -> list[dict[str, Any]]:
    """The conversation's transcript as the runner sees it through `ListHistory` (minus the probe's own
    user message)."""
    updates = await host.run("history", conversation_id=conversation)
    return [i for i in report(updates)["items"] if i["content"] != "history"]


async def test_reply_reaches_the_stream_before_finished_and_the_transcript(host: Host) -> None:
    updates = await host.run('reply {"text": "hi"}', conversation_id="c-reply")
    assert kinds(updates)[0] == "accepted"
    assert kinds(updates)[-2:] == ["result:run_completed", "finished"]
    (reply,) = replies_of(updates)
    assert (reply.mode, reply.message.content) == (common_pb2.REPLY_MODE_FULL, "hi")
    assert reply.run_id == updates[0].accepted.run_id
    assert kinds(updates).index("reply:FULL") < kinds(updates).index("result:run_completed")
    assert finished(updates).status == common_pb2.RUN_STATUS_COMPLETED  # a reply is output (rule 7)
    assert report(updates) == {"delivered": True}
    items = await history(host, "c-reply")
    assistant = [i for i in items if i["role"] == "assistant"]
    assert [i["content"] for i in assistant] == ["hi"]
    assert assistant[0]["metadata"]["source"] == "reply"
    assert assistant[0]["run_id"] == updates[0].accepted.run_id


async def test_streamed_reply_updates_in_order_finish_once_and_replay(host: Host) -> None:
    updates = await host.run("stream", conversation_id="c-stream")
    replies = replies_of(updates)
    assert [common_pb2.ReplyMode.Name(r.mode) for r in replies] == [
        "REPLY_MODE_UPDATE", "REPLY_MODE_UPDATE", "REPLY_MODE_UPDATE", "REPLY_MODE_FINISH",
    ]  # fmt: skip
    assert [r.message.content for r in replies] == ["Hel", "Hello, wor", "Hello, world", "Hello, world"]
    assert len({r.reply_id for r in replies}) == 1
    assert report(updates) == {"delivered": [True, True, True, True]}
    assistant = [i["content"] for i in await history(host, "c-stream") if i["role"] == "assistant"]
    assert assistant == ["Hello, world"]
    run_id = updates[0].accepted.run_id
    replay = await host.attach(run_id, 0)
    assert kinds(replay)[1:] == kinds(updates)[1:]
    assert [r.message.content for r in replies_of(replay)] == [r.message.content for r in replies]


async def test_reply_stream_that_raises_is_aborted_and_leaves_no_transcript(host: Host) -> None:
    updates = await host.run("stream_raise", conversation_id="c-abort")
    modes = [common_pb2.ReplyMode.Name(r.mode) for r in replies_of(updates)]
    assert modes == ["REPLY_MODE_UPDATE", "REPLY_MODE_ABORT"]
    assert finished(updates).status == common_pb2.RUN_STATUS_FAILED
    assert [i for i in await history(host, "c-abort") if i["role"] == "assistant"] == []


async def test_non_streaming_surface_gets_one_delivery_at_finish(host: Host) -> None:
    updates = await host.run("stream", conversation_id="c-nostream", streaming=False)
    replies = replies_of(updates)
    assert [(r.mode, r.message.content) for r in replies] == [(common_pb2.REPLY_MODE_FINISH, "Hello, world")]
    assert report(updates) == {"delivered": [False, False, False, True]}
    assistant = [i["content"] for i in await history(host, "c-nostream") if i["role"] == "assistant"]
    assert assistant == ["Hello, world"]


async def test_send_reply_state_machine_errors(host: Host) -> None:
    updates = await host.run("reply_errors", conversation_id="c-errors")
    got = json.loads(updates[-2].result.run_completed.message.content)
    assert got == {
        "first": "OK",
        "again": "ALREADY_EXISTS",
        "update_after_finish": "FAILED_PRECONDITION",
        "no_mode": "INVALID_ARGUMENT",
        "too_big": "PAYLOAD_TOO_LARGE",
    }


async def test_send_reply_without_a_delivery_target_is_unauthorized(host: Host) -> None:
    from agentrunner.v1 import context_pb2
    from tests.parity.support import run_request

    req = run_request("raw_reply", conversation_id="", event_type="schedule.triggered")
    req.event.trigger_source = context_pb2.TRIGGER_SOURCE_SCHEDULER
    updates = [u async for u in host.stub.Run(req, timeout=30)]
    got = json.loads(updates[-2].result.run_completed.message.content)
    assert got == {"reply_api": False, "outcome": "UNAUTHORIZED"}
    assert replies_of(updates) == []


async def test_run_logs_are_in_the_ledger_in_order_and_not_in_the_transcript(host: Host) -> None:
    updates = await host.run("log", conversation_id="c-log")
    logs = [r for r in results_of(updates) if r.HasField("run_log")]
    assert [result_pb2.RunLogLevel.Name(r.run_log.level) for r in logs] == [
        "RUN_LOG_LEVEL_INFO", "RUN_LOG_LEVEL_WARNING", "RUN_LOG_LEVEL_DEBUG",
    ]  # fmt: skip
    assert logs[0].run_log.text == "starting"
    assert json_format.MessageToDict(logs[0].run_log.fields) == {"step": 1}
    assert len(logs[2].run_log.text) == 10_000  # truncated by the host
    run_id = updates[0].accepted.run_id
    stored = await host.app.stores.ledger.list_results(run_id)
    stored_logs = [r for r in stored if r.HasField("run_log")]
    assert [r.sequence for r in stored_logs] == [r.sequence for r in logs]
    assert [r.sequence for r in stored] == list(range(1, len(stored) + 1))
    contents = [i["content"] for i in await history(host, "c-log")]
    assert "starting" not in contents and "careful now" not in contents
    assert "logged" in contents


async def test_call_tool_adds_started_and_completed_with_the_audited_call_id(host: Host) -> None:
    from sqlalchemy import select

    from agentrunner_host.store.schema import EventLogRow

    updates = await host.run("tool", conversation_id="c-tool")
    run_id = updates[0].accepted.run_id
    stored = await host.app.stores.ledger.list_results(run_id)
    started = [r.tool_call_started for r in stored if r.HasField("tool_call_started")]
    done = [r.tool_call_completed for r in stored if r.HasField("tool_call_completed")]
    assert len(started) == len(done) == 1
    assert started[0].tool_call_id == done[0].tool_call_id and started[0].tool_name == "current_time"
    assert not done[0].error_code
    async with host.app.db.read() as s:
        audits = (
            await s.scalars(
                select(EventLogRow).where(
                    EventLogRow.kind == "audit",
                    EventLogRow.run_id == run_id,
                    EventLogRow.event_type == "CallTool",
                )
            )
        ).all()
    assert [a.data.get("outcome") for a in audits] == ["OK"]
    assert started[0].tool_call_id in json.dumps(audits[0].data)
