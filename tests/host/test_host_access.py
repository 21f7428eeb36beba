"""What a HostService client may reach, without a channel: `run/access.py:RunAccess` (runs it sees,
events it may send, artifacts it may read), `run/records.py:RunRecords` (get, cancel) and the rule that
a run open on another replica is not cancelled here (`RunService.cancel_run`). Refusals go through the
real client gate, so each is audited as a refused call over gRPC would be."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from agentrunner.errors import FailedPreconditionError, InvalidArgumentError, NotFoundError, UnauthorizedError
from agentrunner.protocol import INTERACTION_SUBMITTED_EVENT
from agentrunner.v1 import common_pb2, host_service_pb2, result_pb2
from agentrunner_host.auth.clients import ClientGate, Principal
from agentrunner_host.config.model import Selector, parse_config
from agentrunner_host.ports import RunRecord
from agentrunner_host.run.access import TRUSTED, Caller, RunAccess
from agentrunner_host.run.records import RunRecords
from tests.host.test_execution import RUNNER_ID, STALL, MemoryStore, result, service

pytestmark = pytest.mark.asyncio


class Audit:
    """The audit log a refusal is recorded in (`AuditSink`)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    async def record_proxy_call(self, **record: Any) -> None:
        self.records.append(record)


class Transport:
    """What the gate reads of a call's transport context for an audit record."""

    def peer(self) -> str:
        return "ipv4:10.0.0.7:5000"

    def invocation_metadata(self) -> tuple[()]:
        return ()

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}


class CountingStore(MemoryStore):
    """Counts the cancels the ledger was asked to note."""

    def __init__(self) -> None:
        super().__init__()
        self.cancels: list[str] = []

    async def request_cancel(self, run_id: str, at: Any) -> RunRecord | None:
        self.cancels.append(run_id)
        return await super().request_cancel(run_id, at)


def _run(run_id: str, bot_id: str, status: int = common_pb2.RUN_STATUS_RUNNING) -> RunRecord:
    return RunRecord(
        run_id=run_id, event_id=f"evt-{run_id}", agent_id="a", binding_id="b", runner_id=RUNNER_ID,
        bot_id=bot_id, status=status,  # type: ignore[arg-type]
    )  # fmt: skip


def _setup() -> tuple[RunAccess, RunRecords, CountingStore, ClientGate, Audit]:
    store = CountingStore()
    runs, _, _ = service([], store)
    store.runs["run_a"] = _run("run_a", "bot-a")
    store.runs["run_b"] = _run("run_b", "bot-b")
    audit = Audit()
    gate = ClientGate(parse_config({}), audit, listen_address="127.0.0.1:0")
    access = RunAccess(runs, runs.resolver)
    return access, RunRecords(access, runs), store, gate, audit


def _caller(gate: ClientGate, method: str, bots: Selector = "*", agents: Selector = "*") -> Caller:
    """A client admitted by the gate, its refusals bound as `HostServicer._admit` binds them."""
    principal = Principal("client-1", frozenset({"run", "get", "cancel"}), bots=bots, agents=agents)
    return Caller(principal, functools.partial(gate.refuse, Transport(), principal, method))


async def test_a_scoped_client_sees_only_the_runs_of_its_bots_and_never_learns_which_exist() -> None:
    access, _, _, gate, audit = _setup()
    scoped = _caller(gate, "GetRun", bots=["bot-a"])
    assert (await access.visible_run(scoped, "run_a")).run_id == "run_a"
    with pytest.raises(UnauthorizedError):
        await access.visible_run(scoped, "run_b")
    with pytest.raises(UnauthorizedError):  # an unknown run is refused like a foreign one
        await access.visible_run(scoped, "run_missing")
    assert [(r["method"], r["resource"], r["run_id"], r["outcome"]) for r in audit.records] == [
        ("HostService.GetRun", "run:run_b", "run_b", "UNAUTHORIZED"),
        ("HostService.GetRun", "run:run_missing", "run_missing", "UNAUTHORIZED"),
    ]
    assert audit.records[0]["detail"]["client"] == "client-1"
    assert audit.records[0]["detail"]["peer"] == "ipv4:10.0.0.7:5000"

    with pytest.raises(NotFoundError):  # a client that sees every run learns nothing from NOT_FOUND
        await access.visible_run(_caller(gate, "GetRun"), "run_missing")
    assert (await access.visible_run(TRUSTED, "run_b")).run_id == "run_b"
    with pytest.raises(InvalidArgumentError):
        await access.visible_run(TRUSTED, "")
    assert len(audit.records) == 2


async def test_events_are_admitted_only_for_the_bots_and_agents_the_client_may_use() -> None:
    access, _, _, gate, audit = _setup()
    request = host_service_pb2.HostServiceRunRequest()
    request.event.bot_id = "bot-a"
    request.event.input.text = "hi"

    assert await access.admit_event(TRUSTED, request) is None  # (RunService.open resolves it)
    resolution = await access.admit_event(_caller(gate, "Run", bots=["bot-a"]), request)
    assert resolution is not None and resolution.agent is not None and resolution.agent.id == "a"

    with pytest.raises(UnauthorizedError, match="may not send events of bot 'bot-a' to agent 'a'"):
        await access.admit_event(_caller(gate, "Run", agents=["other"]), request)
    request.event.bot_id = "bot-b"
    with pytest.raises(UnauthorizedError, match="may not send events of bot 'bot-b'"):
        await access.admit_event(_caller(gate, "Run", bots=["bot-a"]), request)
    assert [r["resource"] for r in audit.records] == ["bot:bot-a/agent:a", "bot:bot-b/agent:a"]

    request.event.event_type = INTERACTION_SUBMITTED_EVENT
    with pytest.raises(InvalidArgumentError, match="SubmitInteraction only"):  # whoever sends it
        await access.admit_event(TRUSTED, request)


async def test_an_artifact_of_no_run_is_read_only_by_a_client_that_sees_every_run() -> None:
    access, _, _, gate, audit = _setup()
    await access.readable_artifact(_caller(gate, "DownloadArtifact"), "art_1", "")
    await access.readable_artifact(TRUSTED, "art_1", "")
    await access.readable_artifact(_caller(gate, "DownloadArtifact", bots=["bot-a"]), "art_2", "run_a")
    with pytest.raises(UnauthorizedError, match="may not read artifact 'art_1'"):
        await access.readable_artifact(_caller(gate, "DownloadArtifact", bots=["bot-a"]), "art_1", "")
    with pytest.raises(UnauthorizedError, match="may not see run 'run_b'"):
        await access.readable_artifact(_caller(gate, "DownloadArtifact", bots=["bot-a"]), "art_3", "run_b")
    assert [r["resource"] for r in audit.records] == ["artifact:art_1", "run:run_b"]


async def test_get_and_cancel_answer_the_record_of_a_run_the_client_may_see_only() -> None:
    _, records, store, gate, _ = _setup()
    got = await records.get_run(_caller(gate, "GetRun", bots=["bot-a"]), "run_a")
    assert got.run.run_id == "run_a" and got.run.bot_id == "bot-a"
    with pytest.raises(UnauthorizedError):
        await records.cancel_run(_caller(gate, "CancelRun", bots=["bot-a"]), "run_b", "stop")
    assert store.cancels == []  # a refused cancel notes nothing


async def test_a_run_that_ended_or_runs_on_another_replica_is_not_cancelled_here() -> None:
    _, records, store, _, _ = _setup()
    # run_a is RUNNING in the shared ledger but not open in this process: another replica runs it
    with pytest.raises(FailedPreconditionError, match="not open on this host replica") as err:
        await records.cancel_run(TRUSTED, "run_a", "stop")
    assert err.value.metadata == {"runId": "run_a"}
    store.runs["run_a"].status = common_pb2.RUN_STATUS_COMPLETED
    with pytest.raises(FailedPreconditionError, match="already ended"):
        await records.cancel_run(TRUSTED, "run_a", "stop")
    assert store.cancels == []


async def test_a_run_open_here_is_cancelled_through_the_records() -> None:
    runs, store, endpoint = service([result(message_delta=result_pb2.MessageDelta(text="x")), STALL])
    records = RunRecords(RunAccess(runs, runs.resolver), runs)
    request = host_service_pb2.HostServiceRunRequest()
    request.event.input.text = "hi"
    stream = await runs.open(request)
    try:
        run_id = (await stream.__anext__()).accepted.run_id
        await stream.__anext__()  # the delta; the runner then stalls
        answer = await records.cancel_run(TRUSTED, run_id, "stop now")
        assert answer.run.run_id == run_id
        rest = [u async for u in stream]
    finally:
        await stream.aclose()
    assert rest[0].result.run_failed.code == "cancelled"
    assert store.runs[run_id].status == common_pb2.RUN_STATUS_CANCELLED and endpoint.calls[0].cancelled
