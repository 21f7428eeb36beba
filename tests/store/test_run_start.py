"""The run start records a whole run or nothing, with input attachments too (issue 16, item 3).

A start used to record a run with attachments in steps (the run row, then the event and its
attachments, then the session): a store failure between them left a `RUNNING` run with no event or no
session, and the same event id was then taken (a corrected retry attached to the broken run).
"""

from __future__ import annotations

import base64
import datetime as dt

import pytest
from sqlalchemy import text

from agentrunner.errors import AgentRunnerError, InvalidArgumentError
from agentrunner.v1 import common_pb2, host_service_pb2
from agentrunner_host.auth.authz import issue_session
from agentrunner_host.ports import RunRecord, RunSession, utcnow
from agentrunner_host.store.fact_stores import FactStores
from tests.store.conftest import make_snapshot

pytestmark = pytest.mark.asyncio

#: larger than the inline cap: its body goes to a file, the rest to the database
_LARGE = bytes(range(256)) * 1200


def _record(run_id: str, event_id: str) -> RunRecord:
    return RunRecord(
        run_id=run_id,
        event_id=event_id,
        agent_id="agent_1",
        binding_id="bind_1",
        runner_id="plugin:acme/agent/default",
        conversation_id="c1",
        status=common_pb2.RUN_STATUS_RUNNING,
        deadline_at=utcnow() + dt.timedelta(minutes=5),
    )


def _event(event_id: str, data_url: str) -> host_service_pb2.EventEnvelope:
    envelope = host_service_pb2.EventEnvelope(event_id=event_id, event_type="message.received")
    envelope.conversation.conversation_id = "c1"
    envelope.input.text = "look at these"
    envelope.input.attachments.add(name="small.png", mime_type="image/png", data_url=data_url)
    envelope.input.attachments.add(name="large.bin", content=_LARGE)
    envelope.input.attachments.add(name="link", uri="https://example.com/a.pdf")
    return envelope


def _session(run_id: str, event_id: str) -> tuple[str, RunSession]:
    snap = make_snapshot(run_id=run_id, event_id=event_id)
    return issue_session(snap, utcnow() + dt.timedelta(minutes=5))


async def _rows(stores: FactStores, event_id: str, run_id: str) -> dict[str, int]:
    queries = {
        "runs": "SELECT count(*) FROM runs WHERE event_id = :e",
        "event_log": "SELECT count(*) FROM event_log WHERE record_id = :e",
        "transcript_items": "SELECT count(*) FROM transcript_items WHERE event_id = :e",
        "artifacts": "SELECT count(*) FROM artifacts WHERE run_id = :r",
        "run_sessions": "SELECT count(*) FROM run_sessions WHERE run_id = :r",
    }
    async with stores.db.read() as s:
        return {
            name: int((await s.execute(text(sql), {"e": event_id, "r": run_id})).scalar_one())
            for name, sql in queries.items()
        }


_NOTHING = {"runs": 0, "event_log": 0, "transcript_items": 0, "artifacts": 0, "run_sessions": 0}
_GOOD_URL = "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n").decode()


async def test_a_store_failure_mid_start_leaves_nothing_and_the_retry_starts_the_run(
    stores: FactStores,
) -> None:
    # another run holds the token hash the failing start's session will collide with (a write the
    # database refuses after the run row, the event and the attachments were written)
    _, taken = _session("run_other", "evt_other")
    await stores.start_run(_record("run_other", "evt_other"), _event("evt_other", _GOOD_URL), taken)
    _, fresh = _session("run_a", "evt_a")
    colliding = RunSession(
        run_id="run_a",
        token_hash=taken.token_hash,
        runner_id=fresh.runner_id,
        expires_at=fresh.expires_at,
        snapshot=fresh.snapshot,
    )
    with pytest.raises(AgentRunnerError):
        await stores.start_run(_record("run_a", "evt_a"), _event("evt_a", _GOOD_URL), colliding)
    assert await _rows(stores, "evt_a", "run_a") == _NOTHING
    assert await stores.ledger.get_run("run_a") is None

    token, session = _session("run_a", "evt_a")
    started = await stores.start_run(_record("run_a", "evt_a"), _event("evt_a", _GOOD_URL), session)
    assert started.record.run_id == "run_a" and started.recorded is not None
    assert started.record.status == common_pb2.RUN_STATUS_RUNNING
    assert [a.name for a in started.recorded.attachments] == ["small.png", "large.bin", "link"]
    assert started.recorded.attachments[1].size_bytes == len(_LARGE)
    assert await _rows(stores, "evt_a", "run_a") == {
        "runs": 1, "event_log": 1, "transcript_items": 1, "artifacts": 3, "run_sessions": 1,
    }  # fmt: skip
    assert (await stores.sessions.lookup(token)) is not None
    # the stored attachments are the ones the run context names, and their bodies read back
    large = await stores.artifacts.get(started.recorded.attachments[1].artifact_id)
    assert large is not None
    body, _ = await stores.artifacts.read_range(large, 0, len(_LARGE))
    assert body == _LARGE[: len(body)] and len(body) > 0
    # a redelivery of the event attaches to the run and writes nothing more
    again = await stores.start_run(_record("run_b", "evt_a"), _event("evt_a", _GOOD_URL), None)
    assert again.recorded is None and again.record.run_id == "run_a"
    assert (await _rows(stores, "evt_a", "run_a"))["artifacts"] == 3


async def test_a_refused_attachment_records_nothing(stores: FactStores) -> None:
    _, session = _session("run_r", "evt_r")
    bad = _event("evt_r", "data:image/png;base64,%%%")
    with pytest.raises(InvalidArgumentError):
        await stores.start_run(_record("run_r", "evt_r"), bad, session)
    assert await _rows(stores, "evt_r", "run_r") == _NOTHING
    started = await stores.start_run(_record("run_r", "evt_r"), _event("evt_r", _GOOD_URL), session)
    assert started.recorded is not None and len(started.recorded.attachments) == 3
