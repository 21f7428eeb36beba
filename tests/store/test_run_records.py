"""`ListRuns` and `DownloadArtifact` without a channel (`run/records.py:RunRecords` on a migrated
database): a scoped client lists and reads only what its runs made; an artifact streams its reference
first, then its body in chunks."""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any

import pytest

from agentrunner.errors import NotFoundError, RuntimeFailureError, UnauthorizedError
from agentrunner.v1 import common_pb2, host_service_pb2
from agentrunner_host.auth.clients import ClientGate, Principal
from agentrunner_host.config.model import Selector, parse_config
from agentrunner_host.ports import RunRecord, utcnow
from agentrunner_host.registry.bindings import BindingResolver
from agentrunner_host.run.access import TRUSTED, Caller, RunAccess
from agentrunner_host.run.records import RunRecords
from agentrunner_host.store.fact_stores import FactStores
from tests.host.test_host_access import Audit, Transport

pytestmark = pytest.mark.asyncio


class Ledger:
    """`RunService.get_run` over the real ledger (NOT_FOUND for an unknown run)."""

    def __init__(self, stores: FactStores) -> None:
        self.stores = stores

    async def get_run(self, run_id: str) -> RunRecord:
        record = await self.stores.ledger.get_run(run_id)
        if record is None:
            raise NotFoundError(f"run {run_id!r} does not exist")
        return record

    async def cancel_run(self, run_id: str, reason: str = "") -> RunRecord:
        raise AssertionError("not cancelled in these tests")


async def _start(stores: FactStores, run_id: str, bot_id: str) -> None:
    record = RunRecord(
        run_id=run_id, event_id=f"evt-{run_id}", agent_id="agent_1", binding_id="bind_1",
        runner_id="plugin:acme/agent/default", conversation_id="c1", bot_id=bot_id,
        status=common_pb2.RUN_STATUS_RUNNING, deadline_at=utcnow() + dt.timedelta(minutes=5),
    )  # fmt: skip
    envelope = host_service_pb2.EventEnvelope(event_id=record.event_id, event_type="message.received")
    envelope.conversation.conversation_id = "c1"
    envelope.input.text = "hi"
    await stores.start_run(record, envelope)


def _records(stores: FactStores, page_max_bytes: int = 1 << 20) -> tuple[RunRecords, Audit, ClientGate]:
    audit = Audit()
    gate = ClientGate(parse_config({}), audit, listen_address="127.0.0.1:0")
    access = RunAccess(Ledger(stores), BindingResolver(parse_config({})))
    return RunRecords(access, Ledger(stores), stores.ledger, stores.artifacts, page_max_bytes), audit, gate


def _caller(gate: ClientGate, method: str, bots: Selector = "*") -> Caller:
    principal = Principal("client-1", frozenset({"get", "list_runs"}), bots=bots)
    return Caller(principal, functools.partial(gate.refuse, Transport(), principal, method))


async def _body(stream: Any) -> tuple[list[host_service_pb2.HostServiceDownloadArtifactResponse], bytes]:
    chunks = [c async for c in stream]
    return chunks, b"".join(c.data for c in chunks)


async def test_a_scoped_client_lists_only_the_runs_of_its_bots(stores: FactStores) -> None:
    for run_id, bot in (("run_1", "bot-a"), ("run_2", "bot-b"), ("run_3", "bot-a")):
        await _start(stores, run_id, bot)
    records, _, gate = _records(stores, page_max_bytes=64 * 1024)
    everything = await records.list_runs(TRUSTED, host_service_pb2.ListRunsRequest())
    assert [r.run_id for r in everything.runs] == ["run_3", "run_2", "run_1"]  # newest first
    assert everything.max_page_bytes == 64 * 1024
    scoped = await records.list_runs(_caller(gate, "ListRuns", ["bot-a"]), host_service_pb2.ListRunsRequest())
    assert [r.run_id for r in scoped.runs] == ["run_3", "run_1"]
    page = await records.list_runs(
        _caller(gate, "ListRuns", ["bot-a"]), host_service_pb2.ListRunsRequest(page_size=1)
    )
    assert [r.run_id for r in page.runs] == ["run_3"] and page.next_page_token

    without = RunRecords(records.access, Ledger(stores))
    with pytest.raises(RuntimeFailureError, match="run listing is not available"):
        await without.list_runs(TRUSTED, host_service_pb2.ListRunsRequest())


async def test_an_artifact_streams_its_reference_then_its_body_to_a_client_that_sees_its_run(
    stores: FactStores,
) -> None:
    await _start(stores, "run_1", "bot-a")
    body = bytes(range(256)) * 1000  # larger than one chunk
    ref = await stores.artifacts.put_bytes(body, source="runner", conversation_id="c1", run_id="run_1")
    records, audit, gate = _records(stores)

    chunks, data = await _body(
        await records.download_artifact(_caller(gate, "DownloadArtifact", ["bot-a"]), ref.artifact_id)
    )
    assert data == body and len(chunks) > 1
    assert chunks[0].artifact.artifact_id == ref.artifact_id and chunks[0].offset == 0
    assert not any(c.HasField("artifact") for c in chunks[1:])

    with pytest.raises(UnauthorizedError):
        await records.download_artifact(_caller(gate, "DownloadArtifact", ["bot-b"]), ref.artifact_id)
    assert [(r["method"], r["resource"]) for r in audit.records] == [
        ("HostService.DownloadArtifact", "run:run_1")
    ]

    orphan = await stores.artifacts.put_bytes(b"of no run", source="tool", conversation_id="c1")
    with pytest.raises(UnauthorizedError, match="may not read artifact"):
        await records.download_artifact(_caller(gate, "DownloadArtifact", ["bot-a"]), orphan.artifact_id)
    _, data = await _body(
        await records.download_artifact(_caller(gate, "DownloadArtifact"), orphan.artifact_id)
    )
    assert data == b"of no run"

    expired = await stores.artifacts.put_bytes(
        b"old", source="tool", conversation_id="c1", expires_at=utcnow() - dt.timedelta(seconds=1)
    )
    for missing in (expired.artifact_id, "art_nope"):
        with pytest.raises(NotFoundError, match="artifact not found"):
            await records.download_artifact(TRUSTED, missing)
